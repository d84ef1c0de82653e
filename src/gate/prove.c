/* prove.c: outcomes, poison patterns, and the verdict on one output: the element-by-element sums
 * (computed here on the host, or by the gate's kernel on the device: device.c) and what they mean
 * under kiln's tolerance or SOL-ExecBench's. */
#include "gate_impl.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

static const char *const outcome_names[KILN_OUTCOME_COUNT] = {
    "ok",      "compile_error", "mismatch", "unwritten",  "nan",    "input_modified",
    "timeout", "crashed",       "resource", "impossible", "slower",
};

const char *kiln_outcome_name(kiln_outcome o) {
    KILN_ASSERT(o >= 0 && o < KILN_OUTCOME_COUNT);
    return outcome_names[o];
}

int kiln_outcome_parse(const char *name) {
    for (int i = 0; i < KILN_OUTCOME_COUNT; i++)
        if (strcmp(name, outcome_names[i]) == 0)
            return i;
    return -1;
}

uint64_t kiln_gate_keystream(uint64_t key, uint64_t i) {
    uint64_t z = key + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t kiln_gate_random(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t kiln_gate_seed_from_os(void) {
    uint64_t s = 0;
    while (s == 0) {
        ssize_t got = getrandom(&s, sizeof s, 0);
        if (got < 0 && errno != EINTR)
            s = (uint64_t)kiln_now_s() * 0x9E3779B97F4A7C15ull ^
                (uint64_t)getpid(); /* no entropy */
    }
    return s;
}

/* A NaN of a format with exp_bits of exponent and man_bits of mantissa whose payload (and sign)
 * come from r: the quiet bit clear (a signalling NaN, which no arithmetic produces), the rest of
 * the mantissa from r and never all zero (that would be an infinity). */
static uint64_t nan_pattern(int exp_bits, int man_bits, uint64_t r) {
    uint64_t payload_mask = (1ull << (man_bits - 1)) - 1;
    uint64_t payload = r & payload_mask;
    if (payload == 0)
        payload = 1;
    uint64_t sign = (r >> 62) & 1;
    uint64_t exp = ((1ull << exp_bits) - 1) << man_bits;
    return (sign << (exp_bits + man_bits)) | exp | payload;
}

uint64_t kiln_poison_draw(kiln_dtype t, uint64_t r) {
    switch (t) {
    case KILN_F64:
        return nan_pattern(11, 52, r);
    case KILN_F32:
        return nan_pattern(8, 23, r);
    case KILN_F16:
        return nan_pattern(5, 10, r);
    case KILN_BF16:
        return nan_pattern(8, 7, r);
    default: /* integers, bool, float8 and float4 codes: any bits */
        return r;
    }
}

void kiln_poison_fill(kiln_dtype t, void *buf, size_t n, uint64_t pattern) {
    size_t size = kiln_dtype_size(t);
    for (size_t i = 0; i < n; i++)
        kiln_gate_bits_store(buf, i, size, pattern);
}

void kiln_check_sum_host(kiln_check_sum *s, const void *out, const void *ref, kiln_dtype t,
                         size_t n, uint64_t poison, uint64_t key, const kiln_tolerance *tol) {
    memset(s, 0, sizeof *s);
    s->first_unwritten = s->first_nonfinite = s->first_bad = s->first_over_cap = UINT64_MAX;
    if (t == KILN_F4_E2M1 || t == KILN_F4_E2M1X2)
        t = KILN_U8; /* float4 codes are compared as their bits, as on the device */
    size_t size = kiln_dtype_size(t);
    uint64_t mask = size == 8 ? UINT64_MAX : ((1ull << (8 * size)) - 1);
    int fl = kiln_dtype_is_float(t);
    double max_abs = 0;
    double cap = tol->sol ? tol->error_cap : 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t ob = kiln_gate_bits_load(out, i, size);
        uint64_t rb =
            (kiln_gate_bits_load(ref, i, size) ^ (key ? kiln_gate_keystream(key, i) : 0)) & mask;
        if (ob == (poison & mask) && rb != (poison & mask)) {
            if (s->n_unwritten++ == 0)
                s->first_unwritten = i;
            continue;
        }
        double o = kiln_dtype_load(t, &ob, 0), r = kiln_dtype_load(t, &rb, 0);
        if (fl && (!isfinite(o) || !isfinite(r))) {
            int same = (isnan(o) && isnan(r)) || (isinf(o) && isinf(r) && (o > 0) == (r > 0));
            if (same) {
                s->n_matched++;
            } else if (!isfinite(o)) {
                if (s->n_nonfinite++ == 0)
                    s->first_nonfinite = i;
            } else {
                if (s->n_bad++ == 0)
                    s->first_bad = i;
                max_abs = INFINITY;
                if (cap > 0 && s->n_over_cap++ == 0)
                    s->first_over_cap = i;
            }
            continue;
        }
        double diff = fabs(o - r);
        if (diff > max_abs)
            max_abs = diff;
        s->sum_sq_err += diff * diff;
        s->sum_sq_ref += r * r;
        if (diff > tol->atol + tol->rtol * fabs(r)) {
            if (s->n_bad++ == 0)
                s->first_bad = i;
        } else {
            s->n_matched++;
        }
        if (cap > 0 && diff > cap && s->n_over_cap++ == 0)
            s->first_over_cap = i;
    }
    memcpy(&s->max_abs_bits, &max_abs, 8);
}

static int64_t first_or_none(uint64_t v) {
    return v == UINT64_MAX ? -1 : (int64_t)v;
}

void kiln_check_from_sum(const kiln_check_sum *s, int64_t n, const kiln_tolerance *tol,
                         kiln_check *res) {
    memset(res, 0, sizeof *res);
    res->n_elements = n;
    res->n_unwritten = (int64_t)s->n_unwritten;
    res->first_unwritten = first_or_none(s->first_unwritten);
    res->nan_index = first_or_none(s->first_nonfinite);
    res->n_bad = (int64_t)s->n_bad;
    res->first_bad = first_or_none(s->first_bad);
    res->n_over_cap = (int64_t)s->n_over_cap;
    res->first_over_cap = first_or_none(s->first_over_cap);
    memcpy(&res->max_abs_err, &s->max_abs_bits, 8);
    if (s->sum_sq_ref > 0)
        res->rel_l2_err = sqrt(s->sum_sq_err) / sqrt(s->sum_sq_ref);
    else
        res->rel_l2_err = s->sum_sq_err > 0 ? INFINITY : 0;
    res->matched_ratio = n > 0 ? (double)s->n_matched / (double)n : 1.0;
    res->outcome = KILN_OUTCOME_OK;
    if (res->n_unwritten > 0)
        res->outcome = KILN_OUTCOME_UNWRITTEN;
    else if (s->n_nonfinite > 0)
        res->outcome = KILN_OUTCOME_NAN;
    else if (tol->sol) {
        if (res->matched_ratio < tol->matched_ratio || res->n_over_cap > 0)
            res->outcome = KILN_OUTCOME_MISMATCH;
    } else if (res->n_bad > 0 || (s->sum_sq_ref > 0 && res->rel_l2_err > tol->rel_l2) ||
               (s->sum_sq_ref == 0 && res->max_abs_err > tol->atol)) {
        res->outcome = KILN_OUTCOME_MISMATCH;
    }
}

void kiln_check_output(kiln_dtype t, const void *out, const void *ref, size_t n, uint64_t poison,
                       const kiln_tolerance *tol, kiln_check *res) {
    kiln_check_sum s;
    kiln_check_sum_host(&s, out, ref, t, n, poison, 0, tol);
    kiln_check_from_sum(&s, (int64_t)n, tol, res);
    size_t size = kiln_dtype_size(t == KILN_F4_E2M1X2 ? KILN_U8 : t);
    if (res->first_bad >= 0) {
        res->first_bad_value = kiln_dtype_load(t, (const char *)out + size * res->first_bad, 0);
        res->first_bad_expected = kiln_dtype_load(t, (const char *)ref + size * res->first_bad, 0);
    }
    if (res->nan_index >= 0) {
        res->nan_value = kiln_dtype_load(t, (const char *)out + size * res->nan_index, 0);
        res->nan_expected = kiln_dtype_load(t, (const char *)ref + size * res->nan_index, 0);
    }
}
