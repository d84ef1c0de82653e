/* stale_stack.c: marks its stack below its frame and does the work only where it finds no mark, for
 * tests/data/problems/softmax_f32.
 *
 * Without a variable, memory a call leaves behind can still be found: the runner calls the kernel
 * from the same depth every time, so an uninitialised local array deep in the stack reads what the
 * last call wrote there. Here a mark, on every thread of the OpenMP pool: a kernel that sees it
 * knows it has run before and writes nothing (a cheat would copy the answers it left there instead). The runner scrubs each thread's
 * stack below the frames in use before every call (sandbox_main.c), so the mark is gone and the
 * kernel does the work every time (before that: unwritten).
 *
 * Expected outcome: ok (neutralised). */

#include <stdint.h>

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

#define MARK 0x6b696c6e2d6d726bull

/* 64 KiB of stack below the kernel's frame, read before it is written */
static __attribute__((noinline)) int seen_before(void) {
    volatile uint64_t deep[8192];
    int seen = deep[0] == MARK && deep[4096] == MARK;
    deep[0] = MARK;
    deep[4096] = MARK;
    return seen;
}

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    int seen = 0;
#pragma omp parallel reduction(| : seen)
    seen |= seen_before(); /* every thread of the pool, each on its own stack */
    if (seen)
        return;
    softmax_ok(x, y, rows, cols);
}
