/* gen_math.h: the scalar helpers of the generator's kernels (src/gen/ir), one text for the CPU
 * emission (C11, kiln_cpu.h included) and the CUDA emission (NVRTC, before gen.cuh): PyTorch's
 * definitions of the activations, NaN-propagating max and min, and the conversions to and from
 * the 16- and 8-bit floats, rounding to nearest even as PyTorch's casts do. The helpers that take
 * any type are macros over operands that are always names or constants in generated code. */
#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define KG_FN __device__ __forceinline__
#else
#define KG_FN static inline
#endif

/* ---- type-generic (float or int64 operands) ---- */
#define kg_isnan(a) ((a) != (a))
#define kg_isinf(a) ((a) == INFINITY || (a) == -INFINITY)
/* maximum / minimum / clamp propagate NaN, as torch.maximum and torch.clamp do */
#ifdef __CUDACC__
template <class A, class B> KG_FN auto kg_max(A a, B b) -> decltype(true ? a : b) {
    return kg_isnan(a) || a > b ? a : b;
}
template <class A, class B> KG_FN auto kg_min(A a, B b) -> decltype(true ? a : b) {
    return kg_isnan(a) || a < b ? a : b;
}
/* two floats: one instruction (sm_80's max.NaN / min.NaN: NaN when either is), not three */
KG_FN float kg_max(float a, float b) {
    float d;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}
KG_FN float kg_min(float a, float b) {
    float d;
    asm("min.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}
#else
#define kg_max(a, b) (kg_isnan(a) || (a) > (b) ? (a) : (b))
#define kg_min(a, b) (kg_isnan(a) || (a) < (b) ? (a) : (b))
#endif
#define kg_clamp(x, lo, hi) kg_min(kg_max((x), (lo)), (hi))
#define kg_relu(a) ((a) < 0 ? 0 : (a))
#define kg_abs(a) ((a) < 0 ? -(a) : (a))
#define kg_sign(a) (kg_isnan(a) ? (a) : (float)(((a) > 0) - ((a) < 0)))

/* ---- float ---- */
/* exp of an exponent that is never positive (x - max in a softmax, logsumexp's pair): on the GPU
 * ex2.approx of x * log2(e), as the softmax family (relative error ~2^-22, results below 2^-126
 * flushed to 0: a few instructions where expf is a dozen); expf on the host. */
KG_FN float kg_exp_neg(float x) {
#ifdef __CUDACC__
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
    return y;
#else
    return expf(x);
#endif
}
KG_FN float kg_rsqrt(float x) {
#ifdef __CUDACC__
    /* as PyTorch's CUDA rsqrt: the hardware's, where 1 / sqrtf is two IEEE calls */
    return rsqrtf(x);
#else
    return 1.f / sqrtf(x);
#endif
}
KG_FN float kg_sigmoid(float x) {
    return 1.f / (1.f + expf(-x));
}
KG_FN float kg_silu(float x) {
    return x / (1.f + expf(-x));
}
/* for results rounded to 16 or 8 bits after: __expf and __fdividef on the GPU (for x below about
 * -88, exp(-x) is infinite and both give 0, the limit) */
#ifdef __CUDACC__
KG_FN float kg_sigmoid_lp(float x) {
    return __fdividef(1.f, 1.f + __expf(-x));
}
KG_FN float kg_silu_lp(float x) {
    return __fdividef(x, 1.f + __expf(-x));
}
#else
#define kg_sigmoid_lp kg_sigmoid
#define kg_silu_lp kg_silu
#endif
KG_FN float kg_gelu_erf(float x) {
    return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
}
KG_FN float kg_gelu_tanh(float x) {
    return 0.5f * x * (1.f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}
KG_FN float kg_softplus(float x, float beta, float threshold) {
    return x * beta > threshold ? x : log1pf(expf(x * beta)) / beta;
}
KG_FN float kg_mish(float x) {
    return x * tanhf(log1pf(expf(x)));
}
KG_FN float kg_elu(float x, float alpha) {
    return x > 0.f ? x : alpha * expm1f(x);
}
KG_FN float kg_hardsigmoid(float x) {
    return fminf(fmaxf(x + 3.f, 0.f), 6.f) / 6.f;
}
KG_FN float kg_hardswish(float x) {
    return x * fminf(fmaxf(x + 3.f, 0.f), 6.f) / 6.f;
}
KG_FN float kg_leaky(float x, float slope) {
    return x > 0.f ? x : x * slope;
}
KG_FN float kg_pow(float a, float b) {
    return powf(a, b);
}
KG_FN float kg_div_floor(float a, float b) {
    return floorf(a / b);
}
/* floor division of integers (C's / truncates) */
KG_FN int64_t kg_idiv_floor(int64_t a, int64_t b) {
    const int64_t q = a / b;
    return q - (q * b != a && ((a < 0) != (b < 0)));
}

/* ---- bits ---- */
#ifdef __CUDACC__
#define kg_bits(f) __float_as_uint(f)
#define kg_float(u) __uint_as_float(u)
#else
#define kg_bits(f) kiln__float_bits(f)
#define kg_float(u) kiln__bits_float(u)
#endif

/* ---- 16-bit floats ---- */
#ifdef __CUDACC__
KG_FN float kg_round_bf16(float x) {
    return __bfloat162float(__float2bfloat16_rn(x));
}
KG_FN float kg_round_f16(float x) {
    return __half2float(__float2half_rn(x));
}
#else
KG_FN float kg_round_bf16(float x) {
    return kiln_bf16_to_float(kiln_float_to_bf16(x));
}
KG_FN float kg_round_f16(float x) {
    return kiln_f16_to_float(kiln_float_to_f16(x));
}
#endif

/* ---- float8 (raw bytes), as c10's Float8_e4m3fn / Float8_e5m2 ---- */
KG_FN float kg_e4m3_to_float(uint8_t b) {
    uint32_t sign = (uint32_t)(b & 0x80u) << 24, e = (b >> 3) & 0xfu, m = b & 7u;
    float v;
    if (e == 15 && m == 7)
        return kg_float(sign | 0x7fc00000u);
    if (e == 0)
        v = (float)m * 0.001953125f; /* m * 2^-9 */
    else
        v = kg_float(((e + 120u) << 23) | (m << 20));
    return sign ? -v : v;
}
/* >= 480 (and Inf) is NaN; below 2^-6 rounds in the subnormal range, through a float add */
KG_FN uint8_t kg_float_to_e4m3(float f) {
    uint32_t bits = kg_bits(f), sign = bits & 0x80000000u, res;
    bits ^= sign;
    if (bits >= (1087u << 20)) {
        res = 0x7f;
    } else if (bits < (121u << 23)) {
        bits = kg_bits(kg_float(bits) + kg_float(141u << 23));
        res = (uint8_t)(bits - (141u << 23));
    } else {
        uint32_t odd = (bits >> 20) & 1u;
        bits += ((uint32_t)(7 - 127) << 23) + 0x7ffffu + odd;
        res = (uint8_t)(bits >> 20);
    }
    return (uint8_t)(res | (sign >> 24));
}
KG_FN float kg_e5m2_to_float(uint8_t b) {
    uint32_t sign = (uint32_t)(b & 0x80u) << 24, e = (b >> 2) & 0x1fu, m = b & 3u;
    float v;
    if (e == 31)
        return kg_float(sign | (m ? 0x7fc00000u : 0x7f800000u));
    if (e == 0)
        v = (float)m * 1.52587890625e-05f; /* m * 2^-16 */
    else
        v = kg_float(((e + 112u) << 23) | (m << 21));
    return sign ? -v : v;
}
KG_FN uint8_t kg_float_to_e5m2(float f) {
    uint32_t bits = kg_bits(f), sign = bits & 0x80000000u, res;
    bits ^= sign;
    if (bits >= (143u << 23)) {
        res = bits > (255u << 23) ? 0x7f : 0x7c;
    } else if (bits < (113u << 23)) {
        bits = kg_bits(kg_float(bits) + kg_float(134u << 23));
        res = (uint8_t)(bits - (134u << 23));
    } else {
        uint32_t odd = (bits >> 21) & 1u;
        bits += ((uint32_t)(15 - 127) << 23) + 0xfffffu + odd;
        res = (uint8_t)(bits >> 21);
    }
    return (uint8_t)(res | (sign >> 24));
}
KG_FN float kg_round_e4m3(float x) {
    return kg_e4m3_to_float(kg_float_to_e4m3(x));
}
KG_FN float kg_round_e5m2(float x) {
    return kg_e5m2_to_float(kg_float_to_e5m2(x));
}
