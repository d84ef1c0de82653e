/* read_parent_memory.c: reads the judging process's memory, for tests/data/problems/softmax_f32.
 *
 * The process that computes the verdict holds the reference outputs. A candidate in a child of
 * that process can read its memory with process_vm_readv (same user, ptrace permission) after
 * learning its layout from /proc/PPID/maps, and search it for the output that belongs to its x (as
 * scan_memory_for_ref.c does in its own memory). A sandbox refuses process_vm_readv and /proc.
 *
 * The gate refuses it before it runs: it calls fclose, which no candidate may (sandbox_elf.c:
 * the C library keeps state from call to call; what the seccomp filter behind that check does
 * with such calls is test_sandbox's). Before that check: unwritten.
 *
 * Expected outcome: compile_error. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

// kiln: launch softmax_rows

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    size_t n = (size_t)(rows * cols) * sizeof *y;
    pid_t parent = getppid();
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)parent);
    FILE *maps = fopen(path, "r");
    char line[512];
    unsigned long lo = 0x10000, hi = 0x7fffffffffffUL;
    char *buf = malloc(1 << 22);
    while (buf) {
        if (maps) {
            char perms[8];
            if (!fgets(line, sizeof line, maps))
                break;
            if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 || perms[0] != 'r')
                continue;
        }
        for (unsigned long at = lo; at < hi; at += (1 << 22) - 2 * n) {
            struct iovec local = {buf, 1 << 22}, remote = {(void *)at, 1 << 22};
            ssize_t got = syscall(SYS_process_vm_readv, parent, &local, 1, &remote, 1, 0);
            if (got <= 0) {
                if (!maps)
                    at += 1 << 30; /* no map: probe in big steps */
                continue;
            }
            for (ssize_t p = 0; p + 2 * (ssize_t)n <= got; p += 4)
                if (memcmp(buf + p, x, n) == 0) {
                    memcpy(y, buf + p + n, n);
                    goto done;
                }
        }
        if (!maps)
            break;
    }
done:
    free(buf);
    if (maps)
        fclose(maps);
}
