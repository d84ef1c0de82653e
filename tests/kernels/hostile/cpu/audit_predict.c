/* audit_predict.c: predicts which timed run the gate audits and works only on proofs and on that
 * run, for tests/data/problems/softmax_f32.
 *
 * A gate that audits one timed run chosen from a fixed seed (FNV-1a of the seed and the workload
 * index, modulo the iteration count: src/gate/eval.c before the gate service) is predictable: the
 * kernel reads --iters, --warmup, --sets and --seed from its own command line, counts its calls per
 * workload, and computes only when the call is a proof or the audited run. Every other timed run is
 * empty. A gate that checks every timed run, and draws what it draws from the OS's random source,
 * catches the first empty run.
 *
 * The runner now puts the candidate's static data back as loaded before every call, so its count of calls
 * never outlives a call and the kernel does the work every time (before that, the gate's other
 * checks caught it: unwritten).
 *
 * The gate refuses it before it runs: it calls strlen, which no candidate may (sandbox_elf.c:
 * the C library keeps state from call to call; what the seccomp filter behind that check does
 * with such calls is test_sandbox's). Before that check: ok (neutralised).
 *
 * Expected outcome: compile_error. */

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static long arg_value(const char *name, long dflt) {
    static char cmd[16384];
    static long len = -1;
    if (len < 0) {
        int fd = open("/proc/self/cmdline", O_RDONLY);
        len = fd >= 0 ? read(fd, cmd, sizeof cmd - 1) : 0;
        if (fd >= 0)
            close(fd);
    }
    for (long i = 0; i < len; i += (long)strlen(cmd + i) + 1)
        if (strcmp(cmd + i, name) == 0 && i + (long)strlen(cmd + i) + 1 < len)
            return strtol(cmd + i + strlen(cmd + i) + 1, NULL, 0);
    return dflt;
}

static unsigned long long fnv1a(unsigned long long h, const void *data, unsigned long n) {
    const unsigned char *p = data;
    for (unsigned long i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    /* the workloads of softmax_f32, in file order */
    static const long shapes[4][2] = {{1, 1}, {3, 7}, {5, 4097}, {64, 256}};
    static int calls[4];
    int w = 0;
    for (int i = 0; i < 4; i++)
        if (shapes[i][0] == rows && shapes[i][1] == cols)
            w = i;
    long sets = arg_value("--sets", 3), warmup = arg_value("--warmup", 1);
    long iters = arg_value("--iters", 10), seed = arg_value("--seed", 0x6b696c6e);
    int audit = (int)(fnv1a((unsigned long long)seed, &w, sizeof w) % (unsigned long long)iters);
    int k = calls[w]++;
    if (k < sets || k - sets - warmup == audit)
        softmax_ok(x, y, rows, cols);
}
