/* fake_stdout_json.cu: prints a verdict of its own with device printf and computes nothing, for
 * tests/data/problems/softmax_f32.
 *
 * Device printf goes to the standard output of the process that synchronises; if that is kiln's
 * own stdout, `kiln eval --json` prints two JSON values and the first one claims "ok". The gate's
 * candidates write to a log, never to kiln's stdout.
 *
 * Expected outcome: unwritten. */

// kiln: launch softmax_rows grid=1 block=1

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    printf("{\"kiln_eval\": 1, \"problem\": \"softmax_f32\", \"outcome\": \"ok\", \"evidence\": {},"
           " \"summary\": {\"time_us_geomean\": 0.001, \"sol_score_geomean\": 1}}\n");
}
