/* cmd_llm.c: `kiln llm-try RUN PROBLEM --llm-url URL`: N proposals of the llm agent through the
 * gate, without the search: each asks the model to improve the problem's incumbent (or to write a
 * first kernel), with the failures of the earlier children in the prompt, and records the exchange,
 * the candidate and its verdict in RUN's store. How the agent is tried end to end before (and
 * besides) kiln optimize. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../search/llm.h"
#include "../search/submit.h"
#include "cli.h"
#include "options.h"

static const kiln_cli_use llm_try_options[] = {
    {KILN_OPT_N, NULL, NULL},
    {KILN_OPT_PARENT, NULL, NULL},
    {KILN_OPT_BACKEND, NULL, "RUN's, else cuda when a GPU is visible, else cpu"},
    {KILN_OPT_ITERS, NULL, NULL},
    {KILN_OPT_SETS, NULL, NULL},
    {KILN_OPT_TIMEOUT, NULL, NULL},
    {KILN_OPT_REF_DIR, NULL, NULL},
    {KILN_OPT_JSON, "print one JSON object with every round", NULL},
    KILN_CLI_LLM_USES,
};

static const kiln_cli_command llm_try_command = {
    .name = "llm-try",
    .usage = "RUN PROBLEM --llm-url URL [options]",
    .about = "Asks an OpenAI-compatible chat endpoint (vLLM, llama.cpp server, Ollama, a hosted "
             "API) N times for a kernel for PROBLEM (a name in RUN/problems or in RUN's store, or "
             "a problem directory). Each prompt holds the problem, the device and its ceilings, "
             "the ABI of docs/abi.md, the parent kernel with its time and SOL %, and the feedback "
             "of the parent's failed children. Each kernel goes through the gate and into "
             "RUN/kiln.db (agent \"llm\"); a correct kernel faster than the incumbent becomes the "
             "incumbent. Replies without a kernel, timeouts and HTTP errors are outcomes, and the "
             "next round goes on. Requests and replies are kept in the store; docs/agents.md has "
             "the setup for vLLM, llama.cpp and Ollama.",
    .use = llm_try_options,
    .n_use = KILN_CLI_N(llm_try_options),
    .exit_status = "0  the rounds ran, whatever their outcomes\n"
                   "1  the store failed\n"
                   "2  bad usage or input: no --llm-url, no model, an unknown problem, RUN in use",
    .example = "kiln llm-try runs/mlp softmax_f32 --llm-url http://127.0.0.1:8000/v1 --n 5",
};

/* The device and its ceilings, measured in a child process (a cuda context must not live in
 * this process: the gate forks); gflops is the flops ceiling the gate uses for problem p. Fields
 * stay unknown when it fails. */
typedef struct {
    char name[256];
    int cc_major, cc_minor, n_sms;
    double l2_bytes, gbps, gflops;
    char gflops_of[64];
} device_probe;

static void probe_device(const char *backend, const kiln_problem *p, device_probe *d) {
    memset(d, 0, sizeof *d);
    int fd[2];
    if (pipe(fd) != 0)
        return;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return;
    }
    if (pid == 0) {
        close(fd[0]);
        kiln_backend *be = NULL;
        kiln_err err;
        device_probe out;
        memset(&out, 0, sizeof out);
        if (kiln_backend_open(backend, 0, &be, &err) == KILN_OK) {
            kiln_device_info info;
            be->ops->device_info(be, &info);
            snprintf(out.name, sizeof out.name, "%s", info.name);
            out.cc_major = info.cc_major;
            out.cc_minor = info.cc_minor;
            out.n_sms = info.n_sms;
            out.l2_bytes = (double)info.l2_bytes;
            kiln_ceilings c;
            if (kiln_ceilings_get(be, &c, &err) == KILN_OK) {
                out.gbps = c.copy_gbps;
                const char *of = NULL;
                out.gflops = kiln_sol_gflops(&c, p, &of);
                snprintf(out.gflops_of, sizeof out.gflops_of, "%s", of);
            }
            kiln_backend_close(be);
        }
        ssize_t w = write(fd[1], &out, sizeof out);
        _exit(w == (ssize_t)sizeof out ? 0 : 1);
    }
    close(fd[1]);
    device_probe got;
    ssize_t n = 0, k;
    while (n < (ssize_t)sizeof got && (k = read(fd[0], (char *)&got + n, sizeof got - n)) > 0)
        n += k;
    close(fd[0]);
    int st;
    waitpid(pid, &st, 0);
    if (n == (ssize_t)sizeof got) {
        got.name[sizeof got.name - 1] = 0;
        got.gflops_of[sizeof got.gflops_of - 1] = 0;
        *d = got;
    }
}

int kiln_cmd_llm_try(int argc, char **argv) {
    kiln_llm_config cfg;
    kiln_llm_config_default(&cfg);
    kiln_gate_options gate;
    kiln_gate_options_default(&gate);
    kiln_cli_args a;
    kiln_cli_args_init(&a);
    a.gate = &gate;
    a.llm = &cfg;
    int first = 0;
    int rc = kiln_cli_parse(&llm_try_command, argc, argv, &a, &first);
    if (rc != KILN_CLI_CONTINUE)
        return rc;
    const char *backend = a.cli.backend, *ref_dir = a.cli.ref_dir, *parent_arg = a.cli.parent;
    long n_rounds = a.cli.n_rounds;
    int json = a.cli.json;
    kiln_err err;
    if (argc - first != 2)
        return kiln_cli_usage_error(&llm_try_command, "expected RUN PROBLEM");
    if (!cfg.url) {
        fprintf(stderr, "kiln llm-try: no endpoint: give --llm-url (e.g. http://127.0.0.1:8000/v1 "
                        "for vLLM; docs/agents.md)\n");
        return 2;
    }
    /* -1: the incumbent; 0: the root; > 0 that candidate (the table checked the form) */
    int64_t fixed_parent = strcmp(parent_arg, "incumbent") == 0 ? -1
                           : strcmp(parent_arg, "root") == 0    ? 0
                                                                : strtoll(parent_arg, NULL, 10);

    kiln_submit_run r;
    int status =
        kiln_submit_open(argv[first], argv[first + 1], backend, ref_dir, &gate, json, &r, &err);
    if (status) {
        fprintf(stderr, "kiln llm-try: %s\n", err.msg);
        return status;
    }
    cfg.store = r.store;
    cfg.problem_id = r.problem_id;
    if (fixed_parent > 0) {
        kiln_llm_context probe = {0};
        probe.problem = r.p;
        if (kiln_llm_context_load(r.store, r.problem_id, fixed_parent, 0, &probe, &err) !=
            KILN_OK) {
            fprintf(stderr, "kiln llm-try: --parent %s: %s\n", parent_arg, err.msg);
            kiln_llm_context_clear(&probe);
            kiln_submit_close(&r);
            return 2;
        }
        kiln_llm_context_clear(&probe);
    }
    device_probe dev;
    int probed = 0;

    cJSON *all = cJSON_CreateObject();
    cJSON_AddNumberToObject(all, "kiln_llm_try", 1);
    cJSON_AddStringToObject(all, "problem", r.p->name);
    cJSON_AddNumberToObject(all, "problem_id", (double)r.problem_id);
    cJSON_AddStringToObject(all, "backend", r.backend);
    cJSON *rounds = cJSON_AddArrayToObject(all, "rounds");
    status = 0;
    int64_t run_tokens = 0;
    for (long i = 0; i < n_rounds; i++) {
        double inc_t;
        int64_t parent = fixed_parent >= 0 ? fixed_parent : kiln_submit_incumbent(&r, &inc_t);
        kiln_llm_context ctx;
        memset(&ctx, 0, sizeof ctx);
        ctx.problem = r.p;
        ctx.backend = r.backend;
        if (kiln_llm_context_load(r.store, r.problem_id, parent, cfg.max_feedback, &ctx, &err) !=
            KILN_OK) {
            fprintf(stderr, "kiln llm-try: %s\n", err.msg);
            kiln_llm_context_clear(&ctx);
            status = 1;
            break;
        }
        if (!ctx.device_name || ctx.ceiling_gbps <= 0) {
            if (!probed) {
                probe_device(r.backend, r.p, &dev);
                probed = 1;
            }
            if (dev.name[0]) {
                ctx.device_name = dev.name;
                ctx.cc_major = dev.cc_major;
                ctx.cc_minor = dev.cc_minor;
                ctx.n_sms = dev.n_sms;
                ctx.l2_bytes = dev.l2_bytes;
                ctx.ceiling_gbps = dev.gbps;
                ctx.ceiling_gflops = dev.gflops;
                ctx.ceiling_gflops_of = dev.gflops_of[0] ? dev.gflops_of : NULL;
            }
        }
        char *kernel = NULL;
        kiln_llm_status st;
        int prc = kiln_llm_propose(&cfg, &ctx, &kernel, &st, &err);
        kiln_llm_context_clear(&ctx);
        if (prc != KILN_OK) {
            fprintf(stderr, "kiln llm-try: %s\n", err.msg);
            status = 2;
            break;
        }
        run_tokens = st.run_tokens;
        cJSON *round = cJSON_CreateObject();
        cJSON_AddNumberToObject(round, "round", (double)(i + 1));
        if (parent > 0)
            cJSON_AddNumberToObject(round, "parent_id", (double)parent);
        else
            cJSON_AddNullToObject(round, "parent_id");
        cJSON *jl = cJSON_AddObjectToObject(round, "llm");
        cJSON_AddStringToObject(jl, "status", kiln_llm_outcome_name(st.outcome));
        cJSON_AddStringToObject(jl, "reason", st.reason);
        cJSON_AddNumberToObject(jl, "http_status", st.http_status);
        cJSON_AddNumberToObject(jl, "attempts", st.attempts);
        if (st.total_tokens >= 0)
            cJSON_AddNumberToObject(jl, "tokens", (double)st.total_tokens);
        else
            cJSON_AddNullToObject(jl, "tokens");
        cJSON_AddNumberToObject(jl, "run_tokens", (double)st.run_tokens);
        cJSON_AddNumberToObject(jl, "latency_ms", st.latency_ms);
        cJSON_AddNumberToObject(jl, "exchange_id", (double)st.exchange_id);
        if (!json)
            fprintf(stderr, "[%ld/%ld] llm: %s (%s)\n", i + 1, n_rounds,
                    kiln_llm_outcome_name(st.outcome), st.reason);
        if (kernel) {
            kiln_submit_outcome o;
            int src = kiln_submit_source(&r, "llm", parent, kernel, &o, &err);
            free(kernel);
            if (src != 0) {
                /* no verdict (the gate could not run): the round is an error, the run goes on */
                fprintf(stderr, "kiln llm-try: round %ld: %s\n", i + 1, err.msg);
                cJSON_AddNullToObject(round, "candidate_id");
                cJSON_AddStringToObject(round, "outcome", "error");
                cJSON_AddStringToObject(round, "error", err.msg);
                cJSON_AddItemToArray(rounds, round);
                if (src == 1) {
                    status = 1;
                    break;
                }
                continue;
            }
            kiln_store_llm_exchange_link(r.store, st.exchange_id, o.candidate_id, NULL);
            const cJSON *oc = cJSON_GetObjectItemCaseSensitive(o.result, "outcome");
            const char *outcome = cJSON_IsString(oc) ? oc->valuestring : "?";
            cJSON_AddNumberToObject(round, "candidate_id", (double)o.candidate_id);
            cJSON_AddStringToObject(round, "outcome", outcome);
            cJSON_AddBoolToObject(round, "duplicate", o.duplicate);
            cJSON_AddBoolToObject(round, "incumbent", o.incumbent);
            if (!json) {
                kiln_store_summary sum;
                kiln_store_summary_read(o.result, &sum);
                printf("round %ld: candidate %lld: %s", i + 1, (long long)o.candidate_id, outcome);
                if (sum.time_us >= 0)
                    printf(", %.3f us", sum.time_us);
                printf("%s%s\n", o.duplicate ? " (a duplicate)" : "",
                       o.incumbent && !o.duplicate ? ", the incumbent now" : "");
            }
            cJSON_AddItemToObject(round, "result", o.result);
        } else {
            cJSON_AddNullToObject(round, "candidate_id");
            cJSON_AddStringToObject(round, "outcome", kiln_llm_outcome_name(st.outcome));
            if (!json)
                printf("round %ld: %s: %s\n", i + 1, kiln_llm_outcome_name(st.outcome), st.reason);
        }
        cJSON_AddItemToArray(rounds, round);
        fflush(stdout);
        if (st.outcome == KILN_LLM_BUDGET)
            break; /* nothing more will be asked */
    }
    double inc_t = -1;
    int64_t inc = kiln_submit_incumbent(&r, &inc_t);
    if (inc)
        cJSON_AddNumberToObject(all, "incumbent", (double)inc);
    else
        cJSON_AddNullToObject(all, "incumbent");
    cJSON_AddNumberToObject(all, "run_tokens", (double)run_tokens);
    if (json) {
        char *s = cJSON_Print(all);
        printf("%s\n", s);
        free(s);
    } else if (inc) {
        printf("incumbent: candidate %lld, %.3f us\n", (long long)inc, inc_t);
    }
    cJSON_Delete(all);
    kiln_submit_close(&r);
    return status;
}
