/* good_scale.c: a correct CPU candidate for tests/data/problems/scale_bf16, y = bf16(float(x) *
 * alpha).
 *
 * It has no launch line on purpose: on the cpu backend that means one call of `kiln_kernel`
 * (abi.md, 2). alpha is a float32 scalar, passed by value as a float. The product is formed in
 * float32 and rounded to bfloat16 to nearest even, exactly as PyTorch does, so the result is
 * bit-identical to the reference.
 *
 * Expected outcome: ok. */

void kiln_kernel(const kiln_bf16 *x, float alpha, kiln_bf16 *y, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 16384)
    for (int64_t i = 0; i < n; i++)
        y[i] = kiln_float_to_bf16(kiln_bf16_to_float(x[i]) * alpha);
}
