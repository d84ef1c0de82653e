/* test_backend_cpu.c: the cpu backend end to end (compile, memory, launch through the trampolines,
 * timing), its failure modes (compile errors, missing entry points, overruns that must fault) and
 * the 16-bit float conversions of kiln_cpu.h. The backend-level tests run twice: in this process,
 * and sandboxed (every candidate in a runner process; test_sandbox.c covers what the sandbox
 * refuses). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/kiln_cpu.h"
#include "formats/dtype.h"

/* y = x * alpha over n floats: a tensor, a float scalar, an output and an int64 axis. */
static const char scale_def[] =
    "{\"name\": \"scale\", \"axes\": {\"n\": {\"type\": \"var\"}},\n"
    " \"inputs\": {\"x\": {\"shape\": [\"n\"], \"dtype\": \"float32\"},\n"
    "            \"alpha\": {\"shape\": null, \"dtype\": \"float32\"}},\n"
    " \"outputs\": {\"y\": {\"shape\": [\"n\"], \"dtype\": \"float32\"}},\n"
    " \"reference\": \"def run(x, alpha):\\n    return x * alpha\"}\n";
static const char scale_wl[] = "{\"uuid\": \"w\", \"axes\": {\"n\": 1000000}, \"inputs\": {\"x\": "
                               "{\"type\": \"random\"}, \"alpha\": {\"type\": \"scalar\", "
                               "\"value\": 0.5}}}\n";

static const char scale_src[] = "// kiln: launch scale\n"
                                "void scale(const float *x, float alpha, float *y, int64_t n) {\n"
                                "    #pragma omp parallel for\n"
                                "    for (int64_t i = 0; i < n; i++)\n"
                                "        y[i] = x[i] * alpha;\n"
                                "}\n";

/* Every scalar kind between two pointers, to prove the trampoline passes each in its register. */
static const char mixed_def[] =
    "{\"name\": \"mixed\", \"axes\": {\"n\": {\"type\": \"var\"}},\n"
    " \"inputs\": {\"d\": {\"shape\": null, \"dtype\": \"float64\"},\n"
    "            \"x\": {\"shape\": [\"n\"], \"dtype\": \"bfloat16\"},\n"
    "            \"i\": {\"shape\": null, \"dtype\": \"int32\"},\n"
    "            \"f\": {\"shape\": null, \"dtype\": \"float32\"},\n"
    "            \"b\": {\"shape\": null, \"dtype\": \"bool\"},\n"
    "            \"k\": {\"shape\": null, \"dtype\": \"int64\"}},\n"
    " \"outputs\": {\"o\": {\"shape\": [\"n\"], \"dtype\": \"float64\"}},\n"
    " \"reference\": \"def run(d, x, i, f, b, k):\\n    return x\"}\n";
static const char mixed_wl[] =
    "{\"uuid\": \"w\", \"axes\": {\"n\": 8}, \"inputs\": {\"d\": {\"type\": \"scalar\", \"value\": "
    "1}, \"x\": {\"type\": \"random\"}, \"i\": {\"type\": \"scalar\", \"value\": 1}, \"f\": "
    "{\"type\": \"scalar\", \"value\": 1}, \"b\": {\"type\": \"scalar\", \"value\": true}, \"k\": "
    "{\"type\": \"scalar\", \"value\": 1}}}\n";
static const char mixed_src[] =
    "// kiln: launch first\n"
    "// kiln: launch second\n"
    "void first(double d, const kiln_bf16 *x, int32_t i, float f, bool b, int64_t k, double *o,\n"
    "           int64_t n) {\n"
    "    o[0] = d; o[1] = kiln_bf16_to_float(x[0]); o[2] = i; o[3] = f; o[4] = b; o[5] = k;\n"
    "    o[6] = (double)n;\n"
    "}\n"
    "void second(double d, const kiln_bf16 *x, int32_t i, float f, bool b, int64_t k, double *o,\n"
    "            int64_t n) {\n"
    "    (void)d; (void)x; (void)i; (void)f; (void)b; (void)k;\n"
    "    o[n - 1] = o[3] * 2 + omp_get_max_threads() * 0;\n"
    "}\n";

static kiln_backend *be;
static int sandboxed; /* be runs candidates in runner processes */

static int open_cpu(int sandbox) {
    kiln_err err = {{0}};
    sandboxed = sandbox;
    kiln_backend_config cfg = {.sandbox = sandbox};
    int rc = kiln_backend_open_with("cpu", 0, &cfg, &be, &err);
    if (rc) {
        fprintf(stderr, "cpu backend: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int setup(void **state) {
    (void)state;
    return open_cpu(0);
}

static int setup_sandboxed(void **state) {
    (void)state;
    return open_cpu(1);
}

static int teardown(void **state) {
    (void)state;
    kiln_backend_close(be);
    return 0;
}

static kiln_problem *load(const char *def, const char *wl) {
    kiln_problem *p = NULL;
    kiln_err err = {{0}};
    if (kiln_problem_parse(def, strlen(def), "definition.json", wl, strlen(wl), "workload.jsonl",
                           &p, &err))
        fail_msg("kiln_problem_parse: %s", err.msg);
    return p;
}

/* Compiles src for problem p; returns the status, the module in *m and the log in *log. */
static int compile(const kiln_problem *p, const char *src, kiln_module **m, char **log,
                   kiln_err *err) {
    kiln_abi abi;
    int rc = kiln_abi_parse(src, 0, &abi, err);
    if (rc)
        return rc;
    kiln_signature sig;
    kiln_abi_signature(p, abi.scratch != NULL, 0, &sig);
    rc = be->ops->compile(be, src, &sig, &abi, m, log, err);
    kiln_abi_free(&abi);
    return rc;
}

static void assert_contains(const char *haystack, const char *needle) {
    if (!haystack || !strstr(haystack, needle))
        fail_msg("expected \"%s\" in \"%s\"", needle, haystack ? haystack : "(null)");
}

static void test_device_info(void **state) {
    (void)state;
    kiln_device_info info;
    be->ops->device_info(be, &info);
    assert_true(strlen(info.name) > 0);
    assert_memory_equal(info.uuid, "cpu-", 4);
    assert_int_equal(strlen(info.uuid), 4 + 16);
    assert_true(info.n_sms >= 1);
    assert_true(info.l2_bytes >= 64 * 1024);
    assert_true(info.mem_bytes > 0);
    assert_int_equal(info.cc_major, 0);
    assert_int_equal(info.clock_khz, 0); /* no clock: no tensor-core ceiling is derived from it */
}

static void test_scale_runs(void **state) {
    (void)state;
    kiln_problem *p = load(scale_def, scale_wl);
    kiln_module *m = NULL;
    char *log = NULL;
    kiln_err err = {{0}};
    int rc = compile(p, scale_src, &m, &log, &err);
    if (rc)
        fail_msg("compile: %s\n%s", err.msg, log ? log : "");
    free(log);

    int64_t n = p->workloads[0].axis_values[0];
    assert_int_equal(n, 1000000);
    size_t bytes = (size_t)n * sizeof(float);
    float *host = malloc(bytes), *back = malloc(bytes);
    for (int64_t i = 0; i < n; i++)
        host[i] = (float)(i % 1000) - 499.75f;
    kiln_devptr x, y;
    assert_int_equal(
        be->ops->alloc(be, bytes, KILN_ALLOC_CANDIDATE | KILN_ALLOC_READONLY, &x, &err), KILN_OK);
    assert_int_equal(be->ops->alloc(be, bytes, KILN_ALLOC_CANDIDATE, &y, &err), KILN_OK);
    assert_int_equal(x % 16, 0);
    assert_int_equal(y % 16, 0);
    assert_int_equal(be->ops->upload(be, x, host, bytes, &err), KILN_OK);
    assert_int_equal(be->ops->memset8(be, y, 0xff, bytes, &err), KILN_OK);

    float alpha = 0.5f;
    kiln_abi abi;
    assert_int_equal(kiln_abi_parse(scale_src, 0, &abi, &err), KILN_OK);
    kiln_launch_plan plan;
    assert_int_equal(kiln_abi_plan(&abi, p, &p->workloads[0], &plan, &err), KILN_OK);
    void *params[] = {&x, &alpha, &y, &n};
    /* one untimed run: the OpenMP team starts and the output pages are touched */
    assert_int_equal(be->ops->launch(be, m, &plan, params, &err), KILN_OK);
    assert_int_equal(be->ops->memset8(be, y, 0xff, bytes, &err), KILN_OK);
    assert_int_equal(be->ops->flush_cache(be, &err), KILN_OK);
    kiln_timer *t;
    assert_int_equal(be->ops->timer_create(be, &t, &err), KILN_OK);
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
    printf("    scale of %lld floats: %.1f us (%.2f GB/s)\n", (long long)n, us,
           2.0 * (double)bytes / (us * 1e-6) / 1e9);

    /* a plan naming an entry the module lacks runs nothing */
    snprintf(plan.launch[0].entry, sizeof plan.launch[0].entry, "nope");
    assert_int_equal(be->ops->launch(be, m, &plan, params, &err), KILN_ERR_INVALID);
    /* transfers outside an allocation are refused, not performed */
    assert_int_equal(be->ops->upload(be, x + 16, host, bytes, &err), KILN_ERR_INVALID);
    assert_int_equal(be->ops->download(be, back, y, bytes + 1, &err), KILN_ERR_INVALID);

    be->ops->free(be, x);
    be->ops->free(be, y);
    be->ops->module_free(be, m);
    kiln_abi_free(&abi);
    kiln_problem_free(p);
    free(host);
    free(back);
}

static void test_trampoline_types(void **state) {
    (void)state;
    kiln_problem *p = load(mixed_def, mixed_wl);
    kiln_module *m = NULL;
    char *log = NULL;
    kiln_err err = {{0}};
    int rc = compile(p, mixed_src, &m, &log, &err);
    if (rc)
        fail_msg("compile: %s\n%s", err.msg, log ? log : "");
    free(log);
    kiln_devptr x, o;
    assert_int_equal(be->ops->alloc(be, 16, KILN_ALLOC_CANDIDATE | KILN_ALLOC_READONLY, &x, &err),
                     KILN_OK);
    assert_int_equal(be->ops->alloc(be, 8 * sizeof(double), KILN_ALLOC_CANDIDATE, &o, &err),
                     KILN_OK);
    uint16_t xs[8] = {0x4049}; /* bf16 3.140625 */
    assert_int_equal(be->ops->upload(be, x, xs, sizeof xs, &err), KILN_OK);
    double d = -2.5e300;
    int32_t i = -123456;
    float f = 1.25f;
    bool b = true;
    int64_t k = -((int64_t)1 << 40), n = 8;
    void *params[] = {&d, &x, &i, &f, &b, &k, &o, &n};
    kiln_abi abi;
    assert_int_equal(kiln_abi_parse(mixed_src, 0, &abi, &err), KILN_OK);
    kiln_launch_plan plan;
    assert_int_equal(kiln_abi_plan(&abi, p, &p->workloads[0], &plan, &err), KILN_OK);
    assert_int_equal(plan.n_launches, 2);
    assert_int_equal(be->ops->launch(be, m, &plan, params, &err), KILN_OK);
    double out[8];
    assert_int_equal(be->ops->download(be, out, o, sizeof out, &err), KILN_OK);
    assert_true(out[0] == d);
    assert_true(out[1] == 3.140625);
    assert_true(out[2] == -123456.0);
    assert_true(out[3] == 1.25);
    assert_true(out[4] == 1.0);
    assert_true(out[5] == (double)k);
    assert_true(out[6] == 8.0);
    assert_true(out[7] == 2.5); /* the second launch ran after the first */
    be->ops->free(be, x);
    be->ops->free(be, o);
    be->ops->module_free(be, m);
    kiln_abi_free(&abi);
    kiln_problem_free(p);
}

static void test_compile_error(void **state) {
    (void)state;
    kiln_problem *p = load(scale_def, scale_wl);
    kiln_module *m = NULL;
    char *log = NULL;
    kiln_err err = {{0}};
    const char *src = "// kiln: launch scale\n"
                      "void scale(const float *x, float alpha, float *y, int64_t n) {\n"
                      "    y[0] = x[0] * alpha +;\n"
                      "}\n";
    assert_int_equal(compile(p, src, &m, &log, &err), KILN_ERR_COMPILE);
    assert_null(m);
    assert_contains(log, "candidate.c:3:");
    assert_null(strstr(log, "/kiln-cpu-")); /* the private folder is not in the log */
    assert_contains(err.msg, "C compiler failed");
    free(log);
    log = NULL;
    /* calling something undeclared is an error at compile time, with its line */
    const char *undeclared = "// kiln: launch scale\n"
                             "void scale(const float *x, float alpha, float *y, int64_t n) {\n"
                             "    y[0] = x[0] * alpha + n;\n"
                             "    not_declared_anywhere(y);\n"
                             "}\n";
    assert_int_equal(compile(p, undeclared, &m, &log, &err), KILN_ERR_COMPILE);
    assert_contains(log, "candidate.c:4:");
    free(log);
    kiln_problem_free(p);
}

static void test_missing_entry(void **state) {
    (void)state;
    kiln_problem *p = load(scale_def, scale_wl);
    kiln_module *m = NULL;
    char *log = NULL;
    kiln_err err = {{0}};
    const char *src = "// kiln: launch foo\n"
                      "void bar(const float *x, float alpha, float *y, int64_t n) {\n"
                      "    for (int64_t i = 0; i < n; i++) y[i] = x[i] * alpha;\n"
                      "}\n";
    assert_int_equal(compile(p, src, &m, &log, &err), KILN_ERR_COMPILE);
    assert_null(m);
    assert_contains(err.msg, "entry point 'foo' is not defined");
    assert_contains(err.msg, "void foo(const float* x, float alpha, float* y, int64_t n)");
    assert_contains(log, "entry point 'foo' is not defined");
    free(log);
    log = NULL;
    /* a static function is not an entry point either */
    const char *stat = "// kiln: launch foo\n"
                       "static void foo(const float *x, float alpha, float *y, int64_t n) {\n"
                       "    for (int64_t i = 0; i < n; i++) y[i] = x[i] * alpha;\n"
                       "}\n"
                       "void use(void) { foo(0, 0, 0, 0); }\n";
    assert_int_equal(compile(p, stat, &m, &log, &err), KILN_ERR_COMPILE);
    assert_contains(err.msg, "entry point 'foo' is not defined");
    free(log);
    /* no launch line and no kiln_kernel */
    log = NULL;
    const char *none = "void scale(const float *x, float alpha, float *y, int64_t n) {}\n";
    assert_int_equal(compile(p, none, &m, &log, &err), KILN_ERR_COMPILE);
    assert_contains(err.msg, "entry point 'kiln_kernel' is not defined");
    free(log);
    kiln_problem_free(p);
}

/* Runs fn in a forked child and returns its wait status. cmocka catches SIGSEGV to report a failed
 * test; the child must die of the real signal, so it gets the default action back. */
static int in_child(void (*fn)(void)) {
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);
        signal(SIGBUS, SIG_DFL);
        fn();
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

static void write_last_usable(void) {
    kiln_devptr p;
    if (be->ops->alloc(be, 100, 0, &p, NULL))
        _exit(2);
    volatile unsigned char *b = (volatile unsigned char *)(uintptr_t)p;
    b[0] = 1;
    b[99] = 1;
    b[111] = 1; /* 100 rounds to 112: the slack is usable */
    _exit(0);
}

static void write_past_end(void) {
    kiln_devptr p;
    if (be->ops->alloc(be, 100, 0, &p, NULL))
        _exit(2);
    volatile unsigned char *b = (volatile unsigned char *)(uintptr_t)p;
    b[112] = 1;
    _exit(0);
}

/* A kernel that writes y[n]: one float past the end of an output of 1,000,000 floats. */
static void kernel_past_end(void) {
    kiln_problem *p = load(scale_def, scale_wl);
    const char *src = "// kiln: launch scale\n"
                      "void scale(const float *x, float alpha, float *y, int64_t n) {\n"
                      "    for (int64_t i = 0; i <= n; i++) y[i] = x[i < n ? i : 0] * alpha;\n"
                      "}\n";
    kiln_module *m = NULL;
    char *log = NULL;
    kiln_err err;
    if (compile(p, src, &m, &log, &err))
        _exit(3);
    int64_t n = 1000000;
    kiln_devptr x, y;
    if (be->ops->alloc(be, (size_t)n * 4, KILN_ALLOC_CANDIDATE, &x, &err) ||
        be->ops->alloc(be, (size_t)n * 4, KILN_ALLOC_CANDIDATE, &y, &err))
        _exit(4);
    float alpha = 2;
    void *params[] = {&x, &alpha, &y, &n};
    kiln_launch_plan plan = {0};
    plan.n_launches = 1;
    snprintf(plan.launch[0].entry, sizeof plan.launch[0].entry, "scale");
    be->ops->launch(be, m, &plan, params, &err);
    _exit(0);
}

static void test_guard_page(void **state) {
    (void)state;
    int st = in_child(write_last_usable);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    st = in_child(write_past_end);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGSEGV)
        fail_msg("writing past the end did not fault (status 0x%x)", st);
    st = in_child(kernel_past_end);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGSEGV)
        fail_msg("a kernel writing past the end did not fault (status 0x%x)", st);
}

/* A kernel that writes the byte at offset (int64_t)alpha of y (a buffer of 100 bytes). */
static const char poke_src[] = "// kiln: launch scale\n"
                               "void scale(const float *x, float alpha, float *y, int64_t n) {\n"
                               "    (void)x; (void)n;\n"
                               "    ((volatile unsigned char *)y)[(int64_t)alpha] = 1;\n"
                               "}\n";

/* Launches m once with y (x a buffer of 16 bytes) and alpha. */
static int launch_poke(kiln_module *m, kiln_devptr x, kiln_devptr y, float alpha, kiln_err *err) {
    int64_t n = 4;
    void *params[] = {&x, &alpha, &y, &n};
    kiln_launch_plan plan = {0};
    plan.n_launches = 1;
    snprintf(plan.launch[0].entry, sizeof plan.launch[0].entry, "scale");
    return be->ops->launch(be, m, &plan, params, err);
}

static int compile_scale(const char *src, kiln_module **m) {
    kiln_problem *p = load(scale_def, scale_wl);
    kiln_err err = {{0}};
    int rc = compile(p, src, m, NULL, &err);
    kiln_problem_free(p);
    return rc;
}

/* Sandboxed, the same overrun kills the candidate's process, which the launch reports; the 16-byte
 * slack before the guard page is the candidate's. */
static void test_guard_page_sandboxed(void **state) {
    (void)state;
    kiln_err err = {{0}};
    kiln_devptr x, y;
    assert_int_equal(be->ops->alloc(be, 16, KILN_ALLOC_CANDIDATE, &x, &err), KILN_OK);
    assert_int_equal(be->ops->alloc(be, 100, KILN_ALLOC_CANDIDATE, &y, &err), KILN_OK);
    assert_int_equal(y % 16, 0);
    kiln_module *m = NULL;
    assert_int_equal(compile_scale(poke_src, &m), KILN_OK);
    assert_int_equal(launch_poke(m, x, y, 0, &err), KILN_OK);
    assert_int_equal(launch_poke(m, x, y, 111, &err), KILN_OK); /* 100 rounds to 112 */
    unsigned char back[112];
    assert_int_equal(be->ops->download(be, back, y, sizeof back, &err), KILN_OK);
    assert_int_equal(back[0], 1);
    assert_int_equal(back[111], 1);
    assert_int_equal(launch_poke(m, x, y, 112, &err), KILN_ERR_LAUNCH);
    assert_contains(err.msg, "died of SIGSEGV");
    be->ops->module_free(be, m);
    be->ops->free(be, x);
    be->ops->free(be, y);
}

static kiln_devptr ro_x, ro_y;
static kiln_module *ro_module;

static void write_read_only(void) {
    launch_poke(ro_module, ro_y, ro_x, 3, NULL); /* y is x: the read-only buffer */
    _exit(0);
}

/* A read-only buffer takes the gate's writes (upload, memset8, copy) and faults the candidate's. */
static void test_read_only_buffers(void **state) {
    (void)state;
    kiln_err err = {{0}};
    assert_int_equal(
        be->ops->alloc(be, 100, KILN_ALLOC_CANDIDATE | KILN_ALLOC_READONLY, &ro_x, &err), KILN_OK);
    assert_int_equal(be->ops->alloc(be, 100, KILN_ALLOC_CANDIDATE, &ro_y, &err), KILN_OK);
    unsigned char bytes[100], back[100];
    for (int i = 0; i < 100; i++)
        bytes[i] = (unsigned char)i;
    assert_int_equal(be->ops->upload(be, ro_x, bytes, sizeof bytes, &err), KILN_OK);
    assert_int_equal(be->ops->memset8(be, ro_x, 9, 10, &err), KILN_OK);
    assert_int_equal(be->ops->memset8(be, ro_y, 0, 100, &err), KILN_OK);
    assert_int_equal(be->ops->copy(be, ro_x + 50, ro_y, 10, &err), KILN_OK);
    assert_int_equal(be->ops->copy(be, ro_y, ro_x, 100, &err), KILN_OK);
    assert_int_equal(be->ops->download(be, back, ro_y, sizeof back, &err), KILN_OK);
    assert_int_equal(back[0], 9);
    assert_int_equal(back[10], 10);
    assert_int_equal(back[50], 0);
    assert_int_equal(back[99], 99);
    const unsigned char *view = be->ops->host_view(be, ro_x);
    assert_non_null(view);
    assert_int_equal(view[99], 99);
    assert_int_equal(be->ops->copy(be, ro_y, ro_x, 113, &err), KILN_ERR_INVALID); /* past the 112 */
    assert_int_equal(compile_scale(poke_src, &ro_module), KILN_OK);
    if (sandboxed) {
        assert_int_equal(launch_poke(ro_module, ro_y, ro_x, 3, &err), KILN_ERR_LAUNCH);
        assert_contains(err.msg, "died of SIGSEGV");
    } else {
        int st = in_child(write_read_only);
        if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGSEGV)
            fail_msg("a kernel writing a read-only buffer did not fault (status 0x%x)", st);
    }
    be->ops->module_free(be, ro_module);
    be->ops->free(be, ro_x);
    be->ops->free(be, ro_y);
}

static void test_compiler_failures(void **state) {
    (void)state;
    kiln_problem *p = load(scale_def, scale_wl);
    kiln_module *m = NULL;
    char *log = NULL;
    kiln_err err = {{0}};
    char dir[] = "/tmp/kiln-test-cc-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char script[128];
    snprintf(script, sizeof script, "%s/slowcc", dir);
    FILE *f = fopen(script, "w");
    assert_non_null(f);
    fputs("#!/bin/sh\nsleep 30\n", f);
    fclose(f);
    chmod(script, 0700);

    setenv("KILN_CC", script, 1);
    setenv("KILN_CC_TIMEOUT", "0.3", 1);
    double t0 = kiln_now_s();
    assert_int_equal(compile(p, scale_src, &m, &log, &err), KILN_ERR_COMPILE);
    assert_true(kiln_now_s() - t0 < 5);
    assert_contains(err.msg, "ran past its");
    free(log);
    log = NULL;

    setenv("KILN_CC", "/nonexistent/kiln-cc", 1);
    assert_int_equal(compile(p, scale_src, &m, &log, &err), KILN_ERR_BACKEND);
    assert_contains(err.msg, "cannot run the C compiler");
    free(log);
    unsetenv("KILN_CC");
    unsetenv("KILN_CC_TIMEOUT");
    unlink(script);
    rmdir(dir);
    kiln_problem_free(p);
}

static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint32_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* A half's value from its fields, in double: an independent reference for widening. */
static double f16_value(uint16_t h) {
    int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v = exp == 0    ? ldexp(mant, -24)
               : exp == 31 ? (mant ? NAN : INFINITY)
                           : ldexp(1024 + mant, exp - 25);
    return (h & 0x8000) ? -v : v;
}

/* Checks that r = narrow(f) is the nearest half to f, ties to even (|f| below the overflow point).
 */
static void check_nearest_f16(float f) {
    uint16_t r = kiln_float_to_f16(f);
    double e = fabs((double)f - f16_value(r));
    int mag = r & 0x7fff;
    double below = mag ? fabs((double)f - f16_value((uint16_t)(r - 1))) : INFINITY;
    double above = mag < 0x7bff ? fabs((double)f - f16_value((uint16_t)(r + 1))) : INFINITY;
    if (mag > 0x7bff || e > below || e > above)
        fail_msg("%a -> 0x%04x is not the nearest half", f, r);
    if ((e == below || e == above) && (r & 1))
        fail_msg("%a -> 0x%04x: a tie must round to even", f, r);
}

static void test_f16_conversions(void **state) {
    (void)state;
    /* every half widens exactly and narrows back to itself */
    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t hb = (uint16_t)h;
        float f = kiln_f16_to_float(hb);
        double ref = f16_value(hb);
        if (isnan(ref)) {
            assert_true(isnan(f));
            assert_true(isnan(kiln_f16_to_float(kiln_float_to_f16(f))));
            continue;
        }
        if ((double)f != ref || !signbit(f) != !signbit(ref))
            fail_msg("f16 0x%04x widens to %a, expected %a", h, f, ref);
        if (kiln_float_to_f16(f) != hb)
            fail_msg("f16 0x%04x does not round-trip", h);
    }
    /* random floats, concentrated on the half range (exponents 2^-30 .. 2^17) */
    for (int i = 0; i < 4000000; i++) {
        uint32_t u = rng();
        if (i & 1)
            u = (u & 0x807fffffu) | ((97u + (u >> 8) % 48u) << 23);
        float f = bits_float(u);
        if (isnan(f))
            continue;
        if (fabsf(f) < 65520.0f)
            check_nearest_f16(f);
        else
            assert_int_equal(kiln_float_to_f16(f) & 0x7fff, 0x7c00);
#ifdef __FLT16_MAX__
        /* where the compiler has _Float16, its conversion must agree bit for bit */
        _Float16 ref = (_Float16)f;
        uint16_t rb;
        memcpy(&rb, &ref, 2);
        if (kiln_float_to_f16(f) != rb)
            fail_msg("%a narrows to 0x%04x, _Float16 says 0x%04x", f, kiln_float_to_f16(f), rb);
#endif
    }
    assert_int_equal(kiln_float_to_f16(65519.99f), 0x7bff);
    assert_int_equal(kiln_float_to_f16(65520.0f), 0x7c00);
    assert_int_equal(kiln_float_to_f16(bits_float(0x33000000u)), 0);      /* 2^-25: tie to 0 */
    assert_int_equal(kiln_float_to_f16(bits_float(0x33000001u)), 1);      /* just above: 2^-24 */
    assert_int_equal(kiln_float_to_f16(bits_float(0x387fc000u)), 0x03ff); /* largest subnormal */
    assert_int_equal(kiln_float_to_f16(bits_float(0x387fe000u)), 0x0400); /* tie up to normal */
    assert_int_equal(kiln_float_to_f16(-INFINITY), 0xfc00);
    assert_true(isnan(kiln_f16_to_float(kiln_float_to_f16(NAN))));
}

static void test_bf16_conversions(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = kiln_bf16_to_float((kiln_bf16)h);
        assert_int_equal(float_bits(f), h << 16);
        if (isnan(f))
            assert_true(isnan(kiln_bf16_to_float(kiln_float_to_bf16(f))));
        else
            assert_int_equal(kiln_float_to_bf16(f), h);
    }
    /* nearest, ties to even, checked against both neighbours in double */
    for (int i = 0; i < 4000000; i++) {
        float f = bits_float(rng());
        if (isnan(f) || fabsf(f) > 3.0e38f)
            continue;
        uint16_t r = kiln_float_to_bf16(f);
        double got = kiln_bf16_to_float(r);
        double below = kiln_bf16_to_float((kiln_bf16)(r - 1));
        double above = kiln_bf16_to_float((kiln_bf16)(r + 1));
        double e = fabs((double)f - got);
        if ((r & 0x7fff) != 0 && e > fabs((double)f - below))
            fail_msg("%a -> 0x%04x is not nearest", f, r);
        if ((r & 0x7fff) != 0x7f7f && e > fabs((double)f - above))
            fail_msg("%a -> 0x%04x is not nearest", f, r);
        if ((e == fabs((double)f - below) || e == fabs((double)f - above)) && (r & 1))
            fail_msg("%a -> 0x%04x: a tie must round to even", f, r);
    }
    assert_int_equal(kiln_float_to_bf16(bits_float(0x3f808000u)), 0x3f80); /* tie, down to even */
    assert_int_equal(kiln_float_to_bf16(bits_float(0x3f818000u)), 0x3f82); /* tie, up to even */
    assert_int_equal(kiln_float_to_bf16(3.4028235e38f), 0x7f80);           /* FLT_MAX -> Inf */
    assert_int_equal(kiln_float_to_bf16(-INFINITY), 0xff80);
    uint16_t nan = kiln_float_to_bf16(bits_float(0x7f800001u)); /* a NaN that truncates to Inf */
    assert_true(isnan(kiln_bf16_to_float(nan)));
}

/* kiln_cpu.h's fp8 widening agrees with kiln's own decoding (dtype.c) on every code. */
static void test_fp8_conversions(void **state) {
    (void)state;
    for (unsigned c = 0; c < 256; c++) {
        const uint8_t b = (uint8_t)c;
        const double e4 = kiln_dtype_load(KILN_F8_E4M3, &b, 0),
                     e5 = kiln_dtype_load(KILN_F8_E5M2, &b, 0);
        if (isnan(e4))
            assert_true(isnan(kiln_e4m3_to_float(b)));
        else
            assert_true((double)kiln_e4m3_to_float(b) == e4);
        if (isnan(e5))
            assert_true(isnan(kiln_e5m2_to_float(b)));
        else
            assert_true((double)kiln_e5m2_to_float(b) == e5);
    }
    assert_true(kiln_e4m3_to_float(0x7e) == 448.0f);
    assert_true(kiln_e4m3_to_float(0x81) == -0.001953125f);
    assert_true(isinf(kiln_e5m2_to_float(0x7c)));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_info),       cmocka_unit_test(test_scale_runs),
        cmocka_unit_test(test_trampoline_types),  cmocka_unit_test(test_compile_error),
        cmocka_unit_test(test_missing_entry),     cmocka_unit_test(test_guard_page),
        cmocka_unit_test(test_read_only_buffers), cmocka_unit_test(test_compiler_failures),
        cmocka_unit_test(test_f16_conversions),   cmocka_unit_test(test_bf16_conversions),
        cmocka_unit_test(test_fp8_conversions),
    };
    const struct CMUnitTest sandboxed[] = {
        cmocka_unit_test(test_device_info),       cmocka_unit_test(test_scale_runs),
        cmocka_unit_test(test_trampoline_types),  cmocka_unit_test(test_compile_error),
        cmocka_unit_test(test_missing_entry),     cmocka_unit_test(test_guard_page_sandboxed),
        cmocka_unit_test(test_read_only_buffers), cmocka_unit_test(test_compiler_failures),
    };
    int failed = cmocka_run_group_tests_name("cpu", tests, setup, teardown);
    failed += cmocka_run_group_tests_name("cpu sandboxed", sandboxed, setup_sandboxed, teardown);
    return failed;
}
