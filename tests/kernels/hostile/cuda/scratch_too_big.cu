/* scratch_too_big.cu: declares a petabyte of scratch memory, for tests/data/problems/softmax_f32.
 *
 * Scratch is allocated (and zeroed) by kiln before every run; an amount no device has is refused
 * before anything runs.
 *
 * Expected outcome: resource. */

// kiln: launch softmax_rows grid=rows block=32
// kiln: scratch 1125899906842624

extern "C" __global__ void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols,
                                        void *kiln_scratch) {
    y[blockIdx.x * cols] = x[blockIdx.x * cols];
}
