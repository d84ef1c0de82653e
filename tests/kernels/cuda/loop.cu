/* loop.cu: never finishes, for tests/data/problems/softmax_f32. Every thread spins on a flag in
 * global memory that nothing sets; the flag is read through a volatile pointer, so each iteration
 * really loads it and the compiler cannot delete the loop.
 *
 * Expected outcome: timeout in phase "prove" (the watchdog kills the gate's child after --timeout).
 */

// kiln: launch softmax_spin grid=rows block=32

__device__ int kiln_test_release = 0;

extern "C" __global__ void softmax_spin(const float *x, float *y, int64_t rows, int64_t cols) {
    volatile int *release = &kiln_test_release;
    while (*release == 0) {
    }
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < rows * cols;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = x[i];
}
