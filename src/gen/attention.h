/* attention.h: what the attention family's matcher (attention_match.c) learns about a problem and
 * hands to its emitters (attention.c): which inputs are q, k, v and the mask, how each is laid out
 * in memory, the scale, the mask kind and the roundings eager PyTorch makes between the ops. */
#ifndef KILN_ATTENTION_H
#define KILN_ATTENTION_H

#include "family.h"

/* Roles of the inputs (kiln_match.input_of_role). */
enum { ATT_Q, ATT_K, ATT_V, ATT_MASK, ATT_ROLES };

/* Mask kinds (fact "mask"). */
enum {
    ATT_MASK_NONE,   /* no mask */
    ATT_MASK_TENSOR, /* an additive tensor, added to every score */
    ATT_MASK_CAUSAL, /* generated: SDPA's is_causal (key j kept iff j <= query i) */
};

/* One tensor as the kernel indexes it: for each logical dim (batch, head, sequence, head dim) the
 * stored dim it lives in (-1: absent, broadcast). Strides follow from the stored shape. */
typedef struct {
    int input;  /* problem input index, -1 when absent */
    int pos[4]; /* stored dim of b, h, s, d; -1 when the tensor has no such dim */
} att_operand;

typedef struct {
    att_operand t[ATT_ROLES];
    att_operand out;
    kiln_dtype dtype, mask_dtype;
    int mask;         /* ATT_MASK_* */
    int band;         /* the mask is a band: key j of query i kept iff lo <= j - i <= hi */
    int has_lo;       /* a lower bound exists (sliding window) */
    int64_t lo, hi;   /* the band's bounds (hi only when band) */
    double scale;     /* the constant the scores are multiplied by */
    int round_qk;     /* eager rounds q·kᵀ to the input dtype (a bf16/f16 matmul) */
    int round_scaled; /* ... and the scaled scores */
    int round_masked; /* ... and the masked scores */
    char how[200];
} att_info;

/* Reads p as attention: the eager chain (matmul q·kᵀ, scale, additive mask, softmax, casts,
 * dropout with p = 0, matmul with v, GQA views) or a captured SDPA call. Returns 1 and fills a, or
 * 0 with the reason in why. */
int kiln_attention_analyse(const kiln_problem *p, att_info *a, char *why, size_t why_len);

/* Size of logical dim l (0 b, 1 h, 2 s, 3 d) of operand o in workload w (1 when absent). */
int64_t kiln_attention_dim(const kiln_problem *p, const att_operand *o, int l,
                           const kiln_workload *w);

#endif
