/* close_fds.c: closes every file descriptor it holds, then computes nothing, for
 * tests/data/problems/softmax_f32.
 *
 * The channel through which the candidate's process tells the gate that a call finished is a file
 * descriptor; closing it (and everything else) leaves the gate waiting or reading end of file. The
 * gate must take that as the runner dying, never as a verdict.
 *
 * Expected outcome: crashed. */

#include <sys/syscall.h>

/* A system call made directly: the gate refuses a candidate that imports close (sandbox_elf.c), and
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

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    (void)x, (void)y, (void)rows, (void)cols;
    for (int fd = 0; fd < 1024; fd++)
        raw_syscall(SYS_close, fd, 0, 0, 0, 0, 0);
}
