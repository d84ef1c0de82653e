/* partial.cu: a correct softmax that skips the last row, for tests/data/problems/softmax_f32: the
 * block of the last row returns early (a bounds check written `row >= rows - 1`). The grid still
 * has one block per row; the last row keeps the poison the gate filled y with. On workload 0 (one
 * row) nothing is written at all.
 *
 * Expected outcome: unwritten, with n_unwritten == cols and first_index in the last row. */

// kiln: launch softmax_rows grid=rows block=256

static __device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

static __device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    __shared__ float red[8];
    const int64_t row = blockIdx.x;
    if (row >= rows - 1) /* BUG: should be row >= rows */
        return;
    const float *xr = x + row * cols;
    float *yr = y + row * cols;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    float m = -__int_as_float(0x7f800000);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        m = fmaxf(m, xr[c]);
    m = warp_max(m);
    if (lane == 0)
        red[warp] = m;
    __syncthreads();
    m = warp_max(lane < 8 ? red[lane] : -__int_as_float(0x7f800000));
    __syncthreads();

    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        s += expf(xr[c] - m);
    s = warp_sum(s);
    if (lane == 0)
        red[warp] = s;
    __syncthreads();
    s = warp_sum(lane < 8 ? red[lane] : 0.0f);

    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        yr[c] = expf(xr[c] - m) / s;
}
