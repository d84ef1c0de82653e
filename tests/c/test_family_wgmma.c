/* test_family_wgmma.c: the wgmma family without a GPU: what it matches (16-bit linears, batched
 * and with their epilogues, the Gemma-4 MLP projection of bench/problems, gated pairs, fp8
 * torch._scaled_mm with its scales) and what it declines
 * and why; the constraints; the start point; the emitted wgmma (the instruction for the point's N
 * and dtype, one accumulator operand per register); the cpu candidate (GELU in the form captured);
 * and that every start point and an even spread of the valid points compile for sm_90a with NVRTC
 * without a stack frame (no spills). On a GPU the gate proves them: bench/wgmma_device.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#include "backend/cubin.h"
#include "backend/nvrtc.h"
#include "gen/family.h"
#include "gen/gemm.h"

#include "compile_check.h"

#define DATA KILN_SOURCE_DIR "/tests/data/families/cublaslt"
#define BENCH KILN_SOURCE_DIR "/bench/problems"
#define SPREAD 12

static const kiln_family *fam;

static kiln_problem *load(const char *base, const char *sub) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", base, sub);
    kiln_problem *p = NULL;
    kiln_err err;
    if (kiln_problem_load(dir, &p, &err) != KILN_OK)
        fail_msg("%s: %s", dir, err.msg);
    return p;
}

static void match_ok(const kiln_problem *p, kiln_match *m) {
    char why[512] = "";
    if (!fam->match(p, m, why, sizeof why))
        fail_msg("%s declined: %s", p->name, why);
}

/* The problem base/sub, matched, and its start point in pt. */
static kiln_problem *started(const char *base, const char *sub, kiln_match *m, int64_t *pt) {
    kiln_problem *p = load(base, sub);
    match_ok(p, m);
    assert_int_equal(fam->start(p, m, pt), 0);
    return p;
}

static const struct {
    const char *base, *dir;
    int bias, act; /* GW_BIAS, GW_ACT */
    const char *mma;
} MATCHES[] = {
    {DATA, "linear_bf16_3d", 0, 0, "f32.bf16.bf16"},
    {DATA, "mm_f16_wt", 0, 0, "f32.f16.f16"},
    {DATA, "addmm_bf16", 1, 0, "f32.bf16.bf16"},
    {DATA, "linear_bias_gelu_bf16", 1, 2, "f32.bf16.bf16"},
    {DATA, "mm_add_relu_f16", 1, 1, "f32.f16.f16"},
    {DATA, "linear_gelu_erf_to_f32", 0, 3, "f32.bf16.bf16"},
    {DATA, "addmm_bf16_tails", 1, 0, "f32.bf16.bf16"},
    {DATA, "conv1x1_cl_bias_bf16", 1, 0, "f32.bf16.bf16"}, /* a 1x1 convolution, channels-last */
    {BENCH, "gemm_linear_bf16_4096x9216x2304", 0, 0, "f32.bf16.bf16"},
};
#define N_MATCHES (sizeof MATCHES / sizeof MATCHES[0])

static void test_match(void **state) {
    (void)state;
    for (size_t i = 0; i < N_MATCHES; i++) {
        kiln_problem *p = load(MATCHES[i].base, MATCHES[i].dir);
        kiln_match m;
        match_ok(p, &m);
        int64_t pt[KILN_FAMILY_MAX_PARAMS];
        assert_int_equal(fam->start(p, &m, pt), 0);
        assert_null(fam->check(p, &m, pt));
        char *src = fam->emit(p, &m, pt, 1);
        char want[64];
        snprintf(want, sizeof want, "#define GW_BIAS %d\n", MATCHES[i].bias);
        assert_non_null(strstr(src, want));
        snprintf(want, sizeof want, "#define GW_ACT %d\n", MATCHES[i].act);
        assert_non_null(strstr(src, want));
        /* the instruction for the point's N, one "+f" operand per accumulator of a thread */
        const int64_t nw = pt[0] / (pt[10] ? pt[2] : 1); /* split columns: a warpgroup's share */
        snprintf(want, sizeof want, "wgmma.mma_async.sync.aligned.m64n%lldk16.%s", (long long)nw,
                 MATCHES[i].mma);
        assert_non_null(strstr(src, want));
        snprintf(want, sizeof want, "\"+f\"(d[%lld])", (long long)(nw / 2 - 1));
        assert_non_null(strstr(src, want));
        snprintf(want, sizeof want, "\"+f\"(d[%lld])", (long long)(nw / 2));
        assert_null(strstr(src, want));
        assert_non_null(strstr(src, "// kiln: launch gemm_kernel grid="));
        free(src);
        /* the cpu candidate computes GELU in the form captured */
        char *cpu = fam->emit(p, &m, pt, 0);
        assert_int_equal(strstr(cpu, "erff(acc") != NULL, MATCHES[i].act == 3);
        assert_int_equal(strstr(cpu, "tanhf(0.7978845608f") != NULL, MATCHES[i].act == 2);
        free(cpu);
        kiln_problem_free(p);
    }
}

/* The TMA pipeline (GW_WS 1) asks for a tensor map of A and of B, boxes of 64 k by the tile's rows,
 * which the ABI's planner accepts for every workload (no map reaches past its tensor); the other
 * pipeline asks for none. */
static void test_tensormaps(void **state) {
    (void)state;
    for (size_t i = 0; i < N_MATCHES; i++) {
        kiln_problem *p = load(MATCHES[i].base, MATCHES[i].dir);
        kiln_match m;
        match_ok(p, &m);
        int64_t pt[KILN_FAMILY_MAX_PARAMS];
        assert_int_equal(fam->start(p, &m, pt), 0);
        for (int ws = 1; ws >= 0; ws--) {
            if (!ws) { /* the every-thread pipeline: no persistent grid, tiles shared */
                pt[5] = 0;
                pt[6] = 0;
                pt[8] = 0;
                pt[11] = 0;
            }
            assert_null(fam->check(p, &m, pt));
            char *src = fam->emit(p, &m, pt, 1);
            kiln_abi abi;
            kiln_err err;
            if (kiln_abi_parse(src, 1, &abi, &err) != KILN_OK)
                fail_msg("%s: %s", p->name, err.msg);
            assert_int_equal(abi.n_tmaps, 2 * ws + (int)pt[11]); /* D's where stored by TMA */
            for (int w = 0; w < p->n_workloads; w++) {
                kiln_launch_plan plan;
                if (kiln_abi_plan(&abi, p, &p->workloads[w], &plan, &err) != KILN_OK)
                    fail_msg("%s workload %d: %s", p->name, w, err.msg);
                if (!ws)
                    continue;
                assert_int_equal(plan.tmap[0].box[0], 64);
                const int64_t bm = 64 * pt[1] * (pt[8] || pt[10] ? 1 : pt[2]); /* GW_BM */
                assert_int_equal(plan.tmap[0].box[1], bm > 256 ? bm / 2 : bm);
                assert_int_equal(plan.tmap[1].box[1], pt[0] / pt[9]); /* GW_BN / GW_CL */
                assert_int_equal(plan.tmap[0].swizzle, 128);
                assert_int_equal(plan.tmap[0].param, m.input_of_role[KILN_GEMM_A]);
                assert_int_equal(plan.tmap[1].param, m.input_of_role[KILN_GEMM_B]);
            }
            if (ws)
                assert_non_null(
                    strstr(src, pt[11] ? "kiln_tensormap gw_tma_b,"
                                       : "const __grid_constant__ kiln_tensormap gw_tma_b)"));
            kiln_abi_free(&abi);
            free(src);
        }
        kiln_problem_free(p);
    }
}

static void test_declines(void **state) {
    (void)state;
    static const struct {
        const char *dir, *why;
    } no[] = {
        {"linear_bias_f32", "float32 inputs"},
        {"mm_f32_at", "float32 inputs"},
        {"bmm_bf16", "B is stored [K, N]"},
        {"conv1x1_nchw_f16", "B is stored [K, N]"}, /* an NCHW 1x1 convolution: w @ x per image */
        {"declined/linear_silu", "not an epilogue"},
    };
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        kiln_problem *p = load(DATA, no[i].dir);
        kiln_match m;
        char why[512] = "";
        assert_int_equal(fam->match(p, &m, why, sizeof why), 0);
        if (!strstr(why, no[i].why))
            fail_msg("%s: '%s' lacks '%s'", no[i].dir, why, no[i].why);
        kiln_problem_free(p);
    }
}

/* The constraints say why, and the start point of the big projection is the 128 x 256 tile. */
static void test_check(void **state) {
    (void)state;
    kiln_match m;
    int64_t pt[KILN_FAMILY_MAX_PARAMS];
    kiln_problem *p = started(BENCH, "gemm_linear_bf16_4096x9216x2304", &m, pt);
    char *s = kiln_family_point_str(fam, pt);
    /* 128 x 256 tiles shared by the two warpgroups, a persistent grid, D stored by TMA */
    assert_string_equal(s, "GW_BN=256 GW_MI=1 GW_WGS=2 GW_STAGES=4 GW_GROUP=16 GW_WS=1 "
                           "GW_PERSIST=1 GW_MINB=1 GW_PP=0 GW_CL=1 GW_SPLITN=0 GW_EPI_TMA=1");
    free(s);
    int64_t bad[KILN_FAMILY_MAX_PARAMS];
    memcpy(bad, pt, sizeof bad);
    bad[1] = 2; /* 2 x 256 / 2 accumulators */
    assert_non_null(strstr(fam->check(p, &m, bad), "accumulators"));
    bad[1] = 1;
    bad[3] = 7; /* 7 x 48 KiB */
    assert_non_null(strstr(fam->check(p, &m, bad), "227 KiB"));
    memcpy(bad, pt, sizeof bad);
    bad[8] = 1, bad[6] = 0; /* ping-pong without a persistent grid */
    assert_non_null(strstr(fam->check(p, &m, bad), "ping-pong"));
    kiln_problem_free(p);
    /* Gemma-4's down projection (K = 9216: the warpgroups share each tile): 288 tiles of 128 x 256
     * leave 27 % of the third wave's SMs idle, 384 of 128 x 192 fill 97 % */
    p = started(BENCH, "gemm_linear_bf16_4096x2304x9216", &m, pt);
    s = kiln_family_point_str(fam, pt);
    assert_string_equal(s, "GW_BN=192 GW_MI=1 GW_WGS=2 GW_STAGES=4 GW_GROUP=16 GW_WS=1 "
                           "GW_PERSIST=1 GW_MINB=1 GW_PP=0 GW_CL=1 GW_SPLITN=0 GW_EPI_TMA=1");
    free(s);
    kiln_problem_free(p);
    p = started(DATA, "linear_bf16_3d", &m, pt); /* 18 x 24 x 40 */
    s = kiln_family_point_str(fam, pt);
    assert_string_equal(
        s,
        "GW_BN=64 GW_MI=1 GW_WGS=1 GW_STAGES=3 GW_GROUP=1 GW_WS=1 GW_PERSIST=0 GW_MINB=1 GW_PP=0 "
        "GW_CL=1 GW_SPLITN=0 GW_EPI_TMA=0");
    free(s);
    memcpy(bad, pt, sizeof bad);
    bad[2] = 2;
    assert_non_null(strstr(fam->check(p, &m, bad), "twice M"));
    memcpy(bad, pt, sizeof bad);
    bad[4] = 8;
    assert_non_null(strstr(fam->check(p, &m, bad), "raster group"));
    kiln_problem_free(p);
}

static void compile_point(const kiln_problem *p, const kiln_match *m, const int64_t *pt,
                          int is_start) {
    char *src = fam->emit(p, m, pt, 1);
    char arch[32];
    kiln_cuda_arch(9, 0, src, arch, sizeof arch);
    assert_string_equal(arch, "sm_90a"); /* wgmma: the source asks for the a-variant itself */
    free(src);
    compile_check(fam, p, m, pt, arch, "gemm_kernel", is_start, 1);
}

/* Clusters of two sharing B, warpgroups splitting a tile's columns and the staged epilogue: what
 * the checks say, and what the emitted launch line, tensor maps and defines carry. */
static void test_cluster_split_epilogue(void **state) {
    (void)state;
    kiln_match m;
    int64_t pt[KILN_FAMILY_MAX_PARAMS];
    kiln_problem *p = started(BENCH, "gemm_linear_bf16_4096x9216x2304", &m, pt);
    /* 128 x 256 shared tiles, persistent, in clusters of two */
    pt[0] = 256, pt[1] = 1, pt[3] = 4, pt[8] = 0, pt[9] = 2, pt[10] = 0, pt[11] = 0;
    assert_null(fam->check(p, &m, pt));
    char *src = fam->emit(p, &m, pt, 1);
    assert_non_null(strstr(src, "grid=132 block=384"));
    assert_non_null(strstr(src, "cluster=(2,1,1)"));
    assert_non_null(strstr(src, "box=(64,128) swizzle=128")); /* B: half of 256 rows a block */
    assert_non_null(strstr(src, "#define GW_EPI_SMEM 1"));    /* N 9216: whole 16-byte stores */
    assert_non_null(strstr(src, "wgmma.mma_async.sync.aligned.m64n256k16"));
    free(src);
    int64_t bad[KILN_FAMILY_MAX_PARAMS];
    memcpy(bad, pt, sizeof bad);
    bad[5] = 0, bad[6] = 0; /* every thread copying */
    assert_non_null(strstr(fam->check(p, &m, bad), "warp-specialised"));
    /* 320 x 128 tiles, the warpgroups splitting the columns: A in two boxes of 160 rows, m64n64 */
    pt[0] = 128, pt[1] = 5, pt[3] = 3, pt[9] = 1, pt[10] = 1;
    assert_null(fam->check(p, &m, pt));
    src = fam->emit(p, &m, pt, 1);
    assert_non_null(strstr(src, "box=(64,160) swizzle=128"));
    assert_non_null(strstr(src, "wgmma.mma_async.sync.aligned.m64n64k16"));
    free(src);
    if (kiln_cuda_have_nvrtc()) { /* 160 accumulators a thread, and 192 x 192: no spills */
        compile_point(p, &m, pt, 0);
        int64_t sq[KILN_FAMILY_MAX_PARAMS];
        memcpy(sq, pt, sizeof sq);
        sq[0] = 192, sq[1] = 3, sq[3] = 4, sq[9] = 2;
        assert_null(fam->check(p, &m, sq));
        compile_point(p, &m, sq, 0);
    }
    memcpy(bad, pt, sizeof bad);
    bad[3] = 4; /* 4 x 56 KiB and the epilogue's buffers */
    assert_non_null(strstr(fam->check(p, &m, bad), "227 KiB"));
    memcpy(bad, pt, sizeof bad);
    bad[10] = 0; /* five 64-row tiles a warpgroup, two warpgroups on the rows: 640 rows */
    assert_non_null(strstr(fam->check(p, &m, bad), "split the columns"));
    memcpy(bad, pt, sizeof bad);
    bad[0] = 192, bad[1] = 4; /* 4 x 96 / 2 accumulators */
    assert_non_null(strstr(fam->check(p, &m, bad), "160 fp32 accumulators"));
    memcpy(bad, pt, sizeof bad);
    bad[8] = 1; /* ping-pong warpgroups take whole tiles: nothing to split */
    assert_non_null(strstr(fam->check(p, &m, bad), "split columns"));
    kiln_problem_free(p);
    /* M = 18: one row tile, a cluster's second block would have none */
    p = started(DATA, "linear_bf16_3d", &m, pt);
    pt[9] = 2;
    assert_non_null(strstr(fam->check(p, &m, pt), "one row tile"));
    pt[9] = 1;
    src = fam->emit(p, &m, pt, 1);
    assert_non_null(strstr(src, "#define GW_EPI_SMEM 1")); /* N 24 bf16: three 16-byte stores */
    free(src);
    kiln_problem_free(p);
    p = started(DATA, "mm_add_relu_f16", &m, pt); /* N 20: not whole 16-byte stores */
    src = fam->emit(p, &m, pt, 1);
    assert_non_null(strstr(src, "#define GW_EPI_SMEM 0"));
    free(src);
    kiln_problem_free(p);
}

/* The TMA-stored epilogue (GW_EPI_TMA, the last parameter): D's tensor map, boxes of 64 columns
 * (128 bytes) by 64 rows in the 128-byte swizzle, the last map (after a gated pair's two weights),
 * rank 3 for a batch; the start point where the tiles are persistent and the epilogue computes no
 * activation; declined where D is float32, the pipeline copies by every thread, or a
 * warpgroup's columns are not whole 128-byte chunks; every such point compiles without spills. */
static void test_tma_epilogue(void **state) {
    (void)state;
    static const struct {
        const char *base, *dir;
        int maps, rank, start;
    } cases[] = {
        {BENCH, "gemm_linear_bf16_4096x9216x2304", 3, 2, 1},
        {BENCH, "gemm_linear_bias_gelu_bf16_4096x9216x2304", 3, 2, 0}, /* ping-pong */
        {BENCH, "gemm_gated_gelu_bf16_4096x9216x2304", 4, 2, 0},
        {DATA, "matmul_bf16_4d", 3, 3, 0},
        {KILN_SOURCE_DIR "/tests/data/families/wgmma", "scaled_mm_e4m3_deep_bf16", 3, 2, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kiln_match m;
        int64_t pt[KILN_FAMILY_MAX_PARAMS];
        kiln_problem *p = started(cases[i].base, cases[i].dir, &m, pt);
        /* a start point only for persistent tiles without an activation (timed on the H100) */
        assert_int_equal(pt[11], cases[i].start);
        pt[11] = 1;
        const char *why = fam->check(p, &m, pt);
        if (why)
            fail_msg("%s: %s", cases[i].dir, why);
        char *src = fam->emit(p, &m, pt, 1);
        assert_non_null(strstr(src, "#define GW_EPI_TMA 1"));
        assert_non_null(strstr(src, "#define GW_EPI_SMEM 0"));
        assert_non_null(strstr(src, "const __grid_constant__ kiln_tensormap gw_tma_d)"));
        assert_non_null(strstr(src, ", &gw_tma_d);"));
        kiln_abi abi;
        kiln_err err;
        if (kiln_abi_parse(src, 1, &abi, &err) != KILN_OK)
            fail_msg("%s: %s", p->name, err.msg);
        assert_int_equal(abi.n_tmaps, cases[i].maps);
        kiln_launch_plan plan;
        if (kiln_abi_plan(&abi, p, &p->workloads[0], &plan, &err) != KILN_OK)
            fail_msg("%s: %s", p->name, err.msg);
        const kiln_lt_gemm g = kiln_gemm_of(&m);
        const kiln_tmap *d = &plan.tmap[cases[i].maps - 1];
        assert_int_equal(d->param, p->n_inputs + m.output_of_role[0]);
        assert_int_equal(d->rank, cases[i].rank);
        assert_int_equal(d->dims[0], g.n);
        assert_int_equal(d->dims[1], g.m);
        assert_int_equal(d->box[0], 64);
        assert_int_equal(d->box[1], 64);
        assert_int_equal(d->swizzle, 128);
        kiln_abi_free(&abi);
        free(src);
        if (kiln_cuda_have_nvrtc())
            compile_point(p, &m, pt, 0);
        kiln_problem_free(p);
    }
    kiln_match m;
    int64_t pt[KILN_FAMILY_MAX_PARAMS];
    kiln_problem *p = started(DATA, "linear_gelu_erf_to_f32", &m, pt); /* float32 D */
    pt[11] = 1;
    assert_non_null(strstr(fam->check(p, &m, pt), "TMA-stored epilogue"));
    kiln_problem_free(p);
    p = started(BENCH, "gemm_linear_bf16_8192x8192x8192", &m, pt);
    pt[11] = 1;
    pt[0] = 192, pt[1] = 3, pt[10] = 1; /* split columns: 96 of a warpgroup, 192 bytes */
    assert_non_null(strstr(fam->check(p, &m, pt), "TMA-stored epilogue"));
    pt[0] = 256, pt[1] = 1, pt[10] = 0, pt[5] = 0, pt[6] = 0; /* every thread copies */
    assert_non_null(fam->check(p, &m, pt));
    kiln_problem_free(p);
}

/* Gated pairs (the front of a GeGLU/SwiGLU MLP): one tile multiplies the gate's and the up
 * projection's rows of B, D = act(gate) * up in the epilogue; three tensor maps, the two weights'
 * boxes half the tile's rows each; what the pair needs (TMA, rows split, no clusters) said. */
static void test_gated(void **state) {
    (void)state;
    static const struct {
        const char *dir, *act;
    } gated[] = {{"gated_gelu_bf16", "#define GW_ACT 2\n"},
                 {"gated_silu_f16", "#define GW_ACT 4\n"},
                 {"gated_gelu_deep_bf16", "#define GW_ACT 2\n"}};
    for (size_t i = 0; i < sizeof gated / sizeof gated[0]; i++) {
        kiln_match m;
        int64_t pt[KILN_FAMILY_MAX_PARAMS];
        kiln_problem *p =
            started(KILN_SOURCE_DIR "/tests/data/families/wgmma", gated[i].dir, &m, pt);
        assert_null(fam->check(p, &m, pt));
        char *src = fam->emit(p, &m, pt, 1);
        assert_non_null(strstr(src, "#define GW_GATED 1\n"));
        assert_non_null(strstr(src, gated[i].act));
        assert_non_null(strstr(src, "&gw_tma_a, &gw_tma_b, &gw_tma_b2, nullptr);"));
        kiln_abi abi;
        kiln_err err;
        if (kiln_abi_parse(src, 1, &abi, &err) != KILN_OK)
            fail_msg("%s: %s", p->name, err.msg);
        assert_int_equal(abi.n_tmaps, 3);
        kiln_launch_plan plan;
        if (kiln_abi_plan(&abi, p, &p->workloads[0], &plan, &err) != KILN_OK)
            fail_msg("%s: %s", p->name, err.msg);
        assert_int_equal(plan.tmap[1].box[1], pt[0] / 2); /* the gate's half of B's tile */
        assert_int_equal(plan.tmap[2].box[1], pt[0] / 2); /* the up projection's */
        assert_int_equal(plan.tmap[2].param, m.input_of_role[KILN_GEMM_B2]);
        kiln_abi_free(&abi);
        free(src);
        char *cpu = fam->emit(p, &m, pt, 0);
        assert_non_null(strstr(cpu, "acc2 +="));
        free(cpu);
        int64_t bad[KILN_FAMILY_MAX_PARAMS];
        for (int k = 0; k < 3; k++) {
            memcpy(bad, pt, sizeof bad);
            if (k == 0)
                bad[5] = 0, bad[6] = 0, bad[8] = 0; /* every thread copying */
            else if (k == 1)
                bad[2] = 2, bad[10] = 1, bad[8] = 0; /* split columns */
            else
                bad[9] = 2; /* clusters */
            const char *why = fam->check(p, &m, bad);
            assert_non_null(why);
            assert_non_null(strstr(why, "gated pair"));
        }
        if (kiln_cuda_have_nvrtc())
            compile_point(p, &m, pt, 1);
        kiln_problem_free(p);
    }
}

/* fp8 (torch._scaled_mm): the k32 instruction of the format, boxes of 128 k (a 128-byte row), the
 * scales (per tensor: GW_SCALE 1; a row's and a column's: 2, with the bias in D's dtype) read by
 * the epilogue and the cpu candidate; each stage's products added in fp32 (GW_PROMOTE) unless the
 * capture said use_fast_accum, the tiles then held to two sets of accumulators; e4m3 by e5m2 is
 * declined; every start point and a spread over the valid points of the 8192³ problems compile. */
static void test_fp8(void **state) {
    (void)state;
    static const struct {
        const char *base, *dir, *scale, *cpu;
    } cases[] = {
        {DATA, "scaled_mm_e4m3_bf16", "#define GW_SCALE 1\n", "acc *= sa[0] * sb[0];"},
        {DATA, "scaled_mm_e4m3_fast_bf16", "#define GW_SCALE 1\n", "acc *= sa[0] * sb[0];"},
        {KILN_SOURCE_DIR "/tests/data/families/wgmma", "scaled_mm_e4m3_deep_bf16",
         "#define GW_SCALE 1\n", "acc *= sa[0] * sb[0];"},
        {KILN_SOURCE_DIR "/tests/data/families/wgmma", "scaled_mm_rowwise_bias_e4m3_bf16",
         "#define GW_SCALE 2\n", "acc *= sa[i] * sb[j];"},
        {BENCH, "gemm_scaled_mm_e4m3_8192x8192x8192", "#define GW_SCALE 1\n", NULL},
        {BENCH, "gemm_scaled_mm_rowwise_e4m3_8192x8192x8192", "#define GW_SCALE 2\n", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kiln_match m;
        int64_t pt[KILN_FAMILY_MAX_PARAMS];
        kiln_problem *p = started(cases[i].base, cases[i].dir, &m, pt);
        assert_null(fam->check(p, &m, pt));
        char *src = fam->emit(p, &m, pt, 1);
        char want[96];
        snprintf(want, sizeof want, "wgmma.mma_async.sync.aligned.m64n%lldk32.f32.e4m3.e4m3",
                 (long long)pt[0]);
        assert_non_null(strstr(src, want));
        assert_non_null(strstr(src, ", p, 1, 1;\\n}")); /* fp8's form: no transpose immediates */
        assert_non_null(strstr(src, cases[i].scale));
        assert_non_null(strstr(src, "#define GW_T uint8_t\n"));
        const int fast = strstr(cases[i].dir, "_fast") != NULL;
        assert_int_equal(kiln_gemm_fast_accum(&m), fast);
        assert_non_null(strstr(src, fast ? "#define GW_PROMOTE 0\n" : "#define GW_PROMOTE 1\n"));
        if (!fast) { /* two sets of accumulators: 128 x 256 shared tiles are too many */
            int64_t wide[KILN_FAMILY_MAX_PARAMS];
            memcpy(wide, pt, sizeof wide);
            wide[0] = 256, wide[1] = 1, wide[2] = 2, wide[8] = 0, wide[10] = 0;
            const char *why = fam->check(p, &m, wide);
            assert_non_null(why);
            assert_non_null(strstr(why, "two sets of accumulators"));
        }
        assert_non_null(strstr(src, ", sa, sb, out0, &gw_tma_a, &gw_tma_b, nullptr, nullptr);"));
        if (kiln_gemm_scale(&m) == 2) /* the bias in D's dtype */
            assert_non_null(strstr(src, "#define GW_TB __nv_bfloat16\n"));
        kiln_abi abi;
        kiln_err err;
        if (kiln_abi_parse(src, 1, &abi, &err) != KILN_OK)
            fail_msg("%s: %s", p->name, err.msg);
        kiln_launch_plan plan;
        if (kiln_abi_plan(&abi, p, &p->workloads[0], &plan, &err) != KILN_OK)
            fail_msg("%s: %s", p->name, err.msg);
        assert_int_equal(plan.tmap[0].box[0], 128); /* 128 fp8 elements: one 128-byte row */
        assert_int_equal(plan.tmap[1].box[0], 128);
        assert_int_equal(plan.tmap[0].dtype, KILN_F8_E4M3);
        kiln_abi_free(&abi);
        free(src);
        if (cases[i].cpu) {
            char *cpu = fam->emit(p, &m, pt, 0);
            assert_non_null(strstr(cpu, cases[i].cpu));
            free(cpu);
        }
        if (kiln_cuda_have_nvrtc()) {
            compile_point(p, &m, pt, 1);
            if (!cases[i].cpu) { /* the 8192³ problems: a spread over the valid points */
                const int64_t size = kiln_family_space_size(fam);
                int64_t n_valid = 0, step = 0;
                for (int64_t k = 0; k < size; k++) {
                    kiln_family_point(fam, k, pt);
                    n_valid += kiln_family_point_ok(fam, p, &m, pt);
                }
                for (int64_t k = 0, seen = 0; k < size; k++) {
                    kiln_family_point(fam, k, pt);
                    if (!kiln_family_point_ok(fam, p, &m, pt))
                        continue;
                    if (seen++ == step) {
                        compile_point(p, &m, pt, 0);
                        step += n_valid / SPREAD + 1;
                    }
                }
            }
        }
        kiln_problem_free(p);
    }
    kiln_problem *p = load(DATA, "scaled_mm_e4m3_e5m2_f32");
    kiln_match m;
    char why[512] = "";
    assert_int_equal(fam->match(p, &m, why, sizeof why), 0);
    if (!strstr(why, "one fp8 format for both"))
        fail_msg("e4m3 by e5m2 declined with '%s'", why);
    kiln_problem_free(p);
}

static void test_compile(void **state) {
    (void)state;
    if (!kiln_cuda_have_nvrtc()) {
        printf("SKIP: no NVRTC here (the CUDA toolkit's libnvrtc): cannot compile for sm_90a\n");
        skip();
    }
    const int64_t size = kiln_family_space_size(fam);
    for (size_t i = 0; i < N_MATCHES; i++) {
        kiln_problem *p = load(MATCHES[i].base, MATCHES[i].dir);
        kiln_match m;
        match_ok(p, &m);
        int64_t pt[KILN_FAMILY_MAX_PARAMS], n_valid = 0;
        int64_t *valid =
            malloc((size_t)size * sizeof *valid); /* the spread spans every valid point */
        assert_non_null(valid);
        for (int64_t k = 0; k < size; k++) {
            kiln_family_point(fam, k, pt);
            if (kiln_family_point_ok(fam, p, &m, pt))
                valid[n_valid++] = k;
        }
        assert_true(n_valid > 0);
        int from_rule = 0;
        int64_t start = kiln_family_start_index(fam, p, &m, size, &from_rule);
        assert_true(start >= 0 && from_rule);
        kiln_family_point(fam, start, pt);
        compile_point(p, &m, pt, 1);
        /* the big problem gets the spread; the small ones their start point */
        if (strcmp(MATCHES[i].base, BENCH) == 0)
            for (int k = 0; k < SPREAD && k < n_valid; k++) {
                int64_t idx = valid[(int64_t)k * n_valid / (n_valid < SPREAD ? n_valid : SPREAD)];
                if (idx == start)
                    continue;
                kiln_family_point(fam, idx, pt);
                compile_point(p, &m, pt, 0);
            }
        free(valid);
        kiln_problem_free(p);
    }
}

int main(void) {
    fam = kiln_family_find("wgmma");
    if (!fam) {
        fprintf(stderr, "the wgmma family is not linked in\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_match),
        cmocka_unit_test(test_tensormaps),
        cmocka_unit_test(test_declines),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_cluster_split_epilogue),
        cmocka_unit_test(test_gated),
        cmocka_unit_test(test_tma_epilogue),
        cmocka_unit_test(test_fp8),
        cmocka_unit_test(test_compile),
    };
    return cmocka_run_group_tests_name("family_wgmma", tests, NULL, NULL);
}
