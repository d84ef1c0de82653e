/* rownorm.cu: the CUDA body shared by kiln's rmsnorm and layernorm families: normalisation over the last
 * dimension(s) of a contiguous tensor, fp32 statistics, x read once and y written once.
 *
 * The generated file defines the point and the variant before this text (every #define has a default
 * here, so the template compiles on its own) and an entry point after it that calls rn_rows().
 *
 * Geometry. The families' parameters are RN_ITEMS, RN_GROUP, RN_STREAM, RN_WEARLY and RN_PERSIST;
 * the emitter derives the rest from them and the problem's longest row:
 *   RN_ITEMS    vectors of its row each thread holds (or, when RN_KEEP is 1, has in flight);
 *               RN_PER_THREAD is what it really holds once RN_TPR is rounded to whole warps;
 *   RN_TPR      threads that share one row: a power of two below 32 (a segment of a warp, reduced with
 *               shuffles alone) or whole warps (shuffles, then one shared-memory exchange);
 *   RN_ROWS     rows per block (block = RN_TPR * RN_ROWS threads): as many as RN_GROUP warps hold;
 *   RN_CLUSTER  blocks of one thread-block cluster that split a row between them, -RN_GROUP when
 *               negative; their partial statistics meet through distributed shared memory;
 *   RN_VEC      elements per vector access (16 bytes of x at most);
 *   RN_KEEP     0: the thread's RN_ITEMS vectors stay in registers between statistics and output (one
 *               read); 1: rows too long for that are read twice, RN_ITEMS vectors in flight at a time;
 *   RN_STREAM   1: x is loaded and y stored with the evict-first hint (.cs): data touched once;
 *   RN_WEARLY   1: the thread's weight and bias columns are loaded before the first row, beside x,
 *               and held in registers across rows; 0: after each row's reduction, from L1;
 *   RN_PERSIST  1: the grid is capped at what is resident and each block loops over row groups (only
 *               the launch line changes).
 * Vector v of a block's slice of the row belongs to thread v % RN_TPR, item v / RN_TPR: a warp's loads of
 * one item are one contiguous run (coalesced), and a thread's RN_ITEMS loads are all in flight at once.
 *
 * Variant (from the match, not tuned): element types, which of weight/bias/gate/mean/rstd exist, and the
 * model's own chain of roundings as expressions over fp32 values: RN_W_PROG(w) (e.g. Gemma's 1 + w),
 * RN_G_PROG(g) (e.g. silu(g)), RN_Y_PROG(n, w, b, g) from the normalised n (e.g. Llama's
 * bf16(w * bf16(n))). eps arrives as an argument (a literal of the reference, or its scalar input).
 *
 * Statistics: rmsnorm sums x^2 in fp32 (a tree across lanes, warps and blocks). layernorm keeps per
 * thread (count, mean, M2) computed in two passes over its registers, and merges them across lanes,
 * warps and blocks with Chan's formula, always lower-ranked partial first, so that every thread of a row
 * ends with bit-identical statistics; rstd = rsqrt(M2 / cols + eps) (biased variance, as PyTorch). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#ifndef RN_KIND
#define RN_KIND 0 /* 0: rmsnorm, 1: layernorm */
#endif
#ifndef RN_TPR
#define RN_TPR 256
#endif
#ifndef RN_VEC
#define RN_VEC 8
#endif
#ifndef RN_ROWS
#define RN_ROWS 1
#endif
#ifndef RN_CLUSTER
#define RN_CLUSTER 1
#endif
#ifndef RN_KEEP
#define RN_KEEP 0
#endif
#ifndef RN_STREAM
#define RN_STREAM 0
#endif
#ifndef RN_WEARLY
#define RN_WEARLY 0
#endif
#ifndef RN_PERSIST
#define RN_PERSIST 0
#endif
#ifndef RN_ITEMS
#define RN_ITEMS 2
#endif
#ifndef RN_PER_THREAD /* derived: the vectors a thread really holds (<= RN_ITEMS) */
#define RN_PER_THREAD RN_ITEMS
#endif
#ifndef RN_GROUP
#define RN_GROUP 1
#endif
#ifndef RN_EVEN /* derived: every row of every workload gives each thread exactly RN_PER_THREAD */
#define RN_EVEN 0
#endif
#ifndef RN_X_T
#define RN_X_T __nv_bfloat16
#endif
#ifndef RN_W_T
#define RN_W_T __nv_bfloat16
#endif
#ifndef RN_B_T
#define RN_B_T __nv_bfloat16
#endif
#ifndef RN_G_T
#define RN_G_T __nv_bfloat16
#endif
#ifndef RN_Y_T
#define RN_Y_T __nv_bfloat16
#endif
#ifndef RN_MEAN_T
#define RN_MEAN_T float
#endif
#ifndef RN_RSTD_T
#define RN_RSTD_T float
#endif
#ifndef RN_HAS_W
#define RN_HAS_W 1
#endif
#ifndef RN_HAS_B
#define RN_HAS_B 0
#endif
#ifndef RN_HAS_G
#define RN_HAS_G 0
#endif
#ifndef RN_HAS_MEAN
#define RN_HAS_MEAN 0
#endif
#ifndef RN_HAS_RSTD
#define RN_HAS_RSTD 0
#endif
#ifndef RN_W_PROG
#define RN_W_PROG(w) (w)
#endif
#ifndef RN_B_PROG
#define RN_B_PROG(b) (b)
#endif
#ifndef RN_G_PROG
#define RN_G_PROG(g) (g)
#endif
#ifndef RN_Y_PROG
#define RN_Y_PROG(n, w, b, g) ((n) * (w))
#endif

#if RN_CLUSTER > 1
#include <cooperative_groups.h>
#endif

#define RN_BLOCK (RN_TPR * RN_ROWS)
#define RN_WPR (RN_TPR > 32 ? RN_TPR / 32 : 1) /* warps per row */
#define RN_SEG (RN_TPR < 32 ? RN_TPR : 32)     /* lanes of a row inside one warp */

/* ---- element conversions and the roundings a variant's programs use ---- */

__device__ __forceinline__ float rn_to_float(float v) {
    return v;
}
__device__ __forceinline__ float rn_to_float(__nv_bfloat16 v) {
    return __bfloat162float(v);
}
__device__ __forceinline__ float rn_to_float(__half v) {
    return __half2float(v);
}
__device__ __forceinline__ void rn_from_float(float &d, float v) {
    d = v;
}
__device__ __forceinline__ void rn_from_float(__nv_bfloat16 &d, float v) {
    d = __float2bfloat16_rn(v);
}
__device__ __forceinline__ void rn_from_float(__half &d, float v) {
    d = __float2half_rn(v);
}
__device__ __forceinline__ float rn_round_bf16(float v) {
    return __bfloat162float(__float2bfloat16_rn(v));
}
__device__ __forceinline__ float rn_round_f16(float v) {
    return __half2float(__float2half_rn(v));
}
/* PyTorch's silu in fp32: x / (1 + exp(-x)), with the accurate expf; with __expf and __fdividef
 * where the result reaches a 16-bit y only through products and roundings (RN_SILU_LP: the IEEE
 * division's slow-path branch also keeps elements from interleaving). */
#ifndef RN_SILU_LP
#define RN_SILU_LP 0
#endif
__device__ __forceinline__ float rn_silu(float v) {
#if RN_SILU_LP
    return __fdividef(v, 1.0f + __expf(-v));
#else
    return v / (1.0f + expf(-v));
#endif
}

/* ---- vectors: N elements of T as raw words, moved in chunks of at most 16 bytes ---- */

template <int B> struct rn_raw_of;
template <> struct rn_raw_of<16> { typedef uint4 type; };
template <> struct rn_raw_of<8> { typedef uint2 type; };
template <> struct rn_raw_of<4> { typedef unsigned int type; };
template <> struct rn_raw_of<2> { typedef unsigned short type; };

template <typename T, int N> struct rn_pack {
    // enumerators, not static members (no storage: see smx_pack in softmax.cu)
    enum { BYTES = N * (int)sizeof(T), CHUNK = BYTES < 16 ? BYTES : 16, NCHUNK = BYTES / CHUNK };
    typedef typename rn_raw_of<CHUNK>::type raw;
    raw r[NCHUNK];
    __device__ __forceinline__ float get(int k) const {
        return rn_to_float(reinterpret_cast<const T *>(r)[k]);
    }
};

/* An empty asm that claims to change the raw words: values converted from them before it cannot be
 * reused after it. Without it the compiler keeps a row's converted fp32 copies alive across the
 * reduction (twice the registers of the raw row), which costs occupancy. */
__device__ __forceinline__ void rn_opaque(uint4 &r) {
    asm volatile("" : "+r"(r.x), "+r"(r.y), "+r"(r.z), "+r"(r.w));
}
__device__ __forceinline__ void rn_opaque(uint2 &r) {
    asm volatile("" : "+r"(r.x), "+r"(r.y));
}
__device__ __forceinline__ void rn_opaque(unsigned int &r) {
    asm volatile("" : "+r"(r));
}
__device__ __forceinline__ void rn_opaque(unsigned short &r) {
    asm volatile("" : "+h"(r));
}
template <typename T, int N> __device__ __forceinline__ void rn_opaque(rn_pack<T, N> &p) {
#pragma unroll
    for (int c = 0; c < rn_pack<T, N>::NCHUNK; c++)
        rn_opaque(p.r[c]);
}

/* Loads N elements at src (aligned to the vector): the read-only path, or evict-first when streaming. */
template <typename T, int N, bool STREAM>
__device__ __forceinline__ void rn_load(rn_pack<T, N> &p, const T *src) {
    typedef typename rn_pack<T, N>::raw raw;
    const raw *s = reinterpret_cast<const raw *>(src);
#pragma unroll
    for (int c = 0; c < rn_pack<T, N>::NCHUNK; c++)
        p.r[c] = STREAM ? __ldcs(s + c) : __ldg(s + c);
}

/* Rounds N fp32 values once to T and stores them at dst. */
template <typename T, int N, bool STREAM>
__device__ __forceinline__ void rn_store(T *dst, const float (&v)[N]) {
    typedef typename rn_pack<T, N>::raw raw;
    rn_pack<T, N> p;
    T *e = reinterpret_cast<T *>(p.r);
#pragma unroll
    for (int k = 0; k < N; k++)
        rn_from_float(e[k], v[k]);
    raw *d = reinterpret_cast<raw *>(dst);
#pragma unroll
    for (int c = 0; c < rn_pack<T, N>::NCHUNK; c++) {
        if (STREAM)
            __stcs(d + c, p.r[c]);
        else
            d[c] = p.r[c];
    }
}

/* ---- statistics and their merge ---- */

#if RN_KIND == 0
typedef float rn_acc; /* sum of squares */
__device__ __forceinline__ rn_acc rn_zero() {
    return 0.0f;
}
__device__ __forceinline__ rn_acc rn_merge(rn_acc lo, rn_acc hi) {
    return lo + hi;
}
__device__ __forceinline__ rn_acc rn_shfl_xor(rn_acc v, int m) {
    return __shfl_xor_sync(0xffffffffu, v, m);
}
#else
struct rn_acc {
    float n, mean, m2; /* count, mean, sum of squared deviations from the mean */
};
__device__ __forceinline__ rn_acc rn_zero() {
    rn_acc z = {0.0f, 0.0f, 0.0f};
    return z;
}
/* Chan et al.'s pairwise update; exact in the count, stable in M2. */
__device__ __forceinline__ rn_acc rn_merge(rn_acc lo, rn_acc hi) {
    const float n = lo.n + hi.n;
    if (hi.n == 0.0f)
        return lo;
    if (lo.n == 0.0f)
        return hi;
    const float d = hi.mean - lo.mean;
    const float f = hi.n / n;
    rn_acc r;
    r.n = n;
    r.mean = fmaf(d, f, lo.mean);
    r.m2 = lo.m2 + hi.m2 + d * d * lo.n * f;
    return r;
}
__device__ __forceinline__ rn_acc rn_shfl_xor(rn_acc v, int m) {
    rn_acc o;
    o.n = __shfl_xor_sync(0xffffffffu, v.n, m);
    o.mean = __shfl_xor_sync(0xffffffffu, v.mean, m);
    o.m2 = __shfl_xor_sync(0xffffffffu, v.m2, m);
    return o;
}
#endif

/* Merges the partials of the RN_TPR threads of a row; every thread of the row gets the same result.
 * red: RN_ROWS * RN_WPR slots of shared memory, not in use by a previous call still being read. */
__device__ __forceinline__ rn_acc rn_reduce_row(rn_acc v, rn_acc *red, int grp, int lane) {
#pragma unroll
    for (int m = 1; m < RN_SEG; m <<= 1) {
        const rn_acc o = rn_shfl_xor(v, m);
        v = (lane & m) ? rn_merge(o, v) : rn_merge(v, o);
    }
#if RN_WPR > 1
    if ((lane & 31) == 0)
        red[grp * RN_WPR + (lane >> 5)] = v;
    __syncthreads();
    v = red[grp * RN_WPR];
#pragma unroll
    for (int k = 1; k < RN_WPR; k++)
        v = rn_merge(v, red[grp * RN_WPR + k]);
#endif
    return v;
}

#if RN_CLUSTER > 1
/* Merges the block partials of the RN_CLUSTER blocks of a cluster (rank order) through DSMEM. The caller
 * must keep its shared memory alive until every block has read it: the barrier_arrive() here is waited
 * for at the end of rn_rows(). */
__device__ __forceinline__ rn_acc rn_reduce_cluster(rn_acc v, cooperative_groups::cluster_group &cl) {
    __shared__ rn_acc part;
    if (threadIdx.x == 0)
        part = v;
    cl.sync();
    rn_acc t = *cl.map_shared_rank(&part, 0);
#pragma unroll
    for (int r = 1; r < RN_CLUSTER; r++)
        t = rn_merge(t, *cl.map_shared_rank(&part, r));
    (void)cl.barrier_arrive();
    return t;
}
#endif

/* Thread statistics of `count` vectors held in p (the thread's valid items). */
template <int NI>
__device__ __forceinline__ rn_acc rn_thread_stats(const rn_pack<RN_X_T, RN_VEC> (&p)[NI],
                                                  int count) {
#if RN_KIND == 0
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < NI; i++)
        if (i < count) {
#pragma unroll
            for (int k = 0; k < RN_VEC; k++) {
                const float f = p[i].get(k);
                ss = fmaf(f, f, ss);
            }
        }
    return ss;
#else
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < NI; i++)
        if (i < count) {
#pragma unroll
            for (int k = 0; k < RN_VEC; k++)
                s += p[i].get(k);
        }
    rn_acc a = rn_zero();
    if (count > 0) {
        a.n = (float)(count * RN_VEC);
        a.mean = s / a.n;
#pragma unroll
        for (int i = 0; i < NI; i++)
            if (i < count) {
#pragma unroll
                for (int k = 0; k < RN_VEC; k++) {
                    const float d = p[i].get(k) - a.mean;
                    a.m2 = fmaf(d, d, a.m2);
                }
            }
    }
    return a;
#endif
}

/* Writes RN_VEC outputs of one vector: n = x * rstd (rms) or (x - mean) * rstd, then the variant's
 * program with the weight, bias and gate of those columns. */
__device__ __forceinline__ void rn_emit(RN_Y_T *dst, const rn_pack<RN_X_T, RN_VEC> &xv,
                                        const rn_pack<RN_W_T, RN_VEC> &wv,
                                        const rn_pack<RN_B_T, RN_VEC> &bv,
                                        const rn_pack<RN_G_T, RN_VEC> &gv, float mean, float rstd) {
    float o[RN_VEC];
#pragma unroll
    for (int k = 0; k < RN_VEC; k++) {
#if RN_KIND == 0
        const float n = xv.get(k) * rstd;
        (void)mean;
#else
        const float n = (xv.get(k) - mean) * rstd;
#endif
        const float w = RN_HAS_W ? RN_W_PROG(wv.get(k)) : 1.0f;
        const float b = RN_HAS_B ? RN_B_PROG(bv.get(k)) : 0.0f;
        const float g = RN_HAS_G ? RN_G_PROG(gv.get(k)) : 1.0f;
        (void)w;
        (void)b;
        (void)g;
        o[k] = RN_Y_PROG(n, w, b, g);
    }
    rn_store<RN_Y_T, RN_VEC, RN_STREAM>(dst, o);
}

/* The whole kernel body: rows of `cols` elements of x (contiguous) into y; weight/bias have `cols`
 * elements; gate is shaped like x; mean/rstd get one value per row. Absent tensors are null. */
__device__ __forceinline__ void rn_rows(const RN_X_T *__restrict__ x, const RN_W_T *__restrict__ w,
                                        const RN_B_T *__restrict__ b, const RN_G_T *__restrict__ g,
                                        RN_Y_T *__restrict__ y, RN_MEAN_T *__restrict__ mean_out,
                                        RN_RSTD_T *__restrict__ rstd_out, int64_t rows, int64_t cols,
                                        float eps) {
    __shared__ rn_acc red[2][RN_WPR > 1 ? RN_ROWS * RN_WPR : 1]; /* only rows of several warps */
    const int lane = (int)threadIdx.x % RN_TPR;
    const int grp = (int)threadIdx.x / RN_TPR;
#if RN_CLUSTER > 1
    cooperative_groups::cluster_group cl = cooperative_groups::this_cluster();
    const int64_t rank = (int64_t)cl.block_rank();
    const int64_t first_group = (int64_t)blockIdx.x / RN_CLUSTER;
    const int64_t group_stride = (int64_t)gridDim.x / RN_CLUSTER;
#else
    const int64_t rank = 0;
    const int64_t first_group = blockIdx.x;
    const int64_t group_stride = gridDim.x;
#endif
    const int64_t nvec = cols / RN_VEC;
    const int64_t slice = (nvec + RN_CLUSTER - 1) / RN_CLUSTER;
    const int64_t v_begin = rank * slice < nvec ? rank * slice : nvec;
    const int64_t v_end = v_begin + slice < nvec ? v_begin + slice : nvec;
    const float inv_cols = 1.0f / (float)cols;
    (void)w;
    (void)b;
    (void)g;
    (void)mean_out;
    (void)rstd_out;

#if RN_KEEP == 0
    /* This thread's vectors: items 0..n_mine-1 at v_begin + lane + i * RN_TPR (element c0 + i *
     * RN_TPR * RN_VEC: a constant offset per item). With RN_EVEN every thread has all RN_PER_THREAD
     * of them, and the predicates fold away. Its weight and bias columns are the same for every row
     * it handles: with RN_WEARLY they are loaded once, before the rows, so that their latency hides
     * behind the row's; otherwise after each row's reduction, from L1, which saves as many
     * registers as the row itself takes. */
    const int64_t c0 = (v_begin + lane) * RN_VEC;
    const int64_t mine = v_end - v_begin - lane;
    const int n_mine = RN_EVEN ? RN_PER_THREAD : mine <= 0 ? 0 : (int)((mine + RN_TPR - 1) / RN_TPR);
    if (!RN_EVEN && n_mine > RN_PER_THREAD) /* a row longer than planned: fail loudly, never skip */
        __trap();
    rn_pack<RN_W_T, RN_VEC> wr[RN_PER_THREAD];
    rn_pack<RN_B_T, RN_VEC> br[RN_PER_THREAD];
#pragma unroll
    for (int i = 0; i < RN_PER_THREAD; i++)
        if (i < n_mine) {
            if (RN_HAS_W && RN_WEARLY)
                rn_load<RN_W_T, RN_VEC, false>(wr[i], w + c0 + i * (RN_TPR * RN_VEC));
            if (RN_HAS_B && RN_WEARLY)
                rn_load<RN_B_T, RN_VEC, false>(br[i], b + c0 + i * (RN_TPR * RN_VEC));
        }
#endif

    int parity = 0;
    for (int64_t rg = first_group; rg * RN_ROWS < rows; rg += group_stride, parity ^= 1) {
        const int64_t row = rg * RN_ROWS + grp;
        const bool active = row < rows;
        rn_acc acc;
#if RN_KEEP == 0
        const int n_here = active ? n_mine : 0;
        const int64_t t0 = row * cols + c0; /* this thread's first element of the row */
        rn_pack<RN_X_T, RN_VEC> xr[RN_PER_THREAD];
        rn_pack<RN_G_T, RN_VEC> gr[RN_PER_THREAD];
#pragma unroll
        for (int i = 0; i < RN_PER_THREAD; i++)
            if (i < n_here) {
                rn_load<RN_X_T, RN_VEC, RN_STREAM>(xr[i], x + t0 + i * (RN_TPR * RN_VEC));
                if (RN_HAS_G)
                    rn_load<RN_G_T, RN_VEC, RN_STREAM>(gr[i], g + t0 + i * (RN_TPR * RN_VEC));
            }
        acc = rn_thread_stats(xr, n_here);
#else
        const RN_X_T *xrow = x + row * cols;
        acc = rn_zero();
        if (active)
            for (int64_t v0 = v_begin + lane; v0 < v_end; v0 += (int64_t)RN_TPR * RN_PER_THREAD) {
                rn_pack<RN_X_T, RN_VEC> xr[RN_PER_THREAD];
                const int64_t left = (v_end - v0 + RN_TPR - 1) / RN_TPR;
                const int n_here = left < RN_PER_THREAD ? (int)left : RN_PER_THREAD;
#pragma unroll
                for (int i = 0; i < RN_PER_THREAD; i++)
                    if (i < n_here)
                        rn_load<RN_X_T, RN_VEC, false>(xr[i], xrow + (v0 + (int64_t)i * RN_TPR) * RN_VEC);
                acc = rn_merge(acc, rn_thread_stats(xr, n_here));
            }
#endif
        acc = rn_reduce_row(acc, red[parity], grp, lane);
#if RN_CLUSTER > 1
        acc = rn_reduce_cluster(acc, cl);
#endif
#if RN_KIND == 0
        const float mean = 0.0f;
        const float rstd = rsqrtf(acc * inv_cols + eps);
#else
        const float mean = acc.mean;
        const float rstd = rsqrtf(acc.m2 * inv_cols + eps);
#endif
        if (active && lane == 0 && rank == 0) {
#if RN_HAS_MEAN
            rn_from_float(mean_out[row], mean);
#endif
#if RN_HAS_RSTD
            rn_from_float(rstd_out[row], rstd);
#endif
        }
#if RN_KEEP == 0
#pragma unroll
        for (int i = 0; i < RN_PER_THREAD; i++)
            if (i < n_here) {
                const int64_t col = c0 + i * (RN_TPR * RN_VEC);
                rn_opaque(xr[i]);
                if (RN_HAS_W && RN_WEARLY)
                    rn_opaque(wr[i]);
                if (RN_HAS_B && RN_WEARLY)
                    rn_opaque(br[i]);
                if (RN_HAS_W && !RN_WEARLY)
                    rn_load<RN_W_T, RN_VEC, false>(wr[i], w + col);
                if (RN_HAS_B && !RN_WEARLY)
                    rn_load<RN_B_T, RN_VEC, false>(br[i], b + col);
                rn_emit(y + t0 + i * (RN_TPR * RN_VEC), xr[i], wr[i], br[i], gr[i], mean, rstd);
            }
#else
        RN_Y_T *yrow = y + row * cols;
        if (active)
            for (int64_t v0 = v_begin + lane; v0 < v_end; v0 += (int64_t)RN_TPR * RN_PER_THREAD) {
                rn_pack<RN_X_T, RN_VEC> xr[RN_PER_THREAD];
                rn_pack<RN_W_T, RN_VEC> wr[RN_PER_THREAD];
                rn_pack<RN_B_T, RN_VEC> br[RN_PER_THREAD];
                rn_pack<RN_G_T, RN_VEC> gr[RN_PER_THREAD];
                const int64_t left = (v_end - v0 + RN_TPR - 1) / RN_TPR;
                const int n_here = left < RN_PER_THREAD ? (int)left : RN_PER_THREAD;
#pragma unroll
                for (int i = 0; i < RN_PER_THREAD; i++)
                    if (i < n_here) {
                        const int64_t col = (v0 + (int64_t)i * RN_TPR) * RN_VEC;
                        rn_load<RN_X_T, RN_VEC, false>(xr[i], xrow + col);
                        if (RN_HAS_W)
                            rn_load<RN_W_T, RN_VEC, false>(wr[i], w + col);
                        if (RN_HAS_B)
                            rn_load<RN_B_T, RN_VEC, false>(br[i], b + col);
                        if (RN_HAS_G)
                            rn_load<RN_G_T, RN_VEC, RN_STREAM>(gr[i], g + row * cols + col);
                    }
#pragma unroll
                for (int i = 0; i < RN_PER_THREAD; i++)
                    if (i < n_here)
                        rn_emit(yrow + (v0 + (int64_t)i * RN_TPR) * RN_VEC, xr[i], wr[i], br[i],
                                gr[i], mean, rstd);
            }
#endif
    }
#if RN_CLUSTER > 1
    cl.barrier_wait(); /* no block leaves while another may still read its partial */
#endif
}
