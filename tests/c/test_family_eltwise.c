/* test_family_eltwise.c: the eltwise family without a GPU: chains read from captured calls and
 * references, modules and "chain" definitions (and the reasons for declining the rest), type
 * promotion and intermediate rounding in the emitted code, broadcasting and layouts, the
 * constraints' reasons, launch directives that plan for every workload, and that the points check()
 * accepts compile for sm_90 with NVRTC (an even sample of at most ELT_TEST_MAX_COMPILES per
 * problem, always including the first and last valid point, so that the test stays well under a
 * minute). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "backend/nvrtc.h"
#include "gen/family.h"

#define ELT_TEST_MAX_COMPILES 20

static const kiln_family *elt;

/* One workload of a definition whose axes are all const: every input random (scalars 1.5). */
static char *wl_auto(const char *def) {
    cJSON *d = cJSON_Parse(def);
    assert_non_null(d);
    cJSON *line = cJSON_CreateObject();
    cJSON_AddStringToObject(line, "uuid", "auto");
    cJSON_AddObjectToObject(line, "axes");
    cJSON *ins = cJSON_AddObjectToObject(line, "inputs");
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(d, "inputs")) {
        cJSON *desc = cJSON_AddObjectToObject(ins, t->string);
        if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(t, "shape"))) {
            cJSON_AddStringToObject(desc, "type", "scalar");
            cJSON_AddNumberToObject(desc, "value", 1.5);
        } else {
            cJSON_AddStringToObject(desc, "type", "random");
        }
    }
    char *text = cJSON_PrintUnformatted(line);
    char *out = xasprintf("%s\n", text);
    free(text);
    cJSON_Delete(line);
    cJSON_Delete(d);
    return out;
}

/* Parses a problem from memory; wl NULL: wl_auto. */
static kiln_problem *problem(const char *name, const char *def, const char *wl) {
    char *auto_wl = wl ? NULL : wl_auto(def);
    if (!wl)
        wl = auto_wl;
    kiln_err err;
    kiln_problem *p = NULL;
    if (kiln_problem_parse(def, strlen(def), name, wl, strlen(wl), name, &p, &err) != KILN_OK)
        fail_msg("%s: %s\n%s", name, err.msg, def);
    free(auto_wl);
    return p;
}

static int try_match(const kiln_problem *p, kiln_match *m, char *why, size_t n) {
    memset(m, 0, sizeof *m);
    for (int k = 0; k < 8; k++)
        m->input_of_role[k] = -1;
    for (int k = 0; k < 4; k++)
        m->output_of_role[k] = -1;
    why[0] = 0;
    return elt->match(p, m, why, n);
}

/* The point with these values, placed by parameter name (the table's order is the family's). */
static void point_of(int64_t *pt, int64_t threads, int64_t vbytes, int64_t unroll, int64_t grid,
                     int64_t hint, int64_t fast) {
    const char *names[] = {"ELT_THREADS", "ELT_VBYTES", "ELT_UNROLL",
                           "ELT_GRID",    "ELT_HINT",   "ELT_FAST"};
    const int64_t v[] = {threads, vbytes, unroll, grid, hint, fast};
    assert_int_equal(elt->n_params, 6);
    for (int k = 0; k < 6; k++) {
        int i = 0;
        while (i < elt->n_params && strcmp(elt->params[i].name, names[k]))
            i++;
        assert_true(i < elt->n_params);
        pt[i] = v[k];
    }
}

/* A definition: axes, inputs and outputs JSON bodies, the reference, the "kiln" object. */
static char *def_json(const char *axes, const char *inputs, const char *outputs,
                      const char *reference, const char *kiln) {
    return xasprintf("{\"name\": \"t\", \"op_type\": \"elementwise\", \"axes\": {%s},\n"
                     " \"inputs\": {%s},\n \"outputs\": {%s},\n \"reference\": \"%s\"%s%s}\n",
                     axes, inputs, outputs, reference, kiln ? ",\n \"kiln\": " : "",
                     kiln ? kiln : "");
}

#define REF "import torch\\n\\n\\n@torch.no_grad()\\n"
#define RC "\"rows\": {\"type\": \"var\"}, \"cols\": {\"type\": \"var\"}"
/* A value named in a chain's op: {"ref": NAME}. */
#define REF_(name) "{\"ref\": \"" name "\"}"
#define T2(name, dtype) "\"" name "\": {\"shape\": [\"rows\", \"cols\"], \"dtype\": \"" dtype "\"}"
#define CHAIN2(op1, op2)                                                                           \
    "{\"kind\": \"chain\", \"ops\": [{\"aten\": \"" op1                                            \
    "\", \"args\": [" REF_("gate") "], "                                                           \
                                   "\"out\": \"a\"}, {\"aten\": \"" op2                            \
                                   "\", \"args\": [" REF_("a") ", " REF_("up") "], \"out\": "      \
                                                                               "\"out\"}]}"

static const char wl_rc[] =
    "{\"uuid\": \"a\", \"axes\": {\"rows\": 3, \"cols\": 7}, \"inputs\": {\"gate\": {\"type\": "
    "\"random\"}, \"up\": {\"type\": \"random\"}}}\n"
    "{\"uuid\": \"b\", \"axes\": {\"rows\": 4, \"cols\": 4097}, \"inputs\": {\"gate\": {\"type\": "
    "\"random\"}, \"up\": {\"type\": \"random\"}}}\n"
    "{\"uuid\": \"c\", \"axes\": {\"rows\": 1, \"cols\": 1}, \"inputs\": {\"gate\": {\"type\": "
    "\"random\"}, \"up\": {\"type\": \"random\"}}}\n";
static const char wl_gemma[] =
    "{\"uuid\": \"a\", \"axes\": {\"rows\": 4096, \"cols\": 9216}, \"inputs\": {\"gate\": "
    "{\"type\": \"random\"}, \"up\": {\"type\": \"random\"}}}\n";
#define wl_const NULL
static const char wl_bias[] =
    "{\"uuid\": \"a\", \"axes\": {\"rows\": 3, \"cols\": 16}, \"inputs\": {\"x\": {\"type\": "
    "\"random\"}, \"bias\": {\"type\": \"random\"}, \"scale\": {\"type\": \"scalar\", \"value\": "
    "1.5}}}\n"
    "{\"uuid\": \"b\", \"axes\": {\"rows\": 2, \"cols\": 40}, \"inputs\": {\"x\": {\"type\": "
    "\"random\"}, \"bias\": {\"type\": \"random\"}, \"scale\": {\"type\": \"scalar\", \"value\": "
    "-2}}}\n";

typedef struct {
    const char *name, *variant;
    int dims, vec_ok;
    kiln_problem *p;
} case_t;

static case_t cases[12];
static int n_cases;

static void add_case(const char *name, const char *variant, int dims, int vec_ok, char *def,
                     const char *wl) {
    case_t *c = &cases[n_cases++];
    c->name = name;
    c->variant = variant;
    c->dims = dims;
    c->vec_ok = vec_ok;
    c->p = problem(name, def, wl);
    free(def);
}

static int setup(void **state) {
    (void)state;
    elt = kiln_family_find("eltwise");
    if (!elt)
        return -1;
    /* 0: SiLU-gated MLP, bf16, odd lengths */
    add_case("silu_mul_bf16", "silu_mul", 1, 1,
             def_json(RC, T2("gate", "bfloat16") ", " T2("up", "bfloat16"), T2("out", "bfloat16"),
                      REF "def run(gate, up):\\n    return torch.nn.functional.silu(gate) * up\\n",
                      CHAIN2("aten::silu.default", "aten::mul.Tensor")),
             wl_rc);
    /* 1: Gemma's GELU-tanh gate at its real size */
    add_case(
        "gelu_tanh_mul_bf16", "gelu_tanh_mul", 1, 1,
        def_json(RC, T2("gate", "bfloat16") ", " T2("up", "bfloat16"), T2("out", "bfloat16"),
                 REF "def run(gate, up):\\n    return gate\\n",
                 "{\"kind\": \"chain\", \"ops\": [{\"aten\": \"aten::gelu.default\", "
                 "\"args\": [" REF_(
                     "gate") "], \"kwargs\": {\"approximate\": \"tanh\"}, "
                             "\"out\": \"a\"}, {\"aten\": \"aten::mul.Tensor\", \"args\": [" REF_(
                                 "a") ", " REF_("up") "], \"out\": \"out\"}]}"),
        wl_gemma);
    /* 2: a captured add with alpha, read from the reference */
    add_case("add_alpha_f16", "add", 1, 1,
             def_json("\"n6\": {\"type\": \"const\", \"value\": 6}",
                      "\"self\": {\"shape\": [\"n6\"], \"dtype\": \"float16\"}, \"other\": "
                      "{\"shape\": [\"n6\"], \"dtype\": \"float16\"}",
                      "\"out0\": {\"shape\": [\"n6\"], \"dtype\": \"float16\"}",
                      REF "def run(self, other):\\n    result = torch.ops.aten.add.Tensor(self, "
                          "other, alpha=2)\\n    return result\\n",
                      "{\"kind\": \"aten\", \"aten\": \"aten::add.Tensor\"}"),
             wl_const);
    /* 3: a captured in-place relu_ on a channels-last activation */
    add_case("relu_cl_f32", "relu", 1, 1,
             def_json("\"n2\": {\"type\": \"const\", \"value\": 2}, \"n5\": {\"type\": \"const\", "
                      "\"value\": 5}, \"n16\": {\"type\": \"const\", \"value\": 16}",
                      "\"self\": {\"shape\": [\"n2\", \"n5\", \"n5\", \"n16\"], \"dtype\": "
                      "\"float32\"}",
                      "\"out0\": {\"shape\": [\"n2\", \"n5\", \"n5\", \"n16\"], \"dtype\": "
                      "\"float32\"}",
                      REF "def run(self):\\n    self = self.permute(0, 3, 1, 2)  # captured "
                          "strides\\n    self = self.clone()  # the op writes into it\\n    "
                          "result = torch.ops.aten.relu_.default(self)\\n    return "
                          "result.permute(0, 2, 3, 1)\\n",
                      "{\"kind\": \"aten\", \"aten\": \"aten::relu_.default\", \"layouts\": "
                      "{\"self\": {\"permute\": [0, 2, 3, 1]}, \"out0\": {\"permute\": [0, 2, 3, "
                      "1]}}}"),
             wl_const);
    /* 4: a row-broadcast bias and a by-value scalar: [rows, cols] with the bias at (0, 1) */
    add_case("bias_scale_f16", "add_mul", 2, 1,
             def_json(RC,
                      T2("x", "float16") ", \"bias\": {\"shape\": [\"cols\"], \"dtype\": "
                                         "\"float16\"}, \"scale\": {\"shape\": null, \"dtype\": "
                                         "\"float32\"}",
                      T2("out", "float16"), REF "def run(x, bias, scale):\\n    return x\\n",
                      "{\"kind\": \"chain\", \"ops\": [{\"aten\": \"aten::add.Tensor\", \"args\": "
                      "[" REF_("x") ", " REF_(
                          "bias") "], \"kwargs\": {\"alpha\": 0.5}, \"out\": "
                                  "\"t\"}, {\"aten\": \"aten::mul.Tensor\", \"args\": [" REF_(
                                      "t") ", " REF_("scale") "], \"out\": \"out\"}]}"),
             wl_bias);
    /* 5: a column broadcast: x [4, 6, 9] * s [4, 6, 1] (the innermost dim broadcast for s) */
    add_case("col_bcast_bf16", "mul", 2, 1,
             def_json("\"a\": {\"type\": \"const\", \"value\": 4}, \"b\": {\"type\": \"const\", "
                      "\"value\": 6}, \"c\": {\"type\": \"const\", \"value\": 9}",
                      "\"x\": {\"shape\": [\"a\", \"b\", \"c\"], \"dtype\": \"bfloat16\"}, \"s\": "
                      "{\"shape\": [\"a\", \"b\", \"1\"], \"dtype\": \"bfloat16\"}",
                      "\"y\": {\"shape\": [\"a\", \"b\", \"c\"], \"dtype\": \"bfloat16\"}",
                      REF "def run(x, s):\\n    return x * s\\n",
                      "{\"kind\": \"chain\", \"ops\": [{\"aten\": \"aten::mul.Tensor\", "
                      "\"args\": [" REF_("x") ", " REF_("s") "], \"out\": \"y\"}]}"),
             wl_const);
    /* 6: a copy of a transposed tensor: strided innermost reads, VEC 1 only */
    add_case("transpose_f32", "copy", 2, 0,
             def_json("\"n5\": {\"type\": \"const\", \"value\": 5}, \"n7\": {\"type\": \"const\", "
                      "\"value\": 7}",
                      "\"self\": {\"shape\": [\"n5\", \"n7\"], \"dtype\": \"float32\"}",
                      "\"out0\": {\"shape\": [\"n7\", \"n5\"], \"dtype\": \"float32\"}",
                      REF "def run(self):\\n    self = self.permute(1, 0)\\n    result = "
                          "torch.ops.aten.clone.default(self, "
                          "memory_format=torch.contiguous_format)\\n    return result\\n",
                      "{\"kind\": \"aten\", \"aten\": \"aten::clone.default\", \"layouts\": "
                      "{\"self\": {\"permute\": [1, 0]}}}"),
             wl_const);
    /* 7: a module: fp32 math on bf16 inputs, cast back with type_as */
    add_case("module_gate_bf16", "cast_sigmoid_cast_add_mul_cast", 2, 1,
             def_json("\"n3\": {\"type\": \"const\", \"value\": 3}, \"n64\": {\"type\": "
                      "\"const\", \"value\": 64}",
                      "\"input0\": {\"shape\": [\"n3\", \"n64\"], \"dtype\": \"bfloat16\"}, "
                      "\"weight\": {\"shape\": [\"n64\"], \"dtype\": \"bfloat16\"}",
                      "\"out0\": {\"shape\": [\"n3\", \"n64\"], \"dtype\": \"bfloat16\"}",
                      REF "def run(input0, weight):\\n"
                          "    v0 = torch.ops.aten.to.dtype(input0, torch.float32)\\n"
                          "    v1 = torch.ops.aten.sigmoid.default(v0)\\n"
                          "    v2 = torch.ops.aten.to.dtype(weight, torch.float32)\\n"
                          "    v3 = torch.ops.aten.add.Tensor(v2, 1.0)\\n"
                          "    v4 = torch.ops.aten.mul.Tensor(v1, v3)\\n"
                          "    v5 = torch.ops.aten.type_as.default(v4, input0)\\n"
                          "    return v5\\n",
                      "{\"kind\": \"module\", \"module_class\": \"Gate\"}"),
             wl_const);
    /* 8: bf16 with fp16 promotes to fp32 */
    add_case("promote_f32", "add", 1, 1,
             def_json("\"n\": {\"type\": \"const\", \"value\": 100}",
                      "\"a\": {\"shape\": [\"n\"], \"dtype\": \"bfloat16\"}, \"b\": {\"shape\": "
                      "[\"n\"], \"dtype\": \"float16\"}",
                      "\"y\": {\"shape\": [\"n\"], \"dtype\": \"float32\"}",
                      REF "def run(a, b):\\n    return a + b\\n",
                      "{\"kind\": \"chain\", \"ops\": [{\"aten\": \"aten::add.Tensor\", "
                      "\"args\": [" REF_("a") ", " REF_("b") "], \"out\": \"y\"}]}"),
             wl_const);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    for (int i = 0; i < n_cases; i++)
        kiln_problem_free(cases[i].p);
    return 0;
}

static void test_match_cases(void **state) {
    (void)state;
    for (int i = 0; i < n_cases; i++) {
        kiln_match m;
        char why[256];
        if (!try_match(cases[i].p, &m, why, sizeof why))
            fail_msg("%s declined: %s", cases[i].name, why);
        assert_string_equal(m.variant, cases[i].variant);
        if ((int)kiln_match_get(&m, "dims", 0) != cases[i].dims)
            fail_msg("%s: %g merged dims, expected %d (%s)", cases[i].name,
                     kiln_match_get(&m, "dims", 0), cases[i].dims, m.how);
        assert_int_equal((int)kiln_match_get(&m, "vec_ok", 0), cases[i].vec_ok);
    }
}

static void expect_decline(const char *name, char *def, const char *wl, const char *reason) {
    kiln_problem *p = problem(name, def, wl);
    free(def);
    kiln_match m;
    char why[256];
    if (try_match(p, &m, why, sizeof why))
        fail_msg("%s: matched (%s), expected a decline with '%s'", name, m.how, reason);
    if (!strstr(why, reason))
        fail_msg("%s: reason '%s' does not mention '%s'", name, why, reason);
    kiln_problem_free(p);
}

#define X1 "\"x\": {\"shape\": [\"n\"], \"dtype\": \"float32\"}"
#define Y1 "\"y\": {\"shape\": [\"n\"], \"dtype\": \"float32\"}"
#define N1 "\"n\": {\"type\": \"const\", \"value\": 10}"
#define ONE_OP(op, extra)                                                                          \
    "{\"kind\": \"chain\", \"ops\": [{\"aten\": \"" op "\", \"args\": [" REF_("x") extra           \
        "], "                                                                                      \
        "\"out\": \"y\"}]}"

static void test_declines(void **state) {
    (void)state;
    expect_decline("no_kiln", def_json(N1, X1, Y1, REF "def run(x):\\n    return x\\n", NULL),
                   wl_const, "op_type 'elementwise' is no chain");
    expect_decline("softmax",
                   def_json(N1, X1, Y1,
                            REF "def run(x):\\n    result = torch.ops.aten._softmax.default(x, "
                                "-1, False)\\n    return result\\n",
                            "{\"kind\": \"aten\", \"aten\": \"aten::_softmax.default\"}"),
                   wl_const, "not a pointwise op");
    expect_decline("rmsnorm_module",
                   def_json(N1, X1, Y1,
                            REF "def run(x):\\n    v0 = torch.ops.aten.pow.Tensor_Scalar(x, 2)\\n"
                                "    v1 = torch.ops.aten.mean.dim(v0, [-1], True)\\n    return "
                                "v1\\n",
                            "{\"kind\": \"module\", \"module_class\": \"RMSNorm\"}"),
                   wl_const, "aten::mean.dim");
    expect_decline("unreadable_line",
                   def_json(N1, X1, Y1, REF "def run(x):\\n    y = x.sum() + 1\\n    return y\\n",
                            "{\"kind\": \"module\", \"module_class\": \"M\"}"),
                   wl_const, "cannot read the line 'y = x.sum() + 1'");
    expect_decline("label_mismatch",
                   def_json(N1, X1, Y1,
                            REF "def run(x):\\n    result = torch.ops.aten.relu.default(x)\\n    "
                                "return result\\n",
                            "{\"kind\": \"aten\", \"aten\": \"aten::sigmoid.default\"}"),
                   wl_const, "not the captured");
    expect_decline("int_input",
                   def_json(N1, "\"x\": {\"shape\": [\"n\"], \"dtype\": \"int32\"}", Y1,
                            REF "def run(x):\\n    return x\\n", ONE_OP("aten::relu.default", "")),
                   wl_const, "int32");
    expect_decline("f64_input",
                   def_json(N1, "\"x\": {\"shape\": [\"n\"], \"dtype\": \"float64\"}",
                            "\"y\": {\"shape\": [\"n\"], \"dtype\": \"float64\"}",
                            REF "def run(x):\\n    return x\\n", ONE_OP("aten::relu.default", "")),
                   wl_const, "float64");
    expect_decline("unknown_value",
                   def_json(N1, X1, Y1, REF "def run(x):\\n    return x\\n",
                            "{\"kind\": \"chain\", \"ops\": [{\"aten\": \"aten::mul.Tensor\", "
                            "\"args\": [" REF_("x") ", " REF_("z") "], \"out\": \"y\"}]}"),
                   wl_const, "'z' is not an input or an earlier value");
    expect_decline("dtype_mismatch",
                   def_json(N1, X1, "\"y\": {\"shape\": [\"n\"], \"dtype\": \"bfloat16\"}",
                            REF "def run(x):\\n    return x\\n", ONE_OP("aten::silu.default", "")),
                   wl_const, "the chain makes");
    expect_decline("no_broadcast",
                   def_json("\"n\": {\"type\": \"const\", \"value\": 10}, \"m\": {\"type\": "
                            "\"const\", \"value\": 3}",
                            X1 ", \"z\": {\"shape\": [\"m\"], \"dtype\": \"float32\"}", Y1,
                            REF "def run(x, z):\\n    return x\\n",
                            "{\"kind\": \"chain\", \"ops\": [{\"aten\": \"aten::add.Tensor\", "
                            "\"args\": [" REF_("x") ", " REF_("z") "], \"out\": \"y\"}]}"),
                   wl_const, "does not broadcast");
    expect_decline("gelu_bad_mode",
                   def_json(N1, X1, Y1, REF "def run(x):\\n    return x\\n",
                            "{\"kind\": \"chain\", \"ops\": [{\"aten\": \"aten::gelu.default\", "
                            "\"args\": [" REF_("x") "], \"kwargs\": {\"approximate\": "
                                                    "\"sigmoid\"}, \"out\": \"y\"}]}"),
                   wl_const, "approximate");
    expect_decline("floor_div",
                   def_json(N1, X1, Y1, REF "def run(x):\\n    return x\\n",
                            "{\"kind\": \"chain\", \"ops\": [{\"aten\": \"aten::div.Tensor_mode\", "
                            "\"args\": [" REF_("x") ", 2.0], \"kwargs\": {\"rounding_mode\": "
                                                    "\"floor\"}, \"out\": \"y\"}]}"),
                   wl_const, "rounding mode");
    expect_decline("tuple_output",
                   def_json(N1, X1, Y1,
                            REF "def run(x):\\n    result = torch.ops.aten.relu.default(x)\\n    "
                                "return result[0]\\n",
                            "{\"kind\": \"aten\", \"aten\": \"aten::relu.default\"}"),
                   wl_const, "tuple");
    expect_decline(
        "pool_kind",
        def_json(N1, X1, Y1, REF "def run(x):\\n    return x\\n", "{\"kind\": \"fused_norm\"}"),
        wl_const, "kiln.kind 'fused_norm' is not aten, module or chain");
}

/* Emitted code: intermediates rounded as eager stores them, the output rounded once, broadcast
 * operands read once per vector, scalars by value, strides only where needed. */
static void test_emitted_code(void **state) {
    (void)state;
    kiln_match m;
    char why[256];
    int64_t pt[KILN_FAMILY_MAX_PARAMS];
    point_of(pt, 256, 16, 2, 0, 1, 1);
    assert_true(try_match(cases[0].p, &m, why, sizeof why));
    assert_null(elt->check(cases[0].p, &m, pt));
    char *src = elt->emit(cases[0].p, &m, pt, 1);
    assert_non_null(strstr(src, "elt_rbf(elt_silu(elt_v0))")); /* silu is stored as bf16 */
    assert_non_null(strstr(src, "= (elt_v2 * elt_v1)")); /* the output: rounded by its store */
    assert_non_null(strstr(src, "elt_to<__nv_bfloat16>(elt_v3)"));
    assert_non_null(strstr(src, "#define ELT_IDX64 0"));
    assert_null(strstr(src, "elt_n1")); /* one merged dim: no index arithmetic */
    free(src);
    src = elt->emit(cases[0].p, &m, pt, 0);
    assert_non_null(strstr(src, "void elt_kernel(const kiln_bf16* gate, const kiln_bf16* up, "
                                "kiln_bf16* out, int64_t rows, int64_t cols)"));
    assert_non_null(strstr(src, "elt_rbf(elt_silu(elt_v0))"));
    free(src);
    /* bias + scalar: the bias walks only the inner dim, the scalar is a member */
    point_of(pt, 64, 16, 1, 0, 0, 1);
    assert_true(try_match(cases[4].p, &m, why, sizeof why));
    src = elt->emit(cases[4].p, &m, pt, 1);
    assert_non_null(strstr(src, "elt_obj.sc_scale = (float)scale;"));
    assert_non_null(strstr(src, "elt_o1 = 0 + elt_c1;")); /* bias: (0, 1) */
    assert_non_null(strstr(src, "elt_o0 = 0 + elt_c0 * elt_st0_0 + elt_c1;"));
    assert_non_null(strstr(src, "elt_v0 + (float)(0.5) * elt_v1"));
    free(src);
    /* column broadcast: one cached scalar load per vector */
    point_of(pt, 64, 2, 1, 0, 0, 1);
    assert_true(try_match(cases[5].p, &m, why, sizeof why));
    src = elt->emit(cases[5].p, &m, pt, 1);
    assert_non_null(strstr(src, "r1[u] = elt_ldb(in1 + elt_o1);"));
    free(src);
    /* promotion: bf16 + fp16 computes and stores fp32, no 16-bit rounding */
    assert_true(try_match(cases[8].p, &m, why, sizeof why));
    point_of(pt, 64, 16, 1, 0, 0, 1);
    assert_null(elt->check(cases[8].p, &m, pt));
    src = elt->emit(cases[8].p, &m, pt, 1);
    assert_null(strstr(src, "elt_rbf(elt_v"));
    assert_null(strstr(src, "elt_rhf(elt_v"));
    free(src);
    /* the module's fp32 intermediates are not rounded; type_as to bf16 is the output's store */
    assert_true(try_match(cases[7].p, &m, why, sizeof why));
    src = elt->emit(cases[7].p, &m, pt, 0);
    assert_non_null(strstr(src, "elt_sigmoid(elt_v"));
    assert_non_null(strstr(src, "+ (float)(1)"));
    free(src);
}

static void expect_reason(int c, const int64_t *values, const char *reason) {
    kiln_match m;
    char why[256];
    assert_true(try_match(cases[c].p, &m, why, sizeof why));
    const char *bad = elt->check(cases[c].p, &m, values);
    if (!bad)
        fail_msg("%s: point accepted, expected '%s'", cases[c].name, reason);
    if (!strstr(bad[0] == '!' ? bad + 1 : bad, reason))
        fail_msg("%s: reason '%s' does not mention '%s'", cases[c].name, bad, reason);
    if (bad[0] == '!')
        free((void *)bad);
}

static void test_check_reasons(void **state) {
    (void)state;
    int64_t pt[KILN_FAMILY_MAX_PARAMS];
    kiln_match m;
    char why[256];
    point_of(pt, 256, 2, 1, 0, 0, 1);
    expect_reason(6, pt, "less than one element"); /* 2 bytes of a float */
    point_of(pt, 256, 8, 1, 0, 0, 1);
    expect_reason(6, pt, "strided");
    point_of(pt, 64, 16, 1, 0, 0, 1); /* cols 16 and 40: 8 halves divide both... */
    assert_true(try_match(cases[4].p, &m, why, sizeof why));
    assert_null(elt->check(cases[4].p, &m, pt));
    point_of(pt, 64, 32, 1, 0, 0, 1); /* ...16 do not divide 40 */
    expect_reason(4, pt, "VEC must divide");
    point_of(pt, 64, 2, 1, 0, 0, 0);
    expect_reason(2, pt, "FAST 0 is FAST 1");
    point_of(pt, 256, 32, 8, 0, 0, 1);
    expect_reason(1, pt, "register budget");
    point_of(pt, 64, 2, 1, 16, 0, 1);
    expect_reason(2, pt, "persistent");
    point_of(pt, 1024, 2, 1, 0, 0, 1);
    expect_reason(2, pt, "one block covers");
    point_of(pt, 256, 16, 4, 0, 1, 1);
    assert_true(try_match(cases[1].p, &m, why, sizeof why));
    assert_null(elt->check(cases[1].p, &m, pt));
}

/* A hand-written problem without "kiln" whose op_type names one op. */
static void test_op_type_only(void **state) {
    (void)state;
    char *def = def_json(N1, X1 ", \"z\": {\"shape\": [\"n\"], \"dtype\": \"float32\"}", Y1,
                         REF "def run(x, z):\\n    return torch.maximum(x, z)\\n", NULL);
    char *p_def = xasprintf("%.*s\"maximum\"%s", (int)(strstr(def, "\"elementwise\"") - def), def,
                            strstr(def, "\"elementwise\"") + strlen("\"elementwise\""));
    kiln_problem *p = problem("op_type_maximum", p_def, NULL);
    kiln_match m;
    char why[256];
    if (!try_match(p, &m, why, sizeof why))
        fail_msg("declined: %s", why);
    assert_string_equal(m.variant, "maximum");
    assert_int_equal((int)kiln_match_get(&m, "n_in", 0), 2);
    kiln_problem_free(p);
    free(def);
    free(p_def);
}

/* The template compiles on its own (its demo chain), for every vector width and hint. */
static void test_template_alone(void **state) {
    (void)state;
    if (!kiln_cuda_have_nvrtc()) {
        printf("SKIP: NVRTC not found: no CUDA toolkit here\n");
        skip();
    }
    const char *tpl = kiln_family_template("eltwise.cu");
    assert_non_null(tpl);
    assert_non_null(kiln_family_template("eltwise_cpu.c"));
    for (int vec = 1; vec <= 16; vec *= 2)
        for (int hint = 0; hint < 3; hint++) {
            char *src =
                xasprintf("#define ELT_VEC %d\n#define ELT_HINT %d\n#define ELT_FAST %d\n%s", vec,
                          hint, vec & 1, tpl);
            char *cubin = NULL, *log = NULL;
            size_t len = 0;
            kiln_err err;
            if (kiln_cuda_compile_only(src, "sm_90", &cubin, &len, &log, &err) != KILN_OK)
                fail_msg("VEC=%d HINT=%d: %s\n%s", vec, hint, err.msg, log ? log : "");
            free(cubin);
            free(log);
            free(src);
        }
}

static void test_compile_all(void **state) {
    (void)state;
    if (!kiln_cuda_have_nvrtc()) {
        printf("SKIP: NVRTC not found: no CUDA toolkit here\n");
        skip();
    }
    int64_t space = kiln_family_space_size(elt);
    for (int i = 0; i < n_cases; i++) {
        const case_t *c = &cases[i];
        kiln_match m;
        char why[256];
        assert_true(try_match(c->p, &m, why, sizeof why));
        int64_t *valid = xmalloc((size_t)space * sizeof *valid);
        int n_valid = 0;
        int64_t pt[KILN_FAMILY_MAX_PARAMS];
        for (int64_t k = 0; k < space; k++) {
            kiln_family_point(elt, k, pt);
            const char *bad = elt->check(c->p, &m, pt);
            if (!bad)
                valid[n_valid++] = k;
            else if (bad[0] == '!')
                free((void *)bad);
        }
        assert_true(n_valid > 0);
        int n_compile = n_valid < ELT_TEST_MAX_COMPILES ? n_valid : ELT_TEST_MAX_COMPILES;
        for (int s = 0; s < n_compile; s++) {
            int64_t k = valid[n_compile == 1 ? 0 : (int64_t)s * (n_valid - 1) / (n_compile - 1)];
            kiln_family_point(elt, k, pt);
            char *src = elt->emit(c->p, &m, pt, 1);
            kiln_abi abi;
            kiln_err err;
            if (kiln_abi_parse(src, 1, &abi, &err) != KILN_OK)
                fail_msg("%s point %lld: directives: %s", c->name, (long long)k, err.msg);
            for (int w = 0; w < c->p->n_workloads; w++) {
                kiln_launch_plan plan;
                if (kiln_abi_plan(&abi, c->p, &c->p->workloads[w], &plan, &err) != KILN_OK)
                    fail_msg("%s point %lld workload %d: %s", c->name, (long long)k, w, err.msg);
            }
            kiln_abi_free(&abi);
            char *cubin = NULL, *log = NULL;
            size_t len = 0;
            if (kiln_cuda_compile_only(src, "sm_90", &cubin, &len, &log, &err) != KILN_OK) {
                char *params = kiln_family_point_str(elt, pt);
                fail_msg("%s [%s]: %s\n%s", c->name, params, err.msg, log ? log : "");
            }
            free(cubin);
            free(log);
            free(src);
        }
        printf("    %-20s %-32s %5d valid of %lld, %2d compiled\n", c->name, m.variant, n_valid,
               (long long)space, n_compile);
        free(valid);
    }
}

/* The GPU rows in bench/problems match, and the first point of the space (the expert default,
 * which every sample of the space includes) is valid for them and compiles. */
static void test_bench_rows(void **state) {
    (void)state;
    static const char *const rows[] = {
        "eltwise_silu_mul_qwen_moe_bf16", "eltwise_gelu_tanh_mul_gemma4_bf16",
        "eltwise_residual_add_gemma4_bf16", "eltwise_relu_resnet50_f32",
        "eltwise_add_relu_resnet50_f32"};
    static const char *const variants[] = {"silu_mul", "gelu_tanh_mul", "add", "relu", "add_relu"};
    static const int vec[] = {8, 8, 8, 4, 4};
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/bench/problems/%s", KILN_SOURCE_DIR, rows[r]);
        kiln_problem *p = NULL;
        kiln_err err;
        if (kiln_problem_load(dir, &p, &err) != KILN_OK)
            fail_msg("%s: %s", rows[r], err.msg);
        kiln_match m;
        char why[256];
        if (!try_match(p, &m, why, sizeof why))
            fail_msg("%s declined: %s", rows[r], why);
        assert_string_equal(m.variant, variants[r]);
        assert_int_equal((int)kiln_match_get(&m, "dims", 0), 1);
        int64_t pt[KILN_FAMILY_MAX_PARAMS];
        kiln_family_point(elt, 0, pt);
        const char *bad = elt->check(p, &m, pt);
        if (bad)
            fail_msg("%s: the first point is invalid: %s", rows[r], bad);
        char *src = elt->emit(p, &m, pt, 1);
        char want[32]; /* 16 bytes per access: 8 bf16, 4 floats */
        snprintf(want, sizeof want, "#define ELT_VEC %d\n", vec[r]);
        assert_non_null(strstr(src, want));
        if (kiln_cuda_have_nvrtc()) {
            char *cubin = NULL, *log = NULL;
            size_t len = 0;
            if (kiln_cuda_compile_only(src, "sm_90", &cubin, &len, &log, &err) != KILN_OK)
                fail_msg("%s: %s\n%s", rows[r], err.msg, log ? log : "");
            free(cubin);
            free(log);
        }
        free(src);
        kiln_problem_free(p);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_match_cases),  cmocka_unit_test(test_declines),
        cmocka_unit_test(test_emitted_code), cmocka_unit_test(test_check_reasons),
        cmocka_unit_test(test_op_type_only), cmocka_unit_test(test_template_alone),
        cmocka_unit_test(test_bench_rows),   cmocka_unit_test(test_compile_all),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
