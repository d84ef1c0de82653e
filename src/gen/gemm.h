/* gemm.h: a captured GEMM (linear, mm, matmul, bmm, addmm) and the epilogue chain after it (a bias
 * add, ReLU or GELU, a final cast), as both GEMM families read it: cublaslt (gemm_lt.c, cuBLASLt
 * configurations) and wgmma (gemm_wgmma.c, kiln's own sm_90 kernel). The match facts hold one
 * kiln_lt_gemm (the row-major description of docs/gemm.md); the cpu candidate of both is the same
 * plain C GEMM. */
#ifndef KILN_GEN_GEMM_H
#define KILN_GEN_GEMM_H

#include "../backend/cublaslt.h"
#include "family.h"

/* The roles of kiln_match.input_of_role for a GEMM: A, B, the bias (-1 without), for a gated
 * pair the second GEMM's B (the up projection's weight; -1 otherwise), for torch._scaled_mm A's
 * and B's float32 scales (-1 otherwise). */
enum { KILN_GEMM_A, KILN_GEMM_B, KILN_GEMM_BIAS, KILN_GEMM_B2, KILN_GEMM_SA, KILN_GEMM_SB };

/* Recognises one GEMM + epilogue chain in p; fills m (variant, how, roles and the facts
 * kiln_gemm_of reads back) or writes why it declined. */
int kiln_gemm_match(const kiln_problem *p, kiln_match *m, char *why, size_t why_len);

/* The GEMM m describes. */
kiln_lt_gemm kiln_gemm_of(const kiln_match *m);

/* Whether the captured GELU is erf's (the exact form) rather than tanh's. */
int kiln_gemm_gelu_erf(const kiln_match *m);

/* A gated pair (the front of a GeGLU/SwiGLU MLP: act(x·Wgᵀ) · (x·Wuᵀ), two linears of one input
 * and shape without bias, the activation on the first, the product of both): the activation, 2
 * GELU's tanh form, 3 GELU's erf form, 4 SiLU; 0 for a plain GEMM + epilogue. The GEMM m
 * describes is each of the two (N is the output's columns); only kiln's own GEMM runs it. */
int kiln_gemm_gated(const kiln_match *m);

/* torch._scaled_mm's scales: 0 none (not a _scaled_mm), 1 one value each for A and B (D = sa · sb
 * · A·B, then the epilogue), 2 one a row of A ([M, 1]) and one a column of B ([1, N]). A and B
 * are fp8 (e4m3 or e5m2) then, D 16-bit or float32, the bias in D's dtype. */
int kiln_gemm_scale(const kiln_match *m);

/* torch._scaled_mm's use_fast_accum (False, its default, when absent): 1 lets the fp8 products be
 * summed in the tensor cores' own precision; 0 asks for fp32 sums (kiln's wgmma GEMM then adds each
 * stage's products to its accumulators in fp32, GW_PROMOTE). */
int kiln_gemm_fast_accum(const kiln_match *m);

/* The cpu candidate: fp32 accumulation in k order, the scales, the epilogue on the accumulator (a
 * gated pair: the activation of the first GEMM's times the second's), one rounding to D's dtype.
 * exact_gelu: GELU in the form captured (erf or tanh); else always tanh's (what cuBLASLt computes).
 * The source carries f's banner for the point all zeros. */
char *kiln_gemm_emit_cpu(const kiln_family *f, const kiln_problem *p, const kiln_match *m,
                         int exact_gelu);

/* A, B (both of a gated pair) and D once each, and the bias: the epilogue's intermediates are
 * never stored. */
double kiln_gemm_min_bytes(const kiln_problem *p, const kiln_match *m, const kiln_workload *w);
/* 2·M·N·K per matrix of the batch (twice for a gated pair). */
double kiln_gemm_flops(const kiln_problem *p, const kiln_match *m, const kiln_workload *w);

#endif
