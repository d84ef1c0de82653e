/* crash_softmax.c: writes through a null pointer, for tests/data/problems/softmax_f32. The pointer
 * is read through a volatile so that the compiler cannot see it is null (GCC would otherwise turn
 * the store into a trap instruction, SIGILL, instead of a real faulting store).
 *
 * Expected outcome: crashed in phase "prove" on workload 0, signal "SIGSEGV". */

// kiln: launch softmax_crash

static float *volatile kiln_test_table = 0;

void softmax_crash(const float *x, float *y, int64_t rows, int64_t cols) {
    float *table = kiln_test_table;
    for (int64_t i = 0; i < rows * cols; i++) {
        table[i] = x[i]; /* table is NULL: SIGSEGV */
        y[i] = 1.0f / (float)cols;
    }
}
