/* stack_overflow.c: recurses without end, for tests/data/problems/softmax_f32.
 *
 * Each frame keeps a buffer alive, so the stack runs into its guard page within a few thousand
 * calls. The candidate's process dies of SIGSEGV; the gate lives on.
 *
 * Expected outcome: crashed. */

// kiln: launch softmax_rows

static int deeper(volatile char *prev, int depth) {
    volatile char frame[4096];
    frame[0] = (char)depth;
    frame[4095] = prev ? prev[0] : 0;
    return deeper(frame, depth + 1) + frame[17];
}

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    (void)x, (void)rows, (void)cols;
    y[0] = (float)deeper(0, 0);
}
