/* ir.h: kiln's tensor-expression IR: the values a problem computes, as one DAG of loads, pointwise
 * ops, reductions and windows over one iteration domain, lowered from the problem's op chain.
 *
 * The domain. Every value varies along a subset of the domain's axes (`axes`, a bit set) and is
 * constant along the rest; a value is evaluated at a point of the domain, so broadcasting is
 * free: a [C] weight multiplied into an [N, C, H, W] activation is a load that moves along the
 * C axis only. Axes are created by the inputs' dims while lowering and unified when numpy
 * broadcasting lines two dims up (kir_axis_unify), so the domain of a problem is the set of axes
 * its outputs and reductions use. A view (permute, unsqueeze, expand, a reshape that only adds or
 * drops dims of size 1) changes which dim of a value is which axis, never the value; a reshape of
 * an input, a slice or a select becomes another strided access of the input's memory.
 *
 * The nodes. A load reads an input at a domain point through an access (an offset and a stride
 * per axis, in elements); ops are pointwise over their operands; a reduction combines its operand
 * over some axes (`red`) and varies along the others; a window reduces over a pooling window of
 * two or three axes of its operand, producing new axes; a remap evaluates its operand at other
 * coordinates (padding, nearest upsampling). Reductions and windows with two results (argmax: the
 * value and its index; the softmax pair: max and sum of exponentials; Welford: mean and the sum
 * of squared deviations) give the second through a PART node. Every node has the dtype eager
 * PyTorch gives the value: code computes in fp32 (int64 for integers) and rounds to that dtype
 * where eager would store it.
 *
 * Sizes and strides are integer expressions over the problem's axis names (the same text goes
 * into launch directives and kernel code), evaluated per workload where a decision needs numbers
 * (kir_eval). */
#ifndef KILN_GEN_IR_H
#define KILN_GEN_IR_H

#include "../../formats/opchain.h"

#define KIR_MAX_NODES 192
/* The axis table while lowering: every dim an input or a view creates takes a slot, and keeps it
 * when broadcasting unifies it with another or a reshape makes it a composite, so the table holds
 * several times the domain's leaves (Gemma-4's RoPE joined to the KV cache and repeat_kv at batch
 * 2 takes 20; a cat binds its inputs' other dims to the first's, so DenseNet's cat of 25 feature
 * maps takes 29). Sets of axes are kir_axes bit sets: 64 at most. */
#define KIR_MAX_AXES 64
typedef uint64_t kir_axes;
#define KIR_BIT(a) ((kir_axes)1 << (a))
/* an access an input or output (a cat's inputs each take one; 64 at most: the emitters keep sets
 * of accesses in a uint64_t), a map a window or a remap (each part of a cat) */
#define KIR_MAX_ACCESS 64
#define KIR_MAX_MAPS 64
#define KIR_MAX_OUT KILN_OPCHAIN_MAX_OUTPUTS
#define KIR_EXPR 128

/* Pointwise ops: code, name, operands, the result's dtype rule, and the fp32 (or int64) C
 * expression: $a $b $c are the operands, $0 $1 the op's constants. The helpers (kg_*) are in
 * src/gen/templates/gen_math.h, shared by the CPU and CUDA emissions. */
typedef enum {
    KIR_RES_PROMOTE, /* PyTorch's type promotion of the operands */
    KIR_RES_FLOAT,   /* promotion, integers become float32 (true division, transcendentals) */
    KIR_RES_BOOL,    /* comparisons and logic */
    KIR_RES_WHERE,   /* promotion of the second and third operands */
    KIR_RES_SET,     /* set by the lowering (casts) */
} kir_result_rule;

#define KIR_OPS(X)                                                                                 \
    X(KO_ADD, "add", 2, KIR_RES_PROMOTE, "$a + $0 * $b")                                           \
    X(KO_SUB, "sub", 2, KIR_RES_PROMOTE, "$a - $0 * $b")                                           \
    X(KO_MUL, "mul", 2, KIR_RES_PROMOTE, "$a * $b")                                                \
    X(KO_DIV, "div", 2, KIR_RES_FLOAT, "$a / $b")                                                  \
    X(KO_DIV_TRUNC, "div_trunc", 2, KIR_RES_PROMOTE, "truncf($a / $b)")                            \
    X(KO_DIV_FLOOR, "div_floor", 2, KIR_RES_PROMOTE, "kg_div_floor($a, $b)") /* ints: kg_idiv */   \
    X(KO_NEG, "neg", 1, KIR_RES_PROMOTE, "-$a")                                                    \
    X(KO_ABS, "abs", 1, KIR_RES_PROMOTE, "kg_abs($a)")                                             \
    X(KO_SIGN, "sign", 1, KIR_RES_PROMOTE, "kg_sign($a)")                                          \
    X(KO_EXP, "exp", 1, KIR_RES_FLOAT, "expf($a)")                                                 \
    X(KO_EXP2, "exp2", 1, KIR_RES_FLOAT, "exp2f($a)")                                              \
    X(KO_EXP_NEG, "exp_neg", 1, KIR_RES_FLOAT, "kg_exp_neg($a)") /* exp(x - max): never above 1 */ \
    X(KO_EXPM1, "expm1", 1, KIR_RES_FLOAT, "expm1f($a)")                                           \
    X(KO_LOG, "log", 1, KIR_RES_FLOAT, "logf($a)")                                                 \
    X(KO_LOG2, "log2", 1, KIR_RES_FLOAT, "log2f($a)")                                              \
    X(KO_LOG10, "log10", 1, KIR_RES_FLOAT, "log10f($a)")                                           \
    X(KO_LOG1P, "log1p", 1, KIR_RES_FLOAT, "log1pf($a)")                                           \
    X(KO_SQRT, "sqrt", 1, KIR_RES_FLOAT, "sqrtf($a)")                                              \
    X(KO_RSQRT, "rsqrt", 1, KIR_RES_FLOAT, "kg_rsqrt($a)")                                         \
    X(KO_RECIP, "reciprocal", 1, KIR_RES_FLOAT, "1.f / $a")                                        \
    X(KO_SIGMOID, "sigmoid", 1, KIR_RES_FLOAT, "kg_sigmoid($a)")                                   \
    X(KO_TANH, "tanh", 1, KIR_RES_FLOAT, "tanhf($a)")                                              \
    X(KO_SIN, "sin", 1, KIR_RES_FLOAT, "sinf($a)")                                                 \
    X(KO_COS, "cos", 1, KIR_RES_FLOAT, "cosf($a)")                                                 \
    X(KO_ERF, "erf", 1, KIR_RES_FLOAT, "erff($a)")                                                 \
    X(KO_RELU, "relu", 1, KIR_RES_PROMOTE, "kg_relu($a)")                                          \
    X(KO_SILU, "silu", 1, KIR_RES_FLOAT, "kg_silu($a)")                                            \
    X(KO_GELU, "gelu", 1, KIR_RES_FLOAT, "kg_gelu_erf($a)")                                        \
    X(KO_GELU_TANH, "gelu_tanh", 1, KIR_RES_FLOAT, "kg_gelu_tanh($a)")                             \
    X(KO_MISH, "mish", 1, KIR_RES_FLOAT, "kg_mish($a)")                                            \
    X(KO_SOFTPLUS, "softplus", 1, KIR_RES_FLOAT, "kg_softplus($a, $0, $1)")                        \
    X(KO_ELU, "elu", 1, KIR_RES_FLOAT, "kg_elu($a, $0)")                                           \
    X(KO_HARDSIGMOID, "hardsigmoid", 1, KIR_RES_FLOAT, "kg_hardsigmoid($a)")                       \
    X(KO_HARDSWISH, "hardswish", 1, KIR_RES_FLOAT, "kg_hardswish($a)")                             \
    X(KO_LEAKY, "leaky_relu", 1, KIR_RES_FLOAT, "kg_leaky($a, $0)")                                \
    X(KO_FLOOR, "floor", 1, KIR_RES_PROMOTE, "floorf($a)")                                         \
    X(KO_CEIL, "ceil", 1, KIR_RES_PROMOTE, "ceilf($a)")                                            \
    X(KO_ROUND, "round", 1, KIR_RES_PROMOTE, "rintf($a)")                                          \
    X(KO_TRUNC, "trunc", 1, KIR_RES_PROMOTE, "truncf($a)")                                         \
    X(KO_SQUARE, "square", 1, KIR_RES_PROMOTE, "$a * $a")                                          \
    X(KO_POW, "pow", 2, KIR_RES_PROMOTE, "kg_pow($a, $b)")                                         \
    X(KO_POW_K, "pow", 1, KIR_RES_PROMOTE, "kg_pow($a, $0)")                                       \
    X(KO_MAX, "maximum", 2, KIR_RES_PROMOTE, "kg_max($a, $b)")                                     \
    X(KO_MIN, "minimum", 2, KIR_RES_PROMOTE, "kg_min($a, $b)")                                     \
    X(KO_CLAMP, "clamp", 1, KIR_RES_PROMOTE, "kg_clamp($a, $0, $1)")                               \
    X(KO_EQ, "eq", 2, KIR_RES_BOOL, "$a == $b")                                                    \
    X(KO_NE, "ne", 2, KIR_RES_BOOL, "$a != $b")                                                    \
    X(KO_LT, "lt", 2, KIR_RES_BOOL, "$a < $b")                                                     \
    X(KO_LE, "le", 2, KIR_RES_BOOL, "$a <= $b")                                                    \
    X(KO_GT, "gt", 2, KIR_RES_BOOL, "$a > $b")                                                     \
    X(KO_GE, "ge", 2, KIR_RES_BOOL, "$a >= $b")                                                    \
    X(KO_NOT, "logical_not", 1, KIR_RES_BOOL, "!$a")                                               \
    X(KO_AND, "logical_and", 2, KIR_RES_BOOL, "$a && $b")                                          \
    X(KO_OR, "logical_or", 2, KIR_RES_BOOL, "$a || $b")                                            \
    X(KO_BITAND, "bitwise_and", 2, KIR_RES_PROMOTE, "$a & $b")                                     \
    X(KO_BITOR, "bitwise_or", 2, KIR_RES_PROMOTE, "$a | $b")                                       \
    X(KO_BITXOR, "bitwise_xor", 2, KIR_RES_PROMOTE, "$a ^ $b")                                     \
    X(KO_ISNAN, "isnan", 1, KIR_RES_BOOL, "kg_isnan($a)")                                          \
    X(KO_ISINF, "isinf", 1, KIR_RES_BOOL, "kg_isinf($a)")                                          \
    X(KO_WHERE, "where", 3, KIR_RES_WHERE, "$a ? $b : $c")                                         \
    X(KO_CAST, "cast", 1, KIR_RES_SET, "$a")

#define KIR_OP_CODE(code, name, arity, rule, expr) code,
typedef enum { KIR_OPS(KIR_OP_CODE) KO_COUNT } kir_op;
#undef KIR_OP_CODE

typedef struct {
    const char *name;
    int arity;
    kir_result_rule rule;
    const char *expr;
} kir_op_info;
extern const kir_op_info KIR_OP_INFO[KO_COUNT];

/* Reductions (KIR_REDUCE over axes, KIR_WINDOW over a pooling window): code, name, results. The
 * second result, where there is one, is read through a KIR_PART node. */
#define KIR_REDS(X)                                                                                \
    X(KR_SUM, "sum", 1) /* fp32 accumulation (double on the CPU) */                                \
    X(KR_PROD, "prod", 1)                                                                          \
    X(KR_MAX, "max", 1) /* NaN wins, as aten::amax */                                              \
    X(KR_MIN, "min", 1)                                                                            \
    X(KR_ARGMAX, "argmax", 2) /* value, index (the first of equal values; NaN wins) */             \
    X(KR_ARGMIN, "argmin", 2)                                                                      \
    X(KR_SOFTMAX, "softmax", 2) /* max m, sum of exp(x - m) */                                     \
    X(KR_WELFORD, "welford", 2) /* mean, sum of squared deviations from it */                      \
    X(KR_AVG, "avg", 1)         /* windows only: average pooling's sum over the divisor */         \
    X(KR_MAXPOOL, "maxpool", 2) /* windows only: max and its index in the input plane */           \
    X(KR_CONV, "conv", 1)       /* windows only: the sum of operand x weight (a depthwise conv) */

#define KIR_RED_CODE(code, name, parts) code,
typedef enum { KIR_REDS(KIR_RED_CODE) KR_COUNT } kir_red;
#undef KIR_RED_CODE

typedef struct {
    const char *name;
    int parts;
} kir_red_info;
extern const kir_red_info KIR_RED_INFO[KR_COUNT];

typedef enum {
    KIR_LOAD,   /* an element of an input: access .acc */
    KIR_SCALAR, /* a scalar input passed by value: .input */
    KIR_CONST,  /* .value, or the integer expression .expr (a count of reduced elements) */
    KIR_OP,     /* pointwise .op over .a[0 .. n_a), constants .k */
    KIR_REDUCE, /* .op (a kir_red) of .a[0] over the axes .red; argmax's index: access .acc */
    KIR_PART,   /* result .op (1 ..) of the reduction or window .a[0] */
    KIR_WINDOW, /* .op (KR_AVG, KR_MAXPOOL, KR_CONV) of .a[0] over the window .map; KR_CONV
                 * multiplies each tap by .a[1], read at the tap (the map's tap axes) */
    KIR_REMAP,  /* .a[0] at other coordinates (.map; a gather reads them from .a[1]), .k[0] outside
                 */
    KIR_POS, /* the point's position (int64): the offset of access .acc (triu's row and column) */
} kir_kind;

typedef struct {
    kir_kind kind;
    kiln_dtype dtype; /* eager's dtype: the value is rounded to it */
    kir_axes axes;    /* the domain axes it varies along */
    int op;
    int n_a;
    int a[3];
    double k[3];
    int input;    /* KIR_SCALAR */
    int acc;      /* KIR_LOAD; KIR_REDUCE of argmax/argmin: the index's strides; else -1 */
    double value; /* KIR_CONST */
    char expr[KIR_EXPR];
    kir_axes red; /* KIR_REDUCE */
    int map;      /* KIR_WINDOW, KIR_REMAP */
} kir_node;

/* A strided walk over the domain: an input's elements (tensor >= 0), an output's (tensor =
 * -1 - output), or a position (tensor = KIR_INDEX: argmax's flat index, KIR_POS). While lowering,
 * dims are the value's logical dims (dim_axis -1: a dim of size 1); kir_finish turns them into a
 * stride per domain axis. */
#define KIR_INDEX (-1000)
typedef struct {
    int tensor;
    char offset[KIR_EXPR];
    int ndim;
    int dim_axis[KILN_MAX_DIMS];
    char dim_stride[KILN_MAX_DIMS][KIR_EXPR];
    char stride[KIR_MAX_AXES][KIR_EXPR]; /* after kir_finish; "0" along axes it does not walk */
} kir_access;

/* A pooling window (KIR_WINDOW) or a coordinate map (KIR_REMAP) over n spatial axes: src[i] is the
 * operand's axis, dst[i] the result's. Window i reads src = dst * stride - pad + j * dilation for
 * j < kernel (adaptive: dst * in / out to ceil((dst + 1) * in / out)); a convolution's weight
 * moves along tap[i] (its kernel dims; -1 where the kernel is 1) and is read at j; a remap reads
 * src = (dst * mul + add) / den (floor), or (index[i] >= 0, a gather) the value of node index[i]
 * (negative values count from the end; the node is the remap's second operand and brings its own
 * axes, dst[i] is then unused), and gives the fill value where that is outside [0, size of src). */
typedef struct {
    int n;
    int src[3], dst[3];
    int64_t kernel[3], stride[3], pad[3], dilation[3];
    int adaptive, count_include_pad;
    int64_t divisor; /* avg: divisor_override, 0 for none */
    int64_t mul[3], add[3], den[3];
    int index[3];
    int tap[3];
} kir_map;

/* An axis is a leaf, or (n_parts > 1) the row-major composite of its parts: a reshape split its dim
 * into theirs (channels into groups and channels per group) or merged theirs into it. A value
 * that moves along a composite moves along every part; kir_finish replaces it by its parts. */
#define KIR_MAX_PARTS 4
typedef struct {
    char size[KIR_EXPR];
    int parent; /* union-find while lowering; itself for a root */
    int n_parts;
    int part[KIR_MAX_PARTS]; /* outermost first */
} kir_axis;

typedef struct {
    int node;
    int acc; /* where it is stored */
} kir_output;

typedef struct {
    const kiln_problem *p;
    int n_axes;
    kir_axis axes[KIR_MAX_AXES];
    int n_nodes;
    kir_node nodes[KIR_MAX_NODES];
    int n_acc;
    kir_access acc[KIR_MAX_ACCESS];
    int n_maps;
    kir_map maps[KIR_MAX_MAPS];
    int n_out;
    kir_output out[KIR_MAX_OUT];
    kir_axes domain;   /* after kir_finish: the axes the outputs and reductions use */
    kir_axes red;      /* the axes reduced (every reduction reduces the same set) */
    kir_axes remapped; /* axes read at other coordinates (windows, remaps): never in the domain */
    char how[160];     /* one line: what was lowered */
} kir;

/* ---- building (lower.c builds; tests build by hand) ---- */

kir *kir_new(const kiln_problem *p);
void kir_free(kir *ir);
/* A new axis of size `size` (an expression); -1 when there are too many. */
int kir_axis_new(kir *ir, const char *size);
int kir_axis_find(kir *ir, int a);
/* Makes axes a and b one axis (numpy broadcasting lined them up). 0 with a reason when their sizes
 * differ in some workload, or when one value already moves along both (x + x.T: a diagonal). */
int kir_axis_unify(kir *ir, int a, int b, char *why, size_t n);
/* Makes axis a (its root) the row-major composite of parts[0 .. n), n >= 2, outermost first. 1
 * when it is, or already was with the same parts; 0 with a reason when it is the composite of
 * other parts, the sizes do not multiply to a's, or a part contains a. */
int kir_axis_compose(kir *ir, int a, const int *parts, int n, char *why, size_t wn);
/* The root of a composite whose parts are parts[0 .. n) (n >= 2), or -1. */
int kir_axis_composite_of(kir *ir, const int *parts, int n);
/* The set with every axis replaced by its root and every composite by its parts, recursively. */
kir_axes kir_axes_expand(kir *ir, kir_axes set);
/* Appends a node (axes computed from its operands unless it is a load or a reduction); -1 when
 * full. */
int kir_add(kir *ir, kir_node node);
/* The axes a convolution window (KR_CONV) reads its weight along at the tap; 0 for other nodes. */
kir_axes kir_taps(const kir *ir, const kir_node *x);
/* A constant node (dtype float32, Python-number priority). */
int kir_const(kir *ir, double value);
/* Finishes a lowered IR: canonical axes, strides per axis, the domain, the two-result rewrites
 * (mean((x - mean x)^2) is Welford's, sum(exp(x - max x)) the softmax pair), and a check that
 * every reduction reduces the same axes and that remapped axes stay inside their windows. 0 with
 * a reason when the problem is outside what the generator handles. */
int kir_finish(kir *ir, char *why, size_t n);

/* ---- reading ---- */

/* The value of an expression over p's axis names in workload w (asserts that it evaluates). */
int64_t kir_eval(const kiln_problem *p, const char *expr, int w);
/* 1 when the expressions are equal in every workload. */
int kir_same(const kiln_problem *p, const char *a, const char *b);
/* "a*b" simplified when either is 1 or both are numbers; into out. */
void kir_mul(char *out, size_t n, const char *a, const char *b);
/* The number of elements of the axes in set (their sizes multiplied). */
void kir_axes_size(const kir *ir, kir_axes set, char *out, size_t n);
/* 1 when node v depends on node u (u is v or one of its operands' ancestors). */
int kir_depends(const kir *ir, int v, int u);
/* Minimum bytes (every input the outputs need read once, every output written once) and useful
 * flops of workload w. */
double kir_bytes(const kir *ir, int w);
double kir_flops(const kir *ir, int w);
/* The IR as text: its axes, then every node the outputs need, one a line ("v7 = exp(v6) : f32
 * [c0 c2]": the dtype and the axes it moves along), then the outputs; for tests and banners. */
void kir_print(const kir *ir, kiln_strbuf *b);
/* 1 for a dtype the generator computes with (floats but float64 and float4, integers, bool). */
int kir_dtype_ok(kiln_dtype t);
int kir_dtype_is_int(kiln_dtype t); /* integers and bool: computed in int64 */

/* The problem's op chain lowered and finished (lower.c): 1 and *out, or 0 with the reason. */
int kir_lower(const kiln_problem *p, kir **out, char *why, size_t n);

#endif
