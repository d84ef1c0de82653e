/* workers.c: the two process loops of `kiln optimize` besides the coordinator: an agent (select a
 * node, propose a child in its speciality, emit and hash it, dedupe, record it, queue it) and a
 * gate (take a candidate, prove and time it, record the verdict at once, back the reward up, and
 * re-time a challenger against the incumbent). Both poll the blackboard's stop flag between pieces
 * of work and end with _exit: they share the coordinator's stdio buffers and must not flush them
 * twice. */
#include "optimize_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../backend/cuda_backend.h"

static volatile sig_atomic_t worker_stop;

static void on_term(int sig) {
    (void)sig;
    worker_stop = 1;
}

/* Ctrl-C goes to the whole process group: workers (and the gate's evaluation children, which
 * inherit SIG_IGN) ignore it and let the coordinator stop them in order, so that an evaluation
 * interrupted by the terminal is never recorded as a crash. SIGTERM asks a worker to finish. */
static void worker_signals(const kiln_opt_ctx *c) {
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

static int stopping(kiln_opt_ctx *c) {
    return worker_stop || kiln_bb_stopping(c->bb);
}

static void nap_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !worker_stop) {
    }
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

static int registry_index(const kiln_family *f) {
    for (int i = 0; i < kiln_family_count(); i++)
        if (kiln_family_at(i) == f)
            return i;
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

static kiln_store *worker_store(kiln_opt_ctx *c, const char *who) {
    kiln_store *s = NULL;
    kiln_err err;
    for (int tries = 0; tries < 5; tries++) {
        if (kiln_store_open(c->run_dir, 0, &s, &err) == KILN_OK)
            return s;
        nap_ms(200);
    }
    fprintf(stderr, "kiln optimize: %s %d cannot open the store: %s\n", who, (int)getpid(),
            err.msg);
    _exit(3);
}

/* ---------------------------------------------------------------------------------------------
 * Agents.
 * --------------------------------------------------------------------------------------------- */

/* Under the lock: 1 when the gates' queue has a free slot and the agents are not too far ahead of
 * the gates (MCTS wants each result before the next choice). */
static int gates_have_room(kiln_opt_ctx *c) {
    kiln_bb_header *h = kiln_bb_hdr(c->bb);
    if (kiln_bb_queue_busy(c->bb) >= h->caps.queue_slots - 1)
        return 0;
    int in_flight = 0;
    for (int i = 0; i < h->n_problems; i++)
        in_flight += kiln_bb_problem_at(c->bb, i)->pending;
    return in_flight < c->max_inflight_total;
}

/* Under the lock: the hottest problem that still has budget and room in the gate's queue. */
static int pick_problem(kiln_opt_ctx *c) {
    kiln_bb_header *h = kiln_bb_hdr(c->bb);
    if (!gates_have_room(c))
        return -1;
    for (int i = 0; i < h->n_problems; i++) {
        kiln_bb_problem *P = kiln_bb_problem_at(c->bb, i);
        if (P->root < 0 || kiln_mcts_problem_finished(P))
            continue;
        if (P->pending >= c->max_inflight)
            continue;
        return i;
    }
    return -1;
}

/* The binary hash of a candidate: the cubin's (cuda, NVRTC in this process, so that agents compile
 * in parallel and a compile error never reaches the gate), or the source's (cpu; and cuda when
 * NVRTC is not there: then the gate compiles). *compile_log gets NVRTC's log on a compile error. */
static uint64_t candidate_hash(kiln_opt_ctx *c, const char *src, uint64_t source_hash,
                               int *compile_failed, char **compile_log, int *compiled) {
    *compile_failed = 0;
    *compile_log = NULL;
    *compiled = 0;
    if (!c->cuda)
        return source_hash;
    char *cubin = NULL, *log = NULL;
    size_t len = 0;
    kiln_err err;
    int rc = kiln_cuda_compile_only(src, getenv("KILN_CUDA_ARCH"), &cubin, &len, &log, &err);
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

/* The proposal for a new draft's root: another family than the incumbent's when the problem has
 * more than one ("another algorithm root"), else a random restart in the same family. */
static int propose_draft_root(kiln_opt_ctx *c, const kiln_opt_problem *pr,
                              const kiln_agent_problem *ap, int incumbent_slot, int attempt,
                              uint64_t *rng, kiln_proposal *out) {
    (void)c;
    memset(out, 0, sizeof *out);
    if (pr->n_fams > 1) {
        int slot = (int)(kiln_agent_rand(rng) % (uint64_t)(pr->n_fams - 1));
        if (incumbent_slot >= 0 && slot >= incumbent_slot)
            slot++;
        if (slot >= pr->n_fams)
            slot = 0;
        int rc = attempt == 0 ? kiln_agent_start_point(ap, slot, rng, out->point)
                              : kiln_agent_random_point(ap, slot, rng, out->point);
        out->slot = slot;
        out->used = KILN_AGENT_ALGORITHM;
        snprintf(out->note, sizeof out->note, "draft root: another family (%s)",
                 pr->fams[slot]->name);
        return rc;
    }
    int slot = incumbent_slot >= 0 ? incumbent_slot : 0;
    out->slot = slot;
    out->used = KILN_AGENT_RANDOM;
    snprintf(out->note, sizeof out->note, "draft root: random restart in %s", pr->fams[slot]->name);
    return kiln_agent_random_point(ap, slot, rng, out->point);
}

/* Records the fusion opportunities of a problem (once per problem and store: the meta key
 * "fusion_noted.<problem>" remembers it across resumed runs). */
static void note_fusion(kiln_opt_ctx *c, kiln_store *s, const kiln_opt_problem *pr) {
    if (!c->model) {
        kiln_store_event(s, pr->store_id, "fusion",
                         "fusion agent: no RUN/model.json, so no neighbours to look at", NULL);
    } else {
        char *lines[8];
        int n = kiln_agent_fusion_scan(c->model, pr->p->name, lines, 8);
        if (n == 0)
            kiln_store_event(s, pr->store_id, "fusion",
                             "fusion agent: model.json shows no producer or consumer op next to "
                             "this problem's first call",
                             NULL);
        for (int i = 0; i < n; i++) {
            kiln_store_event(s, pr->store_id, "fusion", lines[i], NULL);
            free(lines[i]);
        }
    }
    /* noted last: a death before this line notes it again next time, never not at all */
    char key[64];
    snprintf(key, sizeof key, "fusion_noted.%lld", (long long)pr->store_id);
    kiln_store_meta_set(s, key, "1", NULL);
}

typedef struct {
    int pi;     /* blackboard problem */
    int parent; /* blackboard node */
    kiln_mcts_pick pick;
    int parent_family;
    int64_t parent_params[KILN_BB_MAX_PARAMS];
    int64_t parent_store_node;
    int64_t parent_candidate;
    int incumbent_family;
} agent_step;

/* Under the lock: st->pick names the node to expand; copies what the agent needs of it and marks
 * it held by the worker (whose death gives its virtual loss back). */
static void agent_hold(kiln_opt_ctx *c, int worker, agent_step *st) {
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

/* Under the lock: select; fills st. Returns 0 with a node to expand, -1 when there is nothing to
 * do right now. */
static int agent_select(kiln_opt_ctx *c, int worker, agent_step *st) {
    memset(st, 0, sizeof *st);
    st->pi = pick_problem(c);
    if (st->pi < 0)
        return -1;
    kiln_bb_problem *P = kiln_bb_problem_at(c->bb, st->pi);
    if (kiln_mcts_select(c->bb, st->pi, &c->mcts, &st->pick) != 0) {
        if (P->draft_state != KILN_BB_DRAFT_ACTIVE)
            P->exhausted = 1;
        kiln_bb_touch(c->bb, st->pi);
        return -1;
    }
    agent_hold(c, worker, st);
    return 0;
}

/* Under the lock: the selection made nothing new. */
static void agent_give_up(kiln_opt_ctx *c, int worker, agent_step *st) {
    kiln_mcts_expand_failed(c->bb, st->parent, &c->mcts);
    if (st->pick.make_draft_root)
        kiln_mcts_draft_give_up(c->bb, st->pi);
    kiln_bb_worker_at(c->bb, worker)->held_node = -1;
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

/* A child an agent reserved on the blackboard (kiln_mcts_child_add: CREATING, held by the worker)
 * together with what it made. */
typedef struct {
    int child;
    const kiln_family *family; /* NULL: a kernel no family made (the llm agent) */
    const int64_t *point;      /* the family's point (with a family) */
    const char *agent;         /* candidate.agent in the store */
    const char *src;
    uint64_t source_hash, bin_hash;
    int compiled, compile_failed; /* candidate_hash()'s answers */
    const char *compile_log;
} agent_made;

/* Records a reserved child: node row, candidate row, the node's link to it, then the file the gate
 * reads; a compile error found by the agent is answered at once, anything else is queued for the
 * gate. Returns the candidate's id, or 0 when it could not be recorded (the child is given back)
 * or the run stopped before it was queued. */
static int64_t agent_record(kiln_opt_ctx *c, kiln_store *s, int worker, const agent_step *st,
                            const kiln_opt_problem *pr, const agent_made *m) {
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
        nap_ms(100);
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
            if (stopping(c)) {
                cand_id = 0; /* the node stays held, and the exit path gives it back */
                break;
            }
            nap_ms(20); /* the ring is full: the gate will free a slot */
        }
    }
    free(path);
    free(params);
    return cand_id;
}

static void agent_once(kiln_opt_ctx *c, kiln_store *s, int worker, int kind, uint64_t *rng) {
    kiln_bb *bb = c->bb;
    agent_step st;
    kiln_bb_lock(bb);
    int rc = agent_select(c, worker, &st);
    kiln_bb_unlock(bb);
    if (rc != 0) {
        nap_ms(15);
        return;
    }
    kiln_opt_problem *pr = &c->problems[c->of_bb[st.pi]];
    if (st.pick.draft_opened) {
        kiln_bb_lock(bb);
        int slice = kiln_bb_problem_at(bb, st.pi)->draft_slice;
        int since = c->mcts.plateau;
        kiln_bb_unlock(bb);
        char *msg = xasprintf("opened draft %d: the incumbent has not improved by >= %.0f%% for %d "
                              "results; slice %d candidates",
                              st.pick.draft, 100 * c->mcts.improve_frac, since, slice);
        kiln_store_event(s, pr->store_id, "draft", msg, NULL);
        kiln_opt_draft_meta(s, pr->store_id, st.pick.draft, "open", slice);
        free(msg);
    }

    kiln_agent_problem ap = {pr->p, pr->n_fams, pr->fams, pr->matches};
    int parent_slot = kiln_opt_family_slot(pr, st.parent_family);
    int incumbent_slot = kiln_opt_family_slot(pr, st.incumbent_family);
    int child = -1;
    kiln_proposal prop;
    char *src = NULL, *compile_log = NULL;
    uint64_t source_hash = 0, bin_hash = 0;
    int compile_failed = 0, compiled = 0;
    for (int attempt = 0; attempt < 3 && child < 0 && !stopping(c); attempt++) {
        int prc =
            st.pick.make_draft_root
                ? propose_draft_root(c, pr, &ap, incumbent_slot, attempt, rng, &prop)
                : kiln_agent_propose(kind, &ap, parent_slot, st.parent_params, attempt, rng, &prop);
        if (prc != 0)
            break;
        free(src);
        free(compile_log);
        compile_log = NULL;
        src = pr->fams[prop.slot]->emit(pr->p, &pr->matches[prop.slot], prop.point, c->cuda);
        if (!src)
            continue;
        source_hash = kiln_fnv1a(KILN_FNV_INIT, src, strlen(src));
        /* the same source is the same binary: no need to compile it to know */
        kiln_bb_lock(bb);
        int seen = kiln_bb_dedupe_find(bb, st.pi, source_hash) != NULL;
        if (seen) {
            kiln_bb_problem_at(bb, st.pi)->dups++;
            kiln_bb_touch(bb, st.pi);
        }
        kiln_bb_unlock(bb);
        if (seen)
            continue;
        bin_hash = candidate_hash(c, src, source_hash, &compile_failed, &compile_log, &compiled);
        kiln_bb_lock(bb);
        kiln_bb_problem *P = kiln_bb_problem_at(bb, st.pi);
        if (kiln_bb_dedupe_find(bb, st.pi, bin_hash) ||
            kiln_bb_dedupe_find(bb, st.pi, source_hash)) {
            P->dups++;
            kiln_bb_touch(bb, st.pi);
        } else if (P->made >= P->budget || P->exhausted) {
            attempt = 99; /* someone else took the last of the budget, or ended the problem */
        } else {
            int fam = registry_index(pr->fams[prop.slot]);
            child = kiln_mcts_child_add(bb, &st.pick, fam, prop.point,
                                        pr->fams[prop.slot]->n_params, prop.used, worker);
            if (child >= 0) {
                kiln_bb_dedupe_insert(bb, st.pi, bin_hash, child, 0, NULL);
                if (source_hash != bin_hash)
                    kiln_bb_dedupe_insert(bb, st.pi, source_hash, child, 0, NULL);
                kiln_bb_worker_at(bb, worker)->held_node = child;
            } else {
                attempt = 99; /* the node array is full: the problem is done */
                P->exhausted = 1;
                kiln_bb_worker_at(bb, worker)->held_node = -1;
            }
        }
        kiln_bb_unlock(bb);
        if (attempt >= 99)
            break;
    }
    if (child < 0) {
        kiln_bb_lock(bb);
        kiln_bb_worker *w = kiln_bb_worker_at(bb, worker);
        if (w->held_node == st.parent) {
            if (kiln_bb_problem_at(bb, st.pi)->made >= kiln_bb_problem_at(bb, st.pi)->budget ||
                stopping(c)) {
                kiln_mcts_virtual_loss(bb, st.parent, -1); /* not a failure of the node */
                w->held_node = -1;
            } else {
                agent_give_up(c, worker, &st);
            }
        }
        kiln_bb_unlock(bb);
        free(src);
        free(compile_log);
        return;
    }

    agent_made m = {.child = child,
                    .family = pr->fams[prop.slot],
                    .point = prop.point,
                    .agent = kiln_agent_name(prop.used),
                    .src = src,
                    .source_hash = source_hash,
                    .bin_hash = bin_hash,
                    .compiled = compiled,
                    .compile_failed = compile_failed,
                    .compile_log = compile_log};
    agent_record(c, s, worker, &st, pr, &m);
    free(src);
    free(compile_log);
}

/* Under the lock: gives back what the worker holds: a node it was making, or a selection's virtual
 * loss. */
static void agent_release_held(kiln_opt_ctx *c, int worker) {
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
static void agent_exit(kiln_opt_ctx *c, kiln_store *s, int worker) __attribute__((noreturn));
static void agent_exit(kiln_opt_ctx *c, kiln_store *s, int worker) {
    kiln_bb_lock(c->bb);
    agent_release_held(c, worker);
    kiln_bb_unlock(c->bb);
    kiln_store_close(s);
    _exit(0);
}

/* ---------------------------------------------------------------------------------------------
 * The llm agent: a kernel from a language model (llm.h) instead of a family's point.
 *
 * One loop: select a node that has a verdict (kiln_mcts_select_open), tell the model about it
 * (the problem, the device and its ceilings from the store, the node's source, time and SOL %, the
 * failures below it), take one kernel from the reply, and hand it in exactly as the built-in agents
 * do: the same hashes, the same dedupe, the same compile check, the same record and queue. A reply
 * without a kernel, a timeout or an HTTP error is an outcome: the exchange is in the store's
 * llm_exchange (a no_kernel reply is fed back in the node's next prompt), an event says it, and the
 * agent asks again. It stops for good, clearing its worker slot, when the run's token budget is
 * spent or LLM_FRUITLESS_LIMIT exchanges in a row made no new candidate: the endpoint is not
 * helping, and a problem it kept open (exhausted, or no family) must be allowed to end.
 * --------------------------------------------------------------------------------------------- */

#define LLM_FRUITLESS_LIMIT 8

typedef struct {
    int fruitless;      /* exchanges in a row that made no new candidate */
    int64_t dup_parent; /* the node (its candidate id) whose last kernel was a duplicate, -1 */
    int64_t dup_of;     /* the candidate it duplicated (0: unknown) */
} llm_state;

static int llm_cancelled(void *arg) {
    return stopping(arg);
}

/* Naps ms milliseconds, or until the run stops. */
static void nap_unless_stopping(kiln_opt_ctx *c, int ms) {
    for (int t = 0; t < ms && !stopping(c); t += 100)
        nap_ms(ms - t < 100 ? ms - t : 100);
}

/* Under the lock: the node for the llm agent's next request: in the hottest problem with budget
 * left (exhausted or not: the model is not bound to the families) and room in flight, the one
 * kiln_mcts_select_open picks. Returns 0 with st filled, -1 when nothing can be asked now. */
static int llm_select(kiln_opt_ctx *c, int worker, agent_step *st) {
    memset(st, 0, sizeof *st);
    kiln_bb_header *h = kiln_bb_hdr(c->bb);
    if (!gates_have_room(c))
        return -1;
    for (int i = 0; i < h->n_problems; i++) {
        kiln_bb_problem *P = kiln_bb_problem_at(c->bb, i);
        if (P->root < 0 || P->made >= P->budget || P->pending >= c->max_inflight)
            continue;
        if (kiln_mcts_select_open(c->bb, i, &c->mcts, &st->pick) != 0)
            continue;
        st->pi = i;
        agent_hold(c, worker, st);
        return 0;
    }
    return -1;
}

/* Under no lock: the request made nothing: the selection's virtual loss goes back. It is not a
 * failed expansion of the node: the built-in agents may still expand it. */
static void llm_release(kiln_opt_ctx *c, int worker) {
    kiln_bb_lock(c->bb);
    agent_release_held(c, worker);
    kiln_bb_unlock(c->bb);
}

static void llm_retire(kiln_opt_ctx *c, kiln_store *s, int worker, const char *why)
    __attribute__((noreturn));
static void llm_retire(kiln_opt_ctx *c, kiln_store *s, int worker, const char *why) {
    char *msg =
        xasprintf("llm agent (pid %d) stops: %s; the other agents go on", (int)getpid(), why);
    kiln_store_event(s, 0, "llm", msg, NULL);
    fprintf(stderr, "kiln optimize: %s\n", msg);
    free(msg);
    kiln_bb_lock(c->bb);
    agent_release_held(c, worker);
    kiln_bb_worker_at(c->bb, worker)->role = KILN_BB_ROLE_NONE; /* not restarted */
    kiln_bb_unlock(c->bb);
    kiln_store_close(s);
    _exit(0);
}

/* An exchange made no new candidate: count it, and stop after LLM_FRUITLESS_LIMIT in a row. */
static void llm_fruitless(kiln_opt_ctx *c, kiln_store *s, int worker, llm_state *ls) {
    if (++ls->fruitless < LLM_FRUITLESS_LIMIT)
        return;
    char why[128];
    snprintf(why, sizeof why, "%d exchanges in a row made no new candidate (see the llm events)",
             ls->fruitless);
    llm_retire(c, s, worker, why);
}

/* Under the lock: the candidate a dedupe entry stands for (0 while its agent is still recording
 * it). */
static int64_t dedupe_candidate(kiln_bb *bb, const kiln_bb_dedupe *e) {
    if (e->candidate_id > 0)
        return e->candidate_id;
    return e->node >= 0 ? kiln_bb_node_at(bb, e->node)->candidate_id : 0;
}

static void llm_once(kiln_opt_ctx *c, kiln_store *s, int worker, llm_state *ls) {
    kiln_bb *bb = c->bb;
    agent_step st;
    kiln_bb_lock(bb);
    int rc = llm_select(c, worker, &st);
    kiln_bb_unlock(bb);
    if (rc != 0) {
        nap_ms(50);
        return;
    }
    kiln_opt_problem *pr = &c->problems[c->of_bb[st.pi]];
    char node[64];
    if (st.parent_candidate > 0)
        snprintf(node, sizeof node, "candidate %lld", (long long)st.parent_candidate);
    else
        snprintf(node, sizeof node, "the root");

    kiln_llm_config cfg = c->opt.llm;
    cfg.store = s;
    cfg.problem_id = pr->store_id;
    cfg.cancelled = llm_cancelled;
    cfg.cancel_arg = c;
    kiln_llm_context ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.problem = pr->p;
    ctx.backend = c->backend;
    char task[256];
    if (ls->dup_parent == st.parent_candidate && ls->dup_of > 0) {
        snprintf(task, sizeof task,
                 "your last answer for this kernel was the same binary as candidate %lld, which "
                 "kiln has measured already: write a different kernel.",
                 (long long)ls->dup_of);
        ctx.task = task;
    }
    kiln_err err;
    char *kernel = NULL;
    kiln_llm_status lst;
    memset(&lst, 0, sizeof lst);
    rc = kiln_llm_context_load(s, pr->store_id, st.parent_candidate, cfg.max_feedback, &ctx, &err);
    if (rc == KILN_OK)
        rc = kiln_llm_propose(&cfg, &ctx, &kernel, &lst, &err);
    kiln_llm_context_clear(&ctx);
    if (rc != KILN_OK) {
        /* nothing was asked: the endpoint names no model, or the store could not be read; an
         * endpoint that is still starting gets a little time */
        llm_release(c, worker);
        char *msg = xasprintf("llm agent: nothing asked for %s: %s", node, err.msg);
        kiln_store_event(s, pr->store_id, "llm", msg, NULL);
        if (ls->fruitless == 0)
            fprintf(stderr, "kiln optimize: %s\n", msg);
        free(msg);
        nap_unless_stopping(c, 1000 << (ls->fruitless < 5 ? ls->fruitless : 5));
        llm_fruitless(c, s, worker, ls);
        return;
    }
    if (lst.outcome == KILN_LLM_BUDGET)
        llm_retire(c, s, worker, lst.reason);
    if (stopping(c) || lst.outcome == KILN_LLM_CANCELLED) {
        llm_release(c, worker);
        free(kernel);
        return;
    }
    if (!kernel) {
        llm_release(c, worker);
        char *msg = xasprintf("llm agent: %s for %s: %s", kiln_llm_outcome_name(lst.outcome), node,
                              lst.reason);
        kiln_store_event(s, pr->store_id, "llm", msg, NULL);
        free(msg);
        llm_fruitless(c, s, worker, ls);
        return;
    }

    /* the kernel, handed in as every agent hands in its candidates: source hash, binary hash (and
     * on cuda the compile check), dedupe, the budget, the record */
    uint64_t source_hash = kiln_fnv1a(KILN_FNV_INIT, kernel, strlen(kernel));
    uint64_t bin_hash = source_hash;
    int compile_failed = 0, compiled = 0, child = -1;
    char *compile_log = NULL;
    int64_t dup_of = -1; /* >= 0: a binary seen before (its candidate; 0 while being recorded) */
    kiln_bb_lock(bb);
    kiln_bb_dedupe *e = kiln_bb_dedupe_find(bb, st.pi, source_hash);
    if (e)
        dup_of = dedupe_candidate(bb, e);
    kiln_bb_unlock(bb);
    if (dup_of < 0)
        bin_hash = candidate_hash(c, kernel, source_hash, &compile_failed, &compile_log, &compiled);
    kiln_bb_lock(bb);
    kiln_bb_problem *P = kiln_bb_problem_at(bb, st.pi);
    if (dup_of < 0) {
        e = kiln_bb_dedupe_find(bb, st.pi, bin_hash);
        if (!e)
            e = kiln_bb_dedupe_find(bb, st.pi, source_hash);
        if (e)
            dup_of = dedupe_candidate(bb, e);
    }
    if (dup_of >= 0) {
        P->dups++;
        kiln_bb_touch(bb, st.pi);
    } else if (P->made < P->budget) {
        static const int64_t no_point[KILN_BB_MAX_PARAMS];
        child = kiln_mcts_child_add(bb, &st.pick, -1, no_point, 0, KILN_AGENT_LLM, worker);
        if (child >= 0) {
            kiln_bb_dedupe_insert(bb, st.pi, bin_hash, child, 0, NULL);
            if (source_hash != bin_hash)
                kiln_bb_dedupe_insert(bb, st.pi, source_hash, child, 0, NULL);
            kiln_bb_worker_at(bb, worker)->held_node = child;
        } else {
            kiln_bb_worker_at(bb, worker)->held_node = -1; /* child_add gave the loss back */
        }
    }
    kiln_bb_unlock(bb);
    if (child >= 0) {
        agent_made m = {.child = child,
                        .family = NULL, /* no family made it */
                        .agent = kiln_agent_name(KILN_AGENT_LLM),
                        .src = kernel,
                        .source_hash = source_hash,
                        .bin_hash = bin_hash,
                        .compiled = compiled,
                        .compile_failed = compile_failed,
                        .compile_log = compile_log};
        int64_t cand = agent_record(c, s, worker, &st, pr, &m);
        if (cand > 0) {
            kiln_store_llm_exchange_link(s, lst.exchange_id, cand, NULL);
            ls->fruitless = 0;
            ls->dup_parent = -1;
            ls->dup_of = 0;
        }
    } else {
        llm_release(c, worker);
        char *msg;
        if (dup_of > 0)
            msg = xasprintf("llm agent: its kernel for %s is candidate %lld's binary again", node,
                            (long long)dup_of);
        else if (dup_of == 0)
            msg = xasprintf("llm agent: its kernel for %s is a binary seen before", node);
        else /* the other agents spent the budget (or filled the tree) while the model wrote */
            msg = xasprintf("llm agent: its kernel for %s came after the problem's budget was "
                            "spent; not recorded",
                            node);
        kiln_store_event(s, pr->store_id, "llm", msg, NULL);
        free(msg);
        if (dup_of >= 0) {
            if (dup_of > 0)
                kiln_store_llm_exchange_link(s, lst.exchange_id, dup_of, NULL);
            ls->dup_parent = st.parent_candidate;
            ls->dup_of = dup_of;
            llm_fruitless(c, s, worker, ls);
        }
    }
    free(kernel);
    free(compile_log);
}

void kiln_opt_agent_main(kiln_opt_ctx *c, int worker) {
    worker_signals(c);
    kiln_bb_lock(c->bb);
    int kind = kiln_bb_worker_at(c->bb, worker)->kind;
    kiln_bb_unlock(c->bb);
    kiln_store *s = worker_store(c, "agent");
    if (kind == KILN_AGENT_LLM) {
        llm_state ls;
        memset(&ls, 0, sizeof ls);
        while (!stopping(c))
            llm_once(c, s, worker, &ls);
        agent_exit(c, s, worker);
    }
    if (kind == KILN_AGENT_FUSION) {
        /* the fusion agent reads model.json first, for every problem no fusion agent has read */
        kiln_bb_header *h = kiln_bb_hdr(c->bb);
        for (int i = 0; i < h->n_problems && !stopping(c); i++) {
            kiln_bb_lock(c->bb);
            kiln_bb_problem *P = kiln_bb_problem_at(c->bb, i);
            int mine = !P->fusion_noted;
            P->fusion_noted = 1;
            kiln_bb_unlock(c->bb);
            if (mine)
                note_fusion(c, s, &c->problems[c->of_bb[i]]);
        }
    }
    uint64_t rng =
        c->opt.seed ^ (0x9e3779b97f4a7c15ULL * (uint64_t)(worker + 1)) ^ ((uint64_t)getpid() << 32);
    while (!stopping(c))
        agent_once(c, s, worker, kind, &rng);
    agent_exit(c, s, worker);
}

/* ---------------------------------------------------------------------------------------------
 * Gates.
 * --------------------------------------------------------------------------------------------- */

/* The candidate's file; rewritten from the store when it went missing (a resumed run). */
static char *ensure_candidate_file(kiln_opt_ctx *c, kiln_store *s, int64_t id) {
    char *path = kiln_opt_candidate_path(c, id);
    if (access(path, R_OK) == 0)
        return path;
    kiln_opt_candidate_file_restore(s, id, path);
    return path;
}

/* The gate process's session: one evaluation child that keeps the device context (and the input
 * sets) from one candidate to the next, restarted after a crash or a hang (gate.h). */
static kiln_gate_session *gate_session;

/* Times a candidate in the re-timing: the median geomean of an ok evaluation, or -1. */
static double retime_one(kiln_opt_ctx *c, const kiln_opt_problem *pr, const char *path, int64_t id,
                         const kiln_gate_options *opt) {
    kiln_opt_log(c, "retime %lld pid=%d", (long long)id, (int)getpid());
    cJSON *r = kiln_gate_session_eval(gate_session, pr->p, pr->ref, path, opt);
    double t, spread, sol, score;
    int known;
    int o = kiln_opt_result_read(r, &t, &spread, &sol, &score, &known);
    cJSON_Delete(r);
    return o == KILN_OUTCOME_OK ? t : -1;
}

/* The incumbent rule: A B A B ... through this gate, then the verdict. Returns 1 replaced, 0 kept,
 * -1 interrupted by a stop. */
static int challenge(kiln_opt_ctx *c, kiln_store *s, const kiln_opt_problem *pr, int pi, int node,
                     int64_t cand, int64_t inc_cand, double score, double sol_pct) {
    int rounds = c->opt.retime_rounds > 0 ? c->opt.retime_rounds : 3;
    double ti[16], tc[16];
    if (rounds > 16)
        rounds = 16;
    kiln_gate_options opt = c->gate_opt;
    opt.max_sets = 1; /* both were proved on every set already: this is about time */
    char *inc_path = ensure_candidate_file(c, s, inc_cand);
    char *ch_path = kiln_opt_candidate_path(c, cand);
    int rc = 0;
    for (int r = 0; r < rounds; r++) {
        if (stopping(c)) {
            rc = -1;
            break;
        }
        ti[r] = retime_one(c, pr, inc_path, inc_cand, &opt);
        tc[r] = retime_one(c, pr, ch_path, cand, &opt);
    }
    free(inc_path);
    free(ch_path);
    if (rc < 0)
        return -1;
    kiln_mcts_verdict v;
    kiln_mcts_incumbent_rule(ti, tc, rounds, &c->mcts, &v);
    int promoted = 0;
    kiln_bb_lock(c->bb);
    kiln_bb_problem *P = kiln_bb_problem_at(c->bb, pi);
    P->retimes++;
    int still = P->incumbent_candidate == inc_cand;
    if (v.replace && still)
        promoted =
            kiln_mcts_incumbent_set(c->bb, pi, node, v.challenger_us, score, sol_pct, &c->mcts);
    int draft = kiln_bb_node_at(c->bb, node)->draft;
    kiln_bb_touch(c->bb, pi);
    kiln_bb_unlock(c->bb);
    char *msg = xasprintf("candidate %lld %s candidate %lld: interleaved re-timing, %d rounds: "
                          "challenger median %.3f us (spread %.1f%%), incumbent median %.3f us "
                          "(spread %.1f%%), margin %.1f%%%s",
                          (long long)cand, v.replace && still ? "replaces" : "does not replace",
                          (long long)inc_cand, rounds, v.challenger_us, 100 * v.challenger_spread,
                          v.incumbent_us, 100 * v.incumbent_spread,
                          isfinite(v.margin) ? 100 * v.margin : -1.0,
                          v.replace && !still ? " (the incumbent changed meanwhile)" : "");
    kiln_store_event(s, pr->store_id, "incumbent", msg, NULL);
    free(msg);
    if (v.replace && still)
        kiln_store_incumbent_set(s, pr->store_id, cand, NULL);
    if (promoted) {
        char *pm = xasprintf("draft %d promoted: its candidate %lld is the incumbent", draft,
                             (long long)cand);
        kiln_store_event(s, pr->store_id, "promote", pm, NULL);
        kiln_opt_draft_meta(s, pr->store_id, draft, "promoted", 0);
        free(pm);
    }
    return v.replace && still;
}

/* The device the gate runs on, once per gate process, as the store's meta (the library's manifest
 * names it): the coordinator never opens the device itself. */
static void note_device(kiln_store *s, const cJSON *r) {
    static int noted;
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(r, "device");
    if (noted || !cJSON_IsObject(d))
        return;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(d, "name");
    const cJSON *uuid = cJSON_GetObjectItemCaseSensitive(d, "uuid");
    const cJSON *cc = cJSON_GetObjectItemCaseSensitive(d, "compute_capability");
    char *before = kiln_store_meta_get(s, KILN_META_DEVICE_UUID);
    if (before && cJSON_IsString(uuid) && strcmp(before, uuid->valuestring) != 0) {
        char *msg =
            xasprintf("this run continues on device %s (%s); earlier results were timed on "
                      "device %s and are not comparable",
                      uuid->valuestring, cJSON_IsString(name) ? name->valuestring : "?", before);
        kiln_store_event(s, 0, "device", msg, NULL);
        fprintf(stderr, "kiln optimize: warning: %s\n", msg);
        free(msg);
    }
    free(before);
    if (cJSON_IsString(name))
        kiln_store_meta_set(s, KILN_META_DEVICE_NAME, name->valuestring, NULL);
    if (cJSON_IsString(uuid))
        kiln_store_meta_set(s, KILN_META_DEVICE_UUID, uuid->valuestring, NULL);
    kiln_store_meta_set(s, KILN_META_DEVICE_CC, cJSON_IsString(cc) ? cc->valuestring : "0.0", NULL);
    noted = 1;
}

static void gate_once(kiln_opt_ctx *c, kiln_store *s, int worker, kiln_gate_options *opt) {
    kiln_bb *bb = c->bb;
    kiln_bb_lock(bb);
    int slot = kiln_bb_queue_take(bb, worker);
    kiln_bb_slot sl;
    if (slot >= 0) {
        sl = *kiln_bb_slot_at(bb, slot);
        kiln_bb_worker_at(bb, worker)->slot = slot;
    }
    kiln_bb_unlock(bb);
    if (slot < 0) {
        nap_ms(10);
        return;
    }
    kiln_opt_problem *pr = &c->problems[c->of_bb[sl.problem]];
    char *path = ensure_candidate_file(c, s, sl.candidate_id);
    kiln_opt_log(c, "eval %lld pid=%d", (long long)sl.candidate_id, (int)getpid());
    cJSON *r = kiln_gate_session_eval(gate_session, pr->p, pr->ref, path, opt);
    double t, spread, sol, score;
    int known = 0;
    int outcome = kiln_opt_result_read(r, &t, &spread, &sol, &score, &known);
    int interrupted = stopping(c) && (outcome == KILN_OUTCOME_CRASHED ||
                                      outcome == KILN_OUTCOME_TIMEOUT || outcome < 0);
    if (outcome < 0 || interrupted) {
        /* no verdict (the gate itself could not run it) or cut short by the stop: record nothing,
         * so that a resumed run evaluates it again */
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(r, "error");
        if (!interrupted) {
            char *msg = xasprintf("the gate could not evaluate candidate %lld: %s",
                                  (long long)sl.candidate_id,
                                  cJSON_IsString(e) ? e->valuestring : "no verdict");
            kiln_store_event(s, pr->store_id, "gate_error", msg, NULL);
            fprintf(stderr, "kiln optimize: %s\n", msg);
            free(msg);
        }
        kiln_opt_log(c, "%s %lld pid=%d", interrupted ? "interrupted" : "error",
                     (long long)sl.candidate_id, (int)getpid());
        kiln_bb_lock(bb);
        kiln_bb_node *n = kiln_bb_node_at(bb, sl.node);
        kiln_mcts_virtual_loss(bb, sl.node, -1);
        kiln_bb_problem *P = kiln_bb_problem_at(bb, sl.problem);
        n->status = KILN_BB_NODE_FAILED;
        if (P->pending > 0)
            P->pending--;
        if (!interrupted)
            kiln_bb_hdr(bb)->gate_errors_in_row++;
        kiln_bb_queue_done(bb, slot, -1, 0);
        kiln_bb_worker_at(bb, worker)->slot = -1;
        kiln_bb_touch(bb, sl.problem);
        kiln_bb_unlock(bb);
        cJSON_Delete(r);
        free(path);
        return;
    }
    note_device(s, r);
    char *json = cJSON_PrintUnformatted(r);
    kiln_err err;
    const char *oname = kiln_outcome_name((kiln_outcome)outcome);
    if (kiln_store_result_insert(s, sl.candidate_id, oname, json, t, spread, sol,
                                 outcome == KILN_OUTCOME_OK && known ? score : 0, &err) != KILN_OK)
        fprintf(stderr, "kiln optimize: gate: result of candidate %lld not stored: %s\n",
                (long long)sl.candidate_id, err.msg);
    free(json);
    kiln_opt_log(c, "done %lld %s pid=%d", (long long)sl.candidate_id, oname, (int)getpid());
    int ok = outcome == KILN_OUTCOME_OK && t > 0;

    kiln_bb_lock(bb);
    kiln_mcts_result(bb, sl.node, ok, t, known ? score : -1, &c->mcts);
    int check = ok ? kiln_mcts_incumbent_check(bb, sl.problem, t) : 0;
    kiln_bb_problem *P = kiln_bb_problem_at(bb, sl.problem);
    int64_t inc_cand = P->incumbent_candidate;
    double inc_time = P->best_time_us;
    int promoted = 0;
    if (check == 1)
        promoted =
            kiln_mcts_incumbent_set(bb, sl.problem, sl.node, t, known ? score : -1, sol, &c->mcts);
    int draft = kiln_bb_node_at(bb, sl.node)->draft;
    kiln_bb_hdr(bb)->gate_errors_in_row = 0;
    kiln_bb_worker_at(bb, worker)->work_done++;
    kiln_bb_unlock(bb);

    if (check == 1) {
        char *msg =
            xasprintf("candidate %lld is the first proved: %.3f us", (long long)sl.candidate_id, t);
        kiln_store_event(s, pr->store_id, "incumbent", msg, NULL);
        kiln_store_incumbent_set(s, pr->store_id, sl.candidate_id, NULL);
        free(msg);
        if (promoted) {
            char *pm = xasprintf("draft %d promoted: its candidate %lld is the incumbent", draft,
                                 (long long)sl.candidate_id);
            kiln_store_event(s, pr->store_id, "promote", pm, NULL);
            kiln_opt_draft_meta(s, pr->store_id, draft, "promoted", 0);
            free(pm);
        }
    } else if (check == 2) {
        (void)inc_time;
        challenge(c, s, pr, sl.problem, sl.node, sl.candidate_id, inc_cand, known ? score : -1,
                  sol);
    }

    kiln_bb_lock(bb);
    int closed = kiln_mcts_draft_maybe_close(bb, sl.problem);
    kiln_bb_queue_done(bb, slot, outcome, kiln_bb_node_at(bb, sl.node)->reward);
    kiln_bb_worker_at(bb, worker)->slot = -1;
    kiln_bb_touch(bb, sl.problem);
    kiln_bb_unlock(bb);
    if (closed) {
        kiln_opt_draft_meta(s, pr->store_id, closed, "closed", 0);
        char *msg = xasprintf("draft %d closed: its slice is spent and it did not beat the "
                              "incumbent",
                              closed);
        kiln_store_event(s, pr->store_id, "draft", msg, NULL);
        free(msg);
    }
    cJSON_Delete(r);
    free(path);
}

void kiln_opt_gate_main(kiln_opt_ctx *c, int worker) {
    worker_signals(c);
    kiln_bb_lock(c->bb);
    int device = kiln_bb_worker_at(c->bb, worker)->kind;
    kiln_bb_unlock(c->bb);
    kiln_store *s = worker_store(c, "gate");
    kiln_gate_options opt = c->gate_opt;
    opt.device = device;
    gate_session = kiln_gate_session_new(&opt);
    while (!stopping(c))
        gate_once(c, s, worker, &opt);
    kiln_gate_session_free(gate_session);
    kiln_store_close(s);
    _exit(0);
}
