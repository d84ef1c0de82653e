/* gate_impl.h: what the files of the gate share and nobody else sees: the gate process's state
 * (its backend, the device helpers, the resident problem data) and the line protocol to the
 * watchdog. */
#ifndef KILN_GATE_IMPL_H
#define KILN_GATE_IMPL_H

#include "gate.h"

#include <string.h>

/* ---- device helpers (device.c) ----
 * The work the gate does on candidate buffers besides running the candidate: fill an output with a
 * poison pattern, mask or unmask a reference, check an output against its reference, compare an
 * input with its pristine copy. cuda: the kernels of src/gate/kernels/gate_device.cu, launched on
 * the backend's stream (asynchronous; results read after a wait); cpu: loops over host_view. */
typedef struct kiln_gate_dev kiln_gate_dev;

/* The sums one check leaves on the device, read back after the run (gate_device.cu's
 * kiln_check_sum, the same layout). */
typedef struct {
    uint64_t n_unwritten, first_unwritten;
    uint64_t n_nonfinite, first_nonfinite;
    uint64_t n_bad, first_bad;
    uint64_t n_matched;
    uint64_t n_over_cap, first_over_cap;
    uint64_t max_abs_bits;
    double sum_sq_err, sum_sq_ref;
} kiln_check_sum;

/* The sums of one check computed on the host: n elements of out against ref (masked with key; 0:
 * not masked), poison the pattern out was filled with (prove.c; the device's kernel computes the
 * same). */
void kiln_check_sum_host(kiln_check_sum *s, const void *out, const void *ref, kiln_dtype t,
                         size_t n, uint64_t poison, uint64_t key, const kiln_tolerance *tol);
/* The verdict on one output from its sums (n elements). */
void kiln_check_from_sum(const kiln_check_sum *s, int64_t n, const kiln_tolerance *tol,
                         kiln_check *res);

int kiln_gate_dev_open(kiln_backend *be, kiln_gate_dev **out, kiln_err *err);
void kiln_gate_dev_close(kiln_gate_dev *d);
/* Fills n elements of dtype t at p with pattern (its low bits). */
int kiln_gate_dev_fill(kiln_gate_dev *d, kiln_devptr p, kiln_dtype t, size_t n, uint64_t pattern,
                       kiln_err *err);
/* XORs n elements at p with the keystream of key (masks, and unmasks, a reference). */
int kiln_gate_dev_mask(kiln_gate_dev *d, kiln_devptr p, kiln_dtype t, size_t n, uint64_t key,
                       kiln_err *err);
/* Enqueues the check of n elements of out against the masked reference ref into summary slot
 * `slot` (slots are kept by the helper, kiln_gate_dev_reserve makes room); the result is read with
 * kiln_gate_dev_result after a wait. */
int kiln_gate_dev_reserve(kiln_gate_dev *d, int n_slots, kiln_err *err);
int kiln_gate_dev_check(kiln_gate_dev *d, int slot, kiln_devptr out, kiln_devptr ref, kiln_dtype t,
                        size_t n, uint64_t poison, uint64_t key, const kiln_tolerance *tol,
                        kiln_err *err);
/* Enqueues the count of bytes where a and b differ into slot (its n_bad). */
int kiln_gate_dev_diff(kiln_gate_dev *d, int slot, kiln_devptr a, kiln_devptr b, size_t n,
                       kiln_err *err);
/* Reads slots [0, n) back (after the work is done). */
int kiln_gate_dev_results(kiln_gate_dev *d, int n, kiln_check_sum *out, kiln_err *err);
/* Element i of a buffer as a double (ref: unmasked with key; key 0: not masked). */
int kiln_gate_dev_element(kiln_gate_dev *d, kiln_devptr p, kiln_dtype t, size_t i, uint64_t key,
                          double *value, kiln_err *err);

/* Element i of a buffer of size-byte elements as raw bits, and back (unaligned buffers allowed). */
static inline uint64_t kiln_gate_bits_load(const void *p, size_t i, size_t size) {
    uint64_t v = 0;
    memcpy(&v, (const char *)p + size * i, size); /* little-endian: the low bytes */
    return v;
}

static inline void kiln_gate_bits_store(void *p, size_t i, size_t size, uint64_t v) {
    memcpy((char *)p + size * i, &v, size);
}

/* The keystream kiln_gate_dev_mask XORs element i with (also used on the host). */
uint64_t kiln_gate_keystream(uint64_t key, uint64_t i);

/* ---- resident problem data (resident.c) ----
 * Per problem the gate has evaluated, per workload: the pristine input sets and the masked
 * reference outputs in plain (gate-only) memory, the candidate's input slots (read-only to it) and
 * its outputs. Kept from candidate to candidate within a memory budget; least recently used
 * problems are dropped first. */
typedef struct {
    int n_inputs, n_outputs; /* the problem's */
    int n_sets, n_slots;     /* n_slots = n_sets + 1: every slot sees every set in turn */
    int n_sets_ref;     /* the reference's sets; n_sets fewer where not all fit (the real first) */
    kiln_devptr **pool; /* [set][input]: the set's inputs (0 for scalars) */
    kiln_devptr **ref;  /* [set][output]: the reference, masked with the gate's key */
    double **scalars;   /* [set][input] */
    int *is_real;       /* [set] */
    kiln_devptr **slot; /* [slot][input]: what the candidate reads */
    int *slot_holds;    /* [slot]: the set in it, -1 none */
    kiln_devptr *out;   /* [output]: what the candidate writes */
    size_t *in_bytes, *out_bytes;
    size_t *out_elems;
} kiln_res_workload;

typedef struct kiln_resident kiln_resident;

typedef struct {
    const kiln_problem *p;
    const kiln_refdata *ref;
    kiln_res_workload *w; /* p->n_workloads */
} kiln_res_problem;

/* budget_bytes: the most device memory the resident data may take (0: the backend's default). */
kiln_resident *kiln_resident_new(kiln_backend *be, kiln_gate_dev *dev, uint64_t key,
                                 size_t budget_bytes);
void kiln_resident_free(kiln_resident *r);
/* The resident data of (p, ref), loaded now if it is not resident (the sets are read, their
 * content checked against the hashes in the reference manifest, uploaded, the references masked).
 * Where all the sets do not fit in the budget, as many as fit (two at least; the real sets first).
 * KILN_ERR_FORMAT when a set file changed on disk; KILN_ERR_RESOURCE when it does not fit. */
int kiln_resident_get(kiln_resident *r, const kiln_problem *p, const kiln_refdata *ref,
                      kiln_res_problem **out, kiln_err *err);
/* Makes slot hold set s of workload w (a copy when it holds another). */
int kiln_resident_fill_slot(kiln_resident *r, kiln_res_workload *w, int slot, int s, kiln_err *err);

/* ---- the gate process (service.c) and one evaluation in it (eval.c) ---- */

typedef struct {
    kiln_backend *be;
    kiln_ceilings ceil;
    kiln_gate_dev *dev;
    kiln_resident *res;
    uint64_t key; /* the secret the resident references are masked with (0: not masked) */
} kiln_gate_proc;

/* Evaluates source (a candidate for p) in the gate process g, reporting on fd. Returns the outcome
 * (KILN_OUTCOME_CRASHED also after a "fatal": no verdict was possible). */
kiln_outcome kiln_gate_eval_candidate(kiln_gate_proc *g, const kiln_problem *p,
                                      const kiln_refdata *ref, const char *source,
                                      const kiln_gate_options *opt, int fd);

/* ---- the line protocol to the watchdog (eval.c, read by isolate.c) ----
 * "phase NAME [W [S [LIMIT]]]" (a heartbeat; LIMIT: the seconds the phase may take), "device {..}",
 * "draw_seed HEX", "compiled SECONDS", "workload {..}", "outcome NAME {evidence}", "fatal MESSAGE",
 * "candidate_output \"...\"" (a JSON string: what the candidate printed), "done". */
void kiln_gate_send_line(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
kiln_outcome kiln_gate_send_fatal(int fd, const char *msg);
/* "device {..}": the device's facts and ceilings; its ceiling_gflops is the one p's speed of light
 * uses (kiln_sol_gflops). */
void kiln_gate_send_device(int fd, kiln_backend *be, const kiln_ceilings *ceil,
                           const kiln_problem *p);

#endif
