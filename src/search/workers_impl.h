/* workers_impl.h: what the worker processes' files share: workers.c's plumbing and agent steps,
 * used by the loops of worker_agent.c (the built-in agents), worker_llm.c (the llm agent) and
 * worker_gate.c (the gates). */
#ifndef KILN_WORKERS_IMPL_H
#define KILN_WORKERS_IMPL_H

#include "optimize_impl.h"

/* ---- the process ---- */

/* Ignores Ctrl-C (the coordinator stops workers in order), takes SIGTERM as "finish", and asks for
 * SIGTERM when the coordinator dies. */
void kiln_opt_worker_signals(const kiln_opt_ctx *c);
/* 1 once the worker was asked to finish (SIGTERM or the blackboard's stop flag). */
int kiln_opt_stopping(kiln_opt_ctx *c);
/* Sleeps ms milliseconds (less when SIGTERM comes). */
void kiln_opt_nap_ms(int ms);
/* The worker's own connection to the run's store (a connection never crosses a fork); a worker
 * that cannot open it after a few tries says why and exits with status 3. who names it. */
kiln_store *kiln_opt_worker_store(kiln_opt_ctx *c, const char *who);

/* ---- the steps both kinds of agent take ---- */

/* A node an agent selected, and what it needs of it (copied under the lock). */
typedef struct {
    int pi;     /* blackboard problem */
    int parent; /* blackboard node */
    kiln_mcts_pick pick;
    int parent_family;
    int64_t parent_params[KILN_BB_MAX_PARAMS];
    int64_t parent_store_node;
    int64_t parent_candidate;
    int incumbent_family;
} kiln_opt_agent_step;

/* A child an agent reserved on the blackboard (kiln_mcts_child_add: CREATING, held by the worker)
 * together with what it made. */
typedef struct {
    int child;
    const kiln_family *family; /* NULL: a kernel no family made (the llm agent) */
    const int64_t *point;      /* the family's point (with a family) */
    const char *agent;         /* candidate.agent in the store */
    const char *src;
    uint64_t source_hash, bin_hash;
    int compiled, compile_failed; /* kiln_opt_candidate_hash()'s answers */
    const char *compile_log;
} kiln_opt_agent_made;

/* Under the lock: 1 when the gates' queue has a free slot and the agents are not too far ahead of
 * the gates. */
int kiln_opt_gates_have_room(kiln_opt_ctx *c);
/* Under the lock: marks st->pick's node held by worker and copies what the agent needs of it. */
void kiln_opt_agent_hold(kiln_opt_ctx *c, int worker, kiln_opt_agent_step *st);
/* The binary hash of a candidate's source (the cubin's on cuda, compiled here; the source's on
 * cpu), with NVRTC's answers (see workers.c). */
uint64_t kiln_opt_candidate_hash(kiln_opt_ctx *c, const char *src, uint64_t source_hash,
                                 int *compile_failed, char **compile_log, int *compiled);
/* Records a reserved child in the store and queues it for the gate (or answers a compile error at
 * once). Returns the candidate's id, or 0 when it was not recorded or the run stopped first. */
int64_t kiln_opt_agent_record(kiln_opt_ctx *c, kiln_store *s, int worker,
                              const kiln_opt_agent_step *st, const kiln_opt_problem *pr,
                              const kiln_opt_agent_made *m);
/* Under the lock: gives back what worker holds (a node it was making, a selection's virtual loss).
 */
void kiln_opt_agent_release_held(kiln_opt_ctx *c, int worker);
/* The end of an agent process: what it holds goes back, its store closes, _exit(0). */
void kiln_opt_agent_exit(kiln_opt_ctx *c, kiln_store *s, int worker) __attribute__((noreturn));

/* ---- worker_llm.c ---- */

/* The llm agent's loop, until the run stops or the agent retires; never returns. */
void kiln_opt_llm_loop(kiln_opt_ctx *c, kiln_store *s, int worker) __attribute__((noreturn));

#endif
