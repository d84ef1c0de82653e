/* infinite_loop.c: never returns and never speaks, for tests/data/problems/softmax_f32.
 *
 * Expected outcome: timeout. */

// kiln: launch softmax_rows

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    (void)x, (void)cols;
    volatile int64_t spin = rows;
    while (spin > 0)
        y[0] = (float)spin;
}
