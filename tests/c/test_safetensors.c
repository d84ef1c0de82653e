/* test_safetensors.c: the strict safetensors reader (every malformed case names file and field),
 * the writer's round trip, and a file written by Python's safetensors package. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "formats/safetensors.h"

/* tests/data/formats/python_written.safetensors was written once by Python's safetensors 0.8.0 with
 * torch 2.11 (tests/data/formats/gen_python_fixtures.py):
 *   save_file({"w_bf16": bf16 [[1, -2.5, 3.140625], [0, 65280, -0.0078125]],
 *              "x_f32": float32 arange(6).reshape(3, 2) * 0.5 - 1,
 *              "idx_i64": int64 [0, -1, 2**40, -(2**62)],
 *              "scalar_f32": float32 tensor(3.5)},
 *             metadata={"format": "pt", "source": "kiln test"}) */
#define PY_FILE "tests/data/formats/python_written.safetensors"
#define MINIFLOATS "tests/data/formats/python_minifloats.safetensors"

static void expect_error(int rc, const kiln_err *err, int want_rc, const char *label,
                         const char *want) {
    if (rc != want_rc)
        fail_msg("expected status %d (%s), got %d: %s", want_rc, kiln_strerror(want_rc), rc,
                 rc ? err->msg : "(ok)");
    if (!strstr(err->msg, label))
        fail_msg("message \"%s\" does not name the file \"%s\"", err->msg, label);
    if (!strstr(err->msg, want))
        fail_msg("message \"%s\" lacks \"%s\"", err->msg, want);
}

static void test_python_file(void **state) {
    (void)state;
    kiln_st *st = NULL;
    kiln_err err = {{0}};
    int rc = kiln_st_load(PY_FILE, &st, &err);
    if (rc != KILN_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(kiln_st_count(st), 4);
    assert_string_equal(kiln_st_metadata(st, "format"), "pt");
    assert_string_equal(kiln_st_metadata(st, "source"), "kiln test");
    assert_null(kiln_st_metadata(st, "missing"));
    assert_null(kiln_st_find(st, "nope"));

    const kiln_st_tensor *w = kiln_st_find(st, "w_bf16");
    assert_non_null(w);
    assert_int_equal(w->dtype, KILN_BF16);
    assert_int_equal(w->ndim, 2);
    assert_int_equal(w->shape[0], 2);
    assert_int_equal(w->shape[1], 3);
    assert_int_equal(w->n_bytes, 12);
    static const double wv[6] = {1, -2.5, 3.140625, 0, 65280, -0.0078125};
    for (int i = 0; i < 6; i++)
        assert_true(kiln_dtype_load(KILN_BF16, w->data, (size_t)i) == wv[i]);

    const kiln_st_tensor *x = kiln_st_find(st, "x_f32");
    assert_non_null(x);
    assert_int_equal(x->dtype, KILN_F32);
    assert_int_equal(x->ndim, 2);
    assert_int_equal(x->shape[0], 3);
    assert_int_equal(x->shape[1], 2);
    for (int i = 0; i < 6; i++)
        assert_true(kiln_dtype_load(KILN_F32, x->data, (size_t)i) == i * 0.5 - 1.0);

    const kiln_st_tensor *idx = kiln_st_find(st, "idx_i64");
    assert_non_null(idx);
    assert_int_equal(idx->dtype, KILN_I64);
    assert_int_equal(idx->n_bytes, 32);
    int64_t iv[4];
    memcpy(iv, idx->data, sizeof iv);
    assert_true(iv[0] == 0 && iv[1] == -1 && iv[2] == (1LL << 40) && iv[3] == -(1LL << 62));

    const kiln_st_tensor *s = kiln_st_find(st, "scalar_f32");
    assert_non_null(s);
    assert_int_equal(s->ndim, 0);
    assert_int_equal(s->n_bytes, 4);
    assert_true(kiln_dtype_load(KILN_F32, s->data, 0) == 3.5);

    /* Every tensor is aligned to its element size (the data area is moved to malloc alignment). */
    for (int i = 0; i < kiln_st_count(st); i++) {
        const kiln_st_tensor *t = kiln_st_at(st, i);
        assert_int_equal((uintptr_t)t->data % kiln_dtype_size(t->dtype), 0);
    }
    kiln_st_free(st);
}

/* safetensors "F4" counts 4-bit values; kiln holds it as float4_e2m1fn_x2 with the last dim halved.
 */
static void test_f4_from_python(void **state) {
    (void)state;
    kiln_st *st = NULL;
    kiln_err err = {{0}};
    assert_int_equal(kiln_st_load(MINIFLOATS, &st, &err), KILN_OK);
    const kiln_st_tensor *t = kiln_st_find(st, "f4_x2");
    assert_non_null(t);
    assert_int_equal(t->dtype, KILN_F4_E2M1X2);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], 2);
    assert_int_equal(t->shape[1], 3);
    assert_int_equal(t->n_bytes, 6);
    static const unsigned char bytes[6] = {0x10, 0x32, 0x54, 0x76, 0x98, 0xfa};
    assert_memory_equal(t->data, bytes, 6);
    assert_true(kiln_dtype_load(KILN_F4_E2M1X2, t->data, 0) == 0.0);
    assert_true(kiln_dtype_load(KILN_F4_E2M1X2, t->data, 1) == 0.5);
    assert_true(kiln_dtype_load(KILN_F4_E2M1X2, t->data, 11) == -6.0);
    kiln_st_free(st);
}

static char *tmp_path(const char *name) {
    return xasprintf("/tmp/kiln_test_st_%d_%s", (int)getpid(), name);
}

static void test_write_round_trip(void **state) {
    (void)state;
    float f32[6] = {1, -2, 3.5f, 0, -0.0f, 1e30f};
    uint16_t bf16[4] = {0x3f80, 0xc000, 0x7f80, 0x7fc0};
    int64_t i64 = -(1LL << 60);
    uint8_t f4[6] = {0x10, 0x32, 0x54, 0x76, 0x98, 0xfa};
    uint8_t flags[3] = {1, 0, 1};
    kiln_st_tensor in[] = {
        {.name = "x", .dtype = KILN_F32, .ndim = 2, .shape = {3, 2}, .n_bytes = 24, .data = f32},
        {.name = "w \"quoted\" \\ \xc3\xbc\n",
         .dtype = KILN_BF16,
         .ndim = 1,
         .shape = {4},
         .n_bytes = 8,
         .data = bf16},
        {.name = "scalar", .dtype = KILN_I64, .ndim = 0, .n_bytes = 8, .data = &i64},
        {.name = "empty",
         .dtype = KILN_F32,
         .ndim = 2,
         .shape = {0, 5},
         .n_bytes = 0,
         .data = NULL},
        {.name = "fp4",
         .dtype = KILN_F4_E2M1X2,
         .ndim = 2,
         .shape = {2, 3},
         .n_bytes = 6,
         .data = f4},
        {.name = "mask", .dtype = KILN_BOOL, .ndim = 1, .shape = {3}, .n_bytes = 3, .data = flags},
    };
    int n = (int)(sizeof in / sizeof in[0]);
    char *path = tmp_path("rt.safetensors");
    kiln_err err = {{0}};
    int rc = kiln_st_write(path, in, n, &err);
    if (rc != KILN_OK)
        fail_msg("%s", err.msg);

    /* The layout the reference writer produces: header padded with spaces to a multiple of 8, then
     * the tensors in order, contiguous. */
    char *raw;
    size_t len;
    assert_int_equal(kiln_read_file(path, &raw, &len, &err), KILN_OK);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | (unsigned char)raw[i];
    assert_int_equal(hlen % 8, 0);
    assert_int_equal(len, 8 + hlen + 24 + 8 + 8 + 0 + 6 + 3);
    assert_int_equal(raw[8], '{');
    assert_non_null(strstr(raw + 8, "\"fp4\":{\"dtype\":\"F4\",\"shape\":[2,6]"));
    assert_memory_equal(raw + 8 + hlen, f32, 24);
    assert_memory_equal(raw + 8 + hlen + 24, bf16, 8);
    free(raw);

    kiln_st *st = NULL;
    rc = kiln_st_load(path, &st, &err);
    if (rc != KILN_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(kiln_st_count(st), n);
    for (int i = 0; i < n; i++) {
        const kiln_st_tensor *t = kiln_st_at(st, i);
        assert_string_equal(t->name, in[i].name);
        assert_int_equal(t->dtype, in[i].dtype);
        assert_int_equal(t->ndim, in[i].ndim);
        for (int d = 0; d < t->ndim; d++)
            assert_int_equal(t->shape[d], in[i].shape[d]);
        assert_int_equal(t->n_bytes, in[i].n_bytes);
        if (t->n_bytes)
            assert_memory_equal(t->data, in[i].data, t->n_bytes);
    }
    assert_null(kiln_st_metadata(st, "format"));
    kiln_st_free(st);

    /* No tensors at all is a valid file too. */
    assert_int_equal(kiln_st_write(path, NULL, 0, &err), KILN_OK);
    assert_int_equal(kiln_st_load(path, &st, &err), KILN_OK);
    assert_int_equal(kiln_st_count(st), 0);
    kiln_st_free(st);
    unlink(path);
    free(path);
}

static void test_write_errors(void **state) {
    (void)state;
    float v[2] = {1, 2};
    char *path = tmp_path("bad.safetensors");
    kiln_err err = {{0}};
    kiln_st_tensor dup[2] = {
        {.name = "a", .dtype = KILN_F32, .ndim = 1, .shape = {2}, .n_bytes = 8, .data = v},
        {.name = "a", .dtype = KILN_F32, .ndim = 1, .shape = {2}, .n_bytes = 8, .data = v},
    };
    expect_error(kiln_st_write(path, dup, 2, &err), &err, KILN_ERR_INVALID, path,
                 "'a' is given twice");
    kiln_st_tensor bad = {
        .name = "a", .dtype = KILN_F32, .ndim = 1, .shape = {3}, .n_bytes = 8, .data = v};
    expect_error(kiln_st_write(path, &bad, 1, &err), &err, KILN_ERR_INVALID, path, "n_bytes");
    bad = (kiln_st_tensor){
        .name = "a", .dtype = KILN_F4_E2M1, .ndim = 1, .shape = {2}, .n_bytes = 2, .data = v};
    expect_error(kiln_st_write(path, &bad, 1, &err), &err, KILN_ERR_UNSUPPORTED, path,
                 "float4_e2m1");
    bad = (kiln_st_tensor){.name = "__metadata__",
                           .dtype = KILN_F32,
                           .ndim = 1,
                           .shape = {2},
                           .n_bytes = 8,
                           .data = v};
    expect_error(kiln_st_write(path, &bad, 1, &err), &err, KILN_ERR_INVALID, path, "not allowed");
    bad = (kiln_st_tensor){.name = "a", .dtype = KILN_F32, .ndim = 1, .shape = {-1}, .n_bytes = 0};
    expect_error(kiln_st_write(path, &bad, 1, &err), &err, KILN_ERR_INVALID, path, "dimension 0");
    char *nodir = xasprintf("/nonexistent_dir_%d/x.safetensors", (int)getpid());
    expect_error(kiln_st_write(nodir, dup, 1, &err), &err, KILN_ERR_IO, nodir, "cannot create");
    free(nodir);
    assert_int_equal(access(path, F_OK), -1); /* nothing was left behind */
    free(path);
}

/* An in-memory file: 8-byte length (the header's own unless length_override >= 0), header, data. */
static void *make_file(const char *header, size_t data_len, int64_t length_override, size_t *len) {
    size_t h = strlen(header);
    *len = 8 + h + data_len;
    unsigned char *buf = calloc(1, *len + 1);
    uint64_t n = length_override >= 0 ? (uint64_t)length_override : h;
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(n >> (8 * i));
    memcpy(buf + 8, header, h);
    for (size_t i = 0; i < data_len; i++)
        buf[8 + h + i] = (unsigned char)i;
    return buf;
}

#define T(dtype, shape, b, e)                                                                      \
    "{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" b "," e "]}"

static const struct {
    const char *header;
    size_t data_len;
    int64_t length; /* -1: the header's */
    int rc;
    const char *want;
} BAD[] = {
    {"{}", 0, 200000000, KILN_ERR_FORMAT, "header length 200000000 is over the limit"},
    {"{}", 0, 3, KILN_ERR_FORMAT, "header length 3 runs past the end"},
    {"{\"a\":", 0, -1, KILN_ERR_FORMAT, "header: not valid JSON"},
    {"", 0, -1, KILN_ERR_FORMAT, "header: not valid JSON"},
    {"[1, 2]", 0, -1, KILN_ERR_FORMAT, "header: not a JSON object"},
    {"{} {}", 0, -1, KILN_ERR_FORMAT, "header: text after the JSON object"},
    {"{\"a\xff\":1}", 0, -1, KILN_ERR_FORMAT, "header: not valid UTF-8 at offset 3"},
    {"{\"\xc0\xaf\":1}", 0, -1, KILN_ERR_FORMAT, "not valid UTF-8"}, /* overlong '/' */
    {"{\"a\":1}", 0, -1, KILN_ERR_FORMAT, "tensor 'a': entry is not a JSON object"},
    {"{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, -1, KILN_ERR_FORMAT,
     "tensor 'a': field 'dtype' is missing"},
    {"{\"a\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, -1, KILN_ERR_FORMAT,
     "tensor 'a': field 'dtype' is not a string"},
    {"{\"a\":" T("F17", "[1]", "0", "4") "}", 4, -1, KILN_ERR_FORMAT,
     "tensor 'a': field 'dtype': unknown dtype 'F17'"},
    {"{\"a\":" T("U16", "[2]", "0", "4") "}", 4, -1, KILN_ERR_UNSUPPORTED,
     "field 'dtype': kiln does not support dtype 'U16'"},
    {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, -1, KILN_ERR_FORMAT,
     "tensor 'a': field 'shape' is missing"},
    {"{\"a\":" T("F32", "4", "0", "4") "}", 4, -1, KILN_ERR_FORMAT,
     "field 'shape' is not an array"},
    {"{\"a\":" T("F32", "[2,-1]", "0", "4") "}", 4, -1, KILN_ERR_FORMAT,
     "field 'shape': dimension 1 is not a non-negative integer"},
    {"{\"a\":" T("F32", "[1.5]", "0", "4") "}", 4, -1, KILN_ERR_FORMAT, "dimension 0 is not"},
    {"{\"a\":" T("F32", "[\"1\"]", "0", "4") "}", 4, -1, KILN_ERR_FORMAT, "dimension 0 is not"},
    {"{\"a\":" T("F32", "[1e300]", "0", "4") "}", 4, -1, KILN_ERR_FORMAT, "dimension 0 is not"},
    {"{\"a\":" T("F32", "[1,1,1,1,1,1,1,1,1]", "0", "4") "}", 4, -1, KILN_ERR_UNSUPPORTED,
     "field 'shape' has 9 dimensions"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, -1, KILN_ERR_FORMAT,
     "field 'data_offsets' is missing"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, -1, KILN_ERR_FORMAT,
     "field 'data_offsets' is not [begin, end]"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4, -1, KILN_ERR_FORMAT,
     "field 'data_offsets' is not [begin, end]"},
    {"{\"a\":" T("F32", "[1]", "-4", "0") "}", 4, -1, KILN_ERR_FORMAT,
     "field 'data_offsets' is not [begin, end]"},
    {"{\"a\":" T("F32", "[1]", "0", "\"4\"") "}", 4, -1, KILN_ERR_FORMAT,
     "field 'data_offsets' is not [begin, end]"},
    {"{\"a\":" T("F32", "[0]", "8", "4") "}", 8, -1, KILN_ERR_FORMAT,
     "field 'data_offsets': begin 8 is after end 4"},
    {"{\"a\":" T("F32", "[2]", "0", "4") "}", 4, -1, KILN_ERR_FORMAT,
     "field 'data_offsets' spans 4 bytes but dtype F32 and shape [2] need 8"},
    {"{\"a\":" T("F32", "[4294967296,4294967296,2]", "0", "4") "}", 4, -1, KILN_ERR_FORMAT,
     "tensor 'a': field 'shape': the size in bytes overflows"},
    {"{\"a\":" T("F32", "[1]", "0", "4") "}", 0, -1, KILN_ERR_FORMAT,
     "tensor 'a': field 'data_offsets' [0, 4] runs past the data area (0 bytes)"},
    {"{\"a\":" T("F32", "[2]", "0", "8") ",\"b\":" T("F32", "[2]", "4", "12") "}", 12, -1,
     KILN_ERR_FORMAT, "tensor 'b': field 'data_offsets' [4, 12] overlaps tensor 'a'"},
    {"{\"b\":" T("U8", "[4]", "0", "4") ",\"a\":" T("U8", "[0]", "2", "2") "}", 4, -1,
     KILN_ERR_FORMAT, "tensor 'a': field 'data_offsets' [2, 2] overlaps tensor 'b'"},
    {"{\"a\":" T("F32", "[1]", "0", "4") ",\"b\":" T("F32", "[1]", "8", "12") "}", 12, -1,
     KILN_ERR_FORMAT, "tensor 'b': field 'data_offsets': bytes [4, 8) of the data area"},
    {"{\"a\":" T("F32", "[1]", "0", "4") "}", 8, -1, KILN_ERR_FORMAT,
     "the data area has 8 bytes but the tensors end at 4"},
    {"{}", 3, -1, KILN_ERR_FORMAT, "the data area has 3 bytes but the tensors end at 0"},
    {"{\"a\":" T("U8", "[1]", "0", "1") ",\"a\":" T("U8", "[1]", "1", "2") "}", 2, -1,
     KILN_ERR_FORMAT, "tensor 'a' appears twice"},
    {"{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, -1,
     KILN_ERR_FORMAT, "tensor 'a': a field appears twice"},
    {"{\"__metadata__\":[1]}", 0, -1, KILN_ERR_FORMAT, "field '__metadata__' is not a JSON object"},
    {"{\"__metadata__\":{\"k\":1}}", 0, -1, KILN_ERR_FORMAT,
     "field '__metadata__': value of 'k' is not a string"},
    {"{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, -1, KILN_ERR_FORMAT,
     "field '__metadata__': key 'k' appears twice"},
    {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, -1, KILN_ERR_FORMAT,
     "field '__metadata__' appears twice"},
    {"{\"a\":" T("F4", "[3]", "0", "1") "}", 2, -1, KILN_ERR_UNSUPPORTED, "even last dimension"},
    {"{\"a\":" T("F4", "[]", "0", "1") "}", 1, -1, KILN_ERR_UNSUPPORTED, "even last dimension"},
    {"{\"a\":" T("F4", "[4]", "0", "4") "}", 4, -1, KILN_ERR_FORMAT,
     "spans 4 bytes but dtype F4 and shape [4] need 2"},
};

static void test_malformed_in_memory(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        size_t len;
        void *buf = make_file(BAD[i].header, BAD[i].data_len, BAD[i].length, &len);
        kiln_st *st = (kiln_st *)0x1;
        kiln_err err = {{0}};
        int rc = kiln_st_parse(buf, len, "mem.safetensors", &st, &err);
        print_message("case %zu: %s\n", i, rc ? err.msg : "(ok)");
        expect_error(rc, &err, BAD[i].rc, "mem.safetensors", BAD[i].want);
        assert_null(st);
        free(buf);
    }
    /* A NUL inside the header. */
    size_t len;
    unsigned char *buf = make_file("{\"a\":1}", 0, -1, &len);
    buf[10] = 0;
    kiln_st *st;
    kiln_err err;
    expect_error(kiln_st_parse(buf, len, "nul.safetensors", &st, &err), &err, KILN_ERR_FORMAT,
                 "nul.safetensors", "header: NUL byte at offset 2");
    free(buf);
    /* Shorter than the length itself. */
    for (size_t n = 0; n < 8; n++) {
        expect_error(kiln_st_parse("\0\0\0\0\0\0\0", n, "tiny", &st, &err), &err, KILN_ERR_FORMAT,
                     "tiny", "header length: the file has");
    }
}

static void test_good_edge_cases(void **state) {
    (void)state;
    static const struct {
        const char *header;
        size_t data_len;
        int count;
    } GOOD[] = {
        {"{}", 0, 0},
        {"  {}        ", 0, 0},
        {"{\"__metadata__\":null}", 0, 0},
        {"{\"__metadata__\":{\"a\":\"b\"},\"x\":" T("BF16", "[2,0]", "0", "0") "}", 0, 1},
        /* zero-sized tensors may sit anywhere in the tiling */
        {"{\"z\":" T("F32", "[0]", "4", "4") ",\"a\":" T("F32", "[1]", "0", "4") ",\"b\":" T(
             "F64", "[1]", "4", "12") ",\"unknown_key_is_ignored\":" T("I8", "[]", "12", "13") "}",
         13, 4},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"extra\":true}}", 4, 1},
    };
    for (size_t i = 0; i < sizeof GOOD / sizeof GOOD[0]; i++) {
        size_t len;
        void *buf = make_file(GOOD[i].header, GOOD[i].data_len, -1, &len);
        kiln_st *st = NULL;
        kiln_err err = {{0}};
        int rc = kiln_st_parse(buf, len, "good", &st, &err);
        free(buf);
        if (rc != KILN_OK)
            fail_msg("good case %zu: %s", i, err.msg);
        assert_int_equal(kiln_st_count(st), GOOD[i].count);
        kiln_st_free(st);
    }
    size_t len;
    void *buf = make_file("{\"__metadata__\":{\"a\":\"b\"},\"x\":" T("U8", "[3]", "0", "3") "}", 3,
                          -1, &len);
    kiln_st *st = NULL;
    assert_int_equal(kiln_st_parse(buf, len, "good", &st, NULL), KILN_OK);
    free(buf); /* the parser copied it */
    assert_string_equal(kiln_st_metadata(st, "a"), "b");
    const kiln_st_tensor *x = kiln_st_find(st, "x");
    assert_non_null(x);
    assert_memory_equal(x->data, "\x00\x01\x02", 3);
    kiln_st_free(st);
}

/* Malformed files on disk (tests/data/formats/st_bad/, made by hand: an 8-byte length, a header,
 * data bytes; each name says what is wrong): the message names the path. */
static void test_malformed_files(void **state) {
    (void)state;
    static const struct {
        const char *file;
        const char *want;
        int rc;
    } FILES[] = {
        {"short.safetensors", "header length: the file has 3 bytes", KILN_ERR_FORMAT},
        {"length_past_end.safetensors", "header length 4096 runs past the end", KILN_ERR_FORMAT},
        {"bad_json.safetensors", "header: not valid JSON", KILN_ERR_FORMAT},
        {"unknown_dtype.safetensors", "field 'dtype': unknown dtype 'F24'", KILN_ERR_FORMAT},
        {"overlap.safetensors", "tensor 'b': field 'data_offsets' [4, 12] overlaps tensor 'a'",
         KILN_ERR_FORMAT},
        {"size_mismatch.safetensors", "spans 4 bytes but dtype BF16 and shape [3] need 6",
         KILN_ERR_FORMAT},
        {"duplicate.safetensors", "tensor 'a' appears twice", KILN_ERR_FORMAT},
        {"metadata_not_string.safetensors", "'__metadata__': value of 'format' is not a string",
         KILN_ERR_FORMAT},
    };
    for (size_t i = 0; i < sizeof FILES / sizeof FILES[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, "tests/data/formats/st_bad/%s", FILES[i].file);
        kiln_st *st = (kiln_st *)0x1;
        kiln_err err = {{0}};
        int rc = kiln_st_load(path, &st, &err);
        expect_error(rc, &err, FILES[i].rc, path, FILES[i].want);
        assert_null(st);
    }
    kiln_st *st;
    kiln_err err;
    expect_error(kiln_st_load("tests/data/formats/st_bad/absent.safetensors", &st, &err), &err,
                 KILN_ERR_IO, "absent.safetensors", "cannot open");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_python_file),         cmocka_unit_test(test_f4_from_python),
        cmocka_unit_test(test_write_round_trip),    cmocka_unit_test(test_write_errors),
        cmocka_unit_test(test_malformed_in_memory), cmocka_unit_test(test_good_edge_cases),
        cmocka_unit_test(test_malformed_files),
    };
    return cmocka_run_group_tests_name("safetensors", tests, NULL, NULL);
}
