/* test_library.c: RUN/library/ written from a small store made here, on the real softmax_f32
 * problem and the real good softmax kernels (cpu and cuda; the cubin is built with NVRTC where it
 * loads, and that part says SKIP where it does not), plus a captured problem with a "kiln" object:
 * the winner chosen, the files written, and every manifest field parsed back with cJSON. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/lt_call.h"
#include "backend/nvrtc.h"
#include "gen/family.h"
#include "search/library.h"

#define SOFTMAX_DIR KILN_SOURCE_DIR "/tests/data/problems/softmax_f32"

/* ---- helpers ---- */

static char *make_run_dir(void) {
    char tmpl[] = "/tmp/kiln_test_library_XXXXXX";
    char *dir = mkdtemp(tmpl);
    assert_non_null(dir);
    return xstrdup(dir);
}

static void remove_run_dir(char *dir) {
    char *cmd = xasprintf("rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    free(cmd);
    free(dir);
}

static char *read_text(const char *path) {
    char *text = NULL;
    kiln_err err;
    if (kiln_read_file(path, &text, NULL, &err))
        fail_msg("%s", err.msg);
    return text;
}

static int file_exists(const char *dir, const char *name) {
    char *path = kiln_path_join(dir, name);
    struct stat st;
    int ok = stat(path, &st) == 0;
    free(path);
    return ok;
}

static int64_t problem(kiln_store *s, const char *name, const char *dir, double eager_us) {
    kiln_store_problem p = {.name = name,
                            .dir = dir,
                            .share = 0.4,
                            .eager_us = eager_us,
                            .compile_us = -1,
                            .sol_us = 1.5};
    int64_t id = 0;
    kiln_err err;
    if (kiln_store_problem_upsert(s, &p, &id, &err))
        fail_msg("%s", err.msg);
    return id;
}

static int64_t candidate(kiln_store *s, int64_t problem_id, const char *source, uint64_t bin) {
    kiln_store_candidate c = {.problem_id = problem_id,
                              .agent = "submitted",
                              .family = "softmax",
                              .params = "THREADS=256",
                              .source = source,
                              .source_hash = kiln_fnv1a(KILN_FNV_INIT, source, strlen(source)),
                              .binary_hash = bin};
    int64_t id = 0;
    kiln_err err;
    if (kiln_store_candidate_insert(s, &c, &id, &err))
        fail_msg("%s", err.msg);
    return id;
}

static void result(kiln_store *s, int64_t candidate_id, const char *outcome, double time_us,
                   const char *json) {
    kiln_err err;
    if (kiln_store_result_insert(s, candidate_id, outcome, json, time_us, 2.0,
                                 time_us > 0 ? 30.0 : -1, time_us > 0 ? 0.7 : 0, &err))
        fail_msg("%s", err.msg);
}

static kiln_store *new_store(const char *run, const char *backend) {
    kiln_store *s = NULL;
    kiln_err err;
    if (kiln_store_open(run, 0, &s, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(kiln_store_meta_set(s, KILN_META_BACKEND, backend, &err), KILN_OK);
    assert_int_equal(kiln_store_meta_set(s, KILN_META_KILN_VERSION, "0.1.0-test", &err), KILN_OK);
    if (strcmp(backend, "cuda") == 0) {
        assert_int_equal(kiln_store_meta_set(s, KILN_META_DEVICE_NAME, "NVIDIA H200", &err),
                         KILN_OK);
        assert_int_equal(kiln_store_meta_set(s, KILN_META_DEVICE_UUID, "GPU-test", &err), KILN_OK);
        assert_int_equal(kiln_store_meta_set(s, KILN_META_DEVICE_CC, "9.0", &err), KILN_OK);
    }
    return s;
}

static cJSON *load_manifest(const char *run) {
    char *path = xasprintf("%s/library/manifest.json", run);
    char *text = read_text(path);
    cJSON *m = cJSON_Parse(text);
    if (!m)
        fail_msg("%s does not parse", path);
    free(text);
    free(path);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(m, "kiln_library")->valueint, 1);
    return m;
}

static const cJSON *get(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v)
        fail_msg("manifest: no '%s'", key);
    return v;
}

static double num(const cJSON *o, const char *key) {
    const cJSON *v = get(o, key);
    if (!cJSON_IsNumber(v))
        fail_msg("manifest: '%s' is not a number", key);
    return v->valuedouble;
}

static const char *str(const cJSON *o, const char *key) {
    const cJSON *v = get(o, key);
    if (!cJSON_IsString(v))
        fail_msg("manifest: '%s' is not a string", key);
    return v->valuestring;
}

static void assert_ints(const cJSON *a, const int64_t *want, int n) {
    assert_true(cJSON_IsArray(a));
    assert_int_equal(cJSON_GetArraySize(a), n);
    for (int i = 0; i < n; i++)
        assert_int_equal((int64_t)cJSON_GetArrayItem(a, i)->valuedouble, want[i]);
}

/* The launches element for the workload with these axes. */
static const cJSON *launch_for(const cJSON *entry, int64_t rows, int64_t cols) {
    const cJSON *el;
    cJSON_ArrayForEach(el, get(entry, "launches")) {
        const cJSON *axes = get(el, "axes");
        if ((int64_t)num(axes, "rows") == rows && (int64_t)num(axes, "cols") == cols)
            return el;
    }
    fail_msg("no launch for rows=%lld cols=%lld", (long long)rows, (long long)cols);
    return NULL;
}

static const char ok_json[] =
    "{\"kiln_eval\": 1, \"outcome\": \"ok\", \"evidence\": {},"
    " \"workloads\": [{\"index\": 0, \"ref_time_us\": 16.0, \"time_us\": {\"median\": 8.0}},"
    "                {\"index\": 1, \"ref_time_us\": 25.0, \"time_us\": {\"median\": 12.5}}],"
    " \"summary\": {\"time_us_geomean\": 10.0, \"sol_pct_geomean\": 30.0,"
    "             \"sol_score_geomean\": 0.7}}";

/* ---- cpu ---- */

static void test_cpu_library_from_a_small_store(void **state) {
    (void)state;
    char *run = make_run_dir();
    char *good = read_text(KILN_SOURCE_DIR "/tests/kernels/cpu/good_softmax.c");
    char *wrong = read_text(KILN_SOURCE_DIR "/tests/kernels/cpu/wrong_softmax.c");
    kiln_store *s = new_store(run, "cpu");

    int64_t p = problem(s, "softmax_f32", SOFTMAX_DIR, 20.0);
    int64_t slow = candidate(s, p, good, 1);
    result(s, slow, "ok", 10.0, ok_json);
    /* Faster once, but its latest result (a re-check) failed: not a winner. */
    int64_t flaky = candidate(s, p, good, 2);
    result(s, flaky, "ok", 5.0, ok_json);
    result(s, flaky, "mismatch", -1, "{\"outcome\": \"mismatch\"}");
    int64_t bad = candidate(s, p, wrong, 3);
    result(s, bad, "mismatch", -1, NULL);
    int64_t slower = candidate(s, p, good, 4);
    result(s, slower, "ok", 11.0, ok_json);

    int64_t none = problem(s, "nothing_ok", SOFTMAX_DIR, 5.0);
    result(s, candidate(s, none, wrong, 5), "crashed", -1, NULL);
    int64_t gone = problem(s, "moved_away", "/nonexistent/kiln/problem", 5.0);
    result(s, candidate(s, gone, good, 6), "ok", 1.0, NULL);

    /* A stale kernel of an earlier write goes; what kiln did not write stays. */
    char *lib = kiln_path_join(run, "library");
    kiln_err err;
    assert_int_equal(kiln_mkdirs(lib, &err), KILN_OK);
    char *stale = kiln_path_join(lib, "old_problem.c"), *notes = kiln_path_join(lib, "notes.txt");
    assert_int_equal(kiln_write_file(stale, "x", 1, &err), KILN_OK);
    assert_int_equal(kiln_write_file(notes, "y", 1, &err), KILN_OK);

    kiln_library_report rep;
    int rc = kiln_library_write(s, run, NULL, &rep, &err);
    if (rc)
        fail_msg("%s", err.msg);
    print_message("    warnings:\n%s", rep.warnings);
    assert_int_equal(rep.n_problems, 3);
    assert_int_equal(rep.n_entries, 1);
    assert_non_null(strstr(rep.warnings, "moved_away: skipped"));
    assert_false(file_exists(lib, "old_problem.c"));
    assert_true(file_exists(lib, "notes.txt"));
    assert_true(file_exists(lib, "softmax_f32.c"));
    assert_false(file_exists(lib, "moved_away.c"));
    char *written = read_text(KILN_SOURCE_DIR "/tests/kernels/cpu/good_softmax.c");
    char *kernel_path = kiln_path_join(lib, "softmax_f32.c");
    char *kernel = read_text(kernel_path);
    assert_string_equal(kernel, written);

    cJSON *m = load_manifest(run);
    assert_string_equal(str(m, "backend"), "cpu");
    assert_string_equal(str(get(m, "build"), "kiln"), "0.1.0-test");
    assert_true(cJSON_IsNull(get(get(m, "build"), "nvrtc")));
    assert_string_equal(str(get(m, "device"), "compute_capability"), "0.0");
    const cJSON *entries = get(m, "entries");
    assert_int_equal(cJSON_GetArraySize(entries), 1);
    const cJSON *e = cJSON_GetArrayItem(entries, 0);
    assert_string_equal(str(e, "problem"), "softmax_f32");
    assert_string_equal(str(e, "kind"), "definition"); /* no "kiln" object: not captured */
    assert_string_equal(str(e, "kernel"), "softmax_f32.c");
    assert_null(cJSON_GetObjectItemCaseSensitive(e, "cubin"));
    assert_int_equal((int64_t)num(get(e, "candidate"), "id"), slow);
    assert_string_equal(str(get(e, "candidate"), "agent"), "submitted");
    assert_string_equal(str(e, "signature"),
                        "void softmax_rows(const float* x, float* y, int64_t rows, int64_t cols)");

    /* The gate: dense shapes of the first workload (rows = 1, cols = 1). */
    const cJSON *gate = get(e, "gate");
    const cJSON *x = cJSON_GetArrayItem(get(gate, "inputs"), 0);
    assert_string_equal(str(x, "name"), "x");
    assert_string_equal(str(x, "dtype"), "float32");
    int64_t one_one[] = {1, 1};
    assert_ints(get(x, "shape"), one_one, 2);
    assert_ints(get(x, "strides"), one_one, 2);
    assert_int_equal((int64_t)num(x, "storage_offset"), 0);
    assert_string_equal(str(cJSON_GetArrayItem(get(gate, "outputs"), 0), "name"), "y");
    assert_string_equal(str(gate, "device_capability"), "0.0");

    /* One launch element per distinct shape; cpu launches are one call of the entry. */
    assert_int_equal(cJSON_GetArraySize(get(e, "launches")), 4);
    const cJSON *l = launch_for(e, 5, 4097);
    const cJSON *l0 = cJSON_GetArrayItem(get(l, "launches"), 0);
    assert_string_equal(str(l0, "entry"), "softmax_rows");
    int64_t ones[] = {1, 1, 1};
    assert_ints(get(l0, "grid"), ones, 3);
    assert_int_equal((int64_t)num(l, "scratch_bytes"), 0);

    const cJSON *t = get(e, "time_us");
    assert_true(num(t, "kiln") == 10.0 && num(t, "eager") == 20.0);
    assert_true(cJSON_IsNull(get(t, "compile")));
    assert_true(num(e, "speedup") == 2.0);
    assert_true(num(e, "sol_pct") == 30.0);
    const cJSON *tol = get(e, "tolerance_met");
    assert_true(cJSON_IsNull(get(tol, "max_abs_err")));
    assert_true(num(get(tol, "tolerance"), "atol") == 1e-5);
    assert_true(num(get(tol, "tolerance"), "rel_l2") == 1e-5);
    cJSON_Delete(m);

    /* The coordinator's incumbent wins over the fastest (here: the slower one it kept). */
    assert_int_equal(kiln_store_incumbent_set(s, p, slower, &err), KILN_OK);
    assert_int_equal(kiln_library_write(s, run, NULL, &rep, &err), KILN_OK);
    m = load_manifest(run);
    e = cJSON_GetArrayItem(get(m, "entries"), 0);
    assert_int_equal((int64_t)num(get(e, "candidate"), "id"), slower);
    assert_true(num(get(e, "time_us"), "kiln") == 11.0);
    cJSON_Delete(m);
    /* ...unless its latest result is not ok. */
    result(s, slower, "timeout", -1, NULL);
    assert_int_equal(kiln_library_write(s, run, NULL, &rep, &err), KILN_OK);
    assert_non_null(strstr(rep.warnings, "no ok result"));
    m = load_manifest(run);
    e = cJSON_GetArrayItem(get(m, "entries"), 0);
    assert_int_equal((int64_t)num(get(e, "candidate"), "id"), slow);
    cJSON_Delete(m);
    kiln_store_close(s);

    /* A read-only store will do, and leaves no temporary files behind. */
    assert_int_equal(kiln_store_open(run, 1, &s, &err), KILN_OK);
    assert_int_equal(kiln_library_write(s, run, NULL, &rep, &err), KILN_OK);
    assert_int_equal(rep.n_entries, 1);
    kiln_store_close(s);
    char *cmd = xasprintf("ls '%s' | grep -c tmp", lib);
    FILE *f = popen(cmd, "r");
    int n_tmp = -1;
    assert_int_equal(fscanf(f, "%d", &n_tmp), 1);
    pclose(f);
    assert_int_equal(n_tmp, 0);
    free(cmd);

    free(kernel);
    free(kernel_path);
    free(written);
    free(stale);
    free(notes);
    free(lib);
    free(good);
    free(wrong);
    remove_run_dir(run);
}

/* ---- cuda ---- */

static void test_cuda_library_with_cubin(void **state) {
    (void)state;
    char *run = make_run_dir();
    char *good = read_text(KILN_SOURCE_DIR "/tests/kernels/cuda/good_softmax_f32.cu");
    kiln_store *s = new_store(run, "cuda");
    int64_t p = problem(s, "softmax_f32", SOFTMAX_DIR, 20.0);
    int64_t c = candidate(s, p, good, 0xc0da);
    result(s, c, "ok", 4.0, ok_json);

    int have_nvrtc = kiln_cuda_have_nvrtc();
    if (!have_nvrtc)
        print_message("    SKIP (cubin part): NVRTC does not load here; checking the source-only "
                      "entry\n");
    kiln_library_report rep;
    kiln_err err;
    int rc = kiln_library_write(s, run, NULL, &rep, &err);
    if (rc)
        fail_msg("%s", err.msg);
    assert_int_equal(rep.n_entries, 1);
    char *lib = kiln_path_join(run, "library");
    assert_true(file_exists(lib, "softmax_f32.cu"));
    cJSON *m = load_manifest(run);
    assert_string_equal(str(m, "backend"), "cuda");
    const cJSON *dev = get(m, "device");
    assert_string_equal(str(dev, "name"), "NVIDIA H200");
    assert_string_equal(str(dev, "uuid"), "GPU-test");
    assert_string_equal(str(dev, "compute_capability"), "9.0");
    const cJSON *e = cJSON_GetArrayItem(get(m, "entries"), 0);
    assert_string_equal(str(e, "kernel"), "softmax_f32.cu");
    assert_string_equal(str(e, "arch"), "sm_90");
    assert_string_equal(str(get(e, "gate"), "device_capability"), "9.0");
    assert_string_equal(str(e, "signature"),
                        "extern \"C\" __global__ void softmax_rows(const float* x, float* y, "
                        "int64_t rows, int64_t cols)");
    /* grid=rows block=256, evaluated per shape. */
    const cJSON *l0 = cJSON_GetArrayItem(get(launch_for(e, 64, 256), "launches"), 0);
    int64_t grid[] = {64, 1, 1}, block[] = {256, 1, 1}, one[] = {1, 1, 1};
    assert_ints(get(l0, "grid"), grid, 3);
    assert_ints(get(l0, "block"), block, 3);
    assert_ints(get(l0, "cluster"), one, 3);
    assert_int_equal((int64_t)num(l0, "smem_bytes"), 0);
    const cJSON *d0 = cJSON_GetArrayItem(get(e, "directives"), 0);
    assert_string_equal(str(d0, "entry"), "softmax_rows");
    assert_string_equal(cJSON_GetArrayItem(get(d0, "grid"), 0)->valuestring, "rows");
    assert_string_equal(cJSON_GetArrayItem(get(d0, "block"), 0)->valuestring, "256");
    assert_true(num(e, "speedup") == 5.0);

    if (have_nvrtc) {
        assert_string_equal(str(e, "cubin"), "softmax_f32.cubin");
        char *path = kiln_path_join(lib, "softmax_f32.cubin");
        char *bin = NULL;
        size_t n = 0;
        assert_int_equal(kiln_read_file(path, &bin, &n, &err), KILN_OK);
        assert_true(n > 1000);
        assert_memory_equal(bin, "\177ELF", 4);
        free(bin);
        free(path);
        assert_true(cJSON_IsString(get(get(m, "build"), "nvrtc")));
        print_message("    cubin: %zu bytes, NVRTC %s\n", n, str(get(m, "build"), "nvrtc"));
        assert_int_equal(rep.n_without_cubin, 0);
    } else {
        assert_true(cJSON_IsNull(get(e, "cubin")));
        assert_int_equal(rep.n_without_cubin, 1);
    }
    cJSON_Delete(m);

    /* A winner that no longer compiles is skipped, never shipped. */
    if (have_nvrtc) {
        int64_t p2 = problem(s, "softmax_broken", SOFTMAX_DIR, 20.0);
        int64_t c2 = candidate(s, p2,
                               "// kiln: launch k grid=rows block=32\n"
                               "extern \"C\" __global__ void k(const float *x, float *y, "
                               "int64_t rows, int64_t cols) { this does not compile }\n",
                               0xbad);
        result(s, c2, "ok", 1.0, NULL);
        assert_int_equal(kiln_library_write(s, run, NULL, &rep, &err), KILN_OK);
        assert_int_equal(rep.n_entries, 1);
        assert_non_null(strstr(rep.warnings, "softmax_broken: skipped"));
        assert_false(file_exists(lib, "softmax_broken.cu"));
    }
    kiln_store_close(s);
    free(lib);
    free(good);
    remove_run_dir(run);
}

/* A cublaslt winner: the library keeps the configuration its gate settled on (the static table),
 * not the index the search picked, and no cubin; a winner whose result records none is skipped. */
static void test_cuda_library_cublaslt(void **state) {
    (void)state;
    char *run = make_run_dir();
    kiln_store *s = new_store(run, "cuda");
    const char *dir = KILN_SOURCE_DIR "/tests/data/families/cublaslt/linear_bias_f32";
    kiln_problem *prob = NULL;
    kiln_err err;
    assert_int_equal(kiln_problem_load(dir, &prob, &err), KILN_OK);
    const kiln_family *f = kiln_family_find("cublaslt");
    kiln_match m;
    char why[256];
    assert_true(f->match(prob, &m, why, sizeof why));
    int64_t pt[KILN_FAMILY_MAX_PARAMS];
    kiln_family_point(f, 37, pt);
    char *src = f->emit(prob, &m, pt, 1);
    kiln_abi abi;
    assert_int_equal(kiln_abi_parse(src, 1, &abi, &err), KILN_OK);
    kiln_lt_call_desc d;
    assert_int_equal(kiln_lt_call_parse(abi.library_args, NULL, &d, &err), KILN_OK);
    kiln_abi_free(&abi);
    assert_int_equal(d.index, 37);
    /* what the cuda backend settles index 37 to on the device */
    d.has_config = 1;
    d.config = (kiln_lt_config){.algo = 71,
                                .tile = 20,
                                .stages = 21,
                                .split_k = 4,
                                .reduction = 2,
                                .workspace = 65536,
                                .heuristic = -1};
    d.version = 130100;
    char *settled = kiln_lt_call_json(&d);
    char *res = xasprintf("{\"kiln_eval\": 1, \"outcome\": \"ok\", \"evidence\": {}, "
                          "\"library\": %s, \"workloads\": [{\"index\": 0, \"ref_time_us\": "
                          "16.0, \"time_us\": {\"median\": 8.0}}], \"summary\": "
                          "{\"time_us_geomean\": 8.0}}",
                          settled);
    int64_t p = problem(s, prob->name, dir, 20.0);
    int64_t c = candidate(s, p, src, 0x17);
    result(s, c, "ok", 4.0, res);

    kiln_library_report rep;
    if (kiln_library_write(s, run, NULL, &rep, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(rep.n_entries, 1);
    assert_int_equal(rep.n_without_cubin, 0);
    cJSON *man = load_manifest(run);
    const cJSON *e = cJSON_GetArrayItem(get(man, "entries"), 0);
    assert_true(cJSON_IsNull(get(e, "cubin")));
    const cJSON *lib = get(e, "library");
    assert_string_equal(str(lib, "name"), "cublaslt");
    kiln_lt_config stored;
    assert_int_equal(kiln_lt_config_from_json(get(get(lib, "call"), "config"), &stored, &err),
                     KILN_OK);
    assert_true(kiln_lt_config_same(&stored, &d.config));
    assert_int_equal(stored.workspace, 65536);
    assert_int_equal((int64_t)num(get(lib, "call"), "version"), 130100);
    /* the kernel file is the directive with the configuration itself */
    char *path = xasprintf("%s/library/%s", run, str(e, "kernel"));
    char *kept = read_text(path);
    assert_int_equal(kiln_abi_parse(kept, 1, &abi, &err), KILN_OK);
    kiln_lt_call_desc back;
    assert_int_equal(kiln_lt_call_parse(abi.library_args, NULL, &back, &err), KILN_OK);
    assert_int_equal(back.has_config, 1);
    assert_true(kiln_lt_config_same(&back.config, &d.config));
    assert_int_equal(back.arg_bias, 2);
    kiln_abi_free(&abi);
    const cJSON *el = cJSON_GetArrayItem(get(e, "launches"), 0);
    assert_int_equal(cJSON_GetArraySize(get(el, "launches")), 0);
    cJSON_Delete(man);
    free(kept);
    free(path);

    /* a newer, faster result without the settled call: the problem is skipped, with the reason */
    int64_t c2 = candidate(s, p, src, 0x18);
    result(s, c2, "ok", 2.0, ok_json);
    assert_int_equal(kiln_library_write(s, run, NULL, &rep, &err), KILN_OK);
    assert_int_equal(rep.n_entries, 0);
    assert_non_null(strstr(rep.warnings, "records no settled cuBLASLt call"));

    kiln_store_close(s);
    kiln_problem_free(prob);
    free(settled);
    free(res);
    free(src);
    remove_run_dir(run);
}

/* ---- a captured problem ---- */

/* An aten problem as capture writes it: a transposed input (memory order), the call's arguments. */
static const char captured_def[] =
    "{\"name\": \"softmax_cap\", \"op_type\": \"_softmax\",\n"
    " \"axes\": {\"n8\": {\"type\": \"const\", \"value\": 8}, \"n16\": {\"type\": \"const\", "
    "\"value\": 16}},\n"
    " \"inputs\": {\"self\": {\"shape\": [\"n8\", \"n16\"], \"dtype\": \"bfloat16\"}},\n"
    " \"outputs\": {\"out0\": {\"shape\": [\"n8\", \"n16\"], \"dtype\": \"bfloat16\"}},\n"
    " \"reference\": \"import torch\\ndef run(self):\\n    return torch.softmax(self, -1)\\n\",\n"
    " \"kiln\": {\"kind\": \"aten\", \"aten\": \"aten::_softmax.default\", \"calls\": 12,\n"
    "          \"content_hash\": \"c0ffee0123456789c0ffee0123456789\",\n"
    "          \"share\": 0.31, \"device_time_us\": 120.5, \"grad_mode\": false,\n"
    "          \"module_paths\": [\"model.layers.0.attn\"],\n"
    "          \"args\": {\"args\": [{\"tensor\": 0}, -1, false], \"kwargs\": {}},\n"
    "          \"shapes\": {\"self\": [8, 16], \"out0\": [8, 16]},\n"
    "          \"strides\": {\"self\": [1, 8], \"out0\": [16, 1]},\n"
    "          \"storage_offsets\": {\"self\": 4, \"out0\": 0},\n"
    "          \"layouts\": {\"self\": {\"stored\": \"memory_order\", \"permute\": [1, 0]},\n"
    "                      \"out0\": {\"stored\": \"contiguous\"}},\n"
    "          \"tolerance\": {\"atol\": 0.02, \"rtol\": 0.03, \"rel_l2\": 0.01}}}\n";
static const char captured_wl[] =
    "{\"uuid\": \"real\", \"axes\": {}, \"inputs\": {\"self\": {\"type\": \"random\"}}}\n"
    "{\"uuid\": \"rand1\", \"axes\": {}, \"inputs\": {\"self\": {\"type\": \"random\"}}}\n";

static const char module_wl[] =
    "{\"uuid\": \"real\", \"axes\": {}, \"inputs\": {\"input0\": {\"type\": \"random\"}, "
    "\"weight\": {\"type\": \"random\"}}}\n";

static const char module_def[] =
    "{\"name\": \"module_RMSNorm_8x16_bf16\", \"op_type\": \"module:RMSNorm\",\n"
    " \"axes\": {\"n8\": {\"type\": \"const\", \"value\": 8}, \"n16\": {\"type\": \"const\", "
    "\"value\": 16}},\n"
    " \"inputs\": {\"input0\": {\"shape\": [\"n8\", \"n16\"], \"dtype\": \"bfloat16\"},\n"
    "            \"weight\": {\"shape\": [\"n16\"], \"dtype\": \"bfloat16\"}},\n"
    " \"outputs\": {\"out0\": {\"shape\": [\"n8\", \"n16\"], \"dtype\": \"bfloat16\"}},\n"
    " \"reference\": \"def run(input0, weight):\\n    return input0\\n\",\n"
    " \"kiln\": {\"kind\": \"module\", \"module_class\": \"RMSNorm\",\n"
    "          \"module_paths\": [\"model.norm\", \"model.layers.0.norm\"]}}\n";

static const char cpu_kernel[] = "// kiln: launch kiln_kernel\n"
                                 "void kiln_kernel(const kiln_bf16 *self, kiln_bf16 *out0, "
                                 "int64_t n8, int64_t n16) { (void)self; (void)out0; }\n";

static char *write_problem(const char *run, const char *name, const char *def, const char *wl) {
    char *dir = xasprintf("%s/problems/%s", run, name);
    kiln_err err;
    assert_int_equal(kiln_mkdirs(dir, &err), KILN_OK);
    char *p = kiln_path_join(dir, "definition.json");
    assert_int_equal(kiln_write_file(p, def, strlen(def), &err), KILN_OK);
    free(p);
    p = kiln_path_join(dir, "workload.jsonl");
    assert_int_equal(kiln_write_file(p, wl, strlen(wl), &err), KILN_OK);
    free(p);
    return dir;
}

static void test_captured_problems_carry_their_gate(void **state) {
    (void)state;
    char *run = make_run_dir();
    char *cap_dir = write_problem(run, "softmax_cap", captured_def, captured_wl);
    char *mod_dir = write_problem(run, "module_RMSNorm_8x16_bf16", module_def, module_wl);
    kiln_store *s = new_store(run, "cpu");
    int64_t p = problem(s, "softmax_cap", cap_dir, -1); /* eager from the result */
    result(s, candidate(s, p, cpu_kernel, 9), "ok", 5.0, ok_json);
    int64_t pm = problem(s, "module_RMSNorm_8x16_bf16", mod_dir, 7.5);
    result(s, candidate(s, pm, cpu_kernel, 10), "ok", 2.5, NULL);
    /* A name that is not a file name gets one. */
    int64_t pw = problem(s, "../weird name", cap_dir, 3.0);
    result(s, candidate(s, pw, cpu_kernel, 11), "ok", 1.0, NULL);

    kiln_library_options opt = {.kiln_version = "9.9.9"};
    kiln_library_report rep;
    kiln_err err;
    int rc = kiln_library_write(s, run, &opt, &rep, &err);
    if (rc)
        fail_msg("%s", err.msg);
    if (rep.n_entries != 3)
        fail_msg("%d entries; warnings:\n%s", rep.n_entries, rep.warnings);
    cJSON *m = load_manifest(run);
    assert_string_equal(str(get(m, "build"), "kiln"), "9.9.9");
    const cJSON *entries = get(m, "entries");

    const cJSON *e = cJSON_GetArrayItem(entries, 0);
    assert_string_equal(str(e, "problem"), "softmax_cap");
    assert_string_equal(str(e, "kind"), "aten");
    assert_string_equal(str(e, "aten"), "aten::_softmax.default");
    assert_null(cJSON_GetObjectItemCaseSensitive(e, "module_class"));
    const cJSON *gate = get(e, "gate");
    const cJSON *self = cJSON_GetArrayItem(get(gate, "inputs"), 0);
    assert_string_equal(str(self, "name"), "self");
    assert_string_equal(str(self, "dtype"), "bfloat16");
    int64_t shape[] = {8, 16}, strides[] = {1, 8}, dense[] = {16, 1};
    assert_ints(get(self, "shape"), shape, 2);
    assert_ints(get(self, "strides"), strides, 2);
    assert_int_equal((int64_t)num(self, "storage_offset"), 4);
    assert_string_equal(str(get(self, "layout"), "stored"), "memory_order");
    const cJSON *out0 = cJSON_GetArrayItem(get(gate, "outputs"), 0);
    assert_ints(get(out0, "strides"), dense, 2);
    const cJSON *args = get(get(gate, "args"), "args");
    assert_int_equal(cJSON_GetArraySize(args), 3);
    assert_int_equal(cJSON_GetArrayItem(args, 1)->valueint, -1);
    assert_true(cJSON_IsFalse(get(gate, "grad_mode")));
    /* Two workloads of one shape: one launch element naming both. */
    assert_int_equal(cJSON_GetArraySize(get(e, "launches")), 1);
    assert_int_equal(
        cJSON_GetArraySize(get(cJSON_GetArrayItem(get(e, "launches"), 0), "workloads")), 2);
    /* eager = geomean of the result's ref_time_us (16, 25) = 20; kiln 5. */
    assert_true(fabs(num(get(e, "time_us"), "eager") - 20.0) < 1e-9);
    assert_true(fabs(num(e, "speedup") - 4.0) < 1e-9);
    assert_true(num(get(get(e, "tolerance_met"), "tolerance"), "rtol") == 0.03);

    const cJSON *em = cJSON_GetArrayItem(entries, 1);
    assert_string_equal(str(em, "kind"), "module");
    assert_string_equal(str(em, "module_class"), "RMSNorm");
    assert_int_equal(cJSON_GetArraySize(get(em, "module_paths")), 2);
    assert_string_equal(cJSON_GetArrayItem(get(em, "module_paths"), 1)->valuestring,
                        "model.layers.0.norm");
    /* No kiln shapes: dense from the workload; the bf16 default tolerance. */
    const cJSON *weight = cJSON_GetArrayItem(get(get(em, "gate"), "inputs"), 1);
    int64_t wshape[] = {16}, wstride[] = {1};
    assert_ints(get(weight, "shape"), wshape, 1);
    assert_ints(get(weight, "strides"), wstride, 1);
    assert_true(num(get(get(em, "tolerance_met"), "tolerance"), "atol") == 1e-2);
    assert_true(num(em, "speedup") == 3.0);

    const cJSON *ew = cJSON_GetArrayItem(entries, 2);
    const char *kernel = str(ew, "kernel");
    assert_null(strchr(kernel, '/'));
    assert_true(kernel[0] != '.');
    char *lib = kiln_path_join(run, "library");
    assert_true(file_exists(lib, kernel));
    cJSON_Delete(m);
    kiln_store_close(s);
    free(lib);
    free(cap_dir);
    free(mod_dir);
    remove_run_dir(run);
}

/* A problem is its content: the store's results for one content are not another's kernel. */
static void test_another_content_is_refused(void **state) {
    (void)state;
    char *run = make_run_dir();
    char *cap_dir = write_problem(run, "softmax_cap", captured_def, captured_wl);
    kiln_store *s = new_store(run, "cpu");
    kiln_err err;
    const char *hashes[] = {"c0ffee0123456789c0ffee0123456789", "deadbeef000000000000000000000000"};
    const char *names[] = {"softmax_cap", "softmax_was_other"};
    for (int i = 0; i < 2; i++) {
        kiln_store_problem sp = {.name = names[i],
                                 .dir = cap_dir,
                                 .share = 0.4,
                                 .eager_us = 9.0,
                                 .compile_us = -1,
                                 .sol_us = -1,
                                 .content_hash = hashes[i]};
        int64_t id = 0;
        if (kiln_store_problem_upsert(s, &sp, &id, &err))
            fail_msg("%s", err.msg);
        result(s, candidate(s, id, cpu_kernel, 20 + (uint64_t)i), "ok", 3.0, ok_json);
    }
    kiln_library_options opt = {.kiln_version = "9.9.9"};
    kiln_library_report rep;
    if (kiln_library_write(s, run, &opt, &rep, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(rep.n_entries, 1);
    assert_non_null(strstr(rep.warnings, "softmax_was_other: skipped: its directory holds another "
                                         "problem now (content c0ffee012345; the store's results "
                                         "are for deadbeef0000)"));
    cJSON *m = load_manifest(run);
    const cJSON *e = cJSON_GetArrayItem(get(m, "entries"), 0);
    assert_string_equal(str(e, "problem"), "softmax_cap");
    assert_string_equal(str(e, "content_hash"), hashes[0]);
    cJSON_Delete(m);
    kiln_store_close(s);
    free(cap_dir);
    remove_run_dir(run);
}

static void test_unknown_backend_is_refused(void **state) {
    (void)state;
    char *run = make_run_dir();
    kiln_store *s = new_store(run, "cpu");
    kiln_library_options opt = {.backend = "tpu"};
    kiln_err err = {{0}};
    assert_int_equal(kiln_library_write(s, run, &opt, NULL, &err), KILN_ERR_INVALID);
    assert_non_null(strstr(err.msg, "tpu"));
    /* An empty store writes an empty library. */
    assert_int_equal(kiln_library_write(s, run, NULL, NULL, &err), KILN_OK);
    cJSON *m = load_manifest(run);
    assert_int_equal(cJSON_GetArraySize(get(m, "entries")), 0);
    cJSON_Delete(m);
    kiln_store_close(s);
    remove_run_dir(run);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_library_from_a_small_store),
        cmocka_unit_test(test_cuda_library_with_cubin),
        cmocka_unit_test(test_cuda_library_cublaslt),
        cmocka_unit_test(test_captured_problems_carry_their_gate),
        cmocka_unit_test(test_another_content_is_refused),
        cmocka_unit_test(test_unknown_backend_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
