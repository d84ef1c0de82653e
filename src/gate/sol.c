/* sol.c: the device's ceilings (copy bandwidth and fp32 FMA rate measured once by kiln's own
 * kernels through the same backend that runs candidates and cached per device; the tensor-core
 * rates derived from the architecture), the rule that picks a problem's flops ceiling, the speed of
 * light and the SOL score.
 */
#include "gate.h"

#include <math.h>
#include <string.h>
#include <time.h>

/* The copy kernel keeps four 16-byte loads in flight per thread before it stores, which is what it
 * takes to saturate HBM; the FMA kernel runs eight independent chains per thread to hide FMA
 * latency. */
static const char cuda_ceiling_src[] =
    "extern \"C\" __global__ void kiln_ceiling_copy(const uint4 *src, uint4 *dst, long long n16) "
    "{\n"
    "    long long stride = (long long)gridDim.x * blockDim.x;\n"
    "    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "    for (; i + 3 * stride < n16; i += 4 * stride) {\n"
    "        uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * "
    "stride];\n"
    "        dst[i] = a; dst[i + stride] = b; dst[i + 2 * stride] = c; dst[i + 3 * stride] = d;\n"
    "    }\n"
    "    for (; i < n16; i += stride) dst[i] = src[i];\n"
    "}\n"
    "extern \"C\" __global__ void kiln_ceiling_copy_once(const uint4 *src, uint4 *dst, long long "
    "n16) {\n"
    "    long long i = blockIdx.x * 4LL * blockDim.x + threadIdx.x;\n"
    "    if (i + 3LL * blockDim.x < n16) {\n"
    "        uint4 a = src[i], b = src[i + blockDim.x], c = src[i + 2 * blockDim.x], d = src[i + 3 "
    "* blockDim.x];\n"
    "        dst[i] = a; dst[i + blockDim.x] = b; dst[i + 2 * blockDim.x] = c; dst[i + 3 * "
    "blockDim.x] = d;\n"
    "    } else {\n"
    "        for (int k = 0; k < 4 && i + k * (long long)blockDim.x < n16; k++)\n"
    "            dst[i + k * blockDim.x] = src[i + k * blockDim.x];\n"
    "    }\n"
    "}\n"
    "extern \"C\" __global__ void kiln_ceiling_fma(float *out, long long iters) {\n"
    "    float v[8];\n"
    "    for (int k = 0; k < 8; k++) v[k] = threadIdx.x * 1e-3f + k;\n"
    "    for (long long i = 0; i < iters; i++)\n"
    "        for (int k = 0; k < 8; k++) v[k] = fmaf(v[k], 0.99991f, 0.00013f);\n"
    "    float s = 0;\n"
    "    for (int k = 0; k < 8; k++) s += v[k];\n"
    "    out[blockIdx.x * blockDim.x + threadIdx.x] = s;\n"
    "}\n";

static const char cpu_ceiling_src[] =
    "#include <string.h>\n"
    "void kiln_ceiling_copy(const void *src, void *dst, int64_t n16) {\n"
    "    const char *s = src; char *d = dst;\n"
    "    int64_t n = n16 * 16, chunk = 1 << 20;\n"
    "    #pragma omp parallel for schedule(static)\n"
    "    for (int64_t off = 0; off < n; off += chunk)\n"
    "        memcpy(d + off, s + off, (size_t)(n - off < chunk ? n - off : chunk));\n"
    "}\n"
    "void kiln_ceiling_copy_once(const void *src, void *dst, int64_t n16) {\n"
    "    kiln_ceiling_copy(src, dst, n16);\n"
    "}\n"
    "void kiln_ceiling_fma(float *out, int64_t iters) {\n"
    "    #pragma omp parallel\n"
    "    {\n"
    "        float v[64];\n"
    "        for (int k = 0; k < 64; k++) v[k] = omp_get_thread_num() * 1e-3f + k;\n"
    "        for (int64_t i = 0; i < iters; i++) {\n"
    "            #pragma omp simd\n"
    "            for (int k = 0; k < 64; k++) v[k] = fmaf(v[k], 0.99991f, 0.00013f);\n"
    "        }\n"
    "        float s = 0;\n"
    "        for (int k = 0; k < 64; k++) s += v[k];\n"
    "        out[omp_get_thread_num()] = s;\n"
    "    }\n"
    "}\n";

static double median_of(double *v, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Runs one launch of entry `reps` times and returns the median time in microseconds. */
static int time_launch(kiln_backend *be, kiln_module *m, const kiln_launch_plan *plan,
                       void **params, int reps, double *median_us, kiln_err *err) {
    kiln_timer *t = NULL;
    double times[16];
    int rc = be->ops->timer_create(be, &t, err);
    if (rc)
        return rc;
    KILN_ASSERT(reps <= 16);
    for (int r = -1; r < reps && rc == KILN_OK; r++) {
        rc = be->ops->timer_start(be, t, err);
        if (!rc)
            rc = be->ops->launch(be, m, plan, params, err);
        if (!rc)
            rc = be->ops->timer_stop(be, t, err);
        if (!rc)
            rc = be->ops->sync(be, err);
        double us = 0;
        if (!rc)
            rc = be->ops->timer_elapsed_us(be, t, &us, err);
        if (r >= 0)
            times[r] = us;
    }
    be->ops->timer_destroy(be, t);
    if (rc == KILN_OK)
        *median_us = median_of(times, reps);
    return rc;
}

static int measure(kiln_backend *be, kiln_ceilings *out, kiln_err *err) {
    int cuda = strcmp(be->ops->name, "cuda") == 0;
    kiln_device_info info;
    be->ops->device_info(be, &info);
    kiln_signature copy_sig = {0}, fma_sig = {0};
    kiln_abi_add_param(&copy_sig, KILN_PARAM_PTR, "src", "const void*");
    kiln_abi_add_param(&copy_sig, KILN_PARAM_PTR, "dst", "void*");
    kiln_abi_add_param(&copy_sig, KILN_PARAM_I64, "n16", "int64_t");
    kiln_abi_add_param(&fma_sig, KILN_PARAM_PTR, "out", "float*");
    kiln_abi_add_param(&fma_sig, KILN_PARAM_I64, "iters", "int64_t");
    kiln_abi copy_abi = {0}, fma_abi = {0};
    copy_abi.n_launches = 2;
    fma_abi.n_launches = 1;
    snprintf(copy_abi.launch[0].entry, sizeof copy_abi.launch[0].entry, "kiln_ceiling_copy");
    snprintf(copy_abi.launch[1].entry, sizeof copy_abi.launch[1].entry, "kiln_ceiling_copy_once");
    snprintf(fma_abi.launch[0].entry, sizeof fma_abi.launch[0].entry, "kiln_ceiling_fma");
    const char *src = cuda ? cuda_ceiling_src : cpu_ceiling_src;
    kiln_module *copy_mod = NULL, *fma_mod = NULL;
    char *log = NULL;
    kiln_devptr a = 0, b = 0, f = 0;
    int rc = be->ops->compile(be, src, &copy_sig, &copy_abi, &copy_mod, &log, err);
    free(log);
    log = NULL;
    if (rc)
        goto done;
    rc = be->ops->compile(be, src, &fma_sig, &fma_abi, &fma_mod, &log, err);
    free(log);
    if (rc)
        goto done;

    /* Copy: a buffer well past the last-level cache so that DRAM, not cache, is measured. */
    size_t n_bytes = (size_t)1 << 30;
    if (info.mem_bytes && n_bytes > info.mem_bytes / 8)
        n_bytes = info.mem_bytes / 8;
    if (!cuda)
        n_bytes = (size_t)256 << 20;
    /* candidate buffers: the copy kernel runs where candidates run (the cpu sandbox sees only
     * those) */
    if ((rc = be->ops->alloc(be, n_bytes, KILN_ALLOC_CANDIDATE, &a, err)) ||
        (rc = be->ops->alloc(be, n_bytes, KILN_ALLOC_CANDIDATE, &b, err)))
        goto done;
    if ((rc = be->ops->memset8(be, a, 0x3c, n_bytes, err)))
        goto done;
    int64_t n16 = (int64_t)(n_bytes / 16);
    void *copy_params[3] = {&a, &b, &n16};
    kiln_launch_plan plan = {0};
    plan.n_launches = 1;
    snprintf(plan.launch[0].entry, sizeof plan.launch[0].entry, "kiln_ceiling_copy");
    unsigned sms = info.n_sms > 0 ? (unsigned)info.n_sms : 1;
    plan.launch[0].grid[1] = plan.launch[0].grid[2] = 1;
    plan.launch[0].block[1] = plan.launch[0].block[2] = 1;
    plan.launch[0].cluster[0] = plan.launch[0].cluster[1] = plan.launch[0].cluster[2] = 1;
    /* The ceiling is the best of several shapes of copy: no single geometry is the fastest on every
     * part, and a ceiling below what a candidate reaches would report more than 100% of light
     * speed. */
    static const struct {
        const char *entry;
        unsigned blocks_per_sm, threads; /* blocks_per_sm 0: one block per 4*threads vectors */
    } shapes[] = {
        {"kiln_ceiling_copy", 16, 512},     {"kiln_ceiling_copy", 8, 1024},
        {"kiln_ceiling_copy", 32, 256},     {"kiln_ceiling_copy_once", 0, 256},
        {"kiln_ceiling_copy_once", 0, 512}, {"kiln_ceiling_copy_once", 0, 1024},
    };
    double best_us = 0;
    for (size_t k = 0; k < (cuda ? sizeof shapes / sizeof shapes[0] : 1); k++) {
        snprintf(plan.launch[0].entry, sizeof plan.launch[0].entry, "%s", shapes[k].entry);
        plan.launch[0].block[0] = shapes[k].threads;
        plan.launch[0].grid[0] =
            shapes[k].blocks_per_sm
                ? sms * shapes[k].blocks_per_sm
                : (unsigned)((n16 + 4 * shapes[k].threads - 1) / (4 * shapes[k].threads));
        double us = 0;
        if ((rc = time_launch(be, copy_mod, &plan, copy_params, 9, &us, err)))
            goto done;
        if (best_us == 0 || us < best_us)
            best_us = us;
    }
    out->copy_gbps = 2.0 * (double)n_bytes / (best_us * 1e-6) / 1e9;

    /* FMA: enough threads to fill every SM, enough iterations to last milliseconds. */
    unsigned threads = cuda ? sms * 8 * 256 : 1024;
    if ((rc = be->ops->alloc(be, (size_t)threads * 4, KILN_ALLOC_CANDIDATE, &f, err)))
        goto done;
    int64_t iters = cuda ? 4096 : 200000;
    void *fma_params[2] = {&f, &iters};
    snprintf(plan.launch[0].entry, sizeof plan.launch[0].entry, "kiln_ceiling_fma");
    plan.launch[0].grid[0] = cuda ? sms * 8 : 1;
    plan.launch[0].block[0] = cuda ? 256 : 1;
    double fma_us = 0;
    if ((rc = time_launch(be, fma_mod, &plan, fma_params, 5, &fma_us, err)))
        goto done;
    /* cpu: every OpenMP thread runs 64 lanes */
    double lanes = cuda ? (double)threads * 8 : (double)info.n_sms * 64;
    out->fma_gflops = 2.0 * lanes * (double)iters / (fma_us * 1e-6) / 1e9;

done:
    if (a)
        be->ops->free(be, a);
    if (b)
        be->ops->free(be, b);
    if (f)
        be->ops->free(be, f);
    if (copy_mod)
        be->ops->module_free(be, copy_mod);
    if (fma_mod)
        be->ops->module_free(be, fma_mod);
    return rc;
}

static char *cache_path(const kiln_device_info *info) {
    char *dir = kiln_cache_path("ceilings");
    char safe[80];
    size_t k = 0;
    for (const char *s = info->uuid; *s && k + 1 < sizeof safe; s++)
        safe[k++] = (char)((*s == '/' || *s == ' ') ? '_' : *s);
    safe[k] = 0;
    char *path = xasprintf("%s/%s.json", dir, k ? safe : "unknown");
    free(dir);
    return path;
}

int kiln_ceilings_get(kiln_backend *be, kiln_ceilings *out, kiln_err *err) {
    kiln_device_info info;
    be->ops->device_info(be, &info);
    /* derived, not measured: never cached, so a corrected table reaches every device at once */
    kiln_ceilings_tensor(&info, out);
    char *path = cache_path(&info);
    char *text = NULL;
    int rc = KILN_OK;
    if (kiln_read_file(path, &text, NULL, NULL) == KILN_OK) {
        cJSON *j = cJSON_Parse(text);
        cJSON *bw = cJSON_GetObjectItemCaseSensitive(j, "copy_gbps");
        cJSON *fl = cJSON_GetObjectItemCaseSensitive(j, "fma_gflops");
        int ok =
            cJSON_IsNumber(bw) && cJSON_IsNumber(fl) && bw->valuedouble > 0 && fl->valuedouble > 0;
        if (ok) {
            out->copy_gbps = bw->valuedouble;
            out->fma_gflops = fl->valuedouble;
        }
        cJSON_Delete(j);
        free(text);
        if (ok)
            goto done;
    }
    if ((rc = measure(be, out, err)))
        goto done;
    {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "device", info.name);
        cJSON_AddStringToObject(j, "uuid", info.uuid);
        cJSON_AddNumberToObject(j, "copy_gbps", out->copy_gbps);
        cJSON_AddNumberToObject(j, "fma_gflops", out->fma_gflops);
        cJSON_AddNumberToObject(j, "measured_unix", (double)time(NULL));
        char *s = cJSON_Print(j);
        char *dir = xstrdup(path);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = 0;
        /* A cache that cannot be written is not an error: the figures are still good. */
        if (kiln_mkdirs(dir, NULL) == KILN_OK)
            kiln_write_file(path, s, strlen(s), NULL);
        free(dir);
        free(s);
        cJSON_Delete(j);
    }
done:
    free(path);
    return rc;
}

/* ---- the tensor-core ceiling ----
 *
 * A GEMM on tensor cores runs far above the fp32 FMA rate (an H200: ~51 TFLOP/s FMA, ~990 TFLOP/s
 * dense bf16), so bounding its flops by the FMA rate made its speed of light longer than the time a
 * good kernel takes, and the gate called such a time `impossible`. kiln cannot measure this rate
 * the way it measures the others without a tuned GEMM of its own, so it is derived: the dense
 * tensor-core flops per clock per SM that NVIDIA's architecture whitepapers give, times the SMs,
 * times the SM clock the driver reports (its boost clock: the figure is an upper bound, as a
 * ceiling must be; an H200 at 1980 MHz gives 1070 TFLOP/s against the datasheet's 989 at 1830).
 *
 * Flops per clock per SM (2 per FMA), dense (no 2:4 sparsity):
 *   sm_80  "NVIDIA A100 Tensor Core GPU Architecture" (2020): fp16/bf16 2048, tf32 1024, int8 4096
 *          ops, no fp8. Check: A100 SXM, 108 SMs x 1410 MHz x 2048 = 312 TFLOP/s bf16 (datasheet
 *          312); tf32 156, int8 624 TOPS.
 *   sm_86  "NVIDIA Ampere GA102 GPU Architecture" (2020): half of sm_80 per SM: fp16/bf16 1024,
 *          tf32 512, int8 2048, no fp8. Check: A40, 84 SMs x 1740 MHz x 1024 = 149.7 TFLOP/s fp16
 *          (datasheet 149.7). GeForce parts accumulate in fp32 at half that; the ceiling is the
 *          full rate.
 *   sm_89  "NVIDIA Ada GPU Architecture" (2022): fp16/bf16 1024, fp8 2048, tf32 512, int8 2048.
 *          Check: L40S, 142 SMs x 2520 MHz x 1024 = 362 TFLOP/s bf16 (datasheet 362), fp8 733.
 *   sm_90  "NVIDIA H100 Tensor Core GPU Architecture" (2022): fp16/bf16 4096, fp8 8192, tf32 2048,
 *          int8 8192 ops. Check: H100 SXM5, 132 SMs x 1830 MHz x 4096 = 989 TFLOP/s bf16
 *          (datasheet 989), fp8 1979.
 * The fp32 column: 2 x the FP32 lanes per SM in the same whitepapers (sm_80 64, sm_86/89/90 128).
 * Check: H100 SXM5 132 x 1980 MHz x 256 = 66.9 TFLOP/s fp32 (datasheet 67).
 * Any other architecture has no entry: its problems keep the measured FMA ceiling. */
static const struct {
    int cc_major, cc_minor;
    double flops_per_clk_sm[KILN_TENSOR_COUNT]; /* F16, BF16, F8, TF32, I8 */
    double fp32_per_clk_sm;
} tensor_table[] = {
    {8, 0, {2048, 2048, 0, 1024, 4096}, 128},
    {8, 6, {1024, 1024, 0, 512, 2048}, 256},
    {8, 9, {1024, 1024, 2048, 512, 2048}, 256},
    {9, 0, {4096, 4096, 8192, 2048, 8192}, 256},
};

const char *kiln_tensor_type_name(kiln_tensor_type t) {
    static const char *const names[KILN_TENSOR_COUNT] = {"float16", "bfloat16", "float8", "tf32",
                                                         "int8"};
    KILN_ASSERT(t >= 0 && t < KILN_TENSOR_COUNT);
    return names[t];
}

/* The index of the table's row for a compute capability, -1 where it has none. */
static int arch_row(int cc_major, int cc_minor) {
    for (int i = 0; i < (int)(sizeof tensor_table / sizeof tensor_table[0]); i++)
        if (tensor_table[i].cc_major == cc_major && tensor_table[i].cc_minor == cc_minor)
            return i;
    return -1;
}

double kiln_tensor_flops_per_clk_sm(int cc_major, int cc_minor, kiln_tensor_type t) {
    KILN_ASSERT(t >= 0 && t < KILN_TENSOR_COUNT);
    int r = arch_row(cc_major, cc_minor);
    return r < 0 ? 0 : tensor_table[r].flops_per_clk_sm[t];
}

void kiln_ceilings_tensor(const kiln_device_info *info, kiln_ceilings *c) {
    /* SM-clocks per second: 0 where the SMs or the clock are unknown, and so every rate */
    double sm_hz =
        info->n_sms > 0 && info->clock_khz > 0 ? info->n_sms * (info->clock_khz * 1e3) : 0;
    int r = arch_row(info->cc_major, info->cc_minor);
    for (int t = 0; t < KILN_TENSOR_COUNT; t++)
        c->tensor_gflops[t] = r < 0 ? 0 : tensor_table[r].flops_per_clk_sm[t] * sm_hz / 1e9;
    c->fp32_gflops = r < 0 ? 0 : tensor_table[r].fp32_per_clk_sm * sm_hz / 1e9;
}

int kiln_sol_tensor_type(const kiln_problem *p) {
    for (int i = 0; i < p->n_inputs; i++) {
        if (p->inputs[i].is_scalar)
            continue;
        switch (p->inputs[i].dtype) {
        case KILN_F16:
            return KILN_TENSOR_F16;
        case KILN_BF16:
            return KILN_TENSOR_BF16;
        case KILN_F8_E4M3:
        case KILN_F8_E5M2:
            return KILN_TENSOR_F8;
        case KILN_I8:
        case KILN_U8:
            return KILN_TENSOR_I8;
        default:
            return -1;
        }
    }
    return -1;
}

double kiln_sol_gflops(const kiln_ceilings *c, const kiln_problem *p, const char **kind) {
    static const char *const kinds[KILN_TENSOR_COUNT] = {
        "float16 tensor cores (arch table)", "bfloat16 tensor cores (arch table)",
        "float8 tensor cores (arch table)", "tf32 tensor cores (arch table)",
        "int8 tensor cores (arch table)"};
    int t = kiln_sol_tensor_type(p);
    if (t == KILN_TENSOR_F8 && c->tensor_gflops[t] <= 0)
        t = KILN_TENSOR_F16;
    if (t >= 0 && c->tensor_gflops[t] > 0) {
        if (kind)
            *kind = kinds[t];
        return c->tensor_gflops[t];
    }
    if (c->fp32_gflops > c->fma_gflops) {
        if (kind)
            *kind = "fp32 FMA (arch table)";
        return c->fp32_gflops;
    }
    if (kind)
        *kind = "fp32 FMA (measured)";
    return c->fma_gflops;
}

double kiln_sol_time_us(const kiln_ceilings *c, const kiln_problem *p, double min_bytes,
                        double flops) {
    double sol_us = min_bytes / (c->copy_gbps * 1e3);
    double gflops = flops > 0 ? kiln_sol_gflops(c, p, NULL) : 0;
    if (gflops > 0) { /* an unknown ceiling (0) bounds nothing */
        double flops_us = flops / (gflops * 1e3);
        if (flops_us > sol_us)
            sol_us = flops_us;
    }
    return sol_us;
}

double kiln_sol_score(double t_us, double t_sol_us, double t_base_us) {
    if (t_base_us <= 0 || t_us <= 0)
        return -1;
    if (t_us <= t_sol_us)
        return 1.0;
    if (t_base_us <= t_sol_us)
        return t_us <= t_base_us ? 1.0 : 0.5 * t_base_us / t_us;
    double s = 1.0 / (1.0 + (t_us - t_sol_us) / (t_base_us - t_sol_us));
    return s > 1.0 ? 1.0 : s;
}
