/* test_abi.c: the candidate ABI: `// kiln:` directive parsing, plan evaluation over a workload's
 * axes, and the parameter list and prototypes a problem implies (docs/abi.md). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <cjson/cJSON.h>

#include "backend/abi.h"

/* x: bf16 [rows, cols], alpha: float scalar, n: int64 scalar -> y: bf16 [rows, cols]; total =
 * rows*cols. */
static const char definition[] =
    "{\"name\": \"scale\", \"op_type\": \"elementwise\",\n"
    " \"axes\": {\"rows\": {\"type\": \"var\"}, \"cols\": {\"type\": \"const\", \"value\": 256},\n"
    "          \"total\": {\"type\": \"expr\", \"expression\": \"rows * cols\"}},\n"
    " \"inputs\": {\"x\": {\"shape\": [\"rows\", \"cols\"], \"dtype\": \"bfloat16\"},\n"
    "            \"alpha\": {\"shape\": null, \"dtype\": \"float32\"},\n"
    "            \"n\": {\"shape\": null, \"dtype\": \"int64\"}},\n"
    " \"outputs\": {\"y\": {\"shape\": [\"rows\", \"cols\"], \"dtype\": \"bfloat16\"}},\n"
    " \"reference\": \"def run(x, alpha, n):\\n    return x * alpha\"}\n";
static const char workload[] =
    "{\"uuid\": \"w0\", \"axes\": {\"rows\": 1000}, \"inputs\": {\"x\": {\"type\": \"random\"}, "
    "\"alpha\": {\"type\": \"scalar\", \"value\": 0.5}, \"n\": {\"type\": \"scalar\", \"value\": "
    "3}}}\n";

/* Every other scalar kind, a float16 tensor and an 8-bit float tensor. */
static const char definition2[] =
    "{\"name\": \"mixed\", \"axes\": {\"n\": {\"type\": \"var\"}},\n"
    " \"inputs\": {\"h\": {\"shape\": [\"n\"], \"dtype\": \"float16\"},\n"
    "            \"q\": {\"shape\": [\"n\"], \"dtype\": \"float8_e4m3fn\"},\n"
    "            \"d\": {\"shape\": null, \"dtype\": \"float64\"},\n"
    "            \"i\": {\"shape\": null, \"dtype\": \"int32\"},\n"
    "            \"s\": {\"shape\": null, \"dtype\": \"int16\"},\n"
    "            \"b\": {\"shape\": null, \"dtype\": \"bool\"},\n"
    "            \"hs\": {\"shape\": null, \"dtype\": \"float16\"}},\n"
    " \"outputs\": {\"o\": {\"shape\": [\"n\"], \"dtype\": \"int64\"}},\n"
    " \"reference\": \"def run(h, q, d, i, s, b, hs):\\n    return h\"}\n";
static const char workload2[] =
    "{\"uuid\": \"w\", \"axes\": {\"n\": 8}, \"inputs\": {\"h\": {\"type\": \"random\"}, "
    "\"q\": {\"type\": \"random\"}, \"d\": {\"type\": \"scalar\", \"value\": 1}, "
    "\"i\": {\"type\": \"scalar\", \"value\": 1}, \"s\": {\"type\": \"scalar\", \"value\": 1}, "
    "\"b\": {\"type\": \"scalar\", \"value\": true}, \"hs\": {\"type\": \"scalar\", \"value\": "
    "1}}}\n";

static kiln_problem *load(const char *def, const char *wl) {
    kiln_problem *p = NULL;
    kiln_err err = {{0}};
    int rc = kiln_problem_parse(def, strlen(def), "definition.json", wl, strlen(wl),
                                "workload.jsonl", &p, &err);
    if (rc)
        fail_msg("kiln_problem_parse: %s", err.msg);
    return p;
}

/* Parses src expecting failure; returns the message. */
static const char *parse_error(const char *src, int require_launch) {
    static kiln_err err;
    kiln_abi abi;
    memset(&err, 0, sizeof err);
    int rc = kiln_abi_parse(src, require_launch, &abi, &err);
    assert_int_equal(rc, KILN_ERR_COMPILE);
    return err.msg;
}

static void assert_contains(const char *haystack, const char *needle) {
    if (!strstr(haystack, needle))
        fail_msg("expected \"%s\" in \"%s\"", needle, haystack);
}

static void test_parse_launches(void **state) {
    (void)state;
    const char *src = "#include <stdint.h>\n"
                      "// kiln: launch first grid=ceil_div(total, 256) block=256\n"
                      "   // kiln: launch second grid=(rows, 2) block=( 32 , 8 ) smem=4*cols "
                      "cluster=(2,1,1)\n"
                      "// kiln: scratch rows*4\n"
                      "// kiln is not a directive without its colon\n"
                      "int x; // kiln: launch not_at_line_start\n"
                      "// kiln: launch third grid=(rows+1)/2\n";
    kiln_abi abi;
    kiln_err err = {{0}};
    assert_int_equal(kiln_abi_parse(src, 1, &abi, &err), KILN_OK);
    assert_int_equal(abi.n_launches, 3);
    kiln_launch_spec *a = &abi.launch[0], *b = &abi.launch[1], *c = &abi.launch[2];
    assert_string_equal(a->entry, "first");
    assert_string_equal(a->grid[0], "ceil_div(total, 256)");
    assert_null(a->grid[1]);
    assert_string_equal(a->block[0], "256");
    assert_null(a->smem);
    assert_null(a->cluster[0]);
    assert_string_equal(b->entry, "second");
    assert_string_equal(b->grid[0], "rows");
    assert_string_equal(b->grid[1], "2");
    assert_null(b->grid[2]);
    assert_string_equal(b->block[0], "32");
    assert_string_equal(b->block[1], "8");
    assert_string_equal(b->smem, "4*cols");
    assert_string_equal(b->cluster[0], "2");
    assert_string_equal(b->cluster[2], "1");
    /* starts with '(' but is not a tuple */
    assert_string_equal(c->entry, "third");
    assert_string_equal(c->grid[0], "(rows+1)/2");
    assert_null(c->grid[1]);
    assert_null(c->block[0]);
    assert_string_equal(abi.scratch, "rows*4");
    kiln_abi_free(&abi);
    assert_int_equal(abi.n_launches, 0);
    assert_null(abi.scratch);
}

static void test_parse_default_launch(void **state) {
    (void)state;
    kiln_abi abi;
    kiln_err err = {{0}};
    const char *src = "void kiln_kernel(const float *x, float *y, int64_t n) {}\n";
    assert_int_equal(kiln_abi_parse(src, 0, &abi, &err), KILN_OK);
    assert_int_equal(abi.n_launches, 1);
    assert_string_equal(abi.launch[0].entry, "kiln_kernel");
    assert_null(abi.launch[0].grid[0]);
    assert_null(abi.scratch);
    kiln_abi_free(&abi);
    /* a CPU launch line with no keys at all */
    assert_int_equal(kiln_abi_parse("// kiln: launch softmax_rows\n", 0, &abi, &err), KILN_OK);
    assert_int_equal(abi.n_launches, 1);
    assert_string_equal(abi.launch[0].entry, "softmax_rows");
    kiln_abi_free(&abi);
    /* CUDA needs a launch line */
    assert_contains(parse_error(src, 1), "no '// kiln: launch' line");
    assert_contains(parse_error("", 1), "launch");
}

static void test_parse_errors(void **state) {
    (void)state;
    assert_contains(parse_error("a\nb\n// kiln: lunch k grid=1\n", 0),
                    "line 3: unknown directive 'lunch'");
    assert_contains(parse_error("\n// kiln: launch k grid=1 threads=256\n", 1),
                    "line 2: unknown launch key 'threads'");
    assert_contains(parse_error("// kiln: launch k grid=1 grid=2\n", 1),
                    "line 1: 'grid' given twice");
    assert_contains(parse_error("// kiln: launch k block=(1,2,3,4)\n", 1),
                    "line 1: 'block' has more than 3 elements");
    assert_contains(parse_error("// kiln: launch k smem=(1,2)\n", 1),
                    "line 1: 'smem' has more than 1");
    assert_contains(parse_error("// kiln: launch k block=(32,,1)\n", 1), "empty element");
    assert_contains(parse_error("// kiln: launch k grid=\n", 1), "'grid=' has no value");
    /* spaces are allowed only inside parentheses */
    assert_contains(parse_error("\n\n\n// kiln: launch k grid=n / 2\n", 1),
                    "line 4: expected key=value, got '/'");
    assert_contains(parse_error("// kiln: launch k block = 256\n", 1), "expected key=value");
    assert_contains(parse_error("// kiln: launch k grid=ceil_div(n,256\n", 1), "unbalanced '('");
    assert_contains(parse_error("// kiln: launch k grid=n)\n", 1), "unbalanced ')'");
    assert_contains(parse_error("// kiln: launch\n", 1), "needs an entry point name");
    assert_contains(parse_error("// kiln: launch 9lives grid=1\n", 1),
                    "'9lives' is not a valid entry point name");
    assert_contains(parse_error("// kiln: launch k\n// kiln: scratch 4\n// kiln: scratch 8\n", 1),
                    "line 3: 'scratch' given twice");
    assert_contains(parse_error("// kiln: scratch rows * 4\n// kiln: launch k\n", 1),
                    "line 1: 'scratch' takes one expression");
    assert_contains(parse_error("// kiln:\n", 0), "line 1: empty");
    char many[1024] = "";
    for (int i = 0; i < KILN_MAX_LAUNCHES + 1; i++)
        strcat(many, "// kiln: launch k grid=1\n");
    assert_contains(parse_error(many, 1), "line 9: more than 8 launch lines");
}

/* `// kiln: library NAME ARGS`: the rest of the line kept as written; it stands for the launches.
 */
static void test_parse_library(void **state) {
    (void)state;
    const char *src = "// banner\n// kiln: library cublaslt {\"config\": 3, \"args\": {}}  \n";
    kiln_abi abi;
    kiln_err err;
    assert_int_equal(kiln_abi_parse(src, 1, &abi, &err), KILN_OK);
    assert_string_equal(abi.library, "cublaslt");
    assert_string_equal(abi.library_args, "{\"config\": 3, \"args\": {}}");
    assert_int_equal(abi.n_launches, 0);
    assert_null(abi.scratch);
    assert_true(kiln_abi_is_library(src));
    assert_false(kiln_abi_is_library("// kiln: launch k grid=1\n// library cublaslt {}\n"));
    kiln_abi_free(&abi);
    assert_null(abi.library);
    assert_contains(parse_error("// kiln: library cublas {}\n", 1), "unknown library 'cublas'");
    assert_contains(parse_error("// kiln: library cublaslt {}\n// kiln: library cublaslt {}\n", 1),
                    "line 2: 'library' given twice");
    assert_contains(parse_error("// kiln: library cublaslt {}\n// kiln: launch k grid=1\n", 1),
                    "no launch, tensormap or scratch lines");
    assert_contains(parse_error("// kiln: scratch 8\n// kiln: library cublaslt {}\n", 0),
                    "no launch, tensormap or scratch lines");
}

static void test_plan(void **state) {
    (void)state;
    kiln_problem *p = load(definition, workload);
    const char *src = "// kiln: launch first grid=ceil_div(total, 256) block=256\n"
                      "// kiln: launch second grid=(rows, 2) block=(32, 8) smem=4*cols "
                      "cluster=(2,1,1)\n"
                      "// kiln: launch first grid=(rows+1)//3 block=max(64,min(cols,128))\n"
                      "// kiln: scratch rows*4\n";
    kiln_abi abi;
    kiln_err err = {{0}};
    assert_int_equal(kiln_abi_parse(src, 1, &abi, &err), KILN_OK);
    kiln_launch_plan plan;
    assert_int_equal(kiln_abi_plan(&abi, p, &p->workloads[0], &plan, &err), KILN_OK);
    assert_int_equal(plan.n_launches, 3);
    kiln_launch *a = &plan.launch[0], *b = &plan.launch[1], *c = &plan.launch[2];
    assert_string_equal(a->entry, "first");
    assert_int_equal(a->grid[0], 1000); /* ceil(256000 / 256) */
    assert_int_equal(a->grid[1], 1);
    assert_int_equal(a->grid[2], 1);
    assert_int_equal(a->block[0], 256);
    assert_int_equal(a->block[1], 1);
    assert_int_equal(a->smem_bytes, 0);
    assert_int_equal(a->cluster[0], 1);
    assert_int_equal(a->cluster[1], 1);
    assert_string_equal(b->entry, "second");
    assert_int_equal(b->grid[0], 1000);
    assert_int_equal(b->grid[1], 2);
    assert_int_equal(b->block[0], 32);
    assert_int_equal(b->block[1], 8);
    assert_int_equal(b->block[2], 1);
    assert_int_equal(b->smem_bytes, 1024);
    assert_int_equal(b->cluster[0], 2);
    assert_int_equal(c->grid[0], 333);
    assert_int_equal(c->block[0], 128);
    assert_int_equal(plan.scratch_bytes, 4000);
    kiln_abi_free(&abi);
    kiln_problem_free(p);
}

/* Plans src for the test problem; returns the status and leaves the message in *msg. */
static int plan_status(const char *src, const char **msg) {
    static kiln_err err;
    memset(&err, 0, sizeof err);
    kiln_problem *p = load(definition, workload);
    kiln_abi abi;
    int rc = kiln_abi_parse(src, 1, &abi, &err);
    assert_int_equal(rc, KILN_OK);
    kiln_launch_plan plan;
    rc = kiln_abi_plan(&abi, p, &p->workloads[0], &plan, &err);
    if (rc)
        assert_int_equal(plan.n_launches, 0);
    kiln_abi_free(&abi);
    kiln_problem_free(p);
    *msg = err.msg;
    return rc;
}

static void test_plan_limits(void **state) {
    (void)state;
    const char *msg;
    assert_int_equal(plan_status("// kiln: launch k grid=rows-rows block=1\n", &msg),
                     KILN_ERR_RESOURCE);
    assert_contains(msg, "grid.x = 0");
    assert_int_equal(plan_status("// kiln: launch k grid=1 block=(32,-1)\n", &msg),
                     KILN_ERR_RESOURCE);
    assert_contains(msg, "block.y = -1");
    assert_int_equal(plan_status("// kiln: launch k grid=1 block=2048\n", &msg), KILN_ERR_RESOURCE);
    assert_int_equal(plan_status("// kiln: launch k grid=1 block=(32,64)\n", &msg),
                     KILN_ERR_RESOURCE);
    assert_contains(msg, "2048 threads");
    assert_int_equal(plan_status("// kiln: launch k grid=1 block=(1,1,65)\n", &msg),
                     KILN_ERR_RESOURCE);
    assert_int_equal(plan_status("// kiln: launch k grid=(1,65536) block=1\n", &msg),
                     KILN_ERR_RESOURCE);
    assert_contains(msg, "grid.y = 65536 exceeds the limit 65535");
    assert_int_equal(plan_status("// kiln: launch k grid=(1,1,65536) block=1\n", &msg),
                     KILN_ERR_RESOURCE);
    assert_int_equal(plan_status("// kiln: launch k grid=2**31 block=1\n", &msg),
                     KILN_ERR_RESOURCE);
    assert_int_equal(plan_status("// kiln: launch k grid=2**31-1 block=1024\n", &msg), KILN_OK);
    assert_int_equal(plan_status("// kiln: launch k grid=1 smem=-4\n", &msg), KILN_ERR_RESOURCE);
    assert_int_equal(plan_status("// kiln: launch k grid=1 cluster=(0,1,1)\n", &msg),
                     KILN_ERR_RESOURCE);
    assert_int_equal(plan_status("// kiln: launch k grid=1\n// kiln: scratch 0-rows\n", &msg),
                     KILN_ERR_RESOURCE);
    /* expressions that do not evaluate are the candidate's mistake */
    assert_int_equal(plan_status("// kiln: launch k grid=ceil_div(nrows,256)\n", &msg),
                     KILN_ERR_COMPILE);
    assert_contains(msg, "grid.x of launch 'k'");
    assert_int_equal(plan_status("// kiln: launch k grid=rows/(cols-256)\n", &msg),
                     KILN_ERR_COMPILE);
}

/* `// kiln: tensormap`: parsed, evaluated for the workload (x is bf16 [1000, 256]: rows 512 bytes
 * apart), checked against the TMA unit's limits and the tensor's bytes, and round-tripped through
 * a manifest's JSON. */
static void test_tensormap(void **state) {
    (void)state;
    kiln_problem *p = load(definition, workload);
    const char *src = "// kiln: launch k grid=rows block=128\n"
                      "// kiln: tensormap y dims=(cols,rows) strides=(cols) box=(64,128) "
                      "swizzle=128\n"
                      "// kiln: tensormap x dims=(cols,rows/2,2) strides=(cols,cols*rows/2) "
                      "box=(8,1,1)\n";
    kiln_abi abi;
    kiln_err err = {{0}};
    assert_int_equal(kiln_abi_parse(src, 1, &abi, &err), KILN_OK);
    assert_int_equal(abi.n_tmaps, 2);
    kiln_launch_plan plan;
    assert_int_equal(kiln_abi_plan(&abi, p, &p->workloads[0], &plan, &err), KILN_OK);
    assert_int_equal(plan.n_params, 7); /* x, alpha, n, y, rows, cols, total */
    assert_int_equal(plan.n_tmaps, 2);
    const kiln_tmap *y = &plan.tmap[0], *x = &plan.tmap[1];
    assert_int_equal(y->param, 3); /* after the three inputs */
    assert_int_equal(y->dtype, KILN_BF16);
    assert_int_equal(y->rank, 2);
    assert_int_equal(y->dims[0], 256);
    assert_int_equal(y->dims[1], 1000);
    assert_int_equal(y->strides[0], 512); /* bytes */
    assert_int_equal(y->box[1], 128);
    assert_int_equal(y->swizzle, 128);
    assert_int_equal(x->param, 0);
    assert_int_equal(x->rank, 3);
    assert_int_equal(x->strides[1], 256 * 500 * 2);
    /* a manifest's JSON and back */
    cJSON *j = kiln_tmaps_to_json(&plan);
    kiln_dtype dtypes[4] = {KILN_BF16, KILN_F32, KILN_I64, KILN_BF16};
    kiln_launch_plan back;
    memset(&back, 0, sizeof back);
    assert_int_equal(kiln_tmaps_from_json(j, dtypes, 4, &back, &err), KILN_OK);
    assert_int_equal(back.n_tmaps, 2);
    assert_memory_equal(&back.tmap[0], &plan.tmap[0], sizeof plan.tmap[0]);
    assert_memory_equal(&back.tmap[1], &plan.tmap[1], sizeof plan.tmap[1]);
    dtypes[3] = KILN_F32; /* a manifest whose map says another dtype than its tensor */
    assert_int_equal(kiln_tmaps_from_json(j, dtypes, 4, &back, &err), KILN_ERR_FORMAT);
    assert_contains(err.msg, "dtype");
    cJSON_Delete(j);
    kiln_abi_free(&abi);
    kiln_problem_free(p);

    const char *msg;
    /* one row past the tensor: refused before anything runs */
    assert_int_equal(
        plan_status("// kiln: launch k grid=1\n// kiln: tensormap x dims=(cols,rows+1) "
                    "strides=(cols) box=(64,8)\n",
                    &msg),
        KILN_ERR_COMPILE);
    assert_contains(msg, "reaches 512512 bytes; the tensor has 512000");
    /* a reach that would wrap around 2^64 (2^25 + 1 rows 2^39 bytes apart: 2^64 past the first) is
     * past the tensor too */
    assert_int_equal(
        plan_status("// kiln: launch k grid=1\n// kiln: tensormap x dims=(cols,2**25+1) "
                    "strides=(2**38) box=(64,8)\n",
                    &msg),
        KILN_ERR_COMPILE);
    assert_contains(msg, "the tensor has 512000");
    assert_int_equal(plan_status("// kiln: launch k grid=1\n// kiln: tensormap x dims=(cols,rows) "
                                 "strides=(cols+1) box=(64,8)\n",
                                 &msg),
                     KILN_ERR_COMPILE);
    assert_contains(msg, "multiple of 16");
    assert_int_equal(plan_status("// kiln: launch k grid=1\n// kiln: tensormap x dims=(cols,rows) "
                                 "strides=(cols) box=(128,8) swizzle=128\n",
                                 &msg),
                     KILN_ERR_COMPILE);
    assert_contains(msg, "swizzle span");
    assert_int_equal(plan_status("// kiln: launch k grid=1\n// kiln: tensormap x dims=(cols,rows) "
                                 "strides=(cols) box=(64,512)\n",
                                 &msg),
                     KILN_ERR_COMPILE);
    assert_contains(msg, "box[1] = 512");
    assert_int_equal(plan_status("// kiln: launch k grid=1\n// kiln: tensormap alpha dims=(8) "
                                 "box=(8)\n",
                                 &msg),
                     KILN_ERR_COMPILE);
    assert_contains(msg, "not a tensor input or output");
    /* parse errors: rank mismatch, bad swizzle, cpu candidates */
    assert_contains(parse_error("// kiln: launch k grid=1\n// kiln: tensormap x dims=(cols,rows) "
                                "strides=(cols) box=(64)\n",
                                1),
                    "2 dims, 1 strides and 1 box sizes");
    assert_contains(parse_error("// kiln: launch k grid=1\n// kiln: tensormap x dims=(8) box=(8) "
                                "swizzle=16\n",
                                1),
                    "swizzle '16'");
    assert_contains(parse_error("// kiln: tensormap x dims=(8) box=(8)\n", 0), "CUDA candidates");
}

static void test_signature_and_prototype(void **state) {
    (void)state;
    kiln_problem *p = load(definition, workload);
    kiln_signature sig;
    kiln_abi_signature(p, 0, 1, &sig);
    static const struct {
        kiln_param_kind kind;
        const char *name, *cuda, *cpu;
    } want[] = {
        {KILN_PARAM_PTR, "x", "const __nv_bfloat16*", "const kiln_bf16*"},
        {KILN_PARAM_F32, "alpha", "float", "float"},
        {KILN_PARAM_I64, "n", "int64_t", "int64_t"},
        {KILN_PARAM_PTR, "y", "__nv_bfloat16*", "kiln_bf16*"},
        {KILN_PARAM_I64, "rows", "int64_t", "int64_t"},
        {KILN_PARAM_I64, "cols", "int64_t", "int64_t"},
        {KILN_PARAM_I64, "total", "int64_t", "int64_t"},
    };
    assert_int_equal(sig.n, 7);
    for (int i = 0; i < 7; i++) {
        assert_int_equal(sig.p[i].kind, want[i].kind);
        assert_string_equal(sig.p[i].name, want[i].name);
        assert_string_equal(sig.p[i].c_type, want[i].cuda);
    }
    char *proto = kiln_abi_prototype(&sig, "scale", 1);
    assert_string_equal(proto, "extern \"C\" __global__ void scale(const __nv_bfloat16* x, float "
                               "alpha, int64_t n, __nv_bfloat16* y, int64_t rows, int64_t cols, "
                               "int64_t total)");
    free(proto);

    kiln_abi_signature(p, 1, 0, &sig);
    assert_int_equal(sig.n, 8);
    for (int i = 0; i < 7; i++)
        assert_string_equal(sig.p[i].c_type, want[i].cpu);
    assert_int_equal(sig.p[7].kind, KILN_PARAM_PTR);
    assert_string_equal(sig.p[7].name, "kiln_scratch");
    assert_string_equal(sig.p[7].c_type, "void*");
    proto = kiln_abi_prototype(&sig, "kiln_kernel", 0);
    assert_string_equal(proto, "void kiln_kernel(const kiln_bf16* x, float alpha, int64_t n, "
                               "kiln_bf16* y, int64_t rows, int64_t cols, int64_t total, void* "
                               "kiln_scratch)");
    free(proto);
    kiln_problem_free(p);

    p = load(definition2, workload2);
    kiln_abi_signature(p, 0, 1, &sig);
    char *cuda = kiln_abi_prototype(&sig, "k", 1);
    assert_string_equal(cuda, "extern \"C\" __global__ void k(const __half* h, const uint8_t* q, "
                              "double d, int32_t i, int32_t s, bool b, float hs, int64_t* o, "
                              "int64_t n)");
    assert_int_equal(sig.p[2].kind, KILN_PARAM_F64);
    assert_int_equal(sig.p[3].kind, KILN_PARAM_I32);
    assert_int_equal(sig.p[4].kind, KILN_PARAM_I32);
    assert_int_equal(sig.p[5].kind, KILN_PARAM_BOOL);
    assert_int_equal(sig.p[6].kind, KILN_PARAM_F32);
    kiln_abi_signature(p, 0, 0, &sig);
    char *cpu = kiln_abi_prototype(&sig, "k", 0);
    assert_string_equal(cpu, "void k(const kiln_f16* h, const uint8_t* q, double d, int32_t i, "
                             "int32_t s, bool b, float hs, int64_t* o, int64_t n)");
    free(cuda);
    free(cpu);
    kiln_problem_free(p);

    /* no parameters at all */
    memset(&sig, 0, sizeof sig);
    cpu = kiln_abi_prototype(&sig, "f", 0);
    assert_string_equal(cpu, "void f(void)");
    free(cpu);
}

/* The pieces callers without a kiln_problem build signatures from (a manifest entry, the gate's
 * ceiling kernels), and the parameter list an emitter writes its own entry points with. */
static void test_signature_pieces(void **state) {
    (void)state;
    kiln_signature sig = {0};
    kiln_abi_add_tensor(&sig, "x", KILN_BF16, 0, 1);
    kiln_abi_add_tensor(&sig, "w", KILN_I16, 0, 1);
    kiln_abi_add_tensor(&sig, "y", KILN_F8_E4M3, 1, 1);
    kiln_abi_add_param(&sig, KILN_PARAM_I64, "n", "int64_t");
    assert_int_equal(sig.n, 4);
    assert_int_equal(sig.p[0].kind, KILN_PARAM_PTR);
    assert_int_equal(sig.p[2].kind, KILN_PARAM_PTR);
    assert_int_equal(sig.p[3].kind, KILN_PARAM_I64);
    char *list = kiln_abi_param_list(&sig);
    assert_string_equal(list, "const __nv_bfloat16* x, const int16_t* w, uint8_t* y, int64_t n");
    free(list);
    /* attributes before the entry's name, as the families' launch bounds */
    char *proto = kiln_abi_prototype(&sig, "__launch_bounds__(256) k", 1);
    assert_string_equal(proto, "extern \"C\" __global__ void __launch_bounds__(256) k(const "
                               "__nv_bfloat16* x, const int16_t* w, uint8_t* y, int64_t n)");
    free(proto);
    kiln_signature empty = {0};
    list = kiln_abi_param_list(&empty);
    assert_string_equal(list, "");
    free(list);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_launches),   cmocka_unit_test(test_parse_default_launch),
        cmocka_unit_test(test_parse_errors),     cmocka_unit_test(test_plan),
        cmocka_unit_test(test_plan_limits),      cmocka_unit_test(test_signature_and_prototype),
        cmocka_unit_test(test_signature_pieces), cmocka_unit_test(test_parse_library),
        cmocka_unit_test(test_tensormap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
