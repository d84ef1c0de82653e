/* racy.cu: a softmax for tests/data/problems/softmax_f32 whose shared-memory tree reductions have
 * no __syncthreads at all. 32 warps each store a partial into red[], then halve the live range step
 * by step (red[t] += red[t + s]); without a barrier a thread in a low warp reads red[t + s] before
 * the high warp that owns that slot has stored this row's partial — it gets a stale value left by
 * the block that ran on the SM before (another row's max or sum) or a half-finished partial from
 * the step before. The max and the sum reuse the same array, so the sum's stores also overwrite
 * maxima that slow warps have not read yet. Whether a given row comes out right depends on warp
 * scheduling, which is why such a kernel can pass a single test; with 32 warps per block it is
 * wrong on most launches.
 *
 * Expected outcome: mismatch (on some workload and set; which one varies from run to run). */

// kiln: launch softmax_rows grid=rows block=1024

#define RACY_THREADS 1024

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    __shared__ float red[RACY_THREADS];
    const int64_t row = blockIdx.x;
    if (row >= rows)
        return;
    const float *xr = x + row * cols;
    float *yr = y + row * cols;
    const int t = threadIdx.x;

    float m = -__int_as_float(0x7f800000);
    for (int64_t c = t; c < cols; c += RACY_THREADS)
        m = fmaxf(m, xr[c]);
    red[t] = m;
    /* BUG: missing __syncthreads() here and after every step below */
    for (int s = RACY_THREADS / 2; s > 0; s >>= 1)
        if (t < s)
            red[t] = fmaxf(red[t], red[t + s]);
    m = red[0];

    float sum = 0.0f;
    for (int64_t c = t; c < cols; c += RACY_THREADS)
        sum += expf(xr[c] - m);
    red[t] = sum;
    for (int s = RACY_THREADS / 2; s > 0; s >>= 1)
        if (t < s)
            red[t] += red[t + s];
    sum = red[0];

    for (int64_t c = t; c < cols; c += RACY_THREADS)
        yr[c] = expf(xr[c] - m) / sum;
}
