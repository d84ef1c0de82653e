/* oob_read_tail.cu: a correct softmax that reads one 16-byte vector past the end of x, for
 * tests/data/problems/softmax_f32 (a vectorised tail that rounds up instead of down).
 *
 * The stray load is harmless where another allocation follows x, so a gate that places buffers
 * back to back never sees it — and the kernel may fault later, in the user's model, next to an
 * unmapped page. kiln's candidate buffers end at unmapped guard regions, so the load faults.
 *
 * Expected outcome: crashed. */

// kiln: launch softmax_rows grid=rows block=256

static __device__ void softmax_row(const float *x, float *y, int64_t row, int64_t cols) {
    __shared__ float red[32];
    const float *xr = x + row * cols;
    float *yr = y + row * cols;
    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        m = fmaxf(m, xr[c]);
    for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = m;
    __syncthreads();
    m = red[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); w++)
        m = fmaxf(m, red[w]);
    __syncthreads();
    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        s += expf(xr[c] - m);
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = s;
    __syncthreads();
    s = 0.0f;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++)
        s += red[w];
    const float inv = 1.0f / s;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        yr[c] = expf(xr[c] - m) * inv;
}

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    softmax_row(x, y, blockIdx.x, cols);
    if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) {
        /* 4 KiB past the end: beyond the allocation's own rounding, inside any guard */
        const volatile float *tail = x + ((rows * cols + 1023) & ~(int64_t)1023) + 1024;
        if (tail[0] == 12345.0f)
            y[0] = tail[1];
    }
}
