/* rt_cuda.c: libkiln_rt's CUDA layer: loads a library's cubins into the primary context of one
 * device and launches them on a stream that PyTorch hands over.
 *
 * Why not the cuda backend (src/backend/cuda.c). The backend owns its process: it creates its own
 * stream, allocates a cache-flush buffer of twice the L2, compiles with NVRTC. Inside a user's
 * PyTorch process none of that is wanted: the kernels are already compiled (the library's cubins),
 * memory comes from PyTorch's allocator, and every launch goes on the stream PyTorch is using at
 * that moment (torch._C._cuda_getCurrentRawStream), so that it is ordered with the model's own
 * kernels and is recorded when that stream is being captured into a CUDA graph. So this file loads
 * the driver the same way (kiln_cuda_driver_resolve in src/backend/cuda_driver.c: dlopen
 * libcuda.so.1, every function through cuGetProcAddress at the version of the header or of the
 * driver, whichever is older; cuda.c's essay says why) but resolves only what a launcher needs.
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
#include "../backend/cuda_backend.h"

#include <cuda.h>

#include <stddef.h>
#include <string.h>

#define RT_DEFAULT_SMEM_BYTES (48 * 1024)
#define RT_PORTABLE_CLUSTER 8
#define RT_MAX_CLUSTER 16

#define RT_DRIVER_FUNCS(X)                                                                         \
    X(Init, (unsigned int flags))                                                                  \
    X(DriverGetVersion, (int *version))                                                            \
    X(DeviceGetCount, (int *count))                                                                \
    X(DeviceGet, (CUdevice * dev, int ordinal))                                                    \
    X(DeviceGetAttribute, (int *value, CUdevice_attribute attr, CUdevice dev))                     \
    X(DeviceGetName, (char *name, int len, CUdevice dev))                                          \
    X(DeviceGetUuid, (CUuuid * uuid, CUdevice dev))                                                \
    X(DeviceTotalMem, (size_t * bytes, CUdevice dev))                                              \
    X(DevicePrimaryCtxRetain, (CUcontext * ctx, CUdevice dev))                                     \
    X(DevicePrimaryCtxRelease, (CUdevice dev))                                                     \
    X(CtxGetCurrent, (CUcontext * ctx))                                                            \
    X(CtxPushCurrent, (CUcontext ctx))                                                             \
    X(CtxPopCurrent, (CUcontext * ctx))                                                            \
    X(ModuleLoadData, (CUmodule * mod, const void *image))                                         \
    X(ModuleUnload, (CUmodule mod))                                                                \
    X(ModuleGetFunction, (CUfunction * fn, CUmodule mod, const char *name))                        \
    X(FuncGetAttribute, (int *value, CUfunction_attribute attr, CUfunction fn))                    \
    X(FuncSetAttribute, (CUfunction fn, CUfunction_attribute attr, int value))                     \
    X(LaunchKernelEx, (const CUlaunchConfig *config, CUfunction fn, void **params, void **extra))  \
    X(GetErrorName, (CUresult r, const char **name))                                               \
    X(GetErrorString, (CUresult r, const char **text))                                             \
    X(FuncGetParamInfo, (CUfunction fn, size_t index, size_t * offset, size_t * size))             \
    X(FuncLoad, (CUfunction fn))

/* Functions kiln_rt can do without on older drivers (their checks are skipped). */
static int optional_func(const char *name) {
    return strcmp(name, "cuFuncGetParamInfo") == 0 || strcmp(name, "cuFuncLoad") == 0;
}

#define RT_MEMBER(name, params) CUresult(*name) params;
typedef struct {
    RT_DRIVER_FUNCS(RT_MEMBER)
} rt_driver;
#undef RT_MEMBER

#define RT_SYM(name, params) {"cu" #name, offsetof(rt_driver, name)},
static const kiln_cuda_sym rt_syms[] = {RT_DRIVER_FUNCS(RT_SYM)};
#undef RT_SYM

static rt_driver drv;
static kiln_cuda_loader drv_loader;

static int driver_load(kiln_err *err) {
    return kiln_cuda_driver_load(&drv_loader, &drv, rt_syms, sizeof rt_syms / sizeof rt_syms[0],
                                 optional_func, "a cuda library needs a GPU", err);
}

static const char *cu_name(CUresult r) {
    const char *s = NULL;
    if (drv.GetErrorName && drv.GetErrorName(r, &s) == CUDA_SUCCESS && s)
        return s;
    return "CUDA_ERROR_UNKNOWN_CODE";
}

static const char *cu_text(CUresult r) {
    const char *s = NULL;
    if (drv.GetErrorString && drv.GetErrorString(r, &s) == CUDA_SUCCESS && s)
        return s;
    return "unknown error";
}

struct rt_gpu {
    CUdevice dev;
    CUcontext ctx;
    int retained;
    kiln_device_info info;
};

typedef struct {
    char name[128];
    CUfunction fn;
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
    CUresult r = drv.CtxGetCurrent(&cur);
    if (r != CUDA_SUCCESS)
        return r;
    if (cur == g->ctx)
        return CUDA_SUCCESS;
    r = drv.CtxPushCurrent(g->ctx);
    if (r == CUDA_SUCCESS)
        *pushed = 1;
    return r;
}

static void ctx_leave(int pushed) {
    if (pushed) {
        CUcontext popped = NULL;
        drv.CtxPopCurrent(&popped);
    }
}

static int attr(rt_gpu *g, CUdevice_attribute a) {
    int v = 0;
    return drv.DeviceGetAttribute(&v, a, g->dev) == CUDA_SUCCESS ? v : 0;
}

int rt_gpu_open(int ordinal, rt_gpu **out, kiln_device_info *info, kiln_err *err) {
    *out = NULL;
    int rc = driver_load(err);
    if (rc)
        return rc;
    CUresult r = drv.Init(0);
    if (r != CUDA_SUCCESS)
        return kiln_errf(err, KILN_ERR_NO_DEVICE, "no usable CUDA device: cuInit: %s: %s",
                         cu_name(r), cu_text(r));
    int count = 0;
    if (drv.DeviceGetCount(&count) != CUDA_SUCCESS || count == 0)
        return kiln_errf(err, KILN_ERR_NO_DEVICE, "no CUDA device");
    if (ordinal < 0 || ordinal >= count)
        return kiln_errf(err, KILN_ERR_NO_DEVICE, "no CUDA device %d (%d present)", ordinal, count);
    rt_gpu *g = xcalloc(1, sizeof *g);
    if ((r = drv.DeviceGet(&g->dev, ordinal)) != CUDA_SUCCESS ||
        (r = drv.DevicePrimaryCtxRetain(&g->ctx, g->dev)) != CUDA_SUCCESS) {
        free(g);
        return kiln_errf(err, KILN_ERR_BACKEND, "CUDA device %d: %s: %s", ordinal, cu_name(r),
                         cu_text(r));
    }
    g->retained = 1;
    kiln_device_info *d = &g->info;
    if (drv.DeviceGetName(d->name, (int)sizeof d->name, g->dev) != CUDA_SUCCESS)
        snprintf(d->name, sizeof d->name, "CUDA device %d", ordinal);
    CUuuid u;
    memset(&u, 0, sizeof u);
    drv.DeviceGetUuid(&u, g->dev);
    const unsigned char *b = (const unsigned char *)u.bytes;
    snprintf(d->uuid, sizeof d->uuid,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
             b[15]);
    d->cc_major = attr(g, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    d->cc_minor = attr(g, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    d->n_sms = attr(g, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    d->l2_bytes = (size_t)attr(g, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    d->smem_per_block_optin =
        (size_t)attr(g, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    if (d->smem_per_block_optin == 0)
        d->smem_per_block_optin = RT_DEFAULT_SMEM_BYTES;
    size_t total = 0;
    if (drv.DeviceTotalMem(&total, g->dev) == CUDA_SUCCESS)
        d->mem_bytes = total;
    *info = *d;
    *out = g;
    return KILN_OK;
}

void rt_gpu_close(rt_gpu *g) {
    if (!g)
        return;
    if (g->retained)
        drv.DevicePrimaryCtxRelease(g->dev);
    free(g);
}

/* Checks one entry point against a launch and raises its limits where the launch needs it. */
static int prepare(rt_gpu *g, rt_function *f, const kiln_launch *l, int n_params, kiln_err *err) {
    int max_threads = 0, regs = 0, static_smem = 0;
    /* Querying attributes also loads a lazily loaded kernel (CUDA_MODULE_LOADING=LAZY). */
    drv.FuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f->fn);
    drv.FuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f->fn);
    drv.FuncGetAttribute(&static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f->fn);
    if (drv.FuncLoad)
        drv.FuncLoad(f->fn);
    if (drv.FuncGetParamInfo) {
        int n = 0;
        for (; n <= KILN_MAX_PARAMS; n++) {
            size_t offset = 0, size = 0;
            CUresult r = drv.FuncGetParamInfo(f->fn, (size_t)n, &offset, &size);
            if (r == CUDA_ERROR_INVALID_VALUE)
                break;
            if (r != CUDA_SUCCESS) {
                n = -1; /* the driver cannot tell */
                break;
            }
            if (size != 8)
                return kiln_errf(err, KILN_ERR_FORMAT,
                                 "'%s': parameter %d is %zu bytes; the ABI passes pointers and "
                                 "int64 axes (8 bytes)",
                                 f->name, n + 1, size);
        }
        if (n >= 0 && n != n_params)
            return kiln_errf(err, KILN_ERR_FORMAT,
                             "'%s' takes %d parameters; the manifest implies %d (a cubin from "
                             "another build?)",
                             f->name, n, n_params);
    }
    unsigned long long threads = (unsigned long long)l->block[0] * l->block[1] * l->block[2];
    if (threads > (unsigned long long)max_threads)
        return kiln_errf(err, KILN_ERR_FORMAT,
                         "'%s': block of %llu threads, the kernel runs at most %d (%d registers)",
                         f->name, threads, max_threads, regs);
    size_t smem = (size_t)static_smem + l->smem_bytes;
    if (smem > g->info.smem_per_block_optin)
        return kiln_errf(err, KILN_ERR_FORMAT,
                         "'%s': %zu bytes of shared memory; a block gets at most %zu", f->name,
                         smem, g->info.smem_per_block_optin);
    CUresult r;
    if (smem > RT_DEFAULT_SMEM_BYTES) {
        r = drv.FuncSetAttribute(f->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                 (int)l->smem_bytes);
        if (r != CUDA_SUCCESS)
            return kiln_errf(err, KILN_ERR_BACKEND, "'%s': raising shared memory: %s: %s", f->name,
                             cu_name(r), cu_text(r));
    }
    unsigned long long cluster = (unsigned long long)l->cluster[0] * l->cluster[1] * l->cluster[2];
    if (cluster > 1) {
        if (g->info.cc_major < 9 || cluster > RT_MAX_CLUSTER)
            return kiln_errf(err, KILN_ERR_FORMAT, "'%s': a cluster of %llu blocks on sm_%d%d",
                             f->name, cluster, g->info.cc_major, g->info.cc_minor);
        for (int d = 0; d < 3; d++)
            if (l->grid[d] % l->cluster[d] != 0)
                return kiln_errf(err, KILN_ERR_FORMAT,
                                 "'%s': grid is not a multiple of the cluster", f->name);
        if (cluster > RT_PORTABLE_CLUSTER) {
            r = drv.FuncSetAttribute(f->fn, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1);
            if (r != CUDA_SUCCESS)
                return kiln_errf(err, KILN_ERR_BACKEND, "'%s': non-portable cluster: %s: %s",
                                 f->name, cu_name(r), cu_text(r));
        }
    }
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
                         cu_name(r), cu_text(r));
    }
    r = drv.ModuleLoadData(&m->mod, image);
    if (r != CUDA_SUCCESS) {
        m->mod = NULL;
        rc = kiln_errf(err, KILN_ERR_FORMAT, "the driver rejects the cubin: %s: %s", cu_name(r),
                       cu_text(r));
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
            r = drv.ModuleGetFunction(&f->fn, m->mod, l->entry);
            if (r != CUDA_SUCCESS) {
                rc = kiln_errf(err, KILN_ERR_FORMAT, "entry point '%s' is not in the cubin: %s",
                               l->entry, cu_name(r));
                break;
            }
            m->n++;
        }
        m->launch_fn[i] = k;
        rc = prepare(g, &m->fn[k], l, n_params, err);
    }
done:
    if (rc) {
        if (m->mod)
            drv.ModuleUnload(m->mod);
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
        drv.ModuleUnload(m->mod);
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
                         cu_name(r), cu_text(r));
    int rc = KILN_OK;
    for (int i = 0; i < plan->n_launches; i++) {
        const kiln_launch *l = &plan->launch[i];
        CUlaunchAttribute at;
        memset(&at, 0, sizeof at);
        CUlaunchConfig cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.gridDimX = l->grid[0];
        cfg.gridDimY = l->grid[1];
        cfg.gridDimZ = l->grid[2];
        cfg.blockDimX = l->block[0];
        cfg.blockDimY = l->block[1];
        cfg.blockDimZ = l->block[2];
        cfg.sharedMemBytes = (unsigned)l->smem_bytes;
        cfg.hStream = (CUstream)stream;
        if (l->cluster[0] * l->cluster[1] * l->cluster[2] > 1) {
            at.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            at.value.clusterDim.x = l->cluster[0];
            at.value.clusterDim.y = l->cluster[1];
            at.value.clusterDim.z = l->cluster[2];
            cfg.attrs = &at;
            cfg.numAttrs = 1;
        }
        r = drv.LaunchKernelEx(&cfg, m->fn[m->launch_fn[i]].fn, params, NULL);
        if (r != CUDA_SUCCESS) {
            rc = kiln_errf(err, KILN_ERR_LAUNCH, "launch %d ('%s'): %s: %s", i, l->entry,
                           cu_name(r), cu_text(r));
            break;
        }
    }
    ctx_leave(pushed);
    return rc;
}
