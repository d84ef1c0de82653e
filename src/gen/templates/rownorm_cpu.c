/* rownorm_cpu.c: the C body of the rmsnorm and layernorm families for kiln's cpu backend: one row
 * per OpenMP iteration, statistics accumulated in double (closer to the exact value than any fp32
 * order, so as close to PyTorch's pairwise fp32 sums as a kernel can be), then the variant's
 * program in fp32 and one rounding per output, exactly as the CUDA body does (rownorm.cu).
 *
 * The generated file defines the variant before this text (element types with their conversions,
 * which of weight/bias/gate/mean/rstd exist, the programs RN_W_PROG, RN_B_PROG, RN_G_PROG,
 * RN_Y_PROG) and an entry point after it that calls rn_rows_cpu(); every #define has a default here
 * (fp32, a weight). */
#ifndef RN_KIND
#define RN_KIND 0 /* 0: rmsnorm, 1: layernorm */
#endif
#ifndef RN_X_T
#define RN_X_T float
#define RN_X_F(v) (v)
#endif
#ifndef RN_W_T
#define RN_W_T float
#define RN_W_F(v) (v)
#endif
#ifndef RN_B_T
#define RN_B_T float
#define RN_B_F(v) (v)
#endif
#ifndef RN_G_T
#define RN_G_T float
#define RN_G_F(v) (v)
#endif
#ifndef RN_Y_T
#define RN_Y_T float
#define RN_Y_OF(f) (f)
#endif
#ifndef RN_MEAN_T
#define RN_MEAN_T float
#define RN_MEAN_OF(f) (f)
#endif
#ifndef RN_RSTD_T
#define RN_RSTD_T float
#define RN_RSTD_OF(f) (f)
#endif
#ifndef RN_HAS_W
#define RN_HAS_W 1
#endif
#ifndef RN_HAS_B
#define RN_HAS_B 0
#endif
#ifndef RN_HAS_G
#define RN_HAS_G 0
#endif
#ifndef RN_HAS_MEAN
#define RN_HAS_MEAN 0
#endif
#ifndef RN_HAS_RSTD
#define RN_HAS_RSTD 0
#endif
#ifndef RN_W_PROG
#define RN_W_PROG(w) (w)
#endif
#ifndef RN_B_PROG
#define RN_B_PROG(b) (b)
#endif
#ifndef RN_G_PROG
#define RN_G_PROG(g) (g)
#endif
#ifndef RN_Y_PROG
#define RN_Y_PROG(n, w, b, g) ((n) * (w))
#endif

static inline float rn_round_bf16(float v) {
    return kiln_bf16_to_float(kiln_float_to_bf16(v));
}
static inline float rn_round_f16(float v) {
    return kiln_f16_to_float(kiln_float_to_f16(v));
}
/* PyTorch's silu in fp32: x / (1 + exp(-x)). */
static inline float rn_silu(float v) {
    return v / (1.0f + expf(-v));
}

/* rows of `cols` elements of x into y; weight/bias have `cols` elements, gate is shaped like x,
 * mean/rstd get one value per row; absent tensors are NULL. */
static void rn_rows_cpu(const RN_X_T *x, const RN_W_T *w, const RN_B_T *b, const RN_G_T *g,
                        RN_Y_T *y, RN_MEAN_T *mean_out, RN_RSTD_T *rstd_out, int64_t rows,
                        int64_t cols, float eps) {
    (void)w;
    (void)b;
    (void)g;
    (void)mean_out;
    (void)rstd_out;
    /* threads only where there is work for them: waking the pool costs more than a small tensor */
#pragma omp parallel for schedule(static) if (rows * cols >= 65536)
    for (int64_t r = 0; r < rows; r++) {
        const RN_X_T *xr = x + r * cols;
        double s = 0.0;
#if RN_KIND == 0
        for (int64_t c = 0; c < cols; c++) {
            const double f = RN_X_F(xr[c]);
            s += f * f;
        }
        const float mean = 0.0f;
        const float rstd = 1.0f / sqrtf((float)(s / (double)cols) + eps);
#else
        for (int64_t c = 0; c < cols; c++)
            s += RN_X_F(xr[c]);
        const double mean_d = s / (double)cols;
        double m2 = 0.0;
        for (int64_t c = 0; c < cols; c++) {
            const double d = RN_X_F(xr[c]) - mean_d;
            m2 += d * d;
        }
        const float mean = (float)mean_d;
        const float rstd = 1.0f / sqrtf((float)(m2 / (double)cols) + eps);
#endif
#if RN_HAS_MEAN
        mean_out[r] = RN_MEAN_OF(mean);
#endif
#if RN_HAS_RSTD
        rstd_out[r] = RN_RSTD_OF(rstd);
#endif
        for (int64_t c = 0; c < cols; c++) {
#if RN_KIND == 0
            const float n = RN_X_F(xr[c]) * rstd;
            (void)mean;
#else
            const float n = (RN_X_F(xr[c]) - mean) * rstd;
#endif
#if RN_HAS_W
            const float wv = RN_W_PROG(RN_W_F(w[c]));
#else
            const float wv = 1.0f;
#endif
#if RN_HAS_B
            const float bv = RN_B_PROG(RN_B_F(b[c]));
#else
            const float bv = 0.0f;
#endif
#if RN_HAS_G
            const float gv = RN_G_PROG(RN_G_F(g[r * cols + c]));
#else
            const float gv = 1.0f;
#endif
            (void)wv;
            (void)bv;
            (void)gv;
            y[r * cols + c] = RN_Y_OF(RN_Y_PROG(n, wv, bv, gv));
        }
    }
}
