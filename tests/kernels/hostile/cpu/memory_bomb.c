/* memory_bomb.c: allocates and touches memory until something gives, for
 * tests/data/problems/softmax_f32.
 *
 * A candidate that exhausts the machine's memory takes the gate (or the whole machine) with it. The
 * candidate's process has a memory limit of its own; the allocation then fails and the kernel
 * writes through the NULL it got. Touching the gigabyte before that takes page faults whose speed
 * depends on the machine's load: on a loaded CI machine the call's time limit came first (once in
 * four runs), which refuses it as surely.
 *
 * Expected outcome: crashed or timeout. */

#include <stdlib.h>
#include <string.h>

// kiln: launch softmax_rows

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    (void)x, (void)y, (void)rows, (void)cols;
    for (;;) {
        char *p = malloc((size_t)1 << 30);
        if (!p) {
            *(volatile char *)p = 1; /* the crash the limit turns the bomb into */
            return;
        }
        memset(p, 1, (size_t)1 << 30);
    }
}
