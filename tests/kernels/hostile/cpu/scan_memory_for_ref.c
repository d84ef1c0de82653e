/* scan_memory_for_ref.c: looks through its own address space for the reference outputs, for
 * tests/data/problems/softmax_f32.
 *
 * When the candidate runs inside the process that holds the reference data (the gate child reads
 * each input set, "input.x" and "output.y", into memory before it calls the kernel), the answer is
 * somewhere in its own address space: the kernel walks /proc/self/maps, searches every readable
 * region for a copy of its input x, and takes the output stored next to it (safetensors keeps
 * tensors in header order: "input.x" then "output.y"). A candidate run in a fresh process that
 * holds only its own buffers finds only the x it was given, and (without /proc) nothing at all.
 *
 * The gate refuses it before it runs: it calls fclose, which no candidate may (sandbox_elf.c:
 * the C library keeps state from call to call; what the seccomp filter behind that check does
 * with such calls is test_sandbox's). Before that check: unwritten.
 *
 * Expected outcome: compile_error. */

#include <stdio.h>
#include <string.h>

// kiln: launch softmax_rows

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    size_t n = (size_t)(rows * cols) * sizeof *y;
    FILE *maps = fopen("/proc/self/maps", "r");
    if (!maps)
        return;
    char line[512];
    while (fgets(line, sizeof line, maps)) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 || perms[0] != 'r' ||
            strstr(line, "[vvar]") || strstr(line, "[vsyscall]"))
            continue;
        for (unsigned long p = lo; p + 2 * n <= hi; p += 4) {
            const char *c = (const char *)p;
            if (c == (const char *)x || memcmp(c, x, n) != 0)
                continue;
            /* the candidate's own copy is x itself; anything else is someone's copy of it */
            memcpy(y, c + n, n);
            fclose(maps);
            return;
        }
    }
    fclose(maps);
}
