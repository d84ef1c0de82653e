/* zeros.cu: writes zeros everywhere, for tests/data/problems/softmax_f32 (only the relative L2
 * check stops zeros on long rows, where every probability is small).
 *
 * Expected outcome: mismatch. */

// kiln: launch softmax_rows grid=rows block=256

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        y[blockIdx.x * cols + c] = 0.0f;
}
