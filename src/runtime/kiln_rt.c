/* kiln_rt.c: the entry points of libkiln_rt.so, the library that Python loads with ctypes to launch
 * kiln's kernels inside a PyTorch process. Today it exports the version of its C interface and
 * kiln's status names; the loaders for a library/ directory and the shape gate come with the
 * install stage. It never aborts: every entry point returns a status. */
#include "../util/common.h"

#define KILN_RT_ABI_VERSION 1

/* The version of libkiln_rt's C interface; Python refuses a library whose version it does not know.
 */
int kiln_rt_abi_version(void) {
    return KILN_RT_ABI_VERSION;
}

/* The name of a status code, for Python's exceptions. */
const char *kiln_rt_strerror(int status) {
    return kiln_strerror(status);
}
