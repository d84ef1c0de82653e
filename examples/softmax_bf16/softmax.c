/* softmax.c: the bundled example's CPU kernel: y = softmax(x, -1) in fp32 over rows of bf16, one row per
 * OpenMP iteration, three passes over a row that stays in cache (max, sum of exp, normalise). */
// kiln: launch softmax_rows
void softmax_rows(const kiln_bf16 *x, kiln_bf16 *y, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const kiln_bf16 *xr = x + r * cols;
        kiln_bf16 *yr = y + r * cols;
        float m = -INFINITY;
        for (int64_t i = 0; i < cols; i++)
            m = fmaxf(m, kiln_bf16_to_float(xr[i]));
        float sum = 0.0f;
        for (int64_t i = 0; i < cols; i++)
            sum += expf(kiln_bf16_to_float(xr[i]) - m);
        float inv = 1.0f / sum;
        for (int64_t i = 0; i < cols; i++)
            yr[i] = kiln_float_to_bf16(expf(kiln_bf16_to_float(xr[i]) - m) * inv);
    }
}
