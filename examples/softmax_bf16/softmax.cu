// softmax.cu: the bundled example's CUDA kernel: y = softmax(x.float(), -1).to(bf16) for rows of 4096 bf16.
//
// Memory-bound: each row is read once and written once (16 KiB per row). One block of 128 threads owns a row;
// each thread loads 32 values with four 16-byte loads issued back to back (all in flight together), keeps
// them in registers, and the block reduces the max and then the sum of exp in fp32 with warp shuffles and a
// 4-entry shared array. The row is never re-read, so the kernel moves the minimum: 2 bytes in, 2 bytes out.
#include <cuda_bf16.h>

#define COLS 4096
#define THREADS 128
#define VEC 8                             // bf16 per 16-byte load
#define LOADS (COLS / (THREADS * VEC))    // 4 loads per thread
#define WARPS (THREADS / 32)

// kiln: launch softmax_rows grid=rows block=128
extern "C" __global__ void __launch_bounds__(THREADS)
softmax_rows(const __nv_bfloat16 *x, __nv_bfloat16 *y, int64_t rows, int64_t cols) {
    __shared__ float red[WARPS];
    if (cols != COLS)
        __trap(); // this kernel is specialised for 4096 columns
    const int64_t row = blockIdx.x;
    const uint4 *xr = reinterpret_cast<const uint4 *>(x + row * COLS);
    uint4 *yr = reinterpret_cast<uint4 *>(y + row * COLS);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    uint4 raw[LOADS];
#pragma unroll
    for (int k = 0; k < LOADS; k++)
        raw[k] = __ldcs(xr + threadIdx.x + k * THREADS); // streamed: no reuse

    float v[LOADS * VEC];
#pragma unroll
    for (int k = 0; k < LOADS; k++) {
        const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&raw[k]);
#pragma unroll
        for (int j = 0; j < VEC / 2; j++) {
            float2 f = __bfloat1622float2(h[j]);
            v[k * VEC + 2 * j] = f.x;
            v[k * VEC + 2 * j + 1] = f.y;
        }
    }

    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < LOADS * VEC; i++)
        m = fmaxf(m, v[i]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0)
        red[warp] = m;
    __syncthreads();
    m = red[0];
#pragma unroll
    for (int w = 1; w < WARPS; w++)
        m = fmaxf(m, red[w]);
    __syncthreads(); // red is reused for the sum

    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < LOADS * VEC; i++) {
        v[i] = __expf(v[i] - m);
        s += v[i];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0)
        red[warp] = s;
    __syncthreads();
    s = red[0];
#pragma unroll
    for (int w = 1; w < WARPS; w++)
        s += red[w];
    const float inv = 1.0f / s;

#pragma unroll
    for (int k = 0; k < LOADS; k++) {
        uint4 out;
        __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&out);
#pragma unroll
        for (int j = 0; j < VEC / 2; j++)
            h[j] = __floats2bfloat162_rn(v[k * VEC + 2 * j] * inv, v[k * VEC + 2 * j + 1] * inv);
        __stcs(yr + threadIdx.x + k * THREADS, out);
    }
}
