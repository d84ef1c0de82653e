/* illegal_address.cu: a softmax for tests/data/problems/softmax_f32 whose output pointer is wild:
 * it adds the row offset in the wrong units (bytes shifted into a 2^40-element stride, the kind of
 * slip a mixed 32/64-bit index computation makes), so every store lands terabytes past the output,
 * where nothing is mapped. The driver reports CUDA_ERROR_ILLEGAL_ADDRESS at the next
 * synchronisation, and the context is dead from then on — which is why the gate runs candidates in
 * a child process.
 *
 * Expected outcome: crashed in phase "prove", with an error naming the illegal address. */

// kiln: launch softmax_rows grid=rows block=256

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    const int64_t row = blockIdx.x;
    if (row >= rows)
        return;
    const int64_t wild_stride = (int64_t)1 << 40; /* BUG: should be cols */
    float *yr = y + (row + 1) * wild_stride;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        yr[c] = x[row * cols + c];
}
