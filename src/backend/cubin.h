/* cubin.h: what ptxas gave a kernel and its module, read from the cubin itself (no GPU needed). */
#ifndef KILN_CUBIN_H
#define KILN_CUBIN_H

#include "../util/common.h"

typedef struct {
    int regs;            /* registers per thread */
    int64_t frame_bytes; /* per-thread stack frame in local memory: spills and local arrays */
} kiln_cubin_usage;

/* The register count and stack frame of kernel `name` in a cubin (an ELF64 whose .nv.info section
 * carries ptxas's per-kernel attributes), the figures `ptxas -v` prints. Returns 0, or
 * KILN_ERR_FORMAT with err set when the bytes are not such an ELF or hold no register count for the
 * kernel. A kernel without a frame attribute has a frame of 0. */
int kiln_cubin_usage_of(const void *cubin, size_t len, const char *name, kiln_cubin_usage *out,
                        kiln_err *err);

/* The bytes of a module's global variables (__device__, static or not, initialised or not: the
 * sections .nv.global and .nv.global.init), 0 when it has none. Returns 0, or KILN_ERR_FORMAT with
 * err set when the bytes are not a cubin. */
int kiln_cubin_global_bytes(const void *cubin, size_t len, uint64_t *bytes, kiln_err *err);

/* Whether a cubin calls name without defining it (*undefined = 1): functions the driver supplies
 * when it loads the module, such as the device heap's malloc and free. Returns 0, or
 * KILN_ERR_FORMAT with err set when the bytes are not a cubin. */
int kiln_cubin_undefined(const void *cubin, size_t len, const char *name, int *undefined,
                         kiln_err *err);

#endif
