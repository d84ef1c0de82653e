/* gate.h: the gate proves and times one candidate kernel on every workload of a problem, in an
 * isolated child process with a watchdog; outcomes are data (docs/gate.md is the contract). */
#ifndef KILN_GATE_H
#define KILN_GATE_H

#include <cjson/cJSON.h>
#include <sys/types.h>

#include "../backend/backend.h"
#include "../formats/refdata.h"

typedef enum {
    KILN_OUTCOME_OK,
    KILN_OUTCOME_COMPILE_ERROR,
    KILN_OUTCOME_MISMATCH,
    KILN_OUTCOME_UNWRITTEN,
    KILN_OUTCOME_NAN,
    KILN_OUTCOME_INPUT_MODIFIED,
    KILN_OUTCOME_TIMEOUT,
    KILN_OUTCOME_CRASHED,
    KILN_OUTCOME_RESOURCE,
    KILN_OUTCOME_IMPOSSIBLE, /* faster than the speed of light allows: the timing is not real */
    KILN_OUTCOME_SLOWER, /* right, but clearly slower than the incumbent: timing stopped early */
    KILN_OUTCOME_COUNT
} kiln_outcome;

/* "ok", "compile_error", ... */
const char *kiln_outcome_name(kiln_outcome o);
/* Parses a name; returns -1 when unknown. */
int kiln_outcome_parse(const char *name);

typedef struct {
    const char *backend; /* "cuda" or "cpu" */
    int device;
    int iters;        /* the most timed runs per workload; <= 0: the backend's default (cuda 100,
                         cpu 20) */
    int min_iters;    /* the fewest timed runs before timing may stop, never above iters; <= 0: the
                         backend's default (cuda 10, cpu 5) */
    double ci_pct;    /* timing of a workload stops once its median is known to +- this percent
                         (95 % confidence interval of the median); <= 0: run iters */
    int warmup;       /* untimed runs before timing; < 0: the backend's default */
    int max_sets;     /* input sets proved per workload; <= 0: all in the reference data (timing
                         rotates through all of them either way) */
    uint64_t seed;    /* the seed of the evaluation's random draws (poison patterns); 0: drawn from
                         the OS's random source (and reported, so a run can be reproduced) */
    double timeout_s; /* the longest one run of the candidate may take */
    int no_time;      /* prove only */
    int retime_noisy; /* time a workload whose spread is over KILN_SPREAD_LIMIT_PCT once more and
                         keep the steadier timing: always on cuda; on cpu (whose timings only
                         exercise the pipeline, and are noisy as a rule) only when set */
    /* Racing: per workload the incumbent's median time; timing stops with outcome `slower` once the
     * lower end of the challenger's confidence interval is above race_factor times it. NULL (or a
     * value <= 0): no race on that workload. */
    const double *race_us;
    int n_race;
    double race_factor; /* <= 0: the default, 1.3 */
} kiln_gate_options;

void kiln_gate_options_default(kiln_gate_options *opt);

/* ---- proof of one output (prove.c) ---- */

/* The verdict on one output against its reference, from the counts of a check (device.c). */
typedef struct {
    kiln_outcome outcome; /* OK, UNWRITTEN, NAN or MISMATCH */
    int64_t n_elements;
    int64_t n_unwritten, first_unwritten;
    int64_t n_bad, first_bad; /* elements outside atol + rtol * |ref| */
    double first_bad_value, first_bad_expected;
    int64_t nan_index; /* first non-finite value where the reference is finite (or differs) */
    double nan_value, nan_expected;
    double max_abs_err, rel_l2_err;
    double matched_ratio; /* elements within atol + rtol * |ref| (or agreeing non-finite) / all */
    int64_t n_over_cap, first_over_cap; /* SOL-ExecBench's max_error_cap */
} kiln_check;

/* A poison pattern for dtype t drawn from random bits: for floating-point types a NaN whose payload
 * comes from the bits (so no arithmetic result is taken for it, and no candidate can know it in
 * advance), for the rest the bits themselves. An element is unwritten when it holds the pattern and
 * the reference does not (where the reference holds it, the element is right either way). */
uint64_t kiln_poison_draw(kiln_dtype t, uint64_t random_bits);
/* Fills n elements at buf with pattern. */
void kiln_poison_fill(kiln_dtype t, void *buf, size_t n, uint64_t pattern);

/* Checks n elements of out against ref (host memory; ref not masked), poison being the pattern out
 * was filled with. */
void kiln_check_output(kiln_dtype t, const void *out, const void *ref, size_t n, uint64_t poison,
                       const kiln_tolerance *tol, kiln_check *res);

/* The next 64 random bits of a reproducible stream (splitmix64) whose state starts as a seed. */
uint64_t kiln_gate_random(uint64_t *state);
/* A seed from the OS's random source (getrandom), never 0. */
uint64_t kiln_gate_seed_from_os(void);

/* ---- speed of light (sol.c) ---- */

/* The input types tensor cores multiply, each at its own rate. */
typedef enum {
    KILN_TENSOR_F16,
    KILN_TENSOR_BF16,
    KILN_TENSOR_F8,   /* float8_e4m3fn and float8_e5m2 run at one rate */
    KILN_TENSOR_TF32, /* fp32 values rounded to tf32: never chosen by kiln_sol_tensor_type */
    KILN_TENSOR_I8,   /* int8 and uint8; its "flops" are integer multiply-adds counted as 2 ops */
    KILN_TENSOR_COUNT
} kiln_tensor_type;

/* "float16", "bfloat16", "float8", "tf32", "int8" (the keys of the device's "tensor_gflops"). */
const char *kiln_tensor_type_name(kiln_tensor_type t);

typedef struct {
    double copy_gbps;  /* bytes read + written per second / 1e9 */
    double fma_gflops; /* fp32 FMA rate, 2 flops per FMA, / 1e9 */
    /* The dense tensor-core rate per input type, 2 flops per FMA, / 1e9: not measured but derived
     * from the architecture's table (kiln_tensor_flops_per_clk_sm) x SMs x the SM clock the driver
     * reports; 0 where the table has no entry or the device no clock (cpu). */
    double tensor_gflops[KILN_TENSOR_COUNT];
    /* The fp32 (CUDA core) peak from the same table and clock: kiln's FMA kernel measures about
     * 0.76 of it on an H200 (51 of 67 TFLOP/s), below what a good fp32 GEMM reaches, so fp32 flops
     * are bounded by the larger of the two; 0 where unknown. */
    double fp32_gflops;
} kiln_ceilings;

/* copy_gbps and fma_gflops measured once per device, cached in
 * $XDG_CACHE_HOME/kiln/ceilings/<uuid>.json; tensor_gflops derived from the device's facts on every
 * call (kiln_ceilings_tensor). */
int kiln_ceilings_get(kiln_backend *be, kiln_ceilings *out, kiln_err *err);

/* Dense tensor-core flops per clock per SM of compute capability cc_major.cc_minor for inputs of
 * type t (2 per FMA), from NVIDIA's architecture whitepapers; 0 where kiln's table has no entry (an
 * architecture it does not know, or a type the architecture's tensor cores do not take). */
double kiln_tensor_flops_per_clk_sm(int cc_major, int cc_minor, kiln_tensor_type t);

/* Sets c->tensor_gflops and c->fp32_gflops from the table, info->n_sms and info->clock_khz (all 0
 * where the clock or the compute capability is unknown). */
void kiln_ceilings_tensor(const kiln_device_info *info, kiln_ceilings *c);

/* The tensor-core type whose rate bounds the flops of p: the dtype of p's first tensor input when
 * it is float16, bfloat16, a float8 or (u)int8; -1 otherwise (float32 and the rest run at the fp32
 * FMA rate). This is the one rule that picks a problem's flops ceiling. */
int kiln_sol_tensor_type(const kiln_problem *p);

/* The flops ceiling (GFLOP/s) p's speed of light uses: the tensor-core rate of its type where c has
 * one (float8 on an architecture without float8 tensor cores: the float16 rate, which holds every
 * float8 value exactly), else the fp32 FMA rate. *kind, when given, names it in words for JSON and
 * prompts ("bfloat16 tensor cores (arch table)", "fp32 FMA (measured)"). */
double kiln_sol_gflops(const kiln_ceilings *c, const kiln_problem *p, const char **kind);

/* The speed of light of a workload of p that moves min_bytes and does flops
 * (kiln_problem_min_bytes, kiln_problem_flops), in microseconds: max(min_bytes / copy bandwidth,
 * flops / kiln_sol_gflops) (the flops term only where flops > 0 and the flops ceiling is known, >
 * 0). */
double kiln_sol_time_us(const kiln_ceilings *c, const kiln_problem *p, double min_bytes,
                        double flops);

/* The SOL score of docs/gate.md, clamped to (0, 1]; -1 when t_base is unknown (< 0). */
double kiln_sol_score(double t_us, double t_sol_us, double t_base_us);

/* ---- evaluation ---- */

/* Evaluates one candidate in a gate process of its own (a session of one evaluation). Returns the
 * result object of docs/gate.md ("--json"), never NULL. */
cJSON *kiln_gate_eval(const kiln_problem *p, const kiln_refdata *ref, const char *kernel_path,
                      const kiln_gate_options *opt);

/* ---- the gate service (isolate.c, service.c) ---- */

/* A problem with its reference data, as the gate process knows them. */
typedef struct {
    const kiln_problem *p;
    const kiln_refdata *ref;
} kiln_gate_pair;

/* The gate process: opens the backend once, keeps every problem's data resident on the device, and
 * evaluates one candidate per command line read from cmd_fd (a JSON object: docs/gate.md "The gate
 * process"), each ended by a "done" line on fd. Returns at end of file on cmd_fd, when the backend
 * cannot be opened, or after a crash or timeout (its context may be lost: the process then exits).
 */
void kiln_gate_serve(const kiln_gate_pair *pairs, int n_pairs, const kiln_gate_options *opt,
                     int cmd_fd, int fd);

/* A gate session keeps one gate process (its device context, ceilings and the resident problem
 * data) alive from one candidate to the next. The process is started on first use and again after
 * any crash, timeout or fatal; a candidate that crashed or timed out in a process that had already
 * run others is evaluated once more in a fresh one, so that a verdict never comes from damage an
 * earlier candidate left behind. Problems and reference data passed to eval must stay alive and
 * unchanged while the session lives. */
typedef struct kiln_gate_session kiln_gate_session;

/* backend and device come from opt; later evals may vary the other fields. */
kiln_gate_session *kiln_gate_session_new(const kiln_gate_options *opt);
/* As kiln_gate_eval, through the session's process; the result also says "gate_child": "fresh" or
 * "reused". */
cJSON *kiln_gate_session_eval(kiln_gate_session *s, const kiln_problem *p, const kiln_refdata *ref,
                              const char *kernel_path, const kiln_gate_options *opt);
/* Stops the process (end of file on its commands, then SIGKILL after a grace period). */
void kiln_gate_session_free(kiln_gate_session *s);

/* ---- the compile pool (precompile.c) ---- */

/* Starts compiling the cuda sources (NULL entries skipped) into the cubin cache in one process per
 * core, in the background; returns the pool's pid (0: nothing started: fewer than two sources, no
 * NVRTC). label, when given, prefixes a line on stderr at the end. The gate need not wait: it takes
 * each cubin from the cache or compiles it itself. */
pid_t kiln_gate_precompile_start(const char *const *sources, int n, const char *label);
/* Reaps the pool (0: none). */
void kiln_gate_precompile_wait(pid_t pid);

/* ---- reference data (refs.c) ---- */

/* Input sets per workload kiln asks the helper for: the workload's own and two random ones. */
#define KILN_REF_SETS 3

/* Refuses to build reference data of p into dir when its sets would leave less than
 * $KILN_DISK_RESERVE_GB (default 1) free on dir's disk: the store and the logs write there too, and
 * a full disk fails every write of a search, not only this problem's. 0, or KILN_ERR_IO naming both
 * sizes. */
int kiln_refs_disk_check(const kiln_problem *p, const char *dir, kiln_err *err);

/* Finds the reference data for p on device ("cpu"/"cuda") or builds it with the Python helper.
 * ref_dir (optional) overrides the location. quiet_stdout sends the helper's progress to stderr. */
int kiln_refs_ensure(const kiln_problem *p, const char *device, const char *ref_dir,
                     int quiet_stdout, kiln_refdata **out, kiln_err *err);

/* Between these, kiln_refs_ensure builds reference data in one helper process that serves every
 * problem (`python -m kiln.reference --serve`: torch imported and the device opened once, not per
 * problem); _end stops it. Without them each build runs a helper of its own. */
void kiln_refs_serve_begin(void);
void kiln_refs_serve_end(void);

/* The Python interpreter kiln uses: $KILN_PYTHON, else <kiln_home>/.venv/bin/python, else python3.
 */
const char *kiln_python(void);

#endif
