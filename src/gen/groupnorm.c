/* groupnorm.c: kiln's groupnorm family: group normalisation over [N, C, *] (native_group_norm or
 * group_norm, affine or not, with mean/rstd outputs when captured), with a fused SiLU as a variant;
 * its table, matcher, constraints and emitters. The template is src/gen/templates/groupnorm.cu.
 *
 * The hard case is batch 1 with 32 groups of 2^20-2^22 elements (a VAE decoder): 32 rows for 132
 * SMs, each 4-16 MiB, with 128 MiB-1 GiB in all (L2 is 60 MB). The minimum traffic is x read once
 * and y written once, but every output of a row needs statistics of the whole row, so a one-pass
 * kernel must keep the row on chip across CTAs until its statistics are known. Four modes cover the
 * ground (the template's header has the mechanics):
 *   0  a CTA per row, the last tiles kept on chip, the others read twice: many small rows;
 *   1  a row split over GN_SPLIT CTAs in two launches through kiln_scratch: always safe, reads x
 *      twice (the second pass in reverse CTA order so that its first slices hit L2);
 *   2  a row split over GN_SPLIT CTAs in one launch, each slice in registers + shared memory; the
 *      CTAs of a row meet at a counter in kiln_scratch (tickets make it deadlock-free whenever a
 *      row's CTAs can be resident together, GN_SPLIT <= 128): x read once, the SOL design;
 *   3  a cluster of GN_SPLIT <= 16 CTAs per row exchanging partials through DSMEM: x read once, no
 *      counters, for rows a cluster can hold (up to ~3.5 MiB).
 * The vector width and the shared-memory stages are derived from the problem (gn_geometry), not
 * searched: the widest vector dividing H*W and the fewest stages that hold a slice are never worse.
 *
 * A residual add before the norm (x = a + b: a VAE block's) is a variant: the kernel reads a and
 * b where it would read x; where the chain returns the sum too, it writes the rounded sum and reads
 * the sum where it would read x again, else it reads a and b again.
 *
 * Statistics are Chan's merge of exact per-tile (mean, M2) pairs, fp32; rstd = rsqrt(var + eps)
 * with the biased variance, and y = x * a + b' with a = rstd * w[c], b' = b[c] - mean * a, as
 * PyTorch's CUDA kernel writes it. The default tolerances hold with margin. */
#include "chnorm.h"

#include <math.h>
#include <string.h>

enum { GN_X, GN_W, GN_B, GN_EPS, GN_X2 };          /* input roles (x = x + x2 with an add) */
enum { GN_Y, GN_MEAN, GN_RSTD, GN_SUM };           /* output roles */
enum { GP_MODE, GP_SPLIT, GP_THREADS, GP_UNROLL }; /* parameter positions */

/* Shared memory mode 0 stages a row in (more would cost CTAs per SM more than it saves). */
#define GN_ROW_SMEM (96 * 1024)
/* Sizes of one workload: x is [N, C, *spatial], HW the product of the spatial sizes. */
typedef struct {
    int64_t N, C, HW, G, M, rows;
} gn_dims;

static void gn_dims_of(const kiln_problem *p, const kiln_match *m, const kiln_workload *w,
                       gn_dims *d) {
    const kiln_tensor_spec *x = &p->inputs[m->input_of_role[GN_X]];
    int64_t s[KILN_MAX_DIMS];
    kiln_tensor_shape(p, x, w, s);
    d->N = s[0], d->C = s[1], d->HW = chn_dims_prod(s, 2, x->ndim);
    d->G = (int64_t)kiln_match_get(m, "groups", 1);
    d->M = d->G > 0 ? d->C / d->G * d->HW : 0;
    d->rows = d->N * d->G;
}

/* Checks shapes, dtypes and layouts of a recognised group norm and fills the expressions. */
static int gn_validate(const kiln_problem *p, kiln_match *m, char *why, size_t wl) {
    const kiln_tensor_spec *x = &p->inputs[m->input_of_role[GN_X]];
    const kiln_tensor_spec *y = &p->outputs[m->output_of_role[GN_Y]];
    if (x->ndim < 2) {
        snprintf(why, wl, "input %s has %d dimensions; group norm needs [N, C, ...]", x->name,
                 x->ndim);
        return 0;
    }
    if (!chn_is_float(x->dtype) || !chn_is_float(y->dtype)) {
        snprintf(why, wl, "dtype %s -> %s: only float32, bfloat16 and float16",
                 kiln_dtype_name(x->dtype), kiln_dtype_name(y->dtype));
        return 0;
    }
    if (!kiln_tensor_same_shape(p, x, y)) {
        snprintf(why, wl, "output %s does not have the shape of input %s", y->name, x->name);
        return 0;
    }
    int px[KILN_MAX_DIMS], py[KILN_MAX_DIMS];
    if (!chn_layout_perm(x, px, why, wl) || !chn_layout_perm(y, py, why, wl))
        return 0;
    for (int d = 0; d < x->ndim; d++)
        if (px[d] != d || py[d] != d) {
            snprintf(why, wl,
                     "%s is stored in memory order (channels-last); this group norm reads "
                     "[N, C, *] only",
                     px[d] != d ? x->name : y->name);
            return 0;
        }
    const int x2 = m->input_of_role[GN_X2], so = m->output_of_role[GN_SUM];
    if (x2 >= 0) {
        /* the sum, where it is returned, is checked like the second operand */
        const kiln_tensor_spec *ts[2] = {&p->inputs[x2], so >= 0 ? &p->outputs[so] : NULL};
        for (int i = 0; i < 2 && ts[i]; i++) {
            int pt[KILN_MAX_DIMS];
            if (!kiln_tensor_same_shape(p, x, ts[i]) || ts[i]->dtype != x->dtype) {
                snprintf(why, wl, "%s differs from %s in shape or dtype (the add's %s)",
                         ts[i]->name, x->name, i ? "sum" : "operands");
                return 0;
            }
            if (!chn_layout_perm(ts[i], pt, why, wl))
                return 0;
            for (int d = 0; d < x->ndim; d++)
                if (pt[d] != d) {
                    snprintf(why, wl, "%s is not stored [N, C, *]", ts[i]->name);
                    return 0;
                }
        }
    }
    for (int r = GN_W; r <= GN_B; r++) {
        int i = m->input_of_role[r];
        if (i < 0)
            continue;
        const kiln_tensor_spec *t = &p->inputs[i];
        if (t->is_scalar || t->ndim != 1 || !chn_same_dim(p, t, 0, x, 1) ||
            !chn_is_float(t->dtype)) {
            snprintf(why, wl, "%s %s is not a float vector of C = %s's dimension 1",
                     r == GN_W ? "weight" : "bias", t->name, x->name);
            return 0;
        }
    }
    for (int r = GN_MEAN; r <= GN_RSTD; r++) {
        int o = m->output_of_role[r];
        if (o < 0)
            continue;
        const kiln_tensor_spec *t = &p->outputs[o];
        if (t->ndim != 2 || !chn_same_dim(p, t, 0, x, 0) || !chn_is_float(t->dtype)) {
            snprintf(why, wl, "output %s is not a float [N, groups] tensor", t->name);
            return 0;
        }
    }
    int64_t G = (int64_t)kiln_match_get(m, "groups", 0);
    for (int w = 0; w < p->n_workloads; w++) {
        gn_dims d;
        gn_dims_of(p, m, &p->workloads[w], &d);
        if (G < 1 || d.C % G != 0) {
            snprintf(why, wl, "C = %lld is not a multiple of %lld groups (workload %d)",
                     (long long)d.C, (long long)G, w);
            return 0;
        }
        for (int r = GN_MEAN; r <= GN_RSTD; r++) {
            int64_t s[KILN_MAX_DIMS];
            int o = m->output_of_role[r];
            if (o >= 0 && (kiln_tensor_shape(p, &p->outputs[o], &p->workloads[w], s), s[1] != G)) {
                snprintf(why, wl, "output %s is not [N, %lld]", p->outputs[o].name, (long long)G);
                return 0;
            }
        }
    }
    chn_dims_expr(p, x, 0, 1, m->rows_expr, sizeof m->rows_expr);
    chn_dims_expr(p, x, 1, 2, m->extra_expr[0], sizeof m->extra_expr[0]);
    chn_dims_expr(p, x, 2, x->ndim, m->cols_expr, sizeof m->cols_expr);
    return 1;
}

/* The result of op k is output j: its index, or -1. */
static int gn_output_of(const kiln_opchain *c, int k) {
    for (int j = 0; j < c->n_outputs; j++)
        if (c->outputs[j].input < 0 && c->outputs[j].op == k && c->outputs[j].slot == 0)
            return j;
    return -1;
}

/* [add(a, b) | cast to float] group_norm | native_group_norm [silu | sigmoid, mul] [cast] */
static int gn_from_chain(const kiln_problem *p, const kiln_opchain *c, kiln_match *m, char *why,
                         size_t wl) {
    int k = 0, x = -1, x2 = -1, mid = -1, silu = 0;
    const kiln_op *op = &c->ops[0];
    if (c->n_ops > 1 && kiln_op_is(op, "aten::add.Tensor")) {
        x = kiln_arg_input(chn_arg(op, "self")), x2 = kiln_arg_input(chn_arg(op, "other"));
        if (x < 0 || x2 < 0 || kiln_arg_num(chn_arg(op, "alpha"), 1) != 1) {
            snprintf(why, wl, "the add before the group norm is not input + input (alpha 1)");
            return 0;
        }
        k = 1;
    } else if (c->n_ops > 1 && chn_is_cast(op)) {
        if ((x = kiln_arg_input(chn_arg(op, "self"))) < 0 || (mid = chn_cast_dtype(op)) < 0) {
            snprintf(why, wl, "the cast before the group norm is not of an input to a float type");
            return 0;
        }
        k = 1;
    }
    op = &c->ops[k];
    int native = kiln_op_is(op, "aten::native_group_norm.default");
    if (!native && !kiln_op_is(op, "aten::group_norm.default")) {
        snprintf(why, wl, "step %d is %s, not a group norm", k, op->aten);
        return 0;
    }
    const kiln_arg *in = chn_arg(op, "input");
    if (k == 0 && kiln_arg_input(in) >= 0)
        x = kiln_arg_input(in);
    else if (k == 0 || !kiln_arg_is_result(in, k - 1, 0)) {
        snprintf(why, wl, "the group norm's input is not a problem input");
        return 0;
    }
    int w, b;
    const kiln_arg *ag = chn_arg(op, native ? "group" : "num_groups"), *ae = chn_arg(op, "eps");
    if (!chn_optional_input(chn_arg(op, "weight"), &w) ||
        !chn_optional_input(chn_arg(op, "bias"), &b)) {
        snprintf(why, wl, "the group norm's weight or bias is computed, not a problem input");
        return 0;
    }
    if (!ag || ag->kind != KILN_ARG_NUM || ag->num < 1 || ag->num != floor(ag->num)) {
        snprintf(why, wl, "the number of groups is not a constant");
        return 0;
    }
    if (ae && ae->kind != KILN_ARG_NUM) {
        snprintf(why, wl, "eps is not a constant");
        return 0;
    }
    if (native && p->n_workloads > 0) {
        /* N, C, HxW of the captured call must be the input's (a reshaped call is not ours) */
        int64_t s[KILN_MAX_DIMS];
        const kiln_tensor_spec *t = &p->inputs[x];
        kiln_tensor_shape(p, t, &p->workloads[0], s);
        if (t->ndim < 2 || kiln_arg_num(chn_arg(op, "N"), -1) != s[0] ||
            kiln_arg_num(chn_arg(op, "C"), -1) != s[1] ||
            kiln_arg_num(chn_arg(op, "HxW"), -1) != chn_dims_prod(s, 2, t->ndim)) {
            snprintf(why, wl, "native_group_norm's N, C, HxW are not the input's shape");
            return 0;
        }
    }
    int gn_step = k++;
    const kiln_op *next = k < c->n_ops ? &c->ops[k] : NULL;
    if (next &&
        (kiln_op_is(next, "aten::silu.default") || kiln_op_is(next, "aten::silu_.default")) &&
        kiln_arg_is_result(chn_arg(next, "self"), gn_step, 0)) {
        silu = 1, k++;
    } else if (k + 1 < c->n_ops && kiln_op_is(next, "aten::sigmoid.default") &&
               kiln_arg_is_result(chn_arg(next, "self"), gn_step, 0) &&
               kiln_op_is(&c->ops[k + 1], "aten::mul.Tensor")) {
        const kiln_arg *a0 = chn_arg(&c->ops[k + 1], "self");
        const kiln_arg *a1 = chn_arg(&c->ops[k + 1], "other");
        if ((kiln_arg_is_result(a0, gn_step, 0) && kiln_arg_is_result(a1, k, 0)) ||
            (kiln_arg_is_result(a1, gn_step, 0) && kiln_arg_is_result(a0, k, 0)))
            silu = 2, k += 2;
    }
    if (k < c->n_ops && chn_is_cast(&c->ops[k]) &&
        kiln_arg_is_result(chn_arg(&c->ops[k], "self"), k - 1, 0)) {
        if (chn_cast_dtype(&c->ops[k]) < 0) {
            snprintf(why, wl, "the cast after the group norm is not to a float type");
            return 0;
        }
        k++;
    }
    if (k != c->n_ops) {
        snprintf(why, wl, "step %d (%s) does not continue a group_norm[+silu] pattern", k,
                 c->ops[k].aten);
        return 0;
    }
    if (!strcmp(c->kind, "aten")) {
        /* the outputs are results of the op: y first, then mean and rstd */
        if (c->outputs[0].slot != 0) {
            snprintf(why, wl, "the problem does not return the group norm's output");
            return 0;
        }
        m->output_of_role[GN_Y] = 0;
        for (int j = 1; j < c->n_outputs; j++)
            m->output_of_role[c->outputs[j].slot == 1 ? GN_MEAN : GN_RSTD] = j;
        if ((m->output_of_role[GN_MEAN] < 0) != (m->output_of_role[GN_RSTD] < 0)) {
            snprintf(why, wl, "the problem returns only one of mean and rstd");
            return 0;
        }
    } else {
        const int y = gn_output_of(c, c->n_ops - 1), sum = x2 >= 0 ? gn_output_of(c, 0) : -1;
        if (y < 0 || c->n_outputs != (sum >= 0 ? 2 : 1)) {
            snprintf(why, wl, "the problem returns something other than the last op's value%s",
                     x2 >= 0 ? " and the add's sum" : "");
            return 0;
        }
        m->output_of_role[GN_Y] = y, m->output_of_role[GN_SUM] = sum;
    }
    m->input_of_role[GN_X] = x, m->input_of_role[GN_W] = w, m->input_of_role[GN_B] = b;
    m->input_of_role[GN_X2] = x2;
    kiln_match_set(m, "groups", ag->num);
    kiln_match_set(m, "eps", kiln_arg_num(ae, 1e-5));
    kiln_match_set(m, "silu", silu);
    kiln_match_set(m, "mid", mid >= 0 ? mid : (int)p->inputs[x].dtype);
    const char *cls = kiln_problem_kiln_str(p, "module_class");
    snprintf(m->how, sizeof m->how, "%s%s%.48s: %saten::%.60s, %g groups, eps %g%s%s", c->kind,
             cls ? " " : "", cls ? cls : "",
             x2 < 0                           ? ""
             : m->output_of_role[GN_SUM] >= 0 ? "add (the sum returned), "
                                              : "add, ",
             op->aten + 6, ag->num, kiln_arg_num(ae, 1e-5), silu ? ", fused silu" : "",
             mid >= 0 ? ", cast to float first" : "");
    return 1;
}

/* A hand-written problem: op_type, input names, shapes. */
static int gn_from_op_type(const kiln_problem *p, kiln_match *m, char *why, size_t wl) {
    const char *op = p->op_type ? p->op_type : "";
    int silu = !strcmp(op, "group_norm_silu") || !strcmp(op, "groupnorm_silu");
    if (!silu && strcmp(op, "group_norm") && strcmp(op, "groupnorm")) {
        snprintf(why, wl, "no \"kiln\" object and op_type '%s' is not group_norm[_silu]", op);
        return 0;
    }
    int x = chn_input_named(p, CHN_X_NAMES, -1);
    for (int i = 0; x < 0 && i < p->n_inputs; i++)
        if (!p->inputs[i].is_scalar && p->inputs[i].ndim >= 2)
            x = i;
    if (x < 0 || p->n_outputs < 1) {
        snprintf(why, wl, "no [N, C, ...] input or no output");
        return 0;
    }
    double G = 0;
    static const char *const g_axes[] = {"num_groups", "groups", "group", "G", NULL};
    for (int k = 0; g_axes[k] && G == 0; k++) {
        int a = kiln_problem_axis_index(p, g_axes[k]);
        if (a >= 0 && p->axes[a].kind == KILN_AXIS_CONST)
            G = (double)p->axes[a].value;
    }
    if (p->n_outputs == 3) {
        m->output_of_role[GN_MEAN] = 1, m->output_of_role[GN_RSTD] = 2;
        if (G == 0 && p->n_workloads > 0 && p->outputs[1].ndim == 2) {
            int64_t s[KILN_MAX_DIMS];
            kiln_tensor_shape(p, &p->outputs[1], &p->workloads[0], s);
            G = (double)s[1];
        }
    } else if (p->n_outputs != 1) {
        snprintf(why, wl, "%d outputs: expected y, or y, mean and rstd", p->n_outputs);
        return 0;
    }
    if (G < 1) {
        snprintf(why, wl,
                 "the number of groups is not stated (a const axis num_groups, or a "
                 "mean output [N, groups])");
        return 0;
    }
    m->output_of_role[GN_Y] = 0;
    m->input_of_role[GN_X] = x;
    m->input_of_role[GN_W] = chn_input_named(p, CHN_W_NAMES, 1);
    m->input_of_role[GN_B] = chn_input_named(p, CHN_B_NAMES, 1);
    m->input_of_role[GN_EPS] = chn_scalar_named(p, CHN_EPS_NAMES);
    kiln_match_set(m, "groups", G);
    kiln_match_set(m, "eps", chn_eps_from_reference(p, 1e-5));
    kiln_match_set(m, "silu", silu);
    kiln_match_set(m, "mid", (int)p->inputs[x].dtype);
    snprintf(m->how, sizeof m->how, "op_type %s: %g groups, eps %s", op, G,
             m->input_of_role[GN_EPS] >= 0 ? "from input" : "from the reference or 1e-5");
    return 1;
}

static int gn_match(const kiln_problem *p, kiln_match *m, char *why, size_t wl) {
    kiln_opchain *c = NULL;
    int ok;
    if (!kiln_opchain_described(p))
        ok = gn_from_op_type(p, m, why, wl);
    else
        ok = chn_chain_read(p, &c, why, wl) && gn_from_chain(p, c, m, why, wl);
    if (ok) {
        ok = gn_validate(p, m, why, wl);
        int silu = (int)kiln_match_get(m, "silu", 0);
        snprintf(m->variant, sizeof m->variant, "%sgroup_norm%s%s",
                 m->input_of_role[GN_X2] >= 0 ? "add_" : "", silu ? "_silu" : "",
                 m->output_of_role[GN_MEAN] >= 0 ? "_stats" : "");
    }
    kiln_opchain_free(c);
    return ok;
}

/* What a point implies for p besides its parameters: the vector width (the widest, up to 16 bytes
 * of x, that divides H*W in every workload: never slower for a stream, so not searched) and the
 * shared-memory stages (the fewest that keep a CTA's slice on chip). */
typedef struct {
    int64_t vec, tile, stage, smem, max_m, max_per;
} gn_geo;

static void gn_geometry(const kiln_problem *p, const kiln_match *m, const int64_t *pt, gn_geo *g) {
    const int64_t mode = pt[GP_MODE], split = pt[GP_SPLIT];
    const int64_t sx = (int64_t)kiln_dtype_size(p->inputs[m->input_of_role[GN_X]].dtype);
    memset(g, 0, sizeof *g);
    g->vec = 16 / sx > 8 ? 8 : 16 / sx;
    for (int w = 0; w < p->n_workloads; w++) {
        gn_dims d;
        gn_dims_of(p, m, &p->workloads[w], &d);
        while (g->vec > 1 && d.HW % g->vec)
            g->vec /= 2;
        g->max_m = d.M > g->max_m ? d.M : g->max_m;
    }
    g->tile = pt[GP_THREADS] * g->vec * pt[GP_UNROLL];
    g->max_per =
        chn_cdiv(chn_cdiv(g->max_m, split), g->vec) * g->vec; /* elements of a CTA's slice */
    int64_t need = chn_cdiv(g->max_per, g->tile) - 1;
    if (need < 0 || mode == 1 || (mode == 0 && need * g->tile * sx > GN_ROW_SMEM))
        need = 0;
    g->stage = need;
    g->smem = need * g->tile * sx;
}

static const char *gn_check(const kiln_problem *p, const kiln_match *m, const int64_t *pt) {
    const int64_t mode = pt[GP_MODE], split = pt[GP_SPLIT];
    gn_geo g;
    gn_geometry(p, m, pt, &g);
    if ((mode == 0) != (split == 1))
        return "GN_SPLIT: 1 is mode 0 (a CTA per row), modes 1-3 split rows over 2 or more CTAs";
    if (mode == 3 && split > 16)
        return "GN_MODE 3: a cluster has at most 16 CTAs";
    /* a thread's bytes of tile, and whether it needs more than 64 registers (the template's
     * GN_WIDE: an add holds a's and b's tiles and the sum at once) */
    const int add = m->input_of_role[GN_X2] >= 0;
    const int64_t tile_bytes =
        pt[GP_UNROLL] * g.vec * (int64_t)kiln_dtype_size(p->inputs[m->input_of_role[GN_X]].dtype);
    if (add && tile_bytes >= 128)
        return "GN_UNROLL: with an add, a's and b's tiles of 128 bytes a thread spill in 128 "
               "registers";
    if (pt[GP_THREADS] == 1024 && (add ? tile_bytes >= 32 : tile_bytes > 64))
        return "GN_UNROLL: the tile a thread holds spills in the 64 registers a 1024-thread CTA "
               "allows";
    int64_t max_rows = 0;
    for (int w = 0; w < p->n_workloads; w++) {
        gn_dims d;
        gn_dims_of(p, m, &p->workloads[w], &d);
        if (d.M >= (INT64_C(1) << 31) || d.rows * split >= (INT64_C(1) << 31))
            return "a group of 2^31 elements or more (32-bit offsets)";
        max_rows = d.rows > max_rows ? d.rows : max_rows;
    }
    if (mode != 0 && g.max_per < pt[GP_THREADS] * g.vec)
        return "GN_SPLIT: slices smaller than one vector per thread";
    if ((mode == 2 || mode == 3) && g.smem > CHN_MAX_SMEM)
        return xasprintf("!GN_MODE %lld: a slice of %lld elements does not fit on chip (one tile "
                         "in registers and 200 KiB of shared memory); split the row further",
                         (long long)mode, (long long)g.max_per);
    /* dominated points, rejected so that a sample of the space is spent on points that can win:
     * fewer CTAs than SMs while the rows could be split (further) */
    const int64_t max_split = mode == 3 ? 16 : 128;
    if (mode == 0 && max_rows < CHN_SMS / 2 && g.max_m >= 4 * g.tile)
        return "GN_MODE 0: so few rows leave most SMs idle; split them (modes 1-3)";
    if (mode != 0 && max_rows * split < CHN_SMS && split < max_split &&
        chn_cdiv(g.max_m, 2 * split) >= pt[GP_THREADS] * g.vec)
        return "GN_SPLIT: fewer CTAs than SMs while a finer split is possible";
    return NULL;
}

/* A CTA's slice of a split row that measured best (bench/RESULTS.md, forty-second session): 64 KiB
 * of x, one tile of 256 threads x 64 bytes in registers and the rest in shared memory; twice as
 * long with an add (both of the VAE's add rows were best at half the split). */
#define GN_START_SLICE (64 * 1024)

/* The rule of thumb, from the H100 sweeps of the VAE's rows (32 groups of 1-4 M elements, with and
 * without the add: mode 2, 256 threads, 64 bytes of tile a thread, slices of 32-64 KiB best or
 * within 5 % of it): rows that fit a CTA on chip, or enough of them to fill the SMs twice, take a
 * CTA each (mode 0); else mode 2 with the row split into slices of GN_START_SLICE bytes (at least
 * one CTA an SM, at most 128 a row); mode 1 where mode 2's slice does not fit on chip. */
static int gn_start(const kiln_problem *p, const kiln_match *m, int64_t *pt) {
    if (p->n_workloads < 1)
        return -1;
    int64_t max_m = 0, min_rows = INT64_MAX;
    for (int w = 0; w < p->n_workloads; w++) {
        gn_dims d;
        gn_dims_of(p, m, &p->workloads[w], &d);
        max_m = d.M > max_m ? d.M : max_m;
        min_rows = d.rows < min_rows ? d.rows : min_rows;
    }
    const int64_t sx = (int64_t)kiln_dtype_size(p->inputs[m->input_of_role[GN_X]].dtype);
    int64_t vec = 16 / sx > 8 ? 8 : 16 / sx;
    pt[GP_THREADS] = 256;
    pt[GP_UNROLL] = 64 / (vec * sx) >= 8 ? 8 : 64 / (vec * sx) >= 4 ? 4 : 2;
    if (max_m * sx <= GN_ROW_SMEM || min_rows >= 2 * CHN_SMS) {
        pt[GP_MODE] = 0, pt[GP_SPLIT] = 1;
        return 0;
    }
    const int64_t slice = GN_START_SLICE * (m->input_of_role[GN_X2] >= 0 ? 2 : 1);
    int64_t split = 2;
    while (split < 128 && (max_m * sx > split * slice || min_rows * split < CHN_SMS))
        split *= 2;
    pt[GP_MODE] = 2, pt[GP_SPLIT] = split;
    if (!kiln_family_point_ok(&kiln_family_groupnorm, p, m, pt))
        pt[GP_MODE] = 1;
    return 0;
}

/* #defines of the problem's variant (types and flags), for CUDA or C. */
static void gn_variant_defines(kiln_strbuf *b, const kiln_problem *p, const kiln_match *m,
                               int cuda) {
    const int x = m->input_of_role[GN_X], w = m->input_of_role[GN_W], bi = m->input_of_role[GN_B];
    const int y = m->output_of_role[GN_Y], mo = m->output_of_role[GN_MEAN];
    kiln_dtype tw = w >= 0 ? p->inputs[w].dtype : KILN_F32;
    kiln_dtype tb = bi >= 0 ? p->inputs[bi].dtype : KILN_F32;
    kiln_dtype tm = mo >= 0 ? p->outputs[mo].dtype : KILN_F32;
    if (cuda) {
        kiln_strbuf_printf(
            b,
            "#define GN_TX %s\n#define GN_TY %s\n#define GN_TW %s\n#define GN_TB %s\n"
            "#define GN_TM %s\n",
            kiln_dtype_kernel_type(p->inputs[x].dtype, 1).type,
            kiln_dtype_kernel_type(p->outputs[y].dtype, 1).type, kiln_dtype_kernel_type(tw, 1).type,
            kiln_dtype_kernel_type(tb, 1).type, kiln_dtype_kernel_type(tm, 1).type);
    } else {
        chn_cpu_type_defines(b, "GN", "X", p->inputs[x].dtype, 0);
        chn_cpu_type_defines(b, "GN", "W", tw, 0);
        chn_cpu_type_defines(b, "GN", "B", tb, 0);
        chn_cpu_type_defines(b, "GN", "Y", p->outputs[y].dtype, 1);
        chn_cpu_type_defines(b, "GN", "M", tm, 1);
        chn_cpu_type_defines(b, "GN", "S", p->inputs[x].dtype, 1);
    }
    kiln_strbuf_printf(b,
                       "#define GN_HAS_W %d\n#define GN_HAS_B %d\n#define GN_HAS_STATS %d\n"
                       "#define GN_ADD %d\n#define GN_SILU %d\n#define GN_MID %d\n",
                       w >= 0, bi >= 0, mo >= 0,
                       m->input_of_role[GN_X2] < 0      ? 0
                       : m->output_of_role[GN_SUM] >= 0 ? 1
                                                        : 2,
                       (int)kiln_match_get(m, "silu", 0),
                       chn_mid_code((kiln_dtype)kiln_match_get(m, "mid", KILN_F32)));
}

/* The arguments every body takes after x: w, b, y, mean, rstd, N, C, HW, G, eps. */
static void gn_body_args(kiln_strbuf *b, const kiln_problem *p, const kiln_match *m, int cuda) {
    chn_ptr_arg(b, p, m->input_of_role[GN_W], -1, "const GN_TW *");
    kiln_strbuf_printf(b, ", ");
    chn_ptr_arg(b, p, m->input_of_role[GN_B], -1, "const GN_TB *");
    kiln_strbuf_printf(b, ", ");
    chn_ptr_arg(b, p, -1, m->output_of_role[GN_Y], "GN_TY *");
    kiln_strbuf_printf(b, ", ");
    chn_ptr_arg(b, p, -1, m->output_of_role[GN_MEAN], "GN_TM *");
    kiln_strbuf_printf(b, ", ");
    chn_ptr_arg(b, p, -1, m->output_of_role[GN_RSTD], "GN_TM *");
    const char *ll = cuda ? "long long" : "int64_t";
    kiln_strbuf_printf(b, ", (%s)%s, (%s)%s, (%s)%s, %d, ", ll, m->rows_expr, ll, m->extra_expr[0],
                       ll, m->cols_expr, (int)kiln_match_get(m, "groups", 1));
    if (m->input_of_role[GN_EPS] >= 0)
        kiln_strbuf_printf(b, "(float)%s", p->inputs[m->input_of_role[GN_EPS]].name);
    else
        kiln_strbuf_printf(b, "(float)%.17g", kiln_match_get(m, "eps", 1e-5));
}

static char *gn_emit(const kiln_problem *p, const kiln_match *m, const int64_t *pt, int cuda) {
    const kiln_family *f = &kiln_family_groupnorm;
    const int mode = (int)pt[GP_MODE], G = (int)kiln_match_get(m, "groups", 1);
    const int x2 = m->input_of_role[GN_X2];
    const char *x = p->inputs[m->input_of_role[GN_X]].name;
    const int so = m->output_of_role[GN_SUM];
    const char *sum = so >= 0 ? p->outputs[so].name : NULL;
    kiln_strbuf b = {0};
    const int scratch = cuda && (mode == 1 || mode == 2);
    if (!cuda) {
        gn_variant_defines(&b, p, m, 0);
        char *proto = kiln_family_prototype(p, 0, 0, NULL, "gn_cpu");
        kiln_strbuf_printf(&b, "// kiln: launch gn_cpu\n%s\n%s {\n",
                           kiln_family_template("groupnorm_cpu.c"), proto);
        free(proto);
        if (x2 >= 0) {
            /* the sum: into its output, or into a buffer of the entry's (gn_ names: the entry's
             * parameters are the problem's names) */
            kiln_strbuf_printf(
                &b, "    const int64_t gn_numel = (int64_t)%s * (int64_t)%s * (int64_t)%s;\n",
                m->rows_expr, m->extra_expr[0], m->cols_expr);
            if (!sum)
                kiln_strbuf_printf(&b,
                                   "    GN_TS *gn_sum = (GN_TS *)malloc((size_t)(gn_numel > 0 ? "
                                   "gn_numel : 1) * sizeof(GN_TS));\n");
            kiln_strbuf_printf(&b, "    gn_cpu_add(%s, %s, %s, gn_numel);\n", x, p->inputs[x2].name,
                               sum ? sum : "gn_sum");
            x = sum ? sum : "gn_sum";
        }
        kiln_strbuf_printf(&b, "    gn_cpu_run(%s, ", x);
        gn_body_args(&b, p, m, 0);
        kiln_strbuf_printf(&b, ");\n%s}\n", x2 >= 0 && !sum ? "    free(gn_sum);\n" : "");
        return chn_with_banner(f, m, pt, 0, &b);
    }
    const int64_t threads = pt[GP_THREADS], split = pt[GP_SPLIT];
    gn_geo g;
    gn_geometry(p, m, pt, &g);
    char *defs = kiln_family_defines(f, pt);
    kiln_strbuf_printf(&b, "%s#define GN_VEC %lld\n#define GN_STAGE %lld\n", defs, (long long)g.vec,
                       (long long)g.stage);
    free(defs);
    gn_variant_defines(&b, p, m, 1);
    const long long smem = (long long)g.smem;
    char rows[300];
    snprintf(rows, sizeof rows, "%s*%d", m->rows_expr, G);
    switch (mode) {
    case 0:
        kiln_strbuf_printf(&b, "// kiln: launch gn_main grid=%s block=%lld smem=%lld\n", rows,
                           (long long)threads, smem);
        break;
    case 1:
        kiln_strbuf_printf(&b,
                           "// kiln: scratch 16*%s*%lld\n"
                           "// kiln: launch gn_partial grid=%s*%lld block=%lld\n"
                           "// kiln: launch gn_apply grid=%s*%lld block=%lld\n",
                           rows, (long long)split, rows, (long long)split, (long long)threads, rows,
                           (long long)split, (long long)threads);
        break;
    case 2:
        kiln_strbuf_printf(&b,
                           "// kiln: scratch 16*%s*%lld+4*%s+16\n"
                           "// kiln: launch gn_main grid=%s*%lld block=%lld smem=%lld\n",
                           rows, (long long)split, rows, rows, (long long)split, (long long)threads,
                           smem);
        break;
    default:
        kiln_strbuf_printf(
            &b, "// kiln: launch gn_main grid=%s*%lld block=%lld smem=%lld cluster=%lld\n", rows,
            (long long)split, (long long)threads, smem, (long long)split);
        break;
    }
    kiln_strbuf_printf(&b, "%s\n", kiln_family_template("groupnorm.cu"));
    char in[600];
    if (x2 >= 0)
        snprintf(in, sizeof in, "gn_in{%s, %s, %s}", x, p->inputs[x2].name, sum ? sum : "nullptr");
    else
        snprintf(in, sizeof in, "gn_in{%s, nullptr, nullptr}", x);
    static const char *const body[] = {"gn_rows_body", "gn_apply_body", "gn_coop_body",
                                       "gn_cluster_body"};
    if (mode == 1) {
        char *proto = kiln_family_prototype(p, scratch, 1, "GN_THREADS", "gn_partial");
        kiln_strbuf_printf(
            &b,
            "%s {\n    gn_partial_body(%s, (long long)%s, (long long)%s, (long long)%s, %d, "
            "kiln_scratch);\n}\n\n",
            proto, in, m->rows_expr, m->extra_expr[0], m->cols_expr, G);
        free(proto);
    }
    char *proto = kiln_family_prototype(p, scratch, 1, "GN_THREADS, GN_MIN_BLOCKS",
                                        mode == 1 ? "gn_apply" : "gn_main");
    kiln_strbuf_printf(&b, "%s {\n    %s(%s, ", proto, body[mode], in);
    free(proto);
    gn_body_args(&b, p, m, 1);
    kiln_strbuf_printf(&b, "%s);\n}\n", mode == 1 || mode == 2 ? ", kiln_scratch" : "");
    return chn_with_banner(f, m, pt, 1, &b);
}

const kiln_family kiln_family_groupnorm = {
    .name = "groupnorm",
    .summary = "group norm over [N, C, *] (native_group_norm), fused SiLU; rows split for batch 1",
    .n_params = 4,
    .params =
        {
            {"GN_MODE",
             4,
             {0, 1, 2, 3},
             "0 a CTA per row; 1 GN_SPLIT CTAs per row, two launches (x read twice); 2 GN_SPLIT "
             "CTAs per row with slices on chip meeting at a row counter; 3 a cluster of GN_SPLIT"},
            {"GN_SPLIT", 8, {1, 2, 4, 8, 16, 32, 64, 128}, "CTAs per row (1: mode 0)"},
            {"GN_THREADS", 3, {256, 512, 1024}, "threads per CTA"},
            {"GN_UNROLL", 3, {2, 4, 8}, "16-byte vectors per thread per tile: its loads in flight"},
        },
    .match = gn_match,
    .check = gn_check,
    .emit = gn_emit,
    .start = gn_start,
    .min_bytes = chn_min_bytes,
    .tolerance = chn_tolerance,
};
