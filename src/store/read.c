/* read.c: the store's answers to the rest of kiln (the search and its resume, the library, submit,
 * the llm agent): problems, candidates, verdicts, the winner of a problem, the tree, the device
 * and the llm agent's failures. A candidate's verdict is its latest result, read through the
 * schema's view latest_result wherever it is asked for. */
#include "store_impl.h"

#include <string.h>

/* ---- meta ---- */

static const char sql_meta_get[] = "SELECT value FROM meta WHERE key = ?1";

char *kiln_store_meta_get(kiln_store *s, const char *key) {
    sqlite3_stmt *st = NULL;
    if (!key || store_stmt(s, sql_meta_get, &st, NULL))
        return NULL;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    char *value = NULL;
    if (sqlite3_step(st) == SQLITE_ROW) {
        const unsigned char *v = sqlite3_column_text(st, 0);
        value = xstrdup(v ? (const char *)v : "");
    }
    store_stmt_done(st);
    return value;
}

/* ---- problems ---- */

/* A version-2 store (read as it is) has no content_hash: it reads as NULL. */
#define PROBLEM_COLUMNS "id, name, dir, share, eager_us, compile_us, sol_us, incumbent_id, "
#define PROBLEM_SELECT(hash, where) "SELECT " PROBLEM_COLUMNS hash " FROM problem " where
static const char *const sql_problem_by_name[2] = {
    PROBLEM_SELECT("NULL", "WHERE name = ?1"), PROBLEM_SELECT("content_hash", "WHERE name = ?1")};
static const char *const sql_problem_by_id[2] = {PROBLEM_SELECT("NULL", "WHERE id = ?1"),
                                                 PROBLEM_SELECT("content_hash", "WHERE id = ?1")};
static const char *const sql_problem_list[2] = {PROBLEM_SELECT("NULL", "ORDER BY id"),
                                                PROBLEM_SELECT("content_hash", "ORDER BY id")};
#define PROBLEM_SQL(s, which) (which)[(s)->version >= 3]

void kiln_store_problem_row_free(kiln_store_problem_row *p) {
    if (!p)
        return;
    free(p->name);
    free(p->dir);
    free(p->content_hash);
    memset(p, 0, sizeof *p);
}

static void problem_row(sqlite3_stmt *st, kiln_store_problem_row *p) {
    p->id = sqlite3_column_int64(st, 0);
    p->name = store_col_dup(st, 1);
    p->dir = store_col_dup(st, 2);
    p->share = store_col_known(st, 3);
    p->eager_us = store_col_known(st, 4);
    p->compile_us = store_col_known(st, 5);
    p->sol_us = store_col_known(st, 6);
    p->incumbent_id = sqlite3_column_int64(st, 7);
    p->content_hash = store_col_dup(st, 8);
}

/* Runs st (bound) for at most one row: *found and out. Resets st. */
static int one_problem(kiln_store *s, sqlite3_stmt *st, kiln_store_problem_row *out, int *found,
                       kiln_err *err) {
    int row = 0;
    int rc = store_step_row(s, st, &row, "reading a problem", err);
    if (!rc && row)
        problem_row(st, out);
    *found = !rc && row;
    store_stmt_done(st);
    return rc;
}

int kiln_store_problem_find(kiln_store *s, const char *name, kiln_store_problem_row *out,
                            int *found, kiln_err *err) {
    KILN_ASSERT(name && out && found);
    memset(out, 0, sizeof *out);
    *found = 0;
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, PROBLEM_SQL(s, sql_problem_by_name), &st, err);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    return one_problem(s, st, out, found, err);
}

int kiln_store_problem_get(kiln_store *s, int64_t id, kiln_store_problem_row *out, int *found,
                           kiln_err *err) {
    KILN_ASSERT(out && found);
    memset(out, 0, sizeof *out);
    *found = 0;
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, PROBLEM_SQL(s, sql_problem_by_id), &st, err);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, id);
    return one_problem(s, st, out, found, err);
}

int kiln_store_problem_list(kiln_store *s, kiln_store_problem_row **rows, int *n, kiln_err *err) {
    *rows = NULL;
    *n = 0;
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, PROBLEM_SQL(s, sql_problem_list), &st, err), row = 0, cap = 0;
    while (!rc && !(rc = store_step_row(s, st, &row, "reading the problems", err)) && row) {
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            *rows = xrealloc(*rows, (size_t)cap * sizeof **rows);
        }
        problem_row(st, &(*rows)[(*n)++]);
    }
    if (st)
        store_stmt_done(st);
    if (rc) {
        for (int i = 0; i < *n; i++)
            kiln_store_problem_row_free(&(*rows)[i]);
        free(*rows);
        *rows = NULL;
        *n = 0;
    }
    return rc;
}

/* ---- candidates ---- */

static const char sql_candidate_get[] =
    "SELECT id, problem_id, parent_id, node_id, draft, agent, family, params, source, compile_log, "
    "source_hash, binary_hash FROM candidate WHERE id = ?1";
static const char sql_candidate_by_binary[] =
    "SELECT id FROM candidate WHERE problem_id = ?1 AND binary_hash = ?2";
static const char sql_candidate_node[] =
    "SELECT n.id FROM candidate c JOIN node n ON n.id = c.node_id WHERE c.id = ?1";
static const char sql_node_root[] =
    "SELECT id FROM node WHERE problem_id = ?1 AND parent_id IS NULL AND family IS NULL AND "
    "draft = 0 ORDER BY id LIMIT 1";

void kiln_store_candidate_row_free(kiln_store_candidate_row *c) {
    if (!c)
        return;
    free(c->agent);
    free(c->family);
    free(c->params);
    free(c->source);
    free(c->compile_log);
    memset(c, 0, sizeof *c);
}

int kiln_store_candidate_get(kiln_store *s, int64_t id, kiln_store_candidate_row *out, int *found,
                             kiln_err *err) {
    KILN_ASSERT(out && found);
    memset(out, 0, sizeof *out);
    *found = 0;
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, sql_candidate_get, &st, err), row = 0;
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, id);
    if (!(rc = store_step_row(s, st, &row, "reading a candidate", err)) && row) {
        out->id = sqlite3_column_int64(st, 0);
        out->problem_id = sqlite3_column_int64(st, 1);
        out->parent_id = sqlite3_column_int64(st, 2);
        out->node_id = sqlite3_column_int64(st, 3);
        out->draft = sqlite3_column_int(st, 4);
        out->agent = store_col_dup(st, 5);
        out->family = store_col_dup(st, 6);
        out->params = store_col_dup(st, 7);
        out->source = store_col_dup(st, 8);
        out->compile_log = store_col_dup(st, 9);
        out->source_hash = store_col_hash(st, 10);
        out->binary_hash = store_col_hash(st, 11);
        *found = 1;
    }
    store_stmt_done(st);
    return rc;
}

/* Runs a statement bound with one id and a hash text, or only an id, for one id back. */
static int one_id(kiln_store *s, const char *sql, int64_t a, const char *text, int64_t *id,
                  const char *what, kiln_err *err) {
    *id = 0;
    sqlite3_stmt *st = NULL;
    int found = 0;
    int rc = store_stmt(s, sql, &st, err);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, a);
    if (text)
        sqlite3_bind_text(st, 2, text, -1, SQLITE_STATIC);
    rc = store_step_int(s, st, id, &found, what, err);
    if (!found)
        *id = 0;
    return rc;
}

int kiln_store_candidate_by_binary(kiln_store *s, int64_t problem_id, uint64_t binary_hash,
                                   int64_t *id, kiln_err *err) {
    char hex[17];
    store_hash_text(binary_hash, hex);
    return one_id(s, sql_candidate_by_binary, problem_id, hex, id, "finding a binary", err);
}

int kiln_store_candidate_node(kiln_store *s, int64_t candidate_id, int64_t *node_id,
                              kiln_err *err) {
    return one_id(s, sql_candidate_node, candidate_id, NULL, node_id, "finding a node", err);
}

int kiln_store_node_root(kiln_store *s, int64_t problem_id, int64_t *node_id, kiln_err *err) {
    return one_id(s, sql_node_root, problem_id, NULL, node_id, "finding the root", err);
}

/* ---- results, verdicts, the winner ---- */

#define RESULT_COLUMNS                                                                             \
    "id, candidate_id, problem_id, outcome, time_us, spread_pct, sol_pct, score, result_json"
static const char sql_result_latest[] =
    "SELECT " RESULT_COLUMNS " FROM latest_result WHERE candidate_id = ?1";
static const char sql_result_get[] = "SELECT " RESULT_COLUMNS " FROM result WHERE id = ?1";

void kiln_store_result_row_free(kiln_store_result_row *r) {
    if (!r)
        return;
    free(r->result_json);
    memset(r, 0, sizeof *r);
}

static int one_result(kiln_store *s, const char *sql, int64_t id, kiln_store_result_row *out,
                      int *found, kiln_err *err) {
    KILN_ASSERT(out && found);
    memset(out, 0, sizeof *out);
    *found = 0;
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, sql, &st, err), row = 0;
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, id);
    if (!(rc = store_step_row(s, st, &row, "reading a result", err)) && row) {
        out->id = sqlite3_column_int64(st, 0);
        out->candidate_id = sqlite3_column_int64(st, 1);
        out->problem_id = sqlite3_column_int64(st, 2);
        const unsigned char *o = sqlite3_column_text(st, 3);
        snprintf(out->outcome, sizeof out->outcome, "%s", o ? (const char *)o : "");
        out->time_us = store_col_known(st, 4);
        out->spread_pct = store_col_known(st, 5);
        out->sol_pct = store_col_known(st, 6);
        out->score = sqlite3_column_double(st, 7);
        out->result_json = store_col_dup(st, 8);
        *found = 1;
    }
    store_stmt_done(st);
    return rc;
}

int kiln_store_result_latest(kiln_store *s, int64_t candidate_id, kiln_store_result_row *out,
                             int *found, kiln_err *err) {
    return one_result(s, sql_result_latest, candidate_id, out, found, err);
}

int kiln_store_result_get(kiln_store *s, int64_t result_id, kiln_store_result_row *out, int *found,
                          kiln_err *err) {
    return one_result(s, sql_result_get, result_id, out, found, err);
}

/* The winner rule, written once (docs/store.md, "The winner of a problem"). The incumbent's verdict
 * first; else the problem's ok verdicts by time, walked until one is its candidate's latest: the
 * sort carries three numbers per row, never the result JSON, and the walk usually stops at the
 * first row (a candidate has one result unless it was re-timed). */
static const char sql_winner_incumbent[] =
    "SELECT r.id, r.outcome = 'ok' AND r.time_us IS NOT NULL, r.time_us, p.incumbent_id "
    "FROM problem p LEFT JOIN latest_result r ON r.candidate_id = p.incumbent_id "
    "AND r.problem_id = p.id WHERE p.id = ?1";
static const char sql_winner_fastest[] =
    "SELECT id, candidate_id, time_us FROM result WHERE problem_id = ?1 AND outcome = 'ok' AND "
    "time_us IS NOT NULL ORDER BY time_us, candidate_id";
static const char sql_latest_id[] = "SELECT id FROM latest_result WHERE candidate_id = ?1";

int kiln_store_winner_get(kiln_store *s, int64_t problem_id, kiln_store_winner *w, kiln_err *err) {
    KILN_ASSERT(w);
    memset(w, 0, sizeof *w);
    sqlite3_stmt *inc = NULL, *fastest = NULL, *latest = NULL;
    int rc, row = 0;
    if ((rc = store_stmt(s, sql_winner_incumbent, &inc, err)) ||
        (rc = store_stmt(s, sql_winner_fastest, &fastest, err)) ||
        (rc = store_stmt(s, sql_latest_id, &latest, err)))
        return rc;
    sqlite3_bind_int64(inc, 1, problem_id);
    if (!(rc = store_step_row(s, inc, &row, "reading the incumbent", err)) && row) {
        w->incumbent_id = sqlite3_column_int64(inc, 3);
        if (sqlite3_column_int(inc, 1)) {
            w->candidate_id = w->incumbent_id;
            w->result_id = sqlite3_column_int64(inc, 0);
            w->time_us = sqlite3_column_double(inc, 2);
        }
    }
    store_stmt_done(inc);
    if (rc || w->candidate_id)
        return rc;
    sqlite3_bind_int64(fastest, 1, problem_id);
    while (!w->candidate_id &&
           !(rc = store_step_row(s, fastest, &row, "reading the fastest", err)) && row) {
        int64_t rid = sqlite3_column_int64(fastest, 0), latest_id = 0;
        int found = 0;
        sqlite3_bind_int64(latest, 1, sqlite3_column_int64(fastest, 1));
        if ((rc = store_step_int(s, latest, &latest_id, &found, "reading a verdict", err)))
            break;
        if (found && latest_id == rid) {
            w->candidate_id = sqlite3_column_int64(fastest, 1);
            w->result_id = rid;
            w->time_us = sqlite3_column_double(fastest, 2);
        }
    }
    store_stmt_done(fastest);
    return rc;
}

/* A candidate with its verdict: the columns of VERDICT_COLUMNS from candidate c LEFT JOIN
 * latest_result r. */
#define VERDICT_COLUMNS                                                                            \
    "c.id, c.node_id, c.source_hash, c.binary_hash, c.draft, r.id, r.outcome, r.time_us, "         \
    "r.sol_pct, r.result_json"
static const char sql_verdict_get[] = "SELECT " VERDICT_COLUMNS " FROM candidate c "
                                      "JOIN latest_result r ON r.candidate_id = c.id "
                                      "WHERE c.id = ?1";
static const char sql_verdict_list[] = "SELECT " VERDICT_COLUMNS " FROM candidate c "
                                       "LEFT JOIN latest_result r ON r.candidate_id = c.id "
                                       "WHERE c.problem_id = ?1 ORDER BY c.id";

static void verdict_row(sqlite3_stmt *st, kiln_store_verdict *v) {
    memset(v, 0, sizeof *v);
    v->candidate_id = sqlite3_column_int64(st, 0);
    v->node_id = sqlite3_column_int64(st, 1);
    v->source_hash = store_col_hash(st, 2);
    v->binary_hash = store_col_hash(st, 3);
    v->draft = sqlite3_column_int(st, 4);
    v->result_id = sqlite3_column_int64(st, 5);
    const unsigned char *o = sqlite3_column_text(st, 6);
    v->ok = o && strcmp((const char *)o, "ok") == 0;
    v->time_us = store_col_known(st, 7);
    v->sol_pct = store_col_known(st, 8);
    kiln_store_summary sum;
    kiln_store_summary_parse((const char *)sqlite3_column_text(st, 9), &sum);
    v->score_known = sum.score_known;
    v->score = sum.score_known ? sum.score : -1;
}

int kiln_store_verdict_get(kiln_store *s, int64_t candidate_id, kiln_store_verdict *v, int *found,
                           kiln_err *err) {
    KILN_ASSERT(v && found);
    memset(v, 0, sizeof *v);
    *found = 0;
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, sql_verdict_get, &st, err), row = 0;
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, candidate_id);
    if (!(rc = store_step_row(s, st, &row, "reading a verdict", err)) && row) {
        verdict_row(st, v);
        *found = 1;
    }
    store_stmt_done(st);
    return rc;
}

int kiln_store_verdict_list(kiln_store *s, int64_t problem_id, kiln_store_verdict **rows, int *n,
                            kiln_err *err) {
    *rows = NULL;
    *n = 0;
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, sql_verdict_list, &st, err), row = 0, cap = 0;
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, problem_id);
    while (!(rc = store_step_row(s, st, &row, "reading the candidates", err)) && row) {
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            *rows = xrealloc(*rows, (size_t)cap * sizeof **rows);
        }
        verdict_row(st, &(*rows)[(*n)++]);
    }
    store_stmt_done(st);
    if (rc) {
        free(*rows);
        *rows = NULL;
        *n = 0;
    }
    return rc;
}

/* ---- the tree ---- */

static const char sql_node_list[] =
    "SELECT id, parent_id, candidate_id, draft, family, params FROM node WHERE problem_id = ?1 "
    "ORDER BY id";

void kiln_store_node_row_free(kiln_store_node_row *n) {
    if (!n)
        return;
    free(n->family);
    free(n->params);
    memset(n, 0, sizeof *n);
}

int kiln_store_node_list(kiln_store *s, int64_t problem_id, kiln_store_node_row **rows, int *n,
                         kiln_err *err) {
    *rows = NULL;
    *n = 0;
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, sql_node_list, &st, err), row = 0, cap = 0;
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, problem_id);
    while (!(rc = store_step_row(s, st, &row, "reading the tree", err)) && row) {
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            *rows = xrealloc(*rows, (size_t)cap * sizeof **rows);
        }
        kiln_store_node_row *r = &(*rows)[(*n)++];
        r->id = sqlite3_column_int64(st, 0);
        r->parent_id = sqlite3_column_int64(st, 1);
        r->candidate_id = sqlite3_column_int64(st, 2);
        r->draft = sqlite3_column_int(st, 3);
        r->family = store_col_dup(st, 4);
        r->params = store_col_dup(st, 5);
    }
    store_stmt_done(st);
    if (rc) {
        for (int i = 0; i < *n; i++)
            kiln_store_node_row_free(&(*rows)[i]);
        free(*rows);
        *rows = NULL;
        *n = 0;
    }
    return rc;
}

/* ---- the device ---- */

/* The problem's own results first (the device it was timed on), then anyone's: each walks the
 * results backwards from the newest and stops at the first with a device. */
#define DEVICE_QUERY(where)                                                                        \
    "SELECT json_extract(result_json, '$.device') FROM result WHERE " where                        \
    "json_valid(result_json) AND json_type(result_json, '$.device') = 'object' "                   \
    "ORDER BY id DESC LIMIT 1"
static const char sql_device_of_problem[] = DEVICE_QUERY("problem_id = ?1 AND ");
static const char sql_device_any[] = DEVICE_QUERY("");

int kiln_store_latest_device(kiln_store *s, int64_t prefer_problem_id, char **device_json,
                             kiln_err *err) {
    *device_json = NULL;
    for (int pass = prefer_problem_id > 0 ? 0 : 1; pass < 2 && !*device_json; pass++) {
        sqlite3_stmt *st = NULL;
        int rc = store_stmt(s, pass == 0 ? sql_device_of_problem : sql_device_any, &st, err);
        int row = 0;
        if (rc)
            return rc;
        if (pass == 0)
            sqlite3_bind_int64(st, 1, prefer_problem_id);
        if (!(rc = store_step_row(s, st, &row, "reading the device", err)) && row)
            *device_json = store_col_dup(st, 0);
        store_stmt_done(st);
        if (rc)
            return rc;
    }
    return KILN_OK;
}

/* ---- the llm agent ---- */

/* Failed children (their verdicts) and, in a store that has llm_exchange, the replies about the
 * same node that held no kernel: kind 0 and 1. */
static const char sql_failures_children[] =
    "SELECT 0, c.id, r.outcome, r.result_json, c.compile_log, c.source, NULL, "
    "r.created_unix_s AS t FROM candidate c JOIN latest_result r ON r.candidate_id = c.id "
    "WHERE c.problem_id = ?1 AND coalesce(c.parent_id, 0) = ?2 AND r.outcome <> 'ok' "
    "ORDER BY t DESC LIMIT ?3";
static const char sql_failures_all[] =
    "SELECT * FROM (SELECT 0, c.id, r.outcome, r.result_json, c.compile_log, c.source, NULL, "
    "r.created_unix_s AS t FROM candidate c JOIN latest_result r ON r.candidate_id = c.id "
    "WHERE c.problem_id = ?1 AND coalesce(c.parent_id, 0) = ?2 AND r.outcome <> 'ok' "
    "UNION ALL SELECT 1, 0, status, NULL, NULL, NULL, reason, created_unix_s FROM llm_exchange "
    "WHERE problem_id = ?1 AND coalesce(parent_id, 0) = ?2 AND status = 'no_kernel') "
    "ORDER BY t DESC LIMIT ?3";
static const char sql_llm_tokens[] = "SELECT coalesce(sum(tokens), 0) FROM llm_exchange";

void kiln_store_failure_free(kiln_store_failure *f) {
    if (!f)
        return;
    free(f->outcome);
    free(f->result_json);
    free(f->compile_log);
    free(f->source);
    free(f->reason);
    memset(f, 0, sizeof *f);
}

int kiln_store_llm_failures(kiln_store *s, int64_t problem_id, int64_t parent_id, int max,
                            kiln_store_failure **rows, int *n, kiln_err *err) {
    *rows = NULL;
    *n = 0;
    if (max <= 0)
        return KILN_OK;
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, s->version >= 2 ? sql_failures_all : sql_failures_children, &st, err);
    if (rc)
        return rc;
    sqlite3_bind_int64(st, 1, problem_id);
    sqlite3_bind_int64(st, 2, parent_id > 0 ? parent_id : 0);
    sqlite3_bind_int(st, 3, max);
    *rows = xcalloc((size_t)max, sizeof **rows);
    int row = 0;
    while (*n < max && !(rc = store_step_row(s, st, &row, "reading the failures", err)) && row) {
        kiln_store_failure *f = &(*rows)[(*n)++];
        f->candidate_id = sqlite3_column_int(st, 0) == 0 ? sqlite3_column_int64(st, 1) : 0;
        f->outcome = store_col_dup(st, 2);
        f->result_json = store_col_dup(st, 3);
        f->compile_log = store_col_dup(st, 4);
        f->source = store_col_dup(st, 5);
        f->reason = store_col_dup(st, 6);
    }
    store_stmt_done(st);
    if (rc) {
        for (int i = 0; i < *n; i++)
            kiln_store_failure_free(&(*rows)[i]);
        free(*rows);
        *rows = NULL;
        *n = 0;
    }
    return rc;
}

int kiln_store_llm_tokens(kiln_store *s, int64_t *tokens, kiln_err *err) {
    *tokens = 0;
    if (s->version < 2)
        return KILN_OK;
    sqlite3_stmt *st = NULL;
    int found = 0;
    int rc = store_stmt(s, sql_llm_tokens, &st, err);
    return rc ? rc : store_step_int(s, st, tokens, &found, "counting the llm's tokens", err);
}
