/* kiln_rt.h: the C interface of libkiln_rt.so, through which a PyTorch process (python/kiln/
 * install.py, over ctypes) loads a kiln library/ directory and launches its kernels on the model's
 * own tensors (docs/install.md describes the whole install path).
 *
 * A library is refused as a whole (kiln_rt_open fails and says why) when it was built for another
 * device (uuid or compute capability) or by another build of kiln, or when it is damaged: bad JSON,
 * a missing field, a missing kernel file, a cubin the driver rejects, a kernel that does not take
 * the parameters the manifest implies. An entry that is intact but cannot be launched here (a
 * scalar input, no cubin) is loaded disabled, with the reason, and the rest of the library is used.
 *
 * Nothing here aborts the host process: every function returns a status (a kiln_status from
 * src/util/common.h) and kiln_rt_last_error() says why, whatever a file, a kernel or a caller does,
 * and when host memory runs out: kiln_rt_open, the one function that allocates, then returns
 * KILN_ERR_NOMEM (kiln_rt.c says how). The library exports these functions and nothing else, and
 * links neither SQLite nor libcurl (src/runtime/kiln_rt.map, the Makefile). */
#ifndef KILN_RT_H
#define KILN_RT_H

#include <stddef.h>
#include <stdint.h>

/* The version of this interface; python/kiln/install.py refuses a libkiln_rt it does not know. */
#define KILN_RT_ABI_VERSION 2
/* The manifest format this runtime reads ("kiln_library" in manifest.json). */
#define KILN_RT_LIBRARY_FORMAT 1

typedef struct kiln_rt kiln_rt;

enum { KILN_RT_DEVICE_CPU = 0, KILN_RT_DEVICE_CUDA = 1 };

/* One tensor as the caller has it, for kiln_rt_match. Strides count elements, as in PyTorch. */
typedef struct {
    const char *dtype; /* "float32", "bfloat16", ... (the SOL-ExecBench names) */
    int32_t ndim;
    int32_t device_type; /* KILN_RT_DEVICE_CPU or KILN_RT_DEVICE_CUDA */
    int32_t device_index;
    const int64_t *shape;
    const int64_t *strides;
    uint64_t data_ptr; /* the address of element 0 (storage offset included) */
} kiln_rt_tensor;

/* The version of this interface (KILN_RT_ABI_VERSION). */
int kiln_rt_abi_version(void);
/* The kiln release this runtime belongs to and accepts libraries from (KILN_VERSION in
 * src/util/version.h); a library written by another release is refused. */
const char *kiln_rt_kiln_version(void);
/* The backend kiln uses on this machine where none is named, "cuda" or "cpu" (kiln_backend_default
 * in src/backend/backend.h): Python asks here, so that `kiln tune` picks what the C commands pick.
 */
const char *kiln_rt_default_backend(void);
/* The name of a status code ("malformed input", ...). */
const char *kiln_rt_strerror(int status);
/* The message of the last failed call on this thread ("" when none failed yet). */
const char *kiln_rt_last_error(void);

/* Opens library_dir (manifest.json and the kernel files it names) for device device_ordinal of the
 * manifest's backend (cuda: the CUDA device ordinal, in the primary context PyTorch uses; cpu: 0).
 * Every kernel is loaded (cuda: its cubin; cpu: its C source, compiled once now) and checked.
 * On success *out is the handle; on failure *out is NULL, the status says what kind of failure and
 * errbuf (optional, errbuf_len bytes) and kiln_rt_last_error() say why. */
int kiln_rt_open(const char *library_dir, int device_ordinal, kiln_rt **out, char *errbuf,
                 size_t errbuf_len);
/* Unloads every kernel and releases the device. NULL is a no-op. */
void kiln_rt_close(kiln_rt *rt);

/* A JSON object describing the opened library and this runtime: "backend", "library_dir",
 * "device" (the device found here), "library_device" and "build" (the manifest's), "kiln_version",
 * "notes" (what was accepted with a remark). Owned by the handle. */
const char *kiln_rt_info_json(const kiln_rt *rt);

/* Entries, in manifest order: 0 .. kiln_rt_entry_count() - 1. */
int kiln_rt_entry_count(const kiln_rt *rt);
/* The entry's problem name; NULL for an index out of range. Owned by the handle. */
const char *kiln_rt_entry_name(const kiln_rt *rt, int entry);
/* The manifest's entry object plus "runtime": {"index", "usable", "disabled_reason", "n_params",
 * "axes", "scratch_bytes"}; NULL for an index out of range. Owned by the handle. */
const char *kiln_rt_entry_json(const kiln_rt *rt, int entry);
/* NULL when the entry can be launched, else the reason it cannot (or "no such entry"). */
const char *kiln_rt_entry_disabled(const kiln_rt *rt, int entry);
/* Bytes of zeroed scratch memory the caller passes as the last pointer of kiln_rt_launch (0:
 * none); -1 for an index out of range. */
int64_t kiln_rt_entry_scratch_bytes(const kiln_rt *rt, int entry);

/* The shape gate: *hit = 1 when the tensors are exactly what the entry was proved on: the same
 * count, dtypes, shapes and strides, on this library's device, each starting at a 16-byte boundary
 * (kernels may read 16-byte vectors at element 0). outputs may be NULL (n_outputs 0) when the
 * caller allocates them from the gate. On a miss, kiln_rt_last_error() says which tensor differs
 * and how. The status is not KILN_OK only for bad arguments (entry out of range). */
int kiln_rt_match(const kiln_rt *rt, int entry, const kiln_rt_tensor *inputs, int n_inputs,
                  const kiln_rt_tensor *outputs, int n_outputs, int *hit);

/* Launches every kernel of the entry, in order, on stream (a CUstream; ignored on cpu, where the
 * kernel runs on the calling thread before this returns). ptrs: n_ptrs device addresses: the
 * inputs, then the outputs, in manifest order, then the scratch buffer when the entry has one.
 * axes: NULL for the entry's own values (the gate admits only the shapes it was proved on), else
 * every axis in manifest order, which must equal them. The caller has checked the gate. On cuda the
 * launch is asynchronous: a kernel fault shows at the caller's next synchronisation; a launch
 * recorded into a CUDA graph under capture is replayed with the same pointers. */
int kiln_rt_launch(kiln_rt *rt, int entry, void *const *ptrs, int n_ptrs, const int64_t *axes,
                   void *stream);

#endif
