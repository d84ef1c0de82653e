/* test_agents.c: the specialists on the real kernel families: parameter classes, steps in value
 * order, every proposal valid, fusion opportunities read from a model.json, and a whole simulated
 * search (agents + MCTS + dedupe, the CUDA sources of the softmax family, rewards made up) that
 * spends its budget on distinct candidates. */
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

#include "search/agents.h"
#include "search/mcts.h"

#define PROBLEM KILN_SOURCE_DIR "/tests/data/problems/softmax_f32"

typedef struct {
    kiln_problem *p;
    const kiln_family *fams[8];
    kiln_match matches[8];
    kiln_agent_problem ap;
} fixture;

static int setup(void **state) {
    fixture *fx = calloc(1, sizeof *fx);
    kiln_err err;
    if (kiln_problem_load(PROBLEM, &fx->p, &err) != KILN_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    char why[2048];
    int n = kiln_family_match_all(fx->p, fx->fams, fx->matches, 8, why, sizeof why);
    fx->ap = (kiln_agent_problem){fx->p, n, fx->fams, fx->matches};
    *state = fx;
    return 0;
}

static int teardown(void **state) {
    fixture *fx = *state;
    kiln_problem_free(fx->p);
    free(fx);
    return 0;
}

static fixture *need_family(void **state) {
    fixture *fx = *state;
    if (fx->ap.n_families == 0)
        skip(); /* no family matches softmax_f32 in this build */
    return fx;
}

static void test_param_classes(void **state) {
    (void)state;
    assert_int_equal(kiln_agent_param_class("SMX_THREADS"), KILN_PARAM_GEOMETRY);
    assert_int_equal(kiln_agent_param_class("SMX_TPR"), KILN_PARAM_GEOMETRY);
    assert_int_equal(kiln_agent_param_class("GN_SPLIT"), KILN_PARAM_GEOMETRY);
    assert_int_equal(kiln_agent_param_class("rows_per_block"), KILN_PARAM_GEOMETRY);
    assert_int_equal(kiln_agent_param_class("POOL_VEC"), KILN_PARAM_VECTOR);
    assert_int_equal(kiln_agent_param_class("BN_UNROLL"), KILN_PARAM_VECTOR);
    assert_int_equal(kiln_agent_param_class("RN_ITEMS"), KILN_PARAM_VECTOR);
    assert_int_equal(kiln_agent_param_class("SMX_ONLINE"), KILN_PARAM_ALGORITHM);
    assert_int_equal(kiln_agent_param_class("GN_MODE"), KILN_PARAM_ALGORITHM);
    assert_int_equal(kiln_agent_param_class("SMX_CACHE"), KILN_PARAM_ALGORITHM);
    for (int k = 0; k < KILN_AGENT_COUNT; k++)
        assert_int_equal(kiln_agent_parse(kiln_agent_name(k)), k);
    assert_int_equal(kiln_agent_parse("poetry"), -1);
}

static int differs_only_in(const kiln_family *f, const int64_t *a, const int64_t *b, int cls) {
    int changed = 0;
    for (int i = 0; i < f->n_params; i++)
        if (a[i] != b[i]) {
            if ((int)kiln_agent_param_class(f->params[i].name) != cls)
                return 0;
            changed++;
        }
    return changed > 0;
}

static int valid(const fixture *fx, int slot, const int64_t *pt) {
    const char *bad = fx->fams[slot]->check(fx->p, &fx->matches[slot], pt);
    if (bad && bad[0] == '!')
        free((void *)bad);
    return bad == NULL;
}

static void test_proposals_valid_and_in_class(void **state) {
    fixture *fx = need_family(state);
    uint64_t rng = 12345;
    int64_t start[KILN_FAMILY_MAX_PARAMS];
    assert_int_equal(kiln_agent_start_point(&fx->ap, 0, &rng, start), 0);
    assert_true(valid(fx, 0, start));
    const kiln_family *f = fx->fams[0];
    int kinds[] = {KILN_AGENT_GEOMETRY, KILN_AGENT_VECTOR, KILN_AGENT_ALGORITHM};
    int classes[] = {KILN_PARAM_GEOMETRY, KILN_PARAM_VECTOR, KILN_PARAM_ALGORITHM};
    for (int k = 0; k < 3; k++) {
        int has_class = 0;
        for (int i = 0; i < f->n_params; i++)
            has_class |= (int)kiln_agent_param_class(f->params[i].name) == classes[k] &&
                         f->params[i].n_values > 1;
        /* can one step of a param of the class alone reach a valid point from start? */
        int can_move = 0;
        for (int i = 0; i < f->n_params; i++) {
            if ((int)kiln_agent_param_class(f->params[i].name) != classes[k])
                continue;
            for (int j = 0; j < f->params[i].n_values; j++) {
                int64_t pt[KILN_FAMILY_MAX_PARAMS];
                memcpy(pt, start, sizeof pt);
                pt[i] = f->params[i].values[j];
                can_move |= pt[i] != start[i] && valid(fx, 0, pt);
            }
        }
        int ok = 0, in_class = 0, any_param = 0;
        for (int t = 0; t < 100; t++) {
            kiln_proposal pr;
            if (kiln_agent_propose(kinds[k], &fx->ap, 0, start, 0, &rng, &pr) != 0)
                continue;
            ok++;
            any_param += strstr(pr.note, "any param") != NULL;
            assert_true(valid(fx, pr.slot, pr.point));
            assert_true(memcmp(pr.point, start, sizeof start) != 0 || pr.slot != 0);
            if (pr.slot == 0 && differs_only_in(f, start, pr.point, classes[k]))
                in_class++;
        }
        assert_true(ok >= 90);
        /* a single step of its own class, most of the time (two steps when one breaks a
         * constraint); a step of any param, said in the note, where no param of its class can move
         * alone (the vector params at a point holding the row in registers, on rows of odd length)
         */
        if (has_class && can_move)
            assert_true(in_class >= ok / 2);
        else
            assert_int_equal(any_param, ok);
    }
    /* random points are valid and spread */
    int distinct = 0;
    int64_t prev[KILN_FAMILY_MAX_PARAMS] = {0};
    for (int t = 0; t < 50; t++) {
        kiln_proposal pr;
        assert_int_equal(kiln_agent_propose(KILN_AGENT_RANDOM, &fx->ap, 0, start, 0, &rng, &pr), 0);
        assert_true(valid(fx, pr.slot, pr.point));
        distinct += memcmp(prev, pr.point, sizeof prev) != 0;
        memcpy(prev, pr.point, sizeof prev);
    }
    assert_true(distinct >= 25);
    /* a specialist's third try at one selection is a uniform draw, credited to the random agent */
    for (int t = 0; t < 10; t++) {
        kiln_proposal p1, p2;
        assert_int_equal(kiln_agent_propose(KILN_AGENT_VECTOR, &fx->ap, 0, start, 1, &rng, &p1), 0);
        assert_int_equal(p1.used, KILN_AGENT_VECTOR);
        assert_int_equal(kiln_agent_propose(KILN_AGENT_VECTOR, &fx->ap, 0, start, 2, &rng, &p2), 0);
        assert_int_equal(p2.used, KILN_AGENT_RANDOM);
        assert_true(valid(fx, p2.slot, p2.point));
        assert_non_null(strstr(p2.note, "random point of"));
    }
    /* at the root: the starting point first, random ones on retries */
    kiln_proposal r0, r1;
    assert_int_equal(kiln_agent_propose(KILN_AGENT_GEOMETRY, &fx->ap, -1, NULL, 0, &rng, &r0), 0);
    assert_memory_equal(r0.point, start, (size_t)f->n_params * sizeof(int64_t));
    assert_int_equal(kiln_agent_propose(KILN_AGENT_GEOMETRY, &fx->ap, -1, NULL, 1, &rng, &r1), 0);
    assert_true(valid(fx, r1.slot, r1.point));
}

static void test_fusion_scan(void **state) {
    (void)state;
    const char *text =
        "{\"ops\": [{\"id\": 0, \"aten\": \"aten::_to_copy.default\", \"module\": \"m.cast\"},"
        " {\"id\": 1, \"aten\": \"aten::_softmax.default\", \"module\": \"m\", \"problem\": \"P\"},"
        " {\"id\": 2, \"aten\": \"aten::mul.Tensor\", \"problem\": null},"
        " {\"id\": 3, \"aten\": \"aten::_softmax.default\", \"problem\": \"P\"}],"
        " \"edges\": [[0, 1, 10], [1, 2, 11], [2, 3, 12], [0, 2, 13]]}";
    cJSON *model = cJSON_Parse(text);
    assert_non_null(model);
    char *lines[8];
    int n = kiln_agent_fusion_scan(model, "P", lines, 8);
    /* the first call only (op 1): the cast before it, the multiply after it */
    assert_int_equal(n, 2);
    assert_non_null(strstr(lines[0], "producer aten::_to_copy.default (op 0, m.cast)"));
    assert_non_null(strstr(lines[0], "consumer aten::_softmax.default (op 1, m)"));
    assert_non_null(strstr(lines[0], "input of P"));
    assert_non_null(strstr(lines[1], "consumer aten::mul.Tensor (op 2)"));
    assert_non_null(strstr(lines[1], "output of P"));
    for (int i = 0; i < n; i++)
        free(lines[i]);
    assert_int_equal(kiln_agent_fusion_scan(model, "Q", lines, 8), 0);
    cJSON_Delete(model);
}

/* A made-up landscape: faster with more threads per row, up to a point. */
static double fake_time(const kiln_family *f, const int64_t *pt) {
    double t = 10;
    for (int i = 0; i < f->n_params; i++)
        t += 0.1 * fabs(log((double)(pt[i] > 0 ? pt[i] : 1) + 1) - 2.0);
    return t;
}

static void test_simulated_search(void **state) {
    fixture *fx = need_family(state);
    char name[64];
    snprintf(name, sizeof name, "/kiln-test-agents-%d", (int)getpid());
    shm_unlink(name);
    kiln_bb_caps caps = {1, 256, 0, 8, 4};
    kiln_bb *bb = NULL;
    assert_int_equal(kiln_bb_create(name, &caps, &bb, NULL), KILN_OK);
    kiln_bb_unlink(name);
    kiln_mcts_config c;
    kiln_mcts_config_default(&c);
    c.plateau = 6;
    int pi = kiln_bb_problem_add(bb, 1, "softmax_f32");
    kiln_bb_problem *P = kiln_bb_problem_at(bb, pi);
    P->root = kiln_bb_node_add(bb, pi, -1, KILN_BB_NODE_ROOT);
    P->budget = 40;
    uint64_t rng = 7;
    int kinds[] = {KILN_AGENT_GEOMETRY, KILN_AGENT_ALGORITHM, KILN_AGENT_VECTOR, KILN_AGENT_RANDOM};
    int made = 0, guard = 0;
    while (!kiln_mcts_problem_finished(P) && guard++ < 2000) {
        kiln_mcts_pick pick;
        if (kiln_mcts_select(bb, pi, &c, &pick) != 0)
            break;
        kiln_bb_node *parent = kiln_bb_node_at(bb, pick.node);
        int slot = parent->family >= 0 ? 0 : -1;
        kiln_proposal pr;
        int kind = pick.make_draft_root ? KILN_AGENT_RANDOM : kinds[guard % 4];
        if (kiln_agent_propose(kind, &fx->ap, slot, parent->params, 0, &rng, &pr) != 0) {
            kiln_mcts_expand_failed(bb, pick.node, &c);
            continue;
        }
        const kiln_family *f = fx->fams[pr.slot];
        char *src = f->emit(fx->p, &fx->matches[pr.slot], pr.point, 1);
        assert_non_null(src);
        uint64_t h = kiln_fnv1a(KILN_FNV_INIT, src, strlen(src));
        free(src);
        if (kiln_bb_dedupe_find(bb, pi, h)) {
            kiln_mcts_expand_failed(bb, pick.node, &c);
            continue;
        }
        int ch = kiln_mcts_child_add(bb, &pick, 0, pr.point, f->n_params, pr.used, -1);
        assert_true(ch >= 0);
        assert_int_equal(kiln_bb_dedupe_insert(bb, pi, h, ch, made + 1, NULL), 1);
        kiln_bb_node_at(bb, ch)->status = KILN_BB_NODE_QUEUED;
        double t = fake_time(f, pr.point);
        kiln_mcts_result(bb, ch, 1, t, -1, &c);
        if (kiln_mcts_incumbent_check(bb, pi, t) != 0)
            kiln_mcts_incumbent_set(bb, pi, ch, t, -1, -1, &c);
        kiln_mcts_draft_maybe_close(bb, pi);
        made++;
    }
    /* the budget was spent on distinct CUDA sources, and the tree has depth */
    assert_int_equal(P->made, 40);
    assert_int_equal(made, 40);
    assert_int_equal(P->done, 40);
    assert_int_equal(kiln_bb_hdr(bb)->n_dedupe, 40);
    assert_true(P->incumbent_node >= 0);
    int depth = 0;
    for (int i = 0; i < kiln_bb_hdr(bb)->n_nodes; i++) {
        int d = 0;
        for (int j = i; kiln_bb_node_at(bb, j)->parent >= 0; j = kiln_bb_node_at(bb, j)->parent)
            d++;
        depth = d > depth ? d : depth;
        assert_int_equal(kiln_bb_node_at(bb, i)->virtual_loss, 0);
    }
    assert_true(depth >= 3);
    /* a landscape this flat plateaus: drafts opened, each with a root under the problem's root */
    assert_true(P->draft_count >= 1);
    for (int k = 1; k <= P->draft_count; k++)
        if (P->draft_root_of[k] >= 0)
            assert_int_equal(kiln_bb_node_at(bb, P->draft_root_of[k])->parent, P->root);
    kiln_bb_detach(bb);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_param_classes),
        cmocka_unit_test(test_proposals_valid_and_in_class),
        cmocka_unit_test(test_fusion_scan),
        cmocka_unit_test(test_simulated_search),
    };
    return cmocka_run_group_tests_name("agents", tests, setup, teardown);
}
