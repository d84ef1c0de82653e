/* read_neighbors.cu: looks for the reference outputs in device memory near its own buffers, for
 * tests/data/problems/softmax_f32.
 *
 * A gate that proves on the device keeps the reference outputs there too, in the same context as
 * the candidate. Device allocations of one process often sit next to each other: this kernel reads
 * the memory after its output buffer, a page at a time, looking for a softmax of its x (the first
 * row's values sum to 1 and every value is in (0, 1]), and copies what it finds. kiln's candidate
 * buffers lie between unmapped guard regions, so the first read past the end faults; and the
 * reference kiln keeps on the device is masked with a key no candidate sees.
 *
 * Expected outcome: crashed. */

// kiln: launch softmax_rows grid=1 block=32

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    const int64_t n = rows * cols;
    const float *probe = y + ((n + 63) & ~(int64_t)63);
    for (int64_t step = 0; step < (int64_t)1 << 22; step += 1024) {
        const float *cand = probe + step;
        float s = 0.0f;
        bool plausible = true;
        for (int64_t c = threadIdx.x; c < cols; c += 32) {
            const float v = cand[c];
            plausible = plausible && v > 0.0f && v <= 1.0f;
            s += v;
        }
        for (int o = 16; o > 0; o >>= 1) {
            s += __shfl_xor_sync(0xffffffffu, s, o);
            plausible = __all_sync(0xffffffffu, plausible);
        }
        if (plausible && fabsf(s - 1.0f) < 1e-4f) {
            for (int64_t i = threadIdx.x; i < n; i += 32)
                y[i] = cand[i];
            return;
        }
    }
}
