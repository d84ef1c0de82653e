/* cuda_driver.c: the one way kiln reaches the NVIDIA driver, shared by the cuda backend (cuda.c)
 * and libkiln_rt (src/runtime/rt_cuda.c): the driver's functions, resolved once; then the facts
 * both need: the device's, the driver's error text, and what a launch must satisfy on a loaded
 * kernel.
 *
 * Why dlopen, and why cuGetProcAddress. kiln must build everywhere and run on machines with no GPU
 * (CI, a laptop): it says "no GPU" there instead of failing to start. So nothing links -lcuda or
 * -lnvrtc. libcuda.so.1 comes with the driver, never with the toolkit, and is opened at run time;
 * NVRTC comes with the toolkit and is opened on its own (nvrtc.c).
 * Looking driver functions up by name with dlsym would be wrong: the driver exports several ABI
 * generations of many entry points (cuMemAlloc takes a 32-bit size, cuMemAlloc_v2 a size_t;
 * _ptds/_ptsz variants use the per-thread default stream) and cuda.h picks one with macros at
 * compile time. cuGetProcAddress, given the base name and a CUDA version, returns the generation
 * that matches that version's header. We ask for the older of the header kiln was built against
 * (CUDA_VERSION) and the installed driver: every function kiln uses has kept its signature since
 * CUDA 12.0, so our declarations hold for either.
 *
 * Nothing here allocates: libkiln_rt calls it under a kiln_oom_scope (src/util/common.h), and the
 * loader runs under a lock. */
#include "cuda_driver.h"

#include <dlfcn.h>
#include <glob.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

kiln_cuda_driver kiln_cuda;

#define KILN_CUDA_SYM(name, params) {"cu" #name, offsetof(kiln_cuda_driver, name)},
static const struct {
    const char *name;
    size_t offset;
} driver_syms[] = {KILN_CUDA_DRIVER_FUNCS(KILN_CUDA_SYM)};
#undef KILN_CUDA_SYM

/* Functions kiln can do without (older drivers): their checks are skipped when absent. */
static int driver_func_optional(const char *name) {
    return strcmp(name, "cuFuncGetParamInfo") == 0 || strcmp(name, "cuFuncLoad") == 0;
}

typedef CUresult (*get_proc_v2_fn)(const char *symbol, void **fn, int version, cuuint64_t flags,
                                   CUdriverProcAddressQueryResult *status);
typedef CUresult (*get_proc_v1_fn)(const char *symbol, void **fn, int version, cuuint64_t flags);

/* The message of a machine without a driver, which the caller's advice ends. */
#define NO_DRIVER "no NVIDIA driver (libcuda.so.1 not found)"

/* Fills kiln_cuda. Not thread-safe: kiln_cuda_driver_load calls it once, under its lock. */
static int driver_resolve(kiln_err *err) {
    const size_t n = sizeof driver_syms / sizeof driver_syms[0];
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return kiln_errf(err, KILN_ERR_NO_DEVICE, NO_DRIVER);
    void *v2 = dlsym(lib, "cuGetProcAddress_v2");
    void *v1 = v2 ? NULL : dlsym(lib, "cuGetProcAddress");
    get_proc_v2_fn get_v2 = NULL;
    get_proc_v1_fn get_v1 = NULL;
    memcpy(&get_v2, &v2, sizeof v2);
    memcpy(&get_v1, &v1, sizeof v1);
    if (!get_v2 && !get_v1)
        return kiln_errf(err, KILN_ERR_NO_DEVICE,
                         "the NVIDIA driver is too old (libcuda.so.1 has no cuGetProcAddress): "
                         "kiln needs a CUDA 12 or newer driver");
    int version = CUDA_VERSION;
    for (int pass = 0; pass < 2; pass++) {
        /* Pass 0 resolves cuDriverGetVersion alone, pass 1 everything at the version agreed. */
        for (size_t i = 0; i < (pass == 0 ? 1 : n); i++) {
            const char *name = pass == 0 ? "cuDriverGetVersion" : driver_syms[i].name;
            void *fn = NULL;
            CUresult r;
            if (get_v2) {
                CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SUCCESS;
                r = get_v2(name, &fn, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &q);
                if (q != CU_GET_PROC_ADDRESS_SUCCESS)
                    fn = NULL;
            } else {
                r = get_v1(name, &fn, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM);
            }
            if (r != CUDA_SUCCESS || !fn) {
                if (pass == 1 && driver_func_optional(name))
                    continue;
                return kiln_errf(err, KILN_ERR_NO_DEVICE,
                                 "the NVIDIA driver lacks %s (error %d): kiln needs a CUDA 12 or "
                                 "newer driver",
                                 name, (int)r);
            }
            if (pass == 0) {
                CUresult (*get_version)(int *) = NULL;
                memcpy(&get_version, &fn, sizeof fn);
                int driver_version = 0;
                if (get_version(&driver_version) == CUDA_SUCCESS && driver_version > 0 &&
                    driver_version < version)
                    version = driver_version;
            } else {
                memcpy((char *)&kiln_cuda + driver_syms[i].offset, &fn, sizeof fn);
            }
        }
    }
    return KILN_OK;
}

static pthread_mutex_t load_mu = PTHREAD_MUTEX_INITIALIZER;
static int load_done, load_status;
static kiln_err load_err;

int kiln_cuda_driver_load(const char *no_driver, kiln_err *err) {
    pthread_mutex_lock(&load_mu);
    if (!load_done) {
        load_status = driver_resolve(&load_err);
        load_done = 1;
    }
    pthread_mutex_unlock(&load_mu);
    if (load_status == KILN_OK)
        return KILN_OK;
    if (strcmp(load_err.msg, NO_DRIVER) == 0 && no_driver)
        return kiln_errf(err, load_status, "%s: %s", load_err.msg, no_driver);
    return kiln_errf(err, load_status, "%s", load_err.msg);
}

int kiln_cuda_driver_present(void) {
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!h)
        return 0;
    dlclose(h);
    return 1;
}

int kiln_cuda_visible_gpus(void) {
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (vis) {
        int n = 0;
        const char *s = vis;
        while (*s) {
            while (*s == ' ' || *s == ',')
                s++;
            if (!*s)
                break;
            /* CUDA stops at the first invalid entry; "-1" hides every device */
            if (*s == '-')
                break;
            n++;
            while (*s && *s != ',')
                s++;
        }
        return n;
    }
    glob_t g;
    int n = 0;
    if (glob("/dev/nvidia[0-9]*", 0, NULL, &g) == 0) {
        n = (int)g.gl_pathc;
        globfree(&g);
    }
    return n;
}

const char *kiln_cuda_error_name(CUresult r) {
    const char *s = NULL;
    if (kiln_cuda.GetErrorName && kiln_cuda.GetErrorName(r, &s) == CUDA_SUCCESS && s)
        return s;
    return "CUDA_ERROR_UNKNOWN_CODE";
}

const char *kiln_cuda_error_text(CUresult r) {
    const char *s = NULL;
    if (kiln_cuda.GetErrorString && kiln_cuda.GetErrorString(r, &s) == CUDA_SUCCESS && s)
        return s;
    return "unknown error";
}

static int device_attr(CUdevice dev, CUdevice_attribute a) {
    int v = 0;
    return kiln_cuda.DeviceGetAttribute(&v, a, dev) == CUDA_SUCCESS ? v : 0;
}

static void device_info(CUdevice dev, int ordinal, kiln_device_info *d) {
    memset(d, 0, sizeof *d);
    if (kiln_cuda.DeviceGetName(d->name, (int)sizeof d->name, dev) != CUDA_SUCCESS)
        snprintf(d->name, sizeof d->name, "CUDA device %d", ordinal);
    CUuuid u;
    memset(&u, 0, sizeof u);
    kiln_cuda.DeviceGetUuid(&u, dev);
    const unsigned char *b = (const unsigned char *)u.bytes;
    snprintf(d->uuid, sizeof d->uuid,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
             b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
             b[15]);
    d->cc_major = device_attr(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    d->cc_minor = device_attr(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    d->n_sms = device_attr(dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    d->clock_khz = device_attr(dev, CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
    d->l2_bytes = (size_t)device_attr(dev, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    d->smem_per_block_optin =
        (size_t)device_attr(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    if (d->smem_per_block_optin == 0)
        d->smem_per_block_optin = KILN_CUDA_DEFAULT_SMEM_BYTES;
    size_t total = 0;
    if (kiln_cuda.DeviceTotalMem(&total, dev) == CUDA_SUCCESS)
        d->mem_bytes = total;
}

int kiln_cuda_device_open(int ordinal, const char *no_driver, CUdevice *dev, CUcontext *ctx,
                          kiln_device_info *info, kiln_err *err) {
    int rc = kiln_cuda_driver_load(no_driver, err);
    if (rc)
        return rc;
    CUresult r = kiln_cuda.Init(0);
    if (r == CUDA_ERROR_NO_DEVICE)
        return kiln_errf(err, KILN_ERR_NO_DEVICE, "no CUDA device");
    if (r != CUDA_SUCCESS)
        return kiln_errf(err, KILN_ERR_NO_DEVICE, "no usable CUDA device: cuInit failed: %s: %s",
                         kiln_cuda_error_name(r), kiln_cuda_error_text(r));
    int count = 0;
    if (kiln_cuda.DeviceGetCount(&count) != CUDA_SUCCESS || count == 0)
        return kiln_errf(err, KILN_ERR_NO_DEVICE, "no CUDA device");
    if (ordinal < 0 || ordinal >= count)
        return kiln_errf(err, KILN_ERR_NO_DEVICE, "no CUDA device %d (%d present)", ordinal, count);
    const char *what = "cuDeviceGet";
    r = kiln_cuda.DeviceGet(dev, ordinal);
    if (r == CUDA_SUCCESS) {
        what = "cuDevicePrimaryCtxRetain";
        r = kiln_cuda.DevicePrimaryCtxRetain(ctx, *dev);
    }
    if (r != CUDA_SUCCESS)
        return kiln_errf(err, r == CUDA_ERROR_OUT_OF_MEMORY ? KILN_ERR_RESOURCE : KILN_ERR_BACKEND,
                         "CUDA device %d: %s: %s: %s", ordinal, what, kiln_cuda_error_name(r),
                         kiln_cuda_error_text(r));
    device_info(*dev, ordinal, info);
    return KILN_OK;
}

void kiln_cuda_func_attrs_get(CUfunction fn, kiln_cuda_func_attrs *out) {
    memset(out, 0, sizeof *out);
    kiln_cuda.FuncGetAttribute(&out->max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn);
    kiln_cuda.FuncGetAttribute(&out->regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn);
    kiln_cuda.FuncGetAttribute(&out->static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn);
    kiln_cuda.FuncGetAttribute(&out->local_bytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn);
}

int kiln_cuda_param_sizes(CUfunction fn, size_t *sizes, int cap) {
    if (!kiln_cuda.FuncGetParamInfo)
        return -1;
    for (int n = 0;; n++) {
        size_t offset = 0, size = 0;
        CUresult r = kiln_cuda.FuncGetParamInfo(fn, (size_t)n, &offset, &size);
        if (r == CUDA_ERROR_INVALID_VALUE)
            return n;
        if (r != CUDA_SUCCESS)
            return -1;
        if (n == cap)
            return cap + 1;
        sizes[n] = size;
    }
}

static CUtensorMapDataType tmap_type(kiln_dtype t) {
    switch (t) {
    case KILN_F64:
        return CU_TENSOR_MAP_DATA_TYPE_FLOAT64;
    case KILN_F32:
        return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    case KILN_F16:
        return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case KILN_BF16:
        return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case KILN_I64:
        return CU_TENSOR_MAP_DATA_TYPE_INT64;
    case KILN_I32:
        return CU_TENSOR_MAP_DATA_TYPE_INT32;
    case KILN_I16:
        return CU_TENSOR_MAP_DATA_TYPE_UINT16; /* moved as bits: TMA does not convert */
    default:
        return CU_TENSOR_MAP_DATA_TYPE_UINT8; /* 1-byte types: fp8, int8, uint8, bool */
    }
}

CUresult kiln_cuda_tmap_params(const kiln_launch_plan *plan, void **params,
                               CUtensorMap maps[KILN_MAX_TMAPS], void **out, char *why,
                               size_t cap) {
    for (int i = 0; i < plan->n_params; i++)
        out[i] = params[i];
    for (int i = 0; i < plan->n_tmaps; i++) {
        const kiln_tmap *t = &plan->tmap[i];
        void *address = *(void *const *)params[t->param];
        static const cuuint32_t ones[KILN_TMAP_MAX_RANK] = {1, 1, 1, 1, 1};
        const CUtensorMapSwizzle swizzle = t->swizzle == 128  ? CU_TENSOR_MAP_SWIZZLE_128B
                                           : t->swizzle == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                           : t->swizzle == 32 ? CU_TENSOR_MAP_SWIZZLE_32B
                                                              : CU_TENSOR_MAP_SWIZZLE_NONE;
        CUresult r = kiln_cuda.TensorMapEncodeTiled(
            &maps[i], tmap_type(t->dtype), (cuuint32_t)t->rank, address, t->dims, t->strides,
            t->box, ones, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        if (r != CUDA_SUCCESS) {
            snprintf(why, cap,
                     "tensor map %d (parameter %d at %p, rank %d, box %u x %u): "
                     "cuTensorMapEncodeTiled: %s",
                     i, t->param + 1, address, t->rank, t->box[0], t->rank > 1 ? t->box[1] : 1,
                     kiln_cuda_error_name(r));
            return r;
        }
        out[plan->n_params + i] = &maps[i];
    }
    return CUDA_SUCCESS;
}

/* Largest thread-block cluster on sm_90 with the non-portable opt-in (8 without it). */
#define CUDA_MAX_CLUSTER 16
#define CUDA_PORTABLE_CLUSTER 8

static unsigned long long cluster_blocks(const kiln_launch *l) {
    return (unsigned long long)l->cluster[0] * l->cluster[1] * l->cluster[2];
}

int kiln_cuda_launch_fits(const char *name, const kiln_cuda_func_attrs *a, const kiln_launch *l,
                          const kiln_device_info *d, char *why, size_t cap) {
    unsigned long long threads = (unsigned long long)l->block[0] * l->block[1] * l->block[2];
    if (threads > (unsigned long long)a->max_threads) {
        snprintf(why, cap,
                 "launch '%s': block (%u, %u, %u) is %llu threads, but '%s' can run at most %d "
                 "threads per block (%d registers per thread)",
                 l->entry, l->block[0], l->block[1], l->block[2], threads, name, a->max_threads,
                 a->regs);
        return -1;
    }
    if ((size_t)a->static_smem + l->smem_bytes > d->smem_per_block_optin) {
        snprintf(why, cap,
                 "launch '%s': %zu bytes of dynamic + %d bytes of static shared memory exceed the "
                 "device's %zu bytes per block",
                 l->entry, l->smem_bytes, a->static_smem, d->smem_per_block_optin);
        return -1;
    }
    unsigned long long cluster = cluster_blocks(l);
    if (cluster <= 1)
        return 0;
    if (d->cc_major < 9) {
        snprintf(why, cap, "launch '%s': thread-block clusters need sm_90, the device is sm_%d%d",
                 l->entry, d->cc_major, d->cc_minor);
        return -1;
    }
    for (int k = 0; k < 3; k++)
        if (l->grid[k] % l->cluster[k] != 0) {
            snprintf(why, cap,
                     "launch '%s': grid (%u, %u, %u) is not a multiple of cluster (%u, %u, %u)",
                     l->entry, l->grid[0], l->grid[1], l->grid[2], l->cluster[0], l->cluster[1],
                     l->cluster[2]);
            return -1;
        }
    if (cluster > CUDA_MAX_CLUSTER) {
        snprintf(why, cap, "launch '%s': a cluster of %llu blocks (the limit is %d)", l->entry,
                 cluster, CUDA_MAX_CLUSTER);
        return -1;
    }
    return 0;
}

CUresult kiln_cuda_raise_limits(CUfunction fn, const kiln_cuda_func_attrs *a, const kiln_launch *l,
                                kiln_cuda_func_limits *set) {
    CUresult r;
    if ((size_t)a->static_smem + l->smem_bytes > KILN_CUDA_DEFAULT_SMEM_BYTES &&
        (int)l->smem_bytes > set->dyn_smem_bytes) {
        r = kiln_cuda.FuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                       (int)l->smem_bytes);
        if (r != CUDA_SUCCESS)
            return r;
        set->dyn_smem_bytes = (int)l->smem_bytes;
    }
    if (cluster_blocks(l) > CUDA_PORTABLE_CLUSTER && !set->nonportable) {
        r = kiln_cuda.FuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1);
        if (r != CUDA_SUCCESS)
            return r;
        set->nonportable = 1;
    }
    return CUDA_SUCCESS;
}

void kiln_cuda_launch_config(const kiln_launch *l, CUstream stream, CUlaunchConfig *cfg,
                             CUlaunchAttribute *attr) {
    memset(cfg, 0, sizeof *cfg);
    cfg->gridDimX = l->grid[0];
    cfg->gridDimY = l->grid[1];
    cfg->gridDimZ = l->grid[2];
    cfg->blockDimX = l->block[0];
    cfg->blockDimY = l->block[1];
    cfg->blockDimZ = l->block[2];
    cfg->sharedMemBytes = (unsigned)l->smem_bytes;
    cfg->hStream = stream;
    if (cluster_blocks(l) > 1) {
        memset(attr, 0, sizeof *attr);
        attr->id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attr->value.clusterDim.x = l->cluster[0];
        attr->value.clusterDim.y = l->cluster[1];
        attr->value.clusterDim.z = l->cluster[2];
        cfg->attrs = attr;
        cfg->numAttrs = 1;
    }
}
