/* web_impl.h: what the dashboard server's files share: the server's state (server.c), the pool of
 * read-only store handles (db.c), replies (reply.c), the JSON endpoints (api.c) and the live feed
 * (sse.c). server.c calls api.c and sse.c; both call db.c and reply.c; nothing calls back. */
#ifndef KILN_WEB_IMPL_H
#define KILN_WEB_IMPL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdint.h>

#include "../store/store.h"
#include "server.h"

#define WEB_POOL_MAX 16
#define WEB_MAX_ID 9007199254740992LL /* 2^53: ids beyond it do not survive a JSON number */

struct kiln_web {
    kiln_web_options opt;
    char *run_dir;
    char host[128];
    int loopback;
    int port;
    char url[192];
    struct MHD_Daemon *daemon;

    /* Idle read-only store handles; a request takes one and gives it back (never two threads on
     * one). */
    pthread_mutex_t pool_mu;
    kiln_store *pool[WEB_POOL_MAX];
    int n_pool;

    /* The live feed: the poller bumps generation whenever the store changed and wakes every stream.
     */
    pthread_mutex_t live_mu;
    pthread_cond_t live_cv;
    uint64_t generation;
    kiln_store_heads latest; /* the store's heads as the poller last saw them */
    int stopping;
    int n_streams;
    pthread_t poller;
    int poller_started;
};

/* A reply before it becomes an MHD_Response: body is owned unless body_static. */
typedef struct {
    int status;
    char *body;
    size_t len;
    int body_static;
    const char *content_type;
    const char *allow; /* the Allow header of a 405 */
} web_reply;

/* ---- db.c ---- */

/* Takes a read-only store handle (opening one when none is idle): KILN_ERR_IO when there is no
 * store, KILN_ERR_FORMAT when the file is not a kiln store this kiln reads. */
int web_db_acquire(kiln_web *w, kiln_store **out, kiln_err *err);
/* Gives it back; broken = 1 closes it instead (after a failed read). */
void web_db_release(kiln_web *w, kiln_store *s, int broken);
/* Closes the idle handles (the server stops). */
void web_db_close_all(kiln_web *w);

/* ---- reply.c ---- */

/* Fills r with {"error": message, "status": status}. */
void web_reply_error(web_reply *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Strict id syntax: decimal digits only, 0 <= id <= 2^53. Returns 0, or -1 (not a number) / -2 (out
 * of range) with nothing written. */
int web_parse_id(const char *text, int64_t *out);

/* ---- api.c ---- */

/* Answers GET /api/<path> (path without the "/api/" prefix); the stream is not handled here. */
void web_api_handle(kiln_web *w, struct MHD_Connection *conn, const char *path, web_reply *r);

/* ---- sse.c ---- */

/* The response of GET /api/stream, or NULL with r filled with an error reply. */
struct MHD_Response *web_sse_response(kiln_web *w, struct MHD_Connection *conn, web_reply *r);
/* The poller thread: watches the store every poll_ms until stopping. */
void *web_sse_poller(void *arg);

#endif
