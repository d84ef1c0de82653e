/* test_family_cublaslt.c: the cublaslt family's matcher on the problems of
 * tests/data/families/cublaslt (linear with and without bias, mm with either operand captured
 * transposed, bmm, batched matmul, addmm) and on the ones it must decline, with the reason; the
 * cuda candidate's directive parsed back into the GEMM the capture describes (the emit/parse round
 * trip); flops and bytes; and the cpu candidate's plain GEMM. No GPU. */
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
} gemm_case;

static const gemm_case CASES[] = {
    {"linear_bf16_3d", 18, 24, 40, 1, 0, 1, 40, 40, 24, KILN_BF16, -1, 0, 1, 2},
    {"linear_bias_f32", 17, 20, 33, 1, 0, 1, 33, 33, 20, KILN_F32, 2, 0, 1, 3},
    {"mm_f16_wt", 12, 20, 48, 1, 0, 1, 48, 48, 20, KILN_F16, -1, 0, 1, 2},
    {"mm_f32_at", 10, 14, 24, 1, 1, 0, 10, 14, 14, KILN_F32, -1, 0, 1, 2},
    {"bmm_bf16", 16, 24, 32, 3, 0, 0, 32, 24, 24, KILN_BF16, -1, 0, 1, 2},
    {"matmul_f32_batched", 8, 12, 16, 2, 0, 1, 16, 16, 12, KILN_F32, -1, 0, 1, 2},
    {"addmm_bf16", 16, 24, 64, 1, 0, 1, 64, 64, 24, KILN_BF16, 0, 1, 2, 3},
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
            assert_int_equal(g->d_type, c->t);
            assert_int_equal(g->epilogue, c->bias >= 0 ? KILN_LT_EPI_BIAS : KILN_LT_EPI_NONE);
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
        }
        double flops = f->flops(p, &m, &p->workloads[0]);
        assert_true(flops == 2.0 * (double)(c->m * c->n * c->k * c->batch));
        double es = (double)kiln_dtype_size(c->t);
        double bytes = es * (double)(c->batch * (c->m * c->k + c->k * c->n + c->m * c->n) +
                                     (c->bias >= 0 ? c->n : 0));
        assert_true(f->min_bytes(p, &m, &p->workloads[0]) == bytes);
        /* the cpu candidate: a plain C GEMM with the problem's entry point, no library line */
        char *cpu = f->emit(p, &m, pt, 0);
        assert_non_null(strstr(cpu, "// kiln: launch gemm_kernel"));
        assert_null(strstr(cpu, "library"));
        assert_non_null(strstr(cpu, c->trans_b ? "kiln_b[j * " : "kiln_b[k * "));
        assert_true((strstr(cpu, "acc += ") != NULL) &&
                    (strstr(cpu, "[j]);") != NULL) == (c->bias >= 0));
        free(cpu);
        kiln_problem_free(p);
    }
}

static void test_declines(void **state) {
    (void)state;
    static const struct {
        const char *dir, *why;
    } no[] = {
        {"declined/addmm_beta", "beta or alpha other than 1"},
        {"declined/mm_f64", "float64"},
        {"declined/bmm_broadcast_batch", "permuted across its batch dims"},
    };
    const kiln_family *f = kiln_family_find("cublaslt");
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        kiln_problem *p = load(no[i].dir);
        kiln_match m;
        char why[512] = "";
        assert_int_equal(f->match(p, &m, why, sizeof why), 0);
        if (!strstr(why, no[i].why))
            fail_msg("%s: declined with '%s', expected '%s'", no[i].dir, why, no[i].why);
        kiln_problem_free(p);
    }
    /* a problem of another family: not a GEMM */
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/data/families/softmax/aten_memory_order", KILN_SOURCE_DIR);
    kiln_problem *p = NULL;
    kiln_err err;
    assert_int_equal(kiln_problem_load(dir, &p, &err), KILN_OK);
    kiln_match m;
    char why[512] = "";
    assert_int_equal(f->match(p, &m, why, sizeof why), 0);
    if (!strstr(why, "is not one GEMM"))
        fail_msg("softmax declined with '%s'", why);
    kiln_problem_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_match_and_directive),
        cmocka_unit_test(test_declines),
    };
    return cmocka_run_group_tests_name("family_cublaslt", tests, NULL, NULL);
}
