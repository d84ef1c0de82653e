/* backend.h: a backend runs candidate kernels on one device. It is a struct of function pointers
 * (cuda: driver API + NVRTC; cpu: the system compiler + dlopen); the gate drives both the same way.
 */
#ifndef KILN_BACKEND_H
#define KILN_BACKEND_H

#include "abi.h"

typedef uint64_t kiln_devptr; /* a device address (cpu: a host address) */

typedef struct {
    char name[256];              /* "NVIDIA H200", or the CPU model */
    char uuid[64];               /* stable id for caches ("GPU-…", or a hash of the cpu model) */
    int cc_major, cc_minor;      /* compute capability (0.0 on cpu) */
    int n_sms;                   /* multiprocessors (cpu: cores) */
    size_t l2_bytes;             /* last-level cache size */
    size_t mem_bytes;            /* device memory */
    size_t smem_per_block_optin; /* max dynamic shared memory per block */
} kiln_device_info;

typedef struct kiln_backend kiln_backend;
typedef struct kiln_module kiln_module; /* a compiled and loaded candidate */
typedef struct kiln_timer kiln_timer;   /* a pair of events (cuda) or clock reads (cpu) */

typedef struct {
    const char *name; /* "cuda" or "cpu" */

    /* Opens the device. KILN_ERR_NO_DEVICE with a clear message when there is none. */
    int (*init)(kiln_backend *be, int device, kiln_err *err);
    void (*shutdown)(kiln_backend *be);
    void (*device_info)(kiln_backend *be, kiln_device_info *out);

    /* Compiles source against sig and loads it. On KILN_ERR_COMPILE, *log holds the compiler's log;
     * on success *log may hold warnings. *log is heap-allocated (or NULL); the caller frees it.
     * KILN_ERR_RESOURCE when an entry point needs more registers/shared memory than a block gets.
     */
    int (*compile)(kiln_backend *be, const char *source, const kiln_signature *sig,
                   const kiln_abi *abi, kiln_module **out, char **log, kiln_err *err);
    void (*module_free)(kiln_backend *be, kiln_module *m);
    /* Registers per thread and static shared memory of an entry point (optional; may be NULL). */
    int (*entry_attrs)(kiln_backend *be, kiln_module *m, const char *entry, int *regs,
                       size_t *static_smem, kiln_err *err);

    /* Device memory. cpu allocations sit against a PROT_NONE guard page so that writing past the
     * end faults; both backends keep 16-byte alignment. */
    int (*alloc)(kiln_backend *be, size_t n_bytes, kiln_devptr *out, kiln_err *err);
    void (*free)(kiln_backend *be, kiln_devptr p);
    int (*upload)(kiln_backend *be, kiln_devptr dst, const void *src, size_t n, kiln_err *err);
    int (*download)(kiln_backend *be, void *dst, kiln_devptr src, size_t n, kiln_err *err);
    int (*memset8)(kiln_backend *be, kiln_devptr dst, uint8_t value, size_t n, kiln_err *err);

    /* Enqueues every launch of plan with the same parameters (params[i] points at the value of
     * sig parameter i, as cuLaunchKernel takes them). Asynchronous on cuda: errors may show at
     * sync. */
    int (*launch)(kiln_backend *be, kiln_module *m, const kiln_launch_plan *plan, void **params,
                  kiln_err *err);
    /* Waits for all enqueued work; returns KILN_ERR_LAUNCH with the driver's error text when a
     * kernel faulted (after which a cuda context is unusable: the gate process must exit). */
    int (*sync)(kiln_backend *be, kiln_err *err);

    /* Evicts the last-level cache (writes a buffer twice its size), enqueued before a timed launch.
     */
    int (*flush_cache)(kiln_backend *be, kiln_err *err);

    /* Timing: record start, enqueue work, record stop, then elapsed after sync. */
    int (*timer_create)(kiln_backend *be, kiln_timer **out, kiln_err *err);
    void (*timer_destroy)(kiln_backend *be, kiln_timer *t);
    int (*timer_start)(kiln_backend *be, kiln_timer *t, kiln_err *err);
    int (*timer_stop)(kiln_backend *be, kiln_timer *t, kiln_err *err);
    int (*timer_elapsed_us)(kiln_backend *be, kiln_timer *t, double *us, kiln_err *err);
} kiln_backend_ops;

struct kiln_backend {
    const kiln_backend_ops *ops;
    void *impl; /* backend-private state */
};

extern const kiln_backend_ops kiln_backend_cuda;
extern const kiln_backend_ops kiln_backend_cpu;

/* The backend kiln uses where none is named: "cuda" when the NVIDIA driver is installed and a GPU
 * is visible (kiln_cuda_driver_present, kiln_cuda_visible_gpus in cuda_driver.h), else "cpu".
 * Decided without initialising CUDA, so that the process may still fork children that use it. Every
 * command and Python (through kiln_rt_default_backend) ask this one rule. */
const char *kiln_backend_default(void);

/* Looks a backend up by name ("cuda", "cpu"); NULL if unknown. */
const kiln_backend_ops *kiln_backend_find(const char *name);

/* Creates and initialises a backend; on failure returns the status with err filled and *out NULL.
 */
int kiln_backend_open(const char *name, int device, kiln_backend **out, kiln_err *err);
void kiln_backend_close(kiln_backend *be);

#endif
