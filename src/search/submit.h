/* submit.h: the submit service, what `kiln submit` and `kiln llm-try` do beyond their arguments:
 * opening a run for one of its problems (the run lock, the store, the problem, its reference data)
 * and recording a kernel from outside the search as a gated candidate, child of the problem's root
 * or of a given candidate, which becomes the incumbent when it is right and faster. */
#ifndef KILN_SEARCH_SUBMIT_H
#define KILN_SEARCH_SUBMIT_H

#include <cjson/cJSON.h>

#include "../gate/gate.h"
#include "../store/store.h"

typedef struct {
    char *run_dir; /* absolute */
    char *backend; /* "cuda" or "cpu" */
    int cuda;
    kiln_store *store; /* opened read-write; the run lock is held while it is open */
    kiln_problem *p;
    kiln_refdata *ref;
    int64_t problem_id; /* in the store */
    kiln_gate_options gate;
    int quiet; /* no progress on stderr */
} kiln_submit_run;

/* Opens RUN for PROBLEM (a problem directory, or a name in RUN/problems or in RUN's store): takes
 * the run lock, opens (creating) the store, finds or adds the problem's row, and finds or builds
 * its reference data. backend NULL: the store's, else cuda when a driver is present, else cpu; one
 * that differs from the store's is refused. gate is copied (backend set here). Returns 0, or the
 * exit status with err filled: 2 for bad input (unknown problem, a run in use, another backend, no
 * reference data), 1 for a store that fails. kiln_submit_close undoes whatever was done. */
int kiln_submit_open(const char *run_dir, const char *problem, const char *backend,
                     const char *ref_dir, const kiln_gate_options *gate, int quiet,
                     kiln_submit_run *r, kiln_err *err);
void kiln_submit_close(kiln_submit_run *r);

typedef struct {
    int64_t candidate_id;
    int duplicate;              /* the same binary was there: candidate_id is the earlier one */
    int incumbent;              /* this candidate is the problem's incumbent now */
    int64_t previous_incumbent; /* the incumbent before, 0 when none */
    double previous_time_us;    /* its time, < 0 unknown */
    cJSON *result;              /* the gate's result object (docs/gate.md); the caller frees */
} kiln_submit_outcome;

/* Gates source (through kiln_gate_eval, the same proof and timing as every candidate), then
 * records it: a tree node under the parent's node (the root's when parent_candidate is 0), the
 * candidate (agent as given, family NULL), its file RUN/candidates/<id>.<cu|c>, the verdict, and,
 * when it is ok and faster than the incumbent (or there is none), the incumbent with an event. A
 * binary the problem already has is not gated again: out->duplicate, with the earlier candidate and
 * its latest verdict. Returns 0, 2 when the gate gave no verdict (err says why; nothing is
 * recorded), 1 when the store failed. */
int kiln_submit_source(kiln_submit_run *r, const char *agent, int64_t parent_candidate,
                       const char *source, kiln_submit_outcome *out, kiln_err *err);

/* The problem's winner (kiln_store_winner_get: the incumbent when its verdict is ok, else the
 * fastest ok candidate); 0 when none. *time_us gets its time (< 0 unknown). */
int64_t kiln_submit_incumbent(kiln_submit_run *r, double *time_us);

#endif
