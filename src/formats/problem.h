/* problem.h: SOL-ExecBench / FlashInfer-Bench problem directories (definition.json +
 * workload.jsonl), read exactly as that schema defines them, plus kiln's namespaced "kiln" fields.
 */
#ifndef KILN_PROBLEM_H
#define KILN_PROBLEM_H

#include "../util/common.h"
#include "dtype.h"
#include "safetensors.h"

typedef enum { KILN_AXIS_CONST, KILN_AXIS_VAR, KILN_AXIS_EXPR } kiln_axis_kind;

typedef struct {
    char *name;
    kiln_axis_kind kind;
    int64_t value;    /* const axes: the value; otherwise 0 */
    char *expression; /* expr axes: the expression; otherwise NULL */
} kiln_axis;

/* How capture stored a tensor ("kiln": {"layouts": {NAME: ...}}, docs/capture.md): dense in some
 * order of its dims, possibly with broadcast dims stored once. The definition's shape is the
 * stored shape; the reference permutes (and expands) it back to what the model had. */
typedef struct {
    int permuted;            /* stored in an order other than the captured dims' */
    int perm[KILN_MAX_DIMS]; /* stored dim k holds captured dim perm[k]; the identity if not
                                permuted */
    int expanded;            /* dims the model broadcast (stride 0) are stored once, with size 1 */
} kiln_layout;

typedef struct {
    char *name;
    kiln_dtype dtype;
    int is_scalar;                  /* "shape": null: a Python scalar, passed to kernels by value */
    int ndim;                       /* 0 for shape [] (a 0-d tensor) and for scalars */
    int axis[KILN_MAX_DIMS];        /* index into problem->axes per dimension; -1: a literal size */
    int64_t literal[KILN_MAX_DIMS]; /* the size where axis[d] is -1 (a shape entry like "4") */
    kiln_layout layout;             /* dense row-major unless "kiln.layouts" says otherwise */
} kiln_tensor_spec;

/* Tolerance: an output passes when every element has |out - ref| <= atol + rtol * |ref| AND the
 * relative L2 error ||out - ref|| / ||ref|| <= rel_l2 (when ||ref|| > 0). The L2 test is what stops
 * an all-zero output from passing on small references.
 * A workload that carries SOL-ExecBench's "correctness" is judged by that benchmark's rules instead
 * (sol = 1): at least matched_ratio of the elements within atol + rtol * |ref|, and, when
 * error_cap > 0, no element off by more than error_cap; rel_l2 is not used. */
typedef struct {
    double atol, rtol, rel_l2;
    int sol;
    double matched_ratio, error_cap;
} kiln_tolerance;

/* Default tolerance for an output dtype (exact for integers and bool). */
kiln_tolerance kiln_tolerance_default(kiln_dtype t);

typedef enum {
    KILN_INPUT_RANDOM,
    KILN_INPUT_SCALAR,
    KILN_INPUT_SAFETENSORS,
    KILN_INPUT_CUSTOM
} kiln_input_kind;

typedef struct {
    kiln_input_kind kind;
    double scalar;    /* scalar: the value (bools as 0/1) */
    char *path;       /* safetensors: path as written in the file */
    char *tensor_key; /* safetensors */
} kiln_input_desc;

typedef struct {
    char *uuid;
    int64_t *axis_values;    /* problem->n_axes values: const, var and expr axes all resolved */
    kiln_input_desc *inputs; /* problem->n_inputs descriptors, in definition order */
    int has_tolerance;       /* the workload line carries "tolerance" */
    kiln_tolerance tolerance;
    /* The speed of light's figures a kernel family computes for this workload where the problem
     * declares none (kiln.min_bytes, kiln.flops): a paged cache's keys read, not its whole pool; an
     * attention's pairs its mask keeps; a GEMM's contraction. < 0: none (kiln_family_sol_fill, in
     * src/gen, fills them after matching). */
    double sol_bytes, sol_flops;
} kiln_workload;

typedef struct {
    char *dir;                      /* the problem directory as given */
    char *name;                     /* definition "name" */
    char *op_type;                  /* may be NULL */
    char *reference;                /* PyTorch source with a global run() */
    char *custom_inputs_entrypoint; /* may be NULL */
    int n_axes;
    kiln_axis *axes;
    int n_inputs;
    kiln_tensor_spec *inputs; /* in the order of the JSON object (= run()'s argument order) */
    int n_outputs;
    kiln_tensor_spec *outputs;
    int n_constraints;
    char **constraints; /* kept as text; checked by the Python reference */
    int n_workloads;
    kiln_workload *workloads;
    /* kiln's namespaced object ("kiln": {...} in definition.json), as parsed; NULL when absent.
     * Capture writes what the op is there ("kind", "aten", "args", "ops", "module_class", ...:
     * docs/capture.md); src/formats/opchain.h reads the op chain from it. */
    struct cJSON *kiln;
    /* Fields of it kiln reads at load; negative when absent. */
    double min_bytes; /* minimum bytes moved, for speed of light; < 0: derive from the tensors */
    double flops;     /* useful flops; < 0: unknown (treated as memory-bound) */
    int has_tolerance;
    kiln_tolerance tolerance; /* "kiln": {"tolerance": {"atol":..,"rtol":..,"rel_l2":..}} */
    uint64_t source_key; /* FNV-1a of definition.json bytes then workload.jsonl bytes (cache key) */
} kiln_problem;

/* The tolerance output o is judged by on workload w: the workload's, else the problem's ("kiln":
 * {"tolerance"}), else the loosest default of the output's dtype and the float inputs' dtypes (but
 * a contraction's 8- and 4-bit ones: kiln.flops declared; an integer or bool output stays exact).
 * w = -1: no workload's own. */
kiln_tolerance kiln_problem_output_tolerance(const kiln_problem *p, int w, int o);

/* Loads DIR/definition.json and DIR/workload.jsonl. Errors name the file, the line (for jsonl) and
 * the field: bad JSON, a missing or mistyped field, an unknown dtype, a shape naming an unknown
 * axis, a workload that leaves a var axis unbound or binds an unknown one, an input descriptor of
 * an unknown type, an expr axis that does not evaluate. */
int kiln_problem_load(const char *dir, kiln_problem **out, kiln_err *err);
/* The same from memory (the fuzz target calls this); labels name the two sources in errors. */
int kiln_problem_parse(const char *definition_json, size_t def_len, const char *def_label,
                       const char *workload_jsonl, size_t wl_len, const char *wl_label,
                       kiln_problem **out, kiln_err *err);
void kiln_problem_free(kiln_problem *p);

/* Index of the axis/input/output named name, or -1. */
int kiln_problem_axis_index(const kiln_problem *p, const char *name);
int kiln_problem_input_index(const kiln_problem *p, const char *name);
int kiln_problem_output_index(const kiln_problem *p, const char *name);

/* A string (a number) field of p->kiln; NULL (dflt) when absent or of another type. */
const char *kiln_problem_kiln_str(const kiln_problem *p, const char *key);
double kiln_problem_kiln_num(const kiln_problem *p, const char *key, double dflt);

/* Shape of a tensor in a workload: fills shape[0..ndim) and returns the element count (1 for
 * scalars and 0-d tensors). */
int64_t kiln_tensor_shape(const kiln_problem *p, const kiln_tensor_spec *t, const kiln_workload *w,
                          int64_t shape[KILN_MAX_DIMS]);
/* 1 when a and b have the same shape in every workload of p. */
int kiln_tensor_same_shape(const kiln_problem *p, const kiln_tensor_spec *a,
                           const kiln_tensor_spec *b);
/* Dimension d of t as an expression over the axis names (launch directives, emitted sizes): the
 * axis's name, or its literal size. */
void kiln_tensor_dim_expr(const kiln_problem *p, const kiln_tensor_spec *t, int d, char *out,
                          size_t n);

/* Minimum bytes a kernel must move for workload w: p->min_bytes when given, else a kernel family's
 * figure (w->sol_bytes), else every input tensor read once plus every output written once. */
double kiln_problem_min_bytes(const kiln_problem *p, const kiln_workload *w);
/* Useful flops of workload w: p->flops when given, else a kernel family's figure (w->sol_flops);
 * < 0: unknown (the problem is treated as memory-bound). */
double kiln_problem_flops(const kiln_problem *p, const kiln_workload *w);
#endif
