/* store_impl.h: what the store's files share: the connection's state (opened by store.c) and the
 * helpers every query is written with (sql.c), used by schema.c (creating and migrating the
 * schema) and by the queries (write.c, read.c, dash.c). Nothing outside src/store includes it. */
#ifndef KILN_STORE_IMPL_H
#define KILN_STORE_IMPL_H

#include <cjson/cJSON.h>
#include <sqlite3.h>
#include <sys/types.h>

#include "store.h"

#define STORE_BUSY_TIMEOUT_MS 10000

/* ---- sql.c ---- */
/* Statements a connection keeps prepared (each query's SQL text is prepared once, on first use). */
#define STORE_MAX_STMTS 128

struct kiln_store {
    sqlite3 *db;
    char *path;
    int read_only;
    int version; /* the schema version of the file (a read-only handle leaves an older one as is) */
    pid_t pid;   /* the process that opened the connection: the only one that may use it */
    int n_stmts;
    struct {
        const char *sql; /* the query's static text: its address is the key */
        sqlite3_stmt *st;
    } stmts[STORE_MAX_STMTS];
};

/* A connection used in a forked child corrupts the parent's locks: a programmer error. */
void store_check_owner(const kiln_store *s);
/* KILN_ERR_INVALID when s was opened read-only (what names the operation). */
int store_writable(kiln_store *s, const char *what, kiln_err *err);

/* Turns SQLite result code src into a status and a message naming the store and the operation. */
int store_fail(kiln_store *s, int src, const char *what, kiln_err *err);

/* The prepared statement for sql (a string constant: its address is the cache key), reset and with
 * no bindings. */
int store_stmt(kiln_store *s, const char *sql, sqlite3_stmt **out, kiln_err *err);
/* Resets a cached statement after use (bindings cleared). */
void store_stmt_done(sqlite3_stmt *st);
/* Runs a statement that returns no row (bound already), resets it, maps a failure. */
int store_step_done(kiln_store *s, sqlite3_stmt *st, const char *what, kiln_err *err);
/* Runs a statement that returns at most one integer in column 0: *found is 0 when it returns no
 * row. Resets it. */
int store_step_int(kiln_store *s, sqlite3_stmt *st, int64_t *value, int *found, const char *what,
                   kiln_err *err);
/* One step of a row loop: *row is 1 with a row, 0 when done; a failure is its status (the
 * statement is reset then). Loops read `while (!(rc = store_step_row(s, st, &row, what, err)) &&
 * row) ...` and reset the statement after. */
int store_step_row(kiln_store *s, sqlite3_stmt *st, int *row, const char *what, kiln_err *err);

/* BEGIN IMMEDIATE (the write lock now, so the busy handler waits for it) ... COMMIT when rc is OK,
 * else ROLLBACK keeping rc and its message. */
int store_begin(kiln_store *s, kiln_err *err);
int store_finish(kiln_store *s, int rc, kiln_err *err);
/* Runs SQL text without results (schema, pragmas). */
int store_exec(kiln_store *s, const char *sql, const char *what, kiln_err *err);
/* One-off query of one text value, copied into out ("" when there is no row). */
int store_query_text(kiln_store *s, const char *sql, char *out, size_t cap, const char *what,
                     kiln_err *err);

/* Wall clock, seconds since the epoch. */
double store_now_unix_s(void);

/* Binders: unknown numbers (< 0 or NaN) and ids <= 0 become NULL; text NULL is NULL. */
void store_bind_text(sqlite3_stmt *st, int i, const char *v);
void store_bind_known(sqlite3_stmt *st, int i, double v);
void store_bind_id(sqlite3_stmt *st, int i, int64_t id);
/* A hash as the store writes it: 16 lowercase hex digits. */
void store_hash_text(uint64_t h, char out[17]);

/* Columns: a heap copy of a text column or NULL; a number or -1 when NULL; a hash column (hex) or 0
 * when NULL. */
char *store_col_dup(sqlite3_stmt *st, int i);
double store_col_known(sqlite3_stmt *st, int i);
uint64_t store_col_hash(sqlite3_stmt *st, int i);
/* Adds column i to o under key as its SQL type says: null, a number or a string. */
void store_col_json(cJSON *o, const char *key, sqlite3_stmt *st, int i);
/* Adds column i (JSON text) to o under key parsed, or null when it is NULL or does not parse. */
void store_col_parsed(cJSON *o, const char *key, sqlite3_stmt *st, int i);
/* The row's first n columns as an object under keys[0..n). */
cJSON *store_row_json(sqlite3_stmt *st, const char *const *keys, int n);

/* ---- schema.c ---- */

/* Creates the schema in an empty database, or checks the version of an existing kiln store and
 * migrates an older one (a read-only handle reads an older store as it is). Sets s->version. */
int store_schema_open(kiln_store *s, kiln_err *err);

#endif
