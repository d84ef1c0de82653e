/* cublaslt.c: cuBLASLt opened at run time, GEMMs mapped onto its column-major view, its
 * configurations enumerated as search points and run exactly as chosen.
 *
 * Why dlopen: like the driver (cuda_driver.c), kiln must build and run where there is no CUDA
 * library at all; cublasLt.h gives the types and enums only. cuBLASLt exports one generation of
 * each entry point, so plain dlsym is right here (unlike libcuda's versioned symbols).
 *
 * Why enumerate rather than ask the heuristic: the heuristic answers from a model of the device,
 * not from a measurement, and misses the best config of a shape often enough (split-K on skinny
 * shapes, cluster shapes on Hopper) that a search over every config cuBLASLt accepts pays; the
 * chosen config is then replayed exactly (AlgoInit + the config attributes), with no heuristic at
 * run time. */
#include "cublaslt.h"

#include "nvrtc.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

kiln_lt_funcs kiln_lt;

#define KILN_LT_SYM(name, ret, params) {"cublasLt" #name, offsetof(kiln_lt_funcs, name)},
static const struct {
    const char *name;
    size_t offset;
} lt_syms[] = {KILN_LT_FUNCS(KILN_LT_SYM)};
#undef KILN_LT_SYM

/* Fills kiln_lt. Not thread-safe: kiln_lt_load calls it once, under its lock. */
static int lt_resolve(kiln_err *err) {
    char home13[300], home12[300];
    snprintf(home13, sizeof home13, "%.250s/lib64/libcublasLt.so.13", kiln_cuda_home());
    snprintf(home12, sizeof home12, "%.250s/lib64/libcublasLt.so.12", kiln_cuda_home());
    const char *names[] = {getenv("KILN_CUBLASLT"),
                           "libcublasLt.so.13",
                           "libcublasLt.so.12",
                           "libcublasLt.so",
                           home13,
                           home12};
    char tried[1400] = "";
    size_t used = 0;
    void *lib = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++) {
        if (!names[i] || !*names[i])
            continue;
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!lib && used < sizeof tried) {
            /* dlerror's text only where it says more than "no such file" (a named file that
             * does not load) */
            const char *why = dlerror();
            int named = i == 0 && why && !strstr(why, "No such file");
            int w = snprintf(tried + used, sizeof tried - used, "%s%s%s%s%s", used ? ", " : "",
                             names[i], named ? " (" : "", named ? why : "", named ? ")" : "");
            used += w > 0 ? (size_t)w : 0;
        }
    }
    if (!lib)
        return kiln_errf(err, KILN_ERR_NO_DEVICE,
                         "cuBLASLt not found (set KILN_CUBLASLT to libcublasLt.so.13's path; "
                         "PyTorch's wheel has it in nvidia/cu13/lib): tried %s",
                         tried);
    for (size_t i = 0; i < sizeof lt_syms / sizeof lt_syms[0]; i++) {
        void *fn = dlsym(lib, lt_syms[i].name);
        if (!fn) {
            dlclose(lib);
            return kiln_errf(err, KILN_ERR_NO_DEVICE,
                             "cuBLASLt lacks %s: kiln needs CUDA 12 or newer", lt_syms[i].name);
        }
        memcpy((char *)&kiln_lt + lt_syms[i].offset, &fn, sizeof fn);
    }
    return KILN_OK;
}

static pthread_mutex_t load_mu = PTHREAD_MUTEX_INITIALIZER;
static int load_done, load_status;
static kiln_err load_err;

int kiln_lt_load(kiln_err *err) {
    pthread_mutex_lock(&load_mu);
    if (!load_done) {
        load_status = lt_resolve(&load_err);
        load_done = 1;
    }
    pthread_mutex_unlock(&load_mu);
    if (load_status == KILN_OK)
        return KILN_OK;
    return kiln_errf(err, load_status, "%s", load_err.msg);
}

/* ---- the GEMM and its column-major view ---- */

static const struct {
    const char *name;
    cublasLtEpilogue_t lt;
} epilogues[KILN_LT_EPI_COUNT] = {
    [KILN_LT_EPI_NONE] = {"none", CUBLASLT_EPILOGUE_DEFAULT},
    [KILN_LT_EPI_BIAS] = {"bias", CUBLASLT_EPILOGUE_BIAS},
    [KILN_LT_EPI_RELU] = {"relu", CUBLASLT_EPILOGUE_RELU},
    [KILN_LT_EPI_GELU] = {"gelu", CUBLASLT_EPILOGUE_GELU},
    [KILN_LT_EPI_BIAS_RELU] = {"bias_relu", CUBLASLT_EPILOGUE_RELU_BIAS},
    [KILN_LT_EPI_BIAS_GELU] = {"bias_gelu", CUBLASLT_EPILOGUE_GELU_BIAS},
};

const char *kiln_lt_epilogue_name(kiln_lt_epilogue e) {
    KILN_ASSERT(e >= 0 && e < KILN_LT_EPI_COUNT);
    return epilogues[e].name;
}

int kiln_lt_epilogue_parse(const char *name, kiln_lt_epilogue *out) {
    for (int e = 0; e < KILN_LT_EPI_COUNT; e++)
        if (strcmp(name, epilogues[e].name) == 0) {
            *out = (kiln_lt_epilogue)e;
            return 0;
        }
    return -1;
}

int kiln_lt_epilogue_has_bias(kiln_lt_epilogue e) {
    return e == KILN_LT_EPI_BIAS || e == KILN_LT_EPI_BIAS_RELU || e == KILN_LT_EPI_BIAS_GELU;
}

static kiln_lt_gemm gemm_packed(int64_t batch, int64_t m, int64_t n, int64_t k, kiln_dtype t,
                                int trans_b) {
    kiln_lt_gemm g = {.m = m,
                      .n = n,
                      .k = k,
                      .batch = batch,
                      .a_type = t,
                      .b_type = t,
                      .d_type = t,
                      .trans_b = trans_b,
                      .lda = k,
                      .ldb = trans_b ? k : n,
                      .ldd = n,
                      .epilogue = KILN_LT_EPI_NONE,
                      .bias_type = t};
    if (batch > 1) {
        g.stride_a = m * k;
        g.stride_b = k * n;
        g.stride_d = m * n;
    }
    return g;
}

kiln_lt_gemm kiln_lt_gemm_linear(int64_t m, int64_t n, int64_t k, kiln_dtype t) {
    return gemm_packed(1, m, n, k, t, 1);
}

kiln_lt_gemm kiln_lt_gemm_matmul(int64_t m, int64_t n, int64_t k, kiln_dtype t) {
    return gemm_packed(1, m, n, k, t, 0);
}

kiln_lt_gemm kiln_lt_gemm_bmm(int64_t batch, int64_t m, int64_t n, int64_t k, kiln_dtype t) {
    return gemm_packed(batch, m, n, k, t, 0);
}

/* cuBLASLt's name for a kiln dtype it multiplies, or -1. */
static int lt_type(kiln_dtype t, cudaDataType_t *out) {
    switch (t) {
    case KILN_F32:
        *out = CUDA_R_32F;
        return 0;
    case KILN_F16:
        *out = CUDA_R_16F;
        return 0;
    case KILN_BF16:
        *out = CUDA_R_16BF;
        return 0;
    case KILN_F8_E4M3:
        *out = CUDA_R_8F_E4M3;
        return 0;
    case KILN_F8_E5M2:
        *out = CUDA_R_8F_E5M2;
        return 0;
    default:
        return -1;
    }
}

int kiln_lt_gemm_view(const kiln_lt_gemm *g, kiln_lt_view *v, kiln_err *err) {
    memset(v, 0, sizeof *v);
    if (g->m <= 0 || g->n <= 0 || g->k <= 0 || g->batch <= 0 || g->batch > INT32_MAX)
        return kiln_errf(err, KILN_ERR_INVALID,
                         "gemm: sizes must be positive (M %lld N %lld K %lld batch %lld)",
                         (long long)g->m, (long long)g->n, (long long)g->k, (long long)g->batch);
    if (g->epilogue < 0 || g->epilogue >= KILN_LT_EPI_COUNT)
        return kiln_errf(err, KILN_ERR_INVALID, "gemm: epilogue %d unknown", (int)g->epilogue);
    if (lt_type(g->a_type, &v->b_type) || lt_type(g->b_type, &v->a_type) ||
        lt_type(g->d_type, &v->d_type) || kiln_dtype_is_fp8(g->d_type))
        return kiln_errf(
            err, KILN_ERR_UNSUPPORTED, "gemm: cuBLASLt does not multiply %s × %s into %s in kiln",
            kiln_dtype_name(g->a_type), kiln_dtype_name(g->b_type), kiln_dtype_name(g->d_type));
    if (kiln_dtype_is_fp8(g->a_type) != kiln_dtype_is_fp8(g->b_type) ||
        (!kiln_dtype_is_fp8(g->a_type) && g->a_type != g->b_type))
        return kiln_errf(err, KILN_ERR_UNSUPPORTED, "gemm: mixed inputs %s × %s",
                         kiln_dtype_name(g->a_type), kiln_dtype_name(g->b_type));
    /* fp8 kernels take only cuBLASLt's "TN" layout: kiln's B stored [N, K] (a linear weight) and
     * A stored [M, K]. */
    if (kiln_dtype_is_fp8(g->a_type) && (g->trans_a || !g->trans_b))
        return kiln_errf(err, KILN_ERR_UNSUPPORTED,
                         "gemm: fp8 needs A as [M, K] and B as [N, K] (x @ wᵀ)");
    /* Each stored row must fit its leading dimension. */
    int64_t a_row = g->trans_a ? g->m : g->k, b_row = g->trans_b ? g->k : g->n;
    if (g->lda < a_row || g->ldb < b_row || g->ldd < g->n)
        return kiln_errf(err, KILN_ERR_INVALID,
                         "gemm: leading dimensions lda %lld ldb %lld ldd %lld shorter than a "
                         "row (%lld, %lld, %lld)",
                         (long long)g->lda, (long long)g->ldb, (long long)g->ldd, (long long)a_row,
                         (long long)b_row, (long long)g->n);
    if (g->stride_a < 0 || g->stride_b < 0 || g->stride_d < 0 || (g->batch > 1 && g->stride_d == 0))
        return kiln_errf(err, KILN_ERR_INVALID,
                         "gemm: batch strides must be ≥ 0 and the output's positive");
    if (kiln_lt_epilogue_has_bias(g->epilogue) && lt_type(g->bias_type, &v->bias_type))
        return kiln_errf(err, KILN_ERR_UNSUPPORTED, "gemm: bias of type %s",
                         kiln_dtype_name(g->bias_type));
    v->swapped = 1;
    v->m = (uint64_t)g->n;
    v->n = (uint64_t)g->m;
    v->k = (uint64_t)g->k;
    /* cuBLASLt's A is kiln's B: B stored [K, N] is column-major N×K (op N); stored [N, K] it is
     * K×N, read transposed (op T). Likewise its B is kiln's A. */
    v->op_a = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    v->rows_a = g->trans_b ? v->k : v->m;
    v->cols_a = g->trans_b ? v->m : v->k;
    v->lda = g->ldb;
    v->op_b = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    v->rows_b = g->trans_a ? v->n : v->k;
    v->cols_b = g->trans_a ? v->k : v->n;
    v->ldb = g->lda;
    v->rows_d = v->m;
    v->cols_d = v->n;
    v->ldd = g->ldd;
    v->batch = (int32_t)g->batch;
    v->stride_a = g->stride_b;
    v->stride_b = g->stride_a;
    v->stride_d = g->stride_d;
    v->epilogue = epilogues[g->epilogue].lt;
    return KILN_OK;
}

/* ---- the config ---- */

static const char *const config_fields[] = {"algo",        "tile",     "stages", "split_k",
                                            "reduction",   "swizzle",  "custom", "cluster",
                                            "inner_shape", "workspace"};
enum { N_CONFIG_FIELDS = sizeof config_fields / sizeof config_fields[0] };

/* The fields in config_fields' order, widened to one type for the JSON code. */
static void config_get(const kiln_lt_config *c, double v[N_CONFIG_FIELDS]) {
    const double vals[N_CONFIG_FIELDS] = {
        c->algo,    c->tile,   c->stages,  c->split_k,     c->reduction,
        c->swizzle, c->custom, c->cluster, c->inner_shape, (double)c->workspace};
    memcpy(v, vals, sizeof vals);
}

cJSON *kiln_lt_config_to_json(const kiln_lt_config *c) {
    cJSON *o = cJSON_CreateObject();
    double v[N_CONFIG_FIELDS];
    config_get(c, v);
    for (int i = 0; i < N_CONFIG_FIELDS; i++)
        cJSON_AddNumberToObject(o, config_fields[i], v[i]);
    cJSON_AddNumberToObject(o, "heuristic", c->heuristic);
    return o;
}

int kiln_lt_config_from_json(const cJSON *o, kiln_lt_config *out, kiln_err *err) {
    /* The largest value each field's type holds; workspace: what cJSON prints exactly (15
     * significant digits). */
    static const double max[N_CONFIG_FIELDS] = {
        INT32_MAX,  UINT32_MAX, UINT32_MAX, INT32_MAX,  UINT32_MAX,
        UINT32_MAX, UINT32_MAX, UINT16_MAX, UINT16_MAX, 999999999999999.0};
    double v[N_CONFIG_FIELDS + 1];
    if (!cJSON_IsObject(o))
        return kiln_errf(err, KILN_ERR_FORMAT, "cuBLASLt config: not a JSON object");
    for (int i = 0; i <= N_CONFIG_FIELDS; i++) {
        const char *name = i < N_CONFIG_FIELDS ? config_fields[i] : "heuristic";
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
        if (!f && i == N_CONFIG_FIELDS) {
            v[i] = -1;
            continue;
        }
        if (!cJSON_IsNumber(f))
            return kiln_errf(err, KILN_ERR_FORMAT, "cuBLASLt config: '%s' %s", name,
                             f ? "is not a number" : "is missing");
        double x = f->valuedouble;
        double lo = i == N_CONFIG_FIELDS ? -1 : 0, hi = i == N_CONFIG_FIELDS ? INT32_MAX : max[i];
        if (!(x >= lo && x <= hi) || x != floor(x))
            return kiln_errf(err, KILN_ERR_FORMAT,
                             "cuBLASLt config: '%s' is %g, not an integer in [%g, %g]", name, x, lo,
                             hi);
        v[i] = x;
    }
    if (v[3] < 1)
        return kiln_errf(err, KILN_ERR_FORMAT, "cuBLASLt config: 'split_k' must be ≥ 1");
    *out = (kiln_lt_config){.algo = (int32_t)v[0],
                            .tile = (uint32_t)v[1],
                            .stages = (uint32_t)v[2],
                            .split_k = (int32_t)v[3],
                            .reduction = (uint32_t)v[4],
                            .swizzle = (uint32_t)v[5],
                            .custom = (uint32_t)v[6],
                            .cluster = (uint16_t)v[7],
                            .inner_shape = (uint16_t)v[8],
                            .workspace = (uint64_t)v[9],
                            .heuristic = (int)v[10]};
    return KILN_OK;
}

int kiln_lt_config_same(const kiln_lt_config *a, const kiln_lt_config *b) {
    return a->algo == b->algo && a->tile == b->tile && a->stages == b->stages &&
           a->split_k == b->split_k && a->reduction == b->reduction && a->swizzle == b->swizzle &&
           a->custom == b->custom && a->cluster == b->cluster && a->inner_shape == b->inner_shape;
}

void kiln_lt_config_format(const kiln_lt_config *c, char *buf, size_t cap) {
    snprintf(buf, cap,
             "algo %d tile %u stages %u split %d red %u swz %u cust %u cluster %u inner %u ws %llu",
             c->algo, c->tile, c->stages, c->split_k, c->reduction, c->swizzle, c->custom,
             c->cluster, c->inner_shape, (unsigned long long)c->workspace);
}

/* ---- a GEMM as JSON ---- */

/* The integer fields of kiln_lt_gemm, in JSON order, with the least value each may take. */
#define GEMM_INT_FIELDS(X)                                                                         \
    X(m, 1)                                                                                        \
    X(n, 1)                                                                                        \
    X(k, 1)                                                                                        \
    X(batch, 1)                                                                                    \
    X(stride_a, 0)                                                                                 \
    X(stride_b, 0) X(stride_d, 0) X(trans_a, 0) X(trans_b, 0) X(lda, 0) X(ldb, 0) X(ldd, 0)

cJSON *kiln_lt_gemm_to_json(const kiln_lt_gemm *g) {
    cJSON *o = cJSON_CreateObject();
#define PUT(f, lo) cJSON_AddNumberToObject(o, #f, (double)g->f);
    GEMM_INT_FIELDS(PUT)
#undef PUT
    cJSON_AddStringToObject(o, "a_type", kiln_dtype_name(g->a_type));
    cJSON_AddStringToObject(o, "b_type", kiln_dtype_name(g->b_type));
    cJSON_AddStringToObject(o, "d_type", kiln_dtype_name(g->d_type));
    cJSON_AddStringToObject(o, "epilogue", kiln_lt_epilogue_name(g->epilogue));
    cJSON_AddStringToObject(o, "bias_type", kiln_dtype_name(g->bias_type));
    if (g->fast_accum) /* absent: 0, as every library written before it */
        cJSON_AddNumberToObject(o, "fast_accum", 1);
    return o;
}

/* An integer field of o in [lo, 2^53]. */
static int gemm_int(const cJSON *o, const char *name, double lo, int64_t *out, kiln_err *err) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsNumber(f))
        return kiln_errf(err, KILN_ERR_FORMAT, "cuBLASLt GEMM: '%s' %s", name,
                         f ? "is not a number" : "is missing");
    double x = f->valuedouble;
    if (!(x >= lo && x <= 9007199254740992.0) || x != floor(x))
        return kiln_errf(err, KILN_ERR_FORMAT, "cuBLASLt GEMM: '%s' is %g, not an integer ≥ %g",
                         name, x, lo);
    *out = (int64_t)x;
    return KILN_OK;
}

static int gemm_dtype(const cJSON *o, const char *name, kiln_dtype *out, kiln_err *err) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsString(f) || kiln_dtype_parse(f->valuestring, out) != 0)
        return kiln_errf(err, KILN_ERR_FORMAT, "cuBLASLt GEMM: '%s' %s", name,
                         f ? "is not a dtype kiln knows" : "is missing");
    return KILN_OK;
}

int kiln_lt_gemm_from_json(const cJSON *o, kiln_lt_gemm *out, kiln_err *err) {
    if (!cJSON_IsObject(o))
        return kiln_errf(err, KILN_ERR_FORMAT, "cuBLASLt GEMM: not a JSON object");
    kiln_lt_gemm g;
    memset(&g, 0, sizeof g);
    int64_t v;
    int rc;
#define GET(f, lo)                                                                                 \
    if ((rc = gemm_int(o, #f, lo, &v, err)))                                                       \
        return rc;                                                                                 \
    g.f = v;
    GEMM_INT_FIELDS(GET)
#undef GET
    if (g.trans_a > 1 || g.trans_b > 1)
        return kiln_errf(err, KILN_ERR_FORMAT, "cuBLASLt GEMM: 'trans_a'/'trans_b' must be 0 or 1");
    if ((rc = gemm_dtype(o, "a_type", &g.a_type, err)) ||
        (rc = gemm_dtype(o, "b_type", &g.b_type, err)) ||
        (rc = gemm_dtype(o, "d_type", &g.d_type, err)) ||
        (rc = gemm_dtype(o, "bias_type", &g.bias_type, err)))
        return rc;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "epilogue");
    if (!cJSON_IsString(e) || kiln_lt_epilogue_parse(e->valuestring, &g.epilogue) != 0)
        return kiln_errf(err, KILN_ERR_FORMAT, "cuBLASLt GEMM: 'epilogue' %s",
                         e ? "is not one of none, bias, relu, gelu, bias_relu, bias_gelu"
                           : "is missing");
    if (cJSON_HasObjectItem(o, "fast_accum")) {
        if ((rc = gemm_int(o, "fast_accum", 0, &v, err)))
            return rc;
        if (v > 1)
            return kiln_errf(err, KILN_ERR_FORMAT, "cuBLASLt GEMM: 'fast_accum' must be 0 or 1");
        g.fast_accum = (int)v;
    }
    *out = g;
    return KILN_OK;
}

/* ---- plans ---- */

struct kiln_lt_plan {
    kiln_lt_gemm g;
    kiln_lt_view v;
    cublasLtHandle_t handle;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld; /* cuBLASLt's A, B and D (C is D: beta is 0) */
    /* the algorithm kiln_lt_run built last, so that a run of the same config only launches */
    int have_algo;
    kiln_lt_config algo_config;
    cublasLtMatmulAlgo_t algo;
    uint64_t algo_workspace;
    uint64_t bias, a_scale, b_scale; /* what desc holds */
};

static int lt_fail(cublasStatus_t s, const char *what, kiln_err *err) {
    return kiln_errf(err, KILN_ERR_BACKEND, "%s failed: %s", what, kiln_lt.GetStatusName(s));
}

#define LT_TRY(call, what)                                                                         \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            rc = lt_fail(s_, what, err);                                                           \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

static cublasStatus_t layout_create(cublasLtMatrixLayout_t *l, cudaDataType_t t, uint64_t rows,
                                    uint64_t cols, int64_t ld, int32_t batch, int64_t stride) {
    cublasStatus_t s = kiln_lt.MatrixLayoutCreate(l, t, rows, cols, ld);
    if (s == CUBLAS_STATUS_SUCCESS && batch > 1)
        s = kiln_lt.MatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                             sizeof batch);
    if (s == CUBLAS_STATUS_SUCCESS && batch > 1)
        s = kiln_lt.MatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                             &stride, sizeof stride);
    return s;
}

int kiln_lt_plan_create(const kiln_lt_gemm *g, kiln_lt_plan **out, kiln_err *err) {
    *out = NULL;
    kiln_lt_view v;
    int rc = kiln_lt_gemm_view(g, &v, err);
    if (rc || (rc = kiln_lt_load(err)))
        return rc;
    kiln_lt_plan *p = xcalloc(1, sizeof *p);
    p->g = *g;
    p->v = v;
    LT_TRY(kiln_lt.Create(&p->handle), "cublasLtCreate");
    LT_TRY(kiln_lt.MatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
           "cublasLtMatmulDescCreate");
    int32_t op_a = v.op_a, op_b = v.op_b;
    uint32_t epi = v.epilogue;
    LT_TRY(kiln_lt.MatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a),
           "setting TRANSA");
    LT_TRY(kiln_lt.MatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b),
           "setting TRANSB");
    LT_TRY(kiln_lt.MatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
           "setting the epilogue");
    if (g->fast_accum && kiln_dtype_is_fp8(g->a_type)) {
        int8_t fast = 1;
        LT_TRY(kiln_lt.MatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast,
                                              sizeof fast),
               "setting fast accumulation");
    }
    if (kiln_lt_epilogue_has_bias(g->epilogue)) {
        int32_t bt = v.bias_type;
        LT_TRY(kiln_lt.MatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                              sizeof bt),
               "setting the bias type");
    }
    LT_TRY(layout_create(&p->la, v.a_type, v.rows_a, v.cols_a, v.lda, v.batch, v.stride_a),
           "the layout of A");
    LT_TRY(layout_create(&p->lb, v.b_type, v.rows_b, v.cols_b, v.ldb, v.batch, v.stride_b),
           "the layout of B");
    LT_TRY(layout_create(&p->ld, v.d_type, v.rows_d, v.cols_d, v.ldd, v.batch, v.stride_d),
           "the layout of D");
    *out = p;
    return KILN_OK;
out:
    kiln_lt_plan_destroy(p);
    return rc;
}

void kiln_lt_plan_destroy(kiln_lt_plan *p) {
    if (!p)
        return;
    if (p->la)
        kiln_lt.MatrixLayoutDestroy(p->la);
    if (p->lb)
        kiln_lt.MatrixLayoutDestroy(p->lb);
    if (p->ld)
        kiln_lt.MatrixLayoutDestroy(p->ld);
    if (p->desc)
        kiln_lt.MatmulDescDestroy(p->desc);
    if (p->handle)
        kiln_lt.Destroy(p->handle);
    free(p);
}

static cublasStatus_t algo_init(kiln_lt_plan *p, int id, cublasLtMatmulAlgo_t *algo) {
    return kiln_lt.MatmulAlgoInit(p->handle, CUBLAS_COMPUTE_32F, CUDA_R_32F, p->v.a_type,
                                  p->v.b_type, p->v.d_type, p->v.d_type, id, algo);
}

/* Builds c's algorithm (AlgoInit, then every config attribute; the cluster and inner shape only
 * when set, so that a cuBLASLt without them still replays the others) and asks AlgoCheck.
 * CUBLAS_STATUS_SUCCESS with the workspace it needs in *workspace. */
static cublasStatus_t algo_build(kiln_lt_plan *p, const kiln_lt_config *c,
                                 cublasLtMatmulAlgo_t *algo, uint64_t *workspace) {
    cublasStatus_t s = algo_init(p, c->algo, algo);
#define SET(attr, value)                                                                           \
    if (s == CUBLAS_STATUS_SUCCESS)                                                                \
    s = kiln_lt.MatmulAlgoConfigSetAttribute(algo, attr, &(value), sizeof(value))
    SET(CUBLASLT_ALGO_CONFIG_TILE_ID, c->tile);
    SET(CUBLASLT_ALGO_CONFIG_STAGES_ID, c->stages);
    SET(CUBLASLT_ALGO_CONFIG_SPLITK_NUM, c->split_k);
    SET(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, c->reduction);
    SET(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, c->swizzle);
    SET(CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, c->custom);
    if (c->cluster)
        SET(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, c->cluster);
    if (c->inner_shape)
        SET(CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, c->inner_shape);
#undef SET
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    cublasLtMatmulHeuristicResult_t r;
    memset(&r, 0, sizeof r);
    s = kiln_lt.MatmulAlgoCheck(p->handle, p->desc, p->la, p->lb, p->ld, p->ld, algo, &r);
    if (s == CUBLAS_STATUS_SUCCESS && r.state != CUBLAS_STATUS_SUCCESS)
        s = r.state;
    *workspace = r.workspaceSize;
    return s;
}

/* The config an algorithm holds (the heuristic's answers); attributes this cuBLASLt lacks stay 0.
 */
static kiln_lt_config config_read(const cublasLtMatmulAlgo_t *algo) {
    kiln_lt_config c = {.split_k = 1, .heuristic = -1};
    size_t w;
#define GET(attr, field)                                                                           \
    kiln_lt.MatmulAlgoConfigGetAttribute(algo, attr, &c.field, sizeof c.field, &w)
    GET(CUBLASLT_ALGO_CONFIG_ID, algo);
    GET(CUBLASLT_ALGO_CONFIG_TILE_ID, tile);
    GET(CUBLASLT_ALGO_CONFIG_STAGES_ID, stages);
    GET(CUBLASLT_ALGO_CONFIG_SPLITK_NUM, split_k);
    GET(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, reduction);
    GET(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, swizzle);
    GET(CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, custom);
    GET(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, cluster);
    GET(CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, inner_shape);
#undef GET
    if (c.split_k < 1)
        c.split_k = 1;
    return c;
}

/* An array of uint32 capability values (tiles, stages); {0} (undefined) when the algorithm lists
 * none. Heap; *n its length. */
static uint32_t *cap_ids(const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoCapAttributes_t attr,
                         int *n) {
    size_t bytes = 0;
    uint32_t *ids = NULL;
    if (kiln_lt.MatmulAlgoCapGetAttribute(algo, attr, NULL, 0, &bytes) == CUBLAS_STATUS_SUCCESS &&
        bytes >= sizeof *ids) {
        ids = xmalloc(bytes);
        if (kiln_lt.MatmulAlgoCapGetAttribute(algo, attr, ids, bytes, &bytes) ==
            CUBLAS_STATUS_SUCCESS) {
            *n = (int)(bytes / sizeof *ids);
            return ids;
        }
        free(ids);
    }
    ids = xcalloc(1, sizeof *ids);
    *n = 1;
    return ids;
}

static uint32_t cap_u32(const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoCapAttributes_t attr) {
    uint32_t v = 0;
    size_t w;
    if (kiln_lt.MatmulAlgoCapGetAttribute(algo, attr, &v, sizeof v, &w) != CUBLAS_STATUS_SUCCESS)
        return 0;
    return v;
}

typedef struct {
    kiln_lt_found *v;
    int n, cap;
} found_list;

static void found_add(found_list *l, const kiln_lt_found *f) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->v = xrealloc(l->v, (size_t)l->cap * sizeof *l->v);
    }
    l->v[l->n++] = *f;
}

static int found_cmp(const void *x, const void *y) {
    const kiln_lt_found *a = x, *b = y;
    if (a->tier != b->tier)
        return a->tier - b->tier;
    if (a->rank != b->rank)
        return a->rank - b->rank;
    return a->algo_pos - b->algo_pos;
}

int kiln_lt_order(const kiln_lt_config *heur, int n_heur, kiln_lt_found *found, int n_found,
                  kiln_lt_config *out) {
    if (n_found > 0)
        qsort(found, (size_t)n_found, sizeof *found, found_cmp);
    int n = 0;
    for (int i = 0; i < n_heur; i++)
        out[n++] = heur[i];
    for (int i = 0; i < n_found; i++) {
        int dup = 0;
        for (int j = 0; j < n_heur && !dup; j++)
            dup = kiln_lt_config_same(&heur[j], &found[i].c);
        if (!dup)
            out[n++] = found[i].c;
    }
    return n;
}

/* Cluster shapes tried on every algorithm: cublasLt.h offers no capability listing them, so
 * AlgoCheck decides (auto, then the shapes a Hopper GEMM uses). */
static const uint16_t cluster_ids[] = {CUBLASLT_CLUSTER_SHAPE_AUTO,  CUBLASLT_CLUSTER_SHAPE_1x1x1,
                                       CUBLASLT_CLUSTER_SHAPE_2x1x1, CUBLASLT_CLUSTER_SHAPE_1x2x1,
                                       CUBLASLT_CLUSTER_SHAPE_2x2x1, CUBLASLT_CLUSTER_SHAPE_4x1x1,
                                       CUBLASLT_CLUSTER_SHAPE_1x4x1};
/* Split-K counts tried where the algorithm splits K. */
static const int32_t split_counts[] = {2, 3, 4, 6, 8, 16};
/* AlgoCheck calls one enumeration may make: the plain configs of every algorithm get the first
 * share, their variants what remains. */
#define MAX_PLAIN_CHECKS 200000
#define MAX_CHECKS 400000

/* What an algorithm offers beyond its tiles and stages. */
typedef struct {
    int id;
    uint32_t split_ok, red_mask, swz_max, custom_max;
    int n_variants;
} algo_caps;

/* Appends the plain configs of algorithm caps->id (tiles × stages × cluster shapes, split 1)
 * that AlgoCheck accepts within limit to l, and fills the rest of *caps. *checks counts AlgoCheck
 * calls. */
static void enumerate_plain(kiln_lt_plan *p, algo_caps *caps, int algo_pos, uint64_t limit,
                            found_list *l, long *checks) {
    cublasLtMatmulAlgo_t algo;
    if (algo_init(p, caps->id, &algo) != CUBLAS_STATUS_SUCCESS)
        return;
    int n_tiles, n_stages;
    uint32_t *tiles = cap_ids(&algo, CUBLASLT_ALGO_CAP_TILE_IDS, &n_tiles);
    uint32_t *stages = cap_ids(&algo, CUBLASLT_ALGO_CAP_STAGES_IDS, &n_stages);
    caps->split_ok = cap_u32(&algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT);
    caps->red_mask = cap_u32(&algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK);
    caps->swz_max = cap_u32(&algo, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT) ? 1 : 0;
    caps->custom_max = cap_u32(&algo, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX);
    if (caps->custom_max > 64)
        caps->custom_max = 64;
    int rank = 0;
    const int n_clusters = (int)(sizeof cluster_ids / sizeof cluster_ids[0]);
    /* Tiles vary fastest, so that a capped enumeration still spans each algorithm's tiles. */
    for (int cl = 0; cl < n_clusters; cl++)
        for (int s = 0; s < n_stages; s++)
            for (int t = 0; t < n_tiles && *checks < MAX_PLAIN_CHECKS; t++) {
                kiln_lt_config c = {.algo = caps->id,
                                    .tile = tiles[t],
                                    .stages = stages[s],
                                    .split_k = 1,
                                    .cluster = cluster_ids[cl],
                                    .heuristic = -1};
                cublasLtMatmulAlgo_t a;
                ++*checks;
                if (algo_build(p, &c, &a, &c.workspace) == CUBLAS_STATUS_SUCCESS &&
                    c.workspace <= limit)
                    found_add(l, &(kiln_lt_found){c, 0, rank++, algo_pos});
            }
    free(tiles);
    free(stages);
}

/* The reduction schemes a split-K config of p may use: every one the algorithm offers when D is
 * fp32, else only the fp32 workspace (COMPUTE_TYPE). Summing the partial products in D's bf16/fp16
 * (INPLACE, OUTPUT_TYPE) rounds each partial: on the H200 all 8 such configs of the 4096x9216x2304
 * sweep failed the gate's proof, so they are not worth a candidate. */
static uint32_t reduction_mask(const kiln_lt_plan *p, const algo_caps *caps) {
    if (p->g.d_type == KILN_F32)
        return caps->red_mask;
    return caps->red_mask & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
}

/* Appends the variants of plain config f that AlgoCheck accepts within limit to l: split-K (×
 * each reduction scheme reduction_mask allows) × swizzle × custom option. */
static void enumerate_variants(kiln_lt_plan *p, const kiln_lt_found *f, algo_caps *caps,
                               uint64_t limit, found_list *l, long *checks) {
    const uint32_t red_mask = reduction_mask(p, caps);
    const int n_splits =
        caps->split_ok && red_mask ? (int)(sizeof split_counts / sizeof split_counts[0]) : 0;
    for (int sp = -1; sp < n_splits; sp++)
        /* split 1 takes no reduction scheme; a split one each scheme of the mask */
        for (uint32_t red = sp < 0 ? 0 : 1; red <= (sp < 0 ? 0u : 4u); red = red ? red << 1 : 1) {
            if (sp >= 0 && !(red & red_mask))
                continue;
            for (uint32_t swz = 0; swz <= caps->swz_max; swz++)
                for (uint32_t cu = 0; cu <= caps->custom_max; cu++) {
                    if (sp < 0 && swz == 0 && cu == 0)
                        continue; /* the plain config itself */
                    if (*checks >= MAX_CHECKS)
                        return;
                    kiln_lt_config v = f->c;
                    v.split_k = sp < 0 ? 1 : split_counts[sp];
                    v.reduction = red;
                    v.swizzle = swz;
                    v.custom = cu;
                    cublasLtMatmulAlgo_t a;
                    ++*checks;
                    if (algo_build(p, &v, &a, &v.workspace) == CUBLAS_STATUS_SUCCESS &&
                        v.workspace <= limit)
                        found_add(l, &(kiln_lt_found){v, 1, caps->n_variants++, f->algo_pos});
                }
        }
}

int kiln_lt_enumerate(kiln_lt_plan *p, uint64_t workspace_limit, int cap, kiln_lt_config **out,
                      int *n_out, int *n_valid, kiln_err *err) {
    *out = NULL;
    *n_out = *n_valid = 0;
    int rc = KILN_OK;
    cublasLtMatmulPreference_t pref = NULL;
    kiln_lt_config heur[8];
    int n_heur = 0;
    found_list l = {0};
    LT_TRY(kiln_lt.MatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    LT_TRY(kiln_lt.MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &workspace_limit, sizeof workspace_limit),
           "setting the workspace limit");
    cublasLtMatmulHeuristicResult_t hr[8];
    int n_hr = 0;
    memset(hr, 0, sizeof hr);
    /* No heuristic answer is not an error: the enumeration may still find configs. */
    if (kiln_lt.MatmulAlgoGetHeuristic(p->handle, p->desc, p->la, p->lb, p->ld, p->ld, pref, 8, hr,
                                       &n_hr) != CUBLAS_STATUS_SUCCESS)
        n_hr = 0;
    for (int i = 0; i < n_hr; i++) {
        if (hr[i].state != CUBLAS_STATUS_SUCCESS)
            continue;
        kiln_lt_config c = config_read(&hr[i].algo);
        cublasLtMatmulAlgo_t a;
        /* Only what kiln can replay from the config's fields counts. */
        if (algo_build(p, &c, &a, &c.workspace) != CUBLAS_STATUS_SUCCESS ||
            c.workspace > workspace_limit)
            continue;
        int dup = 0;
        for (int j = 0; j < n_heur && !dup; j++)
            dup = kiln_lt_config_same(&heur[j], &c);
        if (!dup) {
            c.heuristic = n_heur;
            heur[n_heur++] = c;
        }
    }
    int ids[512], n_ids = 0;
    LT_TRY(kiln_lt.MatmulAlgoGetIds(p->handle, CUBLAS_COMPUTE_32F, CUDA_R_32F, p->v.a_type,
                                    p->v.b_type, p->v.d_type, p->v.d_type, 512, ids, &n_ids),
           "cublasLtMatmulAlgoGetIds");
    long checks = 0;
    algo_caps caps[512];
    for (int i = 0; i < n_ids; i++) {
        caps[i] = (algo_caps){.id = ids[i]};
        enumerate_plain(p, &caps[i], i, workspace_limit, &l, &checks);
    }
    /* Variants in the plain configs' order, so that a spent budget leaves every algorithm some. */
    int n_plain = l.n;
    if (n_plain > 0)
        qsort(l.v, (size_t)n_plain, sizeof *l.v, found_cmp);
    for (int i = 0; i < n_plain && checks < MAX_CHECKS; i++) {
        kiln_lt_found f = l.v[i]; /* found_add may move l.v */
        enumerate_variants(p, &f, &caps[f.algo_pos], workspace_limit, &l, &checks);
    }
    kiln_lt_config *res = xmalloc((size_t)(n_heur + l.n + 1) * sizeof *res);
    int n = kiln_lt_order(heur, n_heur, l.v, l.n, res);
    *n_valid = n;
    *n_out = n < cap ? n : (cap > 0 ? cap : 0);
    *out = res;
out:
    free(l.v);
    if (pref)
        kiln_lt.MatmulPreferenceDestroy(pref);
    return rc;
}

/* Points desc's attribute at value when it holds another one. */
static int desc_pointer(kiln_lt_plan *p, cublasLtMatmulDescAttributes_t attr, uint64_t *held,
                        uint64_t value, const char *what, kiln_err *err) {
    if (*held == value)
        return KILN_OK;
    void *ptr = (void *)(uintptr_t)value;
    cublasStatus_t s = kiln_lt.MatmulDescSetAttribute(p->desc, attr, &ptr, sizeof ptr);
    if (s != CUBLAS_STATUS_SUCCESS)
        return lt_fail(s, what, err);
    *held = value;
    return KILN_OK;
}

int kiln_lt_run(kiln_lt_plan *p, const kiln_lt_config *c, const kiln_lt_ptrs *ptrs, void *stream,
                kiln_err *err) {
    if (!p->have_algo || !kiln_lt_config_same(&p->algo_config, c)) {
        p->have_algo = 0;
        cublasStatus_t s = algo_build(p, c, &p->algo, &p->algo_workspace);
        if (s != CUBLAS_STATUS_SUCCESS) {
            char desc[192];
            kiln_lt_config_format(c, desc, sizeof desc);
            return kiln_errf(err, KILN_ERR_INVALID, "cuBLASLt rejects %s: %s", desc,
                             kiln_lt.GetStatusName(s));
        }
        p->algo_config = *c;
        p->have_algo = 1;
    }
    if (ptrs->workspace_bytes < p->algo_workspace)
        return kiln_errf(
            err, KILN_ERR_INVALID, "cuBLASLt config needs %llu bytes of workspace, %llu given",
            (unsigned long long)p->algo_workspace, (unsigned long long)ptrs->workspace_bytes);
    if (kiln_lt_epilogue_has_bias(p->g.epilogue) && !ptrs->bias)
        return kiln_errf(err, KILN_ERR_INVALID, "the %s epilogue needs a bias pointer",
                         kiln_lt_epilogue_name(p->g.epilogue));
    int rc;
    if (kiln_lt_epilogue_has_bias(p->g.epilogue) &&
        (rc = desc_pointer(p, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p->bias, ptrs->bias,
                           "setting the bias", err)))
        return rc;
    /* kiln's A is cuBLASLt's B (kiln_lt_view). */
    if (kiln_dtype_is_fp8(p->g.a_type) &&
        ((rc = desc_pointer(p, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &p->a_scale, ptrs->a_scale,
                            "setting A's scale", err)) ||
         (rc = desc_pointer(p, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &p->b_scale, ptrs->b_scale,
                            "setting B's scale", err))))
        return rc;
    const float one = 1.0f, zero = 0.0f;
    void *a = (void *)(uintptr_t)ptrs->a, *b = (void *)(uintptr_t)ptrs->b;
    void *d = (void *)(uintptr_t)ptrs->d, *ws = (void *)(uintptr_t)ptrs->workspace;
    cublasStatus_t s =
        kiln_lt.Matmul(p->handle, p->desc, &one, b, p->la, a, p->lb, &zero, d, p->ld, d, p->ld,
                       &p->algo, ws, p->algo_workspace, (cudaStream_t)stream);
    return s == CUBLAS_STATUS_SUCCESS ? KILN_OK : lt_fail(s, "cublasLtMatmul", err);
}
