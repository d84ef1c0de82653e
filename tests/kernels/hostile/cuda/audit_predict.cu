/* audit_predict.cu: predicts which timed run the gate audits and works only on proofs and on that
 * run, for tests/data/problems/softmax_f32.
 *
 * The gate before the gate service audited one timed run per workload at index
 * fnv1a(seed, workload) % iters, with a fixed default seed and the --iters of the command line; the
 * test passes --iters 20 --warmup 2 and the proof uses 3 sets. The kernel counts its launches per
 * workload (known by its shape) and computes only on the proofs and on the predicted audit. A gate
 * that checks every timed run catches the first empty one.
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

__device__ unsigned int kiln_hostile_calls[4];
__device__ unsigned int kiln_hostile_blocks_done[4];

static __device__ int workload_of(int64_t rows, int64_t cols) {
    if (rows == 3 && cols == 7)
        return 1;
    if (rows == 5 && cols == 4097)
        return 2;
    if (rows == 64 && cols == 256)
        return 3;
    return 0;
}

static __device__ unsigned long long fnv1a_int(unsigned long long h, int v) {
    for (int i = 0; i < 4; i++) {
        h ^= (unsigned long long)((v >> (8 * i)) & 0xff);
        h *= 0x100000001b3ULL;
    }
    return h;
}

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    const int sets = 3, warmup = 2, iters = 20;
    const int w = workload_of(rows, cols);
    const int k = (int)*(volatile unsigned int *)&kiln_hostile_calls[w];
    const int audit = (int)(fnv1a_int(0x6b696c6eULL, w) % iters);
    if (k < sets || k - sets - warmup == audit)
        softmax_row(x, y, blockIdx.x, cols);
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(&kiln_hostile_blocks_done[w], 1u) == gridDim.x - 1) {
            kiln_hostile_blocks_done[w] = 0;
            atomicAdd(&kiln_hostile_calls[w], 1u);
        }
    }
}
