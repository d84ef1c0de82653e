/* cmd_sweep.c: `kiln sweep PROBLEM_DIR`: enumerates the whole valid space of every family that
 * matches a problem (or a documented sample of it), proves and times each point through the gate,
 * and prints the table best last: how a family is measured on its own (kiln optimize searches the
 * same families). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../backend/nvrtc.h"
#include "../gate/gate.h"
#include "../gen/family.h"
#include "cli.h"
#include "options.h"

static const kiln_cli_use sweep_options[] = {
    {KILN_OPT_FAMILY, NULL, NULL},
    {KILN_OPT_BACKEND, NULL, "cuda when an NVIDIA driver is present, else cpu"},
    {KILN_OPT_LIMIT, NULL, NULL},
    {KILN_OPT_SAMPLE, NULL, NULL},
    {KILN_OPT_SEED, "the seed of --sample random's draw", NULL},
    {KILN_OPT_WHERE, NULL, NULL},
    {KILN_OPT_OUT, NULL, NULL},
    {KILN_OPT_ITERS, NULL, NULL},
    {KILN_OPT_SETS, NULL, NULL},
    {KILN_OPT_TIMEOUT, NULL, NULL},
    {KILN_OPT_REF_DIR, NULL, NULL},
    {KILN_OPT_JSON, "print one JSON object with every row (with --list: every matching family)",
     NULL},
    {KILN_OPT_JSONL, NULL, NULL},
    {KILN_OPT_RESUME, NULL, NULL},
    {KILN_OPT_LIST, NULL, NULL},
};

static const kiln_cli_command sweep_command = {
    .name = "sweep",
    .usage = "PROBLEM_DIR [options]",
    .about = "Runs every point of the kernel families that match the problem (or --limit of them) "
             "through the gate, proof then timing, and prints params, outcome, time, GB/s and SOL "
             "%, best last. It is how a family is measured on its own; kiln optimize searches the "
             "same families.",
    .use = sweep_options,
    .n_use = KILN_CLI_N(sweep_options),
    .exit_status = "0  every point has a verdict, whatever the outcomes (or --list printed)\n"
                   "2  bad usage, no family matches, or the sweep could not run (its sources "
                   "could not be written, no reference data)",
    .example = "kiln sweep tests/data/problems/softmax_f32 --backend cpu --limit 4",
};

typedef struct {
    char *params;
    char *file;
    char *outcome;
    double time_us, gbps, sol_pct, score;
    char *detail;
} sweep_row;

static int row_cmp(const void *a, const void *b) {
    const sweep_row *x = a, *y = b;
    /* failures first, then slowest first: the best row is printed last */
    int fx = isnan(x->time_us), fy = isnan(y->time_us);
    if (fx != fy)
        return fx ? -1 : 1;
    if (fx)
        return 0;
    return x->time_us > y->time_us ? -1 : x->time_us < y->time_us;
}

static double json_num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* Geomean over the workloads of the median time and of GB/s, SOL % and S. */
static void summarise_result(const cJSON *r, sweep_row *row) {
    const cJSON *sum = cJSON_GetObjectItemCaseSensitive(r, "summary");
    row->time_us = json_num(sum, "time_us_geomean");
    row->sol_pct = json_num(sum, "sol_pct_geomean");
    row->score = json_num(sum, "sol_score_geomean");
    double lg = 0;
    int n = 0;
    const cJSON *w;
    cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(r, "workloads")) {
        double g = json_num(w, "gbps");
        if (g > 0) {
            lg += log(g);
            n++;
        }
    }
    row->gbps = n ? exp(lg / n) : NAN;
}

static char *evidence_line(const cJSON *r) {
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(r, "evidence");
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(ev, "message");
    if (cJSON_IsString(msg))
        return xstrndup(msg->valuestring, 160);
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(ev, "error");
    if (cJSON_IsString(err))
        return xstrndup(err->valuestring, 160);
    const cJSON *e2 = cJSON_GetObjectItemCaseSensitive(r, "error");
    if (cJSON_IsString(e2))
        return xstrndup(e2->valuestring, 160);
    if (cJSON_IsObject(ev) && cJSON_GetArraySize(ev) > 0) {
        char *s = cJSON_PrintUnformatted(ev);
        char *t = xstrndup(s, 160);
        free(s);
        return t;
    }
    return xstrdup("");
}

typedef struct {
    const kiln_family *family;
    char *params, *file, *source;
    uint64_t hash;
    const cJSON *kept; /* --resume: the result an earlier run of the sweep wrote for this point */
} sweep_job;

/* --resume: the rows of an earlier run in the --jsonl file that carry a verdict (an outcome). */
static cJSON *read_rows(const char *path) {
    cJSON *rows = cJSON_CreateArray();
    char *text = NULL;
    if (kiln_read_file(path, &text, NULL, NULL) != KILN_OK)
        return rows;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *row = cJSON_Parse(line);
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(row, "result");
        if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(row, "family")) &&
            cJSON_IsString(cJSON_GetObjectItemCaseSensitive(row, "params")) &&
            cJSON_IsString(cJSON_GetObjectItemCaseSensitive(r, "outcome")))
            cJSON_AddItemToArray(rows, row);
        else
            cJSON_Delete(row); /* cut mid-line, or no verdict: that point runs again */
    }
    free(text);
    return rows;
}

static const cJSON *find_row(const cJSON *rows, const char *family, const char *params) {
    const cJSON *row;
    cJSON_ArrayForEach(row, rows) {
        if (strcmp(cJSON_GetObjectItemCaseSensitive(row, "family")->valuestring, family) == 0 &&
            strcmp(cJSON_GetObjectItemCaseSensitive(row, "params")->valuestring, params) == 0)
            return row;
    }
    return NULL;
}

/* --list: each matching family with its space, its valid points and where a search starts, as
 * lines or (json) one object {"problem", "families": [{"family", "variant", "space", "valid",
 * "start", "start_from"}]}. */
/* --where: "NAME=V[,V..] ..." as a filter on f's points: for each parameter, the values it may take
 * (allowed[param][value index]). 0, or -1 with why (an unknown name or a value outside the
 * parameter's domain). A family without some named parameter matches no point (*none = 1). */
static int parse_where(const kiln_family *f, const char *where,
                       char allowed[KILN_FAMILY_MAX_PARAMS][KILN_FAMILY_MAX_VALUES], int *none,
                       char *why, size_t cap) {
    memset(allowed, 1, (size_t)KILN_FAMILY_MAX_PARAMS * KILN_FAMILY_MAX_VALUES);
    *none = 0;
    char *copy = xstrdup(where), *save = NULL;
    int rc = 0;
    for (char *tok = strtok_r(copy, " \t", &save); tok && rc == 0;
         tok = strtok_r(NULL, " \t", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq || eq == tok || !eq[1]) {
            snprintf(why, cap, "--where: '%s' is not NAME=V[,V..]", tok);
            rc = -1;
            break;
        }
        *eq = 0;
        int k = 0;
        while (k < f->n_params && strcmp(f->params[k].name, tok) != 0)
            k++;
        if (k == f->n_params) {
            *none = 1;
            continue;
        }
        memset(allowed[k], 0, KILN_FAMILY_MAX_VALUES);
        char *save2 = NULL;
        for (char *v = strtok_r(eq + 1, ",", &save2); v; v = strtok_r(NULL, ",", &save2)) {
            char *end;
            long long value = strtoll(v, &end, 10);
            int found = 0;
            for (int j = 0; j < f->params[k].n_values && *end == 0; j++)
                if (f->params[k].values[j] == value)
                    allowed[k][j] = found = 1;
            if (!found) {
                snprintf(why, cap, "--where: %s has no value '%s' in family %s", tok, v, f->name);
                rc = -1;
                break;
            }
        }
    }
    free(copy);
    return rc;
}

/* Whether point passes parse_where's filter. */
static int where_ok(const kiln_family *f, const int64_t *point,
                    char allowed[KILN_FAMILY_MAX_PARAMS][KILN_FAMILY_MAX_VALUES]) {
    for (int k = 0; k < f->n_params; k++)
        for (int j = 0; j < f->params[k].n_values; j++)
            if (f->params[k].values[j] == point[k] && !allowed[k][j])
                return 0;
    return 1;
}

/* Puts into point, for each parameter whose value --where does not allow, the first value it
 * allows. */
static void twin_into_where(const kiln_family *f, int64_t *point,
                            char allowed[KILN_FAMILY_MAX_PARAMS][KILN_FAMILY_MAX_VALUES]) {
    for (int k = 0; k < f->n_params; k++) {
        int here = 0, first = -1;
        for (int j = 0; j < f->params[k].n_values; j++) {
            here |= f->params[k].values[j] == point[k] && allowed[k][j];
            if (first < 0 && allowed[k][j])
                first = j;
        }
        if (!here && first >= 0)
            point[k] = f->params[k].values[first];
    }
}

/* Orders the indexes v[0..n) by how many parameters differ from point (fewest first), then by
 * their order in v (a counting sort on the distance). */
static void nearest_first(const kiln_family *f, const int64_t *point, int64_t *v, int64_t n) {
    int *d = xmalloc((size_t)(n > 0 ? n : 1) * sizeof *d);
    int64_t *out = xmalloc((size_t)(n > 0 ? n : 1) * sizeof *out);
    int64_t at[KILN_FAMILY_MAX_PARAMS + 2] = {0}, q[KILN_FAMILY_MAX_PARAMS];
    for (int64_t i = 0; i < n; i++) {
        kiln_family_point(f, v[i], q);
        d[i] = 0;
        for (int k = 0; k < f->n_params; k++)
            d[i] += q[k] != point[k];
        at[d[i] + 1]++;
    }
    for (int k = 1; k <= f->n_params + 1; k++)
        at[k] += at[k - 1];
    for (int64_t i = 0; i < n; i++)
        out[at[d[i]]++] = v[i];
    memcpy(v, out, (size_t)n * sizeof *v);
    free(out);
    free(d);
}

static void list_families(const kiln_problem *p, const kiln_family **fams,
                          const kiln_match *matches, int n_match, int json, const char *where) {
    cJSON *all = cJSON_CreateObject();
    cJSON_AddStringToObject(all, "problem", p->name);
    cJSON *jf = cJSON_AddArrayToObject(all, "families");
    for (int i = 0; i < n_match; i++) {
        int64_t n = kiln_family_space_size(fams[i]);
        int64_t point[KILN_FAMILY_MAX_PARAMS], n_valid = 0, n_selected = 0;
        char allowed[KILN_FAMILY_MAX_PARAMS][KILN_FAMILY_MAX_VALUES], why[256];
        int none = 0;
        if (where) /* already checked by the caller */
            parse_where(fams[i], where, allowed, &none, why, sizeof why);
        for (int64_t index = 0; index < n; index++) {
            kiln_family_point(fams[i], index, point);
            const int ok = kiln_family_point_ok(fams[i], p, &matches[i], point);
            n_valid += ok;
            n_selected += ok && where && !none && where_ok(fams[i], point, allowed);
        }
        int from_rule = 0;
        int64_t start = kiln_family_start_index(fams[i], p, &matches[i], n, &from_rule);
        char *ps = NULL;
        if (start >= 0) {
            kiln_family_point(fams[i], start, point);
            ps = kiln_family_point_str(fams[i], point);
        }
        const char *from = from_rule ? "the family's start rule" : "its first valid point";
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "family", fams[i]->name);
        cJSON_AddStringToObject(f, "variant", matches[i].variant);
        cJSON_AddNumberToObject(f, "space", (double)n);
        cJSON_AddNumberToObject(f, "valid", (double)n_valid);
        if (where)
            cJSON_AddNumberToObject(f, "selected", (double)n_selected);
        if (ps) {
            cJSON_AddStringToObject(f, "start", ps);
            cJSON_AddStringToObject(f, "start_from", from_rule ? "rule" : "first_valid");
        } else {
            cJSON_AddNullToObject(f, "start");
            cJSON_AddNullToObject(f, "start_from");
        }
        cJSON_AddItemToArray(jf, f);
        if (!json) {
            printf("kiln sweep: %s matches family %s (%s), space %lld points, %lld valid", p->name,
                   fams[i]->name, matches[i].variant, (long long)n, (long long)n_valid);
            if (where)
                printf(", %lld of them selected by --where", (long long)n_selected);
            if (ps)
                printf("; starts at %s (%s)", ps, from);
            printf("\n");
        }
        free(ps);
    }
    if (json) {
        char *s = cJSON_Print(all);
        printf("%s\n", s);
        free(s);
    }
    cJSON_Delete(all);
}

int kiln_cmd_sweep(int argc, char **argv) {
    kiln_gate_options opt;
    kiln_gate_options_default(&opt);
    kiln_cli_args a;
    kiln_cli_args_init(&a);
    a.gate = &opt;
    a.cli.seed = 1;
    int operand = 0;
    int rc = kiln_cli_parse(&sweep_command, argc, argv, &a, &operand);
    if (rc != KILN_CLI_CONTINUE)
        return rc;
    const char *family = a.cli.family, *backend = a.cli.backend, *out_dir = a.cli.out;
    const char *ref_dir = a.cli.ref_dir, *jsonl_path = a.cli.jsonl;
    int64_t limit = a.cli.limit;
    int json = a.cli.json, list = a.cli.list, resume = a.cli.resume;
    int random_sample = strcmp(a.cli.sample, "random") == 0;
    uint64_t seed = a.cli.seed;
    cJSON *earlier = NULL;
    if (argc - operand != 1)
        return kiln_cli_usage_error(&sweep_command, "expected one PROBLEM_DIR");
    if (resume && !jsonl_path)
        return kiln_cli_usage_error(&sweep_command,
                                    "--resume reads the rows of --jsonl FILE: give both");
    const char *problem_dir = argv[operand];
    if (!backend)
        backend = kiln_backend_default();
    int cuda = strcmp(backend, "cuda") == 0;
    opt.backend = backend;

    kiln_err err;
    kiln_problem *p = NULL;
    if (kiln_problem_load(problem_dir, &p, &err)) {
        fprintf(stderr, "kiln sweep: %s\n", err.msg);
        return 2;
    }
    const kiln_family *fams[16];
    kiln_match matches[16];
    char why[4096];
    int n_match = kiln_family_match_all(p, fams, matches, 16, why, sizeof why);
    kiln_family_sol_fill_matched(p, fams, matches, n_match); /* before --family narrows them */
    n_match = kiln_family_keep_only(family, fams, matches, n_match);
    if (n_match == 0) {
        fprintf(stderr, "kiln sweep: no kernel family matches %s%s%s:\n%s", p->name,
                family ? " in family " : "", family ? family : "", why);
        kiln_problem_free(p);
        return 2;
    }
    int where_some = 0; /* a bad --where, or one no family has all the names of, is a usage error */
    for (int i = 0; i < n_match && a.cli.where; i++) {
        char allowed[KILN_FAMILY_MAX_PARAMS][KILN_FAMILY_MAX_VALUES];
        int none;
        if (parse_where(fams[i], a.cli.where, allowed, &none, why, sizeof why)) {
            fprintf(stderr, "kiln sweep: %s\n", why);
            kiln_problem_free(p);
            return 2;
        }
        where_some |= !none;
    }
    if (a.cli.where && !where_some) {
        fprintf(stderr, "kiln sweep: --where '%s': no matching family has all these parameters\n",
                a.cli.where);
        kiln_problem_free(p);
        return 2;
    }
    FILE *jsonl = NULL;
    if (jsonl_path && !list && !(jsonl = fopen(jsonl_path, "a"))) {
        fprintf(stderr, "kiln sweep: --jsonl %s: %s\n", jsonl_path, strerror(errno));
        kiln_problem_free(p);
        return 2;
    }
    int status = 2, failed = 0;
    kiln_gate_session *session = NULL;
    pid_t compiling = 0; /* the compile pool */
    kiln_refdata *ref = NULL;
    char *dir = NULL;
    sweep_row *rows = NULL;
    int n_rows = 0, cap_rows = 0;
    cJSON *all = cJSON_CreateObject();
    cJSON *jrows = cJSON_AddArrayToObject(all, "rows");

    if (list) {
        list_families(p, fams, matches, n_match, json, a.cli.where);
        status = 0;
        goto done;
    }
    for (int i = 0; i < n_match; i++)
        fprintf(stderr, "kiln sweep: %s matches family %s (%s), space %lld points\n", p->name,
                fams[i]->name, matches[i].variant, (long long)kiln_family_space_size(fams[i]));
    if (out_dir)
        dir = xstrdup(out_dir);
    else if (kiln_dir_writable(p->dir))
        dir = xasprintf("%s/kiln/sweep", p->dir);
    else
        dir = xasprintf("/tmp/kiln-sweep-%d", (int)getpid());
    if (kiln_mkdirs(dir, &err)) {
        fprintf(stderr, "kiln sweep: %s\n", err.msg);
        goto done;
    }
    earlier = resume ? read_rows(jsonl_path) : cJSON_CreateArray();
    /* 1. every point to run, its source written; 2. on cuda, compiled on every core (the cubin
     * cache keeps them for the gate) while the reference data is found or built; 3. each through
     * the gate, one at a time. */
    sweep_job *jobs = NULL;
    int n_jobs = 0;
    uint64_t rng = seed ^ 0x9e3779b97f4a7c15ULL;
    for (int fi = 0; fi < n_match; fi++) {
        const kiln_family *f = fams[fi];
        int64_t space = kiln_family_space_size(f);
        int64_t point[KILN_FAMILY_MAX_PARAMS];
        /* The constraint predicates are cheap: list the valid points first, then take all of them
         * or --limit of them (an even spread, or uniformly at random), so that sampling never
         * lands on rejected points. */
        char allowed[KILN_FAMILY_MAX_PARAMS][KILN_FAMILY_MAX_VALUES];
        int none = 0;
        if (a.cli.where && parse_where(f, a.cli.where, allowed, &none, why, sizeof why)) {
            fprintf(stderr, "kiln sweep: %s\n", why);
            goto done;
        }
        int64_t *valid = xmalloc((size_t)(space > 0 ? space : 1) * sizeof *valid);
        int64_t n_valid = 0;
        for (int64_t index = 0; index < space && !none; index++) {
            kiln_family_point(f, index, point);
            if (kiln_family_point_ok(f, p, &matches[fi], point) &&
                (!a.cli.where || where_ok(f, point, allowed)))
                valid[n_valid++] = index;
        }
        int64_t n_points = (limit > 0 && n_valid > limit) ? limit : n_valid;
        if (random_sample && n_points < n_valid) {
            /* a partial Fisher-Yates shuffle: the first n_points are a uniform sample */
            for (int64_t k = 0; k < n_points; k++) {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                int64_t r = k + (int64_t)(rng % (uint64_t)(n_valid - k));
                int64_t t = valid[k];
                valid[k] = valid[r];
                valid[r] = t;
            }
        }
        /* the points to run, in order: every valid one, a uniform draw, or an even spread that
         * starts with the family's start point (kiln_family_start_index), so that a sweep cut
         * short by time has measured the point the family's rule expects to be good. A uniform
         * draw is left alone: it is the search benchmark's baseline. */
        int64_t *pick = xmalloc((size_t)(n_points > 0 ? n_points : 1) * sizeof *pick);
        for (int64_t k = 0; k < n_points; k++)
            pick[k] = valid[n_points == n_valid || random_sample ? k : (k * n_valid) / n_points];
        int from_rule = 0;
        int64_t first = random_sample && n_points < n_valid
                            ? -1
                            : kiln_family_start_index(f, p, &matches[fi], space, &from_rule);
        if (first >= 0 && a.cli.where && !none) {
            /* --where: the start point with the filtered values put in (its twin: the change the
             * filter asks for, measured against the rest of the rule's point), and under --limit
             * the valid points nearest it rather than a spread of the whole space */
            int64_t start[KILN_FAMILY_MAX_PARAMS];
            kiln_family_point(f, first, start);
            if (!where_ok(f, start, allowed))
                twin_into_where(f, start, allowed);
            first = kiln_family_point_index(f, start);
            if (first >= 0 && !kiln_family_point_ok(f, p, &matches[fi], start))
                first = -1;
            if (first < 0)
                from_rule = 0;
            if (n_points < n_valid && !random_sample) {
                nearest_first(f, start, valid, n_valid);
                for (int64_t k = 0; k < n_points; k++)
                    pick[k] = valid[k];
            }
        } else if (a.cli.where) {
            first = -1, from_rule = 0;
        }
        if (first >= 0 && n_points > 0) {
            int64_t at = n_points - 1; /* dropped from an even spread when it is not in it */
            for (int64_t k = 0; k < n_points; k++)
                if (pick[k] == first)
                    at = k;
            memmove(pick + 1, pick, (size_t)at * sizeof *pick);
            pick[0] = first;
        }
        fprintf(stderr,
                "kiln sweep: %s: %lld of %lld points satisfy the constraints; running %lld%s%s\n",
                f->name, (long long)n_valid, (long long)space, (long long)n_points,
                random_sample && n_points < n_valid ? " drawn at random" : "",
                from_rule ? ", the family's start point first" : "");
        for (int64_t k = 0; k < n_points; k++) {
            int64_t index = pick[k];
            kiln_family_point(f, index, point);
            char *src = f->emit(p, &matches[fi], point, cuda);
            uint64_t h = kiln_fnv1a(KILN_FNV_INIT, src, strlen(src));
            int dup = 0;
            for (int q = 0; q < n_jobs; q++)
                dup |= jobs[q].hash == h;
            if (dup) {
                free(src);
                continue;
            }
            char *file =
                xasprintf("%s/%s-%lld.%s", dir, f->name, (long long)index, cuda ? "cu" : "c");
            if (kiln_write_file(file, src, strlen(src), &err)) {
                fprintf(stderr, "kiln sweep: %s\n", err.msg);
                free(src);
                free(file);
                free(valid);
                free(pick);
                failed = 1;
                goto jobs_done;
            }
            jobs = xrealloc(jobs, (size_t)(n_jobs + 1) * sizeof *jobs);
            char *params = kiln_family_point_str(f, point);
            jobs[n_jobs++] = (sweep_job){.family = f,
                                         .params = params,
                                         .file = file,
                                         .source = src,
                                         .hash = h,
                                         .kept = find_row(earlier, f->name, params)};
        }
        free(valid);
        free(pick);
    }
    if (cuda) {
        const char **sources = xcalloc((size_t)n_jobs + 1, sizeof *sources);
        for (int k = 0; k < n_jobs; k++)
            sources[k] = jobs[k].kept ? NULL : jobs[k].source;
        compiling = kiln_gate_precompile_start(sources, n_jobs, "kiln sweep");
        free(sources);
    }
    int refs_rc = kiln_refs_ensure(p, cuda ? "cuda" : "cpu", ref_dir, json, &ref, &err);
    if (refs_rc) {
        fprintf(stderr, "kiln sweep: %s\n", err.msg);
        failed = 1;
        goto jobs_done;
    }

    session = kiln_gate_session_new(&opt);
    for (int k = 0; k < n_jobs; k++) {
        sweep_job *jb = &jobs[k];
        fprintf(stderr, "[%d/%d] %s %s ... ", k + 1, n_jobs, jb->family->name, jb->params);
        cJSON *r = jb->kept
                       ? cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(jb->kept, "result"), 1)
                       : kiln_gate_session_eval(session, p, ref, jb->file, &opt);
        if (jb->kept)
            fprintf(stderr, "(kept from %s) ", jsonl_path);
        if (n_rows == cap_rows) {
            cap_rows = cap_rows ? 2 * cap_rows : 16;
            rows = xrealloc(rows, (size_t)cap_rows * sizeof *rows);
        }
        sweep_row *row = &rows[n_rows++];
        memset(row, 0, sizeof *row);
        row->params = xasprintf("%s %s", jb->family->name, jb->params);
        row->file = xstrdup(jb->file);
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(r, "outcome");
        row->outcome = xstrdup(cJSON_IsString(o) ? o->valuestring : "error");
        row->time_us = row->gbps = row->sol_pct = row->score = NAN;
        if (strcmp(row->outcome, "ok") == 0)
            summarise_result(r, row);
        row->detail = evidence_line(r);
        fprintf(stderr, "%s", row->outcome);
        if (!isnan(row->time_us))
            fprintf(stderr, " %.2f us", row->time_us);
        fprintf(stderr, "\n");
        cJSON *jr = cJSON_CreateObject();
        cJSON_AddStringToObject(jr, "family", jb->family->name);
        cJSON_AddStringToObject(jr, "params", jb->params);
        cJSON_AddStringToObject(jr, "file", jb->file);
        char hash[17]; /* as the store's candidate.source_hash: the same source is the same point */
        snprintf(hash, sizeof hash, "%016" PRIx64, jb->hash);
        cJSON_AddStringToObject(jr, "source_hash", hash);
        cJSON_AddItemToObject(jr, "result", r);
        if (jsonl && !jb->kept) {
            /* one line per row as soon as it is known: a sweep cut short keeps what it measured */
            char *line = cJSON_PrintUnformatted(jr);
            fprintf(jsonl, "%s\n", line);
            fflush(jsonl);
            free(line);
        }
        cJSON_AddItemToArray(jrows, jr);
    }
jobs_done:
    kiln_gate_precompile_wait(compiling);
    for (int k = 0; k < n_jobs; k++) {
        free(jobs[k].params);
        free(jobs[k].file);
        free(jobs[k].source);
    }
    free(jobs);
    if (failed)
        goto done;
    qsort(rows, (size_t)n_rows, sizeof *rows, row_cmp);
    if (json) {
        char *s = cJSON_Print(all);
        printf("%s\n", s);
        free(s);
    } else {
        printf("%-52s %-13s %12s %9s %7s %6s\n", "params", "outcome", "time us", "GB/s", "SOL%",
               "S");
        for (int i = 0; i < n_rows; i++) {
            printf("%-52s %-13s %12.2f %9.1f %7.1f %6.3f", rows[i].params, rows[i].outcome,
                   rows[i].time_us, rows[i].gbps, rows[i].sol_pct, rows[i].score);
            if (rows[i].detail[0] && strcmp(rows[i].outcome, "ok") != 0)
                printf("  %s", rows[i].detail);
            printf("\n");
        }
        if (n_rows && !isnan(rows[n_rows - 1].time_us))
            printf("best: %s (%s)\n", rows[n_rows - 1].params, rows[n_rows - 1].file);
    }
    status = 0;
done:
    kiln_gate_session_free(session);
    cJSON_Delete(earlier);
    if (jsonl)
        fclose(jsonl);
    for (int i = 0; i < n_rows; i++) {
        free(rows[i].params);
        free(rows[i].file);
        free(rows[i].outcome);
        free(rows[i].detail);
    }
    free(rows);
    free(dir);
    cJSON_Delete(all);
    kiln_refdata_free(ref);
    kiln_problem_free(p);
    return status;
}
