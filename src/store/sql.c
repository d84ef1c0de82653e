/* sql.c: the helpers every query of src/store is written with: the per-connection statement cache,
 * stepping, mapping SQLite's failures to kiln's statuses and messages, transactions and read
 * snapshots, binders and columns. */
#include "store_impl.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- errors ---- */

int store_fail(kiln_store *s, int src, const char *what, kiln_err *err) {
    const char *path = s->path;
    const char *msg = s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(src);
    switch (src & 0xff) {
    case SQLITE_NOTADB:
        return kiln_errf(err, KILN_ERR_FORMAT, "%s is not a kiln store (%s)", path, msg);
    case SQLITE_CORRUPT:
        return kiln_errf(err, KILN_ERR_FORMAT,
                         "%s is damaged: %s (%s; truncated or overwritten? restore it or start a "
                         "new run)",
                         path, what, msg);
    case SQLITE_CONSTRAINT:
    case SQLITE_MISMATCH:
    case SQLITE_RANGE:
    case SQLITE_TOOBIG:
        return kiln_errf(err, KILN_ERR_INVALID, "%s: %s: %s", path, what, msg);
    case SQLITE_READONLY:
        return kiln_errf(err, KILN_ERR_IO, "%s: %s: %s (read-only file or directory?)", path, what,
                         msg);
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return kiln_errf(err, KILN_ERR_IO, "%s: %s: %s (another process held it for over %d s)",
                         path, what, msg, STORE_BUSY_TIMEOUT_MS / 1000);
    default:
        return kiln_errf(err, KILN_ERR_IO, "%s: %s: %s", path, what, msg);
    }
}

void store_check_owner(const kiln_store *s) {
    KILN_ASSERT(s && s->pid == getpid());
}

int store_writable(kiln_store *s, const char *what, kiln_err *err) {
    store_check_owner(s);
    if (s->read_only)
        return kiln_errf(err, KILN_ERR_INVALID, "%s: %s: the store was opened read-only", s->path,
                         what);
    return KILN_OK;
}

/* ---- statements ---- */

int store_stmt(kiln_store *s, const char *sql, sqlite3_stmt **out, kiln_err *err) {
    store_check_owner(s);
    *out = NULL;
    for (int i = 0; i < s->n_stmts; i++)
        if (s->stmts[i].sql == sql) {
            *out = s->stmts[i].st;
            return KILN_OK;
        }
    KILN_ASSERT(s->n_stmts < STORE_MAX_STMTS);
    sqlite3_stmt *st = NULL;
    int r = sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL);
    if (r != SQLITE_OK)
        return store_fail(s, r, "preparing a query", err);
    s->stmts[s->n_stmts].sql = sql;
    s->stmts[s->n_stmts].st = st;
    s->n_stmts++;
    *out = st;
    return KILN_OK;
}

void store_stmt_done(sqlite3_stmt *st) {
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
}

int store_step_done(kiln_store *s, sqlite3_stmt *st, const char *what, kiln_err *err) {
    int r = sqlite3_step(st);
    int rc = r == SQLITE_DONE ? KILN_OK : store_fail(s, r, what, err);
    store_stmt_done(st);
    return rc;
}

int store_step_int(kiln_store *s, sqlite3_stmt *st, int64_t *value, int *found, const char *what,
                   kiln_err *err) {
    int r = sqlite3_step(st);
    int rc = KILN_OK;
    *found = 0;
    if (r == SQLITE_ROW) {
        *value = sqlite3_column_int64(st, 0);
        *found = 1;
    } else if (r != SQLITE_DONE) {
        rc = store_fail(s, r, what, err);
    }
    store_stmt_done(st);
    return rc;
}

int store_step_row(kiln_store *s, sqlite3_stmt *st, int *row, const char *what, kiln_err *err) {
    int r = sqlite3_step(st);
    *row = r == SQLITE_ROW;
    if (r == SQLITE_ROW || r == SQLITE_DONE)
        return KILN_OK;
    int rc = store_fail(s, r, what, err);
    store_stmt_done(st);
    return rc;
}

static int run_sql(kiln_store *s, const char *sql, const char *what, kiln_err *err) {
    sqlite3_stmt *st = NULL;
    int rc = store_stmt(s, sql, &st, err);
    return rc ? rc : store_step_done(s, st, what, err);
}

static const char sql_begin_immediate[] = "BEGIN IMMEDIATE";
static const char sql_begin[] = "BEGIN";
static const char sql_commit[] = "COMMIT";
static const char sql_rollback[] = "ROLLBACK";

int store_begin(kiln_store *s, kiln_err *err) {
    return run_sql(s, sql_begin_immediate, "BEGIN IMMEDIATE", err);
}

int store_finish(kiln_store *s, int rc, kiln_err *err) {
    if (rc == KILN_OK)
        rc = run_sql(s, sql_commit, "COMMIT", err);
    if (rc != KILN_OK && !sqlite3_get_autocommit(s->db))
        run_sql(s, sql_rollback, "ROLLBACK", NULL);
    return rc;
}

int kiln_store_read_begin(kiln_store *s, kiln_err *err) {
    return run_sql(s, sql_begin, "BEGIN", err);
}

int kiln_store_read_end(kiln_store *s, kiln_err *err) {
    store_check_owner(s);
    if (sqlite3_get_autocommit(s->db))
        return KILN_OK;
    int rc = run_sql(s, sql_commit, "COMMIT", err);
    if (rc != KILN_OK && !sqlite3_get_autocommit(s->db))
        run_sql(s, sql_rollback, "ROLLBACK", NULL);
    return rc;
}

int store_exec(kiln_store *s, const char *sql, const char *what, kiln_err *err) {
    int r = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
    return r == SQLITE_OK ? KILN_OK : store_fail(s, r, what, err);
}

int store_query_text(kiln_store *s, const char *sql, char *out, size_t cap, const char *what,
                     kiln_err *err) {
    sqlite3_stmt *st = NULL;
    out[0] = 0;
    int r = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    if (r == SQLITE_OK) {
        r = sqlite3_step(st);
        if (r == SQLITE_ROW) {
            const unsigned char *v = sqlite3_column_text(st, 0);
            snprintf(out, cap, "%s", v ? (const char *)v : "");
            r = SQLITE_OK;
        } else if (r == SQLITE_DONE) {
            r = SQLITE_OK;
        }
    }
    int rc = r == SQLITE_OK ? KILN_OK : store_fail(s, r, what, err);
    sqlite3_finalize(st);
    return rc;
}

/* ---- values ---- */

double store_now_unix_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void store_bind_text(sqlite3_stmt *st, int i, const char *v) {
    if (v)
        sqlite3_bind_text(st, i, v, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

void store_bind_known(sqlite3_stmt *st, int i, double v) {
    if (isnan(v) || v < 0)
        sqlite3_bind_null(st, i);
    else
        sqlite3_bind_double(st, i, v);
}

void store_bind_id(sqlite3_stmt *st, int i, int64_t id) {
    if (id > 0)
        sqlite3_bind_int64(st, i, id);
    else
        sqlite3_bind_null(st, i);
}

void store_hash_text(uint64_t h, char out[17]) {
    snprintf(out, 17, "%016" PRIx64, h);
}

char *store_col_dup(sqlite3_stmt *st, int i) {
    const unsigned char *v = sqlite3_column_text(st, i);
    return v ? xstrdup((const char *)v) : NULL;
}

double store_col_known(sqlite3_stmt *st, int i) {
    return sqlite3_column_type(st, i) == SQLITE_NULL ? -1 : sqlite3_column_double(st, i);
}

uint64_t store_col_hash(sqlite3_stmt *st, int i) {
    const unsigned char *v = sqlite3_column_text(st, i);
    return v ? strtoull((const char *)v, NULL, 16) : 0;
}

void store_col_json(cJSON *o, const char *key, sqlite3_stmt *st, int i) {
    switch (sqlite3_column_type(st, i)) {
    case SQLITE_INTEGER:
        cJSON_AddNumberToObject(o, key, (double)sqlite3_column_int64(st, i));
        break;
    case SQLITE_FLOAT:
        cJSON_AddNumberToObject(o, key, sqlite3_column_double(st, i));
        break;
    case SQLITE_TEXT:
        cJSON_AddStringToObject(o, key, (const char *)sqlite3_column_text(st, i));
        break;
    default:
        cJSON_AddNullToObject(o, key);
    }
}

void store_col_parsed(cJSON *o, const char *key, sqlite3_stmt *st, int i) {
    const unsigned char *text = sqlite3_column_text(st, i);
    cJSON *v = text ? cJSON_Parse((const char *)text) : NULL;
    cJSON_AddItemToObject(o, key, v ? v : cJSON_CreateNull());
}

cJSON *store_row_json(sqlite3_stmt *st, const char *const *keys, int n) {
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; i < n; i++)
        store_col_json(o, keys[i], st, i);
    return o;
}
