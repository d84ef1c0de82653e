/* trap.cu: a softmax for tests/data/problems/softmax_f32 with a device-side assertion that fires:
 * one thread (thread 0 of the last row's block) calls __trap(), which aborts the whole grid. The
 * driver reports a launch failure at the next synchronisation and the context is unusable
 * afterwards.
 *
 * Expected outcome: crashed in phase "prove" (workload 0), with the driver's error text. */

// kiln: launch softmax_rows grid=rows block=32

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    const int64_t row = blockIdx.x;
    if (row >= rows)
        return;
    if (row == rows - 1 && threadIdx.x == 0)
        __trap(); /* "this cannot happen" */
    const float *xr = x + row * cols;
    float *yr = y + row * cols;
    float m = -__int_as_float(0x7f800000), s = 0.0f;
    for (int64_t c = 0; c < cols; c++)
        m = fmaxf(m, xr[c]);
    for (int64_t c = 0; c < cols; c++)
        s += expf(xr[c] - m);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        yr[c] = expf(xr[c] - m) / s;
}
