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
    int clock_khz;               /* the SM clock the driver reports, kHz (its boost clock: what
                                    CU_DEVICE_ATTRIBUTE_CLOCK_RATE gives); 0 where unknown (cpu) */
    size_t l2_bytes;             /* last-level cache size */
    size_t mem_bytes;            /* device memory */
    size_t smem_per_block_optin; /* max dynamic shared memory per block */
} kiln_device_info;

/* Kinds of memory (the flags of alloc). Plain memory is the gate's own: pristine copies of input
 * sets, reference outputs, check summaries; a candidate is never handed it, and the sandboxed cpu
 * backend keeps it out of the candidate's process altogether. */
enum {
    /* A buffer the candidate receives (inputs, outputs, scratch): it ends where a guard begins
     * (cuda: an unmapped range of virtual addresses; cpu: a PROT_NONE page), so a read or a write
     * past its end faults. It starts 256-byte aligned on cuda and 16-byte aligned on cpu
     * (docs/abi.md). */
    KILN_ALLOC_CANDIDATE = 1,
    /* With KILN_ALLOC_CANDIDATE: the candidate's view is read-only (a store faults); upload, copy
     * and memset8 still write it, through a view of the gate's own. */
    KILN_ALLOC_READONLY = 2,
};

/* How a backend is opened (kiln_backend_open_with). */
typedef struct {
    /* cpu: run candidates in a separate, sandboxed process that holds only their buffers (the
     * gate). 0: in this process (libkiln_rt, loading a proven library). Ignored by cuda. */
    int sandbox;
    /* cpu, with sandbox: refuse a candidate that calls a function outside the list of
     * sandbox_elf.c (state the C library keeps from one call to the next). The gate sets it; the
     * sandbox's own tests leave it off, to reach the seccomp filter behind it. */
    int check_imports;
} kiln_backend_config;

typedef struct kiln_backend kiln_backend;
typedef struct kiln_module kiln_module; /* a compiled and loaded candidate */
typedef struct kiln_timer kiln_timer;   /* a pair of events (cuda) or clock reads (cpu) */

typedef struct {
    const char *name; /* "cuda" or "cpu" */

    /* Opens the device. KILN_ERR_NO_DEVICE with a clear message when there is none. */
    int (*init)(kiln_backend *be, int device, const kiln_backend_config *cfg, kiln_err *err);
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
    /* Puts the module's global variables back as loaded, queued before the next launch, so that a
     * kernel carries nothing from one run to the next (optional; may be NULL: the sandboxed cpu
     * runner does it itself before every call). */
    int (*reset_state)(kiln_backend *be, kiln_module *m, kiln_err *err);

    /* Device memory of the kind flags says (KILN_ALLOC_*; 0: plain). */
    int (*alloc)(kiln_backend *be, size_t n_bytes, unsigned flags, kiln_devptr *out, kiln_err *err);
    void (*free)(kiln_backend *be, kiln_devptr p);
    int (*upload)(kiln_backend *be, kiln_devptr dst, const void *src, size_t n, kiln_err *err);
    int (*download)(kiln_backend *be, void *dst, kiln_devptr src, size_t n, kiln_err *err);
    int (*memset8)(kiln_backend *be, kiln_devptr dst, uint8_t value, size_t n, kiln_err *err);
    /* Copies n bytes from one buffer of this backend to another (asynchronous on cuda). */
    int (*copy)(kiln_backend *be, kiln_devptr dst, kiln_devptr src, size_t n, kiln_err *err);
    /* The address in this process at which the gate reads and writes buffer p (cpu), or NULL where
     * device memory is not host memory (cuda). */
    void *(*host_view)(kiln_backend *be, kiln_devptr p);

    /* Enqueues every launch of plan with the same parameters (params[i] points at the value of
     * sig parameter i, as cuLaunchKernel takes them). Asynchronous on cuda: errors may show at
     * sync. */
    int (*launch)(kiln_backend *be, kiln_module *m, const kiln_launch_plan *plan, void **params,
                  kiln_err *err);
    /* Waits for all enqueued work; returns KILN_ERR_LAUNCH with the driver's error text when a
     * kernel faulted (after which a cuda context is unusable: the gate process must exit). */
    int (*sync)(kiln_backend *be, kiln_err *err);
    /* sync with a limit: KILN_ERR_TIMEOUT when the work enqueued is not done within timeout_s
     * seconds (cuda: the kernel is still running and the context cannot be used again: the gate
     * process must exit). */
    int (*wait)(kiln_backend *be, double timeout_s, kiln_err *err);
    /* The longest one launch may run where launches are synchronous calls into another process (the
     * sandboxed cpu backend: KILN_ERR_TIMEOUT, the runner killed); <= 0: no limit. Optional. */
    void (*set_call_limit)(kiln_backend *be, double seconds);

    /* Evicts the last-level cache (writes a buffer twice its size), enqueued before a timed launch.
     */
    int (*flush_cache)(kiln_backend *be, kiln_err *err);

    /* Timing: record start, enqueue work, record stop, then elapsed after sync. */
    int (*timer_create)(kiln_backend *be, kiln_timer **out, kiln_err *err);
    void (*timer_destroy)(kiln_backend *be, kiln_timer *t);
    int (*timer_start)(kiln_backend *be, kiln_timer *t, kiln_err *err);
    int (*timer_stop)(kiln_backend *be, kiln_timer *t, kiln_err *err);
    int (*timer_elapsed_us)(kiln_backend *be, kiln_timer *t, double *us, kiln_err *err);

    /* The gate's own device kernels (optional; NULL where the gate works on host_view instead):
     * compiles source with no ABI check, then launches one of its entry points with params as
     * cuLaunchKernel takes them. */
    int (*load_raw)(kiln_backend *be, const char *source, kiln_module **out, char **log,
                    kiln_err *err);
    int (*launch_raw)(kiln_backend *be, kiln_module *m, const char *entry, const unsigned grid[3],
                      const unsigned block[3], void **params, kiln_err *err);

    /* What a `// kiln: library` candidate settled on when it was compiled on this device: the
     * directive's arguments with every choice made (cublaslt: the concrete configuration and the
     * cuBLASLt version, lt_call.h), as heap JSON text; NULL for a kernel. Optional (NULL: the
     * backend calls no library). */
    char *(*library_resolved)(kiln_backend *be, kiln_module *m);
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
/* kiln_backend_open with a configuration (cfg NULL: the defaults, all zero). */
int kiln_backend_open_with(const char *name, int device, const kiln_backend_config *cfg,
                           kiln_backend **out, kiln_err *err);
void kiln_backend_close(kiln_backend *be);

#endif
