/* mprotect_guard.c: unprotects the guard page after its output and writes there, for
 * tests/data/problems/softmax_f32.
 *
 * The cpu gate places each buffer against a PROT_NONE page so that a write past the end faults.
 * A candidate that may call mprotect() simply makes that page writable first: the stray store (a
 * "zero the padding" bug, or scratch space it was never given) then goes unseen and the kernel,
 * otherwise correct, passes. A sandbox refuses to change the protection of memory the candidate
 * was given, so the store faults.
 *
 * Expected outcome: crashed. */

#include <sys/mman.h>
#include <unistd.h>

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
    long page = sysconf(_SC_PAGESIZE);
    char *end = (char *)(y + rows * cols);
    char *guard = (char *)(((unsigned long)end + (unsigned long)page - 1) & ~((unsigned long)page - 1));
    mprotect(guard, (size_t)page, PROT_READ | PROT_WRITE);
    softmax_ok(x, y, rows, cols);
    /* scratch it was never given: a page and a bit past the end */
    volatile char *scratch = guard;
    for (long i = 0; i < page; i++)
        scratch[i] = 1;
}
