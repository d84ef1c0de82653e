/* mcts.h: Monte Carlo Tree Search over the blackboard's trees: UCT selection with virtual loss and
 * progressive widening, backup of SOL-score rewards, drafts, and the incumbent rule (mcts.c's essay
 * says why each is there; docs/search.md gives the numbers). Functions marked "under the lock"
 * expect the caller to hold kiln_bb_lock. */
#ifndef KILN_MCTS_H
#define KILN_MCTS_H

#include "blackboard.h"

typedef struct {
    double c_uct;     /* exploration constant of UCT (rewards lie in [0, 1]); default 0.7 */
    double pw_k;      /* progressive widening: a node may have ceil(pw_k * N^pw_alpha) children */
    double pw_alpha;  /* default k = 1, alpha = 0.5 */
    int expand_tries; /* proposals below a node that make nothing new before it stops expanding;
                         default 8 */
    int stale_limit;  /* proposals in a row that make nothing new before a problem counts as
                         exhausted; default 64 */
    int plateau; /* P: results without a >= improve_frac gain before a draft opens; default 8 */
    double improve_frac; /* what counts as an improvement of the incumbent; default 0.01 */
    double draft_share;  /* a draft's slice of the remaining budget; default 0.25 */
    double noise_floor;  /* the incumbent rule's least margin; default 0.01 */
} kiln_mcts_config;

void kiln_mcts_config_default(kiln_mcts_config *c);

/* ceil(pw_k * max(1, n)^pw_alpha): the most children a node with n (effective) visits may have. */
int kiln_mcts_widen_limit(const kiln_mcts_config *c, double n);

/* The UCT value of child under a parent with parent_n effective visits: +inf when the child has
 * neither visits nor virtual loss, else Q + c sqrt(ln(parent_n) / n) with n = visits + virtual
 * loss and Q = value_sum / n (virtual loss counts as visits that earned 0). */
double kiln_mcts_uct(const kiln_mcts_config *c, double parent_n, const kiln_bb_node *child);

/* What an agent should do next for a problem. */
typedef struct {
    int node;            /* expand below this node (-1: nothing to do) */
    int draft;           /* the draft number the new child belongs to (0: main tree) */
    int make_draft_root; /* 1: node is the problem root and the child is a new draft's root */
    int draft_opened;    /* 1: this call opened draft number `draft` (the caller records it) */
    int open_family;     /* 1: node is the problem root and the child must start the matching
                            family in slot family_slot, which nothing in the tree has tried yet */
    int family_slot;
} kiln_mcts_pick;

/* Under the lock. Picks the node to expand in problem pi and adds virtual loss to it and every
 * ancestor. Opens a draft when one is due (kiln_mcts_draft_due). Before a problem is given up
 * (stale_limit misses in a row, or a saturated root) every matching family gets a start: the pick
 * is then the root with out->open_family set. Returns 0 with out->node >= 0, or -1 when nothing
 * below the selection root can make anything new (the caller marks the problem exhausted when that
 * root is the problem's). */
int kiln_mcts_select(kiln_bb *bb, int pi, const kiln_mcts_config *c, kiln_mcts_pick *out);

/* Under the lock. The selection of an agent that can always write something new (the llm agent;
 * mcts.c's essay says why it differs): UCT with progressive widening from the problem's root,
 * descending only into children that proved ok (and never into a closed or the active draft),
 * ignoring exhaustion, saturation and failed expansions. A node whose children all failed is
 * expanded again. Returns 0 with out->node (virtual loss added as kiln_mcts_select does; never a
 * draft root to make), or -1 when nothing can be asked now: the only way down is a child whose
 * verdict is not in yet. */
int kiln_mcts_select_open(kiln_bb *bb, int pi, const kiln_mcts_config *c, kiln_mcts_pick *out);

/* Under the lock. Virtual loss on node and every ancestor (+1 or -1, never below 0). */
void kiln_mcts_virtual_loss(kiln_bb *bb, int node, int delta);

/* Under the lock. A proposal below node made nothing new (duplicate binary, no valid point): takes
 * the selection's virtual loss back, counts the failure on the node and on the problem, and marks
 * the problem exhausted past stale_limit. */
void kiln_mcts_expand_failed(kiln_bb *bb, int node, const kiln_mcts_config *c);

/* Under the lock. Creates the child of pick (status CREATING, owned by worker slot `owner`, virtual
 * loss 1 on the child), sets its family, params, agent and draft, and counts it against the budget
 * (and the draft's slice). Returns the node index or -1 when the node array is full (the
 * selection's virtual loss is then taken back). */
int kiln_mcts_child_add(kiln_bb *bb, const kiln_mcts_pick *pick, int family, const int64_t *params,
                        int n_params, int agent, int owner);

/* The reward of an evaluation: 0 for a failure; the SOL score when it is known (score >= 0);
 * otherwise best_seen_us / time_us, the time relative to the fastest ok time seen (1 = as fast as
 * the best). */
double kiln_mcts_reward(int ok, double time_us, double score, double best_seen_us);

/* Under the lock. Records the evaluation of node (ok or not, its time, SOL score and SOL %),
 * computes its reward, backs it up (visits + 1, value + reward, virtual loss - 1 on the node and
 * every ancestor; best = max), and updates the problem's counters. Returns the reward. */
double kiln_mcts_result(kiln_bb *bb, int node, int ok, double time_us, double score,
                        const kiln_mcts_config *c);

/* Under the lock. Backs reward up from node to the root without touching virtual loss or the
 * problem's counters (resume rebuilds a tree with this). */
void kiln_mcts_backup_plain(kiln_bb *bb, int node, double reward);

/* Under the lock. What an ok result at time_us means for the incumbent: 0 nothing (not faster),
 * 1 there is no incumbent yet (the caller installs it), 2 it is faster: re-time it against the
 * incumbent before it may replace it. */
int kiln_mcts_incumbent_check(kiln_bb *bb, int pi, double time_us);

/* Under the lock. Makes node the incumbent at time_us. Resets since_improve when it improves on the
 * previous incumbent by at least improve_frac. When node belongs to the active draft, the draft is
 * promoted: it ends, and its subtree is selected normally from then on. Returns 1 when it promoted
 * a draft. */
int kiln_mcts_incumbent_set(kiln_bb *bb, int pi, int node, double time_us, double score,
                            double sol_pct, const kiln_mcts_config *c);

/* The verdict of an interleaved re-timing (A B A B ...: incumbent then challenger, n rounds). */
typedef struct {
    double incumbent_us, challenger_us;         /* medians over the rounds */
    double incumbent_spread, challenger_spread; /* (max - min) / median over the rounds */
    double margin;                              /* max(noise_floor, the larger spread) */
    int replace;                                /* 1: challenger_us < incumbent_us * (1 - margin) */
} kiln_mcts_verdict;

/* The incumbent rule on n rounds of times (us; values <= 0 or NaN are a failed round and make the
 * challenger lose). */
void kiln_mcts_incumbent_rule(const double *incumbent_us, const double *challenger_us, int n,
                              const kiln_mcts_config *c, kiln_mcts_verdict *v);

/* Under the lock. 1 when problem pi should open a draft: none is active, since_improve >= plateau,
 * at least two candidates of budget are left, and fewer than KILN_BB_MAX_DRAFTS were opened. */
int kiln_mcts_draft_due(kiln_bb *bb, int pi, const kiln_mcts_config *c);

/* Under the lock. Opens a draft (its number, slice = max(1, ceil(draft_share * remaining)));
 * returns the number. */
int kiln_mcts_draft_open(kiln_bb *bb, int pi, const kiln_mcts_config *c);

/* Under the lock. Closes the active draft when its slice is spent and all its candidates were
 * answered, or when its subtree can make nothing new. Returns the number closed, or 0. */
int kiln_mcts_draft_maybe_close(kiln_bb *bb, int pi);

/* Under the lock. The active draft could not make its root or anything new: its slice ends at what
 * it made, and it closes as soon as its candidates are answered. Returns the number closed, or 0.
 */
int kiln_mcts_draft_give_up(kiln_bb *bb, int pi);

/* 1 when problem pi needs no more work from agents: budget spent or exhausted. */
int kiln_mcts_problem_finished(const kiln_bb_problem *p);

#endif
