/* test_mcts.c: the search policy on a real blackboard: UCT, virtual loss, progressive widening,
 * backup, drafts, exhaustion, the llm agent's open selection, the incumbent rule, and where a run's
 * time goes between problems (share x headroom, plan.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "search/mcts.h"
#include "search/optimize_impl.h"

static int name_counter;
static char bb_name[64];

/* A blackboard with one problem and its root; the problem's budget is `budget`. */
static kiln_bb *make_tree(int budget) {
    snprintf(bb_name, sizeof bb_name, "/kiln-test-mcts-%d-%d", (int)getpid(), name_counter++);
    shm_unlink(bb_name);
    kiln_bb_caps caps = {
        .max_problems = 2, .max_nodes = 512, .dedupe_slots = 0, .queue_slots = 8, .max_workers = 4};
    kiln_bb *bb = NULL;
    assert_int_equal(kiln_bb_create(bb_name, &caps, &bb, NULL), KILN_OK);
    /* nothing here attaches by name: unlinked at once, so a failed test leaves no segment */
    kiln_bb_unlink(bb_name);
    int p = kiln_bb_problem_add(bb, 1, "p");
    kiln_bb_problem *P = kiln_bb_problem_at(bb, p);
    P->root = kiln_bb_node_add(bb, p, -1, KILN_BB_NODE_ROOT);
    P->budget = budget;
    return bb;
}

static void drop_tree(kiln_bb *bb) {
    kiln_bb_detach(bb);
}

/* A node under parent with given statistics (as if evaluated). */
static int add_node(kiln_bb *bb, int parent, int64_t visits, double value) {
    int n = kiln_bb_node_add(bb, 0, parent, KILN_BB_NODE_DONE);
    kiln_bb_node *nd = kiln_bb_node_at(bb, n);
    nd->visits = visits;
    nd->value_sum = value;
    nd->family = 0;
    return n;
}

/* One sequential step of search: select, make a child, evaluate it at time_us (score < 0:
 * unknown). Returns the child. */
static int step(kiln_bb *bb, const kiln_mcts_config *c, double time_us, double score) {
    kiln_mcts_pick pick;
    assert_int_equal(kiln_mcts_select(bb, 0, c, &pick), 0);
    int64_t pt[KILN_BB_MAX_PARAMS] = {0};
    int ch = kiln_mcts_child_add(bb, &pick, 0, pt, 1, 0, -1);
    assert_true(ch >= 0);
    kiln_bb_node_at(bb, ch)->status = KILN_BB_NODE_QUEUED;
    kiln_mcts_result(bb, ch, time_us > 0, time_us, score, c);
    return ch;
}

static void test_widen_limit(void **state) {
    (void)state;
    kiln_mcts_config c;
    kiln_mcts_config_default(&c);
    assert_true(c.pw_k == 1.0 && c.pw_alpha == 0.5 && c.plateau == 8);
    int expect[][2] = {{0, 1}, {1, 1}, {2, 2}, {4, 2}, {5, 3}, {9, 3}, {10, 4}, {100, 10}};
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++)
        assert_int_equal(kiln_mcts_widen_limit(&c, expect[i][0]), expect[i][1]);
}

static void test_unvisited_first(void **state) {
    (void)state;
    kiln_mcts_config c;
    kiln_mcts_config_default(&c);
    kiln_bb *bb = make_tree(50);
    int root = kiln_bb_problem_at(bb, 0)->root;
    kiln_bb_node_at(bb, root)->visits = 9; /* widening allows 3 children: no expansion here */
    add_node(bb, root, 5, 4.5);            /* a strong child */
    int fresh = add_node(bb, root, 0, 0);
    add_node(bb, root, 4, 3.9);
    assert_true(isinf(kiln_mcts_uct(&c, 9, kiln_bb_node_at(bb, fresh))));
    kiln_mcts_pick pick;
    assert_int_equal(kiln_mcts_select(bb, 0, &c, &pick), 0);
    /* the unvisited child, then (it has no children yet) it is where to expand */
    assert_int_equal(pick.node, fresh);
    assert_int_equal(kiln_bb_node_at(bb, fresh)->virtual_loss, 1);
    assert_int_equal(kiln_bb_node_at(bb, root)->virtual_loss, 1);
    drop_tree(bb);
}

static void test_virtual_loss_spreads(void **state) {
    (void)state;
    kiln_mcts_config c;
    kiln_mcts_config_default(&c);
    kiln_bb *bb = make_tree(50);
    int root = kiln_bb_problem_at(bb, 0)->root;
    kiln_bb_node_at(bb, root)->visits = 4; /* two children allowed, two present */
    int a = add_node(bb, root, 2, 1.0);
    int b = add_node(bb, root, 2, 1.0);
    kiln_mcts_pick p1, p2, p3;
    assert_int_equal(kiln_mcts_select(bb, 0, &c, &p1), 0);
    assert_int_equal(kiln_mcts_select(bb, 0, &c, &p2), 0);
    /* two concurrent selections with equal children: the virtual loss of the first sends the
     * second to the other child */
    assert_true((p1.node == a && p2.node == b) || (p1.node == b && p2.node == a));
    assert_int_equal(kiln_bb_node_at(bb, root)->virtual_loss, 2);
    /* without the first's virtual loss, the second would have gone the same way */
    kiln_mcts_virtual_loss(bb, p1.node, -1);
    kiln_mcts_virtual_loss(bb, p2.node, -1);
    assert_int_equal(kiln_bb_node_at(bb, root)->virtual_loss, 0);
    assert_int_equal(kiln_mcts_select(bb, 0, &c, &p3), 0);
    assert_int_equal(p3.node, p1.node);
    kiln_mcts_virtual_loss(bb, p3.node, -1);
    /* never below zero */
    kiln_mcts_virtual_loss(bb, a, -5);
    assert_int_equal(kiln_bb_node_at(bb, a)->virtual_loss, 0);
    drop_tree(bb);
}

static void check_widening(kiln_bb *bb, const kiln_mcts_config *c) {
    kiln_bb_header *h = kiln_bb_hdr(bb);
    for (int i = 0; i < h->n_nodes; i++) {
        kiln_bb_node *n = kiln_bb_node_at(bb, i);
        assert_true(n->n_children <= kiln_mcts_widen_limit(c, (double)n->visits));
    }
}

static void test_progressive_widening(void **state) {
    (void)state;
    kiln_mcts_config c;
    kiln_mcts_config_default(&c);
    c.plateau = 0; /* no drafts: this is about one tree's shape */
    kiln_bb *bb = make_tree(100);
    int root = kiln_bb_problem_at(bb, 0)->root;
    for (int t = 0; t < 40; t++) {
        step(bb, &c, 10.0, 0.5);
        check_widening(bb, &c);
    }
    kiln_bb_node *r = kiln_bb_node_at(bb, root);
    assert_int_equal(r->visits, 40);
    /* it widened, but no faster than ceil(sqrt(N)) */
    assert_true(r->n_children >= 2);
    assert_true(r->n_children <= kiln_mcts_widen_limit(&c, 40));
    /* and the tree went deeper than one level */
    int deep = 0;
    for (int i = 0; i < kiln_bb_hdr(bb)->n_nodes; i++) {
        int d = 0;
        for (int j = i; kiln_bb_node_at(bb, j)->parent >= 0; j = kiln_bb_node_at(bb, j)->parent)
            d++;
        if (d > deep)
            deep = d;
    }
    assert_true(deep >= 3);
    /* no virtual loss is left once every selection has its result */
    for (int i = 0; i < kiln_bb_hdr(bb)->n_nodes; i++)
        assert_int_equal(kiln_bb_node_at(bb, i)->virtual_loss, 0);
    drop_tree(bb);
}

static void test_backup(void **state) {
    (void)state;
    kiln_mcts_config c;
    kiln_mcts_config_default(&c);
    kiln_bb *bb = make_tree(10);
    kiln_bb_problem *P = kiln_bb_problem_at(bb, 0);
    int root = P->root;
    int a = step(bb, &c, 20.0, 0.6);
    assert_int_equal(kiln_bb_node_at(bb, a)->parent, root);
    int b = step(bb, &c, 10.0, 0.8); /* below a: widening keeps the root at one child */
    assert_int_equal(kiln_bb_node_at(bb, b)->parent, a);
    kiln_bb_node *R = kiln_bb_node_at(bb, root), *A = kiln_bb_node_at(bb, a),
                 *B = kiln_bb_node_at(bb, b);
    assert_int_equal(B->visits, 1);
    assert_true(fabs(B->value_sum - 0.8) < 1e-12);
    assert_int_equal(A->visits, 2);
    assert_true(fabs(A->value_sum - 1.4) < 1e-12);
    assert_true(fabs(A->best - 0.8) < 1e-12);
    assert_int_equal(R->visits, 2);
    assert_true(fabs(R->value_sum - 1.4) < 1e-12);
    assert_int_equal(R->virtual_loss + A->virtual_loss + B->virtual_loss, 0);
    assert_int_equal(B->status, KILN_BB_NODE_DONE);
    assert_true(B->time_us == 10.0);
    /* a failure earns 0 */
    int f = step(bb, &c, -1, 0.9);
    assert_int_equal(kiln_bb_node_at(bb, f)->status, KILN_BB_NODE_FAILED);
    assert_true(kiln_bb_node_at(bb, f)->reward == 0);
    assert_int_equal(R->visits, 3);
    assert_true(fabs(R->value_sum - 1.4) < 1e-12);
    assert_int_equal(P->done, 3);
    assert_int_equal(P->ok, 2);
    assert_int_equal(P->made, 3);
    assert_int_equal(P->pending, 0);
    /* without a reference time the reward is the time relative to the best seen */
    assert_true(kiln_mcts_reward(1, 20, -1, 10) == 0.5);
    assert_true(kiln_mcts_reward(1, 10, -1, 10) == 1.0);
    assert_true(kiln_mcts_reward(0, 10, 0.9, 10) == 0);
    assert_true(kiln_mcts_reward(1, 10, 0.7, 5) == 0.7);
    int u = step(bb, &c, 5.0, -1);
    assert_true(P->best_seen_time_us == 5.0);
    assert_true(kiln_bb_node_at(bb, u)->reward == 1.0);
    drop_tree(bb);
}

/* Makes the first result the incumbent, then n results that do not improve it. */
static void plateau(kiln_bb *bb, const kiln_mcts_config *c, int n) {
    kiln_bb_problem *P = kiln_bb_problem_at(bb, 0);
    if (P->incumbent_node < 0) {
        int first = step(bb, c, 10.0, 0.5);
        assert_int_equal(kiln_mcts_incumbent_check(bb, 0, 10.0), 1);
        kiln_mcts_incumbent_set(bb, 0, first, 10.0, 0.5, 1.0, c);
        assert_int_equal(P->since_improve, 0);
    }
    for (int i = 0; i < n; i++) {
        int ch = step(bb, c, 12.0, 0.4);
        (void)ch;
        assert_int_equal(kiln_mcts_incumbent_check(bb, 0, 12.0), 0);
    }
}

static void test_draft_opens_after_plateau(void **state) {
    (void)state;
    kiln_mcts_config c;
    kiln_mcts_config_default(&c);
    c.plateau = 4;
    kiln_bb *bb = make_tree(40);
    kiln_bb_problem *P = kiln_bb_problem_at(bb, 0);
    plateau(bb, &c, 3);
    assert_int_equal(P->since_improve, 3);
    assert_false(kiln_mcts_draft_due(bb, 0, &c));
    /* a result faster by less than 1% is no improvement */
    int small = step(bb, &c, 9.95, 0.5);
    assert_int_equal(kiln_mcts_incumbent_check(bb, 0, 9.95), 2);
    kiln_mcts_incumbent_set(bb, 0, small, 9.95, 0.5, 1.0, &c);
    assert_int_equal(P->since_improve, 4);
    assert_true(kiln_mcts_draft_due(bb, 0, &c));

    kiln_mcts_pick pick;
    assert_int_equal(kiln_mcts_select(bb, 0, &c, &pick), 0);
    assert_true(pick.draft_opened);
    assert_int_equal(pick.draft, 1);
    assert_true(pick.make_draft_root);
    assert_int_equal(pick.node, P->root);
    assert_int_equal(P->draft_state, KILN_BB_DRAFT_ACTIVE);
    int remaining = P->budget - P->made;
    assert_int_equal(P->draft_slice, (int)ceil(0.25 * remaining));
    int64_t pt[KILN_BB_MAX_PARAMS] = {0};
    int droot = kiln_mcts_child_add(bb, &pick, 0, pt, 1, 4, -1);
    assert_int_equal(P->draft_root, droot);
    assert_int_equal(kiln_bb_node_at(bb, droot)->draft, 1);
    assert_int_equal(kiln_bb_node_at(bb, droot)->parent, P->root);
    kiln_mcts_result(bb, droot, 1, 11.0, 0.45, &c);

    /* while the slice lasts, every selection is inside the draft */
    while (P->draft_made < P->draft_slice) {
        assert_int_equal(kiln_mcts_select(bb, 0, &c, &pick), 0);
        assert_int_equal(pick.draft, 1);
        assert_false(pick.draft_opened);
        assert_int_equal(kiln_bb_node_at(bb, pick.node)->draft, 1);
        int ch = kiln_mcts_child_add(bb, &pick, 0, pt, 1, 0, -1);
        assert_int_equal(kiln_bb_node_at(bb, ch)->draft, 1);
        assert_int_equal(kiln_mcts_draft_maybe_close(bb, 0), 0); /* one is pending */
        kiln_mcts_result(bb, ch, 1, 11.0, 0.45, &c);
    }
    /* spent and answered, and it did not win: closed, skipped from then on */
    assert_int_equal(kiln_mcts_draft_maybe_close(bb, 0), 1);
    assert_int_equal(P->draft_state, KILN_BB_DRAFT_NONE);
    assert_int_equal(P->draft_fate[1], KILN_BB_FATE_CLOSED);
    assert_int_equal(P->since_improve, 0);
    for (int i = 0; i < 10; i++) {
        assert_int_equal(kiln_mcts_select(bb, 0, &c, &pick), 0);
        assert_int_equal(kiln_bb_node_at(bb, pick.node)->draft, 0);
        kiln_mcts_virtual_loss(bb, pick.node, -1);
    }
    drop_tree(bb);
}

static void test_draft_promoted(void **state) {
    (void)state;
    kiln_mcts_config c;
    kiln_mcts_config_default(&c);
    c.plateau = 2;
    kiln_bb *bb = make_tree(40);
    kiln_bb_problem *P = kiln_bb_problem_at(bb, 0);
    plateau(bb, &c, 2);
    kiln_mcts_pick pick;
    assert_int_equal(kiln_mcts_select(bb, 0, &c, &pick), 0);
    assert_true(pick.make_draft_root);
    int64_t pt[KILN_BB_MAX_PARAMS] = {0};
    int droot = kiln_mcts_child_add(bb, &pick, 0, pt, 1, 4, -1);
    kiln_mcts_result(bb, droot, 1, 5.0, 0.8, &c);
    assert_int_equal(kiln_mcts_incumbent_check(bb, 0, 5.0), 2);
    /* it won the re-timing: promoted */
    assert_int_equal(kiln_mcts_incumbent_set(bb, 0, droot, 5.0, 0.8, 2.0, &c), 1);
    assert_int_equal(P->draft_state, KILN_BB_DRAFT_NONE);
    assert_int_equal(P->draft_fate[1], KILN_BB_FATE_PROMOTED);
    assert_int_equal(P->incumbent_node, droot);
    assert_true(P->best_time_us == 5.0);
    assert_int_equal(P->since_improve, 0);
    /* its subtree is selected normally from the root now: the best branch wins UCT */
    int in_draft = 0;
    for (int i = 0; i < 6; i++) {
        int ch = step(bb, &c, 6.0, 0.7);
        in_draft += kiln_bb_node_at(bb, ch)->draft == 1;
    }
    assert_true(in_draft > 0);
    drop_tree(bb);
}

static void test_exhaustion(void **state) {
    (void)state;
    kiln_mcts_config c;
    kiln_mcts_config_default(&c);
    c.expand_tries = 2;
    c.stale_limit = 1000;
    kiln_bb *bb = make_tree(40);
    kiln_bb_problem *P = kiln_bb_problem_at(bb, 0);
    int a = step(bb, &c, 10.0, 0.5);
    /* every proposal is a duplicate: nodes stop expanding, then saturate, then the root */
    int guard = 0;
    kiln_mcts_pick pick;
    while (kiln_mcts_select(bb, 0, &c, &pick) == 0) {
        kiln_mcts_expand_failed(bb, pick.node, &c);
        assert_true(++guard < 100);
    }
    assert_true(kiln_bb_node_at(bb, a)->flags & KILN_BB_FLAG_SATURATED);
    assert_true(kiln_bb_node_at(bb, P->root)->expand_fail >= 2);
    for (int i = 0; i < kiln_bb_hdr(bb)->n_nodes; i++)
        assert_int_equal(kiln_bb_node_at(bb, i)->virtual_loss, 0);
    assert_int_equal(P->stale, guard);
    drop_tree(bb);

    /* the stale limit alone also ends a problem */
    c.expand_tries = 1000;
    c.stale_limit = 5;
    bb = make_tree(40);
    P = kiln_bb_problem_at(bb, 0);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(kiln_mcts_select(bb, 0, &c, &pick), 0);
        kiln_mcts_expand_failed(bb, pick.node, &c);
    }
    assert_true(P->exhausted);
    assert_true(kiln_mcts_problem_finished(P));
    assert_int_equal(kiln_mcts_select(bb, 0, &c, &pick), -1);
    drop_tree(bb);
}

/* A problem two families match is not given up before the second family was tried: the search
 * opens it at the root, once, then ends when that family too makes nothing new. */
static void test_untried_family_before_exhaustion(void **state) {
    (void)state;
    kiln_mcts_config c;
    kiln_mcts_config_default(&c);
    c.stale_limit = 5;
    for (int path = 0; path < 2; path++) {
        if (path == 1) { /* the other way a problem ends: its root saturates */
            c.stale_limit = 1000;
            c.expand_tries = 2;
        }
        kiln_bb *bb = make_tree(40);
        kiln_bb_problem *P = kiln_bb_problem_at(bb, 0);
        P->n_families = 2;
        P->family[0] = 0; /* step() makes family-0 nodes */
        P->family[1] = 3;
        step(bb, &c, 10.0, 0.5);
        kiln_mcts_pick pick;
        int guard = 0, opened = -1;
        while (kiln_mcts_select(bb, 0, &c, &pick) == 0 && !pick.open_family) {
            kiln_mcts_expand_failed(bb, pick.node, &c);
            assert_true(++guard < 200);
        }
        assert_false(P->exhausted);
        assert_int_equal(pick.open_family, 1);
        assert_int_equal(pick.family_slot, 1);
        assert_int_equal(pick.node, P->root);
        assert_int_equal(P->stale, 0);
        int64_t pt[KILN_BB_MAX_PARAMS] = {0};
        opened = kiln_mcts_child_add(bb, &pick, 3, pt, 1, 0, -1);
        assert_true(opened >= 0);
        kiln_bb_node_at(bb, opened)->status = KILN_BB_NODE_QUEUED;
        kiln_mcts_result(bb, opened, 1, 8.0, 0.6, &c);
        /* both families tried: misses end the problem now, and no family is opened twice */
        guard = 0;
        while (kiln_mcts_select(bb, 0, &c, &pick) == 0) {
            assert_int_equal(pick.open_family, 0);
            kiln_mcts_expand_failed(bb, pick.node, &c);
            assert_true(++guard < 200);
        }
        if (path == 0)
            assert_true(P->exhausted);
        for (int i = 0; i < kiln_bb_hdr(bb)->n_nodes; i++)
            assert_int_equal(kiln_bb_node_at(bb, i)->virtual_loss, 0);
        drop_tree(bb);
    }

    /* an opened family whose start made nothing new is not opened again */
    c.stale_limit = 3;
    c.expand_tries = 1000;
    kiln_bb *bb = make_tree(40);
    kiln_bb_problem *P = kiln_bb_problem_at(bb, 0);
    P->n_families = 2;
    P->family[0] = 0;
    P->family[1] = 3;
    step(bb, &c, 10.0, 0.5);
    kiln_mcts_pick pick;
    int opens = 0, guard = 0;
    while (kiln_mcts_select(bb, 0, &c, &pick) == 0) {
        opens += pick.open_family;
        kiln_mcts_expand_failed(bb, pick.node, &c);
        assert_true(++guard < 200);
    }
    assert_int_equal(opens, 1);
    assert_true(P->exhausted);
    drop_tree(bb);
}

/* One open selection (the llm agent's) that must pick `want`; its virtual loss is given back. */
static void open_picks(kiln_bb *bb, const kiln_mcts_config *c, int want) {
    kiln_mcts_pick pick;
    assert_int_equal(kiln_mcts_select_open(bb, 0, c, &pick), 0);
    assert_int_equal(pick.node, want);
    assert_int_equal(pick.make_draft_root, 0);
    assert_int_equal(pick.draft_opened, 0);
    assert_int_equal(kiln_bb_node_at(bb, want)->virtual_loss, 1);
    kiln_mcts_virtual_loss(bb, want, -1);
}

static void test_select_open(void **state) {
    (void)state;
    kiln_mcts_config c;
    kiln_mcts_config_default(&c);
    kiln_bb *bb = make_tree(50);
    kiln_bb_problem *P = kiln_bb_problem_at(bb, 0);
    int root = P->root;
    int64_t pt[KILN_BB_MAX_PARAMS] = {0};
    /* an empty tree: the root (a first kernel) */
    kiln_mcts_pick pick;
    assert_int_equal(kiln_mcts_select_open(bb, 0, &c, &pick), 0);
    assert_int_equal(pick.node, root);
    int a = kiln_mcts_child_add(bb, &pick, -1, pt, 0, 0, -1);
    kiln_bb_node_at(bb, a)->status = KILN_BB_NODE_QUEUED;
    /* the root is at its widening limit and its child's verdict is not in: nothing to ask yet */
    assert_int_equal(kiln_mcts_select_open(bb, 0, &c, &pick), -1);
    assert_int_equal(kiln_bb_node_at(bb, root)->virtual_loss, 1); /* the child's, pending */
    /* it proved ok: the next question is how to beat it */
    kiln_mcts_result(bb, a, 1, 10.0, 0.6, &c);
    open_picks(bb, &c, a);
    /* what stops the built-in agents does not stop it */
    P->exhausted = 1;
    kiln_bb_node_at(bb, a)->flags |= KILN_BB_FLAG_SATURATED;
    kiln_bb_node_at(bb, a)->expand_fail = 1000;
    open_picks(bb, &c, a);
    assert_int_equal(kiln_mcts_select(bb, 0, &c, &pick), -1); /* (the built-in selection stops) */
    drop_tree(bb);

    /* a failed child is never descended into: a node whose children all failed is asked again */
    bb = make_tree(50);
    P = kiln_bb_problem_at(bb, 0);
    root = P->root;
    assert_int_equal(kiln_mcts_select_open(bb, 0, &c, &pick), 0);
    int f = kiln_mcts_child_add(bb, &pick, -1, pt, 0, 0, -1);
    kiln_mcts_result(bb, f, 0, -1, 0, &c);
    open_picks(bb, &c, root);
    /* an ok child beside it is where the search goes, past the failed one */
    assert_int_equal(kiln_mcts_select_open(bb, 0, &c, &pick), 0);
    int g = kiln_mcts_child_add(bb, &pick, -1, pt, 0, 0, -1);
    kiln_mcts_result(bb, g, 1, 10.0, 0.6, &c);
    open_picks(bb, &c, g);
    /* the active draft is not entered from the root, however good its root looks */
    int d = add_node(bb, root, 1, 1.0);
    kiln_bb_node_at(bb, d)->draft = 1;
    P->draft_count = 1;
    P->draft_state = KILN_BB_DRAFT_ACTIVE;
    P->draft_root = d;
    P->draft_fate[1] = KILN_BB_FATE_OPEN;
    open_picks(bb, &c, g);
    /* once promoted it competes like any branch, and wins on its value */
    P->draft_state = KILN_BB_DRAFT_NONE;
    P->draft_fate[1] = KILN_BB_FATE_PROMOTED;
    open_picks(bb, &c, d);
    drop_tree(bb);
}

static void test_incumbent_rule(void **state) {
    (void)state;
    kiln_mcts_config c;
    kiln_mcts_config_default(&c);
    kiln_mcts_verdict v;
    /* a clear win beyond a 2% noise */
    double inc1[] = {10.0, 10.1, 9.9}, ch1[] = {9.5, 9.6, 9.4};
    kiln_mcts_incumbent_rule(inc1, ch1, 3, &c, &v);
    assert_true(v.replace);
    assert_true(fabs(v.incumbent_us - 10.0) < 1e-12);
    assert_true(fabs(v.challenger_us - 9.5) < 1e-12);
    assert_true(fabs(v.margin - 0.2 / 9.5) < 1e-9);
    /* the same medians in 40% noise: kept */
    double inc2[] = {10.0, 12.0, 8.0}, ch2[] = {9.5, 9.6, 9.4};
    kiln_mcts_incumbent_rule(inc2, ch2, 3, &c, &v);
    assert_false(v.replace);
    assert_true(fabs(v.margin - 0.4) < 1e-9);
    /* under the 1% floor: kept even without noise */
    double inc3[] = {10.0, 10.0, 10.0}, ch3[] = {9.95, 9.95, 9.95};
    kiln_mcts_incumbent_rule(inc3, ch3, 3, &c, &v);
    assert_false(v.replace);
    assert_true(fabs(v.margin - 0.01) < 1e-12);
    double ch4[] = {9.8, 9.8, 9.8};
    kiln_mcts_incumbent_rule(inc3, ch4, 3, &c, &v);
    assert_true(v.replace);
    /* a round where the challenger failed: never replaces */
    double ch5[] = {5.0, -1.0, 5.0};
    kiln_mcts_incumbent_rule(inc3, ch5, 3, &c, &v);
    assert_false(v.replace);
    /* an even number of rounds takes the mean of the middle two */
    double inc6[] = {10, 10, 11, 11}, ch6[] = {8, 8, 8, 8};
    kiln_mcts_incumbent_rule(inc6, ch6, 4, &c, &v);
    assert_true(fabs(v.incumbent_us - 10.5) < 1e-12);
    assert_true(v.replace);
}

/* kiln_opt_priority: share x headroom to the speed of light, as a fraction of the eager time. */
static void test_priority_is_share_times_headroom(void **state) {
    (void)state;
    kiln_bb *bb = make_tree(50);
    int q = kiln_bb_problem_add(bb, 2, "q");
    kiln_bb_problem_at(bb, q)->root = kiln_bb_node_add(bb, q, -1, KILN_BB_NODE_ROOT);
    kiln_opt_problem problems[2];
    memset(problems, 0, sizeof problems);
    problems[0].share = 0.5;
    problems[0].eager_us = 100;
    problems[1].share = 0.3;
    problems[1].eager_us = 100;
    int of_bb[2] = {0, 1};
    kiln_opt_ctx c;
    memset(&c, 0, sizeof c);
    c.bb = bb;
    c.problems = problems;
    c.of_bb = of_bb;
    c.n_problems = 2;
    /* before any candidate: the headroom is the whole eager time, so the share decides */
    assert_true(fabs(kiln_opt_priority(&c, 0) - 0.5) < 1e-12);
    assert_true(fabs(kiln_opt_priority(&c, 1) - 0.3) < 1e-12);
    /* p at 20 us, 90 % of its speed of light (18 us): 2 us of 100 left, 0.5 x 0.02 */
    kiln_bb_problem *P = kiln_bb_problem_at(bb, 0);
    P->incumbent_node = P->root;
    P->best_time_us = 20;
    P->best_sol_pct = 90;
    assert_true(fabs(kiln_opt_priority(&c, 0) - 0.01) < 1e-12);
    assert_true(kiln_opt_priority(&c, 1) > kiln_opt_priority(&c, 0)); /* q's turn now */
    /* q's best is slower than eager: the model would run eager (100 us), its sol is 20 us */
    kiln_bb_problem *Q = kiln_bb_problem_at(bb, q);
    Q->incumbent_node = Q->root;
    Q->best_time_us = 200;
    Q->best_sol_pct = 10;
    assert_true(fabs(kiln_opt_priority(&c, 1) - 0.3 * 0.8) < 1e-12);
    /* no SOL known: all of min(best, eager) is headroom; at the SOL, none; no share: 0 */
    Q->best_time_us = 50;
    Q->best_sol_pct = -1;
    assert_true(fabs(kiln_opt_priority(&c, 1) - 0.3 * 0.5) < 1e-12);
    Q->best_sol_pct = 100;
    assert_true(kiln_opt_priority(&c, 1) == 0);
    problems[0].share = -1;
    assert_true(kiln_opt_priority(&c, 0) == 0);
    drop_tree(bb);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_widen_limit),
        cmocka_unit_test(test_unvisited_first),
        cmocka_unit_test(test_virtual_loss_spreads),
        cmocka_unit_test(test_progressive_widening),
        cmocka_unit_test(test_backup),
        cmocka_unit_test(test_draft_opens_after_plateau),
        cmocka_unit_test(test_draft_promoted),
        cmocka_unit_test(test_exhaustion),
        cmocka_unit_test(test_untried_family_before_exhaustion),
        cmocka_unit_test(test_select_open),
        cmocka_unit_test(test_incumbent_rule),
        cmocka_unit_test(test_priority_is_share_times_headroom),
    };
    return cmocka_run_group_tests_name("mcts", tests, NULL, NULL);
}
