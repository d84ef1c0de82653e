/* test_expr.c: the axis expression evaluator: Python's arithmetic, overflow, errors with positions.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "formats/expr.h"

static const struct {
    const char *name;
    int64_t value;
} VARS[] = {{"M", 7}, {"hidden_size", 4096}, {"num_heads", 32}, {"zero", 0}, {"neg", -5}};

static int lookup(void *ctx, const char *name, size_t len, int64_t *value) {
    int *calls = ctx;
    if (calls)
        (*calls)++;
    for (size_t i = 0; i < sizeof VARS / sizeof VARS[0]; i++) {
        if (strlen(VARS[i].name) == len && memcmp(VARS[i].name, name, len) == 0) {
            *value = VARS[i].value;
            return 0;
        }
    }
    return -1;
}

static int64_t eval_ok(const char *e) {
    int64_t v = -12345;
    kiln_err err = {{0}};
    int rc = kiln_expr_eval(e, lookup, NULL, &v, &err);
    if (rc != KILN_OK)
        fail_msg("'%s' failed: %s", e, err.msg);
    return v;
}

/* Fails the test unless e is an error whose message contains want. */
static void eval_err(const char *e, const char *want) {
    int64_t v = -12345;
    kiln_err err = {{0}};
    int rc = kiln_expr_eval(e, lookup, NULL, &v, &err);
    if (rc == KILN_OK)
        fail_msg("'%s' evaluated to %lld, expected an error containing \"%s\"", e, (long long)v,
                 want);
    assert_int_equal(rc, KILN_ERR_INVALID);
    assert_true(v == -12345); /* out untouched on error */
    if (!strstr(err.msg, want))
        fail_msg("'%s': message \"%s\" lacks \"%s\"", e, err.msg, want);
}

static void test_arithmetic(void **state) {
    (void)state;
    assert_int_equal(eval_ok("42"), 42);
    assert_int_equal(eval_ok("  1 + 2 * 3 "), 7);
    assert_int_equal(eval_ok("(1 + 2) * 3"), 9);
    assert_int_equal(eval_ok("10 - 4 - 3"), 3);
    assert_int_equal(eval_ok("2 * 3 % 4"), 2);
    assert_int_equal(eval_ok("+-+3"), -3);
    assert_int_equal(eval_ok("--3"), 3);
    assert_int_equal(eval_ok("9223372036854775807"), INT64_MAX);
    assert_true(eval_ok("-9223372036854775807 - 1") == INT64_MIN);
}

/* Python: // and / floor, % has the sign of the divisor, ** binds tighter than unary minus and
 * associates to the right. */
static void test_python_semantics(void **state) {
    (void)state;
    assert_int_equal(eval_ok("7 // 2"), 3);
    assert_int_equal(eval_ok("7 / 2"), 3);
    assert_int_equal(eval_ok("-7 // 2"), -4);
    assert_int_equal(eval_ok("7 // -2"), -4);
    assert_int_equal(eval_ok("-7 // -2"), 3);
    assert_int_equal(eval_ok("-8 // 2"), -4);
    assert_int_equal(eval_ok("-7 % 3"), 2);
    assert_int_equal(eval_ok("7 % -3"), -2);
    assert_int_equal(eval_ok("-7 % -3"), -1);
    assert_int_equal(eval_ok("6 % 3"), 0);
    assert_int_equal(eval_ok("2 ** 3 ** 2"), 512);
    assert_int_equal(eval_ok("-2 ** 2"), -4);
    assert_int_equal(eval_ok("(-2) ** 3"), -8);
    assert_int_equal(eval_ok("2 ** -(-3)"), 8);
    assert_int_equal(eval_ok("0 ** 0"), 1);
    assert_int_equal(eval_ok("1 ** 4000000000000000000"), 1);
    assert_int_equal(eval_ok("(-1) ** 4000000000000000001"), -1);
    assert_int_equal(eval_ok("2 ** 62"), 1LL << 62);
    assert_int_equal(eval_ok("3 * 2 ** 2"), 12);
    assert_int_equal(eval_ok("(-9223372036854775807 - 1) % -1"), 0);
}

static void test_names_and_functions(void **state) {
    (void)state;
    assert_int_equal(eval_ok("hidden_size // num_heads"), 128);
    assert_int_equal(eval_ok("M*2+neg"), 9);
    assert_int_equal(eval_ok("ceil_div(M, 2)"), 4);
    assert_int_equal(eval_ok("ceil_div(8, 2)"), 4);
    assert_int_equal(eval_ok("ceil_div(-7, 2)"), -3);
    assert_int_equal(eval_ok("ceil_div(7, -2)"), -3);
    assert_int_equal(eval_ok("ceil_div(hidden_size, 256) * 256"), 4096);
    assert_int_equal(eval_ok("min(M, 3)"), 3);
    assert_int_equal(eval_ok("max (M , 3, 11, -2)"), 11);
    assert_int_equal(eval_ok("min(max(neg, 0), 1)"), 0);
    int calls = 0;
    int64_t v;
    assert_int_equal(kiln_expr_eval("M + M", lookup, &calls, &v, NULL), KILN_OK);
    assert_int_equal(v, 14);
    assert_int_equal(calls, 2);
    /* Without a lookup, names are unknown. */
    kiln_err err;
    assert_int_equal(kiln_expr_eval("M", NULL, NULL, &v, &err), KILN_ERR_INVALID);
    assert_non_null(strstr(err.msg, "unknown name 'M'"));
}

static void test_errors(void **state) {
    (void)state;
    eval_err("1 / 0", "division by zero");
    eval_err("M // zero", "division by zero");
    eval_err("1 % zero", "modulo by zero");
    eval_err("ceil_div(1, 0)", "by zero");
    eval_err("2 ** -1", "negative exponent");
    eval_err("9223372036854775807 + 1", "overflow");
    eval_err("-9223372036854775807 - 2", "overflow");
    eval_err("3037000500 * 3037000500", "overflow");
    eval_err("2 ** 63", "overflow");
    eval_err("10 ** 19", "overflow");
    eval_err("9223372036854775808", "out of range");
    eval_err("-(-9223372036854775807 - 1)", "overflow");
    eval_err("(-9223372036854775807 - 1) // -1", "overflow");
    eval_err("ceil_div(-9223372036854775807 - 1, -1)", "overflow");
    eval_err("", "column 1: unexpected end");
    eval_err("   ", "column 4");
    eval_err("1 +", "unexpected end");
    eval_err("1 + * 2", "column 5: unexpected '*'");
    eval_err("(1 + 2", "expected ')'");
    eval_err("1 + 2)", "column 6: unexpected ')'");
    eval_err("1 2", "column 3");
    eval_err("M hidden_size", "column 3");
    eval_err("nope + 1", "column 1: unknown name 'nope'");
    eval_err("M + nope", "column 5: unknown name 'nope'");
    eval_err("sqrt(4)", "unknown function 'sqrt'");
    eval_err("min(1)", "at least two");
    eval_err("min()", "needs arguments");
    eval_err("ceil_div(1, 2, 3)", "two arguments");
    eval_err("min(1, 2", "expected ',' or ')'");
    eval_err("1.5", "decimal integers");
    eval_err("0x10", "decimal integers");
    eval_err("12abc", "decimal integers");
    eval_err("M ^ 2", "unexpected '^'");
    eval_err("M \x01", "0x01");
    eval_err("a,b", "unknown name 'a'");
    eval_err("4 ,", "unexpected ','");
}

/* Hostile nesting is an error, not a stack overflow. */
static void test_deep_nesting(void **state) {
    (void)state;
    enum { N = 100000 };
    char *e = malloc(2 * N + 2);
    memset(e, '(', N);
    e[N] = '1';
    memset(e + N + 1, ')', N);
    e[2 * N + 1] = 0;
    eval_err(e, "nests too deeply");
    memset(e, '-', N);
    e[N] = '1';
    e[N + 1] = 0;
    eval_err(e, "nests too deeply");
    for (int i = 0; i < N / 3; i++)
        memcpy(e + 3 * i, "1**", 3);
    e[3 * (N / 3)] = '1';
    e[3 * (N / 3) + 1] = 0;
    eval_err(e, "nests too deeply");
    for (int i = 0; i < N / 4; i++)
        memcpy(e + 4 * i, "min(", 4);
    e[4 * (N / 4)] = 0;
    eval_err(e, "nests too deeply");
    /* Depth that real expressions reach is fine; a long flat chain is not nesting. */
    assert_int_equal(eval_ok("((((((((((((((((((((1))))))))))))))))))))"), 1);
    for (int i = 0; i < N / 2; i++)
        memcpy(e + 2 * i, "1+", 2);
    e[2 * (N / 2)] = '1';
    e[2 * (N / 2) + 1] = 0;
    assert_int_equal(eval_ok(e), N / 2 + 1);
    free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arithmetic),          cmocka_unit_test(test_python_semantics),
        cmocka_unit_test(test_names_and_functions), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_deep_nesting),
    };
    return cmocka_run_group_tests_name("expr", tests, NULL, NULL);
}
