/* oob_softmax.c: a correct softmax that also writes one element past the end of y (the classic
 * `<=`), for tests/data/problems/softmax_f32. On cpu the gate places every buffer against a
 * PROT_NONE guard page, so the stray store faults — at the latest on the 64 x 256 workload, whose
 * 65536-byte output fills its last page exactly (buffers start 16-byte aligned, so a smaller output
 * may end a few bytes short of the guard page and the store lands in that slack).
 *
 * Expected outcome: crashed in phase "prove", signal "SIGSEGV". */

// kiln: launch softmax_rows

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float row_max = -INFINITY;
        for (int64_t c = 0; c < cols; c++)
            row_max = fmaxf(row_max, xr[c]);
        double sum = 0.0;
        for (int64_t c = 0; c < cols; c++)
            sum += expf(xr[c] - row_max);
        float inv = (float)(1.0 / sum);
        for (int64_t c = 0; c < cols; c++)
            yr[c] = expf(xr[c] - row_max) * inv;
    }
    /* BUG: "zero the padding", but there is none: this is y[rows * cols], one past the end. */
    float *volatile end = y + rows * cols;
    *end = 0.0f;
}
