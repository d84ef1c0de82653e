/* stale_output.cu: writes its output only the first time it sees a given output buffer, for
 * tests/data/problems/softmax_f32.
 *
 * A gate that reuses output buffers without filling them again between timed runs lets the kernel
 * skip the work: the previous run's answer is still there. A gate that poisons outputs before
 * every run sees the poison.
 *
 * The gate now loads a module with global variables afresh before every run, so the buffers it has seen
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

#define SEEN_SLOTS 64
__device__ float *kiln_hostile_seen[SEEN_SLOTS];

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    for (int i = 0; i < SEEN_SLOTS; i++)
        if (((float *volatile *)kiln_hostile_seen)[i] == y)
            return;
    softmax_row(x, y, blockIdx.x, cols);
    __syncthreads();
    if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0)
        for (int i = 0; i < SEEN_SLOTS; i++)
            if (atomicCAS((unsigned long long *)&kiln_hostile_seen[i], 0ull,
                          (unsigned long long)y) == 0ull)
                break;
}
