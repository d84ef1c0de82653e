/* chnorm.c: what the channel-normalisation families share (chnorm.h): the ops of their patterns,
 * shapes and layouts, and the emitters' helpers. The families themselves are groupnorm.c
 * (group_norm, with a fused SiLU as a variant) and batchnorm.c (inference batch_norm, with a fused
 * residual add and/or ReLU).
 *
 * Recognition. Both families match patterns on the problem's op chain (src/formats/opchain.h), so
 * that a captured call, a captured leaf module and a hand-written chain are one code path. Only the
 * ops the two families' patterns use have schemas here (the positions and keywords of their
 * parameters; an omitted one takes PyTorch's default in the pattern); a chain with any other op
 * declines at once with the op's name, which is the most useful reason sweep can print. Problems
 * without a chain are recognised by each family from op_type and input names. */
#include "chnorm.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * The ops of the patterns. */

/* Positional parameter names of the overloads the patterns use: keyword arguments are found by
 * these names, positional ones by their place. */
static const struct {
    const char *op;
    const char *params[CHN_MAX_ARGS];
} chn_schemas[] = {
    {"aten::group_norm.default", {"input", "num_groups", "weight", "bias", "eps", "cudnn_enabled"}},
    {"aten::native_group_norm.default",
     {"input", "weight", "bias", "N", "C", "HxW", "group", "eps"}},
    {"aten::batch_norm.default",
     {"input", "weight", "bias", "running_mean", "running_var", "training", "momentum", "eps",
      "cudnn_enabled"}},
    {"aten::_batch_norm_impl_index.default",
     {"input", "weight", "bias", "running_mean", "running_var", "training", "momentum", "eps",
      "cudnn_enabled"}},
    {"aten::native_batch_norm.default",
     {"input", "weight", "bias", "running_mean", "running_var", "training", "momentum", "eps"}},
    {"aten::_native_batch_norm_legit_no_training.default",
     {"input", "weight", "bias", "running_mean", "running_var", "momentum", "eps"}},
    {"aten::_batch_norm_no_update.default",
     {"input", "weight", "bias", "running_mean", "running_var", "momentum", "eps"}},
    {"aten::cudnn_batch_norm.default",
     {"input", "weight", "bias", "running_mean", "running_var", "training",
      "exponential_average_factor", "epsilon"}},
    {"aten::silu.default", {"self"}},
    {"aten::silu_.default", {"self"}},
    {"aten::sigmoid.default", {"self"}},
    {"aten::relu.default", {"self"}},
    {"aten::relu_.default", {"self"}},
    {"aten::mul.Tensor", {"self", "other"}},
    {"aten::add.Tensor", {"self", "other", "alpha"}},
    {"aten::add_.Tensor", {"self", "other", "alpha"}},
    {"aten::to.dtype", {"self", "dtype", "non_blocking", "copy", "memory_format"}},
    {"aten::_to_copy.default",
     {"self", "dtype", "layout", "device", "pin_memory", "non_blocking", "memory_format"}},
};

static int schema_of(const kiln_op *op) {
    for (size_t i = 0; i < sizeof chn_schemas / sizeof chn_schemas[0]; i++)
        if (kiln_op_is(op, chn_schemas[i].op))
            return (int)i;
    return -1;
}

int chn_chain_read(const kiln_problem *p, kiln_opchain **out, char *why, size_t wl) {
    kiln_err err;
    if (kiln_opchain_read(p, out, &err) != KILN_OK) {
        snprintf(why, wl, "%s", err.msg);
        return 0;
    }
    for (int k = 0; k < (*out)->n_ops; k++) {
        if (schema_of(&(*out)->ops[k]) < 0) {
            snprintf(why, wl, "op %s is not part of a channel-norm pattern", (*out)->ops[k].aten);
            kiln_opchain_free(*out);
            *out = NULL;
            return 0;
        }
    }
    return 1;
}

const kiln_arg *chn_arg(const kiln_op *op, const char *param) {
    int s = schema_of(op);
    KILN_ASSERT(s >= 0); /* chn_chain_read let only the patterns' ops through */
    for (int k = 0; k < CHN_MAX_ARGS && chn_schemas[s].params[k]; k++)
        if (strcmp(chn_schemas[s].params[k], param) == 0)
            return kiln_op_arg(op, k, param);
    return NULL;
}

int chn_has_param(const kiln_op *op, const char *param) {
    int s = schema_of(op);
    for (int k = 0; s >= 0 && k < CHN_MAX_ARGS && chn_schemas[s].params[k]; k++)
        if (strcmp(chn_schemas[s].params[k], param) == 0)
            return 1;
    return 0;
}

int chn_is_cast(const kiln_op *op) {
    return kiln_op_is(op, "aten::to.dtype") || kiln_op_is(op, "aten::_to_copy.default");
}

int chn_cast_dtype(const kiln_op *op) {
    const kiln_arg *a = chn_arg(op, "dtype");
    return a && a->kind == KILN_ARG_DTYPE && chn_is_float(a->dtype) ? (int)a->dtype : -1;
}

int chn_optional_input(const kiln_arg *a, int *input) {
    *input = kiln_arg_input(a);
    return *input >= 0 || !a || a->kind == KILN_ARG_NONE;
}

/* ---------------------------------------------------------------------------------------------
 * Shapes, layouts and expressions. */

int chn_is_float(kiln_dtype t) {
    return t == KILN_F32 || t == KILN_BF16 || t == KILN_F16;
}

/* 0 float32, 1 bfloat16, 2 float16: the templates' *_MID codes. */
int chn_mid_code(kiln_dtype t) {
    return t == KILN_BF16 ? 1 : t == KILN_F16 ? 2 : 0;
}

/* C (cpu) type, load-to-float and store-from-float spellings of a dtype. */
void chn_cpu_type_defines(kiln_strbuf *b, const char *prefix, const char *role, kiln_dtype t,
                          int store) {
    kiln_kernel_type k = kiln_dtype_kernel_type(t, 0);
    kiln_strbuf_printf(b, "#define %s_T%s %s\n", prefix, role, k.type);
    kiln_strbuf_printf(b, "#define %s_%s%s(v) %s(v)\n", prefix, store ? "S" : "L", role,
                       store ? k.from_float : k.to_float);
}

/* Sizes of tensor t in every workload must agree with dimension d of tensor u. */
int chn_same_dim(const kiln_problem *p, const kiln_tensor_spec *t, int dt,
                 const kiln_tensor_spec *u, int du) {
    for (int w = 0; w < p->n_workloads; w++) {
        int64_t a[KILN_MAX_DIMS], b[KILN_MAX_DIMS];
        kiln_tensor_shape(p, t, &p->workloads[w], a);
        kiln_tensor_shape(p, u, &p->workloads[w], b);
        if (a[dt] != b[du])
            return 0;
    }
    return 1;
}

/* "(a*b*4)" for dimensions [from, to) of t, "1" when empty. */
void chn_dims_expr(const kiln_problem *p, const kiln_tensor_spec *t, int from, int to, char *out,
                   size_t cap) {
    if (from >= to) {
        snprintf(out, cap, "1");
        return;
    }
    size_t off = (size_t)snprintf(out, cap, "(");
    for (int d = from; d < to && off < cap; d++) {
        if (t->axis[d] >= 0)
            off += (size_t)snprintf(out + off, cap - off, "%s%s", d > from ? "*" : "",
                                    p->axes[t->axis[d]].name);
        else
            off += (size_t)snprintf(out + off, cap - off, "%s%lld", d > from ? "*" : "",
                                    (long long)t->literal[d]);
    }
    if (off < cap)
        snprintf(out + off, cap - off, ")");
}

int64_t chn_dims_prod(const int64_t *shape, int from, int to) {
    int64_t n = 1;
    for (int d = from; d < to; d++)
        n *= shape[d];
    return n;
}

int chn_layout_perm(const kiln_tensor_spec *t, int *perm, char *why, size_t wl) {
    if (t->layout.expanded) {
        snprintf(why, wl, "input %s is broadcast (stored once, expanded by the reference)",
                 t->name);
        return 0;
    }
    memcpy(perm, t->layout.perm, (size_t)t->ndim * sizeof *perm);
    return 1;
}

int chn_perm_equal(const int *a, const int *b, int n) {
    return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

/* An input by one of several conventional names, with the given rank (-1: any); -1 when none. */
int chn_input_named(const kiln_problem *p, const char *const *names, int ndim) {
    for (int k = 0; names[k]; k++) {
        int i = kiln_problem_input_index(p, names[k]);
        if (i >= 0 && !p->inputs[i].is_scalar && (ndim < 0 || p->inputs[i].ndim == ndim))
            return i;
    }
    return -1;
}

int chn_scalar_named(const kiln_problem *p, const char *const *names) {
    for (int k = 0; names[k]; k++) {
        int i = kiln_problem_input_index(p, names[k]);
        if (i >= 0 && p->inputs[i].is_scalar && kiln_dtype_is_float(p->inputs[i].dtype))
            return i;
    }
    return -1;
}

static const char *skip_space(const char *s) {
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

/* eps written in a hand-written reference ("EPS = 1e-6", "eps=1e-5"), else dflt. */
double chn_eps_from_reference(const kiln_problem *p, double dflt) {
    for (const char *s = p->reference; s && (s = strcasestr(s, "eps")); s += 3) {
        const char *t = s + 3;
        while (isalnum((unsigned char)*t) || *t == '_')
            t++;
        t = skip_space(t);
        if (*t != '=' || t[1] == '=')
            continue;
        char *end = NULL;
        double v = strtod(skip_space(t + 1), &end);
        if (end != skip_space(t + 1) && v > 0 && v < 1)
            return v;
    }
    return dflt;
}

const char *const CHN_X_NAMES[] = {"x", "input", "hidden_states", "X", "input0", NULL};
const char *const CHN_W_NAMES[] = {"weight", "gamma", "w", NULL};
const char *const CHN_B_NAMES[] = {"bias", "beta", "b", NULL};
const char *const CHN_EPS_NAMES[] = {"eps", "epsilon", NULL};

/* A pointer argument: the problem's tensor for a role, or a typed null. */
void chn_ptr_arg(kiln_strbuf *b, const kiln_problem *p, int in_index, int out_index,
                 const char *null_type) {
    if (in_index >= 0)
        kiln_strbuf_printf(b, "%s", p->inputs[in_index].name);
    else if (out_index >= 0)
        kiln_strbuf_printf(b, "%s", p->outputs[out_index].name);
    else
        kiln_strbuf_printf(b, "(%s)0", null_type);
}

/* The whole candidate: banner over the body (CPU banners name no parameters: they do not apply). */
char *chn_with_banner(const kiln_family *f, const kiln_match *m, const int64_t *pt, int cuda,
                      kiln_strbuf *body) {
    kiln_family bare = *f;
    if (!cuda)
        bare.n_params = 0;
    return kiln_family_source(&bare, m, pt, body->s);
}

double chn_min_bytes(const kiln_problem *p, const kiln_match *m, const kiln_workload *w) {
    (void)m;
    return kiln_problem_min_bytes(p, w);
}

/* Tolerances: the defaults. Both families accumulate in fp32 with exact per-tile statistics and
 * round each output once (or where the reference rounds), so nothing looser is needed. */
kiln_tolerance chn_tolerance(kiln_dtype t) {
    return kiln_tolerance_default(t);
}

int64_t chn_cdiv(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}
