/* huge_block.cu: a correct softmax launched with 2048 threads per block, for
 * tests/data/problems/softmax_f32. No CUDA GPU runs a block of more than 1024 threads; kiln refuses
 * the launch geometry before anything runs.
 *
 * Expected outcome: resource, with a message naming the block of 2048 threads (limit 1024). */

// kiln: launch softmax_rows grid=rows block=2048

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    const int64_t row = blockIdx.x;
    if (row >= rows)
        return;
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
