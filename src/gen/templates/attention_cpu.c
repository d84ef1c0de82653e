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
 * masked scores, and the probabilities cast before the second matmul). */

#define ATT_CPU_BN 64
#define ATT_RND(x) ATT_L(ATT_S(x))

typedef struct {
    const ATT_T *q, *k, *v;
    const ATT_TM *mask;
    ATT_T *o;
    int64_t b, hq, hkv, sq, skv;
    int64_t qb, qh, qs, kb, kh, ks, vb, vh, vs, mb, mh, ms, ob, oh, os;
    float scale;
} att_args;

static void att_cpu(const att_args *a) {
    const int64_t ratio = a->hq / a->hkv;
#pragma omp parallel for schedule(dynamic, 4) if (a->b * a->hq * a->sq * a->skv > (1 << 18))
    for (int64_t r = 0; r < a->b * a->hq * a->sq; r++) {
        const int64_t i = r % a->sq, h = (r / a->sq) % a->hq, bi = r / a->sq / a->hq;
        const ATT_T *qr = a->q + bi * a->qb + h * a->qh + i * a->qs;
        const ATT_T *kh = a->k + bi * a->kb + (h / ratio) * a->kh;
        const ATT_T *vh = a->v + bi * a->vb + (h / ratio) * a->vh;
        float qv[ATT_D], acc[ATT_D], s[ATT_CPU_BN];
        for (int d = 0; d < ATT_D; d++) {
            qv[d] = ATT_L(qr[d]);
            acc[d] = 0.f;
        }
        float m = -INFINITY, l = 0.f;
        int64_t j0 = 0, j1 = a->skv;
#if ATT_BAND
#if ATT_HAS_LO
        j0 = i + (ATT_LO) > 0 ? (i + (ATT_LO)) / ATT_CPU_BN * ATT_CPU_BN : 0;
#endif
        j1 = i + (ATT_HI) + 1 < a->skv ? i + (ATT_HI) + 1 : a->skv;
#endif
        for (int64_t n0 = j0; n0 < j1; n0 += ATT_CPU_BN) {
            const int nn = (int)(a->skv - n0 < ATT_CPU_BN ? a->skv - n0 : ATT_CPU_BN);
            float mt = -INFINITY;
            for (int j = 0; j < nn; j++) {
                const ATT_T *kr = kh + (n0 + j) * a->ks;
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
#if ATT_HAS_MASK
                x += ATT_LM(a->mask[bi * a->mb + h * a->mh + i * a->ms + n0 + j]);
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
                const ATT_T *vr = vh + (n0 + j) * a->vs;
                for (int d = 0; d < ATT_D; d++)
                    acc[d] += pj * ATT_L(vr[d]);
            }
            l = l * alpha + ls;
            m = mn;
        }
        ATT_T *orow = a->o + bi * a->ob + h * a->oh + i * a->os;
        for (int d = 0; d < ATT_D; d++)
            orow[d] = ATT_S(acc[d] / l);
    }
}
