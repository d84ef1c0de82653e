/* abi.h: the candidate ABI (docs/abi.md is the contract): the kernel parameter list a problem
 * implies, and the `// kiln:` directives through which a candidate states its launches and scratch
 * memory. */
#ifndef KILN_ABI_H
#define KILN_ABI_H

#include "../formats/problem.h"

#define KILN_MAX_LAUNCHES 8
#define KILN_MAX_PARAMS 64

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

typedef struct {
    int n_launches;
    kiln_launch_spec launch[KILN_MAX_LAUNCHES];
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

typedef struct {
    int n_launches;
    kiln_launch launch[KILN_MAX_LAUNCHES];
    size_t scratch_bytes;
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
