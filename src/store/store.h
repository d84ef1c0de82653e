/* store.h: the run's store: one SQLite database (RUN/kiln.db, WAL mode) holding problems,
 * candidates (source, params, parent, agent, draft), outcomes with evidence, timings, the search
 * tree and events. Everything the dashboard shows and everything needed to resume a run is in it
 * (docs/store.md).
 *
 * Several processes of one `kiln optimize` write to it (agents insert candidates, gates insert
 * results, the coordinator the rest), each through its own connection, each write one short
 * transaction, so that kill -9 at any instant loses nothing that was committed. Two runs never
 * share a store: the coordinator holds RUN/kiln.lock (flock) for the whole run; a second one gets a
 * clear error naming the holder. */
#ifndef KILN_STORE_H
#define KILN_STORE_H

#include "../util/common.h"

typedef struct kiln_store kiln_store;

#define KILN_STORE_SCHEMA_VERSION 1

/* Opens (creating if needed) RUN/kiln.db in WAL mode with a busy timeout, and checks the schema
 * version. A file that is not a kiln store, or is corrupt, is KILN_ERR_FORMAT with a message that
 * says so (never a crash). read_only opens an existing store without writing (the dashboard). */
int kiln_store_open(const char *run_dir, int read_only, kiln_store **out, kiln_err *err);
void kiln_store_close(kiln_store *s);

/* The run lock: KILN_ERR_INVALID "RUN is in use by kiln optimize (pid N) since ..." when held.
 * Released by kiln_store_unlock or when the process dies. */
int kiln_store_lock(const char *run_dir, kiln_err *err);
void kiln_store_unlock(void);

typedef struct {
    int64_t id;
    const char *name;  /* problem name (unique in the run) */
    const char *dir;   /* problem directory */
    double share;      /* share of model time, < 0 unknown */
    double eager_us;   /* reference (PyTorch eager) time, geomean over workloads; < 0 unknown */
    double compile_us; /* torch.compile time when known; < 0 unknown */
    double sol_us;     /* speed-of-light time, geomean; < 0 unknown */
} kiln_store_problem;

/* Inserts the problem or returns the id it already has (resume). */
int kiln_store_problem_upsert(kiln_store *s, const kiln_store_problem *p, int64_t *id,
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

/* Records the gate's verdict: the outcome and the whole result object of docs/gate.md as JSON text;
 * the columns time_us (geomean of medians), spread_pct, sol_pct, score (SOL score, 0 for failures)
 * are extracted from it. One transaction.
 * (Store: the four numbers are taken as passed, kiln_store_result_columns reads them from the JSON;
 * < 0 or NaN is stored as NULL; score is stored as 0 for any outcome but "ok". result_json may be
 * NULL, else it must be a JSON object. KILN_ERR_INVALID when the candidate does not exist.) */
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

/* The underlying connection, for read queries (the search's resume, the dashboard). */
struct sqlite3 *kiln_store_db(kiln_store *s);

/* ---- Additions to the lead's interface (additive; docs/store.md) ---- */

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
 * one of its candidates. Without it the library takes the fastest candidate whose latest result is
 * ok. */
int kiln_store_incumbent_set(kiln_store *s, int64_t problem_id, int64_t candidate_id,
                             kiln_err *err);

/* The numbers kiln_store_result_insert stores, read from a gate result (docs/gate.md): time_us =
 * summary.time_us_geomean, spread_pct = the largest workloads[].time_us.spread_pct, sol_pct =
 * summary.sol_pct_geomean, score = summary.sol_score_geomean. What is absent or not a number is -1
 * (score: 0). Never fails; any pointer may be NULL. */
void kiln_store_result_columns(const char *result_json, double *time_us, double *spread_pct,
                               double *sol_pct, double *score);

/* RUN/kiln.db as opened (for messages). */
const char *kiln_store_path(const kiln_store *s);

#endif
