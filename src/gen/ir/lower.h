/* lower.h: what the lowering machinery (lower.c) gives the table of lowering rules (rules.c): the
 * values of the op chain as IR nodes seen through their dims, and the operations every rule is
 * made of — pointwise ops with PyTorch's type promotion, casts, views, reductions, windows and
 * gathers. Private to src/gen/ir. */
#ifndef KILN_GEN_IR_LOWER_H
#define KILN_GEN_IR_LOWER_H

#include "ir.h"

/* A value of the op chain: a node seen through its logical dims. axis[d] is the domain axis of dim
 * d, -1 for a dim of size 1; prio is its type-promotion class (2 a tensor with dims, 1 a zero-dim
 * tensor, 0 a Python number); node -1 is None. */
typedef struct {
    int node;
    int ndim;
    int axis[KILN_MAX_DIMS];
    int prio;
} lval;

typedef struct {
    kir *ir;
    const kiln_problem *p;
    const kiln_opchain *c;
    const kiln_op *op; /* the op being lowered, for messages */
    lval in[64];
    lval res[KILN_OPCHAIN_MAX_OPS][KILN_OP_MAX_RESULTS];
    char *why;
    size_t n;
} lower_ctx;

/* One row of the table: the aten names it lowers (space separated; `name_` in-place variants
 * match their functional form), the function, and the kir_op / kir_red / variant it passes on. */
typedef struct lower_rule {
    const char *names;
    int (*fn)(lower_ctx *L, const kiln_op *op, const struct lower_rule *r, lval *out);
    int code;
} lower_rule;

/* Input i of the problem as a value (a by-value scalar, or a load through the input's layout; a
 * dim the model broadcast is read with stride 0), its dims on axes of their own, or (like >= 0,
 * bound already) on input like's axes but dim skip (the inputs of a cat); output o bound to value
 * v, checked against the problem's shape and dtype and stored through its layout. 0 with the
 * reason in L. */
int lower_bind_input(lower_ctx *L, int i, int like, int skip);
int lower_bind_output(lower_ctx *L, int o, lval v);

/* Records why lowering stops (printf style); returns 0 so that rules can `return fail(...)`. */
int lower_fail(lower_ctx *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- arguments ---- */
/* The value of a tensor or number argument (position pos or keyword name); node -1 when absent or
 * None. Fails on other kinds. */
int lower_arg(lower_ctx *L, const kiln_op *op, int pos, const char *name, lval *out);
/* Numbers, bools, integer lists (a single number is a list of one), dtypes: 0 when absent (dflt
 * applies), 1 when read, -1 on another kind. */
int arg_num(const kiln_op *op, int pos, const char *name, double *out);
int arg_ints(const kiln_op *op, int pos, const char *name, int64_t *out, int *n);
int arg_dtype(const kiln_op *op, int pos, const char *name, kiln_dtype *out);
/* The text of a string argument ("tanh"), or NULL. */
const char *arg_text(const kiln_op *op, int pos, const char *name);

/* ---- values ---- */
kiln_dtype lv_dtype(const lower_ctx *L, lval v);
/* The size of dim d as an expression ("1" for a dim of size 1). */
const char *lv_size(lower_ctx *L, lval v, int d);
/* A number as a value (float32, a Python number). */
int lv_const(lower_ctx *L, double value, lval *out);
/* d normalised against ndim (negative counts from the end); -1 when out of range. */
int lv_dim(int d, int ndim);

/* ---- building blocks of rules ---- */
/* Pointwise op over operands a[0 .. n) (broadcast), constants k0 k1; dtype by the op's rule, or
 * `set` for KIR_RES_SET. */
int lower_pointwise(lower_ctx *L, int op, const lval *a, int n, double k0, double k1,
                    kiln_dtype set, lval *out);
/* The binary form of lower_pointwise. */
int lower_binary(lower_ctx *L, int op, lval a, lval b, lval *out);
/* x cast to t (x itself when it has that dtype). */
int lower_cast(lower_ctx *L, lval x, kiln_dtype t, lval *out);
/* PyTorch's result type of the operands (dimensioned tensors > zero-dim tensors > numbers). */
kiln_dtype lower_promote(lower_ctx *L, const lval *a, int n);
/* Reduction `red` of x over dims (n == 0: every dim), keepdim or not, result dtype t; *node gets
 * the reduction node (for its second result). */
int lower_reduce(lower_ctx *L, lval x, const int64_t *dims, int n, int keepdim, int red,
                 kiln_dtype t, lval *out, int *node);
/* The second result of reduction node r, shaped like its first (first), dtype t. */
int lower_part(lower_ctx *L, int r, lval first, kiln_dtype t, lval *out);
/* The number of elements of x's dims (dims, n; n == 0: all) as a float32 value. */
int lower_count(lower_ctx *L, lval x, const int64_t *dims, int n, double minus, lval *out);
/* Pooling of the last nd dims of x: window .n, kernel, stride, pad, dilation set in m; kind
 * KR_AVG or KR_MAXPOOL; out_size the pooled sizes (expressions); *node gets the window node. */
int lower_window(lower_ctx *L, lval x, kir_map m, int kind, char out_size[][KIR_EXPR], kiln_dtype t,
                 lval *out, int *node);
/* The depthwise convolution of x ([.., C, spatial...]) by w ([C, 1, kernel...]) over window m
 * (stride, pad, dilation; the kernel from w), unrounded float32; out_size the result's sizes. */
int lower_conv(lower_ctx *L, lval x, lval w, kir_map m, char out_size[][KIR_EXPR], lval *out);
/* x read at src = (dst * mul + add) / den along its dims d0 .. d0 + m.n, new sizes out_size, fill
 * where outside. */
int lower_remap(lower_ctx *L, lval x, int d0, kir_map m, char out_size[][KIR_EXPR], double fill,
                lval *out);

/* x[..., idx, ...]: dim d of x read at the values of the integer tensor idx, whose dims replace
 * it (aten::index with one index tensor; negative indices count from the end). */
int lower_gather(lower_ctx *L, lval x, int d, lval idx, lval *out);

/* The coordinate of x's dim d at each point (int64; 0 for a dim of size 1), shaped like x with its
 * other dims of size 1. */
int lower_position(lower_ctx *L, lval x, int d, lval *out);

/* ---- views ---- */
int view_unsqueeze(lower_ctx *L, lval x, int d, lval *out);
int view_squeeze(lower_ctx *L, lval x, const int64_t *dims, int n, lval *out);
int view_permute(lower_ctx *L, lval x, const int64_t *perm, int n, lval *out);
int view_expand(lower_ctx *L, lval x, const int64_t *sizes, int n, lval *out);
/* A reshape to sizes (one may be -1). */
int view_reshape(lower_ctx *L, lval x, const int64_t *sizes, int n, lval *out);
/* Dim d of x split into dims of sizes[0 .. k) (numbers, row-major; they multiply to the dim's size
 * in every workload): the dim's axis becomes the composite of the new dims' axes
 * (kir_axis_compose), so that a value computed along it is read either way (channels as groups and
 * channels per group). */
int view_split(lower_ctx *L, lval x, int d, const int64_t *sizes, int k, lval *out);
/* Dims d .. d + k of x merged into one dim: the composite of their axes (the one they already make
 * when a split made them). */
int view_merge(lower_ctx *L, lval x, int d, int k, lval *out);
/* A slice (select: step 0, the dim is dropped) of an input's dim. */
int view_slice(lower_ctx *L, lval x, int d, int64_t start, int64_t end, int64_t step, lval *out);

#endif
