/* test_store_queries.c: the store's migration and its queries: a store of schema version 1, made
 * here with raw SQL as the first kiln made it (with and without the llm_exchange table the old llm
 * agent created on its own), read as it is by a read-only handle and migrated, data kept, by a
 * read-write one; the winner rule; and every read the search, the library, submit, the llm agent
 * and the dashboard make, on a small store whose answers are known. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/store.h"

/* ---- helpers ---- */

static char *make_run_dir(void) {
    char tmpl[] = "/tmp/kiln_test_store_q_XXXXXX";
    char *dir = mkdtemp(tmpl);
    assert_non_null(dir);
    return xstrdup(dir);
}

static void remove_run_dir(char *dir) {
    char *cmd = xasprintf("rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    free(cmd);
    free(dir);
}

static kiln_store *open_store(const char *dir, int read_only) {
    kiln_store *s = NULL;
    kiln_err err = {{0}};
    int rc = kiln_store_open(dir, read_only, &s, &err);
    if (rc)
        fail_msg("kiln_store_open(%s): %s", dir, err.msg);
    return s;
}

/* Raw SQL on the file, on a connection of the test's own. */
static void raw_exec(const char *dir, const char *sql) {
    char *path = kiln_path_join(dir, "kiln.db");
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
        fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    sqlite3_close(db);
    free(path);
}

static char *raw_text(const char *dir, const char *sql) {
    char *path = kiln_path_join(dir, "kiln.db");
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    char *v = NULL;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
        v = xstrdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db);
    free(path);
    return v;
}

static int64_t add_problem(kiln_store *s, const char *name, double share, double eager_us) {
    kiln_store_problem p = {.name = name,
                            .dir = "/problems/x",
                            .share = share,
                            .eager_us = eager_us,
                            .compile_us = -1,
                            .sol_us = -1};
    int64_t id = 0;
    kiln_err err = {{0}};
    if (kiln_store_problem_upsert(s, &p, &id, &err))
        fail_msg("%s", err.msg);
    return id;
}

static int64_t add_node(kiln_store *s, int64_t problem, int64_t parent, const char *family) {
    kiln_store_node n = {.problem_id = problem,
                         .parent_id = parent,
                         .family = family,
                         .params = "",
                         .status = "open"};
    kiln_err err = {{0}};
    if (kiln_store_node_insert(s, &n, &err))
        fail_msg("%s", err.msg);
    return n.id;
}

static int64_t add_candidate(kiln_store *s, int64_t problem, int64_t parent, int64_t node,
                             const char *agent, uint64_t binary, const char *source) {
    kiln_store_candidate c = {.problem_id = problem,
                              .parent_id = parent,
                              .node_id = node,
                              .agent = agent,
                              .family = "softmax",
                              .params = "T=1",
                              .source = source,
                              .source_hash = binary + 1000,
                              .binary_hash = binary,
                              .compile_log = binary == 0 ? "error: nope" : NULL};
    int64_t id = 0;
    kiln_err err = {{0}};
    if (kiln_store_candidate_insert(s, &c, &id, &err))
        fail_msg("%s", err.msg);
    return id;
}

/* A gate result: ok with a time and a score, or a failure with evidence. */
static void add_result(kiln_store *s, int64_t cand, const char *outcome, double time_us) {
    int ok = strcmp(outcome, "ok") == 0;
    char *json =
        ok ? xasprintf("{\"outcome\":\"ok\",\"device\":{\"name\":\"Dev%lld\",\"ceiling_gbps\":"
                       "100},\"workloads\":[{\"index\":0,\"min_bytes\":4000,\"flops\":1000,"
                       "\"ref_time_us\":20,\"time_us\":{\"median\":%g,\"spread_pct\":3}}],"
                       "\"summary\":{\"time_us_geomean\":%g,\"sol_pct_geomean\":40,"
                       "\"sol_score_geomean\":0.6}}",
                       (long long)cand, time_us, time_us)
           : xasprintf("{\"outcome\":\"%s\",\"evidence\":{\"max_abs_err\":0.5,\"log\":\"line\"},"
                       "\"summary\":null}",
                       outcome);
    kiln_store_summary sum;
    kiln_store_summary_parse(json, &sum);
    kiln_err err = {{0}};
    if (kiln_store_result_insert(s, cand, outcome, json, ok ? sum.time_us : -1, sum.spread_pct,
                                 ok ? sum.sol_pct : -1, sum.score, &err))
        fail_msg("%s", err.msg);
    free(json);
}

static int64_t num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v))
        fail_msg("%s is not a number", key);
    return (int64_t)v->valuedouble;
}

static double dnum(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const char *str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* ---- migration ---- */

/* The schema of version 1 exactly as the first kiln wrote it (src/store/schema.c keeps it too, as
 * the start of every store; this copy is the file that exists on disk, whatever the code does). */
static const char v1_schema[] =
    "CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE problem (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, dir TEXT NOT NULL, "
    " share REAL, eager_us REAL, compile_us REAL, sol_us REAL, "
    " incumbent_id INTEGER REFERENCES candidate(id), created_unix_s REAL NOT NULL);"
    "CREATE TABLE candidate (id INTEGER PRIMARY KEY, "
    " problem_id INTEGER NOT NULL REFERENCES problem(id), "
    " parent_id INTEGER REFERENCES candidate(id), node_id INTEGER, agent TEXT NOT NULL, "
    " family TEXT, params TEXT NOT NULL DEFAULT '', "
    " draft INTEGER NOT NULL DEFAULT 0 CHECK (draft >= 0), source TEXT NOT NULL, "
    " source_hash TEXT NOT NULL, binary_hash TEXT, compile_log TEXT, "
    " created_unix_s REAL NOT NULL);"
    "CREATE UNIQUE INDEX candidate_binary ON candidate(problem_id, binary_hash);"
    "CREATE INDEX candidate_source ON candidate(problem_id, source_hash);"
    "CREATE INDEX candidate_parent ON candidate(parent_id);"
    "CREATE INDEX candidate_node ON candidate(node_id);"
    "CREATE TABLE result (id INTEGER PRIMARY KEY, "
    " candidate_id INTEGER NOT NULL REFERENCES candidate(id), "
    " problem_id INTEGER NOT NULL REFERENCES problem(id), outcome TEXT NOT NULL, time_us REAL, "
    " spread_pct REAL, sol_pct REAL, score REAL NOT NULL DEFAULT 0, result_json TEXT, "
    " created_unix_s REAL NOT NULL);"
    "CREATE INDEX result_candidate ON result(candidate_id, id);"
    "CREATE INDEX result_problem ON result(problem_id, id);"
    "CREATE INDEX result_outcome ON result(outcome, problem_id);"
    "CREATE TABLE node (id INTEGER PRIMARY KEY, problem_id INTEGER NOT NULL REFERENCES "
    "problem(id), "
    " parent_id INTEGER REFERENCES node(id), candidate_id INTEGER REFERENCES candidate(id), "
    " draft INTEGER NOT NULL DEFAULT 0 CHECK (draft >= 0), family TEXT, "
    " params TEXT NOT NULL DEFAULT '', visits INTEGER NOT NULL DEFAULT 0, "
    " value_sum REAL NOT NULL DEFAULT 0, best REAL NOT NULL DEFAULT 0, status TEXT NOT NULL, "
    " created_unix_s REAL NOT NULL, updated_unix_s REAL NOT NULL);"
    "CREATE INDEX node_problem ON node(problem_id, parent_id);"
    "CREATE INDEX node_parent ON node(parent_id);"
    "CREATE TABLE event (id INTEGER PRIMARY KEY, problem_id INTEGER REFERENCES problem(id), "
    " kind TEXT NOT NULL, message TEXT NOT NULL DEFAULT '', created_unix_s REAL NOT NULL);"
    "CREATE INDEX event_problem ON event(problem_id, id);"
    "CREATE VIEW latest_result AS SELECT * FROM result WHERE id IN "
    " (SELECT MAX(id) FROM result GROUP BY candidate_id);"
    "PRAGMA journal_mode = WAL;"
    "INSERT INTO meta VALUES ('schema_version', '1'), ('created_unix_s', '1700000000.000'), "
    " ('backend', 'cpu');"
    "INSERT INTO problem VALUES (1, 'softmax_f32', '/p/softmax', 0.5, 12.5, NULL, NULL, 2, 1.7e9);"
    "INSERT INTO node VALUES (1, 1, NULL, NULL, 0, NULL, '', 3, 1.2, 0.6, 'open', 1.7e9, 1.7e9);"
    "INSERT INTO candidate VALUES (1, 1, NULL, 1, 'geometry', 'softmax', 'T=1', 0, 'int a;', "
    " '00000000000000aa', '00000000000000ab', NULL, 1.7e9);"
    "INSERT INTO candidate VALUES (2, 1, 1, 1, 'vector', 'softmax', 'T=2', 0, 'int b;', "
    " '00000000000000ba', '00000000000000bb', NULL, 1.7e9);"
    "INSERT INTO result VALUES (1, 1, 1, 'ok', 9.0, 2.0, 30.0, 0.55, "
    " '{\"outcome\":\"ok\",\"summary\":{\"time_us_geomean\":9,\"sol_score_geomean\":0.55}}', "
    "1.7e9);"
    "INSERT INTO result VALUES (2, 2, 1, 'ok', 7.0, 2.0, 35.0, 0.6, "
    " '{\"outcome\":\"ok\",\"summary\":{\"time_us_geomean\":7,\"sol_score_geomean\":0.6}}', 1.7e9);"
    "INSERT INTO result VALUES (3, 2, 1, 'ok', 6.5, 1.0, 36.0, 0.61, "
    " '{\"outcome\":\"ok\",\"summary\":{\"time_us_geomean\":6.5,\"sol_score_geomean\":0.61}}', "
    " 1.7e9);"
    "INSERT INTO event VALUES (1, NULL, 'start', 'kiln optimize: 1 problem', 1.7e9);";

/* The table the old llm agent created on its own (CREATE TABLE IF NOT EXISTS), with one row. */
static const char v1_llm_exchange[] =
    "CREATE TABLE llm_exchange (id INTEGER PRIMARY KEY, problem_id INTEGER REFERENCES problem(id), "
    " parent_id INTEGER REFERENCES candidate(id), candidate_id INTEGER REFERENCES candidate(id), "
    " model TEXT NOT NULL, request_json TEXT NOT NULL, reply_text TEXT, status TEXT NOT NULL, "
    " reason TEXT NOT NULL DEFAULT '', http_status INTEGER, attempts INTEGER NOT NULL DEFAULT 0, "
    " prompt_tokens INTEGER, completion_tokens INTEGER, tokens INTEGER NOT NULL DEFAULT 0, "
    " latency_ms REAL, created_unix_s REAL NOT NULL);"
    "CREATE INDEX llm_exchange_candidate ON llm_exchange(candidate_id);"
    "CREATE INDEX llm_exchange_parent ON llm_exchange(problem_id, parent_id, id);"
    "INSERT INTO llm_exchange (problem_id, parent_id, candidate_id, model, request_json, "
    " reply_text, status, tokens, created_unix_s) VALUES (1, 1, 2, 'm', '{}', 'here', 'kernel', "
    " 321, 1.7e9);";

static void check_v1_data(kiln_store *s) {
    kiln_err err = {{0}};
    kiln_store_problem_row p;
    int found = 0;
    assert_int_equal(kiln_store_problem_find(s, "softmax_f32", &p, &found, &err), KILN_OK);
    assert_true(found);
    assert_int_equal(p.id, 1);
    assert_string_equal(p.dir, "/p/softmax");
    assert_true(p.eager_us == 12.5 && p.compile_us == -1 && p.incumbent_id == 2);
    kiln_store_problem_row_free(&p);
    kiln_store_candidate_row c;
    assert_int_equal(kiln_store_candidate_get(s, 2, &c, &found, &err), KILN_OK);
    assert_true(found);
    assert_string_equal(c.source, "int b;");
    assert_true(c.parent_id == 1 && c.binary_hash == 0xbb && c.source_hash == 0xba);
    kiln_store_candidate_row_free(&c);
    /* a re-timed candidate's verdict is its latest result */
    kiln_store_result_row r;
    assert_int_equal(kiln_store_result_latest(s, 2, &r, &found, &err), KILN_OK);
    assert_true(found && r.id == 3 && r.time_us == 6.5 && r.sol_pct == 36.0);
    kiln_store_result_row_free(&r);
    kiln_store_winner w;
    assert_int_equal(kiln_store_winner_get(s, 1, &w, &err), KILN_OK);
    assert_true(w.candidate_id == 2 && w.result_id == 3 && w.time_us == 6.5);
    kiln_store_heads h;
    assert_int_equal(kiln_store_heads_read(s, &h, &err), KILN_OK);
    assert_true(h.candidate == 2 && h.result == 3 && h.event == 1);
}

static void migrate_one(int with_llm_table) {
    char *dir = make_run_dir();
    raw_exec(dir, v1_schema);
    if (with_llm_table)
        raw_exec(dir, v1_llm_exchange);

    /* a reader reads the old store as it is and changes nothing */
    kiln_store *s = open_store(dir, 1);
    assert_int_equal(kiln_store_version(s), 1);
    check_v1_data(s);
    cJSON *llm = cJSON_CreateArray();
    kiln_err err = {{0}};
    assert_int_equal(kiln_store_dash_llm_exchanges(s, 2, 100, llm, &err), KILN_OK);
    assert_int_equal(cJSON_GetArraySize(llm), 0);
    cJSON_Delete(llm);
    kiln_store_close(s);
    char *v = raw_text(dir, "SELECT value FROM meta WHERE key = 'schema_version'");
    assert_string_equal(v, "1");
    free(v);

    /* a writer migrates it, keeping every row */
    s = open_store(dir, 0);
    assert_int_equal(kiln_store_version(s), KILN_STORE_SCHEMA_VERSION);
    v = kiln_store_meta_get(s, "schema_version");
    assert_int_equal(atoi(v), KILN_STORE_SCHEMA_VERSION);
    free(v);
    v = kiln_store_meta_get(s, "created_unix_s");
    assert_string_equal(v, "1700000000.000");
    free(v);
    check_v1_data(s);
    int64_t tokens = -1;
    assert_int_equal(kiln_store_llm_tokens(s, &tokens, &err), KILN_OK);
    assert_int_equal(tokens, with_llm_table ? 321 : 0);
    kiln_store_llm_exchange x = {.problem_id = 1,
                                 .parent_id = 2,
                                 .model = "m",
                                 .request_json = "{\"messages\":[]}",
                                 .status = "no_kernel",
                                 .reason = "prose",
                                 .prompt_tokens = -1,
                                 .completion_tokens = -1,
                                 .tokens = 9};
    int64_t xid = 0;
    assert_int_equal(kiln_store_llm_exchange_insert(s, &x, &xid, &err), KILN_OK);
    assert_int_equal(xid, with_llm_table ? 2 : 1);
    assert_int_equal(kiln_store_llm_tokens(s, &tokens, &err), KILN_OK);
    assert_int_equal(tokens, with_llm_table ? 330 : 9);
    llm = cJSON_CreateArray();
    assert_int_equal(kiln_store_dash_llm_exchanges(s, 2, 100, llm, &err), KILN_OK);
    /* candidate 2 was made by the old exchange and asked about by the new one */
    assert_int_equal(cJSON_GetArraySize(llm), with_llm_table ? 2 : 1);
    assert_string_equal(str(cJSON_GetArrayItem(llm, 0), "role"), with_llm_table ? "made" : "asked");
    cJSON_Delete(llm);
    /* the view now finds a candidate's latest result through its index */
    v = raw_text(dir, "SELECT sql FROM sqlite_master WHERE name = 'latest_result'");
    assert_non_null(strstr(v, "max(x.id)"));
    free(v);
    kiln_store_close(s);

    /* migrated once: a second open finds version 2 and leaves the file alone */
    s = open_store(dir, 0);
    assert_int_equal(kiln_store_version(s), KILN_STORE_SCHEMA_VERSION);
    kiln_store_close(s);
    v = raw_text(dir, "SELECT count(*) FROM llm_exchange");
    assert_string_equal(v, with_llm_table ? "2" : "1");
    free(v);
    remove_run_dir(dir);
}

static void test_v1_store_is_migrated_on_open(void **state) {
    (void)state;
    migrate_one(0);
}

static void test_v1_store_with_the_old_llm_table_is_migrated(void **state) {
    (void)state;
    migrate_one(1);
}

/* ---- the winner ---- */

static void test_winner_rule(void **state) {
    (void)state;
    char *dir = make_run_dir();
    kiln_store *s = open_store(dir, 0);
    kiln_err err = {{0}};
    int64_t p = add_problem(s, "p", 0.5, 10), q = add_problem(s, "q", -1, -1);
    kiln_store_winner w;
    assert_int_equal(kiln_store_winner_get(s, p, &w, &err), KILN_OK);
    assert_true(w.candidate_id == 0 && w.incumbent_id == 0); /* nothing yet */

    int64_t a = add_candidate(s, p, 0, 0, "geometry", 1, "a");
    int64_t b = add_candidate(s, p, 0, 0, "geometry", 2, "b");
    int64_t c = add_candidate(s, p, 0, 0, "geometry", 3, "c");
    int64_t d = add_candidate(s, p, 0, 0, "geometry", 4, "d");
    int64_t e = add_candidate(s, p, 0, 0, "geometry", 5, "e");
    add_result(s, a, "ok", 5);
    add_result(s, b, "ok", 3);
    add_result(s, b, "ok", 6); /* b re-timed: its verdict is 6 us, the 3 us no longer counts */
    add_result(s, c, "mismatch", -1);
    add_result(s, d, "ok", 4);
    add_result(s, e, "ok", 4); /* a tie with d: the lower id wins */
    int64_t qa = add_candidate(s, q, 0, 0, "geometry", 1, "qa");
    add_result(s, qa, "ok", 1); /* another problem's faster kernel is not p's */

    assert_int_equal(kiln_store_winner_get(s, p, &w, &err), KILN_OK);
    assert_true(w.candidate_id == d && w.time_us == 4 && w.incumbent_id == 0);
    kiln_store_result_row r;
    int found = 0;
    assert_int_equal(kiln_store_result_get(s, w.result_id, &r, &found, &err), KILN_OK);
    assert_true(found && r.candidate_id == d && r.time_us == 4);
    kiln_store_result_row_free(&r);
    /* the incumbent wins while its verdict is ok, slower or not */
    assert_int_equal(kiln_store_incumbent_set(s, p, a, &err), KILN_OK);
    assert_int_equal(kiln_store_winner_get(s, p, &w, &err), KILN_OK);
    assert_true(w.candidate_id == a && w.time_us == 5 && w.incumbent_id == a);
    /* an incumbent whose verdict is no longer ok gives way to the fastest ok */
    add_result(s, a, "crashed", -1);
    assert_int_equal(kiln_store_winner_get(s, p, &w, &err), KILN_OK);
    assert_true(w.candidate_id == d && w.incumbent_id == a);
    assert_int_equal(kiln_store_winner_get(s, q, &w, &err), KILN_OK);
    assert_true(w.candidate_id == qa && w.time_us == 1);
    kiln_store_close(s);
    remove_run_dir(dir);
}

/* ---- reads for the search, the library, submit ---- */

static void test_rows_read_back(void **state) {
    (void)state;
    char *dir = make_run_dir();
    kiln_store *s = open_store(dir, 0);
    kiln_err err = {{0}};
    int64_t p = add_problem(s, "p", 0.5, -1), q = add_problem(s, "q", 0.2, 3);
    int found = -1;

    kiln_store_problem_row pr;
    assert_int_equal(kiln_store_problem_find(s, "nope", &pr, &found, &err), KILN_OK);
    assert_false(found);
    assert_int_equal(kiln_store_problem_get(s, p, &pr, &found, &err), KILN_OK);
    assert_true(found && pr.eager_us == -1 && pr.share == 0.5);
    assert_string_equal(pr.name, "p");
    kiln_store_problem_row_free(&pr);
    /* the eager time is set when unknown, and kept when known */
    assert_int_equal(kiln_store_problem_eager_default(s, p, 7.5, &err), KILN_OK);
    assert_int_equal(kiln_store_problem_eager_default(s, q, 99, &err), KILN_OK);
    kiln_store_problem_row *ps = NULL;
    int n = 0;
    assert_int_equal(kiln_store_problem_list(s, &ps, &n, &err), KILN_OK);
    assert_int_equal(n, 2);
    assert_true(ps[0].id == p && ps[0].eager_us == 7.5 && ps[1].id == q && ps[1].eager_us == 3);
    for (int i = 0; i < n; i++)
        kiln_store_problem_row_free(&ps[i]);
    free(ps);

    int64_t root = add_node(s, p, 0, NULL);
    int64_t fam_root = add_node(s, p, 0, "softmax"); /* not the main root: it has a family */
    int64_t child = add_node(s, p, root, "softmax");
    int64_t id = 0;
    assert_int_equal(kiln_store_node_root(s, p, &id, &err), KILN_OK);
    assert_int_equal(id, root);
    assert_int_equal(kiln_store_node_root(s, q, &id, &err), KILN_OK);
    assert_int_equal(id, 0);
    kiln_store_node_row *nodes = NULL;
    assert_int_equal(kiln_store_node_list(s, p, &nodes, &n, &err), KILN_OK);
    assert_int_equal(n, 3);
    assert_true(nodes[0].id == root && nodes[0].family == NULL && nodes[1].id == fam_root &&
                nodes[2].parent_id == root);
    assert_string_equal(nodes[2].family, "softmax");
    for (int i = 0; i < n; i++)
        kiln_store_node_row_free(&nodes[i]);
    free(nodes);

    int64_t a = add_candidate(s, p, 0, child, "geometry", 0xab, "// a");
    int64_t b = add_candidate(s, p, a, 4242, "llm", 0, "// b"); /* a node not in the store */
    kiln_store_candidate_row c;
    assert_int_equal(kiln_store_candidate_get(s, b, &c, &found, &err), KILN_OK);
    assert_true(found && c.parent_id == a && c.node_id == 4242 && c.binary_hash == 0 &&
                c.source_hash == 1000);
    assert_string_equal(c.agent, "llm");
    assert_string_equal(c.compile_log, "error: nope");
    kiln_store_candidate_row_free(&c);
    assert_int_equal(kiln_store_candidate_get(s, 999, &c, &found, &err), KILN_OK);
    assert_false(found);
    assert_int_equal(kiln_store_candidate_by_binary(s, p, 0xab, &id, &err), KILN_OK);
    assert_int_equal(id, a);
    assert_int_equal(kiln_store_candidate_by_binary(s, q, 0xab, &id, &err), KILN_OK);
    assert_int_equal(id, 0);
    assert_int_equal(kiln_store_candidate_node(s, a, &id, &err), KILN_OK);
    assert_int_equal(id, child);
    assert_int_equal(kiln_store_candidate_node(s, b, &id, &err), KILN_OK);
    assert_int_equal(id, 0);

    /* verdicts: none yet, then the latest, with the score the gate's summary gave */
    kiln_store_verdict v;
    assert_int_equal(kiln_store_verdict_get(s, a, &v, &found, &err), KILN_OK);
    assert_false(found);
    add_result(s, a, "ok", 2.5);
    add_result(s, b, "compile_error", -1);
    assert_int_equal(kiln_store_verdict_get(s, a, &v, &found, &err), KILN_OK);
    assert_true(found && v.ok && v.time_us == 2.5 && v.sol_pct == 40 && v.score_known &&
                v.score == 0.6 && v.binary_hash == 0xab && v.node_id == child);
    kiln_store_verdict *vs = NULL;
    int64_t c3 = add_candidate(s, p, 0, 0, "random", 0x33, "// c3");
    assert_int_equal(kiln_store_verdict_list(s, p, &vs, &n, &err), KILN_OK);
    assert_int_equal(n, 3);
    assert_true(vs[0].candidate_id == a && vs[0].result_id > 0 && vs[0].ok);
    assert_true(vs[1].candidate_id == b && vs[1].result_id > 0 && !vs[1].ok && !vs[1].score_known &&
                vs[1].score == -1 && vs[1].time_us == -1);
    assert_true(vs[2].candidate_id == c3 && vs[2].result_id == 0); /* waits for the gate */
    free(vs);

    /* the device: the problem's own verdict first, else the newest anyone has */
    int64_t qa = add_candidate(s, q, 0, 0, "geometry", 0x44, "// qa");
    add_result(s, qa, "ok", 1);
    char *dev = NULL;
    assert_int_equal(kiln_store_latest_device(s, p, &dev, &err), KILN_OK);
    cJSON *d = cJSON_Parse(dev);
    char *want = xasprintf("Dev%lld", (long long)a);
    assert_string_equal(str(d, "name"), want);
    free(want);
    cJSON_Delete(d);
    free(dev);
    assert_int_equal(kiln_store_latest_device(s, 0, &dev, &err), KILN_OK);
    d = cJSON_Parse(dev);
    want = xasprintf("Dev%lld", (long long)qa);
    assert_string_equal(str(d, "name"), want);
    free(want);
    cJSON_Delete(d);
    free(dev);
    kiln_store_close(s);
    remove_run_dir(dir);
}

/* ---- the llm agent ---- */

static void test_llm_exchanges_and_failures(void **state) {
    (void)state;
    char *dir = make_run_dir();
    kiln_store *s = open_store(dir, 0);
    kiln_err err = {{0}};
    int64_t p = add_problem(s, "p", -1, -1);
    int64_t node = add_candidate(s, p, 0, 0, "llm", 1, "// node");
    add_result(s, node, "ok", 3);
    kiln_store_llm_exchange x = {.problem_id = p,
                                 .parent_id = node,
                                 .model = "m",
                                 .request_json = "{\"messages\":[1]}",
                                 .reply_text = "no code here",
                                 .status = "no_kernel",
                                 .reason = "no fenced code block",
                                 .http_status = 200,
                                 .attempts = 1,
                                 .prompt_tokens = 10,
                                 .completion_tokens = 5,
                                 .tokens = 15,
                                 .latency_ms = 12.5};
    int64_t x1 = 0, x2 = 0;
    assert_int_equal(kiln_store_llm_exchange_insert(s, &x, &x1, &err), KILN_OK);
    int64_t bad = add_candidate(s, p, node, 0, "llm", 2, "// bad child");
    add_result(s, bad, "mismatch", -1);
    int64_t good = add_candidate(s, p, node, 0, "llm", 3, "// good child");
    add_result(s, good, "ok", 2);
    int64_t other = add_candidate(s, p, 0, 0, "llm", 4, "// a child of the root");
    add_result(s, other, "crashed", -1);
    x.status = "kernel";
    x.reason = "a kernel";
    x.tokens = 20;
    x.prompt_tokens = x.completion_tokens = -1;
    assert_int_equal(kiln_store_llm_exchange_insert(s, &x, &x2, &err), KILN_OK);
    assert_int_equal(kiln_store_llm_exchange_link(s, x2, good, &err), KILN_OK);
    assert_int_equal(kiln_store_llm_exchange_link(s, 0, good, &err), KILN_OK); /* nothing */
    x.status = "";
    assert_int_equal(kiln_store_llm_exchange_insert(s, &x, &x2, &err), KILN_ERR_INVALID);
    int64_t tokens = 0;
    assert_int_equal(kiln_store_llm_tokens(s, &tokens, &err), KILN_OK);
    assert_int_equal(tokens, 35);

    /* below the node: the failed child (newest first), then the reply without a kernel; the good
     * child and the root's child are not feedback for it */
    kiln_store_failure *fs = NULL;
    int n = 0;
    assert_int_equal(kiln_store_llm_failures(s, p, node, 6, &fs, &n, &err), KILN_OK);
    assert_int_equal(n, 2);
    assert_int_equal(fs[0].candidate_id, bad);
    assert_string_equal(fs[0].outcome, "mismatch");
    assert_string_equal(fs[0].source, "// bad child");
    assert_non_null(strstr(fs[0].result_json, "max_abs_err"));
    assert_int_equal(fs[1].candidate_id, 0);
    assert_string_equal(fs[1].outcome, "no_kernel");
    assert_string_equal(fs[1].reason, "no fenced code block");
    for (int i = 0; i < n; i++)
        kiln_store_failure_free(&fs[i]);
    free(fs);
    assert_int_equal(kiln_store_llm_failures(s, p, node, 1, &fs, &n, &err), KILN_OK);
    assert_int_equal(n, 1);
    kiln_store_failure_free(&fs[0]);
    free(fs);
    assert_int_equal(kiln_store_llm_failures(s, p, 0, 6, &fs, &n, &err), KILN_OK);
    assert_int_equal(n, 1);
    assert_int_equal(fs[0].candidate_id, other);
    kiln_store_failure_free(&fs[0]);
    free(fs);

    /* the candidate page's exchanges: the one that made it, and those asked about it */
    cJSON *list = cJSON_CreateArray();
    assert_int_equal(kiln_store_dash_llm_exchanges(s, good, 5, list, &err), KILN_OK);
    assert_int_equal(cJSON_GetArraySize(list), 1);
    cJSON *e = cJSON_GetArrayItem(list, 0);
    assert_string_equal(str(e, "role"), "made");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(e, "request"))); /* longer than 5 characters */
    assert_string_equal(str(e, "reply"), "no co");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(e, "truncated")));
    cJSON_Delete(list);
    list = cJSON_CreateArray();
    assert_int_equal(kiln_store_dash_llm_exchanges(s, node, 1000, list, &err), KILN_OK);
    assert_int_equal(cJSON_GetArraySize(list), 1); /* the reply without a kernel, asked about it */
    e = cJSON_GetArrayItem(list, 0);
    assert_string_equal(str(e, "role"), "asked");
    assert_int_equal(num(e, "tokens"), 15);
    assert_int_equal(num(e, "http_status"), 200);
    assert_true(cJSON_IsArray(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "request"), "messages")));
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(e, "truncated")));
    cJSON_Delete(list);
    kiln_store_close(s);
    remove_run_dir(dir);
}

/* ---- reads for the dashboard ---- */

typedef struct {
    char *dir;
    int64_t p, q;         /* p is hot (share 0.6), q cold (0.1) */
    int64_t root, n1, n2; /* p's tree */
    int64_t a, b, c, w;   /* p: a ok 5 us, b mismatch, c ok 3 us (child of a), w waiting */
} dash_run;

static kiln_store *make_dash_run(dash_run *r) {
    r->dir = make_run_dir();
    kiln_store *s = open_store(r->dir, 0);
    kiln_err err = {{0}};
    assert_int_equal(kiln_store_meta_set(s, KILN_META_STARTED, "1700000000", &err), KILN_OK);
    assert_int_equal(kiln_store_meta_set(s, "budget", "40", &err), KILN_OK);
    r->p = add_problem(s, "p", 0.6, 10);
    r->q = add_problem(s, "q", 0.1, -1);
    r->root = add_node(s, r->p, 0, NULL);
    r->n1 = add_node(s, r->p, r->root, "softmax");
    r->n2 = add_node(s, r->p, r->n1, "softmax");
    r->a = add_candidate(s, r->p, 0, r->n1, "geometry", 1, "// a");
    r->b = add_candidate(s, r->p, 0, 0, "vector", 2, "// b");
    r->c = add_candidate(s, r->p, r->a, r->n2, "llm", 3, "// c");
    r->w = add_candidate(s, r->p, 0, 0, "random", 4, "// w");
    add_result(s, r->a, "ok", 5);
    add_result(s, r->b, "mismatch", -1);
    add_result(s, r->c, "ok", 3);
    kiln_store_node n = {.id = r->n2,
                         .problem_id = r->p,
                         .candidate_id = r->c,
                         .family = "softmax",
                         .params = "T=1",
                         .visits = 4,
                         .value_sum = 2.0,
                         .best = 0.6,
                         .status = "done"};
    assert_int_equal(kiln_store_node_update(s, &n, &err), KILN_OK);
    assert_int_equal(kiln_store_event(s, r->p, "incumbent", "c", &err), KILN_OK);
    assert_int_equal(kiln_store_event(s, 0, "tick", "1", &err), KILN_OK);
    assert_int_equal(kiln_store_event(s, 0, "tick", "2", &err), KILN_OK);
    kiln_store_close(s);
    return open_store(r->dir, 1); /* the dashboard's handle */
}

static void test_dashboard_run_and_problems(void **state) {
    (void)state;
    dash_run r;
    kiln_store *s = make_dash_run(&r);
    kiln_err err = {{0}};

    kiln_store_heads h;
    assert_int_equal(kiln_store_heads_read(s, &h, &err), KILN_OK);
    assert_true(h.candidate == r.w && h.result == 3 && h.event == 3 && h.node_unix_s > 1.6e9);
    int64_t version = 0, again = 0;
    assert_int_equal(kiln_store_data_version(s, &version, &err), KILN_OK);
    assert_int_equal(kiln_store_data_version(s, &again, &err), KILN_OK);
    assert_int_equal(again, version); /* nothing happened */
    kiln_store *wr = open_store(r.dir, 0);
    assert_int_equal(kiln_store_event(wr, 0, "done", "over", &err), KILN_OK);
    kiln_store_close(wr);
    assert_int_equal(kiln_store_data_version(s, &again, &err), KILN_OK);
    assert_int_not_equal(again, version); /* another connection committed */

    kiln_store_run_state rs;
    assert_int_equal(kiln_store_run_state_read(s, &rs, &err), KILN_OK);
    assert_true(rs.started_unix_s == 1700000000 && rs.budget == 40 && rs.last_event_unix_s > 1.6e9);
    assert_string_equal(rs.last_event_kind, "done");
    cJSON *meta = NULL;
    assert_int_equal(kiln_store_dash_meta(s, &meta, &err), KILN_OK);
    assert_string_equal(str(meta, "budget"), "40");
    char version_text[16];
    snprintf(version_text, sizeof version_text, "%d", KILN_STORE_SCHEMA_VERSION);
    assert_string_equal(str(meta, "schema_version"), version_text);
    cJSON_Delete(meta);

    cJSON *act = cJSON_CreateObject();
    int64_t n_cands = 0;
    assert_int_equal(kiln_store_dash_activity(s, 0, act, &n_cands, &err), KILN_OK);
    assert_true(n_cands == 4 && num(act, "candidates") == 4 && num(act, "results") == 3 &&
                num(act, "candidates_last_min") == 4 && dnum(act, "last_result_unix_s") > 1.6e9);
    cJSON_Delete(act);
    act = cJSON_CreateObject();
    assert_int_equal(kiln_store_dash_activity(s, 4e9, act, &n_cands, &err), KILN_OK);
    assert_int_equal(num(act, "candidates_last_min"), 0);
    cJSON_Delete(act);

    cJSON *oc = cJSON_CreateObject();
    int64_t judged = 0;
    assert_int_equal(kiln_store_dash_outcomes(s, r.p, oc, &judged, &err), KILN_OK);
    assert_true(judged == 3 && num(oc, "ok") == 2 && num(oc, "mismatch") == 1);
    cJSON_Delete(oc);
    oc = cJSON_CreateObject();
    assert_int_equal(kiln_store_dash_outcomes(s, r.q, oc, &judged, &err), KILN_OK);
    assert_true(judged == 0 && cJSON_GetArraySize(oc) == 0);
    cJSON_Delete(oc);

    int exists = 0;
    assert_int_equal(kiln_store_problem_exists(s, r.q, &exists, &err), KILN_OK);
    assert_true(exists);
    assert_int_equal(kiln_store_problem_exists(s, 77, &exists, &err), KILN_OK);
    assert_false(exists);
    cJSON *rows = NULL;
    assert_int_equal(kiln_store_dash_problems(s, 0, &rows, &err), KILN_OK);
    assert_int_equal(cJSON_GetArraySize(rows), 2);
    cJSON *p0 = cJSON_GetArrayItem(rows, 0); /* the hottest first */
    assert_true(num(p0, "id") == r.p && num(p0, "n_candidates") == 4 &&
                num(p0, "n_done_events") == 0 && dnum(p0, "eager_us") == 10);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(p0, "compile_us")));
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(rows, 1), "eager_us")));
    cJSON_Delete(rows);
    assert_int_equal(kiln_store_dash_problems(s, r.q, &rows, &err), KILN_OK);
    assert_true(cJSON_GetArraySize(rows) == 1 && num(cJSON_GetArrayItem(rows, 0), "id") == r.q);
    cJSON_Delete(rows);

    kiln_store_winner win;
    assert_int_equal(kiln_store_winner_get(s, r.p, &win, &err), KILN_OK);
    cJSON *best = NULL;
    kiln_store_summary sum;
    assert_int_equal(kiln_store_dash_best(s, win.result_id, &best, &sum, &err), KILN_OK);
    assert_true(num(best, "candidate_id") == r.c && dnum(best, "time_us") == 3 &&
                dnum(best, "score") == 0.6 && dnum(best, "spread_pct") == 3 &&
                fabs(sum.ref_time_us - 20) < 1e-9 && sum.ref_spread_pct == -1);
    assert_string_equal(str(best, "agent"), "llm");
    cJSON_Delete(best);
    assert_int_equal(kiln_store_dash_best(s, 0, &best, &sum, &err), KILN_OK);
    assert_true(best == NULL && sum.ref_time_us == -1);

    /* the roofline's verdicts: each problem's fastest ok, ranked */
    cJSON *fast = cJSON_CreateArray();
    assert_int_equal(kiln_store_dash_fastest(s, 0, 20, fast, &err), KILN_OK);
    assert_int_equal(cJSON_GetArraySize(fast), 2);
    cJSON *f0 = cJSON_GetArrayItem(fast, 0);
    assert_true(num(f0, "candidate_id") == r.c && num(f0, "rank") == 1);
    assert_string_equal(str(f0, "problem"), "p");
    assert_true(cJSON_IsArray(cJSON_GetObjectItem(cJSON_GetObjectItem(f0, "result"), "workloads")));
    assert_int_equal(num(cJSON_GetArrayItem(fast, 1), "candidate_id"), r.a);
    cJSON_Delete(fast);
    fast = cJSON_CreateArray();
    assert_int_equal(kiln_store_dash_fastest(s, r.p, 1, fast, &err), KILN_OK);
    assert_int_equal(cJSON_GetArraySize(fast), 1);
    cJSON_Delete(fast);
    kiln_store_close(s);
    remove_run_dir(r.dir);
}

static void test_dashboard_pages(void **state) {
    (void)state;
    dash_run r;
    kiln_store *s = make_dash_run(&r);
    kiln_err err = {{0}};
    assert_int_equal(kiln_store_read_begin(s, &err), KILN_OK); /* one snapshot, as a request */

    /* events, newest first, two to a page */
    kiln_store_page pg = {.limit = 2, .draft = -1};
    cJSON *items = cJSON_CreateArray();
    int64_t next = 0;
    assert_int_equal(kiln_store_dash_events(s, &pg, 1, items, &next, &err), KILN_OK);
    assert_true(cJSON_GetArraySize(items) == 2 && next == 2);
    assert_string_equal(str(cJSON_GetArrayItem(items, 0), "message"), "2");
    cJSON_Delete(items);
    pg.before = next;
    items = cJSON_CreateArray();
    assert_int_equal(kiln_store_dash_events(s, &pg, 1, items, &next, &err), KILN_OK);
    assert_true(cJSON_GetArraySize(items) == 1 && next == 0);
    cJSON *e0 = cJSON_GetArrayItem(items, 0);
    assert_string_equal(str(e0, "problem"), "p");
    assert_string_equal(str(e0, "kind"), "incumbent");
    cJSON_Delete(items);
    kiln_store_page one = {.problem_id = r.p, .limit = 50, .draft = -1};
    items = cJSON_CreateArray();
    assert_int_equal(kiln_store_dash_events(s, &one, 0, items, &next, &err), KILN_OK);
    assert_int_equal(cJSON_GetArraySize(items), 1);
    assert_null(cJSON_GetObjectItem(cJSON_GetArrayItem(items, 0), "problem")); /* brief rows */
    cJSON_Delete(items);

    /* candidates with their verdicts, and the filters */
    kiln_store_page cp = {.limit = 100, .draft = -1};
    items = cJSON_CreateArray();
    assert_int_equal(kiln_store_dash_candidates(s, &cp, items, &next, &err), KILN_OK);
    assert_true(cJSON_GetArraySize(items) == 4 && next == 0);
    cJSON *first = cJSON_GetArrayItem(items, 0);
    assert_true(num(first, "id") == r.w && cJSON_IsNull(cJSON_GetObjectItem(first, "outcome")));
    cJSON_Delete(items);
    cp.outcome = "waiting";
    items = cJSON_CreateArray();
    assert_int_equal(kiln_store_dash_candidates(s, &cp, items, &next, &err), KILN_OK);
    assert_true(cJSON_GetArraySize(items) == 1 && num(cJSON_GetArrayItem(items, 0), "id") == r.w);
    cJSON_Delete(items);
    cp.outcome = "ok";
    cp.agent = "llm";
    items = cJSON_CreateArray();
    assert_int_equal(kiln_store_dash_candidates(s, &cp, items, &next, &err), KILN_OK);
    assert_true(cJSON_GetArraySize(items) == 1 && num(cJSON_GetArrayItem(items, 0), "id") == r.c);
    assert_true(dnum(cJSON_GetArrayItem(items, 0), "time_us") == 3);
    cJSON_Delete(items);
    kiln_store_page cq = {.problem_id = r.q, .limit = 100, .draft = 0};
    items = cJSON_CreateArray();
    assert_int_equal(kiln_store_dash_candidates(s, &cq, items, &next, &err), KILN_OK);
    assert_int_equal(cJSON_GetArraySize(items), 0);
    cJSON_Delete(items);

    /* failures: grouped, then one outcome's items with their evidence */
    kiln_store_page fp = {.limit = 10, .draft = -1};
    cJSON *groups = cJSON_CreateArray();
    int64_t total = 0;
    assert_int_equal(kiln_store_dash_failure_groups(s, &fp, groups, &total, &err), KILN_OK);
    assert_true(total == 1 && cJSON_GetArraySize(groups) == 1);
    assert_string_equal(str(cJSON_GetArrayItem(groups, 0), "outcome"), "mismatch");
    cJSON_Delete(groups);
    fp.outcome = "mismatch";
    items = cJSON_CreateArray();
    assert_int_equal(kiln_store_dash_failures(s, &fp, items, &next, &err), KILN_OK);
    assert_true(cJSON_GetArraySize(items) == 1 && next == 0);
    cJSON *f = cJSON_GetArrayItem(items, 0);
    assert_true(num(f, "candidate_id") == r.b &&
                dnum(cJSON_GetObjectItem(f, "evidence"), "max_abs_err") == 0.5);
    assert_string_equal(str(f, "agent"), "vector");
    cJSON_Delete(items);

    /* the curve and the live feed */
    cJSON *pts = cJSON_CreateArray();
    long n = 0;
    assert_int_equal(kiln_store_dash_curve(s, r.p, 1, 10, pts, &n, &err), KILN_OK);
    assert_true(n == 2 && num(cJSON_GetArrayItem(pts, 0), "id") == 2);
    assert_string_equal(str(cJSON_GetArrayItem(pts, 1), "agent"), "llm");
    cJSON_Delete(pts);
    pts = cJSON_CreateArray();
    assert_int_equal(kiln_store_dash_new_results(s, 0, 2, pts, &err), KILN_OK);
    assert_true(cJSON_GetArraySize(pts) == 2 && num(cJSON_GetArrayItem(pts, 1), "id") == 2);
    cJSON_Delete(pts);
    cJSON *rows = cJSON_CreateArray();
    assert_int_equal(kiln_store_dash_new_candidates(s, r.b, 10, rows, &err), KILN_OK);
    assert_true(cJSON_GetArraySize(rows) == 2 && num(cJSON_GetArrayItem(rows, 0), "id") == r.c &&
                num(cJSON_GetArrayItem(rows, 0), "parent_id") == r.a);
    cJSON_Delete(rows);
    rows = cJSON_CreateArray();
    assert_int_equal(kiln_store_dash_new_events(s, 1, 10, rows, &err), KILN_OK);
    assert_true(cJSON_GetArraySize(rows) == 2 && num(cJSON_GetArrayItem(rows, 0), "id") == 2);
    cJSON_Delete(rows);
    cJSON *ids = cJSON_CreateArray();
    assert_int_equal(kiln_store_dash_trees_changed(s, 0, ids, &err), KILN_OK);
    assert_true(cJSON_GetArraySize(ids) == 1 &&
                cJSON_GetArrayItem(ids, 0)->valuedouble == (double)r.p);
    cJSON_Delete(ids);
    ids = cJSON_CreateArray();
    assert_int_equal(kiln_store_dash_trees_changed(s, 4e9, ids, &err), KILN_OK);
    assert_int_equal(cJSON_GetArraySize(ids), 0);
    cJSON_Delete(ids);
    assert_int_equal(kiln_store_read_end(s, &err), KILN_OK);
    kiln_store_close(s);
    remove_run_dir(r.dir);
}

static void test_dashboard_tree_and_candidate(void **state) {
    (void)state;
    dash_run r;
    kiln_store *s = make_dash_run(&r);
    kiln_err err = {{0}};

    /* p's persisted tree, most visited first */
    kiln_store_tree_info info;
    cJSON *nodes = cJSON_CreateArray();
    assert_int_equal(kiln_store_dash_tree(s, r.p, 2, &info, nodes, &err), KILN_OK);
    assert_true(info.exists && info.n_nodes == 3 && info.n_candidates == 4 &&
                info.incumbent_id == 0);
    assert_int_equal(cJSON_GetArraySize(nodes), 2);
    cJSON *top = cJSON_GetArrayItem(nodes, 0);
    assert_true(num(top, "id") == r.n2 && num(top, "visits") == 4 && dnum(top, "value") == 0.5 &&
                num(top, "candidate_id") == r.c && dnum(top, "time_us") == 3);
    assert_string_equal(str(top, "outcome"), "ok");
    cJSON_Delete(nodes);
    /* q has no tree: its candidates by parent stand in */
    kiln_store *wr = open_store(r.dir, 0);
    int64_t qa = add_candidate(wr, r.q, 0, 0, "random", 9, "// qa");
    add_result(wr, qa, "timeout", -1);
    kiln_store_close(wr);
    nodes = cJSON_CreateArray();
    assert_int_equal(kiln_store_dash_tree(s, r.q, 10, &info, nodes, &err), KILN_OK);
    assert_true(info.exists && info.n_nodes == 0 && info.n_candidates == 1);
    assert_string_equal(str(cJSON_GetArrayItem(nodes, 0), "status"), "failed");
    cJSON_Delete(nodes);
    nodes = cJSON_CreateArray();
    assert_int_equal(kiln_store_dash_tree(s, 77, 10, &info, nodes, &err), KILN_OK);
    assert_true(!info.exists && cJSON_GetArraySize(nodes) == 0);
    cJSON_Delete(nodes);

    /* a candidate's page */
    cJSON *c = NULL;
    assert_int_equal(kiln_store_dash_candidate(s, r.c, &c, &err), KILN_OK);
    assert_true(num(c, "parent_id") == r.a && num(c, "node_id") == r.n2);
    assert_string_equal(str(c, "source"), "// c");
    assert_string_equal(str(c, "problem"), "p");
    assert_string_equal(str(c, "binary_hash"), "0000000000000003");
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(c, "is_incumbent")));
    cJSON_Delete(c);
    assert_int_equal(kiln_store_dash_candidate(s, 999, &c, &err), KILN_OK);
    assert_null(c);
    cJSON *results = cJSON_CreateArray();
    assert_int_equal(kiln_store_dash_candidate_results(s, r.c, results, &err), KILN_OK);
    assert_int_equal(cJSON_GetArraySize(results), 1);
    cJSON *res = cJSON_GetArrayItem(results, 0);
    assert_string_equal(str(res, "outcome"), "ok");
    assert_string_equal(str(cJSON_GetObjectItem(res, "result"), "outcome"), "ok");
    cJSON_Delete(results);
    cJSON *parent = NULL;
    assert_int_equal(kiln_store_dash_candidate_brief(s, r.a, 1, &parent, &err), KILN_OK);
    assert_string_equal(str(parent, "source"), "// a");
    assert_true(dnum(parent, "time_us") == 5);
    cJSON_Delete(parent);
    assert_int_equal(kiln_store_dash_candidate_brief(s, r.a, 0, &parent, &err), KILN_OK);
    assert_null(cJSON_GetObjectItem(parent, "source"));
    cJSON_Delete(parent);
    cJSON *children = cJSON_CreateArray();
    assert_int_equal(kiln_store_dash_children(s, r.a, children, &err), KILN_OK);
    assert_true(cJSON_GetArraySize(children) == 1 &&
                num(cJSON_GetArrayItem(children, 0), "id") == r.c);
    cJSON_Delete(children);
    kiln_store_close(s);
    remove_run_dir(r.dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v1_store_is_migrated_on_open),
        cmocka_unit_test(test_v1_store_with_the_old_llm_table_is_migrated),
        cmocka_unit_test(test_winner_rule),
        cmocka_unit_test(test_rows_read_back),
        cmocka_unit_test(test_llm_exchanges_and_failures),
        cmocka_unit_test(test_dashboard_run_and_problems),
        cmocka_unit_test(test_dashboard_pages),
        cmocka_unit_test(test_dashboard_tree_and_candidate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
