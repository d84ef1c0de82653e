/* eval.c: one candidate through the gate process: compile it, prove it on every input set of every
 * workload, time it with every run checked, and hold its times against the speed of light; each
 * step reported as a line to the watchdog (isolate.c reads them).
 *
 * Why every timed run is checked. A gate that proves a kernel once and then times it believes that
 * the kernel does the same work when it is timed; a hostile kernel does not (it counts its calls,
 * recognises the proof's poison, caches its answer by input address). So every run, proof or timed,
 * is the same: the input slot it reads is refilled with another input set (the data behind a
 * pointer changes from run to run), its outputs are filled with a poison pattern drawn afresh, and
 * after it the gate's check kernel compares the outputs with the masked reference of that set on
 * the device. Only the candidate's own launches (and the zeroing of its scratch) sit between the
 * timer's events. The runs of a batch are enqueued together and read back once, so checking costs
 * the device a read of the outputs and the references, not a round trip per run.
 *
 * Why timing adapts. The median of a kernel's times is known to a given precision after a number
 * of runs that depends on its spread: timing stops once the 95 % confidence interval of the median
 * (order statistics, no distribution assumed) is within ci_pct of it, or at iters. A challenger
 * racing an incumbent stops as soon as the low end of that interval is clearly above the
 * incumbent's median (race_factor), as `slower`, with its partial timing. */
#include "gate_impl.h"

#include "../backend/cpu.h"
#include "../backend/lt_call.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

void kiln_gate_options_default(kiln_gate_options *opt) {
    memset(opt, 0, sizeof *opt);
    opt->backend = "cpu";
    opt->iters = 0;
    opt->min_iters = 0;
    opt->ci_pct = 1.0;
    opt->warmup = -1;
    opt->max_sets = 0;
    opt->seed = 0;
    opt->timeout_s = 10.0;
    opt->race_factor = 1.3;
}

void kiln_gate_send_line(int fd, const char *fmt, ...) {
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
    kiln_gate_send_line(fd, "%s %s", tag, s);
    free(s);
}

static kiln_outcome send_outcome(int fd, kiln_outcome o, cJSON *evidence) {
    char *s = cJSON_PrintUnformatted(evidence);
    kiln_gate_send_line(fd, "outcome %s %s", kiln_outcome_name(o), s);
    free(s);
    cJSON_Delete(evidence);
    return o;
}

kiln_outcome kiln_gate_send_fatal(int fd, const char *msg) {
    kiln_gate_send_line(fd, "fatal %s", msg);
    return KILN_OUTCOME_CRASHED;
}

/* One candidate's evaluation. */
typedef struct {
    kiln_gate_proc *g;
    const kiln_problem *p;
    kiln_res_problem *rp;
    const kiln_signature *sig;
    kiln_module *mod;
    const kiln_gate_options *opt;
    int fd;
    int cuda;
    uint64_t rng;
    int w; /* the workload at hand */
    kiln_launch_plan plan;
    kiln_devptr scratch;
    size_t scratch_cap;
    double *max_abs_err, *rel_l2_err; /* per workload, the largest error its checks saw */
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
    uint64_t *poison; /* per output, this run's pattern */
} ctx;

/* The parameter values for a run reading input slot `slot` that holds set s. */
static void set_params(ctx *c, int slot, int s) {
    const kiln_problem *p = c->p;
    const kiln_res_workload *w = &c->rp->w[c->w];
    int k = 0;
    for (int i = 0; i < p->n_inputs; i++, k++) {
        if (!p->inputs[i].is_scalar) {
            c->values[k].ptr = w->slot[slot][i];
            continue;
        }
        double v = w->scalars[s][i];
        switch (c->sig->p[k].kind) {
        case KILN_PARAM_I64:
            c->values[k].i64 = (int64_t)v;
            break;
        case KILN_PARAM_I32:
            c->values[k].i32 = (int32_t)v;
            break;
        case KILN_PARAM_F32:
            c->values[k].f32 = (float)v;
            break;
        case KILN_PARAM_F64:
            c->values[k].f64 = v;
            break;
        case KILN_PARAM_BOOL:
            c->values[k].b = v != 0;
            break;
        case KILN_PARAM_PTR:
            KILN_ASSERT(!"scalar input with a pointer parameter");
        }
    }
    for (int o = 0; o < p->n_outputs; o++, k++)
        c->values[k].ptr = w->out[o];
    for (int a = 0; a < p->n_axes; a++, k++)
        c->values[k].i64 = p->workloads[c->w].axis_values[a];
    if (k < c->sig->n)
        c->values[k++].ptr = c->scratch;
    KILN_ASSERT(k == c->sig->n);
}

/* Readies one run: the candidate's global variables as loaded, the slot refilled with set s, the
 * outputs poisoned with fresh patterns, the parameters set. */
static int prepare_run(ctx *c, int slot, int s, kiln_err *err) {
    kiln_res_workload *w = &c->rp->w[c->w];
    kiln_backend *be = c->g->be;
    int rc = be->ops->reset_state ? be->ops->reset_state(be, c->mod, err) : KILN_OK;
    if (rc == KILN_OK)
        rc = kiln_resident_fill_slot(c->g->res, w, slot, s, err);
    for (int o = 0; o < c->p->n_outputs && rc == KILN_OK; o++) {
        kiln_dtype t = c->p->outputs[o].dtype;
        c->poison[o] = kiln_poison_draw(t, kiln_gate_random(&c->rng));
        rc = kiln_gate_dev_fill(c->g->dev, w->out[o], t, w->out_elems[o], c->poison[o], err);
    }
    set_params(c, slot, s);
    return rc;
}

static int run_candidate(ctx *c, kiln_err *err) {
    int rc = KILN_OK;
    if (c->plan.scratch_bytes)
        rc = c->g->be->ops->memset8(c->g->be, c->scratch, 0, c->plan.scratch_bytes, err);
    if (!rc)
        rc = c->g->be->ops->launch(c->g->be, c->mod, &c->plan, c->params, err);
    return rc;
}

/* Output o's tolerance on this workload: the problem's, widened by the reference's own rounding
 * where the reference data recorded it (refdata.h, "fp64_gap"); *what (may be NULL) says how. */
static kiln_tolerance output_tolerance(const ctx *c, int o, kiln_rounding *what) {
    return kiln_refworkload_tolerance(&c->rp->ref->workloads[c->w], o,
                                      kiln_problem_output_tolerance(c->p, c->w, o), what);
}

/* Enqueues the check of every output into summary slots base .. base + n_outputs - 1. */
static int enqueue_checks(ctx *c, int s, int base, kiln_err *err) {
    kiln_res_workload *w = &c->rp->w[c->w];
    int rc = KILN_OK;
    for (int o = 0; o < c->p->n_outputs && rc == KILN_OK; o++) {
        kiln_tolerance tol = output_tolerance(c, o, NULL);
        rc = kiln_gate_dev_check(c->g->dev, base + o, w->out[o], w->ref[s][o],
                                 c->p->outputs[o].dtype, w->out_elems[o], c->poison[o], c->g->key,
                                 &tol, err);
    }
    return rc;
}

/* The failure of running the candidate (or waiting for it) as an outcome with evidence. */
static kiln_outcome run_failure(ctx *c, int rc, const char *phase, const kiln_err *err) {
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "phase", phase);
    cJSON_AddNumberToObject(ev, "workload_index", c->w);
    if (rc == KILN_ERR_RESOURCE) {
        cJSON_AddStringToObject(ev, "message", err->msg);
        return send_outcome(c->fd, KILN_OUTCOME_RESOURCE, ev);
    }
    if (rc == KILN_ERR_TIMEOUT) {
        cJSON_AddNumberToObject(ev, "limit_s", c->opt->timeout_s);
        cJSON_AddStringToObject(ev, "message", err->msg);
        return send_outcome(c->fd, KILN_OUTCOME_TIMEOUT, ev);
    }
    if (rc != KILN_ERR_LAUNCH) {
        cJSON_Delete(ev);
        return kiln_gate_send_fatal(c->fd, err->msg);
    }
    /* the sandboxed cpu backend says "... died of SIGSEGV" when the candidate's process got one */
    const char *sig = strstr(err->msg, "died of SIG");
    if (sig) {
        char name[16];
        snprintf(name, sizeof name, "%.*s", (int)strspn(sig + 8, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
                 sig + 8);
        cJSON_AddStringToObject(ev, "signal", name);
    } else {
        cJSON_AddNullToObject(ev, "signal");
    }
    cJSON_AddStringToObject(ev, "error", err->msg);
    return send_outcome(c->fd, KILN_OUTCOME_CRASHED, ev);
}

static cJSON *number_or_string(double v) {
    if (isnan(v))
        return cJSON_CreateString("nan");
    if (isinf(v))
        return cJSON_CreateString(v > 0 ? "inf" : "-inf");
    return cJSON_CreateNumber(v);
}

static void add_where(cJSON *ev, ctx *c, int s, int run) {
    const kiln_workload *w = &c->p->workloads[c->w];
    cJSON_AddStringToObject(ev, "workload", w->uuid ? w->uuid : "");
    cJSON_AddNumberToObject(ev, "workload_index", c->w);
    cJSON_AddNumberToObject(ev, "set", s);
    cJSON_AddStringToObject(ev, "set_kind", c->rp->w[c->w].is_real[s] ? "real" : "random");
    if (run >= 0)
        cJSON_AddNumberToObject(ev, "timed_run", run);
    cJSON_AddStringToObject(ev, "phase", run >= 0 ? "time" : "prove");
}

/* The verdict on output o of a run on set s from its sums; sends the outcome when it fails. */
static kiln_outcome judge_output(ctx *c, int o, int s, int run, const kiln_check_sum *sum) {
    const kiln_problem *p = c->p;
    kiln_res_workload *w = &c->rp->w[c->w];
    kiln_dtype t = p->outputs[o].dtype;
    kiln_rounding rounding;
    kiln_tolerance tol = output_tolerance(c, o, &rounding);
    kiln_check chk;
    kiln_check_from_sum(sum, (int64_t)w->out_elems[o], &tol, &chk);
    if (chk.outcome == KILN_OUTCOME_OK) {
        if (chk.max_abs_err > c->max_abs_err[c->w])
            c->max_abs_err[c->w] = chk.max_abs_err;
        if (chk.rel_l2_err > c->rel_l2_err[c->w])
            c->rel_l2_err[c->w] = chk.rel_l2_err;
        return KILN_OUTCOME_OK;
    }
    cJSON *ev = cJSON_CreateObject();
    add_where(ev, c, s, run);
    cJSON_AddStringToObject(ev, "output", p->outputs[o].name);
    cJSON_AddNumberToObject(ev, "n_elements", (double)chk.n_elements);
    kiln_err err;
    double value = NAN, expected = NAN;
    int64_t at = chk.outcome == KILN_OUTCOME_NAN ? chk.nan_index : chk.first_bad;
    if (at < 0 && tol.sol)
        at = chk.first_over_cap;
    if (at >= 0 &&
        (kiln_gate_dev_element(c->g->dev, w->out[o], t, (size_t)at, 0, &value, &err) ||
         kiln_gate_dev_element(c->g->dev, w->ref[s][o], t, (size_t)at, c->g->key, &expected, &err)))
        value = expected = NAN;
    if (chk.outcome == KILN_OUTCOME_UNWRITTEN) {
        cJSON_AddNumberToObject(ev, "n_unwritten", (double)chk.n_unwritten);
        cJSON_AddNumberToObject(ev, "first_index", (double)chk.first_unwritten);
    } else if (chk.outcome == KILN_OUTCOME_NAN) {
        cJSON_AddNumberToObject(ev, "index", (double)chk.nan_index);
        cJSON_AddItemToObject(ev, "value", number_or_string(value));
        cJSON_AddItemToObject(ev, "expected", number_or_string(expected));
    } else {
        cJSON_AddItemToObject(ev, "max_abs_err", number_or_string(chk.max_abs_err));
        cJSON_AddItemToObject(ev, "rel_l2_err", number_or_string(chk.rel_l2_err));
        cJSON_AddNumberToObject(ev, "n_bad", (double)chk.n_bad);
        cJSON_AddNumberToObject(ev, "first_bad_index", (double)chk.first_bad);
        if (at >= 0) {
            cJSON_AddItemToObject(ev, "first_bad_value", number_or_string(value));
            cJSON_AddItemToObject(ev, "first_bad_expected", number_or_string(expected));
        }
        cJSON *tj = cJSON_AddObjectToObject(ev, "tolerance");
        cJSON_AddNumberToObject(tj, "atol", tol.atol);
        if (rounding.atol > 0) /* included in atol */
            cJSON_AddNumberToObject(tj, "atol_of_reference_rounding", rounding.atol);
        if (rounding.rtol > 0) /* included in rtol */
            cJSON_AddNumberToObject(tj, "rtol_of_reference_rounding", rounding.rtol);
        if (rounding.rel_l2 > 0) /* included in rel_l2 */
            cJSON_AddNumberToObject(tj, "rel_l2_of_reference_rounding", rounding.rel_l2);
        if (rounding.refused) {
            char *why = xasprintf("not widened: the reference's wider run is off by more than "
                                  "rounding (it needs %.3g more at an element of the output's RMS, "
                                  "over 10 x rtol x that RMS = %.3g: a jump such as a comparison, "
                                  "not rounding)",
                                  rounding.need, rounding.cap);
            cJSON_AddStringToObject(tj, "reference_rounding", why);
            free(why);
        }
        cJSON_AddNumberToObject(tj, "rtol", tol.rtol);
        if (tol.sol) {
            cJSON_AddStringToObject(tj, "rules", "sol-execbench");
            cJSON_AddNumberToObject(tj, "required_matched_ratio", tol.matched_ratio);
            if (tol.error_cap > 0)
                cJSON_AddNumberToObject(tj, "max_error_cap", tol.error_cap);
            cJSON_AddNumberToObject(ev, "matched_ratio", chk.matched_ratio);
            cJSON_AddNumberToObject(ev, "n_over_cap", (double)chk.n_over_cap);
        } else {
            cJSON_AddNumberToObject(tj, "rel_l2", tol.rel_l2);
        }
    }
    return send_outcome(c->fd, chk.outcome, ev);
}

/* Allocates the scratch memory the plan asks for (kept for the workloads that follow). */
static int ensure_scratch(ctx *c, kiln_err *err) {
    if (c->plan.scratch_bytes <= c->scratch_cap)
        return KILN_OK;
    if (c->scratch)
        c->g->be->ops->free(c->g->be, c->scratch);
    c->scratch = 0;
    c->scratch_cap = 0;
    int rc = c->g->be->ops->alloc(c->g->be, c->plan.scratch_bytes, KILN_ALLOC_CANDIDATE,
                                  &c->scratch, err);
    if (!rc)
        c->scratch_cap = c->plan.scratch_bytes;
    return rc;
}

/* Plans workload c->w: its launches and scratch. */
static kiln_outcome plan_workload(ctx *c, const kiln_abi *abi) {
    kiln_err err;
    int rc = kiln_abi_plan(abi, c->p, &c->p->workloads[c->w], &c->plan, &err);
    if (rc) {
        cJSON *ev = cJSON_CreateObject();
        cJSON_AddStringToObject(ev, "message", err.msg);
        cJSON_AddNumberToObject(ev, "workload_index", c->w);
        return send_outcome(
            c->fd, rc == KILN_ERR_RESOURCE ? KILN_OUTCOME_RESOURCE : KILN_OUTCOME_COMPILE_ERROR,
            ev);
    }
    if ((rc = ensure_scratch(c, &err))) {
        cJSON *ev = cJSON_CreateObject();
        cJSON_AddStringToObject(ev, "message", err.msg);
        cJSON_AddNumberToObject(ev, "workload_index", c->w);
        if (rc == KILN_ERR_RESOURCE || rc == KILN_ERR_BACKEND)
            return send_outcome(c->fd, KILN_OUTCOME_RESOURCE, ev);
        cJSON_Delete(ev);
        return run_failure(c, rc, "prove", &err);
    }
    return KILN_OUTCOME_OK;
}

/* Proves workload c->w on each of its first n input sets: one run per set, every output checked on
 * the device, every input compared with its pristine copy. */
static kiln_outcome prove_workload(ctx *c, int n) {
    const kiln_problem *p = c->p;
    kiln_res_workload *w = &c->rp->w[c->w];
    kiln_err err;
    int n_checks = p->n_outputs + p->n_inputs;
    int rc = kiln_gate_dev_reserve(c->g->dev, n_checks, &err);
    for (int s = 0; s < n && rc == KILN_OK; s++) {
        kiln_gate_send_line(c->fd, "phase prove %d %d %.6g", c->w, s, c->opt->timeout_s);
        if ((rc = prepare_run(c, s, s, &err)) || (rc = run_candidate(c, &err)) ||
            (rc = c->g->be->ops->wait(c->g->be, c->opt->timeout_s, &err)))
            return run_failure(c, rc, "prove", &err);
        rc = enqueue_checks(c, s, 0, &err);
        for (int i = 0; i < p->n_inputs && rc == KILN_OK; i++)
            if (w->slot[s][i])
                rc = kiln_gate_dev_diff(c->g->dev, p->n_outputs + i, w->slot[s][i], w->pool[s][i],
                                        w->in_bytes[i], &err);
        kiln_check_sum sums[KILN_MAX_PARAMS * 2];
        if (rc || (rc = c->g->be->ops->wait(c->g->be, 0, &err)) ||
            (rc = kiln_gate_dev_results(c->g->dev, n_checks, sums, &err)))
            return run_failure(c, rc, "prove", &err);
        for (int o = 0; o < p->n_outputs; o++) {
            kiln_outcome r = judge_output(c, o, s, -1, &sums[o]);
            if (r != KILN_OUTCOME_OK)
                return r;
        }
        for (int i = 0; i < p->n_inputs; i++)
            if (w->slot[s][i] && sums[p->n_outputs + i].n_bad) {
                cJSON *ev = cJSON_CreateObject();
                add_where(ev, c, s, -1);
                cJSON_AddStringToObject(ev, "input", p->inputs[i].name);
                cJSON_AddNumberToObject(ev, "bytes_changed", (double)sums[p->n_outputs + i].n_bad);
                return send_outcome(c->fd, KILN_OUTCOME_INPUT_MODIFIED, ev);
            }
    }
    return rc ? run_failure(c, rc, "prove", &err) : KILN_OUTCOME_OK;
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

/* The 95 % confidence interval of the median of n sorted times, by order statistics (the ranks
 * n/2 -+ 0.98 sqrt(n)), whatever the distribution. */
static void median_ci(const double *sorted, int n, double *lo, double *hi) {
    int a = (int)floor(n / 2.0 - 0.98 * sqrt((double)n));
    int b = (int)ceil(n / 2.0 + 0.98 * sqrt((double)n));
    *lo = sorted[a < 0 ? 0 : a];
    *hi = sorted[b > n - 1 ? n - 1 : b];
}

/* The state of one workload's timing (time_workload). */
typedef struct {
    kiln_timer **timers;
    int batch, max_iters, min_iters;
    double race, factor;
    double *times, *sorted; /* max_iters each */
    int done, stopped_slower;
    double lo, hi, med;
} timing;

static double spread_pct(const timing *t) {
    return t->med > 0
               ? 100.0 *
                     (percentile(t->sorted, t->done, 0.9) - percentile(t->sorted, t->done, 0.1)) /
                     t->med
               : 0;
}

/* One timing pass: batches of runs until the median is known to ci_pct (or max_iters, or the race
 * is lost). Each run on the next input set from the next slot, with a fresh poison, a cache flush
 * and a check. Returns the backend status; *result the verdict of the checks. */
static int timing_pass(ctx *c, timing *t, kiln_outcome *result, kiln_err *err) {
    const kiln_problem *p = c->p;
    kiln_res_workload *w = &c->rp->w[c->w];
    const kiln_gate_options *opt = c->opt;
    kiln_backend *be = c->g->be;
    int rc = KILN_OK;
    t->done = t->stopped_slower = 0;
    t->lo = t->hi = t->med = 0;
    while (rc == KILN_OK && t->done < t->max_iters) {
        int n = t->max_iters - t->done < t->batch ? t->max_iters - t->done : t->batch;
        kiln_gate_send_line(c->fd, "phase time %d -1 %.6g", c->w, n * opt->timeout_s);
        for (int k = 0; k < n && rc == KILN_OK; k++) {
            int i = t->done + k, s = i % w->n_sets, slot = i % w->n_slots;
            if (!(rc = prepare_run(c, slot, s, err)) && !(rc = be->ops->flush_cache(be, err)) &&
                !(rc = be->ops->timer_start(be, t->timers[k], err)) &&
                !(rc = run_candidate(c, err)) && !(rc = be->ops->timer_stop(be, t->timers[k], err)))
                rc = enqueue_checks(c, s, k * p->n_outputs, err);
        }
        if (rc || (rc = be->ops->wait(be, n * opt->timeout_s, err)))
            break;
        kiln_check_sum *sums = xcalloc((size_t)(n * p->n_outputs), sizeof *sums);
        rc = kiln_gate_dev_results(c->g->dev, n * p->n_outputs, sums, err);
        for (int k = 0; k < n && rc == KILN_OK && *result == KILN_OUTCOME_OK; k++) {
            int i = t->done + k;
            for (int o = 0; o < p->n_outputs && *result == KILN_OUTCOME_OK; o++)
                *result = judge_output(c, o, i % w->n_sets, i, &sums[k * p->n_outputs + o]);
            if (*result == KILN_OUTCOME_OK)
                rc = be->ops->timer_elapsed_us(be, t->timers[k], &t->times[i], err);
        }
        free(sums);
        if (rc || *result != KILN_OUTCOME_OK)
            break;
        t->done += n;
        memcpy(t->sorted, t->times, (size_t)t->done * sizeof *t->sorted);
        qsort(t->sorted, (size_t)t->done, sizeof *t->sorted, cmp_double);
        t->med = percentile(t->sorted, t->done, 0.5);
        median_ci(t->sorted, t->done, &t->lo, &t->hi);
        if (t->race > 0 && t->done >= 5 && t->lo > t->factor * t->race) {
            t->stopped_slower = 1;
            break;
        }
        if (t->done >= t->min_iters && opt->ci_pct > 0 && t->med > 0 &&
            (t->hi - t->lo) / 2 <= opt->ci_pct / 100.0 * t->med)
            break;
    }
    return rc;
}

/* Times workload c->w (timing_pass). A timing whose spread is over KILN_SPREAD_LIMIT_PCT (a
 * neighbour on the host, a clock change) is timed once more, and the steadier of the two is kept;
 * "retimed" says so, and "noisy" that even the kept one is over the limit. */
static kiln_outcome time_workload(ctx *c, cJSON *wj, double *median_out) {
    const kiln_problem *p = c->p;
    kiln_res_workload *w = &c->rp->w[c->w];
    const kiln_gate_options *opt = c->opt;
    timing t = {0}, first = {0};
    t.max_iters = opt->iters > 0 ? opt->iters : (c->cuda ? 100 : 20);
    t.min_iters = opt->min_iters > 0 ? opt->min_iters : (c->cuda ? 10 : 5);
    if (t.min_iters > t.max_iters)
        t.min_iters = t.max_iters;
    int warmup = opt->warmup >= 0 ? opt->warmup : (c->cuda ? 3 : 1);
    t.batch = c->cuda ? 10 : 5;
    t.race = c->w < opt->n_race && opt->race_us ? opt->race_us[c->w] : 0;
    t.factor = opt->race_factor > 0 ? opt->race_factor : 1.3;
    kiln_backend *be = c->g->be;
    kiln_err err;
    t.times = xcalloc((size_t)t.max_iters, sizeof *t.times);
    t.sorted = xcalloc((size_t)t.max_iters, sizeof *t.sorted);
    t.timers = xcalloc((size_t)t.batch, sizeof *t.timers);
    kiln_outcome result = KILN_OUTCOME_OK;
    int rc = kiln_gate_dev_reserve(c->g->dev, t.batch * p->n_outputs, &err);
    for (int k = 0; k < t.batch && rc == KILN_OK; k++)
        rc = be->ops->timer_create(be, &t.timers[k], &err);
    for (int i = 0; i < warmup && rc == KILN_OK; i++) {
        kiln_gate_send_line(c->fd, "phase time %d -1 %.6g", c->w, opt->timeout_s);
        int s = i % w->n_sets;
        if (!(rc = prepare_run(c, s, s, &err)) && !(rc = run_candidate(c, &err)))
            rc = be->ops->wait(be, opt->timeout_s, &err);
    }
    if (rc == KILN_OK)
        rc = timing_pass(c, &t, &result, &err);
    double first_spread = -1;
    int checked = 0, kept_first = 0;
    if (rc == KILN_OK && result == KILN_OUTCOME_OK && !t.stopped_slower &&
        (c->cuda || opt->retime_noisy) && spread_pct(&t) > KILN_SPREAD_LIMIT_PCT) {
        first = t;
        first.sorted = xmalloc((size_t)t.done * sizeof *first.sorted);
        memcpy(first.sorted, t.sorted, (size_t)t.done * sizeof *first.sorted);
        first_spread = spread_pct(&t);
        checked = first.done;
        rc = timing_pass(c, &t, &result, &err);
        checked += t.done;
        if (rc == KILN_OK && result == KILN_OUTCOME_OK && !t.stopped_slower &&
            spread_pct(&t) > first_spread) { /* the first was steadier: keep it */
            kept_first = 1;
            double *second = t.sorted;
            t.sorted = first.sorted;
            first.sorted = second;
            t.done = first.done;
            t.med = first.med;
            t.lo = first.lo;
            t.hi = first.hi;
        }
    }
    if (rc) {
        result = run_failure(c, rc, "time", &err);
    } else if (result == KILN_OUTCOME_OK) {
        double spread = spread_pct(&t);
        cJSON *tj = cJSON_AddObjectToObject(wj, "time_us");
        cJSON_AddNumberToObject(tj, "median", t.med);
        cJSON_AddNumberToObject(tj, "min", t.sorted[0]);
        cJSON_AddNumberToObject(tj, "max", t.sorted[t.done - 1]);
        cJSON_AddNumberToObject(tj, "spread_pct", spread);
        cJSON_AddNumberToObject(tj, "ci_pct", t.med > 0 ? 100.0 * (t.hi - t.lo) / 2 / t.med : 0);
        cJSON_AddNumberToObject(tj, "n", t.done);
        if (first_spread >= 0) {
            cJSON *rj = cJSON_AddObjectToObject(tj, "retimed");
            cJSON_AddNumberToObject(rj, "first_spread_pct", first_spread);
            cJSON_AddStringToObject(rj, "kept", kept_first ? "first" : "second");
            cJSON_AddBoolToObject(tj, "noisy", spread > KILN_SPREAD_LIMIT_PCT);
        }
        cJSON_AddNumberToObject(wj, "runs_checked", first_spread >= 0 ? checked : t.done);
        *median_out = t.med;
        if (t.stopped_slower) {
            cJSON *ev = cJSON_CreateObject();
            cJSON_AddNumberToObject(ev, "workload_index", c->w);
            cJSON_AddNumberToObject(ev, "median_us", t.med);
            cJSON_AddNumberToObject(ev, "ci_low_us", t.lo);
            cJSON_AddNumberToObject(ev, "incumbent_us", t.race);
            cJSON_AddNumberToObject(ev, "factor", t.factor);
            cJSON_AddNumberToObject(ev, "n", t.done);
            send_json(c->fd, "workload", wj);
            result = send_outcome(c->fd, KILN_OUTCOME_SLOWER, ev);
        }
    }
    for (int k = 0; k < t.batch; k++)
        if (t.timers[k])
            be->ops->timer_destroy(be, t.timers[k]);
    free(t.timers);
    free(t.times);
    free(t.sorted);
    free(first.sorted);
    return result;
}

/* The speed-of-light fields of wj for workload c->w timed at med (<= 0: not timed); the outcome
 * `impossible` when med is under 0.9 of the speed of light (cuda; 0.25 on cpu): such a time was not
 * made by doing the work. */
static kiln_outcome finish_workload(ctx *c, cJSON *wj, double med) {
    const kiln_problem *p = c->p;
    const kiln_workload *w = &p->workloads[c->w];
    const kiln_ceilings *ceil = &c->g->ceil;
    double min_bytes = kiln_problem_min_bytes(p, w), flops = kiln_problem_flops(p, w);
    double ref_us = c->rp->ref->workloads[c->w].ref_time_us;
    cJSON_AddNumberToObject(wj, "min_bytes", min_bytes);
    if (flops >= 0)
        cJSON_AddNumberToObject(wj, "flops", flops);
    if (ref_us >= 0)
        cJSON_AddNumberToObject(wj, "ref_time_us", ref_us);
    else
        cJSON_AddNullToObject(wj, "ref_time_us");
    double ref_spread = c->rp->ref->workloads[c->w].ref_spread_pct;
    if (ref_spread >= 0)
        cJSON_AddNumberToObject(wj, "ref_spread_pct", ref_spread);
    double sol_us = kiln_sol_time_us(ceil, p, min_bytes, flops);
    cJSON_AddNumberToObject(wj, "sol_time_us", sol_us);
    if (med <= 0) {
        cJSON_AddNullToObject(wj, "time_us");
        return KILN_OUTCOME_OK;
    }
    cJSON_AddNumberToObject(wj, "gbps", min_bytes / (med * 1e3));
    if (flops > 0)
        cJSON_AddNumberToObject(wj, "gflops", flops / (med * 1e3));
    double pct = 100.0 * sol_us / med;
    cJSON_AddNumberToObject(wj, "sol_pct", pct > 100 ? 100 : pct);
    /* cuda's copy ceiling is steady to a few percent; a cpu's is measured once on a machine that
     * may have been busy, and its caches are large: there only a time far below it is refused */
    double floor_frac = c->cuda ? 0.9 : 0.25;
    if (med < floor_frac * sol_us) {
        cJSON *ev = cJSON_CreateObject();
        cJSON_AddNumberToObject(ev, "workload_index", c->w);
        cJSON_AddNumberToObject(ev, "time_us", med);
        cJSON_AddNumberToObject(ev, "sol_time_us", sol_us);
        cJSON_AddNumberToObject(ev, "min_bytes", min_bytes);
        cJSON_AddNumberToObject(ev, "ceiling_gbps", ceil->copy_gbps);
        if (flops > 0) {
            const char *kind = NULL;
            cJSON_AddNumberToObject(ev, "flops", flops);
            cJSON_AddNumberToObject(ev, "ceiling_gflops", kiln_sol_gflops(ceil, p, &kind));
            cJSON_AddStringToObject(ev, "ceiling_gflops_of", kind);
        }
        cJSON_AddNumberToObject(ev, "below", floor_frac);
        cJSON_AddStringToObject(
            ev, "message",
            "the median time is below the speed of light (the time the minimum bytes take at the "
            "device's measured copy rate, or the flops at its flops ceiling) times 'below': the "
            "work was not done in it");
        send_json(c->fd, "workload", wj);
        return send_outcome(c->fd, KILN_OUTCOME_IMPOSSIBLE, ev);
    }
    double s = kiln_sol_score(med, sol_us, ref_us);
    if (s >= 0)
        cJSON_AddNumberToObject(wj, "sol_score", s);
    else
        cJSON_AddNullToObject(wj, "sol_score");
    return KILN_OUTCOME_OK;
}

static cJSON *workload_json(ctx *c) {
    const kiln_problem *p = c->p;
    const kiln_workload *w = &p->workloads[c->w];
    cJSON *wj = cJSON_CreateObject();
    cJSON_AddNumberToObject(wj, "index", c->w);
    cJSON_AddStringToObject(wj, "uuid", w->uuid ? w->uuid : "");
    cJSON *axes = cJSON_AddObjectToObject(wj, "axes");
    for (int a = 0; a < p->n_axes; a++)
        cJSON_AddNumberToObject(axes, p->axes[a].name, (double)w->axis_values[a]);
    /* what each output's tolerance was widened by for the reference's own rounding */
    cJSON *ej = NULL;
    for (int o = 0; o < p->n_outputs; o++) {
        kiln_rounding r;
        output_tolerance(c, o, &r);
        if (r.atol > 0 || r.rtol > 0 || r.rel_l2 > 0) {
            if (!ej)
                ej = cJSON_AddObjectToObject(wj, "reference_rounding");
            cJSON *oj = cJSON_AddObjectToObject(ej, p->outputs[o].name);
            cJSON_AddNumberToObject(oj, "atol", r.atol);
            cJSON_AddNumberToObject(oj, "rtol", r.rtol);
            cJSON_AddNumberToObject(oj, "rel_l2", r.rel_l2);
        }
    }
    return wj;
}

void kiln_gate_send_device(int fd, kiln_backend *be, const kiln_ceilings *ceil,
                           const kiln_problem *p) {
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
    /* the flops ceiling this problem's speed of light uses; the others beside it */
    const char *kind = NULL;
    cJSON_AddNumberToObject(dj, "ceiling_gflops", kiln_sol_gflops(ceil, p, &kind));
    cJSON_AddStringToObject(dj, "ceiling_gflops_of", kind);
    cJSON_AddNumberToObject(dj, "fma_gflops", ceil->fma_gflops);
    if (ceil->fp32_gflops > 0)
        cJSON_AddNumberToObject(dj, "fp32_gflops", ceil->fp32_gflops);
    if (info.clock_khz > 0)
        cJSON_AddNumberToObject(dj, "clock_mhz", info.clock_khz / 1e3);
    cJSON *tj = NULL;
    for (int t = 0; t < KILN_TENSOR_COUNT; t++)
        if (ceil->tensor_gflops[t] > 0) {
            if (!tj)
                tj = cJSON_AddObjectToObject(dj, "tensor_gflops");
            cJSON_AddNumberToObject(tj, kiln_tensor_type_name((kiln_tensor_type)t),
                                    ceil->tensor_gflops[t]);
        }
    if (tj)
        cJSON_AddStringToObject(dj, "tensor_source", "arch table");
    send_json(fd, "device", dj);
    cJSON_Delete(dj);
}

/* Compiles source; sends the outcome and returns it unless it compiled (KILN_OUTCOME_OK). */
static kiln_outcome compile_candidate(kiln_gate_proc *g, const kiln_problem *p, const char *source,
                                      int fd, kiln_abi *abi, kiln_signature *sig,
                                      kiln_module **mod) {
    kiln_err err;
    int cuda = strcmp(g->be->ops->name, "cuda") == 0;
    kiln_gate_send_line(fd, "phase compile");
    double t0 = kiln_now_s();
    int rc = kiln_abi_parse(source, cuda, abi, &err);
    if (rc) {
        cJSON *ev = cJSON_CreateObject();
        cJSON_AddStringToObject(ev, "message", err.msg);
        cJSON_AddStringToObject(ev, "log", err.msg);
        return send_outcome(fd, KILN_OUTCOME_COMPILE_ERROR, ev);
    }
    kiln_abi_signature(p, abi->scratch != NULL, cuda, sig);
    if (abi->library && strcmp(abi->library, "cublaslt") == 0) {
        /* the GEMM a directive names, against the tensors it is given: a directive that lies about
         * its sizes would read or write outside the gate's buffers */
        kiln_lt_call_desc d;
        if (kiln_lt_call_parse(abi->library_args, sig, &d, &err) ||
            kiln_lt_call_check(&d, p, &err)) {
            cJSON *ev = cJSON_CreateObject();
            cJSON_AddStringToObject(ev, "message", err.msg);
            cJSON_AddStringToObject(ev, "log", err.msg);
            return send_outcome(fd, KILN_OUTCOME_COMPILE_ERROR, ev);
        }
    }
    char *log = NULL;
    rc = g->be->ops->compile(g->be, source, sig, abi, mod, &log, &err);
    if (rc) {
        cJSON *ev = cJSON_CreateObject();
        cJSON_AddStringToObject(ev, "message", err.msg);
        const char *l = log ? log : "";
        size_t len = strlen(l);
        cJSON_AddStringToObject(ev, "log", len > 16384 ? l + len - 16384 : l);
        free(log);
        if (rc == KILN_ERR_COMPILE)
            return send_outcome(fd, KILN_OUTCOME_COMPILE_ERROR, ev);
        if (rc == KILN_ERR_RESOURCE)
            return send_outcome(fd, KILN_OUTCOME_RESOURCE, ev);
        cJSON_Delete(ev);
        return kiln_gate_send_fatal(fd, err.msg);
    }
    free(log);
    kiln_gate_send_line(fd, "compiled %.6f", kiln_now_s() - t0);
    /* a library call settles its choices on the device (a cuBLASLt configuration index becomes
     * the configuration): the result records them, for the library to store */
    char *resolved = abi->library && g->be->ops->library_resolved
                         ? g->be->ops->library_resolved(g->be, *mod)
                         : NULL;
    if (resolved)
        kiln_gate_send_line(fd, "library %s", resolved);
    free(resolved);
    return KILN_OUTCOME_OK;
}

/* Plans every workload and allocates the largest scratch any needs, once, before the first run: on
 * the sandboxed cpu backend a candidate buffer allocated after the candidate was loaded restarts
 * its process. */
static kiln_outcome plan_all(ctx *c, const kiln_abi *abi) {
    size_t most = 0;
    kiln_outcome r = KILN_OUTCOME_OK;
    for (int w = 0; w < c->p->n_workloads && r == KILN_OUTCOME_OK; w++) {
        c->w = w;
        kiln_err err;
        int rc = kiln_abi_plan(abi, c->p, &c->p->workloads[w], &c->plan, &err);
        if (rc) {
            cJSON *ev = cJSON_CreateObject();
            cJSON_AddStringToObject(ev, "message", err.msg);
            cJSON_AddNumberToObject(ev, "workload_index", w);
            r = send_outcome(
                c->fd, rc == KILN_ERR_RESOURCE ? KILN_OUTCOME_RESOURCE : KILN_OUTCOME_COMPILE_ERROR,
                ev);
        } else if (c->plan.scratch_bytes > most) {
            most = c->plan.scratch_bytes;
        }
    }
    if (r != KILN_OUTCOME_OK || most == 0)
        return r;
    c->plan.scratch_bytes = most;
    return plan_workload(c, abi); /* allocates it; re-plans the last workload */
}

kiln_outcome kiln_gate_eval_candidate(kiln_gate_proc *g, const kiln_problem *p,
                                      const kiln_refdata *ref, const char *source,
                                      const kiln_gate_options *opt, int fd) {
    kiln_abi abi;
    memset(&abi, 0, sizeof abi);
    kiln_signature sig;
    kiln_module *mod = NULL;
    kiln_err err;
    kiln_gate_send_device(fd, g->be, &g->ceil, p);
    uint64_t seed = opt->seed ? opt->seed : kiln_gate_seed_from_os();
    kiln_gate_send_line(fd, "draw_seed %016llx", (unsigned long long)seed);
    /* the problem's data first: a candidate buffer allocated after the candidate is loaded would
     * restart a sandboxed candidate's process */
    kiln_res_problem *rp = NULL;
    kiln_gate_send_line(fd, "phase load");
    if (kiln_resident_get(g->res, p, ref, &rp, &err))
        return kiln_gate_send_fatal(fd, err.msg);
    kiln_outcome result = compile_candidate(g, p, source, fd, &abi, &sig, &mod);
    if (result != KILN_OUTCOME_OK) {
        kiln_abi_free(&abi);
        return result;
    }
    if (g->be->ops->set_call_limit)
        g->be->ops->set_call_limit(g->be, opt->timeout_s);
    ctx c = {.g = g, .p = p, .rp = rp, .sig = &sig, .mod = mod, .opt = opt, .fd = fd, .rng = seed};
    c.cuda = strcmp(g->be->ops->name, "cuda") == 0;
    c.max_abs_err = xcalloc((size_t)p->n_workloads + 1, sizeof *c.max_abs_err);
    c.rel_l2_err = xcalloc((size_t)p->n_workloads + 1, sizeof *c.rel_l2_err);
    c.values = xcalloc((size_t)sig.n + 1, sizeof *c.values);
    c.params = xcalloc((size_t)sig.n + 1, sizeof *c.params);
    c.poison = xcalloc((size_t)p->n_outputs + 1, sizeof *c.poison);
    for (int i = 0; i < sig.n; i++)
        c.params[i] = &c.values[i];
    result = plan_all(&c, &abi);
    /* Pass 0 proves every workload; only a kernel right everywhere is timed (pass 1). */
    for (int w = 0; w < p->n_workloads && result == KILN_OUTCOME_OK; w++) {
        c.w = w;
        int n = rp->w[w].n_sets;
        if (opt->max_sets > 0 && n > opt->max_sets)
            n = opt->max_sets;
        if ((result = plan_workload(&c, &abi)) == KILN_OUTCOME_OK)
            result = prove_workload(&c, n);
    }
    for (int w = 0; w < p->n_workloads && result == KILN_OUTCOME_OK; w++) {
        c.w = w;
        cJSON *wj = workload_json(&c);
        int n = rp->w[w].n_sets;
        if (opt->max_sets > 0 && n > opt->max_sets)
            n = opt->max_sets;
        cJSON_AddNumberToObject(wj, "proved_sets", n);
        if (rp->w[w].n_sets < rp->w[w].n_sets_ref) /* the rest did not fit (resident.c) */
            cJSON_AddNumberToObject(wj, "sets_in_reference", rp->w[w].n_sets_ref);
        cJSON_AddNumberToObject(wj, "max_abs_err", c.max_abs_err[w]);
        cJSON_AddNumberToObject(wj, "rel_l2_err", c.rel_l2_err[w]);
        double med = 0;
        if (!opt->no_time) {
            result = plan_workload(&c, &abi);
            if (result == KILN_OUTCOME_OK)
                result = time_workload(&c, wj, &med);
        }
        if (result == KILN_OUTCOME_OK)
            result = finish_workload(&c, wj, med);
        if (result == KILN_OUTCOME_OK)
            send_json(fd, "workload", wj);
        cJSON_Delete(wj);
    }
    if (result == KILN_OUTCOME_OK)
        send_outcome(fd, KILN_OUTCOME_OK, cJSON_CreateObject());
    if (c.cuda && result == KILN_OUTCOME_TIMEOUT) {
        /* its kernel is still running: unloading the module would wait for it forever. The
         * process exits next (service.c) and the driver ends the kernel with the context. */
        kiln_abi_free(&abi);
        return result;
    }
    if (!c.cuda) { /* what a cpu candidate printed is in its runner's log */
        char tail[4096];
        if (kiln_cpu_runner_log_tail(g->be, mod, tail, sizeof tail) > 0) {
            cJSON *t = cJSON_CreateString(tail);
            send_json(fd, "candidate_output", t);
            cJSON_Delete(t);
        }
    }
    if (c.scratch)
        g->be->ops->free(g->be, c.scratch);
    free(c.max_abs_err);
    free(c.rel_l2_err);
    free(c.values);
    free(c.params);
    free(c.poison);
    g->be->ops->module_free(g->be, mod);
    kiln_abi_free(&abi);
    return result;
}
