/* timer_signal.c: arms a timer whose signal handler does the work after the call returned, for
 * tests/data/problems/softmax_f32.
 *
 * The timed call only sets an interval timer; the softmax is computed in the SIGALRM handler a few
 * hundred microseconds later, while the gate checks (or on a later call, into whatever y is then).
 * A sandbox refuses timers (and stops the candidate's process between calls, so nothing of it
 * runs while the gate looks).
 *
 * The gate refuses it before it runs: it calls sigaction, which no candidate may (sandbox_elf.c:
 * the C library keeps state from call to call; what the seccomp filter behind that check does
 * with such calls is test_sandbox's). Before that check: unwritten.
 *
 * Expected outcome: compile_error. */

#include <signal.h>
#include <string.h>
#include <sys/time.h>

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

static void on_alarm(int sig) {
    (void)sig;
    softmax_ok(job.x, job.y, job.rows, job.cols);
}

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    job.x = x;
    job.y = y;
    job.rows = rows;
    job.cols = cols;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, 0);
    struct itimerval t = {{0, 0}, {0, 300}};
    setitimer(ITIMER_REAL, &t, 0);
}
