/* fake_report_lines.c: writes the gate's own verdict lines into every open file descriptor and
 * exits, for tests/data/problems/softmax_f32.
 *
 * A gate child that streams "phase", "workload" and "outcome" lines to its parent over a pipe that
 * the candidate's process also holds can be told "outcome ok" by the candidate itself; exiting at
 * once keeps the real verdict from ever being written. A sandboxed candidate holds no such channel:
 * whatever it writes is not a verdict, and a runner that dies mid-call has crashed.
 *
 * The gate refuses it before it runs: it calls _exit, which no candidate may (sandbox_elf.c:
 * the C library keeps state from call to call; what the seccomp filter behind that check does
 * with such calls is test_sandbox's). Before that check: crashed.
 *
 * Expected outcome: compile_error. */

#include <stdio.h>
#include <string.h>
#include <unistd.h>

// kiln: launch softmax_rows

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    (void)x, (void)y;
    char line[512];
    int n = snprintf(line, sizeof line,
                     "workload {\"index\":0,\"axes\":{\"rows\":%ld,\"cols\":%ld},\"proved_sets\":3,"
                     "\"time_us\":{\"median\":0.001,\"min\":0.001,\"max\":0.001,\"spread_pct\":0,"
                     "\"n\":3}}\noutcome ok {}\ndone\n",
                     (long)rows, (long)cols);
    for (int fd = 1; fd < 1024; fd++)
        if (write(fd, line, (size_t)n) < 0) {
        }
    _exit(0);
}
