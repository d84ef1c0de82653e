/* refdata.h: the reference data that `python -m kiln.reference` writes for a problem, so that the C
 * gate proves kernels without Python: per workload, several input sets (the workload's own inputs
 * plus fresh random sets with the same statistics), each with the reference outputs, and the
 * reference's own time.
 *
 * Layout of a reference directory REF:
 *   REF/manifest.json  {"kiln_reference": 1, "problem": NAME, "key": HEX16, "device": "cpu"|"cuda",
 *                       "torch": VERSION, "workloads": [{"uuid": U, "axes": {ALL AXES: int},
 *                         "ref_time_us": float|null, "ref_spread_pct": float|null,
 *                         "fp64_gap": {OUTPUT: {"points": [[X, Y], ...], "rel_l2": R,
 *                                               "rms": S}} (optional),
 *                         "sets": [{"file": "w0_s0.safetensors", "kind": "real"|"random",
 *                                   "seed": int, "blake2b": HEX32, "scalars": {NAME: number}}]}]}
 *   REF/wK_sJ.safetensors  tensors "input.NAME" (every tensor input) and "output.NAME" (every
 * output) "key" is the problem's source_key in hex, so stale reference data is detected and
 * rebuilt. "fp64_gap" bounds the reference's own rounding error on a float32 output from above:
 * each element, for some point, has |ref| >= X and is off the float64 result by at most Y / 2; R is
 * twice the reference's relative L2 distance to it, S the output's RMS (the smallest of the sets';
 * python/kiln/reference_gap.py). kiln_refworkload_tolerance turns it into a tolerance. */
#ifndef KILN_REFDATA_H
#define KILN_REFDATA_H

#include "problem.h"

typedef struct {
    char *file;       /* full path of the set's safetensors file */
    char blake2b[33]; /* its content hash (hex), checked every time it is opened */
    /* what the file looked like when kiln_refdata_verify hashed it (verified 1): an open of the
     * same file (size, modification time, inode) skips hashing it again */
    int verified;
    int64_t verified_size, verified_mtime_ns;
    uint64_t verified_ino;
    int is_real;     /* 1: the workload's own inputs; 0: a fresh random set */
    double *scalars; /* problem->n_inputs entries; meaningful for scalar inputs only */
} kiln_refset;

/* One output's fp64_gap: n points (x[k], y[k]), x ascending, rel_l2 and rms. */
typedef struct {
    int n;
    double *x, *y;
    double rel_l2, rms;
} kiln_fp64_gap;

/* What kiln_refworkload_tolerance did: the atol, rtol and rel_l2 it added; refused 1 when the gap
 * was recorded but is no rounding (need, what it would have added at an element of the output's
 * RMS, over cap). */
typedef struct {
    double atol, rtol, rel_l2;
    int refused;
    double need, cap;
} kiln_rounding;

typedef struct {
    double ref_time_us;    /* < 0 when not measured */
    double ref_spread_pct; /* its (p90 - p10) / median in percent; < 0 when not known */
    int n_sets;
    kiln_refset *sets;
    int n_gap;          /* problem->n_outputs */
    kiln_fp64_gap *gap; /* per output (n 0: none recorded) */
} kiln_refworkload;

/* Tolerance t of output o widened so that a kernel whose error is no larger than the reference's
 * own (its distance to the wider run's result) passes: atol + a and rtol + r with every point
 * y_k <= atol + a + (rtol + r) x_k, choosing the (a, r) with the least a + r S (the allowance
 * added at a typical element), and rel_l2 + R. Unchanged without a recorded gap, for
 * SOL-ExecBench's rules (applied as published), and when the gap is no rounding: a + r S over
 * 10 rtol S, or R over 10 rtol (a comparison or a floor that went the other way in float64).
 * *what (may be NULL) says which. */
kiln_tolerance kiln_refworkload_tolerance(const kiln_refworkload *rw, int o, kiln_tolerance t,
                                          kiln_rounding *what);

typedef struct {
    char *dir;
    char *device;
    int n_workloads; /* = problem->n_workloads, same order */
    kiln_refworkload *workloads;
} kiln_refdata;

/* Reads REF/manifest.json and checks it against the problem: same key, same workloads (uuid and
 * axes), every set file present. KILN_ERR_FORMAT with a message when it does not match. */
int kiln_refdata_load(const char *ref_dir, const kiln_problem *p, kiln_refdata **out,
                      kiln_err *err);
void kiln_refdata_free(kiln_refdata *r);
/* Checks the content hash of every set file (several files at once, one thread each), remembering
 * what each file looked like; KILN_ERR_FORMAT naming the first that changed. */
int kiln_refdata_verify(kiln_refdata *r, kiln_err *err);

/* Opens one set: checks the file's content hash against the manifest's (a file that changed on
 * disk is KILN_ERR_FORMAT, never used) and every "input.X" and "output.X" against the problem's
 * dtype and the workload's shape. The caller frees the kiln_st. */
int kiln_refset_open(const kiln_problem *p, int workload, const kiln_refset *set, kiln_st **out,
                     kiln_err *err);

#endif
