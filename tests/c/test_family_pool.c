/* test_family_pool.c: the pool family without a GPU: what the matcher accepts and declines (with a
 * reason), the constraints' reasons, launch directives that plan for every workload, and that the
 * points check() accepts compile for sm_90 with NVRTC (all of them, or an even sample of at most
 * POOL_TEST_MAX_COMPILES per problem, so that the test stays well under a minute). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "backend/nvrtc.h"
#include "gen/family.h"

#define POOL_TEST_MAX_COMPILES 40

static const kiln_family *pool;

/* Parses a problem from memory. */
static kiln_problem *problem(const char *name, const char *def, const char *wl) {
    kiln_err err;
    kiln_problem *p = NULL;
    if (kiln_problem_parse(def, strlen(def), name, wl, strlen(wl), name, &p, &err) != KILN_OK)
        fail_msg("%s: %s", name, err.msg);
    return p;
}

static int try_match(const kiln_problem *p, kiln_match *m, char *why, size_t n) {
    memset(m, 0, sizeof *m);
    for (int k = 0; k < 8; k++)
        m->input_of_role[k] = -1;
    for (int k = 0; k < 4; k++)
        m->output_of_role[k] = -1;
    why[0] = 0;
    return pool->match(p, m, why, n);
}

/* A definition with one input "self" and one output "out0". */
static char *def_json(const char *axes, const char *x_shape, const char *x_dtype,
                      const char *y_shape, const char *y_dtype, const char *kiln) {
    return xasprintf("{\"name\": \"t\", \"op_type\": \"adaptive_avg_pool2d\", \"axes\": {%s},\n"
                     " \"inputs\": {\"self\": {\"shape\": [%s], \"dtype\": \"%s\"}},\n"
                     " \"outputs\": {\"out0\": {\"shape\": [%s], \"dtype\": \"%s\"}},\n"
                     " \"reference\": \"def run(self):\\n    return self\\n\"%s%s}\n",
                     axes, x_shape, x_dtype, y_shape, y_dtype, kiln ? ", \"kiln\": " : "",
                     kiln ? kiln : "");
}

#define VAR4                                                                                       \
    "\"N\": {\"type\": \"var\"}, \"C\": {\"type\": \"var\"}, \"H\": {\"type\": \"var\"}, "         \
    "\"W\": {\"type\": \"var\"}"
#define NCHW "\"N\", \"C\", \"H\", \"W\""
#define NHWC "\"N\", \"H\", \"W\", \"C\""
#define ADAPT1                                                                                     \
    "{\"kind\": \"aten\", \"aten\": \"aten::adaptive_avg_pool2d.default\", "                       \
    "\"args\": {\"args\": [{\"tensor\": 0}, [1, 1]], \"kwargs\": {}}}"
#define CL_LAYOUT                                                                                  \
    "\"layouts\": {\"self\": {\"stored\": \"memory_order\", \"permute\": [0, 2, 3, 1]}}"
#define MEAN_CL                                                                                    \
    "{\"kind\": \"aten\", \"aten\": \"aten::mean.dim\", \"args\": {\"args\": "                     \
    "[{\"tensor\": 0}, [-1, -2], true], \"kwargs\": {}}, " CL_LAYOUT "}"

/* NCHW rows of 1, 7, 49 and 4097 values. */
static const char wl_nchw[] =
    "{\"uuid\": \"a\", \"axes\": {\"N\": 2, \"C\": 24, \"H\": 7, \"W\": 7}, \"inputs\": {\"self\": "
    "{\"type\": \"random\"}}}\n"
    "{\"uuid\": \"b\", \"axes\": {\"N\": 1, \"C\": 5, \"H\": 1, \"W\": 1}, \"inputs\": {\"self\": "
    "{\"type\": \"random\"}}}\n"
    "{\"uuid\": \"c\", \"axes\": {\"N\": 3, \"C\": 7, \"H\": 1, \"W\": 7}, \"inputs\": {\"self\": "
    "{\"type\": \"random\"}}}\n"
    "{\"uuid\": \"d\", \"axes\": {\"N\": 1, \"C\": 3, \"H\": 17, \"W\": 241}, \"inputs\": "
    "{\"self\": {\"type\": \"random\"}}}\n";
static const char wl_nhwc[] =
    "{\"uuid\": \"a\", \"axes\": {\"N\": 2, \"H\": 7, \"W\": 7, \"C\": 64}, \"inputs\": {\"self\": "
    "{\"type\": \"random\"}}}\n"
    "{\"uuid\": \"b\", \"axes\": {\"N\": 3, \"H\": 1, \"W\": 1, \"C\": 8}, \"inputs\": {\"self\": "
    "{\"type\": \"random\"}}}\n";
static const char wl_nhwc_odd[] =
    "{\"uuid\": \"a\", \"axes\": {\"N\": 2, \"H\": 9, \"W\": 5, \"C\": 7}, \"inputs\": {\"self\": "
    "{\"type\": \"random\"}}}\n";
static const char wl_resnet[] =
    "{\"uuid\": \"a\", \"axes\": {\"N\": 64, \"C\": 2048, \"H\": 7, \"W\": 7}, \"inputs\": "
    "{\"self\": {\"type\": \"random\"}}}\n";

typedef struct {
    const char *name, *variant;
    kiln_problem *p;
} case_t;

static case_t cases[8];
static int n_cases;

static void add_case(const char *name, const char *variant, char *def, const char *wl) {
    cases[n_cases].name = name;
    cases[n_cases].variant = variant;
    cases[n_cases].p = problem(name, def, wl);
    n_cases++;
    free(def);
}

static int setup(void **state) {
    (void)state;
    pool = kiln_family_find("pool");
    if (!pool)
        return -1;
    add_case("nchw_f32", "global_nchw",
             def_json(VAR4, NCHW, "float32", "\"N\", \"C\", \"1\", \"1\"", "float32", ADAPT1),
             wl_nchw);
    add_case("nchw_bf16_resnet", "global_nchw",
             def_json(VAR4, NCHW, "bfloat16", "\"N\", \"C\", \"1\", \"1\"", "bfloat16", ADAPT1),
             wl_resnet);
    add_case("cl_bf16", "global_channels_last",
             def_json(VAR4, NHWC, "bfloat16", "\"N\", \"C\", \"1\", \"1\"", "bfloat16", MEAN_CL),
             wl_nhwc);
    add_case(
        "cl_f16_odd", "global_channels_last",
        def_json(
            VAR4, NHWC, "float16", "\"N\", \"C\"", "float32",
            "{\"kind\": \"aten\", \"aten\": \"aten::mean.dim\", \"args\": {\"args\": "
            "[{\"tensor\": 0}, [2, 3]], \"kwargs\": {\"dtype\": \"torch.float32\"}}, " CL_LAYOUT
            "}"),
        wl_nhwc_odd);
    add_case("adaptive_nchw", "adaptive_nchw",
             def_json(VAR4, NCHW, "float32", "\"N\", \"C\", \"3\", \"4\"", "float32",
                      "{\"kind\": \"aten\", \"aten\": \"aten::_adaptive_avg_pool2d.default\", "
                      "\"args\": {\"args\": [{\"tensor\": 0}, [3, 4]], \"kwargs\": {}}}"),
             wl_nchw);
    add_case("adaptive_cl", "adaptive_channels_last",
             def_json(VAR4, NHWC, "bfloat16", "\"N\", \"2\", \"3\", \"C\"", "bfloat16",
                      "{\"kind\": \"aten\", \"aten\": \"aten::adaptive_avg_pool2d.default\", "
                      "\"args\": {\"args\": [{\"tensor\": 0}, [2, 3]], \"kwargs\": {}}, "
                      "\"layouts\": {\"self\": {\"permute\": [0, 2, 3, 1]}, \"out0\": "
                      "{\"permute\": [0, 2, 3, 1]}}}"),
             wl_nhwc);
    add_case("op_type_only", "global_nchw",
             def_json(VAR4, NCHW, "float16", "\"N\", \"C\"", "float16", NULL), wl_nchw);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    for (int i = 0; i < n_cases; i++)
        kiln_problem_free(cases[i].p);
    return 0;
}

static void test_match_variants(void **state) {
    (void)state;
    for (int i = 0; i < n_cases; i++) {
        kiln_match m;
        char why[256];
        if (!try_match(cases[i].p, &m, why, sizeof why))
            fail_msg("%s declined: %s", cases[i].name, why);
        assert_string_equal(m.variant, cases[i].variant);
        assert_true(m.how[0] != 0);
    }
}

static void expect_decline(const char *name, char *def, const char *wl, const char *reason) {
    kiln_problem *p = problem(name, def, wl);
    free(def);
    kiln_match m;
    char why[256];
    int ok = try_match(p, &m, why, sizeof why);
    if (ok)
        fail_msg("%s: matched, expected a decline with '%s'", name, reason);
    if (!strstr(why, reason))
        fail_msg("%s: reason '%s' does not mention '%s'", name, why, reason);
    kiln_problem_free(p);
}

static void test_declines(void **state) {
    (void)state;
    const char *y11 = "\"N\", \"C\", \"1\", \"1\"";
    expect_decline("softmax",
                   def_json(VAR4, NCHW, "float32", NCHW, "float32",
                            "{\"kind\": \"aten\", \"aten\": \"aten::_softmax.default\", \"args\": "
                            "{\"args\": [{\"tensor\": 0}, -1, false], \"kwargs\": {}}}"),
                   wl_nchw, "not average pooling");
    expect_decline("mean_lastdim",
                   def_json(VAR4, NCHW, "float32", "\"N\", \"C\", \"H\", \"1\"", "float32",
                            "{\"kind\": \"aten\", \"aten\": \"aten::mean.dim\", \"args\": "
                            "{\"args\": [{\"tensor\": 0}, [-1], true], \"kwargs\": {}}}"),
                   wl_nchw, "not the two spatial");
    expect_decline("mean_n_h",
                   def_json(VAR4, NCHW, "float32", "\"1\", \"C\", \"1\", \"W\"", "float32",
                            "{\"kind\": \"aten\", \"aten\": \"aten::mean.dim\", \"args\": "
                            "{\"args\": [{\"tensor\": 0}, [0, 2], true], \"kwargs\": {}}}"),
                   wl_nchw, "innermost");
    expect_decline("int_dtype", def_json(VAR4, NCHW, "int32", y11, "int32", ADAPT1), wl_nchw,
                   "dtype");
    expect_decline("f64", def_json(VAR4, NCHW, "float64", y11, "float64", ADAPT1), wl_nchw,
                   "dtype");
    expect_decline("expanded",
                   def_json(VAR4, NCHW, "float32", y11, "float32",
                            "{\"kind\": \"aten\", \"aten\": \"aten::adaptive_avg_pool2d.default\", "
                            "\"args\": {\"args\": [{\"tensor\": 0}, [1, 1]], \"kwargs\": {}}, "
                            "\"layouts\": {\"self\": {\"expand\": [2, 3, 4, 4]}}}"),
                   wl_nchw, "broadcast");
    expect_decline("odd_permute",
                   def_json(VAR4, NCHW, "float32", y11, "float32",
                            "{\"kind\": \"aten\", \"aten\": \"aten::adaptive_avg_pool2d.default\", "
                            "\"args\": {\"args\": [{\"tensor\": 0}, [1, 1]], \"kwargs\": {}}, "
                            "\"layouts\": {\"self\": {\"permute\": [2, 0, 1, 3]}}}"),
                   wl_nchw, "innermost");
    expect_decline("wrong_count",
                   def_json(VAR4, NCHW, "float32", "\"N\", \"1\"", "float32", ADAPT1), wl_nchw,
                   "values");
    expect_decline("chain",
                   def_json(VAR4, NCHW, "float32", y11, "float32", "{\"kind\": \"chain\"}"),
                   wl_nchw, "chain");
    expect_decline("module_two_ops",
                   def_json(VAR4, NCHW, "float32", y11, "float32",
                            "{\"kind\": \"module\", \"module_class\": \"Head\", \"ops\": "
                            "[{\"aten\": \"aten::mean.dim\", \"args\": [{\"ref\": \"self\"}, "
                            "[-1, -2], true], \"out\": \"m\"}, {\"aten\": "
                            "\"aten::relu.default\", \"args\": [{\"ref\": \"m\"}], \"out\": "
                            "\"out0\"}]}"),
                   wl_nchw, "module Head is not a single pooling op");
    kiln_problem *p =
        problem("no_kiln_other", def_json(VAR4, NCHW, "float32", y11, "float32", NULL), wl_nchw);
    free(p->op_type);
    p->op_type = xstrdup("softmax");
    kiln_match m;
    char why[256];
    assert_false(try_match(p, &m, why, sizeof why));
    assert_non_null(strstr(why, "op_type"));
    kiln_problem_free(p);
}

/* The point with these values, placed by parameter name (the table's order is the family's). */
static void point_of(int64_t *pt, int64_t threads, int64_t group, int64_t vbytes, int64_t unroll,
                     int64_t split, int64_t plan) {
    const char *names[] = {"POOL_THREADS", "POOL_GROUP", "POOL_VBYTES",
                           "POOL_UNROLL",  "POOL_SPLIT", "POOL_PLAN"};
    const int64_t v[] = {threads, group, vbytes, unroll, split, plan};
    assert_int_equal(pool->n_params, 6);
    for (int k = 0; k < 6; k++) {
        int i = 0;
        while (i < pool->n_params && strcmp(pool->params[i].name, names[k]))
            i++;
        assert_true(i < pool->n_params);
        pt[i] = v[k];
    }
}

/* The index of a parameter in the table. */
static int param_index(const char *name) {
    for (int i = 0; i < pool->n_params; i++)
        if (!strcmp(pool->params[i].name, name))
            return i;
    fail_msg("no parameter %s", name);
    return -1;
}

static void expect_reason(const case_t *c, const int64_t *pt, const char *reason) {
    kiln_match m;
    char why[256];
    assert_true(try_match(c->p, &m, why, sizeof why));
    const char *bad = pool->check(c->p, &m, pt);
    if (!bad)
        fail_msg("%s: point accepted, expected '%s'", c->name, reason);
    const char *text = bad[0] == '!' ? bad + 1 : bad;
    if (!strstr(text, reason))
        fail_msg("%s: reason '%s' does not mention '%s'", c->name, text, reason);
    if (bad[0] == '!')
        free((void *)bad);
}

static void test_check_reasons(void **state) {
    (void)state;
    int64_t pt[KILN_FAMILY_MAX_PARAMS];
    const case_t *nchw = &cases[0], *cl = &cases[2], *odd = &cases[3], *adapt = &cases[4];
    point_of(pt, 256, 1, 2, 1, 1, 0);
    expect_reason(nchw, pt, "less than one input element"); /* 2 bytes of a float */
    point_of(pt, 256, 0, 16, 1, 1, 1); /* rows of 4097 values: plan 1 is the tile */
    expect_reason(nchw, pt, "GROUP");
    point_of(pt, 1024, 1, 16, 1, 1, 1);
    expect_reason(nchw, pt, "shared memory"); /* 1024 rows of 4097 floats */
    point_of(pt, 256, 4, 16, 4, 1, 1);
    expect_reason(cl, pt, "no alternative plan");
    point_of(pt, 256, 4, 16, 4, 1, 0);
    expect_reason(odd, pt, "must divide the channel count"); /* 8 halves, 7 channels */
    point_of(pt, 256, 4, 16, 2, 1, 2);
    expect_reason(cl, pt, "do not apply");
    point_of(pt, 256, 4, 16, 4, 1, 1);
    expect_reason(adapt, pt, "one plan");
    point_of(pt, 64, 8, 16, 1, 8, 0);
    expect_reason(cl, pt, "SPLIT");
    /* and the good ones pass */
    kiln_match m;
    char why[256];
    assert_true(try_match(nchw->p, &m, why, sizeof why));
    point_of(pt, 64, 32, 16, 2, 1, 1);
    assert_null(pool->check(nchw->p, &m, pt));
    point_of(pt, 256, 8, 16, 2, 4, 0);
    assert_null(pool->check(nchw->p, &m, pt));
    assert_true(try_match(cl->p, &m, why, sizeof why));
    point_of(pt, 64, 8, 16, 2, 1, 0);
    assert_null(pool->check(cl->p, &m, pt));
    assert_true(try_match(adapt->p, &m, why, sizeof why));
    point_of(pt, 256, 4, 16, 4, 1, 0);
    assert_null(pool->check(adapt->p, &m, pt));
}

/* Every valid point (or an even sample) emits a source whose launches plan on every workload and
 * which NVRTC compiles for sm_90; the CPU emission has the entry point with the problem's ABI. */
static void test_compile_all(void **state) {
    (void)state;
    if (!kiln_cuda_have_nvrtc()) {
        printf("SKIP: NVRTC not found: no CUDA toolkit here\n");
        skip();
    }
    int64_t space = kiln_family_space_size(pool);
    int total_compiled = 0;
    for (int i = 0; i < n_cases; i++) {
        const case_t *c = &cases[i];
        kiln_match m;
        char why[256];
        assert_true(try_match(c->p, &m, why, sizeof why));
        int64_t *valid = xmalloc((size_t)space * sizeof *valid);
        int n_valid = 0;
        int64_t pt[KILN_FAMILY_MAX_PARAMS];
        for (int64_t k = 0; k < space; k++) {
            kiln_family_point(pool, k, pt);
            const char *bad = pool->check(c->p, &m, pt);
            if (!bad)
                valid[n_valid++] = k;
            else if (bad[0] == '!')
                free((void *)bad);
        }
        assert_true(n_valid > 0);
        int n_compile = n_valid < POOL_TEST_MAX_COMPILES ? n_valid : POOL_TEST_MAX_COMPILES;
        int plans_seen[3] = {0};
        for (int s = 0; s < n_compile; s++) {
            /* even spread, and always the first and the last valid point */
            int64_t k = valid[n_compile == 1 ? 0 : (int64_t)s * (n_valid - 1) / (n_compile - 1)];
            kiln_family_point(pool, k, pt);
            plans_seen[pt[param_index("POOL_PLAN")]] = 1;
            char *src = pool->emit(c->p, &m, pt, 1);
            kiln_abi abi;
            kiln_err err;
            if (kiln_abi_parse(src, 1, &abi, &err) != KILN_OK)
                fail_msg("%s point %lld: directives: %s", c->name, (long long)k, err.msg);
            for (int w = 0; w < c->p->n_workloads; w++) {
                kiln_launch_plan plan;
                if (kiln_abi_plan(&abi, c->p, &c->p->workloads[w], &plan, &err) != KILN_OK)
                    fail_msg("%s point %lld workload %d: %s", c->name, (long long)k, w, err.msg);
            }
            kiln_abi_free(&abi);
            char *cubin = NULL, *log = NULL;
            size_t len = 0;
            int rc = kiln_cuda_compile_only(src, "sm_90", &cubin, &len, &log, &err);
            if (rc != KILN_OK) {
                char *params = kiln_family_point_str(pool, pt);
                fail_msg("%s [%s]: %s\n%s", c->name, params, err.msg, log ? log : "");
            }
            assert_true(len > 0);
            free(cubin);
            free(log);
            free(src);
            total_compiled++;
        }
        char *cpu = pool->emit(c->p, &m, pt, 0);
        assert_non_null(strstr(cpu, "void pool_kernel("));
        assert_null(strstr(cpu, "__global__"));
        free(cpu);
        printf("    %-18s %-24s %5d valid of %lld, %2d compiled (plans %d%d%d)\n", c->name,
               m.variant, n_valid, (long long)space, n_compile, plans_seen[0], plans_seen[1],
               plans_seen[2]);
        free(valid);
    }
    assert_true(total_compiled > 0);
}

/* The GPU rows' geometry: the ResNet-50 NCHW fp32 tile point asks for the shared memory it uses. */
static void test_directives(void **state) {
    (void)state;
    const case_t *c = &cases[0];
    kiln_match m;
    char why[256];
    assert_true(try_match(c->p, &m, why, sizeof why));
    int64_t pt[KILN_FAMILY_MAX_PARAMS];
    point_of(pt, 128, 1, 16, 2, 1, 1);
    char *src = pool->emit(c->p, &m, pt, 1);
    kiln_abi abi;
    kiln_err err;
    assert_int_equal(kiln_abi_parse(src, 1, &abi, &err), KILN_OK);
    kiln_launch_plan plan;
    assert_int_equal(kiln_abi_plan(&abi, c->p, &c->p->workloads[0], &plan, &err), KILN_OK);
    /* N=2, C=24: 48 rows of 49 values, 128 rows per block */
    assert_int_equal(plan.launch[0].grid[0], 1);
    assert_int_equal(plan.launch[0].block[0], 128);
    assert_int_equal(plan.launch[0].smem_bytes, 128 * 49 * 4 + 16);
    kiln_abi_free(&abi);
    free(src);
    /* a cluster split declares its cluster */
    point_of(pt, 256, 8, 16, 2, 4, 0);
    src = pool->emit(c->p, &m, pt, 1);
    assert_int_equal(kiln_abi_parse(src, 1, &abi, &err), KILN_OK);
    assert_int_equal(kiln_abi_plan(&abi, c->p, &c->p->workloads[3], &plan, &err), KILN_OK);
    assert_int_equal(plan.launch[0].cluster[0], 4);
    assert_int_equal(plan.launch[0].grid[0] % 4, 0);
    kiln_abi_free(&abi);
    free(src);
}

/* The template compiles on its own (its demo entry point), for every algorithm, with and without
 * a cluster split. */
static void test_template_alone(void **state) {
    (void)state;
    if (!kiln_cuda_have_nvrtc()) {
        printf("SKIP: NVRTC not found: no CUDA toolkit here\n");
        skip();
    }
    const char *tpl = kiln_family_template("pool.cu");
    assert_non_null(tpl);
    assert_non_null(kiln_family_template("pool_cpu.c"));
    for (int algo = 0; algo < 4; algo++)
        for (int split = 1; split <= 2; split++) {
            char *src =
                xasprintf("#define POOL_ALGO %d\n#define POOL_SPLIT %d\n#define POOL_GROUP %d\n"
                          "%s",
                          algo, split, algo == 1 ? 0 : 4, tpl);
            char *cubin = NULL, *log = NULL;
            size_t len = 0;
            kiln_err err;
            if (kiln_cuda_compile_only(src, "sm_90", &cubin, &len, &log, &err) != KILN_OK)
                fail_msg("ALGO=%d SPLIT=%d: %s\n%s", algo, split, err.msg, log ? log : "");
            free(cubin);
            free(log);
            free(src);
        }
}

/* The GPU rows in bench/problems match, and the first point of the space (the expert default,
 * which every sample of the space includes) is valid for them and compiles. */
static void test_bench_rows(void **state) {
    (void)state;
    static const char *const rows[] = {"pool_global_nchw_f32", "pool_global_cl_bf16"};
    static const char *const variants[] = {"global_nchw", "global_channels_last"};
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/bench/problems/%s", KILN_SOURCE_DIR, rows[r]);
        kiln_problem *p = NULL;
        kiln_err err;
        if (kiln_problem_load(dir, &p, &err) != KILN_OK)
            fail_msg("%s: %s", rows[r], err.msg);
        kiln_match m;
        char why[256];
        if (!try_match(p, &m, why, sizeof why))
            fail_msg("%s declined: %s", rows[r], why);
        assert_string_equal(m.variant, variants[r]);
        int64_t pt[KILN_FAMILY_MAX_PARAMS];
        kiln_family_point(pool, 0, pt);
        const char *bad = pool->check(p, &m, pt);
        if (bad)
            fail_msg("%s: the first point is invalid: %s", rows[r], bad);
        char *src = pool->emit(p, &m, pt, 1);
        kiln_abi abi;
        kiln_launch_plan plan;
        assert_int_equal(kiln_abi_parse(src, 1, &abi, &err), KILN_OK);
        assert_int_equal(kiln_abi_plan(&abi, p, &p->workloads[0], &plan, &err), KILN_OK);
        printf("    %-22s first point: grid %u block %u smem %zu\n", rows[r],
               plan.launch[0].grid[0], plan.launch[0].block[0], plan.launch[0].smem_bytes);
        kiln_abi_free(&abi);
        if (kiln_cuda_have_nvrtc()) {
            char *cubin = NULL, *log = NULL;
            size_t len = 0;
            if (kiln_cuda_compile_only(src, "sm_90", &cubin, &len, &log, &err) != KILN_OK)
                fail_msg("%s: %s\n%s", rows[r], err.msg, log ? log : "");
            free(cubin);
            free(log);
        }
        free(src);
        kiln_problem_free(p);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_match_variants), cmocka_unit_test(test_declines),
        cmocka_unit_test(test_check_reasons),  cmocka_unit_test(test_directives),
        cmocka_unit_test(test_template_alone), cmocka_unit_test(test_bench_rows),
        cmocka_unit_test(test_compile_all),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
