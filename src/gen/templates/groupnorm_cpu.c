/* groupnorm_cpu.c: group normalisation over [N, C, *] (optionally with SiLU) for kiln's cpu
 * backend: the C body the groupnorm family wraps in an entry point (src/gen/groupnorm.c defines the
 * types and flags first). The GPU's tuning parameters do not apply here.
 *
 * Same arithmetic as the CUDA template: every row (batch, group) is cut into chunks whose exact
 * two-pass (mean, M2) run in parallel, merged per row in a fixed order with Chan's formula (so
 * the result does not depend on the thread count); then y = x * a + b' per channel segment. */

#ifndef GN_TX
#define GN_TX float
#define GN_LX(v) (v)
#define GN_TW float
#define GN_LW(v) (v)
#define GN_TB float
#define GN_LB(v) (v)
#define GN_TY float
#define GN_SY(v) (v)
#define GN_TM float
#define GN_SM(v) (v)
#endif
#ifndef GN_HAS_W
#define GN_HAS_W 1
#endif
#ifndef GN_HAS_B
#define GN_HAS_B 1
#endif
#ifndef GN_HAS_STATS
#define GN_HAS_STATS 0
#endif
#ifndef GN_ADD
#define GN_ADD 0
#endif
#ifndef GN_SILU
#define GN_SILU 0
#endif
#ifndef GN_MID
#define GN_MID 0
#endif

#include <stdlib.h>

/* Elements per unit of parallel work. */
#define GN_CPU_CHUNK 8192

static inline float gn_mid(float v) {
#if GN_MID == 1
    return kiln_bf16_to_float(kiln_float_to_bf16(v));
#elif GN_MID == 2
    return kiln_f16_to_float(kiln_float_to_f16(v));
#else
    return v;
#endif
}

static inline float gn_act(float v) {
    v = gn_mid(v);
#if GN_SILU == 1
    v = gn_mid(v / (1.f + expf(-v)));
#elif GN_SILU == 2
    v = gn_mid(v * gn_mid(1.f / (1.f + expf(-v))));
#endif
    return v;
}

#if GN_ADD
/* s = a + b rounded into s's type, as PyTorch's add: the group norm's x (the sum output with
 * GN_ADD 1, a buffer of the entry's with GN_ADD 2). */
static void gn_cpu_add(const GN_TX *a, const GN_TX *b, GN_TS *s, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        s[i] = GN_SS(GN_LX(a[i]) + GN_LX(b[i]));
}
#endif

typedef struct {
    float n, mean, m2;
} gn_stats;

static inline gn_stats gn_merge(gn_stats a, gn_stats b) {
    float n = a.n + b.n;
    if (n == 0.f)
        return a;
    float delta = b.mean - a.mean, r = b.n / n;
    gn_stats o = {n, fmaf(delta, r, a.mean), a.m2 + b.m2 + delta * delta * a.n * r};
    return o;
}

static void gn_cpu_run(const GN_TX *x, const GN_TW *w, const GN_TB *b, GN_TY *y, GN_TM *mean_out,
                       GN_TM *rstd_out, int64_t N, int64_t C, int64_t HW, int G, float eps) {
    const int64_t cg = C / G, M = cg * HW, rows = N * G;
    const int64_t per_row = (M + GN_CPU_CHUNK - 1) / GN_CPU_CHUNK, n_work = rows * per_row;
    gn_stats *part = malloc((size_t)(n_work > 0 ? n_work : 1) * sizeof *part);
    float *mean = malloc((size_t)(rows > 0 ? rows : 1) * 2 * sizeof(float)), *rstd = mean + rows;
    (void)w, (void)b, (void)mean_out, (void)rstd_out;

#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < n_work; k++) {
        const int64_t row = k / per_row, lo = (k % per_row) * GN_CPU_CHUNK;
        const int64_t hi = lo + GN_CPU_CHUNK < M ? lo + GN_CPU_CHUNK : M;
        const GN_TX *xr = x + row * M;
        float sum = 0.f, m2 = 0.f;
        for (int64_t i = lo; i < hi; i++)
            sum += GN_LX(xr[i]);
        const float mu = sum / (float)(hi - lo);
        for (int64_t i = lo; i < hi; i++) {
            float d = GN_LX(xr[i]) - mu;
            m2 += d * d;
        }
        gn_stats s = {(float)(hi - lo), mu, m2};
        part[k] = s;
    }
    for (int64_t row = 0; row < rows; row++) {
        gn_stats s = {0.f, 0.f, 0.f};
        for (int64_t k = 0; k < per_row; k++)
            s = gn_merge(s, part[row * per_row + k]);
        float var = s.n > 0.f ? s.m2 / s.n : 0.f;
        mean[row] = s.mean;
        rstd[row] = 1.f / sqrtf((var > 0.f ? var : 0.f) + eps);
#if GN_HAS_STATS
        mean_out[row] = GN_SM(mean[row]);
        rstd_out[row] = GN_SM(rstd[row]);
#endif
    }
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < n_work; k++) {
        const int64_t row = k / per_row, lo = (k % per_row) * GN_CPU_CHUNK;
        const int64_t hi = lo + GN_CPU_CHUNK < M ? lo + GN_CPU_CHUNK : M;
        const GN_TX *xr = x + row * M;
        GN_TY *yr = y + row * M;
        const int64_t c0 = (row % G) * cg;
        for (int64_t i = lo; i < hi;) {
            /* one channel segment: the coefficients are constant over it */
            const int64_t c = c0 + i / HW, end = (i / HW + 1) * HW < hi ? (i / HW + 1) * HW : hi;
#if GN_HAS_W
            const float a = rstd[row] * GN_LW(w[c]);
#else
            const float a = rstd[row];
#endif
#if GN_HAS_B
            const float sh = fmaf(-a, mean[row], GN_LB(b[c]));
#else
            const float sh = -a * mean[row];
#endif
            (void)c;
            for (; i < end; i++)
                yr[i] = GN_SY(gn_act(fmaf(GN_LX(xr[i]), a, sh)));
        }
    }
    free(part);
    free(mean);
}
