/* cmd_submit.c: `kiln submit RUN PROBLEM KERNEL_FILE`: a person or any outside agent hands in a
 * kernel; the submit service (search/submit.c) gates it, records it as a child of the problem's
 * root (agent "submitted") and makes it the incumbent if it is right and faster. This file reads
 * the arguments and prints the verdict; the --json result is the outside agent's feedback
 * (docs/agents.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../search/submit.h"
#include "cli.h"
#include "options.h"

static const char *json_str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* ---------------------------------------------------------------------------------------------
 * The command.
 * --------------------------------------------------------------------------------------------- */

static const kiln_cli_use submit_options[] = {
    {KILN_OPT_JSON,
     "print the gate's result (docs/gate.md) plus candidate_id and incumbent as one "
     "JSON object",
     NULL},
    {KILN_OPT_BACKEND, NULL, "RUN's, else cuda when a GPU is visible, else cpu"},
    {KILN_OPT_ITERS, NULL, NULL},
    {KILN_OPT_SETS, NULL, NULL},
    {KILN_OPT_TIMEOUT, NULL, NULL},
    {KILN_OPT_REF_DIR, NULL, NULL},
};

static const kiln_cli_command submit_command = {
    .name = "submit",
    .usage = "RUN PROBLEM KERNEL_FILE [options]",
    .about = "Hands in a kernel written to the candidate ABI (docs/abi.md) for one problem of RUN. "
             "It goes through the gate (proof on every workload, then timing), is recorded in "
             "RUN/kiln.db as a child of the problem's root (agent \"submitted\"), and becomes the "
             "problem's incumbent when it is right and faster than the incumbent. PROBLEM is a "
             "problem name (RUN/problems/NAME, or a problem RUN's store knows) or a problem "
             "directory. Not while kiln optimize runs on RUN (it holds RUN/kiln.lock); "
             "docs/agents.md describes the JSON for agent authors.",
    .use = submit_options,
    .n_use = KILN_CLI_N(submit_options),
    .exit_status = "0  a verdict, whatever the outcome (read it from the output)\n"
                   "1  the store failed\n"
                   "2  bad usage or input: no such file or problem, RUN in use, no reference data",
    .example = "kiln submit runs/mlp softmax_f32 my_softmax.cu --json",
};

static void print_outcome(const kiln_submit_run *r, const kiln_submit_outcome *o) {
    const cJSON *res = o->result;
    const char *outcome = json_str(res, "outcome");
    printf("%s: candidate %lld%s: %s", r->p->name, (long long)o->candidate_id,
           o->duplicate ? " (the same kernel was submitted before)" : "", outcome ? outcome : "?");
    kiln_store_summary sum;
    kiln_store_summary_read(res, &sum);
    if (sum.time_us >= 0)
        printf(", %.3f us", sum.time_us);
    if (sum.sol_pct >= 0)
        printf(", %.1f%% of the speed of light", sum.sol_pct);
    printf("\n");
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(res, "evidence");
    if (outcome && strcmp(outcome, "ok") != 0 && cJSON_IsObject(ev)) {
        char *e = cJSON_Print(ev);
        printf("evidence: %s\n", e);
        free(e);
    }
    if (o->incumbent && !o->duplicate)
        printf("it is the incumbent now%s\n",
               o->previous_incumbent ? "" : " (the first correct one)");
    else if (o->incumbent)
        printf("it is the incumbent\n");
    else if (o->previous_incumbent)
        printf("the incumbent stays candidate %lld (%.3f us)\n", (long long)o->previous_incumbent,
               o->previous_time_us);
}

int kiln_cmd_submit(int argc, char **argv) {
    kiln_gate_options gate;
    kiln_gate_options_default(&gate);
    kiln_cli_args a;
    kiln_cli_args_init(&a);
    a.gate = &gate;
    int first = 0;
    int rc = kiln_cli_parse(&submit_command, argc, argv, &a, &first);
    if (rc != KILN_CLI_CONTINUE)
        return rc;
    const char *backend = a.cli.backend, *ref_dir = a.cli.ref_dir;
    int json = a.cli.json;
    if (argc - first != 3)
        return kiln_cli_usage_error(&submit_command, "expected RUN PROBLEM KERNEL_FILE");
    const char *run_dir = argv[first], *problem = argv[first + 1], *kernel = argv[first + 2];
    char *source = NULL;
    kiln_err err;
    if (kiln_read_file(kernel, &source, NULL, &err) != KILN_OK) {
        fprintf(stderr, "kiln submit: %s: cannot read the kernel file\n", kernel);
        return 2;
    }
    if (strlen(source) == 0) {
        fprintf(stderr, "kiln submit: %s: the kernel file is empty\n", kernel);
        free(source);
        return 2;
    }
    kiln_submit_run r;
    int status = kiln_submit_open(run_dir, problem, backend, ref_dir, &gate, json, &r, &err);
    if (status) {
        fprintf(stderr, "kiln submit: %s\n", err.msg);
        free(source);
        return status;
    }
    kiln_submit_outcome o;
    status = kiln_submit_source(&r, "submitted", 0, source, &o, &err);
    if (status) {
        fprintf(stderr, "kiln submit: %s\n", err.msg);
    } else if (json) {
        cJSON *res = o.result;
        cJSON_AddNumberToObject(res, "candidate_id", (double)o.candidate_id);
        cJSON_AddBoolToObject(res, "incumbent", o.incumbent);
        cJSON_AddBoolToObject(res, "duplicate", o.duplicate);
        cJSON_AddNumberToObject(res, "problem_id", (double)r.problem_id);
        cJSON_AddStringToObject(res, "run", r.run_dir);
        if (o.previous_incumbent && !(o.incumbent && o.duplicate)) {
            cJSON *pi = cJSON_AddObjectToObject(res, "previous_incumbent");
            cJSON_AddNumberToObject(pi, "candidate_id", (double)o.previous_incumbent);
            cJSON_AddNumberToObject(pi, "time_us", o.previous_time_us);
        } else {
            cJSON_AddNullToObject(res, "previous_incumbent");
        }
        char *s = cJSON_Print(res);
        printf("%s\n", s);
        free(s);
    } else {
        print_outcome(&r, &o);
    }
    cJSON_Delete(o.result);
    kiln_submit_close(&r);
    free(source);
    return status;
}
