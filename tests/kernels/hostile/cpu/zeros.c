/* zeros.c: writes zeros everywhere, for tests/data/problems/softmax_f32: every element written, so
 * only the values can fail it (a softmax of long rows is small everywhere: the relative L2 check is
 * what stops zeros from passing a bare absolute tolerance).
 *
 * Expected outcome: mismatch. */

// kiln: launch softmax_rows

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    (void)x;
    for (int64_t i = 0; i < rows * cols; i++)
        y[i] = 0.0f;
}
