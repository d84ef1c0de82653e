/* test_family_attention.c: the attention family without a GPU: what the matcher reads from the
 * eager chain, SDPA calls and hand-written problems (variants, heads, head dim, scale, the mask's
 * band), what it declines and why, the constraints' reasons, flops counted at the band's share, and
 * that every start point and an even spread of the valid points of the rows
 * (bench/attention) and of the cpu test problems compile for sm_90 with NVRTC without a stack frame
 * (no spills). */
#include <ctype.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "backend/cubin.h"
#include "backend/nvrtc.h"
#include "formats/safetensors.h"
#include "gen/attention.h"
#include "gen/family.h"

#include "compile_check.h"
#include "emu_host.h"

#define DATA KILN_SOURCE_DIR "/tests/data/families/attention"
#define ROWS KILN_SOURCE_DIR "/bench/attention"
#define SPREAD 6
#define SMX_EMU KILN_SOURCE_DIR "/tests/data/families/softmax/emu"
#define ATT_EMU KILN_SOURCE_DIR "/tests/data/families/attention/emu"
#define SOLBENCH KILN_SOURCE_DIR "/tests/data/solbench"
#define PAGED_PREFILL "gqa_paged_prefill_causal_h4_kv2_d64_ps16"
#define PAGED_DECODE "gqa_paged_decode_h4_kv2_d64_ps16"

static const kiln_family *att;

static void reset(kiln_match *m) {
    memset(m, 0, sizeof *m);
    for (int k = 0; k < 8; k++)
        m->input_of_role[k] = -1;
    for (int k = 0; k < 4; k++)
        m->output_of_role[k] = -1;
}

static kiln_problem *load(const char *dir, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    kiln_problem *p = NULL;
    kiln_err err;
    if (kiln_problem_load(path, &p, &err) != KILN_OK)
        fail_msg("%s: %s", name, err.msg);
    return p;
}

static kiln_problem *parse(const char *def, const char *wl) {
    kiln_problem *p = NULL;
    kiln_err err;
    if (kiln_problem_parse(def, strlen(def), "t", wl, strlen(wl), "t", &p, &err) != KILN_OK)
        fail_msg("parse: %s", err.msg);
    return p;
}

static void match_ok(const kiln_problem *p, kiln_match *m) {
    char why[512] = "";
    reset(m);
    if (!att->match(p, m, why, sizeof why))
        fail_msg("%s declined: %s", p->name, why);
}

typedef struct {
    const char *dir, *name, *variant;
    int hq, hkv, d, band, has_lo, lo;
    double scale;
    int exact; /* the mask is exactly the band (0 inside): generated, "inside": 0 assumed */
} expect;

static const expect EXPECTED[] = {
    {DATA, "gqa_bf16_causal", "attention_causal_mask_gqa", 4, 2, 64, 1, 0, 0, 0.125, 0},
    {DATA, "f32_unmasked", "attention", 2, 2, 32, 0, 0, 0, 0.17677669529663687, 0},
    {DATA, "sliding_bf16", "attention_sliding_gqa", 2, 1, 64, 1, 1, -47, 0.125, 0},
    {DATA, "sdpa_bf16_causal", "attention_causal_gqa", 4, 2, 64, 1, 0, 0, 0.125, 0},
    {DATA, "gemma_small_captured", "attention_mask_gqa", 2, 1, 64, 0, 0, 0, 1.0, 0},
    /* head dim 40, padded with zero columns by the CUDA kernels (48 mma.sync, 64 wgmma) */
    {DATA, "sdpa_bf16_d40", "attention", 4, 4, 40, 0, 0, 0, 0.15811388300841897, 0},
    {ROWS, "attn_gemma4_sliding512_1x8x4x4096x256", "attention_sliding_gqa", 8, 4, 256, 1, 1, -511,
     1.0, 1},
    {ROWS, "attn_gemma4_causal_1x8x4x4096x256", "attention_causal_mask_gqa", 8, 4, 256, 1, 0, 0,
     1.0, 1},
    {ROWS, "attn_gemma4_full512_1x8x4x4096x512", "attention_causal_mask_gqa", 8, 4, 512, 1, 0, 0,
     1.0, 1},
    /* the same window as one SDPA call with a boolean mask: exactly the band, generated */
    {ROWS, "attn_sdpa_sliding512_bool_1x8x4x4096x256", "attention_sliding_gqa", 8, 4, 256, 1, 1,
     -511, 1.0, 1},
    {ROWS, "attn_causal_4x32x8x4096x128", "attention_causal_gqa", 32, 8, 128, 1, 0, 0,
     0.08838834764831845, 0},
    {ROWS, "attn_dense_16x16x1024x64", "attention", 16, 16, 64, 0, 0, 0, 0.125, 0},
    /* BERT's boolean padding mask, read a score at a time */
    {ROWS, "attn_bert_padding_32x12x512x64", "attention_mask", 12, 12, 64, 0, 0, 0, 0.125, 0},
    {ROWS, "attn_decode_64x32x8x4096x128", "attention_gqa", 32, 8, 128, 0, 0, 0,
     0.08838834764831845, 0},
    /* head dims the kernels pad with zero columns: 40 (to 48, or 64 with wgmma), 80 (128 with
       wgmma) */
    {ROWS, "attn_sd15_self_2x8x4096x40", "attention", 8, 8, 40, 0, 0, 0, 0.15811388300841897, 0},
    {ROWS, "attn_sd15_cross_2x8x4096x77x40", "attention", 8, 8, 40, 0, 0, 0, 0.15811388300841897,
     0},
    {ROWS, "attn_phi2_causal_4x32x2048x80", "attention_causal", 32, 32, 80, 1, 0, 0,
     0.11180339887498948, 0},
};
#define N_EXPECTED (sizeof EXPECTED / sizeof EXPECTED[0])

static void test_match(void **state) {
    (void)state;
    for (size_t i = 0; i < N_EXPECTED; i++) {
        const expect *e = &EXPECTED[i];
        kiln_problem *p = load(e->dir, e->name);
        kiln_match m;
        match_ok(p, &m);
        if (strcmp(m.variant, e->variant) != 0)
            fail_msg("%s: variant %s, expected %s", e->name, m.variant, e->variant);
        assert_int_equal((int)kiln_match_get(&m, "hq", 0), e->hq);
        assert_int_equal((int)kiln_match_get(&m, "hkv", 0), e->hkv);
        assert_int_equal((int)kiln_match_get(&m, "d", 0), e->d);
        assert_int_equal((int)kiln_match_get(&m, "band", -1), e->band);
        assert_int_equal((int)kiln_match_get(&m, "has_lo", -1), e->has_lo);
        if (e->has_lo)
            assert_int_equal((int)kiln_match_get(&m, "lo", 0), e->lo);
        if (e->band)
            assert_int_equal((int)kiln_match_get(&m, "hi", -1), 0);
        assert_int_equal((int)kiln_match_get(&m, "band_exact", -1), e->exact);
        assert_float_equal(kiln_match_get(&m, "scale", 0), e->scale, 1e-12);
        /* what its kernels assume of the mask's contents: the band it skips outside, when a mask
         * tensor is given (SDPA's is_causal generates its own) */
        cJSON *a = att->assumes(p, &m, 1);
        const int mi = m.input_of_role[ATT_MASK];
        if (e->band && kiln_match_get(&m, "mask", 0) == 1) {
            const cJSON *s = cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(a, p->inputs[mi].name), "structure");
            assert_string_equal(cJSON_GetObjectItemCaseSensitive(s, "kind")->valuestring, "band");
            const cJSON *lower = cJSON_GetObjectItemCaseSensitive(s, "lower");
            assert_true(e->has_lo ? cJSON_IsNumber(lower) && lower->valuedouble == e->lo
                                  : cJSON_IsNull(lower));
            assert_true(cJSON_GetObjectItemCaseSensitive(s, "upper")->valuedouble == 0);
            const cJSON *inside = cJSON_GetObjectItemCaseSensitive(s, "inside");
            assert_true(e->exact ? cJSON_IsNumber(inside) && inside->valuedouble == 0 : !inside);
            assert_int_equal(cJSON_GetArraySize(a), 1);
            /* the cpu kernel adds the mask: it assumes the band alone */
            cJSON *c = att->assumes(p, &m, 0);
            assert_null(cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(
                    cJSON_GetObjectItemCaseSensitive(c, p->inputs[mi].name), "structure"),
                "inside"));
            cJSON_Delete(c);
        } else {
            assert_null(a);
        }
        cJSON_Delete(a);
        kiln_problem_free(p);
    }
}

/* The Gemma-4 chain's roundings: bf16 scores, scaled and masked in bf16. The sliding test problem
 * adds a float32 mask: no rounding after the add. */
static void test_roundings(void **state) {
    (void)state;
    kiln_match m;
    kiln_problem *p = load(ROWS, "attn_gemma4_causal_1x8x4x4096x256");
    match_ok(p, &m);
    assert_int_equal((int)kiln_match_get(&m, "round_qk", 0), 1);
    assert_int_equal((int)kiln_match_get(&m, "round_scaled", 0), 1);
    assert_int_equal((int)kiln_match_get(&m, "round_masked", 0), 1);
    kiln_problem_free(p);
    p = load(DATA, "sliding_bf16");
    match_ok(p, &m);
    assert_int_equal((int)kiln_match_get(&m, "round_scaled", 0), 1);
    assert_int_equal((int)kiln_match_get(&m, "round_masked", 1), 0);
    kiln_problem_free(p);
}

#define QKV_F32(sq, hk)                                                                            \
    "\"inputs\": {\"q\": {\"shape\": [\"2\", \"4\", \"" sq                                         \
    "\", \"64\"], \"dtype\": \"float32\"}, "                                                       \
    "\"k\": {\"shape\": [\"2\", \"" hk "\", \"16\", \"64\"], \"dtype\": \"float32\"}, "            \
    "\"v\": {\"shape\": [\"2\", \"" hk "\", \"16\", \"64\"], \"dtype\": \"float32\"}"
#define OUT_F32                                                                                    \
    "\"outputs\": {\"o\": {\"shape\": [\"2\", \"4\", \"16\", \"64\"], \"dtype\": \"float32\"}}"
#define REF "\"reference\": \"def run(q, k, v):\\n    return q\\n\""
#define WL                                                                                         \
    "{\"uuid\": \"a\", \"axes\": {}, \"inputs\": {\"q\": {\"type\": \"random\"}, \"k\": "          \
    "{\"type\": "                                                                                  \
    "\"random\"}, \"v\": {\"type\": \"random\"}}}\n"
#define WL_MASK                                                                                    \
    "{\"uuid\": \"a\", \"axes\": {}, \"inputs\": {\"q\": {\"type\": \"random\"}, \"k\": "          \
    "{\"type\": "                                                                                  \
    "\"random\"}, \"v\": {\"type\": \"random\"}, \"mask\": {\"type\": \"random\"}}}\n"
#define CHAIN(mid)                                                                                 \
    "\"kiln\": {\"kind\": \"chain\", \"ops\": [{\"aten\": \"aten::transpose.int\", \"args\": "     \
    "[{\"ref\": \"k\"}, 2, 3], \"out\": \"kt\"}, {\"aten\": \"aten::matmul.default\", \"args\": "  \
    "[{\"ref\": \"q\"}, {\"ref\": \"kt\"}], \"out\": \"s\"}, " mid ", {\"aten\": "                 \
    "\"aten::matmul.default\", \"args\": [{\"ref\": \"p\"}, {\"ref\": \"v\"}], \"out\": \"o\"}], " \
    "\"outputs\": [\"o\"]}"
#define SOFTMAX                                                                                    \
    "{\"aten\": \"aten::_softmax.default\", \"args\": [{\"ref\": \"s\"}, -1, false], \"out\": "    \
    "\"p\"}"

static void decline(const char *def, const char *reason) {
    kiln_problem *p = parse(def, strstr(def, "\"mask\"") ? WL_MASK : WL);
    kiln_match m;
    reset(&m);
    char why[512] = "";
    if (att->match(p, &m, why, sizeof why))
        fail_msg("matched (%s), expected a decline: %s", m.variant, reason);
    if (!strstr(why, reason))
        fail_msg("declined with '%s', expected '%s'", why, reason);
    kiln_problem_free(p);
}

static void test_declines(void **state) {
    (void)state;
    static const char head[] = "{\"name\": \"t\", \"axes\": {}, ";
    char def[4096];
    /* the chain proves itself: a plain one matches */
    snprintf(def, sizeof def,
             "%s" QKV_F32("16", "2") "}, " OUT_F32 ", " REF ", " CHAIN(SOFTMAX) "}", head);
    kiln_problem *p = parse(def, WL);
    kiln_match m;
    match_ok(p, &m);
    kiln_problem_free(p);
    snprintf(def, sizeof def,
             "%s" QKV_F32("16", "2") "}, " OUT_F32 ", " REF ", " CHAIN(
                 "{\"aten\": \"aten::_log_softmax.default\", \"args\": [{\"ref\": \"s\"}, -1, "
                 "false], \"out\": \"p\"}") "}",
             head);
    decline(def, "_log_softmax");
    snprintf(def, sizeof def,
             "%s" QKV_F32("16", "2") "}, " OUT_F32 ", " REF ", " CHAIN(
                 "{\"aten\": \"aten::_softmax.default\", \"args\": [{\"ref\": \"s\"}, -1, "
                 "false], \"out\": \"p0\"}, {\"aten\": \"aten::dropout.default\", \"args\": "
                 "[{\"ref\": \"p0\"}, 0.1, true], \"out\": \"p\"}") "}",
             head);
    decline(def, "dropout with p > 0");
    snprintf(def, sizeof def,
             "%s" QKV_F32("16", "2") "}, " OUT_F32 ", " REF ", " CHAIN(
                 "{\"aten\": \"aten::_softmax.default\", \"args\": [{\"ref\": \"s\"}, 2, "
                 "false], \"out\": \"p\"}") "}",
             head);
    decline(def, "not over the keys");
    snprintf(def, sizeof def,
             "%s" QKV_F32("16", "3") "}, " OUT_F32 ", " REF ", " CHAIN(SOFTMAX) "}", head);
    decline(def, "not a multiple of 3 kv heads");
    /* an integer mask is neither an addition nor SDPA's boolean keep-mask */
    snprintf(def, sizeof def,
             "%s" QKV_F32("16", "2") ", \"mask\": {\"shape\": [\"16\", \"16\"], \"dtype\": "
                                     "\"int64\"}}, " OUT_F32 ", " REF
                                     ", \"kiln\": {\"kind\": \"aten\", \"aten\": "
                                     "\"aten::scaled_dot_product_attention.default\", \"args\": "
                                     "{\"args\": [{\"tensor\": 0}, {\"tensor\": 1}, {\"tensor\": "
                                     "2}, {\"tensor\": 3}], \"kwargs\": {}}}}",
             head);
    decline(def, "is int64");
    snprintf(def, sizeof def,
             "%s" QKV_F32("16", "2") "}, " OUT_F32 ", " REF
                                     ", \"kiln\": {\"kind\": \"aten\", \"aten\": "
                                     "\"aten::scaled_dot_product_attention.default\", \"args\": "
                                     "{\"args\": [{\"tensor\": 0}, {\"tensor\": 1}, {\"tensor\": "
                                     "2}, null, 0.5], \"kwargs\": {}}}}",
             head);
    decline(def, "dropout_p > 0");
    snprintf(def, sizeof def,
             "%s" QKV_F32("16", "2") "}, " OUT_F32 ", " REF
                                     ", \"kiln\": {\"kind\": \"aten\", \"aten\": "
                                     "\"aten::_softmax.default\", \"args\": {\"args\": "
                                     "[{\"tensor\": 0}, -1, false], \"kwargs\": {}}}}",
             head);
    decline(def, "is not attention");
    /* the output stored [b, s, h, d] (what SDPA returns on the cpu) matches, with its strides in
     * the kernel's arguments; with d not innermost it is declined */
    static const char sdpa_out[] =
        "\"outputs\": {\"o\": {\"shape\": [\"2\", \"16\", \"4\", \"64\"], \"dtype\": \"float32\"}}";
    static const char sdpa_kiln[] =
        ", \"kiln\": {\"kind\": \"aten\", \"aten\": "
        "\"aten::scaled_dot_product_attention.default\", "
        "\"args\": {\"args\": [{\"tensor\": 0}, {\"tensor\": 1}, {\"tensor\": 2}], \"kwargs\": "
        "{\"enable_gqa\": true}}, \"layouts\": {\"o\": {\"stored\": \"memory_order\", "
        "\"stored_shape\": [2, 16, 4, 64], \"permute\": [%s]}}}}";
    char kiln_part[1024];
    snprintf(kiln_part, sizeof kiln_part, sdpa_kiln, "0, 2, 1, 3");
    snprintf(def, sizeof def, "%s" QKV_F32("16", "2") "}, %s, " REF "%s", head, sdpa_out,
             kiln_part);
    p = parse(def, WL);
    match_ok(p, &m);
    int64_t pt[KILN_MAX_PARAMS];
    assert_int_equal(att->start(p, &m, pt), 0);
    char *src = att->emit(p, &m, pt, 0);
    /* b: 16*4*64, h: 64, s: 4*64 */
    if (!strstr(src, "a.oh = ((int64_t)(4) == 1 ? (int64_t)0 : (int64_t)1*(int64_t)(64))") ||
        !strstr(src,
                "a.os = ((int64_t)(16) == 1 ? (int64_t)0 : (int64_t)1*(int64_t)(4)*(int64_t)(64))"))
        fail_msg("the output's strides are not [b, s, h, d]'s:\n%s", src);
    free(src);
    kiln_problem_free(p);
    snprintf(kiln_part, sizeof kiln_part, sdpa_kiln, "0, 2, 3, 1");
    snprintf(def, sizeof def, "%s" QKV_F32("16", "2") "}, %s, " REF "%s", head,
             "\"outputs\": {\"o\": {\"shape\": [\"2\", \"16\", \"64\", \"4\"], \"dtype\": "
             "\"float32\"}}",
             kiln_part);
    decline(def, "the head dim of o is not innermost in memory");
}

static int64_t point_of(const int64_t bm, const int64_t bn, const int64_t warps,
                        const int64_t stages, int64_t *pt) {
    pt[0] = bm, pt[1] = bn, pt[2] = warps, pt[3] = stages, pt[4] = 0, pt[5] = 0, pt[6] = 0,
    pt[7] = 1, pt[8] = 0;
    return kiln_family_point_index(att, pt);
}

static void check_reason(const kiln_problem *p, const kiln_match *m, const int64_t *pt,
                         const char *reason) {
    const char *why = att->check(p, m, pt);
    if (!reason) {
        if (why)
            fail_msg("rejected: %s", why);
        return;
    }
    if (!why || !strstr(why, reason))
        fail_msg("check said '%s', expected '%s'", why ? why : "(valid)", reason);
}

static void test_check(void **state) {
    (void)state;
    int64_t pt[KILN_FAMILY_MAX_PARAMS];
    kiln_match m;
    char *src;
    kiln_problem *p = load(ROWS, "attn_gemma4_sliding512_1x8x4x4096x256");
    match_ok(p, &m);
    assert_true(point_of(64, 64, 4, 2, pt) >= 0);
    check_reason(p, &m, pt, NULL);
    point_of(64, 64, 8, 2, pt);
    check_reason(p, &m, pt, "16 query rows");
    point_of(64, 64, 4, 3, pt); /* (64 + 384) rows of 264 halves: 236 KB */
    check_reason(p, &m, pt, "227 KiB");
    point_of(64, 128, 4, 2, pt);
    check_reason(p, &m, pt, "227 KiB");
    kiln_problem_free(p);
    p = load(ROWS, "attn_decode_64x32x8x4096x128");
    match_ok(p, &m);
    point_of(128, 64, 8, 2, pt);
    check_reason(p, &m, pt, "beyond the queries");
    kiln_problem_free(p);
    /* three consumer warpgroups (192 rows) and tiles of 80, 96, 160, 192 keys: wgmma only; their
     * registers as measured (regs_allowed): 192 x 128 at head dim 64 fits 160 a consumer (the
     * producer keeps 32), 192 x 160 does not */
    p = load(ROWS, "attn_dense_16x16x1024x64");
    match_ok(p, &m);
    point_of(192, 128, 12, 2, pt);
    check_reason(p, &m, pt, "three consumer warpgroups");
    pt[5] = 1;
    check_reason(p, &m, pt, NULL);
    src = att->emit(p, &m, pt, 1);
    if (!strstr(src, "#define ATT_REG_PRODUCER 32\n#define ATT_REG_CONSUMER 160\n") ||
        !strstr(src, "block=512 "))
        fail_msg("192 rows are not a producer and three consumer warpgroups:\n%.3000s", src);
    free(src);
    pt[6] = 1; /* ping-pong round three warpgroups */
    check_reason(p, &m, pt, NULL);
    src = att->emit(p, &m, pt, 1);
    if (!strstr(src, "#define ATT_PP 1\n"))
        fail_msg("ping-pong not emitted:\n%.2000s", src);
    free(src);
    pt[6] = 0;
    pt[1] = 160;
    check_reason(p, &m, pt, "accumulators exceed");
    point_of(64, 96, 4, 2, pt);
    check_reason(p, &m, pt, "mma.sync takes tiles");
    pt[5] = 1;
    check_reason(p, &m, pt, NULL);
    pt[6] = 1;
    check_reason(p, &m, pt, "several consumer warpgroups");
    kiln_problem_free(p);
    /* a mask tensor read: its values stay live through the split softmax (80-key tiles spilled) */
    p = load(ROWS, "attn_bert_padding_32x12x512x64");
    match_ok(p, &m);
    point_of(128, 64, 8, 2, pt);
    pt[5] = 1;
    check_reason(p, &m, pt, NULL);
    pt[1] = 80;
    check_reason(p, &m, pt, "accumulators exceed");
    kiln_problem_free(p);
    p = load(DATA, "f32_unmasked");
    match_ok(p, &m);
    point_of(64, 64, 4, 2, pt);
    check_reason(p, &m, pt, NULL);
    point_of(64, 32, 4, 2, pt);
    check_reason(p, &m, pt, "float32");
    kiln_problem_free(p);
    /* head dim 512: wgmma only, a row tile's V and O columns over two blocks (ATT_DSPLIT), each
     * with Q, and K and its 256 columns of V per stage: 128 rows of 32-key tiles in two stages are
     * (128 * 512 + 2 * 32 * 768) * 2 = 224 KiB, 64-key tiles are not */
    p = load(ROWS, "attn_gemma4_full512_1x8x4x4096x512");
    match_ok(p, &m);
    point_of(128, 32, 8, 2, pt);
    check_reason(p, &m, pt, "take wgmma");
    pt[5] = 1;
    check_reason(p, &m, pt, NULL);
    pt[1] = 64;
    check_reason(p, &m, pt, "227 KiB");
    assert_int_equal(att->start(p, &m, pt), 0);
    assert_int_equal(pt[1], 32);
    assert_int_equal(pt[5], 1);
    src = att->emit(p, &m, pt, 1);
    if (!strstr(src, "#define ATT_DSPLIT 2\n") || !strstr(src, ",(1)*2) block=384") ||
        !strstr(src, "wgmma.mma_async.sync.aligned.m64n256k16"))
        fail_msg("head dim 512 is not two blocks of 256 output columns a row tile:\n%.3000s", src);
    free(src);
    kiln_problem_free(p);
}

/* The start rule's point of a problem in dir (BLOCK_M, BLOCK_N, WARPS, STAGES, PACK, WG, PP, MINB,
 * PERSIST), and the Q buffers and shared memory its source asks for. */
static void expect_start(const char *dir, const char *row, const int64_t *want, int qbuf,
                         long smem) {
    kiln_problem *p = load(dir, row);
    kiln_match m;
    match_ok(p, &m);
    int64_t pt[KILN_MAX_PARAMS];
    assert_int_equal(att->start(p, &m, pt), 0);
    for (int i = 0; i < 9; i++)
        if (pt[i] != want[i])
            fail_msg("%s: the start rule's %s is %lld, not %lld", row, att->params[i].name,
                     (long long)pt[i], (long long)want[i]);
    char *src = att->emit(p, &m, pt, 1), line[64], launch[64];
    snprintf(line, sizeof line, "#define ATT_QBUF %d\n", qbuf);
    snprintf(launch, sizeof launch, " smem=%ld\n", smem);
    if (!strstr(src, line) || !strstr(src, launch))
        fail_msg("%s: not %d Q buffers in %ld bytes of shared memory:\n%.1500s", row, qbuf, smem,
                 src);
    free(src);
    kiln_problem_free(p);
}

/* The start points the 43rd and 44th sessions' sweeps chose (bench/RESULTS.md): head dim 64
 * unmasked, 192 x 128 in a persistent grid with two Q buffers; causal head dim 128, 192 x 80, one
 * block a row tile; BERT's padded mask, two blocks of 64 rows an SM, persistent; Gemma-4's head
 * dim 256, 128 x 64 in two stages; decode, two blocks of 32-key tiles; a paged prefill, 128 x 128
 * persistent; head dims padded to the MMAs' granule (the 46th session). A persistent grid's second
 * Q buffer only where shared memory holds it. */
static void test_start_rule(void **state) {
    (void)state;
    expect_start(ROWS, "attn_dense_16x16x1024x64", (int64_t[]){192, 128, 12, 3, 0, 1, 0, 1, 1}, 2,
                 (2 * 192 * 64 + 3 * 128 * 128) * 2 + 1024 + 8 * (4 + 12));
    expect_start(ROWS, "attn_causal_4x32x8x4096x128", (int64_t[]){192, 80, 12, 3, 1, 1, 0, 1, 0}, 1,
                 (192 * 128 + 3 * 80 * 256) * 2 + 1024 + 8 * (2 + 12));
    expect_start(ROWS, "attn_bert_padding_32x12x512x64", (int64_t[]){64, 64, 4, 3, 0, 1, 0, 2, 1},
                 2, (2 * 64 * 64 + 3 * 64 * 128) * 2 + 1024 + 8 * (4 + 12));
    expect_start(ROWS, "attn_gemma4_causal_1x8x4x4096x256",
                 (int64_t[]){128, 64, 8, 2, 1, 1, 0, 1, 0}, 1,
                 (128 * 256 + 2 * 64 * 512) * 2 + 1024 + 8 * (2 + 8));
    expect_start(ROWS, "attn_decode_64x32x8x4096x128", (int64_t[]){64, 32, 4, 2, 1, 1, 0, 2, 0}, 1,
                 (64 * 128 + 2 * 32 * 256) * 2 + 1024 + 8 * (2 + 8));
    /* padded head dims (dk_of): SD 1.5's 40 as 64 on wgmma, the head dim 64 rule; over its 77 text
     * tokens mma.sync, padded to 48, one tile of 128 keys; Phi-2's causal 80 as 128 over 2048 keys,
     * two consumer warpgroups (not three: 192 x 80 was slower there) */
    expect_start(ROWS, "attn_sd15_self_2x8x4096x40", (int64_t[]){192, 128, 12, 3, 0, 1, 0, 1, 1}, 2,
                 (2 * 192 * 64 + 3 * 128 * 128) * 2 + 1024 + 8 * (4 + 12));
    expect_start(ROWS, "attn_sd15_cross_2x8x4096x77x40", (int64_t[]){128, 128, 8, 2, 0, 0, 0, 1, 0},
                 1, (128 + 2 * 2 * 128) * (48 + 8) * 2);
    expect_start(ROWS, "attn_phi2_causal_4x32x2048x80", (int64_t[]){128, 128, 8, 3, 0, 1, 0, 1, 0},
                 1, (128 * 128 + 3 * 128 * 256) * 2 + 1024 + 8 * (2 + 12));
    /* a paged prefill (SOL-ExecBench's form): persistent, in two stages so that two Q tiles fit */
    expect_start(SOLBENCH, "gqa_paged_prefill_causal_h4_kv2_d64_ps16",
                 (int64_t[]){128, 128, 8, 2, 1, 1, 0, 1, 1}, 2,
                 (2 * 128 * 64 + 2 * 128 * 128) * 2 + 1024 + 8 * (4 + 8));
    /* Gemma-4's point in a persistent grid: two Q tiles of 128 x 256 and the K/V stages are more
     * than 227 KiB, so one */
    kiln_problem *p = load(ROWS, "attn_gemma4_causal_1x8x4x4096x256");
    kiln_match m;
    match_ok(p, &m);
    int64_t pt[KILN_MAX_PARAMS];
    assert_int_equal(att->start(p, &m, pt), 0);
    pt[8] = 1;
    check_reason(p, &m, pt, NULL);
    char *src = att->emit(p, &m, pt, 1);
    if (!strstr(src, "#define ATT_QBUF 1\n"))
        fail_msg("Gemma-4's persistent point asks for two Q buffers");
    free(src);
    kiln_problem_free(p);
}

/* Causal rows count half the pairs (and the diagonal); a window of 512 keeps 512 keys a row. */
static void test_flops(void **state) {
    (void)state;
    kiln_match m;
    kiln_problem *p = load(ROWS, "attn_gemma4_causal_1x8x4x4096x256");
    match_ok(p, &m);
    const double full = 4.0 * 8 * 4096.0 * 4096.0 * 256;
    assert_float_equal(att->flops(p, &m, &p->workloads[0]),
                       full * (4096.0 * 4097 / 2) / (4096.0 * 4096), 1);
    kiln_problem_free(p);
    p = load(ROWS, "attn_gemma4_sliding512_1x8x4x4096x256");
    match_ok(p, &m);
    const double kept = 512.0 * 513 / 2 + (4096.0 - 512) * 512;
    assert_float_equal(att->flops(p, &m, &p->workloads[0]), 4.0 * 8 * 256 * kept, 1);
    kiln_problem_free(p);
    p = load(ROWS, "attn_dense_16x16x1024x64");
    match_ok(p, &m);
    assert_float_equal(att->flops(p, &m, &p->workloads[0]), 4.0 * 16 * 16 * 1024 * 1024 * 64, 1);
    kiln_problem_free(p);
}

/* The point's `// kiln:` lines parse and plan for every workload (wgmma's tensor maps of K and V
 * among them: within the TMA unit's limits and their tensors), then it compiles (compile_check). */
static void compile_point(const kiln_problem *p, const kiln_match *m, const int64_t *pt,
                          int is_start) {
    char *src = att->emit(p, m, pt, 1);
    kiln_abi abi;
    kiln_err err;
    if (kiln_abi_parse(src, 1, &abi, &err))
        fail_msg("%s: the directives do not parse: %s", p->name, err.msg);
    /* wgmma: K and V by TMA (a paged cache's pages of 16 rows too), but for K stored broadcast (the
     * captured Gemma-4 --small block's) */
    const int tma = pt[5] && !strstr(p->name, "gemma_small");
    assert_int_equal(abi.n_tmaps, tma ? 2 : 0);
    for (int wi = 0; wi < p->n_workloads; wi++) {
        kiln_launch_plan plan;
        if (kiln_abi_plan(&abi, p, &p->workloads[wi], &plan, &err))
            fail_msg("%s workload %d: the directives do not plan: %s", p->name, wi, err.msg);
    }
    kiln_abi_free(&abi);
    free(src);
    compile_check(att, p, m, pt, NULL, "attention_kernel", is_start, 1);
}

/* The start point (and in a persistent grid, ATT_PERSIST) and an even spread of the valid points
 * of p compile without spills: a spread of the mma.sync points and one of the wgmma points
 * (ATT_WG), each for one block an SM and for two (ATT_MINB). */
static void compile_spread(kiln_problem *p) {
    const int64_t size = kiln_family_space_size(att);
    kiln_match m;
    match_ok(p, &m);
    int64_t pt[KILN_FAMILY_MAX_PARAMS];
    int from_rule = 0;
    int64_t start = kiln_family_start_index(att, p, &m, size, &from_rule);
    assert_true(start >= 0 && from_rule);
    kiln_family_point(att, start, pt);
    compile_point(p, &m, pt, 1);
    pt[8] = 1; /* the start point in a persistent grid */
    if (kiln_family_point_ok(att, p, &m, pt))
        compile_point(p, &m, pt, 0);
    for (int wg = 0; wg < 4; wg++) {
        int64_t valid[64], n_valid = 0;
        for (int64_t k = 0; k < size && n_valid < 64; k++) {
            kiln_family_point(att, k, pt);
            if (pt[5] == wg % 2 && pt[7] == 1 + wg / 2 && kiln_family_point_ok(att, p, &m, pt))
                valid[n_valid++] = k;
        }
        /* mma.sync holds a head dim of up to 256 (over that: wgmma, two blocks a row tile) */
        assert_true(n_valid > 0 || wg > 0 || kiln_match_get(&m, "d", 0) > 256);
        for (int k = 0; k < SPREAD && k < n_valid; k++) {
            int64_t idx = valid[(int64_t)k * n_valid / (n_valid < SPREAD ? n_valid : SPREAD)];
            if (idx == start)
                continue;
            kiln_family_point(att, idx, pt);
            compile_point(p, &m, pt, 0);
        }
    }
}

static void test_compile(void **state) {
    (void)state;
    if (!kiln_cuda_have_nvrtc()) {
        printf("SKIP: no NVRTC here (the CUDA toolkit's libnvrtc): cannot compile for sm_90\n");
        skip();
    }
    for (size_t i = 0; i < N_EXPECTED; i++) {
        kiln_problem *p = load(EXPECTED[i].dir, EXPECTED[i].name);
        compile_spread(p);
        kiln_problem_free(p);
    }
}

/* ---- FlashInfer's paged form (SOL-ExecBench's FlashInfer category) ---- */

/* A gqa_paged prefill definition with the index dtype, q's dtype and an extra input given. */
static kiln_problem *paged_def(const char *name, const char *index_dtype, const char *q_dtype,
                               const char *extra) {
    char *def = xasprintf(
        "{\"name\": \"%s\", \"op_type\": \"gqa_paged\", \"axes\": {"
        "\"t\": {\"type\": \"var\"}, \"n\": {\"type\": \"var\"}, \"pages\": {\"type\": "
        "\"var\"}, \"i\": {\"type\": \"var\"}}, \"inputs\": {"
        "\"q\": {\"shape\": [\"t\", \"4\", \"64\"], \"dtype\": \"%s\"}, "
        "\"k_cache\": {\"shape\": [\"pages\", \"16\", \"2\", \"64\"], \"dtype\": \"bfloat16\"}, "
        "\"v_cache\": {\"shape\": [\"pages\", \"16\", \"2\", \"64\"], \"dtype\": \"bfloat16\"}, "
        "\"qo_indptr\": {\"shape\": [\"n\"], \"dtype\": \"int32\"}, "
        "\"kv_indptr\": {\"shape\": [\"n\"], \"dtype\": \"int32\"}, "
        "\"kv_indices\": {\"shape\": [\"i\"], \"dtype\": \"%s\"}, "
        "\"sm_scale\": {\"shape\": null, \"dtype\": \"float32\"}%s}, "
        "\"outputs\": {\"output\": {\"shape\": [\"t\", \"4\", \"64\"], \"dtype\": \"%s\"}}, "
        "\"reference\": \"def run(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, "
        "sm_scale%s):\\n    return q\\n\"}",
        name, q_dtype, index_dtype,
        extra ? ", \"extra\": {\"shape\": [\"4\"], \"dtype\": "
                "\"float32\"}"
              : "",
        q_dtype, extra ? ", extra" : "");
    char *wl = xasprintf(
        "{\"uuid\": \"a\", \"axes\": {\"t\": 5, \"n\": 3, \"pages\": 4, \"i\": 3}, "
        "\"inputs\": {\"q\": {\"type\": \"random\"}, \"k_cache\": {\"type\": \"random\"}, "
        "\"v_cache\": {\"type\": \"random\"}, \"qo_indptr\": {\"type\": \"random\"}, "
        "\"kv_indptr\": {\"type\": \"random\"}, \"kv_indices\": {\"type\": \"random\"}, "
        "\"sm_scale\": {\"type\": \"scalar\", \"value\": 0.25}%s}}\n",
        extra ? ", \"extra\": {\"type\": \"random\"}" : "");
    kiln_problem *p = parse(def, wl);
    free(def);
    free(wl);
    return p;
}

static void test_paged(void **state) {
    (void)state;
    kiln_match m;
    kiln_problem *p = load(SOLBENCH, PAGED_PREFILL);
    match_ok(p, &m);
    assert_string_equal(m.variant, "attention_paged_prefill_causal_gqa");
    assert_int_equal(kiln_match_get(&m, "paged", 0), 1);
    assert_int_equal(kiln_match_get(&m, "decode", 1), 0);
    assert_int_equal(kiln_match_get(&m, "causal", 0), 1);
    assert_int_equal(kiln_match_get(&m, "page_size", 0), 16);
    assert_int_equal(kiln_match_get(&m, "lse", 0), 1);
    assert_int_equal(kiln_match_get(&m, "hq", 0), 4);
    assert_int_equal(kiln_match_get(&m, "hkv", 0), 2);
    assert_int_equal(kiln_match_get(&m, "d", 0), 64);
    assert_int_equal(kiln_match_get(&m, "b", 0), 3);   /* sequences of workload 0 */
    assert_int_equal(kiln_match_get(&m, "sq", 0), 66); /* its tokens */
    assert_float_equal(kiln_match_get(&m, "scale", 0), 0.125, 1e-12);
    static const char *const roles[] = {"q",         "k_cache",   "v_cache",    NULL,
                                        "qo_indptr", "kv_indptr", "kv_indices", "kv_last_page_len"};
    for (int r = 0; r < 8; r++)
        assert_int_equal(m.input_of_role[r], roles[r] ? kiln_problem_input_index(p, roles[r]) : -1);
    assert_int_equal(m.output_of_role[0], kiln_problem_output_index(p, "output"));
    assert_int_equal(m.output_of_role[1], kiln_problem_output_index(p, "lse"));
    /* 5 + 40·41/2 + (21 + 40·... ): the causal pairs of workload 0, from its stored page table */
    double pairs = 0;
    const int q_len[3] = {5, 40, 21}, kv_len[3] = {21, 40, 70};
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < q_len[b]; i++)
            pairs += i + kv_len[b] - q_len[b] + 1;
    assert_float_equal(att->flops(p, &m, &p->workloads[0]), 4.0 * 4 * 64 * pairs, 1e-6);
    /* bytes: the 131 keys' K and V rows (not the pool's 16 pages), q, output, lse, the tables */
    const double tables = (4 + 4 + 10 + 3) * 4.0, qo = 66 * 4 * 64 * 2.0;
    assert_float_equal(att->min_bytes(p, &m, &p->workloads[0]),
                       2 * 131 * 2 * 64 * 2.0 + 2 * qo + 66 * 4 * 4.0 + tables, 1e-6);
    kiln_problem_free(p);

    p = load(SOLBENCH, PAGED_DECODE);
    match_ok(p, &m);
    assert_string_equal(m.variant, "attention_paged_decode_gqa");
    assert_int_equal(kiln_match_get(&m, "decode", 0), 1);
    assert_int_equal(kiln_match_get(&m, "causal", 1), 0);
    assert_int_equal(kiln_match_get(&m, "sq", 0), 1);
    assert_int_equal(kiln_match_get(&m, "b", 0), 4);
    assert_int_equal(m.input_of_role[4], -1);
    /* one query over every cached token: 1 + 77 + 16 + 200 */
    assert_float_equal(att->flops(p, &m, &p->workloads[0]), 4.0 * 4 * 64 * 294, 1e-6);
    kiln_problem_free(p);

    /* the form without kv_last_page_len (page size 1 in FlashInfer-Bench) matches; not causal
     * unless the name says so */
    p = paged_def("gqa_paged_prefill_h4", "int32", "bfloat16", NULL);
    match_ok(p, &m);
    assert_string_equal(m.variant, "attention_paged_prefill_gqa");
    assert_int_equal(m.input_of_role[7], -1);
    assert_int_equal(m.output_of_role[1], -1);
    assert_float_equal(kiln_match_get(&m, "scale", 0), 0.25, 1e-12);
    kiln_problem_free(p);

    static const struct {
        const char *index, *q, *extra, *why;
    } declines[] = {
        {"int64", "bfloat16", NULL, "not a row-major 1-d int32"},
        {"int32", "float32", NULL, "bfloat16 or float16"},
        {"int32", "bfloat16", "extra", "inputs beyond the paged form"},
    };
    for (size_t i = 0; i < sizeof declines / sizeof declines[0]; i++) {
        p = paged_def("gqa_paged_prefill_causal", declines[i].index, declines[i].q,
                      declines[i].extra);
        char why[512] = "";
        reset(&m);
        assert_false(att->match(p, &m, why, sizeof why));
        if (!strstr(why, declines[i].why))
            fail_msg("decline %zu: '%s' does not say '%s'", i, why, declines[i].why);
        kiln_problem_free(p);
    }

    if (!kiln_cuda_have_nvrtc()) {
        printf("SKIP: no NVRTC here: the paged kernels are not compiled\n");
        return;
    }
    p = load(SOLBENCH, PAGED_PREFILL);
    compile_spread(p);
    kiln_problem_free(p);
    p = load(SOLBENCH, PAGED_DECODE);
    compile_spread(p);
    kiln_problem_free(p);
}

/* ---- the CUDA kernel's logic on the host emulator ---- */

/* The emitted CUDA as a cpu candidate running it on the emulator: emu_rt.h first, the hardware
 * section replaced by emu_att.h, the kernel a host function the entry point launches on the
 * (x, y, z) grid of its launch line. */
static char *emu_candidate(const char *cuda) {
    const char *hb = strstr(cuda, "// ---- hardware: begin");
    const char *he = strstr(cuda, "// ---- hardware: end ----");
    const char *launch = strstr(cuda, "// kiln: launch attention_kernel grid=(");
    const char *entry = strstr(cuda, "extern \"C\" __global__ void");
    assert_true(hb && he && launch && entry && hb < he && he < entry);
    const char *params = strstr(entry, "attention_kernel(") + strlen("attention_kernel(");
    const char *params_end = strstr(params, ") {");
    char *out =
        xstrdup("#include \"" SMX_EMU "/emu_rt.h\"\n#include \"" ATT_EMU "/emu_att_rt.h\"\n");
    size_t len = strlen(out);
    /* the CUDA headers stay out: emu_rt.h has the types */
    for (const char *line = cuda; line < hb;) {
        const char *eol = strchr(line, '\n');
        size_t n = eol ? (size_t)(eol - line) + 1 : strlen(line);
        if (strncmp(line, "#include <cuda_", 15) != 0)
            cat(&out, &len, line, n);
        line += n;
    }
    const char *hw = "#include \"" ATT_EMU "/emu_att.h\"\n";
    cat(&out, &len, hw, strlen(hw));
    cat(&out, &len, he, (size_t)(entry - he));
    const char *dev = "static void attention_kernel_device(";
    cat(&out, &len, dev, strlen(dev));
    cat(&out, &len, params, strlen(params));
    char *plist = xstrndup(params, (size_t)(params_end - params)), names[2048] = "", *save = NULL;
    for (char *p = strtok_r(plist, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        const char *nm = p + strlen(p);
        while (nm > p && (nm[-1] == '_' || isalnum((unsigned char)nm[-1])))
            nm--;
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", names[0] ? ", " : "",
                 nm);
    }
    free(plist);
    /* grid=(X,Y,Z) block=B smem=S */
    const char *g = launch + strlen("// kiln: launch attention_kernel grid=(");
    char gx[256], gy[256], gz[256];
    int depth = 0, part = 0;
    size_t k = 0;
    char *dst[3] = {gx, gy, gz};
    for (; *g && !(depth == 0 && *g == ')'); g++) {
        if (depth == 0 && *g == ',') {
            dst[part++][k] = 0;
            k = 0;
            continue;
        }
        depth += (*g == '(') - (*g == ')');
        dst[part][k++] = *g;
    }
    dst[part][k] = 0;
    assert_int_equal(part, 2);
    const char *eol = strchr(launch, '\n'), *b = strstr(launch, "block=") + 6;
    const char *sm = strstr(launch, "smem=");
    sm = sm && sm < eol ? sm + 5 : "0";
    char *wrapper = xasprintf(
        "\nextern \"C\" void attention_kernel(%.*s) {\n"
        "    att_emu_grid[0] = (unsigned)(%s);\n    att_emu_grid[1] = (unsigned)(%s);\n"
        "    att_emu_grid[2] = (unsigned)(%s);\n"
        "    emu_launch((int64_t)att_emu_grid[0] * att_emu_grid[1] * att_emu_grid[2], %.*s, 1, "
        "%.*s, 0, [&]() { attention_kernel_device(%s); });\n}\n",
        (int)(params_end - params), params, gx, gy, gz, (int)strcspn(b, " \n"), b,
        (int)strcspn(sm, " \n"), sm, names);
    cat(&out, &len, wrapper, strlen(wrapper));
    free(wrapper);
    return out;
}

/* Input i as workload 0 stores it in its safetensors file (a page table), into buf. */
static void stored_input(const kiln_problem *p, int i, void *buf, size_t bytes) {
    const kiln_input_desc *d = &p->workloads[0].inputs[i];
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", p->dir, d->path);
    kiln_st *st = NULL;
    kiln_err err;
    if (kiln_st_load(path, &st, &err) != KILN_OK)
        fail_msg("%s: %s", path, err.msg);
    const kiln_st_tensor *t = kiln_st_find(st, d->tensor_key);
    assert_non_null(t);
    assert_int_equal(t->n_bytes, bytes);
    memcpy(buf, t->data, bytes);
    kiln_st_free(st);
}

/* q, k, v normal; the mask (when the problem has one) the band of the match: `fill` outside it;
 * inputs the workload stores (a paged problem's page table) as stored. */
static void **make_inputs(const kiln_problem *p, const kiln_match *m, double fill) {
    void **in = xcalloc((size_t)p->n_inputs, sizeof *in);
    uint64_t s = 0x9e3779b97f4a7c15ULL;
    const int mask = m->input_of_role[3];
    const int has_lo = (int)kiln_match_get(m, "has_lo", 0);
    const int64_t lo = (int64_t)kiln_match_get(m, "lo", 0),
                  hi = (int64_t)kiln_match_get(m, "hi", 0);
    for (int i = 0; i < p->n_inputs; i++) {
        const kiln_tensor_spec *t = &p->inputs[i];
        int64_t shape[KILN_MAX_DIMS];
        size_t n = (size_t)kiln_tensor_shape(p, t, &p->workloads[0], shape);
        in[i] = xmalloc(n * kiln_dtype_size(t->dtype) + 16);
        if (p->workloads[0].inputs[i].kind == KILN_INPUT_SAFETENSORS) {
            stored_input(p, i, in[i], n * kiln_dtype_size(t->dtype));
            continue;
        }
        for (size_t e = 0; e < n; e++) {
            double v;
            if (i == mask) {
                int64_t kk = (int64_t)(e % (size_t)shape[t->ndim - 1]),
                        q = (int64_t)(e / (size_t)shape[t->ndim - 1] % (size_t)shape[t->ndim - 2]);
                v = kk - q > hi || (has_lo && kk - q < lo) ? fill : 0.0;
            } else {
                double u1 = 0, u2 = 0;
                s = s * 6364136223846793005ULL + 1442695040888963407ULL;
                u1 = ((double)(s >> 11) + 1) / 9007199254740993.0;
                s = s * 6364136223846793005ULL + 1442695040888963407ULL;
                u2 = (double)(s >> 11) / 9007199254740992.0;
                v = sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
            }
            kiln_dtype_store(t->dtype, in[i], e, v);
        }
    }
    return in;
}

/* A hand-written problem: q [1, hq, sq, d], k and v [1, hkv, skv, d], an optional mask [1, 1, sq,
 * skv] of mask_dtype, the kiln object given. */
static kiln_problem *small(const char *dt, int hq, int hkv, int sq, int skv, int d,
                           const char *mask_dtype, const char *kiln) {
    char mask[256] = "", wl_mask[64] = "";
    if (mask_dtype) {
        snprintf(mask, sizeof mask,
                 ", \"mask\": {\"shape\": [\"1\", \"1\", \"%d\", \"%d\"], \"dtype\": \"%s\"}", sq,
                 skv, mask_dtype);
        snprintf(wl_mask, sizeof wl_mask, ", \"mask\": {\"type\": \"random\"}");
    }
    char *def = xasprintf(
        "{\"name\": \"emu\", \"op_type\": \"attention\", \"axes\": {}, \"inputs\": {"
        "\"q\": {\"shape\": [\"1\", \"%d\", \"%d\", \"%d\"], \"dtype\": \"%s\"}, "
        "\"k\": {\"shape\": [\"1\", \"%d\", \"%d\", \"%d\"], \"dtype\": \"%s\"}, "
        "\"v\": {\"shape\": [\"1\", \"%d\", \"%d\", \"%d\"], \"dtype\": \"%s\"}%s}, "
        "\"outputs\": {\"o\": {\"shape\": [\"1\", \"%d\", \"%d\", \"%d\"], \"dtype\": \"%s\"}}, "
        "\"reference\": \"def run(q, k, v):\n    return q\n\", \"kiln\": %s}",
        hq, sq, d, dt, hkv, skv, d, dt, hkv, skv, d, dt, mask, hq, sq, d, dt, kiln);
    char *wl = xasprintf("{\"uuid\": \"a\", \"axes\": {}, \"inputs\": {\"q\": {\"type\": "
                         "\"random\"}, \"k\": {\"type\": \"random\"}, \"v\": {\"type\": "
                         "\"random\"}%s}}\n",
                         wl_mask);
    kiln_problem *p = parse(def, wl);
    free(def);
    free(wl);
    return p;
}

static void emulate(kiln_backend *be, kiln_problem *p, const int64_t *pt4, double fill,
                    const char *what) {
    kiln_match m;
    match_ok(p, &m);
    int64_t pt[KILN_FAMILY_MAX_PARAMS];
    point_of(pt4[0], pt4[1], pt4[2], pt4[3], pt);
    pt[4] = pt4[4];
    const char *bad = att->check(p, &m, pt);
    if (bad)
        fail_msg("%s: not a valid point: %s", what, bad);
    char *cuda = att->emit(p, &m, pt, 1), *emu = emu_candidate(cuda),
         *csrc = att->emit(p, &m, pt, 0);
    module me, mc;
    compile_module(be, p, emu, "sh " SMX_EMU "/emucc.sh", &me, what);
    compile_module(be, p, csrc, NULL, &mc, what);
    void **in = make_inputs(p, &m, fill);
    void **oe = run_module(be, p, &me, in, what), **oc = run_module(be, p, &mc, in, what);
    for (int o = 0; o < p->n_outputs; o++) {
        const kiln_tensor_spec *t = &p->outputs[o];
        kiln_tolerance tol = kiln_tolerance_default(t->dtype);
        for (size_t e = 0; e < elements(p, t); e++) {
            double a = kiln_dtype_load(t->dtype, oe[o], e), b = kiln_dtype_load(t->dtype, oc[o], e);
            if (!(isnan(b)   ? isnan(a)
                  : isinf(b) ? a == b
                             : fabs(a - b) <= tol.atol + tol.rtol * fabs(b)))
                fail_msg("%s: %s[%zu] is %.9g, the C emission %.9g", what, t->name, e, a, b);
        }
        free(oe[o]);
        free(oc[o]);
    }
    printf("    %s: emulated = C emission\n", what);
    for (int i = 0; i < p->n_inputs; i++)
        free(in[i]);
    free(in);
    free(oe);
    free(oc);
    be->ops->module_free(be, me.mod);
    be->ops->module_free(be, mc.mod);
    kiln_abi_free(&me.abi);
    kiln_abi_free(&mc.abi);
    free(cuda);
    free(emu);
    free(csrc);
}

static void test_emulated(void **state) {
    (void)state;
    if (system("command -v ${CXX:-g++} >/dev/null 2>&1") != 0) {
        printf("SKIP: no C++ compiler (g++ or $CXX) to build the emulated kernels\n");
        skip();
    }
    kiln_backend *be = NULL;
    kiln_err err;
    assert_int_equal(kiln_backend_open("cpu", 0, &be, &err), KILN_OK);
    const double bf16_min = -3.3895313892515355e38;
    static const char causal[] = "{\"mask_structure\": {\"kind\": \"band\", \"lower\": null, "
                                 "\"upper\": 0}}";
    static const char window[] = "{\"mask_structure\": {\"kind\": \"band\", \"lower\": -23, "
                                 "\"upper\": 0}}";
    /* GQA 2:1 over a causal finfo.min mask: 2 and 3 key tiles, 2 and 3 stages */
    kiln_problem *p = small("bfloat16", 2, 1, 80, 80, 64, "bfloat16", causal);
    emulate(be, p, (int64_t[]){64, 64, 4, 2, 0}, bf16_min, "bf16 gqa causal 64x64");
    emulate(be, p, (int64_t[]){64, 32, 4, 3, 0}, bf16_min, "bf16 gqa causal 64x32 3 stages");
    emulate(be, p, (int64_t[]){64, 32, 4, 2, 1}, bf16_min, "bf16 gqa causal packed heads");
    kiln_problem_free(p);
    /* the same mask stated exact (0 inside the band): the CUDA kernel generates it and reads no
     * mask, the cpu one adds it; a window of 24 exact, its lower bound generated too */
    static const char causal_exact[] = "{\"mask_structure\": {\"kind\": \"band\", \"lower\": "
                                       "null, \"upper\": 0, \"inside\": 0}}";
    static const char window_exact[] = "{\"mask_structure\": {\"kind\": \"band\", \"lower\": "
                                       "-23, \"upper\": 0, \"inside\": 0}}";
    p = small("bfloat16", 2, 1, 80, 80, 64, "bfloat16", causal_exact);
    emulate(be, p, (int64_t[]){64, 32, 4, 2, 0}, bf16_min, "bf16 gqa causal exact 64x32");
    emulate(be, p, (int64_t[]){64, 32, 4, 2, 1}, bf16_min, "bf16 gqa causal exact packed heads");
    kiln_problem_free(p);
    p = small("bfloat16", 1, 1, 100, 100, 64, "bfloat16", window_exact);
    emulate(be, p, (int64_t[]){64, 32, 4, 2, 0}, bf16_min, "bf16 sliding 24 exact 64x32");
    emulate(be, p, (int64_t[]){128, 64, 8, 2, 0}, bf16_min, "bf16 sliding 24 exact 128x64");
    kiln_problem_free(p);
    /* SDPA's is_causal generated in the kernel, f16, head dim 128, a tail tile of 8 keys */
    p = small("float16", 1, 1, 40, 72, 128, NULL, "{\"is_causal\": 1}");
    emulate(be, p, (int64_t[]){64, 64, 4, 2, 0}, 0, "f16 is_causal d128 tail");
    kiln_problem_free(p);
    /* a window of 24 keys as a float32 -inf mask: tiles before the band skipped; 8 warps */
    p = small("bfloat16", 1, 1, 100, 100, 64, "float32", window);
    emulate(be, p, (int64_t[]){64, 32, 4, 2, 0}, -INFINITY, "bf16 sliding 24 64x32");
    emulate(be, p, (int64_t[]){128, 32, 8, 2, 0}, -INFINITY, "bf16 sliding 24 128x32 8 warps");
    kiln_problem_free(p);
    /* the Gemma-4 --small block as capture stores it: q in memory order, kᵀ a broadcast view */
    p = load(DATA, "gemma_small_captured");
    emulate(be, p, (int64_t[]){64, 32, 4, 2, 0}, bf16_min, "gemma --small captured layouts");
    kiln_problem_free(p);
    /* three queries over 70 keys, head dim 256, 4 q heads over 2 kv heads, no mask */
    p = small("bfloat16", 4, 2, 3, 70, 256, NULL, "{}");
    emulate(be, p, (int64_t[]){64, 32, 4, 2, 0}, 0, "bf16 decode-like d256");
    emulate(be, p, (int64_t[]){64, 32, 4, 2, 1}, 0, "bf16 decode-like d256 packed heads");
    kiln_problem_free(p);
    /* float32: the warp-per-row kernel, generated causal, head dim 48 (two values a lane, one idle)
     */
    p = small("float32", 2, 1, 10, 37, 48, NULL, "{\"is_causal\": 1}");
    emulate(be, p, (int64_t[]){64, 64, 4, 2, 0}, 0, "f32 warp per row is_causal d48");
    kiln_problem_free(p);
    /* paged (workload 0's page tables: three sequences of 5, 40, 21 queries over 21, 40, 70 keys
     * in scrambled pages of 16): output and lse */
    p = load(SOLBENCH, PAGED_PREFILL);
    emulate(be, p, (int64_t[]){128, 64, 8, 2, 0}, 0, "paged prefill causal 128x64 8 warps");
    emulate(be, p, (int64_t[]){64, 32, 4, 3, 0}, 0, "paged prefill causal 64x32 3 stages");
    emulate(be, p, (int64_t[]){64, 32, 4, 2, 1}, 0, "paged prefill causal packed heads");
    kiln_problem_free(p);
    /* paged decode: one query over 1, 77, 16 and 200 keys */
    p = load(SOLBENCH, PAGED_DECODE);
    emulate(be, p, (int64_t[]){64, 64, 4, 2, 1}, 0, "paged decode packed heads");
    emulate(be, p, (int64_t[]){64, 32, 4, 3, 0}, 0, "paged decode 64x32 3 stages");
    kiln_problem_free(p);
    kiln_backend_close(be);
}

/* A published SOL-ExecBench problem declares neither kiln.min_bytes nor kiln.flops: the gate's
 * speed of light of a paged problem takes the family's figures (kiln_family_sol_fill) — its
 * sequences' pages, not the whole pool, which would make a kernel that reads only those pages
 * `impossible` — and its flops, at the tensor cores' rate. A problem that declares them keeps them.
 */
static void test_sol_figures(void **state) {
    (void)state;
    static const char *const paged[] = {PAGED_PREFILL, PAGED_DECODE};
    for (int i = 0; i < 2; i++) {
        kiln_problem *p = load(SOLBENCH, paged[i]);
        assert_true(p->min_bytes < 0 && p->flops < 0);
        double every[16];
        for (int w = 0; w < p->n_workloads && w < 16; w++) {
            every[w] = kiln_problem_min_bytes(p, &p->workloads[w]);
            assert_true(kiln_problem_flops(p, &p->workloads[w]) < 0);
        }
        kiln_family_sol_fill(p);
        kiln_match m;
        match_ok(p, &m);
        int fewer = 0;
        for (int w = 0; w < p->n_workloads && w < 16; w++) {
            const kiln_workload *wl = &p->workloads[w];
            const double bytes = kiln_problem_min_bytes(p, wl);
            assert_true(bytes > 0 && bytes <= every[w]);
            fewer += bytes < every[w];
            assert_float_equal(
                bytes, att->min_bytes(p, &m, wl) < every[w] ? att->min_bytes(p, &m, wl) : every[w],
                1e-6);
            assert_float_equal(kiln_problem_flops(p, wl), att->flops(p, &m, wl), 1e-6);
            assert_true(kiln_problem_flops(p, wl) > 0);
        }
        assert_true(fewer > 0); /* the pool holds pages no sequence reads */
        kiln_problem_free(p);
    }
    kiln_problem *p =
        parse("{\"name\": \"d\", \"op_type\": \"x\", \"axes\": {\"n\": {\"type\": \"const\", "
              "\"value\": 4}}, "
              "\"inputs\": {\"a\": {\"shape\": [\"n\"], \"dtype\": \"float32\"}}, "
              "\"outputs\": {\"b\": {\"shape\": [\"n\"], \"dtype\": \"float32\"}}, "
              "\"reference\": \"x\", \"kiln\": {\"min_bytes\": 7, \"flops\": 9}}",
              "{\"uuid\": \"u\", \"axes\": {}, \"inputs\": {\"a\": {\"type\": \"random\"}}}\n");
    kiln_family_sol_fill(p);
    assert_float_equal(kiln_problem_min_bytes(p, &p->workloads[0]), 7, 0);
    assert_float_equal(kiln_problem_flops(p, &p->workloads[0]), 9, 0);
    kiln_problem_free(p);
}

int main(void) {
    att = kiln_family_find("attention");
    if (!att) {
        fprintf(stderr, "the attention family is not registered\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_match),       cmocka_unit_test(test_roundings),
        cmocka_unit_test(test_declines),    cmocka_unit_test(test_check),
        cmocka_unit_test(test_flops),       cmocka_unit_test(test_compile),
        cmocka_unit_test(test_emulated),    cmocka_unit_test(test_paged),
        cmocka_unit_test(test_sol_figures), cmocka_unit_test(test_start_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
