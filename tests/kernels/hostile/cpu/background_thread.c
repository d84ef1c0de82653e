/* background_thread.c: returns at once and leaves the work to a thread of its own, for
 * tests/data/problems/softmax_f32.
 *
 * The call the gate times is only a pthread_create; the softmax happens after the call "ended",
 * while the gate is already looking (on a fast check it may not be finished; on a slow one it is),
 * and the timed median is that of creating a thread. A sandbox that lets the candidate use only the
 * OpenMP threads made before it was loaded refuses the new thread; the kernel then computes
 * nothing.
 *
 * The gate refuses it before it runs: it calls pthread_detach, which no candidate may (sandbox_elf.c:
 * the C library keeps state from call to call; what the seccomp filter behind that check does
 * with such calls is test_sandbox's). Before that check: unwritten.
 *
 * Expected outcome: compile_error. */

#include <pthread.h>

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

static struct {
    const float *x;
    float *y;
    int64_t rows, cols;
} job;

static void *worker(void *arg) {
    (void)arg;
    softmax_ok(job.x, job.y, job.rows, job.cols);
    return 0;
}

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    job.x = x;
    job.y = y;
    job.rows = rows;
    job.cols = cols;
    pthread_t t;
    if (pthread_create(&t, 0, worker, 0) == 0)
        pthread_detach(t);
}
