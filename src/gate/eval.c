/* eval.c: the work of the gate child: compile one candidate, prove it on every input set of every
 * workload, time it, and report each step as a line on a pipe to the watchdog (isolate.c).
 *
 * Why a line protocol: the child may die at any instant (a wild pointer, a trap, a sticky CUDA
 * fault) or hang in a kernel. Everything it learned before that must survive it, so it streams each
 * fact as soon as it is known: "phase ..." lines are heartbeats that also tell the watchdog what
 * the child was doing when it went silent, "workload {json}" carries each finished workload,
 * "outcome NAME {json}" ends a verdict, and "fatal MESSAGE" says that no verdict is possible (no
 * device, unusable reference data). */
#include "gate.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

void kiln_gate_options_default(kiln_gate_options *opt) {
    memset(opt, 0, sizeof *opt);
    opt->backend = "cpu";
    opt->iters = 0;
    opt->warmup = -1;
    opt->max_sets = 0;
    opt->seed = 0x6b696c6eULL;
    opt->timeout_s = 10.0;
}

static void send_line(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void send_line(int fd, const char *fmt, ...) {
    if (fd < 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    char *line = NULL;
    int n = vasprintf(&line, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t off = 0, len = (size_t)n;
    while (off < len) {
        ssize_t w = write(fd, line + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    if (len == 0 || line[len - 1] != '\n') {
        ssize_t w = write(fd, "\n", 1);
        (void)w;
    }
    free(line);
}

static void send_json(int fd, const char *tag, cJSON *j) {
    char *s = cJSON_PrintUnformatted(j);
    send_line(fd, "%s %s", tag, s);
    free(s);
}

static kiln_outcome send_outcome(int fd, kiln_outcome o, cJSON *evidence) {
    char *s = cJSON_PrintUnformatted(evidence);
    send_line(fd, "outcome %s %s", kiln_outcome_name(o), s);
    free(s);
    cJSON_Delete(evidence);
    return o;
}

static kiln_outcome send_fatal(int fd, const char *msg) {
    send_line(fd, "fatal %s", msg);
    return KILN_OUTCOME_CRASHED;
}

/* One input set of one workload, resident on the device. */
typedef struct {
    kiln_st *host;        /* the set's file: inputs and reference outputs */
    kiln_devptr *in_dev;  /* per input (0 for scalars) */
    kiln_devptr *out_dev; /* per output */
    const void **ref_out; /* per output: reference bytes in host */
    const void **in_host; /* per input: uploaded bytes in host (NULL for scalars) */
    size_t *in_bytes, *out_bytes;
    /* parameter storage, one slot per signature parameter */
    union {
        kiln_devptr ptr;
        int64_t i64;
        int32_t i32;
        float f32;
        double f64;
        _Bool b;
    } * values;
    void **params;
} set_state;

typedef struct {
    const kiln_problem *p;
    kiln_backend *be;
    const kiln_signature *sig;
    kiln_module *mod;
    int fd;
    int w;
    double *max_abs_err; /* per workload, the largest error its proofs saw (reported with ok) */
    double *rel_l2_err;
} ctx;

static kiln_tolerance output_tolerance(const kiln_problem *p, const kiln_workload *w, int o) {
    if (w->has_tolerance)
        return w->tolerance;
    if (p->has_tolerance)
        return p->tolerance;
    return kiln_tolerance_default(p->outputs[o].dtype);
}

/* The persistent gate child (kiln_gate_serve) keeps the host copies of the input sets it loaded,
 * so that the next candidate on the same problem skips reading them again. Only on cuda: a device
 * kernel cannot write the child's host memory, a cpu candidate could. */
typedef struct {
    const kiln_refset *rs;
    kiln_st *st;
    size_t bytes;
} cached_set;

static struct {
    int on;
    size_t limit, bytes;
    int n, cap;
    cached_set *v;
} set_cache;

static void set_cache_clear(void) {
    for (int i = 0; i < set_cache.n; i++)
        kiln_st_free(set_cache.v[i].st);
    set_cache.n = 0;
    set_cache.bytes = 0;
}

static int set_cache_open(const kiln_problem *p, int w, const kiln_refset *rs, kiln_st **out,
                          kiln_err *err) {
    if (!set_cache.on)
        return kiln_refset_open(p, w, rs, out, err);
    for (int i = 0; i < set_cache.n; i++)
        if (set_cache.v[i].rs == rs) {
            *out = set_cache.v[i].st;
            return KILN_OK;
        }
    int rc = kiln_refset_open(p, w, rs, out, err);
    if (rc)
        return rc;
    size_t bytes = 0;
    for (int i = 0; i < kiln_st_count(*out); i++)
        bytes += kiln_st_at(*out, i)->n_bytes;
    if (set_cache.bytes + bytes > set_cache.limit)
        set_cache_clear();
    if (set_cache.n == set_cache.cap) {
        set_cache.cap = set_cache.cap ? 2 * set_cache.cap : 16;
        set_cache.v = xrealloc(set_cache.v, (size_t)set_cache.cap * sizeof *set_cache.v);
    }
    set_cache.v[set_cache.n++] = (cached_set){rs, *out, bytes};
    set_cache.bytes += bytes;
    return KILN_OK;
}

static void set_cache_release(kiln_st *st) {
    for (int i = 0; set_cache.on && i < set_cache.n; i++)
        if (set_cache.v[i].st == st)
            return;
    kiln_st_free(st);
}

static void set_free(ctx *c, set_state *s) {
    const kiln_problem *p = c->p;
    for (int i = 0; s->in_dev && i < p->n_inputs; i++)
        if (s->in_dev[i])
            c->be->ops->free(c->be, s->in_dev[i]);
    for (int o = 0; s->out_dev && o < p->n_outputs; o++)
        if (s->out_dev[o])
            c->be->ops->free(c->be, s->out_dev[o]);
    free(s->in_dev);
    free(s->out_dev);
    free(s->ref_out);
    free(s->in_host);
    free(s->in_bytes);
    free(s->out_bytes);
    free(s->values);
    free(s->params);
    if (s->host)
        set_cache_release(s->host);
    memset(s, 0, sizeof *s);
}

/* Loads set `si` of workload c->w, uploads its inputs, allocates its outputs and fills the
 * parameter values in ABI order. */
static int set_load(ctx *c, const kiln_refdata *ref, int si, kiln_devptr scratch, set_state *s,
                    kiln_err *err) {
    const kiln_problem *p = c->p;
    const kiln_workload *w = &p->workloads[c->w];
    const kiln_refset *rs = &ref->workloads[c->w].sets[si];
    memset(s, 0, sizeof *s);
    int rc = set_cache_open(p, c->w, rs, &s->host, err);
    if (rc)
        return rc;
    s->in_dev = xcalloc((size_t)p->n_inputs, sizeof *s->in_dev);
    s->out_dev = xcalloc((size_t)p->n_outputs, sizeof *s->out_dev);
    s->ref_out = xcalloc((size_t)p->n_outputs, sizeof *s->ref_out);
    s->in_host = xcalloc((size_t)p->n_inputs, sizeof *s->in_host);
    s->in_bytes = xcalloc((size_t)p->n_inputs, sizeof *s->in_bytes);
    s->out_bytes = xcalloc((size_t)p->n_outputs, sizeof *s->out_bytes);
    s->values = xcalloc((size_t)c->sig->n, sizeof *s->values);
    s->params = xcalloc((size_t)c->sig->n, sizeof *s->params);
    int k = 0;
    char key[160];
    for (int i = 0; i < p->n_inputs; i++, k++) {
        const kiln_tensor_spec *t = &p->inputs[i];
        if (t->is_scalar) {
            double v = rs->scalars[i];
            switch (c->sig->p[k].kind) {
            case KILN_PARAM_I64:
                s->values[k].i64 = (int64_t)v;
                break;
            case KILN_PARAM_I32:
                s->values[k].i32 = (int32_t)v;
                break;
            case KILN_PARAM_F32:
                s->values[k].f32 = (float)v;
                break;
            case KILN_PARAM_F64:
                s->values[k].f64 = v;
                break;
            case KILN_PARAM_BOOL:
                s->values[k].b = v != 0;
                break;
            case KILN_PARAM_PTR:
                KILN_ASSERT(!"scalar input with a pointer parameter");
            }
            continue;
        }
        snprintf(key, sizeof key, "input.%s", t->name);
        const kiln_st_tensor *st = kiln_st_find(s->host, key);
        KILN_ASSERT(st); /* kiln_refset_open checked it */
        s->in_host[i] = st->data;
        s->in_bytes[i] = st->n_bytes;
        if ((rc = c->be->ops->alloc(c->be, st->n_bytes, 0, &s->in_dev[i], err)))
            return rc;
        if ((rc = c->be->ops->upload(c->be, s->in_dev[i], st->data, st->n_bytes, err)))
            return rc;
        s->values[k].ptr = s->in_dev[i];
    }
    for (int o = 0; o < p->n_outputs; o++, k++) {
        snprintf(key, sizeof key, "output.%s", p->outputs[o].name);
        const kiln_st_tensor *st = kiln_st_find(s->host, key);
        KILN_ASSERT(st);
        s->ref_out[o] = st->data;
        s->out_bytes[o] = st->n_bytes;
        if ((rc = c->be->ops->alloc(c->be, st->n_bytes, 0, &s->out_dev[o], err)))
            return rc;
        s->values[k].ptr = s->out_dev[o];
    }
    for (int a = 0; a < p->n_axes; a++, k++)
        s->values[k].i64 = w->axis_values[a];
    if (k < c->sig->n)
        s->values[k++].ptr = scratch;
    KILN_ASSERT(k == c->sig->n);
    for (int i = 0; i < c->sig->n; i++)
        s->params[i] = &s->values[i];
    return KILN_OK;
}

static int poison_outputs(ctx *c, set_state *s, int round, void **host_buf, kiln_err *err) {
    const kiln_problem *p = c->p;
    for (int o = 0; o < p->n_outputs; o++) {
        size_t n = s->out_bytes[o] / kiln_dtype_size(p->outputs[o].dtype);
        kiln_poison_fill(p->outputs[o].dtype, host_buf[o], n, round);
        int rc = c->be->ops->upload(c->be, s->out_dev[o], host_buf[o], s->out_bytes[o], err);
        if (rc)
            return rc;
    }
    return KILN_OK;
}

/* Maps a backend status from running the candidate to an outcome and its evidence. */
static kiln_outcome run_failure(ctx *c, int rc, const char *phase, const kiln_err *err) {
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "phase", phase);
    cJSON_AddNumberToObject(ev, "workload_index", c->w);
    if (rc == KILN_ERR_RESOURCE) {
        cJSON_AddStringToObject(ev, "message", err->msg);
        return send_outcome(c->fd, KILN_OUTCOME_RESOURCE, ev);
    }
    cJSON_AddNullToObject(ev, "signal");
    cJSON_AddStringToObject(ev, "error", err->msg);
    return send_outcome(c->fd, KILN_OUTCOME_CRASHED, ev);
}

static int run_once(ctx *c, const kiln_launch_plan *plan, set_state *s, kiln_devptr scratch,
                    size_t scratch_bytes, kiln_err *err) {
    int rc = KILN_OK;
    if (scratch_bytes)
        rc = c->be->ops->memset8(c->be, scratch, 0, scratch_bytes, err);
    if (!rc)
        rc = c->be->ops->launch(c->be, c->mod, plan, s->params, err);
    return rc;
}

static void add_where(cJSON *ev, ctx *c, int si, const kiln_refdata *ref) {
    const kiln_workload *w = &c->p->workloads[c->w];
    cJSON_AddStringToObject(ev, "workload", w->uuid ? w->uuid : "");
    cJSON_AddNumberToObject(ev, "workload_index", c->w);
    cJSON_AddNumberToObject(ev, "set", si);
    cJSON_AddStringToObject(ev, "set_kind",
                            ref->workloads[c->w].sets[si].is_real ? "real" : "random");
}

static cJSON *number_or_string(double v) {
    if (isnan(v))
        return cJSON_CreateString("nan");
    if (isinf(v))
        return cJSON_CreateString(v > 0 ? "inf" : "-inf");
    return cJSON_CreateNumber(v);
}

/* Checks every output of set si (downloaded into host_buf) and that the inputs are untouched.
 * Returns OK or sends the failing outcome. */
static kiln_outcome check_set(ctx *c, const kiln_refdata *ref, int si, set_state *s,
                              void **host_buf, unsigned char **masks, int audit) {
    const kiln_problem *p = c->p;
    const kiln_workload *w = &p->workloads[c->w];
    for (int o = 0; o < p->n_outputs; o++) {
        kiln_dtype t = p->outputs[o].dtype;
        size_t n = s->out_bytes[o] / kiln_dtype_size(t);
        kiln_tolerance tol = output_tolerance(p, w, o);
        kiln_check chk;
        kiln_check_output(t, host_buf[o], s->ref_out[o], n, masks ? masks[o] : NULL, &tol, &chk);
        if (chk.outcome == KILN_OUTCOME_OK) {
            if (chk.max_abs_err > c->max_abs_err[c->w])
                c->max_abs_err[c->w] = chk.max_abs_err;
            if (chk.rel_l2_err > c->rel_l2_err[c->w])
                c->rel_l2_err[c->w] = chk.rel_l2_err;
            continue;
        }
        cJSON *ev = cJSON_CreateObject();
        add_where(ev, c, si, ref);
        cJSON_AddStringToObject(ev, "output", p->outputs[o].name);
        cJSON_AddNumberToObject(ev, "n_elements", (double)chk.n_elements);
        cJSON_AddBoolToObject(ev, "audit", audit);
        if (chk.outcome == KILN_OUTCOME_UNWRITTEN) {
            cJSON_AddNumberToObject(ev, "n_unwritten", (double)chk.n_unwritten);
            cJSON_AddNumberToObject(ev, "first_index", (double)chk.first_unwritten);
        } else if (chk.outcome == KILN_OUTCOME_NAN) {
            cJSON_AddNumberToObject(ev, "index", (double)chk.nan_index);
            cJSON_AddItemToObject(ev, "value", number_or_string(chk.nan_value));
            cJSON_AddItemToObject(ev, "expected", number_or_string(chk.nan_expected));
        } else {
            cJSON_AddItemToObject(ev, "max_abs_err", number_or_string(chk.max_abs_err));
            cJSON_AddItemToObject(ev, "rel_l2_err", number_or_string(chk.rel_l2_err));
            cJSON_AddNumberToObject(ev, "n_bad", (double)chk.n_bad);
            cJSON_AddNumberToObject(ev, "first_bad_index", (double)chk.first_bad);
            if (chk.first_bad >= 0) {
                cJSON_AddItemToObject(ev, "first_bad_value", number_or_string(chk.first_bad_value));
                cJSON_AddItemToObject(ev, "first_bad_expected",
                                      number_or_string(chk.first_bad_expected));
            }
            cJSON *tj = cJSON_AddObjectToObject(ev, "tolerance");
            cJSON_AddNumberToObject(tj, "atol", tol.atol);
            cJSON_AddNumberToObject(tj, "rtol", tol.rtol);
            cJSON_AddNumberToObject(tj, "rel_l2", tol.rel_l2);
        }
        return send_outcome(c->fd, chk.outcome, ev);
    }
    return KILN_OUTCOME_OK;
}

static kiln_outcome check_inputs(ctx *c, const kiln_refdata *ref, int si, set_state *s) {
    const kiln_problem *p = c->p;
    kiln_err err;
    for (int i = 0; i < p->n_inputs; i++) {
        if (!s->in_host[i])
            continue;
        void *buf = xmalloc(s->in_bytes[i]);
        int rc = c->be->ops->download(c->be, buf, s->in_dev[i], s->in_bytes[i], &err);
        int same = rc == KILN_OK && memcmp(buf, s->in_host[i], s->in_bytes[i]) == 0;
        free(buf);
        if (rc)
            return run_failure(c, rc, "prove", &err);
        if (!same) {
            cJSON *ev = cJSON_CreateObject();
            add_where(ev, c, si, ref);
            cJSON_AddStringToObject(ev, "reason", "input_modified");
            cJSON_AddStringToObject(ev, "input", p->inputs[i].name);
            cJSON_AddBoolToObject(ev, "audit", 0);
            return send_outcome(c->fd, KILN_OUTCOME_MISMATCH, ev);
        }
    }
    return KILN_OUTCOME_OK;
}

static int download_outputs(ctx *c, set_state *s, void **host_buf, kiln_err *err) {
    for (int o = 0; o < c->p->n_outputs; o++) {
        int rc = c->be->ops->download(c->be, host_buf[o], s->out_dev[o], s->out_bytes[o], err);
        if (rc)
            return rc;
    }
    return KILN_OK;
}

static int any_integer_output(const kiln_problem *p) {
    for (int o = 0; o < p->n_outputs; o++)
        if (!kiln_dtype_is_float(p->outputs[o].dtype))
            return 1;
    return 0;
}

/* Proves set si: one poison round for float outputs; for integer outputs two rounds with different
 * poison bytes, an element counting as written when it differs from the poison in either round. */
static kiln_outcome prove_set(ctx *c, const kiln_refdata *ref, const kiln_launch_plan *plan, int si,
                              set_state *s, kiln_devptr scratch, void **host_buf) {
    const kiln_problem *p = c->p;
    int rounds = any_integer_output(p) ? 2 : 1;
    unsigned char **masks = NULL;
    kiln_err err;
    kiln_outcome result = KILN_OUTCOME_OK;
    if (rounds == 2) {
        masks = xcalloc((size_t)p->n_outputs, sizeof *masks);
        for (int o = 0; o < p->n_outputs; o++)
            masks[o] = xcalloc(s->out_bytes[o] / kiln_dtype_size(p->outputs[o].dtype) + 1, 1);
    }
    for (int r = 0; r < rounds; r++) {
        send_line(c->fd, "phase prove %d %d", c->w, si);
        int rc = poison_outputs(c, s, r, host_buf, &err);
        if (!rc)
            rc = run_once(c, plan, s, scratch, plan->scratch_bytes, &err);
        if (!rc)
            rc = c->be->ops->sync(c->be, &err);
        if (!rc)
            rc = download_outputs(c, s, host_buf, &err);
        if (rc) {
            result = run_failure(c, rc, "prove", &err);
            goto done;
        }
        for (int o = 0; masks && o < p->n_outputs; o++) {
            kiln_dtype t = p->outputs[o].dtype;
            size_t n = s->out_bytes[o] / kiln_dtype_size(t);
            for (size_t i = 0; i < n; i++)
                masks[o][i] |= (unsigned char)!kiln_poison_is(t, host_buf[o], i, r);
        }
    }
    result = check_set(c, ref, si, s, host_buf, masks, 0);
    if (result == KILN_OUTCOME_OK)
        result = check_inputs(c, ref, si, s);
done:
    for (int o = 0; masks && o < p->n_outputs; o++)
        free(masks[o]);
    free(masks);
    return result;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double percentile(const double *sorted, int n, double q) {
    double pos = q * (n - 1);
    int lo = (int)pos;
    int hi = lo + 1 < n ? lo + 1 : lo;
    return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
}

/* Times workload c->w over its sets; fills the timing fields of wj. */
static kiln_outcome time_workload(ctx *c, const kiln_refdata *ref, const kiln_launch_plan *plan,
                                  set_state *sets, int n_sets, kiln_devptr scratch, void **host_buf,
                                  const kiln_gate_options *opt, cJSON *wj, double *median_out) {
    int cuda = strcmp(c->be->ops->name, "cuda") == 0;
    int iters = opt->iters > 0 ? opt->iters : (cuda ? 50 : 10);
    int warmup = opt->warmup >= 0 ? opt->warmup : (cuda ? 5 : 1);
    kiln_err err;
    kiln_timer *timer = NULL;
    double *times = xcalloc((size_t)iters, sizeof *times);
    kiln_outcome result = KILN_OUTCOME_OK;
    /* The audit iteration is drawn from the seed and the workload so that runs are reproducible. */
    uint64_t h = kiln_fnv1a(opt->seed, &c->w, sizeof c->w);
    int audit_i = (int)(h % (uint64_t)iters);
    int rc = c->be->ops->timer_create(c->be, &timer, &err);
    for (int i = 0; rc == KILN_OK && i < warmup; i++) {
        send_line(c->fd, "phase time %d", c->w);
        rc = run_once(c, plan, &sets[i % n_sets], scratch, plan->scratch_bytes, &err);
        if (!rc)
            rc = c->be->ops->sync(c->be, &err);
    }
    for (int i = 0; rc == KILN_OK && i < iters; i++) {
        send_line(c->fd, "phase time %d", c->w);
        set_state *s = &sets[i % n_sets];
        int audit = i == audit_i;
        if (audit)
            rc = poison_outputs(c, s, 0, host_buf, &err);
        if (!rc)
            rc = c->be->ops->flush_cache(c->be, &err);
        if (!rc)
            rc = c->be->ops->timer_start(c->be, timer, &err);
        if (!rc)
            rc = run_once(c, plan, s, scratch, plan->scratch_bytes, &err);
        if (!rc)
            rc = c->be->ops->timer_stop(c->be, timer, &err);
        if (!rc)
            rc = c->be->ops->sync(c->be, &err);
        if (!rc)
            rc = c->be->ops->timer_elapsed_us(c->be, timer, &times[i], &err);
        if (!rc && audit) {
            rc = download_outputs(c, s, host_buf, &err);
            if (!rc) {
                /* integer outputs: round-0 poison only here; the proof already did both rounds */
                result = check_set(c, ref, i % n_sets, s, host_buf, NULL, 1);
                if (result != KILN_OUTCOME_OK)
                    goto done;
            }
        }
    }
    if (rc) {
        result = run_failure(c, rc, "time", &err);
        goto done;
    }
    qsort(times, (size_t)iters, sizeof *times, cmp_double);
    double med = percentile(times, iters, 0.5);
    cJSON *tj = cJSON_AddObjectToObject(wj, "time_us");
    cJSON_AddNumberToObject(tj, "median", med);
    cJSON_AddNumberToObject(tj, "min", times[0]);
    cJSON_AddNumberToObject(tj, "max", times[iters - 1]);
    cJSON_AddNumberToObject(
        tj, "spread_pct",
        med > 0 ? 100.0 * (percentile(times, iters, 0.9) - percentile(times, iters, 0.1)) / med
                : 0);
    cJSON_AddNumberToObject(tj, "n", iters);
    cJSON_AddNumberToObject(tj, "audit_iteration", audit_i);
    *median_out = med;
done:
    if (timer)
        c->be->ops->timer_destroy(c->be, timer);
    free(times);
    return result;
}

/* Pass 0 proves workload c->w on every input set; pass 1 (only once every workload is proved: a
 * kernel that is wrong anywhere is never timed) loads the sets again and times it. */
static kiln_outcome eval_workload(ctx *c, const kiln_refdata *ref, const kiln_abi *abi,
                                  const kiln_ceilings *ceil, const kiln_gate_options *opt,
                                  int pass) {
    const kiln_problem *p = c->p;
    const kiln_workload *w = &p->workloads[c->w];
    kiln_err err;
    kiln_launch_plan plan;
    kiln_outcome result = KILN_OUTCOME_OK;
    int n_sets = ref->workloads[c->w].n_sets;
    if (opt->max_sets > 0 && n_sets > opt->max_sets)
        n_sets = opt->max_sets;
    set_state *sets = xcalloc((size_t)n_sets, sizeof *sets);
    void **host_buf = xcalloc((size_t)p->n_outputs, sizeof *host_buf);
    kiln_devptr scratch = 0;
    cJSON *wj = cJSON_CreateObject();

    int rc = kiln_abi_plan(abi, p, w, &plan, &err);
    if (rc) {
        cJSON *ev = cJSON_CreateObject();
        cJSON_AddStringToObject(ev, "message", err.msg);
        cJSON_AddNumberToObject(ev, "workload_index", c->w);
        result = send_outcome(
            c->fd, rc == KILN_ERR_RESOURCE ? KILN_OUTCOME_RESOURCE : KILN_OUTCOME_COMPILE_ERROR,
            ev);
        goto done;
    }
    if (plan.scratch_bytes &&
        (rc = c->be->ops->alloc(c->be, plan.scratch_bytes, 0, &scratch, &err)))
        goto setup_failed;
    for (int si = 0; si < n_sets; si++) {
        send_line(c->fd, "phase load %d %d", c->w, si);
        if ((rc = set_load(c, ref, si, scratch, &sets[si], &err)))
            goto setup_failed;
    }
    for (int o = 0; o < p->n_outputs; o++)
        host_buf[o] = xmalloc(sets[0].out_bytes[o] ? sets[0].out_bytes[o] : 1);

    cJSON_AddNumberToObject(wj, "index", c->w);
    cJSON_AddStringToObject(wj, "uuid", w->uuid ? w->uuid : "");
    cJSON *axes = cJSON_AddObjectToObject(wj, "axes");
    for (int a = 0; a < p->n_axes; a++)
        cJSON_AddNumberToObject(axes, p->axes[a].name, (double)w->axis_values[a]);

    for (int si = 0; pass == 0 && si < n_sets; si++) {
        result = prove_set(c, ref, &plan, si, &sets[si], scratch, host_buf);
        if (result != KILN_OUTCOME_OK)
            goto done;
    }
    if (pass == 0 && !opt->no_time)
        goto done; /* timed, and reported, in pass 1 */
    cJSON_AddNumberToObject(wj, "proved_sets", n_sets);
    cJSON_AddNumberToObject(wj, "max_abs_err", c->max_abs_err[c->w]);
    cJSON_AddNumberToObject(wj, "rel_l2_err", c->rel_l2_err[c->w]);
    double min_bytes = kiln_problem_min_bytes(p, w);
    double ref_us = ref->workloads[c->w].ref_time_us;
    cJSON_AddNumberToObject(wj, "min_bytes", min_bytes);
    if (p->flops >= 0)
        cJSON_AddNumberToObject(wj, "flops", p->flops);
    if (ref_us >= 0)
        cJSON_AddNumberToObject(wj, "ref_time_us", ref_us);
    else
        cJSON_AddNullToObject(wj, "ref_time_us");
    double sol_us = min_bytes / (ceil->copy_gbps * 1e3);
    if (p->flops > 0 && p->flops / (ceil->fma_gflops * 1e3) > sol_us)
        sol_us = p->flops / (ceil->fma_gflops * 1e3);
    cJSON_AddNumberToObject(wj, "sol_time_us", sol_us);
    if (opt->no_time) {
        cJSON_AddNullToObject(wj, "time_us");
    } else {
        double med = 0;
        result = time_workload(c, ref, &plan, sets, n_sets, scratch, host_buf, opt, wj, &med);
        if (result != KILN_OUTCOME_OK)
            goto done;
        cJSON_AddNumberToObject(wj, "gbps", med > 0 ? min_bytes / (med * 1e3) : 0);
        if (p->flops > 0)
            cJSON_AddNumberToObject(wj, "gflops", med > 0 ? p->flops / (med * 1e3) : 0);
        cJSON_AddNumberToObject(wj, "sol_pct", med > 0 ? 100.0 * sol_us / med : 0);
        double s = kiln_sol_score(med, sol_us, ref_us);
        if (s >= 0)
            cJSON_AddNumberToObject(wj, "sol_score", s);
        else
            cJSON_AddNullToObject(wj, "sol_score");
    }
    send_json(c->fd, "workload", wj);
    goto done;

setup_failed:
    if (rc == KILN_ERR_LAUNCH || rc == KILN_ERR_RESOURCE)
        result = run_failure(c, rc, "prove", &err);
    else {
        send_fatal(c->fd, err.msg);
        result = KILN_OUTCOME_CRASHED;
    }
done:
    for (int si = 0; si < n_sets; si++)
        set_free(c, &sets[si]);
    free(sets);
    for (int o = 0; o < p->n_outputs; o++)
        free(host_buf[o]);
    free(host_buf);
    if (scratch)
        c->be->ops->free(c->be, scratch);
    cJSON_Delete(wj);
    return result;
}

/* Opens the backend and gets its ceilings; sends "fatal" and returns non-zero when it cannot. */
static int gate_open(const kiln_gate_options *opt, int fd, kiln_backend **be, kiln_ceilings *ceil) {
    kiln_err err;
    send_line(fd, "phase init");
    if (kiln_backend_open(opt->backend, opt->device, be, &err)) {
        send_fatal(fd, err.msg);
        return -1;
    }
    send_line(fd, "phase ceilings");
    if (kiln_ceilings_get(*be, ceil, &err)) {
        char *m = xasprintf("measuring the device's ceilings failed: %s", err.msg);
        send_fatal(fd, m);
        free(m);
        kiln_backend_close(*be);
        *be = NULL;
        return -1;
    }
    return 0;
}

static void send_device(int fd, kiln_backend *be, const kiln_ceilings *ceil) {
    kiln_device_info info;
    be->ops->device_info(be, &info);
    cJSON *dj = cJSON_CreateObject();
    cJSON_AddStringToObject(dj, "name", info.name);
    cJSON_AddStringToObject(dj, "uuid", info.uuid);
    cJSON_AddNumberToObject(dj, "sms", info.n_sms);
    cJSON_AddNumberToObject(dj, "l2_bytes", (double)info.l2_bytes);
    if (strcmp(be->ops->name, "cuda") == 0) {
        char cc[16];
        snprintf(cc, sizeof cc, "%d.%d", info.cc_major, info.cc_minor);
        cJSON_AddStringToObject(dj, "compute_capability", cc);
    }
    cJSON_AddNumberToObject(dj, "ceiling_gbps", ceil->copy_gbps);
    cJSON_AddNumberToObject(dj, "ceiling_gflops", ceil->fma_gflops);
    send_json(fd, "device", dj);
    cJSON_Delete(dj);
}

/* Compiles source and proves and times it on an open backend. */
static kiln_outcome eval_candidate(kiln_backend *be, const kiln_ceilings *ceil,
                                   const kiln_problem *p, const kiln_refdata *ref,
                                   const char *source, const kiln_gate_options *opt, int fd) {
    kiln_err err;
    kiln_abi abi;
    memset(&abi, 0, sizeof abi);
    kiln_outcome result = KILN_OUTCOME_OK;
    int cuda = strcmp(be->ops->name, "cuda") == 0;
    send_device(fd, be, ceil);
    send_line(fd, "phase compile");
    double t0 = kiln_now_s();
    int rc = kiln_abi_parse(source, cuda, &abi, &err);
    if (rc) {
        cJSON *ev = cJSON_CreateObject();
        cJSON_AddStringToObject(ev, "message", err.msg);
        cJSON_AddStringToObject(ev, "log", err.msg);
        result = send_outcome(fd, KILN_OUTCOME_COMPILE_ERROR, ev);
        goto done;
    }
    kiln_signature sig;
    kiln_abi_signature(p, abi.scratch != NULL, cuda, &sig);
    kiln_module *mod = NULL;
    char *log = NULL;
    rc = be->ops->compile(be, source, &sig, &abi, &mod, &log, &err);
    if (rc) {
        cJSON *ev = cJSON_CreateObject();
        cJSON_AddStringToObject(ev, "message", err.msg);
        const char *l = log ? log : "";
        size_t len = strlen(l);
        cJSON_AddStringToObject(ev, "log", len > 16384 ? l + len - 16384 : l);
        free(log);
        if (rc == KILN_ERR_COMPILE)
            result = send_outcome(fd, KILN_OUTCOME_COMPILE_ERROR, ev);
        else if (rc == KILN_ERR_RESOURCE)
            result = send_outcome(fd, KILN_OUTCOME_RESOURCE, ev);
        else {
            cJSON_Delete(ev);
            result = send_fatal(fd, err.msg);
        }
        goto done;
    }
    free(log);
    send_line(fd, "compiled %.6f", kiln_now_s() - t0);

    ctx c = {.p = p, .be = be, .sig = &sig, .mod = mod, .fd = fd, .w = 0};
    c.max_abs_err = xcalloc((size_t)p->n_workloads + 1, sizeof *c.max_abs_err);
    c.rel_l2_err = xcalloc((size_t)p->n_workloads + 1, sizeof *c.rel_l2_err);
    for (int pass = 0; pass < (opt->no_time ? 1 : 2); pass++)
        for (int w = 0; w < p->n_workloads && result == KILN_OUTCOME_OK; w++) {
            c.w = w;
            result = eval_workload(&c, ref, &abi, ceil, opt, pass);
        }
    if (result == KILN_OUTCOME_OK)
        send_outcome(fd, KILN_OUTCOME_OK, cJSON_CreateObject());
    free(c.max_abs_err);
    free(c.rel_l2_err);
    be->ops->module_free(be, mod);
done:
    kiln_abi_free(&abi);
    return result;
}

kiln_outcome kiln_gate_eval_here(const kiln_problem *p, const kiln_refdata *ref,
                                 const char *kernel_path, const char *source,
                                 const kiln_gate_options *opt, int fd) {
    (void)kernel_path;
    kiln_backend *be = NULL;
    kiln_ceilings ceil;
    if (gate_open(opt, fd, &be, &ceil))
        return KILN_OUTCOME_CRASHED;
    kiln_outcome result = eval_candidate(be, &ceil, p, ref, source, opt, fd);
    /* After a sticky CUDA fault the context is unusable: the caller exits this process anyway. */
    if (result != KILN_OUTCOME_CRASHED)
        kiln_backend_close(be);
    return result;
}

/* Reads one line from fd into buf (without the newline); 0 at end of file. */
static int read_command(int fd, char *buf, size_t cap) {
    size_t n = 0;
    for (;;) {
        char ch;
        ssize_t r = read(fd, &ch, 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return 0;
        if (ch == '\n')
            break;
        if (n + 1 < cap)
            buf[n++] = ch;
    }
    buf[n] = 0;
    return 1;
}

void kiln_gate_serve(const kiln_gate_pair *pairs, int n_pairs, const kiln_gate_options *opt,
                     int cmd_fd, int fd) {
    kiln_backend *be = NULL;
    kiln_ceilings ceil;
    if (gate_open(opt, fd, &be, &ceil)) {
        send_line(fd, "done");
        return;
    }
    set_cache.on = strcmp(opt->backend, "cuda") == 0;
    const char *gb = getenv("KILN_GATE_CACHE_GB");
    set_cache.limit = (size_t)((gb && atof(gb) >= 0 ? atof(gb) : 32.0) * (1 << 30));
    char line[8192];
    while (read_command(cmd_fd, line, sizeof line)) {
        /* eval PAIR ITERS WARMUP MAX_SETS SEED NO_TIME TIMEOUT PATH */
        kiln_gate_options o = *opt;
        int pi = -1, used = 0;
        unsigned long long seed = 0;
        if (sscanf(line, "eval %d %d %d %d %llu %d %lf %n", &pi, &o.iters, &o.warmup, &o.max_sets,
                   &seed, &o.no_time, &o.timeout_s, &used) < 7 ||
            used == 0 || pi < 0 || pi >= n_pairs) {
            send_fatal(fd, "the gate child got a malformed command");
            send_line(fd, "done");
            continue;
        }
        o.seed = seed;
        const char *path = line + used;
        char *source = NULL;
        kiln_err err;
        kiln_outcome result;
        if (kiln_read_file(path, &source, NULL, &err) != KILN_OK)
            result = send_fatal(fd, err.msg);
        else
            result = eval_candidate(be, &ceil, pairs[pi].p, pairs[pi].ref, source, &o, fd);
        free(source);
        send_line(fd, "done");
        if (result == KILN_OUTCOME_CRASHED)
            return; /* the context may be lost: the parent starts a fresh child */
    }
    set_cache_clear();
    kiln_backend_close(be);
}
