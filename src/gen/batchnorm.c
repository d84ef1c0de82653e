/* batchnorm.c: kiln's batchnorm family: inference batch normalisation from running statistics
 * (batch_norm, native_batch_norm, _native_batch_norm_legit_no_training, _batch_norm_no_update,
 * cudnn_batch_norm with training false), NCHW or channels-last, with a fused residual add and/or
 * ReLU (ResNet's bottleneck tail) as variants; its table, matcher, constraints and emitters. The
 * template is src/gen/templates/batchnorm.cu.
 *
 * The op is a per-channel affine map, so a kernel is a stream that must run at copy speed: 16-byte
 * accesses, a thread's loads all in flight, streaming cache hints. The only design question is how
 * a thread learns each element's channel, and the answer depends on the memory order: the stored
 * tensor is [outer, C, inner] (NCHW: inner = H*W; capture's dense NHWC: inner = 1), and the three
 * modes are a flat walk with a per-CTA channel table (any layout, vectors may straddle channels as
 * they do for 7x7 maps), one (outer, channel) row per CTA (NCHW: no lookup at all), and
 * channels-last with C dividing the threads' vector span (each thread's channels never change, so
 * its coefficients live in registers). The vector width is derived per mode (the widest that mode
 * can use), not searched. */
#include "chnorm.h"

#include <string.h>

enum { BN_X, BN_W, BN_B, BN_RM, BN_RV, BN_R, BN_EPS }; /* input roles */
enum { BN_Y, BN_SMEAN, BN_SINV };                      /* output roles */
enum { BP_MODE, BP_THREADS, BP_UNROLL, BP_GRID };

/* Sizes of one workload: the stored x is [outer, C, inner] around the channel dimension. */
typedef struct {
    int64_t outer, C, inner, total;
} bn_dims;

static void bn_dims_of(const kiln_problem *p, const kiln_match *m, const kiln_workload *w,
                       bn_dims *d) {
    const kiln_tensor_spec *x = &p->inputs[m->input_of_role[BN_X]];
    const int cpos = (int)kiln_match_get(m, "cpos", 1);
    int64_t s[KILN_MAX_DIMS];
    kiln_tensor_shape(p, x, w, s);
    d->outer = chn_dims_prod(s, 0, cpos), d->C = s[cpos],
    d->inner = chn_dims_prod(s, cpos + 1, x->ndim);
    d->total = d->outer * d->C * d->inner;
}

static const char *const BN_OPS[] = {"aten::batch_norm.default",
                                     "aten::_batch_norm_impl_index.default",
                                     "aten::native_batch_norm.default",
                                     "aten::_native_batch_norm_legit_no_training.default",
                                     "aten::_batch_norm_no_update.default",
                                     "aten::cudnn_batch_norm.default",
                                     NULL};

static int bn_validate(const kiln_problem *p, kiln_match *m, char *why, size_t wl) {
    const kiln_tensor_spec *x = &p->inputs[m->input_of_role[BN_X]];
    const kiln_tensor_spec *y = &p->outputs[m->output_of_role[BN_Y]];
    if (x->ndim < 2) {
        snprintf(why, wl, "input %s has %d dimensions; batch norm needs [N, C, ...]", x->name,
                 x->ndim);
        return 0;
    }
    if (!chn_is_float(x->dtype) || y->dtype != x->dtype) {
        snprintf(why, wl, "dtype %s -> %s: only float32, bfloat16 and float16, unchanged",
                 kiln_dtype_name(x->dtype), kiln_dtype_name(y->dtype));
        return 0;
    }
    int px[KILN_MAX_DIMS], pt[KILN_MAX_DIMS];
    if (!chn_layout_perm(x, px, why, wl))
        return 0;
    const int outs[] = {m->output_of_role[BN_Y], -1};
    const int ins[] = {m->input_of_role[BN_R], -1};
    for (int k = 0; k < 2; k++) {
        const kiln_tensor_spec *t =
            k == 0 ? &p->outputs[outs[0]] : (ins[0] >= 0 ? &p->inputs[ins[0]] : NULL);
        if (!t)
            continue;
        if (!kiln_tensor_same_shape(p, t, x) || t->dtype != x->dtype) {
            snprintf(why, wl, "%s does not have the shape and dtype of %s", t->name, x->name);
            return 0;
        }
        if (!chn_layout_perm(t, pt, why, wl))
            return 0;
        if (!chn_perm_equal(px, pt, x->ndim)) {
            snprintf(why, wl, "%s is stored in another memory order than %s", t->name, x->name);
            return 0;
        }
    }
    int cpos = -1;
    for (int d = 0; d < x->ndim; d++)
        if (px[d] == 1)
            cpos = d;
    for (int r = BN_W; r <= BN_RV; r++) {
        int i = m->input_of_role[r];
        if (i < 0)
            continue;
        const kiln_tensor_spec *t = &p->inputs[i];
        if (t->is_scalar || t->ndim != 1 || !chn_same_dim(p, t, 0, x, cpos) ||
            !chn_is_float(t->dtype)) {
            snprintf(why, wl, "%s is not a float vector of C (%s's channel dimension)", t->name,
                     x->name);
            return 0;
        }
    }
    for (int r = BN_SMEAN; r <= BN_SINV; r++) {
        int o = m->output_of_role[r];
        if (o >= 0 && (p->outputs[o].ndim != 1 || !chn_same_dim(p, &p->outputs[o], 0, x, cpos) ||
                       !chn_is_float(p->outputs[o].dtype))) {
            snprintf(why, wl, "output %s is not a float vector of C", p->outputs[o].name);
            return 0;
        }
    }
    kiln_match_set(m, "cpos", cpos);
    kiln_match_set(m, "mid", (int)x->dtype);
    chn_dims_expr(p, x, 0, cpos, m->rows_expr, sizeof m->rows_expr);
    chn_dims_expr(p, x, cpos, cpos + 1, m->extra_expr[0], sizeof m->extra_expr[0]);
    chn_dims_expr(p, x, cpos + 1, x->ndim, m->cols_expr, sizeof m->cols_expr);
    return 1;
}

/* batch_norm-like (training false) [add residual] [relu] */
static int bn_from_chain(const kiln_opchain *c, kiln_match *m, char *why, size_t wl) {
    const kiln_op *op = &c->ops[0];
    int which = -1;
    for (int k = 0; BN_OPS[k]; k++)
        if (kiln_op_is(op, BN_OPS[k]))
            which = k;
    if (which < 0) {
        snprintf(why, wl, "step 0 is %s, not a batch norm", op->aten);
        return 0;
    }
    const kiln_arg *training = chn_arg(op, "training");
    if (chn_has_param(op, "training") &&
        !(training && training->kind == KILN_ARG_BOOL && training->num == 0)) {
        snprintf(why, wl, "a batch norm in training mode (batch statistics), not inference");
        return 0;
    }
    int w, b;
    const int x = kiln_arg_input(chn_arg(op, "input"));
    const int rm = kiln_arg_input(chn_arg(op, "running_mean"));
    const int rv = kiln_arg_input(chn_arg(op, "running_var"));
    if (x < 0 || !chn_optional_input(chn_arg(op, "weight"), &w) ||
        !chn_optional_input(chn_arg(op, "bias"), &b) || rm < 0 || rv < 0) {
        snprintf(why, wl,
                 "the batch norm's input, weight, bias or running statistics are not "
                 "problem inputs");
        return 0;
    }
    const kiln_arg *e = chn_arg(op, chn_has_param(op, "eps") ? "eps" : "epsilon");
    if (e && e->kind != KILN_ARG_NUM) {
        snprintf(why, wl, "eps is not a constant");
        return 0;
    }
    int k = 1, r = -1, relu = 0;
    if (k < c->n_ops && (kiln_op_is(&c->ops[k], "aten::add.Tensor") ||
                         kiln_op_is(&c->ops[k], "aten::add_.Tensor"))) {
        const kiln_arg *a0 = chn_arg(&c->ops[k], "self"), *a1 = chn_arg(&c->ops[k], "other");
        if (kiln_arg_is_result(a0, 0, 0) && kiln_arg_input(a1) >= 0)
            r = kiln_arg_input(a1);
        else if (kiln_arg_is_result(a1, 0, 0) && kiln_arg_input(a0) >= 0)
            r = kiln_arg_input(a0);
        const kiln_arg *alpha = chn_arg(&c->ops[k], "alpha");
        if (r < 0 || kiln_arg_num(alpha, 1) != 1) {
            snprintf(why, wl, "the add after the batch norm is not bn + input (alpha 1)");
            return 0;
        }
        k++;
    }
    if (k < c->n_ops &&
        (kiln_op_is(&c->ops[k], "aten::relu.default") ||
         kiln_op_is(&c->ops[k], "aten::relu_.default")) &&
        kiln_arg_is_result(chn_arg(&c->ops[k], "self"), k - 1, 0))
        relu = 1, k++;
    if (k != c->n_ops) {
        snprintf(why, wl, "step %d (%s) does not continue a batch_norm[+add][+relu] pattern", k,
                 c->ops[k].aten);
        return 0;
    }
    if (!strcmp(c->kind, "aten")) {
        if (c->outputs[0].slot != 0) {
            snprintf(why, wl, "the problem does not return the batch norm's output");
            return 0;
        }
        for (int j = 1; j < c->n_outputs; j++) {
            /* native/legit/no_update return (y, save_mean, save_invstd[, reserve]); in inference
             * the saved statistics are running_mean and 1/sqrt(running_var + eps) */
            const int slot = c->outputs[j].slot;
            if (which < 2 || which == 5 || slot > 2) {
                snprintf(why, wl, "output %d of %s is not one this family produces", slot,
                         op->aten);
                return 0;
            }
            m->output_of_role[slot == 1 ? BN_SMEAN : BN_SINV] = j;
        }
        if ((m->output_of_role[BN_SMEAN] < 0) != (m->output_of_role[BN_SINV] < 0)) {
            snprintf(why, wl, "the problem returns only one of the saved statistics");
            return 0;
        }
    } else if (c->n_outputs != 1 || c->outputs[0].input >= 0 || c->outputs[0].op != c->n_ops - 1 ||
               c->outputs[0].slot != 0) {
        snprintf(why, wl, "the problem returns something other than the last op's value");
        return 0;
    }
    m->output_of_role[BN_Y] = 0;
    m->input_of_role[BN_X] = x;
    m->input_of_role[BN_W] = w, m->input_of_role[BN_B] = b;
    m->input_of_role[BN_RM] = rm, m->input_of_role[BN_RV] = rv;
    m->input_of_role[BN_R] = r;
    kiln_match_set(m, "eps", kiln_arg_num(e, 1e-5));
    kiln_match_set(m, "relu", relu);
    snprintf(m->how, sizeof m->how, "%s: aten::%s, eps %g%s%s", c->kind, op->aten + 6,
             kiln_arg_num(e, 1e-5), r >= 0 ? ", fused residual add" : "",
             relu ? ", fused relu" : "");
    return 1;
}

static int bn_from_op_type(const kiln_problem *p, kiln_match *m, char *why, size_t wl) {
    const char *op = p->op_type ? p->op_type : "";
    int add = !strcmp(op, "batch_norm_add") || !strcmp(op, "batch_norm_add_relu");
    int relu = !strcmp(op, "batch_norm_relu") || !strcmp(op, "batch_norm_add_relu");
    if (!add && !relu && strcmp(op, "batch_norm")) {
        snprintf(why, wl, "no \"kiln\" object and op_type '%s' is not batch_norm[_add][_relu]", op);
        return 0;
    }
    static const char *const rm_names[] = {"running_mean", "mean", "rm", NULL};
    static const char *const rv_names[] = {"running_var", "var", "rv", NULL};
    static const char *const r_names[] = {"residual", "identity", "skip", "other", "r", NULL};
    int x = chn_input_named(p, CHN_X_NAMES, -1);
    int rm = chn_input_named(p, rm_names, 1), rv = chn_input_named(p, rv_names, 1);
    int r = add ? chn_input_named(p, r_names, -1) : -1;
    if (x < 0 || rm < 0 || rv < 0 || (add && r < 0) || (p->n_outputs != 1 && p->n_outputs != 3)) {
        snprintf(why, wl,
                 "op_type %s wants inputs x, running_mean, running_var%s and 1 or 3 "
                 "outputs",
                 op, add ? ", residual" : "");
        return 0;
    }
    m->input_of_role[BN_X] = x, m->input_of_role[BN_RM] = rm, m->input_of_role[BN_RV] = rv;
    m->input_of_role[BN_W] = chn_input_named(p, CHN_W_NAMES, 1);
    m->input_of_role[BN_B] = chn_input_named(p, CHN_B_NAMES, 1);
    m->input_of_role[BN_R] = r;
    m->input_of_role[BN_EPS] = chn_scalar_named(p, CHN_EPS_NAMES);
    m->output_of_role[BN_Y] = 0;
    if (p->n_outputs == 3)
        m->output_of_role[BN_SMEAN] = 1, m->output_of_role[BN_SINV] = 2;
    kiln_match_set(m, "eps", chn_eps_from_reference(p, 1e-5));
    kiln_match_set(m, "relu", relu);
    snprintf(m->how, sizeof m->how, "op_type %s, eps %s", op,
             m->input_of_role[BN_EPS] >= 0 ? "from input" : "from the reference or 1e-5");
    return 1;
}

static int bn_match(const kiln_problem *p, kiln_match *m, char *why, size_t wl) {
    kiln_opchain *c = NULL;
    int ok;
    if (!kiln_opchain_described(p))
        ok = bn_from_op_type(p, m, why, wl);
    else
        ok = chn_chain_read(p, &c, why, wl) && bn_from_chain(c, m, why, wl);
    if (ok)
        ok = bn_validate(p, m, why, wl);
    if (ok) {
        const int nd = p->inputs[m->input_of_role[BN_X]].ndim;
        const int cl = nd > 2 && kiln_match_get(m, "cpos", 1) == nd - 1;
        snprintf(m->variant, sizeof m->variant, "batch_norm%s%s%s%s",
                 m->input_of_role[BN_R] >= 0 ? "_add" : "",
                 kiln_match_get(m, "relu", 0) ? "_relu" : "", cl ? "_channels_last" : "",
                 m->output_of_role[BN_SMEAN] >= 0 ? "_stats" : "");
    }
    kiln_opchain_free(c);
    return ok;
}

/* The vector width of a point: the widest (up to 16 bytes of x) its mode can use everywhere: any
 * in mode 0 (vectors may straddle channels), one dividing the row in mode 1, one dividing C in
 * mode 2. Never slower for a stream, so not searched. */
static int64_t bn_vec(const kiln_problem *p, const kiln_match *m, int64_t mode) {
    const int64_t sx = (int64_t)kiln_dtype_size(p->inputs[m->input_of_role[BN_X]].dtype);
    int64_t vec = 16 / sx > 8 ? 8 : 16 / sx;
    for (int w = 0; w < p->n_workloads && mode != 0; w++) {
        bn_dims d;
        bn_dims_of(p, m, &p->workloads[w], &d);
        while (vec > 1 && (mode == 1 ? d.inner : d.C) % vec)
            vec /= 2;
    }
    return vec;
}

static const char *bn_check(const kiln_problem *p, const kiln_match *m, const int64_t *pt) {
    const int64_t mode = pt[BP_MODE], threads = pt[BP_THREADS], grid = pt[BP_GRID];
    const int64_t vec = bn_vec(p, m, mode), tile = threads * vec * pt[BP_UNROLL];
    if (mode == 1 && grid != 0)
        return "BN_GRID: mode 1's grid is its rows";
    int64_t max_inner = 0, max_tiles = 0;
    for (int w = 0; w < p->n_workloads; w++) {
        bn_dims d;
        bn_dims_of(p, m, &p->workloads[w], &d);
        if (d.total >= (INT64_C(1) << 31))
            return "a tensor of 2^31 elements or more (32-bit offsets)";
        max_inner = d.inner > max_inner ? d.inner : max_inner;
        max_tiles = chn_cdiv(d.total, tile) > max_tiles ? chn_cdiv(d.total, tile) : max_tiles;
        if (mode == 0 && d.C * 8 > CHN_MAX_SMEM)
            return "BN_MODE 0: the channel table would need over 200 KiB of shared memory";
        if (mode == 1 && chn_cdiv(d.inner, tile) > 65535)
            return "BN_MODE 1: over 65535 chunks per row";
        if (mode == 2 && d.inner != 1)
            return "BN_MODE 2 is for channels-last tensors (the channel innermost)";
        if (mode == 2 && (threads * vec) % d.C)
            return xasprintf("!BN_MODE 2: C=%lld does not divide BN_THREADS*BN_VEC=%lld "
                             "(workload %d)",
                             (long long)d.C, (long long)(threads * vec), w);
    }
    if (mode == 1 && tile > 2 * max_inner && pt[BP_UNROLL] > 1)
        return "BN_MODE 1: a CTA's chunk is over twice the longest row";
    if (grid > 1 && max_tiles <= CHN_SMS * (grid / 2))
        return "BN_GRID: a persistent grid half the size already covers every tile";
    if (grid == 1 && max_tiles <= CHN_SMS)
        return "BN_GRID: one CTA per tile fits one wave (that is BN_GRID 0)";
    return NULL;
}

static void bn_variant_defines(kiln_strbuf *b, const kiln_problem *p, const kiln_match *m,
                               int cuda) {
    static const char *const roles[] = {"X", "W", "B", "RM", "RV", "R"};
    for (int r = BN_X; r <= BN_R; r++) {
        int i = m->input_of_role[r];
        kiln_dtype t = i >= 0 ? p->inputs[i].dtype : KILN_F32;
        if (cuda)
            kiln_strbuf_printf(b, "#define BN_T%s %s\n", roles[r],
                               kiln_dtype_kernel_type(t, 1).type);
        else
            chn_cpu_type_defines(b, "BN", roles[r], t, 0);
    }
    int so = m->output_of_role[BN_SMEAN];
    kiln_dtype ty = p->outputs[m->output_of_role[BN_Y]].dtype;
    kiln_dtype ts = so >= 0 ? p->outputs[so].dtype : KILN_F32;
    if (cuda) {
        kiln_strbuf_printf(b, "#define BN_TY %s\n#define BN_TS %s\n",
                           kiln_dtype_kernel_type(ty, 1).type, kiln_dtype_kernel_type(ts, 1).type);
    } else {
        chn_cpu_type_defines(b, "BN", "Y", ty, 1);
        chn_cpu_type_defines(b, "BN", "S", ts, 1);
    }
    kiln_strbuf_printf(
        b,
        "#define BN_HAS_W %d\n#define BN_HAS_B %d\n#define BN_ADD %d\n#define BN_RELU %d\n"
        "#define BN_SAVE %d\n#define BN_MID %d\n",
        m->input_of_role[BN_W] >= 0, m->input_of_role[BN_B] >= 0, m->input_of_role[BN_R] >= 0,
        (int)kiln_match_get(m, "relu", 0), so >= 0,
        chn_mid_code((kiln_dtype)kiln_match_get(m, "mid", KILN_F32)));
}

/* x, w, b, rm, rv, r, y, save_mean, save_invstd, outer, C, inner, eps */
static void bn_body_args(kiln_strbuf *b, const kiln_problem *p, const kiln_match *m, int cuda) {
    static const char *const types[] = {"const BN_TX *",  "const BN_TW *",  "const BN_TB *",
                                        "const BN_TRM *", "const BN_TRV *", "const BN_TR *"};
    for (int r = BN_X; r <= BN_R; r++) {
        chn_ptr_arg(b, p, m->input_of_role[r], -1, types[r]);
        kiln_strbuf_printf(b, ", ");
    }
    chn_ptr_arg(b, p, -1, m->output_of_role[BN_Y], "BN_TY *");
    kiln_strbuf_printf(b, ", ");
    chn_ptr_arg(b, p, -1, m->output_of_role[BN_SMEAN], "BN_TS *");
    kiln_strbuf_printf(b, ", ");
    chn_ptr_arg(b, p, -1, m->output_of_role[BN_SINV], "BN_TS *");
    const char *ll = cuda ? "long long" : "int64_t";
    kiln_strbuf_printf(b, ", (%s)%s, (%s)%s, (%s)%s, ", ll, m->rows_expr, ll, m->extra_expr[0], ll,
                       m->cols_expr);
    if (m->input_of_role[BN_EPS] >= 0)
        kiln_strbuf_printf(b, "(float)%s", p->inputs[m->input_of_role[BN_EPS]].name);
    else
        kiln_strbuf_printf(b, "(float)%.17g", kiln_match_get(m, "eps", 1e-5));
}

static char *bn_emit(const kiln_problem *p, const kiln_match *m, const int64_t *pt, int cuda) {
    const kiln_family *f = &kiln_family_batchnorm;
    kiln_strbuf b = {0};
    if (!cuda) {
        bn_variant_defines(&b, p, m, 0);
        char *proto = kiln_family_prototype(p, 0, 0, NULL, "bn_cpu");
        kiln_strbuf_printf(&b, "// kiln: launch bn_cpu\n%s\n%s {\n    bn_cpu_run(",
                           kiln_family_template("batchnorm_cpu.c"), proto);
        free(proto);
        bn_body_args(&b, p, m, 0);
        kiln_strbuf_printf(&b, ");\n}\n");
        return chn_with_banner(f, m, pt, 0, &b);
    }
    const int64_t mode = pt[BP_MODE], threads = pt[BP_THREADS], grid = pt[BP_GRID];
    const int64_t vec = bn_vec(p, m, mode), tile = threads * vec * pt[BP_UNROLL];
    char *defs = kiln_family_defines(f, pt);
    kiln_strbuf_printf(&b, "%s#define BN_VEC %lld\n", defs, (long long)vec);
    free(defs);
    bn_variant_defines(&b, p, m, 1);
    const char *outer = m->rows_expr, *C = m->extra_expr[0], *inner = m->cols_expr;
    char tiles[900];
    snprintf(tiles, sizeof tiles, "ceil_div(%s*%s*%s,%lld)", outer, C, inner, (long long)tile);
    if (mode == 1)
        kiln_strbuf_printf(&b,
                           "// kiln: launch bn_main grid=(%s*%s,ceil_div(%s,%lld)) block=%lld\n",
                           outer, C, inner, (long long)tile, (long long)threads);
    else if (grid == 0)
        kiln_strbuf_printf(&b, "// kiln: launch bn_main grid=%s block=%lld", tiles,
                           (long long)threads);
    else
        kiln_strbuf_printf(&b, "// kiln: launch bn_main grid=min(%s,%lld) block=%lld", tiles,
                           (long long)(CHN_SMS * grid), (long long)threads);
    if (mode == 0)
        kiln_strbuf_printf(&b, " smem=%s*8\n", C);
    else if (mode == 2)
        kiln_strbuf_printf(&b, "\n");
    kiln_strbuf_printf(&b, "%s\n", kiln_family_template("batchnorm.cu"));
    char *proto = kiln_family_prototype(p, 0, 1, "BN_THREADS", "bn_main");
    kiln_strbuf_printf(&b, "%s {\n    bn_run(", proto);
    free(proto);
    bn_body_args(&b, p, m, 1);
    kiln_strbuf_printf(&b, ");\n}\n");
    return chn_with_banner(f, m, pt, 1, &b);
}

const kiln_family kiln_family_batchnorm = {
    .name = "batchnorm",
    .summary = "inference batch norm, NCHW or channels-last, fused residual add and ReLU",
    .n_params = 4,
    .params =
        {
            {"BN_MODE",
             3,
             {0, 1, 2},
             "0 flat with a channel table in smem; 1 a CTA per row chunk (NCHW); 2 channels-last "
             "with each thread's coefficients in registers"},
            {"BN_THREADS", 4, {128, 256, 512, 1024}, "threads per CTA"},
            {"BN_UNROLL", 4, {1, 2, 4, 8}, "vectors per thread per tile: its loads in flight"},
            {"BN_GRID",
             5,
             {0, 1, 2, 4, 8},
             "0: a CTA per tile; k: at most k*132 CTAs striding over the tiles"},
        },
    .match = bn_match,
    .check = bn_check,
    .emit = bn_emit,
    .min_bytes = chn_min_bytes,
    .tolerance = chn_tolerance,
};
