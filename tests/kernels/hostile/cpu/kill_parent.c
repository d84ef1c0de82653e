/* kill_parent.c: kills the kiln processes that would judge it, for tests/data/problems/softmax_f32.
 *
 * Walks up its ancestors (its parent, the parent's parent, ...) and sends SIGKILL to every one
 * whose command name is "kiln": the gate and `kiln eval` itself, which then leave no verdict at
 * all. Processes of other names (a test runner, a shell) are left alone. A sandbox refuses signals
 * to other processes; the kernel then computes nothing.
 *
 * The gate refuses it before it runs: it calls __isoc99_fscanf, which no candidate may (sandbox_elf.c:
 * the C library keeps state from call to call; what the seccomp filter behind that check does
 * with such calls is test_sandbox's). Before that check: unwritten.
 *
 * Expected outcome: compile_error. */

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

// kiln: launch softmax_rows

static pid_t parent_of(pid_t pid, char *comm, size_t cap) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    int ppid = 0;
    char name[256] = "";
    if (f) {
        if (fscanf(f, "%*d (%255[^)]) %*c %d", name, &ppid) != 2)
            ppid = 0;
        fclose(f);
    }
    snprintf(comm, cap, "%s", name);
    return (pid_t)ppid;
}

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    (void)x, (void)y, (void)rows, (void)cols;
    pid_t victims[8];
    int n = 0;
    char comm[256];
    pid_t p = getppid();
    for (int depth = 0; depth < 8 && p > 1; depth++) {
        pid_t up = parent_of(p, comm, sizeof comm);
        if (strcmp(comm, "kiln") == 0)
            victims[n++] = p;
        p = up;
    }
    if (n == 0) /* no /proc view: the parent is the gate whatever its name */
        victims[n++] = getppid();
    for (int i = 0; i < n; i++)
        kill(victims[i], SIGKILL);
}
