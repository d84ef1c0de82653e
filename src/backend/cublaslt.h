/* cublaslt.h: cuBLASLt as kiln reaches it: the library opened at run time, one GEMM described as
 * kiln captures it (row-major PyTorch tensors), its column-major view, one cuBLASLt configuration
 * as a search point (and as the JSON a library manifest stores), every configuration cuBLASLt
 * accepts for a GEMM on the current device, and one matmul run with exactly one of them. */
#ifndef KILN_CUBLASLT_H
#define KILN_CUBLASLT_H

#include <cjson/cJSON.h>
#include <cublasLt.h>
#include <stdint.h>

#include "../formats/dtype.h"
#include "../util/common.h"

/* Every cuBLASLt function kiln calls: X(name without "cublasLt", return type, parameter list). */
#define KILN_LT_FUNCS(X)                                                                           \
    X(Create, cublasStatus_t, (cublasLtHandle_t * handle))                                         \
    X(Destroy, cublasStatus_t, (cublasLtHandle_t handle))                                          \
    X(GetVersion, size_t, (void))                                                                  \
    X(GetStatusName, const char *, (cublasStatus_t status))                                        \
    X(MatmulDescCreate, cublasStatus_t,                                                            \
      (cublasLtMatmulDesc_t * desc, cublasComputeType_t compute, cudaDataType_t scale))            \
    X(MatmulDescDestroy, cublasStatus_t, (cublasLtMatmulDesc_t desc))                              \
    X(MatmulDescSetAttribute, cublasStatus_t,                                                      \
      (cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void *buf, size_t n)) \
    X(MatrixLayoutCreate, cublasStatus_t,                                                          \
      (cublasLtMatrixLayout_t * layout, cudaDataType type, uint64_t rows, uint64_t cols,           \
       int64_t ld))                                                                                \
    X(MatrixLayoutDestroy, cublasStatus_t, (cublasLtMatrixLayout_t layout))                        \
    X(MatrixLayoutSetAttribute, cublasStatus_t,                                                    \
      (cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr, const void *buf,       \
       size_t n))                                                                                  \
    X(MatmulPreferenceCreate, cublasStatus_t, (cublasLtMatmulPreference_t * pref))                 \
    X(MatmulPreferenceDestroy, cublasStatus_t, (cublasLtMatmulPreference_t pref))                  \
    X(MatmulPreferenceSetAttribute, cublasStatus_t,                                                \
      (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,                 \
       const void *buf, size_t n))                                                                 \
    X(MatmulAlgoGetHeuristic, cublasStatus_t,                                                      \
      (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,               \
       cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,               \
       cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t *results,   \
       int *returned))                                                                             \
    X(MatmulAlgoGetIds, cublasStatus_t,                                                            \
      (cublasLtHandle_t handle, cublasComputeType_t compute, cudaDataType_t scale,                 \
       cudaDataType_t a, cudaDataType_t b, cudaDataType_t c, cudaDataType_t d, int requested,      \
       int *ids, int *returned))                                                                   \
    X(MatmulAlgoInit, cublasStatus_t,                                                              \
      (cublasLtHandle_t handle, cublasComputeType_t compute, cudaDataType_t scale,                 \
       cudaDataType_t a, cudaDataType_t b, cudaDataType_t c, cudaDataType_t d, int id,             \
       cublasLtMatmulAlgo_t *algo))                                                                \
    X(MatmulAlgoCheck, cublasStatus_t,                                                             \
      (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,               \
       cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,               \
       const cublasLtMatmulAlgo_t *algo, cublasLtMatmulHeuristicResult_t *result))                 \
    X(MatmulAlgoCapGetAttribute, cublasStatus_t,                                                   \
      (const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoCapAttributes_t attr, void *buf,        \
       size_t n, size_t *written))                                                                 \
    X(MatmulAlgoConfigSetAttribute, cublasStatus_t,                                                \
      (cublasLtMatmulAlgo_t * algo, cublasLtMatmulAlgoConfigAttributes_t attr, const void *buf,    \
       size_t n))                                                                                  \
    X(MatmulAlgoConfigGetAttribute, cublasStatus_t,                                                \
      (const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoConfigAttributes_t attr, void *buf,     \
       size_t n, size_t *written))                                                                 \
    X(Matmul, cublasStatus_t,                                                                      \
      (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alpha, const void *a,       \
       cublasLtMatrixLayout_t la, const void *b, cublasLtMatrixLayout_t lb, const void *beta,      \
       const void *c, cublasLtMatrixLayout_t lc, void *d, cublasLtMatrixLayout_t ld,               \
       const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspace_bytes,                  \
       cudaStream_t stream))

#define KILN_LT_MEMBER(name, ret, params) ret(*name) params;
typedef struct {
    KILN_LT_FUNCS(KILN_LT_MEMBER)
} kiln_lt_funcs;
#undef KILN_LT_MEMBER

/* The functions once kiln_lt_load succeeded. */
extern kiln_lt_funcs kiln_lt;

/* Opens cuBLASLt and resolves every function of kiln_lt, once per process; every call returns the
 * first one's status and message. The names tried, in order: $KILN_CUBLASLT (a path or a soname),
 * libcublasLt.so.13, libcublasLt.so.12, libcublasLt.so, then libcublasLt.so.13 and .12 under
 * kiln_cuda_home()/lib64. KILN_OK, or KILN_ERR_NO_DEVICE saying what was tried and why each
 * failed. Needs no GPU. */
int kiln_lt_load(kiln_err *err);

/* The epilogues kiln maps onto cuBLASLt's (applied to the fp32 accumulator before the cast to the
 * output type; the bias is one value per output column n, PyTorch's addmm/linear bias). */
typedef enum {
    KILN_LT_EPI_NONE,
    KILN_LT_EPI_BIAS,
    KILN_LT_EPI_RELU,
    KILN_LT_EPI_GELU, /* tanh approximation, as cuBLASLt computes it */
    KILN_LT_EPI_BIAS_RELU,
    KILN_LT_EPI_BIAS_GELU,
    KILN_LT_EPI_COUNT
} kiln_lt_epilogue;

/* "none", "bias", "relu", "gelu", "bias_relu", "bias_gelu"; parse: 0, or -1 for another name. */
const char *kiln_lt_epilogue_name(kiln_lt_epilogue e);
int kiln_lt_epilogue_parse(const char *name, kiln_lt_epilogue *out);
/* 1 when e reads a bias vector (bias, bias + ReLU, bias + GELU). */
int kiln_lt_epilogue_has_bias(kiln_lt_epilogue e);

/* One GEMM as kiln captures it, in PyTorch's terms: D[b] (M×N) = A[b] (M×K) @ B[b] (K×N), every
 * tensor row-major with its row stride (elements). A is stored as [M, K] (trans_a 0, lda ≥ K) or
 * as [K, M] read transposed (trans_a 1, lda ≥ M); B as [K, N] (trans_b 0, ldb ≥ N) or as [N, K]
 * (trans_b 1, ldb ≥ K: linear's weight, x @ wᵀ). Batch strides are in elements; 0 broadcasts an
 * operand over the batch (bmm with a shared weight). The accumulator is always fp32. */
typedef struct {
    int64_t m, n, k;
    int64_t batch; /* ≥ 1 */
    int64_t stride_a, stride_b, stride_d;
    kiln_dtype a_type, b_type, d_type; /* bf16, fp16, fp32, fp8 e4m3/e5m2 (A, B only) */
    int trans_a, trans_b;
    int64_t lda, ldb, ldd;
    kiln_lt_epilogue epilogue;
    kiln_dtype bias_type; /* when the epilogue has a bias */
    /* fp8 only: torch._scaled_mm's use_fast_accum=True, cuBLASLt's FAST_ACCUM (the tensor cores'
     * own fp8 accumulation, not promoted to fp32 every few k): what eager ran. 0 (promoted) when
     * absent from JSON. */
    int fast_accum;
} kiln_lt_gemm;

/* g as a JSON object (sizes, strides and leading dimensions as integers, dtypes by kiln's names,
 * the epilogue by kiln_lt_epilogue_name); every field is written, so from_json(to_json(g)) == g.
 * What a cublaslt candidate's directive and a library entry store. */
cJSON *kiln_lt_gemm_to_json(const kiln_lt_gemm *g);
/* Reads what kiln_lt_gemm_to_json wrote. KILN_OK, or KILN_ERR_FORMAT naming the field missing or
 * out of range (sizes and batch ≥ 1, strides and leading dimensions ≥ 0, transposes 0 or 1, a
 * dtype or an epilogue kiln does not know). The GEMM is not checked further: kiln_lt_gemm_view. */
int kiln_lt_gemm_from_json(const cJSON *o, kiln_lt_gemm *out, kiln_err *err);

/* The usual captured shapes, filled with packed (contiguous) strides. */
/* F.linear(x, w[, bias]): x [batch·M, K] flattened to M rows, w [N, K]. */
kiln_lt_gemm kiln_lt_gemm_linear(int64_t m, int64_t n, int64_t k, kiln_dtype t);
/* torch.matmul / mm of [M, K] by [K, N]. */
kiln_lt_gemm kiln_lt_gemm_matmul(int64_t m, int64_t n, int64_t k, kiln_dtype t);
/* torch.bmm of [batch, M, K] by [batch, K, N]. */
kiln_lt_gemm kiln_lt_gemm_bmm(int64_t batch, int64_t m, int64_t n, int64_t k, kiln_dtype t);

/* The GEMM in cuBLASLt's column-major terms. A row-major R×C tensor with row stride ld is, read
 * column-major, a C×R matrix with the same ld; so D = A·B (row-major) is Dᵀ = Bᵀ·Aᵀ (column-major):
 * cuBLASLt's A is kiln's B, its B is kiln's A, its m is N and its n is M. A kiln operand stored
 * as given is cuBLASLt's op N, one stored transposed is op T. */
typedef struct {
    uint64_t m, n, k;
    cublasOperation_t op_a, op_b;
    uint64_t rows_a, cols_a, rows_b, cols_b, rows_d, cols_d; /* as stored, column-major */
    int64_t lda, ldb, ldd;
    int64_t stride_a, stride_b, stride_d;
    int32_t batch;
    cudaDataType_t a_type, b_type, d_type, bias_type;
    cublasLtEpilogue_t epilogue;
    int swapped; /* 1: cuBLASLt's A is kiln's B (always, for now) */
} kiln_lt_view;

/* Checks g (dtypes cuBLASLt multiplies, leading dimensions that hold a row, positive sizes) and
 * fills its column-major view. KILN_OK, or KILN_ERR_INVALID / KILN_ERR_UNSUPPORTED saying why. */
int kiln_lt_gemm_view(const kiln_lt_gemm *g, kiln_lt_view *out, kiln_err *err);

/* One cuBLASLt configuration: the search point and what the library stores. The ids are
 * cuBLASLt's own (cublasLtMatmulTile_t, cublasLtMatmulStages_t, cublasLtReductionScheme_t,
 * cublasLtClusterShape_t, cublasLtMatmulInnerShape_t) and hold for the cuBLASLt version they were
 * enumerated with. */
typedef struct {
    int32_t algo;
    uint32_t tile, stages;
    int32_t split_k; /* ≥ 1 */
    uint32_t reduction, swizzle, custom;
    uint16_t cluster, inner_shape;
    uint64_t
        workspace; /* bytes AlgoCheck said this config needs (< 10^15: JSON holds it exactly) */
    int heuristic; /* its rank among the heuristic's answers (0 first), -1 when enumerated */
} kiln_lt_config;

/* The config as a JSON object; every field is written, so from_json(to_json(c)) == c. */
cJSON *kiln_lt_config_to_json(const kiln_lt_config *c);
/* Reads a config written by kiln_lt_config_to_json ("heuristic" may be absent: -1). KILN_OK, or
 * KILN_ERR_FORMAT naming the field missing, not an integer or out of its type's range. */
int kiln_lt_config_from_json(const cJSON *o, kiln_lt_config *out, kiln_err *err);
/* 1 when a and b select the same kernel (every field but workspace and heuristic). */
int kiln_lt_config_same(const kiln_lt_config *a, const kiln_lt_config *b);
/* A one-line description ("algo 66 tile 18 stages 29 split 1 red 0 swz 0 cust 0 cluster 2"). */
void kiln_lt_config_format(const kiln_lt_config *c, char *buf, size_t cap);

/* A cuBLASLt handle and the descriptors of one GEMM; cuBLASLt's calls on it need a current CUDA
 * context (the caller's). One thread uses a plan at a time. */
typedef struct kiln_lt_plan kiln_lt_plan;

/* Loads cuBLASLt, creates a handle and g's descriptors. KILN_OK, or the status of kiln_lt_load /
 * kiln_lt_gemm_view, or KILN_ERR_BACKEND with cuBLASLt's status name. */
int kiln_lt_plan_create(const kiln_lt_gemm *g, kiln_lt_plan **out, kiln_err *err);
void kiln_lt_plan_destroy(kiln_lt_plan *p);

/* Every configuration cuBLASLt accepts for p's GEMM on the current device within workspace_limit
 * bytes, at most cap of them, into *out (heap; the caller frees): first the heuristic's answers
 * (up to 8, in its order, heuristic = rank), then the cross product of each algorithm's
 * capabilities that cublasLtMatmulAlgoCheck accepts, without the heuristic's own: first the plain
 * configs (tiles × stages × cluster shapes; split 1, no swizzle, no custom option), then each
 * accepted plain config's variants (split-K counts × reduction schemes × swizzles × custom
 * options), each group taking algorithms in turn. At most 200k AlgoCheck calls for the plain
 * configs and 400k in all (the variants explored in the plain configs' order). The order depends
 * only on what cuBLASLt answers. *n_valid counts every config accepted before the cap. KILN_OK
 * (possibly with none), or KILN_ERR_BACKEND. */
int kiln_lt_enumerate(kiln_lt_plan *p, uint64_t workspace_limit, int cap, kiln_lt_config **out,
                      int *n_out, int *n_valid, kiln_err *err);

/* A config the enumeration accepted, and where it found it. */
typedef struct {
    kiln_lt_config c;
    int tier; /* 0: plain (split 1, no swizzle, no custom option); 1: a variant of a plain one */
    int rank; /* its index among its algorithm's configs of its tier */
    int algo_pos; /* its algorithm's index in cublasLtMatmulAlgoGetIds' answer */
} kiln_lt_found;

/* kiln_lt_enumerate's order, apart from cuBLASLt: heur[0 .. n_heur-1] as given, then found sorted
 * (in place) by tier, rank, algo_pos, leaving out any config kiln_lt_config_same as one of heur.
 * out has room for n_heur + n_found; returns how many it holds. */
int kiln_lt_order(const kiln_lt_config *heur, int n_heur, kiln_lt_found *found, int n_found,
                  kiln_lt_config *out);

/* The device addresses of one run (as the integers CUdeviceptr holds). */
typedef struct {
    uint64_t a, b, d;
    uint64_t bias;             /* when the epilogue has one: N values of bias_type */
    uint64_t a_scale, b_scale; /* fp8: one fp32 each (per-tensor scale), 0 for 1.0 */
    uint64_t workspace;        /* at least c->workspace bytes, 256-byte aligned */
    uint64_t workspace_bytes;
} kiln_lt_ptrs;

/* Enqueues one cublasLtMatmul of p's GEMM with exactly config c (no heuristic) on stream (a
 * CUstream). KILN_OK, or KILN_ERR_INVALID when the workspace is too small, a bias epilogue has
 * no bias or cuBLASLt rejects c (AlgoCheck), or KILN_ERR_BACKEND with cuBLASLt's status. */
int kiln_lt_run(kiln_lt_plan *p, const kiln_lt_config *c, const kiln_lt_ptrs *ptrs, void *stream,
                kiln_err *err);

#endif
