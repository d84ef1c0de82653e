/* workers.c: what the worker processes of `kiln optimize` share: their signals, the stop they
 * poll, their own store connection, candidate files and parameters, the gate result's verdict, and
 * the steps both kinds of agent take (hold a node, hash a candidate, record and queue it, give
 * back what they hold). The loops are worker_agent.c (the built-in agents), worker_llm.c (the llm
 * agent) and worker_gate.c (the gates). Every worker ends with _exit: it shares the coordinator's
 * stdio buffers and must not flush them twice. */
#include "workers_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "../backend/nvrtc.h"

static volatile sig_atomic_t worker_stop;

static void on_term(int sig) {
    (void)sig;
    worker_stop = 1;
}

/* Ctrl-C goes to the whole process group: workers (and the gate's evaluation children, which
 * inherit SIG_IGN) ignore it and let the coordinator stop them in order, so that an evaluation
 * interrupted by the terminal is never recorded as a crash. SIGTERM asks a worker to finish. */
void kiln_opt_worker_signals(const kiln_opt_ctx *c) {
    signal(SIGINT, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    /* a coordinator killed on its own must not leave workers behind holding the run's lock: they
     * get SIGTERM and finish what they hold (checked once more after the call, for the race) */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != c->coordinator)
        worker_stop = 1;
}

int kiln_opt_stopping(kiln_opt_ctx *c) {
    return worker_stop || kiln_bb_stopping(c->bb);
}

void kiln_opt_nap_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !worker_stop) {
    }
}

kiln_store *kiln_opt_worker_store(kiln_opt_ctx *c, const char *who) {
    kiln_store *s = NULL;
    kiln_err err;
    for (int tries = 0; tries < 5; tries++) {
        if (kiln_store_open(c->run_dir, 0, &s, &err) == KILN_OK)
            return s;
        kiln_opt_nap_ms(200);
    }
    fprintf(stderr, "kiln optimize: %s %d cannot open the store: %s\n", who, (int)getpid(),
            err.msg);
    _exit(3);
}

char *kiln_opt_candidate_path(const kiln_opt_ctx *c, int64_t candidate_id) {
    return xasprintf("%s/%lld.%s", c->cand_dir, (long long)candidate_id, c->cuda ? "cu" : "c");
}

int kiln_opt_family_slot(const kiln_opt_problem *pr, int fam) {
    const kiln_family *f = fam >= 0 ? kiln_family_at(fam) : NULL;
    for (int s = 0; f && s < pr->n_fams; s++)
        if (pr->fams[s] == f)
            return s;
    return -1;
}

void kiln_opt_parse_params(const kiln_family *f, const char *text, int64_t *point) {
    for (int i = 0; i < f->n_params; i++)
        point[i] = f->params[i].n_values > 0 ? f->params[i].values[0] : 0;
    const char *s = text ? text : "";
    while (*s) {
        while (*s == ' ')
            s++;
        const char *eq = strchr(s, '=');
        if (!eq)
            break;
        size_t len = (size_t)(eq - s);
        char *end = NULL;
        long long v = strtoll(eq + 1, &end, 10);
        for (int i = 0; i < f->n_params; i++)
            if (strlen(f->params[i].name) == len && strncmp(f->params[i].name, s, len) == 0)
                point[i] = v;
        s = end && end > eq + 1 ? end : eq + 1;
        while (*s && *s != ' ')
            s++;
    }
}

int kiln_opt_result_read(const cJSON *r, double *time_us, double *spread_pct, double *sol_pct,
                         double *score, int *score_known) {
    kiln_store_summary sum;
    kiln_store_summary_read(r, &sum);
    int outcome = sum.outcome[0] ? kiln_outcome_parse(sum.outcome) : -1;
    *time_us = sum.time_us;
    *spread_pct = sum.spread_pct;
    *sol_pct = sum.sol_pct;
    *score = sum.score_known ? sum.score : -1;
    *score_known = sum.score_known;
    if (outcome != KILN_OUTCOME_OK) {
        *time_us = -1;
        *score = 0;
    }
    return outcome;
}

void kiln_opt_candidate_file_restore(kiln_store *s, int64_t id, const char *path) {
    kiln_store_candidate_row c;
    int found = 0;
    if (kiln_store_candidate_get(s, id, &c, &found, NULL) == KILN_OK && found && c.source)
        kiln_write_file(path, c.source, strlen(c.source), NULL);
    kiln_store_candidate_row_free(&c);
}

void kiln_opt_draft_meta(kiln_store *s, int64_t problem_id, int k, const char *state, int slice) {
    char key[64], value[64];
    snprintf(key, sizeof key, "draft.%lld.%d", (long long)problem_id, k);
    if (slice > 0)
        snprintf(value, sizeof value, "%s %d", state, slice);
    else
        snprintf(value, sizeof value, "%s", state);
    kiln_store_meta_set(s, key, value, NULL);
}

void kiln_opt_log(const kiln_opt_ctx *c, const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if (n > (int)sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    int fd = open(c->log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    ssize_t w = write(fd, line, (size_t)n);
    (void)w;
    close(fd);
}

/* ---------------------------------------------------------------------------------------------
 * The steps both kinds of agent take.
 * --------------------------------------------------------------------------------------------- */

/* Under the lock: 1 when the gates' queue has a free slot and the agents are not too far ahead of
 * the gates (MCTS wants each result before the next choice). */
int kiln_opt_gates_have_room(kiln_opt_ctx *c) {
    kiln_bb_header *h = kiln_bb_hdr(c->bb);
    if (kiln_bb_queue_busy(c->bb) >= h->caps.queue_slots - 1)
        return 0;
    int in_flight = 0;
    for (int i = 0; i < h->n_problems; i++)
        in_flight += kiln_bb_problem_at(c->bb, i)->pending;
    return in_flight < c->max_inflight_total;
}

/* The binary hash of a candidate: the cubin's (cuda, NVRTC in this process, so that agents compile
 * in parallel and a compile error never reaches the gate), or the source's (cpu; and cuda when
 * NVRTC is not there: then the gate compiles). *compile_log gets NVRTC's log on a compile error. */
uint64_t kiln_opt_candidate_hash(kiln_opt_ctx *c, const char *src, uint64_t source_hash,
                                 int *compile_failed, char **compile_log, int *compiled) {
    *compile_failed = 0;
    *compile_log = NULL;
    *compiled = 0;
    /* a library call (`// kiln: library`) has no cubin: its text is what it runs */
    if (!c->cuda || kiln_abi_is_library(src))
        return source_hash;
    char *cubin = NULL, *log = NULL;
    size_t len = 0;
    kiln_err err;
    int rc = kiln_cuda_compile_only(src, NULL, &cubin, &len, &log, &err);
    if (rc == KILN_OK) {
        uint64_t h = kiln_fnv1a(KILN_FNV_INIT, cubin, len);
        free(cubin);
        free(log);
        *compiled = 1;
        return h ? h : 1;
    }
    if (rc == KILN_ERR_COMPILE) {
        *compile_failed = 1;
        *compile_log = log ? log : xstrdup(err.msg);
        if (log && !log[0]) {
            free(log);
            *compile_log = xstrdup(err.msg);
        }
    } else {
        free(log);
    }
    return source_hash;
}

static cJSON *compile_error_result(kiln_opt_ctx *c, const kiln_opt_problem *pr, const char *path,
                                   const char *log) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "kiln_eval", 1);
    cJSON_AddStringToObject(r, "problem", pr->p->name);
    cJSON_AddStringToObject(r, "problem_dir", pr->dir);
    cJSON_AddStringToObject(r, "kernel", path);
    cJSON_AddStringToObject(r, "backend", c->backend);
    cJSON_AddNullToObject(r, "device");
    cJSON_AddStringToObject(r, "outcome", "compile_error");
    cJSON *ev = cJSON_AddObjectToObject(r, "evidence");
    size_t n = strlen(log);
    cJSON_AddStringToObject(ev, "log", n > 16384 ? log + n - 16384 : log);
    cJSON_AddStringToObject(ev, "message", "NVRTC rejected the source (found by the agent)");
    cJSON_AddNullToObject(r, "compile_s");
    cJSON_AddArrayToObject(r, "workloads");
    cJSON_AddNullToObject(r, "summary");
    return r;
}

/* Under the lock: st->pick names the node to expand; copies what the agent needs of it and marks
 * it held by the worker (whose death gives its virtual loss back). */
void kiln_opt_agent_hold(kiln_opt_ctx *c, int worker, kiln_opt_agent_step *st) {
    kiln_bb_problem *P = kiln_bb_problem_at(c->bb, st->pi);
    st->parent = st->pick.node;
    kiln_bb_node *n = kiln_bb_node_at(c->bb, st->parent);
    st->parent_family = n->family;
    memcpy(st->parent_params, n->params, sizeof st->parent_params);
    st->parent_store_node = n->store_node_id;
    st->parent_candidate = n->candidate_id;
    st->incumbent_family =
        P->incumbent_node >= 0 ? kiln_bb_node_at(c->bb, P->incumbent_node)->family : -1;
    kiln_bb_worker_at(c->bb, worker)->held_node = st->parent;
}

/* Under the lock: a child reserved for the store failed to be recorded: forget it. */
static void agent_unmake(kiln_opt_ctx *c, int worker, int child) {
    kiln_bb_node *n = kiln_bb_node_at(c->bb, child);
    kiln_bb_problem *P = kiln_bb_problem_at(c->bb, n->problem);
    kiln_mcts_virtual_loss(c->bb, child, -1);
    kiln_bb_node_kill(c->bb, child);
    if (P->made > 0)
        P->made--;
    if (P->pending > 0)
        P->pending--;
    if (P->draft_state == KILN_BB_DRAFT_ACTIVE && n->draft == P->draft_count && n->draft > 0) {
        if (P->draft_made > 0)
            P->draft_made--;
        if (P->draft_pending > 0)
            P->draft_pending--;
    }
    kiln_bb_worker_at(c->bb, worker)->held_node = -1;
    kiln_bb_touch(c->bb, n->problem);
}

/* Records a reserved child: node row, candidate row, the node's link to it, then the file the gate
 * reads; a compile error found by the agent is answered at once, anything else is queued for the
 * gate. Returns the candidate's id, or 0 when it could not be recorded (the child is given back)
 * or the run stopped before it was queued. */
int64_t kiln_opt_agent_record(kiln_opt_ctx *c, kiln_store *s, int worker,
                              const kiln_opt_agent_step *st, const kiln_opt_problem *pr,
                              const kiln_opt_agent_made *m) {
    kiln_bb *bb = c->bb;
    int child = m->child;
    const kiln_family *f = m->family;
    char *params = f ? kiln_family_point_str(f, m->point) : xstrdup("");
    kiln_err err;
    kiln_store_node sn = {0};
    sn.problem_id = pr->store_id;
    /* a draft's root is a root of its own in the store (docs/store.md), under the problem's root on
     * the blackboard */
    sn.parent_id = st->pick.make_draft_root ? 0 : st->parent_store_node;
    sn.draft = st->pick.draft;
    sn.family = f ? f->name : NULL;
    sn.params = params;
    sn.status = "pending";
    int64_t cand_id = 0;
    int ok = kiln_store_node_insert(s, &sn, &err) == KILN_OK;
    if (ok) {
        kiln_store_candidate cand = {0};
        cand.problem_id = pr->store_id;
        cand.parent_id = st->parent_candidate;
        cand.node_id = sn.id;
        cand.agent = m->agent;
        cand.family = f ? f->name : NULL;
        cand.params = params;
        cand.draft = st->pick.draft;
        cand.source = m->src;
        cand.source_hash = m->source_hash;
        cand.binary_hash = (m->compiled || !c->cuda) ? m->bin_hash : 0;
        cand.compile_log = m->compile_log;
        ok = kiln_store_candidate_insert(s, &cand, &cand_id, &err) == KILN_OK;
        if (ok) {
            sn.candidate_id = cand_id;
            kiln_store_node_update(s, &sn, NULL);
        }
    }
    char *path = ok ? kiln_opt_candidate_path(c, cand_id) : NULL;
    if (ok && kiln_write_file(path, m->src, strlen(m->src), &err) != KILN_OK)
        ok = 0;
    if (!ok) {
        fprintf(stderr, "kiln optimize: agent %s: %s: candidate not recorded: %s\n", m->agent,
                pr->p->name, err.msg);
        kiln_bb_lock(bb);
        agent_unmake(c, worker, child);
        kiln_bb_unlock(bb);
        kiln_opt_nap_ms(100);
        cand_id = 0;
    } else if (m->compile_failed) {
        cJSON *r = compile_error_result(c, pr, path, m->compile_log ? m->compile_log : "");
        char *json = cJSON_PrintUnformatted(r);
        cJSON_Delete(r);
        kiln_store_result_insert(s, cand_id, "compile_error", json, -1, -1, -1, 0, NULL);
        free(json);
        kiln_bb_lock(bb);
        kiln_bb_node *n = kiln_bb_node_at(bb, child);
        n->candidate_id = cand_id;
        n->store_node_id = sn.id;
        n->owner = -1;
        kiln_mcts_result(bb, child, 0, -1, 0, &c->mcts);
        int closed = kiln_mcts_draft_maybe_close(bb, st->pi);
        kiln_bb_worker_at(bb, worker)->held_node = -1;
        kiln_bb_worker_at(bb, worker)->work_done++;
        kiln_bb_unlock(bb);
        if (closed) {
            kiln_opt_draft_meta(s, pr->store_id, closed, "closed", 0);
            kiln_store_event(s, pr->store_id, "draft", "draft closed without beating the incumbent",
                             NULL);
        }
    } else {
        for (;;) {
            kiln_bb_lock(bb);
            kiln_bb_node *n = kiln_bb_node_at(bb, child);
            n->candidate_id = cand_id;
            n->store_node_id = sn.id;
            int slot = kiln_bb_queue_push(bb, st->pi, child, cand_id);
            if (slot >= 0) {
                n->status = KILN_BB_NODE_QUEUED;
                n->owner = -1;
                kiln_bb_worker_at(bb, worker)->held_node = -1;
                kiln_bb_worker_at(bb, worker)->work_done++;
                kiln_bb_touch(bb, st->pi);
            }
            kiln_bb_unlock(bb);
            if (slot >= 0)
                break;
            if (kiln_opt_stopping(c)) {
                cand_id = 0; /* the node stays held, and the exit path gives it back */
                break;
            }
            kiln_opt_nap_ms(20); /* the ring is full: the gate will free a slot */
        }
    }
    free(path);
    free(params);
    return cand_id;
}

/* Under the lock: gives back what the worker holds: a node it was making, or a selection's virtual
 * loss. */
void kiln_opt_agent_release_held(kiln_opt_ctx *c, int worker) {
    kiln_bb_worker *w = kiln_bb_worker_at(c->bb, worker);
    if (w->held_node >= 0) {
        kiln_bb_node *n = kiln_bb_node_at(c->bb, w->held_node);
        if (n->status == KILN_BB_NODE_CREATING)
            agent_unmake(c, worker, w->held_node);
        else
            kiln_mcts_virtual_loss(c->bb, w->held_node, -1);
        w->held_node = -1;
    }
}

/* The end of an agent process: what it holds goes back, its store closes. */
void kiln_opt_agent_exit(kiln_opt_ctx *c, kiln_store *s, int worker) {
    kiln_bb_lock(c->bb);
    kiln_opt_agent_release_held(c, worker);
    kiln_bb_unlock(c->bb);
    kiln_store_close(s);
    _exit(0);
}
