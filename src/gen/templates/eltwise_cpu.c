/* eltwise_cpu.c: the cpu backend's helpers for kiln's eltwise family: the pointwise ops in fp32 as
 * PyTorch's CPU kernels compute them, and the rounding of 16-bit intermediates. The generator
 * appends the chain's loop (one OpenMP loop, vectorised with simd). */

/* Parallelise only where the work pays for waking the threads (and for their barrier, which
 * spins for long on a loaded machine). */
#define ELT_CPU_PAR_MIN (1 << 20)

static inline float elt_rbf(float v) {
    return kiln_bf16_to_float(kiln_float_to_bf16(v));
}
static inline float elt_rhf(float v) {
    return kiln_f16_to_float(kiln_float_to_f16(v));
}
static inline float elt_exp(float x) {
    return expf(x);
}
static inline float elt_sigmoid(float x) {
    return 1.f / (1.f + expf(-x));
}
static inline float elt_silu(float x) {
    return x / (1.f + expf(-x));
}
static inline float elt_gelu_tanh(float x) {
    const float beta = 0.7978845608028654f, kappa = 0.044715f;
    return 0.5f * x * (1.f + tanhf(beta * (x + kappa * x * x * x)));
}
static inline float elt_gelu_erf(float x) {
    return x * 0.5f * (1.f + erff(x * 0.70710678118654752f));
}
static inline float elt_tanh16(float x) {
    return tanhf(x);
}
static inline float elt_rsqrt(float x) {
    return 1.f / sqrtf(x);
}
static inline float elt_relu(float x) {
    return x < 0.f ? 0.f : x; /* NaN stays NaN */
}
static inline float elt_leaky(float x, float slope) {
    return x > 0.f ? x : x * slope;
}
static inline float elt_clamp(float x, float lo, float hi) {
    return isnan(x) ? x : fminf(fmaxf(x, lo), hi);
}
static inline float elt_max(float a, float b) {
    return isnan(a) || isnan(b) ? a + b : fmaxf(a, b);
}
static inline float elt_min(float a, float b) {
    return isnan(a) || isnan(b) ? a + b : fminf(a, b);
}
