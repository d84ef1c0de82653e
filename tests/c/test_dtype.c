/* test_dtype.c: dtype tables and conversions, checked exhaustively and against values PyTorch
 * wrote. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "formats/dtype.h"
#include "formats/safetensors.h"

/* tests/data/formats/python_minifloats.safetensors holds every float8 code, a sample of float16 and
 * bfloat16 codes, each with PyTorch's float64 value, and float32 inputs with PyTorch's rounding to
 * each type (generated once by tests/data/formats/gen_python_fixtures.py). */
#define MINIFLOATS "tests/data/formats/python_minifloats.safetensors"

static void test_tables(void **state) {
    (void)state;
    static const struct {
        kiln_dtype t;
        size_t size;
        const char *name, *st, *c_type;
        int is_float;
    } rows[] = {
        {KILN_F64, 8, "float64", "F64", "double", 1},
        {KILN_F32, 4, "float32", "F32", "float", 1},
        {KILN_F16, 2, "float16", "F16", "float", 1},
        {KILN_BF16, 2, "bfloat16", "BF16", "float", 1},
        {KILN_F8_E4M3, 1, "float8_e4m3fn", "F8_E4M3", "float", 1},
        {KILN_F8_E5M2, 1, "float8_e5m2", "F8_E5M2", "float", 1},
        {KILN_F4_E2M1, 1, "float4_e2m1", NULL, "float", 1},
        {KILN_F4_E2M1X2, 1, "float4_e2m1fn_x2", "F4", "float", 1},
        {KILN_I64, 8, "int64", "I64", "int64_t", 0},
        {KILN_I32, 4, "int32", "I32", "int32_t", 0},
        {KILN_I16, 2, "int16", "I16", "int32_t", 0},
        {KILN_I8, 1, "int8", "I8", "int32_t", 0},
        {KILN_U8, 1, "uint8", "U8", "int32_t", 0},
        {KILN_BOOL, 1, "bool", "BOOL", "bool", 0},
    };
    assert_int_equal(sizeof rows / sizeof rows[0], KILN_DTYPE_COUNT);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        kiln_dtype t = KILN_DTYPE_COUNT;
        assert_int_equal(kiln_dtype_size(rows[i].t), rows[i].size);
        assert_string_equal(kiln_dtype_name(rows[i].t), rows[i].name);
        assert_string_equal(kiln_dtype_c_type(rows[i].t), rows[i].c_type);
        assert_int_equal(kiln_dtype_is_float(rows[i].t), rows[i].is_float);
        assert_int_equal(kiln_dtype_parse(rows[i].name, &t), 0);
        assert_int_equal(t, rows[i].t);
        if (rows[i].st) {
            assert_string_equal(kiln_dtype_st_name(rows[i].t), rows[i].st);
            t = KILN_DTYPE_COUNT;
            assert_int_equal(kiln_dtype_parse_st(rows[i].st, &t), 0);
            assert_int_equal(t, rows[i].t);
        } else {
            assert_null(kiln_dtype_st_name(rows[i].t));
        }
    }
    kiln_dtype t;
    assert_int_equal(kiln_dtype_parse("float", &t), -1);
    assert_int_equal(kiln_dtype_parse("Float32", &t), -1);
    assert_int_equal(kiln_dtype_parse("", &t), -1);
    assert_int_equal(kiln_dtype_parse_st("f32", &t), -1);
    assert_int_equal(kiln_dtype_parse_st("U16", &t), -1);
    assert_int_equal(kiln_dtype_parse_st("float32", &t), -1);
}

/* PyTorch's spellings of a dtype: "torch.NAME", the bare name, and its aliases; nothing else. */
static void test_torch_names(void **state) {
    (void)state;
    static const struct {
        const char *name;
        kiln_dtype t;
    } ok[] = {
        {"torch.float32", KILN_F32},
        {"torch.float", KILN_F32},
        {"float32", KILN_F32},
        {"torch.bfloat16", KILN_BF16},
        {"torch.float16", KILN_F16},
        {"torch.half", KILN_F16},
        {"half", KILN_F16},
        {"torch.float64", KILN_F64},
        {"torch.double", KILN_F64},
        {"torch.int64", KILN_I64},
        {"torch.long", KILN_I64},
        {"torch.int", KILN_I32},
        {"torch.short", KILN_I16},
        {"torch.bool", KILN_BOOL},
        {"torch.uint8", KILN_U8},
        {"torch.float8_e4m3fn", KILN_F8_E4M3},
        {"torch.float8_e5m2", KILN_F8_E5M2},
        {"torch.float4_e2m1fn_x2", KILN_F4_E2M1X2},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        kiln_dtype t = KILN_DTYPE_COUNT;
        if (kiln_dtype_parse_torch(ok[i].name, &t) != 0 || t != ok[i].t)
            fail_msg("%s: parsed as %s", ok[i].name, kiln_dtype_name(t));
    }
    static const char *const bad[] = {"torch.complex64", "torch.float8_e4m3fnuz",
                                      "torch.strided",   "torch.channels_last",
                                      "torch.",          "",
                                      "Float32",         "torch.Float"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kiln_dtype t;
        if (kiln_dtype_parse_torch(bad[i], &t) == 0)
            fail_msg("%s: parsed as %s", bad[i], kiln_dtype_name(t));
    }
}

/* The one dtype -> kernel type map, for CUDA and for the cpu backend (kiln_cpu.h). */
static void test_kernel_types(void **state) {
    (void)state;
    static const struct {
        kiln_dtype t;
        const char *cuda, *cuda_load, *cuda_store, *cpu, *cpu_load, *cpu_store;
    } rows[] = {
        {KILN_F32, "float", "", "", "float", "", ""},
        {KILN_F64, "double", "", "", "double", "", ""},
        {KILN_BF16, "__nv_bfloat16", "__bfloat162float", "__float2bfloat16_rn", "kiln_bf16",
         "kiln_bf16_to_float", "kiln_float_to_bf16"},
        {KILN_F16, "__half", "__half2float", "__float2half_rn", "kiln_f16", "kiln_f16_to_float",
         "kiln_float_to_f16"},
        {KILN_I64, "int64_t", "", "", "int64_t", "", ""},
        {KILN_I16, "int16_t", "", "", "int16_t", "", ""},
        {KILN_U8, "uint8_t", "", "", "uint8_t", "", ""},
        {KILN_BOOL, "bool", "", "", "bool", "", ""},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        kiln_kernel_type c = kiln_dtype_kernel_type(rows[i].t, 1);
        kiln_kernel_type h = kiln_dtype_kernel_type(rows[i].t, 0);
        assert_string_equal(c.type, rows[i].cuda);
        assert_string_equal(c.to_float, rows[i].cuda_load);
        assert_string_equal(c.from_float, rows[i].cuda_store);
        assert_string_equal(h.type, rows[i].cpu);
        assert_string_equal(h.to_float, rows[i].cpu_load);
        assert_string_equal(h.from_float, rows[i].cpu_store);
    }
    /* the 8- and 4-bit floats are raw bytes with no conversion, but for the cpu backend's fp8
     * widening (a GEMM's inputs) */
    const kiln_dtype raw[] = {KILN_F8_E4M3, KILN_F8_E5M2, KILN_F4_E2M1, KILN_F4_E2M1X2};
    for (size_t i = 0; i < sizeof raw / sizeof raw[0]; i++)
        for (int cuda = 0; cuda < 2; cuda++) {
            kiln_kernel_type k = kiln_dtype_kernel_type(raw[i], cuda);
            assert_string_equal(k.type, "uint8_t");
            if (!cuda && i < 2)
                assert_string_equal(k.to_float, i ? "kiln_e5m2_to_float" : "kiln_e4m3_to_float");
            else
                assert_null(k.to_float);
            assert_null(k.from_float);
        }
}

static uint32_t f32_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    return x;
}

static float bits_f32(uint32_t x) {
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static int is_nan16(kiln_dtype t, uint16_t h) {
    return t == KILN_F16 ? ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
                         : ((h & 0x7f80) == 0x7f80 && (h & 0x7f));
}

/* Every 16-bit code decodes and encodes back to itself (NaNs stay NaNs, with their sign). */
static void test_16bit_round_trip_exhaustive(void **state) {
    (void)state;
    for (int which = 0; which < 2; which++) {
        kiln_dtype t = which ? KILN_BF16 : KILN_F16;
        for (uint32_t c = 0; c <= 0xffff; c++) {
            uint16_t h = (uint16_t)c, back;
            double v = kiln_dtype_load(t, &h, 0);
            float f = which ? kiln_bf16_to_f32(h) : kiln_f16_to_f32(h);
            kiln_dtype_store(t, &back, 0, v);
            uint16_t back_f = which ? kiln_f32_to_bf16(f) : kiln_f32_to_f16(f);
            if (is_nan16(t, h)) {
                assert_true(isnan(v) && isnan(f));
                assert_true(is_nan16(t, back) && is_nan16(t, back_f));
                assert_int_equal(back & 0x8000, h & 0x8000);
            } else {
                assert_true((double)f == v);
                assert_int_equal(back, h);
                assert_int_equal(back_f, h);
            }
        }
    }
}

static void test_f16_rounding(void **state) {
    (void)state;
    assert_int_equal(kiln_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(kiln_f32_to_f16(-2.0f), 0xc000);
    assert_int_equal(kiln_f32_to_f16(65504.0f), 0x7bff); /* max */
    assert_int_equal(kiln_f32_to_f16(65519.0f), 0x7bff); /* below the midpoint */
    assert_int_equal(kiln_f32_to_f16(65520.0f), 0x7c00); /* midpoint: to even = Inf */
    assert_int_equal(kiln_f32_to_f16(1e10f), 0x7c00);    /* overflow */
    assert_int_equal(kiln_f32_to_f16(-1e10f), 0xfc00);
    assert_int_equal(kiln_f32_to_f16(INFINITY), 0x7c00);
    assert_int_equal(kiln_f32_to_f16(ldexpf(1, -24)), 0x0001);        /* smallest subnormal */
    assert_int_equal(kiln_f32_to_f16(ldexpf(1, -25)), 0x0000);        /* tie to even: 0 */
    assert_int_equal(kiln_f32_to_f16(ldexpf(3, -26)), 0x0001);        /* 0.75 ulp: up */
    assert_int_equal(kiln_f32_to_f16(ldexpf(3, -25)), 0x0002);        /* 1.5 ulp: tie to even 2 */
    assert_int_equal(kiln_f32_to_f16(ldexpf(1, -14)), 0x0400);        /* smallest normal */
    assert_int_equal(kiln_f32_to_f16(ldexpf(1023, -24)), 0x03ff);     /* largest subnormal */
    assert_int_equal(kiln_f32_to_f16(1.0f + ldexpf(1, -11)), 0x3c00); /* tie: even */
    assert_int_equal(kiln_f32_to_f16(1.0f + ldexpf(3, -11)), 0x3c02); /* tie: even (up) */
    assert_int_equal(kiln_f32_to_f16(-0.0f), 0x8000);
    assert_true(is_nan16(KILN_F16, kiln_f32_to_f16(NAN)));
}

static void test_bf16_rounding(void **state) {
    (void)state;
    assert_int_equal(kiln_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(kiln_f32_to_bf16(bits_f32(0x3f808000)), 0x3f80); /* tie: even (down) */
    assert_int_equal(kiln_f32_to_bf16(bits_f32(0x3f818000)), 0x3f82); /* tie: even (up) */
    assert_int_equal(kiln_f32_to_bf16(bits_f32(0x3f808001)), 0x3f81); /* above the tie */
    assert_int_equal(kiln_f32_to_bf16(3.4028235e38f), 0x7f80);        /* FLT_MAX rounds to Inf */
    assert_int_equal(kiln_f32_to_bf16(bits_f32(0x7f7f7fff)), 0x7f7f); /* largest that stays */
    assert_int_equal(kiln_f32_to_bf16(-INFINITY), 0xff80);
    /* A NaN whose payload lies only in the low bits must not become Inf. */
    assert_true(is_nan16(KILN_BF16, kiln_f32_to_bf16(bits_f32(0x7f800001))));
    assert_true(is_nan16(KILN_BF16, kiln_f32_to_bf16(bits_f32(0xff800001))));
    assert_int_equal(kiln_f32_to_bf16(bits_f32(0xff800001)) & 0x8000, 0x8000);
    /* Storing a double rounds once: just above a float tie must go up, not to even. */
    uint16_t h;
    double above_tie = 1.0 + ldexp(1, -8) + ldexp(1, -40);
    kiln_dtype_store(KILN_BF16, &h, 0, above_tie);
    assert_int_equal(h, 0x3f81);
    kiln_dtype_store(KILN_BF16, &h, 0, 1e300);
    assert_int_equal(h, 0x7f80);
    kiln_dtype_store(KILN_BF16, &h, 0, -1e-300);
    assert_int_equal(h, 0x8000);
    assert_true(kiln_bf16_to_f32(0x4049) == 3.140625f);
    assert_int_equal(f32_bits(kiln_bf16_to_f32(0x3f80)), 0x3f800000);
}

static void test_fp8(void **state) {
    (void)state;
    unsigned char b;
    /* Every code round-trips. */
    for (int which = 0; which < 2; which++) {
        kiln_dtype t = which ? KILN_F8_E5M2 : KILN_F8_E4M3;
        for (unsigned c = 0; c < 256; c++) {
            unsigned char code = (unsigned char)c;
            double v = kiln_dtype_load(t, &code, 0);
            kiln_dtype_store(t, &b, 0, v);
            if (isnan(v))
                assert_true(isnan(kiln_dtype_load(t, &b, 0)));
            else
                assert_int_equal(b, code);
        }
    }
    /* e4m3fn: no Inf, max 448, S.1111.111 is NaN, overflow saturates (documented). */
    unsigned char c = 0x7e;
    assert_true(kiln_dtype_load(KILN_F8_E4M3, &c, 0) == 448.0);
    c = 0x7f;
    assert_true(isnan(kiln_dtype_load(KILN_F8_E4M3, &c, 0)));
    c = 0x78;
    assert_true(kiln_dtype_load(KILN_F8_E4M3, &c, 0) == 256.0);
    c = 0x01;
    assert_true(kiln_dtype_load(KILN_F8_E4M3, &c, 0) == ldexp(1, -9));
    kiln_dtype_store(KILN_F8_E4M3, &b, 0, 464.0); /* tie between 448 and (NaN) 480: even = 448 */
    assert_int_equal(b, 0x7e);
    kiln_dtype_store(KILN_F8_E4M3, &b, 0, 1e6);
    assert_int_equal(b, 0x7e);
    kiln_dtype_store(KILN_F8_E4M3, &b, 0, -INFINITY);
    assert_int_equal(b, 0xfe);
    kiln_dtype_store(KILN_F8_E4M3, &b, 0, NAN);
    assert_int_equal(b & 0x7f, 0x7f);
    /* e5m2: IEEE-like, max 57344, overflow to Inf. */
    c = 0x7b;
    assert_true(kiln_dtype_load(KILN_F8_E5M2, &c, 0) == 57344.0);
    c = 0x7c;
    assert_true(isinf(kiln_dtype_load(KILN_F8_E5M2, &c, 0)));
    kiln_dtype_store(KILN_F8_E5M2, &b, 0, 61440.0); /* tie: 57344 is odd, so Inf */
    assert_int_equal(b, 0x7c);
    kiln_dtype_store(KILN_F8_E5M2, &b, 0, 60000.0);
    assert_int_equal(b, 0x7b);
    kiln_dtype_store(KILN_F8_E5M2, &b, 0, NAN);
    assert_true(isnan(kiln_dtype_load(KILN_F8_E5M2, &b, 0)));
}

static void test_fp4(void **state) {
    (void)state;
    static const double values[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    for (unsigned c = 0; c < 16; c++) {
        unsigned char code = (unsigned char)c, back;
        double v = kiln_dtype_load(KILN_F4_E2M1, &code, 0);
        assert_true(v == (c & 8 ? -values[c & 7] : values[c & 7]));
        kiln_dtype_store(KILN_F4_E2M1, &back, 0, v);
        assert_int_equal(back, c == 8 ? 8 : code); /* -0 keeps its sign */
    }
    unsigned char b;
    kiln_dtype_store(KILN_F4_E2M1, &b, 0, 5.0); /* tie between 4 and 6: even mantissa = 4 */
    assert_int_equal(b, 0x6);
    kiln_dtype_store(KILN_F4_E2M1, &b, 0, 100.0); /* saturates */
    assert_int_equal(b, 0x7);
    kiln_dtype_store(KILN_F4_E2M1, &b, 0, -0.25); /* tie between -0 and -0.5: even = -0 */
    assert_int_equal(b, 0x8);
    /* x2: two values per byte, low nibble first; storing one keeps the other. */
    unsigned char pair[2] = {0, 0};
    kiln_dtype_store(KILN_F4_E2M1X2, pair, 0, 1.0);
    kiln_dtype_store(KILN_F4_E2M1X2, pair, 1, -6.0);
    kiln_dtype_store(KILN_F4_E2M1X2, pair, 3, 0.5);
    assert_int_equal(pair[0], 0xf2);
    assert_int_equal(pair[1], 0x10);
    assert_true(kiln_dtype_load(KILN_F4_E2M1X2, pair, 0) == 1.0);
    assert_true(kiln_dtype_load(KILN_F4_E2M1X2, pair, 1) == -6.0);
    assert_true(kiln_dtype_load(KILN_F4_E2M1X2, pair, 2) == 0.0);
    assert_true(kiln_dtype_load(KILN_F4_E2M1X2, pair, 3) == 0.5);
}

static void test_integers_and_bool(void **state) {
    (void)state;
    int64_t i64;
    int32_t i32;
    int16_t i16;
    int8_t i8;
    uint8_t u8, bl;
    kiln_dtype_store(KILN_I32, &i32, 0, 2.5);
    assert_int_equal(i32, 2);
    kiln_dtype_store(KILN_I32, &i32, 0, 3.5);
    assert_int_equal(i32, 4);
    kiln_dtype_store(KILN_I32, &i32, 0, -2.5);
    assert_int_equal(i32, -2);
    kiln_dtype_store(KILN_I32, &i32, 0, 1e20);
    assert_int_equal(i32, INT32_MAX);
    kiln_dtype_store(KILN_I32, &i32, 0, NAN);
    assert_int_equal(i32, 0);
    kiln_dtype_store(KILN_I16, &i16, 0, -40000);
    assert_int_equal(i16, INT16_MIN);
    kiln_dtype_store(KILN_I8, &i8, 0, -7);
    assert_int_equal(i8, -7);
    assert_true(kiln_dtype_load(KILN_I8, &i8, 0) == -7.0);
    kiln_dtype_store(KILN_U8, &u8, 0, 300);
    assert_int_equal(u8, 255);
    kiln_dtype_store(KILN_U8, &u8, 0, -3);
    assert_int_equal(u8, 0);
    kiln_dtype_store(KILN_I64, &i64, 0, 1e19);
    assert_true(i64 == INT64_MAX);
    kiln_dtype_store(KILN_I64, &i64, 0, -1e19);
    assert_true(i64 == INT64_MIN);
    kiln_dtype_store(KILN_I64, &i64, 0, (double)(1LL << 53));
    assert_true(i64 == (1LL << 53));
    assert_true(kiln_dtype_load(KILN_I64, &i64, 0) == 9007199254740992.0);
    kiln_dtype_store(KILN_BOOL, &bl, 0, 0.0);
    assert_int_equal(bl, 0);
    kiln_dtype_store(KILN_BOOL, &bl, 0, -0.5);
    assert_int_equal(bl, 1);
    bl = 7; /* any non-zero byte reads as true */
    assert_true(kiln_dtype_load(KILN_BOOL, &bl, 0) == 1.0);
    double d[2];
    float f[2];
    kiln_dtype_store(KILN_F64, d, 1, 0.1);
    assert_true(kiln_dtype_load(KILN_F64, d, 1) == 0.1);
    kiln_dtype_store(KILN_F32, f, 1, 0.1);
    assert_true(kiln_dtype_load(KILN_F32, f, 1) == (double)0.1f);
}

static int same_value(double a, double b) {
    return (isnan(a) && isnan(b)) || a == b;
}

/* Decoding agrees with PyTorch's own conversion to float64 for every fp8 code and a sample of
 * 16-bit codes; rounding float32 inputs agrees with PyTorch's .to(dtype) on random values and exact
 * ties. */
static void test_against_pytorch(void **state) {
    (void)state;
    kiln_st *st = NULL;
    kiln_err err = {{0}};
    int rc = kiln_st_load(MINIFLOATS, &st, &err);
    if (rc != KILN_OK)
        fail_msg("%s", err.msg);
    static const struct {
        const char *codes, *values, *in, *out;
        kiln_dtype t;
    } sets[] = {
        {"all_e4m3", "all_e4m3_f64", "round_e4m3_in", "round_e4m3_out", KILN_F8_E4M3},
        {"all_e5m2", "all_e5m2_f64", "round_e5m2_in", "round_e5m2_out", KILN_F8_E5M2},
        {"some_f16", "some_f16_f64", "round_f16_in", "round_f16_out", KILN_F16},
        {"some_bf16", "some_bf16_f64", "round_bf16_in", "round_bf16_out", KILN_BF16},
    };
    for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
        const kiln_st_tensor *codes = kiln_st_find(st, sets[s].codes);
        const kiln_st_tensor *values = kiln_st_find(st, sets[s].values);
        const kiln_st_tensor *in = kiln_st_find(st, sets[s].in);
        const kiln_st_tensor *out = kiln_st_find(st, sets[s].out);
        assert_non_null(codes);
        assert_non_null(values);
        assert_non_null(in);
        assert_non_null(out);
        assert_int_equal(codes->dtype, sets[s].t);
        assert_int_equal(out->dtype, sets[s].t);
        assert_int_equal(values->dtype, KILN_F64);
        assert_int_equal(in->dtype, KILN_F32);
        int64_t n = codes->shape[0];
        assert_true(n >= 256);
        for (int64_t i = 0; i < n; i++) {
            double mine = kiln_dtype_load(sets[s].t, codes->data, (size_t)i);
            double torch = kiln_dtype_load(KILN_F64, values->data, (size_t)i);
            if (!same_value(mine, torch))
                fail_msg("%s[%ld]: kiln %g, PyTorch %g", sets[s].codes, (long)i, mine, torch);
        }
        n = in->shape[0];
        assert_int_equal(out->shape[0], n);
        assert_true(n >= 300);
        size_t sz = kiln_dtype_size(sets[s].t);
        for (int64_t i = 0; i < n; i++) {
            double x = kiln_dtype_load(KILN_F32, in->data, (size_t)i);
            unsigned char mine[2] = {0, 0};
            kiln_dtype_store(sets[s].t, mine, 0, x);
            const unsigned char *torch = (const unsigned char *)out->data + (size_t)i * sz;
            if (memcmp(mine, torch, sz) != 0 && !same_value(kiln_dtype_load(sets[s].t, mine, 0),
                                                            kiln_dtype_load(sets[s].t, torch, 0)))
                fail_msg("%s[%ld]: %.9g rounds to 0x%02x%02x in kiln, 0x%02x%02x in PyTorch",
                         sets[s].in, (long)i, x, sz > 1 ? mine[1] : 0, mine[0],
                         sz > 1 ? torch[1] : 0, torch[0]);
        }
    }
    kiln_st_free(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_torch_names),
        cmocka_unit_test(test_kernel_types),
        cmocka_unit_test(test_16bit_round_trip_exhaustive),
        cmocka_unit_test(test_f16_rounding),
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_fp8),
        cmocka_unit_test(test_fp4),
        cmocka_unit_test(test_integers_and_bool),
        cmocka_unit_test(test_against_pytorch),
    };
    return cmocka_run_group_tests_name("dtype", tests, NULL, NULL);
}
