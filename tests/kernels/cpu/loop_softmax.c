/* loop_softmax.c: never returns, for tests/data/problems/softmax_f32. It spins until a flag changes
 * that nothing ever changes; the flag is volatile, so the compiler must re-read it on every
 * iteration and cannot delete the loop (C11 6.8.5p6 lets a compiler assume that a loop terminates
 * only when the loop performs no I/O and accesses no volatile object).
 *
 * Expected outcome: timeout in phase "prove" (the first run of the first workload), after
 * --timeout. */

// kiln: launch softmax_spin

static volatile int kiln_test_release = 0;

void softmax_spin(const float *x, float *y, int64_t rows, int64_t cols) {
    while (!kiln_test_release) {
    }
    for (int64_t i = 0; i < rows * cols; i++)
        y[i] = x[i];
}
