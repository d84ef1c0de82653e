/* attention_paged.c: recognises FlashInfer's paged attention (att_paged in attention.h), the form
 * of SOL-ExecBench's FlashInfer category and FlashInfer-Bench's "gqa_paged" definitions: prefill (q
 * of every sequence's new tokens, qo_indptr) and decode (one query a sequence) over K and V caches
 * split in pages that a page table (kv_indptr, kv_indices, kv_last_page_len) assigns to sequences.
 *
 * The inputs are found by the names the form gives them and checked against its layouts in every
 * workload; the values of the page table are the kernel's business (the gate proves it against the
 * definition's reference on the workloads' own tables). Causality is in the definition's name, as
 * FlashInfer-Bench names it (gqa_paged_prefill_causal_*), or in "kiln": {"is_causal"}. */
#include "attention.h"

#include "../formats/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int plain(const kiln_tensor_spec *t, int ndim) {
    return t->ndim == ndim && !t->is_scalar && !t->layout.permuted;
}

/* Input `name` as a dense row-major tensor of ndim dims, or a 1-d int32 index; -1 when absent. */
static int find(const kiln_problem *p, const char *name, int ndim, int index, int *bad, char *why,
                size_t wl) {
    int i = kiln_problem_input_index(p, name);
    if (i < 0 || *bad)
        return i;
    const kiln_tensor_spec *t = &p->inputs[i];
    if (!plain(t, ndim) || (index && t->dtype != KILN_I32)) {
        snprintf(why, wl, "input %s is not a row-major %d-d %s tensor", name, ndim,
                 index ? "int32" : "");
        *bad = 1;
    }
    return i;
}

static int dims_of(const kiln_problem *p, int i, const kiln_workload *w, int64_t *shape) {
    kiln_tensor_shape(p, &p->inputs[i], w, shape);
    return p->inputs[i].ndim;
}

int kiln_attention_paged_analyse(const kiln_problem *p, att_info *a, char *why, size_t wl) {
    memset(a, 0, sizeof *a);
    att_paged *pg = &a->paged;
    int bad = 0;
    const int q = find(p, "q", 3, 0, &bad, why, wl), k = find(p, "k_cache", 4, 0, &bad, why, wl),
              v = find(p, "v_cache", 4, 0, &bad, why, wl);
    pg->input[0] = find(p, "qo_indptr", 1, 1, &bad, why, wl);
    pg->input[1] = find(p, "kv_indptr", 1, 1, &bad, why, wl);
    pg->input[2] = find(p, "kv_indices", 1, 1, &bad, why, wl);
    pg->input[3] = find(p, "kv_last_page_len", 1, 1, &bad, why, wl);
    if (bad)
        return 0;
    if (q < 0 || k < 0 || v < 0 || pg->input[1] < 0 || pg->input[2] < 0) {
        snprintf(why, wl, "gqa_paged wants inputs q, k_cache, v_cache, kv_indptr, kv_indices");
        return 0;
    }
    pg->sm_scale = kiln_problem_input_index(p, "sm_scale");
    if (pg->sm_scale >= 0 && (!p->inputs[pg->sm_scale].is_scalar ||
                              !kiln_dtype_is_float(p->inputs[pg->sm_scale].dtype))) {
        snprintf(why, wl, "sm_scale is not a float scalar");
        return 0;
    }
    int known = 3 + (pg->sm_scale >= 0);
    for (int r = 0; r < 4; r++)
        known += pg->input[r] >= 0;
    if (known != p->n_inputs) {
        snprintf(why, wl,
                 "inputs beyond the paged form's (q, k_cache, v_cache, qo_indptr, "
                 "kv_indptr, kv_indices, kv_last_page_len, sm_scale)");
        return 0;
    }
    a->dtype = p->inputs[q].dtype;
    if ((a->dtype != KILN_BF16 && a->dtype != KILN_F16) || p->inputs[k].dtype != a->dtype ||
        p->inputs[v].dtype != a->dtype) {
        snprintf(why, wl, "q, k_cache and v_cache must share bfloat16 or float16");
        return 0;
    }
    pg->out = kiln_problem_output_index(p, "output");
    pg->lse = kiln_problem_output_index(p, "lse");
    if (pg->out < 0 || p->n_outputs != 1 + (pg->lse >= 0)) {
        snprintf(why, wl, "gqa_paged's outputs are output and optionally lse");
        return 0;
    }
    if (!plain(&p->outputs[pg->out], 3) || p->outputs[pg->out].dtype != a->dtype ||
        (pg->lse >= 0 &&
         (!plain(&p->outputs[pg->lse], 2) || p->outputs[pg->lse].dtype != KILN_F32))) {
        snprintf(why, wl,
                 "output must be a row-major [tokens, hq, d] of q's dtype, lse a "
                 "row-major float32 [tokens, hq]");
        return 0;
    }
    pg->on = 1;
    pg->decode = pg->input[0] < 0;
    pg->causal = !pg->decode && (strstr(p->name, "causal") != NULL ||
                                 kiln_problem_kiln_num(p, "is_causal", 0) != 0);
    for (int wi = 0; wi < p->n_workloads; wi++) {
        const kiln_workload *w = &p->workloads[wi];
        int64_t qs[KILN_MAX_DIMS], ks[KILN_MAX_DIMS], vs[KILN_MAX_DIMS], os[KILN_MAX_DIMS],
            ls[KILN_MAX_DIMS], ix[4][KILN_MAX_DIMS];
        dims_of(p, q, w, qs);
        dims_of(p, k, w, ks);
        dims_of(p, v, w, vs);
        kiln_tensor_shape(p, &p->outputs[pg->out], w, os);
        for (int r = 0; r < 4; r++)
            if (pg->input[r] >= 0)
                dims_of(p, pg->input[r], w, ix[r]);
        const int64_t seqs = ix[1][0] - 1;
        if (memcmp(ks, vs, 4 * sizeof *ks) || qs[2] != ks[3] || ks[2] < 1 || qs[1] % ks[2] ||
            os[0] != qs[0] || os[1] != qs[1] || os[2] != qs[2]) {
            snprintf(why, wl,
                     "workload %d: q [tokens, hq, d], caches [pages, page_size, hkv, d] with hkv "
                     "dividing hq, output like q: the shapes do not agree",
                     wi);
            return 0;
        }
        if (pg->lse >= 0) {
            kiln_tensor_shape(p, &p->outputs[pg->lse], w, ls);
            if (ls[0] != qs[0] || ls[1] != qs[1]) {
                snprintf(why, wl, "workload %d: lse is not [tokens, hq]", wi);
                return 0;
            }
        }
        if (seqs < 0 || (pg->input[0] >= 0 && ix[0][0] != ix[1][0]) ||
            (pg->decode && qs[0] != seqs) || (pg->input[3] >= 0 && ix[3][0] != seqs)) {
            snprintf(why, wl,
                     "workload %d: qo_indptr and kv_indptr have one entry a sequence and one "
                     "more, kv_last_page_len one a sequence (decode: q one row a sequence)",
                     wi);
            return 0;
        }
        if (wi == 0)
            pg->page_size = ks[1];
        else if (ks[1] != pg->page_size) {
            snprintf(why, wl, "the page size differs between workloads");
            return 0;
        }
    }
    a->t[ATT_Q] = (att_operand){q, {-1, 1, 0, 2}};
    a->t[ATT_K] = (att_operand){k, {-1, 2, -1, 3}};
    a->t[ATT_V] = (att_operand){v, {-1, 2, -1, 3}};
    a->t[ATT_MASK] = (att_operand){-1, {-1, -1, -1, -1}};
    a->out = (att_operand){-1, {-1, 1, 0, 2}};
    a->mask_dtype = a->dtype;
    a->mask = ATT_MASK_NONE; /* causality is per sequence: att_paged.causal */
    int64_t qs[KILN_MAX_DIMS];
    dims_of(p, q, &p->workloads[0], qs);
    a->scale = 1.0 / sqrt((double)qs[2]);
    if (pg->sm_scale >= 0 && p->workloads[0].inputs[pg->sm_scale].kind == KILN_INPUT_SCALAR)
        a->scale = p->workloads[0].inputs[pg->sm_scale].scalar;
    snprintf(a->how, sizeof a->how, "gqa_paged %s%s, page size %lld%s",
             pg->decode ? "decode" : "prefill", pg->causal ? " causal" : "",
             (long long)pg->page_size, pg->lse >= 0 ? ", lse" : "");
    return 1;
}

/* The 1-d int32 index input `input` as workload w stores it, or NULL (drawn at random, unreadable).
 */
static kiln_st *stored(const kiln_problem *p, const kiln_workload *w, int input, const int32_t **v,
                       int64_t *n) {
    const kiln_input_desc *d = &w->inputs[input];
    if (d->kind != KILN_INPUT_SAFETENSORS || !p->dir)
        return NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", p->dir, d->path);
    kiln_st *st = NULL;
    kiln_err err;
    if (kiln_st_load(path, &st, &err) != KILN_OK)
        return NULL;
    const kiln_st_tensor *t = kiln_st_find(st, d->tensor_key);
    if (!t || t->dtype != KILN_I32) {
        kiln_st_free(st);
        return NULL;
    }
    *v = t->data;
    *n = t->shape[0];
    return st;
}

int kiln_attention_paged_work(const kiln_problem *p, const att_info *a, const kiln_workload *w,
                              double *pairs, double *kv_tokens) {
    const att_paged *pg = &a->paged;
    const int32_t *ix[4] = {NULL, NULL, NULL, NULL};
    int64_t n[4] = {0, 0, 0, 0};
    kiln_st *st[4] = {NULL, NULL, NULL, NULL};
    int ok = 1;
    for (int r = 0; r < 4; r++)
        if (r != 2 && pg->input[r] >= 0)
            ok &= (st[r] = stored(p, w, pg->input[r], &ix[r], &n[r])) != NULL;
    *pairs = *kv_tokens = 0;
    for (int64_t b = 0; ok && b + 1 < n[1]; b++) {
        const int64_t q_len = ix[0] ? ix[0][b + 1] - ix[0][b] : 1, pages = ix[1][b + 1] - ix[1][b];
        const int64_t kv_len =
            pages <= 0 ? 0 : (pages - 1) * pg->page_size + (ix[3] ? ix[3][b] : pg->page_size);
        *kv_tokens += (double)kv_len;
        for (int64_t i = 0; i < q_len; i++) {
            int64_t seen = pg->causal ? i + kv_len - q_len + 1 : kv_len;
            *pairs += seen < 0 ? 0 : seen > kv_len ? kv_len : seen;
        }
    }
    for (int r = 0; r < 4; r++)
        kiln_st_free(st[r]);
    return ok;
}
