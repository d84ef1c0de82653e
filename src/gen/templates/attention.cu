// attention.cu: the attention family's CUDA template: a flash-attention forward for sm_90,
// o = softmax(q·kᵀ·scale + mask)·v, the scores never leaving registers.
//
// The work. Block (x, h, b) owns ATT_BLOCK_M query rows of q head h of batch b (blocks in reverse
// order of x, so that the longest rows of a causal mask start first) and reads kv head h / (hq /
// hkv): grouped-query attention costs nothing but that division. With ATT_PACK, block (x, g, b)
// owns rows of all the q heads of kv head g instead (att_row), for few queries per head. Each of the ATT_WARPS warps owns
// 16 rows. The block walks the key tiles of ATT_BLOCK_N keys that the band of the mask leaves for
// its rows (all tiles without a band); K and V tiles arrive by cp.async in ATT_STAGES buffers,
// the next tiles' copies in flight while the current one is computed. Per tile a warp computes
// its 16 x BLOCK_N scores with mma.sync m16n8k16 (Q and K fragments by ldmatrix from shared
// memory), applies the roundings eager makes, the scale and the mask, updates the running max
// and sum of its rows (online softmax: the accumulated output is rescaled by e^(old max - new
// max)), packs the probabilities into A fragments in registers (rounded to the input dtype, as
// eager's cast before the second matmul) and accumulates P·V with ldmatrix.trans fragments of V.
// At the end each row is divided by its sum and written.
//
// Shared memory rows are padded by 16 bytes (ATT_LD = D + 8 elements): the eight row addresses of
// an ldmatrix then fall in eight distinct 16-byte bank groups.
//
// Semantics: exponents are ex2((x - base) · log2 e) against the running max of the row (0 when
// it is still -inf, so that a fully masked tile gives e^-inf = 0, never NaN); a row whose every
// key is -inf ends 0 / 0 = NaN as in eager, a row of finfo.min is uniform.
//
// ATT_WG (sm_90a): the same algorithm with warpgroup MMAs, warp-specialised (the comment above that
// att_fwd says how): a producer warpgroup fills swizzled K and V buffers by TMA, consumer warpgroups of
// 64 rows issue S = Q·Kᵀ for the next tile and P·V for this one and run the softmax between the two waits.
//
// Head dims over 256 (ATT_DSPLIT 2, wgmma): a warpgroup's 64 x D output accumulators would take D / 2
// registers a thread, so ATT_DSPLIT blocks share a row tile, each computing the scores over the whole
// head dim and the output of its DV = D / ATT_DSPLIT columns of V (grid z: batch x column block).
//
// float32 problems (ATT_F32) take the warp-per-row kernel at the end: mma.sync has no fp32 inputs.
//
// Paged (ATT_PAGED: FlashInfer's form, att_paged in attention.h): the same kernel with a sequence
// instead of a batch index: blockIdx.z for decode; for prefill, found from blockIdx.x, which counts
// the sequences' row tiles one after another (grid.x is ceil(tokens / BLOCK_M) + sequences, at least
// the tiles there are; a block past them leaves at once). q and o are [tokens, hq, d] with the
// sequence's queries from qo_indptr (decode: one a sequence); a K or V tile row is found through the
// sequence's pages (kv_indices from kv_indptr, page_size rows a page, [pages, page_size, hkv, d])
// when the tile is loaded; the key count is the sequence's, and ATT_PAGED_CAUSAL aligns its last
// query with its last key (query i sees keys j <= i + kv_len - q_len). A row that sees no key is 0
// and, with ATT_LSE, its base-2 log-sum-exp -inf.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

// ---- the point and the problem (the emitter writes these; the template compiles alone) ----
#ifndef ATT_BLOCK_M
#define ATT_BLOCK_M 64 // query rows per block
#endif
#ifndef ATT_BLOCK_N
#define ATT_BLOCK_N 64 // keys per tile
#endif
#ifndef ATT_WARPS
#define ATT_WARPS 4 // warps per block, 16 query rows each
#endif
#ifndef ATT_STAGES
#define ATT_STAGES 2 // K/V tile buffers
#endif
#ifndef ATT_PACK
#define ATT_PACK 0 // 1: the q heads of one kv head share a block's rows (GQA decode)
#endif
#ifndef ATT_WG
#define ATT_WG 0 // 1: warpgroup MMAs (wgmma, sm_90a), 64 rows a warpgroup
#endif
#ifndef ATT_FOLD
#define ATT_FOLD 0 // 1: the scale folded into the exponent (att_softmax_tile)
#endif
#ifndef ATT_TMA
#define ATT_TMA 0 // 1: K and V tiles come by TMA (the emitter writes their tensor maps)
#endif
#ifndef ATT_PP
#define ATT_PP 0 // 1: the consumer warpgroups issue their MMAs in turns (att_pp_take)
#endif
#ifndef ATT_PERSIST
#define ATT_PERSIST 0 // 1: wgmma blocks loop over the grid's items (att_item)
#endif
#ifndef ATT_DSPLIT
#define ATT_DSPLIT 1 // blocks (grid z) a row tile's V and O columns are split over (head dim > 256)
#endif
#ifndef ATT_SPLIT
#define ATT_SPLIT 0 // 1: tiles inside the band and the keys skip the per-key tests (att_softmax)
#endif
#ifndef ATT_T
#define ATT_T __nv_bfloat16
#define ATT_TM __nv_bfloat16
#define ATT_F32 0
#define ATT_D 128
#define ATT_HAS_MASK 0
#define ATT_CAUSAL_GEN 0
#define ATT_LO_GEN 0
#define ATT_BAND 0
#define ATT_HAS_LO 0
#define ATT_LO 0
#define ATT_HI 0
#define ATT_ROUND_QK 0
#define ATT_ROUND_SCALED 0
#define ATT_ROUND_MASKED 0
#define ATT_ROUND_P 1
#endif
#ifndef ATT_DR
#define ATT_DR ATT_D // the problem's head dim: ATT_D pads it with zero columns (attention.c's dk_of)
#endif
#ifndef ATT_TANH
#define ATT_TANH 0 // a soft cap: tanh of the scaled scores times ATT_PRE, times ATT_POST
#define ATT_PRE 1.f
#define ATT_POST 1.f
#endif
#ifndef ATT_PAGED
#define ATT_PAGED 0
#define ATT_PAGED_DECODE 0
#define ATT_PAGED_CAUSAL 0
#define ATT_PAGED_LAST 0
#define ATT_LSE 0
#endif

typedef struct {
    const ATT_T *q, *k, *v;
    const ATT_TM *mask;
    ATT_T *o;
    int64_t b, hq, hkv, sq, skv;
    int64_t qb, qh, qs, kb, kh, ks, vb, vh, vs, mb, mh, ms, mk, ob, oh, os;
    float scale;
#if ATT_TMA
    const kiln_tensormap *tk, *tv; // K's and V's tensor maps (wgmma's producer)
#endif
#if ATT_PAGED
    const int *qo_indptr, *kv_indptr, *kv_indices, *last_len;
    float *lse;
    int64_t page_size;
#endif
} att_args;

#define ATT_LOG2E 1.4426950408889634f

// The element of key j in a row of the mask: j, or j · a.mk where the mask's key dim is not innermost
// (ATT_MASK_KS: T5's position bias, stored with its heads last).
#ifndef ATT_MASK_KS
#define ATT_MASK_KS 0
#endif
#if ATT_MASK_KS
#define ATT_MJ(a, j) ((j) * (a).mk)
#else
#define ATT_MJ(a, j) (j)
#endif

__device__ __forceinline__ float att_lf(float v) {
    return v;
}
__device__ __forceinline__ float att_lf(__nv_bfloat16 v) {
    return __bfloat162float(v);
}
__device__ __forceinline__ float att_lf(__half v) {
    return __half2float(v);
}
// a boolean mask (SDPA's): True takes part (adds 0), False is masked (-inf); ATT_MASK_INV 1
// (masked_fill's): True is masked
#ifndef ATT_MASK_INV
#define ATT_MASK_INV 0
#endif
__device__ __forceinline__ float att_lf(bool v) {
    return v != (ATT_MASK_INV != 0) ? 0.0f : -INFINITY;
}
__device__ __forceinline__ void att_sf(float x, float *out) {
    *out = x;
}
__device__ __forceinline__ void att_sf(float x, __nv_bfloat16 *out) {
    *out = __float2bfloat16_rn(x);
}
__device__ __forceinline__ void att_sf(float x, __half *out) {
    *out = __float2half_rn(x);
}
// x rounded to the input dtype, as eager's 16-bit intermediate tensors are
__device__ __forceinline__ float att_rnd(float x) {
    ATT_T t;
    att_sf(x, &t);
    return att_lf(t);
}

// Gemma-2's logit soft cap on the scaled scores: cap · tanh(x / cap), each step rounded as eager rounds it
__device__ __forceinline__ float att_softcap(float x) {
    x *= ATT_PRE;
#if ATT_ROUND_SCALED
    x = att_rnd(x);
#endif
    x = tanhf(x);
#if ATT_ROUND_SCALED
    x = att_rnd(x);
#endif
    x *= ATT_POST;
#if ATT_ROUND_SCALED
    x = att_rnd(x);
#endif
    return x;
}

// the band's key range [first, last) of query rows [r0, r1] (the whole sequence without a band)
__device__ __forceinline__ void att_key_range(int64_t r0, int64_t r1, int64_t skv, int64_t *first,
                                              int64_t *last) {
    *first = 0;
    *last = skv;
#if ATT_BAND
#if ATT_HAS_LO
    *first = r0 + (ATT_LO) > 0 ? r0 + (ATT_LO) : 0;
#endif
    *last = r1 + (ATT_HI) + 1 < skv ? r1 + (ATT_HI) + 1 : skv;
#endif
    (void)r0;
    (void)r1;
}

#if !ATT_F32

// ---- hardware: begin (sm_80+ PTX: cp.async, ldmatrix, mma.sync m16n8k16, ex2; the tests run the
// kernel on a host emulator with tests/data/families/attention/emu/emu_att.h in its place) ----
#if defined(ATT_FP16)
#define ATT_MMA_TYPES "f32.f16.f16.f32"
#else
#define ATT_MMA_TYPES "f32.bf16.bf16.f32"
#endif

// the block's dynamic shared memory, as a shared-window address (ldmatrix and cp.async take those)
__device__ __forceinline__ unsigned att_smem_base() {
    extern __shared__ __align__(16) unsigned char att_smem[];
    return (unsigned)__cvta_generic_to_shared(att_smem);
}
__device__ __forceinline__ float att_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
// 16 bytes global -> shared; bytes = 0 fills zeros (rows past the end)
__device__ __forceinline__ void att_cp16(unsigned dst, const void *src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void att_cp_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void att_cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void att_ldm4(unsigned addr, unsigned *r) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void att_ldm4t(unsigned addr, unsigned *r) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
// c += a·b, a 16x16 (row), b 16x8 (col), c 16x8 fp32
__device__ __forceinline__ void att_mma(float *c, const unsigned *a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col." ATT_MMA_TYPES
                 " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// two floats as one register of two 16-bit values, lo in the low half (an A fragment pair)
__device__ __forceinline__ unsigned att_pack(float lo, float hi) {
#if defined(ATT_FP16)
    __half2 h = __floats2half2_rn(lo, hi);
#else
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
#endif
    return *reinterpret_cast<unsigned *>(&h);
}
// ---- hardware: end ----

#define ATT_LD (ATT_D + 8)         // padded shared-memory row, in elements (mma.sync)
#define ATT_CHUNKS (ATT_D / 8)     // 16-byte chunks per row
#define ATT_NT (ATT_BLOCK_N / 8)   // score n-tiles per warp
#define ATT_DV (ATT_D / ATT_DSPLIT) // V's and O's columns a block computes
#define ATT_DT (ATT_DV / 8)         // output n-tiles per warp
static_assert(ATT_DR == ATT_D || ATT_DSPLIT == 1, "a padded head dim is one block's columns");
#define ATT_THREADS (ATT_WARPS * 32)
// threads that copy tiles: every thread (mma.sync), the producer warpgroup (wgmma)
#define ATT_COPIERS (ATT_WG ? 128 : ATT_THREADS)

// The shared-memory byte offset of 16-byte chunk ch of row r in a tile of `rows` rows. mma.sync:
// rows of ATT_LD elements. wgmma: the 128-byte swizzle its descriptors name, per 64-element column
// block (rows x 128 bytes, 1024-aligned): row r at 128 r, its chunk c at (c ^ r % 8) x 16.
__device__ __forceinline__ unsigned att_soff(int r, int ch, int rows) {
#if ATT_WG
    return (unsigned)((ch >> 3) * rows * 128 + r * 128 + (((ch & 7) ^ (r & 7)) << 4));
#else
    (void)rows;
    return (unsigned)((r * ATT_LD + ch * 8) * 2);
#endif
}

// rows [row0, row0 + rows) of a [s, CHUNKS * 8] matrix (K: D columns, V: the block's DV) with row
// stride `stride` into the shared-memory tile at dst; rows at or past `limit` are zero-filled.
// Paged, row j is row j % page_size of page pages[j / page_size].
template <int CHUNKS>
__device__ __forceinline__ void att_load_tile(unsigned dst, const ATT_T *src, int64_t stride,
                                              int64_t row0, int rows, int64_t limit,
                                              const int *pages, int64_t page_size) {
#pragma unroll 2
    for (int c = threadIdx.x; c < rows * CHUNKS; c += ATT_COPIERS) {
        const int r = c / CHUNKS, ch = c % CHUNKS;
        const int ok = row0 + r < limit && ch * 8 < ATT_DR; // zeros past the keys and the head dim
#if ATT_PAGED
        // 32-bit: a sequence's keys and a page's rows fit, and a 64-bit division is a call
        const unsigned j = (unsigned)(row0 + r), ps = (unsigned)page_size;
        const ATT_T *g =
            src + (ok ? ((int64_t)pages[j / ps] * page_size + j % ps) * stride + ch * 8 : 0);
#else
        (void)pages;
        (void)page_size;
        const ATT_T *g = src + (ok ? (row0 + r) * stride + ch * 8 : 0);
#endif
        att_cp16(dst + att_soff(r, ch, rows), g, ok ? 16 : 0);
    }
}

// Row m of a block's rows is query m of q head by (the block's y), or with ATT_PACK query m / ratio
// of q head kv head by * ratio + m % ratio: the ratio q heads that read one kv head then read each K
// and V tile once between them, which is what fills a block when there are few queries (decode).
__device__ __forceinline__ void att_row(const att_args &a, int64_t by, int64_t m, int64_t *head,
                                        int64_t *query) {
#if ATT_PACK
    const int64_t ratio = a.hq / a.hkv;
    *head = by * ratio + m % ratio;
    *query = m / ratio;
#else
    *head = by;
    *query = m;
#endif
}

// Q rows [m0, m0 + ATT_BLOCK_M) of the block (zeros past the last) into shared memory; qg is the
// batch's (paged: the sequence's first token's) q
__device__ __forceinline__ void att_load_q(unsigned dst, const att_args &a, int64_t by,
                                           const ATT_T *qg, int64_t m0, int64_t rows) {
#pragma unroll 2
    for (int c = threadIdx.x; c < ATT_BLOCK_M * ATT_CHUNKS; c += ATT_COPIERS) {
        const int r = c / ATT_CHUNKS, ch = c % ATT_CHUNKS;
        const int ok = m0 + r < rows && ch * 8 < ATT_DR;
        int64_t head, query;
        att_row(a, by, ok ? m0 + r : 0, &head, &query);
        const ATT_T *g = qg + head * a.qh + query * a.qs + (ok ? ch * 8 : 0);
        att_cp16(dst + att_soff(r, ch, ATT_BLOCK_M), g, ok ? 16 : 0);
    }
}

// What a block works on: its batch (paged: sequence) bi, its first row m0 of `rows`, the key tiles
// t0 .. t0 + n_tiles of the band, where its q, k, v and o start, and the first of its DV columns of
// V and O (dv0: with ATT_DSPLIT, grid z counts batch x column block).
struct att_block {
    int64_t bi, by, m0, sq, skv, hi, rows, ratio, t0, q0, kvh, dv0;
    int n_tiles;
    const int *pages;
    int64_t page_size;
    const ATT_T *qg, *kg, *vg;
    ATT_T *og;
};

// The block's work; 0 when it has none (paged: past the last tile, or the rows of one query).
// (bx, by, bz): the block's place in a grid of gx blocks along x (a persistent block's item)
__device__ __forceinline__ int att_block_of(const att_args &a, att_block &k, int64_t bx, int64_t by,
                                            int64_t bz, int64_t gx) {
#if ATT_PAGED && !ATT_PAGED_DECODE
    // block x: a row tile of a sequence, the sequences' tiles one after another, each sequence's from
    // its last (the longest causal rows) to its first; blocks past the last tile leave at once
    int64_t bi = -1, m0 = 0;
    {
        const int64_t per_query = ATT_PACK ? a.hq / a.hkv : 1;
        int64_t x = bx;
        for (int64_t b = 0; b < a.b && bi < 0; b++) {
            const int64_t tiles =
                ((a.qo_indptr[b + 1] - a.qo_indptr[b]) * per_query + ATT_BLOCK_M - 1) / ATT_BLOCK_M;
            if (x < tiles) {
                bi = b;
                m0 = (tiles - 1 - x) * ATT_BLOCK_M;
            }
            x -= tiles;
        }
        if (bi < 0)
            return 0;
    }
#else
    const int64_t m0 = (gx - 1 - bx) * ATT_BLOCK_M;
    const int64_t bi = bz / ATT_DSPLIT;
#endif
    (void)gx;
    k.dv0 = ATT_PAGED ? 0 : bz % ATT_DSPLIT * ATT_DV;
    k.bi = bi;
    k.by = by;
    k.m0 = m0;
#if ATT_PAGED
    // the sequence: its queries (q0, sq), its pages and keys (skv); hi: the causal diagonal
#if ATT_PAGED_DECODE
    k.q0 = bi;
    k.sq = 1;
#else
    k.q0 = a.qo_indptr[bi];
    k.sq = a.qo_indptr[bi + 1] - k.q0;
#endif
    const int64_t p0 = a.kv_indptr[bi], n_pages = a.kv_indptr[bi + 1] - p0;
#if ATT_PAGED_LAST
    k.skv = n_pages > 0 ? (n_pages - 1) * a.page_size + a.last_len[bi] : 0;
#else
    k.skv = n_pages * a.page_size;
#endif
    k.hi = k.skv - k.sq;
    k.pages = a.kv_indices + p0;
    k.page_size = a.page_size;
    k.qg = a.q + k.q0 * a.qs;
    k.og = a.o + k.q0 * a.os;
#else
    k.q0 = 0;
    k.sq = a.sq;
    k.skv = a.skv;
    k.hi = (ATT_HI);
    k.pages = nullptr;
    k.page_size = 0;
    k.qg = a.q + bi * a.qb;
    k.og = a.o + bi * a.ob + k.dv0;
#endif
#if ATT_PACK
    const int64_t kvh = by;
    k.ratio = a.hq / a.hkv;
#else
    const int64_t kvh = by / (a.hq / a.hkv);
    k.ratio = 1;
#endif
    k.rows = k.sq * k.ratio;
    k.kvh = kvh;
#if ATT_PAGED
    if (m0 >= k.rows)
        return 0; // decode: the grid covers one query's rows
    k.kg = a.k + kvh * a.kh;
    k.vg = a.v + kvh * a.vh;
#else
    k.kg = a.k + bi * a.kb + kvh * a.kh;
    k.vg = a.v + bi * a.vb + kvh * a.vh + k.dv0;
#endif
    int64_t first, last;
    const int64_t r_last = m0 + ATT_BLOCK_M < k.rows ? m0 + ATT_BLOCK_M - 1 : k.rows - 1;
    att_key_range(m0 / k.ratio, r_last / k.ratio, k.skv, &first, &last);
#if ATT_PAGED_CAUSAL
    // keys past the last row's diagonal are masked for every row of the block
    if (r_last / k.ratio + k.hi + 1 < last)
        last = r_last / k.ratio + k.hi + 1 > 0 ? r_last / k.ratio + k.hi + 1 : 0;
#endif
    k.t0 = first / ATT_BLOCK_N;
    k.n_tiles = last > first ? (int)((last + ATT_BLOCK_N - 1) / ATT_BLOCK_N - k.t0) : 0;
    return 1;
}

// This lane's two rows (16 warp + lane / 4 and 8 below): valid, their q head and query (rows past
// the end stand in for the last), and their rows of the mask.
struct att_lane {
    int64_t head[2], row[2];
    int valid[2];
    const ATT_TM *mrow[2];
};

__device__ __forceinline__ void att_lane_of(const att_args &a, const att_block &k, int warp, int g,
                                            att_lane &l) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int64_t m = k.m0 + warp * 16 + g + 8 * r;
        l.valid[r] = m < k.rows;
        att_row(a, k.by, l.valid[r] ? m : k.rows - 1, &l.head[r], &l.row[r]);
#if ATT_HAS_MASK
        l.mrow[r] = a.mask + k.bi * a.mb + l.head[r] * a.mh + l.row[r] * a.ms;
#else
        l.mrow[r] = nullptr;
#endif
    }
}

// One key tile's scores of the lane's rows (s[j][e]: row e / 2, key n0 + 8 j + 2 t + e % 2, the
// layout of an m16n8 accumulator and of a wgmma's) become probabilities: the roundings eager
// makes, the scale, the mask and band; the rows' running max and sum are updated and alpha[r] is
// what row r's accumulated output is to be multiplied by (e^(old max - new max)). EDGE: the tile
// holds keys past the end or above the causal diagonal of some row (att_edge), which get -inf;
// the other tiles skip those tests. ATT_FOLD (no mask tensor, no rounding of the scores, a
// positive scale): the max is taken of the raw scores and the scale folded into the exponent,
// p = 2^(x · scale · log2 e - max · log2 e), one fma a score.
template <bool EDGE>
__device__ __forceinline__ void att_softmax_tile(float (&s)[ATT_NT][4], const att_args &a,
                                                 const att_block &k, const att_lane &l, int64_t n0,
                                                 int t, float *m_run, float *l_run, float *alpha,
                                                 bool dead) {
    // columns are 32-bit offsets in the tile; a dead tile (EDGE only) has no key
    const int klim = dead                         ? 0
                     : k.skv - n0 < ATT_BLOCK_N ? (int)(k.skv - n0)
                                                : ATT_BLOCK_N;
#if ATT_CAUSAL_GEN || ATT_PAGED_CAUSAL
    // key n0 + c of row r is above the band when c > diag[r]
    const int diag0 = (int)(l.row[0] - n0 + k.hi), diag1 = (int)(l.row[1] - n0 + k.hi);
#endif
#if ATT_LO_GEN
    // ... and below it (a generated window) when c < low[r]
    const int low0 = (int)(l.row[0] - n0 + (ATT_LO)), low1 = (int)(l.row[1] - n0 + (ATT_LO));
#endif
    float mt[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < ATT_NT; j++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int r = e >> 1, c = j * 8 + 2 * t + (e & 1);
            float x = s[j][e];
#if ATT_ROUND_QK
            x = att_rnd(x);
#endif
#if !ATT_FOLD
            x *= a.scale;
#endif
#if ATT_ROUND_SCALED
            x = att_rnd(x);
#endif
#if ATT_TANH
            x = att_softcap(x);
#endif
#if ATT_HAS_MASK
            if (!EDGE || c < klim) {
                x += att_lf(l.mrow[r][ATT_MJ(a, n0 + c)]);
#if ATT_ROUND_MASKED
                x = att_rnd(x);
#endif
            }
#elif ATT_ROUND_MASKED
            x = att_rnd(x); // a generated band's 0 added: eager's rounding of the sum
#endif
            if (EDGE) {
#if ATT_CAUSAL_GEN || ATT_PAGED_CAUSAL
                if (c > (r ? diag1 : diag0))
                    x = -INFINITY;
#endif
#if ATT_LO_GEN
                if (c < (r ? low1 : low0))
                    x = -INFINITY;
#endif
                if (c >= klim)
                    x = -INFINITY;
            }
            s[j][e] = x;
            mt[r] = fmaxf(mt[r], x);
        }
    }
    (void)klim;
    float base[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mt[r] = fmaxf(mt[r], __shfl_xor_sync(0xffffffffu, mt[r], 1));
        mt[r] = fmaxf(mt[r], __shfl_xor_sync(0xffffffffu, mt[r], 2));
#if ATT_FOLD
        mt[r] *= a.scale;
#endif
        const float mn = fmaxf(m_run[r], mt[r]);
        base[r] = mn == -INFINITY ? 0.f : mn;
        alpha[r] = att_ex2((m_run[r] - base[r]) * ATT_LOG2E);
        m_run[r] = mn;
        l_run[r] *= alpha[r];
    }
#if ATT_FOLD
    const float c2 = a.scale * ATT_LOG2E, b0 = -base[0] * ATT_LOG2E, b1 = -base[1] * ATT_LOG2E;
#endif
#pragma unroll
    for (int j = 0; j < ATT_NT; j++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int r = e >> 1;
#if ATT_FOLD
            s[j][e] = att_ex2(fmaf(s[j][e], c2, r ? b1 : b0));
#else
            s[j][e] = att_ex2((s[j][e] - base[r]) * ATT_LOG2E);
#endif
            l_run[r] += s[j][e];
        }
    }
}

// Whether the tile at key n0 needs the per-key tests: keys past the end, (causal) keys above the
// diagonal of the block's first row, which every later row's diagonal is at or beyond, or (a
// generated window) keys below the lower bound of its last row.
__device__ __forceinline__ bool att_edge(const att_block &k, int64_t n0) {
#if ATT_CAUSAL_GEN || ATT_PAGED_CAUSAL
    if (n0 + ATT_BLOCK_N - 1 > k.m0 / k.ratio + k.hi)
        return true;
#endif
#if ATT_LO_GEN
    if (n0 < (k.m0 + ATT_BLOCK_M - 1) / k.ratio + (ATT_LO))
        return true;
#endif
    return n0 + ATT_BLOCK_N > k.skv;
}

__device__ __forceinline__ void att_softmax(float (&s)[ATT_NT][4], const att_args &a,
                                            const att_block &k, const att_lane &l, int64_t n0,
                                            int t, float *m_run, float *l_run, float *alpha,
                                            bool dead = false) {
    if (!ATT_SPLIT || dead || att_edge(k, n0))
        att_softmax_tile<true>(s, a, k, l, n0, t, m_run, l_run, alpha, dead);
    else
        att_softmax_tile<false>(s, a, k, l, n0, t, m_run, l_run, alpha, false);
}

// the accumulated output of the lane's rows times alpha (rows g and g + 8)
__device__ __forceinline__ void att_rescale(float (&acc)[ATT_DT][4], const float *alpha) {
#pragma unroll
    for (int i = 0; i < ATT_DT; i++) {
        acc[i][0] *= alpha[0];
        acc[i][1] *= alpha[0];
        acc[i][2] *= alpha[1];
        acc[i][3] *= alpha[1];
    }
}

// P of key pairs 16 kk .. 16 kk + 15 packed from the score registers (an m16n8 C fragment pair is
// an m16k16 A fragment; a wgmma's register A operand is the same per warp)
__device__ __forceinline__ void att_pack_p(const float (&s)[ATT_NT][4], int kk, unsigned *pa) {
    pa[0] = att_pack(s[2 * kk][0], s[2 * kk][1]);
    pa[1] = att_pack(s[2 * kk][2], s[2 * kk][3]);
    pa[2] = att_pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    pa[3] = att_pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

// Each row divided by its sum (spread over the quad of lanes sharing the row) and written.
__device__ __forceinline__ void att_store(const att_args &a, const att_block &k, const att_lane &l,
                                          const float (&acc)[ATT_DT][4], const float *m_run,
                                          float *l_run, int t) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (!l.valid[r])
            continue;
        ATT_T *orow = k.og + l.head[r] * a.oh + l.row[r] * a.os;
#if ATT_PAGED
        const float inv = l_run[r] > 0.f ? 1.f / l_run[r] : 0.f; // no key: 0, as FlashInfer
#if ATT_LSE
        if (t == 0)
            a.lse[(k.q0 + l.row[r]) * a.hq + l.head[r]] =
                l_run[r] > 0.f ? m_run[r] * ATT_LOG2E + log2f(l_run[r]) : -INFINITY;
#endif
#else
        (void)m_run;
        const float inv = 1.f / l_run[r];
#endif
#pragma unroll
        for (int i = 0; i < ATT_DT; i++) {
            if (ATT_DR < ATT_D && i * 8 >= ATT_DR)
                break; // the head dim's padding
            const unsigned v = att_pack(acc[i][2 * r] * inv, acc[i][2 * r + 1] * inv);
            *reinterpret_cast<unsigned *>(orow + i * 8 + 2 * t) = v;
        }
    }
}

#if !ATT_WG

__device__ __forceinline__ void att_fwd(const att_args a) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    att_block k;
    if (!att_block_of(a, k, blockIdx.x, blockIdx.y, blockIdx.z, gridDim.x))
        return;
    const unsigned s_q = att_smem_base();
    const unsigned s_k = s_q + ATT_BLOCK_M * ATT_LD * 2;
    const unsigned s_v = s_k + ATT_STAGES * ATT_BLOCK_N * ATT_LD * 2;
    const unsigned tile_bytes = ATT_BLOCK_N * ATT_LD * 2;
    const int n_tiles = k.n_tiles;

    att_load_q(s_q, a, k.by, k.qg, k.m0, k.rows);
#pragma unroll
    for (int s = 0; s < ATT_STAGES - 1; s++) {
        if (s < n_tiles) {
            const int64_t n0 = (k.t0 + s) * ATT_BLOCK_N;
            att_load_tile<ATT_CHUNKS>(s_k + s * tile_bytes, k.kg, a.ks, n0, ATT_BLOCK_N, k.skv,
                                      k.pages, k.page_size);
            att_load_tile<ATT_CHUNKS>(s_v + s * tile_bytes, k.vg, a.vs, n0, ATT_BLOCK_N, k.skv,
                                      k.pages, k.page_size);
        }
        att_cp_commit();
    }

    float acc[ATT_DT][4];
#pragma unroll
    for (int i = 0; i < ATT_DT; i++)
        acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f}, alpha[2];
    att_lane l;
    att_lane_of(a, k, warp, g, l);
    // this lane's ldmatrix row addresses: Q (A, row-major), K (B, non-transposed), V (B, .trans)
    const unsigned q_addr =
        s_q + (unsigned)(((warp * 16 + (lane & 15)) * ATT_LD + (lane >> 4) * 8) * 2);
    const unsigned k_off = (unsigned)((((lane & 7) + ((lane >> 4) << 3)) * ATT_LD +
                                       (((lane >> 3) & 1) << 3)) *
                                      2);
    const unsigned v_off = (unsigned)((((lane & 7) + (((lane >> 3) & 1) << 3)) * ATT_LD +
                                       ((lane >> 4) << 3)) *
                                      2);

    for (int it = 0; it < n_tiles; it++) {
        att_cp_wait<ATT_STAGES - 2>();
        __syncthreads();
        {
            const int nx = it + ATT_STAGES - 1;
            if (nx < n_tiles) {
                const int slot = nx % ATT_STAGES;
                const int64_t n0 = (k.t0 + nx) * ATT_BLOCK_N;
                att_load_tile<ATT_CHUNKS>(s_k + slot * tile_bytes, k.kg, a.ks, n0, ATT_BLOCK_N,
                                          k.skv, k.pages, k.page_size);
                att_load_tile<ATT_CHUNKS>(s_v + slot * tile_bytes, k.vg, a.vs, n0, ATT_BLOCK_N,
                                          k.skv, k.pages, k.page_size);
            }
            att_cp_commit();
        }
        const int slot = it % ATT_STAGES;
        const int64_t n0 = (k.t0 + it) * ATT_BLOCK_N;
        const unsigned kb = s_k + slot * tile_bytes + k_off, vb = s_v + slot * tile_bytes + v_off;

        // S = Q Kᵀ
        float s[ATT_NT][4];
#pragma unroll
        for (int j = 0; j < ATT_NT; j++)
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < ATT_D / 16; kk++) {
            unsigned qa[4];
            att_ldm4(q_addr + kk * 32, qa);
#pragma unroll
            for (int np = 0; np < ATT_NT / 2; np++) {
                unsigned kr[4];
                att_ldm4(kb + (unsigned)(np * 16 * ATT_LD * 2) + kk * 32, kr);
                att_mma(s[2 * np], qa, kr[0], kr[1]);
                att_mma(s[2 * np + 1], qa, kr[2], kr[3]);
            }
        }
        att_softmax(s, a, k, l, n0, t, m_run, l_run, alpha);
        att_rescale(acc, alpha);

        // O += P V
#pragma unroll
        for (int kk = 0; kk < ATT_NT / 2; kk++) {
            unsigned pa[4];
            att_pack_p(s, kk, pa);
#pragma unroll
            for (int dp = 0; dp < ATT_DT / 2; dp++) {
                unsigned vr[4];
                att_ldm4t(vb + (unsigned)(kk * 16 * ATT_LD * 2) + dp * 32, vr);
                att_mma(acc[2 * dp], pa, vr[0], vr[1]);
                att_mma(acc[2 * dp + 1], pa, vr[2], vr[3]);
            }
        }
    }
    att_cp_wait<0>();
    att_store(a, k, l, acc, m_run, l_run, t);
}

#else // ATT_WG: warpgroup MMAs (sm_90a)

// ---- wgmma (sm_90a): the emitter writes att_wg_qk (S = Q·Kᵀ, m64 x BLOCK_N, both operands from
// shared memory) and att_wg_pv (O += P·V, m64 x D, P from registers, V MN-major) ----
#define ATT_QBYTES (ATT_BLOCK_M * ATT_D * 2) // a Q tile, swizzled (ATT_QBUF of them)
// The producer's order (wgmma): 0, each tile's K then its V; 1, K(j + 1) before V(j). Not in the
// search space: 1 measured no faster on an H100 (docs/families/attention.md, 46th session).
#ifndef ATT_KFIRST
#define ATT_KFIRST 0
#endif
#ifndef ATT_QBUF
#define ATT_QBUF 1
#endif
#define ATT_KBYTES (ATT_BLOCK_N * ATT_D * 2)  // one K tile, swizzled
#define ATT_VBYTES (ATT_BLOCK_N * ATT_DV * 2) // one V tile (the block's DV columns), swizzled

// A shared-memory matrix descriptor: start address >> 4, leading byte offset lbo (K-major
// swizzled operands do not use it: 16), stride byte offset 1024 (eight 128-byte rows), the
// 128-byte swizzle. MN-major V: lbo is the distance between its 64-column blocks.
__device__ __forceinline__ unsigned long long att_desc(unsigned addr, unsigned lbo) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
           ((unsigned long long)(1024 >> 4) << 32) | ((unsigned long long)1 << 62);
}
template <int N> __device__ __forceinline__ void att_wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// registers an asynchronous wgmma reads or writes stay where they are until its wait
template <int N, int M> __device__ __forceinline__ void att_wg_keep(float (&x)[N][M]) {
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int j = 0; j < M; j++)
            asm volatile("" : "+f"(x[i][j])::"memory");
}
__device__ __forceinline__ void att_wg_keep(unsigned (&x)[ATT_NT / 2][4]) {
#pragma unroll
    for (int i = 0; i < ATT_NT / 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            asm volatile("" : "+r"(x[i][j])::"memory");
}
// S = Q Kᵀ of warpgroup rows at q and the K tile at kt: D / 16 MMAs of k16, committed as one group
__device__ __forceinline__ void att_wg_scores(float (&s)[ATT_NT][4], unsigned q, unsigned kt) {
    const unsigned long long dq = att_desc(q, 16), dk = att_desc(kt, 16);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int c = 0; c < ATT_D / 64; c++)
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            att_wg_qk(&s[0][0], dq + (unsigned long long)((c * ATT_BLOCK_M * 128 + kk * 32) >> 4),
                      dk + (unsigned long long)((c * ATT_BLOCK_N * 128 + kk * 32) >> 4), c + kk > 0);
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// O += P V of the V tile at vt: BLOCK_N / 16 MMAs, 16 keys (two 1024-byte row groups) each
__device__ __forceinline__ void att_wg_out(float (&o)[ATT_DT][4], const unsigned (&p)[ATT_NT / 2][4],
                                           unsigned vt) {
    const unsigned long long dv = att_desc(vt, ATT_BLOCK_N * 128);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < ATT_NT / 2; kk++)
        att_wg_pv(&o[0][0], p[kk], dv + (unsigned long long)(kk * 2048 >> 4), 1);
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// after a full barrier: the copies it saw (generic proxy) ordered before this thread's wgmma reads
__device__ __forceinline__ void att_bar_wait_data(unsigned bar, unsigned parity) {
    kiln_mbar_wait(bar, parity);
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
#if ATT_TMA
// One box (64 head-dim elements from column x0 by BLOCK_N keys) of K or V at key n0 into shared
// memory at dst, completing on bar's transaction count. Coordinates in the map's order
// (innermost first): the head dim, then the keys, kv head and batch where the map has them (a
// batch the tensor broadcasts, stride 0, reads its one matrix).
template <int RANK, int DS, int DH, int DB>
__device__ __forceinline__ void att_tma(unsigned dst, const kiln_tensormap *map, int x0, int64_t n0,
                                        const att_block &k, int64_t bstride, unsigned bar) {
    int x[5] = {x0, 0, 0, 0, 0};
    x[DS] = (int)n0;
    if (DH >= 0)
        x[DH > 0 ? DH : 4] = (int)k.kvh;
    if (DB >= 0)
        x[DB > 0 ? DB : 4] = bstride ? (int)k.bi : 0;
    if (RANK == 2)
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
                     "l"(map), "r"(x[0]), "r"(x[1]), "r"(bar)
                     : "memory");
    else if (RANK == 3)
        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
                     "l"(map), "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(bar)
                     : "memory");
    else
        asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
                     "l"(map), "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(x[3]), "r"(bar)
                     : "memory");
}
// a whole K or V tile: its COLS / 64 boxes from column x0, announced to the full barrier with the
// tile's bytes
template <int RANK, int DS, int DH, int DB, int COLS>
__device__ __forceinline__ void att_tma_tile(unsigned dst, const kiln_tensormap *map, int x0,
                                             int64_t n0, const att_block &k, int64_t bstride,
                                             unsigned bar) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
                 "r"(ATT_BLOCK_N * COLS * 2)
                 : "memory");
#pragma unroll
    for (int c = 0; c < COLS / 64; c++)
        att_tma<RANK, DS, DH, DB>(dst + (unsigned)c * ATT_BLOCK_N * 128, map, x0 + c * 64, n0, k,
                                  bstride, bar);
}
#if ATT_PAGED
// The page of part i (ATT_TMA_ROWS rows) of the key tile at n0, for producer thread i < parts, when
// the part lies whole within the sequence's keys (it comes by TMA); 0 otherwise. Loaded one tile
// ahead of its use, so the load's latency passes while the producer waits for a free buffer.
__device__ __forceinline__ int att_part_page(const att_block &k, int64_t n0) {
    constexpr int parts = ATT_BLOCK_N / ATT_TMA_ROWS;
    const int i = (int)threadIdx.x;
    return i < parts && n0 + (i + 1) * ATT_TMA_ROWS <= k.skv
               ? k.pages[(unsigned)(n0 + i * ATT_TMA_ROWS) / (unsigned)k.page_size]
               : 0;
}
// One K or V tile of a paged cache (pages [pages, page_size, hkv, d]), by the producer warpgroup:
// every part of ATT_TMA_ROWS rows that lies within the sequence's keys comes whole from one page by
// the TMA unit (thread 0 announces their bytes, then thread i issues part i's boxes from page, its
// att_part_page), the other parts (the last page's tail, keys past the sequence) by cp.async with
// zeros past the keys (not another request's rows: P · V would turn a NaN there into a NaN
// output); every producer thread then arrives on bar for its copies (1 + 128 arrivals a phase).
__device__ __forceinline__ void att_paged_tile(unsigned dst, const kiln_tensormap *map,
                                               const ATT_T *src, int64_t stride, int64_t n0,
                                               const att_block &k, unsigned bar, int page) {
    constexpr int parts = ATT_BLOCK_N / ATT_TMA_ROWS;
    static_assert(parts <= 32, "one lane of the first producer warp a part");
    const unsigned ps = (unsigned)k.page_size;
    const int64_t whole_keys = k.skv - n0; // the parts below this many keys are whole
    const int whole = whole_keys >= ATT_BLOCK_N ? parts : (int)(whole_keys / ATT_TMA_ROWS);
    if (threadIdx.x == 0)
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
                     "r"(whole * ATT_TMA_ROWS * ATT_D * 2)
                     : "memory");
    if (threadIdx.x < 32) {
        __syncwarp(); // the bytes announced before any box lands
        const int i = (int)threadIdx.x;
        if (i < whole) {
            const int row = (int)((unsigned)(n0 + i * ATT_TMA_ROWS) % ps);
#pragma unroll
            for (int c = 0; c < ATT_D / 64; c++)
                asm volatile(
                    "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
                    " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(
                        dst + (unsigned)(c * ATT_BLOCK_N * 128 + i * ATT_TMA_ROWS * 128)),
                    "l"(map), "r"(c * 64), "r"((int)k.kvh), "r"(row), "r"(page), "r"(bar)
                    : "memory");
        }
    }
    if (n0 + ATT_BLOCK_N > k.skv) {
        for (int x = threadIdx.x; x < ATT_BLOCK_N * ATT_CHUNKS; x += 128) {
            const int r = x / ATT_CHUNKS, ch = x % ATT_CHUNKS;
            if (n0 + (r / ATT_TMA_ROWS + 1) * ATT_TMA_ROWS <= k.skv)
                continue; // its part came by TMA
            const unsigned j = (unsigned)(n0 + r);
            const int ok = n0 + r < k.skv && ch * 8 < ATT_DR;
            const ATT_T *g =
                src + (ok ? ((int64_t)k.pages[j / ps] * k.page_size + j % ps) * stride + ch * 8 : 0);
            att_cp16(dst + att_soff(r, ch, ATT_BLOCK_N), g, ok ? 16 : 0);
        }
    }
    kiln_mbar_cp_arrive(bar);
}
#endif
#endif
// ---- wgmma: end ----

#define ATT_WGS (ATT_BLOCK_M / 64) // consumer warpgroups

// Ping-pong (ATT_PP, two or three consumer warpgroups): they issue their MMAs in turns, round the
// ring, so that one's softmax runs while the tensor cores serve another. Named barrier 1 + w is
// warpgroup w's turn: it waits there (bar.sync: its 128 threads and the previous one's 128
// arrivals) before issuing and lets the next go after (bar.arrive). All take the same number of
// turns; the last lets 0 go first and does not pass after its last turn, so that no barrier is
// left half arrived.
__device__ __forceinline__ void att_pp_take(int cw) {
#if ATT_PP
    asm volatile("bar.sync %0, 256;\n" ::"r"(1 + cw) : "memory");
#else
    (void)cw;
#endif
}
__device__ __forceinline__ void att_pp_pass(int cw) {
#if ATT_PP
    asm volatile("bar.arrive %0, 256;\n" ::"r"(1 + (cw + 1) % ATT_WGS) : "memory");
#else
    (void)cw;
#endif
}

// The non-persistent grid's blocks along x and y (z: the batch, or 1 for paged prefill).
__device__ __forceinline__ int64_t att_grid_x(const att_args &a) {
    const int64_t per_query = ATT_PACK ? a.hq / a.hkv : 1;
#if ATT_PAGED && ATT_PAGED_DECODE
    return (per_query + ATT_BLOCK_M - 1) / ATT_BLOCK_M;
#elif ATT_PAGED
    return (a.sq * per_query + ATT_BLOCK_M - 1) / ATT_BLOCK_M + a.b; // a block per sequence more
#else
    return (a.sq * per_query + ATT_BLOCK_M - 1) / ATT_BLOCK_M;
#endif
}

// A block's items: its own place in the grid, or with ATT_PERSIST (gridDim.x blocks, at most an
// SM's worth of them) items blockIdx.x, + gridDim.x, ... of the grid the kernel would otherwise
// have, x fastest (each head's longest causal rows first). Item i of the block's: 0 when it has
// none left; k gets the item's block (att_block_of; has = 0 where it has no work).
__device__ __forceinline__ int att_item(const att_args &a, int i, att_block &k, int &has) {
#if ATT_PERSIST
    // 32-bit: 2^32 items would be 32 TiB of Q (at 64 rows of 64 16-bit values an item), and the
    // 64-bit divisions spilled a paged producer's registers (at 72)
    const unsigned gx = (unsigned)att_grid_x(a), gy = (unsigned)(ATT_PACK ? a.hkv : a.hq);
    const unsigned gz = ATT_PAGED && !ATT_PAGED_DECODE ? 1u : (unsigned)(a.b * ATT_DSPLIT);
    const unsigned w = blockIdx.x + (unsigned)i * gridDim.x;
    if (w >= gx * gy * gz)
        return 0;
    has = att_block_of(a, k, w % gx, w / gx % gy, w / (gx * gy), gx);
#else
    if (i > 0)
        return 0;
    has = att_block_of(a, k, blockIdx.x, blockIdx.y, blockIdx.z, gridDim.x);
#endif
    return 1;
}

// Warp-specialised (FlashAttention-3's plan): warpgroup 0 copies, the ATT_WGS others compute, 64
// rows each (warp w of them its rows 16 w ..). The producer fills ATT_STAGES buffers of K and of V,
// each with a full and an empty mbarrier: it waits until a buffer is empty, issues its copies (TMA
// boxes from one thread where ATT_TMA, a paged cache's tail and every other layout by cp.async from
// all 128) and arrives on the full barrier (with the boxes' bytes, and once the cp.async copies land).
// Q comes by cp.async (packed heads are not a box) into its ATT_QBUF buffers, full and empty
// barriers too (two in a persistent grid: the next item's Q loads while this one's is read). A
// consumer issues S(it + 1) = Q K(it + 1)ᵀ and then O += P(it) V(it), waits for the first only,
// frees K(it + 1)'s buffer and turns S(it + 1) into probabilities while the tensor cores still run
// the second, then waits for it, frees V(it)'s buffer, rescales O and packs P(it + 1): the softmax
// runs under the MMAs and no barrier stops the block. With ATT_PERSIST a block takes several items
// (att_item); the tile count g and the stages' phases go on across them, so the producer loads the
// next item's Q and first tiles while the consumers finish and store this one.
__device__ __forceinline__ void att_fwd(const att_args a) {
    const int wg = threadIdx.x / 128, ct = threadIdx.x - 128; // consumer thread (wg > 0)
    const unsigned s_q = (att_smem_base() + 1023u) & ~1023u;
    const unsigned s_k = s_q + ATT_QBUF * ATT_QBYTES, s_v = s_k + ATT_STAGES * ATT_KBYTES;
    const unsigned q_full = s_v + ATT_STAGES * ATT_VBYTES, k_full = q_full + 8 * ATT_QBUF,
                   v_full = k_full + 8 * ATT_STAGES, k_empty = v_full + 8 * ATT_STAGES,
                   v_empty = k_empty + 8 * ATT_STAGES, q_empty = v_empty + 8 * ATT_STAGES;
    if (threadIdx.x == 0) {
        for (int i = 0; i < ATT_QBUF; i++) {
            kiln_mbar_init(q_full + 8 * i, 128);
            kiln_mbar_init(q_empty + 8 * i, 4 * ATT_WGS);
        }
        for (int i = 0; i < ATT_STAGES; i++) {
            // TMA: the producer thread's arrival with the tile's bytes; cp.async: 128 arrivals;
            // paged, both
            const unsigned full = ATT_TMA && ATT_PAGED ? 129 : ATT_TMA ? 1 : 128;
            kiln_mbar_init(k_full + 8 * i, full);
            kiln_mbar_init(v_full + 8 * i, full);
            kiln_mbar_init(k_empty + 8 * i, 4 * ATT_WGS); // one arrival a consumer warp
            kiln_mbar_init(v_empty + 8 * i, 4 * ATT_WGS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    att_block k;
    int has = 0;
    if (wg == 0) {
#if ATT_REG_CONSUMER
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(ATT_REG_PRODUCER) : "memory");
#endif
#if ATT_TMA
        if (threadIdx.x == 0) {
            asm volatile("prefetch.tensormap [%0];\n" ::"l"(a.tk) : "memory");
            asm volatile("prefetch.tensormap [%0];\n" ::"l"(a.tv) : "memory");
        }
#endif
        int g = 0; // K/V tiles of the block's earlier items
        for (int item = 0, qi = 0; att_item(a, item, k, has); item++) {
            if (!has)
                continue;
            const int n = k.n_tiles;
            const int qb = qi % ATT_QBUF;
            kiln_mbar_wait(q_empty + 8 * qb, ((qi++ / ATT_QBUF) & 1) ^ 1);
            att_load_q(s_q + (unsigned)qb * ATT_QBYTES, a, k.by, k.qg, k.m0, k.rows);
            kiln_mbar_cp_arrive(q_full + 8 * qb);
            // V(j - ATT_KFIRST) after K(j): with ATT_KFIRST 1 the next K tile goes before the current
            // V (FlashAttention-3's order, the order the consumers wait in: the scores of tile j + 1
            // before P · V(j)); with 0 a tile's K then its V, where K(j + 1) waits behind V(j)'s free
            // buffer, which a consumer step frees at its end
            constexpr int lag = ATT_KFIRST;
#if ATT_TMA && ATT_PAGED
            // a tile's page ids (one a part, the part's thread) come in while the buffers are awaited
            int page = n > 0 ? att_part_page(k, k.t0 * ATT_BLOCK_N) : 0, v_page = 0;
            for (int j = 0; j < n + lag; j++) {
                const int k_page = page; // tile j's
                if (j < n) {
                    const int b = (g + j) % ATT_STAGES;
                    const int64_t n0 = (k.t0 + j) * ATT_BLOCK_N;
                    const int next = j + 1 < n ? att_part_page(k, n0 + ATT_BLOCK_N) : 0;
                    kiln_mbar_wait(k_empty + 8 * b, (((g + j) / ATT_STAGES) & 1) ^ 1);
                    att_paged_tile(s_k + (unsigned)b * ATT_KBYTES, a.tk, k.kg, a.ks, n0, k,
                                   k_full + 8 * b, page);
                    page = next;
                }
                if (j >= lag) {
                    const int b = (g + j - lag) % ATT_STAGES;
                    kiln_mbar_wait(v_empty + 8 * b, (((g + j - lag) / ATT_STAGES) & 1) ^ 1);
                    att_paged_tile(s_v + (unsigned)b * ATT_VBYTES, a.tv, k.vg, a.vs,
                                   (k.t0 + j - lag) * ATT_BLOCK_N, k, v_full + 8 * b,
                                   lag ? v_page : k_page);
                }
                v_page = k_page;
            }
#elif ATT_TMA
            for (int j = 0; j < n + lag && threadIdx.x == 0; j++) {
                if (j < n) {
                    const int b = (g + j) % ATT_STAGES;
                    kiln_mbar_wait(k_empty + 8 * b, (((g + j) / ATT_STAGES) & 1) ^ 1);
                    att_tma_tile<ATT_K_RANK, ATT_K_DIM_S, ATT_K_DIM_H, ATT_K_DIM_B, ATT_D>(
                        s_k + (unsigned)b * ATT_KBYTES, a.tk, 0, (k.t0 + j) * ATT_BLOCK_N, k, a.kb,
                        k_full + 8 * b);
                }
                if (j >= lag) {
                    const int b = (g + j - lag) % ATT_STAGES;
                    kiln_mbar_wait(v_empty + 8 * b, (((g + j - lag) / ATT_STAGES) & 1) ^ 1);
                    att_tma_tile<ATT_V_RANK, ATT_V_DIM_S, ATT_V_DIM_H, ATT_V_DIM_B, ATT_DV>(
                        s_v + (unsigned)b * ATT_VBYTES, a.tv, (int)k.dv0,
                        (k.t0 + j - lag) * ATT_BLOCK_N, k, a.vb, v_full + 8 * b);
                }
            }
#else
            for (int j = 0; j < n + lag; j++) {
                if (j < n) {
                    const int b = (g + j) % ATT_STAGES;
                    kiln_mbar_wait(k_empty + 8 * b, (((g + j) / ATT_STAGES) & 1) ^ 1);
                    att_load_tile<ATT_CHUNKS>(s_k + (unsigned)b * ATT_KBYTES, k.kg, a.ks,
                                              (k.t0 + j) * ATT_BLOCK_N, ATT_BLOCK_N, k.skv, k.pages,
                                              k.page_size);
                    kiln_mbar_cp_arrive(k_full + 8 * b);
                }
                if (j >= lag) {
                    const int b = (g + j - lag) % ATT_STAGES;
                    kiln_mbar_wait(v_empty + 8 * b, (((g + j - lag) / ATT_STAGES) & 1) ^ 1);
                    att_load_tile<ATT_DV / 8>(s_v + (unsigned)b * ATT_VBYTES, k.vg, a.vs,
                                              (k.t0 + j - lag) * ATT_BLOCK_N, ATT_BLOCK_N, k.skv,
                                              k.pages, k.page_size);
                    kiln_mbar_cp_arrive(v_full + 8 * b);
                }
            }
#endif
            g += n;
        }
        att_cp_wait<0>();
        return;
    }
#if ATT_REG_CONSUMER
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(ATT_REG_CONSUMER) : "memory");
#endif
    const int warp = ct / 32, lane = ct % 32, gr = lane / 4, t = lane % 4;
    const int cw = wg - 1;
    int g = 0;
    for (int item = 0, qi = 0; att_item(a, item, k, has); item++) {
        if (!has)
            continue;
        const int n = k.n_tiles;
        float o[ATT_DT][4], s[ATT_NT][4];
        unsigned p[ATT_NT / 2][4];
#pragma unroll
        for (int i = 0; i < ATT_DT; i++)
            o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
        float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f}, alpha[2];
        att_lane l;
        att_lane_of(a, k, warp, gr, l);
        const int qb = qi % ATT_QBUF;
        const unsigned q_wg = s_q + (unsigned)qb * ATT_QBYTES + (unsigned)cw * 64 * 128;
        att_bar_wait_data(q_full + 8 * qb, (qi++ / ATT_QBUF) & 1);
#if ATT_PP
        if (cw == ATT_WGS - 1 && n > 0)
            att_pp_pass(cw); // warpgroup 0 takes the first turn
#endif
        if (n > 0) {
            const int b0 = g % ATT_STAGES;
            att_bar_wait_data(k_full + 8 * b0, (g / ATT_STAGES) & 1);
            att_pp_take(cw);
            att_wg_scores(s, q_wg, s_k + (unsigned)b0 * ATT_KBYTES);
            att_pp_pass(cw);
            att_wg_wait<0>();
            att_wg_keep(s);
            if (lane == 0)
                kiln_mbar_arrive(k_empty + 8 * b0);
            att_softmax(s, a, k, l, k.t0 * ATT_BLOCK_N, t, m_run, l_run, alpha);
#pragma unroll
            for (int kk = 0; kk < ATT_NT / 2; kk++)
                att_pack_p(s, kk, p[kk]);
        } else if (lane == 0) {
            kiln_mbar_arrive(q_empty + 8 * qb); // no tile: Q is not read
        }
        // Every step issues the same two groups and waits the same way, so that ptxas sees
        // S(it + 1) complete at the first wait: with a group issued only on some steps, or a last
        // P·V peeled off the loop, it cannot, and serialises every wgmma ("C7514" in its log). So
        // the last step multiplies Q by its own K tile again (its buffer may be refilled by then:
        // no tile of this item comes after it) and drops the scores.
        for (int it = 0; it < n; it++) {
            const bool next = it + 1 < n;
            const int jk = g + it + 1, jv = g + it;
            const int bk = jk % ATT_STAGES, bv = jv % ATT_STAGES;
            if (next)
                att_bar_wait_data(k_full + 8 * bk, (jk / ATT_STAGES) & 1);
            att_bar_wait_data(v_full + 8 * bv, (jv / ATT_STAGES) & 1);
            att_pp_take(cw);
            att_wg_scores(s, q_wg, s_k + (unsigned)(next ? bk : bv) * ATT_KBYTES);
            att_wg_out(o, p, s_v + (unsigned)bv * ATT_VBYTES);
            if (cw < ATT_WGS - 1 || next)
                att_pp_pass(cw); // the last warpgroup's last turn is the item's last
            att_wg_wait<1>();
            att_wg_keep(s);
            if (lane == 0) {
                if (next)
                    kiln_mbar_arrive(k_empty + 8 * bk);
                else
                    kiln_mbar_arrive(q_empty + 8 * qb); // the item's last read of Q
            }
            // the last step's scores are a dead tile: every key -inf, so that alpha is 1 and P 0
            att_softmax(s, a, k, l, (k.t0 + it + 1) * ATT_BLOCK_N, t, m_run, l_run, alpha, !next);
            att_wg_wait<0>();
            att_wg_keep(o);
            att_wg_keep(p);
            if (lane == 0)
                kiln_mbar_arrive(v_empty + 8 * bv);
            att_rescale(o, alpha);
#pragma unroll
            for (int kk = 0; kk < ATT_NT / 2; kk++)
                att_pack_p(s, kk, p[kk]);
        }
        att_store(a, k, l, o, m_run, l_run, t);
        g += n;
    }
}

#endif // ATT_WG

#else // ATT_F32: a warp per query row, 4 rows per block

#define ATT_DPL ((ATT_D + 31) / 32)

__device__ __forceinline__ void att_fwd(const att_args a) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t i = (int64_t)blockIdx.x * 4 + warp, h = blockIdx.y, bi = blockIdx.z;
    if (i >= a.sq)
        return;
    const int64_t kvh = h / (a.hq / a.hkv);
    const float *qr = a.q + bi * a.qb + h * a.qh + i * a.qs;
    const float *kg = a.k + bi * a.kb + kvh * a.kh;
    const float *vg = a.v + bi * a.vb + kvh * a.vh;
    float qv[ATT_DPL], acc[ATT_DPL];
#pragma unroll
    for (int c = 0; c < ATT_DPL; c++) {
        const int d = lane + 32 * c;
        qv[c] = d < ATT_D ? qr[d] : 0.f;
        acc[c] = 0.f;
    }
    int64_t first, last;
    att_key_range(i, i, a.skv, &first, &last);
    float m = -INFINITY, l = 0.f;
    for (int64_t j = first; j < last; j++) {
        const float *kr = kg + j * a.ks;
        float dot = 0.f;
#pragma unroll
        for (int c = 0; c < ATT_DPL; c++) {
            const int d = lane + 32 * c;
            dot += d < ATT_D ? qv[c] * kr[d] : 0.f;
        }
#pragma unroll
        for (int o = 16; o; o >>= 1)
            dot += __shfl_xor_sync(0xffffffffu, dot, o);
        float x = dot * a.scale;
#if ATT_TANH
        x = att_softcap(x);
#endif
#if ATT_HAS_MASK
        x += att_lf(a.mask[bi * a.mb + h * a.mh + i * a.ms + ATT_MJ(a, j)]);
#endif
#if ATT_CAUSAL_GEN
        if (j - i > (ATT_HI))
            x = -INFINITY;
#endif
        const float mn = fmaxf(m, x);
        const float base = mn == -INFINITY ? 0.f : mn;
        const float alpha = expf(m - base), p = expf(x - base);
        l = l * alpha + p;
        const float *vr = vg + j * a.vs;
#pragma unroll
        for (int c = 0; c < ATT_DPL; c++) {
            const int d = lane + 32 * c;
            acc[c] = acc[c] * alpha + (d < ATT_D ? p * vr[d] : 0.f);
        }
        m = mn;
    }
    float *orow = a.o + bi * a.ob + h * a.oh + i * a.os;
#pragma unroll
    for (int c = 0; c < ATT_DPL; c++) {
        const int d = lane + 32 * c;
        if (d < ATT_D)
            orow[d] = acc[c] / l;
    }
}

#endif
