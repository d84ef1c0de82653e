/* malloc_bomb.cu: allocates from the device heap until it runs out, then writes through the null
 * pointer it got, for tests/data/problems/softmax_f32.
 *
 * The device heap outlives a run, so a kernel could keep answers there from one run to the next (the
 * gate reloads a module's globals before every run, not the heap): the cuda backend refuses a cubin
 * that calls the heap's malloc or free before it is loaded (cuda.c, refuse_device_heap). Before that
 * check: crashed.
 *
 * Expected outcome: compile_error. */

// kiln: launch softmax_rows grid=1 block=1

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    for (;;) {
        float *p = (float *)malloc(1 << 20);
        *(volatile float *)p = 1.0f; /* faults once malloc returns NULL */
    }
}
