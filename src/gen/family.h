/* family.h: a kernel family is one readable unit: a real CUDA template with #define parameters, a
 * parameter table with domains, constraint predicates that return a reason, launch geometry, byte
 * and flop counts, a CPU emitter, a matcher that recognises the family in a problem, and the
 * tolerance it promises. Search and sweep see families only through this interface.
 *
 * How a family turns a point of its space into a candidate (docs/families.md): the template defines
 * a
 * __device__ body with fixed arguments (pointers and sizes); the emitter writes the #define lines
 * of the point, the `// kiln:` launch directives (expressions over the problem's axis names), the
 * template, and an `extern "C"` entry point whose parameter list is exactly the problem's ABI
 * signature (kiln_abi_signature) and that calls the body. So one template serves every problem the
 * matcher accepts, whatever its axis names or tensor order. */
#ifndef KILN_FAMILY_H
#define KILN_FAMILY_H

#include <cjson/cJSON.h>

#include "../backend/abi.h"
#include "../formats/opchain.h"

#define KILN_FAMILY_MAX_PARAMS 12
#define KILN_FAMILY_MAX_VALUES 16
#define KILN_MATCH_MAX_FACTS 32
/* SMs of the device persistent grids are sized for (the H200's 132): a launch line is a fixed
 * expression over the problem's axes, so a family that loops over work items sizes its grid by this
 * (a device with fewer SMs runs the grid in waves, still correct). */
#define KILN_FAMILY_SMS 132

/* One tunable parameter: its #define name and its domain. */
typedef struct {
    const char *name; /* the #define in the template, e.g. "THREADS" */
    int n_values;
    int64_t values[KILN_FAMILY_MAX_VALUES];
    const char *doc; /* one line: what it changes */
} kiln_family_param;

/* What a matcher learned about a problem: the variant of the family and the facts the emitter needs
 * (which input is x, the eps, whether a SiLU follows, the row length expression...). */
typedef struct {
    char variant[64]; /* e.g. "softmax_lastdim", "rmsnorm_1p_weight", "group_norm_silu" */
    int n_facts;
    struct {
        char key[32];
        double value;
    } facts[KILN_MATCH_MAX_FACTS];
    int input_of_role[8];  /* problem input index for each family-defined role, -1 when absent */
    int output_of_role[4]; /* problem output index for each role */
    char rows_expr[256];   /* expressions over axis names, for launch directives and sizes */
    char cols_expr[256];
    char extra_expr[4][256];
    char how[256]; /* one line: how the match was made (for logs and the dashboard) */
} kiln_match;

typedef struct kiln_family {
    const char
        *name; /* "softmax", "rmsnorm", "layernorm", "groupnorm", "batchnorm", "pool", "eltwise" */
    const char *summary; /* one line */
    int n_params;
    kiln_family_param params[KILN_FAMILY_MAX_PARAMS];

    /* Recognises the family in p. Returns 1 and fills m, or returns 0 and writes why it declined
     * (e.g. "input x is not contiguous in the captured call", "softmax over dim 1, not the last").
     */
    int (*match)(const kiln_problem *p, kiln_match *m, char *why, size_t why_len);

    /* NULL when point (one value per param, in table order) is valid for every workload of p, else
     * a static or heap string naming the constraint (heap strings start with '!' and are freed by
     * the caller after skipping the '!'). */
    const char *(*check)(const kiln_problem *p, const kiln_match *m, const int64_t *point);

    /* The whole candidate source for point: banner, #defines, `// kiln:` directives, template and
     * entry point. cuda selects CUDA C; otherwise C for the cpu backend (the point may be ignored
     * there). */
    char *(*emit)(const kiln_problem *p, const kiln_match *m, const int64_t *point, int cuda);

    /* Minimum bytes of workload w (speed of light; NULL: every tensor once). */
    double (*min_bytes)(const kiln_problem *p, const kiln_match *m, const kiln_workload *w);
    /* Useful flops of workload w (NULL: none counted; a memory-bound op's bytes bind its speed of
     * light). Both reach the gate through kiln_family_sol_fill where the problem declares none. */
    double (*flops)(const kiln_problem *p, const kiln_match *m, const kiln_workload *w);

    /* The tolerance the family promises for an output of dtype t (never looser than the default).
     */
    kiln_tolerance (*tolerance)(kiln_dtype t);

    /* Optional (NULL: none). The family's own pick for p: the point its rule of thumb expects to
     * be good on p's shapes, written to point (returns 0), or -1 when it has no rule for p. It is
     * checked like any other point (kiln_family_start_index); sweeps run it first and searches
     * start from it, so that a search or a sweep cut short by time still has an informed point. */
    int (*start)(const kiln_problem *p, const kiln_match *m, int64_t *point);

    /* Optional (NULL: none). What every kernel the family emits for p assumes of its inputs'
     * contents beyond the dtypes, shapes and strides a gate checks: a new JSON object for the
     * library entry's "assumes", {input name: {"structure": {...}}} in capture_stats.py's form
     * (an attention kernel that skips the tiles outside a band: the mask's band), or NULL when
     * it assumes nothing; cuda: for the kernels of that backend (a cpu kernel may assume less).
     * The install path checks it before a launch and runs the eager calls where it does not hold
     * (docs/install.md). */
    cJSON *(*assumes)(const kiln_problem *p, const kiln_match *m, int cuda);

    /* 1 when every candidate calls a vendor library that eager PyTorch calls for the same op
     * (cuBLASLt): a win over eager is another configuration of the same code, a few per cent at
     * most (bench/RESULTS.md), so kiln optimize prepares a problem only such families match after
     * the others. */
    int vendor;

    /* 1 when the family's kernels are known to be slower than the vendor library eager calls for
     * the same ops, on every shape measured (wgmma before TMA: bench/RESULTS.md): kiln optimize
     * prepares a problem only such families and vendor ones match after the others, as above. */
    int behind;
} kiln_family;

/* The built-in families (registry.c), in the order sweep and search try them. */
int kiln_family_count(void);
const kiln_family *kiln_family_at(int i);

const kiln_family *kiln_family_find(const char *name);

/* Size of the parameter space (product of the domains). */
int64_t kiln_family_space_size(const kiln_family *f);
/* The point with this index in the space (mixed radix, first parameter fastest). */
void kiln_family_point(const kiln_family *f, int64_t index, int64_t *point);
/* The index of point in the space (the inverse of kiln_family_point), -1 when a value is outside
 * its domain. */
int64_t kiln_family_point_index(const kiln_family *f, const int64_t *point);
/* Whether point passes the family's check for p. */
int kiln_family_point_ok(const kiln_family *f, const kiln_problem *p, const kiln_match *m,
                         const int64_t *point);
/* Where a search or a sweep starts on p: the family's start point when it has one and it passes
 * the check, else the first valid point among the first `scan` indices; -1 when none is valid
 * there. *from_rule (may be NULL) says which. */
int64_t kiln_family_start_index(const kiln_family *f, const kiln_problem *p, const kiln_match *m,
                                int64_t scan, int *from_rule);
/* "THREADS=256 VEC=8 ROWS=4", caller frees. */
char *kiln_family_point_str(const kiln_family *f, const int64_t *point);

/* Helpers for emitters. */
/* The whole candidate: the banner every generated file starts with (family, variant, parameters,
 * how it matched, hash of the body), then body, which it takes (and frees). */
char *kiln_family_source(const kiln_family *f, const kiln_match *m, const int64_t *point,
                         char *body);
/* "#define NAME VALUE\n" for every parameter of point. */
char *kiln_family_defines(const kiln_family *f, const int64_t *point);
/* The template text of a family, embedded at build time from src/gen/templates/NAME.cu (or .c). */
const char *kiln_family_template(const char *file_name);
/* The prototype of an entry point taking p's ABI signature (kiln_abi_signature): `extern "C"
 * __global__ void __launch_bounds__(BOUNDS) ENTRY(...)` for CUDA (no bounds when NULL), `void
 * ENTRY(...)` for the cpu backend. Caller frees. */
char *kiln_family_prototype(const kiln_problem *p, int has_scratch, int cuda, const char *bounds,
                            const char *entry);
/* A CUDA entry point that takes tensor maps (`// kiln: tensormap` lines, docs/abi.md section 2):
 * kiln_family_prototype (no scratch) with one `const __grid_constant__ kiln_tensormap NAME`
 * parameter per name appended, in order. The source defines the type first, as
 * KILN_FAMILY_TMAP_TYPE spells it. Caller frees. */
#define KILN_FAMILY_TMAP_TYPE                                                                      \
    "struct __align__(64) kiln_tensormap { unsigned long long bits[16]; };\n"
char *kiln_family_prototype_tmaps(const kiln_problem *p, const char *bounds, const char *entry,
                                  int n_tmaps, const char *const *names);
/* A device function `NAME(float *d, A, unsigned long long db, int scale_d)` issuing one
 * wgmma.mma_async.m64nNk16 (k32 for fp8; sm_90a) with fp32 accumulators d[0 .. N/2): d = A·B when
 * scale_d is 0,
 * d += A·B otherwise. A is a shared-memory descriptor (`unsigned long long da`: no <stdint.h>
 * needed), or with a_regs four registers of 16-bit pairs (`const unsigned *a`: the m64k16 fragment,
 * 16 rows a warp); B is a descriptor, K-major, or MN-major with trans_b. t: bfloat16 or float16
 * inputs, or float8_e4m3fn / float8_e5m2 (A a descriptor, both K-major). */
void kiln_family_emit_wgmma(kiln_strbuf *b, const char *name, int64_t n, kiln_dtype t, int a_regs,
                            int trans_b);
/* snprintf for expressions whose length the caller checks (no truncation warning). */
void kiln_family_fmt(char *out, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The greatest common divisor (gcd(0, b) = b), for vector widths that divide every workload. */
int64_t kiln_family_gcd(int64_t a, int64_t b);

/* Match facts. */
void kiln_match_set(kiln_match *m, const char *key, double value);
/* Returns the fact or dflt when absent. */
double kiln_match_get(const kiln_match *m, const char *key, double dflt);

/* Tries every family on p; fills up to max matches (family + match). Returns how many matched; why
 * collects one line per family that declined. */
int kiln_family_match_all(const kiln_problem *p, const kiln_family **fams, kiln_match *matches,
                          int max, char *why, size_t why_len);
/* Keeps, of n matches, those of the family named only (NULL: all), in order. Returns how many. */
int kiln_family_keep_only(const char *only, const kiln_family **fams, kiln_match *matches, int n);

/* The speed of light's figures of each workload of p that p does not declare (kiln.min_bytes,
 * kiln.flops), from the first of the n matched families that has them: w->sol_bytes (never more
 * than every tensor once) and w->sol_flops. A problem SOL-ExecBench publishes declares neither: a
 * paged attention's bytes are then its sequences' pages, not the whole pool (which would make a
 * kernel that reads only those `impossible`), and a GEMM's speed of light its flops at the tensor
 * cores' rate. Call after loading p, before the gate times it (tolerances do not read them). */
void kiln_family_sol_fill_matched(kiln_problem *p, const kiln_family *const *fams,
                                  const kiln_match *matches, int n);
/* The same, matching every family first. */
void kiln_family_sol_fill(kiln_problem *p);

#endif
