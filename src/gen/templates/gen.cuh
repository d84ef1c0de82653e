// gen.cuh: the device helpers every CUDA kernel of the generator (src/gen/ir) shares, after
// gen_math.h: vector loads and stores, the reduction states (argmax's value and index, the softmax
// pair, Welford's count, mean and M2) with their updates and merges, the team reduction (the
// threads of one outer point: lanes of a warp, warps of a block, or threads OPB apart), and the
// exchange between the blocks of a thread-block cluster through distributed shared memory (sm_90).
//
// Merges are associative and deterministic: every thread of a team, and every block of a cluster,
// combines the same partials in the same order, so all of them hold bitwise the same result.
// ---- hardware: begin (the only PTX and __shared__; tests/data/gen/emu/emu_gen.h is its host
// version, so that the kernels' logic runs on the host emulator) ----
// All of a kernel's shared memory: one array of KG_SHARED_BYTES that the kernel carves.
#define KG_SHARED_ARRAY(name) __shared__ __align__(16) unsigned char name[KG_SHARED_BYTES]
// Thread-block clusters through PTX: cooperative_groups compiles under NVRTC too but costs ~1 s
// and ~270 KB of cubin per candidate (docs/families/softmax.md).
__device__ __forceinline__ unsigned kg_cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
// Every thread of every block of the cluster arrives; writes before are visible to reads after.
__device__ __forceinline__ void kg_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
                 "barrier.cluster.wait.acquire.aligned;" ::
                     : "memory");
}
// The state at `local`'s address in the shared memory of block `rank` of the cluster, word by
// word.
template <class S> __device__ __forceinline__ S kg_dsmem(const S *local, unsigned rank) {
    unsigned w[sizeof(S) / 4], r;
    const unsigned a = (unsigned)__cvta_generic_to_shared(local);
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
#pragma unroll
    for (int k = 0; k < (int)(sizeof(S) / 4); k++)
        asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(w[k]) : "r"(r + 4 * k));
    S out;
    memcpy(&out, w, sizeof out);
    return out;
}
// A state in global memory written by another block (after its __threadfence): read past L1.
template <class S> __device__ __forceinline__ S kg_ld_partial(const S *p) {
    unsigned w[sizeof(S) / 4];
#pragma unroll
    for (int k = 0; k < (int)(sizeof(S) / 4); k++)
        w[k] = __ldcg(reinterpret_cast<const unsigned *>(p) + k);
    S out;
    memcpy(&out, w, sizeof out);
    return out;
}
// ---- hardware: end ----

// ---- vectors: BYTES of raw bits, loaded and stored in one access ----
template <int BYTES> struct kg_raw;
template <> struct kg_raw<1> {
    typedef uint8_t t;
};
template <> struct kg_raw<2> {
    typedef uint16_t t;
};
template <> struct kg_raw<4> {
    typedef uint32_t t;
};
template <> struct kg_raw<8> {
    typedef uint2 t;
};
template <> struct kg_raw<16> {
    typedef uint4 t;
};
template <int N> struct kg_raw_wide { // a vector of a wider element than the stream's: N x 16 bytes
    uint4 q[N];
};
template <> struct kg_raw<32> {
    typedef kg_raw_wide<2> t;
};
template <> struct kg_raw<64> {
    typedef kg_raw_wide<4> t;
};
template <int BYTES> __device__ __forceinline__ typename kg_raw<BYTES>::t kg_ld(const void *p) {
    return *reinterpret_cast<const typename kg_raw<BYTES>::t *>(p);
}
template <int BYTES> __device__ __forceinline__ void kg_st(void *p, typename kg_raw<BYTES>::t v) {
    *reinterpret_cast<typename kg_raw<BYTES>::t *>(p) = v;
}
template <class T, class R> __device__ __forceinline__ T kg_lane(const R &r, int k) {
    return reinterpret_cast<const T *>(&r)[k];
}
template <class T, class R> __device__ __forceinline__ void kg_set_lane(R &r, int k, T v) {
    reinterpret_cast<T *>(&r)[k] = v;
}

// ---- reduction states ----
struct kg_arg { // argmax / argmin: the value and its index
    float v;
    long long i;
};
struct kg_smx { // the softmax pair: the max m and the sum of exp(x - m)
    float m, s;
};
struct kg_wf { // Welford: count, mean, sum of squared deviations from the mean
    float n, mean, m2;
};

// Element updates (x is the next element in index order).
__device__ __forceinline__ kg_arg kg_argmax_add(kg_arg a, float x, long long i) {
    return (x > a.v || (x != x && a.v == a.v)) ? kg_arg{x, i} : a;
}
__device__ __forceinline__ kg_arg kg_argmin_add(kg_arg a, float x, long long i) {
    return (x < a.v || (x != x && a.v == a.v)) ? kg_arg{x, i} : a;
}
// exp(x - m) against the part's own max; a term or a scale whose max it equals is 1, so that
// parts of -inf only merge to (-inf, count), not NaN (the caller turns an infinite max into what
// the two-pass formula gives).
__device__ __forceinline__ kg_smx kg_smx_add(kg_smx a, float x) {
    const float m = kg_max(a.m, x);
    return kg_smx{m, (a.m == m ? a.s : a.s * kg_exp_neg(a.m - m)) + (x == m ? 1.f : kg_exp_neg(x - m))};
}
// The update divides by the count at every element: on the GPU a reciprocal and a multiply
// (__fdividef, 2 ulp), where the IEEE division is a ~10-instruction sequence with a slow path, the
// costliest instruction of a GroupNorm's pass. The count is exact in fp32 up to 2^24 elements a
// thread.
__device__ __forceinline__ kg_wf kg_wf_add(kg_wf a, float x) {
#ifdef __CUDACC__
    const float n = a.n + 1.f, d = x - a.mean, mean = a.mean + __fdividef(d, n);
#else
    const float n = a.n + 1.f, d = x - a.mean, mean = a.mean + d / n;
#endif
    return kg_wf{n, mean, a.m2 + d * (x - mean)};
}

// Merges, as functors for kg_team and kg_cluster.
struct kg_f_sum {
    template <class T> __device__ __forceinline__ T operator()(T a, T b) const {
        return a + b;
    }
};
struct kg_f_prod {
    template <class T> __device__ __forceinline__ T operator()(T a, T b) const {
        return a * b;
    }
};
struct kg_f_max {
    template <class T> __device__ __forceinline__ T operator()(T a, T b) const {
        return kg_max(a, b);
    }
};
struct kg_f_min {
    template <class T> __device__ __forceinline__ T operator()(T a, T b) const {
        return kg_min(a, b);
    }
};
// the smaller index among equal values; a NaN wins, the first NaN among NaNs
struct kg_f_argmax {
    __device__ __forceinline__ kg_arg operator()(kg_arg a, kg_arg b) const {
        if (a.v != a.v)
            return b.v != b.v && b.i < a.i ? b : a;
        if (b.v != b.v)
            return b;
        return b.v > a.v || (b.v == a.v && b.i < a.i) ? b : a;
    }
};
struct kg_f_argmin {
    __device__ __forceinline__ kg_arg operator()(kg_arg a, kg_arg b) const {
        if (a.v != a.v)
            return b.v != b.v && b.i < a.i ? b : a;
        if (b.v != b.v)
            return b;
        return b.v < a.v || (b.v == a.v && b.i < a.i) ? b : a;
    }
};
struct kg_f_smx {
    __device__ __forceinline__ kg_smx operator()(kg_smx a, kg_smx b) const {
        const float m = kg_max(a.m, b.m);
        return kg_smx{m, (a.m == m ? a.s : a.s * kg_exp_neg(a.m - m)) +
                             (b.m == m ? b.s : b.s * kg_exp_neg(b.m - m))};
    }
};
struct kg_f_wf { // Chan et al.: exact for any split
    __device__ __forceinline__ kg_wf operator()(kg_wf a, kg_wf b) const {
        const float n = a.n + b.n;
        if (n == 0.f)
            return a;
        const float d = b.mean - a.mean, wb = b.n / n;
        return kg_wf{n, a.mean + d * wb, a.m2 + b.m2 + d * d * a.n * wb};
    }
};

// A row's vector of N elements at once (rows plans, online): the vector's own pair or Welford
// state first — one exp per element against the vector's max, the mean from the vector's sum —
// then one merge into the running state, where N element updates would rescale the running sum
// (a second exp) or divide by the count at every element.
template <int N>
__device__ __forceinline__ kg_smx kg_smx_addv(kg_smx a, const float (&x)[N]) {
    float m = x[0];
#pragma unroll
    for (int i = 1; i < N; i++)
        m = kg_max(m, x[i]);
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < N; i++)
        s += x[i] == m ? 1.f : kg_exp_neg(x[i] - m);
    return kg_f_smx()(a, kg_smx{m, s});
}
template <int N>
__device__ __forceinline__ kg_wf kg_wf_addv(kg_wf a, const float (&x)[N]) {
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < N; i++)
        s += x[i];
    const float mean = s * (1.f / N);
    float m2 = 0.f;
#pragma unroll
    for (int i = 0; i < N; i++)
        m2 += (x[i] - mean) * (x[i] - mean);
    return kg_f_wf()(a, kg_wf{(float)N, mean, m2});
}

// ---- shuffles of states ----
__device__ __forceinline__ float kg_shfl(float v, int o) {
    return __shfl_xor_sync(0xffffffffu, v, o);
}
__device__ __forceinline__ long long kg_shfl(long long v, int o) {
    return __shfl_xor_sync(0xffffffffu, v, o);
}
__device__ __forceinline__ kg_arg kg_shfl(kg_arg v, int o) {
    return kg_arg{kg_shfl(v.v, o), kg_shfl(v.i, o)};
}
__device__ __forceinline__ kg_smx kg_shfl(kg_smx v, int o) {
    return kg_smx{kg_shfl(v.m, o), kg_shfl(v.s, o)};
}
__device__ __forceinline__ kg_wf kg_shfl(kg_wf v, int o) {
    return kg_wf{kg_shfl(v.n, o), kg_shfl(v.mean, o), kg_shfl(v.m2, o)};
}

// ---- the team: the TEAM threads of one outer point ----
// KFAST (rows): a team is TEAM consecutive threads: a butterfly within a warp, then the warps of
// the team through shared memory. Otherwise (columns) the team's threads are OPB apart and each
// holds VO states (below). Every thread of the block must call it (it
// synchronises when the team spans warps); every thread of a team gets the result.
template <int TEAM, int OPB, int VO, bool KFAST, class S, class F>
__device__ __forceinline__ void kg_team(S (&x)[VO], F f, S *sm) {
    if (KFAST) {
#pragma unroll
        for (int o = (TEAM < 32 ? TEAM : 32) / 2; o > 0; o >>= 1)
            x[0] = f(x[0], kg_shfl(x[0], o));
        if (TEAM <= 32)
            return;
        const int warp = threadIdx.x >> 5, first = (threadIdx.x / TEAM) * (TEAM / 32);
        if ((threadIdx.x & 31) == 0)
            sm[warp] = x[0];
        __syncthreads();
        S acc = sm[first];
#pragma unroll
        for (int w = 1; w < TEAM / 32; w++)
            acc = f(acc, sm[first + w]);
        x[0] = acc;
        __syncthreads();
        return;
    }
    // Columns: the team's lanes are OPB apart. Those within one warp (G of them when OPB < 32)
    // meet in a butterfly; then one lane of each group publishes its VO states, laid out
    // [partial][v][lo] so that a warp's reads are consecutive words, and every thread merges the P
    // partials of its outer point in order.
    if (TEAM == 1)
        return;
    constexpr int G = OPB < 32 ? (TEAM < 32 / OPB ? TEAM : 32 / OPB) : 1, P = TEAM / G;
    const int lo = threadIdx.x % OPB, lk = threadIdx.x / OPB;
#pragma unroll
    for (int o = OPB; o < OPB * G; o <<= 1) {
#pragma unroll
        for (int v = 0; v < VO; v++)
            x[v] = f(x[v], kg_shfl(x[v], o));
    }
    if (P == 1)
        return;
    if (lk % G == 0) {
#pragma unroll
        for (int v = 0; v < VO; v++)
            sm[((lk / G) * VO + v) * OPB + lo] = x[v];
    }
    __syncthreads();
#pragma unroll
    for (int v = 0; v < VO; v++) {
        S acc = sm[v * OPB + lo];
        for (int j = 1; j < P; j++)
            acc = f(acc, sm[(j * VO + v) * OPB + lo]);
        x[v] = acc;
    }
    __syncthreads();
}

// The team results of the SPLIT blocks of the cluster merged in rank order: one writer per team
// publishes its VO states in `xch` (this exchange's buffer: the caller alternates two so that one
// barrier per exchange suffices), then every thread reads all ranks. Every thread calls it.
template <int SPLIT, int VO, class S, class F>
__device__ __forceinline__ void kg_cluster(S (&x)[VO], F f, S *xch, int slot, bool writer) {
    if (writer) {
#pragma unroll
        for (int v = 0; v < VO; v++)
            xch[slot * VO + v] = x[v];
    }
    kg_cluster_sync();
#pragma unroll
    for (int v = 0; v < VO; v++) {
        S acc = kg_dsmem(&xch[slot * VO + v], 0);
        for (int r = 1; r < SPLIT; r++)
            acc = f(acc, kg_dsmem(&xch[slot * VO + v], (unsigned)r));
        x[v] = acc;
    }
}
