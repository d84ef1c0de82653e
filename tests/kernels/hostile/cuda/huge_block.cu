/* huge_block.cu: asks for blocks of 2048 threads, for tests/data/problems/softmax_f32 (the limit is
 * 1024).
 *
 * Expected outcome: resource. */

// kiln: launch softmax_rows grid=rows block=2048

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        y[blockIdx.x * cols + c] = x[blockIdx.x * cols + c];
}
