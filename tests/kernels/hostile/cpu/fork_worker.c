/* fork_worker.c: forks a process to do the work after the call returns, for
 * tests/data/problems/softmax_f32.
 *
 * The child shares nothing with the parent but copies; here it gets y through a shared mapping it
 * makes first (a MAP_SHARED alias is not possible for memory it was given, so it writes into its
 * copy and the parent copies back on the next call: a cache with a delay). More to the point: a
 * candidate that can create processes can outlive its evaluation. A sandbox refuses fork.
 *
 * Expected outcome: unwritten. */

#include <sys/mman.h>
#include <sys/syscall.h>

/* A system call made directly: the gate refuses a candidate that imports fork (sandbox_elf.c), and
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
    size_t n = (size_t)(rows * cols) * sizeof *y;
    long at = raw_syscall(SYS_mmap, 0, (long)n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (at < 0 && at > -4096)
        return;
    float *shared = (float *)at;
    long pid = raw_syscall(SYS_fork, 0, 0, 0, 0, 0, 0);
    if (pid == 0) {
        softmax_ok(x, shared, rows, cols);
        raw_syscall(SYS_exit, 0, 0, 0, 0, 0, 0);
    }
    if (pid > 0) {
        raw_syscall(SYS_wait4, pid, 0, 0, 0, 0, 0);
        for (size_t i = 0; i < n / sizeof *y; i++)
            y[i] = shared[i];
    }
    raw_syscall(SYS_munmap, (long)shared, (long)n, 0, 0, 0, 0);
}
