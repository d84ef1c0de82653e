/* ir.c: the IR's tables, its builder (axes and their unification, nodes), kir_finish (canonical
 * axes, the two-result rewrites, the domain and its checks), and what is read off a finished IR:
 * sizes, bytes, flops and a printout. */
#include "ir.h"

#include "../../formats/expr.h"

#include <math.h>
#include <string.h>

#define KIR_OP_ROW(code, name, arity, rule, expr) [code] = {name, arity, rule, expr},
const kir_op_info KIR_OP_INFO[KO_COUNT] = {KIR_OPS(KIR_OP_ROW)};
#undef KIR_OP_ROW
#define KIR_RED_ROW(code, name, parts) [code] = {name, parts},
const kir_red_info KIR_RED_INFO[KR_COUNT] = {KIR_REDS(KIR_RED_ROW)};
#undef KIR_RED_ROW

/* ---- expressions ---- */

typedef struct {
    const kiln_problem *p;
    int w;
} eval_ctx;

static int lookup_axis(void *ctx, const char *name, size_t len, int64_t *value) {
    const eval_ctx *c = ctx;
    for (int i = 0; i < c->p->n_axes; i++)
        if (strlen(c->p->axes[i].name) == len && !memcmp(c->p->axes[i].name, name, len)) {
            *value = c->p->workloads[c->w].axis_values[i];
            return 0;
        }
    return -1;
}

int64_t kir_eval(const kiln_problem *p, const char *expr, int w) {
    eval_ctx c = {p, w};
    int64_t v = 0;
    kiln_err err;
    int rc = kiln_expr_eval(expr, lookup_axis, &c, &v, &err);
    KILN_ASSERT(rc == 0); /* every expression the IR makes is over the problem's axes */
    return v;
}

int kir_same(const kiln_problem *p, const char *a, const char *b) {
    if (!strcmp(a, b))
        return 1;
    for (int w = 0; w < p->n_workloads; w++)
        if (kir_eval(p, a, w) != kir_eval(p, b, w))
            return 0;
    return 1;
}

static int is_number(const char *s, long long *v) {
    char *end;
    *v = strtoll(s, &end, 10);
    return *s && !*end;
}

void kir_mul(char *out, size_t n, const char *a, const char *b) {
    long long x, y;
    char t[2 * KIR_EXPR + 8];
    if (is_number(a, &x) && is_number(b, &y))
        snprintf(t, sizeof t, "%lld", x * y);
    else if (!strcmp(a, "1") || !strcmp(b, "0"))
        snprintf(t, sizeof t, "%s", b);
    else if (!strcmp(b, "1") || !strcmp(a, "0"))
        snprintf(t, sizeof t, "%s", a);
    else
        snprintf(t, sizeof t, "%s*%s", a, b);
    /* sizes are products of names and numbers: no parentheses needed */
    KILN_ASSERT(strlen(t) < n);
    memcpy(out, t, strlen(t) + 1);
}

void kir_axes_size(const kir *ir, kir_axes set, char *out, size_t n) {
    snprintf(out, n, "1");
    for (int a = 0; a < ir->n_axes; a++)
        if (set >> a & 1)
            kir_mul(out, n, out, ir->axes[a].size);
}

int kir_dtype_is_int(kiln_dtype t) {
    return t == KILN_I64 || t == KILN_I32 || t == KILN_I16 || t == KILN_I8 || t == KILN_U8 ||
           t == KILN_BOOL;
}

int kir_dtype_ok(kiln_dtype t) {
    return t == KILN_F32 || t == KILN_BF16 || t == KILN_F16 || t == KILN_F8_E4M3 ||
           t == KILN_F8_E5M2 || kir_dtype_is_int(t);
}

/* ---- building ---- */

kir *kir_new(const kiln_problem *p) {
    kir *ir = xcalloc(1, sizeof *ir);
    ir->p = p;
    return ir;
}

void kir_free(kir *ir) {
    free(ir);
}

int kir_axis_new(kir *ir, const char *size) {
    if (ir->n_axes == KIR_MAX_AXES)
        return -1;
    kir_axis *a = &ir->axes[ir->n_axes];
    snprintf(a->size, sizeof a->size, "%s", size);
    a->parent = ir->n_axes;
    a->n_parts = 0;
    return ir->n_axes++;
}

int kir_axis_find(kir *ir, int a) {
    while (ir->axes[a].parent != a)
        a = ir->axes[a].parent = ir->axes[ir->axes[a].parent].parent;
    return a;
}

/* The set with every axis replaced by its root. */
static kir_axes canon(kir *ir, kir_axes set) {
    kir_axes out = 0;
    for (int a = 0; a < ir->n_axes; a++)
        if (set >> a & 1)
            out |= KIR_BIT(kir_axis_find(ir, a));
    return out;
}

kir_axes kir_axes_expand(kir *ir, kir_axes set) {
    kir_axes out = 0;
    for (int a = 0; a < ir->n_axes; a++) {
        if (!(set >> a & 1))
            continue;
        int r = kir_axis_find(ir, a);
        if (ir->axes[r].n_parts == 0) {
            out |= KIR_BIT(r);
            continue;
        }
        kir_axes parts = 0; /* kir_axis_compose keeps a composite out of its own parts */
        for (int i = 0; i < ir->axes[r].n_parts; i++)
            parts |= KIR_BIT(ir->axes[r].part[i]);
        out |= kir_axes_expand(ir, parts);
    }
    return out;
}

/* 1 when the roots of parts[0 .. n) are the parts of composite c. */
static int same_parts(kir *ir, int c, const int *parts, int n) {
    if (ir->axes[c].n_parts != n)
        return 0;
    for (int i = 0; i < n; i++)
        if (kir_axis_find(ir, ir->axes[c].part[i]) != kir_axis_find(ir, parts[i]))
            return 0;
    return 1;
}

int kir_axis_composite_of(kir *ir, const int *parts, int n) {
    for (int a = 0; a < ir->n_axes; a++)
        if (kir_axis_find(ir, a) == a && same_parts(ir, a, parts, n))
            return a;
    return -1;
}

int kir_axis_compose(kir *ir, int a, const int *parts, int n, char *why, size_t wn) {
    KILN_ASSERT(n >= 2 && n <= KIR_MAX_PARTS);
    a = kir_axis_find(ir, a);
    if (same_parts(ir, a, parts, n))
        return 1;
    if (ir->axes[a].n_parts)
        return snprintf(why, wn, "a dim split two ways"), 0;
    char size[KIR_EXPR] = "1";
    kir_axes set = 0;
    for (int i = 0; i < n; i++) {
        int r = kir_axis_find(ir, parts[i]);
        kir_mul(size, sizeof size, size, ir->axes[r].size);
        set |= KIR_BIT(r);
    }
    if (kir_axes_expand(ir, set) >> a & 1)
        return snprintf(why, wn, "a dim split into itself"), 0;
    if (!kir_same(ir->p, size, ir->axes[a].size))
        return snprintf(why, wn, "a dim of size %s split into %s", ir->axes[a].size, size), 0;
    ir->axes[a].n_parts = n;
    for (int i = 0; i < n; i++)
        ir->axes[a].part[i] = kir_axis_find(ir, parts[i]);
    return 1;
}

int kir_axis_unify(kir *ir, int a, int b, char *why, size_t n) {
    a = kir_axis_find(ir, a);
    b = kir_axis_find(ir, b);
    if (a == b)
        return 1;
    if (ir->axes[b].n_parts) { /* the root carries the split */
        int t = a;
        a = b;
        b = t;
    }
    if (ir->axes[b].n_parts && !same_parts(ir, a, ir->axes[b].part, ir->axes[b].n_parts))
        return snprintf(why, n, "a dim split two ways"), 0;
    if (!kir_same(ir->p, ir->axes[a].size, ir->axes[b].size))
        return snprintf(why, n, "dims of size %s and %s do not broadcast", ir->axes[a].size,
                        ir->axes[b].size),
               0;
    for (int v = 0; v < ir->n_nodes; v++) {
        kir_axes s = canon(ir, ir->nodes[v].axes | ir->nodes[v].red);
        if ((s >> a & 1) && (s >> b & 1))
            return snprintf(why, n, "a value meets a transpose of itself (a diagonal)"), 0;
    }
    ir->axes[b].parent = a;
    return 1;
}

int kir_add(kir *ir, kir_node node) {
    if (ir->n_nodes == KIR_MAX_NODES)
        return -1;
    const kir_node *x = node.n_a ? &ir->nodes[node.a[0]] : NULL;
    switch (node.kind) {
    case KIR_OP:
        node.axes = 0;
        for (int i = 0; i < node.n_a; i++)
            node.axes |= kir_axes_expand(ir, ir->nodes[node.a[i]].axes);
        break;
    case KIR_PART:
        node.axes = x->axes;
        break;
    case KIR_REDUCE:
        node.axes = kir_axes_expand(ir, x->axes) & ~kir_axes_expand(ir, node.red);
        break;
    case KIR_WINDOW:
    case KIR_REMAP: {
        const kir_map *m = &ir->maps[node.map];
        node.axes = kir_axes_expand(ir, x->axes);
        if (node.kind == KIR_WINDOW && node.op == KR_CONV) /* the weight, less its taps */
            node.axes |= kir_axes_expand(ir, ir->nodes[node.a[1]].axes) &
                         ~kir_axes_expand(ir, kir_taps(ir, &node));
        for (int i = 0; i < m->n; i++)
            node.axes = (node.axes & ~KIR_BIT(m->src[i])) |
                        (m->index[i] >= 0 ? ir->nodes[m->index[i]].axes : KIR_BIT(m->dst[i]));
        break;
    }
    default:
        break; /* loads set their axes; scalars and constants have none */
    }
    ir->nodes[ir->n_nodes] = node;
    return ir->n_nodes++;
}

kir_axes kir_taps(const kir *ir, const kir_node *x) {
    kir_axes t = 0;
    if (x->kind != KIR_WINDOW || x->op != KR_CONV)
        return 0;
    for (int i = 0; i < ir->maps[x->map].n; i++)
        if (ir->maps[x->map].tap[i] >= 0)
            t |= KIR_BIT(ir->maps[x->map].tap[i]);
    return t;
}

int kir_const(kir *ir, double value) {
    kir_node c = {.kind = KIR_CONST, .dtype = KILN_F32, .value = value, .acc = -1, .map = -1};
    return kir_add(ir, c);
}

/* ---- kir_finish ---- */

/* The op node v is op with operands a (and b). */
static int is_op(const kir *ir, int v, int op) {
    return ir->nodes[v].kind == KIR_OP && ir->nodes[v].op == op;
}

static int f32(const kir *ir, int v) {
    return ir->nodes[v].dtype == KILN_F32;
}

/* v computes d*d (square, pow 2, or d times itself): d, or -1. */
static int squared(const kir *ir, int v) {
    const kir_node *x = &ir->nodes[v];
    if (is_op(ir, v, KO_SQUARE) || (is_op(ir, v, KO_POW_K) && x->k[0] == 2))
        return x->a[0];
    if (is_op(ir, v, KO_MUL) && x->a[0] == x->a[1])
        return x->a[0];
    return -1;
}

/* mean((f - mean f)^2) over the same axes, all in fp32, becomes one Welford reduction: the mean
 * node turns into it and the sum of squares into its second result, so that a schedule may compute
 * both in one pass. */
static void rewrite_welford(kir *ir, int s2) {
    kir_node *sq_sum = &ir->nodes[s2];
    int d = squared(ir, sq_sum->a[0]);
    if (d < 0 || !f32(ir, sq_sum->a[0]) || !is_op(ir, d, KO_SUB) || ir->nodes[d].k[0] != 1 ||
        !f32(ir, d))
        return;
    int f = ir->nodes[d].a[0], mean = ir->nodes[d].a[1];
    if (!is_op(ir, mean, KO_DIV) || !f32(ir, mean))
        return;
    int s1 = ir->nodes[mean].a[0], cnt = ir->nodes[mean].a[1];
    const kir_node *sum = &ir->nodes[s1];
    if (sum->kind != KIR_REDUCE || sum->op != KR_SUM || sum->a[0] != f || sum->red != sq_sum->red ||
        !f32(ir, s1) || ir->nodes[cnt].kind != KIR_CONST || !ir->nodes[cnt].expr[0])
        return;
    kir_node w = *sum;
    w.op = KR_WELFORD;
    w.acc = -1;
    ir->nodes[mean] = w; /* the mean is the first result */
    kir_node part = {.kind = KIR_PART, .dtype = KILN_F32, .op = 1, .n_a = 1, .a = {mean}};
    part.axes = w.axes;
    part.acc = part.map = -1;
    *sq_sum = part;
}

/* sum(exp(f - max f)) over the same axes in fp32 becomes the second result of one softmax-pair
 * reduction whose first is the max. k[0] of the pair: 0 when the exponent is against the max
 * itself (softmax, log_softmax), 1 against logsumexp's max with infinities replaced by 0. */
static void rewrite_softmax(kir *ir, int s) {
    kir_node *sum = &ir->nodes[s];
    int e = sum->a[0];
    if (!is_op(ir, e, KO_EXP) || !f32(ir, e))
        return;
    int d = ir->nodes[e].a[0];
    if (!is_op(ir, d, KO_SUB) || ir->nodes[d].k[0] != 1 || !f32(ir, d))
        return;
    int f = ir->nodes[d].a[0], m = ir->nodes[d].a[1], masked = 0;
    if (is_op(ir, m, KO_WHERE)) { /* logsumexp's where(isinf(max), 0, max) */
        const kir_node *wh = &ir->nodes[m];
        const kir_node *zero = &ir->nodes[wh->a[1]];
        if (!is_op(ir, wh->a[0], KO_ISINF) || ir->nodes[wh->a[0]].a[0] != wh->a[2] ||
            zero->kind != KIR_CONST || zero->value != 0 || zero->expr[0])
            return;
        m = wh->a[2];
        masked = 1;
    }
    kir_node *mx = &ir->nodes[m];
    if (mx->kind != KIR_REDUCE || mx->op != KR_MAX || mx->a[0] != f || mx->red != sum->red ||
        !f32(ir, m))
        return;
    mx->op = KR_SOFTMAX;
    mx->k[0] = masked;
    if (!masked) /* f - max f is never positive: the output's exp may take the short form */
        ir->nodes[e].op = KO_EXP_NEG;
    kir_node part = {.kind = KIR_PART, .dtype = KILN_F32, .op = 1, .n_a = 1, .a = {m}};
    part.axes = mx->axes;
    part.acc = part.map = -1;
    *sum = part;
}

/* Marks what the outputs need. */
static void mark_live(const kir *ir, int *live) {
    memset(live, 0, sizeof(int) * (size_t)ir->n_nodes);
    for (int o = 0; o < ir->n_out; o++)
        live[ir->out[o].node] = 1;
    for (int v = ir->n_nodes - 1; v >= 0; v--)
        for (int i = 0; live[v] && i < ir->nodes[v].n_a; i++)
            live[ir->nodes[v].a[i]] = 1;
}

/* Every live node varies only along axes its context provides: the domain, and inside a window's
 * or a remap's operand the axes it reads at other coordinates. Reductions stay outside windows. */
static int check_context(const kir *ir, int v, kir_axes allowed, int in_map, char *why, size_t n) {
    const kir_node *x = &ir->nodes[v];
    if (x->axes & ~allowed)
        return snprintf(why, n, "value v%d moves along an axis outside the outputs' domain", v), 0;
    if (in_map && x->kind == KIR_REDUCE)
        return snprintf(why, n, "a reduction inside a window or a gather"), 0;
    kir_axes inner = allowed;
    if (x->kind == KIR_WINDOW || x->kind == KIR_REMAP) {
        const kir_map *m = &ir->maps[x->map];
        /* a remap at coordinates computed from the result's (a cat's part, padding, upsampling)
         * nests: GPT-NeoX's partial rotary joins rotate_half's cat to the pass-through part */
        int affine = x->kind == KIR_REMAP && in_map != 2;
        for (int i = 0; i < m->n; i++)
            affine &= m->index[i] < 0;
        if (in_map && !affine)
            return snprintf(why, n, "a window or gather inside another"), 0;
        for (int i = 0; i < m->n; i++)
            inner = (inner & ~(m->index[i] >= 0 ? 0 : KIR_BIT(m->dst[i]))) | KIR_BIT(m->src[i]);
        inner |= kir_taps(ir, x);
        /* a gather's indices are read at the result's coordinates, a convolution's weight at the
         * tap's */
        if (x->n_a > 1 && !check_context(ir, x->a[1], x->kind == KIR_WINDOW ? inner : allowed,
                                         x->kind == KIR_WINDOW ? 2 : in_map, why, n))
            return 0;
        return check_context(ir, x->a[0], inner, affine ? 1 : 2, why, n);
    }
    if (x->kind == KIR_REDUCE)
        inner |= x->red;
    for (int i = 0; i < x->n_a; i++)
        if (!check_context(ir, x->a[i], inner, in_map, why, n))
            return 0;
    return 1;
}

/* Adds stride s along axis a to access c: a leaf's own stride (id: the leaves' new numbers), or a
 * composite's parts, each with s times the sizes of the parts inside it. */
static int add_stride(kir *ir, kir_access *c, const int *id, int a, const char *s, char *why,
                      size_t n) {
    a = kir_axis_find(ir, a);
    const kir_axis *x = &ir->axes[a];
    if (x->n_parts == 0) {
        if (strcmp(c->stride[id[a]], "0"))
            return snprintf(why, n, "a tensor is read along one axis twice (a diagonal)"), 0;
        snprintf(c->stride[id[a]], sizeof c->stride[id[a]], "%s", s);
        return 1;
    }
    char inner[KIR_EXPR];
    snprintf(inner, sizeof inner, "%s", s);
    for (int i = x->n_parts - 1; i >= 0; i--) {
        if (!add_stride(ir, c, id, x->part[i], inner, why, n))
            return 0;
        kir_mul(inner, sizeof inner, inner, ir->axes[kir_axis_find(ir, x->part[i])].size);
    }
    return 1;
}

int kir_finish(kir *ir, char *why, size_t n) {
    /* canonical axes: the roots that are not composites, renumbered in order; a composite becomes
     * its parts in every set and access */
    int id[KIR_MAX_AXES], m = 0;
    kir_axis axes[KIR_MAX_AXES];
    for (int a = 0; a < ir->n_axes; a++)
        if (kir_axis_find(ir, a) == a && ir->axes[a].n_parts == 0) {
            axes[m] = ir->axes[a];
            axes[m].parent = m;
            id[a] = m++;
        }
    kir_axes leaves[KIR_MAX_AXES];
    for (int a = 0; a < ir->n_axes; a++) {
        kir_axes e = kir_axes_expand(ir, KIR_BIT(a));
        leaves[a] = 0;
        for (int b = 0; b < ir->n_axes; b++)
            if (e >> b & 1)
                leaves[a] |= KIR_BIT(id[b]);
    }
    for (int a = 0; a < ir->n_axes; a++)
        if (ir->axes[kir_axis_find(ir, a)].n_parts == 0)
            id[a] = id[kir_axis_find(ir, a)];
#define RENUMBER(set)                                                                              \
    do {                                                                                           \
        kir_axes s_ = 0;                                                                           \
        for (int a_ = 0; a_ < ir->n_axes; a_++)                                                    \
            if ((set) >> a_ & 1)                                                                   \
                s_ |= leaves[a_];                                                                  \
        (set) = s_;                                                                                \
    } while (0)
    for (int v = 0; v < ir->n_nodes; v++) {
        RENUMBER(ir->nodes[v].axes);
        RENUMBER(ir->nodes[v].red);
    }
#undef RENUMBER
    for (int k = 0; k < ir->n_maps; k++)
        for (int i = 0; i < ir->maps[k].n; i++) {
            int src = ir->maps[k].src[i], dst = ir->maps[k].dst[i];
            if (ir->axes[kir_axis_find(ir, src)].n_parts ||
                (ir->maps[k].index[i] < 0 && ir->axes[kir_axis_find(ir, dst)].n_parts))
                return snprintf(why, n, "a window or remap along a dim a reshape split"), 0;
            ir->maps[k].src[i] = id[src];
            if (ir->maps[k].index[i] < 0)
                ir->maps[k].dst[i] = id[dst];
        }
    for (int v = 0; v < ir->n_nodes; v++) /* a convolution's taps */
        for (int i = 0; kir_taps(ir, &ir->nodes[v]) && i < ir->maps[ir->nodes[v].map].n; i++) {
            int *tap = &ir->maps[ir->nodes[v].map].tap[i];
            if (*tap >= 0 && ir->axes[kir_axis_find(ir, *tap)].n_parts)
                return snprintf(why, n, "a convolution's kernel dim a reshape split"), 0;
            *tap = *tap >= 0 ? id[*tap] : -1;
        }
    kir_axes domain = 0;
    for (int k = 0; k < ir->n_acc; k++) {
        kir_access *c = &ir->acc[k];
        for (int a = 0; a < KIR_MAX_AXES; a++)
            snprintf(c->stride[a], sizeof c->stride[a], "0");
        for (int d = 0; d < c->ndim; d++) {
            int a = c->dim_axis[d];
            if (a < 0)
                continue;
            if (!add_stride(ir, c, id, a, c->dim_stride[d], why, n))
                return 0;
            if (c->tensor < 0 && c->tensor != KIR_INDEX) /* an output's: the domain */
                domain |= leaves[a];
            /* a composite's dim is walked through its parts' strides */
            c->dim_axis[d] = ir->axes[kir_axis_find(ir, a)].n_parts ? -1 : id[a];
        }
    }
    memcpy(ir->axes, axes, sizeof axes);
    ir->n_axes = m;

    /* the two-result rewrites, in node order (a rewritten node keeps its id) */
    for (int v = 0; v < ir->n_nodes; v++) {
        const kir_node *x = &ir->nodes[v];
        if (x->kind == KIR_REDUCE && x->op == KR_SUM && f32(ir, v)) {
            rewrite_welford(ir, v);
            if (ir->nodes[v].kind == KIR_REDUCE)
                rewrite_softmax(ir, v);
        }
    }

    /* the domain, the reduced axes, the remapped axes */
    int live[KIR_MAX_NODES];
    mark_live(ir, live);
    ir->domain = domain;
    ir->red = ir->remapped = 0;
    int first_red = 1;
    for (int v = 0; v < ir->n_nodes; v++) {
        const kir_node *x = &ir->nodes[v];
        if (!live[v])
            continue;
        if (x->kind == KIR_REDUCE) {
            if (!first_red && x->red != ir->red)
                return snprintf(why, n, "reductions over different axes"), 0;
            ir->red = x->red;
            first_red = 0;
        }
        if (x->kind == KIR_WINDOW || x->kind == KIR_REMAP)
            for (int i = 0; i < ir->maps[x->map].n; i++)
                ir->remapped |= KIR_BIT(ir->maps[x->map].src[i]);
        ir->remapped |= kir_taps(ir, x);
    }
    ir->domain |= ir->red;
    if (ir->remapped & ir->domain)
        return snprintf(why, n, "an output moves along an axis that a window or gather remaps"), 0;
    for (int o = 0; o < ir->n_out; o++)
        if (!check_context(ir, ir->out[o].node, ir->domain, 0, why, n))
            return 0;
    return 1;
}

/* ---- reading ---- */

int kir_depends(const kir *ir, int v, int u) {
    if (v == u)
        return 1;
    for (int i = 0; i < ir->nodes[v].n_a; i++)
        if (ir->nodes[v].a[i] >= u && kir_depends(ir, ir->nodes[v].a[i], u))
            return 1;
    return 0;
}

double kir_bytes(const kir *ir, int w) {
    const kiln_problem *p = ir->p;
    int live[KIR_MAX_NODES], read[KILN_OPCHAIN_MAX_OPS * 2] = {0};
    mark_live(ir, live);
    double bytes = 0;
    int64_t shape[KILN_MAX_DIMS];
    for (int v = 0; v < ir->n_nodes; v++) {
        const kir_node *x = &ir->nodes[v];
        if (!live[v] || x->kind != KIR_LOAD)
            continue;
        int t = ir->acc[x->acc].tensor;
        if (t < 0 || t >= (int)(sizeof read / sizeof read[0]) || read[t]++)
            continue;
        bytes += (double)kiln_tensor_shape(p, &p->inputs[t], &p->workloads[w], shape) *
                 (double)kiln_dtype_size(p->inputs[t].dtype);
    }
    for (int o = 0; o < p->n_outputs; o++)
        bytes += (double)kiln_tensor_shape(p, &p->outputs[o], &p->workloads[w], shape) *
                 (double)kiln_dtype_size(p->outputs[o].dtype);
    return bytes;
}

static double axes_count(const kir *ir, kir_axes set, int w) {
    double c = 1;
    for (int a = 0; a < ir->n_axes; a++)
        if (set >> a & 1)
            c *= (double)kir_eval(ir->p, ir->axes[a].size, w);
    return c;
}

double kir_flops(const kir *ir, int w) {
    int live[KIR_MAX_NODES];
    mark_live(ir, live);
    double flops = 0;
    for (int v = 0; v < ir->n_nodes; v++) {
        const kir_node *x = &ir->nodes[v];
        if (!live[v])
            continue;
        if (x->kind == KIR_OP && x->op != KO_CAST)
            flops += axes_count(ir, x->axes, w);
        else if (x->kind == KIR_REDUCE)
            flops += axes_count(ir, x->axes | x->red, w);
        else if (x->kind == KIR_WINDOW) {
            double k = 1;
            for (int i = 0; i < ir->maps[x->map].n; i++)
                k *= (double)(ir->maps[x->map].adaptive ? 1 : ir->maps[x->map].kernel[i]);
            flops += axes_count(ir, x->axes, w) * k * (x->op == KR_CONV ? 2 : 1);
        }
    }
    return flops;
}

static const char *short_dtype(kiln_dtype t) {
    static const char *const names[KILN_DTYPE_COUNT] = {
        [KILN_F64] = "f64",      [KILN_F32] = "f32",      [KILN_F16] = "f16", [KILN_BF16] = "bf16",
        [KILN_F8_E4M3] = "e4m3", [KILN_F8_E5M2] = "e5m2", [KILN_I64] = "i64", [KILN_I32] = "i32",
        [KILN_I16] = "i16",      [KILN_I8] = "i8",        [KILN_U8] = "u8",   [KILN_BOOL] = "bool"};
    return names[t] ? names[t] : "?";
}

static void print_axes(kiln_strbuf *b, kir_axes set) {
    kiln_strbuf_printf(b, "[");
    for (int a = 0, first = 1; a < KIR_MAX_AXES; a++)
        if (set >> a & 1) {
            kiln_strbuf_printf(b, "%sc%d", first ? "" : " ", a);
            first = 0;
        }
    kiln_strbuf_printf(b, "]");
}

void kir_print(const kir *ir, kiln_strbuf *b) {
    int live[KIR_MAX_NODES];
    mark_live(ir, live);
    kiln_strbuf_printf(b, "axes:");
    for (int a = 0; a < ir->n_axes; a++)
        if ((ir->domain | ir->remapped) >> a & 1)
            kiln_strbuf_printf(b, " c%d=%s%s", a, ir->axes[a].size,
                               ir->red >> a & 1 ? " (reduced)" : "");
    kiln_strbuf_printf(b, "\n");
    for (int v = 0; v < ir->n_nodes; v++) {
        const kir_node *x = &ir->nodes[v];
        if (!live[v])
            continue;
        kiln_strbuf_printf(b, "v%d = ", v);
        switch (x->kind) {
        case KIR_LOAD:
            kiln_strbuf_printf(b, "load %s", ir->p->inputs[ir->acc[x->acc].tensor].name);
            break;
        case KIR_POS:
            kiln_strbuf_printf(b, "position");
            break;
        case KIR_SCALAR:
            kiln_strbuf_printf(b, "scalar %s", ir->p->inputs[x->input].name);
            break;
        case KIR_CONST:
            if (x->expr[0])
                kiln_strbuf_printf(b, "const %s", x->expr);
            else
                kiln_strbuf_printf(b, "const %.9g", x->value);
            break;
        case KIR_OP:
            kiln_strbuf_printf(b, "%s(", KIR_OP_INFO[x->op].name);
            for (int i = 0; i < x->n_a; i++)
                kiln_strbuf_printf(b, "%sv%d", i ? ", " : "", x->a[i]);
            if (x->op == KO_POW_K || x->op == KO_LEAKY || x->op == KO_ELU)
                kiln_strbuf_printf(b, ", %.9g", x->k[0]);
            else if (x->op == KO_CLAMP || x->op == KO_SOFTPLUS)
                kiln_strbuf_printf(b, ", %.9g, %.9g", x->k[0], x->k[1]);
            else if ((x->op == KO_ADD || x->op == KO_SUB) && x->k[0] != 1)
                kiln_strbuf_printf(b, ", alpha=%.9g", x->k[0]);
            kiln_strbuf_printf(b, ")");
            break;
        case KIR_REDUCE:
            kiln_strbuf_printf(b, "%s(v%d) over ", KIR_RED_INFO[x->op].name, x->a[0]);
            print_axes(b, x->red);
            break;
        case KIR_PART:
            kiln_strbuf_printf(b, "part %d of v%d", x->op, x->a[0]);
            break;
        case KIR_WINDOW:
            kiln_strbuf_printf(b, "%s window of v%d", KIR_RED_INFO[x->op].name, x->a[0]);
            if (x->op == KR_CONV)
                kiln_strbuf_printf(b, " by v%d", x->a[1]);
            break;
        case KIR_REMAP:
            if (x->n_a > 1)
                kiln_strbuf_printf(b, "gather of v%d by v%d", x->a[0], x->a[1]);
            else
                kiln_strbuf_printf(b, "remap of v%d", x->a[0]);
            break;
        }
        kiln_strbuf_printf(b, " : %s ", short_dtype(x->dtype));
        print_axes(b, x->axes);
        kiln_strbuf_printf(b, "\n");
    }
    for (int o = 0; o < ir->n_out; o++)
        kiln_strbuf_printf(b, "%s = v%d\n", ir->p->outputs[o].name, ir->out[o].node);
}
