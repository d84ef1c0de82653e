/* test_family_match.c: problems parsed from memory (no directory, no file read after the parse)
 * matched against every family at once (kiln_family_match_all): each of the forms a problem can
 * say what it computes in — a captured aten call, a captured module's "ops", a hand-written chain,
 * the generated reference of an older capture, a hand-written op_type — is taken by exactly the
 * families expected, and declined by the others with a reason. The tensor-expression generator
 * ("gen") takes every problem that states its op chain and whose ops have lowering rules, beside
 * the hand-written family. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "gen/family.h"

typedef struct {
    const char *what;
    const char *def; /* JSON written with single quotes (C-friendly); every ' becomes " */
    const char *wl;
    const char *families; /* the families that must match, space-separated, in registry order */
} match_case;

static const match_case CASES[] = {
    {"captured _softmax",
     "{'name': 'a', 'axes': {'n8': {'type': 'const', 'value': 8}, 'n64': {'type': 'const', "
     "'value': 64}}, 'inputs': {'self': {'shape': ['n8', 'n64'], 'dtype': 'bfloat16'}}, "
     "'outputs': {'out0': {'shape': ['n8', 'n64'], 'dtype': 'bfloat16'}}, 'reference': 'def "
     "run(self): pass', 'kiln': {'kind': 'aten', 'aten': 'aten::_softmax.default', 'args': "
     "{'args': [{'tensor': 0}, -1, false], 'kwargs': {}}}}",
     "{'uuid': 'u', 'axes': {}, 'inputs': {'self': {'type': 'random'}}}", "softmax gen"},
    {"captured RMSNorm module (ops)",
     "{'name': 'm', 'axes': {'n4': {'type': 'const', 'value': 4}, 'n64': {'type': 'const', "
     "'value': 64}}, 'inputs': {'input0': {'shape': ['n4', 'n64'], 'dtype': 'bfloat16'}, "
     "'weight': {'shape': ['n64'], 'dtype': 'bfloat16'}}, 'outputs': {'out0': {'shape': ['n4', "
     "'n64'], 'dtype': 'bfloat16'}}, 'reference': 'def run(input0, weight): pass', 'kiln': "
     "{'kind': 'module', 'module_class': 'RMSNorm', 'ops': ["
     "{'aten': 'aten::to.dtype', 'args': [{'ref': 'input0'}, 'torch.float32'], 'out': 'v0'}, "
     "{'aten': 'aten::pow.Tensor_Scalar', 'args': [{'ref': 'v0'}, 2], 'out': 'v1'}, "
     "{'aten': 'aten::mean.dim', 'args': [{'ref': 'v1'}, [-1], true], 'out': 'v2'}, "
     "{'aten': 'aten::add.Tensor', 'args': [{'ref': 'v2'}, 1e-06], 'out': 'v3'}, "
     "{'aten': 'aten::rsqrt.default', 'args': [{'ref': 'v3'}], 'out': 'v4'}, "
     "{'aten': 'aten::mul.Tensor', 'args': [{'ref': 'v0'}, {'ref': 'v4'}], 'out': 'v5'}, "
     "{'aten': 'aten::to.dtype', 'args': [{'ref': 'weight'}, 'torch.float32'], 'out': 'v6'}, "
     "{'aten': 'aten::mul.Tensor', 'args': [{'ref': 'v5'}, {'ref': 'v6'}], 'out': 'v7'}, "
     "{'aten': 'aten::to.dtype', 'args': [{'ref': 'v7'}, 'torch.bfloat16'], 'out': 'v8'}], "
     "'outputs': ['v8']}}",
     "{'uuid': 'u', 'axes': {}, 'inputs': {'input0': {'type': 'random'}, 'weight': {'type': "
     "'random'}}}",
     "rmsnorm gen"},
    {"captured native_layer_norm with mean and rstd",
     "{'name': 'l', 'axes': {'n3': {'type': 'const', 'value': 3}, 'n32': {'type': 'const', "
     "'value': 32}}, 'inputs': {'input': {'shape': ['n3', 'n32'], 'dtype': 'float32'}, 'weight': "
     "{'shape': ['n32'], 'dtype': 'float32'}, 'bias': {'shape': ['n32'], 'dtype': 'float32'}}, "
     "'outputs': {'out0': {'shape': ['n3', 'n32'], 'dtype': 'float32'}, 'out1': {'shape': "
     "['n3', '1'], 'dtype': 'float32'}, 'out2': {'shape': ['n3', '1'], 'dtype': 'float32'}}, "
     "'reference': 'def run(input, weight, bias): pass', 'kiln': {'kind': 'aten', 'aten': "
     "'aten::native_layer_norm.default', 'args': {'args': [{'tensor': 0}, [32], {'tensor': 1}, "
     "{'tensor': 2}, 1e-05], 'kwargs': {}}}}",
     "{'uuid': 'u', 'axes': {}, 'inputs': {'input': {'type': 'random'}, 'weight': {'type': "
     "'random'}, 'bias': {'type': 'random'}}}",
     "layernorm gen"},
    {"hand-written group_norm -> silu chain",
     "{'name': 'g', 'axes': {'n1': {'type': 'const', 'value': 1}, 'n32': {'type': 'const', "
     "'value': 32}, 'n4': {'type': 'const', 'value': 4}}, 'inputs': {'input': {'shape': ['n1', "
     "'n32', 'n4', 'n4'], 'dtype': 'float32'}}, 'outputs': {'out0': {'shape': ['n1', 'n32', "
     "'n4', 'n4'], 'dtype': 'float32'}}, 'reference': 'def run(input): pass', 'kiln': {'kind': "
     "'chain', 'ops': [{'aten': 'aten::group_norm.default', 'args': [{'ref': 'input'}, 8, null, "
     "null, 1e-06], 'out': 'v0'}, {'aten': 'aten::silu.default', 'args': [{'ref': 'v0'}], "
     "'out': 'out0'}]}}",
     "{'uuid': 'u', 'axes': {}, 'inputs': {'input': {'type': 'random'}}}", "groupnorm gen"},
    {"captured inference batch_norm",
     "{'name': 'b', 'axes': {'n2': {'type': 'const', 'value': 2}, 'n8': {'type': 'const', "
     "'value': 8}, 'n5': {'type': 'const', 'value': 5}}, 'inputs': {'input': {'shape': ['n2', "
     "'n8', 'n5', 'n5'], 'dtype': 'float32'}, 'weight': {'shape': ['n8'], 'dtype': 'float32'}, "
     "'bias': {'shape': ['n8'], 'dtype': 'float32'}, 'running_mean': {'shape': ['n8'], 'dtype': "
     "'float32'}, 'running_var': {'shape': ['n8'], 'dtype': 'float32'}}, 'outputs': {'out0': "
     "{'shape': ['n2', 'n8', 'n5', 'n5'], 'dtype': 'float32'}}, 'reference': 'def run(input, "
     "weight, bias, running_mean, running_var): pass', 'kiln': {'kind': 'aten', 'aten': "
     "'aten::batch_norm.default', 'args': {'args': [{'tensor': 0}, {'tensor': 1}, {'tensor': "
     "2}, {'tensor': 3}, {'tensor': 4}, false, 0.1, 1e-05, true], 'kwargs': {}}}}",
     "{'uuid': 'u', 'axes': {}, 'inputs': {'input': {'type': 'random'}, 'weight': {'type': "
     "'random'}, 'bias': {'type': 'random'}, 'running_mean': {'type': 'random'}, 'running_var': "
     "{'type': 'random'}}}",
     "batchnorm gen"},
    {"captured mean over H and W, channels-last",
     "{'name': 'p', 'axes': {'n2': {'type': 'const', 'value': 2}, 'n16': {'type': 'const', "
     "'value': 16}, 'n7': {'type': 'const', 'value': 7}}, 'inputs': {'self': {'shape': ['n2', "
     "'n7', 'n7', 'n16'], 'dtype': 'bfloat16'}}, 'outputs': {'out0': {'shape': ['n2', 'n16', "
     "'1', '1'], 'dtype': 'bfloat16'}}, 'reference': 'def run(self): pass', 'kiln': {'kind': "
     "'aten', 'aten': 'aten::mean.dim', 'args': {'args': [{'tensor': 0}, [-1, -2], true], "
     "'kwargs': {}}, 'layouts': {'self': {'stored': 'memory_order', 'permute': [0, 2, 3, 1]}}}}",
     "{'uuid': 'u', 'axes': {}, 'inputs': {'self': {'type': 'random'}}}", "pool gen"},
    {"hand-written silu(gate) * up chain",
     "{'name': 'e', 'axes': {'n3': {'type': 'const', 'value': 3}, 'n40': {'type': 'const', "
     "'value': 40}}, 'inputs': {'gate': {'shape': ['n3', 'n40'], 'dtype': 'bfloat16'}, 'up': "
     "{'shape': ['n3', 'n40'], 'dtype': 'bfloat16'}}, 'outputs': {'out': {'shape': ['n3', "
     "'n40'], 'dtype': 'bfloat16'}}, 'reference': 'def run(gate, up): pass', 'kiln': {'kind': "
     "'chain', 'ops': [{'aten': 'aten::silu.default', 'args': [{'ref': 'gate'}], 'out': 'a'}, "
     "{'aten': 'aten::mul.Tensor', 'args': [{'ref': 'a'}, {'ref': 'up'}], 'out': 'out'}]}}",
     "{'uuid': 'u', 'axes': {}, 'inputs': {'gate': {'type': 'random'}, 'up': {'type': "
     "'random'}}}",
     "eltwise gen"},
    {"an older capture: a module read from its generated reference",
     "{'name': 'r', 'axes': {'n4': {'type': 'const', 'value': 4}, 'n80': {'type': 'const', "
     "'value': 80}}, 'inputs': {'input0': {'shape': ['n4', 'n80'], 'dtype': 'bfloat16'}}, "
     "'outputs': {'out0': {'shape': ['n4', 'n80'], 'dtype': 'bfloat16'}}, 'reference': 'def "
     "run(input0):\\n    v0 = torch.ops.aten._to_copy.default(input0, dtype=torch.float32)\\n"
     "    v1 = torch.ops.aten._softmax.default(v0, -1, False)\\n    v2 = "
     "torch.ops.aten._to_copy.default(v1, dtype=torch.bfloat16)\\n    return v2\\n', 'kiln': "
     "{'kind': 'module', 'module_class': 'Probs'}}",
     "{'uuid': 'u', 'axes': {}, 'inputs': {'input0': {'type': 'random'}}}", "softmax gen"},
    {"captured linear with bias",
     "{'name': 'g', 'axes': {'n8': {'type': 'const', 'value': 8}, 'n16': {'type': 'const', "
     "'value': 16}, 'n32': {'type': 'const', 'value': 32}}, 'inputs': {'x': {'shape': ['n8', "
     "'n32'], 'dtype': 'bfloat16'}, 'w': {'shape': ['n16', 'n32'], 'dtype': 'bfloat16'}, 'b': "
     "{'shape': ['n16'], 'dtype': 'bfloat16'}}, 'outputs': {'out0': {'shape': ['n8', 'n16'], "
     "'dtype': 'bfloat16'}}, 'reference': 'def run(x, w, b): pass', 'kiln': {'kind': 'aten', "
     "'aten': 'aten::linear.default', 'args': {'args': [{'tensor': 0}, {'tensor': 1}, {'tensor': "
     "2}], 'kwargs': {}}}}",
     "{'uuid': 'u', 'axes': {}, 'inputs': {'x': {'type': 'random'}, 'w': {'type': 'random'}, "
     "'b': {'type': 'random'}}}",
     "wgmma cublaslt"},
    {"hand-written rmsnorm (op_type, no \"kiln\" object)",
     "{'name': 'h', 'op_type': 'rmsnorm', 'axes': {'b': {'type': 'var'}, 'h': {'type': 'const', "
     "'value': 256}}, 'inputs': {'hidden_states': {'shape': ['b', 'h'], 'dtype': 'bfloat16'}, "
     "'weight': {'shape': ['h'], 'dtype': 'bfloat16'}}, 'outputs': {'output': {'shape': ['b', "
     "'h'], 'dtype': 'bfloat16'}}, 'reference': 'EPS = 1e-6\\ndef run(hidden_states, weight): "
     "pass'}",
     "{'uuid': 'u', 'axes': {'b': 3}, 'inputs': {'hidden_states': {'type': 'random'}, 'weight': "
     "{'type': 'random'}}}",
     "rmsnorm"},
};

/* The text with every ' turned into ". Caller frees. */
static char *dq(const char *s) {
    char *t = xstrdup(s);
    for (char *c = t; *c; c++)
        if (*c == '\'')
            *c = '"';
    return t;
}

static void test_match_all_from_memory(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const match_case *c = &CASES[i];
        kiln_problem *p = NULL;
        kiln_err err;
        char *def = dq(c->def), *wl = dq(c->wl);
        if (kiln_problem_parse(def, strlen(def), "definition", wl, strlen(wl), "workload", &p,
                               &err) != KILN_OK)
            fail_msg("%s: %s\n%s", c->what, err.msg, def);
        free(def);
        free(wl);
        const kiln_family *fams[16];
        kiln_match ms[16];
        char why[8192];
        int n = kiln_family_match_all(p, fams, ms, 16, why, sizeof why);
        char got[256] = "";
        for (int k = 0; k < n; k++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s", k ? " " : "",
                     fams[k]->name);
        if (strcmp(got, c->families) != 0)
            fail_msg("%s: matched by [%s], expected [%s]; declines:\n%s", c->what, got, c->families,
                     why);
        /* every other family said why it declined */
        int lines = 0;
        for (const char *s = why; (s = strchr(s, '\n')); s++)
            lines++;
        assert_int_equal(lines + n, kiln_family_count());
        for (int k = 0; k < n; k++)
            assert_true(ms[k].how[0] != 0 && ms[k].variant[0] != 0);
        kiln_problem_free(p);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_match_all_from_memory),
    };
    return cmocka_run_group_tests_name("family_match", tests, NULL, NULL);
}
