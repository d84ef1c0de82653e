/* store.c: the run's SQLite store (RUN/kiln.db) and the run lock (RUN/kiln.lock); docs/store.md
 * describes the schema the code below creates.
 *
 * The concurrency model
 * ---------------------
 * One `kiln optimize` is several processes: the coordinator, one agent per speciality, one gate per
 * GPU. Each of them opens RUN/kiln.db with its own connection, after fork (a SQLite connection
 * never crosses a fork: the child would share the parent's file descriptors and locks with it, so a
 * connection remembers the pid that opened it, asserts it on every call, and a child that closes an
 * inherited one only forgets it). Who writes what: agents insert candidates; gates insert results;
 * the coordinator inserts problems, tree nodes, events and metadata. Each table has one kind of
 * writer, so rows never race; ids come from INTEGER PRIMARY KEY and only grow (nothing is deleted),
 * which lets the dashboard follow a table with "WHERE id > last".
 *
 * The database is in WAL mode. A writer appends its pages to RUN/kiln.db-wal and commits by
 * appending a commit frame; readers keep reading the snapshot that was current when their read
 * began, so the dashboard (a read-only connection) never blocks a writer and never sees half a
 * transaction. Writers exclude each other for the length of one transaction only, and every write
 * here is one short transaction: a single INSERT/UPDATE (SQLite wraps it in its own transaction)
 * or, where a write must be read back (the upsert of a problem), BEGIN IMMEDIATE ... COMMIT around
 * two statements. BEGIN IMMEDIATE takes the write lock up front, so the busy handler (10 s) waits
 * for it instead of failing with a snapshot conflict halfway through. No transaction stays open
 * across a compile or a gate run.
 *
 * Why kill -9 loses nothing committed: when COMMIT returns, the commit frame is in the WAL file (in
 * the kernel's page cache at least; synchronous=NORMAL syncs at checkpoints, not at every commit).
 * A process that dies keeps nothing of its own that the database needs: the kernel still writes the
 * page cache out, and the next connection replays the WAL up to the last valid commit frame. A
 * transaction that was not committed is simply absent. What synchronous=NORMAL gives up is the last
 * transactions before a power loss (never the database's consistency), which a resume re-derives.
 *
 * Two runs never share a store: the coordinator holds an flock(2) on RUN/kiln.lock for the whole
 * run. flock is released by the kernel when the last descriptor of the lock goes away, so a holder
 * killed by SIGKILL leaves no stale lock behind; the pid and start time written into the file only
 * serve the error message of the second comer. (Children forked by the coordinator inherit the
 * descriptor, so the run stays locked while any of them lives; exec'd programs do not: O_CLOEXEC.)
 */
#include "store.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <sqlite3.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BUSY_TIMEOUT_MS 10000

/* Schema version 1. Changing it means a new version number and a migration in open_schema. */
static const char schema_sql[] =
    "CREATE TABLE meta (\n"
    "  key TEXT PRIMARY KEY NOT NULL,\n"
    "  value TEXT NOT NULL\n"
    ") WITHOUT ROWID;\n"
    "CREATE TABLE problem (\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  name TEXT NOT NULL UNIQUE,\n"
    "  dir TEXT NOT NULL,\n"
    "  share REAL,\n"
    "  eager_us REAL,\n"
    "  compile_us REAL,\n"
    "  sol_us REAL,\n"
    "  incumbent_id INTEGER REFERENCES candidate(id),\n"
    "  created_unix_s REAL NOT NULL\n"
    ");\n"
    "CREATE TABLE candidate (\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  problem_id INTEGER NOT NULL REFERENCES problem(id),\n"
    "  parent_id INTEGER REFERENCES candidate(id),\n"
    "  node_id INTEGER,\n"
    "  agent TEXT NOT NULL,\n"
    "  family TEXT,\n"
    "  params TEXT NOT NULL DEFAULT '',\n"
    "  draft INTEGER NOT NULL DEFAULT 0 CHECK (draft >= 0),\n"
    "  source TEXT NOT NULL,\n"
    "  source_hash TEXT NOT NULL,\n"
    "  binary_hash TEXT,\n"
    "  compile_log TEXT,\n"
    "  created_unix_s REAL NOT NULL\n"
    ");\n"
    "CREATE UNIQUE INDEX candidate_binary ON candidate(problem_id, binary_hash);\n"
    "CREATE INDEX candidate_source ON candidate(problem_id, source_hash);\n"
    "CREATE INDEX candidate_parent ON candidate(parent_id);\n"
    "CREATE INDEX candidate_node ON candidate(node_id);\n"
    "CREATE TABLE result (\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  candidate_id INTEGER NOT NULL REFERENCES candidate(id),\n"
    "  problem_id INTEGER NOT NULL REFERENCES problem(id),\n"
    "  outcome TEXT NOT NULL,\n"
    "  time_us REAL,\n"
    "  spread_pct REAL,\n"
    "  sol_pct REAL,\n"
    "  score REAL NOT NULL DEFAULT 0,\n"
    "  result_json TEXT,\n"
    "  created_unix_s REAL NOT NULL\n"
    ");\n"
    "CREATE INDEX result_candidate ON result(candidate_id, id);\n"
    "CREATE INDEX result_problem ON result(problem_id, id);\n"
    "CREATE INDEX result_outcome ON result(outcome, problem_id);\n"
    "CREATE TABLE node (\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  problem_id INTEGER NOT NULL REFERENCES problem(id),\n"
    "  parent_id INTEGER REFERENCES node(id),\n"
    "  candidate_id INTEGER REFERENCES candidate(id),\n"
    "  draft INTEGER NOT NULL DEFAULT 0 CHECK (draft >= 0),\n"
    "  family TEXT,\n"
    "  params TEXT NOT NULL DEFAULT '',\n"
    "  visits INTEGER NOT NULL DEFAULT 0,\n"
    "  value_sum REAL NOT NULL DEFAULT 0,\n"
    "  best REAL NOT NULL DEFAULT 0,\n"
    "  status TEXT NOT NULL,\n"
    "  created_unix_s REAL NOT NULL,\n"
    "  updated_unix_s REAL NOT NULL\n"
    ");\n"
    "CREATE INDEX node_problem ON node(problem_id, parent_id);\n"
    "CREATE INDEX node_parent ON node(parent_id);\n"
    "CREATE TABLE event (\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  problem_id INTEGER REFERENCES problem(id),\n"
    "  kind TEXT NOT NULL,\n"
    "  message TEXT NOT NULL DEFAULT '',\n"
    "  created_unix_s REAL NOT NULL\n"
    ");\n"
    "CREATE INDEX event_problem ON event(problem_id, id);\n"
    "CREATE VIEW latest_result AS\n"
    "  SELECT * FROM result WHERE id IN (SELECT MAX(id) FROM result GROUP BY candidate_id);\n";

/* Prepared once per connection, on first use. */
typedef enum {
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_PROBLEM_UPSERT,
    ST_PROBLEM_ID,
    ST_CANDIDATE_INSERT,
    ST_CANDIDATE_BY_BINARY,
    ST_RESULT_INSERT,
    ST_NODE_INSERT,
    ST_NODE_UPDATE,
    ST_EVENT_INSERT,
    ST_META_SET,
    ST_META_GET,
    ST_INCUMBENT_SET,
    ST_COUNT
} stmt_id;

static const char *const stmt_sql[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_PROBLEM_UPSERT] =
        "INSERT INTO problem (name, dir, share, eager_us, compile_us, sol_us, created_unix_s) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (name) DO UPDATE SET "
        "dir = excluded.dir, share = COALESCE(excluded.share, share), "
        "eager_us = COALESCE(excluded.eager_us, eager_us), "
        "compile_us = COALESCE(excluded.compile_us, compile_us), "
        "sol_us = COALESCE(excluded.sol_us, sol_us)",
    [ST_PROBLEM_ID] = "SELECT id FROM problem WHERE name = ?1",
    [ST_CANDIDATE_INSERT] =
        "INSERT INTO candidate (problem_id, parent_id, node_id, agent, family, params, draft, "
        "source, source_hash, binary_hash, compile_log, created_unix_s) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    [ST_CANDIDATE_BY_BINARY] =
        "SELECT id FROM candidate WHERE problem_id = ?1 AND binary_hash = ?2",
    [ST_RESULT_INSERT] =
        "INSERT INTO result (candidate_id, problem_id, outcome, time_us, spread_pct, sol_pct, "
        "score, result_json, created_unix_s) "
        "SELECT id, problem_id, ?2, ?3, ?4, ?5, ?6, ?7, ?8 FROM candidate WHERE id = ?1",
    [ST_NODE_INSERT] =
        "INSERT INTO node (problem_id, parent_id, candidate_id, draft, family, params, visits, "
        "value_sum, best, status, created_unix_s, updated_unix_s) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11)",
    [ST_NODE_UPDATE] = "UPDATE node SET candidate_id = ?2, draft = ?3, family = ?4, params = ?5, "
                       "visits = ?6, value_sum = ?7, best = ?8, status = ?9, updated_unix_s = ?10 "
                       "WHERE id = ?1",
    [ST_EVENT_INSERT] =
        "INSERT INTO event (problem_id, kind, message, created_unix_s) VALUES (?1, ?2, ?3, ?4)",
    [ST_META_SET] = "INSERT INTO meta (key, value) VALUES (?1, ?2) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    [ST_META_GET] = "SELECT value FROM meta WHERE key = ?1",
    [ST_INCUMBENT_SET] = "UPDATE problem SET incumbent_id = ?2 WHERE id = ?1 AND EXISTS "
                         "(SELECT 1 FROM candidate WHERE id = ?2 AND problem_id = ?1)",
};

struct kiln_store {
    sqlite3 *db;
    char *path;
    int read_only;
    pid_t pid; /* the process that opened the connection: the only one that may use it */
    sqlite3_stmt *stmt[ST_COUNT];
};

static double now_unix_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Turns a SQLite failure into a status and a message that names the store and the operation. */
static int db_fail(const char *path, sqlite3 *db, int src, const char *what, kiln_err *err) {
    const char *msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(src);
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
                         path, what, msg, BUSY_TIMEOUT_MS / 1000);
    default:
        return kiln_errf(err, KILN_ERR_IO, "%s: %s: %s", path, what, msg);
    }
}

static int fail(kiln_store *s, int src, const char *what, kiln_err *err) {
    return db_fail(s->path, s->db, src, what, err);
}

static void check_owner(const kiln_store *s) {
    /* A connection used in a forked child corrupts the parent's locks: a programmer error. */
    KILN_ASSERT(s && s->pid == getpid());
}

static int writable(kiln_store *s, const char *what, kiln_err *err) {
    check_owner(s);
    if (s->read_only)
        return kiln_errf(err, KILN_ERR_INVALID, "%s: %s: the store was opened read-only", s->path,
                         what);
    return KILN_OK;
}

static int stmt_get(kiln_store *s, stmt_id id, sqlite3_stmt **out, kiln_err *err) {
    if (!s->stmt[id]) {
        int r = sqlite3_prepare_v3(s->db, stmt_sql[id], -1, SQLITE_PREPARE_PERSISTENT, &s->stmt[id],
                                   NULL);
        if (r != SQLITE_OK)
            return fail(s, r, "preparing a statement", err);
    }
    *out = s->stmt[id];
    return KILN_OK;
}

static void stmt_done(sqlite3_stmt *st) {
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
}

/* Runs a statement that returns no row (bound already), resets it, maps a failure. */
static int step_done(kiln_store *s, sqlite3_stmt *st, const char *what, kiln_err *err) {
    int r = sqlite3_step(st);
    int rc = r == SQLITE_DONE ? KILN_OK : fail(s, r, what, err);
    stmt_done(st);
    return rc;
}

/* Runs a statement expected to return one integer in column 0 (bound already): *found is 0 when
 * it returns no row. */
static int step_int(kiln_store *s, sqlite3_stmt *st, int64_t *value, int *found, const char *what,
                    kiln_err *err) {
    int r = sqlite3_step(st);
    int rc = KILN_OK;
    *found = 0;
    if (r == SQLITE_ROW) {
        *value = sqlite3_column_int64(st, 0);
        *found = 1;
    } else if (r != SQLITE_DONE) {
        rc = fail(s, r, what, err);
    }
    stmt_done(st);
    return rc;
}

static int run_simple(kiln_store *s, stmt_id id, const char *what, kiln_err *err) {
    sqlite3_stmt *st = NULL;
    int rc = stmt_get(s, id, &st, err);
    return rc ? rc : step_done(s, st, what, err);
}

static int begin(kiln_store *s, kiln_err *err) {
    return run_simple(s, ST_BEGIN, "BEGIN IMMEDIATE", err);
}

/* Commits when rc is OK, else rolls back (keeping rc and its message). */
static int finish(kiln_store *s, int rc, kiln_err *err) {
    if (rc == KILN_OK)
        rc = run_simple(s, ST_COMMIT, "COMMIT", err);
    if (rc != KILN_OK && !sqlite3_get_autocommit(s->db))
        run_simple(s, ST_ROLLBACK, "ROLLBACK", NULL);
    return rc;
}

/* Binders: unknown numbers (< 0 or NaN) and ids 0 become NULL. */
static void bind_text(sqlite3_stmt *st, int i, const char *v) {
    if (v)
        sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, i);
}

static void bind_known(sqlite3_stmt *st, int i, double v) {
    if (isnan(v) || v < 0)
        sqlite3_bind_null(st, i);
    else
        sqlite3_bind_double(st, i, v);
}

static void bind_id(sqlite3_stmt *st, int i, int64_t id) {
    if (id > 0)
        sqlite3_bind_int64(st, i, id);
    else
        sqlite3_bind_null(st, i);
}

static void hash_text(uint64_t h, char out[17]) {
    snprintf(out, 17, "%016" PRIx64, h);
}

/* ---- opening ---- */

static int exec_sql(kiln_store *s, const char *sql, const char *what, kiln_err *err) {
    int r = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
    return r == SQLITE_OK ? KILN_OK : fail(s, r, what, err);
}

/* One-off query returning one text value (copied into out) or none (out[0] = 0). */
static int query_text(kiln_store *s, const char *sql, char *out, size_t cap, const char *what,
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
    int rc = r == SQLITE_OK ? KILN_OK : fail(s, r, what, err);
    sqlite3_finalize(st);
    return rc;
}

/* Creates the schema in an empty database, or checks the version of an existing kiln store. */
static int open_schema(kiln_store *s, kiln_err *err) {
    char v[64];
    int rc =
        query_text(s, "SELECT count(*) FROM sqlite_master", v, sizeof v, "reading the schema", err);
    if (rc)
        return rc;
    char has_meta[8];
    rc = query_text(s, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'",
                    has_meta, sizeof has_meta, "reading the schema", err);
    if (rc)
        return rc;
    if (!has_meta[0]) {
        if (strcmp(v, "0") != 0)
            return kiln_errf(err, KILN_ERR_FORMAT,
                             "%s is not a kiln store (an SQLite database with other tables)",
                             s->path);
        if (s->read_only)
            return kiln_errf(err, KILN_ERR_FORMAT, "%s is not a kiln store (an empty database)",
                             s->path);
        /* Two processes may create the store at once: the second finds the first's schema. */
        if ((rc = begin(s, err)))
            return rc;
        rc = query_text(s, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'",
                        has_meta, sizeof has_meta, "reading the schema", err);
        if (!rc && !has_meta[0]) {
            rc = exec_sql(s, schema_sql, "creating the schema", err);
            if (!rc) {
                char *sql = xasprintf("INSERT INTO meta (key, value) VALUES "
                                      "('schema_version', '%d'), ('created_unix_s', '%.3f')",
                                      KILN_STORE_SCHEMA_VERSION, now_unix_s());
                rc = exec_sql(s, sql, "creating the schema", err);
                free(sql);
            }
        }
        if ((rc = finish(s, rc, err)))
            return rc;
    }
    rc = query_text(s, "SELECT value FROM meta WHERE key = 'schema_version'", v, sizeof v,
                    "reading the schema version", err);
    if (rc)
        return rc;
    char *end = NULL;
    long version = strtol(v, &end, 10);
    if (!v[0] || *end || version < 1)
        return kiln_errf(err, KILN_ERR_FORMAT,
                         "%s is not a kiln store (no valid schema_version in its meta table: '%s')",
                         s->path, v);
    if (version > KILN_STORE_SCHEMA_VERSION)
        return kiln_errf(
            err, KILN_ERR_FORMAT,
            "%s was written by a newer kiln (store schema version %ld; this kiln reads "
            "up to %d): use that kiln, or start a new run",
            s->path, version, KILN_STORE_SCHEMA_VERSION);
    return KILN_OK;
}

/* A file SQLite would refuse, refused before SQLite opens it (it must not gain a -wal beside it).
 */
static int check_header(const char *path, int read_only, kiln_err *err) {
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT && !read_only)
            return KILN_OK;
        if (errno == ENOENT)
            return kiln_errf(err, KILN_ERR_IO, "%s: no kiln store here (no such file)", path);
        return kiln_errf(err, KILN_ERR_IO, "%s: %s", path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode))
        return kiln_errf(err, KILN_ERR_FORMAT, "%s is not a kiln store (not a regular file)", path);
    if (st.st_size == 0)
        return read_only
                   ? kiln_errf(err, KILN_ERR_FORMAT, "%s is not a kiln store (empty file)", path)
                   : KILN_OK;
    /* The content is left to SQLite (SQLITE_NOTADB, SQLITE_CORRUPT): opening and closing a
     * descriptor of the database file here would drop every POSIX lock this process holds on it
     * through another connection, after which a writer may checkpoint and delete the WAL under a
     * live reader. */
    return KILN_OK;
}

int kiln_store_open(const char *run_dir, int read_only, kiln_store **out, kiln_err *err) {
    KILN_ASSERT(run_dir && out);
    *out = NULL;
    kiln_store *s = xcalloc(1, sizeof *s);
    s->path = kiln_path_join(run_dir, "kiln.db");
    s->read_only = read_only;
    s->pid = getpid();
    int rc = KILN_OK;
    if (!read_only && (rc = kiln_mkdirs(run_dir, err)))
        goto fail;
    if ((rc = check_header(s->path, read_only, err)))
        goto fail;
    int flags = read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    int r = sqlite3_open_v2(s->path, &s->db, flags, NULL);
    if (r != SQLITE_OK) {
        rc = fail(s, r, "opening", err);
        goto fail;
    }
    sqlite3_extended_result_codes(s->db, 1);
    sqlite3_busy_timeout(s->db, BUSY_TIMEOUT_MS);
    if ((rc = exec_sql(s, "PRAGMA foreign_keys = ON", "enabling foreign keys", err)))
        goto fail;
    if (!read_only) {
        char mode[32];
        /* Several processes may create the store at once. Switching the journal mode escalates a
         * shared lock to an exclusive one, and SQLite answers SQLITE_BUSY at once, without its busy
         * handler, when two connections try that together (it would deadlock otherwise): retry. */
        for (int attempt = 0;; attempt++) {
            rc = query_text(s, "PRAGMA journal_mode", mode, sizeof mode, "reading the journal mode",
                            err);
            if (!rc && strcmp(mode, "wal") != 0)
                rc = query_text(s, "PRAGMA journal_mode = WAL", mode, sizeof mode,
                                "switching to WAL mode", err);
            int busy = (sqlite3_errcode(s->db) & 0xff) == SQLITE_BUSY ||
                       (sqlite3_errcode(s->db) & 0xff) == SQLITE_LOCKED;
            if (!rc || !busy || attempt >= 200)
                break;
            usleep(50000);
        }
        if (!rc && strcmp(mode, "wal") != 0)
            rc = kiln_errf(err, KILN_ERR_IO, "%s: cannot switch to WAL mode (journal mode '%s')",
                           s->path, mode);
        if (!rc)
            rc = exec_sql(s, "PRAGMA synchronous = NORMAL", "setting synchronous", err);
        if (rc)
            goto fail;
    }
    if ((rc = open_schema(s, err)))
        goto fail;
    *out = s;
    return KILN_OK;
fail:
    kiln_store_close(s);
    return rc;
}

void kiln_store_close(kiln_store *s) {
    if (!s)
        return;
    if (s->pid == getpid()) {
        for (int i = 0; i < ST_COUNT; i++)
            sqlite3_finalize(s->stmt[i]);
        sqlite3_close_v2(s->db);
    }
    /* else: inherited through fork; the parent's connection is left alone (and leaked here). */
    free(s->path);
    free(s);
}

struct sqlite3 *kiln_store_db(kiln_store *s) {
    check_owner(s);
    return s->db;
}

const char *kiln_store_path(const kiln_store *s) {
    return s->path;
}

/* ---- the run lock ---- */

static int lock_fd = -1;
static char *lock_dir;

int kiln_store_lock(const char *run_dir, kiln_err *err) {
    KILN_ASSERT(run_dir);
    if (lock_fd >= 0) {
        if (strcmp(lock_dir, run_dir) == 0)
            return KILN_OK;
        return kiln_errf(err, KILN_ERR_INVALID, "%s: this process already holds the lock of %s",
                         run_dir, lock_dir);
    }
    int rc = kiln_mkdirs(run_dir, err);
    if (rc)
        return rc;
    char *path = kiln_path_join(run_dir, "kiln.lock");
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = kiln_errf(err, KILN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        goto done;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        if (e == EWOULDBLOCK) {
            /* The holder's note: "pid N\nstarted TEXT\n" (empty while it is being written). */
            char note[256] = {0};
            ssize_t n = pread(fd, note, sizeof note - 1, 0);
            long pid = 0;
            char started[128] = "an unknown time";
            if (n > 0) {
                sscanf(note, "pid %ld", &pid);
                const char *st = strstr(note, "started ");
                if (st) {
                    snprintf(started, sizeof started, "%s", st + 8);
                    started[strcspn(started, "\n")] = 0;
                }
            }
            if (pid > 0)
                rc = kiln_errf(err, KILN_ERR_INVALID,
                               "%s is in use by kiln optimize (pid %ld, started %s)", run_dir, pid,
                               started);
            else
                rc = kiln_errf(err, KILN_ERR_INVALID,
                               "%s is in use by kiln optimize (pid unknown: %s holds no note yet)",
                               run_dir, path);
        } else {
            rc = kiln_errf(err, KILN_ERR_IO, "%s: flock: %s", path, strerror(e));
        }
        close(fd);
        goto done;
    }
    time_t t = time(NULL);
    struct tm tm;
    char when[64];
    localtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S %Z", &tm);
    char note[160];
    int len = snprintf(note, sizeof note, "pid %ld\nstarted %s\n", (long)getpid(), when);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, note, (size_t)len, 0) != len) {
        rc = kiln_errf(err, KILN_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
        close(fd);
        goto done;
    }
    lock_fd = fd;
    lock_dir = xstrdup(run_dir);
done:
    free(path);
    return rc;
}

void kiln_store_unlock(void) {
    if (lock_fd < 0)
        return;
    if (ftruncate(lock_fd, 0) != 0) {
        /* the note stays; harmless, the lock itself goes with the descriptor */
    }
    close(lock_fd);
    lock_fd = -1;
    free(lock_dir);
    lock_dir = NULL;
}

/* ---- writes ---- */

int kiln_store_problem_upsert(kiln_store *s, const kiln_store_problem *p, int64_t *id,
                              kiln_err *err) {
    KILN_ASSERT(p && id);
    *id = 0;
    int rc = writable(s, "problem upsert", err);
    if (rc)
        return rc;
    if (!p->name || !*p->name || !p->dir)
        return kiln_errf(err, KILN_ERR_INVALID, "%s: a problem needs a name and a directory",
                         s->path);
    sqlite3_stmt *up = NULL, *sel = NULL;
    if ((rc = stmt_get(s, ST_PROBLEM_UPSERT, &up, err)) ||
        (rc = stmt_get(s, ST_PROBLEM_ID, &sel, err)))
        return rc;
    if ((rc = begin(s, err)))
        return rc;
    sqlite3_bind_text(up, 1, p->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(up, 2, p->dir, -1, SQLITE_STATIC);
    bind_known(up, 3, p->share);
    bind_known(up, 4, p->eager_us);
    bind_known(up, 5, p->compile_us);
    bind_known(up, 6, p->sol_us);
    sqlite3_bind_double(up, 7, now_unix_s());
    rc = step_done(s, up, "problem upsert", err);
    if (!rc) {
        int found = 0;
        sqlite3_bind_text(sel, 1, p->name, -1, SQLITE_STATIC);
        rc = step_int(s, sel, id, &found, "problem upsert", err);
        if (!rc && !found)
            rc = kiln_errf(err, KILN_ERR_IO, "%s: problem '%s' vanished after its upsert", s->path,
                           p->name);
    }
    return finish(s, rc, err);
}

int kiln_store_candidate_insert(kiln_store *s, kiln_store_candidate *c, int64_t *id,
                                kiln_err *err) {
    KILN_ASSERT(c);
    int64_t dummy;
    if (!id)
        id = &dummy;
    *id = 0;
    int rc = writable(s, "candidate insert", err);
    if (rc)
        return rc;
    if (!c->source || !c->agent)
        return kiln_errf(err, KILN_ERR_INVALID, "%s: a candidate needs a source and an agent",
                         s->path);
    if (c->draft < 0)
        return kiln_errf(err, KILN_ERR_INVALID, "%s: candidate draft %d is negative", s->path,
                         c->draft);
    sqlite3_stmt *st = NULL;
    if ((rc = stmt_get(s, ST_CANDIDATE_INSERT, &st, err)))
        return rc;
    char src_hash[17], bin_hash[17];
    hash_text(c->source_hash, src_hash);
    hash_text(c->binary_hash, bin_hash);
    sqlite3_bind_int64(st, 1, c->problem_id);
    bind_id(st, 2, c->parent_id);
    bind_id(st, 3, c->node_id);
    sqlite3_bind_text(st, 4, c->agent, -1, SQLITE_STATIC);
    bind_text(st, 5, c->family);
    sqlite3_bind_text(st, 6, c->params ? c->params : "", -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 7, c->draft);
    sqlite3_bind_text(st, 8, c->source, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 9, src_hash, -1, SQLITE_STATIC);
    bind_text(st, 10, c->binary_hash ? bin_hash : NULL);
    bind_text(st, 11, c->compile_log);
    sqlite3_bind_double(st, 12, now_unix_s());
    int r = sqlite3_step(st);
    if (r == SQLITE_DONE) {
        *id = c->id = sqlite3_last_insert_rowid(s->db);
        stmt_done(st);
        return KILN_OK;
    }
    if (r == SQLITE_CONSTRAINT_UNIQUE) {
        stmt_done(st);
        sqlite3_stmt *sel = NULL;
        int found = 0;
        if ((rc = stmt_get(s, ST_CANDIDATE_BY_BINARY, &sel, err)))
            return rc;
        sqlite3_bind_int64(sel, 1, c->problem_id);
        sqlite3_bind_text(sel, 2, bin_hash, -1, SQLITE_STATIC);
        if ((rc = step_int(s, sel, id, &found, "candidate dedupe", err)))
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
        rc = fail(s, r, "candidate insert", err);
    stmt_done(st);
    return rc;
}

int kiln_store_result_insert(kiln_store *s, int64_t candidate_id, const char *outcome,
                             const char *result_json, double time_us, double spread_pct,
                             double sol_pct, double score, kiln_err *err) {
    int rc = writable(s, "result insert", err);
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
    if ((rc = stmt_get(s, ST_RESULT_INSERT, &st, err)))
        return rc;
    sqlite3_bind_int64(st, 1, candidate_id);
    sqlite3_bind_text(st, 2, outcome, -1, SQLITE_STATIC);
    bind_known(st, 3, time_us);
    bind_known(st, 4, spread_pct);
    bind_known(st, 5, sol_pct);
    /* Failures score 0 (DESIGN.md), whatever the caller passed. */
    int ok = strcmp(outcome, "ok") == 0;
    sqlite3_bind_double(st, 6, !ok || isnan(score) || score < 0 ? 0 : score);
    bind_text(st, 7, result_json);
    sqlite3_bind_double(st, 8, now_unix_s());
    if ((rc = step_done(s, st, "result insert", err)))
        return rc;
    if (sqlite3_changes(s->db) != 1)
        return kiln_errf(err, KILN_ERR_INVALID,
                         "%s: result insert: candidate %" PRId64 " does not exist", s->path,
                         candidate_id);
    return KILN_OK;
}

int kiln_store_node_insert(kiln_store *s, kiln_store_node *n, kiln_err *err) {
    KILN_ASSERT(n);
    int rc = writable(s, "node insert", err);
    if (rc)
        return rc;
    if (!n->status || n->draft < 0)
        return kiln_errf(err, KILN_ERR_INVALID, "%s: a node needs a status and a draft >= 0",
                         s->path);
    sqlite3_stmt *st = NULL;
    if ((rc = stmt_get(s, ST_NODE_INSERT, &st, err)))
        return rc;
    sqlite3_bind_int64(st, 1, n->problem_id);
    bind_id(st, 2, n->parent_id);
    bind_id(st, 3, n->candidate_id);
    sqlite3_bind_int(st, 4, n->draft);
    bind_text(st, 5, n->family);
    sqlite3_bind_text(st, 6, n->params ? n->params : "", -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 7, n->visits);
    sqlite3_bind_double(st, 8, n->value_sum);
    sqlite3_bind_double(st, 9, n->best);
    sqlite3_bind_text(st, 10, n->status, -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 11, now_unix_s());
    if ((rc = step_done(s, st, "node insert", err)))
        return rc;
    n->id = sqlite3_last_insert_rowid(s->db);
    return KILN_OK;
}

int kiln_store_node_update(kiln_store *s, const kiln_store_node *n, kiln_err *err) {
    KILN_ASSERT(n);
    int rc = writable(s, "node update", err);
    if (rc)
        return rc;
    if (!n->status || n->draft < 0)
        return kiln_errf(err, KILN_ERR_INVALID, "%s: a node needs a status and a draft >= 0",
                         s->path);
    sqlite3_stmt *st = NULL;
    if ((rc = stmt_get(s, ST_NODE_UPDATE, &st, err)))
        return rc;
    sqlite3_bind_int64(st, 1, n->id);
    bind_id(st, 2, n->candidate_id);
    sqlite3_bind_int(st, 3, n->draft);
    bind_text(st, 4, n->family);
    sqlite3_bind_text(st, 5, n->params ? n->params : "", -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 6, n->visits);
    sqlite3_bind_double(st, 7, n->value_sum);
    sqlite3_bind_double(st, 8, n->best);
    sqlite3_bind_text(st, 9, n->status, -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 10, now_unix_s());
    if ((rc = step_done(s, st, "node update", err)))
        return rc;
    if (sqlite3_changes(s->db) != 1)
        return kiln_errf(err, KILN_ERR_INVALID, "%s: node update: node %" PRId64 " does not exist",
                         s->path, n->id);
    return KILN_OK;
}

int kiln_store_event(kiln_store *s, int64_t problem_id, const char *kind, const char *message,
                     kiln_err *err) {
    int rc = writable(s, "event", err);
    if (rc)
        return rc;
    if (!kind || !*kind)
        return kiln_errf(err, KILN_ERR_INVALID, "%s: an event needs a kind", s->path);
    sqlite3_stmt *st = NULL;
    if ((rc = stmt_get(s, ST_EVENT_INSERT, &st, err)))
        return rc;
    bind_id(st, 1, problem_id);
    sqlite3_bind_text(st, 2, kind, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, message ? message : "", -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 4, now_unix_s());
    return step_done(s, st, "event insert", err);
}

int kiln_store_meta_set(kiln_store *s, const char *key, const char *value, kiln_err *err) {
    int rc = writable(s, "meta set", err);
    if (rc)
        return rc;
    if (!key || !*key || !value)
        return kiln_errf(err, KILN_ERR_INVALID, "%s: meta needs a key and a value", s->path);
    if (strcmp(key, "schema_version") == 0)
        return kiln_errf(err, KILN_ERR_INVALID, "%s: meta key 'schema_version' is the store's own",
                         s->path);
    sqlite3_stmt *st = NULL;
    if ((rc = stmt_get(s, ST_META_SET, &st, err)))
        return rc;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, value, -1, SQLITE_STATIC);
    return step_done(s, st, "meta set", err);
}

char *kiln_store_meta_get(kiln_store *s, const char *key) {
    check_owner(s);
    sqlite3_stmt *st = NULL;
    if (!key || stmt_get(s, ST_META_GET, &st, NULL))
        return NULL;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    char *value = NULL;
    if (sqlite3_step(st) == SQLITE_ROW) {
        const unsigned char *v = sqlite3_column_text(st, 0);
        value = xstrdup(v ? (const char *)v : "");
    }
    stmt_done(st);
    return value;
}

int kiln_store_incumbent_set(kiln_store *s, int64_t problem_id, int64_t candidate_id,
                             kiln_err *err) {
    int rc = writable(s, "incumbent", err);
    if (rc)
        return rc;
    sqlite3_stmt *st = NULL;
    if ((rc = stmt_get(s, ST_INCUMBENT_SET, &st, err)))
        return rc;
    sqlite3_bind_int64(st, 1, problem_id);
    sqlite3_bind_int64(st, 2, candidate_id);
    if ((rc = step_done(s, st, "incumbent", err)))
        return rc;
    if (sqlite3_changes(s->db) != 1)
        return kiln_errf(err, KILN_ERR_INVALID,
                         "%s: incumbent: candidate %" PRId64
                         " is not a candidate of problem %" PRId64,
                         s->path, candidate_id, problem_id);
    return KILN_OK;
}

/* ---- reading a gate result ---- */

static double number_at(const cJSON *obj, const char *key, double dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

void kiln_store_result_columns(const char *result_json, double *time_us, double *spread_pct,
                               double *sol_pct, double *score) {
    double t = -1, sp = -1, sol = -1, sc = 0;
    cJSON *j = result_json ? cJSON_Parse(result_json) : NULL;
    if (cJSON_IsObject(j)) {
        const cJSON *sum = cJSON_GetObjectItemCaseSensitive(j, "summary");
        t = number_at(sum, "time_us_geomean", -1);
        sol = number_at(sum, "sol_pct_geomean", -1);
        sc = number_at(sum, "sol_score_geomean", 0);
        const cJSON *w;
        cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(j, "workloads")) {
            double x = number_at(cJSON_GetObjectItemCaseSensitive(w, "time_us"), "spread_pct", -1);
            if (x > sp)
                sp = x;
        }
    }
    cJSON_Delete(j);
    if (time_us)
        *time_us = t;
    if (spread_pct)
        *spread_pct = sp;
    if (sol_pct)
        *sol_pct = sol;
    if (score)
        *score = sc;
}
