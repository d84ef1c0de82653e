/* compile_error.cu: a softmax for tests/data/problems/softmax_f32 that does not compile: it calls
 * block_sum(), a helper that was never written (it exists in another kernel file, not this one).
 *
 * Expected outcome: compile_error, with NVRTC's log naming the line marked ERROR-LINE below
 * (tests/py/test_gate_cuda.py finds the line by that marker). */

// kiln: launch softmax_rows grid=rows block=256

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    const int64_t row = blockIdx.x;
    if (row >= rows)
        return;
    const float *xr = x + row * cols;
    float *yr = y + row * cols;
    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        s += expf(xr[c]);
    s = block_sum(s); /* ERROR-LINE: block_sum is not declared */
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        yr[c] = expf(xr[c]) / s;
}
