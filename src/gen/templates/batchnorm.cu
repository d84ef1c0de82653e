/* batchnorm.cu: batch normalisation in inference (running statistics), optionally followed by a
 * residual add and/or ReLU: the __device__ bodies of kiln's batchnorm family (src/gen/batchnorm.c
 * writes the #defines, the launch lines and the entry points around them).
 *
 * The op is a per-channel affine map, y = x * a[c] + s[c] with a = w / sqrt(var + eps) and
 * s = b - mean * a: a pure stream, so everything here is about moving bytes at copy speed with
 * 16-byte accesses and several loads in flight per thread, while finding each element's channel
 * cheaply. The tensor is seen as [outer, C, inner] in memory order (NCHW: outer = N, inner = H*W;
 * channels-last, stored as dense NHWC: outer = N*H*W, inner = 1), and the modes differ in how a
 * thread learns its channel:
 *   BN_MODE 0  flat: any layout. Each CTA computes (a, s) for every channel into shared memory,
 *              then walks tiles of the flat tensor; a vector's channel is (i / inner) % C through
 *              two multiply-high divisions (a vector may straddle channels when inner is small,
 *              e.g. 7x7 maps; then the channel steps element by element).
 *   BN_MODE 1  rows: a CTA owns a chunk of one (outer, channel) row, so its channel is fixed and
 *              (a, s) is computed once per thread. Needs inner % BN_VEC == 0.
 *   BN_MODE 2  channels-last with C dividing BN_THREADS * BN_VEC: a thread's channels are the same
 *              in every tile, so its BN_VEC coefficients live in registers; the inner loop is a
 *              load, an FMA and a store.
 * BN_GRID 0 launches one CTA per tile; k > 0 launches at most k*132 CTAs (H200's SMs) that stride
 * over the tiles, so per-CTA set-up (the channel table, the coefficients) is paid a few times only.
 *
 * Rounding follows the reference: BN's output is rounded to its dtype (BN_MID) before the residual
 * add, the add's result once more when it is stored. ReLU keeps NaN (v < 0 ? 0 : v). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

/* ---- tuning parameters (the family's table) ---- */
#ifndef BN_MODE
#define BN_MODE 0
#endif
#ifndef BN_THREADS
#define BN_THREADS 256
#endif
#ifndef BN_UNROLL
#define BN_UNROLL 4
#endif
#ifndef BN_GRID
#define BN_GRID 0
#endif
/* elements per access, derived by the emitter: the widest (<= 16 bytes of x) the mode allows */
#ifndef BN_VEC
#define BN_VEC 4
#endif

/* ---- the problem's variant (written by the emitter; not tuned) ---- */
#ifndef BN_TX
#define BN_TX float
#endif
#ifndef BN_TY
#define BN_TY float
#endif
#ifndef BN_TW
#define BN_TW float
#endif
#ifndef BN_TB
#define BN_TB float
#endif
#ifndef BN_TRM
#define BN_TRM float
#endif
#ifndef BN_TRV
#define BN_TRV float
#endif
/* residual (BN_ADD) */
#ifndef BN_TR
#define BN_TR float
#endif
/* saved mean / invstd outputs (BN_SAVE) */
#ifndef BN_TS
#define BN_TS float
#endif
#ifndef BN_HAS_W
#define BN_HAS_W 1
#endif
#ifndef BN_HAS_B
#define BN_HAS_B 1
#endif
#ifndef BN_ADD
#define BN_ADD 0
#endif
#ifndef BN_RELU
#define BN_RELU 0
#endif
/* 1: outputs save_mean = running_mean and save_invstd = 1/sqrt(running_var + eps), [C] */
#ifndef BN_SAVE
#define BN_SAVE 0
#endif
/* dtype of the batch norm's own output in the reference: 0 float32, 1 bfloat16, 2 float16 */
#ifndef BN_MID
#define BN_MID 0
#endif

#define BN_TILE (BN_THREADS * BN_VEC * BN_UNROLL)

static_assert(BN_THREADS % 32 == 0 && BN_THREADS <= 1024, "BN_THREADS: a multiple of 32, <= 1024");
static_assert(BN_VEC * sizeof(BN_TX) <= 16, "BN_VEC: one vector of x is at most 16 bytes");

/* ---- conversions ---- */
__device__ __forceinline__ float bn_f(float v) {
    return v;
}
__device__ __forceinline__ float bn_f(__nv_bfloat16 v) {
    return __bfloat162float(v);
}
__device__ __forceinline__ float bn_f(__half v) {
    return __half2float(v);
}
template <typename T> __device__ __forceinline__ T bn_to(float v);
template <> __device__ __forceinline__ float bn_to<float>(float v) {
    return v;
}
template <> __device__ __forceinline__ __nv_bfloat16 bn_to<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half bn_to<__half>(float v) {
    return __float2half_rn(v);
}

__device__ __forceinline__ float bn_mid(float v) {
#if BN_MID == 1
    return __bfloat162float(__float2bfloat16_rn(v));
#elif BN_MID == 2
    return __half2float(__float2half_rn(v));
#else
    return v;
#endif
}

/* ---- vectors ---- */
template <typename T, int N> struct alignas(sizeof(T) * N) bn_vec {
    T v[N];
};
template <int B> struct bn_word;
template <> struct bn_word<2> {
    typedef unsigned short t;
};
template <> struct bn_word<4> {
    typedef unsigned int t;
};
template <> struct bn_word<8> {
    typedef uint2 t;
};
template <> struct bn_word<16> {
    typedef uint4 t;
};

/* Streaming loads: every element is read once. Types wider than x (a float residual of a bf16
 * input) may make a vector 32 bytes: two accesses. */
template <typename T, int N> __device__ __forceinline__ bn_vec<T, N> bn_load(const T *p) {
    constexpr int B = sizeof(T) * N;
    bn_vec<T, N> v;
    if constexpr (B <= 16) {
        typedef typename bn_word<B>::t W;
        union {
            W w;
            bn_vec<T, N> v;
        } u;
        u.w = __ldcs(reinterpret_cast<const W *>(p));
        v = u.v;
    } else {
        uint4 *w = reinterpret_cast<uint4 *>(&v);
#pragma unroll
        for (int k = 0; k < B / 16; k++)
            w[k] = __ldcs(reinterpret_cast<const uint4 *>(p) + k);
    }
    return v;
}

template <typename T, int N> __device__ __forceinline__ void bn_store(T *p, const bn_vec<T, N> &v) {
    constexpr int B = sizeof(T) * N;
    if constexpr (B <= 16) {
        typedef typename bn_word<B>::t W;
        union {
            W w;
            bn_vec<T, N> v;
        } u;
        u.v = v;
        __stcs(reinterpret_cast<W *>(p), u.w);
    } else {
        const uint4 *w = reinterpret_cast<const uint4 *>(&v);
#pragma unroll
        for (int k = 0; k < B / 16; k++)
            __stcs(reinterpret_cast<uint4 *>(p) + k, w[k]);
    }
}

/* n / d for n < 2^31 with a multiply-high instead of a division. */
struct bn_divider {
    unsigned m, s;
    __device__ explicit bn_divider(unsigned d) {
        s = 0;
        while ((1ull << s) < d)
            s++;
        m = (unsigned)(((1ull << 32) * ((1ull << s) - d)) / d + 1);
    }
    __device__ __forceinline__ unsigned div(unsigned n) const {
        return (__umulhi(n, m) + n) >> s;
    }
};

/* ---- the per-channel map ---- */
struct bn_params {
    const BN_TW *w;
    const BN_TB *b;
    const BN_TRM *rm;
    const BN_TRV *rv;
    float eps;
};

/* 1/sqrt(var + eps) as PyTorch computes it (not rsqrtf: it is also an output with BN_SAVE). */
__device__ __forceinline__ float bn_invstd(const bn_params &p, int c) {
    return 1.f / sqrtf(bn_f(p.rv[c]) + p.eps);
}

__device__ __forceinline__ float2 bn_coef(const bn_params &p, int c) {
    float a = bn_invstd(p, c);
#if BN_HAS_W
    a *= bn_f(p.w[c]);
#endif
#if BN_HAS_B
    float s = fmaf(-bn_f(p.rm[c]), a, bn_f(p.b[c]));
#else
    float s = -bn_f(p.rm[c]) * a;
#endif
    return make_float2(a, s);
}

/* The saved statistics outputs, by one CTA. */
__device__ __forceinline__ void bn_save(const bn_params &p, long long C, BN_TS *save_mean,
                                        BN_TS *save_invstd) {
#if BN_SAVE
    for (long long c = threadIdx.x; c < C; c += BN_THREADS) {
        save_mean[c] = bn_to<BN_TS>(bn_f(p.rm[c]));
        save_invstd[c] = bn_to<BN_TS>(bn_invstd(p, (int)c));
    }
#else
    (void)p, (void)C, (void)save_mean, (void)save_invstd;
#endif
}

__device__ __forceinline__ float bn_out(float x, float2 as, float r) {
    float v = fmaf(x, as.x, as.y);
#if BN_ADD
    v = bn_mid(v) + r;
#else
    (void)r;
#endif
#if BN_RELU
    v = v < 0.f ? 0.f : v;
#endif
    return v;
}

typedef bn_vec<BN_TX, BN_VEC> bn_xvec;
typedef bn_vec<BN_TY, BN_VEC> bn_yvec;
typedef bn_vec<BN_TR, BN_VEC> bn_rvec;

/* Element k of the residual vector, or 0 without one. */
__device__ __forceinline__ float bn_res(const bn_rvec &r, int k) {
#if BN_ADD
    return bn_f(r.v[k]);
#else
    (void)r, (void)k;
    return 0.f;
#endif
}

/* Loads this thread's vectors of a tile (and the residual's): all loads in flight before any use. */
__device__ __forceinline__ void bn_tile_load(const BN_TX *x, const BN_TR *r, unsigned base,
                                             unsigned n_full, bn_xvec *xv, bn_rvec *rv) {
#pragma unroll
    for (int u = 0; u < BN_UNROLL; u++) {
        unsigned i = base + ((unsigned)u * BN_THREADS + threadIdx.x) * BN_VEC;
        if (i < n_full) {
            xv[u] = bn_load<BN_TX, BN_VEC>(x + i);
#if BN_ADD
            rv[u] = bn_load<BN_TR, BN_VEC>(r + i);
#endif
        }
    }
    (void)r, (void)rv;
}

/* ---- BN_MODE 0: flat, channel table in shared memory ---- */
__device__ void bn_flat_body(const BN_TX *x, const BN_TR *r, BN_TY *y, const bn_params &p,
                             BN_TS *save_mean, BN_TS *save_invstd, long long outer, long long C,
                             long long inner) {
    extern __shared__ float2 bn_tab[];
    for (long long c = threadIdx.x; c < C; c += BN_THREADS)
        bn_tab[c] = bn_coef(p, (int)c);
    if (blockIdx.x == 0)
        bn_save(p, C, save_mean, save_invstd);
    __syncthreads();
    const unsigned total = (unsigned)(outer * C * inner);
    const unsigned n_full = total / BN_VEC * BN_VEC; /* vectors; the tail is done by CTA 0 */
    const unsigned Cu = (unsigned)C, inner_u = (unsigned)inner;
    const bn_divider by_inner(inner_u), by_c(Cu);
    const bool one_channel = inner_u % BN_VEC == 0; /* uniform: no vector straddles channels */
    for (unsigned base = blockIdx.x * (unsigned)BN_TILE; base < n_full;
         base += gridDim.x * (unsigned)BN_TILE) {
        bn_xvec xv[BN_UNROLL];
        bn_rvec rv[BN_UNROLL];
        bn_tile_load(x, r, base, n_full, xv, rv);
#pragma unroll
        for (int u = 0; u < BN_UNROLL; u++) {
            unsigned i = base + ((unsigned)u * BN_THREADS + threadIdx.x) * BN_VEC;
            if (i >= n_full)
                continue;
            unsigned q = by_inner.div(i), rin = i - q * inner_u;
            unsigned c = q - by_c.div(q) * Cu;
            bn_yvec o;
            if (one_channel) {
                float2 as = bn_tab[c];
#pragma unroll
                for (int k = 0; k < BN_VEC; k++)
                    o.v[k] = bn_to<BN_TY>(bn_out(bn_f(xv[u].v[k]), as, bn_res(rv[u], k)));
            } else {
#pragma unroll
                for (int k = 0; k < BN_VEC; k++) {
                    o.v[k] = bn_to<BN_TY>(bn_out(bn_f(xv[u].v[k]), bn_tab[c], bn_res(rv[u], k)));
                    if (++rin == inner_u) {
                        rin = 0;
                        c = c + 1 == Cu ? 0 : c + 1;
                    }
                }
            }
            bn_store<BN_TY, BN_VEC>(y + i, o);
        }
    }
    if (blockIdx.x == 0)
        for (unsigned i = n_full + threadIdx.x; i < total; i += BN_THREADS) {
            unsigned c = (i / inner_u) % Cu;
            float rr = 0.f;
#if BN_ADD
            rr = bn_f(r[i]);
#endif
            y[i] = bn_to<BN_TY>(bn_out(bn_f(x[i]), bn_tab[c], rr));
        }
}

/* ---- BN_MODE 1: one (outer, channel) row per blockIdx.x, a chunk of it per blockIdx.y ---- */
__device__ void bn_rows_body(const BN_TX *x, const BN_TR *r, BN_TY *y, const bn_params &p,
                             BN_TS *save_mean, BN_TS *save_invstd, long long outer, long long C,
                             long long inner) {
    (void)outer;
    if (blockIdx.x == 0 && blockIdx.y == 0)
        bn_save(p, C, save_mean, save_invstd);
    const long long row = blockIdx.x;
    const float2 as = bn_coef(p, (int)(row % C));
    const long long off = row * inner;
    const unsigned n = (unsigned)inner, base = blockIdx.y * (unsigned)BN_TILE;
    bn_xvec xv[BN_UNROLL];
    bn_rvec rv[BN_UNROLL];
    bn_tile_load(x + off, BN_ADD ? r + off : r, base, n, xv, rv);
#pragma unroll
    for (int u = 0; u < BN_UNROLL; u++) {
        unsigned i = base + ((unsigned)u * BN_THREADS + threadIdx.x) * BN_VEC;
        if (i < n) {
            bn_yvec o;
#pragma unroll
            for (int k = 0; k < BN_VEC; k++)
                o.v[k] = bn_to<BN_TY>(bn_out(bn_f(xv[u].v[k]), as, bn_res(rv[u], k)));
            bn_store<BN_TY, BN_VEC>(y + off + i, o);
        }
    }
}

/* ---- BN_MODE 2: channels-last, a thread's channels fixed, coefficients in registers ---- */
__device__ void bn_cl_body(const BN_TX *x, const BN_TR *r, BN_TY *y, const bn_params &p,
                           BN_TS *save_mean, BN_TS *save_invstd, long long outer, long long C) {
    if (blockIdx.x == 0)
        bn_save(p, C, save_mean, save_invstd);
    /* BN_TILE and BN_THREADS*BN_VEC are multiples of C (checked), so this never changes */
    const int c0 = (int)((threadIdx.x * BN_VEC) % (unsigned)C);
    float2 as[BN_VEC];
#pragma unroll
    for (int k = 0; k < BN_VEC; k++)
        as[k] = bn_coef(p, c0 + k);
    const unsigned n = (unsigned)(outer * C);
    for (unsigned base = blockIdx.x * (unsigned)BN_TILE; base < n;
         base += gridDim.x * (unsigned)BN_TILE) {
        bn_xvec xv[BN_UNROLL];
        bn_rvec rv[BN_UNROLL];
        bn_tile_load(x, r, base, n, xv, rv);
#pragma unroll
        for (int u = 0; u < BN_UNROLL; u++) {
            unsigned i = base + ((unsigned)u * BN_THREADS + threadIdx.x) * BN_VEC;
            if (i < n) {
                bn_yvec o;
#pragma unroll
                for (int k = 0; k < BN_VEC; k++)
                    o.v[k] = bn_to<BN_TY>(bn_out(bn_f(xv[u].v[k]), as[k], bn_res(rv[u], k)));
                bn_store<BN_TY, BN_VEC>(y + i, o);
            }
        }
    }
}

/* The entry points call this: the mode picks the body. */
__device__ __forceinline__ void bn_run(const BN_TX *x, const BN_TW *w, const BN_TB *b,
                                       const BN_TRM *rm, const BN_TRV *rv, const BN_TR *r,
                                       BN_TY *y, BN_TS *save_mean, BN_TS *save_invstd,
                                       long long outer, long long C, long long inner, float eps) {
    bn_params p = {w, b, rm, rv, eps};
#if BN_MODE == 0
    bn_flat_body(x, r, y, p, save_mean, save_invstd, outer, C, inner);
#elif BN_MODE == 1
    bn_rows_body(x, r, y, p, save_mean, save_invstd, outer, C, inner);
#else
    (void)inner;
    bn_cl_body(x, r, y, p, save_mean, save_invstd, outer, C);
#endif
}
