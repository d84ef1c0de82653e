/* test_gen_ir.c: the tensor-expression generator's IR, lowering, plans and schedule space, on
 * problems parsed from memory: what each form of an op chain lowers to (the printout of the IR:
 * axes unified by broadcasting, views as axis maps, the softmax pair and Welford found in chains
 * written by hand, windows, gathers), what is declined and why, the plan (rows, columns, merged
 * axes), the constraints' reasons, the start point, the bytes and flops, and the C emission. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "gen/family.h"
#include "gen/ir/ir.h"

static const kiln_family *gen;

#define AXES2(a, b)                                                                                \
    "'axes': {'a': {'type': 'const', 'value': " #a "}, 'b': {'type': 'const', 'value': " #b "}}"
#define AXES4(a, b, c, d)                                                                          \
    "'axes': {'a': {'type': 'const', 'value': " #a "}, 'b': {'type': 'const', 'value': " #b        \
    "}, 'c': {'type': 'const', 'value': " #c "}, 'd': {'type': 'const', 'value': " #d "}}"
#define T(shape, dt) "{'shape': " shape ", 'dtype': '" dt "'}"
#define ATEN(label, args)                                                                          \
    "'kiln': {'kind': 'aten', 'aten': '" label "', 'args': {'args': " args ", 'kwargs': {}}}"
#define OP(aten, args, out) "{'aten': '" aten "', 'args': " args ", 'out': '" out "'}"
#define X4 "'inputs': {'x': " T("['a', 'b', 'c', 'd']", "float32") "}"
#define Y4 "'outputs': {'y': " T("['a', 'b', 'c', 'd']", "float32") "}"

/* A problem from a definition written with ' for " (name and reference added), every input random.
 */
static kiln_problem *parse(const char *def_sq) {
    char *body = xstrdup(def_sq);
    for (char *c = body; *c; c++)
        if (*c == '\'')
            *c = '"';
    char *def = xasprintf("{\"name\": \"t\", \"reference\": \"def run(): pass\", %s", body + 1);
    free(body);
    kiln_problem *p = NULL;
    kiln_err err;
    /* the inputs' names, for the workload */
    char wl[1024];
    size_t off = (size_t)snprintf(wl, sizeof wl, "{\"uuid\": \"u\", \"axes\": {}, \"inputs\": {");
    const char *in = strstr(def, "\"inputs\": {");
    assert_non_null(in);
    int depth = 0;
    for (const char *c = in + strlen("\"inputs\": {"); *c && depth >= 0; c++) {
        if (*c == '{')
            depth++;
        else if (*c == '}')
            depth--;
        else if (*c == '"' && depth == 0) {
            const char *e = strchr(c + 1, '"');
            off += (size_t)snprintf(wl + off, sizeof wl - off, "%s\"%.*s\": {\"type\": \"random\"}",
                                    wl[off - 1] == '{' ? "" : ", ", (int)(e - c - 1), c + 1);
            c = e;
        }
    }
    snprintf(wl + off, sizeof wl - off, "}}");
    if (kiln_problem_parse(def, strlen(def), "def", wl, strlen(wl), "wl", &p, &err))
        fail_msg("%s\n%s", err.msg, def);
    free(def);
    return p;
}

/* The IR of a definition as text; fails when it does not lower. */
static char *lowered(const char *def) {
    kiln_problem *p = parse(def);
    kir *ir;
    char why[512];
    if (!kir_lower(p, &ir, why, sizeof why))
        fail_msg("does not lower: %s", why);
    kiln_strbuf b = {0};
    kir_print(ir, &b);
    kir_free(ir);
    kiln_problem_free(p);
    return b.s;
}

static void expect_in(const char *text, const char *piece) {
    if (!strstr(text, piece))
        fail_msg("expected \"%s\" in:\n%s", piece, text);
}

/* ---- lowering ---- */

/* softmax over the channels written by hand: exp(x - amax) / sum, the pair found */
/* clang-format off */
static const char SOFTMAX_BY_HAND[] =
    "{" AXES4(2, 6, 3, 5) ", " X4 ", " Y4 ", 'kiln': {'kind': 'chain', 'ops': ["
    OP("aten::amax.default", "[{'ref': 'x'}, [1], true]", "m") ", "
    OP("aten::sub.Tensor", "[{'ref': 'x'}, {'ref': 'm'}]", "d") ", "
    OP("aten::exp.default", "[{'ref': 'd'}]", "e") ", "
    OP("aten::sum.dim_IntList", "[{'ref': 'e'}, [1], true]", "s") ", "
    OP("aten::div.Tensor", "[{'ref': 'e'}, {'ref': 's'}]", "y") "], 'outputs': ['y']}}";

/* LayerNorm over the channels as ops (mean, sub, pow, mean), the weight unsqueezed twice */
static const char LN_CHANNELS[] =
    "{" AXES4(2, 6, 3, 5) ", 'inputs': {'x': " T("['a', 'b', 'c', 'd']", "float32") ", 'w': "
    T("['b']", "float32") "}, " Y4 ", 'kiln': {'kind': 'chain', 'ops': ["
    OP("aten::mean.dim", "[{'ref': 'x'}, [1], true]", "u") ", "
    OP("aten::sub.Tensor", "[{'ref': 'x'}, {'ref': 'u'}]", "d") ", "
    OP("aten::pow.Tensor_Scalar", "[{'ref': 'd'}, 2]", "q") ", "
    OP("aten::mean.dim", "[{'ref': 'q'}, [1], true]", "v") ", "
    OP("aten::add.Tensor", "[{'ref': 'v'}, 1e-06]", "ve") ", "
    OP("aten::rsqrt.default", "[{'ref': 've'}]", "r") ", "
    OP("aten::mul.Tensor", "[{'ref': 'd'}, {'ref': 'r'}]", "n") ", "
    OP("aten::unsqueeze.default", "[{'ref': 'w'}, 1]", "w1") ", "
    OP("aten::unsqueeze.default", "[{'ref': 'w1'}, 2]", "w2") ", "
    OP("aten::mul.Tensor", "[{'ref': 'n'}, {'ref': 'w2'}]", "y") "], 'outputs': ['y']}}";
/* the VAE's chain: a residual add, GroupNorm in 3 groups of 2 channels, SiLU; the sum returned too */
static const char GN_CHAIN[] =
    "{" AXES4(2, 6, 3, 5) ", 'inputs': {'x': " T("['a', 'b', 'c', 'd']", "float32") ", 'r': "
    T("['a', 'b', 'c', 'd']", "float32") ", 'w': " T("['b']", "float32") ", 'bias': "
    T("['b']", "float32") "}, 'outputs': {'s': " T("['a', 'b', 'c', 'd']", "float32") ", 'y': "
    T("['a', 'b', 'c', 'd']", "float32") "}, 'kiln': {'kind': 'chain', 'ops': ["
    OP("aten::add.Tensor", "[{'ref': 'x'}, {'ref': 'r'}]", "s") ", "
    OP("aten::group_norm.default", "[{'ref': 's'}, 3, {'ref': 'w'}, {'ref': 'bias'}, 1e-06, true]",
       "g") ", "
    OP("aten::silu.default", "[{'ref': 'g'}]", "y") "], 'outputs': ['s', 'y']}}";

/* PyTorch's decomposition of a GroupNorm of a computed value: view(N, G, -1) (the channels split,
 * their second part merged with H and W), the statistics over the last dim, view back */
static const char GN_BY_VIEWS[] =
    "{" AXES4(2, 6, 3, 5) ", " X4 ", " Y4 ", 'kiln': {'kind': 'chain', 'ops': ["
    OP("aten::exp.default", "[{'ref': 'x'}]", "e") ", "
    OP("aten::view.default", "[{'ref': 'e'}, [2, 3, -1]]", "g") ", "
    OP("aten::mean.dim", "[{'ref': 'g'}, [-1], true]", "u") ", "
    OP("aten::sub.Tensor", "[{'ref': 'g'}, {'ref': 'u'}]", "d") ", "
    OP("aten::view.default", "[{'ref': 'd'}, [2, 6, 3, 5]]", "y") "], 'outputs': ['y']}}";
/* clang-format on */

static void test_lowering(void **state) {
    (void)state;
    /* a float's finfo.min as a mask's fill is whole-valued but no int64: the constant keeps a float
     * type */
    char *fill =
        lowered("{" AXES2(4, 9) ", 'inputs': {'x': " T("['a', 'b']", "float32") ", 'm': " T(
            "['a', 'b']",
            "bool") "}, 'outputs': {'y': " T("['a', 'b']",
                                             "float32") "}, " ATEN("aten::masked_fill.Scalar",
                                                                   "[{'tensor': 0}, {'tensor': 1}, "
                                                                   "-3.4028234663852886e+38]") "}");
    expect_in(fill, "v2 = const -3.40282347e+38 : f32 []");
    expect_in(fill, "v3 = where(v1, v2, v0) : f32 [c0 c1]");
    free(fill);
    char *t = lowered(SOFTMAX_BY_HAND);
    expect_in(t, "axes: c0=d c1=c c2=b (reduced) c3=a");         /* sizes are the axes' names */
    expect_in(t, "v1 = softmax(v0) over [c2] : f32 [c0 c1 c3]"); /* amax became the pair */
    expect_in(t, "v4 = part 1 of v1 : f32 [c0 c1 c3]");          /* and the sum its second result */
    expect_in(t, "v5 = div(v3, v4) : f32 [c0 c1 c2 c3]");
    free(t);

    t = lowered(LN_CHANNELS);
    expect_in(t, "v1 = load w : f32 [c2]"); /* the weight's one dim is x's channel axis */
    expect_in(t, "v4 = welford(v0) over [c2] : f32 [c0 c1 c3]");
    expect_in(t, "v8 = part 1 of v4 : f32 [c0 c1 c3]");
    expect_in(t, "v15 = mul(v14, v1) : f32 [c0 c1 c2 c3]");
    free(t);

    /* group_norm: the channel axis split into (groups, channels per group); the statistics reduce
     * the second part and H and W; the weight moves along both parts */
    t = lowered(GN_CHAIN);
    expect_in(t, "axes: c0=d (reduced) c1=c (reduced) c2=a c3=3 c4=2 (reduced)");
    expect_in(t, "v2 = load w : f32 [c3 c4]");
    expect_in(t, "v6 = welford(v4) over [c0 c1 c4] : f32 [c2 c3]");
    expect_in(t, "v8 = const 2*c*d : f32 []");
    expect_in(t, "v14 = mul(v13, v2) : f32 [c0 c1 c2 c3 c4]");
    expect_in(t, "s = v4\ny = v16");
    free(t);
    t = lowered(GN_BY_VIEWS); /* the same axes, whichever way the views cut them */
    expect_in(t, "axes: c0=d (reduced) c1=c (reduced) c2=a c3=3 c4=2 (reduced)");
    expect_in(t, "v2 = sum(v1) over [c0 c1 c4] : f32 [c2 c3]");
    expect_in(t, "v5 = sub(v1, v4) : f32 [c0 c1 c2 c3 c4]");
    free(t);

    /* logsumexp: the max with infinities replaced by 0, the pair in its masked form */
    t = lowered("{" AXES2(4, 9) ", 'inputs': {'x': " T(
        "['a', 'b']", "float32") "}, 'outputs': "
                                 "{'y': " T("['a']", "float32") "}, " ATEN(
                                     "aten::logsumexp.default", "[{'tensor': 0}, [1]]") "}");
    expect_in(t, "v1 = softmax(v0) over [c0]");
    expect_in(t, "isinf(v1)");
    expect_in(t, "part 1 of v1");
    free(t);

    /* argmax over all dims (flat index), max_pool with its indices, a pad, an index gather */
    t = lowered("{" AXES2(4, 9) ", 'inputs': {'x': " T(
        "['a', 'b']", "bfloat16") "}, 'outputs': "
                                  "{'y': {'shape': [], 'dtype': 'int64'}}, " ATEN(
                                      "aten::argmax.default", "[{'tensor': 0}]") "}");
    expect_in(t, "v1 = argmax(v0) over [c0 c1] : bf16 []"); /* over all: the flat index */
    expect_in(t, "v2 = part 1 of v1 : i64 []");
    free(t);
    t = lowered("{" AXES4(2, 3, 9, 11) ", 'inputs': {'x': " T(
        "['a', 'b', 'c', 'd']",
        "float32") "}, 'outputs': {'y': " T("['a', 'b', '5', '6']",
                                            "float32") ", 'i': " T("['a', 'b', '5', '6']",
                                                                   "int64") "}, " ATEN("aten::max_"
                                                                                       "pool2d_"
                                                                                       "with_"
                                                                                       "indices."
                                                                                       "default",
                                                                                       "[{'tensor':"
                                                                                       " 0}, [3, "
                                                                                       "3], [2, "
                                                                                       "2], [1, "
                                                                                       "1]]") "}");
    expect_in(t, "v1 = maxpool window of v0 : f32");
    expect_in(t, "v2 = part 1 of v1 : i64");
    free(t);
    t = lowered("{" AXES4(2, 3, 5, 8) ", 'inputs': {'x': " T(
        "['a', 'b', 'c', 'd']",
        "float32") "}, 'outputs': {'y': " T("['a', 'b', '8', '12']",
                                            "float32") "}, " ATEN("aten::constant_pad_nd.default",
                                                                  "[{'tensor': 0}, [1, 3, 2, 1], "
                                                                  "0.5]") "}");
    expect_in(t, "v1 = remap of v0 : f32");
    free(t);
    t = lowered("{" AXES2(40, 16) ", 'inputs': {'x': " T("['b', 'b']", "float32") ", 'i': " T(
        "['a']", "int64") "}, 'outputs': {'y': " T("['a', 'b']",
                                                   "float32") "}, " ATEN("aten::index.Tensor",
                                                                         "[{'tensor': 0}, "
                                                                         "[{'tensor': 1}]]") "}");
    expect_in(t, "v2 = gather of v0 by v1 : f32");
    free(t);

    /* eager's dtypes: bf16 * float32 scalar stays bf16, a bf16 sum rounds once, casts */
    t = lowered("{" AXES2(4, 9) ", 'inputs': {'x': " T(
        "['a', 'b']",
        "bfloat16") "}, 'outputs': "
                    "{'y': " T("['a']", "bfloat16") "}, 'kiln': {'kind': 'chain', 'ops': [" OP(
                        "aten::mul.Tensor", "[{'ref': 'x'}, 0.5]",
                        "h") ", " OP("aten::sum.dim_IntList", "[{'ref': 'h'}, [-1]]",
                                     "y") "], 'outputs': ['y']}}");
    expect_in(t, "v2 = mul(v0, v1) : bf16 [c0 c1]"); /* a Python number does not promote */
    expect_in(t, "v3 = sum(v2) over [c0] : bf16 [c1]");
    free(t);
}

/* The reason a definition is declined with. */
static void expect_decline(const char *def, const char *reason) {
    kiln_problem *p = parse(def);
    kiln_match m;
    memset(&m, 0, sizeof m);
    char why[512] = "";
    if (gen->match(p, &m, why, sizeof why))
        fail_msg("matched, expected the decline \"%s\"", reason);
    if (!strstr(why, reason))
        fail_msg("declined with \"%s\", expected \"%s\"", why, reason);
    kiln_problem_free(p);
}

static void test_declines(void **state) {
    (void)state;
    expect_decline("{" AXES4(1, 4, 3, 3) ", " X4 ", " Y4 ", " ATEN("aten::group_norm.default",
                                                                   "[{'tensor': 0}, 3]") "}",
                   "aten::group_norm.default: 4 channels in 3 groups");
    expect_decline(
        "{" AXES2(5, 5) ", 'inputs': {'x': " T(
            "['a', 'b']",
            "float32") "}, "
                       "'outputs': {'y': " T(
                           "['a', 'b']",
                           "float32") "}, 'kiln': {'kind': 'chain', "
                                      "'ops': [" OP("aten::t.default", "[{'ref': 'x'}]",
                                                    "xt") ", " OP("aten::add.Tensor",
                                                                  "[{'ref': 'x'}, {'ref': 'xt'}]",
                                                                  "y") "], 'outputs': "
                                                                       "['y']}}",
        "a transpose of itself");
    expect_decline("{" AXES2(5, 7) ", 'inputs': {'x': " T(
                       "['a', 'b']",
                       "float32") "}, "
                                  "'outputs': {'s': " T("['b']", "float32") ", 't': " T(
                                      "['a']", "float32") "}, 'kiln': {'kind': 'chain', 'ops': "
                                                          "[" OP("aten::sum.dim_IntList",
                                                                 "[{'ref': 'x'}, [0]]",
                                                                 "s") ", " OP("aten::sum.dim_"
                                                                              "IntList",
                                                                              "[{'ref': 'x'}, [1]]",
                                                                              "t") "], 'outputs': "
                                                                                   "['s', "
                                                                                   "'t']}}",
                   "reductions over different axes");
    expect_decline("{" AXES2(5, 7) ", 'inputs': {'x': " T(
                       "['a', 'b']", "int32") "}, 'outputs': "
                                              "{'y': " T("['a']", "int32") "}, " ATEN(
                                                  "aten::mean.dim", "[{'tensor': 0}, [1]]") "}",
                   "mean of integers");
    expect_decline(
        "{" AXES2(5, 7) ", 'inputs': {'x': " T("['a', 'b']", "float32") ", 'm': " T(
            "['a']", "bool") "}, 'outputs': {'y': " T("['a', 'b']",
                                                      "float32") "}, " ATEN("aten::index.Tensor",
                                                                            "[{'tensor': 0}, "
                                                                            "[{'tensor': 1}]]") "}",
        "a boolean mask");
    expect_decline(
        "{" AXES2(4, 6) ", 'inputs': {'x': " T(
            "['a', 'b']",
            "float32") "}, "
                       "'outputs': {'y': " T(
                           "['b', 'a']",
                           "float32") "}, 'kiln': {'kind': 'chain', "
                                      "'ops': [" OP("aten::exp.default", "[{'ref': 'x'}]",
                                                    "e") ", " OP("aten::view.default",
                                                                 "[{'ref': 'e'}, [6, 4]]",
                                                                 "y") "], 'outputs': ['y']}}",
        "regroups dims of a computed value across their boundaries");
    expect_decline(
        "{" AXES2(4, 6) ", 'inputs': {'x': " T(
            "['a', 'b']", "bfloat16") "}, "
                                      "'outputs': {'y': " T("['a', 'b']", "float32") "}, " ATEN(
                                          "aten::exp.default", "[{'tensor': 0}]") "}",
        "eager gives result 0 as float32, the lowering bfloat16");
    expect_decline(
        "{" AXES2(4, 6) ", 'op_type': 'exp', 'inputs': {'x': " T(
            "['a', 'b']", "float32") "}, 'outputs': {'y': " T("['a', 'b']", "float32") "}}",
        "no op chain");
    expect_decline(
        "{" AXES2(4, 6) ", 'inputs': {'x': " T(
            "['a', 'b']", "float64") "}, "
                                     "'outputs': {'y': " T("['a', 'b']", "float64") "}, " ATEN(
                                         "aten::exp.default", "[{'tensor': 0}]") "}",
        "a float64 operand");
}

/* ---- the plan and the space ---- */

static void match_of(const char *def, kiln_problem **p, kiln_match *m) {
    *p = parse(def);
    memset(m, 0, sizeof *m);
    char why[512];
    if (!gen->match(*p, m, why, sizeof why))
        fail_msg("declined: %s", why);
}

static void test_plans(void **state) {
    (void)state;
    kiln_problem *p;
    kiln_match m;
    match_of(SOFTMAX_BY_HAND, &p, &m);
    assert_string_equal(m.variant, "columns_pairs"); /* H*W contiguous, reduced over C */
    assert_string_equal(m.rows_expr, "c*d*a");       /* kept: H and W merged, then N */
    assert_string_equal(m.cols_expr, "b");
    assert_int_equal((int)kiln_match_get(&m, "vgcd", 0), 15);
    assert_int_equal((int)kiln_match_get(&m, "phases1", 0), 1); /* online: one pass */
    assert_int_equal((int)kiln_match_get(&m, "phases2", 0), 2); /* max, then the sum */
    kiln_problem_free(p);
    /* GroupNorm: each group's channels and H, W are contiguous: rows of 2*3*5, one per (N, G) */
    match_of(GN_CHAIN, &p, &m);
    assert_string_equal(m.variant, "rows_pairs");
    assert_string_equal(m.cols_expr, "c*d*2");
    assert_string_equal(m.rows_expr, "a*3");
    kiln_problem_free(p);
    /* a mean over H and W: rows of 15 (merged), the output [N, C, 1, 1] */
    match_of("{" AXES4(2, 6, 3, 5) ", " X4 ", 'outputs': {'y': " T(
                 "['a', 'b', '1', '1']",
                 "float32") "}, " ATEN("aten::mean.dim", "[{'tensor': 0}, [-1, -2], true]") "}",
             &p, &m);
    assert_string_equal(m.variant, "rows_reduce");
    assert_string_equal(m.cols_expr, "c*d");
    assert_string_equal(m.rows_expr, "a*b");
    kiln_problem_free(p);
    /* a pointwise chain with a broadcast bias: one vector axis, the whole output */
    match_of("{" AXES2(4, 8) ", 'inputs': {'x': " T("['a', 'b']", "bfloat16") ", 'w': " T(
                 "['b']",
                 "bfloat16") "}, 'outputs': {'y': " T("['a', 'b']",
                                                      "bfloat16") "}, " ATEN("aten::add.Tensor",
                                                                             "[{'tensor': 0}, "
                                                                             "{'tensor': 1}]") "}",
             &p, &m);
    assert_string_equal(m.variant, "pointwise");
    assert_int_equal((int)kiln_match_get(&m, "esize", 0), 2);
    assert_int_equal((int)kiln_match_get(&m, "vgcd", 0), 8);
    kiln_problem_free(p);
}

/* The point of `settings` over the first values; NULL or the constraint's reason. */
static const char *check(const kiln_problem *p, const kiln_match *m, const char *settings) {
    int64_t pt[KILN_FAMILY_MAX_PARAMS];
    kiln_family_point(gen, 0, pt);
    char buf[256], *save = NULL;
    snprintf(buf, sizeof buf, "%s", settings);
    for (char *kv = strtok_r(buf, " ", &save); kv; kv = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(kv, '=');
        *eq = 0;
        int i = 0;
        while (i < gen->n_params && strcmp(gen->params[i].name, kv))
            i++;
        assert_true(i < gen->n_params);
        pt[i] = atoll(eq + 1);
    }
    return gen->check(p, m, pt);
}

static void expect_reason(const kiln_problem *p, const kiln_match *m, const char *settings,
                          const char *reason) {
    const char *got = check(p, m, settings);
    if (!reason && got)
        fail_msg("[%s] rejected: %s", settings, got);
    if (reason && (!got || !strstr(got, reason)))
        fail_msg("[%s]: expected \"%s\", got \"%s\"", settings, reason, got ? got : "valid");
}

static void test_constraints(void **state) {
    (void)state;
    kiln_problem *p;
    kiln_match m;
    match_of(SOFTMAX_BY_HAND, &p, &m);
    expect_reason(p, &m, "KG_THREADS=64 KG_VBYTES=4 KG_TEAM=2", NULL);
    expect_reason(p, &m, "KG_THREADS=64 KG_VBYTES=8 KG_TEAM=2", "VEC must divide");
    expect_reason(p, &m, "KG_THREADS=64 KG_VBYTES=2 KG_TEAM=2", "less than one element");
    expect_reason(p, &m, "KG_THREADS=64 KG_VBYTES=4 KG_TEAM=128", "TEAM is larger than the block");
    expect_reason(p, &m, "KG_THREADS=64 KG_VBYTES=4 KG_TEAM=2 KG_SPLIT=2 KG_SPLITMODE=1",
                  "partials in scratch need one pass");
    expect_reason(p, &m, "KG_THREADS=64 KG_VBYTES=4 KG_TEAM=2 KG_SPLITMODE=1",
                  "SPLITMODE applies to split reductions only");
    expect_reason(p, &m, "KG_THREADS=64 KG_VBYTES=4 KG_TEAM=2 KG_UNROLL=4",
                  "UNROLL does not apply when the slice is kept");
    expect_reason(p, &m, "KG_THREADS=64 KG_VBYTES=4 KG_TEAM=2 KG_PERSIST=1", "never caps");
    int64_t pt[KILN_FAMILY_MAX_PARAMS];
    int from_rule = 0;
    int64_t start = kiln_family_start_index(gen, p, &m, kiln_family_space_size(gen), &from_rule);
    assert_true(start >= 0 && from_rule);
    kiln_family_point(gen, start, pt);
    assert_true(kiln_family_point_ok(gen, p, &m, pt));
    kiln_problem_free(p);

    match_of("{" AXES2(4, 8) ", 'inputs': {'x': " T(
                 "['a', 'b']", "float32") "}, 'outputs': "
                                          "{'y': " T("['a', 'b']", "float32") "}, " ATEN(
                                              "aten::exp.default", "[{'tensor': 0}]") "}",
             &p, &m);
    expect_reason(p, &m, "KG_THREADS=64 KG_VBYTES=16", NULL);
    expect_reason(p, &m, "KG_THREADS=64 KG_VBYTES=16 KG_TEAM=2", "pointwise: the reduction");
    expect_reason(p, &m, "KG_THREADS=64 KG_VBYTES=16 KG_ONLINE=0", "pointwise: the reduction");
    expect_reason(p, &m, "KG_THREADS=1024 KG_VBYTES=16", "one block covers the whole output");
    expect_reason(p, &m, "KG_THREADS=64 KG_VBYTES=16 KG_UNROLL=8 KG_PERSIST=1", "never caps");
    kiln_problem_free(p);
}

static void test_costs(void **state) {
    (void)state;
    kiln_problem *p;
    kiln_match m;
    match_of(LN_CHANNELS, &p, &m);
    /* x read once, the weight once, y written once; flops over the domain */
    assert_true(gen->min_bytes(p, &m, &p->workloads[0]) == (double)(2 * 6 * 3 * 5 * 4 * 2 + 6 * 4));
    assert_true(gen->flops(p, &m, &p->workloads[0]) > 2 * 6 * 3 * 5 * 4);
    assert_true(kiln_tolerance_default(KILN_F32).rtol == gen->tolerance(KILN_F32).rtol);
    kiln_problem_free(p);
}

/* The C emission: readable, the IR in a comment, the helpers, one OpenMP loop over the kept
 * points with the passes inside, whatever the point. */
static void test_cpu_source(void **state) {
    (void)state;
    kiln_problem *p;
    kiln_match m;
    match_of(LN_CHANNELS, &p, &m);
    int64_t a[KILN_FAMILY_MAX_PARAMS], b[KILN_FAMILY_MAX_PARAMS];
    kiln_family_point(gen, 0, a);
    kiln_family_point(gen, 12345, b);
    char *s = gen->emit(p, &m, a, 0), *t = gen->emit(p, &m, b, 0);
    assert_string_equal(s, t);
    expect_in(s, "// Generated by kiln: family gen, variant columns_pairs");
    expect_in(s, " *   axes: c1=c*d c2=b (reduced) c3=a"); /* H and W merged */
    expect_in(s, " *   v4 = welford(v0) over [c2] : f32 [c1 c3]");
    expect_in(s, "KG_FN float kg_gelu_tanh(float x)");
    expect_in(s,
              "// kiln: launch kg_kernel\nvoid kg_kernel(const float* x, const float* w, float* y");
    expect_in(s, "#pragma omp parallel for");
    assert_null(strstr(s, "__global__"));
    free(s);
    free(t);
    kiln_problem_free(p);
}

/* A problem of tests/data/gen/<sub> (rows: the device rows; chains: captured chains) and its
 * match. */
static void problem_of(const char *sub, const char *name, kiln_problem **p, kiln_match *m) {
    char dir[512];
    kiln_err err;
    snprintf(dir, sizeof dir, "%s/tests/data/gen/%s/%s", KILN_SOURCE_DIR, sub, name);
    if (kiln_problem_load(dir, p, &err))
        fail_msg("%s: %s", name, err.msg);
    memset(m, 0, sizeof *m);
    char why[512];
    if (!gen->match(*p, m, why, sizeof why))
        fail_msg("%s declined: %s", name, why);
}

static void row_of(const char *name, kiln_problem **p, kiln_match *m) {
    problem_of("rows", name, p, m);
}

static int64_t param(const int64_t *pt, const char *name) {
    for (int i = 0; i < gen->n_params; i++)
        if (!strcmp(gen->params[i].name, name))
            return pt[i];
    fail_msg("no parameter %s", name);
    return -1;
}

/* Reductions over non-last axes start coalesced and vectorised. RMSNorm over the channels of bf16
 * NCHW: 16-byte vectors, a warp's segment of consecutive outer points a whole 128-byte line, the
 * slice in registers (the start was 2-byte loads, 498 us on the H200 against torch.compile's 139).
 * The VAE's GroupNorm chain: 16-byte vectors, two in flight per operand (the weight and bias, read
 * from cache, no longer count as a stream). The CUDA source folds the const axes (no int64
 * division by a parameter) and keeps the slice in registers even at VEC 1. */
static void test_non_last_start(void **state) {
    (void)state;
    kiln_problem *p;
    kiln_match m;
    int64_t pt[KILN_FAMILY_MAX_PARAMS];
    int from_rule = 0;
    row_of("gen_rmsnorm_channels_bf16_32x256x128x128", &p, &m);
    int64_t start = kiln_family_start_index(gen, p, &m, kiln_family_space_size(gen), &from_rule);
    assert_true(start >= 0 && from_rule);
    kiln_family_point(gen, start, pt);
    assert_int_equal(param(pt, "KG_VBYTES"), 16);
    assert_int_equal(param(pt, "KG_CACHE"), 1);
    const int64_t opb = param(pt, "KG_THREADS") / param(pt, "KG_TEAM");
    assert_true((opb < 32 ? opb : 32) * param(pt, "KG_VBYTES") >= 128);
    char *src = gen->emit(p, &m, pt, 1);
    expect_in(src, "constexpr int64_t n256 = 256;");
    expect_in(src, "[KG_ITEMS];");
    free(src);
    /* VEC 1 with the slice kept: the loads go to registers once, not again in every pass */
    expect_reason(p, &m, "KG_THREADS=256 KG_VBYTES=2 KG_TEAM=4", NULL);
    kiln_family_point(gen, 0, pt);
    pt[1] = 2, pt[3] = 4; /* KG_VBYTES, KG_TEAM */
    src = gen->emit(p, &m, pt, 1);
    expect_in(src, "kg_raw<2>::t kg_r0[KG_ITEMS];");
    free(src);
    kiln_problem_free(p);

    row_of("gen_vae_chain_bf16_1x512x256x256", &p, &m);
    start = kiln_family_start_index(gen, p, &m, kiln_family_space_size(gen), &from_rule);
    assert_true(start >= 0 && from_rule);
    kiln_family_point(gen, start, pt);
    assert_int_equal(param(pt, "KG_VBYTES"), 16);
    assert_true(param(pt, "KG_UNROLL") >= 2);
    src = gen->emit(p, &m, pt, 1);
    expect_in(src, "constexpr int64_t n256 = 256;");
    free(src);
    kiln_problem_free(p);
}

/* Gemma-4's k and v after their norms, joined to the KV cache's cat (an empty cache in a prefill)
 * and repeat_kv (expand to [.., kv heads, 2, ..] and reshape: the output's head axis the composite
 * of the kv head and the repeat). The cat of one tensor is the tensor (no remap: v's RMSNorm feeds
 * it in a row plan), and RoPE's lowering at batch 2 takes 20 axis slots (the inputs' dims before
 * broadcasting unifies them, the remaps' and the expand's axes, the composite). */
static void test_kv_chains(void **state) {
    (void)state;
    kiln_problem *p;
    kiln_match m;
    kir *ir;
    char why[512];
    kiln_strbuf b = {0};
    problem_of("chains", "gen_vnorm_kv_repeat_bf16_1x4x2x8", &p, &m);
    assert_true(kir_lower(p, &ir, why, sizeof why));
    kir_print(ir, &b);
    /* the output moves along the repeat (c4) too; the values do not */
    expect_in(b.s, "axes: c0=n8 (reduced) c1=n2 c2=n4 c4=2\n");
    expect_in(b.s, "v5 = sum(v4) over [c0] : f32 [c1 c2]");
    expect_in(b.s, "v13 = cast(v12) : bf16 [c0 c1 c2]\nout0 = v13");
    assert_null(strstr(b.s, "remap"));
    free(b.s);
    memset(&b, 0, sizeof b);
    kir_free(ir);
    kiln_problem_free(p);

    problem_of("chains", "gen_rope_kv_repeat_bf16_2x4x2x8", &p, &m);
    assert_true(kir_lower(p, &ir, why, sizeof why));
    kir_print(ir, &b);
    expect_in(b.s, "axes: c0=n4 c1=n4 c2=n8 c3=n2 c4=n4 c5=n2 c7=2\n");
    expect_in(b.s, "v6 = remap of v5 : bf16 [c2 c3 c4 c5]"); /* rotate_half's two parts */
    expect_in(b.s, "v7 = remap of v1 : bf16 [c2 c3 c4 c5]");
    expect_in(b.s, "v10 = add(v3, v9) : bf16 [c2 c3 c4 c5]\nout0 = v10"); /* no third remap */
    free(b.s);
    kir_free(ir);
    kiln_problem_free(p);
}

int main(void) {
    gen = kiln_family_find("gen");
    if (!gen) {
        fprintf(stderr, "the gen family is not linked in\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lowering),       cmocka_unit_test(test_declines),
        cmocka_unit_test(test_plans),          cmocka_unit_test(test_constraints),
        cmocka_unit_test(test_costs),          cmocka_unit_test(test_cpu_source),
        cmocka_unit_test(test_non_last_start), cmocka_unit_test(test_kv_chains),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
