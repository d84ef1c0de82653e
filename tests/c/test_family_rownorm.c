/* test_family_rownorm.c: the rmsnorm and layernorm families without a GPU: what the matchers accept
 * (captured modules and aten calls, hand-written problems, SOL-ExecBench's published rmsnorm_h4096,
 * the bench rows) and the variant and rounding program they read, what they decline and why, the
 * constraints' reasons, launch directives that plan for every workload of every valid point, and
 * that valid points compile for sm_90 with NVRTC: an even sample of RN_TEST_MAX_COMPILES per
 * problem (the first and the last valid point included) plus the first point of each kind of kernel
 * (a cluster, a row read twice, a persistent grid, uneven rows), about 120 compiles, half a minute
 * on two cores. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "backend/nvrtc.h"
#include "gen/family.h"
#include "gen/rownorm.h"

#define RN_TEST_MAX_COMPILES 4

static const kiln_family *rms, *ln;

static kiln_problem *load_dir(const char *dir) {
    kiln_err err;
    kiln_problem *p = NULL;
    if (kiln_problem_load(dir, &p, &err) != KILN_OK)
        fail_msg("%s: %s", dir, err.msg);
    return p;
}

static kiln_problem *load_repo(const char *rel) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", KILN_SOURCE_DIR, rel);
    return load_dir(dir);
}

/* Parses a problem from memory. */
static kiln_problem *problem(const char *name, const char *def, const char *wl) {
    kiln_err err;
    kiln_problem *p = NULL;
    if (kiln_problem_parse(def, strlen(def), name, wl, strlen(wl), name, &p, &err) != KILN_OK)
        fail_msg("%s: %s", name, err.msg);
    return p;
}

/* cmocka here has no assert_double_equal: relative comparison of two doubles. */
#define assert_close(a, b)                                                                         \
    do {                                                                                           \
        double a_ = (a), b_ = (b);                                                                 \
        if (!(a_ == b_ || (a_ - b_) * (a_ - b_) <= 1e-20 * b_ * b_))                               \
            fail_msg("%s = %.17g, expected %.17g", #a, a_, b_);                                    \
    } while (0)

static int try_match(const kiln_family *f, const kiln_problem *p, kiln_match *m, char *why,
                     size_t n) {
    memset(m, 0, sizeof *m);
    for (int k = 0; k < 8; k++)
        m->input_of_role[k] = -1;
    for (int k = 0; k < 4; k++)
        m->output_of_role[k] = -1;
    why[0] = 0;
    return f->match(p, m, why, n);
}

static void must_match(const kiln_family *f, const kiln_problem *p, kiln_match *m) {
    char why[256];
    if (!try_match(f, p, m, why, sizeof why))
        fail_msg("%s: %s declined: %s", p->name, f->name, why);
}

/* Declines with a reason that contains `expect`. */
static void must_decline(const kiln_family *f, const kiln_problem *p, const char *expect) {
    kiln_match m;
    char why[256];
    if (try_match(f, p, &m, why, sizeof why))
        fail_msg("%s: %s matched (%s), expected a decline", p->name, f->name, m.how);
    assert_true(why[0] != 0);
    if (!strstr(why, expect))
        fail_msg("%s: %s declined with '%s', expected '%s'", p->name, f->name, why, expect);
}

static const char *check_point(const kiln_family *f, const kiln_problem *p, const kiln_match *m,
                               const int64_t *point, char *buf, size_t n) {
    const char *bad = f->check(p, m, point);
    if (!bad)
        return NULL;
    snprintf(buf, n, "%s", bad[0] == '!' ? bad + 1 : bad);
    if (bad[0] == '!')
        free((void *)bad);
    return buf;
}

/* point from values of RN_ITEMS, RN_GROUP, RN_STREAM, RN_PERSIST, with RN_WEARLY 0 (the table's
 * order is RN_STREAM, RN_WEARLY, RN_PERSIST, RN_ITEMS, RN_GROUP) */
#define P_WEARLY 1
static void mkpoint(int64_t *pt, int items, int group, int stream, int persist) {
    pt[0] = stream;
    pt[P_WEARLY] = 0;
    pt[2] = persist;
    pt[3] = items;
    pt[4] = group;
}

/* ---- the repository's problems ---- */

static const struct {
    const char *dir, *family, *variant;
    double eps;
} cases[] = {
    {"tests/data/families/rownorm/rms_gemma4_module_bf16", "rmsnorm", "rmsnorm_weight", 1e-6},
    {"tests/data/families/rownorm/rms_gemma4_noscale_bf16", "rmsnorm", "rmsnorm_noweight", 1e-6},
    {"tests/data/families/rownorm/rms_llama_module_f16", "rmsnorm", "rmsnorm_weight_cast_first",
     1e-5},
    {"tests/data/families/rownorm/rms_qwen35moe_module_bf16", "rmsnorm", "rmsnorm_1p_weight", 1e-6},
    {"tests/data/families/rownorm/rms_qwen35moe_gated_bf16", "rmsnorm",
     "rmsnorm_weight_cast_first_gated", 1e-6},
    {"tests/data/families/rownorm/rms_fused_decomposed_bf16", "rmsnorm", "rmsnorm_weight",
     9.999999974752427e-07},
    {"tests/data/families/rownorm/rms_aten_rms_norm_f32", "rmsnorm", "rmsnorm_weight", 1e-5},
    {"tests/data/families/rownorm/rms_handwritten_f16_eps_input", "rmsnorm", "rmsnorm_weight", 0},
    {"tests/data/families/rownorm/rms_handwritten_offset_f32", "rmsnorm", "rmsnorm_1p_weight",
     1e-6},
    {"tests/data/families/rownorm/ln_aten_layer_norm_bf16", "layernorm", "layernorm_weight_bias",
     1e-5},
    {"tests/data/families/rownorm/ln_aten_native_f32_odd", "layernorm",
     "layernorm_weight_bias_stats", 1e-5},
    {"tests/data/families/rownorm/ln_aten_noaffine_f16_cols7", "layernorm", "layernorm_noweight",
     1e-5},
    {"tests/data/families/rownorm/ln_handwritten_f32", "layernorm", "layernorm_weight_bias", 1e-6},
    {"bench/problems/rmsnorm_bf16_h4096", "rmsnorm", "rmsnorm_weight", 1e-5},
    {"bench/problems/rmsnorm_gemma4_bf16_s4096_h2304", "rmsnorm", "rmsnorm_weight", 1e-6},
    {"bench/problems/rmsnorm_qwen3_5_moe_bf16_s2048_h2048", "rmsnorm", "rmsnorm_1p_weight", 1e-6},
    {"bench/problems/layernorm_bf16_8192x1024", "layernorm", "layernorm_weight_bias_stats", 1e-5},
    {"bench/problems/layernorm_f32_8192x1024", "layernorm", "layernorm_weight_bias_stats", 1e-5},
};

static void test_match_repository_problems(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kiln_problem *p = load_repo(cases[i].dir);
        const kiln_family *f = strcmp(cases[i].family, "rmsnorm") ? ln : rms;
        const kiln_family *other = f == rms ? ln : rms;
        kiln_match m;
        must_match(f, p, &m);
        if (strcmp(m.variant, cases[i].variant))
            fail_msg("%s: variant %s, expected %s", cases[i].dir, m.variant, cases[i].variant);
        assert_close(kiln_match_get(&m, "eps", -1), cases[i].eps);
        assert_true(m.how[0] != 0);
        if (strstr(cases[i].dir, "handwritten") || strstr(cases[i].dir, "h4096"))
            must_decline(other, p, "op_type");
        else
            must_decline(other, p,
                         f == rms ? "an RMSNorm, not a LayerNorm" : "a LayerNorm, not an RMSNorm");
        kiln_problem_free(p);
    }
}

/* The rounding programs the variants need, as the emitted source spells them. */
static void test_programs_in_source(void **state) {
    (void)state;
    static const struct {
        const char *dir, *needle;
    } progs[] = {
        {"tests/data/families/rownorm/rms_llama_module_f16",
         "#define RN_Y_PROG(n, w, b, g) rn_round_f16((rn_round_f16((n)) * w))"},
        {"tests/data/families/rownorm/rms_gemma4_module_bf16",
         "#define RN_Y_PROG(n, w, b, g) rn_round_bf16(((n) * w))"},
        {"tests/data/families/rownorm/rms_qwen35moe_module_bf16",
         "#define RN_W_PROG(w) ((w) + 1.0f)"},
        {"tests/data/families/rownorm/rms_qwen35moe_gated_bf16",
         "#define RN_Y_PROG(n, w, b, g) rn_round_bf16((rn_round_bf16((rn_round_bf16((n)) * w)) * "
         "g))"},
        {"tests/data/families/rownorm/rms_qwen35moe_gated_bf16",
         "#define RN_G_PROG(g) rn_silu((g))"},
        {"tests/data/families/rownorm/rms_handwritten_offset_f32",
         "#define RN_W_PROG(w) ((w) + 1.0f)"},
        {"tests/data/families/rownorm/ln_aten_layer_norm_bf16",
         "#define RN_Y_PROG(n, w, b, g) rn_round_bf16((((n) * w) + b))"},
        {"tests/data/families/rownorm/ln_aten_native_f32_odd", "#define RN_HAS_MEAN 1"},
        {"tests/data/families/rownorm/rms_handwritten_f16_eps_input", "(float)(eps));"},
        {"tests/data/families/rownorm/rms_gemma4_noscale_bf16", "#define RN_HAS_W 0"},
    };
    for (size_t i = 0; i < sizeof progs / sizeof progs[0]; i++) {
        kiln_problem *p = load_repo(progs[i].dir);
        const kiln_family *f = strstr(progs[i].dir, "/ln_") ? ln : rms;
        kiln_match m;
        must_match(f, p, &m);
        int64_t pt[KILN_FAMILY_MAX_PARAMS];
        kiln_family_point(f, 0, pt);
        for (int cuda = 0; cuda < 2; cuda++) {
            char *src = f->emit(p, &m, pt, cuda);
            if (!strstr(src, progs[i].needle))
                fail_msg("%s (%s): no '%s' in\n%.2500s", progs[i].dir, cuda ? "cuda" : "cpu",
                         progs[i].needle, src);
            free(src);
        }
        kiln_problem_free(p);
    }
}

static rn_prog prog(int n, const unsigned char *steps) {
    rn_prog p = {n, {0}};
    memcpy(p.step, steps, (size_t)n);
    return p;
}

/* The fast SiLU only where its result reaches a 16-bit y through products and roundings; and the
 * gated bf16 module's CUDA source asks for it. */
static void test_silu_narrow(void **state) {
    (void)state;
    const unsigned char silu[] = {STEP_SILU},
                        gate_y[] = {STEP_ROUND_BF16, STEP_MUL_W, STEP_ROUND_BF16, STEP_MUL_G,
                                    STEP_ROUND_BF16};
    const unsigned char gate_then_bias[] = {STEP_MUL_W, STEP_MUL_G, STEP_ADD_B};
    const unsigned char bias_then_gate[] = {STEP_ADD_B, STEP_MUL_G, STEP_ROUND_F16};
    const unsigned char silu_y[] = {STEP_MUL_W, STEP_SILU, STEP_MUL_G};
    const unsigned char silu_add[] = {STEP_SILU, STEP_ADD_ONE};
    rn_prog none = prog(0, silu), g = prog(1, silu), y = prog(5, gate_y);
    assert_int_equal(rn_silu_narrow(&none, &none, &g, &y, KILN_BF16), 1);
    assert_int_equal(rn_silu_narrow(&none, &none, &g, &y, KILN_F32), 0);
    assert_int_equal(rn_silu_narrow(&none, &none, &none, &y, KILN_BF16), 0); /* no SiLU */
    assert_int_equal(rn_silu_narrow(&g, &none, &g, &y, KILN_BF16), 0);       /* SiLU of w */
    rn_prog gb = prog(3, gate_then_bias), bg = prog(3, bias_then_gate);
    assert_int_equal(rn_silu_narrow(&none, &none, &g, &gb, KILN_BF16), 0);
    assert_int_equal(rn_silu_narrow(&none, &none, &g, &bg, KILN_F16), 1);
    rn_prog sy = prog(3, silu_y), sa = prog(2, silu_add);
    assert_int_equal(rn_silu_narrow(&none, &none, &none, &sy, KILN_BF16), 1);
    assert_int_equal(rn_silu_narrow(&none, &none, &none, &sa, KILN_BF16), 0);
    assert_int_equal(rn_silu_narrow(&none, &none, &sa, &y, KILN_BF16), 0);

    kiln_problem *p = load_repo("tests/data/families/rownorm/rms_qwen35moe_gated_bf16");
    kiln_match m;
    must_match(rms, p, &m);
    int64_t pt[KILN_FAMILY_MAX_PARAMS];
    kiln_family_point(rms, 0, pt);
    char *src = rms->emit(p, &m, pt, 1);
    assert_non_null(strstr(src, "#define RN_SILU_LP 1\n"));
    free(src);
    kiln_problem_free(p);
}

/* SOL-ExecBench's published rmsnorm_h4096, unmodified (a verbatim copy, and the shared directory
 * itself when it is there). */
static const char solbench_def[] =
    "{\"name\": \"rmsnorm_h4096\", \"op_type\": \"rmsnorm\", \"axes\": {\"batch_size\": {\"type\": "
    "\"var\", \"description\": null}, \"hidden_size\": {\"type\": \"const\", \"value\": 4096, "
    "\"description\": null}}, \"custom_inputs_entrypoint\": null, \"inputs\": {\"hidden_states\": "
    "{\"shape\": [\"batch_size\", \"hidden_size\"], \"dtype\": \"bfloat16\", \"description\": "
    "null}, "
    "\"weight\": {\"shape\": [\"hidden_size\"], \"dtype\": \"bfloat16\", \"description\": null}}, "
    "\"outputs\": {\"output\": {\"shape\": [\"batch_size\", \"hidden_size\"], \"dtype\": "
    "\"bfloat16\", \"description\": null}}, \"reference\": \"import "
    "torch\\n\\n@torch.no_grad()\\ndef "
    "run(hidden_states, weight):\\n    batch_size, hidden_size = hidden_states.shape\\n    # Check "
    "constants\\n    assert hidden_size == 4096\\n\\n    EPS = 1e-5\\n\\n    x = "
    "hidden_states.to(torch.float32)\\n    inv_rms = torch.rsqrt(x.pow(2).mean(dim=-1, "
    "keepdim=True) + EPS)\\n    y = (x * inv_rms) * weight.to(torch.float32)\\n    return "
    "y.to(hidden_states.dtype)\", \"description\": \"Root Mean Square Normalization with "
    "hidden_size=4096. Captured from Llama-3.1-8B. Epsilon is fixed at 1e-5.\"}\n";
static const char solbench_wl[] =
    "{\"uuid\": \"33bf737d-3b37-4e38-be80-ea39b4b46ae6\", \"axes\": {\"batch_size\": 7}, "
    "\"inputs\": "
    "{\"hidden_states\": {\"type\": \"random\"}, \"weight\": {\"type\": \"random\"}}}\n"
    "{\"uuid\": \"864d596c-a930-4fc4-b241-02e6a06e92cb\", \"axes\": {\"batch_size\": 1}, "
    "\"inputs\": "
    "{\"hidden_states\": {\"type\": \"random\"}, \"weight\": {\"type\": \"random\"}}}\n"
    "{\"uuid\": \"841b0afa-80fa-449a-9e1d-f294da92d02f\", \"axes\": {\"batch_size\": 14509}, "
    "\"inputs\": {\"hidden_states\": {\"type\": \"random\"}, \"weight\": {\"type\": "
    "\"random\"}}}\n";

static void test_match_solbench(void **state) {
    (void)state;
    kiln_problem *p = problem("solbench_copy", solbench_def, solbench_wl);
    kiln_match m;
    must_match(rms, p, &m);
    assert_string_equal(m.variant, "rmsnorm_weight");
    assert_string_equal(m.rows_expr, "batch_size");
    assert_string_equal(m.cols_expr, "hidden_size");
    assert_close(kiln_match_get(&m, "eps", 0), 1e-5);
    assert_int_equal(m.input_of_role[0], 0);
    assert_int_equal(m.input_of_role[1], 1);
    must_decline(ln, p, "op_type 'rmsnorm' is not layernorm");
    kiln_problem_free(p);
    char shared[1024];
    snprintf(shared, sizeof shared, "%s/../shared/solbench/rmsnorm_h4096", KILN_SOURCE_DIR);
    if (access(shared, R_OK) == 0) {
        p = load_dir(shared);
        must_match(rms, p, &m);
        assert_close(kiln_match_get(&m, "eps", 0), 1e-5);
        kiln_problem_free(p);
    }
}

/* ---- declines ---- */

/* A captured module problem: x [4, 64] (axes n4, n64) and a weight [64], reference body `body`. */
static kiln_problem *module_problem(const char *name, const char *body, const char *layout_x,
                                    const char *x_dtype) {
    char *def = xasprintf(
        "{\"name\": \"%s\", \"op_type\": \"module:TestRMSNorm\", \"axes\": {\"n4\": {\"type\": "
        "\"const\", \"value\": 4}, \"n64\": {\"type\": \"const\", \"value\": 64}},\n"
        " \"inputs\": {\"input0\": {\"shape\": [\"n4\", \"n64\"], \"dtype\": \"%s\"}, \"weight\": "
        "{\"shape\": [\"n64\"], \"dtype\": \"bfloat16\"}},\n"
        " \"outputs\": {\"out0\": {\"shape\": [\"n4\", \"n64\"], \"dtype\": \"bfloat16\"}},\n"
        " \"reference\": \"import torch\\n\\n\\n@torch.no_grad()\\ndef run(input0, "
        "weight):\\n%s\",\n"
        " \"kiln\": {\"kind\": \"module\", \"module_class\": \"TestRMSNorm\", \"layouts\": "
        "{\"input0\": "
        "%s}}}\n",
        name, x_dtype, body, layout_x);
    kiln_problem *p = problem(name, def,
                              "{\"uuid\": \"u\", \"axes\": {}, \"inputs\": {\"input0\": {\"type\": "
                              "\"random\"}, \"weight\": {\"type\": \"random\"}}}\n");
    free(def);
    return p;
}

#define L_CONTIG "{\"stored\": \"contiguous\", \"stored_shape\": [4, 64]}"
#define NORM_HEAD                                                                                  \
    "    v0 = torch.ops.aten.to.dtype(input0, torch.float32)\\n"                                   \
    "    v1 = torch.ops.aten.pow.Tensor_Scalar(v0, 2)\\n"
#define NORM_TAIL                                                                                  \
    "    v3 = torch.ops.aten.add.Tensor(v2, 1e-06)\\n"                                             \
    "    v4 = torch.ops.aten.rsqrt.default(v3)\\n"                                                 \
    "    v5 = torch.ops.aten.mul.Tensor(v0, v4)\\n"                                                \
    "    v6 = torch.ops.aten.to.dtype(weight, torch.float32)\\n"                                   \
    "    v7 = torch.ops.aten.mul.Tensor(v5, v6)\\n"

static void test_declines(void **state) {
    (void)state;
    kiln_problem *p;
    /* the well-formed module first, so that the declines below are each about one thing */
    p = module_problem("ok_module",
                       NORM_HEAD "    v2 = torch.ops.aten.mean.dim(v1, [-1], True)\\n" NORM_TAIL
                                 "    v8 = torch.ops.aten.to.dtype(v7, torch.bfloat16)\\n"
                                 "    return v8\\n",
                       L_CONTIG, "bfloat16");
    kiln_match m;
    must_match(rms, p, &m);
    kiln_problem_free(p);

    p = module_problem("dim0",
                       NORM_HEAD "    v2 = torch.ops.aten.mean.dim(v1, [0], True)\\n" NORM_TAIL
                                 "    return v7\\n",
                       L_CONTIG, "bfloat16");
    must_decline(rms, p, "normalised over dim 0, not the last");
    kiln_problem_free(p);

    p = module_problem("residual",
                       NORM_HEAD "    v2 = torch.ops.aten.mean.dim(v1, [-1], True)\\n" NORM_TAIL
                                 "    v8 = torch.ops.aten.add.Tensor(v7, v0)\\n"
                                 "    return v8\\n",
                       L_CONTIG, "bfloat16");
    must_decline(rms, p, "x is used as a bias");
    kiln_problem_free(p);

    p = module_problem("square_in_bf16",
                       "    v1 = torch.ops.aten.pow.Tensor_Scalar(input0, 2)\\n"
                       "    return v1\\n",
                       L_CONTIG, "bfloat16");
    must_decline(rms, p, "x^2 is computed in bfloat16");
    kiln_problem_free(p);

    p = module_problem("no_keepdim",
                       NORM_HEAD "    v2 = torch.ops.aten.mean.dim(v1, [-1])\\n    return v2\\n",
                       L_CONTIG, "bfloat16");
    must_decline(rms, p, "a mean without keepdim");
    kiln_problem_free(p);

    p = module_problem("float64",
                       "    v0 = torch.ops.aten.pow.Tensor_Scalar(input0, 2)\\n    return v0\\n",
                       L_CONTIG, "float64");
    must_decline(rms, p, "x is float64");
    kiln_problem_free(p);

    p = module_problem("permuted",
                       NORM_HEAD "    v2 = torch.ops.aten.mean.dim(v1, [-1], True)\\n" NORM_TAIL
                                 "    return v7\\n",
                       "{\"stored\": \"memory_order\", \"stored_shape\": [4, 64], \"permute\": "
                       "[1, 0]}",
                       "bfloat16");
    must_decline(rms, p, "stored with its last dim moved");
    kiln_problem_free(p);

    /* leading dims in memory order: fine when x and y agree, wrong when they do not */
    static const char perm_ref[] =
        "def run(input0):\\n    v0 = torch.ops.aten.rms_norm.default(input0, [64], None, 1e-06)\\n"
        "    return v0.permute(1, 0, 2)\\n";
    static const char perm_wl[] =
        "{\"uuid\": \"u\", \"axes\": {}, \"inputs\": {\"input0\": {\"type\": \"random\"}}}\n";
    for (int same = 0; same < 2; same++) {
        char *def = xasprintf(
            "{\"name\": \"perm\", \"op_type\": \"rms_norm\", \"axes\": {\"n2\": {\"type\": "
            "\"const\", \"value\": 2}, \"n4\": {\"type\": \"const\", \"value\": 4}, \"n64\": "
            "{\"type\": \"const\", \"value\": 64}}, \"inputs\": {\"input0\": {\"shape\": [\"n4\", "
            "\"n2\", \"n64\"], \"dtype\": \"float32\"}}, \"outputs\": {\"out0\": {\"shape\": "
            "[\"n4\", \"n2\", \"n64\"], \"dtype\": \"float32\"}}, \"reference\": \"%s\", "
            "\"kiln\": {\"kind\": \"aten\", \"aten\": \"aten::rms_norm.default\", \"layouts\": "
            "{\"input0\": {\"stored\": \"memory_order\", \"permute\": [1, 0, 2]}, \"out0\": "
            "%s}}}\n",
            perm_ref,
            same ? "{\"stored\": \"memory_order\", \"permute\": [1, 0, 2]}"
                 : "{\"stored\": \"contiguous\"}");
        p = problem(same ? "perm_same" : "perm_differ", def, perm_wl);
        free(def);
        if (same) {
            must_match(rms, p, &m);
            assert_string_equal(m.variant, "rmsnorm_noweight");
        } else {
            must_decline(rms, p, "are stored in different memory orders");
        }
        kiln_problem_free(p);
    }

    p = module_problem("unknown_op",
                       "    v0 = torch.ops.aten.softmax.int(input0, -1)\\n    return v0\\n",
                       L_CONTIG, "bfloat16");
    must_decline(rms, p, "aten::softmax.int is not part of an RMSNorm/LayerNorm pattern");
    kiln_problem_free(p);

    /* another aten op as a captured aten problem */
    p = problem(
        "softmax_aten",
        "{\"name\": \"s\", \"op_type\": \"_softmax\", \"axes\": {\"n4\": {\"type\": \"const\", "
        "\"value\": 4}}, \"inputs\": {\"self\": {\"shape\": [\"n4\"], \"dtype\": "
        "\"float32\"}}, \"outputs\": {\"out0\": {\"shape\": [\"n4\"], \"dtype\": \"float32\"}}, "
        "\"reference\": \"def run(self):\\n    return self\\n\", \"kiln\": {\"kind\": \"aten\", "
        "\"aten\": \"aten::_softmax.default\"}}\n",
        "{\"uuid\": \"u\", \"axes\": {}, \"inputs\": {\"self\": {\"type\": \"random\"}}}\n");
    must_decline(rms, p, "aten::_softmax.default is not a row norm");
    must_decline(ln, p, "aten::_softmax.default is not a row norm");
    kiln_problem_free(p);

    /* hand-written: no eps anywhere, an extra input, another op_type */
    static const char hw_wl[] =
        "{\"uuid\": \"u\", \"axes\": {\"b\": 2}, \"inputs\": {\"x\": {\"type\": "
        "\"random\"}, \"w\": {\"type\": \"random\"}}}\n";
    p = problem(
        "hw_no_eps",
        "{\"name\": \"h\", \"op_type\": \"rmsnorm\", \"axes\": {\"b\": {\"type\": \"var\"}, "
        "\"h\": {\"type\": \"const\", \"value\": 32}}, \"inputs\": {\"x\": {\"shape\": [\"b\", "
        "\"h\"], \"dtype\": \"float32\"}, \"w\": {\"shape\": [\"h\"], \"dtype\": "
        "\"float32\"}}, \"outputs\": {\"y\": {\"shape\": [\"b\", \"h\"], \"dtype\": "
        "\"float32\"}}, \"reference\": \"def run(x, w):\\n    return x * "
        "torch.rsqrt(x.pow(2).mean(-1, keepdim=True)) * w\\n\"}\n",
        hw_wl);
    must_decline(rms, p, "no eps in the reference");
    kiln_problem_free(p);
    p = problem(
        "hw_dim0",
        "{\"name\": \"h\", \"op_type\": \"rms_norm\", \"axes\": {\"b\": {\"type\": \"var\"}, "
        "\"h\": {\"type\": \"const\", \"value\": 32}}, \"inputs\": {\"x\": {\"shape\": [\"b\", "
        "\"h\"], \"dtype\": \"float32\"}, \"w\": {\"shape\": [\"h\"], \"dtype\": "
        "\"float32\"}}, \"outputs\": {\"y\": {\"shape\": [\"b\", \"h\"], \"dtype\": "
        "\"float32\"}}, \"reference\": \"def run(x, w):\\n    return x * "
        "torch.rsqrt(x.pow(2).mean(dim=0, keepdim=True) + 1e-6) * w\\n\"}\n",
        hw_wl);
    must_decline(rms, p, "mean over dim 0, not the last");
    kiln_problem_free(p);
    p = problem(
        "hw_extra",
        "{\"name\": \"h\", \"op_type\": \"rmsnorm\", \"axes\": {\"b\": {\"type\": \"var\"}, "
        "\"h\": {\"type\": \"const\", \"value\": 32}}, \"inputs\": {\"x\": {\"shape\": [\"b\", "
        "\"h\"], \"dtype\": \"float32\"}, \"w\": {\"shape\": [\"b\", \"h\"], \"dtype\": "
        "\"float32\"}}, \"outputs\": {\"y\": {\"shape\": [\"b\", \"h\"], \"dtype\": "
        "\"float32\"}}, \"reference\": \"EPS = 1e-6\\n\"}\n",
        hw_wl);
    must_decline(rms, p, "input w has no role in an RMSNorm");
    kiln_problem_free(p);
    p = load_repo("tests/data/problems/softmax_f32");
    must_decline(rms, p, "op_type 'softmax' is not rmsnorm");
    must_decline(ln, p, "op_type 'softmax' is not layernorm");
    kiln_problem_free(p);
}

/* ---- constraints ---- */

/* A hand-written bf16 RMSNorm with rows of `cols` (const) and the given batch sizes. */
static kiln_problem *rms_rows(const char *name, long cols, const char *batches) {
    char *def = xasprintf(
        "{\"name\": \"%s\", \"op_type\": \"rmsnorm\", \"axes\": {\"b\": {\"type\": \"var\"}, "
        "\"h\": "
        "{\"type\": \"const\", \"value\": %ld}}, \"inputs\": {\"x\": {\"shape\": [\"b\", \"h\"], "
        "\"dtype\": \"bfloat16\"}, \"w\": {\"shape\": [\"h\"], \"dtype\": \"bfloat16\"}}, "
        "\"outputs\": "
        "{\"y\": {\"shape\": [\"b\", \"h\"], \"dtype\": \"bfloat16\"}}, \"reference\": \"EPS = "
        "1e-6\\n\"}\n",
        name, cols);
    char wl[4096];
    size_t off = 0;
    char *copy = xstrdup(batches);
    for (char *tok = strtok(copy, ","); tok; tok = strtok(NULL, ","))
        off += (size_t)snprintf(wl + off, sizeof wl - off,
                                "{\"uuid\": \"u%s\", \"axes\": {\"b\": %s}, \"inputs\": {\"x\": "
                                "{\"type\": \"random\"}, \"w\": {\"type\": \"random\"}}}\n",
                                tok, tok);
    free(copy);
    kiln_problem *p = problem(name, def, wl);
    free(def);
    return p;
}

static void expect_reason(const kiln_family *f, const kiln_problem *p, const kiln_match *m,
                          const int64_t *pt, const char *expect) {
    char buf[512];
    const char *why = check_point(f, p, m, pt, buf, sizeof buf);
    if (!expect) {
        if (why)
            fail_msg("%s: point rejected: %s", p->name, why);
        return;
    }
    if (!why || !strstr(why, expect))
        fail_msg("%s: expected '%s', got '%s'", p->name, expect, why ? why : "(accepted)");
}

static void test_check_reasons(void **state) {
    (void)state;
    int64_t pt[KILN_FAMILY_MAX_PARAMS];
    kiln_match m;
    /* h4096, SOL's batches: 512 vectors of 8 */
    kiln_problem *p = rms_rows("h4096", 4096, "1,7,64,8804,14509");
    must_match(rms, p, &m);
    mkpoint(pt, 8, 1, 0, 0); /* 64 threads x 8 vectors */
    expect_reason(rms, p, &m, pt, NULL);
    mkpoint(pt, 1, 1, 0, 0); /* 512 threads, one row */
    expect_reason(rms, p, &m, pt, NULL);
    mkpoint(pt, 1, 8, 0, 0); /* the same block as RN_GROUP 1 */
    expect_reason(rms, p, &m, pt, "hold as many rows as");
    mkpoint(pt, 1, 32, 0, 1); /* 1024 threads: 2 rows; 8804 rows need a turning loop */
    expect_reason(rms, p, &m, pt, NULL);
    mkpoint(pt, 12, 1, 0, 0); /* 43 -> 64 threads: 8 vectors each, as RN_ITEMS 8 */
    expect_reason(rms, p, &m, pt, "the same kernel as RN_ITEMS 8");
    mkpoint(pt, 1, -16, 0, 0); /* 32 vectors per block: 32 threads per block */
    expect_reason(rms, p, &m, pt, NULL);
    mkpoint(pt, 2, -16, 0, 0); /* 16 threads per block of a cluster */
    expect_reason(rms, p, &m, pt, "less than a warp");
    mkpoint(pt, 1, -2, 0, 1);
    expect_reason(rms, p, &m, pt, "no persistent grid");
    mkpoint(pt, 8, 1, 0, 0); /* 8 vectors of x and 8 of the weight: 64 registers, at the limit */
    pt[P_WEARLY] = 1;
    expect_reason(rms, p, &m, pt, NULL);
    mkpoint(pt, 16, 1, 0, 0); /* 16 and 16: too many */
    pt[P_WEARLY] = 1;
    expect_reason(rms, p, &m, pt, "with the weight held");
    kiln_problem_free(p);
    p = load_repo("tests/data/families/rownorm/rms_gemma4_noscale_bf16");
    must_match(rms, p, &m);
    mkpoint(pt, 8, 1, 0, 0);
    pt[P_WEARLY] = 1;
    expect_reason(rms, p, &m, pt, "no weight or bias to load early");
    kiln_problem_free(p);

    /* few rows: persistent grids never turn, wide groups have room to spare */
    p = rms_rows("few_rows", 256, "1,3");
    must_match(rms, p, &m);
    mkpoint(pt, 8, 1, 0, 1);
    expect_reason(rms, p, &m, pt, "never turn");
    mkpoint(pt, 8, 2, 0, 0); /* 4-thread rows: one warp holds 8 rows already */
    expect_reason(rms, p, &m, pt, "has room for them");
    kiln_problem_free(p);

    /* a row of 262144 bf16: too long for registers at any RN_ITEMS, read twice */
    p = rms_rows("long_row", 262144, "2,3");
    must_match(rms, p, &m);
    mkpoint(pt, 8, 1, 0, 0);
    expect_reason(rms, p, &m, pt, NULL);
    mkpoint(pt, 8, 1, 1, 0);
    expect_reason(rms, p, &m, pt, "evict-first");
    mkpoint(pt, 16, -4, 0, 0); /* split over 4 blocks: 8192 vectors each fit at 16 per thread */
    expect_reason(rms, p, &m, pt, NULL);
    mkpoint(pt, 4, -4, 0, 0); /* 2048 threads needed: read twice, though RN_ITEMS 8 fits */
    expect_reason(rms, p, &m, pt, "fits in registers at RN_ITEMS 8");
    kiln_problem_free(p);

    /* the gate doubles the registers a vector costs */
    p = load_repo("tests/data/families/rownorm/rms_qwen35moe_gated_bf16");
    must_match(rms, p, &m);
    mkpoint(pt, 16, 1, 0, 0); /* 8 vectors only: the same as RN_ITEMS 8 */
    expect_reason(rms, p, &m, pt, "the same kernel as RN_ITEMS 8");
    kiln_problem_free(p);
    p = rms_rows("no_gate_regs", 16384, "4"); /* no gate: 16 vectors of 4 words fit */
    must_match(rms, p, &m);
    mkpoint(pt, 16, 1, 0, 0);
    expect_reason(rms, p, &m, pt, NULL);
    kiln_problem_free(p);
    p = problem("gate_regs",
                "{\"name\": \"g\", \"op_type\": \"module:Qwen3_5MoeRMSNormGated\", \"axes\": "
                "{\"n4\": {\"type\": \"const\", \"value\": 4}, \"n16384\": {\"type\": \"const\", "
                "\"value\": 16384}}, \"inputs\": {\"input0\": {\"shape\": [\"n4\", \"n16384\"], "
                "\"dtype\": \"bfloat16\"}, \"weight\": {\"shape\": [\"n16384\"], \"dtype\": "
                "\"bfloat16\"}, \"input1\": {\"shape\": [\"n4\", \"n16384\"], \"dtype\": "
                "\"bfloat16\"}}, \"outputs\": {\"out0\": {\"shape\": [\"n4\", \"n16384\"], "
                "\"dtype\": \"bfloat16\"}}, \"kiln\": {\"kind\": \"module\"}, \"reference\": "
                "\"def run(input0, weight, input1):\\n"
                "    v0 = torch.ops.aten.to.dtype(input0, torch.float32)\\n"
                "    v1 = torch.ops.aten.pow.Tensor_Scalar(v0, 2)\\n"
                "    v2 = torch.ops.aten.mean.dim(v1, [-1], True)\\n"
                "    v3 = torch.ops.aten.add.Tensor(v2, 1e-06)\\n"
                "    v4 = torch.ops.aten.rsqrt.default(v3)\\n"
                "    v5 = torch.ops.aten.mul.Tensor(v0, v4)\\n"
                "    v6 = torch.ops.aten.to.dtype(v5, torch.bfloat16)\\n"
                "    v7 = torch.ops.aten.mul.Tensor(weight, v6)\\n"
                "    v8 = torch.ops.aten.to.dtype(input1, torch.float32)\\n"
                "    v9 = torch.ops.aten.silu.default(v8)\\n"
                "    v10 = torch.ops.aten.mul.Tensor(v7, v9)\\n"
                "    v11 = torch.ops.aten.to.dtype(v10, torch.bfloat16)\\n"
                "    return v11\\n\"}\n",
                "{\"uuid\": \"u\", \"axes\": {}, \"inputs\": {\"input0\": {\"type\": \"random\"}, "
                "\"weight\": {\"type\": \"random\"}, \"input1\": {\"type\": \"random\"}}}\n");
    must_match(rms, p, &m);
    assert_string_equal(m.variant, "rmsnorm_weight_cast_first_gated");
    mkpoint(pt, 16, 1, 0, 0); /* 16 vectors of x and 16 of the gate: 128 registers */
    expect_reason(rms, p, &m, pt, "registers of row data");
    mkpoint(pt, 8, 1, 0, 0);
    expect_reason(rms, p, &m, pt, NULL);
    kiln_problem_free(p);
}

/* ---- every valid point plans; a sample compiles ---- */

static int n_compiled, n_valid_total;

static void sweep_problem(const kiln_family *f, kiln_problem *p, int compile) {
    kiln_match m;
    must_match(f, p, &m);
    int64_t space = kiln_family_space_size(f);
    int64_t *valid = xmalloc((size_t)space * sizeof *valid);
    int n_valid = 0;
    int64_t pt[KILN_FAMILY_MAX_PARAMS], first_of_kind[5] = {-1, -1, -1, -1, -1};
    for (int64_t i = 0; i < space; i++) {
        kiln_family_point(f, i, pt);
        const char *bad = f->check(p, &m, pt);
        if (bad) {
            assert_true(strlen(bad) > 1);
            if (bad[0] == '!')
                free((void *)bad);
            continue;
        }
        valid[n_valid++] = i;
        /* the launch directives parse and plan for every workload */
        char *src = f->emit(p, &m, pt, 1);
        /* the first point of each kind of kernel is compiled besides the even sample */
        static const char *const kinds[] = {"cluster=", "#define RN_KEEP 1", "#define RN_PERSIST 1",
                                            "#define RN_EVEN 0", "#define RN_WEARLY 1"};
        for (int k = 0; k < 5; k++)
            if (first_of_kind[k] < 0 && strstr(src, kinds[k]))
                first_of_kind[k] = i;
        kiln_abi abi;
        kiln_err err;
        if (kiln_abi_parse(src, 1, &abi, &err) != KILN_OK)
            fail_msg("%s point %lld: %s", p->name, (long long)i, err.msg);
        assert_int_equal(abi.n_launches, 1);
        for (int w = 0; w < p->n_workloads; w++) {
            kiln_launch_plan plan;
            if (kiln_abi_plan(&abi, p, &p->workloads[w], &plan, &err) != KILN_OK)
                fail_msg("%s point %lld workload %d: %s", p->name, (long long)i, w, err.msg);
            unsigned threads = plan.launch[0].block[0] * plan.launch[0].block[1];
            assert_true(threads >= 32 && threads <= 1024);
            assert_int_equal(plan.launch[0].grid[0] % plan.launch[0].cluster[0], 0);
        }
        kiln_abi_free(&abi);
        free(src);
    }
    if (n_valid == 0)
        fail_msg("%s: no valid point", p->name);
    /* the first point (what a sampled sweep always tries) is valid here */
    assert_int_equal(valid[0], 0);
    n_valid_total += n_valid;
    int n = compile && kiln_cuda_have_nvrtc() ? n_valid : 0;
    int n_pick = n < RN_TEST_MAX_COMPILES ? n : RN_TEST_MAX_COMPILES;
    for (int j = 0; j < n_pick + (n ? 5 : 0); j++) {
        int64_t index;
        if (j < n_pick)
            index = valid[n_pick == 1 ? 0 : (int)((int64_t)j * (n - 1) / (n_pick - 1))];
        else if ((index = first_of_kind[j - n_pick]) < 0)
            continue;
        kiln_family_point(f, index, pt);
        char *src = f->emit(p, &m, pt, 1);
        char *cubin = NULL, *log = NULL;
        size_t len = 0;
        kiln_err err;
        if (kiln_cuda_compile_only(src, "sm_90", &cubin, &len, &log, &err) != KILN_OK) {
            char *params = kiln_family_point_str(f, pt);
            fail_msg("%s %s: %s\n%s", p->name, params, err.msg, log ? log : "");
        }
        assert_true(len > 0);
        n_compiled++;
        free(cubin);
        free(log);
        free(src);
    }
    free(valid);
}

static void test_every_point_plans_and_compiles(void **state) {
    (void)state;
    if (!kiln_cuda_have_nvrtc())
        fprintf(stderr, "NOTE: no NVRTC here: launch plans only, no compiles\n");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kiln_problem *p = load_repo(cases[i].dir);
        sweep_problem(strcmp(cases[i].family, "rmsnorm") ? ln : rms, p, 1);
        kiln_problem_free(p);
    }
    /* long rows: clusters and rows read twice */
    kiln_problem *p = rms_rows("long_rows", 262144, "1,2,16");
    sweep_problem(rms, p, 1);
    kiln_problem_free(p);
    p = rms_rows("h16384", 16384, "1,64");
    sweep_problem(rms, p, 1);
    kiln_problem_free(p);
    fprintf(stderr, "rownorm: %d valid points over %zu problems, %d compiled\n", n_valid_total,
            sizeof cases / sizeof cases[0] + 2, n_compiled);
}

static int setup(void **state) {
    (void)state;
    rms = kiln_family_find("rmsnorm");
    ln = kiln_family_find("layernorm");
    if (!rms || !ln)
        return -1;
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_match_repository_problems),
        cmocka_unit_test(test_programs_in_source),
        cmocka_unit_test(test_silu_narrow),
        cmocka_unit_test(test_match_solbench),
        cmocka_unit_test(test_declines),
        cmocka_unit_test(test_check_reasons),
        cmocka_unit_test(test_every_point_plans_and_compiles),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
