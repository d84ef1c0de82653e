/* api.c: the dashboard's JSON endpoints (GET /api/...), each a few short, paginated reads of the
 * store in one read transaction (docs/dashboard.md lists them with their parameters and errors). */
#include <cjson/cJSON.h>
#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

#include "web_impl.h"

#define LIST_LIMIT_DEFAULT 100
#define LIST_LIMIT_MAX 1000
#define CURVE_LIMIT_DEFAULT 5000
#define CURVE_LIMIT_MAX 20000
#define TREE_LIMIT_DEFAULT 2000
#define TREE_LIMIT_MAX 20000
/* Bytes of a compile log shown in a list (the candidate page has it all). */
#define EVIDENCE_LOG_MAX 4096

static const char *const outcomes[] = {"ok",  "compile_error", "mismatch", "unwritten",
                                       "nan", "timeout",       "crashed",  "resource"};
#define N_OUTCOMES (sizeof outcomes / sizeof outcomes[0])

/* One request: the connection to read from and the reply being built. */
typedef struct {
    kiln_web *w;
    struct MHD_Connection *conn;
    sqlite3 *db;
    web_reply *r;
    int failed; /* a reply (an error) is already set */
    int broken; /* a statement failed: do not reuse the store connection */
} api;

static double now_unix_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- replies ---- */

static void reply_json(api *a, cJSON *j) {
    a->r->body = cJSON_PrintUnformatted(j);
    KILN_ASSERT(a->r->body);
    a->r->len = strlen(a->r->body);
    a->r->body_static = 0;
    a->r->status = MHD_HTTP_OK;
    a->r->content_type = "application/json";
    cJSON_Delete(j);
}

static int fail(api *a, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(api *a, int status, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!a->failed)
        web_reply_error(a->r, status, "%s", msg);
    a->failed = 1;
    return -1;
}

static int db_fail(api *a, const char *what) {
    a->broken = 1;
    return fail(a, MHD_HTTP_INTERNAL_SERVER_ERROR, "reading the store (%s): %s", what,
                sqlite3_errmsg(a->db));
}

/* ---- statements ---- */

static sqlite3_stmt *prep(api *a, const char *sql) {
    sqlite3_stmt *st = NULL;
    if (a->failed)
        return NULL;
    if (sqlite3_prepare_v2(a->db, sql, -1, &st, NULL) != SQLITE_OK) {
        db_fail(a, "prepare");
        sqlite3_finalize(st);
        return NULL;
    }
    return st;
}

/* 1: a row; 0: done; -1: failed (reply set). */
static int step(api *a, sqlite3_stmt *st) {
    if (!st || a->failed)
        return -1;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        return 1;
    if (rc == SQLITE_DONE)
        return 0;
    db_fail(a, "step");
    return -1;
}

static void bind_opt_id(sqlite3_stmt *st, int i, int64_t v) {
    if (v > 0)
        sqlite3_bind_int64(st, i, v);
    else
        sqlite3_bind_null(st, i);
}

static void bind_opt_text(sqlite3_stmt *st, int i, const char *v) {
    if (v)
        sqlite3_bind_text(st, i, v, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

static double col_num(sqlite3_stmt *st, int i) {
    return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

static const char *col_text(sqlite3_stmt *st, int i) {
    return (const char *)sqlite3_column_text(st, i);
}

/* Adds column i under key as its SQL type says: NULL, a number or a string. */
static void add_col(cJSON *o, const char *key, sqlite3_stmt *st, int i) {
    switch (sqlite3_column_type(st, i)) {
    case SQLITE_INTEGER:
        cJSON_AddNumberToObject(o, key, (double)sqlite3_column_int64(st, i));
        break;
    case SQLITE_FLOAT:
        cJSON_AddNumberToObject(o, key, sqlite3_column_double(st, i));
        break;
    case SQLITE_TEXT:
        cJSON_AddStringToObject(o, key, col_text(st, i));
        break;
    default:
        cJSON_AddNullToObject(o, key);
    }
}

static void add_num_or_null(cJSON *o, const char *key, double v) {
    if (isfinite(v))
        cJSON_AddNumberToObject(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

/* Adds column i (JSON text) parsed, or null when it is NULL or does not parse. */
static void add_json_col(cJSON *o, const char *key, sqlite3_stmt *st, int i) {
    const char *text = col_text(st, i);
    cJSON *v = text ? cJSON_Parse(text) : NULL;
    cJSON_AddItemToObject(o, key, v ? v : cJSON_CreateNull());
}

/* Replies {"items": [...], "next_before": id or null} from st, newest first: each row's columns
 * under keys (the first is the id that pages on); a full page of limit rows has a next page.
 * Finalizes st. */
static void reply_page(api *a, sqlite3_stmt *st, const char *const *keys, int n_keys, long limit) {
    cJSON *j = cJSON_CreateObject();
    cJSON *items = cJSON_AddArrayToObject(j, "items");
    int64_t last = 0;
    long n = 0;
    while (step(a, st) == 1) {
        cJSON *row = cJSON_CreateObject();
        for (int i = 0; i < n_keys; i++)
            add_col(row, keys[i], st, i);
        cJSON_AddItemToArray(items, row);
        last = sqlite3_column_int64(st, 0);
        n++;
    }
    sqlite3_finalize(st);
    if (n == limit)
        cJSON_AddNumberToObject(j, "next_before", (double)last);
    else
        cJSON_AddNullToObject(j, "next_before");
    if (a->failed)
        cJSON_Delete(j);
    else
        reply_json(a, j);
}

/* ---- query parameters ---- */

typedef struct {
    const char *const *allowed;
    char bad[96];
} key_check;

static enum MHD_Result check_key(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value) {
    (void)kind;
    (void)value;
    key_check *k = cls;
    for (int i = 0; k->allowed[i]; i++)
        if (strcmp(k->allowed[i], key) == 0)
            return MHD_YES;
    snprintf(k->bad, sizeof k->bad, "%s", key);
    return MHD_NO;
}

/* Refuses a parameter the endpoint does not take (a typo must not be silently ignored). */
static int args_allowed(api *a, const char *endpoint, const char *const *allowed) {
    key_check k = {.allowed = allowed};
    MHD_get_connection_values(a->conn, MHD_GET_ARGUMENT_KIND, check_key, &k);
    if (!k.bad[0])
        return 0;
    char list[256] = "";
    for (int i = 0; allowed[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                 allowed[i]);
    return fail(a, MHD_HTTP_BAD_REQUEST, "unknown parameter '%s' for %s (it takes: %s)", k.bad,
                endpoint, allowed[0] ? list : "none");
}

static const char *arg(api *a, const char *key) {
    return MHD_lookup_connection_value(a->conn, MHD_GET_ARGUMENT_KIND, key);
}

static int id_error(api *a, const char *what, const char *text, int why) {
    if (why == -2)
        return fail(a, MHD_HTTP_BAD_REQUEST, "%s '%.40s' is out of range (ids are at most 2^53)",
                    what, text);
    return fail(a, MHD_HTTP_BAD_REQUEST, "%s '%.40s' is not an id (a non-negative integer)", what,
                text);
}

/* An optional id parameter: *out = 0 when absent. */
static int arg_id(api *a, const char *key, int64_t *out) {
    *out = 0;
    const char *v = arg(a, key);
    if (!v)
        return 0;
    int why = web_parse_id(v, out);
    return why ? id_error(a, key, v, why) : 0;
}

static int arg_int(api *a, const char *key, long lo, long hi, long dflt, long *out) {
    *out = dflt;
    const char *v = arg(a, key);
    if (!v)
        return 0;
    int64_t x = 0;
    if (web_parse_id(v, &x) != 0 || x < lo || x > hi)
        return fail(a, MHD_HTTP_BAD_REQUEST, "%s '%.40s': want an integer in [%ld, %ld]", key, v,
                    lo, hi);
    *out = (long)x;
    return 0;
}

/* outcome=: one of the gate's outcomes, or "waiting" where allowed. */
static int arg_outcome(api *a, int allow_ok, int allow_waiting, const char **out) {
    *out = arg(a, "outcome");
    if (!*out)
        return 0;
    for (size_t i = 0; i < N_OUTCOMES; i++)
        if (strcmp(*out, outcomes[i]) == 0 && (allow_ok || i > 0))
            return 0;
    if (allow_waiting && strcmp(*out, "waiting") == 0)
        return 0;
    return fail(a, MHD_HTTP_BAD_REQUEST,
                "outcome '%.40s' is not one of %scompile_error, mismatch, unwritten, nan, timeout, "
                "crashed, resource%s",
                *out, allow_ok ? "ok, " : "", allow_waiting ? ", waiting" : "");
}

/* A path segment that must be an id: 400 when malformed, and the caller answers 404 when absent. */
static int path_id(api *a, const char *what, const char *seg, int64_t *out) {
    int why = web_parse_id(seg, out);
    return why ? id_error(a, what, seg, why) : 0;
}

/* The "problem" parameter, checked to exist (404 otherwise). */
static int arg_problem(api *a, int64_t *out) {
    if (arg_id(a, "problem", out))
        return -1;
    if (!*out)
        return 0;
    sqlite3_stmt *st = prep(a, "SELECT 1 FROM problem WHERE id = ?1");
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, *out);
    int row = step(a, st);
    sqlite3_finalize(st);
    if (row < 0)
        return -1;
    return row ? 0 : fail(a, MHD_HTTP_NOT_FOUND, "no problem %lld", (long long)*out);
}

/* ---- run-wide facts ---- */

static cJSON *meta_object(api *a) {
    cJSON *m = cJSON_CreateObject();
    sqlite3_stmt *st = prep(a, "SELECT key, value FROM meta ORDER BY key");
    while (step(a, st) == 1)
        cJSON_AddStringToObject(m, col_text(st, 0), col_text(st, 1) ? col_text(st, 1) : "");
    sqlite3_finalize(st);
    return m;
}

/* The device of the run: the "device" object of the latest result that has one (it carries the
 * measured ceilings), or NULL. */
static cJSON *latest_device(api *a) {
    sqlite3_stmt *st = prep(a, "SELECT json_extract(result_json, '$.device') FROM result "
                               "WHERE json_valid(result_json) AND "
                               "json_type(result_json, '$.device') = 'object' "
                               "ORDER BY id DESC LIMIT 1");
    cJSON *d = NULL;
    if (step(a, st) == 1 && col_text(st, 0))
        d = cJSON_Parse(col_text(st, 0));
    sqlite3_finalize(st);
    return d;
}

/* The geomean of the reference's own times in a result (the eager time when the problem lacks
 * one), NAN when absent. */
static double ref_time_geomean(const char *result_json) {
    cJSON *j = result_json ? cJSON_Parse(result_json) : NULL;
    double lg = 0;
    int n = 0;
    const cJSON *wl;
    cJSON_ArrayForEach(wl, cJSON_GetObjectItemCaseSensitive(j, "workloads")) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(wl, "ref_time_us");
        if (cJSON_IsNumber(t) && t->valuedouble > 0) {
            lg += log(t->valuedouble);
            n++;
        }
    }
    cJSON_Delete(j);
    return n ? exp(lg / n) : NAN;
}

/* ---- problems ---- */

/* The run's state: when it started, whether it is over (its latest run-wide event is "done"). */
typedef struct {
    double started_unix_s, end_unix_s;
    int finished;
    long budget; /* meta "budget" when set, else 0 */
} run_state;

static void read_run_state(api *a, run_state *rs) {
    memset(rs, 0, sizeof *rs);
    rs->started_unix_s = NAN;
    sqlite3_stmt *st =
        prep(a, "SELECT (SELECT value FROM meta WHERE key = 'started_unix_s'), "
                "(SELECT value FROM meta WHERE key = 'created_unix_s'), "
                "(SELECT min(created_unix_s) FROM problem), "
                "(SELECT kind FROM event WHERE problem_id IS NULL ORDER BY id DESC LIMIT 1), "
                "(SELECT created_unix_s FROM event WHERE problem_id IS NULL ORDER BY id DESC "
                "LIMIT 1), "
                "(SELECT value FROM meta WHERE key = 'budget')");
    if (step(a, st) == 1) {
        for (int i = 0; i < 3 && isnan(rs->started_unix_s); i++)
            if (sqlite3_column_type(st, i) != SQLITE_NULL && sqlite3_column_double(st, i) > 0)
                rs->started_unix_s = sqlite3_column_double(st, i);
        const char *kind = col_text(st, 3);
        rs->finished = kind && strcmp(kind, "done") == 0;
        rs->end_unix_s = rs->finished ? sqlite3_column_double(st, 4) : now_unix_s();
        if (col_text(st, 5))
            rs->budget = atol(col_text(st, 5));
    }
    sqlite3_finalize(st);
    if (isnan(rs->started_unix_s))
        rs->started_unix_s = rs->end_unix_s;
}

typedef struct {
    sqlite3_stmt *incumbent, *fastest, *latest;
} winner_stmts;

/* The result id of a problem's winner, what the library ships: the incumbent when its latest
 * verdict is ok, else the fastest candidate whose latest verdict is ok (docs/store.md); 0 when
 * none. The fastest is found by walking the ok verdicts by time until one is its candidate's
 * latest, so that the sort carries three numbers per row, never the result JSON. */
static int64_t winner_result(api *a, winner_stmts *ws, int64_t problem, int64_t incumbent) {
    int64_t found = 0;
    if (incumbent > 0) {
        sqlite3_reset(ws->incumbent);
        sqlite3_bind_int64(ws->incumbent, 1, incumbent);
        sqlite3_bind_int64(ws->incumbent, 2, problem);
        if (step(a, ws->incumbent) == 1 && sqlite3_column_int(ws->incumbent, 1))
            found = sqlite3_column_int64(ws->incumbent, 0);
        sqlite3_reset(ws->incumbent);
        if (found)
            return found;
    }
    sqlite3_reset(ws->fastest);
    sqlite3_bind_int64(ws->fastest, 1, problem);
    while (!found && step(a, ws->fastest) == 1) {
        int64_t rid = sqlite3_column_int64(ws->fastest, 0);
        sqlite3_reset(ws->latest);
        sqlite3_bind_int64(ws->latest, 1, sqlite3_column_int64(ws->fastest, 1));
        if (step(a, ws->latest) == 1 && sqlite3_column_int64(ws->latest, 0) == rid)
            found = rid;
    }
    sqlite3_reset(ws->fastest);
    sqlite3_reset(ws->latest);
    return found;
}

/* The problem rows (all, or the one with id only_id), hottest first, with each one's winner,
 * speedups and (with_counts) its candidates counted by verdict. */
static cJSON *problems_array(api *a, int64_t only_id, const run_state *rs, int with_counts) {
    cJSON *arr = cJSON_CreateArray();
    sqlite3_stmt *st = prep(a, "SELECT p.id, p.name, p.dir, p.share, p.eager_us, p.compile_us, "
                               "p.sol_us, p.incumbent_id, "
                               "(SELECT count(*) FROM candidate c WHERE c.problem_id = p.id), "
                               "(SELECT count(*) FROM event e WHERE e.problem_id = p.id AND "
                               " e.kind = 'done') "
                               "FROM problem p WHERE ?1 IS NULL OR p.id = ?1 "
                               "ORDER BY p.share IS NULL, p.share DESC, p.id");
    sqlite3_stmt *counts = prep(a, "SELECT r.outcome, count(*) FROM result r "
                                   "WHERE r.problem_id = ?1 AND r.id = (SELECT max(id) FROM "
                                   "result x WHERE x.candidate_id = r.candidate_id) "
                                   "GROUP BY r.outcome");
    sqlite3_stmt *best =
        prep(a, "SELECT r.candidate_id, r.time_us, r.sol_pct, r.score, r.spread_pct, "
                "r.result_json, c.params, c.agent, c.draft, c.family FROM result r "
                "JOIN candidate c ON c.id = r.candidate_id WHERE r.id = ?1");
    winner_stmts ws = {
        .incumbent =
            prep(a, "SELECT id, outcome = 'ok' AND time_us IS NOT NULL FROM result "
                    "WHERE candidate_id = ?1 AND problem_id = ?2 ORDER BY id DESC LIMIT 1"),
        .fastest = prep(a, "SELECT id, candidate_id FROM result WHERE problem_id = ?1 AND "
                           "outcome = 'ok' AND time_us IS NOT NULL ORDER BY time_us, candidate_id"),
        .latest = prep(a, "SELECT max(id) FROM result WHERE candidate_id = ?1"),
    };
    if (!st || !counts || !best || !ws.incumbent || !ws.fastest || !ws.latest)
        goto done;
    bind_opt_id(st, 1, only_id);
    int row;
    while ((row = step(a, st)) == 1) {
        int64_t id = sqlite3_column_int64(st, 0);
        cJSON *p = cJSON_CreateObject();
        cJSON_AddItemToArray(arr, p);
        add_col(p, "id", st, 0);
        add_col(p, "name", st, 1);
        add_col(p, "dir", st, 2);
        add_col(p, "share", st, 3);
        add_col(p, "compile_us", st, 5);
        add_col(p, "sol_us", st, 6);
        add_col(p, "incumbent_id", st, 7);
        int64_t n_candidates = sqlite3_column_int64(st, 8);
        cJSON_AddNumberToObject(p, "n_candidates", (double)n_candidates);

        cJSON *oc = cJSON_AddObjectToObject(p, "outcomes");
        int64_t judged = 0;
        sqlite3_reset(counts);
        sqlite3_bind_int64(counts, 1, id);
        while (with_counts && step(a, counts) == 1) {
            cJSON_AddNumberToObject(oc, col_text(counts, 0),
                                    (double)sqlite3_column_int64(counts, 1));
            judged += sqlite3_column_int64(counts, 1);
        }
        cJSON_AddNumberToObject(p, "n_results", (double)judged);
        cJSON_AddNumberToObject(p, "waiting", (double)(n_candidates - judged));

        double eager = col_num(st, 4);
        const char *eager_source = isnan(eager) ? NULL : "problem";
        double best_us = NAN;
        sqlite3_reset(best);
        sqlite3_bind_int64(best, 1, winner_result(a, &ws, id, sqlite3_column_int64(st, 7)));
        if (step(a, best) == 1) {
            cJSON *b = cJSON_AddObjectToObject(p, "best");
            add_col(b, "candidate_id", best, 0);
            add_col(b, "time_us", best, 1);
            add_col(b, "sol_pct", best, 2);
            add_col(b, "score", best, 3);
            add_col(b, "spread_pct", best, 4);
            add_col(b, "params", best, 6);
            add_col(b, "agent", best, 7);
            add_col(b, "draft", best, 8);
            add_col(b, "family", best, 9);
            best_us = col_num(best, 1);
            if (isnan(eager)) {
                eager = ref_time_geomean(col_text(best, 5));
                if (!isnan(eager))
                    eager_source = "reference";
            }
        } else {
            cJSON_AddNullToObject(p, "best");
        }
        add_num_or_null(p, "eager_us", eager);
        if (eager_source)
            cJSON_AddStringToObject(p, "eager_source", eager_source);
        else
            cJSON_AddNullToObject(p, "eager_source");
        add_num_or_null(p, "speedup", best_us > 0 ? eager / best_us : NAN);
        add_num_or_null(p, "speedup_vs_compile", best_us > 0 ? col_num(st, 5) / best_us : NAN);
        int done = rs->finished || sqlite3_column_int64(st, 9) > 0 ||
                   (rs->budget > 0 && judged >= rs->budget);
        cJSON_AddBoolToObject(p, "done", done);
    }
done:
    sqlite3_finalize(st);
    sqlite3_finalize(counts);
    sqlite3_finalize(best);
    sqlite3_finalize(ws.incumbent);
    sqlite3_finalize(ws.fastest);
    sqlite3_finalize(ws.latest);
    return arr;
}

/* The end-to-end estimate: each problem's share of the model's time runs at
 * min(best, eager) / eager of its eager time, the rest of the model is unchanged (Amdahl). Shares
 * of overlapping problems (a module and the aten ops inside it) may add past 1: then they are
 * scaled to 1. Without any share it is the geomean of the per-op speedups, and says so. */
static cJSON *speedup_estimate(const cJSON *problems) {
    double covered = 0, saved = 0, lg = 0;
    int n_share = 0, n_op = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, problems) {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(p, "share");
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(p, "speedup");
        if (!cJSON_IsNumber(sp) || sp->valuedouble <= 0)
            continue;
        double speed = sp->valuedouble > 1 ? sp->valuedouble : 1; /* slower kernels stay out */
        lg += log(speed);
        n_op++;
        if (cJSON_IsNumber(s) && s->valuedouble > 0) {
            double share = s->valuedouble > 1 ? 1 : s->valuedouble;
            covered += share;
            saved += share * (1 - 1 / speed);
            n_share++;
        }
    }
    cJSON *e = cJSON_CreateObject();
    if (n_share > 0) {
        if (covered > 1) {
            saved /= covered;
            covered = 1;
        }
        cJSON_AddNumberToObject(e, "value", 1 / (1 - saved));
        cJSON_AddStringToObject(e, "basis", "share");
        cJSON_AddNumberToObject(e, "covered_share", covered);
        cJSON_AddNumberToObject(e, "n_problems", n_share);
    } else if (n_op > 0) {
        cJSON_AddNumberToObject(e, "value", exp(lg / n_op));
        cJSON_AddStringToObject(e, "basis", "op_geomean");
        cJSON_AddNullToObject(e, "covered_share");
        cJSON_AddNumberToObject(e, "n_problems", n_op);
    } else {
        cJSON_AddNullToObject(e, "value");
        cJSON_AddNullToObject(e, "basis");
        cJSON_AddNullToObject(e, "covered_share");
        cJSON_AddNumberToObject(e, "n_problems", 0);
    }
    return e;
}

/* GET /api/run */
static void get_run(api *a) {
    static const char *const allowed[] = {NULL};
    if (args_allowed(a, "/api/run", allowed))
        return;
    run_state rs;
    read_run_state(a, &rs);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "run_dir", a->w->run_dir);
    cJSON_AddItemToObject(j, "meta", meta_object(a));
    cJSON_AddNumberToObject(j, "now_unix_s", now_unix_s());
    cJSON_AddNumberToObject(j, "started_unix_s", rs.started_unix_s);
    cJSON_AddBoolToObject(j, "finished", rs.finished);
    double elapsed = rs.end_unix_s - rs.started_unix_s;
    if (elapsed < 0)
        elapsed = 0;
    cJSON_AddNumberToObject(j, "elapsed_s", elapsed);

    web_cursor heads;
    if (web_cursor_read(a->db, &heads) != 0) {
        db_fail(a, "heads");
        cJSON_Delete(j);
        return;
    }
    cJSON *h = cJSON_AddObjectToObject(j, "heads");
    cJSON_AddNumberToObject(h, "candidate", (double)heads.candidate);
    cJSON_AddNumberToObject(h, "result", (double)heads.result);
    cJSON_AddNumberToObject(h, "event", (double)heads.event);
    char since[80];
    snprintf(since, sizeof since, "%lld.%lld.%lld", (long long)heads.candidate,
             (long long)heads.result, (long long)heads.event);
    cJSON_AddStringToObject(j, "stream_since", since);

    /* Ids grow with time: the newest rows are the last ids, and a minute's candidates are among
     * the last few thousand (created_unix_s sits after the source in a row: no full scan). */
    sqlite3_stmt *st = prep(
        a, "SELECT (SELECT count(*) FROM candidate), (SELECT count(*) FROM result), "
           "(SELECT count(*) FROM candidate WHERE id > (SELECT max(id) FROM candidate) - 10000 "
           "AND created_unix_s > ?1), "
           "(SELECT created_unix_s FROM candidate ORDER BY id DESC LIMIT 1), "
           "(SELECT created_unix_s FROM result ORDER BY id DESC LIMIT 1)");
    int64_t n_candidates = 0;
    if (st) {
        sqlite3_bind_double(st, 1, rs.end_unix_s - 60);
        if (step(a, st) == 1) {
            n_candidates = sqlite3_column_int64(st, 0);
            add_col(j, "candidates", st, 0);
            add_col(j, "results", st, 1);
            add_col(j, "candidates_last_min", st, 2);
            add_col(j, "last_candidate_unix_s", st, 3);
            add_col(j, "last_result_unix_s", st, 4);
        }
        sqlite3_finalize(st);
    }
    add_num_or_null(j, "candidates_per_min",
                    elapsed > 1 ? (double)n_candidates / (elapsed / 60) : NAN);

    cJSON *oc = cJSON_AddObjectToObject(j, "outcomes");
    int64_t judged = 0;
    st = prep(a, "SELECT r.outcome, count(*) FROM result r WHERE r.id = (SELECT max(id) FROM "
                 "result x WHERE x.candidate_id = r.candidate_id) GROUP BY r.outcome");
    while (step(a, st) == 1) {
        cJSON_AddNumberToObject(oc, col_text(st, 0), (double)sqlite3_column_int64(st, 1));
        judged += sqlite3_column_int64(st, 1);
    }
    sqlite3_finalize(st);
    cJSON_AddNumberToObject(j, "waiting", (double)(n_candidates - judged));

    /* the header needs each problem's winner, not its outcome counts (unless a budget decides
     * which problems are done) */
    cJSON *problems = problems_array(a, 0, &rs, rs.budget > 0);
    int n_done = 0, n_winner = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, problems) {
        n_done += cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "done"));
        n_winner += cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(p, "best"));
    }
    cJSON_AddNumberToObject(j, "problems_total", cJSON_GetArraySize(problems));
    cJSON_AddNumberToObject(j, "problems_done", n_done);
    cJSON_AddNumberToObject(j, "problems_with_winner", n_winner);
    cJSON_AddItemToObject(j, "speedup_e2e", speedup_estimate(problems));
    cJSON_Delete(problems);
    cJSON *dev = latest_device(a);
    cJSON_AddItemToObject(j, "device", dev ? dev : cJSON_CreateNull());
    if (a->failed)
        cJSON_Delete(j);
    else
        reply_json(a, j);
}

/* GET /api/problems */
static void get_problems(api *a) {
    static const char *const allowed[] = {NULL};
    if (args_allowed(a, "/api/problems", allowed))
        return;
    run_state rs;
    read_run_state(a, &rs);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddItemToObject(j, "problems", problems_array(a, 0, &rs, 1));
    if (a->failed)
        cJSON_Delete(j);
    else
        reply_json(a, j);
}

/* GET /api/problems/ID: the row of /api/problems plus its latest events. */
static void get_problem(api *a, int64_t id) {
    static const char *const allowed[] = {NULL};
    if (args_allowed(a, "/api/problems/ID", allowed))
        return;
    run_state rs;
    read_run_state(a, &rs);
    cJSON *arr = problems_array(a, id, &rs, 1);
    if (a->failed || cJSON_GetArraySize(arr) == 0) {
        cJSON_Delete(arr);
        fail(a, MHD_HTTP_NOT_FOUND, "no problem %lld", (long long)id);
        return;
    }
    cJSON *p = cJSON_DetachItemFromArray(arr, 0);
    cJSON_Delete(arr);
    cJSON *ev = cJSON_AddArrayToObject(p, "events");
    sqlite3_stmt *st = prep(a, "SELECT id, kind, message, created_unix_s FROM event "
                               "WHERE problem_id = ?1 ORDER BY id DESC LIMIT 50");
    if (st)
        sqlite3_bind_int64(st, 1, id);
    while (step(a, st) == 1) {
        cJSON *e = cJSON_CreateObject();
        add_col(e, "id", st, 0);
        add_col(e, "kind", st, 1);
        add_col(e, "message", st, 2);
        add_col(e, "created_unix_s", st, 3);
        cJSON_AddItemToArray(ev, e);
    }
    sqlite3_finalize(st);
    if (a->failed)
        cJSON_Delete(p);
    else
        reply_json(a, p);
}

/* Fills a point of the curve (and of the stream's result events) from the columns of
 * RESULT_POINT_COLUMNS starting at i. */
#define RESULT_POINT_COLUMNS                                                                       \
    "r.id, r.candidate_id, r.problem_id, r.outcome, r.time_us, r.spread_pct, r.sol_pct, r.score, " \
    "r.created_unix_s, c.draft, c.agent, c.params"

static cJSON *result_point(sqlite3_stmt *st) {
    cJSON *o = cJSON_CreateObject();
    static const char *const keys[] = {
        "id",      "candidate_id", "problem_id",     "outcome", "time_us", "spread_pct",
        "sol_pct", "score",        "created_unix_s", "draft",   "agent",   "params"};
    for (int i = 0; i < (int)(sizeof keys / sizeof keys[0]); i++)
        add_col(o, keys[i], st, i);
    return o;
}

/* GET /api/problems/ID/curve?after=RESULT_ID&limit=N: the problem's verdicts in order. */
static void get_curve(api *a, int64_t id) {
    static const char *const allowed[] = {"after", "limit", NULL};
    int64_t after = 0;
    long limit = 0;
    if (args_allowed(a, "/api/problems/ID/curve", allowed) || arg_id(a, "after", &after) ||
        arg_int(a, "limit", 1, CURVE_LIMIT_MAX, CURVE_LIMIT_DEFAULT, &limit))
        return;
    sqlite3_stmt *st = prep(a, "SELECT 1 FROM problem WHERE id = ?1");
    if (!st)
        return;
    sqlite3_bind_int64(st, 1, id);
    int found = step(a, st);
    sqlite3_finalize(st);
    if (found <= 0) {
        if (found == 0)
            fail(a, MHD_HTTP_NOT_FOUND, "no problem %lld", (long long)id);
        return;
    }
    st = prep(a, "SELECT " RESULT_POINT_COLUMNS " FROM result r "
                 "JOIN candidate c ON c.id = r.candidate_id "
                 "WHERE r.problem_id = ?1 AND r.id > ?2 ORDER BY r.id LIMIT ?3");
    if (!st)
        return;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int64(st, 2, after);
    sqlite3_bind_int64(st, 3, limit);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "problem_id", (double)id);
    cJSON *pts = cJSON_AddArrayToObject(j, "points");
    int64_t last = 0;
    long n = 0;
    while (step(a, st) == 1) {
        cJSON_AddItemToArray(pts, result_point(st));
        last = sqlite3_column_int64(st, 0);
        n++;
    }
    sqlite3_finalize(st);
    if (n == limit)
        cJSON_AddNumberToObject(j, "next_after", (double)last);
    else
        cJSON_AddNullToObject(j, "next_after");
    if (a->failed)
        cJSON_Delete(j);
    else
        reply_json(a, j);
}

/* GET /api/problems/ID/tree?limit=N: the search tree's nodes, most visited first (a node has at
 * least the visits of any child, so the first N are closed under "parent of"). A problem whose
 * tree was not persisted gets the tree of candidates by parent_id instead ("source":
 * "candidates"; visits then count each candidate once). */
static void get_tree(api *a, int64_t id) {
    static const char *const allowed[] = {"limit", NULL};
    long limit = 0;
    if (args_allowed(a, "/api/problems/ID/tree", allowed) ||
        arg_int(a, "limit", 1, TREE_LIMIT_MAX, TREE_LIMIT_DEFAULT, &limit))
        return;
    sqlite3_stmt *st = prep(a, "SELECT (SELECT count(*) FROM node WHERE problem_id = ?1), "
                               "(SELECT count(*) FROM candidate WHERE problem_id = ?1), "
                               "(SELECT incumbent_id FROM problem WHERE id = ?1), "
                               "EXISTS (SELECT 1 FROM problem WHERE id = ?1)");
    if (!st)
        return;
    sqlite3_bind_int64(st, 1, id);
    if (step(a, st) != 1) {
        sqlite3_finalize(st);
        return;
    }
    int64_t n_nodes = sqlite3_column_int64(st, 0), n_cands = sqlite3_column_int64(st, 1);
    int64_t incumbent = sqlite3_column_int64(st, 2);
    int exists = sqlite3_column_int(st, 3);
    sqlite3_finalize(st);
    if (!exists) {
        fail(a, MHD_HTTP_NOT_FOUND, "no problem %lld", (long long)id);
        return;
    }
    int from_nodes = n_nodes > 0;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "problem_id", (double)id);
    cJSON_AddStringToObject(j, "source", from_nodes ? "nodes" : "candidates");
    cJSON_AddNumberToObject(j, "total", (double)(from_nodes ? n_nodes : n_cands));
    cJSON_AddBoolToObject(j, "truncated", (from_nodes ? n_nodes : n_cands) > limit);
    if (incumbent > 0)
        cJSON_AddNumberToObject(j, "incumbent_id", (double)incumbent);
    else
        cJSON_AddNullToObject(j, "incumbent_id");
    const char *sql =
        from_nodes
            ? "SELECT n.id, n.parent_id, n.candidate_id, n.draft, n.family, n.params, n.visits, "
              "n.value_sum / NULLIF(n.visits, 0), n.best, n.status, r.outcome, r.time_us, "
              "r.score FROM node n LEFT JOIN result r ON r.id = (SELECT max(id) FROM result x "
              "WHERE x.candidate_id = n.candidate_id) WHERE n.problem_id = ?1 "
              "ORDER BY n.visits DESC, n.id LIMIT ?2"
            : "SELECT c.id, c.parent_id, c.id, c.draft, c.family, c.params, 1, r.score, r.score, "
              "CASE WHEN r.id IS NULL THEN 'pending' WHEN r.outcome = 'ok' THEN 'done' "
              "ELSE 'failed' END, r.outcome, r.time_us, r.score FROM candidate c "
              "LEFT JOIN result r ON r.id = (SELECT max(id) FROM result x "
              "WHERE x.candidate_id = c.id) WHERE c.problem_id = ?1 ORDER BY c.id LIMIT ?2";
    static const char *const keys[] = {"id",      "parent_id", "candidate_id", "draft", "family",
                                       "params",  "visits",    "value",        "best",  "status",
                                       "outcome", "time_us",   "score"};
    st = prep(a, sql);
    if (st) {
        sqlite3_bind_int64(st, 1, id);
        sqlite3_bind_int64(st, 2, limit);
    }
    cJSON *nodes = cJSON_AddArrayToObject(j, "nodes");
    while (step(a, st) == 1) {
        cJSON *n = cJSON_CreateObject();
        for (int i = 0; i < (int)(sizeof keys / sizeof keys[0]); i++)
            add_col(n, keys[i], st, i);
        cJSON_AddItemToArray(nodes, n);
    }
    sqlite3_finalize(st);
    if (a->failed)
        cJSON_Delete(j);
    else
        reply_json(a, j);
}

/* ---- candidates ---- */

/* GET /api/candidates?problem=&outcome=&agent=&draft=&before=&limit=: newest first. */
static void get_candidates(api *a) {
    static const char *const allowed[] = {"problem", "outcome", "agent", "draft",
                                          "before",  "limit",   NULL};
    int64_t problem = 0, before = 0;
    long limit = 0, draft = -1;
    const char *outcome = NULL, *agent = arg(a, "agent");
    if (args_allowed(a, "/api/candidates", allowed) || arg_problem(a, &problem) ||
        arg_id(a, "before", &before) || arg_outcome(a, 1, 1, &outcome) ||
        arg_int(a, "draft", 0, 1000000, -1, &draft) ||
        arg_int(a, "limit", 1, LIST_LIMIT_MAX, LIST_LIMIT_DEFAULT, &limit))
        return;
    sqlite3_stmt *st =
        prep(a, "SELECT c.id, c.problem_id, p.name, c.parent_id, c.node_id, c.agent, c.family, "
                "c.params, c.draft, c.created_unix_s, r.outcome, r.time_us, r.sol_pct, r.score "
                "FROM candidate c JOIN problem p ON p.id = c.problem_id "
                "LEFT JOIN result r ON r.id = (SELECT max(id) FROM result x "
                "WHERE x.candidate_id = c.id) "
                "WHERE (?1 IS NULL OR c.id < ?1) AND (?2 IS NULL OR c.problem_id = ?2) "
                "AND (?3 IS NULL OR c.agent = ?3) AND (?4 IS NULL OR c.draft = ?4) "
                "AND (?5 IS NULL OR (?5 = 'waiting' AND r.id IS NULL) OR r.outcome = ?5) "
                "ORDER BY c.id DESC LIMIT ?6");
    if (!st)
        return;
    bind_opt_id(st, 1, before);
    bind_opt_id(st, 2, problem);
    bind_opt_text(st, 3, agent);
    if (draft >= 0)
        sqlite3_bind_int64(st, 4, draft);
    bind_opt_text(st, 5, outcome);
    sqlite3_bind_int64(st, 6, limit);
    static const char *const keys[] = {
        "id",     "problem_id", "problem",        "parent_id", "node_id", "agent",   "family",
        "params", "draft",      "created_unix_s", "outcome",   "time_us", "sol_pct", "score"};
    reply_page(a, st, keys, (int)(sizeof keys / sizeof keys[0]), limit);
}

/* The llm agent's exchanges about candidate id (docs/agents.md): the one that made it ("made"), and
 * those asked about it that made nothing ("asked": no kernel, an error). Absent in stores without
 * the llm_exchange table. Prompts and replies are cut to LLM_TEXT_MAX characters. */
#define LLM_TEXT_MAX 65536
static void add_llm_exchanges(api *a, cJSON *j, int64_t id) {
    sqlite3_stmt *st = prep(a, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                               "name = 'llm_exchange'");
    int have = step(a, st) == 1;
    sqlite3_finalize(st);
    cJSON *list = cJSON_AddArrayToObject(j, "llm");
    if (!have)
        return;
    st = prep(a, "SELECT id, CASE WHEN candidate_id IS ?1 THEN 'made' ELSE 'asked' END, model, "
                 "status, reason, http_status, attempts, tokens, latency_ms, created_unix_s, "
                 "substr(request_json, 1, ?2), length(request_json), substr(reply_text, 1, ?2), "
                 "length(reply_text) FROM llm_exchange WHERE candidate_id = ?1 OR "
                 "(parent_id = ?1 AND candidate_id IS NULL) ORDER BY id LIMIT 100");
    if (st) {
        sqlite3_bind_int64(st, 1, id);
        sqlite3_bind_int(st, 2, LLM_TEXT_MAX);
    }
    while (step(a, st) == 1) {
        static const char *const keys[] = {"id",         "role",          "model",    "status",
                                           "reason",     "http_status",   "attempts", "tokens",
                                           "latency_ms", "created_unix_s"};
        cJSON *x = cJSON_CreateObject();
        for (int i = 0; i < (int)(sizeof keys / sizeof keys[0]); i++)
            add_col(x, keys[i], st, i);
        /* the request as sent (a chat body: its messages are the prompt), whole when it fits */
        if (sqlite3_column_int64(st, 11) <= LLM_TEXT_MAX)
            add_json_col(x, "request", st, 10);
        else
            cJSON_AddNullToObject(x, "request");
        add_col(x, "reply", st, 12);
        cJSON_AddBoolToObject(x, "truncated",
                              sqlite3_column_int64(st, 11) > LLM_TEXT_MAX ||
                                  sqlite3_column_int64(st, 13) > LLM_TEXT_MAX);
        cJSON_AddItemToArray(list, x);
    }
    sqlite3_finalize(st);
}

/* GET /api/candidates/ID: everything the candidate page shows. */
static void get_candidate(api *a, int64_t id) {
    static const char *const allowed[] = {NULL};
    if (args_allowed(a, "/api/candidates/ID", allowed))
        return;
    sqlite3_stmt *st =
        prep(a, "SELECT c.id, c.problem_id, p.name, c.parent_id, c.node_id, c.agent, c.family, "
                "c.params, c.draft, c.source, c.source_hash, c.binary_hash, c.compile_log, "
                "c.created_unix_s, p.incumbent_id IS c.id, "
                "(SELECT value FROM meta WHERE key = 'backend') "
                "FROM candidate c JOIN problem p ON p.id = c.problem_id WHERE c.id = ?1");
    if (!st)
        return;
    sqlite3_bind_int64(st, 1, id);
    int row = step(a, st);
    if (row != 1) {
        sqlite3_finalize(st);
        if (row == 0)
            fail(a, MHD_HTTP_NOT_FOUND, "no candidate %lld", (long long)id);
        return;
    }
    static const char *const keys[] = {"id",          "problem_id",    "problem",     "parent_id",
                                       "node_id",     "agent",         "family",      "params",
                                       "draft",       "source",        "source_hash", "binary_hash",
                                       "compile_log", "created_unix_s"};
    cJSON *j = cJSON_CreateObject();
    for (int i = 0; i < (int)(sizeof keys / sizeof keys[0]); i++)
        add_col(j, keys[i], st, i);
    cJSON_AddBoolToObject(j, "is_incumbent", sqlite3_column_int(st, 14));
    const char *backend = col_text(st, 15);
    const char *src = col_text(st, 9);
    /* cpu candidates are C, cuda ones CUDA C; a store without the meta key guesses from the
     * source. */
    int cuda = backend ? strcmp(backend, "cuda") == 0
                       : (src && (strstr(src, "__global__") || strstr(src, "__device__")));
    cJSON_AddStringToObject(j, "language", cuda ? "cuda" : "c");
    int64_t parent = sqlite3_column_int64(st, 3);
    sqlite3_finalize(st);

    cJSON *results = cJSON_AddArrayToObject(j, "results");
    st = prep(a, "SELECT id, outcome, time_us, spread_pct, sol_pct, score, created_unix_s, "
                 "result_json FROM result WHERE candidate_id = ?1 ORDER BY id LIMIT 100");
    if (st)
        sqlite3_bind_int64(st, 1, id);
    while (step(a, st) == 1) {
        static const char *const rkeys[] = {"id",      "outcome", "time_us",       "spread_pct",
                                            "sol_pct", "score",   "created_unix_s"};
        cJSON *r = cJSON_CreateObject();
        for (int i = 0; i < 7; i++)
            add_col(r, rkeys[i], st, i);
        add_json_col(r, "result", st, 7);
        cJSON_AddItemToArray(results, r);
    }
    sqlite3_finalize(st);

    if (parent > 0) {
        st = prep(a, "SELECT c.id, c.agent, c.params, c.source, r.outcome, r.time_us "
                     "FROM candidate c LEFT JOIN result r ON r.id = (SELECT max(id) FROM result "
                     "x WHERE x.candidate_id = c.id) WHERE c.id = ?1");
        if (st)
            sqlite3_bind_int64(st, 1, parent);
        if (step(a, st) == 1) {
            static const char *const pkeys[] = {"id",     "agent",   "params",
                                                "source", "outcome", "time_us"};
            cJSON *p = cJSON_AddObjectToObject(j, "parent");
            for (int i = 0; i < 6; i++)
                add_col(p, pkeys[i], st, i);
        } else {
            cJSON_AddNullToObject(j, "parent");
        }
        sqlite3_finalize(st);
    } else {
        cJSON_AddNullToObject(j, "parent");
    }

    cJSON *children = cJSON_AddArrayToObject(j, "children");
    st = prep(a, "SELECT c.id, c.agent, c.params, r.outcome, r.time_us FROM candidate c "
                 "LEFT JOIN result r ON r.id = (SELECT max(id) FROM result x "
                 "WHERE x.candidate_id = c.id) WHERE c.parent_id = ?1 ORDER BY c.id LIMIT 200");
    if (st)
        sqlite3_bind_int64(st, 1, id);
    while (step(a, st) == 1) {
        static const char *const ckeys[] = {"id", "agent", "params", "outcome", "time_us"};
        cJSON *c = cJSON_CreateObject();
        for (int i = 0; i < 5; i++)
            add_col(c, ckeys[i], st, i);
        cJSON_AddItemToArray(children, c);
    }
    sqlite3_finalize(st);
    add_llm_exchanges(a, j, id);
    if (a->failed)
        cJSON_Delete(j);
    else
        reply_json(a, j);
}

/* ---- failures ---- */

/* Evidence for a list: a long compile log is cut to its head (the first error is what matters;
 * the candidate page has the whole log). */
static void add_evidence(cJSON *o, sqlite3_stmt *st, int i) {
    const char *text = col_text(st, i);
    cJSON *ev = text ? cJSON_Parse(text) : NULL;
    if (!ev) {
        cJSON_AddNullToObject(o, "evidence");
        return;
    }
    cJSON *log = cJSON_GetObjectItemCaseSensitive(ev, "log");
    if (cJSON_IsString(log) && strlen(log->valuestring) > EVIDENCE_LOG_MAX) {
        char *cut = xstrndup(log->valuestring, EVIDENCE_LOG_MAX);
        cJSON_ReplaceItemInObjectCaseSensitive(ev, "log", cJSON_CreateString(cut));
        cJSON_AddBoolToObject(ev, "log_truncated", 1);
        free(cut);
    }
    cJSON_AddItemToObject(o, "evidence", ev);
}

/* Items of one outcome, newest first: appends up to limit to items, returns the last id or 0. */
static int64_t failure_items(api *a, const char *outcome, int64_t problem, int64_t before,
                             long limit, cJSON *items) {
    sqlite3_stmt *st = prep(
        a, "SELECT r.id, r.candidate_id, r.problem_id, p.name, c.agent, c.family, c.params, "
           "c.draft, r.created_unix_s, r.outcome, "
           "CASE WHEN json_valid(r.result_json) THEN json_extract(r.result_json, '$.evidence') "
           "END FROM result r JOIN candidate c ON c.id = r.candidate_id "
           "JOIN problem p ON p.id = r.problem_id "
           "WHERE r.outcome = ?1 AND (?2 IS NULL OR r.problem_id = ?2) "
           "AND (?3 IS NULL OR r.id < ?3) "
           "AND r.id = (SELECT max(id) FROM result x WHERE x.candidate_id = r.candidate_id) "
           "ORDER BY r.id DESC LIMIT ?4");
    if (!st)
        return 0;
    sqlite3_bind_text(st, 1, outcome, -1, SQLITE_TRANSIENT);
    bind_opt_id(st, 2, problem);
    bind_opt_id(st, 3, before);
    sqlite3_bind_int64(st, 4, limit);
    static const char *const keys[] = {"result_id",      "candidate_id", "problem_id", "problem",
                                       "agent",          "family",       "params",     "draft",
                                       "created_unix_s", "outcome"};
    int64_t last = 0;
    long n = 0;
    while (step(a, st) == 1) {
        cJSON *it = cJSON_CreateObject();
        for (int i = 0; i < (int)(sizeof keys / sizeof keys[0]); i++)
            add_col(it, keys[i], st, i);
        add_evidence(it, st, 10);
        cJSON_AddItemToArray(items, it);
        last = sqlite3_column_int64(st, 0);
        n++;
    }
    sqlite3_finalize(st);
    return n == limit ? last : 0;
}

/* GET /api/failures?problem=&outcome=&before=&limit=&per_group=: candidates whose verdict is a
 * failure, grouped by outcome (each group: its count and its newest per_group items), or one
 * outcome's items page by page. */
static void get_failures(api *a) {
    static const char *const allowed[] = {"problem", "outcome",   "before",
                                          "limit",   "per_group", NULL};
    int64_t problem = 0, before = 0;
    long limit = 0, per_group = 0;
    const char *outcome = NULL;
    if (args_allowed(a, "/api/failures", allowed) || arg_problem(a, &problem) ||
        arg_id(a, "before", &before) || arg_outcome(a, 0, 0, &outcome) ||
        arg_int(a, "limit", 1, LIST_LIMIT_MAX, LIST_LIMIT_DEFAULT, &limit) ||
        arg_int(a, "per_group", 1, 50, 5, &per_group))
        return;
    if (!outcome && before > 0) {
        fail(a, MHD_HTTP_BAD_REQUEST, "before= pages one outcome: give outcome= too");
        return;
    }
    cJSON *j = cJSON_CreateObject();
    if (problem > 0)
        cJSON_AddNumberToObject(j, "problem_id", (double)problem);
    cJSON *groups = cJSON_AddArrayToObject(j, "groups");
    sqlite3_stmt *st = prep(a, "SELECT r.outcome, count(*) FROM result r WHERE r.outcome != 'ok' "
                               "AND (?1 IS NULL OR r.problem_id = ?1) "
                               "AND (?2 IS NULL OR r.outcome = ?2) "
                               "AND r.id = (SELECT max(id) FROM result x "
                               "WHERE x.candidate_id = r.candidate_id) "
                               "GROUP BY r.outcome ORDER BY count(*) DESC, r.outcome");
    if (st) {
        bind_opt_id(st, 1, problem);
        bind_opt_text(st, 2, outcome);
    }
    int64_t total = 0;
    while (step(a, st) == 1) {
        cJSON *g = cJSON_CreateObject();
        add_col(g, "outcome", st, 0);
        add_col(g, "count", st, 1);
        total += sqlite3_column_int64(st, 1);
        cJSON_AddItemToArray(groups, g);
    }
    sqlite3_finalize(st);
    cJSON_AddNumberToObject(j, "total", (double)total);
    cJSON *g;
    cJSON_ArrayForEach(g, groups) {
        if (a->failed)
            break;
        const char *o = cJSON_GetObjectItemCaseSensitive(g, "outcome")->valuestring;
        cJSON *items = cJSON_AddArrayToObject(g, "items");
        int64_t next = failure_items(a, o, problem, before, outcome ? limit : per_group, items);
        if (next)
            cJSON_AddNumberToObject(g, "next_before", (double)next);
        else
            cJSON_AddNullToObject(g, "next_before");
    }
    if (a->failed)
        cJSON_Delete(j);
    else
        reply_json(a, j);
}

/* ---- roofline ---- */

static double num_at(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* GET /api/roofline?problem=&per_problem=N: one point per workload of each problem's N fastest
 * correct candidates (achieved GB/s, GFLOP/s when the problem declares flops, arithmetic
 * intensity), and the device's measured ceilings. */
static void get_roofline(api *a) {
    static const char *const allowed[] = {"problem", "per_problem", NULL};
    int64_t problem = 0;
    long per_problem = 0;
    if (args_allowed(a, "/api/roofline", allowed) || arg_problem(a, &problem) ||
        arg_int(a, "per_problem", 1, 200, 20, &per_problem))
        return;
    cJSON *j = cJSON_CreateObject();
    cJSON *dev = latest_device(a);
    double gbps = num_at(dev, "ceiling_gbps"), gflops = num_at(dev, "ceiling_gflops");
    cJSON_AddItemToObject(j, "device", dev ? dev : cJSON_CreateNull());
    cJSON *ceil = cJSON_AddObjectToObject(j, "ceilings");
    add_num_or_null(ceil, "gbps", gbps);
    add_num_or_null(ceil, "gflops", gflops);
    add_num_or_null(ceil, "ridge_flop_per_byte", gbps > 0 ? gflops / gbps : NAN);
    cJSON *pts = cJSON_AddArrayToObject(j, "points");
    sqlite3_stmt *st = prep(
        /* the ranking carries ids and times only; the JSON is read for the rows kept */
        a, "SELECT w.candidate_id, w.problem_id, p.name, r.result_json, w.rk FROM ("
           "SELECT r.id, r.candidate_id, r.problem_id, ROW_NUMBER() OVER "
           "(PARTITION BY r.problem_id ORDER BY r.time_us, r.candidate_id) AS rk FROM result r "
           "WHERE r.outcome = 'ok' AND r.time_us IS NOT NULL AND (?1 IS NULL OR r.problem_id = ?1) "
           "AND r.id = (SELECT max(id) FROM result x WHERE x.candidate_id = r.candidate_id)) w "
           "JOIN result r ON r.id = w.id JOIN problem p ON p.id = w.problem_id "
           "WHERE w.rk <= ?2 ORDER BY w.problem_id, w.rk");
    if (st) {
        bind_opt_id(st, 1, problem);
        sqlite3_bind_int64(st, 2, per_problem);
    }
    int n_without_flops = 0;
    while (step(a, st) == 1) {
        cJSON *r = col_text(st, 3) ? cJSON_Parse(col_text(st, 3)) : NULL;
        const cJSON *wl;
        cJSON_ArrayForEach(wl, cJSON_GetObjectItemCaseSensitive(r, "workloads")) {
            double bytes = num_at(wl, "min_bytes"), flops = num_at(wl, "flops");
            double t = num_at(cJSON_GetObjectItemCaseSensitive(wl, "time_us"), "median");
            if (!(bytes > 0) || !(t > 0))
                continue;
            cJSON *p = cJSON_CreateObject();
            add_col(p, "candidate_id", st, 0);
            add_col(p, "problem_id", st, 1);
            add_col(p, "problem", st, 2);
            add_col(p, "rank", st, 4);
            add_num_or_null(p, "workload_index", num_at(wl, "index"));
            cJSON_AddNumberToObject(p, "bytes", bytes);
            add_num_or_null(p, "flops", flops);
            add_num_or_null(p, "flop_per_byte", flops >= 0 ? flops / bytes : NAN);
            cJSON_AddNumberToObject(p, "time_us", t);
            cJSON_AddNumberToObject(p, "gbps", bytes / (t * 1e3));
            add_num_or_null(p, "gflops", flops >= 0 ? flops / (t * 1e3) : NAN);
            add_num_or_null(p, "sol_pct", num_at(wl, "sol_pct"));
            n_without_flops += !(flops >= 0);
            cJSON_AddItemToArray(pts, p);
        }
        cJSON_Delete(r);
    }
    sqlite3_finalize(st);
    cJSON_AddNumberToObject(j, "n_without_flops", n_without_flops);
    if (a->failed)
        cJSON_Delete(j);
    else
        reply_json(a, j);
}

/* ---- events ---- */

/* GET /api/events?problem=&kind=&before=&limit=: newest first. */
static void get_events(api *a) {
    static const char *const allowed[] = {"problem", "kind", "before", "limit", NULL};
    int64_t problem = 0, before = 0;
    long limit = 0;
    const char *kind = arg(a, "kind");
    if (args_allowed(a, "/api/events", allowed) || arg_problem(a, &problem) ||
        arg_id(a, "before", &before) ||
        arg_int(a, "limit", 1, LIST_LIMIT_MAX, LIST_LIMIT_DEFAULT, &limit))
        return;
    sqlite3_stmt *st = prep(a, "SELECT e.id, e.problem_id, p.name, e.kind, e.message, "
                               "e.created_unix_s FROM event e "
                               "LEFT JOIN problem p ON p.id = e.problem_id "
                               "WHERE (?1 IS NULL OR e.problem_id = ?1) AND "
                               "(?2 IS NULL OR e.kind = ?2) AND (?3 IS NULL OR e.id < ?3) "
                               "ORDER BY e.id DESC LIMIT ?4");
    if (!st)
        return;
    bind_opt_id(st, 1, problem);
    bind_opt_text(st, 2, kind);
    bind_opt_id(st, 3, before);
    sqlite3_bind_int64(st, 4, limit);
    static const char *const keys[] = {"id",   "problem_id", "problem",
                                       "kind", "message",    "created_unix_s"};
    reply_page(a, st, keys, (int)(sizeof keys / sizeof keys[0]), limit);
}

/* ---- routing ---- */

static void route(api *a, const char *path) {
    char buf[256];
    if (strlen(path) >= sizeof buf) {
        fail(a, MHD_HTTP_NOT_FOUND, "no such endpoint");
        return;
    }
    snprintf(buf, sizeof buf, "%s", path);
    size_t n = strlen(buf);
    if (n > 0 && buf[n - 1] == '/') /* /api/problems/ is /api/problems */
        buf[n - 1] = 0;
    char *seg[4] = {0};
    int n_seg = 0;
    for (char *save = NULL, *t = strtok_r(buf, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
        if (n_seg == 4) {
            n_seg = 5;
            break;
        }
        seg[n_seg++] = t;
    }
    int64_t id = 0;
    if (n_seg == 1 && strcmp(seg[0], "run") == 0)
        get_run(a);
    else if (n_seg == 1 && strcmp(seg[0], "problems") == 0)
        get_problems(a);
    else if (n_seg >= 2 && n_seg <= 3 && strcmp(seg[0], "problems") == 0) {
        if (path_id(a, "problem id", seg[1], &id))
            return;
        if (n_seg == 2)
            get_problem(a, id);
        else if (strcmp(seg[2], "curve") == 0)
            get_curve(a, id);
        else if (strcmp(seg[2], "tree") == 0)
            get_tree(a, id);
        else
            fail(a, MHD_HTTP_NOT_FOUND, "no such endpoint: /api/problems/ID/%.40s", seg[2]);
    } else if (n_seg == 1 && strcmp(seg[0], "candidates") == 0)
        get_candidates(a);
    else if (n_seg == 2 && strcmp(seg[0], "candidates") == 0) {
        if (!path_id(a, "candidate id", seg[1], &id))
            get_candidate(a, id);
    } else if (n_seg == 1 && strcmp(seg[0], "failures") == 0)
        get_failures(a);
    else if (n_seg == 1 && strcmp(seg[0], "roofline") == 0)
        get_roofline(a);
    else if (n_seg == 1 && strcmp(seg[0], "events") == 0)
        get_events(a);
    else
        fail(a, MHD_HTTP_NOT_FOUND,
             "no such endpoint: /api/%.100s (see docs/dashboard.md: run, problems, "
             "problems/ID, problems/ID/curve, problems/ID/tree, candidates, candidates/ID, "
             "failures, roofline, events, stream)",
             path);
}

void web_api_handle(kiln_web *w, struct MHD_Connection *conn, const char *path, web_reply *r) {
    kiln_err err;
    sqlite3 *db = NULL;
    if (web_db_acquire(w, &db, &err)) {
        web_reply_error(r, MHD_HTTP_SERVICE_UNAVAILABLE, "the store cannot be read: %s", err.msg);
        return;
    }
    api a = {.w = w, .conn = conn, .db = db, .r = r};
    /* One read transaction: every statement of the reply sees the same snapshot. */
    if (sqlite3_exec(a.db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
        db_fail(&a, "BEGIN");
    else {
        route(&a, path);
        if (sqlite3_exec(a.db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
            a.broken = 1;
    }
    web_db_release(w, db, a.broken);
}
