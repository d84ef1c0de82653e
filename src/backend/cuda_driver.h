/* cuda_driver.h: the one way kiln reaches the NVIDIA driver, shared by the cuda backend (cuda.c)
 * and libkiln_rt (src/runtime/rt_cuda.c): the driver's functions, resolved once; whether a driver
 * and a GPU are there at all; the device's facts; the driver's error text; and what a launch must
 * satisfy on a loaded kernel. */
#ifndef KILN_CUDA_DRIVER_H
#define KILN_CUDA_DRIVER_H

#include <cuda.h>

#include "backend.h"

/* Every driver function kiln calls: X(name without "cu", parameter list). All return CUresult. */
#define KILN_CUDA_DRIVER_FUNCS(X)                                                                  \
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
    X(CtxSetCurrent, (CUcontext ctx))                                                              \
    X(CtxGetCurrent, (CUcontext * ctx))                                                            \
    X(CtxPushCurrent, (CUcontext ctx))                                                             \
    X(CtxPopCurrent, (CUcontext * ctx))                                                            \
    X(StreamCreate, (CUstream * stream, unsigned int flags))                                       \
    X(StreamDestroy, (CUstream stream))                                                            \
    X(StreamSynchronize, (CUstream stream))                                                        \
    X(MemAlloc, (CUdeviceptr * p, size_t n))                                                       \
    X(MemFree, (CUdeviceptr p))                                                                    \
    X(MemcpyHtoDAsync, (CUdeviceptr dst, const void *src, size_t n, CUstream stream))              \
    X(MemcpyDtoHAsync, (void *dst, CUdeviceptr src, size_t n, CUstream stream))                    \
    X(MemsetD8Async, (CUdeviceptr dst, unsigned char value, size_t n, CUstream stream))            \
    X(MemcpyDtoDAsync, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream))              \
    X(StreamQuery, (CUstream stream))                                                              \
    X(MemGetAllocationGranularity, (size_t * granularity, const CUmemAllocationProp *prop,         \
                                    CUmemAllocationGranularity_flags option))                      \
    X(MemCreate, (CUmemGenericAllocationHandle * handle, size_t size,                              \
                  const CUmemAllocationProp *prop, unsigned long long flags))                      \
    X(MemRelease, (CUmemGenericAllocationHandle handle))                                           \
    X(MemAddressReserve, (CUdeviceptr * ptr, size_t size, size_t alignment, CUdeviceptr addr,      \
                          unsigned long long flags))                                               \
    X(MemAddressFree, (CUdeviceptr ptr, size_t size))                                              \
    X(MemMap, (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,   \
               unsigned long long flags))                                                          \
    X(MemUnmap, (CUdeviceptr ptr, size_t size))                                                    \
    X(MemSetAccess, (CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count))     \
    X(ModuleLoadData, (CUmodule * mod, const void *image))                                         \
    X(ModuleUnload, (CUmodule mod))                                                                \
    X(ModuleGetFunction, (CUfunction * fn, CUmodule mod, const char *name))                        \
    X(FuncGetAttribute, (int *value, CUfunction_attribute attr, CUfunction fn))                    \
    X(FuncSetAttribute, (CUfunction fn, CUfunction_attribute attr, int value))                     \
    X(LaunchKernel,                                                                                \
      (CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,             \
       unsigned bz, unsigned smem, CUstream stream, void **params, void **extra))                  \
    X(LaunchKernelEx, (const CUlaunchConfig *config, CUfunction fn, void **params, void **extra))  \
    X(EventCreate, (CUevent * ev, unsigned int flags))                                             \
    X(EventRecord, (CUevent ev, CUstream stream))                                                  \
    X(EventSynchronize, (CUevent ev))                                                              \
    X(EventElapsedTime, (float *ms, CUevent start, CUevent stop))                                  \
    X(EventDestroy, (CUevent ev))                                                                  \
    X(GetErrorName, (CUresult r, const char **name))                                               \
    X(GetErrorString, (CUresult r, const char **text))                                             \
    X(TensorMapEncodeTiled,                                                                        \
      (CUtensorMap * map, CUtensorMapDataType type, cuuint32_t rank, void *address,                \
       const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,                   \
       const cuuint32_t *elem_strides, CUtensorMapInterleave interleave,                           \
       CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill fill))       \
    X(FuncGetParamInfo, (CUfunction fn, size_t index, size_t * offset, size_t * size))             \
    X(FuncLoad, (CUfunction fn))

#define KILN_CUDA_MEMBER(name, params) CUresult(*name) params;
typedef struct {
    KILN_CUDA_DRIVER_FUNCS(KILN_CUDA_MEMBER)
} kiln_cuda_driver;
#undef KILN_CUDA_MEMBER

/* The driver's functions once kiln_cuda_driver_load succeeded. cuFuncGetParamInfo (CUDA 12.4) and
 * cuFuncLoad (12.4) may be NULL on older drivers: their checks are skipped. */
extern kiln_cuda_driver kiln_cuda;

/* Opens libcuda.so.1 and resolves every function of kiln_cuda, once per process whatever the
 * threads; every call returns the first one's status and message. KILN_OK, or KILN_ERR_NO_DEVICE
 * with a message that no_driver ends when the machine has no driver at all ("use --backend cpu").
 */
int kiln_cuda_driver_load(const char *no_driver, kiln_err *err);

/* 1 when libcuda.so.1 can be opened here. Neither this nor kiln_cuda_visible_gpus initialises
 * CUDA, so a process that asks may still fork children that use it. */
int kiln_cuda_driver_present(void);

/* The GPUs a CUDA process would see: the entries of CUDA_VISIBLE_DEVICES up to the first invalid
 * one when it is set, else the /dev/nvidiaN device nodes. */
int kiln_cuda_visible_gpus(void);

/* The driver's name and description of r ("CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access
 * was encountered"); placeholders when the driver cannot say. */
const char *kiln_cuda_error_name(CUresult r);
const char *kiln_cuda_error_text(CUresult r);

/* Loads the driver, initialises it and retains the primary context of CUDA device `ordinal` (the
 * context PyTorch works in); fills *info (name, uuid, capability, SMs, L2, memory, opt-in shared
 * memory per block). KILN_ERR_NO_DEVICE without a driver, a device or that ordinal;
 * KILN_ERR_RESOURCE or KILN_ERR_BACKEND with the driver's text when it fails after that. The caller
 * releases the context with kiln_cuda.DevicePrimaryCtxRelease(*dev). */
int kiln_cuda_device_open(int ordinal, const char *no_driver, CUdevice *dev, CUcontext *ctx,
                          kiln_device_info *info, kiln_err *err);

/* Shared memory a block may use without opting in (static + dynamic). */
#define KILN_CUDA_DEFAULT_SMEM_BYTES (48 * 1024)

/* What the driver says about a kernel of a loaded module. */
typedef struct {
    int max_threads; /* threads per block, given its registers */
    int regs;        /* registers per thread */
    int static_smem; /* bytes of static shared memory */
    int local_bytes; /* bytes of local memory per thread (spills, stack) */
} kiln_cuda_func_attrs;

/* Reads fn's attributes; this also loads a lazily loaded kernel (CUDA_MODULE_LOADING=LAZY). */
void kiln_cuda_func_attrs_get(CUfunction fn, kiln_cuda_func_attrs *out);

/* The size in bytes of each parameter fn declares, into sizes[0 .. cap-1] (cuFuncGetParamInfo): the
 * number of parameters (cap + 1 when there are more than cap), or -1 when the driver cannot tell.
 */
int kiln_cuda_param_sizes(CUfunction fn, size_t *sizes, int cap);

/* The parameters of a launch of plan (section 2 of docs/abi.md): params (plan->n_params ABI
 * parameters) then plan's tensor maps, encoded into maps for the addresses params hold now (out of
 * bounds elements read as zeros). out has room for KILN_MAX_PARAMS + KILN_MAX_TMAPS. CUDA_SUCCESS,
 * or the encoder's error with what it refused in why. */
CUresult kiln_cuda_tmap_params(const kiln_launch_plan *plan, void **params,
                               CUtensorMap maps[KILN_MAX_TMAPS], void **out, char *why, size_t cap);

/* Whether launch l fits kernel `name` (attributes a) on device d: its threads per block, static +
 * dynamic shared memory within the device's opt-in limit, and a cluster (sm_90 or newer, dividing
 * the grid, at most 16 blocks). 0, or -1 with the reason in why. */
int kiln_cuda_launch_fits(const char *name, const kiln_cuda_func_attrs *a, const kiln_launch *l,
                          const kiln_device_info *d, char *why, size_t cap);

/* What kiln_cuda_raise_limits has set on one kernel (zero-initialise). */
typedef struct {
    int dyn_smem_bytes; /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (0: the default) */
    int nonportable;    /* non-portable cluster sizes allowed */
} kiln_cuda_func_limits;

/* Raises fn's limits where launch l needs more than the defaults give (dynamic shared memory past
 * 48 KiB in all, clusters of more than 8 blocks), never lowering what an earlier launch raised.
 * CUDA_SUCCESS, or the driver's error. */
CUresult kiln_cuda_raise_limits(CUfunction fn, const kiln_cuda_func_attrs *a, const kiln_launch *l,
                                kiln_cuda_func_limits *set);

/* Fills cfg for cuLaunchKernelEx of launch l on stream; a cluster goes into *attr, which cfg then
 * points at. */
void kiln_cuda_launch_config(const kiln_launch *l, CUstream stream, CUlaunchConfig *cfg,
                             CUlaunchAttribute *attr);

#endif
