/* opchain.h: the one form of the aten calls a problem computes (its op chain) and the one reader
 * that builds it from the problem's "kiln" object.
 *
 * A problem says what it computes in three ways, all read into one kiln_opchain:
 *  - a captured aten call ("kind": "aten", "aten": "aten::_softmax.default", "args": {"args":
 * [...], "kwargs": {...}} with tensors as {"tensor": i}): a chain of one op whose kept results are
 * the problem's outputs ("dropped_outputs" lists the ones capture dropped);
 *  - a captured leaf module or a hand- or fusion-written chain ("kind": "module" | "chain",
 *    "ops": [{"aten": "aten::mul.Tensor", "args": [{"ref": "v0"}, 2.0], "kwargs": {}, "out": "v1",
 *    "dtypes": ["float32"]}, ...], "outputs": ["v1"]}): a value is named by {"ref": NAME}, NAME a
 *    problem input or an earlier op's "out" (docs/capture.md);
 *  - a captured problem written before "ops" existed: the straight-line run() capture generates
 *    (`v1 = torch.ops.aten.mul.Tensor(v0, 2.0)` lines, layout restores, one return) is read
 * instead. Families match their patterns on the chain; the tensor-expression generator lowers it.
 * Dtypes and layouts of the problem's inputs and outputs are in the problem (kiln_tensor_spec); the
 * chain refers to inputs by index and adds what only it knows: the ops, their arguments, how values
 * flow from producer to consumer, and the dtype of intermediate results when capture recorded it.
 */
#ifndef KILN_OPCHAIN_H
#define KILN_OPCHAIN_H

#include "problem.h"

#define KILN_OPCHAIN_MAX_OPS 48
#define KILN_OP_MAX_ARGS 12
#define KILN_OP_MAX_KWARGS 8
#define KILN_OP_MAX_RESULTS 4
#define KILN_OPCHAIN_MAX_OUTPUTS 8
#define KILN_OP_MAX_LIST 64 /* tensors in a list argument (a cat of DenseNet's feature maps) */

/* A tensor the chain reads: a problem input, or result `slot` of op `op`. */
typedef struct {
    int input; /* problem input index, or -1 */
    int op;    /* when input < 0: the op that computes it */
    int slot;  /* and which of its results */
} kiln_value;

typedef enum {
    KILN_ARG_NONE,   /* None */
    KILN_ARG_TENSOR, /* a tensor: .value */
    KILN_ARG_NUM,    /* an int or a float, non-finite ones included: .num */
    KILN_ARG_BOOL,   /* .num is 0 or 1 */
    KILN_ARG_DTYPE,  /* a torch dtype kiln has: .dtype */
    KILN_ARG_INTS,   /* a list of up to KILN_MAX_DIMS integers (dims, sizes): .ints */
    KILN_ARG_OTHER,  /* any other constant ('tanh', a device, a layout, a longer list): .text; a
                        list of up to KILN_OP_MAX_LIST tensors and Nones (cat's tensors, index's
                        indices) also fills .values */
} kiln_arg_kind;

typedef struct {
    kiln_arg_kind kind;
    kiln_value value;
    double num;
    kiln_dtype dtype;
    int n_ints;
    int64_t ints[KILN_MAX_DIMS];
    int n_values; /* KILN_ARG_OTHER, a list of tensors: .values, None as input -1 and op -1 */
    kiln_value values[KILN_OP_MAX_LIST];
    char text[48]; /* how the argument was written (a name, 'tanh', torch.float32), for messages */
} kiln_arg;

typedef struct {
    char aten[104];    /* "aten::add_.Tensor" */
    char name[64];     /* "add_" */
    char overload[32]; /* "Tensor", "default" */
    int inplace;       /* "add_": writes its first argument, which then names the result */
    int tuple;         /* returns a tuple of tensors (several results, or one indexed as [k]) */
    int n_args;        /* positional arguments, in order */
    kiln_arg args[KILN_OP_MAX_ARGS];
    int n_kwargs;
    char kwarg_name[KILN_OP_MAX_KWARGS][32];
    kiln_arg kwargs[KILN_OP_MAX_KWARGS];
    int n_results; /* tensors it returns that the chain knows of */
    /* their dtypes where the problem records them; KILN_DTYPE_COUNT when unknown */
    kiln_dtype result_dtype[KILN_OP_MAX_RESULTS];
} kiln_op;

typedef struct {
    char kind[16]; /* where it was read from: "aten", "module" or "chain" */
    int n_ops;     /* in execution order; an op reads only inputs and earlier ops' results */
    kiln_op ops[KILN_OPCHAIN_MAX_OPS];
    int n_outputs; /* = the problem's outputs, in order */
    kiln_value outputs[KILN_OPCHAIN_MAX_OUTPUTS];
} kiln_opchain;

/* Whether p's "kiln" object describes an op chain (it has a "kind" or "ops"). Problems without one
 * (hand-written, SOL-ExecBench's) are recognised by their op_type and input names instead. */
int kiln_opchain_described(const kiln_problem *p);
/* Reads p's op chain from p->kiln (and, for a captured problem without "ops", its generated
 * reference). KILN_OK and *out (free with kiln_opchain_free); KILN_ERR_UNSUPPORTED when p describes
 * no chain (no "kiln" object, or neither a "kind" of aten, module or chain nor "ops": hand-written
 * problems, which families recognise by op_type); KILN_ERR_FORMAT when the description cannot be
 * read (an unknown name, an argument of an unknown form, outputs that do not match the problem's).
 * err says which, naming the op or the line. */
int kiln_opchain_read(const kiln_problem *p, kiln_opchain **out, kiln_err *err);
void kiln_opchain_free(kiln_opchain *c);

/* The argument at position pos (-1: keyword only) or given by keyword name; NULL when the call
 * leaves it out (the schema's default applies). */
const kiln_arg *kiln_op_arg(const kiln_op *op, int pos, const char *name);
/* 1 when op is the aten overload `aten` ("aten::mul.Tensor"). */
int kiln_op_is(const kiln_op *op, const char *aten);
/* The input a tensor argument is (its index), or -1 (absent, not a tensor, an op's result). */
int kiln_arg_input(const kiln_arg *a);
/* 1 when the argument is result `slot` of op `op`. */
int kiln_arg_is_result(const kiln_arg *a, int op, int slot);
/* The argument's number, or dflt when it is absent or not a number (bools count as numbers). */
double kiln_arg_num(const kiln_arg *a, double dflt);

#endif
