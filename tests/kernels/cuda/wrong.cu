/* wrong.cu: a softmax for tests/data/problems/softmax_f32 that forgets the cross-warp step of its
 * block reductions: each warp uses its own warp's max and sum. While a row fits in one warp (cols
 * <= 32: the 1 x 1 and 3 x 7 workloads) that is still right; on the 5 x 4097 workload each of the 8
 * warps normalises by about an eighth of the true sum, so every output is several times too large.
 *
 * Expected outcome: mismatch on workload 2, with max_abs_err > 0 and rel_l2_err far over 1e-5. */

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
    const int64_t row = blockIdx.x;
    if (row >= rows)
        return;
    const float *xr = x + row * cols;
    float *yr = y + row * cols;
    float m = -__int_as_float(0x7f800000);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        m = fmaxf(m, xr[c]);
    m = warp_max(m); /* BUG: a warp's max, not the block's */
    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        s += expf(xr[c] - m);
    s = warp_sum(s); /* BUG: a warp's sum, not the block's */
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        yr[c] = expf(xr[c] - m) / s;
}
