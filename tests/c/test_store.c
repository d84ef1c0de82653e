/* test_store.c: the SQLite store and the run lock: schema and version, idempotent problem upsert,
 * candidate dedupe, results and the gate's summary, nodes, events, meta; a read-only reader beside
 * a writer's open transaction; a writer waiting for another's; garbage, foreign and truncated
 * files; the lock against another process, also after SIGKILL; and kill -9 of a writer in the
 * middle of its inserts. (test_store_queries.c: the migration of old stores and every query.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store/store.h"

/* ---- helpers ---- */

static char *make_run_dir(void) {
    char tmpl[] = "/tmp/kiln_test_store_XXXXXX";
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
        fail_msg("kiln_store_open(%s): %s: %s", dir, kiln_strerror(rc), err.msg);
    return s;
}

/* A connection of the test's own to the store's file (the store hands out none): raw SQL checks
 * what the store wrote, as docs/store.md promises it to whoever reads the database directly. */
static sqlite3 *raw_open(kiln_store *s, int flags) {
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(kiln_store_path(s), &db, flags, NULL) != SQLITE_OK)
        fail_msg("%s: %s", kiln_store_path(s), sqlite3_errmsg(db));
    sqlite3_busy_timeout(db, 10000);
    return db;
}

static void raw_exec(kiln_store *s, const char *sql) {
    sqlite3 *db = raw_open(s, SQLITE_OPEN_READWRITE);
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
        fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    sqlite3_close(db);
}

/* One integer from a query on a read-only connection of the test's own. */
static int64_t query_int(kiln_store *s, const char *sql) {
    sqlite3 *db = raw_open(s, SQLITE_OPEN_READONLY);
    sqlite3_stmt *st = NULL;
    int r = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (r != SQLITE_OK)
        fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

static char *query_text(kiln_store *s, const char *sql) {
    sqlite3 *db = raw_open(s, SQLITE_OPEN_READONLY);
    sqlite3_stmt *st = NULL;
    int r = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (r != SQLITE_OK)
        fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    char *v = NULL;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
        v = xstrdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/* Events of one kind, as the store's read-only handle r sees them. */
static int count_events(kiln_store *r, const char *kind) {
    kiln_store_page pg = {.kind = kind, .limit = 1000, .draft = -1};
    cJSON *items = cJSON_CreateArray();
    int64_t next = 0;
    kiln_err err = {{0}};
    assert_int_equal(kiln_store_dash_events(r, &pg, 1, items, &next, &err), KILN_OK);
    int n = cJSON_GetArraySize(items);
    cJSON_Delete(items);
    return n;
}

static int64_t add_problem(kiln_store *s, const char *name) {
    kiln_store_problem p = {.name = name,
                            .dir = "/runs/r1/problems/x",
                            .share = 0.25,
                            .eager_us = 10.0,
                            .compile_us = -1,
                            .sol_us = 2.0};
    int64_t id = 0;
    kiln_err err;
    int rc = kiln_store_problem_upsert(s, &p, &id, &err);
    if (rc)
        fail_msg("upsert: %s", err.msg);
    return id;
}

static int64_t add_candidate(kiln_store *s, int64_t problem_id, uint64_t binary_hash,
                             int64_t parent_id) {
    kiln_store_candidate c = {.problem_id = problem_id,
                              .parent_id = parent_id,
                              .agent = "geometry",
                              .family = "softmax",
                              .params = "THREADS=256",
                              .source = "// kernel\n",
                              .source_hash = 0x1234,
                              .binary_hash = binary_hash};
    int64_t id = 0;
    kiln_err err;
    int rc = kiln_store_candidate_insert(s, &c, &id, &err);
    if (rc)
        fail_msg("candidate insert: %s", err.msg);
    assert_int_equal(c.id, id);
    return id;
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* ---- schema ---- */

static void test_open_creates_a_wal_store_with_schema_version(void **state) {
    (void)state;
    char *dir = make_run_dir();
    kiln_store *s = open_store(dir, 0);
    char *v = kiln_store_meta_get(s, "schema_version");
    assert_non_null(v);
    assert_int_equal(atoi(v), KILN_STORE_SCHEMA_VERSION);
    free(v);
    char *mode = query_text(s, "PRAGMA journal_mode");
    assert_string_equal(mode, "wal");
    free(mode);
    assert_int_equal(kiln_store_version(s), KILN_STORE_SCHEMA_VERSION);
    const char *tables[] = {"meta", "problem", "candidate",   "result",
                            "node", "event",   "llm_exchange"};
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        char *sql = xasprintf("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
                              "name = '%s'",
                              tables[i]);
        assert_int_equal(query_int(s, sql), 1);
        free(sql);
    }
    assert_string_equal(strrchr(kiln_store_path(s), '/'), "/kiln.db");
    kiln_store_close(s);
    /* Reopening finds the schema and keeps it. */
    s = open_store(dir, 0);
    assert_int_equal(query_int(s, "SELECT count(*) FROM meta WHERE key = 'schema_version'"), 1);
    kiln_store_close(s);
    remove_run_dir(dir);
}

static void test_newer_schema_version_is_refused(void **state) {
    (void)state;
    char *dir = make_run_dir();
    kiln_store *s = open_store(dir, 0);
    raw_exec(s, "UPDATE meta SET value = '99' WHERE key = 'schema_version'");
    kiln_store_close(s);
    kiln_err err = {{0}};
    for (int ro = 0; ro < 2; ro++) {
        s = NULL;
        assert_int_equal(kiln_store_open(dir, ro, &s, &err), KILN_ERR_FORMAT);
        assert_null(s);
        assert_non_null(strstr(err.msg, "newer kiln"));
        assert_non_null(strstr(err.msg, "99"));
    }
    remove_run_dir(dir);
}

/* ---- writes ---- */

static void test_problem_upsert_is_idempotent(void **state) {
    (void)state;
    char *dir = make_run_dir();
    kiln_store *s = open_store(dir, 0);
    int64_t a = add_problem(s, "softmax_f32");
    int64_t b = add_problem(s, "rmsnorm_bf16");
    assert_true(a > 0 && b > 0 && a != b);
    assert_int_equal(add_problem(s, "softmax_f32"), a);
    assert_int_equal(query_int(s, "SELECT count(*) FROM problem"), 2);
    /* A resume with fresher numbers updates what is known and keeps what is not. */
    kiln_store_problem p = {.name = "softmax_f32",
                            .dir = "/runs/moved/softmax_f32",
                            .share = -1,
                            .eager_us = 12.5,
                            .compile_us = 9.0,
                            .sol_us = -1};
    int64_t id = 0;
    kiln_err err;
    assert_int_equal(kiln_store_problem_upsert(s, &p, &id, &err), KILN_OK);
    assert_int_equal(id, a);
    char *sql = xasprintf("SELECT share * 1000 FROM problem WHERE id = %lld", (long long)a);
    assert_int_equal(query_int(s, sql), 250);
    free(sql);
    sql = xasprintf("SELECT eager_us * 10 FROM problem WHERE id = %lld", (long long)a);
    assert_int_equal(query_int(s, sql), 125);
    free(sql);
    char *d = query_text(s, "SELECT dir FROM problem WHERE name = 'softmax_f32'");
    assert_string_equal(d, "/runs/moved/softmax_f32");
    free(d);
    /* Unknown numbers are NULL, not -1. */
    assert_int_equal(
        query_int(s, "SELECT compile_us IS NULL FROM problem WHERE name = 'rmsnorm_bf16'"), 1);
    p.name = "";
    assert_int_equal(kiln_store_problem_upsert(s, &p, &id, &err), KILN_ERR_INVALID);

    /* A problem is its content: a row without a hash takes the first one; the same hash is the
     * same problem; another hash under the name is refused and writes nothing. */
    p.name = "softmax_f32";
    p.content_hash = "aaaa1111";
    assert_int_equal(kiln_store_problem_upsert(s, &p, &id, &err), KILN_OK);
    assert_int_equal(id, a);
    p.content_hash = NULL; /* unknown: keeps the recorded one */
    assert_int_equal(kiln_store_problem_upsert(s, &p, &id, &err), KILN_OK);
    p.content_hash = "aaaa1111";
    assert_int_equal(kiln_store_problem_upsert(s, &p, &id, &err), KILN_OK);
    assert_int_equal(id, a);
    p.content_hash = "bbbb2222";
    p.dir = "/runs/elsewhere";
    id = 0;
    assert_int_equal(kiln_store_problem_upsert(s, &p, &id, &err), KILN_ERR_INVALID);
    assert_int_equal(id, 0);
    assert_non_null(strstr(err.msg, "another problem"));
    assert_non_null(strstr(err.msg, "aaaa1111"));
    assert_non_null(strstr(err.msg, "bbbb2222"));
    d = query_text(s, "SELECT dir || ' ' || content_hash FROM problem WHERE name = 'softmax_f32'");
    assert_string_equal(d, "/runs/moved/softmax_f32 aaaa1111");
    free(d);
    kiln_store_problem_row row;
    int found = 0;
    assert_int_equal(kiln_store_problem_find(s, "softmax_f32", &row, &found, &err), KILN_OK);
    assert_true(found);
    assert_string_equal(row.content_hash, "aaaa1111");
    kiln_store_problem_row_free(&row);
    assert_int_equal(kiln_store_problem_find(s, "rmsnorm_bf16", &row, &found, &err), KILN_OK);
    assert_true(found && row.content_hash == NULL);
    kiln_store_problem_row_free(&row);
    kiln_store_close(s);
    remove_run_dir(dir);
}

static void test_candidates_are_deduplicated_by_binary_hash(void **state) {
    (void)state;
    char *dir = make_run_dir();
    kiln_store *s = open_store(dir, 0);
    int64_t p1 = add_problem(s, "p1"), p2 = add_problem(s, "p2");
    int64_t c1 = add_candidate(s, p1, 0xfeedfacecafebeefULL, 0);
    int64_t c2 = add_candidate(s, p1, 0x42, c1);
    assert_true(c2 > c1);

    kiln_store_candidate dup = {.problem_id = p1,
                                .parent_id = c2,
                                .agent = "vector",
                                .source = "// another source, same binary\n",
                                .source_hash = 0x99,
                                .binary_hash = 0xfeedfacecafebeefULL};
    int64_t id = -1;
    kiln_err err = {{0}};
    assert_int_equal(kiln_store_candidate_insert(s, &dup, &id, &err), KILN_ERR_INVALID);
    assert_int_equal(id, c1);
    assert_int_equal(dup.id, c1);
    assert_non_null(strstr(err.msg, "duplicate"));
    /* The same binary for another problem is another candidate. */
    assert_true(add_candidate(s, p2, 0xfeedfacecafebeefULL, 0) > c2);
    /* Uncompiled candidates (binary hash 0) are never duplicates of each other. */
    int64_t u1 = add_candidate(s, p1, 0, 0), u2 = add_candidate(s, p1, 0, 0);
    assert_true(u1 != u2);
    assert_int_equal(query_int(s, "SELECT count(*) FROM candidate WHERE problem_id = 1"), 4);
    char *h = query_text(s, "SELECT binary_hash FROM candidate WHERE id = 1");
    assert_string_equal(h, "feedfacecafebeef");
    free(h);
    h = query_text(s, "SELECT source_hash FROM candidate WHERE id = 1");
    assert_string_equal(h, "0000000000001234");
    free(h);
    char *sql = xasprintf("SELECT parent_id FROM candidate WHERE id = %lld", (long long)c2);
    assert_int_equal(query_int(s, sql), c1);
    free(sql);
    assert_int_equal(query_int(s, "SELECT count(*) FROM candidate WHERE parent_id IS NULL"), 4);

    /* A candidate of a problem that does not exist is refused by the foreign key. */
    dup.problem_id = 999;
    dup.binary_hash = 7;
    dup.parent_id = 0;
    assert_int_equal(kiln_store_candidate_insert(s, &dup, &id, &err), KILN_ERR_INVALID);
    assert_non_null(strstr(err.msg, "999"));
    kiln_store_close(s);
    remove_run_dir(dir);
}

static const char gate_json[] =
    "{\"kiln_eval\": 1, \"outcome\": \"ok\", \"evidence\": {},"
    " \"workloads\": [{\"index\": 0, \"time_us\": {\"median\": 3.1, \"spread_pct\": 2.5},"
    "                 \"ref_time_us\": 4.0},"
    "                {\"index\": 1, \"time_us\": {\"median\": 4.0, \"spread_pct\": 7.5},"
    "                 \"ref_time_us\": 16.0},"
    "                {\"index\": 2, \"time_us\": null}],"
    " \"summary\": {\"time_us_geomean\": 3.5, \"sol_pct_geomean\": 41.0,"
    "             \"sol_score_geomean\": 0.62}}";

/* The eager baseline's spread, in either of the shapes a gate result may give it, and the rule
 * that decides what a table shows for a speedup. */
static void test_baseline_spread_and_the_speedup_rule(void **state) {
    (void)state;
    kiln_store_summary sum;
    kiln_store_summary_parse(gate_json, &sum);
    assert_true(sum.ref_spread_pct == -1); /* timed once: no spread */
    kiln_store_summary_parse("{\"workloads\": [{\"ref_time_us\": {\"median\": 10.0, "
                             "\"spread_pct\": 3.0}}, {\"ref_time_us\": 40.0, "
                             "\"ref_spread_pct\": 39756.0}]}",
                             &sum);
    assert_true(fabs(sum.ref_time_us - 20.0) < 1e-9 && sum.ref_spread_pct == 39756.0);

    double eager, spread;
    kiln_store_baseline_pick(30.0, &sum, &eager, &spread); /* the gate's, with its spread */
    assert_true(fabs(eager - 20.0) < 1e-9 && spread == 39756.0);
    kiln_store_summary_parse(gate_json, &sum);
    kiln_store_baseline_pick(30.0, &sum, &eager, &spread); /* no spread: the problem's own */
    assert_true(eager == 30.0 && spread == -1);
    kiln_store_baseline_pick(-1, &sum, &eager, &spread);
    assert_true(fabs(eager - 8.0) < 1e-9 && spread == -1);

    kiln_store_speedup v;
    char buf[32];
    kiln_store_speedup_judge(20.0, 2.0, 10.0, 3.0, &v);
    assert_int_equal(v.verdict, KILN_SPEEDUP_SUPPORTED);
    assert_string_equal(kiln_store_speedup_text(&v, buf, sizeof buf), "2.00x");
    /* a stalled baseline: never divided by, whatever the ratio */
    kiln_store_speedup_judge(5810.0, 39756.0, 10.0, 1.0, &v);
    assert_int_equal(v.verdict, KILN_SPEEDUP_NOISY_BASELINE);
    assert_true(v.value == -1 && fabs(v.ratio - 581.0) < 1e-9);
    assert_string_equal(kiln_store_speedup_text(&v, buf, sizeof buf), "noisy");
    /* a noisy baseline that still loses clearly (ResNet-50 eager 4.316 ms, spread 38.2 %, against
     * torch.compile's 1.712 ms, 3.8 %): the figure, flagged; one that does not: still never divided
     * by */
    kiln_store_speedup_judge(4.316, 38.2, 1.712, 3.8, &v);
    assert_int_equal(v.verdict, KILN_SPEEDUP_NOISY);
    assert_string_equal(kiln_store_speedup_text(&v, buf, sizeof buf), "2.52x!");
    kiln_store_speedup_judge(1.05, 12.0, 1.0, 1.0, &v);
    assert_int_equal(v.verdict, KILN_SPEEDUP_NOISY_BASELINE);
    /* 1.04x with 4% and 6% spreads: the interval [0.99, 1.10] contains 1 */
    kiln_store_speedup_judge(10.4, 4.0, 10.0, 6.0, &v);
    assert_int_equal(v.verdict, KILN_SPEEDUP_NOT_SIGNIFICANT);
    assert_string_equal(kiln_store_speedup_text(&v, buf, sizeof buf), "n.s.");
    /* a noisy kiln time that still wins clearly: the figure, flagged */
    kiln_store_speedup_judge(30.0, 1.0, 10.0, 20.0, &v);
    assert_int_equal(v.verdict, KILN_SPEEDUP_NOISY);
    assert_string_equal(kiln_store_speedup_text(&v, buf, sizeof buf), "3.00x!");
    /* a clear loss is a figure too (below 1) */
    kiln_store_speedup_judge(10.0, 1.0, 20.0, 1.0, &v);
    assert_int_equal(v.verdict, KILN_SPEEDUP_SUPPORTED);
    assert_true(fabs(v.value - 0.5) < 1e-9);
    /* unknown spreads count as none; unknown times give nothing */
    kiln_store_speedup_judge(20.0, -1, 10.0, -1, &v);
    assert_int_equal(v.verdict, KILN_SPEEDUP_SUPPORTED);
    kiln_store_speedup_judge(-1, 1, 10.0, 1, &v);
    assert_int_equal(v.verdict, KILN_SPEEDUP_UNKNOWN);
    assert_string_equal(kiln_store_speedup_text(&v, buf, sizeof buf), "-");
    assert_string_equal(kiln_store_speedup_name(KILN_SPEEDUP_NOISY_BASELINE), "noisy_baseline");
}

static void test_results_are_recorded_and_read_back(void **state) {
    (void)state;
    char *dir = make_run_dir();
    kiln_store *s = open_store(dir, 0);
    int64_t p = add_problem(s, "p");
    int64_t c = add_candidate(s, p, 0xabc, 0);
    int64_t bad = add_candidate(s, p, 0xdef, c);

    kiln_store_summary sum;
    kiln_store_summary_parse(gate_json, &sum);
    assert_true(sum.time_us == 3.5 && sum.spread_pct == 7.5 && sum.sol_pct == 41.0 &&
                sum.score == 0.62 && sum.score_known);
    assert_string_equal(sum.outcome, "ok");
    assert_true(fabs(sum.ref_time_us - 8.0) < 1e-9); /* the geomean of 4 and 16 */
    kiln_store_summary_parse("not json", &sum);
    assert_true(sum.time_us == -1 && sum.spread_pct == -1 && sum.sol_pct == -1 && sum.score == 0 &&
                !sum.score_known && sum.ref_time_us == -1);
    assert_string_equal(sum.outcome, "");
    kiln_store_summary_read(NULL, &sum);
    assert_true(sum.time_us == -1 && !sum.score_known);

    kiln_err err = {{0}};
    kiln_store_summary_parse(gate_json, &sum);
    assert_int_equal(kiln_store_result_insert(s, c, "ok", gate_json, sum.time_us, sum.spread_pct,
                                              sum.sol_pct, sum.score, &err),
                     KILN_OK);
    assert_int_equal(kiln_store_result_insert(s, bad, "mismatch",
                                              "{\"outcome\": \"mismatch\", \"evidence\": "
                                              "{\"max_abs_err\": 0.5}}",
                                              -1, -1, -1, 0, &err),
                     KILN_OK);
    /* A failure scores 0 whatever the caller says. */
    assert_int_equal(kiln_store_result_insert(s, bad, "crashed", NULL, -1, -1, -1, 0.9, &err),
                     KILN_OK);
    assert_int_equal(query_int(s, "SELECT score = 0 FROM result WHERE outcome = 'crashed'"), 1);
    assert_int_equal(query_int(s, "SELECT score * 100 FROM result WHERE outcome = 'ok'"), 62);
    assert_int_equal(query_int(s, "SELECT time_us * 10 FROM result WHERE outcome = 'ok'"), 35);
    assert_int_equal(query_int(s, "SELECT problem_id FROM result WHERE outcome = 'ok'"), p);
    assert_int_equal(query_int(s, "SELECT time_us IS NULL AND sol_pct IS NULL AND score = 0 "
                                  "FROM result WHERE outcome = 'mismatch'"),
                     1);
    char *ev = query_text(s, "SELECT json_extract(result_json, '$.evidence.max_abs_err') FROM "
                             "result WHERE outcome = 'mismatch'");
    assert_string_equal(ev, "0.5");
    free(ev);
    /* A re-timing adds a row; latest_result shows the newest per candidate. */
    assert_int_equal(kiln_store_result_insert(s, c, "ok", gate_json, 3.25, 1, 44, 0.63, &err),
                     KILN_OK);
    assert_int_equal(query_int(s, "SELECT count(*) FROM latest_result"), 2);
    assert_int_equal(query_int(s, "SELECT count(*) FROM latest_result WHERE outcome = 'crashed'"),
                     1);
    assert_int_equal(query_int(s, "SELECT time_us * 100 FROM latest_result WHERE outcome = 'ok'"),
                     325);

    assert_int_equal(kiln_store_result_insert(s, 12345, "ok", NULL, 1, 1, 1, 1, &err),
                     KILN_ERR_INVALID);
    assert_non_null(strstr(err.msg, "12345"));
    assert_int_equal(kiln_store_result_insert(s, c, "ok", "[1, 2", 1, 1, 1, 1, &err),
                     KILN_ERR_INVALID);
    assert_int_equal(kiln_store_result_insert(s, c, "", NULL, 1, 1, 1, 1, &err), KILN_ERR_INVALID);
    assert_int_equal(query_int(s, "SELECT count(*) FROM result"), 4);

    /* The incumbent must be a candidate of the problem. */
    assert_int_equal(kiln_store_incumbent_set(s, p, c, &err), KILN_OK);
    assert_int_equal(query_int(s, "SELECT incumbent_id FROM problem"), c);
    int64_t other = add_problem(s, "other");
    assert_int_equal(kiln_store_incumbent_set(s, other, c, &err), KILN_ERR_INVALID);
    kiln_store_close(s);
    remove_run_dir(dir);
}

static void test_nodes_are_inserted_and_updated(void **state) {
    (void)state;
    char *dir = make_run_dir();
    kiln_store *s = open_store(dir, 0);
    int64_t p = add_problem(s, "p");
    kiln_err err = {{0}};
    kiln_store_node root = {.problem_id = p, .family = "softmax", .status = "open"};
    assert_int_equal(kiln_store_node_insert(s, &root, &err), KILN_OK);
    assert_true(root.id > 0);
    kiln_store_node child = {.problem_id = p,
                             .parent_id = root.id,
                             .draft = 1,
                             .family = "softmax",
                             .params = "THREADS=128",
                             .status = "pending"};
    assert_int_equal(kiln_store_node_insert(s, &child, &err), KILN_OK);
    assert_true(child.id > root.id);
    int64_t c = add_candidate(s, p, 0x77, 0);
    child.candidate_id = c;
    child.visits = 3;
    child.value_sum = 1.5;
    child.best = 0.75;
    child.status = "done";
    assert_int_equal(kiln_store_node_update(s, &child, &err), KILN_OK);
    char *sql =
        xasprintf("SELECT visits * 1000 + value_sum * 100 + best * 4 FROM node WHERE id = %lld "
                  "AND status = 'done' AND candidate_id = %lld AND parent_id = %lld AND draft = 1",
                  (long long)child.id, (long long)c, (long long)root.id);
    assert_int_equal(query_int(s, sql), 3153);
    free(sql);
    assert_int_equal(query_int(s, "SELECT count(*) FROM node WHERE parent_id IS NULL AND "
                                  "candidate_id IS NULL"),
                     1);
    kiln_store_node ghost = child;
    ghost.id = 9999;
    assert_int_equal(kiln_store_node_update(s, &ghost, &err), KILN_ERR_INVALID);
    assert_non_null(strstr(err.msg, "9999"));
    /* A node under a parent that does not exist is refused. */
    kiln_store_node orphan = {.problem_id = p, .parent_id = 4242, .status = "open"};
    assert_int_equal(kiln_store_node_insert(s, &orphan, &err), KILN_ERR_INVALID);
    kiln_store_close(s);
    remove_run_dir(dir);
}

static void test_events_and_meta(void **state) {
    (void)state;
    char *dir = make_run_dir();
    kiln_store *s = open_store(dir, 0);
    int64_t p = add_problem(s, "p");
    kiln_err err = {{0}};
    assert_int_equal(kiln_store_event(s, 0, "start", "budget 600 s", &err), KILN_OK);
    assert_int_equal(kiln_store_event(s, p, "incumbent", "3.1 us (candidate 7)", &err), KILN_OK);
    assert_int_equal(kiln_store_event(s, p, "done", NULL, &err), KILN_OK);
    assert_int_equal(kiln_store_event(s, p, "", "x", &err), KILN_ERR_INVALID);
    assert_int_equal(query_int(s, "SELECT count(*) FROM event"), 3);
    assert_int_equal(query_int(s, "SELECT count(*) FROM event WHERE problem_id IS NULL"), 1);
    char *k = query_text(s, "SELECT group_concat(kind, ',') FROM (SELECT kind FROM event ORDER "
                            "BY id)");
    assert_string_equal(k, "start,incumbent,done");
    free(k);
    assert_int_equal(query_int(s, "SELECT created_unix_s > 1.6e9 FROM event WHERE id = 1"), 1);

    assert_null(kiln_store_meta_get(s, KILN_META_BACKEND));
    assert_int_equal(kiln_store_meta_set(s, KILN_META_BACKEND, "cpu", &err), KILN_OK);
    assert_int_equal(kiln_store_meta_set(s, KILN_META_BACKEND, "cuda", &err), KILN_OK);
    char *v = kiln_store_meta_get(s, KILN_META_BACKEND);
    assert_string_equal(v, "cuda");
    free(v);
    assert_int_equal(kiln_store_meta_set(s, "schema_version", "7", &err), KILN_ERR_INVALID);
    v = kiln_store_meta_get(s, "schema_version");
    assert_int_equal(atoi(v), KILN_STORE_SCHEMA_VERSION);
    free(v);
    kiln_store_close(s);
    remove_run_dir(dir);
}

/* ---- readers ---- */

static void test_read_only_sees_committed_rows_beside_an_open_write(void **state) {
    (void)state;
    char *dir = make_run_dir();
    kiln_store *s = open_store(dir, 0);
    add_problem(s, "p");
    kiln_store_close(s);

    int to_parent[2], to_child[2];
    assert_int_equal(pipe(to_parent), 0);
    assert_int_equal(pipe(to_child), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        kiln_store *w = NULL;
        kiln_err err;
        char go;
        if (kiln_store_open(dir, 0, &w, &err) ||
            kiln_store_event(w, 0, "committed", "visible", &err))
            _exit(2);
        /* the open write transaction, on a connection of its own beside the store's */
        sqlite3 *db = raw_open(w, SQLITE_OPEN_READWRITE);
        if (sqlite3_exec(db,
                         "BEGIN IMMEDIATE; INSERT INTO event (kind, message, created_unix_s) "
                         "VALUES ('uncommitted', '', 0)",
                         NULL, NULL, NULL) != SQLITE_OK)
            _exit(3);
        if (write(to_parent[1], "r", 1) != 1 || read(to_child[0], &go, 1) != 1)
            _exit(4);
        if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
            _exit(5);
        sqlite3_close(db);
        kiln_store_close(w);
        _exit(0);
    }
    char ready = 0;
    assert_int_equal(read(to_parent[0], &ready, 1), 1);
    /* The writer holds its write transaction open: the reader sees the committed row only. */
    kiln_store *r = open_store(dir, 1);
    assert_int_equal(count_events(r, "committed"), 1);
    assert_int_equal(count_events(r, "uncommitted"), 0);
    kiln_store_problem_row *ps = NULL;
    int n_ps = 0;
    assert_int_equal(kiln_store_problem_list(r, &ps, &n_ps, NULL), KILN_OK);
    assert_int_equal(n_ps, 1);
    kiln_store_problem_row_free(&ps[0]);
    free(ps);
    kiln_err err = {{0}};
    assert_int_equal(kiln_store_event(r, 0, "x", "y", &err), KILN_ERR_INVALID);
    assert_non_null(strstr(err.msg, "read-only"));
    assert_int_equal(write(to_child[1], "g", 1), 1);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(count_events(r, "uncommitted"), 1);
    kiln_store_close(r);
    /* With no writer left and the WAL checkpointed away (the last writer's close), a reader
     * still opens. */
    kiln_store_close(open_store(dir, 0));
    char *wal = xasprintf("%s/kiln.db-wal", dir);
    assert_false(file_exists(wal));
    free(wal);
    r = open_store(dir, 1);
    kiln_store_heads heads;
    assert_int_equal(kiln_store_heads_read(r, &heads, NULL), KILN_OK);
    assert_int_equal(heads.event, 2);
    kiln_store_close(r);
    close(to_parent[0]);
    close(to_parent[1]);
    close(to_child[0]);
    close(to_child[1]);
    remove_run_dir(dir);
}

static void test_read_only_open_of_a_missing_store_is_an_io_error(void **state) {
    (void)state;
    char *dir = make_run_dir();
    kiln_store *s = NULL;
    kiln_err err = {{0}};
    assert_int_equal(kiln_store_open(dir, 1, &s, &err), KILN_ERR_IO);
    assert_null(s);
    assert_non_null(strstr(err.msg, "kiln.db"));
    char *path = xasprintf("%s/kiln.db", dir);
    assert_false(file_exists(path)); /* a reader creates nothing */
    free(path);
    remove_run_dir(dir);
}

/* A write that finds another process's write transaction open waits for it (the busy timeout)
 * instead of failing, and its foreign keys hold on the store's own connection. */
static void test_a_write_waits_for_another_writer(void **state) {
    (void)state;
    char *dir = make_run_dir();
    kiln_store *s = open_store(dir, 0);
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        sqlite3 *db = raw_open(s, SQLITE_OPEN_READWRITE);
        if (sqlite3_exec(db,
                         "BEGIN IMMEDIATE; INSERT INTO event (kind, message, created_unix_s) "
                         "VALUES ('first', '', 0)",
                         NULL, NULL, NULL) != SQLITE_OK ||
            write(ready[1], "r", 1) != 1)
            _exit(2);
        usleep(600000);
        _exit(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK ? 0 : 3);
    }
    char c = 0;
    assert_int_equal(read(ready[0], &c, 1), 1);
    double t0 = kiln_now_s();
    kiln_err err = {{0}};
    assert_int_equal(kiln_store_event(s, 0, "second", "after the first", &err), KILN_OK);
    double waited = kiln_now_s() - t0;
    print_message("    the second writer waited %.3f s\n", waited);
    assert_true(waited > 0.3);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char *kinds = query_text(s, "SELECT group_concat(kind, ',') FROM (SELECT kind FROM event "
                                "ORDER BY id)");
    assert_string_equal(kinds, "first,second");
    free(kinds);
    /* foreign keys are on for the store's connection: a node under no problem is refused */
    kiln_store_node orphan = {.problem_id = 77, .status = "open"};
    assert_int_equal(kiln_store_node_insert(s, &orphan, &err), KILN_ERR_INVALID);
    close(ready[0]);
    close(ready[1]);
    kiln_store_close(s);
    remove_run_dir(dir);
}

/* ---- bad files ---- */

static void test_garbage_file_is_a_format_error(void **state) {
    (void)state;
    char *dir = make_run_dir();
    char *path = xasprintf("%s/kiln.db", dir);
    char garbage[8192];
    for (size_t i = 0; i < sizeof garbage; i++)
        garbage[i] = (char)(i * 131 + 7);
    write_bytes(path, garbage, sizeof garbage);
    for (int ro = 0; ro < 2; ro++) {
        kiln_store *s = NULL;
        kiln_err err = {{0}};
        assert_int_equal(kiln_store_open(dir, ro, &s, &err), KILN_ERR_FORMAT);
        assert_null(s);
        char *want = xasprintf("%s is not a kiln store (file is not a database)", path);
        assert_string_equal(err.msg, want);
        free(want);
    }
    /* The file is left as it was, with nothing beside it. */
    char *back = NULL;
    size_t n = 0;
    assert_int_equal(kiln_read_file(path, &back, &n, NULL), KILN_OK);
    assert_int_equal(n, sizeof garbage);
    assert_memory_equal(back, garbage, sizeof garbage);
    free(back);
    char *wal = xasprintf("%s-wal", path);
    assert_false(file_exists(wal));
    free(wal);
    /* A short file and an empty one (read-only) are refused too. */
    write_bytes(path, "SQLite", 6);
    kiln_store *s = NULL;
    kiln_err err = {{0}};
    assert_int_equal(kiln_store_open(dir, 0, &s, &err), KILN_ERR_FORMAT);
    write_bytes(path, "", 0);
    assert_int_equal(kiln_store_open(dir, 1, &s, &err), KILN_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "empty"));
    free(path);
    remove_run_dir(dir);
}

static void test_another_sqlite_database_is_not_a_kiln_store(void **state) {
    (void)state;
    char *dir = make_run_dir();
    char *path = xasprintf("%s/kiln.db", dir);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(db, "CREATE TABLE photos (id INTEGER PRIMARY KEY)", NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(db);
    /* A "meta" table without our version row is not ours either. */
    char *dir2 = make_run_dir();
    char *path2 = xasprintf("%s/kiln.db", dir2);
    assert_int_equal(sqlite3_open(path2, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "CREATE TABLE meta (key TEXT, value TEXT)", NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    for (int ro = 0; ro < 2; ro++) {
        kiln_store *s = NULL;
        kiln_err err = {{0}};
        assert_int_equal(kiln_store_open(dir, ro, &s, &err), KILN_ERR_FORMAT);
        assert_non_null(strstr(err.msg, "is not a kiln store"));
        assert_int_equal(kiln_store_open(dir2, ro, &s, &err), KILN_ERR_FORMAT);
        assert_non_null(strstr(err.msg, "schema_version"));
    }
    free(path);
    free(path2);
    remove_run_dir(dir);
    remove_run_dir(dir2);
}

/* Fills a store with enough rows to span many pages, closes it (the WAL is checkpointed into the
 * file), and returns the file's size. */
static long fill_store(const char *dir, int n_candidates) {
    kiln_store *s = open_store(dir, 0);
    int64_t p = add_problem(s, "p");
    char *source = xmalloc(3000);
    memset(source, 'x', 2999);
    source[2999] = 0;
    for (int i = 0; i < n_candidates; i++) {
        kiln_store_candidate c = {.problem_id = p,
                                  .agent = "random",
                                  .source = source,
                                  .source_hash = (uint64_t)i,
                                  .binary_hash = (uint64_t)i + 1};
        kiln_err err;
        int rc = kiln_store_candidate_insert(s, &c, NULL, &err);
        if (rc)
            fail_msg("%s", err.msg);
        assert_int_equal(kiln_store_event(s, p, "tick", "padding", &err), KILN_OK);
    }
    free(source);
    kiln_store_close(s);
    char *path = xasprintf("%s/kiln.db", dir);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    free(path);
    return (long)st.st_size;
}

static void test_truncated_store_is_a_clear_error(void **state) {
    (void)state;
    long cut_at[] = {100, 4096, -1 /* half */};
    for (size_t k = 0; k < sizeof cut_at / sizeof cut_at[0]; k++) {
        char *dir = make_run_dir();
        long size = fill_store(dir, 200);
        assert_true(size > 100000);
        char *path = xasprintf("%s/kiln.db", dir);
        long cut = cut_at[k] > 0 ? cut_at[k] : size / 2;
        assert_int_equal(truncate(path, cut), 0);
        for (int ro = 0; ro < 2; ro++) {
            kiln_store *s = NULL;
            kiln_err err = {{0}};
            int rc = kiln_store_open(dir, ro, &s, &err);
            assert_int_equal(rc, KILN_ERR_FORMAT);
            assert_null(s);
            assert_non_null(strstr(err.msg, path));
            assert_true(strstr(err.msg, "damaged") || strstr(err.msg, "not a kiln store"));
            print_message("    cut at %ld of %ld bytes (%s): %s\n", cut, size,
                          ro ? "read-only" : "read-write", err.msg);
        }
        free(path);
        remove_run_dir(dir);
    }
}

/* ---- the lock ---- */

static void test_lock_held_by_another_process_names_its_pid(void **state) {
    (void)state;
    char *dir = make_run_dir();
    int to_parent[2];
    assert_int_equal(pipe(to_parent), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        kiln_err err;
        if (kiln_store_lock(dir, &err))
            _exit(2);
        if (write(to_parent[1], "l", 1) != 1)
            _exit(3);
        for (;;)
            pause();
    }
    char c = 0;
    assert_int_equal(read(to_parent[0], &c, 1), 1);
    kiln_err err = {{0}};
    assert_int_equal(kiln_store_lock(dir, &err), KILN_ERR_INVALID);
    char *want = xasprintf("%s is in use by kiln optimize (pid %ld, started ", dir, (long)pid);
    if (strncmp(err.msg, want, strlen(want)) != 0)
        fail_msg("lock message '%s' does not start with '%s'", err.msg, want);
    free(want);
    /* SIGKILL leaves no stale lock: the kernel releases an flock with its last descriptor. */
    assert_int_equal(kill(pid, SIGKILL), 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(kiln_store_lock(dir, &err), KILN_OK);
    assert_int_equal(kiln_store_lock(dir, &err), KILN_OK); /* again, same process: fine */
    char *other = make_run_dir();
    assert_int_equal(kiln_store_lock(other, &err), KILN_ERR_INVALID);
    kiln_store_unlock();
    assert_int_equal(kiln_store_lock(other, &err), KILN_OK);
    kiln_store_unlock();
    kiln_store_unlock(); /* harmless */
    close(to_parent[0]);
    close(to_parent[1]);
    remove_run_dir(other);
    remove_run_dir(dir);
}

/* ---- concurrent writers ---- */

static void test_concurrent_processes_create_and_write_one_store(void **state) {
    (void)state;
    char *dir = make_run_dir();
    enum { N_PROC = 4, N_EACH = 50 };
    pid_t pids[N_PROC];
    for (int k = 0; k < N_PROC; k++) {
        pids[k] = fork();
        assert_true(pids[k] >= 0);
        if (pids[k] == 0) {
            kiln_store *w = NULL;
            kiln_err err;
            if (kiln_store_open(dir, 0, &w, &err)) {
                fprintf(stderr, "child %d: %s\n", k, err.msg);
                _exit(2);
            }
            kiln_store_problem p = {.name = "shared",
                                    .dir = "d",
                                    .share = -1,
                                    .eager_us = -1,
                                    .compile_us = -1,
                                    .sol_us = -1};
            int64_t id;
            if (kiln_store_problem_upsert(w, &p, &id, &err)) {
                fprintf(stderr, "child %d: %s\n", k, err.msg);
                _exit(3);
            }
            for (int i = 0; i < N_EACH; i++) {
                kiln_store_candidate c = {.problem_id = id,
                                          .agent = "random",
                                          .source = "//",
                                          .binary_hash = (uint64_t)(k * 1000 + i + 1)};
                if (kiln_store_candidate_insert(w, &c, NULL, &err)) {
                    fprintf(stderr, "child %d: %s\n", k, err.msg);
                    _exit(4);
                }
            }
            kiln_store_close(w);
            _exit(0);
        }
    }
    for (int k = 0; k < N_PROC; k++) {
        int status = 0;
        assert_int_equal(waitpid(pids[k], &status, 0), pids[k]);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
    kiln_store *s = open_store(dir, 1);
    assert_int_equal(query_int(s, "SELECT count(*) FROM problem"), 1);
    assert_int_equal(query_int(s, "SELECT count(*) FROM candidate"), N_PROC * N_EACH);
    kiln_store_close(s);
    remove_run_dir(dir);
}

/* ---- kill -9 ---- */

static void test_kill9_of_a_writer_loses_no_committed_row(void **state) {
    (void)state;
    char *dir = make_run_dir();
    kiln_store *s = open_store(dir, 0);
    int64_t p = add_problem(s, "p");
    kiln_store_close(s);
    int to_parent[2];
    assert_int_equal(pipe(to_parent), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(to_parent[0]);
        kiln_store *w = NULL;
        kiln_err err;
        if (kiln_store_open(dir, 0, &w, &err))
            _exit(2);
        for (int32_t n = 1;; n++) {
            kiln_store_candidate c = {.problem_id = p,
                                      .agent = "random",
                                      .source = "// a kernel that keeps the WAL busy\n",
                                      .source_hash = (uint64_t)n,
                                      .binary_hash = (uint64_t)n};
            if (kiln_store_candidate_insert(w, &c, NULL, &err) ||
                kiln_store_event(w, p, "tick", "", &err))
                _exit(3);
            /* Reported only after both commits returned. */
            if (write(to_parent[1], &n, sizeof n) != sizeof n)
                _exit(4);
        }
    }
    close(to_parent[1]);
    int32_t n = 0, last = 0;
    while (last < 300 && read(to_parent[0], &n, sizeof n) == sizeof n)
        last = n;
    usleep(2000 + (useconds_t)(getpid() % 3000)); /* let it run on: killed at an arbitrary point */
    assert_int_equal(kill(pid, SIGKILL), 0);
    while (read(to_parent[0], &n, sizeof n) == sizeof n)
        last = n; /* reports already in the pipe are commits too */
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    close(to_parent[0]);

    /* A reader first: it finds the dead writer's WAL and reads through it. */
    s = open_store(dir, 1);
    assert_true(query_int(s, "SELECT count(*) FROM candidate") >= last);
    kiln_store_close(s);
    s = open_store(dir, 0);
    int64_t n_candidates = query_int(s, "SELECT count(*) FROM candidate");
    int64_t n_events = query_int(s, "SELECT count(*) FROM event WHERE kind = 'tick'");
    print_message("    writer killed after %d reported commits: %lld candidates, %lld events\n",
                  last, (long long)n_candidates, (long long)n_events);
    assert_true(n_candidates >= last);
    assert_true(n_events >= last);
    assert_true(n_candidates - n_events <= 1 && n_candidates - n_events >= 0);
    char *ok = query_text(s, "PRAGMA integrity_check");
    assert_string_equal(ok, "ok");
    free(ok);
    kiln_store_close(s);
    remove_run_dir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_creates_a_wal_store_with_schema_version),
        cmocka_unit_test(test_newer_schema_version_is_refused),
        cmocka_unit_test(test_problem_upsert_is_idempotent),
        cmocka_unit_test(test_candidates_are_deduplicated_by_binary_hash),
        cmocka_unit_test(test_results_are_recorded_and_read_back),
        cmocka_unit_test(test_baseline_spread_and_the_speedup_rule),
        cmocka_unit_test(test_nodes_are_inserted_and_updated),
        cmocka_unit_test(test_events_and_meta),
        cmocka_unit_test(test_read_only_sees_committed_rows_beside_an_open_write),
        cmocka_unit_test(test_read_only_open_of_a_missing_store_is_an_io_error),
        cmocka_unit_test(test_a_write_waits_for_another_writer),
        cmocka_unit_test(test_garbage_file_is_a_format_error),
        cmocka_unit_test(test_another_sqlite_database_is_not_a_kiln_store),
        cmocka_unit_test(test_truncated_store_is_a_clear_error),
        cmocka_unit_test(test_lock_held_by_another_process_names_its_pid),
        cmocka_unit_test(test_concurrent_processes_create_and_write_one_store),
        cmocka_unit_test(test_kill9_of_a_writer_loses_no_committed_row),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
