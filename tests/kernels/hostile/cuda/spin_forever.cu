/* spin_forever.cu: never finishes, for tests/data/problems/softmax_f32 (a flag nothing sets, read
 * through a volatile pointer so the loop stays).
 *
 * Expected outcome: timeout. */

// kiln: launch softmax_rows grid=rows block=32

__device__ int kiln_hostile_release;

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    while (*(volatile int *)&kiln_hostile_release == 0) {
    }
    y[0] = x[0];
}
