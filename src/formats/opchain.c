/* opchain.c: reads a problem's op chain (opchain.h) from its "kiln" object: capture's record of an
 * aten call, the "ops" list of a module or a chain, or the straight-line reference of a captured
 * problem that predates "ops".
 *
 * Names. Values are named while reading: every problem input by its name, every op result by the
 * name its "out" (or the reference's assignment) gives it; a later binding of a name wins, which
 * is how an in-place op (`add_`, whose first argument then holds its result) is followed. A name
 * bound to a whole result list (the reference's `result = torch.ops.aten.native_layer_norm...`)
 * is indexed as `result[k]`.
 *
 * Constants. JSON and Python literals become the same kiln_arg: None, numbers (capture writes
 * non-finite floats as the strings "inf", "-inf", "nan"), bools, torch dtypes, integer lists; any
 * other constant keeps its text. */
#include "opchain.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

typedef struct {
    char name[48];
    kiln_value value;
    int whole; /* bound to the whole result list of value.op */
} binding;

typedef struct {
    const kiln_problem *p;
    kiln_opchain *c;
    kiln_err *err;
    int n_names, cap_names;
    binding *names;
    int line; /* reading the reference: the line, for messages; 0 otherwise */
} reader;

static int bad(reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(reader *r, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r->line > 0)
        return kiln_errf(r->err, KILN_ERR_FORMAT, "reference line %d: %s", r->line, msg);
    return kiln_errf(r->err, KILN_ERR_FORMAT, "%s", msg);
}

static void bind(reader *r, const char *name, kiln_value v, int whole) {
    if (r->n_names == r->cap_names) {
        r->cap_names = r->cap_names ? 2 * r->cap_names : 64;
        r->names = xrealloc(r->names, (size_t)r->cap_names * sizeof *r->names);
    }
    binding *b = &r->names[r->n_names++];
    snprintf(b->name, sizeof b->name, "%s", name);
    b->value = v;
    b->whole = whole;
}

static const binding *lookup(const reader *r, const char *name, size_t len) {
    for (int i = r->n_names - 1; i >= 0; i--)
        if (strlen(r->names[i].name) == len && memcmp(r->names[i].name, name, len) == 0)
            return &r->names[i];
    return NULL;
}

/* A result of op k: records that the op has at least slot + 1 results. */
static kiln_value result_of(reader *r, int k, int slot) {
    kiln_op *op = &r->c->ops[k];
    if (slot + 1 > op->n_results)
        op->n_results = slot + 1;
    return (kiln_value){-1, k, slot};
}

/* Refers to name[index] (index -1: the name alone) as a tensor argument. */
static int name_arg(reader *r, const char *name, size_t len, int index, kiln_arg *a) {
    const binding *b = lookup(r, name, len);
    if (!b)
        return bad(r, "'%.*s' is not an input or an earlier value", (int)(len > 60 ? 60 : len),
                   name);
    a->kind = KILN_ARG_TENSOR;
    if (index < 0) {
        a->value = b->value;
    } else if (b->whole && index < KILN_OP_MAX_RESULTS) {
        a->value = result_of(r, b->value.op, index);
        r->c->ops[b->value.op].tuple = 1;
    } else {
        return bad(r, "'%.*s[%d]' is not a result", (int)(len > 60 ? 60 : len), name, index);
    }
    snprintf(a->text, sizeof a->text, "%.*s", (int)len, name);
    return KILN_OK;
}

/* A string constant: a dtype, a non-finite float as capture writes it, or text. */
static void string_arg(const char *s, kiln_arg *a) {
    snprintf(a->text, sizeof a->text, "%s", s);
    if (strcmp(s, "inf") == 0 || strcmp(s, "-inf") == 0 || strcmp(s, "nan") == 0) {
        a->kind = KILN_ARG_NUM;
        a->num = s[0] == 'n' ? NAN : s[0] == '-' ? -INFINITY : INFINITY;
    } else if (strncmp(s, "torch.", 6) == 0 && kiln_dtype_parse_torch(s, &a->dtype) == 0) {
        a->kind = KILN_ARG_DTYPE;
    } else {
        a->kind = KILN_ARG_OTHER;
    }
}

/* ---- JSON: capture's "args" and the "ops" form ---- */

static int json_arg(reader *r, const cJSON *v, int aten_args, kiln_arg *a);

/* A list of tensors and Nones (index's indices) into a's .values: 1, 0 when v is not such a list,
 * -1 (err set) when an element is a tensor that cannot be read. The argument stays
 * KILN_ARG_OTHER for readers that only want its text. */
static int tensor_list(reader *r, const cJSON *v, int aten_args, kiln_arg *a) {
    const cJSON *e;
    int n = 0, tensors = 0;
    cJSON_ArrayForEach(e, v) {
        if (!cJSON_IsNull(e) && !cJSON_IsObject(e))
            return 0;
    }
    cJSON_ArrayForEach(e, v) {
        kiln_arg t;
        if (cJSON_IsNull(e)) {
            a->values[n++] = (kiln_value){-1, -1, 0};
            continue;
        }
        if (json_arg(r, e, aten_args, &t) != KILN_OK)
            return -1;
        if (t.kind != KILN_ARG_TENSOR)
            return 0;
        a->values[n++] = t.value;
        tensors++;
    }
    if (!tensors)
        return 0;
    a->kind = KILN_ARG_OTHER;
    a->n_values = n;
    char *text = cJSON_PrintUnformatted(v);
    snprintf(a->text, sizeof a->text, "%s", text);
    free(text);
    return 1;
}

/* One JSON argument. Tensors are {"tensor": i} in capture's record of an aten call (aten_args),
 * {"ref": NAME} in "ops". */
static int json_arg(reader *r, const cJSON *v, int aten_args, kiln_arg *a) {
    int rc;
    memset(a, 0, sizeof *a);
    a->value = (kiln_value){-1, -1, 0};
    if (cJSON_IsNull(v)) {
        a->kind = KILN_ARG_NONE;
        snprintf(a->text, sizeof a->text, "None");
    } else if (cJSON_IsBool(v)) {
        a->kind = KILN_ARG_BOOL;
        a->num = cJSON_IsTrue(v);
        snprintf(a->text, sizeof a->text, "%s", a->num ? "True" : "False");
    } else if (cJSON_IsNumber(v)) {
        a->kind = KILN_ARG_NUM;
        a->num = v->valuedouble;
        snprintf(a->text, sizeof a->text, "%.17g", a->num);
    } else if (cJSON_IsString(v)) {
        string_arg(v->valuestring, a);
    } else if (cJSON_IsArray(v)) {
        int ints = cJSON_GetArraySize(v) <= KILN_MAX_DIMS;
        const cJSON *e;
        cJSON_ArrayForEach(e, v) {
            if (ints && cJSON_IsNumber(e) && e->valuedouble == floor(e->valuedouble))
                a->ints[a->n_ints++] = (int64_t)e->valuedouble;
            else
                ints = 0;
        }
        a->kind = ints ? KILN_ARG_INTS : KILN_ARG_OTHER;
        if (!ints && cJSON_GetArraySize(v) <= KILN_OP_MAX_LIST &&
            (rc = tensor_list(r, v, aten_args, a)))
            return rc < 0 ? KILN_ERR_FORMAT : KILN_OK;
        char *text = cJSON_PrintUnformatted(v);
        snprintf(a->text, sizeof a->text, "%s", text);
        free(text);
    } else if (cJSON_IsObject(v) && aten_args && cJSON_GetObjectItemCaseSensitive(v, "tensor")) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "tensor");
        if (!cJSON_IsNumber(t) || t->valueint < 0)
            return bad(r, "a {\"tensor\": i} argument without an index");
        if (t->valueint >= r->p->n_inputs) { /* an out= buffer: not an input */
            a->kind = KILN_ARG_OTHER;
            snprintf(a->text, sizeof a->text, "out= buffer");
            return KILN_OK;
        }
        a->kind = KILN_ARG_TENSOR;
        a->value = (kiln_value){t->valueint, -1, 0};
        snprintf(a->text, sizeof a->text, "%s", r->p->inputs[t->valueint].name);
    } else if (cJSON_IsObject(v) && !aten_args && cJSON_GetObjectItemCaseSensitive(v, "ref")) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(v, "ref");
        if (!cJSON_IsString(n))
            return bad(r, "a {\"ref\": NAME} argument without a name");
        return name_arg(r, n->valuestring, strlen(n->valuestring), -1, a);
    } else {
        return bad(r, "an argument of an unknown form (tensors are %s)",
                   aten_args ? "{\"tensor\": i}" : "{\"ref\": NAME}");
    }
    return KILN_OK;
}

/* Fills the op's label fields from "aten::NAME.OVERLOAD" ("aten::NAME" means .default). */
static int set_label(reader *r, kiln_op *op, const char *label, size_t len) {
    if (len < 7 || strncmp(label, "aten::", 6) != 0)
        return bad(r, "'%.*s' is not an aten op", (int)(len > 80 ? 80 : len), label);
    const char *name = label + 6, *end = label + len;
    const char *dot = memchr(name, '.', (size_t)(end - name));
    size_t name_len = dot ? (size_t)(dot - name) : (size_t)(end - name);
    size_t ovl_len = dot ? (size_t)(end - dot - 1) : 7;
    if (name_len == 0 || name_len >= sizeof op->name || ovl_len >= sizeof op->overload ||
        ovl_len == 0)
        return bad(r, "'%.*s' is not an aten op", (int)(len > 80 ? 80 : len), label);
    snprintf(op->name, sizeof op->name, "%.*s", (int)name_len, name);
    snprintf(op->overload, sizeof op->overload, "%.*s", (int)ovl_len, dot ? dot + 1 : "default");
    snprintf(op->aten, sizeof op->aten, "aten::%.63s.%.31s", op->name, op->overload);
    op->inplace = name_len > 1 && op->name[name_len - 1] == '_' && op->name[0] != '_';
    for (int k = 0; k < KILN_OP_MAX_RESULTS; k++)
        op->result_dtype[k] = KILN_DTYPE_COUNT;
    return KILN_OK;
}

static kiln_op *new_op(reader *r) {
    if (r->c->n_ops == KILN_OPCHAIN_MAX_OPS) {
        bad(r, "more than %d ops", KILN_OPCHAIN_MAX_OPS);
        return NULL;
    }
    kiln_op *op = &r->c->ops[r->c->n_ops];
    memset(op, 0, sizeof *op);
    return op;
}

/* An in-place op's first argument now names its result. */
static void rebind_written(reader *r, const kiln_op *op, int k) {
    if (op->inplace && op->n_args > 0 && op->args[0].kind == KILN_ARG_TENSOR)
        bind(r, op->args[0].text, result_of(r, k, 0), 0);
}

static int json_args(reader *r, kiln_op *op, const cJSON *args, const cJSON *kwargs,
                     int aten_args) {
    int rc = KILN_OK;
    const cJSON *v;
    if (args && !cJSON_IsArray(args))
        return bad(r, "%s: \"args\" is not a list", op->aten);
    if (kwargs && !cJSON_IsObject(kwargs))
        return bad(r, "%s: \"kwargs\" is not an object", op->aten);
    cJSON_ArrayForEach(v, args) {
        if (op->n_args == KILN_OP_MAX_ARGS)
            return bad(r, "%s: more than %d arguments", op->aten, KILN_OP_MAX_ARGS);
        if ((rc = json_arg(r, v, aten_args, &op->args[op->n_args++])) != KILN_OK)
            return rc;
    }
    cJSON_ArrayForEach(v, kwargs) {
        if (op->n_kwargs == KILN_OP_MAX_KWARGS)
            return bad(r, "%s: more than %d keyword arguments", op->aten, KILN_OP_MAX_KWARGS);
        snprintf(op->kwarg_name[op->n_kwargs], sizeof op->kwarg_name[0], "%s", v->string);
        if ((rc = json_arg(r, v, aten_args, &op->kwargs[op->n_kwargs++])) != KILN_OK)
            return rc;
    }
    return KILN_OK;
}

/* Binds the names of "out" (a name, or a list of names and nulls) to op k's results. */
static int json_out(reader *r, const cJSON *out, const cJSON *dtypes, int k) {
    kiln_op *op = &r->c->ops[k];
    int n = cJSON_IsArray(out) ? cJSON_GetArraySize(out) : 1;
    if (n > KILN_OP_MAX_RESULTS)
        return bad(r, "%s: more than %d results", op->aten, KILN_OP_MAX_RESULTS);
    op->tuple = cJSON_IsArray(out);
    for (int slot = 0; slot < n; slot++) {
        const cJSON *o = cJSON_IsArray(out) ? cJSON_GetArrayItem(out, slot) : out;
        const cJSON *d = cJSON_GetArrayItem(dtypes, slot);
        if (cJSON_IsString(o))
            bind(r, o->valuestring, result_of(r, k, slot), 0);
        else if (!cJSON_IsNull(o))
            return bad(r, "%s: \"out\" is not a name or a list of names", op->aten);
        if (cJSON_IsString(d) && kiln_dtype_parse(d->valuestring, &op->result_dtype[slot]) != 0)
            return bad(r, "%s: unknown dtype '%.40s' in \"dtypes\"", op->aten, d->valuestring);
    }
    return KILN_OK;
}

/* "ops": [{"aten", "args", "kwargs", "out", "dtypes"}, ...], "outputs": [NAME, ...]. */
static int read_ops(reader *r, const cJSON *ops) {
    if (!cJSON_IsArray(ops) || cJSON_GetArraySize(ops) == 0)
        return bad(r, "kiln.ops is not a non-empty list");
    const cJSON *o;
    cJSON_ArrayForEach(o, ops) {
        kiln_op *op = new_op(r);
        if (!op)
            return KILN_ERR_FORMAT;
        const cJSON *aten = cJSON_GetObjectItemCaseSensitive(o, "aten");
        if (!cJSON_IsString(aten))
            return bad(r, "kiln.ops[%d] names no \"aten\" op", r->c->n_ops);
        int rc = set_label(r, op, aten->valuestring, strlen(aten->valuestring));
        if (rc == KILN_OK)
            rc = json_args(r, op, cJSON_GetObjectItemCaseSensitive(o, "args"),
                           cJSON_GetObjectItemCaseSensitive(o, "kwargs"), 0);
        if (rc != KILN_OK)
            return rc;
        int k = r->c->n_ops++;
        rebind_written(r, op, k);
        const cJSON *out = cJSON_GetObjectItemCaseSensitive(o, "out");
        if (out && (rc = json_out(r, out, cJSON_GetObjectItemCaseSensitive(o, "dtypes"), k)))
            return rc;
    }
    const cJSON *outs = cJSON_GetObjectItemCaseSensitive(r->p->kiln, "outputs");
    if (outs && !cJSON_IsArray(outs))
        return bad(r, "kiln.outputs is not a list of names");
    int n = outs ? cJSON_GetArraySize(outs) : r->p->n_outputs;
    if (n != r->p->n_outputs)
        return bad(r, "the chain returns %d values, the problem has %d outputs", n,
                   r->p->n_outputs);
    for (int i = 0; i < n; i++) {
        const cJSON *name = outs ? cJSON_GetArrayItem(outs, i) : NULL;
        const char *s =
            name ? (cJSON_IsString(name) ? name->valuestring : NULL) : r->p->outputs[i].name;
        if (!s)
            return bad(r, "kiln.outputs is not a list of names");
        const binding *b = lookup(r, s, strlen(s));
        if (!b)
            return bad(r, "kiln.outputs: '%.60s' is not an input or an op's result", s);
        r->c->outputs[r->c->n_outputs++] = b->value;
    }
    return KILN_OK;
}

/* "kind": "aten": capture's "aten" label and "args"; the problem's outputs are the op's results
 * but the ones "dropped_outputs" lists. */
static int read_aten_args(reader *r, const char *label, const cJSON *args) {
    kiln_op *op = new_op(r);
    int rc = set_label(r, op, label, strlen(label));
    if (rc == KILN_OK && !cJSON_IsObject(args))
        rc = bad(r, "kiln.args is not an object with \"args\" and \"kwargs\"");
    if (rc == KILN_OK)
        rc = json_args(r, op, cJSON_GetObjectItemCaseSensitive(args, "args"),
                       cJSON_GetObjectItemCaseSensitive(args, "kwargs"), 1);
    if (rc != KILN_OK)
        return rc;
    r->c->n_ops = 1;
    const cJSON *drop = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(r->p->kiln, "dropped_outputs"), "indices");
    for (int slot = 0; r->c->n_outputs < r->p->n_outputs; slot++) {
        if (slot == KILN_OP_MAX_RESULTS)
            return bad(r, "%s: the problem's outputs are not among its first %d results", label,
                       KILN_OP_MAX_RESULTS);
        int dropped = 0;
        const cJSON *d;
        cJSON_ArrayForEach(d, drop) dropped |= cJSON_IsNumber(d) && d->valueint == slot;
        if (!dropped)
            r->c->outputs[r->c->n_outputs++] = result_of(r, 0, slot);
    }
    r->c->ops[0].tuple = r->c->ops[0].n_results > 1 || cJSON_GetArraySize(drop) > 0;
    return KILN_OK;
}

/* ---- the generated reference (capture_problem.py: aten_reference, module_reference) ---- */

static const char *skip_blank(const char *s) {
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

static int ident_char(char c) {
    return isalnum((unsigned char)c) || c == '_';
}

/* s[0..n) without surrounding blanks. */
static void trim_span(const char **s, size_t *n) {
    while (*n && isspace((unsigned char)**s))
        (*s)++, (*n)--;
    while (*n && isspace((unsigned char)(*s)[*n - 1]))
        (*n)--;
}

/* The next item of the comma-separated list in [*s, end) (commas inside brackets and quotes do not
 * split), without surrounding blanks, in *item and *len; *s moves past its comma. 0 at the end. */
static int next_item(const char **s, const char *end, const char **item, size_t *len) {
    if (*s >= end)
        return 0;
    const char *e = *s;
    int depth = 0;
    char quote = 0;
    for (; e < end; e++) {
        if (quote) {
            quote = *e == quote ? 0 : quote;
        } else if (*e == '\'' || *e == '"') {
            quote = *e;
        } else if (*e == '(' || *e == '[') {
            depth++;
        } else if (*e == ')' || *e == ']') {
            depth--;
        } else if (*e == ',' && depth == 0) {
            break;
        }
    }
    *item = *s;
    *len = (size_t)(e - *s);
    trim_span(item, len);
    *s = e < end ? e + 1 : end;
    return 1;
}

/* A name, optionally indexed (`result[1]`): its length and the index (-1 when none); 0 when the
 * text is not that. */
static size_t name_ref(const char *s, size_t n, int *index) {
    size_t k = 0;
    if (!n || !(isalpha((unsigned char)s[0]) || s[0] == '_'))
        return 0;
    while (k < n && ident_char(s[k]))
        k++;
    *index = -1;
    if (k == n)
        return k;
    if (s[k] != '[' || s[n - 1] != ']')
        return 0;
    char *end;
    long v = strtol(s + k + 1, &end, 10);
    if (end != s + n - 1 || v < 0)
        return 0;
    *index = (int)v;
    return k;
}

/* One Python literal or name of a generated reference. */
static int text_arg(reader *r, const char *s, size_t n, kiln_arg *a) {
    memset(a, 0, sizeof *a);
    a->value = (kiln_value){-1, -1, 0};
    trim_span(&s, &n);
    char t[256];
    if (n == 0 || n >= sizeof t)
        return bad(r, "cannot read the argument '%.60s'", s);
    memcpy(t, s, n);
    t[n] = 0;
    snprintf(a->text, sizeof a->text, "%.47s", t);
    char *end;
    double num = strtod(t, &end);
    int index;
    size_t len;
    if (strcmp(t, "None") == 0) {
        a->kind = KILN_ARG_NONE;
    } else if (strcmp(t, "True") == 0 || strcmp(t, "False") == 0) {
        a->kind = KILN_ARG_BOOL;
        a->num = t[0] == 'T';
    } else if (end != t && *end == 0 && !isalpha((unsigned char)t[0])) {
        a->kind = KILN_ARG_NUM;
        a->num = num;
    } else if (strncmp(t, "float('", 7) == 0 && t[n - 1] == ')' && t[n - 2] == '\'') {
        t[n - 2] = 0;
        string_arg(t + 7, a);
        if (a->kind != KILN_ARG_NUM)
            return bad(r, "cannot read the argument '%.60s'", a->text);
    } else if ((t[0] == '\'' || t[0] == '"') && n >= 2 && t[n - 1] == t[0]) {
        t[n - 1] = 0;
        a->kind = KILN_ARG_OTHER;
        snprintf(a->text, sizeof a->text, "%.47s", t + 1);
    } else if (t[0] == '[' || t[0] == '(') {
        /* a list: integers (dims, sizes), else kept as text */
        int ints = 1;
        const char *e = t + 1, *it;
        size_t il;
        while (ints && next_item(&e, t + n - 1, &it, &il)) {
            char *ie;
            long long v = il ? strtoll(it, &ie, 10) : 0;
            if (il && (ie != it + il || a->n_ints == KILN_MAX_DIMS))
                ints = 0;
            else if (il)
                a->ints[a->n_ints++] = v;
        }
        a->kind = ints ? KILN_ARG_INTS : KILN_ARG_OTHER;
    } else if (strncmp(t, "torch.", 6) == 0 || strcmp(t, "DEVICE") == 0) {
        string_arg(t, a);
    } else if ((len = name_ref(t, n, &index)) > 0) {
        return name_arg(r, t, len, index, a);
    } else {
        return bad(r, "cannot read the argument '%.60s'", t);
    }
    return KILN_OK;
}

/* `torch.ops.aten.OP.OVERLOAD(ARGS)` into a new op; *k is its index. */
static int call_line(reader *r, const char *call, int *k) {
    kiln_op *op = new_op(r);
    if (!op)
        return KILN_ERR_FORMAT;
    const char *open = strchr(call, '(');
    size_t n = strlen(call);
    if (strncmp(call, "torch.ops.aten.", 15) != 0)
        return bad(r, "calls %.60s, not an aten op", call);
    if (!open || call[n - 1] != ')')
        return bad(r, "cannot read the call '%.80s'", call);
    char label[128];
    snprintf(label, sizeof label, "aten::%.*s", (int)(open - call - 15), call + 15);
    int rc = set_label(r, op, label, strlen(label));
    const char *s = open + 1, *it;
    size_t il;
    while (rc == KILN_OK && next_item(&s, call + n - 1, &it, &il)) {
        if (!il)
            continue;
        size_t kw = 0;
        while (kw < il && ident_char(it[kw]))
            kw++;
        if (kw && kw < il && it[kw] == '=' && (kw + 1 == il || it[kw + 1] != '=')) {
            if (op->n_kwargs == KILN_OP_MAX_KWARGS)
                return bad(r, "%s: more than %d keyword arguments", op->aten, KILN_OP_MAX_KWARGS);
            snprintf(op->kwarg_name[op->n_kwargs], sizeof op->kwarg_name[0], "%.*s", (int)kw, it);
            rc = text_arg(r, it + kw + 1, il - kw - 1, &op->kwargs[op->n_kwargs++]);
        } else if (op->n_kwargs) {
            return bad(r, "%s: a positional argument after a keyword", op->aten);
        } else if (op->n_args == KILN_OP_MAX_ARGS) {
            return bad(r, "%s: more than %d arguments", op->aten, KILN_OP_MAX_ARGS);
        } else {
            rc = text_arg(r, it, il, &op->args[op->n_args++]);
        }
    }
    if (rc != KILN_OK)
        return rc;
    *k = r->c->n_ops++;
    rebind_written(r, op, *k);
    return KILN_OK;
}

/* `return a`, `return (a, b,)`, `return result[0]`, each maybe `.permute(...)`/`.contiguous()`
 * (the memory order the layouts describe). */
static int return_line(reader *r, const char *e) {
    size_t n = strlen(e);
    if (n >= 2 && e[0] == '(' && e[n - 1] == ')')
        e++, n -= 2;
    const char *s = e, *it;
    size_t il;
    while (next_item(&s, e + n, &it, &il)) {
        if (!il)
            continue;
        if (r->c->n_outputs == KILN_OPCHAIN_MAX_OUTPUTS)
            return bad(r, "returns more than %d values", KILN_OPCHAIN_MAX_OUTPUTS);
        if (il > 10 && strncmp(it, "torch.ops.", 10) == 0) { /* `return torch.ops.aten...(...)` */
            char call[1024];
            int k;
            snprintf(call, sizeof call, "%.*s", (int)il, it);
            int rc = call_line(r, call, &k);
            if (rc != KILN_OK)
                return rc;
            r->c->outputs[r->c->n_outputs++] = result_of(r, k, 0);
            continue;
        }
        for (const char *dot = memchr(it, '.', il); dot; dot = NULL) {
            size_t keep = (size_t)(dot - it);
            if (strncmp(dot, ".permute(", 9) != 0 && strncmp(dot, ".contiguous()", 13) != 0)
                return bad(r, "cannot read the return '%.60s'", it);
            il = keep;
        }
        int index;
        size_t len = name_ref(it, il, &index);
        if (len == 0)
            return bad(r, "cannot read the return '%.*s'", (int)(il > 60 ? 60 : il), it);
        kiln_arg a;
        memset(&a, 0, sizeof a);
        int rc = name_arg(r, it, len, index, &a);
        if (rc != KILN_OK)
            return rc;
        r->c->outputs[r->c->n_outputs++] = a.value;
    }
    return KILN_OK;
}

/* `A = B.permute(...)`, `A = B.expand(...)`, `A = B.clone()`, `A = B.contiguous()`: the layout
 * restores (and the clone before an in-place op) of the reference: A is B's value. */
static int restore_line(reader *r, const char *lhs, size_t lhs_len, const char *rhs) {
    const char *dot = strchr(rhs, '.');
    static const char *const methods[] = {".permute(", ".expand(", ".clone()", ".contiguous()"};
    int known = 0;
    for (size_t i = 0; dot && i < sizeof methods / sizeof methods[0]; i++)
        known |= strncmp(dot, methods[i], strlen(methods[i])) == 0;
    const binding *b = dot ? lookup(r, rhs, (size_t)(dot - rhs)) : NULL;
    if (!known || !b)
        return bad(r, "cannot read the line '%.*s = %.60s'", (int)(lhs_len > 40 ? 40 : lhs_len),
                   lhs, rhs);
    char name[48];
    snprintf(name, sizeof name, "%.*s", (int)lhs_len, lhs);
    bind(r, name, b->value, b->whole);
    return KILN_OK;
}

/* One statement of run(): an assignment, a bare (in-place) call, or a return. */
static int statement(reader *r, char *s, int *returned) {
    if (*returned)
        return bad(r, "code after the return of run()");
    if (strncmp(s, "return ", 7) == 0) {
        *returned = 1;
        return return_line(r, skip_blank(s + 7));
    }
    if (strncmp(s, "torch.ops.", 10) == 0) {
        int k;
        int rc = call_line(r, s, &k);
        if (rc == KILN_OK && !r->c->ops[k].inplace)
            rc = bad(r, "the result of %s is not assigned", r->c->ops[k].aten);
        return rc;
    }
    /* LHS = RHS, the LHS one or more names ("v0", "v0, _, v2", "v0,") */
    const char *eq = s;
    while (*eq && (ident_char(*eq) || *eq == ',' || *eq == ' '))
        eq++;
    if (*eq != '=' || eq[1] == '=' || eq == s)
        return bad(r, "cannot read the line '%.80s'", s);
    const char *rhs = skip_blank(eq + 1);
    const char *lhs = s;
    size_t lhs_len = (size_t)(eq - s);
    trim_span(&lhs, &lhs_len);
    if (lhs_len == 6 && strncmp(lhs, "DEVICE", 6) == 0)
        return KILN_OK;
    if (strncmp(rhs, "torch.ops.", 10) != 0) {
        if (memchr(lhs, ',', lhs_len))
            return bad(r, "cannot read the line '%.80s'", s);
        return restore_line(r, lhs, lhs_len, rhs);
    }
    int k;
    int rc = call_line(r, rhs, &k);
    if (rc != KILN_OK)
        return rc;
    int several = memchr(lhs, ',', lhs_len) != NULL, slot = 0;
    r->c->ops[k].tuple = several;
    const char *c = lhs, *it;
    size_t il;
    for (; next_item(&c, lhs + lhs_len, &it, &il); slot++) {
        if (slot == KILN_OP_MAX_RESULTS)
            return bad(r, "more than %d results", KILN_OP_MAX_RESULTS);
        if (!il || (il == 1 && it[0] == '_'))
            continue;
        char name[48];
        snprintf(name, sizeof name, "%.*s", (int)il, it);
        /* a single name takes the whole result (indexed later when there are several) */
        bind(r, name, result_of(r, k, slot), !several);
    }
    return KILN_OK;
}

static int read_reference(reader *r) {
    const char *ref = r->p->reference;
    const char *def = ref ? strstr(ref, "def run(") : NULL;
    if (!def)
        return bad(r, "the reference has no run()");
    const char *close = strchr(def, ')');
    if (!close)
        return bad(r, "cannot read run()'s parameters");
    const char *s = def + 8, *it;
    size_t il;
    while (next_item(&s, close, &it, &il)) {
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)il, it);
        if (il && kiln_problem_input_index(r->p, name) < 0)
            return bad(r, "run() parameter '%s' is not an input", name);
    }
    for (int n = 0; ref + n < def; n++)
        r->line += ref[n] == '\n';
    r->line++;
    int returned = 0, rc = KILN_OK;
    for (const char *line = strchr(close, '\n'); line && *line && rc == KILN_OK;) {
        line++;
        r->line++;
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        char buf[1024];
        if (len >= sizeof buf)
            return bad(r, "line too long");
        memcpy(buf, line, len);
        buf[len] = 0;
        line = eol;
        char quote = 0; /* a comment ends the line outside quotes */
        for (char *c = buf; *c; c++) {
            if (quote)
                quote = *c == quote ? 0 : quote;
            else if (*c == '\'' || *c == '"')
                quote = *c;
            else if (*c == '#') {
                *c = 0;
                break;
            }
        }
        size_t l = strlen(buf);
        while (l && isspace((unsigned char)buf[l - 1]))
            buf[--l] = 0;
        char *s = (char *)skip_blank(buf);
        if (!*s)
            continue;
        if (s == buf) /* back at column 0: the end of run() */
            break;
        rc = statement(r, s, &returned);
    }
    r->line = 0;
    if (rc == KILN_OK && !returned)
        rc = bad(r, "run() has no return");
    if (rc == KILN_OK && r->c->n_outputs != r->p->n_outputs)
        rc = bad(r, "the reference returns %d values, the problem has %d outputs", r->c->n_outputs,
                 r->p->n_outputs);
    return rc;
}

/* ---- public ---- */

int kiln_opchain_described(const kiln_problem *p) {
    return cJSON_GetObjectItemCaseSensitive(p->kiln, "kind") ||
           cJSON_GetObjectItemCaseSensitive(p->kiln, "ops");
}

int kiln_opchain_read(const kiln_problem *p, kiln_opchain **out, kiln_err *err) {
    KILN_ASSERT(p && out);
    *out = NULL;
    const cJSON *kiln = p->kiln;
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(kiln, "kind");
    const cJSON *ops = cJSON_GetObjectItemCaseSensitive(kiln, "ops");
    const char *k = cJSON_IsString(kind) ? kind->valuestring : ops ? "chain" : NULL;
    if (!kiln)
        return kiln_errf(err, KILN_ERR_UNSUPPORTED, "no \"kiln\" object: no op chain");
    if (!k)
        return kiln_errf(err, KILN_ERR_UNSUPPORTED, "the \"kiln\" object has no kind or ops");
    if (strcmp(k, "aten") && strcmp(k, "module") && strcmp(k, "chain"))
        return kiln_errf(err, KILN_ERR_UNSUPPORTED,
                         "kiln.kind '%.40s' is not aten, module or chain", k);
    reader r = {p, xcalloc(1, sizeof(kiln_opchain)), err, 0, 0, NULL, 0};
    snprintf(r.c->kind, sizeof r.c->kind, "%s", k);
    for (int i = 0; i < p->n_inputs; i++)
        bind(&r, p->inputs[i].name, (kiln_value){i, -1, 0}, 0);
    const cJSON *aten = cJSON_GetObjectItemCaseSensitive(kiln, "aten");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(kiln, "args");
    int rc;
    if (!strcmp(k, "aten") && !cJSON_IsString(aten))
        rc = bad(&r, "kiln.aten is missing");
    else if (ops)
        rc = read_ops(&r, ops);
    else if (!strcmp(k, "chain"))
        rc = bad(&r, "a chain without \"ops\"");
    else if (!strcmp(k, "aten") && args)
        rc = read_aten_args(&r, aten->valuestring, args);
    else
        rc = read_reference(&r);
    if (rc == KILN_OK && !strcmp(k, "aten") && r.c->n_ops != 1)
        rc = bad(&r, "the reference runs %d ops, not the captured %s alone", r.c->n_ops,
                 aten->valuestring);
    else if (rc == KILN_OK && !strcmp(k, "aten") && strcmp(r.c->ops[0].aten, aten->valuestring))
        rc = bad(&r, "the reference calls %s, not the captured %s", r.c->ops[0].aten,
                 aten->valuestring);
    for (int i = 0; rc == KILN_OK && i < r.c->n_outputs; i++) {
        const kiln_value *v = &r.c->outputs[i];
        if (v->input < 0)
            r.c->ops[v->op].result_dtype[v->slot] = p->outputs[i].dtype;
    }
    free(r.names);
    if (rc != KILN_OK) {
        free(r.c);
        return rc;
    }
    *out = r.c;
    return KILN_OK;
}

void kiln_opchain_free(kiln_opchain *c) {
    free(c);
}

const kiln_arg *kiln_op_arg(const kiln_op *op, int pos, const char *name) {
    if (pos >= 0 && pos < op->n_args)
        return &op->args[pos];
    for (int i = 0; name && i < op->n_kwargs; i++)
        if (strcmp(op->kwarg_name[i], name) == 0)
            return &op->kwargs[i];
    return NULL;
}

int kiln_op_is(const kiln_op *op, const char *aten) {
    return strcmp(op->aten, aten) == 0;
}

int kiln_arg_input(const kiln_arg *a) {
    return a && a->kind == KILN_ARG_TENSOR ? a->value.input : -1;
}

int kiln_arg_is_result(const kiln_arg *a, int op, int slot) {
    return a && a->kind == KILN_ARG_TENSOR && a->value.input < 0 && a->value.op == op &&
           a->value.slot == slot;
}

double kiln_arg_num(const kiln_arg *a, double dflt) {
    return a && (a->kind == KILN_ARG_NUM || a->kind == KILN_ARG_BOOL) ? a->num : dflt;
}
