/* test_sandbox.c: the sandboxed cpu backend driven directly (no gate): candidates run in a runner
 * process and compute right; what a hostile one tries (writing its inputs or past its outputs,
 * files, processes, signals to the gate, sockets, timers, remapping its buffers, threads, runaway
 * loops, fake protocol bytes, closing descriptors, constructors, printing) is refused inside the
 * candidate or ends its process with a status, and the test process — the gate — lives on. It
 * also measures what the sandbox costs: a call's round trip and a runner's start. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/cpu.h"

/* y[i] from x[i] under op: a read-only input tensor, an int32 scalar, an int64 output, an axis. */
static const char probe_def[] =
    "{\"name\": \"probe\", \"axes\": {\"n\": {\"type\": \"var\"}},\n"
    " \"inputs\": {\"x\": {\"shape\": [\"n\"], \"dtype\": \"float32\"},\n"
    "            \"op\": {\"shape\": null, \"dtype\": \"int32\"}},\n"
    " \"outputs\": {\"y\": {\"shape\": [\"n\"], \"dtype\": \"int64\"}},\n"
    " \"reference\": \"def run(x, op):\\n    return x\"}\n";
static const char probe_wl[] = "{\"uuid\": \"w\", \"axes\": {\"n\": 4096}, \"inputs\": {\"x\": "
                               "{\"type\": \"random\"}, \"op\": {\"type\": \"scalar\", "
                               "\"value\": 0}}}\n";

/* op 0 computes; every other op tries one thing a sandbox must refuse and reports what the call
 * returned in y[0] and errno in y[1] (y[2] is 1 when the result was a failure). */
static const char hostile_src[] =
    "#include <errno.h>\n"
    "#include <fcntl.h>\n"
    "#include <pthread.h>\n"
    "#include <signal.h>\n"
    "#include <stdio.h>\n"
    "#include <stdlib.h>\n"
    "#include <sys/mman.h>\n"
    "#include <sys/ptrace.h>\n"
    "#include <sys/resource.h>\n"
    "#include <sys/socket.h>\n"
    "#include <sys/stat.h>\n"
    "#include <sys/syscall.h>\n"
    "#include <sys/time.h>\n"
    "#include <sys/uio.h>\n"
    "#include <netinet/in.h>\n"
    "#include <unistd.h>\n"
    "// kiln: launch probe\n"
    "static void *nothing(void *arg) { return arg; }\n"
    "static int calls;\n"
    "void probe(const float *x, int32_t op, int64_t *y, int64_t n) {\n"
    "    long r = 0;\n"
    "    long page = sysconf(_SC_PAGESIZE);\n"
    "    errno = 0;\n"
    "    switch (op) {\n"
    "    case 0:\n"
    "        #pragma omp parallel for\n"
    "        for (int64_t i = 0; i < n; i++) y[i] = (int64_t)(x[i] * 2.0f);\n"
    "        return;\n"
    "    case 1: r = open(\"/etc/passwd\", O_RDONLY); break;\n"
    "    case 2: r = fork(); if (r == 0) _exit(0); break;\n"
    "    case 3: { char *argv[] = {\"/bin/true\", 0}; r = execv(\"/bin/true\", argv); break; }\n"
    "    case 4: r = kill(getppid(), SIGKILL); break;\n"
    "    case 5: r = ptrace(PTRACE_ATTACH, getppid(), 0, 0); break;\n"
    "    case 6: {\n"
    "        r = socket(AF_INET, SOCK_STREAM, 0);\n"
    "        if (r >= 0) {\n"
    "            struct sockaddr_in a = {AF_INET, htons(80), {htonl(0x7f000001)}, {0}};\n"
    "            r = connect((int)r, (struct sockaddr *)&a, sizeof a);\n"
    "        }\n"
    "        break;\n"
    "    }\n"
    "    case 7: { struct itimerval t = {{0, 0}, {0, 1000}}; r = setitimer(ITIMER_REAL, &t, 0); "
    "break; }\n"
    "    case 8: {\n"
    "        char *end = (char *)(y + n);\n"
    "        char *guard = (char *)(((unsigned long)end + page - 1) & ~(unsigned long)(page - "
    "1));\n"
    "        r = mprotect(guard, page, PROT_READ | PROT_WRITE);\n"
    "        break;\n"
    "    }\n"
    "    case 9: {\n"
    "        void *at = (void *)((unsigned long)x & ~(unsigned long)(page - 1));\n"
    "        void *p = mmap(at, page, PROT_READ | PROT_WRITE,\n"
    "                       MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);\n"
    "        r = p == MAP_FAILED ? -1 : 0;\n"
    "        break;\n"
    "    }\n"
    "    case 10: { pthread_t t; r = pthread_create(&t, 0, nothing, 0); errno = (int)r; "
    "r = r ? -1 : 0; break; }\n"
    "    case 11: {\n"
    "        /* from every OpenMP thread: the filter covers the threads made before it */\n"
    "        long opened = 0, err = 0;\n"
    "        #pragma omp parallel reduction(+ : opened) reduction(max : err)\n"
    "        {\n"
    "            int fd = open(\"/etc/passwd\", O_RDONLY);\n"
    "            if (fd >= 0) opened++; else err = errno;\n"
    "        }\n"
    "        r = opened ? opened : -1;\n"
    "        errno = (int)err;\n"
    "        break;\n"
    "    }\n"
    "    case 12: {\n"
    "        char buf[64];\n"
    "        struct iovec l = {buf, sizeof buf}, rm = {(void *)0x400000, sizeof buf};\n"
    "        r = syscall(SYS_process_vm_readv, getppid(), &l, 1, &rm, 1, 0);\n"
    "        break;\n"
    "    }\n"
    "    case 13: { struct rlimit rl = {1, 1};\n"
    "               r = syscall(SYS_prlimit64, getppid(), RLIMIT_NOFILE, &rl, 0); break; }\n"
    "    case 14: r = setpriority(PRIO_PROCESS, (id_t)getppid(), 19); break;\n"
    "    case 15: r = munmap((void *)((unsigned long)x & ~(unsigned long)(page - 1)), page); "
    "break;\n"
    "    case 16: r = mkdir(\"/tmp/kiln-sandbox-escape\", 0700); break;\n"
    "    case 17: { unsigned long mask = 1;\n"
    "               r = syscall(SYS_sched_setaffinity, getppid(), sizeof mask, &mask); break; }\n"
    "    case 18: r = vfork(); if (r == 0) _exit(0); break;\n"
    "    case 19: r = socketpair(AF_UNIX, SOCK_STREAM, 0, (int[2]){0, 0}); break;\n"
    "    case 20: { void *p = malloc((size_t)64 << 30); r = p ? 0 : -1; free(p); break; }\n"
    /* what a candidate may do: its own signals, memory, time, the environment it was given */
    "    case 100: r = kill(getpid(), 0); break;\n"
    "    case 101: { char *p = malloc((size_t)256 << 20); r = p ? 0 : -1;\n"
    "               if (p) { p[0] = 1; p[((size_t)256 << 20) - 1] = 1; } free(p); break; }\n"
    "    case 102: r = getenv(\"KILN_TEST_SECRET\") != 0 || getenv(\"HOME\") != 0; break;\n"
    "    case 103: r = getpid(); break;\n"
    "    case 104: r = ++calls; break;\n"
    "    case 105: r = omp_get_max_threads(); break;\n"
    /* the heap: what the last call left in a block (a fresh call reads zeros); a freed block's
     * room is handed out again within a call */
    "    case 106: { volatile long *p = malloc(4096); r = p[100]; p[100] = 42; free((void *)p);\n"
    "               break; }\n"
    "    case 107: { char *p = malloc(64UL << 20); free(p);\n"
    "               char *q = malloc(64UL << 20); r = p == q; free(q); break; }\n"
    "    }\n"
    "    y[0] = r;\n"
    "    y[1] = errno;\n"
    "    y[2] = r < 0;\n"
    "}\n";

static kiln_backend *be;
static kiln_problem *probe;
static int64_t n_elems;
static kiln_devptr x_buf, y_buf;

static kiln_problem *load(const char *def, const char *wl) {
    kiln_problem *p = NULL;
    kiln_err err = {{0}};
    if (kiln_problem_parse(def, strlen(def), "definition.json", wl, strlen(wl), "workload.jsonl",
                           &p, &err))
        fail_msg("kiln_problem_parse: %s", err.msg);
    return p;
}

static int setup(void **state) {
    (void)state;
    kiln_err err = {{0}};
    kiln_backend_config cfg = {.sandbox = 1};
    if (kiln_backend_open_with("cpu", 0, &cfg, &be, &err)) {
        fprintf(stderr, "sandboxed cpu backend: %s\n", err.msg);
        return -1;
    }
    probe = load(probe_def, probe_wl);
    n_elems = probe->workloads[0].axis_values[0];
    if (be->ops->alloc(be, (size_t)n_elems * 4, KILN_ALLOC_CANDIDATE | KILN_ALLOC_READONLY, &x_buf,
                       &err) ||
        be->ops->alloc(be, (size_t)n_elems * 8, KILN_ALLOC_CANDIDATE, &y_buf, &err)) {
        fprintf(stderr, "alloc: %s\n", err.msg);
        return -1;
    }
    float *host = malloc((size_t)n_elems * 4);
    for (int64_t i = 0; i < n_elems; i++)
        host[i] = (float)i;
    int rc = be->ops->upload(be, x_buf, host, (size_t)n_elems * 4, &err);
    free(host);
    return rc ? -1 : 0;
}

static int teardown(void **state) {
    (void)state;
    be->ops->free(be, x_buf);
    be->ops->free(be, y_buf);
    kiln_backend_close(be);
    kiln_problem_free(probe);
    return 0;
}

static void assert_contains(const char *haystack, const char *needle) {
    if (!haystack || !strstr(haystack, needle))
        fail_msg("expected \"%s\" in \"%s\"", needle, haystack ? haystack : "(null)");
}

/* Compiles src for the probe problem; the status, with the module in *m and the log in *log. */
static int compile(const char *src, kiln_module **m, char **log, kiln_err *err) {
    kiln_abi abi;
    int rc = kiln_abi_parse(src, 0, &abi, err);
    if (rc)
        return rc;
    kiln_signature sig;
    kiln_abi_signature(probe, 0, 0, &sig);
    rc = be->ops->compile(be, src, &sig, &abi, m, log, err);
    kiln_abi_free(&abi);
    return rc;
}

static kiln_module *compile_ok(const char *src) {
    kiln_module *m = NULL;
    char *log = NULL;
    kiln_err err = {{0}};
    if (compile(src, &m, &log, &err))
        fail_msg("compile: %s\n%s", err.msg, log ? log : "");
    free(log);
    return m;
}

/* One call of entry "probe" with op; y's first three elements land in out (when not NULL). */
static int call(kiln_module *m, int32_t op, int64_t out[3], kiln_err *err) {
    kiln_launch_plan plan = {0};
    plan.n_launches = 1;
    snprintf(plan.launch[0].entry, sizeof plan.launch[0].entry, "probe");
    int64_t n = n_elems;
    void *params[] = {&x_buf, &op, &y_buf, &n};
    int rc = be->ops->launch(be, m, &plan, params, err);
    if (rc == KILN_OK && out)
        assert_int_equal(be->ops->download(be, out, y_buf, 3 * sizeof(int64_t), err), KILN_OK);
    return rc;
}

static int64_t call_ok(kiln_module *m, int32_t op, int64_t out[3]) {
    kiln_err err = {{0}};
    int64_t local[3];
    if (!out)
        out = local;
    if (call(m, op, out, &err))
        fail_msg("op %d: %s", op, err.msg);
    return out[0];
}

/* (a) The candidate computes its outputs from its read-only input; the gate sees them through its
 * own view, at another address than the candidate's; a timer measures the call. */
static void test_computes(void **state) {
    (void)state;
    kiln_module *m = compile_ok(hostile_src);
    kiln_err err = {{0}};
    assert_int_equal(be->ops->memset8(be, y_buf, 0xa5, (size_t)n_elems * 8, &err), KILN_OK);
    kiln_timer *t;
    assert_int_equal(be->ops->timer_create(be, &t, &err), KILN_OK);
    assert_int_equal(be->ops->timer_start(be, t, &err), KILN_OK);
    call_ok(m, 0, NULL);
    assert_int_equal(be->ops->timer_stop(be, t, &err), KILN_OK);
    double us = 0;
    assert_int_equal(be->ops->timer_elapsed_us(be, t, &us, &err), KILN_OK);
    assert_true(us > 0 && us < 5e6);
    be->ops->timer_destroy(be, t);

    const int64_t *y = be->ops->host_view(be, y_buf);
    assert_non_null(y);
    assert_true((uintptr_t)y != (uintptr_t)y_buf); /* the runner's address is not the gate's */
    for (int64_t i = 0; i < n_elems; i++)
        if (y[i] != 2 * i)
            fail_msg("y[%lld] = %lld, expected %lld", (long long)i, (long long)y[i],
                     (long long)(2 * i));
    /* the gate's view of a read-only input is writable, and the candidate sees what it wrote */
    float *x = be->ops->host_view(be, x_buf);
    x[5] = 100.0f;
    call_ok(m, 0, NULL);
    assert_int_equal(y[5], 200);
    x[5] = 5.0f;
    /* the candidate got as many OpenMP threads as the machine offers, made before the filter */
    assert_true(call_ok(m, 105, NULL) >= 1);
    /* and it is stopped between calls */
    long pid = (long)call_ok(m, 103, NULL);
    char path[64], stat[256] = "";
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(stat, sizeof stat, f));
    fclose(f);
    const char *state_char = strrchr(stat, ')');
    assert_non_null(state_char);
    assert_int_equal(state_char[2], 'T');
    be->ops->module_free(be, m);
}

/* What the gate passes must be a candidate buffer: its own memory is not in the runner. */
static void test_plain_memory_is_not_passed(void **state) {
    (void)state;
    kiln_module *m = compile_ok(hostile_src);
    kiln_err err = {{0}};
    kiln_devptr plain;
    assert_int_equal(be->ops->alloc(be, 64, 0, &plain, &err), KILN_OK);
    kiln_launch_plan plan = {0};
    plan.n_launches = 1;
    snprintf(plan.launch[0].entry, sizeof plan.launch[0].entry, "probe");
    int32_t op = 0;
    int64_t n = 4;
    void *params[] = {&plain, &op, &y_buf, &n};
    assert_int_equal(be->ops->launch(be, m, &plan, params, &err), KILN_ERR_INVALID);
    assert_contains(err.msg, "not a candidate buffer");
    /* plain memory lives in this process: the gate reads it directly */
    assert_true(be->ops->host_view(be, plain) == (void *)(uintptr_t)plain);
    be->ops->free(be, plain);
    /* the module is still fine */
    assert_true(call_ok(m, 100, NULL) == 0);
    be->ops->module_free(be, m);
}

/* A fault kills the candidate's process, never the gate; the module is dead afterwards. */
static void expect_death(const char *body, const char *why) {
    char src[2048];
    snprintf(src, sizeof src,
             "#include <unistd.h>\n"
             "// kiln: launch probe\n"
             "void probe(const float *x, int32_t op, int64_t *y, int64_t n) {\n%s\n}\n",
             body);
    kiln_module *m = compile_ok(src);
    kiln_err err = {{0}};
    assert_int_equal(call(m, 0, NULL, &err), KILN_ERR_LAUNCH);
    assert_contains(err.msg, why);
    assert_int_equal(call(m, 0, NULL, &err), KILN_ERR_LAUNCH);
    assert_contains(err.msg, "earlier call");
    be->ops->module_free(be, m);
}

/* (b) the input is read-only in the candidate's process */
static void test_write_input_faults(void **state) {
    (void)state;
    expect_death("    (void)op; (void)y; (void)n; ((volatile float *)x)[1] = 1.0f;",
                 "the candidate's process died of SIGSEGV");
}

/* (c) an output ends against a page nothing maps */
static void test_write_past_end_faults(void **state) {
    (void)state;
    expect_death("    (void)op; (void)x; for (int64_t i = 0; i <= n; i++) y[i] = i;",
                 "the candidate's process died of SIGSEGV");
    expect_death("    (void)op; (void)x; (void)y; (void)n; __builtin_trap();",
                 "the candidate's process died of SIGILL");
    expect_death("    (void)op; (void)x; (void)y; (void)n; _exit(7);",
                 "the candidate's process exited with status 7");
}

/* The OpenMP threads are the ones made before the filter: asking for more ends the process, and
 * libgomp's last words are in the log. */
static void test_thread_bomb(void **state) {
    (void)state;
    kiln_module *m = compile_ok("// kiln: launch probe\n"
                                "void probe(const float *x, int32_t op, int64_t *y, int64_t n) {\n"
                                "    (void)x; (void)op; (void)n;\n"
                                "    omp_set_dynamic(0);\n"
                                "    #pragma omp parallel num_threads(256)\n"
                                "    y[omp_get_thread_num()] = 1;\n"
                                "}\n");
    kiln_err err = {{0}};
    assert_int_equal(call(m, 0, NULL, &err), KILN_ERR_LAUNCH);
    assert_contains(err.msg, "the candidate's process exited with status 1");
    char tail[512];
    kiln_cpu_runner_log_tail(be, m, tail, sizeof tail);
    assert_contains(tail, "Thread creation failed");
    be->ops->module_free(be, m);
}

/* (d) Each escape is refused inside the candidate with EPERM (clone3 with ENOSYS, so that glibc
 * falls back to clone and gets EPERM), the runner lives on for the next call, and so does this
 * process — the one a kill(getppid()) would have hit. */
static void test_escapes_refused(void **state) {
    (void)state;
    kiln_module *m = compile_ok(hostile_src);
    static const struct {
        int op;
        const char *what;
    } escapes[] = {
        {1, "open a file"},
        {2, "fork"},
        {3, "exec"},
        {4, "kill the gate"},
        {5, "ptrace the gate"},
        {6, "open a socket"},
        {7, "arm a timer"},
        {8, "unprotect the guard page"},
        {9, "map over an input"},
        {10, "create a thread"},
        {11, "open a file from every OpenMP thread"},
        {12, "read the gate's memory"},
        {13, "lower the gate's limits"},
        {14, "lower the gate's priority"},
        {15, "unmap an input"},
        {16, "make a folder"},
        {17, "pin the gate to a cpu"},
        {18, "vfork"},
        {19, "make a socket pair"},
        {20, "allocate 64 GiB"},
    };
    setenv("KILN_TEST_SECRET", "s3cret", 1);
    for (size_t i = 0; i < sizeof escapes / sizeof escapes[0]; i++) {
        int64_t y[3];
        call_ok(m, escapes[i].op, y);
        if (y[2] != 1)
            fail_msg("%s: the candidate's call returned %lld (errno %lld)", escapes[i].what,
                     (long long)y[0], (long long)y[1]);
        /* malloc reports its own ENOMEM; everything else is the filter's EPERM */
        int want = escapes[i].op == 20 ? ENOMEM : EPERM;
        if (y[1] != want)
            fail_msg("%s: refused with errno %lld, expected %d", escapes[i].what, (long long)y[1],
                     want);
        assert_int_equal(kill(getpid(), 0), 0);
    }
    /* the filter is not "refuse everything": its own signals, memory within its limit */
    assert_int_equal(call_ok(m, 100, NULL), 0);
    assert_int_equal(call_ok(m, 101, NULL), 0);
    /* the gate's environment is not the candidate's */
    assert_int_equal(call_ok(m, 102, NULL), 0);
    unsetenv("KILN_TEST_SECRET");
    /* no folder appeared */
    assert_int_equal(access("/tmp/kiln-sandbox-escape", F_OK), -1);
    /* and the module still computes */
    call_ok(m, 0, NULL);
    int64_t y5;
    assert_int_equal(be->ops->download(be, &y5, y_buf + 5 * 8, 8, NULL), KILN_OK);
    assert_int_equal(y5, 10);
    be->ops->module_free(be, m);
}

/* $KILN_SANDBOX_EXTRA_MB bounds what a candidate may allocate beyond its buffers. */
static void test_memory_limit(void **state) {
    (void)state;
    kiln_backend *saved = be, *small = NULL;
    kiln_devptr saved_x = x_buf, saved_y = y_buf;
    kiln_backend_config cfg = {.sandbox = 1};
    kiln_err err = {{0}};
    setenv("KILN_SANDBOX_EXTRA_MB", "64", 1);
    int rc = kiln_backend_open_with("cpu", 0, &cfg, &small, &err);
    unsetenv("KILN_SANDBOX_EXTRA_MB");
    assert_int_equal(rc, KILN_OK);
    be = small;
    assert_int_equal(be->ops->alloc(be, (size_t)n_elems * 4, KILN_ALLOC_CANDIDATE, &x_buf, &err),
                     KILN_OK);
    assert_int_equal(be->ops->alloc(be, (size_t)n_elems * 8, KILN_ALLOC_CANDIDATE, &y_buf, &err),
                     KILN_OK);
    kiln_module *m = compile_ok(hostile_src);
    int64_t y[3];
    call_ok(m, 101, y); /* 256 MiB */
    assert_int_equal(y[2], 1);
    assert_int_equal(y[1], ENOMEM);
    be->ops->module_free(be, m);
    kiln_backend_close(small);
    be = saved;
    x_buf = saved_x;
    y_buf = saved_y;
}

/* (e) a call that never returns is cut off at the limit, and the process with it */
static void test_infinite_loop_times_out(void **state) {
    (void)state;
    kiln_module *m = compile_ok("// kiln: launch probe\n"
                                "void probe(const float *x, int32_t op, int64_t *y, int64_t n) {\n"
                                "    (void)x; (void)op; (void)n;\n"
                                "    for (volatile int64_t i = 0;; i++) y[0] = i;\n"
                                "}\n");
    kiln_err err = {{0}};
    be->ops->set_call_limit(be, 0.5);
    double t0 = kiln_now_s();
    assert_int_equal(call(m, 0, NULL, &err), KILN_ERR_TIMEOUT);
    double took = kiln_now_s() - t0;
    be->ops->set_call_limit(be, 0);
    assert_contains(err.msg, "ran past its limit of 0.5 s");
    if (took < 0.5 || took > 1.5)
        fail_msg("the call was cut off after %.3f s, for a limit of 0.5 s", took);
    assert_int_equal(call(m, 0, NULL, &err), KILN_ERR_LAUNCH);
    be->ops->module_free(be, m);
}

/* (f) the channel to the gate is the runner's, not the candidate's */
static void test_protocol_attacks(void **state) {
    (void)state;
    /* fake bytes on every descriptor it holds */
    expect_death("    (void)x; (void)op; (void)y; (void)n;\n"
                 "    for (int fd = 0; fd < 64; fd++) if (write(fd, \"outcome ok\\n\", 11)) {}",
                 "the candidate broke the runner's protocol");
    /* a log that grows without end stops at its limit */
    expect_death("    (void)x; (void)op; (void)y; (void)n;\n"
                 "    static char line[1 << 16];\n"
                 "    for (;;) if (write(1, line, sizeof line) < 0) {}",
                 "the candidate's process died of SIGXFSZ");
    /* every descriptor closed: the reply cannot be written */
    expect_death("    (void)x; (void)op; (void)y; (void)n;\n"
                 "    for (int fd = 0; fd < 1024; fd++) close(fd);",
                 "the candidate's process exited with status 4");
}

/* (g) nothing of the candidate's may run when it is loaded, before the filter */
static void test_load_time_code_refused(void **state) {
    (void)state;
    static const struct {
        const char *src, *why;
    } cases[] = {
        {"volatile int hit;\n__attribute__((constructor)) static void early(void) { hit = 1; }\n",
         "has a constructor"},
        {"void _init(void) {}\n", "defines _init"},
        {"volatile int hit;\n__attribute__((destructor)) static void late(void) { hit = 1; }\n",
         "has a destructor"},
        {"static void real(void) {}\n"
         "static void (*pick(void))(void) { return real; }\n"
         "void chosen(void) __attribute__((ifunc(\"pick\")));\n"
         "void use(void) { chosen(); }\n",
         "IFUNC"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char src[1024];
        snprintf(src, sizeof src,
                 "%s// kiln: launch probe\n"
                 "void probe(const float *x, int32_t op, int64_t *y, int64_t n) {\n"
                 "    (void)x; (void)op; (void)n; y[0] = 1;\n}\n",
                 cases[i].src);
        kiln_module *m = NULL;
        char *log = NULL;
        kiln_err err = {{0}};
        assert_int_equal(compile(src, &m, &log, &err), KILN_ERR_COMPILE);
        assert_null(m);
        assert_contains(err.msg, cases[i].why);
        assert_contains(err.msg, "no candidate code may run when it is");
        assert_contains(log, cases[i].why);
        free(log);
    }
    /* a missing entry point is still named, now by the runner's loader */
    kiln_module *m = NULL;
    char *log = NULL;
    kiln_err err = {{0}};
    assert_int_equal(compile("// kiln: launch probe\nvoid other(void) {}\n", &m, &log, &err),
                     KILN_ERR_COMPILE);
    assert_contains(err.msg, "entry point 'probe' is not defined");
    free(log);
}

/* With check_imports (the gate's backend), a candidate that calls a function of the C library's
 * state is refused before it is loaded, naming the function; what compute kernels call is not. */
static void test_imports_checked(void **state) {
    (void)state;
    kiln_backend *saved = be, *checked = NULL;
    kiln_backend_config cfg = {.sandbox = 1, .check_imports = 1};
    kiln_err err = {{0}};
    assert_int_equal(kiln_backend_open_with("cpu", 0, &cfg, &checked, &err), KILN_OK);
    be = checked;
    static const struct {
        const char *head, *body, *name;
    } refused[] = {
        {"#include <stdlib.h>\n", "y[0] = (int64_t)(intptr_t)valloc(16);", "'valloc'"},
        {"#include <stdlib.h>\n", "y[0] = getenv(\"HOME\") != 0;", "'getenv'"},
        {"#include <stdlib.h>\n", "y[0] = rand();", "'rand'"},
        {"#include <errno.h>\n", "y[0] = errno++;", "'__errno_location'"},
        {"#include <fenv.h>\n", "y[0] = fesetround(FE_TOWARDZERO);", "'fesetround'"},
        {"", "omp_set_num_threads(1); y[0] = 1;", "'omp_set_num_threads'"},
        {"#include <sys/mman.h>\n", "y[0] = (int64_t)(intptr_t)mmap(0, 4096, 3, 0x22, -1, 0);",
         "'mmap'"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        char src[1024];
        snprintf(src, sizeof src,
                 "%s// kiln: launch probe\n"
                 "void probe(const float *x, int32_t op, int64_t *y, int64_t n) {\n"
                 "    (void)x; (void)op; (void)n; %s\n}\n",
                 refused[i].head, refused[i].body);
        kiln_module *m = NULL;
        char *log = NULL;
        assert_int_equal(compile(src, &m, &log, &err), KILN_ERR_COMPILE);
        assert_null(m);
        assert_contains(err.msg, refused[i].name);
        assert_contains(err.msg, "which it may not");
        free(log);
    }
    /* the math library, OpenMP, the runner's heap, memcpy and printing */
    kiln_module *m = compile_ok("#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n"
                                "// kiln: launch probe\n"
                                "void probe(const float *x, int32_t op, int64_t *y, int64_t n) {\n"
                                "    float *t = calloc(4, sizeof *t);\n"
                                "    memcpy(t, x, 4 * sizeof *t);\n"
                                "#pragma omp parallel\n"
                                "    if (omp_get_thread_num() == 0) y[0] = (int64_t)(expf(t[0]) +\n"
                                "        tanhf(t[1]) + erff(t[2]) + (float)op + (float)n);\n"
                                "    printf(\"%lld\\n\", (long long)y[0]);\n"
                                "    free(t);\n"
                                "}\n");
    be->ops->module_free(be, m);
    kiln_backend_close(checked);
    be = saved;
}

/* (h) what the candidate prints goes to its log, never to the gate's stdout */
static void test_output_goes_to_the_log(void **state) {
    (void)state;
    kiln_module *m = compile_ok("#include <stdio.h>\n"
                                "// kiln: launch probe\n"
                                "void probe(const float *x, int32_t op, int64_t *y, int64_t n) {\n"
                                "    (void)x; (void)op; (void)n;\n"
                                "    printf(\"{\\\"outcome\\\": \\\"ok\\\"} \\x01marker\\n\");\n"
                                "    fprintf(stderr, \"to stderr\\n\");\n"
                                "    y[0] = 1;\n"
                                "}\n");
    char path[] = "/tmp/kiln-test-stdout-XXXXXX";
    int capture = mkstemp(path);
    assert_true(capture >= 0);
    fflush(stdout);
    int saved = dup(1);
    dup2(capture, 1);
    int64_t y[3];
    call_ok(m, 0, y);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    struct stat st;
    assert_int_equal(fstat(capture, &st), 0);
    assert_int_equal(st.st_size, 0);
    close(capture);
    unlink(path);
    char tail[256];
    size_t n = kiln_cpu_runner_log_tail(be, m, tail, sizeof tail);
    assert_true(n > 0);
    assert_contains(tail, "{\"outcome\": \"ok\"} ?marker\n"); /* control bytes shown as '?' */
    assert_contains(tail, "to stderr\n");
    /* a short buffer holds the end */
    char small[8];
    assert_int_equal(kiln_cpu_runner_log_tail(be, m, small, sizeof small), 7);
    assert_string_equal(small, "stderr\n");
    be->ops->module_free(be, m);
}

/* The candidate's static data is put back as loaded before every call: a count of calls kept there
 * is 1 on every call, in the same runner. */
static void test_statics_start_over_every_call(void **state) {
    (void)state;
    kiln_module *m = compile_ok(hostile_src);
    long pid = (long)call_ok(m, 103, NULL);
    for (int i = 0; i < 3; i++)
        assert_int_equal(call_ok(m, 104, NULL), 1);
    assert_int_equal((long)call_ok(m, 103, NULL), pid); /* one runner throughout */
    /* the heap too: each call reads zeros where the last one wrote (with glibc's heap the chunk
     * freed last comes back with its contents) */
    for (int i = 0; i < 3; i++)
        assert_int_equal(call_ok(m, 106, NULL), 0);
    assert_int_equal(call_ok(m, 107, NULL), 1); /* a malloc/free pair reuses its room */
    for (int i = 0; i < 40; i++) /* 64 MiB a call, more than the 2 GiB arena in all */
        assert_int_equal(call_ok(m, 107, NULL), 1);
    be->ops->module_free(be, m);
}

/* A buffer allocated after the runner started is in no runner yet: the next call starts a fresh
 * one (another process), the data stays, and the timer leaves the start out. */
static void test_new_buffers_restart_the_runner(void **state) {
    (void)state;
    kiln_module *m = compile_ok(hostile_src);
    assert_int_equal(call_ok(m, 104, NULL), 1);
    long first = (long)call_ok(m, 103, NULL);
    kiln_err err = {{0}};
    kiln_devptr extra;
    assert_int_equal(be->ops->alloc(be, 1 << 20, KILN_ALLOC_CANDIDATE, &extra, &err), KILN_OK);
    assert_int_equal(be->ops->memset8(be, extra, 7, 1 << 20, &err), KILN_OK);
    kiln_timer *t;
    assert_int_equal(be->ops->timer_create(be, &t, &err), KILN_OK);
    double t0 = kiln_now_s();
    assert_int_equal(be->ops->timer_start(be, t, &err), KILN_OK);
    assert_int_equal(call_ok(m, 104, NULL), 1);
    assert_int_equal(be->ops->timer_stop(be, t, &err), KILN_OK);
    double wall_us = (kiln_now_s() - t0) * 1e6, timed_us = 0;
    assert_int_equal(be->ops->timer_elapsed_us(be, t, &timed_us, &err), KILN_OK);
    be->ops->timer_destroy(be, t);
    assert_true(timed_us > 0 && timed_us < wall_us / 2);
    assert_true((long)call_ok(m, 103, NULL) != first);
    unsigned char back[4];
    assert_int_equal(be->ops->download(be, back, extra + 100, 4, &err), KILN_OK);
    assert_int_equal(back[3], 7);
    be->ops->free(be, extra);
    assert_int_equal(call_ok(m, 104, NULL), 1);
    be->ops->module_free(be, m);
}

/* The runner dies with the process that started it, even while stopped. */
static void test_runner_dies_with_the_gate(void **state) {
    (void)state;
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    fflush(NULL);
    pid_t gate = fork();
    assert_true(gate >= 0);
    if (gate == 0) {
        kiln_backend *own = NULL;
        kiln_backend_config cfg = {.sandbox = 1};
        be = NULL;
        if (kiln_backend_open_with("cpu", 0, &cfg, &own, NULL))
            _exit(2);
        be = own;
        if (be->ops->alloc(be, (size_t)n_elems * 4, KILN_ALLOC_CANDIDATE, &x_buf, NULL) ||
            be->ops->alloc(be, (size_t)n_elems * 8, KILN_ALLOC_CANDIDATE, &y_buf, NULL))
            _exit(3);
        kiln_module *m = NULL;
        if (compile(hostile_src, &m, NULL, NULL))
            _exit(4);
        int64_t y[3];
        if (call(m, 103, y, NULL))
            _exit(5);
        long pid = (long)y[0];
        if (write(pipefd[1], &pid, sizeof pid) != sizeof pid)
            _exit(6);
        for (;;)
            pause();
    }
    close(pipefd[1]);
    long runner = 0;
    assert_int_equal(read(pipefd[0], &runner, sizeof runner), sizeof runner);
    close(pipefd[0]);
    assert_true(runner > 0);
    assert_int_equal(kill((pid_t)runner, 0), 0);
    kill(gate, SIGKILL);
    int status;
    assert_int_equal(waitpid(gate, &status, 0), gate);
    /* gone, or a zombie waiting for init to reap it: in either case not running */
    double deadline = kiln_now_s() + 5;
    for (;;) {
        char path[64], stat[256] = "";
        snprintf(path, sizeof path, "/proc/%ld/stat", runner);
        FILE *f = fopen(path, "r");
        if (!f)
            break;
        int ok = fgets(stat, sizeof stat, f) != NULL;
        fclose(f);
        const char *s = strrchr(stat, ')');
        if (ok && s && (s[2] == 'Z' || s[2] == 'X'))
            break;
        if (kiln_now_s() > deadline)
            fail_msg("the runner %ld outlived its gate: %s", runner, stat);
        usleep(10000);
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* What the sandbox costs: the round trip of a call to an empty kernel (send, SIGCONT, reply,
 * SIGSTOP and its confirmation; a timer leaves out the stop), and a runner's start (exec, mapping,
 * dlopen, threads, filter). */
static void test_overhead(void **state) {
    (void)state;
    kiln_module *m = compile_ok("// kiln: launch probe\n"
                                "void probe(const float *x, int32_t op, int64_t *y, int64_t n) {\n"
                                "    (void)x; (void)op; (void)y; (void)n;\n"
                                "}\n");
    enum { N_CALLS = 2000, N_STARTS = 20 };
    static double call_us[N_CALLS], timed_us[N_CALLS], start_us[N_STARTS];
    for (int i = 0; i < 20; i++)
        call_ok(m, 0, NULL);
    kiln_err err = {{0}};
    kiln_timer *t;
    assert_int_equal(be->ops->timer_create(be, &t, &err), KILN_OK);
    for (int i = 0; i < N_CALLS; i++) {
        double t0 = kiln_now_s();
        assert_int_equal(be->ops->timer_start(be, t, &err), KILN_OK);
        if (call(m, 0, NULL, &err))
            fail_msg("call %d: %s", i, err.msg);
        assert_int_equal(be->ops->timer_stop(be, t, &err), KILN_OK);
        call_us[i] = (kiln_now_s() - t0) * 1e6;
        assert_int_equal(be->ops->timer_elapsed_us(be, t, &timed_us[i], &err), KILN_OK);
    }
    be->ops->timer_destroy(be, t);
    for (int i = 0; i < N_STARTS; i++) {
        kiln_devptr p;
        assert_int_equal(be->ops->alloc(be, 64, KILN_ALLOC_CANDIDATE, &p, &err), KILN_OK);
        double t0 = kiln_now_s();
        call_ok(m, 0, NULL);
        start_us[i] = (kiln_now_s() - t0) * 1e6;
        be->ops->free(be, p);
    }
    qsort(call_us, N_CALLS, sizeof call_us[0], cmp_double);
    qsort(timed_us, N_CALLS, sizeof timed_us[0], cmp_double);
    qsort(start_us, N_STARTS, sizeof start_us[0], cmp_double);
    double call_med = call_us[N_CALLS / 2];
    printf("    sandbox call, empty kernel: launch() median %.1f us (p10 %.1f, p90 %.1f); "
           "its timer says %.1f us (p10 %.1f, p90 %.1f)\n",
           call_med, call_us[N_CALLS / 10], call_us[N_CALLS * 9 / 10], timed_us[N_CALLS / 2],
           timed_us[N_CALLS / 10], timed_us[N_CALLS * 9 / 10]);
    printf("    runner start + first call: median %.2f ms, min %.2f, max %.2f\n",
           start_us[N_STARTS / 2] / 1e3, start_us[0] / 1e3, start_us[N_STARTS - 1] / 1e3);
    /* loose bounds, for a shared 2-core machine: they catch a sandbox gone pathological */
    assert_true(call_med < 2000);
    assert_true(start_us[N_STARTS / 2] < 500e3);
    be->ops->module_free(be, m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_computes),
        cmocka_unit_test(test_plain_memory_is_not_passed),
        cmocka_unit_test(test_write_input_faults),
        cmocka_unit_test(test_write_past_end_faults),
        cmocka_unit_test(test_escapes_refused),
        cmocka_unit_test(test_thread_bomb),
        cmocka_unit_test(test_memory_limit),
        cmocka_unit_test(test_infinite_loop_times_out),
        cmocka_unit_test(test_protocol_attacks),
        cmocka_unit_test(test_load_time_code_refused),
        cmocka_unit_test(test_imports_checked),
        cmocka_unit_test(test_output_goes_to_the_log),
        cmocka_unit_test(test_statics_start_over_every_call),
        cmocka_unit_test(test_new_buffers_restart_the_runner),
        cmocka_unit_test(test_runner_dies_with_the_gate),
        cmocka_unit_test(test_overhead),
    };
    return cmocka_run_group_tests_name("sandbox", tests, setup, teardown);
}
