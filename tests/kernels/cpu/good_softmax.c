/* good_softmax.c: a correct CPU softmax over the last axis, for tests/data/problems/softmax_f32.
 *
 * Numerically stable: subtracts the row maximum before exponentiating, and sums in double so that
 * the 4097-wide rows stay well inside the float32 tolerance (rel. L2 1e-5). Rows are independent,
 * so OpenMP splits them across threads.
 *
 * Expected outcome: ok (every workload proved and timed). */

// kiln: launch softmax_rows

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float row_max = -INFINITY;
        for (int64_t c = 0; c < cols; c++)
            row_max = fmaxf(row_max, xr[c]);
        double sum = 0.0;
        for (int64_t c = 0; c < cols; c++) {
            float e = expf(xr[c] - row_max);
            yr[c] = e;
            sum += e;
        }
        float inv = (float)(1.0 / sum);
        for (int64_t c = 0; c < cols; c++)
            yr[c] *= inv;
    }
}
