/* worker_agent.c: the loop of a built-in agent process of `kiln optimize`: select a node (UCT with
 * progressive widening, drafts), propose a child in its speciality, emit and hash it, dedupe, then
 * record and queue it (workers.c); the fusion agent first notes each problem's neighbours from
 * RUN/model.json. An llm agent's process runs worker_llm.c's loop instead. */
#include "workers_impl.h"

#include <string.h>
#include <unistd.h>

static int registry_index(const kiln_family *f) {
    for (int i = 0; i < kiln_family_count(); i++)
        if (kiln_family_at(i) == f)
            return i;
    return -1;
}

/* Under the lock: of the problems that still have budget and room in the gate's queue, the one
 * where a candidate can win the most of the model's time (kiln_opt_priority; ties: the hotter). */
static int pick_problem(kiln_opt_ctx *c) {
    kiln_bb_header *h = kiln_bb_hdr(c->bb);
    if (!kiln_opt_gates_have_room(c))
        return -1;
    int pick = -1;
    double best = -1;
    for (int i = 0; i < h->n_problems; i++) {
        kiln_bb_problem *P = kiln_bb_problem_at(c->bb, i);
        if (P->root < 0 || kiln_mcts_problem_finished(P))
            continue;
        if (P->pending >= c->max_inflight)
            continue;
        double priority = kiln_opt_priority(c, i);
        if (priority > best) {
            best = priority;
            pick = i;
        }
    }
    return pick;
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

/* The proposal that starts a matching family nothing in the tree has tried yet (mcts.c,
 * "Exhaustion"): its start point first, a random point on a later attempt. */
static int propose_untried(const kiln_agent_problem *ap, int slot, int attempt, uint64_t *rng,
                           kiln_proposal *out) {
    memset(out, 0, sizeof *out);
    out->slot = slot;
    out->used = KILN_AGENT_ALGORITHM;
    snprintf(out->note, sizeof out->note, "a family not tried yet (%s)", ap->fams[slot]->name);
    return attempt == 0 ? kiln_agent_start_point(ap, slot, rng, out->point)
                        : kiln_agent_random_point(ap, slot, rng, out->point);
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

/* Under the lock: select; fills st. Returns 0 with a node to expand, -1 when there is nothing to
 * do right now. A failed selection ends the problem only when no other agent holds one in it: that
 * agent may be proposing the last untried family (opened, so this selection sees nothing left),
 * and ending the problem under it threw its candidate away (a family never tried, the rerun
 * trying it: seen in CI). */
static int agent_select(kiln_opt_ctx *c, int worker, kiln_opt_agent_step *st) {
    memset(st, 0, sizeof *st);
    st->pi = pick_problem(c);
    if (st->pi < 0)
        return -1;
    kiln_bb_problem *P = kiln_bb_problem_at(c->bb, st->pi);
    if (kiln_mcts_select(c->bb, st->pi, &c->mcts, &st->pick) != 0) {
        if (kiln_bb_selection_held(c->bb, st->pi, worker))
            P->exhausted = 0; /* decided once that selection is answered */
        else if (P->draft_state != KILN_BB_DRAFT_ACTIVE)
            P->exhausted = 1;
        kiln_bb_touch(c->bb, st->pi);
        return -1;
    }
    kiln_opt_agent_hold(c, worker, st);
    return 0;
}

/* Under the lock: the selection made nothing new. */
static void agent_give_up(kiln_opt_ctx *c, int worker, kiln_opt_agent_step *st) {
    kiln_mcts_expand_failed(c->bb, st->parent, &c->mcts);
    if (st->pick.make_draft_root)
        kiln_mcts_draft_give_up(c->bb, st->pi);
    kiln_bb_worker_at(c->bb, worker)->held_node = -1;
}

static void agent_once(kiln_opt_ctx *c, kiln_store *s, int worker, int kind, uint64_t *rng) {
    kiln_bb *bb = c->bb;
    kiln_opt_agent_step st;
    kiln_bb_lock(bb);
    int rc = agent_select(c, worker, &st);
    kiln_bb_unlock(bb);
    if (rc != 0) {
        kiln_opt_nap_ms(15);
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
    for (int attempt = 0; attempt < 3 && child < 0 && !kiln_opt_stopping(c); attempt++) {
        int prc =
            st.pick.make_draft_root
                ? propose_draft_root(c, pr, &ap, incumbent_slot, attempt, rng, &prop)
            : st.pick.open_family
                ? propose_untried(&ap, st.pick.family_slot, attempt, rng, &prop)
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
        bin_hash =
            kiln_opt_candidate_hash(c, src, source_hash, &compile_failed, &compile_log, &compiled);
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
                kiln_opt_stopping(c)) {
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

    kiln_opt_agent_made m = {.child = child,
                             .family = pr->fams[prop.slot],
                             .point = prop.point,
                             .agent = kiln_agent_name(prop.used),
                             .src = src,
                             .source_hash = source_hash,
                             .bin_hash = bin_hash,
                             .compiled = compiled,
                             .compile_failed = compile_failed,
                             .compile_log = compile_log};
    kiln_opt_agent_record(c, s, worker, &st, pr, &m);
    free(src);
    free(compile_log);
}

void kiln_opt_agent_main(kiln_opt_ctx *c, int worker) {
    kiln_opt_worker_signals(c);
    kiln_bb_lock(c->bb);
    int kind = kiln_bb_worker_at(c->bb, worker)->kind;
    kiln_bb_unlock(c->bb);
    kiln_store *s = kiln_opt_worker_store(c, "agent");
    if (kind == KILN_AGENT_LLM)
        kiln_opt_llm_loop(c, s, worker);
    if (kind == KILN_AGENT_FUSION) {
        /* the fusion agent reads model.json first, for every problem no fusion agent has read */
        kiln_bb_header *h = kiln_bb_hdr(c->bb);
        for (int i = 0; i < h->n_problems && !kiln_opt_stopping(c); i++) {
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
    while (!kiln_opt_stopping(c))
        agent_once(c, s, worker, kind, &rng);
    kiln_opt_agent_exit(c, s, worker);
}
