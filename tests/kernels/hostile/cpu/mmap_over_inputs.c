/* mmap_over_inputs.c: replaces the pages of its read-only input with writable ones, for
 * tests/data/problems/softmax_f32.
 *
 * Inputs are mapped read-only while a candidate runs. A candidate that may map memory over them
 * (mmap with MAP_FIXED at their address) gets writable pages there — losing the data, but keeping
 * the store that follows from faulting, and the gate's "inputs unchanged" check then compares
 * against pages it no longer shares. A sandbox refuses to map, unmap or re-protect memory the
 * candidate was given; the store then faults.
 *
 * Expected outcome: crashed. */

#include <sys/mman.h>
#include <sys/syscall.h>

/* A system call made directly: the gate refuses a candidate that imports mmap (sandbox_elf.c), and
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
    softmax_ok(x, y, rows, cols);
    unsigned long page = 4096;
    char *start = (char *)((unsigned long)x & ~(page - 1));
    size_t len = ((size_t)((char *)(x + rows * cols) - start) + page - 1) & ~(page - 1);
    raw_syscall(SYS_mmap, (long)start, (long)len, PROT_READ | PROT_WRITE,
                MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    raw_syscall(SYS_munmap, (long)start, 0, 0, 0, 0, 0); /* a second way in, for a filter that watches only mmap */
    ((volatile float *)x)[0] = 1.0f;
}
