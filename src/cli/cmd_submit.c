/* cmd_submit.c: `kiln submit RUN PROBLEM KERNEL_FILE`: a person or any outside agent hands in a
 * kernel; the submit service (search/submit.c) gates it, records it as a child of the problem's
 * root (agent "submitted") and makes it the incumbent if it is right and faster. This file reads
 * the arguments and prints the verdict; the --json result is the outside agent's feedback
 * (docs/agents.md). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../search/submit.h"
#include "cli.h"

static const char *json_str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* ---------------------------------------------------------------------------------------------
 * The command.
 * --------------------------------------------------------------------------------------------- */

static void submit_usage(FILE *f) {
    fprintf(f,
            "usage: kiln submit RUN PROBLEM KERNEL_FILE [options]\n"
            "\n"
            "Hands in a kernel written to the candidate ABI (docs/abi.md) for one problem of RUN.\n"
            "It goes through the gate (proof on every workload, then timing), is recorded in\n"
            "RUN/kiln.db as a child of the problem's root (agent \"submitted\"), and becomes the\n"
            "problem's incumbent when it is right and faster than the incumbent. PROBLEM is a\n"
            "problem name (RUN/problems/NAME, or a problem RUN's store knows) or a problem\n"
            "directory. Not while kiln optimize runs on RUN (it holds RUN/kiln.lock).\n"
            "\n"
            "options:\n"
            "  --json               the gate's result (docs/gate.md) plus candidate_id and\n"
            "                       incumbent, as one JSON object on stdout\n"
            "  --backend cuda|cpu   default: RUN's, else cuda when a GPU is visible, else cpu\n"
            "  --iters N, --sets N, --timeout S, --ref-dir DIR   as for kiln eval\n"
            "  -h, --help           this text\n"
            "\n"
            "Exit status: 0 a verdict (whatever the outcome: read it from the output); 2 bad\n"
            "usage or input (no such file or problem, RUN in use, no reference data); 1 the store\n"
            "failed. docs/agents.md describes the JSON for agent authors.\n");
}

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
    enum { OPT_JSON = 256, OPT_BACKEND, OPT_ITERS, OPT_SETS, OPT_TIMEOUT, OPT_REF_DIR };
    static const struct option longopts[] = {
        {"json", no_argument, 0, OPT_JSON},
        {"backend", required_argument, 0, OPT_BACKEND},
        {"iters", required_argument, 0, OPT_ITERS},
        {"sets", required_argument, 0, OPT_SETS},
        {"timeout", required_argument, 0, OPT_TIMEOUT},
        {"ref-dir", required_argument, 0, OPT_REF_DIR},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    kiln_gate_options gate;
    kiln_gate_options_default(&gate);
    const char *backend = NULL, *ref_dir = NULL;
    int json = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_JSON:
            json = 1;
            break;
        case OPT_BACKEND:
            backend = optarg;
            if (!kiln_backend_find(backend)) {
                fprintf(stderr, "kiln submit: unknown backend '%s' (use cuda or cpu)\n", backend);
                return 2;
            }
            break;
        case OPT_ITERS:
            if (kiln_cli_gate_option("submit", "iters", optarg, &gate))
                return 2;
            break;
        case OPT_SETS:
            if (kiln_cli_gate_option("submit", "sets", optarg, &gate))
                return 2;
            break;
        case OPT_TIMEOUT:
            if (kiln_cli_gate_option("submit", "timeout", optarg, &gate))
                return 2;
            break;
        case OPT_REF_DIR:
            ref_dir = optarg;
            break;
        case 'h':
            submit_usage(stdout);
            return 0;
        default:
            submit_usage(stderr);
            return 2;
        }
    }
    if (argc - optind != 3) {
        fprintf(stderr, "kiln submit: expected RUN PROBLEM KERNEL_FILE (see kiln submit --help)\n");
        return 2;
    }
    const char *run_dir = argv[optind], *problem = argv[optind + 1], *kernel = argv[optind + 2];
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
