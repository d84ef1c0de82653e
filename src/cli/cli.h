/* cli.h: the subcommands of the kiln binary; each takes its own argv (argv[0] = the command name)
 * and returns the process exit status: 0 done, 1 failed at the task, 2 bad usage or input. */
#ifndef KILN_CLI_H
#define KILN_CLI_H

#include "../gate/gate.h"

int kiln_cmd_eval(int argc, char **argv);
int kiln_cmd_capture(int argc, char **argv);
int kiln_cmd_sweep(int argc, char **argv);
int kiln_cmd_optimize(int argc, char **argv);
int kiln_cmd_run(int argc, char **argv);
int kiln_cmd_tune(int argc, char **argv);
int kiln_cmd_submit(int argc, char **argv);
int kiln_cmd_llm_try(int argc, char **argv);
int kiln_cmd_serve(int argc, char **argv);

/* Hands the process over to `python -m MODULE` with argv[1..] (capture, run, tune): returns only
 * when the interpreter cannot be started (status 2, message printed). */
int kiln_cli_exec_python(const char *command, const char *module, int argc, char **argv);

/* The gate options several commands share (--iters, --sets, --timeout): parses value into g for the
 * option called name. 0 when parsed, 2 after printing "kiln COMMAND: --name wants ..." on a bad
 * value. */
int kiln_cli_gate_option(const char *command, const char *name, const char *value,
                         kiln_gate_options *g);

/* The getopt_long entries of the llm agent's options (kiln_llm_parse_option takes each), all with
 * the value id: `static const struct option o[] = {..., KILN_CLI_LLM_LONGOPTS(OPT_LLM), ...}`. */
/* clang-format off */
#define KILN_CLI_LLM_LONGOPTS(id)                                                                  \
    {"llm-url", required_argument, 0, id},                                                         \
    {"llm-model", required_argument, 0, id},                                                       \
    {"llm-key-env", required_argument, 0, id},                                                     \
    {"llm-temperature", required_argument, 0, id},                                                 \
    {"llm-max-tokens", required_argument, 0, id},                                                  \
    {"llm-timeout", required_argument, 0, id},                                                     \
    {"llm-connect-timeout", required_argument, 0, id},                                             \
    {"llm-retries", required_argument, 0, id},                                                     \
    {"llm-backoff", required_argument, 0, id},                                                     \
    {"llm-token-budget", required_argument, 0, id},                                                \
    {"llm-max-reply", required_argument, 0, id},                                                   \
    {"llm-feedback", required_argument, 0, id}
/* clang-format on */

#endif
