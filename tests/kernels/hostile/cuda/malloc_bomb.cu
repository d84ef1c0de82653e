/* malloc_bomb.cu: allocates from the device heap until it runs out, then writes through the null
 * pointer it got, for tests/data/problems/softmax_f32.
 *
 * Expected outcome: crashed. */

// kiln: launch softmax_rows grid=1 block=1

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    for (;;) {
        float *p = (float *)malloc(1 << 20);
        *(volatile float *)p = 1.0f; /* faults once malloc returns NULL */
    }
}
