/* test_opchain.c: the one reader of op chains (src/formats/opchain.c): a captured aten call, the
 * "ops" form of modules and chains, the generated reference of problems captured before "ops",
 * what is no chain at all, and the faults each form names. Problems are parsed from memory. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "formats/opchain.h"

/* x [2, 4] bf16 and w [4] f32 in, y [2, 4] f32 (and z when two_outputs) out; kiln is the "kiln"
 * object's text (NULL: none), reference run()'s body. */
static kiln_problem *problem(const char *kiln, const char *body, int two_outputs) {
    char def[4096];
    snprintf(def, sizeof def,
             "{\"name\": \"p\", \"axes\": {\"n2\": {\"type\": \"const\", \"value\": 2}, \"n4\": "
             "{\"type\": \"const\", \"value\": 4}}, \"inputs\": {\"x\": {\"shape\": [\"n2\", "
             "\"n4\"], \"dtype\": \"bfloat16\"}, \"w\": {\"shape\": [\"n4\"], \"dtype\": "
             "\"float32\"}}, \"outputs\": {\"y\": {\"shape\": [\"n2\", \"n4\"], \"dtype\": "
             "\"float32\"}%s}, \"reference\": \"def run(x, w):\\n%s\"%s%s}",
             two_outputs ? ", \"z\": {\"shape\": [\"n2\"], \"dtype\": \"float32\"}" : "",
             body ? body : "    return x\\n", kiln ? ", \"kiln\": " : "", kiln ? kiln : "");
    const char *wl = "{\"uuid\": \"u\", \"axes\": {}, \"inputs\": {\"x\": {\"type\": \"random\"}, "
                     "\"w\": {\"type\": \"random\"}}}";
    kiln_problem *p = NULL;
    kiln_err err;
    if (kiln_problem_parse(def, strlen(def), "D", wl, strlen(wl), "W", &p, &err) != KILN_OK)
        fail_msg("%s\n%s", err.msg, def);
    return p;
}

static kiln_opchain *read_ok(const kiln_problem *p) {
    kiln_opchain *c = NULL;
    kiln_err err;
    if (kiln_opchain_read(p, &c, &err) != KILN_OK)
        fail_msg("%s", err.msg);
    return c;
}

static void expect_fault(const char *kiln, const char *body, int two_outputs, int status,
                         const char *want) {
    kiln_problem *p = problem(kiln, body, two_outputs);
    kiln_opchain *c = (kiln_opchain *)0x1;
    kiln_err err = {{0}};
    int rc = kiln_opchain_read(p, &c, &err);
    if (rc != status)
        fail_msg("%s: status %d, expected %d (%s)", kiln ? kiln : "(none)", rc, status, err.msg);
    assert_null(c);
    if (!strstr(err.msg, want))
        fail_msg("message \"%s\" lacks \"%s\"", err.msg, want);
    kiln_problem_free(p);
}

static void assert_input(const kiln_arg *a, int input) {
    assert_non_null(a);
    assert_int_equal(a->kind, KILN_ARG_TENSOR);
    assert_int_equal(a->value.input, input);
}

/* "kind": "aten": one op from capture's record, tensors {"tensor": i}, the kept results. */
static void test_captured_call(void **state) {
    (void)state;
    kiln_problem *p = problem(
        "{\"kind\": \"aten\", \"aten\": \"aten::native_layer_norm.default\", \"args\": {\"args\": "
        "[{\"tensor\": 0}, [4], {\"tensor\": 1}, null, 1e-05], \"kwargs\": {\"out\": {\"tensor\": "
        "5}, \"eps2\": \"-inf\", \"dtype\": \"torch.bfloat16\", \"mode\": \"tanh\", \"flag\": "
        "true}}, \"dropped_outputs\": {\"indices\": [1]}}",
        NULL, 1);
    kiln_opchain *c = read_ok(p);
    assert_string_equal(c->kind, "aten");
    assert_int_equal(c->n_ops, 1);
    const kiln_op *op = &c->ops[0];
    assert_string_equal(op->aten, "aten::native_layer_norm.default");
    assert_string_equal(op->name, "native_layer_norm");
    assert_string_equal(op->overload, "default");
    assert_false(op->inplace);
    assert_true(op->tuple);
    assert_int_equal(op->n_args, 5);
    assert_input(kiln_op_arg(op, 0, "input"), 0);
    const kiln_arg *shape = kiln_op_arg(op, 1, "normalized_shape");
    assert_int_equal(shape->kind, KILN_ARG_INTS);
    assert_int_equal(shape->n_ints, 1);
    assert_int_equal(shape->ints[0], 4);
    assert_input(kiln_op_arg(op, 2, "weight"), 1);
    assert_int_equal(kiln_op_arg(op, 3, "bias")->kind, KILN_ARG_NONE);
    assert_true(kiln_arg_num(kiln_op_arg(op, 4, "eps"), 0) == 1e-05);
    /* keywords: an out= buffer is no input, capture's non-finite floats are numbers */
    assert_int_equal(kiln_op_arg(op, -1, "out")->kind, KILN_ARG_OTHER);
    assert_true(isinf(kiln_op_arg(op, -1, "eps2")->num) && kiln_op_arg(op, -1, "eps2")->num < 0);
    assert_int_equal(kiln_op_arg(op, -1, "dtype")->kind, KILN_ARG_DTYPE);
    assert_int_equal(kiln_op_arg(op, -1, "dtype")->dtype, KILN_BF16);
    assert_int_equal(kiln_op_arg(op, -1, "mode")->kind, KILN_ARG_OTHER);
    assert_string_equal(kiln_op_arg(op, -1, "mode")->text, "tanh");
    assert_int_equal(kiln_op_arg(op, -1, "flag")->kind, KILN_ARG_BOOL);
    assert_null(kiln_op_arg(op, 7, "cudnn_enabled"));
    assert_true(kiln_arg_num(NULL, 3.5) == 3.5);
    /* outputs: results 0 and 2 (1 was dropped), with the problem's dtypes */
    assert_int_equal(c->n_outputs, 2);
    assert_true(c->outputs[0].input < 0 && c->outputs[0].op == 0 && c->outputs[0].slot == 0);
    assert_true(c->outputs[1].op == 0 && c->outputs[1].slot == 2);
    assert_int_equal(op->n_results, 3);
    assert_int_equal(op->result_dtype[0], KILN_F32);
    assert_int_equal(op->result_dtype[1], KILN_DTYPE_COUNT);
    kiln_opchain_free(c);
    kiln_problem_free(p);
}

/* "ops": values by {"ref": NAME}, results named by "out", an in-place op rebinding its argument. */
static void test_ops_form(void **state) {
    (void)state;
    kiln_problem *p = problem(
        "{\"kind\": \"module\", \"module_class\": \"M\", \"ops\": ["
        "{\"aten\": \"aten::to.dtype\", \"args\": [{\"ref\": \"x\"}, \"torch.float32\"], \"out\": "
        "\"v0\", \"dtypes\": [\"float32\"]},"
        "{\"aten\": \"aten::var_mean.correction\", \"args\": [{\"ref\": \"v0\"}, [-1]], "
        "\"kwargs\": {\"keepdim\": true}, \"out\": [\"v1\", null]},"
        "{\"aten\": \"aten::mul_.Tensor\", \"args\": [{\"ref\": \"v0\"}, {\"ref\": \"w\"}]},"
        "{\"aten\": \"aten::add.Tensor\", \"args\": [{\"ref\": \"v0\"}, \"nan\"], \"out\": "
        "\"v3\"},"
        "{\"aten\": \"aten::relu\", \"args\": [{\"ref\": \"v3\"}], \"out\": \"y\"}],"
        " \"outputs\": [\"y\", \"v1\"]}",
        NULL, 1);
    kiln_opchain *c = read_ok(p);
    assert_string_equal(c->kind, "module");
    assert_int_equal(c->n_ops, 5);
    assert_input(&c->ops[0].args[0], 0);
    assert_int_equal(c->ops[0].args[1].kind, KILN_ARG_DTYPE);
    assert_int_equal(c->ops[0].args[1].dtype, KILN_F32);
    assert_int_equal(c->ops[0].result_dtype[0], KILN_F32);
    assert_true(kiln_arg_is_result(&c->ops[1].args[0], 0, 0));
    assert_true(c->ops[1].tuple);
    assert_int_equal(kiln_op_arg(&c->ops[1], 2, "keepdim")->kind, KILN_ARG_BOOL);
    /* mul_ writes v0: the add reads mul_'s result, not the cast's */
    assert_true(c->ops[2].inplace);
    assert_input(&c->ops[2].args[1], 1);
    assert_true(kiln_arg_is_result(&c->ops[3].args[0], 2, 0));
    assert_true(isnan(c->ops[3].args[1].num));
    assert_string_equal(c->ops[4].aten, "aten::relu.default"); /* no overload: default */
    assert_int_equal(c->n_outputs, 2);
    assert_true(c->outputs[0].op == 4 && c->outputs[0].slot == 0);
    assert_true(c->outputs[1].op == 1 && c->outputs[1].slot == 0);
    kiln_opchain_free(c);
    kiln_problem_free(p);

    /* outputs default to the problem's names; a chain without "kind" */
    p = problem("{\"ops\": [{\"aten\": \"aten::exp.default\", \"args\": [{\"ref\": \"x\"}], "
                "\"out\": \"y\"}]}",
                NULL, 0);
    assert_true(kiln_opchain_described(p));
    c = read_ok(p);
    assert_string_equal(c->kind, "chain");
    assert_true(c->n_outputs == 1 && c->outputs[0].op == 0);
    kiln_opchain_free(c);
    kiln_problem_free(p);
}

/* A captured problem without "ops": the straight-line run() capture generated. */
static void test_generated_reference(void **state) {
    (void)state;
    kiln_problem *p = problem(
        "{\"kind\": \"module\", \"module_class\": \"M\"}",
        "    DEVICE = x.device\\n    x = x.permute(1, 0)  # captured strides\\n    v0 = "
        "torch.ops.aten._to_copy.default(x, dtype=torch.float32, device=DEVICE)\\n    v1, _, v2 = "
        "torch.ops.aten.native_layer_norm.default(v0, [4], w, None, 1e-05)\\n    "
        "torch.ops.aten.relu_.default(v1)\\n    v3 = torch.ops.aten.clamp.default(v1, "
        "float('-inf'), 0.5)\\n    return (v3.permute(1, 0), "
        "torch.ops.aten.sum.dim_IntList(v2, [-1]))\\n",
        1);
    kiln_opchain *c = read_ok(p);
    assert_int_equal(c->n_ops, 5);
    assert_input(&c->ops[0].args[0], 0); /* x, through its layout restore */
    assert_int_equal(kiln_op_arg(&c->ops[0], -1, "dtype")->dtype, KILN_F32);
    assert_string_equal(kiln_op_arg(&c->ops[0], -1, "device")->text, "DEVICE");
    assert_true(c->ops[1].tuple);
    assert_int_equal(c->ops[1].n_results, 3);
    assert_input(&c->ops[1].args[2], 1);
    assert_true(c->ops[2].inplace && kiln_arg_is_result(&c->ops[2].args[0], 1, 0));
    assert_true(kiln_arg_is_result(&c->ops[3].args[0], 2, 0)); /* relu_ rebound v1 */
    assert_true(isinf(c->ops[3].args[1].num) && c->ops[3].args[1].num < 0);
    assert_true(c->ops[3].args[2].num == 0.5);
    assert_true(kiln_arg_is_result(&c->ops[4].args[0], 1, 2));
    assert_int_equal(c->n_outputs, 2);
    assert_true(c->outputs[0].op == 3 && c->outputs[1].op == 4);
    kiln_opchain_free(c);
    kiln_problem_free(p);

    /* an aten problem without "args": its reference, `result[k]` for the results */
    p = problem("{\"kind\": \"aten\", \"aten\": \"aten::native_layer_norm.default\"}",
                "    result = torch.ops.aten.native_layer_norm.default(x, [4], w, None, "
                "1e-05)\\n    return (result[0], result[2],)\\n",
                1);
    c = read_ok(p);
    assert_int_equal(c->n_ops, 1);
    assert_true(c->ops[0].tuple);
    assert_true(c->outputs[0].slot == 0 && c->outputs[1].slot == 2);
    kiln_opchain_free(c);
    kiln_problem_free(p);
}

/* What is no chain, and the faults of each form. */
static void test_faults(void **state) {
    (void)state;
    kiln_problem *p = problem(NULL, NULL, 0);
    assert_false(kiln_opchain_described(p));
    kiln_problem_free(p);
    expect_fault(NULL, NULL, 0, KILN_ERR_UNSUPPORTED, "no \"kiln\" object");
    expect_fault("{\"tolerance\": {\"atol\": 0, \"rtol\": 0, \"rel_l2\": 0}}", NULL, 0,
                 KILN_ERR_UNSUPPORTED, "no kind or ops");
    expect_fault("{\"kind\": \"graph\"}", NULL, 0, KILN_ERR_UNSUPPORTED,
                 "kiln.kind 'graph' is not aten, module or chain");
    expect_fault("{\"kind\": \"chain\"}", NULL, 0, KILN_ERR_FORMAT, "a chain without \"ops\"");
    expect_fault("{\"kind\": \"aten\"}", NULL, 0, KILN_ERR_FORMAT, "kiln.aten is missing");
    expect_fault("{\"kind\": \"aten\", \"aten\": \"aten::relu.default\", \"args\": {\"args\": "
                 "[{\"tensor\": 0}], \"kwargs\": {}}, \"dropped_outputs\": {\"indices\": [0, 1, "
                 "2, 3]}}",
                 NULL, 0, KILN_ERR_FORMAT, "not among its first 4 results");
    expect_fault("{\"kind\": \"aten\", \"aten\": \"aten::sigmoid.default\"}",
                 "    result = torch.ops.aten.relu.default(x)\\n    return result\\n", 0,
                 KILN_ERR_FORMAT, "the reference calls aten::relu.default, not the captured");
    expect_fault("{\"ops\": [{\"aten\": \"aten::mul.Tensor\", \"args\": [{\"ref\": \"x\"}, "
                 "{\"ref\": \"q\"}], \"out\": \"y\"}]}",
                 NULL, 0, KILN_ERR_FORMAT, "'q' is not an input or an earlier value");
    expect_fault("{\"ops\": [{\"aten\": \"aten::exp.default\", \"args\": [{\"tensor\": 0}], "
                 "\"out\": \"y\"}]}",
                 NULL, 0, KILN_ERR_FORMAT, "an argument of an unknown form");
    expect_fault("{\"ops\": [{\"aten\": \"prims::exp\", \"args\": [{\"ref\": \"x\"}], \"out\": "
                 "\"y\"}]}",
                 NULL, 0, KILN_ERR_FORMAT, "'prims::exp' is not an aten op");
    expect_fault("{\"ops\": [{\"op\": \"exp\", \"args\": [{\"ref\": \"x\"}], \"out\": \"y\"}]}",
                 NULL, 0, KILN_ERR_FORMAT, "kiln.ops[0] names no \"aten\" op");
    expect_fault("{\"ops\": [{\"aten\": \"aten::exp.default\", \"args\": [{\"ref\": \"x\"}], "
                 "\"out\": \"y\", \"dtypes\": [\"complex64\"]}]}",
                 NULL, 0, KILN_ERR_FORMAT, "unknown dtype 'complex64'");
    expect_fault("{\"ops\": [{\"aten\": \"aten::exp.default\", \"args\": [{\"ref\": \"x\"}], "
                 "\"out\": \"y\"}], \"outputs\": [\"y\", \"y\"]}",
                 NULL, 0, KILN_ERR_FORMAT, "the chain returns 2 values, the problem has 1");
    expect_fault("{\"ops\": [{\"aten\": \"aten::exp.default\", \"args\": [{\"ref\": \"x\"}], "
                 "\"out\": \"e\"}]}",
                 NULL, 0, KILN_ERR_FORMAT, "kiln.outputs: 'y' is not an input or an op's result");
    expect_fault("{\"ops\": []}", NULL, 0, KILN_ERR_FORMAT, "not a non-empty list");
    expect_fault("{\"kind\": \"module\"}", "    y = x.sum() + 1\\n    return y\\n", 0,
                 KILN_ERR_FORMAT, "reference line 2: cannot read the line 'y = x.sum() + 1'");
    expect_fault("{\"kind\": \"module\"}",
                 "    v0 = torch.ops.aten.exp.default(x)\\n    v1 = "
                 "torch.ops.aten.mul.Tensor(v0, q)\\n    return v1\\n",
                 0, KILN_ERR_FORMAT, "reference line 3: 'q' is not an input or an earlier value");
    expect_fault("{\"kind\": \"module\"}", "    torch.ops.aten.exp.default(x)\\n    return x\\n", 0,
                 KILN_ERR_FORMAT, "the result of aten::exp.default is not assigned");
    expect_fault("{\"kind\": \"module\"}", "    v0 = torch.ops.aten.exp.default(x)\\n", 0,
                 KILN_ERR_FORMAT, "run() has no return");
    expect_fault("{\"kind\": \"module\"}",
                 "    return x\\n    v0 = torch.ops.aten.exp.default(x)\\n", 0, KILN_ERR_FORMAT,
                 "code after the return of run()");
    expect_fault("{\"kind\": \"module\"}", "    v0 = torch.ops.prims.exp.default(x)\\n", 0,
                 KILN_ERR_FORMAT, "calls torch.ops.prims.exp.default(x), not an aten op");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_captured_call),
        cmocka_unit_test(test_ops_form),
        cmocka_unit_test(test_generated_reference),
        cmocka_unit_test(test_faults),
    };
    return cmocka_run_group_tests_name("opchain", tests, NULL, NULL);
}
