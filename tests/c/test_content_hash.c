/* test_content_hash.c: the C side of a problem's identity (src/formats/content_hash.c): the value
 * the recipe fixes for tests/data/problems/softmax_f32 (the Python side's test holds the same one,
 * tests/py/test_capture_size.py checks both agree on captured problems), what is content and what
 * is not, and clear errors for a tensor file that is missing, lacks the tensor or is cut short. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/content_hash.h"
#include "formats/safetensors.h"

static const char def_json[] =
    "{\"name\": \"scale\", \"description\": \"x times two\", \"op_type\": \"mul\",\n"
    " \"axes\": {\"n\": {\"type\": \"const\", \"value\": 4}},\n"
    " \"inputs\": {\"x\": {\"shape\": [\"n\"], \"dtype\": \"float32\"}},\n"
    " \"outputs\": {\"y\": {\"shape\": [\"n\"], \"dtype\": \"float32\"}},\n"
    " \"reference\": \"def run(x):\\n    return x * 2\\n\",\n"
    " \"kiln\": {\"share\": 0.5}}\n";

static void write_text(const char *dir, const char *name, const char *text) {
    char *path = kiln_path_join(dir, name);
    kiln_err err;
    if (kiln_write_file(path, text, strlen(text), &err))
        fail_msg("%s", err.msg);
    free(path);
}

static void write_tensor(const char *dir, const char *key, float last) {
    float x[4] = {1, 2, 3, last};
    kiln_st_tensor t = {
        .name = key, .dtype = KILN_F32, .ndim = 1, .shape = {4}, .n_bytes = 16, .data = x};
    char *path = kiln_path_join(dir, "t.safetensors");
    kiln_err err;
    if (kiln_st_write(path, &t, 1, &err))
        fail_msg("%s", err.msg);
    free(path);
}

static const char wl_line[] = "{\"uuid\": \"%s\", \"axes\": {}, \"inputs\": {\"x\": {\"type\": "
                              "\"safetensors\", \"path\": \"t.safetensors\", \"tensor_key\": "
                              "\"x\"}}}\n";

static void write_workload(const char *dir, const char *uuid) {
    char line[512];
    snprintf(line, sizeof line, wl_line, uuid);
    write_text(dir, "workload.jsonl", line);
}

static void hash_of(const char *dir, char *hex) {
    kiln_err err;
    if (kiln_content_hash_dir(dir, hex, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(strlen(hex), 32);
}

static void test_the_recipes_fixed_value(void **state) {
    (void)state;
    char hex[KILN_CONTENT_HASH_LEN];
    hash_of(KILN_SOURCE_DIR "/tests/data/problems/softmax_f32", hex);
    assert_string_equal(hex, "ea1c6f4de7cc7a4dea65f745c855c30d");
}

static void test_content_and_not_content(void **state) {
    (void)state;
    char tmpl[] = "/tmp/kiln-test-hash-XXXXXX";
    char *dir = mkdtemp(tmpl);
    assert_non_null(dir);
    write_text(dir, "definition.json", def_json);
    write_workload(dir, "u-1");
    write_tensor(dir, "x", 4);
    char a[KILN_CONTENT_HASH_LEN], b[KILN_CONTENT_HASH_LEN];
    hash_of(dir, a);
    /* not content: the uuid, the name, the description, the kiln object */
    write_workload(dir, "u-2");
    char *other = xstrdup(def_json);
    memcpy(strstr(other, "scale"), "other", 5);
    memcpy(strstr(other, "0.5"), "0.9", 3);
    write_text(dir, "definition.json", other);
    hash_of(dir, b);
    assert_string_equal(a, b);
    /* content: a tensor byte */
    write_tensor(dir, "x", 5);
    hash_of(dir, b);
    assert_string_not_equal(a, b);
    write_tensor(dir, "x", 4);
    hash_of(dir, b);
    assert_string_equal(a, b);
    /* content: the reference */
    memcpy(strstr(other, "x * 2"), "x * 3", 5);
    write_text(dir, "definition.json", other);
    hash_of(dir, b);
    assert_string_not_equal(a, b);
    write_text(dir, "definition.json", def_json);

    /* the digest of the data is kept with the file's stat: the same stat is not read again (a
     * digest changed in the cache shows through), a write to the file is */
    char *cache = kiln_path_join(dir, "kiln/digests.json");
    char *text = NULL;
    kiln_err cerr;
    assert_int_equal(kiln_read_file(cache, &text, NULL, &cerr), KILN_OK);
    char *at = strstr(text, "\"blake2b\":\"");
    assert_non_null(at);
    at += strlen("\"blake2b\":\"");
    at[0] = at[0] == '0' ? '1' : '0';
    assert_int_equal(kiln_write_file(cache, text, strlen(text), &cerr), KILN_OK);
    free(text);
    hash_of(dir, b);
    assert_string_not_equal(a, b); /* the cached (doctored) digest was used */
    write_tensor(dir, "x", 4);     /* rewritten: another inode and change time */
    hash_of(dir, b);
    assert_string_equal(a, b);
    unlink(cache); /* a missing cache is no error */
    hash_of(dir, b);
    assert_string_equal(a, b);
    free(cache);

    /* errors name the file and what is wrong */
    kiln_err err;
    char hex[KILN_CONTENT_HASH_LEN];
    write_tensor(dir, "not_x", 4);
    assert_int_equal(kiln_content_hash_dir(dir, hex, &err), KILN_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "t.safetensors: no tensor 'x'"));
    write_tensor(dir, "x", 4);
    char *path = kiln_path_join(dir, "t.safetensors");
    assert_int_equal(truncate(path, 8 + 64), 0);
    assert_int_equal(kiln_content_hash_dir(dir, hex, &err), KILN_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "t.safetensors"));
    unlink(path);
    assert_int_equal(kiln_content_hash_dir(dir, hex, &err), KILN_ERR_IO);
    assert_non_null(strstr(err.msg, "t.safetensors: cannot read"));
    write_text(dir, "workload.jsonl", "{\"inputs\": 3\n");
    assert_int_equal(kiln_content_hash_dir(dir, hex, &err), KILN_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "workload.jsonl:1: not a JSON object"));
    free(path);
    free(other);
    char *cmd = xasprintf("rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    free(cmd);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_recipes_fixed_value),
        cmocka_unit_test(test_content_and_not_content),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
