/* resume.c: how a rerun of `kiln optimize RUN` continues where the last one stopped: it reads each
 * problem's nodes, candidates and verdicts from the store and rebuilds the tree on the blackboard.
 *
 * Nothing here trusts what may not have been written: visits and values are recomputed by backing
 * up every stored verdict again (the coordinator's periodic save of them may be a second old), a
 * node is tied to its candidate through candidate.node_id (written in the candidate's own insert),
 * a node whose candidate never made it to the store is dropped, and a candidate without a verdict
 * is queued again. The incumbent is the store's; drafts are the meta keys "draft.<problem>.<k>". */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "optimize_impl.h"

int kiln_opt_resume_read(kiln_store *s, int64_t pid, kiln_opt_resumed *rp, kiln_err *err) {
    memset(rp, 0, sizeof *rp);
    kiln_store_problem_row p;
    int found = 0;
    int rc = kiln_store_node_list(s, pid, &rp->nodes, &rp->n_nodes, err);
    if (!rc)
        rc = kiln_store_verdict_list(s, pid, &rp->cands, &rp->n_cands, err);
    if (!rc)
        rc = kiln_store_problem_get(s, pid, &p, &found, err);
    if (rc) {
        kiln_opt_resume_free(rp);
        return rc;
    }
    rp->incumbent_id = found ? p.incumbent_id : 0;
    kiln_store_problem_row_free(&p);
    rp->node_bb = xmalloc((size_t)(rp->n_nodes + 1) * sizeof *rp->node_bb);
    for (int i = 0; i < rp->n_nodes; i++)
        rp->node_bb[i] = -1;
    return KILN_OK;
}

void kiln_opt_resume_free(kiln_opt_resumed *rp) {
    for (int i = 0; i < rp->n_nodes; i++)
        kiln_store_node_row_free(&rp->nodes[i]);
    free(rp->nodes);
    free(rp->node_bb);
    free(rp->cands);
    memset(rp, 0, sizeof *rp);
}

/* The dedupe key of a candidate: its binary's hash, or its source's when it was not compiled. */
static uint64_t cand_hash(const kiln_store_verdict *v) {
    return v->binary_hash ? v->binary_hash : v->source_hash;
}

static int find_node(const kiln_opt_resumed *rp, int64_t id) {
    int lo = 0, hi = rp->n_nodes - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (rp->nodes[mid].id == id)
            return mid;
        if (rp->nodes[mid].id < id)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

static int family_index(const char *name) {
    for (int i = 0; name && i < kiln_family_count(); i++)
        if (strcmp(kiln_family_at(i)->name, name) == 0)
            return i;
    return -1;
}

/* Builds problem pi's tree on the blackboard from the store's rows (or a fresh root). Queues the
 * candidates that have no result. Returns how many were queued again. */
int kiln_opt_tree_build(kiln_opt_ctx *c, kiln_store *s, int pi, kiln_opt_resumed *rp) {
    kiln_bb *bb = c->bb;
    kiln_opt_problem *pr = &c->problems[c->of_bb[pi]];
    kiln_bb_problem *P = kiln_bb_problem_at(bb, pi);
    int root = -1;
    for (int i = 0; i < rp->n_nodes && root < 0; i++)
        if (rp->nodes[i].parent_id == 0 && !rp->nodes[i].family && rp->nodes[i].draft == 0) {
            root = kiln_bb_node_add(bb, pi, -1, KILN_BB_NODE_ROOT);
            kiln_bb_node_at(bb, root)->store_node_id = rp->nodes[i].id;
            rp->node_bb[i] = root;
        }
    if (root < 0) {
        root = kiln_bb_node_add(bb, pi, -1, KILN_BB_NODE_ROOT);
        kiln_store_node sn = {0};
        sn.problem_id = pr->store_id;
        sn.params = "";
        sn.status = "open";
        if (kiln_store_node_insert(s, &sn, NULL) == KILN_OK)
            kiln_bb_node_at(bb, root)->store_node_id = sn.id;
    }
    P->root = root;

    /* candidate of each node: candidate.node_id is written in the same insert as the candidate, so
     * it is the link that survives a death between the candidate and the node's update */
    int *cand_of = xmalloc((size_t)(rp->n_nodes + 1) * sizeof *cand_of);
    for (int i = 0; i < rp->n_nodes; i++)
        cand_of[i] = -1;
    for (int k = 0; k < rp->n_cands; k++) {
        int i = find_node(rp, rp->cands[k].node_id);
        if (i >= 0)
            cand_of[i] = k;
    }
    /* the fastest ok time: the reward scale where the SOL score is unknown */
    double best_seen = -1;
    for (int k = 0; k < rp->n_cands; k++)
        if (rp->cands[k].ok && rp->cands[k].time_us > 0 &&
            (best_seen < 0 || rp->cands[k].time_us < best_seen))
            best_seen = rp->cands[k].time_us;
    P->best_seen_time_us = best_seen;

    int max_draft = 0;
    for (int i = 0; i < rp->n_nodes; i++) {
        kiln_store_node_row *n = &rp->nodes[i];
        if (rp->node_bb[i] >= 0 || cand_of[i] < 0)
            continue; /* the root, or a node whose candidate was never recorded */
        int pa = n->parent_id ? find_node(rp, n->parent_id) : -1;
        int parent_bb = pa >= 0 ? rp->node_bb[pa] : -1;
        if (!n->parent_id && n->draft > 0)
            parent_bb = root; /* a draft's root: a root in the store, the root's child here */
        if (parent_bb < 0)
            continue;
        int fam = family_index(n->family);
        int slot = kiln_opt_family_slot(pr, fam);
        int b = kiln_bb_node_add(bb, pi, parent_bb, KILN_BB_NODE_QUEUED);
        if (b < 0)
            break;
        kiln_bb_node *bn = kiln_bb_node_at(bb, b);
        bn->draft = (int16_t)n->draft;
        if (slot >= 0) {
            bn->family = (int16_t)fam;
            kiln_opt_parse_params(pr->fams[slot], n->params, bn->params);
        } else {
            /* a kernel no linked family made (kiln submit, the llm agent) or of a family that no
             * longer matches: in the tree with its verdict, expanded like the root (agents propose
             * starting points below it) */
            bn->family = -1;
            if (n->family)
                bn->flags |= KILN_BB_FLAG_FOREIGN; /* saving would erase its family's name */
        }
        bn->store_node_id = n->id;
        kiln_store_verdict *rc = &rp->cands[cand_of[i]];
        bn->candidate_id = rc->candidate_id;
        bn->agent = -1;
        rp->node_bb[i] = b;
        if (n->draft > max_draft)
            max_draft = n->draft;
        if (n->draft > 0 && n->draft <= KILN_BB_MAX_DRAFTS && parent_bb == root &&
            P->draft_root_of[n->draft] < 0)
            P->draft_root_of[n->draft] = b;
    }

    int requeued = 0;
    int64_t inc_result = 0;
    P->made = rp->n_cands;
    for (int k = 0; k < rp->n_cands; k++) {
        kiln_store_verdict *rc = &rp->cands[k];
        int i = find_node(rp, rc->node_id);
        int b = i >= 0 ? rp->node_bb[i] : -1;
        kiln_bb_dedupe_insert(bb, pi, cand_hash(rc), b, rc->candidate_id, NULL);
        if (rc->source_hash != cand_hash(rc))
            kiln_bb_dedupe_insert(bb, pi, rc->source_hash, b, rc->candidate_id, NULL);
        if (rc->draft > max_draft)
            max_draft = rc->draft;
        if (rc->result_id > 0) {
            P->done++;
            P->ok += rc->ok;
            if (b >= 0) {
                kiln_bb_node *bn = kiln_bb_node_at(bb, b);
                double r = kiln_mcts_reward(rc->ok, rc->time_us, rc->score_known ? rc->score : -1,
                                            best_seen);
                bn->reward = r;
                bn->time_us = rc->ok ? rc->time_us : -1;
                bn->status = rc->ok ? KILN_BB_NODE_DONE : KILN_BB_NODE_FAILED;
                kiln_mcts_backup_plain(bb, b, r);
            }
            if (rc->candidate_id == rp->incumbent_id)
                inc_result = rc->result_id;
        } else if (b >= 0) {
            kiln_mcts_virtual_loss(bb, b, +1);
            if (kiln_bb_queue_push(bb, pi, b, rc->candidate_id) >= 0) {
                P->pending++;
                requeued++;
                /* the file the gate reads, in case it was lost with the run */
                char *path = kiln_opt_candidate_path(c, rc->candidate_id);
                if (access(path, R_OK) != 0)
                    kiln_opt_candidate_file_restore(s, rc->candidate_id, path);
                free(path);
            }
        } else {
            /* a candidate without a result whose node is not in the tree: counted, not run */
            P->done++;
        }
    }

    /* the incumbent: the store's choice; else (a run killed between a first result and its
     * record) the fastest ok candidate */
    int inc = -1;
    for (int k = 0; k < rp->n_cands && inc < 0; k++)
        if (rp->cands[k].candidate_id == rp->incumbent_id && rp->cands[k].ok)
            inc = k;
    if (inc < 0)
        for (int k = 0; k < rp->n_cands; k++)
            if (rp->cands[k].ok && rp->cands[k].time_us > 0 &&
                (inc < 0 || rp->cands[k].time_us < rp->cands[inc].time_us))
                inc = k;
    if (inc >= 0) {
        kiln_store_verdict *rc = &rp->cands[inc];
        int i = find_node(rp, rc->node_id);
        int b = i >= 0 ? rp->node_bb[i] : -1;
        if (b >= 0) {
            P->incumbent_node = b;
            P->incumbent_candidate = rc->candidate_id;
            P->best_time_us = rc->time_us;
            P->best_score = rc->score_known ? rc->score : -1;
            P->best_sol_pct = rc->sol_pct;
            if (!inc_result)
                inc_result = rc->result_id;
        }
    }
    for (int k = 0; k < rp->n_cands; k++)
        if (rp->cands[k].result_id > 0 && rp->cands[k].result_id > inc_result)
            P->since_improve++;

    /* drafts: "draft.<problem>.<k>" = "open <slice>" | "closed" | "promoted" */
    P->draft_count = max_draft;
    for (int k = 1; k <= max_draft && k <= KILN_BB_MAX_DRAFTS; k++) {
        char key[64];
        snprintf(key, sizeof key, "draft.%lld.%d", (long long)pr->store_id, k);
        char *v = kiln_store_meta_get(s, key);
        int promoted = inc >= 0 && rp->cands[inc].draft == k;
        if (v && strncmp(v, "open", 4) == 0 && k == max_draft && !promoted) {
            P->draft_state = KILN_BB_DRAFT_ACTIVE;
            P->draft_slice = atoi(v + 4);
            P->draft_root = P->draft_root_of[k];
            P->draft_fate[k] = KILN_BB_FATE_OPEN;
            for (int j = 0; j < rp->n_cands; j++)
                if (rp->cands[j].draft == k) {
                    P->draft_made++;
                    P->draft_pending += !rp->cands[j].result_id;
                }
            if (P->draft_slice < 1)
                P->draft_slice = P->draft_made;
        } else {
            P->draft_fate[k] = (promoted || (v && strcmp(v, "promoted") == 0))
                                   ? KILN_BB_FATE_PROMOTED
                                   : KILN_BB_FATE_CLOSED;
        }
        free(v);
    }
    char key[64];
    snprintf(key, sizeof key, "fusion_noted.%lld", (long long)pr->store_id);
    char *fv = kiln_store_meta_get(s, key);
    P->fusion_noted = fv != NULL;
    free(fv);
    free(cand_of);
    kiln_bb_touch(bb, pi);
    return requeued;
}
