/* worker_gate.c: the loop of a gate process of `kiln optimize`: take a queued candidate, prove and
 * time it through a gate session that keeps the device and its input sets from one candidate to
 * the next, record the verdict at once, back the reward up, and re-time a challenger against the
 * incumbent, interleaved, before it replaces it. */
#include "workers_impl.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

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
        if (kiln_opt_stopping(c)) {
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
        kiln_opt_nap_ms(10);
        return;
    }
    kiln_opt_problem *pr = &c->problems[c->of_bb[sl.problem]];
    char *path = ensure_candidate_file(c, s, sl.candidate_id);
    kiln_opt_log(c, "eval %lld pid=%d", (long long)sl.candidate_id, (int)getpid());
    /* race the incumbent: a challenger clearly slower on a workload stops there (outcome slower) */
    kiln_bb_lock(bb);
    int64_t racing = kiln_bb_problem_at(bb, sl.problem)->incumbent_candidate;
    kiln_bb_unlock(bb);
    kiln_gate_options eval_opt = *opt;
    double *race = xcalloc((size_t)pr->p->n_workloads + 1, sizeof *race);
    kiln_store_result_row inc;
    int found = 0;
    if (racing > 0 && kiln_store_result_latest(s, racing, &inc, &found, NULL) == KILN_OK && found) {
        cJSON *ir = inc.result_json ? cJSON_Parse(inc.result_json) : NULL;
        eval_opt.n_race = kiln_store_summary_medians(ir, race, pr->p->n_workloads);
        eval_opt.race_us = race;
        cJSON_Delete(ir);
        kiln_store_result_row_free(&inc);
    }
    cJSON *r = kiln_gate_session_eval(gate_session, pr->p, pr->ref, path, &eval_opt);
    free(race);
    double t, spread, sol, score;
    int known = 0;
    int outcome = kiln_opt_result_read(r, &t, &spread, &sol, &score, &known);
    int interrupted = kiln_opt_stopping(c) && (outcome == KILN_OUTCOME_CRASHED ||
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
    kiln_opt_worker_signals(c);
    kiln_bb_lock(c->bb);
    int device = kiln_bb_worker_at(c->bb, worker)->kind;
    kiln_bb_unlock(c->bb);
    kiln_store *s = kiln_opt_worker_store(c, "gate");
    kiln_gate_options opt = c->gate_opt;
    opt.device = device;
    gate_session = kiln_gate_session_new(&opt);
    while (!kiln_opt_stopping(c))
        gate_once(c, s, worker, &opt);
    kiln_gate_session_free(gate_session);
    kiln_store_close(s);
    _exit(0);
}
