/* cmd_submit.c: `kiln submit RUN PROBLEM KERNEL_FILE`: a person or any outside agent hands in a
 * kernel; it goes through the same gate as the search's candidates, lands in the run's tree as a
 * child of the problem's root (agent "submitted"), and becomes the incumbent if it is right and
 * faster. The --json result is the outside agent's feedback (docs/agents.md). */
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../backend/cuda_driver.h"
#include "../backend/nvrtc.h"
#include "cli.h"
#include "options.h"
#include "submit.h"

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
    sqlite3_stmt *st = NULL;
    int64_t id = 0;
    if (dir)
        *dir = NULL;
    if (sqlite3_prepare_v2(kiln_store_db(s), "SELECT id, dir FROM problem WHERE name = ?1", -1, &st,
                           NULL) != SQLITE_OK)
        return 0;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) {
        id = sqlite3_column_int64(st, 0);
        const unsigned char *d = sqlite3_column_text(st, 1);
        if (dir && d)
            *dir = xstrdup((const char *)d);
    }
    sqlite3_finalize(st);
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
    char *sdir = NULL;
    r->problem_id = store_problem(r->store, r->p->name, &sdir);
    free(sdir);
    if (!r->problem_id) {
        kiln_store_problem sp = {0};
        sp.name = r->p->name;
        sp.dir = dir;
        sp.share = sp.eager_us = sp.compile_us = sp.sol_us = -1;
        if (kiln_store_problem_upsert(r->store, &sp, &r->problem_id, err) != KILN_OK) {
            status = 1;
            goto fail;
        }
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
        sqlite3_stmt *st = NULL;
        if (n && sqlite3_prepare_v2(kiln_store_db(r->store),
                                    "UPDATE problem SET eager_us = ?2 WHERE id = ?1 AND eager_us "
                                    "IS NULL",
                                    -1, &st, NULL) == SQLITE_OK) {
            sqlite3_bind_int64(st, 1, r->problem_id);
            sqlite3_bind_double(st, 2, exp(lg / n));
            sqlite3_step(st);
            sqlite3_finalize(st);
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

static int64_t query_id(kiln_store *s, const char *sql, int64_t a, const char *text) {
    sqlite3_stmt *st = NULL;
    int64_t id = 0;
    if (sqlite3_prepare_v2(kiln_store_db(s), sql, -1, &st, NULL) != SQLITE_OK)
        return 0;
    sqlite3_bind_int64(st, 1, a);
    if (text)
        sqlite3_bind_text(st, 2, text, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW)
        id = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return id;
}

int64_t kiln_submit_incumbent(kiln_submit_run *r, double *time_us) {
    sqlite3 *db = kiln_store_db(r->store);
    sqlite3_stmt *st = NULL;
    int64_t id = 0;
    *time_us = -1;
    /* the store's winner rule (docs/store.md, "The winner of a problem") */
    if (sqlite3_prepare_v2(
            db,
            "SELECT c.id, r.time_us FROM candidate c JOIN result r ON r.id = (SELECT max(id) FROM "
            "result x WHERE x.candidate_id = c.id) WHERE c.problem_id = ?1 AND r.outcome = 'ok' "
            "AND r.time_us IS NOT NULL ORDER BY c.id = (SELECT incumbent_id FROM problem WHERE "
            "id = ?1) DESC, r.time_us, c.id LIMIT 1",
            -1, &st, NULL) != SQLITE_OK)
        return 0;
    sqlite3_bind_int64(st, 1, r->problem_id);
    if (sqlite3_step(st) == SQLITE_ROW) {
        id = sqlite3_column_int64(st, 0);
        *time_us = sqlite3_column_double(st, 1);
    }
    sqlite3_finalize(st);
    return id;
}

/* The tree node a child of parent_candidate goes under: the parent's node, else the main root
 * (created the way kiln optimize creates it when the problem has none yet). */
static int64_t parent_node(kiln_submit_run *r, int64_t parent_candidate, kiln_err *err) {
    int64_t node = 0;
    if (parent_candidate > 0)
        node = query_id(r->store,
                        "SELECT n.id FROM candidate c JOIN node n ON n.id = c.node_id WHERE c.id = "
                        "?1",
                        parent_candidate, NULL);
    if (node)
        return node;
    node = query_id(r->store,
                    "SELECT id FROM node WHERE problem_id = ?1 AND parent_id IS NULL AND family "
                    "IS NULL AND draft = 0 ORDER BY id LIMIT 1",
                    r->problem_id, NULL);
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

/* The latest verdict of a candidate as a JSON object, or NULL. */
static cJSON *latest_result(kiln_store *s, int64_t candidate_id) {
    sqlite3_stmt *st = NULL;
    cJSON *j = NULL;
    if (sqlite3_prepare_v2(kiln_store_db(s),
                           "SELECT result_json, outcome FROM result WHERE candidate_id = ?1 ORDER "
                           "BY id DESC LIMIT 1",
                           -1, &st, NULL) != SQLITE_OK)
        return NULL;
    sqlite3_bind_int64(st, 1, candidate_id);
    if (sqlite3_step(st) == SQLITE_ROW) {
        const unsigned char *t = sqlite3_column_text(st, 0);
        j = t ? cJSON_Parse((const char *)t) : NULL;
        if (!j) {
            j = cJSON_CreateObject();
            const unsigned char *o = sqlite3_column_text(st, 1);
            cJSON_AddStringToObject(j, "outcome", o ? (const char *)o : "unknown");
        }
    }
    sqlite3_finalize(st);
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
    if (r->cuda) {
        char *cubin = NULL, *log = NULL;
        size_t len = 0;
        kiln_err cerr;
        binary_hash = 0;
        int crc = kiln_cuda_compile_apart(source, NULL, &cubin, &len, &log, &cerr);
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
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)binary_hash);
        int64_t dup = query_id(
            r->store, "SELECT id FROM candidate WHERE problem_id = ?1 AND binary_hash = ?2",
            r->problem_id, hex);
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

    /* record: node, candidate, its file, the verdict */
    int status = 1;
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
    double t_us, spread, sol, score;
    kiln_store_result_columns(json, &t_us, &spread, &sol, &score);
    int rrc = kiln_store_result_insert(r->store, id, outcome, json, t_us, spread, sol, score, err);
    free(json);
    if (rrc != KILN_OK)
        goto done;
    int ok = strcmp(outcome, "ok") == 0;
    sn.candidate_id = id;
    sn.visits = 1;
    sn.value_sum = sn.best = ok && score > 0 ? score : 0;
    sn.status = ok ? "done" : "failed";
    kiln_store_node_update(r->store, &sn, NULL);

    /* the incumbent: right, and faster than the one there is */
    double prev_t = -1;
    int64_t prev = 0;
    {
        /* the incumbent as it was before this candidate */
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(kiln_store_db(r->store),
                               "SELECT c.id, r.time_us FROM candidate c JOIN result r ON r.id = "
                               "(SELECT max(id) FROM result x WHERE x.candidate_id = c.id) WHERE "
                               "c.problem_id = ?1 AND c.id <> ?2 AND r.outcome = 'ok' AND "
                               "r.time_us IS NOT NULL ORDER BY c.id = (SELECT incumbent_id FROM "
                               "problem WHERE id = ?1) DESC, r.time_us, c.id LIMIT 1",
                               -1, &st, NULL) == SQLITE_OK) {
            sqlite3_bind_int64(st, 1, r->problem_id);
            sqlite3_bind_int64(st, 2, id);
            if (sqlite3_step(st) == SQLITE_ROW) {
                prev = sqlite3_column_int64(st, 0);
                prev_t = sqlite3_column_double(st, 1);
            }
            sqlite3_finalize(st);
        }
    }
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

/* ---------------------------------------------------------------------------------------------
 * The command.
 * --------------------------------------------------------------------------------------------- */

static const kiln_cli_use submit_options[] = {
    {KILN_OPT_JSON,
     "print the gate's result (docs/gate.md) plus candidate_id and incumbent as one "
     "JSON object",
     NULL},
    {KILN_OPT_BACKEND, NULL, "RUN's, else cuda when a GPU is visible, else cpu"},
    {KILN_OPT_ITERS, NULL, NULL},
    {KILN_OPT_SETS, NULL, NULL},
    {KILN_OPT_TIMEOUT, NULL, NULL},
    {KILN_OPT_REF_DIR, NULL, NULL},
};

static const kiln_cli_command submit_command = {
    .name = "submit",
    .usage = "RUN PROBLEM KERNEL_FILE [options]",
    .about = "Hands in a kernel written to the candidate ABI (docs/abi.md) for one problem of RUN. "
             "It goes through the gate (proof on every workload, then timing), is recorded in "
             "RUN/kiln.db as a child of the problem's root (agent \"submitted\"), and becomes the "
             "problem's incumbent when it is right and faster than the incumbent. PROBLEM is a "
             "problem name (RUN/problems/NAME, or a problem RUN's store knows) or a problem "
             "directory. Not while kiln optimize runs on RUN (it holds RUN/kiln.lock); "
             "docs/agents.md describes the JSON for agent authors.",
    .use = submit_options,
    .n_use = KILN_CLI_N(submit_options),
    .exit_status = "0  a verdict, whatever the outcome (read it from the output)\n"
                   "1  the store failed\n"
                   "2  bad usage or input: no such file or problem, RUN in use, no reference data",
    .example = "kiln submit runs/mlp softmax_f32 my_softmax.cu --json",
};

static void print_outcome(const kiln_submit_run *r, const kiln_submit_outcome *o) {
    const cJSON *res = o->result;
    const char *outcome = json_str(res, "outcome");
    printf("%s: candidate %lld%s: %s", r->p->name, (long long)o->candidate_id,
           o->duplicate ? " (the same kernel was submitted before)" : "", outcome ? outcome : "?");
    const cJSON *sum = cJSON_GetObjectItemCaseSensitive(res, "summary");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(sum, "time_us_geomean");
    const cJSON *sol = cJSON_GetObjectItemCaseSensitive(sum, "sol_pct_geomean");
    if (cJSON_IsNumber(t))
        printf(", %.3f us", t->valuedouble);
    if (cJSON_IsNumber(sol))
        printf(", %.1f%% of the speed of light", sol->valuedouble);
    printf("\n");
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(res, "evidence");
    if (outcome && strcmp(outcome, "ok") != 0 && cJSON_IsObject(ev)) {
        char *e = cJSON_Print(ev);
        printf("evidence: %s\n", e);
        free(e);
    }
    if (o->incumbent && !o->duplicate)
        printf("it is the incumbent now%s\n",
               o->previous_incumbent ? "" : " (the first correct one)");
    else if (o->incumbent)
        printf("it is the incumbent\n");
    else if (o->previous_incumbent)
        printf("the incumbent stays candidate %lld (%.3f us)\n", (long long)o->previous_incumbent,
               o->previous_time_us);
}

int kiln_cmd_submit(int argc, char **argv) {
    kiln_gate_options gate;
    kiln_gate_options_default(&gate);
    kiln_cli_args a;
    kiln_cli_args_init(&a);
    a.gate = &gate;
    int first = 0;
    int rc = kiln_cli_parse(&submit_command, argc, argv, &a, &first);
    if (rc != KILN_CLI_CONTINUE)
        return rc;
    const char *backend = a.cli.backend, *ref_dir = a.cli.ref_dir;
    int json = a.cli.json;
    if (argc - first != 3)
        return kiln_cli_usage_error(&submit_command, "expected RUN PROBLEM KERNEL_FILE");
    const char *run_dir = argv[first], *problem = argv[first + 1], *kernel = argv[first + 2];
    char *source = NULL;
    kiln_err err;
    if (kiln_read_file(kernel, &source, NULL, &err) != KILN_OK) {
        fprintf(stderr, "kiln submit: %s: cannot read the kernel file\n", kernel);
        return 2;
    }
    if (strlen(source) == 0) {
        fprintf(stderr, "kiln submit: %s: the kernel file is empty\n", kernel);
        free(source);
        return 2;
    }
    kiln_submit_run r;
    int status = kiln_submit_open(run_dir, problem, backend, ref_dir, &gate, json, &r, &err);
    if (status) {
        fprintf(stderr, "kiln submit: %s\n", err.msg);
        free(source);
        return status;
    }
    kiln_submit_outcome o;
    status = kiln_submit_source(&r, "submitted", 0, source, &o, &err);
    if (status) {
        fprintf(stderr, "kiln submit: %s\n", err.msg);
    } else if (json) {
        cJSON *res = o.result;
        cJSON_AddNumberToObject(res, "candidate_id", (double)o.candidate_id);
        cJSON_AddBoolToObject(res, "incumbent", o.incumbent);
        cJSON_AddBoolToObject(res, "duplicate", o.duplicate);
        cJSON_AddNumberToObject(res, "problem_id", (double)r.problem_id);
        cJSON_AddStringToObject(res, "run", r.run_dir);
        if (o.previous_incumbent && !(o.incumbent && o.duplicate)) {
            cJSON *pi = cJSON_AddObjectToObject(res, "previous_incumbent");
            cJSON_AddNumberToObject(pi, "candidate_id", (double)o.previous_incumbent);
            cJSON_AddNumberToObject(pi, "time_us", o.previous_time_us);
        } else {
            cJSON_AddNullToObject(res, "previous_incumbent");
        }
        char *s = cJSON_Print(res);
        printf("%s\n", s);
        free(s);
    } else {
        print_outcome(&r, &o);
    }
    cJSON_Delete(o.result);
    kiln_submit_close(&r);
    free(source);
    return status;
}
