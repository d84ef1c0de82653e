/* device.c: the gate's work on candidate buffers besides running the candidate — poisoning outputs,
 * masking references, checking an output against its reference, comparing an input with its
 * pristine copy — done where the data lives: with the kernels of kernels/gate_device.cu on cuda
 * (only a summary of a few numbers per check crosses to the host), with loops over the buffers'
 * host views on cpu. Both compute exactly the sums of kiln_check_sum; kiln_check_verdict turns them
 * into an outcome the same way for both. */
#include "gate_impl.h"

#include <math.h>
#include <string.h>

/* kernels/gate_device.cu, embedded at build time (scripts/embed.sh). */
extern const struct {
    const char *name;
    const unsigned char *data;
    size_t size;
} kiln_gate_kernels[];

struct kiln_gate_dev {
    kiln_backend *be;
    kiln_module *mod;          /* cuda: the gate's kernels; NULL on cpu */
    kiln_devptr sums;          /* cuda: the summary slots (plain memory) */
    kiln_check_sum *host_sums; /* cpu: the slots themselves; cuda: where they are read into */
    int cap;
};

static const char *gate_source(void) {
    for (int i = 0; kiln_gate_kernels[i].name; i++)
        if (strcmp(kiln_gate_kernels[i].name, "gate_device.cu") == 0)
            return (const char *)kiln_gate_kernels[i].data;
    return NULL;
}

int kiln_gate_dev_open(kiln_backend *be, kiln_gate_dev **out, kiln_err *err) {
    kiln_gate_dev *d = xcalloc(1, sizeof *d);
    d->be = be;
    *out = NULL;
    if (be->ops->load_raw) {
        const char *src = gate_source();
        KILN_ASSERT(src);
        char *log = NULL;
        int rc = be->ops->load_raw(be, src, &d->mod, &log, err);
        free(log);
        if (rc) {
            free(d);
            return rc;
        }
    }
    *out = d;
    return KILN_OK;
}

void kiln_gate_dev_close(kiln_gate_dev *d) {
    if (!d)
        return;
    if (d->sums)
        d->be->ops->free(d->be, d->sums);
    if (d->mod)
        d->be->ops->module_free(d->be, d->mod);
    free(d->host_sums);
    free(d);
}

/* A grid that covers n elements with 256 threads a block, capped: the kernels loop over the rest.
 */
static void geometry(size_t n, unsigned grid[3], unsigned block[3]) {
    size_t blocks = (n + 255) / 256;
    if (blocks > 132 * 16)
        blocks = 132 * 16;
    grid[0] = blocks ? (unsigned)blocks : 1;
    grid[1] = grid[2] = 1;
    block[0] = 256;
    block[1] = block[2] = 1;
}

static void *host_of(kiln_gate_dev *d, kiln_devptr p) {
    void *h = d->be->ops->host_view(d->be, p);
    KILN_ASSERT(h);
    return h;
}

int kiln_gate_dev_fill(kiln_gate_dev *d, kiln_devptr p, kiln_dtype t, size_t n, uint64_t pattern,
                       kiln_err *err) {
    int size = (int)kiln_dtype_size(t);
    if (!d->mod) {
        void *h = host_of(d, p);
        for (size_t i = 0; i < n; i++)
            kiln_gate_bits_store(h, i, (size_t)size, pattern);
        return KILN_OK;
    }
    unsigned grid[3], block[3];
    geometry(n, grid, block);
    uint64_t n64 = n;
    void *params[] = {&p, &n64, &size, &pattern};
    return d->be->ops->launch_raw(d->be, d->mod, "kiln_gate_fill", grid, block, params, err);
}

int kiln_gate_dev_mask(kiln_gate_dev *d, kiln_devptr p, kiln_dtype t, size_t n, uint64_t key,
                       kiln_err *err) {
    int size = (int)kiln_dtype_size(t);
    if (!d->mod) {
        void *h = host_of(d, p);
        for (size_t i = 0; i < n; i++)
            kiln_gate_bits_store(h, i, (size_t)size,
                                 kiln_gate_bits_load(h, i, (size_t)size) ^
                                     kiln_gate_keystream(key, i));
        return KILN_OK;
    }
    unsigned grid[3], block[3];
    geometry(n, grid, block);
    uint64_t n64 = n;
    void *params[] = {&p, &n64, &size, &key};
    return d->be->ops->launch_raw(d->be, d->mod, "kiln_gate_mask", grid, block, params, err);
}

static void sum_clear(kiln_check_sum *s) {
    memset(s, 0, sizeof *s);
    s->first_unwritten = s->first_nonfinite = s->first_bad = s->first_over_cap = UINT64_MAX;
}

int kiln_gate_dev_reserve(kiln_gate_dev *d, int n_slots, kiln_err *err) {
    if (n_slots <= d->cap)
        return KILN_OK;
    int cap = d->cap ? d->cap : 64;
    while (cap < n_slots)
        cap *= 2;
    if (d->mod) {
        kiln_devptr p = 0;
        int rc = d->be->ops->alloc(d->be, (size_t)cap * sizeof(kiln_check_sum), 0, &p, err);
        if (rc)
            return rc;
        if (d->sums)
            d->be->ops->free(d->be, d->sums);
        d->sums = p;
    }
    d->host_sums = xrealloc(d->host_sums, (size_t)cap * sizeof *d->host_sums);
    d->cap = cap;
    return KILN_OK;
}

/* Resets slot on the device (asynchronously, in order with the kernels that follow). */
static int slot_clear(kiln_gate_dev *d, int slot, kiln_err *err) {
    kiln_check_sum s;
    sum_clear(&s);
    if (!d->mod) {
        d->host_sums[slot] = s;
        return KILN_OK;
    }
    kiln_devptr p = d->sums + (kiln_devptr)slot * sizeof s;
    /* The first_* fields start at all ones, the rest at zero: two fills in stream order. */
    int rc = d->be->ops->memset8(d->be, p, 0, sizeof s, err);
    uint64_t ones = UINT64_MAX;
    const size_t firsts[] = {
        offsetof(kiln_check_sum, first_unwritten), offsetof(kiln_check_sum, first_nonfinite),
        offsetof(kiln_check_sum, first_bad), offsetof(kiln_check_sum, first_over_cap)};
    for (size_t k = 0; !rc && k < sizeof firsts / sizeof firsts[0]; k++)
        rc = kiln_gate_dev_fill(d, p + firsts[k], KILN_I64, 1, ones, err);
    return rc;
}

int kiln_gate_dev_check(kiln_gate_dev *d, int slot, kiln_devptr out, kiln_devptr ref, kiln_dtype t,
                        size_t n, uint64_t poison, uint64_t key, const kiln_tolerance *tol,
                        kiln_err *err) {
    KILN_ASSERT(slot >= 0 && slot < d->cap);
    int rc = slot_clear(d, slot, err);
    if (rc)
        return rc;
    if (!d->mod) {
        kiln_check_sum_host(&d->host_sums[slot], host_of(d, out), host_of(d, ref), t, n, poison,
                            key, tol);
        return KILN_OK;
    }
    unsigned grid[3], block[3];
    geometry(n, grid, block);
    uint64_t n64 = n;
    int dt = (int)t;
    double atol = tol->atol, rtol = tol->rtol, cap = tol->sol ? tol->error_cap : 0;
    kiln_devptr sum = d->sums + (kiln_devptr)slot * sizeof(kiln_check_sum);
    void *params[] = {&out, &ref, &n64, &dt, &poison, &key, &atol, &rtol, &cap, &sum};
    return d->be->ops->launch_raw(d->be, d->mod, "kiln_gate_check", grid, block, params, err);
}

int kiln_gate_dev_diff(kiln_gate_dev *d, int slot, kiln_devptr a, kiln_devptr b, size_t n,
                       kiln_err *err) {
    KILN_ASSERT(slot >= 0 && slot < d->cap);
    int rc = slot_clear(d, slot, err);
    if (rc)
        return rc;
    if (!d->mod) {
        const unsigned char *x = host_of(d, a), *y = host_of(d, b);
        uint64_t diff = 0;
        for (size_t i = 0; i < n; i++)
            diff += x[i] != y[i];
        d->host_sums[slot].n_bad = diff;
        return KILN_OK;
    }
    unsigned grid[3], block[3];
    geometry(n, grid, block);
    uint64_t n64 = n;
    kiln_devptr count =
        d->sums + (kiln_devptr)slot * sizeof(kiln_check_sum) + offsetof(kiln_check_sum, n_bad);
    void *params[] = {&a, &b, &n64, &count};
    return d->be->ops->launch_raw(d->be, d->mod, "kiln_gate_diff", grid, block, params, err);
}

int kiln_gate_dev_results(kiln_gate_dev *d, int n, kiln_check_sum *out, kiln_err *err) {
    KILN_ASSERT(n >= 0 && n <= d->cap);
    if (d->mod) {
        int rc = d->be->ops->download(d->be, d->host_sums, d->sums, (size_t)n * sizeof *out, err);
        if (rc)
            return rc;
    }
    memcpy(out, d->host_sums, (size_t)n * sizeof *out);
    return KILN_OK;
}

int kiln_gate_dev_element(kiln_gate_dev *d, kiln_devptr p, kiln_dtype t, size_t i, uint64_t key,
                          double *value, kiln_err *err) {
    size_t size = kiln_dtype_size(t);
    unsigned char b[8] = {0};
    if (d->mod) {
        int rc = d->be->ops->download(d->be, b, p + i * size, size, err);
        if (rc)
            return rc;
    } else {
        memcpy(b, (const char *)host_of(d, p) + i * size, size);
    }
    if (key)
        kiln_gate_bits_store(b, 0, size,
                             kiln_gate_bits_load(b, 0, size) ^ kiln_gate_keystream(key, i));
    *value = kiln_dtype_load(t, b, 0);
    return KILN_OK;
}
