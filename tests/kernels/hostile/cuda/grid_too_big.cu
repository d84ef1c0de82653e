/* grid_too_big.cu: a grid whose y dimension is over the limit of 65535, for
 * tests/data/problems/softmax_f32.
 *
 * Expected outcome: resource. */

// kiln: launch softmax_rows grid=(rows, 100000) block=32

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    if (blockIdx.y == 0 && threadIdx.x == 0)
        y[blockIdx.x * cols] = x[blockIdx.x * cols];
}
