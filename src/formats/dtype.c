/* dtype.c: the element types' tables (sizes, names) and exact conversions between them and double.
 */
#include "dtype.h"

#include "../util/common.h"

#include <math.h>
#include <string.h>

/*
 * One table row per type. The small float formats are all described by one struct (exponent and
 * mantissa widths, bias, how the top exponent is used) so that a single encoder and decoder serve
 * float16, bfloat16, float8 and float4 alike; the encoder rounds in double arithmetic, which is
 * exact for these widths, so storing a double never rounds twice.
 */
typedef enum {
    MF_IEEE,  /* top exponent = Inf (mantissa 0) / NaN: float16, bfloat16, float8_e5m2 */
    MF_FN,    /* e4m3fn: top exponent holds numbers, only S.1111.111 is NaN; no Inf; saturates */
    MF_NONAN, /* e2m1: every code is a number; saturates, NaN goes to +max */
} mf_kind;

typedef struct {
    int ebits, mbits, bias;
    mf_kind kind;
} minifloat;

static const minifloat MF_F16 = {5, 10, 15, MF_IEEE};
static const minifloat MF_BF16 = {8, 7, 127, MF_IEEE};
static const minifloat MF_E4M3 = {4, 3, 7, MF_FN};
static const minifloat MF_E5M2 = {5, 2, 15, MF_IEEE};
static const minifloat MF_E2M1 = {2, 1, 1, MF_NONAN};

typedef struct {
    size_t size;
    const char *name;    /* SOL-ExecBench */
    const char *st_name; /* safetensors; NULL when the format cannot name it */
    const char *c_type;  /* a scalar of this type as a candidate receives it (docs/abi.md) */
    int is_float;
    /* An element in a kernel: CUDA's type and conversions (cuda_fp16.h, cuda_bf16.h), and the cpu
     * backend's (kiln_cpu.h). The 8- and 4-bit floats are raw bytes in both; the cpu backend widens
     * fp8 to float (a GEMM's inputs) and rounds nothing to them. */
    kiln_kernel_type cuda, cpu;
} dtype_info;

#define RAW_BYTES                                                                                  \
    { "uint8_t", NULL, NULL }
#define PLAIN(type)                                                                                \
    { type, "", "" }

static const dtype_info DTYPES[KILN_DTYPE_COUNT] = {
    [KILN_F64] = {8, "float64", "F64", "double", 1, PLAIN("double"), PLAIN("double")},
    [KILN_F32] = {4, "float32", "F32", "float", 1, PLAIN("float"), PLAIN("float")},
    [KILN_F16] = {2,
                  "float16",
                  "F16",
                  "float",
                  1,
                  {"__half", "__half2float", "__float2half_rn"},
                  {"kiln_f16", "kiln_f16_to_float", "kiln_float_to_f16"}},
    [KILN_BF16] = {2,
                   "bfloat16",
                   "BF16",
                   "float",
                   1,
                   {"__nv_bfloat16", "__bfloat162float", "__float2bfloat16_rn"},
                   {"kiln_bf16", "kiln_bf16_to_float", "kiln_float_to_bf16"}},
    [KILN_F8_E4M3] = {1,
                      "float8_e4m3fn",
                      "F8_E4M3",
                      "float",
                      1,
                      RAW_BYTES,
                      {"uint8_t", "kiln_e4m3_to_float", NULL}},
    [KILN_F8_E5M2] = {1,
                      "float8_e5m2",
                      "F8_E5M2",
                      "float",
                      1,
                      RAW_BYTES,
                      {"uint8_t", "kiln_e5m2_to_float", NULL}},
    /* One fp4 value per byte: safetensors has no such type. */
    [KILN_F4_E2M1] = {1, "float4_e2m1", NULL, "float", 1, RAW_BYTES, RAW_BYTES},
    /* safetensors "F4" counts 4-bit values; safetensors.c converts the last dimension. */
    [KILN_F4_E2M1X2] = {1, "float4_e2m1fn_x2", "F4", "float", 1, RAW_BYTES, RAW_BYTES},
    [KILN_I64] = {8, "int64", "I64", "int64_t", 0, PLAIN("int64_t"), PLAIN("int64_t")},
    [KILN_I32] = {4, "int32", "I32", "int32_t", 0, PLAIN("int32_t"), PLAIN("int32_t")},
    [KILN_I16] = {2, "int16", "I16", "int32_t", 0, PLAIN("int16_t"), PLAIN("int16_t")},
    [KILN_I8] = {1, "int8", "I8", "int32_t", 0, PLAIN("int8_t"), PLAIN("int8_t")},
    [KILN_U8] = {1, "uint8", "U8", "int32_t", 0, PLAIN("uint8_t"), PLAIN("uint8_t")},
    [KILN_BOOL] = {1, "bool", "BOOL", "bool", 0, PLAIN("bool"), PLAIN("bool")},
};

/* PyTorch's other names for the same types (torch.float is torch.float32, ...). */
static const struct {
    const char *alias;
    kiln_dtype t;
} TORCH_ALIASES[] = {
    {"float", KILN_F32}, {"double", KILN_F64}, {"half", KILN_F16},
    {"long", KILN_I64},  {"int", KILN_I32},    {"short", KILN_I16},
};

static int valid(kiln_dtype t) {
    return (int)t >= 0 && t < KILN_DTYPE_COUNT;
}

size_t kiln_dtype_size(kiln_dtype t) {
    KILN_ASSERT(valid(t));
    return DTYPES[t].size;
}

const char *kiln_dtype_name(kiln_dtype t) {
    return valid(t) ? DTYPES[t].name : "invalid";
}

const char *kiln_dtype_st_name(kiln_dtype t) {
    return valid(t) ? DTYPES[t].st_name : NULL;
}

int kiln_dtype_parse(const char *name, kiln_dtype *out) {
    for (int t = 0; t < KILN_DTYPE_COUNT; t++) {
        if (strcmp(name, DTYPES[t].name) == 0) {
            *out = (kiln_dtype)t;
            return 0;
        }
    }
    return -1;
}

int kiln_dtype_parse_st(const char *name, kiln_dtype *out) {
    for (int t = 0; t < KILN_DTYPE_COUNT; t++) {
        if (DTYPES[t].st_name && strcmp(name, DTYPES[t].st_name) == 0) {
            *out = (kiln_dtype)t;
            return 0;
        }
    }
    return -1;
}

int kiln_dtype_parse_torch(const char *name, kiln_dtype *out) {
    if (strncmp(name, "torch.", 6) == 0)
        name += 6;
    for (size_t i = 0; i < sizeof TORCH_ALIASES / sizeof TORCH_ALIASES[0]; i++) {
        if (strcmp(name, TORCH_ALIASES[i].alias) == 0) {
            *out = TORCH_ALIASES[i].t;
            return 0;
        }
    }
    return kiln_dtype_parse(name, out);
}

int kiln_dtype_is_float(kiln_dtype t) {
    return valid(t) && DTYPES[t].is_float;
}

int kiln_dtype_is_fp8(kiln_dtype t) {
    return t == KILN_F8_E4M3 || t == KILN_F8_E5M2;
}

const char *kiln_dtype_c_type(kiln_dtype t) {
    return valid(t) ? DTYPES[t].c_type : "void";
}

kiln_kernel_type kiln_dtype_kernel_type(kiln_dtype t, int cuda) {
    KILN_ASSERT(valid(t));
    return cuda ? DTYPES[t].cuda : DTYPES[t].cpu;
}

/* ---- small floats ---- */

static double mf_max_finite(const minifloat *f) {
    int emax = (1 << f->ebits) - 1 - f->bias;          /* exponent of the top exponent field */
    double top_mantissa = 2.0 - ldexp(1.0, -f->mbits); /* 1.11...1 */
    switch (f->kind) {
    case MF_IEEE:
        return ldexp(top_mantissa, emax - 1); /* the top field is Inf/NaN */
    case MF_FN:
        return ldexp(top_mantissa - ldexp(1.0, -f->mbits), emax); /* 1.11..10 */
    case MF_NONAN:
        return ldexp(top_mantissa, emax);
    }
    return 0;
}

static double mf_decode(const minifloat *f, uint32_t bits) {
    uint32_t mmask = (1u << f->mbits) - 1, emask = (1u << f->ebits) - 1;
    int negative = (bits >> (f->ebits + f->mbits)) & 1;
    uint32_t e = (bits >> f->mbits) & emask, m = bits & mmask;
    double v;
    if (f->kind == MF_IEEE && e == emask)
        v = m ? NAN : INFINITY;
    else if (f->kind == MF_FN && e == emask && m == mmask)
        v = NAN;
    else if (e == 0)
        v = ldexp((double)m, 1 - f->bias - f->mbits);
    else
        v = ldexp(1.0 + ldexp((double)m, -f->mbits), (int)e - f->bias);
    return negative ? -v : v;
}

static uint32_t mf_encode(const minifloat *f, double v) {
    uint32_t sign = signbit(v) ? 1u << (f->ebits + f->mbits) : 0;
    uint32_t emask = (1u << f->ebits) - 1, mmask = (1u << f->mbits) - 1;
    double maxf = mf_max_finite(f);
    uint32_t max_bits = f->kind == MF_FN     ? (emask << f->mbits) | (mmask - 1)
                        : f->kind == MF_IEEE ? ((emask - 1) << f->mbits) | mmask
                                             : (emask << f->mbits) | mmask;
    if (isnan(v)) {
        switch (f->kind) {
        case MF_IEEE:
            return sign | (emask << f->mbits) | (1u << (f->mbits - 1)); /* quiet NaN */
        case MF_FN:
            return sign | (emask << f->mbits) | mmask;
        case MF_NONAN:
            return max_bits;
        }
    }
    double a = fabs(v);
    if (a == 0)
        return sign;
    int emin = 1 - f->bias, e = emin;
    if (!isinf(a)) {
        frexp(a, &e);
        e -= 1; /* a is in [2^e, 2^(e+1)) */
        if (e < emin)
            e = emin;
        /* Dividing by a power of two is exact; nearbyint rounds half to even. */
        double quantum = ldexp(1.0, e - f->mbits);
        a = nearbyint(a / quantum) * quantum;
    }
    if (a > maxf)
        return f->kind == MF_IEEE ? sign | (emask << f->mbits) : sign | max_bits;
    if (a < ldexp(1.0, emin)) /* subnormal (or rounded to zero) */
        return sign | (uint32_t)ldexp(a, f->mbits - emin);
    frexp(a, &e);
    e -= 1;
    uint32_t m = (uint32_t)ldexp(a, f->mbits - e) - (1u << f->mbits);
    return sign | ((uint32_t)(e + f->bias) << f->mbits) | m;
}

float kiln_bf16_to_f32(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

uint16_t kiln_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x0040u); /* keep it a NaN even when the payload is low */
    x += 0x7fffu + ((x >> 16) & 1u);            /* round half to even; a carry may reach Inf */
    return (uint16_t)(x >> 16);
}

float kiln_f16_to_f32(uint16_t h) {
    return (float)mf_decode(&MF_F16, h);
}

uint16_t kiln_f32_to_f16(float f) {
    return (uint16_t)mf_encode(&MF_F16, (double)f);
}

static uint16_t double_to_bf16(double v) {
    float f = (float)v;
    if ((double)f == v || isnan(v))
        return kiln_f32_to_bf16(f);
    return (uint16_t)mf_encode(&MF_BF16, v); /* avoid rounding twice through float */
}

/* Integers round half to even and saturate; NaN stores 0. */
static double int_clamp(double v, double lo, double hi) {
    if (isnan(v))
        return 0;
    v = nearbyint(v);
    return v < lo ? lo : v > hi ? hi : v;
}

double kiln_dtype_load(kiln_dtype t, const void *base, size_t i) {
    const unsigned char *p = base;
    switch (t) {
    case KILN_F64: {
        double v;
        memcpy(&v, p + 8 * i, 8);
        return v;
    }
    case KILN_F32: {
        float v;
        memcpy(&v, p + 4 * i, 4);
        return v;
    }
    case KILN_F16:
    case KILN_BF16: {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        return t == KILN_F16 ? mf_decode(&MF_F16, h) : kiln_bf16_to_f32(h);
    }
    case KILN_F8_E4M3:
        return mf_decode(&MF_E4M3, p[i]);
    case KILN_F8_E5M2:
        return mf_decode(&MF_E5M2, p[i]);
    case KILN_F4_E2M1:
        return mf_decode(&MF_E2M1, p[i] & 0xfu);
    case KILN_F4_E2M1X2:
        return mf_decode(&MF_E2M1, (p[i / 2] >> (4 * (i % 2))) & 0xfu);
    case KILN_I64: {
        int64_t v;
        memcpy(&v, p + 8 * i, 8);
        return (double)v;
    }
    case KILN_I32: {
        int32_t v;
        memcpy(&v, p + 4 * i, 4);
        return v;
    }
    case KILN_I16: {
        int16_t v;
        memcpy(&v, p + 2 * i, 2);
        return v;
    }
    case KILN_I8:
        return (int8_t)p[i];
    case KILN_U8:
        return p[i];
    case KILN_BOOL:
        return p[i] != 0;
    case KILN_DTYPE_COUNT:
        break;
    }
    KILN_ASSERT(!"kiln_dtype_load: invalid dtype");
    return 0;
}

void kiln_dtype_store(kiln_dtype t, void *base, size_t i, double v) {
    unsigned char *p = base;
    switch (t) {
    case KILN_F64:
        memcpy(p + 8 * i, &v, 8);
        return;
    case KILN_F32: {
        float f = (float)v;
        memcpy(p + 4 * i, &f, 4);
        return;
    }
    case KILN_F16:
    case KILN_BF16: {
        uint16_t h = t == KILN_F16 ? (uint16_t)mf_encode(&MF_F16, v) : double_to_bf16(v);
        memcpy(p + 2 * i, &h, 2);
        return;
    }
    case KILN_F8_E4M3:
        p[i] = (unsigned char)mf_encode(&MF_E4M3, v);
        return;
    case KILN_F8_E5M2:
        p[i] = (unsigned char)mf_encode(&MF_E5M2, v);
        return;
    case KILN_F4_E2M1:
        p[i] = (unsigned char)mf_encode(&MF_E2M1, v);
        return;
    case KILN_F4_E2M1X2: {
        unsigned shift = 4 * (unsigned)(i % 2);
        unsigned char nibble = (unsigned char)mf_encode(&MF_E2M1, v);
        p[i / 2] = (unsigned char)((p[i / 2] & ~(0xfu << shift)) | (unsigned)nibble << shift);
        return;
    }
    case KILN_I64: {
        /* 2^63 is exact in double; anything at or above it saturates. */
        int64_t x;
        if (isnan(v))
            x = 0;
        else if (v >= 9223372036854775808.0)
            x = INT64_MAX;
        else if (v < -9223372036854775808.0)
            x = INT64_MIN;
        else
            x = (int64_t)nearbyint(v);
        memcpy(p + 8 * i, &x, 8);
        return;
    }
    case KILN_I32: {
        int32_t x = (int32_t)int_clamp(v, INT32_MIN, INT32_MAX);
        memcpy(p + 4 * i, &x, 4);
        return;
    }
    case KILN_I16: {
        int16_t x = (int16_t)int_clamp(v, INT16_MIN, INT16_MAX);
        memcpy(p + 2 * i, &x, 2);
        return;
    }
    case KILN_I8:
        p[i] = (unsigned char)(int8_t)int_clamp(v, INT8_MIN, INT8_MAX);
        return;
    case KILN_U8:
        p[i] = (unsigned char)int_clamp(v, 0, UINT8_MAX);
        return;
    case KILN_BOOL:
        p[i] = v != 0;
        return; /* NaN is true, as in PyTorch */
    case KILN_DTYPE_COUNT:
        break;
    }
    KILN_ASSERT(!"kiln_dtype_store: invalid dtype");
}
