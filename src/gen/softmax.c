/* softmax.c: the softmax kernel family: y = softmax(x [* scale] [+ mask], dim=-1) for float32,
 * bfloat16 and float16 storage with fp32 math, from a thread per row to a row split across a
 * thread-block cluster, with its parameter space, constraints, matcher and emitters.
 *
 * Why these choices. Softmax over the last dimension is memory-bound everywhere: 5-7 flops per
 * element against 4-8 bytes, so the speed of light is reading x once and writing y once. What
 * stands between a kernel and that floor is the shape of the rows, and the space is built
 * around it:
 *
 *  - Short rows, many of them ([8192, 256], a router's [2048, 256]): a row must not be worth a
 *    block. SMX_TPR threads share a row (1..32 inside a warp, reducing with shuffles only, no
 *    barrier) and SMX_THREADS / SMX_TPR rows share a block; SMX_PERSIST caps the grid at k
 *    blocks per SM that loop over the row groups, for when tens of thousands of tiny blocks
 *    cost more to schedule than their rows take.
 *  - Rows of a few thousand (attention probabilities, [32768, 4096]): a block or a few warps
 *    per row, the row held in registers (SMX_CACHE 1) so that it is read once: every load of
 *    the row is issued before any is used, then the reductions and the write run on registers.
 *  - Few, very long rows ([16, 262144], 1 MiB each): a block per row would use 16 of 132 SMs.
 *    A cluster of SMX_SPLIT blocks (2..16) shares each row; each block holds its slice in
 *    registers or in shared memory (SMX_CACHE 2, staged with cp.async) and the blocks exchange
 *    their partial (max, sum) through distributed shared memory, so the row is still read once
 *    and written once. A split over independent blocks through global scratch and a second
 *    launch would read x twice and pay a launch; the cluster needs neither.
 *  - The reduction form (SMX_ONLINE): two-pass (the max, then the sum of exp(x - max): two
 *    reductions) or online ((max, sum) pairs that merge as m = max(m1, m2),
 *    s = s1 e^(m1-m) + s2 e^(m2-m): one reduction, one cluster exchange). When the row is not
 *    cached (SMX_CACHE 0) the online form reads x twice instead of three times.
 *  - SMX_VEC elements per access (0: the widest vector of at most 16 bytes that divides every
 *    row) and SMX_UNROLL vectors in flight per thread in streaming loops keep enough requests
 *    in flight.
 *
 * What it matches (from the problem's op chain, src/formats/opchain.h). A captured
 * aten::_softmax.default (or aten::softmax.int) over the last dimension; a captured leaf module
 * whose forward is a _softmax with casts around it; a "kind": "chain" (a fused pattern written by
 * hand or by a fusion agent) of casts, a scale multiply, a mask add and the softmax; and
 * hand-written problems with op_type
 * "softmax": one tensor x, optional `mask` and `scale` inputs, one output of x's shape. Casts
 * into and out of the op are one kernel: the `softmax(x.float(), -1).to(bf16)` of eager attention
 * reads bf16 and writes bf16. Eager PyTorch rounds `x * scale` to x's dtype and `+ mask` to the
 * promoted dtype before the softmax; the matcher works out those roundings from the op order
 * (docs/families/softmax.md) and the kernel reproduces them, so that it agrees with the reference
 * to the last bit of the logits.
 *
 * The CPU emission ignores the geometry: one source per problem, which sweep runs once. */
#include "family.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

/* Parameter order: the first parameter varies fastest in a point's index, so the decisions that
 * matter most (cache, split, threads per row) come last and an evenly spread sample of the space
 * covers them. Index 0 (UNROLL 1, PERSIST 0, ONLINE 1, VEC auto, THREADS 64, SPLIT 1, CACHE 1,
 * TPR 32: a warp per row held in registers) is valid for every problem with rows of at most 4096
 * elements. */
enum { P_UNROLL, P_PERSIST, P_ONLINE, P_VEC, P_THREADS, P_SPLIT, P_CACHE, P_TPR, P_COUNT };

/* Roles of the problem's tensors in kiln_match. */
enum { ROLE_X = 0, ROLE_MASK = 1, ROLE_SCALE = 2 };
enum { SCALE_NONE = 0, SCALE_ARG = 1, SCALE_TENSOR = 2, SCALE_CONST = 3 };

#define SMX_SMS 132         /* H200: the persistent grid is k blocks per SM */
#define SMX_MAX_SMEM 232448 /* dynamic + static shared memory of a block on sm_90 (227 KiB) */
#define SMX_MAX_ROW_FLOATS_REG 128 /* CACHE 1: floats of x a thread may hold in registers */

/* ---- small helpers ---- */

/* The template's dtype code: 0 float32, 1 bfloat16, 2 float16, -1 anything else. */
static int dt_code(kiln_dtype t) {
    return t == KILN_F32 ? 0 : t == KILN_BF16 ? 1 : t == KILN_F16 ? 2 : -1;
}

static int is_low(kiln_dtype t) {
    return t == KILN_BF16 || t == KILN_F16;
}

/* PyTorch's type promotion among the three float types. */
static kiln_dtype promote(kiln_dtype a, kiln_dtype b) {
    if (a == b)
        return a;
    return KILN_F32; /* f32 with anything, and bf16 with f16 */
}

static int name_is(const char *name, const char *const *list) {
    for (int i = 0; list[i]; i++)
        if (strcmp(name, list[i]) == 0)
            return 1;
    return 0;
}

static void why_set(char *why, size_t why_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void why_set(char *why, size_t why_len, const char *fmt, ...) {
    if (!why || !why_len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
}

/* ---- the chain of ops and the roundings it implies ---- */

typedef enum { OP_COPY, OP_MUL, OP_ADD, OP_SOFTMAX } chain_kind;

typedef struct {
    chain_kind kind;
    kiln_dtype cast; /* OP_COPY: the target dtype when known (else float32 before the softmax) */
    int cast_known;
    int half_to_float; /* OP_SOFTMAX */
} chain_op;

/* Works out where eager PyTorch rounds along ops (in order) and stores the facts. x's dtype starts
 * the chain; a cast before the softmax changes the working dtype, a multiply (the scale) rounds to
 * it, an add (the mask) promotes and rounds, and a softmax computed in a narrower dtype than the
 * output is rounded there before the final cast. Returns 0 and says why for chains this family
 * cannot do. */
static int chain_facts(const chain_op *ops, int n, kiln_dtype tx, int has_scale, kiln_dtype tmask,
                       int has_mask, kiln_dtype tout, kiln_match *m, char *why, size_t why_len) {
    kiln_dtype cur = tx, sm = tx;
    int seen_sm = 0, n_mul = 0, n_add = 0;
    int round_scaled = -1, round_masked = -1;
    for (int i = 0; i < n; i++) {
        switch (ops[i].kind) {
        case OP_COPY:
            if (!seen_sm) {
                cur = ops[i].cast_known ? ops[i].cast : KILN_F32;
                if (dt_code(cur) < 0) {
                    why_set(why, why_len, "a cast to %s before the softmax", kiln_dtype_name(cur));
                    return 0;
                }
            }
            break;
        case OP_MUL:
            if (seen_sm || !has_scale || n_add || n_mul) {
                why_set(why, why_len,
                        "a multiply that is not one scale of the logits before the "
                        "mask");
                return 0;
            }
            n_mul++;
            round_scaled = is_low(cur) ? dt_code(cur) : -1;
            break;
        case OP_ADD:
            if (seen_sm || !has_mask || n_add) {
                why_set(why, why_len, "an add that is not one mask of the logits");
                return 0;
            }
            n_add++;
            cur = promote(cur, tmask);
            round_masked = is_low(cur) ? dt_code(cur) : -1;
            break;
        case OP_SOFTMAX:
            if (seen_sm) {
                why_set(why, why_len, "two softmaxes in one chain");
                return 0;
            }
            seen_sm = 1;
            sm = ops[i].half_to_float ? KILN_F32 : cur;
            break;
        }
    }
    if (!seen_sm) {
        why_set(why, why_len, "no softmax in the chain");
        return 0;
    }
    if (has_scale && !n_mul) {
        why_set(why, why_len, "a scale input but no multiply in the chain");
        return 0;
    }
    if (has_mask && !n_add) {
        why_set(why, why_len, "a mask input but no add in the chain");
        return 0;
    }
    kiln_match_set(m, "round_scaled", round_scaled);
    kiln_match_set(m, "round_masked", round_masked);
    kiln_match_set(m, "round_result", (sm != tout && sm != KILN_F32) ? dt_code(sm) : -1);
    return 1;
}

/* The eager reading of a hand-written softmax problem: `softmax(x * scale + mask, -1)` in x's dtype
 * when the output has the dtype eager PyTorch would give, else the fp32 chain
 * `softmax(x.float() * scale + mask, -1).to(out)`. */
static int eager_facts(kiln_dtype tx, int has_scale, kiln_dtype tmask, int has_mask,
                       kiln_dtype tout, kiln_match *m, char *why, size_t why_len) {
    chain_op ops[4];
    int n = 0;
    kiln_dtype eager = has_mask ? promote(tx, tmask) : tx;
    if (tout != eager)
        ops[n++] = (chain_op){OP_COPY, KILN_F32, 1, 0};
    if (has_scale)
        ops[n++] = (chain_op){OP_MUL, KILN_F32, 0, 0};
    if (has_mask)
        ops[n++] = (chain_op){OP_ADD, KILN_F32, 0, 0};
    ops[n++] = (chain_op){OP_SOFTMAX, KILN_F32, 0, 0};
    return chain_facts(ops, n, tx, has_scale, tmask, has_mask, tout, m, why, why_len);
}

/* ---- the matcher ---- */

static int op_is_softmax(const char *op) {
    return strcmp(op, "aten::_softmax.default") == 0 || strcmp(op, "aten::softmax.int") == 0;
}

/* Why an aten op that looks like a softmax is not this family's, or NULL. */
static const char *not_softmax_reason(const char *op) {
    if (strstr(op, "log_softmax"))
        return "log_softmax is not this family (it returns x - logsumexp, not probabilities)";
    if (strstr(op, "_safe_softmax"))
        return "_safe_softmax gives 0 for fully masked rows where this family gives NaN";
    if (strstr(op, "backward"))
        return "a softmax backward is not this family";
    return NULL;
}

/* Why a tensor's stored layout does not let rows be walked, or NULL: it must be dense (or a
 * contiguous copy), or a dense permutation that keeps the last dimension last. */
static const char *layout_ok(const kiln_tensor_spec *t) {
    if (t->ndim < 1)
        return NULL;
    if (t->layout.expanded)
        return "is broadcast (a stride-0 dimension stored once)";
    if (t->layout.perm[t->ndim - 1] != t->ndim - 1)
        return "is stored with the softmax dimension not innermost (not contiguous along it)";
    return NULL;
}

static int same_order(const kiln_tensor_spec *a, const kiln_tensor_spec *b) {
    return a->ndim == b->ndim &&
           memcmp(a->layout.perm, b->layout.perm, sizeof(int) * (size_t)a->ndim) == 0;
}

/* Checks the tensors of a matched problem and fills roles, dtypes and the row/column expressions.
 */
static int match_tensors(const kiln_problem *p, kiln_match *m, int ix, int imask, int iscale,
                         const double *const_scale, char *why, size_t why_len) {
    const kiln_tensor_spec *x = &p->inputs[ix];
    if (p->n_outputs != 1) {
        why_set(why, why_len, "%d outputs; a softmax has one", p->n_outputs);
        return 0;
    }
    const kiln_tensor_spec *y = &p->outputs[0];
    if (x->is_scalar || x->ndim < 1) {
        why_set(why, why_len, "input %s is a scalar; a softmax needs a dimension", x->name);
        return 0;
    }
    if (dt_code(x->dtype) < 0 || dt_code(y->dtype) < 0) {
        why_set(why, why_len, "dtypes %s -> %s; this family does float32, bfloat16 and float16",
                kiln_dtype_name(x->dtype), kiln_dtype_name(y->dtype));
        return 0;
    }
    if (!kiln_tensor_same_shape(p, x, y)) {
        why_set(why, why_len, "output %s does not have the shape of %s", y->name, x->name);
        return 0;
    }
    m->input_of_role[ROLE_X] = ix;
    m->output_of_role[0] = 0;
    kiln_match_set(m, "tin", dt_code(x->dtype));
    kiln_match_set(m, "tout", dt_code(y->dtype));
    if (imask >= 0) {
        const kiln_tensor_spec *mk = &p->inputs[imask];
        if (mk->is_scalar || dt_code(mk->dtype) < 0) {
            why_set(why, why_len, "mask %s is %s %s; this family adds a float tensor mask",
                    mk->name, mk->is_scalar ? "a scalar of" : "a tensor of",
                    kiln_dtype_name(mk->dtype));
            return 0;
        }
        if (mk->ndim < 1 || mk->ndim > x->ndim) {
            why_set(why, why_len, "mask %s has %d dimensions for %d of %s", mk->name, mk->ndim,
                    x->ndim, x->name);
            return 0;
        }
        for (int w = 0; w < p->n_workloads; w++) {
            int64_t sx[KILN_MAX_DIMS], sm[KILN_MAX_DIMS];
            kiln_tensor_shape(p, x, &p->workloads[w], sx);
            kiln_tensor_shape(p, mk, &p->workloads[w], sm);
            for (int d = 0; d < mk->ndim; d++) {
                int64_t md = sm[mk->ndim - 1 - d], xd = sx[x->ndim - 1 - d];
                int last = d == 0;
                if (md != xd && (last || md != 1)) {
                    why_set(why, why_len,
                            "mask %s does not broadcast to %s (workload %d: %lld vs %lld%s)",
                            mk->name, x->name, w, (long long)md, (long long)xd,
                            last ? " along the softmax dimension" : "");
                    return 0;
                }
            }
        }
        m->input_of_role[ROLE_MASK] = imask;
        kiln_match_set(m, "has_mask", 1);
        kiln_match_set(m, "tmask", dt_code(mk->dtype));
        kiln_match_set(m, "mask_direct", kiln_tensor_same_shape(p, x, mk));
    }
    if (iscale >= 0) {
        const kiln_tensor_spec *sc = &p->inputs[iscale];
        if (!(sc->is_scalar || sc->ndim == 0) || dt_code(sc->dtype) < 0) {
            why_set(why, why_len, "scale %s is not a float scalar or 0-d float tensor", sc->name);
            return 0;
        }
        m->input_of_role[ROLE_SCALE] = iscale;
        kiln_match_set(m, "has_scale", 1);
        kiln_match_set(m, "scale_kind", sc->is_scalar ? SCALE_ARG : SCALE_TENSOR);
        kiln_match_set(m, "tscale", dt_code(sc->dtype));
    } else if (const_scale) {
        /* a constant scale: a chain's multiply by a number, or "kiln": {"scale": 0.125} */
        kiln_match_set(m, "has_scale", 1);
        kiln_match_set(m, "scale_kind", SCALE_CONST);
        kiln_match_set(m, "scale_const", *const_scale);
    }
    /* rows: the product of the leading dimensions; cols: the last */
    size_t off = 0;
    m->rows_expr[0] = 0;
    for (int d = 0; d + 1 < x->ndim; d++) {
        char e[96];
        kiln_tensor_dim_expr(p, x, d, e, sizeof e);
        off += (size_t)snprintf(m->rows_expr + off, sizeof m->rows_expr - off, "%s%s", d ? "*" : "",
                                e);
    }
    if (x->ndim == 1)
        snprintf(m->rows_expr, sizeof m->rows_expr, "1");
    kiln_tensor_dim_expr(p, x, x->ndim - 1, m->cols_expr, sizeof m->cols_expr);
    return 1;
}

static const char *const mask_names[] = {"mask", "attn_mask", "attention_mask", NULL};
static const char *const scale_names[] = {"scale", "softmax_scale", NULL};

/* Roles by name for hand-written and chain problems: x is the one other tensor input. */
static int roles_by_name(const kiln_problem *p, int *ix, int *imask, int *iscale, char *why,
                         size_t why_len) {
    *ix = *imask = *iscale = -1;
    for (int i = 0; i < p->n_inputs; i++) {
        const char *n = p->inputs[i].name;
        if (name_is(n, mask_names) && *imask < 0)
            *imask = i;
        else if (name_is(n, scale_names) && *iscale < 0)
            *iscale = i;
        else if (*ix < 0)
            *ix = i;
        else {
            why_set(why, why_len, "inputs %s and %s: a softmax takes one tensor (plus mask, scale)",
                    p->inputs[*ix].name, n);
            return 0;
        }
    }
    if (*ix < 0) {
        why_set(why, why_len, "no input to take the softmax of");
        return 0;
    }
    return 1;
}

/* Roles from a chain's wiring, for captured chains whose inputs are named input0, input1...: x is
 * the tensor the first op reads first; an input added to the running value is the mask, one
 * multiplied into it the scale. Every input must get a role. */
static int roles_by_wiring(const kiln_problem *p, const kiln_opchain *c, int *ix, int *imask,
                           int *iscale, char *why, size_t why_len) {
    *ix = *imask = *iscale = -1;
    if (c->n_ops > 0)
        *ix = kiln_arg_input(kiln_op_arg(&c->ops[0], 0, "self"));
    if (*ix < 0) {
        why_set(why, why_len, "the chain's first op does not read an input");
        return 0;
    }
    for (int i = 0; i < c->n_ops; i++) {
        const kiln_op *op = &c->ops[i];
        int add = kiln_op_is(op, "aten::add.Tensor"), mul = kiln_op_is(op, "aten::mul.Tensor");
        if (!add && !mul)
            continue;
        int a = kiln_arg_input(kiln_op_arg(op, 0, "self"));
        int b = kiln_arg_input(kiln_op_arg(op, 1, "other"));
        int other = a >= 0 && a != *ix ? a : b >= 0 && b != *ix ? b : -1;
        int *role = add ? imask : iscale;
        if (other < 0 || *role == other)
            continue;
        if (*role >= 0 || other == *imask || other == *iscale) {
            why_set(why, why_len, "input %s has more than one role in the chain",
                    p->inputs[other].name);
            return 0;
        }
        *role = other;
    }
    for (int i = 0; i < p->n_inputs; i++) {
        if (i != *ix && i != *imask && i != *iscale) {
            why_set(why, why_len, "input %s is neither the softmax's operand, a mask nor a scale",
                    p->inputs[i].name);
            return 0;
        }
    }
    return 1;
}

static int dim_is_last(int64_t dim, int ndim) {
    return dim == -1 || dim == ndim - 1;
}

static kiln_dtype dtype_or(const kiln_problem *p, int i, kiln_dtype dflt) {
    return i >= 0 ? p->inputs[i].dtype : dflt;
}

/* One op of a chain as the roundings see it: a cast (_to_copy or to.dtype, with its dtype), a
 * multiply, an add or a softmax (softmax.int with a dtype: a cast, then the softmax). Returns the
 * entries written (0: none of these); *dim gets a softmax's dim (-1 when it has none). */
static int to_chain_ops(const kiln_op *op, chain_op *out, int64_t *dim) {
    if (kiln_op_is(op, "aten::_to_copy.default")) {
        const kiln_arg *t = kiln_op_arg(op, -1, "dtype");
        int known = t && t->kind == KILN_ARG_DTYPE;
        out[0] = (chain_op){OP_COPY, known ? t->dtype : KILN_F32, known, 0};
        return 1;
    }
    if (kiln_op_is(op, "aten::to.dtype")) { /* what inference mode dispatches for .to(dtype) */
        const kiln_arg *t = kiln_op_arg(op, 1, "dtype");
        if (!t || t->kind != KILN_ARG_DTYPE)
            return 0;
        out[0] = (chain_op){OP_COPY, t->dtype, 1, 0};
        return 1;
    }
    if (kiln_op_is(op, "aten::mul.Tensor") || kiln_op_is(op, "aten::mul.Scalar")) {
        out[0] = (chain_op){OP_MUL, KILN_F32, 0, 0};
        return 1;
    }
    if (kiln_op_is(op, "aten::add.Tensor")) {
        out[0] = (chain_op){OP_ADD, KILN_F32, 0, 0};
        return 1;
    }
    if (!op_is_softmax(op->aten))
        return 0;
    const kiln_arg *d = kiln_op_arg(op, 1, "dim");
    *dim = d && d->kind == KILN_ARG_NUM ? (int64_t)d->num : -1;
    int n = 0;
    if (kiln_op_is(op, "aten::softmax.int")) {
        const kiln_arg *t = kiln_op_arg(op, 2, "dtype");
        if (t && t->kind == KILN_ARG_DTYPE)
            out[n++] = (chain_op){OP_COPY, t->dtype, 1, 0};
        out[n++] = (chain_op){OP_SOFTMAX, KILN_F32, 0, 0};
    } else {
        const kiln_arg *h = kiln_op_arg(op, 2, "half_to_float");
        out[n++] = (chain_op){OP_SOFTMAX, KILN_F32, 0, h && h->kind == KILN_ARG_BOOL && h->num};
    }
    return n;
}

/* The stored layouts of x and the output: rows walkable, in one memory order. who prefixes the
 * reason. */
static int layouts_ok(const kiln_problem *p, const kiln_tensor_spec *x, const char *who, char *why,
                      size_t why_len) {
    const char *bad = layout_ok(x);
    if (bad) {
        why_set(why, why_len, "%sinput %s %s", who, x->name, bad);
        return 0;
    }
    const kiln_tensor_spec *y = &p->outputs[0];
    if (p->n_outputs >= 1 && y->ndim == x->ndim) {
        if ((bad = layout_ok(y))) {
            why_set(why, why_len, "%soutput %s %s", who, y->name, bad);
            return 0;
        }
        if (!same_order(x, y)) {
            why_set(why, why_len, "%sinput and output are stored in different memory orders", who);
            return 0;
        }
    }
    return 1;
}

static int match_aten(const kiln_problem *p, const kiln_opchain *c, kiln_match *m, char *why,
                      size_t why_len) {
    const char *op = c->ops[0].aten;
    const char *no = not_softmax_reason(op);
    if (no) {
        why_set(why, why_len, "%s", no);
        return 0;
    }
    if (!op_is_softmax(op)) {
        why_set(why, why_len, "captured %s, not aten::_softmax", op);
        return 0;
    }
    if (p->n_inputs != 1 || p->inputs[0].is_scalar) {
        why_set(why, why_len, "a captured softmax with %d inputs; expected one tensor",
                p->n_inputs);
        return 0;
    }
    const kiln_tensor_spec *x = &p->inputs[0];
    chain_op ops[2];
    int64_t dim = -1;
    int n = to_chain_ops(&c->ops[0], ops, &dim);
    const kiln_arg *d = kiln_op_arg(&c->ops[0], 1, "dim");
    if (!d || d->kind != KILN_ARG_NUM) {
        why_set(why, why_len, "the captured call has no integer dim argument");
        return 0;
    }
    if (!dim_is_last(dim, x->ndim)) {
        why_set(why, why_len, "softmax over dim %lld of a %d-d tensor, not the last",
                (long long)dim, x->ndim);
        return 0;
    }
    if (x->ndim && !layouts_ok(p, x, "", why, why_len))
        return 0;
    if (!match_tensors(p, m, 0, -1, -1, NULL, why, why_len))
        return 0;
    if (!chain_facts(ops, n, x->dtype, 0, KILN_F32, 0, p->outputs[0].dtype, m, why, why_len))
        return 0;
    snprintf(m->how, sizeof m->how, "captured %s over dim %lld%s", op, (long long)dim,
             x->layout.permuted ? " (memory order kept: rows are independent)" : "");
    return 1;
}

static int match_module(const kiln_problem *p, const kiln_opchain *c, kiln_match *m, char *why,
                        size_t why_len) {
    const char *name = kiln_problem_kiln_str(p, "module_class");
    name = name ? name : "?";
    if (p->n_inputs != 1) {
        why_set(why, why_len, "module %s has %d inputs; a softmax module takes one", name,
                p->n_inputs);
        return 0;
    }
    chain_op ops[2 * KILN_OPCHAIN_MAX_OPS];
    int n = 0, n_sm = 0;
    int64_t dim = 0;
    for (int i = 0; i < c->n_ops; i++) {
        const kiln_op *op = &c->ops[i];
        const char *no = not_softmax_reason(op->aten);
        if (no) {
            why_set(why, why_len, "module %s: %s", name, no);
            return 0;
        }
        int k = op_is_softmax(op->aten) || kiln_op_is(op, "aten::_to_copy.default")
                    ? to_chain_ops(op, ops + n, &dim)
                    : 0;
        if (!k) {
            why_set(why, why_len, "module %s runs %s, which is not a cast or a softmax", name,
                    op->aten);
            return 0;
        }
        if (op_is_softmax(op->aten)) {
            const kiln_arg *d = kiln_op_arg(op, 1, "dim");
            if (!d || d->kind != KILN_ARG_NUM) {
                why_set(why, why_len, "module %s: cannot read the softmax's dim", name);
                return 0;
            }
            n_sm++;
        }
        n += k;
    }
    if (n_sm != 1) {
        why_set(why, why_len, "module %s: %d softmax calls in its forward", name, n_sm);
        return 0;
    }
    if (!dim_is_last(dim, p->inputs[0].ndim)) {
        why_set(why, why_len, "module %s: softmax over dim %lld, not the last", name,
                (long long)dim);
        return 0;
    }
    char who[160];
    snprintf(who, sizeof who, "module %.100s: ", name);
    if (!layouts_ok(p, &p->inputs[0], who, why, why_len))
        return 0;
    if (!match_tensors(p, m, 0, -1, -1, NULL, why, why_len))
        return 0;
    if (!chain_facts(ops, n, p->inputs[0].dtype, 0, KILN_F32, 0, p->outputs[0].dtype, m, why,
                     why_len))
        return 0;
    snprintf(m->how, sizeof m->how, "module %s: %d aten ops, softmax over dim %lld", name, c->n_ops,
             (long long)dim);
    return 1;
}

static int match_chain(const kiln_problem *p, const kiln_opchain *c, kiln_match *m, char *why,
                       size_t why_len) {
    int ix, imask, iscale;
    if (!roles_by_name(p, &ix, &imask, &iscale, why, why_len) &&
        !roles_by_wiring(p, c, &ix, &imask, &iscale, why, why_len))
        return 0;
    chain_op ops[2 * KILN_OPCHAIN_MAX_OPS];
    int n = 0, has_const = 0;
    double scale = 1;
    for (int i = 0; i < c->n_ops; i++) {
        const kiln_op *op = &c->ops[i];
        const char *no = not_softmax_reason(op->aten);
        if (no) {
            why_set(why, why_len, "%s", no);
            return 0;
        }
        int64_t dim = -1;
        int k = to_chain_ops(op, ops + n, &dim);
        if (!k) {
            why_set(why, why_len, "chain op %s is not a cast, scale, mask add or softmax",
                    op->aten);
            return 0;
        }
        if (op_is_softmax(op->aten) && !dim_is_last(dim, p->inputs[ix].ndim)) {
            why_set(why, why_len, "a chain softmax over dim %lld, not the last", (long long)dim);
            return 0;
        }
        if (ops[n].kind == OP_MUL) { /* a multiply by a number is a constant scale */
            for (int a = 0; a < 2; a++) {
                const kiln_arg *v = kiln_op_arg(op, a, a ? "other" : "self");
                if (v && v->kind == KILN_ARG_NUM)
                    has_const = 1, scale = v->num;
            }
        }
        n += k;
    }
    if (!layouts_ok(p, &p->inputs[ix], "", why, why_len))
        return 0;
    if (!match_tensors(p, m, ix, imask, iscale, has_const ? &scale : NULL, why, why_len))
        return 0;
    if (!chain_facts(ops, n, p->inputs[ix].dtype, (int)kiln_match_get(m, "has_scale", 0),
                     dtype_or(p, imask, KILN_F32), imask >= 0, p->outputs[0].dtype, m, why,
                     why_len))
        return 0;
    snprintf(m->how, sizeof m->how, "chain of %d ops ending in a softmax over the last dim",
             c->n_ops);
    return 1;
}

static int match_plain(const kiln_problem *p, kiln_match *m, char *why, size_t why_len) {
    if (!p->op_type || strcmp(p->op_type, "softmax") != 0) {
        why_set(why, why_len, "op_type %s, not softmax (and no \"kiln\" capture record)",
                p->op_type ? p->op_type : "(none)");
        return 0;
    }
    int ix, imask, iscale;
    if (!roles_by_name(p, &ix, &imask, &iscale, why, why_len))
        return 0;
    const double scale = kiln_problem_kiln_num(p, "scale", NAN);
    if (!match_tensors(p, m, ix, imask, iscale, isnan(scale) ? NULL : &scale, why, why_len))
        return 0;
    if (!eager_facts(p->inputs[ix].dtype, (int)kiln_match_get(m, "has_scale", 0),
                     dtype_or(p, imask, KILN_F32), imask >= 0, p->outputs[0].dtype, m, why,
                     why_len))
        return 0;
    snprintf(m->how, sizeof m->how, "op_type softmax over the last dim%s%s",
             imask >= 0 ? ", mask" : "", iscale >= 0 ? ", scale" : "");
    return 1;
}

static void name_variant(const kiln_problem *p, kiln_match *m) {
    char v[64];
    snprintf(v, sizeof v, "softmax%s%s%s", kiln_match_get(m, "has_scale", 0) ? "_scale" : "",
             kiln_match_get(m, "has_mask", 0) ? "_mask" : "",
             p->inputs[m->input_of_role[ROLE_X]].dtype != p->outputs[0].dtype ? "_cast" : "");
    snprintf(m->variant, sizeof m->variant, "%s", v);
}

static int smx_match(const kiln_problem *p, kiln_match *m, char *why, size_t why_len) {
    kiln_opchain *c = NULL;
    kiln_err err;
    int ok;
    if (!kiln_opchain_described(p))
        ok = match_plain(p, m, why, why_len);
    else if (kiln_opchain_read(p, &c, &err) != KILN_OK) {
        why_set(why, why_len, "%s", err.msg);
        ok = 0;
    } else if (strcmp(c->kind, "aten") == 0)
        ok = match_aten(p, c, m, why, why_len);
    else if (strcmp(c->kind, "module") == 0)
        ok = match_module(p, c, m, why, why_len);
    else
        ok = match_chain(p, c, m, why, why_len);
    if (ok)
        name_variant(p, m);
    kiln_opchain_free(c);
    return ok;
}

/* ---- geometry of a point for a problem ---- */

typedef struct {
    int64_t unroll, persist, online, vec, threads, split, cache, tpr;
} smx_point;

static void rows_cols(const kiln_problem *p, const kiln_match *m, const kiln_workload *w,
                      int64_t *rows, int64_t *cols) {
    const kiln_tensor_spec *x = &p->inputs[m->input_of_role[ROLE_X]];
    int64_t s[KILN_MAX_DIMS];
    kiln_tensor_shape(p, x, w, s);
    *rows = 1;
    for (int d = 0; d + 1 < x->ndim; d++)
        *rows *= s[d];
    *cols = s[x->ndim - 1];
}

static int64_t cdiv(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

static int64_t in_size(const kiln_problem *p, const kiln_match *m) {
    return (int64_t)kiln_dtype_size(p->inputs[m->input_of_role[ROLE_X]].dtype);
}

/* SMX_VEC=0: the widest vector of at most 16 bytes of x that divides every row. */
static int64_t auto_vec(const kiln_problem *p, const kiln_match *m) {
    int64_t esize = in_size(p, m);
    for (int64_t v = 8; v > 1; v /= 2) {
        int ok = v * esize <= 16;
        for (int i = 0; ok && i < p->n_workloads; i++) {
            int64_t rows, cols;
            rows_cols(p, m, &p->workloads[i], &rows, &cols);
            ok = cols % v == 0;
        }
        if (ok)
            return v;
    }
    return 1;
}

/* The point as compiled: SMX_VEC=0 resolved (what the #defines and the banner say). */
static void resolve(const kiln_problem *p, const kiln_match *m, const int64_t *pt, int64_t *out,
                    smx_point *q) {
    memcpy(out, pt, sizeof(int64_t) * P_COUNT);
    if (out[P_VEC] == 0)
        out[P_VEC] = auto_vec(p, m);
    *q = (smx_point){out[P_UNROLL],  out[P_PERSIST], out[P_ONLINE], out[P_VEC],
                     out[P_THREADS], out[P_SPLIT],   out[P_CACHE],  out[P_TPR]};
}

/* Floats a thread may keep in registers at this block size (64K registers per SM). */
static int64_t reg_floats(int64_t threads) {
    int64_t cap = 32768 / threads;
    return cap < SMX_MAX_ROW_FLOATS_REG ? cap : SMX_MAX_ROW_FLOATS_REG;
}

static int64_t static_smem(const smx_point *q) {
    int64_t rpb = q->threads / q->tpr;
    return (q->tpr > 32 ? 2 * (q->threads / 32) * 8 : 0) + (q->split > 1 ? 2 * rpb * 8 : 0);
}

/* Bytes of dynamic shared memory a CACHE 2 point needs for cols (the launch's smem expression). */
static int64_t dyn_smem(const smx_point *q, int64_t cols, int64_t esize) {
    int64_t vslice = cdiv(cols / q->vec, q->split);
    return (q->threads / q->tpr) * cdiv(vslice * q->vec * esize, 16) * 16;
}

/* Valid points run correctly on every workload; a few more rules reject points that are dominated
 * for this problem's shapes (idle threads, splits of rows that already fill the GPU, ...), so that
 * a sample of the space spends its time on points that can win. */
static const char *smx_check(const kiln_problem *p, const kiln_match *m, const int64_t *pt) {
    int64_t rp[P_COUNT];
    smx_point q;
    resolve(p, m, pt, rp, &q);
    if (q.tpr > q.threads)
        return "threads per row (SMX_TPR) exceed the block (SMX_THREADS)";
    int64_t esize = in_size(p, m), rpb = q.threads / q.tpr;
    int64_t rows_max = 0, vslice_max = 0, vslice_min = INT64_MAX, nvec_min = INT64_MAX;
    int64_t groups_max = 0, rows_min = INT64_MAX, cols_max = 0;
    for (int i = 0; i < p->n_workloads; i++) {
        int64_t rows, cols;
        rows_cols(p, m, &p->workloads[i], &rows, &cols);
        if (cols % q.vec)
            return xasprintf("!VEC=%lld does not divide the row length %lld (workload %d)",
                             (long long)q.vec, (long long)cols, i);
        int64_t nvec = cols / q.vec, vs = cdiv(nvec, q.split), g = cdiv(rows, rpb);
        rows_max = rows > rows_max ? rows : rows_max;
        cols_max = cols > cols_max ? cols : cols_max;
        nvec_min = nvec < nvec_min ? nvec : nvec_min;
        vslice_max = vs > vslice_max ? vs : vslice_max;
        vslice_min = vs < vslice_min ? vs : vslice_min;
        groups_max = g > groups_max ? g : groups_max;
        rows_min = rows < rows_min ? rows : rows_min;
    }
    if (pt[P_VEC] != 0) {
        int64_t a = auto_vec(p, m);
        if (q.vec == a)
            return "the same as SMX_VEC=0 (auto), which this problem resolves to that width";
        if (q.vec < a)
            return xasprintf("!VEC=%lld is narrower than the %lld-byte vectors (VEC=0) that divide "
                             "every row",
                             (long long)q.vec, (long long)(a * esize));
    }
    if (q.split > 1 && q.split > nvec_min)
        return xasprintf("!SPLIT=%lld blocks for rows of %lld vectors: some blocks would get no "
                         "columns",
                         (long long)q.split, (long long)nvec_min);
    if (q.split > 1 && rows_min >= 2 * SMX_SMS && cols_max * esize <= 65536)
        return xasprintf("!SPLIT=%lld: at least %lld rows that fit a block already fill the GPU",
                         (long long)q.split, (long long)rows_min);
    if (q.tpr > 32 && q.tpr > 2 * vslice_max)
        return xasprintf("!TPR=%lld threads for slices of at most %lld vectors: most would idle",
                         (long long)q.tpr, (long long)vslice_max);
    if (q.cache != 1 && cdiv(vslice_min, q.tpr) > 64)
        return xasprintf("!TPR=%lld: each thread would walk over %lld vectors of a row",
                         (long long)q.tpr, (long long)cdiv(vslice_min, q.tpr));
    if (rpb > 1 && rpb > 2 * rows_max)
        return xasprintf("!%lld rows per block for at most %lld rows: most of the block would idle",
                         (long long)rpb, (long long)rows_max);
    if (q.persist > 0 && groups_max <= SMX_SMS * q.persist)
        return xasprintf("!PERSIST=%lld never caps the grid: at most %lld row groups",
                         (long long)q.persist, (long long)groups_max);
    if (q.cache == 1) {
        if (q.unroll != 1)
            return "UNROLL applies to streaming loops; with the row in registers every load is "
                   "issued at once (UNROLL=1 is the canonical point)";
        int64_t floats = cdiv(vslice_max, q.tpr) * q.vec;
        if (floats > reg_floats(q.threads))
            return xasprintf("!CACHE=1 needs %lld floats per thread in registers, over the %lld "
                             "that fit at THREADS=%lld",
                             (long long)floats, (long long)reg_floats(q.threads),
                             (long long)q.threads);
    } else if (q.cache == 0 && cdiv(vslice_max, q.tpr) * q.vec <= reg_floats(q.threads)) {
        return "CACHE=0 re-reads a slice that fits in registers: CACHE=1 reads it once";
    } else if (q.unroll > 1 && (q.unroll / 2) * q.tpr >= vslice_max) {
        return xasprintf("!UNROLL=%lld: half of the unrolled loads would lie past slices of at "
                         "most %lld vectors",
                         (long long)q.unroll, (long long)vslice_max);
    }
    if (q.cache == 2) {
        int64_t bytes = dyn_smem(&q, cols_max, esize) + static_smem(&q);
        if (bytes > SMX_MAX_SMEM)
            return xasprintf("!CACHE=2 needs %lld bytes of shared memory per block, over %d",
                             (long long)bytes, SMX_MAX_SMEM);
    }
    return NULL;
}

/* The start point (kiln_family.start), a rule of thumb from the hand-written softmax of
 * tests/kernels/cuda/good_softmax_bf16.cu (97.5 % of speed of light on [1,8,4096,4096] bf16, where
 * the table's first point, a warp per row holding 128 floats per thread in 165 registers, took
 * twice as long): the row in registers (one read), about SMX_START_FLOATS floats of it per thread
 * so that registers stay near 64 and ten or more warps per SM overlap their load and write phases;
 * at least 128 threads per block (several short rows share one); and rows that cannot fill the
 * GPU split over a cluster until they do. Shared memory (CACHE 2) where a slice does not fit in
 * registers. */
#define SMX_START_FLOATS 32

static int smx_start(const kiln_problem *p, const kiln_match *m, int64_t *pt) {
    int64_t rows_min = INT64_MAX, rows_max = 0, cols_min = INT64_MAX, cols_max = 0;
    for (int i = 0; i < p->n_workloads; i++) {
        int64_t rows, cols;
        rows_cols(p, m, &p->workloads[i], &rows, &cols);
        rows_min = rows < rows_min ? rows : rows_min;
        rows_max = rows > rows_max ? rows : rows_max;
        cols_min = cols < cols_min ? cols : cols_min;
        cols_max = cols > cols_max ? cols : cols_max;
    }
    if (p->n_workloads < 1 || cols_min < 1)
        return -1;
    const int64_t vec = auto_vec(p, m), nvec = cdiv(cols_max, vec);
    int64_t split = 1; /* a cluster's block gets 1024 floats or more of every workload's rows */
    while (split < 16 && rows_min * split < SMX_SMS && cdiv(cols_min, 2 * split) >= 1024)
        split *= 2;
    const int64_t per_block = cdiv(nvec, split) * vec; /* floats of a row's slice */
    int64_t tpr = 1;
    while (tpr < 1024 && tpr * SMX_START_FLOATS < per_block)
        tpr *= 2;
    int64_t threads = tpr > 128 ? tpr : 128;
    while (threads > 64 && threads > tpr && threads / tpr > 2 * rows_max)
        threads /= 2; /* no more rows a block than the problem has ... */
    while (tpr < threads && threads / tpr > 2 * rows_max)
        tpr *= 2; /* ... else more threads a row */
    const int64_t cache = cdiv(cdiv(nvec, split), tpr) * vec <= reg_floats(threads) ? 1 : 2;
    pt[P_UNROLL] = 1;
    pt[P_PERSIST] = 0;
    pt[P_ONLINE] = 1;
    pt[P_VEC] = 0;
    pt[P_THREADS] = threads;
    pt[P_SPLIT] = split;
    pt[P_CACHE] = cache;
    pt[P_TPR] = tpr;
    return 0;
}

/* ---- emitters ---- */

/* The problem facts as #defines (shared by the CUDA and the C template). */
static void emit_facts(kiln_strbuf *b, const kiln_match *m) {
    kiln_strbuf_printf(b, "#define SMX_TIN %d\n", (int)kiln_match_get(m, "tin", 0));
    kiln_strbuf_printf(b, "#define SMX_TOUT %d\n", (int)kiln_match_get(m, "tout", 0));
    kiln_strbuf_printf(b, "#define SMX_HAS_MASK %d\n", (int)kiln_match_get(m, "has_mask", 0));
    kiln_strbuf_printf(b, "#define SMX_TMASK %d\n", (int)kiln_match_get(m, "tmask", 0));
    kiln_strbuf_printf(b, "#define SMX_MASK_DIRECT %d\n", (int)kiln_match_get(m, "mask_direct", 0));
    kiln_strbuf_printf(b, "#define SMX_HAS_SCALE %d\n", (int)kiln_match_get(m, "has_scale", 0));
    kiln_strbuf_printf(b, "#define SMX_ROUND_SCALED %d\n",
                       (int)kiln_match_get(m, "round_scaled", -1));
    kiln_strbuf_printf(b, "#define SMX_ROUND_MASKED %d\n",
                       (int)kiln_match_get(m, "round_masked", -1));
    kiln_strbuf_printf(b, "#define SMX_ROUND_RESULT %d\n",
                       (int)kiln_match_get(m, "round_result", -1));
}

/* The entry point's body: rows, cols, the mask's broadcast strides, the scale, and the call. */
static void emit_call(kiln_strbuf *b, const kiln_problem *p, const kiln_match *m, int cuda) {
    const kiln_tensor_spec *x = &p->inputs[m->input_of_role[ROLE_X]];
    kiln_strbuf_printf(b, "    const int64_t smx_rows = %s;\n", m->rows_expr);
    kiln_strbuf_printf(b, "    const int64_t smx_cols = %s;\n", m->cols_expr);
    kiln_strbuf_printf(b, "    smx_bcast smx_mb;\n    smx_mb.n = 0;\n");
    int imask = m->input_of_role[ROLE_MASK];
    if (imask >= 0 && !kiln_match_get(m, "mask_direct", 0)) {
        const kiln_tensor_spec *mk = &p->inputs[imask];
        kiln_strbuf_printf(
            b, "    {\n        int64_t smx_run = 1; /* the mask's rows per step along a dim */\n");
        int k = 0;
        for (int d = x->ndim - 2; d >= 0; d--, k++) {
            char xe[96];
            kiln_tensor_dim_expr(p, x, d, xe, sizeof xe);
            int md = d - (x->ndim - mk->ndim);
            kiln_strbuf_printf(b, "        smx_mb.size[%d] = %s;\n", k, xe);
            if (md < 0) {
                kiln_strbuf_printf(b, "        smx_mb.stride[%d] = 0;\n", k);
            } else {
                char me[96];
                kiln_tensor_dim_expr(p, mk, md, me, sizeof me);
                kiln_strbuf_printf(b, "        smx_mb.stride[%d] = (%s) == 1 ? 0 : smx_run;\n", k,
                                   me);
                kiln_strbuf_printf(b, "        smx_run *= %s;\n", me);
            }
        }
        kiln_strbuf_printf(b, "        (void)smx_run;\n        smx_mb.n = %d;\n    }\n", k);
    }
    int kind = (int)kiln_match_get(m, "scale_kind", SCALE_NONE);
    int iscale = m->input_of_role[ROLE_SCALE];
    if (kind == SCALE_ARG)
        kiln_strbuf_printf(b, "    const float smx_scale = (float)(%s);\n", p->inputs[iscale].name);
    else if (kind == SCALE_TENSOR) {
        int code = (int)kiln_match_get(m, "tscale", 0);
        if (cuda)
            kiln_strbuf_printf(
                b, "    const float smx_scale = smx_dt<%d>::f32(*(const smx_dt<%d>::t *)(%s));\n",
                code, code, p->inputs[iscale].name);
        else
            kiln_strbuf_printf(b, "    const float smx_scale = smx_get(%d, %s, 0);\n", code,
                               p->inputs[iscale].name);
    } else if (kind == SCALE_CONST)
        /* (float)1, not 1f: %g writes a whole number without a point */
        kiln_strbuf_printf(b, "    const float smx_scale = (float)%.9g;\n",
                           kiln_match_get(m, "scale_const", 1));
    else
        kiln_strbuf_printf(b, "    const float smx_scale = 1.0f;\n");
    kiln_strbuf_printf(
        b,
        "    smx_softmax((const void *)%s, %s%s%s, smx_scale, (void *)%s, smx_rows, smx_cols, "
        "%s);\n",
        x->name, imask >= 0 ? "(const void *)" : "", imask >= 0 ? p->inputs[imask].name : "",
        imask >= 0 ? "" : (cuda ? "nullptr" : "NULL"), p->outputs[0].name,
        cuda ? "smx_mb" : "&smx_mb");
}

static char *emit_cuda(const kiln_family *f, const kiln_problem *p, const kiln_match *m,
                       const int64_t *point) {
    int64_t pt[P_COUNT];
    smx_point q;
    resolve(p, m, point, pt, &q);
    int64_t rpb = q.threads / q.tpr, vslice_max = 0, esize = in_size(p, m);
    for (int i = 0; i < p->n_workloads; i++) {
        int64_t rows, cols;
        rows_cols(p, m, &p->workloads[i], &rows, &cols);
        int64_t vs = cdiv(cols / q.vec, q.split);
        vslice_max = vs > vslice_max ? vs : vslice_max;
    }
    kiln_strbuf b = {0};
    char *defs = kiln_family_defines(f, pt);
    kiln_strbuf_printf(&b, "%s", defs);
    free(defs);
    emit_facts(&b, m);
    kiln_strbuf_printf(&b, "#define SMX_MAXV %lld\n",
                       (long long)(q.cache == 1
                                       ? (cdiv(vslice_max, q.tpr) > 0 ? cdiv(vslice_max, q.tpr) : 1)
                                       : 1));
    char groups[600];
    if (q.persist > 0)
        snprintf(groups, sizeof groups, "min(ceil_div(%s,%lld),%lld)", m->rows_expr, (long long)rpb,
                 (long long)(SMX_SMS * q.persist));
    else
        snprintf(groups, sizeof groups, "ceil_div(%s,%lld)", m->rows_expr, (long long)rpb);
    kiln_strbuf_printf(&b, "// kiln: launch kiln_softmax grid=%lld*%s block=%lld",
                       (long long)q.split, groups, (long long)q.threads);
    if (q.cache == 2)
        kiln_strbuf_printf(&b, " smem=%lld*ceil_div(ceil_div(%s/%lld,%lld)*%lld,16)*16",
                           (long long)rpb, m->cols_expr, (long long)q.vec, (long long)q.split,
                           (long long)(q.vec * esize));
    if (q.split > 1)
        kiln_strbuf_printf(&b, " cluster=%lld", (long long)q.split);
    kiln_strbuf_printf(&b, "\n");
    const char *tmpl = kiln_family_template("softmax.cu");
    KILN_ASSERT(tmpl);
    kiln_strbuf_printf(&b, "%s\n", tmpl);
    char *proto = kiln_family_prototype(p, 0, 1, "SMX_THREADS", "kiln_softmax");
    kiln_strbuf_printf(&b, "%s {\n", proto);
    free(proto);
    emit_call(&b, p, m, 1);
    kiln_strbuf_printf(&b, "}\n");
    return kiln_family_source(f, m, pt, b.s);
}

/* The C source for the cpu backend: no geometry, so one source per problem (sweep dedupes it). */
static char *emit_cpu(const kiln_family *f, const kiln_problem *p, const kiln_match *m) {
    kiln_strbuf b = {0};
    emit_facts(&b, m);
    kiln_strbuf_printf(&b, "// kiln: launch kiln_softmax\n");
    const char *tmpl = kiln_family_template("softmax_cpu.c");
    KILN_ASSERT(tmpl);
    kiln_strbuf_printf(&b, "%s\n", tmpl);
    char *proto = kiln_family_prototype(p, 0, 0, NULL, "kiln_softmax");
    kiln_strbuf_printf(&b, "%s {\n", proto);
    free(proto);
    emit_call(&b, p, m, 0);
    kiln_strbuf_printf(&b, "}\n");
    uint64_t h = kiln_fnv1a(KILN_FNV_INIT, b.s, strlen(b.s));
    char *out = xasprintf("// Generated by kiln: family %s, variant %s\n"
                          "// params: none on cpu (the GPU geometry does not apply)\n"
                          "// matched: %s\n// body hash: %016llx\n%s",
                          f->name, m->variant, m->how, (unsigned long long)h, b.s);
    free(b.s);
    return out;
}

extern const kiln_family kiln_family_softmax;

static char *smx_emit(const kiln_problem *p, const kiln_match *m, const int64_t *point, int cuda) {
    return cuda ? emit_cuda(&kiln_family_softmax, p, m, point)
                : emit_cpu(&kiln_family_softmax, p, m);
}

/* ---- speed of light ---- */

/* x read once, y written once, the mask read once at its own (broadcast) size: what the
 * definition's tensors add up to, or the problem's own "min_bytes". */
static double smx_min_bytes(const kiln_problem *p, const kiln_match *m, const kiln_workload *w) {
    (void)m;
    return kiln_problem_min_bytes(p, w);
}

/* fp32 math with one rounding at the end (plus eager's own roundings, reproduced exactly): the
 * default tolerance holds. */
static kiln_tolerance smx_tolerance(kiln_dtype t) {
    return kiln_tolerance_default(t);
}

const kiln_family kiln_family_softmax = {
    .name = "softmax",
    .summary = "softmax over the last dim (fp32 math; casts, scale and mask fused), warp-per-row "
               "to cluster-split rows",
    .n_params = P_COUNT,
    .params =
        {
            [P_UNROLL] =
                {"SMX_UNROLL", 3, {1, 2, 4}, "vectors in flight per thread in streaming loops"},
            [P_PERSIST] = {"SMX_PERSIST",
                           4,
                           {0, 1, 2, 4},
                           "0: a block per row group; k: grid capped at k blocks per SM, looping"},
            [P_ONLINE] = {"SMX_ONLINE",
                          2,
                          {1, 0},
                          "1: online (max, sum) pairs, one reduction; 0: max, then sum"},
            [P_VEC] = {"SMX_VEC",
                       2,
                       {0, 8},
                       "elements per access; 0: the widest <= 16 bytes dividing every row"},
            [P_THREADS] = {"SMX_THREADS", 5, {64, 128, 256, 512, 1024}, "threads per block"},
            [P_SPLIT] = {"SMX_SPLIT",
                         5,
                         {1, 2, 4, 8, 16},
                         "blocks of a cluster sharing each row (DSMEM exchange)"},
            [P_CACHE] = {"SMX_CACHE",
                         3,
                         {1, 0, 2},
                         "row slice between passes: 1 registers, 0 re-read, 2 shared memory"},
            [P_TPR] = {"SMX_TPR",
                       11,
                       {32, 64, 128, 256, 512, 1024, 16, 8, 4, 2, 1},
                       "threads per row: a warp, several warps, or a part of a warp"},
        },
    .match = smx_match,
    .check = smx_check,
    .emit = smx_emit,
    .min_bytes = smx_min_bytes,
    .tolerance = smx_tolerance,
    .start = smx_start,
};
