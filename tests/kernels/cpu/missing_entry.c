/* missing_entry.c: the launch line names `softmax_rows`, but the function defined below is called
 * `softmax_row` (a rename that missed the directive). The file compiles; the entry point does not
 * exist.
 *
 * Expected outcome: compile_error, with a message that names the missing entry `softmax_rows`. */

// kiln: launch softmax_rows

void softmax_row(const float *x, float *y, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float row_max = -INFINITY;
        for (int64_t c = 0; c < cols; c++)
            row_max = fmaxf(row_max, xr[c]);
        float sum = 0.0f;
        for (int64_t c = 0; c < cols; c++)
            sum += expf(xr[c] - row_max);
        for (int64_t c = 0; c < cols; c++)
            yr[c] = expf(xr[c] - row_max) / sum;
    }
}
