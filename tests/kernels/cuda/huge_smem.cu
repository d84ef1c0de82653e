/* huge_smem.cu: a softmax that stages the row in dynamic shared memory and asks for 300000 bytes of
 * it, for tests/data/problems/softmax_f32. An H100/H200 block can have at most 227 KiB (232448
 * bytes) of shared memory, so raising the kernel's limit to 300000 bytes fails before anything
 * runs.
 *
 * Expected outcome: resource, with a message about shared memory. */

// kiln: launch softmax_rows grid=rows block=256 smem=300000

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    extern __shared__ float stage[]; /* room for 75000 floats, were it granted */
    const int64_t row = blockIdx.x;
    if (row >= rows || cols > 75000)
        return;
    const float *xr = x + row * cols;
    float *yr = y + row * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        stage[c] = xr[c];
    __syncthreads();
    float m = -__int_as_float(0x7f800000), s = 0.0f;
    for (int64_t c = 0; c < cols; c++)
        m = fmaxf(m, stage[c]);
    for (int64_t c = 0; c < cols; c++)
        s += expf(stage[c] - m);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        yr[c] = expf(stage[c] - m) / s;
}
