/* compile_error.cu: does not compile (an undeclared identifier), for
 * tests/data/problems/softmax_f32.
 *
 * Expected outcome: compile_error. */

// kiln: launch softmax_rows grid=rows block=32

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    y[blockIdx.x * cols] = x[blockIdx.x * cols] * not_declared_anywhere;
}
