/* write.c: every write to the store: problems, candidates (deduplicated by binary), the gate's
 * verdicts, tree nodes, events, metadata, the incumbent, the llm agent's exchanges. Each is one
 * short transaction (store.c's essay says why). */
#include "store_impl.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

static const char sql_problem_upsert[] =
    "INSERT INTO problem (name, dir, share, eager_us, compile_us, sol_us, created_unix_s, "
    "content_hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (name) DO UPDATE SET "
    "dir = excluded.dir, share = COALESCE(excluded.share, share), "
    "eager_us = COALESCE(excluded.eager_us, eager_us), "
    "compile_us = COALESCE(excluded.compile_us, compile_us), "
    "sol_us = COALESCE(excluded.sol_us, sol_us), "
    "content_hash = COALESCE(excluded.content_hash, content_hash)";

static const char sql_problem_id[] = "SELECT id FROM problem WHERE name = ?1";
static const char sql_problem_hash[] = "SELECT content_hash FROM problem WHERE name = ?1";

static const char sql_candidate_insert[] =
    "INSERT INTO candidate (problem_id, parent_id, node_id, agent, family, params, draft, "
    "source, source_hash, binary_hash, compile_log, created_unix_s) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";

static const char sql_candidate_by_binary[] =
    "SELECT id FROM candidate WHERE problem_id = ?1 AND binary_hash = ?2";

static const char sql_result_insert[] =
    "INSERT INTO result (candidate_id, problem_id, outcome, time_us, spread_pct, sol_pct, "
    "score, result_json, created_unix_s) "
    "SELECT id, problem_id, ?2, ?3, ?4, ?5, ?6, ?7, ?8 FROM candidate WHERE id = ?1";

static const char sql_node_insert[] =
    "INSERT INTO node (problem_id, parent_id, candidate_id, draft, family, params, visits, "
    "value_sum, best, status, created_unix_s, updated_unix_s) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11)";

static const char sql_node_update[] =
    "UPDATE node SET candidate_id = ?2, draft = ?3, family = ?4, params = ?5, "
    "visits = ?6, value_sum = ?7, best = ?8, status = ?9, updated_unix_s = ?10 "
    "WHERE id = ?1";

static const char sql_event_insert[] =
    "INSERT INTO event (problem_id, kind, message, created_unix_s) VALUES (?1, ?2, ?3, ?4)";

static const char sql_problem_eager_default[] =
    "UPDATE problem SET eager_us = ?2 WHERE id = ?1 AND eager_us IS NULL";
static const char sql_llm_exchange_insert[] =
    "INSERT INTO llm_exchange (problem_id, parent_id, candidate_id, model, request_json, "
    "reply_text, status, reason, http_status, attempts, prompt_tokens, completion_tokens, tokens, "
    "latency_ms, created_unix_s) VALUES (?1, ?2, NULL, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, "
    "?13, ?14)";
static const char sql_llm_exchange_link[] =
    "UPDATE llm_exchange SET candidate_id = ?2 WHERE id = ?1";
static const char sql_meta_set[] = "INSERT INTO meta (key, value) VALUES (?1, ?2) "
                                   "ON CONFLICT (key) DO UPDATE SET value = excluded.value";

static const char sql_incumbent_set[] =
    "UPDATE problem SET incumbent_id = ?2 WHERE id = ?1 AND EXISTS "
    "(SELECT 1 FROM candidate WHERE id = ?2 AND problem_id = ?1)";

int kiln_store_problem_upsert(kiln_store *s, const kiln_store_problem *p, int64_t *id,
                              kiln_err *err) {
    KILN_ASSERT(p && id);
    *id = 0;
    int rc = store_writable(s, "problem upsert", err);
    if (rc)
        return rc;
    if (!p->name || !*p->name || !p->dir)
        return kiln_errf(err, KILN_ERR_INVALID, "%s: a problem needs a name and a directory",
                         s->path);
    sqlite3_stmt *up = NULL, *sel = NULL, *hash = NULL;
    if ((rc = store_stmt(s, sql_problem_upsert, &up, err)) ||
        (rc = store_stmt(s, sql_problem_id, &sel, err)) ||
        (rc = store_stmt(s, sql_problem_hash, &hash, err)))
        return rc;
    if ((rc = store_begin(s, err)))
        return rc;
    if (p->content_hash && *p->content_hash) {
        /* inside the transaction: a concurrent capture cannot slip between check and write */
        int row = 0;
        sqlite3_bind_text(hash, 1, p->name, -1, SQLITE_STATIC);
        rc = store_step_row(s, hash, &row, "problem upsert", err);
        char *had = !rc && row ? store_col_dup(hash, 0) : NULL;
        store_stmt_done(hash);
        if (!rc && had && strcmp(had, p->content_hash) != 0)
            rc = kiln_errf(err, KILN_ERR_INVALID,
                           "%s: problem '%s' is another problem now: the store's results are for "
                           "content %.12s, its directory %s holds content %.12s (capture names a "
                           "changed problem anew; use a fresh run directory for hand-edited "
                           "problems)",
                           s->path, p->name, had, p->dir, p->content_hash);
        free(had);
        if (rc)
            return store_finish(s, rc, err);
    }
    sqlite3_bind_text(up, 1, p->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(up, 2, p->dir, -1, SQLITE_STATIC);
    store_bind_known(up, 3, p->share);
    store_bind_known(up, 4, p->eager_us);
    store_bind_known(up, 5, p->compile_us);
    store_bind_known(up, 6, p->sol_us);
    sqlite3_bind_double(up, 7, store_now_unix_s());
    if (p->content_hash && *p->content_hash)
        sqlite3_bind_text(up, 8, p->content_hash, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(up, 8);
    rc = store_step_done(s, up, "problem upsert", err);
    if (!rc) {
        int found = 0;
        sqlite3_bind_text(sel, 1, p->name, -1, SQLITE_STATIC);
        rc = store_step_int(s, sel, id, &found, "problem upsert", err);
        if (!rc && !found)
            rc = kiln_errf(err, KILN_ERR_IO, "%s: problem '%s' vanished after its upsert", s->path,
                           p->name);
    }
    return store_finish(s, rc, err);
}

int kiln_store_candidate_insert(kiln_store *s, kiln_store_candidate *c, int64_t *id,
                                kiln_err *err) {
    KILN_ASSERT(c);
    int64_t dummy;
    if (!id)
        id = &dummy;
    *id = 0;
    int rc = store_writable(s, "candidate insert", err);
    if (rc)
        return rc;
    if (!c->source || !c->agent)
        return kiln_errf(err, KILN_ERR_INVALID, "%s: a candidate needs a source and an agent",
                         s->path);
    if (c->draft < 0)
        return kiln_errf(err, KILN_ERR_INVALID, "%s: candidate draft %d is negative", s->path,
                         c->draft);
    sqlite3_stmt *st = NULL;
    if ((rc = store_stmt(s, sql_candidate_insert, &st, err)))
        return rc;
    char src_hash[17], bin_hash[17];
    store_hash_text(c->source_hash, src_hash);
    store_hash_text(c->binary_hash, bin_hash);
    sqlite3_bind_int64(st, 1, c->problem_id);
    store_bind_id(st, 2, c->parent_id);
    store_bind_id(st, 3, c->node_id);
    sqlite3_bind_text(st, 4, c->agent, -1, SQLITE_STATIC);
    store_bind_text(st, 5, c->family);
    sqlite3_bind_text(st, 6, c->params ? c->params : "", -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 7, c->draft);
    sqlite3_bind_text(st, 8, c->source, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 9, src_hash, -1, SQLITE_STATIC);
    store_bind_text(st, 10, c->binary_hash ? bin_hash : NULL);
    store_bind_text(st, 11, c->compile_log);
    sqlite3_bind_double(st, 12, store_now_unix_s());
    int r = sqlite3_step(st);
    if (r == SQLITE_DONE) {
        *id = c->id = sqlite3_last_insert_rowid(s->db);
        store_stmt_done(st);
        return KILN_OK;
    }
    if (r == SQLITE_CONSTRAINT_UNIQUE) {
        store_stmt_done(st);
        sqlite3_stmt *sel = NULL;
        int found = 0;
        if ((rc = store_stmt(s, sql_candidate_by_binary, &sel, err)))
            return rc;
        sqlite3_bind_int64(sel, 1, c->problem_id);
        sqlite3_bind_text(sel, 2, bin_hash, -1, SQLITE_STATIC);
        if ((rc = store_step_int(s, sel, id, &found, "candidate dedupe", err)))
            return rc;
        c->id = *id;
        return kiln_errf(err, KILN_ERR_INVALID,
                         "duplicate: problem %" PRId64 " already has candidate %" PRId64
                         " with binary %s",
                         c->problem_id, *id, bin_hash);
    }
    if (r == SQLITE_CONSTRAINT_FOREIGNKEY)
        rc = kiln_errf(err, KILN_ERR_INVALID,
                       "%s: candidate insert: problem %" PRId64 " or parent candidate %" PRId64
                       " does not exist",
                       s->path, c->problem_id, c->parent_id);
    else
        rc = store_fail(s, r, "candidate insert", err);
    store_stmt_done(st);
    return rc;
}

int kiln_store_result_insert(kiln_store *s, int64_t candidate_id, const char *outcome,
                             const char *result_json, double time_us, double spread_pct,
                             double sol_pct, double score, kiln_err *err) {
    int rc = store_writable(s, "result insert", err);
    if (rc)
        return rc;
    if (!outcome || !*outcome)
        return kiln_errf(err, KILN_ERR_INVALID, "%s: a result needs an outcome", s->path);
    if (result_json) {
        cJSON *j = cJSON_Parse(result_json);
        int ok = cJSON_IsObject(j);
        cJSON_Delete(j);
        if (!ok)
            return kiln_errf(err, KILN_ERR_INVALID,
                             "%s: result of candidate %" PRId64
                             ": result_json is not a JSON object",
                             s->path, candidate_id);
    }
    sqlite3_stmt *st = NULL;
    if ((rc = store_stmt(s, sql_result_insert, &st, err)))
        return rc;
    sqlite3_bind_int64(st, 1, candidate_id);
    sqlite3_bind_text(st, 2, outcome, -1, SQLITE_STATIC);
    store_bind_known(st, 3, time_us);
    store_bind_known(st, 4, spread_pct);
    store_bind_known(st, 5, sol_pct);
    /* Failures score 0 (DESIGN.md), whatever the caller passed. */
    int ok = strcmp(outcome, "ok") == 0;
    sqlite3_bind_double(st, 6, !ok || isnan(score) || score < 0 ? 0 : score);
    store_bind_text(st, 7, result_json);
    sqlite3_bind_double(st, 8, store_now_unix_s());
    if ((rc = store_step_done(s, st, "result insert", err)))
        return rc;
    if (sqlite3_changes(s->db) != 1)
        return kiln_errf(err, KILN_ERR_INVALID,
                         "%s: result insert: candidate %" PRId64 " does not exist", s->path,
                         candidate_id);
    return KILN_OK;
}

int kiln_store_node_insert(kiln_store *s, kiln_store_node *n, kiln_err *err) {
    KILN_ASSERT(n);
    int rc = store_writable(s, "node insert", err);
    if (rc)
        return rc;
    if (!n->status || n->draft < 0)
        return kiln_errf(err, KILN_ERR_INVALID, "%s: a node needs a status and a draft >= 0",
                         s->path);
    sqlite3_stmt *st = NULL;
    if ((rc = store_stmt(s, sql_node_insert, &st, err)))
        return rc;
    sqlite3_bind_int64(st, 1, n->problem_id);
    store_bind_id(st, 2, n->parent_id);
    store_bind_id(st, 3, n->candidate_id);
    sqlite3_bind_int(st, 4, n->draft);
    store_bind_text(st, 5, n->family);
    sqlite3_bind_text(st, 6, n->params ? n->params : "", -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 7, n->visits);
    sqlite3_bind_double(st, 8, n->value_sum);
    sqlite3_bind_double(st, 9, n->best);
    sqlite3_bind_text(st, 10, n->status, -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 11, store_now_unix_s());
    if ((rc = store_step_done(s, st, "node insert", err)))
        return rc;
    n->id = sqlite3_last_insert_rowid(s->db);
    return KILN_OK;
}

int kiln_store_node_update(kiln_store *s, const kiln_store_node *n, kiln_err *err) {
    KILN_ASSERT(n);
    int rc = store_writable(s, "node update", err);
    if (rc)
        return rc;
    if (!n->status || n->draft < 0)
        return kiln_errf(err, KILN_ERR_INVALID, "%s: a node needs a status and a draft >= 0",
                         s->path);
    sqlite3_stmt *st = NULL;
    if ((rc = store_stmt(s, sql_node_update, &st, err)))
        return rc;
    sqlite3_bind_int64(st, 1, n->id);
    store_bind_id(st, 2, n->candidate_id);
    sqlite3_bind_int(st, 3, n->draft);
    store_bind_text(st, 4, n->family);
    sqlite3_bind_text(st, 5, n->params ? n->params : "", -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 6, n->visits);
    sqlite3_bind_double(st, 7, n->value_sum);
    sqlite3_bind_double(st, 8, n->best);
    sqlite3_bind_text(st, 9, n->status, -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 10, store_now_unix_s());
    if ((rc = store_step_done(s, st, "node update", err)))
        return rc;
    if (sqlite3_changes(s->db) != 1)
        return kiln_errf(err, KILN_ERR_INVALID, "%s: node update: node %" PRId64 " does not exist",
                         s->path, n->id);
    return KILN_OK;
}

int kiln_store_event(kiln_store *s, int64_t problem_id, const char *kind, const char *message,
                     kiln_err *err) {
    int rc = store_writable(s, "event", err);
    if (rc)
        return rc;
    if (!kind || !*kind)
        return kiln_errf(err, KILN_ERR_INVALID, "%s: an event needs a kind", s->path);
    sqlite3_stmt *st = NULL;
    if ((rc = store_stmt(s, sql_event_insert, &st, err)))
        return rc;
    store_bind_id(st, 1, problem_id);
    sqlite3_bind_text(st, 2, kind, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, message ? message : "", -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 4, store_now_unix_s());
    return store_step_done(s, st, "event insert", err);
}

int kiln_store_meta_set(kiln_store *s, const char *key, const char *value, kiln_err *err) {
    int rc = store_writable(s, "meta set", err);
    if (rc)
        return rc;
    if (!key || !*key || !value)
        return kiln_errf(err, KILN_ERR_INVALID, "%s: meta needs a key and a value", s->path);
    if (strcmp(key, "schema_version") == 0)
        return kiln_errf(err, KILN_ERR_INVALID, "%s: meta key 'schema_version' is the store's own",
                         s->path);
    sqlite3_stmt *st = NULL;
    if ((rc = store_stmt(s, sql_meta_set, &st, err)))
        return rc;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, value, -1, SQLITE_STATIC);
    return store_step_done(s, st, "meta set", err);
}

int kiln_store_incumbent_set(kiln_store *s, int64_t problem_id, int64_t candidate_id,
                             kiln_err *err) {
    int rc = store_writable(s, "incumbent", err);
    if (rc)
        return rc;
    sqlite3_stmt *st = NULL;
    if ((rc = store_stmt(s, sql_incumbent_set, &st, err)))
        return rc;
    sqlite3_bind_int64(st, 1, problem_id);
    sqlite3_bind_int64(st, 2, candidate_id);
    if ((rc = store_step_done(s, st, "incumbent", err)))
        return rc;
    if (sqlite3_changes(s->db) != 1)
        return kiln_errf(err, KILN_ERR_INVALID,
                         "%s: incumbent: candidate %" PRId64
                         " is not a candidate of problem %" PRId64,
                         s->path, candidate_id, problem_id);
    return KILN_OK;
}

int kiln_store_problem_eager_default(kiln_store *s, int64_t problem_id, double eager_us,
                                     kiln_err *err) {
    int rc = store_writable(s, "problem eager time", err);
    if (rc || !(eager_us > 0))
        return rc;
    sqlite3_stmt *st = NULL;
    if ((rc = store_stmt(s, sql_problem_eager_default, &st, err)))
        return rc;
    sqlite3_bind_int64(st, 1, problem_id);
    sqlite3_bind_double(st, 2, eager_us);
    return store_step_done(s, st, "problem eager time", err);
}

/* A count that may be unknown (< 0): NULL then. */
static void bind_count(sqlite3_stmt *st, int i, int64_t v) {
    if (v < 0)
        sqlite3_bind_null(st, i);
    else
        sqlite3_bind_int64(st, i, v);
}

int kiln_store_llm_exchange_insert(kiln_store *s, const kiln_store_llm_exchange *x, int64_t *id,
                                   kiln_err *err) {
    KILN_ASSERT(x && id);
    *id = 0;
    int rc = store_writable(s, "llm exchange", err);
    if (rc)
        return rc;
    if (!x->status || !*x->status)
        return kiln_errf(err, KILN_ERR_INVALID, "%s: an llm exchange needs a status", s->path);
    sqlite3_stmt *st = NULL;
    if ((rc = store_stmt(s, sql_llm_exchange_insert, &st, err)))
        return rc;
    store_bind_id(st, 1, x->problem_id);
    store_bind_id(st, 2, x->parent_id);
    sqlite3_bind_text(st, 3, x->model ? x->model : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, x->request_json ? x->request_json : "", -1, SQLITE_STATIC);
    store_bind_text(st, 5, x->reply_text);
    sqlite3_bind_text(st, 6, x->status, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 7, x->reason ? x->reason : "", -1, SQLITE_STATIC);
    if (x->http_status > 0)
        sqlite3_bind_int(st, 8, x->http_status);
    sqlite3_bind_int(st, 9, x->attempts);
    bind_count(st, 10, x->prompt_tokens);
    bind_count(st, 11, x->completion_tokens);
    sqlite3_bind_int64(st, 12, x->tokens > 0 ? x->tokens : 0);
    sqlite3_bind_double(st, 13, x->latency_ms);
    sqlite3_bind_double(st, 14, store_now_unix_s());
    if ((rc = store_step_done(s, st, "llm exchange insert", err)))
        return rc;
    *id = sqlite3_last_insert_rowid(s->db);
    return KILN_OK;
}

int kiln_store_llm_exchange_link(kiln_store *s, int64_t exchange_id, int64_t candidate_id,
                                 kiln_err *err) {
    if (exchange_id <= 0)
        return KILN_OK;
    int rc = store_writable(s, "llm exchange link", err);
    if (rc)
        return rc;
    sqlite3_stmt *st = NULL;
    if ((rc = store_stmt(s, sql_llm_exchange_link, &st, err)))
        return rc;
    sqlite3_bind_int64(st, 1, exchange_id);
    store_bind_id(st, 2, candidate_id);
    char what[64];
    snprintf(what, sizeof what, "linking llm exchange %lld", (long long)exchange_id);
    return store_step_done(s, st, what, err);
}
