/* test_gate.c: the gate's element checks (poison patterns, unwritten, NaN policy, kiln's and
 * SOL-ExecBench's tolerance, reference masking), the SOL score, and the speed of light's flops
 * ceiling (the tensor-core table, the dtype rule, the device object that reports it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>
#include <unistd.h>

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

/* ---- the flops ceiling of the speed of light ---- */

/* An H200 as the driver reports it: sm_90, 132 SMs, 1980 MHz. */
static const kiln_device_info h200 = {
    .name = "NVIDIA H200", .cc_major = 9, .cc_minor = 0, .n_sms = 132, .clock_khz = 1980000};

/* A problem whose tensor inputs have these dtypes (scalar marks a Python scalar), with flops. */
typedef struct {
    kiln_problem p;
    kiln_tensor_spec in[4];
} fake_problem;

static void fake(fake_problem *f, double flops, int n, const kiln_dtype *dtypes,
                 const int *scalar) {
    memset(f, 0, sizeof *f);
    for (int i = 0; i < n; i++) {
        f->in[i].dtype = dtypes[i];
        f->in[i].is_scalar = scalar ? scalar[i] : 0;
    }
    f->p.n_inputs = n;
    f->p.inputs = f->in;
    f->p.flops = flops;
}

static void test_tensor_table_gives_an_h200_its_dense_rates(void **state) {
    (void)state;
    kiln_ceilings c = {.copy_gbps = 4800, .fma_gflops = 51000};
    kiln_ceilings_tensor(&h200, &c);
    /* 4096 flops/clk/SM x 132 SMs x 1.98 GHz: ~1070 TFLOP/s bf16 */
    assert_float_equal(c.tensor_gflops[KILN_TENSOR_BF16], 4096.0 * 132 * 1.98e9 / 1e9, 1e-6);
    assert_true(c.tensor_gflops[KILN_TENSOR_BF16] > 1.06e6 &&
                c.tensor_gflops[KILN_TENSOR_BF16] < 1.08e6);
    assert_float_equal(c.tensor_gflops[KILN_TENSOR_F16], c.tensor_gflops[KILN_TENSOR_BF16], 0);
    assert_float_equal(c.tensor_gflops[KILN_TENSOR_F8], 2 * c.tensor_gflops[KILN_TENSOR_BF16], 0);
    assert_float_equal(c.tensor_gflops[KILN_TENSOR_TF32], c.tensor_gflops[KILN_TENSOR_BF16] / 2, 0);
    assert_float_equal(c.tensor_gflops[KILN_TENSOR_I8], 2 * c.tensor_gflops[KILN_TENSOR_BF16], 0);
    /* the measured figures are left as they were */
    assert_float_equal(c.fma_gflops, 51000, 0);
    /* an A100 SXM (108 SMs, 1410 MHz): its datasheet's 312 TFLOP/s bf16, and no fp8 */
    kiln_device_info a100 = {.cc_major = 8, .cc_minor = 0, .n_sms = 108, .clock_khz = 1410000};
    kiln_ceilings_tensor(&a100, &c);
    assert_true(fabs(c.tensor_gflops[KILN_TENSOR_BF16] - 312e3) < 1e3);
    assert_float_equal(c.tensor_gflops[KILN_TENSOR_F8], 0, 0);
    assert_float_equal(kiln_tensor_flops_per_clk_sm(8, 9, KILN_TENSOR_F8), 2048, 0);
    assert_float_equal(kiln_tensor_flops_per_clk_sm(8, 6, KILN_TENSOR_BF16), 1024, 0);
}

static void test_tensor_ceiling_needs_a_known_arch_and_a_clock(void **state) {
    (void)state;
    kiln_device_info turing = {.cc_major = 7, .cc_minor = 5, .n_sms = 40, .clock_khz = 1590000};
    kiln_device_info blackwell = {
        .cc_major = 10, .cc_minor = 0, .n_sms = 148, .clock_khz = 1965000};
    kiln_device_info cpu = {.n_sms = 16}; /* the cpu backend: no compute capability, no clock */
    kiln_device_info no_clock = h200;
    no_clock.clock_khz = 0;
    const kiln_device_info *none[] = {&turing, &blackwell, &cpu, &no_clock};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
        kiln_ceilings c;
        memset(&c, 0x55, sizeof c); /* every entry is written, not left */
        kiln_ceilings_tensor(none[i], &c);
        for (int t = 0; t < KILN_TENSOR_COUNT; t++)
            assert_float_equal(c.tensor_gflops[t], 0, 0);
        assert_float_equal(c.fp32_gflops, 0, 0);
    }
}

static void test_the_first_tensor_input_picks_the_tensor_type(void **state) {
    (void)state;
    static const struct {
        int n;
        kiln_dtype dt[3];
        int scalar[3];
        int want;
    } cases[] = {
        {2, {KILN_BF16, KILN_BF16}, {0, 0}, KILN_TENSOR_BF16},
        {2, {KILN_F16, KILN_F16}, {0, 0}, KILN_TENSOR_F16},
        {2, {KILN_F8_E4M3, KILN_F8_E4M3}, {0, 0}, KILN_TENSOR_F8},
        {1, {KILN_F8_E5M2}, {0}, KILN_TENSOR_F8},
        {2, {KILN_I8, KILN_I8}, {0, 0}, KILN_TENSOR_I8},
        {2, {KILN_F32, KILN_F32}, {0, 0}, -1},  /* fp32: the FMA rate, never tf32 */
        {2, {KILN_F32, KILN_BF16}, {0, 0}, -1}, /* the first tensor decides */
        {3, {KILN_F32, KILN_F64, KILN_BF16}, {1, 1, 0}, KILN_TENSOR_BF16}, /* scalars skipped */
        {1, {KILN_I64}, {0}, -1},
        {1, {KILN_F64}, {0}, -1},
        {0, {KILN_F32}, {0}, -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fake_problem f;
        fake(&f, 1e9, cases[i].n, cases[i].dt, cases[i].scalar);
        assert_int_equal(kiln_sol_tensor_type(&f.p), cases[i].want);
    }
}

static void test_a_bf16_gemm_is_bounded_by_tensor_cores_an_fp32_one_by_fma(void **state) {
    (void)state;
    kiln_ceilings c = {.copy_gbps = 4800, .fma_gflops = 51000};
    kiln_ceilings_tensor(&h200, &c);
    double n = 8192, flops = 2 * n * n * n;
    const char *kind = NULL;

    /* bf16: A, B and C of 2 bytes; flops bound it at the tensor-core rate, not the FMA rate */
    fake_problem bf;
    kiln_dtype bf16[2] = {KILN_BF16, KILN_BF16};
    fake(&bf, flops, 2, bf16, NULL);
    double bf_bytes = 3 * n * n * 2;
    assert_float_equal(kiln_sol_gflops(&c, &bf.p, &kind), c.tensor_gflops[KILN_TENSOR_BF16], 0);
    assert_string_equal(kind, "bfloat16 tensor cores (arch table)");
    double sol = kiln_sol_time_us(&c, &bf.p, bf_bytes, bf.p.flops);
    assert_float_equal(sol, flops / (c.tensor_gflops[KILN_TENSOR_BF16] * 1e3), 1e-9);
    /* the issue: cuBLASLt at 700 TFLOP/s must not be under 0.9 x T_sol (`impossible`); it was
     * against the FMA ceiling */
    double t_700 = flops / 700e12 * 1e6;
    assert_true(t_700 >= 0.9 * sol);
    assert_true(t_700 < 0.9 * flops / (c.fma_gflops * 1e3));

    /* fp32: the FMA rate, the architecture's peak (66.9 TFLOP/s) where kiln's own kernel measured
     * less (51): a cuBLAS SGEMM at 60 TFLOP/s is not `impossible` */
    fake_problem f32;
    kiln_dtype fp32[2] = {KILN_F32, KILN_F32};
    fake(&f32, flops, 2, fp32, NULL);
    assert_float_equal(c.fp32_gflops, 256.0 * 132 * 1.98e9 / 1e9, 1e-6);
    assert_float_equal(kiln_sol_gflops(&c, &f32.p, &kind), c.fp32_gflops, 0);
    assert_string_equal(kind, "fp32 FMA (arch table)");
    double sol32 = kiln_sol_time_us(&c, &f32.p, 3 * n * n * 4, f32.p.flops);
    assert_float_equal(sol32, flops / (c.fp32_gflops * 1e3), 1e-9);
    assert_true(flops / 60e12 * 1e6 >= 0.9 * sol32);
    c.fma_gflops = 70000; /* a measurement above the table wins */
    assert_float_equal(kiln_sol_gflops(&c, &f32.p, &kind), 70000, 0);
    assert_string_equal(kind, "fp32 FMA (measured)");
    c.fma_gflops = 51000;

    /* without flops (or a tiny count) the bytes bind, whatever the dtype */
    bf.p.flops = -1;
    assert_float_equal(kiln_sol_time_us(&c, &bf.p, bf_bytes, bf.p.flops), bf_bytes / 4.8e6, 1e-12);
    bf.p.flops = 1000;
    assert_float_equal(kiln_sol_time_us(&c, &bf.p, bf_bytes, bf.p.flops), bf_bytes / 4.8e6, 1e-12);
}

static void test_no_tensor_rate_falls_back(void **state) {
    (void)state;
    double flops = 1e12;
    const char *kind = NULL;
    fake_problem bf, f8;
    kiln_dtype bf16[1] = {KILN_BF16}, e4m3[1] = {KILN_F8_E4M3};
    fake(&bf, flops, 1, bf16, NULL);
    fake(&f8, flops, 1, e4m3, NULL);

    /* an architecture the table does not know: the FMA ceiling */
    kiln_device_info blackwell = {
        .cc_major = 10, .cc_minor = 0, .n_sms = 148, .clock_khz = 1965000};
    kiln_ceilings c = {.copy_gbps = 8000, .fma_gflops = 80000};
    kiln_ceilings_tensor(&blackwell, &c);
    assert_float_equal(kiln_sol_gflops(&c, &bf.p, &kind), 80000, 0);
    assert_string_equal(kind, "fp32 FMA (measured)");
    assert_float_equal(kiln_sol_time_us(&c, &bf.p, 0, flops), flops / 80e6, 1e-9);
    /* no flops ceiling known at all (an LLM prompt before any gate result): the bytes alone */
    kiln_ceilings none = {.copy_gbps = 8000};
    assert_float_equal(kiln_sol_time_us(&none, &bf.p, 8e6, flops), 1.0, 1e-12);

    /* float8 on an A100, which has no float8 tensor cores: the float16 rate */
    kiln_device_info a100 = {.cc_major = 8, .cc_minor = 0, .n_sms = 108, .clock_khz = 1410000};
    kiln_ceilings_tensor(&a100, &c);
    assert_float_equal(kiln_sol_gflops(&c, &f8.p, &kind), c.tensor_gflops[KILN_TENSOR_F16], 0);
    assert_string_equal(kind, "float16 tensor cores (arch table)");
}

/* A backend that only answers device_info, as an H200. */
static void h200_info(kiln_backend *be, kiln_device_info *out) {
    (void)be;
    *out = h200;
}

/* The "device" line the gate sends for problem p, parsed. */
static cJSON *device_line(kiln_backend *be, const kiln_ceilings *c, const kiln_problem *p) {
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    kiln_gate_send_device(fd[1], be, c, p);
    close(fd[1]);
    char buf[4096];
    ssize_t n = read(fd[0], buf, sizeof buf - 1);
    close(fd[0]);
    assert_true(n > 7);
    buf[n] = 0;
    assert_memory_equal(buf, "device ", 7);
    cJSON *j = cJSON_Parse(buf + 7);
    assert_non_null(j);
    return j;
}

static void test_the_device_object_reports_the_ceiling_used(void **state) {
    (void)state;
    kiln_backend_ops ops = {.name = "cuda", .device_info = h200_info};
    kiln_backend be = {.ops = &ops};
    kiln_ceilings c = {.copy_gbps = 4800, .fma_gflops = 51000};
    kiln_ceilings_tensor(&h200, &c);
    fake_problem bf, f32;
    kiln_dtype bf16[2] = {KILN_BF16, KILN_BF16}, fp32[2] = {KILN_F32, KILN_F32};
    fake(&bf, 1e12, 2, bf16, NULL);
    fake(&f32, 1e12, 2, fp32, NULL);

    cJSON *j = device_line(&be, &c, &bf.p);
    assert_float_equal(cJSON_GetObjectItem(j, "ceiling_gflops")->valuedouble,
                       c.tensor_gflops[KILN_TENSOR_BF16], 1e-6);
    assert_string_equal(cJSON_GetObjectItem(j, "ceiling_gflops_of")->valuestring,
                        "bfloat16 tensor cores (arch table)");
    assert_float_equal(cJSON_GetObjectItem(j, "fma_gflops")->valuedouble, 51000, 0);
    assert_string_equal(cJSON_GetObjectItem(j, "tensor_source")->valuestring, "arch table");
    const cJSON *t = cJSON_GetObjectItem(j, "tensor_gflops");
    assert_float_equal(cJSON_GetObjectItem(t, "float8")->valuedouble,
                       c.tensor_gflops[KILN_TENSOR_F8], 1e-6);
    assert_float_equal(cJSON_GetObjectItem(j, "clock_mhz")->valuedouble, 1980, 0);
    cJSON_Delete(j);

    j = device_line(&be, &c, &f32.p);
    assert_float_equal(cJSON_GetObjectItem(j, "ceiling_gflops")->valuedouble, c.fp32_gflops, 1e-6);
    assert_string_equal(cJSON_GetObjectItem(j, "ceiling_gflops_of")->valuestring,
                        "fp32 FMA (arch table)");
    assert_float_equal(cJSON_GetObjectItem(j, "fp32_gflops")->valuedouble, c.fp32_gflops, 1e-6);
    cJSON_Delete(j);

    /* no tensor rates (a cpu, an unknown architecture): no tensor_gflops at all */
    memset(c.tensor_gflops, 0, sizeof c.tensor_gflops);
    c.fp32_gflops = 0;
    j = device_line(&be, &c, &bf.p);
    assert_null(cJSON_GetObjectItem(j, "tensor_gflops"));
    assert_null(cJSON_GetObjectItem(j, "tensor_source"));
    assert_float_equal(cJSON_GetObjectItem(j, "ceiling_gflops")->valuedouble, 51000, 0);
    cJSON_Delete(j);
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
        cmocka_unit_test(test_tensor_table_gives_an_h200_its_dense_rates),
        cmocka_unit_test(test_tensor_ceiling_needs_a_known_arch_and_a_clock),
        cmocka_unit_test(test_the_first_tensor_input_picks_the_tensor_type),
        cmocka_unit_test(test_a_bf16_gemm_is_bounded_by_tensor_cores_an_fp32_one_by_fma),
        cmocka_unit_test(test_no_tensor_rate_falls_back),
        cmocka_unit_test(test_the_device_object_reports_the_ceiling_used),
    };
    return cmocka_run_group_tests_name("gate", tests, NULL, NULL);
}
