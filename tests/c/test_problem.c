/* test_problem.c: problem directories: a published SOL-ExecBench problem, kiln's fixtures with
 * every axis kind, and malformed ones whose messages must name the file (and line) and the field.
 */
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "formats/problem.h"

/* The fixtures are made by tests/data/formats/gen_problem_fixtures.py. */
#define FIX "tests/data/formats/problems/"
#define SOLBENCH_RMSNORM "../shared/solbench/rmsnorm_h4096"

static kiln_problem *load_ok(const char *dir) {
    kiln_problem *p = NULL;
    kiln_err err = {{0}};
    int rc = kiln_problem_load(dir, &p, &err);
    if (rc != KILN_OK)
        fail_msg("%s: %s", dir, err.msg);
    return p;
}

static void test_solbench_rmsnorm(void **state) {
    (void)state;
    struct stat sb;
    if (stat(SOLBENCH_RMSNORM "/definition.json", &sb) != 0) {
        print_message("skipped: %s is not here (it ships beside the repository in CI)\n",
                      SOLBENCH_RMSNORM);
        skip();
    }
    kiln_problem *p = load_ok(SOLBENCH_RMSNORM);
    assert_string_equal(p->name, "rmsnorm_h4096");
    assert_string_equal(p->op_type, "rmsnorm");
    assert_non_null(strstr(p->reference, "def run(hidden_states, weight)"));
    assert_null(p->custom_inputs_entrypoint);
    assert_int_equal(p->n_workloads, 14);
    assert_int_equal(p->n_axes, 2);
    assert_string_equal(p->axes[0].name, "batch_size");
    assert_int_equal(p->axes[0].kind, KILN_AXIS_VAR);
    assert_string_equal(p->axes[1].name, "hidden_size");
    assert_int_equal(p->axes[1].kind, KILN_AXIS_CONST);
    assert_int_equal(p->axes[1].value, 4096);
    assert_int_equal(p->n_inputs, 2);
    assert_string_equal(p->inputs[0].name, "hidden_states");
    assert_int_equal(p->inputs[0].dtype, KILN_BF16);
    assert_int_equal(p->inputs[0].ndim, 2);
    assert_int_equal(p->inputs[0].axis[0], 0);
    assert_int_equal(p->inputs[0].axis[1], 1);
    assert_string_equal(p->inputs[1].name, "weight");
    assert_int_equal(p->inputs[1].dtype, KILN_BF16);
    assert_int_equal(p->inputs[1].ndim, 1);
    assert_int_equal(p->inputs[1].axis[0], 1);
    assert_int_equal(p->n_outputs, 1);
    assert_string_equal(p->outputs[0].name, "output");
    assert_int_equal(p->outputs[0].dtype, KILN_BF16);
    assert_int_equal(p->outputs[0].ndim, 2);
    const kiln_workload *w = &p->workloads[0];
    assert_string_equal(w->uuid, "33bf737d-3b37-4e38-be80-ea39b4b46ae6");
    assert_int_equal(w->axis_values[0], 7);
    assert_int_equal(w->axis_values[1], 4096);
    assert_int_equal(w->inputs[0].kind, KILN_INPUT_RANDOM);
    assert_int_equal(w->inputs[1].kind, KILN_INPUT_RANDOM);
    assert_int_equal(w->has_tolerance, 0);
    int64_t shape[KILN_MAX_DIMS];
    assert_int_equal(kiln_tensor_shape(p, &p->inputs[0], w, shape), 7 * 4096);
    assert_int_equal(shape[0], 7);
    assert_int_equal(shape[1], 4096);
    /* bf16 in + weight + out */
    assert_true(kiln_problem_min_bytes(p, w) == 2.0 * (7 * 4096 + 4096 + 7 * 4096));
    assert_true(p->min_bytes < 0 && p->flops < 0 && !p->has_tolerance);
    kiln_problem_free(p);
}

static uint64_t key_of_files(const char *dir) {
    char path[512];
    char *text;
    size_t len;
    uint64_t h = KILN_FNV_INIT;
    snprintf(path, sizeof path, "%s/definition.json", dir);
    assert_int_equal(kiln_read_file(path, &text, &len, NULL), KILN_OK);
    h = kiln_fnv1a(h, text, len);
    free(text);
    snprintf(path, sizeof path, "%s/workload.jsonl", dir);
    assert_int_equal(kiln_read_file(path, &text, &len, NULL), KILN_OK);
    h = kiln_fnv1a(h, text, len);
    free(text);
    return h;
}

/* good_basic: var, const and expr axes (E = D * 2 + M % 3 uses D = N // H, listed after it), a
 * scalar and a 0-d input, a bare line, a trace-style line with "correctness", a CRLF line with
 * "tolerance", blank lines, unknown fields. */
static void test_good_basic(void **state) {
    (void)state;
    kiln_problem *p = load_ok(FIX "good_basic");
    assert_string_equal(p->dir, FIX "good_basic");
    assert_string_equal(p->name, "fixture_norm");
    assert_string_equal(p->op_type, "rmsnorm");
    assert_int_equal(p->n_constraints, 1);
    assert_string_equal(p->constraints[0], "N % H == 0");
    assert_true(p->source_key == key_of_files(FIX "good_basic"));

    static const char *axes[5] = {"M", "E", "N", "H", "D"};
    static const kiln_axis_kind kinds[5] = {KILN_AXIS_VAR, KILN_AXIS_EXPR, KILN_AXIS_CONST,
                                            KILN_AXIS_CONST, KILN_AXIS_EXPR};
    assert_int_equal(p->n_axes, 5);
    for (int i = 0; i < 5; i++) {
        assert_string_equal(p->axes[i].name, axes[i]);
        assert_int_equal(p->axes[i].kind, kinds[i]);
        assert_int_equal(kiln_problem_axis_index(p, axes[i]), i);
    }
    assert_int_equal(p->axes[2].value, 16);
    assert_string_equal(p->axes[4].expression, "N // H");
    assert_null(p->axes[0].expression);
    assert_int_equal(kiln_problem_axis_index(p, "K"), -1);

    /* Inputs keep the JSON order: the ABI order. */
    static const char *ins[4] = {"x", "weight", "eps", "count"};
    static const kiln_dtype in_types[4] = {KILN_F32, KILN_BF16, KILN_F32, KILN_I64};
    assert_int_equal(p->n_inputs, 4);
    for (int i = 0; i < 4; i++) {
        assert_string_equal(p->inputs[i].name, ins[i]);
        assert_int_equal(p->inputs[i].dtype, in_types[i]);
        assert_int_equal(kiln_problem_input_index(p, ins[i]), i);
    }
    assert_int_equal(kiln_problem_input_index(p, "y"), -1);
    assert_int_equal(p->inputs[2].is_scalar, 1);
    assert_int_equal(p->inputs[2].ndim, 0);
    assert_int_equal(p->inputs[3].is_scalar, 0);
    assert_int_equal(p->inputs[3].ndim, 0);
    assert_int_equal(p->n_outputs, 2);
    assert_string_equal(p->outputs[1].name, "z");
    assert_int_equal(p->outputs[1].dtype, KILN_F16);
    assert_int_equal(p->outputs[1].axis[1], 1); /* E */
    assert_int_equal(kiln_problem_output_index(p, "z"), 1);
    assert_int_equal(kiln_problem_output_index(p, "x"), -1);

    assert_true(p->flops == 1000);
    assert_true(p->min_bytes < 0);
    assert_int_equal(p->has_tolerance, 1);
    assert_true(p->tolerance.atol == 0.001 && p->tolerance.rtol == 0.01 &&
                p->tolerance.rel_l2 == 0.005);

    assert_int_equal(p->n_workloads, 3);
    /* line 1: M=5, D=4, E=4*2+5%3=10 */
    const kiln_workload *w = &p->workloads[0];
    assert_string_equal(w->uuid, "w1");
    static const int64_t v1[5] = {5, 10, 16, 4, 4};
    for (int i = 0; i < 5; i++)
        assert_int_equal(w->axis_values[i], v1[i]);
    assert_int_equal(w->inputs[0].kind, KILN_INPUT_RANDOM);
    assert_int_equal(w->inputs[2].kind, KILN_INPUT_SCALAR);
    assert_true(w->inputs[2].scalar == 1e-5);
    assert_int_equal(w->inputs[3].kind, KILN_INPUT_SCALAR);
    assert_true(w->inputs[3].scalar == 3);
    assert_int_equal(w->has_tolerance, 0);
    int64_t shape[KILN_MAX_DIMS];
    assert_int_equal(kiln_tensor_shape(p, &p->outputs[1], w, shape), 50);
    assert_int_equal(shape[0], 5);
    assert_int_equal(shape[1], 10);
    assert_int_equal(kiln_tensor_shape(p, &p->inputs[2], w, shape), 1); /* scalar */
    assert_int_equal(kiln_tensor_shape(p, &p->inputs[3], w, shape), 1); /* 0-d */
    /* x 320 + weight 32 + eps 0 + count 8 + y 320 + z 100 */
    assert_true(kiln_problem_min_bytes(p, w) == 780);

    /* line 3 (trace-style; it binds the expr axis D to its value): M=7, E=9 */
    w = &p->workloads[1];
    assert_string_equal(w->uuid, "w2");
    assert_int_equal(w->axis_values[0], 7);
    assert_int_equal(w->axis_values[1], 9);
    assert_int_equal(w->inputs[0].kind, KILN_INPUT_SAFETENSORS);
    assert_string_equal(w->inputs[0].path, "t/x.safetensors");
    assert_string_equal(w->inputs[0].tensor_key, "x");
    assert_true(w->inputs[2].kind == KILN_INPUT_SCALAR && w->inputs[2].scalar == 1); /* true */
    assert_int_equal(w->inputs[3].kind, KILN_INPUT_RANDOM);
    /* SOL-ExecBench's correctness: max_atol given, max_rtol and required_matched_ratio at their
     * defaults, no error cap; judged by that benchmark's rules (no L2 criterion) */
    assert_int_equal(w->has_tolerance, 1);
    assert_true(w->tolerance.atol == 0.5 && w->tolerance.rtol == 0.01);
    assert_int_equal(w->tolerance.sol, 1);
    assert_true(w->tolerance.matched_ratio == 1.0 && w->tolerance.error_cap == 0);

    /* line 4 (CRLF, "tolerance"): M=0 gives empty tensors, E=8 */
    w = &p->workloads[2];
    assert_string_equal(w->uuid, "w3");
    assert_int_equal(w->axis_values[0], 0);
    assert_int_equal(w->axis_values[1], 8);
    assert_int_equal(w->has_tolerance, 1);
    assert_true(w->tolerance.atol == 0 && w->tolerance.rtol == 0 && w->tolerance.rel_l2 == 0);
    assert_int_equal(kiln_tensor_shape(p, &p->inputs[0], w, shape), 0);
    kiln_problem_free(p);
}

static void test_good_custom(void **state) {
    (void)state;
    kiln_problem *p = load_ok(FIX "good_custom");
    assert_string_equal(p->custom_inputs_entrypoint, "make_inputs");
    assert_int_equal(p->n_workloads, 1);
    for (int i = 0; i < p->n_inputs; i++)
        assert_int_equal(p->workloads[0].inputs[i].kind, KILN_INPUT_CUSTOM);
    kiln_problem_free(p);
}

/* SOL-ExecBench's code reads a digit string in a shape as a literal size: x [M, "16"], y ["2", M,
 * N]. */
static void test_literal_dims(void **state) {
    (void)state;
    kiln_problem *p = load_ok(FIX "good_literal_dims");
    const kiln_tensor_spec *x = &p->inputs[0], *y = &p->outputs[0];
    assert_int_equal(x->ndim, 2);
    assert_int_equal(x->axis[0], 0);
    assert_int_equal(x->axis[1], -1);
    assert_int_equal(x->literal[1], 16);
    assert_int_equal(y->ndim, 3);
    assert_int_equal(y->axis[0], -1);
    assert_int_equal(y->literal[0], 2);
    assert_int_equal(y->axis[2], kiln_problem_axis_index(p, "N"));
    int64_t shape[KILN_MAX_DIMS];
    assert_int_equal(kiln_tensor_shape(p, y, &p->workloads[0], shape), 2 * 5 * 16);
    assert_int_equal(shape[0], 2);
    assert_int_equal(shape[1], 5);
    assert_int_equal(shape[2], 16);
    kiln_problem_free(p);
}

static const struct {
    const char *dir;
    int rc;
    const char *where; /* file (and line) */
    const char *want;  /* field and reason */
} BAD[] = {
    {"def_bad_json", KILN_ERR_FORMAT, "definition.json", "not valid JSON (error near line 5"},
    {"def_not_object", KILN_ERR_FORMAT, "definition.json", "not a JSON object"},
    {"def_missing_name", KILN_ERR_FORMAT, "definition.json", "name: missing"},
    {"def_missing_axes", KILN_ERR_FORMAT, "definition.json", "axes: missing"},
    {"def_missing_reference", KILN_ERR_FORMAT, "definition.json", "reference: missing"},
    {"def_axis_bad_type", KILN_ERR_FORMAT, "definition.json",
     "axes.M.type: 'variable' is not one of const, var, expr"},
    {"def_const_negative", KILN_ERR_FORMAT, "definition.json",
     "axes.N.value: not a non-negative integer"},
    {"def_const_fraction", KILN_ERR_FORMAT, "definition.json",
     "axes.N.value: not a non-negative integer"},
    {"def_const_no_value", KILN_ERR_FORMAT, "definition.json", "axes.N.value: missing"},
    {"def_expr_no_expression", KILN_ERR_FORMAT, "definition.json", "axes.D.expression: missing"},
    {"def_unknown_dtype", KILN_ERR_FORMAT, "definition.json",
     "inputs.weight.dtype: unknown dtype 'float23'"},
    {"def_shape_unknown_axis", KILN_ERR_FORMAT, "definition.json",
     "inputs.x.shape[1]: unknown axis 'K'"},
    {"def_shape_literal_huge", KILN_ERR_FORMAT, "definition.json",
     "inputs.x.shape[1]: literal size '99999999999999999999' is too large"},
    {"def_shape_not_array", KILN_ERR_FORMAT, "definition.json", "inputs.x.shape: not an array"},
    {"def_shape_missing", KILN_ERR_FORMAT, "definition.json", "inputs.x.shape: missing"},
    {"def_too_many_dims", KILN_ERR_UNSUPPORTED, "definition.json", "outputs.y.shape: 9 dimensions"},
    {"def_io_overlap", KILN_ERR_FORMAT, "definition.json", "outputs.x: the name is also an input"},
    {"def_input_is_axis", KILN_ERR_FORMAT, "definition.json", "inputs.N: the name is also an axis"},
    {"def_bad_input_name", KILN_ERR_FORMAT, "definition.json",
     "inputs: name 'x-1' is not an identifier"},
    {"def_no_outputs", KILN_ERR_UNSUPPORTED, "definition.json", "outputs: empty"},
    {"def_kiln_bad_tolerance", KILN_ERR_FORMAT, "definition.json",
     "kiln.tolerance.rel_l2: missing"},
    {"def_kiln_min_bytes_negative", KILN_ERR_FORMAT, "definition.json",
     "kiln.min_bytes: not a non-negative number"},
    {"def_kiln_not_object", KILN_ERR_FORMAT, "definition.json", "kiln: not an object"},
    {"def_constraints_not_strings", KILN_ERR_FORMAT, "definition.json",
     "constraints[1]: not a non-empty string"},
    {"def_expr_cycle", KILN_ERR_FORMAT, "definition.json",
     "axes.E.expression: 'D * 2 + M % 3' cannot be evaluated: the expr axes E, D depend on each "
     "other in a cycle"},
    {"def_expr_unknown_name", KILN_ERR_FORMAT, "definition.json",
     "axes.D.expression: 'N // Q' uses 'Q', which is not an axis"},
    {"def_expr_div_zero", KILN_ERR_FORMAT, "workload.jsonl:1", "axes.D: expression 'N // (H - 4)'"},
    {"def_expr_syntax", KILN_ERR_FORMAT, "workload.jsonl:1",
     "axes.D: expression 'N // * H': column 6"},
    {"def_duplicate_axis", KILN_ERR_FORMAT, "definition.json", "axes: key 'N' appears twice"},
    {"def_duplicate_name", KILN_ERR_FORMAT, "definition.json", "key 'name' appears twice"},
    {"wl_bad_json", KILN_ERR_FORMAT, "workload.jsonl:3", "not valid JSON"},
    {"wl_not_object", KILN_ERR_FORMAT, "workload.jsonl:3", "not a JSON object"},
    {"wl_type_randn", KILN_ERR_FORMAT, "workload.jsonl:3",
     "inputs.weight: type 'randn' is not one of random, scalar, safetensors, custom"},
    {"wl_missing_uuid", KILN_ERR_FORMAT, "workload.jsonl:3", "uuid: missing"},
    {"wl_missing_axes", KILN_ERR_FORMAT, "workload.jsonl:3", "axes: missing"},
    {"wl_unbound_var", KILN_ERR_FORMAT, "workload.jsonl:3", "axes.M: missing"},
    {"wl_unknown_axis", KILN_ERR_FORMAT, "workload.jsonl:3", "axes.K: no such axis"},
    {"wl_const_mismatch", KILN_ERR_FORMAT, "workload.jsonl:3",
     "axes.N: 32 for a const axis of value 16"},
    {"wl_expr_mismatch", KILN_ERR_FORMAT, "workload.jsonl:3",
     "axes.D: 5 but its expression 'N // H' gives 4"},
    {"wl_negative_axis", KILN_ERR_FORMAT, "workload.jsonl:3", "axes.M: not a non-negative integer"},
    {"wl_fraction_axis", KILN_ERR_FORMAT, "workload.jsonl:3", "axes.M: not a non-negative integer"},
    {"wl_missing_input", KILN_ERR_FORMAT, "workload.jsonl:3", "inputs.weight: missing"},
    {"wl_unknown_input", KILN_ERR_FORMAT, "workload.jsonl:3", "inputs.bias: no such input"},
    {"wl_scalar_no_value", KILN_ERR_FORMAT, "workload.jsonl:3", "inputs.eps.value: missing"},
    {"wl_scalar_string", KILN_ERR_FORMAT, "workload.jsonl:3",
     "inputs.eps.value: not a number or a bool"},
    {"wl_scalar_for_tensor", KILN_ERR_FORMAT, "workload.jsonl:3",
     "inputs.x: type 'scalar' for a tensor"},
    {"wl_safetensors_no_key", KILN_ERR_FORMAT, "workload.jsonl:3", "inputs.x.tensor_key: missing"},
    {"wl_safetensors_no_path", KILN_ERR_FORMAT, "workload.jsonl:3", "inputs.x.path: missing"},
    {"wl_custom_no_entrypoint", KILN_ERR_FORMAT, "workload.jsonl:3",
     "inputs.x: type 'custom' needs custom_inputs_entrypoint"},
    {"wl_custom_mixed", KILN_ERR_FORMAT, "workload.jsonl:3",
     "inputs: 'custom' inputs cannot be mixed"},
    {"wl_duplicate_uuid", KILN_ERR_FORMAT, "workload.jsonl:3", "uuid: 'w1' is already on line 1"},
    {"wl_bad_tolerance", KILN_ERR_FORMAT, "workload.jsonl:3",
     "tolerance.rtol: not a non-negative number"},
    {"wl_wrong_definition", KILN_ERR_FORMAT, "workload.jsonl:3",
     "definition: 'other_problem' is not this problem"},
    {"wl_size_overflow", KILN_ERR_FORMAT, "workload.jsonl:3",
     "outputs.y: the tensor's size overflows"},
    {"wl_duplicate_key", KILN_ERR_FORMAT, "workload.jsonl:3", "axes: key 'M' appears twice"},
    {"wl_empty", KILN_ERR_FORMAT, "workload.jsonl", "no workloads"},
};

static void test_malformed(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        char dir[256], where[512];
        snprintf(dir, sizeof dir, FIX "%s", BAD[i].dir);
        snprintf(where, sizeof where, "%s/%s: ", dir, BAD[i].where);
        kiln_problem *p = (kiln_problem *)0x1;
        kiln_err err = {{0}};
        int rc = kiln_problem_load(dir, &p, &err);
        if (rc != BAD[i].rc)
            fail_msg("%s: expected status %d, got %d: %s", BAD[i].dir, BAD[i].rc, rc,
                     rc ? err.msg : "(ok)");
        assert_null(p);
        if (!strstr(err.msg, where))
            fail_msg("%s: message \"%s\" does not start with \"%s\"", BAD[i].dir, err.msg, where);
        if (!strstr(err.msg, BAD[i].want))
            fail_msg("%s: message \"%s\" lacks \"%s\"", BAD[i].dir, err.msg, BAD[i].want);
    }
    /* Every fixture directory that is not good_* is in the table (a new one cannot be forgotten).
     */
    DIR *d = opendir(FIX);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || strncmp(e->d_name, "good_", 5) == 0)
            continue;
        size_t i = 0;
        while (i < sizeof BAD / sizeof BAD[0] && strcmp(BAD[i].dir, e->d_name) != 0)
            i++;
        if (i == sizeof BAD / sizeof BAD[0])
            fail_msg("fixture %s%s is not in the table of test_malformed", FIX, e->d_name);
    }
    closedir(d);
}

static void test_missing_files(void **state) {
    (void)state;
    kiln_problem *p;
    kiln_err err = {{0}};
    assert_int_equal(kiln_problem_load(FIX "no_such_problem", &p, &err), KILN_ERR_IO);
    assert_non_null(strstr(err.msg, FIX "no_such_problem/definition.json"));
    assert_null(p);
}

/* The in-memory entry point (the fuzz target's): labels, NUL bytes, kiln.min_bytes. */
static void test_parse_from_memory(void **state) {
    (void)state;
    const char *def = "{\"name\":\"p\",\"axes\":{\"n\":{\"type\":\"var\"}},"
                      "\"inputs\":{\"a\":{\"shape\":[\"n\"],\"dtype\":\"float32\"}},"
                      "\"outputs\":{\"b\":{\"shape\":[\"n\"],\"dtype\":\"int8\"}},"
                      "\"reference\":\"def run(a): ...\",\"kiln\":{\"min_bytes\":123.5}}";
    const char *wl = "{\"uuid\":\"u\",\"axes\":{\"n\":9},\"inputs\":{\"a\":{\"type\":\"random\"}}}";
    kiln_problem *p = NULL;
    kiln_err err = {{0}};
    int rc = kiln_problem_parse(def, strlen(def), "D", wl, strlen(wl), "W", &p, &err);
    if (rc != KILN_OK)
        fail_msg("%s", err.msg);
    assert_true(kiln_problem_min_bytes(p, &p->workloads[0]) == 123.5);
    assert_true(p->source_key ==
                kiln_fnv1a(kiln_fnv1a(KILN_FNV_INIT, def, strlen(def)), wl, strlen(wl)));
    kiln_tolerance t = kiln_tolerance_default(p->outputs[0].dtype);
    assert_true(t.atol == 0 && t.rtol == 0 && t.rel_l2 == 0);
    kiln_problem_free(p);

    /* Text up to a NUL is not the whole text: refused, not truncated. */
    char buf[512];
    size_t n = strlen(def);
    memcpy(buf, def, n);
    buf[n] = 0;
    memcpy(buf + n + 1, "xx", 2);
    assert_int_equal(kiln_problem_parse(buf, n + 3, "D", wl, strlen(wl), "W", &p, &err),
                     KILN_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "D: not valid JSON: NUL byte"));
    assert_null(p);
    assert_int_equal(kiln_problem_parse(def, n, "D", "\n\0\n", 3, "W", &p, &err), KILN_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "W:2: not valid JSON: NUL byte"));
    assert_int_equal(kiln_problem_parse(def, n, "D", "", 0, "W", &p, &err), KILN_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "W: no workloads"));
    /* A workload line whose inputs object is empty although the definition has an input. */
    const char *wl2 = "{\"uuid\":\"u\",\"axes\":{\"n\":9},\"inputs\":{}}";
    assert_int_equal(kiln_problem_parse(def, n, "D", wl2, strlen(wl2), "W", &p, &err),
                     KILN_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "W:1: inputs.a: missing"));
}

/* The "kiln" object stays with the problem, parsed once, with the layouts of its tensors; a layout
 * that is not a permutation of the tensor's dims does not load. */
static void test_kiln_object_and_layouts(void **state) {
    (void)state;
    static const char def_fmt[] =
        "{\"name\":\"p\",\"axes\":{\"n\":{\"type\":\"const\",\"value\":2}},"
        "\"inputs\":{\"a\":{\"shape\":[\"n\",\"n\",\"n\"],\"dtype\":\"float32\"},"
        "\"b\":{\"shape\":[\"n\"],\"dtype\":\"float32\"}},"
        "\"outputs\":{\"c\":{\"shape\":[\"n\",\"n\",\"n\"],\"dtype\":\"float32\"}},"
        "\"reference\":\"def run(a, b): ...\"%s}";
    const char *wl = "{\"uuid\":\"u\",\"axes\":{},\"inputs\":{\"a\":{\"type\":\"random\"},"
                     "\"b\":{\"type\":\"random\"}}}";
    char def[1024];
    kiln_problem *p = NULL;
    kiln_err err = {{0}};
    snprintf(def, sizeof def, def_fmt,
             ",\"kiln\":{\"kind\":\"aten\",\"aten\":\"aten::add.Tensor\",\"share\":0.25,"
             "\"layouts\":{\"a\":{\"stored\":\"memory_order\",\"permute\":[0,2,1]},"
             "\"b\":{\"stored\":\"memory_order\",\"expand\":[2,2,2]},"
             "\"c\":{\"stored\":\"contiguous\",\"permute\":[0,1,2]}}}");
    if (kiln_problem_parse(def, strlen(def), "D", wl, strlen(wl), "W", &p, &err) != KILN_OK)
        fail_msg("%s", err.msg);
    assert_non_null(p->kiln);
    assert_string_equal(kiln_problem_kiln_str(p, "kind"), "aten");
    assert_string_equal(kiln_problem_kiln_str(p, "aten"), "aten::add.Tensor");
    assert_null(kiln_problem_kiln_str(p, "share"));
    assert_true(kiln_problem_kiln_num(p, "share", -1) == 0.25);
    assert_true(kiln_problem_kiln_num(p, "module_class", -1) == -1);
    const kiln_layout *la = &p->inputs[0].layout, *lb = &p->inputs[1].layout;
    const kiln_layout *lc = &p->outputs[0].layout;
    assert_true(la->permuted && !la->expanded);
    assert_int_equal(la->perm[0], 0);
    assert_int_equal(la->perm[1], 2);
    assert_int_equal(la->perm[2], 1);
    assert_true(!lb->permuted && lb->expanded && lb->perm[0] == 0);
    assert_true(!lc->permuted && !lc->expanded && lc->perm[2] == 2); /* the identity, given */
    kiln_problem_free(p);

    /* without a "kiln" object: none kept, every tensor dense row-major */
    snprintf(def, sizeof def, def_fmt, "");
    if (kiln_problem_parse(def, strlen(def), "D", wl, strlen(wl), "W", &p, &err) != KILN_OK)
        fail_msg("%s", err.msg);
    assert_null(p->kiln);
    assert_null(kiln_problem_kiln_str(p, "kind"));
    assert_true(!p->inputs[0].layout.permuted && p->inputs[0].layout.perm[1] == 1);
    kiln_problem_free(p);

    static const struct {
        const char *kiln, *want;
    } bad[] = {
        {",\"kiln\":{\"layouts\":{\"a\":{\"permute\":[0,1]}}}",
         "D: kiln.layouts.a.permute: not a permutation of the 3 dims of a"},
        {",\"kiln\":{\"layouts\":{\"a\":{\"permute\":[0,1,1]}}}",
         "D: kiln.layouts.a.permute: not a permutation"},
        {",\"kiln\":{\"layouts\":{\"c\":{\"permute\":[0,1,3]}}}",
         "D: kiln.layouts.c.permute: not a permutation"},
        {",\"kiln\":{\"layouts\":{\"b\":{\"permute\":\"0\"}}}",
         "D: kiln.layouts.b.permute: not a permutation of the 1 dims of b"},
        {",\"kiln\":{\"layouts\":{\"a\":[0,2,1]}}", "D: kiln.layouts.a: not an object"},
        {",\"kiln\":{\"layouts\":[]}", "D: kiln.layouts: not an object"},
        {",\"kiln\":[]", "D: kiln: not an object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(def, sizeof def, def_fmt, bad[i].kiln);
        p = (kiln_problem *)0x1;
        assert_int_equal(kiln_problem_parse(def, strlen(def), "D", wl, strlen(wl), "W", &p, &err),
                         KILN_ERR_FORMAT);
        assert_null(p);
        if (!strstr(err.msg, bad[i].want))
            fail_msg("%s: message \"%s\" lacks \"%s\"", bad[i].kiln, err.msg, bad[i].want);
    }
}

static void test_tolerance_defaults(void **state) {
    (void)state;
    static const struct {
        kiln_dtype t;
        double atol, rtol, rel_l2;
    } rows[] = {
        {KILN_F64, 1e-8, 1e-7, 1e-7},
        {KILN_F32, 1e-5, 1e-4, 1e-5},
        {KILN_F16, 1e-3, 1e-2, 2e-3},
        {KILN_BF16, 1e-2, 2e-2, 1e-2},
        {KILN_F8_E4M3, 0.1, 0.25, 0.1},
        {KILN_F8_E5M2, 0.1, 0.25, 0.1},
        {KILN_F4_E2M1X2, 0.1, 0.25, 0.1},
        {KILN_I64, 0, 0, 0},
        {KILN_I32, 0, 0, 0},
        {KILN_I8, 0, 0, 0},
        {KILN_U8, 0, 0, 0},
        {KILN_BOOL, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        kiln_tolerance t = kiln_tolerance_default(rows[i].t);
        assert_true(t.atol == rows[i].atol);
        assert_true(t.rtol == rows[i].rtol);
        assert_true(t.rel_l2 == rows[i].rel_l2);
    }
}

/* A float32 output computed from bfloat16 and int64 inputs is judged at bfloat16's tolerance; an
 * int8 output of the same inputs stays exact; a workload's own tolerance still wins. */
static void test_tolerance_mixed_dtypes(void **state) {
    (void)state;
    const char *def = "{\"name\":\"m\",\"axes\":{\"n\":{\"type\":\"var\"}},"
                      "\"inputs\":{\"x\":{\"shape\":[\"n\"],\"dtype\":\"bfloat16\"},"
                      "\"i\":{\"shape\":[\"n\"],\"dtype\":\"int64\"}},"
                      "\"outputs\":{\"y\":{\"shape\":[\"n\"],\"dtype\":\"float32\"},"
                      "\"k\":{\"shape\":[\"n\"],\"dtype\":\"int8\"}},"
                      "\"reference\":\"def run(x, i): ...\"}";
    const char *wl = "{\"uuid\":\"a\",\"axes\":{\"n\":9},\"inputs\":{\"x\":{\"type\":\"random\"},"
                     "\"i\":{\"type\":\"random\"}}}\n"
                     "{\"uuid\":\"b\",\"axes\":{\"n\":9},\"inputs\":{\"x\":{\"type\":\"random\"},"
                     "\"i\":{\"type\":\"random\"}},"
                     "\"tolerance\":{\"atol\":1e-6,\"rtol\":1e-6,\"rel_l2\":1e-6}}\n";
    kiln_problem *p = NULL;
    kiln_err err = {{0}};
    if (kiln_problem_parse(def, strlen(def), "D", wl, strlen(wl), "W", &p, &err) != KILN_OK)
        fail_msg("%s", err.msg);
    kiln_tolerance bf = kiln_tolerance_default(KILN_BF16);
    kiln_tolerance y = kiln_problem_output_tolerance(p, 0, 0);
    assert_true(y.atol == bf.atol && y.rtol == bf.rtol && y.rel_l2 == bf.rel_l2);
    y = kiln_problem_output_tolerance(p, -1, 0);
    assert_true(y.atol == bf.atol && y.rtol == bf.rtol && y.rel_l2 == bf.rel_l2);
    kiln_tolerance k = kiln_problem_output_tolerance(p, 0, 1);
    assert_true(k.atol == 0 && k.rtol == 0 && k.rel_l2 == 0);
    kiln_tolerance own = kiln_problem_output_tolerance(p, 1, 0);
    assert_true(own.atol == 1e-6 && own.rtol == 1e-6 && own.rel_l2 == 1e-6);
    kiln_problem_free(p);
}

/* An fp8 GEMM writing bfloat16 is judged at bfloat16's tolerance, not fp8's, whether or not its
 * kiln.flops is declared: fp8 inputs enter exactly, so they never loosen a wider output. */
static void test_tolerance_fp8_contraction(void **state) {
    (void)state;
    for (int contraction = 0; contraction < 2; contraction++) {
        char def[640];
        snprintf(def, sizeof def,
                 "{\"name\":\"s\",\"axes\":{\"n\":{\"type\":\"const\",\"value\":8}},"
                 "\"inputs\":{\"a\":{\"shape\":[\"n\",\"n\"],\"dtype\":\"float8_e4m3fn\"},"
                 "\"b\":{\"shape\":[\"n\",\"n\"],\"dtype\":\"float8_e5m2\"},"
                 "\"s\":{\"shape\":[],\"dtype\":\"float32\"}},"
                 "\"outputs\":{\"y\":{\"shape\":[\"n\",\"n\"],\"dtype\":\"bfloat16\"}},"
                 "\"reference\":\"def run(a, b, s): ...\"%s}",
                 contraction ? ",\"kiln\":{\"flops\":1024}" : "");
        const char *wl = "{\"uuid\":\"a\",\"axes\":{},\"inputs\":{\"a\":{\"type\":\"random\"},"
                         "\"b\":{\"type\":\"random\"},\"s\":{\"type\":\"random\"}}}\n";
        kiln_problem *p = NULL;
        kiln_err err = {{0}};
        if (kiln_problem_parse(def, strlen(def), "D", wl, strlen(wl), "W", &p, &err) != KILN_OK)
            fail_msg("%s", err.msg);
        kiln_tolerance want = kiln_tolerance_default(KILN_BF16);
        kiln_tolerance y = kiln_problem_output_tolerance(p, 0, 0);
        assert_true(y.atol == want.atol && y.rtol == want.rtol && y.rel_l2 == want.rel_l2);
        kiln_problem_free(p);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_solbench_rmsnorm),
        cmocka_unit_test(test_good_basic),
        cmocka_unit_test(test_good_custom),
        cmocka_unit_test(test_literal_dims),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_missing_files),
        cmocka_unit_test(test_parse_from_memory),
        cmocka_unit_test(test_kiln_object_and_layouts),
        cmocka_unit_test(test_tolerance_defaults),
        cmocka_unit_test(test_tolerance_mixed_dtypes),
        cmocka_unit_test(test_tolerance_fp8_contraction),
    };
    return cmocka_run_group_tests_name("problem", tests, NULL, NULL);
}
