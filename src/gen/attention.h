/* attention.h: what the attention family's matcher (attention_match.c) learns about a problem and
 * hands to its emitters (attention.c): which inputs are q, k, v and the mask, how each is laid out
 * in memory, the scale, the mask kind and the roundings eager PyTorch makes between the ops. */
#ifndef KILN_ATTENTION_H
#define KILN_ATTENTION_H

#include "family.h"

/* Roles of the inputs (kiln_match.input_of_role). */
enum { ATT_Q, ATT_K, ATT_V, ATT_MASK, ATT_ROLES };

/* Further roles of a paged problem: its page table (att_paged). */
enum { ATT_QO_INDPTR = ATT_ROLES, ATT_KV_INDPTR, ATT_KV_INDICES, ATT_LAST_PAGE_LEN };

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

/* FlashInfer's paged form (SOL-ExecBench's FlashInfer category, op_type "gqa_paged"): q [total_q,
 * hq, d] with sequence b's queries at qo_indptr[b]..qo_indptr[b+1] (decode: q [batch_size, hq, d],
 * one query a sequence, no qo_indptr), k and v caches [num_pages, page_size, hkv, d], sequence b's
 * pages kv_indices[kv_indptr[b]..kv_indptr[b+1]] in order, the last holding kv_last_page_len[b]
 * tokens (every page full without that input); outputs o [total_q, hq, d] and optionally lse
 * [total_q, hq], the base-2 log-sum-exp of the scaled scores. Causal prefill aligns a sequence's
 * last query with its last key: query i of q_len sees keys j <= i + kv_len - q_len; a query that
 * sees no key gets 0 and an lse of -inf. */
typedef struct {
    int on;
    int decode;   /* one query a sequence */
    int causal;   /* the name says "causal" (FlashInfer-Bench's gqa_paged_prefill_causal_*) */
    int input[4]; /* qo_indptr, kv_indptr, kv_indices, kv_last_page_len (-1: absent) */
    int sm_scale; /* the scalar input, -1: absent (1/sqrt(d)) */
    int out, lse; /* output indices (lse -1: absent) */
    int64_t page_size;
} att_paged;

typedef struct {
    att_operand t[ATT_ROLES];
    att_paged paged;
    att_operand out;
    kiln_dtype dtype, mask_dtype;
    int mask;       /* ATT_MASK_* */
    int band;       /* the mask is a band: key j of query i kept iff lo <= j - i <= hi */
    int has_lo;     /* a lower bound exists (sliding window) */
    int64_t lo, hi; /* the band's bounds (hi only when band) */
    int band_exact; /* ... and the mask is exactly the band: 0 at every position inside it (kept),
                     * masked at every one outside, so a 16-bit kernel generates it and reads no
                     * mask (what it assumes is checked on the live mask at install) */
    int mask_inverted; /* a boolean mask that says where to mask (masked_fill's: True takes no part;
                        * SDPA's: True takes part); read as a general mask, never a band */
    int mask_strided;  /* the mask's key dim is not innermost in memory (T5's position bias, stored
                        * with its heads last): read a.mk elements apart */
    double scale;      /* the constant the scores are multiplied by */
    int tanh;          /* then a soft cap: tanh of the scaled scores times pre (Gemma-2's logit
                        * soft-capping: 1 / cap; each a rounding of its own in eager) ... */
    double pre, post;  /* ... times post (the cap); 1 and 1 without tanh */
    int round_qk;      /* eager rounds q·kᵀ to the input dtype (a bf16/f16 matmul) */
    int round_scaled;  /* ... and the scaled scores */
    int round_masked;  /* ... and the masked scores */
    char how[200];
} att_info;

/* Reads p as attention: the eager chain (matmul q·kᵀ, scale, additive mask, softmax, casts,
 * dropout with p = 0, matmul with v, GQA views) or a captured SDPA call. Returns 1 and fills a, or
 * 0 with the reason in why. */
int kiln_attention_analyse(const kiln_problem *p, att_info *a, char *why, size_t why_len);

/* Reads p as FlashInfer's paged attention (att_paged); called by kiln_attention_analyse for op_type
 * "gqa_paged". Returns 1 and fills a (q, k, v as operands; no mask), or 0 with the reason in why.
 */
int kiln_attention_paged_analyse(const kiln_problem *p, att_info *a, char *why, size_t why_len);

/* What a paged problem's workload w computes, from the page table w stores: the (query, key) pairs
 * (causal: the ones kept) and the keys, each summed over its sequences. Returns 0 when w does not
 * store its table (drawn at random). */
int kiln_attention_paged_work(const kiln_problem *p, const att_info *a, const kiln_workload *w,
                              double *pairs, double *kv_tokens);

/* Size of logical dim l (0 b, 1 h, 2 s, 3 d) of operand o in workload w (1 when absent). */
int64_t kiln_attention_dim(const kiln_problem *p, const att_operand *o, int l,
                           const kiln_workload *w);

#endif
