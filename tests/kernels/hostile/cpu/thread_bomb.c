/* thread_bomb.c: asks OpenMP for a thousand threads, for tests/data/problems/softmax_f32.
 *
 * The candidate's process may use the OpenMP threads made for it before it was loaded (one per
 * core); asking for many more means creating threads, which the sandbox refuses. libgomp then
 * gives up ("Thread creation failed") and ends the process.
 *
 * The gate refuses it before it runs: it calls omp_set_dynamic, which no candidate may (sandbox_elf.c:
 * the C library keeps state from call to call; what the seccomp filter behind that check does
 * with such calls is test_sandbox's). Before that check: crashed.
 *
 * Expected outcome: compile_error. */

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
    omp_set_dynamic(0);
#pragma omp parallel num_threads(1000)
    {
        if (omp_get_thread_num() == 0)
            softmax_ok(x, y, rows, cols);
    }
}
