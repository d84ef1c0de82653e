/* gemm_lt.c: the cublaslt family: a captured GEMM (linear, mm, matmul, bmm, addmm, fp8 _scaled_mm
 * with per-tensor scales), alone or with the epilogue chain cuBLASLt fuses after it (bias add, ReLU
 * or GELU, a final cast), run by cuBLASLt with one of the configurations it accepts for that GEMM
 * on the device; the search point is the configuration's index in kiln_lt_enumerate's list, and the
 * cpu backend gets a plain C GEMM computing what cuBLASLt computes (docs/gemm.md). */
#include <string.h>

#include "../backend/lt_call.h"
#include "gemm.h"

extern const kiln_family kiln_family_cublaslt;

/* The enumeration's list is indexed by three parameters (KILN_FAMILY_MAX_VALUES per parameter):
 * index = C0 + 16·C1 + 256·C2, at most 2048 configs; index 0 is the heuristic's first answer. */
#define LT_CONFIG_CAP KILN_LT_CALL_CAP
#define LT_DIGIT 16

static int lt_match(const kiln_problem *p, kiln_match *m, char *why, size_t why_len) {
    if (!kiln_gemm_match(p, m, why, why_len))
        return 0;
    if (kiln_gemm_gated(m)) {
        kiln_family_fmt(why, why_len,
                        "a gated pair act(x·W1ᵀ)·(x·W2ᵀ) is not a cuBLASLt epilogue (one "
                        "accumulator, a bias and an auxiliary output): kiln's wgmma GEMM runs it");
        return 0;
    }
    if (kiln_gemm_scale(m) == 2) {
        kiln_family_fmt(why, why_len,
                        "_scaled_mm with a scale a row of A and a column of B: kiln drives "
                        "cuBLASLt's per-tensor fp8 scales only; kiln's wgmma GEMM runs it");
        return 0;
    }
    kiln_lt_gemm g = kiln_gemm_of(m);
    kiln_lt_view view;
    kiln_err err;
    if (kiln_lt_gemm_view(&g, &view, &err) != KILN_OK) {
        kiln_family_fmt(why, why_len, "cuBLASLt cannot take it: %s", err.msg);
        return 0;
    }
    if (kiln_gemm_gelu_erf(m)) {
        size_t len = strlen(m->how);
        kiln_family_fmt(m->how + len, sizeof m->how - len,
                        "; cuBLASLt's GELU is tanh's: the gate decides");
    }
    return 1;
}

/* ---- points and candidates ---- */

static int64_t config_index(const int64_t *pt) {
    return pt[0] + LT_DIGIT * pt[1] + LT_DIGIT * LT_DIGIT * pt[2];
}

/* Every index is a point: only the device knows how long its list is (the backend says when an
 * index is past it). */
static const char *lt_check(const kiln_problem *p, const kiln_match *m, const int64_t *pt) {
    (void)p;
    (void)m;
    (void)pt;
    return NULL;
}

/* `// kiln: library cublaslt JSON` (lt_call.h): the GEMM, the configuration's index and the ABI
 * parameters that are A, B, the bias and D. */
static char *emit_cuda(const kiln_problem *p, const kiln_match *m, const int64_t *pt) {
    kiln_lt_call_desc d = {.gemm = kiln_gemm_of(m),
                           .index = config_index(pt),
                           .arg_a = m->input_of_role[KILN_GEMM_A],
                           .arg_b = m->input_of_role[KILN_GEMM_B],
                           .arg_bias = m->input_of_role[KILN_GEMM_BIAS],
                           .arg_d = p->n_inputs + m->output_of_role[0],
                           .has_scales = kiln_gemm_scale(m) != 0,
                           .arg_a_scale = m->input_of_role[KILN_GEMM_SA],
                           .arg_b_scale = m->input_of_role[KILN_GEMM_SB]};
    char *json = kiln_lt_call_json(&d);
    char *body = xasprintf("// kiln: library cublaslt %s\n", json);
    free(json);
    return kiln_family_source(&kiln_family_cublaslt, m, pt, body);
}

static char *lt_emit(const kiln_problem *p, const kiln_match *m, const int64_t *pt, int cuda) {
    return cuda ? emit_cuda(p, m, pt) : kiln_gemm_emit_cpu(&kiln_family_cublaslt, p, m, 0);
}

static kiln_tolerance lt_tolerance(kiln_dtype t) {
    return kiln_tolerance_default(t);
}

/* Index 0: the heuristic's first answer, the configuration cuBLAS itself would run. */
static int lt_start(const kiln_problem *p, const kiln_match *m, int64_t *pt) {
    (void)p;
    (void)m;
    pt[0] = pt[1] = pt[2] = 0;
    return 0;
}

const kiln_family kiln_family_cublaslt = {
    .name = "cublaslt",
    .vendor = 1,
    .summary =
        "one captured GEMM (linear, mm, matmul, bmm, addmm, fp8 _scaled_mm), with the bias / "
        "ReLU / GELU / "
        "cast epilogue cuBLASLt fuses, run by cuBLASLt with one of the configurations it "
        "accepts on the device",
    .n_params = 3,
    .params =
        {
            {"LT_CONFIG0",
             LT_DIGIT,
             {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
             "the configuration's index in the enumeration, units (index 0-7: the heuristic's "
             "answers)"},
            {"LT_CONFIG1",
             LT_DIGIT,
             {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
             "the index's sixteens"},
            {"LT_CONFIG2",
             LT_CONFIG_CAP / (LT_DIGIT * LT_DIGIT),
             {0, 1, 2, 3, 4, 5, 6, 7},
             "the index's 256s"},
        },
    .match = lt_match,
    .check = lt_check,
    .emit = lt_emit,
    .min_bytes = kiln_gemm_min_bytes,
    .flops = kiln_gemm_flops,
    .tolerance = lt_tolerance,
    .start = lt_start,
};
