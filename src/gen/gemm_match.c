/* gemm_match.c: a captured GEMM and the epilogue chain after it, read once for both GEMM families
 * (gemm.h); the facts a match holds, and the cpu candidate they share. */
#include "gemm.h"

#include <string.h>

/* The size of dim d of t, when it is fixed for every workload (a literal or a const axis). */
static int fixed_dim(const kiln_problem *p, const kiln_tensor_spec *t, int d, int64_t *out) {
    if (t->axis[d] < 0) {
        *out = t->literal[d];
        return 1;
    }
    const kiln_axis *a = &p->axes[t->axis[d]];
    *out = a->value;
    return a->kind == KILN_AXIS_CONST;
}

/* One operand as stored: rows × cols of a matrix (the last two dims, leading ones folded into
 * batch or into the rows), whether it is stored transposed relative to the captured call. */
typedef struct {
    int64_t batch, rows, cols;
    int transposed;
} operand;

/* Reads input t (2-D or 3-D, fixed sizes, dense or a captured transpose of the last two dims).
 * fold: leading dims are rows (linear's input), else a 3-D operand is a batch. */
static int read_operand(const kiln_problem *p, int in, int fold, operand *o, char *why,
                        size_t why_len) {
    const kiln_tensor_spec *t = &p->inputs[in];
    int64_t s[KILN_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++)
        if (!fixed_dim(p, t, d, &s[d])) {
            kiln_family_fmt(
                why, why_len,
                "a GEMM family plans one fixed shape: input '%s' has a size that varies "
                "between workloads",
                t->name);
            return 0;
        }
    if (t->ndim < 2) {
        kiln_family_fmt(why, why_len, "input '%s' is %d-D, not a matrix or a batch of them",
                        t->name, t->ndim);
        return 0;
    }
    if (t->layout.expanded) {
        kiln_family_fmt(why, why_len, "input '%s' is broadcast (a stride 0): not mapped yet",
                        t->name);
        return 0;
    }
    int nd = t->ndim;
    o->transposed = 0;
    if (t->layout.permuted) {
        for (int d = 0; d < nd - 2; d++)
            if (t->layout.perm[d] != d) {
                kiln_family_fmt(why, why_len,
                                "input '%s' is permuted across its batch dims: the GEMM families "
                                "take a strided batch of matrices only",
                                t->name);
                return 0;
            }
        if (t->layout.perm[nd - 2] != nd - 1 || fold) {
            kiln_family_fmt(why, why_len,
                            "input '%s' is stored in an order the GEMM families cannot read",
                            t->name);
            return 0;
        }
        o->transposed = 1;
    }
    o->batch = 1;
    for (int d = 0; d < nd - 2; d++)
        o->batch *= s[d];
    o->rows = s[nd - 2];
    o->cols = s[nd - 1];
    if (fold) {
        o->rows *= o->batch;
        o->batch = 1;
    }
    return 1;
}

static int is_gemm_dtype(kiln_dtype t) {
    return t == KILN_BF16 || t == KILN_F16 || t == KILN_F32;
}

/* Input ib is one value of dtype t per output column (n of them): the bias the epilogue adds. */
static int bias_ok(const kiln_problem *p, int ib, int64_t n, kiln_dtype t, char *why,
                   size_t why_len) {
    const kiln_tensor_spec *bt = &p->inputs[ib];
    int64_t n0 = 0;
    if (bt->ndim == 1 && fixed_dim(p, bt, 0, &n0) && n0 == n && bt->dtype == t &&
        !bt->layout.expanded)
        return 1;
    kiln_family_fmt(why, why_len, "bias '%s' is not one %s value per output column (%lld)",
                    bt->name, kiln_dtype_name(t), (long long)n);
    return 0;
}

/* Elements of input i when its sizes are fixed (else -1). */
static int64_t fixed_numel(const kiln_problem *p, int i) {
    const kiln_tensor_spec *t = &p->inputs[i];
    int64_t n = 1, d0;
    for (int d = 0; d < t->ndim; d++) {
        if (!fixed_dim(p, t, d, &d0))
            return -1;
        n *= d0;
    }
    return n;
}

/* _scaled_mm's scales (inputs sa and sb, float32): one value each (1, per tensor) or one a row of
 * A ([M, 1]) and one a column of B ([1, N]) (2, per row); 0 with why written otherwise. */
static int scale_kind(const kiln_problem *p, int sa, int sb, int64_t M, int64_t N, char *why,
                      size_t why_len) {
    const kiln_tensor_spec *a = &p->inputs[sa], *b = &p->inputs[sb];
    const int64_t na = fixed_numel(p, sa), nb = fixed_numel(p, sb);
    if (a->dtype == KILN_F32 && b->dtype == KILN_F32 && !a->layout.expanded &&
        !b->layout.expanded) {
        if (na == 1 && nb == 1)
            return 1;
        int64_t d1 = 0;
        if (na == M && nb == N && a->ndim == 2 && b->ndim == 2 && fixed_dim(p, a, 1, &d1) &&
            d1 == 1 && fixed_dim(p, b, 0, &d1) && d1 == 1)
            return 2;
    }
    kiln_family_fmt(why, why_len,
                    "_scaled_mm's scales '%s' and '%s' are neither one float32 each (per tensor) "
                    "nor [M, 1] and [1, N] float32 (per row)",
                    a->name, b->name);
    return 0;
}

/* An int-list argument of op (index i or name) whose every value is v, or absent (its default, v).
 */
static int ints_all(const kiln_op *op, int i, const char *name, int64_t v) {
    const kiln_arg *a = kiln_op_arg(op, i, name);
    if (!a || a->kind == KILN_ARG_NONE)
        return 1;
    if (a->kind == KILN_ARG_NUM)
        return a->num == (double)v;
    if (a->kind != KILN_ARG_INTS)
        return 0;
    for (int k = 0; k < a->n_ints; k++)
        if (a->ints[k] != v)
            return 0;
    return 1;
}

/* Stored with the captured dims in the order perm (n of them). */
static int stored_as(const kiln_tensor_spec *t, const int *perm, int n) {
    if (t->ndim != n)
        return 0;
    for (int d = 0; d < n; d++)
        if ((t->layout.permuted ? t->layout.perm[d] : d) != perm[d])
            return 0;
    return !t->layout.expanded;
}

/* A 1x1 convolution (conv2d or convolution: stride 1, no padding, dilation 1, one group, not
 * transposed) of a dense input is a GEMM over its channels: channels-last ([N, H, W, Cin] in
 * memory) it is x [N·H·W, Cin] @ w [Cout, Cin]ᵀ, a linear, D channels-last too (the fact
 * "conv_cl"); NCHW it is, for each image, w [Cout, Cin] @ x [Cin, H·W], a batch with A shared. The
 * bias is a column's in the first form only. 1 with g and m filled; 0 with why written (or nothing
 * where the op is not a convolution: *is_conv 0). */
static int match_conv1x1(const kiln_problem *p, const kiln_op *op, kiln_lt_gemm *g, kiln_match *m,
                         char *why, size_t why_len, int *is_conv) {
    const int conv2d = kiln_op_is(op, "aten::conv2d.default");
    *is_conv = conv2d || kiln_op_is(op, "aten::convolution.default");
    if (!*is_conv)
        return 0;
    const kiln_arg *tr = conv2d ? NULL : kiln_op_arg(op, 6, "transposed");
    const int groups = (int)kiln_arg_num(kiln_op_arg(op, conv2d ? 6 : 8, "groups"), 1);
    int ix = kiln_arg_input(kiln_op_arg(op, 0, "input")),
        iw = kiln_arg_input(kiln_op_arg(op, 1, "weight"));
    const kiln_arg *bias_arg = kiln_op_arg(op, 2, "bias");
    int ibias = bias_arg && bias_arg->kind != KILN_ARG_NONE ? kiln_arg_input(bias_arg) : -1;
    if (ix < 0 || iw < 0 || (bias_arg && bias_arg->kind != KILN_ARG_NONE && ibias < 0)) {
        kiln_family_fmt(why, why_len, "%s reads a tensor that is not a problem input", op->aten);
        return 0;
    }
    const kiln_tensor_spec *x = &p->inputs[ix], *w = &p->inputs[iw], *o = &p->outputs[0];
    int64_t ws[4] = {0}, xs[4] = {0};
    int fixed = x->ndim == 4 && w->ndim == 4;
    for (int d = 0; fixed && d < 4; d++)
        fixed = fixed_dim(p, w, d, &ws[d]) && fixed_dim(p, x, d, &xs[d]);
    static const int ident[4] = {0, 1, 2, 3}, cl[4] = {0, 2, 3, 1};
    if (!fixed || (tr && kiln_arg_num(tr, 0) != 0) || groups != 1 ||
        !ints_all(op, 3, "stride", 1) || !ints_all(op, 4, "padding", 0) ||
        !ints_all(op, 5, "dilation", 1)) {
        kiln_family_fmt(why, why_len,
                        "%s: only a 2-D convolution with a 1x1 kernel, stride 1, no padding, "
                        "dilation 1 and one group is a GEMM the families map",
                        op->aten);
        return 0;
    }
    /* the weight [Cout, Cin, 1, 1] with Cin contiguous (any order of its size-1 dims) */
    const int w_ok = stored_as(w, ident, 4) || stored_as(w, cl, 4);
    const int channels_last = stored_as(x, cl, 4) && stored_as(o, cl, 4);
    const int nchw = stored_as(x, ident, 4) && stored_as(o, ident, 4);
    /* stored shapes: [N, H, W, C] channels-last, [N, C, H, W] otherwise; the weight's [Cout, Cin]
     */
    const int64_t cout = ws[0], cin = w->layout.permuted ? ws[3] : ws[1];
    const int64_t kh = w->layout.permuted ? ws[1] : ws[2], kw = w->layout.permuted ? ws[2] : ws[3];
    const int64_t n = xs[0], c = channels_last ? xs[3] : xs[1];
    const int64_t hw = channels_last ? xs[1] * xs[2] : xs[2] * xs[3];
    if (kh != 1 || kw != 1 || !w_ok || c != cin || !(channels_last || nchw)) {
        kiln_family_fmt(
            why, why_len,
            "%s: a %lldx%lld kernel, or input and output not both channels-last or both "
            "NCHW: not a GEMM the families map",
            op->aten, (long long)kh, (long long)kw);
        return 0;
    }
    /* float32: PyTorch runs convolutions on TF32 by default (cudnn.allow_tf32), which a float32
     * GEMM neither matches within float32's tolerance nor beats */
    const kiln_dtype t = x->dtype;
    if ((t != KILN_BF16 && t != KILN_F16) || w->dtype != t || o->dtype != t) {
        kiln_family_fmt(why, why_len,
                        "%s in %s: the families map 16-bit convolutions (float32 ones run on TF32 "
                        "in cuDNN by PyTorch's default)",
                        op->aten, kiln_dtype_name(t));
        return 0;
    }
    if (ibias >= 0 && (!channels_last || !bias_ok(p, ibias, cout, t, why, why_len))) {
        if (!channels_last)
            kiln_family_fmt(why, why_len,
                            "%s of an NCHW input with a bias: the bias is a row's of the GEMM, "
                            "not mapped",
                            op->aten);
        return 0;
    }
    *g = (kiln_lt_gemm){
        .k = cin, .batch = 1, .a_type = t, .b_type = t, .d_type = t, .lda = cin, .bias_type = t};
    if (channels_last) { /* x [N·H·W, Cin] @ w [Cout, Cin]ᵀ */
        g->m = n * hw, g->n = cout, g->trans_b = 1, g->ldb = cin, g->ldd = cout;
    } else { /* per image: w [Cout, Cin] @ x [Cin, H·W], the weight shared by the batch */
        g->m = cout, g->n = hw, g->batch = n, g->ldb = g->ldd = hw;
        g->stride_b = cin * hw, g->stride_d = cout * hw;
    }
    g->epilogue = ibias >= 0 ? KILN_LT_EPI_BIAS : KILN_LT_EPI_NONE;
    m->input_of_role[KILN_GEMM_A] = channels_last ? ix : iw;
    m->input_of_role[KILN_GEMM_B] = channels_last ? iw : ix;
    m->input_of_role[KILN_GEMM_BIAS] = ibias;
    m->output_of_role[0] = 0;
    kiln_match_set(m, "conv_cl", channels_last);
    kiln_match_set(m, "scale", 0);
    kiln_family_fmt(
        m->how, sizeof m->how, "%s: a 1x1 convolution of [%lld, %lld, %lld] %s as %s, %s", op->aten,
        (long long)n, (long long)cin, (long long)hw, channels_last ? "channels-last" : "NCHW",
        channels_last ? "x [N·H·W, Cin] @ w [Cout, Cin]ᵀ"
                      : "w [Cout, Cin] @ x [Cin, H·W] per image",
        kiln_dtype_name(t));
    return 1;
}

/* Fills g and m from a captured GEMM op whose tensors are problem inputs. torch._scaled_mm (fp8 A
 * [M, K] and B [K, N] stored [N, K], one float32 scale each or one a row and a column, D in
 * out_dtype) sets the fact "scale" (1 per tensor, 2 per row) and "fast_accum" (its use_fast_accum:
 * whether the products may be summed in the tensor cores' own precision, as cuBLAS then does). */
static int match_op(const kiln_problem *p, const kiln_op *op, kiln_lt_gemm *g, kiln_match *m,
                    char *why, size_t why_len) {
    int linear = kiln_op_is(op, "aten::linear.default");
    int addmm = kiln_op_is(op, "aten::addmm.default");
    int bmm = kiln_op_is(op, "aten::bmm.default");
    int scaled = kiln_op_is(op, "aten::_scaled_mm.default");
    int mm = kiln_op_is(op, "aten::mm.default") || kiln_op_is(op, "aten::matmul.default") || scaled;
    if (!linear && !addmm && !bmm && !mm) {
        kiln_family_fmt(why, why_len,
                        "%s is not one GEMM (linear, mm, matmul, bmm, addmm without scaling, "
                        "_scaled_mm)",
                        op->aten);
        return 0;
    }
    int ia = kiln_arg_input(kiln_op_arg(op, addmm ? 1 : 0, addmm ? "mat1" : NULL));
    int ib = kiln_arg_input(kiln_op_arg(op, addmm ? 2 : 1, NULL));
    const kiln_arg *bias_arg = linear   ? kiln_op_arg(op, 2, "bias")
                               : addmm  ? kiln_op_arg(op, 0, "self")
                               : scaled ? kiln_op_arg(op, 4, "bias")
                                        : NULL;
    int ibias = bias_arg && bias_arg->kind != KILN_ARG_NONE ? kiln_arg_input(bias_arg) : -1;
    if (ia < 0 || ib < 0 || (bias_arg && bias_arg->kind != KILN_ARG_NONE && ibias < 0)) {
        kiln_family_fmt(why, why_len, "%s reads a tensor that is not a problem input", op->aten);
        return 0;
    }
    if (addmm && (kiln_arg_num(kiln_op_arg(op, 3, "beta"), 1) != 1 ||
                  kiln_arg_num(kiln_op_arg(op, 4, "alpha"), 1) != 1)) {
        kiln_family_fmt(why, why_len, "addmm with beta or alpha other than 1: not mapped");
        return 0;
    }
    operand a, b;
    int a_nd = p->inputs[ia].ndim, b_nd = p->inputs[ib].ndim;
    /* linear and matmul of an N-D input by a matrix fold the input's leading dims into rows */
    int fold = linear || (mm && a_nd > 2 && b_nd == 2);
    if (!read_operand(p, ia, fold, &a, why, why_len) || !read_operand(p, ib, 0, &b, why, why_len))
        return 0;
    if ((bmm && (a_nd != 3 || b_nd != 3)) || (addmm && (a_nd != 2 || b_nd != 2)) ||
        (linear && b_nd != 2) || (mm && !fold && a_nd != b_nd)) {
        kiln_family_fmt(why, why_len, "%s of %d-D by %d-D: not a layout the GEMM families map",
                        op->aten, a_nd, b_nd);
        return 0;
    }
    /* matmul of N-D by N-D: its leading dims are one batch, stored in order (read_operand), when
     * they are the same dims (not broadcast against each other) */
    for (int d = 0; mm && !fold && d < a_nd - 2; d++) {
        int64_t da = 0, db = 0;
        fixed_dim(p, &p->inputs[ia], d, &da);
        fixed_dim(p, &p->inputs[ib], d, &db);
        if (da != db) {
            kiln_family_fmt(why, why_len,
                            "%s's batch dims differ (dim %d: %lld, %lld): broadcasting is not "
                            "mapped",
                            op->aten, d, (long long)da, (long long)db);
            return 0;
        }
    }
    if (a.batch != b.batch) {
        kiln_family_fmt(why, why_len, "batches differ (%lld, %lld): broadcasting is not mapped",
                        (long long)a.batch, (long long)b.batch);
        return 0;
    }
    /* captured sizes: A is M×K, B is K×N (linear: the weight is N×K, read transposed) */
    int64_t M = a.transposed ? a.cols : a.rows, K = a.transposed ? a.rows : a.cols;
    int tb = linear ? !b.transposed : b.transposed;
    int64_t N = tb ? b.rows : b.cols, Kb = tb ? b.cols : b.rows;
    if (Kb != K) {
        kiln_family_fmt(why, why_len, "inner sizes differ (%lld, %lld)", (long long)K,
                        (long long)Kb);
        return 0;
    }
    kiln_dtype ta = p->inputs[ia].dtype, tyb = p->inputs[ib].dtype, td = ta;
    int scale = 0;
    if (scaled) {
        const kiln_arg *od = kiln_op_arg(op, 6, "out_dtype"),
                       *sr = kiln_op_arg(op, 5, "scale_result");
        int isa = kiln_arg_input(kiln_op_arg(op, 2, "scale_a"));
        int isb = kiln_arg_input(kiln_op_arg(op, 3, "scale_b"));
        if (!kiln_dtype_is_fp8(ta) || !kiln_dtype_is_fp8(tyb) || a_nd != 2 || b_nd != 2 ||
            a.transposed || !b.transposed) {
            kiln_family_fmt(why, why_len,
                            "_scaled_mm of %s [%lld x %lld] by %s: the families take fp8 A [M, K] "
                            "and B [K, N] stored [N, K] (x @ wᵀ)",
                            kiln_dtype_name(ta), (long long)M, (long long)K, kiln_dtype_name(tyb));
            return 0;
        }
        if (sr && sr->kind != KILN_ARG_NONE) {
            kiln_family_fmt(why, why_len, "_scaled_mm with a scale_result: not mapped");
            return 0;
        }
        td = od && od->kind == KILN_ARG_DTYPE ? od->dtype : ta;
        if (!is_gemm_dtype(td)) {
            kiln_family_fmt(why, why_len,
                            "_scaled_mm writing %s: the families write bfloat16, float16 or "
                            "float32",
                            kiln_dtype_name(td));
            return 0;
        }
        if (isa < 0 || isb < 0) {
            kiln_family_fmt(why, why_len, "_scaled_mm's scales are not problem inputs");
            return 0;
        }
        if (!(scale = scale_kind(p, isa, isb, M, N, why, why_len)))
            return 0;
        m->input_of_role[KILN_GEMM_SA] = isa;
        m->input_of_role[KILN_GEMM_SB] = isb;
        kiln_match_set(m, "fast_accum", kiln_arg_num(kiln_op_arg(op, 7, "use_fast_accum"), 0) != 0);
    } else if (!is_gemm_dtype(ta) || tyb != ta) {
        kiln_family_fmt(why, why_len,
                        "dtypes %s @ %s: the family takes one of bfloat16, float16, float32 for "
                        "both (fp8 through _scaled_mm)",
                        kiln_dtype_name(ta), kiln_dtype_name(tyb));
        return 0;
    }
    kiln_match_set(m, "scale", scale);
    /* the bias is in D's dtype where the inputs are fp8 (_scaled_mm's), else in theirs */
    if (ibias >= 0 && !bias_ok(p, ibias, N, td, why, why_len))
        return 0;
    *g = (kiln_lt_gemm){.m = M,
                        .n = N,
                        .k = K,
                        .batch = a.batch,
                        .stride_a = a.batch > 1 ? M * K : 0,
                        .stride_b = b.batch > 1 ? K * N : 0,
                        .stride_d = a.batch > 1 ? M * N : 0,
                        .a_type = ta,
                        .b_type = tyb,
                        .d_type = td,
                        .trans_a = a.transposed,
                        .trans_b = tb,
                        .lda = a.cols,
                        .ldb = b.cols,
                        .ldd = N,
                        .epilogue = ibias >= 0 ? KILN_LT_EPI_BIAS : KILN_LT_EPI_NONE,
                        .bias_type = td};
    m->input_of_role[KILN_GEMM_A] = ia;
    m->input_of_role[KILN_GEMM_B] = ib;
    m->input_of_role[KILN_GEMM_BIAS] = ibias;
    m->output_of_role[0] = 0;
    kiln_family_fmt(m->how, sizeof m->how, "%s: %lld x [%lld x %lld] @ [%lld x %lld]%s%s, %s%s%s%s",
                    op->aten, (long long)a.batch, (long long)M, (long long)K, (long long)K,
                    (long long)N, g->trans_a ? " (A transposed)" : "",
                    g->trans_b ? " (B stored [N, K])" : "", kiln_dtype_name(ta),
                    tyb != ta ? " by " : "", tyb != ta ? kiln_dtype_name(tyb) : "",
                    scale == 2   ? ", scaled per row of A and column of B"
                    : scale == 1 ? ", scaled per tensor"
                                 : "");
    return 1;
}

/* The epilogue chain after the GEMM (ops 1.. of c), each op reading the previous one's result:
 * a bias add (when the GEMM has none, before the activation), ReLU or GELU (one), then a cast
 * (last), applied to the fp32 accumulator and rounded once to the cast's dtype. GELU's erf form
 * is matched too (the "gelu_erf" fact): cuBLASLt runs its tanh form, and whether that is within
 * the problem's tolerance is the gate's proof to make, not the matcher's assumption. Updates g's
 * epilogue and d_type, m's bias role and its "gelu_erf" fact. */
static int match_epilogue(const kiln_problem *p, const kiln_opchain *c, kiln_lt_gemm *g,
                          kiln_match *m, char *why, size_t why_len) {
    int bias = m->input_of_role[KILN_GEMM_BIAS] >= 0, act = 0, erf = 0, cast = 0;
    for (int i = 1; i < c->n_ops; i++) {
        const kiln_op *op = &c->ops[i];
        const kiln_arg *x = kiln_op_arg(op, 0, "self");
        int add = kiln_op_is(op, "aten::add.Tensor");
        int relu = kiln_op_is(op, "aten::relu.default");
        int gelu = kiln_op_is(op, "aten::gelu.default");
        int to = kiln_op_is(op, "aten::to.dtype") || kiln_op_is(op, "aten::_to_copy.default");
        const kiln_arg *other = add ? kiln_op_arg(op, 1, "other") : NULL;
        if (add && other && kiln_arg_is_result(other, i - 1, 0)) { /* bias + gemm */
            const kiln_arg *t = x;
            x = other;
            other = t;
        }
        if (cast || !x || !kiln_arg_is_result(x, i - 1, 0) || !(add || relu || gelu || to)) {
            kiln_family_fmt(
                why, why_len,
                "%s after the GEMM is not an epilogue the GEMM families fuse (one bias add, "
                "then ReLU or GELU, then a cast, each reading the previous result)",
                op->aten);
            return 0;
        }
        if (add) {
            int ib = kiln_arg_input(other);
            if (bias || act || ib < 0 || kiln_arg_num(kiln_op_arg(op, 2, "alpha"), 1) != 1) {
                kiln_family_fmt(why, why_len,
                                "%s: the epilogue adds one bias (an input, alpha 1) before the "
                                "activation",
                                op->aten);
                return 0;
            }
            if (!bias_ok(p, ib, g->n, g->bias_type, why, why_len))
                return 0;
            m->input_of_role[KILN_GEMM_BIAS] = ib;
            bias = 1;
        } else if (relu || gelu) {
            const kiln_arg *ap = gelu ? kiln_op_arg(op, 1, "approximate") : NULL;
            int tanh_form = ap && ap->kind == KILN_ARG_OTHER && !strcmp(ap->text, "tanh");
            if (act ||
                (ap && ap->kind == KILN_ARG_OTHER && !tanh_form && strcmp(ap->text, "none"))) {
                kiln_family_fmt(why, why_len,
                                "%s: the epilogue applies one activation, ReLU or GELU", op->aten);
                return 0;
            }
            act = relu ? 1 : 2;
            erf = gelu && !tanh_form;
        } else {
            const kiln_arg *dt =
                kiln_op_arg(op, kiln_op_is(op, "aten::to.dtype") ? 1 : -1, "dtype");
            if (!dt || dt->kind != KILN_ARG_DTYPE || !is_gemm_dtype(dt->dtype)) {
                kiln_family_fmt(why, why_len, "%s: a cast to bfloat16, float16 or float32 only",
                                op->aten);
                return 0;
            }
            g->d_type = dt->dtype;
            cast = 1;
        }
    }
    static const kiln_lt_epilogue epi[2][3] = {
        {KILN_LT_EPI_NONE, KILN_LT_EPI_RELU, KILN_LT_EPI_GELU},
        {KILN_LT_EPI_BIAS, KILN_LT_EPI_BIAS_RELU, KILN_LT_EPI_BIAS_GELU}};
    g->epilogue = epi[bias][act];
    kiln_match_set(m, "gelu_erf", erf);
    return 1;
}

/* Op i of c is a linear without bias. */
static int plain_linear(const kiln_opchain *c, int i) {
    const kiln_arg *bias = kiln_op_arg(&c->ops[i], 2, "bias");
    return kiln_op_is(&c->ops[i], "aten::linear.default") && (!bias || bias->kind == KILN_ARG_NONE);
}

/* The activation code of a gated pair for op (kiln_gemm_gated), or 0. */
static int gate_act(const kiln_op *op) {
    if (kiln_op_is(op, "aten::silu.default"))
        return 4;
    if (!kiln_op_is(op, "aten::gelu.default"))
        return 0;
    const kiln_arg *ap = kiln_op_arg(op, 1, "approximate");
    if (!ap || ap->kind != KILN_ARG_OTHER || !strcmp(ap->text, "none"))
        return 3;
    return strcmp(ap->text, "tanh") ? 0 : 2;
}

/* A gated pair (kiln_gemm_gated): four ops, two linears without bias of one input and one shape,
 * an activation reading the first one's result and a product of the activation's and the second's,
 * in any order the dependencies allow. 1 with g and m filled; 0 when c is not one (why says so
 * only where it is one but not a form mapped). */
static int match_gated(const kiln_problem *p, const kiln_opchain *c, kiln_lt_gemm *g, kiln_match *m,
                       char *why, size_t why_len, int *is_gated) {
    *is_gated = 0;
    if (c->n_ops != 4)
        return 0;
    int lin[2], n_lin = 0, act = -1, mul = -1;
    for (int i = 0; i < 4; i++) {
        if (kiln_op_is(&c->ops[i], "aten::linear.default") && n_lin < 2)
            lin[n_lin++] = i;
        else if (gate_act(&c->ops[i]))
            act = i;
        else if (kiln_op_is(&c->ops[i], "aten::mul.Tensor"))
            mul = i;
    }
    if (n_lin != 2 || act < 0 || mul < 0)
        return 0;
    const kiln_arg *x = kiln_op_arg(&c->ops[act], 0, "self");
    int gate = x && kiln_arg_is_result(x, lin[0], 0)   ? lin[0]
               : x && kiln_arg_is_result(x, lin[1], 0) ? lin[1]
                                                       : -1;
    int up = gate == lin[0] ? lin[1] : lin[0];
    const kiln_arg *l = kiln_op_arg(&c->ops[mul], 0, "self"),
                   *r = kiln_op_arg(&c->ops[mul], 1, "other");
    if (gate < 0 || !l || !r ||
        !((kiln_arg_is_result(l, act, 0) && kiln_arg_is_result(r, up, 0)) ||
          (kiln_arg_is_result(r, act, 0) && kiln_arg_is_result(l, up, 0))))
        return 0;
    *is_gated = 1;
    if (!plain_linear(c, gate) || !plain_linear(c, up)) {
        kiln_family_fmt(why, why_len, "a gated pair whose linears have a bias: not mapped yet");
        return 0;
    }
    kiln_lt_gemm g2;
    kiln_match m2 = *m;
    if (!match_op(p, &c->ops[gate], g, m, why, why_len) ||
        !match_op(p, &c->ops[up], &g2, &m2, why, why_len))
        return 0;
    if (m2.input_of_role[KILN_GEMM_A] != m->input_of_role[KILN_GEMM_A] || g2.m != g->m ||
        g2.n != g->n || g2.k != g->k || g2.batch != 1 || g->batch != 1 ||
        g2.trans_b != g->trans_b || g2.ldb != g->ldb) {
        kiln_family_fmt(why, why_len,
                        "a gated pair's two linears must read one input with weights of one "
                        "shape and layout");
        return 0;
    }
    m->input_of_role[KILN_GEMM_B2] = m2.input_of_role[KILN_GEMM_B];
    kiln_match_set(m, "gated", gate_act(&c->ops[act]));
    kiln_match_set(m, "gelu_erf", gate_act(&c->ops[act]) == 3);
    size_t len = strlen(m->how);
    kiln_family_fmt(m->how + len, sizeof m->how - len, ", gated: %s(x·%sᵀ) · (x·%sᵀ)",
                    gate_act(&c->ops[act]) == 4 ? "silu" : "gelu",
                    p->inputs[m->input_of_role[KILN_GEMM_B]].name,
                    p->inputs[m->input_of_role[KILN_GEMM_B2]].name);
    return 1;
}

/* The GEMM m describes (match facts hold its fields). */
kiln_lt_gemm kiln_gemm_of(const kiln_match *m) {
    kiln_dtype t = (kiln_dtype)kiln_match_get(m, "dtype", 0);
    kiln_dtype td = (kiln_dtype)kiln_match_get(m, "d_dtype", t);
    kiln_dtype tb = (kiln_dtype)kiln_match_get(m, "b_dtype", t);
    kiln_dtype tbias = (kiln_dtype)kiln_match_get(m, "bias_dtype", t);
    return (kiln_lt_gemm){.m = (int64_t)kiln_match_get(m, "m", 1),
                          .n = (int64_t)kiln_match_get(m, "n", 1),
                          .k = (int64_t)kiln_match_get(m, "k", 1),
                          .batch = (int64_t)kiln_match_get(m, "batch", 1),
                          .stride_a = (int64_t)kiln_match_get(m, "stride_a", 0),
                          .stride_b = (int64_t)kiln_match_get(m, "stride_b", 0),
                          .stride_d = (int64_t)kiln_match_get(m, "stride_d", 0),
                          .a_type = t,
                          .b_type = tb,
                          .d_type = td,
                          .trans_a = (int)kiln_match_get(m, "trans_a", 0),
                          .trans_b = (int)kiln_match_get(m, "trans_b", 0),
                          .lda = (int64_t)kiln_match_get(m, "lda", 0),
                          .ldb = (int64_t)kiln_match_get(m, "ldb", 0),
                          .ldd = (int64_t)kiln_match_get(m, "ldd", 0),
                          .epilogue = (kiln_lt_epilogue)kiln_match_get(m, "epilogue", 0),
                          .bias_type = tbias,
                          .fast_accum = kiln_gemm_fast_accum(m)};
}

int kiln_gemm_match(const kiln_problem *p, kiln_match *m, char *why, size_t why_len) {
    memset(m, 0, sizeof *m);
    for (int i = 0; i < 8; i++)
        m->input_of_role[i] = -1;
    for (int i = 0; i < 4; i++)
        m->output_of_role[i] = -1;
    if (!kiln_opchain_described(p)) {
        kiln_family_fmt(why, why_len,
                        "no captured op chain (the GEMM families match captured GEMMs)");
        return 0;
    }
    kiln_opchain *c = NULL;
    kiln_err err;
    if (kiln_opchain_read(p, &c, &err) != KILN_OK) {
        kiln_family_fmt(why, why_len, "op chain: %s", err.msg);
        return 0;
    }
    int ok = 0, gated = 0, conv = 0;
    kiln_lt_gemm g;
    if (p->n_outputs != 1 || c->n_outputs != 1)
        kiln_family_fmt(why, why_len, "%d outputs: the family writes one, the GEMM's",
                        p->n_outputs);
    else if (!(ok = match_gated(p, c, &g, m, why, why_len, &gated)) && !gated &&
             !(ok = match_conv1x1(p, &c->ops[0], &g, m, why, why_len, &conv)) && !conv)
        ok = match_op(p, &c->ops[0], &g, m, why, why_len);
    if (ok && !gated)
        ok = match_epilogue(p, c, &g, m, why, why_len);
    if (ok &&
        (c->outputs[0].input >= 0 || c->outputs[0].op != c->n_ops - 1 || c->outputs[0].slot != 0)) {
        kiln_family_fmt(why, why_len, "the output is not the last op's result");
        ok = 0;
    }
    if (ok && p->outputs[0].dtype != g.d_type) {
        kiln_family_fmt(why, why_len, "the output is %s, the GEMM and its epilogue write %s",
                        kiln_dtype_name(p->outputs[0].dtype), kiln_dtype_name(g.d_type));
        ok = 0;
    }
    /* stored permuted: only a channels-last convolution's, whose memory is D's rows */
    if (ok && !kiln_match_get(m, "conv_cl", 0) &&
        (p->outputs[0].layout.permuted || p->outputs[0].layout.expanded)) {
        kiln_family_fmt(why, why_len, "the output is stored permuted: not mapped");
        ok = 0;
    }
    const char *gemm_name = ok ? c->ops[0].name : "";
    char name[64];
    kiln_family_fmt(name, sizeof name, "%s", gemm_name);
    kiln_opchain_free(c);
    if (!ok)
        return 0;
    kiln_match_set(m, "m", (double)g.m);
    kiln_match_set(m, "n", (double)g.n);
    kiln_match_set(m, "k", (double)g.k);
    kiln_match_set(m, "batch", (double)g.batch);
    kiln_match_set(m, "stride_a", (double)g.stride_a);
    kiln_match_set(m, "stride_b", (double)g.stride_b);
    kiln_match_set(m, "stride_d", (double)g.stride_d);
    kiln_match_set(m, "dtype", (double)g.a_type);
    kiln_match_set(m, "b_dtype", (double)g.b_type);
    kiln_match_set(m, "bias_dtype", (double)g.bias_type);
    kiln_match_set(m, "trans_a", g.trans_a);
    kiln_match_set(m, "trans_b", g.trans_b);
    kiln_match_set(m, "lda", (double)g.lda);
    kiln_match_set(m, "ldb", (double)g.ldb);
    kiln_match_set(m, "ldd", (double)g.ldd);
    kiln_match_set(m, "d_dtype", (double)g.d_type);
    kiln_match_set(m, "epilogue", (double)g.epilogue);
    int erf = kiln_match_get(m, "gelu_erf", 0) != 0;
    kiln_family_fmt(m->variant, sizeof m->variant, "%s%s%s%s%s%s", name,
                    kiln_gemm_scale(m) == 2 ? "_rowwise" : "",
                    gated                            ? "_gated"
                    : g.epilogue != KILN_LT_EPI_NONE ? "_"
                                                     : "",
                    gated                            ? (kiln_gemm_gated(m) == 4 ? "_silu" : "_gelu")
                    : g.epilogue != KILN_LT_EPI_NONE ? kiln_lt_epilogue_name(g.epilogue)
                                                     : "",
                    g.d_type != g.a_type ? "_to_" : "",
                    g.d_type != g.a_type ? kiln_dtype_name(g.d_type) : "");
    size_t len = strlen(m->how);
    kiln_family_fmt(m->how + len, sizeof m->how - len, "%s%s%s%s",
                    g.epilogue != KILN_LT_EPI_NONE ? ", epilogue " : "",
                    g.epilogue != KILN_LT_EPI_NONE ? kiln_lt_epilogue_name(g.epilogue) : "",
                    erf ? " (the captured GELU is erf's)" : "",
                    g.d_type == g.a_type ? ""
                    : kiln_gemm_scale(m) ? ", D in out_dtype"
                                         : ", written as the cast's dtype");
    return 1;
}

int kiln_gemm_gelu_erf(const kiln_match *m) {
    return kiln_match_get(m, "gelu_erf", 0) != 0;
}

int kiln_gemm_gated(const kiln_match *m) {
    return (int)kiln_match_get(m, "gated", 0);
}

int kiln_gemm_scale(const kiln_match *m) {
    return (int)kiln_match_get(m, "scale", 0);
}

int kiln_gemm_fast_accum(const kiln_match *m) {
    return kiln_match_get(m, "fast_accum", 0) != 0;
}

char *kiln_gemm_emit_cpu(const kiln_family *f, const kiln_problem *p, const kiln_match *m,
                         int exact_gelu) {
    kiln_lt_gemm g = kiln_gemm_of(m);
    const kiln_kernel_type t = kiln_dtype_kernel_type(g.a_type, 0);
    const kiln_kernel_type tb = kiln_dtype_kernel_type(g.b_type, 0);
    const kiln_kernel_type td = kiln_dtype_kernel_type(g.d_type, 0);
    const kiln_kernel_type tbias = kiln_dtype_kernel_type(g.bias_type, 0);
    const int scale = kiln_gemm_scale(m);
    const char *A = p->inputs[m->input_of_role[KILN_GEMM_A]].name;
    const char *B = p->inputs[m->input_of_role[KILN_GEMM_B]].name;
    const char *D = p->outputs[m->output_of_role[0]].name;
    int has_bias = kiln_lt_epilogue_has_bias(g.epilogue), gated = kiln_gemm_gated(m);
    const char *B2 = gated ? p->inputs[m->input_of_role[KILN_GEMM_B2]].name : NULL;
    kiln_strbuf b = {0};
    char *proto = kiln_family_prototype(p, 0, 0, NULL, "gemm_kernel");
    kiln_strbuf_printf(&b, "// cpu: the point does not apply\n");
    kiln_strbuf_printf(&b, "// kiln: launch gemm_kernel\n%s {\n", proto);
    free(proto);
    char ia[96], ib[96];
    kiln_family_fmt(ia, sizeof ia, g.trans_a ? "k * %lldLL + i" : "i * %lldLL + k",
                    (long long)g.lda);
    kiln_family_fmt(ib, sizeof ib, g.trans_b ? "j * %lldLL + k" : "k * %lldLL + j",
                    (long long)g.ldb);
    kiln_strbuf_printf(&b,
                       "    #pragma omp parallel for collapse(2)\n"
                       "    for (int64_t bt = 0; bt < %lldLL; bt++)\n"
                       "        for (int64_t i = 0; i < %lldLL; i++) {\n"
                       "            const %s *kiln_a = %s + bt * %lldLL;\n"
                       "            const %s *kiln_b = %s + bt * %lldLL;\n"
                       "            %s *kiln_d = %s + bt * %lldLL + i * %lldLL;\n"
                       "            for (int64_t j = 0; j < %lldLL; j++) {\n"
                       "                float acc = 0.0f%s;\n"
                       "                for (int64_t k = 0; k < %lldLL; k++) {\n"
                       "                    acc += %s(kiln_a[%s]) * %s(kiln_b[%s]);\n",
                       (long long)g.batch, (long long)g.m, t.type, A, (long long)g.stride_a,
                       tb.type, B, (long long)g.stride_b, td.type, D, (long long)g.stride_d,
                       (long long)g.ldd, (long long)g.n, gated ? ", acc2 = 0.0f" : "",
                       (long long)g.k, t.to_float, ia, tb.to_float, ib);
    if (gated) /* the second weight: the same layout and batch stride as the first */
        kiln_strbuf_printf(
            &b, "                    acc2 += %s(kiln_a[%s]) * %s(%s[bt * %lldLL + %s]);\n",
            t.to_float, ia, t.to_float, B2, (long long)g.stride_b, ib);
    kiln_strbuf_printf(&b, "                }\n");
    if (scale) /* _scaled_mm: D = sa · sb · A·B (+ bias) */
        kiln_strbuf_printf(&b, "                acc *= %s[%s] * %s[%s];\n",
                           p->inputs[m->input_of_role[KILN_GEMM_SA]].name, scale == 2 ? "i" : "0",
                           p->inputs[m->input_of_role[KILN_GEMM_SB]].name, scale == 2 ? "j" : "0");
    if (has_bias)
        kiln_strbuf_printf(&b, "                acc += %s(%s[j]);\n", tbias.to_float,
                           p->inputs[m->input_of_role[KILN_GEMM_BIAS]].name);
    if (g.epilogue == KILN_LT_EPI_RELU || g.epilogue == KILN_LT_EPI_BIAS_RELU)
        kiln_strbuf_printf(&b, "                acc = acc < 0.0f ? 0.0f : acc;\n");
    if (gated == 4)
        kiln_strbuf_printf(&b, "                acc = acc / (1.0f + expf(-acc)) * acc2;\n");
    else if (gated == 3)
        kiln_strbuf_printf(&b, "                acc = 0.5f * acc * (1.0f + erff(acc * "
                               "0.70710678118654752f)) * acc2;\n");
    else if (gated == 2)
        kiln_strbuf_printf(&b, "                acc = 0.5f * acc * (1.0f + tanhf(0.7978845608f * "
                               "(acc + 0.044715f * acc * acc * acc))) * acc2;\n");
    else if ((g.epilogue == KILN_LT_EPI_GELU || g.epilogue == KILN_LT_EPI_BIAS_GELU) &&
             exact_gelu && kiln_gemm_gelu_erf(m))
        kiln_strbuf_printf(&b, "                acc = 0.5f * acc * (1.0f + erff(acc * "
                               "0.70710678118654752f));\n");
    else if (g.epilogue == KILN_LT_EPI_GELU || g.epilogue == KILN_LT_EPI_BIAS_GELU)
        kiln_strbuf_printf(&b, "                acc = 0.5f * acc * (1.0f + tanhf(0.7978845608f * "
                               "(acc + 0.044715f * acc * acc * acc)));\n");
    kiln_strbuf_printf(&b,
                       "                kiln_d[j] = %s(acc);\n"
                       "            }\n"
                       "        }\n"
                       "}\n",
                       td.from_float);
    int64_t first[KILN_FAMILY_MAX_PARAMS] = {0};
    return kiln_family_source(f, m, first, b.s);
}

double kiln_gemm_min_bytes(const kiln_problem *p, const kiln_match *m, const kiln_workload *w) {
    (void)p;
    (void)w;
    kiln_lt_gemm g = kiln_gemm_of(m);
    double ea = (double)kiln_dtype_size(g.a_type), eb = (double)kiln_dtype_size(g.b_type);
    double batch_a = g.stride_a ? (double)g.batch : 1, batch_b = g.stride_b ? (double)g.batch : 1;
    double bytes = ea * (double)g.m * (double)g.k * batch_a +
                   eb * (double)g.k * (double)g.n * batch_b +
                   (double)kiln_dtype_size(g.d_type) * (double)g.m * (double)g.n * (double)g.batch;
    if (kiln_lt_epilogue_has_bias(g.epilogue))
        bytes += (double)kiln_dtype_size(g.bias_type) * (double)g.n;
    if (kiln_gemm_gated(m)) /* the second weight */
        bytes += eb * (double)g.k * (double)g.n * batch_b;
    if (kiln_gemm_scale(m)) /* float32 scales: one each, or a row's and a column's */
        bytes += 4.0 * (kiln_gemm_scale(m) == 2 ? (double)(g.m + g.n) : 2.0);
    return bytes;
}

double kiln_gemm_flops(const kiln_problem *p, const kiln_match *m, const kiln_workload *w) {
    (void)p;
    (void)w;
    kiln_lt_gemm g = kiln_gemm_of(m);
    return (kiln_gemm_gated(m) ? 4.0 : 2.0) * (double)g.m * (double)g.n * (double)g.k *
           (double)g.batch;
}
