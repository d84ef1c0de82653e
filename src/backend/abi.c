/* abi.c: the candidate ABI of docs/abi.md: parsing `// kiln:` directives, evaluating them for a
 * workload, and the parameter list (and its C spelling) that a problem implies. */
#include "abi.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../formats/expr.h"

/* ---- parsing ---- */

/* Directive lines are short; a longer one is surely not something we should guess at. */
#define MAX_DIRECTIVE_LEN 4096
#define MAX_TOKENS 16

typedef struct {
    const char *s;
    size_t len;
} span;

static int is_space(char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

static span trim(span t) {
    while (t.len && is_space(t.s[0])) {
        t.s++;
        t.len--;
    }
    while (t.len && is_space(t.s[t.len - 1]))
        t.len--;
    return t;
}

static int is_identifier(span t) {
    if (t.len == 0 || !(isalpha((unsigned char)t.s[0]) || t.s[0] == '_'))
        return 0;
    for (size_t i = 1; i < t.len; i++)
        if (!(isalnum((unsigned char)t.s[i]) || t.s[i] == '_'))
            return 0;
    return 1;
}

/* Splits a directive body into tokens at whitespace outside parentheses. */
static int tokenize(span body, int line, span *tok, int *n_tok, kiln_err *err) {
    *n_tok = 0;
    size_t i = 0;
    while (i < body.len) {
        while (i < body.len && is_space(body.s[i]))
            i++;
        if (i == body.len)
            break;
        size_t start = i;
        int depth = 0;
        while (i < body.len && (depth > 0 || !is_space(body.s[i]))) {
            if (body.s[i] == '(')
                depth++;
            else if (body.s[i] == ')' && --depth < 0)
                return kiln_errf(err, KILN_ERR_COMPILE,
                                 "line %d: unbalanced ')' in '// kiln:' line", line);
            i++;
        }
        if (depth != 0)
            return kiln_errf(err, KILN_ERR_COMPILE, "line %d: unbalanced '(' in '// kiln:' line",
                             line);
        if (*n_tok == MAX_TOKENS)
            return kiln_errf(err, KILN_ERR_COMPILE, "line %d: too many words in '// kiln:' line",
                             line);
        tok[(*n_tok)++] = (span){body.s + start, i - start};
    }
    return KILN_OK;
}

/* Parses one value: an expression, or a parenthesised tuple of up to max_dims expressions. A value
 * that merely starts with '(' (like `(n+1)/2`) is an expression: it is a tuple only when the
 * parenthesis that opens it closes at its very end. */
static int parse_value(span v, int max_dims, const char *key, int line, char **dims,
                       kiln_err *err) {
    if (v.len == 0)
        return kiln_errf(err, KILN_ERR_COMPILE, "line %d: '%s=' has no value", line, key);
    int tuple = 0;
    if (v.s[0] == '(') {
        int depth = 0;
        size_t close = 0;
        for (size_t i = 0; i < v.len; i++) {
            if (v.s[i] == '(')
                depth++;
            else if (v.s[i] == ')' && --depth == 0) {
                close = i;
                break;
            }
        }
        tuple = close == v.len - 1;
    }
    if (!tuple) {
        dims[0] = xstrndup(v.s, v.len);
        return KILN_OK;
    }
    span inner = {v.s + 1, v.len - 2};
    int n = 0, depth = 0;
    size_t start = 0;
    for (size_t i = 0; i <= inner.len; i++) {
        if (i < inner.len && inner.s[i] == '(')
            depth++;
        else if (i < inner.len && inner.s[i] == ')')
            depth--;
        else if (i == inner.len || (inner.s[i] == ',' && depth == 0)) {
            span part = trim((span){inner.s + start, i - start});
            if (part.len == 0)
                return kiln_errf(err, KILN_ERR_COMPILE, "line %d: '%s' has an empty element", line,
                                 key);
            if (n == max_dims)
                return kiln_errf(err, KILN_ERR_COMPILE, "line %d: '%s' has more than %d element%s",
                                 line, key, max_dims, max_dims == 1 ? "" : "s");
            dims[n++] = xstrndup(part.s, part.len);
            start = i + 1;
        }
    }
    return KILN_OK;
}

static int parse_launch(const span *tok, int n_tok, int line, kiln_launch_spec *ls, kiln_err *err) {
    if (n_tok < 2)
        return kiln_errf(err, KILN_ERR_COMPILE,
                         "line %d: 'launch' needs an entry point name: "
                         "// kiln: launch ENTRY grid=X block=X [smem=BYTES] [cluster=X]",
                         line);
    if (!is_identifier(tok[1]) || tok[1].len >= sizeof ls->entry)
        return kiln_errf(err, KILN_ERR_COMPILE, "line %d: '%.*s' is not a valid entry point name",
                         line, (int)(tok[1].len > 64 ? 64 : tok[1].len), tok[1].s);
    memcpy(ls->entry, tok[1].s, tok[1].len);
    ls->entry[tok[1].len] = 0;
    int seen_grid = 0, seen_block = 0, seen_smem = 0, seen_cluster = 0;
    for (int i = 2; i < n_tok; i++) {
        const char *eq = memchr(tok[i].s, '=', tok[i].len);
        if (!eq)
            return kiln_errf(err, KILN_ERR_COMPILE,
                             "line %d: expected key=value, got '%.*s' (spaces are allowed only "
                             "inside parentheses)",
                             line, (int)(tok[i].len > 64 ? 64 : tok[i].len), tok[i].s);
        span key = {tok[i].s, (size_t)(eq - tok[i].s)};
        span value = {eq + 1, tok[i].len - key.len - 1};
        char **dims;
        int max_dims = 3, *seen;
        const char *name;
        if (key.len == 4 && !memcmp(key.s, "grid", 4)) {
            dims = ls->grid, seen = &seen_grid, name = "grid";
        } else if (key.len == 5 && !memcmp(key.s, "block", 5)) {
            dims = ls->block, seen = &seen_block, name = "block";
        } else if (key.len == 7 && !memcmp(key.s, "cluster", 7)) {
            dims = ls->cluster, seen = &seen_cluster, name = "cluster";
        } else if (key.len == 4 && !memcmp(key.s, "smem", 4)) {
            dims = &ls->smem, seen = &seen_smem, name = "smem", max_dims = 1;
        } else {
            return kiln_errf(err, KILN_ERR_COMPILE,
                             "line %d: unknown launch key '%.*s' (expected grid, block, smem or "
                             "cluster)",
                             line, (int)(key.len > 64 ? 64 : key.len), key.s);
        }
        if (*seen)
            return kiln_errf(err, KILN_ERR_COMPILE, "line %d: '%s' given twice", line, name);
        *seen = 1;
        int rc = parse_value(value, max_dims, name, line, dims, err);
        if (rc)
            return rc;
    }
    return KILN_OK;
}

/* `tensormap TENSOR dims=(..) strides=(..) box=(..) [swizzle=S]` (docs/abi.md section 2). */
static int parse_tensormap(const span *tok, int n_tok, int line, kiln_tmap_spec *ts,
                           kiln_err *err) {
    if (n_tok < 2 || !is_identifier(tok[1]) || tok[1].len >= sizeof ts->tensor)
        return kiln_errf(err, KILN_ERR_COMPILE,
                         "line %d: 'tensormap' needs a tensor parameter's name: // kiln: "
                         "tensormap TENSOR dims=(D0,D1,..) strides=(S1,..) box=(B0,B1,..) "
                         "[swizzle=0|32|64|128]",
                         line);
    memcpy(ts->tensor, tok[1].s, tok[1].len);
    ts->tensor[tok[1].len] = 0;
    int seen_swizzle = 0;
    for (int i = 2; i < n_tok; i++) {
        const char *eq = memchr(tok[i].s, '=', tok[i].len);
        if (!eq)
            return kiln_errf(err, KILN_ERR_COMPILE, "line %d: expected key=value, got '%.*s'", line,
                             (int)(tok[i].len > 64 ? 64 : tok[i].len), tok[i].s);
        span key = {tok[i].s, (size_t)(eq - tok[i].s)};
        span value = {eq + 1, tok[i].len - key.len - 1};
        char **dst;
        const char *name;
        int max = KILN_TMAP_MAX_RANK;
        if (key.len == 4 && !memcmp(key.s, "dims", 4)) {
            dst = ts->dims, name = "dims";
        } else if (key.len == 7 && !memcmp(key.s, "strides", 7)) {
            dst = ts->strides, name = "strides", max = KILN_TMAP_MAX_RANK - 1;
        } else if (key.len == 3 && !memcmp(key.s, "box", 3)) {
            dst = ts->box, name = "box";
        } else if (key.len == 7 && !memcmp(key.s, "swizzle", 7)) {
            if (seen_swizzle++)
                return kiln_errf(err, KILN_ERR_COMPILE, "line %d: 'swizzle' given twice", line);
            char v[8] = {0};
            memcpy(v, value.s, value.len < sizeof v - 1 ? value.len : sizeof v - 1);
            ts->swizzle = atoi(v);
            if (value.len > 3 ||
                (strcmp(v, "0") && strcmp(v, "32") && strcmp(v, "64") && strcmp(v, "128")))
                return kiln_errf(err, KILN_ERR_COMPILE,
                                 "line %d: swizzle '%.*s' (expected 0, 32, 64 or 128 bytes)", line,
                                 (int)(value.len > 16 ? 16 : value.len), value.s);
            continue;
        } else {
            return kiln_errf(err, KILN_ERR_COMPILE,
                             "line %d: unknown tensormap key '%.*s' (expected dims, strides, box "
                             "or swizzle)",
                             line, (int)(key.len > 64 ? 64 : key.len), key.s);
        }
        if (dst[0])
            return kiln_errf(err, KILN_ERR_COMPILE, "line %d: '%s' given twice", line, name);
        int rc = parse_value(value, max, name, line, dst, err);
        if (rc)
            return rc;
    }
    while (ts->rank < KILN_TMAP_MAX_RANK && ts->dims[ts->rank])
        ts->rank++;
    int n_strides = 0, n_box = 0;
    while (n_strides < KILN_TMAP_MAX_RANK - 1 && ts->strides[n_strides])
        n_strides++;
    while (n_box < KILN_TMAP_MAX_RANK && ts->box[n_box])
        n_box++;
    if (ts->rank == 0 || n_box != ts->rank || n_strides != ts->rank - 1)
        return kiln_errf(err, KILN_ERR_COMPILE,
                         "line %d: tensormap '%s' has %d dims, %d strides and %d box sizes (a map "
                         "of rank R needs R dims, R-1 strides and R box sizes)",
                         line, ts->tensor, ts->rank, n_strides, n_box);
    return KILN_OK;
}

/* Finds the body of a directive: the rest of a line that starts (after blanks) with "// kiln:". */
static int directive_body(span line, span *body) {
    span t = trim(line);
    static const char prefix[] = "// kiln:";
    if (t.len < sizeof prefix - 1 || memcmp(t.s, prefix, sizeof prefix - 1) != 0)
        return 0;
    body->s = t.s + sizeof prefix - 1;
    body->len = t.len - (sizeof prefix - 1);
    return 1;
}

/* The libraries a `// kiln: library` line may name (a backend that does not know one says so). */
static const char *const known_libraries[] = {"cublaslt"};

/* A `library NAME ARGS` directive body: fills out->library and out->library_args (the rest of the
 * line, trimmed) and returns KILN_OK; any other body leaves out as it is. */
static int parse_library(span body, int line, kiln_abi *out, kiln_err *err) {
    span t = trim(body);
    static const char kw[] = "library";
    size_t n = sizeof kw - 1;
    if (t.len <= n || memcmp(t.s, kw, n) != 0 || (t.s[n] != ' ' && t.s[n] != '\t'))
        return KILN_OK;
    span rest = trim((span){t.s + n, t.len - n});
    size_t name_len = 0;
    while (name_len < rest.len && rest.s[name_len] != ' ' && rest.s[name_len] != '\t')
        name_len++;
    if (out->library)
        return kiln_errf(err, KILN_ERR_COMPILE, "line %d: 'library' given twice", line);
    int known = 0;
    for (size_t i = 0; i < sizeof known_libraries / sizeof known_libraries[0]; i++)
        known |= strlen(known_libraries[i]) == name_len &&
                 memcmp(known_libraries[i], rest.s, name_len) == 0;
    if (!known)
        return kiln_errf(err, KILN_ERR_COMPILE,
                         "line %d: unknown library '%.*s' (kiln knows: cublaslt)", line,
                         (int)(name_len > 64 ? 64 : name_len), rest.s);
    span args = trim((span){rest.s + name_len, rest.len - name_len});
    out->library = xstrndup(rest.s, name_len);
    out->library_args = xstrndup(args.s, args.len);
    return KILN_OK;
}

int kiln_abi_is_library(const char *source) {
    for (const char *s = source; s && *s;) {
        const char *nl = strchr(s, '\n');
        span line = {s, nl ? (size_t)(nl - s) : strlen(s)};
        s = nl ? nl + 1 : s + line.len;
        span body;
        if (!directive_body(line, &body))
            continue;
        span t = trim(body);
        if (t.len > 8 && memcmp(t.s, "library", 7) == 0 && (t.s[7] == ' ' || t.s[7] == '\t'))
            return 1;
    }
    return 0;
}

int kiln_abi_parse(const char *source, int require_launch, kiln_abi *out, kiln_err *err) {
    KILN_ASSERT(source && out);
    memset(out, 0, sizeof *out);
    int rc = KILN_OK;
    int line_no = 0;
    for (const char *s = source; *s && rc == KILN_OK;) {
        const char *nl = strchr(s, '\n');
        span line = {s, nl ? (size_t)(nl - s) : strlen(s)};
        s = nl ? nl + 1 : s + line.len;
        line_no++;
        span body;
        if (!directive_body(line, &body))
            continue;
        if (body.len > MAX_DIRECTIVE_LEN) {
            rc = kiln_errf(err, KILN_ERR_COMPILE, "line %d: '// kiln:' line is too long", line_no);
            break;
        }
        const char *had_library = out->library;
        if ((rc = parse_library(body, line_no, out, err)) != 0)
            break;
        if (out->library != had_library)
            continue;
        span tok[MAX_TOKENS];
        int n_tok;
        if ((rc = tokenize(body, line_no, tok, &n_tok, err)))
            break;
        if (n_tok == 0) {
            rc = kiln_errf(err, KILN_ERR_COMPILE,
                           "line %d: empty '// kiln:' line (expected launch, tensormap or scratch)",
                           line_no);
        } else if (tok[0].len == 6 && !memcmp(tok[0].s, "launch", 6)) {
            if (out->n_launches == KILN_MAX_LAUNCHES) {
                rc = kiln_errf(err, KILN_ERR_COMPILE, "line %d: more than %d launch lines", line_no,
                               KILN_MAX_LAUNCHES);
                break;
            }
            rc = parse_launch(tok, n_tok, line_no, &out->launch[out->n_launches++], err);
        } else if (tok[0].len == 9 && !memcmp(tok[0].s, "tensormap", 9)) {
            if (!require_launch)
                rc = kiln_errf(err, KILN_ERR_COMPILE,
                               "line %d: 'tensormap' is for CUDA candidates (TMA)", line_no);
            else if (out->n_tmaps == KILN_MAX_TMAPS)
                rc = kiln_errf(err, KILN_ERR_COMPILE, "line %d: more than %d tensormap lines",
                               line_no, KILN_MAX_TMAPS);
            else
                rc = parse_tensormap(tok, n_tok, line_no, &out->tmap[out->n_tmaps++], err);
        } else if (tok[0].len == 7 && !memcmp(tok[0].s, "scratch", 7)) {
            if (out->scratch)
                rc = kiln_errf(err, KILN_ERR_COMPILE, "line %d: 'scratch' given twice", line_no);
            else if (n_tok != 2)
                rc = kiln_errf(err, KILN_ERR_COMPILE,
                               "line %d: 'scratch' takes one expression: // kiln: scratch BYTES "
                               "(spaces are allowed only inside parentheses)",
                               line_no);
            else
                out->scratch = xstrndup(tok[1].s, tok[1].len);
        } else {
            rc = kiln_errf(
                err, KILN_ERR_COMPILE,
                "line %d: unknown directive '%.*s' (expected launch, tensormap or scratch)",
                line_no, (int)(tok[0].len > 64 ? 64 : tok[0].len), tok[0].s);
        }
    }
    if (rc == KILN_OK && out->library && (out->n_launches || out->scratch || out->n_tmaps))
        rc = kiln_errf(err, KILN_ERR_COMPILE,
                       "a '// kiln: library' candidate is a library call: it has no launch, "
                       "tensormap or scratch lines");
    if (rc == KILN_OK && out->n_launches == 0 && !out->library) {
        if (require_launch) {
            rc = kiln_errf(err, KILN_ERR_COMPILE,
                           "no '// kiln: launch' line: a CUDA candidate must state its launches, "
                           "e.g. '// kiln: launch my_kernel grid=ceil_div(n,256) block=256'");
        } else {
            out->n_launches = 1;
            strcpy(out->launch[0].entry, "kiln_kernel");
        }
    }
    if (rc)
        kiln_abi_free(out);
    return rc;
}

void kiln_abi_free(kiln_abi *abi) {
    if (!abi)
        return;
    for (int i = 0; i < KILN_MAX_LAUNCHES; i++) {
        kiln_launch_spec *ls = &abi->launch[i];
        for (int d = 0; d < 3; d++) {
            free(ls->grid[d]);
            free(ls->block[d]);
            free(ls->cluster[d]);
        }
        free(ls->smem);
    }
    for (int i = 0; i < KILN_MAX_TMAPS; i++) {
        kiln_tmap_spec *ts = &abi->tmap[i];
        for (int d = 0; d < KILN_TMAP_MAX_RANK; d++) {
            free(ts->dims[d]);
            free(ts->box[d]);
            if (d < KILN_TMAP_MAX_RANK - 1)
                free(ts->strides[d]);
        }
    }
    free(abi->scratch);
    free(abi->library);
    free(abi->library_args);
    memset(abi, 0, sizeof *abi);
}

/* ---- evaluation ---- */

typedef struct {
    const kiln_problem *p;
    const kiln_workload *w;
} axis_ctx;

static int lookup_axis(void *ctx, const char *name, size_t name_len, int64_t *value) {
    const axis_ctx *a = ctx;
    for (int i = 0; i < a->p->n_axes; i++) {
        const char *axis = a->p->axes[i].name;
        if (axis && strlen(axis) == name_len && memcmp(axis, name, name_len) == 0) {
            *value = a->w->axis_values[i];
            return 0;
        }
    }
    return -1;
}

/* Evaluates one expression; what names the value in messages ("grid.y of launch 'k'"). */
static int eval(const char *expr, axis_ctx *ctx, const char *what, int64_t *out, kiln_err *err) {
    kiln_err e;
    if (kiln_expr_eval(expr, lookup_axis, ctx, out, &e) != 0)
        return kiln_errf(err, KILN_ERR_COMPILE, "%s: '%s': %s", what, expr, e.msg);
    return KILN_OK;
}

static int eval_dims(char *const exprs[3], const int64_t limit[3], const char *key,
                     const char *entry, axis_ctx *ctx, unsigned out[3], kiln_err *err) {
    static const char axis_name[3] = {'x', 'y', 'z'};
    for (int d = 0; d < 3; d++) {
        int64_t v = 1;
        if (exprs[d]) {
            char what[200];
            snprintf(what, sizeof what, "%s.%c of launch '%s'", key, axis_name[d], entry);
            int rc = eval(exprs[d], ctx, what, &v, err);
            if (rc)
                return rc;
        }
        if (v < 1)
            return kiln_errf(err, KILN_ERR_RESOURCE,
                             "launch '%s': %s.%c = %lld (every dimension must be at least 1)",
                             entry, key, axis_name[d], (long long)v);
        if (v > limit[d])
            return kiln_errf(err, KILN_ERR_RESOURCE,
                             "launch '%s': %s.%c = %lld exceeds the limit %lld", entry, key,
                             axis_name[d], (long long)v, (long long)limit[d]);
        out[d] = (unsigned)v;
    }
    return KILN_OK;
}

/* The parameter index and spec of the tensor a tensor map names (inputs, then outputs: their ABI
 * order), or NULL. */
static const kiln_tensor_spec *tmap_tensor(const kiln_problem *p, const char *name, int *param) {
    int i = kiln_problem_input_index(p, name);
    if (i >= 0) {
        *param = i;
        return &p->inputs[i];
    }
    int o = kiln_problem_output_index(p, name);
    if (o < 0)
        return NULL;
    *param = p->n_inputs + o;
    return &p->outputs[o];
}

/* Evaluates tensor map ts for a workload into t and checks what the TMA unit and the gate need:
 * the map names a tensor parameter stored whole, its strides are multiples of 16 bytes, its boxes
 * fit the unit (and the swizzle), and no element it addresses lies past the tensor's last byte. */
static int plan_tmap(const kiln_tmap_spec *ts, const kiln_problem *p, const kiln_workload *w,
                     axis_ctx *ctx, kiln_tmap *t, kiln_err *err) {
    const kiln_tensor_spec *spec = tmap_tensor(p, ts->tensor, &t->param);
    if (!spec || spec->is_scalar)
        return kiln_errf(err, KILN_ERR_COMPILE,
                         "tensormap '%s': not a tensor input or output of the problem", ts->tensor);
    if (spec->layout.expanded)
        return kiln_errf(err, KILN_ERR_COMPILE,
                         "tensormap '%s': the tensor is stored broadcast (fewer elements than its "
                         "shape)",
                         ts->tensor);
    const size_t esize = kiln_dtype_size(spec->dtype);
    if (spec->dtype == KILN_F4_E2M1X2 || !(esize == 1 || esize == 2 || esize == 4 || esize == 8))
        return kiln_errf(err, KILN_ERR_COMPILE, "tensormap '%s': TMA does not move %s elements",
                         ts->tensor, kiln_dtype_name(spec->dtype));
    t->dtype = spec->dtype;
    t->rank = ts->rank;
    t->swizzle = ts->swizzle;
    char what[160];
    uint64_t reach = 0;
    for (int d = 0; d < ts->rank; d++) {
        int64_t dim, box, stride = 1;
        snprintf(what, sizeof what, "dims[%d] of tensormap '%s'", d, ts->tensor);
        int rc = eval(ts->dims[d], ctx, what, &dim, err);
        snprintf(what, sizeof what, "box[%d] of tensormap '%s'", d, ts->tensor);
        if (rc == KILN_OK)
            rc = eval(ts->box[d], ctx, what, &box, err);
        snprintf(what, sizeof what, "strides[%d] of tensormap '%s'", d - 1, ts->tensor);
        if (rc == KILN_OK && d > 0)
            rc = eval(ts->strides[d - 1], ctx, what, &stride, err);
        if (rc)
            return rc;
        if (dim < 1 || dim > ((int64_t)1 << 32))
            return kiln_errf(err, KILN_ERR_COMPILE, "tensormap '%s': dims[%d] = %lld (1 to 2^32)",
                             ts->tensor, d, (long long)dim);
        if (box < 1 || box > 256)
            return kiln_errf(err, KILN_ERR_COMPILE, "tensormap '%s': box[%d] = %lld (1 to 256)",
                             ts->tensor, d, (long long)box);
        const int64_t bytes = stride * (int64_t)esize;
        if (d > 0 && (stride < 1 || bytes % 16 || bytes >= ((int64_t)1 << 40)))
            return kiln_errf(err, KILN_ERR_COMPILE,
                             "tensormap '%s': strides[%d] = %lld elements (%lld bytes: a positive "
                             "multiple of 16 below 2^40)",
                             ts->tensor, d - 1, (long long)stride, (long long)bytes);
        t->dims[d] = (uint64_t)dim;
        t->box[d] = (uint32_t)box;
        if (d > 0)
            t->strides[d - 1] = (uint64_t)bytes;
        uint64_t extent;
        if (__builtin_mul_overflow(d == 0 ? (uint64_t)dim : (uint64_t)(dim - 1),
                                   d == 0 ? (uint64_t)esize : (uint64_t)bytes, &extent) ||
            __builtin_add_overflow(reach, extent, &reach))
            reach = UINT64_MAX; /* past any tensor: refused below */
    }
    const uint64_t row = (uint64_t)t->box[0] * esize;
    if (row % 16 || (t->swizzle && row > (uint64_t)t->swizzle))
        return kiln_errf(err, KILN_ERR_COMPILE,
                         "tensormap '%s': box[0] is %llu bytes (a multiple of 16%s)", ts->tensor,
                         (unsigned long long)row, t->swizzle ? ", at most the swizzle span" : "");
    int64_t shape[KILN_MAX_DIMS];
    const uint64_t have = (uint64_t)kiln_tensor_shape(p, spec, w, shape) * esize;
    if (reach > have)
        return kiln_errf(err, KILN_ERR_COMPILE,
                         "tensormap '%s' reaches %llu bytes; the tensor has %llu", ts->tensor,
                         (unsigned long long)reach, (unsigned long long)have);
    return KILN_OK;
}

int kiln_abi_plan(const kiln_abi *abi, const kiln_problem *p, const kiln_workload *w,
                  kiln_launch_plan *out, kiln_err *err) {
    static const int64_t grid_limit[3] = {2147483647, 65535, 65535};
    static const int64_t block_limit[3] = {1024, 1024, 64};
    /* Clusters are checked against the device by the backend; here only against the grid limits. */
    static const int64_t cluster_limit[3] = {2147483647, 65535, 65535};
    KILN_ASSERT(abi && p && w && out);
    memset(out, 0, sizeof *out);
    axis_ctx ctx = {p, w};
    int rc = KILN_OK;
    for (int i = 0; i < abi->n_launches && rc == KILN_OK; i++) {
        const kiln_launch_spec *ls = &abi->launch[i];
        kiln_launch *l = &out->launch[i];
        snprintf(l->entry, sizeof l->entry, "%s", ls->entry);
        if ((rc = eval_dims(ls->grid, grid_limit, "grid", ls->entry, &ctx, l->grid, err)) ||
            (rc = eval_dims(ls->block, block_limit, "block", ls->entry, &ctx, l->block, err)) ||
            (rc = eval_dims(ls->cluster, cluster_limit, "cluster", ls->entry, &ctx, l->cluster,
                            err)))
            break;
        uint64_t threads = (uint64_t)l->block[0] * l->block[1] * l->block[2];
        if (threads > 1024) {
            rc = kiln_errf(err, KILN_ERR_RESOURCE,
                           "launch '%s': block (%u, %u, %u) has %llu threads (the limit is 1024)",
                           ls->entry, l->block[0], l->block[1], l->block[2],
                           (unsigned long long)threads);
            break;
        }
        if (ls->smem) {
            int64_t smem;
            char what[200];
            snprintf(what, sizeof what, "smem of launch '%s'", ls->entry);
            if ((rc = eval(ls->smem, &ctx, what, &smem, err)))
                break;
            if (smem < 0 || smem > (int64_t)UINT32_MAX) {
                rc = kiln_errf(err, KILN_ERR_RESOURCE,
                               "launch '%s': smem = %lld bytes is out of range", ls->entry,
                               (long long)smem);
                break;
            }
            l->smem_bytes = (size_t)smem;
        }
        out->n_launches = i + 1;
    }
    if (rc == KILN_OK && abi->scratch) {
        int64_t bytes;
        rc = eval(abi->scratch, &ctx, "scratch", &bytes, err);
        if (rc == KILN_OK && bytes < 0)
            rc = kiln_errf(err, KILN_ERR_RESOURCE, "scratch = %lld bytes is negative",
                           (long long)bytes);
        if (rc == KILN_OK)
            out->scratch_bytes = (size_t)bytes;
    }
    for (int i = 0; i < abi->n_tmaps && rc == KILN_OK; i++)
        rc = plan_tmap(&abi->tmap[i], p, w, &ctx, &out->tmap[i], err);
    if (rc == KILN_OK) {
        out->n_tmaps = abi->n_tmaps;
        out->n_params = p->n_inputs + p->n_outputs + p->n_axes + (abi->scratch ? 1 : 0);
    }
    if (rc)
        memset(out, 0, sizeof *out);
    return rc;
}

/* ---- tensor maps in a library manifest ---- */

cJSON *kiln_tmaps_to_json(const kiln_launch_plan *plan) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < plan->n_tmaps; i++) {
        const kiln_tmap *t = &plan->tmap[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "param", t->param);
        cJSON_AddStringToObject(o, "dtype", kiln_dtype_name(t->dtype));
        cJSON *dims = cJSON_AddArrayToObject(o, "dims");
        cJSON *strides = cJSON_AddArrayToObject(o, "strides");
        cJSON *box = cJSON_AddArrayToObject(o, "box");
        for (int d = 0; d < t->rank; d++) {
            cJSON_AddItemToArray(dims, cJSON_CreateNumber((double)t->dims[d]));
            cJSON_AddItemToArray(box, cJSON_CreateNumber(t->box[d]));
            if (d > 0)
                cJSON_AddItemToArray(strides, cJSON_CreateNumber((double)t->strides[d - 1]));
        }
        cJSON_AddNumberToObject(o, "swizzle", t->swizzle);
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

/* Reads array a of n (1 .. max) integers in [lo, hi] into out; -1 when it is not that. */
static int json_uints(const cJSON *a, int n, uint64_t lo, uint64_t hi, uint64_t *out) {
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n)
        return -1;
    for (int i = 0; i < n; i++) {
        const cJSON *v = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= (double)lo && v->valuedouble <= (double)hi) ||
            v->valuedouble != (double)(uint64_t)v->valuedouble)
            return -1;
        out[i] = (uint64_t)v->valuedouble;
    }
    return 0;
}

int kiln_tmaps_from_json(const cJSON *a, const kiln_dtype *dtypes, int n_tensors,
                         kiln_launch_plan *plan, kiln_err *err) {
    plan->n_tmaps = 0;
    if (!a || cJSON_IsNull(a))
        return KILN_OK;
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) > KILN_MAX_TMAPS)
        return kiln_errf(err, KILN_ERR_FORMAT, "\"tensormaps\" must be an array of at most %d",
                         KILN_MAX_TMAPS);
    const cJSON *o;
    cJSON_ArrayForEach(o, a) {
        kiln_tmap *t = &plan->tmap[plan->n_tmaps];
        memset(t, 0, sizeof *t);
        const cJSON *param = cJSON_GetObjectItemCaseSensitive(o, "param");
        const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(o, "dtype");
        const cJSON *dims = cJSON_GetObjectItemCaseSensitive(o, "dims");
        const cJSON *swizzle = cJSON_GetObjectItemCaseSensitive(o, "swizzle");
        const int i = plan->n_tmaps;
        if (!cJSON_IsNumber(param) || param->valuedouble < 0 || param->valuedouble >= n_tensors ||
            param->valuedouble != (int)param->valuedouble)
            return kiln_errf(err, KILN_ERR_FORMAT,
                             "tensor map %d: \"param\" must name one of the %d tensors", i,
                             n_tensors);
        t->param = (int)param->valuedouble;
        if (!cJSON_IsString(dtype) || kiln_dtype_parse(dtype->valuestring, &t->dtype) != 0 ||
            t->dtype != dtypes[t->param])
            return kiln_errf(err, KILN_ERR_FORMAT,
                             "tensor map %d: \"dtype\" must be its tensor's (%s)", i,
                             kiln_dtype_name(dtypes[t->param]));
        t->rank = cJSON_IsArray(dims) ? cJSON_GetArraySize(dims) : 0;
        uint64_t box[KILN_TMAP_MAX_RANK];
        if (t->rank < 1 || t->rank > KILN_TMAP_MAX_RANK ||
            json_uints(dims, t->rank, 1, (uint64_t)1 << 32, t->dims) ||
            json_uints(cJSON_GetObjectItemCaseSensitive(o, "box"), t->rank, 1, 256, box) ||
            (t->rank > 1 && json_uints(cJSON_GetObjectItemCaseSensitive(o, "strides"), t->rank - 1,
                                       16, ((uint64_t)1 << 40) - 1, t->strides)) ||
            !cJSON_IsNumber(swizzle))
            return kiln_errf(err, KILN_ERR_FORMAT,
                             "tensor map %d: \"dims\", \"box\" (1 to 256) and \"strides\" "
                             "(bytes) must be arrays of rank 1 to %d, rank - 1 integers, "
                             "\"swizzle\" a number",
                             i, KILN_TMAP_MAX_RANK);
        for (int d = 0; d < t->rank; d++)
            t->box[d] = (uint32_t)box[d];
        t->swizzle = (int)swizzle->valuedouble;
        if (t->swizzle != 0 && t->swizzle != 32 && t->swizzle != 64 && t->swizzle != 128)
            return kiln_errf(err, KILN_ERR_FORMAT, "tensor map %d: swizzle %d (0, 32, 64, 128)", i,
                             t->swizzle);
        plan->n_tmaps++;
    }
    return KILN_OK;
}

/* ---- signature ---- */

/* How a scalar of type t travels by value (docs/abi.md section 1). */
static kiln_param_kind scalar_kind(kiln_dtype t, const char **c_type) {
    switch (t) {
    case KILN_F64:
        *c_type = "double";
        return KILN_PARAM_F64;
    case KILN_I64:
        *c_type = "int64_t";
        return KILN_PARAM_I64;
    case KILN_I32:
    case KILN_I16:
    case KILN_I8:
    case KILN_U8:
        *c_type = "int32_t";
        return KILN_PARAM_I32;
    case KILN_BOOL:
        *c_type = "bool";
        return KILN_PARAM_BOOL;
    default:
        *c_type = "float";
        return KILN_PARAM_F32;
    }
}

void kiln_abi_add_param(kiln_signature *sig, kiln_param_kind kind, const char *name,
                        const char *c_type) {
    /* A problem with more parameters than this is not one kiln can pass; the loader keeps them
     * far below it, so running past it is a programmer error. */
    KILN_ASSERT(sig->n < KILN_MAX_PARAMS);
    kiln_param *prm = &sig->p[sig->n++];
    memset(prm, 0, sizeof *prm);
    prm->kind = kind;
    snprintf(prm->name, sizeof prm->name, "%s", name ? name : "");
    snprintf(prm->c_type, sizeof prm->c_type, "%s", c_type);
}

void kiln_abi_add_tensor(kiln_signature *sig, const char *name, kiln_dtype t, int is_output,
                         int cuda) {
    char c_type[48];
    snprintf(c_type, sizeof c_type, "%s%s*", is_output ? "" : "const ",
             kiln_dtype_kernel_type(t, cuda).type);
    kiln_abi_add_param(sig, KILN_PARAM_PTR, name, c_type);
}

void kiln_abi_signature(const kiln_problem *p, int has_scratch, int cuda, kiln_signature *out) {
    KILN_ASSERT(p && out);
    memset(out, 0, sizeof *out);
    for (int i = 0; i < p->n_inputs; i++) {
        const kiln_tensor_spec *t = &p->inputs[i];
        if (t->is_scalar) {
            const char *c_type;
            kiln_param_kind kind = scalar_kind(t->dtype, &c_type);
            kiln_abi_add_param(out, kind, t->name, c_type);
        } else {
            kiln_abi_add_tensor(out, t->name, t->dtype, 0, cuda);
        }
    }
    for (int i = 0; i < p->n_outputs; i++)
        kiln_abi_add_tensor(out, p->outputs[i].name, p->outputs[i].dtype, 1, cuda);
    for (int i = 0; i < p->n_axes; i++)
        kiln_abi_add_param(out, KILN_PARAM_I64, p->axes[i].name, "int64_t");
    if (has_scratch)
        kiln_abi_add_param(out, KILN_PARAM_PTR, "kiln_scratch", "void*");
}

char *kiln_abi_param_list(const kiln_signature *sig) {
    KILN_ASSERT(sig);
    kiln_strbuf b = {0};
    kiln_strbuf_printf(&b, "%s", "");
    for (int i = 0; i < sig->n; i++)
        kiln_strbuf_printf(&b, "%s%s %s", i ? ", " : "", sig->p[i].c_type, sig->p[i].name);
    return b.s;
}

char *kiln_abi_prototype(const kiln_signature *sig, const char *entry, int cuda) {
    KILN_ASSERT(sig && entry);
    char *params = kiln_abi_param_list(sig);
    char *s = xasprintf("%svoid %s(%s)", cuda ? "extern \"C\" __global__ " : "", entry,
                        sig->n == 0 && !cuda ? "void" : params);
    free(params);
    return s;
}
