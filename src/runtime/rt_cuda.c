/* rt_cuda.c: libkiln_rt's CUDA layer: loads a library's cubins into the primary context of one
 * device and launches them on a stream that PyTorch hands over.
 *
 * Why not the cuda backend (src/backend/cuda.c). The backend owns its process: it creates its own
 * stream, allocates a cache-flush buffer of twice the L2, compiles with NVRTC. Inside a user's
 * PyTorch process none of that is wanted: the kernels are already compiled (the library's cubins),
 * memory comes from PyTorch's allocator, and every launch goes on the stream PyTorch is using at
 * that moment (torch._C._cuda_getCurrentRawStream), so that it is ordered with the model's own
 * kernels and is recorded when that stream is being captured into a CUDA graph. What the two share
 * is the driver itself (src/backend/cuda_driver.c: the functions, resolved once through
 * cuGetProcAddress; the device's facts; the error text; the checks a launch must pass on a kernel).
 *
 * The context. PyTorch works in each device's primary context. kiln_rt retains the same primary
 * context (cuDevicePrimaryCtxRetain), loads its modules in it, and at each launch pushes it only
 * when another context is current on the calling thread (a thread that has not touched CUDA yet,
 * or one whose current device is another GPU): PyTorch's notion of the current device is derived
 * from the current context, so kiln must never leave it changed. The check is one
 * cuCtxGetCurrent, tens of nanoseconds.
 *
 * Graph capture. Everything that is not a launch happens at load: module loading, resolving entry
 * points, raising a kernel's dynamic shared memory or cluster limits, and forcing lazily loaded
 * kernels in (CUDA_MODULE_LOADING=LAZY is the default since CUDA 12.2, and loading a kernel
 * during a capture is a synchronising call that would invalidate it). At launch time only
 * cuCtxGetCurrent, cuLaunchKernelEx and, rarely, a push/pop are called: all legal under capture.
 * Parameters are copied by the driver when the launch is recorded, so a graph replays the
 * pointers and axes of the captured call, which is what a graph means.
 *
 * Errors. Nothing aborts. A kernel that faults poisons the context (sticky error) for PyTorch as
 * well; kiln reports the driver's text and the caller raises. */
#include "rt_impl.h"
#include "../backend/cuda_driver.h"
#include "../backend/lt_call.h"

#include <string.h>

struct rt_gpu {
    CUdevice dev;
    CUcontext ctx;
    int retained;
    kiln_device_info info;
};

typedef struct {
    char name[128];
    CUfunction fn;
    kiln_cuda_func_limits limits;
} rt_function;

struct rt_cuda_module {
    CUmodule mod;
    int n;
    rt_function fn[KILN_MAX_LAUNCHES];
    int launch_fn[KILN_MAX_LAUNCHES]; /* plan launch i -> fn index */
};

/* Makes the primary context current for a scope: *pushed tells whether it must be popped. */
static CUresult ctx_enter(rt_gpu *g, int *pushed) {
    CUcontext cur = NULL;
    *pushed = 0;
    CUresult r = kiln_cuda.CtxGetCurrent(&cur);
    if (r != CUDA_SUCCESS)
        return r;
    if (cur == g->ctx)
        return CUDA_SUCCESS;
    r = kiln_cuda.CtxPushCurrent(g->ctx);
    if (r == CUDA_SUCCESS)
        *pushed = 1;
    return r;
}

static void ctx_leave(int pushed) {
    if (pushed) {
        CUcontext popped = NULL;
        kiln_cuda.CtxPopCurrent(&popped);
    }
}

int rt_gpu_open(int ordinal, rt_gpu **out, kiln_device_info *info, kiln_err *err) {
    *out = NULL;
    rt_gpu *g = xcalloc(1, sizeof *g);
    int rc = kiln_cuda_device_open(ordinal, "a cuda library needs a GPU", &g->dev, &g->ctx,
                                   &g->info, err);
    if (rc) {
        free(g);
        return rc;
    }
    g->retained = 1;
    *info = g->info;
    *out = g;
    return KILN_OK;
}

void rt_gpu_close(rt_gpu *g) {
    if (!g)
        return;
    if (g->retained)
        kiln_cuda.DevicePrimaryCtxRelease(g->dev);
    free(g);
}

/* Checks one entry point against a launch and raises its limits where the launch needs it. */
static int prepare(rt_gpu *g, rt_function *f, const kiln_launch *l, int n_params, int n_tmaps,
                   kiln_err *err) {
    kiln_cuda_func_attrs a;
    kiln_cuda_func_attrs_get(f->fn, &a);
    if (kiln_cuda.FuncLoad)
        kiln_cuda.FuncLoad(f->fn);
    size_t sizes[KILN_MAX_PARAMS + KILN_MAX_TMAPS];
    int n = kiln_cuda_param_sizes(f->fn, sizes, KILN_MAX_PARAMS + KILN_MAX_TMAPS);
    for (int i = 0; i < n && i < KILN_MAX_PARAMS + KILN_MAX_TMAPS; i++)
        if (sizes[i] != (i < n_params ? 8 : KILN_TMAP_BYTES))
            return kiln_errf(err, KILN_ERR_FORMAT,
                             "'%s': parameter %d is %zu bytes; the ABI passes pointers and int64 "
                             "axes (8 bytes), then tensor maps (%d bytes)",
                             f->name, i + 1, sizes[i], KILN_TMAP_BYTES);
    if (n >= 0 && n != n_params + n_tmaps)
        return kiln_errf(err, KILN_ERR_FORMAT,
                         "'%s' takes %d parameters; the manifest implies %d (a cubin from another "
                         "build?)",
                         f->name, n, n_params + n_tmaps);
    char why[400];
    if (kiln_cuda_launch_fits(f->name, &a, l, &g->info, why, sizeof why) != 0)
        return kiln_errf(err, KILN_ERR_FORMAT, "%s", why);
    CUresult r = kiln_cuda_raise_limits(f->fn, &a, l, &f->limits);
    if (r != CUDA_SUCCESS)
        return kiln_errf(err, KILN_ERR_BACKEND,
                         "'%s': raising its shared memory or cluster limit: %s: %s", f->name,
                         kiln_cuda_error_name(r), kiln_cuda_error_text(r));
    return KILN_OK;
}

int rt_gpu_module_load(rt_gpu *g, const void *image, const kiln_launch_plan *plan, int n_params,
                       rt_cuda_module **out, kiln_err *err) {
    *out = NULL;
    /* Allocated before the context is pushed: running out of memory jumps out of kiln_rt_open
     * (kiln_rt.c), which must not leave kiln's context current on PyTorch's thread. */
    rt_cuda_module *m = xcalloc(1, sizeof *m);
    int pushed = 0, rc = KILN_OK;
    CUresult r = ctx_enter(g, &pushed);
    if (r != CUDA_SUCCESS) {
        free(m);
        return kiln_errf(err, KILN_ERR_BACKEND, "making the primary context current: %s: %s",
                         kiln_cuda_error_name(r), kiln_cuda_error_text(r));
    }
    r = kiln_cuda.ModuleLoadData(&m->mod, image);
    if (r != CUDA_SUCCESS) {
        m->mod = NULL;
        rc = kiln_errf(err, KILN_ERR_FORMAT, "the driver rejects the cubin: %s: %s",
                       kiln_cuda_error_name(r), kiln_cuda_error_text(r));
        goto done;
    }
    for (int i = 0; i < plan->n_launches && rc == KILN_OK; i++) {
        const kiln_launch *l = &plan->launch[i];
        int k = 0;
        while (k < m->n && strcmp(m->fn[k].name, l->entry) != 0)
            k++;
        if (k == m->n) {
            rt_function *f = &m->fn[m->n];
            snprintf(f->name, sizeof f->name, "%s", l->entry);
            r = kiln_cuda.ModuleGetFunction(&f->fn, m->mod, l->entry);
            if (r != CUDA_SUCCESS) {
                rc = kiln_errf(err, KILN_ERR_FORMAT, "entry point '%s' is not in the cubin: %s",
                               l->entry, kiln_cuda_error_name(r));
                break;
            }
            m->n++;
        }
        m->launch_fn[i] = k;
        rc = prepare(g, &m->fn[k], l, n_params, plan->n_tmaps, err);
    }
done:
    if (rc) {
        if (m->mod)
            kiln_cuda.ModuleUnload(m->mod);
        free(m);
    } else {
        *out = m;
    }
    ctx_leave(pushed);
    return rc;
}

void rt_gpu_module_free(rt_gpu *g, rt_cuda_module *m) {
    if (!m)
        return;
    int pushed = 0;
    if (ctx_enter(g, &pushed) == CUDA_SUCCESS) {
        kiln_cuda.ModuleUnload(m->mod);
        ctx_leave(pushed);
    }
    free(m);
}

int rt_gpu_launch(rt_gpu *g, rt_cuda_module *m, const kiln_launch_plan *plan, void **params,
                  void *stream, kiln_err *err) {
    int pushed = 0;
    CUresult r = ctx_enter(g, &pushed);
    if (r != CUDA_SUCCESS)
        return kiln_errf(err, KILN_ERR_LAUNCH, "making the primary context current: %s: %s",
                         kiln_cuda_error_name(r), kiln_cuda_error_text(r));
    int rc = KILN_OK;
    CUtensorMap maps[KILN_MAX_TMAPS];
    void *with_maps[KILN_MAX_PARAMS + KILN_MAX_TMAPS];
    if (plan->n_tmaps) {
        char why[300];
        r = kiln_cuda_tmap_params(plan, params, maps, with_maps, why, sizeof why);
        if (r != CUDA_SUCCESS) {
            ctx_leave(pushed);
            return kiln_errf(err, KILN_ERR_LAUNCH, "%s", why);
        }
        params = with_maps;
    }
    for (int i = 0; i < plan->n_launches; i++) {
        const kiln_launch *l = &plan->launch[i];
        CUlaunchConfig cfg;
        CUlaunchAttribute cluster;
        kiln_cuda_launch_config(l, (CUstream)stream, &cfg, &cluster);
        r = kiln_cuda.LaunchKernelEx(&cfg, m->fn[m->launch_fn[i]].fn, params, NULL);
        if (r != CUDA_SUCCESS) {
            rc = kiln_errf(err, KILN_ERR_LAUNCH, "launch %d ('%s'): %s: %s", i, l->entry,
                           kiln_cuda_error_name(r), kiln_cuda_error_text(r));
            break;
        }
    }
    ctx_leave(pushed);
    return rc;
}

/* ---- cuBLASLt entries ---- */

struct rt_lt {
    kiln_lt_call *call;
    CUdeviceptr workspace;
};

int rt_gpu_lt_open(rt_gpu *g, const char *call_json, const kiln_signature *sig, rt_lt **out,
                   kiln_err *err) {
    *out = NULL;
    kiln_lt_call_desc d;
    int rc = kiln_lt_call_parse(call_json, sig, &d, err);
    if (rc)
        return KILN_ERR_FORMAT;
    if (!d.has_config)
        return kiln_errf(err, KILN_ERR_FORMAT,
                         "a cuBLASLt entry must hold its configuration, not an index into an "
                         "enumeration");
    int pushed = 0;
    CUresult r = ctx_enter(g, &pushed);
    if (r != CUDA_SUCCESS)
        return kiln_errf(err, KILN_ERR_BACKEND, "making the primary context current: %s: %s",
                         kiln_cuda_error_name(r), kiln_cuda_error_text(r));
    rt_lt *l = xcalloc(1, sizeof *l);
    rc = kiln_lt_call_open(&d, &l->call, err);
    uint64_t ws = rc == KILN_OK ? kiln_lt_call_workspace(l->call) : 0;
    if (rc == KILN_OK && ws &&
        (r = kiln_cuda.MemAlloc(&l->workspace, (size_t)((ws + 255) & ~(uint64_t)255))) !=
            CUDA_SUCCESS)
        rc = kiln_errf(err, KILN_ERR_BACKEND, "cuMemAlloc of %llu bytes of cuBLASLt workspace: %s",
                       (unsigned long long)ws, kiln_cuda_error_text(r));
    ctx_leave(pushed);
    if (rc) {
        rt_gpu_lt_free(g, l);
        return rc;
    }
    *out = l;
    return KILN_OK;
}

void rt_gpu_lt_free(rt_gpu *g, rt_lt *l) {
    if (!l)
        return;
    int pushed = 0;
    if (ctx_enter(g, &pushed) == CUDA_SUCCESS) {
        kiln_lt_call_close(l->call);
        if (l->workspace)
            kiln_cuda.MemFree(l->workspace);
        ctx_leave(pushed);
    }
    free(l);
}

int rt_gpu_lt_run(rt_gpu *g, rt_lt *l, void **params, void *stream, kiln_err *err) {
    int pushed = 0;
    CUresult r = ctx_enter(g, &pushed);
    if (r != CUDA_SUCCESS)
        return kiln_errf(err, KILN_ERR_LAUNCH, "making the primary context current: %s: %s",
                         kiln_cuda_error_name(r), kiln_cuda_error_text(r));
    int rc = kiln_lt_call_run(l->call, params, l->workspace, stream, err);
    ctx_leave(pushed);
    return rc;
}
