// pool.cu: the CUDA bodies of kiln's pool family: average pooling over the spatial dims of NCHW
// activations (rows of H*W contiguous values) and of channels-last ones (H*W rows of C contiguous
// channels). src/gen/pool.c explains the algorithms and when each wins; every body takes plain
// pointers and sizes, and the generated entry point calls the one POOL_ALGO selects.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#ifndef POOL_ALGO
#define POOL_ALGO 0 // 0 tile (NCHW), 1 direct (NCHW), 2 channels-last, 3 window (from POOL_PLAN)
#endif
#ifndef POOL_THREADS
#define POOL_THREADS 256 // threads per block
#endif
#ifndef POOL_GROUP
#define POOL_GROUP 1 // lanes that share one row (tile, direct) or one channel vector (channels-last); 0: the block
#endif
#ifndef POOL_VEC
#define POOL_VEC 4 // input elements per load (at most 16 bytes; the emitter: POOL_VBYTES / size)
#endif
#ifndef POOL_UNROLL
#define POOL_UNROLL 2 // loads in flight per thread
#endif
#ifndef POOL_SPLIT
#define POOL_SPLIT 1 // blocks of a thread-block cluster that share one reduction (direct, channels-last)
#endif
#ifndef POOL_TIN
#define POOL_TIN float
#endif
#ifndef POOL_TOUT
#define POOL_TOUT float
#endif

#define POOL_LANES (POOL_GROUP == 0 ? POOL_THREADS : POOL_GROUP)

typedef POOL_TIN pool_tin;
typedef POOL_TOUT pool_tout;

__device__ __forceinline__ float pool_f(float v) {
    return v;
}
__device__ __forceinline__ float pool_f(__nv_bfloat16 v) {
    return __bfloat162float(v);
}
__device__ __forceinline__ float pool_f(__half v) {
    return __half2float(v);
}
__device__ __forceinline__ void pool_put(float *p, float v) {
    *p = v;
}
__device__ __forceinline__ void pool_put(__nv_bfloat16 *p, float v) {
    *p = __float2bfloat16_rn(v);
}
__device__ __forceinline__ void pool_put(__half *p, float v) {
    *p = __float2half_rn(v);
}

// POOL_VEC input elements travel as one load of this many bytes.
template <int N> struct pool_bits;
template <> struct pool_bits<2> {
    typedef unsigned short t;
};
template <> struct pool_bits<4> {
    typedef unsigned int t;
};
template <> struct pool_bits<8> {
    typedef uint2 t;
};
template <> struct pool_bits<16> {
    typedef uint4 t;
};
typedef pool_bits<sizeof(pool_tin) * POOL_VEC>::t pool_vbits;

// The input is read exactly once: stream it past L1 and mark it first to leave L2.
__device__ __forceinline__ pool_vbits pool_ldv(const pool_vbits *p) {
    return __ldcs(p);
}

// The sum of the POOL_VEC elements of a vector, in fp32.
__device__ __forceinline__ float pool_vsum(const pool_vbits &b) {
    const pool_tin *e = reinterpret_cast<const pool_tin *>(&b);
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < POOL_VEC; k++)
        s += pool_f(e[k]);
    return s;
}

// Sum over aligned groups of LANES lanes of a warp (LANES <= 32); every lane gets the group's sum.
template <int LANES> __device__ __forceinline__ float pool_group_sum(float v) {
#pragma unroll
    for (int o = LANES / 2; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over the whole block; the result is valid in thread 0. Every thread must call it.
__device__ __forceinline__ float pool_block_sum(float v) {
    __shared__ float red[32];
    v = pool_group_sum<32>(v);
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = v;
    __syncthreads();
    v = threadIdx.x < POOL_THREADS / 32 ? red[threadIdx.x] : 0.f;
    if (threadIdx.x < 32)
        v = pool_group_sum<32>(v);
    return v;
}

#if POOL_SPLIT > 1
// Thread-block cluster primitives in PTX (what cooperative_groups does, without its compile time).
__device__ __forceinline__ unsigned pool_cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ void pool_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;"
                 :
                 :
                 : "memory");
}
// p's element in the shared memory of the cluster's block `rank` (DSMEM).
__device__ __forceinline__ float pool_dsmem_load(const float *p, unsigned rank) {
    const unsigned local = (unsigned)__cvta_generic_to_shared(p);
    unsigned remote;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
    return v;
}

// The blocks of a cluster hold partial sums of the same outputs in part[0..count); rank 0 adds them
// up (in rank order, so the result does not depend on timing) and hands each total to put(i, sum).
template <class Put>
__device__ __forceinline__ void pool_cluster_finish(float *part, int count, Put put) {
    pool_cluster_sync();
    if (pool_cluster_rank() == 0)
        for (int i = threadIdx.x; i < count; i += POOL_THREADS) {
            float s = 0.f;
#pragma unroll
            for (unsigned r = 0; r < POOL_SPLIT; r++)
                s += pool_dsmem_load(part + i, r);
            put(i, s);
        }
    pool_cluster_sync(); // the other blocks keep their shared memory until rank 0 has read it
}
#endif

// ALGO 0, tile: a block owns POOL_THREADS/LANES consecutive rows of len values. Those rows are one
// contiguous range of the input, copied into shared memory with aligned POOL_VEC-wide loads
// (POOL_UNROLL in flight per thread), so global reads are perfectly coalesced whatever len is;
// then each group of LANES lanes sums one row out of shared memory. Dynamic shared memory:
// rows*len*sizeof(pool_tin) + 16 bytes.
__device__ __forceinline__ void pool_tile(const pool_tin *__restrict__ x, pool_tout *__restrict__ y,
                                          int64_t rows, int64_t len) {
    extern __shared__ __align__(16) unsigned char pool_smem[];
    constexpr int LANES = POOL_LANES, TR = POOL_THREADS / LANES, V = POOL_VEC;
    pool_tin *sm = reinterpret_cast<pool_tin *>(pool_smem);
    const int64_t row0 = (int64_t)blockIdx.x * TR;
    const int nrows = (int)min((int64_t)TR, rows - row0);
    const int64_t a = row0 * len, b = a + nrows * len;
    const int64_t a_al = a - a % V, b_al = b - b % V; // sm[k] holds x[a_al + k]
    const int nvec = (int)((b_al - a_al) / V);
    const pool_vbits *xv = reinterpret_cast<const pool_vbits *>(x + a_al);
    pool_vbits *sv = reinterpret_cast<pool_vbits *>(sm);
    for (int i = threadIdx.x; i < nvec; i += POOL_THREADS * POOL_UNROLL) {
        pool_vbits r[POOL_UNROLL];
#pragma unroll
        for (int u = 0; u < POOL_UNROLL; u++)
            if (i + u * POOL_THREADS < nvec)
                r[u] = pool_ldv(xv + i + u * POOL_THREADS);
#pragma unroll
        for (int u = 0; u < POOL_UNROLL; u++)
            if (i + u * POOL_THREADS < nvec)
                sv[i + u * POOL_THREADS] = r[u];
    }
    for (int64_t e = b_al + threadIdx.x; e < b; e += POOL_THREADS)
        sm[e - a_al] = x[e];
    __syncthreads();
    const int g = threadIdx.x / LANES, lane = threadIdx.x % LANES;
    float acc = 0.f;
    if (g < nrows) {
        const pool_tin *rp = sm + (a - a_al) + (int64_t)g * len;
        for (int j = lane; j < len; j += LANES)
            acc += pool_f(rp[j]);
    }
    acc = pool_group_sum<LANES>(acc);
    if (lane == 0 && g < nrows)
        pool_put(y + row0 + g, acc / (float)len);
}

// ALGO 1, direct: a group of LANES lanes (a whole block when POOL_GROUP is 0) reads its row straight
// from global memory: a scalar head up to the first POOL_VEC-aligned element, aligned vectors
// (POOL_UNROLL in flight per lane), a scalar tail. With POOL_SPLIT > 1 the vectors of a row are
// shared by the POOL_SPLIT blocks of a cluster, which add their partial sums over DSMEM: long rows
// on few (n, c) pairs still fill the GPU.
__device__ __forceinline__ void pool_direct(const pool_tin *__restrict__ x,
                                            pool_tout *__restrict__ y, int64_t rows, int64_t len) {
    constexpr int LANES = POOL_LANES, RPB = POOL_THREADS / LANES, V = POOL_VEC;
    const int part = POOL_SPLIT > 1 ? (int)(blockIdx.x % POOL_SPLIT) : 0;
    const int64_t blk = blockIdx.x / POOL_SPLIT;
    const int g = threadIdx.x / LANES, lane = threadIdx.x % LANES;
    const int64_t row = blk * RPB + g;
    float acc = 0.f;
    if (row < rows) {
        const int64_t start = row * len;
        int64_t head = (V - start % V) % V;
        if (head > len)
            head = len;
        const int64_t nv = (len - head) / V, tail0 = head + nv * V;
        const pool_tin *rp = x + start;
        if (part == 0) {
            for (int64_t j = lane; j < head; j += LANES)
                acc += pool_f(rp[j]);
            for (int64_t j = tail0 + lane; j < len; j += LANES)
                acc += pool_f(rp[j]);
        }
        const pool_vbits *vp = reinterpret_cast<const pool_vbits *>(rp + head);
        const int64_t v0 = nv * part / POOL_SPLIT, v1 = nv * (part + 1) / POOL_SPLIT;
        for (int64_t k = v0 + lane; k < v1; k += (int64_t)LANES * POOL_UNROLL) {
            pool_vbits r[POOL_UNROLL];
#pragma unroll
            for (int u = 0; u < POOL_UNROLL; u++) {
                r[u] = pool_vbits{};
                if (k + (int64_t)u * LANES < v1)
                    r[u] = pool_ldv(vp + k + (int64_t)u * LANES);
            }
#pragma unroll
            for (int u = 0; u < POOL_UNROLL; u++)
                acc += pool_vsum(r[u]);
        }
    }
    if constexpr (LANES <= 32)
        acc = pool_group_sum<(LANES <= 32 ? LANES : 32)>(acc);
    else
        acc = pool_block_sum(acc);
#if POOL_SPLIT > 1
    __shared__ float part_sum[RPB];
    if (lane == 0)
        part_sum[g] = acc;
    const int64_t row_base = blk * RPB;
    pool_cluster_finish(part_sum, RPB, [&](int i, float s) {
        if (row_base + i < rows)
            pool_put(y + row_base + i, s / (float)len);
    });
#else
    if (lane == 0 && row < rows)
        pool_put(y + row, acc / (float)len);
#endif
}

// ALGO 2, channels-last: the input is [n, p, c] with p = H*W positions of c contiguous channels.
// A block owns one image and TC = POOL_THREADS/LANES channel vectors of POOL_VEC channels; its
// LANES lanes per vector walk the positions (POOL_UNROLL loads in flight), so every warp load is
// a coalesced run of channels. Lanes add up through shared memory; with POOL_SPLIT > 1 the
// positions are shared by the blocks of a cluster (DSMEM). Requires c % POOL_VEC == 0.
__device__ __forceinline__ void pool_cl(const pool_tin *__restrict__ x, pool_tout *__restrict__ y,
                                        int64_t n_img, int64_t p, int64_t c) {
    constexpr int LANES = POOL_LANES, TC = POOL_THREADS / LANES, V = POOL_VEC;
    __shared__ __align__(16) float red[POOL_THREADS * V];
    const int part = POOL_SPLIT > 1 ? (int)(blockIdx.x % POOL_SPLIT) : 0;
    const int64_t blk = blockIdx.x / POOL_SPLIT;
    const int64_t ncv = c / V, chunks = (ncv + TC - 1) / TC;
    const int64_t chunk = blk % chunks, n = blk / chunks;
    const int tc = threadIdx.x % TC, tp = threadIdx.x / TC;
    const int64_t cv = chunk * TC + tc;
    const int64_t p0 = p * part / POOL_SPLIT, p1 = p * (part + 1) / POOL_SPLIT;
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; k++)
        acc[k] = 0.f;
    if (n < n_img && cv < ncv) {
        const pool_tin *base = x + n * p * c + cv * V;
        for (int64_t q = p0 + tp; q < p1; q += (int64_t)LANES * POOL_UNROLL) {
            pool_vbits r[POOL_UNROLL];
#pragma unroll
            for (int u = 0; u < POOL_UNROLL; u++) {
                r[u] = pool_vbits{};
                if (q + (int64_t)u * LANES < p1)
                    r[u] = pool_ldv(
                        reinterpret_cast<const pool_vbits *>(base + (q + (int64_t)u * LANES) * c));
            }
#pragma unroll
            for (int u = 0; u < POOL_UNROLL; u++) {
                const pool_tin *e = reinterpret_cast<const pool_tin *>(&r[u]);
#pragma unroll
                for (int k = 0; k < V; k++)
                    acc[k] += pool_f(e[k]);
            }
        }
    }
    // red[tp][tc*V + k] (= red[threadIdx.x*V + k]): a warp writes one contiguous run, and the
    // reader of output channel o sums a column of LANES values
    if constexpr (V % 4 == 0) {
#pragma unroll
        for (int k = 0; k < V; k += 4)
            *reinterpret_cast<float4 *>(&red[threadIdx.x * V + k]) =
                make_float4(acc[k], acc[k + 1], acc[k + 2], acc[k + 3]);
    } else {
#pragma unroll
        for (int k = 0; k < V; k++)
            red[threadIdx.x * V + k] = acc[k];
    }
    __syncthreads();
    constexpr int PER = (TC * V + POOL_THREADS - 1) / POOL_THREADS;
    float total[PER];
#pragma unroll
    for (int i = 0; i < PER; i++) {
        const int o = threadIdx.x + i * POOL_THREADS;
        float s = 0.f;
        if (o < TC * V)
            for (int l = 0; l < LANES; l++)
                s += red[l * TC * V + o];
        total[i] = s;
    }
    const int64_t c0 = chunk * TC * V;
#if POOL_SPLIT > 1
    __syncthreads(); // red is reused for the cluster's partial sums
#pragma unroll
    for (int i = 0; i < PER; i++)
        if (threadIdx.x + i * POOL_THREADS < TC * V)
            red[threadIdx.x + i * POOL_THREADS] = total[i];
    pool_cluster_finish(red, TC * V, [&](int o, float s) {
        if (n < n_img && c0 + o < c)
            pool_put(y + n * c + c0 + o, s / (float)p);
    });
#else
#pragma unroll
    for (int i = 0; i < PER; i++) {
        const int o = threadIdx.x + i * POOL_THREADS;
        if (o < TC * V && n < n_img && c0 + o < c)
            pool_put(y + n * c + c0 + o, total[i] / (float)p);
    }
#endif
}

// ALGO 3, window: adaptive average pooling to any output size, one thread per output value (NCHW)
// or per POOL_VEC output channels (channels-last). Output (oh, ow) averages rows
// [floor(oh*h/out_h), ceil((oh+1)*h/out_h)) and the same for columns, as PyTorch does.
__device__ __forceinline__ void pool_window_nchw(const pool_tin *__restrict__ x,
                                                 pool_tout *__restrict__ y, int64_t rows,
                                                 int64_t h, int64_t w, int64_t out_h,
                                                 int64_t out_w) {
    const int64_t o = (int64_t)blockIdx.x * POOL_THREADS + threadIdx.x;
    if (o >= rows * out_h * out_w)
        return;
    const int64_t ow = o % out_w, t = o / out_w, oh = t % out_h, r = t / out_h;
    const int64_t hs = oh * h / out_h, he = ((oh + 1) * h + out_h - 1) / out_h;
    const int64_t ws = ow * w / out_w, we = ((ow + 1) * w + out_w - 1) / out_w;
    const pool_tin *xr = x + r * h * w;
    float s = 0.f;
    for (int64_t i = hs; i < he; i++)
        for (int64_t j = ws; j < we; j++)
            s += pool_f(xr[i * w + j]);
    pool_put(y + o, s / (float)((he - hs) * (we - ws)));
}

__device__ __forceinline__ void pool_window_nhwc(const pool_tin *__restrict__ x,
                                                 pool_tout *__restrict__ y, int64_t n_img,
                                                 int64_t h, int64_t w, int64_t c, int64_t out_h,
                                                 int64_t out_w) {
    constexpr int V = POOL_VEC;
    const int64_t ncv = c / V;
    const int64_t o = (int64_t)blockIdx.x * POOL_THREADS + threadIdx.x;
    if (o >= n_img * out_h * out_w * ncv)
        return;
    const int64_t cv = o % ncv, t = o / ncv, ow = t % out_w, t2 = t / out_w;
    const int64_t oh = t2 % out_h, n = t2 / out_h;
    const int64_t hs = oh * h / out_h, he = ((oh + 1) * h + out_h - 1) / out_h;
    const int64_t ws = ow * w / out_w, we = ((ow + 1) * w + out_w - 1) / out_w;
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; k++)
        acc[k] = 0.f;
    for (int64_t i = hs; i < he; i++)
        for (int64_t j = ws; j < we; j++) {
            const pool_vbits r = pool_ldv(
                reinterpret_cast<const pool_vbits *>(x + ((n * h + i) * w + j) * c + cv * V));
            const pool_tin *e = reinterpret_cast<const pool_tin *>(&r);
#pragma unroll
            for (int k = 0; k < V; k++)
                acc[k] += pool_f(e[k]);
        }
    const float count = (float)((he - hs) * (we - ws));
    pool_tout *yo = y + ((n * out_h + oh) * out_w + ow) * c + cv * V;
#pragma unroll
    for (int k = 0; k < V; k++)
        pool_put(yo + k, acc[k] / count);
}

#ifndef POOL_ENTRY_DEFINED
// Stand-alone use of this file (compile checks): the body POOL_ALGO selects on a float tensor.
extern "C" __global__ void __launch_bounds__(POOL_THREADS)
    pool_demo(const pool_tin *x, pool_tout *y, int64_t n, int64_t c, int64_t h, int64_t w) {
#if POOL_ALGO == 0
    pool_tile(x, y, n * c, h * w);
#elif POOL_ALGO == 1
    pool_direct(x, y, n * c, h * w);
#elif POOL_ALGO == 2
    pool_cl(x, y, n, h * w, c);
#else
    pool_window_nchw(x, y, n * c, h, w, 2, 2);
    pool_window_nhwc(x, y, n, h, w, c, 2, 2);
#endif
}
#endif
