/* compile_error.c: a softmax for tests/data/problems/softmax_f32 with a typo: the normalisation
 * loop uses `row_sum`, a name that was never declared (the accumulator is called `sum`).
 *
 * Expected outcome: compile_error, with the compiler's log naming the line marked ERROR-LINE below
 * (tests/py/test_gate_cpu.py finds the line by that marker). */

// kiln: launch softmax_rows

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float row_max = -INFINITY;
        for (int64_t c = 0; c < cols; c++)
            row_max = fmaxf(row_max, xr[c]);
        float sum = 0.0f;
        for (int64_t c = 0; c < cols; c++)
            sum += expf(xr[c] - row_max);
        for (int64_t c = 0; c < cols; c++)
            yr[c] = expf(xr[c] - row_max) / row_sum; /* ERROR-LINE: row_sum is undeclared */
    }
}
