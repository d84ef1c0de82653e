/* pointer_cache.c: remembers its answer per input address, for tests/data/problems/softmax_f32.
 *
 * A gate that keeps each input set in buffers of its own, with the same contents for the whole
 * evaluation, lets a kernel key a cache on the input pointer: the first call per pointer computes,
 * every later one copies the remembered output (here a plain memcpy: cheaper than the softmax, and
 * for a compute-bound problem far cheaper). A gate whose input buffers change contents between
 * runs (a pointer never implies the data) makes the copies wrong.
 *
 * Expected outcome: mismatch. */

#include <stdlib.h>
#include <string.h>

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
    int64_t n;
    float *y;
} cache[64];
static int n_cached;

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    int64_t n = rows * cols;
    for (int i = 0; i < n_cached; i++)
        if (cache[i].x == x && cache[i].n == n) {
            memcpy(y, cache[i].y, (size_t)n * sizeof *y);
            return;
        }
    softmax_ok(x, y, rows, cols);
    if (n_cached < 64) {
        cache[n_cached].x = x;
        cache[n_cached].n = n;
        cache[n_cached].y = malloc((size_t)n * sizeof *y);
        memcpy(cache[n_cached].y, y, (size_t)n * sizeof *y);
        n_cached++;
    }
}
