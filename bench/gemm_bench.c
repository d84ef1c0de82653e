/* gemm_bench.c: times cuBLASLt's configurations of GEMMs given on the command line on the GPU
 * (build/gemm_bench): per shape, every config kiln enumerates (up to a cap) timed the way the gate
 * times kernels (warm-up, last-level cache flushed before each run, CUDA events, median), then one
 * line: the heuristic's first config, the best enumerated one, its config as JSON, TFLOP/s, and
 * how many configs cuBLASLt accepted.
 *
 *   build/gemm_bench [--configs N] [--reps R] [--warmup W] [--workspace-mib W] [--layout L]
 *                    [--epilogue E] M N K [batch] [dtype] ...
 *
 * Shapes repeat as groups of "M N K [batch] [dtype]" (dtype bfloat16, float16, float32,
 * float8_e4m3fn, float8_e5m2; fp8 writes bfloat16 and multiplies x @ wᵀ, the layout its kernels
 * take); --layout linear (x [M,K] @ w[N,K]ᵀ, default) or matmul ([M,K] @ [K,N]). Each result line
 * starts "RESULT " and is one JSON object (bench/gemm_device.sh reads them).
 *
 * A tool of its own rather than a kiln subcommand: it measures cuBLASLt's table for the lead on the
 * device and takes shapes, not problem directories; kiln's own entry will be the GEMM family in
 * the gate's search (docs/gemm.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cublaslt.h"
#include "backend/cuda_driver.h"

typedef struct {
    int configs, reps, warmup;
    uint64_t workspace;
    int matmul;
    kiln_lt_epilogue epilogue;
} options;

static CUstream stream;
static CUdeviceptr flush_buf;
static size_t flush_len;
static unsigned flush_round;

#define CU(call)                                                                                   \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            fprintf(stderr, "gemm_bench: %s: %s\n", #call, kiln_cuda_error_text(r_));              \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Fills n elements of type t at p with values in [-1, 1): a host pattern of up to 1M elements,
 * repeated on the device. */
static void fill_random(CUdeviceptr p, size_t n, kiln_dtype t, unsigned seed) {
    size_t es = kiln_dtype_size(t), chunk = n < (1u << 20) ? n : (1u << 20);
    unsigned char *h = malloc(chunk * es);
    uint64_t s = 0x9e3779b97f4a7c15ull * (seed + 1);
    for (size_t i = 0; i < chunk; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        kiln_dtype_store(t, h, i, (double)(s >> 40) / (double)(1ull << 24) * 2 - 1);
    }
    CU(kiln_cuda.MemcpyHtoDAsync(p, h, chunk * es, stream));
    for (size_t done = chunk; done < n; done += chunk)
        CU(kiln_cuda.MemcpyDtoDAsync(p + done * es, p, (n - done < chunk ? n - done : chunk) * es,
                                     stream));
    CU(kiln_cuda.StreamSynchronize(stream));
    free(h);
}

/* One timed run: the cache flushed first, as the gate does (a different byte each time). */
static int timed_run(kiln_lt_plan *p, const kiln_lt_config *c, const kiln_lt_ptrs *ptrs, CUevent e0,
                     CUevent e1, float *us, kiln_err *err) {
    CU(kiln_cuda.MemsetD8Async(flush_buf, (unsigned char)(++flush_round & 0xff), flush_len,
                               stream));
    CU(kiln_cuda.EventRecord(e0, stream));
    int rc = kiln_lt_run(p, c, ptrs, stream, err);
    CU(kiln_cuda.EventRecord(e1, stream));
    CUresult r = kiln_cuda.EventSynchronize(e1);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "gemm_bench: the GEMM failed on the device: %s\n", kiln_cuda_error_text(r));
        exit(1);
    }
    if (rc)
        return rc;
    float ms;
    CU(kiln_cuda.EventElapsedTime(&ms, e0, e1));
    *us = ms * 1000;
    return KILN_OK;
}

/* The median of reps timed runs after warmup untimed ones; a config whose first run takes more
 * than prune_us is timed once (it cannot win). */
static int time_config(kiln_lt_plan *p, const kiln_lt_config *c, const kiln_lt_ptrs *ptrs,
                       const options *o, double prune_us, CUevent e0, CUevent e1, double *us,
                       kiln_err *err) {
    float first, *t = malloc((size_t)o->reps * sizeof *t);
    int rc = timed_run(p, c, ptrs, e0, e1, &first, err);
    if (rc || first > prune_us) {
        *us = first;
        free(t);
        return rc;
    }
    for (int i = 0; i < o->warmup && !rc; i++)
        rc = kiln_lt_run(p, c, ptrs, stream, err);
    for (int i = 0; i < o->reps && !rc; i++)
        rc = timed_run(p, c, ptrs, e0, e1, &t[i], err);
    if (!rc) {
        qsort(t, (size_t)o->reps, sizeof *t, cmp_float);
        *us = o->reps % 2 ? t[o->reps / 2] : 0.5 * (t[o->reps / 2 - 1] + t[o->reps / 2]);
    }
    free(t);
    return rc;
}

/* Largest |x - y| over the bf16/fp16/fp32 outputs of two configs, relative to the largest |y|. */
static double compare(CUdeviceptr x, CUdeviceptr y, size_t n, kiln_dtype t) {
    size_t es = kiln_dtype_size(t);
    unsigned char *hx = malloc(n * es), *hy = malloc(n * es);
    CU(kiln_cuda.MemcpyDtoHAsync(hx, x, n * es, stream));
    CU(kiln_cuda.MemcpyDtoHAsync(hy, y, n * es, stream));
    CU(kiln_cuda.StreamSynchronize(stream));
    double diff = 0, big = 0;
    for (size_t i = 0; i < n; i++) {
        double a = kiln_dtype_load(t, hx, i), b = kiln_dtype_load(t, hy, i);
        if (!(fabs(a - b) <= diff))
            diff = isnan(a - b) ? INFINITY : fabs(a - b);
        if (fabs(b) > big)
            big = fabs(b);
    }
    free(hx);
    free(hy);
    return big > 0 ? diff / big : diff;
}

/* Times one shape and prints its RESULT line; 0, or 1 with a line saying why it failed. */
static int bench_shape(int64_t M, int64_t N, int64_t K, int64_t batch, kiln_dtype t,
                       const options *o) {
    char shape[160];
    snprintf(shape, sizeof shape, "%s %lldx%lldx%lld%s%.0lld %s", o->matmul ? "matmul" : "linear",
             (long long)M, (long long)N, (long long)K, batch > 1 ? " batch " : "",
             batch > 1 ? (long long)batch : 0ll, kiln_dtype_name(t));
    kiln_lt_gemm g = o->matmul ? kiln_lt_gemm_matmul(M, N, K, t) : kiln_lt_gemm_linear(M, N, K, t);
    if (batch > 1) {
        g.batch = batch;
        g.stride_a = M * K;
        g.stride_b = K * N;
        g.stride_d = M * N;
    }
    if (t == KILN_F8_E4M3 || t == KILN_F8_E5M2)
        g.d_type = g.bias_type = KILN_BF16;
    g.epilogue = o->epilogue;
    kiln_err err = {{0}};
    kiln_lt_plan *p = NULL;
    if (kiln_lt_plan_create(&g, &p, &err)) {
        printf("FAIL %s: %s\n", shape, err.msg);
        return 1;
    }
    kiln_lt_config *cs = NULL;
    int n = 0, n_valid = 0;
    double t0 = now_s();
    int erc = kiln_lt_enumerate(p, o->workspace, o->configs, &cs, &n, &n_valid, &err);
    double enumerate_s = now_s() - t0;
    fprintf(stderr, "  %s: %d configs valid, %d to time, enumerated in %.2f s\n", shape, n_valid, n,
            enumerate_s);
    if (erc || n == 0) {
        printf("FAIL %s: %s\n", shape,
               n == 0 && !err.msg[0] ? "cuBLASLt accepts no config" : err.msg);
        kiln_lt_plan_destroy(p);
        free(cs);
        return 1;
    }
    size_t na = (size_t)(batch * M * K), nb = (size_t)(batch * K * N), nd = (size_t)(batch * M * N);
    CUdeviceptr da, db, dd, dref, dbias, dscale, dws;
    CU(kiln_cuda.MemAlloc(&da, na * kiln_dtype_size(t)));
    CU(kiln_cuda.MemAlloc(&db, nb * kiln_dtype_size(t)));
    CU(kiln_cuda.MemAlloc(&dd, nd * kiln_dtype_size(g.d_type)));
    CU(kiln_cuda.MemAlloc(&dref, nd * kiln_dtype_size(g.d_type)));
    CU(kiln_cuda.MemAlloc(&dbias, (size_t)N * kiln_dtype_size(g.bias_type)));
    CU(kiln_cuda.MemAlloc(&dscale, sizeof(float)));
    CU(kiln_cuda.MemAlloc(&dws, o->workspace ? o->workspace : 256));
    fill_random(da, na, t, 1);
    fill_random(db, nb, t, 2);
    fill_random(dbias, (size_t)N, g.bias_type, 3);
    const float one = 1.0f;
    CU(kiln_cuda.MemcpyHtoDAsync(dscale, &one, sizeof one, stream));
    int fp8 = t == KILN_F8_E4M3 || t == KILN_F8_E5M2;
    kiln_lt_ptrs ptrs = {.a = da,
                         .b = db,
                         .d = dref,
                         .bias = dbias,
                         .a_scale = fp8 ? dscale : 0,
                         .b_scale = fp8 ? dscale : 0,
                         .workspace = dws,
                         .workspace_bytes = o->workspace};
    CUevent e0, e1;
    CU(kiln_cuda.EventCreate(&e0, 0));
    CU(kiln_cuda.EventCreate(&e1, 0));
    double flops = 2.0 * (double)M * (double)N * (double)K * (double)batch;
    double heur_us = -1, best_us = INFINITY;
    int best = -1, n_timed = 0, n_failed = 0;
    for (int i = 0; i < n; i++) {
        double us = 0;
        /* the heuristic's first config writes the reference output, the others dd */
        ptrs.d = i == 0 ? dref : dd;
        int rc = time_config(p, &cs[i], &ptrs, o, isfinite(best_us) ? 2 * best_us : INFINITY, e0,
                             e1, &us, &err);
        char desc[192];
        kiln_lt_config_format(&cs[i], desc, sizeof desc);
        if (rc) {
            n_failed++;
            fprintf(stderr, "  %s: config %d (%s) failed: %s\n", shape, i, desc, err.msg);
            continue;
        }
        n_timed++;
        fprintf(stderr, "  %s: config %d %9.2f us %s\n", shape, i, us, desc);
        if (i == 0 && cs[0].heuristic == 0)
            heur_us = us;
        if (us < best_us) {
            best_us = us;
            best = i;
        }
    }
    int rc = 0;
    if (best < 0) {
        printf("FAIL %s: none of %d configs ran\n", shape, n);
        rc = 1;
    } else {
        /* the winner's output against the heuristic's (or the first config's) */
        ptrs.d = dd;
        double rel = INFINITY;
        if (kiln_lt_run(p, &cs[best], &ptrs, stream, &err) == KILN_OK)
            rel = compare(dd, dref, nd, g.d_type);
        else
            printf("FAIL %s: the best config did not run again: %s\n", shape, err.msg);
        cJSON *o_json = cJSON_CreateObject();
        cJSON_AddStringToObject(o_json, "shape", shape);
        cJSON_AddNumberToObject(o_json, "m", (double)M);
        cJSON_AddNumberToObject(o_json, "n", (double)N);
        cJSON_AddNumberToObject(o_json, "k", (double)K);
        cJSON_AddNumberToObject(o_json, "batch", (double)batch);
        cJSON_AddStringToObject(o_json, "dtype", kiln_dtype_name(t));
        cJSON_AddStringToObject(o_json, "epilogue", kiln_lt_epilogue_name(o->epilogue));
        cJSON_AddNumberToObject(o_json, "heuristic_us", heur_us);
        cJSON_AddNumberToObject(o_json, "best_us", best_us);
        cJSON_AddNumberToObject(o_json, "heuristic_tflops",
                                heur_us > 0 ? flops / heur_us / 1e6 : 0);
        cJSON_AddNumberToObject(o_json, "best_tflops", flops / best_us / 1e6);
        cJSON_AddNumberToObject(o_json, "valid", n_valid);
        cJSON_AddNumberToObject(o_json, "timed", n_timed);
        cJSON_AddNumberToObject(o_json, "failed", n_failed);
        cJSON_AddNumberToObject(o_json, "enumerate_s", enumerate_s);
        cJSON_AddNumberToObject(o_json, "best_rel_diff", rel);
        cJSON_AddNumberToObject(o_json, "cublaslt_version", (double)kiln_lt.GetVersion());
        cJSON_AddItemToObject(o_json, "best_config", kiln_lt_config_to_json(&cs[best]));
        char *text = cJSON_PrintUnformatted(o_json);
        printf("RESULT %s\n", text);
        free(text);
        cJSON_Delete(o_json);
        if (!(rel < 0.02)) {
            printf("FAIL %s: the best config's output differs from the heuristic's by %g "
                   "(relative)\n",
                   shape, rel);
            rc = 1;
        }
    }
    fflush(stdout);
    kiln_cuda.EventDestroy(e0);
    kiln_cuda.EventDestroy(e1);
    CUdeviceptr bufs[] = {da, db, dd, dref, dbias, dscale, dws};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        kiln_cuda.MemFree(bufs[i]);
    free(cs);
    kiln_lt_plan_destroy(p);
    return rc;
}

static void usage(void) {
    fprintf(stderr, "usage: gemm_bench [--configs N] [--reps R] [--warmup W] [--workspace-mib W] "
                    "[--layout linear|matmul] [--epilogue E] M N K [batch] [dtype] ...\n");
    exit(2);
}

static int is_number(const char *s) {
    return *s && strspn(s, "0123456789") == strlen(s);
}

int main(int argc, char **argv) {
    options o = {.configs = 200, .reps = 10, .warmup = 3, .workspace = 32u << 20};
    int i = 1;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
        if (i + 1 >= argc)
            usage();
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--configs"))
            o.configs = atoi(v);
        else if (!strcmp(k, "--reps"))
            o.reps = atoi(v);
        else if (!strcmp(k, "--warmup"))
            o.warmup = atoi(v);
        else if (!strcmp(k, "--workspace-mib"))
            o.workspace = (uint64_t)atoi(v) << 20;
        else if (!strcmp(k, "--layout") && (!strcmp(v, "linear") || !strcmp(v, "matmul")))
            o.matmul = !strcmp(v, "matmul");
        else if (!strcmp(k, "--epilogue") && kiln_lt_epilogue_parse(v, &o.epilogue) == 0)
            ;
        else
            usage();
    }
    if (i >= argc || o.configs < 1 || o.reps < 1 || o.warmup < 0)
        usage();
    CUdevice dev;
    CUcontext ctx;
    kiln_device_info info;
    kiln_err err = {{0}};
    if (kiln_cuda_device_open(0, NULL, &dev, &ctx, &info, &err) ||
        kiln_cuda.CtxSetCurrent(ctx) != CUDA_SUCCESS) {
        printf("FAIL no GPU: %s\n", err.msg);
        return 1;
    }
    if (kiln_lt_load(&err)) {
        printf("FAIL %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "gemm_bench: %s, %d SMs, %zu MiB L2; cuBLASLt %zu\n", info.name, info.n_sms,
            info.l2_bytes >> 20, kiln_lt.GetVersion());
    CU(kiln_cuda.StreamCreate(&stream, 0));
    flush_len = 2 * (info.l2_bytes ? info.l2_bytes : (64u << 20));
    CU(kiln_cuda.MemAlloc(&flush_buf, flush_len));
    int failed = 0;
    while (i < argc) {
        if (argc - i < 3 || !is_number(argv[i]) || !is_number(argv[i + 1]) ||
            !is_number(argv[i + 2]))
            usage();
        int64_t M = atoll(argv[i]), N = atoll(argv[i + 1]), K = atoll(argv[i + 2]), batch = 1;
        i += 3;
        if (i < argc && is_number(argv[i]))
            batch = atoll(argv[i++]);
        kiln_dtype t = KILN_BF16;
        if (i < argc && !is_number(argv[i]) && kiln_dtype_parse(argv[i++], &t))
            usage();
        failed |= bench_shape(M, N, K, batch, t, &o);
    }
    return failed;
}
