/* trap.cu: executes a trap instruction, for tests/data/problems/softmax_f32.
 *
 * Expected outcome: crashed. */

// kiln: launch softmax_rows grid=rows block=32

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    if (threadIdx.x == 0)
        __trap();
}
