/* schema.c: the store's schema (docs/store.md), created in an empty database, checked in an
 * existing one, and migrated from older versions.
 *
 * Versions
 * --------
 * A store says its version in meta.schema_version. A new store is made the way every old one gets
 * there: the schema of version 1, then each migration in order, in one transaction; so a store
 * created today and one created by the first kiln and migrated since are the same schema, and every
 * new store runs the migrations that an old one would. A migration is SQL that takes a store from
 * version k to k + 1 and that finds a store where it could have run partly before (CREATE ... IF
 * NOT EXISTS): version 2 adopts llm_exchange, which kiln's llm agent used to create on its own,
 * outside the versioned schema, in the stores where it ran. The version is read again inside the
 * write transaction, so two processes that open an old store at once migrate it once. A read-only
 * handle (the dashboard) never writes: it reads an older store as it is, and what the older
 * version lacks reads as nothing. A store of a newer version is refused: this kiln cannot know
 * what its newer columns mean. */
#include "store_impl.h"

#include <string.h>

/* Version 1, as the first kiln created it. Never changed: a change is a migration below. */
static const char schema_v1[] =
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

/* migrations[k - 1] takes a store from version k to k + 1. */
static const char *const migrations[KILN_STORE_SCHEMA_VERSION - 1] = {
    /* 2: the llm agent's exchanges join the schema (a store where the agent ran has the table
     * already, created by the agent itself with these columns), and latest_result finds a
     * candidate's latest result through the candidate's index instead of grouping every result. */
    "CREATE TABLE IF NOT EXISTS llm_exchange (\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  problem_id INTEGER REFERENCES problem(id),\n"
    "  parent_id INTEGER REFERENCES candidate(id),\n"
    "  candidate_id INTEGER REFERENCES candidate(id),\n"
    "  model TEXT NOT NULL,\n"
    "  request_json TEXT NOT NULL,\n"
    "  reply_text TEXT,\n"
    "  status TEXT NOT NULL,\n"
    "  reason TEXT NOT NULL DEFAULT '',\n"
    "  http_status INTEGER,\n"
    "  attempts INTEGER NOT NULL DEFAULT 0,\n"
    "  prompt_tokens INTEGER,\n"
    "  completion_tokens INTEGER,\n"
    "  tokens INTEGER NOT NULL DEFAULT 0,\n"
    "  latency_ms REAL,\n"
    "  created_unix_s REAL NOT NULL\n"
    ");\n"
    "CREATE INDEX IF NOT EXISTS llm_exchange_candidate ON llm_exchange(candidate_id);\n"
    "CREATE INDEX IF NOT EXISTS llm_exchange_parent ON llm_exchange(problem_id, parent_id, id);\n"
    "DROP VIEW IF EXISTS latest_result;\n"
    "CREATE VIEW latest_result AS\n"
    "  SELECT r.* FROM result r\n"
    "  WHERE r.id = (SELECT max(x.id) FROM result x WHERE x.candidate_id = r.candidate_id);\n",
    /* 3: a problem is its content: the hash capture gave its files (NULL for the rows of older
     * stores, and for problems written by hand); results are never carried to another content. */
    "ALTER TABLE problem ADD COLUMN content_hash TEXT;\n",
};

static const char sql_has_meta[] =
    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'";
static const char sql_version[] = "SELECT value FROM meta WHERE key = 'schema_version'";

/* The version in meta (0 when the row is missing or not a positive number; text gets it). */
static int read_version(kiln_store *s, long *version, char *text, size_t cap, kiln_err *err) {
    int rc = store_query_text(s, sql_version, text, cap, "reading the schema version", err);
    if (rc)
        return rc;
    char *end = NULL;
    long v = strtol(text, &end, 10);
    *version = text[0] && !*end && v >= 1 ? v : 0;
    return KILN_OK;
}

/* Under the write transaction: takes the store from version `from` to the current one. */
static int migrate(kiln_store *s, long from, kiln_err *err) {
    for (long v = from; v < KILN_STORE_SCHEMA_VERSION; v++) {
        char what[64];
        snprintf(what, sizeof what, "migrating the schema to version %ld", v + 1);
        int rc = store_exec(s, migrations[v - 1], what, err);
        if (rc)
            return rc;
    }
    char *sql = xasprintf("UPDATE meta SET value = '%d' WHERE key = 'schema_version'",
                          KILN_STORE_SCHEMA_VERSION);
    int rc = store_exec(s, sql, "recording the schema version", err);
    free(sql);
    return rc;
}

/* Creates the schema in an empty database (another process may be doing the same: the second
 * finds the first's). */
static int create(kiln_store *s, kiln_err *err) {
    int rc = store_begin(s, err);
    if (rc)
        return rc;
    char has_meta[8];
    rc = store_query_text(s, sql_has_meta, has_meta, sizeof has_meta, "reading the schema", err);
    if (!rc && !has_meta[0]) {
        rc = store_exec(s, schema_v1, "creating the schema", err);
        if (!rc) {
            char *sql = xasprintf("INSERT INTO meta (key, value) VALUES "
                                  "('schema_version', '1'), ('created_unix_s', '%.3f')",
                                  store_now_unix_s());
            rc = store_exec(s, sql, "creating the schema", err);
            free(sql);
        }
        if (!rc)
            rc = migrate(s, 1, err);
    }
    return store_finish(s, rc, err);
}

int store_schema_open(kiln_store *s, kiln_err *err) {
    char v[64];
    int rc = store_query_text(s, "SELECT count(*) FROM sqlite_master", v, sizeof v,
                              "reading the schema", err);
    if (rc)
        return rc;
    char has_meta[8];
    rc = store_query_text(s, sql_has_meta, has_meta, sizeof has_meta, "reading the schema", err);
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
        if ((rc = create(s, err)))
            return rc;
    }
    long version = 0;
    if ((rc = read_version(s, &version, v, sizeof v, err)))
        return rc;
    if (!version)
        return kiln_errf(err, KILN_ERR_FORMAT,
                         "%s is not a kiln store (no valid schema_version in its meta table: '%s')",
                         s->path, v);
    if (version > KILN_STORE_SCHEMA_VERSION)
        return kiln_errf(
            err, KILN_ERR_FORMAT,
            "%s was written by a newer kiln (store schema version %ld; this kiln reads "
            "up to %d): use that kiln, or start a new run",
            s->path, version, KILN_STORE_SCHEMA_VERSION);
    if (version < KILN_STORE_SCHEMA_VERSION && !s->read_only) {
        if ((rc = store_begin(s, err)))
            return rc;
        rc = read_version(s, &version, v, sizeof v, err);
        if (!rc && version < KILN_STORE_SCHEMA_VERSION)
            rc = migrate(s, version, err);
        if ((rc = store_finish(s, rc, err)))
            return rc;
        version = KILN_STORE_SCHEMA_VERSION;
    }
    s->version = (int)version;
    return KILN_OK;
}
