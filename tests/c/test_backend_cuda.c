/* test_backend_cuda.c: NVRTC compilation for sm_90 (runs wherever the toolkit is, GPU or not) and
 * the cuda backend end to end on a GPU: launches, resource limits, clusters, and faults that must
 * come back as KILN_ERR_LAUNCH (each in a fresh process, since a fault loses the context). Without
 * a GPU every device test says "SKIP: no CUDA device: ..." and skips. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <glob.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/cuda_driver.h"
#include "backend/nvrtc.h"
#include "tma_copy.h"

static kiln_backend *be;
static kiln_err open_err;

/* y = x * alpha: a tensor, a float scalar, an output and an int64 axis. */
static const char scale_def[] =
    "{\"name\": \"scale\", \"axes\": {\"n\": {\"type\": \"var\"}},\n"
    " \"inputs\": {\"x\": {\"shape\": [\"n\"], \"dtype\": \"float32\"},\n"
    "            \"alpha\": {\"shape\": null, \"dtype\": \"float32\"}},\n"
    " \"outputs\": {\"y\": {\"shape\": [\"n\"], \"dtype\": \"float32\"}},\n"
    " \"reference\": \"def run(x, alpha):\\n    return x * alpha\"}\n";
static const char scale_wl[] = "{\"uuid\": \"w\", \"axes\": {\"n\": 10000000}, \"inputs\": {\"x\": "
                               "{\"type\": \"random\"}, \"alpha\": {\"type\": \"scalar\", "
                               "\"value\": 0.5}}}\n";

static const char scale_src[] =
    "// kiln: launch scale grid=ceil_div(n, 256) block=256\n"
    "extern \"C\" __global__ void scale(const float *x, float alpha, float *y, int64_t n) {\n"
    "    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;\n"
    "    if (i < n) y[i] = x[i] * alpha;\n"
    "}\n";

/* bf16 in and out, fp32 math, and the C habits the prelude must absorb. */
static const char bf16_src[] =
    "#include <stdint.h>\n"
    "#include <math.h>\n"
    "#include <float.h>\n"
    "#include <cuda_bf16.h>\n"
    "// kiln: launch scale_bf16 grid=ceil_div(n, 128) block=128\n"
    "extern \"C\" __global__ void scale_bf16(const __nv_bfloat16 *x, float alpha, __nv_bfloat16 "
    "*y,\n"
    "                                        int64_t n) {\n"
    "    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;\n"
    "    uint8_t one = 1;\n"
    "    assert(n > 0);\n"
    "    float v = fminf(fmaxf(__bfloat162float(x[i < n ? i : 0]) * alpha, -INFINITY), FLT_MAX);\n"
    "    if (i < n) y[i] = __float2bfloat16(v * one);\n"
    "}\n";

static int setup(void **state) {
    (void)state;
    int rc = kiln_backend_open("cuda", 0, &be, &open_err);
    if (rc == KILN_ERR_NO_DEVICE) {
        printf("SKIP: no CUDA device: %s\n", open_err.msg);
        be = NULL;
        return 0;
    }
    if (rc) {
        fprintf(stderr, "cuda backend: %s: %s\n", kiln_strerror(rc), open_err.msg);
        return -1;
    }
    kiln_device_info info;
    be->ops->device_info(be, &info);
    printf("    device: %s, sm_%d%d, %d SMs, %zu MiB L2, %zu GiB, %s\n", info.name, info.cc_major,
           info.cc_minor, info.n_sms, info.l2_bytes >> 20, info.mem_bytes >> 30, info.uuid);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    kiln_backend_close(be);
    return 0;
}

#define NEED_GPU()                                                                                 \
    do {                                                                                           \
        if (!be)                                                                                   \
            skip();                                                                                \
    } while (0)

static void assert_contains(const char *haystack, const char *needle) {
    if (!haystack || !strstr(haystack, needle))
        fail_msg("expected \"%s\" in \"%s\"", needle, haystack ? haystack : "(null)");
}

static kiln_problem *load(const char *def, const char *wl) {
    kiln_problem *p = NULL;
    kiln_err err = {{0}};
    if (kiln_problem_parse(def, strlen(def), "definition.json", wl, strlen(wl), "workload.jsonl",
                           &p, &err))
        fail_msg("kiln_problem_parse: %s", err.msg);
    return p;
}

/* ---- NVRTC: no GPU needed ---- */

/* NVRTC must load wherever the toolkit is installed; only a machine without one may skip. */
static void need_nvrtc(void) {
    if (kiln_cuda_have_nvrtc())
        return;
    const char *home = getenv("CUDA_HOME") ? getenv("CUDA_HOME") : "/usr/local/cuda";
    char path[512];
    snprintf(path, sizeof path, "%s/lib64/libnvrtc.so", home);
    if (access(path, R_OK) == 0)
        fail_msg("%s exists but NVRTC could not be loaded", path);
    printf("SKIP: no NVRTC (no CUDA toolkit at %s)\n", home);
    skip();
}

static void test_nvrtc_compile_only(void **state) {
    (void)state;
    need_nvrtc();
    char *cubin = NULL, *log = NULL;
    size_t len = 0;
    kiln_err err = {{0}};
    double t0 = kiln_now_s();
    int rc = kiln_cuda_compile_only(bf16_src, "sm_90", &cubin, &len, &log, &err);
    double dt = kiln_now_s() - t0;
    if (rc)
        fail_msg("%s\n%s", err.msg, log ? log : "");
    assert_true(len > 64);
    assert_memory_equal(cubin,
                        "\x7f"
                        "ELF",
                        4);
    printf("    bf16 kernel -> %zu-byte sm_90 cubin in %.0f ms\n", len, dt * 1e3);
    free(cubin);
    free(log);

    /* the doc's example spelling: int64_t and INFINITY with no include at all */
    const char *bare = "extern \"C\" __global__ void k(const float *x, float *y, int64_t n) {\n"
                       "    int64_t i = threadIdx.x;\n"
                       "    if (i < n) y[i] = fmaxf(x[i], -INFINITY) + (isnan(x[i]) ? NAN : 0.f);\n"
                       "}\n";
    rc = kiln_cuda_compile_only(bare, "90", &cubin, &len, &log, &err);
    if (rc)
        fail_msg("%s\n%s", err.msg, log ? log : "");
    free(cubin);
    free(log);

    /* Hopper-only instructions compile for sm_90a */
    const char *hopper = "extern \"C\" __global__ void k(int *y) {\n"
                         "    asm volatile(\"setmaxnreg.inc.sync.aligned.u32 240;\\n\");\n"
                         "    y[threadIdx.x] = 1;\n"
                         "}\n";
    rc = kiln_cuda_compile_only(hopper, "sm_90a", &cubin, &len, &log, &err);
    if (rc)
        fail_msg("%s\n%s", err.msg, log ? log : "");
    free(cubin);
    free(log);
}

/* The cubin cache: a second compile of the same source is read back, byte for byte; a damaged
 * cache file is ignored and rewritten; KILN_CUBIN_CACHE=0 writes nothing. */
static void test_cubin_cache(void **state) {
    (void)state;
    need_nvrtc();
    char dir[] = "/tmp/kiln-cubin-test-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char *saved = getenv("KILN_CACHE_DIR") ? xstrdup(getenv("KILN_CACHE_DIR")) : NULL;
    setenv("KILN_CACHE_DIR", dir, 1);
    unsetenv("KILN_CUBIN_CACHE");
    char src[256];
    snprintf(src, sizeof src,
             "extern \"C\" __global__ void k(float *y) { y[threadIdx.x] = %d.0f; }\n",
             (int)getpid());
    char *a = NULL, *b = NULL, *log = NULL;
    size_t la = 0, lb = 0;
    kiln_err err = {{0}};
    assert_int_equal(kiln_cuda_compile_only(src, "sm_90", &a, &la, &log, &err), KILN_OK);
    free(log);
    char *cdir = xasprintf("%s/cubin", dir);
    glob_t g;
    char *pattern = xasprintf("%s/*.cubin", cdir);
    assert_int_equal(glob(pattern, 0, NULL, &g), 0);
    assert_int_equal((int)g.gl_pathc, 1);
    char *file = xstrdup(g.gl_pathv[0]);
    globfree(&g);
    double t0 = kiln_now_s();
    assert_int_equal(kiln_cuda_compile_only(src, "sm_90", &b, &lb, NULL, &err), KILN_OK);
    printf("    cached cubin read back in %.2f ms\n", (kiln_now_s() - t0) * 1e3);
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    free(b);
    /* damaged: not an ELF image */
    assert_int_equal(kiln_write_file(file,
                                     "garbage, not a cubin, long enough to be read as one....."
                                     "..............",
                                     70, NULL),
                     KILN_OK);
    assert_int_equal(kiln_cuda_compile_only(src, "sm_90", &b, &lb, NULL, &err), KILN_OK);
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    free(b);
    char *text = NULL;
    size_t n = 0;
    assert_int_equal(kiln_read_file(file, &text, &n, NULL), KILN_OK);
    assert_int_equal(n, la);
    assert_memory_equal(text, a, la);
    free(text);
    /* another architecture is another entry; with the cache off nothing is written */
    setenv("KILN_CUBIN_CACHE", "0", 1);
    assert_int_equal(kiln_cuda_compile_only(src, "sm_80", &b, &lb, NULL, &err), KILN_OK);
    free(b);
    assert_int_equal(glob(pattern, 0, NULL, &g), 0);
    assert_int_equal((int)g.gl_pathc, 1);
    globfree(&g);
    unsetenv("KILN_CUBIN_CACHE");
    unlink(file);
    rmdir(cdir);
    rmdir(dir);
    free(a);
    free(file);
    free(pattern);
    free(cdir);
    if (saved)
        setenv("KILN_CACHE_DIR", saved, 1);
    else
        unsetenv("KILN_CACHE_DIR");
    free(saved);
}

/* The same compile in a forked child: the same cubin, the same statuses and log. */
static void test_compile_apart(void **state) {
    (void)state;
    need_nvrtc();
    char *a = NULL, *b = NULL, *log = NULL;
    size_t la = 0, lb = 0;
    kiln_err err = {{0}};
    assert_int_equal(kiln_cuda_compile_only(bf16_src, "sm_90", &a, &la, NULL, &err), KILN_OK);
    assert_int_equal(kiln_cuda_compile_apart(bf16_src, "sm_90", &b, &lb, &log, &err), KILN_OK);
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    free(a);
    free(b);
    free(log);
    const char *bad = "extern \"C\" __global__ void k(float *y) { y[0] = nope; }\n";
    assert_int_equal(kiln_cuda_compile_apart(bad, "sm_90", &b, &lb, &log, &err), KILN_ERR_COMPILE);
    assert_null(b);
    assert_non_null(log);
    assert_non_null(strstr(log, "nope"));
    assert_non_null(strstr(err.msg, "NVRTC"));
    free(log);
}

/* The GPUs a process would see, and the default backend that follows (no GPU needed). */
static void test_visible_gpus_and_default_backend(void **state) {
    (void)state;
    const char *was = getenv("CUDA_VISIBLE_DEVICES");
    char *saved = was ? xstrdup(was) : NULL;
    setenv("CUDA_VISIBLE_DEVICES", "0,1", 1);
    assert_int_equal(kiln_cuda_visible_gpus(), 2);
    setenv("CUDA_VISIBLE_DEVICES", " 2, 0,-1,3", 1); /* CUDA stops at the first invalid entry */
    assert_int_equal(kiln_cuda_visible_gpus(), 2);
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    assert_int_equal(kiln_cuda_visible_gpus(), 0);
    setenv("CUDA_VISIBLE_DEVICES", "-1", 1);
    assert_int_equal(kiln_cuda_visible_gpus(), 0);
    assert_string_equal(kiln_backend_default(), "cpu"); /* a driver, perhaps, but no GPU */
    setenv("CUDA_VISIBLE_DEVICES", "0", 1);
    assert_string_equal(kiln_backend_default(), kiln_cuda_driver_present() ? "cuda" : "cpu");
    if (saved)
        setenv("CUDA_VISIBLE_DEVICES", saved, 1);
    else
        unsetenv("CUDA_VISIBLE_DEVICES");
    free(saved);
}

/* The architecture rule, and KILN_CUDA_ARCH over it (no GPU needed). */
static void test_cuda_arch(void **state) {
    (void)state;
    char arch[32];
    unsetenv("KILN_CUDA_ARCH");
    kiln_cuda_arch(9, 0, "__global__ void k() {}", arch, sizeof arch);
    assert_string_equal(arch, "sm_90");
    kiln_cuda_arch(9, 0, "asm(\"wgmma.fence.sync.aligned;\");", arch, sizeof arch);
    assert_string_equal(arch, "sm_90a");
    kiln_cuda_arch(8, 0, "asm(\"wgmma.fence.sync.aligned;\");", arch, sizeof arch);
    assert_string_equal(arch, "sm_80");
    kiln_cuda_arch(0, 0, NULL, arch, sizeof arch); /* no device known */
    assert_string_equal(arch, "sm_90");
    /* no device known and a Hopper-only source (kiln optimize's workers compile before the gate) */
    kiln_cuda_arch(0, 0, "asm(\"wgmma.fence.sync.aligned;\");", arch, sizeof arch);
    assert_string_equal(arch, "sm_90a");
    setenv("KILN_CUDA_ARCH", "89", 1);
    kiln_cuda_arch(9, 0, "wgmma", arch, sizeof arch);
    assert_string_equal(arch, "sm_89");
    setenv("KILN_CUDA_ARCH", "sm_90a", 1);
    kiln_cuda_arch(0, 0, NULL, arch, sizeof arch);
    assert_string_equal(arch, "sm_90a");
    unsetenv("KILN_CUDA_ARCH");
}

static void test_nvrtc_errors(void **state) {
    (void)state;
    need_nvrtc();
    char *cubin = NULL, *log = NULL;
    size_t len = 0;
    kiln_err err = {{0}};
    const char *bad = "extern \"C\" __global__ void k(float *y) {\n"
                      "    y[0] = 1.0f;\n"
                      "    y[1] = undefined_thing;\n"
                      "}\n";
    assert_int_equal(kiln_cuda_compile_only(bad, "sm_90", &cubin, &len, &log, &err),
                     KILN_ERR_COMPILE);
    assert_null(cubin);
    assert_int_equal(len, 0);
    assert_contains(log, "candidate.cu(3)");
    assert_contains(log, "undefined_thing");
    assert_contains(err.msg, "candidate.cu(3): error");
    free(log);
    log = NULL;
    assert_int_equal(kiln_cuda_compile_only(bad, "sm_1", &cubin, &len, &log, &err),
                     KILN_ERR_INVALID);
    free(log);
}

/* ---- on the GPU ---- */

static int compile(const kiln_problem *p, const char *src, kiln_module **m, char **log,
                   kiln_abi *abi, kiln_err *err) {
    int rc = kiln_abi_parse(src, 1, abi, err);
    if (rc)
        return rc;
    kiln_signature sig;
    kiln_abi_signature(p, abi->scratch != NULL, 1, &sig);
    rc = be->ops->compile(be, src, &sig, abi, m, log, err);
    if (rc)
        kiln_abi_free(abi);
    return rc;
}

static void test_device_info(void **state) {
    (void)state;
    NEED_GPU();
    kiln_device_info info;
    be->ops->device_info(be, &info);
    assert_true(strlen(info.name) > 0);
    assert_memory_equal(info.uuid, "GPU-", 4);
    assert_int_equal(strlen(info.uuid), 40);
    assert_true(info.cc_major >= 7);
    assert_true(info.n_sms > 0);
    assert_true(info.clock_khz > 100 * 1000 && info.clock_khz < 10 * 1000 * 1000); /* 0.1-10 GHz */
    assert_true(info.l2_bytes > 0);
    assert_true(info.mem_bytes > ((size_t)1 << 30));
    assert_true(info.smem_per_block_optin >= 48 * 1024);
}

static void test_scale_runs(void **state) {
    (void)state;
    NEED_GPU();
    kiln_problem *p = load(scale_def, scale_wl);
    kiln_module *m = NULL;
    char *log = NULL;
    kiln_abi abi;
    kiln_err err = {{0}};
    if (compile(p, scale_src, &m, &log, &abi, &err))
        fail_msg("compile: %s\n%s", err.msg, log ? log : "");
    free(log);
    int regs = -1;
    size_t smem = 1;
    assert_int_equal(be->ops->entry_attrs(be, m, "scale", &regs, &smem, &err), KILN_OK);
    assert_true(regs > 0);
    assert_int_equal(smem, 0);

    int64_t n = p->workloads[0].axis_values[0];
    size_t bytes = (size_t)n * 4;
    float *host = malloc(bytes), *back = malloc(bytes);
    for (int64_t i = 0; i < n; i++)
        host[i] = (float)(i % 1000) - 499.75f;
    kiln_devptr x, y;
    assert_int_equal(be->ops->alloc(be, bytes, 0, &x, &err), KILN_OK);
    assert_int_equal(be->ops->alloc(be, bytes, 0, &y, &err), KILN_OK);
    assert_int_equal(x % 256, 0);
    assert_int_equal(be->ops->upload(be, x, host, bytes, &err), KILN_OK);
    kiln_launch_plan plan;
    assert_int_equal(kiln_abi_plan(&abi, p, &p->workloads[0], &plan, &err), KILN_OK);
    float alpha = 0.5f;
    void *params[] = {&x, &alpha, &y, &n};
    assert_int_equal(be->ops->launch(be, m, &plan, params, &err), KILN_OK); /* warm-up */
    assert_int_equal(be->ops->memset8(be, y, 0xff, bytes, &err), KILN_OK);
    kiln_timer *t;
    assert_int_equal(be->ops->timer_create(be, &t, &err), KILN_OK);
    assert_int_equal(be->ops->flush_cache(be, &err), KILN_OK);
    assert_int_equal(be->ops->timer_start(be, t, &err), KILN_OK);
    assert_int_equal(be->ops->launch(be, m, &plan, params, &err), KILN_OK);
    assert_int_equal(be->ops->timer_stop(be, t, &err), KILN_OK);
    assert_int_equal(be->ops->sync(be, &err), KILN_OK);
    double us = 0;
    assert_int_equal(be->ops->timer_elapsed_us(be, t, &us, &err), KILN_OK);
    assert_true(us > 0);
    be->ops->timer_destroy(be, t);
    assert_int_equal(be->ops->download(be, back, y, bytes, &err), KILN_OK);
    for (int64_t i = 0; i < n; i++)
        if (back[i] != host[i] * 0.5f)
            fail_msg("y[%lld] = %g, expected %g", (long long)i, back[i], host[i] * 0.5f);
    printf("    scale of %lld floats: %.1f us (%.0f GB/s)\n", (long long)n, us,
           2.0 * (double)bytes / (us * 1e-6) / 1e9);
    be->ops->free(be, x);
    be->ops->free(be, y);
    be->ops->module_free(be, m);
    kiln_abi_free(&abi);
    kiln_problem_free(p);
    free(host);
    free(back);
}

static const char bf16_def[] =
    "{\"name\": \"scale_bf16\", \"axes\": {\"n\": {\"type\": \"var\"}},\n"
    " \"inputs\": {\"x\": {\"shape\": [\"n\"], \"dtype\": \"bfloat16\"},\n"
    "            \"alpha\": {\"shape\": null, \"dtype\": \"float32\"}},\n"
    " \"outputs\": {\"y\": {\"shape\": [\"n\"], \"dtype\": \"bfloat16\"}},\n"
    " \"reference\": \"def run(x, alpha):\\n    return x * alpha\"}\n";
static const char bf16_wl[] = "{\"uuid\": \"w\", \"axes\": {\"n\": 1000}, \"inputs\": {\"x\": "
                              "{\"type\": \"random\"}, \"alpha\": {\"type\": \"scalar\", "
                              "\"value\": 2}}}\n";

static void test_bf16_runs(void **state) {
    (void)state;
    NEED_GPU();
    kiln_problem *p = load(bf16_def, bf16_wl);
    kiln_module *m = NULL;
    char *log = NULL;
    kiln_abi abi;
    kiln_err err = {{0}};
    if (compile(p, bf16_src, &m, &log, &abi, &err))
        fail_msg("compile: %s\n%s", err.msg, log ? log : "");
    free(log);
    int64_t n = 1000;
    uint16_t host[1000], back[1000];
    for (int i = 0; i < n; i++)
        host[i] = (uint16_t)(0x3f80 + i % 64); /* 1.0 .. 1.49 */
    kiln_devptr x, y;
    assert_int_equal(be->ops->alloc(be, sizeof host, 0, &x, &err), KILN_OK);
    assert_int_equal(be->ops->alloc(be, sizeof host, 0, &y, &err), KILN_OK);
    assert_int_equal(be->ops->upload(be, x, host, sizeof host, &err), KILN_OK);
    kiln_launch_plan plan;
    assert_int_equal(kiln_abi_plan(&abi, p, &p->workloads[0], &plan, &err), KILN_OK);
    assert_int_equal(plan.launch[0].grid[0], 8);
    float alpha = 2.0f;
    void *params[] = {&x, &alpha, &y, &n};
    assert_int_equal(be->ops->launch(be, m, &plan, params, &err), KILN_OK);
    assert_int_equal(be->ops->sync(be, &err), KILN_OK);
    assert_int_equal(be->ops->download(be, back, y, sizeof back, &err), KILN_OK);
    for (int i = 0; i < n; i++)
        assert_int_equal(back[i], host[i] + 0x80); /* times 2: exponent + 1 */
    be->ops->free(be, x);
    be->ops->free(be, y);
    be->ops->module_free(be, m);
    kiln_abi_free(&abi);
    kiln_problem_free(p);
}

/* Two launches in order on one stream, sharing zeroed scratch memory: a split sum, then a
 * broadcast. */
static void test_launches_with_scratch(void **state) {
    (void)state;
    NEED_GPU();
    static const char wl[] = "{\"uuid\": \"w\", \"axes\": {\"n\": 4096}, \"inputs\": {\"x\": "
                             "{\"type\": \"random\"}, \"alpha\": {\"type\": \"scalar\", "
                             "\"value\": 1}}}\n";
    const char *src =
        "// kiln: launch partial grid=ceil_div(n, 256) block=256\n"
        "// kiln: launch broadcast grid=ceil_div(n, 256) block=256\n"
        "// kiln: scratch 4*ceil_div(n, 256)\n"
        "extern \"C\" __global__ void partial(const float *x, float alpha, float *y, int64_t n,\n"
        "                                     void *kiln_scratch) {\n"
        "    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;\n"
        "    if (i < n) atomicAdd((float *)kiln_scratch + blockIdx.x, x[i] * alpha);\n"
        "}\n"
        "extern \"C\" __global__ void broadcast(const float *x, float alpha, float *y, int64_t n,\n"
        "                                       void *kiln_scratch) {\n"
        "    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;\n"
        "    if (i < n) y[i] = ((const float *)kiln_scratch)[blockIdx.x];\n"
        "}\n";
    kiln_problem *p = load(scale_def, wl);
    kiln_module *m = NULL;
    char *log = NULL;
    kiln_abi abi;
    kiln_err err = {{0}};
    if (compile(p, src, &m, &log, &abi, &err))
        fail_msg("compile: %s\n%s", err.msg, log ? log : "");
    free(log);
    kiln_launch_plan plan;
    assert_int_equal(kiln_abi_plan(&abi, p, &p->workloads[0], &plan, &err), KILN_OK);
    assert_int_equal(plan.n_launches, 2);
    assert_int_equal(plan.scratch_bytes, 64);
    int64_t n = 4096;
    float host[4096], back[4096];
    for (int i = 0; i < n; i++)
        host[i] = (float)(i % 256); /* each block sums to 32640 */
    kiln_devptr x, y, scratch;
    assert_int_equal(be->ops->alloc(be, sizeof host, 0, &x, &err), KILN_OK);
    assert_int_equal(be->ops->alloc(be, sizeof host, 0, &y, &err), KILN_OK);
    assert_int_equal(be->ops->alloc(be, plan.scratch_bytes, 0, &scratch, &err), KILN_OK);
    assert_int_equal(be->ops->upload(be, x, host, sizeof host, &err), KILN_OK);
    float alpha = 1;
    void *params[] = {&x, &alpha, &y, &n, &scratch};
    for (int rep = 0; rep < 3; rep++) {
        assert_int_equal(be->ops->memset8(be, scratch, 0, plan.scratch_bytes, &err), KILN_OK);
        assert_int_equal(be->ops->launch(be, m, &plan, params, &err), KILN_OK);
    }
    assert_int_equal(be->ops->sync(be, &err), KILN_OK);
    assert_int_equal(be->ops->download(be, back, y, sizeof back, &err), KILN_OK);
    for (int i = 0; i < n; i++)
        if (back[i] != 32640.0f)
            fail_msg("y[%d] = %g, expected 32640", i, back[i]);
    be->ops->free(be, x);
    be->ops->free(be, y);
    be->ops->free(be, scratch);
    be->ops->module_free(be, m);
    kiln_abi_free(&abi);
    kiln_problem_free(p);
}

/* A `// kiln: tensormap` line: the backend encodes the map for the tensor's address at each launch
 * and passes it after the ABI's parameters. Each block copies an 8 x 32 box of x (float32
 * [100, 64]) into shared memory with TMA and writes it to y: the last row of boxes reaches past
 * row 99 (zero-filled, not written). A kernel that does not take the map is refused at compile. */
static void test_launches_with_tensormaps(void **state) {
    (void)state;
    NEED_GPU();
    kiln_device_info info;
    be->ops->device_info(be, &info);
    if (info.cc_major < 9) {
        printf("SKIP: TMA needs sm_90 (this device is sm_%d%d)\n", info.cc_major, info.cc_minor);
        skip();
    }
    static const char def[] =
        "{\"name\": \"copy2d\", \"axes\": {\"rows\": {\"type\": \"var\"}, \"cols\": {\"type\": "
        "\"const\", \"value\": 64}},\n"
        " \"inputs\": {\"x\": {\"shape\": [\"rows\", \"cols\"], \"dtype\": \"float32\"}},\n"
        " \"outputs\": {\"y\": {\"shape\": [\"rows\", \"cols\"], \"dtype\": \"float32\"}},\n"
        " \"reference\": \"def run(x):\\n    return x.clone()\"}\n";
    static const char wl[] = "{\"uuid\": \"w\", \"axes\": {\"rows\": 100}, \"inputs\": {\"x\": "
                             "{\"type\": \"random\"}}}\n";
    char src[4096];
    tma_copy_source(src, sizeof src, 1);
    kiln_problem *p = load(def, wl);
    kiln_module *m = NULL;
    char *log = NULL;
    kiln_abi abi;
    kiln_err err = {{0}};
    if (compile(p, src, &m, &log, &abi, &err))
        fail_msg("compile: %s\n%s", err.msg, log ? log : "");
    free(log);
    kiln_launch_plan plan;
    assert_int_equal(kiln_abi_plan(&abi, p, &p->workloads[0], &plan, &err), KILN_OK);
    assert_int_equal(plan.n_tmaps, 1);
    enum { ROWS = 100, COLS = 64 };
    static float host[ROWS * COLS], back[ROWS * COLS];
    for (int i = 0; i < ROWS * COLS; i++)
        host[i] = (float)i;
    kiln_devptr x, y;
    assert_int_equal(be->ops->alloc(be, sizeof host, 0, &x, &err), KILN_OK);
    assert_int_equal(be->ops->alloc(be, sizeof host, 0, &y, &err), KILN_OK);
    assert_int_equal(be->ops->upload(be, x, host, sizeof host, &err), KILN_OK);
    assert_int_equal(be->ops->memset8(be, y, 0xff, sizeof host, &err), KILN_OK);
    int64_t rows = ROWS, cols = COLS;
    void *params[] = {&x, &y, &rows, &cols};
    assert_int_equal(be->ops->launch(be, m, &plan, params, &err), KILN_OK);
    assert_int_equal(be->ops->sync(be, &err), KILN_OK);
    assert_int_equal(be->ops->download(be, back, y, sizeof back, &err), KILN_OK);
    for (int i = 0; i < ROWS * COLS; i++)
        if (back[i] != host[i])
            fail_msg("y[%d] = %g, expected %g", i, back[i], host[i]);
    be->ops->free(be, x);
    be->ops->free(be, y);
    be->ops->module_free(be, m);
    kiln_abi_free(&abi);

    /* the same kernel without the map's parameter: refused, the map counted */
    tma_copy_source(src, sizeof src, 0);
    m = NULL;
    log = NULL;
    int rc = compile(p, src, &m, &log, &abi, &err);
    free(log);
    if (rc == KILN_OK) { /* a driver without cuFuncGetParamInfo cannot tell */
        be->ops->module_free(be, m);
        kiln_abi_free(&abi);
    } else {
        assert_int_equal(rc, KILN_ERR_COMPILE);
        assert_contains(err.msg, "tensor maps included");
    }
    kiln_problem_free(p);
}

static void test_compile_failures(void **state) {
    (void)state;
    NEED_GPU();
    kiln_problem *p = load(scale_def, scale_wl);
    kiln_module *m = NULL;
    char *log = NULL;
    kiln_abi abi;
    kiln_err err = {{0}};
    const char *syntax =
        "// kiln: launch scale grid=1 block=1\n"
        "extern \"C\" __global__ void scale(const float *x, float alpha, float *y,\n"
        "                                  int64_t n) {\n"
        "    y[0] = x[0] * alpha +;\n"
        "}\n";
    assert_int_equal(compile(p, syntax, &m, &log, &abi, &err), KILN_ERR_COMPILE);
    assert_contains(log, "candidate.cu(4)");
    free(log);
    log = NULL;
    /* C++ linkage: the name is mangled, so the driver cannot find it */
    const char *mangled = "// kiln: launch scale grid=1 block=1\n"
                          "__global__ void scale(const float *x, float alpha, float *y, int64_t n) "
                          "{ y[0] = x[0] * alpha; }\n";
    assert_int_equal(compile(p, mangled, &m, &log, &abi, &err), KILN_ERR_COMPILE);
    assert_contains(err.msg, "entry point 'scale' not found (did you write extern \"C\"?)");
    assert_contains(log, "entry point 'scale' not found");
    free(log);
    log = NULL;
    /* a parameter list that is not the ABI's would read garbage: refused */
    const char *short_params = "// kiln: launch scale grid=1 block=1\n"
                               "extern \"C\" __global__ void scale(const float *x, float *y) "
                               "{ y[0] = x[0]; }\n";
    assert_int_equal(compile(p, short_params, &m, &log, &abi, &err), KILN_ERR_COMPILE);
    assert_contains(err.msg, "'scale' takes 2 parameters, but the ABI passes 4");
    free(log);
    log = NULL;
    const char *double_alpha = "// kiln: launch scale grid=1 block=1\n"
                               "extern \"C\" __global__ void scale(const float *x, double alpha, "
                               "float *y, int64_t n) { y[0] = x[0] * alpha; }\n";
    assert_int_equal(compile(p, double_alpha, &m, &log, &abi, &err), KILN_ERR_COMPILE);
    assert_contains(err.msg, "parameter 2 of 'scale' is 8 bytes");
    free(log);
    kiln_problem_free(p);
}

/* Compiles src, plans it for the scale problem with n = 1024 and launches it; returns the status.
 */
static int try_launch(const char *src, kiln_err *err) {
    static const char wl[] = "{\"uuid\": \"w\", \"axes\": {\"n\": 1024}, \"inputs\": {\"x\": "
                             "{\"type\": \"random\"}, \"alpha\": {\"type\": \"scalar\", "
                             "\"value\": 1}}}\n";
    kiln_problem *p = load(scale_def, wl);
    kiln_module *m = NULL;
    char *log = NULL;
    kiln_abi abi;
    int rc = compile(p, src, &m, &log, &abi, err);
    if (rc)
        fail_msg("compile: %s\n%s", err->msg, log ? log : "");
    free(log);
    kiln_launch_plan plan;
    rc = kiln_abi_plan(&abi, p, &p->workloads[0], &plan, err);
    kiln_devptr x = 0, y = 0;
    int64_t n = 1024;
    float alpha = 1;
    if (rc == KILN_OK) {
        assert_int_equal(be->ops->alloc(be, 4096, 0, &x, err), KILN_OK);
        assert_int_equal(be->ops->alloc(be, 4096, 0, &y, err), KILN_OK);
        assert_int_equal(be->ops->memset8(be, x, 0, 4096, err), KILN_OK);
        void *params[] = {&x, &alpha, &y, &n};
        rc = be->ops->launch(be, m, &plan, params, err);
        if (rc == KILN_OK)
            rc = be->ops->sync(be, err);
        be->ops->free(be, x);
        be->ops->free(be, y);
    }
    be->ops->module_free(be, m);
    kiln_abi_free(&abi);
    kiln_problem_free(p);
    return rc;
}

static void test_resources(void **state) {
    (void)state;
    NEED_GPU();
    kiln_err err = {{0}};
    /* __launch_bounds__(256) caps the block below what the launch asks */
    const char *bounded =
        "// kiln: launch scale grid=1 block=512\n"
        "extern \"C\" __global__ void __launch_bounds__(256) scale(const float *x,"
        " float alpha, float *y, int64_t n) { y[threadIdx.x] = x[0] * alpha; }\n";
    assert_int_equal(try_launch(bounded, &err), KILN_ERR_RESOURCE);
    assert_contains(err.msg, "at most 256 threads");
    /* dynamic shared memory: 100 KiB works (kiln raises the limit), 300 KiB does not fit */
    const char *dyn = "// kiln: launch scale grid=4 block=256 smem=100*1024\n"
                      "extern \"C\" __global__ void scale(const float *x, float alpha, float *y,\n"
                      "                                  int64_t n) {\n"
                      "    extern __shared__ float buf[];\n"
                      "    for (int i = threadIdx.x; i < 25600; i += blockDim.x) buf[i] = i;\n"
                      "    __syncthreads();\n"
                      "    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;\n"
                      "    if (i < n) y[i] = x[i] * alpha + buf[25599 - threadIdx.x] * 0;\n"
                      "}\n";
    assert_int_equal(try_launch(dyn, &err), KILN_OK);
    const char *huge = "// kiln: launch scale grid=4 block=256 smem=300*1024\n"
                       "extern \"C\" __global__ void scale(const float *x, float alpha, float *y,\n"
                       "                                  int64_t n) { y[0] = x[0] * alpha; }\n";
    assert_int_equal(try_launch(huge, &err), KILN_ERR_RESOURCE);
    assert_contains(err.msg, "shared memory");
    /* clusters: the kernel reports its cluster size */
    const char *cluster =
        "// kiln: launch scale grid=8 block=128 cluster=2\n"
        "extern \"C\" __global__ void scale(const float *x, float alpha, float *y,\n"
        "                                  int64_t n) {\n"
        "    unsigned r;\n"
        "    asm(\"mov.u32 %0, %%cluster_nctarank;\" : \"=r\"(r));\n"
        "    if (r != 2) __trap();\n"
        "    y[blockIdx.x * 128 + threadIdx.x] = x[0] * alpha + r;\n"
        "}\n";
    int rc = try_launch(cluster, &err);
    if (rc)
        fail_msg("cluster launch: %s", err.msg);
    const char *uneven =
        "// kiln: launch scale grid=7 block=128 cluster=2\n"
        "extern \"C\" __global__ void scale(const float *x, float alpha, float *y,\n"
        "                                  int64_t n) { y[0] = x[0] * alpha; }\n";
    assert_int_equal(try_launch(uneven, &err), KILN_ERR_RESOURCE);
    assert_contains(err.msg, "not a multiple of cluster");
    const char *wide = "// kiln: launch scale grid=32 block=64 cluster=32\n"
                       "extern \"C\" __global__ void scale(const float *x, float alpha, float *y,\n"
                       "                                  int64_t n) { y[0] = x[0] * alpha; }\n";
    assert_int_equal(try_launch(wide, &err), KILN_ERR_RESOURCE);
    /* 16 is allowed only with the non-portable opt-in, which kiln sets */
    const char *sixteen =
        "// kiln: launch scale grid=32 block=64 cluster=16\n"
        "extern \"C\" __global__ void scale(const float *x, float alpha, float "
        "*y, int64_t n) { if (blockIdx.x == 0) y[threadIdx.x] = x[0] * alpha; }\n";
    rc = try_launch(sixteen, &err);
    if (rc)
        fail_msg("cluster of 16: %s: %s", kiln_strerror(rc), err.msg);
}

/* ---- faults, each in a fresh process (the context dies with it) ---- */

static const char *fault_src(const char *kind) {
    if (strcmp(kind, "address") == 0)
        return "// kiln: launch scale grid=1 block=32\n"
               "extern \"C\" __global__ void scale(const float *x, float alpha, float *y, int64_t "
               "n) {\n"
               "    float *bad = (float *)0x10;\n"
               "    bad[threadIdx.x] = x[0] * alpha;\n"
               "}\n";
    return "// kiln: launch scale grid=1 block=32\n"
           "extern \"C\" __global__ void scale(const float *x, float alpha, float *y, int64_t n) "
           "{\n"
           "    if (threadIdx.x == 5) __trap();\n"
           "    y[threadIdx.x] = x[0] * alpha;\n"
           "}\n";
}

/* The child's side: prints the statuses it saw; exit 0 when they are the expected ones. */
static int fault_child(const char *kind) {
    kiln_err err = {{0}};
    if (kiln_backend_open("cuda", 0, &be, &err))
        return 10;
    int rc = try_launch(fault_src(kind), &err);
    printf("fault %s: %s: %s\n", kind, kiln_strerror(rc), err.msg);
    if (rc != KILN_ERR_LAUNCH)
        return 11;
    if (strcmp(kind, "address") == 0 && !strstr(err.msg, "CUDA_ERROR_ILLEGAL_ADDRESS: "))
        return 12;
    /* the context is gone: everything after says so, without crashing */
    kiln_devptr p;
    int rc2 = be->ops->alloc(be, 16, 0, &p, &err);
    printf("after: %s: %s\n", kiln_strerror(rc2), err.msg);
    if (rc2 != KILN_ERR_LAUNCH)
        return 13;
    kiln_backend_close(be);
    return 0;
}

static void run_fault_child(const char *kind) {
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* a fresh image: CUDA does not survive fork */
        execl("/proc/self/exe", "test_backend_cuda", "--fault", kind, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("fault '%s': the child exited with status 0x%x", kind, status);
}

static void test_fault_illegal_address(void **state) {
    (void)state;
    NEED_GPU();
    run_fault_child("address");
}

static void test_fault_trap(void **state) {
    (void)state;
    NEED_GPU();
    run_fault_child("trap");
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--fault") == 0)
        return fault_child(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nvrtc_compile_only),
        cmocka_unit_test(test_cubin_cache),
        cmocka_unit_test(test_compile_apart),
        cmocka_unit_test(test_visible_gpus_and_default_backend),
        cmocka_unit_test(test_cuda_arch),
        cmocka_unit_test(test_nvrtc_errors),
        cmocka_unit_test(test_device_info),
        cmocka_unit_test(test_scale_runs),
        cmocka_unit_test(test_bf16_runs),
        cmocka_unit_test(test_launches_with_scratch),
        cmocka_unit_test(test_launches_with_tensormaps),
        cmocka_unit_test(test_compile_failures),
        cmocka_unit_test(test_resources),
        cmocka_unit_test(test_fault_illegal_address),
        cmocka_unit_test(test_fault_trap),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
