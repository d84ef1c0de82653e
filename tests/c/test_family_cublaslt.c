/* test_family_cublaslt.c: the cublaslt family's matcher on the problems of
 * tests/data/families/cublaslt (linear with and without bias, mm with either operand captured
 * transposed, bmm, batched matmul, addmm, and GEMM + epilogue chains: a bias add, ReLU, GELU of
 * either form, a final cast) and on the ones it must decline, with the reason; the
 * cuda candidate's directive parsed back into the GEMM the capture describes (the emit/parse round
 * trip); flops and bytes; the cpu candidate's plain GEMM; fp8 torch._scaled_mm with its scales.
 * No GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#include "backend/lt_call.h"
#include "gen/family.h"

typedef struct {
    const char *dir;
    int64_t m, n, k, batch;
    int trans_a, trans_b;
    int64_t lda, ldb, ldd;
    kiln_dtype t;
    int bias; /* the bias's ABI parameter index, -1 without */
    int a, b, d;
    kiln_lt_epilogue epi;
    kiln_dtype td; /* D's dtype: t, or a fused cast's */
} gemm_case;

#define NONE KILN_LT_EPI_NONE
#define BIAS KILN_LT_EPI_BIAS
static const gemm_case CASES[] = {
    {"linear_bf16_3d", 18, 24, 40, 1, 0, 1, 40, 40, 24, KILN_BF16, -1, 0, 1, 2, NONE, KILN_BF16},
    {"linear_bias_f32", 17, 20, 33, 1, 0, 1, 33, 33, 20, KILN_F32, 2, 0, 1, 3, BIAS, KILN_F32},
    {"mm_f16_wt", 12, 20, 48, 1, 0, 1, 48, 48, 20, KILN_F16, -1, 0, 1, 2, NONE, KILN_F16},
    {"mm_f32_at", 10, 14, 24, 1, 1, 0, 10, 14, 14, KILN_F32, -1, 0, 1, 2, NONE, KILN_F32},
    {"bmm_bf16", 16, 24, 32, 3, 0, 0, 32, 24, 24, KILN_BF16, -1, 0, 1, 2, NONE, KILN_BF16},
    {"matmul_f32_batched", 8, 12, 16, 2, 0, 1, 16, 16, 12, KILN_F32, -1, 0, 1, 2, NONE, KILN_F32},
    {"matmul_bf16_4d", 24, 40, 32, 2, 0, 1, 32, 32, 40, KILN_BF16, -1, 0, 1, 2, NONE, KILN_BF16},
    {"addmm_bf16", 16, 24, 64, 1, 0, 1, 64, 64, 24, KILN_BF16, 0, 1, 2, 3, BIAS, KILN_BF16},
    /* gemm_epilogue chains: the epilogue and a final cast fused into the one call */
    {"linear_bias_gelu_bf16", 16, 24, 40, 1, 0, 1, 40, 40, 24, KILN_BF16, 2, 0, 1, 3,
     KILN_LT_EPI_BIAS_GELU, KILN_BF16},
    {"mm_add_relu_f16", 12, 20, 48, 1, 0, 1, 48, 48, 20, KILN_F16, 2, 0, 1, 3,
     KILN_LT_EPI_BIAS_RELU, KILN_F16},
    {"matmul_badd_gelu_f32", 8, 12, 16, 1, 0, 0, 16, 12, 12, KILN_F32, 2, 0, 1, 3,
     KILN_LT_EPI_BIAS_GELU, KILN_F32},
    {"linear_gelu_erf_to_f32", 18, 24, 40, 1, 0, 1, 40, 40, 24, KILN_BF16, -1, 0, 1, 2,
     KILN_LT_EPI_GELU, KILN_F32},
    /* a 1x1 convolution, channels-last: x [N·H·W, Cin] @ w [Cout, Cin]ᵀ + b, D channels-last */
    {"conv1x1_cl_bias_bf16", 60, 40, 48, 1, 0, 1, 48, 48, 40, KILN_BF16, 2, 0, 1, 3, BIAS,
     KILN_BF16},
};

static kiln_problem *load(const char *sub) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/data/families/cublaslt/%s", KILN_SOURCE_DIR, sub);
    kiln_problem *p = NULL;
    kiln_err err;
    if (kiln_problem_load(dir, &p, &err) != KILN_OK)
        fail_msg("%s: %s", dir, err.msg);
    return p;
}

/* The `// kiln: library cublaslt` line of a candidate, parsed. */
static void directive_of(const char *src, const kiln_problem *p, kiln_lt_call_desc *d) {
    kiln_abi abi;
    kiln_err err;
    if (kiln_abi_parse(src, 1, &abi, &err) != KILN_OK)
        fail_msg("%s\n%s", err.msg, src);
    assert_string_equal(abi.library, "cublaslt");
    kiln_signature sig;
    kiln_abi_signature(p, 0, 1, &sig);
    if (kiln_lt_call_parse(abi.library_args, &sig, d, &err) != KILN_OK)
        fail_msg("%s\n%s", err.msg, src);
    kiln_abi_free(&abi);
}

/* p matched by f, its start point in pt and that point's directive in d. */
static void start_directive(const kiln_family *f, const kiln_problem *p, kiln_match *m, int64_t *pt,
                            kiln_lt_call_desc *d) {
    char why[512] = "";
    if (!f->match(p, m, why, sizeof why))
        fail_msg("%s declined: %s", p->name, why);
    assert_int_equal(f->start(p, m, pt), 0);
    char *src = f->emit(p, m, pt, 1);
    directive_of(src, p, d);
    free(src);
}

static void test_match_and_directive(void **state) {
    (void)state;
    const kiln_family *f = kiln_family_find("cublaslt");
    assert_non_null(f);
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const gemm_case *c = &CASES[i];
        kiln_problem *p = load(c->dir);
        kiln_match m;
        char why[512] = "";
        if (!f->match(p, &m, why, sizeof why))
            fail_msg("%s declined: %s", c->dir, why);
        int64_t pt[KILN_FAMILY_MAX_PARAMS];
        assert_int_equal(f->start(p, &m, pt), 0);
        assert_int_equal(kiln_family_point_index(f, pt), 0);
        /* the gate's speed of light: the GEMM's flops where the problem declares none */
        if (p->flops < 0) {
            assert_true(kiln_problem_flops(p, &p->workloads[0]) < 0);
            kiln_family_sol_fill(p);
            assert_float_equal(kiln_problem_flops(p, &p->workloads[0]),
                               2.0 * (double)c->m * (double)c->n * (double)c->k * (double)c->batch,
                               1e-6);
        }
        /* index 0 and the last index the space reaches */
        for (int64_t idx = 0; idx < kiln_family_space_size(f);
             idx += kiln_family_space_size(f) - 1) {
            kiln_family_point(f, idx, pt);
            assert_null(f->check(p, &m, pt));
            char *src = f->emit(p, &m, pt, 1);
            kiln_lt_call_desc d;
            directive_of(src, p, &d);
            free(src);
            assert_int_equal(d.has_config, 0);
            assert_int_equal(d.index, idx);
            const kiln_lt_gemm *g = &d.gemm;
            if (g->m != c->m || g->n != c->n || g->k != c->k || g->batch != c->batch ||
                g->trans_a != c->trans_a || g->trans_b != c->trans_b || g->lda != c->lda ||
                g->ldb != c->ldb || g->ldd != c->ldd)
                fail_msg("%s: got m %lld n %lld k %lld batch %lld trans %d %d ld %lld %lld %lld",
                         c->dir, (long long)g->m, (long long)g->n, (long long)g->k,
                         (long long)g->batch, g->trans_a, g->trans_b, (long long)g->lda,
                         (long long)g->ldb, (long long)g->ldd);
            assert_int_equal(g->a_type, c->t);
            assert_int_equal(g->d_type, c->td);
            assert_int_equal(g->epilogue, c->epi);
            assert_int_equal(kiln_lt_epilogue_has_bias(g->epilogue), c->bias >= 0);
            assert_int_equal(d.arg_a, c->a);
            assert_int_equal(d.arg_b, c->b);
            assert_int_equal(d.arg_bias, c->bias);
            assert_int_equal(d.arg_d, c->d);
            if (c->batch > 1)
                assert_true(g->stride_a == c->m * c->k && g->stride_d == c->m * c->n);
            /* the column-major view cuBLASLt gets is valid */
            kiln_lt_view v;
            kiln_err err;
            assert_int_equal(kiln_lt_gemm_view(g, &v, &err), KILN_OK);
            /* the GEMM fits the problem's tensors; one that reaches past them, names another
             * dtype or writes an input is refused */
            if (kiln_lt_call_check(&d, p, &err) != KILN_OK)
                fail_msg("%s: %s", c->dir, err.msg);
            kiln_lt_call_desc bad = d;
            bad.gemm.m++;
            assert_int_equal(kiln_lt_call_check(&bad, p, &err), KILN_ERR_COMPILE);
            assert_non_null(strstr(err.msg, "reaches"));
            bad = d;
            bad.gemm.ldb += 1;
            assert_int_equal(kiln_lt_call_check(&bad, p, &err), KILN_ERR_COMPILE);
            bad = d;
            bad.gemm.a_type = c->t == KILN_F32 ? KILN_BF16 : KILN_F32;
            assert_int_equal(kiln_lt_call_check(&bad, p, &err), KILN_ERR_COMPILE);
            bad = d;
            bad.arg_d = d.arg_a;
            assert_int_equal(kiln_lt_call_check(&bad, p, &err), KILN_ERR_COMPILE);
            assert_non_null(strstr(err.msg, "not an output"));
            /* D written in another dtype than the output's (a cast the problem does not make) */
            bad = d;
            bad.gemm.d_type = c->td == KILN_F32 ? KILN_BF16 : KILN_F32;
            assert_int_equal(kiln_lt_call_check(&bad, p, &err), KILN_ERR_COMPILE);
            /* a bias epilogue without its bias (cuBLASLt would read a null pointer), or a bias
             * argument the epilogue ignores */
            bad = d;
            bad.gemm.epilogue = c->bias >= 0 ? KILN_LT_EPI_GELU : KILN_LT_EPI_BIAS_GELU;
            assert_int_equal(kiln_lt_call_check(&bad, p, &err), KILN_ERR_COMPILE);
            assert_non_null(strstr(err.msg, "bias argument"));
            if (c->bias >= 0) { /* the bias in the dtype the GEMM says */
                bad = d;
                bad.gemm.bias_type = c->t == KILN_F32 ? KILN_BF16 : KILN_F32;
                assert_int_equal(kiln_lt_call_check(&bad, p, &err), KILN_ERR_COMPILE);
                assert_non_null(strstr(err.msg, "args.bias"));
            }
        }
        double flops = f->flops(p, &m, &p->workloads[0]);
        assert_true(flops == 2.0 * (double)(c->m * c->n * c->k * c->batch));
        double es = (double)kiln_dtype_size(c->t);
        double bytes =
            es * (double)(c->batch * (c->m * c->k + c->k * c->n) + (c->bias >= 0 ? c->n : 0)) +
            (double)kiln_dtype_size(c->td) * (double)(c->batch * c->m * c->n);
        assert_true(f->min_bytes(p, &m, &p->workloads[0]) == bytes);
        /* the cpu candidate: a plain C GEMM with the problem's entry point, no library line */
        char *cpu = f->emit(p, &m, pt, 0);
        assert_non_null(strstr(cpu, "// kiln: launch gemm_kernel"));
        assert_null(strstr(cpu, "library"));
        assert_non_null(strstr(cpu, c->trans_b ? "kiln_b[j * " : "kiln_b[k * "));
        assert_true((strstr(cpu, "acc += ") != NULL) &&
                    (strstr(cpu, "[j]);") != NULL) == (c->bias >= 0));
        int gelu = c->epi == KILN_LT_EPI_GELU || c->epi == KILN_LT_EPI_BIAS_GELU;
        int relu = c->epi == KILN_LT_EPI_RELU || c->epi == KILN_LT_EPI_BIAS_RELU;
        assert_int_equal(strstr(cpu, "tanhf(0.7978845608f") != NULL, gelu);
        assert_int_equal(strstr(cpu, "acc < 0.0f ? 0.0f : acc") != NULL, relu);
        free(cpu);
        kiln_problem_free(p);
    }
}

/* f declines p (freed) with a reason that says `what`. */
static void declines_with(const kiln_family *f, kiln_problem *p, const char *what) {
    kiln_match m;
    char why[512] = "";
    assert_int_equal(f->match(p, &m, why, sizeof why), 0);
    if (!strstr(why, what))
        fail_msg("%s: declined with '%s', expected '%s'", p->name, why, what);
    kiln_problem_free(p);
}

static kiln_problem *load_abs(const char *dir) {
    kiln_problem *p = NULL;
    kiln_err err;
    if (kiln_problem_load(dir, &p, &err) != KILN_OK)
        fail_msg("%s: %s", dir, err.msg);
    return p;
}

static void test_declines(void **state) {
    (void)state;
    static const struct {
        const char *dir, *why;
    } no[] = {
        {"declined/addmm_beta", "beta or alpha other than 1"},
        {"declined/mm_f64", "float64"},
        {"declined/bmm_broadcast_batch", "permuted across its batch dims"},
        {"declined/matmul_broadcast_4d", "batch dims differ"},
        {"declined/linear_silu", "aten::silu.default after the GEMM is not an epilogue"},
        {"declined/linear_bias_add", "adds one bias"},
        {"declined/linear_gelu_relu", "applies one activation"},
        {"declined/conv3x3_cl_bf16", "1x1 kernel"},
        {"declined/conv1x1_stride2_cl_bf16", "stride 1"},
        {"declined/conv1x1_nchw_bias_bf16", "the bias is a row's"},
        {"declined/conv1x1_cl_f32", "TF32"},
    };
    const kiln_family *f = kiln_family_find("cublaslt");
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        declines_with(f, load(no[i].dir), no[i].why);
    /* a problem of another family: not a GEMM */
    declines_with(f, load_abs(KILN_SOURCE_DIR "/tests/data/families/softmax/aten_memory_order"),
                  "is not one GEMM");
}

/* torch._scaled_mm: fp8 with one float32 scale each is a directive with the scales' arguments
 * (cuBLASLt's scale pointers), e4m3 by e5m2 too; the cpu candidate widens fp8 and scales the
 * accumulator; a scale a row and a column is declined (kiln drives per-tensor scales only). The
 * directive's scales are checked like its other operands and read back from JSON. */
static void test_scaled_mm(void **state) {
    (void)state;
    const kiln_family *f = kiln_family_find("cublaslt");
    static const struct {
        const char *dir;
        kiln_dtype b, d;
        int fast; /* use_fast_accum=True captured: cuBLASLt's FAST_ACCUM, as eager ran */
    } cases[] = {{"scaled_mm_e4m3_bf16", KILN_F8_E4M3, KILN_BF16, 0},
                 {"scaled_mm_e4m3_e5m2_f32", KILN_F8_E5M2, KILN_F32, 0},
                 {"scaled_mm_e4m3_fast_bf16", KILN_F8_E4M3, KILN_BF16, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kiln_problem *p = load(cases[i].dir);
        kiln_match m;
        int64_t pt[KILN_FAMILY_MAX_PARAMS];
        kiln_lt_call_desc d;
        start_directive(f, p, &m, pt, &d);
        assert_int_equal(d.gemm.a_type, KILN_F8_E4M3);
        assert_int_equal(d.gemm.b_type, cases[i].b);
        assert_int_equal(d.gemm.d_type, cases[i].d);
        assert_int_equal(d.gemm.fast_accum, cases[i].fast);
        assert_true(d.gemm.trans_b && !d.gemm.trans_a);
        assert_true(d.has_scales && d.arg_a_scale == 2 && d.arg_b_scale == 3);
        kiln_err err;
        kiln_lt_view v;
        assert_int_equal(kiln_lt_gemm_view(&d.gemm, &v, &err), KILN_OK);
        if (kiln_lt_call_check(&d, p, &err) != KILN_OK)
            fail_msg("%s: %s", cases[i].dir, err.msg);
        kiln_lt_call_desc bad = d;
        bad.arg_b_scale = 0; /* x: fp8, not a float32 scale */
        assert_int_equal(kiln_lt_call_check(&bad, p, &err), KILN_ERR_COMPILE);
        assert_non_null(strstr(err.msg, "args.b_scale"));
        /* the JSON round trip keeps the scales; one of the two, or scales on 16-bit inputs, is
         * the directive's error */
        char *json = kiln_lt_call_json(&d);
        kiln_lt_call_desc back;
        assert_int_equal(kiln_lt_call_parse(json, NULL, &back, &err), KILN_OK);
        assert_true(back.has_scales && back.arg_a_scale == 2 && back.arg_b_scale == 3);
        assert_int_equal(back.gemm.fast_accum, cases[i].fast);
        char *cut = strstr(json, ",\"b_scale\"");
        assert_non_null(cut);
        strcpy(cut, "}}");
        assert_int_equal(kiln_lt_call_parse(json, NULL, &back, &err), KILN_ERR_COMPILE);
        assert_non_null(strstr(err.msg, "both or neither"));
        free(json);
        bad = d;
        bad.gemm.a_type = bad.gemm.b_type = KILN_BF16;
        json = kiln_lt_call_json(&bad);
        assert_int_equal(kiln_lt_call_parse(json, NULL, &back, &err), KILN_ERR_COMPILE);
        assert_non_null(strstr(err.msg, "fp8 inputs only"));
        free(json);
        char *cpu = f->emit(p, &m, pt, 0);
        assert_non_null(strstr(cpu, "acc *= sa[0] * sb[0];"));
        assert_non_null(strstr(cpu, "kiln_e4m3_to_float(kiln_a["));
        assert_non_null(
            strstr(cpu, i == 1 ? "kiln_e5m2_to_float(kiln_b[" : "kiln_e4m3_to_float(kiln_b["));
        free(cpu);
        /* bytes: one byte an input element, the scales, D */
        const kiln_lt_gemm *g = &d.gemm;
        assert_true(f->min_bytes(p, &m, &p->workloads[0]) ==
                    (double)(g->m * g->k + g->n * g->k + 8 +
                             (int64_t)kiln_dtype_size(g->d_type) * g->m * g->n));
        kiln_problem_free(p);
    }
    declines_with(
        f, load_abs(KILN_SOURCE_DIR "/tests/data/families/wgmma/scaled_mm_rowwise_bias_e4m3_bf16"),
        "per-tensor fp8 scales only");
}

/* A 1x1 convolution of an NCHW input: per image w [Cout, Cin] @ x [Cin, H·W], the weight (A) shared
 * by the batch (stride 0), read once in the bytes. */
static void test_conv_nchw(void **state) {
    (void)state;
    const kiln_family *f = kiln_family_find("cublaslt");
    kiln_problem *p = load("conv1x1_nchw_f16");
    kiln_match m;
    int64_t pt[KILN_FAMILY_MAX_PARAMS];
    kiln_lt_call_desc d;
    start_directive(f, p, &m, pt, &d);
    const kiln_lt_gemm *g = &d.gemm;
    assert_true(g->m == 24 && g->n == 28 && g->k == 32 && g->batch == 3);
    assert_true(g->stride_a == 0 && g->stride_b == 32 * 28 && g->stride_d == 24 * 28);
    assert_true(!g->trans_a && !g->trans_b && g->lda == 32 && g->ldb == 28 && g->ldd == 28);
    assert_true(d.arg_a == 1 && d.arg_b == 0 && d.arg_d == 2); /* A is the weight */
    kiln_err err;
    if (kiln_lt_call_check(&d, p, &err) != KILN_OK)
        fail_msg("%s", err.msg);
    assert_true(f->min_bytes(p, &m, &p->workloads[0]) ==
                2.0 * (24 * 32 + 3 * 32 * 28 + 3 * 24 * 28));
    kiln_problem_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_match_and_directive),
        cmocka_unit_test(test_declines),
        cmocka_unit_test(test_scaled_mm),
        cmocka_unit_test(test_conv_nchw),
    };
    return cmocka_run_group_tests_name("family_cublaslt", tests, NULL, NULL);
}
