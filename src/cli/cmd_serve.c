/* cmd_serve.c: `kiln serve RUN`: the dashboard of a run, live while `kiln optimize` writes it
 * (docs/dashboard.md). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../store/store.h"
#include "../web/server.h"
#include "cli.h"
#include "options.h"

static const kiln_cli_use serve_options[] = {
    {KILN_OPT_PORT, NULL, NULL},
    {KILN_OPT_HOST, NULL, NULL},
    {KILN_OPT_POLL_MS, NULL, NULL},
};

static const kiln_cli_command serve_command = {
    .name = "serve",
    .usage = "RUN [options]",
    .about = "Serves the dashboard of RUN (its store RUN/kiln.db, opened read-only) until Ctrl-C: "
             "the run's progress, best-so-far curves, hot ops, search trees, candidates with their "
             "source and evidence, failures and the roofline, updated live while kiln optimize "
             "writes the store.",
    .use = serve_options,
    .n_use = KILN_CLI_N(serve_options),
    .exit_status = "0  stopped by Ctrl-C (SIGINT) or SIGTERM\n"
                   "1  the server could not start (the port is in use)\n"
                   "2  bad usage, or no readable store in RUN",
    .example = "kiln serve runs/mlp --port 8080",
};

int kiln_cmd_serve(int argc, char **argv) {
    kiln_web_options o;
    kiln_web_options_default(&o);
    kiln_cli_args a;
    kiln_cli_args_init(&a);
    a.web = &o;
    int first = 0;
    int rc = kiln_cli_parse(&serve_command, argc, argv, &a, &first);
    if (rc != KILN_CLI_CONTINUE)
        return rc;
    int host_given = a.given[KILN_OPT_HOST];
    if (argc - first != 1)
        return kiln_cli_usage_error(&serve_command, "expected one RUN directory");
    o.run_dir = argv[first];
    struct stat st;
    if (stat(o.run_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "kiln serve: %s is not a directory (a RUN of kiln optimize)\n", o.run_dir);
        return 2;
    }
    /* Refuse a missing or foreign store now, with its reason, rather than in every reply. */
    kiln_store *s = NULL;
    kiln_err err;
    if (kiln_store_open(o.run_dir, 1, &s, &err)) {
        fprintf(stderr, "kiln serve: %s\n", err.msg);
        return 2;
    }
    kiln_store_close(s);

    o.allow_remote = host_given;
    if (host_given && !kiln_web_host_is_loopback(o.host))
        fprintf(stderr,
                "kiln serve: warning: --host %s is not loopback: anyone who can reach this "
                "machine can read the run (its kernels, its logs) without a password\n",
                o.host);

    /* Signals are taken by sigwait below: block them before the server's threads inherit the
     * mask. A client that goes away must not kill the server with SIGPIPE. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    kiln_web *w = NULL;
    if (kiln_web_start(&o, &w, &err)) {
        fprintf(stderr, "kiln serve: %s\n", err.msg);
        return 1;
    }
    printf("kiln serve: the dashboard of %s is at %s (Ctrl-C stops)\n", o.run_dir, kiln_web_url(w));
    fflush(stdout);
    int sig = 0;
    sigwait(&set, &sig);
    kiln_web_stop(w);
    fprintf(stderr, "kiln serve: stopped\n");
    return 0;
}
