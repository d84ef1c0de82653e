/* lt_call.h: a cuBLASLt candidate (`// kiln: library cublaslt JSON`, docs/gemm.md): the JSON names
 * the GEMM as captured, its configuration (an index into kiln_lt_enumerate's list, or the concrete
 * configuration a library stores) and which ABI parameters are A, B, the bias and D; opened on a
 * device it is one cuBLASLt plan with one configuration, run with the ABI's pointers. The cuda
 * backend (the gate) and libkiln_rt both call it through here. */
#ifndef KILN_LT_CALL_H
#define KILN_LT_CALL_H

#include "abi.h"
#include "cublaslt.h"

/* How many configurations an index may reach: the enumeration is capped there. */
#define KILN_LT_CALL_CAP 2048
/* The most workspace a configuration may ask for (kiln_lt_enumerate's limit). */
#define KILN_LT_CALL_WORKSPACE (32ull << 20)

typedef struct {
    kiln_lt_gemm gemm;
    int has_config;        /* 1: config is the concrete configuration; 0: index picks it */
    kiln_lt_config config; /* has_config */
    int64_t index;         /* !has_config: its position in kiln_lt_enumerate's list */
    int64_t version; /* the cuBLASLt (cublasLtGetVersion) that enumerated config; 0: unknown */
    int arg_a, arg_b, arg_bias, arg_d; /* ABI parameter indices; arg_bias -1 without a bias */
    /* fp8: A's and B's per-tensor float32 scales (D = sa · sb · A·B), ABI parameter indices;
     * without them (has_scales 0) both are 1 */
    int has_scales, arg_a_scale, arg_b_scale;
} kiln_lt_call_desc;

/* Reads a directive's JSON: {"gemm": {...kiln_lt_gemm_to_json}, "config": INDEX or {...config},
 * "version": N (optional), "args": {"a": i, "b": i, "bias": i or -1, "d": i, and for an fp8 GEMM
 * optionally "a_scale": i, "b_scale": i (both or neither)}}. With sig (may be NULL), every arg must
 * be a pointer parameter of sig and the bias present exactly when the GEMM's epilogue has one.
 * KILN_OK, or KILN_ERR_COMPILE saying what is wrong (the candidate's fault). */
int kiln_lt_call_parse(const char *json, const kiln_signature *sig, kiln_lt_call_desc *out,
                       kiln_err *err);
/* Checks d against the tensors of problem p (whose kiln_abi_signature d's args index) in every
 * workload: a bias argument exactly when the epilogue reads one, A, B, the bias and the scales are
 * inputs and D an output, each of the dtype the GEMM reads or writes (D's may differ from A's: a
 * fused cast; the scales float32, one value at least),
 * and no operand reaches past its tensor's elements (rows, leading dimension and batch
 * stride as the GEMM says). A directive that lies about its GEMM would otherwise read or write
 * outside the gate's buffers. KILN_OK, or KILN_ERR_COMPILE naming the operand and workload. */
int kiln_lt_call_check(const kiln_lt_call_desc *d, const kiln_problem *p, kiln_err *err);
/* The JSON kiln_lt_call_parse reads back to d (compact, one line). Caller frees. */
char *kiln_lt_call_json(const kiln_lt_call_desc *d);

typedef struct kiln_lt_call kiln_lt_call;

/* Builds d's plan in the current CUDA context and settles its configuration: an index is looked
 * up in kiln_lt_enumerate(KILN_LT_CALL_WORKSPACE, KILN_LT_CALL_CAP) on this device; a concrete
 * config is taken as it is (no heuristic), after checking that this cuBLASLt is the version that
 * enumerated it. KILN_OK; KILN_ERR_COMPILE for an index past the list (saying how long it is);
 * KILN_ERR_UNSUPPORTED for another cuBLASLt version; else kiln_lt_plan_create's or
 * kiln_lt_enumerate's status. */
int kiln_lt_call_open(const kiln_lt_call_desc *d, kiln_lt_call **out, kiln_err *err);
void kiln_lt_call_close(kiln_lt_call *c);
/* The call as settled: has_config 1, the config concrete, version this cuBLASLt's. */
const kiln_lt_call_desc *kiln_lt_call_resolved(const kiln_lt_call *c);
/* Bytes of workspace the configuration needs (0: none). */
uint64_t kiln_lt_call_workspace(const kiln_lt_call *c);
/* Enqueues the GEMM on stream (a CUstream) with the ABI's parameters (params[i] points at
 * parameter i's value, as cuLaunchKernel takes them) and workspace (kiln_lt_call_workspace bytes,
 * 256-byte aligned; 0 when it needs none). kiln_lt_run's status. */
int kiln_lt_call_run(kiln_lt_call *c, void *const *params, uint64_t workspace, void *stream,
                     kiln_err *err);

#endif
