/* dash.c: the store's reads for the dashboard (src/web): the run's heads and state, the hot-op
 * rows, pages of candidates, failures and events, curves, trees, a candidate's page, the roofline's
 * verdicts and the live feed's new rows. Each answers rows as JSON objects under the keys of
 * docs/dashboard.md, and each is a few short statements that use an index (a dashboard request
 * runs them inside one read snapshot, kiln_store_read_begin). A verdict is always a candidate's
 * latest result (the view latest_result). */
#include "store_impl.h"

#include <math.h>
#include <string.h>

/* Appends every row of st (bound already) to arr under keys; returns the last row's column 0 in
 * *last and the rows in *n. Resets st. */
static int rows_into(kiln_store *s, sqlite3_stmt *st, const char *const *keys, int n_keys,
                     cJSON *arr, int64_t *last, long *n, const char *what, kiln_err *err) {
    int row = 0, rc;
    long count = 0;
    int64_t id = 0;
    while (!(rc = store_step_row(s, st, &row, what, err)) && row) {
        cJSON_AddItemToArray(arr, store_row_json(st, keys, n_keys));
        id = sqlite3_column_int64(st, 0);
        count++;
    }
    store_stmt_done(st);
    if (last)
        *last = id;
    if (n)
        *n = count;
    return rc;
}

#define N_KEYS(k) ((int)(sizeof k / sizeof k[0]))

/* A page's rows, with *next the id to page on when the page is full. */
static int page_into(kiln_store *s, sqlite3_stmt *st, const char *const *keys, int n_keys,
                     long limit, cJSON *items, int64_t *next, const char *what, kiln_err *err) {
    int64_t last = 0;
    long n = 0;
    int rc = rows_into(s, st, keys, n_keys, items, &last, &n, what, err);
    if (next)
        *next = !rc && n == limit ? last : 0;
    return rc;
}

static void bind_opt_text(sqlite3_stmt *st, int i, const char *v) {
    if (v)
        sqlite3_bind_text(st, i, v, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

/* ---- where the run stands ---- */

static const char sql_heads[] =
    "SELECT (SELECT max(id) FROM candidate), (SELECT max(id) FROM result), "
    "(SELECT max(id) FROM event), (SELECT max(updated_unix_s) FROM node)";
static const char sql_data_version[] = "PRAGMA data_version";
static const char sql_run_state[] =
    "SELECT (SELECT value FROM meta WHERE key = 'started_unix_s'), "
    "(SELECT value FROM meta WHERE key = 'created_unix_s'), "
    "(SELECT min(created_unix_s) FROM problem), "
    "(SELECT kind FROM event WHERE problem_id IS NULL ORDER BY id DESC LIMIT 1), "
    "(SELECT created_unix_s FROM event WHERE problem_id IS NULL ORDER BY id DESC LIMIT 1), "
    "(SELECT value FROM meta WHERE key = 'budget')";
/* The run-wide events that bound the searches: every `kiln optimize` records "prepare" before it
 * loads the problems, "start" when its workers start searching and "done" when they stopped. */
static const char sql_run_marks[] =
    "SELECT kind, created_unix_s FROM event WHERE problem_id IS NULL "
    "AND kind IN ('prepare', 'start', 'done') ORDER BY id";
static const char sql_last_result_before[] =
    "SELECT max(created_unix_s) FROM result WHERE created_unix_s < ?1";
static const char sql_last_result[] = "SELECT created_unix_s FROM result ORDER BY id DESC LIMIT 1";
static const char sql_meta_all[] = "SELECT key, value FROM meta ORDER BY key";
/* Ids grow with time: the newest rows are the last ids, and a minute's candidates are among the
 * last few thousand (created_unix_s sits after the source in a row: no full scan). */
static const char sql_activity[] =
    "SELECT (SELECT count(*) FROM candidate), (SELECT count(*) FROM result), "
    "(SELECT count(*) FROM candidate WHERE id > (SELECT max(id) FROM candidate) - 10000 "
    "AND created_unix_s > ?1), "
    "(SELECT created_unix_s FROM candidate ORDER BY id DESC LIMIT 1), "
    "(SELECT created_unix_s FROM result ORDER BY id DESC LIMIT 1)";
static const char sql_outcomes_all[] =
    "SELECT outcome, count(*) FROM latest_result GROUP BY outcome";
static const char sql_outcomes_problem[] =
    "SELECT outcome, count(*) FROM latest_result WHERE problem_id = ?1 GROUP BY outcome";

int kiln_store_heads_read(kiln_store *s, kiln_store_heads *h, kiln_err *err) {
    memset(h, 0, sizeof *h);
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, sql_heads, &st, err), row = 0;
    if (rc)
        return rc;
    if (!(rc = store_step_row(s, st, &row, "reading the heads", err)) && row) {
        h->candidate = sqlite3_column_int64(st, 0);
        h->result = sqlite3_column_int64(st, 1);
        h->event = sqlite3_column_int64(st, 2);
        h->node_unix_s = sqlite3_column_double(st, 3);
    }
    store_stmt_done(st);
    return rc;
}

int kiln_store_data_version(kiln_store *s, int64_t *version, kiln_err *err) {
    sqlite3_stmt *st = NULL;
    int found = 0;
    *version = -1;
    int rc = store_stmt(s, sql_data_version, &st, err);
    if (!rc)
        rc = store_step_int(s, st, version, &found, "reading data_version", err);
    if (!rc && !found)
        rc = kiln_errf(err, KILN_ERR_IO, "%s: no data_version", s->path);
    return rc;
}

/* The latest result's time before t (t <= 0: of all), or -1. */
static int last_result_time(kiln_store *s, double t, double *out, kiln_err *err) {
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, t > 0 ? sql_last_result_before : sql_last_result, &st, err), row = 0;
    *out = -1;
    if (rc)
        return rc;
    if (t > 0)
        sqlite3_bind_double(st, 1, t);
    if (!(rc = store_step_row(s, st, &row, "reading the latest result", err)) && row)
        *out = store_col_known(st, 0);
    store_stmt_done(st);
    return rc;
}

/* A search that was never marked done (its coordinator was killed) ended with its last result
 * before `before` (<= 0: the latest result; and, while it may still run, at most now), never
 * before it began. */
static int open_search_end(kiln_store *s, double began, double before, double now, double *end,
                           kiln_err *err) {
    double last = -1;
    int rc = last_result_time(s, before, &last, err);
    if (rc)
        return rc;
    if (before > 0) {
        *end = last > began ? last : began;
    } else {
        /* a search silent for a minute is taken to have stopped when it fell silent */
        double quiet = (last > began ? last : began) + KILN_STORE_SEARCH_QUIET_S;
        *end = now < quiet ? now : quiet;
        if (*end < began)
            *end = began;
    }
    return KILN_OK;
}

/* Sums the searches' intervals: "start" to "done", or to what open_search_end says for one that
 * has no "done" (killed, or running now: *searching). */
static int search_time(kiln_store *s, kiln_store_run_state *rs, kiln_err *err) {
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, sql_run_marks, &st, err), row = 0;
    if (rc)
        return rc;
    typedef struct {
        int kind; /* 0 prepare, 1 start, 2 done */
        double t;
    } mark;
    mark *marks = NULL;
    int n = 0, cap = 0;
    while (!(rc = store_step_row(s, st, &row, "reading the run's searches", err)) && row) {
        const char *k = (const char *)sqlite3_column_text(st, 0);
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            marks = xrealloc(marks, (size_t)cap * sizeof *marks);
        }
        marks[n].kind = strcmp(k, "start") == 0 ? 1 : strcmp(k, "done") == 0 ? 2 : 0;
        marks[n].t = sqlite3_column_double(st, 1);
        n++;
    }
    store_stmt_done(st);
    double now = store_now_unix_s(), began = -1;
    for (int i = 0; !rc && i <= n; i++) {
        if (i < n && marks[i].kind == 1) {
            if (began >= 0) { /* a start without its done: that search was killed */
                double end = began;
                rc = open_search_end(s, began, marks[i].t, now, &end, err);
                rs->searched_s += end - began;
            }
            began = marks[i].t;
        } else if (began >= 0 && (i == n || marks[i].kind == 0 || marks[i].kind == 2)) {
            double end = began;
            if (i < n && marks[i].kind == 2)
                end = marks[i].t > began ? marks[i].t : began;
            else
                rc = open_search_end(s, began, i < n ? marks[i].t : 0, now, &end, err);
            if (i == n && !rc)
                rs->searching = end >= now;
            rs->searched_s += end - began;
            began = -1;
        }
    }
    free(marks);
    return rc;
}

int kiln_store_run_state_read(kiln_store *s, kiln_store_run_state *rs, kiln_err *err) {
    memset(rs, 0, sizeof *rs);
    rs->started_unix_s = rs->last_event_unix_s = -1;
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, sql_run_state, &st, err), row = 0;
    if (rc)
        return rc;
    if (!(rc = store_step_row(s, st, &row, "reading the run's state", err)) && row) {
        for (int i = 0; i < 3 && rs->started_unix_s < 0; i++)
            if (sqlite3_column_type(st, i) != SQLITE_NULL && sqlite3_column_double(st, i) > 0)
                rs->started_unix_s = sqlite3_column_double(st, i);
        const unsigned char *kind = sqlite3_column_text(st, 3);
        snprintf(rs->last_event_kind, sizeof rs->last_event_kind, "%s",
                 kind ? (const char *)kind : "");
        rs->last_event_unix_s = store_col_known(st, 4);
        const unsigned char *budget = sqlite3_column_text(st, 5);
        if (budget)
            rs->budget = atol((const char *)budget);
    }
    store_stmt_done(st);
    if (!rc)
        rc = search_time(s, rs, err);
    return rc;
}

int kiln_store_dash_meta(kiln_store *s, cJSON **out, kiln_err *err) {
    *out = cJSON_CreateObject();
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, sql_meta_all, &st, err), row = 0;
    while (!rc && !(rc = store_step_row(s, st, &row, "reading meta", err)) && row) {
        const unsigned char *v = sqlite3_column_text(st, 1);
        cJSON_AddStringToObject(*out, (const char *)sqlite3_column_text(st, 0),
                                v ? (const char *)v : "");
    }
    if (st)
        store_stmt_done(st);
    return rc;
}

int kiln_store_dash_activity(kiln_store *s, double since_unix_s, cJSON *into, int64_t *n_candidates,
                             kiln_err *err) {
    static const char *const keys[] = {"candidates", "results", "candidates_last_min",
                                       "last_candidate_unix_s", "last_result_unix_s"};
    *n_candidates = 0;
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, sql_activity, &st, err), row = 0;
    if (rc)
        return rc;
    sqlite3_bind_double(st, 1, since_unix_s);
    if (!(rc = store_step_row(s, st, &row, "counting", err)) && row) {
        *n_candidates = sqlite3_column_int64(st, 0);
        for (int i = 0; i < N_KEYS(keys); i++)
            store_col_json(into, keys[i], st, i);
    }
    store_stmt_done(st);
    return rc;
}

int kiln_store_dash_outcomes(kiln_store *s, int64_t problem_id, cJSON *into, int64_t *judged,
                             kiln_err *err) {
    *judged = 0;
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, problem_id > 0 ? sql_outcomes_problem : sql_outcomes_all, &st, err);
    int row = 0;
    if (rc)
        return rc;
    if (problem_id > 0)
        sqlite3_bind_int64(st, 1, problem_id);
    while (!(rc = store_step_row(s, st, &row, "counting verdicts", err)) && row) {
        cJSON_AddNumberToObject(into, (const char *)sqlite3_column_text(st, 0),
                                (double)sqlite3_column_int64(st, 1));
        *judged += sqlite3_column_int64(st, 1);
    }
    store_stmt_done(st);
    return rc;
}

/* ---- problems ---- */

static const char sql_problem_exists[] = "SELECT 1 FROM problem WHERE id = ?1";
/* A problem is skipped when the latest `kiln optimize` (since its "prepare" event) skipped it. */
static const char sql_dash_problems[] =
    "SELECT p.id, p.name, p.dir, p.share, p.eager_us, p.compile_us, p.sol_us, p.incumbent_id, "
    "(SELECT count(*) FROM candidate c WHERE c.problem_id = p.id), "
    "(SELECT count(*) FROM event e WHERE e.problem_id = p.id AND e.kind = 'done'), "
    "(SELECT e.message FROM event e WHERE e.problem_id = p.id AND e.kind = 'skip' AND e.id > "
    "  (SELECT coalesce(max(id), 0) FROM event WHERE problem_id IS NULL AND kind = 'prepare') "
    "  ORDER BY e.id DESC LIMIT 1) "
    "FROM problem p WHERE ?1 IS NULL OR p.id = ?1 "
    "ORDER BY p.share IS NULL, p.share DESC, p.id";
static const char sql_dash_best[] =
    "SELECT r.candidate_id, r.time_us, r.sol_pct, r.score, r.spread_pct, c.params, c.agent, "
    "c.draft, c.family, r.result_json FROM result r JOIN candidate c ON c.id = r.candidate_id "
    "WHERE r.id = ?1";

int kiln_store_problem_exists(kiln_store *s, int64_t id, int *exists, kiln_err *err) {
    sqlite3_stmt *st = NULL;
    int64_t one = 0;
    *exists = 0;
    int rc = store_stmt(s, sql_problem_exists, &st, err);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, id);
    return store_step_int(s, st, &one, exists, "finding a problem", err);
}

int kiln_store_dash_problems(kiln_store *s, int64_t only_id, cJSON **rows, kiln_err *err) {
    static const char *const keys[] = {
        "id",     "name",         "dir",          "share",         "eager_us",   "compile_us",
        "sol_us", "incumbent_id", "n_candidates", "n_done_events", "skip_reason"};
    *rows = cJSON_CreateArray();
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, sql_dash_problems, &st, err);
    if (rc)
        return rc;
    store_bind_id(st, 1, only_id);
    return rows_into(s, st, keys, N_KEYS(keys), *rows, NULL, NULL, "reading the problems", err);
}

int kiln_store_dash_best(kiln_store *s, int64_t result_id, cJSON **best, kiln_store_summary *sum,
                         kiln_err *err) {
    static const char *const keys[] = {"candidate_id", "time_us", "sol_pct", "score", "spread_pct",
                                       "params",       "agent",   "draft",   "family"};
    *best = NULL;
    kiln_store_summary_read(NULL, sum);
    if (result_id <= 0)
        return KILN_OK;
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, sql_dash_best, &st, err), row = 0;
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, result_id);
    if (!(rc = store_step_row(s, st, &row, "reading the best", err)) && row) {
        *best = store_row_json(st, keys, N_KEYS(keys));
        kiln_store_summary_parse((const char *)sqlite3_column_text(st, 9), sum);
    }
    store_stmt_done(st);
    return rc;
}

/* ---- pages ---- */

static const char sql_dash_events[] =
    "SELECT e.id, e.problem_id, p.name, e.kind, e.message, e.created_unix_s FROM event e "
    "LEFT JOIN problem p ON p.id = e.problem_id "
    "WHERE (?1 IS NULL OR e.problem_id = ?1) AND (?2 IS NULL OR e.kind = ?2) "
    "AND (?3 IS NULL OR e.id < ?3) ORDER BY e.id DESC LIMIT ?4";
static const char sql_dash_problem_events[] =
    "SELECT id, kind, message, created_unix_s FROM event WHERE problem_id = ?1 "
    "AND (?2 IS NULL OR kind = ?2) AND (?3 IS NULL OR id < ?3) ORDER BY id DESC LIMIT ?4";
static const char sql_dash_candidates[] =
    "SELECT c.id, c.problem_id, p.name, c.parent_id, c.node_id, c.agent, c.family, "
    "c.params, c.draft, c.created_unix_s, r.outcome, r.time_us, r.sol_pct, r.score "
    "FROM candidate c JOIN problem p ON p.id = c.problem_id "
    "LEFT JOIN latest_result r ON r.candidate_id = c.id "
    "WHERE (?1 IS NULL OR c.id < ?1) AND (?2 IS NULL OR c.problem_id = ?2) "
    "AND (?3 IS NULL OR c.agent = ?3) AND (?4 IS NULL OR c.draft = ?4) "
    "AND (?5 IS NULL OR (?5 = 'waiting' AND r.id IS NULL) OR r.outcome = ?5) "
    "ORDER BY c.id DESC LIMIT ?6";
static const char sql_failure_groups[] =
    "SELECT outcome, count(*) FROM latest_result WHERE outcome != 'ok' "
    "AND (?1 IS NULL OR problem_id = ?1) AND (?2 IS NULL OR outcome = ?2) "
    "GROUP BY outcome ORDER BY count(*) DESC, outcome";
static const char sql_failures[] =
    "SELECT r.id, r.candidate_id, r.problem_id, p.name, c.agent, c.family, c.params, "
    "c.draft, r.created_unix_s, r.outcome, "
    "CASE WHEN json_valid(r.result_json) THEN json_extract(r.result_json, '$.evidence') END "
    "FROM latest_result r JOIN candidate c ON c.id = r.candidate_id "
    "JOIN problem p ON p.id = r.problem_id "
    "WHERE r.outcome = ?1 AND (?2 IS NULL OR r.problem_id = ?2) AND (?3 IS NULL OR r.id < ?3) "
    "ORDER BY r.id DESC LIMIT ?4";

int kiln_store_dash_events(kiln_store *s, const kiln_store_page *pg, int with_problem, cJSON *items,
                           int64_t *next, kiln_err *err) {
    static const char *const keys[] = {"id",   "problem_id", "problem",
                                       "kind", "message",    "created_unix_s"};
    static const char *const brief[] = {"id", "kind", "message", "created_unix_s"};
    KILN_ASSERT(with_problem || pg->problem_id > 0);
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, with_problem ? sql_dash_events : sql_dash_problem_events, &st, err);
    if (rc)
        return rc;
    store_bind_id(st, 1, pg->problem_id);
    bind_opt_text(st, 2, pg->kind);
    store_bind_id(st, 3, pg->before);
    sqlite3_bind_int64(st, 4, pg->limit);
    return with_problem
               ? page_into(s, st, keys, N_KEYS(keys), pg->limit, items, next, "reading events", err)
               : page_into(s, st, brief, N_KEYS(brief), pg->limit, items, next, "reading events",
                           err);
}

int kiln_store_dash_candidates(kiln_store *s, const kiln_store_page *pg, cJSON *items,
                               int64_t *next, kiln_err *err) {
    static const char *const keys[] = {
        "id",     "problem_id", "problem",        "parent_id", "node_id", "agent",   "family",
        "params", "draft",      "created_unix_s", "outcome",   "time_us", "sol_pct", "score"};
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, sql_dash_candidates, &st, err);
    if (rc)
        return rc;
    store_bind_id(st, 1, pg->before);
    store_bind_id(st, 2, pg->problem_id);
    bind_opt_text(st, 3, pg->agent);
    if (pg->draft >= 0)
        sqlite3_bind_int64(st, 4, pg->draft);
    bind_opt_text(st, 5, pg->outcome);
    sqlite3_bind_int64(st, 6, pg->limit);
    return page_into(s, st, keys, N_KEYS(keys), pg->limit, items, next, "reading candidates", err);
}

int kiln_store_dash_failure_groups(kiln_store *s, const kiln_store_page *pg, cJSON *groups,
                                   int64_t *total, kiln_err *err) {
    static const char *const keys[] = {"outcome", "count"};
    *total = 0;
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, sql_failure_groups, &st, err), row = 0;
    if (rc)
        return rc;
    store_bind_id(st, 1, pg->problem_id);
    bind_opt_text(st, 2, pg->outcome);
    while (!(rc = store_step_row(s, st, &row, "counting failures", err)) && row) {
        cJSON_AddItemToArray(groups, store_row_json(st, keys, N_KEYS(keys)));
        *total += sqlite3_column_int64(st, 1);
    }
    store_stmt_done(st);
    return rc;
}

int kiln_store_dash_failures(kiln_store *s, const kiln_store_page *pg, cJSON *items, int64_t *next,
                             kiln_err *err) {
    static const char *const keys[] = {"result_id",      "candidate_id", "problem_id", "problem",
                                       "agent",          "family",       "params",     "draft",
                                       "created_unix_s", "outcome"};
    KILN_ASSERT(pg->outcome);
    *next = 0;
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, sql_failures, &st, err), row = 0;
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, pg->outcome, -1, SQLITE_TRANSIENT);
    store_bind_id(st, 2, pg->problem_id);
    store_bind_id(st, 3, pg->before);
    sqlite3_bind_int64(st, 4, pg->limit);
    long n = 0;
    int64_t last = 0;
    while (!(rc = store_step_row(s, st, &row, "reading failures", err)) && row) {
        cJSON *it = store_row_json(st, keys, N_KEYS(keys));
        store_col_parsed(it, "evidence", st, N_KEYS(keys));
        cJSON_AddItemToArray(items, it);
        last = sqlite3_column_int64(st, 0);
        n++;
    }
    store_stmt_done(st);
    *next = !rc && n == pg->limit ? last : 0;
    return rc;
}

/* ---- verdicts in order: the curve and the live feed ---- */

#define RESULT_POINT_COLUMNS                                                                       \
    "r.id, r.candidate_id, r.problem_id, r.outcome, r.time_us, r.spread_pct, r.sol_pct, r.score, " \
    "r.created_unix_s, c.draft, c.agent, c.params"
static const char *const result_point_keys[] = {
    "id",      "candidate_id", "problem_id",     "outcome", "time_us", "spread_pct",
    "sol_pct", "score",        "created_unix_s", "draft",   "agent",   "params"};
static const char sql_curve[] = "SELECT " RESULT_POINT_COLUMNS " FROM result r "
                                "JOIN candidate c ON c.id = r.candidate_id "
                                "WHERE r.problem_id = ?1 AND r.id > ?2 ORDER BY r.id LIMIT ?3";
static const char sql_new_results[] = "SELECT " RESULT_POINT_COLUMNS " FROM result r "
                                      "JOIN candidate c ON c.id = r.candidate_id "
                                      "WHERE r.id > ?1 ORDER BY r.id LIMIT ?2";
static const char sql_new_candidates[] =
    "SELECT id, problem_id, parent_id, node_id, agent, family, params, draft, created_unix_s "
    "FROM candidate WHERE id > ?1 ORDER BY id LIMIT ?2";
static const char sql_new_events[] =
    "SELECT id, problem_id, kind, message, created_unix_s FROM event WHERE id > ?1 "
    "ORDER BY id LIMIT ?2";
static const char sql_trees_changed[] =
    "SELECT DISTINCT problem_id FROM node WHERE updated_unix_s > ?1 ORDER BY problem_id";

int kiln_store_dash_curve(kiln_store *s, int64_t problem_id, int64_t after, long limit,
                          cJSON *points, long *n, kiln_err *err) {
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, sql_curve, &st, err);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, problem_id);
    sqlite3_bind_int64(st, 2, after);
    sqlite3_bind_int64(st, 3, limit);
    return rows_into(s, st, result_point_keys, N_KEYS(result_point_keys), points, NULL, n,
                     "reading the curve", err);
}

/* The rows of one append-only table after id after, oldest first. */
static int new_rows(kiln_store *s, const char *sql, const char *const *keys, int n_keys,
                    int64_t after, long limit, cJSON *rows, kiln_err *err) {
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, sql, &st, err);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, after);
    sqlite3_bind_int64(st, 2, limit);
    return rows_into(s, st, keys, n_keys, rows, NULL, NULL, "reading new rows", err);
}

int kiln_store_dash_new_results(kiln_store *s, int64_t after, long limit, cJSON *points,
                                kiln_err *err) {
    return new_rows(s, sql_new_results, result_point_keys, N_KEYS(result_point_keys), after, limit,
                    points, err);
}

int kiln_store_dash_new_candidates(kiln_store *s, int64_t after, long limit, cJSON *rows,
                                   kiln_err *err) {
    static const char *const keys[] = {"id",      "problem_id", "parent_id",
                                       "node_id", "agent",      "family",
                                       "params",  "draft",      "created_unix_s"};
    return new_rows(s, sql_new_candidates, keys, N_KEYS(keys), after, limit, rows, err);
}

int kiln_store_dash_new_events(kiln_store *s, int64_t after, long limit, cJSON *rows,
                               kiln_err *err) {
    static const char *const keys[] = {"id", "problem_id", "kind", "message", "created_unix_s"};
    return new_rows(s, sql_new_events, keys, N_KEYS(keys), after, limit, rows, err);
}

int kiln_store_dash_trees_changed(kiln_store *s, double since_unix_s, cJSON *ids, kiln_err *err) {
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, sql_trees_changed, &st, err), row = 0;
    if (rc)
        return rc;
    sqlite3_bind_double(st, 1, since_unix_s);
    while (!(rc = store_step_row(s, st, &row, "reading the trees", err)) && row)
        cJSON_AddItemToArray(ids, cJSON_CreateNumber((double)sqlite3_column_int64(st, 0)));
    store_stmt_done(st);
    return rc;
}

/* ---- the tree ---- */

static const char sql_tree_info[] = "SELECT (SELECT count(*) FROM node WHERE problem_id = ?1), "
                                    "(SELECT count(*) FROM candidate WHERE problem_id = ?1), "
                                    "(SELECT incumbent_id FROM problem WHERE id = ?1), "
                                    "EXISTS (SELECT 1 FROM problem WHERE id = ?1)";
static const char sql_tree_nodes[] =
    "SELECT n.id, n.parent_id, n.candidate_id, n.draft, n.family, n.params, n.visits, "
    "n.value_sum / NULLIF(n.visits, 0), n.best, n.status, r.outcome, r.time_us, r.score "
    "FROM node n LEFT JOIN latest_result r ON r.candidate_id = n.candidate_id "
    "WHERE n.problem_id = ?1 ORDER BY n.visits DESC, n.id LIMIT ?2";
static const char sql_tree_candidates[] =
    "SELECT c.id, c.parent_id, c.id, c.draft, c.family, c.params, 1, r.score, r.score, "
    "CASE WHEN r.id IS NULL THEN 'pending' WHEN r.outcome = 'ok' THEN 'done' ELSE 'failed' END, "
    "r.outcome, r.time_us, r.score FROM candidate c "
    "LEFT JOIN latest_result r ON r.candidate_id = c.id WHERE c.problem_id = ?1 "
    "ORDER BY c.id LIMIT ?2";

int kiln_store_dash_tree(kiln_store *s, int64_t problem_id, long limit, kiln_store_tree_info *info,
                         cJSON *nodes, kiln_err *err) {
    static const char *const keys[] = {"id",      "parent_id", "candidate_id", "draft", "family",
                                       "params",  "visits",    "value",        "best",  "status",
                                       "outcome", "time_us",   "score"};
    memset(info, 0, sizeof *info);
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, sql_tree_info, &st, err), row = 0;
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, problem_id);
    if (!(rc = store_step_row(s, st, &row, "reading the tree", err)) && row) {
        info->n_nodes = sqlite3_column_int64(st, 0);
        info->n_candidates = sqlite3_column_int64(st, 1);
        info->incumbent_id = sqlite3_column_int64(st, 2);
        info->exists = sqlite3_column_int(st, 3);
    }
    store_stmt_done(st);
    if (rc || !info->exists)
        return rc;
    if ((rc = store_stmt(s, info->n_nodes > 0 ? sql_tree_nodes : sql_tree_candidates, &st, err)))
        return rc;
    sqlite3_bind_int64(st, 1, problem_id);
    sqlite3_bind_int64(st, 2, limit);
    return rows_into(s, st, keys, N_KEYS(keys), nodes, NULL, NULL, "reading the tree", err);
}

/* ---- a candidate's page ---- */

static const char sql_dash_candidate[] =
    "SELECT c.id, c.problem_id, p.name, c.parent_id, c.node_id, c.agent, c.family, "
    "c.params, c.draft, c.source, c.source_hash, c.binary_hash, c.compile_log, "
    "c.created_unix_s, p.incumbent_id IS c.id "
    "FROM candidate c JOIN problem p ON p.id = c.problem_id WHERE c.id = ?1";
static const char sql_candidate_results[] =
    "SELECT id, outcome, time_us, spread_pct, sol_pct, score, created_unix_s, result_json "
    "FROM result WHERE candidate_id = ?1 ORDER BY id LIMIT 100";
static const char sql_candidate_brief[] =
    "SELECT c.id, c.agent, c.params, c.source, r.outcome, r.time_us FROM candidate c "
    "LEFT JOIN latest_result r ON r.candidate_id = c.id WHERE c.id = ?1";
static const char sql_children[] =
    "SELECT c.id, c.agent, c.params, r.outcome, r.time_us FROM candidate c "
    "LEFT JOIN latest_result r ON r.candidate_id = c.id WHERE c.parent_id = ?1 "
    "ORDER BY c.id LIMIT 200";
static const char sql_llm_exchanges[] =
    "SELECT id, CASE WHEN candidate_id IS ?1 THEN 'made' ELSE 'asked' END, model, status, "
    "reason, http_status, attempts, tokens, latency_ms, created_unix_s, "
    "substr(request_json, 1, ?2), length(request_json), substr(reply_text, 1, ?2), "
    "length(reply_text) FROM llm_exchange WHERE candidate_id = ?1 OR "
    "(parent_id = ?1 AND candidate_id IS NULL) ORDER BY id LIMIT 100";
/* The ranking carries ids and times only; the JSON is read for the rows kept. */
static const char sql_fastest[] =
    "SELECT w.candidate_id, w.problem_id, p.name, r.result_json, w.rk FROM ("
    "SELECT r.id, r.candidate_id, r.problem_id, ROW_NUMBER() OVER "
    "(PARTITION BY r.problem_id ORDER BY r.time_us, r.candidate_id) AS rk FROM latest_result r "
    "WHERE r.outcome = 'ok' AND r.time_us IS NOT NULL AND (?1 IS NULL OR r.problem_id = ?1)) w "
    "JOIN result r ON r.id = w.id JOIN problem p ON p.id = w.problem_id "
    "WHERE w.rk <= ?2 ORDER BY w.problem_id, w.rk";

int kiln_store_dash_candidate(kiln_store *s, int64_t id, cJSON **out, kiln_err *err) {
    static const char *const keys[] = {"id",          "problem_id",    "problem",     "parent_id",
                                       "node_id",     "agent",         "family",      "params",
                                       "draft",       "source",        "source_hash", "binary_hash",
                                       "compile_log", "created_unix_s"};
    *out = NULL;
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, sql_dash_candidate, &st, err), row = 0;
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, id);
    if (!(rc = store_step_row(s, st, &row, "reading a candidate", err)) && row) {
        *out = store_row_json(st, keys, N_KEYS(keys));
        cJSON_AddBoolToObject(*out, "is_incumbent", sqlite3_column_int(st, N_KEYS(keys)));
    }
    store_stmt_done(st);
    return rc;
}

int kiln_store_dash_candidate_results(kiln_store *s, int64_t id, cJSON *results, kiln_err *err) {
    static const char *const keys[] = {"id",      "outcome", "time_us",       "spread_pct",
                                       "sol_pct", "score",   "created_unix_s"};
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, sql_candidate_results, &st, err), row = 0;
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, id);
    while (!(rc = store_step_row(s, st, &row, "reading results", err)) && row) {
        cJSON *r = store_row_json(st, keys, N_KEYS(keys));
        store_col_parsed(r, "result", st, N_KEYS(keys));
        cJSON_AddItemToArray(results, r);
    }
    store_stmt_done(st);
    return rc;
}

int kiln_store_dash_candidate_brief(kiln_store *s, int64_t id, int with_source, cJSON **out,
                                    kiln_err *err) {
    *out = NULL;
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, sql_candidate_brief, &st, err), row = 0;
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, id);
    if (!(rc = store_step_row(s, st, &row, "reading a candidate", err)) && row) {
        static const char *const keys[] = {"id", "agent", "params", "source", "outcome", "time_us"};
        *out = cJSON_CreateObject();
        for (int i = 0; i < N_KEYS(keys); i++)
            if (with_source || i != 3)
                store_col_json(*out, keys[i], st, i);
    }
    store_stmt_done(st);
    return rc;
}

int kiln_store_dash_children(kiln_store *s, int64_t id, cJSON *children, kiln_err *err) {
    static const char *const keys[] = {"id", "agent", "params", "outcome", "time_us"};
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, sql_children, &st, err);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, id);
    return rows_into(s, st, keys, N_KEYS(keys), children, NULL, NULL, "reading children", err);
}

int kiln_store_dash_llm_exchanges(kiln_store *s, int64_t id, int text_max, cJSON *list,
                                  kiln_err *err) {
    static const char *const keys[] = {"id",         "role",          "model",    "status",
                                       "reason",     "http_status",   "attempts", "tokens",
                                       "latency_ms", "created_unix_s"};
    if (s->version < 2)
        return KILN_OK;
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, sql_llm_exchanges, &st, err), row = 0;
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int(st, 2, text_max);
    while (!(rc = store_step_row(s, st, &row, "reading llm exchanges", err)) && row) {
        cJSON *x = store_row_json(st, keys, N_KEYS(keys));
        /* the request as sent (a chat body: its messages are the prompt), whole when it fits */
        int64_t request_len = sqlite3_column_int64(st, 11),
                reply_len = sqlite3_column_int64(st, 13);
        if (request_len <= text_max)
            store_col_parsed(x, "request", st, 10);
        else
            cJSON_AddNullToObject(x, "request");
        store_col_json(x, "reply", st, 12);
        cJSON_AddBoolToObject(x, "truncated", request_len > text_max || reply_len > text_max);
        cJSON_AddItemToArray(list, x);
    }
    store_stmt_done(st);
    return rc;
}

int kiln_store_dash_fastest(kiln_store *s, int64_t problem_id, long per_problem, cJSON *rows,
                            kiln_err *err) {
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, sql_fastest, &st, err), row = 0;
    if (rc)
        return rc;
    store_bind_id(st, 1, problem_id);
    sqlite3_bind_int64(st, 2, per_problem);
    while (!(rc = store_step_row(s, st, &row, "reading the fastest", err)) && row) {
        cJSON *o = cJSON_CreateObject();
        store_col_json(o, "candidate_id", st, 0);
        store_col_json(o, "problem_id", st, 1);
        store_col_json(o, "problem", st, 2);
        store_col_parsed(o, "result", st, 3);
        store_col_json(o, "rank", st, 4);
        cJSON_AddItemToArray(rows, o);
    }
    store_stmt_done(st);
    return rc;
}
