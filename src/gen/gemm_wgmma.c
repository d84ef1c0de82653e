/* gemm_wgmma.c: the wgmma family: kiln's own GEMM for sm_90a (templates/gemm_wgmma.cu), for the
 * captured GEMMs gemm_match.c reads whose A and B are both K-major (a linear's input and weight,
 * x [M, K] @ w [N, K]ᵀ, or a batch of them), 16-bit inputs or fp8 ones (torch._scaled_mm, its
 * scales per tensor or per row), with the epilogue chain after the GEMM (bias, ReLU or GELU in the
 * form captured, a cast) applied to the fp32 accumulator. The points
 * are tile shapes, stages and the raster order (docs/families/wgmma.md); the cpu candidate is the
 * plain C GEMM both GEMM families share. */
#include <string.h>

#include "gemm.h"

extern const kiln_family kiln_family_wgmma;

enum {
    P_BN,
    P_MI,
    P_WGS,
    P_STAGES,
    P_GROUP,
    P_WS,
    P_PERSIST,
    P_MINB,
    P_PP,
    P_CL,
    P_SPLITN,
    P_EPI_TMA,
    P_COUNT
};

#define GW_MAX_SMEM (227 * 1024)
/* fp32 accumulators a thread of both sets together where fp8 products are promoted (GW_PROMOTE) */
#define GW_PROMOTE_ACCS 192
#define GW_STR(x) #x
#define GW_XSTR(x) GW_STR(x)    /* a macro's value as a string literal */
#define GW_SM_SMEM (228 * 1024) /* an SM's shared memory, all its blocks together */

/* ---- the match ---- */

static int gw_match(const kiln_problem *p, kiln_match *m, char *why, size_t why_len) {
    if (!kiln_gemm_match(p, m, why, why_len))
        return 0;
    const kiln_lt_gemm g = kiln_gemm_of(m);
    if ((g.a_type != KILN_BF16 && g.a_type != KILN_F16 && !kiln_dtype_is_fp8(g.a_type)) ||
        g.b_type != g.a_type) {
        kiln_family_fmt(why, why_len,
                        "%s%s%s inputs: wgmma's kernel takes bfloat16, float16, or one fp8 "
                        "format for both",
                        kiln_dtype_name(g.a_type), g.b_type != g.a_type ? " by " : "",
                        g.b_type != g.a_type ? kiln_dtype_name(g.b_type) : "");
        return 0;
    }
    if (g.trans_a || !g.trans_b) {
        kiln_family_fmt(why, why_len,
                        "A or B is not K-major (%s): the kernel reads x [M, K] @ w [N, K]ᵀ, a "
                        "linear's layout",
                        g.trans_a ? "A is stored [K, M]" : "B is stored [K, N]");
        return 0;
    }
    const int64_t vec = 16 / (int64_t)kiln_dtype_size(g.a_type);
    if (g.k % vec || g.lda % vec || g.ldb % vec || g.n % 2 || g.ldd % 2) {
        kiln_family_fmt(why, why_len,
                        "K and the rows of A and B must be multiples of %lld elements (16-byte "
                        "copies), N and D's rows even (pairs stored): K %lld, N %lld, lda %lld, "
                        "ldb %lld, ldd %lld",
                        (long long)vec, (long long)g.k, (long long)g.n, (long long)g.lda,
                        (long long)g.ldb, (long long)g.ldd);
        return 0;
    }
    return 1;
}

/* GW_ACT for g's epilogue: 0 none, 1 ReLU, 2 GELU (tanh), 3 GELU (erf, as captured), 4 SiLU (a
 * gated pair's). */
static int act_of(const kiln_lt_gemm *g, const kiln_match *m) {
    if (kiln_gemm_gated(m))
        return kiln_gemm_gated(m);
    if (g->epilogue == KILN_LT_EPI_RELU || g->epilogue == KILN_LT_EPI_BIAS_RELU)
        return 1;
    if (g->epilogue == KILN_LT_EPI_GELU || g->epilogue == KILN_LT_EPI_BIAS_GELU)
        return kiln_gemm_gelu_erf(m) ? 3 : 2;
    return 0;
}

/* ---- constraints ---- */

/* k a stage: one 128-byte row of A and of B a tile row (64 16-bit elements, 128 fp8). */
static int64_t k_stage(const kiln_lt_gemm *g) {
    return 128 / (int64_t)kiln_dtype_size(g->a_type);
}

/* Rows of a tile: every consumer warpgroup's 64 x GW_MI, or one's (ping-pong: they take turns;
 * split columns: each has all the rows). */
static int64_t block_m(const int64_t *pt) {
    return 64 * pt[P_MI] * (pt[P_PP] || pt[P_SPLITN] ? 1 : pt[P_WGS]);
}

/* Columns a warpgroup multiplies: the wgmma's N. */
static int64_t n_wg(const int64_t *pt) {
    return pt[P_BN] / (pt[P_SPLITN] ? pt[P_WGS] : 1);
}

/* fp32 accumulators a consumer thread holds (one set; GW_PROMOTE holds two). */
static int64_t accs(const int64_t *pt) {
    return pt[P_MI] * n_wg(pt) / 2;
}

/* Whether each stage's products are summed apart and added in fp32 (GW_PROMOTE): fp8 inputs unless
 * the capture allowed fast accumulation. */
static int promotes(const kiln_match *m) {
    return kiln_dtype_is_fp8(kiln_gemm_of(m).a_type) && !kiln_gemm_fast_accum(m);
}

/* Rows of A a TMA box copies (a box has at most 256; a taller tile takes two). */
static int64_t a_box(const int64_t *pt) {
    return block_m(pt) > 256 ? block_m(pt) / 2 : block_m(pt);
}

/* Bytes of an element of D. */
static int64_t d_bytes(const kiln_lt_gemm *g) {
    return g->d_type == KILN_F32 ? 4 : 2;
}

/* Whether the TMA unit can store D from the epilogue's chunks (GW_EPI_TMA): 16-bit D whose rows and
 * batch stride are whole 16 bytes (a tensor map's strides), a warpgroup's columns of D (half its
 * wgmma's N for a gated pair) whole 128-byte chunks. */
static int epi_tma_fits(const kiln_lt_gemm *g, int gated, const int64_t *pt) {
    return d_bytes(g) == 2 && g->ldd % 8 == 0 && g->stride_d % 8 == 0 &&
           n_wg(pt) / (gated ? 2 : 1) * 2 % 128 == 0;
}

/* Whether the epilogue goes through shared memory (GW_EPI_SMEM: the warp-specialised pipeline, and
 * D's rows, N and batch stride in whole 16-byte stores), stored by the threads (not GW_EPI_TMA). */
static int epi_smem(const kiln_lt_gemm *g, const int64_t *pt) {
    const int64_t vec = 16 / d_bytes(g);
    return pt[P_WS] && !pt[P_EPI_TMA] && g->n % vec == 0 && g->ldd % vec == 0 &&
           g->stride_d % vec == 0;
}

/* A consumer warpgroup's buffer for the staged epilogue: 64 rows of a 128-byte chunk (64 where the
 * warpgroup's columns of D, half its wgmma's N for a gated pair, are not whole 128-byte chunks) and
 * 16 bytes of padding (the template's GW_EPI_BYTES). */
static int64_t epi_bytes(const kiln_lt_gemm *g, int gated, const int64_t *pt) {
    const int64_t cols = n_wg(pt) / (gated ? 2 : 1);
    return 64 * ((cols * d_bytes(g) % 128 == 0 ? 128 : 64) + 16);
}

/* The stages, 128 bytes a tile row of A and of B, 1024 bytes to align the first stage, the
 * warp-specialised pipeline's two mbarriers a stage and the epilogue's buffers: the staged one's,
 * or the TMA-stored one's two of 8 KiB a consumer warpgroup, 1024-aligned (g: D as written). */
static int64_t smem_bytes(const kiln_lt_gemm *g, int gated, const int64_t *pt) {
    return pt[P_STAGES] * (block_m(pt) + pt[P_BN]) * 128 + 1024 +
           (pt[P_WS] ? 16 * pt[P_STAGES] : 0) +
           (epi_smem(g, pt) ? pt[P_WGS] * epi_bytes(g, gated, pt) : 0) +
           (pt[P_EPI_TMA] ? 1024 + pt[P_WGS] * 2 * 8192 : 0);
}

/* Units of work over the whole batch: `cl` row tiles of one column tile (a cluster's; 1: a tile).
 * g as the tiles see it (tiled). */
static int64_t units_of(const kiln_lt_gemm *g, const int64_t *pt, int64_t cl) {
    const int64_t um = block_m(pt) * cl;
    return (g->m + um - 1) / um * ((g->n + pt[P_BN] - 1) / pt[P_BN]) * g->batch;
}

static int64_t threads_of(const int64_t *pt) {
    return 128 * (pt[P_WGS] + pt[P_WS]);
}

/* The GEMM as the tiles see it: a gated pair's tile multiplies BN rows of its two weights for BN /
 * 2 columns of D, so its tiles are those of a GEMM with twice D's columns. */
static kiln_lt_gemm tiled(kiln_lt_gemm g, int gated) {
    if (gated)
        g.n *= 2;
    return g;
}

static const char *gw_check(const kiln_problem *p, const kiln_match *m, const int64_t *pt) {
    (void)p;
    const kiln_lt_gemm gd = kiln_gemm_of(m); /* D as written */
    const int gated = kiln_gemm_gated(m) != 0;
    const kiln_lt_gemm g = tiled(gd, gated);
    if (gated && (!pt[P_WS] || pt[P_SPLITN] || pt[P_CL] > 1))
        return "a gated pair needs the TMA pipeline, rows split and no clusters (its B tile is the "
               "two weights' rows, each thread holding a column of both)";
    if (pt[P_EPI_TMA] && (!pt[P_WS] || !epi_tma_fits(&gd, gated, pt)))
        return "the TMA-stored epilogue needs the TMA pipeline, 16-bit D with rows of whole 16 "
               "bytes and a warpgroup's columns of D in whole 128-byte chunks";
    if (pt[P_SPLITN] && (pt[P_WGS] < 2 || pt[P_PP]))
        return "split columns need two consumer warpgroups sharing each tile (not ping-pong)";
    if (pt[P_MI] > 2 && !pt[P_SPLITN])
        return "more than two 64-row MMA tiles a warpgroup only where the warpgroups split the "
               "columns (a tile's rows at most 320)";
    if (accs(pt) > 160)
        return "more than 160 fp32 accumulators a thread (GW_MI x the wgmma's N / 2)";
    if (promotes(m) && 2 * accs(pt) > GW_PROMOTE_ACCS)
        return "fp8 sums each stage apart (two sets of accumulators): more than " GW_XSTR(
            GW_PROMOTE_ACCS) " a thread";
    if (smem_bytes(&gd, gated, pt) > GW_MAX_SMEM)
        return "the stages exceed 227 KiB of shared memory";
    if (block_m(pt) > 64 && g.m <= block_m(pt) / 2)
        return "a block's rows are more than twice M";
    if (pt[P_BN] > 64 && g.n <= pt[P_BN] / 2)
        return "a block's columns are more than twice N";
    const int64_t tiles_m = (g.m + block_m(pt) - 1) / block_m(pt);
    if (pt[P_GROUP] > 1 && tiles_m <= 1)
        return "one row tile: the raster group changes nothing";
    if (pt[P_MINB] > 1 && pt[P_MINB] * smem_bytes(&gd, gated, pt) > GW_SM_SMEM)
        return "two blocks an SM need their stages within 228 KiB together";
    if (pt[P_MINB] > 1 && (threads_of(pt) > 256 || accs(pt) * (promotes(m) ? 2 : 1) > 64))
        return "two blocks an SM: at most 256 threads of 128 registers, 64 accumulators";
    if (pt[P_PERSIST] && !pt[P_WS])
        return "a persistent grid needs the warp-specialised pipeline (GW_WS 1)";
    if (pt[P_PP] && (!pt[P_PERSIST] || pt[P_WGS] < 2))
        return "ping-pong needs two consumer warpgroups in a persistent grid";
    if (pt[P_PERSIST] && units_of(&g, pt, 1) <= KILN_FAMILY_SMS)
        return "the tiles fit one wave: a persistent grid changes nothing";
    if (pt[P_CL] > 1 && !pt[P_WS])
        return "clusters share B's tile by TMA multicast: they need the warp-specialised pipeline";
    if (pt[P_CL] > 1 && tiles_m <= 1)
        return "one row tile: a cluster's second block would have no rows";
    const int64_t k_tiles = (g.k + k_stage(&g) - 1) / k_stage(&g);
    if (pt[P_STAGES] > 3 && k_tiles < pt[P_STAGES] - 2)
        return "more stages than k tiles";
    return NULL;
}

/* The share of the last wave's SMs that have a tile, over all waves: tiles / (waves · 132). */
static double wave_use(const kiln_lt_gemm *g, int64_t bm, int64_t bn) {
    const int64_t tiles = (g->m + bm - 1) / bm * ((g->n + bn - 1) / bn) * g->batch;
    const int64_t waves = (tiles + KILN_FAMILY_SMS - 1) / KILN_FAMILY_SMS;
    return (double)tiles / (double)(waves * KILN_FAMILY_SMS);
}

/* The rule of thumb, from the H200 (bench/RESULTS.md, fourteenth and twenty-second sessions): the
 * TMA pipeline (GW_WS 1), two consumer warpgroups, a persistent grid where the tiles outnumber the
 * SMs, raster groups of 16 row tiles, the staged epilogue wherever D allows it. Tiles of 128 x 256
 * shared by the two warpgroups, four stages (8192^3: 1394 us; Gemma-4's q projection 53.8 against
 * ping-pong's 59.3), 128 x 192 where 128 x 256 would leave more than 15 % of the last wave's SMs
 * idle and 192 fills them (Gemma-4's down projection: 220.9 us against 281.4); but ping-pong with
 * 128 x 128 tiles a warpgroup (GW_PP, MI 2) where the epilogue computes an activation, which then
 * runs under the other warpgroup's MMAs (Gemma-4's gate/up projection with bias + GELU: 246.9 us
 * against 257.8). The persistent tiles without an activation store D by TMA (GW_EPI_TMA; on the
 * H100, twenty-seventh session: 223.7 against 228.3 us on the gate/up projection, 1357.1 against
 * 1369.7 on 8192^3, 0.5-0.9 % on the q and down projections; the gated pair's ping-pong was 1.1 %
 * slower with it). Clusters and split columns are search points, not start points (within 1 % of
 * these on those rows). Small problems: 128 x 128 or 64-column tiles with six stages when the tiles
 * do not fill the SMs, 64-row tiles for M <= 64, fewer stages than the k tiles need are not used.
 */
static int gw_start(const kiln_problem *p, const kiln_match *m, int64_t *pt) {
    (void)p;
    const kiln_lt_gemm g = tiled(kiln_gemm_of(m), kiln_gemm_gated(m) != 0);
    pt[P_MI] = 1;
    pt[P_WGS] = g.m > 64 ? 2 : 1;
    const int64_t bm = 64 * pt[P_WGS];
    const int64_t tiles = (g.m + bm - 1) / bm * ((g.n + 255) / 256) * g.batch;
    pt[P_BN] = g.n >= 256 && tiles >= KILN_FAMILY_SMS ? 256 : g.n > 64 ? 128 : 64;
    if (pt[P_BN] == 256 && wave_use(&g, bm, 256) < 0.85 &&
        wave_use(&g, bm, 192) > wave_use(&g, bm, 256) + 0.1)
        pt[P_BN] = 192;
    const int64_t k_tiles = (g.k + k_stage(&g) - 1) / k_stage(&g);
    pt[P_STAGES] = pt[P_BN] >= 192 ? 4 : 6;
    if (pt[P_STAGES] > k_tiles + 2)
        pt[P_STAGES] = k_tiles + 2 > 3 ? k_tiles + 2 : 3;
    pt[P_GROUP] = (g.m + bm - 1) / bm > 1 ? 16 : 1;
    pt[P_WS] = 1;
    pt[P_PERSIST] = 0;
    pt[P_MINB] = 1;
    pt[P_PP] = 0;
    pt[P_CL] = 1;
    pt[P_SPLITN] = 0;
    pt[P_EPI_TMA] = 0;
    if (pt[P_BN] >= 192 && tiles > KILN_FAMILY_SMS) {
        pt[P_PERSIST] = 1;
        if (act_of(&g, m)) {
            pt[P_PP] = 1;
            pt[P_MI] = 2;
            pt[P_BN] = 128;
        }
    }
    if (promotes(m) && 2 * accs(pt) > GW_PROMOTE_ACCS) { /* two sets: 128 x 192 tiles shared */
        pt[P_PP] = 0;
        pt[P_MI] = 1;
        pt[P_BN] = 192;
    }
    if (gw_check(p, m, pt))
        return -1;
    if (pt[P_PERSIST] && !pt[P_PP] && !promotes(m) && !kiln_gemm_gated(m)) {
        pt[P_EPI_TMA] = 1; /* the TMA store where D allows it */
        if (gw_check(p, m, pt))
            pt[P_EPI_TMA] = 0;
    }
    return 0;
}

/* ---- emission ---- */

/* The `// kiln: tensormap` line of a K-major operand (rows x k, rows ld apart, batch matrices
 * stride apart, 0: one shared by the batch): boxes of box_k (a 128-byte row) by box_rows rows,
 * 128-byte swizzle. */
static void emit_tmap(kiln_strbuf *b, const char *name, int64_t k, int64_t rows, int64_t ld,
                      int64_t batch, int64_t stride, int64_t box_k, int64_t box_rows) {
    if (batch > 1 && stride)
        kiln_strbuf_printf(b,
                           "// kiln: tensormap %s dims=(%lld,%lld,%lld) strides=(%lld,%lld) "
                           "box=(%lld,%lld,1) swizzle=128\n",
                           name, (long long)k, (long long)rows, (long long)batch, (long long)ld,
                           (long long)stride, (long long)box_k, (long long)box_rows);
    else
        kiln_strbuf_printf(b,
                           "// kiln: tensormap %s dims=(%lld,%lld) strides=(%lld) box=(%lld,%lld) "
                           "swizzle=128\n",
                           name, (long long)k, (long long)rows, (long long)ld, (long long)box_k,
                           (long long)box_rows);
}

static char *gw_emit(const kiln_problem *p, const kiln_match *m, const int64_t *pt, int cuda) {
    if (!cuda)
        return kiln_gemm_emit_cpu(&kiln_family_wgmma, p, m, 1);
    const kiln_lt_gemm g = kiln_gemm_of(m);
    const int gated = kiln_gemm_gated(m) != 0;
    const kiln_lt_gemm gt = tiled(g, gated);
    const kiln_kernel_type t = kiln_dtype_kernel_type(g.a_type, 1);
    const kiln_kernel_type td = kiln_dtype_kernel_type(g.d_type, 1);
    const kiln_kernel_type tbias = kiln_dtype_kernel_type(g.bias_type, 1);
    const int bias = kiln_lt_epilogue_has_bias(g.epilogue), scale = kiln_gemm_scale(m);
    kiln_strbuf b = {0};
    char *defs = kiln_family_defines(&kiln_family_wgmma, pt);
    kiln_strbuf_printf(&b, "%s", defs);
    free(defs);
    kiln_strbuf_printf(&b,
                       "#define GW_T %s\n#define GW_TD %s\n#define GW_TB %s\n#define GW_M %lldLL\n"
                       "#define GW_N %lldLL\n#define GW_K %lldLL\n#define GW_LDA %lldLL\n"
                       "#define GW_LDB %lldLL\n#define GW_LDD %lldLL\n#define GW_SA %lldLL\n"
                       "#define GW_SB %lldLL\n#define GW_SD %lldLL\n#define GW_BIAS %d\n"
                       "#define GW_ACT %d\n#define GW_D_F32 %d\n#define GW_D_F16 %d\n"
                       "#define GW_BATCH %lld\n#define GW_EPI_SMEM %d\n#define GW_GATED %d\n"
                       "#define GW_SCALE %d\n#define GW_PROMOTE %d\n#define GW_MMA_SUPPLIED 1\n"
                       "#define GW_EPI_TMA %d\n",
                       t.type, td.type, tbias.type, (long long)g.m, (long long)g.n, (long long)g.k,
                       (long long)g.lda, (long long)g.ldb, (long long)g.ldd, (long long)g.stride_a,
                       (long long)g.stride_b, (long long)g.stride_d, bias, act_of(&g, m),
                       g.d_type == KILN_F32, g.d_type == KILN_F16, (long long)g.batch,
                       epi_smem(&g, pt), gated, scale, promotes(m), (int)pt[P_EPI_TMA]);
    /* a block a tile; clusters of GW_CL blocks a unit (x fastest); persistent: a cluster an SM's
     * worth of blocks, or a unit, whichever is fewer */
    const int64_t threads = threads_of(pt), units = units_of(&gt, pt, pt[P_CL]), cl = pt[P_CL];
    char cluster[32] = "";
    if (cl > 1)
        kiln_family_fmt(cluster, sizeof cluster, " cluster=(%lld,1,1)", (long long)cl);
    if (pt[P_PERSIST])
        kiln_strbuf_printf(
            &b, "// kiln: launch gemm_kernel grid=%lld block=%lld smem=%lld%s\n",
            (long long)((units < KILN_FAMILY_SMS / cl ? units : KILN_FAMILY_SMS / cl) * cl),
            (long long)threads, (long long)smem_bytes(&g, gated, pt), cluster);
    else
        kiln_strbuf_printf(&b,
                           "// kiln: launch gemm_kernel grid=(%lld,1,%lld) block=%lld "
                           "smem=%lld%s\n",
                           (long long)(units / g.batch * cl), (long long)g.batch,
                           (long long)threads, (long long)smem_bytes(&g, gated, pt), cluster);
    const char *a_name = p->inputs[m->input_of_role[KILN_GEMM_A]].name;
    const char *b_name = p->inputs[m->input_of_role[KILN_GEMM_B]].name;
    if (pt[P_WS]) {
        /* the TMA boxes: a stage's k by the block's rows of A and its columns of B */
        const int64_t bk = k_stage(&g);
        emit_tmap(&b, a_name, g.k, g.m, g.lda, g.batch, g.stride_a, bk, a_box(pt));
        /* a gated pair: the gate's half of the tile's rows of B, and the up projection's */
        emit_tmap(&b, b_name, g.k, g.n, g.ldb, g.batch, g.stride_b, bk,
                  pt[P_BN] / (gated ? 2 : pt[P_CL]));
        if (gated)
            emit_tmap(&b, p->inputs[m->input_of_role[KILN_GEMM_B2]].name, g.k, g.n, g.ldb, g.batch,
                      g.stride_b, bk, pt[P_BN] / 2);
        /* D (GW_EPI_TMA): boxes of a 128-byte chunk of a row by 64 rows, stored */
        if (pt[P_EPI_TMA])
            emit_tmap(&b, p->outputs[m->output_of_role[0]].name, g.n, g.m, g.ldd, g.batch,
                      g.stride_d, 128 / d_bytes(&g), 64);
    }
    kiln_strbuf_printf(&b,
                       "#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n%s"
                       "#define GW_TMAP_SUPPLIED 1\n",
                       KILN_FAMILY_TMAP_TYPE);
    /* gw_mma: D (+)= A · Bᵀ, both operands K-major in shared memory */
    kiln_family_emit_wgmma(&b, "gw_mma", n_wg(pt), g.a_type, 0, 0);
    kiln_strbuf_printf(&b, "%s%s", kiln_family_template("mbarrier.cuh"),
                       kiln_family_template("gemm_wgmma.cu"));
    char bounds[32];
    kiln_family_fmt(bounds, sizeof bounds, "%lld, %lld", (long long)threads, (long long)pt[P_MINB]);
    /* the maps in the order of their lines */
    const char *maps[4] = {"gw_tma_a", "gw_tma_b", gated ? "gw_tma_b2" : "gw_tma_d", "gw_tma_d"};
    const int n_maps = 2 + gated + (int)pt[P_EPI_TMA];
    char *proto = pt[P_WS] ? kiln_family_prototype_tmaps(p, bounds, "gemm_kernel", n_maps, maps)
                           : kiln_family_prototype(p, 0, 1, bounds, "gemm_kernel");
    kiln_strbuf_printf(&b, "\n%s {\n    gw_gemm(%s, %s, %s, %s, %s, %s, %s, %s);\n}\n", proto,
                       a_name, b_name,
                       bias ? p->inputs[m->input_of_role[KILN_GEMM_BIAS]].name : "nullptr",
                       scale ? p->inputs[m->input_of_role[KILN_GEMM_SA]].name : "nullptr",
                       scale ? p->inputs[m->input_of_role[KILN_GEMM_SB]].name : "nullptr",
                       p->outputs[m->output_of_role[0]].name,
                       !pt[P_WS] ? "nullptr, nullptr, nullptr"
                       : gated   ? "&gw_tma_a, &gw_tma_b, &gw_tma_b2"
                                 : "&gw_tma_a, &gw_tma_b, nullptr",
                       pt[P_EPI_TMA] ? "&gw_tma_d" : "nullptr");
    free(proto);
    return kiln_family_source(&kiln_family_wgmma, m, pt, b.s);
}

static kiln_tolerance gw_tolerance(kiln_dtype t) {
    return kiln_tolerance_default(t);
}

const kiln_family kiln_family_wgmma = {
    .name = "wgmma",
    /* 0.96-0.98x cuBLAS on four of five plain GEMMs on the H200, 1.085x on Gemma-4's lm-head
     * (docs/families/wgmma.md): still prepared after the others until a kiln tune run measures what
     * preparing its problems first costs the rest (the lm-head's reference data is gigabytes) */
    .behind = 1,
    .summary = "kiln's own GEMM for sm_90a: a captured linear (x @ wᵀ, 16-bit or fp8 _scaled_mm, "
               "K-major operands) with its bias / ReLU / GELU / cast epilogue, wgmma from swizzled "
               "shared memory fed by TMA (a producer thread) or cp.async",
    .n_params = P_COUNT,
    .params =
        {
            {"GW_BN", 4, {64, 128, 192, 256}, "columns of a block's tile (the wgmma's N)"},
            {"GW_MI", 5, {1, 2, 3, 4, 5}, "64-row MMA tiles per warpgroup"},
            {"GW_WGS", 2, {1, 2}, "warpgroups per block (rows: 64 x GW_MI x GW_WGS)"},
            {"GW_STAGES",
             5,
             {3, 4, 5, 6, 7},
             "shared-memory stages of 128 bytes of k (copies run two less ahead)"},
            {"GW_GROUP", 3, {1, 8, 16}, "row tiles per raster group (L2 reuse of B)"},
            {"GW_WS",
             2,
             {0, 1},
             "1: a producer warpgroup copies through mbarriers, the others only multiply; 0: "
             "every thread copies between barriers"},
            {"GW_PERSIST",
             2,
             {0, 1},
             "1: 132 blocks loop over the tiles, the next tile's copies under this one's stores "
             "(warp-specialised only)"},
            {"GW_MINB",
             2,
             {1, 2},
             "blocks an SM (__launch_bounds__): 2 overlaps one block's barriers and stores with "
             "the other's MMAs"},
            {"GW_PP",
             2,
             {0, 1},
             "1: the consumer warpgroups take whole tiles in turn (ping-pong), one's epilogue "
             "under the other's MMAs; 0: they share every tile"},
            {"GW_CL",
             2,
             {1, 2},
             "blocks a cluster: 2 take two row tiles of one column tile, each copying half of "
             "B's tile into both by TMA multicast (half the L2 reads of B)"},
            {"GW_SPLITN",
             2,
             {0, 1},
             "1: the two consumer warpgroups split a tile's columns, each multiplying all its "
             "rows (tiles of up to 320 rows: 192 x 192, 320 x 128); 0: they split its rows"},
            {"GW_EPI_TMA",
             2,
             {0, 1},
             "1: the epilogue's chunks are stored by the TMA unit (D's tensor map), the "
             "warpgroup going on to its next tile meanwhile; 0: by its threads"},
        },
    .match = gw_match,
    .check = gw_check,
    .emit = gw_emit,
    .min_bytes = kiln_gemm_min_bytes,
    .flops = kiln_gemm_flops,
    .tolerance = gw_tolerance,
    .start = gw_start,
};
