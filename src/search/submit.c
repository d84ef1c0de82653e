/* submit.c: the submit service: a kernel from outside the search (a person's, any outside agent's,
 * the llm agent's in `kiln llm-try`) goes through the same gate as the search's candidates, lands
 * in the run's tree as a child of the problem's root or of a given candidate, and becomes the
 * incumbent if it is right and faster than the problem's winner (the store's rule). */
#include "submit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../backend/cuda_driver.h"
#include "../backend/nvrtc.h"
#include "../formats/content_hash.h"
#include "../gen/family.h"

/* ---------------------------------------------------------------------------------------------
 * Opening a run for one problem.
 * --------------------------------------------------------------------------------------------- */

static char *abs_path(const char *p) {
    char buf[4096];
    return realpath(p, buf) ? xstrdup(buf) : xstrdup(p);
}

static int has_definition(const char *dir) {
    char *def = kiln_path_join(dir, "definition.json");
    int yes = access(def, R_OK) == 0;
    free(def);
    return yes;
}

/* A problem directory for PROBLEM from the filesystem: PROBLEM itself, or RUN/problems/PROBLEM. */
static char *problem_dir_on_disk(const char *run_dir, const char *problem) {
    if (has_definition(problem))
        return abs_path(problem);
    if (strchr(problem, '/') == NULL && problem[0] != '.') {
        char *pdir = kiln_path_join(run_dir, "problems");
        char *dir = kiln_path_join(pdir, problem);
        free(pdir);
        if (has_definition(dir)) {
            char *a = abs_path(dir);
            free(dir);
            return a;
        }
        free(dir);
    }
    return NULL;
}

/* The id and directory the store has for a problem name; 0 when none. */
static int64_t store_problem(kiln_store *s, const char *name, char **dir) {
    kiln_store_problem_row p;
    int found = 0;
    int64_t id = 0;
    if (dir)
        *dir = NULL;
    if (kiln_store_problem_find(s, name, &p, &found, NULL) == KILN_OK && found) {
        id = p.id;
        if (dir) {
            *dir = p.dir;
            p.dir = NULL;
        }
    }
    kiln_store_problem_row_free(&p);
    return id;
}

int kiln_submit_open(const char *run_dir, const char *problem, const char *backend,
                     const char *ref_dir, const kiln_gate_options *gate, int quiet,
                     kiln_submit_run *r, kiln_err *err) {
    memset(r, 0, sizeof *r);
    r->quiet = quiet;
    int status = 2;
    char *dir = problem_dir_on_disk(run_dir, problem);
    char *db_path = kiln_path_join(run_dir, "kiln.db");
    int have_store = access(db_path, F_OK) == 0;
    free(db_path);
    if (!dir && !have_store) {
        kiln_errf(err, KILN_ERR_INVALID,
                  "unknown problem '%s': not a problem directory (no definition.json there), and "
                  "%s/problems/%s does not exist",
                  problem, run_dir, problem);
        return 2;
    }
    r->run_dir = abs_path(run_dir);
    if (kiln_store_lock(r->run_dir, err) != KILN_OK) {
        size_t n = strlen(err->msg);
        snprintf(err->msg + n, sizeof err->msg - n,
                 "; submit when it has finished (kiln optimize resumes with the submitted "
                 "candidates in the store)");
        goto fail;
    }
    if (kiln_store_open(r->run_dir, 0, &r->store, err) != KILN_OK)
        goto fail;
    if (!dir) {
        char *sdir = NULL;
        if (store_problem(r->store, problem, &sdir) && sdir && has_definition(sdir))
            dir = sdir;
        else
            free(sdir);
    }
    if (!dir) {
        kiln_errf(err, KILN_ERR_INVALID,
                  "unknown problem '%s': not a problem directory (no definition.json there), not "
                  "in %s/problems, not in %s",
                  problem, r->run_dir, kiln_store_path(r->store));
        goto fail;
    }

    /* the backend: the run's, or the one asked for if the run has none yet */
    char *was = kiln_store_meta_get(r->store, KILN_META_BACKEND);
    if (backend && was && strcmp(backend, was) != 0) {
        kiln_errf(err, KILN_ERR_INVALID,
                  "%s holds candidates of --backend %s; submit with --backend %s, or use another "
                  "RUN for %s",
                  r->run_dir, was, was, backend);
        free(was);
        goto fail;
    }
    r->backend = xstrdup(backend ? backend : was ? was : kiln_backend_default());
    free(was);
    if (!kiln_backend_find(r->backend)) {
        kiln_errf(err, KILN_ERR_INVALID, "unknown backend '%s' (use cuda or cpu)", r->backend);
        goto fail;
    }
    r->cuda = strcmp(r->backend, "cuda") == 0;
    if (r->cuda && !kiln_cuda_driver_present()) {
        kiln_errf(err, KILN_ERR_NO_DEVICE,
                  "no NVIDIA driver here (libcuda.so.1 not found): the cuda backend needs a GPU; "
                  "use --backend cpu");
        goto fail;
    }
    if (gate)
        r->gate = *gate;
    else
        kiln_gate_options_default(&r->gate);
    r->gate.backend = r->backend;

    if (kiln_problem_load(dir, &r->p, err) != KILN_OK)
        goto fail;
    kiln_family_sol_fill(r->p);
    /* an upsert even when the row exists: the store refuses a result for another content */
    char *sdir = NULL;
    store_problem(r->store, r->p->name, &sdir);
    kiln_store_problem sp = {0};
    sp.name = r->p->name;
    sp.dir = sdir ? sdir : dir;
    sp.share = sp.eager_us = sp.compile_us = sp.sol_us = -1;
    char hash[KILN_CONTENT_HASH_LEN];
    if (kiln_content_hash_dir(dir, hash, err) != KILN_OK) {
        free(sdir);
        goto fail;
    }
    sp.content_hash = hash;
    int up = kiln_store_problem_upsert(r->store, &sp, &r->problem_id, err);
    free(sdir);
    if (up != KILN_OK) {
        status = 1;
        goto fail;
    }
    if (kiln_refs_ensure(r->p, r->cuda ? "cuda" : "cpu", ref_dir, 1, &r->ref, err) != KILN_OK)
        goto fail;
    /* the eager time, so that the dashboard and the llm prompt know it */
    {
        double lg = 0;
        int n = 0;
        for (int w = 0; w < r->ref->n_workloads; w++)
            if (r->ref->workloads[w].ref_time_us > 0) {
                lg += log(r->ref->workloads[w].ref_time_us);
                n++;
            }
        if (n && kiln_store_problem_eager_default(r->store, r->problem_id, exp(lg / n), err)) {
            status = 1;
            goto fail;
        }
    }
    if (kiln_store_meta_set(r->store, KILN_META_BACKEND, r->backend, err) != KILN_OK) {
        status = 1;
        goto fail;
    }
    char *cand_dir = kiln_path_join(r->run_dir, "candidates");
    int mk = kiln_mkdirs(cand_dir, err);
    free(cand_dir);
    if (mk) {
        status = 1;
        goto fail;
    }
    free(dir);
    return 0;
fail:
    free(dir);
    kiln_submit_close(r);
    return status;
}

void kiln_submit_close(kiln_submit_run *r) {
    if (r->store) {
        kiln_store_close(r->store);
        kiln_store_unlock();
    } else if (r->run_dir) {
        kiln_store_unlock();
    }
    kiln_refdata_free(r->ref);
    kiln_problem_free(r->p);
    free(r->run_dir);
    free(r->backend);
    memset(r, 0, sizeof *r);
}

/* ---------------------------------------------------------------------------------------------
 * Recording a kernel.
 * --------------------------------------------------------------------------------------------- */

int64_t kiln_submit_incumbent(kiln_submit_run *r, double *time_us) {
    kiln_store_winner w;
    *time_us = -1;
    if (kiln_store_winner_get(r->store, r->problem_id, &w, NULL) != KILN_OK || !w.candidate_id)
        return 0;
    *time_us = w.time_us;
    return w.candidate_id;
}

/* The tree node a child of parent_candidate goes under: the parent's node, else the main root
 * (created the way kiln optimize creates it when the problem has none yet). -1 when the store
 * failed (err says why). */
static int64_t parent_node(kiln_submit_run *r, int64_t parent_candidate, kiln_err *err) {
    int64_t node = 0;
    if (parent_candidate > 0 && kiln_store_candidate_node(r->store, parent_candidate, &node, err))
        return -1;
    if (node)
        return node;
    if (kiln_store_node_root(r->store, r->problem_id, &node, err))
        return -1;
    if (node)
        return node;
    kiln_store_node root = {0};
    root.problem_id = r->problem_id;
    root.params = "";
    root.status = "open";
    if (kiln_store_node_insert(r->store, &root, err) != KILN_OK)
        return -1;
    return root.id;
}

/* The latest verdict of a candidate as a JSON object, or NULL when it has none. */
static cJSON *latest_result(kiln_store *s, int64_t candidate_id) {
    kiln_store_result_row row;
    int found = 0;
    cJSON *j = NULL;
    if (kiln_store_result_latest(s, candidate_id, &row, &found, NULL) == KILN_OK && found) {
        j = row.result_json ? cJSON_Parse(row.result_json) : NULL;
        if (!j) {
            j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "outcome", row.outcome[0] ? row.outcome : "unknown");
        }
    }
    kiln_store_result_row_free(&row);
    return j;
}

static const char *json_str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

int kiln_submit_source(kiln_submit_run *r, const char *agent, int64_t parent_candidate,
                       const char *source, kiln_submit_outcome *out, kiln_err *err) {
    memset(out, 0, sizeof *out);
    out->previous_time_us = -1;
    uint64_t source_hash = kiln_fnv1a(KILN_FNV_INIT, source, strlen(source));
    uint64_t binary_hash = source_hash; /* cpu: the source is the binary's identity (as search's) */
    char *nvrtc_log = NULL;
    /* a library call (`// kiln: library`) has no cubin: its text is what it runs */
    if (r->cuda && !kiln_abi_is_library(source)) {
        char *cubin = NULL, *log = NULL;
        size_t len = 0;
        kiln_err cerr;
        binary_hash = 0;
        int crc =
            kiln_cuda_compile_apart(source, getenv("KILN_CUDA_ARCH"), &cubin, &len, &log, &cerr);
        if (crc == KILN_OK) {
            binary_hash = kiln_fnv1a(KILN_FNV_INIT, cubin, len);
            if (!binary_hash)
                binary_hash = 1;
        } else if (crc == KILN_ERR_COMPILE) {
            nvrtc_log = log && log[0] ? log : xstrdup(cerr.msg);
            if (nvrtc_log != log)
                free(log);
            log = NULL;
        }
        free(cubin);
        free(log);
    }

    /* the same binary again: its verdict stands */
    if (binary_hash) {
        int64_t dup = 0;
        if (kiln_store_candidate_by_binary(r->store, r->problem_id, binary_hash, &dup, err)) {
            free(nvrtc_log);
            return 1;
        }
        if (dup) {
            out->duplicate = 1;
            out->candidate_id = dup;
            out->result = latest_result(r->store, dup);
            if (!out->result) {
                out->result = cJSON_CreateObject();
                cJSON_AddStringToObject(out->result, "outcome", "waiting");
            }
            double t;
            int64_t inc = kiln_submit_incumbent(r, &t);
            out->incumbent = inc == dup;
            out->previous_incumbent = inc;
            out->previous_time_us = t;
            free(nvrtc_log);
            return 0;
        }
    }

    /* prove and time it */
    char *tmp =
        xasprintf("%s/candidates/.submit-%d.%s", r->run_dir, (int)getpid(), r->cuda ? "cu" : "c");
    if (kiln_write_file(tmp, source, strlen(source), err) != KILN_OK) {
        free(tmp);
        free(nvrtc_log);
        return 1;
    }
    if (!r->quiet)
        fprintf(stderr, "kiln: %s: gating the %s kernel on %s ...\n", r->p->name, agent,
                r->backend);
    cJSON *res = kiln_gate_eval(r->p, r->ref, tmp, &r->gate);
    const char *gerr = json_str(res, "error");
    const char *outcome = json_str(res, "outcome");
    if (gerr || !outcome) {
        kiln_errf(err, KILN_ERR_BACKEND, "the gate gave no verdict: %s",
                  gerr ? gerr : "no outcome in its result");
        unlink(tmp);
        free(tmp);
        cJSON_Delete(res);
        free(nvrtc_log);
        return 2;
    }
    const char *log = json_str(cJSON_GetObjectItemCaseSensitive(res, "evidence"), "log");

    /* the incumbent as it is before this candidate, then the record: node, candidate, its file, the
     * verdict */
    int status = 1;
    kiln_store_winner before;
    if (kiln_store_winner_get(r->store, r->problem_id, &before, err))
        goto done;
    double prev_t = before.candidate_id ? before.time_us : -1;
    int64_t prev = before.candidate_id;
    int64_t pnode = parent_node(r, parent_candidate, err);
    if (pnode < 0)
        goto done;
    kiln_store_node sn = {0};
    sn.problem_id = r->problem_id;
    sn.parent_id = pnode;
    sn.params = "";
    sn.status = "pending";
    if (kiln_store_node_insert(r->store, &sn, err) != KILN_OK)
        goto done;
    kiln_store_candidate c = {0};
    c.problem_id = r->problem_id;
    c.parent_id = parent_candidate;
    c.node_id = sn.id;
    c.agent = agent;
    c.family = NULL;
    c.params = "";
    c.source = source;
    c.source_hash = source_hash;
    c.binary_hash = binary_hash;
    c.compile_log = nvrtc_log ? nvrtc_log : (strcmp(outcome, "compile_error") == 0 ? log : NULL);
    int64_t id = 0;
    if (kiln_store_candidate_insert(r->store, &c, &id, err) != KILN_OK)
        goto done;
    out->candidate_id = id;
    char *path =
        xasprintf("%s/candidates/%lld.%s", r->run_dir, (long long)id, r->cuda ? "cu" : "c");
    if (rename(tmp, path) == 0)
        cJSON_ReplaceItemInObjectCaseSensitive(res, "kernel", cJSON_CreateString(path));
    free(path);
    char *json = cJSON_PrintUnformatted(res);
    kiln_store_summary sum;
    kiln_store_summary_read(res, &sum);
    double t_us = sum.time_us, score = sum.score;
    int rrc = kiln_store_result_insert(r->store, id, outcome, json, t_us, sum.spread_pct,
                                       sum.sol_pct, score, err);
    free(json);
    if (rrc != KILN_OK)
        goto done;
    int ok = strcmp(outcome, "ok") == 0;
    sn.candidate_id = id;
    sn.visits = 1;
    sn.value_sum = sn.best = ok && score > 0 ? score : 0;
    sn.status = ok ? "done" : "failed";
    kiln_store_node_update(r->store, &sn, NULL);

    /* the incumbent: right, and faster than the one there was */
    out->previous_incumbent = prev;
    out->previous_time_us = prev_t;
    if (ok && t_us > 0 && (!prev || t_us < prev_t)) {
        if (kiln_store_incumbent_set(r->store, r->problem_id, id, err) != KILN_OK)
            goto done;
        out->incumbent = 1;
        char *msg = prev ? xasprintf("candidate %lld (%s) is the incumbent: %.3f us, faster than "
                                     "candidate %lld at %.3f us",
                                     (long long)id, agent, t_us, (long long)prev, prev_t)
                         : xasprintf("candidate %lld (%s) is the incumbent: %.3f us, the first "
                                     "correct kernel",
                                     (long long)id, agent, t_us);
        kiln_store_event(r->store, r->problem_id, "incumbent", msg, NULL);
        free(msg);
    }
    if (strcmp(agent, "submitted") == 0) {
        char *msg = ok ? xasprintf("candidate %lld submitted: ok, %.3f us", (long long)id, t_us)
                       : xasprintf("candidate %lld submitted: %s", (long long)id, outcome);
        kiln_store_event(r->store, r->problem_id, "submitted", msg, NULL);
        free(msg);
    }
    status = 0;
done:
    unlink(tmp);
    free(tmp);
    free(nvrtc_log);
    if (status == 0)
        out->result = res;
    else
        cJSON_Delete(res);
    return status;
}
