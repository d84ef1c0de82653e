/* optimize.c: the coordinator of `kiln optimize RUN`: loads the problems hottest first, opens (or
 * resumes) the store, builds the blackboard, forks the agents and the gates, watches them, draws
 * the progress, and at the end writes RUN/library and the final table.
 *
 * The processes, and why the coordinator does so little.
 *
 * The work of a run is compiling (CPU-bound, parallel: K agent processes), and proving and timing
 * (one GPU, one candidate at a time: one gate process per GPU, the only process that touches that
 * GPU). The coordinator does neither. It never initialises CUDA (a CUDA context does not survive
 * fork, and its children must be able to); it counts the GPUs from CUDA_VISIBLE_DEVICES or
 * /dev/nvidia*. Everything the coordinator knows about a problem (its definition, the families that
 * match it, its reference data, RUN/model.json) it loads before forking, so the children inherit it
 * for free and read-only. The shared, changing state is on the blackboard (blackboard.c); the
 * durable state is in the store (RUN/kiln.db), where each process writes through its own
 * connection, one short transaction per fact: an agent its candidates and tree nodes, a gate each
 * verdict the moment it has it, the coordinator the rest (events, node statistics, metadata).
 *
 * Processes that die are data. The coordinator reaps its children with waitpid. An agent that died
 * loses at most the proposal it was making: the coordinator takes back the virtual loss and the
 * node it held (the worker slot on the blackboard says which) and forks a new agent of the same
 * kind. A gate that died (a sticky CUDA error ends the gate, not only the evaluation child) loses
 * the candidate it held: the coordinator records it as `crashed`, with the signal, and forks a new
 * gate (event "gate_restart"). A slot that keeps dying is retired after 20 restarts; a run with no
 * gate left stops with an error.
 *
 * Resume (resume.c). kill -9 can hit any process at any instant; what was committed stays. A rerun
 * of `kiln optimize RUN` rebuilds each tree on the blackboard from the store's nodes and candidates
 * and recomputes visits and values by backing up every stored result again (so the tree's
 * statistics never depend on a flush that may not have happened). A candidate with a result is
 * finished and never evaluated again; a candidate without one is queued again; a node without a
 * candidate (an agent died between the two inserts) is dropped. The incumbent is the store's,
 * drafts are the store's meta keys "draft.<problem>.<k>". Budgets count all candidates of all runs,
 * so a rerun with the same --budget finishes the run and one with a larger budget extends it.
 *
 * The llm agents (with --llm-url; worker_llm.c). A language model is not bound to a family's space,
 * so a problem whose space the built-in agents exhausted stays open while an llm agent still asks,
 * and a problem no family matches is searched by the llm agents alone. Such an agent ends itself
 * (it clears its worker slot and exits, and is not restarted) when the token budget is spent or the
 * endpoint keeps giving nothing new; then those problems are over. At least one built-in agent
 * always runs, so the families' search goes on however the endpoint behaves.
 *
 * Stopping. The run ends when every problem's budget is spent or its space exhausted and nothing is
 * queued or in a gate, when --time has passed, or on SIGINT/SIGTERM. Then the coordinator raises
 * the blackboard's stop flag: agents drop what they were proposing, gates finish the evaluation in
 * hand (so its verdict is committed), and all of them exit; a second signal (or a gate that does
 * not finish within its grace) is answered with SIGKILL, which loses only that evaluation. Last
 * come the final flush of the tree statistics, RUN/library (library.c), and the table. */
#include "optimize.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <sys/prctl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../backend/cuda_driver.h"
#include "../formats/content_hash.h"
#include "../formats/opchain.h"
#include "../util/version.h"
#include "library.h"
#include "optimize_impl.h"

#define MAX_RESTARTS 20
/* The share of --time that preparing problems (their reference data) may use before the search. */
#define KILN_PREPARE_SHARE 0.4

static volatile sig_atomic_t coord_signals;

/* A rough, deliberately high guess of the seconds a problem's reference data takes to build when it
 * is not on disk yet: half a second to load and run the reference in the one helper that serves
 * every problem (kiln_refs_serve_begin; its own start-up is paid by the first problem, which is
 * always prepared), then three sets of every workload's tensors written and hashed at 0.5 GB/s.
 * Only the order of magnitude matters: a GEMM with gigabytes of output is not started when its sets
 * would eat the search's time, and the smaller problems after it still are. Sets already built are
 * only read and checked (a quarter of that).
 */
static double prepare_estimate_s(const kiln_problem *p, int cuda) {
    double bytes = 0;
    for (int w = 0; w < p->n_workloads; w++)
        bytes += kiln_problem_min_bytes(p, &p->workloads[w]);
    char *manifest = xasprintf("%s/kiln/ref-%s/manifest.json", p->dir, cuda ? "cuda" : "cpu");
    int built = access(manifest, R_OK) == 0; /* then only read and checked */
    free(manifest);
    return built ? 3.0 * bytes / 2e9 : 0.5 + 3.0 * bytes / 0.5e9;
}

static void on_signal(int sig) {
    (void)sig;
    coord_signals++;
}

void kiln_optimize_options_default(kiln_optimize_options *o) {
    memset(o, 0, sizeof *o);
    o->budget = 50;
    o->plateau = 8;
    o->retime_rounds = 3;
    o->seed = 0x6b696c6e5eedULL;
    kiln_llm_config_default(&o->llm);
}

static double now_s(void) {
    return kiln_now_s();
}

static void nap_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---------------------------------------------------------------------------------------------
 * Problems.
 * --------------------------------------------------------------------------------------------- */

static char *abs_path(const char *p) {
    char buf[4096];
    if (realpath(p, buf))
        return xstrdup(buf);
    return xstrdup(p);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The problem directories of RUN/problems, sorted by name (the share sorts them later). */
static int list_run_problems(const char *run_dir, char ***out) {
    char *pdir = kiln_path_join(run_dir, "problems");
    DIR *d = opendir(pdir);
    int n = 0, cap = 0;
    char **dirs = NULL;
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            char *dir = kiln_path_join(pdir, e->d_name);
            char *def = kiln_path_join(dir, "definition.json");
            if (access(def, R_OK) == 0) {
                if (n == cap) {
                    cap = cap ? 2 * cap : 16;
                    dirs = xrealloc(dirs, (size_t)cap * sizeof *dirs);
                }
                dirs[n++] = dir;
            } else {
                free(dir);
            }
            free(def);
        }
        closedir(d);
    }
    free(pdir);
    if (n > 1)
        qsort(dirs, (size_t)n, sizeof *dirs, cmp_str);
    *out = dirs;
    return n;
}

static int cmp_share(const void *a, const void *b) {
    const kiln_opt_problem *x = a, *y = b;
    /* hottest first; unknown shares after every known one, in the given order */
    if (x->share != y->share)
        return x->share > y->share ? -1 : 1;
    return 0;
}

static double kiln_number(const cJSON *kiln, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(kiln, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* Loads one problem's definition and its "kiln" numbers; a problem that does not load is kept with
 * its reason, so that the table and the events say why it was not searched. */
static void problem_load(kiln_opt_problem *pr, const char *dir) {
    memset(pr, 0, sizeof *pr);
    pr->dir = abs_path(dir);
    pr->share = -1;
    pr->eager_us = -1;
    pr->compile_us = -1;
    pr->bb = -1;
    kiln_err err;
    if (kiln_problem_load(pr->dir, &pr->p, &err) != KILN_OK) {
        pr->p = NULL;
        pr->skip = xasprintf("does not load: %s", err.msg);
        return;
    }
    const cJSON *kiln = pr->p->kiln;
    if (kiln) {
        pr->share = kiln_number(kiln, "share");
        double cu = kiln_number(kiln, "compile_us");
        if (cu < 0)
            cu = kiln_number(kiln, "torch_compile_us");
        pr->compile_us = cu;
    }
}

static double refs_eager_us(const kiln_refdata *ref) {
    double lg = 0;
    int n = 0;
    for (int w = 0; w < ref->n_workloads; w++)
        if (ref->workloads[w].ref_time_us > 0) {
            lg += log(ref->workloads[w].ref_time_us);
            n++;
        }
    return n ? exp(lg / n) : -1;
}

/* ---------------------------------------------------------------------------------------------
 * Workers.
 * --------------------------------------------------------------------------------------------- */

/* Forks workers first..last. SQLite must not see a fork with a connection open: the child would
 * inherit the library's per-file bookkeeping (locks, the WAL index mapping) of a connection it
 * does not own, and its own connection to the same file would share it. So the coordinator closes
 * its connection around every fork and opens it again after. */
static void spawn_range(kiln_opt_ctx *c, int first, int last) {
    if (c->store) {
        kiln_store_close(c->store);
        c->store = NULL;
    }
    fflush(stdout);
    fflush(stderr);
    for (int worker = first; worker <= last; worker++) {
        kiln_bb_lock(c->bb);
        int role = kiln_bb_worker_at(c->bb, worker)->role;
        kiln_bb_unlock(c->bb);
        pid_t pid = fork();
        if (pid == 0) {
            if (role == KILN_BB_ROLE_AGENT)
                kiln_opt_agent_main(c, worker);
            kiln_opt_gate_main(c, worker);
        }
        if (pid > 0) {
            kiln_bb_lock(c->bb);
            kiln_bb_worker_at(c->bb, worker)->pid = (int32_t)pid;
            kiln_bb_unlock(c->bb);
        }
    }
    kiln_err err;
    for (int tries = 0; tries < 50 && !c->store; tries++) {
        if (kiln_store_open(c->run_dir, 0, &c->store, &err) != KILN_OK) {
            c->store = NULL;
            nap_ms(100);
        }
    }
    if (!c->store)
        fprintf(stderr, "kiln optimize: cannot open the store again: %s\n", err.msg);
}

static void spawn(kiln_opt_ctx *c, int worker) {
    spawn_range(c, worker, worker);
}

static const char *signal_text(int status, char *buf, size_t n) {
    if (WIFSIGNALED(status))
        snprintf(buf, n, "signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, n, "exit status %d", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return buf;
}

static void kill_orphans(kiln_opt_ctx *c);

/* The verdict the store already holds for a candidate (a gate that died after its insert): 1 and
 * the numbers, or 0. */
static int stored_verdict(kiln_store *s, int64_t cand, int *ok, double *time_us, double *score,
                          int *score_known) {
    kiln_store_verdict v;
    int found = 0;
    if (kiln_store_verdict_get(s, cand, &v, &found, NULL) != KILN_OK || !found)
        return 0;
    *ok = v.ok;
    *time_us = v.time_us;
    *score = v.score;
    *score_known = v.score_known;
    return 1;
}

/* A worker died: release what it held, record it, and (unless stopping) start another. */
static void worker_died(kiln_opt_ctx *c, int worker, int status, int stopping) {
    kiln_store *s = c->store; /* spawn() at the end replaces it */
    kiln_bb *bb = c->bb;
    char why[128];
    signal_text(status, why, sizeof why);
    /* a gate may die after committing its verdict and before saying so on the blackboard: the
     * store's verdict then stands, and no second (crashed) result is made up */
    int64_t held = 0;
    kiln_bb_lock(bb);
    kiln_bb_worker *w = kiln_bb_worker_at(bb, worker);
    if (w->role == KILN_BB_ROLE_NONE) {
        /* it retired itself (an llm agent with nothing left to ask) after giving back what it
         * held, and its own event says why: not restarted */
        w->pid = 0;
        kiln_bb_unlock(bb);
        return;
    }
    if (w->role == KILN_BB_ROLE_GATE && w->slot >= 0) {
        kiln_bb_slot *sl = kiln_bb_slot_at(bb, w->slot);
        if (sl->state == KILN_BB_SLOT_TAKEN && sl->gate == worker)
            held = sl->candidate_id;
    }
    kiln_bb_unlock(bb);
    int had = 0, v_ok = 0, v_known = 0;
    double v_time = -1, v_score = -1;
    if (held && !stopping && s)
        had = stored_verdict(s, held, &v_ok, &v_time, &v_score, &v_known);
    int64_t first_ok = 0;
    kiln_bb_lock(bb);
    int role = w->role, kind = w->kind, pid = w->pid;
    int64_t crashed_cand = 0, crashed_problem = 0;
    if (role == KILN_BB_ROLE_AGENT && w->held_node >= 0) {
        kiln_bb_node *n = kiln_bb_node_at(bb, w->held_node);
        kiln_mcts_virtual_loss(bb, w->held_node, -1);
        if (n->status == KILN_BB_NODE_CREATING) {
            kiln_bb_problem *P = kiln_bb_problem_at(bb, n->problem);
            kiln_bb_node_kill(bb, w->held_node);
            if (P->made > 0)
                P->made--;
            if (P->pending > 0)
                P->pending--;
            if (P->draft_state == KILN_BB_DRAFT_ACTIVE && n->draft == P->draft_count &&
                n->draft > 0) {
                if (P->draft_made > 0)
                    P->draft_made--;
                if (P->draft_pending > 0)
                    P->draft_pending--;
            }
            kiln_bb_touch(bb, n->problem);
        }
        w->held_node = -1;
    }
    if (role == KILN_BB_ROLE_GATE && w->slot >= 0) {
        kiln_bb_slot *sl = kiln_bb_slot_at(bb, w->slot);
        if (sl->state == KILN_BB_SLOT_TAKEN && sl->gate == worker) {
            if (stopping) {
                /* killed by us at the end: nothing recorded, the rerun evaluates it */
                kiln_mcts_virtual_loss(bb, sl->node, -1);
                kiln_bb_problem *P = kiln_bb_problem_at(bb, sl->problem);
                if (P->pending > 0)
                    P->pending--;
                kiln_bb_queue_done(bb, w->slot, -1, 0);
            } else if (had && sl->candidate_id == held) {
                crashed_problem = kiln_bb_problem_at(bb, sl->problem)->store_id;
                double r =
                    kiln_mcts_result(bb, sl->node, v_ok, v_time, v_known ? v_score : -1, &c->mcts);
                if (v_ok && kiln_mcts_incumbent_check(bb, sl->problem, v_time) == 1) {
                    kiln_mcts_incumbent_set(bb, sl->problem, sl->node, v_time,
                                            v_known ? v_score : -1, -1, &c->mcts);
                    first_ok = sl->candidate_id;
                }
                kiln_mcts_draft_maybe_close(bb, sl->problem);
                kiln_bb_queue_done(bb, w->slot, v_ok ? KILN_OUTCOME_OK : KILN_OUTCOME_CRASHED, r);
            } else {
                crashed_cand = sl->candidate_id;
                crashed_problem = kiln_bb_problem_at(bb, sl->problem)->store_id;
                kiln_mcts_result(bb, sl->node, 0, -1, 0, &c->mcts);
                kiln_mcts_draft_maybe_close(bb, sl->problem);
                kiln_bb_queue_done(bb, w->slot, KILN_OUTCOME_CRASHED, 0);
            }
        }
        w->slot = -1;
    }
    int restarts = ++w->restarts;
    int retire = stopping || restarts > MAX_RESTARTS;
    if (retire)
        w->role = KILN_BB_ROLE_NONE;
    w->pid = 0;
    kiln_bb_unlock(bb);
    if (role == KILN_BB_ROLE_GATE)
        kill_orphans(c);
    if (stopping)
        return;
    if (first_ok && s)
        kiln_store_incumbent_set(s, crashed_problem, first_ok, NULL);
    if (crashed_cand && s) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddNumberToObject(r, "kiln_eval", 1);
        cJSON_AddStringToObject(r, "backend", c->backend);
        cJSON_AddStringToObject(r, "outcome", "crashed");
        cJSON *ev = cJSON_AddObjectToObject(r, "evidence");
        cJSON_AddStringToObject(ev, "phase", "gate");
        char *e = xasprintf("the gate process (pid %d) died of %s while evaluating it", pid, why);
        cJSON_AddStringToObject(ev, "error", e);
        free(e);
        cJSON_AddArrayToObject(r, "workloads");
        cJSON_AddNullToObject(r, "summary");
        char *json = cJSON_PrintUnformatted(r);
        kiln_store_result_insert(s, crashed_cand, "crashed", json, -1, -1, -1, 0, NULL);
        free(json);
        cJSON_Delete(r);
    }
    char who[64];
    if (role == KILN_BB_ROLE_GATE)
        snprintf(who, sizeof who, "gate for device %d", kind);
    else
        snprintf(who, sizeof who, "agent %s", kiln_agent_name(kind));
    char *msg = xasprintf("%s (pid %d) died of %s%s; %s", who, pid, why,
                          crashed_cand ? " holding a candidate, recorded as crashed"
                          : had        ? " after recording its candidate's verdict"
                                       : "",
                          retire ? "retired after too many restarts" : "restarted");
    if (s)
        kiln_store_event(s, crashed_problem,
                         role == KILN_BB_ROLE_GATE ? "gate_restart" : "agent_restart", msg, NULL);
    fprintf(stderr, "kiln optimize: %s\n", msg);
    free(msg);
    if (!retire)
        spawn(c, worker);
}

static int worker_of_pid(kiln_opt_ctx *c, pid_t pid);

/* The coordinator is a child subreaper: the evaluation child of a gate that died is handed to it
 * instead of to init. Such an orphan may still be running a candidate on the GPU that a new gate is
 * about to use, so every child that is not a known worker is killed (and reaped by reap()). */
static void kill_orphans(kiln_opt_ctx *c) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/children", (int)getpid());
    char *text = NULL;
    if (kiln_read_file(path, &text, NULL, NULL) != KILN_OK)
        return;
    for (char *tok = strtok(text, " \n"); tok; tok = strtok(NULL, " \n")) {
        pid_t pid = (pid_t)atoi(tok);
        if (pid > 0 && worker_of_pid(c, pid) < 0)
            kill(pid, SIGKILL);
    }
    free(text);
}

static int worker_of_pid(kiln_opt_ctx *c, pid_t pid) {
    kiln_bb_header *h = kiln_bb_hdr(c->bb);
    for (int i = 0; i < h->n_workers; i++)
        if (kiln_bb_worker_at(c->bb, i)->pid == pid)
            return i;
    return -1;
}

static int reap(kiln_opt_ctx *c, int stopping) {
    int n = 0, status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        int w = worker_of_pid(c, pid);
        if (w >= 0)
            worker_died(c, w, status, stopping);
        n++;
    }
    return n;
}

static int live_workers(kiln_opt_ctx *c, int role) {
    kiln_bb_lock(c->bb);
    kiln_bb_header *h = kiln_bb_hdr(c->bb);
    int n = 0;
    for (int i = 0; i < h->n_workers; i++) {
        kiln_bb_worker *w = kiln_bb_worker_at(c->bb, i);
        n += w->pid > 0 && (role == 0 || w->role == role);
    }
    kiln_bb_unlock(c->bb);
    return n;
}

/* Under the lock. llm agents still asking: one that spent its token budget or gave up has retired
 * itself (role NONE) and no longer keeps a problem open. */
static int llm_agents_asking(kiln_opt_ctx *c) {
    kiln_bb_header *h = kiln_bb_hdr(c->bb);
    int n = 0;
    for (int i = 0; i < h->n_workers; i++) {
        kiln_bb_worker *w = kiln_bb_worker_at(c->bb, i);
        n += w->role == KILN_BB_ROLE_AGENT && w->kind == KILN_AGENT_LLM;
    }
    return n;
}

/* ---------------------------------------------------------------------------------------------
 * Node statistics.
 * --------------------------------------------------------------------------------------------- */

static const char *node_status_name(int st) {
    switch (st) {
    case KILN_BB_NODE_ROOT:
        return "open";
    case KILN_BB_NODE_DONE:
        return "done";
    case KILN_BB_NODE_FAILED:
        return "failed";
    default:
        return "pending";
    }
}

/* Saves the visits/value/best/status of nodes that changed (the coordinator is the only writer of
 * node statistics; a resume recomputes them anyway). */
static void flush_nodes(kiln_opt_ctx *c, int final) {
    kiln_store *s = c->store;
    kiln_bb *bb = c->bb;
    if (!s)
        return;
    kiln_bb_lock(bb);
    kiln_bb_header *h = kiln_bb_hdr(bb);
    int n = 0;
    kiln_bb_node *copy = xmalloc((size_t)(h->n_nodes + 1) * sizeof *copy);
    for (int i = 0; i < h->n_nodes; i++) {
        kiln_bb_node *nd = kiln_bb_node_at(bb, i);
        if (final && nd->status == KILN_BB_NODE_QUEUED)
            nd->flags |= KILN_BB_FLAG_DIRTY; /* saved as open: its candidate waits for a rerun */
        if (!(nd->flags & KILN_BB_FLAG_DIRTY) || (nd->flags & KILN_BB_FLAG_FOREIGN) ||
            nd->store_node_id <= 0 || nd->status == KILN_BB_NODE_DEAD ||
            nd->status == KILN_BB_NODE_CREATING)
            continue;
        nd->flags &= ~KILN_BB_FLAG_DIRTY;
        copy[n++] = *nd;
    }
    kiln_bb_unlock(bb);
    for (int i = 0; i < n; i++) {
        kiln_bb_node *nd = &copy[i];
        const kiln_family *f = nd->family >= 0 ? kiln_family_at(nd->family) : NULL;
        char *params = f ? kiln_family_point_str(f, nd->params) : xstrdup("");
        kiln_store_node sn = {0};
        sn.id = nd->store_node_id;
        sn.problem_id = kiln_bb_problem_at(bb, nd->problem)->store_id;
        sn.candidate_id = nd->candidate_id;
        sn.draft = nd->draft;
        sn.family = f ? f->name : NULL;
        sn.params = params;
        sn.visits = nd->visits;
        sn.value_sum = nd->value_sum;
        sn.best = nd->best;
        sn.status =
            final && nd->status == KILN_BB_NODE_QUEUED ? "open" : node_status_name(nd->status);
        kiln_store_node_update(s, &sn, NULL);
        free(params);
    }
    free(copy);
}

/* ---------------------------------------------------------------------------------------------
 * The run.
 * --------------------------------------------------------------------------------------------- */

static int parse_specialists(const char *list, int *kinds, int max, kiln_err *err) {
    int n = 0;
    char *copy = xstrdup(list);
    for (char *tok = strtok(copy, ","); tok; tok = strtok(NULL, ",")) {
        while (*tok == ' ')
            tok++;
        int k = kiln_agent_parse(tok);
        if (k == KILN_AGENT_LLM) {
            kiln_errf(err, KILN_ERR_INVALID,
                      "llm is not a built-in specialist: give --llm-url URL (and --llm-agents N)");
            free(copy);
            return -1;
        }
        if (k < 0) {
            kiln_errf(err, KILN_ERR_INVALID,
                      "unknown specialist '%s' (geometry, vector, algorithm, fusion, random)", tok);
            free(copy);
            return -1;
        }
        if (n < max)
            kinds[n++] = k;
    }
    free(copy);
    if (n == 0)
        kiln_errf(err, KILN_ERR_INVALID, "--specialists names no specialist");
    return n ? n : -1;
}

static void ctx_free(kiln_opt_ctx *c) {
    for (int i = 0; i < c->n_problems; i++) {
        kiln_opt_problem *pr = &c->problems[i];
        free(pr->dir);
        free(pr->skip);
        kiln_refdata_free(pr->ref);
        kiln_problem_free(pr->p);
    }
    free(c->problems);
    free(c->of_bb);
    free(c->run_dir);
    free(c->cand_dir);
    free(c->log_path);
    cJSON_Delete(c->model);
}

/* How long an evaluation in flight may go on after --time: the limit is the user's budget (kiln
 * tune plans its install check and report after it), so it is not stretched by a whole evaluation
 * (seconds at real size); one cut short is queued again for a resumed run. */
#define TIME_LIMIT_GRACE_S 2.0

static void stop_workers(kiln_opt_ctx *c, int time_limit) {
    kiln_bb_set_stop(c->bb);
    /* agents stop at once; a gate finishes the evaluation in hand, within its grace */
    double grace = time_limit ? TIME_LIMIT_GRACE_S
                              : 30 + (c->gate_opt.timeout_s > 0 ? c->gate_opt.timeout_s : 10);
    double t0 = now_s();
    int killed = 0;
    while (live_workers(c, 0) > 0) {
        reap(c, 1);
        if (!killed && (coord_signals > 1 || now_s() - t0 > grace)) {
            kiln_bb_lock(c->bb);
            kiln_bb_header *h = kiln_bb_hdr(c->bb);
            for (int i = 0; i < h->n_workers; i++) {
                int pid = kiln_bb_worker_at(c->bb, i)->pid;
                if (pid > 0)
                    kill(pid, SIGKILL);
            }
            kiln_bb_unlock(c->bb);
            killed = 1;
        }
        nap_ms(20);
    }
    kill_orphans(c);
    reap(c, 1);
}

/* ---------------------------------------------------------------------------------------------
 * The run, step by step.
 * --------------------------------------------------------------------------------------------- */

/* The backend, the gates, the agents and their kinds, and the options the workers inherit. 0, or
 * 2 (bad options) with err. */
static int configure(kiln_opt_ctx *c, const kiln_optimize_options *o, kiln_err *err) {
    c->opt = *o;
    if (!o->run_dir || !o->run_dir[0])
        return kiln_errf(err, KILN_ERR_INVALID, "no RUN directory given"), 2;
    if (o->budget < 1)
        return kiln_errf(err, KILN_ERR_INVALID, "--budget must be at least 1"), 2;

    /* backend */
    const char *backend = o->backend;
    if (!backend)
        backend = kiln_backend_default();
    if (strcmp(backend, "cuda") != 0 && strcmp(backend, "cpu") != 0)
        return kiln_errf(err, KILN_ERR_INVALID, "unknown backend '%s' (use cuda or cpu)", backend),
               2;
    c->backend = backend;
    c->cuda = strcmp(backend, "cuda") == 0;
    c->n_gates = o->gates > 0 ? o->gates : (c->cuda ? kiln_cuda_visible_gpus() : 1);
    if (c->n_gates < 1)
        return kiln_errf(err, KILN_ERR_NO_DEVICE,
                         "--backend cuda: no GPU is visible (CUDA_VISIBLE_DEVICES, /dev/nvidia*)"),
               2;
    if (c->n_gates > 16)
        c->n_gates = 16;
    if (c->cuda && o->gates > 0 && o->gates > kiln_cuda_visible_gpus())
        fprintf(
            stderr,
            "kiln optimize: warning: %d gates on %d GPU(s): gates that share a GPU disturb each "
            "other's timings\n",
            o->gates, kiln_cuda_visible_gpus());
    int kinds[KILN_OPT_MAX_WORKERS];
    int n_kinds = 0;
    if (o->specialists) {
        n_kinds = parse_specialists(o->specialists, kinds, KILN_OPT_MAX_WORKERS, err);
        if (n_kinds < 0)
            return 2;
    } else {
        static const int dflt[] = {KILN_AGENT_GEOMETRY, KILN_AGENT_ALGORITHM, KILN_AGENT_VECTOR,
                                   KILN_AGENT_FUSION, KILN_AGENT_RANDOM};
        n_kinds = 5;
        memcpy(kinds, dflt, sizeof dflt);
    }
    /* N of the K agent processes are llm agents; at least one built-in agent stays, since it is
     * what spends the budget while the model is slow, down or out of tokens */
    int n_llm = o->llm.url ? (o->llm_agents > 0 ? o->llm_agents : 1) : 0;
    if (n_llm > KILN_OPT_MAX_WORKERS / 2)
        n_llm = KILN_OPT_MAX_WORKERS / 2;
    int n_builtin = o->agents > 0    ? o->agents - n_llm
                    : o->specialists ? n_kinds
                                     : (c->cuda ? 4 : 2) - n_llm;
    if (n_builtin < 1)
        n_builtin = 1;
    if (n_builtin > KILN_OPT_MAX_WORKERS - 16 - n_llm)
        n_builtin = KILN_OPT_MAX_WORKERS - 16 - n_llm;
    c->n_agents = n_builtin + n_llm;
    c->n_llm_agents = n_llm;
    for (int i = 0; i < n_builtin; i++)
        c->agent_kind[i] = kinds[i % n_kinds];
    for (int i = n_builtin; i < c->n_agents; i++)
        c->agent_kind[i] = KILN_AGENT_LLM;
    c->max_inflight = 2 * c->n_gates > 2 ? 2 * c->n_gates : 2;
    c->max_inflight_total = 2 * c->n_gates + c->n_agents;
    c->coordinator = getpid();
    kiln_mcts_config_default(&c->mcts);
    c->mcts.plateau = o->plateau;
    kiln_gate_options_default(&c->gate_opt);
    c->gate_opt.backend = backend;
    if (o->iters > 0)
        c->gate_opt.iters = o->iters;
    if (o->sets > 0)
        c->gate_opt.max_sets = o->sets;
    if (o->timeout_s > 0)
        c->gate_opt.timeout_s = o->timeout_s;

    return 0;
}

/* Takes the run's lock; a coordinator that died a moment ago may leave workers holding it while
 * they exit, which is waited for. 0, or 2 with err. */
static int lock_run(kiln_opt_ctx *c, kiln_err *err) {
    /* A RUN to read is never created: capture and tune make runs; a RUN followed by problem
     * directories is one to write, and may be new. */
    struct stat st;
    if (c->opt.n_problem_dirs == 0 && (stat(c->opt.run_dir, &st) != 0 || !S_ISDIR(st.st_mode))) {
        kiln_errf(
            err, KILN_ERR_INVALID,
            "%s is not a directory: kiln capture SCRIPT --out %s (or kiln tune) makes a run, or "
            "name problem directories after RUN",
            c->opt.run_dir, c->opt.run_dir);
        return 2;
    }
    if (kiln_mkdirs(c->opt.run_dir, err) != KILN_OK)
        return 2;
    c->run_dir = abs_path(c->opt.run_dir);
    for (int tries = 0;; tries++) {
        kiln_err lerr;
        if (kiln_store_lock(c->run_dir, &lerr) == KILN_OK)
            break;
        /* The note names a coordinator that is dead: the run was killed (kill -9 of its group)
         * and its last processes are still exiting, holding the inherited lock for a moment. Wait
         * for them (10 s at most); a live holder is another run: refuse at once. */
        const char *at = strstr(lerr.msg, "(pid ");
        long holder = at ? strtol(at + 5, NULL, 10) : 0;
        if (holder <= 0 || tries >= 100 || kill((pid_t)holder, 0) == 0 || errno == EPERM) {
            if (err)
                *err = lerr;
            return 2;
        }
        nap_ms(100);
    }
    return 0;
}

/* Opens the run's store (refusing one of another backend) and makes RUN/candidates and RUN/logs.
 * 0, or 2 with err. */
static int open_store(kiln_opt_ctx *c, kiln_store **s, kiln_err *err) {
    if (kiln_store_open(c->run_dir, 0, s, err) != KILN_OK)
        return 2;
    {
        /* candidates of one backend mean nothing to the other: a different backend is a new RUN */
        char *was = kiln_store_meta_get(*s, KILN_META_BACKEND);
        int other = was && strcmp(was, c->backend) != 0;
        if (other)
            kiln_errf(err, KILN_ERR_INVALID,
                      "%s was optimised with --backend %s; resume it with --backend %s, or use "
                      "another RUN directory for %s",
                      c->run_dir, was, was, c->backend);
        free(was);
        if (other)
            return 2;
    }
    c->cand_dir = kiln_path_join(c->run_dir, "candidates");
    char *logs = kiln_path_join(c->run_dir, "logs");
    c->log_path = kiln_path_join(logs, "gate.log");
    int mk = kiln_mkdirs(c->cand_dir, err) || kiln_mkdirs(logs, err);
    free(logs);
    return mk ? 2 : 0;
}

/* Loads the problems (the directories given, else RUN/problems), hottest first, keeps the --top
 * ones, and reads RUN/model.json. 0, or 2 with err when there is none. */
static int load_problems(kiln_opt_ctx *c, kiln_err *err) {
    const kiln_optimize_options *o = &c->opt;
    char **dirs = NULL;
    int n_dirs = 0;
    if (o->n_problem_dirs > 0) {
        n_dirs = o->n_problem_dirs;
        dirs = xmalloc((size_t)n_dirs * sizeof *dirs);
        for (int i = 0; i < n_dirs; i++)
            dirs[i] = xstrdup(o->problem_dirs[i]);
    } else {
        n_dirs = list_run_problems(c->run_dir, &dirs);
    }
    if (n_dirs == 0) {
        kiln_errf(err, KILN_ERR_INVALID,
                  "%s/problems holds no problem directory (a definition.json in each); run kiln "
                  "capture first, or name problem directories after RUN",
                  c->run_dir);
        free(dirs);
        return 2;
    }
    c->problems = xcalloc((size_t)n_dirs, sizeof *c->problems);
    for (int i = 0; i < n_dirs; i++) {
        problem_load(&c->problems[i], dirs[i]);
        free(dirs[i]);
    }
    free(dirs);
    c->n_problems = n_dirs;
    /* a stable sort: qsort is not, so sort indices by (share desc, position) */
    for (int i = 1; i < c->n_problems; i++)
        for (int j = i; j > 0 && cmp_share(&c->problems[j - 1], &c->problems[j]) > 0; j--) {
            kiln_opt_problem t = c->problems[j];
            c->problems[j] = c->problems[j - 1];
            c->problems[j - 1] = t;
        }
    if (o->top > 0) {
        /* the P hottest problems that some agent can search (a family matches, or llm agents
         * run), and the unsearchable ones hotter than the last of them (listed as skipped): a
         * model whose hottest ops are GEMMs still gets its P norms and softmaxes searched */
        int kept = 0, searchable = 0;
        for (int i = 0; i < c->n_problems; i++) {
            kiln_opt_problem *pr = &c->problems[i];
            int can = 0;
            if (!pr->skip) {
                const kiln_family *fams[KILN_OPT_MAX_FAMILIES];
                kiln_match matches[KILN_OPT_MAX_FAMILIES];
                char why[512];
                int n = kiln_family_match_all(pr->p, fams, matches, KILN_OPT_MAX_FAMILIES, why,
                                              sizeof why);
                can = c->n_llm_agents > 0 ||
                      kiln_family_keep_only(c->opt.family, fams, matches, n) > 0;
            }
            if (searchable < o->top) {
                searchable += can;
                c->problems[kept++] = *pr;
            } else {
                free(pr->dir);
                free(pr->skip);
                kiln_problem_free(pr->p);
            }
        }
        c->n_problems = kept;
    }
    {
        char *model_path = kiln_path_join(c->run_dir, "model.json");
        char *text = NULL;
        if (kiln_read_file(model_path, &text, NULL, NULL) == KILN_OK)
            c->model = cJSON_Parse(text);
        free(text);
        free(model_path);
    }

    return 0;
}

/* Matches the families of pr. Returns the note for a problem only llm agents search (no family
 * matches it; caller frees), else NULL; with no llm agents such a problem is skipped instead. */
static char *match_problem(kiln_opt_ctx *c, kiln_opt_problem *pr) {
    char *no_family = NULL;
    if (!pr->skip) {
        char why[4096];
        pr->n_fams = kiln_family_match_all(pr->p, pr->fams, pr->matches, KILN_OPT_MAX_FAMILIES, why,
                                           sizeof why);
        kiln_family_sol_fill_matched(pr->p, pr->fams, pr->matches, pr->n_fams);
        if (c->opt.family && pr->n_fams > 0) { /* --family: the others' candidates are not made */
            pr->n_fams = kiln_family_keep_only(c->opt.family, pr->fams, pr->matches, pr->n_fams);
            if (pr->n_fams == 0) { /* why keeps the named family's own reason only */
                char mine[512] = "";
                const size_t l = strlen(c->opt.family);
                for (const char *q = why; q && *q; q = strchr(q, '\n') ? strchr(q, '\n') + 1 : NULL)
                    if (strncmp(q, c->opt.family, l) == 0 && q[l] == ':')
                        snprintf(mine, sizeof mine, "%.*s", (int)strcspn(q, "\n"), q);
                snprintf(why, sizeof why, "(--family) %s", mine);
            }
        }
        if (pr->n_fams == 0) {
            size_t l = strlen(why);
            while (l && why[l - 1] == '\n')
                why[--l] = 0;
            for (char *q = why; *q; q++)
                if (*q == '\n')
                    *q = ';';
            no_family = kiln_family_count() == 0
                            ? xstrdup("no kernel family is linked into this kiln")
                            : xasprintf("no kernel family matches: %s", why);
            /* a language model needs no family: with llm agents the problem is theirs alone */
            if (c->n_llm_agents == 0) {
                pr->skip = no_family;
                no_family = NULL;
            }
        }
    }
    return no_family;
}

/* Whether every family that matches pr calls a vendor library eager calls too, or is known to be
 * slower than one (kiln_family.vendor, .behind), and pr is one op. A chain of several ops is not:
 * eager runs them apart, and the fused kernel skips their intermediates whatever the family (the
 * GEMM chains of Gemma-4 and Qwen-3.5-MoE: 1.12-2.73x eager on the H200, bench/RESULTS.md). */
static int vendor_only(const kiln_opt_problem *pr) {
    for (int k = 0; k < pr->n_fams; k++)
        if (!pr->fams[k]->vendor && !pr->fams[k]->behind)
            return 0;
    if (pr->n_fams == 0)
        return 0;
    kiln_opchain *chain = NULL;
    kiln_err err;
    int several = kiln_opchain_read(pr->p, &chain, &err) == KILN_OK && chain->n_ops > 1;
    kiln_opchain_free(chain);
    return !several;
}

/* Hashes pr's files, ensures its reference data where it fits in preparing's share of --time, and
 * gives it its row in the store (a skipped one with its reason). Takes no_family (match_problem's
 * note). 0, or 2 when the store fails. */
static int finish_problem(kiln_opt_ctx *c, kiln_store *s, kiln_opt_problem *pr, char *no_family,
                          int *n_active, kiln_err *err) {
    const kiln_optimize_options *o = &c->opt;
    /* what the problem is: its files' content, whatever its definition says it was (hashed
     * for a problem no family matches too: its row names its content) */
    char hash[KILN_CONTENT_HASH_LEN] = "";
    char *stale_hash = NULL;
    if (pr->p) {
        kiln_err herr;
        const char *recorded = kiln_problem_kiln_str(pr->p, "content_hash");
        if (kiln_content_hash_dir(pr->dir, hash, &herr) != KILN_OK) {
            if (!pr->skip)
                pr->skip = xasprintf("its files do not hash: %s", herr.msg);
        } else if (recorded && strcmp(recorded, hash) != 0) {
            stale_hash = xasprintf("its files changed since capture (content %.12s; capture "
                                   "recorded %.12s): its results are filed under the files' "
                                   "content",
                                   hash, recorded);
        }
    }
    /* --time counts from the command's start, preparing included. Reference data of a problem
     * at real size takes seconds to tens of seconds (gigabytes of sets on disk), so preparing
     * stops at a share of --time and the rest is left to candidates: the problems not prepared
     * by then are left out, all but the first that can be searched. After a signal (Ctrl-C, or
     * tune stopping an overrun) none is prepared. */
    if (!pr->skip && (coord_signals || (*n_active > 0 && o->time_s > 0 &&
                                        now_s() - c->t0 + prepare_estimate_s(pr->p, c->cuda) >
                                            KILN_PREPARE_SHARE * o->time_s)))
        pr->skip = xstrdup(coord_signals ? "not prepared: interrupted"
                                         : "not prepared: its reference data would not fit in "
                                           "preparing's share of the time limit (--time)");
    if (!pr->skip) {
        kiln_err rerr;
        if (!o->quiet)
            fprintf(stderr, "kiln optimize: %s: reference data on %s\n", pr->p->name,
                    c->cuda ? "cuda" : "cpu");
        if (kiln_refs_ensure(pr->p, c->cuda ? "cuda" : "cpu", NULL, 1, &pr->ref, &rerr) != KILN_OK)
            pr->skip = xasprintf("no reference data: %s", rerr.msg);
        else
            pr->eager_us = refs_eager_us(pr->ref);
    }
    kiln_store_problem sp = {0};
    sp.name = kiln_opt_problem_name(pr);
    sp.dir = pr->dir;
    sp.share = pr->share;
    sp.eager_us = pr->eager_us;
    sp.compile_us = pr->compile_us;
    sp.sol_us = -1;
    sp.content_hash = hash[0] ? hash : NULL;
    if (stale_hash && !o->quiet)
        fprintf(stderr, "kiln optimize: %s: %s\n", sp.name, stale_hash);
    if (kiln_store_problem_upsert(s, &sp, &pr->store_id, err) != KILN_OK) {
        free(stale_hash);
        free(no_family);
        return 2;
    }
    if (stale_hash) {
        kiln_store_event(s, pr->store_id, "note", stale_hash, NULL);
        free(stale_hash);
    }
    if (pr->skip) {
        kiln_store_event(s, pr->store_id, "skip", pr->skip, NULL);
        if (!o->quiet)
            fprintf(stderr, "kiln optimize: %s: skipped: %s\n", kiln_opt_problem_name(pr),
                    pr->skip);
    } else {
        (*n_active)++;
        if (no_family) {
            char *msg = xasprintf("%s; only the llm agents search it", no_family);
            kiln_store_event(s, pr->store_id, "llm", msg, NULL);
            if (!o->quiet)
                fprintf(stderr, "kiln optimize: %s: %s\n", kiln_opt_problem_name(pr), msg);
            free(msg);
        }
    }
    free(no_family);
    return 0;
}

/* Matches families, ensures reference data, and gives every problem its row in the store,
 * searched or not (a skipped one with its reason), hottest first, but a problem only vendor
 * families match after all the others: its reference data (a GEMM's: gigabytes) would take
 * preparing's share of --time from problems where kiln can win more (Gemma-4's lm-head went before
 * its RMSNorm). *n_active gets the problems searched. 0, or 2 when the store fails. */
static int prepare_problems(kiln_opt_ctx *c, kiln_store *s, int *n_active, kiln_err *err) {
    *n_active = 0;
    /* marks where this run's events begin: a "skip" after it says the problem is not searched now
     * (the dashboard), and the search's own time starts only at "start" */
    char *prep = xasprintf("kiln optimize: preparing %d problems", c->n_problems);
    kiln_store_event(s, 0, "prepare", prep, NULL);
    free(prep);
    char *deferred = xcalloc((size_t)(c->n_problems > 0 ? c->n_problems : 1), 1);
    int rc = 0;
    kiln_refs_serve_begin(); /* one helper for every problem's reference data */
    for (int pass = 0; pass < 2 && rc == 0; pass++)
        for (int i = 0; i < c->n_problems && rc == 0; i++) {
            kiln_opt_problem *pr = &c->problems[i];
            char *no_family = NULL;
            if (pass == 0) {
                no_family = match_problem(c, pr);
                if (!pr->skip && vendor_only(pr)) {
                    deferred[i] = 1;
                    continue;
                }
            } else if (!deferred[i]) {
                continue;
            }
            rc = finish_problem(c, s, pr, no_family, n_active, err);
        }
    kiln_refs_serve_end();
    free(deferred);
    return rc;
}

/* What resuming found, for the start event. */
typedef struct {
    int requeued, resumed_results;
    int64_t total_cands;
} resumed_counts;

/* Reads what the store already has, sizes and creates the blackboard (*bb, named *bb_name), and
 * builds each searched problem's tree on it. 0, or 2 with err. */
static int build_blackboard(kiln_opt_ctx *c, kiln_store *s, int n_active, kiln_bb **bb,
                            char **bb_name, resumed_counts *rc, kiln_err *err) {
    const kiln_optimize_options *o = &c->opt;
    memset(rc, 0, sizeof *rc);
    kiln_opt_resumed *rps = xcalloc((size_t)c->n_problems, sizeof *rps);
    int64_t total_nodes = 0, total_cands = 0;
    for (int i = 0; i < c->n_problems; i++) {
        if (c->problems[i].skip)
            continue;
        if (kiln_opt_resume_read(s, c->problems[i].store_id, &rps[i], err) != KILN_OK) {
            for (int k = 0; k <= i; k++)
                kiln_opt_resume_free(&rps[k]);
            free(rps);
            return 2;
        }
        total_nodes += rps[i].n_nodes;
        total_cands += rps[i].n_cands;
    }
    kiln_bb_caps caps;
    caps.max_problems = n_active;
    caps.max_nodes = (int32_t)(total_nodes + (int64_t)n_active * ((int64_t)o->budget + 16) + 64);
    caps.dedupe_slots = (int32_t)(4 * (caps.max_nodes + total_cands)); /* binary + source */
    caps.queue_slots = (int32_t)(64 + total_cands + (int64_t)n_active * c->max_inflight);
    caps.max_workers = c->n_agents + c->n_gates + 1;
    kiln_bb_sweep_stale();
    *bb_name = kiln_bb_name_for(c->run_dir, getpid());
    if (kiln_bb_create(*bb_name, &caps, bb, err) != KILN_OK) {
        for (int k = 0; k < c->n_problems; k++)
            kiln_opt_resume_free(&rps[k]);
        free(rps);
        return 2;
    }
    c->bb = *bb;
    c->of_bb = xmalloc((size_t)n_active * sizeof *c->of_bb);
    for (int i = 0; i < c->n_problems; i++) {
        kiln_opt_problem *pr = &c->problems[i];
        if (pr->skip)
            continue;
        int b = kiln_bb_problem_add(*bb, pr->store_id, pr->p->name);
        pr->bb = b;
        c->of_bb[b] = i;
        kiln_bb_problem *P = kiln_bb_problem_at(*bb, b);
        P->budget = o->budget;
        P->n_families = pr->n_fams;
        for (int k = 0; k < pr->n_fams; k++) {
            for (int r = 0; r < kiln_family_count(); r++)
                if (kiln_family_at(r) == pr->fams[k])
                    P->family[k] = r;
        }
        rc->requeued += kiln_opt_tree_build(c, s, b, &rps[i]);
        if (pr->n_fams == 0)
            P->exhausted = 1; /* no point to propose: the built-in agents pass it by */
        for (int k = 0; k < rps[i].n_cands; k++)
            rc->resumed_results += rps[i].cands[k].result_id > 0;
    }
    for (int k = 0; k < c->n_problems; k++)
        kiln_opt_resume_free(&rps[k]);
    free(rps);

    rc->total_cands = total_cands;
    return 0;
}

/* The run's metadata and its start (and resume) event. */
static void record_start(kiln_opt_ctx *c, kiln_store *s, int n_active, const resumed_counts *rc) {
    const kiln_optimize_options *o = &c->opt;
    kiln_store_meta_set(s, KILN_META_BACKEND, c->backend, NULL);
    kiln_store_meta_set(s, KILN_META_KILN_VERSION, KILN_VERSION, NULL);
    {
        char *started = kiln_store_meta_get(s, KILN_META_STARTED);
        if (!started) {
            char t[32];
            snprintf(t, sizeof t, "%lld", (long long)time(NULL));
            kiln_store_meta_set(s, KILN_META_STARTED, t, NULL);
        }
        free(started);
        char llm[64] = "";
        if (c->n_llm_agents > 0)
            snprintf(llm, sizeof llm, " (%d of them llm)", c->n_llm_agents);
        char *msg =
            xasprintf("kiln optimize: %d problems (%d searched), budget %d per problem, "
                      "%d agents%s, %d gates on %s%s; resumed %d results, %d candidates "
                      "queued again",
                      c->n_problems, n_active, o->budget, c->n_agents, llm, c->n_gates, c->backend,
                      o->time_s > 0 ? ", time limit" : "", rc->resumed_results, rc->requeued);
        kiln_store_event(s, 0, "start", msg, NULL);
        if (rc->total_cands > 0) {
            char *rm = xasprintf("resumed: %d results kept, %d candidates queued again",
                                 rc->resumed_results, rc->requeued);
            kiln_store_event(s, 0, "resume", rm, NULL);
            free(rm);
        }
        if (!o->quiet)
            fprintf(stderr, "%s\n", msg);
        free(msg);
    }
}

/* Adds the gates and the agents to the blackboard and forks them; the coordinator's store
 * connection moves to c->store (spawn reopens it after each fork). */
static void start_workers(kiln_opt_ctx *c, kiln_store *s) {
    kiln_bb *bb = c->bb;
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    kiln_bb_lock(bb);
    /* gate g drives device g; more gates than devices share them round robin (the cpu backend
     * has the one device 0, and its gates run candidates on different cores) */
    int n_devices = c->cuda ? kiln_cuda_visible_gpus() : 1;
    if (n_devices < 1)
        n_devices = 1;
    for (int g = 0; g < c->n_gates; g++)
        kiln_bb_worker_add(bb, KILN_BB_ROLE_GATE, g % n_devices);
    for (int a = 0; a < c->n_agents; a++)
        kiln_bb_worker_add(bb, KILN_BB_ROLE_AGENT, c->agent_kind[a]);
    int n_workers = kiln_bb_hdr(bb)->n_workers;
    kiln_bb_unlock(bb);
    c->store = s; /* from here on the coordinator's connection lives in c->store (spawn) */
    spawn_range(c, 0, n_workers - 1);
}

/* Watches the run until it is over (every budget spent or space exhausted and nothing in flight),
 * --time passes, a signal comes, or it cannot go on (*stop_reason says which). Returns the status
 * so far: 0, or 1 with err. *t_start gets when it began; ps draws the progress. */
static int watch(kiln_opt_ctx *c, int n_active, kiln_opt_progress *ps, double *t_start,
                 const char **stop_reason, kiln_err *err) {
    const kiln_optimize_options *o = &c->opt;
    kiln_bb *bb = c->bb;
    ps->tty = isatty(2);
    ps->seen = xcalloc((size_t)n_active, sizeof *ps->seen);
    for (int i = 0; i < n_active; i++)
        ps->seen[i] = (uint32_t)-1;
    *t_start = now_s();
    double last_flush = *t_start, last_draw = 0;
    *stop_reason = "done";
    int status = 0;
    for (;;) {
        if (coord_signals) {
            *stop_reason = "interrupted";
            break;
        }
        if (o->time_s > 0 && now_s() - c->t0 >= o->time_s) {
            *stop_reason = "time limit";
            break;
        }
        reap(c, 0);
        kiln_bb_lock(bb);
        int finished = 1;
        /* a space the built-in agents exhausted is not the end while an llm agent still asks */
        int asking = llm_agents_asking(c) > 0;
        for (int i = 0; i < n_active; i++) {
            kiln_bb_problem *P = kiln_bb_problem_at(bb, i);
            int over = P->made >= P->budget ||
                       (P->exhausted && !asking && !kiln_bb_selection_held(bb, i, -1));
            if (!over || P->pending > 0)
                finished = 0;
        }
        if (kiln_bb_queue_busy(bb) > 0)
            finished = 0;
        uint64_t gate_errors = kiln_bb_hdr(bb)->gate_errors_in_row;
        kiln_bb_unlock(bb);
        if (finished)
            break;
        if (gate_errors >= 3) {
            kiln_errf(err, KILN_ERR_BACKEND,
                      "the gate could not evaluate %llu candidates in a row (see the gate_error "
                      "events); stopping",
                      (unsigned long long)gate_errors);
            *stop_reason = "gate errors";
            status = 1;
            break;
        }
        if (live_workers(c, KILN_BB_ROLE_AGENT) == 0) {
            kiln_errf(err, KILN_ERR_INVALID, "every agent process was retired; stopping");
            *stop_reason = "no agent";
            status = 1;
            break;
        }
        if (live_workers(c, KILN_BB_ROLE_GATE) == 0) {
            kiln_errf(err, KILN_ERR_BACKEND, "every gate process was retired; stopping");
            *stop_reason = "no gate";
            status = 1;
            break;
        }
        double now = now_s();
        if (now - last_flush > 1.0) {
            flush_nodes(c, 0);
            last_flush = now;
        }
        if (now - last_draw > (ps->tty ? 0.2 : 0.5)) {
            kiln_opt_progress_draw(c, ps, 0);
            last_draw = now;
        }
        nap_ms(50);
    }
    return status;
}

/* RUN/library from the store; a failure makes a run that was fine (status 0) fail (1). */
static int write_library(kiln_opt_ctx *c, kiln_store *s, int status, kiln_err *err) {
    const kiln_optimize_options *o = &c->opt;
    {
        kiln_library_options lo;
        memset(&lo, 0, sizeof lo);
        lo.backend = c->backend;
        kiln_library_report rep;
        memset(&rep, 0, sizeof rep);
        kiln_err lerr;
        if (kiln_library_write(s, c->run_dir, &lo, &rep, &lerr) != KILN_OK) {
            fprintf(stderr, "kiln optimize: writing %s/library failed: %s\n", c->run_dir, lerr.msg);
            if (status == 0) {
                kiln_errf(err, KILN_ERR_IO, "writing the library failed: %s", lerr.msg);
                status = 1;
            }
        } else if (!o->quiet) {
            fprintf(stderr, "kiln optimize: wrote %s/library (%d entries)\n", c->run_dir,
                    rep.n_entries);
            if (rep.warnings[0])
                fprintf(stderr, "%s", rep.warnings);
        }
    }
    return status;
}

int kiln_optimize_run(const kiln_optimize_options *o, kiln_err *err) {
    kiln_opt_ctx ctx;
    kiln_opt_ctx *c = &ctx;
    memset(c, 0, sizeof *c);
    c->t0 = now_s();
    kiln_store *s = NULL;
    kiln_bb *bb = NULL;
    char *bb_name = NULL;
    int n_active = 0;
    /* SIGINT and SIGTERM from the start: one while the problems are prepared ends the preparation,
     * and the run stops as it does once searching (the library is written) */
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    coord_signals = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    int status = configure(c, o, err);
    if (!status)
        status = lock_run(c, err);
    if (!status)
        status = open_store(c, &s, err);
    if (!status)
        status = load_problems(c, err);
    if (!status)
        status = prepare_problems(c, s, &n_active, err);
    if (!status && n_active == 0) {
        kiln_errf(err, KILN_ERR_UNSUPPORTED,
                  "no problem can be optimised (every one was skipped; "
                  "the reasons are above and in the store's events)");
        status = 1;
        kiln_store_event(s, 0, "done",
                         "kiln optimize stopped: nothing to do (every problem skipped)", NULL);
        kiln_opt_print_table(c, s, "nothing to do");
    }
    resumed_counts rc;
    if (!status)
        status = build_blackboard(c, s, n_active, &bb, &bb_name, &rc, err);
    if (status)
        goto done;
    record_start(c, s, n_active, &rc);
    kiln_opt_plan_announce(c, s, n_active);

    /* the workers, watched until the run is over */
    start_workers(c, s);
    s = NULL;
    kiln_opt_progress ps = {0};
    double t_start = 0;
    const char *stop_reason = "done";
    status = watch(c, n_active, &ps, &t_start, &stop_reason, err);
    stop_workers(c, strcmp(stop_reason, "time limit") == 0);
    flush_nodes(c, 1);
    s = c->store;
    c->store = NULL;
    if (!s) {
        kiln_errf(err, KILN_ERR_IO, "%s: the store could not be opened again after a fork",
                  c->run_dir);
        status = 1;
        free(ps.seen);
        kiln_opt_print_table(c, NULL, stop_reason);
        goto done;
    }
    kiln_opt_progress_draw(c, &ps, 1);
    free(ps.seen);
    char *msg = xasprintf("kiln optimize stopped: %s after %.1f s", stop_reason, now_s() - t_start);
    kiln_store_event(s, 0, "done", msg, NULL);
    free(msg);

    /* the artifact, the table */
    status = write_library(c, s, status, err);
    kiln_opt_print_table(c, s, stop_reason);
    if (status == 0 && strcmp(stop_reason, "interrupted") == 0) {
        kiln_errf(err, KILN_ERR_INVALID,
                  "interrupted; everything finished is in the store: run the same command to "
                  "resume");
        status = 1;
    }

done:
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (bb) {
        kiln_bb_detach(bb);
        kiln_bb_unlink(bb_name);
    }
    free(bb_name);
    if (s)
        kiln_store_close(s);
    kiln_store_unlock();
    ctx_free(c);
    return status;
}
