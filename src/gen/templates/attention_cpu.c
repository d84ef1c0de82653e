/* attention_cpu.c: the cpu backend's body of kiln's attention family: the flash-attention forward
 * in plain C, one query row at a time over key tiles of ATT_CPU_BN, with the online softmax of the
 * CUDA template (a running max and sum in fp32, earlier output rescaled when the max grows) and the
 * same roundings, so that proving it on the cpu backend proves the algorithm the GPU runs.
 *
 * The emitter defines first: ATT_T (element type) with ATT_L / ATT_S (to and from float), ATT_TM /
 * ATT_LM for the mask, ATT_D (head dim), ATT_HAS_MASK, ATT_CAUSAL_GEN (SDPA's is_causal: -inf
 * above the band), ATT_BAND, ATT_HAS_LO, ATT_LO, ATT_HI (key j of query i kept iff lo <= j - i <=
 * hi: whole tiles outside are skipped), and ATT_ROUND_QK, ATT_ROUND_SCALED, ATT_ROUND_MASKED,
 * ATT_ROUND_P (where eager rounds to the input dtype: the bf16 matmul's scores, the scaled and the
 * masked scores, and the probabilities cast before the second matmul).
 *
 * ATT_PAGED (FlashInfer's paged form, att_paged in attention.h) adds att_cpu_paged: a row is a
 * (token, q head) of q [tokens, hq, d], its sequence found in qo_indptr (decode: one token a
 * sequence), its keys gathered through the sequence's pages of the caches [pages, page_size, hkv,
 * d]; ATT_PAGED_CAUSAL aligns the last query with the last key, ATT_PAGED_LAST says that
 * kv_last_page_len exists, ATT_LSE that the base-2 log-sum-exp is an output. A row that sees no key
 * gets 0 (and an lse of -inf), where a dense row of -inf scores is NaN as in eager. */

#define ATT_CPU_BN 64
#define ATT_RND(x) ATT_L(ATT_S(x))

typedef struct {
    const ATT_T *q, *k, *v;
    const ATT_TM *mask;
    ATT_T *o;
    int64_t b, hq, hkv, sq, skv;
    int64_t qb, qh, qs, kb, kh, ks, vb, vh, vs, mb, mh, ms, mk, ob, oh,
        os; /* mk: the mask's keys */
    float scale;
#if ATT_PAGED
    const int32_t *qo_indptr, *kv_indptr, *kv_indices, *last_len;
    float *lse;
    int64_t page_size;
#endif
} att_args;

/* key j's row of a cache: base + j * stride, or through the page table (pages of the sequence) */
static inline const ATT_T *att_key_row(const att_args *a, const ATT_T *base, int64_t stride,
                                       const int32_t *pages, int64_t j) {
#if ATT_PAGED
    return base + ((int64_t)pages[j / a->page_size] * a->page_size + j % a->page_size) * stride;
#else
    (void)a;
    (void)pages;
    return base + j * stride;
#endif
}

/* One query row i over keys [j0, j1) (tiles of ATT_CPU_BN from j0; a tile reads keys below lim):
 * acc gets the unnormalised output, *m_out the running max, *l_out the sum of the weights. */
static void att_cpu_row(const att_args *a, const ATT_T *qr, const ATT_T *kh, const ATT_T *vh,
                        const int32_t *pages, const ATT_TM *mrow, int64_t i, int64_t j0, int64_t j1,
                        int64_t lim, float *acc, float *m_out, float *l_out) {
    float qv[ATT_D], s[ATT_CPU_BN];
    for (int d = 0; d < ATT_D; d++) {
        qv[d] = ATT_L(qr[d]);
        acc[d] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    for (int64_t n0 = j0; n0 < j1; n0 += ATT_CPU_BN) {
        const int nn = (int)(lim - n0 < ATT_CPU_BN ? lim - n0 : ATT_CPU_BN);
        float mt = -INFINITY;
        for (int j = 0; j < nn; j++) {
            const ATT_T *kr = att_key_row(a, kh, a->ks, pages, n0 + j);
            float dot = 0.f;
            for (int d = 0; d < ATT_D; d++)
                dot += qv[d] * ATT_L(kr[d]);
#if ATT_ROUND_QK
            dot = ATT_RND(dot);
#endif
            float x = dot * a->scale;
#if ATT_ROUND_SCALED
            x = ATT_RND(x);
#endif
#if ATT_TANH /* a soft cap: / cap, tanh, then · cap, each rounded as eager rounds it */
            x *= ATT_PRE;
#if ATT_ROUND_SCALED
            x = ATT_RND(x);
#endif
            x = tanhf(x);
#if ATT_ROUND_SCALED
            x = ATT_RND(x);
#endif
            x *= ATT_POST;
#if ATT_ROUND_SCALED
            x = ATT_RND(x);
#endif
#endif
#if ATT_HAS_MASK
            x += ATT_LM(mrow[(n0 + j) * a->mk]);
#if ATT_ROUND_MASKED
            x = ATT_RND(x);
#endif
#endif
#if ATT_CAUSAL_GEN
            if (n0 + j - i > (ATT_HI))
                x = -INFINITY;
#endif
            s[j] = x;
            mt = x > mt ? x : mt;
        }
        const float mn = mt > m ? mt : m;
        /* exponents against a finite base: e^(-inf - -inf) would be NaN */
        const float base = mn == -INFINITY ? 0.f : mn;
        const float alpha = expf(m - base);
        float ls = 0.f;
        for (int d = 0; d < ATT_D; d++)
            acc[d] *= alpha;
        for (int j = 0; j < nn; j++) {
            float pj = expf(s[j] - base);
            ls += pj;
#if ATT_ROUND_P
            pj = ATT_RND(pj);
#endif
            const ATT_T *vr = att_key_row(a, vh, a->vs, pages, n0 + j);
            for (int d = 0; d < ATT_D; d++)
                acc[d] += pj * ATT_L(vr[d]);
        }
        l = l * alpha + ls;
        m = mn;
    }
    (void)mrow;
    (void)i;
    *m_out = m;
    *l_out = l;
}

#if !ATT_PAGED
static void att_cpu(const att_args *a) {
    const int64_t ratio = a->hq / a->hkv;
#pragma omp parallel for schedule(dynamic, 4) if (a->b * a->hq * a->sq * a->skv > (1 << 18))
    for (int64_t r = 0; r < a->b * a->hq * a->sq; r++) {
        const int64_t i = r % a->sq, h = (r / a->sq) % a->hq, bi = r / a->sq / a->hq;
        int64_t j0 = 0, j1 = a->skv;
#if ATT_BAND
#if ATT_HAS_LO
        j0 = i + (ATT_LO) > 0 ? (i + (ATT_LO)) / ATT_CPU_BN * ATT_CPU_BN : 0;
#endif
        j1 = i + (ATT_HI) + 1 < a->skv ? i + (ATT_HI) + 1 : a->skv;
#endif
        const ATT_TM *mrow = 0;
#if ATT_HAS_MASK
        mrow = a->mask + bi * a->mb + h * a->mh + i * a->ms;
#endif
        float acc[ATT_D], m, l;
        att_cpu_row(
            a, a->q + bi * a->qb + h * a->qh + i * a->qs, a->k + bi * a->kb + (h / ratio) * a->kh,
            a->v + bi * a->vb + (h / ratio) * a->vh, 0, mrow, i, j0, j1, a->skv, acc, &m, &l);
        ATT_T *orow = a->o + bi * a->ob + h * a->oh + i * a->os;
        for (int d = 0; d < ATT_D; d++)
            orow[d] = ATT_S(acc[d] / l);
    }
}

#else
/* Rows (token t, q head h) of a->sq tokens; a->b sequences. */
static void att_cpu_paged(const att_args *a) {
    const int64_t ratio = a->hq / a->hkv;
#pragma omp parallel for schedule(dynamic, 4) if (a->sq * a->hq * a->page_size > (1 << 14))
    for (int64_t r = 0; r < a->sq * a->hq; r++) {
        const int64_t t = r / a->hq, h = r % a->hq;
        int64_t bi = t, i = 0, q_len = 1;
#if !ATT_PAGED_DECODE
        /* the sequence holding token t: the last b with qo_indptr[b] <= t (empty ones skipped) */
        int64_t lo = 0, hi = a->b;
        while (hi - lo > 1) {
            const int64_t mid = (lo + hi) / 2;
            if (a->qo_indptr[mid] <= t)
                lo = mid;
            else
                hi = mid;
        }
        bi = lo;
        i = t - a->qo_indptr[bi];
        q_len = a->qo_indptr[bi + 1] - a->qo_indptr[bi];
#endif
        const int64_t p0 = a->kv_indptr[bi], n_pages = a->kv_indptr[bi + 1] - p0;
#if ATT_PAGED_LAST
        int64_t kv_len = n_pages > 0 ? (n_pages - 1) * a->page_size + a->last_len[bi] : 0;
#else
        int64_t kv_len = n_pages * a->page_size;
#endif
        int64_t j1 = kv_len;
#if ATT_PAGED_CAUSAL
        j1 = i + kv_len - q_len + 1 < kv_len ? i + kv_len - q_len + 1 : kv_len;
#endif
        if (j1 < 0)
            j1 = 0;
        (void)q_len;
        float acc[ATT_D], m, l;
        att_cpu_row(a, a->q + t * a->qs + h * a->qh, a->k + (h / ratio) * a->kh,
                    a->v + (h / ratio) * a->vh, a->kv_indices + p0, 0, i, 0, j1, j1, acc, &m, &l);
        ATT_T *orow = a->o + t * a->os + h * a->oh;
        const float inv = l > 0.f ? 1.f / l : 0.f;
        for (int d = 0; d < ATT_D; d++)
            orow[d] = ATT_S(acc[d] * inv);
#if ATT_LSE
        a->lse[t * a->hq + h] = l > 0.f ? (m + logf(l)) * 1.4426950408889634f : -INFINITY;
#endif
    }
}
#endif
