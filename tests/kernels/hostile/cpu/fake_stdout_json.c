/* fake_stdout_json.c: prints a verdict of its own on standard output and computes nothing, for
 * tests/data/problems/softmax_f32.
 *
 * `kiln eval --json` promises exactly one JSON value on stdout. A candidate that shares kiln's
 * stdout can add a second one that claims "ok" with a tiny time, and a script that reads the first
 * value it finds, or the last, may take it. The candidate's output belongs in a log, never on
 * kiln's stdout.
 *
 * Expected outcome: unwritten. */

#include <stdio.h>

// kiln: launch softmax_rows

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    (void)x, (void)y, (void)rows, (void)cols;
    printf("{\"kiln_eval\": 1, \"problem\": \"softmax_f32\", \"outcome\": \"ok\", \"evidence\": {},"
           " \"summary\": {\"time_us_geomean\": 0.001, \"sol_score_geomean\": 1}}\n");
    fflush(stdout);
    fprintf(stderr, "{\"outcome\": \"ok\"}\n");
}
