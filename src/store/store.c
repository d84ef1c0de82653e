/* store.c: opening and closing the run's SQLite store (RUN/kiln.db), and the run lock
 * (RUN/kiln.lock); docs/store.md describes the schema (schema.c) and the queries (write.c, read.c,
 * dash.c, written with sql.c's helpers).
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
#include "store_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- opening ---- */

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
        rc = store_fail(s, r, "opening", err);
        goto fail;
    }
    sqlite3_extended_result_codes(s->db, 1);
    sqlite3_busy_timeout(s->db, STORE_BUSY_TIMEOUT_MS);
    if ((rc = store_exec(s, "PRAGMA foreign_keys = ON", "enabling foreign keys", err)))
        goto fail;
    /* A reader reads through a memory map: no read() per page, a third of a dashboard request's
     * time on a big store (nothing of kiln ever shrinks the file, which a map would not survive).
     */
    if (read_only)
        sqlite3_exec(s->db, "PRAGMA mmap_size = 268435456", NULL, NULL, NULL); /* best effort */
    if (!read_only) {
        char mode[32];
        /* Several processes may create the store at once. Switching the journal mode escalates a
         * shared lock to an exclusive one, and SQLite answers SQLITE_BUSY at once, without its busy
         * handler, when two connections try that together (it would deadlock otherwise): retry. */
        for (int attempt = 0;; attempt++) {
            rc = store_query_text(s, "PRAGMA journal_mode", mode, sizeof mode,
                                  "reading the journal mode", err);
            if (!rc && strcmp(mode, "wal") != 0)
                rc = store_query_text(s, "PRAGMA journal_mode = WAL", mode, sizeof mode,
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
            rc = store_exec(s, "PRAGMA synchronous = NORMAL", "setting synchronous", err);
        if (rc)
            goto fail;
    }
    if ((rc = store_schema_open(s, err)))
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
        for (int i = 0; i < s->n_stmts; i++)
            sqlite3_finalize(s->stmts[i].st);
        sqlite3_close_v2(s->db);
    }
    /* else: inherited through fork; the parent's connection is left alone (and leaked here). */
    free(s->path);
    free(s);
}

const char *kiln_store_path(const kiln_store *s) {
    return s->path;
}

int kiln_store_threads_ok(void) {
    return sqlite3_threadsafe() != 0;
}

int kiln_store_version(const kiln_store *s) {
    return s->version;
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
