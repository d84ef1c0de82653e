/* chnorm.h: what the channel-norm families (groupnorm.c, batchnorm.c) share, implemented in
 * chnorm.c: a problem read as a short chain of aten calls, shapes and layouts, and emitter helpers.
 * Private to those three files. */
#ifndef KILN_CHNORM_H
#define KILN_CHNORM_H

#include "family.h"

extern const kiln_family kiln_family_groupnorm, kiln_family_batchnorm;

/* Dynamic shared memory a candidate may ask for (of the 227 KiB an SM gives a block). */
#define CHN_MAX_SMEM (200 * 1024)
/* H200's SMs: persistent grids are sized in multiples of them (other parts are correct, only
 * shaped less well). */
#define CHN_SMS 132

/* ---- the op chain of a problem ---- */

#define CHN_MAX_ARGS 10

/* Reads p's op chain (kiln_opchain_read); 0 with why when there is none, or when an op is not one
 * the two families' patterns use (the most useful reason sweep can print). Free *out with
 * kiln_opchain_free. */
int chn_chain_read(const kiln_problem *p, kiln_opchain **out, char *why, size_t wl);
/* The argument of op given for the schema parameter `param` ("eps"), by position or keyword; NULL
 * when left out. op must have come through chn_chain_read. */
const kiln_arg *chn_arg(const kiln_op *op, const char *param);
/* Whether op's schema has the parameter. */
int chn_has_param(const kiln_op *op, const char *param);
/* A dtype conversion (to.dtype, _to_copy), and the float dtype it converts to (-1: another). */
int chn_is_cast(const kiln_op *op);
int chn_cast_dtype(const kiln_op *op);
/* An optional tensor argument: an input (its index in *input) or None/omitted (*input = -1);
 * 0 when it is anything else (a computed value). */
int chn_optional_input(const kiln_arg *a, int *input);

/* ---- dtypes, shapes, layouts ---- */

int chn_is_float(kiln_dtype t); /* float32, bfloat16 or float16 */
int chn_mid_code(kiln_dtype t); /* the templates' *_MID: 0 fp32, 1 bf16, 2 fp16 */
/* "#define PREFIX_T<ROLE> type" and "#define PREFIX_L<ROLE>(v)" (load to float) or, with store,
 * "PREFIX_S<ROLE>(v)" (store from float) for the cpu templates. */
void chn_cpu_type_defines(kiln_strbuf *b, const char *prefix, const char *role, kiln_dtype t,
                          int store);

/* Dimension dt of t equals dimension du of u in every workload. */
int chn_same_dim(const kiln_problem *p, const kiln_tensor_spec *t, int dt,
                 const kiln_tensor_spec *u, int du);
/* "(a*b*4)": the product of dimensions [from, to) of t over axis names, "1" when empty. */
void chn_dims_expr(const kiln_problem *p, const kiln_tensor_spec *t, int from, int to, char *out,
                   size_t cap);
int64_t chn_dims_prod(const int64_t *shape, int from, int to);
int64_t chn_cdiv(int64_t a, int64_t b);

/* The permutation t is stored in (stored dim k = captured dim perm[k], the identity when dense);
 * 0 with why for a broadcast tensor (stored once, expanded by the reference). */
int chn_layout_perm(const kiln_tensor_spec *t, int *perm, char *why, size_t wl);
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

/* A pointer argument: input in_index's name, else output out_index's, else "(null_type)0". */
void chn_ptr_arg(kiln_strbuf *b, const kiln_problem *p, int in_index, int out_index,
                 const char *null_type);
/* The candidate: the banner over body, then body (which it frees). CPU banners name no
 * parameters: they do not apply, and identical sources let sweep dedupe them. */
char *chn_with_banner(const kiln_family *f, const kiln_match *m, const int64_t *pt, int cuda,
                      kiln_strbuf *body);

/* ---- the family interface's shared parts ---- */
double chn_min_bytes(const kiln_problem *p, const kiln_match *m, const kiln_workload *w);
kiln_tolerance chn_tolerance(kiln_dtype t);

#endif
