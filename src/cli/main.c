/* main.c: the `kiln` command line: dispatches to one subcommand per stage of the pipeline. */
#include <stdio.h>
#include <string.h>

#include "../util/version.h"
#include "cli.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"eval", kiln_cmd_eval, "prove and time one kernel file on a problem directory"},
    {"capture", kiln_cmd_capture, "run a PyTorch script and write its hot ops as problems"},
    {"sweep", kiln_cmd_sweep, "run every point of the matching kernel families through the gate"},
    {"optimize", kiln_cmd_optimize, "search kernels for a run's problems: agents, gates, MCTS"},
    {"run", kiln_cmd_run, "run an unmodified PyTorch script with a kiln library installed"},
    {"tune", kiln_cmd_tune, "capture + optimize + install check + report, for one script"},
    {"submit", kiln_cmd_submit, "hand in a kernel for a problem of a run: gated and recorded"},
    {"llm-try", kiln_cmd_llm_try, "ask an OpenAI-compatible endpoint for kernels; gate them"},
    {"serve", kiln_cmd_serve, "serve a run's dashboard on localhost, live while it optimizes"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: kiln <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n`kiln <command> --help` describes each command. Docs: docs/ in the kiln tree.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("kiln %s\n", KILN_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "kiln: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
