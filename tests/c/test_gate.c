/* test_gate.c: the gate's element checks (poison patterns, unwritten, NaN policy, kiln's and
 * SOL-ExecBench's tolerance, reference masking) and the SOL score. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "gate/gate_impl.h"

static const kiln_tolerance f32_tol = {.atol = 1e-5, .rtol = 1e-4, .rel_l2 = 1e-5};

/* The pattern every check below treats as poison. */
#define POISON_F32 0x7FA5A5A5u

static void test_outcome_names_round_trip(void **state) {
    (void)state;
    for (int o = 0; o < KILN_OUTCOME_COUNT; o++)
        assert_int_equal(kiln_outcome_parse(kiln_outcome_name((kiln_outcome)o)), o);
    assert_int_equal(kiln_outcome_parse("bogus"), -1);
}

static void test_poison_patterns_are_drawn_per_dtype(void **state) {
    (void)state;
    uint64_t rng = 42;
    kiln_dtype floats[] = {KILN_F32, KILN_F64, KILN_BF16, KILN_F16};
    for (size_t k = 0; k < sizeof floats / sizeof floats[0]; k++) {
        uint64_t seen[32];
        int distinct = 0;
        for (int i = 0; i < 32; i++) {
            uint64_t pattern = kiln_poison_draw(floats[k], kiln_gate_random(&rng));
            unsigned char buf[8];
            kiln_poison_fill(floats[k], buf, 1, pattern);
            assert_true(isnan(kiln_dtype_load(floats[k], buf, 0))); /* a NaN, never a number */
            int dup = 0;
            for (int j = 0; j < distinct; j++)
                dup |= seen[j] == pattern;
            if (!dup)
                seen[distinct++] = pattern;
        }
        /* drawn afresh: a candidate cannot know the next one (bf16 has 63 payloads x 2 signs) */
        assert_true(distinct >= 16);
    }
    /* integers: any bits; the check tells written from unwritten by the reference */
    assert_int_equal(kiln_poison_draw(KILN_I32, 0x1234), 0x1234);
}

static void test_float_poison_is_a_nan_arithmetic_never_makes(void **state) {
    (void)state;
    float f;
    kiln_poison_fill(KILN_F32, &f, 1, POISON_F32);
    assert_true(isnan(f));
    float g = f + 1.0f; /* arithmetic quiets a signalling NaN: the pattern changes */
    uint32_t bits;
    memcpy(&bits, &g, 4);
    assert_int_not_equal(bits, POISON_F32);
}

static void test_correct_output_passes(void **state) {
    (void)state;
    float ref[5] = {1, -2, 3.5f, 0, 1e-3f}, out[5];
    memcpy(out, ref, sizeof ref);
    out[2] += 1e-6f;
    kiln_check c;
    kiln_check_output(KILN_F32, out, ref, 5, POISON_F32, &f32_tol, &c);
    assert_int_equal(c.outcome, KILN_OUTCOME_OK);
    assert_true(c.max_abs_err > 0);
}

static void test_unwritten_element_is_found(void **state) {
    (void)state;
    float ref[4] = {1, 2, 3, 4}, out[4];
    memcpy(out, ref, sizeof ref);
    kiln_poison_fill(KILN_F32, &out[3], 1, POISON_F32);
    kiln_check c;
    kiln_check_output(KILN_F32, out, ref, 4, POISON_F32, &f32_tol, &c);
    assert_int_equal(c.outcome, KILN_OUTCOME_UNWRITTEN);
    assert_int_equal(c.n_unwritten, 1);
    assert_int_equal(c.first_unwritten, 3);
}

static void test_nan_where_reference_is_finite(void **state) {
    (void)state;
    float ref[3] = {1, 2, 3}, out[3] = {1, NAN, 3};
    kiln_check c;
    kiln_check_output(KILN_F32, out, ref, 3, POISON_F32, &f32_tol, &c);
    assert_int_equal(c.outcome, KILN_OUTCOME_NAN);
    assert_int_equal(c.nan_index, 1);
}

static void test_matching_infinities_and_nans_pass(void **state) {
    (void)state;
    float ref[3] = {INFINITY, NAN, -INFINITY}, out[3] = {INFINITY, NAN, -INFINITY};
    kiln_check c;
    kiln_check_output(KILN_F32, out, ref, 3, POISON_F32, &f32_tol, &c);
    assert_int_equal(c.outcome, KILN_OUTCOME_OK);
    out[2] = INFINITY; /* wrong sign */
    kiln_check_output(KILN_F32, out, ref, 3, POISON_F32, &f32_tol, &c);
    assert_int_equal(c.outcome, KILN_OUTCOME_NAN);
    assert_int_equal(c.nan_index, 2);
}

static void test_zeros_fail_on_small_reference(void **state) {
    (void)state;
    /* Every element is within atol of zero: only the relative L2 test catches an all-zero answer.
     */
    float ref[8], out[8] = {0};
    for (int i = 0; i < 8; i++)
        ref[i] = 1e-6f * (float)(i + 1);
    kiln_check c;
    kiln_check_output(KILN_F32, out, ref, 8, POISON_F32, &f32_tol, &c);
    assert_int_equal(c.n_bad, 0);
    assert_int_equal(c.outcome, KILN_OUTCOME_MISMATCH);
    assert_true(c.rel_l2_err > 0.99);
}

static void test_mismatch_reports_first_bad_element(void **state) {
    (void)state;
    float ref[4] = {1, 2, 3, 4}, out[4] = {1, 2, 3.5f, 5};
    kiln_check c;
    kiln_check_output(KILN_F32, out, ref, 4, POISON_F32, &f32_tol, &c);
    assert_int_equal(c.outcome, KILN_OUTCOME_MISMATCH);
    assert_int_equal(c.n_bad, 2);
    assert_int_equal(c.first_bad, 2);
    assert_float_equal(c.first_bad_value, 3.5, 1e-9);
    assert_float_equal(c.first_bad_expected, 3.0, 1e-9);
    assert_float_equal(c.max_abs_err, 1.0, 1e-9);
}

static void test_integer_outputs_tell_poison_by_the_reference(void **state) {
    (void)state;
    /* The poison is 9: element 2 still holds it, but so does the reference, so it is right either
     * way; element 1 holds it where the reference says 8: unwritten. */
    int32_t ref[3] = {7, 8, 9}, out[3] = {7, 9, 9};
    kiln_tolerance exact = {.atol = 0};
    kiln_check c;
    kiln_check_output(KILN_I32, out, ref, 3, 9, &exact, &c);
    assert_int_equal(c.outcome, KILN_OUTCOME_UNWRITTEN);
    assert_int_equal(c.n_unwritten, 1);
    assert_int_equal(c.first_unwritten, 1);
    out[1] = 8;
    kiln_check_output(KILN_I32, out, ref, 3, 9, &exact, &c);
    assert_int_equal(c.outcome, KILN_OUTCOME_OK);
    out[0] = 6;
    kiln_check_output(KILN_I32, out, ref, 3, 9, &exact, &c);
    assert_int_equal(c.outcome, KILN_OUTCOME_MISMATCH);
}

static void test_sol_execbench_rules(void **state) {
    (void)state;
    /* 100 elements, 1 of them far off: kiln's rule refuses it, SOL-ExecBench's matched ratio of
     * 0.99 accepts it, and its max_error_cap refuses it again when the error is over the cap. */
    float ref[100], out[100];
    for (int i = 0; i < 100; i++)
        ref[i] = out[i] = 1.0f + (float)i / 100;
    out[37] += 0.5f;
    kiln_check c;
    kiln_check_output(KILN_F32, out, ref, 100, POISON_F32, &f32_tol, &c);
    assert_int_equal(c.outcome, KILN_OUTCOME_MISMATCH);
    kiln_tolerance sol = {.atol = 1e-3, .rtol = 1e-3, .sol = 1, .matched_ratio = 0.99};
    kiln_check_output(KILN_F32, out, ref, 100, POISON_F32, &sol, &c);
    assert_int_equal(c.outcome, KILN_OUTCOME_OK);
    assert_float_equal(c.matched_ratio, 0.99, 1e-12);
    sol.error_cap = 0.25;
    kiln_check_output(KILN_F32, out, ref, 100, POISON_F32, &sol, &c);
    assert_int_equal(c.outcome, KILN_OUTCOME_MISMATCH);
    assert_int_equal(c.n_over_cap, 1);
    assert_int_equal(c.first_over_cap, 37);
    sol.error_cap = 0;
    out[38] += 0.5f; /* two bad of 100: under the ratio */
    kiln_check_output(KILN_F32, out, ref, 100, POISON_F32, &sol, &c);
    assert_int_equal(c.outcome, KILN_OUTCOME_MISMATCH);
}

static void test_masked_reference_checks_like_the_plain_one(void **state) {
    (void)state;
    /* The gate keeps references masked (XOR a keystream of a secret key); the check unmasks them as
     * it reads. Masked bytes decode to nonsense, so a candidate that copies them fails. */
    float ref[16], masked[16], out[16];
    uint64_t key = 0xfeedfacecafebeefull;
    for (int i = 0; i < 16; i++) {
        ref[i] = out[i] = (float)i * 0.25f - 1;
        uint32_t b;
        memcpy(&b, &ref[i], 4);
        b ^= (uint32_t)kiln_gate_keystream(key, (uint64_t)i);
        memcpy(&masked[i], &b, 4);
    }
    kiln_check_sum s;
    kiln_check c;
    kiln_check_sum_host(&s, out, masked, KILN_F32, 16, POISON_F32, key, &f32_tol);
    kiln_check_from_sum(&s, 16, &f32_tol, &c);
    assert_int_equal(c.outcome, KILN_OUTCOME_OK);
    kiln_check_sum_host(&s, masked, masked, KILN_F32, 16, POISON_F32, key, &f32_tol);
    kiln_check_from_sum(&s, 16, &f32_tol, &c);
    assert_int_not_equal(c.outcome, KILN_OUTCOME_OK);
}

static void test_bf16_rounding_is_within_default_tolerance(void **state) {
    (void)state;
    uint16_t ref[64], out[64];
    for (int i = 0; i < 64; i++) {
        float v = sinf((float)i) * 3.0f;
        ref[i] = kiln_f32_to_bf16(v);
        /* one unit in the last place off, as a different summation order gives */
        out[i] = (uint16_t)(ref[i] + (i % 3 == 0 ? 1 : 0));
    }
    kiln_tolerance tol = kiln_tolerance_default(KILN_BF16);
    kiln_check c;
    kiln_check_output(KILN_BF16, out, ref, 64, 0x7FA5, &tol, &c);
    assert_int_equal(c.outcome, KILN_OUTCOME_OK);
}

static void test_sol_score(void **state) {
    (void)state;
    assert_float_equal(kiln_sol_score(100, 10, 100), 0.5, 1e-12); /* as fast as eager */
    assert_float_equal(kiln_sol_score(10, 10, 100), 1.0, 1e-12);  /* speed of light */
    assert_float_equal(kiln_sol_score(5, 10, 100), 1.0, 1e-12);   /* clamped */
    assert_true(kiln_sol_score(1000, 10, 100) < 0.1);
    assert_true(kiln_sol_score(55, 10, 100) > 0.5);
    assert_float_equal(kiln_sol_score(50, 10, -1), -1, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outcome_names_round_trip),
        cmocka_unit_test(test_poison_patterns_are_drawn_per_dtype),
        cmocka_unit_test(test_float_poison_is_a_nan_arithmetic_never_makes),
        cmocka_unit_test(test_correct_output_passes),
        cmocka_unit_test(test_unwritten_element_is_found),
        cmocka_unit_test(test_nan_where_reference_is_finite),
        cmocka_unit_test(test_matching_infinities_and_nans_pass),
        cmocka_unit_test(test_zeros_fail_on_small_reference),
        cmocka_unit_test(test_mismatch_reports_first_bad_element),
        cmocka_unit_test(test_integer_outputs_tell_poison_by_the_reference),
        cmocka_unit_test(test_sol_execbench_rules),
        cmocka_unit_test(test_masked_reference_checks_like_the_plain_one),
        cmocka_unit_test(test_bf16_rounding_is_within_default_tolerance),
        cmocka_unit_test(test_sol_score),
    };
    return cmocka_run_group_tests_name("gate", tests, NULL, NULL);
}
