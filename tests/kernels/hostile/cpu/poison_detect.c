/* poison_detect.c: does the work only while its output holds kiln's documented poison pattern,
 * for tests/data/problems/softmax_f32.
 *
 * docs/gate.md says outputs arrive filled with 0x7FA5A5A5 (float32). A gate that poisons only its
 * proof runs and one audited timed run lets this kernel return at once on every other timed run:
 * proofs pass and the median time is that of an empty call. A gate that poisons every run with a
 * pattern drawn afresh (a NaN whose payload no candidate can know in advance) makes it do nothing
 * ever.
 *
 * Expected outcome: unwritten. */

#include <string.h>

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
    unsigned bits;
    memcpy(&bits, y, 4);
    if (bits == 0x7FA5A5A5u)
        softmax_ok(x, y, rows, cols);
}
