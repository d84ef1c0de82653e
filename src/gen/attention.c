/* attention.c: the attention family: a flash-attention forward, o = softmax(q·kᵀ·scale + mask)·v
 * without the score matrix in memory, for the eager attention chain and SDPA calls that
 * attention_match.c recognises (docs/families/attention.md).
 *
 * The CUDA candidate (templates/attention.cu) gives each block BLOCK_M query rows of one (batch, q
 * head) and walks the key tiles of BLOCK_N that the mask's band leaves, K and V tiles streamed by
 * cp.async through STAGES buffers, scores and output in registers (mma.sync m16n8k16, fp32
 * accumulate), one warp per 16 query rows; on sm_90a (ATT_WG) a producer warpgroup feeds consumer
 * warpgroups by TMA (cp.async for what TMA cannot address) and the MMAs are wgmma, the softmax of
 * one tile under the MMAs of the last (FlashAttention-3's plan). float32 problems run a plain
 * warp-per-row kernel instead (mma.sync takes 16-bit inputs; tf32 would miss float32's tolerance),
 * which has no parameters. The cpu candidate is the same algorithm in C
 * (templates/attention_cpu.c). FlashInfer's paged form (attention_paged.c) runs the same kernels
 * with a sequence per blockIdx.z and K/V rows looked up through its page table. */
#include "attention.h"

#include <math.h>
#include <string.h>

enum { P_BM, P_BN, P_WARPS, P_STAGES, P_PACK, P_WG, P_PP, P_MINB, P_PERSIST, P_COUNT };

#define ATT_MAX_SMEM (227 * 1024)
#define ATT_SM_SMEM (228 * 1024) /* an SM's shared memory, 1 KiB of it reserved per block */
#define ATT_MAX_REGS 255

extern const kiln_family kiln_family_attention;

/* ---- the match ---- */

/* The paged form's facts (att_paged): sq is workload 0's tokens, b its sequences, skv the keys its
 * cache pool holds (a bound on any sequence's). */
static void match_paged(const kiln_problem *p, const att_info *a, kiln_match *m) {
    const att_paged *pg = &a->paged;
    const kiln_workload *w0 = &p->workloads[0];
    int64_t q[KILN_MAX_DIMS], k[KILN_MAX_DIMS], ix[KILN_MAX_DIMS];
    kiln_tensor_shape(p, &p->inputs[a->t[ATT_Q].input], w0, q);
    kiln_tensor_shape(p, &p->inputs[a->t[ATT_K].input], w0, k);
    kiln_tensor_shape(p, &p->inputs[pg->input[1]], w0, ix);
    snprintf(m->variant, sizeof m->variant, "attention_paged_%s%s",
             pg->decode   ? "decode"
             : pg->causal ? "prefill_causal"
                          : "prefill",
             k[2] != q[1] ? "_gqa" : "");
    kiln_match_set(m, "paged", 1);
    kiln_match_set(m, "decode", pg->decode);
    kiln_match_set(m, "page_size", (double)pg->page_size);
    kiln_match_set(m, "lse", pg->lse >= 0);
    kiln_match_set(m, "b", (double)(ix[0] - 1));
    kiln_match_set(m, "hq", (double)q[1]);
    kiln_match_set(m, "hkv", (double)k[2]);
    kiln_match_set(m, "sq", pg->decode ? 1.0 : (double)q[0]);
    kiln_match_set(m, "skv", (double)(k[0] * k[1]));
    kiln_match_set(m, "d", (double)q[2]);
    kiln_match_set(m, "scale", a->scale);
    kiln_match_set(m, "causal", pg->causal);
    kiln_match_set(m, "esize", (double)kiln_dtype_size(a->dtype));
    kiln_match_set(m, "f32", 0);
    for (int r = 0; r < ATT_ROLES; r++)
        m->input_of_role[r] = a->t[r].input;
    for (int r = 0; r < 4; r++)
        m->input_of_role[ATT_QO_INDPTR + r] = pg->input[r];
    m->output_of_role[0] = pg->out;
    m->output_of_role[1] = pg->lse;
}

static int att_match(const kiln_problem *p, kiln_match *m, char *why, size_t why_len) {
    att_info a;
    if (!kiln_attention_analyse(p, &a, why, why_len))
        return 0;
    const kiln_workload *w0 = &p->workloads[0];
    const int64_t d = kiln_attention_dim(p, &a.t[ATT_Q], 3, w0);
    for (int wi = 1; wi < p->n_workloads; wi++)
        if (kiln_attention_dim(p, &a.t[ATT_Q], 3, &p->workloads[wi]) != d) {
            snprintf(why, why_len, "the head dim differs between workloads");
            return 0;
        }
    if (d > 512 || d % 8) {
        snprintf(why, why_len, "head dim %lld (up to 512, a multiple of 8)", (long long)d);
        return 0;
    }
    snprintf(m->how, sizeof m->how, "%s", a.how);
    if (a.paged.on) {
        match_paged(p, &a, m);
        return 1;
    }
    snprintf(m->variant, sizeof m->variant, "attention%s%s",
             a.mask == ATT_MASK_CAUSAL ? "_causal"
             : a.band && a.has_lo      ? "_sliding"
             : a.band                  ? "_causal_mask"
             : a.mask                  ? "_mask"
                                       : "",
             a.t[ATT_K].pos[1] >= 0 && kiln_attention_dim(p, &a.t[ATT_K], 1, w0) !=
                                           kiln_attention_dim(p, &a.t[ATT_Q], 1, w0)
                 ? "_gqa"
                 : "");
    kiln_match_set(m, "b", (double)kiln_attention_dim(p, &a.t[ATT_Q], 0, w0));
    kiln_match_set(m, "hq", (double)kiln_attention_dim(p, &a.t[ATT_Q], 1, w0));
    kiln_match_set(m, "hkv", (double)kiln_attention_dim(p, &a.t[ATT_K], 1, w0));
    kiln_match_set(m, "sq", (double)kiln_attention_dim(p, &a.t[ATT_Q], 2, w0));
    kiln_match_set(m, "skv", (double)kiln_attention_dim(p, &a.t[ATT_K], 2, w0));
    kiln_match_set(m, "d", (double)d);
    kiln_match_set(m, "scale", a.scale);
    kiln_match_set(m, "tanh", a.tanh);
    kiln_match_set(m, "pre", a.pre);
    kiln_match_set(m, "post", a.post);
    kiln_match_set(m, "mask", a.mask);
    kiln_match_set(m, "band", a.band);
    kiln_match_set(m, "has_lo", a.has_lo);
    kiln_match_set(m, "lo", (double)a.lo);
    kiln_match_set(m, "hi", (double)a.hi);
    kiln_match_set(m, "band_exact", a.band_exact);
    kiln_match_set(m, "esize", (double)kiln_dtype_size(a.dtype));
    kiln_match_set(m, "f32", a.dtype == KILN_F32);
    kiln_match_set(m, "round_qk", a.round_qk);
    kiln_match_set(m, "round_scaled", a.round_scaled);
    kiln_match_set(m, "round_masked", a.round_masked);
    for (int r = 0; r < ATT_ROLES; r++)
        m->input_of_role[r] = a.t[r].input;
    m->output_of_role[0] = 0;
    snprintf(m->how, sizeof m->how, "%s", a.how);
    return 1;
}

/* ---- constraints ---- */

/* The blocks a row tile's V and O columns are split over (ATT_DSPLIT): 2 for a wgmma kernel over
 * 256 (a warpgroup's 64 x d output accumulators would take d / 2 registers a thread), so that each
 * block computes the scores over the whole head dim and the output of d / 2 columns: the first
 * matmul twice, 1.5 times the flops, but no head dim of Gemma-4's full-attention layers (512)
 * declined. */
static int64_t dsplit_of(const kiln_match *m, const int64_t *pt) {
    return pt[P_WG] && kiln_match_get(m, "d", 64) > 256 ? 2 : 1;
}

/* The head dim a 16-bit CUDA kernel computes over (ATT_D): the problem's (ATT_DR) padded with zero
 * columns to its MMAs' granule, a multiple of 16 for mma.sync (k16 steps) and of 64 for wgmma
 * (128-byte swizzled column blocks), so that Stable Diffusion 1.5's 40 or DiT's 72 take the tensor
 * cores too: the loads fill the padding with zeros (nothing added to q·kᵀ; V's zero columns give
 * output columns that the stores skip). float32's kernel takes any head dim. */
static int64_t dk_of(const kiln_match *m, const int64_t *pt) {
    const int64_t d = (int64_t)kiln_match_get(m, "d", 64), g = pt[P_WG] ? 64 : 16;
    return kiln_match_get(m, "f32", 0) ? d : (d + g - 1) / g * g;
}

/* What a block of `bytes` of shared memory exceeds: a block's 227 KiB, or with MINB blocks an SM,
 * the SM's 228 KiB (1 KiB of it reserved per block); NULL when it fits. */
static const char *smem_over(const int64_t *pt, int64_t bytes) {
    if (bytes > ATT_MAX_SMEM)
        return "Q and STAGES K/V tiles exceed 227 KiB of shared memory";
    if (pt[P_MINB] * (bytes + 1024) > ATT_SM_SMEM)
        return "MINB blocks' tiles exceed an SM's 228 KiB of shared memory";
    return NULL;
}

static int64_t smem_of(const kiln_match *m, const int64_t *pt, int64_t qbuf) {
    const int64_t d = dk_of(m, pt), dv = d / dsplit_of(m, pt);
    /* wgmma: qbuf Q tiles and STAGES K and V tiles (V: the block's dv columns) in the 128-byte
     * swizzle, 1024-aligned (1 KiB of slack), then a full and an empty mbarrier per buffer */
    if (pt[P_WG])
        return (qbuf * pt[P_BM] * d + pt[P_STAGES] * pt[P_BN] * (d + dv)) * 2 + 1024 +
               8 * (2 * qbuf + 4 * pt[P_STAGES]);
    /* rows padded by 16 bytes: ldmatrix's eight row addresses then fall in distinct banks */
    return (pt[P_BM] + 2 * pt[P_STAGES] * pt[P_BN]) * (d + 8) * 2;
}

/* Q buffers of a wgmma kernel (ATT_QBUF): two in a persistent grid where shared memory holds them,
 * so that the producer loads the next item's Q while the consumers still read this one's (with one,
 * the consumers waited for Q at every item: 3.7 % of the warps' samples on [16,16,1024,64], whose
 * items are eight key tiles; bench/RESULTS.md, 44th session); one otherwise. */
static int64_t qbuf_of(const kiln_match *m, const int64_t *pt) {
    return pt[P_WG] && pt[P_PERSIST] && !smem_over(pt, smem_of(m, pt, 2)) ? 2 : 1;
}

static int64_t smem_bytes(const kiln_match *m, const int64_t *pt) {
    return smem_of(m, pt, qbuf_of(m, pt));
}

/* Threads a block: its warps, and with wgmma a producer warpgroup that copies. */
static int64_t threads_of(const int64_t *pt) {
    return pt[P_WARPS] * 32 + (pt[P_WG] ? 128 : 0);
}

/* Registers a thread, for ATT_MINB blocks an SM: *launch, what __launch_bounds__(threads, MINB)
 * leaves each thread; where a wgmma block hands the producer's registers to its consumers
 * (setmaxnreg: two or three consumer warpgroups, or several blocks an SM), *producer and *consumer
 * after that (the producer keeps 40, 56 for a paged cache's page ids, which spilled at 48, 72
 * for those in a persistent grid, which spilled at 56, and 32 beside three consumer warpgroups,
 * FlashAttention-3's split: 160 each, where 40 left 152 and the consumers of 192 x 128 tiles at
 * head dim 64 spilled; the consumers share the rest of the block's launch registers, a multiple of
 * 8), else both 0. */
static void regs_of(const kiln_match *m, const int64_t *pt, int *launch, int *producer,
                    int *consumer) {
    const int64_t threads = threads_of(pt);
    int64_t r = 65536 / (pt[P_MINB] * threads) / 8 * 8;
    *launch = (int)(r > ATT_MAX_REGS ? ATT_MAX_REGS : r);
    *producer = *consumer = 0;
    if (pt[P_WG] && (pt[P_BM] > 64 || pt[P_MINB] > 1)) {
        *producer = !kiln_match_get(m, "paged", 0) ? (pt[P_BM] > 128 ? 32 : 40)
                    : pt[P_PERSIST]                ? 72
                                                   : 56;
        int64_t c = ((int64_t)*launch * threads - *producer * 128) / (threads - 128) / 8 * 8;
        *consumer = (int)(c > 240 ? 240 : c);
    }
}

/* Whether a 16-bit CUDA kernel reads a mask tensor: not an exact band's (att_info.band_exact),
 * which it generates. */
static int reads_mask(const kiln_match *m) {
    return kiln_match_get(m, "mask", 0) == 1 && !kiln_match_get(m, "band_exact", 0);
}

/* Whether a wgmma kernel has the second, test-free softmax (ATT_SPLIT): not at head dim 256, whose
 * output accumulators leave it few registers (with a mask tensor read, none; without, it compiles
 * and was measured 3 % slower on Gemma-4's rows: 219.6 against 212.6 us full causal). */
static int split_softmax(const kiln_match *m, const int64_t *pt) {
    return pt[P_WG] && dk_of(m, pt) <= 128;
}

/* Registers per thread: the output accumulators (dv/2 floats per thread of a warp's 16 rows), the
 * scores (BLOCK_N/2), and ~48 for fragments, addresses, the softmax state and the mask; wgmma
 * also holds the probabilities of the previous tile (BLOCK_N/4) while the next one's scores come.
 */
static int64_t regs_estimate(const kiln_match *m, const int64_t *pt) {
    const int64_t d = dk_of(m, pt) / dsplit_of(m, pt);
    const int split = split_softmax(m, pt), mask = reads_mask(m);
    /* + the mask's values, which the second softmax (ATT_SPLIT) keeps live across both versions,
     * and their addresses (measured with nvcc 13's ptxas, BERT's [32, 12, 512, 64] padding mask:
     * 64-key tiles compile without spills for 216 and 232 registers, 80-key ones spill at both) */
    return d / 2 + pt[P_BN] / 2 + (pt[P_WG] ? pt[P_BN] / 4 : 0) +
           (split && mask ? pt[P_BN] + 8 : 0) + 48;
}

/* The most registers regs_estimate may ask of a thread: what __launch_bounds__ leaves it less 16,
 * or the consumers' share after setmaxnreg less 8. Three consumer warpgroups of a contiguous cache
 * without a mask tensor read get 24 more: ptxas fits their accumulators closer (measured, nvcc 13:
 * at 160 registers, 192 x 128 tiles of head dim 64 and 192 x 80 of head dim 128 compile without
 * spills, estimates 176 and 172; 192 x 160 and 192 x 96 of those spill, 200 and 184). */
static int64_t regs_allowed(const kiln_match *m, const int64_t *pt) {
    int launch, producer, consumer;
    regs_of(m, pt, &launch, &producer, &consumer);
    if (!consumer)
        return launch - 16;
    const int close = pt[P_BM] > 128 && !reads_mask(m) && !kiln_match_get(m, "paged", 0);
    return consumer + (close ? 16 : -8);
}

static const char *att_check(const kiln_problem *p, const kiln_match *m, const int64_t *pt) {
    (void)p;
    if (kiln_match_get(m, "f32", 0)) {
        for (int i = 0; i < P_COUNT; i++)
            if (pt[i] != kiln_family_attention.params[i].values[0])
                return "float32 runs the warp-per-row kernel: only the first point";
        return NULL;
    }
    const int64_t d = (int64_t)kiln_match_get(m, "d", 64);
    if (d > 256 && !pt[P_WG])
        return "head dims over 256 take wgmma (a row tile's output columns split over two blocks)";
    if (d > 256 && (d % 128 || kiln_match_get(m, "paged", 0)))
        return "head dims over 256: a multiple of 128 (two column blocks of V of 64s), not paged";
    if (pt[P_PERSIST] && !pt[P_WG])
        return "a persistent grid is for wgmma blocks (their producer loads the next item ahead)";
    if (pt[P_MINB] > 1 && !pt[P_WG])
        return "MINB 2 is for wgmma blocks (their producer's registers go to the consumers)";
    /* measured with nvcc 13: a paged cache's producer in a persistent grid spills 4 bytes (its
     * last page's cp.async tail) at 72 and at 80 registers, except with 128-key tiles */
    if (pt[P_PERSIST] && kiln_match_get(m, "paged", 0) && pt[P_BN] != 128 &&
        (pt[P_BM] > 64 || pt[P_MINB] > 1))
        return "a paged cache's producer in a persistent grid spills except with 128-key tiles";
    if (pt[P_PP] && !(pt[P_WG] && pt[P_BM] > 64))
        return "ping-pong takes several consumer warpgroups: wgmma with BLOCK_M 128 or 192";
    if (pt[P_BM] > 128 && !pt[P_WG])
        return "BLOCK_M 192 is three consumer warpgroups: wgmma";
    if ((pt[P_BN] & (pt[P_BN] - 1)) && !pt[P_WG])
        return "mma.sync takes tiles of 32, 64 or 128 keys (wgmma: any multiple of 16)";
    if (pt[P_BM] != 16 * pt[P_WARPS])
        return "each warp owns 16 query rows: BLOCK_M = 16 * WARPS";
    const char *smem = smem_over(pt, smem_bytes(m, pt));
    if (smem)
        return smem;
    /* wgmma with setmaxnreg: the consumers' share (232 each for two warpgroups, one block) */
    if (regs_estimate(m, pt) > regs_allowed(m, pt))
        return "the output and score accumulators exceed the registers of a thread";
    int launch, producer, consumer;
    regs_of(m, pt, &launch, &producer, &consumer);
    /* ptxas places a wgmma's accumulators (d/2 for P·V) and operands within the launch budget,
     * whatever setmaxnreg gives later (measured: head dim 256 needs 158 of them) */
    if (pt[P_WG] && launch < dk_of(m, pt) / dsplit_of(m, pt) / 2 + 32)
        return "the registers MINB blocks leave a thread do not hold a wgmma's accumulators";
    const int64_t ratio = (int64_t)(kiln_match_get(m, "hq", 1) / kiln_match_get(m, "hkv", 1));
    if (pt[P_PACK] && ratio == 1)
        return "PACK needs several q heads per kv head";
    const int64_t rows = (int64_t)kiln_match_get(m, "sq", 1) * (pt[P_PACK] ? ratio : 1);
    if (pt[P_BM] > 64 && rows <= 64)
        return "BLOCK_M beyond the queries";
    const int64_t skv = (int64_t)kiln_match_get(m, "skv", 1);
    if (pt[P_STAGES] > 2 && skv <= pt[P_BN] * 2)
        return "more stages than key tiles";
    return NULL;
}

/* The rule of thumb. Head dims that are multiples of 64 take wgmma (FlashAttention-3's plan):
 * two consumer warpgroups (128 query rows) when there are more rows than 64 (at head dim 64 over
 * at most 2048 keys, two blocks of one an SM instead; decode: two blocks an SM, 32-key tiles, two
 * stages), tiles of 128 keys (64
 * at head dim 256, whose accumulators take 128 registers a thread, or with a mask tensor), the q
 * heads of a kv head packed into a block (GQA: each K and V tile read once for the group), three
 * stages where shared memory holds them (measured on the H200, bench/RESULTS.md: packed heads
 * 2-10 % faster, 128-key tiles and three stages 5-15 % on decode and head dim 64); other head dims
 * too, padded (dk_of), over more than one key tile. The rest take mma.sync (FlashAttention-2's
 * rule: 128 x 64 with 8 warps; at head dim 256 that is 198 KiB of
 * shared memory, one block an SM, still 8 warps where 64 x 64 would leave 4; 64 rows with 4 warps
 * when there are no more rows than that; packed heads only for fewer than 64 queries). */
static int att_start(const kiln_problem *p, const kiln_match *m, int64_t *pt) {
    const int64_t sq = (int64_t)kiln_match_get(m, "sq", 1);
    const int64_t d = (int64_t)kiln_match_get(m, "d", 64),
                  skv = (int64_t)kiln_match_get(m, "skv", 1);
    for (int i = 0; i < P_COUNT; i++)
        pt[i] = kiln_family_attention.params[i].values[0];
    if (kiln_match_get(m, "f32", 0))
        return 0;
    const int64_t ratio = (int64_t)(kiln_match_get(m, "hq", 1) / kiln_match_get(m, "hkv", 1));
    /* other head dims padded to wgmma's 64 too, but over one key tile (measured on an H100, the
     * 46th session: Stable Diffusion 1.5's [2, 8, 4096, 40] 203.5 us on wgmma, its best mma.sync
     * point 244.5; Phi-2's causal [4, 32, 2048, 80] 295.2 against 440.4; its cross-attention over
     * 77 keys 14.9 on mma.sync, 20.3 on wgmma); the rules below read the padded dim */
    pt[P_WG] = d % 64 == 0 || (d <= 256 && skv > 128);
    const int64_t dk = dk_of(m, pt);
    /* the q heads of a kv head share a block and read its K and V once */
    pt[P_PACK] = ratio > 1 && (pt[P_WG] || sq < 64);
    const int big = sq * (pt[P_PACK] ? ratio : 1) > 64;
    pt[P_BM] = big ? 128 : 64;
    pt[P_WARPS] = big ? 8 : 4;
    pt[P_BN] = 64;
    pt[P_STAGES] = 2;
    /* mma.sync over at most 128 keys: one tile of them (SD 1.5's cross-attention over 77 text
     * tokens, H100, the 46th session: 14.9 us at 128 x 128 against 17.7 at 128 x 64) */
    if (!pt[P_WG] && skv <= 128) {
        pt[P_BN] = 128;
        if (att_check(p, m, pt))
            pt[P_BN] = 64;
    }
    if (!pt[P_WG])
        return 0;
    pt[P_BN] = dk <= 128 && !reads_mask(m) ? 128 : dk <= 256 ? 64 : 32;
    pt[P_STAGES] = 3;
    /* head dim 64 over short key sequences: two blocks of 64 rows an SM, one's start and end under
     * the other's loop (measured on [16, 16, 1024, 64]: 202 against 224 us for 128 rows) */
    const int paged = (int)kiln_match_get(m, "paged", 0);
    const int banded = kiln_match_get(m, "band", 0) || kiln_match_get(m, "mask", 0) == 2 || paged;
    if (dk <= 64 && skv <= 2048 && !paged)
        pt[P_BM] = 64, pt[P_WARPS] = 4, pt[P_MINB] = 2;
    /* decode (a kv head's queries in one block of 64 rows): two blocks an SM of 32-key tiles in
     * two stages (measured on 64 x 4096, 32/8 heads, 128: 259.7 against 273.2 us, 4.14 TB/s) */
    const int decode = !big && pt[P_PACK] && !paged;
    if (decode)
        pt[P_MINB] = 2, pt[P_BN] = 32, pt[P_STAGES] = 2;
    /* three consumer warpgroups (measured on an H100, the 43rd session, every wgmma point of each
     * row): head dim 64 unmasked, 192 x 128 tiles (FlashAttention-3's rows) in a persistent grid,
     * [16, 16, 1024, 64] 193.7 us against 205.4 at two blocks of 64 rows; head dim 128 under a
     * causal band, 192 x 80 (the registers leave 80 keys), [4, 32/8, 4096, 128] 959.9 against
     * 974.7 (955.0 against 980.0 in another call) at 128 x 128; not over 2048 keys: Phi-2's causal
     * [4, 32, 2048, 80], padded to 128, 311.2 against 295.2 at 128 x 128, 46th session; SD 1.5's
     * [2, 8, 4096, 40] padded to 64 took 167.8 us persistent at 192 x 128 against 203.5 at 128 x
     * 128 */
    int64_t keep[P_COUNT];
    memcpy(keep, pt, sizeof keep);
    if (big && !paged && !reads_mask(m) &&
        ((dk == 64 && !banded) || (dk == 128 && banded && skv >= 4096))) {
        pt[P_BM] = 192, pt[P_WARPS] = 12, pt[P_MINB] = 1, pt[P_BN] = dk == 64 ? 128 : 80;
        if (att_check(p, m, pt))
            memcpy(pt, keep, sizeof keep);
    }
    /* a persistent grid where the rows' work is even (no band, not decode): the next row tile's Q
     * and first K/V tiles come while this one ends (measured: [16, 16, 1024, 64] as above, BERT's
     * padded [32, 12, 512, 64] 214.7 against 222.4 us; under a causal band the static split of
     * rows lost, twentieth session) */
    if (!banded && !decode)
        pt[P_PERSIST] = 1;
    /* a paged prefill too (measured on the H200, 8 x 2048 tokens, 32/8 heads, 128, pages of 16:
     * 727.6 us persistent in two stages against 788.4 for one block a row tile in three; bench/
     * RESULTS.md, 44th session) */
    if (paged && big && !kiln_match_get(m, "decode", 0))
        pt[P_PERSIST] = 1;
    while (att_check(p, m, pt) && pt[P_STAGES] > 2)
        pt[P_STAGES]--;
    while (att_check(p, m, pt) && pt[P_BN] > 64)
        pt[P_BN] = 64;
    if (att_check(p, m, pt) && pt[P_MINB] > 1) /* the tiles of two blocks do not fit */
        pt[P_MINB] = 1;
    if (att_check(p, m, pt) && pt[P_PERSIST])
        pt[P_PERSIST] = 0;
    /* a persistent grid takes two Q buffers over a third stage where both do not fit (the same
     * rows: paged 727.6 us against 747.7 in three stages with one Q buffer; [4, 32/8, 4096, 128]
     * causal at 128 x 128, H100, 930.5 against 964.3) */
    if (pt[P_PERSIST] && qbuf_of(m, pt) == 1 && pt[P_STAGES] > 2) {
        pt[P_STAGES]--;
        if (qbuf_of(m, pt) == 1 || att_check(p, m, pt))
            pt[P_STAGES]++;
    }
    return 0;
}

/* ---- emission ---- */

/* "(size == 1 ? 0 : stride)" of logical dim l of operand o: the stride of its stored dim, 0 for a
 * broadcast one; "0" when the tensor has no such dim. */
static void stride_expr(const kiln_problem *p, const kiln_tensor_spec *t, int pos, char *out,
                        size_t n) {
    if (pos < 0) {
        snprintf(out, n, "0");
        return;
    }
    char size[96], buf[512] = "1";
    kiln_tensor_dim_expr(p, t, pos, size, sizeof size);
    size_t off = 1;
    for (int j = pos + 1; j < t->ndim; j++) {
        char e[96];
        kiln_tensor_dim_expr(p, t, j, e, sizeof e);
        off += (size_t)snprintf(buf + off, off < sizeof buf ? sizeof buf - off : 0,
                                "*(int64_t)(%s)", e);
    }
    kiln_family_fmt(out, n, "((int64_t)(%s) == 1 ? (int64_t)0 : (int64_t)%s)", size, buf);
}

static void size_expr(const kiln_problem *p, const att_operand *o, int l, char *out, size_t n) {
    if (o->pos[l] < 0)
        snprintf(out, n, "1");
    else
        kiln_tensor_dim_expr(p, &p->inputs[o->input], o->pos[l], out, n);
}

/* The entry point's body: att_args filled from the problem's tensors and axes. */
static void emit_args(kiln_strbuf *b, const kiln_problem *p, const att_info *a) {
    const char *names[ATT_ROLES] = {"q", "k", "v", "m"};
    char e[4][600];
    kiln_strbuf_printf(b, "    att_args a;\n");
    for (int r = 0; r < ATT_ROLES; r++) {
        if (a->t[r].input < 0) {
            kiln_strbuf_printf(b, "    a.mask = 0; a.mb = a.mh = a.ms = a.mk = 0;\n");
            continue;
        }
        const kiln_tensor_spec *t = &p->inputs[a->t[r].input];
        kiln_strbuf_printf(b, "    a.%s = %s;\n", r == ATT_MASK ? "mask" : names[r], t->name);
        for (int l = 0; l < 3; l++)
            stride_expr(p, t, a->t[r].pos[l], e[l], sizeof e[l]);
        kiln_strbuf_printf(b, "    a.%sb = %s;\n    a.%sh = %s;\n    a.%ss = %s;\n", names[r], e[0],
                           names[r], e[1], names[r], e[2]);
        if (r == ATT_MASK) { /* the key dim's stride: 1 unless the mask is stored keys first */
            stride_expr(p, t, a->t[r].pos[3], e[3], sizeof e[3]);
            kiln_strbuf_printf(b, "    a.mk = %s;\n", e[3]);
        }
    }
    const kiln_tensor_spec *o = &p->outputs[0];
    for (int l = 0; l < 3; l++)
        stride_expr(p, o, a->out.pos[l], e[l], sizeof e[l]);
    kiln_strbuf_printf(b, "    a.o = %s;\n    a.ob = %s;\n    a.oh = %s;\n    a.os = %s;\n",
                       o->name, e[0], e[1], e[2]);
    size_expr(p, &a->t[ATT_Q], 0, e[0], sizeof e[0]);
    size_expr(p, &a->t[ATT_Q], 1, e[1], sizeof e[1]);
    size_expr(p, &a->t[ATT_K], 1, e[2], sizeof e[2]);
    kiln_strbuf_printf(b, "    a.b = %s;\n    a.hq = %s;\n    a.hkv = %s;\n", e[0], e[1], e[2]);
    size_expr(p, &a->t[ATT_Q], 2, e[0], sizeof e[0]);
    size_expr(p, &a->t[ATT_K], 2, e[1], sizeof e[1]);
    kiln_strbuf_printf(b, "    a.sq = %s;\n    a.skv = %s;\n    a.scale = (float)%.17g;\n", e[0],
                       e[1], a->scale);
}

/* The paged entry point's body: att_args from the caches, the page table and the axes. */
static void emit_paged_args(kiln_strbuf *b, const kiln_problem *p, const att_info *a) {
    const att_paged *pg = &a->paged;
    const kiln_tensor_spec *q = &p->inputs[a->t[ATT_Q].input], *k = &p->inputs[a->t[ATT_K].input];
    char hq[96], hkv[96], d[96], tok[96], ps[96], seqs[96];
    kiln_tensor_dim_expr(p, q, 0, tok, sizeof tok);
    kiln_tensor_dim_expr(p, q, 1, hq, sizeof hq);
    kiln_tensor_dim_expr(p, q, 2, d, sizeof d);
    kiln_tensor_dim_expr(p, k, 1, ps, sizeof ps);
    kiln_tensor_dim_expr(p, k, 2, hkv, sizeof hkv);
    kiln_tensor_dim_expr(p, &p->inputs[pg->input[1]], 0, seqs, sizeof seqs);
    static const char *const fields[4] = {"qo_indptr", "kv_indptr", "kv_indices", "last_len"};
    kiln_strbuf_printf(b, "    att_args a = {0};\n");
    kiln_strbuf_printf(b, "    a.q = %s;\n    a.k = %s;\n    a.v = %s;\n    a.o = %s;\n", q->name,
                       k->name, p->inputs[a->t[ATT_V].input].name, p->outputs[pg->out].name);
    for (int r = 0; r < 4; r++)
        if (pg->input[r] >= 0)
            kiln_strbuf_printf(b, "    a.%s = %s;\n", fields[r], p->inputs[pg->input[r]].name);
    if (pg->lse >= 0)
        kiln_strbuf_printf(b, "    a.lse = %s;\n", p->outputs[pg->lse].name);
    kiln_strbuf_printf(b,
                       "    a.b = (int64_t)(%s) - 1;\n    a.hq = %s;\n    a.hkv = %s;\n"
                       "    a.sq = %s;\n    a.page_size = %s;\n",
                       seqs, hq, hkv, tok, ps);
    kiln_strbuf_printf(b,
                       "    a.qs = a.os = (int64_t)(%s) * (int64_t)(%s);\n    a.qh = a.oh = a.kh = "
                       "a.vh = %s;\n    a.ks = a.vs = (int64_t)(%s) * (int64_t)(%s);\n",
                       hq, d, d, hkv, d);
    if (pg->sm_scale >= 0)
        kiln_strbuf_printf(b, "    a.scale = (float)%s;\n", p->inputs[pg->sm_scale].name);
    else
        kiln_strbuf_printf(b, "    a.scale = (float)%.17g;\n", a->scale);
}

/* The facts every emission shares: types, head dim (d, padded to dk: dk_of), mask, band,
 * roundings. */
static void emit_facts(kiln_strbuf *b, const att_info *a, int64_t d, int64_t dk, int cuda) {
    kiln_kernel_type t = kiln_dtype_kernel_type(a->dtype, cuda),
                     tm = kiln_dtype_kernel_type(a->mask_dtype, cuda);
    if (cuda)
        kiln_strbuf_printf(b,
                           "#define ATT_T %s\n#define ATT_TM %s\n#define ATT_F32 %d\n"
                           "#define ATT_MASK_INV %d\n%s",
                           t.type, tm.type, a->dtype == KILN_F32, a->mask_inverted,
                           a->dtype == KILN_F16 ? "#define ATT_FP16 1\n" : "");
    else if (a->mask_dtype == KILN_BOOL) /* SDPA's boolean mask: True takes part (masked_fill's:
                                          * True is masked) */
        kiln_strbuf_printf(b,
                           "#define ATT_T %s\n#define ATT_L(v) %s(v)\n#define ATT_S(f) %s(f)\n"
                           "#define ATT_TM bool\n#define ATT_LM(v) ((v) %s ? 0.0f : -INFINITY)\n",
                           t.type, t.to_float, t.from_float, a->mask_inverted ? "== 0" : "!= 0");
    else
        kiln_strbuf_printf(b,
                           "#define ATT_T %s\n#define ATT_L(v) %s(v)\n#define ATT_S(f) %s(f)\n"
                           "#define ATT_TM %s\n#define ATT_LM(v) %s(v)\n",
                           t.type, t.to_float, t.from_float, tm.type, tm.to_float);
    const int narrow = a->dtype != KILN_F32;
    kiln_strbuf_printf(b, "#define ATT_MASK_KS %d\n",
                       a->mask == ATT_MASK_TENSOR && a->mask_strided);
    /* an exact band (0 inside, masked outside) is generated by the 16-bit CUDA kernels: its upper
     * bound as is_causal's diagonal, its lower one by ATT_LO_GEN; the cpu kernel reads the mask */
    const int gen = cuda && narrow && a->band_exact;
    kiln_strbuf_printf(b,
                       "#define ATT_D %lld\n#define ATT_DR %lld\n#define ATT_HAS_MASK %d\n"
                       "#define ATT_CAUSAL_GEN %d\n"
                       "#define ATT_LO_GEN %d\n#define ATT_BAND %d\n#define ATT_HAS_LO %d\n"
                       "#define ATT_LO (%lld)\n#define ATT_HI (%lld)\n#define ATT_ROUND_QK %d\n"
                       "#define ATT_ROUND_SCALED %d\n#define ATT_ROUND_MASKED %d\n#define "
                       "ATT_ROUND_P %d\n",
                       (long long)dk, (long long)d, a->mask == ATT_MASK_TENSOR && !gen,
                       a->mask == ATT_MASK_CAUSAL || gen, gen && a->has_lo, a->band, a->has_lo,
                       (long long)a->lo, (long long)a->hi, narrow && a->round_qk,
                       narrow && a->round_scaled, narrow && a->round_masked, narrow);
    const att_paged *pg = &a->paged;
    /* the scale folded into the exponent: no mask tensor or rounding between the scores and the
     * softmax, and a scale known to be positive (max(x)·scale = max(x·scale)) */
    kiln_strbuf_printf(
        b, "#define ATT_TANH %d\n#define ATT_PRE ((float)%.17g)\n#define ATT_POST ((float)%.17g)\n",
        a->tanh, a->pre, a->post);
    const int fold = narrow && !a->tanh && (a->mask != ATT_MASK_TENSOR || gen) && !a->round_qk &&
                     !a->round_scaled && !a->round_masked && !(pg->on && pg->sm_scale >= 0) &&
                     a->scale > 0;
    kiln_strbuf_printf(b, "#define ATT_FOLD %d\n", fold);
    kiln_strbuf_printf(
        b,
        "#define ATT_PAGED %d\n#define ATT_PAGED_DECODE %d\n#define ATT_PAGED_CAUSAL "
        "%d\n#define ATT_PAGED_LAST %d\n#define ATT_LSE %d\n",
        pg->on, pg->decode, pg->causal, pg->input[3] >= 0, pg->on && pg->lse >= 0);
}

/* The TMA tensor map of K or V (role), for wgmma's producer: the tensor's stored dims reversed
 * (innermost, the head dim, first), boxes of 64 head-dim elements by BLOCK_N keys in the 128-byte
 * swizzle; and where the kernel puts its coordinates (ATT_<K|V>_DIM_S/H/B: the map dim of the
 * keys, the kv head and the batch, -1 when absent; ATT_<K|V>_RANK). */
static void emit_kv_tmap(kiln_strbuf *b, const kiln_problem *p, const att_operand *o,
                         const char *role, int64_t bn) {
    const kiln_tensor_spec *t = &p->inputs[o->input];
    const int n = t->ndim;
    char dims[512] = "", strides[512] = "", box[128] = "", prod[400] = "";
    for (int j = n - 1; j >= 0; j--) {
        char e[96];
        kiln_tensor_dim_expr(p, t, j, e, sizeof e);
        kiln_family_fmt(dims + strlen(dims), sizeof dims - strlen(dims), "%s%s",
                        j == n - 1 ? "" : ",", e);
        kiln_family_fmt(box + strlen(box), sizeof box - strlen(box), "%s%lld",
                        j == n - 1 ? "" : ",",
                        j == o->pos[3]   ? 64LL
                        : j == o->pos[2] ? (long long)bn
                                         : 1LL);
        if (j < n - 1)
            kiln_family_fmt(strides + strlen(strides), sizeof strides - strlen(strides), "%s%s",
                            j == n - 2 ? "" : ",", prod);
        /* the stride of dim j - 1: the product of dims j .. n - 1 */
        char next[400];
        kiln_family_fmt(next, sizeof next, "%s%s(%s)", prod, prod[0] ? "*" : "", e);
        snprintf(prod, sizeof prod, "%s", next);
    }
    kiln_strbuf_printf(b, "// kiln: tensormap %s dims=(%s) strides=(%s) box=(%s) swizzle=128\n",
                       t->name, dims, strides, box);
    kiln_strbuf_printf(b,
                       "#define ATT_%s_RANK %d\n#define ATT_%s_DIM_S %d\n#define ATT_%s_DIM_H "
                       "%d\n#define ATT_%s_DIM_B %d\n",
                       role, n, role, n - 1 - o->pos[2], role,
                       o->pos[1] >= 0 ? n - 1 - o->pos[1] : -1, role,
                       o->pos[0] >= 0 ? n - 1 - o->pos[0] : -1);
}

/* The TMA tensor map of a paged cache (role K or V), [pages, page_size, hkv, d] stored as
 * FlashInfer lays it out: dims (d, hkv, page_size, pages), boxes of 64 head-dim elements by `rows`
 * rows of a page (a whole page, or the tile's part of one when pages are longer than tiles). */
static void emit_paged_tmap(kiln_strbuf *b, const kiln_problem *p, int input, int64_t rows) {
    const kiln_tensor_spec *t = &p->inputs[input];
    char e[4][96];
    for (int j = 0; j < 4; j++)
        kiln_tensor_dim_expr(p, t, j, e[j], sizeof e[j]);
    kiln_strbuf_printf(
        b,
        "// kiln: tensormap %s dims=(%s,%s,%s,%s) strides=((%s),(%s)*(%s),(%s)*(%s)*(%s)) "
        "box=(64,1,%lld,1) swizzle=128\n",
        t->name, e[3], e[2], e[1], e[0], e[3], e[3], e[2], e[3], e[2], e[1], (long long)rows);
}

/* Whether the wgmma producer copies K and V with the TMA unit: dense tensors that capture did not
 * store broadcast (its maps would address elements that are not stored), and paged caches whose
 * pages hold whole 1024-byte swizzle atoms (page_size a multiple of 8) and tile with BLOCK_N. The
 * rest is copied by cp.async. */
static int uses_tma(const kiln_problem *p, const att_info *a, const int64_t *pt) {
    if (!pt[P_WG])
        return 0;
    if (a->paged.on) {
        const int64_t ps = a->paged.page_size;
        return ps > 0 && ps % 8 == 0 && (pt[P_BN] % ps == 0 || ps % pt[P_BN] == 0);
    }
    return !p->inputs[a->t[ATT_K].input].layout.expanded &&
           !p->inputs[a->t[ATT_V].input].layout.expanded;
}

static char *att_emit(const kiln_problem *p, const kiln_match *m, const int64_t *pt, int cuda) {
    att_info a;
    char why[256];
    int ok = kiln_attention_analyse(p, &a, why, sizeof why);
    KILN_ASSERT(ok); /* match accepted p */
    const int64_t d = (int64_t)kiln_match_get(m, "d", 64), dsplit = cuda ? dsplit_of(m, pt) : 1,
                  dk = cuda ? dk_of(m, pt) : d;
    kiln_strbuf b = {0};
    char q_s[96], hq[96], bt[200], hkv[96]; /* bt: room for "(batch)*dsplit" */
    size_expr(p, &a.t[ATT_Q], 2, q_s, sizeof q_s);
    size_expr(p, &a.t[ATT_Q], 1, hq, sizeof hq);
    size_expr(p, &a.t[ATT_K], 1, hkv, sizeof hkv);
    size_expr(p, &a.t[ATT_Q], 0, bt, sizeof bt);
    /* paged decode: a block column per sequence, its one query; prefill: grid.x counts every
     * sequence's row tiles (at most ceil(tokens / BLOCK_M) + sequences of them), grid.z is 1 */
    char paged_x[96] = "";
    if (a.paged.on) {
        char seqs[80];
        kiln_tensor_dim_expr(p, &p->inputs[a.paged.input[1]], 0, seqs, sizeof seqs);
        snprintf(bt, sizeof bt, "(%s)-1", seqs);
        if (a.paged.decode)
            snprintf(q_s, sizeof q_s, "1");
        else {
            snprintf(paged_x, sizeof paged_x, "+(%s)-1", seqs);
            snprintf(bt, sizeof bt, "1");
        }
    }
    if (!cuda) {
        kiln_strbuf_printf(&b, "// cpu: the GPU parameters do not apply\n");
        emit_facts(&b, &a, d, d, 0);
        kiln_strbuf_printf(&b, "%s", kiln_family_template("attention_cpu.c"));
        char *proto = kiln_family_prototype(p, 0, 0, NULL, "attention_kernel");
        kiln_strbuf_printf(&b, "\n// kiln: launch attention_kernel\n%s {\n", proto);
        free(proto);
        if (a.paged.on) {
            emit_paged_args(&b, p, &a);
            kiln_strbuf_printf(&b, "    att_cpu_paged(&a);\n}\n");
        } else {
            emit_args(&b, p, &a);
            kiln_strbuf_printf(&b, "    att_cpu(&a);\n}\n");
        }
        kiln_family bare = kiln_family_attention;
        bare.n_params = 0;
        return kiln_family_source(&bare, m, pt, b.s);
    }
    char *defs = kiln_family_defines(&kiln_family_attention, pt);
    kiln_strbuf_printf(&b, "%s", defs);
    free(defs);
    emit_facts(&b, &a, d, dk, 1);
    /* grid z: the batch times the blocks a row tile's columns are split over (dsplit_of) */
    kiln_strbuf_printf(&b, "#define ATT_DSPLIT %lld\n", (long long)dsplit);
    if (dsplit > 1) {
        char z[sizeof bt];
        kiln_family_fmt(z, sizeof z, "(%s)*%lld", bt, (long long)dsplit);
        memcpy(bt, z, sizeof bt);
    }
    char bounds[32];
    if (a.dtype == KILN_F32) {
        /* one warp per query row, 4 rows per block */
        kiln_strbuf_printf(&b,
                           "// kiln: launch attention_kernel grid=(ceil_div(%s,4),%s,%s) "
                           "block=128\n",
                           q_s, hq, bt);
        snprintf(bounds, sizeof bounds, "128");
    } else {
        /* x: the row tiles (of the packed heads' rows with PACK), y: the q (PACK: kv) heads, z:
         * the batch; a persistent grid is one block an SM (MINB) over those items */
        char gx[400];
        if (pt[P_PACK])
            kiln_family_fmt(gx, sizeof gx, "ceil_div((%s)*((%s)/(%s)),%lld)%s", q_s, hq, hkv,
                            (long long)pt[P_BM], paged_x);
        else
            kiln_family_fmt(gx, sizeof gx, "ceil_div(%s,%lld)%s", q_s, (long long)pt[P_BM],
                            paged_x);
        const char *gy = pt[P_PACK] ? hkv : hq;
        if (pt[P_PERSIST])
            kiln_strbuf_printf(&b,
                               "// kiln: launch attention_kernel grid=min(%lld,(%s)*(%s)*(%s)) "
                               "block=%lld smem=%lld\n",
                               (long long)(KILN_FAMILY_SMS * pt[P_MINB]), gx, gy, bt,
                               (long long)threads_of(pt), (long long)smem_bytes(m, pt));
        else
            kiln_strbuf_printf(&b,
                               "// kiln: launch attention_kernel grid=(%s,%s,%s) block=%lld "
                               "smem=%lld\n",
                               gx, gy, bt, (long long)threads_of(pt), (long long)smem_bytes(m, pt));
        snprintf(bounds, sizeof bounds, "%lld, %lld", (long long)pt[P_WARPS] * 32,
                 (long long)pt[P_MINB]);
    }
    /* wgmma's producer copies K and V with the TMA unit (one thread) where it can (uses_tma) */
    const int tma = uses_tma(p, &a, pt);
    kiln_strbuf_printf(&b, "#define ATT_TMA %d\n", tma);
    if (tma && a.paged.on) {
        const int64_t rows = a.paged.page_size < pt[P_BN] ? a.paged.page_size : pt[P_BN];
        emit_paged_tmap(&b, p, a.t[ATT_K].input, rows);
        emit_paged_tmap(&b, p, a.t[ATT_V].input, rows);
        kiln_strbuf_printf(&b, "#define ATT_TMA_ROWS %lld\n", (long long)rows);
    } else if (tma) {
        emit_kv_tmap(&b, p, &a.t[ATT_K], "K", pt[P_BN]);
        emit_kv_tmap(&b, p, &a.t[ATT_V], "V", pt[P_BN]);
    }
    if (tma)
        kiln_strbuf_printf(&b, "%s", KILN_FAMILY_TMAP_TYPE);
    if (pt[P_WG]) {
        /* MINB blocks an SM (the start rule: one, so ptxas may use every register for the
         * accumulators of two MMAs); the producer's registers go to the consumers (regs_of) */
        int launch, producer, consumer;
        regs_of(m, pt, &launch, &producer, &consumer);
        snprintf(bounds, sizeof bounds, "%lld, %lld", (long long)threads_of(pt),
                 (long long)pt[P_MINB]);
        kiln_strbuf_printf(&b, "#define ATT_REG_PRODUCER %d\n#define ATT_REG_CONSUMER %d\n",
                           producer, consumer);
        /* S = Q·Kᵀ (m64 x BLOCK_N, K-major operands) and O += P·V (m64 x d, P in registers, V
         * MN-major; the block's d / dsplit columns) */
        kiln_strbuf_printf(&b, "%s", kiln_family_template("mbarrier.cuh"));
        kiln_family_emit_wgmma(&b, "att_wg_qk", pt[P_BN], a.dtype, 0, 0);
        kiln_family_emit_wgmma(&b, "att_wg_pv", dk / dsplit, a.dtype, 1, 1);
    }
    /* a second, test-free softmax for the tiles inside the band and the keys (att_edge) */
    kiln_strbuf_printf(&b, "#define ATT_SPLIT %d\n", split_softmax(m, pt));
    kiln_strbuf_printf(&b, "#define ATT_QBUF %lld\n", (long long)qbuf_of(m, pt));
    kiln_strbuf_printf(&b, "%s", kiln_family_template("attention.cu"));
    static const char *const maps[] = {"att_tmap_k", "att_tmap_v"};
    char *proto = tma ? kiln_family_prototype_tmaps(p, bounds, "attention_kernel", 2, maps)
                      : kiln_family_prototype(p, 0, 1, bounds, "attention_kernel");
    kiln_strbuf_printf(&b, "\n%s {\n", proto);
    free(proto);
    if (a.paged.on)
        emit_paged_args(&b, p, &a);
    else
        emit_args(&b, p, &a);
    if (tma)
        kiln_strbuf_printf(&b, "    a.tk = &att_tmap_k;\n    a.tv = &att_tmap_v;\n");
    kiln_strbuf_printf(&b, "    att_fwd(a);\n}\n");
    return kiln_family_source(&kiln_family_attention, m, pt, b.s);
}

/* ---- speed of light ---- */

/* Key positions the band keeps over all query rows (sq * skv without a band). */
static double kept_pairs(const kiln_match *m, int64_t sq, int64_t skv) {
    if (!kiln_match_get(m, "band", 0))
        return (double)sq * (double)skv;
    const int has_lo = (int)kiln_match_get(m, "has_lo", 0);
    const int64_t lo = (int64_t)kiln_match_get(m, "lo", 0),
                  hi = (int64_t)kiln_match_get(m, "hi", 0);
    double n = 0;
    for (int64_t i = 0; i < sq; i++) {
        int64_t j0 = has_lo && i + lo > 0 ? i + lo : 0, j1 = i + hi < skv - 1 ? i + hi : skv - 1;
        n += j1 >= j0 ? (double)(j1 - j0 + 1) : 0;
    }
    return n;
}

/* 4·b·hq·d per kept (query, key) pair: two matmuls of 2 flops per multiply-add. */
static double att_flops(const kiln_problem *p, const kiln_match *m, const kiln_workload *w) {
    int64_t q[KILN_MAX_DIMS], k[KILN_MAX_DIMS];
    att_info a;
    char why[256];
    if (!kiln_attention_analyse(p, &a, why, sizeof why))
        return 0;
    if (a.paged.on) {
        /* unknown (0) where the workload draws its page table */
        double pairs, keys;
        if (!kiln_attention_paged_work(p, &a, w, &pairs, &keys))
            return 0;
        return 4.0 * kiln_match_get(m, "hq", 1) * kiln_match_get(m, "d", 1) * pairs;
    }
    for (int l = 0; l < 4; l++) {
        q[l] = kiln_attention_dim(p, &a.t[ATT_Q], l, w);
        k[l] = kiln_attention_dim(p, &a.t[ATT_K], l, w);
    }
    return 4.0 * (double)q[0] * (double)q[1] * (double)q[3] * kept_pairs(m, q[2], k[2]);
}

/* q, k, v and the mask read once, the output written once. Paged: the K and V rows of the
 * sequences' keys, not the whole pool of pages (a serving cache is mostly other requests' pages).
 */
static double att_min_bytes(const kiln_problem *p, const kiln_match *m, const kiln_workload *w) {
    att_info a;
    char why[256];
    double pairs, keys;
    if (!kiln_attention_analyse(p, &a, why, sizeof why) || !a.paged.on ||
        !kiln_attention_paged_work(p, &a, w, &pairs, &keys))
        return kiln_problem_min_bytes(p, w);
    double bytes = 2.0 * keys * kiln_match_get(m, "hkv", 1) * kiln_match_get(m, "d", 1) *
                   (double)kiln_dtype_size(a.dtype);
    for (int i = 0; i < p->n_inputs; i++)
        if (i != a.t[ATT_K].input && i != a.t[ATT_V].input && !p->inputs[i].is_scalar) {
            int64_t shape[KILN_MAX_DIMS];
            bytes += (double)kiln_tensor_shape(p, &p->inputs[i], w, shape) *
                     (double)kiln_dtype_size(p->inputs[i].dtype);
        }
    for (int o = 0; o < p->n_outputs; o++) {
        int64_t shape[KILN_MAX_DIMS];
        bytes += (double)kiln_tensor_shape(p, &p->outputs[o], w, shape) *
                 (double)kiln_dtype_size(p->outputs[o].dtype);
    }
    return bytes;
}

/* fp32 accumulation throughout; the probabilities are rounded to the input dtype before the second
 * matmul, where eager rounds them too. */
static kiln_tolerance att_tolerance(kiln_dtype t) {
    return kiln_tolerance_default(t);
}

/* A kernel built for a band mask skips the key tiles outside the band: it is exact only where the
 * mask masks everything outside it (and keeps a key in every row), which the install path checks
 * on the live mask. A 16-bit CUDA kernel built for an exact band (band_exact) reads no mask: it
 * assumes the mask is exactly the band, 0 everywhere inside it ("inside": 0). */
static cJSON *att_assumes(const kiln_problem *p, const kiln_match *m, int cuda) {
    const int mi = m->input_of_role[ATT_MASK];
    if (kiln_match_get(m, "paged", 0) || kiln_match_get(m, "mask", 0) != 1 ||
        !kiln_match_get(m, "band", 0) || mi < 0)
        return NULL;
    cJSON *out = cJSON_CreateObject();
    cJSON *s =
        cJSON_AddObjectToObject(cJSON_AddObjectToObject(out, p->inputs[mi].name), "structure");
    cJSON_AddStringToObject(s, "kind", "band");
    if (kiln_match_get(m, "has_lo", 0))
        cJSON_AddNumberToObject(s, "lower", kiln_match_get(m, "lo", 0));
    else
        cJSON_AddNullToObject(s, "lower");
    cJSON_AddNumberToObject(s, "upper", kiln_match_get(m, "hi", 0));
    if (cuda && kiln_match_get(m, "band_exact", 0) && !kiln_match_get(m, "f32", 0))
        cJSON_AddNumberToObject(s, "inside", 0);
    return out;
}

const kiln_family kiln_family_attention = {
    .name = "attention",
    .summary =
        "flash-attention forward: softmax(q·kᵀ·scale + mask)·v, GQA, causal/sliding/additive "
        "masks, paged KV caches (FlashInfer's form), no score matrix in memory",
    .n_params = P_COUNT,
    .params =
        {
            [P_BM] = {"ATT_BLOCK_M", 3, {64, 128, 192}, "query rows per block (16 per warp)"},
            [P_BN] = {"ATT_BLOCK_N",
                      7,
                      {64, 32, 128, 96, 192, 80, 160},
                      "keys per tile of the inner loop (mma.sync: 32, 64 or 128)"},
            [P_WARPS] = {"ATT_WARPS", 3, {4, 8, 12}, "warps per block"},
            [P_STAGES] = {"ATT_STAGES", 2, {2, 3}, "K/V tiles in flight (cp.async buffers)"},
            [P_PACK] =
                {"ATT_PACK",
                 2,
                 {0, 1},
                 "1: the q heads of a kv head share the block's rows (GQA with few queries)"},
            [P_WG] =
                {"ATT_WG",
                 2,
                 {0, 1},
                 "1: warpgroup MMAs (wgmma, sm_90a) from swizzled shared memory, the softmax of "
                 "one tile under the MMAs of the last; 0: mma.sync"},
            [P_MINB] = {"ATT_MINB",
                        2,
                        {1, 2},
                        "blocks an SM the registers are split for (__launch_bounds__): 2 lets one "
                        "block's start and end run under another's loop (short key sequences)"},
            [P_PERSIST] = {"ATT_PERSIST",
                           2,
                           {0, 1},
                           "1: a wgmma grid of one block an SM (MINB) that loops over the row "
                           "tiles, the next one's Q and K/V loaded while this one ends"},
            [P_PP] = {"ATT_PP",
                      2,
                      {0, 1},
                      "1: the consumer warpgroups of a wgmma block issue their MMAs in turns "
                      "(ping-pong, round the ring), one's softmax under another's MMAs"},
        },
    .match = att_match,
    .check = att_check,
    .emit = att_emit,
    .min_bytes = att_min_bytes,
    .flops = att_flops,
    .tolerance = att_tolerance,
    .start = att_start,
    .assumes = att_assumes,
};
