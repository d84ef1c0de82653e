/* device_launch.cu: tries to move its work out of the timed region with a device-side launch
 * (dynamic parallelism, fire and forget), for tests/data/problems/softmax_f32.
 *
 * kiln compiles whole programs with NVRTC, without -rdc and without cudadevrt, so a device-side
 * launch does not build (and a parent grid would not complete before its children anyway).
 *
 * Expected outcome: compile_error. */

#include <cuda_device_runtime_api.h>

// kiln: launch softmax_rows grid=1 block=1

extern "C" __global__ void softmax_child(const float *x, float *y, int64_t rows, int64_t cols) {
    for (int64_t i = threadIdx.x; i < rows * cols; i += blockDim.x)
        y[i] = x[i];
}

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    softmax_child<<<1, 256, 0, s>>>(x, y, rows, cols);
}
