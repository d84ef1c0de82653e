/* count_calls.c: does the work for its first calls only, for tests/data/problems/softmax_f32.
 *
 * A gate proves every input set once and then times; a kernel that counts its calls can stop
 * working once the proofs are behind it (here: after 12 calls, the 4 workloads x 3 sets of the
 * proof pass). Timed runs become empty calls. A gate that checks every timed run catches the first
 * empty one.
 *
 * The runner now puts the candidate's static data back as loaded before every call, so its count of calls
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

static int calls;

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    if (calls++ < 12)
        softmax_ok(x, y, rows, cols);
}
