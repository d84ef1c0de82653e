/* thread_local_count.c: counts its calls in a thread-local variable, for tests/data/problems/softmax_f32.
 *
 * The runner puts the candidate's static data (.data, .bss) back before every call, so a count kept
 * there never passes 1 (count_calls.c). Each thread's own storage is not in those segments: a count
 * kept there would outlive the call, and the kernel could stop working once the proofs are behind it.
 * The gate refuses an object with thread-local storage before it is loaded.
 *
 * Expected outcome: compile_error. */

// kiln: launch softmax_rows

#include <math.h>

static _Thread_local long calls;

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    if (++calls > 12)
        return;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float m = -INFINITY, s = 0.0f;
        for (int64_t c = 0; c < cols; c++)
            m = fmaxf(m, xr[c]);
        for (int64_t c = 0; c < cols; c++)
            s += expf(xr[c] - m);
        for (int64_t c = 0; c < cols; c++)
            yr[c] = expf(xr[c] - m) / s;
    }
}
