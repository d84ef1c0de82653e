/* problem.c: reads a SOL-ExecBench problem directory (definition.json + workload.jsonl) into a
 * kiln_problem, checking every field the schema defines and naming the file, line and field of a
 * fault. */
#include "problem.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "expr.h"

/*
 * What is accepted, beyond the letter of docs/definition.md and docs/workload.md of SOL-ExecBench:
 *  - a workload line is either a bare workload {"uuid", "axes", "inputs", ...} (what the
 * SOL-ExecBench CLI reads) or a FlashInfer-Trace record {"definition": NAME, "workload": {...},
 * "solution": null, "evaluation": null} (what its datasets store);
 *  - unknown fields ("description", "tags", "op_type" on a line, ...) are ignored; "kiln" is kiln's
 * own;
 *  - a shape entry made of digits ("shape": ["M", "4"]) is a literal size, as SOL-ExecBench's code
 *    reads it although its docs ask for axis names (kiln_tensor_spec: axis -1, literal 4);
 *  - a workload's tolerance is kiln's {"tolerance": {"atol", "rtol", "rel_l2"}} or SOL-ExecBench's
 *    {"correctness": {"max_atol", "max_rtol", "required_matched_ratio", "max_error_cap"}}, which is
 *    judged by SOL-ExecBench's own rules (kiln_tolerance.sol: a matched ratio and an error cap,
 *    no L2 criterion), so that a solution that benchmark accepts is accepted here too.
 * What is refused although SOL-ExecBench's code lets it through:
 *  - duplicate keys in any object kiln reads (JSON parsers silently keep one of them);
 *  - names of axes, inputs and outputs that are not C identifiers, or that collide: they become the
 *    parameter names of every candidate (docs/abi.md);
 *  - the same uuid on two lines, and an empty workload file.
 * All numbers are parsed by cJSON as doubles, so integers (axis values, sizes) must stay below
 * 2^53.
 */

#define JSON_MAX_EXACT_INT 9007199254740992.0 /* 2^53 */

/* Where a fault is: the file's label and, for workload.jsonl, the line. */
typedef struct {
    const char *label;
    int line; /* 0: none */
    kiln_err *err;
} src;

static int fail(const src *s, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(const src *s, int status, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (s->line > 0)
        return kiln_errf(s->err, status, "%s:%d: %s", s->label, s->line, msg);
    return kiln_errf(s->err, status, "%s: %s", s->label, msg);
}

/* ---- JSON helpers ---- */

static int parse_json(const char *text, size_t len, const src *s, cJSON **out) {
    *out = NULL;
    char *copy = xstrndup(text, len); /* NUL-terminated: cJSON cannot run past it */
    int rc = KILN_OK;
    if (strlen(copy) != len) {
        rc = fail(s, KILN_ERR_FORMAT, "not valid JSON: NUL byte at offset %zu", strlen(copy));
        goto done;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(copy, len, &end, 0);
    if (!root) {
        size_t line, col;
        kiln_text_position(copy, len, end ? (size_t)(end - copy) : 0, &line, &col);
        if (s->line > 0)
            rc = fail(s, KILN_ERR_FORMAT, "not valid JSON (error near column %zu)", col);
        else
            rc = fail(s, KILN_ERR_FORMAT, "not valid JSON (error near line %zu, column %zu)", line,
                      col);
        goto done;
    }
    for (const char *p = end; *p; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(root);
            rc = fail(s, KILN_ERR_FORMAT, "not valid JSON: text after the value at offset %zu",
                      (size_t)(p - copy));
            goto done;
        }
    }
    *out = root;
done:
    free(copy);
    return rc;
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Refuses an object with a key given twice. field names the object ("" for the top level). */
static int check_unique(const cJSON *obj, const src *s, const char *field) {
    int n = cJSON_GetArraySize(obj);
    if (n < 2)
        return KILN_OK;
    const char **keys = xmalloc((size_t)n * sizeof *keys);
    int i = 0;
    for (const cJSON *c = obj->child; c; c = c->next)
        keys[i++] = c->string;
    qsort(keys, (size_t)n, sizeof *keys, cmp_str_ptr);
    int rc = KILN_OK;
    for (i = 1; i < n && rc == KILN_OK; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0)
            rc = fail(s, KILN_ERR_FORMAT, "%s%skey '%.100s' appears twice", field,
                      *field ? ": " : "", keys[i]);
    free(keys);
    return rc;
}

/* An object member, after check_unique; NULL when absent. */
static const cJSON *get(const cJSON *obj, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

static int absent_or_null(const cJSON *item) {
    return !item || cJSON_IsNull(item);
}

static int json_int(const cJSON *item, int64_t *out) {
    if (!cJSON_IsNumber(item))
        return -1;
    double v = item->valuedouble;
    if (!(v >= -JSON_MAX_EXACT_INT && v <= JSON_MAX_EXACT_INT) || v != floor(v))
        return -1;
    *out = (int64_t)v;
    return 0;
}

static int json_nonneg_number(const cJSON *item, double *out) {
    if (!cJSON_IsNumber(item) || !isfinite(item->valuedouble) || item->valuedouble < 0)
        return -1;
    *out = item->valuedouble;
    return 0;
}

static int is_identifier(const char *s) {
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_'))
        return 0;
    for (s++; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_'))
            return 0;
    return 1;
}

static int is_digits(const char *s) {
    if (!*s)
        return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

static int read_tolerance(const cJSON *obj, const src *s, const char *field, kiln_tolerance *t) {
    if (!cJSON_IsObject(obj))
        return fail(s, KILN_ERR_FORMAT, "%s: not an object with atol, rtol and rel_l2", field);
    int rc = check_unique(obj, s, field);
    if (rc != KILN_OK)
        return rc;
    const char *keys[3] = {"atol", "rtol", "rel_l2"};
    double *vals[3] = {&t->atol, &t->rtol, &t->rel_l2};
    for (int i = 0; i < 3; i++) {
        const cJSON *v = get(obj, keys[i]);
        if (!v)
            return fail(s, KILN_ERR_FORMAT, "%s.%s: missing", field, keys[i]);
        if (json_nonneg_number(v, vals[i]) != 0)
            return fail(s, KILN_ERR_FORMAT, "%s.%s: not a non-negative number", field, keys[i]);
    }
    return KILN_OK;
}

/* SOL-ExecBench's workload "correctness" (see the note at the top): its defaults are max_atol and
 * max_rtol 1e-2, required_matched_ratio 1, no max_error_cap. */
static int read_correctness(const cJSON *obj, const src *s, kiln_tolerance *t) {
    if (!cJSON_IsObject(obj))
        return fail(s, KILN_ERR_FORMAT, "correctness: not an object");
    int rc = check_unique(obj, s, "correctness");
    if (rc != KILN_OK)
        return rc;
    const char *keys[4] = {"max_atol", "max_rtol", "required_matched_ratio", "max_error_cap"};
    double vals[4] = {1e-2, 1e-2, 1.0, 0.0};
    for (int i = 0; i < 4; i++) {
        const cJSON *v = get(obj, keys[i]);
        if (v && !cJSON_IsNull(v) && json_nonneg_number(v, &vals[i]) != 0)
            return fail(s, KILN_ERR_FORMAT, "correctness.%s: not a non-negative number", keys[i]);
    }
    if (vals[2] > 1)
        return fail(s, KILN_ERR_FORMAT, "correctness.required_matched_ratio: above 1");
    memset(t, 0, sizeof *t);
    t->atol = vals[0];
    t->rtol = vals[1];
    t->sol = 1;
    t->matched_ratio = vals[2];
    t->error_cap = vals[3];
    return KILN_OK;
}

/* ---- definition.json ---- */

static int parse_axes(kiln_problem *p, const cJSON *axes, const src *s) {
    if (!axes)
        return fail(s, KILN_ERR_FORMAT, "axes: missing");
    if (!cJSON_IsObject(axes))
        return fail(s, KILN_ERR_FORMAT, "axes: not an object");
    int rc = check_unique(axes, s, "axes");
    if (rc != KILN_OK)
        return rc;
    p->axes = xcalloc((size_t)cJSON_GetArraySize(axes) + 1, sizeof *p->axes);
    for (const cJSON *c = axes->child; c; c = c->next) {
        const char *name = c->string;
        if (!is_identifier(name))
            return fail(s, KILN_ERR_FORMAT, "axes: name '%.100s' is not an identifier", name);
        if (!cJSON_IsObject(c))
            return fail(s, KILN_ERR_FORMAT, "axes.%s: not an object", name);
        char field[160];
        snprintf(field, sizeof field, "axes.%s", name);
        if ((rc = check_unique(c, s, field)) != KILN_OK)
            return rc;
        kiln_axis *a = &p->axes[p->n_axes];
        const cJSON *type = get(c, "type");
        if (!type)
            return fail(s, KILN_ERR_FORMAT, "axes.%s.type: missing", name);
        if (!cJSON_IsString(type))
            return fail(s, KILN_ERR_FORMAT, "axes.%s.type: not a string", name);
        if (strcmp(type->valuestring, "const") == 0) {
            const cJSON *v = get(c, "value");
            a->kind = KILN_AXIS_CONST;
            if (!v)
                return fail(s, KILN_ERR_FORMAT, "axes.%s.value: missing (a const axis needs one)",
                            name);
            if (json_int(v, &a->value) != 0 || a->value < 0)
                return fail(s, KILN_ERR_FORMAT, "axes.%s.value: not a non-negative integer", name);
        } else if (strcmp(type->valuestring, "var") == 0) {
            a->kind = KILN_AXIS_VAR;
        } else if (strcmp(type->valuestring, "expr") == 0) {
            const cJSON *e = get(c, "expression");
            a->kind = KILN_AXIS_EXPR;
            if (!e)
                return fail(s, KILN_ERR_FORMAT,
                            "axes.%s.expression: missing (an expr axis needs one)", name);
            if (!cJSON_IsString(e) || !e->valuestring[0])
                return fail(s, KILN_ERR_FORMAT, "axes.%s.expression: not a non-empty string", name);
            a->expression = xstrdup(e->valuestring);
        } else {
            return fail(s, KILN_ERR_FORMAT, "axes.%s.type: '%.40s' is not one of const, var, expr",
                        name, type->valuestring);
        }
        a->name = xstrdup(name);
        p->n_axes++;
    }
    return KILN_OK;
}

/* The axis names an expression uses (identifiers not followed by '('), one call each; stops at the
 * first for which fn returns non-zero and returns that. Syntax is left to kiln_expr_eval. */
static int expr_names(const char *e, int (*fn)(void *ctx, const char *name, size_t len),
                      void *ctx) {
    for (size_t i = 0; e[i];) {
        char c = e[i];
        if ((c >= '0' && c <= '9')) {
            while ((e[i] >= '0' && e[i] <= '9') || (e[i] >= 'a' && e[i] <= 'z') ||
                   (e[i] >= 'A' && e[i] <= 'Z') || e[i] == '_')
                i++; /* a number, or a malformed one: not a name */
            continue;
        }
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_')) {
            i++;
            continue;
        }
        size_t b = i;
        while ((e[i] >= '0' && e[i] <= '9') || (e[i] >= 'a' && e[i] <= 'z') ||
               (e[i] >= 'A' && e[i] <= 'Z') || e[i] == '_')
            i++;
        size_t k = i;
        while (e[k] == ' ' || e[k] == '\t' || e[k] == '\n' || e[k] == '\r')
            k++;
        if (e[k] == '(')
            continue; /* a function */
        int rc = fn(ctx, e + b, i - b);
        if (rc)
            return rc;
    }
    return 0;
}

typedef struct {
    const kiln_problem *p;
    const char *known; /* NULL: only check that the name is an axis */
    const char *unknown;
    size_t unknown_len;
} names_check;

static int check_name(void *ctx, const char *name, size_t len) {
    names_check *c = ctx;
    for (int i = 0; i < c->p->n_axes; i++) {
        const char *an = c->p->axes[i].name;
        if (strlen(an) == len && memcmp(an, name, len) == 0)
            return c->known && !c->known[i];
    }
    c->unknown = name;
    c->unknown_len = len;
    return 1;
}

/* Every name an expr axis uses must be an axis, and expr axes must not depend on each other in a
 * cycle: both are facts of the definition, so they are reported against definition.json. */
static int check_expr_axes(const kiln_problem *p, const src *s) {
    char *known = xcalloc((size_t)p->n_axes + 1, 1);
    int rc = KILN_OK;
    for (int i = 0; i < p->n_axes && rc == KILN_OK; i++) {
        known[i] = p->axes[i].kind != KILN_AXIS_EXPR;
        names_check c = {p, NULL, NULL, 0};
        if (p->axes[i].kind == KILN_AXIS_EXPR && expr_names(p->axes[i].expression, check_name, &c))
            rc = fail(s, KILN_ERR_FORMAT,
                      "axes.%s.expression: '%.100s' uses '%.*s', which is not an axis",
                      p->axes[i].name, p->axes[i].expression,
                      (int)(c.unknown_len > 64 ? 64 : c.unknown_len), c.unknown);
    }
    for (int progress = 1; progress && rc == KILN_OK;) {
        progress = 0;
        for (int i = 0; i < p->n_axes; i++) {
            names_check c = {p, known, NULL, 0};
            if (!known[i] && !expr_names(p->axes[i].expression, check_name, &c))
                known[i] = 1, progress = 1;
        }
    }
    if (rc == KILN_OK) {
        char names[300] = "";
        int first = -1;
        for (int i = 0; i < p->n_axes; i++) {
            if (known[i])
                continue;
            if (first < 0)
                first = i;
            size_t len = strlen(names);
            snprintf(names + len, sizeof names - len, "%s%s", len ? ", " : "", p->axes[i].name);
        }
        if (first >= 0)
            rc = fail(s, KILN_ERR_FORMAT,
                      "axes.%s.expression: '%.100s' cannot be evaluated: the expr axes %s depend "
                      "on each other in a cycle",
                      p->axes[first].name, p->axes[first].expression, names);
    }
    free(known);
    return rc;
}

static int parse_tensor(const kiln_problem *p, const cJSON *c, const src *s, const char *group,
                        kiln_tensor_spec *t) {
    const char *name = c->string;
    if (!is_identifier(name))
        return fail(s, KILN_ERR_FORMAT, "%s: name '%.100s' is not an identifier", group, name);
    if (!cJSON_IsObject(c))
        return fail(s, KILN_ERR_FORMAT, "%s.%s: not an object", group, name);
    char field[160];
    snprintf(field, sizeof field, "%s.%s", group, name);
    int rc = check_unique(c, s, field);
    if (rc != KILN_OK)
        return rc;
    const cJSON *dtype = get(c, "dtype"), *shape = get(c, "shape");
    if (!dtype)
        return fail(s, KILN_ERR_FORMAT, "%s.dtype: missing", field);
    if (!cJSON_IsString(dtype))
        return fail(s, KILN_ERR_FORMAT, "%s.dtype: not a string", field);
    if (kiln_dtype_parse(dtype->valuestring, &t->dtype) != 0)
        return fail(
            s, KILN_ERR_FORMAT,
            "%s.dtype: unknown dtype '%.40s' (known: float64, float32, float16, bfloat16, "
            "float8_e4m3fn, float8_e5m2, float4_e2m1, float4_e2m1fn_x2, int64, int32, int16, "
            "int8, uint8, bool)",
            field, dtype->valuestring);
    if (!shape)
        return fail(s, KILN_ERR_FORMAT, "%s.shape: missing (null for a scalar)", field);
    if (cJSON_IsNull(shape)) {
        t->is_scalar = 1;
    } else if (!cJSON_IsArray(shape)) {
        return fail(s, KILN_ERR_FORMAT, "%s.shape: not an array of axis names or null", field);
    } else {
        int ndim = cJSON_GetArraySize(shape);
        if (ndim > KILN_MAX_DIMS)
            return fail(s, KILN_ERR_UNSUPPORTED, "%s.shape: %d dimensions, more than kiln's %d",
                        field, ndim, KILN_MAX_DIMS);
        for (const cJSON *d = shape->child; d; d = d->next) {
            if (!cJSON_IsString(d))
                return fail(s, KILN_ERR_FORMAT, "%s.shape[%d]: not an axis name", field, t->ndim);
            int ax = kiln_problem_axis_index(p, d->valuestring);
            if (ax < 0 && is_digits(d->valuestring)) {
                /* SOL-ExecBench reads a digit string as a literal size. */
                int64_t v = 0;
                for (const char *c = d->valuestring; *c; c++)
                    if (__builtin_mul_overflow(v, 10, &v) ||
                        __builtin_add_overflow(v, *c - '0', &v))
                        return fail(s, KILN_ERR_FORMAT,
                                    "%s.shape[%d]: literal size '%.40s' is too large", field,
                                    t->ndim, d->valuestring);
                t->literal[t->ndim] = v;
            } else if (ax < 0) {
                return fail(s, KILN_ERR_FORMAT, "%s.shape[%d]: unknown axis '%.100s'", field,
                            t->ndim, d->valuestring);
            }
            t->axis[t->ndim++] = ax;
        }
    }
    for (int d = 0; d < KILN_MAX_DIMS; d++)
        t->layout.perm[d] = d;
    t->name = xstrdup(name);
    return KILN_OK;
}

static int parse_tensors(const kiln_problem *p, const cJSON *obj, const src *s, const char *group,
                         kiln_tensor_spec **out, int *n_out) {
    if (!obj)
        return fail(s, KILN_ERR_FORMAT, "%s: missing", group);
    if (!cJSON_IsObject(obj))
        return fail(s, KILN_ERR_FORMAT, "%s: not an object", group);
    int rc = check_unique(obj, s, group);
    if (rc != KILN_OK)
        return rc;
    *out = xcalloc((size_t)cJSON_GetArraySize(obj) + 1, sizeof **out);
    for (const cJSON *c = obj->child; c; c = c->next) {
        if ((rc = parse_tensor(p, c, s, group, &(*out)[*n_out])) != KILN_OK)
            return rc;
        (*n_out)++;
    }
    return KILN_OK;
}

static int optional_string(const cJSON *root, const char *key, const src *s, char **out) {
    const cJSON *v = get(root, key);
    if (absent_or_null(v))
        return KILN_OK;
    if (!cJSON_IsString(v) || !v->valuestring[0])
        return fail(s, KILN_ERR_FORMAT, "%s: not a non-empty string", key);
    *out = xstrdup(v->valuestring);
    return KILN_OK;
}

/* One entry of "kiln": {"layouts": {NAME: {"stored": ..., "permute": [...], "expand": [...]}}}
 * (docs/capture.md): a "permute" must be a permutation of the tensor's dims. */
static int parse_layout(const cJSON *l, const src *s, kiln_tensor_spec *t) {
    char field[160];
    snprintf(field, sizeof field, "kiln.layouts.%s", t->name);
    if (!cJSON_IsObject(l))
        return fail(s, KILN_ERR_FORMAT, "%s: not an object", field);
    int rc = check_unique(l, s, field);
    if (rc != KILN_OK)
        return rc;
    kiln_layout *lay = &t->layout;
    lay->expanded = get(l, "expand") != NULL;
    const cJSON *pm = get(l, "permute");
    if (absent_or_null(pm))
        return KILN_OK;
    int seen = 0, k = 0;
    if (cJSON_IsArray(pm) && cJSON_GetArraySize(pm) == t->ndim) {
        for (const cJSON *v = pm->child; v; v = v->next, k++) {
            int64_t d;
            if (json_int(v, &d) != 0 || d < 0 || d >= t->ndim || (seen >> d & 1))
                break;
            seen |= 1 << d;
            lay->perm[k] = (int)d;
            lay->permuted |= d != k;
        }
    }
    if (k != t->ndim || !cJSON_IsArray(pm))
        return fail(s, KILN_ERR_FORMAT, "%s.permute: not a permutation of the %d dims of %s", field,
                    t->ndim, t->name);
    return KILN_OK;
}

static int parse_layouts(kiln_problem *p, const cJSON *layouts, const src *s) {
    if (absent_or_null(layouts))
        return KILN_OK;
    if (!cJSON_IsObject(layouts))
        return fail(s, KILN_ERR_FORMAT, "kiln.layouts: not an object");
    int rc = check_unique(layouts, s, "kiln.layouts");
    for (int g = 0; g < 2 && rc == KILN_OK; g++) {
        kiln_tensor_spec *ts = g ? p->outputs : p->inputs;
        for (int i = 0; i < (g ? p->n_outputs : p->n_inputs) && rc == KILN_OK; i++) {
            const cJSON *l = get(layouts, ts[i].name);
            if (l)
                rc = parse_layout(l, s, &ts[i]);
        }
    }
    return rc;
}

static int parse_kiln_fields(kiln_problem *p, const cJSON *k, const src *s) {
    if (!k)
        return KILN_OK;
    if (!cJSON_IsObject(k))
        return fail(s, KILN_ERR_FORMAT, "kiln: not an object");
    int rc = check_unique(k, s, "kiln");
    if (rc != KILN_OK)
        return rc;
    p->kiln = cJSON_Duplicate(k, 1);
    if ((rc = parse_layouts(p, get(k, "layouts"), s)) != KILN_OK)
        return rc;
    const cJSON *v;
    if ((v = get(k, "min_bytes")) && json_nonneg_number(v, &p->min_bytes) != 0)
        return fail(s, KILN_ERR_FORMAT, "kiln.min_bytes: not a non-negative number");
    if ((v = get(k, "flops")) && json_nonneg_number(v, &p->flops) != 0)
        return fail(s, KILN_ERR_FORMAT, "kiln.flops: not a non-negative number");
    if ((v = get(k, "tolerance"))) {
        if ((rc = read_tolerance(v, s, "kiln.tolerance", &p->tolerance)) != KILN_OK)
            return rc;
        p->has_tolerance = 1;
    }
    return KILN_OK;
}

static int parse_definition(kiln_problem *p, const cJSON *root, const src *s) {
    if (!cJSON_IsObject(root))
        return fail(s, KILN_ERR_FORMAT, "not a JSON object");
    int rc = check_unique(root, s, "");
    if (rc != KILN_OK)
        return rc;
    const cJSON *name = get(root, "name"), *ref = get(root, "reference");
    if (!name)
        return fail(s, KILN_ERR_FORMAT, "name: missing");
    if (!cJSON_IsString(name) || !name->valuestring[0])
        return fail(s, KILN_ERR_FORMAT, "name: not a non-empty string");
    p->name = xstrdup(name->valuestring);
    if ((rc = optional_string(root, "op_type", s, &p->op_type)) != KILN_OK ||
        (rc = optional_string(root, "custom_inputs_entrypoint", s, &p->custom_inputs_entrypoint)) !=
            KILN_OK)
        return rc;
    if (!ref)
        return fail(s, KILN_ERR_FORMAT, "reference: missing");
    if (!cJSON_IsString(ref) || !ref->valuestring[0])
        return fail(s, KILN_ERR_FORMAT, "reference: not a non-empty string");
    p->reference = xstrdup(ref->valuestring);

    const cJSON *cons = get(root, "constraints");
    if (!absent_or_null(cons)) {
        if (!cJSON_IsArray(cons))
            return fail(s, KILN_ERR_FORMAT, "constraints: not an array of strings");
        p->constraints = xcalloc((size_t)cJSON_GetArraySize(cons) + 1, sizeof(char *));
        for (const cJSON *c = cons->child; c; c = c->next) {
            if (!cJSON_IsString(c) || !c->valuestring[0])
                return fail(s, KILN_ERR_FORMAT, "constraints[%d]: not a non-empty string",
                            p->n_constraints);
            p->constraints[p->n_constraints++] = xstrdup(c->valuestring);
        }
    }

    if ((rc = parse_axes(p, get(root, "axes"), s)) != KILN_OK ||
        (rc = check_expr_axes(p, s)) != KILN_OK ||
        (rc = parse_tensors(p, get(root, "inputs"), s, "inputs", &p->inputs, &p->n_inputs)) !=
            KILN_OK ||
        (rc = parse_tensors(p, get(root, "outputs"), s, "outputs", &p->outputs, &p->n_outputs)) !=
            KILN_OK)
        return rc;
    if (p->n_outputs == 0)
        return fail(s, KILN_ERR_UNSUPPORTED, "outputs: empty (a kernel must produce something)");
    for (int i = 0; i < p->n_inputs; i++) {
        if (kiln_problem_output_index(p, p->inputs[i].name) >= 0)
            return fail(s, KILN_ERR_FORMAT, "outputs.%s: the name is also an input",
                        p->inputs[i].name);
        if (kiln_problem_axis_index(p, p->inputs[i].name) >= 0)
            return fail(s, KILN_ERR_FORMAT, "inputs.%s: the name is also an axis",
                        p->inputs[i].name);
    }
    for (int i = 0; i < p->n_outputs; i++)
        if (kiln_problem_axis_index(p, p->outputs[i].name) >= 0)
            return fail(s, KILN_ERR_FORMAT, "outputs.%s: the name is also an axis",
                        p->outputs[i].name);
    return parse_kiln_fields(p, get(root, "kiln"), s);
}

/* ---- workload.jsonl ---- */

typedef struct {
    const kiln_problem *p;
    const int64_t *values;
    const char *known;
    int blocked; /* the expression needs an expr axis not resolved yet */
} axis_lookup;

static int lookup_axis(void *ctx, const char *name, size_t len, int64_t *value) {
    axis_lookup *l = ctx;
    for (int i = 0; i < l->p->n_axes; i++) {
        const char *an = l->p->axes[i].name;
        if (strlen(an) == len && memcmp(an, name, len) == 0) {
            if (!l->known[i]) {
                l->blocked = 1;
                return -1;
            }
            *value = l->values[i];
            return 0;
        }
    }
    return -1;
}

/* Evaluates every expr axis once const and var axes are known. An expression may use another expr
 * axis: passes repeat while one resolves; what is left then is a cycle. */
static int resolve_exprs(const kiln_problem *p, int64_t *values, char *known, const src *s) {
    int progress = 1;
    while (progress) {
        progress = 0;
        for (int i = 0; i < p->n_axes; i++) {
            if (known[i] || p->axes[i].kind != KILN_AXIS_EXPR)
                continue;
            axis_lookup l = {p, values, known, 0};
            kiln_err e;
            int64_t v;
            int rc = kiln_expr_eval(p->axes[i].expression, lookup_axis, &l, &v, &e);
            if (rc != KILN_OK && l.blocked)
                continue;
            if (rc != KILN_OK)
                return fail(s, KILN_ERR_FORMAT, "axes.%s: %s", p->axes[i].name, e.msg);
            if (v < 0)
                return fail(s, KILN_ERR_FORMAT,
                            "axes.%s: expression '%.100s' gives %" PRId64 ", a negative size",
                            p->axes[i].name, p->axes[i].expression, v);
            values[i] = v;
            known[i] = 1;
            progress = 1;
        }
    }
    for (int i = 0; i < p->n_axes; i++)
        if (!known[i])
            return fail(s, KILN_ERR_FORMAT,
                        "axes.%s: expression '%.100s' depends on itself (a cycle of expr axes)",
                        p->axes[i].name, p->axes[i].expression);
    return KILN_OK;
}

static void free_workload(const kiln_problem *p, kiln_workload *w) {
    free(w->uuid);
    free(w->axis_values);
    if (w->inputs) {
        for (int i = 0; i < p->n_inputs; i++) {
            free(w->inputs[i].path);
            free(w->inputs[i].tensor_key);
        }
    }
    free(w->inputs);
    memset(w, 0, sizeof *w);
}

static int parse_workload_axes(const kiln_problem *p, const cJSON *axes, const src *s,
                               kiln_workload *w) {
    if (!axes)
        return fail(s, KILN_ERR_FORMAT, "axes: missing");
    if (!cJSON_IsObject(axes))
        return fail(s, KILN_ERR_FORMAT, "axes: not an object");
    int rc = check_unique(axes, s, "axes");
    if (rc != KILN_OK)
        return rc;
    char *known = xcalloc((size_t)p->n_axes + 1, 1);
    int64_t *bound = xcalloc((size_t)p->n_axes + 1, sizeof *bound);
    char *is_bound = xcalloc((size_t)p->n_axes + 1, 1);
    for (int i = 0; i < p->n_axes; i++) {
        if (p->axes[i].kind == KILN_AXIS_CONST) {
            w->axis_values[i] = p->axes[i].value;
            known[i] = 1;
        }
    }
    for (const cJSON *c = axes->child; c && rc == KILN_OK; c = c->next) {
        int i = kiln_problem_axis_index(p, c->string);
        int64_t v;
        if (i < 0)
            rc = fail(s, KILN_ERR_FORMAT, "axes.%.100s: no such axis in the definition", c->string);
        else if (json_int(c, &v) != 0 || v < 0)
            rc = fail(s, KILN_ERR_FORMAT, "axes.%s: not a non-negative integer", c->string);
        else if (p->axes[i].kind == KILN_AXIS_CONST && v != p->axes[i].value)
            rc = fail(s, KILN_ERR_FORMAT, "axes.%s: %" PRId64 " for a const axis of value %" PRId64,
                      c->string, v, p->axes[i].value);
        else if (p->axes[i].kind == KILN_AXIS_VAR)
            w->axis_values[i] = v, known[i] = 1;
        else if (p->axes[i].kind == KILN_AXIS_EXPR)
            bound[i] = v, is_bound[i] = 1;
    }
    for (int i = 0; i < p->n_axes && rc == KILN_OK; i++)
        if (p->axes[i].kind == KILN_AXIS_VAR && !known[i])
            rc = fail(s, KILN_ERR_FORMAT, "axes.%s: missing (every var axis needs a value)",
                      p->axes[i].name);
    if (rc == KILN_OK)
        rc = resolve_exprs(p, w->axis_values, known, s);
    for (int i = 0; i < p->n_axes && rc == KILN_OK; i++)
        if (is_bound[i] && bound[i] != w->axis_values[i])
            rc = fail(s, KILN_ERR_FORMAT,
                      "axes.%s: %" PRId64 " but its expression '%.100s' gives %" PRId64,
                      p->axes[i].name, bound[i], p->axes[i].expression, w->axis_values[i]);
    free(known);
    free(bound);
    free(is_bound);
    return rc;
}

static int parse_input_desc(const kiln_problem *p, const cJSON *c, int idx, const src *s,
                            kiln_input_desc *d) {
    const kiln_tensor_spec *t = &p->inputs[idx];
    if (!cJSON_IsObject(c))
        return fail(s, KILN_ERR_FORMAT, "inputs.%s: not an object", t->name);
    char field[160];
    snprintf(field, sizeof field, "inputs.%s", t->name);
    int rc = check_unique(c, s, field);
    if (rc != KILN_OK)
        return rc;
    const cJSON *type = get(c, "type");
    if (!type)
        return fail(s, KILN_ERR_FORMAT, "inputs.%s.type: missing", t->name);
    if (!cJSON_IsString(type))
        return fail(s, KILN_ERR_FORMAT, "inputs.%s.type: not a string", t->name);
    const char *ty = type->valuestring;
    if (strcmp(ty, "random") == 0) {
        d->kind = KILN_INPUT_RANDOM;
    } else if (strcmp(ty, "scalar") == 0) {
        d->kind = KILN_INPUT_SCALAR;
        if (!t->is_scalar && t->ndim > 0)
            return fail(s, KILN_ERR_FORMAT,
                        "inputs.%s: type 'scalar' for a tensor of %d dimensions", t->name, t->ndim);
        const cJSON *v = get(c, "value");
        if (!v)
            return fail(s, KILN_ERR_FORMAT, "inputs.%s.value: missing (a scalar needs one)",
                        t->name);
        if (cJSON_IsBool(v))
            d->scalar = cJSON_IsTrue(v) ? 1 : 0;
        else if (cJSON_IsNumber(v) && isfinite(v->valuedouble))
            d->scalar = v->valuedouble;
        else
            return fail(s, KILN_ERR_FORMAT, "inputs.%s.value: not a number or a bool", t->name);
    } else if (strcmp(ty, "safetensors") == 0) {
        d->kind = KILN_INPUT_SAFETENSORS;
        if (t->is_scalar)
            return fail(s, KILN_ERR_FORMAT, "inputs.%s: type 'safetensors' for a scalar input",
                        t->name);
        const cJSON *path = get(c, "path"), *key = get(c, "tensor_key");
        if (!path)
            return fail(s, KILN_ERR_FORMAT, "inputs.%s.path: missing", t->name);
        if (!cJSON_IsString(path) || !path->valuestring[0])
            return fail(s, KILN_ERR_FORMAT, "inputs.%s.path: not a non-empty string", t->name);
        if (!key)
            return fail(s, KILN_ERR_FORMAT, "inputs.%s.tensor_key: missing", t->name);
        if (!cJSON_IsString(key) || !key->valuestring[0])
            return fail(s, KILN_ERR_FORMAT, "inputs.%s.tensor_key: not a non-empty string",
                        t->name);
        d->path = xstrdup(path->valuestring);
        d->tensor_key = xstrdup(key->valuestring);
    } else if (strcmp(ty, "custom") == 0) {
        d->kind = KILN_INPUT_CUSTOM;
        if (!p->custom_inputs_entrypoint)
            return fail(s, KILN_ERR_FORMAT,
                        "inputs.%s: type 'custom' needs custom_inputs_entrypoint in the definition",
                        t->name);
    } else {
        return fail(s, KILN_ERR_FORMAT,
                    "inputs.%s: type '%.40s' is not one of random, scalar, safetensors, custom",
                    t->name, ty);
    }
    return KILN_OK;
}

static int parse_workload_inputs(const kiln_problem *p, const cJSON *inputs, const src *s,
                                 kiln_workload *w) {
    if (!inputs)
        return fail(s, KILN_ERR_FORMAT, "inputs: missing");
    if (!cJSON_IsObject(inputs))
        return fail(s, KILN_ERR_FORMAT, "inputs: not an object");
    int rc = check_unique(inputs, s, "inputs");
    if (rc != KILN_OK)
        return rc;
    char *seen = xcalloc((size_t)p->n_inputs + 1, 1);
    int n_custom = 0;
    for (const cJSON *c = inputs->child; c && rc == KILN_OK; c = c->next) {
        int i = kiln_problem_input_index(p, c->string);
        if (i < 0) {
            rc = fail(s, KILN_ERR_FORMAT, "inputs.%.100s: no such input in the definition",
                      c->string);
            break;
        }
        seen[i] = 1;
        rc = parse_input_desc(p, c, i, s, &w->inputs[i]);
        n_custom += w->inputs[i].kind == KILN_INPUT_CUSTOM;
    }
    for (int i = 0; i < p->n_inputs && rc == KILN_OK; i++)
        if (!seen[i])
            rc = fail(s, KILN_ERR_FORMAT, "inputs.%s: missing (every input needs a descriptor)",
                      p->inputs[i].name);
    if (rc == KILN_OK && n_custom > 0 && n_custom < p->n_inputs)
        rc = fail(s, KILN_ERR_FORMAT,
                  "inputs: 'custom' inputs cannot be mixed with other types (all or none)");
    free(seen);
    return rc;
}

/* Every tensor of the workload must have a byte size that fits in int64. */
static int check_sizes(const kiln_problem *p, const kiln_workload *w, const src *s) {
    for (int g = 0; g < 2; g++) {
        const kiln_tensor_spec *ts = g ? p->outputs : p->inputs;
        int n = g ? p->n_outputs : p->n_inputs;
        for (int i = 0; i < n; i++) {
            int64_t bytes = (int64_t)kiln_dtype_size(ts[i].dtype);
            for (int d = 0; d < ts[i].ndim; d++)
                if (__builtin_mul_overflow(
                        bytes, ts[i].axis[d] < 0 ? ts[i].literal[d] : w->axis_values[ts[i].axis[d]],
                        &bytes))
                    return fail(s, KILN_ERR_FORMAT, "%s.%s: the tensor's size overflows 64 bits",
                                g ? "outputs" : "inputs", ts[i].name);
        }
    }
    return KILN_OK;
}

static int parse_workload(const kiln_problem *p, const cJSON *line, const src *s,
                          kiln_workload *w) {
    if (!cJSON_IsObject(line))
        return fail(s, KILN_ERR_FORMAT, "not a JSON object");
    int rc = check_unique(line, s, "");
    if (rc != KILN_OK)
        return rc;
    const cJSON *wl = line, *inner = get(line, "workload");
    if (inner) { /* a FlashInfer-Trace record */
        if (!cJSON_IsObject(inner))
            return fail(s, KILN_ERR_FORMAT, "workload: not an object");
        const cJSON *def = get(line, "definition");
        if (!absent_or_null(def) && (!cJSON_IsString(def) || strcmp(def->valuestring, p->name)))
            return fail(s, KILN_ERR_FORMAT, "definition: '%.100s' is not this problem ('%s')",
                        cJSON_IsString(def) ? def->valuestring : "?", p->name);
        if ((rc = check_unique(inner, s, "workload")) != KILN_OK)
            return rc;
        wl = inner;
    }
    const cJSON *uuid = get(wl, "uuid");
    if (!uuid)
        return fail(s, KILN_ERR_FORMAT, "uuid: missing");
    if (!cJSON_IsString(uuid) || !uuid->valuestring[0])
        return fail(s, KILN_ERR_FORMAT, "uuid: not a non-empty string");
    w->uuid = xstrdup(uuid->valuestring);
    w->axis_values = xcalloc((size_t)p->n_axes + 1, sizeof *w->axis_values);
    w->sol_bytes = w->sol_flops = -1;
    w->inputs = xcalloc((size_t)p->n_inputs + 1, sizeof *w->inputs);
    if ((rc = parse_workload_axes(p, get(wl, "axes"), s, w)) != KILN_OK ||
        (rc = parse_workload_inputs(p, get(wl, "inputs"), s, w)) != KILN_OK ||
        (rc = check_sizes(p, w, s)) != KILN_OK)
        return rc;
    const cJSON *tol = get(wl, "tolerance"), *cor = get(wl, "correctness");
    if (!tol && wl != line)
        tol = get(line, "tolerance");
    if (tol) {
        if ((rc = read_tolerance(tol, s, "tolerance", &w->tolerance)) != KILN_OK)
            return rc;
        w->has_tolerance = 1;
    } else if (!absent_or_null(cor)) {
        if ((rc = read_correctness(cor, s, &w->tolerance)) != KILN_OK)
            return rc;
        w->has_tolerance = 1;
    }
    return KILN_OK;
}

typedef struct {
    const char *uuid;
    int line;
} uuid_line;

static int cmp_uuid_line(const void *a, const void *b) {
    const uuid_line *x = a, *y = b;
    int c = strcmp(x->uuid, y->uuid);
    return c ? c : (x->line > y->line) - (x->line < y->line);
}

static int parse_workloads(kiln_problem *p, const char *text, size_t len, const char *label,
                           kiln_err *err) {
    int rc = KILN_OK, cap = 0, lineno = 0;
    int *lines = NULL;
    for (size_t pos = 0; pos < len && rc == KILN_OK;) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - text) : len, next = nl ? end + 1 : len;
        lineno++;
        size_t b = pos, e = end;
        pos = next;
        while (b < e && (text[b] == ' ' || text[b] == '\t' || text[b] == '\r'))
            b++;
        if (b == e)
            continue; /* blank line */
        src s = {label, lineno, err};
        cJSON *root = NULL;
        if ((rc = parse_json(text + b, e - b, &s, &root)) != KILN_OK)
            break;
        if (p->n_workloads == cap) {
            cap = cap ? 2 * cap : 16;
            p->workloads = xrealloc(p->workloads, (size_t)cap * sizeof *p->workloads);
            lines = xrealloc(lines, (size_t)cap * sizeof *lines);
        }
        kiln_workload w = {0};
        rc = parse_workload(p, root, &s, &w);
        cJSON_Delete(root);
        if (rc != KILN_OK) {
            free_workload(p, &w);
            break;
        }
        lines[p->n_workloads] = lineno;
        p->workloads[p->n_workloads++] = w;
    }
    if (rc == KILN_OK && p->n_workloads == 0)
        rc = kiln_errf(err, KILN_ERR_FORMAT, "%s: no workloads (the file has no non-blank line)",
                       label);
    if (rc == KILN_OK) {
        uuid_line *u = xmalloc((size_t)p->n_workloads * sizeof *u);
        for (int i = 0; i < p->n_workloads; i++)
            u[i] = (uuid_line){p->workloads[i].uuid, lines[i]};
        qsort(u, (size_t)p->n_workloads, sizeof *u, cmp_uuid_line);
        for (int i = 1; i < p->n_workloads && rc == KILN_OK; i++)
            if (strcmp(u[i - 1].uuid, u[i].uuid) == 0)
                rc = kiln_errf(err, KILN_ERR_FORMAT, "%s:%d: uuid: '%.100s' is already on line %d",
                               label, u[i].line, u[i].uuid, u[i - 1].line);
        free(u);
    }
    free(lines);
    return rc;
}

/* ---- public ---- */

static int parse_problem(const char *dir, const char *def_text, size_t def_len,
                         const char *def_label, const char *wl_text, size_t wl_len,
                         const char *wl_label, kiln_problem **out, kiln_err *err) {
    *out = NULL;
    kiln_problem *p = xcalloc(1, sizeof *p);
    p->dir = xstrdup(dir);
    p->min_bytes = -1;
    p->flops = -1;
    src s = {def_label, 0, err};
    cJSON *root = NULL;
    int rc = parse_json(def_text, def_len, &s, &root);
    if (rc == KILN_OK)
        rc = parse_definition(p, root, &s);
    cJSON_Delete(root);
    if (rc == KILN_OK)
        rc = parse_workloads(p, wl_text, wl_len, wl_label, err);
    if (rc != KILN_OK) {
        kiln_problem_free(p);
        return rc;
    }
    p->source_key = kiln_fnv1a(kiln_fnv1a(KILN_FNV_INIT, def_text, def_len), wl_text, wl_len);
    *out = p;
    return KILN_OK;
}

int kiln_problem_parse(const char *definition_json, size_t def_len, const char *def_label,
                       const char *workload_jsonl, size_t wl_len, const char *wl_label,
                       kiln_problem **out, kiln_err *err) {
    return parse_problem(".", definition_json, def_len, def_label ? def_label : "definition.json",
                         workload_jsonl, wl_len, wl_label ? wl_label : "workload.jsonl", out, err);
}

int kiln_problem_load(const char *dir, kiln_problem **out, kiln_err *err) {
    char *def_path = kiln_path_join(dir, "definition.json");
    char *wl_path = kiln_path_join(dir, "workload.jsonl");
    char *def = NULL, *wl = NULL;
    size_t def_len = 0, wl_len = 0;
    *out = NULL;
    int rc = kiln_read_file(def_path, &def, &def_len, err);
    if (rc == KILN_OK)
        rc = kiln_read_file(wl_path, &wl, &wl_len, err);
    if (rc == KILN_OK)
        rc = parse_problem(dir, def, def_len, def_path, wl, wl_len, wl_path, out, err);
    free(def);
    free(wl);
    free(def_path);
    free(wl_path);
    return rc;
}

static void free_specs(kiln_tensor_spec *t, int n) {
    for (int i = 0; i < n; i++)
        free(t[i].name);
    free(t);
}

void kiln_problem_free(kiln_problem *p) {
    if (!p)
        return;
    for (int i = 0; i < p->n_workloads; i++)
        free_workload(p, &p->workloads[i]);
    free(p->workloads);
    for (int i = 0; i < p->n_axes; i++) {
        free(p->axes[i].name);
        free(p->axes[i].expression);
    }
    free(p->axes);
    free_specs(p->inputs, p->n_inputs);
    free_specs(p->outputs, p->n_outputs);
    for (int i = 0; i < p->n_constraints; i++)
        free(p->constraints[i]);
    free(p->constraints);
    free(p->dir);
    free(p->name);
    free(p->op_type);
    free(p->reference);
    free(p->custom_inputs_entrypoint);
    cJSON_Delete(p->kiln);
    free(p);
}

int kiln_problem_axis_index(const kiln_problem *p, const char *name) {
    for (int i = 0; i < p->n_axes; i++)
        if (strcmp(p->axes[i].name, name) == 0)
            return i;
    return -1;
}

int kiln_problem_input_index(const kiln_problem *p, const char *name) {
    for (int i = 0; i < p->n_inputs; i++)
        if (strcmp(p->inputs[i].name, name) == 0)
            return i;
    return -1;
}

int kiln_problem_output_index(const kiln_problem *p, const char *name) {
    for (int i = 0; i < p->n_outputs; i++)
        if (strcmp(p->outputs[i].name, name) == 0)
            return i;
    return -1;
}

int64_t kiln_tensor_shape(const kiln_problem *p, const kiln_tensor_spec *t, const kiln_workload *w,
                          int64_t shape[KILN_MAX_DIMS]) {
    KILN_ASSERT(p && t && w);
    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        KILN_ASSERT(t->axis[d] < p->n_axes);
        shape[d] = t->axis[d] < 0 ? t->literal[d] : w->axis_values[t->axis[d]];
        numel *= shape[d]; /* cannot overflow: check_sizes bounded the byte size at load */
    }
    return numel;
}

int kiln_tensor_same_shape(const kiln_problem *p, const kiln_tensor_spec *a,
                           const kiln_tensor_spec *b) {
    if (a->ndim != b->ndim)
        return 0;
    for (int w = 0; w < p->n_workloads; w++) {
        int64_t sa[KILN_MAX_DIMS], sb[KILN_MAX_DIMS];
        kiln_tensor_shape(p, a, &p->workloads[w], sa);
        kiln_tensor_shape(p, b, &p->workloads[w], sb);
        if (memcmp(sa, sb, (size_t)a->ndim * sizeof sa[0]) != 0)
            return 0;
    }
    return 1;
}

void kiln_tensor_dim_expr(const kiln_problem *p, const kiln_tensor_spec *t, int d, char *out,
                          size_t n) {
    KILN_ASSERT(d >= 0 && d < t->ndim);
    if (t->axis[d] >= 0)
        snprintf(out, n, "%s", p->axes[t->axis[d]].name);
    else
        snprintf(out, n, "%lld", (long long)t->literal[d]);
}

const char *kiln_problem_kiln_str(const kiln_problem *p, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(p->kiln, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

double kiln_problem_kiln_num(const kiln_problem *p, const char *key, double dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(p->kiln, key);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

double kiln_problem_min_bytes(const kiln_problem *p, const kiln_workload *w) {
    if (p->min_bytes >= 0)
        return p->min_bytes;
    if (w->sol_bytes > 0)
        return w->sol_bytes;
    double bytes = 0;
    int64_t shape[KILN_MAX_DIMS];
    for (int g = 0; g < 2; g++) {
        const kiln_tensor_spec *ts = g ? p->outputs : p->inputs;
        int n = g ? p->n_outputs : p->n_inputs;
        for (int i = 0; i < n; i++)
            if (!ts[i].is_scalar)
                bytes += (double)kiln_tensor_shape(p, &ts[i], w, shape) *
                         (double)kiln_dtype_size(ts[i].dtype);
    }
    return bytes;
}

double kiln_problem_flops(const kiln_problem *p, const kiln_workload *w) {
    return p->flops >= 0 ? p->flops : w->sol_flops;
}

kiln_tolerance kiln_problem_output_tolerance(const kiln_problem *p, int w, int o) {
    if (w >= 0 && w < p->n_workloads && p->workloads[w].has_tolerance)
        return p->workloads[w].tolerance;
    if (p->has_tolerance)
        return p->tolerance;
    kiln_tolerance t = kiln_tolerance_default(p->outputs[o].dtype);
    if (t.atol == 0 && t.rtol == 0)
        return t; /* integers and bool stay exact */
    /* a float output computed from narrower float inputs holds their precision
     * (softmax(bf16).float() carries bf16 values): it is judged by the loosest of their defaults.
     * Not by 8- or 4-bit float inputs: PyTorch computes nothing in those formats (a GEMM multiplies
     * their exact values and sums in fp32, a pointwise op upcasts them first), so an output wider
     * than them is as precise as its own dtype; torch._scaled_mm writing bfloat16 judged at fp8's
     * tolerance would let a tenth of the result be wrong, with or without kiln.flops declared. */
    for (int i = 0; i < p->n_inputs; i++) {
        if (kiln_dtype_size(p->inputs[i].dtype) == 1 && kiln_dtype_is_float(p->inputs[i].dtype))
            continue;
        kiln_tolerance d = kiln_tolerance_default(p->inputs[i].dtype);
        t.atol = d.atol > t.atol ? d.atol : t.atol;
        t.rtol = d.rtol > t.rtol ? d.rtol : t.rtol;
        t.rel_l2 = d.rel_l2 > t.rel_l2 ? d.rel_l2 : t.rel_l2;
    }
    return t;
}

kiln_tolerance kiln_tolerance_default(kiln_dtype t) {
    switch (t) {
    case KILN_F64:
        return (kiln_tolerance){.atol = 1e-8, .rtol = 1e-7, .rel_l2 = 1e-7};
    case KILN_F32:
        return (kiln_tolerance){.atol = 1e-5, .rtol = 1e-4, .rel_l2 = 1e-5};
    case KILN_F16:
        return (kiln_tolerance){.atol = 1e-3, .rtol = 1e-2, .rel_l2 = 2e-3};
    case KILN_BF16:
        return (kiln_tolerance){.atol = 1e-2, .rtol = 2e-2, .rel_l2 = 1e-2};
    case KILN_F8_E4M3:
    case KILN_F8_E5M2:
    case KILN_F4_E2M1:
    case KILN_F4_E2M1X2:
        return (kiln_tolerance){.atol = 0.1, .rtol = 0.25, .rel_l2 = 0.1};
    default:
        return (kiln_tolerance){.atol = 0, .rtol = 0, .rel_l2 = 0};
    }
}
