/* prove.c: poison patterns and the element-by-element check of a candidate's output against the
 * reference (written, finite where the reference is, within tolerance). */
#include "gate.h"

#include <math.h>
#include <string.h>

static const char *const outcome_names[KILN_OUTCOME_COUNT] = {
    "ok", "compile_error", "mismatch", "unwritten", "nan", "timeout", "crashed", "resource",
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

/* Signalling NaNs: arithmetic never produces them (it quiets NaNs), so finding one means the
 * element was never written. Integer types have no such value: two rounds with different bytes are
 * used. */
static const uint32_t poison_f32 = 0x7FA5A5A5u;
static const uint64_t poison_f64 = 0x7FF5A5A5A5A5A5A5ull;
static const uint16_t poison_bf16 = 0x7FA5u;
static const uint16_t poison_f16 = 0x7D5Au;

void kiln_poison_fill(kiln_dtype t, void *buf, size_t n, int round) {
    switch (t) {
    case KILN_F32:
        for (size_t i = 0; i < n; i++)
            memcpy((char *)buf + 4 * i, &poison_f32, 4);
        return;
    case KILN_F64:
        for (size_t i = 0; i < n; i++)
            memcpy((char *)buf + 8 * i, &poison_f64, 8);
        return;
    case KILN_BF16:
        for (size_t i = 0; i < n; i++)
            memcpy((char *)buf + 2 * i, &poison_bf16, 2);
        return;
    case KILN_F16:
        for (size_t i = 0; i < n; i++)
            memcpy((char *)buf + 2 * i, &poison_f16, 2);
        return;
    default:
        memset(buf, round == 0 ? 0xA5 : 0x5A, n * kiln_dtype_size(t));
        return;
    }
}

int kiln_poison_is(kiln_dtype t, const void *buf, size_t i, int round) {
    size_t sz = kiln_dtype_size(t);
    const unsigned char *e = (const unsigned char *)buf + i * sz;
    switch (t) {
    case KILN_F32:
        return memcmp(e, &poison_f32, 4) == 0;
    case KILN_F64:
        return memcmp(e, &poison_f64, 8) == 0;
    case KILN_BF16:
        return memcmp(e, &poison_bf16, 2) == 0;
    case KILN_F16:
        return memcmp(e, &poison_f16, 2) == 0;
    default: {
        unsigned char b = round == 0 ? 0xA5 : 0x5A;
        for (size_t k = 0; k < sz; k++)
            if (e[k] != b)
                return 0;
        return 1;
    }
    }
}

void kiln_check_output(kiln_dtype t, const void *out, const void *ref, size_t n,
                       const unsigned char *written_mask, const kiln_tolerance *tol,
                       kiln_check *res) {
    memset(res, 0, sizeof *res);
    res->outcome = KILN_OUTCOME_OK;
    res->n_elements = (int64_t)n;
    res->first_unwritten = -1;
    res->first_bad = -1;
    res->nan_index = -1;
    int is_float = kiln_dtype_is_float(t);
    double sum_sq_err = 0, sum_sq_ref = 0;
    for (size_t i = 0; i < n; i++) {
        int written = written_mask ? written_mask[i] : !kiln_poison_is(t, out, i, 0);
        if (!written) {
            if (res->n_unwritten++ == 0)
                res->first_unwritten = (int64_t)i;
            continue;
        }
        double o = kiln_dtype_load(t, out, i);
        double r = kiln_dtype_load(t, ref, i);
        if (is_float && (!isfinite(o) || !isfinite(r))) {
            /* Non-finite values must match the reference exactly: NaN for NaN, same infinity. */
            int same = (isnan(o) && isnan(r)) || (isinf(o) && isinf(r) && (o > 0) == (r > 0));
            if (!same) {
                if (!isfinite(o)) {
                    if (res->nan_index < 0) {
                        res->nan_index = (int64_t)i;
                        res->nan_value = o;
                        res->nan_expected = r;
                    }
                } else {
                    /* finite where the reference is not: an ordinary (infinite) error */
                    if (res->n_bad++ == 0) {
                        res->first_bad = (int64_t)i;
                        res->first_bad_value = o;
                        res->first_bad_expected = r;
                    }
                    res->max_abs_err = INFINITY;
                }
            }
            continue;
        }
        double d = fabs(o - r);
        if (d > res->max_abs_err)
            res->max_abs_err = d;
        sum_sq_err += d * d;
        sum_sq_ref += r * r;
        if (d > tol->atol + tol->rtol * fabs(r)) {
            if (res->n_bad++ == 0) {
                res->first_bad = (int64_t)i;
                res->first_bad_value = o;
                res->first_bad_expected = r;
            }
        }
    }
    if (sum_sq_ref > 0)
        res->rel_l2_err = sqrt(sum_sq_err) / sqrt(sum_sq_ref);
    else
        res->rel_l2_err = sum_sq_err > 0 ? INFINITY : 0;
    if (res->n_unwritten > 0)
        res->outcome = KILN_OUTCOME_UNWRITTEN;
    else if (res->nan_index >= 0)
        res->outcome = KILN_OUTCOME_NAN;
    else if (res->n_bad > 0 || (sum_sq_ref > 0 && res->rel_l2_err > tol->rel_l2) ||
             (sum_sq_ref == 0 && res->max_abs_err > tol->atol))
        res->outcome = KILN_OUTCOME_MISMATCH;
}
