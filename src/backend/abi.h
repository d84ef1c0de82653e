/* abi.h: the candidate ABI (docs/abi.md is the contract): the kernel parameter list a problem
 * implies, and the `// kiln:` directives through which a candidate states its launches and scratch
 * memory. */
#ifndef KILN_ABI_H
#define KILN_ABI_H

#include "../formats/problem.h"

#define KILN_MAX_LAUNCHES 8
#define KILN_MAX_PARAMS 64
#define KILN_MAX_TMAPS 4     /* `// kiln: tensormap` lines a candidate may have */
#define KILN_TMAP_MAX_RANK 5 /* the TMA unit's limit */
#define KILN_TMAP_BYTES 128  /* a tensor map as a kernel parameter (CUtensorMap) */

/* One parameter of a candidate's entry points, in ABI order: inputs (tensors as pointers, scalars
 * by value), outputs (pointers), every axis (int64_t), then the scratch pointer if declared. */
typedef enum {
    KILN_PARAM_PTR,  /* device (or host, on cpu) pointer */
    KILN_PARAM_I64,  /* axes, int64 scalars */
    KILN_PARAM_I32,  /* int32/int16/int8 scalars */
    KILN_PARAM_F32,  /* float32/float16/bfloat16 scalars (passed as float) */
    KILN_PARAM_F64,  /* float64 scalars */
    KILN_PARAM_BOOL, /* bool scalars (passed as a 1-byte bool) */
} kiln_param_kind;

typedef struct {
    kiln_param_kind kind;
    char name[64];
    char c_type[48]; /* how the doc and trampolines spell it: "const __nv_bfloat16*", "int64_t" ...
                      */
} kiln_param;

typedef struct {
    int n;
    kiln_param p[KILN_MAX_PARAMS];
} kiln_signature;

/* A launch as written in the source: expressions over the axis names. */
typedef struct {
    char entry[128];
    char *grid[3], *block[3], *cluster[3]; /* NULL means 1 */
    char *smem;                            /* NULL means 0 */
} kiln_launch_spec;

/* A tensor map as written (`// kiln: tensormap TENSOR dims=(..) strides=(..) box=(..)
 * [swizzle=S]`): the TMA unit's view of one tensor parameter, expressions over the axis names,
 * innermost dimension first; strides in elements, for dimensions 1 .. rank-1. */
typedef struct {
    char tensor[64];
    int rank;
    char *dims[KILN_TMAP_MAX_RANK], *strides[KILN_TMAP_MAX_RANK - 1], *box[KILN_TMAP_MAX_RANK];
    int swizzle; /* bytes: 0 (none), 32, 64 or 128 */
} kiln_tmap_spec;

typedef struct {
    int n_launches;
    kiln_launch_spec launch[KILN_MAX_LAUNCHES];
    int n_tmaps;
    kiln_tmap_spec tmap[KILN_MAX_TMAPS];
    char *scratch; /* bytes of zeroed scratch memory; NULL means none */
    /* `// kiln: library NAME ARGS`: the candidate is a call into a vendor library, not a kernel
     * (no launch lines); the backend that knows NAME builds and runs it from ARGS (text, for
     * "cublaslt" one JSON object: docs/gemm.md). NULL for a kernel. */
    char *library, *library_args;
} kiln_abi;

/* A launch with numbers, for one workload. */
typedef struct {
    char entry[128];
    unsigned grid[3], block[3], cluster[3];
    size_t smem_bytes;
} kiln_launch;

/* A tensor map with numbers, for one workload: what cuTensorMapEncodeTiled is given at each launch,
 * with the address parameter `param` holds then. Checked by kiln_abi_plan: the map reaches no
 * byte past the tensor's. */
typedef struct {
    int param;                                /* the tensor's index in the ABI parameters */
    kiln_dtype dtype;                         /* the tensor's */
    int rank;                                 /* 1 .. KILN_TMAP_MAX_RANK */
    uint64_t dims[KILN_TMAP_MAX_RANK];        /* elements, innermost first */
    uint64_t strides[KILN_TMAP_MAX_RANK - 1]; /* bytes, dimensions 1 .. rank-1 */
    uint32_t box[KILN_TMAP_MAX_RANK];         /* elements a copy moves, per dimension */
    int swizzle;                              /* bytes: 0, 32, 64, 128 */
} kiln_tmap;

typedef struct {
    int n_launches;
    kiln_launch launch[KILN_MAX_LAUNCHES];
    size_t scratch_bytes;
    /* Tensor maps every entry point takes after its n_params ABI parameters, in order, each a
     * 128-byte `const __grid_constant__` parameter (docs/abi.md section 2). */
    int n_params, n_tmaps;
    kiln_tmap tmap[KILN_MAX_TMAPS];
} kiln_launch_plan;

/* Parses every `// kiln:` line of source. With require_launch, no launch line is an error unless
 * a `library` line stands for them (a library line beside launch lines is an error);
 * otherwise (cpu) the default is one launch of "kiln_kernel". Errors are KILN_ERR_COMPILE (the
 * candidate is at fault) and give the line number. */
int kiln_abi_parse(const char *source, int require_launch, kiln_abi *out, kiln_err *err);
void kiln_abi_free(kiln_abi *abi);
/* 1 when source holds a `// kiln: library` line (no compiler is to see it), else 0. */
int kiln_abi_is_library(const char *source);

/* Evaluates every expression for one workload's axes. Zero or negative dimensions, grids over the
 * hardware limits (2^31-1, 65535, 65535) and blocks over 1024 threads are KILN_ERR_RESOURCE; an
 * expression that does not evaluate (unknown name, division by zero) is KILN_ERR_COMPILE. */
int kiln_abi_plan(const kiln_abi *abi, const kiln_problem *p, const kiln_workload *w,
                  kiln_launch_plan *out, kiln_err *err);

/* A plan's tensor maps as a library manifest stores them (an array of {"param", "dtype", "dims",
 * "strides" (bytes), "box", "swizzle"}), and back: the reader checks every field against the TMA
 * unit's limits and that param is one of the n_tensors tensor parameters with that dtype
 * (dtypes[param]); KILN_OK, or KILN_ERR_FORMAT with why. A NULL or empty array is no map. */
struct cJSON;
struct cJSON *kiln_tmaps_to_json(const kiln_launch_plan *plan);
int kiln_tmaps_from_json(const struct cJSON *a, const kiln_dtype *dtypes, int n_tensors,
                         kiln_launch_plan *plan, kiln_err *err);

/* The parameter list a problem implies. cuda selects CUDA type names (__nv_bfloat16, __half), else
 * C names (kiln_bf16, kiln_f16 from kiln_cpu.h): kiln_dtype_kernel_type. */
void kiln_abi_signature(const kiln_problem *p, int has_scratch, int cuda, kiln_signature *out);

/* The pieces kiln_abi_signature is built from, for kernels described without a kiln_problem (a
 * library manifest's entries, the gate's ceiling kernels). Appends one parameter; more than
 * KILN_MAX_PARAMS is a programmer error (callers bound the count first). */
void kiln_abi_add_param(kiln_signature *sig, kiln_param_kind kind, const char *name,
                        const char *c_type);
/* Appends a tensor: "const T* name" for an input, "T* name" for an output, T the kernel type of t.
 */
void kiln_abi_add_tensor(kiln_signature *sig, const char *name, kiln_dtype t, int is_output,
                         int cuda);

/* "const float* x, float* y, int64_t n": the parameters as C, for an emitter's own entry points.
 * "" for none. Caller frees. */
char *kiln_abi_param_list(const kiln_signature *sig);

/* The C prototype of an entry point, e.g. for docs and for error messages:
 * "void kiln_kernel(const float* x, float* y, int64_t n)"; with cuda, `extern "C" __global__ void
 * ENTRY(...)`. entry may carry attributes before the name ("__launch_bounds__(256) k"). Caller
 * frees. */
char *kiln_abi_prototype(const kiln_signature *sig, const char *entry, int cuda);

#endif
