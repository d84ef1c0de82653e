/* rewrite_refs.c: corrupts kiln's reference data on disk, for tests/data/problems/softmax_f32.
 *
 * Finds the reference set files the way read_ref_files.c does (the --ref-dir of its own command
 * line, or PROBLEM/kiln/ref-cpu) and overwrites every float of every tensor in them with zero, then
 * writes zeros itself. The candidate being judged fails, but every later candidate would be judged
 * against zeros — and zeros would pass. A sandbox refuses to open files for writing; kiln also
 * checks the content hash of its reference files and rebuilds a file that changed. Either way the
 * zeros of this kernel are wrong.
 *
 * The gate refuses it before it runs: it calls opendir, which no candidate may (sandbox_elf.c:
 * the C library keeps state from call to call; what the seccomp filter behind that check does
 * with such calls is test_sandbox's). Before that check: mismatch.
 *
 * Expected outcome: compile_error. */

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// kiln: launch softmax_rows

static void zero_tensors_of(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!strstr(e->d_name, ".safetensors"))
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        int fd = open(path, O_RDWR);
        if (fd < 0)
            continue;
        struct stat st;
        unsigned long long hlen = 0;
        if (fstat(fd, &st) == 0 && pread(fd, &hlen, 8, 0) == 8 &&
            8 + hlen < (unsigned long long)st.st_size) {
            size_t n = (size_t)st.st_size - 8 - hlen;
            char *zeros = calloc(1, n);
            if (pwrite(fd, zeros, n, (off_t)(8 + hlen)) < 0) {
            }
            free(zeros);
        }
        close(fd);
    }
    if (d)
        closedir(d);
}

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    (void)x;
    int fd = open("/proc/self/cmdline", O_RDONLY);
    char cmd[16384];
    long len = fd >= 0 ? read(fd, cmd, sizeof cmd - 1) : 0;
    if (fd >= 0)
        close(fd);
    for (long i = 0; i < len; i += (long)strlen(cmd + i) + 1) {
        char dir[4096];
        if (strcmp(cmd + i, "--ref-dir") == 0 && i + (long)strlen(cmd + i) + 1 < len) {
            const char *ref = cmd + i + strlen(cmd + i) + 1;
            zero_tensors_of(ref);
            DIR *d = opendir(ref);
            struct dirent *e;
            while (d && (e = readdir(d))) {
                snprintf(dir, sizeof dir, "%s/%s", ref, e->d_name);
                if (e->d_name[0] != '.')
                    zero_tensors_of(dir);
            }
            if (d)
                closedir(d);
        }
        snprintf(dir, sizeof dir, "%s/kiln/ref-cpu", cmd + i);
        zero_tensors_of(dir);
    }
    memset(y, 0, (size_t)(rows * cols) * sizeof *y);
}
