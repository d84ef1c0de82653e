/* mcts.c: the search policy of `kiln optimize`: which node an agent expands next, how a gate's
 * verdict flows back up the tree, when a draft opens and closes, and when a faster candidate may
 * replace the incumbent.
 *
 * Why Monte Carlo Tree Search, and which one.
 *
 * A kernel family's space is a product of small domains (threads, vector width, rows per block, one
 * pass or two...) with constraints, plus the choice of family itself. It is too big to sweep on a
 * real problem (softmax alone has tens of thousands of points) and too irregular for gradients:
 * neighbours differ by a step in one parameter, and one step can cross a cliff (registers spill,
 * occupancy halves). What does work is local search that remembers: start from a sensible point,
 * try its neighbours, go on from the ones that paid. A tree says exactly that: each node is a
 * point, its children are neighbours an agent proposed from it, and UCT decides whether to deepen
 * the best branch (exploit) or try a branch seen less often (explore). Each agent's speciality
 * (geometry, vector width, algorithm, fusion) decides *which* neighbour; MCTS decides *where*.
 *
 * UCT. A child's value is Q + c sqrt(ln N / n): Q its mean reward, n its visits, N its parent's.
 * Rewards are the SOL score S of docs/gate.md, in (0, 1] (0.5 = PyTorch eager, 1 = speed of light)
 * and 0 for every failure, so c = 0.7 (about 1/sqrt 2, the textbook constant for rewards in [0,
 * 1]). When a problem has no reference time (S unknown), the reward is the time relative to the
 * fastest ok time seen, also in (0, 1]. An unvisited child is always tried first.
 *
 * Progressive widening. A node may have at most ceil(k N^alpha) children (k = 1, alpha = 0.5): one
 * child until its second visit, two until its fifth, three until its tenth. Without it UCT
 * would insist on trying every child of the root before going deeper, and here the children are
 * not a fixed list but whatever the agents propose: the number of possible children is the size of
 * a family's neighbourhood times the families. Widening lets the tree deepen along the first good
 * line and only broaden a node as evidence about it accumulates.
 *
 * Virtual loss. K agents select concurrently, and a candidate's reward comes back only after the
 * gate has proved and timed it, seconds later. Without a correction every agent would descend to
 * the same leaf. Each selection therefore adds a virtual loss to the picked node and its ancestors:
 * a pending visit that earned 0, counted in n and N until the real reward replaces it. The second
 * agent then sees that branch as worse and more visited and goes elsewhere; the third elsewhere
 * again. It is removed when the result is backed up, or when the proposal made nothing new.
 *
 * Exhaustion. A proposal can make nothing new: the point was invalid for the problem, or its binary
 * is one the gate has seen (the cpu backend emits one source for every geometry of a family, so
 * there most proposals are duplicates). Each such miss counts on the node; after expand_tries
 * misses a node stops expanding, and a node that can neither expand nor descend is saturated and
 * skipped. When the problem's root saturates, or stale_limit proposals in a row make nothing new,
 * the problem is exhausted: its budget is not spent, because there is nothing left to spend it on.
 * But not before every family that matches it has been tried: the agents choose families at random,
 * so a problem two families match could otherwise end with one of them never proposed (on the cpu
 * backend, where a family's points are one source, that was a coin toss per run). A matching
 * family with no node in the tree is opened at the root first (once per family and run), and the
 * count of misses starts again.
 *
 * Drafts. A tree that stops improving is usually stuck in one basin (one family, one algorithm).
 * When the incumbent has not improved by >= 1% for P results (P = --plateau, default 8), the
 * problem opens a draft: a new child of the root, from another family that matches the problem when
 * there is one, else a random restart point, marked with a draft number and given its own slice of
 * the remaining budget (a quarter). While the slice lasts, agents select inside the draft only;
 * when it is spent and answered, the draft closes and the main tree continues (the closed draft is
 * skipped from then on). If a candidate of the draft wins the incumbent rule, the draft is
 * promoted: it ends at once and its subtree competes under the root like any other branch.
 *
 * The incumbent rule. A single timing can lie by a few percent (clocks, neighbours on the host, the
 * L2 state). So a challenger whose time beats the incumbent's is re-timed interleaved with the
 * incumbent, A B A B A B (the gate does it, three rounds by default, each a full gate evaluation),
 * and replaces it only when its median is lower by more than the noise: by more than max(1%, the
 * larger of the two sides' spreads, (max - min) / median over the rounds). Every decision, won or
 * lost, is recorded as a store event with both medians and the margin.
 *
 * The llm agent's selection (kiln_mcts_select_open). A language model is not bound to a family's
 * points: it can always write something new, so exhaustion, saturation and the other agents'
 * failed expansions do not stop it. What it needs is a verdict: "make this faster" is worth a
 * request only for a kernel that passed and was timed. So it descends by the same UCT and the same
 * widening, but only into children that proved ok; a node whose other children all failed is
 * expanded again (their failures are the prompt's feedback); and where the only way down is a
 * child whose verdict is not in yet, it waits rather than ask about a kernel without its time. It
 * never opens a draft or enters the active one: drafts restart the families' search. */
#include "mcts.h"

#include <math.h>
#include <string.h>

void kiln_mcts_config_default(kiln_mcts_config *c) {
    memset(c, 0, sizeof *c);
    c->c_uct = 0.7;
    c->pw_k = 1.0;
    c->pw_alpha = 0.5;
    c->expand_tries = 8;
    c->stale_limit = 64;
    c->plateau = 8;
    c->improve_frac = 0.01;
    c->draft_share = 0.25;
    c->noise_floor = 0.01;
}

int kiln_mcts_widen_limit(const kiln_mcts_config *c, double n) {
    if (n < 1)
        n = 1;
    double lim = ceil(c->pw_k * pow(n, c->pw_alpha) - 1e-9);
    return lim < 1 ? 1 : (int)lim;
}

static double effective_visits(const kiln_bb_node *n) {
    return (double)n->visits + (double)n->virtual_loss;
}

double kiln_mcts_uct(const kiln_mcts_config *c, double parent_n, const kiln_bb_node *child) {
    double n = effective_visits(child);
    if (n <= 0)
        return INFINITY;
    double q = child->value_sum / n;
    double ln = log(parent_n > 1 ? parent_n : 1);
    return q + c->c_uct * sqrt(ln / n);
}

void kiln_mcts_virtual_loss(kiln_bb *bb, int node, int delta) {
    for (int i = node; i >= 0; i = kiln_bb_node_at(bb, i)->parent) {
        kiln_bb_node *n = kiln_bb_node_at(bb, i);
        n->virtual_loss += delta;
        if (n->virtual_loss < 0)
            n->virtual_loss = 0;
    }
}

/* A draft root under the problem's root that selection from the root does not enter: a closed
 * draft, or the active one (entered directly). */
static int draft_hidden(const kiln_bb_problem *P, int parent, const kiln_bb_node *ch) {
    if (parent != P->root || ch->draft <= 0 || ch->draft > KILN_BB_MAX_DRAFTS)
        return 0;
    int k = ch->draft;
    if (P->draft_fate[k] == KILN_BB_FATE_CLOSED)
        return 1;
    return P->draft_fate[k] == KILN_BB_FATE_OPEN && P->draft_state == KILN_BB_DRAFT_ACTIVE &&
           k == P->draft_count;
}

/* A child that selection may descend into from parent. */
static int selectable(kiln_bb *bb, const kiln_bb_problem *P, int parent, const kiln_bb_node *ch) {
    if (ch->status == KILN_BB_NODE_DEAD || ch->status == KILN_BB_NODE_CREATING)
        return 0;
    if (ch->flags & KILN_BB_FLAG_SATURATED)
        return 0;
    (void)bb;
    return !draft_hidden(P, parent, ch);
}

static int can_expand(const kiln_bb_node *n, const kiln_mcts_config *c) {
    return n->expand_fail < c->expand_tries && n->status != KILN_BB_NODE_DEAD &&
           n->status != KILN_BB_NODE_CREATING;
}

/* The slot of a matching family that has no live node in problem pi's tree and was not opened by
 * the rule above yet; -1 when there is none. */
static int untried_family(kiln_bb *bb, int pi) {
    kiln_bb_problem *P = kiln_bb_problem_at(bb, pi);
    uint32_t tried = P->opened_families;
    int n_nodes = kiln_bb_hdr(bb)->n_nodes;
    for (int i = 0; i < n_nodes; i++) {
        const kiln_bb_node *nd = kiln_bb_node_at(bb, i);
        if (nd->problem != pi || nd->family < 0 || nd->status == KILN_BB_NODE_DEAD)
            continue;
        for (int k = 0; k < P->n_families && k < KILN_BB_MAX_FAMILIES; k++)
            if (P->family[k] == nd->family)
                tried |= 1u << k;
    }
    for (int k = 0; k < P->n_families && k < KILN_BB_MAX_FAMILIES; k++)
        if (!(tried & (1u << k)))
            return k;
    return -1;
}

/* Picks the root to start an untried family; -1 when every family has been tried. */
static int open_untried(kiln_bb *bb, int pi, kiln_mcts_pick *out) {
    kiln_bb_problem *P = kiln_bb_problem_at(bb, pi);
    int k = untried_family(bb, pi);
    if (k < 0)
        return -1;
    P->opened_families |= 1u << k;
    P->stale = 0;
    out->node = P->root;
    out->draft = 0;
    out->open_family = 1;
    out->family_slot = k;
    kiln_mcts_virtual_loss(bb, P->root, +1);
    kiln_bb_touch(bb, pi);
    return 0;
}

/* Descends from start; returns the node to expand or -1 when start's subtree is saturated. */
static int descend(kiln_bb *bb, int pi, int start, const kiln_mcts_config *c) {
    kiln_bb_problem *P = kiln_bb_problem_at(bb, pi);
    for (int restarts = 0; restarts <= kiln_bb_hdr(bb)->n_nodes; restarts++) {
        int n = start;
        for (;;) {
            kiln_bb_node *node = kiln_bb_node_at(bb, n);
            double n_eff = effective_visits(node);
            /* widening counts real visits only: pending selections must not widen a node */
            int limit = kiln_mcts_widen_limit(c, (double)node->visits);
            int expandable = can_expand(node, c);
            if (expandable && node->n_children < limit)
                return n;
            int best = -1;
            double best_v = -INFINITY;
            for (int ch = node->first_child; ch >= 0; ch = kiln_bb_node_at(bb, ch)->next_sibling) {
                kiln_bb_node *child = kiln_bb_node_at(bb, ch);
                if (!selectable(bb, P, n, child))
                    continue;
                double v = kiln_mcts_uct(c, n_eff, child);
                /* ties go to the older child: the list is newest first, so >= keeps the last */
                if (v >= best_v) {
                    best_v = v;
                    best = ch;
                }
            }
            if (best >= 0) {
                n = best;
                continue;
            }
            if (expandable)
                return n;
            /* neither expandable nor anything to descend into: this subtree is done */
            node->flags |= KILN_BB_FLAG_SATURATED;
            if (n == start)
                return -1;
            break; /* restart from the top with one more node saturated */
        }
    }
    return -1;
}

int kiln_mcts_select(kiln_bb *bb, int pi, const kiln_mcts_config *c, kiln_mcts_pick *out) {
    memset(out, 0, sizeof *out);
    out->node = -1;
    kiln_bb_problem *P = kiln_bb_problem_at(bb, pi);
    if (P->root < 0 || P->exhausted)
        return -1;
    if (P->stale >= c->stale_limit) {
        if (open_untried(bb, pi, out) == 0)
            return 0;
        P->exhausted = 1;
        return -1;
    }
    if (kiln_mcts_draft_due(bb, pi, c)) {
        kiln_mcts_draft_open(bb, pi, c);
        out->draft_opened = 1;
    }
    if (P->draft_state == KILN_BB_DRAFT_ACTIVE && P->draft_made < P->draft_slice) {
        int k = P->draft_count;
        out->draft = k;
        if (P->draft_root < 0) {
            out->node = P->root;
            out->make_draft_root = 1;
            kiln_mcts_virtual_loss(bb, P->root, +1);
            return 0;
        }
        int n = descend(bb, pi, P->draft_root, c);
        if (n >= 0) {
            out->node = n;
            kiln_mcts_virtual_loss(bb, n, +1);
            return 0;
        }
        /* the draft's subtree can make nothing new: it ends now (the caller sees it closed) */
        kiln_mcts_draft_give_up(bb, pi);
        out->draft = 0;
    }
    int n = descend(bb, pi, P->root, c);
    if (n < 0)
        return open_untried(bb, pi, out);
    out->node = n;
    out->draft = kiln_bb_node_at(bb, n)->draft;
    kiln_mcts_virtual_loss(bb, n, +1);
    return 0;
}

int kiln_mcts_select_open(kiln_bb *bb, int pi, const kiln_mcts_config *c, kiln_mcts_pick *out) {
    memset(out, 0, sizeof *out);
    out->node = -1;
    kiln_bb_problem *P = kiln_bb_problem_at(bb, pi);
    if (P->root < 0)
        return -1;
    int n = P->root;
    for (;;) {
        kiln_bb_node *node = kiln_bb_node_at(bb, n);
        if (node->n_children < kiln_mcts_widen_limit(c, (double)node->visits))
            break;
        double n_eff = effective_visits(node);
        int best = -1, waiting = 0;
        double best_v = -INFINITY;
        for (int ch = node->first_child; ch >= 0; ch = kiln_bb_node_at(bb, ch)->next_sibling) {
            kiln_bb_node *child = kiln_bb_node_at(bb, ch);
            if (draft_hidden(P, n, child))
                continue;
            if (child->status == KILN_BB_NODE_CREATING || child->status == KILN_BB_NODE_QUEUED) {
                waiting = 1;
                continue;
            }
            if (child->status != KILN_BB_NODE_DONE)
                continue;
            double v = kiln_mcts_uct(c, n_eff, child);
            if (v >= best_v) { /* ties go to the older child, as in descend() */
                best_v = v;
                best = ch;
            }
        }
        if (best >= 0) {
            n = best;
            continue;
        }
        if (waiting)
            return -1; /* a verdict is coming: ask about it once it is in */
        break;         /* every child failed: expand this node again, with their failures */
    }
    out->node = n;
    out->draft = kiln_bb_node_at(bb, n)->draft;
    kiln_mcts_virtual_loss(bb, n, +1);
    return 0;
}

void kiln_mcts_expand_failed(kiln_bb *bb, int node, const kiln_mcts_config *c) {
    kiln_bb_node *n = kiln_bb_node_at(bb, node);
    kiln_mcts_virtual_loss(bb, node, -1);
    n->expand_fail++;
    kiln_bb_problem *P = kiln_bb_problem_at(bb, n->problem);
    P->stale++;
    if (P->stale >= c->stale_limit && untried_family(bb, n->problem) < 0)
        P->exhausted = 1; /* else the next selection opens the untried family */
    kiln_bb_touch(bb, n->problem);
}

int kiln_mcts_child_add(kiln_bb *bb, const kiln_mcts_pick *pick, int family, const int64_t *params,
                        int n_params, int agent, int owner) {
    kiln_bb_node *parent = kiln_bb_node_at(bb, pick->node);
    int pi = parent->problem;
    int ch = kiln_bb_node_add(bb, pi, pick->node, KILN_BB_NODE_CREATING);
    if (ch < 0) {
        kiln_mcts_virtual_loss(bb, pick->node, -1);
        return -1;
    }
    kiln_bb_node *n = kiln_bb_node_at(bb, ch);
    n->family = (int16_t)family;
    for (int i = 0; i < n_params && i < KILN_BB_MAX_PARAMS; i++)
        n->params[i] = params[i];
    n->agent = agent;
    n->owner = owner;
    n->draft = (int16_t)pick->draft;
    n->virtual_loss = 1;
    n->flags |= KILN_BB_FLAG_DIRTY;
    kiln_bb_problem *P = kiln_bb_problem_at(bb, pi);
    if (pick->make_draft_root) {
        P->draft_root = ch;
        if (pick->draft > 0 && pick->draft <= KILN_BB_MAX_DRAFTS)
            P->draft_root_of[pick->draft] = ch;
    }
    P->made++;
    P->pending++;
    P->stale = 0;
    if (P->draft_state == KILN_BB_DRAFT_ACTIVE && pick->draft == P->draft_count &&
        pick->draft > 0) {
        P->draft_made++;
        P->draft_pending++;
    }
    kiln_bb_touch(bb, pi);
    return ch;
}

double kiln_mcts_reward(int ok, double time_us, double score, double best_seen_us) {
    if (!ok)
        return 0;
    if (score >= 0 && isfinite(score))
        return score > 1 ? 1 : score;
    if (!(time_us > 0) || !(best_seen_us > 0))
        return 0;
    double r = best_seen_us / time_us;
    return r > 1 ? 1 : r;
}

void kiln_mcts_backup_plain(kiln_bb *bb, int node, double reward) {
    for (int i = node; i >= 0; i = kiln_bb_node_at(bb, i)->parent) {
        kiln_bb_node *n = kiln_bb_node_at(bb, i);
        n->visits++;
        n->value_sum += reward;
        if (reward > n->best)
            n->best = reward;
        n->flags |= KILN_BB_FLAG_DIRTY;
    }
}

double kiln_mcts_result(kiln_bb *bb, int node, int ok, double time_us, double score,
                        const kiln_mcts_config *c) {
    (void)c;
    kiln_bb_node *n = kiln_bb_node_at(bb, node);
    kiln_bb_problem *P = kiln_bb_problem_at(bb, n->problem);
    if (ok && time_us > 0 && (P->best_seen_time_us < 0 || time_us < P->best_seen_time_us))
        P->best_seen_time_us = time_us;
    double r = kiln_mcts_reward(ok, time_us, score, P->best_seen_time_us);
    n->reward = r;
    n->time_us = ok ? time_us : -1;
    n->status = ok ? KILN_BB_NODE_DONE : KILN_BB_NODE_FAILED;
    kiln_mcts_virtual_loss(bb, node, -1);
    kiln_mcts_backup_plain(bb, node, r);
    P->done++;
    if (P->pending > 0)
        P->pending--;
    if (ok)
        P->ok++;
    P->since_improve++;
    if (P->draft_state == KILN_BB_DRAFT_ACTIVE && n->draft == P->draft_count && n->draft > 0 &&
        P->draft_pending > 0)
        P->draft_pending--;
    kiln_bb_touch(bb, n->problem);
    return r;
}

int kiln_mcts_incumbent_check(kiln_bb *bb, int pi, double time_us) {
    kiln_bb_problem *P = kiln_bb_problem_at(bb, pi);
    if (!(time_us > 0))
        return 0;
    if (P->incumbent_node < 0)
        return 1;
    return time_us < P->best_time_us ? 2 : 0;
}

int kiln_mcts_incumbent_set(kiln_bb *bb, int pi, int node, double time_us, double score,
                            double sol_pct, const kiln_mcts_config *c) {
    kiln_bb_problem *P = kiln_bb_problem_at(bb, pi);
    kiln_bb_node *n = kiln_bb_node_at(bb, node);
    int improved = P->incumbent_node < 0 || time_us < P->best_time_us * (1 - c->improve_frac);
    P->incumbent_node = node;
    P->incumbent_candidate = n->candidate_id;
    P->best_time_us = time_us;
    P->best_score = score;
    P->best_sol_pct = sol_pct;
    if (improved)
        P->since_improve = 0;
    int promoted = 0;
    if (n->draft > 0 && P->draft_state == KILN_BB_DRAFT_ACTIVE && n->draft == P->draft_count) {
        P->draft_fate[n->draft] = KILN_BB_FATE_PROMOTED;
        P->draft_state = KILN_BB_DRAFT_NONE;
        P->draft_root = -1;
        P->draft_pending = 0;
        P->since_improve = 0;
        promoted = 1;
    }
    kiln_bb_touch(bb, pi);
    return promoted;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_spread(const double *v, int n, double *spread) {
    double *s = xmalloc((size_t)n * sizeof *s);
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    double med = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    *spread = med > 0 ? (s[n - 1] - s[0]) / med : INFINITY;
    free(s);
    return med;
}

void kiln_mcts_incumbent_rule(const double *incumbent_us, const double *challenger_us, int n,
                              const kiln_mcts_config *c, kiln_mcts_verdict *v) {
    memset(v, 0, sizeof *v);
    v->incumbent_us = v->challenger_us = NAN;
    v->margin = c->noise_floor;
    if (n <= 0)
        return;
    for (int i = 0; i < n; i++)
        if (!(incumbent_us[i] > 0) || !(challenger_us[i] > 0)) {
            /* a round without a time (the challenger failed its re-proof, or the incumbent did):
             * no verdict a challenger could win on */
            v->incumbent_us = incumbent_us[i] > 0 ? incumbent_us[i] : NAN;
            v->challenger_us = challenger_us[i] > 0 ? challenger_us[i] : NAN;
            v->margin = INFINITY;
            return;
        }
    v->incumbent_us = median_spread(incumbent_us, n, &v->incumbent_spread);
    v->challenger_us = median_spread(challenger_us, n, &v->challenger_spread);
    double noise =
        v->incumbent_spread > v->challenger_spread ? v->incumbent_spread : v->challenger_spread;
    v->margin = noise > c->noise_floor ? noise : c->noise_floor;
    v->replace = v->challenger_us < v->incumbent_us * (1 - v->margin);
}

int kiln_mcts_draft_due(kiln_bb *bb, int pi, const kiln_mcts_config *c) {
    kiln_bb_problem *P = kiln_bb_problem_at(bb, pi);
    if (c->plateau <= 0 || P->draft_state != KILN_BB_DRAFT_NONE)
        return 0;
    if (P->draft_count >= KILN_BB_MAX_DRAFTS)
        return 0;
    if (P->since_improve < c->plateau)
        return 0;
    return P->budget - P->made >= 2;
}

int kiln_mcts_draft_open(kiln_bb *bb, int pi, const kiln_mcts_config *c) {
    kiln_bb_problem *P = kiln_bb_problem_at(bb, pi);
    int remaining = P->budget - P->made;
    int slice = (int)ceil(c->draft_share * remaining);
    if (slice < 1)
        slice = 1;
    int k = P->draft_count + 1;
    P->draft_fate[k] = KILN_BB_FATE_OPEN;
    P->draft_root_of[k] = -1;
    P->draft_root = -1;
    P->draft_slice = slice;
    P->draft_made = 0;
    P->draft_pending = 0;
    P->draft_count = k;
    P->draft_state = KILN_BB_DRAFT_ACTIVE;
    kiln_bb_touch(bb, pi);
    return k;
}

int kiln_mcts_draft_maybe_close(kiln_bb *bb, int pi) {
    kiln_bb_problem *P = kiln_bb_problem_at(bb, pi);
    if (P->draft_state != KILN_BB_DRAFT_ACTIVE)
        return 0;
    if (P->draft_made < P->draft_slice || P->draft_pending > 0)
        return 0;
    int k = P->draft_count;
    P->draft_fate[k] = KILN_BB_FATE_CLOSED;
    P->draft_state = KILN_BB_DRAFT_NONE;
    P->draft_root = -1;
    P->since_improve = 0;
    kiln_bb_touch(bb, pi);
    return k;
}

int kiln_mcts_draft_give_up(kiln_bb *bb, int pi) {
    kiln_bb_problem *P = kiln_bb_problem_at(bb, pi);
    if (P->draft_state != KILN_BB_DRAFT_ACTIVE)
        return 0;
    P->draft_slice = P->draft_made;
    return kiln_mcts_draft_maybe_close(bb, pi);
}

int kiln_mcts_problem_finished(const kiln_bb_problem *p) {
    return p->exhausted || p->made >= p->budget;
}
