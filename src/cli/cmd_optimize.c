/* cmd_optimize.c: `kiln optimize RUN [PROBLEM_DIR...]`: the search over a run's problems, hottest
 * first, with agents, gates and MCTS (src/search/optimize.c; docs/search.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../search/optimize.h"
#include "../web/server.h"
#include "cli.h"
#include "options.h"

static const kiln_cli_use optimize_options[] = {
    {KILN_OPT_BUDGET, NULL, NULL},
    {KILN_OPT_TIME, NULL, NULL},
    {KILN_OPT_AGENTS, NULL, NULL},
    {KILN_OPT_SPECIALISTS, NULL, NULL},
    {KILN_OPT_BACKEND, NULL, "cuda when a GPU is visible, else cpu"},
    {KILN_OPT_GATES, NULL, NULL},
    {KILN_OPT_TOP, NULL, NULL},
    {KILN_OPT_FAMILY, "only this family's candidates: a problem it does not match is skipped",
     NULL},
    {KILN_OPT_PLATEAU, NULL, NULL},
    {KILN_OPT_RETIME_ROUNDS, NULL, NULL},
    {KILN_OPT_ITERS, NULL, NULL},
    {KILN_OPT_SETS, NULL, NULL},
    {KILN_OPT_TIMEOUT, NULL, NULL},
    {KILN_OPT_SEED, "the agents' random seed", NULL},
    {KILN_OPT_JSON, "print the final table as one JSON object", NULL},
    {KILN_OPT_QUIET, NULL, NULL},
    {KILN_OPT_SERVE, NULL, NULL},
    {KILN_OPT_LLM_AGENTS, NULL, NULL},
    KILN_CLI_LLM_USES,
};

static const kiln_cli_command optimize_command = {
    .name = "optimize",
    .usage = "RUN [PROBLEM_DIR...] [options]",
    .about = "Searches kernel variants for the problems that capture wrote into RUN/problems (or "
             "the SOL-ExecBench problem directories named after RUN), hottest first: agents "
             "propose and compile candidates, one gate per GPU proves and times them, MCTS decides "
             "where to look next. Everything goes into RUN/kiln.db; running the same command again "
             "resumes. At the end: RUN/library/ (manifest.json + kernels) and a table on stdout. "
             "With --llm-url, N of the agent processes are llm agents (docs/agents.md): they ask "
             "an OpenAI-compatible endpoint for a faster kernel than the node MCTS picks, with its "
             "time, SOL % and the failures below it in the prompt, and search the problems no "
             "family matches alone; an llm agent stops when --llm-token-budget is spent or after 8 "
             "exchanges in a row without a new candidate.",
    .use = optimize_options,
    .n_use = KILN_CLI_N(optimize_options),
    .exit_status = "0  done, whatever the candidates' outcomes\n"
                   "1  the run failed or was interrupted (resume with the same command)\n"
                   "2  bad usage, a store locked by another run, or a corrupt store",
    .example = "kiln optimize runs/mlp --budget 20 --serve",
};

int kiln_cmd_optimize(int argc, char **argv) {
    kiln_optimize_options o;
    kiln_optimize_options_default(&o);
    kiln_gate_options gate; /* the gate's options, for their defaults and bounds */
    kiln_gate_options_default(&gate);
    kiln_web_options wo;
    kiln_web_options_default(&wo);
    kiln_cli_args a;
    kiln_cli_args_init(&a);
    a.optimize = &o;
    a.gate = &gate;
    a.llm = &o.llm;
    a.web = &wo;
    a.cli.seed = o.seed;
    int first = 0;
    int rc = kiln_cli_parse(&optimize_command, argc, argv, &a, &first);
    if (rc != KILN_CLI_CONTINUE)
        return rc;
    if (a.given[KILN_OPT_ITERS])
        o.iters = gate.iters;
    if (a.given[KILN_OPT_SETS])
        o.sets = gate.max_sets;
    if (a.given[KILN_OPT_TIMEOUT])
        o.timeout_s = gate.timeout_s;
    o.seed = a.cli.seed;
    o.backend = a.cli.backend;
    o.json = a.cli.json;
    o.quiet = a.cli.quiet;
    o.family = a.cli.family;
    if (argc - first < 1)
        return kiln_cli_usage_error(&optimize_command, "expected RUN");
    /* the llm agent's options want an endpoint */
    for (int k = KILN_OPT_LLM_AGENTS; k < KILN_OPT_COUNT && !o.llm.url; k++)
        if (a.given[k])
            return kiln_cli_usage_error(&optimize_command,
                                        "--%s needs --llm-url (the llm agent is off without an "
                                        "endpoint; docs/agents.md)",
                                        kiln_cli_option_name((kiln_opt)k));
    kiln_err err;
    o.run_dir = argv[first];
    o.n_problem_dirs = argc - first - 1;
    o.problem_dirs = (const char **)(argv + first + 1);
    err.msg[0] = 0;
    /* The dashboard runs in a forked child (kiln_web_spawn) so that the coordinator stays
     * single-threaded and may go on forking its agents and gates. */
    pid_t web_pid = 0;
    if (a.given[KILN_OPT_SERVE]) {
        wo.run_dir = o.run_dir;
        int port = 0;
        if (kiln_web_spawn(&wo, &web_pid, &port, &err)) {
            fprintf(stderr, "kiln optimize: --serve: %s\n", err.msg);
            return 2;
        }
        fprintf(stderr, "kiln optimize: dashboard on http://127.0.0.1:%d/\n", port);
    }
    int status = kiln_optimize_run(&o, &err);
    if (web_pid > 0)
        kiln_web_spawn_stop(web_pid);
    if (status != 0 && err.msg[0])
        fprintf(stderr, "kiln optimize: %s\n", err.msg);
    return status;
}
