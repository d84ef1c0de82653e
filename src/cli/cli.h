/* cli.h: the subcommands of the kiln binary; each takes its own argv (argv[0] = the command name)
 * and returns the process exit status: 0 done, 1 failed at the task, 2 bad usage or input. */
#ifndef KILN_CLI_H
#define KILN_CLI_H

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

#endif
