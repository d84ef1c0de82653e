/* wild_pointer.c: stores through an address that was never mapped, for
 * tests/data/problems/softmax_f32.
 *
 * Expected outcome: crashed. */

// kiln: launch softmax_rows

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    (void)x, (void)y, (void)rows, (void)cols;
    volatile float *wild = (volatile float *)(unsigned long)0x1000;
    *wild = 1.0f;
}
