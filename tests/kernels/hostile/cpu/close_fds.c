/* close_fds.c: closes every file descriptor it holds, then computes nothing, for
 * tests/data/problems/softmax_f32.
 *
 * The channel through which the candidate's process tells the gate that a call finished is a file
 * descriptor; closing it (and everything else) leaves the gate waiting or reading end of file. The
 * gate must take that as the runner dying, never as a verdict.
 *
 * Expected outcome: crashed. */

#include <unistd.h>

// kiln: launch softmax_rows

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    (void)x, (void)y, (void)rows, (void)cols;
    for (int fd = 0; fd < 1024; fd++)
        close(fd);
}
