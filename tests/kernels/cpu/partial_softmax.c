/* partial_softmax.c: a correct softmax that skips the last row (the loop bound is rows - 1: an
 * off-by-one left behind when a tail row was meant to be handled separately). For
 * tests/data/problems/softmax_f32.
 *
 * The last row keeps the poison the gate filled y with. On the first workload (one row) nothing at
 * all is written.
 *
 * Expected outcome: unwritten, with n_unwritten == cols and first_index in the last row. */

// kiln: launch softmax_rows

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows - 1; r++) { /* BUG: should be r < rows */
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
