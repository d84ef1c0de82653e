/* api.c: the dashboard's JSON endpoints (GET /api/...): each validates its parameters, reads the
 * store through its dashboard functions (store.h, dash.c) in one read snapshot, and shapes the
 * reply (docs/dashboard.md lists them with their parameters and errors). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

#include "web_impl.h"

#include "../gate/gate.h"

#define LIST_LIMIT_DEFAULT 100
#define LIST_LIMIT_MAX 1000
#define CURVE_LIMIT_DEFAULT 5000
#define CURVE_LIMIT_MAX 20000
#define TREE_LIMIT_DEFAULT 2000
#define TREE_LIMIT_MAX 20000
/* Bytes of a compile log shown in a list (the candidate page has it all). */
#define EVIDENCE_LOG_MAX 4096
/* Characters of an llm prompt or reply shown on a candidate's page. */
#define LLM_TEXT_MAX 65536

/* One request: the store to read from and the reply being built. */
typedef struct {
    kiln_web *w;
    struct MHD_Connection *conn;
    kiln_store *s;
    web_reply *r;
    int failed; /* a reply (an error) is already set */
    int broken; /* a read failed: do not reuse the store handle */
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

/* Replies j, or drops it when the request failed meanwhile. */
static void reply_or_drop(api *a, cJSON *j) {
    if (a->failed)
        cJSON_Delete(j);
    else
        reply_json(a, j);
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

/* A store read's status: 0 when it worked, else the request fails with 500 (and -1). */
static int read_ok(api *a, int rc, const kiln_err *err) {
    if (rc == KILN_OK)
        return 0;
    a->broken = 1;
    return fail(a, MHD_HTTP_INTERNAL_SERVER_ERROR, "reading the store: %s", err->msg);
}

static void add_num_or_null(cJSON *o, const char *key, double v) {
    if (isfinite(v))
        cJSON_AddNumberToObject(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

/* A number of the store's rows (null when it is null or absent). */
static double num_of(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* Moves key from a store row into o (null when absent). */
static void move_key(cJSON *o, cJSON *row, const char *key) {
    cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(row, key);
    cJSON_AddItemToObject(o, key, v ? v : cJSON_CreateNull());
}

/* Replies {"items": [...], "next_before": id or null}. */
static void reply_page(api *a, cJSON *items, int64_t next) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddItemToObject(j, "items", items);
    if (next)
        cJSON_AddNumberToObject(j, "next_before", (double)next);
    else
        cJSON_AddNullToObject(j, "next_before");
    reply_or_drop(a, j);
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
    int o = kiln_outcome_parse(*out);
    if (o >= 0 && (allow_ok || o != KILN_OUTCOME_OK))
        return 0;
    if (allow_waiting && strcmp(*out, "waiting") == 0)
        return 0;
    kiln_strbuf names = {0};
    for (int i = allow_ok ? 0 : 1; i < KILN_OUTCOME_COUNT; i++)
        kiln_strbuf_printf(&names, "%s%s", i > (allow_ok ? 0 : 1) ? ", " : "",
                           kiln_outcome_name((kiln_outcome)i));
    int rc = fail(a, MHD_HTTP_BAD_REQUEST, "outcome '%.40s' is not one of %s%s", *out, names.s,
                  allow_waiting ? ", waiting" : "");
    free(names.s);
    return rc;
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
    kiln_err err;
    int exists = 0;
    if (read_ok(a, kiln_store_problem_exists(a->s, *out, &exists, &err), &err))
        return -1;
    return exists ? 0 : fail(a, MHD_HTTP_NOT_FOUND, "no problem %lld", (long long)*out);
}

/* ---- run-wide facts ---- */

/* The device of the run: the "device" object of the latest result that has one (it carries the
 * ceilings; its ceiling_gflops is the one that result's problem used), of problem_id's results when
 * it has any (0: any problem), or NULL. */
static cJSON *latest_device(api *a, int64_t problem_id) {
    char *text = NULL;
    kiln_err err;
    if (read_ok(a, kiln_store_latest_device(a->s, problem_id, &text, &err), &err))
        return NULL;
    cJSON *d = text ? cJSON_Parse(text) : NULL;
    free(text);
    return d;
}

/* ---- problems ---- */

/* The run's state: when it started, whether it is over (its latest run-wide event is "done"), and
 * how long its searches ran (kiln_store_run_state's searched_s: not the time between runs, nor the
 * preparation of problems). */
typedef struct {
    double started_unix_s, end_unix_s;
    int finished;
    long budget; /* meta "budget" when set, else 0 */
    double searched_s;
    int searching;
} run_state;

static void read_run_state(api *a, run_state *rs) {
    memset(rs, 0, sizeof *rs);
    kiln_store_run_state st;
    kiln_err err;
    double now = now_unix_s();
    rs->started_unix_s = rs->end_unix_s = now;
    if (read_ok(a, kiln_store_run_state_read(a->s, &st, &err), &err))
        return;
    rs->finished = strcmp(st.last_event_kind, "done") == 0;
    rs->end_unix_s = rs->finished ? st.last_event_unix_s : now;
    rs->budget = st.budget;
    rs->started_unix_s = st.started_unix_s > 0 ? st.started_unix_s : rs->end_unix_s;
    rs->searched_s = st.searched_s;
    rs->searching = st.searching;
}

/* The problem rows (all, or the one with id only_id), hottest first, with each one's winner,
 * speedups and (with_counts) its candidates counted by verdict. */
static cJSON *problems_array(api *a, int64_t only_id, const run_state *rs, int with_counts) {
    cJSON *arr = cJSON_CreateArray();
    cJSON *rows = NULL;
    kiln_err err;
    if (read_ok(a, kiln_store_dash_problems(a->s, only_id, &rows, &err), &err)) {
        cJSON_Delete(rows);
        return arr;
    }
    cJSON *row;
    cJSON_ArrayForEach(row, rows) {
        if (a->failed)
            break;
        int64_t id = (int64_t)num_of(row, "id");
        cJSON *p = cJSON_CreateObject();
        cJSON_AddItemToArray(arr, p);
        static const char *const first[] = {"id",         "name",   "dir",         "share",
                                            "compile_us", "sol_us", "incumbent_id"};
        for (size_t i = 0; i < sizeof first / sizeof first[0]; i++)
            move_key(p, row, first[i]);
        double n_candidates = num_of(row, "n_candidates");
        cJSON_AddNumberToObject(p, "n_candidates", n_candidates);

        cJSON *oc = cJSON_AddObjectToObject(p, "outcomes");
        int64_t judged = 0;
        if (with_counts && read_ok(a, kiln_store_dash_outcomes(a->s, id, oc, &judged, &err), &err))
            break;
        cJSON_AddNumberToObject(p, "n_results", (double)judged);
        cJSON_AddNumberToObject(p, "waiting", n_candidates - (double)judged);

        double problem_eager = num_of(row, "eager_us");
        double best_us = NAN, best_spread = -1;
        kiln_store_winner win;
        kiln_store_summary sum;
        cJSON *best = NULL;
        if (read_ok(a, kiln_store_winner_get(a->s, id, &win, &err), &err) ||
            read_ok(a, kiln_store_dash_best(a->s, win.result_id, &best, &sum, &err), &err))
            break;
        if (best) {
            cJSON_AddItemToObject(p, "best", best);
            best_us = num_of(best, "time_us");
            best_spread = num_of(best, "spread_pct");
        } else {
            cJSON_AddNullToObject(p, "best");
        }
        /* the baseline the winner is compared with, and what its spreads let a table say */
        double eager, eager_spread;
        kiln_store_baseline_pick(isnan(problem_eager) ? -1 : problem_eager, &sum, &eager,
                                 &eager_spread);
        add_num_or_null(p, "eager_us", eager > 0 ? eager : NAN);
        add_num_or_null(p, "eager_spread_pct", eager_spread >= 0 ? eager_spread : NAN);
        if (eager > 0)
            cJSON_AddStringToObject(p, "eager_source",
                                    eager == problem_eager ? "problem" : "reference");
        else
            cJSON_AddNullToObject(p, "eager_source");
        kiln_store_speedup sp;
        kiln_store_speedup_judge(eager, eager_spread, best_us > 0 ? best_us : -1,
                                 isnan(best_spread) ? -1 : best_spread, &sp);
        add_num_or_null(p, "speedup", sp.value > 0 ? sp.value : NAN);
        add_num_or_null(p, "speedup_ratio", sp.ratio > 0 ? sp.ratio : NAN);
        cJSON_AddStringToObject(p, "speedup_verdict", kiln_store_speedup_name(sp.verdict));
        add_num_or_null(p, "speedup_vs_compile",
                        best_us > 0 ? num_of(p, "compile_us") / best_us : NAN);
        /* skipped is not done: the latest optimize did not search it, and says why */
        cJSON *skip = cJSON_DetachItemFromObjectCaseSensitive(row, "skip_reason");
        int skipped = cJSON_IsString(skip);
        cJSON_AddItemToObject(p, "skipped", skipped ? skip : cJSON_CreateNull());
        if (!skipped)
            cJSON_Delete(skip);
        int done = !skipped && (rs->finished || num_of(row, "n_done_events") > 0 ||
                                (rs->budget > 0 && judged >= rs->budget));
        cJSON_AddBoolToObject(p, "done", done);
        cJSON_AddStringToObject(p, "status", skipped ? "skipped" : done ? "done" : "searching");
    }
    cJSON_Delete(rows);
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
        if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(p, "best")))
            continue;
        /* a speedup the spreads do not support (n.s., a noisy baseline) counts as none */
        double speed = cJSON_IsNumber(sp) && sp->valuedouble > 1 ? sp->valuedouble : 1;
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
    kiln_err err;
    cJSON *meta = NULL;
    if (read_ok(a, kiln_store_dash_meta(a->s, &meta, &err), &err)) {
        cJSON_Delete(meta);
        return;
    }
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "run_dir", a->w->run_dir);
    cJSON_AddItemToObject(j, "meta", meta);
    cJSON_AddNumberToObject(j, "now_unix_s", now_unix_s());
    cJSON_AddNumberToObject(j, "started_unix_s", rs.started_unix_s);
    cJSON_AddBoolToObject(j, "finished", rs.finished);
    cJSON_AddBoolToObject(j, "searching", rs.searching);
    double elapsed = rs.searched_s > 0 ? rs.searched_s : 0;
    cJSON_AddNumberToObject(j, "elapsed_s", elapsed);
    double wall = rs.end_unix_s - rs.started_unix_s;
    cJSON_AddNumberToObject(j, "wall_s", wall > 0 ? wall : 0);

    kiln_store_heads heads;
    if (read_ok(a, kiln_store_heads_read(a->s, &heads, &err), &err)) {
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

    int64_t n_candidates = 0;
    if (read_ok(a, kiln_store_dash_activity(a->s, rs.end_unix_s - 60, j, &n_candidates, &err),
                &err)) {
        cJSON_Delete(j);
        return;
    }
    add_num_or_null(j, "candidates_per_min",
                    elapsed > 1 ? (double)n_candidates / (elapsed / 60) : NAN);

    cJSON *oc = cJSON_AddObjectToObject(j, "outcomes");
    int64_t judged = 0;
    if (read_ok(a, kiln_store_dash_outcomes(a->s, 0, oc, &judged, &err), &err)) {
        cJSON_Delete(j);
        return;
    }
    cJSON_AddNumberToObject(j, "waiting", (double)(n_candidates - judged));

    /* the header needs each problem's winner, not its outcome counts (unless a budget decides
     * which problems are done) */
    cJSON *problems = problems_array(a, 0, &rs, rs.budget > 0);
    int n_done = 0, n_winner = 0, n_skipped = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, problems) {
        n_done += cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "done"));
        n_winner += cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(p, "best"));
        n_skipped += cJSON_IsString(cJSON_GetObjectItemCaseSensitive(p, "skipped"));
    }
    cJSON_AddNumberToObject(j, "problems_total", cJSON_GetArraySize(problems));
    cJSON_AddNumberToObject(j, "problems_done", n_done);
    cJSON_AddNumberToObject(j, "problems_skipped", n_skipped);
    cJSON_AddNumberToObject(j, "problems_with_winner", n_winner);
    cJSON_AddItemToObject(j, "speedup_e2e", speedup_estimate(problems));
    cJSON_Delete(problems);
    cJSON *dev = latest_device(a, 0);
    cJSON_AddItemToObject(j, "device", dev ? dev : cJSON_CreateNull());
    reply_or_drop(a, j);
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
    reply_or_drop(a, j);
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
    kiln_store_page pg = {.problem_id = id, .limit = 50, .draft = -1};
    kiln_err err;
    int64_t next = 0;
    read_ok(a, kiln_store_dash_events(a->s, &pg, 0, ev, &next, &err), &err);
    reply_or_drop(a, p);
}

/* GET /api/problems/ID/curve?after=RESULT_ID&limit=N: the problem's verdicts in order. */
static void get_curve(api *a, int64_t id) {
    static const char *const allowed[] = {"after", "limit", NULL};
    int64_t after = 0;
    long limit = 0;
    if (args_allowed(a, "/api/problems/ID/curve", allowed) || arg_id(a, "after", &after) ||
        arg_int(a, "limit", 1, CURVE_LIMIT_MAX, CURVE_LIMIT_DEFAULT, &limit))
        return;
    kiln_err err;
    int exists = 0;
    if (read_ok(a, kiln_store_problem_exists(a->s, id, &exists, &err), &err))
        return;
    if (!exists) {
        fail(a, MHD_HTTP_NOT_FOUND, "no problem %lld", (long long)id);
        return;
    }
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "problem_id", (double)id);
    cJSON *pts = cJSON_AddArrayToObject(j, "points");
    long n = 0;
    read_ok(a, kiln_store_dash_curve(a->s, id, after, limit, pts, &n, &err), &err);
    if (n == limit)
        cJSON_AddItemToObject(
            j, "next_after",
            cJSON_Duplicate(
                cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(pts, (int)n - 1), "id"), 1));
    else
        cJSON_AddNullToObject(j, "next_after");
    reply_or_drop(a, j);
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
    kiln_store_tree_info info;
    kiln_err err;
    cJSON *nodes = cJSON_CreateArray();
    if (read_ok(a, kiln_store_dash_tree(a->s, id, limit, &info, nodes, &err), &err)) {
        cJSON_Delete(nodes);
        return;
    }
    if (!info.exists) {
        cJSON_Delete(nodes);
        fail(a, MHD_HTTP_NOT_FOUND, "no problem %lld", (long long)id);
        return;
    }
    int from_nodes = info.n_nodes > 0;
    int64_t total = from_nodes ? info.n_nodes : info.n_candidates;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "problem_id", (double)id);
    cJSON_AddStringToObject(j, "source", from_nodes ? "nodes" : "candidates");
    cJSON_AddNumberToObject(j, "total", (double)total);
    cJSON_AddBoolToObject(j, "truncated", total > limit);
    if (info.incumbent_id > 0)
        cJSON_AddNumberToObject(j, "incumbent_id", (double)info.incumbent_id);
    else
        cJSON_AddNullToObject(j, "incumbent_id");
    cJSON_AddItemToObject(j, "nodes", nodes);
    reply_or_drop(a, j);
}

/* ---- candidates ---- */

/* GET /api/candidates?problem=&outcome=&agent=&draft=&before=&limit=: newest first. */
static void get_candidates(api *a) {
    static const char *const allowed[] = {"problem", "outcome", "agent", "draft",
                                          "before",  "limit",   NULL};
    kiln_store_page pg = {.agent = arg(a, "agent")};
    if (args_allowed(a, "/api/candidates", allowed) || arg_problem(a, &pg.problem_id) ||
        arg_id(a, "before", &pg.before) || arg_outcome(a, 1, 1, &pg.outcome) ||
        arg_int(a, "draft", 0, 1000000, -1, &pg.draft) ||
        arg_int(a, "limit", 1, LIST_LIMIT_MAX, LIST_LIMIT_DEFAULT, &pg.limit))
        return;
    cJSON *items = cJSON_CreateArray();
    int64_t next = 0;
    kiln_err err;
    read_ok(a, kiln_store_dash_candidates(a->s, &pg, items, &next, &err), &err);
    reply_page(a, items, next);
}

/* GET /api/candidates/ID: everything the candidate page shows. */
static void get_candidate(api *a, int64_t id) {
    static const char *const allowed[] = {NULL};
    if (args_allowed(a, "/api/candidates/ID", allowed))
        return;
    kiln_err err;
    cJSON *j = NULL;
    if (read_ok(a, kiln_store_dash_candidate(a->s, id, &j, &err), &err))
        return;
    if (!j) {
        fail(a, MHD_HTTP_NOT_FOUND, "no candidate %lld", (long long)id);
        return;
    }
    /* cpu candidates are C, cuda ones CUDA C; a store without the meta key guesses from the
     * source. */
    char *backend = kiln_store_meta_get(a->s, KILN_META_BACKEND);
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(j, "source");
    const char *text = cJSON_IsString(src) ? src->valuestring : NULL;
    int cuda = backend ? strcmp(backend, "cuda") == 0
                       : (text && (strstr(text, "__global__") || strstr(text, "__device__")));
    free(backend);
    cJSON_AddStringToObject(j, "language", cuda ? "cuda" : "c");
    int64_t parent = (int64_t)num_of(j, "parent_id");

    cJSON *results = cJSON_AddArrayToObject(j, "results");
    if (read_ok(a, kiln_store_dash_candidate_results(a->s, id, results, &err), &err)) {
        cJSON_Delete(j);
        return;
    }
    cJSON *p = NULL;
    if (parent > 0 &&
        read_ok(a, kiln_store_dash_candidate_brief(a->s, parent, 1, &p, &err), &err)) {
        cJSON_Delete(j);
        return;
    }
    cJSON_AddItemToObject(j, "parent", p ? p : cJSON_CreateNull());
    cJSON *children = cJSON_AddArrayToObject(j, "children");
    cJSON *llm = NULL;
    if (!read_ok(a, kiln_store_dash_children(a->s, id, children, &err), &err)) {
        /* the llm agent's exchanges about it (docs/agents.md): the one that made it, and those
         * asked about it that made nothing; empty in a store older than llm_exchange */
        llm = cJSON_AddArrayToObject(j, "llm");
        read_ok(a, kiln_store_dash_llm_exchanges(a->s, id, LLM_TEXT_MAX, llm, &err), &err);
    }
    reply_or_drop(a, j);
}

/* ---- failures ---- */

/* Evidence for a list: a long compile log is cut to its head (the first error is what matters;
 * the candidate page has the whole log). */
static void cut_evidence_log(cJSON *item) {
    cJSON *ev = cJSON_GetObjectItemCaseSensitive(item, "evidence");
    cJSON *log = cJSON_GetObjectItemCaseSensitive(ev, "log");
    if (cJSON_IsString(log) && strlen(log->valuestring) > EVIDENCE_LOG_MAX) {
        char *cut = xstrndup(log->valuestring, EVIDENCE_LOG_MAX);
        cJSON_ReplaceItemInObjectCaseSensitive(ev, "log", cJSON_CreateString(cut));
        cJSON_AddBoolToObject(ev, "log_truncated", 1);
        free(cut);
    }
}

/* GET /api/failures?problem=&outcome=&before=&limit=&per_group=: candidates whose verdict is a
 * failure, grouped by outcome (each group: its count and its newest per_group items), or one
 * outcome's items page by page. */
static void get_failures(api *a) {
    static const char *const allowed[] = {"problem", "outcome",   "before",
                                          "limit",   "per_group", NULL};
    kiln_store_page pg = {.draft = -1};
    long per_group = 0;
    if (args_allowed(a, "/api/failures", allowed) || arg_problem(a, &pg.problem_id) ||
        arg_id(a, "before", &pg.before) || arg_outcome(a, 0, 0, &pg.outcome) ||
        arg_int(a, "limit", 1, LIST_LIMIT_MAX, LIST_LIMIT_DEFAULT, &pg.limit) ||
        arg_int(a, "per_group", 1, 50, 5, &per_group))
        return;
    if (!pg.outcome && pg.before > 0) {
        fail(a, MHD_HTTP_BAD_REQUEST, "before= pages one outcome: give outcome= too");
        return;
    }
    cJSON *j = cJSON_CreateObject();
    if (pg.problem_id > 0)
        cJSON_AddNumberToObject(j, "problem_id", (double)pg.problem_id);
    cJSON *groups = cJSON_AddArrayToObject(j, "groups");
    int64_t total = 0;
    kiln_err err;
    read_ok(a, kiln_store_dash_failure_groups(a->s, &pg, groups, &total, &err), &err);
    cJSON_AddNumberToObject(j, "total", (double)total);
    cJSON *g;
    cJSON_ArrayForEach(g, groups) {
        if (a->failed)
            break;
        kiln_store_page one = pg;
        one.outcome = cJSON_GetObjectItemCaseSensitive(g, "outcome")->valuestring;
        one.limit = pg.outcome ? pg.limit : per_group;
        cJSON *items = cJSON_AddArrayToObject(g, "items");
        int64_t next = 0;
        if (read_ok(a, kiln_store_dash_failures(a->s, &one, items, &next, &err), &err))
            break;
        cJSON *it;
        cJSON_ArrayForEach(it, items) cut_evidence_log(it);
        if (next)
            cJSON_AddNumberToObject(g, "next_before", (double)next);
        else
            cJSON_AddNullToObject(g, "next_before");
    }
    reply_or_drop(a, j);
}

/* ---- roofline ---- */

static double num_at(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* GET /api/roofline?problem=&per_problem=N: one point per workload of each problem's N fastest
 * correct candidates (achieved GB/s, GFLOP/s when the problem declares flops, arithmetic
 * intensity), and the device's ceilings: the flops ceiling the problem's speed of light used (a
 * tensor-core rate for a bf16 GEMM), or without a problem the latest result's. */
static void get_roofline(api *a) {
    static const char *const allowed[] = {"problem", "per_problem", NULL};
    int64_t problem = 0;
    long per_problem = 0;
    if (args_allowed(a, "/api/roofline", allowed) || arg_problem(a, &problem) ||
        arg_int(a, "per_problem", 1, 200, 20, &per_problem))
        return;
    cJSON *j = cJSON_CreateObject();
    cJSON *dev = latest_device(a, problem);
    double gbps = num_at(dev, "ceiling_gbps"), gflops = num_at(dev, "ceiling_gflops");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(dev, "ceiling_gflops_of");
    cJSON_AddItemToObject(j, "device", dev ? dev : cJSON_CreateNull());
    cJSON *ceil = cJSON_AddObjectToObject(j, "ceilings");
    add_num_or_null(ceil, "gbps", gbps);
    add_num_or_null(ceil, "gflops", gflops);
    if (cJSON_IsString(of))
        cJSON_AddStringToObject(ceil, "gflops_of", of->valuestring);
    else
        cJSON_AddNullToObject(ceil, "gflops_of");
    add_num_or_null(ceil, "ridge_flop_per_byte", gbps > 0 ? gflops / gbps : NAN);
    cJSON *pts = cJSON_AddArrayToObject(j, "points");
    cJSON *rows = cJSON_CreateArray();
    kiln_err err;
    read_ok(a, kiln_store_dash_fastest(a->s, problem, per_problem, rows, &err), &err);
    int n_without_flops = 0;
    const cJSON *row;
    cJSON_ArrayForEach(row, rows) {
        const cJSON *wl;
        cJSON_ArrayForEach(wl, cJSON_GetObjectItemCaseSensitive(
                                   cJSON_GetObjectItemCaseSensitive(row, "result"), "workloads")) {
            double bytes = num_at(wl, "min_bytes"), flops = num_at(wl, "flops");
            double t = num_at(cJSON_GetObjectItemCaseSensitive(wl, "time_us"), "median");
            if (!(bytes > 0) || !(t > 0))
                continue;
            cJSON *p = cJSON_CreateObject();
            static const char *const keys[] = {"candidate_id", "problem_id", "problem", "rank"};
            for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
                cJSON_AddItemToObject(
                    p, keys[i], cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(row, keys[i]), 1));
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
    }
    cJSON_Delete(rows);
    cJSON_AddNumberToObject(j, "n_without_flops", n_without_flops);
    reply_or_drop(a, j);
}

/* ---- events ---- */

/* GET /api/events?problem=&kind=&before=&limit=: newest first. */
static void get_events(api *a) {
    static const char *const allowed[] = {"problem", "kind", "before", "limit", NULL};
    kiln_store_page pg = {.kind = arg(a, "kind"), .draft = -1};
    if (args_allowed(a, "/api/events", allowed) || arg_problem(a, &pg.problem_id) ||
        arg_id(a, "before", &pg.before) ||
        arg_int(a, "limit", 1, LIST_LIMIT_MAX, LIST_LIMIT_DEFAULT, &pg.limit))
        return;
    cJSON *items = cJSON_CreateArray();
    int64_t next = 0;
    kiln_err err;
    read_ok(a, kiln_store_dash_events(a->s, &pg, 1, items, &next, &err), &err);
    reply_page(a, items, next);
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
    kiln_store *s = NULL;
    if (web_db_acquire(w, &s, &err)) {
        web_reply_error(r, MHD_HTTP_SERVICE_UNAVAILABLE, "the store cannot be read: %s", err.msg);
        return;
    }
    api a = {.w = w, .conn = conn, .s = s, .r = r};
    /* One read snapshot: every read of the reply sees the same state. */
    if (!read_ok(&a, kiln_store_read_begin(s, &err), &err)) {
        route(&a, path);
        if (kiln_store_read_end(s, NULL) != KILN_OK)
            a.broken = 1;
    }
    web_db_release(w, s, a.broken);
}
