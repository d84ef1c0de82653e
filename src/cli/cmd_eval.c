/* cmd_eval.c: `kiln eval PROBLEM_DIR KERNEL_FILE...`: prove and time candidates (docs/gate.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../backend/cuda_driver.h"
#include "../gate/gate.h"
#include "../gen/family.h"
#include "cli.h"
#include "options.h"

static const kiln_cli_use eval_options[] = {
    {KILN_OPT_BACKEND, NULL,
     "by the kernel file's extension, .cu cuda, .c cpu; else cuda when a "
     "driver is present"},
    {KILN_OPT_DEVICE, NULL, NULL},
    {KILN_OPT_JSON,
     "print one JSON object (docs/gate.md) instead of a table; an array of them for "
     "several kernel files",
     NULL},
    {KILN_OPT_ITERS, NULL, NULL},
    {KILN_OPT_WARMUP, NULL, NULL},
    {KILN_OPT_SETS, NULL, NULL},
    {KILN_OPT_TIMEOUT, NULL, NULL},
    {KILN_OPT_SEED, "the seed of the gate's random draws (poison patterns); default: from the OS",
     NULL},
    {KILN_OPT_REF_DIR, NULL, NULL},
    {KILN_OPT_NO_TIME, NULL, NULL},
    {KILN_OPT_RETIME_NOISY, NULL, NULL},
};

static const kiln_cli_command eval_command = {
    .name = "eval",
    .usage = "PROBLEM_DIR KERNEL_FILE [KERNEL_FILE...] [options]",
    .about = "Proves KERNEL_FILE (a candidate written to docs/abi.md) on every workload of the "
             "SOL-ExecBench problem in PROBLEM_DIR against the PyTorch reference, then times it. "
             "Several kernel files go through one gate session in turn (one device context; a "
             "crash or hang still costs only its own verdict).",
    .use = eval_options,
    .n_use = KILN_CLI_N(eval_options),
    .exit_status = "0  a verdict, whatever the outcome (read it from the output)\n"
                   "2  no verdict was possible: bad arguments, a malformed problem, no device",
    .example = "kiln eval tests/data/problems/softmax_f32 tests/kernels/cpu/good_softmax.c --json",
};

static const char *default_backend(const char *kernel) {
    size_t n = strlen(kernel);
    if (n > 3 && strcmp(kernel + n - 3, ".cu") == 0)
        return "cuda";
    if (n > 2 && strcmp(kernel + n - 2, ".c") == 0)
        return "cpu";
    return kiln_backend_default();
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void print_table(const cJSON *r) {
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(r, "device");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(dev, "name");
    printf("kiln eval: %s with %s on %s (%s)\n",
           cJSON_GetObjectItemCaseSensitive(r, "problem")->valuestring,
           cJSON_GetObjectItemCaseSensitive(r, "kernel")->valuestring,
           cJSON_GetObjectItemCaseSensitive(r, "backend")->valuestring,
           cJSON_IsString(name) ? name->valuestring : "?");
    if (cJSON_IsObject(dev)) {
        const cJSON *of = cJSON_GetObjectItemCaseSensitive(dev, "ceiling_gflops_of");
        printf("device ceilings: %.0f GB/s copy, %.0f GFLOP/s %s\n", num(dev, "ceiling_gbps"),
               num(dev, "ceiling_gflops"), cJSON_IsString(of) ? of->valuestring : "fp32");
    }
    double cs = num(r, "compile_s");
    if (!isnan(cs))
        printf("compiled in %.2f s\n", cs);
    const cJSON *ws = cJSON_GetObjectItemCaseSensitive(r, "workloads");
    if (cJSON_GetArraySize(ws) > 0) {
        printf("%4s  %-28s %6s %12s %8s %9s %7s %6s %10s\n", "#", "axes", "proved", "time us",
               "spread%", "GB/s", "SOL%", "S", "ref us");
        const cJSON *w;
        cJSON_ArrayForEach(w, ws) {
            char axes[256] = "";
            size_t off = 0;
            const cJSON *a;
            cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(w, "axes")) {
                off += (size_t)snprintf(axes + off, off < sizeof axes ? sizeof axes - off : 0,
                                        "%s%s=%.0f", off ? "," : "", a->string, a->valuedouble);
                if (off >= sizeof axes)
                    break;
            }
            if (strlen(axes) > 28)
                strcpy(axes + 25, "...");
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(w, "time_us");
            printf("%4.0f  %-28s %6.0f %12.2f %8.1f %9.1f %7.1f %6.3f %10.2f\n", num(w, "index"),
                   axes, num(w, "proved_sets"), num(t, "median"), num(t, "spread_pct"),
                   num(w, "gbps"), num(w, "sol_pct"), num(w, "sol_score"), num(w, "ref_time_us"));
        }
    }
    const cJSON *sum = cJSON_GetObjectItemCaseSensitive(r, "summary");
    if (cJSON_IsObject(sum) && num(sum, "timed") > 0)
        printf("geomean: %.2f us, SOL %.1f%%, S %.3f\n", num(sum, "time_us_geomean"),
               num(sum, "sol_pct_geomean"), num(sum, "sol_score_geomean"));
    const cJSON *out = cJSON_GetObjectItemCaseSensitive(r, "outcome");
    printf("outcome: %s\n", cJSON_IsString(out) ? out->valuestring : "none");
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(r, "evidence");
    if (cJSON_IsObject(ev) && cJSON_GetArraySize(ev) > 0) {
        const cJSON *log = cJSON_GetObjectItemCaseSensitive(ev, "log");
        if (cJSON_IsString(log) && log->valuestring[0]) {
            printf("compiler log:\n%s\n", log->valuestring);
            cJSON *copy = cJSON_Duplicate(ev, 1);
            cJSON_DeleteItemFromObjectCaseSensitive(copy, "log");
            char *s = cJSON_PrintUnformatted(copy);
            printf("evidence: %s\n", s);
            free(s);
            cJSON_Delete(copy);
        } else {
            char *s = cJSON_PrintUnformatted(ev);
            printf("evidence: %s\n", s);
            free(s);
        }
    }
}

/* Prints one result (unless it goes into an array printed later); 2 when it carries an error. */
static int report(const cJSON *result, int json, int in_array) {
    const cJSON *error = cJSON_GetObjectItemCaseSensitive(result, "error");
    if (cJSON_IsString(error))
        fprintf(stderr, "kiln eval: %s\n", error->valuestring);
    if (json && !in_array) {
        char *s = cJSON_Print(result);
        printf("%s\n", s);
        free(s);
    } else if (!json && !cJSON_IsString(error)) {
        print_table(result);
    }
    return cJSON_IsString(error) ? 2 : 0;
}

int kiln_cmd_eval(int argc, char **argv) {
    kiln_gate_options opt;
    kiln_gate_options_default(&opt);
    kiln_cli_args a;
    kiln_cli_args_init(&a);
    a.gate = &opt;
    a.cli.seed = opt.seed;
    int first = 0;
    int rc = kiln_cli_parse(&eval_command, argc, argv, &a, &first);
    if (rc != KILN_CLI_CONTINUE)
        return rc;
    opt.seed = a.cli.seed;
    const char *backend = a.cli.backend, *ref_dir = a.cli.ref_dir;
    int json = a.cli.json;
    if (argc - first < 2)
        return kiln_cli_usage_error(&eval_command, "expected PROBLEM_DIR and KERNEL_FILE...");
    const char *problem_dir = argv[first];
    char **kernels = argv + first + 1;
    int n_kernels = argc - first - 1;
    if (!backend)
        backend = default_backend(kernels[0]);
    opt.backend = backend;
    for (int k = 0; k < n_kernels; k++)
        if (access(kernels[k], R_OK) != 0) {
            fprintf(stderr, "kiln eval: %s: cannot read the kernel file\n", kernels[k]);
            return 2;
        }

    kiln_err err;
    kiln_problem *p = NULL;
    if (kiln_problem_load(problem_dir, &p, &err)) {
        fprintf(stderr, "kiln eval: %s\n", err.msg);
        return 2;
    }
    kiln_family_sol_fill(p);
    int status = 2;
    kiln_refdata *ref = NULL;
    pid_t compiling = 0;
    if (strcmp(backend, "cuda") == 0) {
        /* Checked before the reference helper runs, so that a machine without a GPU is told at
         * once. */
        if (!kiln_cuda_driver_present()) {
            fprintf(stderr,
                    "kiln eval: no NVIDIA driver here (libcuda.so.1 not found): the cuda backend "
                    "needs a GPU; use --backend cpu\n");
            goto done;
        }
        /* several kernels: the compile pool builds them while the reference data is found and
         * the gate takes them in turn */
        char **sources = xcalloc((size_t)n_kernels + 1, sizeof *sources);
        for (int k = 0; k < n_kernels; k++)
            kiln_read_file(kernels[k], &sources[k], NULL, NULL);
        compiling = kiln_gate_precompile_start((const char *const *)sources, n_kernels, NULL);
        for (int k = 0; k < n_kernels; k++)
            free(sources[k]);
        free(sources);
    }
    if (kiln_refs_ensure(p, strcmp(backend, "cuda") == 0 ? "cuda" : "cpu", ref_dir, json, &ref,
                         &err)) {
        fprintf(stderr, "kiln eval: %s\n", err.msg);
        goto done;
    }
    status = 0;
    if (n_kernels == 1) {
        cJSON *result = kiln_gate_eval(p, ref, kernels[0], &opt);
        status = report(result, json, 0);
        cJSON_Delete(result);
        goto done;
    }
    kiln_gate_session *session = kiln_gate_session_new(&opt);
    cJSON *all = cJSON_CreateArray();
    for (int k = 0; k < n_kernels; k++) {
        cJSON *result = kiln_gate_session_eval(session, p, ref, kernels[k], &opt);
        if (!json)
            printf("%s== %s\n", k ? "\n" : "", kernels[k]);
        if (report(result, json, 1))
            status = 2;
        cJSON_AddItemToArray(all, result);
    }
    kiln_gate_session_free(session);
    if (json) {
        char *s = cJSON_Print(all);
        printf("%s\n", s);
        free(s);
    }
    cJSON_Delete(all);
done:
    kiln_gate_precompile_wait(compiling);
    kiln_refdata_free(ref);
    kiln_problem_free(p);
    return status;
}
