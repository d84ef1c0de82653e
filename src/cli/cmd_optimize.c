/* cmd_optimize.c: `kiln optimize RUN [PROBLEM_DIR...]`: the search over a run's problems, hottest
 * first, with agents, gates and MCTS (src/search/optimize.c; docs/search.md). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../search/optimize.h"
#include "../web/server.h"
#include "cli.h"

static void optimize_usage(FILE *f) {
    fprintf(
        f,
        "usage: kiln optimize RUN [PROBLEM_DIR...] [options]\n"
        "\n"
        "Searches kernel variants for the problems that capture wrote into RUN/problems (or\n"
        "the SOL-ExecBench problem directories named after RUN), hottest first: agents propose\n"
        "and compile candidates, one gate per GPU proves and times them, MCTS decides where to\n"
        "look next. Everything goes into RUN/kiln.db; running the same command again resumes.\n"
        "At the end: RUN/library/ (manifest.json + kernels) and a table on stdout.\n"
        "\n"
        "options:\n"
        "  --budget N           candidates per problem, across resumed runs (default 50)\n"
        "  --time T             stop making candidates after T seconds (default: no limit)\n"
        "  --agents K           agent processes (default 2 on cpu, 4 on cuda)\n"
        "  --specialists LIST   agent kinds, cycled over the agents: geometry, vector,\n"
        "                       algorithm, fusion, random (default\n"
        "                       geometry,algorithm,vector,fusion,random)\n"
        "  --backend cuda|cpu   default: cuda when a GPU is visible, else cpu\n"
        "  --gates N            gate processes (default: one per visible GPU; 1 on cpu)\n"
        "  --top P              only the P hottest problems that an agent can search (a\n"
        "                       family matches; any with --llm-url), and those hotter\n"
        "                       than them, listed as skipped\n"
        "  --plateau P          results without a 1%% gain before a draft opens (default 8;\n"
        "                       0: no drafts)\n"
        "  --retime-rounds N    rounds of the interleaved re-timing of a challenger (default 3)\n"
        "  --iters N, --sets N, --timeout S   passed to the gate, as for kiln eval\n"
        "  --seed S             the agents' random seed\n"
        "  --json               the final table as one JSON object\n"
        "  --quiet              no progress lines\n"
        "  --serve[=PORT]       serve the dashboard (kiln serve) while the run goes, default\n"
        "                       port 8470 on 127.0.0.1\n"
        "  -h, --help           this text\n"
        "\n"
        "The llm agent (off unless --llm-url is given; docs/agents.md): N of the agent\n"
        "processes ask an OpenAI-compatible endpoint (vLLM, llama.cpp server, Ollama, a hosted\n"
        "API) for a faster kernel than the node MCTS picks, with its time, SOL %% and the\n"
        "failures below it in the prompt; each kernel is a candidate like any other (agent\n"
        "\"llm\"). Problems no family matches are searched by the llm agents alone. An llm\n"
        "agent stops when --llm-token-budget is spent or after 8 exchanges in a row without a\n"
        "new candidate; the others go on.\n"
        "  --llm-agents N        agent processes that are llm agents (default 1); with\n"
        "                        --agents K they are N of the K, and at least one built-in\n"
        "                        agent stays\n"
        "%s"
        "\n"
        "Exit status: 0 done; 1 the run failed or was interrupted (resume with the same\n"
        "command); 2 bad usage, a store locked by another run, or a corrupt store.\n",
        kiln_llm_options_help());
}

static int parse_int(const char *opt, const char *arg, int min, int *out) {
    char *end = NULL;
    long v = strtol(arg, &end, 10);
    if (!arg[0] || *end || v < min || v > 1000000000L) {
        fprintf(stderr, "kiln optimize: %s wants an integer >= %d, got '%s'\n", opt, min, arg);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int parse_seconds(const char *opt, const char *arg, double *out) {
    char *end = NULL;
    double v = strtod(arg, &end);
    if (!arg[0] || *end || !(v > 0)) {
        fprintf(stderr, "kiln optimize: %s wants seconds > 0, got '%s'\n", opt, arg);
        return -1;
    }
    *out = v;
    return 0;
}

int kiln_cmd_optimize(int argc, char **argv) {
    enum {
        OPT_BUDGET = 256,
        OPT_TIME,
        OPT_AGENTS,
        OPT_SPECIALISTS,
        OPT_BACKEND,
        OPT_GATES,
        OPT_TOP,
        OPT_PLATEAU,
        OPT_RETIME,
        OPT_ITERS,
        OPT_SETS,
        OPT_TIMEOUT,
        OPT_SEED,
        OPT_JSON,
        OPT_QUIET,
        OPT_SERVE,
        OPT_LLM_AGENTS,
        OPT_LLM /* every other --llm-* option: kiln_llm_parse_option reads it by name */
    };
    static const struct option longopts[] = {
        {"budget", required_argument, 0, OPT_BUDGET},
        {"time", required_argument, 0, OPT_TIME},
        {"agents", required_argument, 0, OPT_AGENTS},
        {"specialists", required_argument, 0, OPT_SPECIALISTS},
        {"backend", required_argument, 0, OPT_BACKEND},
        {"gates", required_argument, 0, OPT_GATES},
        {"top", required_argument, 0, OPT_TOP},
        {"plateau", required_argument, 0, OPT_PLATEAU},
        {"retime-rounds", required_argument, 0, OPT_RETIME},
        {"iters", required_argument, 0, OPT_ITERS},
        {"sets", required_argument, 0, OPT_SETS},
        {"timeout", required_argument, 0, OPT_TIMEOUT},
        {"seed", required_argument, 0, OPT_SEED},
        {"json", no_argument, 0, OPT_JSON},
        {"quiet", no_argument, 0, OPT_QUIET},
        {"serve", optional_argument, 0, OPT_SERVE},
        {"llm-agents", required_argument, 0, OPT_LLM_AGENTS},
        KILN_CLI_LLM_LONGOPTS(OPT_LLM),
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    kiln_optimize_options o;
    kiln_optimize_options_default(&o);
    int serve_port = -1;           /* -1: no dashboard */
    const char *llm_option = NULL; /* an --llm-* option given (it needs --llm-url) */
    kiln_err err;
    int c, li = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, &li)) != -1) {
        int bad = 0;
        switch (c) {
        case OPT_BUDGET:
            bad = parse_int("--budget", optarg, 1, &o.budget);
            break;
        case OPT_TIME:
            bad = parse_seconds("--time", optarg, &o.time_s);
            break;
        case OPT_AGENTS:
            bad = parse_int("--agents", optarg, 1, &o.agents);
            break;
        case OPT_SPECIALISTS:
            o.specialists = optarg;
            break;
        case OPT_BACKEND:
            if (strcmp(optarg, "cuda") != 0 && strcmp(optarg, "cpu") != 0) {
                fprintf(stderr, "kiln optimize: unknown backend '%s' (use cuda or cpu)\n", optarg);
                bad = 1;
            }
            o.backend = optarg;
            break;
        case OPT_GATES:
            bad = parse_int("--gates", optarg, 1, &o.gates);
            break;
        case OPT_TOP:
            bad = parse_int("--top", optarg, 1, &o.top);
            break;
        case OPT_PLATEAU:
            bad = parse_int("--plateau", optarg, 0, &o.plateau);
            break;
        case OPT_RETIME:
            bad = parse_int("--retime-rounds", optarg, 1, &o.retime_rounds);
            break;
        case OPT_ITERS:
            bad = parse_int("--iters", optarg, 1, &o.iters);
            break;
        case OPT_SETS:
            bad = parse_int("--sets", optarg, 1, &o.sets);
            break;
        case OPT_TIMEOUT:
            bad = parse_seconds("--timeout", optarg, &o.timeout_s);
            break;
        case OPT_SEED: {
            char *end = NULL;
            o.seed = strtoull(optarg, &end, 0);
            if (!optarg[0] || *end) {
                fprintf(stderr, "kiln optimize: --seed wants an integer, got '%s'\n", optarg);
                bad = 1;
            }
            break;
        }
        case OPT_JSON:
            o.json = 1;
            break;
        case OPT_QUIET:
            o.quiet = 1;
            break;
        case OPT_SERVE:
            serve_port = 8470;
            if (optarg)
                bad = parse_int("--serve", optarg, 0, &serve_port) || serve_port > 65535;
            break;
        case OPT_LLM_AGENTS:
            bad = parse_int("--llm-agents", optarg, 1, &o.llm_agents) || o.llm_agents > 16;
            if (o.llm_agents > 16)
                fprintf(stderr, "kiln optimize: --llm-agents wants at most 16\n");
            llm_option = longopts[li].name;
            break;
        case OPT_LLM:
            if (kiln_llm_parse_option(&o.llm, longopts[li].name, optarg, &err) != 1) {
                fprintf(stderr, "kiln optimize: %s\n", err.msg);
                bad = 1;
            }
            if (strcmp(longopts[li].name, "llm-url") != 0)
                llm_option = longopts[li].name;
            break;
        case 'h':
            optimize_usage(stdout);
            return 0;
        default:
            optimize_usage(stderr);
            return 2;
        }
        if (bad)
            return 2;
    }
    if (argc - optind < 1) {
        fprintf(stderr, "kiln optimize: expected RUN (see kiln optimize --help)\n");
        return 2;
    }
    if (llm_option && !o.llm.url) {
        fprintf(stderr,
                "kiln optimize: --%s needs --llm-url (the llm agent is off without an "
                "endpoint; docs/agents.md)\n",
                llm_option);
        return 2;
    }
    o.run_dir = argv[optind];
    o.n_problem_dirs = argc - optind - 1;
    o.problem_dirs = (const char **)(argv + optind + 1);
    err.msg[0] = 0;
    /* The dashboard runs in a forked child (kiln_web_spawn) so that the coordinator stays
     * single-threaded and may go on forking its agents and gates. */
    pid_t web_pid = 0;
    if (serve_port >= 0) {
        kiln_web_options wo;
        kiln_web_options_default(&wo);
        wo.run_dir = o.run_dir;
        wo.port = serve_port;
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
