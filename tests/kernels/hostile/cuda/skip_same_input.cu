/* skip_same_input.cu: returns at once when its input address is the one of the previous launch, for
 * tests/data/problems/softmax_f32.
 *
 * Timing loops launch the same kernel on the same buffers again and again; a kernel that remembers
 * the last (x, y) pair it computed skips every repeat, betting that y still holds the answer. A gate
 * that poisons y before every run, and changes what lies behind x, sees poison.
 *
 * The gate now loads a module with global variables afresh before every run, so the last addresses it saw
 * never outlives a run and the kernel does the work every time (before that, the gate's other
 * checks caught it: unwritten).
 *
 * Expected outcome: ok (neutralised). */

// kiln: launch softmax_rows grid=rows block=256

__device__ const float *kiln_hostile_last_x;
__device__ float *kiln_hostile_last_y;

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    if (*(const float *volatile *)&kiln_hostile_last_x == x &&
        *(float *volatile *)&kiln_hostile_last_y == y)
        return;
    const float *xr = x + blockIdx.x * cols;
    float *yr = y + blockIdx.x * cols;
    if (threadIdx.x == 0) {
        float m = -INFINITY, s = 0.0f;
        for (int64_t c = 0; c < cols; c++)
            m = fmaxf(m, xr[c]);
        for (int64_t c = 0; c < cols; c++)
            s += expf(xr[c] - m);
        for (int64_t c = 0; c < cols; c++)
            yr[c] = expf(xr[c] - m) / s;
    }
    __syncthreads();
    if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) {
        kiln_hostile_last_x = x;
        kiln_hostile_last_y = y;
    }
}
