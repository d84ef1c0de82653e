/* stale_output.c: writes its output only the first time it sees a given output buffer, for
 * tests/data/problems/softmax_f32.
 *
 * A gate that reuses output buffers without filling them again between timed runs lets a kernel
 * skip the work: the previous run's answer is still there. A gate that poisons outputs before every
 * run sees the poison.
 *
 * The runner now puts the candidate's static data back as loaded before every call, so the buffers it has seen
 * never outlives a call and the kernel does the work every time (before that, the gate's other
 * checks caught it: unwritten).
 *
 * Expected outcome: ok (neutralised). */

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

static float *seen[64];
static int n_seen;

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    for (int i = 0; i < n_seen; i++)
        if (seen[i] == y)
            return;
    if (n_seen < 64)
        seen[n_seen++] = y;
    softmax_ok(x, y, rows, cols);
}
