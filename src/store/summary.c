/* summary.c: the numbers of a gate result (docs/gate.md) that the store keeps in columns and that
 * the search, the library, submit and the dashboard decide by: the one reader of the result's
 * summary, so that a change of the gate's JSON shape changes one function. */
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
    out->time_us = out->spread_pct = out->sol_pct = out->ref_time_us = -1;
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
        double ref = number_at(w, "ref_time_us", -1, NULL);
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
