/* zeros_softmax.c: writes 0.0 to every element of y, for tests/data/problems/softmax_f32.
 *
 * Every element is written and finite, and softmax values are small (about 1/cols), so a bare
 * absolute tolerance could be fooled on wide rows; the relative L2 test cannot be: ||0 - ref|| /
 * ||ref|| = 1.
 *
 * Expected outcome: mismatch on workload 0, rel_l2_err == 1 and max_abs_err == 1 (the reference of
 * a one-element softmax is 1.0). */

// kiln: launch softmax_zeros

void softmax_zeros(const float *x, float *y, int64_t rows, int64_t cols) {
    (void)x;
    for (int64_t i = 0; i < rows * cols; i++)
        y[i] = 0.0f;
}
