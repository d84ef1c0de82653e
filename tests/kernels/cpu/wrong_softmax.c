/* wrong_softmax.c: a softmax for tests/data/problems/softmax_f32 that uses exp2f where expf was
 * meant — the usual "exp2 is faster" rewrite that forgot to scale the argument by log2(e). The
 * result is finite, positive and sums to 1 per row, so it looks plausible; it is simply the wrong
 * distribution (a softmax at temperature 1/ln 2).
 *
 * On the first workload (rows = cols = 1) the answer is exactly 1.0 either way, so that workload
 * passes; the second (3 x 7) fails.
 *
 * Expected outcome: mismatch on workload 1, with max_abs_err > 0 and rel_l2_err over the tolerance.
 */

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
            float e = exp2f(xr[c] - row_max); /* BUG: needs (xr[c] - row_max) * log2(e) */
            yr[c] = e;
            sum += e;
        }
        float inv = (float)(1.0 / sum);
        for (int64_t c = 0; c < cols; c++)
            yr[c] *= inv;
    }
}
