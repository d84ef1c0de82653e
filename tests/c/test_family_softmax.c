/* test_family_softmax.c: the softmax family without a GPU: what its matcher accepts (captured aten
 * calls, modules, chains, hand-written problems, with the roundings eager PyTorch implies) and
 * declines (with a reason), what its constraints reject, that every point it accepts compiles with
 * NVRTC for sm_90 and plans a legal launch, and that the CUDA kernels compute the right thing: run
 * on a host emulator of CUDA threads, barriers, shuffles and clusters, they agree with the family's
 * C emission (which tests/py/test_family_softmax.py proves against PyTorch).
 *
 * The problems have rows of 1, 7, 4097 and 24576 elements, all three float types, casts, masks with
 * -inf and fully masked rows, scales, long rows (clusters) and many rows (persistent grids). The
 * space times these problems is a few thousand valid points; a deterministic, evenly spaced sample
 * (every k-th valid point of each problem, the first and the last included, ~140 in all) is
 * compiled, and 16 hand-picked points that cover every code path are emulated. Rows masked as
 * attention masks them (-inf and finfo.min prefixes and suffixes, Gemma's causal finfo.min) run
 * through the C emission and 13 more emulated points, checked against PyTorch's semantics computed
 * here. The whole file takes under a minute on two idle cores. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <ctype.h>
#include <stdlib.h>
#include <unistd.h>

#include "backend/abi.h"
#include "backend/backend.h"
#include "backend/nvrtc.h"
#include "gen/family.h"
#include "emu_host.h"

#include <math.h>

#define COMPILE_QUOTA 18 /* compiles per problem: 8 problems, 0.1-0.25 s each */

static const kiln_family *fam;

/* ---- problems, parsed from memory ---- */

typedef struct {
    kiln_problem *p;
    kiln_match m;
    char why[512];
    int matched;
} prob;

/* JSON written with single quotes (C-friendly); every ' becomes ". */
static char *dq(const char *s) {
    char *t = xstrdup(s);
    for (char *c = t; *c; c++)
        if (*c == '\'')
            *c = '"';
    return t;
}

/* Loads a problem from single-quoted JSON and runs the matcher on it. */
static void load(prob *pr, const char *def, const char *wl) {
    memset(pr, 0, sizeof *pr);
    char *d = dq(def), *w = dq(wl);
    kiln_err err;
    int rc = kiln_problem_parse(d, strlen(d), "definition", w, strlen(w), "workload", &pr->p, &err);
    free(d);
    free(w);
    if (rc)
        fail_msg("problem does not load: %s", err.msg);
    for (int k = 0; k < 8; k++)
        pr->m.input_of_role[k] = -1;
    for (int k = 0; k < 4; k++)
        pr->m.output_of_role[k] = -1;
    pr->matched = fam->match(pr->p, &pr->m, pr->why, sizeof pr->why);
}

static void unload(prob *pr) {
    kiln_problem_free(pr->p);
}

static void expect_match(const char *def, const char *wl, const char *variant, const char *rows,
                         const char *cols) {
    prob pr;
    load(&pr, def, wl);
    if (!pr.matched)
        fail_msg("declined: %s", pr.why);
    assert_string_equal(pr.m.variant, variant);
    assert_string_equal(pr.m.rows_expr, rows);
    assert_string_equal(pr.m.cols_expr, cols);
    assert_true(pr.m.how[0] != 0);
    unload(&pr);
}

static void expect_decline(const char *def, const char *wl, const char *reason_part) {
    prob pr;
    load(&pr, def, wl);
    if (pr.matched)
        fail_msg("matched (%s) but should decline with '%s'", pr.m.how, reason_part);
    if (!strstr(pr.why, reason_part))
        fail_msg("declined with '%s', expected '%s' in it", pr.why, reason_part);
    unload(&pr);
}

/* ---- the problems ---- */

#define REF "'reference': 'def run(x):\\n    return x'"

/* hand-written float32 [rows, cols] with rows of 1, 7, 4097 elements */
static const char f32_odd_def[] =
    "{'name': 'f32_odd', 'op_type': 'softmax', 'axes': {'rows': {'type': 'var'}, 'cols': {'type': "
    "'var'}}, 'inputs': {'x': {'shape': ['rows', 'cols'], 'dtype': 'float32'}}, 'outputs': {'y': "
    "{'shape': ['rows', 'cols'], 'dtype': 'float32'}}, " REF "}";
static const char f32_odd_wl[] =
    "{'uuid': 'a', 'axes': {'rows': 1, 'cols': 1}, 'inputs': {'x': {'type': 'random'}}}\n"
    "{'uuid': 'b', 'axes': {'rows': 3, 'cols': 7}, 'inputs': {'x': {'type': 'random'}}}\n"
    "{'uuid': 'c', 'axes': {'rows': 5, 'cols': 4097}, 'inputs': {'x': {'type': 'random'}}}\n"
    "{'uuid': 'd', 'axes': {'rows': 64, 'cols': 256}, 'inputs': {'x': {'type': 'random'}}}\n";

/* the eager-attention cast chain, bf16 [b, h, q, 4096] -> bf16 */
static const char bf16_chain_def[] =
    "{'name': 'bf16_chain', 'op_type': 'softmax', 'axes': {'b': {'type': 'var'}, 'h': {'type': "
    "'var'}, 'q': {'type': 'var'}, 'k': {'type': 'const', 'value': 4096}}, 'inputs': {'x': "
    "{'shape': ['b', 'h', 'q', 'k'], 'dtype': 'bfloat16'}}, 'outputs': {'y': {'shape': ['b', 'h', "
    "'q', 'k'], 'dtype': 'bfloat16'}}, " REF
    ", 'kiln': {'kind': 'chain', 'ops': [{'aten': 'aten::_to_copy.default', 'args': [{'ref': "
    "'x'}], 'kwargs': {'dtype': 'torch.float32'}, 'out': 'xf'}, {'aten': "
    "'aten::_softmax.default', 'args': [{'ref': 'xf'}, -1, false], 'out': 'p'}, {'aten': "
    "'aten::_to_copy.default', 'args': [{'ref': 'p'}], 'kwargs': {'dtype': 'torch.bfloat16'}, "
    "'out': 'y'}]}}";
static const char bf16_chain_wl[] =
    "{'uuid': 'a', 'axes': {'b': 1, 'h': 2, 'q': 3}, 'inputs': {'x': {'type': 'random'}}}\n"
    "{'uuid': 'b', 'axes': {'b': 2, 'h': 8, 'q': 64}, 'inputs': {'x': {'type': 'random'}}}\n";

/* Gemma-4's eager attention probabilities as capture writes the chain of four calls */
static const char gemma_chain_def[] =
    "{'name': 'g', 'axes': {'n1': {'type': 'const', 'value': 1}, 'n2': {'type': 'const', 'value': "
    "2}, 'n64': {'type': 'const', 'value': 64}}, 'inputs': {'input0': {'shape': ['n1', 'n2', "
    "'n64', 'n64'], 'dtype': 'bfloat16'}, 'input1': {'shape': ['n1', 'n1', 'n64', 'n64'], "
    "'dtype': 'bfloat16'}}, 'outputs': {'out0': {'shape': ['n1', 'n2', 'n64', 'n64'], 'dtype': "
    "'bfloat16'}}, " REF
    ", 'kiln': {'kind': 'chain', 'ops': [{'aten': 'aten::mul.Tensor', 'args': [{'ref': "
    "'input0'}, 1.0], 'out': 'v0'}, {'aten': 'aten::add.Tensor', 'args': [{'ref': 'v0'}, {'ref': "
    "'input1'}], 'out': 'v1'}, {'aten': 'aten::softmax.int', 'args': [{'ref': 'v1'}, -1, "
    "'torch.float32'], 'out': 'v2'}, {'aten': 'aten::to.dtype', 'args': [{'ref': 'v2'}, "
    "'torch.bfloat16'], 'out': 'v3'}], 'outputs': ['v3']}}";
static const char gemma_chain_wl[] =
    "{'uuid': 'a', 'axes': {}, 'inputs': {'input0': {'type': 'random'}, 'input1': {'type': "
    "'random'}}}\n";

/* float16 in, float32 out */
static const char f16_f32_def[] =
    "{'name': 'f16_f32', 'op_type': 'softmax', 'axes': {'rows': {'type': 'var'}, 'cols': {'type': "
    "'const', 'value': 130}}, 'inputs': {'x': {'shape': ['rows', 'cols'], 'dtype': 'float16'}}, "
    "'outputs': {'y': {'shape': ['rows', 'cols'], 'dtype': 'float32'}}, " REF "}";
static const char f16_f32_wl[] =
    "{'uuid': 'a', 'axes': {'rows': 7}, 'inputs': {'x': {'type': 'random'}}}\n";

/* bf16 x * scale + float32 mask [1, 1, q, k] -> float32 */
static const char bf16_mask_def[] =
    "{'name': 'bf16_mask', 'op_type': 'softmax', 'axes': {'b': {'type': 'var'}, 'h': {'type': "
    "'var'}, 'q': {'type': 'var'}, 'k': {'type': 'var'}}, 'inputs': {'x': {'shape': ['b', 'h', "
    "'q', 'k'], 'dtype': 'bfloat16'}, 'mask': {'shape': ['1', '1', 'q', 'k'], 'dtype': "
    "'float32'}, 'scale': {'shape': null, 'dtype': 'float32'}}, 'outputs': {'y': {'shape': ['b', "
    "'h', 'q', 'k'], 'dtype': 'float32'}}, " REF "}";
static const char bf16_mask_wl[] =
    "{'uuid': 'a', 'axes': {'b': 2, 'h': 4, 'q': 6, 'k': 40}, 'inputs': {'x': {'type': 'random'}, "
    "'mask': {'type': 'random'}, 'scale': {'type': 'scalar', 'value': 0.125}}}\n"
    "{'uuid': 'b', 'axes': {'b': 1, 'h': 2, 'q': 3, 'k': 520}, 'inputs': {'x': {'type': "
    "'random'}, 'mask': {'type': 'random'}, 'scale': {'type': 'scalar', 'value': 0.125}}}\n";

/* all float16: a 0-d scale tensor and a mask [s, k] broadcast over n */
static const char f16_mask_def[] =
    "{'name': 'f16_mask', 'op_type': 'softmax', 'axes': {'n': {'type': 'var'}, 's': {'type': "
    "'const', 'value': 5}, 'k': {'type': 'var'}}, 'inputs': {'x': {'shape': ['n', 's', 'k'], "
    "'dtype': 'float16'}, 'mask': {'shape': ['s', 'k'], 'dtype': 'float16'}, 'scale': {'shape': "
    "[], 'dtype': 'float16'}}, 'outputs': {'y': {'shape': ['n', 's', 'k'], 'dtype': "
    "'float16'}}, " REF "}";
static const char f16_mask_wl[] =
    "{'uuid': 'a', 'axes': {'n': 3, 'k': 64}, 'inputs': {'x': {'type': 'random'}, 'mask': "
    "{'type': 'random'}, 'scale': {'type': 'scalar', 'value': 0.3}}}\n";

/* a captured aten::_softmax on few long rows */
static const char long_def[] =
    "{'name': 'long', 'op_type': '_softmax', 'axes': {'n3': {'type': 'const', 'value': 3}, "
    "'n24576': {'type': 'const', 'value': 24576}}, 'inputs': {'self': {'shape': ['n3', "
    "'n24576'], 'dtype': 'float32'}}, 'outputs': {'out0': {'shape': ['n3', 'n24576'], 'dtype': "
    "'float32'}}, " REF
    ", 'kiln': {'kind': 'aten', 'aten': 'aten::_softmax.default', 'args': {'args': [{'tensor': "
    "0}, -1, false], 'kwargs': {}}, 'layouts': {'self': {'stored': 'contiguous'}, 'out0': "
    "{'stored': 'contiguous'}}}}";
static const char one_wl[] = "{'uuid': 'a', 'axes': {}, 'inputs': {'self': {'type': 'random'}}}\n";

/* many short rows */
static const char many_def[] =
    "{'name': 'many', 'op_type': 'softmax', 'axes': {'rows': {'type': 'var'}, 'cols': {'type': "
    "'var'}}, 'inputs': {'x': {'shape': ['rows', 'cols'], 'dtype': 'float32'}}, 'outputs': {'y': "
    "{'shape': ['rows', 'cols'], 'dtype': 'float32'}}, " REF "}";
static const char many_wl[] =
    "{'uuid': 'a', 'axes': {'rows': 2000, 'cols': 24}, 'inputs': {'x': {'type': 'random'}}}\n"
    "{'uuid': 'b', 'axes': {'rows': 8192, 'cols': 256}, 'inputs': {'x': {'type': 'random'}}}\n";

/* one row: a 1-d tensor */
static const char vec_def[] =
    "{'name': 'vec', 'op_type': 'softmax', 'axes': {'n': {'type': 'var'}}, 'inputs': {'x': "
    "{'shape': ['n'], 'dtype': 'bfloat16'}}, 'outputs': {'y': {'shape': ['n'], 'dtype': "
    "'bfloat16'}}, " REF "}";
static const char vec_wl[] =
    "{'uuid': 'a', 'axes': {'n': 1000}, 'inputs': {'x': {'type': 'random'}}}\n";

/* float32 x + a float32 mask of x's shape, rows of 7, 33 and 4097 elements: the masked rows of
 * masked_inputs (-inf and finfo.min prefixes and suffixes, fully masked rows) */
static const char masked_def[] =
    "{'name': 'masked', 'op_type': 'softmax', 'axes': {'rows': {'type': 'var'}, 'cols': {'type': "
    "'var'}}, 'inputs': {'x': {'shape': ['rows', 'cols'], 'dtype': 'float32'}, 'mask': {'shape': "
    "['rows', 'cols'], 'dtype': 'float32'}}, 'outputs': {'y': {'shape': ['rows', 'cols'], "
    "'dtype': 'float32'}}, " REF "}";
static const char masked_wl[] =
    "{'uuid': 'a', 'axes': {'rows': 12, 'cols': 7}, 'inputs': {'x': {'type': 'random'}, 'mask': "
    "{'type': 'random'}}}\n"
    "{'uuid': 'b', 'axes': {'rows': 12, 'cols': 33}, 'inputs': {'x': {'type': 'random'}, "
    "'mask': {'type': 'random'}}}\n"
    "{'uuid': 'c', 'axes': {'rows': 12, 'cols': 4097}, 'inputs': {'x': {'type': 'random'}, "
    "'mask': {'type': 'random'}}}\n";

/* Gemma-like attention probabilities: bf16 scores whose causal half is bf16's finfo.min (masked
 * before the softmax, as eager attention does), softmax(x, dtype=float32) */
static const char causal_def[] =
    "{'name': 'causal', 'op_type': 'softmax', 'axes': {'h': {'type': 'var'}, 'q': {'type': "
    "'var'}, 'k': {'type': 'var'}}, 'inputs': {'x': {'shape': ['h', 'q', 'k'], 'dtype': "
    "'bfloat16'}}, 'outputs': {'y': {'shape': ['h', 'q', 'k'], 'dtype': 'float32'}}, " REF "}";
static const char causal_wl[] =
    "{'uuid': 'a', 'axes': {'h': 2, 'q': 8, 'k': 4096}, 'inputs': {'x': {'type': 'random'}}}\n"
    "{'uuid': 'b', 'axes': {'h': 1, 'q': 5, 'k': 520}, 'inputs': {'x': {'type': 'random'}}}\n";

/* ---- tests ---- */

static void test_family_table(void **state) {
    (void)state;
    assert_non_null(fam);
    assert_string_equal(fam->name, "softmax");
    assert_true(fam->n_params >= 6 && fam->n_params <= KILN_FAMILY_MAX_PARAMS);
    for (int i = 0; i < fam->n_params; i++) {
        const kiln_family_param *q = &fam->params[i];
        assert_true(strncmp(q->name, "SMX_", 4) == 0); /* cannot collide with tensor names */
        assert_true(q->n_values >= 2 && q->n_values <= KILN_FAMILY_MAX_VALUES);
        assert_true(q->doc && q->doc[0]);
    }
    assert_non_null(kiln_family_template("softmax.cu"));
    assert_non_null(kiln_family_template("softmax_cpu.c"));
}

static void test_matcher_accepts(void **state) {
    (void)state;
    expect_match(f32_odd_def, f32_odd_wl, "softmax", "rows", "cols");
    expect_match(bf16_chain_def, bf16_chain_wl, "softmax", "b*h*q", "k");
    expect_match(f16_f32_def, f16_f32_wl, "softmax_cast", "rows", "cols");
    expect_match(bf16_mask_def, bf16_mask_wl, "softmax_scale_mask_cast", "b*h*q", "k");
    expect_match(f16_mask_def, f16_mask_wl, "softmax_scale_mask", "n*s", "k");
    expect_match(long_def, one_wl, "softmax", "n3", "n24576");
    expect_match(vec_def, vec_wl, "softmax", "1", "n");
    /* the dim written as ndim - 1, and the softmax.int overload */
    expect_match(
        "{'name': 'a', 'axes': {'n2': {'type': 'const', 'value': 2}, 'n9': {'type': "
        "'const', 'value': 9}}, 'inputs': {'self': {'shape': ['n2', 'n9'], 'dtype': "
        "'bfloat16'}}, 'outputs': {'out0': {'shape': ['n2', 'n9'], 'dtype': 'bfloat16'}}, " REF
        ", 'kiln': {'kind': 'aten', 'aten': 'aten::softmax.int', 'args': {'args': "
        "[{'tensor': 0}, 1, null], 'kwargs': {}}}}",
        one_wl, "softmax", "n2", "n9");
    /* stored in memory order, the softmax dim innermost: rows are still rows */
    expect_match("{'name': 'p', 'axes': {'a': {'type': 'const', 'value': 3}, 'b': {'type': "
                 "'const', 'value': 4}, 'c': {'type': 'const', 'value': 64}}, 'inputs': {'self': "
                 "{'shape': ['a', 'b', 'c'], 'dtype': 'float32'}}, 'outputs': {'out0': {'shape': "
                 "['a', 'b', 'c'], 'dtype': 'float32'}}, " REF
                 ", 'kiln': {'kind': 'aten', 'aten': 'aten::_softmax.default', 'args': {'args': "
                 "[{'tensor': 0}, -1, false], 'kwargs': {}}, 'layouts': {'self': {'stored': "
                 "'memory_order', 'permute': [1, 0, 2]}, 'out0': {'stored': 'memory_order', "
                 "'permute': [1, 0, 2]}}}}",
                 one_wl, "softmax", "a*b", "c");
    /* a leaf module: the dim and the casts are read from its reference */
    expect_match("{'name': 'm', 'axes': {'n': {'type': 'const', 'value': 10}, 'k': {'type': "
                 "'const', 'value': 80}}, 'inputs': {'input0': {'shape': ['n', 'k'], 'dtype': "
                 "'bfloat16'}}, 'outputs': {'out0': {'shape': ['n', 'k'], 'dtype': 'bfloat16'}}, "
                 "'reference': 'def run(input0):\\n    v0 = "
                 "torch.ops.aten._to_copy.default(input0, dtype=torch.float32)\\n    v1 = "
                 "torch.ops.aten._softmax.default(v0, -1, False)\\n    return "
                 "torch.ops.aten._to_copy.default(v1, dtype=torch.bfloat16)\\n', 'kiln': {'kind': "
                 "'module', 'module_class': 'Probs'}}",
                 "{'uuid': 'a', 'axes': {}, 'inputs': {'input0': {'type': 'random'}}}\n", "softmax",
                 "n", "k");
}

/* The roundings eager PyTorch implies, as match facts. */
static void expect_rounding(const char *def, const char *wl, int scaled, int masked, int result) {
    prob pr;
    load(&pr, def, wl);
    if (!pr.matched)
        fail_msg("declined: %s", pr.why);
    assert_int_equal((int)kiln_match_get(&pr.m, "round_scaled", -9), scaled);
    assert_int_equal((int)kiln_match_get(&pr.m, "round_masked", -9), masked);
    assert_int_equal((int)kiln_match_get(&pr.m, "round_result", -9), result);
    unload(&pr);
}

static void test_matcher_roundings(void **state) {
    (void)state;
    /* bf16 * scale rounds to bf16; + float32 mask promotes to float32: no rounding there */
    expect_rounding(bf16_mask_def, bf16_mask_wl, 1, -1, -1);
    /* float16 throughout: both round to float16 */
    expect_rounding(f16_mask_def, f16_mask_wl, 2, 2, -1);
    /* no scale, no mask, the softmax in float32 */
    expect_rounding(bf16_chain_def, bf16_chain_wl, -1, -1, -1);
    /* a chain capture joined (docs/capture.md "Chain problems"): inputs named input0, input1, the
     * mask found by its place in the add, softmax.int's dtype and to.dtype as the casts; bf16 * 1.0
     * and + bf16 mask both round to bf16 */
    expect_match(gemma_chain_def, gemma_chain_wl, "softmax_scale_mask", "n1*n2*n64", "n64");
    expect_rounding(gemma_chain_def, gemma_chain_wl, 1, 1, -1);
    /* softmax(x_bf16).float(): the result is a bf16 value before the cast */
    expect_rounding("{'name': 'r', 'axes': {'r': {'type': 'var'}}, 'inputs': {'x': {'shape': "
                    "['r', '72'], 'dtype': 'bfloat16'}}, 'outputs': {'y': {'shape': ['r', '72'], "
                    "'dtype': 'float32'}}, " REF
                    ", 'kiln': {'kind': 'chain', 'ops': [{'aten': 'aten::_softmax.default', "
                    "'args': [{'ref': 'x'}, -1, false], 'out': 'p'}, {'aten': "
                    "'aten::_to_copy.default', 'args': [{'ref': 'p'}], 'kwargs': {'dtype': "
                    "'torch.float32'}, 'out': 'y'}]}}",
                    "{'uuid': 'a', 'axes': {'r': 3}, 'inputs': {'x': {'type': 'random'}}}\n", -1,
                    -1, 1);
    /* softmax.int with dtype=float32 on bf16: the cast comes first, nothing is rounded to bf16 */
    expect_rounding("{'name': 'i', 'axes': {'n2': {'type': 'const', 'value': 2}, 'n9': {'type': "
                    "'const', 'value': 9}}, 'inputs': {'self': {'shape': ['n2', 'n9'], 'dtype': "
                    "'bfloat16'}}, 'outputs': {'out0': {'shape': ['n2', 'n9'], 'dtype': "
                    "'float32'}}, " REF
                    ", 'kiln': {'kind': 'aten', 'aten': 'aten::softmax.int', 'args': {'args': "
                    "[{'tensor': 0}, -1, 'torch.float32'], 'kwargs': {}}}}",
                    one_wl, -1, -1, -1);
    /* _softmax on bf16 written to a float32 output (no cast recorded): rounded to bf16 first */
    expect_rounding("{'name': 'j', 'axes': {'n2': {'type': 'const', 'value': 2}, 'n9': {'type': "
                    "'const', 'value': 9}}, 'inputs': {'self': {'shape': ['n2', 'n9'], 'dtype': "
                    "'bfloat16'}}, 'outputs': {'out0': {'shape': ['n2', 'n9'], 'dtype': "
                    "'float32'}}, " REF
                    ", 'kiln': {'kind': 'aten', 'aten': 'aten::softmax.int', 'args': {'args': "
                    "[{'tensor': 0}, -1, null], 'kwargs': {}}}}",
                    one_wl, -1, -1, 1);
    /* eltwise's chain form ("ops" objects): the cast's dtype is read */
    expect_rounding("{'name': 'e', 'axes': {'r': {'type': 'var'}}, 'inputs': {'x': {'shape': "
                    "['r', '72'], 'dtype': 'bfloat16'}}, 'outputs': {'y': {'shape': ['r', '72'], "
                    "'dtype': 'float32'}}, " REF
                    ", 'kiln': {'kind': 'chain', 'ops': [{'aten': 'aten::_to_copy.default', "
                    "'args': [{'ref': 'x'}], 'kwargs': {'dtype': 'torch.float32'}, 'out': 'xf'}, "
                    "{'aten': 'aten::_softmax.default', 'args': [{'ref': 'xf'}, -1, false], "
                    "'out': 'y'}]}}",
                    "{'uuid': 'a', 'axes': {'r': 3}, 'inputs': {'x': {'type': 'random'}}}\n", -1,
                    -1, -1);
    /* a cast first: the scale and the mask work in float32 */
    expect_rounding(
        "{'name': 'c', 'axes': {'r': {'type': 'var'}}, 'inputs': {'x': {'shape': "
        "['r', '72'], 'dtype': 'bfloat16'}, 'mask': {'shape': ['r', '72'], 'dtype': "
        "'bfloat16'}}, 'outputs': {'y': {'shape': ['r', '72'], 'dtype': 'bfloat16'}}, " REF
        ", 'kiln': {'kind': 'chain', 'ops': [{'aten': 'aten::_to_copy.default', 'args': [{'ref': "
        "'x'}], 'kwargs': {'dtype': 'torch.float32'}, 'out': 'v0'}, {'aten': 'aten::mul.Tensor', "
        "'args': [{'ref': 'v0'}, 0.5], 'out': 'v1'}, {'aten': 'aten::add.Tensor', 'args': "
        "[{'ref': 'v1'}, {'ref': 'mask'}], 'out': 'v2'}, {'aten': 'aten::_softmax.default', "
        "'args': [{'ref': 'v2'}, -1, false], 'out': 'v3'}, {'aten': 'aten::_to_copy.default', "
        "'args': [{'ref': 'v3'}], 'kwargs': {'dtype': 'torch.bfloat16'}, 'out': 'y'}]}}",
        "{'uuid': 'a', 'axes': {'r': 3}, 'inputs': {'x': {'type': 'random'}, 'mask': "
        "{'type': 'random'}}}\n",
        -1, -1, -1);
}

static void test_matcher_declines(void **state) {
    (void)state;
    const char *aten_def =
        "{'name': 'a', 'axes': {'a': {'type': 'const', 'value': 4}, 'b': "
        "{'type': 'const', 'value': 8}, 'c': {'type': 'const', 'value': 16}}, "
        "'inputs': {'self': {'shape': ['a', 'b', 'c'], 'dtype': 'float32'}}, "
        "'outputs': {'out0': {'shape': ['a', 'b', 'c'], 'dtype': 'float32'}}, " REF
        ", 'kiln': {'kind': 'aten', 'aten': '%s', 'args': {'args': [{'tensor': "
        "0}, %d, false], 'kwargs': {}}%s}}";
    char def[2048];
    snprintf(def, sizeof def, aten_def, "aten::_log_softmax.default", -1, "");
    expect_decline(def, one_wl, "log_softmax");
    snprintf(def, sizeof def, aten_def, "aten::_safe_softmax.default", -1, "");
    expect_decline(def, one_wl, "fully masked");
    snprintf(def, sizeof def, aten_def, "aten::_softmax.default", 1, "");
    expect_decline(def, one_wl, "dim 1");
    snprintf(def, sizeof def, aten_def, "aten::_softmax.default", -1,
             ", 'layouts': {'self': {'stored': 'memory_order', 'permute': [0, 2, 1]}}");
    expect_decline(def, one_wl, "not innermost");
    snprintf(def, sizeof def, aten_def, "aten::_softmax.default", -1,
             ", 'layouts': {'self': {'stored': 'memory_order', 'expand': [4, 8, 16]}}");
    expect_decline(def, one_wl, "broadcast");
    snprintf(def, sizeof def, aten_def, "aten::_softmax.default", -1,
             ", 'layouts': {'self': {'stored': 'memory_order', 'permute': [1, 0, 2]}}");
    expect_decline(def, one_wl, "different memory orders");
    snprintf(def, sizeof def, aten_def, "aten::relu.default", -1, "");
    expect_decline(def, one_wl, "not aten::_softmax");
    /* unsupported dtype */
    expect_decline("{'name': 'd', 'op_type': 'softmax', 'axes': {'n': {'type': 'var'}}, 'inputs': "
                   "{'x': {'shape': ['n', '8'], 'dtype': 'float64'}}, 'outputs': {'y': {'shape': "
                   "['n', '8'], 'dtype': 'float64'}}, " REF "}",
                   "{'uuid': 'a', 'axes': {'n': 2}, 'inputs': {'x': {'type': 'random'}}}\n",
                   "float32, bfloat16 and float16");
    /* a boolean mask is masked_fill, not an additive mask */
    expect_decline("{'name': 'b', 'op_type': 'softmax', 'axes': {'n': {'type': 'var'}}, 'inputs': "
                   "{'x': {'shape': ['n', '8'], 'dtype': 'float32'}, 'mask': {'shape': ['n', '8'], "
                   "'dtype': 'bool'}}, 'outputs': {'y': {'shape': ['n', '8'], 'dtype': "
                   "'float32'}}, " REF "}",
                   "{'uuid': 'a', 'axes': {'n': 2}, 'inputs': {'x': {'type': 'random'}, 'mask': "
                   "{'type': 'random'}}}\n",
                   "float tensor mask");
    /* a mask that does not broadcast along the softmax dim */
    expect_decline("{'name': 'b', 'op_type': 'softmax', 'axes': {'n': {'type': 'var'}}, 'inputs': "
                   "{'x': {'shape': ['n', '8'], 'dtype': 'float32'}, 'mask': {'shape': ['n', '1'], "
                   "'dtype': 'float32'}}, 'outputs': {'y': {'shape': ['n', '8'], 'dtype': "
                   "'float32'}}, " REF "}",
                   "{'uuid': 'a', 'axes': {'n': 2}, 'inputs': {'x': {'type': 'random'}, 'mask': "
                   "{'type': 'random'}}}\n",
                   "does not broadcast");
    /* two outputs, two tensor inputs, another op_type */
    expect_decline("{'name': 'o', 'op_type': 'softmax', 'axes': {'n': {'type': 'var'}}, 'inputs': "
                   "{'x': {'shape': ['n'], 'dtype': 'float32'}}, 'outputs': {'y': {'shape': ['n'], "
                   "'dtype': 'float32'}, 'z': {'shape': ['n'], 'dtype': 'float32'}}, " REF "}",
                   "{'uuid': 'a', 'axes': {'n': 2}, 'inputs': {'x': {'type': 'random'}}}\n",
                   "2 outputs");
    expect_decline("{'name': 'o', 'op_type': 'softmax', 'axes': {'n': {'type': 'var'}}, 'inputs': "
                   "{'x': {'shape': ['n'], 'dtype': 'float32'}, 'w': {'shape': ['n'], 'dtype': "
                   "'float32'}}, 'outputs': {'y': {'shape': ['n'], 'dtype': 'float32'}}, " REF "}",
                   "{'uuid': 'a', 'axes': {'n': 2}, 'inputs': {'x': {'type': 'random'}, 'w': "
                   "{'type': 'random'}}}\n",
                   "one tensor");
    expect_decline("{'name': 'l', 'op_type': 'layernorm', 'axes': {'n': {'type': 'var'}}, "
                   "'inputs': {'x': {'shape': ['n'], 'dtype': 'float32'}}, 'outputs': {'y': "
                   "{'shape': ['n'], 'dtype': 'float32'}}, " REF "}",
                   "{'uuid': 'a', 'axes': {'n': 2}, 'inputs': {'x': {'type': 'random'}}}\n",
                   "op_type layernorm");
    /* a module that does more than cast and softmax; a chain with an op it does not know */
    expect_decline("{'name': 'm', 'axes': {'n': {'type': 'const', 'value': 4}}, 'inputs': "
                   "{'input0': {'shape': ['n'], 'dtype': 'float32'}}, 'outputs': {'out0': "
                   "{'shape': ['n'], 'dtype': 'float32'}}, 'reference': 'def run(input0):\\n    v0 "
                   "= torch.ops.aten.mul.Tensor(input0, 2)\\n    return "
                   "torch.ops.aten._softmax.default(v0, -1, False)\\n', 'kiln': {'kind': "
                   "'module', 'module_class': 'Scaled'}}",
                   "{'uuid': 'a', 'axes': {}, 'inputs': {'input0': {'type': 'random'}}}\n",
                   "not a cast or a softmax");
    expect_decline("{'name': 'c', 'axes': {'n': {'type': 'var'}}, 'inputs': {'x': {'shape': ['n', "
                   "'8'], 'dtype': 'float32'}}, 'outputs': {'y': {'shape': ['n', '8'], 'dtype': "
                   "'float32'}}, " REF
                   ", 'kiln': {'kind': 'chain', 'ops': [{'aten': 'aten::exp.default', 'args': "
                   "[{'ref': 'x'}], 'out': 'e'}, {'aten': 'aten::_softmax.default', 'args': "
                   "[{'ref': 'e'}, -1, false], 'out': 'y'}]}}",
                   "{'uuid': 'a', 'axes': {'n': 2}, 'inputs': {'x': {'type': 'random'}}}\n",
                   "not a cast, scale, mask add or softmax");
    expect_decline(
        "{'name': 'c', 'axes': {'n': {'type': 'var'}}, 'inputs': {'x': {'shape': ['n', "
        "'8'], 'dtype': 'float32'}}, 'outputs': {'y': {'shape': ['n', '8'], 'dtype': "
        "'float32'}}, " REF ", 'kiln': {'kind': 'chain', 'ops': [{'aten': 'aten::mul.Tensor', "
        "'args': [{'ref': 'x'}, {'ref': 'x'}], 'out': 's'}, {'aten': 'aten::_softmax.default', "
        "'args': [{'ref': 's'}, -1, false], 'out': 'y'}]}}",
        "{'uuid': 'a', 'axes': {'n': 2}, 'inputs': {'x': {'type': 'random'}}}\n", "not one scale");
}

/* check() on a point given by name=value pairs over a default point. */
static const char *check_point(prob *pr, const char *settings, int64_t *pt_out) {
    int64_t pt[KILN_FAMILY_MAX_PARAMS];
    kiln_family_point(fam, 0, pt);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", settings);
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        assert_non_null(eq);
        *eq = 0;
        int found = 0;
        for (int i = 0; i < fam->n_params; i++)
            if (strcmp(fam->params[i].name, tok) == 0) {
                pt[i] = atoll(eq + 1);
                found = 1;
            }
        assert_true(found);
    }
    if (pt_out)
        memcpy(pt_out, pt, sizeof pt);
    return fam->check(pr->p, &pr->m, pt);
}

static void expect_reject(prob *pr, const char *settings, const char *reason_part) {
    const char *bad = check_point(pr, settings, NULL);
    if (!bad)
        fail_msg("%s accepted; expected a rejection with '%s'", settings, reason_part);
    const char *text = bad[0] == '!' ? bad + 1 : bad;
    if (!strstr(text, reason_part))
        fail_msg("%s rejected with '%s', expected '%s'", settings, text, reason_part);
    if (bad[0] == '!')
        free((void *)bad);
}

static void expect_accept(prob *pr, const char *settings) {
    const char *bad = check_point(pr, settings, NULL);
    if (bad) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", bad[0] == '!' ? bad + 1 : bad);
        if (bad[0] == '!')
            free((void *)bad);
        fail_msg("%s rejected: %s", settings, msg);
    }
}

static void test_check(void **state) {
    (void)state;
    prob odd, longp, chain, many;
    load(&odd, f32_odd_def, f32_odd_wl);
    load(&longp, long_def, one_wl);
    load(&chain, bf16_chain_def, bf16_chain_wl);
    load(&many, many_def, many_wl);
    assert_true(odd.matched && longp.matched && chain.matched && many.matched);
    /* the defaults: a warp per row, in registers */
    expect_accept(&chain, "");
    expect_accept(&odd, "SMX_CACHE=0 SMX_TPR=32 SMX_THREADS=1024");
    expect_accept(&longp, "SMX_SPLIT=8 SMX_THREADS=1024 SMX_TPR=1024 SMX_CACHE=1");
    expect_accept(&longp, "SMX_SPLIT=16 SMX_THREADS=512 SMX_TPR=512 SMX_CACHE=2 SMX_ONLINE=0");
    expect_accept(&chain, "SMX_THREADS=512 SMX_TPR=512 SMX_PERSIST=1");
    expect_reject(&chain, "SMX_THREADS=128 SMX_TPR=256", "exceed the block");
    expect_reject(&odd, "SMX_VEC=8", "does not divide the row length 1 (workload 0)");
    expect_reject(&chain, "SMX_VEC=8", "same as SMX_VEC=0");
    expect_reject(&odd, "SMX_THREADS=64 SMX_TPR=32 SMX_CACHE=1", "floats per thread");
    expect_reject(&odd, "SMX_SPLIT=2 SMX_CACHE=0 SMX_TPR=64 SMX_THREADS=64", "no columns");
    expect_reject(&many, "SMX_THREADS=256 SMX_TPR=32 SMX_SPLIT=2", "fill the GPU");
    expect_reject(&odd, "SMX_THREADS=256 SMX_TPR=1 SMX_CACHE=0", "rows per block");
    expect_reject(&longp, "SMX_THREADS=512 SMX_TPR=128 SMX_CACHE=2", "shared memory");
    expect_reject(&longp, "SMX_THREADS=1024 SMX_TPR=1024 SMX_SPLIT=8 SMX_UNROLL=2", "UNROLL");
    expect_reject(&longp, "SMX_THREADS=1024 SMX_TPR=1024 SMX_SPLIT=8 SMX_PERSIST=1", "never caps");
    expect_reject(&longp, "SMX_THREADS=256 SMX_TPR=32 SMX_CACHE=0", "walk over");
    expect_reject(&chain, "SMX_THREADS=64 SMX_TPR=32 SMX_CACHE=0", "fits in registers");
    unload(&odd);
    unload(&longp);
    unload(&chain);
    unload(&many);
}

/* Every valid point (a deterministic sample of them) compiles for sm_90 and plans a legal launch
 * for every workload; the CPU source ignores the point. */
static void compile_problem(const char *name, const char *def, const char *wl, int *n_compiled) {
    prob pr;
    load(&pr, def, wl);
    if (!pr.matched)
        fail_msg("%s declined: %s", name, pr.why);
    int64_t space = kiln_family_space_size(fam);
    int64_t *valid = xmalloc(sizeof(int64_t) * (size_t)space);
    int64_t n_valid = 0;
    int64_t pt[KILN_FAMILY_MAX_PARAMS];
    for (int64_t i = 0; i < space; i++) {
        kiln_family_point(fam, i, pt);
        const char *bad = fam->check(pr.p, &pr.m, pt);
        if (!bad)
            valid[n_valid++] = i;
        else if (bad[0] == '!')
            free((void *)bad);
    }
    assert_true(n_valid > 0);
    int64_t step = (n_valid + COMPILE_QUOTA - 1) / COMPILE_QUOTA;
    char *cpu_first = NULL;
    for (int64_t k = 0; k < n_valid; k += step) {
        int64_t idx = k + step >= n_valid ? n_valid - 1 : k; /* the last one too */
        kiln_family_point(fam, valid[idx], pt);
        char *src = fam->emit(pr.p, &pr.m, pt, 1);
        assert_non_null(strstr(src, "family softmax"));
        kiln_abi abi;
        kiln_err err;
        if (kiln_abi_parse(src, 1, &abi, &err))
            fail_msg("%s point %lld: launch directives: %s", name, (long long)valid[idx], err.msg);
        for (int w = 0; w < pr.p->n_workloads; w++) {
            kiln_launch_plan plan;
            if (kiln_abi_plan(&abi, pr.p, &pr.p->workloads[w], &plan, &err))
                fail_msg("%s point %lld workload %d: %s", name, (long long)valid[idx], w, err.msg);
            assert_int_equal(plan.n_launches, 1);
            assert_int_equal(plan.launch[0].grid[0] % plan.launch[0].cluster[0], 0);
            assert_true(plan.launch[0].smem_bytes <= 232448);
        }
        kiln_abi_free(&abi);
        char *cubin = NULL, *log = NULL;
        size_t len = 0;
        if (kiln_cuda_compile_only(src, "sm_90", &cubin, &len, &log, &err)) {
            char *ps = kiln_family_point_str(fam, pt);
            fail_msg("%s point %lld (%s) does not compile: %s\n%.4000s", name,
                     (long long)valid[idx], ps, err.msg, log ? log : "");
        }
        (*n_compiled)++;
        free(cubin);
        free(log);
        free(src);
        char *cpu = fam->emit(pr.p, &pr.m, pt, 0);
        if (!cpu_first)
            cpu_first = cpu;
        else {
            assert_string_equal(cpu, cpu_first);
            free(cpu);
        }
    }
    printf("    %s: %lld valid points of %lld, %lld compiled\n", name, (long long)n_valid,
           (long long)space, (long long)((n_valid + step - 1) / step));
    free(cpu_first);
    free(valid);
    unload(&pr);
}

static void test_valid_points_compile(void **state) {
    (void)state;
    if (!kiln_cuda_have_nvrtc()) {
        printf("SKIP: no NVRTC here (the CUDA toolkit's libnvrtc): cannot compile for sm_90\n");
        skip();
    }
    int n = 0;
    double t0 = kiln_now_s();
    compile_problem("f32_odd", f32_odd_def, f32_odd_wl, &n);
    compile_problem("bf16_chain", bf16_chain_def, bf16_chain_wl, &n);
    compile_problem("f16_f32", f16_f32_def, f16_f32_wl, &n);
    compile_problem("bf16_mask", bf16_mask_def, bf16_mask_wl, &n);
    compile_problem("f16_mask", f16_mask_def, f16_mask_wl, &n);
    compile_problem("long", long_def, one_wl, &n);
    compile_problem("many", many_def, many_wl, &n);
    compile_problem("vec", vec_def, vec_wl, &n);
    printf("    %d compiles in %.1f s\n", n, kiln_now_s() - t0);
}

/* ---- the CUDA kernels' logic, run on the host ----
 * The emitted CUDA source runs on an emulator of threads, barriers, shuffles and clusters
 * (tests/data/families/softmax/emu: emu_rt.h, plus emu_hw.h in place of the template's hardware
 * section), compiled as C++ by emucc.sh for the cpu backend, and its outputs are compared with the
 * family's C emission (which test_family_softmax.py proves against PyTorch) on inputs with -inf
 * mask entries and fully masked rows. The points cover every code path: streaming, registers and
 * shared memory; two-pass and online; sub-warp, warp and multi-warp rows; clusters of 2 to 16 with
 * dead rows; persistent loops; masks, scales and eager roundings. */

#define EMU_DIR KILN_SOURCE_DIR "/tests/data/families/softmax/emu"
#define EMU_MAX_ELEMENTS 300000 /* workloads larger than this are not emulated (time) */

static void sb_cat(char **s, size_t *len, const char *piece, size_t n) {
    *s = xrealloc(*s, *len + n + 1);
    memcpy(*s + *len, piece, n);
    *len += n;
    (*s)[*len] = 0;
}

/* The value of `key=` on the launch line (up to the next space), or dflt. */
static char *launch_value(const char *line_start, const char *key, const char *dflt) {
    const char *eol = strchr(line_start, '\n');
    const char *k = strstr(line_start, key);
    if (!k || (eol && k > eol))
        return xstrdup(dflt);
    k += strlen(key);
    size_t n = strcspn(k, " \n");
    return xstrndup(k, n);
}

/* The emitted CUDA source as an emulated cpu candidate. */
static char *emu_candidate(const char *cuda) {
    const char *hb = strstr(cuda, "// ---- hardware: begin");
    const char *he = strstr(cuda, "// ---- hardware: end ----");
    const char *launch = strstr(cuda, "// kiln: launch kiln_softmax ");
    const char *entry_key =
        "extern \"C\" __global__ void __launch_bounds__(SMX_THREADS) kiln_softmax(";
    const char *entry = strstr(cuda, entry_key);
    assert_true(hb && he && launch && entry && hb < he && he < entry);
    const char *params = entry + strlen(entry_key);
    const char *params_end = strstr(params, ") {");
    assert_non_null(params_end);
    char *grid = launch_value(launch, "grid=", "1"), *block = launch_value(launch, "block=", "1");
    char *smem = launch_value(launch, "smem=", "0"),
         *cluster = launch_value(launch, "cluster=", "1");
    char *out = xstrdup("#include \"" EMU_DIR "/emu_rt.h\"\n");
    size_t len = strlen(out);
    /* everything before the hardware section, without the CUDA headers */
    for (const char *line = cuda; line < hb;) {
        const char *eol = strchr(line, '\n');
        size_t n = (size_t)(eol - line) + 1;
        if (strncmp(line, "#include <cuda_", 15) != 0)
            sb_cat(&out, &len, line, n);
        line += n;
    }
    const char *hw = "#include \"" EMU_DIR "/emu_hw.h\"\n";
    sb_cat(&out, &len, hw, strlen(hw));
    sb_cat(&out, &len, he, (size_t)(entry - he));
    const char *dev = "static void kiln_softmax_device(";
    sb_cat(&out, &len, dev, strlen(dev));
    sb_cat(&out, &len, params, strlen(params));
    /* the host entry: the same parameters, the grid run cluster by cluster */
    char *plist = xstrndup(params, (size_t)(params_end - params));
    char names[2048] = "";
    char *save = NULL;
    for (char *p = strtok_r(plist, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        const char *nm = p + strlen(p);
        while (nm > p && (nm[-1] == '_' || isalnum((unsigned char)nm[-1])))
            nm--;
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", names[0] ? ", " : "",
                 nm);
    }
    free(plist);
    char *wrapper =
        xasprintf("\nextern \"C\" void kiln_softmax(%.*s) {\n    emu_launch(%s, %s, %s, "
                  "%s, sizeof(smx_shared), [&]() { kiln_softmax_device(%s); });\n}\n",
                  (int)(params_end - params), params, grid, block, cluster, smem, names);
    sb_cat(&out, &len, wrapper, strlen(wrapper));
    free(wrapper);
    free(grid);
    free(block);
    free(smem);
    free(cluster);
    return out;
}

/* Deterministic normal draws. */
static double emu_normal(uint64_t *s) {
    double u[2];
    for (int i = 0; i < 2; i++) {
        *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
        u[i] = ((double)(*s >> 11) + 0.5) / 9007199254740992.0;
    }
    return sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]);
}

typedef struct {
    int n;
    void *host[16];
    size_t bytes[16];
} emu_tensors;

static size_t tensor_elems(const kiln_problem *p, const kiln_tensor_spec *t,
                           const kiln_workload *w) {
    int64_t shape[KILN_MAX_DIMS];
    return (size_t)kiln_tensor_shape(p, t, w, shape);
}

/* Inputs of workload w: x ~ 3 N(0, 1); a mask of 0 and -inf with its second row fully -inf (a
 * fully masked row of y, which must come out NaN); scale tensors 0.3. */
static void emu_inputs(const prob *pr, const kiln_workload *w, emu_tensors *in) {
    uint64_t seed = 12345;
    in->n = pr->p->n_inputs;
    for (int i = 0; i < pr->p->n_inputs; i++) {
        const kiln_tensor_spec *t = &pr->p->inputs[i];
        in->host[i] = NULL;
        in->bytes[i] = 0;
        if (t->is_scalar)
            continue;
        size_t n = tensor_elems(pr->p, t, w);
        in->bytes[i] = n * kiln_dtype_size(t->dtype);
        in->host[i] = xcalloc(1, in->bytes[i] + 16);
        int64_t shape[KILN_MAX_DIMS];
        kiln_tensor_shape(pr->p, t, w, shape);
        int64_t cols = t->ndim ? shape[t->ndim - 1] : 1;
        for (size_t e = 0; e < n; e++) {
            double v = 3.0 * emu_normal(&seed);
            if (i == pr->m.input_of_role[1])
                v = ((int64_t)e / cols == 1 || e % 5 == 3) ? -INFINITY : 0.0;
            else if (i == pr->m.input_of_role[2])
                v = 0.3;
            kiln_dtype_store(t->dtype, in->host[i], e, v);
        }
    }
}

#define F32_LOWEST (-3.4028234663852886e38)  /* torch.finfo(torch.float32).min */
#define BF16_LOWEST (-3.3895313892515355e38) /* torch.finfo(torch.bfloat16).min */

/* x as the [rows, cols] matrix the softmax sees: its row count and length in workload w. */
static void x_rows_cols(const prob *pr, const kiln_workload *w, int64_t *rows, int64_t *cols) {
    const kiln_tensor_spec *x = &pr->p->inputs[pr->m.input_of_role[0]];
    int64_t shape[KILN_MAX_DIMS];
    int64_t n = kiln_tensor_shape(pr->p, x, w, shape);
    *cols = x->ndim ? shape[x->ndim - 1] : 1;
    *rows = n / *cols;
}

/* Inputs of the masked problem: x ~ 3 N(0, 1) and a mask of x's shape that is, by row r % 12 (h
 * half the row): 0 0; 1-3 -inf prefixes of 1, h and all but the last entry; 4 -inf everywhere
 * (NaN); 5 a finfo.min prefix of h; 6 the same on scores of -1e32, whose sum overflows to -inf
 * in fp32; 7 finfo.min everywhere (finite logits: uniform); 8 a finfo.min suffix after the first
 * third (the causal mask); 9 a -inf suffix after h; 10 -inf for the first h, finfo.min for the
 * rest (uniform over the rest); 11 a shift of 1e4 (softmax(x + 1e4) = softmax(x)). */
static void masked_inputs(const prob *pr, const kiln_workload *w, emu_tensors *in) {
    emu_inputs(pr, w, in);
    int ix = pr->m.input_of_role[0], imask = pr->m.input_of_role[1];
    assert_true(imask >= 0 && pr->p->inputs[ix].dtype == KILN_F32 &&
                pr->p->inputs[imask].dtype == KILN_F32 && kiln_match_get(&pr->m, "mask_direct", 0));
    int64_t rows, cols;
    x_rows_cols(pr, w, &rows, &cols);
    float *x = in->host[ix], *mask = in->host[imask];
    const int64_t h = cols / 2;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float *xe = &x[r * cols + c], *k = &mask[r * cols + c];
            switch (r % 12) {
            case 0:
                *k = 0.0f;
                break;
            case 1:
            case 2:
            case 3: {
                const int64_t len = r % 12 == 1 ? 1 : r % 12 == 2 ? h : cols - 1;
                *k = c < len ? -INFINITY : 0.0f;
                break;
            }
            case 4:
                *k = -INFINITY;
                break;
            case 5:
                *k = c < h ? (float)F32_LOWEST : 0.0f;
                break;
            case 6:
                *xe = c < h ? -1e32f : *xe;
                *k = c < h ? (float)F32_LOWEST : 0.0f;
                break;
            case 7:
                *k = (float)F32_LOWEST;
                break;
            case 8:
                *k = c > cols / 3 ? (float)F32_LOWEST : 0.0f;
                break;
            case 9:
                *k = c >= h ? -INFINITY : 0.0f;
                break;
            case 10:
                *k = c < h ? -INFINITY : (float)F32_LOWEST;
                break;
            default:
                *k = 1e4f;
                break;
            }
        }
}

/* Inputs of the causal problem ([h, q, k] bf16 scores): row i of each head keeps its first
 * 1 + i * k / q scores (row 0 one score, as in a prefill) and the rest are bf16's finfo.min. */
static void causal_inputs(const prob *pr, const kiln_workload *w, emu_tensors *in) {
    emu_inputs(pr, w, in);
    const kiln_tensor_spec *x = &pr->p->inputs[pr->m.input_of_role[0]];
    assert_true(x->ndim == 3 && x->dtype == KILN_BF16);
    int64_t shape[KILN_MAX_DIMS];
    kiln_tensor_shape(pr->p, x, w, shape);
    const int64_t q = shape[1], k = shape[2];
    for (int64_t r = 0; r < shape[0] * q; r++)
        for (int64_t c = 1 + (r % q) * k / q; c < k; c++)
            kiln_dtype_store(KILN_BF16, in->host[pr->m.input_of_role[0]], (size_t)(r * k + c),
                             BF16_LOWEST);
}

/* The output y of workload w against PyTorch's softmax(x [+ mask], -1), computed here in double
 * from the float32 logits (x widened, plus the mask of x's shape): a row whose max is -inf is NaN;
 * an entry that is -inf, or finfo.min-like below a finite max, is exactly 0; the rest agree
 * within the default tolerance. Returns how many exact zeros were checked. */
static size_t expect_reference(const prob *pr, const kiln_workload *w, const emu_tensors *in,
                               const void *y, const char *what, int wi) {
    const int ix = pr->m.input_of_role[0], imask = pr->m.input_of_role[1];
    assert_true(pr->m.input_of_role[2] < 0 && !kiln_match_get(&pr->m, "has_scale", 0));
    assert_true(kiln_match_get(&pr->m, "round_masked", -1) == -1 &&
                kiln_match_get(&pr->m, "round_result", -1) == -1);
    assert_true(imask < 0 || kiln_match_get(&pr->m, "mask_direct", 0));
    const kiln_dtype ty = pr->p->outputs[0].dtype;
    const kiln_tolerance tol = kiln_tolerance_default(ty);
    int64_t rows, cols;
    x_rows_cols(pr, w, &rows, &cols);
    double *lg = xmalloc(sizeof(double) * (size_t)cols);
    size_t n_zero = 0;
    for (int64_t r = 0; r < rows; r++) {
        double m = -INFINITY, s = 0.0;
        for (int64_t c = 0; c < cols; c++) {
            const size_t e = (size_t)(r * cols + c);
            float v = (float)kiln_dtype_load(pr->p->inputs[ix].dtype, in->host[ix], e);
            if (imask >= 0)
                v += (float)kiln_dtype_load(pr->p->inputs[imask].dtype, in->host[imask], e);
            lg[c] = v;
            m = v > m ? v : m;
        }
        for (int64_t c = 0; c < cols; c++)
            s += exp(lg[c] - m);
        for (int64_t c = 0; c < cols; c++) {
            const size_t e = (size_t)(r * cols + c);
            const double a = kiln_dtype_load(ty, y, e);
            if (m == -INFINITY) {
                if (!isnan(a))
                    fail_msg("%s workload %d row %lld: a fully masked row, element %lld is %g, "
                             "expected NaN as in PyTorch",
                             what, wi, (long long)r, (long long)c, a);
            } else if (lg[c] - m < -1e30) {
                if (a != 0.0)
                    fail_msg("%s workload %d row %lld: masked element %lld (logit %g, max %g) is "
                             "%g, expected exactly 0",
                             what, wi, (long long)r, (long long)c, lg[c], m, a);
                n_zero++;
            } else {
                const double b = exp(lg[c] - m) / s;
                if (!(fabs(a - b) <= tol.atol + tol.rtol * fabs(b)))
                    fail_msg("%s workload %d row %lld: element %lld is %g, expected %g", what, wi,
                             (long long)r, (long long)c, a, b);
            }
        }
    }
    free(lg);
    return n_zero;
}

/* A source compiled on the cpu backend (KILN_CC selects the compiler). */
/* Runs a compiled source on workload w; the outputs land in out. */
static void emu_run(kiln_backend *be, const prob *pr, const module *em, const kiln_workload *w,
                    const emu_tensors *in, emu_tensors *out, const char *what) {
    kiln_err err;
    kiln_devptr ptr[16];
    double f64[64];
    float f32[64];
    int64_t i64[64];
    void *params[64];
    int k = 0;
    for (int i = 0; i < pr->p->n_inputs; i++, k++) {
        const kiln_tensor_spec *t = &pr->p->inputs[i];
        if (t->is_scalar) {
            double v = w->inputs[i].kind == KILN_INPUT_SCALAR ? w->inputs[i].scalar : 0.125;
            f32[k] = (float)v;
            f64[k] = v;
            params[k] = em->sig.p[k].kind == KILN_PARAM_F64 ? (void *)&f64[k] : (void *)&f32[k];
            continue;
        }
        assert_int_equal(be->ops->alloc(be, in->bytes[i], 0, &ptr[k], &err), KILN_OK);
        assert_int_equal(be->ops->upload(be, ptr[k], in->host[i], in->bytes[i], &err), KILN_OK);
        params[k] = &ptr[k];
    }
    out->n = pr->p->n_outputs;
    for (int o = 0; o < pr->p->n_outputs; o++, k++) {
        const kiln_tensor_spec *t = &pr->p->outputs[o];
        out->bytes[o] = tensor_elems(pr->p, t, w) * kiln_dtype_size(t->dtype);
        out->host[o] = xmalloc(out->bytes[o] + 16);
        assert_int_equal(be->ops->alloc(be, out->bytes[o], 0, &ptr[k], &err), KILN_OK);
        assert_int_equal(be->ops->memset8(be, ptr[k], 0xA5, out->bytes[o], &err), KILN_OK);
        params[k] = &ptr[k];
    }
    for (int a = 0; a < pr->p->n_axes; a++, k++) {
        i64[k] = w->axis_values[a];
        params[k] = &i64[k];
    }
    kiln_launch_plan plan;
    assert_int_equal(kiln_abi_plan(&em->abi, pr->p, w, &plan, &err), KILN_OK);
    if (be->ops->launch(be, em->mod, &plan, params, &err) || be->ops->sync(be, &err))
        fail_msg("%s: %s", what, err.msg);
    k = pr->p->n_inputs;
    for (int o = 0; o < pr->p->n_outputs; o++, k++) {
        assert_int_equal(be->ops->download(be, out->host[o], ptr[k], out->bytes[o], &err), KILN_OK);
        be->ops->free(be, ptr[k]);
    }
    for (int i = 0; i < pr->p->n_inputs; i++)
        if (!pr->p->inputs[i].is_scalar)
            be->ops->free(be, ptr[i]);
}

static void emu_free(emu_tensors *t) {
    for (int i = 0; i < t->n; i++)
        free(t->host[i]);
}

typedef void (*emu_fill_fn)(const prob *pr, const kiln_workload *w, emu_tensors *in);

/* Emulates the CUDA kernel of point `settings` on the inputs fill makes and compares it with the C
 * emission; with check_ref, both are also checked against PyTorch's semantics (expect_reference).
 */
static void emulate(kiln_backend *be, const char *name, const char *def, const char *wl,
                    const char *settings, emu_fill_fn fill, int check_ref) {
    prob pr;
    load(&pr, def, wl);
    assert_true(pr.matched);
    int64_t pt[KILN_FAMILY_MAX_PARAMS];
    const char *bad = check_point(&pr, settings, pt);
    if (bad)
        fail_msg("%s %s: the point is not valid: %s", name, settings,
                 bad[0] == '!' ? bad + 1 : bad);
    char *cuda = fam->emit(pr.p, &pr.m, pt, 1);
    char *emu_src = emu_candidate(cuda);
    char *c_src = fam->emit(pr.p, &pr.m, pt, 0);
    char what[256];
    snprintf(what, sizeof what, "%s [%s]", name, settings);
    module m_emu, m_c;
    compile_module(be, pr.p, emu_src, "sh " EMU_DIR "/emucc.sh", &m_emu, what);
    compile_module(be, pr.p, c_src, NULL, &m_c, what);
    int n_checked = 0;
    for (int wi = 0; wi < pr.p->n_workloads; wi++) {
        const kiln_workload *w = &pr.p->workloads[wi];
        if (tensor_elems(pr.p, &pr.p->outputs[0], w) > EMU_MAX_ELEMENTS)
            continue;
        emu_tensors in, out_emu, out_c;
        fill(&pr, w, &in);
        emu_run(be, &pr, &m_emu, w, &in, &out_emu, what);
        emu_run(be, &pr, &m_c, w, &in, &out_c, what);
        if (check_ref) {
            char what_c[300];
            snprintf(what_c, sizeof what_c, "%s (the C emission)", name);
            assert_true(expect_reference(&pr, w, &in, out_c.host[0], what_c, wi) > 0);
            assert_true(expect_reference(&pr, w, &in, out_emu.host[0], what, wi) > 0);
        }
        const kiln_tensor_spec *y = &pr.p->outputs[0];
        kiln_tolerance tol = kiln_tolerance_default(y->dtype);
        size_t n = tensor_elems(pr.p, y, w), n_nan = 0;
        for (size_t e = 0; e < n; e++) {
            double a = kiln_dtype_load(y->dtype, out_emu.host[0], e);
            double b = kiln_dtype_load(y->dtype, out_c.host[0], e);
            if (isnan(b)) {
                n_nan++;
                if (!isnan(a))
                    fail_msg("%s workload %d: element %zu is %g, expected NaN", what, wi, e, a);
            } else if (!(fabs(a - b) <= tol.atol + tol.rtol * fabs(b))) {
                fail_msg("%s workload %d: element %zu is %g, expected %g", what, wi, e, a, b);
            }
        }
        if (pr.m.input_of_role[1] >= 0)
            assert_true(n_nan > 0); /* the fully masked rows were there, and came out NaN */
        n_checked++;
        emu_free(&in);
        emu_free(&out_emu);
        emu_free(&out_c);
    }
    assert_true(n_checked > 0);
    be->ops->module_free(be, m_emu.mod);
    be->ops->module_free(be, m_c.mod);
    kiln_abi_free(&m_emu.abi);
    kiln_abi_free(&m_c.abi);
    free(cuda);
    free(emu_src);
    free(c_src);
    unload(&pr);
}

static void test_emulated_kernels(void **state) {
    (void)state;
    if (system("command -v ${CXX:-g++} >/dev/null 2>&1") != 0) {
        printf("SKIP: no C++ compiler (g++ or $CXX) to build the emulated kernels\n");
        skip();
    }
    kiln_backend *be = NULL;
    kiln_err err;
    assert_int_equal(kiln_backend_open("cpu", 0, &be, &err), KILN_OK);
    double t0 = kiln_now_s();
    static const struct {
        const char *name, *def, *wl, *settings;
    } pts[] = {
        {"f32_odd", f32_odd_def, f32_odd_wl,
         "SMX_TPR=32 SMX_THREADS=1024 SMX_CACHE=0 SMX_UNROLL=2"},
        {"f32_odd", f32_odd_def, f32_odd_wl, "SMX_TPR=1024 SMX_THREADS=1024 SMX_ONLINE=0"},
        {"f32_odd", f32_odd_def, f32_odd_wl, "SMX_TPR=128 SMX_THREADS=256 SMX_CACHE=2"},
        {"f32_odd", f32_odd_def, f32_odd_wl, "SMX_TPR=4 SMX_THREADS=64 SMX_CACHE=0 SMX_ONLINE=0"},
        {"bf16_mask", bf16_mask_def, bf16_mask_wl, "SMX_TPR=16 SMX_THREADS=128"},
        {"bf16_mask", bf16_mask_def, bf16_mask_wl,
         "SMX_TPR=8 SMX_THREADS=64 SMX_SPLIT=2 SMX_CACHE=2 SMX_ONLINE=0"},
        {"bf16_mask", bf16_mask_def, bf16_mask_wl, "SMX_TPR=16 SMX_THREADS=64 SMX_SPLIT=4"},
        {"f16_mask", f16_mask_def, f16_mask_wl,
         "SMX_TPR=4 SMX_THREADS=64 SMX_CACHE=2 SMX_UNROLL=2"},
        {"long", long_def, one_wl, "SMX_SPLIT=8 SMX_THREADS=256 SMX_TPR=256"},
        {"long", long_def, one_wl,
         "SMX_SPLIT=16 SMX_THREADS=128 SMX_TPR=128 SMX_CACHE=2 SMX_ONLINE=0"},
        {"long", long_def, one_wl,
         "SMX_SPLIT=2 SMX_THREADS=64 SMX_TPR=64 SMX_CACHE=0 SMX_UNROLL=4"},
        {"long", long_def, one_wl, "SMX_SPLIT=8 SMX_THREADS=256 SMX_TPR=128 SMX_ONLINE=0"},
        {"many", many_def, many_wl, "SMX_PERSIST=1 SMX_TPR=8 SMX_THREADS=64"},
        {"many", many_def, many_wl, "SMX_PERSIST=2 SMX_TPR=64 SMX_THREADS=128 SMX_ONLINE=0"},
        {"vec", vec_def, vec_wl, "SMX_TPR=128 SMX_THREADS=128"},
        {"f16_f32", f16_f32_def, f16_f32_wl, "SMX_TPR=32 SMX_THREADS=64"},
    };
    for (size_t i = 0; i < sizeof pts / sizeof pts[0]; i++)
        emulate(be, pts[i].name, pts[i].def, pts[i].wl, pts[i].settings, emu_inputs, 0);
    printf("    %zu points emulated in %.1f s\n", sizeof pts / sizeof pts[0], kiln_now_s() - t0);
    kiln_backend_close(be);
}

/* The C emission (any point: the cpu source ignores it) on the inputs fill makes, against PyTorch's
 * semantics (expect_reference). */
static void cpu_against_reference(kiln_backend *be, const char *name, const char *def,
                                  const char *wl, emu_fill_fn fill) {
    prob pr;
    load(&pr, def, wl);
    assert_true(pr.matched);
    int64_t pt[KILN_FAMILY_MAX_PARAMS];
    kiln_family_point(fam, 0, pt);
    char *c_src = fam->emit(pr.p, &pr.m, pt, 0);
    module m_c;
    compile_module(be, pr.p, c_src, NULL, &m_c, name);
    for (int wi = 0; wi < pr.p->n_workloads; wi++) {
        const kiln_workload *w = &pr.p->workloads[wi];
        emu_tensors in, out;
        fill(&pr, w, &in);
        emu_run(be, &pr, &m_c, w, &in, &out, name);
        assert_true(expect_reference(&pr, w, &in, out.host[0], name, wi) > 0);
        emu_free(&in);
        emu_free(&out);
    }
    be->ops->module_free(be, m_c.mod);
    kiln_abi_free(&m_c.abi);
    free(c_src);
    unload(&pr);
}

/* Rows with -inf and finfo.min entries, as attention masks make them (a causal mask of finfo.min
 * on Gemma's scores: the H200 gate found the online kernels NaN there while the two-pass ones were
 * right; max * log2(e) overflowed to -inf for a part whose max is finfo.min). First the C emission
 * alone, then every reduction path of the CUDA kernels, online and two-pass, each against PyTorch's
 * semantics: a thread, a chunk, a warp or a cluster block whose part of a row is all masked merges
 * as nothing, a row of finite finfo.min logits is uniform, a row of -inf is NaN, and masked
 * entries are exact zeros. */
static void test_masked_rows(void **state) {
    (void)state;
    kiln_backend *be = NULL;
    kiln_err err;
    assert_int_equal(kiln_backend_open("cpu", 0, &be, &err), KILN_OK);
    cpu_against_reference(be, "masked", masked_def, masked_wl, masked_inputs);
    cpu_against_reference(be, "causal", causal_def, causal_wl, causal_inputs);
    if (system("command -v ${CXX:-g++} >/dev/null 2>&1") != 0) {
        printf("SKIP: no C++ compiler (g++ or $CXX) to build the emulated kernels\n");
        kiln_backend_close(be);
        skip();
    }
    double t0 = kiln_now_s();
    static const struct {
        const char *name, *def, *wl, *settings;
        emu_fill_fn fill;
    } pts[] = {
        /* rows of 7, 33 and 4097: one element per vector */
        {"masked", masked_def, masked_wl, "SMX_TPR=64 SMX_THREADS=128", masked_inputs},
        {"masked", masked_def, masked_wl, "SMX_TPR=64 SMX_THREADS=128 SMX_ONLINE=0", masked_inputs},
        {"masked", masked_def, masked_wl, "SMX_TPR=32 SMX_THREADS=64 SMX_CACHE=0 SMX_UNROLL=2",
         masked_inputs},
        {"masked", masked_def, masked_wl,
         "SMX_TPR=32 SMX_THREADS=64 SMX_CACHE=0 SMX_UNROLL=2 SMX_ONLINE=0", masked_inputs},
        {"masked", masked_def, masked_wl, "SMX_TPR=8 SMX_THREADS=64 SMX_CACHE=0", masked_inputs},
        {"masked", masked_def, masked_wl, "SMX_TPR=128 SMX_THREADS=128 SMX_CACHE=2", masked_inputs},
        {"masked", masked_def, masked_wl, "SMX_SPLIT=4 SMX_TPR=32 SMX_THREADS=64", masked_inputs},
        {"masked", masked_def, masked_wl, "SMX_SPLIT=4 SMX_TPR=32 SMX_THREADS=64 SMX_ONLINE=0",
         masked_inputs},
        {"masked", masked_def, masked_wl, "SMX_SPLIT=2 SMX_TPR=64 SMX_THREADS=64 SMX_CACHE=2",
         masked_inputs},
        /* the Gemma row's shape: bf16 rows of 4096 in vectors of 8, causal finfo.min */
        {"causal", causal_def, causal_wl, "SMX_TPR=32 SMX_THREADS=64", causal_inputs},
        {"causal", causal_def, causal_wl, "SMX_TPR=32 SMX_THREADS=64 SMX_ONLINE=0", causal_inputs},
        {"causal", causal_def, causal_wl, "SMX_TPR=256 SMX_THREADS=512", causal_inputs},
        {"causal", causal_def, causal_wl, "SMX_SPLIT=2 SMX_TPR=32 SMX_THREADS=64", causal_inputs},
    };
    for (size_t i = 0; i < sizeof pts / sizeof pts[0]; i++)
        emulate(be, pts[i].name, pts[i].def, pts[i].wl, pts[i].settings, pts[i].fill, 1);
    printf("    %zu points emulated in %.1f s\n", sizeof pts / sizeof pts[0], kiln_now_s() - t0);
    kiln_backend_close(be);
}

static void test_speed_of_light(void **state) {
    (void)state;
    prob pr;
    load(&pr, bf16_mask_def, bf16_mask_wl);
    assert_true(pr.matched);
    const kiln_workload *w = &pr.p->workloads[0];
    /* x 2*4*6*40 bf16 + mask 6*40 f32 + y 2*4*6*40 f32: each tensor once */
    assert_true(fam->min_bytes(pr.p, &pr.m, w) == 1920 * 2 + 240 * 4 + 1920 * 4);
    assert_null(fam->flops); /* memory-bound: its bytes bind its speed of light */
    kiln_tolerance t = fam->tolerance(KILN_BF16), d = kiln_tolerance_default(KILN_BF16);
    assert_true(t.atol == d.atol && t.rtol == d.rtol && t.rel_l2 == d.rel_l2);
    unload(&pr);
}

int main(void) {
    fam = kiln_family_find("softmax");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_family_table),
        cmocka_unit_test(test_matcher_accepts),
        cmocka_unit_test(test_matcher_roundings),
        cmocka_unit_test(test_matcher_declines),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_speed_of_light),
        cmocka_unit_test(test_valid_points_compile),
        cmocka_unit_test(test_emulated_kernels),
        cmocka_unit_test(test_masked_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
