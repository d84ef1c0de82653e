/* heap_cache.c: leaves a mark in a heap block it frees, and does the work only where the next
 * block it gets holds no mark, for tests/data/problems/softmax_f32.
 *
 * The runner puts a candidate's static data back before every call (count_calls.c), so a pointer to
 * a cache cannot be kept. But glibc's malloc hands back the chunk freed last for a request of the
 * same size, contents and all (past the two words its free list writes), so a kernel that mallocs a
 * block of a fixed size, writes it and frees it finds it again at the next call: a cache of answers
 * keyed by the inputs' contents would pass the set rotation. Here only a mark: a kernel that finds
 * it knows it has run before and writes nothing (a cheat would copy the answers it left there).
 * The runner serves a candidate's malloc from a heap of the call's own, emptied after every call
 * (sandbox_main.c), so the block reads as zeros and the kernel does the work every time (with
 * glibc's heap: unwritten).
 *
 * Expected outcome: ok (neutralised). */

#include <stdint.h>
#include <stdlib.h>

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

#define MARK 0x6b696c6e2d686561ull
#define BLOCK 1000 /* bytes: a size nothing else in the process asks for */

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    volatile uint64_t *b = malloc(BLOCK);
    if (!b)
        return;
    int seen = b[8] == MARK && b[100] == MARK;
    b[8] = MARK;
    b[100] = MARK;
    free((void *)b);
    if (seen)
        return;
    softmax_ok(x, y, rows, cols);
}
