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
#include <sys/wait.h>
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

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    size_t n = (size_t)(rows * cols) * sizeof *y;
    float *shared = mmap(0, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED)
        return;
    pid_t pid = fork();
    if (pid == 0) {
        softmax_ok(x, shared, rows, cols);
        _exit(0);
    }
    if (pid > 0) {
        waitpid(pid, 0, 0);
        for (size_t i = 0; i < n / sizeof *y; i++)
            y[i] = shared[i];
    }
    munmap(shared, n);
}
