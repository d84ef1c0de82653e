/* library.c: RUN/library/ from the store: the winners' sources, cubins and manifest.json.
 *
 * The library is what `kiln run` and kiln.install() load back into the model, so every entry says
 * exactly when it applies (the gate: the captured overload, dtypes, shapes, strides, storage
 * offsets, non-tensor arguments, device capability), how to launch it (the ABI prototype and the
 * evaluated launch plan per distinct shape), and what it earned (times, speedup, tolerance met). It
 * is written in two phases: one read snapshot of the store gathers the winners (so the run may go
 * on writing), then, outside any transaction, each winner's problem is loaded, its cubin built and
 * its files written; manifest.json goes last, so a reader never finds a manifest naming a missing
 * file. */
#include "library.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../backend/lt_call.h"
#include "../backend/nvrtc.h"
#include "../gen/family.h"

/* What the snapshot gathers per winner. */
typedef struct {
    int64_t problem_id, candidate_id;
    char *name, *dir, *source, *family, *params, *agent, *result_json;
    char *content_hash; /* the problem's in the store; NULL unknown */
    int draft;
    double share, eager_us, compile_us, sol_us; /* < 0: unknown */
    double time_us, spread_pct, sol_pct, score; /* of the winning result */
} winner;

static void winner_free(winner *w) {
    free(w->name);
    free(w->dir);
    free(w->source);
    free(w->family);
    free(w->params);
    free(w->agent);
    free(w->result_json);
    free(w->content_hash);
}

static void warn(kiln_library_report *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void warn(kiln_library_report *r, const char *fmt, ...) {
    size_t off = strlen(r->warnings), cap = sizeof r->warnings;
    if (off + 2 >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->warnings + off, cap - off - 1, fmt, ap);
    va_end(ap);
    off = strlen(r->warnings);
    r->warnings[off] = '\n';
    r->warnings[off + 1] = 0;
}

/* ---- phase 1: the winners, in one read snapshot ---- */

/* Fills w from the problem's winner (the store's rule); *ok 0 when the problem has none. */
static int load_winner(kiln_store *s, const kiln_store_problem_row *p, winner *w, int *ok,
                       kiln_library_report *report, kiln_err *err) {
    *ok = 0;
    kiln_store_winner win;
    int rc = kiln_store_winner_get(s, p->id, &win, err);
    if (rc)
        return rc;
    if (win.incumbent_id > 0 && win.candidate_id != win.incumbent_id)
        warn(report, "%s: incumbent %lld has no ok result; taking the fastest ok one", p->name,
             (long long)win.incumbent_id);
    if (!win.candidate_id)
        return KILN_OK; /* no ok winner: not in the library (nothing to say) */
    kiln_store_result_row r;
    kiln_store_candidate_row c;
    int have_r = 0, have_c = 0;
    if ((rc = kiln_store_result_get(s, win.result_id, &r, &have_r, err)) ||
        (rc = kiln_store_candidate_get(s, win.candidate_id, &c, &have_c, err))) {
        kiln_store_result_row_free(&r);
        return rc;
    }
    if (have_r && have_c) {
        w->problem_id = p->id;
        w->candidate_id = win.candidate_id;
        w->name = xstrdup(p->name);
        w->dir = xstrdup(p->dir);
        w->content_hash = p->content_hash ? xstrdup(p->content_hash) : NULL;
        w->share = p->share;
        w->eager_us = p->eager_us;
        w->compile_us = p->compile_us;
        w->sol_us = p->sol_us;
        w->time_us = r.time_us;
        w->spread_pct = r.spread_pct;
        w->sol_pct = r.sol_pct;
        w->score = r.score;
        w->result_json = r.result_json;
        r.result_json = NULL;
        w->source = c.source;
        w->family = c.family;
        w->params = c.params;
        w->agent = c.agent;
        c.source = c.family = c.params = c.agent = NULL;
        w->draft = c.draft;
        *ok = 1;
    }
    kiln_store_result_row_free(&r);
    kiln_store_candidate_row_free(&c);
    return KILN_OK;
}

static int gather_winners(kiln_store *s, winner **out, int *n_out, int *n_problems,
                          kiln_library_report *report, kiln_err *err) {
    winner *ws = NULL;
    int n = 0;
    *out = NULL;
    *n_out = *n_problems = 0;
    int rc = kiln_store_read_begin(s, err);
    if (rc)
        return rc;
    kiln_store_problem_row *ps = NULL;
    int n_ps = 0;
    rc = kiln_store_problem_list(s, &ps, &n_ps, err);
    for (int i = 0; !rc && i < n_ps; i++) {
        winner w = {0};
        int ok = 0;
        rc = load_winner(s, &ps[i], &w, &ok, report, err);
        if (!rc && ok) {
            ws = xrealloc(ws, (size_t)(n + 1) * sizeof *ws);
            ws[n++] = w;
        }
    }
    *n_problems = n_ps;
    for (int i = 0; i < n_ps; i++)
        kiln_store_problem_row_free(&ps[i]);
    free(ps);
    int end = kiln_store_read_end(s, rc ? NULL : err);
    if (!rc)
        rc = end;
    if (rc) {
        for (int i = 0; i < n; i++)
            winner_free(&ws[i]);
        free(ws);
        return rc;
    }
    *out = ws;
    *n_out = n;
    return KILN_OK;
}

/* ---- phase 2: entries ---- */

/* The NVRTC version of the library the cuda backend loaded ("13.0"), or "" when none is loaded. */
static void nvrtc_version(char *out, size_t cap) {
    out[0] = 0;
    if (!kiln_cuda_have_nvrtc())
        return;
    const char *names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *lib = dlopen(names[i], RTLD_NOW | RTLD_NOLOAD);
        if (!lib)
            continue;
        int (*version)(int *, int *) = (int (*)(int *, int *))dlsym(lib, "nvrtcVersion");
        int major = 0, minor = 0;
        if (version && version(&major, &minor) == 0)
            snprintf(out, cap, "%d.%d", major, minor);
        dlclose(lib);
        if (out[0])
            return;
    }
}

/* A file name from a problem name: [A-Za-z0-9._-] kept, the rest '_'; a changed name gets the
 * problem id so that two problems never share a file. */
static char *file_stem(const winner *w) {
    char *stem = xstrdup(w->name && *w->name ? w->name : "problem");
    int changed = !(w->name && *w->name);
    for (char *c = stem; *c; c++) {
        int ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                 *c == '_' || *c == '-' || (*c == '.' && c != stem);
        if (!ok) {
            *c = '_';
            changed = 1;
        }
    }
    if (changed) {
        char *s = xasprintf("%s-%lld", stem, (long long)w->problem_id);
        free(stem);
        stem = s;
    }
    return stem;
}

static cJSON *number_or_null(double v) {
    return v >= 0 && isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull();
}

static cJSON *int_array(const int64_t *v, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
    return a;
}

static cJSON *uint3_array(const unsigned v[3]) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < 3; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

/* One tensor of the gate: dtype from the definition; shape, strides and storage offset from the
 * captured "kiln" object when it has them, else dense row-major of the first workload. */
static cJSON *gate_tensor(const kiln_problem *p, const kiln_tensor_spec *t, const cJSON *kiln) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", t->name);
    cJSON_AddStringToObject(o, "dtype", kiln_dtype_name(t->dtype));
    if (t->is_scalar) {
        cJSON_AddBoolToObject(o, "scalar", 1);
        cJSON_AddNullToObject(o, "shape");
        cJSON_AddNullToObject(o, "strides");
        return o;
    }
    const cJSON *shape =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(kiln, "shapes"), t->name);
    const cJSON *strides = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(kiln, "strides"), t->name);
    const cJSON *offset = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(kiln, "storage_offsets"), t->name);
    const cJSON *layout = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(kiln, "layouts"), t->name);
    int64_t dense[KILN_MAX_DIMS], dense_strides[KILN_MAX_DIMS];
    int have_workload = p->n_workloads > 0;
    if (have_workload) {
        kiln_tensor_shape(p, t, &p->workloads[0], dense);
        int64_t st = 1;
        for (int d = t->ndim - 1; d >= 0; d--) {
            dense_strides[d] = st;
            st *= dense[d] > 0 ? dense[d] : 1;
        }
    }
    if (cJSON_IsArray(shape))
        cJSON_AddItemToObject(o, "shape", cJSON_Duplicate(shape, 1));
    else if (have_workload)
        cJSON_AddItemToObject(o, "shape", int_array(dense, t->ndim));
    else
        cJSON_AddNullToObject(o, "shape");
    if (cJSON_IsArray(strides))
        cJSON_AddItemToObject(o, "strides", cJSON_Duplicate(strides, 1));
    else if (have_workload && !cJSON_IsArray(shape))
        cJSON_AddItemToObject(o, "strides", int_array(dense_strides, t->ndim));
    else
        cJSON_AddNullToObject(o, "strides");
    cJSON_AddNumberToObject(o, "storage_offset", cJSON_IsNumber(offset) ? offset->valuedouble : 0);
    if (layout)
        cJSON_AddItemToObject(o, "layout", cJSON_Duplicate(layout, 1));
    return o;
}

static cJSON *expr_triple(char *const v[3]) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < 3; i++)
        cJSON_AddItemToArray(a, cJSON_CreateString(v[i] ? v[i] : "1"));
    return a;
}

/* "launches": one element per distinct axis binding (workloads with equal axes share one), each
 * with the evaluated plan; "directives": the launches as written, for shapes not listed. */
static void add_launches(cJSON *e, const kiln_problem *p, const kiln_abi *abi) {
    cJSON *dirs = cJSON_AddArrayToObject(e, "directives");
    for (int l = 0; l < abi->n_launches; l++) {
        const kiln_launch_spec *ls = &abi->launch[l];
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "entry", ls->entry);
        cJSON_AddItemToObject(d, "grid", expr_triple(ls->grid));
        cJSON_AddItemToObject(d, "block", expr_triple(ls->block));
        cJSON_AddItemToObject(d, "cluster", expr_triple(ls->cluster));
        cJSON_AddStringToObject(d, "smem_bytes", ls->smem ? ls->smem : "0");
        cJSON_AddItemToArray(dirs, d);
    }
    if (abi->scratch)
        cJSON_AddStringToObject(e, "scratch_bytes", abi->scratch);

    cJSON *launches = cJSON_AddArrayToObject(e, "launches");
    for (int wi = 0; wi < p->n_workloads; wi++) {
        const kiln_workload *w = &p->workloads[wi];
        int seen = -1;
        for (int k = 0; k < wi && seen < 0; k++)
            if (p->n_axes == 0 || memcmp(p->workloads[k].axis_values, w->axis_values,
                                         (size_t)p->n_axes * sizeof(int64_t)) == 0)
                seen = k;
        if (seen >= 0) {
            /* add wi to the element that holds workload `seen` */
            cJSON *el;
            cJSON_ArrayForEach(el, launches) {
                cJSON *ids = cJSON_GetObjectItemCaseSensitive(el, "workloads"), *id;
                int has = 0;
                cJSON_ArrayForEach(id, ids) has |= (int)id->valuedouble == seen;
                if (has) {
                    cJSON_AddItemToArray(ids, cJSON_CreateNumber(wi));
                    break;
                }
            }
            continue;
        }
        cJSON *el = cJSON_CreateObject();
        cJSON *ids = cJSON_AddArrayToObject(el, "workloads");
        cJSON_AddItemToArray(ids, cJSON_CreateNumber(wi));
        cJSON *axes = cJSON_AddObjectToObject(el, "axes");
        for (int a = 0; a < p->n_axes; a++)
            cJSON_AddNumberToObject(axes, p->axes[a].name, (double)w->axis_values[a]);
        kiln_launch_plan plan;
        kiln_err perr;
        if (kiln_abi_plan(abi, p, w, &plan, &perr) != KILN_OK) {
            cJSON_AddStringToObject(el, "error", perr.msg);
        } else {
            cJSON *ls = cJSON_AddArrayToObject(el, "launches");
            for (int l = 0; l < plan.n_launches; l++) {
                const kiln_launch *L = &plan.launch[l];
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "entry", L->entry);
                cJSON_AddItemToObject(o, "grid", uint3_array(L->grid));
                cJSON_AddItemToObject(o, "block", uint3_array(L->block));
                cJSON_AddItemToObject(o, "cluster", uint3_array(L->cluster));
                cJSON_AddNumberToObject(o, "smem_bytes", (double)L->smem_bytes);
                cJSON_AddItemToArray(ls, o);
            }
            if (plan.n_tmaps)
                cJSON_AddItemToObject(el, "tensormaps", kiln_tmaps_to_json(&plan));
            cJSON_AddNumberToObject(el, "scratch_bytes", (double)plan.scratch_bytes);
        }
        cJSON_AddItemToArray(launches, el);
    }
}

/* The largest value of key over the result's summary and workloads, or -1. */
static double result_max(const cJSON *res, const char *key) {
    double best = -1;
    const cJSON *v =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(res, "summary"), key);
    if (cJSON_IsNumber(v))
        best = v->valuedouble;
    const cJSON *w;
    cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(res, "workloads")) {
        v = cJSON_GetObjectItemCaseSensitive(w, key);
        if (cJSON_IsNumber(v) && v->valuedouble > best)
            best = v->valuedouble;
    }
    return best;
}

/* What the gate added to output's tolerance field ("atol", "rtol", "rel_l2") on workload wi for the
 * reference's own rounding (the result's "reference_rounding"), or 0. */
static double rounding_extra(const cJSON *res, int wi, const char *output, const char *field) {
    const cJSON *w;
    cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(res, "workloads")) {
        const cJSON *index = cJSON_GetObjectItemCaseSensitive(w, "index");
        if (!cJSON_IsNumber(index) || index->valuedouble != wi)
            continue;
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(w, "reference_rounding"), output),
            field);
        return cJSON_IsNumber(v) && v->valuedouble > 0 ? v->valuedouble : 0;
    }
    return 0;
}

/* The tolerance every output met: the loosest the gate applied (workload, then problem, then the
 * dtype's default, as the gate chooses it, with what it added for the reference's rounding). */
static kiln_tolerance loosest_tolerance(const kiln_problem *p, const cJSON *res) {
    kiln_tolerance t = {.atol = 0};
    for (int o = 0; o < p->n_outputs; o++) {
        for (int wi = 0; wi < (p->n_workloads ? p->n_workloads : 1); wi++) {
            kiln_tolerance x = kiln_problem_output_tolerance(p, p->n_workloads ? wi : -1, o);
            x.atol += rounding_extra(res, wi, p->outputs[o].name, "atol");
            x.rel_l2 += rounding_extra(res, wi, p->outputs[o].name, "rel_l2");
            x.rtol += rounding_extra(res, wi, p->outputs[o].name, "rtol");
            t.atol = fmax(t.atol, x.atol);
            t.rtol = fmax(t.rtol, x.rtol);
            t.rel_l2 = fmax(t.rel_l2, x.rel_l2);
        }
    }
    return t;
}

/* "install": whether the kernel beats eager on the gate's own times, the first half of the decision
 * to install it (kiln.install adds the dispatch cost it measures: docs/install.md). Only a speedup
 * the spreads support counts; an entry that cannot be compared is left out with the reason. */
static void add_install_decision(cJSON *e, const kiln_store_speedup *sp, double eager_us,
                                 double eager_spread_pct, const winner *w) {
    cJSON *d = cJSON_AddObjectToObject(e, "install");
    int beats = 0;
    char *why = NULL;
    switch (sp->verdict) {
    case KILN_SPEEDUP_SUPPORTED:
    case KILN_SPEEDUP_NOISY:
        beats = sp->value > 1;
        why = beats ? xasprintf("%.2fx over eager in the gate (%.2f -> %.2f us)", sp->value,
                                eager_us, w->time_us)
                    : xasprintf("slower than eager in the gate (%.2f us against %.2f us)",
                                w->time_us, eager_us);
        break;
    case KILN_SPEEDUP_NOT_SIGNIFICANT: {
        char ks[32] = "not measured", es[32] = "not measured";
        if (w->spread_pct >= 0)
            snprintf(ks, sizeof ks, "%.1f%%", w->spread_pct);
        if (eager_spread_pct >= 0)
            snprintf(es, sizeof es, "%.1f%%", eager_spread_pct);
        why = xasprintf("no win the spreads support: %.2f us (spread %s) against eager %.2f us "
                        "(spread %s)",
                        w->time_us, ks, eager_us, es);
        break;
    }
    case KILN_SPEEDUP_NOISY_BASELINE:
        why = xasprintf("the eager baseline is too noisy to compare with (spread %.1f%% > %.0f%%)",
                        eager_spread_pct, KILN_SPREAD_LIMIT_PCT);
        break;
    default:
        why = xstrdup("no eager time to compare with");
        break;
    }
    cJSON_AddBoolToObject(d, "beats_eager", beats);
    cJSON_AddStringToObject(d, "reason", why);
    free(why);
}

typedef struct {
    const char *backend;
    int cuda;
    const char *cc; /* "9.0" */
    int cc_major, cc_minor;
    const char *arch; /* forced arch or NULL */
    int require_cubin;
    const char *lib_dir;
} build_ctx;

static void choose_arch(const build_ctx *b, const char *source, char *out, size_t cap) {
    if (b->arch && *b->arch)
        snprintf(out, cap, "%s", b->arch);
    else
        kiln_cuda_arch(b->cc_major, b->cc_minor, source, out, cap);
}

/* A `// kiln: library cublaslt` winner (lt_call.h): the call its gate result recorded as settled
 * on the device ("library": the concrete configuration and the cuBLASLt version, not the index the
 * search picked), checked against p's signature. Returns the source the library keeps (the
 * directive with that call) and sets *library to the manifest's "library" object; NULL with why
 * when the result records none. */
static char *settled_library_call(const cJSON *res, const kiln_problem *p, cJSON **library,
                                  kiln_err *err) {
    *library = NULL;
    const cJSON *rec = cJSON_GetObjectItemCaseSensitive(res, "library");
    if (!cJSON_IsObject(rec)) {
        kiln_errf(err, KILN_ERR_FORMAT, "its gate result records no settled cuBLASLt call");
        return NULL;
    }
    char *text = cJSON_PrintUnformatted(rec);
    kiln_signature sig;
    kiln_abi_signature(p, 0, 1, &sig);
    kiln_lt_call_desc d;
    int rc = kiln_lt_call_parse(text, &sig, &d, err);
    cJSON_free(text);
    if (rc)
        return NULL;
    if (!d.has_config) {
        kiln_errf(err, KILN_ERR_FORMAT, "its gate result records an index, not a configuration");
        return NULL;
    }
    char *call = kiln_lt_call_json(&d);
    *library = cJSON_CreateObject();
    cJSON_AddStringToObject(*library, "name", "cublaslt");
    cJSON_AddItemToObject(*library, "call", cJSON_Parse(call));
    char *source = xasprintf("// kiln: library cublaslt %s\n", call);
    free(call);
    return source;
}

/* The entry's "assumes": what the winner's family assumes of the inputs' contents beyond the gate
 * (kiln_family.assumes; the install path checks it before each launch). Nothing for a kernel of no
 * family or a family that assumes nothing. */
static void add_assumes(cJSON *e, const kiln_problem *p, const char *family, int cuda) {
    const kiln_family *f = family ? kiln_family_find(family) : NULL;
    if (!f || !f->assumes)
        return;
    kiln_match m;
    memset(&m, 0, sizeof m);
    char why[256];
    if (!f->match(p, &m, why, sizeof why))
        return;
    cJSON *a = f->assumes(p, &m, cuda);
    if (a)
        cJSON_AddItemToObject(e, "assumes", a);
}

/* Builds one entry and writes its files; *entry NULL (and a warning) when the winner is skipped.
 * Returns an error only for I/O. */
static int build_entry(const build_ctx *b, const winner *w, cJSON **entry, char ***files,
                       int *n_files, kiln_library_report *report, kiln_err *err) {
    *entry = NULL;
    kiln_problem *p = NULL;
    kiln_abi abi;
    memset(&abi, 0, sizeof abi);
    int have_abi = 0, rc = KILN_OK;
    const cJSON *kiln = NULL;
    cJSON *e = NULL, *res = NULL, *library = NULL;
    char *settled = NULL;
    char *stem = NULL, *kernel_file = NULL, *path = NULL, *proto = NULL, *cubin = NULL, *log = NULL;
    kiln_err lerr;

    if (kiln_problem_load(w->dir, &p, &lerr) != KILN_OK) {
        warn(report, "%s: skipped: its problem directory does not load: %s", w->name, lerr.msg);
        goto done;
    }
    const char *now = kiln_problem_kiln_str(p, "content_hash");
    if (w->content_hash && now && strcmp(now, w->content_hash) != 0) {
        /* the kernel was proved on other tensors, or for another definition: not this problem's */
        warn(report,
             "%s: skipped: its directory holds another problem now (content %.12s; the store's "
             "results are for %.12s)",
             w->name, now, w->content_hash);
        goto done;
    }
    if (kiln_abi_parse(w->source, b->cuda, &abi, &lerr) != KILN_OK) {
        warn(report, "%s: skipped: candidate %lld's launch directives: %s", w->name,
             (long long)w->candidate_id, lerr.msg);
        goto done;
    }
    have_abi = 1;
    kiln = p->kiln;
    res = w->result_json ? cJSON_Parse(w->result_json) : NULL;
    if (abi.library && (!b->cuda || !(settled = settled_library_call(res, p, &library, &lerr)))) {
        warn(report, "%s: skipped: candidate %lld calls %s: %s", w->name,
             (long long)w->candidate_id, abi.library,
             b->cuda ? lerr.msg : "a library call in a cpu library");
        goto done;
    }
    const char *source = settled ? settled : w->source;
    stem = file_stem(w);

    e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "problem", w->name);
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(kiln, "kind");
    const cJSON *aten = cJSON_GetObjectItemCaseSensitive(kiln, "aten");
    const cJSON *module_class = cJSON_GetObjectItemCaseSensitive(kiln, "module_class");
    const char *kind_s = cJSON_IsString(kind)           ? kind->valuestring
                         : cJSON_IsString(aten)         ? "aten"
                         : cJSON_IsString(module_class) ? "module"
                                                        : "definition";
    cJSON_AddStringToObject(e, "kind", kind_s);
    if (cJSON_IsString(aten))
        cJSON_AddStringToObject(e, "aten", aten->valuestring);
    if (strcmp(kind_s, "module") == 0) {
        if (cJSON_IsString(module_class))
            cJSON_AddStringToObject(e, "module_class", module_class->valuestring);
        const cJSON *paths = cJSON_GetObjectItemCaseSensitive(kiln, "module_paths");
        cJSON_AddItemToObject(e, "module_paths",
                              paths ? cJSON_Duplicate(paths, 1) : cJSON_CreateArray());
        /* which positional argument of forward each activation is (a module of several) */
        const cJSON *act = cJSON_GetObjectItemCaseSensitive(kiln, "activation_args");
        if (cJSON_IsObject(act))
            cJSON_AddItemToObject(e, "activation_args", cJSON_Duplicate(act, 1));
    }

    /* what install_inductor traces into a pattern: a chain's calls, and a module's (graph mode
     * replaces those where they are left after the chains, which may hold the same calls) */
    if (strcmp(kind_s, "chain") == 0 || strcmp(kind_s, "module") == 0) {
        const char *keys[] = {"ops", "outputs", "pattern", "module_paths"};
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(kiln, keys[k]);
            if (v && !cJSON_GetObjectItemCaseSensitive(e, keys[k]))
                cJSON_AddItemToObject(e, keys[k], cJSON_Duplicate(v, 1));
        }
    }

    add_assumes(e, p, w->family, b->cuda);

    cJSON *gate = cJSON_AddObjectToObject(e, "gate");
    cJSON *ins = cJSON_AddArrayToObject(gate, "inputs");
    for (int i = 0; i < p->n_inputs; i++)
        cJSON_AddItemToArray(ins, gate_tensor(p, &p->inputs[i], kiln));
    cJSON *outs = cJSON_AddArrayToObject(gate, "outputs");
    for (int i = 0; i < p->n_outputs; i++)
        cJSON_AddItemToArray(outs, gate_tensor(p, &p->outputs[i], kiln));
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(kiln, "args");
    if (args)
        cJSON_AddItemToObject(gate, "args", cJSON_Duplicate(args, 1));
    const cJSON *grad_mode = cJSON_GetObjectItemCaseSensitive(kiln, "grad_mode");
    if (grad_mode)
        cJSON_AddItemToObject(gate, "grad_mode", cJSON_Duplicate(grad_mode, 1));
    /* the empty results capture dropped: an aten entry returns them beside its outputs */
    const cJSON *dropped = cJSON_GetObjectItemCaseSensitive(kiln, "dropped_outputs");
    if (dropped && strcmp(kind_s, "aten") == 0)
        cJSON_AddItemToObject(gate, "dropped_outputs", cJSON_Duplicate(dropped, 1));
    cJSON_AddStringToObject(gate, "device_capability", b->cc);

    /* The cubin first (a winner that no longer compiles is skipped before any file is written),
     * then the files. */
    char arch[32] = "", *cubin_file = NULL;
    size_t cubin_len = 0;
    if (b->cuda && !abi.library) {
        choose_arch(b, w->source, arch, sizeof arch);
        int crc = kiln_cuda_compile_only(w->source, arch, &cubin, &cubin_len, &log, &lerr);
        if (crc == KILN_ERR_BACKEND && b->require_cubin) {
            rc = kiln_errf(err, KILN_ERR_BACKEND, "%s: cubin: %s", w->name, lerr.msg);
            goto done;
        } else if (crc == KILN_ERR_BACKEND) {
            report->n_without_cubin++;
            warn(report, "%s: no cubin (%s); the entry carries the source only", w->name, lerr.msg);
        } else if (crc != KILN_OK) {
            warn(report, "%s: skipped: candidate %lld does not compile for %s: %s", w->name,
                 (long long)w->candidate_id, arch, lerr.msg);
            goto done;
        }
    }
    kernel_file = xasprintf("%s%s", stem, b->cuda ? ".cu" : ".c");
    path = kiln_path_join(b->lib_dir, kernel_file);
    if ((rc = kiln_write_file(path, source, strlen(source), err)))
        goto done;
    *files = xrealloc(*files, (size_t)(*n_files + 2) * sizeof **files);
    (*files)[(*n_files)++] = xstrdup(kernel_file);
    cJSON_AddStringToObject(e, "kernel", kernel_file);
    if (cubin) {
        cubin_file = xasprintf("%s.cubin", stem);
        free(path);
        path = kiln_path_join(b->lib_dir, cubin_file);
        if ((rc = kiln_write_file(path, cubin, cubin_len, err))) {
            free(cubin_file);
            goto done;
        }
        (*files)[(*n_files)++] = cubin_file;
        cJSON_AddStringToObject(e, "cubin", cubin_file);
    } else if (b->cuda) {
        cJSON_AddNullToObject(e, "cubin");
    }
    if (b->cuda)
        cJSON_AddStringToObject(e, "arch", arch);
    if (library) {
        cJSON_AddItemToObject(e, "library", library);
        library = NULL;
    }

    kiln_signature sig;
    kiln_abi_signature(p, abi.scratch != NULL, b->cuda, &sig);
    proto = kiln_abi_prototype(&sig, abi.n_launches ? abi.launch[0].entry : "kiln_kernel", b->cuda);
    cJSON_AddStringToObject(e, "signature", proto);
    add_launches(e, p, &abi);

    kiln_store_summary sum;
    kiln_store_summary_read(res, &sum);
    double eager, eager_spread;
    kiln_store_baseline_pick(w->eager_us, &sum, &eager, &eager_spread);
    cJSON *times = cJSON_AddObjectToObject(e, "time_us");
    cJSON_AddItemToObject(times, "kiln", number_or_null(w->time_us));
    cJSON_AddItemToObject(times, "eager", number_or_null(eager));
    cJSON_AddItemToObject(times, "compile", number_or_null(w->compile_us));
    cJSON_AddItemToObject(times, "sol", number_or_null(w->sol_us));
    cJSON *spreads = cJSON_AddObjectToObject(e, "spread_pct");
    cJSON_AddItemToObject(spreads, "kiln", number_or_null(w->spread_pct));
    cJSON_AddItemToObject(spreads, "eager", number_or_null(eager_spread));
    kiln_store_speedup sp;
    kiln_store_speedup_judge(eager, eager_spread, w->time_us, w->spread_pct, &sp);
    cJSON_AddItemToObject(e, "speedup", number_or_null(sp.value));
    cJSON_AddStringToObject(e, "speedup_verdict", kiln_store_speedup_name(sp.verdict));
    add_install_decision(e, &sp, eager, eager_spread, w);
    cJSON_AddItemToObject(e, "sol_pct", number_or_null(w->sol_pct));
    cJSON_AddItemToObject(e, "sol_score", number_or_null(w->score));
    cJSON_AddItemToObject(e, "share", number_or_null(w->share));

    cJSON *tol_met = cJSON_AddObjectToObject(e, "tolerance_met");
    cJSON_AddItemToObject(tol_met, "max_abs_err", number_or_null(result_max(res, "max_abs_err")));
    cJSON_AddItemToObject(tol_met, "rel_l2_err", number_or_null(result_max(res, "rel_l2_err")));
    kiln_tolerance tol = loosest_tolerance(p, res);
    cJSON *tj = cJSON_AddObjectToObject(tol_met, "tolerance");
    cJSON_AddNumberToObject(tj, "atol", tol.atol);
    cJSON_AddNumberToObject(tj, "rtol", tol.rtol);
    cJSON_AddNumberToObject(tj, "rel_l2", tol.rel_l2);
    cJSON_AddNumberToObject(tol_met, "proved_workloads", p->n_workloads);

    cJSON *cand = cJSON_AddObjectToObject(e, "candidate");
    cJSON_AddNumberToObject(cand, "id", (double)w->candidate_id);
    cJSON_AddStringToObject(cand, "agent", w->agent ? w->agent : "");
    if (w->family)
        cJSON_AddStringToObject(cand, "family", w->family);
    else
        cJSON_AddNullToObject(cand, "family");
    cJSON_AddStringToObject(cand, "params", w->params ? w->params : "");
    cJSON_AddNumberToObject(cand, "draft", w->draft);
    cJSON_AddStringToObject(e, "problem_dir", w->dir);
    if (w->content_hash)
        cJSON_AddStringToObject(e, "content_hash", w->content_hash);
    *entry = e;
    e = NULL;
done:
    cJSON_Delete(e);
    cJSON_Delete(res);
    cJSON_Delete(library);
    free(settled);
    if (have_abi)
        kiln_abi_free(&abi);
    kiln_problem_free(p);
    free(stem);
    free(kernel_file);
    free(path);
    free(proto);
    free(cubin);
    free(log);
    return rc;
}

/* Removes the kernel files of earlier writes that the new manifest does not name. */
static void remove_stale(const char *lib_dir, char **files, int n_files) {
    DIR *d = opendir(lib_dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *dot = strrchr(de->d_name, '.');
        if (!dot ||
            (strcmp(dot, ".cu") != 0 && strcmp(dot, ".c") != 0 && strcmp(dot, ".cubin") != 0))
            continue;
        int keep = 0;
        for (int i = 0; i < n_files && !keep; i++)
            keep = strcmp(files[i], de->d_name) == 0;
        if (!keep) {
            char *path = kiln_path_join(lib_dir, de->d_name);
            unlink(path);
            free(path);
        }
    }
    closedir(d);
}

int kiln_library_write(kiln_store *s, const char *run_dir, const kiln_library_options *opt,
                       kiln_library_report *report, kiln_err *err) {
    KILN_ASSERT(s && run_dir);
    kiln_library_options none = {0};
    kiln_library_report scratch_report;
    if (!opt)
        opt = &none;
    if (!report)
        report = &scratch_report;
    memset(report, 0, sizeof *report);

    char *meta_backend = kiln_store_meta_get(s, KILN_META_BACKEND);
    char *meta_name = kiln_store_meta_get(s, KILN_META_DEVICE_NAME);
    char *meta_uuid = kiln_store_meta_get(s, KILN_META_DEVICE_UUID);
    char *meta_cc = kiln_store_meta_get(s, KILN_META_DEVICE_CC);
    char *meta_version = kiln_store_meta_get(s, KILN_META_KILN_VERSION);
    char *lib_dir = kiln_path_join(run_dir, "library");
    char **files = NULL;
    int n_files = 0, n_winners = 0, rc = KILN_OK;
    winner *winners = NULL;
    cJSON *manifest = NULL;
    char *text = NULL, *manifest_path = NULL;

    build_ctx b = {0};
    b.backend = opt->backend ? opt->backend : meta_backend ? meta_backend : "cpu";
    if (strcmp(b.backend, "cuda") != 0 && strcmp(b.backend, "cpu") != 0) {
        rc = kiln_errf(err, KILN_ERR_INVALID, "library: unknown backend '%s' (cuda or cpu)",
                       b.backend);
        goto done;
    }
    b.cuda = strcmp(b.backend, "cuda") == 0;
    char cc[32] = "";
    if (opt->device) {
        b.cc_major = opt->device->cc_major;
        b.cc_minor = opt->device->cc_minor;
    } else if (meta_cc && sscanf(meta_cc, "%d.%d", &b.cc_major, &b.cc_minor) != 2) {
        b.cc_major = b.cc_minor = 0;
    }
    if (b.cuda && b.cc_major == 0) { /* unknown: the arch kiln targets by default */
        b.cc_major = 9;
        b.cc_minor = 0;
    }
    snprintf(cc, sizeof cc, "%d.%d", b.cc_major, b.cc_minor);
    b.cc = cc;
    b.arch = opt->arch;
    b.require_cubin = opt->require_cubin;
    b.lib_dir = lib_dir;

    if ((rc = gather_winners(s, &winners, &n_winners, &report->n_problems, report, err)))
        goto done;
    if ((rc = kiln_mkdirs(lib_dir, err)))
        goto done;

    manifest = cJSON_CreateObject();
    cJSON_AddNumberToObject(manifest, "kiln_library", KILN_LIBRARY_VERSION);
    cJSON_AddStringToObject(manifest, "backend", b.backend);
    cJSON *dev = cJSON_AddObjectToObject(manifest, "device");
    const char *dev_name = opt->device ? opt->device->name : meta_name ? meta_name : "";
    const char *dev_uuid = opt->device ? opt->device->uuid : meta_uuid ? meta_uuid : "";
    cJSON_AddStringToObject(dev, "name", dev_name);
    cJSON_AddStringToObject(dev, "uuid", dev_uuid);
    cJSON_AddStringToObject(dev, "compute_capability", cc);
    cJSON *build = cJSON_AddObjectToObject(manifest, "build");
    cJSON_AddStringToObject(build, "kiln",
                            opt->kiln_version ? opt->kiln_version
                            : meta_version    ? meta_version
                                              : "unknown");
    char nv[32] = "";
    if (b.cuda)
        nvrtc_version(nv, sizeof nv);
    if (nv[0])
        cJSON_AddStringToObject(build, "nvrtc", nv);
    else
        cJSON_AddNullToObject(build, "nvrtc");
    cJSON_AddNumberToObject(manifest, "written_unix_s", (double)time(NULL));
    cJSON *entries = cJSON_AddArrayToObject(manifest, "entries");

    for (int i = 0; i < n_winners; i++) {
        cJSON *entry = NULL;
        if ((rc = build_entry(&b, &winners[i], &entry, &files, &n_files, report, err)))
            goto done;
        if (entry) {
            cJSON_AddItemToArray(entries, entry);
            report->n_entries++;
        }
    }
    text = cJSON_Print(manifest);
    manifest_path = kiln_path_join(lib_dir, "manifest.json");
    size_t len = strlen(text);
    char *with_nl = xasprintf("%s\n", text);
    rc = kiln_write_file(manifest_path, with_nl, len + 1, err);
    free(with_nl);
    if (rc)
        goto done;
    remove_stale(lib_dir, files, n_files);
done:
    for (int i = 0; i < n_winners; i++)
        winner_free(&winners[i]);
    free(winners);
    for (int i = 0; i < n_files; i++)
        free(files[i]);
    free(files);
    cJSON_Delete(manifest);
    free(text);
    free(manifest_path);
    free(lib_dir);
    free(meta_backend);
    free(meta_name);
    free(meta_uuid);
    free(meta_cc);
    free(meta_version);
    return rc;
}
