/* good_softmax_f32.cu: a correct CUDA softmax over the last axis, for
 * tests/data/problems/softmax_f32.
 *
 * One block of 256 threads per row, any number of columns: three strided passes over the row (max,
 * sum of exp(x - max), write), each pass followed by a block reduction — warp shuffles, then one
 * value per warp through shared memory. Simple rather than fast; it is the control the failure
 * classes are measured against, and the kernel that must still pass after a crash ("the run goes
 * on").
 *
 * Expected outcome: ok. */

// kiln: launch softmax_rows grid=rows block=256

#define SOFTMAX_THREADS 256
#define SOFTMAX_WARPS (SOFTMAX_THREADS / 32)

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

/* Every thread gets the block's maximum (is_max) or sum. red holds one slot per warp; the trailing
 * __syncthreads lets the caller reuse red for the next reduction. */
static __device__ __forceinline__ float block_reduce(float v, float *red, bool is_max) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = is_max ? warp_max(v) : warp_sum(v);
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    v = lane < SOFTMAX_WARPS ? red[lane] : (is_max ? -__int_as_float(0x7f800000) : 0.0f);
    v = is_max ? warp_max(v) : warp_sum(v);
    __syncthreads();
    return v;
}

extern "C" __global__ void __launch_bounds__(SOFTMAX_THREADS)
softmax_rows(const float *__restrict__ x, float *__restrict__ y, int64_t rows, int64_t cols) {
    __shared__ float red[SOFTMAX_WARPS];
    const int64_t row = blockIdx.x;
    if (row >= rows)
        return;
    const float *xr = x + row * cols;
    float *yr = y + row * cols;

    float m = -__int_as_float(0x7f800000);
    for (int64_t c = threadIdx.x; c < cols; c += SOFTMAX_THREADS)
        m = fmaxf(m, xr[c]);
    m = block_reduce(m, red, true);

    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += SOFTMAX_THREADS)
        s += expf(xr[c] - m);
    s = block_reduce(s, red, false);

    const float inv = 1.0f / s;
    for (int64_t c = threadIdx.x; c < cols; c += SOFTMAX_THREADS)
        yr[c] = expf(xr[c] - m) * inv;
}
