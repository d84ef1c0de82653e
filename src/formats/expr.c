/* expr.c: a recursive-descent evaluator for the integer axis expressions of expr.h (Python
 * semantics). */
#include "expr.h"

#include <string.h>

/* Deep enough for any real expression, shallow enough that hostile input cannot exhaust the stack.
 */
#define EXPR_MAX_DEPTH 200

typedef struct {
    const char *src;
    size_t pos;
    kiln_expr_lookup lookup;
    void *ctx;
    kiln_err *err;
    int rc;
    int depth;
} parser;

static int fail_at(parser *ps, size_t pos, const char *what) {
    if (ps->rc == KILN_OK) {
        int n = (int)strlen(ps->src);
        kiln_errf(ps->err, KILN_ERR_INVALID, "expression '%.*s%s': column %zu: %s",
                  n > 200 ? 200 : n, ps->src, n > 200 ? "..." : "", pos + 1, what);
        ps->rc = KILN_ERR_INVALID;
    }
    return ps->rc;
}

static void skip_space(parser *ps) {
    while (ps->src[ps->pos] == ' ' || ps->src[ps->pos] == '\t' || ps->src[ps->pos] == '\n' ||
           ps->src[ps->pos] == '\r')
        ps->pos++;
}

/* Consumes tok (after spaces) when it is next and not the prefix of a longer operator. */
static int accept(parser *ps, const char *tok) {
    skip_space(ps);
    size_t n = strlen(tok);
    if (strncmp(ps->src + ps->pos, tok, n) != 0)
        return 0;
    if ((strcmp(tok, "*") == 0 && ps->src[ps->pos + 1] == '*') ||
        (strcmp(tok, "/") == 0 && ps->src[ps->pos + 1] == '/'))
        return 0;
    ps->pos += n;
    return 1;
}

static int is_name_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int is_name_char(char c) {
    return is_name_start(c) || (c >= '0' && c <= '9');
}

/* ---- arithmetic with Python semantics and overflow checks ---- */

static int floor_div(parser *ps, size_t at, int64_t a, int64_t b, int64_t *out) {
    if (b == 0)
        return fail_at(ps, at, "division by zero");
    if (b == -1) {
        if (a == INT64_MIN)
            return fail_at(ps, at, "integer overflow");
        *out = -a;
        return KILN_OK;
    }
    int64_t q = a / b, r = a % b;
    if (r != 0 && ((r < 0) != (b < 0)))
        q -= 1;
    *out = q;
    return KILN_OK;
}

static int py_mod(parser *ps, size_t at, int64_t a, int64_t b, int64_t *out) {
    if (b == 0)
        return fail_at(ps, at, "modulo by zero");
    if (b == -1) {
        *out = 0;
        return KILN_OK;
    }
    int64_t r = a % b;
    if (r != 0 && ((r < 0) != (b < 0)))
        r += b;
    *out = r;
    return KILN_OK;
}

static int ceil_div(parser *ps, size_t at, int64_t a, int64_t b, int64_t *out) {
    if (b == 0)
        return fail_at(ps, at, "ceil_div by zero");
    if (b == -1) {
        if (a == INT64_MIN)
            return fail_at(ps, at, "integer overflow");
        *out = -a;
        return KILN_OK;
    }
    int64_t q = a / b, r = a % b;
    if (r != 0 && ((r > 0) == (b > 0)))
        q += 1;
    *out = q;
    return KILN_OK;
}

static int int_pow(parser *ps, size_t at, int64_t base, int64_t e, int64_t *out) {
    if (e < 0)
        return fail_at(ps, at, "negative exponent (the result would not be an integer)");
    int64_t r = 1;
    while (e) {
        if ((e & 1) && __builtin_mul_overflow(r, base, &r))
            return fail_at(ps, at, "integer overflow");
        e >>= 1;
        /* Once base overflows, a later set bit of e would overflow r as well. */
        if (e && __builtin_mul_overflow(base, base, &base))
            return fail_at(ps, at, "integer overflow");
    }
    *out = r;
    return KILN_OK;
}

/* ---- grammar ---- */

static int parse_expr(parser *ps, int64_t *out);
static int parse_unary(parser *ps, int64_t *out);

static int parse_call(parser *ps, const char *name, size_t name_len, size_t at, int64_t *out) {
    int64_t args[16];
    int n = 0;
    if (accept(ps, ")"))
        return fail_at(ps, at, "a function needs arguments");
    do {
        if (n == 16)
            return fail_at(ps, ps->pos, "too many arguments");
        if (parse_expr(ps, &args[n++]) != KILN_OK)
            return ps->rc;
    } while (accept(ps, ","));
    skip_space(ps);
    if (!accept(ps, ")"))
        return fail_at(ps, ps->pos, "expected ',' or ')' in the argument list");
    if ((name_len == 3 && memcmp(name, "min", 3) == 0) ||
        (name_len == 3 && memcmp(name, "max", 3) == 0)) {
        if (n < 2)
            return fail_at(ps, at, "min and max need at least two arguments");
        int64_t v = args[0];
        for (int i = 1; i < n; i++)
            v = name[1] == 'i' ? (args[i] < v ? args[i] : v) : (args[i] > v ? args[i] : v);
        *out = v;
        return KILN_OK;
    }
    if (name_len == 8 && memcmp(name, "ceil_div", 8) == 0) {
        if (n != 2)
            return fail_at(ps, at, "ceil_div takes two arguments");
        return ceil_div(ps, at, args[0], args[1], out);
    }
    char msg[160];
    snprintf(msg, sizeof msg, "unknown function '%.*s' (known: min, max, ceil_div)",
             (int)(name_len > 64 ? 64 : name_len), name);
    return fail_at(ps, at, msg);
}

static int parse_atom(parser *ps, int64_t *out) {
    skip_space(ps);
    size_t at = ps->pos;
    char c = ps->src[at];
    if (c >= '0' && c <= '9') {
        int64_t v = 0;
        while (ps->src[ps->pos] >= '0' && ps->src[ps->pos] <= '9') {
            if (__builtin_mul_overflow(v, 10, &v) ||
                __builtin_add_overflow(v, ps->src[ps->pos] - '0', &v))
                return fail_at(ps, at, "integer literal out of range");
            ps->pos++;
        }
        if (is_name_char(ps->src[ps->pos]) || ps->src[ps->pos] == '.')
            return fail_at(ps, ps->pos, "only decimal integers are allowed");
        *out = v;
        return KILN_OK;
    }
    if (is_name_start(c)) {
        const char *name = ps->src + at;
        while (is_name_char(ps->src[ps->pos]))
            ps->pos++;
        size_t len = ps->pos - at;
        if (accept(ps, "("))
            return parse_call(ps, name, len, at, out);
        if (!ps->lookup || ps->lookup(ps->ctx, name, len, out) != 0) {
            char msg[160];
            snprintf(msg, sizeof msg, "unknown name '%.*s'", (int)(len > 64 ? 64 : len), name);
            return fail_at(ps, at, msg);
        }
        return KILN_OK;
    }
    if (c == '(') {
        ps->pos++;
        if (parse_expr(ps, out) != KILN_OK)
            return ps->rc;
        if (!accept(ps, ")"))
            return fail_at(ps, ps->pos, "expected ')'");
        return KILN_OK;
    }
    if (c == 0)
        return fail_at(ps, at, "unexpected end, expected a number, a name or '('");
    char msg[80];
    if (c > ' ' && c < 127)
        snprintf(msg, sizeof msg, "unexpected '%c', expected a number, a name or '('", c);
    else
        snprintf(msg, sizeof msg, "unexpected byte 0x%02x", (unsigned char)c);
    return fail_at(ps, at, msg);
}

/* power := atom ('**' unary)?  -- as in Python, -2**2 is -(2**2) and 2**-1 reaches the exponent. */
static int parse_power(parser *ps, int64_t *out) {
    if (parse_atom(ps, out) != KILN_OK)
        return ps->rc;
    skip_space(ps);
    size_t at = ps->pos;
    if (accept(ps, "**")) {
        int64_t e;
        if (parse_unary(ps, &e) != KILN_OK)
            return ps->rc;
        return int_pow(ps, at, *out, e, out);
    }
    return KILN_OK;
}

/* unary := ('+'|'-') unary | power. Every nesting (parentheses, arguments, signs, exponents) passes
 * through here, so this is where the depth is bounded. */
static int parse_unary(parser *ps, int64_t *out) {
    skip_space(ps);
    size_t at = ps->pos;
    if (++ps->depth > EXPR_MAX_DEPTH)
        return fail_at(ps, at, "expression nests too deeply");
    char c = ps->src[at];
    if (c == '+' || c == '-') {
        ps->pos++;
        if (parse_unary(ps, out) != KILN_OK)
            return ps->rc;
        ps->depth--;
        if (c == '-') {
            if (*out == INT64_MIN)
                return fail_at(ps, at, "integer overflow");
            *out = -*out;
        }
        return KILN_OK;
    }
    if (parse_power(ps, out) != KILN_OK)
        return ps->rc;
    ps->depth--;
    return KILN_OK;
}

static int parse_term(parser *ps, int64_t *out) {
    if (parse_unary(ps, out) != KILN_OK)
        return ps->rc;
    for (;;) {
        skip_space(ps);
        size_t at = ps->pos;
        int op;
        if (accept(ps, "//"))
            op = '/';
        else if (accept(ps, "/"))
            op = '/';
        else if (accept(ps, "*"))
            op = '*';
        else if (accept(ps, "%"))
            op = '%';
        else
            return KILN_OK;
        int64_t rhs;
        if (parse_unary(ps, &rhs) != KILN_OK)
            return ps->rc;
        if (op == '*') {
            if (__builtin_mul_overflow(*out, rhs, out))
                return fail_at(ps, at, "integer overflow");
        } else if (op == '/') {
            if (floor_div(ps, at, *out, rhs, out) != KILN_OK)
                return ps->rc;
        } else if (py_mod(ps, at, *out, rhs, out) != KILN_OK) {
            return ps->rc;
        }
    }
}

static int parse_expr(parser *ps, int64_t *out) {
    if (parse_term(ps, out) != KILN_OK)
        return ps->rc;
    for (;;) {
        skip_space(ps);
        size_t at = ps->pos;
        int op;
        if (accept(ps, "+"))
            op = '+';
        else if (accept(ps, "-"))
            op = '-';
        else
            return KILN_OK;
        int64_t rhs;
        if (parse_term(ps, &rhs) != KILN_OK)
            return ps->rc;
        int overflow = op == '+' ? __builtin_add_overflow(*out, rhs, out)
                                 : __builtin_sub_overflow(*out, rhs, out);
        if (overflow)
            return fail_at(ps, at, "integer overflow");
    }
}

int kiln_expr_eval(const char *expr, kiln_expr_lookup lookup, void *ctx, int64_t *out,
                   kiln_err *err) {
    KILN_ASSERT(expr && out);
    parser ps = {.src = expr, .lookup = lookup, .ctx = ctx, .err = err, .rc = KILN_OK};
    int64_t v = 0;
    if (parse_expr(&ps, &v) != KILN_OK)
        return ps.rc;
    skip_space(&ps);
    if (expr[ps.pos] != 0) {
        char c = expr[ps.pos];
        char msg[80];
        if (c > ' ' && c < 127)
            snprintf(msg, sizeof msg, "unexpected '%c' after the end of the expression", c);
        else
            snprintf(msg, sizeof msg, "unexpected byte 0x%02x", (unsigned char)c);
        return fail_at(&ps, ps.pos, msg);
    }
    *out = v;
    return KILN_OK;
}
