/* worker_llm.c: the loop of an llm agent process of `kiln optimize`: a kernel from a language
 * model (llm.h) instead of a family's point.
 *
 * One loop: select a node that has a verdict (kiln_mcts_select_open), tell the model about it
 * (the problem, the device and its ceilings from the store, the node's source, time and SOL %, the
 * failures below it), take one kernel from the reply, and hand it in exactly as the built-in agents
 * do: the same hashes, the same dedupe, the same compile check, the same record and queue. A reply
 * without a kernel, a timeout or an HTTP error is an outcome: the exchange is in the store's
 * llm_exchange (a no_kernel reply is fed back in the node's next prompt), an event says it, and the
 * agent asks again. It stops for good, clearing its worker slot, when the run's token budget is
 * spent or LLM_FRUITLESS_LIMIT exchanges in a row made no new candidate: the endpoint is not
 * helping, and a problem it kept open (exhausted, or no family) must be allowed to end. */
#include "workers_impl.h"

#include <string.h>
#include <unistd.h>

#define LLM_FRUITLESS_LIMIT 8

typedef struct {
    int fruitless;      /* exchanges in a row that made no new candidate */
    int64_t dup_parent; /* the node (its candidate id) whose last kernel was a duplicate, -1 */
    int64_t dup_of;     /* the candidate it duplicated (0: unknown) */
} llm_state;

static int llm_cancelled(void *arg) {
    return kiln_opt_stopping(arg);
}

/* Naps ms milliseconds, or until the run stops. */
static void nap_unless_stopping(kiln_opt_ctx *c, int ms) {
    for (int t = 0; t < ms && !kiln_opt_stopping(c); t += 100)
        kiln_opt_nap_ms(ms - t < 100 ? ms - t : 100);
}

/* Under the lock: the node for the llm agent's next request: in the hottest problem with budget
 * left (exhausted or not: the model is not bound to the families) and room in flight, the one
 * kiln_mcts_select_open picks. Returns 0 with st filled, -1 when nothing can be asked now. */
static int llm_select(kiln_opt_ctx *c, int worker, kiln_opt_agent_step *st) {
    memset(st, 0, sizeof *st);
    kiln_bb_header *h = kiln_bb_hdr(c->bb);
    if (!kiln_opt_gates_have_room(c))
        return -1;
    for (int i = 0; i < h->n_problems; i++) {
        kiln_bb_problem *P = kiln_bb_problem_at(c->bb, i);
        if (P->root < 0 || P->made >= P->budget || P->pending >= c->max_inflight)
            continue;
        if (kiln_mcts_select_open(c->bb, i, &c->mcts, &st->pick) != 0)
            continue;
        st->pi = i;
        kiln_opt_agent_hold(c, worker, st);
        return 0;
    }
    return -1;
}

/* Under no lock: the request made nothing: the selection's virtual loss goes back. It is not a
 * failed expansion of the node: the built-in agents may still expand it. */
static void llm_release(kiln_opt_ctx *c, int worker) {
    kiln_bb_lock(c->bb);
    kiln_opt_agent_release_held(c, worker);
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
    kiln_opt_agent_release_held(c, worker);
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
    kiln_opt_agent_step st;
    kiln_bb_lock(bb);
    int rc = llm_select(c, worker, &st);
    kiln_bb_unlock(bb);
    if (rc != 0) {
        kiln_opt_nap_ms(50);
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
    if (kiln_opt_stopping(c) || lst.outcome == KILN_LLM_CANCELLED) {
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
        bin_hash = kiln_opt_candidate_hash(c, kernel, source_hash, &compile_failed, &compile_log,
                                           &compiled);
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
        kiln_opt_agent_made m = {.child = child,
                                 .family = NULL, /* no family made it */
                                 .agent = kiln_agent_name(KILN_AGENT_LLM),
                                 .src = kernel,
                                 .source_hash = source_hash,
                                 .bin_hash = bin_hash,
                                 .compiled = compiled,
                                 .compile_failed = compile_failed,
                                 .compile_log = compile_log};
        int64_t cand = kiln_opt_agent_record(c, s, worker, &st, pr, &m);
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

void kiln_opt_llm_loop(kiln_opt_ctx *c, kiln_store *s, int worker) {
    llm_state ls;
    memset(&ls, 0, sizeof ls);
    while (!kiln_opt_stopping(c))
        llm_once(c, s, worker, &ls);
    kiln_opt_agent_exit(c, s, worker);
}
