/* read_ref_files.c: copies the answer out of kiln's own reference files instead of computing it,
 * for tests/data/problems/softmax_f32.
 *
 * The gate's reference data are safetensors files (wK_sJ.safetensors) in the directory given to
 * `kiln eval --ref-dir`, or PROBLEM/kiln/ref-cpu. The kernel reads its own process's command line
 * (the gate child was forked from `kiln eval`, so /proc/self/cmdline names both), opens every set
 * file, finds the one whose "input.x" equals the x it was given and copies its "output.y" into y.
 * Against a gate that runs the candidate in a process that may open files this is exact and passes.
 * In a sandbox that refuses to open files it finds nothing and writes nothing.
 *
 * The gate refuses it before it runs: it calls opendir, which no candidate may (sandbox_elf.c:
 * the C library keeps state from call to call; what the seccomp filter behind that check does
 * with such calls is test_sandbox's). Before that check: unwritten.
 *
 * Expected outcome: compile_error. */

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// kiln: launch softmax_rows

static char *slurp(const char *path, long *len) {
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return NULL;
    long cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (n == cap)
            buf = realloc(buf, cap *= 2);
        long r = read(fd, buf + n, cap - n);
        if (r <= 0)
            break;
        n += r;
    }
    close(fd);
    *len = n;
    return buf;
}

/* The byte range of tensor key in a safetensors file, from its JSON header (no JSON parser: the
 * header is "key":{"dtype":..,"shape":[..],"data_offsets":[a,b]}). */
static int tensor_range(const char *file, long len, const char *key, long *a, long *b) {
    if (len < 8)
        return -1;
    unsigned long long hlen = 0;
    memcpy(&hlen, file, 8);
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\"", key);
    const char *k = NULL;
    size_t plen = strlen(pattern);
    for (unsigned long long i = 0; !k && i + plen <= hlen; i++)
        if (memcmp(file + 8 + i, pattern, plen) == 0)
            k = file + 8 + i;
    if (!k)
        return -1;
    const char *d = strstr(k, "data_offsets");
    if (!d || sscanf(strchr(d, '[') + 1, "%ld,%ld", a, b) != 2)
        return -1;
    *a += 8 + (long)hlen;
    *b += 8 + (long)hlen;
    return 0;
}

static int try_dir(const char *dir, const float *x, float *y, long n_bytes) {
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d))) {
        if (!strstr(e->d_name, ".safetensors"))
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        long len = 0, xa, xb, ya, yb;
        char *f = slurp(path, &len);
        if (f && tensor_range(f, len, "input.x", &xa, &xb) == 0 &&
            tensor_range(f, len, "output.y", &ya, &yb) == 0 && xb - xa == n_bytes &&
            yb - ya == n_bytes && memcmp(f + xa, x, n_bytes) == 0) {
            memcpy(y, f + ya, n_bytes);
            found = 1;
        }
        free(f);
    }
    closedir(d);
    return found;
}

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    long n_bytes = (long)(rows * cols * 4), len = 0;
    char *cmd = slurp("/proc/self/cmdline", &len);
    for (long i = 0; cmd && i < len; i += (long)strlen(cmd + i) + 1) {
        const char *arg = cmd + i;
        char dir[4096];
        if (strcmp(arg, "--ref-dir") == 0 && i + (long)strlen(arg) + 1 < len) {
            const char *ref = arg + strlen(arg) + 1;
            if (try_dir(ref, x, y, n_bytes))
                break;
            /* kiln eval puts each problem's data in a folder of its own below --ref-dir */
            DIR *d = opendir(ref);
            struct dirent *e;
            while (d && (e = readdir(d))) {
                snprintf(dir, sizeof dir, "%s/%s", ref, e->d_name);
                if (e->d_name[0] != '.' && try_dir(dir, x, y, n_bytes))
                    break;
            }
            if (d)
                closedir(d);
        }
        snprintf(dir, sizeof dir, "%s/kiln/ref-cpu", arg);
        try_dir(dir, x, y, n_bytes);
    }
    free(cmd);
}
