/* quiet_hang.c: never returns, but keeps talking, for tests/data/problems/softmax_f32.
 *
 * A watchdog that measures silence (the time since the gate child's last progress line) can be
 * kept quiet by a candidate that writes progress lines ("phase time 0") into every descriptor it
 * holds while it spins. A sandboxed candidate holds one channel, its runner's reply channel: lines
 * there break the runner's protocol (crashed); and were they not seen, the wall-time limit of the
 * call itself is not fooled by them (timeout).
 *
 * The gate refuses it before it runs: it calls write, which no candidate may (sandbox_elf.c:
 * the C library keeps state from call to call; what the seccomp filter behind that check does
 * with such calls is test_sandbox's). Before that check: crashed or timeout.
 *
 * Expected outcome: compile_error. */

#include <string.h>
#include <time.h>
#include <unistd.h>

// kiln: launch softmax_rows

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    (void)x, (void)y, (void)rows, (void)cols;
    const char *line = "phase time 0\n";
    for (;;) {
        for (int fd = 1; fd < 64; fd++)
            if (write(fd, line, strlen(line)) < 0) {
            }
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}
