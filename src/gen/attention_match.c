/* attention_match.c: recognises scaled-dot-product attention in a problem (attention.h): the eager
 * chain a model's attention module makes (matmul q·kᵀ, a scale, an additive mask, a softmax with
 * its casts, dropout with p = 0, matmul with v, and the views of grouped-query attention between
 * them), a captured SDPA call, or a hand-written problem named by op_type.
 *
 * The chain is walked once, each value carrying what it is (q, k, v, the mask, the scores, the
 * probabilities, the output) and whether its last two dims are swapped relative to the input it
 * views. Views (unsqueeze, expand, reshape, clone, transpose of the last two dims) do not move
 * data the kernel reads: the kernel indexes q, k and v in their stored layouts directly, with kv
 * head = q head / (q heads / kv heads), which is what repeat_kv's expand + reshape computes. The
 * shapes of the problem's tensors are then checked against [b, h, s, d] (the gate proves the rest).
 *
 * The mask kind. A band mask (causal, sliding window) lets the kernel skip key tiles that no query
 * of a block keeps. It is recognised from the structure capture records for a mask
 * (capture_stats.py: `"kiln": {"drawn": {NAME: {"structure": ...}}}` in workload.jsonl), or from a
 * problem's `"kiln": {"mask_structure": ...}` in the same form, or from the mask itself where every
 * workload stores it (a mask capture keeps whole); otherwise a mask is an arbitrary additive
 * tensor, which is always correct. Skipping is only allowed when every query row keeps at least one
 * key (a fully masked row is NaN or uniform in eager, whatever the tiles). A band whose kept values
 * are all 0 ("inside": 0 in the structure, or every stored mask's values) is exact: the 16-bit
 * CUDA kernels generate it and read no mask. */
#include "attention.h"

#include "../formats/safetensors.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

enum { R_NONE, R_Q, R_K, R_V, R_MASK, R_S, R_P, R_O };

typedef struct {
    int role;  /* R_* */
    int input; /* the problem input it views (q, k, v, mask), else -1 */
    int swap;  /* its last two dims are swapped relative to that input */
    int rank;  /* its dims (4 where the walk cannot tell) */
} att_val;

#define ATT_MAX_VALS (KILN_OPCHAIN_MAX_OPS + 1)

static int is_float(kiln_dtype t) {
    return t == KILN_F32 || t == KILN_BF16 || t == KILN_F16;
}

static int is_any(const kiln_op *op, const char *const *names) {
    for (int i = 0; names[i]; i++)
        if (kiln_op_is(op, names[i]))
            return 1;
    return 0;
}

static const char *const VIEWS[] = {
    "aten::unsqueeze.default",  "aten::expand.default",       "aten::reshape.default",
    "aten::view.default",       "aten::_unsafe_view.default", "aten::clone.default",
    "aten::contiguous.default", "aten::alias.default",        NULL};
static const char *const MATMULS[] = {"aten::matmul.default", "aten::bmm.default", NULL};
static const char *const CASTS[] = {"aten::_to_copy.default", "aten::to.dtype", NULL};
static const char *const SCALES[] = {"aten::mul.Tensor", "aten::mul.Scalar", "aten::div.Tensor",
                                     "aten::div.Scalar", NULL};

/* What a tensor argument is: an input starts as itself, an op's result as the walk recorded. */
static att_val val_of(const kiln_problem *p, const kiln_arg *a, const att_val *vals) {
    att_val none = {R_NONE, -1, 0, 4};
    if (!a || a->kind != KILN_ARG_TENSOR)
        return none;
    if (a->value.input >= 0) {
        att_val v = {R_NONE, a->value.input, 0, p->inputs[a->value.input].ndim};
        return v;
    }
    if (a->value.slot != 0)
        return none;
    return vals[a->value.op];
}

/* The rank of a view's result: the size it names (expand, reshape, view), one more (unsqueeze), or
 * its operand's. */
static int view_rank(const kiln_op *op, int rank) {
    if (kiln_op_is(op, "aten::unsqueeze.default"))
        return rank + 1;
    const kiln_arg *size =
        kiln_op_arg(op, 1, kiln_op_is(op, "aten::reshape.default") ? "shape" : "size");
    if (!kiln_op_is(op, "aten::clone.default") && size && size->kind == KILN_ARG_INTS)
        return size->n_ints;
    return rank;
}

/* Dim d of a rank-dim value, counted from the front. */
static double dim_index(double d, int rank) {
    return d < 0 ? d + rank : d;
}

/* A transpose of the last two dims of a rank-dim value (3: [b·h, s, d] as bmm reads it; 4: [b, h,
 * s, d]): 1, a permutation that keeps every dim: 0, anything else -1. */
static int swaps_last_two(const kiln_op *op, int rank) {
    if (kiln_op_is(op, "aten::transpose.int")) {
        double a = dim_index(kiln_arg_num(kiln_op_arg(op, 1, "dim0"), 99), rank),
               b = dim_index(kiln_arg_num(kiln_op_arg(op, 2, "dim1"), 99), rank);
        return (a == rank - 2 && b == rank - 1) || (a == rank - 1 && b == rank - 2) ? 1 : -1;
    }
    if (kiln_op_is(op, "aten::permute.default")) {
        const kiln_arg *d = kiln_op_arg(op, 1, "dims");
        if (!d || d->kind != KILN_ARG_INTS || d->n_ints != rank)
            return -1;
        for (int i = 0; i < rank - 2; i++)
            if (d->ints[i] != i)
                return -1;
        double last = dim_index((double)d->ints[rank - 2], rank);
        return last == rank - 2 ? 0 : last == rank - 1 ? 1 : -1;
    }
    return -1;
}

/* Stored dim j of t has stride 1: only dims of size 1 follow it (capture stores a broadcast view
 * such as repeat_kv's kᵀ with its size-1 dims last). */
static int innermost(const kiln_problem *p, const kiln_tensor_spec *t, int j) {
    for (int k = j + 1; k < t->ndim; k++) {
        const kiln_axis *ax = t->axis[k] >= 0 ? &p->axes[t->axis[k]] : NULL;
        if (ax ? ax->kind != KILN_AXIS_CONST || ax->value != 1 : t->literal[k] != 1)
            return 0;
    }
    return 1;
}

/* The (b, h, s, d) stored dims of tensor t read with logical order `order` (logical dims of the
 * captured tensor for b, h, s, d); the head dim innermost. */
static int dims_of(const kiln_problem *p, const kiln_tensor_spec *t, const int order[4],
                   att_operand *o, char *why, size_t wl) {
    if (t->ndim != 4 && t->ndim != 3) {
        snprintf(why, wl, "%s has %d dims (attention wants [b, h, s, d] or [b·h, s, d])", t->name,
                 t->ndim);
        return 0;
    }
    /* 3 dims: bmm's [b·h, s, d], read as [b·h, 1, s, d] (one head a batch entry) */
    const int three = t->ndim == 3;
    for (int l = 0; l < 4; l++) {
        o->pos[l] = -1;
        const int logical = !three ? order[l] : l == 0 ? 0 : l == 1 ? -1 : order[l] - 1;
        if (logical < 0)
            continue;
        for (int j = 0; j < t->ndim; j++)
            if (t->layout.perm[j] == logical)
                o->pos[l] = j;
        if (o->pos[l] < 0) {
            snprintf(why, wl, "layout of %s does not name every dim", t->name);
            return 0;
        }
    }
    if (!innermost(p, t, o->pos[3])) {
        snprintf(why, wl, "the head dim of %s is not innermost in memory", t->name);
        return 0;
    }
    return 1;
}

/* dims_of input i. */
static int operand_of(const kiln_problem *p, int i, const int order[4], att_operand *o, char *why,
                      size_t wl) {
    o->input = i;
    return dims_of(p, &p->inputs[i], order, o, why, wl);
}

/* The mask of scores of `rank` dims (4: [b, h, sq, skv]; 3: bmm's [b·h, sq, skv]). */
static int mask_operand(const kiln_problem *p, int i, int rank, att_operand *o, char *why,
                        size_t wl) {
    const kiln_tensor_spec *t = &p->inputs[i];
    o->input = i;
    if (t->ndim < 2 || t->ndim > rank) {
        snprintf(why, wl, "mask %s has %d dims (the scores %d)", t->name, t->ndim, rank);
        return 0;
    }
    /* logical dims right-aligned on the scores' dims; pos[3] is the key dim here */
    for (int l = 0; l < 4; l++) {
        int logical = rank == 4 ? l - (4 - t->ndim) : l == 1 ? -1 : l - (l > 1) - (3 - t->ndim);
        o->pos[l] = -1;
        for (int j = 0; logical >= 0 && j < t->ndim; j++)
            if (t->layout.perm[j] == logical)
                o->pos[l] = j;
    }
    if (o->pos[3] < 0) {
        snprintf(why, wl, "mask %s has no key dim", t->name);
        return 0;
    }
    /* a boolean mask (SDPA's: True takes part) reads as 0 where True and -inf where False */
    if (t->dtype != KILN_BOOL && !is_float(t->dtype)) {
        snprintf(why, wl, "mask %s is %s", t->name, kiln_dtype_name(t->dtype));
        return 0;
    }
    return 1;
}

/* ---- the eager chain ---- */

static int from_chain(const kiln_problem *p, const kiln_opchain *c, att_info *a, char *why,
                      size_t wl) {
    att_val vals[ATT_MAX_VALS];
    int q = -1, k = -1, v = -1, mask = -1, qs = 0, ks = 0, vs = 0, o_swap = 0;
    int saw_scale = 0, saw_mask = 0, saw_softmax = 0, saw_where = 0, o_op = -1;
    int s_rank = 4, fused = 0; /* the scores' dims; q·kᵀ by baddbmm (scaled before its rounding) */
    kiln_dtype s_dtype = KILN_DTYPE_COUNT;
    a->scale = a->pre = a->post = 1.0;
    for (int n = 0; n < c->n_ops; n++) {
        const kiln_op *op = &c->ops[n];
        att_val x = val_of(p, kiln_op_arg(op, 0, NULL), vals), r = x;
        kiln_dtype rd = op->n_results ? op->result_dtype[0] : KILN_DTYPE_COUNT;
        if (is_any(op, VIEWS)) {
            if (x.role != R_NONE && x.role != R_O) {
                snprintf(why, wl, "%s of the %s", op->aten, x.role == R_S ? "scores" : "weights");
                return 0;
            }
            r.rank = view_rank(op, x.rank);
        } else if (kiln_op_is(op, "aten::transpose.int") ||
                   kiln_op_is(op, "aten::permute.default")) {
            int sw = swaps_last_two(op, x.rank);
            if (sw < 0 && x.role == R_O && x.rank == 4 && kiln_op_is(op, "aten::transpose.int")) {
                double d0 = kiln_arg_num(kiln_op_arg(op, 1, "dim0"), 0),
                       d1 = kiln_arg_num(kiln_op_arg(op, 2, "dim1"), 0);
                if (!((d0 == 1 && d1 == 2) || (d0 == 2 && d1 == 1))) {
                    snprintf(why, wl, "the output is transposed other than heads with tokens");
                    return 0;
                }
                o_swap ^= 1;
            } else if (sw < 0 || x.role == R_S || x.role == R_P) {
                snprintf(why, wl, "%s other than of the last two dims of q, k or v", op->aten);
                return 0;
            } else
                r.swap ^= sw;
        } else if (kiln_op_is(op, "aten::baddbmm.default")) {
            /* beta · self + alpha · (q · kᵀ), rounded once (diffusers' attention processor: beta 0
             * and an empty self without a mask; BLOOM's: the ALiBi bias as self): the scaled
             * scores, and with beta 1 an additive mask */
            att_val m = x, b1 = val_of(p, kiln_op_arg(op, 1, "batch1"), vals),
                    b2 = val_of(p, kiln_op_arg(op, 2, "batch2"), vals);
            double beta = kiln_arg_num(kiln_op_arg(op, 3, "beta"), 1),
                   alpha = kiln_arg_num(kiln_op_arg(op, 4, "alpha"), 1);
            if (q >= 0 || b1.input < 0 || b2.input < 0 || b1.role != R_NONE || b2.role != R_NONE ||
                isnan(alpha) || alpha == 0 || (beta != 0 && beta != 1) ||
                (beta == 1 && (m.input < 0 || m.role != R_NONE || m.swap))) {
                snprintf(why, wl,
                         "aten::baddbmm.default is not q·kᵀ scaled, with beta 0 or an "
                         "additive mask");
                return 0;
            }
            q = b1.input, qs = b1.swap, k = b2.input, ks = b2.swap;
            s_dtype = rd, s_rank = b1.rank, fused = 1;
            a->scale *= alpha;
            saw_scale = alpha != 1;
            a->round_scaled = beta == 0 && rd != KILN_F32;
            if (beta == 1) {
                mask = m.input;
                a->round_masked = rd != KILN_F32;
                saw_mask = 1;
            }
            r = b1;
            r.role = R_S, r.input = -1, r.swap = 0;
        } else if (is_any(op, MATMULS)) {
            att_val y = val_of(p, kiln_op_arg(op, 1, NULL), vals);
            if (!saw_softmax && o_op < 0 && x.input >= 0 && y.input >= 0 && x.role == R_NONE &&
                y.role == R_NONE && q < 0) {
                q = x.input, qs = x.swap, k = y.input, ks = y.swap;
                r.role = R_S, r.input = -1, r.swap = 0;
                s_dtype = rd, s_rank = x.rank;
            } else if (x.role == R_P && y.input >= 0 && y.role == R_NONE && v < 0) {
                v = y.input, vs = y.swap, o_op = n;
                r.role = R_O, r.input = -1, r.swap = 0;
            } else {
                snprintf(why, wl, "%s is not q·kᵀ nor the weights times v", op->aten);
                return 0;
            }
        } else if (is_any(op, SCALES)) {
            double f = kiln_arg_num(kiln_op_arg(op, 1, NULL), NAN);
            if (x.role != R_S || saw_mask || saw_softmax || isnan(f) || f == 0) {
                snprintf(why, wl, "%s is not a constant scale of the scores before the mask",
                         op->aten);
                return 0;
            }
            /* a second factor goes to pre (a soft cap's 1 / cap, if a tanh follows) and one after
             * the tanh to post (the cap) */
            *(a->tanh     ? &a->post
              : saw_scale ? &a->pre
                          : &a->scale) *=
                kiln_op_is(op, "aten::div.Tensor") || kiln_op_is(op, "aten::div.Scalar") ? 1.0 / f
                                                                                         : f;
            a->round_scaled = rd != KILN_F32 && rd != KILN_DTYPE_COUNT
                                  ? 1
                                  : rd == KILN_DTYPE_COUNT && s_dtype != KILN_F32;
            saw_scale = 1;
        } else if (kiln_op_is(op, "aten::tanh.default")) {
            /* Gemma-2's soft cap: cap · tanh(scores · scale / cap), before the mask */
            if (x.role != R_S || saw_mask || saw_softmax || a->tanh) {
                snprintf(why, wl,
                         "aten::tanh.default is not one soft cap of the scores before the "
                         "mask");
                return 0;
            }
            a->tanh = 1;
        } else if (kiln_op_is(op, "aten::add.Tensor")) {
            att_val y = val_of(p, kiln_op_arg(op, 1, NULL), vals);
            if (x.role == R_NONE && x.input >= 0 && y.role == R_S) /* mask + scores */
                y = x;
            if ((x.role != R_S && y.role != R_S) || saw_mask || saw_softmax || y.input < 0 ||
                y.role != R_NONE || y.swap || kiln_arg_num(kiln_op_arg(op, 2, "alpha"), 1) != 1) {
                snprintf(why, wl, "aten::add.Tensor is not one additive mask on the scores");
                return 0;
            }
            mask = y.input;
            kiln_dtype md = p->inputs[mask].dtype;
            kiln_dtype sd = saw_scale && !a->round_scaled ? KILN_F32 : s_dtype;
            a->round_masked = rd != KILN_DTYPE_COUNT
                                  ? rd != KILN_F32
                                  : (sd != KILN_F32 && sd != KILN_DTYPE_COUNT && md != KILN_F32);
            r.role = R_S, r.input = -1;
            saw_mask = 1;
        } else if (kiln_op_is(op, "aten::masked_fill.Scalar") ||
                   kiln_op_is(op, "aten::where.ScalarOther")) {
            /* scores.masked_fill(mask, -inf) (minGPT's, with mask = bias == 0: True where masked)
             * and torch.where(mask, scores, finfo.min) (older GPT-2, GPT-Neo, whose 0-dim fill
             * tensor capture writes as its number: True kept, SDPA's sense): one boolean mask. A
             * fill of -1e4 or below is -inf to the softmax (exp underflows to 0) but for a row
             * masked everywhere, which eager makes uniform: the gate decides. */
            const int fill_op = kiln_op_is(op, "aten::masked_fill.Scalar");
            att_val s = fill_op ? x : val_of(p, kiln_op_arg(op, 1, "self"), vals);
            att_val m = fill_op ? val_of(p, kiln_op_arg(op, 1, "mask"), vals) : x;
            double fill = kiln_arg_num(kiln_op_arg(op, 2, fill_op ? "value" : "other"), NAN);
            if (s.role != R_S || saw_mask || saw_softmax || m.input < 0 || m.role != R_NONE ||
                m.swap || p->inputs[m.input].dtype != KILN_BOOL || !(fill <= -1e4)) {
                snprintf(why, wl, "%s is not one boolean mask putting -inf in the scores",
                         op->aten);
                return 0;
            }
            mask = m.input;
            a->mask_inverted = fill_op;
            saw_where = !fill_op;
            a->round_masked = 0; /* the kept scores are copied, not rounded again */
            r = s, r.input = -1;
            saw_mask = 1;
        } else if (is_any(op, CASTS) && x.role == R_NONE) {
            /* q or k upcast to float32 before the scores (GPT-J, GPT-Neo): the 16-bit tensor is the
             * operand, and the float32 matmul of its values what the MMAs compute */
            if (x.input < 0 || q >= 0 || rd != KILN_F32 ||
                (p->inputs[x.input].dtype != KILN_BF16 && p->inputs[x.input].dtype != KILN_F16)) {
                snprintf(why, wl, "%s of q or k other than a 16-bit one to float32", op->aten);
                return 0;
            }
        } else if (is_any(op, CASTS)) {
            if (x.role != R_S && x.role != R_P) {
                snprintf(why, wl, "%s of something other than the scores or the weights", op->aten);
                return 0;
            }
        } else if (kiln_op_is(op, "aten::_softmax.default") ||
                   kiln_op_is(op, "aten::softmax.int")) {
            double d = kiln_arg_num(kiln_op_arg(op, 1, "dim"), 0);
            if (x.role != R_S || saw_softmax || (d != -1 && d != s_rank - 1)) {
                snprintf(why, wl, "%s is not over the keys of the scores", op->aten);
                return 0;
            }
            r.role = R_P;
            saw_softmax = 1;
        } else if (kiln_op_is(op, "aten::dropout.default") ||
                   kiln_op_is(op, "aten::native_dropout.default")) {
            double pr = kiln_arg_num(kiln_op_arg(op, 1, "p"), 1),
                   train = kiln_arg_num(kiln_op_arg(op, 2, "train"), 1);
            if (x.role != R_P || (pr != 0 && train != 0)) {
                snprintf(why, wl, "dropout with p > 0 in training");
                return 0;
            }
        } else if (kiln_op_is(op, "aten::_safe_softmax.default")) {
            snprintf(why, wl, "_safe_softmax gives 0 for fully masked rows (this family: NaN)");
            return 0;
        } else {
            snprintf(why, wl, "op %s is not part of an attention pattern", op->aten);
            return 0;
        }
        vals[n] = r;
    }
    if (q < 0 || v < 0 || !saw_softmax) {
        snprintf(why, wl, "no matmul q·kᵀ → softmax → matmul with v in the chain");
        return 0;
    }
    if (!a->tanh) /* without a soft cap every factor is one scale */
        a->scale *= a->pre, a->pre = 1.0;
    if (c->n_outputs != 1 || c->outputs[0].input >= 0 || c->outputs[0].slot != 0 ||
        vals[c->outputs[0].op].role != R_O) {
        snprintf(why, wl, "the chain's one output is not the attention output");
        return 0;
    }
    /* a swap of the view the matmul reads is a transposed stored layout of the input */
    const int plain[4] = {0, 1, 2, 3}, swapped[4] = {0, 1, 3, 2};
    if (!operand_of(p, q, qs ? swapped : plain, &a->t[ATT_Q], why, wl) ||
        !operand_of(p, k, ks ? plain : swapped, &a->t[ATT_K], why, wl) ||
        !operand_of(p, v, vs ? swapped : plain, &a->t[ATT_V], why, wl))
        return 0;
    a->t[ATT_MASK].input = -1;
    if (mask >= 0 && !mask_operand(p, mask, s_rank, &a->t[ATT_MASK], why, wl))
        return 0;
    a->mask = mask >= 0 ? ATT_MASK_TENSOR : ATT_MASK_NONE;
    /* unknown: eager's matmul gives the input dtype */
    a->round_qk = !fused && s_dtype != KILN_F32;
    if (o_swap) {
        snprintf(why, wl, "an output transposed after the matmul with v (not yet supported)");
        return 0;
    }
    snprintf(a->how, sizeof a->how, "%s: matmul q·kᵀ%s%s%s, softmax, matmul v", c->kind,
             saw_scale ? ", scale" : "", a->tanh ? ", tanh soft cap" : "",
             !saw_mask          ? ""
             : a->mask_inverted ? ", masked_fill with -inf"
             : saw_where        ? ", where(mask, scores, -inf)"
                                : ", additive mask");
    return 1;
}

/* ---- a captured SDPA call ---- */

static const struct {
    const char *aten;
    int mask_pos; /* positional index of attn_mask / attn_bias, -1 keyword only */
    const char *mask_name;
    int dropout_pos, causal_pos;
} SDPA[] = {
    {"aten::scaled_dot_product_attention.default", 3, "attn_mask", 4, 5},
    {"aten::_scaled_dot_product_flash_attention_for_cpu.default", -1, "attn_mask", 3, 4},
    {"aten::_scaled_dot_product_flash_attention.default", -1, NULL, 3, 4},
    {"aten::_scaled_dot_product_efficient_attention.default", 3, "attn_bias", 5, 6},
    {"aten::_scaled_dot_product_cudnn_attention.default", 3, "attn_bias", 5, 6},
};

static int from_sdpa(const kiln_problem *p, const kiln_opchain *c, att_info *a, char *why,
                     size_t wl) {
    const kiln_op *op = &c->ops[0];
    int s = -1;
    for (size_t i = 0; i < sizeof SDPA / sizeof SDPA[0]; i++)
        if (kiln_op_is(op, SDPA[i].aten))
            s = (int)i;
    if (s < 0) {
        snprintf(why, wl, "%s is not attention", op->aten);
        return 0;
    }
    int in[3];
    const char *names[3] = {"query", "key", "value"};
    for (int r = 0; r < 3; r++)
        if ((in[r] = kiln_arg_input(kiln_op_arg(op, r, names[r]))) < 0) {
            snprintf(why, wl, "%s: %s is not an input tensor", op->aten, names[r]);
            return 0;
        }
    if (c->n_outputs != 1 || c->outputs[0].input >= 0 || c->outputs[0].slot != 0) {
        snprintf(why, wl, "%s: the problem's output is not the attention output", op->aten);
        return 0;
    }
    if (kiln_arg_num(kiln_op_arg(op, SDPA[s].dropout_pos, "dropout_p"), 0) != 0) {
        snprintf(why, wl, "%s with dropout_p > 0", op->aten);
        return 0;
    }
    const int plain[4] = {0, 1, 2, 3};
    for (int r = 0; r < 3; r++)
        if (!operand_of(p, in[r], plain, &a->t[r], why, wl))
            return 0;
    a->t[ATT_MASK].input = -1;
    a->mask = ATT_MASK_NONE;
    if (SDPA[s].mask_name) {
        const kiln_arg *m = kiln_op_arg(op, SDPA[s].mask_pos, SDPA[s].mask_name);
        if (m && m->kind != KILN_ARG_NONE) {
            int mi = kiln_arg_input(m);
            if (mi < 0 || !mask_operand(p, mi, p->inputs[in[0]].ndim, &a->t[ATT_MASK], why, wl)) {
                if (mi < 0)
                    snprintf(why, wl, "%s: the mask is not an input tensor", op->aten);
                return 0;
            }
            a->mask = ATT_MASK_TENSOR;
        }
    }
    if (kiln_arg_num(kiln_op_arg(op, SDPA[s].causal_pos, "is_causal"), 0) != 0) {
        if (a->mask != ATT_MASK_NONE) {
            snprintf(why, wl, "%s with both a mask and is_causal", op->aten);
            return 0;
        }
        a->mask = ATT_MASK_CAUSAL;
        a->band = 1, a->has_lo = 0, a->hi = 0;
    }
    int64_t shape[KILN_MAX_DIMS];
    kiln_tensor_shape(p, &p->inputs[in[0]], &p->workloads[0], shape);
    a->scale = kiln_arg_num(kiln_op_arg(op, -1, "scale"), 1.0 / sqrt((double)shape[3]));
    const kiln_arg *sc = kiln_op_arg(op, -1, "scale");
    if (sc && sc->kind == KILN_ARG_NONE)
        a->scale = 1.0 / sqrt((double)shape[3]);
    snprintf(a->how, sizeof a->how, "%s%s", op->aten,
             a->mask == ATT_MASK_CAUSAL   ? " (is_causal)"
             : a->mask == ATT_MASK_TENSOR ? " (additive mask)"
                                          : "");
    return 1;
}

/* ---- hand-written problems ---- */

static int from_op_type(const kiln_problem *p, att_info *a, char *why, size_t wl) {
    static const char *const types[] = {"attention", "scaled_dot_product_attention", "sdpa",
                                        "flash_attention", NULL};
    int ok = 0;
    for (int i = 0; p->op_type && types[i]; i++)
        ok |= strcmp(p->op_type, types[i]) == 0;
    if (!ok) {
        snprintf(why, wl, "no \"kiln\" chain and op_type '%s' is not attention",
                 p->op_type ? p->op_type : "");
        return 0;
    }
    static const char *const names[3][3] = {
        {"q", "query", NULL}, {"k", "key", NULL}, {"v", "value", NULL}};
    const int plain[4] = {0, 1, 2, 3};
    for (int r = 0; r < 3; r++) {
        int i = kiln_problem_input_index(p, names[r][0]);
        if (i < 0)
            i = kiln_problem_input_index(p, names[r][1]);
        if (i < 0) {
            snprintf(why, wl, "no input named %s or %s", names[r][0], names[r][1]);
            return 0;
        }
        if (!operand_of(p, i, plain, &a->t[r], why, wl))
            return 0;
    }
    int mi = kiln_problem_input_index(p, "mask");
    if (mi < 0)
        mi = kiln_problem_input_index(p, "attn_mask");
    a->t[ATT_MASK].input = -1;
    a->mask = ATT_MASK_NONE;
    if (mi >= 0) {
        if (!mask_operand(p, mi, 4, &a->t[ATT_MASK], why, wl))
            return 0;
        a->mask = ATT_MASK_TENSOR;
    }
    int64_t shape[KILN_MAX_DIMS];
    kiln_tensor_shape(p, &p->inputs[a->t[ATT_Q].input], &p->workloads[0], shape);
    a->scale = kiln_problem_kiln_num(p, "scale", 1.0 / sqrt((double)shape[3]));
    if (kiln_problem_kiln_num(p, "is_causal", 0) != 0 && a->mask == ATT_MASK_NONE) {
        a->mask = ATT_MASK_CAUSAL;
        a->band = 1, a->has_lo = 0, a->hi = 0;
    }
    snprintf(a->how, sizeof a->how, "op_type %s", p->op_type);
    return 1;
}

/* ---- the mask's structure ---- */

/* A band as a structure object states it (capture_stats.py's form): key j of query i masked iff
 * j - i leaves [lo, hi] (a bound absent: none on that side); zero: every position inside holds 0
 * ("inside": 0), so the mask is exactly the band. */
typedef struct {
    int has_lo, has_hi, zero;
    int64_t lo, hi;
} att_band;

static int band_same(const att_band *x, const att_band *y) {
    return x->has_lo == y->has_lo && x->has_hi == y->has_hi && x->lo == y->lo && x->hi == y->hi;
}

/* A band structure object into b; 0 when it is not a band. */
static int band_of(const cJSON *s, att_band *b) {
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(s, "kind");
    if (!cJSON_IsString(kind) || strcmp(kind->valuestring, "band") != 0)
        return 0;
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(s, "lower"),
                *u = cJSON_GetObjectItemCaseSensitive(s, "upper"),
                *in = cJSON_GetObjectItemCaseSensitive(s, "inside");
    b->has_lo = cJSON_IsNumber(l);
    b->has_hi = cJSON_IsNumber(u);
    b->lo = b->has_lo ? (int64_t)l->valuedouble : 0;
    b->hi = b->has_hi ? (int64_t)u->valuedouble : 0;
    b->zero = cJSON_IsNumber(in) && in->valuedouble == 0;
    return b->has_lo || b->has_hi;
}

/* The band every workload's mask is drawn with (workload.jsonl "kiln": {"drawn"}), or 0; zero
 * only where every workload says so. */
static int drawn_band(const kiln_problem *p, const char *name, att_band *out) {
    char path[4096];
    snprintf(path, sizeof path, "%s/workload.jsonl", p->dir ? p->dir : ".");
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char *line = NULL;
    size_t cap = 0;
    int lines = 0, bands = 0, same = 1;
    att_band b0 = {0};
    while (getline(&line, &cap, f) > 0) {
        cJSON *j = cJSON_Parse(line);
        if (!j)
            continue;
        lines++;
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "kiln"), "drawn"),
            name);
        att_band b;
        if (d && band_of(cJSON_GetObjectItemCaseSensitive(d, "structure"), &b)) {
            if (bands++ == 0)
                b0 = b;
            else
                same &= band_same(&b, &b0), b0.zero &= b.zero;
        }
        cJSON_Delete(j);
    }
    free(line);
    fclose(f);
    if (lines == 0 || bands != lines || !same)
        return 0;
    *out = b0;
    return 1;
}

/* Where a mask masks: -inf or at most -1e4 (capture_stats.py's MASK_THRESHOLD: finfo.min fills);
 * False where it is boolean (which is 0 where it keeps: a boolean band is always exact). */
#define ATT_MASKED(v, is_bool) ((is_bool) ? (v) == 0 : (v) <= -1e4)

/* The band of one stored mask tensor ([..., q, k], every leading slice the same), as
 * capture_stats.py finds it for a mask it summarises; 0 when it is not one (or holds NaN or +inf).
 */
static int band_of_data(const kiln_st_tensor *t, att_band *out) {
    const int is_bool = t->dtype == KILN_BOOL;
    if (t->ndim < 2 ||
        (t->dtype != KILN_F32 && t->dtype != KILN_BF16 && t->dtype != KILN_F16 && !is_bool))
        return 0;
    const int64_t q = t->shape[t->ndim - 2], k = t->shape[t->ndim - 1];
    if (q < 1 || k < 2 || q * k > ((int64_t)1 << 26))
        return 0;
    const size_t slice = (size_t)(q * k), n = t->n_bytes / kiln_dtype_size(t->dtype);
    att_band b = {0};
    for (int64_t i = 0; i < q; i++) {
        int64_t first = -1, last = -1, kept = 0;
        for (int64_t j = 0; j < k; j++) {
            double v = kiln_dtype_load(t->dtype, t->data, (size_t)(i * k + j));
            if (isnan(v) || v == INFINITY)
                return 0;
            if (!ATT_MASKED(v, is_bool)) {
                first = first < 0 ? j : first;
                last = j;
                kept++;
            }
        }
        if (kept == 0)
            continue;
        if (kept != last - first + 1)
            return 0; /* kept positions that are not one run */
        if (last < k - 1) {
            if (b.has_hi && last - i != b.hi)
                return 0;
            b.has_hi = 1, b.hi = last - i;
        }
        if (first > 0) {
            if (b.has_lo && first - i != b.lo)
                return 0;
            b.has_lo = 1, b.lo = first - i;
        }
    }
    if (!b.has_lo && !b.has_hi)
        return 0;
    /* the band says exactly which positions are masked, in every slice; zero when every kept
     * value is 0 too */
    b.zero = 1;
    for (size_t e = 0; e < n; e++) {
        const int64_t i = (int64_t)(e % slice) / k, j = (int64_t)(e % slice) % k;
        const int out = (b.has_hi && j - i > b.hi) || (b.has_lo && j - i < b.lo);
        const double v = kiln_dtype_load(t->dtype, t->data, e);
        if (out != ATT_MASKED(v, is_bool))
            return 0;
        b.zero &= out || v == 0 || is_bool;
    }
    *out = b;
    return 1;
}

/* The band every workload's stored mask holds (safetensors inputs, as capture writes a mask it
 * keeps whole), or 0. */
static int stored_band(const kiln_problem *p, int input, att_band *out) {
    if (p->inputs[input].layout.permuted || p->inputs[input].layout.expanded || !p->dir)
        return 0;
    for (int w = 0; w < p->n_workloads; w++) {
        const kiln_input_desc *d = &p->workloads[w].inputs[input];
        if (d->kind != KILN_INPUT_SAFETENSORS)
            return 0;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", p->dir, d->path);
        kiln_st *st = NULL;
        kiln_err err;
        if (kiln_st_load(path, &st, &err) != KILN_OK)
            return 0;
        const kiln_st_tensor *t = kiln_st_find(st, d->tensor_key);
        att_band b;
        int ok = t != NULL && band_of_data(t, &b) && (w == 0 || band_same(&b, out));
        kiln_st_free(st);
        if (!ok)
            return 0;
        b.zero &= w == 0 || out->zero;
        *out = b;
    }
    return p->n_workloads > 0;
}

static void classify_mask(const kiln_problem *p, att_info *a) {
    if (a->mask != ATT_MASK_TENSOR || a->mask_inverted) /* bands are read with True kept */
        return;
    att_band b = {0};
    const cJSON *ms = p->kiln ? cJSON_GetObjectItemCaseSensitive(p->kiln, "mask_structure") : NULL;
    int found = ms ? band_of(ms, &b)
                   : drawn_band(p, p->inputs[a->t[ATT_MASK].input].name, &b) ||
                         stored_band(p, a->t[ATT_MASK].input, &b);
    if (!found || !b.has_hi) /* a band without an upper bound skips nothing worth having */
        return;
    /* every query row i must keep a key: [i + lo, i + hi] meets [0, skv) in every workload; a mask
     * broadcast over the queries ([b, 1, 1, skv], a padding mask) is the same row for every query,
     * never a band relative to the query (its row 0 may look like one) */
    for (int w = 0; w < p->n_workloads; w++) {
        int64_t sq = kiln_attention_dim(p, &a->t[ATT_Q], 2, &p->workloads[w]),
                skv = kiln_attention_dim(p, &a->t[ATT_K], 2, &p->workloads[w]);
        if (kiln_attention_dim(p, &a->t[ATT_MASK], 2, &p->workloads[w]) != sq)
            return;
        if (b.hi < 0 || (b.has_lo && (b.lo > b.hi || sq - 1 + b.lo > skv - 1)))
            return;
    }
    a->band = 1, a->has_lo = b.has_lo, a->lo = b.lo, a->hi = b.hi, a->band_exact = b.zero;
}

int64_t kiln_attention_dim(const kiln_problem *p, const att_operand *o, int l,
                           const kiln_workload *w) {
    if (o->input < 0 || o->pos[l] < 0)
        return 1;
    int64_t shape[KILN_MAX_DIMS];
    kiln_tensor_shape(p, &p->inputs[o->input], w, shape);
    return shape[o->pos[l]];
}

/* The shapes: q [b, hq, sq, d], k and v [b, hkv, skv, d] with hkv dividing hq, the mask
 * broadcasting to [b, hq, sq, skv] (size 1 or the full size in b, hq and sq), the output [b, hq,
 * sq, d] stored with d innermost. */
static int check_shapes(const kiln_problem *p, att_info *a, char *why, size_t wl) {
    if (p->n_outputs != 1) {
        snprintf(why, wl, "attention has one output, the problem %d", p->n_outputs);
        return 0;
    }
    const kiln_tensor_spec *o = &p->outputs[0];
    a->dtype = p->inputs[a->t[ATT_Q].input].dtype;
    if (!is_float(a->dtype) || p->inputs[a->t[ATT_K].input].dtype != a->dtype ||
        p->inputs[a->t[ATT_V].input].dtype != a->dtype || o->dtype != a->dtype) {
        snprintf(why, wl, "q, k, v and the output must share one of float32, bfloat16, float16");
        return 0;
    }
    /* stored in any order with d innermost: SDPA on the cpu returns [b, s, h, d] in memory */
    static const int identity[4] = {0, 1, 2, 3};
    a->out.input = -1;
    if (!dims_of(p, o, identity, &a->out, why, wl))
        return 0;
    a->mask_dtype = a->t[ATT_MASK].input >= 0 ? p->inputs[a->t[ATT_MASK].input].dtype : a->dtype;
    a->mask_strided = a->t[ATT_MASK].input >= 0 &&
                      !innermost(p, &p->inputs[a->t[ATT_MASK].input], a->t[ATT_MASK].pos[3]);
    for (int wi = 0; wi < p->n_workloads; wi++) {
        const kiln_workload *w = &p->workloads[wi];
        int64_t q[4], k[4], v[4], m[4], os[KILN_MAX_DIMS];
        for (int l = 0; l < 4; l++) {
            q[l] = kiln_attention_dim(p, &a->t[ATT_Q], l, w);
            k[l] = kiln_attention_dim(p, &a->t[ATT_K], l, w);
            v[l] = kiln_attention_dim(p, &a->t[ATT_V], l, w);
            m[l] = kiln_attention_dim(p, &a->t[ATT_MASK], l, w);
        }
        kiln_tensor_shape(p, o, w, os);
        if (k[0] != q[0] && k[0] != 1) {
            snprintf(why, wl, "workload %d: k's batch %lld is not q's %lld", wi, (long long)k[0],
                     (long long)q[0]);
            return 0;
        }
        if (q[3] != k[3] || k[3] != v[3] || k[2] != v[2] || k[1] != v[1] || k[0] != v[0]) {
            snprintf(why, wl, "workload %d: q, k, v shapes do not agree on [b, h, s, d]", wi);
            return 0;
        }
        if (k[1] < 1 || q[1] % k[1]) {
            snprintf(why, wl, "workload %d: %lld q heads are not a multiple of %lld kv heads", wi,
                     (long long)q[1], (long long)k[1]);
            return 0;
        }
        int out_ok = 1;
        for (int l = 0; l < 4; l++)
            out_ok &= (a->out.pos[l] < 0 ? 1 : os[a->out.pos[l]]) == q[l];
        if (!out_ok) {
            snprintf(why, wl, "workload %d: the output is not [b, hq, sq, d]", wi);
            return 0;
        }
        if (a->t[ATT_MASK].input >= 0 &&
            ((m[0] != 1 && m[0] != q[0]) || (m[1] != 1 && m[1] != q[1]) ||
             (m[2] != 1 && m[2] != q[2]) || m[3] != k[2])) {
            snprintf(why, wl, "workload %d: the mask does not broadcast to [b, hq, sq, skv]", wi);
            return 0;
        }
        if (q[2] < 1 || k[2] < 1 || q[3] < 1) {
            snprintf(why, wl, "workload %d: an empty tensor", wi);
            return 0;
        }
    }
    return 1;
}

int kiln_attention_analyse(const kiln_problem *p, att_info *a, char *why, size_t why_len) {
    memset(a, 0, sizeof *a);
    int ok;
    if (kiln_opchain_described(p)) {
        kiln_opchain *c = NULL;
        kiln_err err;
        if (kiln_opchain_read(p, &c, &err) != KILN_OK) {
            snprintf(why, why_len, "%s", err.msg);
            return 0;
        }
        if (strcmp(c->kind, "aten") == 0 && c->n_ops == 1)
            ok = from_sdpa(p, c, a, why, why_len);
        else
            ok = from_chain(p, c, a, why, why_len);
        kiln_opchain_free(c);
    } else if (p->op_type && strcmp(p->op_type, "gqa_paged") == 0)
        return kiln_attention_paged_analyse(p, a, why, why_len);
    else
        ok = from_op_type(p, a, why, why_len);
    if (!ok || !check_shapes(p, a, why, why_len))
        return 0;
    classify_mask(p, a);
    return 1;
}
