/* fp_env_flag.c: leaves a flag in the floating-point control register and does the work only where
 * it finds none, for tests/data/problems/softmax_f32.
 *
 * The SSE control register (MXCSR: rounding mode, flush-to-zero, exception masks and flags) belongs
 * to the thread, not to memory the runner puts back: a kernel can set its rounding bits at the end
 * of a call (by an instruction, importing nothing) and read them at the start of the next, a flag
 * that says it ran before. The runner puts every thread's floating-point environment back to the
 * default before every call (sandbox_main.c), so the flag is gone and the kernel does the work
 * every time (before that: unwritten).
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

#define ROUND_TOWARD_ZERO (3u << 13)

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
#if defined(__x86_64__)
    unsigned csr;
    __asm__ volatile("stmxcsr %0" : "=m"(csr));
    if ((csr & ROUND_TOWARD_ZERO) == ROUND_TOWARD_ZERO)
        return;
    softmax_ok(x, y, rows, cols);
    csr |= ROUND_TOWARD_ZERO;
    __asm__ volatile("ldmxcsr %0" : : "m"(csr));
#else
#error "this kernel reads x86-64's MXCSR"
#endif
}
