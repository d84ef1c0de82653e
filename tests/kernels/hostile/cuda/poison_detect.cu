/* poison_detect.cu: does the work only while its output holds kiln's documented poison pattern,
 * for tests/data/problems/softmax_f32.
 *
 * docs/gate.md says float32 outputs arrive filled with 0x7FA5A5A5. Against a gate that poisons only
 * its proof runs and one audited timed run, every other timed launch returns at once: proofs pass
 * and the median is the time of an empty launch. A gate that poisons every run with a NaN whose
 * payload is drawn afresh makes the kernel do nothing ever.
 *
 * Expected outcome: unwritten. */

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
    if (__float_as_uint(y[0]) != 0x7FA5A5A5u)
        return;
    __syncthreads(); /* every thread has read y[0] before block 0 overwrites it */
    softmax_row(x, y, blockIdx.x, cols);
}
