/* gate.h: the gate proves and times one candidate kernel on every workload of a problem, in an
 * isolated child process with a watchdog; outcomes are data (docs/gate.md is the contract). */
#ifndef KILN_GATE_H
#define KILN_GATE_H

#include <cjson/cJSON.h>

#include "../backend/backend.h"
#include "../formats/refdata.h"

typedef enum {
    KILN_OUTCOME_OK,
    KILN_OUTCOME_COMPILE_ERROR,
    KILN_OUTCOME_MISMATCH,
    KILN_OUTCOME_UNWRITTEN,
    KILN_OUTCOME_NAN,
    KILN_OUTCOME_TIMEOUT,
    KILN_OUTCOME_CRASHED,
    KILN_OUTCOME_RESOURCE,
    KILN_OUTCOME_COUNT
} kiln_outcome;

/* "ok", "compile_error", ... */
const char *kiln_outcome_name(kiln_outcome o);
/* Parses a name; returns -1 when unknown. */
int kiln_outcome_parse(const char *name);

typedef struct {
    const char *backend; /* "cuda" or "cpu" */
    int device;
    int iters;        /* timed runs per workload; <= 0: the backend's default */
    int warmup;       /* untimed runs before timing; < 0: the backend's default */
    int max_sets;     /* input sets proved per workload; <= 0: all in the reference data */
    uint64_t seed;    /* picks the audit iteration */
    double timeout_s; /* the longest one run of the candidate (with its check) may take */
    int no_time;      /* prove only */
} kiln_gate_options;

void kiln_gate_options_default(kiln_gate_options *opt);

/* ---- proof of one output (prove.c) ---- */

/* The verdict on one output buffer against its reference. */
typedef struct {
    kiln_outcome outcome; /* OK, UNWRITTEN, NAN or MISMATCH */
    int64_t n_elements;
    int64_t n_unwritten, first_unwritten;
    int64_t n_bad, first_bad; /* elements outside atol + rtol * |ref| */
    double first_bad_value, first_bad_expected;
    int64_t nan_index; /* first non-finite value where the reference is finite (or differs) */
    double nan_value, nan_expected;
    double max_abs_err, rel_l2_err;
} kiln_check;

/* Fills n elements at buf with the poison pattern for dtype; round 0 or 1 selects the pattern
 * (integer types use two patterns so that a value that equals one of them is not taken for
 * unwritten). */
void kiln_poison_fill(kiln_dtype t, void *buf, size_t n, int round);
/* 1 when element i of buf holds the poison pattern of round. */
int kiln_poison_is(kiln_dtype t, const void *buf, size_t i, int round);

/* Checks out against ref. written_mask, when non-NULL, has one byte per element (1 = written in
 * some poison round); when NULL, the poison of round 0 is looked for in out itself. */
void kiln_check_output(kiln_dtype t, const void *out, const void *ref, size_t n,
                       const unsigned char *written_mask, const kiln_tolerance *tol,
                       kiln_check *res);

/* ---- speed of light (sol.c) ---- */

typedef struct {
    double copy_gbps;  /* bytes read + written per second / 1e9 */
    double fma_gflops; /* fp32 FMA rate, 2 flops per FMA, / 1e9 */
} kiln_ceilings;

/* Measured once per device, cached in $XDG_CACHE_HOME/kiln/ceilings/<uuid>.json. */
int kiln_ceilings_get(kiln_backend *be, kiln_ceilings *out, kiln_err *err);

/* The SOL score of docs/gate.md, clamped to (0, 1]; -1 when t_base is unknown (< 0). */
double kiln_sol_score(double t_us, double t_sol_us, double t_base_us);

/* ---- evaluation ---- */

/* Evaluates in this process (the gate child runs this) and reports progress and results as lines on
 * fd (see isolate.c for the protocol). Returns the outcome. */
kiln_outcome kiln_gate_eval_here(const kiln_problem *p, const kiln_refdata *ref,
                                 const char *kernel_path, const char *source,
                                 const kiln_gate_options *opt, int fd);

/* Evaluates in a forked child with a watchdog. Returns the result object of docs/gate.md
 * ("--json"), never NULL. */
cJSON *kiln_gate_eval(const kiln_problem *p, const kiln_refdata *ref, const char *kernel_path,
                      const kiln_gate_options *opt);

/* ---- the persistent gate (isolate.c) ---- */

/* A problem with its reference data, as the gate child knows them. */
typedef struct {
    const kiln_problem *p;
    const kiln_refdata *ref;
} kiln_gate_pair;

/* The gate child of a session: opens the backend once, then evaluates one candidate per command
 * line read from cmd_fd ("eval PAIR ITERS WARMUP MAX_SETS SEED NO_TIME TIMEOUT PATH") and ends each
 * evaluation with a "done" line on fd. Returns at end of file on cmd_fd, when the backend cannot
 * be opened, or after a crashed outcome (the process then exits: its context may be lost). */
void kiln_gate_serve(const kiln_gate_pair *pairs, int n_pairs, const kiln_gate_options *opt,
                     int cmd_fd, int fd);

/* A gate session keeps one child (and its device context, ceilings and the host copies of the
 * input sets) alive from one candidate to the next, where kiln_gate_eval forks one per candidate.
 * The child is started on first use and again after any crash, timeout or fatal; a candidate that
 * crashed or timed out in a child that had already run others is evaluated once more in a fresh
 * child, so that a verdict never comes from damage an earlier candidate left behind. Problems and
 * reference data passed to eval must stay alive and unchanged while the session lives. */
typedef struct kiln_gate_session kiln_gate_session;

/* backend and device come from opt; later evals may vary the other fields. */
kiln_gate_session *kiln_gate_session_new(const kiln_gate_options *opt);
/* As kiln_gate_eval, through the session's child; the result also says "gate_child": "fresh" or
 * "reused". */
cJSON *kiln_gate_session_eval(kiln_gate_session *s, const kiln_problem *p, const kiln_refdata *ref,
                              const char *kernel_path, const kiln_gate_options *opt);
/* Stops the child (end of file on its commands, then SIGKILL after a grace period). */
void kiln_gate_session_free(kiln_gate_session *s);

/* ---- reference data (refs.c) ---- */

/* Finds the reference data for p on device ("cpu"/"cuda") or builds it with the Python helper.
 * ref_dir (optional) overrides the location. quiet_stdout sends the helper's progress to stderr. */
int kiln_refs_ensure(const kiln_problem *p, const char *device, const char *ref_dir,
                     int quiet_stdout, kiln_refdata **out, kiln_err *err);

/* The Python interpreter kiln uses: $KILN_PYTHON, else <kiln_home>/.venv/bin/python, else python3.
 */
const char *kiln_python(void);

#endif
