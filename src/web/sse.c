/* sse.c: the live feed (GET /api/stream, server-sent events): a poller thread watches the store's
 * heads, and every open stream sends the rows that appeared since its cursor.
 *
 * The store's tables only grow and their ids only rise (docs/store.md), so "what is new" is
 * "id > the last id sent" per table, and a stream's whole state is a cursor of three ids
 * (candidate, result, event). Every event carries the cursor after it as its SSE id; a browser that
 * reconnects sends it back as Last-Event-ID and loses nothing. Nodes are updated in place, so for
 * the tree the stream sends only which problems' trees changed (a "tree" event), and the page
 * refetches them.
 *
 * One poller thread (not one per stream) asks the store every poll_ms whether anything changed
 * (kiln_store_data_version: a counter SQLite bumps when another connection commits, costing no
 * read of the tables) and, when it did, reads the heads and bumps a generation number that wakes
 * the streams. Each stream then reads its own backlog (at most ROWS_PER_READ per table per read)
 * with a pooled store handle in one short read snapshot, and goes back to waiting without holding a
 * handle. A stream whose client is far behind (over RESET_BACKLOG rows) gets a "reset" event
 * instead of the rows: reloading is cheaper than replaying. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "web_impl.h"

#define ROWS_PER_READ 500
#define RESET_BACKLOG 5000
#define KEEPALIVE_S 15
#define RETRY_MS 2000

typedef struct {
    kiln_web *w;
    kiln_store_heads cur;
    char *out; /* bytes not yet handed to MHD */
    size_t len, pos, cap;
    int more;          /* the last read stopped at ROWS_PER_READ: read again before waiting */
    uint64_t seen_gen; /* the poller's generation when the stream last read the store */
} sse_conn;

/* ---- output ---- */

static void out_append(sse_conn *c, const char *text, size_t n) {
    if (c->len + n + 1 > c->cap) {
        c->cap = (c->len + n + 1) * 2;
        c->out = xrealloc(c->out, c->cap);
    }
    memcpy(c->out + c->len, text, n);
    c->len += n;
    c->out[c->len] = 0;
}

/* One event: "id: C.R.E\nevent: KIND\ndata: JSON\n\n" (the JSON has no raw newline). Takes data. */
static void out_event(sse_conn *c, const char *kind, cJSON *data) {
    char head[160];
    int n = snprintf(head, sizeof head,
                     "id: %" PRId64 ".%" PRId64 ".%" PRId64 "\nevent: %s\ndata: ", c->cur.candidate,
                     c->cur.result, c->cur.event, kind);
    out_append(c, head, (size_t)n);
    char *json = cJSON_PrintUnformatted(data);
    KILN_ASSERT(json);
    out_append(c, json, strlen(json));
    out_append(c, "\n\n", 2);
    free(json);
    cJSON_Delete(data);
}

/* ---- reading the backlog ---- */

typedef int (*rows_after)(kiln_store *s, int64_t after, long limit, cJSON *rows, kiln_err *err);

/* Sends the rows of one table past *cursor as events of kind; returns the rows sent, -1 on a
 * failed read. */
static int feed_table(sse_conn *c, kiln_store *s, const char *kind, rows_after read,
                      int64_t *cursor) {
    cJSON *rows = cJSON_CreateArray();
    if (read(s, *cursor, ROWS_PER_READ, rows, NULL) != KILN_OK) {
        cJSON_Delete(rows);
        return -1;
    }
    int n = 0;
    cJSON *o;
    while ((o = cJSON_DetachItemFromArray(rows, 0))) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
        *cursor = (int64_t)id->valuedouble;
        out_event(c, kind, o);
        n++;
    }
    cJSON_Delete(rows);
    return n;
}

/* Reads what is new since c->cur into c->out. 0, or -1 when the store cannot be read. */
static int fill(sse_conn *c) {
    kiln_store *s = NULL;
    kiln_err err;
    if (web_db_acquire(c->w, &s, &err)) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "error", err.msg);
        out_event(c, "store_error", o);
        return -1;
    }
    int broken = kiln_store_read_begin(s, NULL) != KILN_OK;
    kiln_store_heads heads;
    c->more = 0;
    if (!broken)
        broken = kiln_store_heads_read(s, &heads, NULL) != KILN_OK;
    if (!broken) {
        int64_t backlog = (heads.candidate - c->cur.candidate) + (heads.result - c->cur.result) +
                          (heads.event - c->cur.event);
        int ahead = heads.candidate < c->cur.candidate || heads.result < c->cur.result ||
                    heads.event < c->cur.event;
        if (backlog > RESET_BACKLOG || ahead) {
            /* Too far behind, or a cursor from another store: the page reloads its views. */
            c->cur = heads;
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "reason",
                                    ahead ? "the store is not the one the cursor "
                                            "came from"
                                          : "too many rows behind");
            out_event(c, "reset", o);
        } else {
            int nc =
                feed_table(c, s, "candidate", kiln_store_dash_new_candidates, &c->cur.candidate);
            int nr = nc < 0
                         ? -1
                         : feed_table(c, s, "result", kiln_store_dash_new_results, &c->cur.result);
            int ne =
                nr < 0 ? -1 : feed_table(c, s, "event", kiln_store_dash_new_events, &c->cur.event);
            broken = ne < 0;
            c->more = nc == ROWS_PER_READ || nr == ROWS_PER_READ || ne == ROWS_PER_READ;
            if (!broken && heads.node_unix_s > c->cur.node_unix_s) {
                cJSON *o = cJSON_CreateObject();
                cJSON *ids = cJSON_AddArrayToObject(o, "problem_ids");
                kiln_store_dash_trees_changed(s, c->cur.node_unix_s, ids, NULL);
                c->cur.node_unix_s = heads.node_unix_s;
                out_event(c, "tree", o);
            }
        }
    }
    if (kiln_store_read_end(s, NULL) != KILN_OK)
        broken = 1;
    web_db_release(c->w, s, broken);
    return broken ? -1 : 0;
}

/* ---- the stream ---- */

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    sse_conn *c = cls;
    kiln_web *w = c->w;
    while (c->pos == c->len) {
        c->pos = c->len = 0;
        pthread_mutex_lock(&w->live_mu);
        int stopping = w->stopping;
        uint64_t gen = w->generation;
        pthread_mutex_unlock(&w->live_mu);
        if (stopping)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (gen != c->seen_gen || c->more) {
            /* The generation is taken before the read: a change during it wakes the next wait. */
            c->seen_gen = gen;
            fill(c); /* a failure is a store_error event; the next change tries again */
            continue;
        }
        /* Nothing new: wait for the poller (or the keep-alive, which also finds a dead client). */
        struct timespec deadline;
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        deadline.tv_sec += KEEPALIVE_S;
        int timed_out = 0;
        pthread_mutex_lock(&w->live_mu);
        while (!w->stopping && w->generation == c->seen_gen && !timed_out)
            timed_out = pthread_cond_timedwait(&w->live_cv, &w->live_mu, &deadline) == ETIMEDOUT;
        pthread_mutex_unlock(&w->live_mu);
        if (timed_out)
            out_append(c, ": keep-alive\n\n", 15);
    }
    size_t n = c->len - c->pos;
    if (n > max)
        n = max;
    memcpy(buf, c->out + c->pos, n);
    c->pos += n;
    return (ssize_t)n;
}

static void sse_free(void *cls) {
    sse_conn *c = cls;
    pthread_mutex_lock(&c->w->live_mu);
    c->w->n_streams--;
    pthread_mutex_unlock(&c->w->live_mu);
    free(c->out);
    free(c);
}

/* "C.R.E": three ids. 0 or -1 (-2: an id out of range). */
static int parse_cursor(const char *text, kiln_store_heads *c) {
    char part[3][24];
    const char *p = text;
    for (int i = 0; i < 3; i++) {
        size_t n = strcspn(p, ".");
        if (n == 0 || n >= sizeof part[i] || (i < 2 && p[n] != '.') || (i == 2 && p[n] != 0))
            return -1;
        memcpy(part[i], p, n);
        part[i][n] = 0;
        p += n + (i < 2);
    }
    int64_t v[3];
    for (int i = 0; i < 3; i++) {
        int why = web_parse_id(part[i], &v[i]);
        if (why)
            return why;
    }
    c->candidate = v[0];
    c->result = v[1];
    c->event = v[2];
    return 0;
}

static enum MHD_Result only_since(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value) {
    (void)kind;
    (void)value;
    if (strcmp(key, "since") == 0)
        return MHD_YES;
    snprintf(cls, 96, "%s", key);
    return MHD_NO;
}

struct MHD_Response *web_sse_response(kiln_web *w, struct MHD_Connection *conn, web_reply *r) {
    char bad[96] = "";
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, only_since, bad);
    if (bad[0]) {
        web_reply_error(r, MHD_HTTP_BAD_REQUEST,
                        "unknown parameter '%s' for /api/stream (it takes: since)", bad);
        return NULL;
    }
    /* The browser's Last-Event-ID (a reconnect) wins over ?since= (the page's first connect). */
    const char *since = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Last-Event-ID");
    const char *from = "Last-Event-ID";
    if (!since || !*since) {
        since = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "since");
        from = "since";
    }
    sse_conn *c = xcalloc(1, sizeof *c);
    c->w = w;
    kiln_store *s = NULL;
    kiln_err err;
    kiln_store_heads heads;
    if (web_db_acquire(w, &s, &err)) {
        web_reply_error(r, MHD_HTTP_SERVICE_UNAVAILABLE, "the store cannot be read: %s", err.msg);
        free(c);
        return NULL;
    }
    int broken = kiln_store_heads_read(s, &heads, NULL) != KILN_OK;
    web_db_release(w, s, broken);
    if (broken) {
        web_reply_error(r, MHD_HTTP_SERVICE_UNAVAILABLE, "the store cannot be read");
        free(c);
        return NULL;
    }
    c->seen_gen = UINT64_MAX; /* read once at the start: the backlog since the cursor */
    c->cur = heads;           /* without a cursor: from now on */
    if (since) {
        int why = parse_cursor(since, &c->cur);
        if (why) {
            web_reply_error(r, MHD_HTTP_BAD_REQUEST,
                            "%s '%.60s' is not a stream cursor (CANDIDATE.RESULT.EVENT ids%s)",
                            from, since, why == -2 ? ", each at most 2^53" : "");
            free(c);
            return NULL;
        }
        c->cur.node_unix_s = heads.node_unix_s;
    }
    /* The first bytes: the reconnect delay and a hello with the heads, so the page knows the
     * stream is live before anything happens. */
    char retry[32];
    int n = snprintf(retry, sizeof retry, "retry: %d\n\n", RETRY_MS);
    out_append(c, retry, (size_t)n);
    cJSON *hello = cJSON_CreateObject();
    cJSON_AddNumberToObject(hello, "poll_ms", w->opt.poll_ms);
    cJSON *h = cJSON_AddObjectToObject(hello, "heads");
    cJSON_AddNumberToObject(h, "candidate", (double)heads.candidate);
    cJSON_AddNumberToObject(h, "result", (double)heads.result);
    cJSON_AddNumberToObject(h, "event", (double)heads.event);
    out_event(c, "hello", hello);

    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_read, c, sse_free);
    if (!resp) {
        free(c->out);
        free(c);
        web_reply_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "cannot create the stream");
        return NULL;
    }
    pthread_mutex_lock(&w->live_mu);
    w->n_streams++;
    pthread_mutex_unlock(&w->live_mu);
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    return resp;
}

/* ---- the poller ---- */

void *web_sse_poller(void *arg) {
    kiln_web *w = arg;
    kiln_store *s = NULL;
    int64_t last_version = -1;
    for (;;) {
        pthread_mutex_lock(&w->live_mu);
        int stopping = w->stopping;
        pthread_mutex_unlock(&w->live_mu);
        if (stopping)
            break;
        if (!s && kiln_store_open(w->run_dir, 1, &s, NULL) != KILN_OK)
            s = NULL; /* no store yet (optimize about to create it): try again next time */
        if (s) {
            int64_t version = -1;
            kiln_store_heads heads;
            if (kiln_store_data_version(s, &version, NULL) != KILN_OK) {
                kiln_store_close(s);
                s = NULL;
            } else if (version != last_version && kiln_store_heads_read(s, &heads, NULL) == 0) {
                last_version = version;
                pthread_mutex_lock(&w->live_mu);
                if (memcmp(&heads, &w->latest, sizeof heads) != 0) {
                    w->latest = heads;
                    w->generation++;
                    pthread_cond_broadcast(&w->live_cv);
                }
                pthread_mutex_unlock(&w->live_mu);
            }
        }
        /* Sleep poll_ms, or less when the server stops. */
        struct timespec deadline;
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        deadline.tv_nsec += (long)(w->opt.poll_ms % 1000) * 1000000L;
        deadline.tv_sec += w->opt.poll_ms / 1000 + deadline.tv_nsec / 1000000000L;
        deadline.tv_nsec %= 1000000000L;
        pthread_mutex_lock(&w->live_mu);
        while (!w->stopping &&
               pthread_cond_timedwait(&w->live_cv, &w->live_mu, &deadline) != ETIMEDOUT) {
        }
        pthread_mutex_unlock(&w->live_mu);
    }
    kiln_store_close(s);
    return NULL;
}
