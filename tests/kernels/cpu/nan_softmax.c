/* nan_softmax.c: a correct softmax that then stores a quiet NaN into one element, at flat index
 * (rows * cols) / 2, for tests/data/problems/softmax_f32. A quiet NaN (0x7FC00000) is not the
 * gate's poison pattern (a signalling NaN), so the element counts as written.
 *
 * Expected outcome: nan on workload 0, with index == (rows * cols) / 2 == 0 and value "nan". */

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
    y[(rows * cols) / 2] = NAN;
}
