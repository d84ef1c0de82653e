/* lt_call.c: a cuBLASLt candidate's directive read and written, and the call it stands for settled
 * and run on a device (lt_call.h). */
#include "lt_call.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct kiln_lt_call {
    kiln_lt_call_desc d; /* resolved */
    kiln_lt_plan *plan;
};

/* An integer member of o in [lo, hi]. */
static int json_int(const cJSON *o, const char *name, double lo, double hi, int64_t *out,
                    kiln_err *err) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsNumber(f) || !(f->valuedouble >= lo && f->valuedouble <= hi) ||
        f->valuedouble != floor(f->valuedouble))
        return kiln_errf(err, KILN_ERR_COMPILE,
                         "cublaslt directive: '%s' %s (an integer in [%.0f, %.0f])", name,
                         f ? "is out of range" : "is missing", lo, hi);
    *out = (int64_t)f->valuedouble;
    return KILN_OK;
}

/* The bias argument is there exactly when the epilogue reads one: cuBLASLt would otherwise read
 * a null pointer, or a bias would be silently dropped. */
static int bias_matches(const kiln_lt_call_desc *d, kiln_err *err) {
    int wants_bias = kiln_lt_epilogue_has_bias(d->gemm.epilogue);
    if (wants_bias == (d->arg_bias >= 0))
        return KILN_OK;
    return kiln_errf(err, KILN_ERR_COMPILE, "cublaslt directive: epilogue '%s' %s a bias argument",
                     kiln_lt_epilogue_name(d->gemm.epilogue), wants_bias ? "needs" : "takes no");
}

int kiln_lt_call_parse(const char *json, const kiln_signature *sig, kiln_lt_call_desc *out,
                       kiln_err *err) {
    memset(out, 0, sizeof *out);
    cJSON *o = cJSON_Parse(json);
    int rc = KILN_OK;
    kiln_err lerr;
    if (!cJSON_IsObject(o)) {
        rc = kiln_errf(err, KILN_ERR_COMPILE, "cublaslt directive: not one JSON object");
        goto done;
    }
    if (kiln_lt_gemm_from_json(cJSON_GetObjectItemCaseSensitive(o, "gemm"), &out->gemm, &lerr)) {
        rc = kiln_errf(err, KILN_ERR_COMPILE, "cublaslt directive: %s", lerr.msg);
        goto done;
    }
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(o, "config");
    if (cJSON_IsObject(cfg)) {
        out->has_config = 1;
        if (kiln_lt_config_from_json(cfg, &out->config, &lerr)) {
            rc = kiln_errf(err, KILN_ERR_COMPILE, "cublaslt directive: %s", lerr.msg);
            goto done;
        }
    } else if ((rc = json_int(o, "config", 0, KILN_LT_CALL_CAP - 1, &out->index, err))) {
        goto done;
    }
    if (cJSON_GetObjectItemCaseSensitive(o, "version") &&
        (rc = json_int(o, "version", 0, 9007199254740992.0, &out->version, err)))
        goto done;
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(o, "args");
    int64_t a, b, bias, d;
    if ((rc = json_int(args, "a", 0, KILN_MAX_PARAMS - 1, &a, err)) ||
        (rc = json_int(args, "b", 0, KILN_MAX_PARAMS - 1, &b, err)) ||
        (rc = json_int(args, "bias", -1, KILN_MAX_PARAMS - 1, &bias, err)) ||
        (rc = json_int(args, "d", 0, KILN_MAX_PARAMS - 1, &d, err)))
        goto done;
    out->arg_a = (int)a;
    out->arg_b = (int)b;
    out->arg_bias = (int)bias;
    out->arg_d = (int)d;
    int64_t sa = -1, sb = -1;
    const int n_scales = (cJSON_GetObjectItemCaseSensitive(args, "a_scale") != NULL) +
                         (cJSON_GetObjectItemCaseSensitive(args, "b_scale") != NULL);
    if (n_scales == 1) {
        rc = kiln_errf(err, KILN_ERR_COMPILE,
                       "cublaslt directive: args has one of a_scale and b_scale (both or neither)");
        goto done;
    }
    if (n_scales && ((rc = json_int(args, "a_scale", 0, KILN_MAX_PARAMS - 1, &sa, err)) ||
                     (rc = json_int(args, "b_scale", 0, KILN_MAX_PARAMS - 1, &sb, err))))
        goto done;
    if (n_scales && !kiln_dtype_is_fp8(out->gemm.a_type)) {
        rc = kiln_errf(err, KILN_ERR_COMPILE,
                       "cublaslt directive: scales apply to fp8 inputs only (A is %s)",
                       kiln_dtype_name(out->gemm.a_type));
        goto done;
    }
    out->has_scales = n_scales == 2;
    out->arg_a_scale = (int)sa;
    out->arg_b_scale = (int)sb;
    if ((rc = bias_matches(out, err)))
        goto done;
    if (sig) {
        const int64_t idx[6] = {a, b, bias, d, sa, sb};
        static const char *const names[6] = {"a", "b", "bias", "d", "a_scale", "b_scale"};
        for (int i = 0; i < 6; i++)
            if (idx[i] >= 0 && (idx[i] >= sig->n || sig->p[idx[i]].kind != KILN_PARAM_PTR)) {
                rc = kiln_errf(err, KILN_ERR_COMPILE,
                               "cublaslt directive: args.%s = %lld is not a tensor parameter of "
                               "the problem (%d parameters)",
                               names[i], (long long)idx[i], sig->n);
                goto done;
            }
    }
done:
    cJSON_Delete(o);
    return rc;
}

/* Elements an operand stored as rows × cols (row stride ld), repeated over batch at stride bs
 * (0: shared), reaches from its first element. */
static int64_t operand_reach(int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t bs) {
    return (batch - 1) * bs + (rows - 1) * ld + cols;
}

int kiln_lt_call_check(const kiln_lt_call_desc *d, const kiln_problem *p, kiln_err *err) {
    const kiln_lt_gemm *g = &d->gemm;
    int rc = bias_matches(d, err);
    if (rc)
        return rc;
    struct {
        const char *name;
        int arg, output;
        kiln_dtype type;
        int64_t reach;
    } ops[6] = {
        {"a", d->arg_a, 0, g->a_type,
         g->trans_a ? operand_reach(g->k, g->m, g->lda, g->batch, g->stride_a)
                    : operand_reach(g->m, g->k, g->lda, g->batch, g->stride_a)},
        {"b", d->arg_b, 0, g->b_type,
         g->trans_b ? operand_reach(g->n, g->k, g->ldb, g->batch, g->stride_b)
                    : operand_reach(g->k, g->n, g->ldb, g->batch, g->stride_b)},
        {"bias", d->arg_bias, 0, g->bias_type, g->n},
        {"d", d->arg_d, 1, g->d_type, operand_reach(g->m, g->n, g->ldd, g->batch, g->stride_d)},
        {"a_scale", d->has_scales ? d->arg_a_scale : -1, 0, KILN_F32, 1},
        {"b_scale", d->has_scales ? d->arg_b_scale : -1, 0, KILN_F32, 1},
    };
    for (int i = 0; i < 6; i++) {
        if (ops[i].arg < 0)
            continue;
        int k = ops[i].arg;
        const kiln_tensor_spec *t = k < p->n_inputs                  ? &p->inputs[k]
                                    : k < p->n_inputs + p->n_outputs ? &p->outputs[k - p->n_inputs]
                                                                     : NULL;
        int is_output = k >= p->n_inputs;
        if (!t || t->is_scalar || is_output != ops[i].output)
            return kiln_errf(err, KILN_ERR_COMPILE,
                             "cublaslt directive: args.%s = %d is not an %s tensor of the problem",
                             ops[i].name, k, ops[i].output ? "output" : "input");
        if (t->layout.expanded)
            return kiln_errf(err, KILN_ERR_COMPILE,
                             "cublaslt directive: args.%s '%s' is stored broadcast (fewer elements "
                             "than its shape): cuBLASLt does not read it",
                             ops[i].name, t->name);
        if (t->dtype != ops[i].type)
            return kiln_errf(
                err, KILN_ERR_COMPILE, "cublaslt directive: args.%s is %s '%s', the GEMM says %s",
                ops[i].name, kiln_dtype_name(t->dtype), t->name, kiln_dtype_name(ops[i].type));
        for (int w = 0; w < p->n_workloads; w++) {
            int64_t shape[KILN_MAX_DIMS];
            int64_t n = kiln_tensor_shape(p, t, &p->workloads[w], shape);
            if (ops[i].reach > n)
                return kiln_errf(err, KILN_ERR_COMPILE,
                                 "cublaslt directive: the GEMM's %s reaches %lld elements, '%s' "
                                 "has %lld in workload %d",
                                 ops[i].name, (long long)ops[i].reach, t->name, (long long)n, w);
        }
    }
    return KILN_OK;
}

char *kiln_lt_call_json(const kiln_lt_call_desc *d) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "gemm", kiln_lt_gemm_to_json(&d->gemm));
    if (d->has_config)
        cJSON_AddItemToObject(o, "config", kiln_lt_config_to_json(&d->config));
    else
        cJSON_AddNumberToObject(o, "config", (double)d->index);
    if (d->version)
        cJSON_AddNumberToObject(o, "version", (double)d->version);
    cJSON *args = cJSON_AddObjectToObject(o, "args");
    cJSON_AddNumberToObject(args, "a", d->arg_a);
    cJSON_AddNumberToObject(args, "b", d->arg_b);
    cJSON_AddNumberToObject(args, "bias", d->arg_bias);
    cJSON_AddNumberToObject(args, "d", d->arg_d);
    if (d->has_scales) {
        cJSON_AddNumberToObject(args, "a_scale", d->arg_a_scale);
        cJSON_AddNumberToObject(args, "b_scale", d->arg_b_scale);
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    char *copy = xstrdup(s);
    cJSON_free(s);
    return copy;
}

int kiln_lt_call_open(const kiln_lt_call_desc *d, kiln_lt_call **out, kiln_err *err) {
    *out = NULL;
    kiln_lt_plan *plan = NULL;
    int rc = kiln_lt_plan_create(&d->gemm, &plan, err);
    if (rc)
        return rc;
    kiln_lt_call_desc r = *d;
    int64_t version = (int64_t)kiln_lt.GetVersion();
    if (d->has_config) {
        if (d->version && d->version != version) {
            kiln_lt_plan_destroy(plan);
            return kiln_errf(err, KILN_ERR_UNSUPPORTED,
                             "this configuration was enumerated with cuBLASLt %lld; this is %lld",
                             (long long)d->version, (long long)version);
        }
    } else {
        kiln_lt_config *list = NULL;
        int n = 0, n_valid = 0;
        rc = kiln_lt_enumerate(plan, KILN_LT_CALL_WORKSPACE, KILN_LT_CALL_CAP, &list, &n, &n_valid,
                               err);
        if (rc == KILN_OK && d->index >= n)
            rc = kiln_errf(err, KILN_ERR_COMPILE,
                           "cuBLASLt configuration %lld does not exist: this GEMM has %d on this "
                           "device (indices 0 to %d)",
                           (long long)d->index, n, n - 1);
        if (rc == KILN_OK) {
            r.config = list[d->index];
            r.has_config = 1;
        }
        free(list);
        if (rc) {
            kiln_lt_plan_destroy(plan);
            return rc;
        }
    }
    r.version = version;
    kiln_lt_call *c = xcalloc(1, sizeof *c);
    c->d = r;
    c->plan = plan;
    *out = c;
    return KILN_OK;
}

void kiln_lt_call_close(kiln_lt_call *c) {
    if (!c)
        return;
    kiln_lt_plan_destroy(c->plan);
    free(c);
}

const kiln_lt_call_desc *kiln_lt_call_resolved(const kiln_lt_call *c) {
    return &c->d;
}

uint64_t kiln_lt_call_workspace(const kiln_lt_call *c) {
    return c->d.config.workspace;
}

int kiln_lt_call_run(kiln_lt_call *c, void *const *params, uint64_t workspace, void *stream,
                     kiln_err *err) {
    const kiln_lt_call_desc *d = &c->d;
    kiln_lt_ptrs ptrs = {
        .a = *(const uint64_t *)params[d->arg_a],
        .b = *(const uint64_t *)params[d->arg_b],
        .d = *(const uint64_t *)params[d->arg_d],
        .bias = d->arg_bias >= 0 ? *(const uint64_t *)params[d->arg_bias] : 0,
        .a_scale = d->has_scales ? *(const uint64_t *)params[d->arg_a_scale] : 0,
        .b_scale = d->has_scales ? *(const uint64_t *)params[d->arg_b_scale] : 0,
        .workspace = workspace,
        .workspace_bytes = workspace ? d->config.workspace : 0,
    };
    return kiln_lt_run(c->plan, &d->config, &ptrs, stream, err);
}
