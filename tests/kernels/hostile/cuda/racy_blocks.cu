/* racy_blocks.cu: a softmax whose row sum is accumulated by 32 blocks per row with plain (not
 * atomic) read-modify-writes into global memory, for tests/data/problems/softmax_f32.
 *
 * Each block adds its slice's sum into acc[row] with `acc[row] += s`; concurrent blocks lose each
 * other's updates, so the normalisation is wrong on most launches of the long rows. The kernel
 * also relies on a grid-wide barrier it does not have (a spin on a counter), so on other launches
 * it reads a sum that is not finished.
 *
 * Expected outcome: mismatch or nan (a row whose sum is read as 0 divides into infinities). */

// kiln: launch softmax_rows grid=(rows, 32) block=128
// kiln: scratch rows*8+8

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols,
                                        void *kiln_scratch) {
    float *acc = (float *)kiln_scratch;
    const float *xr = x + blockIdx.x * cols;
    float *yr = y + blockIdx.x * cols;
    const int64_t per = (cols + gridDim.y - 1) / gridDim.y;
    const int64_t lo = blockIdx.y * per, hi = min(cols, lo + per);
    float m = -INFINITY;
    for (int64_t c = 0; c < cols; c++)
        m = fmaxf(m, xr[c]);
    float s = 0.0f;
    for (int64_t c = lo + threadIdx.x; c < hi; c += blockDim.x)
        s += expf(xr[c] - m);
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) {
        volatile float *a = acc + blockIdx.x;
        *a = *a + s; /* BUG: not atomic */
    }
    __syncthreads();
    const float total = *(volatile float *)(acc + blockIdx.x); /* BUG: not all blocks are done */
    for (int64_t c = lo + threadIdx.x; c < hi; c += blockDim.x)
        yr[c] = expf(xr[c] - m) / total;
}
