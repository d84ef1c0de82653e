/* good_softmax_bf16.cu: a fast softmax for tests/data/problems/softmax_bf16_big — bfloat16 scores
 * [batch, heads, q, 4096], softmax in float32 over the last axis, bfloat16 out (the eager-attention
 * pattern softmax(x.float()).to(bf16)).
 *
 * The op is pure bandwidth: each row is 4096 bf16 = 8 KiB read and 8 KiB written, nothing else. So:
 *   - one block of 128 threads (4 warps) per row; each thread owns 32 elements as four 16-byte
 *     chunks (8 bf16 each) at chunk indices t, t+128, t+256, t+384, so every warp load instruction
 *     reads 512 contiguous bytes and the whole row is in flight at once (45 registers: 10 blocks,
 *     80 KiB in flight per SM; forcing 32 registers for 16 blocks spills and halves the speed);
 *   - the row is read from global memory exactly once and stays in registers (32 floats per
 *     thread);
 *   - max and sum in float32: warp shuffles, then the four warp values through shared memory;
 *   - one exp per element, as exp2(x * log2(e) - max * log2(e)) (one FFMA + MUFU.EX2); the exps are
 *     kept in registers, scaled by 1/sum, rounded to bf16 (nearest even) and written with 16-byte
 *     stores.
 * Plain loads and stores: cache-streaming hints (__ldcs/__stcs) measured slower on the H200 (145 us
 * against 134 us), and so did one warp per row (147 us) and a persistent grid that prefetches the
 * next row (154 us). Speed of light for [1, 8, 4096, 4096]: 512 MiB / 4.25 TB/s = 126 us; this
 * kernel measured 134 us (4.0 TB/s) with a stand-alone driver-API harness (L2 flushed, median of
 * 50).
 *
 * The row length is the definition's constant axis k = 4096; grid = batch * heads * q rows. A row
 * of all -inf gives NaN, as PyTorch does.
 *
 * Expected outcome: ok, at close to the copy bandwidth (eager: 976 us; torch.compile max-autotune:
 * 250 us). */

#include <cuda_bf16.h>

// kiln: launch softmax_bf16_row4096 grid=batch*heads*q block=128

#define ROW_LEN 4096
#define THREADS 128
#define WARPS (THREADS / 32)
#define VEC 8                                 /* bf16 per 16-byte chunk */
#define CHUNKS_PER_THREAD (ROW_LEN / (THREADS * VEC)) /* 4 */

static __device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

static __device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

/* Unpacks a 16-byte chunk of 8 bf16 into floats (a bf16 is the top half of a float32). */
static __device__ __forceinline__ void unpack8(uint4 chunk, float *f) {
    const unsigned int w[4] = {chunk.x, chunk.y, chunk.z, chunk.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

/* Rounds 8 floats to bf16 (nearest even) and packs them into a 16-byte chunk. */
static __device__ __forceinline__ uint4 pack8(const float *f) {
    unsigned int w[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        __nv_bfloat162 h = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
        w[i] = *reinterpret_cast<unsigned int *>(&h);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

extern "C" __global__ void __launch_bounds__(THREADS)
softmax_bf16_row4096(const __nv_bfloat16 *__restrict__ x, __nv_bfloat16 *__restrict__ y,
                     int64_t batch, int64_t heads, int64_t q, int64_t k) {
    __shared__ float red_max[WARPS], red_sum[WARPS];
    const int64_t row = blockIdx.x;
    if (row >= batch * heads * q)
        return;
    const uint4 *xr = reinterpret_cast<const uint4 *>(x + row * ROW_LEN);
    uint4 *yr = reinterpret_cast<uint4 *>(y + row * ROW_LEN);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    /* All loads first, so that the whole row is in flight before any arithmetic waits on it. */
    uint4 raw[CHUNKS_PER_THREAD];
#pragma unroll
    for (int i = 0; i < CHUNKS_PER_THREAD; i++)
        raw[i] = xr[threadIdx.x + i * THREADS];

    float v[CHUNKS_PER_THREAD * VEC];
#pragma unroll
    for (int i = 0; i < CHUNKS_PER_THREAD; i++)
        unpack8(raw[i], v + i * VEC);

    float m = v[0];
#pragma unroll
    for (int i = 1; i < CHUNKS_PER_THREAD * VEC; i++)
        m = fmaxf(m, v[i]);
    m = warp_max(m);
    if (lane == 0)
        red_max[warp] = m;
    __syncthreads();
    m = fmaxf(fmaxf(red_max[0], red_max[1]), fmaxf(red_max[2], red_max[3]));

    const float log2e = 1.4426950408889634f;
    const float m_scaled = m * log2e;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < CHUNKS_PER_THREAD * VEC; i++) {
        v[i] = exp2f(fmaf(v[i], log2e, -m_scaled));
        s += v[i];
    }
    s = warp_sum(s);
    if (lane == 0)
        red_sum[warp] = s;
    __syncthreads();
    s = (red_sum[0] + red_sum[1]) + (red_sum[2] + red_sum[3]);

    const float inv = 1.0f / s;
#pragma unroll
    for (int i = 0; i < CHUNKS_PER_THREAD; i++) {
        float out[VEC];
#pragma unroll
        for (int j = 0; j < VEC; j++)
            out[j] = v[i * VEC + j] * inv;
        yr[threadIdx.x + i * THREADS] = pack8(out);
    }
}
