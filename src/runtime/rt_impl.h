/* rt_impl.h: the private layer of libkiln_rt: an opened library (its entries, their gates and
 * launch plans), the manifest reader (rt_manifest.c) and the CUDA driver layer (rt_cuda.c) that
 * loads cubins and launches them in PyTorch's primary context. */
#ifndef KILN_RT_IMPL_H
#define KILN_RT_IMPL_H

#include <cjson/cJSON.h>

#include "../backend/backend.h"
#include "../util/version.h"
#include "kiln_rt.h"

#define RT_MAX_TENSORS 32 /* inputs or outputs of one entry */
#define RT_MAX_AXES 32
#define RT_NAME_LEN 64

/* One tensor of an entry's gate: exactly what the kernel was proved on. */
typedef struct {
    char name[RT_NAME_LEN];
    kiln_dtype dtype;
    int is_scalar; /* a by-value scalar parameter: the entry is disabled */
    int ndim;
    int64_t shape[KILN_MAX_DIMS];
    int64_t strides[KILN_MAX_DIMS];
    int64_t storage_offset;
} rt_gate_tensor;

typedef struct rt_gpu rt_gpu;                 /* one CUDA device, its primary context retained */
typedef struct rt_cuda_module rt_cuda_module; /* one loaded cubin and its entry points */
typedef struct rt_lt rt_lt; /* one cuBLASLt plan with its configuration and workspace */

typedef struct {
    char *problem;
    char *kind; /* "aten", "module", "definition" */
    int n_inputs, n_outputs;
    rt_gate_tensor inputs[RT_MAX_TENSORS], outputs[RT_MAX_TENSORS];
    int n_axes;
    char axis_names[RT_MAX_AXES][RT_NAME_LEN];
    int64_t axis_values[RT_MAX_AXES];
    kiln_launch_plan plan; /* the evaluated launches of the gated shape */
    kiln_signature sig;    /* inputs, outputs, axes, [scratch] */
    char *kernel_file;     /* the source (.c on cpu, .cu on cuda) */
    char *cubin_file;      /* cuda: NULL when the manifest has none */
    char *arch;            /* cuda: "sm_90", ... */
    char *disabled;        /* NULL: launchable; else why not */
    char *library_call;    /* cuda: a cuBLASLt entry's call (lt_call.h JSON, concrete config); NULL
                              for a kernel */
    kiln_module *cpu_module;
    rt_cuda_module *cuda_module;
    rt_lt *lt;
    char *json; /* the manifest entry plus "runtime" */
} rt_entry;

struct kiln_rt {
    char *dir;
    int cuda;
    int device;
    kiln_backend *cpu; /* cpu libraries: kiln's cpu backend compiles and calls the kernels */
    rt_gpu *gpu;       /* cuda libraries */
    kiln_device_info info;
    int n_entries;
    rt_entry *entries;
    cJSON *library_device; /* the manifest's "device" and "build", for kiln_rt_info_json */
    cJSON *library_build;
    char *info_json;
};

/* cJSON allocates with plain malloc and answers NULL when it runs out: every cJSON call that
 * builds something goes through rt_json, which turns that NULL into the out-of-memory jump of
 * kiln_rt_open's scope (src/util/common.h). */
static inline void *rt_json(void *built) {
    if (!built)
        kiln_out_of_memory(0);
    return built;
}

/* ---- rt_manifest.c ---- */

/* Reads dir/manifest.json: checks the format, backend, build and device against this runtime and
 * `here` (the device found), then every entry's fields, into rt->entries (kernels are not loaded
 * yet). The manifest's own text is kept per entry in rt_entry.json, its "device" and "build" in
 * rt->library_device and rt->library_build. KILN_ERR_FORMAT for a damaged
 * manifest, KILN_ERR_UNSUPPORTED for a library of another device or build; err says which field
 * or which mismatch. *notes gets remarks about what was accepted anyway (heap, may be NULL). */
int rt_manifest_load(kiln_rt *rt, const char *backend_expected, char **notes, kiln_err *err);

/* The backend a library was built for ("cuda" or "cpu"), read before anything is opened. */
int rt_manifest_backend(const char *dir, char *backend, size_t cap, kiln_err *err);

/* ---- rt_cuda.c ---- */

/* Retains the primary context of CUDA device `ordinal` (the one PyTorch uses) and fills info.
 * KILN_ERR_NO_DEVICE without a driver or without that device. */
int rt_gpu_open(int ordinal, rt_gpu **out, kiln_device_info *info, kiln_err *err);
void rt_gpu_close(rt_gpu *g);

/* Loads a cubin image in the device's primary context and resolves every entry point of plan,
 * checking each against the launch (threads per block, shared memory, clusters) and, where the
 * driver can tell, against the n_params 8-byte parameters the ABI passes; raises the kernel's
 * shared-memory and cluster limits once, here, so that a launch (perhaps under graph capture)
 * changes nothing. KILN_ERR_FORMAT when the driver rejects the image or the kernel does not fit its
 * plan. */
int rt_gpu_module_load(rt_gpu *g, const void *image, const kiln_launch_plan *plan, int n_params,
                       rt_cuda_module **out, kiln_err *err);
void rt_gpu_module_free(rt_gpu *g, rt_cuda_module *m);

/* Enqueues every launch of plan on stream, with params as cuLaunchKernel takes them; the primary
 * context is pushed only when another one is current on this thread. */
int rt_gpu_launch(rt_gpu *g, rt_cuda_module *m, const kiln_launch_plan *plan, void **params,
                  void *stream, kiln_err *err);

/* A cuBLASLt entry (lt_call.h): parses call_json (which must hold a concrete configuration: no
 * enumeration and no heuristic at run time) against sig, builds its plan in the primary context
 * and allocates its workspace. KILN_ERR_FORMAT for a damaged call, KILN_ERR_UNSUPPORTED for
 * another cuBLASLt version, else kiln_lt_call_open's status. */
int rt_gpu_lt_open(rt_gpu *g, const char *call_json, const kiln_signature *sig, rt_lt **out,
                   kiln_err *err);
void rt_gpu_lt_free(rt_gpu *g, rt_lt *l);
/* Enqueues the GEMM on stream with the ABI's params (as rt_gpu_launch takes them). */
int rt_gpu_lt_run(rt_gpu *g, rt_lt *l, void **params, void *stream, kiln_err *err);

#endif
