// eltwise.cu: the CUDA side of kiln's eltwise family: a fused chain of pointwise ops in one pass.
// The generator (src/gen/eltwise.c) writes the chain as a struct with three methods (load the
// inputs of one vector into registers, compute and store it, do one element alone) and the
// driver below runs it over the output: ELT_UNROLL vectors of ELT_VEC elements per thread, all
// loads issued before any math, 16-byte accesses, one chunk per thread or a grid-stride loop.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#ifndef ELT_THREADS
#define ELT_THREADS 256 // threads per block
#endif
#ifndef ELT_VEC
#define ELT_VEC 8 // elements per vector (the emitter: ELT_VBYTES / widest element size)
#endif
#ifndef ELT_UNROLL
#define ELT_UNROLL 2 // vectors per thread per pass, loads all in flight together
#endif
#ifndef ELT_GRID
#define ELT_GRID 0 // 0: one chunk per block (exact grid); k: persistent grid-stride, k*132 blocks
#endif
#ifndef ELT_HINT
#define ELT_HINT 1 // 0 plain loads/stores, 1 streaming (evict-first), 2 no-L1 loads with 256B L2 prefetch
#endif
#ifndef ELT_FAST
#define ELT_FAST 0 // 1: exp/sigmoid/SiLU/GELU-tanh through __expf and fast division
#endif
#ifndef ELT_IDX64
#define ELT_IDX64 0 // 64-bit element indices (outputs of 2^30 elements or more)
#endif

#if ELT_IDX64
typedef unsigned long long elt_idx;
#else
typedef unsigned int elt_idx;
#endif

// ---- raw vectors: N bytes of one operand ----
struct elt_u32x8 {
    uint4 a, b;
};
template <int N> struct elt_raw;
template <> struct elt_raw<2> {
    typedef unsigned short t;
};
template <> struct elt_raw<4> {
    typedef unsigned int t;
};
template <> struct elt_raw<8> {
    typedef uint2 t;
};
template <> struct elt_raw<16> {
    typedef uint4 t;
};
template <> struct elt_raw<32> {
    typedef elt_u32x8 t;
};

template <class T> __device__ __forceinline__ T elt_ld1(const T *p) {
#if ELT_HINT == 1
    return __ldcs(p);
#elif ELT_HINT == 2
    if constexpr (sizeof(T) == 16) {
        uint4 r;
        asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                     : "l"(p));
        return *reinterpret_cast<T *>(&r);
    } else if constexpr (sizeof(T) == 8) {
        uint2 r;
        asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0, %1}, [%2];"
                     : "=r"(r.x), "=r"(r.y)
                     : "l"(p));
        return *reinterpret_cast<T *>(&r);
    } else if constexpr (sizeof(T) == 4) {
        unsigned r;
        asm volatile("ld.global.nc.L1::no_allocate.L2::256B.u32 %0, [%1];" : "=r"(r) : "l"(p));
        return *reinterpret_cast<T *>(&r);
    } else {
        unsigned short r;
        asm volatile("ld.global.nc.L1::no_allocate.L2::256B.u16 %0, [%1];" : "=h"(r) : "l"(p));
        return *reinterpret_cast<T *>(&r);
    }
#else
    return *p;
#endif
}

template <class T> __device__ __forceinline__ void elt_st1(T *p, const T &v) {
#if ELT_HINT >= 1
    __stcs(p, v);
#else
    *p = v;
#endif
}

// N bytes at p (N-byte aligned, or 16 for N = 32).
template <int N> __device__ __forceinline__ typename elt_raw<N>::t elt_ld(const void *p) {
    if constexpr (N == 32) {
        elt_u32x8 r;
        r.a = elt_ld1(reinterpret_cast<const uint4 *>(p));
        r.b = elt_ld1(reinterpret_cast<const uint4 *>(p) + 1);
        return r;
    } else {
        return elt_ld1(reinterpret_cast<const typename elt_raw<N>::t *>(p));
    }
}

template <int N> __device__ __forceinline__ void elt_st(void *p, const typename elt_raw<N>::t &v) {
    if constexpr (N == 32) {
        elt_st1(reinterpret_cast<uint4 *>(p), v.a);
        elt_st1(reinterpret_cast<uint4 *>(p) + 1, v.b);
    } else {
        elt_st1(reinterpret_cast<typename elt_raw<N>::t *>(p), v);
    }
}

// A broadcast operand is re-read by many threads: a cached read-only load.
template <class T> __device__ __forceinline__ T elt_ldb(const T *p) {
    return __ldg(p);
}

// ---- conversions: every value is computed in fp32 and rounded to its dtype after each op ----
__device__ __forceinline__ float elt_f(float v) {
    return v;
}
__device__ __forceinline__ float elt_f(__nv_bfloat16 v) {
    return __bfloat162float(v);
}
__device__ __forceinline__ float elt_f(__half v) {
    return __half2float(v);
}
template <class T> __device__ __forceinline__ T elt_to(float v);
template <> __device__ __forceinline__ float elt_to<float>(float v) {
    return v;
}
template <> __device__ __forceinline__ __nv_bfloat16 elt_to<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half elt_to<__half>(float v) {
    return __float2half_rn(v);
}
// The value a bfloat16 / float16 tensor would hold: what eager PyTorch stores between ops.
__device__ __forceinline__ float elt_rbf(float v) {
    return __bfloat162float(__float2bfloat16_rn(v));
}
__device__ __forceinline__ float elt_rhf(float v) {
    return __half2float(__float2half_rn(v));
}

// ---- the ops, as PyTorch's CUDA kernels compute them in fp32 ----
__device__ __forceinline__ float elt_exp(float x) {
#if ELT_FAST
    return __expf(x);
#else
    return expf(x);
#endif
}
__device__ __forceinline__ float elt_sigmoid(float x) {
#if ELT_FAST
    return __fdividef(1.f, 1.f + __expf(-x));
#else
    return 1.f / (1.f + expf(-x));
#endif
}
__device__ __forceinline__ float elt_silu(float x) {
#if ELT_FAST
    return __fdividef(x, 1.f + __expf(-x));
#else
    return x / (1.f + expf(-x));
#endif
}
// 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3): the fast form needs one
// exponential and no tanh, and keeps full fp32 accuracy (no cancellation near 1 + tanh = 0).
__device__ __forceinline__ float elt_gelu_tanh(float x) {
    const float beta = 0.7978845608028654f, kappa = 0.044715f;
    const float u = beta * (x + kappa * x * x * x);
#if ELT_FAST
    return __fdividef(x, 1.f + __expf(-2.f * u));
#else
    return 0.5f * x * (1.f + tanhf(u));
#endif
}
__device__ __forceinline__ float elt_gelu_erf(float x) {
    return x * 0.5f * (1.f + erff(x * 0.70710678118654752f));
}
// tanh of a value rounded to 16 bits right after: the hardware approximation (2^-11) is enough.
__device__ __forceinline__ float elt_tanh16(float x) {
#if ELT_FAST
    float r;
    asm("tanh.approx.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
#else
    return tanhf(x);
#endif
}
__device__ __forceinline__ float elt_rsqrt(float x) {
    return rsqrtf(x); // what PyTorch's CUDA rsqrt and pow(x, -0.5) use
}
__device__ __forceinline__ float elt_relu(float x) {
    return x < 0.f ? 0.f : x; // NaN stays NaN
}
__device__ __forceinline__ float elt_leaky(float x, float slope) {
    return x > 0.f ? x : x * slope;
}
__device__ __forceinline__ float elt_clamp(float x, float lo, float hi) {
    return isnan(x) ? x : fminf(fmaxf(x, lo), hi);
}
__device__ __forceinline__ float elt_max(float a, float b) {
    return isnan(a) || isnan(b) ? a + b : fmaxf(a, b);
}
__device__ __forceinline__ float elt_min(float a, float b) {
    return isnan(a) || isnan(b) ? a + b : fminf(a, b);
}

// ---- the driver ----
// One chunk: ELT_UNROLL vectors per thread from vector `base`, the block's threads interleaved so
// that each of the ELT_UNROLL rounds is one coalesced sweep. The chunk that reaches past the last
// whole vector also does the scalar tail (total % ELT_VEC elements).
template <class Chain>
__device__ __forceinline__ void elt_chunk(Chain &c, elt_idx base, elt_idx nvec, elt_idx total) {
    const elt_idx v0 = base + threadIdx.x;
    if (base + (elt_idx)ELT_THREADS * ELT_UNROLL <= nvec) {
#pragma unroll
        for (int u = 0; u < ELT_UNROLL; u++)
            c.load(u, (v0 + (elt_idx)u * ELT_THREADS) * ELT_VEC);
#pragma unroll
        for (int u = 0; u < ELT_UNROLL; u++)
            c.compute_store(u, (v0 + (elt_idx)u * ELT_THREADS) * ELT_VEC);
    } else {
#pragma unroll
        for (int u = 0; u < ELT_UNROLL; u++)
            if (v0 + (elt_idx)u * ELT_THREADS < nvec)
                c.load(u, (v0 + (elt_idx)u * ELT_THREADS) * ELT_VEC);
#pragma unroll
        for (int u = 0; u < ELT_UNROLL; u++)
            if (v0 + (elt_idx)u * ELT_THREADS < nvec)
                c.compute_store(u, (v0 + (elt_idx)u * ELT_THREADS) * ELT_VEC);
        if (base <= nvec)
            for (elt_idx e = nvec * ELT_VEC + threadIdx.x; e < total; e += ELT_THREADS)
                c.scalar(e);
    }
}

template <class Chain> __device__ __forceinline__ void elt_drive(Chain &c, elt_idx total) {
    const elt_idx nvec = total / ELT_VEC;
    const elt_idx chunk = (elt_idx)ELT_THREADS * ELT_UNROLL;
#if ELT_GRID == 0
    elt_chunk(c, (elt_idx)blockIdx.x * chunk, nvec, total);
#else
    for (elt_idx base = (elt_idx)blockIdx.x * chunk; base <= nvec; base += (elt_idx)gridDim.x * chunk)
        elt_chunk(c, base, nvec, total);
#endif
}

#ifndef ELT_CHAIN_DEFINED
// Stand-alone use of this file (compile checks): out = silu(gate) * up in bfloat16, the chain the
// generator writes for a SiLU-gated MLP.
#define ELT_BYTES (ELT_VEC * 2)
struct elt_demo_chain {
    const __nv_bfloat16 *__restrict__ gate;
    const __nv_bfloat16 *__restrict__ up;
    __nv_bfloat16 *__restrict__ out;
    elt_raw<ELT_BYTES>::t r0[ELT_UNROLL], r1[ELT_UNROLL];
    __device__ __forceinline__ void load(int u, elt_idx e) {
        r0[u] = elt_ld<ELT_BYTES>(gate + e);
        r1[u] = elt_ld<ELT_BYTES>(up + e);
    }
    __device__ __forceinline__ void compute_store(int u, elt_idx e) {
        const __nv_bfloat16 *a = reinterpret_cast<const __nv_bfloat16 *>(&r0[u]);
        const __nv_bfloat16 *b = reinterpret_cast<const __nv_bfloat16 *>(&r1[u]);
        elt_raw<ELT_BYTES>::t o;
        __nv_bfloat16 *ov = reinterpret_cast<__nv_bfloat16 *>(&o);
#pragma unroll
        for (int k = 0; k < ELT_VEC; k++)
            ov[k] = elt_to<__nv_bfloat16>(elt_rbf(elt_silu(elt_f(a[k]))) * elt_f(b[k]));
        elt_st<ELT_BYTES>(out + e, o);
    }
    __device__ __forceinline__ void scalar(elt_idx e) {
        out[e] = elt_to<__nv_bfloat16>(elt_rbf(elt_silu(elt_f(gate[e]))) * elt_f(up[e]));
    }
};
extern "C" __global__ void __launch_bounds__(ELT_THREADS)
    elt_demo(const __nv_bfloat16 *gate, const __nv_bfloat16 *up, __nv_bfloat16 *out, int64_t n) {
    elt_demo_chain c;
    c.gate = gate;
    c.up = up;
    c.out = out;
    elt_drive(c, (elt_idx)n);
}
#endif
