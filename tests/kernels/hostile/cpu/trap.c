/* trap.c: executes a trap instruction, for tests/data/problems/softmax_f32.
 *
 * Expected outcome: crashed. */

// kiln: launch softmax_rows

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    (void)x, (void)y, (void)cols;
    if (rows > 0)
        __builtin_trap();
}
