/* test_family_attention.c: the attention family without a GPU: what the matcher reads from the
 * eager chain, SDPA calls and hand-written problems (variants, heads, head dim, scale, the mask's
 * band), what it declines and why, the constraints' reasons, flops counted at the band's share, and
 * that every start point and an even spread of the valid points of the rows
 * (bench/attention) and of the cpu test problems compile for sm_90 with NVRTC without a stack frame
 * (no spills). */
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

#define DATA KILN_SOURCE_DIR "/tests/data/families/attention"
#define ROWS KILN_SOURCE_DIR "/bench/attention"
#define SPREAD 6

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
} expect;

static const expect EXPECTED[] = {
    {DATA, "gqa_bf16_causal", "attention_causal_mask_gqa", 4, 2, 64, 1, 0, 0, 0.125},
    {DATA, "f32_unmasked", "attention", 2, 2, 32, 0, 0, 0, 0.17677669529663687},
    {DATA, "sliding_bf16", "attention_sliding_gqa", 2, 1, 64, 1, 1, -47, 0.125},
    {DATA, "sdpa_bf16_causal", "attention_causal_gqa", 4, 2, 64, 1, 0, 0, 0.125},
    {ROWS, "attn_gemma4_sliding512_1x8x4x4096x256", "attention_sliding_gqa", 8, 4, 256, 1, 1, -511,
     1.0},
    {ROWS, "attn_gemma4_causal_1x8x4x4096x256", "attention_causal_mask_gqa", 8, 4, 256, 1, 0, 0,
     1.0},
    {ROWS, "attn_causal_4x32x8x4096x128", "attention_causal_gqa", 32, 8, 128, 1, 0, 0,
     0.08838834764831845},
    {ROWS, "attn_dense_16x16x1024x64", "attention", 16, 16, 64, 0, 0, 0, 0.125},
    {ROWS, "attn_decode_64x32x8x4096x128", "attention_gqa", 32, 8, 128, 0, 0, 0,
     0.08838834764831845},
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
        assert_float_equal(kiln_match_get(&m, "scale", 0), e->scale, 1e-12);
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
    /* a boolean mask is masked_fill, not an addition */
    snprintf(def, sizeof def,
             "%s" QKV_F32("16", "2") ", \"mask\": {\"shape\": [\"16\", \"16\"], \"dtype\": "
                                     "\"bool\"}}, " OUT_F32 ", " REF
                                     ", \"kiln\": {\"kind\": \"aten\", \"aten\": "
                                     "\"aten::scaled_dot_product_attention.default\", \"args\": "
                                     "{\"args\": [{\"tensor\": 0}, {\"tensor\": 1}, {\"tensor\": "
                                     "2}, {\"tensor\": 3}], \"kwargs\": {}}}}",
             head);
    decline(def, "boolean");
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
}

static int64_t point_of(const int64_t bm, const int64_t bn, const int64_t warps,
                        const int64_t stages, int64_t *pt) {
    pt[0] = bm, pt[1] = bn, pt[2] = warps, pt[3] = stages;
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
    p = load(DATA, "f32_unmasked");
    match_ok(p, &m);
    point_of(64, 64, 4, 2, pt);
    check_reason(p, &m, pt, NULL);
    point_of(64, 32, 4, 2, pt);
    check_reason(p, &m, pt, "float32");
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

static void compile_point(const kiln_problem *p, const kiln_match *m, const int64_t *pt,
                          int is_start) {
    char *src = att->emit(p, m, pt, 1), *cubin = NULL, *log = NULL;
    size_t len;
    kiln_err err;
    char *ps = kiln_family_point_str(att, pt);
    if (kiln_cuda_compile_only(src, "sm_90", &cubin, &len, &log, &err))
        fail_msg("%s %s does not compile: %s\n%.3000s", p->name, ps, err.msg, log ? log : "");
    kiln_cubin_usage u;
    assert_int_equal(kiln_cubin_usage_of(cubin, len, "attention_kernel", &u, &err), 0);
    printf("    %s: %s%s: %d registers\n", p->name, is_start ? "start " : "", ps, u.regs);
    if (u.frame_bytes != 0)
        fail_msg("%s %s: %lld bytes of stack (spills)", p->name, ps, (long long)u.frame_bytes);
    free(ps);
    free(src);
    free(cubin);
    free(log);
}

static void test_compile(void **state) {
    (void)state;
    if (!kiln_cuda_have_nvrtc()) {
        printf("SKIP: no NVRTC here (the CUDA toolkit's libnvrtc): cannot compile for sm_90\n");
        skip();
    }
    const int64_t size = kiln_family_space_size(att);
    for (size_t i = 0; i < N_EXPECTED; i++) {
        kiln_problem *p = load(EXPECTED[i].dir, EXPECTED[i].name);
        kiln_match m;
        match_ok(p, &m);
        int64_t pt[KILN_FAMILY_MAX_PARAMS], valid[64], n_valid = 0;
        for (int64_t k = 0; k < size && n_valid < 64; k++) {
            kiln_family_point(att, k, pt);
            if (kiln_family_point_ok(att, p, &m, pt))
                valid[n_valid++] = k;
        }
        assert_true(n_valid > 0);
        int from_rule = 0;
        int64_t start = kiln_family_start_index(att, p, &m, size, &from_rule);
        assert_true(start >= 0 && from_rule);
        kiln_family_point(att, start, pt);
        compile_point(p, &m, pt, 1);
        for (int k = 0; k < SPREAD && k < n_valid; k++) {
            int64_t idx = valid[(int64_t)k * n_valid / (n_valid < SPREAD ? n_valid : SPREAD)];
            if (idx == start)
                continue;
            kiln_family_point(att, idx, pt);
            compile_point(p, &m, pt, 0);
        }
        kiln_problem_free(p);
    }
}

int main(void) {
    att = kiln_family_find("attention");
    if (!att) {
        fprintf(stderr, "the attention family is not registered\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_match),    cmocka_unit_test(test_roundings),
        cmocka_unit_test(test_declines), cmocka_unit_test(test_check),
        cmocka_unit_test(test_flops),    cmocka_unit_test(test_compile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
