/* ptrace_parent.c: attaches to the judging process with ptrace, for
 * tests/data/problems/softmax_f32.
 *
 * With ptrace a candidate can stop its judge, read and write its memory and registers (rewrite the
 * verdict, the reference, the timer). Here it attaches, peeks one word to prove it could, detaches,
 * and computes nothing. A sandbox refuses ptrace.
 *
 * The gate refuses it before it runs: it calls ptrace, which no candidate may (sandbox_elf.c:
 * the C library keeps state from call to call; what the seccomp filter behind that check does
 * with such calls is test_sandbox's). Before that check: unwritten.
 *
 * Expected outcome: compile_error. */

#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

// kiln: launch softmax_rows

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    (void)x, (void)y, (void)rows, (void)cols;
    pid_t parent = getppid();
    if (ptrace(PTRACE_ATTACH, parent, 0, 0) == 0) {
        waitpid(parent, 0, 0);
        (void)ptrace(PTRACE_PEEKDATA, parent, (void *)0x400000, 0);
        ptrace(PTRACE_DETACH, parent, 0, 0);
    }
}
