/* partial_write.c: computes every row but the last, for tests/data/problems/softmax_f32.
 *
 * Expected outcome: unwritten. */

// kiln: launch softmax_rows

static void softmax_ok(const float *x, float *y, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; c++)
            m = fmaxf(m, xr[c]);
        double s = 0.0;
        for (int64_t c = 0; c < cols; c++)
            s += expf(xr[c] - m);
        float inv = (float)(1.0 / s);
        for (int64_t c = 0; c < cols; c++)
            yr[c] = expf(xr[c] - m) * inv;
    }
}

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    if (rows > 1)
        softmax_ok(x, y, rows - 1, cols);
}
