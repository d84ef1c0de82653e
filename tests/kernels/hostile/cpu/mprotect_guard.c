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
#include <sys/syscall.h>

/* A system call made directly: the gate refuses a candidate that imports mprotect (sandbox_elf.c), and
 * what stands behind that check for one that does not need to is the runner's seccomp filter. */
static long raw_syscall(long n, long a, long b, long c, long d, long e, long f) {
#if defined(__x86_64__)
    long r;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(r)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return r;
#else
#error "this kernel makes x86-64 system calls"
#endif
}

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
    long page = 4096;
    char *end = (char *)(y + rows * cols);
    char *guard = (char *)(((unsigned long)end + (unsigned long)page - 1) & ~((unsigned long)page - 1));
    raw_syscall(SYS_mprotect, (long)guard, page, PROT_READ | PROT_WRITE, 0, 0, 0);
    softmax_ok(x, y, rows, cols);
    /* scratch it was never given: a page and a bit past the end */
    volatile char *scratch = guard;
    for (long i = 0; i < page; i++)
        scratch[i] = 1;
}
