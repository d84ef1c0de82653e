/* groupnorm.cu: group normalisation over a channels-first tensor [N, C, *spatial] (PyTorch's
 * native_group_norm), optionally followed by SiLU: the __device__ bodies of kiln's groupnorm family
 * (src/gen/groupnorm.c writes the #defines, the launch lines and the entry points around them).
 *
 * A row is one (batch, group) pair: M = (C/G)*HW contiguous elements whose channel is
 * c0 + offset/HW. A CTA works on a slice [lo, hi) of a row in tiles of GN_TILE elements, each
 * thread holding GN_UNROLL vectors of GN_VEC elements in registers (all its loads in flight at
 * once). Statistics are Chan's parallel form of Welford: each tile's mean and M2 are exact two-pass
 * values over registers, merged into the running (count, mean, M2) with one division per tile, so
 * a mean far from zero costs no precision (E[x^2] - mean^2 would).
 *
 * Tiles that stay on chip are never read twice: the last tile of a slice stays in registers and
 * the GN_STAGE tiles before it are parked in shared memory; earlier tiles are read again after the
 * statistics are known (with the default cache policy the first time, so that the re-read can hit
 * L2, and streaming the second time). What differs between the modes is how a CTA learns the
 * statistics of the whole row:
 *   GN_MODE 0  one CTA per row; its slice is the row.
 *   GN_MODE 1  GN_SPLIT CTAs per row in two launches: gn_partial_body writes each slice's
 *              (n, mean, M2) to kiln_scratch, gn_apply_body merges them and normalises its slice
 *              (read a second time, in reverse CTA order so that the last-read slices hit L2).
 *   GN_MODE 2  one launch, GN_SPLIT CTAs per row, each slice wholly on chip. A CTA takes a
 *              ticket (the order CTAs really started in) that names its slice, publishes its
 *              partial, and spins until the GN_SPLIT partials of its row are in. Deadlock-free
 *              when GN_SPLIT CTAs can be resident at once: the tickets before the waiting CTA's
 *              are held by running CTAs, so the oldest incomplete row always completes
 *              (GN_SPLIT <= 128 and every CTA fits on an SM, so 132 SMs always suffice).
 *   GN_MODE 3  a thread-block cluster of GN_SPLIT CTAs per row exchanges partials through
 *              distributed shared memory; the hardware co-schedules a cluster, so nothing spins.
 * Cluster operations are inline PTX rather than cooperative_groups: NVRTC compiles
 * <cooperative_groups.h> in ~0.7 s more per candidate and the cubin grows 40x.
 *
 * Arithmetic is fp32; y = x * a + b' with a = rstd * w[c], b' = bias[c] - mean * a (PyTorch's own
 * form), rounded once into y's type. A fused SiLU rounds where the reference does: the group norm
 * result into GN_MID (its output dtype), the SiLU result again.
 *
 * GN_ADD: x is the sum of two inputs a + b (a residual add before the norm, a VAE block's), rounded
 * into GN_TX as PyTorch's add rounds. 1: the sum is an output too, written where a tile is first
 * read; a tile read again (modes 0 and 1) is read from it, one tensor instead of two. 2: no sum
 * output; a tile read again is a and b again, added again (bitwise the same x). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

/* ---- tuning parameters (the family's table) ---- */
#ifndef GN_MODE
#define GN_MODE 0
#endif
/* CTAs per row (modes 1, 2, 3; mode 0: 1) */
#ifndef GN_SPLIT
#define GN_SPLIT 1
#endif
#ifndef GN_THREADS
#define GN_THREADS 256
#endif
#ifndef GN_UNROLL
#define GN_UNROLL 4
#endif
/* ---- geometry the emitter derives from the problem and the point ---- */
/* elements per access: the widest (<= 16 bytes of x) dividing H*W, so a vector is one channel's */
#ifndef GN_VEC
#define GN_VEC 4
#endif
/* tiles parked in shared memory: the fewest that keep a CTA's slice on chip (0 in mode 1) */
#ifndef GN_STAGE
#define GN_STAGE 0
#endif

/* ---- the problem's variant (written by the emitter; not tuned) ---- */
#ifndef GN_TX
#define GN_TX float
#endif
#ifndef GN_TY
#define GN_TY float
#endif
#ifndef GN_TW
#define GN_TW float
#endif
#ifndef GN_TB
#define GN_TB float
#endif
#ifndef GN_TM
#define GN_TM float
#endif
#ifndef GN_HAS_W
#define GN_HAS_W 1
#endif
#ifndef GN_HAS_B
#define GN_HAS_B 1
#endif
/* 1: the problem has mean and rstd outputs [N, G] (native_group_norm) */
#ifndef GN_HAS_STATS
#define GN_HAS_STATS 0
#endif
/* 0 none, 1 silu(v) = v / (1 + exp(-v)), 2 v * sigmoid(v) as two rounded ops */
#ifndef GN_SILU
#define GN_SILU 0
#endif
/* x = a + b: 1 with the sum an output (the entry passes a, b and it), 2 without */
#ifndef GN_ADD
#define GN_ADD 0
#endif
/* dtype of the group norm's own output in the reference: 0 float32, 1 bfloat16, 2 float16 */
#ifndef GN_MID
#define GN_MID 0
#endif

#define GN_TILE (GN_THREADS * GN_VEC * GN_UNROLL)
/* __launch_bounds__ minimum: 1024 threads per SM (at most 64 registers a thread), so that a CTA
 * waiting at a row counter (mode 2) leaves room on its SM for another that streams; 512 when a
 * thread holds 128 bytes of tile (32 registers of data: 64 would spill). */
#define GN_TILE_BYTES (GN_UNROLL * GN_VEC * sizeof(GN_TX))
/* more than 64 registers a thread: over 64 bytes of tile, or with an add (a's and b's tiles and the
 * sum at once) from 32 bytes on */
#define GN_WIDE (GN_ADD ? GN_TILE_BYTES >= 32 : GN_TILE_BYTES > 64)
#define GN_MIN_BLOCKS_RAW ((GN_WIDE ? 512 : 1024) / GN_THREADS)
#define GN_MIN_BLOCKS (GN_MIN_BLOCKS_RAW > 0 ? GN_MIN_BLOCKS_RAW : 1)
#define GN_WARPS (GN_THREADS / 32)
/* Polls of a mode-2 spin before it gives up with a trap (each poll is an L2 round trip, ~0.5 us:
 * ~1 s, thousands of times any legitimate wait): a hang would be worse. */
#define GN_SPIN_LIMIT (1u << 21)

static_assert(GN_THREADS % 32 == 0 && GN_THREADS <= 1024, "GN_THREADS: a multiple of 32, <= 1024");
static_assert(GN_VEC * sizeof(GN_TX) <= 16, "GN_VEC: one vector of x is at most 16 bytes");
static_assert(GN_MODE != 3 || GN_SPLIT <= 16, "GN_MODE 3: a cluster has at most 16 CTAs");
static_assert(GN_MODE != 2 || GN_SPLIT <= 128, "GN_MODE 2: at most 128 co-resident CTAs per row");

/* ---- conversions ---- */
__device__ __forceinline__ float gn_f(float v) {
    return v;
}
__device__ __forceinline__ float gn_f(__nv_bfloat16 v) {
    return __bfloat162float(v);
}
__device__ __forceinline__ float gn_f(__half v) {
    return __half2float(v);
}
template <typename T> __device__ __forceinline__ T gn_to(float v);
template <> __device__ __forceinline__ float gn_to<float>(float v) {
    return v;
}
template <> __device__ __forceinline__ __nv_bfloat16 gn_to<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half gn_to<__half>(float v) {
    return __float2half_rn(v);
}

/* v rounded to the reference's intermediate dtype. */
__device__ __forceinline__ float gn_mid(float v) {
#if GN_MID == 1
    return __bfloat162float(__float2bfloat16_rn(v));
#elif GN_MID == 2
    return __half2float(__float2half_rn(v));
#else
    return v;
#endif
}

/* The SiLU's division. Where its result is rounded to 16 bits at once (GN_MID), __fdividef: the
 * IEEE division's slow-path branch fences every element off from the next (no two interleave), and
 * its ~2 ulp of fp32 vanish in the rounding. For a denominator past 2^126 (v below about -88) both
 * give 0, the limit. */
#if GN_MID != 0
#define GN_DIV(a, b) __fdividef(a, b)
#else
#define GN_DIV(a, b) ((a) / (b))
#endif

/* 1 bfloat16, 2 float16, 0 otherwise: GN_MID's codes for a storage type */
template <typename T> struct gn_code {
    enum { v = 0 };
};
template <> struct gn_code<__nv_bfloat16> {
    enum { v = 1 };
};
template <> struct gn_code<__half> {
    enum { v = 2 };
};

/* What follows the normalisation (on the fp32 value, before the final rounding). The last rounding
 * into GN_MID is left to the store where y has that type: rounding twice to one type is once. */
__device__ __forceinline__ float gn_act(float v) {
#if GN_SILU != 0
    v = gn_mid(v);
#endif
#if GN_SILU == 1
    v = GN_DIV(v, 1.f + __expf(-v));
#elif GN_SILU == 2
    v = v * gn_mid(GN_DIV(1.f, 1.f + __expf(-v)));
#endif
    return gn_code<GN_TY>::v == GN_MID ? v : gn_mid(v);
}

/* ---- vectors: N elements moved as one 2-, 4-, 8- or 16-byte access (32 bytes: two) ---- */
template <typename T, int N> struct alignas(sizeof(T) * N) gn_vec {
    T v[N];
};
template <int B> struct gn_word;
template <> struct gn_word<2> {
    typedef unsigned short t;
};
template <> struct gn_word<4> {
    typedef unsigned int t;
};
template <> struct gn_word<8> {
    typedef uint2 t;
};
template <> struct gn_word<16> {
    typedef uint4 t;
};

enum { GN_KEEP = 0, GN_STREAM = 1 };

/* GN_KEEP: the default policy (the data will be read again, let L2 keep it); GN_STREAM: last use. */
template <int HINT, typename T, int N> __device__ __forceinline__ gn_vec<T, N> gn_load(const T *p) {
    typedef typename gn_word<sizeof(T) * N>::t W;
    union {
        W w;
        gn_vec<T, N> v;
    } u;
    const W *q = reinterpret_cast<const W *>(p);
    u.w = HINT == GN_STREAM ? __ldcs(q) : __ldg(q);
    return u.v;
}

/* GN_STREAM: evict-first (nothing reads it again); GN_KEEP: the default policy. */
template <typename T, int N, int HINT = GN_STREAM>
__device__ __forceinline__ void gn_store(T *p, const gn_vec<T, N> &v) {
    constexpr int B = sizeof(T) * N;
    if constexpr (B <= 16) {
        typedef typename gn_word<B>::t W;
        union {
            W w;
            gn_vec<T, N> v;
        } u;
        u.v = v;
        if constexpr (HINT == GN_STREAM)
            __stcs(reinterpret_cast<W *>(p), u.w);
        else
            *reinterpret_cast<W *>(p) = u.w;
    } else {
        const uint4 *w = reinterpret_cast<const uint4 *>(&v);
#pragma unroll
        for (int k = 0; k < B / 16; k++)
            __stcs(reinterpret_cast<uint4 *>(p) + k, w[k]);
    }
}

/* n / d for n < 2^31 with a multiply-high instead of a division (d fixed per launch). */
struct gn_divider {
    unsigned m, s;
    __device__ explicit gn_divider(unsigned d) {
        s = 0;
        while ((1ull << s) < d)
            s++;
        m = (unsigned)(((1ull << 32) * ((1ull << s) - d)) / d + 1);
    }
    __device__ __forceinline__ unsigned div(unsigned n) const {
        return (__umulhi(n, m) + n) >> s;
    }
};

/* ---- statistics: (count, mean, M2) and Chan's merge ---- */
struct gn_stats {
    float n, mean, m2;
};

__device__ __forceinline__ gn_stats gn_merge(gn_stats a, gn_stats b) {
    float n = a.n + b.n;
    if (n == 0.f)
        return a;
    float delta = b.mean - a.mean, r = b.n / n;
    gn_stats o;
    o.n = n;
    o.mean = fmaf(delta, r, a.mean);
    o.m2 = a.m2 + b.m2 + delta * delta * a.n * r;
    return o;
}

__device__ __forceinline__ gn_stats gn_shfl_down(gn_stats s, int o) {
    gn_stats t;
    t.n = __shfl_down_sync(0xffffffffu, s.n, o);
    t.mean = __shfl_down_sync(0xffffffffu, s.mean, o);
    t.m2 = __shfl_down_sync(0xffffffffu, s.m2, o);
    return t;
}

/* Merges a warp's values into lane 0 in a fixed tree (so every CTA merging the same partials gets
 * the same bits). */
__device__ __forceinline__ gn_stats gn_warp_merge(gn_stats s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        s = gn_merge(s, gn_shfl_down(s, o));
    return s;
}

/* The CTA's merged statistics, returned to every thread. */
__device__ gn_stats gn_block_merge(gn_stats s) {
    __shared__ gn_stats part[GN_WARPS];
    __shared__ gn_stats total;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    s = gn_warp_merge(s);
    if (lane == 0)
        part[warp] = s;
    __syncthreads();
    if (warp == 0) {
        gn_stats t = {0.f, 0.f, 0.f};
        if (lane < GN_WARPS)
            t = part[lane];
        t = gn_warp_merge(t);
        if (lane == 0)
            total = t;
    }
    __syncthreads();
    return total;
}

/* Merges n partials (float4: n, mean, M2, -) in index order; every thread gets the result. The
 * partials are read through L2 (__ldcg): other CTAs wrote them. */
__device__ gn_stats gn_merge_parts(const float4 *parts, int n) {
    __shared__ gn_stats res;
    if (threadIdx.x < 32) {
        gn_stats s = {0.f, 0.f, 0.f};
        for (int i = threadIdx.x; i < n; i += 32) {
            float4 q = __ldcg(parts + i);
            gn_stats t = {q.x, q.y, q.z};
            s = gn_merge(s, t);
        }
        s = gn_warp_merge(s);
        if (threadIdx.x == 0)
            res = s;
    }
    __syncthreads();
    return res;
}

/* (mean, rstd) of a row from its statistics; the CTA owning slice 0 writes the stats outputs. */
__device__ __forceinline__ float2 gn_final(gn_stats s, float eps, long long row, bool writer,
                                           GN_TM *mean_out, GN_TM *rstd_out) {
    float var = s.n > 0.f ? s.m2 / s.n : 0.f;
    float rstd = rsqrtf(fmaxf(var, 0.f) + eps);
#if GN_HAS_STATS
    if (writer && threadIdx.x == 0) {
        mean_out[row] = gn_to<GN_TM>(s.mean);
        rstd_out[row] = gn_to<GN_TM>(rstd);
    }
#else
    (void)row, (void)writer, (void)mean_out, (void)rstd_out;
#endif
    return make_float2(s.mean, rstd);
}

/* f rounded into a vector of T; 16-bit types two at a time (one packed conversion a pair). */
template <typename T, int N> __device__ __forceinline__ gn_vec<T, N> gn_round(const float *f) {
    gn_vec<T, N> o;
    if constexpr (N % 2 == 0 && gn_code<T>::v == 1) {
#pragma unroll
        for (int k = 0; k < N; k += 2) {
            __nv_bfloat162 p = __floats2bfloat162_rn(f[k], f[k + 1]);
            o.v[k] = p.x, o.v[k + 1] = p.y;
        }
    } else if constexpr (N % 2 == 0 && gn_code<T>::v == 2) {
#pragma unroll
        for (int k = 0; k < N; k += 2) {
            __half2 p = __floats2half2_rn(f[k], f[k + 1]);
            o.v[k] = p.x, o.v[k + 1] = p.y;
        }
    } else {
#pragma unroll
        for (int k = 0; k < N; k++)
            o.v[k] = gn_to<T>(f[k]);
    }
    return o;
}

/* ---- tiles ---- */
typedef gn_vec<GN_TX, GN_VEC> gn_xvec;
typedef gn_vec<GN_TY, GN_VEC> gn_yvec;

struct gn_tile {
    gn_xvec v[GN_UNROLL];
};

/* Row-relative offset of vector u of this thread in the tile starting at t0. */
__device__ __forceinline__ unsigned gn_at(unsigned t0, int u) {
    return t0 + ((unsigned)u * GN_THREADS + threadIdx.x) * GN_VEC;
}

template <int HINT>
__device__ __forceinline__ void gn_tile_load(gn_tile &t, const GN_TX *xr, unsigned t0,
                                             unsigned hi) {
#pragma unroll
    for (int u = 0; u < GN_UNROLL; u++) {
        unsigned e = gn_at(t0, u);
        if (e < hi)
            t.v[u] = gn_load<HINT, GN_TX, GN_VEC>(xr + e);
    }
}

/* Where x comes from: x itself (a), or with GN_ADD a + b (and with GN_ADD 1 the sum output s). */
struct gn_in {
    const GN_TX *a, *b;
    GN_TX *s;
    __device__ gn_in at(long long o) const {
#if GN_ADD == 1
        return gn_in{a + o, b + o, s + o};
#elif GN_ADD == 2
        return gn_in{a + o, b + o, s};
#else
        return gn_in{a + o, b, s};
#endif
    }
};

/* The first read of a tile. With GN_ADD 1, a and b are streamed (never read again) and the rounded
 * sum is stored where a later read of the tile (HINT GN_KEEP) finds it, in L2 if it is soon; with
 * GN_ADD 2, a and b are what a later read reads. */
template <int HINT>
__device__ __forceinline__ void gn_tile_first(gn_tile &t, const gn_in &in, unsigned t0,
                                              unsigned hi) {
#if GN_ADD
    constexpr int AB = GN_ADD == 1 ? GN_STREAM : HINT;
    gn_tile o;
    gn_tile_load<AB>(t, in.a, t0, hi);
    gn_tile_load<AB>(o, in.b, t0, hi);
#pragma unroll
    for (int u = 0; u < GN_UNROLL; u++) {
        unsigned e = gn_at(t0, u);
        if (e < hi) {
#pragma unroll
            for (int k = 0; k < GN_VEC; k++)
                t.v[u].v[k] = gn_to<GN_TX>(gn_f(t.v[u].v[k]) + gn_f(o.v[u].v[k]));
#if GN_ADD == 1
            gn_store<GN_TX, GN_VEC, HINT>(in.s + e, t.v[u]);
#endif
        }
    }
#else
    gn_tile_load<HINT>(t, in.a, t0, hi);
#endif
}

/* A tile read again, for the last time: x, the sum its first read stored (a coherent load: this
 * kernel may have written it), or a + b again. */
__device__ __forceinline__ void gn_tile_again(gn_tile &t, const gn_in &in, unsigned t0,
                                              unsigned hi) {
#if GN_ADD == 2
    gn_tile_first<GN_STREAM>(t, in, t0, hi);
#else
    gn_tile_load<GN_STREAM>(t, GN_ADD ? in.s : in.a, t0, hi);
#endif
}

/* Exact two-pass mean and M2 of the thread's valid elements of a tile. */
__device__ __forceinline__ gn_stats gn_tile_stats(const gn_tile &t, unsigned t0, unsigned hi) {
    float sum[GN_VEC];
    int cnt = 0;
#pragma unroll
    for (int k = 0; k < GN_VEC; k++)
        sum[k] = 0.f;
#pragma unroll
    for (int u = 0; u < GN_UNROLL; u++)
        if (gn_at(t0, u) < hi) {
            cnt += GN_VEC;
#pragma unroll
            for (int k = 0; k < GN_VEC; k++)
                sum[k] += gn_f(t.v[u].v[k]);
        }
    float total = 0.f;
#pragma unroll
    for (int k = 0; k < GN_VEC; k++)
        total += sum[k];
    gn_stats s;
    s.n = (float)cnt;
    s.mean = cnt ? total / (float)cnt : 0.f;
    float m2 = 0.f;
#pragma unroll
    for (int u = 0; u < GN_UNROLL; u++)
        if (gn_at(t0, u) < hi) {
#pragma unroll
            for (int k = 0; k < GN_VEC; k++) {
                float d = gn_f(t.v[u].v[k]) - s.mean;
                m2 = fmaf(d, d, m2);
            }
        }
    s.m2 = m2;
    return s;
}

/* What normalising needs besides the data. */
struct gn_norm {
    const GN_TW *w;
    const GN_TB *b;
    gn_divider hw; /* offset -> channel within the group */
    int c0;        /* first channel of the group */
    float mean, rstd;
};

__device__ __forceinline__ void gn_tile_apply(const gn_tile &t, GN_TY *yr, unsigned t0, unsigned hi,
                                              const gn_norm &nm) {
#pragma unroll
    for (int u = 0; u < GN_UNROLL; u++) {
        unsigned e = gn_at(t0, u);
        if (e < hi) {
            /* HW % GN_VEC == 0 (checked by the family), so a vector lies in one channel */
            int c = nm.c0 + (int)nm.hw.div(e);
#if GN_HAS_W
            float a = nm.rstd * gn_f(nm.w[c]);
#else
            float a = nm.rstd;
#endif
#if GN_HAS_B
            float sh = fmaf(-a, nm.mean, gn_f(nm.b[c]));
#else
            float sh = -a * nm.mean;
#endif
            float f[GN_VEC];
#pragma unroll
            for (int k = 0; k < GN_VEC; k++)
                f[k] = gn_act(fmaf(gn_f(t.v[u].v[k]), a, sh));
            gn_store<GN_TY, GN_VEC>(yr + e, gn_round<GN_TY, GN_VEC>(f));
        }
    }
}

/* Normalises the slice [lo, hi) of one row (xr, yr point at the row). finish(partial) turns the
 * CTA's merged statistics of the slice into the row's (mean, rstd); every thread calls it. */
template <typename Finish>
__device__ __forceinline__ void gn_slice(const gn_in &xr, GN_TY *yr, unsigned lo, unsigned hi,
                                         gn_norm &nm, Finish finish) {
#if GN_STAGE > 0
    extern __shared__ __align__(16) unsigned char gn_smem[];
    gn_xvec *stage = reinterpret_cast<gn_xvec *>(gn_smem);
#endif
    const unsigned n_tiles = hi > lo ? (hi - lo + GN_TILE - 1) / GN_TILE : 0;
    /* tiles from keep on stay on chip: the last in registers, up to GN_STAGE before it in smem */
    const unsigned keep = n_tiles > GN_STAGE + 1 ? n_tiles - (GN_STAGE + 1) : 0;
    gn_stats acc = {0.f, 0.f, 0.f};
    gn_tile t;
    for (unsigned k = 0; k < n_tiles; k++) {
        unsigned t0 = lo + k * GN_TILE;
        if (k >= keep)
            gn_tile_first<GN_STREAM>(t, xr, t0, hi);
        else
            gn_tile_first<GN_KEEP>(t, xr, t0, hi);
        acc = gn_merge(acc, gn_tile_stats(t, t0, hi));
#if GN_STAGE > 0
        if (k >= keep && k + 1 < n_tiles) {
            /* each thread reads back only what it wrote: no barrier needed */
#pragma unroll
            for (int u = 0; u < GN_UNROLL; u++)
                stage[((k - keep) * GN_UNROLL + u) * GN_THREADS + threadIdx.x] = t.v[u];
        }
#endif
    }
    float2 mr = finish(gn_block_merge(acc));
    nm.mean = mr.x;
    nm.rstd = mr.y;
    if (n_tiles == 0)
        return;
    gn_tile_apply(t, yr, lo + (n_tiles - 1) * GN_TILE, hi, nm);
#if GN_STAGE > 0
    for (unsigned k = n_tiles - 1; k-- > keep;) {
#pragma unroll
        for (int u = 0; u < GN_UNROLL; u++)
            t.v[u] = stage[((k - keep) * GN_UNROLL + u) * GN_THREADS + threadIdx.x];
        gn_tile_apply(t, yr, lo + k * GN_TILE, hi, nm);
    }
#endif
    /* the tiles that did not stay on chip, newest first (the likeliest to still be in L2) */
    for (unsigned k = keep; k-- > 0;) {
        unsigned t0 = lo + k * GN_TILE;
        gn_tile_again(t, xr, t0, hi);
        gn_tile_apply(t, yr, t0, hi, nm);
    }
}

/* The common geometry of a launch: rows = N*G, each of M = (C/G)*HW elements. */
struct gn_geom {
    long long rows;
    unsigned M, cg;
    int G;
    __device__ gn_geom(long long N, long long C, long long HW, int groups) {
        G = groups;
        rows = N * groups;
        cg = (unsigned)(C / groups);
        M = (unsigned)(cg * HW);
    }
};

__device__ __forceinline__ gn_norm gn_norm_for(const GN_TW *w, const GN_TB *b, long long HW,
                                               const gn_geom &g, long long row) {
    gn_norm nm = {w, b, gn_divider((unsigned)HW), (int)((row % g.G) * g.cg), 0.f, 0.f};
    return nm;
}

/* ---- GN_MODE 0: one CTA per row ---- */
__device__ void gn_rows_body(gn_in x, const GN_TW *w, const GN_TB *b, GN_TY *y,
                             GN_TM *mean_out, GN_TM *rstd_out, long long N, long long C,
                             long long HW, int G, float eps) {
    gn_geom g(N, C, HW, G);
    const long long row = blockIdx.x;
    gn_norm nm = gn_norm_for(w, b, HW, g, row);
    gn_slice(x.at(row * g.M), y + row * g.M, 0u, g.M, nm, [&](gn_stats s) {
        return gn_final(s, eps, row, true, mean_out, rstd_out);
    });
}

/* ---- GN_MODE 1: split over GN_SPLIT CTAs, two launches through kiln_scratch ---- */
/* Slice s of GN_SPLIT (modes 1, 2, 3): equal parts, whole vectors. */
__device__ __forceinline__ void gn_split_range(unsigned M, unsigned s, unsigned &lo, unsigned &hi) {
    unsigned per = (M + GN_SPLIT - 1) / GN_SPLIT;
    per = (per + GN_VEC - 1) / GN_VEC * GN_VEC;
    lo = min(M, s * per);
    hi = min(M, lo + per);
}

__device__ void gn_partial_body(gn_in x, long long N, long long C, long long HW, int G,
                                void *scratch) {
    gn_geom g(N, C, HW, G);
    const long long blk = blockIdx.x, row = blk / GN_SPLIT;
    unsigned lo, hi;
    gn_split_range(g.M, (unsigned)(blk % GN_SPLIT), lo, hi);
    const gn_in xr = x.at(row * g.M);
    gn_stats acc = {0.f, 0.f, 0.f};
    gn_tile t;
    for (unsigned t0 = lo; t0 < hi; t0 += GN_TILE) {
        gn_tile_first<GN_KEEP>(t, xr, t0, hi);
        acc = gn_merge(acc, gn_tile_stats(t, t0, hi));
    }
    acc = gn_block_merge(acc);
    if (threadIdx.x == 0)
        reinterpret_cast<float4 *>(scratch)[blk] = make_float4(acc.n, acc.mean, acc.m2, 0.f);
}

__device__ void gn_apply_body(gn_in x, const GN_TW *w, const GN_TB *b, GN_TY *y,
                              GN_TM *mean_out, GN_TM *rstd_out, long long N, long long C,
                              long long HW, int G, float eps, void *scratch) {
    gn_geom g(N, C, HW, G);
    /* reverse order: the slices the partial pass read last are likeliest to be in L2 */
    const long long blk = (long long)gridDim.x - 1 - blockIdx.x, row = blk / GN_SPLIT;
    const unsigned s = (unsigned)(blk % GN_SPLIT);
    gn_stats tot = gn_merge_parts(reinterpret_cast<const float4 *>(scratch) + row * GN_SPLIT,
                                  GN_SPLIT);
    float2 mr = gn_final(tot, eps, row, s == 0, mean_out, rstd_out);
    gn_norm nm = gn_norm_for(w, b, HW, g, row);
    nm.mean = mr.x;
    nm.rstd = mr.y;
    unsigned lo, hi;
    gn_split_range(g.M, s, lo, hi);
    const gn_in xr = x.at(row * g.M);
    GN_TY *yr = y + row * g.M;
    gn_tile t;
    for (unsigned t0 = lo; t0 < hi; t0 += GN_TILE) {
        gn_tile_again(t, xr, t0, hi);
        gn_tile_apply(t, yr, t0, hi, nm);
    }
}

/* ---- GN_MODE 2: one launch, slices on chip, rows completed through global counters ---- */
__device__ __forceinline__ unsigned gn_ld_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* kiln_scratch: float4 parts[rows * GN_SPLIT], unsigned count[rows], unsigned ticket. */
__device__ void gn_coop_body(gn_in x, const GN_TW *w, const GN_TB *b, GN_TY *y,
                             GN_TM *mean_out, GN_TM *rstd_out, long long N, long long C,
                             long long HW, int G, float eps, void *scratch) {
    gn_geom g(N, C, HW, G);
    float4 *parts = reinterpret_cast<float4 *>(scratch);
    unsigned *count = reinterpret_cast<unsigned *>(parts + g.rows * GN_SPLIT);
    unsigned *ticket = count + g.rows;
    __shared__ unsigned s_ticket;
    if (threadIdx.x == 0)
        s_ticket = atomicAdd(ticket, 1u);
    __syncthreads();
    const long long row = s_ticket / GN_SPLIT;
    const unsigned s = s_ticket % GN_SPLIT;
    unsigned lo, hi;
    gn_split_range(g.M, s, lo, hi);
    gn_norm nm = gn_norm_for(w, b, HW, g, row);
    gn_slice(x.at(row * g.M), y + row * g.M, lo, hi, nm, [&](gn_stats part) {
        if (threadIdx.x == 0) {
            parts[row * GN_SPLIT + s] = make_float4(part.n, part.mean, part.m2, 0.f);
            __threadfence();
            atomicAdd(count + row, 1u);
            unsigned polls = 0;
            while (gn_ld_acquire(count + row) < GN_SPLIT) {
                __nanosleep(64);
                if (++polls == GN_SPIN_LIMIT)
                    __trap(); /* the row's CTAs are not co-resident: fail loudly, never hang */
            }
        }
        __syncthreads();
        return gn_final(gn_merge_parts(parts + row * GN_SPLIT, GN_SPLIT), eps, row, s == 0,
                        mean_out, rstd_out);
    });
}

/* ---- GN_MODE 3: a cluster of GN_SPLIT CTAs per row, partials through DSMEM ---- */
__device__ __forceinline__ unsigned gn_cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

__device__ __forceinline__ void gn_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
                 "barrier.cluster.wait.acquire.aligned;" ::
                     : "memory");
}

/* The float4 at the same shared address in CTA rank of the cluster. */
__device__ __forceinline__ float4 gn_cluster_load(const float4 *local, unsigned rank) {
    unsigned la = (unsigned)__cvta_generic_to_shared(local), ra;
    float4 v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(la), "r"(rank));
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"(ra)
                 : "memory");
    return v;
}

__device__ void gn_cluster_body(gn_in x, const GN_TW *w, const GN_TB *b, GN_TY *y,
                                GN_TM *mean_out, GN_TM *rstd_out, long long N, long long C,
                                long long HW, int G, float eps) {
    gn_geom g(N, C, HW, G);
    __shared__ float4 my_part;
    __shared__ gn_stats row_stats;
    const unsigned rank = gn_cluster_rank();
    const long long row = blockIdx.x / GN_SPLIT;
    unsigned lo, hi;
    gn_split_range(g.M, rank, lo, hi);
    gn_norm nm = gn_norm_for(w, b, HW, g, row);
    gn_slice(x.at(row * g.M), y + row * g.M, lo, hi, nm, [&](gn_stats part) {
        if (threadIdx.x == 0)
            my_part = make_float4(part.n, part.mean, part.m2, 0.f);
        gn_cluster_sync();
        if (threadIdx.x < 32) {
            gn_stats s = {0.f, 0.f, 0.f};
            if (threadIdx.x < GN_SPLIT) {
                float4 q = gn_cluster_load(&my_part, threadIdx.x);
                s.n = q.x, s.mean = q.y, s.m2 = q.z;
            }
            s = gn_warp_merge(s);
            if (threadIdx.x == 0)
                row_stats = s;
        }
        /* every CTA has read every partial (so none may leave early), and row_stats is visible */
        gn_cluster_sync();
        return gn_final(row_stats, eps, row, rank == 0, mean_out, rstd_out);
    });
}
