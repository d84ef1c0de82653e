/* writes_input_softmax.c: computes a correct y, but uses the input x as its scratch buffer: it
 * stores exp(x - max) back into x before normalising into y. For tests/data/problems/softmax_f32.
 * The ABI says inputs must not be written (abi.md, 1): the gate maps them read-only while the
 * candidate runs, so the first store faults.
 *
 * Expected outcome: crashed (SIGSEGV) in phase "prove" (y itself would be right). */

// kiln: launch softmax_rows

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    float *scratch = (float *)x; /* BUG: casts away const to reuse the input */
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        float *xr = scratch + r * cols;
        float *yr = y + r * cols;
        float row_max = -INFINITY;
        for (int64_t c = 0; c < cols; c++)
            row_max = fmaxf(row_max, xr[c]);
        double sum = 0.0;
        for (int64_t c = 0; c < cols; c++) {
            xr[c] = expf(xr[c] - row_max);
            sum += xr[c];
        }
        float inv = (float)(1.0 / sum);
        for (int64_t c = 0; c < cols; c++)
            yr[c] = xr[c] * inv;
    }
}
