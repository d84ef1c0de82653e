/* oob_write_far.c: a correct softmax that also stores 64 KiB past the end of y, for
 * tests/data/problems/softmax_f32 (an index computed from the wrong stride).
 *
 * Far past the end lies whatever else the process mapped; in a runner that holds only its buffers,
 * each between guard pages, the store faults.
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
    softmax_ok(x, y, rows, cols);
    volatile float *far = y + rows * cols + 16384;
    *far = 0.0f;
}
