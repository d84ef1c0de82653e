/* summary.c: the numbers of a gate result (docs/gate.md) that the store keeps in columns and that
 * the search, the library, submit and the dashboard decide by: the one reader of the result's
 * summary, so that a change of the gate's JSON shape changes one function; and the one rule that
 * turns two measured times and their spreads into a speedup a table may show. */
#include "store_impl.h"

#include <math.h>
#include <string.h>

static double number_at(const cJSON *obj, const char *key, double dflt, int *known) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (known)
        *known = cJSON_IsNumber(v);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

void kiln_store_summary_read(const cJSON *result, kiln_store_summary *out) {
    KILN_ASSERT(out);
    memset(out, 0, sizeof *out);
    out->time_us = out->spread_pct = out->sol_pct = out->ref_time_us = out->ref_spread_pct = -1;
    if (!cJSON_IsObject(result))
        return;
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(result, "outcome");
    if (cJSON_IsString(o))
        snprintf(out->outcome, sizeof out->outcome, "%s", o->valuestring);
    const cJSON *sum = cJSON_GetObjectItemCaseSensitive(result, "summary");
    out->time_us = number_at(sum, "time_us_geomean", -1, NULL);
    out->sol_pct = number_at(sum, "sol_pct_geomean", -1, NULL);
    out->score = number_at(sum, "sol_score_geomean", 0, &out->score_known);
    double log_ref = 0;
    int n_ref = 0;
    const cJSON *w;
    cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(result, "workloads")) {
        double spread =
            number_at(cJSON_GetObjectItemCaseSensitive(w, "time_us"), "spread_pct", -1, NULL);
        if (spread > out->spread_pct)
            out->spread_pct = spread;
        /* the eager baseline: a number (measured once, no spread), or, timed by the gate beside
         * the candidate, an object like time_us ({"median", "spread_pct"}); a separate
         * "ref_spread_pct" counts too */
        const cJSON *rt = cJSON_GetObjectItemCaseSensitive(w, "ref_time_us");
        double ref = cJSON_IsObject(rt) ? number_at(rt, "median", -1, NULL)
                                        : number_at(w, "ref_time_us", -1, NULL);
        double ref_spread = cJSON_IsObject(rt) ? number_at(rt, "spread_pct", -1, NULL)
                                               : number_at(w, "ref_spread_pct", -1, NULL);
        if (ref > 0 && ref_spread > out->ref_spread_pct)
            out->ref_spread_pct = ref_spread;
        if (ref > 0) {
            log_ref += log(ref);
            n_ref++;
        }
    }
    if (n_ref)
        out->ref_time_us = exp(log_ref / n_ref);
}

void kiln_store_summary_parse(const char *result_json, kiln_store_summary *out) {
    cJSON *j = result_json ? cJSON_Parse(result_json) : NULL;
    kiln_store_summary_read(j, out);
    cJSON_Delete(j);
}

int kiln_store_summary_medians(const cJSON *result, double *medians, int cap) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(result, "outcome");
    if (!cJSON_IsString(o) || strcmp(o->valuestring, "ok") != 0)
        return 0;
    int n = 0;
    const cJSON *w;
    cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(result, "workloads")) {
        int i = (int)number_at(w, "index", -1, NULL);
        double med = number_at(cJSON_GetObjectItemCaseSensitive(w, "time_us"), "median", -1, NULL);
        if (i < 0 || i >= cap)
            continue;
        medians[i] = med;
        if (i + 1 > n)
            n = i + 1;
    }
    return n;
}

void kiln_store_baseline_pick(double problem_eager_us, const kiln_store_summary *sum,
                              double *eager_us, double *spread_pct) {
    KILN_ASSERT(sum && eager_us && spread_pct);
    *eager_us = problem_eager_us > 0 ? problem_eager_us : -1;
    *spread_pct = -1;
    if (sum->ref_time_us > 0 && (sum->ref_spread_pct >= 0 || *eager_us <= 0)) {
        *eager_us = sum->ref_time_us;
        *spread_pct = sum->ref_spread_pct;
    }
}

void kiln_store_speedup_judge(double eager_us, double eager_spread_pct, double kiln_us,
                              double kiln_spread_pct, kiln_store_speedup *out) {
    KILN_ASSERT(out);
    memset(out, 0, sizeof *out);
    out->value = -1;
    out->verdict = KILN_SPEEDUP_UNKNOWN;
    if (!(eager_us > 0) || !(kiln_us > 0) || !isfinite(eager_us) || !isfinite(kiln_us))
        return;
    out->ratio = eager_us / kiln_us;
    /* spread = (p90 - p10) / median: each time lies within half of it either side of its median */
    double e = eager_spread_pct > 0 ? eager_spread_pct / 200 : 0;
    double k = kiln_spread_pct > 0 ? kiln_spread_pct / 200 : 0;
    double lo = eager_us * (1 - e) / (kiln_us * (1 + k));
    double hi = k < 1 ? eager_us * (1 + e) / (kiln_us * (1 - k)) : INFINITY;
    if (lo <= 1 && hi >= 1) {
        /* a baseline this noisy (a scheduler stall while eager was timed) divides into nonsense */
        out->verdict = eager_spread_pct > KILN_SPREAD_LIMIT_PCT ? KILN_SPEEDUP_NOISY_BASELINE
                                                                : KILN_SPEEDUP_NOT_SIGNIFICANT;
        return;
    }
    /* outside the interval even at the noisy end: ResNet-50's eager forward (4.3 ms, rounds spread
     * 38 %) against torch.compile's 1.7 ms is a 2.5x the spreads support, flagged */
    out->value = out->ratio;
    out->verdict =
        kiln_spread_pct > KILN_SPREAD_LIMIT_PCT || eager_spread_pct > KILN_SPREAD_LIMIT_PCT
            ? KILN_SPEEDUP_NOISY
            : KILN_SPEEDUP_SUPPORTED;
}

const char *kiln_store_speedup_text(const kiln_store_speedup *v, char *buf, size_t cap) {
    KILN_ASSERT(v && buf && cap > 0);
    switch (v->verdict) {
    case KILN_SPEEDUP_SUPPORTED:
        snprintf(buf, cap, "%.2fx", v->value);
        break;
    case KILN_SPEEDUP_NOISY:
        snprintf(buf, cap, "%.2fx!", v->value);
        break;
    case KILN_SPEEDUP_NOT_SIGNIFICANT:
        snprintf(buf, cap, "n.s.");
        break;
    case KILN_SPEEDUP_NOISY_BASELINE:
        snprintf(buf, cap, "noisy");
        break;
    default:
        snprintf(buf, cap, "-");
        break;
    }
    return buf;
}

const char *kiln_store_speedup_name(int verdict) {
    switch (verdict) {
    case KILN_SPEEDUP_SUPPORTED:
        return "supported";
    case KILN_SPEEDUP_NOISY:
        return "noisy";
    case KILN_SPEEDUP_NOT_SIGNIFICANT:
        return "not_significant";
    case KILN_SPEEDUP_NOISY_BASELINE:
        return "noisy_baseline";
    default:
        return "unknown";
    }
}
