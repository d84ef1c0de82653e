/* emit.c: the element emitter both backends share: the IR's nodes as straight-line C at a point of
 * the domain (a scope says where each axis's coordinate comes from), with eager PyTorch's
 * roundings, loads and stores through the accesses' strides, pooling windows and gathers as
 * small loops in a nested scope. The CPU driver (emit_cpu.c) and the CUDA driver (emit_cuda.c)
 * put it inside their loops and name what they computed themselves (reduction results, vector
 * lanes) in the scope. */
#include "gen_impl.h"
#include "../../formats/dtype.h"

#include <math.h>
#include <string.h>

void kg_scope_init(kg_scope *s, kiln_strbuf *b, const kg_plan *plan, int cuda, const char *indent,
                   int *next_id) {
    memset(s, 0, sizeof *s);
    s->b = b;
    s->plan = plan;
    s->cuda = cuda;
    s->indent = indent;
    s->next_id = next_id;
    s->id = (*next_id)++;
}

void kg_scope_child(kg_scope *child, const kg_scope *parent, const char *indent) {
    *child = *parent;
    child->indent = indent;
    child->id = (*parent->next_id)++;
}

const char *kg_ctype(kiln_dtype t) {
    return kir_dtype_is_int(t) ? "int64_t" : "float";
}

const char *kg_tensor_name(const kiln_problem *p, int tensor) {
    return tensor >= 0 ? p->inputs[tensor].name : p->outputs[-1 - tensor].name;
}

void kg_load_expr(kiln_dtype t, int cuda, const char *elem, char *out, size_t n) {
    if (t == KILN_F8_E4M3 || t == KILN_F8_E5M2)
        snprintf(out, n, "kg_%s_to_float(%s)", t == KILN_F8_E4M3 ? "e4m3" : "e5m2", elem);
    else if (kir_dtype_is_int(t))
        snprintf(out, n, "(int64_t)%s", elem);
    else
        snprintf(out, n, "%s(%s)", kiln_dtype_kernel_type(t, cuda).to_float, elem);
}

void kg_store_expr(kiln_dtype t, int cuda, const char *value, char *out, size_t n) {
    if (t == KILN_F8_E4M3 || t == KILN_F8_E5M2)
        snprintf(out, n, "kg_float_to_%s(%s)", t == KILN_F8_E4M3 ? "e4m3" : "e5m2", value);
    else if (t == KILN_BOOL)
        snprintf(out, n, "(%s) != 0", value);
    else if (kir_dtype_is_int(t))
        snprintf(out, n, "(%s)(%s)", kiln_dtype_kernel_type(t, cuda).type, value);
    else
        snprintf(out, n, "%s(%s)", kiln_dtype_kernel_type(t, cuda).from_float, value);
}

/* kg_offset without axis `skip`'s term (-1: none). */
static void offset_but(const kg_scope *s, int c, int skip, char *out, size_t n) {
    const kir *ir = s->plan->ir;
    const kir_access *a = &ir->acc[c];
    size_t off = 0;
    if (strcmp(a->offset, "0"))
        off = (size_t)snprintf(out, n, "%s", a->offset);
    for (int x = 0; x < ir->n_axes && off < n; x++) {
        if (x == skip || !strcmp(a->stride[x], "0") || !s->coord[x][0])
            continue;
        const char *plus = off ? " + " : "";
        if (!strcmp(a->stride[x], "1"))
            off += (size_t)snprintf(out + off, n - off, "%s%s", plus, s->coord[x]);
        else
            off += (size_t)snprintf(out + off, n - off, "%s%s * (%s)", plus, s->coord[x],
                                    a->stride[x]);
    }
    if (!off)
        off = (size_t)snprintf(out, n, "0");
    KILN_ASSERT(off < n);
}

void kg_offset(const kg_scope *s, int c, char *out, size_t n) {
    offset_but(s, c, -1, out, n);
}

void kg_load_at(const kg_scope *s, int c, char *out, size_t n) {
    const kir *ir = s->plan->ir;
    char off[512];
    if (s->staged_t >> c & 1) { /* element (r, v) of the copy is at r * V + v */
        const int a = s->plan->vec_axis;
        offset_but(s, c, a, off, sizeof off);
        snprintf(out, n, "kg_sh%d[(%s) * (%s) + %s]", c, off, ir->axes[a].size,
                 s->coord[a][0] ? s->coord[a] : "0");
    } else if (s->staged >> c & 1) {
        kg_offset(s, c, off, sizeof off);
        snprintf(out, n, "kg_sh%d[%s]", c, off);
    } else {
        kg_offset(s, c, off, sizeof off);
        snprintf(out, n, "%s[%s]", kg_tensor_name(ir->p, ir->acc[c].tensor), off);
    }
}

/* A constant in the node's compute type. */
static void constant(double v, int is_int, char *out, size_t n) {
    if (is_int)
        snprintf(out, n, "(int64_t)%lld", (long long)v);
    else if (isnan(v))
        snprintf(out, n, "NAN");
    else if (isinf(v))
        snprintf(out, n, "%sINFINITY", v < 0 ? "-" : "");
    else {
        snprintf(out, n, "%.9g", v);
        if (!strpbrk(out, ".e"))
            snprintf(out + strlen(out), n - strlen(out), ".0");
        snprintf(out + strlen(out), n - strlen(out), "f");
    }
}

/* The rounding of a computed value to dtype t, around expr. */
static void rounded(kiln_dtype t, const char *expr, char *out, size_t n) {
    static const char *const wrap[KILN_DTYPE_COUNT] = {
        [KILN_BF16] = "kg_round_bf16",     [KILN_F16] = "kg_round_f16",
        [KILN_F8_E4M3] = "kg_round_e4m3",  [KILN_F8_E5M2] = "kg_round_e5m2",
        [KILN_I32] = "(int64_t)(int32_t)", [KILN_I16] = "(int64_t)(int16_t)",
        [KILN_I8] = "(int64_t)(int8_t)",   [KILN_U8] = "(int64_t)(uint8_t)",
        [KILN_I64] = "(int64_t)"};
    if (t == KILN_BOOL)
        snprintf(out, n, "(int64_t)((%s) != 0)", expr);
    else if (wrap[t])
        snprintf(out, n, "%s(%s)", wrap[t], expr);
    else
        snprintf(out, n, "%s", expr);
}

/* 1 when node v's value, computed in fp32, is exactly a value of the 16-bit float t (bf16, f16),
 * so that rounding it to t changes nothing: a load of a t tensor, a constant t holds, and what
 * only selects, negates or widens such values (where, max, min, neg, abs, a cast, a product with
 * 1). A chain such as `(scores * 1 + where(mask, 0, min)).float()` then rounds once, at its add,
 * where it rounded at every op. */
static int exact_in(const kir *ir, int v, kiln_dtype t) {
    const kir_node *x = &ir->nodes[v];
    switch (x->kind) {
    case KIR_LOAD:
        return x->dtype == t;
    case KIR_CONST: {
        if (x->expr[0])
            return 0;
        const float f = (float)x->value;
        if ((double)f != x->value || f != f)
            return 0;
        return t == KILN_BF16 ? kiln_bf16_to_f32(kiln_f32_to_bf16(f)) == f
                              : kiln_f16_to_f32(kiln_f32_to_f16(f)) == f;
    }
    case KIR_OP:
        break;
    default:
        return 0;
    }
    if (kir_dtype_is_int(x->dtype) || x->dtype == KILN_BOOL)
        return 0;
    switch (x->op) {
    case KO_WHERE:
        return exact_in(ir, x->a[1], t) && exact_in(ir, x->a[2], t);
    case KO_MAX:
    case KO_MIN:
        return exact_in(ir, x->a[0], t) && exact_in(ir, x->a[1], t);
    case KO_NEG:
    case KO_ABS:
    case KO_CAST:
        return exact_in(ir, x->a[0], t);
    case KO_MUL:
        for (int i = 0; i < 2; i++) {
            const kir_node *c = &ir->nodes[x->a[i]];
            if (c->kind == KIR_CONST && !c->expr[0] && c->value == 1)
                return exact_in(ir, x->a[1 - i], t);
        }
        return 0;
    default:
        return 0;
    }
}

static int narrow_dtype(kiln_dtype t) {
    return t == KILN_BF16 || t == KILN_F16 || t == KILN_F8_E4M3 || t == KILN_F8_E5M2;
}

/* 1 when node v's value is rounded to 16 or 8 bits before anything else sees it: its own dtype is
 * that narrow, or every use of it is a multiplication or a cast whose value is (not an output, a
 * reduction or a window at fp32 itself) — Qwen-3.5's gated RMSNorm: bf16(w * y * silu(fp32 z)).
 * A few ulp of fp32 there are far below that rounding. */
static int ends_narrow(const kir *ir, int v, int depth) {
    if (narrow_dtype(ir->nodes[v].dtype))
        return 1;
    if (depth >= 4)
        return 0;
    for (int o = 0; o < ir->n_out; o++)
        if (ir->out[o].node == v)
            return 0;
    int used = 0;
    for (int u = 0; u < ir->n_nodes; u++) {
        const kir_node *y = &ir->nodes[u];
        for (int i = 0; i < y->n_a; i++) {
            if (y->a[i] != v)
                continue;
            if (y->kind != KIR_OP || (y->op != KO_MUL && y->op != KO_CAST) ||
                !ends_narrow(ir, u, depth + 1))
                return 0;
            used = 1;
        }
    }
    return used;
}

/* The right-hand side of op node v over operand expressions: the table's expression, with the
 * exponents PyTorch's pow kernels special-case. */
static void op_expr(const kir *ir, int v, const char ops[3][96], char *out, size_t n) {
    const kir_node *x = &ir->nodes[v];
    const char *expr = KIR_OP_INFO[x->op].expr;
    if (x->op == KO_DIV_FLOOR && kir_dtype_is_int(x->dtype))
        expr = "kg_idiv_floor($a, $b)";
    if ((x->op == KO_ADD || x->op == KO_SUB) && x->k[0] == 1)
        expr = x->op == KO_ADD ? "$a + $b" : "$a - $b";
    /* a result rounded to 16 or 8 bits before it is used: the GPU's fast exp and division (a few
     * ulp of fp32, far below that rounding) where the IEEE ones take ~20 instructions */
    if ((x->op == KO_SILU || x->op == KO_SIGMOID) && ends_narrow(ir, v, 0))
        expr = x->op == KO_SILU ? "kg_silu_lp($a)" : "kg_sigmoid_lp($a)";
    if (x->op == KO_POW_K) {
        static const struct {
            double exponent;
            const char *expr;
        } special[] = {{2, "$a * $a"},   {3, "$a * $a * $a"},    {1, "$a"},
                       {0, "1.f"},       {0.5, "sqrtf($a)"},     {-0.5, "kg_rsqrt($a)"},
                       {-1, "1.f / $a"}, {-2, "1.f / ($a * $a)"}};
        for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
            if (x->k[0] == special[i].exponent)
                expr = special[i].expr;
    }
    const int is_int = kir_dtype_is_int(x->dtype);
    char k[2][48];
    constant(x->k[0], is_int && x->op != KO_ADD && x->op != KO_SUB, k[0], sizeof k[0]);
    constant(x->k[1], is_int, k[1], sizeof k[1]);
    if ((x->op == KO_ADD || x->op == KO_SUB) && is_int)
        snprintf(k[0], sizeof k[0], "(int64_t)%lld", (long long)x->k[0]);
    size_t off = 0;
    for (const char *e = expr; *e && off + 1 < n; e++) {
        const char *sub = NULL;
        if (e[0] == '$' && e[1])
            sub = e[1] == 'a'   ? ops[0]
                  : e[1] == 'b' ? ops[1]
                  : e[1] == 'c' ? ops[2]
                  : e[1] == '0' ? k[0]
                                : k[1];
        if (sub) {
            off += (size_t)snprintf(out + off, n - off, "(%s)", sub);
            off = off < n ? off : n - 1;
            e++;
        } else {
            out[off++] = *e;
        }
    }
    out[off] = 0;
}

static void set_name(kg_scope *s, int v, const char *fmt, int a, int b) {
    snprintf(s->name[v], sizeof s->name[v], fmt, a, b);
}

/* A temporary's name in scope s. */
static void temp_name(kg_scope *s, int v) {
    if (s->id == 0)
        set_name(s, v, "kv%d", v, 0);
    else
        set_name(s, v, "kv%d_%d", v, s->id);
}

/* The nested scope of a window or remap: the operand's source axes get new coordinates (and a
 * convolution's taps, tap != NULL, theirs); what moves along them is computed again. */
static void map_scope(kg_scope *child, const kg_scope *s, const kir_map *m, const char *indent,
                      char coord[][32], char tap[][32]) {
    kg_scope_child(child, s, indent);
    kir_axes src = 0;
    for (int i = 0; i < m->n; i++) {
        src |= KIR_BIT(m->src[i]);
        snprintf(child->coord[m->src[i]], sizeof child->coord[0], "%s", coord[i]);
        if (tap && m->tap[i] >= 0) {
            src |= KIR_BIT(m->tap[i]);
            snprintf(child->coord[m->tap[i]], sizeof child->coord[0], "%s", tap[i]);
        }
    }
    const kir *ir = s->plan->ir;
    for (int v = 0; v < ir->n_nodes; v++)
        if (ir->nodes[v].axes & src)
            child->name[v][0] = 0;
}

/* The flat index of positions pos[] in the operand's plane: ((p0 * size1 + p1) * size2 + p2). */
static void plane_index(kiln_strbuf *b, const kir *ir, const kir_map *m, const char *pos, int id) {
    for (int i = 1; i < m->n; i++)
        kiln_strbuf_printf(b, "(");
    for (int i = 0; i < m->n; i++) {
        if (i)
            kiln_strbuf_printf(b, ") * (%s) + ", ir->axes[m->src[i]].size);
        kiln_strbuf_printf(b, "kg_%s%d_%d", pos, id, i);
    }
}

/* The innermost statement of window v's lanes form (window_code) in scope t, at its taps: one
 * vector load of the operand at lane 0's position, then for each lane the term (the operand's lane,
 * a convolution's weight at that lane's channel: read in the lane's own scope) added to
 * <sum>[lane] where the tap counts (flag kg_in<id>_<last>, last >= 0). */
static void lane_terms(kg_scope *t, int v, int id, int64_t lanes, int last, const char *sum) {
    const kir *ir = t->plan->ir;
    const kir_node *x = &ir->nodes[v], *in = &ir->nodes[x->a[0]];
    const int a = t->plan->vec_axis, tensor = ir->acc[in->acc].tensor;
    const kiln_dtype dt = ir->p->inputs[tensor].dtype;
    const char *type = kiln_dtype_kernel_type(dt, 1).type;
    const long long bytes = (long long)(lanes * (int64_t)kiln_dtype_size(dt));
    char off[512], ind[96], elem[128];
    kg_offset(t, in->acc, off, sizeof off);
    kiln_strbuf_printf(t->b, "%sconst kg_raw<%lld>::t kg_v%d = kg_ld<%lld>(%s + %s);\n", t->indent,
                       bytes, id, bytes, kg_tensor_name(ir->p, tensor), off);
    /* a convolution's weight from a copy with the channels innermost: one vector load too */
    const kir_node *w = x->op == KR_CONV ? &ir->nodes[x->a[1]] : NULL;
    const kiln_dtype wt =
        w && w->kind == KIR_LOAD ? ir->p->inputs[ir->acc[w->acc].tensor].dtype : KILN_F32;
    const long long wbytes = (long long)(lanes * (int64_t)kiln_dtype_size(wt));
    const int wvec = w && w->kind == KIR_LOAD && (t->staged_t >> w->acc & 1) && wbytes <= 16;
    if (wvec) {
        char at[640];
        kg_load_at(t, w->acc, at, sizeof at);
        kiln_strbuf_printf(t->b, "%sconst kg_raw<%lld>::t kg_y%d = kg_ld<%lld>(&%s);\n", t->indent,
                           wbytes, id, wbytes, at);
    }
    kiln_strbuf_printf(t->b, "%s#pragma unroll\n%sfor (int kg_e = 0; kg_e < %lld; kg_e++) {\n",
                       t->indent, t->indent, (long long)lanes);
    snprintf(ind, sizeof ind, "%s    ", t->indent);
    kg_scope lane;
    kg_scope_child(&lane, t, ind);
    snprintf(lane.coord[a], sizeof lane.coord[a], "(%s + kg_e)", t->coord[a]);
    for (int u = 0; u < ir->n_nodes; u++) /* what moves along the lanes is the lane's own */
        if (ir->nodes[u].axes >> a & 1)
            lane.name[u][0] = 0;
    snprintf(elem, sizeof elem, "kg_lane<%s>(kg_v%d, kg_e)", type, id);
    kg_load_expr(in->dtype, 1, elem, lane.name[x->a[0]], sizeof lane.name[0]);
    if (wvec) {
        snprintf(elem, sizeof elem, "kg_lane<%s>(kg_y%d, kg_e)", kiln_dtype_kernel_type(wt, 1).type,
                 id);
        kg_load_expr(w->dtype, 1, elem, lane.name[x->a[1]], sizeof lane.name[0]);
    }
    char term[256];
    if (x->op == KR_CONV) { /* the weight's value is emitted before the sum's statement */
        const char *wv = kg_value(&lane, x->a[1]);
        snprintf(term, sizeof term, "(float)%s * (float)%s", lane.name[x->a[0]], wv);
    } else {
        snprintf(term, sizeof term, "%s", lane.name[x->a[0]]);
    }
    if (last >= 0)
        kiln_strbuf_printf(t->b, "%sif (kg_in%d_%d)\n    ", ind, id, last);
    kiln_strbuf_printf(t->b, "%s%s[kg_e] += %s;\n%s}\n", ind, sum, term, t->indent);
}

/* Average or max pooling of x's operand over its window, as PyTorch's avg_pool / max_pool
 * kernels, or a depthwise convolution: windows start at dst * stride - pad; the average divides
 * by the override, by the window clipped to the padded input (count_include_pad), or by the
 * elements inside the input; max keeps the first of equal values, a NaN replaces anything, and
 * the index starts at the first position inside the input; a convolution sums the taps inside
 * the input (zero padding), each times the weight at the tap, in fp32 (double on the CPU). With
 * lanes > 1 (kg_window_lanes) the sum is computed for that many lanes along the plan's vector
 * axis at once: the result is the array <name>[lanes], each tap one vector load of the operand at
 * lane 0's position, its lanes' terms added in the same order as the scalar form's. */
static void window_code(kg_scope *s, int v, int64_t lanes, int tile) {
    const kir *ir = s->plan->ir;
    const kir_node *x = &ir->nodes[v];
    const kir_map *m = &ir->maps[x->map];
    const int avg = x->op == KR_AVG, conv = x->op == KR_CONV, id = (*s->next_id)++;
    /* taps read clamped into the input (a sum counts them by a flag), and max's index read */
    const int clamp = kg_window_clamped(s->plan, v);
    const int index = !avg && !conv && kg_window_index_live(s->plan, v);
    const char *in = s->indent;
    char ind[96], coord[3][32], tap[3][32];
    KILN_ASSERT(lanes <= 1 || (s->cuda && clamp)); /* kg_lane_window's sums */
    KILN_ASSERT(tile == 1 || (lanes > 1 && conv)); /* kg_tile_axis's */
    const int last = m->n - 1; /* with a tile, its positions along the last dim share taps */
    char tdim[16] = "";        /* the sums' position index: "[kg_t<id>]" with a tile */
    if (tile > 1)
        snprintf(tdim, sizeof tdim, "[%d]", tile);
    temp_name(s, v);
    if (lanes > 1)
        kiln_strbuf_printf(s->b, "%sfloat %s%s[%lld];\n", in, s->name[v], tdim, (long long)lanes);
    else
        kiln_strbuf_printf(s->b, "%sfloat %s;\n", in, s->name[v]);
    if (index)
        kiln_strbuf_printf(s->b, "%sint64_t %s_i;\n", in, s->name[v]);
    kiln_strbuf_printf(s->b, "%s{ /* %s window */\n", in,
                       avg    ? "average"
                       : conv ? "convolution"
                              : "max");
    /* a fixed window's positions along one axis in 32 bits where every size involved fits: the
     * bounds checks of each tap are then single compares (the addresses stay 64-bit) */
    int narrow = !m->adaptive;
    for (int w = 0; w < ir->p->n_workloads && narrow; w++)
        for (int i = 0; i < m->n && narrow; i++) {
            const int64_t size = kir_eval(ir->p, ir->axes[m->src[i]].size, w),
                          out = kir_eval(ir->p, ir->axes[m->dst[i]].size, w);
            const int64_t reach = out * m->stride[i] + m->pad[i] + m->kernel[i] * m->dilation[i];
            narrow = size < INT32_MAX / 2 && reach < INT32_MAX / 2;
        }
    const char *pt = narrow ? "int" : "int64_t";
    for (int i = 0; i < m->n; i++) {
        const char *size = ir->axes[m->src[i]].size, *out = ir->axes[m->dst[i]].size;
        const char *dst = s->coord[m->dst[i]][0] ? s->coord[m->dst[i]] : "0";
        long long st = m->stride[i], pad = m->pad[i], k = m->kernel[i], d = m->dilation[i];
        if (m->adaptive) {
            kiln_strbuf_printf(s->b,
                               "%s    const int64_t kg_lo%d_%d = (int64_t)(%s) * (%s) / (%s);\n",
                               in, id, i, dst, size, out);
            kiln_strbuf_printf(s->b,
                               "%s    const int64_t kg_hi%d_%d = (((int64_t)(%s) + 1) * (%s) + "
                               "(%s) - 1) / (%s);\n",
                               in, id, i, dst, size, out, out);
            continue;
        }
        kiln_strbuf_printf(s->b, "%s    const %s kg_st%d_%d = (%s)(%s) * %lld - %lld;\n", in, pt,
                           id, i, pt, dst, st, pad);
        if (avg) {
            kiln_strbuf_printf(s->b,
                               "%s    const %s kg_en%d_%d = kg_st%d_%d + %lld < (%s) + %lld ? "
                               "kg_st%d_%d + %lld : (%s)(%s) + %lld;\n",
                               in, pt, id, i, id, i, k, size, pad, id, i, k, pt, size, pad);
            kiln_strbuf_printf(s->b,
                               "%s    const %s kg_lo%d_%d = kg_st%d_%d < 0 ? 0 : kg_st%d_%d;\n", in,
                               pt, id, i, id, i, id, i);
            kiln_strbuf_printf(s->b,
                               "%s    const %s kg_hi%d_%d = kg_en%d_%d < (%s) ? kg_en%d_%d : "
                               "(%s)(%s);\n",
                               in, pt, id, i, id, i, size, id, i, pt, size);
        } else if (!conv && !clamp) { /* max: taps in [lo, hi); the index starts at lo */
            kiln_strbuf_printf(s->b,
                               "%s    const %s kg_hi%d_%d = kg_st%d_%d + %lld < (%s) ? "
                               "kg_st%d_%d + %lld : (%s)(%s);\n",
                               in, pt, id, i, id, i, (k - 1) * d + 1, size, id, i, (k - 1) * d + 1,
                               pt, size);
            kiln_strbuf_printf(s->b,
                               "%s    %s kg_lo%d_%d = kg_st%d_%d;\n%s    while (kg_lo%d_%d < "
                               "0)\n%s        kg_lo%d_%d += %lld;\n",
                               in, pt, id, i, id, i, in, id, i, in, id, i, d);
        }
    }
    if (lanes > 1) {
        kiln_strbuf_printf(s->b, "%s    float kg_sum%d%s[%lld] = {};\n", in, id, tdim,
                           (long long)lanes);
    } else if (avg || conv) {
        kiln_strbuf_printf(s->b, "%s    %s kg_sum%d = 0;\n", in, s->cuda ? "float" : "double", id);
    } else {
        kiln_strbuf_printf(s->b, "%s    float kg_best%d = -INFINITY;\n", in, id);
        if (index) {
            kiln_strbuf_printf(s->b, "%s    int64_t kg_arg%d = ", in, id);
            plane_index(s->b, ir, m, "lo", id);
            kiln_strbuf_printf(s->b, ";\n");
        }
    }
    snprintf(ind, sizeof ind, "%s    ", in);
    for (int i = 0; i < m->n; i++) {
        const long long step = avg ? 1LL : (long long)m->dilation[i];
        if (m->adaptive) {
            kiln_strbuf_printf(s->b,
                               "%sfor (int64_t kg_s%d_%d = kg_lo%d_%d; kg_s%d_%d < kg_hi%d_%d; "
                               "kg_s%d_%d += %lld) {\n",
                               ind, id, i, id, i, id, i, id, i, id, i, step);
        } else {
            /* A fixed window: a constant trip count that the compiler unrolls, so that all of the
             * window's loads are in flight at once, in the same ascending order as a loop from lo
             * to hi. A sum counts a tap where it is inside the input (0 <= s < size: on the
             * window's grid that is [lo, hi)) and reads its operand at the position clamped into
             * the input whether it counts or not: no branch around the loads, so the compiler
             * merges the taps that neighbouring outputs of a thread share (a 3x3 window over 8
             * outputs of a row reads 10 columns a row, not 24) and the accumulation is a select.
             * Max reads clamped too where kg_window_clamped allows (dilation 1, no index), with no
             * flag: a clamped tap repeats an element of its window, which does not change the
             * maximum (a NaN propagates either way). Elsewhere max skips each tap outside
             * [lo, hi). (Max is not summed a vector a tap: with every tap of a vector's lanes and
             * their indices in flight at once, its kernels spilled.) */
            /* With a tile, the outer dims are loops (the taps of a row in flight, not the whole
             * window's for every position) and the positions a loop around the last dim's taps,
             * both unrolled: position t's tap j reads where t + j does. */
            const char *size = ir->axes[m->src[i]].size;
            char moved[48] = "";
            if (s->cuda)
                kiln_strbuf_printf(s->b, "%s#pragma unroll%s\n", ind,
                                   tile > 1 && i < last ? " 1" : "");
            if (tile > 1 && i == last) {
                kiln_strbuf_printf(s->b,
                                   "%sfor (int kg_t%d = 0; kg_t%d < %d; kg_t%d++) {\n%s#pragma "
                                   "unroll\n",
                                   ind, id, id, tile, id, ind);
                snprintf(moved, sizeof moved, " + (%s)kg_t%d * %lld", pt, id,
                         (long long)m->stride[i]);
            }
            kiln_strbuf_printf(s->b,
                               "%sfor (int kg_j%d_%d = 0; kg_j%d_%d < %lld; kg_j%d_%d++) {\n"
                               "%s    const %s kg_s%d_%d = kg_st%d_%d%s + (%s)kg_j%d_%d * "
                               "%lld;\n",
                               ind, id, i, id, i, (long long)m->kernel[i], id, i, ind, pt, id, i,
                               id, i, moved, pt, id, i, step);
            if (!clamp) {
                kiln_strbuf_printf(s->b,
                                   "%s    if (kg_s%d_%d < kg_lo%d_%d || kg_s%d_%d >= kg_hi%d_%d)\n"
                                   "%s        continue;\n",
                                   ind, id, i, id, i, id, i, id, i, ind);
            } else {
                if (avg || conv) { /* max needs no flag: its clamped taps are in its window */
                    kiln_strbuf_printf(s->b, "%s    const int kg_in%d_%d = ", ind, id, i);
                    if (i)
                        kiln_strbuf_printf(s->b, "kg_in%d_%d && ", id, i - 1);
                    kiln_strbuf_printf(s->b, "kg_s%d_%d >= 0 && kg_s%d_%d < (%s);\n", id, i, id, i,
                                       size);
                }
                kiln_strbuf_printf(
                    s->b,
                    "%s    const %s kg_k%d_%d = kg_s%d_%d < 0 ? 0 : kg_s%d_%d < (%s) ? "
                    "kg_s%d_%d : (%s)(%s) - 1;\n",
                    ind, pt, id, i, id, i, id, i, size, id, i, pt, size);
            }
        }
        snprintf(coord[i], sizeof coord[i], clamp ? "kg_k%d_%d" : "kg_s%d_%d", id, i);
        snprintf(tap[i], sizeof tap[i], "kg_j%d_%d", id, i);
        size_t l = strlen(ind);
        snprintf(ind + l, sizeof ind - l, "    ");
    }
    kg_scope child;
    map_scope(&child, s, m, ind, coord, conv ? tap : NULL);
    if (lanes > 1) {
        char sum[48];
        snprintf(sum, sizeof sum, tile > 1 ? "kg_sum%d[kg_t%d]" : "kg_sum%d", id, id);
        lane_terms(&child, v, id, lanes, clamp ? m->n - 1 : -1, sum);
    } else if (avg || conv) {
        const char *val = kg_value(&child, x->a[0]);
        char term[256];
        if (conv) { /* the weight's value is emitted before the sum's statement */
            char xv[96];
            snprintf(xv, sizeof xv, "%s", val);
            const char *wv = kg_value(&child, x->a[1]), *acc = s->cuda ? "float" : "double";
            snprintf(term, sizeof term, "(%s)%s * (%s)%s", acc, xv, acc, wv);
        } else {
            snprintf(term, sizeof term, "%s", val);
        }
        if (clamp) /* the tap counts where it is inside the input along every axis */
            kiln_strbuf_printf(s->b, "%sif (kg_in%d_%d)\n    ", ind, id, m->n - 1);
        kiln_strbuf_printf(s->b, "%skg_sum%d += %s;\n", ind, id, term);
    } else {
        const char *val = kg_value(&child, x->a[0]);
        kiln_strbuf_printf(s->b, "%sconst float kg_x%d = %s;\n", ind, id, val);
        kiln_strbuf_printf(s->b, "%sif (kg_x%d > kg_best%d || kg_x%d != kg_x%d) {\n", ind, id, id,
                           id, id);
        kiln_strbuf_printf(s->b, "%s    kg_best%d = kg_x%d;\n", ind, id, id);
        if (index) {
            kiln_strbuf_printf(s->b, "%s    kg_arg%d = ", ind, id);
            plane_index(s->b, ir, m, "s", id);
            kiln_strbuf_printf(s->b, ";\n");
        }
        kiln_strbuf_printf(s->b, "%s}\n", ind);
    }
    for (int i = m->n - 1; i >= 0; i--) {
        ind[strlen(ind) - 4] = 0;
        kiln_strbuf_printf(s->b, "%s}\n", ind);
        if (tile > 1 && i == last) /* the positions' loop */
            kiln_strbuf_printf(s->b, "%s}\n", ind);
    }
    char r[160], e[96], at[32] = "";
    if (lanes > 1)
        snprintf(at, sizeof at, tile > 1 ? "[kg_t%d][kg_e]" : "[kg_e]", id);
    if (avg) {
        kiln_strbuf_printf(s->b, "%s    const int64_t kg_div%d = ", in, id);
        if (m->divisor)
            kiln_strbuf_printf(s->b, "%lld", (long long)m->divisor);
        for (int i = 0; !m->divisor && i < m->n; i++) {
            const char *a = m->count_include_pad && !m->adaptive ? "en" : "hi";
            const char *b = m->count_include_pad && !m->adaptive ? "st" : "lo";
            kiln_strbuf_printf(s->b, "%s(kg_%s%d_%d - kg_%s%d_%d)", i ? " * " : "", a, id, i, b, id,
                               i);
        }
        kiln_strbuf_printf(s->b, ";\n");
        snprintf(e, sizeof e, "(float)(kg_sum%d%s / kg_div%d)", id, at, id);
    } else if (conv) {
        snprintf(e, sizeof e, "(float)kg_sum%d%s", id, at);
    } else {
        snprintf(e, sizeof e, "kg_best%d", id);
    }
    rounded(x->dtype, e, r, sizeof r);
    if (tile > 1)
        kiln_strbuf_printf(
            s->b, "%s    #pragma unroll\n%s    for (int kg_t%d = 0; kg_t%d < %d; kg_t%d++)\n", in,
            in, id, id, tile, id);
    if (lanes > 1)
        kiln_strbuf_printf(s->b,
                           "%s    #pragma unroll\n%s    for (int kg_e = 0; kg_e < %lld; kg_e++)\n"
                           "%s        %s%s = %s;\n",
                           in, in, (long long)lanes, in, s->name[v], at, r);
    else
        kiln_strbuf_printf(s->b, "%s    %s = %s;\n", in, s->name[v], r);
    if (index)
        kiln_strbuf_printf(s->b, "%s    %s_i = kg_arg%d;\n", in, s->name[v], id);
    kiln_strbuf_printf(s->b, "%s}\n", in);
}

/* x's operand at src = (dst * mul + add) / den, or the fill value outside it. */
static void emit_remap(kg_scope *s, int v) {
    const kir *ir = s->plan->ir;
    const kir_node *x = &ir->nodes[v];
    const kir_map *m = &ir->maps[x->map];
    const int id = (*s->next_id)++;
    const char *in = s->indent;
    char coord[3][32], fill[48], ind[96], at[3][96];
    for (int i = 0; i < m->n; i++) /* a gather's indices, at this scope's coordinates */
        if (m->index[i] >= 0)
            snprintf(at[i], sizeof at[i], "%s", kg_value(s, m->index[i]));
    temp_name(s, v);
    constant(x->k[0], kir_dtype_is_int(x->dtype), fill, sizeof fill);
    kiln_strbuf_printf(s->b, "%s%s %s = %s;\n%s{ /* gather */\n", in, kg_ctype(x->dtype),
                       s->name[v], fill, in);
    for (int i = 0; i < m->n; i++) {
        snprintf(coord[i], sizeof coord[i], "kg_g%d_%d", id, i);
        if (m->index[i] >= 0) { /* a gather: the index's value, negative from the end */
            kiln_strbuf_printf(s->b, "%s    const int64_t %s = %s < 0 ? %s + (%s) : %s;\n", in,
                               coord[i], at[i], at[i], ir->axes[m->src[i]].size, at[i]);
            continue;
        }
        const char *dst = s->coord[m->dst[i]][0] ? s->coord[m->dst[i]] : "0";
        kiln_strbuf_printf(s->b, "%s    const int64_t %s = ((int64_t)(%s) * %lld + %lld)", in,
                           coord[i], dst, (long long)m->mul[i], (long long)m->add[i]);
        if (m->den[i] > 1)
            kiln_strbuf_printf(s->b, " / %lld", (long long)m->den[i]);
        kiln_strbuf_printf(s->b, ";\n");
    }
    kiln_strbuf_printf(s->b, "%s    if (", in);
    for (int i = 0; i < m->n; i++)
        kiln_strbuf_printf(s->b, "%s%s >= 0 && %s < (%s)", i ? " && " : "", coord[i], coord[i],
                           ir->axes[m->src[i]].size);
    kiln_strbuf_printf(s->b, ") {\n");
    snprintf(ind, sizeof ind, "%s        ", in);
    kg_scope child;
    map_scope(&child, s, m, ind, coord, NULL);
    const char *val = kg_value(&child, x->a[0]);
    kiln_strbuf_printf(s->b, "%s%s = %s;\n%s    }\n%s}\n", ind, s->name[v], val, in, in);
}

/* A cat (rules.c: each part read at dst - its offset, 0 outside, the reads added): node v the sum
 * of remaps along one axis whose ranges do not overlap, so that at most one is inside at a point.
 * The parts (leaf[], their ranges [lo, hi) sorted) into the arrays: their count, or 0 when v is
 * not such a sum. */
#define KG_CAT_PARTS KILN_OP_MAX_LIST
static int cat_parts(const kir *ir, int v, int *leaf, int64_t *lo, int64_t *hi) {
    const kir_node *x = &ir->nodes[v];
    int n = 0, u = v;
    while (n < KG_CAT_PARTS - 1) { /* the left spine of the sum */
        const kir_node *y = &ir->nodes[u];
        if (y->kind != KIR_OP || y->op != KO_ADD || y->k[0] != 1 || y->dtype != x->dtype)
            break;
        leaf[n++] = y->a[1];
        u = y->a[0];
    }
    if (n == 0 || u == v)
        return 0;
    leaf[n++] = u;
    int dst = -1;
    for (int i = 0; i < n; i++) {
        const kir_node *r = &ir->nodes[leaf[i]];
        if (r->kind != KIR_REMAP || r->dtype != x->dtype || r->k[0] != 0)
            return 0;
        const kir_map *m = &ir->maps[r->map];
        if (m->n != 1 || m->index[0] >= 0 || m->mul[0] != 1 || m->den[0] != 1 ||
            (dst >= 0 && m->dst[0] != dst))
            return 0;
        dst = m->dst[0];
        const char *size = ir->axes[m->src[0]].size;
        char num[32];
        snprintf(num, sizeof num, "%lld", (long long)kir_eval(ir->p, size, 0));
        if (!kir_same(ir->p, size, num))
            return 0;
        lo[i] = -m->add[0];
        hi[i] = lo[i] + kir_eval(ir->p, size, 0);
    }
    for (int i = 1; i < n; i++) /* by range; n is small */
        for (int j = i; j > 0 && lo[j] < lo[j - 1]; j--) {
            int t = leaf[j];
            leaf[j] = leaf[j - 1];
            leaf[j - 1] = t;
            int64_t a = lo[j], b = hi[j];
            lo[j] = lo[j - 1], hi[j] = hi[j - 1];
            lo[j - 1] = a, hi[j - 1] = b;
        }
    for (int i = 1; i < n; i++)
        if (hi[i - 1] > lo[i])
            return 0;
    return n;
}

/* Parts [a, b) of a cat as a binary search on coordinate kg_cat<id>: one part read, log2(parts)
 * comparisons, where the sum reads every part's bounds. */
static void cat_search(kg_scope *s, int v, int id, const int *leaf, const int64_t *lo,
                       const int64_t *hi, int a, int b, const char *in) {
    const kir *ir = s->plan->ir;
    char ind[96];
    snprintf(ind, sizeof ind, "%s    ", in);
    if (b - a == 1) {
        const kir_map *m = &ir->maps[ir->nodes[leaf[a]].map];
        char coord[1][32];
        snprintf(coord[0], sizeof coord[0], "kg_g%d_%d", id, a);
        kiln_strbuf_printf(s->b, "%sif (kg_cat%d >= %lld && kg_cat%d < %lld) {\n", in, id,
                           (long long)lo[a], id, (long long)hi[a]);
        kiln_strbuf_printf(s->b, "%sconst int64_t %s = kg_cat%d - %lld;\n", ind, coord[0], id,
                           (long long)lo[a]);
        kg_scope child;
        map_scope(&child, s, m, ind, coord, NULL);
        const char *val = kg_value(&child, ir->nodes[leaf[a]].a[0]);
        kiln_strbuf_printf(s->b, "%s%s = %s;\n%s}\n", ind, s->name[v], val, in);
        return;
    }
    const int mid = (a + b) / 2;
    kiln_strbuf_printf(s->b, "%sif (kg_cat%d < %lld) {\n", in, id, (long long)lo[mid]);
    cat_search(s, v, id, leaf, lo, hi, a, mid, ind);
    kiln_strbuf_printf(s->b, "%s} else {\n", in);
    cat_search(s, v, id, leaf, lo, hi, mid, b, ind);
    kiln_strbuf_printf(s->b, "%s}\n", in);
}

/* Node v as a cat's search (cat_parts): 1 when it is one. */
static int emit_cat(kg_scope *s, int v) {
    const kir *ir = s->plan->ir;
    int leaf[KG_CAT_PARTS];
    int64_t lo[KG_CAT_PARTS], hi[KG_CAT_PARTS];
    const int n = cat_parts(ir, v, leaf, lo, hi);
    if (n < 2)
        return 0;
    const kir_node *x = &ir->nodes[v];
    const int dst = ir->maps[ir->nodes[leaf[0]].map].dst[0];
    const int id = (*s->next_id)++;
    char fill[48], ind[96];
    constant(0, kir_dtype_is_int(x->dtype), fill, sizeof fill);
    temp_name(s, v);
    snprintf(ind, sizeof ind, "%s    ", s->indent);
    kiln_strbuf_printf(s->b, "%s%s %s = %s;\n%s{ /* cat of %d */\n", s->indent, kg_ctype(x->dtype),
                       s->name[v], fill, s->indent, n);
    kiln_strbuf_printf(s->b, "%sconst int64_t kg_cat%d = (int64_t)(%s);\n", ind, id,
                       s->coord[dst][0] ? s->coord[dst] : "0");
    cat_search(s, v, id, leaf, lo, hi, 0, n, ind);
    kiln_strbuf_printf(s->b, "%s}\n", s->indent);
    return 1;
}

const char *kg_value(kg_scope *s, int v) {
    if (s->name[v][0])
        return s->name[v];
    const kir *ir = s->plan->ir;
    const kir_node *x = &ir->nodes[v];
    char rhs[1024], expr[1100];
    switch (x->kind) {
    case KIR_CONST:
        if (!x->expr[0]) {
            constant(x->value, kir_dtype_is_int(x->dtype), s->name[v], sizeof s->name[v]);
            return s->name[v];
        }
        if (x->value)
            snprintf(rhs, sizeof rhs, "(float)(%s) - (float)(%.17g)", x->expr, -x->value);
        else
            snprintf(rhs, sizeof rhs, "(float)(%s)", x->expr);
        break;
    case KIR_SCALAR:
        snprintf(s->name[v], sizeof s->name[v], "((%s)%.30s)", kg_ctype(x->dtype),
                 ir->p->inputs[x->input].name);
        return s->name[v];
    case KIR_LOAD: {
        char elem[600];
        kg_load_at(s, x->acc, elem, sizeof elem);
        kg_load_expr(x->dtype, s->cuda, elem, rhs, sizeof rhs);
        break;
    }
    case KIR_POS: {
        char off[512];
        kg_offset(s, x->acc, off, sizeof off);
        snprintf(rhs, sizeof rhs, "(int64_t)(%s)", off);
        break;
    }
    case KIR_OP: {
        if (x->op == KO_ADD && emit_cat(s, v))
            return s->name[v];
        char ops[3][96];
        for (int i = 0; i < x->n_a; i++)
            snprintf(ops[i], sizeof ops[i], "%s", kg_value(s, x->a[i]));
        op_expr(ir, v, ops, expr, sizeof expr);
        if ((x->dtype == KILN_BF16 || x->dtype == KILN_F16) && exact_in(ir, v, x->dtype))
            kiln_family_fmt(rhs, sizeof rhs, "%s", expr);
        else
            rounded(x->dtype, expr, rhs, sizeof rhs);
        break;
    }
    case KIR_PART: /* max pooling's index; the driver names reduction results */
        KILN_ASSERT(ir->nodes[x->a[0]].kind == KIR_WINDOW);
        snprintf(s->name[v], sizeof s->name[v], "%s_i", kg_value(s, x->a[0]));
        return s->name[v];
    case KIR_REDUCE:
        KILN_ASSERT(!"a reduction the driver did not name");
        return "";
    case KIR_WINDOW:
        window_code(s, v, 1, 1);
        return s->name[v];
    case KIR_REMAP:
        emit_remap(s, v);
        return s->name[v];
    }
    temp_name(s, v);
    kiln_strbuf_printf(s->b, "%sconst %s %s = %s;\n", s->indent, kg_ctype(x->dtype), s->name[v],
                       rhs);
    return s->name[v];
}

void kg_store_outputs(kg_scope *s, int along_red, int only) {
    const kir *ir = s->plan->ir;
    const kiln_problem *p = ir->p;
    for (int o = 0; o < ir->n_out; o++) {
        if ((along_red >= 0 && kg_output_full(ir, o) != along_red) || (only >= 0 && o != only))
            continue;
        const kir_access *c = &ir->acc[ir->out[o].acc];
        char guard[256] = "";
        size_t g = 0;
        for (int a = 0; a < ir->n_axes; a++)
            if ((ir->domain >> a & 1) && !strcmp(c->stride[a], "0") && s->coord[a][0] &&
                g < sizeof guard - 64)
                g += (size_t)snprintf(guard + g, sizeof guard - g, "%s%s == 0", g ? " && " : "",
                                      s->coord[a]);
        char off[512], st[600];
        const char *val = kg_value(s, ir->out[o].node);
        kg_offset(s, ir->out[o].acc, off, sizeof off);
        kg_store_expr(p->outputs[o].dtype, s->cuda, val, st, sizeof st);
        if (g)
            kiln_strbuf_printf(s->b, "%sif (%s) ", s->indent, guard);
        else
            kiln_strbuf_printf(s->b, "%s", s->indent);
        kiln_strbuf_printf(s->b, "%s[%s] = %s;\n", p->outputs[o].name, off, st);
    }
}
int kg_ready(const kg_scope *s, int v) {
    const kir *ir = s->plan->ir;
    const kir_node *x = &ir->nodes[v];
    if (s->name[v][0])
        return 1;
    if (x->kind == KIR_REDUCE || (x->kind == KIR_PART && ir->nodes[x->a[0]].kind == KIR_REDUCE) ||
        (x->axes & ir->red))
        return 0;
    for (int i = 0; i < x->n_a; i++)
        if (!kg_ready(s, x->a[i]))
            return 0;
    return 1;
}

void kg_hoist(kg_scope *s, int v) {
    const kir_node *x = &s->plan->ir->nodes[v];
    if (kg_ready(s, v)) {
        if (x->kind != KIR_CONST && x->kind != KIR_SCALAR)
            kg_value(s, v);
        return;
    }
    for (int i = 0; i < x->n_a; i++)
        kg_hoist(s, x->a[i]);
}

void kg_name_results(kg_scope *s, int node, const char *index) {
    const kir *ir = s->plan->ir;
    snprintf(s->name[node], sizeof s->name[node], "kr%d%s", node, index);
    for (int v = node + 1; v < ir->n_nodes; v++)
        if (ir->nodes[v].kind == KIR_PART && ir->nodes[v].a[0] == node)
            snprintf(s->name[v], sizeof s->name[v], "kr%d_1%s", node, index);
}

void kg_window_lanes(kg_scope *s, int v, int64_t lanes, int tile) {
    KILN_ASSERT(kg_lane_window(s->plan, v, lanes));
    window_code(s, v, lanes, tile);
}
