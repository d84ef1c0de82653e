/* rules.c: the table of lowering rules — one row per aten op (or family of overloads) the generator
 * reads, and the few functions the rows share. A pointwise op is a row naming its kir_op; a
 * reduction a row naming its kir_red; composite ops (softmax, log_softmax, logsumexp, var, norms,
 * pooling) are short functions that spell PyTorch's own decomposition with the building blocks
 * of lower.h, in the dtypes eager computes them. A new op costs a row here. kir_lower, at the end,
 * runs the table over a problem's op chain. */
#include "lower.h"

#include <math.h>
#include <string.h>

/* The first tensor-or-number argument ("self"). */
static int self_arg(lower_ctx *L, const kiln_op *op, lval *x) {
    if (!lower_arg(L, op, 0, "self", x))
        return 0;
    if (x->node < 0 && !lower_arg(L, op, 0, "input", x))
        return 0;
    return x->node >= 0 ? 1 : lower_fail(L, "no input");
}

/* A number argument that must be a number (or absent: dflt). */
static int num(lower_ctx *L, const kiln_op *op, int pos, const char *name, double dflt,
               double *out) {
    *out = dflt;
    if (arg_num(op, pos, name, out) < 0)
        return lower_fail(L, "argument %s is not a number", name);
    return 1;
}

/* ---- pointwise ---- */

/* op(self): the row's kir_op. */
static int unary(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    lval x;
    return self_arg(L, op, &x) && lower_pointwise(L, r->code, &x, 1, 0, 0, KILN_DTYPE_COUNT, out);
}

/* op(self, other[, alpha]): add and sub scale other by alpha; rsub swaps. */
static int binary(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    lval ab[2];
    double alpha = 1;
    if (!self_arg(L, op, &ab[0]) || !lower_arg(L, op, 1, "other", &ab[1]) ||
        !num(L, op, 2, "alpha", 1, &alpha))
        return 0;
    int code = r->code == KO_ADD && strstr(op->name, "sub") ? KO_SUB : r->code;
    if (!strncmp(op->name, "rsub", 4)) { /* other - alpha * self */
        lval t = ab[0];
        ab[0] = ab[1];
        ab[1] = t;
    }
    if (code == KO_DIV) {
        const char *mode = arg_text(op, 2, "rounding_mode");
        code = !mode ? KO_DIV : !strcmp(mode, "trunc") ? KO_DIV_TRUNC : KO_DIV_FLOOR;
        if (mode && strcmp(mode, "trunc") && strcmp(mode, "floor"))
            return lower_fail(L, "rounding mode %s", mode);
        alpha = 1;
    }
    return lower_pointwise(L, code, ab, 2, alpha, 0, KILN_DTYPE_COUNT, out);
}

/* Comparisons: self op other (a tensor or a number). */
static int compare(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    lval a, b;
    return self_arg(L, op, &a) && lower_arg(L, op, 1, "other", &b) &&
           lower_binary(L, r->code, a, b, out);
}

static int power(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    (void)r;
    lval base, e;
    if (!lower_arg(L, op, 0, "self", &base) || !lower_arg(L, op, 1, "exponent", &e))
        return 0;
    const kir_node *en = e.node >= 0 ? &L->ir->nodes[e.node] : NULL;
    if (en && e.prio == 0 && en->kind == KIR_CONST && base.prio > 0) /* Tensor_Scalar */
        return lower_pointwise(L, KO_POW_K, &base, 1, en->value, 0, KILN_DTYPE_COUNT, out);
    return lower_binary(L, KO_POW, base, e, out);
}

static int gelu(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    (void)r;
    lval x;
    const char *ap = arg_text(op, 1, "approximate");
    if (ap && strcmp(ap, "tanh") && strcmp(ap, "none"))
        return lower_fail(L, "approximate='%s'", ap);
    return self_arg(L, op, &x) &&
           lower_pointwise(L, ap && !strcmp(ap, "tanh") ? KO_GELU_TANH : KO_GELU, &x, 1, 0, 0,
                           KILN_DTYPE_COUNT, out);
}

/* clamp with number or tensor bounds, clamp_min/max, hardtanh, relu6. */
static int clamp(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    (void)r;
    lval x, lo, hi;
    const char *n = op->name;
    int is_max = !strncmp(n, "clamp_max", 9),
        hard = !strcmp(n, "hardtanh") || !strcmp(n, "hardtanh_"), six = !strncmp(n, "relu6", 5);
    if (!self_arg(L, op, &x))
        return 0;
    if (six || hard) {
        double a = six ? 0 : -1, b = six ? 6 : 1;
        if (hard && (!num(L, op, 1, "min_val", -1, &a) || !num(L, op, 2, "max_val", 1, &b)))
            return 0;
        return lower_pointwise(L, KO_CLAMP, &x, 1, a, b, KILN_DTYPE_COUNT, out);
    }
    if (!lower_arg(L, op, 1, is_max ? "max" : "min", is_max ? &hi : &lo))
        return 0;
    if (is_max)
        lo.node = -1;
    else if (!strncmp(n, "clamp_min", 9))
        hi.node = -1;
    else if (!lower_arg(L, op, 2, "max", &hi))
        return 0;
    const kir_node *ln = lo.node >= 0 ? &L->ir->nodes[lo.node] : NULL;
    const kir_node *hn = hi.node >= 0 ? &L->ir->nodes[hi.node] : NULL;
    if ((!ln || (ln->kind == KIR_CONST && lo.prio == 0)) &&
        (!hn || (hn->kind == KIR_CONST && hi.prio == 0))) {
        lval all[1] = {x};
        if (!lower_pointwise(L, KO_CLAMP, all, 1, ln ? ln->value : -INFINITY,
                             hn ? hn->value : INFINITY, KILN_DTYPE_COUNT, out))
            return 0;
        /* the result's dtype promotes with the bounds (an int tensor clamped by 0.5 is float) */
        lval pr[3] = {x, lo, hi};
        L->ir->nodes[out->node].dtype = lower_promote(L, pr, 3);
        return 1;
    }
    lval t = x;
    if (lo.node >= 0 && !lower_binary(L, KO_MAX, t, lo, &t))
        return 0;
    if (hi.node >= 0 && !lower_binary(L, KO_MIN, t, hi, &t))
        return 0;
    *out = t;
    return 1;
}

/* op(self, k0[, k1]) with defaults: leaky_relu's slope, elu's alpha, softplus's beta, threshold. */
static int with_constants(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    static const struct {
        int op;
        const char *n0, *n1;
        double d0, d1;
    } k[] = {{KO_LEAKY, "negative_slope", NULL, 0.01, 0},
             {KO_ELU, "alpha", NULL, 1, 0},
             {KO_SOFTPLUS, "beta", "threshold", 1, 20}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (k[i].op == r->code) {
            lval x;
            double a, b = k[i].d1;
            if (!self_arg(L, op, &x) || !num(L, op, 1, k[i].n0, k[i].d0, &a) ||
                (k[i].n1 && !num(L, op, 2, k[i].n1, k[i].d1, &b)))
                return 0;
            if (r->code == KO_ELU) { /* elu(x, alpha, scale, input_scale): only the defaults */
                double s = 1, is = 1;
                if (!num(L, op, 2, "scale", 1, &s) || !num(L, op, 3, "input_scale", 1, &is))
                    return 0;
                if (s != 1 || is != 1)
                    return lower_fail(L, "scale or input_scale other than 1");
            }
            return lower_pointwise(L, r->code, &x, 1, a, b, KILN_DTYPE_COUNT, out);
        }
    return lower_fail(L, "no constants for this op");
}

/* Bitwise and, or, xor (also `&`, `|`, `^` on tensors) of integers and bools. */
static int bitwise(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    lval a, b;
    if (!self_arg(L, op, &a) || !lower_arg(L, op, 1, "other", &b) || b.node < 0)
        return 0;
    if (!kir_dtype_is_int(lv_dtype(L, a)) || !kir_dtype_is_int(lv_dtype(L, b)))
        return lower_fail(L, "bitwise logic on floats");
    return lower_binary(L, r->code, a, b, out);
}

/* copy_(self, src): src in self's dtype, broadcast to self's shape. */
static int copy(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    (void)r;
    lval self, src;
    int64_t sizes[KILN_MAX_DIMS];
    if (!self_arg(L, op, &self) || !lower_arg(L, op, 1, "src", &src) || src.node < 0)
        return 0;
    for (int d = 0; d < self.ndim; d++)
        sizes[d] = kir_eval(L->p, lv_size(L, self, d), 0);
    if (src.ndim != self.ndim && !view_expand(L, src, sizes, self.ndim, &src))
        return 0;
    return lower_cast(L, src, lv_dtype(L, self), out);
}

/* triu / tril (x, diagonal): x where column - row >= diagonal (<= for tril), else 0. */
static int triangle(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    (void)r;
    lval x, row, col, d, k, keep, zero;
    double diagonal = 0;
    if (!self_arg(L, op, &x) || !num(L, op, 1, "diagonal", 0, &diagonal))
        return 0;
    if (x.ndim < 2)
        return lower_fail(L, "fewer than 2 dims");
    if (!lower_position(L, x, -2, &row) || !lower_position(L, x, -1, &col) ||
        !lower_binary(L, KO_SUB, col, row, &d) || !lv_const(L, diagonal, &k))
        return 0;
    L->ir->nodes[k.node].dtype = KILN_I64;
    lval w[3];
    if (!lower_binary(L, strcmp(op->name, "triu") ? KO_LE : KO_GE, d, k, &keep) ||
        !lv_const(L, 0, &zero))
        return 0;
    w[0] = keep;
    w[1] = x;
    w[2] = zero;
    return lower_pointwise(L, KO_WHERE, w, 3, 0, 0, KILN_DTYPE_COUNT, out) &&
           lower_cast(L, *out, lv_dtype(L, x), out);
}

/* where(condition, self, other) */
static int where(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    (void)r;
    lval a[3];
    return lower_arg(L, op, 0, "condition", &a[0]) && lower_arg(L, op, 1, "self", &a[1]) &&
           lower_arg(L, op, 2, "other", &a[2]) && lower_cast(L, a[0], KILN_BOOL, &a[0]) &&
           lower_pointwise(L, KO_WHERE, a, 3, 0, 0, KILN_DTYPE_COUNT, out);
}

/* masked_fill(self, mask, value) = where(mask, value, self) in self's dtype. */
static int masked_fill(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    (void)r;
    lval a[3];
    if (!lower_arg(L, op, 1, "mask", &a[0]) || !lower_arg(L, op, 2, "value", &a[1]) ||
        !self_arg(L, op, &a[2]) || !lower_cast(L, a[0], KILN_BOOL, &a[0]))
        return 0;
    return lower_pointwise(L, KO_WHERE, a, 3, 0, 0, KILN_DTYPE_COUNT, out) &&
           lower_cast(L, *out, lv_dtype(L, a[2]), out);
}

/* Casts and copies: to.dtype, to.dtype_layout, to.device, to.other, _to_copy, type_as, and the
 * copies that keep the dtype (contiguous, clone, alias, detach, ...). */
static int cast(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    (void)r;
    lval x;
    if (!self_arg(L, op, &x))
        return 0;
    kiln_dtype t = lv_dtype(L, x);
    int got = 0;
    if (!strcmp(op->name, "type_as") ||
        (!strcmp(op->name, "to") && !strcmp(op->overload, "other"))) {
        lval o;
        if (!lower_arg(L, op, 1, "other", &o) || o.node < 0)
            return 0;
        t = lv_dtype(L, o);
    } else if (!strcmp(op->name, "to") || !strcmp(op->name, "_to_copy")) {
        int at = strcmp(op->name, "to")            ? -1
                 : !strcmp(op->overload, "dtype")  ? 1
                 : !strcmp(op->overload, "device") ? 2
                                                   : -1;
        got = arg_dtype(op, at, "dtype", &t);
    }
    if (got < 0)
        return lower_fail(L, "an unreadable dtype");
    return lower_cast(L, x, t, out);
}

/* ---- views ---- */

static int view(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    (void)r;
    lval x;
    int64_t v[KILN_MAX_DIMS];
    int n = 0;
    double d0 = 0, d1 = -1;
    if (!self_arg(L, op, &x))
        return 0;
    const char *name = op->name;
    if (!strcmp(name, "unsqueeze"))
        return num(L, op, 1, "dim", 0, &d0) && view_unsqueeze(L, x, (int)d0, out);
    if (!strcmp(name, "squeeze")) {
        if (arg_ints(op, 1, "dim", v, &n) < 0)
            return lower_fail(L, "unreadable dims");
        return view_squeeze(L, x, v, n, out);
    }
    if (!strcmp(name, "permute")) {
        if (arg_ints(op, 1, "dims", v, &n) <= 0)
            return lower_fail(L, "unreadable dims");
        return view_permute(L, x, v, n, out);
    }
    if (!strcmp(name, "transpose") || !strcmp(name, "t")) {
        if (!strcmp(name, "t"))
            d1 = x.ndim > 1 ? 1 : 0;
        else if (!num(L, op, 1, "dim0", 0, &d0) || !num(L, op, 2, "dim1", 1, &d1))
            return 0;
        for (int d = 0; d < x.ndim; d++)
            v[d] = d;
        int a = lv_dim((int)d0, x.ndim), b = lv_dim((int)d1, x.ndim);
        if (a < 0 || b < 0)
            return lower_fail(L, "a dim out of range");
        v[a] = b;
        v[b] = a;
        return view_permute(L, x, v, x.ndim, out);
    }
    if (!strcmp(name, "expand")) {
        if (arg_ints(op, 1, "size", v, &n) <= 0)
            return lower_fail(L, "unreadable sizes");
        return view_expand(L, x, v, n, out);
    }
    if (!strcmp(name, "repeat")) { /* tiled: each dim d the merge of (repeats[d], its size) */
        if (arg_ints(op, 1, "repeats", v, &n) <= 0 || n < x.ndim)
            return lower_fail(L, "unreadable repeats");
        while (x.ndim < n) /* more repeats than dims: new leading dims */
            if (!view_unsqueeze(L, x, 0, &x))
                return 0;
        for (int d = 0; d < n; d++) {
            if (v[d] < 1)
                return lower_fail(L, "a repeat of %lld", (long long)v[d]);
            if (v[d] == 1)
                continue;
            int64_t sizes[KILN_MAX_DIMS];
            for (int e = 0; e <= n; e++)
                sizes[e] = e == d ? v[d] : -1;
            if (!view_unsqueeze(L, x, d, &x) || !view_expand(L, x, sizes, n + 1, &x) ||
                !view_merge(L, x, d, 2, &x))
                return 0;
        }
        *out = x;
        return 1;
    }
    if (!strcmp(name, "flatten")) {
        if (!num(L, op, 1, "start_dim", 0, &d0) || !num(L, op, 2, "end_dim", -1, &d1))
            return 0;
        int a = lv_dim((int)d0, x.ndim ? x.ndim : 1), b = lv_dim((int)d1, x.ndim ? x.ndim : 1);
        if (a < 0 || b < a)
            return lower_fail(L, "flatten dims out of range");
        for (int d = 0; d < x.ndim; d++) {
            if (d > a && d <= b) {
                v[n - 1] *= kir_eval(L->p, lv_size(L, x, d), 0);
                continue;
            }
            v[n++] = kir_eval(L->p, lv_size(L, x, d), 0);
        }
        return view_reshape(L, x, v, n, out);
    }
    if (!strcmp(name, "slice") || !strcmp(name, "narrow") || !strcmp(name, "select")) {
        double start = 0, end = INT64_MAX, step = 1;
        if (!num(L, op, 1, "dim", 0, &d0))
            return 0;
        if (!strcmp(name, "select")) {
            if (!num(L, op, 2, "index", 0, &start))
                return 0;
            step = 0;
        } else if (!strcmp(name, "narrow")) {
            if (!num(L, op, 2, "start", 0, &start) || !num(L, op, 3, "length", 0, &end))
                return 0;
            end += start;
        } else if (!num(L, op, 2, "start", 0, &start) || !num(L, op, 3, "end", INT64_MAX, &end) ||
                   !num(L, op, 4, "step", 1, &step)) {
            return 0;
        }
        if (step < 0)
            return lower_fail(L, "a negative step");
        return view_slice(L, x, (int)d0, (int64_t)start, end >= 9.2e18 ? INT64_MAX : (int64_t)end,
                          (int64_t)step, out);
    }
    if (!strcmp(name, "view_as") || !strcmp(name, "expand_as")) {
        lval o;
        if (!lower_arg(L, op, 1, "other", &o) || o.node < 0)
            return 0;
        for (int d = 0; d < o.ndim; d++)
            v[n++] = kir_eval(L->p, lv_size(L, o, d), 0);
        return name[0] == 'v' ? view_reshape(L, x, v, n, out) : view_expand(L, x, v, n, out);
    }
    /* view, _unsafe_view, reshape */
    if (arg_ints(op, 1, "size", v, &n) < 0 || (n == 0 && arg_ints(op, 1, "shape", v, &n) < 0))
        return lower_fail(L, "unreadable sizes");
    return view_reshape(L, x, v, n, out);
}

/* ---- reductions ---- */

/* The reduced dims (dim: a list, one int, or None = all) and keepdim. */
static int dims_arg(lower_ctx *L, const kiln_op *op, int pos, int64_t *dims, int *n, int *keepdim) {
    double k = 0;
    if (arg_ints(op, pos, "dim", dims, n) < 0)
        return lower_fail(L, "unreadable dims");
    if (!num(L, op, pos + 1, "keepdim", 0, &k))
        return 0;
    *keepdim = k != 0;
    return 1;
}

/* The dtype of a sum: dtype=, else int64 for integers, else the input's. */
static kiln_dtype sum_dtype(lower_ctx *L, const kiln_op *op, lval x, int pos) {
    kiln_dtype t = lv_dtype(L, x);
    if (arg_dtype(op, pos, "dtype", &t) <= 0)
        t = kir_dtype_is_int(lv_dtype(L, x)) ? KILN_I64 : lv_dtype(L, x);
    return t;
}

/* sum, prod, amax, amin, max/min over all, mean (sum / count in fp32, then the output's dtype). */
static int reduce(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    lval x;
    int64_t dims[KILN_MAX_DIMS];
    int n = 0, keep = 0;
    if (!self_arg(L, op, &x))
        return 0;
    const int all =
        !strcmp(op->overload, "default") && strcmp(op->name, "amax") && strcmp(op->name, "amin");
    if (!all && !dims_arg(L, op, 1, dims, &n, &keep))
        return 0;
    const int mean = r->code < 0;
    const int red = mean ? KR_SUM : r->code;
    kiln_dtype t =
        red == KR_MAX || red == KR_MIN ? lv_dtype(L, x) : sum_dtype(L, op, x, all ? 1 : 3);
    if (mean && kir_dtype_is_int(t))
        return lower_fail(L, "mean of integers");
    if (!mean)
        return lower_reduce(L, x, dims, n, keep, red, t, out, NULL);
    lval s, cnt;
    return lower_reduce(L, x, dims, n, keep, KR_SUM, KILN_F32, &s, NULL) &&
           lower_count(L, x, dims, n, 0, &cnt) && lower_binary(L, KO_DIV, s, cnt, out) &&
           lower_cast(L, *out, t, out);
}

/* max.dim / min.dim (values, indices), argmax / argmin (indices). */
static int arg_reduce(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    lval x;
    int64_t dims[KILN_MAX_DIMS];
    int n = 0, keep = 0, node;
    if (!self_arg(L, op, &x) || !dims_arg(L, op, 1, dims, &n, &keep))
        return 0;
    if (kir_dtype_is_int(lv_dtype(L, x)))
        return lower_fail(L, "argmax of integers");
    lval v;
    if (!lower_reduce(L, x, dims, n, keep, r->code, lv_dtype(L, x), &v, &node))
        return 0;
    const int values = !strcmp(op->name, "max") || !strcmp(op->name, "min");
    lval *idx = values ? &out[1] : &out[0];
    if (values)
        out[0] = v;
    return lower_part(L, node, v, KILN_I64, idx);
}

/* max / min: .dim gives values and indices, .default the extreme of all, .other the pointwise
 * maximum / minimum. */
static int max_min(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    lower_rule as = *r;
    if (!strcmp(op->overload, "dim"))
        return arg_reduce(L, op, r, out);
    if (!strcmp(op->overload, "default")) {
        as.code = r->code == KR_ARGMAX ? KR_MAX : KR_MIN;
        return reduce(L, op, &as, out);
    }
    as.code = r->code == KR_ARGMAX ? KO_MAX : KO_MIN;
    return compare(L, op, &as, out);
}

/* var / std / var_mean / std_mean: Welford's mean and M2, var = M2 / (n - correction). */
static int variance(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    (void)r;
    lval x, xf, mean, m2, cnt, var;
    int64_t dims[KILN_MAX_DIMS];
    int n = 0, keep = 0, node;
    double corr = 1, unbiased = 1;
    if (!self_arg(L, op, &x))
        return 0;
    double k = 0;
    if (strcmp(op->overload, "default") && arg_ints(op, 1, "dim", dims, &n) < 0)
        return lower_fail(L, "unreadable dims");
    if (!strcmp(op->overload, "correction")) { /* (self, dim, *, correction, keepdim) */
        if (arg_num(op, 2, "correction", &corr) < 0 || !num(L, op, 3, "keepdim", 0, &k))
            return lower_fail(L, "unreadable correction");
    } else if (!strcmp(op->overload, "dim")) { /* (self, dim, unbiased, keepdim) */
        if (!num(L, op, 2, "unbiased", 1, &unbiased) || !num(L, op, 3, "keepdim", 0, &k))
            return 0;
        corr = unbiased;
    } else if (!num(L, op, 1, "unbiased", 1, &unbiased)) { /* (self, unbiased) */
        return 0;
    } else {
        corr = unbiased;
    }
    keep = k != 0;
    kiln_dtype t = lv_dtype(L, x);
    if (kir_dtype_is_int(t))
        return lower_fail(L, "variance of integers");
    if (!lower_cast(L, x, KILN_F32, &xf) ||
        !lower_reduce(L, xf, dims, n, keep, KR_WELFORD, KILN_F32, &mean, &node) ||
        !lower_part(L, node, mean, KILN_F32, &m2) || !lower_count(L, x, dims, n, corr, &cnt) ||
        !lower_binary(L, KO_DIV, m2, cnt, &var))
        return 0;
    const int is_std = !strncmp(op->name, "std", 3);
    if (is_std && !lower_pointwise(L, KO_SQRT, &var, 1, 0, 0, KILN_DTYPE_COUNT, &var))
        return 0;
    if (!lower_cast(L, var, t, &out[0]))
        return 0;
    return strstr(op->name, "_mean") ? lower_cast(L, mean, t, &out[1]) : 1;
}

/* logsumexp: max m, m' = where(isinf(m), 0, m), log(sum(exp(x - m'))) + m', in x's dtype (as
 * PyTorch's logsumexp_out_impl: integers are cast to float32 first). */
static int logsumexp(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    (void)r;
    lval x, mk, inf, zero, mm, e, s, lg;
    int64_t dims[KILN_MAX_DIMS];
    int n = 0, keep = 0;
    if (!self_arg(L, op, &x) || !dims_arg(L, op, 1, dims, &n, &keep))
        return 0;
    if (n == 0)
        return lower_fail(L, "logsumexp without dims");
    if (kir_dtype_is_int(lv_dtype(L, x)) && !lower_cast(L, x, KILN_F32, &x))
        return 0;
    kiln_dtype t = lv_dtype(L, x);
    if (!lower_reduce(L, x, dims, n, 1, KR_MAX, t, &mk, NULL) ||
        !lower_pointwise(L, KO_ISINF, &mk, 1, 0, 0, KILN_DTYPE_COUNT, &inf) ||
        !lv_const(L, 0, &zero))
        return 0;
    lval w[3] = {inf, zero, mk};
    if (!lower_pointwise(L, KO_WHERE, w, 3, 0, 0, KILN_DTYPE_COUNT, &mm) ||
        !lower_binary(L, KO_SUB, x, mm, &e) ||
        !lower_pointwise(L, KO_EXP, &e, 1, 0, 0, KILN_DTYPE_COUNT, &e) ||
        !lower_reduce(L, e, dims, n, keep, KR_SUM, t, &s, NULL) ||
        !lower_pointwise(L, KO_LOG, &s, 1, 0, 0, KILN_DTYPE_COUNT, &lg))
        return 0;
    if (!keep && !view_squeeze(L, mm, dims, n, &mm))
        return 0;
    return lower_binary(L, KO_ADD, lg, mm, out);
}

/* _softmax(x, dim, half_to_float), softmax.int(x, dim, dtype), and the log forms (r->code 1):
 * in fp32 for 16-bit inputs, as PyTorch's kernels compute them, rounded once. */
static int softmax(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    lval x, xf, m, d, e, s, y;
    double dim = -1, h2f = 0;
    if (!self_arg(L, op, &x) || !num(L, op, 1, "dim", -1, &dim))
        return 0;
    kiln_dtype t = lv_dtype(L, x), dt;
    if (op->name[0] == '_') {
        if (!num(L, op, 2, "half_to_float", 0, &h2f))
            return 0;
        t = h2f != 0 ? KILN_F32 : t;
    } else if (arg_dtype(op, 2, "dtype", &dt) > 0) {
        if (!lower_cast(L, x, dt, &x))
            return 0;
        t = dt;
    }
    if (kir_dtype_is_int(t))
        return lower_fail(L, "softmax of integers");
    int64_t dims[1] = {(int64_t)dim};
    if (!lower_cast(L, x, KILN_F32, &xf) ||
        !lower_reduce(L, xf, dims, 1, 1, KR_MAX, KILN_F32, &m, NULL) ||
        !lower_binary(L, KO_SUB, xf, m, &d) ||
        !lower_pointwise(L, KO_EXP, &d, 1, 0, 0, KILN_DTYPE_COUNT, &e) ||
        !lower_reduce(L, e, dims, 1, 1, KR_SUM, KILN_F32, &s, NULL))
        return 0;
    if (r->code) { /* (x - m) - log(s) */
        if (!lower_pointwise(L, KO_LOG, &s, 1, 0, 0, KILN_DTYPE_COUNT, &s) ||
            !lower_binary(L, KO_SUB, d, s, &y))
            return 0;
    } else if (!lower_pointwise(L, KO_RECIP, &s, 1, 0, 0, KILN_DTYPE_COUNT, &s) ||
               !lower_binary(L, KO_MUL, e, s, &y)) {
        /* e * (1 / s): the reciprocal is the row's, computed once; a division at every element
         * is ~10 instructions on the GPU. Within one ulp of e / s in fp32. */
        return 0;
    }
    return lower_cast(L, y, t, out);
}

/* layer_norm / native_layer_norm (y, mean, rstd) and rms_norm / _fused_rms_norm (y, rstd) over
 * the last len(normalized_shape) dims, in fp32, affine, rounded once (r->code 1: RMS). */
static int norm(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    lval x, xf, w, b, mean, m2, cnt, var, eps, rstd, y;
    int64_t shape[KILN_MAX_DIMS], dims[KILN_MAX_DIMS];
    int n = 0, node;
    const int rms = r->code;
    double e = rms ? -1 : 1e-5;
    if (!self_arg(L, op, &x) || arg_ints(op, 1, "normalized_shape", shape, &n) <= 0 ||
        !lower_arg(L, op, 2, "weight", &w) || (!rms && !lower_arg(L, op, 3, "bias", &b)) ||
        !num(L, op, rms ? 3 : 4, "eps", e, &e))
        return 0;
    kiln_dtype t = lv_dtype(L, x);
    if (kir_dtype_is_int(t) || n > x.ndim)
        return lower_fail(L, "a norm of integers or over more dims than there are");
    if (e < 0) /* rms_norm's eps=None: the input dtype's epsilon */
        e = t == KILN_BF16 ? 0.0078125 : t == KILN_F16 ? 0.0009765625 : 1.1920928955078125e-07;
    for (int i = 0; i < n; i++)
        dims[i] = x.ndim - n + i;
    if (!lower_cast(L, x, KILN_F32, &xf) || !lv_const(L, e, &eps))
        return 0;
    if (rms) {
        lval sq;
        if (!lower_binary(L, KO_MUL, xf, xf, &sq) ||
            !lower_reduce(L, sq, dims, n, 1, KR_SUM, KILN_F32, &m2, NULL) ||
            !lower_count(L, x, dims, n, 0, &cnt) || !lower_binary(L, KO_DIV, m2, cnt, &var) ||
            !lower_binary(L, KO_ADD, var, eps, &var) ||
            !lower_pointwise(L, KO_RSQRT, &var, 1, 0, 0, KILN_DTYPE_COUNT, &rstd) ||
            !lower_binary(L, KO_MUL, xf, rstd, &y))
            return 0;
    } else if (!lower_reduce(L, xf, dims, n, 1, KR_WELFORD, KILN_F32, &mean, &node) ||
               !lower_part(L, node, mean, KILN_F32, &m2) || !lower_count(L, x, dims, n, 0, &cnt) ||
               !lower_binary(L, KO_DIV, m2, cnt, &var) ||
               !lower_binary(L, KO_ADD, var, eps, &var) ||
               !lower_pointwise(L, KO_RSQRT, &var, 1, 0, 0, KILN_DTYPE_COUNT, &rstd) ||
               !lower_binary(L, KO_SUB, xf, mean, &y) || !lower_binary(L, KO_MUL, y, rstd, &y)) {
        return 0;
    }
    if (rms) { /* PyTorch's rms_norm rounds x * rstd to x's dtype, then multiplies the weight */
        if (!lower_cast(L, y, t, &y) ||
            (w.node >= 0 && (!lower_binary(L, KO_MUL, y, w, &y) || !lower_cast(L, y, t, &y))))
            return 0;
    } else if (w.node >= 0 &&
               (!lower_cast(L, w, KILN_F32, &w) || !lower_binary(L, KO_MUL, y, w, &y))) {
        return 0;
    }
    if (!rms && b.node >= 0 &&
        (!lower_cast(L, b, KILN_F32, &b) || !lower_binary(L, KO_ADD, y, b, &y)))
        return 0;
    if (!lower_cast(L, y, t, &out[0]))
        return 0;
    /* the statistics, where the op returns them, in the dtype capture recorded (fp32 by default) */
    kiln_dtype ts = op->result_dtype[1] != KILN_DTYPE_COUNT ? op->result_dtype[1] : KILN_F32;
    if (!strcmp(op->name, "native_layer_norm"))
        return lower_cast(L, mean, ts, &out[1]) && lower_cast(L, rstd, ts, &out[2]);
    if (!strcmp(op->name, "_fused_rms_norm"))
        return lower_cast(L, rstd, ts, &out[1]);
    return 1;
}

/* group_norm(input, num_groups, weight, bias, eps) and native_group_norm(input, weight, bias, N,
 * C, HxW, group, eps) -> (y, mean, rstd): the channels viewed as (groups, channels per group), each
 * group's biased variance over its channels and the spatial dims in fp32 (Welford), rsqrt(var +
 * eps), the affine per channel, rounded once to the input's dtype, as PyTorch's kernels compute it.
 * The statistics are [N, group] in the input's dtype, fp32 when the weight is (a mixed norm). */
static int group_norm(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    (void)r;
    lval x, xg, xf, w, b, mean, m2, cnt, var, eps, rstd, y;
    const int native = !strcmp(op->name, "native_group_norm");
    double groups = 0, e = 1e-5;
    int64_t dims[KILN_MAX_DIMS];
    int nd = 0, node;
    if (!self_arg(L, op, &x) || !lower_arg(L, op, native ? 1 : 2, "weight", &w) ||
        !lower_arg(L, op, native ? 2 : 3, "bias", &b) ||
        !num(L, op, native ? 6 : 1, native ? "group" : "num_groups", 0, &groups) ||
        !num(L, op, native ? 7 : 4, "eps", e, &e))
        return 0;
    kiln_dtype t = lv_dtype(L, x), tw = w.node >= 0 ? lv_dtype(L, w) : t;
    if (kir_dtype_is_int(t) || x.ndim < 2 || x.ndim == KILN_MAX_DIMS)
        return lower_fail(L, "a group_norm of integers, or of fewer than 2 dims or too many");
    const int64_t C = kir_eval(L->p, lv_size(L, x, 1), 0), G = (int64_t)groups;
    if (G < 1 || C % G)
        return lower_fail(L, "%lld channels in %lld groups", (long long)C, (long long)G);
    const int64_t split[2] = {G, C / G};
    for (int d = 2; d <= x.ndim; d++) /* the channels per group and the spatial dims */
        dims[nd++] = d;
    if (!view_split(L, x, 1, split, 2, &xg) || !lower_cast(L, xg, KILN_F32, &xf) ||
        !lv_const(L, e, &eps) ||
        !lower_reduce(L, xf, dims, nd, 1, KR_WELFORD, KILN_F32, &mean, &node) ||
        !lower_part(L, node, mean, KILN_F32, &m2) || !lower_count(L, xg, dims, nd, 0, &cnt) ||
        !lower_binary(L, KO_DIV, m2, cnt, &var) || !lower_binary(L, KO_ADD, var, eps, &var) ||
        !lower_pointwise(L, KO_RSQRT, &var, 1, 0, 0, KILN_DTYPE_COUNT, &rstd) ||
        !lower_binary(L, KO_SUB, xf, mean, &y) || !lower_binary(L, KO_MUL, y, rstd, &y) ||
        !view_merge(L, y, 1, 2, &y))
        return 0;
    lval *affine[2] = {&w, &b};
    for (int i = 0; i < 2; i++) { /* [C] against [N, C, spatial...]: C's dim lined up */
        lval *v = affine[i];
        if (v->node < 0)
            continue;
        for (int d = 2; d < x.ndim; d++)
            if (!view_unsqueeze(L, *v, -1, v))
                return 0;
        if (!lower_cast(L, *v, KILN_F32, v) || !lower_binary(L, i ? KO_ADD : KO_MUL, y, *v, &y))
            return 0;
    }
    if (!lower_cast(L, y, t, &out[0]))
        return 0;
    if (!native)
        return 1;
    kiln_dtype ts = op->result_dtype[1];
    if (ts == KILN_DTYPE_COUNT)
        ts = tw == KILN_F32 ? KILN_F32 : t;
    return view_squeeze(L, mean, dims, nd, &mean) && lower_cast(L, mean, ts, &out[1]) &&
           view_squeeze(L, rstd, dims, nd, &rstd) && lower_cast(L, rstd, ts, &out[2]);
}

/* Inference batch norm: batch_norm(input, weight, bias, running_mean, running_var, training,
 * momentum, eps, cudnn_enabled), native_batch_norm(..., training, momentum, eps) and
 * _native_batch_norm_legit_no_training(..., momentum, eps) with training false. As PyTorch's cpu
 * kernel: per channel (dim 1) a = w * rsqrt(var + eps) and s = b - mean * a in fp32, y = x * a + s
 * rounded once to the input's dtype. Only y is lowered (the saved statistics are empty on the cpu
 * and capture drops them; a problem that keeps them is left to the batchnorm family). */
static int batch_norm(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    (void)r;
    lval x, xf, w, b, rm, rv, eps, a, s, y;
    const int legit = !strcmp(op->name, "_native_batch_norm_legit_no_training");
    double training = 0, e = 1e-5;
    if (!self_arg(L, op, &x) || !lower_arg(L, op, 1, "weight", &w) ||
        !lower_arg(L, op, 2, "bias", &b) || !lower_arg(L, op, 3, "running_mean", &rm) ||
        !lower_arg(L, op, 4, "running_var", &rv) ||
        (!legit && !num(L, op, 5, "training", 0, &training)) ||
        !num(L, op, legit ? 6 : 7, "eps", e, &e))
        return 0;
    if (training != 0)
        return lower_fail(L, "a batch norm in training mode (batch statistics)");
    if (rm.node < 0 || rv.node < 0)
        return lower_fail(L, "a batch norm without running statistics");
    kiln_dtype t = lv_dtype(L, x);
    if (kir_dtype_is_int(t) || x.ndim < 2)
        return lower_fail(L, "a batch_norm of integers, or of fewer than 2 dims");
    lval *per_channel[4] = {&w, &b, &rm, &rv};
    for (int i = 0; i < 4; i++) { /* [C] against [N, C, spatial...]: C's dim lined up */
        lval *v = per_channel[i];
        if (v->node < 0)
            continue;
        if (v->ndim != 1)
            return lower_fail(L, "a batch norm's per-channel tensor of %d dims", v->ndim);
        for (int d = 2; d < x.ndim; d++)
            if (!view_unsqueeze(L, *v, -1, v))
                return 0;
        if (!lower_cast(L, *v, KILN_F32, v))
            return 0;
    }
    if (!lower_cast(L, x, KILN_F32, &xf) || !lv_const(L, e, &eps) ||
        !lower_binary(L, KO_ADD, rv, eps, &a) ||
        !lower_pointwise(L, KO_RSQRT, &a, 1, 0, 0, KILN_DTYPE_COUNT, &a) ||
        (w.node >= 0 && !lower_binary(L, KO_MUL, a, w, &a)) || !lower_binary(L, KO_MUL, rm, a, &s))
        return 0;
    if (b.node >= 0) {
        if (!lower_binary(L, KO_SUB, b, s, &s))
            return 0;
    } else if (!lower_pointwise(L, KO_NEG, &s, 1, 0, 0, KILN_DTYPE_COUNT, &s)) {
        return 0;
    }
    return lower_binary(L, KO_MUL, xf, a, &y) && lower_binary(L, KO_ADD, y, s, &y) &&
           lower_cast(L, y, t, &out[0]);
}

/* ---- windows and gathers ---- */

/* A list argument of n numbers (one number repeats), or dflt. */
static int spatial_ints(lower_ctx *L, const kiln_op *op, int pos, const char *name, int n,
                        const int64_t *dflt, int64_t *out) {
    int64_t v[KILN_MAX_DIMS];
    int k = 0;
    int got = arg_ints(op, pos, name, v, &k);
    if (got < 0)
        return lower_fail(L, "unreadable %s", name);
    for (int i = 0; i < n; i++)
        out[i] = k == 0 ? dflt[i] : k == 1 ? v[0] : i < k ? v[i] : -1;
    if (k > 1 && k != n)
        return lower_fail(L, "%s has %d values for %d dims", name, k, n);
    return 1;
}

/* The sizes of a window's result along the last m->n dims of x, by PyTorch's formula (ceil_mode:
 * the last window starts inside the input or its left padding); numbers, the same in every
 * workload. */
static int window_sizes(lower_ctx *L, lval x, const kir_map *m, int ceil_mode,
                        char size[][KIR_EXPR]) {
    for (int i = 0; i < m->n; i++) {
        if (m->kernel[i] < 1 || m->stride[i] < 1 || m->dilation[i] < 1 || m->pad[i] < 0)
            return lower_fail(L, "a window PyTorch refuses");
        const char *in = lv_size(L, x, x.ndim - m->n + i);
        int64_t span = m->dilation[i] * (m->kernel[i] - 1) + 1;
        int64_t o0 = -1;
        for (int w = 0; w < L->p->n_workloads; w++) {
            int64_t h = kir_eval(L->p, in, w), num_ = h + 2 * m->pad[i] - span;
            int64_t o = (num_ + (ceil_mode ? m->stride[i] - 1 : 0)) / m->stride[i] + 1;
            if (ceil_mode && (o - 1) * m->stride[i] >= h + m->pad[i])
                o--;
            if (num_ < 0 || (o0 >= 0 && o != o0))
                return lower_fail(L, "window sizes that differ between workloads");
            o0 = o;
        }
        snprintf(size[i], KIR_EXPR, "%lld", (long long)o0);
    }
    return 1;
}

/* avg_pool{1,2,3}d, max_pool{1,2,3}d[_with_indices]: the window reads dst * stride - pad + j *
 * dilation; output sizes by PyTorch's formula (ceil_mode: the last window starts inside the input
 * or its left padding). */
static int pool(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    lval x;
    kir_map m = {.n = op->name[strlen(op->name) - 2] - '0'};
    if (strstr(op->name, "with_indices"))
        m.n = op->name[strlen("max_pool")] - '0';
    const int avg = r->code == KR_AVG;
    int64_t one[3] = {1, 1, 1}, zero[3] = {0, 0, 0};
    double ceil_mode = 0, cip = 1, div = 0;
    if (!self_arg(L, op, &x) || !spatial_ints(L, op, 1, "kernel_size", m.n, one, m.kernel) ||
        !spatial_ints(L, op, 2, "stride", m.n, m.kernel, m.stride) ||
        !spatial_ints(L, op, 3, "padding", m.n, zero, m.pad))
        return 0;
    if (avg) {
        if (!num(L, op, 4, "ceil_mode", 0, &ceil_mode) ||
            !num(L, op, 5, "count_include_pad", 1, &cip) ||
            !num(L, op, 6, "divisor_override", 0, &div))
            return 0;
        memcpy(m.dilation, one, sizeof one);
    } else if (!spatial_ints(L, op, 4, "dilation", m.n, one, m.dilation) ||
               !num(L, op, 5, "ceil_mode", 0, &ceil_mode)) {
        return 0;
    }
    m.count_include_pad = cip != 0;
    m.divisor = (int64_t)div;
    if (kir_dtype_is_int(lv_dtype(L, x)) || x.ndim < m.n + 1)
        return lower_fail(L, "pooling of integers or of fewer than %d dims", m.n + 1);
    char size[3][KIR_EXPR];
    for (int i = 0; i < m.n; i++)
        if (2 * m.pad[i] > m.kernel[i])
            return lower_fail(L, "a window PyTorch refuses");
    if (!window_sizes(L, x, &m, ceil_mode != 0, size))
        return 0;
    int node;
    if (!lower_window(L, x, m, r->code, size, lv_dtype(L, x), &out[0], &node))
        return 0;
    return avg || !strstr(op->name, "with_indices") ||
           lower_part(L, node, out[0], KILN_I64, &out[1]);
}

/* convolution / _convolution / conv{1,2,3}d, depthwise only (groups = channels, weight [C, 1,
 * k...]): a window that sums the input at dst * stride - pad + j * dilation (zero outside) times
 * the weight at tap j, in fp32, plus the bias, rounded once. Other convolutions are GEMM-shaped
 * (compute-bound: no IR form). */
static int conv(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    (void)r;
    lval x, w, bias;
    const int aten = strstr(op->name, "convolution") != NULL;
    if (!lower_arg(L, op, 0, "input", &x) || !lower_arg(L, op, 1, "weight", &w) ||
        !lower_arg(L, op, 2, "bias", &bias))
        return 0;
    if (x.node < 0 || w.node < 0 || w.ndim < 3 || w.ndim > 5 || x.ndim < w.ndim - 1)
        return lower_fail(L, "a convolution without input or weight, or of %d dims", w.ndim);
    kir_map m = {.n = w.ndim - 2};
    double transposed = 0, groups = 1;
    const int64_t one[3] = {1, 1, 1}, zero[3] = {0, 0, 0};
    if (aten && !num(L, op, 6, "transposed", 0, &transposed))
        return 0;
    if (!num(L, op, aten ? 8 : 6, "groups", 1, &groups))
        return 0;
    const int cd = x.ndim - m.n - 1; /* the channel dim */
    const char *c = lv_size(L, x, cd);
    int depthwise =
        !transposed && kir_same(L->p, lv_size(L, w, 0), c) && kir_same(L->p, lv_size(L, w, 1), "1");
    for (int k = 0; k < L->p->n_workloads; k++) {
        depthwise &= groups == (double)kir_eval(L->p, c, k);
        for (int i = 0; i < m.n; i++) {
            const int64_t kernel = kir_eval(L->p, lv_size(L, w, 2 + i), k);
            if (k && kernel != m.kernel[i])
                return lower_fail(L, "kernel sizes that differ between workloads");
            m.kernel[i] = kernel;
        }
    }
    if (!depthwise)
        return lower_fail(L,
                          "not a depthwise convolution (groups %g, weight [%s, %s, ...], %s "
                          "channels; dense and grouped ones are GEMM-shaped)",
                          groups, lv_size(L, w, 0), lv_size(L, w, 1), c);
    const char *padding = arg_text(op, 4, "padding");
    if (!spatial_ints(L, op, 3, "stride", m.n, one, m.stride) ||
        !spatial_ints(L, op, 5, "dilation", m.n, one, m.dilation) ||
        (!padding && !spatial_ints(L, op, 4, "padding", m.n, zero, m.pad)))
        return 0;
    for (int i = 0; padding && i < m.n; i++) { /* conv{n}d's 'valid' and 'same' */
        const int64_t span = m.dilation[i] * (m.kernel[i] - 1);
        if (strcmp(padding, "valid") && (strcmp(padding, "same") || span % 2))
            return lower_fail(L, "padding '%s'", padding);
        m.pad[i] = strcmp(padding, "same") ? 0 : span / 2;
    }
    if (kir_dtype_is_int(lv_dtype(L, x)) || lv_dtype(L, w) != lv_dtype(L, x))
        return lower_fail(L, "a convolution of %s by %s", kiln_dtype_name(lv_dtype(L, x)),
                          kiln_dtype_name(lv_dtype(L, w)));
    char size[3][KIR_EXPR];
    if (!window_sizes(L, x, &m, 0, size) || !lower_conv(L, x, w, m, size, out))
        return 0;
    if (bias.node >= 0) { /* [C] along the channel dim */
        if (bias.ndim != 1)
            return lower_fail(L, "a bias of %d dims", bias.ndim);
        lval b = bias;
        b.ndim = m.n + 1;
        for (int i = 1; i <= m.n; i++)
            b.axis[i] = -1;
        if (!lower_binary(L, KO_ADD, *out, b, out))
            return 0;
    }
    return lower_cast(L, *out, lv_dtype(L, x), out);
}

/* adaptive_avg_pool{1,2,3}d(x, output_size): to 1 it is a mean over the spatial dims (keepdim),
 * else a window from floor(o * in / out) to ceil((o + 1) * in / out). */
static int adaptive_pool(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    (void)r;
    lval x;
    int64_t osz[3];
    int n = 0;
    if (!self_arg(L, op, &x) || arg_ints(op, 1, "output_size", osz, &n) <= 0 || n > 3 ||
        x.ndim < n + 1)
        return lower_fail(L, "unreadable output_size");
    int ones = 1;
    for (int i = 0; i < n; i++)
        ones &= osz[i] == 1;
    kiln_dtype t = lv_dtype(L, x);
    if (kir_dtype_is_int(t))
        return lower_fail(L, "pooling of integers");
    if (ones) {
        int64_t dims[3];
        lval s, cnt;
        for (int i = 0; i < n; i++)
            dims[i] = x.ndim - n + i;
        return lower_reduce(L, x, dims, n, 1, KR_SUM, KILN_F32, &s, NULL) &&
               lower_count(L, x, dims, n, 0, &cnt) && lower_binary(L, KO_DIV, s, cnt, out) &&
               lower_cast(L, *out, t, out);
    }
    kir_map m = {.n = n, .adaptive = 1};
    char size[3][KIR_EXPR];
    for (int i = 0; i < n; i++)
        snprintf(size[i], KIR_EXPR, "%lld", (long long)osz[i]);
    int node;
    return lower_window(L, x, m, KR_AVG, size, t, out, &node);
}

/* constant_pad_nd(x, pad, value) / pad(x, pad, 'constant', value): src = dst - pad_before. */
static int pad(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    (void)r;
    lval x;
    int64_t pads[2 * KILN_MAX_DIMS];
    int n = 0;
    double value = 0;
    const char *mode = arg_text(op, 2, "mode");
    if (mode && strcmp(mode, "constant"))
        return lower_fail(L, "pad mode '%s'", mode);
    if (!self_arg(L, op, &x) || arg_ints(op, 1, "pad", pads, &n) <= 0 || n % 2 || n / 2 > x.ndim ||
        !num(L, op, strcmp(op->name, "pad") ? 2 : 3, "value", 0, &value))
        return lower_fail(L, "unreadable padding");
    int zero = 1;
    for (int i = 0; i < n; i++)
        zero &= pads[i] == 0;
    if (zero) { /* a copy */
        *out = x;
        return 1;
    }
    if (n / 2 > 3)
        return lower_fail(L, "padding of more than 3 dims");
    kir_map m = {.n = n / 2};
    char size[3][KIR_EXPR];
    for (int i = 0; i < m.n; i++) { /* pads run from the last dim backwards */
        int k = m.n - 1 - i, d = x.ndim - m.n + k;
        int64_t lo = pads[2 * i], hi = pads[2 * i + 1];
        m.mul[k] = 1;
        m.add[k] = -lo;
        m.den[k] = 1;
        int64_t s = kir_eval(L->p, lv_size(L, x, d), 0) + lo + hi;
        snprintf(size[k], KIR_EXPR, "%lld", (long long)s);
        char in[32];
        snprintf(in, sizeof in, "%lld", (long long)(s - lo - hi));
        if (!kir_same(L->p, lv_size(L, x, d), in) || s < 1)
            return lower_fail(L, "padding a dim whose size differs between workloads");
    }
    return lower_remap(L, x, x.ndim - m.n, m, size, value, out);
}

/* upsample_nearest{1,2,3}d by integer factors: src = dst / factor. */
static int upsample(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    (void)r;
    lval x;
    kir_map m = {.n = op->name[strlen("upsample_nearest")] - '0'};
    int64_t osz[3];
    int n = 0;
    if (!self_arg(L, op, &x) || x.ndim < m.n + 1 || arg_ints(op, 1, "output_size", osz, &n) < 0)
        return lower_fail(L, "unreadable output_size");
    const kiln_arg *sf = kiln_op_arg(op, 2, "scale_factors");
    char size[3][KIR_EXPR];
    for (int i = 0; i < m.n; i++) {
        int64_t in = kir_eval(L->p, lv_size(L, x, x.ndim - m.n + i), 0);
        int64_t o = n ? osz[i] : -1;
        if (!n) {
            if (!sf || sf->kind != KILN_ARG_INTS || sf->n_ints != m.n)
                return lower_fail(L, "scale factors that are not integers");
            o = in * sf->ints[i];
        }
        if (o % in)
            return lower_fail(L, "a non-integer scale factor");
        m.mul[i] = 1;
        m.den[i] = o / in;
        snprintf(size[i], KIR_EXPR, "%lld", (long long)o);
    }
    return lower_remap(L, x, x.ndim - m.n, m, size, 0, out);
}

/* index.Tensor(self, indices): one index tensor among Nones, a gather along its dim. */
static int gather(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    (void)r;
    lval x, idx;
    const kiln_arg *a = kiln_op_arg(op, 1, "indices");
    if (!self_arg(L, op, &x))
        return 0;
    if (!a || a->kind != KILN_ARG_OTHER || a->n_values < 1)
        return lower_fail(L, "indices that are not a list of tensors");
    int d = -1;
    for (int i = 0; i < a->n_values; i++)
        if (a->values[i].input >= 0 || a->values[i].op >= 0) {
            if (d >= 0)
                return lower_fail(L, "more than one index tensor");
            d = i;
        }
    const kiln_value *v = &a->values[d];
    idx = v->input >= 0 ? L->in[v->input] : L->res[v->op][v->slot];
    return lower_gather(L, x, d, idx, out);
}

/* embedding(weight, indices, ...): a gather of weight's rows. */
static int embedding(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    (void)r;
    lval w, idx;
    if (!lower_arg(L, op, 0, "weight", &w) || !lower_arg(L, op, 1, "indices", &idx))
        return 0;
    return lower_gather(L, w, 0, idx, out);
}

/* cat(tensors, dim): each input read at dst - its offset along dim (0 outside it), the reads added:
 * exactly one is inside at every point, and x + 0 is x. As in PyTorch, 1-d empty tensors are
 * left out; the cat of one tensor is that tensor, read where it is (no remap: a reduction may feed
 * it, as the RMSNorm of a value joined to an empty KV cache). stack(tensors, dim) is the cat of
 * the tensors each unsqueezed at dim (GPT-J's rotate_every_two). */
static int cat(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    const int stack = r->code; /* stack: each tensor unsqueezed at dim, then their cat */
    const kiln_arg *a = kiln_op_arg(op, 0, "tensors");
    double dim = 0;
    if (!a || a->kind != KILN_ARG_OTHER || a->n_values < 1 || !num(L, op, 1, "dim", 0, &dim))
        return lower_fail(L, "tensors that are not a list of tensors");
    lval in[KILN_OP_MAX_LIST];
    int64_t total = 0, size[KILN_OP_MAX_LIST];
    int n = 0;
    for (int k = 0; k < a->n_values; k++) {
        const kiln_value *v = &a->values[k];
        if (v->input < 0 && v->op < 0)
            return lower_fail(L, "a None among the tensors");
        const int i = n;
        in[i] = v->input >= 0 ? L->in[v->input] : L->res[v->op][v->slot];
        if (stack && !view_unsqueeze(L, in[i], (int)dim, &in[i]))
            return 0;
        if (!stack && in[i].ndim == 1 && kir_same(L->p, lv_size(L, in[i], 0), "0"))
            continue;
        int d = lv_dim((int)dim, in[i].ndim);
        if (d < 0 || in[i].ndim != in[0].ndim)
            return lower_fail(L, "a dim out of range");
        /* an empty part adds nothing: the pass-through half of a rotary embedding that covers the
         * whole head (Phi-3's `cat([q_embed, q_pass], -1)` with q_pass [.., 0]) */
        if (kir_same(L->p, lv_size(L, in[i], d), "0"))
            continue;
        n++;
        size[i] = kir_eval(L->p, lv_size(L, in[i], d), 0);
        char s[32];
        snprintf(s, sizeof s, "%lld", (long long)size[i]);
        if (!kir_same(L->p, lv_size(L, in[i], d), s))
            return lower_fail(L, "a dim whose size differs between workloads");
        total += size[i];
    }
    if (n == 0)
        return lower_fail(L, "only empty tensors");
    kiln_dtype t = lower_promote(L, in, n);
    if (n == 1) /* one tensor besides empty ones (an empty KV cache): the tensor itself */
        return lower_cast(L, in[0], t, out);
    char sz[1][KIR_EXPR];
    snprintf(sz[0], KIR_EXPR, "%lld", (long long)total);
    lval acc = {.node = -1};
    int64_t off = 0;
    for (int i = 0; i < n; off += size[i++]) {
        kir_map m = {.n = 1, .mul = {1}, .add = {-off}, .den = {1}};
        lval part;
        if (!lower_remap(L, in[i], lv_dim((int)dim, in[i].ndim), m, sz, 0, &part) ||
            !lower_cast(L, part, t, &part))
            return 0;
        if (acc.node < 0)
            acc = part;
        else if (!lower_binary(L, KO_ADD, acc, part, &acc))
            return 0;
    }
    *out = acc;
    return 1;
}

/* split / split_with_sizes / chunk / unbind (self, sizes or count, dim): each result a slice
 * (unbind: a select) of self along dim, whose size must be the same in every workload. */
static int split(lower_ctx *L, const kiln_op *op, const lower_rule *r, lval *out) {
    (void)r;
    lval x;
    double dim = 0, each = 0;
    int64_t sizes[KILN_MAX_DIMS];
    int n = 0;
    const int unbind = !strcmp(op->name, "unbind");
    if (!self_arg(L, op, &x) || !num(L, op, unbind ? 1 : 2, "dim", 0, &dim))
        return 0;
    const int d = lv_dim((int)dim, x.ndim);
    if (d < 0)
        return lower_fail(L, "a dim out of range");
    const int64_t len = kir_eval(L->p, lv_size(L, x, d), 0);
    char s[32];
    snprintf(s, sizeof s, "%lld", (long long)len);
    if (!kir_same(L->p, lv_size(L, x, d), s))
        return lower_fail(L, "splitting a dim whose size differs between workloads");
    if (!strcmp(op->name, "split_with_sizes")) {
        if (arg_ints(op, 1, "split_sizes", sizes, &n) < 0)
            return lower_fail(L, "unreadable split sizes");
    } else {
        if (!unbind &&
            !num(L, op, 1, strcmp(op->name, "chunk") ? "split_size" : "chunks", 1, &each))
            return 0;
        if (!strcmp(op->name, "chunk")) /* chunks of ceil(len / chunks) */
            each = each >= 1 ? (double)((len + (int64_t)each - 1) / (int64_t)each) : 0;
        if (unbind)
            each = 1;
        if (each < 1)
            return lower_fail(L, "a split of size %g", each);
        for (int64_t at = 0; at < len && n <= KILN_OP_MAX_RESULTS; at += (int64_t)each)
            sizes[n++] = at + (int64_t)each <= len ? (int64_t)each : len - at;
    }
    if (n < 1 || n > KILN_OP_MAX_RESULTS)
        return lower_fail(L, "a split into more than %d parts", KILN_OP_MAX_RESULTS);
    int64_t at = 0;
    for (int k = 0; k < n; at += sizes[k++])
        if (!view_slice(L, x, d, at, at + sizes[k], !unbind, &out[k]))
            return 0;
    return 1;
}

/* ---- the table ---- */

static const lower_rule RULES[] = {
    /* arithmetic */
    {"add sub rsub", binary, KO_ADD},
    {"mul multiply", binary, KO_MUL},
    {"div true_divide divide", binary, KO_DIV},
    {"floor_divide", compare, KO_DIV_FLOOR},
    {"maximum fmax", compare, KO_MAX},
    {"minimum fmin", compare, KO_MIN},
    {"pow", power, 0},
    {"neg negative", unary, KO_NEG},
    {"abs", unary, KO_ABS},
    {"sign", unary, KO_SIGN},
    {"square", unary, KO_SQUARE},
    {"reciprocal", unary, KO_RECIP},
    {"floor", unary, KO_FLOOR},
    {"ceil", unary, KO_CEIL},
    {"round", unary, KO_ROUND},
    {"trunc", unary, KO_TRUNC},
    /* transcendental */
    {"exp", unary, KO_EXP},
    {"exp2", unary, KO_EXP2},
    {"expm1", unary, KO_EXPM1},
    {"log", unary, KO_LOG},
    {"log2", unary, KO_LOG2},
    {"log10", unary, KO_LOG10},
    {"log1p", unary, KO_LOG1P},
    {"sqrt", unary, KO_SQRT},
    {"rsqrt", unary, KO_RSQRT},
    {"sin", unary, KO_SIN},
    {"cos", unary, KO_COS},
    {"tanh", unary, KO_TANH},
    {"erf", unary, KO_ERF},
    /* activations */
    {"sigmoid", unary, KO_SIGMOID},
    {"relu", unary, KO_RELU},
    {"silu", unary, KO_SILU},
    {"mish", unary, KO_MISH},
    {"hardsigmoid", unary, KO_HARDSIGMOID},
    {"hardswish", unary, KO_HARDSWISH},
    {"gelu", gelu, 0},
    {"leaky_relu", with_constants, KO_LEAKY},
    {"elu", with_constants, KO_ELU},
    {"softplus", with_constants, KO_SOFTPLUS},
    {"clamp clamp_min clamp_max clip hardtanh relu6", clamp, 0},
    /* comparisons, logic, selection */
    {"eq", compare, KO_EQ},
    {"ne", compare, KO_NE},
    {"lt less", compare, KO_LT},
    {"le less_equal", compare, KO_LE},
    {"gt greater", compare, KO_GT},
    {"ge greater_equal", compare, KO_GE},
    {"logical_and", compare, KO_AND},
    {"logical_or", compare, KO_OR},
    {"logical_not", unary, KO_NOT},
    {"bitwise_and __and__", bitwise, KO_BITAND},
    {"bitwise_or __or__", bitwise, KO_BITOR},
    {"bitwise_xor __xor__", bitwise, KO_BITXOR},
    {"isnan", unary, KO_ISNAN},
    {"isinf", unary, KO_ISINF},
    {"where", where, 0},
    {"triu tril", triangle, 0},
    {"masked_fill", masked_fill, 0},
    /* casts and copies */
    {"copy", copy, 0},
    {"to _to_copy type_as contiguous clone alias detach lift_fresh_copy", cast, 0},
    /* views */
    {"view _unsafe_view reshape unsqueeze squeeze permute transpose t expand repeat flatten slice "
     "narrow select view_as expand_as",
     view, 0},
    {"split split_with_sizes chunk unbind", split, 0},
    /* reductions */
    {"sum", reduce, KR_SUM},
    {"mean", reduce, -1},
    {"prod", reduce, KR_PROD},
    {"amax", reduce, KR_MAX},
    {"amin", reduce, KR_MIN},
    {"argmax", arg_reduce, KR_ARGMAX},
    {"argmin", arg_reduce, KR_ARGMIN},
    {"max", max_min, KR_ARGMAX},
    {"min", max_min, KR_ARGMIN},
    {"var std var_mean std_mean", variance, 0},
    {"logsumexp", logsumexp, 0},
    {"_softmax softmax", softmax, 0},
    {"_log_softmax log_softmax", softmax, 1},
    {"layer_norm native_layer_norm", norm, 0},
    {"rms_norm _fused_rms_norm", norm, 1},
    {"group_norm native_group_norm", group_norm, 0},
    {"batch_norm native_batch_norm _native_batch_norm_legit_no_training", batch_norm, 0},
    /* windows and gathers */
    {"avg_pool1d avg_pool2d avg_pool3d", pool, KR_AVG},
    {"max_pool1d max_pool2d max_pool3d max_pool2d_with_indices max_pool3d_with_indices", pool,
     KR_MAXPOOL},
    {"adaptive_avg_pool1d adaptive_avg_pool2d _adaptive_avg_pool2d adaptive_avg_pool3d "
     "_adaptive_avg_pool3d",
     adaptive_pool, 0},
    {"convolution _convolution conv1d conv2d conv3d", conv, 0},
    {"constant_pad_nd pad", pad, 0},
    {"upsample_nearest1d upsample_nearest2d upsample_nearest3d", upsample, 0},
    {"index", gather, 0},
    {"embedding", embedding, 0},
    {"cat concat concatenate", cat, 0},
    {"stack", cat, 1},
};
static const int N_RULES = sizeof RULES / sizeof RULES[0];

/* ---- running the table ---- */

static const lower_rule *find_rule(const kiln_op *op) {
    char name[64];
    snprintf(name, sizeof name, "%s", op->name);
    if (op->inplace)
        name[strlen(name) - 1] = 0;
    size_t l = strlen(name);
    for (int r = 0; r < N_RULES; r++)
        for (const char *s = RULES[r].names; (s = strstr(s, name)) != NULL; s += l)
            if ((s == RULES[r].names || s[-1] == ' ') && (s[l] == ' ' || !s[l]))
                return &RULES[r];
    return NULL;
}

static int lower_op(lower_ctx *L, int k) {
    const kiln_op *op = &L->c->ops[k];
    L->op = op;
    const lower_rule *r = find_rule(op);
    if (!r)
        return lower_fail(L, "no lowering rule");
    lval out[KILN_OP_MAX_RESULTS];
    for (int s = 0; s < KILN_OP_MAX_RESULTS; s++)
        out[s].node = -1;
    if (!r->fn(L, op, r, out))
        return 0;
    if (op->inplace) { /* the result keeps the written tensor's dtype */
        lval self;
        if (!lower_arg(L, op, 0, "self", &self) || !lower_cast(L, out[0], lv_dtype(L, self), out))
            return 0;
    }
    for (int s = 0; s < KILN_OP_MAX_RESULTS; s++) {
        kiln_dtype want = op->result_dtype[s];
        if (out[s].node >= 0 && want != KILN_DTYPE_COUNT && want != lv_dtype(L, out[s]))
            return lower_fail(L, "eager gives result %d as %s, the lowering %s", s,
                              kiln_dtype_name(want), kiln_dtype_name(lv_dtype(L, out[s])));
        L->res[k][s] = out[s];
    }
    L->op = NULL;
    return 1;
}

/* The inputs a cat joins share the other dims' axes from the start (like[i]: the input whose axes
 * input i takes for every dim but skip[i], the joined one; -1 for none): a cat of n feature maps
 * then takes n + 3 slots of the axis table, not 4n (DenseNet's cat of 25). */
static void cat_inputs(const kiln_problem *p, const kiln_opchain *c, int *like, int *skip) {
    for (int i = 0; i < p->n_inputs; i++)
        like[i] = skip[i] = -1;
    for (int k = 0; k < c->n_ops; k++) {
        const kiln_op *op = &c->ops[k];
        const kiln_arg *a = kiln_op_arg(op, 0, "tensors");
        if (strcmp(op->name, "cat") && strcmp(op->name, "concat") &&
            strcmp(op->name, "concatenate"))
            continue;
        if (!a || a->kind != KILN_ARG_OTHER)
            continue;
        int first = -1;
        for (int t = 0; t < a->n_values; t++) {
            const int i = a->values[t].input;
            if (i < 0 || p->inputs[i].is_scalar)
                continue;
            const int nd = p->inputs[i].ndim;
            const int d = lv_dim((int)kiln_arg_num(kiln_op_arg(op, 1, "dim"), 0), nd);
            if (first < 0 && like[i] < 0)
                first = i;
            else if (first >= 0 && i != first && like[i] < 0 && like[first] < 0 && d >= 0 &&
                     nd == p->inputs[first].ndim) {
                like[i] = first;
                skip[i] = d;
            }
        }
    }
}

int kir_lower(const kiln_problem *p, kir **out, char *why, size_t n) {
    *out = NULL;
    kiln_opchain *c = NULL;
    kiln_err err;
    if (!kiln_opchain_described(p))
        return snprintf(why, n, "no op chain (the generator lowers captured calls and chains)"), 0;
    if (kiln_opchain_read(p, &c, &err) != KILN_OK)
        return snprintf(why, n, "%s", err.msg), 0;
    lower_ctx *L = xcalloc(1, sizeof *L);
    L->ir = kir_new(p);
    L->p = p;
    L->c = c;
    L->why = why;
    L->n = n;
    int ok = p->n_inputs <= (int)(sizeof L->in / sizeof L->in[0]) && p->n_outputs <= KIR_MAX_OUT;
    if (!ok)
        snprintf(why, n, "too many inputs or outputs");
    int like[64], skip[64];
    if (ok)
        cat_inputs(p, c, like, skip);
    for (int pass = 0; pass < 2; pass++) /* inputs a cat shares dims with bound first */
        for (int i = 0; ok && i < p->n_inputs; i++)
            if ((like[i] >= 0) == pass)
                ok = lower_bind_input(L, i, like[i], skip[i]);
    for (int k = 0; ok && k < c->n_ops; k++)
        ok = lower_op(L, k);
    for (int o = 0; ok && o < c->n_outputs; o++) {
        const kiln_value *v = &c->outputs[o];
        ok = lower_bind_output(L, o, v->input >= 0 ? L->in[v->input] : L->res[v->op][v->slot]);
    }
    L->ir->n_out = p->n_outputs;
    if (ok)
        ok = kir_finish(L->ir, why, n);
    if (ok) {
        int reds = 0, windows = 0;
        for (int v = 0; v < L->ir->n_nodes; v++) {
            reds += L->ir->nodes[v].kind == KIR_REDUCE;
            windows += L->ir->nodes[v].kind == KIR_WINDOW;
        }
        snprintf(L->ir->how, sizeof L->ir->how,
                 "%s: %d op(s) lowered to %d nodes, %d reduction(s), %d window(s)", c->kind,
                 c->n_ops, L->ir->n_nodes, reds, windows);
        *out = L->ir;
    } else {
        kir_free(L->ir);
    }
    kiln_opchain_free(c);
    free(L);
    return ok;
}
