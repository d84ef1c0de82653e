/* pointer_cache.cu: remembers its answer per input address, for tests/data/problems/softmax_f32.
 *
 * The first launch on a given x computes and keeps a copy of y in a __device__ array; later
 * launches on the same address copy it back. Against a gate whose input buffers keep the same
 * contents for the whole evaluation this is exact (and, for a compute-bound problem, far cheaper
 * than the work). A gate whose buffers change contents between runs makes the copies wrong.
 *
 * The gate now loads a module with global variables afresh before every run, so its cache
 * never outlives a run and the kernel does the work every time (before that, the gate's other
 * checks caught it: mismatch).
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

#define CACHE_SLOTS 16
#define CACHE_FLOATS (64 * 4097)
__device__ const float *kiln_hostile_key[CACHE_SLOTS];
__device__ float kiln_hostile_val[CACHE_SLOTS][CACHE_FLOATS];

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    const int64_t n = rows * cols;
    int slot = -1, free_slot = -1;
    for (int i = 0; i < CACHE_SLOTS; i++) {
        const float *k = ((const float *volatile *)kiln_hostile_key)[i];
        if (k == x)
            slot = i;
        else if (!k && free_slot < 0)
            free_slot = i;
    }
    if (slot >= 0) {
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
            y[blockIdx.x * cols + c] = kiln_hostile_val[slot][blockIdx.x * cols + c];
        return;
    }
    softmax_row(x, y, blockIdx.x, cols);
    if (free_slot >= 0 && n <= CACHE_FLOATS) {
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
            kiln_hostile_val[free_slot][blockIdx.x * cols + c] = y[blockIdx.x * cols + c];
        /* the next launch sees the key; blocks of this one finished their own rows already */
        if (blockIdx.x == 0 && threadIdx.x == 0)
            kiln_hostile_key[free_slot] = x;
    }
}
