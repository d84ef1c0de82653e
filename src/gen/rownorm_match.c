/* rownorm_match.c: how the rmsnorm and layernorm families recognise a problem and read the exact
 * computation (the rounding program) its reference performs.
 *
 * How a problem is recognised. Rather than pattern-matching op lists, the matcher *interprets* the
 * problem's op chain (src/formats/opchain.h: a captured call such as
 * aten::native_layer_norm.default(input, [64], weight, bias, 1e-05), or a leaf module's forward,
 * to.dtype(input0, torch.float32) ... type_as(v7, input0)) over an abstract domain: each value is
 * "an input with a program", "x squared", "mean of x^2", "+ eps", "rsqrt(...)", "the normalised
 * value with a program", "mean" or "rstd". Casts append rounding steps exactly where the dtype
 * narrows, products follow PyTorch's type promotion (bf16 * bf16 rounds to bf16, bf16 * fp32 does
 * not), and anything else (a residual add, a norm over another dim, a square computed in bf16, a
 * reshape) declines with the op that broke the pattern. So Gemma4RMSNorm (pow(ms + eps, -0.5)),
 * Qwen3_5MoeRMSNorm (1 + w), LlamaRMSNorm, Qwen3_5MoeRMSNormGated (* silu(gate)), with_scale=False
 * variants, aten::rms_norm / _fused_rms_norm / layer_norm / native_layer_norm (with their mean and
 * rstd outputs) all land on
 * one code path. Hand-written problems (SOL-ExecBench's rmsnorm_h4096) have free Python references:
 * there op_type and shapes pick the roles, eps comes from a scalar input or a literal in the
 * source, and the program is the common "fp32 affine, one rounding" (see match_handwritten).
 *
 * Programs. A program is a list of steps (STEP_*, rownorm.h) over fp32 values: multiplications by
 * the weight, additions of the bias, products with a SiLU gate, 1 + w, and roundings to bf16/fp16,
 * in the reference's order. Rounding is idempotent, so a step that rounds to the output's own dtype
 * is harmless before the final store. */
#include "rownorm.h"

#include <ctype.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

/* ---- programs ---- */

double rn_prog_pack(const rn_prog *p) {
    double v = 0;
    for (int i = p->n - 1; i >= 0; i--)
        v = v * 8 + p->step[i];
    return v;
}

void rn_prog_unpack(double v, rn_prog *p) {
    uint64_t u = (uint64_t)v;
    p->n = 0;
    while (u && p->n < RN_MAX_STEPS) {
        p->step[p->n++] = (unsigned char)(u % 8);
        u /= 8;
    }
}

/* 1 when no step from `from` on adds: only products and roundings. */
static int only_products_from(const rn_prog *p, int from) {
    for (int i = from; i < p->n; i++)
        if (p->step[i] == STEP_ADD_B || p->step[i] == STEP_ADD_ONE || p->step[i] == STEP_SILU)
            return 0;
    return 1;
}

/* First index of step in p from `from` on, or p->n. */
static int step_after(const rn_prog *p, int step, int from) {
    int i = from;
    while (i < p->n && p->step[i] != step)
        i++;
    return i;
}

int rn_silu_narrow(const rn_prog *w, const rn_prog *b, const rn_prog *g, const rn_prog *y,
                   kiln_dtype ydt) {
    if ((ydt != KILN_BF16 && ydt != KILN_F16) || step_after(w, STEP_SILU, 0) < w->n ||
        step_after(b, STEP_SILU, 0) < b->n)
        return 0;
    int gs = step_after(g, STEP_SILU, 0), ys = step_after(y, STEP_SILU, 0);
    if (gs == g->n && ys == y->n)
        return 0;
    if (gs < g->n &&
        (!only_products_from(g, gs + 1) || !only_products_from(y, step_after(y, STEP_MUL_G, 0))))
        return 0;
    return ys == y->n || only_products_from(y, ys + 1);
}

static int float3(kiln_dtype t) {
    return t == KILN_F32 || t == KILN_BF16 || t == KILN_F16;
}

/* Writes the program as an expression over `base`: C for the templates, or short text for `how`. */
void rn_prog_render(const rn_prog *p, const char *base, int c_style, char *out, size_t cap) {
    char *cur = xstrdup(base);
    for (int i = 0; i < p->n; i++) {
        const char *fmt;
        switch (p->step[i]) {
        case STEP_ROUND_BF16:
            fmt = c_style ? "rn_round_bf16(%s)" : "bf16(%s)";
            break;
        case STEP_ROUND_F16:
            fmt = c_style ? "rn_round_f16(%s)" : "f16(%s)";
            break;
        case STEP_MUL_W:
            fmt = "(%s * w)";
            break;
        case STEP_ADD_B:
            fmt = "(%s + b)";
            break;
        case STEP_MUL_G:
            fmt = "(%s * g)";
            break;
        case STEP_ADD_ONE:
            fmt = c_style ? "(%s + 1.0f)" : "(%s + 1)";
            break;
        default:
            fmt = c_style ? "rn_silu(%s)" : "silu(%s)";
            break;
        }
        char *next = xasprintf(fmt, cur);
        free(cur);
        cur = next;
    }
    snprintf(out, cap, "%s", cur);
    free(cur);
}

/* ---- the abstract interpreter of captured references ---- */

typedef enum {
    S_IN,   /* a problem input (tensor) with a program on its loaded value */
    S_NUM,  /* a Python number, or a scalar input (input >= 0) */
    S_SQ,   /* x^2 in fp32 */
    S_MS,   /* mean(x^2) over the normalised dims, keepdim */
    S_MSE,  /* mean(x^2) + eps */
    S_SQRT, /* sqrt(mean(x^2) + eps) */
    S_R,    /* rsqrt(mean(x^2) + eps): the rstd of rmsnorm */
    S_N,    /* the normalised value with a program */
    S_MEAN, /* the mean output of native_layer_norm */
    S_RSTD, /* the rstd output of native_layer_norm / _fused_rms_norm */
} rn_kind;

typedef struct {
    rn_kind kind;
    int input; /* S_IN: input index; S_NUM: scalar input index or -1 */
    kiln_dtype dt;
    rn_prog prog;
    double num;
    int norm; /* S_N: 0 rms, 1 layer */
} rn_val;

typedef struct {
    const kiln_problem *p;
    rn_val *in;                                            /* per problem input */
    rn_val res[KILN_OPCHAIN_MAX_OPS][KILN_OP_MAX_RESULTS]; /* per op result */
    int n_res[KILN_OPCHAIN_MAX_OPS];                       /* results op k computed */
    int role[5]; /* input index per ROLE_*, -1 when absent */
    rn_prog prog_w, prog_b, prog_g, prog_y;
    int norm; /* -1 until known */
    int k;    /* normalised dims, 0 until known */
    int n_shape;
    int64_t shape[KILN_MAX_DIMS]; /* normalized_shape of a norm op, when given */
    double eps;
    int have_eps;
    int n_out;
    int out_role[4];
    char *why;
    size_t why_len;
} rn_interp;

static int decline(rn_interp *I, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int decline(rn_interp *I, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (I->why && I->why_len && !I->why[0])
        vsnprintf(I->why, I->why_len, fmt, ap);
    va_end(ap);
    return 0;
}

/* The value the chain names: an input, or a result an earlier op computed; NULL when the
 * interpreter did not follow it. */
static rn_val *value_of(rn_interp *I, kiln_value v) {
    if (v.input >= 0)
        return &I->in[v.input];
    return v.slot < I->n_res[v.op] ? &I->res[v.op][v.slot] : NULL;
}

static int prog_add(rn_interp *I, rn_prog *p, int step) {
    if (p->n == RN_MAX_STEPS)
        return decline(I, "more than %d pointwise steps after the norm", RN_MAX_STEPS);
    p->step[p->n++] = (unsigned char)step;
    return 1;
}

/* Narrowing to a 16-bit type rounds; widening and staying do not (bf16 <-> f16 both ways round). */
static int narrows(kiln_dtype from, kiln_dtype to) {
    return from != to && to != KILN_F32;
}

static int round_step(kiln_dtype t) {
    return t == KILN_BF16 ? STEP_ROUND_BF16 : STEP_ROUND_F16;
}

/* PyTorch's promotion for two dimensioned float tensors of the three types. */
static kiln_dtype promote(kiln_dtype a, kiln_dtype b) {
    return a == b ? a : KILN_F32;
}

/* ---- the chain's arguments ---- */

typedef enum { A_NONE, A_NUM, A_BOOL, A_LIST, A_DTYPE, A_VAR, A_OTHER } rn_arg_kind;

typedef struct {
    rn_arg_kind kind;
    double num;
    int n_list;
    int64_t list[KILN_MAX_DIMS];
    kiln_dtype dtype; /* A_DTYPE; KILN_DTYPE_COUNT for a non-float dtype */
    rn_val *val;      /* A_VAR */
} rn_arg;

#define RN_MAX_ARGS 10

typedef struct {
    char op[64], overload[64];
    int n_pos, n_kw;
    rn_arg pos[RN_MAX_ARGS];
    char kw_name[RN_MAX_ARGS][32];
    rn_arg kw[RN_MAX_ARGS];
} rn_call;

static int arg_of(rn_interp *I, const kiln_arg *k, rn_arg *a) {
    memset(a, 0, sizeof *a);
    switch (k->kind) {
    case KILN_ARG_NONE:
        a->kind = A_NONE;
        break;
    case KILN_ARG_NUM:
    case KILN_ARG_BOOL:
        a->kind = k->kind == KILN_ARG_NUM ? A_NUM : A_BOOL;
        a->num = k->num;
        break;
    case KILN_ARG_DTYPE:
        a->kind = A_DTYPE;
        a->dtype = k->dtype;
        break;
    case KILN_ARG_INTS:
        a->kind = A_LIST;
        a->n_list = k->n_ints;
        memcpy(a->list, k->ints, sizeof a->list);
        break;
    case KILN_ARG_TENSOR:
        a->kind = A_VAR;
        a->val = value_of(I, k->value);
        if (!a->val)
            return decline(I, "the reference uses '%.40s', which kiln cannot follow", k->text);
        break;
    case KILN_ARG_OTHER:
        a->kind = A_OTHER; /* layouts, memory formats, devices */
        break;
    }
    return 1;
}

/* Op k of the chain as the interpreter's call: in-place variants compute what their functional
 * forms do (the chain already names their result). */
static int call_of(rn_interp *I, const kiln_op *op, rn_call *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->op, sizeof c->op, "%s", op->name);
    if (op->inplace)
        c->op[strlen(c->op) - 1] = 0;
    snprintf(c->overload, sizeof c->overload, "%s", op->overload);
    if (op->n_args > RN_MAX_ARGS || op->n_kwargs > RN_MAX_ARGS)
        return decline(I, "%s has more than %d arguments", op->aten, RN_MAX_ARGS);
    for (int i = 0; i < op->n_args; i++)
        if (!arg_of(I, &op->args[i], &c->pos[c->n_pos++]))
            return 0;
    for (int i = 0; i < op->n_kwargs; i++) {
        snprintf(c->kw_name[c->n_kw], sizeof c->kw_name[0], "%s", op->kwarg_name[i]);
        if (!arg_of(I, &op->kwargs[i], &c->kw[c->n_kw++]))
            return 0;
    }
    return 1;
}

/* The argument at position pos or with keyword name; NULL when absent. */
static const rn_arg *call_arg(const rn_call *c, int pos, const char *name) {
    if (pos >= 0 && pos < c->n_pos)
        return &c->pos[pos];
    for (int i = 0; i < c->n_kw; i++)
        if (strcmp(c->kw_name[i], name) == 0)
            return &c->kw[i];
    return NULL;
}

static int is_val(const rn_arg *a, rn_kind k) {
    return a && a->kind == A_VAR && a->val->kind == k;
}

static int is_num(const rn_arg *a, double v) {
    return a && a->kind == A_NUM && a->num == v;
}

/* ---- the abstract operations ---- */

static const kiln_tensor_spec *in_spec(rn_interp *I, const rn_val *v) {
    return &I->p->inputs[v->input];
}

/* v is x itself (any exact widening of it): binds ROLE_X. */
static int bind_x(rn_interp *I, const rn_val *v) {
    if (v->kind != S_IN)
        return decline(I, "the norm's input is not a problem input");
    if (v->prog.n)
        return decline(I, "x is rounded or transformed before the norm");
    if (!float3(in_spec(I, v)->dtype))
        return decline(I, "x is %s: the families handle float32, bfloat16 and float16",
                       kiln_dtype_name(in_spec(I, v)->dtype));
    if (I->role[ROLE_X] >= 0 && I->role[ROLE_X] != v->input)
        return decline(I, "two different inputs are normalised");
    I->role[ROLE_X] = v->input;
    return 1;
}

/* Binds a tensor input to the weight, bias or gate role (with its program) the first time. */
static int bind_role(rn_interp *I, int role, const rn_val *v, rn_prog *prog) {
    static const char *const names[] = {"x", "weight", "bias", "gate"};
    if (v->input == I->role[ROLE_X])
        return decline(I, "x is used as a %s", names[role]);
    if (!float3(in_spec(I, v)->dtype))
        return decline(I, "the %s is %s", names[role], kiln_dtype_name(in_spec(I, v)->dtype));
    if (I->role[role] >= 0 && (I->role[role] != v->input || prog->n != v->prog.n ||
                               memcmp(prog->step, v->prog.step, (size_t)v->prog.n) != 0))
        return decline(I, "two different %ss", names[role]);
    I->role[role] = v->input;
    *prog = v->prog;
    return 1;
}

static int op_cast(rn_interp *I, const rn_val *src, kiln_dtype to, rn_val *dst) {
    *dst = *src;
    if (to == KILN_DTYPE_COUNT || !float3(to))
        return decline(I, "a cast to %s",
                       to == KILN_DTYPE_COUNT ? "a non-float type" : kiln_dtype_name(to));
    switch (src->kind) {
    case S_IN:
        /* an input's own values are exact in its dtype and in fp32 */
        if (!(src->prog.n == 0 && (to == KILN_F32 || to == in_spec(I, src)->dtype)) &&
            narrows(src->dt, to) && !prog_add(I, &dst->prog, round_step(to)))
            return 0;
        break;
    case S_N:
        if (narrows(src->dt, to) && !prog_add(I, &dst->prog, round_step(to)))
            return 0;
        break;
    case S_NUM:
        return decline(I, "a cast of a scalar");
    default:
        if (narrows(src->dt, to))
            return decline(I, "the row statistics are rounded to %s", kiln_dtype_name(to));
        break;
    }
    dst->dt = to;
    return 1;
}

/* x^2 from x (an S_IN), only in fp32: a square in bf16 is not what kiln's kernels compute. */
static int op_square(rn_interp *I, const rn_val *a, rn_val *dst) {
    if (!bind_x(I, a))
        return 0;
    if (a->dt != KILN_F32)
        return decline(I, "x^2 is computed in %s, not float32", kiln_dtype_name(a->dt));
    memset(dst, 0, sizeof *dst);
    dst->kind = S_SQ;
    dst->dt = KILN_F32;
    return 1;
}

static int op_mul(rn_interp *I, const rn_arg *A, const rn_arg *B, rn_val *dst) {
    if (!A || !B)
        return decline(I, "aten::mul with a missing argument");
    if (A->kind == A_VAR && B->kind == A_VAR && A->val == B->val && A->val->kind == S_IN)
        return op_square(I, A->val, dst);
    for (int swap = 0; swap < 2; swap++) {
        const rn_arg *a = swap ? B : A, *b = swap ? A : B;
        if (is_val(a, S_IN) && is_val(b, S_R)) { /* x * rsqrt(...) */
            if (!bind_x(I, a->val))
                return 0;
            memset(dst, 0, sizeof *dst);
            dst->kind = S_N;
            dst->norm = 0;
            dst->dt = promote(a->val->dt, b->val->dt);
            return 1;
        }
        if (is_val(a, S_N) && is_val(b, S_IN)) {
            const rn_val *n = a->val, *t = b->val;
            const kiln_tensor_spec *ts = in_spec(I, t);
            const kiln_tensor_spec *xs =
                I->role[ROLE_X] >= 0 ? &I->p->inputs[I->role[ROLE_X]] : NULL;
            int gate = xs && ts->ndim == xs->ndim && ts->ndim > I->k;
            *dst = *n;
            if (gate ? !bind_role(I, ROLE_G, t, &I->prog_g) : !bind_role(I, ROLE_W, t, &I->prog_w))
                return 0;
            if (!prog_add(I, &dst->prog, gate ? STEP_MUL_G : STEP_MUL_W))
                return 0;
            dst->dt = promote(n->dt, t->dt);
            if (dst->dt != KILN_F32 && !prog_add(I, &dst->prog, round_step(dst->dt)))
                return 0;
            return 1;
        }
    }
    return decline(I, "a product that is not part of a norm (x * rstd, n * weight, n * gate)");
}

static int op_add(rn_interp *I, const rn_call *c, rn_val *dst) {
    const rn_arg *A = call_arg(c, 0, "self"), *B = call_arg(c, 1, "other");
    const rn_arg *alpha = call_arg(c, 2, "alpha");
    if (!A || !B || (alpha && !is_num(alpha, 1)))
        return decline(I, "aten::add with an alpha or a missing argument");
    if (is_val(A, S_MS) && (B->kind == A_NUM || is_val(B, S_NUM))) {
        memset(dst, 0, sizeof *dst);
        dst->kind = S_MSE;
        dst->dt = KILN_F32;
        if (B->kind == A_NUM) {
            I->eps = B->num;
            I->role[ROLE_EPS] = -1;
        } else if (B->val->input >= 0) {
            I->role[ROLE_EPS] = B->val->input;
        } else {
            I->eps = B->val->num;
        }
        I->have_eps = 1;
        return 1;
    }
    if (is_val(A, S_IN) && is_num(B, 1.0)) { /* Gemma's 1 + w */
        *dst = *A->val;
        if (!prog_add(I, &dst->prog, STEP_ADD_ONE))
            return 0;
        if (dst->dt != KILN_F32 && !prog_add(I, &dst->prog, round_step(dst->dt)))
            return 0;
        return 1;
    }
    for (int swap = 0; swap < 2; swap++) {
        const rn_arg *a = swap ? B : A, *b = swap ? A : B;
        if (is_val(a, S_N) && is_val(b, S_IN)) {
            *dst = *a->val;
            if (!bind_role(I, ROLE_B, b->val, &I->prog_b) || !prog_add(I, &dst->prog, STEP_ADD_B))
                return 0;
            dst->dt = promote(a->val->dt, b->val->dt);
            if (dst->dt != KILN_F32 && !prog_add(I, &dst->prog, round_step(dst->dt)))
                return 0;
            return 1;
        }
    }
    return decline(I, "an addition that is not part of a norm (mean + eps, 1 + w, n + bias)");
}

/* Records the normalised dims of a mean or a norm op, relative to x. */
static int set_dims(rn_interp *I, const rn_arg *dims, int is_shape) {
    if (!dims || dims->kind != A_LIST || dims->n_list < 1)
        return decline(I, "the normalised dims are not a literal list");
    const kiln_tensor_spec *xs = &I->p->inputs[I->role[ROLE_X]];
    int k = dims->n_list;
    if (k > xs->ndim)
        return decline(I, "normalised over %d dims of a %d-d tensor", k, xs->ndim);
    if (is_shape) {
        I->n_shape = k;
        memcpy(I->shape, dims->list, (size_t)k * sizeof dims->list[0]);
    } else {
        for (int i = 0; i < k; i++) {
            int64_t d = dims->list[i] < 0 ? dims->list[i] + xs->ndim : dims->list[i];
            int found = 0;
            for (int j = 0; j < k; j++)
                found |= d == xs->ndim - 1 - j;
            if (!found)
                return decline(I, "normalised over dim %lld, not the last %s",
                               (long long)dims->list[i], k == 1 ? "one" : "ones");
        }
    }
    if (I->k && I->k != k)
        return decline(I, "normalised over %d dims and over %d", I->k, k);
    I->k = k;
    return 1;
}

/* aten::layer_norm / native_layer_norm / rms_norm / _fused_rms_norm: results into out[0..2]. */
static int op_norm(rn_interp *I, const rn_call *c, int layer, int native, rn_val *out, int *n_out) {
    const rn_arg *x = call_arg(c, 0, "input");
    const rn_arg *w = call_arg(c, 2, "weight");
    const rn_arg *b = layer ? call_arg(c, 3, "bias") : NULL;
    const rn_arg *eps = call_arg(c, layer ? 4 : 3, "eps");
    if (!x || x->kind != A_VAR || !bind_x(I, x->val) ||
        !set_dims(I, call_arg(c, 1, "normalized_shape"), 1))
        return 0;
    memset(&out[0], 0, sizeof out[0]);
    out[0].kind = S_N;
    out[0].norm = layer;
    out[0].dt = x->val->dt;
    if (w && w->kind == A_VAR) {
        if (w->val->kind != S_IN || !bind_role(I, ROLE_W, w->val, &I->prog_w) ||
            !prog_add(I, &out[0].prog, STEP_MUL_W))
            return 0;
    } else if (w && w->kind != A_NONE) {
        return decline(I, "aten::%s with a weight kiln cannot follow", c->op);
    }
    if (b && b->kind == A_VAR) {
        if (b->val->kind != S_IN || !bind_role(I, ROLE_B, b->val, &I->prog_b) ||
            !prog_add(I, &out[0].prog, STEP_ADD_B))
            return 0;
    } else if (b && b->kind != A_NONE) {
        return decline(I, "aten::%s with a bias kiln cannot follow", c->op);
    }
    if (x->val->dt != KILN_F32 && !prog_add(I, &out[0].prog, round_step(x->val->dt)))
        return 0;
    if (eps && eps->kind == A_NUM)
        I->eps = eps->num;
    else if (eps && eps->kind != A_NONE)
        return decline(I, "aten::%s with an eps that is not a literal", c->op);
    else /* PyTorch's defaults: 1e-5 for layer_norm, the opmath (fp32) epsilon for rms_norm */
        I->eps = layer ? 1e-5 : (double)FLT_EPSILON;
    I->have_eps = 1;
    I->role[ROLE_EPS] = -1;
    *n_out = 1;
    if (native) {
        memset(&out[1], 0, 2 * sizeof out[1]);
        out[1].kind = layer ? S_MEAN : S_RSTD;
        out[2].kind = S_RSTD;
        out[1].dt = out[2].dt = KILN_F32;
        *n_out = layer ? 3 : 2;
    }
    return 1;
}

/* One call on the right of an assignment: its results (several for the native norms). */
static int interp_call(rn_interp *I, rn_call *c, rn_val *out, int *n_out) {
    const char *op = c->op;
    const rn_arg *a0 = call_arg(c, 0, "self");
    *n_out = 1;
    if (!strcmp(op, "layer_norm") || !strcmp(op, "native_layer_norm"))
        return op_norm(I, c, 1, op[0] == 'n', out, n_out);
    if (!strcmp(op, "rms_norm") || !strcmp(op, "_fused_rms_norm"))
        return op_norm(I, c, 0, op[0] == '_', out, n_out);
    if (!a0 || a0->kind != A_VAR)
        return decline(I, "aten::%s.%s on something that is not a tensor kiln follows", op,
                       c->overload);
    const rn_val *v = a0->val;
    if (!strcmp(op, "to") || !strcmp(op, "_to_copy") || !strcmp(op, "type_as")) {
        const rn_arg *d = NULL;
        if (!strcmp(op, "type_as")) {
            const rn_arg *o = call_arg(c, 1, "other");
            if (!o || o->kind != A_VAR)
                return decline(I, "aten::type_as without a tensor");
            return op_cast(I, v, o->val->dt, out);
        }
        if (!strcmp(op, "to") && !strcmp(c->overload, "device"))
            d = call_arg(c, 2, "dtype");
        else if (!strcmp(op, "to") && !strcmp(c->overload, "other")) {
            const rn_arg *o = call_arg(c, 1, "other");
            if (!o || o->kind != A_VAR)
                return decline(I, "aten::to.other without a tensor");
            return op_cast(I, v, o->val->dt, out);
        } else if (!strcmp(op, "to") && !strcmp(c->overload, "dtype"))
            d = call_arg(c, 1, "dtype");
        else
            d = call_arg(c, -1, "dtype");
        if (!d || d->kind == A_NONE) {
            *out = *v;
            return 1;
        }
        if (d->kind != A_DTYPE)
            return decline(I, "aten::%s.%s with a dtype kiln cannot read", op, c->overload);
        return op_cast(I, v, d->dtype, out);
    }
    if (!strcmp(op, "clone") || !strcmp(op, "contiguous") || !strcmp(op, "alias") ||
        !strcmp(op, "detach") || !strcmp(op, "lift_fresh_copy")) {
        *out = *v;
        return 1;
    }
    if (!strcmp(op, "pow") && !strcmp(c->overload, "Tensor_Scalar")) {
        const rn_arg *e = call_arg(c, 1, "exponent");
        if (v->kind == S_IN && is_num(e, 2))
            return op_square(I, v, out);
        if (v->kind == S_MSE && (is_num(e, -0.5) || is_num(e, 0.5))) {
            *out = *v;
            out->kind = is_num(e, -0.5) ? S_R : S_SQRT;
            return 1;
        }
        return decline(I, "aten::pow that is neither x^2 nor (mean + eps)^-0.5");
    }
    if (!strcmp(op, "square") && v->kind == S_IN)
        return op_square(I, v, out);
    if (!strcmp(op, "mul"))
        return op_mul(I, a0, call_arg(c, 1, "other"), out);
    if (!strcmp(op, "add"))
        return op_add(I, c, out);
    if (!strcmp(op, "mean")) {
        const rn_arg *keep = call_arg(c, 2, "keepdim");
        if (v->kind == S_IN)
            return decline(I,
                           "the mean of x itself: a hand-made LayerNorm (only aten's is matched)");
        if (v->kind != S_SQ)
            return decline(I, "a mean that is not of x^2");
        if (!keep || keep->kind != A_BOOL || !keep->num)
            return decline(I, "a mean without keepdim");
        if (!set_dims(I, call_arg(c, 1, "dim"), 0))
            return 0;
        *out = *v;
        out->kind = S_MS;
        return 1;
    }
    if ((!strcmp(op, "rsqrt") || !strcmp(op, "sqrt")) && v->kind == S_MSE) {
        *out = *v;
        out->kind = op[0] == 'r' ? S_R : S_SQRT;
        return 1;
    }
    if (!strcmp(op, "reciprocal") && v->kind == S_SQRT) {
        *out = *v;
        out->kind = S_R;
        return 1;
    }
    if (!strcmp(op, "div") && !strcmp(c->overload, "Tensor")) {
        const rn_arg *d = call_arg(c, 1, "other");
        if (v->kind == S_IN && is_val(d, S_SQRT)) {
            if (!bind_x(I, v))
                return 0;
            memset(out, 0, sizeof *out);
            out->kind = S_N;
            out->dt = promote(v->dt, KILN_F32);
            return 1;
        }
        return decline(I, "a division that is not x / sqrt(mean(x^2) + eps)");
    }
    if (!strcmp(op, "silu") && v->kind == S_IN) {
        *out = *v;
        if (!prog_add(I, &out->prog, STEP_SILU))
            return 0;
        if (out->dt != KILN_F32 && !prog_add(I, &out->prog, round_step(out->dt)))
            return 0;
        return 1;
    }
    return decline(I, "aten::%s.%s is not part of an RMSNorm/LayerNorm pattern", op, c->overload);
}

/* The problem's outputs: the normalised value (once), its mean and its rstd. */
static int interp_outputs(rn_interp *I, const kiln_opchain *c) {
    if (c->n_outputs < 1 || c->n_outputs > 4)
        return decline(I, "returns more than 4 values or none");
    I->n_out = c->n_outputs;
    for (int i = 0; i < c->n_outputs; i++) {
        const rn_val *v = value_of(I, c->outputs[i]);
        if (!v)
            return decline(I, "returns %s, which kiln cannot follow", I->p->outputs[i].name);
        if (v->kind == S_N) {
            if (I->norm >= 0)
                return decline(I, "returns two normalised tensors");
            I->norm = v->norm;
            I->prog_y = v->prog;
            I->out_role[i] = OUT_Y;
        } else if (v->kind == S_MEAN) {
            I->out_role[i] = OUT_MEAN;
        } else if (v->kind == S_RSTD || v->kind == S_R) {
            I->out_role[i] = OUT_RSTD;
        } else {
            return decline(I, "returns something other than the norm, its mean or its rstd");
        }
    }
    if (I->norm < 0)
        return decline(I, "returns no normalised tensor");
    return 1;
}

/* Runs the op chain over the abstract domain. Returns 1 when it is a row norm. */
static int interp_chain(rn_interp *I, const kiln_opchain *c) {
    for (int i = 0; i < I->p->n_inputs; i++) {
        rn_val *v = &I->in[i];
        v->input = i;
        v->dt = I->p->inputs[i].dtype;
        v->kind = I->p->inputs[i].is_scalar ? S_NUM : S_IN;
    }
    for (int k = 0; k < c->n_ops; k++) {
        rn_call call;
        if (!call_of(I, &c->ops[k], &call) || !interp_call(I, &call, I->res[k], &I->n_res[k]))
            return 0;
    }
    return interp_outputs(I, c);
}

/* ---- shapes and layouts ---- */

/* Rows and columns of workload w; 0 when the shapes do not support the roles. */
int rn_geometry(const kiln_problem *p, int x_input, int k, const kiln_workload *w, int64_t *rows,
                int64_t *cols) {
    int64_t shape[KILN_MAX_DIMS];
    const kiln_tensor_spec *xs = &p->inputs[x_input];
    int64_t numel = kiln_tensor_shape(p, xs, w, shape);
    *cols = 1;
    for (int d = xs->ndim - k; d < xs->ndim; d++)
        *cols *= shape[d];
    *rows = *cols ? numel / *cols : 0;
    return *cols > 0 && *rows > 0;
}

/* Do two tensors have the same shape in every workload? */
static int same_shape(const kiln_problem *p, const kiln_tensor_spec *a, const kiln_tensor_spec *b) {
    if (a->ndim != b->ndim)
        return 0;
    for (int i = 0; i < p->n_workloads; i++) {
        int64_t sa[KILN_MAX_DIMS], sb[KILN_MAX_DIMS];
        kiln_tensor_shape(p, a, &p->workloads[i], sa);
        kiln_tensor_shape(p, b, &p->workloads[i], sb);
        if (memcmp(sa, sb, (size_t)a->ndim * sizeof sa[0]))
            return 0;
    }
    return 1;
}

/* Shapes of every role against x, in every workload. */
static int check_shapes(rn_interp *I) {
    const kiln_problem *p = I->p;
    const kiln_tensor_spec *xs = &p->inputs[I->role[ROLE_X]];
    if (p->n_workloads < 1)
        return decline(I, "no workloads");
    if (I->k < 1 || I->k > xs->ndim)
        return decline(I, "normalised over %d dims of a %d-d x", I->k, xs->ndim);
    for (int wi = 0; wi < p->n_workloads; wi++) {
        const kiln_workload *w = &p->workloads[wi];
        int64_t rows, cols, shape[KILN_MAX_DIMS], s2[KILN_MAX_DIMS];
        if (!rn_geometry(p, I->role[ROLE_X], I->k, w, &rows, &cols))
            return decline(I, "workload %d: x is empty", wi);
        kiln_tensor_shape(p, xs, w, shape);
        for (int d = 0; d < I->n_shape; d++)
            if (I->shape[d] != shape[xs->ndim - I->k + d])
                return decline(I, "normalized_shape [%lld...] is not x's last dims",
                               (long long)I->shape[0]);
        for (int r = ROLE_W; r <= ROLE_B; r++) {
            if (I->role[r] < 0)
                continue;
            const kiln_tensor_spec *ts = &p->inputs[I->role[r]];
            int64_t n = kiln_tensor_shape(p, ts, w, s2);
            if (ts->ndim > I->k || n != cols ||
                memcmp(s2, shape + xs->ndim - ts->ndim, (size_t)ts->ndim * sizeof s2[0]))
                return decline(I, "%s is not shaped like x's normalised dims",
                               p->inputs[I->role[r]].name);
        }
        for (int o = 0; o < p->n_outputs; o++) {
            int64_t n = kiln_tensor_shape(p, &p->outputs[o], w, s2);
            if (I->out_role[o] != OUT_Y && n != rows)
                return decline(I, "output %s does not have one value per row", p->outputs[o].name);
        }
    }
    if (I->role[ROLE_G] >= 0 && !same_shape(p, &p->inputs[I->role[ROLE_G]], xs))
        return decline(I, "the gate is not shaped like x");
    for (int o = 0; o < p->n_outputs; o++) {
        if (!float3(p->outputs[o].dtype))
            return decline(I, "output %s is %s", p->outputs[o].name,
                           kiln_dtype_name(p->outputs[o].dtype));
        if (I->out_role[o] == OUT_Y && !same_shape(p, &p->outputs[o], xs))
            return decline(I, "output %s is not shaped like x", p->outputs[o].name);
    }
    return 1;
}

/* Captured layouts: the kernel reads stored bytes, so x, the gate and y must be stored with their
 * last dim last, and in one and the same order: a permutation of the leading dims only reorders the
 * rows, which is harmless when x, the gate and y agree (and wrong when they do not). */
static int check_layouts(rn_interp *I) {
    const kiln_tensor_spec *first = NULL; /* the memory order every row-shaped tensor must share */
    for (int t = 0; t < I->p->n_inputs + I->p->n_outputs; t++) {
        int is_in = t < I->p->n_inputs;
        const kiln_tensor_spec *ts = is_in ? &I->p->inputs[t] : &I->p->outputs[t - I->p->n_inputs];
        int rowlike = is_in ? (t == I->role[ROLE_X] || t == I->role[ROLE_G])
                            : I->out_role[t - I->p->n_inputs] == OUT_Y;
        const kiln_layout *l = &ts->layout;
        if (l->expanded)
            return decline(I, "%s is broadcast (stored once, expanded)", ts->name);
        if (l->permuted && !rowlike)
            return decline(I, "%s is stored broadcast or permuted", ts->name);
        if (!rowlike)
            continue;
        if (l->permuted && (l->perm[ts->ndim - 1] != ts->ndim - 1 || I->k != 1))
            return decline(I, "%s is stored with its last dim moved (memory order)", ts->name);
        if (!first)
            first = ts;
        else if (first->ndim != ts->ndim ||
                 memcmp(first->layout.perm, l->perm, sizeof(int) * (size_t)ts->ndim))
            return decline(I, "%s and %s are stored in different memory orders", first->name,
                           ts->name);
    }
    return 1;
}

/* ---- hand-written problems ---- */

static int name_has(const char *s, const char *word) {
    for (; *s; s++) {
        size_t i = 0;
        while (word[i] && tolower((unsigned char)s[i]) == word[i])
            i++;
        if (!word[i])
            return 1;
    }
    return 0;
}

static int is_ident(char c) {
    return isalnum((unsigned char)c) || c == '_';
}

/* eps from the reference text: `NAME = literal` or `NAME=literal` with NAME containing "eps", else
 * the first `+ literal` with 0 < literal < 0.01 (`mean(...) + 1e-5`). Returns 1 when found. */
static int source_eps(const char *src, double *eps) {
    for (const char *s = src; *s; s++) {
        if (!name_has(s, "eps") || (s > src && is_ident(s[-1])))
            continue;
        const char *e = s;
        while (is_ident(*e))
            e++;
        while (*e == ' ')
            e++;
        if (*e != '=' || e[1] == '=')
            continue;
        char *end;
        double v = strtod(e + 1, &end);
        if (end != e + 1 && v > 0 && v < 1) {
            *eps = v;
            return 1;
        }
    }
    for (const char *s = src; *s; s++) {
        if (*s != '+')
            continue;
        const char *e = s + 1;
        while (*e == ' ')
            e++;
        if (!isdigit((unsigned char)*e) && *e != '.')
            continue;
        char *end;
        double v = strtod(e, &end);
        if (end != e && !is_ident(*end) && v > 0 && v < 0.01) {
            *eps = v;
            return 1;
        }
    }
    return 0;
}

/* Gemma's weight offset in free text: `1 + w`, `1.0 + w.float()`, `(w + 1)`, `w.float() + 1.0`. */
static int source_weight_offset(const char *src, const char *wname) {
    char *c = xmalloc(strlen(src) + 1);
    size_t n = 0;
    for (const char *s = src; *s; s++)
        if (!isspace((unsigned char)*s))
            c[n++] = *s;
    c[n] = 0;
    size_t wl = strlen(wname);
    int found = 0;
    for (char *s = strstr(c, wname); s && !found; s = strstr(s + 1, wname)) {
        if ((s > c && is_ident(s[-1])) || is_ident(s[wl]))
            continue;
        const char *b = s;
        while (b > c && b[-1] == '(')
            b--;
        if (b - c >= 2 && b[-1] == '+') {
            const char *num = b - 1;
            while (num > c && (isdigit((unsigned char)num[-1]) || num[-1] == '.'))
                num--;
            double v = strtod(num, NULL);
            found = num < b - 1 && v == 1.0 && (num == c || !is_ident(num[-1]));
        }
        const char *a = s + wl;
        static const char *const casts[] = {".float()", ".to(torch.float32)",
                                            ".to(dtype=torch.float32)"};
        for (size_t i = 0; i < sizeof casts / sizeof casts[0]; i++)
            if (strncmp(a, casts[i], strlen(casts[i])) == 0)
                a += strlen(casts[i]);
        while (*a == ')')
            a++;
        if (!found && a[0] == '+') {
            char *end;
            double v = strtod(a + 1, &end);
            found = end != a + 1 && v == 1.0 && !is_ident(*end);
        }
    }
    free(c);
    return found;
}

/* The dim of a mean call whose arguments start at args: its first argument when that is an integer
 * (`.mean(-1)`, `.mean([1])`), else its `dim=` argument. Returns 0 when neither is a literal. */
static int mean_dim(const char *args, long *dim) {
    const char *end = args;
    for (int depth = 0; *end && (depth > 0 || *end != ')'); end++)
        depth += (*end == '(' || *end == '[') - (*end == ')' || *end == ']');
    const char *a = args;
    while (a < end && (*a == ' ' || *a == '[' || *a == '('))
        a++;
    if (!(a < end && (isdigit((unsigned char)*a) || *a == '-'))) {
        const char *k = strstr(args, "dim=");
        if (!k || k >= end)
            return 0;
        for (a = k + 4; a < end && (*a == ' ' || *a == '[' || *a == '('); a++)
            ;
    }
    char *num_end;
    *dim = strtol(a, &num_end, 10);
    return num_end != a && num_end <= end;
}

/* Problems written by hand (SOL-ExecBench's rmsnorm_h4096): roles from op_type and shapes, eps from
 * a scalar input or the source, and the common program: fp32 affine (weight, bias), one rounding at
 * the store. A reference that rounds differently (Llama's cast before the weight) differs from it
 * by one rounding of the output dtype, well inside that dtype's tolerance. */
static int match_handwritten(rn_interp *I, int layer) {
    const kiln_problem *p = I->p;
    char op[64];
    size_t n = 0;
    for (const char *s = p->op_type ? p->op_type : ""; *s && n + 1 < sizeof op; s++)
        if (*s != '_' && *s != '-' && *s != ' ')
            op[n++] = (char)tolower((unsigned char)*s);
    op[n] = 0;
    if (strcmp(op, layer ? "layernorm" : "rmsnorm"))
        return decline(I, "op_type '%s' is not %s (and the problem has no captured \"kiln\" op)",
                       p->op_type ? p->op_type : "", layer ? "layernorm" : "rmsnorm");
    for (int i = 0; i < p->n_inputs; i++) {
        const kiln_tensor_spec *t = &p->inputs[i];
        if (t->is_scalar) {
            if (!name_has(t->name, "eps") || !kiln_dtype_is_float(t->dtype))
                return decline(I, "scalar input %s is not an eps", t->name);
            I->role[ROLE_EPS] = i;
            I->have_eps = 1;
        } else if (I->role[ROLE_X] < 0) {
            if (!float3(t->dtype))
                return decline(I, "x (%s) is %s", t->name, kiln_dtype_name(t->dtype));
            I->role[ROLE_X] = i;
        } else if (t->ndim >= 1 && t->ndim < p->inputs[I->role[ROLE_X]].ndim) {
            int bias = layer && (name_has(t->name, "bias") || name_has(t->name, "beta") ||
                                 I->role[ROLE_W] >= 0);
            int role = bias ? ROLE_B : ROLE_W;
            if (I->role[role] >= 0 || (!layer && I->role[ROLE_W] >= 0))
                return decline(I, "more per-column inputs than %s has",
                               layer ? "a LayerNorm" : "an RMSNorm");
            if (!float3(t->dtype))
                return decline(I, "%s is %s", t->name, kiln_dtype_name(t->dtype));
            I->role[role] = i;
        } else {
            return decline(I, "input %s has no role in %s", t->name,
                           layer ? "a LayerNorm" : "an RMSNorm");
        }
    }
    if (I->role[ROLE_X] < 0 || p->inputs[I->role[ROLE_X]].ndim < 1)
        return decline(I, "no tensor input to normalise");
    I->k = I->role[ROLE_W] >= 0 ? p->inputs[I->role[ROLE_W]].ndim : 1;
    if (I->role[ROLE_B] >= 0 && p->inputs[I->role[ROLE_B]].ndim != I->k)
        return decline(I, "weight and bias have different shapes");
    const char *src = p->reference ? p->reference : "";
    /* a mean over an explicit dim other than the last one */
    for (const char *s = strstr(src, "mean("); s; s = strstr(s + 1, "mean(")) {
        long d;
        if (mean_dim(s + 5, &d) && d != -1 && d != p->inputs[I->role[ROLE_X]].ndim - 1)
            return decline(I, "the reference takes a mean over dim %ld, not the last", d);
    }
    if (!I->have_eps) {
        if (source_eps(src, &I->eps))
            I->have_eps = 1;
        else if (strstr(src, layer ? "layer_norm(" : "rms_norm(")) {
            I->eps = layer ? 1e-5 : (double)FLT_EPSILON; /* PyTorch's defaults */
            I->have_eps = 1;
        } else {
            return decline(I, "no eps in the reference (write EPS = 1e-5, or pass a scalar "
                              "input named eps)");
        }
    }
    I->norm = layer;
    I->prog_y.n = 0;
    if (I->role[ROLE_W] >= 0) {
        prog_add(I, &I->prog_y, STEP_MUL_W);
        if (!layer && source_weight_offset(src, p->inputs[I->role[ROLE_W]].name))
            prog_add(I, &I->prog_w, STEP_ADD_ONE);
    }
    if (I->role[ROLE_B] >= 0)
        prog_add(I, &I->prog_y, STEP_ADD_B);
    if (p->n_outputs != 1 && !(layer && p->n_outputs == 3))
        return decline(I, "%d outputs (expected y%s)", p->n_outputs,
                       layer ? ", or y, mean, rstd" : "");
    I->n_out = p->n_outputs;
    for (int o = 0; o < p->n_outputs; o++)
        I->out_role[o] = o;
    return 1;
}

/* ---- the matcher ---- */

int rn_match(const kiln_problem *p, kiln_match *m, char *why, size_t why_len, int layer) {
    rn_interp *I = xcalloc(1, sizeof *I);
    I->p = p;
    I->why = why;
    I->why_len = why_len;
    if (why && why_len)
        why[0] = 0;
    for (int r = 0; r < 5; r++)
        I->role[r] = -1;
    I->norm = -1;
    I->in = xcalloc((size_t)p->n_inputs + 1, sizeof *I->in);
    const char *kind = kiln_problem_kiln_str(p, "kind");
    kiln_opchain *c = NULL;
    kiln_err err;
    char origin[160];
    int ok = 1;
    if (kind && !strcmp(kind, "aten")) {
        const char *name = kiln_problem_kiln_str(p, "aten");
        name = name ? name : "?";
        snprintf(origin, sizeof origin, "captured %s", name);
        static const char *const known[] = {"aten::layer_norm.", "aten::native_layer_norm.",
                                            "aten::rms_norm.", "aten::_fused_rms_norm."};
        ok = 0;
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
            ok |= !strncmp(name, known[i], strlen(known[i]));
        if (!ok)
            decline(I, "%s is not a row norm", name);
    } else if (kind && !strcmp(kind, "module")) {
        const char *cls = kiln_problem_kiln_str(p, "module_class");
        snprintf(origin, sizeof origin, "module %s", cls ? cls : "?");
    } else if (kiln_opchain_described(p)) {
        snprintf(origin, sizeof origin, "chain");
    } else {
        snprintf(origin, sizeof origin, "hand-written op_type %s", p->op_type ? p->op_type : "?");
        ok = match_handwritten(I, layer);
    }
    if (ok && kiln_opchain_described(p)) {
        if (kiln_opchain_read(p, &c, &err) != KILN_OK)
            ok = decline(I, "%s", err.msg);
        else
            ok = interp_chain(I, c);
        kiln_opchain_free(c);
    }
    if (ok && I->norm != layer)
        ok = decline(I, "%s, not %s", I->norm ? "a LayerNorm" : "an RMSNorm",
                     layer ? "a LayerNorm" : "an RMSNorm");
    if (ok && I->n_out != p->n_outputs)
        ok = decline(I, "returns %d values for %d outputs", I->n_out, p->n_outputs);
    if (ok && I->role[ROLE_X] < 0)
        ok = decline(I, "no input is normalised");
    if (ok && !I->have_eps)
        ok = decline(I, "no eps is added");
    if (ok)
        ok = check_shapes(I) && check_layouts(I);
    if (ok) {
        int n_y = 0;
        for (int o = 0; o < I->n_out; o++)
            n_y += I->out_role[o] == OUT_Y;
        if (n_y != 1)
            ok = decline(I, "no normalised output");
    }
    if (!ok) {
        free(I->in);
        free(I);
        return 0;
    }
    /* the match */
    const kiln_tensor_spec *xs = &p->inputs[I->role[ROLE_X]];
    char rows_expr[256] = "", cols_expr[256] = "";
    size_t ro = 0, co = 0;
    for (int d = 0; d < xs->ndim; d++) {
        char piece[96];
        if (xs->axis[d] < 0)
            snprintf(piece, sizeof piece, "%lld", (long long)xs->literal[d]);
        else
            snprintf(piece, sizeof piece, "%s", p->axes[xs->axis[d]].name);
        if (d < xs->ndim - I->k)
            ro += (size_t)snprintf(rows_expr + ro, sizeof rows_expr - ro, "%s%s", ro ? "*" : "",
                                   piece);
        else
            co += (size_t)snprintf(cols_expr + co, sizeof cols_expr - co, "%s%s", co ? "*" : "",
                                   piece);
    }
    snprintf(m->rows_expr, sizeof m->rows_expr, "%s", ro ? rows_expr : "1");
    snprintf(m->cols_expr, sizeof m->cols_expr, "%s", cols_expr);
    for (int r = 0; r < 5; r++)
        m->input_of_role[r] = I->role[r];
    for (int o = 0; o < I->n_out; o++)
        m->output_of_role[I->out_role[o]] = o;
    kiln_match_set(m, "kind", layer);
    kiln_match_set(m, "eps", I->role[ROLE_EPS] >= 0 ? 0 : I->eps);
    kiln_match_set(m, "norm_dims", I->k);
    kiln_match_set(m, "prog_y", rn_prog_pack(&I->prog_y));
    kiln_match_set(m, "prog_w", rn_prog_pack(&I->prog_w));
    kiln_match_set(m, "prog_b", rn_prog_pack(&I->prog_b));
    kiln_match_set(m, "prog_g", rn_prog_pack(&I->prog_g));
    int add_one = 0, cast_first = 0;
    for (int i = 0; i < I->prog_w.n; i++)
        add_one |= I->prog_w.step[i] == STEP_ADD_ONE;
    for (int i = 0; i < I->prog_y.n && I->prog_y.step[i] != STEP_MUL_W; i++)
        cast_first |= I->prog_y.step[i] <= STEP_ROUND_F16 && I->role[ROLE_W] >= 0;
    snprintf(m->variant, sizeof m->variant, "%s%s%s%s%s%s", layer ? "layernorm" : "rmsnorm",
             I->role[ROLE_W] < 0 ? "_noweight"
             : add_one           ? "_1p_weight"
                                 : "_weight",
             I->role[ROLE_B] >= 0 ? "_bias" : "", cast_first ? "_cast_first" : "",
             I->role[ROLE_G] >= 0 ? "_gated" : "",
             m->output_of_role[OUT_RSTD] >= 0 ? "_stats" : "");
    char y[512], w[256], g[256], eps[64];
    rn_prog_render(&I->prog_y, layer ? "(x-mean)*rstd" : "x*rstd", 0, y, sizeof y);
    rn_prog_render(&I->prog_w, "w", 0, w, sizeof w);
    rn_prog_render(&I->prog_g, "g", 0, g, sizeof g);
    if (I->role[ROLE_EPS] >= 0)
        snprintf(eps, sizeof eps, "input %s", p->inputs[I->role[ROLE_EPS]].name);
    else
        snprintf(eps, sizeof eps, "%g", I->eps);
    char *how =
        xasprintf("%s: y = %s%s%s%s%s, eps %s", origin, y, I->prog_w.n ? ", w = " : "",
                  I->prog_w.n ? w : "", I->prog_g.n ? ", g = " : "", I->prog_g.n ? g : "", eps);
    snprintf(m->how, sizeof m->how, "%s", how);
    free(how);
    free(I->in);
    free(I);
    return 1;
}
