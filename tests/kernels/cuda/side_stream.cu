/* side_stream.cu: an attempt to move the work out of the timed region, for
 * tests/data/problems/softmax_f32. The launched kernel only enqueues the real softmax as a
 * device-side "fire and forget" launch (CUDA dynamic parallelism) and returns at once, hoping that
 * the timer's stop event fires when the parent grid ends, before the child has done the work — and
 * that the proof happens to look at y only after the child finished.
 *
 * kiln builds candidates with NVRTC as whole programs: no -rdc, no cudadevrt to link against. A
 * device-side launch needs both, so NVRTC/ptxas refuse it (unresolved
 * __cudaCDP2GetParameterBufferV2; nvcc without -rdc says "kernel launch from __device__ or
 * __global__ functions requires separate compilation mode"). Were it ever built, the parent grid
 * would not complete before its children anyway.
 *
 * Expected outcome: compile_error. */

#include <cuda_device_runtime_api.h>

// kiln: launch softmax_enqueue grid=1 block=1

extern "C" __global__ void softmax_child(const float *x, float *y, int64_t rows, int64_t cols) {
    const int64_t row = blockIdx.x;
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

extern "C" __global__ void softmax_enqueue(const float *x, float *y, int64_t rows, int64_t cols) {
    softmax_child<<<(unsigned)rows, 128, 0, cudaStreamFireAndForget>>>(x, y, rows, cols);
}
