/* cuda_driver.c: the one way kiln reaches the NVIDIA driver, shared by the cuda backend (cuda.c)
 * and libkiln_rt (src/runtime/rt_cuda.c): dlopen libcuda.so.1 (it comes with the driver, never
 * with the toolkit) and resolve every function through cuGetProcAddress at the version of the
 * header or of the driver, whichever is older, so that a newer header never binds an entry point
 * the installed driver lacks (cuda.c's opening essay says more). */
#include "cuda_backend.h"

#include <cuda.h>

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

typedef CUresult (*get_proc_v2_fn)(const char *symbol, void **fn, int version, cuuint64_t flags,
                                   CUdriverProcAddressQueryResult *status);
typedef CUresult (*get_proc_v1_fn)(const char *symbol, void **fn, int version, cuuint64_t flags);

int kiln_cuda_driver_resolve(void *table, const kiln_cuda_sym *syms, size_t n,
                             int (*optional)(const char *name), const char *no_driver,
                             kiln_err *err) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return kiln_errf(err, KILN_ERR_NO_DEVICE, "no NVIDIA driver (libcuda.so.1 not found): %s",
                         no_driver);
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
            const char *name = pass == 0 ? "cuDriverGetVersion" : syms[i].name;
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
                if (pass == 1 && optional && optional(name))
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
                memcpy((char *)table + syms[i].offset, &fn, sizeof fn);
            }
        }
    }
    return KILN_OK;
}

static pthread_mutex_t load_mu = PTHREAD_MUTEX_INITIALIZER;

int kiln_cuda_driver_load(kiln_cuda_loader *l, void *table, const kiln_cuda_sym *syms, size_t n,
                          int (*optional)(const char *name), const char *no_driver, kiln_err *err) {
    pthread_mutex_lock(&load_mu);
    if (!l->done) {
        l->status = kiln_cuda_driver_resolve(table, syms, n, optional, no_driver, &l->err);
        l->done = 1;
    }
    pthread_mutex_unlock(&load_mu);
    if (l->status != KILN_OK)
        return kiln_errf(err, l->status, "%s", l->err.msg);
    return KILN_OK;
}
