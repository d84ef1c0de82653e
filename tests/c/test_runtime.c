/* test_runtime.c: libkiln_rt's entry points, linked from the objects build/libkiln_rt.so is made of
 * (src/runtime and the core archive, nothing of the tool): a cpu library opens, gates and launches,
 * and an allocation that fails anywhere inside kiln_rt_open comes back as a status, never as an
 * abort of the host process.
 *
 * How allocations fail. The binary is linked with --wrap=malloc,calloc,realloc, so every call the
 * kiln objects make (xmalloc, xcalloc, xrealloc: the core's one allocator) goes through
 * __wrap_malloc and friends below, and cJSON's go through hooks installed with cJSON_InitHooks. The
 * sweep makes the n-th such allocation fail, for n = 0, 1, 2, ... until an open makes fewer than n
 * allocations, each in a forked child so that an abort or a crash is seen as what it is. The code
 * that fails is the real one: the allocator's call of kiln_out_of_memory, the jump to
 * kiln_rt_open's scope, its clean-up. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/cuda_driver.h"
#include "backend/lt_call.h"
#include "runtime/kiln_rt.h"
#include "runtime/rt_impl.h"
#include "util/common.h"

#include "tma_copy.h"

/* ---- the allocator, wrapped ---- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t count, size_t size);
void *__real_realloc(void *p, size_t n);

enum { FAIL_NONE, FAIL_KILN, FAIL_JSON };
static int fail_kind = FAIL_NONE;
static long fail_at = -1; /* the index of the allocation that fails */
static long n_allocs;     /* allocations of fail_kind seen since arm() */

static void arm(int kind, long at) {
    fail_kind = kind;
    fail_at = at;
    n_allocs = 0;
}

static int fails_now(int kind) {
    return fail_kind == kind && n_allocs++ == fail_at;
}

void *__wrap_malloc(size_t n) {
    return fails_now(FAIL_KILN) ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t count, size_t size) {
    return fails_now(FAIL_KILN) ? NULL : __real_calloc(count, size);
}

void *__wrap_realloc(void *p, size_t n) {
    return fails_now(FAIL_KILN) ? NULL : __real_realloc(p, n);
}

static void *json_malloc(size_t n) {
    return fails_now(FAIL_JSON) ? NULL : __real_malloc(n);
}

/* ---- a cpu library ---- */

static char lib_dir[256];

static const char kernel[] = "// kiln: launch scale\n"
                             "void scale(const float *x, float *y, int64_t n) {\n"
                             "    for (int64_t i = 0; i < n; i++)\n"
                             "        y[i] = 2.0f * x[i];\n"
                             "}\n";

/* Two entries: one that compiles and launches, one disabled (a scalar input); an anonymous device,
 * so that the open also writes a note. */
static const char manifest_fmt[] =
    "{\"kiln_library\": 1, \"backend\": \"cpu\",\n"
    " \"device\": {\"name\": \"\", \"uuid\": \"\", \"compute_capability\": \"0.0\"},\n"
    " \"build\": {\"kiln\": \"%s\"},\n"
    " \"entries\": [\n"
    "  {\"problem\": \"scale\", \"kind\": \"aten\", \"aten\": \"aten::mul.Tensor\",\n"
    "   \"gate\": {\"inputs\": [{\"name\": \"x\", \"dtype\": \"float32\", \"shape\": [64], "
    "\"strides\": [1]}],\n"
    "            \"outputs\": [{\"name\": \"y\", \"dtype\": \"float32\", \"shape\": [64], "
    "\"strides\": [1]}]},\n"
    "   \"kernel\": \"scale.c\", \"signature\": \"void scale(const float* x, float* y, int64_t "
    "n)\",\n"
    "   \"launches\": [{\"workloads\": [0], \"axes\": {\"n\": 64}, \"launches\": [{\"entry\": "
    "\"scale\", \"grid\": [1, 1, 1], \"block\": [1, 1, 1], \"cluster\": [1, 1, 1], "
    "\"smem_bytes\": 0}]}]},\n"
    "  {\"problem\": \"scale_by\", \"kind\": \"aten\", \"aten\": \"aten::mul.Scalar\",\n"
    "   \"gate\": {\"inputs\": [{\"name\": \"x\", \"dtype\": \"float32\", \"shape\": [64], "
    "\"strides\": [1]}, {\"name\": \"s\", \"dtype\": \"float32\", \"scalar\": true}],\n"
    "            \"outputs\": [{\"name\": \"y\", \"dtype\": \"float32\", \"shape\": [64], "
    "\"strides\": [1]}]},\n"
    "   \"kernel\": \"scale.c\", \"signature\": \"void scale(const float* x, float s, float* y, "
    "int64_t n)\",\n"
    "   \"launches\": [{\"workloads\": [0], \"axes\": {\"n\": 64}, \"launches\": [{\"entry\": "
    "\"scale\", \"grid\": [1, 1, 1], \"block\": [1, 1, 1], \"cluster\": [1, 1, 1], "
    "\"smem_bytes\": 0}]}]}\n"
    " ]}\n";

static int write_text(const char *dir, const char *name, const char *text) {
    char *path = kiln_path_join(dir, name);
    int rc = kiln_write_file(path, text, strlen(text), NULL);
    free(path);
    return rc;
}

static int setup(void **state) {
    (void)state;
    snprintf(lib_dir, sizeof lib_dir, "/tmp/kiln-test-runtime-XXXXXX");
    if (!mkdtemp(lib_dir))
        return -1;
    char manifest[sizeof manifest_fmt + 64];
    snprintf(manifest, sizeof manifest, manifest_fmt, kiln_rt_kiln_version());
    if (write_text(lib_dir, "scale.c", kernel) || write_text(lib_dir, "manifest.json", manifest))
        return -1;
    cJSON_Hooks hooks = {json_malloc, free};
    cJSON_InitHooks(&hooks);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char *files[] = {"scale.c", "manifest.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char *p = kiln_path_join(lib_dir, files[i]);
        unlink(p);
        free(p);
    }
    rmdir(lib_dir);
    return 0;
}

/* Launches entry 0 on 64 floats and checks y = 2x: 0 when it did. */
static int launch_scale(kiln_rt *rt) {
    float x[64] __attribute__((aligned(16))), y[64] __attribute__((aligned(16)));
    for (int i = 0; i < 64; i++) {
        x[i] = (float)i - 20.0f;
        y[i] = -1.0f;
    }
    void *ptrs[2] = {x, y};
    if (kiln_rt_launch(rt, 0, ptrs, 2, NULL, NULL) != KILN_OK)
        return -1;
    for (int i = 0; i < 64; i++)
        if (y[i] != 2.0f * x[i])
            return -1;
    return 0;
}

/* ---- tests ---- */

static void test_open_gate_launch(void **state) {
    (void)state;
    kiln_rt *rt = NULL;
    char errbuf[1024];
    int rc = kiln_rt_open(lib_dir, 0, &rt, errbuf, sizeof errbuf);
    if (rc)
        fail_msg("kiln_rt_open: %s: %s", kiln_rt_strerror(rc), errbuf);
    assert_int_equal(kiln_rt_entry_count(rt), 2);
    assert_null(kiln_rt_entry_disabled(rt, 0));
    assert_non_null(strstr(kiln_rt_entry_disabled(rt, 1), "scalar"));
    cJSON *info = cJSON_Parse(kiln_rt_info_json(rt));
    assert_non_null(info);
    assert_string_equal(cJSON_GetObjectItem(info, "kiln_version")->valuestring,
                        kiln_rt_kiln_version());
    assert_true(cJSON_IsObject(cJSON_GetObjectItem(info, "library_device")));
    assert_string_equal(
        cJSON_GetObjectItem(cJSON_GetObjectItem(info, "build"), "kiln")->valuestring,
        kiln_rt_kiln_version());
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(info, "notes")), 1);
    cJSON_Delete(info);
    int64_t shape[1] = {64}, strides[1] = {1};
    float buf[64] __attribute__((aligned(16)));
    kiln_rt_tensor t = {"float32", 1, 0, 0, shape, strides, (uint64_t)(uintptr_t)buf};
    int hit = 0;
    assert_int_equal(kiln_rt_match(rt, 0, &t, 1, &t, 1, &hit), KILN_OK);
    assert_int_equal(hit, 1);
    shape[0] = 63;
    assert_int_equal(kiln_rt_match(rt, 0, &t, 1, &t, 1, &hit), KILN_OK);
    assert_int_equal(hit, 0);
    assert_non_null(strstr(kiln_rt_last_error(), "dimension 0 is 63"));
    assert_int_equal(launch_scale(rt), 0);
    kiln_rt_close(rt);
}

static void test_kiln_out_of_memory_outside_a_scope_aborts(void **state) {
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        freopen("/dev/null", "w", stderr); /* the abort's own message is not the test's */
        arm(FAIL_KILN, 0);
        void *p = xmalloc(32); /* the tool's rule: no scope, no recovery */
        _exit(p ? 0 : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
}

/* Exit codes of a sweep child. */
enum { CHILD_OK, CHILD_DONE = 10, CHILD_NOT_REPORTED, CHILD_WRONG_STATUS, CHILD_NOT_RECOVERED };

/* Fails allocation n of kind inside kiln_rt_open, then opens and launches again with nothing
 * failing: the host process must be intact. recheck: whether to do the second open (a compile). */
static int sweep_child(int kind, long n, int recheck) {
    kiln_rt *rt = NULL;
    char errbuf[1024];
    arm(kind, n);
    int rc = kiln_rt_open(lib_dir, 0, &rt, errbuf, sizeof errbuf);
    int fired = n_allocs > n;
    arm(FAIL_NONE, -1);
    if (!fired)
        return rc == KILN_OK ? CHILD_DONE : CHILD_WRONG_STATUS;
    if (rc == KILN_OK || rt) {
        fprintf(stderr, "allocation %ld failed, yet kiln_rt_open succeeded\n", n);
        return CHILD_NOT_REPORTED;
    }
    /* cJSON cannot tell running out of memory while parsing from bad JSON: a format error there */
    if (rc != KILN_ERR_NOMEM && !(kind == FAIL_JSON && rc == KILN_ERR_FORMAT)) {
        fprintf(stderr, "allocation %ld failed: %s: %s\n", n, kiln_rt_strerror(rc), errbuf);
        return CHILD_WRONG_STATUS;
    }
    if (strcmp(errbuf, kiln_rt_last_error()) != 0 || !errbuf[0])
        return CHILD_WRONG_STATUS;
    if (recheck) {
        rc = kiln_rt_open(lib_dir, 0, &rt, errbuf, sizeof errbuf);
        if (rc || launch_scale(rt) != 0) {
            fprintf(stderr, "after allocation %ld failed: %s: %s\n", n, kiln_rt_strerror(rc),
                    errbuf);
            return CHILD_NOT_RECOVERED;
        }
        kiln_rt_close(rt);
    }
    return CHILD_OK;
}

static long sweep(int kind) {
    for (long n = 0;; n++) {
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
            _exit(sweep_child(kind, n, n % 64 == 0));
        int status = 0;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (WIFSIGNALED(status))
            fail_msg("%s allocation %ld: kiln_rt_open died of signal %d",
                     kind == FAIL_KILN ? "kiln" : "cJSON", n, WTERMSIG(status));
        assert_true(WIFEXITED(status));
        if (WEXITSTATUS(status) == CHILD_DONE)
            return n;
        if (WEXITSTATUS(status) != CHILD_OK)
            fail_msg("%s allocation %ld: child exit %d", kind == FAIL_KILN ? "kiln" : "cJSON", n,
                     WEXITSTATUS(status));
    }
}

static void test_every_failed_allocation_is_a_status(void **state) {
    (void)state;
    long kiln = sweep(FAIL_KILN);
    long json = sweep(FAIL_JSON);
    printf("kiln_rt_open: %ld kiln and %ld cJSON allocations, each failed in turn: a status\n",
           kiln, json);
    /* the sweep reached the manifest, the entries, the compile and the info: not a trivial path */
    assert_true(kiln > 20);
    assert_true(json > 20);
}

/* ---- a cuda library with a cuBLASLt entry (read without a GPU) ---- */

/* F.linear(x [16, 32], w [24, 32]) in bf16, with the configuration its gate settled on. */
static const char lt_manifest_fmt[] =
    "{\"kiln_library\": 1, \"backend\": \"cuda\",\n"
    " \"device\": {\"name\": \"NVIDIA H200\", \"uuid\": \"GPU-test\", \"compute_capability\": "
    "\"9.0\"},\n"
    " \"build\": {\"kiln\": \"%s\"},\n"
    " \"entries\": [\n"
    "  {\"problem\": \"linear\", \"kind\": \"aten\", \"aten\": \"aten::linear.default\",\n"
    "   \"gate\": {\"inputs\": [{\"name\": \"x\", \"dtype\": \"bfloat16\", \"shape\": [16, 32], "
    "\"strides\": [32, 1]}, {\"name\": \"w\", \"dtype\": \"bfloat16\", \"shape\": [24, 32], "
    "\"strides\": [32, 1]}],\n"
    "            \"outputs\": [{\"name\": \"y\", \"dtype\": \"bfloat16\", \"shape\": [16, 24], "
    "\"strides\": [24, 1]}], \"device_capability\": \"9.0\"},\n"
    "   \"kernel\": \"linear.cu\", \"cubin\": null, \"arch\": \"sm_90\",\n"
    "   \"library\": {\"name\": \"%s\", \"call\": %s},\n"
    "   \"signature\": \"extern \\\"C\\\" __global__ void kiln_kernel(const __nv_bfloat16* x, "
    "const "
    "__nv_bfloat16* w, __nv_bfloat16* y, int64_t n16, int64_t n24, int64_t n32)\",\n"
    "   \"launches\": [{\"workloads\": [0], \"axes\": {\"n16\": 16, \"n24\": 24, \"n32\": 32}, "
    "\"launches\": []}]}\n"
    " ]}\n";

/* Removes a test's library directory: its kernel file and manifest. */
static void remove_library(const char *dir, const char *kernel_file) {
    const char *files[] = {kernel_file, "manifest.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char *path = kiln_path_join(dir, files[i]);
        unlink(path);
        free(path);
    }
    rmdir(dir);
}

/* Writes manifest and linear.cu (source) into dir and reads the manifest as kiln_rt_open would on
 * an H200 (rt_manifest_load: everything but the device). Takes manifest. */
static int read_h200_library(const char *dir, char *manifest, const char *source, kiln_rt *rt,
                             kiln_err *err) {
    assert_int_equal(write_text(dir, "manifest.json", manifest), KILN_OK);
    assert_int_equal(write_text(dir, "linear.cu", source), KILN_OK);
    free(manifest);
    memset(rt, 0, sizeof *rt);
    rt->dir = xstrdup(dir);
    rt->cuda = 1;
    snprintf(rt->info.name, sizeof rt->info.name, "NVIDIA H200");
    snprintf(rt->info.uuid, sizeof rt->info.uuid, "GPU-test");
    rt->info.cc_major = 9;
    char *notes = NULL;
    int rc = rt_manifest_load(rt, "cuda", &notes, err);
    free(notes);
    return rc;
}

/* The cuBLASLt library with this call and library name, read back. */
static int read_lt_library(const char *dir, const char *name, const char *call, kiln_rt *rt,
                           kiln_err *err) {
    char *source = xasprintf("// kiln: library cublaslt %s\n", call);
    int rc = read_h200_library(dir, xasprintf(lt_manifest_fmt, kiln_rt_kiln_version(), name, call),
                               source, rt, err);
    free(source);
    return rc;
}

static void test_cublaslt_entry_is_read_back(void **state) {
    (void)state;
    char dir[] = "/tmp/kiln-test-runtime-lt-XXXXXX";
    assert_non_null(mkdtemp(dir));
    kiln_lt_call_desc d = {.gemm = kiln_lt_gemm_linear(16, 24, 32, KILN_BF16),
                           .has_config = 1,
                           .config = {.algo = 66,
                                      .tile = 18,
                                      .stages = 29,
                                      .split_k = 1,
                                      .cluster = 2,
                                      .workspace = 4096,
                                      .heuristic = 0},
                           .version = 130100,
                           .arg_a = 0,
                           .arg_b = 1,
                           .arg_bias = -1,
                           .arg_d = 2};
    char *call = kiln_lt_call_json(&d);
    kiln_rt rt;
    kiln_err err;
    if (read_lt_library(dir, "cublaslt", call, &rt, &err) != KILN_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(rt.n_entries, 1);
    rt_entry *e = &rt.entries[0];
    assert_null(e->disabled); /* no cubin, and no NVRTC needed */
    assert_non_null(e->library_call);
    assert_int_equal(e->plan.n_launches, 0);
    kiln_lt_call_desc back;
    assert_int_equal(kiln_lt_call_parse(e->library_call, &e->sig, &back, &err), KILN_OK);
    assert_int_equal(back.has_config, 1);
    assert_true(kiln_lt_config_same(&back.config, &d.config));
    assert_int_equal(back.config.workspace, 4096);
    assert_int_equal(back.version, 130100);
    assert_int_equal(back.gemm.m, 16);
    assert_int_equal(back.gemm.trans_b, 1);

    /* the runtime replays a configuration, never an index (which would need the enumeration) */
    d.has_config = 0;
    d.index = 3;
    char *indexed = kiln_lt_call_json(&d);
    rt_lt *l = NULL;
    assert_int_equal(rt_gpu_lt_open(NULL, indexed, &e->sig, &l, &err), KILN_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "not an index"));
    assert_null(l);
    free(indexed);

    /* a library kiln does not call is a damaged manifest, not a crash */
    assert_int_equal(read_lt_library(dir, "cublas", call, &rt, &err), KILN_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "\"library\" must be"));
    free(call);
    remove_library(dir, "linear.cu");
}

/* A kernel entry whose launch takes tensor maps: the gated shape's maps are read into its plan,
 * after the six ABI parameters; a map that names another dtype than its tensor's is a damaged
 * manifest. */
static const char tmap_manifest_fmt[] =
    "{\"kiln_library\": 1, \"backend\": \"cuda\",\n"
    " \"device\": {\"name\": \"NVIDIA H200\", \"uuid\": \"GPU-test\", \"compute_capability\": "
    "\"9.0\"},\n"
    " \"build\": {\"kiln\": \"%s\"},\n"
    " \"entries\": [\n"
    "  {\"problem\": \"linear\", \"kind\": \"aten\", \"aten\": \"aten::linear.default\",\n"
    "   \"gate\": {\"inputs\": [{\"name\": \"x\", \"dtype\": \"bfloat16\", \"shape\": [16, 32], "
    "\"strides\": [32, 1]}, {\"name\": \"w\", \"dtype\": \"bfloat16\", \"shape\": [24, 32], "
    "\"strides\": [32, 1]}],\n"
    "            \"outputs\": [{\"name\": \"y\", \"dtype\": \"bfloat16\", \"shape\": [16, 24], "
    "\"strides\": [24, 1]}], \"device_capability\": \"9.0\"},\n"
    "   \"kernel\": \"linear.cu\", \"cubin\": null, \"arch\": \"sm_90a\",\n"
    "   \"signature\": \"extern \\\"C\\\" __global__ void gemm_kernel(const __nv_bfloat16* x, "
    "const __nv_bfloat16* w, __nv_bfloat16* y, int64_t n16, int64_t n24, int64_t n32)\",\n"
    "   \"launches\": [{\"workloads\": [0], \"axes\": {\"n16\": 16, \"n24\": 24, \"n32\": 32}, "
    "\"launches\": [{\"entry\": \"gemm_kernel\", \"grid\": [1, 1, 1], \"block\": [384, 1, 1], "
    "\"cluster\": [1, 1, 1], \"smem_bytes\": 99000}],\n"
    "    \"tensormaps\": [{\"param\": 0, \"dtype\": \"bfloat16\", \"dims\": [32, 16], \"strides\": "
    "[64], \"box\": [64, 64], \"swizzle\": 128}, {\"param\": 1, \"dtype\": \"%s\", \"dims\": [32, "
    "24], \"strides\": [64], \"box\": [64, 64], \"swizzle\": 128}]}]}\n"
    " ]}\n";

static int read_tmap_library(const char *dir, const char *dtype, kiln_rt *rt, kiln_err *err) {
    return read_h200_library(dir, xasprintf(tmap_manifest_fmt, kiln_rt_kiln_version(), dtype),
                             "// a kernel\n", rt, err);
}

static void test_tensormaps_are_read_back(void **state) {
    (void)state;
    char dir[] = "/tmp/kiln-test-runtime-tmap-XXXXXX";
    assert_non_null(mkdtemp(dir));
    kiln_rt rt;
    kiln_err err;
    if (read_tmap_library(dir, "bfloat16", &rt, &err) != KILN_OK)
        fail_msg("%s", err.msg);
    rt_entry *e = &rt.entries[0];
    assert_int_equal(e->plan.n_launches, 1);
    assert_int_equal(e->plan.n_params, 6);
    assert_int_equal(e->plan.n_tmaps, 2);
    assert_int_equal(e->plan.tmap[1].param, 1);
    assert_int_equal(e->plan.tmap[1].dims[1], 24);
    assert_int_equal(e->plan.tmap[1].strides[0], 64);
    assert_int_equal(e->plan.tmap[1].swizzle, 128);
    assert_int_equal(read_tmap_library(dir, "float32", &rt, &err), KILN_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "\"dtype\" must be its tensor's (bfloat16)"));
    remove_library(dir, "linear.cu");
}

/* On a GPU: a kernel entry that takes a tensor map, compiled by libkiln_rt from its source and
 * launched through kiln_rt_launch, which encodes the map for the pointer it is given (the TMA copy
 * of tma_copy.h, x float32 [100, 64] to y). */
static const char tmap_copy_manifest_fmt[] =
    "{\"kiln_library\": 1, \"backend\": \"cuda\",\n"
    " \"device\": {\"name\": \"\", \"uuid\": \"\", \"compute_capability\": \"9.0\"},\n"
    " \"build\": {\"kiln\": \"%s\"},\n"
    " \"entries\": [\n"
    "  {\"problem\": \"copy2d\", \"kind\": \"aten\", \"aten\": \"aten::clone.default\",\n"
    "   \"gate\": {\"inputs\": [{\"name\": \"x\", \"dtype\": \"float32\", \"shape\": [100, 64], "
    "\"strides\": [64, 1]}],\n"
    "            \"outputs\": [{\"name\": \"y\", \"dtype\": \"float32\", \"shape\": [100, 64], "
    "\"strides\": [64, 1]}], \"device_capability\": \"9.0\"},\n"
    "   \"kernel\": \"copy.cu\", \"cubin\": null, \"arch\": \"sm_90\",\n"
    "   \"signature\": \"extern \\\"C\\\" __global__ void tma_copy(const float* x, float* y, "
    "int64_t rows, int64_t cols)\",\n"
    "   \"launches\": [{\"workloads\": [0], \"axes\": {\"rows\": 100, \"cols\": 64}, "
    "\"launches\": [{\"entry\": \"tma_copy\", \"grid\": [2, 13, 1], \"block\": [32, 8, 1], "
    "\"cluster\": [1, 1, 1], \"smem_bytes\": 0}],\n"
    "    \"tensormaps\": [{\"param\": 0, \"dtype\": \"float32\", \"dims\": [64, 100], "
    "\"strides\": [256], \"box\": [32, 8], \"swizzle\": 0}]}]}\n"
    " ]}\n";

static void test_cuda_tensormap_launch(void **state) {
    (void)state;
    CUdevice dev;
    CUcontext ctx;
    kiln_device_info info;
    kiln_err err;
    if (!kiln_cuda_driver_present() || kiln_cuda_visible_gpus() < 1 ||
        kiln_cuda_device_open(0, "", &dev, &ctx, &info, &err) != KILN_OK) {
        printf("SKIP: no CUDA device: the tensor map launch runs on the GPU machine\n");
        skip();
    }
    if (info.cc_major < 9) {
        printf("SKIP: TMA needs sm_90 (this device is sm_%d%d)\n", info.cc_major, info.cc_minor);
        kiln_cuda.DevicePrimaryCtxRelease(dev);
        skip();
    }
    char dir[] = "/tmp/kiln-test-runtime-tma-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char src[4096];
    tma_copy_source(src, sizeof src, 1);
    char *manifest = xasprintf(tmap_copy_manifest_fmt, kiln_rt_kiln_version());
    assert_int_equal(write_text(dir, "copy.cu", src), KILN_OK);
    assert_int_equal(write_text(dir, "manifest.json", manifest), KILN_OK);
    free(manifest);
    kiln_rt *rt = NULL;
    char errbuf[1024];
    int rc = kiln_rt_open(dir, 0, &rt, errbuf, sizeof errbuf);
    if (rc)
        fail_msg("kiln_rt_open: %s: %s", kiln_rt_strerror(rc), errbuf);
    assert_null(kiln_rt_entry_disabled(rt, 0));
    enum { ROWS = 100, COLS = 64 };
    static float host[ROWS * COLS], back[ROWS * COLS];
    for (int i = 0; i < ROWS * COLS; i++)
        host[i] = (float)i;
    assert_int_equal(kiln_cuda.CtxSetCurrent(ctx), CUDA_SUCCESS);
    CUdeviceptr x, y;
    assert_int_equal(kiln_cuda.MemAlloc(&x, sizeof host), CUDA_SUCCESS);
    assert_int_equal(kiln_cuda.MemAlloc(&y, sizeof host), CUDA_SUCCESS);
    assert_int_equal(kiln_cuda.MemcpyHtoDAsync(x, host, sizeof host, NULL), CUDA_SUCCESS);
    assert_int_equal(kiln_cuda.MemsetD8Async(y, 0xff, sizeof host, NULL), CUDA_SUCCESS);
    void *ptrs[2] = {(void *)(uintptr_t)x, (void *)(uintptr_t)y};
    rc = kiln_rt_launch(rt, 0, ptrs, 2, NULL, NULL);
    if (rc)
        fail_msg("kiln_rt_launch: %s", kiln_rt_last_error());
    assert_int_equal(kiln_cuda.MemcpyDtoHAsync(back, y, sizeof back, NULL), CUDA_SUCCESS);
    assert_int_equal(kiln_cuda.StreamSynchronize(NULL), CUDA_SUCCESS);
    for (int i = 0; i < ROWS * COLS; i++)
        if (back[i] != host[i])
            fail_msg("y[%d] = %g, expected %g", i, back[i], host[i]);
    kiln_cuda.MemFree(x);
    kiln_cuda.MemFree(y);
    kiln_rt_close(rt);
    kiln_cuda.DevicePrimaryCtxRelease(dev);
    remove_library(dir, "copy.cu");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_gate_launch),
        cmocka_unit_test(test_cublaslt_entry_is_read_back),
        cmocka_unit_test(test_tensormaps_are_read_back),
        cmocka_unit_test(test_cuda_tensormap_launch),
        cmocka_unit_test(test_kiln_out_of_memory_outside_a_scope_aborts),
        cmocka_unit_test(test_every_failed_allocation_is_a_status),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
