/* optimize_impl.h: what the coordinator (optimize.c, progress.c, resume.c) shares with the agent
 * and gate processes it forks (workers.c, worker_agent.c, worker_llm.c, worker_gate.c): the run's
 * context, inherited through fork and never changed after it. */
#ifndef KILN_OPTIMIZE_IMPL_H
#define KILN_OPTIMIZE_IMPL_H

#include <cjson/cJSON.h>
#include <sys/types.h>

#include "../gate/gate.h"
#include "../gen/family.h"
#include "../store/store.h"
#include "agents.h"
#include "blackboard.h"
#include "mcts.h"
#include "optimize.h"

#define KILN_OPT_MAX_FAMILIES KILN_BB_MAX_FAMILIES
#define KILN_OPT_MAX_WORKERS 64

/* One problem of the run, as the coordinator loaded it. */
typedef struct {
    char *dir;         /* absolute problem directory */
    kiln_problem *p;   /* NULL when it did not load */
    kiln_refdata *ref; /* reference data on the run's device */
    double share;      /* "kiln".share, < 0 unknown */
    double eager_us;   /* geomean of the reference's own times, < 0 unknown */
    double compile_us; /* torch.compile time when the definition says, < 0 unknown */
    int n_fams;
    const kiln_family *fams[KILN_OPT_MAX_FAMILIES];
    kiln_match matches[KILN_OPT_MAX_FAMILIES];
    int64_t store_id;
    int bb;     /* blackboard problem index, -1 when skipped */
    char *skip; /* why it is not searched, or NULL */
} kiln_opt_problem;

typedef struct {
    kiln_optimize_options opt;
    char *run_dir;  /* absolute */
    char *cand_dir; /* RUN/candidates */
    char *log_path; /* RUN/logs/gate.log: one line per gate evaluation (eval, done, retime) */
    const char *backend;
    int cuda;
    int n_problems;
    kiln_opt_problem *problems;
    int *of_bb; /* blackboard problem index -> problems[] index */
    kiln_bb *bb;
    kiln_mcts_config mcts;
    kiln_gate_options gate_opt;
    cJSON *model; /* RUN/model.json, NULL when absent */
    int n_gates;
    int n_agents;
    int n_llm_agents; /* of n_agents: the llm agents (opt.llm), the last ones */
    int agent_kind[KILN_OPT_MAX_WORKERS];
    int max_inflight;       /* candidates of one problem being made, queued or in a gate */
    int max_inflight_total; /* the same over all problems */
    pid_t coordinator;      /* the coordinator's pid (workers watch it) */
    double t0;              /* when the command started (kiln_now_s): --time counts from it */
    kiln_store *store;      /* the coordinator's connection while workers run; NULL in workers */
} kiln_opt_ctx;

/* ---- resume (resume.c) ---- */

/* A problem's rows in the store, as resume reads them. */
typedef struct {
    int n_nodes, n_cands;
    kiln_store_node_row *nodes;
    int *node_bb; /* the blackboard node of nodes[i], -1 when not rebuilt */
    kiln_store_verdict *cands;
    int64_t incumbent_id;
} kiln_opt_resumed;

/* Reads problem pid's nodes, candidates (with their latest verdicts) and incumbent from the store.
 * KILN_ERR_FORMAT when the store cannot be read. */
int kiln_opt_resume_read(kiln_store *s, int64_t pid, kiln_opt_resumed *rp, kiln_err *err);
void kiln_opt_resume_free(kiln_opt_resumed *rp);

/* Builds blackboard problem pi's tree from rp (or a fresh root, inserted into the store), restores
 * counters, dedupe entries, the incumbent and the drafts, and queues every candidate without a
 * result. Under no lock: the workers are not forked yet. Returns how many were queued again. */
int kiln_opt_tree_build(kiln_opt_ctx *c, kiln_store *s, int pi, kiln_opt_resumed *rp);

/* The process loops; both end with _exit. worker is the blackboard worker slot. */
void kiln_opt_agent_main(kiln_opt_ctx *c, int worker) __attribute__((noreturn));
void kiln_opt_gate_main(kiln_opt_ctx *c, int worker) __attribute__((noreturn));

/* RUN/candidates/<id>.<cu|c>; caller frees. */
char *kiln_opt_candidate_path(const kiln_opt_ctx *c, int64_t candidate_id);

/* Writes candidate id's source from the store to path (its file was lost with an earlier run). */
void kiln_opt_candidate_file_restore(kiln_store *s, int64_t id, const char *path);

/* The slot of the registry family index fam among problem's families, or -1. */
int kiln_opt_family_slot(const kiln_opt_problem *pr, int fam);

/* Parses "NAME=V NAME=V" into a point of f (params not named keep their first value). */
void kiln_opt_parse_params(const kiln_family *f, const char *text, int64_t *point);

/* Whether a gate result JSON carries a verdict; fills the columns of kiln_store_result_insert (as
 * kiln_store_summary_read reads them; time_us -1 and score 0 unless the outcome is ok) and whether
 * the SOL score is known. Returns the outcome or -1 when there is none. */
int kiln_opt_result_read(const cJSON *r, double *time_us, double *spread_pct, double *sol_pct,
                         double *score, int *score_known);

/* Writes a draft's state as the store meta key "draft.<problem_id>.<k>" ("open <slice>", "closed",
 * "promoted"), so that a resumed run knows which drafts are over. */
void kiln_opt_draft_meta(kiln_store *s, int64_t problem_id, int k, const char *state, int slice);

/* ---- the plan (plan.c) ---- */

/* Under the lock: how much of the model's time a candidate for blackboard problem bb_index can
 * still win: its share times its headroom to the speed of light (plan.c's essay). Agents take
 * the problem where it is largest. */
double kiln_opt_priority(const kiln_opt_ctx *c, int bb_index);

/* Prints the plan on stderr (unless --quiet) and records it as a "plan" event: the time limit, and
 * per searched problem its share, eager time and the candidates its budget leaves. Takes the
 * blackboard's lock. */
void kiln_opt_plan_announce(kiln_opt_ctx *c, kiln_store *s, int n_active);

/* ---- progress (progress.c) ---- */

/* A problem's name: its definition's, or its directory's when it did not load. */
const char *kiln_opt_problem_name(const kiln_opt_problem *pr);

/* The progress lines' state: zero it, set seen to one slot per searched problem. */
typedef struct {
    int tty;
    int lines_drawn;
    uint32_t *seen; /* the blackboard generation each problem's line last showed */
    double last;
} kiln_opt_progress;

/* Draws a line per problem on stderr when something changed (force: now), in place on a terminal;
 * nothing with --quiet. */
void kiln_opt_progress_draw(kiln_opt_ctx *c, kiln_opt_progress *ps, int force);
/* The final table on stdout, or one JSON object with --json; stop_reason says why the run ended.
 * Each searched problem's winner, its spread and the eager baseline's come from s (NULL: the
 * blackboard's incumbents, spreads unknown); the speedup column is kiln_store_speedup_judge's. */
void kiln_opt_print_table(kiln_opt_ctx *c, kiln_store *s, const char *stop_reason);

/* Appends one line to RUN/logs/gate.log (O_APPEND, one write: lines of several gates never mix). */
void kiln_opt_log(const kiln_opt_ctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
