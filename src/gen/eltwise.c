/* eltwise.c: the eltwise family: a chain of pointwise aten ops (activations, gates, residual adds,
 * scales, casts) with broadcasting, fused into one pass over the output.
 *
 * Where a chain comes from. Three problem forms describe one (docs/families/eltwise.md):
 *  - a captured aten call ("kind": "aten"): a chain of one op;
 *  - a captured leaf module ("kind": "module") whose aten ops are all pointwise (an activation
 *    module, a gate);
 *  - a hand-written "kind": "chain" listing ops with their inputs and constants, which is what
 *    the search's fusion agent writes when it joins neighbouring ops of model.json.
 * For the two captured forms the data flow is read from the reference capture wrote: straight-line
 * `v3 = torch.ops.aten.mul.Tensor(v1, v2)` lines, the only place that names which value feeds
 * which op (the "kiln" object lists the ops but not their operands). The reader accepts exactly
 * that generated form and declines anything else with the line it could not read. The chain form
 * carries the same calls as JSON. All three become one list of calls, then one SSA chain.
 *
 * Semantics: eager PyTorch, op by op. Each value has the dtype PyTorch's type promotion gives it
 * (dimensioned tensors outrank 0-d tensors, which outrank Python scalars; bf16 with fp16 is fp32),
 * is computed in fp32 and rounded to its dtype right away, as eager stores it between ops. Rounding
 * a bf16 intermediate costs two instructions and keeps the fused chain within an ulp of the
 * reference instead of drifting by the rounding eager did and we skipped. float64 and integer
 * tensors are declined (models do not use them in these chains).
 *
 * Shapes: the kernel iterates over the output's stored (memory-order) elements. Every input is
 * mapped onto the output's dims through the layouts capture recorded (a channels-last tensor is
 * stored NHWC and its reference permutes it back) and numpy broadcasting, which gives each input a
 * stride per output dim, 0 where it is broadcast. Output dims of size 1 are dropped and adjacent
 * dims that every operand walks contiguously are merged, so a same-shape chain is one flat dim and
 * a bias add is [rows, cols] with the bias at strides (0, 1). Index arithmetic only appears for the
 * dims that remain.
 *
 * Speed: the chain is memory-bound except for long transcendental chains, so the kernel is a
 * streaming copy with math in the middle: ELT_VEC elements per operand move as one or two 16-byte
 * accesses (when the innermost merged dim is contiguous or broadcast for every operand and, with
 * several dims, divisible by ELT_VEC), ELT_UNROLL vectors per thread are loaded before any math so
 * that enough bytes are in flight, loads and stores can carry evict-first / no-L1 hints (data
 * touched once), and the grid is either exact (one chunk per block) or persistent (k x 132 SMs).
 * ELT_FAST computes exp, sigmoid, SiLU and GELU-tanh through __expf and fast division: GELU-tanh
 * is x * sigmoid(2u), which needs no tanh at all; both stay within 1e-6 relative error, so they
 * are allowed for fp32 outputs too, and a tanh rounded to 16 bits right after may use the hardware
 * tanh. With bf16 SiLU·mul or GELU·mul at 4.25 TB/s an SM must finish ~3 elements per clock, which
 * libm's tanhf and IEEE division alone would use most of the issue slots for.
 *
 * The space: FAST x THREADS x HINT x GRID x UNROLL x VBYTES, the vector width given in bytes of
 * the widest operand (ELT_VEC = VBYTES / its element size) so that the first value of every domain
 * is the expert default for any dtype (16-byte accesses, 2 vectors per thread, 256 threads,
 * streaming hints, exact grid, FAST): point 0, which every even sample of the space (sweep --limit)
 * includes, is the kernel one would write by hand; the last parameters are the ones a sample
 * spreads. FAST 0 is declined for chains without an op it changes (the same source).
 *
 * The CPU emission is one OpenMP loop (two for broadcast rows) with the same chain, in C. */
#include "family.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

enum { P_FAST, P_THREADS, P_HINT, P_GRID, P_UNROLL, P_VBYTES, P_COUNT };

#define ELT_MAX_CALLS 48
#define ELT_MAX_ARGS 8
#define ELT_MAX_VALUES 96
#define ELT_MAX_OUT 4
#define ELT_MAX_IN 16
#define ELT_NAME 64
#define ELT_EXPR 256
/* Bytes of loads a thread may hold in flight (registers: ELT_MAX_INFLIGHT / 4). */
#define ELT_MAX_INFLIGHT 256
/* SMs of the H200 the persistent grid is sized for. */
#define ELT_SMS 132

extern const kiln_family kiln_family_eltwise;

/* ---- small helpers ---- */

static void fmt_into(char *out, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fmt_into(char *out, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, n, fmt, ap);
    va_end(ap);
}

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static int is16(kiln_dtype t) {
    return t == KILN_BF16 || t == KILN_F16;
}

static int dtype_ok(kiln_dtype t) {
    return t == KILN_F32 || is16(t);
}

static const char *cuda_type(kiln_dtype t) {
    return t == KILN_BF16 ? "__nv_bfloat16" : t == KILN_F16 ? "__half" : "float";
}

/* ---- calls: what the reference (or the chain JSON) says, before any meaning ---- */

typedef enum { A_NONE, A_NAME, A_NUM, A_BOOL, A_STR, A_LIST, A_OTHER } arg_kind;

typedef struct {
    arg_kind kind;
    char text[ELT_NAME]; /* names, strings, "torch.bfloat16" */
    double num;          /* numbers; bools as 0/1 */
} elt_arg;

typedef struct {
    char op[48];       /* aten op name: "add_", "_to_copy", "gelu" */
    char overload[32]; /* "Tensor", "default", ... */
    int n_args;
    elt_arg args[ELT_MAX_ARGS];
    int n_kw;
    char kw_name[ELT_MAX_ARGS][32];
    elt_arg kw[ELT_MAX_ARGS];
    char out[ELT_NAME]; /* the name bound to the result; "" when the result is not kept */
} elt_call;

typedef struct {
    int n_calls;
    elt_call calls[ELT_MAX_CALLS];
    int n_ret;
    char ret[ELT_MAX_OUT][ELT_NAME];
} elt_program;

static const char *skip_ws(const char *s) {
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

static int ident_char(char c) {
    return isalnum((unsigned char)c) || c == '_';
}

/* One Python literal or name of a generated reference; returns the text after it, or NULL. */
static const char *parse_arg(const char *s, elt_arg *a) {
    memset(a, 0, sizeof *a);
    s = skip_ws(s);
    if (*s == '[' || *s == '(') {
        int depth = 0;
        const char *start = s;
        do {
            if (*s == '[' || *s == '(')
                depth++;
            else if (*s == ']' || *s == ')')
                depth--;
            else if (!*s)
                return NULL;
            s++;
        } while (depth > 0);
        a->kind = A_LIST;
        fmt_into(a->text, sizeof a->text, "%.*s", (int)(s - start), start);
        return s;
    }
    if (*s == '\'' || *s == '"') {
        char q = *s++;
        const char *start = s;
        while (*s && *s != q)
            s++;
        if (!*s)
            return NULL;
        a->kind = A_STR;
        fmt_into(a->text, sizeof a->text, "%.*s", (int)(s - start), start);
        return s + 1;
    }
    if (strncmp(s, "float('", 7) == 0) {
        const char *v = s + 7;
        a->kind = A_NUM;
        a->num = strncmp(v, "inf'", 4) == 0    ? INFINITY
                 : strncmp(v, "-inf'", 5) == 0 ? -INFINITY
                 : strncmp(v, "nan'", 4) == 0  ? NAN
                                               : 0;
        const char *end = strstr(v, "')");
        return end ? end + 2 : NULL;
    }
    if (isdigit((unsigned char)*s) || *s == '-' || *s == '.') {
        char *end;
        a->num = strtod(s, &end);
        if (end == s)
            return NULL;
        a->kind = A_NUM;
        return end;
    }
    if (isalpha((unsigned char)*s) || *s == '_') {
        const char *start = s;
        while (ident_char(*s) || *s == '.')
            s++;
        fmt_into(a->text, sizeof a->text, "%.*s", (int)(s - start), start);
        if (strcmp(a->text, "True") == 0 || strcmp(a->text, "False") == 0) {
            a->kind = A_BOOL;
            a->num = a->text[0] == 'T';
        } else if (strcmp(a->text, "None") == 0) {
            a->kind = A_NONE;
        } else if (strncmp(a->text, "torch.", 6) == 0 || strcmp(a->text, "DEVICE") == 0) {
            a->kind = A_OTHER;
        } else {
            a->kind = A_NAME;
        }
        return s;
    }
    return NULL;
}

/* "torch.ops.aten.OP.OVERLOAD(ARGS)" into c; returns 0 and a reason on anything else. */
static int parse_call(const char *s, elt_call *c, char *why, size_t n) {
    if (strncmp(s, "torch.ops.aten.", 15) != 0) {
        snprintf(why, n, "not an aten call: %.80s", s);
        return 0;
    }
    s += 15;
    const char *dot = strchr(s, '.'), *paren = strchr(s, '(');
    if (!dot || !paren || dot > paren || dot - s >= (long)sizeof c->op ||
        paren - dot - 1 >= (long)sizeof c->overload) {
        snprintf(why, n, "unreadable aten call: %.80s", s);
        return 0;
    }
    fmt_into(c->op, sizeof c->op, "%.*s", (int)(dot - s), s);
    fmt_into(c->overload, sizeof c->overload, "%.*s", (int)(paren - dot - 1), dot + 1);
    s = skip_ws(paren + 1);
    while (*s && *s != ')') {
        const char *eq = s;
        while (ident_char(*eq))
            eq++;
        int is_kw = eq > s && *eq == '=' && eq[1] != '=';
        elt_arg a;
        const char *next = parse_arg(is_kw ? eq + 1 : s, &a);
        if (!next) {
            snprintf(why, n, "unreadable argument of aten::%s: %.60s", c->op, s);
            return 0;
        }
        if (is_kw) {
            if (c->n_kw == ELT_MAX_ARGS)
                return snprintf(why, n, "too many arguments"), 0;
            fmt_into(c->kw_name[c->n_kw], sizeof c->kw_name[0], "%.*s", (int)(eq - s), s);
            c->kw[c->n_kw++] = a;
        } else {
            if (c->n_args == ELT_MAX_ARGS)
                return snprintf(why, n, "too many arguments"), 0;
            c->args[c->n_args++] = a;
        }
        s = skip_ws(next);
        if (*s == ',')
            s = skip_ws(s + 1);
        else if (*s != ')') {
            snprintf(why, n, "unreadable argument list of aten::%s", c->op);
            return 0;
        }
    }
    return *s == ')' ? 1 : (snprintf(why, n, "unterminated aten::%s call", c->op), 0);
}

/* The returned names of `return a`, `return a.permute(0, 2, 3, 1)`, `return (a, b,)`. */
static int parse_return(const char *s, elt_program *pg, char *why, size_t n) {
    s = skip_ws(s);
    int tuple = *s == '(';
    if (tuple)
        s++;
    while (*s && *s != ')') {
        s = skip_ws(s);
        const char *start = s;
        while (ident_char(*s))
            s++;
        if (s == start || pg->n_ret == ELT_MAX_OUT) {
            snprintf(why, n, "unreadable return: %.60s", start);
            return 0;
        }
        fmt_into(pg->ret[pg->n_ret++], ELT_NAME, "%.*s", (int)(s - start), start);
        /* .permute(...) / .contiguous(): the stored memory order, which the layouts describe */
        while (*s == '.') {
            if (strncmp(s, ".permute(", 9) != 0 && strncmp(s, ".contiguous(", 12) != 0) {
                snprintf(why, n, "unreadable return: %.60s", start);
                return 0;
            }
            s = strchr(s, ')');
            if (!s)
                return snprintf(why, n, "unreadable return"), 0;
            s++;
        }
        if (*s == '[') {
            snprintf(why, n, "the reference returns an element of a tuple");
            return 0;
        }
        s = skip_ws(s);
        if (*s == ',')
            s++;
        s = skip_ws(s);
        if (!tuple)
            break;
    }
    return 1;
}

/* The straight-line run() body that capture writes (capture_problem.py: aten_reference and
 * module_reference): layout restores, `NAME = torch.ops.aten...(...)` lines, one return. */
static int program_from_reference(const char *ref, elt_program *pg, char *why, size_t n) {
    const char *def = ref ? strstr(ref, "def run(") : NULL;
    if (!def) {
        snprintf(why, n, "the reference has no run()");
        return 0;
    }
    const char *line = strchr(def, '\n');
    int returned = 0;
    while (line && *line) {
        line++;
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        char buf[1024];
        if (len >= sizeof buf) {
            snprintf(why, n, "reference line too long");
            return 0;
        }
        memcpy(buf, line, len);
        buf[len] = 0;
        line = eol;
        /* strip a comment (outside quotes) and trailing spaces */
        char q = 0;
        for (char *c = buf; *c; c++) {
            if (q) {
                if (*c == q)
                    q = 0;
            } else if (*c == '\'' || *c == '"') {
                q = *c;
            } else if (*c == '#') {
                *c = 0;
                break;
            }
        }
        size_t l = strlen(buf);
        while (l && isspace((unsigned char)buf[l - 1]))
            buf[--l] = 0;
        const char *s = skip_ws(buf);
        if (!*s)
            continue;
        if (s == buf) /* back at column 0: the end of run() */
            break;
        if (returned) {
            snprintf(why, n, "code after the return of run()");
            return 0;
        }
        if (strncmp(s, "return ", 7) == 0) {
            if (!parse_return(s + 7, pg, why, n))
                return 0;
            returned = 1;
            continue;
        }
        if (pg->n_calls == ELT_MAX_CALLS) {
            snprintf(why, n, "more than %d ops", ELT_MAX_CALLS);
            return 0;
        }
        elt_call *c = &pg->calls[pg->n_calls];
        memset(c, 0, sizeof *c);
        const char *rhs = s;
        const char *p = s;
        while (ident_char(*p))
            p++;
        const char *after = skip_ws(p);
        if (p > s && *after == '=' && after[1] != '=') {
            fmt_into(c->out, sizeof c->out, "%.*s", (int)(p - s), s);
            rhs = skip_ws(after + 1);
            size_t nl = (size_t)(p - s);
            if (strcmp(c->out, "DEVICE") == 0)
                continue;
            /* `x = x.permute(...)`, `x = x.clone()`: the layout restore of an input */
            if (strncmp(rhs, s, nl) == 0 && rhs[nl] == '.')
                continue;
        } else if (*after == ',' && p > s) {
            snprintf(why, n, "an op with several results: %.60s", s);
            return 0;
        }
        if (!parse_call(rhs, c, why, n))
            return 0;
        pg->n_calls++;
    }
    if (!returned) {
        snprintf(why, n, "run() has no return");
        return 0;
    }
    return 1;
}

/* A JSON value as a call argument: strings are value names unless they are torch constants (or,
 * as keyword values, plain strings such as approximate='tanh'). */
static int json_arg(const cJSON *v, int keyword, elt_arg *a) {
    memset(a, 0, sizeof *a);
    if (cJSON_IsString(v)) {
        fmt_into(a->text, sizeof a->text, "%s", v->valuestring);
        a->kind = strncmp(v->valuestring, "torch.", 6) == 0 ? A_OTHER : keyword ? A_STR : A_NAME;
    } else if (cJSON_IsBool(v)) {
        a->kind = A_BOOL;
        a->num = cJSON_IsTrue(v);
    } else if (cJSON_IsNumber(v)) {
        a->kind = A_NUM;
        a->num = v->valuedouble;
    } else if (cJSON_IsNull(v)) {
        a->kind = A_NONE;
    } else if (cJSON_IsArray(v)) {
        a->kind = A_LIST;
    } else {
        return 0;
    }
    return 1;
}

/* "kind": "chain": {"ops": [{"aten": "aten::silu.default" | "op": "silu", "args": [...],
 * "kwargs": {...}, "out": NAME}, ...], "outputs": [NAME, ...]} (docs/families/eltwise.md). */
static int program_from_chain(const kiln_problem *p, const cJSON *kiln, elt_program *pg, char *why,
                              size_t n) {
    const cJSON *ops = cJSON_GetObjectItemCaseSensitive(kiln, "ops");
    if (!cJSON_IsArray(ops) || cJSON_GetArraySize(ops) == 0) {
        snprintf(why, n, "chain: \"ops\" is not a non-empty list");
        return 0;
    }
    if (cJSON_GetArraySize(ops) > ELT_MAX_CALLS) {
        snprintf(why, n, "chain: more than %d ops", ELT_MAX_CALLS);
        return 0;
    }
    const cJSON *o;
    cJSON_ArrayForEach(o, ops) {
        elt_call *c = &pg->calls[pg->n_calls];
        memset(c, 0, sizeof *c);
        const cJSON *aten = cJSON_GetObjectItemCaseSensitive(o, "aten");
        const cJSON *op = cJSON_GetObjectItemCaseSensitive(o, "op");
        if (cJSON_IsString(aten)) {
            const char *l = aten->valuestring;
            if (strncmp(l, "aten::", 6) != 0) {
                snprintf(why, n, "chain op %d: '%.60s' is not an aten op", pg->n_calls, l);
                return 0;
            }
            const char *dot = strchr(l + 6, '.');
            fmt_into(c->op, sizeof c->op, "%.*s", dot ? (int)(dot - l - 6) : (int)strlen(l + 6),
                     l + 6);
            fmt_into(c->overload, sizeof c->overload, "%s", dot ? dot + 1 : "default");
        } else if (cJSON_IsString(op)) {
            fmt_into(c->op, sizeof c->op, "%s", op->valuestring);
            fmt_into(c->overload, sizeof c->overload, "default");
        } else {
            snprintf(why, n, "chain op %d names no \"aten\" or \"op\"", pg->n_calls);
            return 0;
        }
        const cJSON *a;
        cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(o, "args")) {
            if (c->n_args == ELT_MAX_ARGS || !json_arg(a, 0, &c->args[c->n_args++])) {
                snprintf(why, n, "chain op %d: unreadable args", pg->n_calls);
                return 0;
            }
        }
        cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(o, "kwargs")) {
            if (c->n_kw == ELT_MAX_ARGS || !json_arg(a, 1, &c->kw[c->n_kw])) {
                snprintf(why, n, "chain op %d: unreadable kwargs", pg->n_calls);
                return 0;
            }
            fmt_into(c->kw_name[c->n_kw++], sizeof c->kw_name[0], "%s", a->string);
        }
        const cJSON *out = cJSON_GetObjectItemCaseSensitive(o, "out");
        if (cJSON_IsString(out))
            fmt_into(c->out, sizeof c->out, "%s", out->valuestring);
        pg->n_calls++;
    }
    const cJSON *outs = cJSON_GetObjectItemCaseSensitive(kiln, "outputs");
    if (cJSON_IsArray(outs)) {
        cJSON_ArrayForEach(o, outs) {
            if (!cJSON_IsString(o) || pg->n_ret == ELT_MAX_OUT) {
                snprintf(why, n, "chain: \"outputs\" is not a list of value names");
                return 0;
            }
            fmt_into(pg->ret[pg->n_ret++], ELT_NAME, "%s", o->valuestring);
        }
    } else {
        for (int i = 0; i < p->n_outputs && i < ELT_MAX_OUT; i++)
            fmt_into(pg->ret[pg->n_ret++], ELT_NAME, "%s", p->outputs[i].name);
    }
    return 1;
}

/* ---- the chain: SSA values with dtypes ---- */

typedef enum { V_TENSOR, V_SCALAR, V_CONST, V_OP } v_kind;

/* The ops: code, name (as in the variant), and the fp32 expression: $a and $b are the operands,
 * $0 and $1 the op's constants (alpha, exponent, bounds, slope). */
#define ELT_OPS(X)                                                                                 \
    X(OP_ADD, "add", "$a + $0 * $b")                                                               \
    X(OP_SUB, "sub", "$a - $0 * $b")                                                               \
    X(OP_MUL, "mul", "$a * $b")                                                                    \
    X(OP_DIV, "div", "$a / $b")                                                                    \
    X(OP_NEG, "neg", "-$a")                                                                        \
    X(OP_ABS, "abs", "fabsf($a)")                                                                  \
    X(OP_EXP, "exp", "elt_exp($a)")                                                                \
    X(OP_LOG, "log", "logf($a)")                                                                   \
    X(OP_SQRT, "sqrt", "sqrtf($a)")                                                                \
    X(OP_RSQRT, "rsqrt", "elt_rsqrt($a)")                                                          \
    X(OP_RECIP, "reciprocal", "1.f / $a")                                                          \
    X(OP_SIGMOID, "sigmoid", "elt_sigmoid($a)")                                                    \
    X(OP_TANH, "tanh", "tanhf($a)")                                                                \
    X(OP_RELU, "relu", "elt_relu($a)")                                                             \
    X(OP_SILU, "silu", "elt_silu($a)")                                                             \
    X(OP_SQUARE, "square", "$a * $a")                                                              \
    X(OP_SIN, "sin", "sinf($a)")                                                                   \
    X(OP_COS, "cos", "cosf($a)")                                                                   \
    X(OP_ERF, "erf", "erff($a)")                                                                   \
    X(OP_GELU_ERF, "gelu", "elt_gelu_erf($a)")                                                     \
    X(OP_GELU_TANH, "gelu_tanh", "elt_gelu_tanh($a)")                                              \
    X(OP_POW_S, "pow", "powf($a, $0)")                                                             \
    X(OP_POW_T, "pow", "powf($a, $b)")                                                             \
    X(OP_CLAMP, "clamp", "elt_clamp($a, $0, $1)")                                                  \
    X(OP_LEAKY, "leaky_relu", "elt_leaky($a, $0)")                                                 \
    X(OP_MAX, "maximum", "elt_max($a, $b)")                                                        \
    X(OP_MIN, "minimum", "elt_min($a, $b)")                                                        \
    X(OP_CAST, "cast", "$a")

#define ELT_OP_CODE(code, name, expr) code,
typedef enum { ELT_OPS(ELT_OP_CODE) OP_COUNT } op_code;
#define ELT_OP_ROW(code, name, expr) [code] = {name, expr},
static const struct { const char *name, *expr; } OPS[] = {ELT_OPS(ELT_OP_ROW)};
/* OP_NEG .. OP_ERF take one tensor and nothing else: aten::<name>.default */
#define ELT_FIRST_UNARY OP_NEG
#define ELT_LAST_UNARY OP_ERF

/* Ops that ELT_FAST computes differently. */
static int op_is_fast(int op) {
    return op == OP_EXP || op == OP_SIGMOID || op == OP_SILU || op == OP_GELU_TANH || op == OP_TANH;
}

typedef struct {
    v_kind kind;
    int op;
    int a[2], n_a;
    double k[2];
    kiln_dtype dtype;
    int prio;  /* type promotion: 2 dimensioned tensor, 1 zero-dim tensor, 0 Python scalar */
    int input; /* problem input index (V_TENSOR, V_SCALAR) */
    double value;
    int live;
} elt_val;

typedef struct {
    int n;
    elt_val v[ELT_MAX_VALUES];
    int n_out;
    int out_val[ELT_MAX_OUT];
    int n_names;
    char names[ELT_MAX_VALUES + ELT_MAX_CALLS][ELT_NAME];
    int name_val[ELT_MAX_VALUES + ELT_MAX_CALLS];
} elt_chain;

static int chain_lookup(const elt_chain *ch, const char *name) {
    for (int i = ch->n_names - 1; i >= 0; i--) /* the latest binding wins (in-place ops) */
        if (strcmp(ch->names[i], name) == 0)
            return ch->name_val[i];
    return -1;
}

static void chain_bind(elt_chain *ch, const char *name, int v) {
    if (!name[0] || ch->n_names == ELT_MAX_VALUES + ELT_MAX_CALLS)
        return;
    fmt_into(ch->names[ch->n_names], ELT_NAME, "%s", name);
    ch->name_val[ch->n_names++] = v;
}

static int chain_add(elt_chain *ch, elt_val v) {
    if (ch->n == ELT_MAX_VALUES)
        return -1;
    ch->v[ch->n] = v;
    return ch->n++;
}

/* dtype names as capture writes them ("torch.bfloat16") or as a chain may ("bfloat16"). */
static int parse_dtype(const char *s, kiln_dtype *t) {
    if (strncmp(s, "torch.", 6) == 0)
        s += 6;
    if (strcmp(s, "float") == 0 || strcmp(s, "float32") == 0)
        *t = KILN_F32;
    else if (strcmp(s, "bfloat16") == 0)
        *t = KILN_BF16;
    else if (strcmp(s, "half") == 0 || strcmp(s, "float16") == 0)
        *t = KILN_F16;
    else if (kiln_dtype_parse(s, t) != 0)
        return -1;
    return 0;
}

/* 1 when name is one of the space-separated words of list. */
static int one_of(const char *name, const char *list) {
    size_t l = strlen(name);
    for (const char *s = list; l && (s = strstr(s, name)) != NULL; s += l)
        if ((s == list || s[-1] == ' ') && (s[l] == ' ' || !s[l]))
            return 1;
    return 0;
}

/* Positional argument i or keyword `name` of c; NULL when absent. */
static const elt_arg *call_arg(const elt_call *c, int i, const char *name) {
    if (i >= 0 && i < c->n_args)
        return &c->args[i];
    for (int k = 0; k < c->n_kw; k++)
        if (strcmp(c->kw_name[k], name) == 0)
            return &c->kw[k];
    return NULL;
}

/* The value of an operand argument: a bound name or a Python number. */
static int operand(elt_chain *ch, const elt_arg *a, char *why, size_t n) {
    if (!a) {
        snprintf(why, n, "a missing operand");
        return -1;
    }
    if (a->kind == A_NAME) {
        int v = chain_lookup(ch, a->text);
        if (v < 0)
            snprintf(why, n, "unknown value '%s'", a->text);
        return v;
    }
    if (a->kind == A_NUM || a->kind == A_BOOL) {
        elt_val c = {.kind = V_CONST, .dtype = KILN_F32, .prio = 0, .value = a->num};
        int v = chain_add(ch, c);
        if (v < 0)
            snprintf(why, n, "chain too long");
        return v;
    }
    snprintf(why, n, "operand '%s' is not a value or a number", a->text);
    return -1;
}

/* A number argument (alpha, exponents, bounds); dflt when absent; -1 on a non-number. */
static int number(const elt_call *c, int i, const char *name, double dflt, double *out) {
    const elt_arg *a = call_arg(c, i, name);
    if (!a || a->kind == A_NONE) {
        *out = dflt;
        return 0;
    }
    if (a->kind != A_NUM && a->kind != A_BOOL)
        return -1;
    *out = a->num;
    return 0;
}

/* The dtype of an op over operands ids[0..n) (PyTorch's result_type for floating operands). */
static kiln_dtype promote(const elt_chain *ch, const int *ids, int n, int *prio) {
    int best = 0;
    for (int i = 0; i < n; i++)
        best = ch->v[ids[i]].prio > best ? ch->v[ids[i]].prio : best;
    *prio = best;
    if (best == 0)
        return KILN_F32; /* only Python scalars: the default dtype */
    kiln_dtype t = KILN_DTYPE_COUNT;
    for (int i = 0; i < n; i++) {
        const elt_val *v = &ch->v[ids[i]];
        if (v->prio != best)
            continue;
        if (t == KILN_DTYPE_COUNT || t == v->dtype)
            t = v->dtype;
        else
            t = KILN_F32; /* f32 with anything, or bf16 with fp16 */
    }
    return t;
}

/* One call into the chain; returns 0 with a reason when the op is not pointwise or not handled. */
static int add_call(elt_chain *ch, const elt_call *c, char *why, size_t n) {
    char name[48];
    fmt_into(name, sizeof name, "%s", c->op);
    size_t l = strlen(name);
    if (l > 1 && name[l - 1] == '_' && name[0] != '_')
        name[l - 1] = 0; /* in-place variant: the same value */
    const int binary = one_of(name, "add sub rsub mul div true_divide maximum minimum") ||
                       (!strcmp(name, "pow") && !strcmp(c->overload, "Tensor_Tensor"));
    const int cast = one_of(name, "to _to_copy type_as contiguous clone alias detach");
    const int clamp = one_of(name, "clamp clamp_min clamp_max hardtanh relu6");
    int unary = ELT_FIRST_UNARY;
    while (unary <= ELT_LAST_UNARY && strcmp(name, OPS[unary].name))
        unary++;
    if (!binary && !cast && !clamp && unary > ELT_LAST_UNARY &&
        !one_of(name, "pow gelu leaky_relu"))
        return snprintf(why, n, "aten::%s.%s is not a pointwise op eltwise handles", c->op,
                        c->overload),
               0;
    elt_val r = {.kind = V_OP, .n_a = 1, .k = {1, 0}};
    int a = operand(ch, call_arg(c, 0, "self"), why, n);
    if (a < 0)
        return 0;
    r.a[0] = a;
    int bad = 0;
    if (binary) {
        int b = operand(ch, call_arg(c, 1, strcmp(name, "pow") ? "other" : "exponent"), why, n);
        if (b < 0)
            return 0;
        r.n_a = 2;
        r.a[1] = b;
        r.op = !strcmp(name, "mul")       ? OP_MUL
               : !strcmp(name, "pow")     ? OP_POW_T
               : !strcmp(name, "maximum") ? OP_MAX
               : !strcmp(name, "minimum") ? OP_MIN
               : name[0] == 'a'           ? OP_ADD
               : one_of(name, "sub rsub") ? OP_SUB
                                          : OP_DIV;
        if (r.op == OP_ADD || r.op == OP_SUB)
            bad = number(c, 2, "alpha", 1, &r.k[0]) < 0;
        if (name[0] == 'r') { /* rsub(self, other, alpha) = other - alpha * self */
            r.a[0] = b;
            r.a[1] = a;
        }
        const elt_arg *mode = r.op == OP_DIV ? call_arg(c, 2, "rounding_mode") : NULL;
        if (mode && mode->kind != A_NONE)
            return snprintf(why, n, "aten::%s with a rounding mode", c->op), 0;
    } else if (!strcmp(name, "pow")) {
        r.op = OP_POW_S;
        bad = number(c, 1, "exponent", 1, &r.k[0]) < 0;
    } else if (!strcmp(name, "gelu")) {
        const elt_arg *ap = call_arg(c, 1, "approximate");
        int tanh_form = ap && ap->kind == A_STR && !strcmp(ap->text, "tanh");
        if (ap && ap->kind == A_STR && !tanh_form && strcmp(ap->text, "none"))
            return snprintf(why, n, "aten::gelu approximate='%s'", ap->text), 0;
        r.op = tanh_form ? OP_GELU_TANH : OP_GELU_ERF;
    } else if (clamp) {
        /* absent bounds are infinite; clamp_max's bound is its first argument */
        int is_max = !strcmp(name, "clamp_max"), hard = !strcmp(name, "hardtanh");
        r.op = OP_CLAMP;
        r.k[0] = !strcmp(name, "relu6") ? 0 : -INFINITY;
        r.k[1] = !strcmp(name, "relu6") ? 6 : INFINITY;
        bad |= (hard || !strcmp(name, "clamp") || !strcmp(name, "clamp_min")) &&
               number(c, 1, hard ? "min_val" : "min", hard ? -1 : -INFINITY, &r.k[0]) < 0;
        bad |=
            (hard || !strcmp(name, "clamp") || is_max) &&
            number(c, is_max ? 1 : 2, hard ? "max_val" : "max", hard ? 1 : INFINITY, &r.k[1]) < 0;
    } else if (!strcmp(name, "leaky_relu")) {
        r.op = OP_LEAKY;
        bad = number(c, 1, "negative_slope", 0.01, &r.k[0]) < 0;
    } else if (cast) {
        kiln_dtype to = ch->v[a].dtype;
        const elt_arg *dt = NULL;
        if (!strcmp(name, "type_as") || (!strcmp(name, "to") && !strcmp(c->overload, "other"))) {
            int o = operand(ch, call_arg(c, 1, "other"), why, n);
            if (o < 0)
                return 0;
            to = ch->v[o].dtype;
        } else if (one_of(name, "to _to_copy")) {
            int at = strcmp(name, "to")               ? -1
                     : !strcmp(c->overload, "dtype")  ? 1
                     : !strcmp(c->overload, "device") ? 2
                                                      : -1;
            dt = call_arg(c, at, "dtype");
        }
        if (dt && dt->kind != A_NONE && (dt->kind != A_OTHER || parse_dtype(dt->text, &to) != 0))
            return snprintf(why, n, "aten::%s to an unreadable dtype '%s'", c->op, dt->text), 0;
        if (!dtype_ok(to))
            return snprintf(why, n, "aten::%s to %s (eltwise handles float32, bfloat16, float16)",
                            c->op, kiln_dtype_name(to)),
                   0;
        if (to == ch->v[a].dtype) { /* a copy: the same value */
            chain_bind(ch, c->out, a);
            return 1;
        }
        r.op = OP_CAST;
        r.dtype = to;
        r.prio = ch->v[a].prio;
    } else {
        r.op = unary;
    }
    if (bad)
        return snprintf(why, n, "aten::%s with a tensor where eltwise needs a number", c->op), 0;
    if (r.op != OP_CAST)
        r.dtype = promote(ch, r.a, r.n_a, &r.prio);
    int has_tensor = 0;
    for (int i = 0; i < r.n_a; i++)
        has_tensor |= ch->v[r.a[i]].kind == V_TENSOR || ch->v[r.a[i]].kind == V_OP;
    if (!has_tensor)
        return snprintf(why, n, "aten::%s on constants only", c->op), 0;
    int v = chain_add(ch, r);
    if (v < 0)
        return snprintf(why, n, "chain longer than %d values", ELT_MAX_VALUES), 0;
    chain_bind(ch, c->out, v);
    /* an in-place op also rebinds its first argument */
    const elt_arg *self = call_arg(c, 0, "self");
    if (l > 1 && c->op[l - 1] == '_' && c->op[0] != '_' && self && self->kind == A_NAME)
        chain_bind(ch, self->text, v);
    return 1;
}

/* ---- reading a problem: program, chain, shapes ---- */

typedef struct {
    int perm[KILN_MAX_DIMS];
} elt_perm;

typedef struct {
    int n_in;               /* tensor inputs the chain reads */
    int in_idx[ELT_MAX_IN]; /* their problem input index */
    int in_val[ELT_MAX_IN]; /* their chain value */
    int D;                  /* merged output dims */
    char size[KILN_MAX_DIMS][ELT_EXPR];
    char stride[ELT_MAX_IN][KILN_MAX_DIMS][ELT_EXPR]; /* "0" where broadcast */
    int inner_bcast[ELT_MAX_IN];                      /* broadcast along the innermost merged dim */
    int inner_unit[ELT_MAX_IN];                       /* stride 1 along the innermost merged dim */
    char total[ELT_EXPR * 2];
    int64_t total_max, inner_gcd;
} elt_shape;

typedef struct {
    elt_chain ch;
    elt_shape sh;
    char how[128];
} elt_problem;

static int read_perm(const cJSON *kiln, const char *name, int ndim, int *perm) {
    for (int j = 0; j < ndim; j++)
        perm[j] = j;
    const cJSON *pm = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(kiln, "layouts"), name),
        "permute");
    if (!pm)
        return 0;
    if (!cJSON_IsArray(pm) || cJSON_GetArraySize(pm) != ndim)
        return -1;
    int seen = 0;
    for (int j = 0; j < ndim; j++) {
        const cJSON *v = cJSON_GetArrayItem(pm, j);
        if (!cJSON_IsNumber(v) || v->valueint < 0 || v->valueint >= ndim ||
            (seen >> v->valueint & 1))
            return -1;
        perm[j] = v->valueint;
        seen |= 1 << v->valueint;
    }
    return 0;
}

static void dim_expr(const kiln_problem *p, const kiln_tensor_spec *t, int d, char *out, size_t n) {
    if (t->axis[d] >= 0)
        fmt_into(out, n, "%s", p->axes[t->axis[d]].name);
    else
        fmt_into(out, n, "%lld", (long long)t->literal[d]);
}

/* Appends the size of stored dim d of t to the product in buf; 0 when it does not fit. */
static int append_dim(const kiln_problem *p, const kiln_tensor_spec *t, int d, char *buf) {
    char e[ELT_EXPR];
    dim_expr(p, t, d, e, sizeof e);
    size_t off = strlen(buf);
    int k = snprintf(buf + off, ELT_EXPR - off, "%s(%s)", off ? "*" : "", e);
    return k > 0 && (size_t)k < ELT_EXPR - off;
}

/* Stored dim d of t has size 1 in every workload. */
static int unit_dim(const kiln_problem *p, const kiln_tensor_spec *t, int d) {
    for (int w = 0; w < p->n_workloads; w++) {
        int64_t s[KILN_MAX_DIMS];
        kiln_tensor_shape(p, t, &p->workloads[w], s);
        if (s[d] != 1)
            return 0;
    }
    return 1;
}

/* Maps every read input onto the output's stored dims and merges what can be merged. */
static int analyse_shapes(const kiln_problem *p, const cJSON *kiln, elt_problem *ep, char *why,
                          size_t n) {
    elt_shape *sh = &ep->sh;
    const kiln_tensor_spec *y = &p->outputs[0];
    const int R = y->ndim;
    int operm[KILN_MAX_DIMS];
    if (read_perm(kiln, y->name, R, operm) < 0)
        return snprintf(why, n, "unreadable layout of %s", y->name), 0;
    for (int o = 1; o < p->n_outputs; o++) {
        int pm[KILN_MAX_DIMS];
        const kiln_tensor_spec *t = &p->outputs[o];
        int same = t->ndim == R && read_perm(kiln, t->name, R, pm) == 0;
        for (int d = 0; same && d < R; d++)
            same = pm[d] == operm[d];
        for (int w = 0; same && w < p->n_workloads; w++) {
            int64_t a[KILN_MAX_DIMS], b[KILN_MAX_DIMS];
            kiln_tensor_shape(p, y, &p->workloads[w], a);
            kiln_tensor_shape(p, t, &p->workloads[w], b);
            same = memcmp(a, b, sizeof(int64_t) * (size_t)R) == 0;
        }
        if (!same)
            return snprintf(why, n, "outputs %s and %s differ in shape or layout", y->name,
                            t->name),
                   0;
    }
    /* per input: stored dim -> logical dim, and the classification per output dim */
    enum { DENSE = 1, BCAST };
    int cls[ELT_MAX_IN][KILN_MAX_DIMS], pos[ELT_MAX_IN][KILN_MAX_DIMS];
    int keep[KILN_MAX_DIMS], n_keep = 0;
    for (int k = 0; k < R; k++)
        if (!unit_dim(p, y, k))
            keep[n_keep++] = k;
    for (int i = 0; i < sh->n_in; i++) {
        const kiln_tensor_spec *t = &p->inputs[sh->in_idx[i]];
        int pm[KILN_MAX_DIMS], used[KILN_MAX_DIMS] = {0};
        if (t->ndim > R)
            return snprintf(why, n, "input %s has more dims than the output", t->name), 0;
        if (read_perm(kiln, t->name, t->ndim, pm) < 0)
            return snprintf(why, n, "unreadable layout of %s", t->name), 0;
        for (int kk = 0; kk < n_keep; kk++) {
            int k = keep[kk];
            int l = operm[k] - (R - t->ndim); /* the input's logical dim (right-aligned) */
            cls[i][kk] = BCAST;
            pos[i][kk] = -1;
            if (l < 0)
                continue;
            int j = 0;
            while (pm[j] != l)
                j++;
            int dense = 1, bcast = 1;
            for (int w = 0; w < p->n_workloads; w++) {
                int64_t xs[KILN_MAX_DIMS], ys[KILN_MAX_DIMS];
                kiln_tensor_shape(p, t, &p->workloads[w], xs);
                kiln_tensor_shape(p, y, &p->workloads[w], ys);
                dense &= xs[j] == ys[k];
                bcast &= xs[j] == 1;
            }
            if (dense) {
                cls[i][kk] = DENSE;
                pos[i][kk] = j;
                used[j] = 1;
            } else if (!bcast) {
                return snprintf(why, n, "input %s does not broadcast to output %s", t->name,
                                y->name),
                       0;
            }
        }
        for (int j = 0; j < t->ndim; j++)
            if (!used[j] && !unit_dim(p, t, j))
                return snprintf(why, n, "input %s has a dim the output lacks", t->name), 0;
    }
    /* merge adjacent kept dims where every input is broadcast in both or walks them contiguously */
    int group_end[KILN_MAX_DIMS], G = 0; /* last kept index of each group */
    for (int kk = 0; kk < n_keep; kk++) {
        int merge = kk > 0;
        for (int i = 0; merge && i < sh->n_in; i++) {
            const kiln_tensor_spec *t = &p->inputs[sh->in_idx[i]];
            int a = cls[i][kk - 1], b = cls[i][kk];
            if (a == BCAST && b == BCAST)
                continue;
            if (a != DENSE || b != DENSE) {
                merge = 0;
                break;
            }
            int next = pos[i][kk - 1] + 1; /* the next stored dim that is not always 1 */
            while (next < t->ndim && unit_dim(p, t, next))
                next++;
            merge = next == pos[i][kk];
        }
        if (merge)
            group_end[G - 1] = kk;
        else
            group_end[G++] = kk;
    }
    sh->D = G ? G : 1;
    /* sizes and strides as expressions over the axes (strides: the input's stored dims after) */
    int fits = 1;
    for (int g = 0; g < G; g++) {
        for (int kk = g ? group_end[g - 1] + 1 : 0; kk <= group_end[g]; kk++)
            fits &= append_dim(p, y, keep[kk], sh->size[g]);
        for (int i = 0; i < sh->n_in; i++) {
            const kiln_tensor_spec *t = &p->inputs[sh->in_idx[i]];
            int kk = group_end[g];
            for (int j = pos[i][kk] + 1; cls[i][kk] == DENSE && j < t->ndim; j++)
                fits &= unit_dim(p, t, j) || append_dim(p, t, j, sh->stride[i][g]);
            if (!sh->stride[i][g][0])
                fmt_into(sh->stride[i][g], ELT_EXPR, "%s", cls[i][kk] == BCAST ? "0" : "1");
        }
    }
    if (!G) {
        fmt_into(sh->size[0], ELT_EXPR, "1");
        for (int i = 0; i < sh->n_in; i++)
            fmt_into(sh->stride[i][0], ELT_EXPR, "0");
    }
    for (int g = 0; g < sh->D; g++)
        fits &= strlen(sh->total) + strlen(sh->size[g]) + 2 < sizeof sh->total &&
                strcat(strcat(sh->total, g ? "*" : ""), sh->size[g]);
    if (!fits)
        return snprintf(why, n, "shape expressions too long"), 0;
    for (int i = 0; i < sh->n_in; i++) {
        sh->inner_bcast[i] = strcmp(sh->stride[i][sh->D - 1], "0") == 0;
        sh->inner_unit[i] = strcmp(sh->stride[i][sh->D - 1], "1") == 0;
    }
    /* numbers over the workloads: the largest output and what divides every innermost dim */
    sh->total_max = 0;
    sh->inner_gcd = 0;
    for (int w = 0; w < p->n_workloads; w++) {
        int64_t ys[KILN_MAX_DIMS];
        int64_t total = kiln_tensor_shape(p, y, &p->workloads[w], ys);
        int64_t inner = 1;
        if (G) {
            int first = G > 1 ? group_end[G - 2] + 1 : 0;
            for (int kk = first; kk <= group_end[G - 1]; kk++)
                inner *= ys[keep[kk]];
        }
        sh->total_max = total > sh->total_max ? total : sh->total_max;
        sh->inner_gcd = gcd64(sh->inner_gcd, inner);
    }
    return 1;
}

/* Reads everything the family needs from p; returns 0 with a reason when p is not an eltwise
 * chain. */
static int elt_read(const kiln_problem *p, elt_problem *ep, char *why, size_t n) {
    memset(ep, 0, sizeof *ep);
    cJSON *kiln = kiln_problem_read_kiln(p);
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(kiln, "kind");
    elt_program *pg = xcalloc(1, sizeof *pg);
    int ok = 0;
    if (!kiln && p->op_type && p->n_outputs == 1) {
        /* hand-written, no "kiln": an op_type that names one op applies it to the inputs in order
         */
        elt_call *c = &pg->calls[pg->n_calls++];
        memset(c, 0, sizeof *c);
        fmt_into(c->op, sizeof c->op, "%s", p->op_type);
        fmt_into(c->overload, sizeof c->overload, "default");
        fmt_into(c->out, sizeof c->out, "%s", p->outputs[0].name);
        for (int i = 0; i < p->n_inputs && c->n_args < ELT_MAX_ARGS; i++) {
            c->args[c->n_args].kind = A_NAME;
            fmt_into(c->args[c->n_args++].text, ELT_NAME, "%s", p->inputs[i].name);
        }
        fmt_into(pg->ret[pg->n_ret++], ELT_NAME, "%s", p->outputs[0].name);
        fmt_into(ep->how, sizeof ep->how, "op_type");
        ok = 1;
    } else if (!kiln || !cJSON_IsString(kind)) {
        snprintf(why, n,
                 "no \"kiln\" object: eltwise reads a captured aten call, a module or a "
                 "\"chain\"");
    } else if (!strcmp(kind->valuestring, "aten") || !strcmp(kind->valuestring, "module")) {
        ok = program_from_reference(p->reference, pg, why, n);
        /* the reference must be the op(s) the capture names */
        const cJSON *aten = cJSON_GetObjectItemCaseSensitive(kiln, "aten");
        const cJSON *ops = cJSON_GetObjectItemCaseSensitive(kiln, "aten_ops");
        for (int i = 0; ok && i < pg->n_calls; i++) {
            char label[96];
            fmt_into(label, sizeof label, "aten::%s.%s", pg->calls[i].op, pg->calls[i].overload);
            const cJSON *want = !strcmp(kind->valuestring, "aten")
                                    ? (pg->n_calls == 1 ? aten : NULL)
                                    : cJSON_GetArrayItem(ops, i);
            if (!cJSON_IsString(want) || strcmp(want->valuestring, label)) {
                snprintf(why, n, "the reference's op %d (%s) is not the captured %s", i, label,
                         cJSON_IsString(want) ? want->valuestring : "op list");
                ok = 0;
            }
        }
        if (ok && !strcmp(kind->valuestring, "module") && cJSON_GetArraySize(ops) != pg->n_calls) {
            snprintf(why, n, "the module reference has %d ops, aten_ops %d", pg->n_calls,
                     cJSON_GetArraySize(ops));
            ok = 0;
        }
        fmt_into(ep->how, sizeof ep->how, "%s", kind->valuestring);
    } else if (!strcmp(kind->valuestring, "chain")) {
        ok = program_from_chain(p, kiln, pg, why, n);
        fmt_into(ep->how, sizeof ep->how, "chain");
    } else {
        snprintf(why, n, "a \"%s\" problem is not a pointwise chain", kind->valuestring);
    }
    elt_chain *ch = &ep->ch;
    /* the inputs: tensors and by-value scalars */
    for (int i = 0; ok && i < p->n_inputs; i++) {
        const kiln_tensor_spec *t = &p->inputs[i];
        elt_val v = {.kind = t->is_scalar ? V_SCALAR : V_TENSOR,
                     .dtype = t->dtype,
                     .prio = t->is_scalar  ? 0
                             : t->ndim > 0 ? 2
                                           : 1,
                     .input = i};
        if (!t->is_scalar && !dtype_ok(t->dtype)) {
            snprintf(why, n, "input %s is %s (eltwise handles float32, bfloat16, float16)", t->name,
                     kiln_dtype_name(t->dtype));
            ok = 0;
        } else if (t->is_scalar && !kiln_dtype_is_float(t->dtype) && t->dtype != KILN_I64 &&
                   t->dtype != KILN_I32) {
            snprintf(why, n, "scalar input %s is %s", t->name, kiln_dtype_name(t->dtype));
            ok = 0;
        } else {
            chain_bind(ch, t->name, chain_add(ch, v));
        }
    }
    for (int i = 0; ok && i < pg->n_calls; i++)
        ok = add_call(ch, &pg->calls[i], why, n);
    if (!ok && !strcmp(ep->how, "op_type")) {
        char inner[200];
        fmt_into(inner, sizeof inner, "%s", why);
        fmt_into(why, n, "no \"kiln\" object, and op_type '%s' is no chain: %s", p->op_type, inner);
    }
    /* outputs */
    if (ok && pg->n_ret != p->n_outputs) {
        snprintf(why, n, "the chain returns %d values, the problem has %d outputs", pg->n_ret,
                 p->n_outputs);
        ok = 0;
    }
    for (int o = 0; ok && o < pg->n_ret; o++) {
        int v = chain_lookup(ch, pg->ret[o]);
        if (v < 0) {
            snprintf(why, n, "returned value '%s' is not computed", pg->ret[o]);
            ok = 0;
        } else if (ch->v[v].kind != V_TENSOR && ch->v[v].kind != V_OP) {
            snprintf(why, n, "returned value '%s' is not a tensor", pg->ret[o]);
            ok = 0;
        } else if (ch->v[v].dtype != p->outputs[o].dtype) {
            snprintf(why, n, "the chain makes %s %s, output %s is %s", pg->ret[o],
                     kiln_dtype_name(ch->v[v].dtype), p->outputs[o].name,
                     kiln_dtype_name(p->outputs[o].dtype));
            ok = 0;
        } else if (!dtype_ok(p->outputs[o].dtype)) {
            snprintf(why, n, "output %s is %s", p->outputs[o].name,
                     kiln_dtype_name(p->outputs[o].dtype));
            ok = 0;
        }
        ch->out_val[ch->n_out++] = v;
    }
    free(pg);
    /* what the outputs depend on */
    for (int o = 0; ok && o < ch->n_out; o++)
        ch->v[ch->out_val[o]].live = 1;
    for (int v = ch->n - 1; ok && v >= 0; v--)
        if (ch->v[v].live && ch->v[v].kind == V_OP)
            for (int k = 0; k < ch->v[v].n_a; k++)
                ch->v[ch->v[v].a[k]].live = 1;
    elt_shape *sh = &ep->sh;
    for (int v = 0; ok && v < ch->n; v++)
        if (ch->v[v].live && ch->v[v].kind == V_TENSOR) {
            if (sh->n_in == ELT_MAX_IN) {
                snprintf(why, n, "more than %d input tensors", ELT_MAX_IN);
                ok = 0;
                break;
            }
            sh->in_idx[sh->n_in] = ch->v[v].input;
            sh->in_val[sh->n_in++] = v;
        }
    if (ok)
        ok = analyse_shapes(p, kiln, ep, why, n);
    cJSON_Delete(kiln);
    return ok;
}

/* ---- the match ---- */

static int elt_match(const kiln_problem *p, kiln_match *m, char *why, size_t why_len) {
    elt_problem *ep = xmalloc(sizeof *ep);
    if (!elt_read(p, ep, why, why_len)) {
        free(ep);
        return 0;
    }
    const elt_chain *ch = &ep->ch;
    const elt_shape *sh = &ep->sh;
    int n_ops = 0, fast = 0, vec_ok = 1;
    size_t max_es = 0, min_es = 16, in_bytes = 0;
    char ops[160] = "";
    size_t off = 0;
    for (int v = 0; v < ch->n; v++) {
        const elt_val *x = &ch->v[v];
        if (!x->live || x->kind != V_OP)
            continue;
        n_ops++;
        fast |= op_is_fast(x->op);
        if (off < sizeof ops - 24)
            off += (size_t)snprintf(ops + off, sizeof ops - off, "%s%s", off ? "_" : "",
                                    OPS[x->op].name);
    }
    for (int i = 0; i < sh->n_in; i++) {
        size_t es = kiln_dtype_size(p->inputs[sh->in_idx[i]].dtype);
        max_es = es > max_es ? es : max_es;
        min_es = es < min_es ? es : min_es;
        if (!sh->inner_bcast[i])
            in_bytes += es;
        vec_ok &= sh->inner_bcast[i] || sh->inner_unit[i];
    }
    for (int o = 0; o < p->n_outputs; o++) {
        size_t es = kiln_dtype_size(p->outputs[o].dtype);
        max_es = es > max_es ? es : max_es;
        min_es = es < min_es ? es : min_es;
    }
    fmt_into(m->variant, sizeof m->variant, "%s", n_ops ? ops : "copy");
    kiln_match_set(m, "n_ops", n_ops);
    kiln_match_set(m, "n_in", sh->n_in);
    kiln_match_set(m, "dims", sh->D);
    kiln_match_set(m, "vec_ok", vec_ok);
    kiln_match_set(m, "inner_gcd", (double)sh->inner_gcd);
    kiln_match_set(m, "total_max", (double)sh->total_max);
    kiln_match_set(m, "max_esize", (double)max_es);
    kiln_match_set(m, "in_bytes", (double)in_bytes);
    kiln_match_set(m, "fast_ops", fast);
    for (int i = 0; i < sh->n_in && i < 8; i++)
        m->input_of_role[i] = sh->in_idx[i];
    for (int o = 0; o < p->n_outputs && o < 4; o++)
        m->output_of_role[o] = o;
    fmt_into(m->rows_expr, sizeof m->rows_expr, "%s", sh->total);
    fmt_into(m->cols_expr, sizeof m->cols_expr, "%s", sh->size[sh->D - 1]);
    fmt_into(m->how, sizeof m->how, "%s: %d op(s) over %d input tensor(s), %d merged dim(s)%s",
             ep->how, n_ops, sh->n_in, sh->D, vec_ok ? "" : ", strided innermost");
    free(ep);
    return 1;
}

/* ---- constraints ---- */

static const char *elt_check(const kiln_problem *p, const kiln_match *m, const int64_t *pt) {
    (void)p;
    const int64_t max_es = (int64_t)kiln_match_get(m, "max_esize", 4);
    const int64_t threads = pt[P_THREADS], vec = pt[P_VBYTES] / max_es, unroll = pt[P_UNROLL];
    const int64_t grid = pt[P_GRID], fast = pt[P_FAST];
    const int64_t in_bytes = (int64_t)kiln_match_get(m, "in_bytes", 4);
    const int64_t total = (int64_t)kiln_match_get(m, "total_max", 1);
    const int64_t inner_gcd = (int64_t)kiln_match_get(m, "inner_gcd", 1);
    const int dims = (int)kiln_match_get(m, "dims", 1);
    if (vec < 1)
        return "VBYTES is less than one element of the widest operand";
    if (vec > 1 && !kiln_match_get(m, "vec_ok", 0))
        return "an input is strided along the innermost dim: VBYTES must be one element";
    if (vec > 1 && dims > 1 && inner_gcd % vec)
        return "VEC must divide the innermost dim of every workload";
    if (unroll * vec * in_bytes > ELT_MAX_INFLIGHT)
        return "UNROLL*VEC input bytes in flight exceed the register budget";
    if (!fast && !kiln_match_get(m, "fast_ops", 0))
        return "FAST 0 is FAST 1 here: the chain has no exp, sigmoid, tanh, SiLU or GELU-tanh";
    const int64_t chunk = threads * unroll * vec;
    if (chunk > total && threads > 64)
        return "one block covers the whole output: THREADS beyond 64 only idle";
    if (grid > 0 && (total + chunk - 1) / chunk <= grid * ELT_SMS)
        return "a persistent grid larger than the work is the exact grid (GRID 0)";
    return NULL;
}

/* ---- emission ---- */

/* C for a constant in fp32 arithmetic (the wrapped Python number cast to the op's float type). */
static void const_expr(double v, char *out, size_t n) {
    if (isnan(v))
        fmt_into(out, n, "NAN");
    else if (isinf(v))
        fmt_into(out, n, "%sINFINITY", v < 0 ? "-" : "");
    else
        fmt_into(out, n, "(float)(%.17g)", v);
}

/* The right-hand side of value x with operands a and b: the table's expression, but the exponents
 * PyTorch's pow kernels special-case and the hardware tanh for a tanh stored in 16 bits. */
static void op_expr(const elt_val *x, const char *a, const char *b, char *out, size_t n) {
    const char *expr = OPS[x->op].expr;
    if (x->op == OP_TANH && is16(x->dtype))
        expr = "elt_tanh16($a)";
    if (x->op == OP_POW_S) {
        static const struct {
            double exponent;
            const char *expr;
        } special[] = {{2, "$a * $a"},   {3, "$a * $a * $a"},    {1, "$a"},
                       {0, "1.f"},       {0.5, "sqrtf($a)"},     {-0.5, "elt_rsqrt($a)"},
                       {-1, "1.f / $a"}, {-2, "1.f / ($a * $a)"}};
        for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
            if (x->k[0] == special[i].exponent)
                expr = special[i].expr;
    }
    char k[2][64];
    const_expr(x->k[0], k[0], sizeof k[0]);
    const_expr(x->k[1], k[1], sizeof k[1]);
    size_t off = 0;
    for (const char *e = expr; *e && off + 1 < n; e++) {
        const char *sub = NULL;
        if (e[0] == '$' && e[1])
            sub = e[1] == 'a' ? a : e[1] == 'b' ? b : e[1] == '0' ? k[0] : k[1];
        if (sub) {
            off += (size_t)snprintf(out + off, n - off, "%s", sub);
            off = off < n ? off : n - 1;
            e++;
        } else {
            out[off++] = *e;
        }
    }
    out[off] = 0;
}

/* Straight-line code computing every live op value from the lane's operands: the inputs are
 * already in `elt_v<id>` (or are scalars/constants), each op becomes `float elt_v<id> = ...;`
 * rounded to its dtype. */
static void emit_ops(kiln_strbuf *b, const kiln_problem *p, const elt_chain *ch, int cuda,
                     const char *indent) {
    int used[ELT_MAX_VALUES] = {0}; /* an operand of another live op */
    for (int v = 0; v < ch->n; v++)
        for (int k = 0; ch->v[v].live && ch->v[v].kind == V_OP && k < ch->v[v].n_a; k++)
            used[ch->v[v].a[k]] = 1;
    for (int v = 0; v < ch->n; v++) {
        const elt_val *x = &ch->v[v];
        if (!x->live || x->kind != V_OP)
            continue;
        char ops[2][96];
        for (int k = 0; k < x->n_a; k++) {
            const elt_val *o = &ch->v[x->a[k]];
            if (o->kind == V_CONST)
                const_expr(o->value, ops[k], sizeof ops[k]);
            else if (o->kind == V_SCALAR)
                fmt_into(ops[k], sizeof ops[k], "(float)%s%s", cuda ? "sc_" : "",
                         p->inputs[o->input].name);
            else
                fmt_into(ops[k], sizeof ops[k], "elt_v%d", x->a[k]);
        }
        char rhs[512];
        op_expr(x, ops[0], x->n_a > 1 ? ops[1] : "", rhs, sizeof rhs);
        /* an output that feeds nothing else is rounded once, by its store */
        const char *round = !used[v]                ? ""
                            : x->dtype == KILN_BF16 ? "elt_rbf"
                            : x->dtype == KILN_F16  ? "elt_rhf"
                                                    : "";
        kiln_strbuf_printf(b, "%sconst float elt_v%d = %s(%s);\n", indent, v, round, rhs);
    }
}

static char *entry_prototype(const kiln_problem *p, int cuda, int64_t threads) {
    kiln_signature sig;
    kiln_abi_signature(p, 0, cuda, &sig);
    char *proto = kiln_abi_prototype(&sig, "elt_kernel", cuda);
    if (!cuda)
        return proto;
    char *at = strstr(proto, "void elt_kernel(");
    KILN_ASSERT(at);
    *at = 0;
    char *s = xasprintf("%svoid __launch_bounds__(%lld) %s", proto, (long long)threads,
                        at + strlen("void "));
    free(proto);
    return s;
}

/* A stride that needs a variable: not broadcast (0) and not contiguous (1). */
static int stride_var(const char *stride) {
    return strcmp(stride, "0") && strcmp(stride, "1");
}

/* Offsets `elt_o<i>` of every read input for element `e` in `idx` arithmetic: coordinates over
 * the merged dims (none to compute for one dim), then one multiply-add per dim an input walks. */
static void emit_offsets(kiln_strbuf *b, const elt_shape *sh, const char *idx, const char *indent) {
    if (sh->D == 1) {
        kiln_strbuf_printf(b, "%sconst %s elt_c0 = elt_e;\n", indent, idx);
    } else {
        kiln_strbuf_printf(b, "%s%s elt_t = elt_e;\n", indent, idx);
        for (int g = sh->D - 1; g > 0; g--)
            kiln_strbuf_printf(b, "%sconst %s elt_c%d = elt_t %% elt_n%d;\n%selt_t /= elt_n%d;\n",
                               indent, idx, g, g, indent, g);
        kiln_strbuf_printf(b, "%sconst %s elt_c0 = elt_t;\n", indent, idx);
    }
    for (int i = 0; i < sh->n_in; i++) {
        kiln_strbuf_printf(b, "%sconst %s elt_o%d = 0", indent, idx, i);
        for (int g = 0; g < sh->D; g++) {
            if (!strcmp(sh->stride[i][g], "1"))
                kiln_strbuf_printf(b, " + elt_c%d", g);
            else if (stride_var(sh->stride[i][g]))
                kiln_strbuf_printf(b, " + elt_c%d * elt_st%d_%d", g, i, g);
        }
        kiln_strbuf_printf(b, ";\n");
    }
    kiln_strbuf_printf(b, "%s(void)elt_c0;\n", indent);
}

static char *emit_cuda(const kiln_problem *p, const kiln_match *m, const int64_t *pt,
                       const elt_problem *ep) {
    const elt_chain *ch = &ep->ch;
    const elt_shape *sh = &ep->sh;
    const int64_t threads = pt[P_THREADS], unroll = pt[P_UNROLL], grid = pt[P_GRID];
    const int64_t vec = pt[P_VBYTES] / (int64_t)kiln_match_get(m, "max_esize", 4);
    KILN_ASSERT(vec >= 1); /* check() accepted the point */
    const int idx64 = sh->total_max + threads * unroll * vec * 2 > ((int64_t)1 << 31);
    const char *idx = "elt_idx";
    kiln_strbuf b = {0};
    char *defs = kiln_family_defines(&kiln_family_eltwise, pt);
    kiln_strbuf_printf(
        &b, "%s#define ELT_VEC %lld\n#define ELT_IDX64 %d\n#define ELT_CHAIN_DEFINED 1\n", defs,
        (long long)vec, idx64);
    free(defs);
    if (grid == 0)
        kiln_strbuf_printf(&b, "// kiln: launch elt_kernel grid=ceil_div(%s,%lld) block=%lld\n",
                           sh->total, (long long)(threads * unroll * vec), (long long)threads);
    else
        kiln_strbuf_printf(
            &b, "// kiln: launch elt_kernel grid=min(%lld,ceil_div(%s,%lld)) block=%lld\n",
            (long long)(grid * ELT_SMS), sh->total, (long long)(threads * unroll * vec),
            (long long)threads);
    kiln_strbuf_printf(&b, "%s", kiln_family_template("eltwise.cu"));
    /* the chain */
    kiln_strbuf_printf(&b, "\nstruct elt_chain {\n");
    for (int i = 0; i < sh->n_in; i++) {
        kiln_dtype t = p->inputs[sh->in_idx[i]].dtype;
        kiln_strbuf_printf(&b, "    const %s *__restrict__ in%d;\n", cuda_type(t), i);
        if (sh->inner_bcast[i])
            kiln_strbuf_printf(&b, "    %s r%d[ELT_UNROLL];\n", cuda_type(t), i);
        else
            kiln_strbuf_printf(&b, "    elt_raw<ELT_VEC * %zu>::t r%d[ELT_UNROLL];\n",
                               kiln_dtype_size(t), i);
        for (int g = 0; g < sh->D; g++)
            if (stride_var(sh->stride[i][g]))
                kiln_strbuf_printf(&b, "    %s elt_st%d_%d;\n", idx, i, g);
    }
    for (int o = 0; o < p->n_outputs; o++)
        kiln_strbuf_printf(&b, "    %s *__restrict__ out%d;\n", cuda_type(p->outputs[o].dtype), o);
    for (int g = 1; g < sh->D; g++)
        kiln_strbuf_printf(&b, "    %s elt_n%d;\n", idx, g);
    for (int i = 0; i < p->n_inputs; i++)
        if (p->inputs[i].is_scalar)
            kiln_strbuf_printf(&b, "    float sc_%s;\n", p->inputs[i].name);
    /* load(u, e) */
    kiln_strbuf_printf(&b, "    __device__ __forceinline__ void load(int u, %s elt_e) {\n", idx);
    emit_offsets(&b, sh, idx, "        ");
    for (int i = 0; i < sh->n_in; i++) {
        kiln_dtype t = p->inputs[sh->in_idx[i]].dtype;
        if (sh->inner_bcast[i])
            kiln_strbuf_printf(&b, "        r%d[u] = elt_ldb(in%d + elt_o%d);\n", i, i, i);
        else
            kiln_strbuf_printf(&b, "        r%d[u] = elt_ld<ELT_VEC * %zu>(in%d + elt_o%d);\n", i,
                               kiln_dtype_size(t), i, i);
    }
    kiln_strbuf_printf(&b, "    }\n");
    /* compute_store(u, e) */
    kiln_strbuf_printf(&b, "    __device__ __forceinline__ void compute_store(int u, %s elt_e) {\n",
                       idx);
    for (int o = 0; o < p->n_outputs; o++)
        kiln_strbuf_printf(&b, "        elt_raw<ELT_VEC * %zu>::t w%d;\n",
                           kiln_dtype_size(p->outputs[o].dtype), o);
    kiln_strbuf_printf(&b, "#pragma unroll\n        for (int k = 0; k < ELT_VEC; k++) {\n");
    for (int i = 0; i < sh->n_in; i++) {
        kiln_dtype t = p->inputs[sh->in_idx[i]].dtype;
        if (sh->inner_bcast[i])
            kiln_strbuf_printf(&b, "            const float elt_v%d = elt_f(r%d[u]);\n",
                               sh->in_val[i], i);
        else
            kiln_strbuf_printf(&b,
                               "            const float elt_v%d = elt_f(reinterpret_cast<const %s "
                               "*>(&r%d[u])[k]);\n",
                               sh->in_val[i], cuda_type(t), i);
    }
    emit_ops(&b, p, ch, 1, "            ");
    for (int o = 0; o < p->n_outputs; o++)
        kiln_strbuf_printf(
            &b, "            reinterpret_cast<%s *>(&w%d)[k] = elt_to<%s>(elt_v%d);\n",
            cuda_type(p->outputs[o].dtype), o, cuda_type(p->outputs[o].dtype), ch->out_val[o]);
    kiln_strbuf_printf(&b, "        }\n");
    for (int o = 0; o < p->n_outputs; o++)
        kiln_strbuf_printf(&b, "        elt_st<ELT_VEC * %zu>(out%d + elt_e, w%d);\n",
                           kiln_dtype_size(p->outputs[o].dtype), o, o);
    kiln_strbuf_printf(&b, "    }\n");
    /* scalar(e): one element, the tail of a flat output */
    kiln_strbuf_printf(&b, "    __device__ __forceinline__ void scalar(%s elt_e) {\n", idx);
    emit_offsets(&b, sh, idx, "        ");
    for (int i = 0; i < sh->n_in; i++)
        kiln_strbuf_printf(&b, "        const float elt_v%d = elt_f(in%d[elt_o%d]);\n",
                           sh->in_val[i], i, i);
    emit_ops(&b, p, ch, 1, "        ");
    for (int o = 0; o < p->n_outputs; o++)
        kiln_strbuf_printf(&b, "        out%d[elt_e] = elt_to<%s>(elt_v%d);\n", o,
                           cuda_type(p->outputs[o].dtype), ch->out_val[o]);
    kiln_strbuf_printf(&b, "    }\n};\n\n");
    /* the entry point */
    char *proto = entry_prototype(p, 1, threads);
    kiln_strbuf_printf(&b, "%s {\n    elt_chain elt_obj;\n", proto);
    free(proto);
    for (int i = 0; i < sh->n_in; i++) {
        kiln_strbuf_printf(&b, "    elt_obj.in%d = %s;\n", i, p->inputs[sh->in_idx[i]].name);
        for (int g = 0; g < sh->D; g++)
            if (stride_var(sh->stride[i][g]))
                kiln_strbuf_printf(&b, "    elt_obj.elt_st%d_%d = (%s)(%s);\n", i, g, idx,
                                   sh->stride[i][g]);
    }
    for (int o = 0; o < p->n_outputs; o++)
        kiln_strbuf_printf(&b, "    elt_obj.out%d = %s;\n", o, p->outputs[o].name);
    for (int g = 1; g < sh->D; g++)
        kiln_strbuf_printf(&b, "    elt_obj.elt_n%d = (%s)(%s);\n", g, idx, sh->size[g]);
    for (int i = 0; i < p->n_inputs; i++)
        if (p->inputs[i].is_scalar)
            kiln_strbuf_printf(&b, "    elt_obj.sc_%s = (float)%s;\n", p->inputs[i].name,
                               p->inputs[i].name);
    kiln_strbuf_printf(&b, "    elt_drive(elt_obj, (%s)(%s));\n}\n", idx, sh->total);
    char *banner = kiln_family_banner(&kiln_family_eltwise, m, pt, b.s);
    char *src = xasprintf("%s%s", banner, b.s);
    free(banner);
    free(b.s);
    return src;
}

static const char *cpu_load(kiln_dtype t) {
    return t == KILN_BF16 ? "kiln_bf16_to_float" : t == KILN_F16 ? "kiln_f16_to_float" : "";
}
static const char *cpu_store(kiln_dtype t) {
    return t == KILN_BF16 ? "kiln_float_to_bf16" : t == KILN_F16 ? "kiln_float_to_f16" : "";
}

static char *emit_cpu(const kiln_problem *p, const kiln_match *m, const elt_problem *ep) {
    const elt_chain *ch = &ep->ch;
    const elt_shape *sh = &ep->sh;
    kiln_strbuf b = {0};
    kiln_strbuf_printf(&b, "// cpu: the GPU parameters do not apply\n%s",
                       kiln_family_template("eltwise_cpu.c"));
    char *proto = entry_prototype(p, 0, 0);
    kiln_strbuf_printf(&b, "\n// kiln: launch elt_kernel\n%s {\n", proto);
    free(proto);
    kiln_strbuf_printf(&b, "    const int64_t elt_total = %s;\n", sh->total);
    const char *ind;
    if (sh->D == 1) {
        kiln_strbuf_printf(
            &b, "#pragma omp parallel for simd schedule(static) if (elt_total > "
                "ELT_CPU_PAR_MIN)\n    for (int64_t elt_e = 0; elt_e < elt_total; elt_e++) {\n");
        for (int i = 0; i < sh->n_in; i++)
            kiln_strbuf_printf(&b, "        const int64_t elt_o%d = elt_e * (%s);\n", i,
                               sh->stride[i][0]);
        ind = "        ";
    } else {
        const int D = sh->D;
        for (int g = 0; g < D; g++)
            kiln_strbuf_printf(&b, "    const int64_t elt_n%d = %s;\n", g, sh->size[g]);
        for (int i = 0; i < sh->n_in; i++)
            for (int g = 0; g < D; g++)
                kiln_strbuf_printf(&b, "    const int64_t elt_st%d_%d = %s;\n", i, g,
                                   sh->stride[i][g]);
        kiln_strbuf_printf(
            &b,
            "#pragma omp parallel for schedule(static) if (elt_total > ELT_CPU_PAR_MIN)\n"
            "    for (int64_t elt_r = 0; elt_r < elt_total / elt_n%d; elt_r++) {\n"
            "        int64_t elt_t = elt_r;\n",
            D - 1);
        for (int g = D - 2; g > 0; g--)
            kiln_strbuf_printf(
                &b,
                "        const int64_t elt_c%d = elt_t %% elt_n%d;\n        elt_t /= elt_n%d;\n", g,
                g, g);
        kiln_strbuf_printf(&b, "        const int64_t elt_c0 = elt_t;\n");
        for (int i = 0; i < sh->n_in; i++) {
            kiln_strbuf_printf(&b, "        const int64_t elt_b%d = 0", i);
            for (int g = 0; g < D - 1; g++)
                kiln_strbuf_printf(&b, " + elt_c%d * elt_st%d_%d", g, i, g);
            kiln_strbuf_printf(&b, ";\n");
        }
        kiln_strbuf_printf(
            &b,
            "#pragma omp simd\n        for (int64_t elt_j = 0; elt_j < elt_n%d; elt_j++) "
            "{\n            const int64_t elt_e = elt_r * elt_n%d + elt_j;\n",
            D - 1, D - 1);
        for (int i = 0; i < sh->n_in; i++)
            kiln_strbuf_printf(
                &b, "            const int64_t elt_o%d = elt_b%d + elt_j * elt_st%d_%d;\n", i, i, i,
                D - 1);
        ind = "            ";
    }
    for (int i = 0; i < sh->n_in; i++) {
        const kiln_tensor_spec *t = &p->inputs[sh->in_idx[i]];
        kiln_strbuf_printf(&b, "%sconst float elt_v%d = %s(%s[elt_o%d]);\n", ind, sh->in_val[i],
                           cpu_load(t->dtype), t->name, i);
    }
    emit_ops(&b, p, ch, 0, ind);
    for (int o = 0; o < p->n_outputs; o++)
        kiln_strbuf_printf(&b, "%s%s[elt_e] = %s(elt_v%d);\n", ind, p->outputs[o].name,
                           cpu_store(p->outputs[o].dtype), ch->out_val[o]);
    if (sh->D > 1)
        kiln_strbuf_printf(&b, "        }\n");
    kiln_strbuf_printf(&b, "    }\n}\n");
    int64_t first[KILN_FAMILY_MAX_PARAMS];
    kiln_family_point(&kiln_family_eltwise, 0, first);
    char *banner = kiln_family_banner(&kiln_family_eltwise, m, first, b.s);
    char *src = xasprintf("%s%s", banner, b.s);
    free(banner);
    free(b.s);
    return src;
}

static char *elt_emit(const kiln_problem *p, const kiln_match *m, const int64_t *pt, int cuda) {
    elt_problem *ep = xmalloc(sizeof *ep);
    char why[256];
    int ok = elt_read(p, ep, why, sizeof why);
    KILN_ASSERT(ok); /* emit is only called on what match accepted */
    char *src = cuda ? emit_cuda(p, m, pt, ep) : emit_cpu(p, m, ep);
    free(ep);
    return src;
}

/* The inputs the chain reads (an operand of type_as is only looked at for its dtype) once, the
 * outputs written once. */
static double elt_min_bytes(const kiln_problem *p, const kiln_match *m, const kiln_workload *w) {
    if (p->min_bytes >= 0)
        return p->min_bytes;
    double bytes = 0;
    int64_t shape[KILN_MAX_DIMS];
    if (kiln_match_get(m, "n_in", 0) > 8) /* more inputs than roles: every input */
        return kiln_problem_min_bytes(p, w);
    for (int i = 0; i < 8 && m->input_of_role[i] >= 0; i++) {
        const kiln_tensor_spec *t = &p->inputs[m->input_of_role[i]];
        bytes += (double)kiln_tensor_shape(p, t, w, shape) * (double)kiln_dtype_size(t->dtype);
    }
    for (int o = 0; o < p->n_outputs; o++)
        bytes += (double)kiln_tensor_shape(p, &p->outputs[o], w, shape) *
                 (double)kiln_dtype_size(p->outputs[o].dtype);
    return bytes;
}

/* One flop per op and output element (a transcendental counts as one). */
static double elt_flops(const kiln_problem *p, const kiln_match *m, const kiln_workload *w) {
    int64_t shape[KILN_MAX_DIMS];
    return kiln_match_get(m, "n_ops", 1) * (double)kiln_tensor_shape(p, &p->outputs[0], w, shape);
}

static kiln_tolerance elt_tolerance(kiln_dtype t) {
    return kiln_tolerance_default(t);
}

const kiln_family kiln_family_eltwise = {
    .name = "eltwise",
    .summary = "fused chains of pointwise aten ops with broadcasting and casts, 16-byte vectors",
    .n_params = P_COUNT,
    .params =
        {
            /* first values: the expert default, which a sparse sample (sweep --limit) always
             * includes; the slow parameters (last) are the ones a sample spreads */
            [P_FAST] = {"ELT_FAST",
                        2,
                        {1, 0},
                        "1: exp/sigmoid/SiLU/GELU-tanh via __expf and fast division"},
            [P_THREADS] = {"ELT_THREADS", 5, {256, 512, 128, 1024, 64}, "threads per block"},
            [P_HINT] = {"ELT_HINT",
                        3,
                        {1, 2, 0},
                        "1 streaming (evict-first) loads/stores, 2 no-L1 loads with 256-byte L2 "
                        "prefetch, 0 plain"},
            [P_GRID] = {"ELT_GRID",
                        6,
                        {0, 4, 2, 8, 1, 16},
                        "0: one chunk per block; k: persistent grid-stride loop over k*132 blocks"},
            [P_UNROLL] = {"ELT_UNROLL", 4, {2, 4, 1, 8}, "vectors per thread, loads in flight"},
            [P_VBYTES] = {"ELT_VBYTES",
                          5,
                          {16, 32, 8, 4, 2},
                          "bytes per access of the widest operand (ELT_VEC = VBYTES / its "
                          "element size)"},
        },
    .match = elt_match,
    .check = elt_check,
    .emit = elt_emit,
    .min_bytes = elt_min_bytes,
    .flops = elt_flops,
    .tolerance = elt_tolerance,
};
