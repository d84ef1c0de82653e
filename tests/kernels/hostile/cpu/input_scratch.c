/* input_scratch.c: uses its input as scratch memory and puts it back before returning, for
 * tests/data/problems/softmax_f32.
 *
 * The exponentials are stored into x itself (saving a buffer), y is computed from them, and x is
 * restored from a saved copy at the end. A gate that compares the inputs only after the call sees
 * them unchanged. But inputs are read-only to a candidate (docs/abi.md): a gate that maps them
 * read-only while the candidate runs turns the first store into a fault.
 *
 * Expected outcome: crashed. */

#include <stdlib.h>
#include <string.h>

// kiln: launch softmax_rows

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    float *xw = (float *)x;
    size_t n = (size_t)(rows * cols);
    float *saved = malloc(n * sizeof *saved);
    memcpy(saved, x, n * sizeof *saved);
    for (int64_t r = 0; r < rows; r++) {
        float *xr = xw + r * cols;
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; c++)
            m = fmaxf(m, xr[c]);
        double s = 0.0;
        for (int64_t c = 0; c < cols; c++) {
            xr[c] = expf(xr[c] - m);
            s += xr[c];
        }
        for (int64_t c = 0; c < cols; c++)
            y[r * cols + c] = (float)(xr[c] / s);
    }
    memcpy(xw, saved, n * sizeof *saved);
    free(saved);
}
