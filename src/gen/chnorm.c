/* chnorm.c: what the channel-normalisation families share (chnorm.h): a problem read as a short
 * chain of aten calls, shapes and layouts, and the emitters' helpers. The families themselves are
 * groupnorm.c (group_norm, with a fused SiLU as a variant) and batchnorm.c (inference batch_norm,
 * with a fused residual add and/or ReLU).
 *
 * Recognition. Both families read the op chain a problem describes into one small form (a list of
 * aten steps whose arguments are problem inputs, earlier steps' values or constants) and match
 * patterns on it, so that a captured call, a captured leaf module and a hand-written chain are one
 * code path. The chain comes from the definition's "kiln" object:
 *   - "kind": "aten": one captured call, arguments from "args" ({"tensor": i} is input i, keyword
 *     arguments land at their schema position, omitted trailing ones stay ARG_ABSENT so that the
 *     pattern supplies PyTorch's default);
 *   - "kind": "module": a captured leaf module; capture keeps no structured arguments for it, so
 *     the straight-line reference run() it wrote (one `v = torch.ops.aten.OP.OVERLOAD(...)` per
 *     step, layout restores, `return v`) is parsed instead;
 *   - "kind": "chain": a hand-written (or fusion-written) pattern in the form the eltwise family
 *     defines, {"ops": [{"aten": ..., "args": [...], "kwargs": {...}, "out": NAME}, ...],
 *     "outputs": [NAME]}, where a string argument names an input or an earlier op's "out" — one
 *     form for every family, so a fusion pass need not know which family will take the chain.
 * Problems without a "kiln" object are recognised by each family from op_type and input names.
 *
 * Only the ops the two families' patterns use have schemas here; anything else declines at once
 * with the op's name, which is the most useful reason sweep can print. */
#include "chnorm.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * The op chain of a problem. */

/* Positional parameter names of the overloads the patterns use; keyword arguments land by name. */
static const struct {
    const char *op;
    const char *params[CHN_MAX_ARGS];
} chn_schemas[] = {
    {"group_norm.default", {"input", "num_groups", "weight", "bias", "eps", "cudnn_enabled"}},
    {"native_group_norm.default", {"input", "weight", "bias", "N", "C", "HxW", "group", "eps"}},
    {"batch_norm.default",
     {"input", "weight", "bias", "running_mean", "running_var", "training", "momentum", "eps",
      "cudnn_enabled"}},
    {"_batch_norm_impl_index.default",
     {"input", "weight", "bias", "running_mean", "running_var", "training", "momentum", "eps",
      "cudnn_enabled"}},
    {"native_batch_norm.default",
     {"input", "weight", "bias", "running_mean", "running_var", "training", "momentum", "eps"}},
    {"_native_batch_norm_legit_no_training.default",
     {"input", "weight", "bias", "running_mean", "running_var", "momentum", "eps"}},
    {"_batch_norm_no_update.default",
     {"input", "weight", "bias", "running_mean", "running_var", "momentum", "eps"}},
    {"cudnn_batch_norm.default",
     {"input", "weight", "bias", "running_mean", "running_var", "training",
      "exponential_average_factor", "epsilon"}},
    {"silu.default", {"self"}},
    {"silu_.default", {"self"}},
    {"sigmoid.default", {"self"}},
    {"relu.default", {"self"}},
    {"relu_.default", {"self"}},
    {"mul.Tensor", {"self", "other"}},
    {"add.Tensor", {"self", "other", "alpha"}},
    {"add_.Tensor", {"self", "other", "alpha"}},
    {"to.dtype", {"self", "dtype", "non_blocking", "copy", "memory_format"}},
    {"_to_copy.default",
     {"self", "dtype", "layout", "device", "pin_memory", "non_blocking", "memory_format"}},
};

int chn_schema_find(const char *op) {
    for (size_t i = 0; i < sizeof chn_schemas / sizeof chn_schemas[0]; i++)
        if (strcmp(chn_schemas[i].op, op) == 0)
            return (int)i;
    return -1;
}

int chn_schema_param(int s, const char *name) {
    for (int k = 0; k < CHN_MAX_ARGS && chn_schemas[s].params[k]; k++)
        if (strcmp(chn_schemas[s].params[k], name) == 0)
            return k;
    return -1;
}

int chn_op_is(const chn_step *st, const char *a, const char *b) {
    return strcmp(st->op, a) == 0 || (b && strcmp(st->op, b) == 0);
}

int chn_is_cast(const chn_step *st) {
    return chn_op_is(st, "to.dtype", "_to_copy.default");
}

/* The dtype a cast step converts to ("torch.float32" ...), or -1. */
int chn_cast_dtype(const chn_step *st) {
    const chn_arg *a = &st->arg[1];
    if (a->kind != ARG_TEXT)
        return -1;
    if (!strcmp(a->text, "torch.float32") || !strcmp(a->text, "torch.float"))
        return KILN_F32;
    if (!strcmp(a->text, "torch.bfloat16"))
        return KILN_BF16;
    if (!strcmp(a->text, "torch.float16") || !strcmp(a->text, "torch.half"))
        return KILN_F16;
    return -1;
}

int chn_arg_is_value(const chn_arg *a, int step) {
    return a->kind == ARG_VALUE && a->index == step && a->slot == 0;
}

/* A tensor argument that may be left out: an input, or None/absent. Returns 0 when it is neither.
 */
int chn_optional_input(const chn_arg *a, int *input) {
    *input = -1;
    if (a->kind == ARG_INPUT) {
        *input = a->index;
        return 1;
    }
    return a->kind == ARG_NULL || a->kind == ARG_ABSENT;
}

double chn_num_or(const chn_arg *a, double dflt) {
    return a->kind == ARG_NUM ? a->num : dflt;
}

/* One argument as capture's args_json writes it (plus {"value": k} in chains). */
static void arg_from_json(const kiln_problem *p, const cJSON *v, chn_arg *a) {
    memset(a, 0, sizeof *a);
    const cJSON *t = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "tensor") : NULL;
    const cJSON *val = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "value") : NULL;
    if (cJSON_IsNumber(t) && t->valueint >= 0 && t->valueint < p->n_inputs) {
        a->kind = ARG_INPUT, a->index = t->valueint;
    } else if (cJSON_IsNumber(val)) {
        const cJSON *slot = cJSON_GetObjectItemCaseSensitive(v, "output");
        a->kind = ARG_VALUE, a->index = val->valueint;
        a->slot = cJSON_IsNumber(slot) ? slot->valueint : 0;
    } else if (cJSON_IsNumber(v)) {
        a->kind = ARG_NUM, a->num = v->valuedouble;
    } else if (cJSON_IsBool(v)) {
        a->kind = ARG_BOOL, a->num = cJSON_IsTrue(v);
    } else if (cJSON_IsNull(v)) {
        a->kind = ARG_NULL;
    } else if (cJSON_IsString(v)) {
        a->kind = ARG_TEXT;
        snprintf(a->text, sizeof a->text, "%s", v->valuestring);
    } else {
        a->kind = ARG_TEXT;
        snprintf(a->text, sizeof a->text, "(object)");
    }
}

/* A step from an aten name and capture's {"args": [...], "kwargs": {...}}. */
static int step_from_json(const kiln_problem *p, const char *aten, const cJSON *args, chn_step *st,
                          char *why, size_t wl) {
    memset(st, 0, sizeof *st);
    const char *op = strncmp(aten, "aten::", 6) == 0 ? aten + 6 : aten;
    int s = chn_schema_find(op);
    if (s < 0) {
        snprintf(why, wl, "op %s is not part of a channel-norm pattern", aten);
        return 0;
    }
    snprintf(st->op, sizeof st->op, "%s", op);
    const cJSON *pos = cJSON_GetObjectItemCaseSensitive(args, "args");
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(args, "kwargs");
    int k = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, pos) {
        if (k < CHN_MAX_ARGS)
            arg_from_json(p, v, &st->arg[k]);
        k++;
    }
    cJSON_ArrayForEach(v, kw) {
        int at = chn_schema_param(s, v->string);
        if (at >= 0)
            arg_from_json(p, v, &st->arg[at]);
    }
    return 1;
}

/* ---- the module reference: `NAME[, NAME...] = torch.ops.aten.OP.OVL(ARGS)` lines ---- */

typedef struct {
    char name[48];
    int step, slot;
} chn_var;

static const char *skip_space(const char *s) {
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

/* Copies s[0..n) without surrounding blanks into out. */
static void trimmed(const char *s, size_t n, char *out, size_t cap) {
    while (n && isspace((unsigned char)*s))
        s++, n--;
    while (n && isspace((unsigned char)s[n - 1]))
        n--;
    snprintf(out, cap, "%.*s", (int)n, s);
}

static void arg_from_text(const kiln_problem *p, const chn_var *vars, int n_vars, const char *t,
                          chn_arg *a) {
    memset(a, 0, sizeof *a);
    char *end = NULL;
    double d = strtod(t, &end);
    if (end != t && *end == 0) {
        a->kind = ARG_NUM, a->num = d;
        return;
    }
    if (!strcmp(t, "True") || !strcmp(t, "False")) {
        a->kind = ARG_BOOL, a->num = t[0] == 'T';
        return;
    }
    if (!strcmp(t, "None")) {
        a->kind = ARG_NULL;
        return;
    }
    for (int i = n_vars - 1; i >= 0; i--)
        if (!strcmp(vars[i].name, t)) {
            a->kind = ARG_VALUE, a->index = vars[i].step, a->slot = vars[i].slot;
            return;
        }
    int in = kiln_problem_input_index(p, t);
    if (in >= 0) {
        a->kind = ARG_INPUT, a->index = in;
        return;
    }
    a->kind = ARG_TEXT;
    snprintf(a->text, sizeof a->text, "%.47s", t);
}

static int chain_from_module(const kiln_problem *p, chn_chain *ch, char *why, size_t wl) {
    chn_var vars[32];
    int n_vars = 0;
    ch->ret_step = -1;
    const char *line = p->reference ? p->reference : "";
    while (*line) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        char text[1024];
        snprintf(text, sizeof text, "%.*s", (int)(len < sizeof text ? len : sizeof text - 1), line);
        line += len + (nl != NULL);
        char *hash = strchr(text, '#');
        if (hash)
            *hash = 0;
        const char *t = skip_space(text);
        if (!strncmp(t, "return ", 7)) {
            char name[48];
            size_t n = strcspn(t + 7, ".( \t,");
            trimmed(t + 7, n, name, sizeof name);
            for (int i = n_vars - 1; i >= 0; i--)
                if (!strcmp(vars[i].name, name)) {
                    ch->ret_step = vars[i].step, ch->ret_slot = vars[i].slot;
                    break;
                }
            continue;
        }
        const char *call = strstr(t, "torch.ops.");
        if (!call)
            continue; /* layout restores, clones, DEVICE = ... */
        if (strncmp(call, "torch.ops.aten.", 15) != 0) {
            snprintf(why, wl, "the module calls %.60s, not an aten op", call);
            return 0;
        }
        const char *eq = strchr(t, '=');
        const char *open = strchr(call, '(');
        const char *close = strrchr(call, ')');
        if (eq && eq > call)
            eq = NULL; /* a bare call: an in-place op, rebinding its first argument below */
        if (!open || !close || close < open) {
            snprintf(why, wl, "cannot read the module reference line '%.80s'", t);
            return 0;
        }
        if (ch->n == CHN_MAX_STEPS) {
            snprintf(why, wl, "the module has more than %d aten ops", CHN_MAX_STEPS);
            return 0;
        }
        chn_step *st = &ch->step[ch->n];
        memset(st, 0, sizeof *st);
        trimmed(call + 15, (size_t)(open - call - 15), st->op, sizeof st->op);
        int s = chn_schema_find(st->op);
        if (s < 0) {
            snprintf(why, wl, "op aten::%s is not part of a channel-norm pattern", st->op);
            return 0;
        }
        /* arguments: split at top-level commas */
        int k = 0, depth = 0;
        const char *a0 = open + 1;
        for (const char *c = open + 1; c <= close; c++) {
            if (*c == '(' || *c == '[')
                depth++;
            else if ((*c == ')' || *c == ']') && c != close)
                depth--;
            if (!((*c == ',' && depth == 0) || c == close))
                continue;
            char piece[256];
            trimmed(a0, (size_t)(c - a0), piece, sizeof piece);
            a0 = c + 1;
            if (!piece[0])
                continue;
            const char *kweq = strchr(piece, '=');
            int at = k++;
            const char *val = piece;
            if (kweq && kweq[1] != '=' && strcspn(piece, "([") > (size_t)(kweq - piece)) {
                char key[48];
                trimmed(piece, (size_t)(kweq - piece), key, sizeof key);
                at = chn_schema_param(s, key);
                val = skip_space(kweq + 1);
                k--;
            }
            if (at >= 0 && at < CHN_MAX_ARGS)
                arg_from_text(p, vars, n_vars, val, &st->arg[at]);
        }
        /* the names assigned: "v0" or "v0, _, _"; a bare in-place call rebinds its first argument
         */
        if (!eq) {
            size_t n = strcspn(open + 1, ",)");
            char name[48];
            trimmed(open + 1, n, name, sizeof name);
            const char *dot = strchr(st->op, '.');
            if (!dot || dot == st->op || dot[-1] != '_') {
                snprintf(why, wl, "the module's aten::%s result is not assigned", st->op);
                return 0;
            }
            if (n_vars < 32) {
                snprintf(vars[n_vars].name, sizeof vars[0].name, "%s", name);
                vars[n_vars].step = ch->n, vars[n_vars].slot = 0;
                n_vars++;
            }
        }
        int slot = 0;
        for (const char *c = t; eq && c < eq;) {
            size_t n = strcspn(c, ",=");
            if (c + n > eq)
                n = (size_t)(eq - c);
            char name[48];
            trimmed(c, n, name, sizeof name);
            if (name[0] && strcmp(name, "_") && n_vars < 32) {
                snprintf(vars[n_vars].name, sizeof vars[0].name, "%s", name);
                vars[n_vars].step = ch->n, vars[n_vars].slot = slot;
                n_vars++;
            }
            slot++;
            c += n + 1;
        }
        ch->n++;
    }
    if (ch->n == 0 || ch->ret_step < 0) {
        snprintf(why, wl, "cannot read the module's aten calls from its reference");
        return 0;
    }
    return 1;
}

/* The "chain" form (shared with the eltwise family, docs/families/eltwise.md): {"ops": [{"aten":
 * "aten::OP.OVL" (or "op": "OP"), "args": [...], "kwargs": {...}, "out": NAME}, ...], "outputs":
 * [NAME]}. A string argument names a value (a problem input or an earlier "out") unless it starts
 * with "torch." (a dtype); keyword strings are constants; an in-place op without "out" rebinds its
 * first argument. */
static int chain_from_ops(const kiln_problem *p, chn_chain *ch, char *why, size_t wl) {
    chn_var vars[32];
    int n_vars = 0;
    const cJSON *op;
    cJSON_ArrayForEach(op, cJSON_GetObjectItemCaseSensitive(ch->kiln, "ops")) {
        const cJSON *aten = cJSON_GetObjectItemCaseSensitive(op, "aten");
        const cJSON *shrt = cJSON_GetObjectItemCaseSensitive(op, "op");
        char label[80];
        if (cJSON_IsString(aten))
            snprintf(label, sizeof label, "%s", aten->valuestring);
        else if (cJSON_IsString(shrt))
            snprintf(label, sizeof label, "aten::%.60s.default", shrt->valuestring);
        else {
            snprintf(why, wl, "kiln.ops: an op without \"aten\"");
            return 0;
        }
        if (ch->n == CHN_MAX_STEPS) {
            snprintf(why, wl, "kiln.ops: more than %d ops", CHN_MAX_STEPS);
            return 0;
        }
        chn_step *st = &ch->step[ch->n];
        if (!step_from_json(p, label, NULL, st, why, wl))
            return 0;
        const int s = chn_schema_find(st->op);
        int k = 0;
        const cJSON *v;
        cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(op, "args")) {
            if (k < CHN_MAX_ARGS) {
                if (cJSON_IsString(v) && strncmp(v->valuestring, "torch.", 6) != 0) {
                    arg_from_text(p, vars, n_vars, v->valuestring, &st->arg[k]);
                    if (st->arg[k].kind == ARG_TEXT) {
                        snprintf(why, wl, "kiln.ops: '%.40s' names no input or earlier value",
                                 v->valuestring);
                        return 0;
                    }
                } else {
                    arg_from_json(p, v, &st->arg[k]);
                }
            }
            k++;
        }
        cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(op, "kwargs")) {
            int at = chn_schema_param(s, v->string);
            if (at >= 0)
                arg_from_json(p, v, &st->arg[at]);
        }
        const cJSON *out = cJSON_GetObjectItemCaseSensitive(op, "out");
        const char *name = cJSON_IsString(out) ? out->valuestring : NULL;
        const char *dot = strchr(st->op, '.');
        const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(op, "args"), 0);
        if (!name && dot && dot > st->op && dot[-1] == '_' && cJSON_IsString(first))
            name = first->valuestring; /* in place: the first argument is now this value */
        if (name && n_vars < 32) {
            snprintf(vars[n_vars].name, sizeof vars[0].name, "%s", name);
            vars[n_vars].step = ch->n, vars[n_vars].slot = 0;
            n_vars++;
        }
        ch->n++;
    }
    if (ch->n == 0) {
        snprintf(why, wl, "kiln.ops is missing or empty");
        return 0;
    }
    const cJSON *outs = cJSON_GetObjectItemCaseSensitive(ch->kiln, "outputs");
    const cJSON *o0 = cJSON_GetArrayItem(outs, 0);
    const char *ret = cJSON_IsString(o0) ? o0->valuestring : p->outputs[0].name;
    ch->ret_step = -1;
    for (int i = n_vars - 1; i >= 0 && ch->ret_step < 0; i--)
        if (!strcmp(vars[i].name, ret))
            ch->ret_step = vars[i].step, ch->ret_slot = vars[i].slot;
    if (ch->ret_step < 0) {
        snprintf(why, wl, "kiln.outputs: no op computes '%.40s'", ret);
        return 0;
    }
    return 1;
}

/* Reads the chain of p from its "kiln" object. Returns 1, or 0 with why; *no_kiln is set when the
 * definition has no "kiln" object (the caller then tries op_type). */
int chn_chain_load(const kiln_problem *p, chn_chain *ch, int *no_kiln, char *why, size_t wl) {
    memset(ch, 0, sizeof *ch);
    ch->kiln = kiln_problem_read_kiln(p);
    *no_kiln = ch->kiln == NULL;
    if (!ch->kiln)
        return 0;
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(ch->kiln, "kind");
    const char *k = cJSON_IsString(kind) ? kind->valuestring : "";
    snprintf(ch->kind, sizeof ch->kind, "%s", k);
    if (!strcmp(k, "aten")) {
        const cJSON *aten = cJSON_GetObjectItemCaseSensitive(ch->kiln, "aten");
        if (!cJSON_IsString(aten)) {
            snprintf(why, wl, "kiln.aten is missing");
            return 0;
        }
        if (!step_from_json(p, aten->valuestring,
                            cJSON_GetObjectItemCaseSensitive(ch->kiln, "args"), &ch->step[0], why,
                            wl))
            return 0;
        ch->n = 1;
        /* capture drops empty outputs (e.g. batch norm's saved statistics on cpu) */
        const cJSON *drop = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(ch->kiln, "dropped_outputs"), "indices");
        for (int o = 0; ch->n_kept < p->n_outputs && o < 8; o++) {
            int dropped = 0;
            const cJSON *d;
            cJSON_ArrayForEach(d, drop) dropped |= cJSON_IsNumber(d) && d->valueint == o;
            if (!dropped)
                ch->kept[ch->n_kept++] = o;
        }
        return 1;
    }
    if (!strcmp(k, "module"))
        return chain_from_module(p, ch, why, wl);
    if (!strcmp(k, "chain"))
        return chain_from_ops(p, ch, why, wl);
    snprintf(why, wl, "kiln.kind '%s' is not aten, module or chain", k);
    return 0;
}

void chn_chain_free(chn_chain *ch) {
    cJSON_Delete(ch->kiln);
    ch->kiln = NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Shapes, layouts and expressions. */

int chn_is_float(kiln_dtype t) {
    return t == KILN_F32 || t == KILN_BF16 || t == KILN_F16;
}

const char *chn_cuda_type(kiln_dtype t) {
    return t == KILN_BF16 ? "__nv_bfloat16" : t == KILN_F16 ? "__half" : "float";
}

/* 0 float32, 1 bfloat16, 2 float16: the templates' *_MID codes. */
int chn_mid_code(kiln_dtype t) {
    return t == KILN_BF16 ? 1 : t == KILN_F16 ? 2 : 0;
}

/* C (cpu) type, load-to-float and store-from-float spellings of a dtype. */
void chn_cpu_type_defines(kiln_strbuf *b, const char *prefix, const char *role, kiln_dtype t,
                          int store) {
    const char *ty = t == KILN_BF16 ? "kiln_bf16" : t == KILN_F16 ? "kiln_f16" : "float";
    const char *ld = t == KILN_BF16  ? "kiln_bf16_to_float"
                     : t == KILN_F16 ? "kiln_f16_to_float"
                                     : "";
    const char *st = t == KILN_BF16  ? "kiln_float_to_bf16"
                     : t == KILN_F16 ? "kiln_float_to_f16"
                                     : "";
    kiln_strbuf_printf(b, "#define %s_T%s %s\n", prefix, role, ty);
    kiln_strbuf_printf(b, "#define %s_%s%s(v) %s(v)\n", prefix, store ? "S" : "L", role,
                       store ? st : ld);
}

/* Sizes of tensor t in every workload must agree with dimension d of tensor u. */
int chn_same_dim(const kiln_problem *p, const kiln_tensor_spec *t, int dt,
                 const kiln_tensor_spec *u, int du) {
    for (int w = 0; w < p->n_workloads; w++) {
        int64_t a[KILN_MAX_DIMS], b[KILN_MAX_DIMS];
        kiln_tensor_shape(p, t, &p->workloads[w], a);
        kiln_tensor_shape(p, u, &p->workloads[w], b);
        if (a[dt] != b[du])
            return 0;
    }
    return 1;
}

int chn_same_shape(const kiln_problem *p, const kiln_tensor_spec *t, const kiln_tensor_spec *u) {
    if (t->ndim != u->ndim)
        return 0;
    for (int d = 0; d < t->ndim; d++)
        if (!chn_same_dim(p, t, d, u, d))
            return 0;
    return 1;
}

/* "(a*b*4)" for dimensions [from, to) of t, "1" when empty. */
void chn_dims_expr(const kiln_problem *p, const kiln_tensor_spec *t, int from, int to, char *out,
                   size_t cap) {
    if (from >= to) {
        snprintf(out, cap, "1");
        return;
    }
    size_t off = (size_t)snprintf(out, cap, "(");
    for (int d = from; d < to && off < cap; d++) {
        if (t->axis[d] >= 0)
            off += (size_t)snprintf(out + off, cap - off, "%s%s", d > from ? "*" : "",
                                    p->axes[t->axis[d]].name);
        else
            off += (size_t)snprintf(out + off, cap - off, "%s%lld", d > from ? "*" : "",
                                    (long long)t->literal[d]);
    }
    if (off < cap)
        snprintf(out + off, cap - off, ")");
}

int64_t chn_dims_prod(const int64_t *shape, int from, int to) {
    int64_t n = 1;
    for (int d = from; d < to; d++)
        n *= shape[d];
    return n;
}

/* The permutation capture stored tensor `name` with (stored dim k = captured dim perm[k]);
 * identity when contiguous, a contiguous copy, or not described. Returns 0 with why for a
 * broadcast input (stored once, expanded by the reference). */
int chn_layout_perm(const cJSON *kiln, const char *name, int ndim, int *perm, char *why,
                    size_t wl) {
    for (int d = 0; d < ndim; d++)
        perm[d] = d;
    const cJSON *lay =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(kiln, "layouts"), name);
    if (!lay)
        return 1;
    if (cJSON_GetObjectItemCaseSensitive(lay, "expand")) {
        snprintf(why, wl, "input %s is broadcast (stored once, expanded by the reference)", name);
        return 0;
    }
    const cJSON *pm = cJSON_GetObjectItemCaseSensitive(lay, "permute");
    if (!pm)
        return 1;
    int k = 0, seen = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, pm) {
        if (k == ndim || !cJSON_IsNumber(v) || v->valueint < 0 || v->valueint >= ndim ||
            (seen >> v->valueint & 1))
            break;
        seen |= 1 << v->valueint;
        perm[k++] = v->valueint;
    }
    if (k != ndim || cJSON_GetArraySize(pm) != ndim) {
        snprintf(why, wl, "the layout of %s has a malformed \"permute\"", name);
        return 0;
    }
    return 1;
}

int chn_perm_equal(const int *a, const int *b, int n) {
    return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

/* An input by one of several conventional names, with the given rank (-1: any); -1 when none. */
int chn_input_named(const kiln_problem *p, const char *const *names, int ndim) {
    for (int k = 0; names[k]; k++) {
        int i = kiln_problem_input_index(p, names[k]);
        if (i >= 0 && !p->inputs[i].is_scalar && (ndim < 0 || p->inputs[i].ndim == ndim))
            return i;
    }
    return -1;
}

int chn_scalar_named(const kiln_problem *p, const char *const *names) {
    for (int k = 0; names[k]; k++) {
        int i = kiln_problem_input_index(p, names[k]);
        if (i >= 0 && p->inputs[i].is_scalar && kiln_dtype_is_float(p->inputs[i].dtype))
            return i;
    }
    return -1;
}

/* eps written in a hand-written reference ("EPS = 1e-6", "eps=1e-5"), else dflt. */
double chn_eps_from_reference(const kiln_problem *p, double dflt) {
    for (const char *s = p->reference; s && (s = strcasestr(s, "eps")); s += 3) {
        const char *t = s + 3;
        while (isalnum((unsigned char)*t) || *t == '_')
            t++;
        t = skip_space(t);
        if (*t != '=' || t[1] == '=')
            continue;
        char *end = NULL;
        double v = strtod(skip_space(t + 1), &end);
        if (end != skip_space(t + 1) && v > 0 && v < 1)
            return v;
    }
    return dflt;
}

const char *const CHN_X_NAMES[] = {"x", "input", "hidden_states", "X", "input0", NULL};
const char *const CHN_W_NAMES[] = {"weight", "gamma", "w", NULL};
const char *const CHN_B_NAMES[] = {"bias", "beta", "b", NULL};
const char *const CHN_EPS_NAMES[] = {"eps", "epsilon", NULL};

/* The parameter list of an entry point (CUDA or C types) from the problem's ABI signature. */
void chn_params_of(const kiln_signature *sig, kiln_strbuf *b) {
    for (int i = 0; i < sig->n; i++)
        kiln_strbuf_printf(b, "%s%s %s", i ? ", " : "", sig->p[i].c_type, sig->p[i].name);
}

/* A pointer argument: the problem's tensor for a role, or a typed null. */
void chn_ptr_arg(kiln_strbuf *b, const kiln_problem *p, int in_index, int out_index,
                 const char *null_type) {
    if (in_index >= 0)
        kiln_strbuf_printf(b, "%s", p->inputs[in_index].name);
    else if (out_index >= 0)
        kiln_strbuf_printf(b, "%s", p->outputs[out_index].name);
    else
        kiln_strbuf_printf(b, "(%s)0", null_type);
}

/* The whole candidate: banner over the body (CPU banners name no parameters: they do not apply). */
char *chn_with_banner(const kiln_family *f, const kiln_match *m, const int64_t *pt, int cuda,
                      kiln_strbuf *body) {
    kiln_family bare = *f;
    if (!cuda)
        bare.n_params = 0;
    char *banner = kiln_family_banner(&bare, m, pt, body->s);
    char *s = xasprintf("%s%s", banner, body->s);
    free(banner);
    free(body->s);
    return s;
}

double chn_flops_per_element(const kiln_problem *p, const kiln_match *m, const kiln_workload *w,
                             double per) {
    int x = m->input_of_role[0];
    int64_t shape[KILN_MAX_DIMS];
    return per * (double)kiln_tensor_shape(p, &p->inputs[x], w, shape);
}

double chn_min_bytes(const kiln_problem *p, const kiln_match *m, const kiln_workload *w) {
    (void)m;
    return kiln_problem_min_bytes(p, w);
}

/* Tolerances: the defaults. Both families accumulate in fp32 with exact per-tile statistics and
 * round each output once (or where the reference rounds), so nothing looser is needed. */
kiln_tolerance chn_tolerance(kiln_dtype t) {
    return kiln_tolerance_default(t);
}

int64_t chn_cdiv(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}
