/* test_cublaslt.c: cuBLASLt configs and GEMM views without a GPU (the config's JSON round trip,
 * the row-major → column-major mapping of linear, matmul, bmm and addmm checked by computing the
 * column-major product on the host, the enumeration's order), and on a GPU the enumeration of bf16
 * 4096³ and every enumerated config of small bf16 and fp8 GEMMs run against a naive reference.
 * Without a GPU the device tests say "SKIP: ..." and skip. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backend/cublaslt.h"
#include "backend/cuda_driver.h"
#include "backend/lt_call.h"

/* ---- the config ---- */

static void test_config_json_round_trip(void **state) {
    (void)state;
    const kiln_lt_config cs[] = {
        {.algo = 66, .tile = 18, .stages = 29, .split_k = 1, .cluster = 2, .heuristic = 0},
        {.algo = INT32_MAX,
         .tile = UINT32_MAX,
         .stages = 7,
         .split_k = 16,
         .reduction = 4,
         .swizzle = 1,
         .custom = 3,
         .cluster = UINT16_MAX,
         .inner_shape = 4,
         .workspace = 999999999999999ull,
         .heuristic = -1},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        cJSON *o = kiln_lt_config_to_json(&cs[i]);
        char *text = cJSON_PrintUnformatted(o);
        cJSON *back = cJSON_Parse(text);
        kiln_lt_config c;
        memset(&c, 0xa5, sizeof c);
        kiln_err err = {{0}};
        assert_int_equal(kiln_lt_config_from_json(back, &c, &err), KILN_OK);
        assert_true(kiln_lt_config_same(&c, &cs[i]));
        assert_true(c.workspace == cs[i].workspace);
        assert_int_equal(c.heuristic, cs[i].heuristic);
        cJSON *again = kiln_lt_config_to_json(&c);
        char *text2 = cJSON_PrintUnformatted(again);
        assert_string_equal(text, text2);
        free(text);
        free(text2);
        cJSON_Delete(o);
        cJSON_Delete(back);
        cJSON_Delete(again);
    }
}

static void expect_bad(const char *json, const char *needle) {
    cJSON *o = cJSON_Parse(json);
    kiln_lt_config c;
    kiln_err err = {{0}};
    assert_int_equal(kiln_lt_config_from_json(o, &c, &err), KILN_ERR_FORMAT);
    if (!strstr(err.msg, needle))
        fail_msg("expected \"%s\" in \"%s\"", needle, err.msg);
    cJSON_Delete(o);
}

static void test_config_json_errors(void **state) {
    (void)state;
    const char *ok_tail = "\"stages\":1,\"split_k\":1,\"reduction\":0,\"swizzle\":0,\"custom\":0,"
                          "\"cluster\":0,\"inner_shape\":0,\"workspace\":0}";
    char buf[512];
    snprintf(buf, sizeof buf, "{\"algo\":1,%s", ok_tail);
    expect_bad(buf, "'tile' is missing");
    snprintf(buf, sizeof buf, "{\"algo\":1,\"tile\":-2,%s", ok_tail);
    expect_bad(buf, "'tile' is -2");
    snprintf(buf, sizeof buf, "{\"algo\":1.5,\"tile\":2,%s", ok_tail);
    expect_bad(buf, "'algo' is 1.5");
    snprintf(buf, sizeof buf, "{\"algo\":\"1\",\"tile\":2,%s", ok_tail);
    expect_bad(buf, "'algo' is not a number");
    expect_bad("[1]", "not a JSON object");
    snprintf(buf, sizeof buf,
             "{\"algo\":1,\"tile\":2,\"stages\":1,\"split_k\":1,\"reduction\":0,"
             "\"swizzle\":0,\"custom\":0,\"cluster\":0,\"inner_shape\":0,"
             "\"workspace\":1e15}");
    expect_bad(buf, "'workspace' is 1e+15");
    snprintf(buf, sizeof buf, "{\"algo\":1e300,\"tile\":2,%s", ok_tail);
    expect_bad(buf, "'algo' is 1e+300");
    expect_bad("{\"algo\":1,\"tile\":2,\"stages\":1,\"split_k\":0,\"reduction\":0,\"swizzle\":0,"
               "\"custom\":0,\"cluster\":70000,\"inner_shape\":0,\"workspace\":0}",
               "'cluster' is 70000");
    /* heuristic may be absent */
    snprintf(buf, sizeof buf, "{\"algo\":1,\"tile\":2,%s", ok_tail);
    cJSON *o = cJSON_Parse(buf);
    kiln_lt_config c;
    assert_int_equal(kiln_lt_config_from_json(o, &c, NULL), KILN_OK);
    assert_int_equal(c.heuristic, -1);
    assert_int_equal(c.tile, 2);
    cJSON_Delete(o);
}

/* The enumeration's order: the heuristic's answers, then plain configs taking algorithms in turn,
 * then variants, without the heuristic's own. */
static void test_enumeration_order(void **state) {
    (void)state;
    kiln_lt_config a0 = {.algo = 6, .tile = 1, .split_k = 1, .heuristic = -1};
    kiln_lt_config a1 = a0, a2 = a0, av = a0, b0 = a0;
    a1.tile = 2;
    a2.tile = 3;
    av.split_k = 4;
    b0.algo = 9;
    kiln_lt_config heur = a1;
    heur.heuristic = 0;
    heur.workspace = 1024; /* the same config whatever its workspace */
    kiln_lt_found found[] = {
        {av, 1, 0, 0}, {a2, 0, 2, 0}, {b0, 0, 0, 1}, {a1, 0, 1, 0}, {a0, 0, 0, 0},
    };
    kiln_lt_config out[6];
    int n = kiln_lt_order(&heur, 1, found, 5, out);
    assert_int_equal(n, 5);
    assert_int_equal(out[0].heuristic, 0);
    assert_int_equal(out[0].tile, 2);
    const kiln_lt_config *want[] = {&a0, &b0, &a2, &av};
    for (int i = 0; i < 4; i++)
        if (!kiln_lt_config_same(&out[i + 1], want[i]))
            fail_msg("position %d: algo %d tile %u split %d", i + 1, out[i + 1].algo,
                     out[i + 1].tile, out[i + 1].split_k);
    /* no heuristic answer: the enumeration alone */
    assert_int_equal(kiln_lt_order(NULL, 0, found, 5, out), 5);
    assert_true(kiln_lt_config_same(&out[0], &a0));
    assert_true(kiln_lt_config_same(&out[2], &a1));
}

/* ---- the column-major view, checked by doing what cuBLASLt would do with it ---- */

/* Element (r, c) of a column-major matrix with leading dimension ld. */
static double cm(const double *m, int64_t ld, uint64_t r, uint64_t c) {
    return m[r + c * ld];
}

/* D = op(A)·op(B) (+ bias per row of D, relu) as cuBLASLt computes it from view v, batch by batch.
 * A and B are the view's (kiln's B and A). */
static void colmajor_gemm(const kiln_lt_view *v, const double *a, const double *b,
                          const double *bias, double *d) {
    for (int32_t bi = 0; bi < v->batch; bi++)
        for (uint64_t i = 0; i < v->m; i++)
            for (uint64_t j = 0; j < v->n; j++) {
                double s = 0;
                const double *ab = a + bi * v->stride_a, *bb = b + bi * v->stride_b;
                for (uint64_t l = 0; l < v->k; l++) {
                    double x = v->op_a == CUBLAS_OP_N ? cm(ab, v->lda, i, l) : cm(ab, v->lda, l, i);
                    double y = v->op_b == CUBLAS_OP_N ? cm(bb, v->ldb, l, j) : cm(bb, v->ldb, j, l);
                    s += x * y;
                }
                if (v->epilogue == CUBLASLT_EPILOGUE_BIAS)
                    s += bias[i];
                d[bi * v->stride_d + i + j * v->ldd] = s;
            }
}

/* The row-major reference: D[b][i][j] = Σ A[b](i, l)·B[b](l, j) (+ bias[j]). */
static void rowmajor_gemm(const kiln_lt_gemm *g, const double *a, const double *b,
                          const double *bias, double *d) {
    for (int64_t bi = 0; bi < g->batch; bi++)
        for (int64_t i = 0; i < g->m; i++)
            for (int64_t j = 0; j < g->n; j++) {
                double s = 0;
                for (int64_t l = 0; l < g->k; l++) {
                    const double *ab = a + bi * g->stride_a, *bb = b + bi * g->stride_b;
                    double x = g->trans_a ? ab[l * g->lda + i] : ab[i * g->lda + l];
                    double y = g->trans_b ? bb[j * g->ldb + l] : bb[l * g->ldb + j];
                    s += x * y;
                }
                if (g->epilogue == KILN_LT_EPI_BIAS)
                    s += bias[j];
                d[bi * g->stride_d + i * g->ldd + j] = s;
            }
}

/* Storage of an operand of `rows` rows of leading dimension ld, over the batch. */
static int64_t span(int64_t batch, int64_t stride, int64_t rows, int64_t ld) {
    return (batch - 1) * stride + rows * ld;
}

static void check_mapping(const kiln_lt_gemm *g) {
    kiln_lt_view v;
    kiln_err err = {{0}};
    if (kiln_lt_gemm_view(g, &v, &err))
        fail_msg("kiln_lt_gemm_view: %s", err.msg);
    int64_t na = span(g->batch, g->stride_a, g->trans_a ? g->k : g->m, g->lda);
    int64_t nb = span(g->batch, g->stride_b, g->trans_b ? g->n : g->k, g->ldb);
    int64_t nd = span(g->batch, g->stride_d, g->m, g->ldd);
    double *a = calloc((size_t)na, sizeof *a), *b = calloc((size_t)nb, sizeof *b);
    double *bias = calloc((size_t)g->n, sizeof *bias);
    double *d1 = calloc((size_t)nd, sizeof *d1), *d2 = calloc((size_t)nd, sizeof *d2);
    for (int64_t i = 0; i < na; i++)
        a[i] = (double)((i * 7 + 3) % 11) - 5;
    for (int64_t i = 0; i < nb; i++)
        b[i] = (double)((i * 5 + 1) % 13) - 6;
    for (int64_t i = 0; i < g->n; i++)
        bias[i] = (double)i * 0.5;
    rowmajor_gemm(g, a, b, bias, d1);
    colmajor_gemm(&v, b, a, bias, d2); /* cuBLASLt's A is kiln's B */
    for (int64_t i = 0; i < nd; i++)
        if (d1[i] != d2[i])
            fail_msg("element %lld: row-major %g, column-major view %g", (long long)i, d1[i],
                     d2[i]);
    free(a);
    free(b);
    free(bias);
    free(d1);
    free(d2);
}

static void test_view_linear(void **state) {
    (void)state;
    /* F.linear(x [M, K], w [N, K]): cuBLASLt's "TN", the layout fp8 needs. */
    kiln_lt_gemm g = kiln_lt_gemm_linear(4096, 9216, 2304, KILN_BF16);
    kiln_lt_view v;
    assert_int_equal(kiln_lt_gemm_view(&g, &v, NULL), KILN_OK);
    assert_int_equal(v.m, 9216);
    assert_int_equal(v.n, 4096);
    assert_int_equal(v.k, 2304);
    assert_int_equal(v.op_a, CUBLAS_OP_T);
    assert_int_equal(v.op_b, CUBLAS_OP_N);
    assert_int_equal(v.rows_a, 2304);
    assert_int_equal(v.cols_a, 9216);
    assert_int_equal(v.lda, 2304);
    assert_int_equal(v.rows_b, 2304);
    assert_int_equal(v.cols_b, 4096);
    assert_int_equal(v.ldb, 2304);
    assert_int_equal(v.rows_d, 9216);
    assert_int_equal(v.cols_d, 4096);
    assert_int_equal(v.ldd, 9216);
    assert_int_equal(v.a_type, CUDA_R_16BF);
    kiln_lt_gemm small = kiln_lt_gemm_linear(5, 7, 3, KILN_F32);
    check_mapping(&small);
    /* fp8 is accepted in this layout only */
    kiln_lt_gemm f8 = kiln_lt_gemm_linear(64, 64, 64, KILN_F8_E4M3);
    f8.d_type = KILN_BF16;
    assert_int_equal(kiln_lt_gemm_view(&f8, &v, NULL), KILN_OK);
    assert_int_equal(v.a_type, CUDA_R_8F_E4M3);
    kiln_lt_gemm f8n = kiln_lt_gemm_matmul(64, 64, 64, KILN_F8_E4M3);
    f8n.d_type = KILN_BF16;
    kiln_err err = {{0}};
    assert_int_equal(kiln_lt_gemm_view(&f8n, &v, &err), KILN_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "fp8 needs"));
    f8.d_type = KILN_F8_E4M3;
    assert_int_equal(kiln_lt_gemm_view(&f8, &v, NULL), KILN_ERR_UNSUPPORTED);
}

static void test_view_matmul(void **state) {
    (void)state;
    kiln_lt_gemm g = kiln_lt_gemm_matmul(300, 200, 100, KILN_F16);
    kiln_lt_view v;
    assert_int_equal(kiln_lt_gemm_view(&g, &v, NULL), KILN_OK);
    assert_int_equal(v.op_a, CUBLAS_OP_N);
    assert_int_equal(v.op_b, CUBLAS_OP_N);
    assert_int_equal(v.rows_a, 200);
    assert_int_equal(v.cols_a, 100);
    assert_int_equal(v.lda, 200);
    assert_int_equal(v.rows_b, 100);
    assert_int_equal(v.cols_b, 300);
    assert_int_equal(v.ldb, 100);
    kiln_lt_gemm small = kiln_lt_gemm_matmul(4, 6, 5, KILN_F32);
    check_mapping(&small);
    /* A read transposed (x.t() @ w) with padded rows everywhere */
    kiln_lt_gemm t = kiln_lt_gemm_matmul(4, 6, 5, KILN_F32);
    t.trans_a = 1;
    t.lda = 7;
    t.ldb = 9;
    t.ldd = 8;
    assert_int_equal(kiln_lt_gemm_view(&t, &v, NULL), KILN_OK);
    assert_int_equal(v.op_b, CUBLAS_OP_T);
    assert_int_equal(v.rows_b, 4);
    assert_int_equal(v.cols_b, 5);
    check_mapping(&t);
    /* a leading dimension shorter than its row */
    t.lda = 3;
    kiln_err err = {{0}};
    assert_int_equal(kiln_lt_gemm_view(&t, &v, &err), KILN_ERR_INVALID);
    assert_non_null(strstr(err.msg, "lda 3"));
    kiln_lt_gemm mixed = kiln_lt_gemm_matmul(4, 6, 5, KILN_F32);
    mixed.b_type = KILN_BF16;
    assert_int_equal(kiln_lt_gemm_view(&mixed, &v, NULL), KILN_ERR_UNSUPPORTED);
}

static void test_view_bmm(void **state) {
    (void)state;
    kiln_lt_gemm g = kiln_lt_gemm_bmm(3, 4, 6, 5, KILN_F32);
    kiln_lt_view v;
    assert_int_equal(kiln_lt_gemm_view(&g, &v, NULL), KILN_OK);
    assert_int_equal(v.batch, 3);
    assert_int_equal(v.stride_a, 5 * 6); /* kiln's B */
    assert_int_equal(v.stride_b, 4 * 5); /* kiln's A */
    assert_int_equal(v.stride_d, 4 * 6);
    check_mapping(&g);
    /* a weight shared over the batch (stride 0), B stored [N, K] */
    kiln_lt_gemm s = g;
    s.stride_b = 0;
    s.trans_b = 1;
    s.ldb = 5;
    check_mapping(&s);
    s.stride_d = 0;
    assert_int_equal(kiln_lt_gemm_view(&s, &v, NULL), KILN_ERR_INVALID);
}

static void test_view_addmm(void **state) {
    (void)state;
    /* addmm(bias, x, w.t()) / linear with bias: the bias is one value per column of D, per row of
     * cuBLASLt's column-major D: its bias epilogue. */
    kiln_lt_gemm g = kiln_lt_gemm_linear(6, 4, 5, KILN_F32);
    g.epilogue = KILN_LT_EPI_BIAS;
    kiln_lt_view v;
    assert_int_equal(kiln_lt_gemm_view(&g, &v, NULL), KILN_OK);
    assert_int_equal(v.epilogue, CUBLASLT_EPILOGUE_BIAS);
    assert_int_equal(v.bias_type, CUDA_R_32F);
    check_mapping(&g);
    kiln_lt_epilogue e;
    assert_int_equal(kiln_lt_epilogue_parse("bias_gelu", &e), 0);
    assert_int_equal(e, KILN_LT_EPI_BIAS_GELU);
    assert_string_equal(kiln_lt_epilogue_name(e), "bias_gelu");
    assert_int_equal(kiln_lt_epilogue_parse("silu", &e), -1);
    g.bias_type = KILN_I64;
    assert_int_equal(kiln_lt_gemm_view(&g, &v, NULL), KILN_ERR_UNSUPPORTED);
}

static void test_load_message(void **state) {
    (void)state;
    kiln_err err = {{0}};
    if (kiln_lt_load(&err) == KILN_OK) {
        assert_non_null(kiln_lt.Matmul);
        assert_true(kiln_lt.GetVersion() >= 120000);
        if (!kiln_cuda_driver_present()) {
            /* without a driver the handle cannot be made: a status, not a crash */
            kiln_lt_gemm g = kiln_lt_gemm_linear(64, 64, 64, KILN_BF16);
            kiln_lt_plan *p = (kiln_lt_plan *)1;
            assert_int_equal(kiln_lt_plan_create(&g, &p, &err), KILN_ERR_BACKEND);
            assert_null(p);
            assert_non_null(strstr(err.msg, "cublasLtCreate"));
        }
        return;
    }
    /* not found: the message names what was tried */
    assert_non_null(strstr(err.msg, "libcublasLt.so.13"));
    assert_non_null(strstr(err.msg, "KILN_CUBLASLT"));
}

/* Field by field (the struct has padding). */
static int gemm_same(const kiln_lt_gemm *a, const kiln_lt_gemm *b) {
    return a->m == b->m && a->n == b->n && a->k == b->k && a->batch == b->batch &&
           a->stride_a == b->stride_a && a->stride_b == b->stride_b && a->stride_d == b->stride_d &&
           a->a_type == b->a_type && a->b_type == b->b_type && a->d_type == b->d_type &&
           a->trans_a == b->trans_a && a->trans_b == b->trans_b && a->lda == b->lda &&
           a->ldb == b->ldb && a->ldd == b->ldd && a->epilogue == b->epilogue &&
           a->bias_type == b->bias_type && a->fast_accum == b->fast_accum;
}

/* kiln_lt_gemm to JSON and back, and what the reader refuses. */
static void test_gemm_json(void **state) {
    (void)state;
    kiln_lt_gemm g = kiln_lt_gemm_bmm(3, 16, 24, 32, KILN_F16);
    g.trans_a = 1;
    g.lda = 40;
    g.epilogue = KILN_LT_EPI_BIAS_GELU;
    g.bias_type = KILN_F32;
    cJSON *j = kiln_lt_gemm_to_json(&g);
    kiln_lt_gemm back;
    kiln_err err;
    assert_int_equal(kiln_lt_gemm_from_json(j, &back, &err), KILN_OK);
    assert_true(gemm_same(&g, &back));
    cJSON_ReplaceItemInObjectCaseSensitive(j, "m", cJSON_CreateNumber(0));
    assert_int_equal(kiln_lt_gemm_from_json(j, &back, &err), KILN_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "'m'"));
    cJSON_ReplaceItemInObjectCaseSensitive(j, "m", cJSON_CreateNumber(16));
    cJSON_ReplaceItemInObjectCaseSensitive(j, "epilogue", cJSON_CreateString("swish"));
    assert_int_equal(kiln_lt_gemm_from_json(j, &back, &err), KILN_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "'epilogue'"));
    cJSON_ReplaceItemInObjectCaseSensitive(j, "epilogue", cJSON_CreateString("bias"));
    cJSON_ReplaceItemInObjectCaseSensitive(j, "a_type", cJSON_CreateString("float128"));
    assert_int_equal(kiln_lt_gemm_from_json(j, &back, &err), KILN_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "'a_type'"));
    cJSON_DeleteItemFromObjectCaseSensitive(j, "ldd");
    assert_int_equal(kiln_lt_gemm_from_json(j, &back, &err), KILN_ERR_FORMAT);
    cJSON_Delete(j);
    /* fp8 with use_fast_accum: written only when set, read back; absent reads as 0 */
    g = kiln_lt_gemm_linear(64, 48, 32, KILN_F8_E4M3);
    g.d_type = KILN_BF16;
    assert_null(cJSON_GetObjectItemCaseSensitive(j = kiln_lt_gemm_to_json(&g), "fast_accum"));
    cJSON_Delete(j);
    g.fast_accum = 1;
    j = kiln_lt_gemm_to_json(&g);
    assert_int_equal(kiln_lt_gemm_from_json(j, &back, &err), KILN_OK);
    assert_true(gemm_same(&g, &back) && back.fast_accum == 1);
    cJSON_ReplaceItemInObjectCaseSensitive(j, "fast_accum", cJSON_CreateNumber(2));
    assert_int_equal(kiln_lt_gemm_from_json(j, &back, &err), KILN_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "'fast_accum'"));
    cJSON_Delete(j);
}

/* A cublaslt candidate's directive JSON: an index or a concrete config, both round trip; args are
 * checked against the signature. */
static void test_call_json(void **state) {
    (void)state;
    kiln_lt_call_desc d = {.gemm = kiln_lt_gemm_linear(64, 48, 32, KILN_BF16),
                           .index = 17,
                           .arg_a = 0,
                           .arg_b = 1,
                           .arg_bias = 2,
                           .arg_d = 3};
    d.gemm.epilogue = KILN_LT_EPI_BIAS;
    kiln_signature sig = {0};
    kiln_abi_add_tensor(&sig, "x", KILN_BF16, 0, 1);
    kiln_abi_add_tensor(&sig, "w", KILN_BF16, 0, 1);
    kiln_abi_add_tensor(&sig, "b", KILN_BF16, 0, 1);
    kiln_abi_add_tensor(&sig, "y", KILN_BF16, 1, 1);
    kiln_abi_add_param(&sig, KILN_PARAM_I64, "n64", "int64_t");
    char *json = kiln_lt_call_json(&d);
    kiln_lt_call_desc back;
    kiln_err err;
    assert_int_equal(kiln_lt_call_parse(json, &sig, &back, &err), KILN_OK);
    assert_int_equal(back.has_config, 0);
    assert_int_equal(back.index, 17);
    assert_true(gemm_same(&back.gemm, &d.gemm));
    assert_int_equal(back.arg_bias, 2);
    assert_int_equal(back.arg_d, 3);
    free(json);

    d.has_config = 1;
    d.config = (kiln_lt_config){.algo = 66,
                                .tile = 18,
                                .stages = 29,
                                .split_k = 2,
                                .reduction = 1,
                                .cluster = 2,
                                .workspace = 1 << 20,
                                .heuristic = -1};
    d.version = 130100;
    json = kiln_lt_call_json(&d);
    assert_int_equal(kiln_lt_call_parse(json, &sig, &back, &err), KILN_OK);
    assert_int_equal(back.has_config, 1);
    assert_true(kiln_lt_config_same(&back.config, &d.config));
    assert_int_equal(back.config.workspace, 1 << 20);
    assert_int_equal(back.version, 130100);
    free(json);

    d.arg_d = 4; /* the axis, not a tensor */
    json = kiln_lt_call_json(&d);
    assert_int_equal(kiln_lt_call_parse(json, &sig, &back, &err), KILN_ERR_COMPILE);
    assert_non_null(strstr(err.msg, "args.d = 4 is not a tensor parameter"));
    assert_int_equal(kiln_lt_call_parse(json, NULL, &back, &err), KILN_OK);
    free(json);
    d.arg_d = 3;
    d.arg_bias = -1; /* a bias epilogue without one */
    json = kiln_lt_call_json(&d);
    assert_int_equal(kiln_lt_call_parse(json, &sig, &back, &err), KILN_ERR_COMPILE);
    assert_non_null(strstr(err.msg, "needs a bias"));
    free(json);
    assert_int_equal(kiln_lt_call_parse("{\"gemm\": {}}", NULL, &back, &err), KILN_ERR_COMPILE);
    assert_int_equal(kiln_lt_call_parse("not json", NULL, &back, &err), KILN_ERR_COMPILE);
    char big[2048];
    d.has_config = 0;
    d.index = KILN_LT_CALL_CAP; /* past the cap the family's parameters can reach */
    d.arg_bias = 2;
    json = kiln_lt_call_json(&d);
    snprintf(big, sizeof big, "%s", json);
    free(json);
    assert_int_equal(kiln_lt_call_parse(big, NULL, &back, &err), KILN_ERR_COMPILE);
    assert_non_null(strstr(err.msg, "'config'"));
}

/* ---- on a GPU ---- */

static int gpu_state; /* 0: not tried, 1: context current and cuBLASLt loaded, -1: skip */
static char gpu_why[1100];

#define NEED_GPU()                                                                                 \
    do {                                                                                           \
        if (!need_gpu())                                                                           \
            skip();                                                                                \
    } while (0)

/* kiln's rule for "a GPU is present" (kiln_backend_default): without one the device tests skip;
 * with one, a device that does not open fails. A GPU without cuBLASLt skips (kiln runs there, these
 * tests cannot). */
static int need_gpu(void) {
    if (!gpu_state) {
        CUdevice dev;
        CUcontext ctx;
        kiln_device_info info;
        kiln_err err = {{0}};
        gpu_state = -1;
        snprintf(gpu_why, sizeof gpu_why, "the visible GPU did not open (see the first GPU test)");
        if (strcmp(kiln_backend_default(), "cuda") != 0)
            snprintf(gpu_why, sizeof gpu_why, "no CUDA device (no driver or no visible GPU)");
        else if (kiln_cuda_device_open(0, NULL, &dev, &ctx, &info, &err))
            fail_msg("a GPU is visible but does not open: %s", err.msg);
        else if (kiln_cuda.CtxSetCurrent(ctx) != CUDA_SUCCESS)
            fail_msg("cuCtxSetCurrent failed");
        else if (kiln_lt_load(&err))
            snprintf(gpu_why, sizeof gpu_why, "a GPU but %s", err.msg);
        else
            gpu_state = 1;
    }
    if (gpu_state < 0)
        printf("SKIP: %s\n", gpu_why);
    return gpu_state > 0;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#define CU_OK(call) assert_int_equal((call), CUDA_SUCCESS)

static void test_gpu_enumerate_4096(void **state) {
    (void)state;
    NEED_GPU();
    kiln_lt_gemm g = kiln_lt_gemm_linear(4096, 4096, 4096, KILN_BF16);
    kiln_lt_plan *p = NULL;
    kiln_err err = {{0}};
    if (kiln_lt_plan_create(&g, &p, &err))
        fail_msg("kiln_lt_plan_create: %s", err.msg);
    kiln_lt_config *cs = NULL;
    int n = 0, n_valid = 0;
    double t0 = now_s();
    if (kiln_lt_enumerate(p, 32u << 20, 1 << 30, &cs, &n, &n_valid, &err))
        fail_msg("kiln_lt_enumerate: %s", err.msg);
    int n_heur = 0;
    while (n_heur < n && cs[n_heur].heuristic == n_heur)
        n_heur++;
    printf("    bf16 4096^3: %d configs (%d from the heuristic) in %.2f s, cuBLASLt %zu\n", n_valid,
           n_heur, now_s() - t0, kiln_lt.GetVersion());
    assert_int_equal(n, n_valid);
    assert_true(n_heur >= 1);
    assert_true(n > n_heur);
    int n_split = 0;
    for (int i = n_heur; i < n; i++) {
        assert_int_equal(cs[i].heuristic, -1);
        /* bf16 D: partial sums of a split are reduced in fp32, never in bf16 */
        if (cs[i].split_k > 1) {
            assert_int_equal(cs[i].reduction, CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
            n_split++;
        }
    }
    printf("    of them %d enumerated split-K configs, all reducing in fp32\n", n_split);
    for (int i = 0; i < n && i < 3000; i++) {
        assert_true(cs[i].workspace <= (32u << 20));
        for (int j = 0; j < i; j++)
            if (kiln_lt_config_same(&cs[i], &cs[j]))
                fail_msg("configs %d and %d are the same", j, i);
    }
    /* the order depends only on cuBLASLt's answers: a second enumeration, capped, is a prefix */
    kiln_lt_config *again = NULL;
    int n2 = 0, n2_valid = 0;
    assert_int_equal(kiln_lt_enumerate(p, 32u << 20, 50, &again, &n2, &n2_valid, &err), KILN_OK);
    assert_int_equal(n2_valid, n_valid);
    assert_int_equal(n2, n < 50 ? n : 50);
    for (int i = 0; i < n2; i++)
        assert_true(kiln_lt_config_same(&again[i], &cs[i]));
    free(again);
    free(cs);
    kiln_lt_plan_destroy(p);
}

/* x rounded to t, stored as element i of buf; returns the rounded value. */
static float store(kiln_dtype t, void *buf, size_t i, float x) {
    kiln_dtype_store(t, buf, i, x);
    return (float)kiln_dtype_load(t, buf, i);
}

/* Runs up to 64 configs of g (heuristic first) on random data and compares each to a naive
 * reference; prints their times. */
static void run_small(kiln_lt_gemm g, const char *label) {
    kiln_err err = {{0}};
    kiln_lt_plan *p = NULL;
    if (kiln_lt_plan_create(&g, &p, &err))
        fail_msg("kiln_lt_plan_create: %s", err.msg);
    int64_t M = g.m, N = g.n, K = g.k;
    size_t na = (size_t)(M * K), nb = (size_t)(K * N), nd = (size_t)(M * N);
    float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b),
          *bias = malloc(N * sizeof *bias);
    size_t es = kiln_dtype_size(g.a_type); /* inputs; the output and the bias are bf16 */
    unsigned char *ha = malloc(na * es), *hb = malloc(nb * es);
    uint16_t *hbias = malloc((size_t)N * 2);
    uint16_t *hd = malloc(nd * 2);
    double *ref = malloc(nd * sizeof *ref);
    srand(17);
    for (size_t i = 0; i < na; i++)
        a[i] = store(g.a_type, ha, i, (float)rand() / RAND_MAX * 2 - 1);
    for (size_t i = 0; i < nb; i++)
        b[i] = store(g.b_type, hb, i, (float)rand() / RAND_MAX * 2 - 1);
    for (int64_t i = 0; i < N; i++)
        bias[i] = store(KILN_BF16, hbias, (size_t)i, (float)rand() / RAND_MAX - 0.5f);
    int has_bias = g.epilogue == KILN_LT_EPI_BIAS_GELU || g.epilogue == KILN_LT_EPI_BIAS;
    int gelu = g.epilogue == KILN_LT_EPI_BIAS_GELU || g.epilogue == KILN_LT_EPI_GELU;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = has_bias ? bias[j] : 0;
            for (int64_t l = 0; l < K; l++)
                s += (double)a[g.trans_a ? l * M + i : i * K + l] *
                     b[g.trans_b ? j * K + l : l * N + j];
            if (gelu)
                s = 0.5 * s * (1 + tanh(0.7978845608028654 * (s + 0.044715 * s * s * s)));
            ref[i * N + j] = s;
        }
    CUdeviceptr da, db, dd, dbias, dws;
    const size_t ws_bytes = 32u << 20;
    CU_OK(kiln_cuda.MemAlloc(&da, na * es));
    CU_OK(kiln_cuda.MemAlloc(&db, nb * es));
    CU_OK(kiln_cuda.MemAlloc(&dd, nd * 2));
    CU_OK(kiln_cuda.MemAlloc(&dbias, (size_t)N * 2));
    CU_OK(kiln_cuda.MemAlloc(&dws, ws_bytes));
    CUstream st = NULL;
    CU_OK(kiln_cuda.MemcpyHtoDAsync(da, ha, na * es, st));
    CU_OK(kiln_cuda.MemcpyHtoDAsync(db, hb, nb * es, st));
    CU_OK(kiln_cuda.MemcpyHtoDAsync(dbias, hbias, (size_t)N * 2, st));
    kiln_lt_config *cs = NULL;
    int n = 0, n_valid = 0;
    if (kiln_lt_enumerate(p, ws_bytes, 64, &cs, &n, &n_valid, &err))
        fail_msg("kiln_lt_enumerate: %s", err.msg);
    assert_true(n >= 2);
    assert_int_equal(cs[0].heuristic, 0);
    kiln_lt_ptrs ptrs = {
        .a = da, .b = db, .d = dd, .bias = dbias, .workspace = dws, .workspace_bytes = ws_bytes};
    CUevent e0, e1;
    CU_OK(kiln_cuda.EventCreate(&e0, 0));
    CU_OK(kiln_cuda.EventCreate(&e1, 0));
    float best = 1e30f, heur = 0;
    for (int c = 0; c < n; c++) {
        CU_OK(kiln_cuda.MemsetD8Async(dd, 0xff, nd * 2,
                                      st)); /* NaN: a config that writes nothing fails */
        if (kiln_lt_run(p, &cs[c], &ptrs, st, &err))
            fail_msg("config %d: %s", c, err.msg);
        CU_OK(kiln_cuda.MemcpyDtoHAsync(hd, dd, nd * 2, st));
        CU_OK(kiln_cuda.StreamSynchronize(st));
        for (size_t i = 0; i < nd; i++) {
            double got = kiln_bf16_to_f32(hd[i]);
            if (!(fabs(got - ref[i]) <= 0.03 + 0.01 * fabs(ref[i]))) {
                char desc[192];
                kiln_lt_config_format(&cs[c], desc, sizeof desc);
                fail_msg("%s config %d (%s): element %zu is %g, expected %g", label, c, desc, i,
                         got, ref[i]);
            }
        }
        CU_OK(kiln_cuda.EventRecord(e0, st));
        for (int r = 0; r < 10; r++)
            assert_int_equal(kiln_lt_run(p, &cs[c], &ptrs, st, &err), KILN_OK);
        CU_OK(kiln_cuda.EventRecord(e1, st));
        CU_OK(kiln_cuda.EventSynchronize(e1));
        float ms;
        CU_OK(kiln_cuda.EventElapsedTime(&ms, e0, e1));
        if (c == 0)
            heur = ms * 100;
        if (ms * 100 < best)
            best = ms * 100;
    }
    printf("    %s %lldx%lldx%lld: %d of %d configs correct; heuristic #1 %.2f us, best %.2f us\n",
           label, (long long)M, (long long)N, (long long)K, n, n_valid, heur, best);
    kiln_cuda.EventDestroy(e0);
    kiln_cuda.EventDestroy(e1);
    CUdeviceptr bufs[] = {da, db, dd, dbias, dws};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        kiln_cuda.MemFree(bufs[i]);
    free(cs);
    free(a);
    free(b);
    free(bias);
    free(ha);
    free(hb);
    free(hbias);
    free(hd);
    free(ref);
    kiln_lt_plan_destroy(p);
}

static void test_gpu_run_small(void **state) {
    (void)state;
    NEED_GPU();
    run_small(kiln_lt_gemm_linear(128, 256, 64, KILN_BF16), "linear");
    kiln_lt_gemm g = kiln_lt_gemm_matmul(128, 256, 64, KILN_BF16);
    g.epilogue = KILN_LT_EPI_BIAS_GELU;
    run_small(g, "matmul+bias+gelu");
    /* fp8 e4m3 in, bf16 out, no scale pointers (1.0) */
    kiln_lt_gemm f8 = kiln_lt_gemm_linear(128, 256, 64, KILN_F8_E4M3);
    f8.d_type = f8.bias_type = KILN_BF16;
    run_small(f8, "linear fp8 e4m3");
}

/* A cublaslt candidate's index settles to the enumeration's config on this device: 0 is the
 * heuristic's first answer; a settled config replays as given, and not under another version. */
static void test_gpu_call_resolve(void **state) {
    (void)state;
    NEED_GPU();
    kiln_lt_call_desc d = {.gemm = kiln_lt_gemm_linear(256, 512, 128, KILN_BF16),
                           .index = 0,
                           .arg_a = 0,
                           .arg_b = 1,
                           .arg_bias = -1,
                           .arg_d = 2};
    kiln_lt_call *c0 = NULL, *c1 = NULL, *again = NULL;
    kiln_err err;
    assert_int_equal(kiln_lt_call_open(&d, &c0, &err), KILN_OK);
    const kiln_lt_call_desc *r0 = kiln_lt_call_resolved(c0);
    assert_int_equal(r0->has_config, 1);
    assert_int_equal(r0->config.heuristic, 0);
    assert_true(r0->version > 0);
    d.index = 1;
    assert_int_equal(kiln_lt_call_open(&d, &c1, &err), KILN_OK);
    assert_false(kiln_lt_config_same(&r0->config, &kiln_lt_call_resolved(c1)->config));
    kiln_lt_call_desc settled = *r0;
    assert_int_equal(kiln_lt_call_open(&settled, &again, &err), KILN_OK);
    assert_true(kiln_lt_config_same(&kiln_lt_call_resolved(again)->config, &r0->config));
    kiln_lt_call_close(again);
    settled.version += 1;
    assert_int_equal(kiln_lt_call_open(&settled, &again, &err), KILN_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "was enumerated with cuBLASLt"));
    kiln_lt_call_close(c0);
    kiln_lt_call_close(c1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_json_round_trip),
        cmocka_unit_test(test_config_json_errors),
        cmocka_unit_test(test_enumeration_order),
        cmocka_unit_test(test_view_linear),
        cmocka_unit_test(test_view_matmul),
        cmocka_unit_test(test_view_bmm),
        cmocka_unit_test(test_view_addmm),
        cmocka_unit_test(test_load_message),
        cmocka_unit_test(test_gemm_json),
        cmocka_unit_test(test_call_json),
        cmocka_unit_test(test_gpu_enumerate_4096),
        cmocka_unit_test(test_gpu_run_small),
        cmocka_unit_test(test_gpu_call_resolve),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
