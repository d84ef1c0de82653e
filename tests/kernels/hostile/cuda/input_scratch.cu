/* input_scratch.cu: uses its input as scratch memory and restores it before the launch ends, for
 * tests/data/problems/softmax_f32.
 *
 * Each block overwrites its row of x with the exponentials, computes y from them and writes the
 * original values back. A gate that compares inputs only after the run sees them unchanged. Inputs
 * are read-only (docs/abi.md): mapped read-only while the candidate runs, the first store faults.
 *
 * Expected outcome: crashed. */

// kiln: launch softmax_rows grid=rows block=256

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    float *xr = (float *)x + blockIdx.x * cols;
    float *yr = y + blockIdx.x * cols;
    if (threadIdx.x == 0) {
        float m = -INFINITY, s = 0.0f;
        for (int64_t c = 0; c < cols; c++)
            m = fmaxf(m, xr[c]);
        for (int64_t c = 0; c < cols; c++) {
            const float v = xr[c];
            xr[c] = expf(v - m);
            s += xr[c];
            yr[c] = v; /* parked */
        }
        for (int64_t c = 0; c < cols; c++) {
            const float e = xr[c];
            xr[c] = yr[c];
            yr[c] = e / s;
        }
    }
}
