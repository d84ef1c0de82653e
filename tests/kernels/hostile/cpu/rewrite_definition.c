/* rewrite_definition.c: loosens the problem's tolerance on disk, for a copy of
 * tests/data/problems/softmax_f32 (the test hands the gate a copy: this kernel edits the problem
 * directory it is judged on).
 *
 * For every argument of its command line that is a directory holding definition.json, it rewrites
 * that file with "kiln": {"tolerance": {"atol": 1e9, "rtol": 1e9, "rel_l2": 1e9}}, so that every
 * later judgement of any candidate accepts anything. Then it writes zeros. A sandbox refuses to
 * open the file; and a problem whose content changed is a different problem whose results never
 * mix with the old one's.
 *
 * The gate refuses it before it runs: it calls fread, which no candidate may (sandbox_elf.c:
 * the C library keeps state from call to call; what the seccomp filter behind that check does
 * with such calls is test_sandbox's). Before that check: mismatch.
 *
 * Expected outcome: compile_error. */

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// kiln: launch softmax_rows

static void loosen(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/definition.json", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char *text = calloc(1, 1 << 20);
    size_t n = fread(text, 1, (1 << 20) - 1, f);
    fclose(f);
    char *last = strrchr(text, '}');
    if (n && last && !strstr(text, "1e9")) {
        *last = 0;
        f = fopen(path, "w");
        if (f) {
            fprintf(f, "%s, \"kiln\": {\"tolerance\": {\"atol\": 1e9, \"rtol\": 1e9, "
                       "\"rel_l2\": 1e9}}}\n",
                    text);
            fclose(f);
        }
    }
    free(text);
}

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    (void)x;
    int fd = open("/proc/self/cmdline", O_RDONLY);
    char cmd[16384];
    long len = fd >= 0 ? read(fd, cmd, sizeof cmd - 1) : 0;
    if (fd >= 0)
        close(fd);
    for (long i = 0; i < len; i += (long)strlen(cmd + i) + 1)
        loosen(cmd + i);
    memset(y, 0, (size_t)(rows * cols) * sizeof *y);
}
