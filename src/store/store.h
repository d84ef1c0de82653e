/* store.h: the run's store: one SQLite database (RUN/kiln.db, WAL mode) holding problems,
 * candidates (source, params, parent, agent, draft), outcomes with evidence, timings, the search
 * tree, events and the llm agent's exchanges. Everything the dashboard shows and everything needed
 * to resume a run is in it (docs/store.md). The store is the only part of kiln that speaks SQL:
 * every query another part needs is a function below.
 *
 * Several processes of one `kiln optimize` write to it (agents insert candidates, gates insert
 * results, the coordinator the rest), each through its own connection, each write one short
 * transaction, so that kill -9 at any instant loses nothing that was committed. Two runs never
 * share a store: the coordinator holds RUN/kiln.lock (flock) for the whole run; a second one gets a
 * clear error naming the holder. */
#ifndef KILN_STORE_H
#define KILN_STORE_H

#include <cjson/cJSON.h>

#include "../util/common.h"

typedef struct kiln_store kiln_store;

/* 1: the first schema; 2: llm_exchange joins it, latest_result is read per candidate. */
#define KILN_STORE_SCHEMA_VERSION 3

/* ---- opening ---- */

/* Opens (creating if needed) RUN/kiln.db in WAL mode with a busy timeout, checks the schema version
 * and migrates a store of an older version (docs/store.md, "Migrations"). A file that is not a kiln
 * store, or is corrupt, or was written by a newer kiln, is KILN_ERR_FORMAT with a message that says
 * so (never a crash). read_only opens an existing store without writing anything (the dashboard): a
 * missing store is KILN_ERR_IO, and an older store is read as it is (what its version lacks reads
 * as empty). A handle belongs to the process that opened it and to one thread at a time. */
int kiln_store_open(const char *run_dir, int read_only, kiln_store **out, kiln_err *err);
void kiln_store_close(kiln_store *s);

/* 1 when handles may live in several threads of a process (each used by one thread at a time):
 * the SQLite kiln runs on was built with threads. */
int kiln_store_threads_ok(void);

/* RUN/kiln.db as opened (for messages). */
const char *kiln_store_path(const kiln_store *s);

/* The schema version of the file as this handle reads it (KILN_STORE_SCHEMA_VERSION, or lower for
 * a read-only handle on an older store). */
int kiln_store_version(const kiln_store *s);

/* A read snapshot: every query between begin and end sees the same committed state, whatever other
 * processes commit meanwhile. Keep it short: an open snapshot holds back the WAL's checkpoint. end
 * returns KILN_OK, or a failure after which the handle is best closed. */
int kiln_store_read_begin(kiln_store *s, kiln_err *err);
int kiln_store_read_end(kiln_store *s, kiln_err *err);

/* The run lock: KILN_ERR_INVALID "RUN is in use by kiln optimize (pid N) since ..." when held.
 * Released by kiln_store_unlock or when the process dies. */
int kiln_store_lock(const char *run_dir, kiln_err *err);
void kiln_store_unlock(void);

/* ---- the gate's result object (docs/gate.md), read here and nowhere else ---- */

typedef struct {
    char outcome[32];      /* "ok", "mismatch", ...; "" when absent */
    double time_us;        /* summary.time_us_geomean; -1 when absent */
    double spread_pct;     /* the largest workloads[].time_us.spread_pct; -1 when absent */
    double sol_pct;        /* summary.sol_pct_geomean; -1 when absent */
    double score;          /* summary.sol_score_geomean; 0 when absent */
    int score_known;       /* summary.sol_score_geomean is a number */
    double ref_time_us;    /* geomean of workloads[].ref_time_us > 0 (PyTorch eager); -1 absent */
    double ref_spread_pct; /* the largest spread of those eager times; -1 when none was measured
                              (a baseline timed once, at capture) */
} kiln_store_summary;

/* Reads the numbers of a gate result; never fails (anything absent or not a number reads as the
 * defaults above). result may be NULL. */
void kiln_store_summary_read(const cJSON *result, kiln_store_summary *out);
/* The same from JSON text (NULL or text that does not parse reads as nothing). */
void kiln_store_summary_parse(const char *result_json, kiln_store_summary *out);
/* The median time of each workload of an ok result into medians[workload index] (cap entries;
 * workloads not timed keep what medians held): what a challenger races against. Returns the number
 * of entries that are meaningful (highest index + 1), 0 for a result that is not ok. */
int kiln_store_summary_medians(const cJSON *result, double *medians, int cap);

/* What a table may say about eager_us / kiln_us. */
enum {
    KILN_SPEEDUP_UNKNOWN,         /* a time is missing: "-" */
    KILN_SPEEDUP_SUPPORTED,       /* the figure, spreads within the limit: "2.50x" */
    KILN_SPEEDUP_NOISY,           /* the figure holds, but a spread is over the limit: "2.50x!" */
    KILN_SPEEDUP_NOT_SIGNIFICANT, /* the interval the spreads allow contains 1: "n.s." */
    KILN_SPEEDUP_NOISY_BASELINE   /* eager's spread is over the limit and the interval holds 1:
                                     "noisy" */
};
typedef struct {
    int verdict;  /* KILN_SPEEDUP_* */
    double value; /* eager / kiln when the verdict shows a figure, else -1 */
    double ratio; /* eager / kiln whatever the verdict (for sorting and JSON), -1 unknown */
} kiln_store_speedup;

/* The eager baseline a winner is compared with: the one its gate result carries with a spread
 * (timed beside the candidate), else the problem's own (capture's, timed once: spread unknown),
 * else the result's without a spread. *eager_us and *spread_pct are -1 when unknown. */
void kiln_store_baseline_pick(double problem_eager_us, const kiln_store_summary *sum,
                              double *eager_us, double *spread_pct);

/* The one rule for a speedup shown anywhere: times < 0 are unknown, spreads < 0 unknown (taken as
 * 0: a baseline timed once cannot be refused for its noise, only shown without a spread). */
void kiln_store_speedup_judge(double eager_us, double eager_spread_pct, double kiln_us,
                              double kiln_spread_pct, kiln_store_speedup *out);
/* The verdict as a table cell ("2.50x", "2.50x!", "n.s.", "noisy", "-") in buf; returns buf. */
const char *kiln_store_speedup_text(const kiln_store_speedup *v, char *buf, size_t cap);
/* The verdict's name for JSON: "supported", "noisy", "not_significant", "noisy_baseline",
 * "unknown". */
const char *kiln_store_speedup_name(int verdict);

/* ---- writes ---- */

typedef struct {
    int64_t id;
    const char *name;  /* problem name (unique in the run) */
    const char *dir;   /* problem directory */
    double share;      /* share of model time, < 0 unknown */
    double eager_us;   /* reference (PyTorch eager) time, geomean over workloads; < 0 unknown */
    double compile_us; /* torch.compile time when known; < 0 unknown */
    double sol_us;     /* speed-of-light time, geomean; < 0 unknown */
    const char *content_hash; /* capture's "kiln.content_hash" of the problem files; NULL unknown */
} kiln_store_problem;

/* Inserts the problem or returns the id it already has (resume). A problem is its content: when
 * the row of that name holds another content hash than p's (both known), the row's candidates and
 * results belong to another problem, and the upsert is refused (KILN_ERR_INVALID, writing
 * nothing). A known hash is recorded where the row had none. */
int kiln_store_problem_upsert(kiln_store *s, const kiln_store_problem *p, int64_t *id,
                              kiln_err *err);

/* Records eager_us (> 0) as the problem's eager time when it has none yet. */
int kiln_store_problem_eager_default(kiln_store *s, int64_t problem_id, double eager_us,
                                     kiln_err *err);

typedef struct {
    int64_t id; /* set by insert */
    int64_t problem_id;
    int64_t parent_id; /* candidate id of the parent, 0 for children of the root */
    int64_t node_id;   /* search-tree node */
    const char
        *agent; /* "geometry", "vector", "algorithm", "fusion", "random", "llm", "submitted", ... */
    const char *family;
    const char *params;      /* "THREADS=256 VEC=8" or "" */
    int draft;               /* 0 = main tree, k > 0 = draft number */
    const char *source;      /* the whole candidate file */
    uint64_t source_hash;    /* FNV-1a of the source */
    uint64_t binary_hash;    /* FNV-1a of the compiled binary, 0 when not compiled */
    const char *compile_log; /* may be NULL */
} kiln_store_candidate;

/* Inserts a candidate. KILN_ERR_INVALID when (problem_id, binary_hash) already exists (dedupe),
 * with *id set to the existing candidate. */
int kiln_store_candidate_insert(kiln_store *s, kiln_store_candidate *c, int64_t *id, kiln_err *err);

/* Records the gate's verdict: the outcome and the whole result object of docs/gate.md as JSON text,
 * with the columns time_us (geomean of medians), spread_pct, sol_pct and score (SOL score) as
 * passed (kiln_store_summary_read reads them from the result); < 0 or NaN is stored as NULL, and
 * score as 0 for any outcome but "ok". result_json may be NULL, else it must be a JSON object.
 * KILN_ERR_INVALID when the candidate does not exist. One transaction. */
int kiln_store_result_insert(kiln_store *s, int64_t candidate_id, const char *outcome,
                             const char *result_json, double time_us, double spread_pct,
                             double sol_pct, double score, kiln_err *err);

/* Search tree persistence: one row per node, updated in place (visits, value). */
typedef struct {
    int64_t id; /* set by insert */
    int64_t problem_id;
    int64_t parent_id;    /* 0 for the root */
    int64_t candidate_id; /* 0 for the root and for nodes not yet evaluated */
    int draft;
    const char *family;
    const char *params;
    int64_t visits;
    double value_sum;
    double best;        /* best reward below this node */
    const char *status; /* "open", "pending", "done", "failed" */
} kiln_store_node;

int kiln_store_node_insert(kiln_store *s, kiln_store_node *n, kiln_err *err);
int kiln_store_node_update(kiln_store *s, const kiln_store_node *n, kiln_err *err);

/* Events (the dashboard's live feed): kind is "start", "incumbent", "draft", "promote",
 * "gate_restart", "done", ...; message is free text; problem_id 0 when run-wide. */
int kiln_store_event(kiln_store *s, int64_t problem_id, const char *kind, const char *message,
                     kiln_err *err);

/* Run-wide key/value metadata (backend, device, started, budget...). */
int kiln_store_meta_set(kiln_store *s, const char *key, const char *value, kiln_err *err);
/* Heap copy or NULL. */
char *kiln_store_meta_get(kiln_store *s, const char *key);

/* Meta keys that `kiln optimize` sets and that the library writer and the dashboard read. The key
 * "schema_version" belongs to the store itself and cannot be set. */
#define KILN_META_BACKEND "backend"         /* "cuda" or "cpu" */
#define KILN_META_DEVICE_NAME "device_name" /* "NVIDIA H200" */
#define KILN_META_DEVICE_UUID "device_uuid" /* "GPU-..." */
#define KILN_META_DEVICE_CC "device_cc"     /* compute capability "9.0" ("0.0" on cpu) */
#define KILN_META_KILN_VERSION "kiln_version"
#define KILN_META_STARTED "started_unix_s" /* wall clock, seconds since the epoch, as text */

/* Records the coordinator's (noise-aware) choice of a problem's incumbent: the candidate the
 * library ships for it. KILN_ERR_INVALID when the problem does not exist or the candidate is not
 * one of its candidates. */
int kiln_store_incumbent_set(kiln_store *s, int64_t problem_id, int64_t candidate_id,
                             kiln_err *err);

/* One request to the llm agent's endpoint and what came of it (docs/agents.md: llm_exchange). */
typedef struct {
    int64_t problem_id;       /* 0 unknown */
    int64_t parent_id;        /* the candidate the request was about; 0 the problem's root */
    const char *model;        /* the served model asked */
    const char *request_json; /* the body sent, exactly */
    const char *reply_text;   /* what is kept of the reply; NULL when none came */
    const char *status;       /* "kernel", "no_kernel", "timeout", "http_error", ... */
    const char *reason;       /* for people */
    int http_status;          /* of the last attempt, 0 none */
    int attempts;
    int64_t prompt_tokens, completion_tokens; /* the reply's usage, < 0 unknown */
    int64_t tokens;                           /* counted against the run's budget */
    double latency_ms;
} kiln_store_llm_exchange;

/* Inserts an exchange; *id gets its id. */
int kiln_store_llm_exchange_insert(kiln_store *s, const kiln_store_llm_exchange *x, int64_t *id,
                                   kiln_err *err);
/* Records which candidate an exchange's kernel became (exchange_id <= 0: nothing to do). */
int kiln_store_llm_exchange_link(kiln_store *s, int64_t exchange_id, int64_t candidate_id,
                                 kiln_err *err);

/* ---- reads for the search, the library, submit and the llm agent ---- */

/* A problem row; strings are the caller's to free with kiln_store_problem_row_free. */
typedef struct {
    int64_t id;
    char *name, *dir;
    double share, eager_us, compile_us, sol_us; /* < 0 unknown */
    int64_t incumbent_id;                       /* 0 none */
    char *content_hash; /* NULL unknown (or a version-2 store read as it is) */
} kiln_store_problem_row;
void kiln_store_problem_row_free(kiln_store_problem_row *p);

/* The problem called name (*found 0 when there is none). */
int kiln_store_problem_find(kiln_store *s, const char *name, kiln_store_problem_row *out,
                            int *found, kiln_err *err);
/* The problem with id (*found 0 when there is none). */
int kiln_store_problem_get(kiln_store *s, int64_t id, kiln_store_problem_row *out, int *found,
                           kiln_err *err);
/* Every problem, by id: *rows (free each row, then the array) and *n. */
int kiln_store_problem_list(kiln_store *s, kiln_store_problem_row **rows, int *n, kiln_err *err);

/* A candidate row; strings are the caller's to free with kiln_store_candidate_row_free. */
typedef struct {
    int64_t id, problem_id, parent_id, node_id; /* 0 for NULL */
    int draft;
    char *agent, *family, *params, *source, *compile_log; /* family, compile_log may be NULL */
    uint64_t source_hash, binary_hash;                    /* binary 0 when not compiled */
} kiln_store_candidate_row;
void kiln_store_candidate_row_free(kiln_store_candidate_row *c);

/* The candidate with id (*found 0 when there is none). */
int kiln_store_candidate_get(kiln_store *s, int64_t id, kiln_store_candidate_row *out, int *found,
                             kiln_err *err);
/* The candidate of problem_id whose binary hash is binary_hash: *id, 0 when none. */
int kiln_store_candidate_by_binary(kiln_store *s, int64_t problem_id, uint64_t binary_hash,
                                   int64_t *id, kiln_err *err);

/* A result row; result_json is the caller's to free with kiln_store_result_row_free. */
typedef struct {
    int64_t id, candidate_id, problem_id;
    char outcome[32];
    double time_us, spread_pct, sol_pct; /* -1 when NULL */
    double score;
    char *result_json; /* NULL when none */
} kiln_store_result_row;
void kiln_store_result_row_free(kiln_store_result_row *r);

/* A candidate's verdict: its latest result (the view latest_result). *found 0 when it has none. */
int kiln_store_result_latest(kiln_store *s, int64_t candidate_id, kiln_store_result_row *out,
                             int *found, kiln_err *err);
/* The result with id (*found 0 when there is none). */
int kiln_store_result_get(kiln_store *s, int64_t result_id, kiln_store_result_row *out, int *found,
                          kiln_err *err);

/* The winner of a problem, what the library ships and the dashboard shows as best: its incumbent
 * (problem.incumbent_id) when the incumbent's verdict is ok and timed, else the fastest candidate
 * whose verdict is ok and timed (ties: the lower id). */
typedef struct {
    int64_t candidate_id; /* 0: no candidate of the problem is ok */
    int64_t result_id;    /* the verdict that makes it the winner */
    double time_us;
    int64_t incumbent_id; /* problem.incumbent_id, 0 none (the winner differs from it when the
                             incumbent's verdict is not ok) */
} kiln_store_winner;
int kiln_store_winner_get(kiln_store *s, int64_t problem_id, kiln_store_winner *w, kiln_err *err);

/* The tree node a candidate belongs to when that node is in the store: *node_id, 0 when none. */
int kiln_store_candidate_node(kiln_store *s, int64_t candidate_id, int64_t *node_id, kiln_err *err);
/* The main tree's root of a problem (no parent, no family, draft 0): *node_id, 0 when none. */
int kiln_store_node_root(kiln_store *s, int64_t problem_id, int64_t *node_id, kiln_err *err);

/* A node row as a resumed run reads it; family and params are the caller's (row_free). */
typedef struct {
    int64_t id, parent_id, candidate_id; /* 0 for NULL */
    int draft;
    char *family, *params;
} kiln_store_node_row;
void kiln_store_node_row_free(kiln_store_node_row *n);
/* A problem's nodes, by id: *rows (free each row, then the array) and *n. */
int kiln_store_node_list(kiln_store *s, int64_t problem_id, kiln_store_node_row **rows, int *n,
                         kiln_err *err);

/* A candidate with its verdict, as the search reads it back. */
typedef struct {
    int64_t candidate_id, node_id; /* node_id 0 for NULL */
    uint64_t source_hash, binary_hash;
    int draft;
    int64_t result_id;       /* its latest result; 0: no verdict yet */
    int ok;                  /* the verdict's outcome is ok */
    double time_us, sol_pct; /* -1 unknown */
    double score;            /* kiln_store_summary's sol_score_geomean of the verdict, -1 unknown */
    int score_known;
} kiln_store_verdict;

/* One candidate's verdict (*found 0 when the candidate has none). */
int kiln_store_verdict_get(kiln_store *s, int64_t candidate_id, kiln_store_verdict *v, int *found,
                           kiln_err *err);
/* Every candidate of a problem with its verdict, by id: *rows (free) and *n. */
int kiln_store_verdict_list(kiln_store *s, int64_t problem_id, kiln_store_verdict **rows, int *n,
                            kiln_err *err);

/* The "device" object of the most recent result that has one (it carries the measured ceilings),
 * results of prefer_problem_id (0: none preferred) first: a heap JSON text, or NULL when none. */
int kiln_store_latest_device(kiln_store *s, int64_t prefer_problem_id, char **device_json,
                             kiln_err *err);

/* What went wrong below a node, for the llm agent's prompt: the failed children of parent_id (0:
 * the problem's root) with their verdicts, and the model's replies about that node that held no
 * kernel, most recent first. */
typedef struct {
    int64_t candidate_id; /* 0 for a reply without a kernel */
    char *outcome;        /* the verdict's outcome, or the exchange's status ("no_kernel") */
    char *result_json;    /* the verdict (NULL for a reply) */
    char *compile_log;    /* the candidate's (NULL for a reply) */
    char *source;         /* the candidate's (NULL for a reply) */
    char *reason;         /* the exchange's reason (NULL for a candidate) */
} kiln_store_failure;
void kiln_store_failure_free(kiln_store_failure *f);
int kiln_store_llm_failures(kiln_store *s, int64_t problem_id, int64_t parent_id, int max,
                            kiln_store_failure **rows, int *n, kiln_err *err);
/* The tokens of every exchange of the run. */
int kiln_store_llm_tokens(kiln_store *s, int64_t *tokens, kiln_err *err);

/* ---- reads for the dashboard (dash.c): rows as JSON objects, keys as docs/dashboard.md names ----
 */

/* The append-only tables' largest ids, and the latest node update: where a live feed stands. */
typedef struct {
    int64_t candidate, result, event;
    double node_unix_s;
} kiln_store_heads;
int kiln_store_heads_read(kiln_store *s, kiln_store_heads *h, kiln_err *err);
/* SQLite's data_version: it changes when another connection committed. */
int kiln_store_data_version(kiln_store *s, int64_t *version, kiln_err *err);

/* When the run started and whether it is over: started_unix_s is meta started_unix_s, else meta
 * created_unix_s, else the first problem's creation (-1 none); the latest run-wide event's kind
 * ("" none) and time; meta "budget" (0 unset). searched_s is the time searches actually ran: the
 * sum over every `kiln optimize` of its "start" to its "done" event (preparing problems, and the
 * time between runs, do not count); one without a "done" ended with its last result (killed), or,
 * the latest, runs now (searching) unless no result came for KILN_STORE_SEARCH_QUIET_S. */
#define KILN_STORE_SEARCH_QUIET_S 60.0
typedef struct {
    double started_unix_s;
    char last_event_kind[32];
    double last_event_unix_s;
    long budget;
    double searched_s;
    int searching;
} kiln_store_run_state;
int kiln_store_run_state_read(kiln_store *s, kiln_store_run_state *rs, kiln_err *err);

/* The meta table as one object. */
int kiln_store_dash_meta(kiln_store *s, cJSON **out, kiln_err *err);
/* Adds to into: candidates, results (counts), candidates_last_min (created after since_unix_s),
 * last_candidate_unix_s, last_result_unix_s; *n_candidates gets the count of candidates. */
int kiln_store_dash_activity(kiln_store *s, double since_unix_s, cJSON *into, int64_t *n_candidates,
                             kiln_err *err);
/* Candidates counted by verdict, of one problem (0: all): adds OUTCOME: N to into; *judged gets
 * the sum. */
int kiln_store_dash_outcomes(kiln_store *s, int64_t problem_id, cJSON *into, int64_t *judged,
                             kiln_err *err);
/* 1 in *exists when the problem exists. */
int kiln_store_problem_exists(kiln_store *s, int64_t id, int *exists, kiln_err *err);
/* Problem rows (all, or only_id's), hottest first: id, name, dir, share, eager_us, compile_us,
 * sol_us, incumbent_id, n_candidates, n_done_events, skip_reason (why the latest `kiln optimize`
 * did not search it, from its "skip" event after the run-wide "prepare"; null when searched). */
int kiln_store_dash_problems(kiln_store *s, int64_t only_id, cJSON **rows, kiln_err *err);
/* A problem's best, the winner's verdict (result_id from kiln_store_winner_get): candidate_id,
 * time_us, sol_pct, score, spread_pct, params, agent, draft, family; *sum gets that verdict's
 * summary (its eager baseline and the baseline's spread among it). *best NULL (and *sum empty)
 * when there is no such result. */
int kiln_store_dash_best(kiln_store *s, int64_t result_id, cJSON **best, kiln_store_summary *sum,
                         kiln_err *err);

/* A page of rows newest first: appends up to limit items; *next is the id to page on with
 * before= when the page is full, else 0. */
typedef struct {
    int64_t problem_id; /* 0: any */
    int64_t before;     /* 0: from the newest */
    long limit;
    const char *outcome; /* candidates: a verdict or "waiting"; failures: the outcome */
    const char *agent;   /* candidates */
    long draft;          /* candidates; < 0: any */
    const char *kind;    /* events */
} kiln_store_page;
/* Events: id, problem_id, problem (name), kind, message, created_unix_s (with_problem 0 leaves
 * problem_id and problem out). */
int kiln_store_dash_events(kiln_store *s, const kiln_store_page *pg, int with_problem, cJSON *items,
                           int64_t *next, kiln_err *err);
/* Candidates with their verdicts: id, problem_id, problem, parent_id, node_id, agent, family,
 * params, draft, created_unix_s, outcome, time_us, sol_pct, score. */
int kiln_store_dash_candidates(kiln_store *s, const kiln_store_page *pg, cJSON *items,
                               int64_t *next, kiln_err *err);
/* Failed verdicts grouped: one {outcome, count} per failure outcome (pg->outcome: that one only),
 * most frequent first; *total their sum. */
int kiln_store_dash_failure_groups(kiln_store *s, const kiln_store_page *pg, cJSON *groups,
                                   int64_t *total, kiln_err *err);
/* Failed verdicts of pg->outcome: result_id, candidate_id, problem_id, problem, agent, family,
 * params, draft, created_unix_s, outcome, evidence (parsed). */
int kiln_store_dash_failures(kiln_store *s, const kiln_store_page *pg, cJSON *items, int64_t *next,
                             kiln_err *err);

/* A problem's verdicts in order after result id after: the points of its curve (id, candidate_id,
 * problem_id, outcome, time_us, spread_pct, sol_pct, score, created_unix_s, draft, agent, params);
 * *n the points added. */
int kiln_store_dash_curve(kiln_store *s, int64_t problem_id, int64_t after, long limit,
                          cJSON *points, long *n, kiln_err *err);
/* Verdicts after result id after, of every problem, as the points above (the live feed). */
int kiln_store_dash_new_results(kiln_store *s, int64_t after, long limit, cJSON *points,
                                kiln_err *err);
/* Candidates after id after (the live feed): id, problem_id, parent_id, node_id, agent, family,
 * params, draft, created_unix_s. */
int kiln_store_dash_new_candidates(kiln_store *s, int64_t after, long limit, cJSON *rows,
                                   kiln_err *err);
/* Events after id after (the live feed): id, problem_id, kind, message, created_unix_s. */
int kiln_store_dash_new_events(kiln_store *s, int64_t after, long limit, cJSON *rows,
                               kiln_err *err);
/* The problems whose tree nodes were updated after since_unix_s, as ids added to ids. */
int kiln_store_dash_trees_changed(kiln_store *s, double since_unix_s, cJSON *ids, kiln_err *err);

/* A problem's tree: *exists, its node and candidate counts, its incumbent (0 none), and up to limit
 * nodes most visited first (from_nodes), or, for a problem whose tree was not persisted, its
 * candidates by parent as nodes: id, parent_id, candidate_id, draft, family, params, visits, value,
 * best, status, outcome, time_us, score. */
typedef struct {
    int exists;
    int64_t n_nodes, n_candidates, incumbent_id;
} kiln_store_tree_info;
int kiln_store_dash_tree(kiln_store *s, int64_t problem_id, long limit, kiln_store_tree_info *info,
                         cJSON *nodes, kiln_err *err);

/* A candidate's page: *out the candidate (id, problem_id, problem, parent_id, node_id, agent,
 * family, params, draft, source, source_hash, binary_hash, compile_log, created_unix_s,
 * is_incumbent), NULL when there is none. */
int kiln_store_dash_candidate(kiln_store *s, int64_t id, cJSON **out, kiln_err *err);
/* Its results in order (id, outcome, time_us, spread_pct, sol_pct, score, created_unix_s, result
 * parsed). */
int kiln_store_dash_candidate_results(kiln_store *s, int64_t id, cJSON *results, kiln_err *err);
/* A candidate with its verdict (id, agent, params, [source,] outcome, time_us), NULL when none. */
int kiln_store_dash_candidate_brief(kiln_store *s, int64_t id, int with_source, cJSON **out,
                                    kiln_err *err);
/* Its children with their verdicts (id, agent, params, outcome, time_us), up to 200. */
int kiln_store_dash_children(kiln_store *s, int64_t id, cJSON *children, kiln_err *err);
/* The llm exchanges about candidate id: the one that made it (role "made") and those asked about it
 * that made nothing ("asked"): id, role, model, status, reason, http_status, attempts, tokens,
 * latency_ms, created_unix_s, request (parsed, null when longer than text_max), reply (cut to
 * text_max characters), truncated. Nothing in a store older than llm_exchange. */
int kiln_store_dash_llm_exchanges(kiln_store *s, int64_t id, int text_max, cJSON *list,
                                  kiln_err *err);
/* Each problem's per_problem fastest ok verdicts (problem 0: every problem): candidate_id,
 * problem_id, problem, result (parsed), rank. */
int kiln_store_dash_fastest(kiln_store *s, int64_t problem_id, long per_problem, cJSON *rows,
                            kiln_err *err);

#endif
