/* wild_pointer.cu: stores through an address nothing mapped, for tests/data/problems/softmax_f32.
 *
 * Expected outcome: crashed. */

// kiln: launch softmax_rows grid=1 block=1

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    *(volatile float *)(0x10ull) = (float)rows;
}
