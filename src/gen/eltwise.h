/* eltwise.h: what the eltwise family's three files share: eltwise.c (the family: its table,
 * matcher, constraints and costs), eltwise_chain.c (a problem read as a chain of SSA values with
 * eager PyTorch's dtypes, and the shapes its inputs are read in) and eltwise_emit.c (the CUDA and C
 * emitters). Private to them. */
#ifndef KILN_ELTWISE_H
#define KILN_ELTWISE_H

#include "family.h"

enum { P_FAST, P_THREADS, P_HINT, P_GRID, P_UNROLL, P_VBYTES, P_COUNT };

#define ELT_MAX_VALUES 96
#define ELT_MAX_OUT 4
#define ELT_MAX_IN 16
#define ELT_EXPR 256
/* SMs of the H200 the persistent grid is sized for. */
#define ELT_SMS 132

extern const kiln_family kiln_family_eltwise;

/* The ops: code, name (as in the variant), and the fp32 expression: $a and $b are the operands,
 * $0 and $1 the op's constants (alpha, exponent, bounds, slope). */
#define ELT_OPS(X)                                                                                 \
    X(OP_ADD, "add", "$a + $0 * $b")                                                               \
    X(OP_SUB, "sub", "$a - $0 * $b")                                                               \
    X(OP_MUL, "mul", "$a * $b")                                                                    \
    X(OP_DIV, "div", "$a / $b")                                                                    \
    X(OP_NEG, "neg", "-$a")                                                                        \
    X(OP_ABS, "abs", "fabsf($a)")                                                                  \
    X(OP_EXP, "exp", "elt_exp($a)")                                                                \
    X(OP_LOG, "log", "logf($a)")                                                                   \
    X(OP_SQRT, "sqrt", "sqrtf($a)")                                                                \
    X(OP_RSQRT, "rsqrt", "elt_rsqrt($a)")                                                          \
    X(OP_RECIP, "reciprocal", "1.f / $a")                                                          \
    X(OP_SIGMOID, "sigmoid", "elt_sigmoid($a)")                                                    \
    X(OP_TANH, "tanh", "tanhf($a)")                                                                \
    X(OP_RELU, "relu", "elt_relu($a)")                                                             \
    X(OP_SILU, "silu", "elt_silu($a)")                                                             \
    X(OP_SQUARE, "square", "$a * $a")                                                              \
    X(OP_SIN, "sin", "sinf($a)")                                                                   \
    X(OP_COS, "cos", "cosf($a)")                                                                   \
    X(OP_ERF, "erf", "erff($a)")                                                                   \
    X(OP_GELU_ERF, "gelu", "elt_gelu_erf($a)")                                                     \
    X(OP_GELU_TANH, "gelu_tanh", "elt_gelu_tanh($a)")                                              \
    X(OP_POW_S, "pow", "powf($a, $0)")                                                             \
    X(OP_POW_T, "pow", "powf($a, $b)")                                                             \
    X(OP_CLAMP, "clamp", "elt_clamp($a, $0, $1)")                                                  \
    X(OP_LEAKY, "leaky_relu", "elt_leaky($a, $0)")                                                 \
    X(OP_MAX, "maximum", "elt_max($a, $b)")                                                        \
    X(OP_MIN, "minimum", "elt_min($a, $b)")                                                        \
    X(OP_CAST, "cast", "$a")

#define ELT_OP_CODE(code, name, expr) code,
typedef enum { ELT_OPS(ELT_OP_CODE) OP_COUNT } elt_op_code;
/* Per op code: its name and its expression. */
typedef struct {
    const char *name, *expr;
} elt_op_info;
extern const elt_op_info ELT_OP_INFO[OP_COUNT];

/* Ops that ELT_FAST computes differently. */
int elt_op_is_fast(int op);
int elt_is16(kiln_dtype t); /* bfloat16 or float16 */

/* ---- the chain: SSA values with dtypes ---- */

typedef enum { V_TENSOR, V_SCALAR, V_CONST, V_OP } elt_v_kind;

typedef struct {
    elt_v_kind kind;
    int op; /* V_OP: the elt_op_code */
    int a[2], n_a;
    double k[2];
    kiln_dtype dtype;
    int prio;  /* type promotion: 2 dimensioned tensor, 1 zero-dim tensor, 0 Python scalar */
    int input; /* problem input index (V_TENSOR, V_SCALAR) */
    double value;
    int live;
} elt_val;

/* Values 0 .. n_inputs-1 are the problem's inputs, in order. */
typedef struct {
    int n;
    elt_val v[ELT_MAX_VALUES];
    int n_out;
    int out_val[ELT_MAX_OUT];
} elt_chain;

typedef struct {
    int n_in;               /* tensor inputs the chain reads */
    int in_idx[ELT_MAX_IN]; /* their problem input index */
    int in_val[ELT_MAX_IN]; /* their chain value */
    int D;                  /* merged output dims */
    char size[KILN_MAX_DIMS][ELT_EXPR];
    char stride[ELT_MAX_IN][KILN_MAX_DIMS][ELT_EXPR]; /* "0" where broadcast */
    int inner_bcast[ELT_MAX_IN];                      /* broadcast along the innermost merged dim */
    int inner_unit[ELT_MAX_IN];                       /* stride 1 along the innermost merged dim */
    char total[ELT_EXPR * 2];
    int64_t total_max, inner_gcd;
} elt_shape;

typedef struct {
    elt_chain ch;
    elt_shape sh;
    char how[128];
} elt_problem;

/* Reads everything the family needs from p; 0 with a reason when p is not an eltwise chain. */
int elt_read(const kiln_problem *p, elt_problem *ep, char *why, size_t n);

/* The candidate for point pt (CUDA), or the one C source of the cpu backend; f is the family the
 * banner and the #defines name (the caller's: the emitters call nothing back in eltwise.c). */
char *elt_emit_cuda(const kiln_family *f, const kiln_problem *p, const kiln_match *m,
                    const int64_t *pt, const elt_problem *ep);
char *elt_emit_cpu(const kiln_family *f, const kiln_problem *p, const kiln_match *m,
                   const elt_problem *ep);

#endif
