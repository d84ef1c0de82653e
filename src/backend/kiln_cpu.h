/* kiln_cpu.h: the header every CPU candidate is compiled with (docs/abi.md): the standard headers
 * it may rely on, the 16-bit float storage types and their conversions (round to nearest even, NaN
 * kept). */
#ifndef KILN_CPU_H
#define KILN_CPU_H

#include <stdint.h>
#include <stdbool.h>
#include <math.h>
#include <omp.h>

/* Raw bits of a bfloat16 / IEEE half; arithmetic happens in float. */
typedef uint16_t kiln_bf16;
typedef uint16_t kiln_f16;

static inline uint32_t kiln__float_bits(float f) {
    union {
        float f;
        uint32_t u;
    } v;
    v.f = f;
    return v.u;
}

static inline float kiln__bits_float(uint32_t u) {
    union {
        uint32_t u;
        float f;
    } v;
    v.u = u;
    return v.f;
}

/* bfloat16 is the top half of a float: widening is exact. */
static inline float kiln_bf16_to_float(kiln_bf16 h) {
    return kiln__bits_float((uint32_t)h << 16);
}

/* Rounds to nearest even; a NaN stays a NaN (quieted, sign kept) instead of rounding to Inf. */
static inline kiln_bf16 kiln_float_to_bf16(float f) {
    uint32_t u = kiln__float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (kiln_bf16)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (kiln_bf16)(u >> 16);
}

/* Exact: every half (subnormals, Inf, NaN payloads) is a float. */
static inline float kiln_f16_to_float(kiln_f16 h) {
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t exp = ((uint32_t)h >> 10) & 0x1fu;
    uint32_t mant = (uint32_t)h & 0x3ffu;
    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24, exact in float */
        float v = (float)mant * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (exp == 31)
        return kiln__bits_float(sign | 0x7f800000u | (mant << 13));
    return kiln__bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

/* Rounds to nearest even; overflow goes to Inf, tiny values to (signed) zero, NaN stays NaN. */
static inline kiln_f16 kiln_float_to_f16(float f) {
    uint32_t u = kiln__float_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: quiet it, keep the top of the payload */
        return (kiln_f16)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* >= 65520 rounds past 65504: Inf (also Inf itself) */
        return (kiln_f16)(sign | 0x7c00u);
    if (a >= 0x38800000u) { /* normal half: drop 13 mantissa bits, rounding to even */
        uint32_t r = (a >> 13) - (112u << 10);
        uint32_t rem = a & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (r & 1u)))
            r++; /* a carry into the exponent is the right answer */
        return (kiln_f16)(sign | r);
    }
    if (a <= 0x33000000u) /* <= 2^-25: rounds to zero (2^-25 itself ties to even, 0) */
        return (kiln_f16)sign;
    /* subnormal half: value / 2^-24, rounded to even */
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14 .. 24 */
    uint32_t r = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u)))
        r++;
    return (kiln_f16)(sign | r);
}

/* fp8 bytes widened to float (exact: every fp8 value is a float). e4m3fn: bias 7, no Inf, only
 * S.1111.111 is NaN; e5m2: bias 15, IEEE-like (Inf and NaN in the top exponent). */
static inline float kiln_e4m3_to_float(uint8_t b) {
    uint32_t sign = ((uint32_t)b & 0x80u) << 24, e = ((uint32_t)b >> 3) & 0xfu,
             m = (uint32_t)b & 7u;
    if (e == 15u && m == 7u)
        return kiln__bits_float(sign | 0x7fc00000u);
    if (e == 0u) { /* zero or subnormal: m * 2^-9 */
        float v = (float)m * 0.001953125f;
        return sign ? -v : v;
    }
    return kiln__bits_float(sign | ((e + 120u) << 23) | (m << 20));
}

static inline float kiln_e5m2_to_float(uint8_t b) {
    /* e5m2 is the top byte of an IEEE half */
    return kiln_f16_to_float((kiln_f16)((uint32_t)b << 8));
}

#endif
