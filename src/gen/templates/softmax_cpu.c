/* softmax_cpu.c: the softmax family's C template for the cpu backend: y = softmax(x [* scale]
 * [+ mask]) over the last dimension, fp32 logits and exponentials, a double sum per row (rows of a
 * quarter million elements would lose the 1e-5 relative L2 of float32 in a float sum), rows spread
 * over OpenMP threads. The GPU geometry does not apply here; the problem's facts (dtypes, mask,
 * scale, the roundings of eager PyTorch) are the same #defines as in softmax.cu. */
#include <stdlib.h>

/* dtype codes: 0 float32, 1 bfloat16, 2 float16; -1 in a SMX_ROUND_* means "no rounding". */
#ifndef SMX_TIN
#define SMX_TIN 0
#endif
#ifndef SMX_TOUT
#define SMX_TOUT 0
#endif
#ifndef SMX_HAS_MASK
#define SMX_HAS_MASK 0
#endif
#ifndef SMX_TMASK
#define SMX_TMASK 0
#endif
#ifndef SMX_MASK_DIRECT
#define SMX_MASK_DIRECT 0
#endif
#ifndef SMX_HAS_SCALE
#define SMX_HAS_SCALE 0
#endif
#ifndef SMX_ROUND_SCALED
#define SMX_ROUND_SCALED -1
#endif
#ifndef SMX_ROUND_MASKED
#define SMX_ROUND_MASKED -1
#endif
#ifndef SMX_ROUND_RESULT
#define SMX_ROUND_RESULT -1
#endif

/* Element i of a buffer of dtype code, as float. */
static inline float smx_get(int code, const void *base, int64_t i) {
    if (code == 1)
        return kiln_bf16_to_float(((const kiln_bf16 *)base)[i]);
    if (code == 2)
        return kiln_f16_to_float(((const kiln_f16 *)base)[i]);
    return ((const float *)base)[i];
}

static inline void smx_put(int code, void *base, int64_t i, float v) {
    if (code == 1)
        ((kiln_bf16 *)base)[i] = kiln_float_to_bf16(v);
    else if (code == 2)
        ((kiln_f16 *)base)[i] = kiln_float_to_f16(v);
    else
        ((float *)base)[i] = v;
}

/* v rounded to dtype code and back (eager PyTorch's intermediate results); -1 and 0 keep v. */
static inline float smx_round(int code, float v) {
    if (code == 1)
        return kiln_bf16_to_float(kiln_float_to_bf16(v));
    if (code == 2)
        return kiln_f16_to_float(kiln_float_to_f16(v));
    return v;
}

typedef struct {
    int n;             /* leading dimensions of x, innermost first */
    int64_t size[8];   /* their sizes */
    int64_t stride[8]; /* the mask's row stride along each (0 where the mask is broadcast) */
} smx_bcast;

static inline int64_t smx_mask_row(int64_t row, const smx_bcast *mb) {
    if (SMX_MASK_DIRECT)
        return row;
    int64_t off = 0;
    for (int d = 0; d < mb->n; d++) {
        off += (row % mb->size[d]) * mb->stride[d];
        row /= mb->size[d];
    }
    return off;
}

/* x: [rows, cols]; mask: rows of cols elements, row smx_mask_row(r); y: [rows, cols]. exp(x - max)
 * against the row's max, as PyTorch computes it and as softmax.cu does per part: a row of -inf
 * gives NaN (exp(-inf - -inf)), a row of finfo.min logits (finite) is uniform, and a -inf or
 * finfo.min logit under a finite max is exactly 0. */
static void smx_softmax(const void *x, const void *mask, float scale, void *y, int64_t rows,
                        int64_t cols, const smx_bcast *mb) {
    (void)mask;
    (void)scale;
    (void)mb;
#pragma omp parallel
    {
        float *t = malloc((size_t)(cols > 0 ? cols : 1) * sizeof *t);
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            const int64_t base = r * cols;
            float m = -INFINITY;
            for (int64_t c = 0; c < cols; c++) {
                float v = smx_get(SMX_TIN, x, base + c);
                if (SMX_HAS_SCALE)
                    v = smx_round(SMX_ROUND_SCALED, v * scale);
                if (SMX_HAS_MASK)
                    v = smx_round(SMX_ROUND_MASKED,
                                  v + smx_get(SMX_TMASK, mask, smx_mask_row(r, mb) * cols + c));
                t[c] = v;
                m = v > m ? v : m;
            }
            double s = 0.0;
            for (int64_t c = 0; c < cols; c++) {
                t[c] = expf(t[c] - m);
                s += t[c];
            }
            const float inv = (float)(1.0 / s);
            for (int64_t c = 0; c < cols; c++)
                smx_put(SMX_TOUT, y, base + c, smx_round(SMX_ROUND_RESULT, t[c] * inv));
        }
        free(t);
    }
}
