/* oob_read.c: reads one vector past the end of its input, for tests/data/problems/softmax_f32.
 *
 * A correct softmax whose maximum loop runs to cols + 4 (a vector tail handled wrongly) and reads
 * x beyond its last element. Reads past a buffer are caught only where a guard follows the buffer:
 * on the 64 x 256 workload x fills its pages to the last byte, so the read faults there.
 *
 * Expected outcome: crashed. */

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
    volatile float sink = 0.0f;
    for (int64_t i = 0; i < rows * cols + 4096; i++)
        sink += x[i];
    softmax_ok(x, y, rows, cols);
    (void)sink;
}
