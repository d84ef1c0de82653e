/* test_gate.c: the gate's element checks (poison, unwritten, NaN policy, tolerance) and the SOL
 * score. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "gate/gate.h"

static const kiln_tolerance f32_tol = {1e-5, 1e-4, 1e-5};

static void test_outcome_names_round_trip(void **state) {
    (void)state;
    for (int o = 0; o < KILN_OUTCOME_COUNT; o++)
        assert_int_equal(kiln_outcome_parse(kiln_outcome_name((kiln_outcome)o)), o);
    assert_int_equal(kiln_outcome_parse("bogus"), -1);
}

static void test_poison_is_detected_per_dtype(void **state) {
    (void)state;
    kiln_dtype types[] = {KILN_F32, KILN_F64, KILN_BF16, KILN_F16, KILN_I32, KILN_I64, KILN_BOOL};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        unsigned char buf[64];
        kiln_poison_fill(types[k], buf, 4, 0);
        for (size_t i = 0; i < 4; i++)
            assert_true(kiln_poison_is(types[k], buf, i, 0));
        kiln_dtype_store(types[k], buf, 2, 1.0);
        assert_false(kiln_poison_is(types[k], buf, 2, 0));
    }
}

static void test_float_poison_is_a_nan_arithmetic_never_makes(void **state) {
    (void)state;
    float f;
    kiln_poison_fill(KILN_F32, &f, 1, 0);
    assert_true(isnan(f));
    float g = f + 1.0f; /* arithmetic quiets a signalling NaN: the pattern changes */
    assert_false(kiln_poison_is(KILN_F32, &g, 0, 0));
}

static void test_correct_output_passes(void **state) {
    (void)state;
    float ref[5] = {1, -2, 3.5f, 0, 1e-3f}, out[5];
    memcpy(out, ref, sizeof ref);
    out[2] += 1e-6f;
    kiln_check c;
    kiln_check_output(KILN_F32, out, ref, 5, NULL, &f32_tol, &c);
    assert_int_equal(c.outcome, KILN_OUTCOME_OK);
    assert_true(c.max_abs_err > 0);
}

static void test_unwritten_element_is_found(void **state) {
    (void)state;
    float ref[4] = {1, 2, 3, 4}, out[4];
    memcpy(out, ref, sizeof ref);
    kiln_poison_fill(KILN_F32, &out[3], 1, 0);
    kiln_check c;
    kiln_check_output(KILN_F32, out, ref, 4, NULL, &f32_tol, &c);
    assert_int_equal(c.outcome, KILN_OUTCOME_UNWRITTEN);
    assert_int_equal(c.n_unwritten, 1);
    assert_int_equal(c.first_unwritten, 3);
}

static void test_nan_where_reference_is_finite(void **state) {
    (void)state;
    float ref[3] = {1, 2, 3}, out[3] = {1, NAN, 3};
    kiln_check c;
    kiln_check_output(KILN_F32, out, ref, 3, NULL, &f32_tol, &c);
    assert_int_equal(c.outcome, KILN_OUTCOME_NAN);
    assert_int_equal(c.nan_index, 1);
}

static void test_matching_infinities_and_nans_pass(void **state) {
    (void)state;
    float ref[3] = {INFINITY, NAN, -INFINITY}, out[3] = {INFINITY, NAN, -INFINITY};
    kiln_check c;
    kiln_check_output(KILN_F32, out, ref, 3, NULL, &f32_tol, &c);
    assert_int_equal(c.outcome, KILN_OUTCOME_OK);
    out[2] = INFINITY; /* wrong sign */
    kiln_check_output(KILN_F32, out, ref, 3, NULL, &f32_tol, &c);
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
    kiln_check_output(KILN_F32, out, ref, 8, NULL, &f32_tol, &c);
    assert_int_equal(c.n_bad, 0);
    assert_int_equal(c.outcome, KILN_OUTCOME_MISMATCH);
    assert_true(c.rel_l2_err > 0.99);
}

static void test_mismatch_reports_first_bad_element(void **state) {
    (void)state;
    float ref[4] = {1, 2, 3, 4}, out[4] = {1, 2, 3.5f, 5};
    kiln_check c;
    kiln_check_output(KILN_F32, out, ref, 4, NULL, &f32_tol, &c);
    assert_int_equal(c.outcome, KILN_OUTCOME_MISMATCH);
    assert_int_equal(c.n_bad, 2);
    assert_int_equal(c.first_bad, 2);
    assert_float_equal(c.first_bad_value, 3.5, 1e-9);
    assert_float_equal(c.first_bad_expected, 3.0, 1e-9);
    assert_float_equal(c.max_abs_err, 1.0, 1e-9);
}

static void test_integer_outputs_use_the_written_mask(void **state) {
    (void)state;
    int32_t ref[3] = {7, 8, 9}, out[3] = {7, 8, 9};
    unsigned char mask[3] = {1, 1, 0};
    kiln_tolerance exact = {0, 0, 0};
    kiln_check c;
    kiln_check_output(KILN_I32, out, ref, 3, mask, &exact, &c);
    assert_int_equal(c.outcome, KILN_OUTCOME_UNWRITTEN);
    mask[2] = 1;
    out[1] = 9;
    kiln_check_output(KILN_I32, out, ref, 3, mask, &exact, &c);
    assert_int_equal(c.outcome, KILN_OUTCOME_MISMATCH);
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
    kiln_check_output(KILN_BF16, out, ref, 64, NULL, &tol, &c);
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
        cmocka_unit_test(test_poison_is_detected_per_dtype),
        cmocka_unit_test(test_float_poison_is_a_nan_arithmetic_never_makes),
        cmocka_unit_test(test_correct_output_passes),
        cmocka_unit_test(test_unwritten_element_is_found),
        cmocka_unit_test(test_nan_where_reference_is_finite),
        cmocka_unit_test(test_matching_infinities_and_nans_pass),
        cmocka_unit_test(test_zeros_fail_on_small_reference),
        cmocka_unit_test(test_mismatch_reports_first_bad_element),
        cmocka_unit_test(test_integer_outputs_use_the_written_mask),
        cmocka_unit_test(test_bf16_rounding_is_within_default_tolerance),
        cmocka_unit_test(test_sol_score),
    };
    return cmocka_run_group_tests_name("gate", tests, NULL, NULL);
}
