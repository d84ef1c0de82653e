/* test_family_chnorm.c: kiln's groupnorm and batchnorm families (src/gen/groupnorm.c,
 * batchnorm.c, chnorm.c): what the matchers accept (with the facts the emitters need) and decline
 * (with the reason), what the constraints reject, and that the accepted points of the spaces
 * compile with NVRTC for sm_90 (a deterministic sample, stratified by mode, where a space is large:
 * see compile_points). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "backend/nvrtc.h"
#include "gen/family.h"

/* ---- building definitions: const axes named n<size>, as capture writes them ---- */

typedef struct {
    char text[16384];
    size_t len;
    int64_t axes[32];
    int n_axes;
} def_builder;

static void add(def_builder *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(def_builder *d, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    d->len += (size_t)vsnprintf(d->text + d->len, sizeof d->text - d->len, fmt, ap);
    va_end(ap);
    assert_true(d->len < sizeof d->text);
}

/* "NAME": {"shape": ["n2", "n16"], "dtype": "float32"}; sizes end with 0. */
static void tensor(def_builder *d, int comma, const char *name, const char *dtype, ...) {
    va_list ap;
    va_start(ap, dtype);
    add(d, "%s\"%s\": {\"shape\": [", comma ? ", " : "", name);
    int64_t s;
    for (int k = 0; (s = va_arg(ap, int64_t)) != 0; k++) {
        add(d, "%s\"n%lld\"", k ? ", " : "", (long long)s);
        int seen = 0;
        for (int i = 0; i < d->n_axes; i++)
            seen |= d->axes[i] == s;
        if (!seen)
            d->axes[d->n_axes++] = s;
    }
    va_end(ap);
    add(d, "], \"dtype\": \"%s\"}", dtype);
}

/* Closes a definition: axes, reference, "kiln" (may be empty) and op_type. */
static char *finish(def_builder *d, const char *op_type, const char *kiln) {
    char *s = xasprintf("{\"name\": \"t\", \"op_type\": \"%s\", \"axes\": {", op_type);
    for (int i = 0; i < d->n_axes; i++) {
        char *t = xasprintf("%s%s\"n%lld\": {\"type\": \"const\", \"value\": %lld}", s,
                            i ? ", " : "", (long long)d->axes[i], (long long)d->axes[i]);
        free(s);
        s = t;
    }
    char *t = xasprintf("%s}, %s, \"reference\": \"def run(*a):\\n    pass\\n\"%s%s}", s, d->text,
                        kiln[0] ? ", \"kiln\": " : "", kiln);
    free(s);
    return t;
}

static kiln_problem *load_text(const char *def, const char *wl) {
    kiln_err err = {{0}};
    kiln_problem *p = NULL;
    if (kiln_problem_parse(def, strlen(def), "definition.json", wl, strlen(wl), "workload.jsonl",
                           &p, &err))
        fail_msg("kiln_problem_parse: %s\n%s", err.msg, def);
    return p;
}

/* Loads def (and frees it) with one workload whose inputs are all random (const axes only). */
static kiln_problem *load_def(char *def) {
    char wl[2048];
    size_t off = (size_t)snprintf(wl, sizeof wl, "{\"uuid\": \"w0\", \"axes\": {}, \"inputs\": {");
    cJSON *root = cJSON_Parse(def);
    assert_non_null(root);
    const cJSON *in;
    int k = 0;
    cJSON_ArrayForEach(in, cJSON_GetObjectItemCaseSensitive(root, "inputs")) {
        off += (size_t)snprintf(wl + off, sizeof wl - off, "%s\"%s\": {\"type\": \"random\"}",
                                k++ ? ", " : "", in->string);
    }
    snprintf(wl + off, sizeof wl - off, "}}\n");
    cJSON_Delete(root);
    kiln_problem *p = load_text(def, wl);
    free(def);
    return p;
}

/* ---- problems ---- */

/* aten::group_norm.default (or native_group_norm with mean/rstd) over [N, C, H, W]. */
static kiln_problem *gn_aten(const char *dtype, const char *wdtype, int64_t N, int64_t C, int64_t H,
                             int64_t W, int G, double eps, int native, const char *layouts) {
    def_builder d = {0};
    add(&d, "\"inputs\": {");
    tensor(&d, 0, "input", dtype, N, C, H, W, (int64_t)0);
    tensor(&d, 1, "weight", wdtype, C, (int64_t)0);
    tensor(&d, 1, "bias", wdtype, C, (int64_t)0);
    add(&d, "}, \"outputs\": {");
    tensor(&d, 0, "out0", dtype, N, C, H, W, (int64_t)0);
    if (native) {
        const char *mdt = strcmp(dtype, wdtype) ? "float32" : dtype;
        tensor(&d, 1, "out1", mdt, N, (int64_t)G, (int64_t)0);
        tensor(&d, 1, "out2", mdt, N, (int64_t)G, (int64_t)0);
    }
    add(&d, "}");
    char kiln[1024];
    if (native)
        snprintf(kiln, sizeof kiln,
                 "{\"kind\": \"aten\", \"aten\": \"aten::native_group_norm.default\", \"args\": "
                 "{\"args\": [{\"tensor\": 0}, {\"tensor\": 1}, {\"tensor\": 2}, %lld, %lld, "
                 "%lld, %d, %g], \"kwargs\": {}}%s%s}",
                 (long long)N, (long long)C, (long long)(H * W), G, eps, layouts ? ", " : "",
                 layouts ? layouts : "");
    else
        snprintf(kiln, sizeof kiln,
                 "{\"kind\": \"aten\", \"aten\": \"aten::group_norm.default\", \"args\": "
                 "{\"args\": [{\"tensor\": 0}, %d, {\"tensor\": 1}, {\"tensor\": 2}], \"kwargs\": "
                 "{\"eps\": %g}}%s%s}",
                 G, eps, layouts ? ", " : "", layouts ? layouts : "");
    return load_def(finish(&d, "group_norm", kiln));
}

/* The "chain" form: group_norm (no affine) -> silu, or -> a second op given as its JSON. */
static kiln_problem *gn_chain(const char *dtype, int64_t N, int64_t C, int64_t H, int64_t W, int G,
                              const char *op1) {
    def_builder d = {0};
    add(&d, "\"inputs\": {");
    tensor(&d, 0, "input", dtype, N, C, H, W, (int64_t)0);
    add(&d, "}, \"outputs\": {");
    tensor(&d, 0, "out0", dtype, N, C, H, W, (int64_t)0);
    add(&d, "}");
    char kiln[1024];
    snprintf(kiln, sizeof kiln,
             "{\"kind\": \"chain\", \"ops\": [{\"aten\": \"aten::group_norm.default\", \"args\": "
             "[{\"ref\": \"input\"}, %d, null, null, 1e-06], \"out\": \"v0\"}, %s], \"outputs\": "
             "[\"out0\"]}",
             G,
             op1 ? op1
                 : "{\"aten\": \"aten::silu.default\", \"args\": [{\"ref\": \"v0\"}], \"out\": "
                   "\"out0\"}");
    return load_def(finish(&d, "group_norm_silu", kiln));
}

/* A VAE block's chain: add(a, b) -> group_norm (affine) -> silu, returning the sum and the result
 * (outputs lists their names: "\"v0\", \"v2\"", or just "\"v2\""); alpha given when not 1. */
static kiln_problem *gn_add_chain(const char *dtype, int64_t N, int64_t C, int64_t H, int64_t W,
                                  int G, const char *outputs, double alpha) {
    def_builder d = {0};
    add(&d, "\"inputs\": {");
    tensor(&d, 0, "input0", dtype, N, C, H, W, (int64_t)0);
    tensor(&d, 1, "input1", dtype, N, C, H, W, (int64_t)0);
    tensor(&d, 1, "weight", dtype, C, (int64_t)0);
    tensor(&d, 1, "bias", dtype, C, (int64_t)0);
    add(&d, "}, \"outputs\": {");
    tensor(&d, 0, "out0", dtype, N, C, H, W, (int64_t)0);
    if (strchr(outputs, ','))
        tensor(&d, 1, "out1", dtype, N, C, H, W, (int64_t)0);
    add(&d, "}");
    char kiln[1024], a[32] = "";
    if (alpha != 1)
        snprintf(a, sizeof a, ", %g", alpha);
    snprintf(
        kiln, sizeof kiln,
        "{\"kind\": \"chain\", \"ops\": [{\"aten\": \"aten::add.Tensor\", \"args\": "
        "[{\"ref\": \"input0\"}, {\"ref\": \"input1\"}%s], \"out\": \"v0\"}, {\"aten\": "
        "\"aten::group_norm.default\", \"args\": [{\"ref\": \"v0\"}, %d, {\"ref\": \"weight\"}, "
        "{\"ref\": \"bias\"}, 1e-06], \"out\": \"v1\"}, {\"aten\": \"aten::silu.default\", "
        "\"args\": [{\"ref\": \"v1\"}], \"out\": \"v2\"}], \"outputs\": [%s]}",
        a, G, outputs);
    return load_def(finish(&d, "chain", kiln));
}

/* A captured leaf module: x (bf16) -> to(float32) -> group_norm -> sigmoid/mul SiLU -> to(bf16). */
static kiln_problem *gn_module(void) {
    static const char def[] =
        "{\"name\": \"m\", \"op_type\": \"module:GNSiLU\", \"axes\": {\"n2\": {\"type\": "
        "\"const\", \"value\": 2}, \"n64\": {\"type\": \"const\", \"value\": 64}, \"n33\": "
        "{\"type\": \"const\", \"value\": 33}},\n"
        " \"inputs\": {\"input0\": {\"shape\": [\"n2\", \"n64\", \"n33\", \"n33\"], \"dtype\": "
        "\"bfloat16\"}, \"weight\": {\"shape\": [\"n64\"], \"dtype\": \"float32\"}, \"bias\": "
        "{\"shape\": [\"n64\"], \"dtype\": \"float32\"}},\n"
        " \"outputs\": {\"out0\": {\"shape\": [\"n2\", \"n64\", \"n33\", \"n33\"], \"dtype\": "
        "\"bfloat16\"}},\n"
        " \"reference\": \"import torch\\n\\n\\n@torch.no_grad()\\ndef run(input0, weight, "
        "bias):\\n    v0 = torch.ops.aten._to_copy.default(input0, dtype=torch.float32)\\n    v1 "
        "= torch.ops.aten.group_norm.default(v0, 16, weight, bias, 1e-06)\\n    v2 = "
        "torch.ops.aten.sigmoid.default(v1)\\n    v3 = torch.ops.aten.mul.Tensor(v1, v2)\\n    v4 "
        "= "
        "torch.ops.aten._to_copy.default(v3, dtype=torch.bfloat16)\\n    return v4\\n\",\n"
        " \"kiln\": {\"kind\": \"module\", \"module_class\": \"GNSiLU\"}}\n";
    static const char wl[] = "{\"uuid\": \"w\", \"axes\": {}, \"inputs\": {\"input0\": {\"type\": "
                             "\"random\"}, \"weight\": {\"type\": \"random\"}, \"bias\": "
                             "{\"type\": \"random\"}}}\n";
    return load_text(def, wl);
}

/* No "kiln" object: op_type, names, a const num_groups axis, var axes (rows of 4, 28, 16388). */
static kiln_problem *gn_handwritten(const char *op_type, const char *dtype, int x_rank) {
    char def[2048];
    snprintf(
        def, sizeof def,
        "{\"name\": \"h\", \"op_type\": \"%s\", \"axes\": {\"batch\": {\"type\": \"var\"}, "
        "\"length\": {\"type\": \"var\"}, \"channels\": {\"type\": \"const\", \"value\": 12}, "
        "\"num_groups\": {\"type\": \"const\", \"value\": 3}},\n"
        " \"inputs\": {\"x\": {\"shape\": %s, \"dtype\": \"%s\"}, \"weight\": {\"shape\": "
        "[\"channels\"], \"dtype\": \"%s\"}},\n"
        " \"outputs\": {\"y\": {\"shape\": %s, \"dtype\": \"%s\"}},\n"
        " \"reference\": \"import torch\\nEPS = 1e-3\\ndef run(x, weight):\\n    return x\\n\"}\n",
        op_type, x_rank == 3 ? "[\"batch\", \"channels\", \"length\"]" : "[\"length\"]", dtype,
        dtype, x_rank == 3 ? "[\"batch\", \"channels\", \"length\"]" : "[\"length\"]", dtype);
    static const char wl[] =
        "{\"uuid\": \"a\", \"axes\": {\"batch\": 1, \"length\": 1}, \"inputs\": {\"x\": {\"type\": "
        "\"random\"}, \"weight\": {\"type\": \"random\"}}}\n"
        "{\"uuid\": \"b\", \"axes\": {\"batch\": 3, \"length\": 7}, \"inputs\": {\"x\": {\"type\": "
        "\"random\"}, \"weight\": {\"type\": \"random\"}}}\n"
        "{\"uuid\": \"c\", \"axes\": {\"batch\": 2, \"length\": 4097}, \"inputs\": {\"x\": "
        "{\"type\": \"random\"}, \"weight\": {\"type\": \"random\"}}}\n";
    return load_text(def, wl);
}

/* batch norm over [N, C, H, W] stored NCHW, or NHWC when cl (the capture's memory order). op is
 * the batch norm overload, args its argument list after the five tensors; add_relu adds the
 * residual-add and ReLU steps (a chain); n_stats 2 adds CUDA's saved mean/invstd outputs. */
static kiln_problem *bn_problem(const char *dtype, const char *rdtype, int64_t N, int64_t C,
                                int64_t H, int64_t W, int cl, const char *op, const char *args,
                                int add_relu, int n_stats) {
    def_builder d = {0};
    int64_t a = N, b = cl ? H : C, c = cl ? W : H, e = cl ? C : W;
    add(&d, "\"inputs\": {");
    tensor(&d, 0, "input", dtype, a, b, c, e, (int64_t)0);
    const char *params[] = {"weight", "bias", "running_mean", "running_var"};
    for (int k = 0; k < 4; k++)
        tensor(&d, 1, params[k], dtype, C, (int64_t)0);
    if (add_relu)
        tensor(&d, 1, "residual", rdtype, a, b, c, e, (int64_t)0);
    add(&d, "}, \"outputs\": {");
    tensor(&d, 0, "out0", dtype, a, b, c, e, (int64_t)0);
    if (n_stats) {
        tensor(&d, 1, "out1", "float32", C, (int64_t)0);
        tensor(&d, 1, "out2", "float32", C, (int64_t)0);
    }
    add(&d, "}");
    char lay[512] = "";
    if (cl)
        snprintf(lay, sizeof lay,
                 ", \"layouts\": {\"input\": {\"stored\": \"memory_order\", \"permute\": [0, 2, 3, "
                 "1]}, \"residual\": {\"stored\": \"memory_order\", \"permute\": [0, 2, 3, 1]}, "
                 "\"out0\": {\"stored\": \"memory_order\", \"permute\": [0, 2, 3, 1]}}");
    char kiln[2048];
    if (add_relu) /* in-place add_ onto the residual: it rebinds "residual" */
        snprintf(kiln, sizeof kiln,
                 "{\"kind\": \"chain\", \"ops\": [{\"aten\": \"aten::%s\", \"args\": "
                 "[{\"ref\": \"input\"}, {\"ref\": \"weight\"}, {\"ref\": \"bias\"}, {\"ref\": "
                 "\"running_mean\"}, {\"ref\": \"running_var\"}, %s], \"out\": \"bn\"}, {\"aten\": "
                 "\"aten::add_.Tensor\", \"args\": [{\"ref\": \"residual\"}, {\"ref\": \"bn\"}]}, "
                 "{\"aten\": \"aten::relu.default\", \"args\": [{\"ref\": \"residual\"}], "
                 "\"out\": \"y\"}], \"outputs\": [\"y\"]%s}",
                 op, args, lay);
    else
        snprintf(kiln, sizeof kiln,
                 "{\"kind\": \"aten\", \"aten\": \"aten::%s\", \"args\": {\"args\": "
                 "[{\"tensor\": 0}, {\"tensor\": 1}, {\"tensor\": 2}, {\"tensor\": 3}, "
                 "{\"tensor\": 4}, %s], \"kwargs\": {}}%s}",
                 op, args, lay);
    return load_def(finish(&d, "batch_norm", kiln));
}

static kiln_problem *bn_handwritten(void) {
    static const char def[] =
        "{\"name\": \"b\", \"op_type\": \"batch_norm_relu\", \"axes\": {\"batch\": {\"type\": "
        "\"var\"}, \"features\": {\"type\": \"const\", \"value\": 24}},\n"
        " \"inputs\": {\"x\": {\"shape\": [\"batch\", \"features\"], \"dtype\": \"float16\"}, "
        "\"running_mean\": {\"shape\": [\"features\"], \"dtype\": \"float32\"}, \"running_var\": "
        "{\"shape\": [\"features\"], \"dtype\": \"float32\"}, \"eps\": {\"shape\": null, "
        "\"dtype\": \"float32\"}},\n"
        " \"outputs\": {\"y\": {\"shape\": [\"batch\", \"features\"], \"dtype\": \"float16\"}},\n"
        " \"reference\": \"def run(x, running_mean, running_var, eps):\\n    return x\\n\"}\n";
    static const char wl[] =
        "{\"uuid\": \"a\", \"axes\": {\"batch\": 1}, \"inputs\": {\"x\": {\"type\": \"random\"}, "
        "\"running_mean\": {\"type\": \"random\"}, \"running_var\": {\"type\": \"random\"}, "
        "\"eps\": {\"type\": \"scalar\", \"value\": 0.001}}}\n"
        "{\"uuid\": \"b\", \"axes\": {\"batch\": 33}, \"inputs\": {\"x\": {\"type\": \"random\"}, "
        "\"running_mean\": {\"type\": \"random\"}, \"running_var\": {\"type\": \"random\"}, "
        "\"eps\": {\"type\": \"scalar\", \"value\": 0.001}}}\n";
    return load_text(def, wl);
}

/* A captured leaf module whose ReLU is in place (a bare `relu_` call rebinding its argument),
 * channels-last: the reference restores the layout and returns the result permuted. */
static kiln_problem *bn_module_inplace(void) {
    static const char def[] =
        "{\"name\": \"m\", \"op_type\": \"module:BNReLU\", \"axes\": {\"n2\": {\"type\": "
        "\"const\", \"value\": 2}, \"n8\": {\"type\": \"const\", \"value\": 8}, \"n16\": "
        "{\"type\": \"const\", \"value\": 16}},\n"
        " \"inputs\": {\"input0\": {\"shape\": [\"n2\", \"n8\", \"n8\", \"n16\"], \"dtype\": "
        "\"float32\"}, \"weight\": {\"shape\": [\"n16\"], \"dtype\": \"float32\"}, \"bias\": "
        "{\"shape\": [\"n16\"], \"dtype\": \"float32\"}, \"running_mean\": {\"shape\": "
        "[\"n16\"], \"dtype\": \"float32\"}, \"running_var\": {\"shape\": [\"n16\"], \"dtype\": "
        "\"float32\"}},\n"
        " \"outputs\": {\"out0\": {\"shape\": [\"n2\", \"n8\", \"n8\", \"n16\"], \"dtype\": "
        "\"float32\"}},\n"
        " \"reference\": \"import torch\\n\\n\\n@torch.no_grad()\\ndef run(input0, weight, bias, "
        "running_mean, running_var):\\n    input0 = input0.permute(0, 3, 1, 2)  # captured strides "
        "[1024, 1, 128, 16] (stored in memory order)\\n    v0 = "
        "torch.ops.aten.batch_norm.default(input0, weight, bias, running_mean, running_var, False, "
        "0.1, 1e-05, True)\\n    torch.ops.aten.relu_.default(v0)\\n    return v0.permute(0, 2, 3, "
        "1)\\n\",\n"
        " \"kiln\": {\"kind\": \"module\", \"module_class\": \"BNReLU\", \"layouts\": "
        "{\"input0\": {\"stored\": \"memory_order\", \"permute\": [0, 2, 3, 1]}, \"out0\": "
        "{\"stored\": \"memory_order\", \"permute\": [0, 2, 3, 1]}}}}\n";
    static const char wl[] =
        "{\"uuid\": \"w\", \"axes\": {}, \"inputs\": {\"input0\": {\"type\": \"random\"}, "
        "\"weight\": {\"type\": \"random\"}, \"bias\": {\"type\": \"random\"}, \"running_mean\": "
        "{\"type\": \"random\"}, \"running_var\": {\"type\": \"random\"}}}\n";
    return load_text(def, wl);
}

#define BN_ARGS "false, 0.1, 1e-05, true" /* batch_norm.default after the tensors */

/* ---- helpers ---- */

static int match(const kiln_family *f, const kiln_problem *p, kiln_match *m, char *why, size_t wl) {
    memset(m, 0, sizeof *m);
    for (int k = 0; k < 8; k++)
        m->input_of_role[k] = -1;
    for (int k = 0; k < 4; k++)
        m->output_of_role[k] = -1;
    why[0] = 0;
    return f->match(p, m, why, wl);
}

static void expect_match(const kiln_family *f, const kiln_problem *p, kiln_match *m,
                         const char *variant) {
    char why[512];
    if (!match(f, p, m, why, sizeof why))
        fail_msg("%s declined: %s", f->name, why);
    assert_string_equal(m->variant, variant);
    assert_true(m->how[0] != 0);
}

static void expect_decline(const kiln_family *f, kiln_problem *p, const char *reason) {
    kiln_match m;
    char why[512];
    if (match(f, p, &m, why, sizeof why))
        fail_msg("%s matched (%s), expected a decline with \"%s\"", f->name, m.how, reason);
    if (!strstr(why, reason))
        fail_msg("%s declined with \"%s\", expected \"%s\"", f->name, why, reason);
    kiln_problem_free(p);
}

/* check()'s verdict on one point (values in table order). */
static void check_point(const kiln_family *f, const kiln_problem *p, const kiln_match *m,
                        const int64_t *point, const char *reason) {
    const char *bad = f->check(p, m, point);
    const char *text = bad && bad[0] == '!' ? bad + 1 : bad;
    if (!reason && bad)
        fail_msg("point rejected: %s", text);
    if (reason && (!bad || !strstr(text, reason)))
        fail_msg("expected a rejection with \"%s\", got %s", reason, text ? text : "none");
    if (bad && bad[0] == '!')
        free((void *)bad);
}

/* NVRTC must load wherever the toolkit is installed; only a machine without one may skip. */
static int have_nvrtc(void) {
    if (kiln_cuda_have_nvrtc())
        return 1;
    const char *home = getenv("CUDA_HOME") ? getenv("CUDA_HOME") : "/usr/local/cuda";
    char path[512];
    snprintf(path, sizeof path, "%s/lib64/libnvrtc.so", home);
    if (access(path, R_OK) == 0)
        fail_msg("%s exists but NVRTC could not be loaded", path);
    printf("SKIP: no NVRTC (no CUDA toolkit at %s)\n", home);
    return 0;
}

/* Every accepted point compiles for sm_90, and its CPU source has the entry point. The spaces
 * hold a few hundred valid points for realistic shapes, so at most per_mode points of each mode
 * are compiled: evenly spaced over that mode's valid points in index order (deterministic).
 * Returns the number of valid points. */
static int compile_points(const kiln_family *f, const kiln_problem *p, const kiln_match *m,
                          int per_mode, int nvrtc) {
    const int64_t space = kiln_family_space_size(f);
    int64_t point[KILN_FAMILY_MAX_PARAMS];
    int n_valid = 0, valid_of_mode[8] = {0};
    int64_t *valid = calloc((size_t)space, sizeof *valid);
    for (int64_t k = 0; k < space; k++) {
        kiln_family_point(f, k, point);
        const char *bad = f->check(p, m, point);
        if (!bad) {
            valid[n_valid++] = k;
            valid_of_mode[point[0]]++;
        } else if (bad[0] == '!') {
            free((void *)bad);
        }
    }
    int seen_of_mode[8] = {0}, done_of_mode[8] = {0};
    char *cpu = f->emit(p, m, point, 0);
    assert_non_null(strstr(cpu, "// kiln: launch"));
    free(cpu);
    for (int i = 0; i < n_valid && nvrtc; i++) {
        kiln_family_point(f, valid[i], point);
        int mode = (int)point[0];
        int nth = seen_of_mode[mode]++;
        /* the j-th pick of a mode is its (j * count / per_mode)-th valid point */
        if (done_of_mode[mode] >= per_mode ||
            nth != (int)((int64_t)done_of_mode[mode] * valid_of_mode[mode] / per_mode))
            continue;
        done_of_mode[mode]++;
        char *src = f->emit(p, m, point, 1);
        char *cubin = NULL, *log = NULL;
        size_t len = 0;
        kiln_err err = {{0}};
        if (kiln_cuda_compile_only(src, "sm_90", &cubin, &len, &log, &err)) {
            char *ps = kiln_family_point_str(f, point);
            fail_msg("%s %s does not compile: %s\n%s", f->name, ps, err.msg, log ? log : "");
        }
        free(cubin);
        free(log);
        free(src);
    }
    free(valid);
    return n_valid;
}

/* ---- tests ---- */

static void test_groupnorm_matches(void **state) {
    (void)state;
    const kiln_family *f = kiln_family_find("groupnorm");
    assert_non_null(f);
    kiln_match m;

    kiln_problem *p = gn_aten("float32", "float32", 2, 8, 3, 3, 4, 1e-5, 1, NULL);
    expect_match(f, p, &m, "group_norm_stats");
    assert_int_equal((int)kiln_match_get(&m, "groups", 0), 4);
    assert_int_equal(m.input_of_role[0], 0);
    assert_int_equal(m.output_of_role[1], 1);
    assert_int_equal(m.output_of_role[2], 2);
    assert_string_equal(m.cols_expr, "(n3*n3)");
    kiln_problem_free(p);

    p = gn_aten("bfloat16", "float32", 1, 64, 5, 7, 32, 1e-6, 0, NULL);
    expect_match(f, p, &m, "group_norm");
    assert_true(kiln_match_get(&m, "eps", 0) == 1e-6);
    assert_int_equal((int)kiln_match_get(&m, "mid", -1), KILN_BF16);
    kiln_problem_free(p);

    p = gn_chain("float32", 1, 32, 16, 16, 8, NULL);
    expect_match(f, p, &m, "group_norm_silu");
    assert_int_equal(m.input_of_role[1], -1); /* no affine */
    assert_int_equal((int)kiln_match_get(&m, "silu", 0), 1);
    kiln_problem_free(p);

    p = gn_module();
    expect_match(f, p, &m, "group_norm_silu");
    assert_int_equal((int)kiln_match_get(&m, "silu", 0), 2); /* sigmoid, mul */
    assert_int_equal((int)kiln_match_get(&m, "mid", -1), KILN_F32);
    assert_int_equal((int)kiln_match_get(&m, "groups", 0), 16);
    assert_int_equal(m.input_of_role[1], 1);
    kiln_problem_free(p);

    p = gn_handwritten("group_norm_silu", "float16", 3);
    expect_match(f, p, &m, "group_norm_silu");
    assert_int_equal((int)kiln_match_get(&m, "groups", 0), 3);
    assert_true(kiln_match_get(&m, "eps", 0) == 1e-3); /* from the reference's EPS = 1e-3 */
    assert_int_equal(m.input_of_role[2], -1);          /* no bias input */
    kiln_problem_free(p);
    /* the add's sum may be returned first or second */
    p = gn_add_chain("bfloat16", 1, 32, 4, 4, 8, "\"v2\", \"v0\"", 1);
    expect_match(f, p, &m, "add_group_norm_silu");
    assert_int_equal(m.output_of_role[0], 0); /* y */
    assert_int_equal(m.output_of_role[3], 1); /* the sum */
    kiln_problem_free(p);
    /* or not returned: the kernel reads a and b again where it would read the sum */
    p = gn_add_chain("bfloat16", 1, 32, 4, 4, 8, "\"v2\"", 1);
    expect_match(f, p, &m, "add_group_norm_silu");
    assert_int_equal(m.output_of_role[3], -1);
    char *src = f->emit(p, &m, (int64_t[]){0, 1, 256, 2}, 1);
    assert_non_null(strstr(src, "#define GN_ADD 2\n"));
    assert_non_null(
        strstr(src, "gn_rows_body(gn_in{input0, input1, nullptr}, weight, bias, out0,"));
    free(src);
    src = f->emit(p, &m, (int64_t[]){0, 1, 256, 2}, 0);
    assert_non_null(strstr(src, "gn_cpu_add(input0, input1, gn_sum, gn_numel);"));
    assert_non_null(strstr(src, "free(gn_sum);"));
    free(src);
    kiln_problem_free(p);
}

static void test_groupnorm_declines(void **state) {
    (void)state;
    const kiln_family *f = kiln_family_find("groupnorm");
    const char *cl = "\"layouts\": {\"input\": {\"stored\": \"memory_order\", \"permute\": [0, 2, "
                     "3, 1]}}";
    expect_decline(f, gn_aten("float32", "float32", 2, 16, 4, 4, 4, 1e-5, 0, cl), "memory order");
    expect_decline(f, gn_aten("float64", "float64", 2, 16, 4, 4, 4, 1e-5, 0, NULL), "only float32");
    expect_decline(f, gn_aten("float32", "float32", 2, 18, 4, 4, 4, 1e-5, 0, NULL),
                   "not a multiple of 4 groups");
    expect_decline(f,
                   gn_chain("float32", 1, 32, 4, 4, 8,
                            "{\"aten\": \"aten::relu.default\", \"args\": [{\"ref\": \"v0\"}], "
                            "\"out\": \"out0\"}"),
                   "does not continue");
    expect_decline(f,
                   gn_chain("float32", 1, 32, 4, 4, 8,
                            "{\"aten\": \"aten::softmax.int\", \"args\": [{\"ref\": \"v0\"}, "
                            "-1], \"out\": \"out0\"}"),
                   "not part of a channel-norm pattern");
    expect_decline(f, gn_handwritten("softmax", "float32", 3), "op_type 'softmax'");
    expect_decline(f, gn_add_chain("bfloat16", 1, 32, 4, 4, 8, "\"v0\", \"v2\"", 2), "alpha 1");
    expect_decline(f, gn_handwritten("group_norm", "float32", 1), "1 dimensions");
    /* a reshaped native call (N, C, HxW not the input's) is not ours */
    def_builder d = {0};
    add(&d, "\"inputs\": {");
    tensor(&d, 0, "input", "float32", (int64_t)2, (int64_t)8, (int64_t)9, (int64_t)0);
    add(&d, "}, \"outputs\": {");
    tensor(&d, 0, "out0", "float32", (int64_t)2, (int64_t)8, (int64_t)9, (int64_t)0);
    add(&d, "}");
    expect_decline(f,
                   load_def(finish(&d, "group_norm",
                                   "{\"kind\": \"aten\", \"aten\": "
                                   "\"aten::native_group_norm.default\", \"args\": {\"args\": "
                                   "[{\"tensor\": 0}, null, null, 4, 8, 9, 2, 1e-5]}}")),
                   "not the input's shape");
    def_builder e = {0};
    add(&e, "\"inputs\": {");
    tensor(&e, 0, "input", "float32", (int64_t)2, (int64_t)8, (int64_t)0);
    add(&e, "}, \"outputs\": {");
    tensor(&e, 0, "out0", "float32", (int64_t)2, (int64_t)8, (int64_t)0);
    add(&e, "}");
    expect_decline(f, load_def(finish(&e, "x", "{\"kind\": \"graph\"}")), "kiln.kind 'graph'");
}

static void test_groupnorm_constraints(void **state) {
    (void)state;
    const kiln_family *f = kiln_family_find("groupnorm");
    kiln_match m;
    /* the VAE row: 32 rows of 2^20 fp32 elements */
    kiln_problem *p = gn_aten("float32", "float32", 1, 512, 256, 256, 32, 1e-6, 0, NULL);
    expect_match(f, p, &m, "group_norm");
    /* GN_MODE, GN_SPLIT, GN_THREADS, GN_UNROLL */
    check_point(f, p, &m, (int64_t[]){0, 1, 256, 4}, "most SMs idle");
    check_point(f, p, &m, (int64_t[]){1, 2, 256, 4}, "fewer CTAs than SMs");
    check_point(f, p, &m, (int64_t[]){0, 2, 256, 4}, "GN_SPLIT");
    check_point(f, p, &m, (int64_t[]){1, 1, 256, 4}, "GN_SPLIT");
    check_point(f, p, &m, (int64_t[]){1, 64, 512, 8}, NULL);
    check_point(f, p, &m, (int64_t[]){2, 2, 512, 4}, "does not fit on chip");
    check_point(f, p, &m, (int64_t[]){2, 64, 512, 4}, NULL);
    check_point(f, p, &m, (int64_t[]){3, 16, 512, 8}, NULL);
    check_point(f, p, &m, (int64_t[]){3, 32, 512, 8}, "at most 16");
    check_point(f, p, &m, (int64_t[]){2, 64, 1024, 8}, "spill");
    kiln_problem_free(p);
    /* odd H*W: scalar access; a small row cannot be split into thread-sized slices */
    p = gn_aten("float32", "float32", 2, 8, 3, 3, 4, 1e-5, 1, NULL);
    expect_match(f, p, &m, "group_norm_stats");
    check_point(f, p, &m, (int64_t[]){1, 2, 256, 2}, "slices smaller");
    char *src = f->emit(p, &m, (int64_t[]){0, 1, 256, 2}, 1);
    assert_non_null(strstr(src, "#define GN_VEC 1\n"));
    assert_non_null(strstr(src, "// kiln: launch gn_main grid=(n2)*4 block=256"));
    assert_non_null(
        strstr(src, "gn_rows_body(gn_in{input, nullptr, nullptr}, weight, bias, out0, out1, out2"));
    free(src);
    kiln_problem_free(p);
    /* split launches declare scratch and launch twice; the cluster mode declares its cluster */
    p = gn_aten("bfloat16", "bfloat16", 1, 128, 64, 64, 32, 1e-6, 0, NULL);
    expect_match(f, p, &m, "group_norm");
    src = f->emit(p, &m, (int64_t[]){1, 4, 256, 2}, 1);
    assert_non_null(strstr(src, "// kiln: scratch 16*(n1)*32*4\n"));
    assert_non_null(strstr(src, "// kiln: launch gn_partial grid=(n1)*32*4 block=256\n"));
    assert_non_null(strstr(src, "#define GN_VEC 8\n"));
    free(src);
    src = f->emit(p, &m, (int64_t[]){3, 4, 256, 2}, 1);
    assert_non_null(strstr(src, "cluster=4\n"));
    assert_null(strstr(src, "// kiln: scratch"));
    free(src);
    kiln_problem_free(p);
    /* an add first: the entry passes both operands and the sum; a and b double the held tile */
    p = gn_add_chain("bfloat16", 1, 128, 64, 64, 32, "\"v0\", \"v2\"", 1);
    expect_match(f, p, &m, "add_group_norm_silu");
    src = f->emit(p, &m, (int64_t[]){2, 8, 512, 4}, 1);
    assert_non_null(strstr(src, "#define GN_ADD 1\n"));
    assert_non_null(strstr(src, "gn_coop_body(gn_in{input0, input1, out0}, weight, bias, out1,"));
    free(src);
    src = f->emit(p, &m, (int64_t[]){2, 8, 512, 4}, 0);
    assert_non_null(strstr(src, "gn_cpu_add(input0, input1, out0,"));
    assert_non_null(strstr(src, "gn_cpu_run(out0, weight, bias, out1,"));
    free(src);
    check_point(f, p, &m, (int64_t[]){2, 2, 1024, 2}, "spill");
    check_point(f, p, &m, (int64_t[]){2, 2, 512, 8}, "spill");
    check_point(f, p, &m, (int64_t[]){2, 4, 512, 4}, NULL);
    kiln_problem_free(p);
}

static void test_groupnorm_compiles(void **state) {
    (void)state;
    const kiln_family *f = kiln_family_find("groupnorm");
    int nvrtc = have_nvrtc();
    kiln_match m;
    struct {
        kiln_problem *p;
        const char *variant;
    } cases[] = {
        {gn_aten("float32", "float32", 1, 128, 64, 64, 32, 1e-6, 0, NULL), "group_norm"},
        {gn_aten("bfloat16", "float32", 2, 32, 16, 24, 8, 1e-5, 1, NULL), "group_norm_stats"},
        {gn_module(), "group_norm_silu"},
        {gn_handwritten("group_norm_silu", "float16", 3), "group_norm_silu"},
        {gn_add_chain("bfloat16", 1, 512, 256, 256, 32, "\"v0\", \"v2\"", 1),
         "add_group_norm_silu"},
        {gn_add_chain("float32", 2, 256, 64, 64, 8, "\"v2\"", 1), "add_group_norm_silu"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        expect_match(f, cases[i].p, &m, cases[i].variant);
        int n = compile_points(f, cases[i].p, &m, 8, nvrtc);
        assert_true(n >= 4);
        kiln_problem_free(cases[i].p);
    }
}

/* The start point is the rule's (the H100 sweeps' bests of the VAE rows), and a CTA per row where
 * rows are small. */
static void test_groupnorm_start(void **state) {
    (void)state;
    const kiln_family *f = kiln_family_find("groupnorm");
    static const struct {
        int add;
        const char *dtype;
        int64_t N, C, S;
        int G;
        int64_t want[4];
    } cases[] = {
        {0, "bfloat16", 1, 512, 256, 32, {2, 32, 256, 4}},
        {0, "bfloat16", 1, 128, 1024, 32, {2, 128, 256, 4}},
        {1, "bfloat16", 1, 512, 256, 32, {2, 16, 256, 4}},
        {1, "bfloat16", 16, 256, 64, 8, {2, 2, 256, 4}},
        {0, "float32", 2, 8, 3, 4, {0, 1, 256, 4}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kiln_problem *p = cases[i].add
                              ? gn_add_chain(cases[i].dtype, cases[i].N, cases[i].C, cases[i].S,
                                             cases[i].S, cases[i].G, "\"v0\", \"v2\"", 1)
                              : gn_aten(cases[i].dtype, cases[i].dtype, cases[i].N, cases[i].C,
                                        cases[i].S, cases[i].S, cases[i].G, 1e-6, 0, NULL);
        kiln_match m;
        char why[512];
        assert_true(match(f, p, &m, why, sizeof why));
        int from_rule = 0;
        int64_t k = kiln_family_start_index(f, p, &m, 1000, &from_rule), pt[KILN_FAMILY_MAX_PARAMS];
        assert_true(k >= 0 && from_rule);
        kiln_family_point(f, k, pt);
        for (int j = 0; j < 4; j++)
            if (pt[j] != cases[i].want[j])
                fail_msg("case %zu: start %s", i, kiln_family_point_str(f, pt));
        kiln_problem_free(p);
    }
}

static void test_batchnorm_matches(void **state) {
    (void)state;
    const kiln_family *f = kiln_family_find("batchnorm");
    kiln_match m;
    kiln_problem *p =
        bn_problem("float32", NULL, 2, 16, 7, 7, 0, "batch_norm.default", BN_ARGS, 0, 0);
    expect_match(f, p, &m, "batch_norm");
    assert_string_equal(m.rows_expr, "(n2)");
    assert_string_equal(m.extra_expr[0], "(n16)");
    assert_string_equal(m.cols_expr, "(n7*n7)");
    kiln_problem_free(p);

    p = bn_problem("bfloat16", "bfloat16", 4, 64, 8, 8, 1, "batch_norm.default", BN_ARGS, 1, 0);
    expect_match(f, p, &m, "batch_norm_add_relu_channels_last");
    assert_int_equal(m.input_of_role[5], 5);
    assert_string_equal(m.cols_expr, "1");
    assert_string_equal(m.rows_expr, "(n4*n8*n8)");
    kiln_problem_free(p);

    p = bn_problem("float32", NULL, 8, 32, 28, 28, 0,
                   "_native_batch_norm_legit_no_training.default", "0.1, 1e-05", 0, 2);
    expect_match(f, p, &m, "batch_norm_stats");
    assert_int_equal(m.output_of_role[1], 1);
    assert_int_equal(m.output_of_role[2], 2);
    kiln_problem_free(p);

    p = bn_module_inplace();
    expect_match(f, p, &m, "batch_norm_relu_channels_last");
    assert_string_equal(m.rows_expr, "(n2*n8*n8)");
    assert_string_equal(m.extra_expr[0], "(n16)");
    kiln_problem_free(p);

    p = bn_handwritten();
    expect_match(f, p, &m, "batch_norm_relu");
    assert_int_equal(m.input_of_role[6], 3); /* eps: a scalar input */
    assert_int_equal(m.input_of_role[1], -1);
    kiln_problem_free(p);
}

static void test_batchnorm_declines(void **state) {
    (void)state;
    const kiln_family *f = kiln_family_find("batchnorm");
    expect_decline(f,
                   bn_problem("float32", NULL, 2, 16, 4, 4, 0, "batch_norm.default",
                              "true, 0.1, 1e-05, true", 0, 0),
                   "training mode");
    expect_decline(
        f, bn_problem("bfloat16", "float32", 2, 16, 4, 4, 0, "batch_norm.default", BN_ARGS, 1, 0),
        "shape and dtype");
    expect_decline(f,
                   bn_problem("float32", NULL, 2, 16, 4, 4, 0, "cudnn_batch_norm.default",
                              "false, 0.1, 1e-05", 0, 2),
                   "not one this family produces");
    expect_decline(f, gn_aten("float32", "float32", 2, 16, 4, 4, 4, 1e-5, 0, NULL),
                   "not a batch norm");
    /* a broadcast (expanded) input */
    def_builder d = {0};
    add(&d, "\"inputs\": {");
    tensor(&d, 0, "input", "float32", (int64_t)2, (int64_t)8, (int64_t)0);
    const char *params[] = {"weight", "bias", "running_mean", "running_var"};
    for (int k = 0; k < 4; k++)
        tensor(&d, 1, params[k], "float32", (int64_t)8, (int64_t)0);
    add(&d, "}, \"outputs\": {");
    tensor(&d, 0, "out0", "float32", (int64_t)2, (int64_t)8, (int64_t)0);
    add(&d, "}");
    expect_decline(f,
                   load_def(finish(&d, "batch_norm",
                                   "{\"kind\": \"aten\", \"aten\": \"aten::batch_norm.default\", "
                                   "\"args\": {\"args\": [{\"tensor\": 0}, {\"tensor\": 1}, "
                                   "{\"tensor\": 2}, {\"tensor\": 3}, {\"tensor\": 4}, false, "
                                   "0.1, 1e-05, true]}, \"layouts\": {\"input\": {\"stored\": "
                                   "\"memory_order\", \"expand\": [2, 8]}}}")),
                   "broadcast");
    /* (a malformed "permute" does not load at all: test_problem.c) */
}

static void test_batchnorm_constraints(void **state) {
    (void)state;
    const kiln_family *f = kiln_family_find("batchnorm");
    kiln_match m;
    kiln_problem *p =
        bn_problem("float32", NULL, 32, 2048, 7, 7, 0, "batch_norm.default", BN_ARGS, 0, 0);
    expect_match(f, p, &m, "batch_norm");
    /* BN_MODE, BN_THREADS, BN_UNROLL, BN_GRID */
    check_point(f, p, &m, (int64_t[]){0, 256, 4, 4}, NULL);
    check_point(f, p, &m, (int64_t[]){2, 256, 4, 0}, "channels-last");
    check_point(f, p, &m, (int64_t[]){1, 256, 4, 2}, "mode 1's grid");
    check_point(f, p, &m, (int64_t[]){1, 128, 1, 0}, NULL);
    check_point(f, p, &m, (int64_t[]){0, 1024, 8, 8}, "half the size");
    char *src = f->emit(p, &m, (int64_t[]){0, 256, 4, 4}, 1);
    assert_non_null(strstr(src, "#define BN_VEC 4\n")); /* mode 0 straddles 7x7 rows */
    assert_non_null(strstr(src, "grid=min(ceil_div((n32)*(n2048)*(n7*n7),4096),528) block=256 "
                                "smem=(n2048)*8\n"));
    free(src);
    src = f->emit(p, &m, (int64_t[]){1, 128, 1, 0}, 1);
    assert_non_null(strstr(src, "#define BN_VEC 1\n")); /* rows of 49 */
    assert_non_null(strstr(src, "grid=((n32)*(n2048),ceil_div((n7*n7),128))"));
    free(src);
    kiln_problem_free(p);
    p = bn_problem("bfloat16", "bfloat16", 4, 48, 8, 8, 1, "batch_norm.default", BN_ARGS, 1, 0);
    expect_match(f, p, &m, "batch_norm_add_relu_channels_last");
    check_point(f, p, &m, (int64_t[]){2, 128, 2, 0}, "does not divide");
    check_point(f, p, &m, (int64_t[]){2, 384, 2, 0}, NULL);
    kiln_problem_free(p);
}

static void test_batchnorm_compiles(void **state) {
    (void)state;
    const kiln_family *f = kiln_family_find("batchnorm");
    int nvrtc = have_nvrtc();
    kiln_match m;
    struct {
        kiln_problem *p;
        const char *variant;
    } cases[] = {
        {bn_problem("float32", NULL, 2, 16, 7, 7, 0, "batch_norm.default", BN_ARGS, 0, 0),
         "batch_norm"},
        {bn_problem("bfloat16", "bfloat16", 4, 64, 8, 8, 1, "batch_norm.default", BN_ARGS, 1, 0),
         "batch_norm_add_relu_channels_last"},
        {bn_problem("float16", NULL, 8, 32, 28, 28, 0,
                    "_native_batch_norm_legit_no_training.default", "0.1, 1e-05", 0, 2),
         "batch_norm_stats"},
        {bn_handwritten(), "batch_norm_relu"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        expect_match(f, cases[i].p, &m, cases[i].variant);
        int n = compile_points(f, cases[i].p, &m, 8, nvrtc);
        assert_true(n >= 2);
        kiln_problem_free(cases[i].p);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_groupnorm_matches),     cmocka_unit_test(test_groupnorm_declines),
        cmocka_unit_test(test_groupnorm_constraints), cmocka_unit_test(test_groupnorm_compiles),
        cmocka_unit_test(test_groupnorm_start),       cmocka_unit_test(test_batchnorm_matches),
        cmocka_unit_test(test_batchnorm_declines),    cmocka_unit_test(test_batchnorm_constraints),
        cmocka_unit_test(test_batchnorm_compiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
