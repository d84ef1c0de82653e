/* huge_smem.cu: asks for 1 MiB of dynamic shared memory per block, for
 * tests/data/problems/softmax_f32 (an H200 block gets at most 227 KiB).
 *
 * Expected outcome: resource. */

// kiln: launch softmax_rows grid=rows block=256 smem=1048576

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    extern __shared__ float buf[];
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        buf[c] = x[blockIdx.x * cols + c];
    __syncthreads();
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        y[blockIdx.x * cols + c] = buf[c];
}
