/* cmd_serve.c: `kiln serve RUN`: the dashboard of a run, live while `kiln optimize` writes it
 * (docs/dashboard.md). */
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../store/store.h"
#include "../web/server.h"
#include "cli.h"

static void serve_usage(FILE *f) {
    fprintf(f,
            "usage: kiln serve RUN [--port P] [--host H]\n"
            "\n"
            "Serves the dashboard of RUN (its store RUN/kiln.db, opened read-only) until Ctrl-C:\n"
            "the run's progress, best-so-far curves, hot ops, search trees, candidates with their\n"
            "source and evidence, failures and the roofline, updated live while kiln optimize\n"
            "writes the store.\n"
            "\n"
            "options:\n"
            "  --port P      port to listen on (default 8470; 0 picks a free one)\n"
            "  --host H      address to bind (default 127.0.0.1). The dashboard is served on\n"
            "                loopback only unless H says otherwise; another address makes it\n"
            "                reachable from other machines (kiln warns then)\n"
            "  --poll-ms N   how often the live feed looks at the store (default 500)\n"
            "  -h, --help    this text\n"
            "\n"
            "Exit status: 0 after Ctrl-C, 1 when the server could not start (port in use),\n"
            "2 bad usage or no readable store in RUN.\n");
}

static int parse_int(const char *s, const char *opt, long lo, long hi, long *out) {
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (!s[0] || *end || v < lo || v > hi) {
        fprintf(stderr, "kiln serve: %s wants an integer in [%ld, %ld], got '%s'\n", opt, lo, hi,
                s);
        return -1;
    }
    *out = v;
    return 0;
}

int kiln_cmd_serve(int argc, char **argv) {
    enum { OPT_PORT = 256, OPT_HOST, OPT_POLL };
    static const struct option longopts[] = {{"port", required_argument, 0, OPT_PORT},
                                             {"host", required_argument, 0, OPT_HOST},
                                             {"poll-ms", required_argument, 0, OPT_POLL},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    kiln_web_options o;
    kiln_web_options_default(&o);
    int host_given = 0;
    long v = 0;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_PORT:
            if (parse_int(optarg, "--port", 0, 65535, &v))
                return 2;
            o.port = (int)v;
            break;
        case OPT_HOST:
            o.host = optarg;
            host_given = 1;
            break;
        case OPT_POLL:
            if (parse_int(optarg, "--poll-ms", 50, 60000, &v))
                return 2;
            o.poll_ms = (int)v;
            break;
        case 'h':
            serve_usage(stdout);
            return 0;
        default:
            serve_usage(stderr);
            return 2;
        }
    }
    if (argc - optind != 1) {
        fprintf(stderr, "kiln serve: want exactly one RUN directory\n");
        serve_usage(stderr);
        return 2;
    }
    o.run_dir = argv[optind];
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
