/* plan.c: the plan of a lowered IR — the domain's axes ordered by memory (the largest tensor's
 * strides first), adjacent axes merged where every access walks them as one, the kind of kernel
 * (pointwise; rows: the reduced axes are the contiguous ones; columns: a kept axis is), and the
 * passes its reductions take. The same plan serves the CPU and the CUDA emission; the schedule
 * point only chooses how the CUDA code walks it. */
#include "gen_impl.h"

#include <string.h>

int64_t kg_stride(const kg_plan *plan, int c, int a, int w) {
    return kir_eval(plan->ir->p, plan->ir->acc[c].stride[a], w);
}

int kg_output_full(const kir *ir, int o) {
    for (int a = 0; a < ir->n_axes; a++)
        if ((ir->red >> a & 1) && strcmp(ir->acc[ir->out[o].acc].stride[a], "0"))
            return 1;
    return 0;
}

int kg_vectorizable(const kg_plan *plan, int c, int a, int64_t vec) {
    const kir *ir = plan->ir;
    if (a < 0)
        return 0;
    for (int w = 0; w < ir->p->n_workloads; w++) {
        if (kg_stride(plan, c, a, w) != 1 || kir_eval(ir->p, ir->acc[c].offset, w) % vec)
            return 0;
        for (int x = 0; x < ir->n_axes; x++)
            if (x != a && kg_stride(plan, c, x, w) % vec)
                return 0;
    }
    return 1;
}

int kg_lane_window(const kg_plan *plan, int v, int64_t vec) {
    const kir *ir = plan->ir;
    const kir_node *x = &ir->nodes[v];
    const int a = plan->vec_axis;
    if (plan->kind != KG_POINTWISE || a < 0 || !plan->live[v] || x->kind != KIR_WINDOW ||
        (x->op != KR_AVG && x->op != KR_CONV))
        return 0;
    const kir_map *m = &ir->maps[x->map];
    if (m->adaptive)
        return 0;
    for (int i = 0; i < m->n; i++)
        if (m->src[i] == a || m->dst[i] == a || m->tap[i] == a)
            return 0;
    const kir_node *in = &ir->nodes[x->a[0]];
    return in->kind == KIR_LOAD && (in->axes >> a & 1) && kg_vectorizable(plan, in->acc, a, vec);
}

int kg_window_clamped(const kg_plan *plan, int v) {
    const kir *ir = plan->ir;
    const kir_node *x = &ir->nodes[v];
    const kir_map *m = &ir->maps[x->map];
    if (x->kind != KIR_WINDOW || m->adaptive)
        return 0;
    if (x->op != KR_MAXPOOL)
        return 1;
    if (kg_window_index_live(plan, v))
        return 0;
    for (int i = 0; i < m->n; i++) {
        /* the first window along axis i reaches position 0, and the last starts before the end */
        if (m->dilation[i] != 1 || m->pad[i] > m->kernel[i] - 1)
            return 0;
        for (int w = 0; w < ir->p->n_workloads; w++) {
            const int64_t size = kir_eval(ir->p, ir->axes[m->src[i]].size, w),
                          out = kir_eval(ir->p, ir->axes[m->dst[i]].size, w);
            if (out > 0 && (out - 1) * m->stride[i] - m->pad[i] > size - 1)
                return 0;
        }
    }
    return 1;
}

int kg_window_index_live(const kg_plan *plan, int v) {
    const kir *ir = plan->ir;
    for (int u = 0; u < ir->n_nodes; u++)
        if (plan->live[u] && ir->nodes[u].kind == KIR_PART && ir->nodes[u].a[0] == v)
            return 1;
    return 0;
}

int kg_staged_t(const kg_plan *plan, int c) {
    const kir *ir = plan->ir;
    const kiln_problem *p = ir->p;
    const int a = plan->vec_axis, t = ir->acc[c].tensor;
    if (a < 0 || t < 0)
        return 0;
    for (int w = 0; w < p->n_workloads; w++) {
        const int64_t s = kg_stride(plan, c, a, w), v = kir_eval(p, ir->axes[a].size, w);
        int64_t shape[KILN_MAX_DIMS], reach = kir_eval(p, ir->acc[c].offset, w);
        if (s <= 1 || kiln_tensor_shape(p, &p->inputs[t], &p->workloads[w], shape) != v * s)
            return 0;
        for (int x = 0; x < ir->n_axes; x++)
            if (x != a)
                reach += kg_stride(plan, c, x, w) * (kir_eval(p, ir->axes[x].size, w) - 1);
        if (reach >= s)
            return 0;
    }
    return 1;
}

int kg_tile_axis(const kg_plan *plan) {
    const kir *ir = plan->ir;
    if (plan->kind != KG_POINTWISE || plan->n_kept < 2 ||
        plan->kept[plan->n_kept - 1] != plan->vec_axis)
        return -1;
    const int t = plan->kept[plan->n_kept - 2];
    for (int v = 0; v < ir->n_nodes; v++)
        if (kg_window_tiles(plan, v, t))
            return t;
    return -1;
}

int kg_window_tiles(const kg_plan *plan, int v, int axis) {
    const kir *ir = plan->ir;
    if (axis < 0 || !kg_lane_window(plan, v, 1) || ir->nodes[v].op != KR_CONV)
        return 0;
    const kir_map *m = &ir->maps[ir->nodes[v].map];
    return m->dst[m->n - 1] == axis;
}

/* Accesses that are used: live loads (and argmax indices) and every output. */
static int access_used(const kg_plan *plan, int c) {
    const kir *ir = plan->ir;
    if (ir->acc[c].tensor < 0 && ir->acc[c].tensor != KIR_INDEX)
        return 1;
    for (int v = 0; v < ir->n_nodes; v++)
        if (plan->live[v] && ir->nodes[v].acc == c)
            return 1;
    return 0;
}

/* Elements of the tensor behind an access (workload 0): what decides which tensor's memory order
 * the kernel follows. */
static double access_elements(const kg_plan *plan, int c) {
    const kir *ir = plan->ir;
    const kiln_problem *p = ir->p;
    int t = ir->acc[c].tensor;
    int64_t shape[KILN_MAX_DIMS];
    if (t >= 0)
        return (double)kiln_tensor_shape(p, &p->inputs[t], &p->workloads[0], shape);
    if (t == KIR_INDEX)
        return 0;
    return (double)kiln_tensor_shape(p, &p->outputs[-1 - t], &p->workloads[0], shape);
}

/* Orders the domain's axes outermost first: by the stride in the largest access, ties by the
 * next largest, and so on. An access that does not walk both axes (stride 0 along one: a
 * window's input along the pooled axes, a broadcast operand) says nothing of their order. */
static void order_axes(kg_plan *plan, int *order, int *n) {
    const kir *ir = plan->ir;
    int acc[KIR_MAX_ACCESS], na = 0;
    for (int c = 0; c < ir->n_acc; c++)
        if (access_used(plan, c))
            acc[na++] = c;
    for (int i = 1; i < na; i++) /* largest first (insertion sort, stable) */
        for (int j = i; j > 0 && access_elements(plan, acc[j]) > access_elements(plan, acc[j - 1]);
             j--) {
            int t = acc[j];
            acc[j] = acc[j - 1];
            acc[j - 1] = t;
        }
    *n = 0;
    for (int a = 0; a < ir->n_axes; a++)
        if (ir->domain >> a & 1)
            order[(*n)++] = a;
    for (int i = 1; i < *n; i++)
        for (int j = i; j > 0; j--) {
            int x = order[j - 1], y = order[j], cmp = 0;
            for (int k = 0; k < na && !cmp; k++) {
                int64_t sx = kg_stride(plan, acc[k], x, 0), sy = kg_stride(plan, acc[k], y, 0);
                if (sx && sy)
                    cmp = sx < sy ? 1 : sx > sy ? -1 : 0; /* 1: y belongs outside x */
            }
            if (cmp <= 0)
                break;
            order[j - 1] = y;
            order[j] = x;
        }
}

/* Whether axes a (outer) and b (inner) can be one axis: every access walks a as b's continuation
 * (or neither), every live node moves along both or neither, and neither is a window's or a
 * remap's result axis (those need their own coordinates). */
static int mergeable(const kg_plan *plan, int a, int b) {
    const kir *ir = plan->ir;
    for (int k = 0; k < ir->n_maps; k++)
        for (int i = 0; i < ir->maps[k].n; i++)
            if (ir->maps[k].index[i] < 0 && (ir->maps[k].dst[i] == a || ir->maps[k].dst[i] == b))
                return 0;
    for (int v = 0; v < ir->n_nodes; v++)
        if (plan->live[v] && ((ir->nodes[v].axes >> a & 1) != (ir->nodes[v].axes >> b & 1)))
            return 0;
    for (int c = 0; c < ir->n_acc; c++) {
        if (!access_used(plan, c))
            continue;
        for (int w = 0; w < ir->p->n_workloads; w++) {
            int64_t sa = kg_stride(plan, c, a, w), sb = kg_stride(plan, c, b, w);
            if (sa != sb * kir_eval(ir->p, ir->axes[b].size, w))
                return 0;
        }
    }
    return 1;
}

/* b becomes part of a (a's size times b's, every access's stride along a is its stride along b). */
static void merge(kg_plan *plan, int a, int b) {
    kir *ir = plan->ir;
    kir_mul(ir->axes[a].size, KIR_EXPR, ir->axes[a].size, ir->axes[b].size);
    snprintf(ir->axes[b].size, KIR_EXPR, "1");
    for (int c = 0; c < ir->n_acc; c++) {
        snprintf(ir->acc[c].stride[a], KIR_EXPR, "%s", ir->acc[c].stride[b]);
        snprintf(ir->acc[c].stride[b], KIR_EXPR, "0");
    }
    for (int v = 0; v < ir->n_nodes; v++) {
        ir->nodes[v].axes &= ~KIR_BIT(b);
        ir->nodes[v].red &= ~KIR_BIT(b);
    }
    ir->domain &= ~KIR_BIT(b);
    ir->red &= ~KIR_BIT(b);
}

/* Merges runs of the list (outermost first) where it can; the list shrinks. */
static void merge_list(kg_plan *plan, int *list, int *n) {
    int k = 0;
    for (int i = 0; i < *n; i++) {
        if (k > 0 && mergeable(plan, list[k - 1], list[i]))
            merge(plan, list[k - 1], list[i]);
        else
            list[k++] = list[i];
    }
    *n = k;
}

/* The reductions node v depends on directly (through pointwise ops, not through another
 * reduction), as a bit set over nodes. */
static void reduction_deps(const kir *ir, int v, unsigned char *deps, int top) {
    const kir_node *x = &ir->nodes[v];
    if (!top && x->kind == KIR_REDUCE) {
        deps[v] = 1;
        return;
    }
    if (x->kind == KIR_PART) {
        deps[x->a[0]] = 1;
        return;
    }
    for (int i = 0; i < x->n_a; i++)
        reduction_deps(ir, x->a[i], deps, 0);
}

static int is_pair(const kir_node *x) {
    return x->kind == KIR_REDUCE && (x->op == KR_SOFTMAX || x->op == KR_WELFORD);
}

/* The passes of every live reduction, phase by phase. */
static void plan_steps(kg_plan *plan) {
    const kir *ir = plan->ir;
    int end[KIR_MAX_NODES];
    plan->n_steps = plan->n_phases = 0;
    for (int v = 0; v < ir->n_nodes; v++) {
        const kir_node *x = &ir->nodes[v];
        if (!plan->live[v] || x->kind != KIR_REDUCE)
            continue;
        unsigned char deps[KIR_MAX_NODES] = {0};
        reduction_deps(ir, v, deps, 1);
        int phase = 0;
        for (int u = 0; u < v; u++)
            if (deps[u] && end[u] + 1 > phase)
                phase = end[u] + 1;
        plan->pairs |= is_pair(x);
        int passes = is_pair(x) && !plan->online ? 2 : 1;
        for (int k = 0; k < passes; k++)
            plan->steps[plan->n_steps++] = (kg_step){v, passes == 2 ? k : 0, phase + k};
        end[v] = phase + passes - 1;
        if (end[v] + 1 > plan->n_phases)
            plan->n_phases = end[v] + 1;
    }
    for (int i = 1; i < plan->n_steps; i++) /* phase order, stable */
        for (int j = i; j > 0 && plan->steps[j].phase < plan->steps[j - 1].phase; j--) {
            kg_step t = plan->steps[j];
            plan->steps[j] = plan->steps[j - 1];
            plan->steps[j - 1] = t;
        }
}

/* 1 when a live load moves along the reduced axes and some kept axis: the stream of a reduction. */
static int kept_load(const kg_plan *plan, int v) {
    const kir *ir = plan->ir;
    const kir_node *x = &ir->nodes[v];
    return plan->live[v] && x->kind == KIR_LOAD && (x->axes & ir->red) &&
           (x->axes & ir->domain & ~ir->red);
}

int kg_index_load(const kg_plan *plan, int v) {
    const kir *ir = plan->ir;
    const kir_node *x = &ir->nodes[v];
    if (plan->kind == KG_POINTWISE || !plan->live[v] || x->kind != KIR_LOAD ||
        !(x->axes & ir->red) || (x->axes & ir->domain & ~ir->red))
        return 0;
    for (int u = 0; u < ir->n_nodes; u++)
        if (kept_load(plan, u))
            return 1;
    return 0; /* nothing is kept: it is the stream */
}

void kg_stream_sizes(const kg_plan *plan, int *max_esize, int *in_bytes, int *in_loads) {
    const kir *ir = plan->ir;
    const kiln_problem *p = ir->p;
    *max_esize = 1;
    *in_bytes = *in_loads = 0;
    kir_axes want = plan->kind == KG_POINTWISE ? ir->domain : ir->red;
    for (int v = 0; v < ir->n_nodes; v++) {
        const kir_node *x = &ir->nodes[v];
        if (!plan->live[v] || x->kind != KIR_LOAD || !(x->axes & want) || kg_index_load(plan, v))
            continue;
        int es = (int)kiln_dtype_size(p->inputs[ir->acc[x->acc].tensor].dtype);
        *max_esize = es > *max_esize ? es : *max_esize;
        /* a load that does not move along the vector axis (GroupNorm's weight and bias, [C] in a
         * reduction over (C/G, H*W)) is a few values read from cache, neither vectorised nor kept
         * in registers: it is not in flight from memory and takes no register of the slice */
        if (plan->vec_axis < 0 || (x->axes >> plan->vec_axis & 1)) {
            *in_bytes += es;
            ++*in_loads;
        }
    }
    for (int o = 0; o < p->n_outputs; o++) { /* a reduction's outputs at the outer points are not */
        int es = (int)kiln_dtype_size(p->outputs[o].dtype);
        if (plan->kind == KG_POINTWISE || kg_output_full(ir, o))
            *max_esize = es > *max_esize ? es : *max_esize;
    }
}

/* plan->early_out and the rest (gen_impl.h). An output qualifies when its value is computed from
 * loads, scalars and constants alone, rounded to its own dtype (so what is read back is the value),
 * and it moves along every axis of the plan (one writer per element). */
static void plan_early(kg_plan *plan) {
    const kir *ir = plan->ir;
    unsigned char plain[KIR_MAX_NODES] = {0}, need[KIR_MAX_NODES] = {0};
    for (int v = 0; v < ir->n_nodes; v++) {
        const kir_node *x = &ir->nodes[v];
        plain[v] = x->kind == KIR_LOAD || x->kind == KIR_SCALAR || x->kind == KIR_CONST ||
                   x->kind == KIR_OP || x->kind == KIR_POS;
        for (int i = 0; plain[v] && i < x->n_a; i++)
            plain[v] = plain[x->a[i]];
    }
    uint32_t early = 0, late = 0;
    for (int o = 0; o < ir->n_out; o++) {
        if (!kg_output_full(ir, o))
            continue;
        const int v = ir->out[o].node;
        int every = plain[v] && ir->nodes[v].dtype == ir->p->outputs[o].dtype;
        for (int i = 0; every && i < plan->n_kept + plan->n_red; i++) {
            const int a = i < plan->n_kept ? plan->kept[i] : plan->red[i - plan->n_kept];
            every = strcmp(ir->acc[ir->out[o].acc].stride[a], "0") != 0;
        }
        if (every)
            early |= 1u << o;
        else
            late |= 1u << o;
    }
    if (!early)
        return;
    /* what the last pass still computes from the inputs once the early outputs' values are read */
    for (int o = 0; o < ir->n_out; o++)
        if (late >> o & 1)
            need[ir->out[o].node] = 1;
    for (int o = 0; o < ir->n_out; o++)
        if (early >> o & 1)
            need[ir->out[o].node] = 0;
    int streams = 0;
    for (int v = ir->n_nodes - 1; v >= 0; v--) {
        const kir_node *x = &ir->nodes[v];
        if (!need[v])
            continue;
        if (x->kind == KIR_LOAD && (x->axes & ir->red) && !kg_index_load(plan, v) &&
            (plan->vec_axis < 0 || (x->axes >> plan->vec_axis & 1)))
            streams = 1; /* as kg_stream_sizes: GroupNorm's weight is read from cache */
        const int leaf = x->kind == KIR_REDUCE || x->kind == KIR_PART; /* named results */
        for (int i = 0; !leaf && i < x->n_a; i++) {
            int is_early = 0;
            for (int o = 0; o < ir->n_out; o++)
                is_early |= (early >> o & 1) && ir->out[o].node == x->a[i];
            if (!is_early)
                need[x->a[i]] = 1;
        }
    }
    if (late && streams)
        return; /* the last pass reads the inputs anyway: reading the outputs back adds bytes */
    plan->early_out = early;
    plan->early_reread = late ? 1 : 2;
    for (int o = 0; late && o < ir->n_out; o++)
        if (early >> o & 1)
            plan->early_bytes += kiln_dtype_size(ir->p->outputs[o].dtype);
}

int kg_plan_make(const kiln_problem *p, int online, kg_plan *plan, char *why, size_t n) {
    memset(plan, 0, sizeof *plan);
    plan->online = online;
    if (!kir_lower(p, &plan->ir, why, n))
        return 0;
    kir *ir = plan->ir;
    for (int o = 0; o < ir->n_out; o++)
        plan->live[ir->out[o].node] = 1;
    for (int v = ir->n_nodes - 1; v >= 0; v--)
        for (int i = 0; plan->live[v] && i < ir->nodes[v].n_a; i++)
            plan->live[ir->nodes[v].a[i]] = 1;
    int order[KIR_MAX_AXES], n_order;
    order_axes(plan, order, &n_order);
    for (int i = 0; i < n_order; i++) {
        if (ir->red >> order[i] & 1)
            plan->red[plan->n_red++] = order[i];
        else
            plan->kept[plan->n_kept++] = order[i];
    }
    merge_list(plan, plan->kept, &plan->n_kept);
    merge_list(plan, plan->red, &plan->n_red);
    plan_steps(plan);
    for (int o = 0; o < ir->n_out; o++)
        plan->full_out |= kg_output_full(ir, o);

    /* the kind: which axis is contiguous in the largest input that is reduced */
    plan->kind = KG_POINTWISE;
    plan->vec_axis = plan->n_kept ? plan->kept[plan->n_kept - 1] : -1;
    if (plan->n_steps) {
        int best = -1;
        double best_n = -1;
        for (int v = 0; v < ir->n_nodes; v++)
            if (plan->live[v] && ir->nodes[v].kind == KIR_LOAD && (ir->nodes[v].axes & ir->red) &&
                access_elements(plan, ir->nodes[v].acc) > best_n) {
                best = ir->nodes[v].acc;
                best_n = access_elements(plan, best);
            }
        int r_in = plan->red[plan->n_red - 1];
        int k_in = plan->n_kept ? plan->kept[plan->n_kept - 1] : -1;
        int64_t sr = best >= 0 ? kg_stride(plan, best, r_in, 0) : 1;
        int64_t sk = best >= 0 && k_in >= 0 ? kg_stride(plan, best, k_in, 0) : 0;
        plan->kind = (sr == 1 || sk != 1) ? KG_ROWS : KG_COLUMNS;
        plan->vec_axis = plan->kind == KG_ROWS ? r_in : k_in;
    }
    if (plan->kind == KG_ROWS && plan->full_out) /* columns: not emulated yet (test_gen_ir_cuda) */
        plan_early(plan);
    kir_axes kept = 0;
    for (int i = 0; i < plan->n_kept; i++)
        kept |= KIR_BIT(plan->kept[i]);
    kir_axes_size(ir, kept, plan->outer, sizeof plan->outer);
    kir_axes_size(ir, ir->red, plan->red_len, sizeof plan->red_len);
    kir_axes_size(ir, ir->domain, plan->total, sizeof plan->total);
    return 1;
}

void kg_plan_free(kg_plan *plan) {
    kir_free(plan->ir);
    plan->ir = NULL;
}
