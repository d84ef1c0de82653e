/* chnorm.h: what the channel-norm families (groupnorm.c, batchnorm.c) share, implemented in
 * chnorm.c: a problem read as a short chain of aten calls, shapes and layouts, and emitter helpers.
 * Private to those three files. */
#ifndef KILN_CHNORM_H
#define KILN_CHNORM_H

#include "family.h"

#include <cjson/cJSON.h>

extern const kiln_family kiln_family_groupnorm, kiln_family_batchnorm;

/* Dynamic shared memory a candidate may ask for (of the 227 KiB an SM gives a block). */
#define CHN_MAX_SMEM (200 * 1024)
/* H200's SMs: persistent grids are sized in multiples of them (other parts are correct, only
 * shaped less well). */
#define CHN_SMS 132

/* ---- the op chain of a problem ---- */

enum { ARG_ABSENT, ARG_INPUT, ARG_VALUE, ARG_NUM, ARG_BOOL, ARG_NULL, ARG_TEXT };

typedef struct {
    int kind;
    int index; /* ARG_INPUT: problem input; ARG_VALUE: step */
    int slot;  /* ARG_VALUE: which output of the step */
    double num;
    char text[48];
} chn_arg;

#define CHN_MAX_ARGS 10
#define CHN_MAX_STEPS 8

typedef struct {
    char op[64];               /* "group_norm.default": the aten overload without "aten::" */
    chn_arg arg[CHN_MAX_ARGS]; /* by the schema's parameter position; ARG_ABSENT when omitted */
} chn_step;

typedef struct {
    char kind[16]; /* "aten", "module" or "chain" */
    int n;
    chn_step step[CHN_MAX_STEPS];
    int ret_step, ret_slot; /* module and chain: what run() returns */
    int kept[8], n_kept;    /* aten: the op outputs the problem's outputs are, in order */
    cJSON *kiln;            /* the definition's "kiln" object (owned), or NULL */
} chn_chain;

/* Reads p's op chain from its "kiln" object (chnorm.c's header says how each kind is read).
 * Returns 1, or 0 with why; *no_kiln is set when the definition has no "kiln" object at all (the
 * caller then tries op_type). Free with chn_chain_free either way. */
int chn_chain_load(const kiln_problem *p, chn_chain *ch, int *no_kiln, char *why, size_t wl);
void chn_chain_free(chn_chain *ch);

/* Index of the schema of an aten overload (without "aten::"), or -1; the position of a named
 * parameter in it, or -1. */
int chn_schema_find(const char *op);
int chn_schema_param(int schema, const char *name);

/* 1 when the step is overload a (or b, when not NULL). */
int chn_op_is(const chn_step *st, const char *a, const char *b);
/* A dtype conversion (to.dtype, _to_copy), and the float dtype it converts to (-1: another). */
int chn_is_cast(const chn_step *st);
int chn_cast_dtype(const chn_step *st);
/* The argument is output 0 of step `step`. */
int chn_arg_is_value(const chn_arg *a, int step);
/* An optional tensor argument: an input (its index in *input) or None/omitted (*input = -1);
 * 0 when it is anything else (a computed value). */
int chn_optional_input(const chn_arg *a, int *input);
/* The constant, or dflt when the argument is not a number. */
double chn_num_or(const chn_arg *a, double dflt);

/* ---- dtypes, shapes, layouts ---- */

int chn_is_float(kiln_dtype t);          /* float32, bfloat16 or float16 */
const char *chn_cuda_type(kiln_dtype t); /* "float", "__nv_bfloat16", "__half" */
int chn_mid_code(kiln_dtype t);          /* the templates' *_MID: 0 fp32, 1 bf16, 2 fp16 */
/* "#define PREFIX_T<ROLE> type" and "#define PREFIX_L<ROLE>(v)" (load to float) or, with store,
 * "PREFIX_S<ROLE>(v)" (store from float) for the cpu templates. */
void chn_cpu_type_defines(kiln_strbuf *b, const char *prefix, const char *role, kiln_dtype t,
                          int store);

/* Dimension dt of t equals dimension du of u in every workload; the whole shapes do. */
int chn_same_dim(const kiln_problem *p, const kiln_tensor_spec *t, int dt,
                 const kiln_tensor_spec *u, int du);
int chn_same_shape(const kiln_problem *p, const kiln_tensor_spec *t, const kiln_tensor_spec *u);
/* "(a*b*4)": the product of dimensions [from, to) of t over axis names, "1" when empty. */
void chn_dims_expr(const kiln_problem *p, const kiln_tensor_spec *t, int from, int to, char *out,
                   size_t cap);
int64_t chn_dims_prod(const int64_t *shape, int from, int to);
int64_t chn_cdiv(int64_t a, int64_t b);

/* The permutation capture stored tensor `name` with (stored dim k = captured dim perm[k]);
 * identity when contiguous, a contiguous copy, or not described. 0 with why for a broadcast
 * ("expand") or malformed layout. */
int chn_layout_perm(const cJSON *kiln, const char *name, int ndim, int *perm, char *why, size_t wl);
int chn_perm_equal(const int *a, const int *b, int n);

/* ---- hand-written problems (no "kiln" object) ---- */

/* A tensor input with one of the names (rank ndim, or any when -1), or -1. */
int chn_input_named(const kiln_problem *p, const char *const *names, int ndim);
/* A float scalar input with one of the names, or -1. */
int chn_scalar_named(const kiln_problem *p, const char *const *names);
/* eps assigned in the reference ("EPS = 1e-6", "eps=1e-5"), else dflt. */
double chn_eps_from_reference(const kiln_problem *p, double dflt);
extern const char *const CHN_X_NAMES[], *const CHN_W_NAMES[], *const CHN_B_NAMES[],
                                                                  *const CHN_EPS_NAMES[];

/* ---- emitting ---- */

/* "type name, type name, ..." of an entry point from the problem's ABI signature. */
void chn_params_of(const kiln_signature *sig, kiln_strbuf *b);
/* A pointer argument: input in_index's name, else output out_index's, else "(null_type)0". */
void chn_ptr_arg(kiln_strbuf *b, const kiln_problem *p, int in_index, int out_index,
                 const char *null_type);
/* The candidate: the banner over body, then body (which it frees). CPU banners name no
 * parameters: they do not apply, and identical sources let sweep dedupe them. */
char *chn_with_banner(const kiln_family *f, const kiln_match *m, const int64_t *pt, int cuda,
                      kiln_strbuf *body);

/* ---- the family interface's shared parts ---- */
double chn_flops_per_element(const kiln_problem *p, const kiln_match *m, const kiln_workload *w,
                             double per);
double chn_min_bytes(const kiln_problem *p, const kiln_match *m, const kiln_workload *w);
kiln_tolerance chn_tolerance(kiln_dtype t);

#endif
