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

#define N_COMMANDS (sizeof commands / sizeof commands[0])

/* The same parts, in the same order, as every command's help (options.c). */
static void usage(FILE *f) {
    fprintf(f,
            "usage: kiln COMMAND [ARGS...]\n"
            "       kiln help COMMAND\n"
            "       kiln --version\n"
            "\n"
            "kiln finds the ops where a PyTorch model's time goes, searches kernel variants for\n"
            "them, proves and times every candidate on the model's own tensors, and puts the\n"
            "winners back into the unmodified model. `kiln help COMMAND` (or `kiln COMMAND\n"
            "--help`) describes each command; docs/ in the kiln tree has the rest.\n"
            "\n"
            "commands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-22s%s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n"
               "options:\n"
               "  -V, --version         print kiln's version\n"
               "  -h, --help            this text\n"
               "\n"
               "exit status:\n"
               "  0   done (the command's own status; its help says more)\n"
               "  1   the command failed at its task\n"
               "  2   bad usage or input, an unknown command\n"
               "\n"
               "example:\n"
               "  kiln tune examples/resnet50.py --backend cpu -- --small\n");
}

static int find_command(const char *name) {
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(name, commands[i].name) == 0)
            return (int)i;
    return -1;
}

static int unknown_command(const char *name) {
    fprintf(stderr, "kiln: unknown command '%s'; see kiln --help\n", name);
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *first = argv[1];
    if (strcmp(first, "--help") == 0 || strcmp(first, "-h") == 0 ||
        (strcmp(first, "help") == 0 && argc == 2)) {
        usage(stdout);
        return 0;
    }
    if (strcmp(first, "--version") == 0 || strcmp(first, "-V") == 0 ||
        strcmp(first, "version") == 0) {
        printf("kiln %s\n", KILN_VERSION);
        return 0;
    }
    if (strcmp(first, "help") == 0) { /* kiln help CMD is kiln CMD --help */
        int k = find_command(argv[2]);
        if (k < 0)
            return unknown_command(argv[2]);
        char *help_argv[] = {argv[2], "--help", NULL};
        return commands[k].run(2, help_argv);
    }
    if (first[0] == '-') {
        fprintf(stderr, "kiln: unknown option '%s'; see kiln --help\n", first);
        return 2;
    }
    int k = find_command(first);
    if (k < 0)
        return unknown_command(first);
    return commands[k].run(argc - 1, argv + 1);
}
