/* eltwise_chain.c: how the eltwise family reads a problem: its op chain (kiln_opchain) as SSA
 * values with the dtypes eager PyTorch gives them, and the shapes its inputs are read in, mapped
 * onto the output's stored dims and merged (the essay at the top of eltwise.c says why). */
#include "eltwise.h"

#include <math.h>
#include <string.h>

#define ELT_OP_ROW(code, name, expr) [code] = {name, expr},
const elt_op_info ELT_OP_INFO[OP_COUNT] = {ELT_OPS(ELT_OP_ROW)};
/* OP_NEG .. OP_ERF take one tensor and nothing else: aten::<name>.default */
#define ELT_FIRST_UNARY OP_NEG
#define ELT_LAST_UNARY OP_ERF

int elt_is16(kiln_dtype t) {
    return t == KILN_BF16 || t == KILN_F16;
}

static int dtype_ok(kiln_dtype t) {
    return t == KILN_F32 || elt_is16(t);
}

int elt_op_is_fast(int op) {
    return op == OP_EXP || op == OP_SIGMOID || op == OP_SILU || op == OP_GELU_TANH || op == OP_TANH;
}

/* ---- the chain: SSA values with dtypes ---- */

static int chain_add(elt_chain *ch, elt_val v) {
    if (ch->n == ELT_MAX_VALUES)
        return -1;
    ch->v[ch->n] = v;
    return ch->n++;
}

/* 1 when name is one of the space-separated words of list. */
static int one_of(const char *name, const char *list) {
    size_t l = strlen(name);
    for (const char *s = list; l && (s = strstr(s, name)) != NULL; s += l)
        if ((s == list || s[-1] == ' ') && (s[l] == ' ' || !s[l]))
            return 1;
    return 0;
}

/* The value of an operand argument: a tensor (an input is value `input`, an op's result the value
 * the op computed) or a Python number. */
static int operand(elt_chain *ch, const int *op_val, const kiln_arg *a, char *why, size_t n) {
    if (!a) {
        snprintf(why, n, "a missing operand");
        return -1;
    }
    if (a->kind == KILN_ARG_TENSOR)
        return a->value.input >= 0 ? a->value.input : op_val[a->value.op];
    if (a->kind == KILN_ARG_NUM || a->kind == KILN_ARG_BOOL) {
        elt_val c = {.kind = V_CONST, .dtype = KILN_F32, .prio = 0, .value = a->num};
        int v = chain_add(ch, c);
        if (v < 0)
            snprintf(why, n, "chain too long");
        return v;
    }
    snprintf(why, n, "operand '%s' is not a value or a number", a->text);
    return -1;
}

/* A number argument (alpha, exponents, bounds); dflt when absent; -1 on a non-number. */
static int number(const kiln_op *c, int i, const char *name, double dflt, double *out) {
    const kiln_arg *a = kiln_op_arg(c, i, name);
    if (!a || a->kind == KILN_ARG_NONE) {
        *out = dflt;
        return 0;
    }
    if (a->kind != KILN_ARG_NUM && a->kind != KILN_ARG_BOOL)
        return -1;
    *out = a->num;
    return 0;
}

/* The dtype of an op over operands ids[0..n) (PyTorch's result_type for floating operands). */
static kiln_dtype promote(const elt_chain *ch, const int *ids, int n, int *prio) {
    int best = 0;
    for (int i = 0; i < n; i++)
        best = ch->v[ids[i]].prio > best ? ch->v[ids[i]].prio : best;
    *prio = best;
    if (best == 0)
        return KILN_F32; /* only Python scalars: the default dtype */
    kiln_dtype t = KILN_DTYPE_COUNT;
    for (int i = 0; i < n; i++) {
        const elt_val *v = &ch->v[ids[i]];
        if (v->prio != best)
            continue;
        if (t == KILN_DTYPE_COUNT || t == v->dtype)
            t = v->dtype;
        else
            t = KILN_F32; /* f32 with anything, or bf16 with fp16 */
    }
    return t;
}

/* Op k of the chain into values; op_val[k] gets the value it computes. Returns 0 with a reason when
 * the op is not pointwise or not handled. */
static int add_op(elt_chain *ch, int *op_val, const kiln_op *c, int k, char *why, size_t n) {
    char name[64];
    kiln_family_fmt(name, sizeof name, "%s", c->name);
    if (c->inplace)
        name[strlen(name) - 1] = 0; /* the in-place variant computes the same value */
    const int binary = one_of(name, "add sub rsub mul div true_divide maximum minimum") ||
                       (!strcmp(name, "pow") && !strcmp(c->overload, "Tensor_Tensor"));
    const int cast = one_of(name, "to _to_copy type_as contiguous clone alias detach");
    const int clamp = one_of(name, "clamp clamp_min clamp_max hardtanh relu6");
    int unary = ELT_FIRST_UNARY;
    while (unary <= ELT_LAST_UNARY && strcmp(name, ELT_OP_INFO[unary].name))
        unary++;
    if (!binary && !cast && !clamp && unary > ELT_LAST_UNARY &&
        !one_of(name, "pow gelu leaky_relu"))
        return snprintf(why, n, "%s is not a pointwise op eltwise handles", c->aten), 0;
    if (c->tuple)
        return snprintf(why, n, "%s returns a tuple", c->aten), 0;
    elt_val r = {.kind = V_OP, .n_a = 1, .k = {1, 0}};
    int a = operand(ch, op_val, kiln_op_arg(c, 0, "self"), why, n);
    if (a < 0)
        return 0;
    r.a[0] = a;
    int bad = 0;
    if (binary) {
        int b = operand(ch, op_val, kiln_op_arg(c, 1, strcmp(name, "pow") ? "other" : "exponent"),
                        why, n);
        if (b < 0)
            return 0;
        r.n_a = 2;
        r.a[1] = b;
        r.op = !strcmp(name, "mul")       ? OP_MUL
               : !strcmp(name, "pow")     ? OP_POW_T
               : !strcmp(name, "maximum") ? OP_MAX
               : !strcmp(name, "minimum") ? OP_MIN
               : name[0] == 'a'           ? OP_ADD
               : one_of(name, "sub rsub") ? OP_SUB
                                          : OP_DIV;
        if (r.op == OP_ADD || r.op == OP_SUB)
            bad = number(c, 2, "alpha", 1, &r.k[0]) < 0;
        if (name[0] == 'r') { /* rsub(self, other, alpha) = other - alpha * self */
            r.a[0] = b;
            r.a[1] = a;
        }
        const kiln_arg *mode = r.op == OP_DIV ? kiln_op_arg(c, 2, "rounding_mode") : NULL;
        if (mode && mode->kind != KILN_ARG_NONE)
            return snprintf(why, n, "aten::%s with a rounding mode", c->name), 0;
    } else if (!strcmp(name, "pow")) {
        r.op = OP_POW_S;
        bad = number(c, 1, "exponent", 1, &r.k[0]) < 0;
    } else if (!strcmp(name, "gelu")) {
        const kiln_arg *ap = kiln_op_arg(c, 1, "approximate");
        int tanh_form = ap && ap->kind == KILN_ARG_OTHER && !strcmp(ap->text, "tanh");
        if (ap && ap->kind == KILN_ARG_OTHER && !tanh_form && strcmp(ap->text, "none"))
            return snprintf(why, n, "aten::gelu approximate='%s'", ap->text), 0;
        r.op = tanh_form ? OP_GELU_TANH : OP_GELU_ERF;
    } else if (clamp) {
        /* absent bounds are infinite; clamp_max's bound is its first argument */
        int is_max = !strcmp(name, "clamp_max"), hard = !strcmp(name, "hardtanh");
        r.op = OP_CLAMP;
        r.k[0] = !strcmp(name, "relu6") ? 0 : -INFINITY;
        r.k[1] = !strcmp(name, "relu6") ? 6 : INFINITY;
        bad |= (hard || !strcmp(name, "clamp") || !strcmp(name, "clamp_min")) &&
               number(c, 1, hard ? "min_val" : "min", hard ? -1 : -INFINITY, &r.k[0]) < 0;
        bad |=
            (hard || !strcmp(name, "clamp") || is_max) &&
            number(c, is_max ? 1 : 2, hard ? "max_val" : "max", hard ? 1 : INFINITY, &r.k[1]) < 0;
    } else if (!strcmp(name, "leaky_relu")) {
        r.op = OP_LEAKY;
        bad = number(c, 1, "negative_slope", 0.01, &r.k[0]) < 0;
    } else if (cast) {
        kiln_dtype to = ch->v[a].dtype;
        const kiln_arg *dt = NULL;
        if (!strcmp(name, "type_as") || (!strcmp(name, "to") && !strcmp(c->overload, "other"))) {
            int o = operand(ch, op_val, kiln_op_arg(c, 1, "other"), why, n);
            if (o < 0)
                return 0;
            to = ch->v[o].dtype;
        } else if (one_of(name, "to _to_copy")) {
            int at = strcmp(name, "to")               ? -1
                     : !strcmp(c->overload, "dtype")  ? 1
                     : !strcmp(c->overload, "device") ? 2
                                                      : -1;
            dt = kiln_op_arg(c, at, "dtype");
        }
        if (dt && dt->kind == KILN_ARG_DTYPE)
            to = dt->dtype;
        else if (dt && dt->kind != KILN_ARG_NONE)
            return snprintf(why, n, "aten::%s to an unreadable dtype '%s'", c->name, dt->text), 0;
        if (!dtype_ok(to))
            return snprintf(why, n, "aten::%s to %s (eltwise handles float32, bfloat16, float16)",
                            c->name, kiln_dtype_name(to)),
                   0;
        if (to == ch->v[a].dtype) { /* a copy: the same value */
            op_val[k] = a;
            return 1;
        }
        r.op = OP_CAST;
        r.dtype = to;
        r.prio = ch->v[a].prio;
    } else {
        r.op = unary;
    }
    if (bad)
        return snprintf(why, n, "aten::%s with a tensor where eltwise needs a number", c->name), 0;
    if (r.op != OP_CAST)
        r.dtype = promote(ch, r.a, r.n_a, &r.prio);
    int has_tensor = 0;
    for (int i = 0; i < r.n_a; i++)
        has_tensor |= ch->v[r.a[i]].kind == V_TENSOR || ch->v[r.a[i]].kind == V_OP;
    if (!has_tensor)
        return snprintf(why, n, "aten::%s on constants only", c->name), 0;
    int v = chain_add(ch, r);
    if (v < 0)
        return snprintf(why, n, "chain longer than %d values", ELT_MAX_VALUES), 0;
    op_val[k] = v;
    return 1;
}

/* ---- shapes ---- */

/* Appends the size of stored dim d of t to the product in buf; 0 when it does not fit. */
static int append_dim(const kiln_problem *p, const kiln_tensor_spec *t, int d, char *buf) {
    char e[ELT_EXPR];
    kiln_tensor_dim_expr(p, t, d, e, sizeof e);
    size_t off = strlen(buf);
    int k = snprintf(buf + off, ELT_EXPR - off, "%s(%s)", off ? "*" : "", e);
    return k > 0 && (size_t)k < ELT_EXPR - off;
}

/* Stored dim d of t has size 1 in every workload. */
static int unit_dim(const kiln_problem *p, const kiln_tensor_spec *t, int d) {
    for (int w = 0; w < p->n_workloads; w++) {
        int64_t s[KILN_MAX_DIMS];
        kiln_tensor_shape(p, t, &p->workloads[w], s);
        if (s[d] != 1)
            return 0;
    }
    return 1;
}

/* Maps every read input onto the output's stored dims and merges what can be merged. */
static int analyse_shapes(const kiln_problem *p, elt_problem *ep, char *why, size_t n) {
    elt_shape *sh = &ep->sh;
    const kiln_tensor_spec *y = &p->outputs[0];
    const int R = y->ndim;
    const int *operm = y->layout.perm;
    for (int o = 1; o < p->n_outputs; o++) {
        const kiln_tensor_spec *t = &p->outputs[o];
        int same = t->ndim == R;
        for (int d = 0; same && d < R; d++)
            same = t->layout.perm[d] == operm[d];
        for (int w = 0; same && w < p->n_workloads; w++) {
            int64_t a[KILN_MAX_DIMS], b[KILN_MAX_DIMS];
            kiln_tensor_shape(p, y, &p->workloads[w], a);
            kiln_tensor_shape(p, t, &p->workloads[w], b);
            same = memcmp(a, b, sizeof(int64_t) * (size_t)R) == 0;
        }
        if (!same)
            return snprintf(why, n, "outputs %s and %s differ in shape or layout", y->name,
                            t->name),
                   0;
    }
    /* per input: stored dim -> logical dim, and the classification per output dim */
    enum { DENSE = 1, BCAST };
    int cls[ELT_MAX_IN][KILN_MAX_DIMS], pos[ELT_MAX_IN][KILN_MAX_DIMS];
    int keep[KILN_MAX_DIMS], n_keep = 0;
    for (int k = 0; k < R; k++)
        if (!unit_dim(p, y, k))
            keep[n_keep++] = k;
    for (int i = 0; i < sh->n_in; i++) {
        const kiln_tensor_spec *t = &p->inputs[sh->in_idx[i]];
        const int *pm = t->layout.perm;
        int used[KILN_MAX_DIMS] = {0};
        if (t->ndim > R)
            return snprintf(why, n, "input %s has more dims than the output", t->name), 0;
        for (int kk = 0; kk < n_keep; kk++) {
            int k = keep[kk];
            int l = operm[k] - (R - t->ndim); /* the input's logical dim (right-aligned) */
            cls[i][kk] = BCAST;
            pos[i][kk] = -1;
            if (l < 0)
                continue;
            int j = 0;
            while (pm[j] != l)
                j++;
            int dense = 1, bcast = 1;
            for (int w = 0; w < p->n_workloads; w++) {
                int64_t xs[KILN_MAX_DIMS], ys[KILN_MAX_DIMS];
                kiln_tensor_shape(p, t, &p->workloads[w], xs);
                kiln_tensor_shape(p, y, &p->workloads[w], ys);
                dense &= xs[j] == ys[k];
                bcast &= xs[j] == 1;
            }
            if (dense) {
                cls[i][kk] = DENSE;
                pos[i][kk] = j;
                used[j] = 1;
            } else if (!bcast) {
                return snprintf(why, n, "input %s does not broadcast to output %s", t->name,
                                y->name),
                       0;
            }
        }
        for (int j = 0; j < t->ndim; j++)
            if (!used[j] && !unit_dim(p, t, j))
                return snprintf(why, n, "input %s has a dim the output lacks", t->name), 0;
    }
    /* merge adjacent kept dims where every input is broadcast in both or walks them contiguously */
    int group_end[KILN_MAX_DIMS], G = 0; /* last kept index of each group */
    for (int kk = 0; kk < n_keep; kk++) {
        int merge = kk > 0;
        for (int i = 0; merge && i < sh->n_in; i++) {
            const kiln_tensor_spec *t = &p->inputs[sh->in_idx[i]];
            int a = cls[i][kk - 1], b = cls[i][kk];
            if (a == BCAST && b == BCAST)
                continue;
            if (a != DENSE || b != DENSE) {
                merge = 0;
                break;
            }
            int next = pos[i][kk - 1] + 1; /* the next stored dim that is not always 1 */
            while (next < t->ndim && unit_dim(p, t, next))
                next++;
            merge = next == pos[i][kk];
        }
        if (merge)
            group_end[G - 1] = kk;
        else
            group_end[G++] = kk;
    }
    sh->D = G ? G : 1;
    /* sizes and strides as expressions over the axes (strides: the input's stored dims after) */
    int fits = 1;
    for (int g = 0; g < G; g++) {
        for (int kk = g ? group_end[g - 1] + 1 : 0; kk <= group_end[g]; kk++)
            fits &= append_dim(p, y, keep[kk], sh->size[g]);
        for (int i = 0; i < sh->n_in; i++) {
            const kiln_tensor_spec *t = &p->inputs[sh->in_idx[i]];
            int kk = group_end[g];
            for (int j = pos[i][kk] + 1; cls[i][kk] == DENSE && j < t->ndim; j++)
                fits &= unit_dim(p, t, j) || append_dim(p, t, j, sh->stride[i][g]);
            if (!sh->stride[i][g][0])
                kiln_family_fmt(sh->stride[i][g], ELT_EXPR, "%s", cls[i][kk] == BCAST ? "0" : "1");
        }
    }
    if (!G) {
        kiln_family_fmt(sh->size[0], ELT_EXPR, "1");
        for (int i = 0; i < sh->n_in; i++)
            kiln_family_fmt(sh->stride[i][0], ELT_EXPR, "0");
    }
    for (int g = 0; g < sh->D; g++)
        fits &= strlen(sh->total) + strlen(sh->size[g]) + 2 < sizeof sh->total &&
                strcat(strcat(sh->total, g ? "*" : ""), sh->size[g]);
    if (!fits)
        return snprintf(why, n, "shape expressions too long"), 0;
    for (int i = 0; i < sh->n_in; i++) {
        sh->inner_bcast[i] = strcmp(sh->stride[i][sh->D - 1], "0") == 0;
        sh->inner_unit[i] = strcmp(sh->stride[i][sh->D - 1], "1") == 0;
    }
    /* numbers over the workloads: the largest output and what divides every innermost dim */
    sh->total_max = 0;
    sh->inner_gcd = 0;
    for (int w = 0; w < p->n_workloads; w++) {
        int64_t ys[KILN_MAX_DIMS];
        int64_t total = kiln_tensor_shape(p, y, &p->workloads[w], ys);
        int64_t inner = 1;
        if (G) {
            int first = G > 1 ? group_end[G - 2] + 1 : 0;
            for (int kk = first; kk <= group_end[G - 1]; kk++)
                inner *= ys[keep[kk]];
        }
        sh->total_max = total > sh->total_max ? total : sh->total_max;
        sh->inner_gcd = kiln_family_gcd(sh->inner_gcd, inner);
    }
    return 1;
}

/* ---- reading a problem ---- */

/* A hand-written problem without a "kiln" object whose op_type names one op: that op applied to
 * the inputs in order. */
static kiln_opchain *op_type_chain(const kiln_problem *p) {
    kiln_opchain *c = xcalloc(1, sizeof *c);
    kiln_op *op = &c->ops[0];
    kiln_family_fmt(op->name, sizeof op->name, "%s", p->op_type);
    kiln_family_fmt(op->overload, sizeof op->overload, "default");
    kiln_family_fmt(op->aten, sizeof op->aten, "aten::%s.default", op->name);
    size_t l = strlen(op->name);
    op->inplace = l > 1 && op->name[l - 1] == '_' && op->name[0] != '_';
    for (int i = 0; i < p->n_inputs && op->n_args < KILN_OP_MAX_ARGS; i++) {
        kiln_arg *a = &op->args[op->n_args++];
        a->kind = KILN_ARG_TENSOR;
        a->value = (kiln_value){i, -1, 0};
        kiln_family_fmt(a->text, sizeof a->text, "%s", p->inputs[i].name);
    }
    op->n_results = 1;
    c->n_ops = 1;
    c->n_outputs = 1;
    c->outputs[0] = (kiln_value){-1, 0, 0};
    snprintf(c->kind, sizeof c->kind, "op_type");
    return c;
}

int elt_read(const kiln_problem *p, elt_problem *ep, char *why, size_t n) {
    memset(ep, 0, sizeof *ep);
    kiln_opchain *c = NULL;
    kiln_err err;
    int ok = 1;
    if (!kiln_opchain_described(p) && p->op_type && p->n_outputs == 1) {
        c = op_type_chain(p);
    } else if (kiln_opchain_read(p, &c, &err) != KILN_OK) {
        if (!kiln_opchain_described(p))
            snprintf(why, n,
                     "no \"kiln\" object: eltwise reads a captured aten call, a module or "
                     "a \"chain\"");
        else
            snprintf(why, n, "%s", err.msg);
        return 0;
    }
    kiln_family_fmt(ep->how, sizeof ep->how, "%s", c->kind);
    elt_chain *ch = &ep->ch;
    /* the inputs, tensors and by-value scalars, are values 0 .. n_inputs-1 */
    for (int i = 0; ok && i < p->n_inputs; i++) {
        const kiln_tensor_spec *t = &p->inputs[i];
        elt_val v = {.kind = t->is_scalar ? V_SCALAR : V_TENSOR,
                     .dtype = t->dtype,
                     .prio = t->is_scalar  ? 0
                             : t->ndim > 0 ? 2
                                           : 1,
                     .input = i};
        if (!t->is_scalar && !dtype_ok(t->dtype)) {
            snprintf(why, n, "input %s is %s (eltwise handles float32, bfloat16, float16)", t->name,
                     kiln_dtype_name(t->dtype));
            ok = 0;
        } else if (t->is_scalar && !kiln_dtype_is_float(t->dtype) && t->dtype != KILN_I64 &&
                   t->dtype != KILN_I32) {
            snprintf(why, n, "scalar input %s is %s", t->name, kiln_dtype_name(t->dtype));
            ok = 0;
        } else if (chain_add(ch, v) < 0) {
            snprintf(why, n, "more than %d inputs", ELT_MAX_VALUES);
            ok = 0;
        }
    }
    int op_val[KILN_OPCHAIN_MAX_OPS];
    for (int k = 0; ok && k < c->n_ops; k++)
        ok = add_op(ch, op_val, &c->ops[k], k, why, n);
    if (!ok && !strcmp(ep->how, "op_type")) {
        char inner[200];
        kiln_family_fmt(inner, sizeof inner, "%s", why);
        kiln_family_fmt(why, n, "no \"kiln\" object, and op_type '%s' is no chain: %s", p->op_type,
                        inner);
    }
    /* outputs */
    if (ok && c->n_outputs > ELT_MAX_OUT) {
        snprintf(why, n, "more than %d outputs", ELT_MAX_OUT);
        ok = 0;
    }
    for (int o = 0; ok && o < c->n_outputs; o++) {
        const kiln_value *r = &c->outputs[o];
        int v = r->input >= 0 ? r->input : op_val[r->op];
        if (ch->v[v].kind != V_TENSOR && ch->v[v].kind != V_OP) {
            snprintf(why, n, "output %s is not a tensor", p->outputs[o].name);
            ok = 0;
        } else if (ch->v[v].dtype != p->outputs[o].dtype) {
            snprintf(why, n, "the chain makes %s %s, output %s is %s",
                     r->input >= 0 ? p->inputs[r->input].name : c->ops[r->op].aten,
                     kiln_dtype_name(ch->v[v].dtype), p->outputs[o].name,
                     kiln_dtype_name(p->outputs[o].dtype));
            ok = 0;
        } else if (!dtype_ok(p->outputs[o].dtype)) {
            snprintf(why, n, "output %s is %s", p->outputs[o].name,
                     kiln_dtype_name(p->outputs[o].dtype));
            ok = 0;
        }
        ch->out_val[ch->n_out++] = v;
    }
    kiln_opchain_free(c);
    /* what the outputs depend on */
    for (int o = 0; ok && o < ch->n_out; o++)
        ch->v[ch->out_val[o]].live = 1;
    for (int v = ch->n - 1; ok && v >= 0; v--)
        if (ch->v[v].live && ch->v[v].kind == V_OP)
            for (int k = 0; k < ch->v[v].n_a; k++)
                ch->v[ch->v[v].a[k]].live = 1;
    elt_shape *sh = &ep->sh;
    for (int v = 0; ok && v < ch->n; v++)
        if (ch->v[v].live && ch->v[v].kind == V_TENSOR) {
            if (sh->n_in == ELT_MAX_IN) {
                snprintf(why, n, "more than %d input tensors", ELT_MAX_IN);
                ok = 0;
                break;
            }
            sh->in_idx[sh->n_in] = ch->v[v].input;
            sh->in_val[sh->n_in++] = v;
        }
    if (ok)
        ok = analyse_shapes(p, ep, why, n);
    return ok;
}
