/* server.h: the dashboard's HTTP server (`kiln serve`, `kiln optimize --serve`): JSON endpoints
 * over a run's store, server-sent events and the embedded single-page app, on libmicrohttpd
 * (docs/dashboard.md). */
#ifndef KILN_WEB_SERVER_H
#define KILN_WEB_SERVER_H

#include <sys/types.h>

#include "../util/common.h"

typedef struct kiln_web kiln_web;

typedef struct {
    const char *run_dir; /* RUN: the server reads RUN/kiln.db, read-only */
    const char *host;    /* address to bind; NULL: "127.0.0.1" */
    int port;            /* 0: any free port (kiln_web_port says which) */
    int allow_remote;    /* 1 lets host be an address that is not loopback; else such a host is
                            refused (KILN_ERR_INVALID) */
    int poll_ms;         /* how often the live feed looks at the store; <= 0: 500 */
    int max_connections; /* concurrent HTTP connections (each a thread); <= 0: 64 */
} kiln_web_options;

void kiln_web_options_default(kiln_web_options *o);

/* 1 when host is a loopback address (127.0.0.0/8, ::1, or a name that resolves only to those, such
 * as "localhost"); 0 otherwise or when it does not resolve. */
int kiln_web_host_is_loopback(const char *host);

/* Starts serving in background threads of this process and returns at once. Fails with
 * KILN_ERR_INVALID (bad host, non-loopback host without allow_remote) or KILN_ERR_IO (the address
 * is taken, no sockets). The store does not need to exist yet: requests answer 503 until it does.
 * Do not fork() while a server runs in the process (the child would inherit its sockets but not its
 * threads): a process that forks workers uses kiln_web_spawn instead. */
int kiln_web_start(const kiln_web_options *o, kiln_web **out, kiln_err *err);

/* The port the server listens on, and its URL ("http://127.0.0.1:8470/"). */
int kiln_web_port(const kiln_web *w);
const char *kiln_web_url(const kiln_web *w);

/* Stops accepting, ends the live streams, waits for the connection threads and frees w. NULL is
 * a no-op. */
void kiln_web_stop(kiln_web *w);

/* For `kiln optimize --serve`: forks a child process that serves until kiln_web_spawn_stop (or
 * until the parent dies: it gets SIGTERM then). A crash in the server never touches the caller,
 * and the caller stays single-threaded, so it may go on forking. *pid and *port are set on
 * success; on failure (the child could not bind, ...) the child is reaped and err says why. */
int kiln_web_spawn(const kiln_web_options *o, pid_t *pid, int *port, kiln_err *err);
void kiln_web_spawn_stop(pid_t pid);

#endif
