/* batchnorm_cpu.c: inference batch normalisation (optionally with a residual add and ReLU) for
 * kiln's cpu backend: the C body the batchnorm family wraps in an entry point (src/gen/batchnorm.c
 * defines the types and flags first). The tensor is [outer, C, inner] in memory order, as on the
 * GPU; the GPU's tuning parameters do not apply here. */

#ifndef BN_TX
#define BN_TX float
#define BN_LX(v) (v)
#define BN_TW float
#define BN_LW(v) (v)
#define BN_TB float
#define BN_LB(v) (v)
#define BN_TRM float
#define BN_LRM(v) (v)
#define BN_TRV float
#define BN_LRV(v) (v)
#define BN_TR float
#define BN_LR(v) (v)
#define BN_TY float
#define BN_SY(v) (v)
#define BN_TS float
#define BN_SS(v) (v)
#endif
#ifndef BN_HAS_W
#define BN_HAS_W 1
#endif
#ifndef BN_HAS_B
#define BN_HAS_B 1
#endif
#ifndef BN_ADD
#define BN_ADD 0
#endif
#ifndef BN_RELU
#define BN_RELU 0
#endif
#ifndef BN_SAVE
#define BN_SAVE 0
#endif
#ifndef BN_MID
#define BN_MID 0
#endif

#include <stdlib.h>

static inline float bn_mid(float v) {
#if BN_MID == 1
    return kiln_bf16_to_float(kiln_float_to_bf16(v));
#elif BN_MID == 2
    return kiln_f16_to_float(kiln_float_to_f16(v));
#else
    return v;
#endif
}

/* y for one element: the affine map, then (rounded to BN's dtype) the residual, then ReLU. */
static inline float bn_out(float x, float a, float s, const BN_TR *r, int64_t i) {
    float v = fmaf(x, a, s);
#if BN_ADD
    v = bn_mid(v) + BN_LR(r[i]);
#else
    (void)r, (void)i;
#endif
#if BN_RELU
    v = v < 0.f ? 0.f : v;
#endif
    return v;
}

static void bn_cpu_run(const BN_TX *x, const BN_TW *w, const BN_TB *b, const BN_TRM *rm,
                       const BN_TRV *rv, const BN_TR *r, BN_TY *y, BN_TS *save_mean,
                       BN_TS *save_invstd, int64_t outer, int64_t C, int64_t inner, float eps) {
    float *a = malloc((size_t)(C > 0 ? C : 1) * 2 * sizeof(float)), *s = a + C;
    (void)w, (void)b, (void)save_mean, (void)save_invstd;
    for (int64_t c = 0; c < C; c++) {
        const float inv = 1.f / sqrtf(BN_LRV(rv[c]) + eps);
#if BN_HAS_W
        a[c] = inv * BN_LW(w[c]);
#else
        a[c] = inv;
#endif
#if BN_HAS_B
        s[c] = fmaf(-BN_LRM(rm[c]), a[c], BN_LB(b[c]));
#else
        s[c] = -BN_LRM(rm[c]) * a[c];
#endif
#if BN_SAVE
        save_mean[c] = BN_SS(BN_LRM(rm[c]));
        save_invstd[c] = BN_SS(inv);
#endif
    }
    if (inner == 1) {
#pragma omp parallel for schedule(static)
        for (int64_t o = 0; o < outer; o++)
            for (int64_t c = 0; c < C; c++)
                y[o * C + c] = BN_SY(bn_out(BN_LX(x[o * C + c]), a[c], s[c], r, o * C + c));
    } else {
#pragma omp parallel for schedule(static)
        for (int64_t row = 0; row < outer * C; row++) {
            const int64_t c = row % C, off = row * inner;
            for (int64_t i = off; i < off + inner; i++)
                y[i] = BN_SY(bn_out(BN_LX(x[i]), a[c], s[c], r, i));
        }
    }
    free(a);
}
