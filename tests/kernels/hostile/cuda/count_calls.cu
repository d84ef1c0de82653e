/* count_calls.cu: does the work for its first launches only, for tests/data/problems/softmax_f32.
 *
 * A __device__ counter survives from launch to launch in the module: thread 0 of the last block to
 * finish increments it. After 12 launches (the 4 workloads x 3 sets of the proof) every launch
 * returns at once. A gate that checks every timed run catches the first empty one.
 *
 * The gate now loads a module with global variables afresh before every run, so its count of launches
 * never outlives a run and the kernel does the work every time (before that, the gate's other
 * checks caught it: unwritten).
 *
 * Expected outcome: ok (neutralised). */

// kiln: launch softmax_rows grid=rows block=256

static __device__ void softmax_row(const float *x, float *y, int64_t row, int64_t cols) {
    __shared__ float red[32];
    const float *xr = x + row * cols;
    float *yr = y + row * cols;
    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        m = fmaxf(m, xr[c]);
    for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = m;
    __syncthreads();
    m = red[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); w++)
        m = fmaxf(m, red[w]);
    __syncthreads();
    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        s += expf(xr[c] - m);
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = s;
    __syncthreads();
    s = 0.0f;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++)
        s += red[w];
    const float inv = 1.0f / s;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        yr[c] = expf(xr[c] - m) * inv;
}

__device__ unsigned int kiln_hostile_launches;
__device__ unsigned int kiln_hostile_blocks_done;

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    const unsigned int launch = *(volatile unsigned int *)&kiln_hostile_launches;
    if (launch < 12)
        softmax_row(x, y, blockIdx.x, cols);
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(&kiln_hostile_blocks_done, 1u) == gridDim.x - 1) {
            kiln_hostile_blocks_done = 0;
            atomicAdd(&kiln_hostile_launches, 1u);
        }
    }
}
