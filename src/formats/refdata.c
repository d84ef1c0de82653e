/* refdata.c: reads the reference data manifest of a problem, checks that it belongs to the problem
 * as it is now, and opens its input sets with their tensors checked against the definition. */
#include "refdata.h"

#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/blake2b.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    const char *label;
    kiln_err *err;
} src;

static int fail(const src *s, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(const src *s, int status, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kiln_errf(s->err, status, "%s: %s", s->label, msg);
}

static const cJSON *get(const cJSON *obj, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

static int json_int(const cJSON *item, int64_t *out) {
    if (!cJSON_IsNumber(item))
        return -1;
    double v = item->valuedouble;
    if (!(fabs(v) <= 9007199254740992.0) || v != floor(v))
        return -1;
    *out = (int64_t)v;
    return 0;
}

/* A set's file must stay inside the reference directory. */
static int path_is_inside(const char *file) {
    if (!file[0] || file[0] == '/')
        return 0;
    for (const char *c = file; *c;) {
        const char *slash = strchr(c, '/');
        size_t n = slash ? (size_t)(slash - c) : strlen(c);
        if (n == 2 && c[0] == '.' && c[1] == '.')
            return 0;
        c += n + (slash ? 1 : 0);
    }
    return 1;
}

static int parse_set(const kiln_problem *p, const char *ref_dir, const cJSON *js, const char *field,
                     const src *s, kiln_refset *set) {
    if (!cJSON_IsObject(js))
        return fail(s, KILN_ERR_FORMAT, "%s: not an object", field);
    const cJSON *file = get(js, "file"), *kind = get(js, "kind"), *seed = get(js, "seed"),
                *scalars = get(js, "scalars"), *hash = get(js, "blake2b");
    if (!cJSON_IsString(file) || !path_is_inside(file->valuestring))
        return fail(s, KILN_ERR_FORMAT, "%s.file: not a relative path inside the directory", field);
    set->file = kiln_path_join(ref_dir, file->valuestring);
    struct stat sb;
    if (stat(set->file, &sb) != 0 || !S_ISREG(sb.st_mode))
        return fail(s, KILN_ERR_FORMAT, "%s.file: %s does not exist", field, set->file);
    if (!cJSON_IsString(hash) || strlen(hash->valuestring) != 32)
        return fail(s, KILN_ERR_FORMAT, "%s.blake2b: not the 32-hex-digit content hash of the file",
                    field);
    snprintf(set->blake2b, sizeof set->blake2b, "%s", hash->valuestring);
    if (!cJSON_IsString(kind) ||
        (strcmp(kind->valuestring, "real") != 0 && strcmp(kind->valuestring, "random") != 0))
        return fail(s, KILN_ERR_FORMAT, "%s.kind: not \"real\" or \"random\"", field);
    set->is_real = strcmp(kind->valuestring, "real") == 0;
    int64_t seed_value;
    if (seed && !cJSON_IsNull(seed) && json_int(seed, &seed_value) != 0)
        return fail(s, KILN_ERR_FORMAT, "%s.seed: not an integer", field);

    set->scalars = xcalloc((size_t)p->n_inputs + 1, sizeof *set->scalars);
    if (scalars && !cJSON_IsNull(scalars)) {
        if (!cJSON_IsObject(scalars))
            return fail(s, KILN_ERR_FORMAT, "%s.scalars: not an object", field);
        for (const cJSON *c = scalars->child; c; c = c->next) {
            int i = kiln_problem_input_index(p, c->string);
            if (i < 0 || !p->inputs[i].is_scalar)
                return fail(s, KILN_ERR_FORMAT,
                            "%s.scalars.%.100s: not a scalar input of the problem", field,
                            c->string);
        }
    }
    for (int i = 0; i < p->n_inputs; i++) {
        if (!p->inputs[i].is_scalar)
            continue;
        const cJSON *v = cJSON_IsObject(scalars) ? get(scalars, p->inputs[i].name) : NULL;
        if (!v)
            return fail(s, KILN_ERR_FORMAT, "%s.scalars.%s: missing", field, p->inputs[i].name);
        if (cJSON_IsBool(v))
            set->scalars[i] = cJSON_IsTrue(v) ? 1 : 0;
        else if (cJSON_IsNumber(v))
            set->scalars[i] = v->valuedouble;
        else
            return fail(s, KILN_ERR_FORMAT, "%s.scalars.%s: not a number or a bool", field,
                        p->inputs[i].name);
    }
    return KILN_OK;
}

/* "fp64_gap": per output {"points": [[x, y], ...], "rel_l2": r, "rms": s}, x ascending, all finite
 * and non-negative. An output the problem does not have is refused (the manifest is another's), and
 * one named twice. */
static int parse_gap(const kiln_problem *p, const cJSON *js, int wi, const src *s,
                     kiln_refworkload *rw) {
    rw->n_gap = p->n_outputs;
    rw->gap = xcalloc((size_t)(p->n_outputs ? p->n_outputs : 1), sizeof *rw->gap);
    if (!js || cJSON_IsNull(js))
        return KILN_OK;
    if (!cJSON_IsObject(js))
        return fail(s, KILN_ERR_FORMAT, "workloads[%d].fp64_gap: not an object", wi);
    for (const cJSON *g = js->child; g; g = g->next) {
        int o = 0;
        while (o < p->n_outputs && strcmp(p->outputs[o].name, g->string) != 0)
            o++;
        if (o == p->n_outputs)
            return fail(s, KILN_ERR_FORMAT,
                        "workloads[%d].fp64_gap.%s: the problem has no such output", wi, g->string);
        const cJSON *pts = get(g, "points"), *rel = get(g, "rel_l2"), *rms = get(g, "rms");
        if (!cJSON_IsArray(pts) || !cJSON_IsNumber(rel) || !(rel->valuedouble >= 0) ||
            !isfinite(rel->valuedouble) || !cJSON_IsNumber(rms) || !(rms->valuedouble >= 0) ||
            !isfinite(rms->valuedouble))
            return fail(s, KILN_ERR_FORMAT,
                        "workloads[%d].fp64_gap.%s: not {\"points\": [...], \"rel_l2\": R, "
                        "\"rms\": S} with R and S finite and non-negative",
                        wi, g->string);
        kiln_fp64_gap *gap = &rw->gap[o];
        if (gap->x)
            return fail(s, KILN_ERR_FORMAT, "workloads[%d].fp64_gap.%s: given twice", wi,
                        g->string);
        gap->rel_l2 = rel->valuedouble;
        gap->rms = rms->valuedouble;
        int n = cJSON_GetArraySize(pts);
        gap->x = xcalloc((size_t)(n ? n : 1), sizeof *gap->x);
        gap->y = xcalloc((size_t)(n ? n : 1), sizeof *gap->y);
        for (const cJSON *pt = pts->child; pt; pt = pt->next) {
            const cJSON *x = cJSON_GetArrayItem(pt, 0), *y = cJSON_GetArrayItem(pt, 1);
            if (!cJSON_IsArray(pt) || cJSON_GetArraySize(pt) != 2 || !cJSON_IsNumber(x) ||
                !cJSON_IsNumber(y) || !(x->valuedouble >= 0) || !isfinite(x->valuedouble) ||
                !(y->valuedouble >= 0) || !isfinite(y->valuedouble) ||
                (gap->n && x->valuedouble < gap->x[gap->n - 1]))
                return fail(s, KILN_ERR_FORMAT,
                            "workloads[%d].fp64_gap.%s.points[%d]: not a pair [x, y] of finite "
                            "non-negative numbers, x ascending",
                            wi, g->string, gap->n);
            gap->x[gap->n] = x->valuedouble;
            gap->y[gap->n] = y->valuedouble;
            gap->n++;
        }
    }
    return KILN_OK;
}

/* The atol a kernel as close to the exact answer as the reference needs beyond t's once rtol is
 * widened by r. */
static double gap_atol(const kiln_fp64_gap *g, kiln_tolerance t, double r) {
    double a = 0;
    for (int k = 0; k < g->n; k++)
        a = fmax(a, g->y[k] - (t.rtol + r) * g->x[k] - t.atol);
    return a;
}

kiln_tolerance kiln_refworkload_tolerance(const kiln_refworkload *rw, int o, kiln_tolerance t,
                                          kiln_rounding *what) {
    kiln_rounding r = {0};
    if (o >= 0 && o < rw->n_gap && !t.sol && (rw->gap[o].n || rw->gap[o].rel_l2 > 0)) {
        const kiln_fp64_gap *g = &rw->gap[o];
        /* The widening (atol a, rtol rr) with the least allowance at a typical element, a + rr
         * rms: f(rr) = gap_atol(rr) + rr rms is convex (a maximum of lines plus a line), so a
         * ternary search over [0, hi] finds its minimum; at hi every point with x > 0 is inside
         * the widened rtol. A gap that grows with |ref| (a chain's rounding) widens rtol, one
         * near zero (a cancelling sum) atol. */
        double hi = 0;
        for (int k = 0; k < g->n; k++)
            if (g->x[k] > 0)
                hi = fmax(hi, (g->y[k] - t.rtol * g->x[k] - t.atol) / g->x[k]);
        double lo = 0;
        for (int i = 0; i < 100 && hi - lo > 1e-12 * (1 + hi); i++) {
            const double m1 = lo + (hi - lo) / 3, m2 = hi - (hi - lo) / 3;
            if (gap_atol(g, t, m1) + m1 * g->rms <= gap_atol(g, t, m2) + m2 * g->rms)
                hi = m2;
            else
                lo = m1;
        }
        double rr = hi > 0 ? hi : 0, a = gap_atol(g, t, rr);
        if (gap_atol(g, t, 0) <= a + rr * g->rms) /* atol alone is no worse */
            rr = 0, a = gap_atol(g, t, 0);
        r.need = a + rr * g->rms;
        r.cap = 10 * t.rtol * g->rms;
        if (r.need > r.cap || g->rel_l2 > 10 * t.rtol) {
            r.refused = 1;
        } else {
            r.atol = a;
            r.rtol = rr;
            r.rel_l2 = g->rel_l2;
            t.atol += r.atol;
            t.rtol += r.rtol;
            t.rel_l2 += r.rel_l2;
        }
    }
    if (what)
        *what = r;
    return t;
}

static int parse_workload(const kiln_problem *p, const char *ref_dir, const cJSON *js, int wi,
                          const src *s, kiln_refworkload *rw) {
    const kiln_workload *w = &p->workloads[wi];
    if (!cJSON_IsObject(js))
        return fail(s, KILN_ERR_FORMAT, "workloads[%d]: not an object", wi);
    const cJSON *uuid = get(js, "uuid"), *axes = get(js, "axes"), *t = get(js, "ref_time_us"),
                *sets = get(js, "sets");
    if (!cJSON_IsString(uuid) || strcmp(uuid->valuestring, w->uuid) != 0)
        return fail(s, KILN_ERR_FORMAT, "workloads[%d].uuid: not '%s', the problem's workload %d",
                    wi, w->uuid, wi);
    if (!cJSON_IsObject(axes))
        return fail(s, KILN_ERR_FORMAT, "workloads[%d].axes: not an object", wi);
    if (cJSON_GetArraySize(axes) != p->n_axes)
        return fail(s, KILN_ERR_FORMAT, "workloads[%d].axes: %d axes, the problem has %d", wi,
                    cJSON_GetArraySize(axes), p->n_axes);
    for (int a = 0; a < p->n_axes; a++) {
        const cJSON *v = get(axes, p->axes[a].name);
        int64_t value;
        if (!v || json_int(v, &value) != 0 || value != w->axis_values[a])
            return fail(s, KILN_ERR_FORMAT,
                        "workloads[%d].axes.%s: not %" PRId64 " as in the problem", wi,
                        p->axes[a].name, w->axis_values[a]);
    }
    rw->ref_time_us = -1;
    if (t && !cJSON_IsNull(t)) {
        if (!cJSON_IsNumber(t) || !(t->valuedouble >= 0) || !isfinite(t->valuedouble))
            return fail(s, KILN_ERR_FORMAT, "workloads[%d].ref_time_us: not a non-negative number",
                        wi);
        rw->ref_time_us = t->valuedouble;
    }
    const cJSON *sp = get(js, "ref_spread_pct");
    rw->ref_spread_pct = -1;
    if (sp && !cJSON_IsNull(sp)) {
        if (!cJSON_IsNumber(sp) || !(sp->valuedouble >= 0) || !isfinite(sp->valuedouble))
            return fail(s, KILN_ERR_FORMAT,
                        "workloads[%d].ref_spread_pct: not a non-negative number", wi);
        rw->ref_spread_pct = sp->valuedouble;
    }
    int rc = parse_gap(p, get(js, "fp64_gap"), wi, s, rw);
    if (rc != KILN_OK)
        return rc;
    if (!cJSON_IsArray(sets) || cJSON_GetArraySize(sets) == 0)
        return fail(s, KILN_ERR_FORMAT, "workloads[%d].sets: not a non-empty array", wi);
    rw->sets = xcalloc((size_t)cJSON_GetArraySize(sets), sizeof *rw->sets);
    for (const cJSON *c = sets->child; c; c = c->next) {
        char field[64];
        snprintf(field, sizeof field, "workloads[%d].sets[%d]", wi, rw->n_sets);
        rc = parse_set(p, ref_dir, c, field, s, &rw->sets[rw->n_sets]);
        rw->n_sets++; /* counted even on failure, so that free releases what parse_set allocated */
        if (rc != KILN_OK)
            return rc;
    }
    return KILN_OK;
}

int kiln_refdata_load(const char *ref_dir, const kiln_problem *p, kiln_refdata **out,
                      kiln_err *err) {
    KILN_ASSERT(ref_dir && p && out);
    *out = NULL;
    char *path = kiln_path_join(ref_dir, "manifest.json");
    char *text = NULL;
    size_t len = 0;
    cJSON *root = NULL;
    kiln_refdata *r = xcalloc(1, sizeof *r);
    r->dir = xstrdup(ref_dir);
    src s = {path, err};
    int rc = kiln_read_file(path, &text, &len, err);
    if (rc != KILN_OK)
        goto done;
    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) { /* NaN or Infinity, which Python's json writes by default, land here too */
        size_t line, col;
        kiln_text_position(text, len, end ? (size_t)(end - text) : 0, &line, &col);
        rc = fail(&s, KILN_ERR_FORMAT, "not valid JSON (error near line %zu, column %zu)", line,
                  col);
        goto done;
    }
    if (!cJSON_IsObject(root)) {
        rc = fail(&s, KILN_ERR_FORMAT, "not a JSON object");
        goto done;
    }
    const cJSON *version = get(root, "kiln_reference"), *name = get(root, "problem"),
                *key = get(root, "key"), *device = get(root, "device"),
                *workloads = get(root, "workloads");
    if (!cJSON_IsNumber(version)) {
        rc = fail(&s, KILN_ERR_FORMAT, "kiln_reference: missing (not a kiln reference manifest)");
        goto done;
    }
    if (version->valuedouble != 2) {
        rc = fail(&s, KILN_ERR_UNSUPPORTED, "kiln_reference: version %g, this kiln reads 2",
                  version->valuedouble);
        goto done;
    }
    if (!cJSON_IsString(name) || strcmp(name->valuestring, p->name) != 0) {
        rc = fail(&s, KILN_ERR_FORMAT, "problem: not '%s'", p->name);
        goto done;
    }
    char want_key[17];
    snprintf(want_key, sizeof want_key, "%016" PRIx64, p->source_key);
    if (!cJSON_IsString(key) || strcmp(key->valuestring, want_key) != 0) {
        rc = fail(&s, KILN_ERR_FORMAT,
                  "key: '%.40s' is not the problem's key %s (the reference data is stale)",
                  cJSON_IsString(key) ? key->valuestring : "?", want_key);
        goto done;
    }
    if (!cJSON_IsString(device) ||
        (strcmp(device->valuestring, "cpu") != 0 && strcmp(device->valuestring, "cuda") != 0)) {
        rc = fail(&s, KILN_ERR_FORMAT, "device: not \"cpu\" or \"cuda\"");
        goto done;
    }
    r->device = xstrdup(device->valuestring);
    if (!cJSON_IsArray(workloads) || cJSON_GetArraySize(workloads) != p->n_workloads) {
        rc = fail(&s, KILN_ERR_FORMAT, "workloads: not an array of the problem's %d workloads",
                  p->n_workloads);
        goto done;
    }
    r->workloads = xcalloc((size_t)p->n_workloads + 1, sizeof *r->workloads);
    for (const cJSON *c = workloads->child; c; c = c->next) {
        rc = parse_workload(p, ref_dir, c, r->n_workloads, &s, &r->workloads[r->n_workloads]);
        r->n_workloads++;
        if (rc != KILN_OK)
            goto done;
    }
    *out = r;
    r = NULL;
done:
    cJSON_Delete(root);
    free(text);
    free(path);
    kiln_refdata_free(r);
    return rc;
}

/* The file's identity for the verified-file shortcut. */
static int file_stamp(const char *path, int64_t *size, int64_t *mtime_ns, uint64_t *ino) {
    struct stat st;
    if (stat(path, &st) != 0)
        return -1;
    *size = (int64_t)st.st_size;
    *mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    *ino = (uint64_t)st.st_ino;
    return 0;
}

/* Hashes one set file; 0 when it matches, with what the file looked like recorded in it. */
static int verify_one(kiln_refset *set, char *got_hex) {
    int64_t size0, mtime0, size1, mtime1;
    uint64_t ino0, ino1;
    char *buf = NULL;
    size_t len = 0;
    set->verified = 0;
    if (file_stamp(set->file, &size0, &mtime0, &ino0) ||
        kiln_read_file(set->file, &buf, &len, NULL))
        return -1;
    kiln_blake2b_hex(buf, len, 16, got_hex);
    free(buf);
    if (strcmp(got_hex, set->blake2b) != 0)
        return 1;
    if (file_stamp(set->file, &size1, &mtime1, &ino1) || size1 != size0 || mtime1 != mtime0 ||
        ino1 != ino0)
        return 1; /* it changed while it was read */
    set->verified = 1;
    set->verified_size = size0;
    set->verified_mtime_ns = mtime0;
    set->verified_ino = ino0;
    return 0;
}

typedef struct {
    kiln_refset **sets;
    int n, next;
    pthread_mutex_t lock;
    int bad; /* index of a set that failed, -1 none */
    char bad_hex[33];
} verify_job;

static void *verify_worker(void *arg) {
    verify_job *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->lock);
        int i = j->next < j->n && j->bad < 0 ? j->next++ : -1;
        pthread_mutex_unlock(&j->lock);
        if (i < 0)
            return NULL;
        char hex[33] = "";
        if (verify_one(j->sets[i], hex) != 0) {
            pthread_mutex_lock(&j->lock);
            if (j->bad < 0) {
                j->bad = i;
                snprintf(j->bad_hex, sizeof j->bad_hex, "%s", hex[0] ? hex : "unreadable");
            }
            pthread_mutex_unlock(&j->lock);
        }
    }
}

int kiln_refdata_verify(kiln_refdata *r, kiln_err *err) {
    verify_job j = {.bad = -1};
    for (int w = 0; w < r->n_workloads; w++)
        j.n += r->workloads[w].n_sets;
    j.sets = xcalloc((size_t)j.n + 1, sizeof *j.sets);
    int k = 0;
    for (int w = 0; w < r->n_workloads; w++)
        for (int s = 0; s < r->workloads[w].n_sets; s++)
            j.sets[k++] = &r->workloads[w].sets[s];
    pthread_mutex_init(&j.lock, NULL);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int n_threads = cores > 1 ? (int)(cores < 16 ? cores : 16) : 1;
    if (n_threads > j.n)
        n_threads = j.n;
    pthread_t *t = xcalloc((size_t)n_threads + 1, sizeof *t);
    int *started = xcalloc((size_t)n_threads + 1, sizeof *started);
    for (int i = 1; i < n_threads;
         i++) /* a thread that cannot start leaves its share to the rest */
        started[i] = pthread_create(&t[i], NULL, verify_worker, &j) == 0;
    verify_worker(&j);
    for (int i = 1; i < n_threads; i++)
        if (started[i])
            pthread_join(t[i], NULL);
    free(started);
    pthread_mutex_destroy(&j.lock);
    int rc = KILN_OK;
    if (j.bad >= 0)
        rc = kiln_errf(err, KILN_ERR_FORMAT,
                       "%s: changed on disk since it was written (content hash %s, the manifest "
                       "says %s)",
                       j.sets[j.bad]->file, j.bad_hex, j.sets[j.bad]->blake2b);
    free(t);
    free(j.sets);
    return rc;
}

void kiln_refdata_free(kiln_refdata *r) {
    if (!r)
        return;
    for (int w = 0; w < r->n_workloads; w++) {
        for (int i = 0; i < r->workloads[w].n_sets; i++) {
            free(r->workloads[w].sets[i].file);
            free(r->workloads[w].sets[i].scalars);
        }
        free(r->workloads[w].sets);
        for (int o = 0; o < r->workloads[w].n_gap; o++) {
            free(r->workloads[w].gap[o].x);
            free(r->workloads[w].gap[o].y);
        }
        free(r->workloads[w].gap);
    }
    free(r->workloads);
    free(r->device);
    free(r->dir);
    free(r);
}

static int check_tensor(const kiln_problem *p, const kiln_workload *w, const kiln_tensor_spec *t,
                        const char *prefix, const kiln_st *st, const src *s) {
    char name[160];
    snprintf(name, sizeof name, "%s%s", prefix, t->name);
    const kiln_st_tensor *x = kiln_st_find(st, name);
    if (!x)
        return fail(s, KILN_ERR_FORMAT, "tensor '%s': missing", name);
    if (x->dtype != t->dtype)
        return fail(s, KILN_ERR_FORMAT, "tensor '%s': dtype %s, the problem says %s", name,
                    kiln_dtype_name(x->dtype), kiln_dtype_name(t->dtype));
    int64_t shape[KILN_MAX_DIMS];
    kiln_tensor_shape(p, t, w, shape);
    int same = x->ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++)
        same = x->shape[d] == shape[d];
    if (!same) {
        char have[200], want[200];
        size_t a = 0, b = 0;
        a += (size_t)snprintf(have, sizeof have, "[");
        b += (size_t)snprintf(want, sizeof want, "[");
        for (int d = 0; d < x->ndim && a < sizeof have; d++)
            a += (size_t)snprintf(have + a, sizeof have - a, "%s%" PRId64, d ? ", " : "",
                                  x->shape[d]);
        for (int d = 0; d < t->ndim && b < sizeof want; d++)
            b += (size_t)snprintf(want + b, sizeof want - b, "%s%" PRId64, d ? ", " : "", shape[d]);
        if (a < sizeof have)
            snprintf(have + a, sizeof have - a, "]");
        if (b < sizeof want)
            snprintf(want + b, sizeof want - b, "]");
        return fail(s, KILN_ERR_FORMAT, "tensor '%s': shape %s, the workload needs %s", name, have,
                    want);
    }
    return KILN_OK;
}

int kiln_refset_open(const kiln_problem *p, int workload, const kiln_refset *set, kiln_st **out,
                     kiln_err *err) {
    KILN_ASSERT(p && set && out && workload >= 0 && workload < p->n_workloads);
    *out = NULL;
    src s = {set->file, err};
    for (int i = 0; i < p->n_outputs; i++)
        if (p->outputs[i].is_scalar)
            return fail(&s, KILN_ERR_UNSUPPORTED,
                        "output '%s' is a scalar: kiln checks tensors only", p->outputs[i].name);
    char *buf = NULL;
    size_t len = 0;
    int64_t size, mtime;
    uint64_t ino;
    int unchanged = set->verified && file_stamp(set->file, &size, &mtime, &ino) == 0 &&
                    size == set->verified_size && mtime == set->verified_mtime_ns &&
                    ino == set->verified_ino;
    int rc = kiln_read_file(set->file, &buf, &len, err);
    if (rc != KILN_OK)
        return rc;
    char hex[33];
    if (unchanged)
        snprintf(hex, sizeof hex, "%s", set->blake2b); /* hashed by kiln_refdata_verify */
    else
        kiln_blake2b_hex(buf, len, 16, hex);
    if (strcmp(hex, set->blake2b) != 0) {
        free(buf);
        return fail(&s, KILN_ERR_FORMAT,
                    "changed on disk since it was written (content hash %s, the manifest says "
                    "%s): not used",
                    hex, set->blake2b);
    }
    kiln_st *st = NULL;
    rc = kiln_st_parse_owned(buf, len, set->file, &st, err);
    if (rc != KILN_OK)
        return rc;
    const kiln_workload *w = &p->workloads[workload];
    for (int i = 0; i < p->n_inputs && rc == KILN_OK; i++)
        if (!p->inputs[i].is_scalar)
            rc = check_tensor(p, w, &p->inputs[i], "input.", st, &s);
    for (int i = 0; i < p->n_outputs && rc == KILN_OK; i++)
        rc = check_tensor(p, w, &p->outputs[i], "output.", st, &s);
    if (rc != KILN_OK) {
        kiln_st_free(st);
        return rc;
    }
    *out = st;
    return KILN_OK;
}
