/* refdata.h: the reference data that `python -m kiln.reference` writes for a problem, so that the C
 * gate proves kernels without Python: per workload, several input sets (the workload's own inputs
 * plus fresh random sets with the same statistics), each with the reference outputs, and the
 * reference's own time.
 *
 * Layout of a reference directory REF:
 *   REF/manifest.json  {"kiln_reference": 1, "problem": NAME, "key": HEX16, "device": "cpu"|"cuda",
 *                       "torch": VERSION, "workloads": [{"uuid": U, "axes": {ALL AXES: int},
 *                         "ref_time_us": float|null, "ref_spread_pct": float|null,
 *                         "sets": [{"file": "w0_s0.safetensors", "kind": "real"|"random",
 *                                   "seed": int, "blake2b": HEX32, "scalars": {NAME: number}}]}]}
 *   REF/wK_sJ.safetensors  tensors "input.NAME" (every tensor input) and "output.NAME" (every
 * output) "key" is the problem's source_key in hex, so stale reference data is detected and
 * rebuilt. */
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

typedef struct {
    double ref_time_us;    /* < 0 when not measured */
    double ref_spread_pct; /* its (p90 - p10) / median in percent; < 0 when not known */
    int n_sets;
    kiln_refset *sets;
} kiln_refworkload;

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
