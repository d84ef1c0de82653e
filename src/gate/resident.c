/* resident.c: the problem data a gate keeps on its device from one candidate to the next.
 *
 * Per workload of a problem: every input set's pristine inputs and its reference outputs in plain
 * memory (the gate's own; the references masked with the gate's secret key, so that a candidate
 * that finds them cannot read them), the input slots the candidate reads (read-only to it, each
 * ending at a guard) and the outputs it writes (ending at a guard). There is one slot more than
 * there are sets, so that as timed run i reads set i mod S from slot i mod (S + 1), every slot
 * holds every set in turn: the data behind an input pointer changes from run to run, and a
 * candidate that caches its answer by pointer is wrong the next time it sees the pointer.
 *
 * Loading a problem reads its set files (content-checked against the reference manifest), uploads
 * them and frees the host copies; the whole of it stays on the device within a budget, least
 * recently used problems leaving first. A sticky fault ends the gate process and its resident data
 * with it; the next gate loads again. */
#include "gate_impl.h"

#include <string.h>

typedef struct {
    kiln_res_problem rp;
    size_t bytes;
    uint64_t last_use;
} entry;

struct kiln_resident {
    kiln_backend *be;
    kiln_gate_dev *dev;
    uint64_t key;
    size_t budget, used;
    uint64_t clock;
    entry *v;
    int n, cap;
};

kiln_resident *kiln_resident_new(kiln_backend *be, kiln_gate_dev *dev, uint64_t key,
                                 size_t budget_bytes) {
    kiln_resident *r = xcalloc(1, sizeof *r);
    r->be = be;
    r->dev = dev;
    r->key = key;
    if (!budget_bytes) {
        kiln_device_info info;
        be->ops->device_info(be, &info);
        const char *gb = getenv("KILN_GATE_MEMORY_GB");
        if (gb && atof(gb) > 0)
            budget_bytes = (size_t)(atof(gb) * (double)(1ull << 30));
        else /* the rest: candidates' scratch, the flush buffer, the driver, torch next door */
            budget_bytes = (size_t)((double)info.mem_bytes * 0.5);
        if (!budget_bytes)
            budget_bytes = (size_t)8 << 30;
    }
    r->budget = budget_bytes;
    return r;
}

static void workload_free(kiln_backend *be, const kiln_problem *p, kiln_res_workload *w) {
    for (int s = 0; w->pool && s < w->n_sets; s++) {
        for (int i = 0; i < p->n_inputs; i++)
            if (w->pool[s][i])
                be->ops->free(be, w->pool[s][i]);
        for (int o = 0; o < p->n_outputs; o++)
            if (w->ref[s][o])
                be->ops->free(be, w->ref[s][o]);
        free(w->pool[s]);
        free(w->ref[s]);
        free(w->scalars[s]);
    }
    for (int k = 0; w->slot && k < w->n_slots; k++) {
        for (int i = 0; i < p->n_inputs; i++)
            if (w->slot[k][i])
                be->ops->free(be, w->slot[k][i]);
        free(w->slot[k]);
    }
    for (int o = 0; w->out && o < p->n_outputs; o++)
        if (w->out[o])
            be->ops->free(be, w->out[o]);
    free(w->pool);
    free(w->ref);
    free(w->scalars);
    free(w->is_real);
    free(w->slot);
    free(w->slot_holds);
    free(w->out);
    free(w->in_bytes);
    free(w->out_bytes);
    free(w->out_elems);
    memset(w, 0, sizeof *w);
}

static void entry_free(kiln_resident *r, entry *e) {
    for (int w = 0; e->rp.w && w < e->rp.p->n_workloads; w++)
        workload_free(r->be, e->rp.p, &e->rp.w[w]);
    free(e->rp.w);
    r->used -= e->bytes;
}

void kiln_resident_free(kiln_resident *r) {
    if (!r)
        return;
    for (int i = 0; i < r->n; i++)
        entry_free(r, &r->v[i]);
    free(r->v);
    free(r);
}

/* Bytes workload w of p takes on the device holding at most `most` of its sets: per set its inputs
 * and outputs, the slots, the outputs. */
static int sets_held(const kiln_refdata *ref, int w, int most) {
    int s = ref->workloads[w].n_sets;
    return most > 0 && s > most ? most : s;
}

static size_t workload_bytes(const kiln_problem *p, const kiln_refdata *ref, int w, int most) {
    size_t in = 0, out = 0;
    int64_t shape[KILN_MAX_DIMS];
    for (int i = 0; i < p->n_inputs; i++)
        if (!p->inputs[i].is_scalar)
            in += (size_t)kiln_tensor_shape(p, &p->inputs[i], &p->workloads[w], shape) *
                  kiln_dtype_size(p->inputs[i].dtype);
    for (int o = 0; o < p->n_outputs; o++)
        out += (size_t)kiln_tensor_shape(p, &p->outputs[o], &p->workloads[w], shape) *
               kiln_dtype_size(p->outputs[o].dtype);
    int s = sets_held(ref, w, most);
    return (size_t)s * (in + out) + (size_t)(s + 1) * in + out;
}

/* Which of rw's sets to hold when only n fit: the real ones first, then the random ones, each in
 * their order; pick[] ascending. */
static void pick_sets(const kiln_refworkload *rw, int n, int *pick) {
    int real = 0;
    for (int s = 0; s < rw->n_sets; s++)
        real += rw->sets[s].is_real;
    int keep_real = real < n ? real : n, keep_random = n - keep_real, k = 0;
    for (int s = 0; s < rw->n_sets && k < n; s++)
        if (rw->sets[s].is_real ? keep_real-- > 0 : keep_random-- > 0)
            pick[k++] = s;
}

static int load_workload(kiln_resident *r, const kiln_problem *p, const kiln_refdata *ref, int wi,
                         int most, kiln_res_workload *w, kiln_err *err) {
    kiln_backend *be = r->be;
    const kiln_refworkload *rw = &ref->workloads[wi];
    w->n_inputs = p->n_inputs;
    w->n_outputs = p->n_outputs;
    w->n_sets_ref = rw->n_sets;
    w->n_sets = sets_held(ref, wi, most);
    int *pick = xcalloc((size_t)w->n_sets, sizeof *pick);
    pick_sets(rw, w->n_sets, pick);
    w->n_slots = w->n_sets + 1;
    w->pool = xcalloc((size_t)w->n_sets, sizeof *w->pool);
    w->ref = xcalloc((size_t)w->n_sets, sizeof *w->ref);
    w->scalars = xcalloc((size_t)w->n_sets, sizeof *w->scalars);
    w->is_real = xcalloc((size_t)w->n_sets, sizeof *w->is_real);
    w->slot = xcalloc((size_t)w->n_slots, sizeof *w->slot);
    w->slot_holds = xcalloc((size_t)w->n_slots, sizeof *w->slot_holds);
    w->out = xcalloc((size_t)p->n_outputs + 1, sizeof *w->out);
    w->in_bytes = xcalloc((size_t)p->n_inputs + 1, sizeof *w->in_bytes);
    w->out_bytes = xcalloc((size_t)p->n_outputs + 1, sizeof *w->out_bytes);
    w->out_elems = xcalloc((size_t)p->n_outputs + 1, sizeof *w->out_elems);
    int rc = KILN_OK;
    char key[160];
    for (int s = 0; s < w->n_sets && rc == KILN_OK; s++) {
        w->pool[s] = xcalloc((size_t)p->n_inputs + 1, sizeof **w->pool);
        w->ref[s] = xcalloc((size_t)p->n_outputs + 1, sizeof **w->ref);
        w->scalars[s] = xcalloc((size_t)p->n_inputs + 1, sizeof **w->scalars);
        const kiln_refset *set = &rw->sets[pick[s]];
        w->is_real[s] = set->is_real;
        kiln_st *st = NULL;
        if ((rc = kiln_refset_open(p, wi, set, &st, err)))
            break;
        for (int i = 0; i < p->n_inputs && rc == KILN_OK; i++) {
            if (p->inputs[i].is_scalar) {
                w->scalars[s][i] = set->scalars[i];
                continue;
            }
            snprintf(key, sizeof key, "input.%s", p->inputs[i].name);
            const kiln_st_tensor *t = kiln_st_find(st, key);
            KILN_ASSERT(t); /* kiln_refset_open checked it */
            w->in_bytes[i] = t->n_bytes;
            if (!(rc = be->ops->alloc(be, t->n_bytes, 0, &w->pool[s][i], err)))
                rc = be->ops->upload(be, w->pool[s][i], t->data, t->n_bytes, err);
        }
        for (int o = 0; o < p->n_outputs && rc == KILN_OK; o++) {
            snprintf(key, sizeof key, "output.%s", p->outputs[o].name);
            const kiln_st_tensor *t = kiln_st_find(st, key);
            KILN_ASSERT(t);
            w->out_bytes[o] = t->n_bytes;
            w->out_elems[o] = t->n_bytes / kiln_dtype_size(p->outputs[o].dtype);
            if (!(rc = be->ops->alloc(be, t->n_bytes, 0, &w->ref[s][o], err)))
                rc = be->ops->upload(be, w->ref[s][o], t->data, t->n_bytes, err);
            if (!rc && r->key)
                rc = kiln_gate_dev_mask(r->dev, w->ref[s][o], p->outputs[o].dtype, w->out_elems[o],
                                        r->key, err);
        }
        kiln_st_free(st);
    }
    free(pick);
    for (int k = 0; k < w->n_slots && rc == KILN_OK; k++) {
        w->slot[k] = xcalloc((size_t)p->n_inputs + 1, sizeof **w->slot);
        w->slot_holds[k] = -1;
        for (int i = 0; i < p->n_inputs && rc == KILN_OK; i++)
            if (!p->inputs[i].is_scalar)
                rc = be->ops->alloc(be, w->in_bytes[i], KILN_ALLOC_CANDIDATE | KILN_ALLOC_READONLY,
                                    &w->slot[k][i], err);
    }
    for (int o = 0; o < p->n_outputs && rc == KILN_OK; o++)
        rc = be->ops->alloc(be, w->out_bytes[o], KILN_ALLOC_CANDIDATE, &w->out[o], err);
    if (!rc && be->ops->wait)
        rc = be->ops->wait(be, 0, err);
    return rc;
}

static void evict_until(kiln_resident *r, size_t need, const kiln_problem *keep) {
    while (r->used + need > r->budget && r->n > 0) {
        int victim = -1;
        for (int i = 0; i < r->n; i++)
            if (r->v[i].rp.p != keep && (victim < 0 || r->v[i].last_use < r->v[victim].last_use))
                victim = i;
        if (victim < 0)
            return;
        entry_free(r, &r->v[victim]);
        r->v[victim] = r->v[--r->n];
    }
}

int kiln_resident_get(kiln_resident *r, const kiln_problem *p, const kiln_refdata *ref,
                      kiln_res_problem **out, kiln_err *err) {
    *out = NULL;
    for (int i = 0; i < r->n; i++)
        if (r->v[i].rp.p == p && r->v[i].rp.ref == ref) {
            r->v[i].last_use = ++r->clock;
            *out = &r->v[i].rp;
            return KILN_OK;
        }
    /* all the sets where they fit; else as many as fit, two at least (with one, every run would
     * read the same data and a candidate that keeps its last answer would pass) */
    int most_sets = 0;
    for (int w = 0; w < p->n_workloads; w++)
        if (ref->workloads[w].n_sets > most_sets)
            most_sets = ref->workloads[w].n_sets;
    size_t all = 0, need = 0;
    for (int w = 0; w < p->n_workloads; w++)
        all += workload_bytes(p, ref, w, 0);
    evict_until(r, all, p);
    int most = most_sets;
    for (; most >= 2; most--) {
        need = 0;
        for (int w = 0; w < p->n_workloads; w++)
            need += workload_bytes(p, ref, w, most);
        if (r->used + need <= r->budget)
            break;
    }
    if (most < 2 && most_sets >= 2)
        return kiln_errf(err, KILN_ERR_RESOURCE,
                         "%s: its input sets and references take %.2f GiB on the device (%.2f GiB "
                         "with two sets), more than the gate's budget of %.2f GiB "
                         "(KILN_GATE_MEMORY_GB)",
                         p->name, (double)all / (1 << 30), (double)need / (1 << 30),
                         (double)r->budget / (1 << 30));
    if (most < 2 && r->used + all > r->budget)
        return kiln_errf(err, KILN_ERR_RESOURCE,
                         "%s: its input sets and references take %.2f GiB on the device, more "
                         "than the gate's budget of %.2f GiB (KILN_GATE_MEMORY_GB)",
                         p->name, (double)all / (1 << 30), (double)r->budget / (1 << 30));
    if (most < 2)
        need = all;
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 8;
        r->v = xrealloc(r->v, (size_t)r->cap * sizeof *r->v);
    }
    entry *e = &r->v[r->n];
    memset(e, 0, sizeof *e);
    e->rp.p = p;
    e->rp.ref = ref;
    e->rp.w = xcalloc((size_t)p->n_workloads + 1, sizeof *e->rp.w);
    e->bytes = need;
    r->used += need;
    int rc = KILN_OK;
    for (int w = 0; w < p->n_workloads && rc == KILN_OK; w++)
        rc = load_workload(r, p, ref, w, most, &e->rp.w[w], err);
    if (rc) {
        entry_free(r, e);
        return rc;
    }
    e->last_use = ++r->clock;
    r->n++;
    *out = &e->rp;
    return KILN_OK;
}

int kiln_resident_fill_slot(kiln_resident *r, kiln_res_workload *w, int slot, int s,
                            kiln_err *err) {
    KILN_ASSERT(slot >= 0 && slot < w->n_slots && s >= 0 && s < w->n_sets);
    if (w->slot_holds[slot] == s)
        return KILN_OK;
    w->slot_holds[slot] = -1;
    for (int i = 0; i < w->n_inputs; i++) {
        if (!w->slot[slot][i])
            continue;
        int rc = r->be->ops->copy(r->be, w->slot[slot][i], w->pool[s][i], w->in_bytes[i], err);
        if (rc)
            return rc;
    }
    w->slot_holds[slot] = s;
    return KILN_OK;
}
