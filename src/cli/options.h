/* options.h: the one table of kiln's command-line options and the one parser and help format that
 * every C command goes through.
 *
 * Each option is declared once (options.c): its name, the kind of value it takes, the bounds of
 * that value, its help text, and the field its value is stored in. A command lists the rows it
 * accepts (kiln_cli_use), hands kiln_cli_parse the structs those fields live in, already filled
 * with their owners' defaults, and gets them back filled from argv. The help text of every command
 * is generated from the same rows and from those defaults, so a bound or a default is written in
 * one place only (the table, or the floor that owns the default). Redis's config table is the
 * model. */
#ifndef KILN_CLI_OPTIONS_H
#define KILN_CLI_OPTIONS_H

#include <stdint.h>
#include <stdio.h>

#include "../gate/gate.h"
#include "../search/llm.h"
#include "../search/optimize.h"
#include "../web/server.h"

/* The rows of the table. */
typedef enum {
    KILN_OPT_BACKEND,
    KILN_OPT_DEVICE,
    KILN_OPT_ITERS,
    KILN_OPT_WARMUP,
    KILN_OPT_SETS,
    KILN_OPT_TIMEOUT,
    KILN_OPT_SEED,
    KILN_OPT_REF_DIR,
    KILN_OPT_NO_TIME,
    KILN_OPT_RETIME_NOISY,
    KILN_OPT_JSON,
    KILN_OPT_QUIET,
    KILN_OPT_FAMILY,
    KILN_OPT_LIMIT,
    KILN_OPT_SAMPLE,
    KILN_OPT_WHERE,
    KILN_OPT_OUT,
    KILN_OPT_JSONL,
    KILN_OPT_RESUME,
    KILN_OPT_LIST,
    KILN_OPT_BUDGET,
    KILN_OPT_TIME,
    KILN_OPT_AGENTS,
    KILN_OPT_SPECIALISTS,
    KILN_OPT_GATES,
    KILN_OPT_TOP,
    KILN_OPT_PLATEAU,
    KILN_OPT_RETIME_ROUNDS,
    KILN_OPT_SERVE,
    KILN_OPT_N,
    KILN_OPT_PARENT,
    KILN_OPT_PORT,
    KILN_OPT_HOST,
    KILN_OPT_POLL_MS,
    KILN_OPT_LLM_AGENTS,
    KILN_OPT_LLM_URL, /* the --llm-* rows stay together, from here to the end */
    KILN_OPT_LLM_MODEL,
    KILN_OPT_LLM_KEY_ENV,
    KILN_OPT_LLM_TEMPERATURE,
    KILN_OPT_LLM_MAX_TOKENS,
    KILN_OPT_LLM_TIMEOUT,
    KILN_OPT_LLM_CONNECT_TIMEOUT,
    KILN_OPT_LLM_RETRIES,
    KILN_OPT_LLM_BACKOFF,
    KILN_OPT_LLM_TOKEN_BUDGET,
    KILN_OPT_LLM_MAX_REPLY,
    KILN_OPT_LLM_FEEDBACK,
    KILN_OPT_COUNT
} kiln_opt;

/* The values of the options that no lower floor owns: they belong to the command line itself. */
typedef struct {
    const char *backend; /* NULL: the command's rule */
    const char *ref_dir;
    const char *family, *sample, *out, *jsonl, *parent;
    const char *where; /* sweep: "NAME=V[,V..] ...", NULL: every point */
    uint64_t seed;
    int64_t limit; /* 0: every point */
    int n_rounds;
    int json, quiet, resume, list;
} kiln_cli_values;

/* Where the parsed values go. cli belongs to the parser's caller; the pointers name the owners'
 * structs a command uses (NULL where it lists none of their rows). given[row] is set for every
 * option that appeared on the command line. */
typedef struct {
    kiln_cli_values cli;
    kiln_gate_options *gate;
    kiln_llm_config *llm;
    kiln_optimize_options *optimize;
    kiln_web_options *web;
    unsigned char given[KILN_OPT_COUNT];
} kiln_cli_args;

/* One option a command accepts: a row of the table, with the command's own words where the option
 * means something particular there (NULL: the table's help, and its default). */
typedef struct {
    kiln_opt opt;
    const char *help;
    const char *dflt;
} kiln_cli_use;

/* A command's surface: what its --help says, part by part, in the one order every command has. */
typedef struct {
    const char *name;        /* "eval" */
    const char *usage;       /* after "kiln NAME "; '\n' separates several forms */
    const char *about;       /* one paragraph, wrapped when printed */
    const kiln_cli_use *use; /* the options, in the order the help lists them */
    int n_use;
    const char *exit_status; /* one "CODE  meaning" per line */
    const char *example;     /* one command line */
} kiln_cli_command;

/* The llm agent's options, for the option list of every command that runs the agent. */
/* clang-format off */
#define KILN_CLI_LLM_USES                                                                          \
    {KILN_OPT_LLM_URL, NULL, NULL}, {KILN_OPT_LLM_MODEL, NULL, NULL},                              \
    {KILN_OPT_LLM_KEY_ENV, NULL, NULL}, {KILN_OPT_LLM_TEMPERATURE, NULL, NULL},                    \
    {KILN_OPT_LLM_MAX_TOKENS, NULL, NULL}, {KILN_OPT_LLM_TIMEOUT, NULL, NULL},                     \
    {KILN_OPT_LLM_CONNECT_TIMEOUT, NULL, NULL}, {KILN_OPT_LLM_RETRIES, NULL, NULL},                \
    {KILN_OPT_LLM_BACKOFF, NULL, NULL}, {KILN_OPT_LLM_TOKEN_BUDGET, NULL, NULL},                   \
    {KILN_OPT_LLM_MAX_REPLY, NULL, NULL}, {KILN_OPT_LLM_FEEDBACK, NULL, NULL}
/* clang-format on */

#define KILN_CLI_N(array) ((int)(sizeof(array) / sizeof((array)[0])))

/* Returned by kiln_cli_parse when the command goes on; any other value is its exit status. */
#define KILN_CLI_CONTINUE (-1)

/* The command line's own defaults in a->cli (sample "even", parent "incumbent", n_rounds 3, the
 * rest zero or NULL), no owners' structs, nothing given. */
void kiln_cli_args_init(kiln_cli_args *a);

/* Parses argv (argv[0] is the command's name) by cmd's option list into a. The structs that a's
 * pointers name must hold their defaults already: the help printed for -h/--help shows them.
 * Returns KILN_CLI_CONTINUE with *first set to the first operand (getopt order: options may come
 * after operands); 0 after printing the help on stdout; 2 after printing one line on stderr
 * ("kiln NAME: unknown option '--x'; see kiln NAME --help", "kiln NAME: --iters wants an integer
 * in [1, 100000], got '0'"). */
int kiln_cli_parse(const kiln_cli_command *cmd, int argc, char **argv, kiln_cli_args *a,
                   int *first);

/* Prints cmd's help: usage, description, options (with their bounds and the defaults in a),
 * exit status, example. */
void kiln_cli_help(const kiln_cli_command *cmd, const kiln_cli_args *a, FILE *f);

/* The long option of a row, without its dashes ("llm-url"). */
const char *kiln_cli_option_name(kiln_opt opt);

/* Prints "kiln NAME: MESSAGE; see kiln NAME --help" on stderr and returns 2 (bad usage), for the
 * checks a command makes after parsing: `return kiln_cli_usage_error(&cmd, "expected RUN");`. */
int kiln_cli_usage_error(const kiln_cli_command *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
