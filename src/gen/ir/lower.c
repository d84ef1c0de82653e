/* lower.c: the lowering machinery: the op chain's values as IR nodes seen through their dims, the
 * building blocks every lowering rule is made of (pointwise ops with eager PyTorch's type
 * promotion, casts, reductions, windows, gathers, views), and the binding of the problem's inputs
 * and outputs. kir_lower, which runs the table of rules over an op chain, is in rules.c. */
#include "lower.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

int lower_fail(lower_ctx *L, const char *fmt, ...) {
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (L->op)
        snprintf(L->why, L->n, "%s: %s", L->op->aten, msg);
    else
        snprintf(L->why, L->n, "%s", msg);
    return 0;
}

static int full(lower_ctx *L) {
    return lower_fail(L, "more than %d nodes, %d axes or %d maps", KIR_MAX_NODES, KIR_MAX_AXES,
                      KIR_MAX_MAPS);
}

/* ---- arguments ---- */

int lower_arg(lower_ctx *L, const kiln_op *op, int pos, const char *name, lval *out) {
    const kiln_arg *a = kiln_op_arg(op, pos, name);
    memset(out, 0, sizeof *out);
    out->node = -1;
    if (!a || a->kind == KILN_ARG_NONE)
        return 1;
    if (a->kind == KILN_ARG_NUM || a->kind == KILN_ARG_BOOL) {
        if (!lv_const(L, a->num, out))
            return 0;
        /* an int or a bool: its type. A whole number beyond 2^53 or an infinity is a float's value
         * (finfo.min as a mask's fill), never an int64's */
        if (a->kind == KILN_ARG_BOOL ||
            (fabs(a->num) <= 9007199254740992.0 && a->num == floor(a->num)))
            L->ir->nodes[out->node].dtype = a->kind == KILN_ARG_BOOL ? KILN_BOOL : KILN_I64;
        return 1;
    }
    if (a->kind != KILN_ARG_TENSOR)
        return lower_fail(L, "argument '%s' is not a tensor or a number", a->text);
    *out = a->value.input >= 0 ? L->in[a->value.input] : L->res[a->value.op][a->value.slot];
    if (out->node < 0)
        return lower_fail(L, "argument '%s' is a result the lowering did not make", a->text);
    return 1;
}

int arg_num(const kiln_op *op, int pos, const char *name, double *out) {
    const kiln_arg *a = kiln_op_arg(op, pos, name);
    if (!a || a->kind == KILN_ARG_NONE)
        return 0;
    if (a->kind != KILN_ARG_NUM && a->kind != KILN_ARG_BOOL)
        return -1;
    *out = a->num;
    return 1;
}

int arg_ints(const kiln_op *op, int pos, const char *name, int64_t *out, int *n) {
    const kiln_arg *a = kiln_op_arg(op, pos, name);
    *n = 0;
    if (!a || a->kind == KILN_ARG_NONE)
        return 0;
    if (a->kind == KILN_ARG_NUM && fabs(a->num) <= 9007199254740992.0 && a->num == floor(a->num)) {
        out[(*n)++] = (int64_t)a->num;
        return 1;
    }
    if (a->kind != KILN_ARG_INTS)
        return -1;
    for (int i = 0; i < a->n_ints; i++)
        out[(*n)++] = a->ints[i];
    return 1;
}

int arg_dtype(const kiln_op *op, int pos, const char *name, kiln_dtype *out) {
    const kiln_arg *a = kiln_op_arg(op, pos, name);
    if (!a || a->kind == KILN_ARG_NONE)
        return 0;
    if (a->kind != KILN_ARG_DTYPE)
        return -1;
    *out = a->dtype;
    return 1;
}

const char *arg_text(const kiln_op *op, int pos, const char *name) {
    const kiln_arg *a = kiln_op_arg(op, pos, name);
    return a && a->kind == KILN_ARG_OTHER ? a->text : NULL;
}

/* ---- values ---- */

kiln_dtype lv_dtype(const lower_ctx *L, lval v) {
    return L->ir->nodes[v.node].dtype;
}

const char *lv_size(lower_ctx *L, lval v, int d) {
    return v.axis[d] < 0 ? "1" : L->ir->axes[kir_axis_find(L->ir, v.axis[d])].size;
}

int lv_const(lower_ctx *L, double value, lval *out) {
    memset(out, 0, sizeof *out);
    out->node = kir_const(L->ir, value);
    return out->node >= 0 ? 1 : full(L);
}

int lv_dim(int d, int ndim) {
    if (d < 0)
        d += ndim;
    return d >= 0 && d < ndim ? d : -1;
}

static int tensor_prio(int ndim) {
    return ndim > 0 ? 2 : 1;
}

/* 1 when the expression is 1 in every workload. */
static int is_one(lower_ctx *L, const char *e) {
    return kir_same(L->p, e, "1");
}

/* A fresh axis of the given size, or -1 (a dim of size 1). */
static int new_axis(lower_ctx *L, const char *size, int *axis) {
    *axis = -1;
    if (is_one(L, size))
        return 1;
    if ((*axis = kir_axis_new(L->ir, size)) < 0)
        return full(L);
    return 1;
}

/* ---- type promotion ---- */

static int category(kiln_dtype t) {
    return t == KILN_BOOL ? 0 : kir_dtype_is_int(t) ? 1 : 2;
}

static kiln_dtype promote_pair(kiln_dtype a, kiln_dtype b) {
    if (a == KILN_DTYPE_COUNT || a == b)
        return b;
    if (category(a) != category(b))
        return category(a) > category(b) ? a : b;
    if (category(a) == 2) /* floats: the wider, or float32 for two different narrow ones */
        return a == KILN_F64 || b == KILN_F64 ? KILN_F64 : KILN_F32;
    if (category(a) == 1) {
        if ((a == KILN_U8) != (b == KILN_U8)) /* uint8 with a signed type */
            return kiln_dtype_size(a) > 1 || kiln_dtype_size(b) > 1
                       ? (kiln_dtype_size(a) > kiln_dtype_size(b) ? a : b)
                       : KILN_I16;
        return kiln_dtype_size(a) >= kiln_dtype_size(b) ? a : b;
    }
    return a;
}

kiln_dtype lower_promote(lower_ctx *L, const lval *a, int n) {
    kiln_dtype res = KILN_DTYPE_COUNT;
    for (int prio = 2; prio >= 0; prio--) {
        kiln_dtype t = KILN_DTYPE_COUNT;
        for (int i = 0; i < n; i++)
            if (a[i].node >= 0 && a[i].prio == prio)
                t = promote_pair(t, lv_dtype(L, a[i]));
        if (t == KILN_DTYPE_COUNT)
            continue;
        if (prio == 0) /* Python numbers: the default dtype of their kind */
            t = category(t) == 2 ? KILN_F32 : category(t) == 1 ? KILN_I64 : KILN_BOOL;
        if (res == KILN_DTYPE_COUNT || category(t) > category(res))
            res = t;
    }
    return res == KILN_DTYPE_COUNT ? KILN_F32 : res;
}

/* ---- pointwise ---- */

/* Lines up the dims of a[0 .. n) from the right (numpy broadcasting) into out's dims. */
static int broadcast(lower_ctx *L, const lval *a, int n, lval *out) {
    out->ndim = 0;
    for (int i = 0; i < n; i++)
        out->ndim = a[i].ndim > out->ndim ? a[i].ndim : out->ndim;
    for (int d = 0; d < out->ndim; d++) {
        int axis = -1;
        for (int i = 0; i < n; i++) {
            int e = d - (out->ndim - a[i].ndim);
            if (e < 0 || a[i].axis[e] < 0)
                continue;
            if (axis < 0)
                axis = a[i].axis[e];
            else if (!kir_axis_unify(L->ir, axis, a[i].axis[e], L->why, L->n))
                return lower_fail(L, "%s", L->why);
        }
        out->axis[d] = axis;
    }
    return 1;
}

int lower_pointwise(lower_ctx *L, int op, const lval *a, int n, double k0, double k1,
                    kiln_dtype set, lval *out) {
    const kir_op_info *info = &KIR_OP_INFO[op];
    for (int i = 0; i < n; i++) {
        if (a[i].node < 0)
            return lower_fail(L, "operand %d is None", i);
        if (!kir_dtype_ok(lv_dtype(L, a[i])))
            return lower_fail(L, "a %s operand", kiln_dtype_name(lv_dtype(L, a[i])));
    }
    kiln_dtype t = set;
    switch (info->rule) {
    case KIR_RES_PROMOTE:
        t = lower_promote(L, a, n);
        break;
    case KIR_RES_FLOAT:
        t = lower_promote(L, a, n);
        t = category(t) == 2 ? t : KILN_F32;
        break;
    case KIR_RES_BOOL:
        t = KILN_BOOL;
        break;
    case KIR_RES_WHERE:
        t = lower_promote(L, a + 1, n - 1);
        break;
    case KIR_RES_SET:
        break;
    }
    if (!kir_dtype_ok(t))
        return lower_fail(L, "a %s result", kiln_dtype_name(t));
    lval r; /* out may be one of the operands */
    memset(&r, 0, sizeof r);
    if (!broadcast(L, a, n, &r))
        return 0;
    kir_node x = {.kind = KIR_OP, .dtype = t, .op = op, .n_a = n, .k = {k0, k1}};
    x.acc = x.map = -1;
    for (int i = 0; i < n; i++)
        x.a[i] = a[i].node;
    if ((r.node = kir_add(L->ir, x)) < 0)
        return full(L);
    r.prio = tensor_prio(r.ndim);
    *out = r;
    return 1;
}

int lower_binary(lower_ctx *L, int op, lval a, lval b, lval *out) {
    lval ab[2] = {a, b};
    return lower_pointwise(L, op, ab, 2, 1, 0, KILN_DTYPE_COUNT, out);
}

int lower_cast(lower_ctx *L, lval x, kiln_dtype t, lval *out) {
    if (x.node < 0)
        return lower_fail(L, "a cast of None");
    if (lv_dtype(L, x) == t) {
        *out = x;
        return 1;
    }
    if (!lower_pointwise(L, KO_CAST, &x, 1, 0, 0, t, out))
        return 0;
    out->prio = x.prio ? out->prio : 0; /* a cast number stays a number */
    return 1;
}

/* ---- reductions ---- */

/* The dims in the list (n == 0: all), normalised, as a mask over x's dims; -1 when one is out of
 * range. */
static int dim_mask(lval x, const int64_t *dims, int n) {
    int mask = n ? 0 : (1 << x.ndim) - 1;
    for (int i = 0; i < n; i++) {
        int d = lv_dim((int)dims[i], x.ndim ? x.ndim : 1);
        if (d < 0)
            return -1;
        mask |= 1 << d;
    }
    return x.ndim ? mask : 0;
}

int lower_reduce(lower_ctx *L, lval x, const int64_t *dims, int n, int keepdim, int red,
                 kiln_dtype t, lval *out, int *node) {
    if (x.node < 0 || !kir_dtype_ok(lv_dtype(L, x)))
        return lower_fail(L, "a reduction of an unsupported value");
    int mask = dim_mask(x, dims, n);
    if (mask < 0)
        return lower_fail(L, "a dim out of range");
    kir_node r = {.kind = KIR_REDUCE, .dtype = t, .op = red, .n_a = 1, .a = {x.node}};
    r.acc = r.map = -1;
    for (int d = 0; d < x.ndim; d++)
        if ((mask >> d & 1) && x.axis[d] >= 0)
            r.red |= KIR_BIT(kir_axis_find(L->ir, x.axis[d]));
    if (!r.red)
        return lower_fail(L, "a reduction over dims of size 1 only");
    if (red == KR_ARGMAX || red == KR_ARGMIN) {
        /* the index: the reduced dim's coordinate, or the flat (row-major) index over all dims */
        if (L->ir->n_acc == KIR_MAX_ACCESS)
            return full(L);
        kir_access *c = &L->ir->acc[L->ir->n_acc];
        memset(c, 0, sizeof *c);
        c->tensor = KIR_INDEX;
        snprintf(c->offset, sizeof c->offset, "0");
        c->ndim = x.ndim;
        char stride[KIR_EXPR] = "1";
        for (int d = x.ndim - 1; d >= 0; d--) {
            c->dim_axis[d] = x.axis[d];
            snprintf(c->dim_stride[d], KIR_EXPR, "%s", (mask >> d & 1) ? stride : "0");
            if (n != 1)
                kir_mul(stride, sizeof stride, stride, lv_size(L, x, d));
        }
        r.acc = L->ir->n_acc++;
    }
    memset(out, 0, sizeof *out);
    for (int d = 0; d < x.ndim; d++)
        if (!(mask >> d & 1))
            out->axis[out->ndim++] = x.axis[d];
        else if (keepdim)
            out->axis[out->ndim++] = -1;
    if ((out->node = kir_add(L->ir, r)) < 0)
        return full(L);
    out->prio = tensor_prio(out->ndim);
    if (node)
        *node = out->node;
    return 1;
}

int lower_part(lower_ctx *L, int r, lval first, kiln_dtype t, lval *out) {
    kir_node x = {.kind = KIR_PART, .dtype = t, .op = 1, .n_a = 1, .a = {r}};
    x.acc = x.map = -1;
    *out = first;
    if ((out->node = kir_add(L->ir, x)) < 0)
        return full(L);
    return 1;
}

int lower_count(lower_ctx *L, lval x, const int64_t *dims, int n, double minus, lval *out) {
    int mask = dim_mask(x, dims, n);
    if (mask < 0)
        return lower_fail(L, "a dim out of range");
    char count[KIR_EXPR] = "1";
    for (int d = 0; d < x.ndim; d++)
        if (mask >> d & 1)
            kir_mul(count, sizeof count, count, lv_size(L, x, d));
    if (!lv_const(L, -minus, out))
        return 0;
    snprintf(L->ir->nodes[out->node].expr, KIR_EXPR, "%s", count);
    return 1;
}

/* ---- windows and gathers ---- */

/* A window or remap node over dims d0 .. d0 + m.n of x; the result's dims of size out_size. */
static int spatial(lower_ctx *L, lval x, int d0, kir_map m, char out_size[][KIR_EXPR],
                   kir_node node, lval *out) {
    if (x.node < 0 || d0 < 0 || d0 + m.n > x.ndim)
        return lower_fail(L, "needs at least %d dims", m.n);
    if (L->ir->n_maps == KIR_MAX_MAPS)
        return full(L);
    *out = x;
    const int conv = node.kind == KIR_WINDOW && node.op == KR_CONV;
    for (int i = 0; i < 3; i++) {
        m.index[i] = -1;
        m.tap[i] = conv && i < m.n ? m.tap[i] : -1;
    }
    for (int i = 0; i < m.n; i++) {
        int d = d0 + i;
        m.src[i] = x.axis[d] >= 0 ? kir_axis_find(L->ir, x.axis[d]) : kir_axis_new(L->ir, "1");
        m.dst[i] = kir_axis_new(L->ir, out_size[i]);
        if (m.src[i] < 0 || m.dst[i] < 0)
            return full(L);
        out->axis[d] = is_one(L, out_size[i]) ? -1 : m.dst[i];
    }
    L->ir->maps[L->ir->n_maps] = m;
    node.map = L->ir->n_maps++;
    node.n_a = conv ? 2 : 1; /* a convolution's weight is set */
    node.a[0] = x.node;
    node.acc = -1;
    if ((out->node = kir_add(L->ir, node)) < 0)
        return full(L);
    /* a window's dst axes of size 1 are only coordinates (0): no value moves along them */
    for (int i = 0; i < m.n; i++)
        if (is_one(L, out_size[i]))
            L->ir->nodes[out->node].axes &= ~KIR_BIT(m.dst[i]);
    out->prio = 2;
    return 1;
}

int lower_window(lower_ctx *L, lval x, kir_map m, int kind, char out_size[][KIR_EXPR], kiln_dtype t,
                 lval *out, int *node) {
    kir_node w = {.kind = KIR_WINDOW, .dtype = t, .op = kind};
    if (!spatial(L, x, x.ndim - m.n, m, out_size, w, out))
        return 0;
    *node = out->node;
    return 1;
}

int lower_conv(lower_ctx *L, lval x, lval w, kir_map m, char out_size[][KIR_EXPR], lval *out) {
    const int cd = x.ndim - m.n - 1;
    char why[160];
    if (w.ndim != m.n + 2 || cd < 0 || (x.axis[cd] < 0) != (w.axis[0] < 0) || w.axis[1] >= 0)
        return lower_fail(L, "a depthwise weight of %d dims for %d spatial dims", w.ndim, m.n);
    if (x.axis[cd] >= 0 && !kir_axis_unify(L->ir, kir_axis_find(L->ir, x.axis[cd]),
                                           kir_axis_find(L->ir, w.axis[0]), why, sizeof why))
        return lower_fail(L, "%s", why);
    for (int i = 0; i < m.n; i++)
        m.tap[i] = w.axis[2 + i] >= 0 ? kir_axis_find(L->ir, w.axis[2 + i]) : -1;
    kir_node node = {.kind = KIR_WINDOW, .dtype = KILN_F32, .op = KR_CONV, .a = {0, w.node}};
    return spatial(L, x, x.ndim - m.n, m, out_size, node, out);
}

int lower_remap(lower_ctx *L, lval x, int d0, kir_map m, char out_size[][KIR_EXPR], double fill,
                lval *out) {
    kir_node r = {.kind = KIR_REMAP, .dtype = x.node >= 0 ? lv_dtype(L, x) : KILN_F32};
    r.k[0] = fill;
    return spatial(L, x, d0, m, out_size, r, out);
}

int lower_gather(lower_ctx *L, lval x, int d, lval idx, lval *out) {
    if ((d = lv_dim(d, x.ndim)) < 0 || idx.node < 0)
        return lower_fail(L, "a gather along a dim out of range");
    if (!kir_dtype_is_int(lv_dtype(L, idx)) || lv_dtype(L, idx) == KILN_BOOL)
        return lower_fail(L, "indices of %s (a boolean mask has a data-dependent shape)",
                          kiln_dtype_name(lv_dtype(L, idx)));
    if (x.ndim - 1 + idx.ndim > KILN_MAX_DIMS)
        return lower_fail(L, "a gather with too many dims");
    if (L->ir->n_maps == KIR_MAX_MAPS)
        return full(L);
    kir_map m = {.n = 1, .index = {idx.node, -1, -1}};
    m.src[0] = x.axis[d] >= 0 ? kir_axis_find(L->ir, x.axis[d]) : kir_axis_new(L->ir, "1");
    if (m.src[0] < 0)
        return full(L);
    L->ir->maps[L->ir->n_maps] = m;
    kir_node r = {.kind = KIR_REMAP, .dtype = lv_dtype(L, x), .n_a = 2, .a = {x.node, idx.node}};
    r.map = L->ir->n_maps++;
    r.acc = -1;
    lval res;
    memset(&res, 0, sizeof res);
    for (int e = 0; e < d; e++)
        res.axis[res.ndim++] = x.axis[e];
    for (int e = 0; e < idx.ndim; e++)
        res.axis[res.ndim++] = idx.axis[e];
    for (int e = d + 1; e < x.ndim; e++)
        res.axis[res.ndim++] = x.axis[e];
    if ((res.node = kir_add(L->ir, r)) < 0)
        return full(L);
    res.prio = tensor_prio(res.ndim);
    *out = res;
    return 1;
}

int lower_position(lower_ctx *L, lval x, int d, lval *out) {
    if ((d = lv_dim(d, x.ndim)) < 0)
        return lower_fail(L, "a dim out of range");
    if (x.axis[d] < 0) { /* a dim of size 1: always 0 */
        if (!lv_const(L, 0, out))
            return 0;
        L->ir->nodes[out->node].dtype = KILN_I64;
        return 1;
    }
    if (L->ir->n_acc == KIR_MAX_ACCESS)
        return full(L);
    kir_access *c = &L->ir->acc[L->ir->n_acc];
    memset(c, 0, sizeof *c);
    c->tensor = KIR_INDEX;
    c->ndim = 1;
    c->dim_axis[0] = x.axis[d];
    snprintf(c->dim_stride[0], KIR_EXPR, "1");
    snprintf(c->offset, sizeof c->offset, "0");
    kir_node pos = {.kind = KIR_POS, .dtype = KILN_I64, .acc = L->ir->n_acc++, .map = -1};
    pos.axes = KIR_BIT(kir_axis_find(L->ir, x.axis[d]));
    memset(out, 0, sizeof *out); /* x's dims, all of size 1 but d */
    out->ndim = x.ndim;
    for (int e = 0; e < x.ndim; e++)
        out->axis[e] = e == d ? x.axis[d] : -1;
    out->prio = 2;
    return (out->node = kir_add(L->ir, pos)) >= 0 ? 1 : full(L);
}

/* ---- views ---- */

int view_unsqueeze(lower_ctx *L, lval x, int d, lval *out) {
    if ((d = lv_dim(d, x.ndim + 1)) < 0 || x.ndim == KILN_MAX_DIMS)
        return lower_fail(L, "unsqueeze at a dim out of range");
    *out = x;
    for (int e = x.ndim; e > d; e--)
        out->axis[e] = x.axis[e - 1];
    out->axis[d] = -1;
    out->ndim++;
    out->prio = x.prio ? 2 : 0;
    return 1;
}

int view_squeeze(lower_ctx *L, lval x, const int64_t *dims, int n, lval *out) {
    int mask = dim_mask(x, dims, n);
    if (mask < 0)
        return lower_fail(L, "squeeze of a dim out of range");
    *out = x;
    out->ndim = 0;
    for (int d = 0; d < x.ndim; d++)
        if (!((mask >> d & 1) && x.axis[d] < 0))
            out->axis[out->ndim++] = x.axis[d];
    out->prio = x.prio ? tensor_prio(out->ndim) : 0;
    return 1;
}

int view_permute(lower_ctx *L, lval x, const int64_t *perm, int n, lval *out) {
    if (n != x.ndim)
        return lower_fail(L, "a permutation of %d dims for %d", n, x.ndim);
    *out = x;
    int seen = 0;
    for (int d = 0; d < n; d++) {
        int s = lv_dim((int)perm[d], n);
        if (s < 0 || (seen >> s & 1))
            return lower_fail(L, "not a permutation");
        seen |= 1 << s;
        out->axis[d] = x.axis[s];
    }
    return 1;
}

int view_expand(lower_ctx *L, lval x, const int64_t *sizes, int n, lval *out) {
    if (n < x.ndim || n > KILN_MAX_DIMS)
        return lower_fail(L, "expand to fewer dims");
    memset(out, 0, sizeof *out);
    out->node = x.node;
    out->ndim = n;
    for (int d = 0; d < n; d++) {
        int e = d - (n - x.ndim);
        char s[32];
        snprintf(s, sizeof s, "%lld", (long long)sizes[d]);
        if (e >= 0 && (sizes[d] == -1 || x.axis[e] >= 0)) {
            if (sizes[d] != -1 && !kir_same(L->p, lv_size(L, x, e), s))
                return lower_fail(L, "expand changes a dim of size %s", lv_size(L, x, e));
            out->axis[d] = x.axis[e];
        } else if (!new_axis(L, s, &out->axis[d])) {
            return 0;
        }
    }
    out->prio = tensor_prio(n);
    return 1;
}

/* The axes of sizes[0 .. k) that axis a (-1: a dim of size 1) splits into (-1 for a size of 1):
 * a itself when one size is not 1, else its parts (those it has, or new ones). */
static int split_axis(lower_ctx *L, int a, const int64_t *sizes, int k, int *axes) {
    int parts[KIR_MAX_PARTS], np = 0, last = -1;
    int64_t numel = 1;
    for (int i = 0; i < k; i++) {
        numel *= sizes[i];
        axes[i] = -1;
        if (sizes[i] != 1)
            last = i, np++;
    }
    char s[32];
    snprintf(s, sizeof s, "%lld", (long long)numel);
    if (!kir_same(L->p, a < 0 ? "1" : L->ir->axes[kir_axis_find(L->ir, a)].size, s))
        return lower_fail(L, "a split of a dim into %s elements", s);
    if (np <= 1) {
        if (last >= 0)
            axes[last] = a;
        return 1;
    }
    if (np > KIR_MAX_PARTS)
        return lower_fail(L, "a dim split into more than %d", KIR_MAX_PARTS);
    const kir_axis *x = &L->ir->axes[kir_axis_find(L->ir, a)];
    int reuse = x->n_parts == np;
    for (int i = 0, j = 0; reuse && i < k; i++)
        if (sizes[i] != 1) {
            snprintf(s, sizeof s, "%lld", (long long)sizes[i]);
            reuse = kir_same(L->p, L->ir->axes[kir_axis_find(L->ir, x->part[j++])].size, s);
        }
    for (int i = 0, j = 0; i < k; i++) {
        if (sizes[i] == 1)
            continue;
        snprintf(s, sizeof s, "%lld", (long long)sizes[i]);
        if (reuse)
            axes[i] = x->part[j++];
        else if ((axes[i] = kir_axis_new(L->ir, s)) < 0)
            return full(L);
    }
    np = 0;
    for (int i = 0; i < k; i++)
        if (axes[i] >= 0)
            parts[np++] = axes[i];
    if (!kir_axis_compose(L->ir, a, parts, np, L->why, L->n))
        return lower_fail(L, "%s", L->why);
    return 1;
}

/* The axis of axes[0 .. k) merged (-1 for dims of size 1): the composite of those that are not. */
static int merge_axes(lower_ctx *L, const int *axes, int k, int *out) {
    int parts[KIR_MAX_PARTS], np = 0;
    char size[KIR_EXPR] = "1";
    for (int i = 0; i < k; i++) {
        if (axes[i] < 0)
            continue;
        if (np == KIR_MAX_PARTS)
            return lower_fail(L, "more than %d dims merged", KIR_MAX_PARTS);
        parts[np++] = axes[i];
        kir_mul(size, sizeof size, size, L->ir->axes[kir_axis_find(L->ir, axes[i])].size);
    }
    *out = np ? parts[0] : -1;
    if (np <= 1)
        return 1;
    if ((*out = kir_axis_composite_of(L->ir, parts, np)) >= 0)
        return 1;
    if ((*out = kir_axis_new(L->ir, size)) < 0)
        return full(L);
    if (!kir_axis_compose(L->ir, *out, parts, np, L->why, L->n))
        return lower_fail(L, "%s", L->why);
    return 1;
}

int view_split(lower_ctx *L, lval x, int d, const int64_t *sizes, int k, lval *out) {
    int axes[KILN_MAX_DIMS];
    if ((d = lv_dim(d, x.ndim)) < 0 || x.ndim - 1 + k > KILN_MAX_DIMS)
        return lower_fail(L, "a split of a dim out of range or into too many");
    if (!split_axis(L, x.axis[d], sizes, k, axes))
        return 0;
    *out = x;
    for (int e = d + 1; e < x.ndim; e++)
        out->axis[e + k - 1] = x.axis[e];
    for (int i = 0; i < k; i++)
        out->axis[d + i] = axes[i];
    out->ndim = x.ndim - 1 + k;
    out->prio = x.prio ? tensor_prio(out->ndim) : 0;
    return 1;
}

int view_merge(lower_ctx *L, lval x, int d, int k, lval *out) {
    int axis;
    if ((d = lv_dim(d, x.ndim)) < 0 || k < 1 || d + k > x.ndim)
        return lower_fail(L, "a merge of dims out of range");
    if (!merge_axes(L, x.axis + d, k, &axis))
        return 0;
    *out = x;
    out->axis[d] = axis;
    for (int e = d + k; e < x.ndim; e++)
        out->axis[e - k + 1] = x.axis[e];
    out->ndim = x.ndim - k + 1;
    out->prio = x.prio ? tensor_prio(out->ndim) : 0;
    return 1;
}

/* The sorted distinct running products of sizes[0 .. k) added to b[0 .. *nb). */
static void add_bounds(const int64_t *sizes, int k, int64_t *b, int *nb) {
    int64_t run = 1;
    for (int i = 0; i < k; i++) {
        run *= sizes[i];
        int at = 0;
        while (at < *nb && b[at] < run)
            at++;
        if (at < *nb && b[at] == run)
            continue;
        memmove(b + at + 1, b + at, sizeof *b * (size_t)(*nb - at));
        b[at] = run;
        (*nb)++;
    }
}

/* x reshaped to sizes[0 .. n) (old: x's sizes) as splits and merges of axes: the running products
 * of both shapes cut the elements into atoms (each running product a multiple of the one before);
 * every old dim splits into its atoms, every new dim is the merge of its atoms. */
static int regroup(lower_ctx *L, lval x, const int64_t *old, const int64_t *sizes, int n,
                   lval *out) {
    int64_t b[2 * KILN_MAX_DIMS], atom[2 * KILN_MAX_DIMS];
    int nb = 0, axes[2 * KILN_MAX_DIMS];
    for (int k = 0; k < 2 * KILN_MAX_DIMS; k++)
        axes[k] = -1;
    for (int d = 0; d < n; d++)
        if (sizes[d] == 0)
            return lower_fail(L, "a reshape of an empty value");
    add_bounds(old, x.ndim, b, &nb);
    add_bounds(sizes, n, b, &nb);
    for (int k = 0; k < nb; k++) {
        int64_t before = k ? b[k - 1] : 1;
        if (b[k] % before)
            return lower_fail(L, "a reshape that regroups dims of a computed value across "
                                 "their boundaries");
        atom[k] = b[k] / before;
    }
    /* atom k covers the running products (b[k - 1], b[k]] */
    int64_t run = 1;
    for (int d = 0, k = 0; d < x.ndim; d++) {
        int k0 = k;
        run *= old[d];
        while (k < nb && b[k] <= run)
            k++;
        if (old[d] != 1 && !split_axis(L, x.axis[d], atom + k0, k - k0, axes + k0))
            return 0;
    }
    lval r;
    memset(&r, 0, sizeof r);
    r.node = x.node;
    run = 1;
    for (int d = 0, k = 0; d < n; d++) {
        int k0 = k;
        run *= sizes[d];
        while (k < nb && b[k] <= run)
            k++;
        if (!merge_axes(L, axes + k0, k - k0, &r.axis[r.ndim++]))
            return 0;
    }
    r.ndim = n;
    r.prio = tensor_prio(n);
    *out = r;
    return 1;
}

/* A new load of the same input as load node v with dims dims (axes and strides); offset set. */
static int new_load(lower_ctx *L, int v, const int *axis, char stride[][KIR_EXPR], int ndim,
                    const char *offset, lval *out) {
    if (L->ir->n_acc == KIR_MAX_ACCESS)
        return full(L);
    const kir_node *ld = &L->ir->nodes[v];
    kir_access *c = &L->ir->acc[L->ir->n_acc];
    *c = L->ir->acc[ld->acc];
    snprintf(c->offset, sizeof c->offset, "%s", offset);
    c->ndim = ndim;
    memset(out, 0, sizeof *out);
    kir_node x = *ld;
    x.acc = L->ir->n_acc++;
    x.axes = 0;
    for (int d = 0; d < ndim; d++) {
        c->dim_axis[d] = out->axis[d] = axis[d];
        snprintf(c->dim_stride[d], KIR_EXPR, "%s", stride[d]);
        if (axis[d] >= 0)
            x.axes |= KIR_BIT(kir_axis_find(L->ir, axis[d]));
    }
    out->ndim = ndim;
    out->prio = tensor_prio(ndim);
    if ((out->node = kir_add(L->ir, x)) < 0)
        return full(L);
    return 1;
}

/* The numbers of x's dims in workload 0, 0 when some dim differs between workloads. */
static int fixed_sizes(lower_ctx *L, lval x, int64_t *size) {
    for (int d = 0; d < x.ndim; d++) {
        size[d] = kir_eval(L->p, lv_size(L, x, d), 0);
        char s[32];
        snprintf(s, sizeof s, "%lld", (long long)size[d]);
        if (!kir_same(L->p, lv_size(L, x, d), s))
            return 0;
    }
    return 1;
}

int view_reshape(lower_ctx *L, lval x, const int64_t *sizes_in, int n, lval *out) {
    int64_t old[KILN_MAX_DIMS], sizes[KILN_MAX_DIMS], numel = 1, known = 1;
    if (n > KILN_MAX_DIMS || !fixed_sizes(L, x, old))
        return lower_fail(L, "a reshape of dims whose sizes differ between workloads");
    int infer = -1;
    for (int d = 0; d < x.ndim; d++)
        numel *= old[d];
    for (int d = 0; d < n; d++) {
        sizes[d] = sizes_in[d];
        if (sizes[d] == -1)
            infer = d;
        else
            known *= sizes[d];
    }
    if (infer >= 0)
        sizes[infer] = known ? numel / known : 0;
    for (int d = 0, prod = 1; d <= n; d++) {
        if (d == n) {
            if (prod != numel)
                return lower_fail(L, "a reshape that changes the number of elements");
        } else {
            prod *= (int)sizes[d];
        }
    }
    /* only dims of size 1 added or dropped: the same axes in order */
    int a = 0, b = 0, same = 1;
    memset(out, 0, sizeof *out);
    out->node = x.node;
    out->ndim = n;
    for (; b < n; b++) {
        out->axis[b] = -1;
        if (sizes[b] == 1)
            continue;
        while (a < x.ndim && old[a] == 1)
            a++;
        if (a == x.ndim || old[a] != sizes[b]) {
            same = 0;
            break;
        }
        out->axis[b] = x.axis[a++];
    }
    out->prio = tensor_prio(n);
    if (same)
        return 1;
    /* an input: restride its memory (the chunks of dims that are contiguous split or merge) */
    const kir_node *ld = &L->ir->nodes[x.node];
    if (ld->kind != KIR_LOAD)
        return regroup(L, x, old, sizes, n, out);
    const kir_access *c = &L->ir->acc[ld->acc];
    int64_t st[KILN_MAX_DIMS];
    for (int d = 0; d < x.ndim; d++) {
        /* a view's dims past the load's own (an unsqueezed, expanded input) have no stride */
        if (old[d] != 1 && !c->dim_stride[d][0])
            return lower_fail(L, "a reshape of an expanded view of an input (a copy)");
        st[d] = old[d] == 1 ? 0 : kir_eval(L->p, c->dim_stride[d], 0);
    }
    char stride[KILN_MAX_DIMS][KIR_EXPR];
    int axis[KILN_MAX_DIMS];
    int view_d = n - 1;
    int64_t chunk = x.ndim ? st[x.ndim - 1] : 1, tensor_numel = 1, view_numel = 1;
    for (int d = x.ndim - 1; d >= 0; d--) {
        tensor_numel *= old[d];
        if (d == 0 || (old[d - 1] != 1 && st[d - 1] != tensor_numel * chunk)) {
            while (view_d >= 0 && (view_numel < tensor_numel || sizes[view_d] == 1)) {
                snprintf(stride[view_d], KIR_EXPR, "%lld", (long long)(view_numel * chunk));
                view_numel *= sizes[view_d--];
            }
            if (view_numel != tensor_numel)
                return lower_fail(L, "a reshape the input's strides do not allow (a copy)");
            if (d > 0) {
                chunk = st[d - 1];
                tensor_numel = view_numel = 1;
            }
        }
    }
    if (view_d != -1)
        return lower_fail(L, "a reshape the input's strides do not allow");
    for (int d = 0; d < n; d++) {
        char s[32];
        snprintf(s, sizeof s, "%lld", (long long)sizes[d]);
        if (!new_axis(L, s, &axis[d]))
            return 0;
    }
    return new_load(L, x.node, axis, stride, n, c->offset, out);
}

int view_slice(lower_ctx *L, lval x, int d, int64_t start, int64_t end, int64_t step, lval *out) {
    int64_t size[KILN_MAX_DIMS];
    if ((d = lv_dim(d, x.ndim)) < 0)
        return lower_fail(L, "a dim out of range");
    if (L->ir->nodes[x.node].kind != KIR_LOAD)
        return lower_fail(L, "a slice of a computed value");
    if (!fixed_sizes(L, x, size))
        return lower_fail(L, "a slice of a dim whose size differs between workloads");
    const kir_access *c = &L->ir->acc[L->ir->nodes[x.node].acc];
    int64_t s = size[d];
    start = start < 0 ? start + s : start;
    start = start < 0 ? 0 : start > s ? s : start;
    if (step) {
        end = end < 0 ? end + s : end;
        end = end < start ? start : end > s ? s : end;
    } else if (start >= s) {
        return lower_fail(L, "select of an index out of range");
    }
    int axis[KILN_MAX_DIMS], k = 0;
    char stride[KILN_MAX_DIMS][KIR_EXPR], offset[KIR_EXPR], sz[32];
    const char *dst = x.axis[d] >= 0 ? c->dim_stride[d] : "0";
    for (int e = 0; e < x.ndim; e++) {
        if (e == d && !step)
            continue;
        axis[k] = x.axis[e];
        snprintf(stride[k], KIR_EXPR, "%s", c->dim_stride[e]);
        if (e == d) {
            snprintf(sz, sizeof sz, "%lld", (long long)((end - start + step - 1) / step));
            if (!new_axis(L, sz, &axis[k]))
                return 0;
            snprintf(sz, sizeof sz, "%lld", (long long)step);
            kir_mul(stride[k], KIR_EXPR, sz, dst);
        }
        k++;
    }
    snprintf(sz, sizeof sz, "%lld", (long long)start);
    kir_mul(offset, sizeof offset, sz, dst);
    if (strcmp(c->offset, "0"))
        snprintf(offset + strlen(offset), sizeof offset - strlen(offset), "+%s", c->offset);
    return new_load(L, x.node, axis, stride, k, offset, out);
}

/* ---- the driver ---- */

/* Dim l's axis for input binding: like's (see lower_bind_input) or a new one. */
static int input_axis(lower_ctx *L, int like, int skip, int l, const char *size, int *axis) {
    if (like >= 0 && l != skip && l < L->in[like].ndim && L->in[like].axis[l] >= 0 &&
        kir_same(L->p, L->ir->axes[kir_axis_find(L->ir, L->in[like].axis[l])].size, size)) {
        *axis = L->in[like].axis[l];
        return 1;
    }
    return new_axis(L, size, axis);
}

int lower_bind_input(lower_ctx *L, int i, int like, int skip) {
    const kiln_tensor_spec *t = &L->p->inputs[i];
    lval *v = &L->in[i];
    memset(v, 0, sizeof *v);
    if (t->is_scalar) {
        kir_node s = {.kind = KIR_SCALAR, .dtype = t->dtype, .input = i};
        s.acc = s.map = -1;
        return (v->node = kir_add(L->ir, s)) >= 0 ? 1 : full(L);
    }
    if (L->ir->n_acc == KIR_MAX_ACCESS)
        return full(L);
    kir_access *c = &L->ir->acc[L->ir->n_acc];
    memset(c, 0, sizeof *c);
    c->tensor = i;
    c->ndim = v->ndim = t->ndim;
    snprintf(c->offset, sizeof c->offset, "0");
    kir_node ld = {.kind = KIR_LOAD, .dtype = t->dtype, .acc = L->ir->n_acc++, .map = -1};
    /* a dim the model broadcast is stored once (size 1): its captured size comes from kiln.shapes,
     * and the value does not move along it (stride 0) */
    const cJSON *shape = t->layout.expanded
                             ? cJSON_GetObjectItemCaseSensitive(
                                   cJSON_GetObjectItemCaseSensitive(L->p->kiln, "shapes"), t->name)
                             : NULL;
    char stride[KIR_EXPR] = "1";
    for (int k = t->ndim - 1; k >= 0; k--) { /* stored dim k holds logical dim perm[k] */
        char size[KIR_EXPR];
        int l = t->layout.perm[k];
        kiln_tensor_dim_expr(L->p, t, k, size, sizeof size);
        snprintf(c->dim_stride[l], KIR_EXPR, "%s", stride);
        const cJSON *full_size = cJSON_GetArrayItem(shape, l);
        if (is_one(L, size) && cJSON_IsNumber(full_size) && full_size->valuedouble > 1) {
            char s[32];
            snprintf(s, sizeof s, "%lld", (long long)full_size->valuedouble);
            if (!input_axis(L, like, skip, l, s, &c->dim_axis[l]))
                return 0;
            snprintf(c->dim_stride[l], KIR_EXPR, "0");
            v->axis[l] = c->dim_axis[l];
            continue;
        }
        if (!input_axis(L, like, skip, l, size, &c->dim_axis[l]))
            return 0;
        v->axis[l] = c->dim_axis[l];
        if (v->axis[l] >= 0)
            ld.axes |= KIR_BIT(v->axis[l]);
        kir_mul(stride, sizeof stride, stride, size);
    }
    v->prio = tensor_prio(t->ndim);
    return (v->node = kir_add(L->ir, ld)) >= 0 ? 1 : full(L);
}

int lower_bind_output(lower_ctx *L, int o, lval v) {
    const kiln_tensor_spec *t = &L->p->outputs[o];
    if (v.node < 0)
        return lower_fail(L, "output %s is None", t->name);
    if (lv_dtype(L, v) != t->dtype)
        return lower_fail(L, "output %s is %s, the chain computes %s", t->name,
                          kiln_dtype_name(t->dtype), kiln_dtype_name(lv_dtype(L, v)));
    if (v.ndim != t->ndim)
        return lower_fail(L, "output %s has %d dims, the chain's value %d", t->name, t->ndim,
                          v.ndim);
    if (L->ir->n_acc == KIR_MAX_ACCESS)
        return full(L);
    kir_access *c = &L->ir->acc[L->ir->n_acc];
    memset(c, 0, sizeof *c);
    c->tensor = -1 - o;
    c->ndim = t->ndim;
    snprintf(c->offset, sizeof c->offset, "0");
    char stride[KIR_EXPR] = "1";
    for (int k = t->ndim - 1; k >= 0; k--) {
        char size[KIR_EXPR];
        int l = t->layout.perm[k];
        kiln_tensor_dim_expr(L->p, t, k, size, sizeof size);
        if (!kir_same(L->p, size, lv_size(L, v, l)))
            return lower_fail(L, "output %s: dim %d is %s, the chain's value %s", t->name, l, size,
                              lv_size(L, v, l));
        c->dim_axis[l] = v.axis[l];
        snprintf(c->dim_stride[l], KIR_EXPR, "%s", stride);
        kir_mul(stride, sizeof stride, stride, size);
    }
    L->ir->out[o] = (kir_output){v.node, L->ir->n_acc++};
    return 1;
}
