/* cuda.c: the cuda backend: a candidate compiled to a cubin by NVRTC (nvrtc.c) is loaded, launched
 * and timed through the CUDA driver API (cuda_driver.c), on the primary context of one device and
 * one non-blocking stream.
 *
 * The error model. A launch that asks too much (threads, shared memory, clusters) fails at once
 * with an error that leaves the context usable: KILN_ERR_RESOURCE. A kernel that faults (illegal
 * address, trap, assert, misaligned access) is reported asynchronously, at the next synchronising
 * call, and the error is sticky: the context, and every allocation and module in it, is lost for
 * good. The backend then returns KILN_ERR_LAUNCH with the driver's text
 * ("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered") and refuses all further
 * work with the same status. That is why the gate runs candidates in a child process: after
 * KILN_ERR_LAUNCH the child reports and exits, and the coordinator starts a fresh one. Nothing here
 * aborts on a candidate's behaviour.
 *
 * The backend is single-threaded: the context is made current on the thread that calls init. */
#include "backend.h"
#include "cubin.h"
#include "cuda_driver.h"
#include "lt_call.h"
#include "nvrtc.h"

#include <cuda.h>

#include <stddef.h>
#include <string.h>
#include <unistd.h>

/* ---- the driver (cuda_driver.h) ---- */

/* Errors after which the context is lost (a kernel faulted). */
static int cu_sticky(CUresult r) {
    switch (r) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_TENSOR_MEMORY_LEAK:
    case CUDA_ERROR_CONTAINED:
        return 1;
    default:
        return 0;
    }
}

/* ---- the backend ---- */

/* A buffer the candidate receives (KILN_ALLOC_CANDIDATE): physical memory from cuMemCreate mapped
 * in a range of virtual addresses of its own, with an unmapped guard range before and after, and
 * the buffer placed to end at the end of the mapping; for KILN_ALLOC_READONLY the candidate's
 * mapping is read-only and a second, read-write mapping of the same memory (the alias) is where the
 * gate writes. */
typedef struct {
    CUdeviceptr user;    /* what alloc returned */
    CUdeviceptr reserve; /* the reserved range: guard, mapping, guard */
    size_t reserve_len;
    CUdeviceptr map; /* the mapping inside it */
    size_t map_len;
    CUdeviceptr alias; /* read-write mapping of a read-only buffer, else 0 */
    CUmemGenericAllocationHandle handle;
} cuda_guarded;

typedef struct {
    CUdevice dev;
    CUcontext ctx;
    CUstream stream;
    size_t granularity; /* of cuMemCreate, 0 until the first guarded allocation */
    int no_read_only;   /* the driver refused a read-only mapping once: map inputs read-write */
    cuda_guarded *guarded;
    int n_guarded, cap_guarded;
    int ctx_retained;
    kiln_device_info info;
    CUdeviceptr flush_buf;
    size_t flush_len;
    unsigned flush_round;
    int dead; /* a kernel faulted: the context is lost */
    char dead_msg[400];
} cuda_state;

typedef struct {
    char name[128];
    CUfunction fn;
    kiln_cuda_func_attrs attrs;
    kiln_cuda_func_limits limits; /* raised on the first launch that needs it */
} cuda_entry;

struct kiln_module {
    CUmodule mod;
    int n;
    cuda_entry e[KILN_MAX_LAUNCHES];
    void *image; /* the cubin, kept when the module has global variables (reset_state reloads it) */
    kiln_lt_call *lt;     /* a `// kiln: library cublaslt` candidate (no CUmodule), else NULL */
    CUdeviceptr lt_space; /* its workspace, 0 when it needs none */
};

struct kiln_timer {
    CUevent start, stop;
    int recorded;
};

/* Turns a failed driver call into a status: sticky errors kill the backend (KILN_ERR_LAUNCH), out
 * of memory is a resource outcome, the rest is the backend's failure. */
static int cu_fail(cuda_state *st, CUresult r, const char *what, kiln_err *err) {
    if (cu_sticky(r)) {
        if (!st->dead) {
            st->dead = 1;
            snprintf(st->dead_msg, sizeof st->dead_msg, "%s: %s", kiln_cuda_error_name(r),
                     kiln_cuda_error_text(r));
        }
        return kiln_errf(err, KILN_ERR_LAUNCH, "%s: %s", kiln_cuda_error_name(r),
                         kiln_cuda_error_text(r));
    }
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        return kiln_errf(err, KILN_ERR_RESOURCE, "%s: %s: %s", what, kiln_cuda_error_name(r),
                         kiln_cuda_error_text(r));
    return kiln_errf(err, KILN_ERR_BACKEND, "%s: %s: %s", what, kiln_cuda_error_name(r),
                     kiln_cuda_error_text(r));
}

static int cu_dead(cuda_state *st, kiln_err *err) {
    return kiln_errf(err, KILN_ERR_LAUNCH,
                     "the CUDA context was lost to an earlier fault (%s); this process must exit",
                     st->dead_msg);
}

static void guarded_release(cuda_guarded *g);

static void cuda_teardown(cuda_state *st) {
    if (!st->dead) {
        if (st->stream)
            kiln_cuda.StreamSynchronize(st->stream);
        if (st->flush_buf)
            kiln_cuda.MemFree(st->flush_buf);
        for (int i = 0; i < st->n_guarded; i++)
            guarded_release(&st->guarded[i]);
        if (st->stream)
            kiln_cuda.StreamDestroy(st->stream);
    }
    if (st->ctx_retained)
        kiln_cuda.DevicePrimaryCtxRelease(st->dev);
    free(st->guarded);
    free(st);
}

static int cuda_init(kiln_backend *be, int device, const kiln_backend_config *cfg, kiln_err *err) {
    (void)cfg;
    cuda_state *st = xcalloc(1, sizeof *st);
    int rc = kiln_cuda_device_open(device, "the cuda backend needs a GPU; use --backend cpu",
                                   &st->dev, &st->ctx, &st->info, err);
    if (rc) {
        free(st);
        return rc;
    }
    st->ctx_retained = 1;
    CUresult r;
    if ((r = kiln_cuda.CtxSetCurrent(st->ctx)) != CUDA_SUCCESS) {
        rc = cu_fail(st, r, "cuCtxSetCurrent", err);
        goto fail;
    }
    if ((r = kiln_cuda.StreamCreate(&st->stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
        rc = cu_fail(st, r, "cuStreamCreate", err);
        goto fail;
    }
    /* The flush buffer lives as long as the backend: allocating it per timed run would cost more
     * than the kernels measured. */
    st->flush_len = 2 * (st->info.l2_bytes ? st->info.l2_bytes : ((size_t)64 << 20));
    if ((r = kiln_cuda.MemAlloc(&st->flush_buf, st->flush_len)) != CUDA_SUCCESS) {
        st->flush_buf = 0;
        rc = cu_fail(st, r, "allocating the cache-flush buffer", err);
        goto fail;
    }
    be->impl = st;
    return KILN_OK;
fail:
    cuda_teardown(st);
    return rc;
}

static void cuda_shutdown(kiln_backend *be) {
    if (be->impl)
        cuda_teardown(be->impl);
    be->impl = NULL;
}

static void cuda_device_info(kiln_backend *be, kiln_device_info *out) {
    cuda_state *st = be->impl;
    *out = st->info;
}

static void log_append(char **log, const char *line) {
    char *old = *log;
    *log = xasprintf("%s%s%s", old ? old : "", old && *old ? "\n" : "", line);
    free(old);
}

static size_t param_size(kiln_param_kind kind) {
    switch (kind) {
    case KILN_PARAM_I32:
    case KILN_PARAM_F32:
        return 4;
    case KILN_PARAM_BOOL:
        return 1;
    default:
        return 8;
    }
}

/* With cuFuncGetParamInfo (CUDA 12.4+), checks that an entry point takes the parameters the ABI
 * passes, then n_tmaps tensor maps of KILN_TMAP_BYTES: a kernel that declares fewer or other-sized
 * parameters would read garbage, silently. */
static int check_params(const cuda_entry *e, const kiln_signature *sig, int n_tmaps, char *msg,
                        size_t cap) {
    size_t sizes[KILN_MAX_PARAMS + KILN_MAX_TMAPS];
    int n = kiln_cuda_param_sizes(e->fn, sizes, KILN_MAX_PARAMS + KILN_MAX_TMAPS);
    if (n < 0)
        return 0; /* the driver cannot tell: skip the check */
    if (n != sig->n + n_tmaps) {
        snprintf(msg, cap, "'%s' takes %d parameter%s, but the ABI passes %d%s", e->name, n,
                 n == 1 ? "" : "s", sig->n + n_tmaps, n_tmaps ? " (tensor maps included)" : "");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        const size_t want = i < sig->n ? param_size(sig->p[i].kind) : KILN_TMAP_BYTES;
        if (sizes[i] != want) {
            snprintf(msg, cap,
                     "parameter %d of '%s' is %zu bytes, but the ABI passes '%s %s' (%zu bytes)",
                     i + 1, e->name, sizes[i],
                     i < sig->n ? sig->p[i].c_type : "const __grid_constant__ CUtensorMap",
                     i < sig->n ? sig->p[i].name : "(a tensor map)", want);
            return -1;
        }
    }
    return 0;
}

/* A compile error when the cubin calls the device heap's malloc or free: what a run leaves in the
 * heap outlives it (the gate resets a module's globals before every run, not the heap), so a
 * candidate could find answers there on a later run. Kernels take working memory as the ABI's
 * declared scratch, which the gate zeroes before every run. */
static int refuse_device_heap(const char *cubin, size_t cubin_len, kiln_err *err) {
    static const char *const heap[] = {"malloc", "free"};
    for (size_t i = 0; i < sizeof heap / sizeof heap[0]; i++) {
        int undefined = 0;
        if (kiln_cubin_undefined(cubin, cubin_len, heap[i], &undefined, NULL) == 0 && undefined)
            return kiln_errf(
                err, KILN_ERR_COMPILE,
                "the candidate calls the device heap's %s: memory a run leaves there "
                "outlives it, so no candidate may use the heap; declare scratch "
                "memory instead (`// kiln: scratch`, abi.md), which every run gets zeroed",
                heap[i]);
    }
    return KILN_OK;
}

/* Compiles source for this device and loads it as a module without entry points yet (*out); a
 * cubin the driver rejects is the candidate's compile error, any other load failure the device's.
 */
static int compile_load(cuda_state *st, const char *source, kiln_module **out, char **log,
                        kiln_err *err) {
    char arch[32];
    kiln_cuda_arch(st->info.cc_major, st->info.cc_minor, source, arch, sizeof arch);
    char *cubin = NULL;
    size_t cubin_len = 0;
    int rc = kiln_cuda_compile_only(source, arch, &cubin, &cubin_len, log, err);
    if (rc)
        return rc;
    rc = refuse_device_heap(cubin, cubin_len, err);
    if (rc) {
        free(cubin);
        return rc;
    }
    kiln_module *m = xcalloc(1, sizeof *m);
    CUresult r = kiln_cuda.ModuleLoadData(&m->mod, cubin);
    uint64_t globals = 0;
    if (r == CUDA_SUCCESS && kiln_cubin_global_bytes(cubin, cubin_len, &globals, NULL) == 0 &&
        globals)
        m->image = cubin;
    else
        free(cubin);
    if (r != CUDA_SUCCESS) {
        free(m);
        if (r == CUDA_ERROR_NO_BINARY_FOR_GPU || r == CUDA_ERROR_INVALID_IMAGE ||
            r == CUDA_ERROR_INVALID_PTX || r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
            return kiln_errf(err, KILN_ERR_COMPILE, "the driver rejected the %s cubin: %s: %s",
                             arch, kiln_cuda_error_name(r), kiln_cuda_error_text(r));
        return cu_fail(st, r, "cuModuleLoadData", err);
    }
    *out = m;
    return KILN_OK;
}

static int cuda_compile_module(cuda_state *st, const char *source, const kiln_signature *sig,
                               const kiln_abi *abi, kiln_module **out, char **log, kiln_err *err);

static int cuda_compile(kiln_backend *be, const char *source, const kiln_signature *sig,
                        const kiln_abi *abi, kiln_module **out, char **log, kiln_err *err) {
    cuda_state *st = be->impl;
    KILN_ASSERT(source && sig && abi && out);
    char *ignored_log = NULL;
    if (!log)
        log = &ignored_log;
    *out = NULL;
    *log = NULL;
    int rc = cuda_compile_module(st, source, sig, abi, out, log, err);
    free(ignored_log);
    return rc;
}

/* A `// kiln: library cublaslt` candidate: its cuBLASLt plan and configuration instead of a
 * cubin (lt_call.h), with the workspace the configuration needs, owned by the module (the ABI's
 * scratch is zeroed inside the timed region, which a library's workspace does not need). */
static int lt_compile(cuda_state *st, const kiln_abi *abi, const kiln_signature *sig,
                      kiln_module **out, char **log, kiln_err *err) {
    if (strcmp(abi->library, "cublaslt") != 0)
        return kiln_errf(err, KILN_ERR_COMPILE, "the cuda backend does not call library '%s'",
                         abi->library);
    kiln_lt_call_desc d;
    int rc = kiln_lt_call_parse(abi->library_args, sig, &d, err);
    kiln_lt_call *call = NULL;
    if (rc == KILN_OK)
        rc = kiln_lt_call_open(&d, &call, err);
    if (rc) {
        log_append(log, err ? err->msg : "cublaslt candidate rejected");
        /* an unknown configuration or an unusable layout is the candidate's; anything else
         * (cuBLASLt missing or failing) the device's */
        return rc == KILN_ERR_INVALID || rc == KILN_ERR_UNSUPPORTED ? KILN_ERR_COMPILE : rc;
    }
    kiln_module *m = xcalloc(1, sizeof *m);
    m->lt = call;
    uint64_t ws = kiln_lt_call_workspace(call);
    if (ws) {
        CUresult r = kiln_cuda.MemAlloc(&m->lt_space, (size_t)((ws + 255) & ~(uint64_t)255));
        if (r != CUDA_SUCCESS) {
            kiln_lt_call_close(call);
            free(m);
            return cu_fail(st, r, "cuMemAlloc (cuBLASLt workspace)", err);
        }
    }
    *out = m;
    return KILN_OK;
}

/* compile() without the bookkeeping of an optional log. */
static int cuda_compile_module(cuda_state *st, const char *source, const kiln_signature *sig,
                               const kiln_abi *abi, kiln_module **out, char **log, kiln_err *err) {
    if (st->dead)
        return cu_dead(st, err);
    if (abi->library)
        return lt_compile(st, abi, sig, out, log, err);
    if (abi->n_launches < 1 || abi->n_launches > KILN_MAX_LAUNCHES)
        return kiln_errf(err, KILN_ERR_INVALID, "a candidate needs 1 to %d launches, not %d",
                         KILN_MAX_LAUNCHES, abi->n_launches);
    kiln_module *m = NULL;
    int rc = compile_load(st, source, &m, log, err);
    if (rc)
        return rc;
    CUresult r;
    for (int k = 0; k < abi->n_launches && rc == KILN_OK; k++) {
        const char *name = abi->launch[k].entry;
        int seen = 0;
        for (int j = 0; j < m->n; j++)
            seen |= strcmp(m->e[j].name, name) == 0;
        if (seen)
            continue;
        cuda_entry *e = &m->e[m->n];
        snprintf(e->name, sizeof e->name, "%s", name);
        r = kiln_cuda.ModuleGetFunction(&e->fn, m->mod, name);
        if (r == CUDA_ERROR_NOT_FOUND) {
            rc = kiln_errf(err, KILN_ERR_COMPILE,
                           "entry point '%s' not found (did you write extern \"C\"?)", name);
            log_append(log, err ? err->msg : "entry point not found");
            break;
        }
        if (r != CUDA_SUCCESS) {
            rc = cu_fail(st, r, "cuModuleGetFunction", err);
            break;
        }
        m->n++;
        kiln_cuda_func_attrs_get(e->fn, &e->attrs);
        char msg[512];
        if (check_params(e, sig, abi->n_tmaps, msg, sizeof msg) != 0) {
            char *proto = kiln_abi_prototype(sig, name, 1);
            rc = kiln_errf(err, KILN_ERR_COMPILE, "%s; expected %s", msg, proto);
            free(proto);
            log_append(log, err ? err->msg : msg);
            break;
        }
        if ((size_t)e->attrs.static_smem > st->info.smem_per_block_optin) {
            rc = kiln_errf(err, KILN_ERR_RESOURCE,
                           "'%s' uses %d bytes of static shared memory; a block gets at most %zu",
                           name, e->attrs.static_smem, st->info.smem_per_block_optin);
            break;
        }
        if (e->attrs.max_threads < 1) {
            rc = kiln_errf(err, KILN_ERR_RESOURCE, "'%s' cannot run a single thread (%d registers)",
                           name, e->attrs.regs);
            break;
        }
    }
    if (rc) {
        if (m->mod && !st->dead)
            kiln_cuda.ModuleUnload(m->mod);
        free(m->image);
        free(m);
        return rc;
    }
    *out = m;
    return KILN_OK;
}

/* A module with global variables is loaded afresh before every run: what a kernel left there (a
 * count of its launches, answers keyed by its inputs' addresses or contents) is gone, and every run
 * starts as the first did. The reload waits for the runs queued before it; it is not timed. Modules
 * without globals (every kernel kiln writes) cost nothing. */
static int cuda_reset_state(kiln_backend *be, kiln_module *m, kiln_err *err) {
    cuda_state *st = be->impl;
    if (!m->image)
        return KILN_OK;
    if (st->dead)
        return cu_dead(st, err);
    CUresult r = kiln_cuda.StreamSynchronize(st->stream);
    if (r != CUDA_SUCCESS)
        return cu_fail(st, r, "cuStreamSynchronize (before reloading a module's globals)", err);
    if ((r = kiln_cuda.ModuleUnload(m->mod)) != CUDA_SUCCESS)
        return cu_fail(st, r, "cuModuleUnload", err);
    m->mod = NULL;
    if ((r = kiln_cuda.ModuleLoadData(&m->mod, m->image)) != CUDA_SUCCESS)
        return cu_fail(st, r, "cuModuleLoadData (reloading a module's globals)", err);
    for (int j = 0; j < m->n; j++) {
        if ((r = kiln_cuda.ModuleGetFunction(&m->e[j].fn, m->mod, m->e[j].name)) != CUDA_SUCCESS)
            return cu_fail(st, r, "cuModuleGetFunction", err);
        memset(&m->e[j].limits, 0, sizeof m->e[j].limits); /* a new function: raised again */
    }
    return KILN_OK;
}

static void cuda_module_free(kiln_backend *be, kiln_module *m) {
    cuda_state *st = be->impl;
    if (!m)
        return;
    if (m->lt) {
        kiln_lt_call_close(m->lt);
        if (m->lt_space && !st->dead)
            kiln_cuda.MemFree(m->lt_space);
    } else if (!st->dead && m->mod) {
        kiln_cuda.ModuleUnload(m->mod);
    }
    free(m->image);
    free(m);
}

static char *cuda_library_resolved(kiln_backend *be, kiln_module *m) {
    (void)be;
    return m && m->lt ? kiln_lt_call_json(kiln_lt_call_resolved(m->lt)) : NULL;
}

static cuda_entry *find_entry(kiln_module *m, const char *name) {
    for (int j = 0; j < m->n; j++)
        if (strcmp(m->e[j].name, name) == 0)
            return &m->e[j];
    return NULL;
}

static int cuda_entry_attrs(kiln_backend *be, kiln_module *m, const char *entry, int *regs,
                            size_t *static_smem, kiln_err *err) {
    (void)be;
    cuda_entry *e = find_entry(m, entry);
    if (!e)
        return kiln_errf(err, KILN_ERR_INVALID, "entry point '%s' is not in this module", entry);
    if (regs)
        *regs = e->attrs.regs;
    if (static_smem)
        *static_smem = (size_t)e->attrs.static_smem;
    return KILN_OK;
}

/* Status of a failed launch: asking too much is a resource outcome, a fault is sticky. */
static int launch_fail(cuda_state *st, CUresult r, const kiln_launch *l, kiln_err *err) {
    switch (r) {
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_CLUSTER_SIZE:
    case CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE:
        return kiln_errf(
            err, KILN_ERR_RESOURCE,
            "launch '%s' grid (%u, %u, %u) block (%u, %u, %u) smem %zu cluster (%u, %u, "
            "%u): %s: %s",
            l->entry, l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1], l->block[2],
            l->smem_bytes, l->cluster[0], l->cluster[1], l->cluster[2], kiln_cuda_error_name(r),
            kiln_cuda_error_text(r));
    default: {
        char what[200];
        snprintf(what, sizeof what, "launch '%s'", l->entry);
        return cu_fail(st, r, what, err);
    }
    }
}

/* Checks one launch against the kernel and the device, raising the kernel's limits where the launch
 * needs it (dynamic shared memory above 48 KiB, clusters above 8). */
static int prepare_launch(cuda_state *st, cuda_entry *e, const kiln_launch *l, kiln_err *err) {
    char why[400];
    if (kiln_cuda_launch_fits(e->name, &e->attrs, l, &st->info, why, sizeof why) != 0)
        return kiln_errf(err, KILN_ERR_RESOURCE, "%s", why);
    CUresult r = kiln_cuda_raise_limits(e->fn, &e->attrs, l, &e->limits);
    return r == CUDA_SUCCESS ? KILN_OK : launch_fail(st, r, l, err);
}

static int cuda_launch(kiln_backend *be, kiln_module *m, const kiln_launch_plan *plan,
                       void **params, kiln_err *err) {
    cuda_state *st = be->impl;
    if (st->dead)
        return cu_dead(st, err);
    if (plan->n_launches < 0 || plan->n_launches > KILN_MAX_LAUNCHES)
        return kiln_errf(err, KILN_ERR_INVALID, "a plan of %d launches", plan->n_launches);
    if (m->lt)
        return kiln_lt_call_run(m->lt, params, m->lt_space, st->stream, err);
    cuda_entry *entries[KILN_MAX_LAUNCHES];
    for (int i = 0; i < plan->n_launches; i++) {
        entries[i] = find_entry(m, plan->launch[i].entry);
        if (!entries[i])
            return kiln_errf(err, KILN_ERR_INVALID, "entry point '%s' was not compiled",
                             plan->launch[i].entry);
        int rc = prepare_launch(st, entries[i], &plan->launch[i], err);
        if (rc)
            return rc;
    }
    CUtensorMap maps[KILN_MAX_TMAPS];
    void *with_maps[KILN_MAX_PARAMS + KILN_MAX_TMAPS];
    if (plan->n_tmaps) {
        char why[300];
        CUresult r = kiln_cuda_tmap_params(plan, params, maps, with_maps, why, sizeof why);
        if (r != CUDA_SUCCESS)
            return kiln_errf(err, KILN_ERR_RESOURCE, "%s", why);
        params = with_maps;
    }
    for (int i = 0; i < plan->n_launches; i++) {
        const kiln_launch *l = &plan->launch[i];
        CUresult r;
        if (l->cluster[0] * l->cluster[1] * l->cluster[2] > 1) {
            CUlaunchConfig cfg;
            CUlaunchAttribute attr;
            kiln_cuda_launch_config(l, st->stream, &cfg, &attr);
            r = kiln_cuda.LaunchKernelEx(&cfg, entries[i]->fn, params, NULL);
        } else {
            r = kiln_cuda.LaunchKernel(entries[i]->fn, l->grid[0], l->grid[1], l->grid[2],
                                       l->block[0], l->block[1], l->block[2],
                                       (unsigned)l->smem_bytes, st->stream, params, NULL);
        }
        if (r != CUDA_SUCCESS)
            return launch_fail(st, r, l, err);
    }
    return KILN_OK;
}

static int cuda_sync(kiln_backend *be, kiln_err *err) {
    cuda_state *st = be->impl;
    if (st->dead)
        return cu_dead(st, err);
    CUresult r = kiln_cuda.StreamSynchronize(st->stream);
    if (r != CUDA_SUCCESS)
        return cu_fail(st, r, "cuStreamSynchronize", err);
    return KILN_OK;
}

/* Polls the stream: a kernel that never ends must not hang the gate in cuStreamSynchronize. The
 * sleep starts short (a candidate run is often tens of microseconds) and grows to a millisecond. */
static int cuda_wait(kiln_backend *be, double timeout_s, kiln_err *err) {
    cuda_state *st = be->impl;
    if (st->dead)
        return cu_dead(st, err);
    double t0 = kiln_now_s();
    useconds_t nap = 5;
    for (;;) {
        CUresult r = kiln_cuda.StreamQuery(st->stream);
        if (r == CUDA_SUCCESS)
            return KILN_OK;
        if (r != CUDA_ERROR_NOT_READY)
            return cu_fail(st, r, "cuStreamQuery", err);
        if (timeout_s > 0 && kiln_now_s() - t0 > timeout_s)
            return kiln_errf(err, KILN_ERR_TIMEOUT, "the device work did not finish within %.3g s",
                             timeout_s);
        usleep(nap);
        if (nap < 1000)
            nap *= 2;
    }
}

/* ---- memory ---- */

static void guarded_release(cuda_guarded *g) {
    if (g->alias) {
        kiln_cuda.MemUnmap(g->alias, g->map_len);
        kiln_cuda.MemAddressFree(g->alias, g->map_len);
    }
    if (g->map)
        kiln_cuda.MemUnmap(g->map, g->map_len);
    if (g->reserve)
        kiln_cuda.MemAddressFree(g->reserve, g->reserve_len);
    if (g->handle)
        kiln_cuda.MemRelease(g->handle);
    memset(g, 0, sizeof *g);
}

static int set_access(cuda_state *st, CUdeviceptr p, size_t n, int read_only) {
    CUmemAccessDesc d;
    memset(&d, 0, sizeof d);
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = (int)st->dev;
    d.flags = read_only ? CU_MEM_ACCESS_FLAGS_PROT_READ : CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return kiln_cuda.MemSetAccess(p, n, &d, 1);
}

/* A guarded buffer (see cuda_guarded). The guard on each side is one granule (2 MiB on an H200):
 * an index that runs past the end by less than that faults at once. */
static int guarded_alloc(cuda_state *st, size_t n_bytes, int read_only, kiln_devptr *out,
                         kiln_err *err) {
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = (int)st->dev;
    CUresult r;
    if (!st->granularity) {
        r = kiln_cuda.MemGetAllocationGranularity(&st->granularity, &prop,
                                                  CU_MEM_ALLOC_GRANULARITY_MINIMUM);
        if (r != CUDA_SUCCESS)
            return cu_fail(st, r, "cuMemGetAllocationGranularity", err);
    }
    size_t g = st->granularity, used = (n_bytes + 255) & ~(size_t)255;
    if (used == 0)
        used = 256;
    cuda_guarded b = {0};
    b.map_len = (used + g - 1) / g * g;
    b.reserve_len = b.map_len + 2 * g;
    const char *what = "cuMemCreate";
    if ((r = kiln_cuda.MemCreate(&b.handle, b.map_len, &prop, 0)) != CUDA_SUCCESS)
        goto fail;
    what = "cuMemAddressReserve";
    if ((r = kiln_cuda.MemAddressReserve(&b.reserve, b.reserve_len, g, 0, 0)) != CUDA_SUCCESS) {
        b.reserve = 0;
        goto fail;
    }
    what = "cuMemMap";
    if ((r = kiln_cuda.MemMap(b.reserve + g, b.map_len, 0, b.handle, 0)) != CUDA_SUCCESS)
        goto fail;
    b.map = b.reserve + g;
    what = "cuMemSetAccess";
    r = set_access(st, b.map, b.map_len, read_only && !st->no_read_only);
    if (r != CUDA_SUCCESS && read_only && !st->no_read_only) {
        /* A driver that cannot map device memory read-only: the inputs stay writable, and the
         * gate's comparison of every input with its pristine copy is what catches a store. */
        st->no_read_only = 1;
        fprintf(stderr,
                "kiln: this driver cannot map device memory read-only (%s); inputs are "
                "compared with their copies instead\n",
                kiln_cuda_error_name(r));
        r = set_access(st, b.map, b.map_len, 0);
    }
    if (r != CUDA_SUCCESS)
        goto fail;
    if (read_only) {
        what = "cuMemAddressReserve (alias)";
        if ((r = kiln_cuda.MemAddressReserve(&b.alias, b.map_len, g, 0, 0)) != CUDA_SUCCESS) {
            b.alias = 0;
            goto fail;
        }
        what = "cuMemMap (alias)";
        if ((r = kiln_cuda.MemMap(b.alias, b.map_len, 0, b.handle, 0)) != CUDA_SUCCESS) {
            kiln_cuda.MemAddressFree(b.alias, b.map_len);
            b.alias = 0;
            goto fail;
        }
        what = "cuMemSetAccess (alias)";
        if ((r = set_access(st, b.alias, b.map_len, 0)) != CUDA_SUCCESS)
            goto fail;
    }
    b.user = b.map + b.map_len - used;
    if (st->n_guarded == st->cap_guarded) {
        st->cap_guarded = st->cap_guarded ? 2 * st->cap_guarded : 16;
        st->guarded = xrealloc(st->guarded, (size_t)st->cap_guarded * sizeof *st->guarded);
    }
    st->guarded[st->n_guarded++] = b;
    *out = (kiln_devptr)b.user;
    return KILN_OK;
fail:
    guarded_release(&b);
    {
        char m[96];
        snprintf(m, sizeof m, "%s (a guarded buffer of %zu bytes)", what, n_bytes);
        return cu_fail(st, r, m, err);
    }
}

static cuda_guarded *guarded_find(cuda_state *st, kiln_devptr p) {
    for (int i = 0; i < st->n_guarded; i++)
        if (p >= st->guarded[i].map && p < st->guarded[i].map + st->guarded[i].map_len)
            return &st->guarded[i];
    return NULL;
}

/* Where the gate writes p: the read-write alias of a read-only buffer, else p itself. */
static CUdeviceptr writable(cuda_state *st, kiln_devptr p) {
    cuda_guarded *g = guarded_find(st, p);
    return g && g->alias ? g->alias + (p - g->map) : (CUdeviceptr)p;
}

static int cuda_alloc(kiln_backend *be, size_t n_bytes, unsigned flags, kiln_devptr *out,
                      kiln_err *err) {
    cuda_state *st = be->impl;
    if (st->dead)
        return cu_dead(st, err);
    if (flags & KILN_ALLOC_CANDIDATE)
        return guarded_alloc(st, n_bytes, (flags & KILN_ALLOC_READONLY) != 0, out, err);
    CUdeviceptr p = 0;
    CUresult r = kiln_cuda.MemAlloc(&p, n_bytes ? n_bytes : 1);
    if (r != CUDA_SUCCESS) {
        char what[64];
        snprintf(what, sizeof what, "allocating %zu bytes", n_bytes);
        return cu_fail(st, r, what, err);
    }
    *out = (kiln_devptr)p;
    return KILN_OK;
}

static void cuda_free(kiln_backend *be, kiln_devptr p) {
    cuda_state *st = be->impl;
    if (!p || st->dead)
        return;
    cuda_guarded *g = guarded_find(st, p);
    if (g) {
        guarded_release(g);
        *g = st->guarded[--st->n_guarded];
        return;
    }
    kiln_cuda.MemFree((CUdeviceptr)p);
}

static int cuda_upload(kiln_backend *be, kiln_devptr dst, const void *src, size_t n,
                       kiln_err *err) {
    cuda_state *st = be->impl;
    if (st->dead)
        return cu_dead(st, err);
    if (n == 0)
        return KILN_OK;
    CUresult r = kiln_cuda.MemcpyHtoDAsync(writable(st, dst), src, n, st->stream);
    if (r == CUDA_SUCCESS)
        r = kiln_cuda.StreamSynchronize(st->stream);
    return r == CUDA_SUCCESS ? KILN_OK : cu_fail(st, r, "upload", err);
}

static int cuda_download(kiln_backend *be, void *dst, kiln_devptr src, size_t n, kiln_err *err) {
    cuda_state *st = be->impl;
    if (st->dead)
        return cu_dead(st, err);
    if (n == 0)
        return KILN_OK;
    CUresult r = kiln_cuda.MemcpyDtoHAsync(dst, (CUdeviceptr)src, n, st->stream);
    if (r == CUDA_SUCCESS)
        r = kiln_cuda.StreamSynchronize(st->stream);
    return r == CUDA_SUCCESS ? KILN_OK : cu_fail(st, r, "download", err);
}

static int cuda_memset8(kiln_backend *be, kiln_devptr dst, uint8_t value, size_t n, kiln_err *err) {
    cuda_state *st = be->impl;
    if (st->dead)
        return cu_dead(st, err);
    if (n == 0)
        return KILN_OK;
    CUresult r = kiln_cuda.MemsetD8Async(writable(st, dst), value, n, st->stream);
    return r == CUDA_SUCCESS ? KILN_OK : cu_fail(st, r, "memset", err);
}

static int cuda_copy(kiln_backend *be, kiln_devptr dst, kiln_devptr src, size_t n, kiln_err *err) {
    cuda_state *st = be->impl;
    if (st->dead)
        return cu_dead(st, err);
    if (n == 0)
        return KILN_OK;
    CUresult r = kiln_cuda.MemcpyDtoDAsync(writable(st, dst), (CUdeviceptr)src, n, st->stream);
    return r == CUDA_SUCCESS ? KILN_OK : cu_fail(st, r, "device-to-device copy", err);
}

static void *cuda_host_view(kiln_backend *be, kiln_devptr p) {
    (void)be, (void)p;
    return NULL;
}

static int cuda_flush_cache(kiln_backend *be, kiln_err *err) {
    cuda_state *st = be->impl;
    if (st->dead)
        return cu_dead(st, err);
    /* A different byte each time, so that no layer can skip the writes as redundant. */
    CUresult r = kiln_cuda.MemsetD8Async(st->flush_buf, (unsigned char)(++st->flush_round & 0xff),
                                         st->flush_len, st->stream);
    return r == CUDA_SUCCESS ? KILN_OK : cu_fail(st, r, "cache flush", err);
}

/* ---- timing ---- */

static int cuda_timer_create(kiln_backend *be, kiln_timer **out, kiln_err *err) {
    cuda_state *st = be->impl;
    *out = NULL;
    if (st->dead)
        return cu_dead(st, err);
    kiln_timer *t = xcalloc(1, sizeof *t);
    CUresult r = kiln_cuda.EventCreate(&t->start, CU_EVENT_DEFAULT);
    if (r == CUDA_SUCCESS) {
        r = kiln_cuda.EventCreate(&t->stop, CU_EVENT_DEFAULT);
        if (r != CUDA_SUCCESS)
            kiln_cuda.EventDestroy(t->start);
    }
    if (r != CUDA_SUCCESS) {
        free(t);
        return cu_fail(st, r, "cuEventCreate", err);
    }
    *out = t;
    return KILN_OK;
}

static void cuda_timer_destroy(kiln_backend *be, kiln_timer *t) {
    cuda_state *st = be->impl;
    if (!t)
        return;
    if (!st->dead) {
        kiln_cuda.EventDestroy(t->start);
        kiln_cuda.EventDestroy(t->stop);
    }
    free(t);
}

static int cuda_timer_start(kiln_backend *be, kiln_timer *t, kiln_err *err) {
    cuda_state *st = be->impl;
    if (st->dead)
        return cu_dead(st, err);
    t->recorded = 0;
    CUresult r = kiln_cuda.EventRecord(t->start, st->stream);
    if (r != CUDA_SUCCESS)
        return cu_fail(st, r, "cuEventRecord", err);
    t->recorded = 1;
    return KILN_OK;
}

static int cuda_timer_stop(kiln_backend *be, kiln_timer *t, kiln_err *err) {
    cuda_state *st = be->impl;
    if (st->dead)
        return cu_dead(st, err);
    if (t->recorded != 1)
        return kiln_errf(err, KILN_ERR_INVALID, "timer stopped before it was started");
    CUresult r = kiln_cuda.EventRecord(t->stop, st->stream);
    if (r != CUDA_SUCCESS)
        return cu_fail(st, r, "cuEventRecord", err);
    t->recorded = 2;
    return KILN_OK;
}

static int cuda_timer_elapsed_us(kiln_backend *be, kiln_timer *t, double *us, kiln_err *err) {
    cuda_state *st = be->impl;
    if (st->dead)
        return cu_dead(st, err);
    if (t->recorded != 2)
        return kiln_errf(err, KILN_ERR_INVALID, "timer read before it was started and stopped");
    CUresult r = kiln_cuda.EventSynchronize(t->stop);
    if (r != CUDA_SUCCESS)
        return cu_fail(st, r, "cuEventSynchronize", err);
    float ms = 0;
    r = kiln_cuda.EventElapsedTime(&ms, t->start, t->stop);
    if (r != CUDA_SUCCESS)
        return cu_fail(st, r, "cuEventElapsedTime", err);
    *us = (double)ms * 1000.0;
    return KILN_OK;
}

/* ---- the gate's own kernels ---- */

static int cuda_load_raw(kiln_backend *be, const char *source, kiln_module **out, char **log,
                         kiln_err *err) {
    cuda_state *st = be->impl;
    *out = NULL;
    if (log)
        *log = NULL;
    if (st->dead)
        return cu_dead(st, err);
    return compile_load(st, source, out, log, err);
}

static int cuda_launch_raw(kiln_backend *be, kiln_module *m, const char *entry,
                           const unsigned grid[3], const unsigned block[3], void **params,
                           kiln_err *err) {
    cuda_state *st = be->impl;
    if (st->dead)
        return cu_dead(st, err);
    cuda_entry *e = find_entry(m, entry);
    if (!e) {
        if (m->n == KILN_MAX_LAUNCHES)
            return kiln_errf(err, KILN_ERR_INVALID, "a raw module of more than %d entry points",
                             KILN_MAX_LAUNCHES);
        e = &m->e[m->n];
        CUresult r = kiln_cuda.ModuleGetFunction(&e->fn, m->mod, entry);
        if (r != CUDA_SUCCESS)
            return cu_fail(st, r, "cuModuleGetFunction", err);
        snprintf(e->name, sizeof e->name, "%s", entry);
        kiln_cuda_func_attrs_get(e->fn, &e->attrs);
        m->n++;
    }
    CUresult r = kiln_cuda.LaunchKernel(e->fn, grid[0], grid[1], grid[2], block[0], block[1],
                                        block[2], 0, st->stream, params, NULL);
    return r == CUDA_SUCCESS ? KILN_OK : cu_fail(st, r, entry, err);
}

const kiln_backend_ops kiln_backend_cuda = {
    .name = "cuda",
    .init = cuda_init,
    .shutdown = cuda_shutdown,
    .device_info = cuda_device_info,
    .compile = cuda_compile,
    .module_free = cuda_module_free,
    .entry_attrs = cuda_entry_attrs,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .memset8 = cuda_memset8,
    .copy = cuda_copy,
    .host_view = cuda_host_view,
    .reset_state = cuda_reset_state,
    .launch = cuda_launch,
    .sync = cuda_sync,
    .wait = cuda_wait,
    .flush_cache = cuda_flush_cache,
    .timer_create = cuda_timer_create,
    .timer_destroy = cuda_timer_destroy,
    .timer_start = cuda_timer_start,
    .timer_stop = cuda_timer_stop,
    .timer_elapsed_us = cuda_timer_elapsed_us,
    .load_raw = cuda_load_raw,
    .launch_raw = cuda_launch_raw,
    .library_resolved = cuda_library_resolved,
};
