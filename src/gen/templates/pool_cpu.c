/* pool_cpu.c: the cpu backend's bodies for kiln's pool family (average pooling over H,W of NCHW
 * and channels-last tensors), in C with OpenMP; the GPU parameters do not apply here. The emitter
 * defines POOL_TIN/POOL_TOUT and POOL_LOAD/POOL_STORE (conversions to and from float) first. */
#ifndef POOL_TIN
#define POOL_TIN float
#define POOL_LOAD(v) (v)
#endif
#ifndef POOL_TOUT
#define POOL_TOUT float
#define POOL_STORE(f) (f)
#endif

/* Parallelise only where the work pays for waking the threads (and for their barrier, which
 * spins for long on a loaded machine). */
#define POOL_CPU_PAR_MIN (1 << 20)

/* rows of len contiguous values -> one mean each. Eight running sums: vectorisable, and each adds
 * only len/8 values, which keeps the fp32 rounding error of long rows small. */
static inline void pool_cpu_rows(const POOL_TIN *x, POOL_TOUT *y, int64_t rows, int64_t len) {
#pragma omp parallel for schedule(static) if (rows * len > POOL_CPU_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const POOL_TIN *xr = x + r * len;
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t j = 0;
        for (; j + 8 <= len; j += 8)
            for (int k = 0; k < 8; k++)
                acc[k] += POOL_LOAD(xr[j + k]);
        float s = 0.f;
        for (; j < len; j++)
            s += POOL_LOAD(xr[j]);
        s += ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        y[r] = POOL_STORE(s / (float)len);
    }
}

/* [n, p, c] (channels-last, p = H*W) -> [n, c]: channels are the vector dimension; blocks of 256
 * channels keep the running sums in a small array. */
#define POOL_CPU_CBLOCK 256
static inline void pool_cpu_cl(const POOL_TIN *x, POOL_TOUT *y, int64_t n_img, int64_t p,
                               int64_t c) {
    const int64_t n_blocks = (c + POOL_CPU_CBLOCK - 1) / POOL_CPU_CBLOCK;
#pragma omp parallel for schedule(static) if (n_img * p * c > POOL_CPU_PAR_MIN)
    for (int64_t t = 0; t < n_img * n_blocks; t++) {
        const int64_t n = t / n_blocks, c0 = (t % n_blocks) * POOL_CPU_CBLOCK;
        const int64_t cn = c - c0 < POOL_CPU_CBLOCK ? c - c0 : POOL_CPU_CBLOCK;
        float acc[POOL_CPU_CBLOCK];
        for (int64_t k = 0; k < cn; k++)
            acc[k] = 0.f;
        for (int64_t q = 0; q < p; q++) {
            const POOL_TIN *xq = x + (n * p + q) * c + c0;
            for (int64_t k = 0; k < cn; k++)
                acc[k] += POOL_LOAD(xq[k]);
        }
        for (int64_t k = 0; k < cn; k++)
            y[n * c + c0 + k] = POOL_STORE(acc[k] / (float)p);
    }
}

/* Adaptive pooling to out_h x out_w; window bounds as PyTorch computes them. */
static inline void pool_cpu_window(const POOL_TIN *x, POOL_TOUT *y, int64_t rows, int64_t h,
                                   int64_t w, int64_t c, int64_t out_h, int64_t out_w,
                                   int channels_last) {
    const int64_t total = rows * out_h * out_w * c;
#pragma omp parallel for schedule(static) if (total * 4 > POOL_CPU_PAR_MIN)
    for (int64_t o = 0; o < total; o++) {
        int64_t k, ow, oh, r;
        if (channels_last) { /* o = ((r*out_h + oh)*out_w + ow)*c + k */
            k = o % c;
            ow = (o / c) % out_w;
            oh = (o / c / out_w) % out_h;
            r = o / c / out_w / out_h;
        } else { /* o = ((r*c + k)*out_h + oh)*out_w + ow, with c folded into r (c == 1) */
            ow = o % out_w;
            oh = (o / out_w) % out_h;
            r = o / out_w / out_h;
            k = 0;
        }
        const int64_t hs = oh * h / out_h, he = ((oh + 1) * h + out_h - 1) / out_h;
        const int64_t ws = ow * w / out_w, we = ((ow + 1) * w + out_w - 1) / out_w;
        float s = 0.f;
        for (int64_t i = hs; i < he; i++)
            for (int64_t j = ws; j < we; j++)
                s += POOL_LOAD(x[((r * h + i) * w + j) * c + k]);
        y[o] = POOL_STORE(s / (float)((he - hs) * (we - ws)));
    }
}
