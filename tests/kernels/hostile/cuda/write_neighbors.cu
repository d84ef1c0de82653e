/* write_neighbors.cu: zeroes the memory after its output, then writes zeros itself, for
 * tests/data/problems/softmax_f32.
 *
 * If the reference outputs of a device-side proof sat right after the candidate's output, zeroing
 * them and the output alike would make every comparison agree. kiln's candidate buffers end at an
 * unmapped guard region, so the first store past the end faults (and the reference is masked: a
 * zero there does not decode to zero).
 *
 * Expected outcome: crashed. */

// kiln: launch softmax_rows grid=64 block=256

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    const int64_t n = rows * cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < 2 * n + (1 << 22);
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = 0.0f;
}
