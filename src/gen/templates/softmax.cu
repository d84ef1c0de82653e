// softmax.cu: the softmax family's CUDA template: y = softmax(x [* scale] [+ mask]) over the last
// dimension with fp32 math whatever x, mask and y are stored as, from a thread per row to a row
// split across a thread-block cluster.
//
// The work. Rows are independent; a row is read, reduced twice (its max, then the sum of exp(x -
// max)) and written. A row is cut into vectors of SMX_VEC elements; SMX_TPR threads share a row (a
// power of two: 1..32 share a warp, more span several warps) and SMX_THREADS / SMX_TPR rows share a
// block; with SMX_SPLIT > 1 a cluster of SMX_SPLIT blocks shares each row group, every block taking
// a contiguous slice of the vectors, and the blocks exchange their partial (max, sum) through
// distributed shared memory. Thread `lane` of a row owns vectors lane, lane + TPR, lane + 2 TPR ...
// of its slice, so every access of a warp is contiguous.
//
// Where the row lives between the reductions (SMX_CACHE):
//   0  nowhere: streamed from global memory again by each pass (two reads with the online
//      form, three with the two-pass form; the later reads mostly hit L2 when few rows are
//      in flight);
//   1  registers: every load of the slice is issued at once (SMX_MAXV vectors per thread),
//      then the reductions and the write run on registers: one read, one write, the minimum;
//   2  shared memory: staged with cp.async (no registers, every copy in flight at once), then
//      the passes read shared memory: one read of global memory, for slices too big for
//      registers.
// How the (max, sum) pair is found (SMX_ONLINE):
//   0  two-pass: reduce the max over the row, then the sum of exp(x - max) (two reductions);
//   1  online: each thread keeps a running (max, sum), rescaling its sum when the max grows,
//      and the pairs merge in ONE reduction (m = max(m1, m2), s = s1 e^(m1-m) + s2 e^(m2-m));
//      with a cluster that is one DSMEM exchange instead of two.
// SMX_UNROLL vectors per thread are loaded before any is used in streaming loops (loads in
// flight); SMX_PERSIST > 0 caps the grid at 132 * SMX_PERSIST row groups' worth of blocks that
// loop over the row groups (a persistent grid for many short rows).
//
// Semantics kept from PyTorch: a row whose logits are all -inf (fully masked) is NaN, a row with
// +inf or NaN is NaN, a row of finite logits is finite (finfo.min ones included: a row of them all
// is uniform), and a logit of -inf or finfo.min below a finite max gives exactly 0. Sums never
// turn NaN from an empty or masked part: a (max, sum) of (-inf, 0) is the identity of the merge.
//
// exp is ex2.approx (relative error ~2^-22) of (x - max) * log2(e), max being the max of the part
// the sum covers (a thread's, a chunk's or the row's). Not x*log2(e) - max*log2(e) in one FMA,
// although that saves an add: max*log2(e) overflows to -inf for the finite maxima of masked parts
// (finfo.min, -3.4e38, which attention masks add: the part's exponents become +inf and its sum
// inf, then inf * 0 = NaN where the merge scales it by e^(finfo.min - max)), and its rounding,
// up to 2^-24 of max*log2(e), differs between the parts an online merge combines and does not
// cancel. One extra add per element, the same for every thread, is free in a kernel bound by
// memory and ex2.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

// ---- the point (kiln_family_defines writes these; the template compiles alone) ----
#ifndef SMX_THREADS
#define SMX_THREADS 256 // threads per block
#endif
#ifndef SMX_TPR
#define SMX_TPR 256 // threads per row, a power of two <= SMX_THREADS
#endif
#ifndef SMX_VEC
#define SMX_VEC 4 // elements per vector access (1, 2, 4, 8); divides the row length
#endif
#ifndef SMX_CACHE
#define SMX_CACHE 1 // 0 stream, 1 registers, 2 shared memory
#endif
#ifndef SMX_ONLINE
#define SMX_ONLINE 1 // 1 online (max, sum) pairs, 0 max then sum
#endif
#ifndef SMX_UNROLL
#define SMX_UNROLL 2 // vectors in flight per thread in streaming loops
#endif
#ifndef SMX_SPLIT
#define SMX_SPLIT 1 // blocks (a cluster) per row group
#endif
#ifndef SMX_PERSIST
#define SMX_PERSIST 0 // 0: a block per row group; k: at most 132 * k row groups in flight, looping
#endif

// ---- the problem (the emitter writes these from the match) ----
// dtype codes: 0 float32, 1 bfloat16, 2 float16; -1 in a SMX_ROUND_* means "no rounding".
#ifndef SMX_TIN
#define SMX_TIN 0 // x
#endif
#ifndef SMX_TOUT
#define SMX_TOUT 0 // y
#endif
#ifndef SMX_HAS_MASK
#define SMX_HAS_MASK 0 // an additive mask, broadcast over the leading dimensions
#endif
#ifndef SMX_TMASK
#define SMX_TMASK 0
#endif
#ifndef SMX_MASK_DIRECT
#define SMX_MASK_DIRECT 0 // the mask has x's shape: mask row = row
#endif
#ifndef SMX_HAS_SCALE
#define SMX_HAS_SCALE 0 // logits = x * scale (before the mask)
#endif
#ifndef SMX_ROUND_SCALED
#define SMX_ROUND_SCALED -1 // eager PyTorch rounds x * scale to x's dtype
#endif
#ifndef SMX_ROUND_MASKED
#define SMX_ROUND_MASKED -1 // ... and x * scale + mask to the promoted dtype
#endif
#ifndef SMX_ROUND_RESULT
#define SMX_ROUND_RESULT -1 // softmax computed in a narrower dtype than y (softmax(bf16).float())
#endif
#ifndef SMX_MAXV
#define SMX_MAXV 4 // CACHE 1: vectors per thread of the longest slice of any workload
#endif

#define SMX_RPB (SMX_THREADS / SMX_TPR)           // rows per block
#define SMX_LANES (SMX_TPR < 32 ? SMX_TPR : 32)   // threads of one row inside one warp
#define SMX_WPR (SMX_TPR > 32 ? SMX_TPR / 32 : 1) // warps per row
#define SMX_LOG2E 1.4426950408889634f

#if SMX_THREADS % SMX_TPR != 0 || SMX_THREADS < 32 || SMX_THREADS > 1024
#error "SMX_TPR must divide SMX_THREADS, and SMX_THREADS must be 32..1024"
#endif

// ---- storage types and conversions (16-bit types travel as raw bits: unions stay trivial) ----
template <int CODE> struct smx_dt;
template <> struct smx_dt<0> {
    typedef float t;
    static __device__ __forceinline__ float f32(t v) {
        return v;
    }
    static __device__ __forceinline__ t from(float f) {
        return f;
    }
};
// from2 rounds two floats with one packed conversion (cvt.rn.bf16x2.f32): half the conversions of
// the output, which matter at 8 elements per 16-byte store.
template <> struct smx_dt<1> {
    typedef unsigned short t;
    static __device__ __forceinline__ float f32(t v) {
        return __uint_as_float((unsigned)v << 16);
    }
    static __device__ __forceinline__ t from(float f) {
        return __bfloat16_as_ushort(__float2bfloat16_rn(f));
    }
    static __device__ __forceinline__ unsigned from2(float lo, float hi) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        return (unsigned)__bfloat16_as_ushort(h.x) | ((unsigned)__bfloat16_as_ushort(h.y) << 16);
    }
};
template <> struct smx_dt<2> {
    typedef unsigned short t;
    static __device__ __forceinline__ float f32(t v) {
        return __half2float(__ushort_as_half(v));
    }
    static __device__ __forceinline__ t from(float f) {
        return __half_as_ushort(__float2half_rn(f));
    }
    static __device__ __forceinline__ unsigned from2(float lo, float hi) {
        const __half2 h = __floats2half2_rn(lo, hi);
        return (unsigned)__half_as_ushort(h.x) | ((unsigned)__half_as_ushort(h.y) << 16);
    }
};

// Rounds f to dtype CODE and back (eager PyTorch's intermediate results); CODE -1 keeps f.
template <int CODE> __device__ __forceinline__ float smx_round(float f) {
    return smx_dt<CODE>::f32(smx_dt<CODE>::from(f));
}
template <> __device__ __forceinline__ float smx_round<-1>(float f) {
    return f;
}
template <> __device__ __forceinline__ float smx_round<0>(float f) {
    return f;
}

typedef smx_dt<SMX_TIN>::t smx_in_t;
typedef smx_dt<SMX_TOUT>::t smx_out_t;
typedef smx_dt<SMX_TMASK>::t smx_mask_t;

// ---- vector memory access: N elements of T as 2..16-byte words (32 bytes: two 16-byte words) ----
template <int BYTES> struct smx_word;
template <> struct smx_word<2> { typedef unsigned short t; };
template <> struct smx_word<4> { typedef unsigned int t; };
template <> struct smx_word<8> { typedef uint2 t; };
template <> struct smx_word<16> { typedef uint4 t; };

template <typename T, int N> struct smx_pack {
    // enumerators, not static members: NVRTC gives an odr-used static constexpr member storage in
    // .nv.global.init, and a module with globals is reloaded before every run in the gate
    enum { BYTES = N * (int)sizeof(T), WB = BYTES > 16 ? 16 : BYTES, NW = BYTES / WB };
    typedef typename smx_word<WB>::t W;
    union {
        W w[NW];
        T e[N];
    } u;
};

// HINT 0: an ordinary read-only load (the row will be read again, keep it in L2); 1: a streaming
// load (last touch: evict first); 2: a shared-memory load.
template <int HINT, typename T, int N>
__device__ __forceinline__ void smx_load(smx_pack<T, N> &p, const T *src) {
    typedef typename smx_pack<T, N>::W W;
    const W *s = reinterpret_cast<const W *>(src);
#pragma unroll
    for (int i = 0; i < smx_pack<T, N>::NW; i++) {
        if constexpr (HINT == 1)
            p.u.w[i] = __ldcs(s + i);
        else if constexpr (HINT == 0)
            p.u.w[i] = __ldg(s + i);
        else
            p.u.w[i] = s[i];
    }
}

// y is written once and never read here: streaming stores keep it from evicting useful lines.
template <typename T, int N>
__device__ __forceinline__ void smx_store(T *dst, const smx_pack<T, N> &p) {
    typedef typename smx_pack<T, N>::W W;
    W *d = reinterpret_cast<W *>(dst);
#pragma unroll
    for (int i = 0; i < smx_pack<T, N>::NW; i++)
        __stcs(d + i, p.u.w[i]);
}

// ---- the (max, sum) algebra ----
struct __align__(8) smx_pair {
    float m; // running max (never NaN: fmaxf drops NaNs, which surface through the sum instead)
    float s; // sum of exp(x - m) over the part seen, or (-inf, 0) for an empty part
};
#define SMX_OP_MAX 0
#define SMX_OP_SUM 1
#define SMX_OP_PAIR 2

// Shared state of the reductions. Both arrays are double-buffered: reduction k writes buffer k & 1,
// and the barrier of reduction k + 1 separates its readers from the writers of reduction k + 2, so
// one barrier per reduction suffices.
struct smx_shared {
    smx_pair warp_part[2][SMX_THREADS / 32];             // TPR > 32: one pair per warp
    smx_pair block_part[2][SMX_SPLIT > 1 ? SMX_RPB : 1]; // SPLIT > 1: one pair per row group
};

// ---- hardware: begin. Everything sm_90-specific (PTX, shared-memory declarations) is here, in one
// place; the rest is plain CUDA C++. ----

// One vector of x copied global -> shared without passing through registers (cp.async, sm_80+);
// 2-byte vectors (bf16/fp16 with SMX_VEC 1) are below cp.async's 4-byte minimum and go by hand.
template <int BYTES> __device__ __forceinline__ void smx_stage(void *dst, const void *src) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    if constexpr (BYTES == 32) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src) : "memory");
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s + 16),
                     "l"((const char *)src + 16)
                     : "memory");
    } else if constexpr (BYTES == 16) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src) : "memory");
    } else if constexpr (BYTES == 8 || BYTES == 4) {
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(s), "l"(src), "n"(BYTES)
                     : "memory");
    } else {
        *(unsigned short *)dst = __ldcs((const unsigned short *)src);
    }
}

__device__ __forceinline__ void smx_stage_wait() {
    asm volatile("cp.async.wait_all;" ::: "memory");
}

__device__ __forceinline__ float smx_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// Thread-block clusters through PTX: cooperative_groups compiles under NVRTC too, but costs ~1.4 s
// and ~270 KB of cubin per candidate; the rank, the barrier, mapa and one load are all we need.
__device__ __forceinline__ unsigned smx_cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

// Every thread of every block of the cluster arrives; writes before are visible to reads after.
__device__ __forceinline__ void smx_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
                 "barrier.cluster.wait.acquire.aligned;" ::
                     : "memory");
}

// The pair at `local`'s address in the shared memory of block `rank` of this cluster.
__device__ __forceinline__ smx_pair smx_dsmem_pair(const smx_pair *local, unsigned rank) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(local);
    unsigned r;
    smx_pair v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
    asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];"
                 : "=f"(v.m), "=f"(v.s)
                 : "r"(r)
                 : "memory");
    return v;
}

// The block's reduction state and its dynamic shared memory (CACHE 2).
__device__ __forceinline__ smx_shared &smx_shared_state() {
    __shared__ smx_shared sh;
    return sh;
}

__device__ __forceinline__ unsigned char *smx_dynamic_smem() {
    extern __shared__ __align__(16) unsigned char smx_dyn[];
    return smx_dyn;
}
// ---- hardware: end ----

// The max that a part's exponents are taken against: the part's max m, or 0 when m is -inf (every
// logit of the part is -inf: e^(-inf - 0) = 0 for each, where e^(-inf - -inf) would be NaN).
__device__ __forceinline__ float smx_base(float m) {
    return m == -INFINITY ? 0.0f : m;
}

// e^(x - base) for a logit x of a part, base = smx_base(the part's max): at most 1 (1 at the max,
// also when the max is finfo.min), exactly 0 for x = -inf and for x - base below about -87 (ftz),
// NaN for NaN and for x = base = +inf.
__device__ __forceinline__ float smx_exp(float x, float base) {
    return smx_exp2((x - base) * SMX_LOG2E);
}

// The factor e^(a - b) that moves a sum from max a to max b (b >= a, the merged max). 1 when
// a == b, so that merging two masked parts ((-inf, 0) with (-inf, 0)) adds 0 instead of NaN
// (e^(-inf - -inf)); 0 for a part of -inf or finfo.min under a finite max. The sums it scales are
// finite (every term is at most 1) unless the row has NaN or +inf, so the product is never
// inf * 0 in a row PyTorch gives numbers for.
__device__ __forceinline__ float smx_rescale(float a, float b) {
    return a == b ? 1.0f : smx_exp2((a - b) * SMX_LOG2E);
}

template <int OP> __device__ __forceinline__ smx_pair smx_op(smx_pair a, smx_pair b) {
    smx_pair r;
    if (OP == SMX_OP_MAX) {
        r.m = fmaxf(a.m, b.m);
        r.s = 0.0f;
    } else if (OP == SMX_OP_SUM) {
        r.m = a.m;
        r.s = a.s + b.s;
    } else {
        r.m = fmaxf(a.m, b.m);
        r.s = a.s * smx_rescale(a.m, r.m) + b.s * smx_rescale(b.m, r.m);
    }
    return r;
}

// Butterfly over aligned groups of W lanes (W a power of two <= 32): every lane gets the result.
template <int OP, int W> __device__ __forceinline__ smx_pair smx_shfl(smx_pair v) {
#pragma unroll
    for (int o = W / 2; o > 0; o >>= 1) {
        smx_pair t = v;
        if (OP != SMX_OP_SUM)
            t.m = __shfl_xor_sync(0xffffffffu, v.m, o);
        if (OP != SMX_OP_MAX)
            t.s = __shfl_xor_sync(0xffffffffu, v.s, o);
        v = smx_op<OP>(v, t);
    }
    return v;
}

// Reduces v over the row: the lanes of a warp, then the warps of the row (TPR > 32), then the
// blocks of the cluster (SPLIT > 1). Every thread of the block must call it (it synchronises).
template <int OP>
__device__ __forceinline__ smx_pair smx_reduce(smx_pair v, smx_shared &sh, int &buf) {
    v = smx_shfl<OP, SMX_LANES>(v);
    const smx_pair none = {-INFINITY, 0.0f};
    (void)none;
#if SMX_TPR > 32
    {
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        if (lane == 0)
            sh.warp_part[buf][warp] = v;
        __syncthreads();
        const int first = (threadIdx.x / SMX_TPR) * SMX_WPR;
        v = lane < SMX_WPR ? sh.warp_part[buf][first + lane] : none;
        v = smx_shfl<OP, SMX_WPR>(v);
        v.m = __shfl_sync(0xffffffffu, v.m, 0);
        v.s = __shfl_sync(0xffffffffu, v.s, 0);
    }
#endif
#if SMX_SPLIT > 1
    {
        const int grp = threadIdx.x / SMX_TPR;
        if (threadIdx.x % SMX_TPR == 0)
            sh.block_part[buf][grp] = v;
        smx_cluster_sync();
        smx_pair acc = none;
        for (int k = threadIdx.x % SMX_LANES; k < SMX_SPLIT; k += SMX_LANES)
            acc = smx_op<OP>(acc, smx_dsmem_pair(&sh.block_part[buf][grp], (unsigned)k));
        v = smx_shfl<OP, SMX_LANES>(acc);
    }
#endif
    buf ^= 1;
    return v;
}

// ---- logits ----
struct smx_bcast {
    int n;             // leading dimensions of x, innermost first
    int64_t size[8];   // their sizes
    int64_t stride[8]; // the mask's row stride along each (0 where the mask is broadcast)
};

__device__ __forceinline__ int64_t smx_mask_row(int64_t row, const smx_bcast &mb) {
#if SMX_MASK_DIRECT
    return row;
#else
    int64_t off = 0;
    for (int d = 0; d < mb.n; d++) {
        const int64_t q = row / mb.size[d];
        off += (row - q * mb.size[d]) * mb.stride[d];
        row = q;
    }
    return off;
#endif
}

// The logits of one vector: x (from global memory with HINT, or shared memory), scaled, masked,
// with eager PyTorch's intermediate roundings where the problem has them.
template <int HINT>
__device__ __forceinline__ void smx_logits(float (&v)[SMX_VEC], const smx_in_t *xp,
                                           const smx_mask_t *mp, float scale) {
    smx_pack<smx_in_t, SMX_VEC> p;
    smx_load<HINT>(p, xp);
#pragma unroll
    for (int i = 0; i < SMX_VEC; i++)
        v[i] = smx_dt<SMX_TIN>::f32(p.u.e[i]);
#if SMX_HAS_SCALE
#pragma unroll
    for (int i = 0; i < SMX_VEC; i++)
        v[i] = smx_round<SMX_ROUND_SCALED>(v[i] * scale);
#endif
#if SMX_HAS_MASK
    smx_pack<smx_mask_t, SMX_VEC> q;
    smx_load<0>(q, mp); // masks are shared by many rows: keep them cached
#pragma unroll
    for (int i = 0; i < SMX_VEC; i++)
        v[i] = smx_round<SMX_ROUND_MASKED>(v[i] + smx_dt<SMX_TMASK>::f32(q.u.e[i]));
#endif
    (void)mp;
    (void)scale;
}

// (a template only so that the packed branch is discarded for float32 outputs)
template <int OUT = SMX_TOUT>
__device__ __forceinline__ void smx_write(smx_out_t *dst, const float (&v)[SMX_VEC], float k) {
    smx_pack<smx_out_t, SMX_VEC> o;
    if constexpr (OUT != 0 && SMX_VEC % 2 == 0) {
#pragma unroll
        for (int i = 0; i < SMX_VEC; i += 2) {
            const unsigned w = smx_dt<OUT>::from2(smx_round<SMX_ROUND_RESULT>(v[i] * k),
                                                  smx_round<SMX_ROUND_RESULT>(v[i + 1] * k));
            o.u.e[i] = (unsigned short)(w & 0xffffu);
            o.u.e[i + 1] = (unsigned short)(w >> 16);
        }
    } else {
#pragma unroll
        for (int i = 0; i < SMX_VEC; i++)
            o.u.e[i] = smx_dt<OUT>::from(smx_round<SMX_ROUND_RESULT>(v[i] * k));
    }
    smx_store(dst, o);
}

// ---- streaming passes (CACHE 0 from global memory, CACHE 2 from the staged shared copy) ----
// The thread's vectors are v = vb + lane + i * TPR < ve; xs[v - xs_base] is vector v's first
// element of x (global row pointer with xs_base 0, or the shared slice with xs_base vb); mr is the
// mask row.
template <int HINT>
__device__ __forceinline__ smx_pair smx_pass_online(const smx_in_t *xs, int64_t xs_base,
                                                    const smx_mask_t *mr, float scale, int64_t vb,
                                                    int64_t ve, int lane) {
    smx_pair acc = {-INFINITY, 0.0f};
    for (int64_t v0 = vb + lane; v0 < ve; v0 += (int64_t)SMX_TPR * SMX_UNROLL) {
        float t[SMX_UNROLL][SMX_VEC];
#pragma unroll
        for (int u = 0; u < SMX_UNROLL; u++) {
            const int64_t v = v0 + (int64_t)u * SMX_TPR;
            if (v < ve)
                smx_logits<HINT>(t[u], xs + (v - xs_base) * SMX_VEC, mr + v * SMX_VEC, scale);
            else
#pragma unroll
                for (int i = 0; i < SMX_VEC; i++)
                    t[u][i] = -INFINITY;
        }
        float cm = acc.m;
#pragma unroll
        for (int u = 0; u < SMX_UNROLL; u++)
#pragma unroll
            for (int i = 0; i < SMX_VEC; i++)
                cm = fmaxf(cm, t[u][i]);
        const float base = smx_base(cm);
        float cs = 0.0f;
#pragma unroll
        for (int u = 0; u < SMX_UNROLL; u++)
#pragma unroll
            for (int i = 0; i < SMX_VEC; i++)
                cs += smx_exp(t[u][i], base);
        acc.s = acc.s * smx_rescale(acc.m, cm) + cs;
        acc.m = cm;
    }
    return acc;
}

template <int HINT>
__device__ __forceinline__ float smx_pass_max(const smx_in_t *xs, int64_t xs_base,
                                              const smx_mask_t *mr, float scale, int64_t vb,
                                              int64_t ve, int lane) {
    float m = -INFINITY;
    for (int64_t v0 = vb + lane; v0 < ve; v0 += (int64_t)SMX_TPR * SMX_UNROLL) {
        float t[SMX_UNROLL][SMX_VEC];
#pragma unroll
        for (int u = 0; u < SMX_UNROLL; u++) {
            const int64_t v = v0 + (int64_t)u * SMX_TPR;
            if (v < ve)
                smx_logits<HINT>(t[u], xs + (v - xs_base) * SMX_VEC, mr + v * SMX_VEC, scale);
            else
#pragma unroll
                for (int i = 0; i < SMX_VEC; i++)
                    t[u][i] = -INFINITY;
        }
#pragma unroll
        for (int u = 0; u < SMX_UNROLL; u++)
#pragma unroll
            for (int i = 0; i < SMX_VEC; i++)
                m = fmaxf(m, t[u][i]);
    }
    return m;
}

template <int HINT>
__device__ __forceinline__ float smx_pass_sum(const smx_in_t *xs, int64_t xs_base,
                                              const smx_mask_t *mr, float scale, int64_t vb,
                                              int64_t ve, int lane, float base) {
    float s = 0.0f;
    for (int64_t v0 = vb + lane; v0 < ve; v0 += (int64_t)SMX_TPR * SMX_UNROLL) {
        float t[SMX_UNROLL][SMX_VEC];
#pragma unroll
        for (int u = 0; u < SMX_UNROLL; u++) {
            const int64_t v = v0 + (int64_t)u * SMX_TPR;
            if (v < ve)
                smx_logits<HINT>(t[u], xs + (v - xs_base) * SMX_VEC, mr + v * SMX_VEC, scale);
            else
#pragma unroll
                for (int i = 0; i < SMX_VEC; i++)
                    t[u][i] = -INFINITY;
        }
#pragma unroll
        for (int u = 0; u < SMX_UNROLL; u++)
#pragma unroll
            for (int i = 0; i < SMX_VEC; i++)
                s += smx_exp(t[u][i], base);
    }
    return s;
}

template <int HINT>
__device__ __forceinline__ void
smx_pass_write(const smx_in_t *xs, int64_t xs_base, const smx_mask_t *mr, float scale,
               smx_out_t *yr, int64_t vb, int64_t ve, int lane, float base, float inv) {
    for (int64_t v0 = vb + lane; v0 < ve; v0 += (int64_t)SMX_TPR * SMX_UNROLL) {
        float t[SMX_UNROLL][SMX_VEC];
#pragma unroll
        for (int u = 0; u < SMX_UNROLL; u++) {
            const int64_t v = v0 + (int64_t)u * SMX_TPR;
            if (v < ve)
                smx_logits<HINT>(t[u], xs + (v - xs_base) * SMX_VEC, mr + v * SMX_VEC, scale);
        }
#pragma unroll
        for (int u = 0; u < SMX_UNROLL; u++) {
            const int64_t v = v0 + (int64_t)u * SMX_TPR;
            if (v < ve) {
#pragma unroll
                for (int i = 0; i < SMX_VEC; i++)
                    t[u][i] = smx_exp(t[u][i], base);
                smx_write(yr + v * SMX_VEC, t[u], inv);
            }
        }
    }
}

// ---- the body ----
// x: [rows, cols] (row-major, cols % SMX_VEC == 0); mask: rows of cols elements, row
// smx_mask_row(r); y: [rows, cols]. Launch: block SMX_THREADS, grid SMX_SPLIT * (row groups, or the
// persistent cap), cluster SMX_SPLIT; CACHE 2 needs SMX_RPB * align16(ceil(cols / VEC / SPLIT) *
// VEC * sizeof(x)) bytes of dynamic shared memory.
__device__ __forceinline__ void smx_softmax(const void *x_, const void *mask_, float scale,
                                            void *y_, int64_t rows, int64_t cols,
                                            const smx_bcast &mb) {
    const smx_in_t *x = (const smx_in_t *)x_;
    const smx_mask_t *mask = (const smx_mask_t *)mask_;
    smx_out_t *y = (smx_out_t *)y_;
    smx_shared &sh = smx_shared_state();
    int buf = 0;
    const int grp = threadIdx.x / SMX_TPR, lane = threadIdx.x % SMX_TPR;
#if SMX_SPLIT > 1
    const int64_t rank = smx_cluster_rank();
#else
    const int64_t rank = 0;
#endif
    const int64_t nvec = cols / SMX_VEC;
    const int64_t vslice = (nvec + SMX_SPLIT - 1) / SMX_SPLIT;
    const int64_t vbeg = min(nvec, rank * vslice), vend = min(nvec, vbeg + vslice);
    const int64_t groups = (rows + SMX_RPB - 1) / SMX_RPB;
#if SMX_CACHE == 2
    unsigned char *smx_dyn = smx_dynamic_smem();
    const int64_t slice_bytes = (vslice * SMX_VEC * (int64_t)sizeof(smx_in_t) + 15) / 16 * 16;
    smx_in_t *xs_smem = (smx_in_t *)(smx_dyn + grp * slice_bytes);
#endif
    for (int64_t g = blockIdx.x / SMX_SPLIT; g < groups; g += gridDim.x / SMX_SPLIT) {
        const int64_t row = g * SMX_RPB + grp;
        const bool live = row < rows;
        const int64_t vb = vbeg, ve = live ? vend : vbeg; // a dead row group member owns nothing
        const smx_in_t *xr = x + (live ? row : 0) * cols;
        smx_out_t *yr = y + (live ? row : 0) * cols;
        const smx_mask_t *mr = mask;
#if SMX_HAS_MASK
        mr = mask + (live ? smx_mask_row(row, mb) : 0) * cols;
#endif
        (void)mb;
#if SMX_CACHE == 1
        // The slice in registers: every load issued before any is used.
        float buf_v[SMX_MAXV][SMX_VEC];
#pragma unroll
        for (int i = 0; i < SMX_MAXV; i++) {
            const int64_t v = vb + lane + (int64_t)i * SMX_TPR;
            if (v < ve)
                smx_logits<1>(buf_v[i], xr + v * SMX_VEC, mr + v * SMX_VEC, scale);
            else
#pragma unroll
                for (int j = 0; j < SMX_VEC; j++)
                    buf_v[i][j] = -INFINITY;
        }
        float m = -INFINITY;
#pragma unroll
        for (int i = 0; i < SMX_MAXV; i++)
#pragma unroll
            for (int j = 0; j < SMX_VEC; j++)
                m = fmaxf(m, buf_v[i][j]);
#if SMX_ONLINE
        const float base = smx_base(m);
        smx_pair part = {m, 0.0f};
#pragma unroll
        for (int i = 0; i < SMX_MAXV; i++)
#pragma unroll
            for (int j = 0; j < SMX_VEC; j++) {
                buf_v[i][j] = smx_exp(buf_v[i][j], base);
                part.s += buf_v[i][j];
            }
        const smx_pair tot = smx_reduce<SMX_OP_PAIR>(part, sh, buf);
        const float k = smx_rescale(m, tot.m) * (1.0f / tot.s);
#else
        smx_pair part = {m, 0.0f};
        const float base = smx_base(smx_reduce<SMX_OP_MAX>(part, sh, buf).m);
        part.s = 0.0f;
#pragma unroll
        for (int i = 0; i < SMX_MAXV; i++)
#pragma unroll
            for (int j = 0; j < SMX_VEC; j++) {
                buf_v[i][j] = smx_exp(buf_v[i][j], base);
                part.s += buf_v[i][j];
            }
        const float k = 1.0f / smx_reduce<SMX_OP_SUM>(part, sh, buf).s;
#endif
#pragma unroll
        for (int i = 0; i < SMX_MAXV; i++) {
            const int64_t v = vb + lane + (int64_t)i * SMX_TPR;
            if (v < ve)
                smx_write(yr + v * SMX_VEC, buf_v[i], k);
        }
#else // CACHE 0 and 2: passes over global memory or over the staged shared copy
#if SMX_CACHE == 2
        for (int64_t v = vb + lane; v < ve; v += SMX_TPR)
            smx_stage<SMX_VEC *(int)sizeof(smx_in_t)>(xs_smem + (v - vb) * SMX_VEC,
                                                      xr + v * SMX_VEC);
        smx_stage_wait(); // each thread reads back only what it staged itself: no barrier needed
        const smx_in_t *xs = xs_smem;
        const int64_t xs_base = vb;
#define SMX_H_FIRST 2
#define SMX_H_LAST 2
#else
        const smx_in_t *xs = xr;
        const int64_t xs_base = 0;
#define SMX_H_FIRST 0
#define SMX_H_LAST 1
#endif
#if SMX_ONLINE
        const smx_pair tot = smx_reduce<SMX_OP_PAIR>(
            smx_pass_online<SMX_H_FIRST>(xs, xs_base, mr, scale, vb, ve, lane), sh, buf);
        const float M = tot.m, S = tot.s;
#else
        smx_pair part;
        part.m = smx_pass_max<SMX_H_FIRST>(xs, xs_base, mr, scale, vb, ve, lane);
        part.s = 0.0f;
        const float M = smx_reduce<SMX_OP_MAX>(part, sh, buf).m;
        part.s = smx_pass_sum<SMX_H_FIRST>(xs, xs_base, mr, scale, vb, ve, lane, smx_base(M));
        const float S = smx_reduce<SMX_OP_SUM>(part, sh, buf).s;
#endif
        smx_pass_write<SMX_H_LAST>(xs, xs_base, mr, scale, yr, vb, ve, lane, smx_base(M), 1.0f / S);
#undef SMX_H_FIRST
#undef SMX_H_LAST
#endif
    }
#if SMX_SPLIT > 1
    smx_cluster_sync(); // no block leaves while another may still read its shared memory
#endif
}
