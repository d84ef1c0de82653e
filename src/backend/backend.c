/* backend.c: picks the default backend, looks backends up by name and opens and closes them. */
#include "backend.h"
#include "cuda_driver.h"

#include <string.h>

const char *kiln_backend_default(void) {
    return kiln_cuda_driver_present() && kiln_cuda_visible_gpus() > 0 ? "cuda" : "cpu";
}

const kiln_backend_ops *kiln_backend_find(const char *name) {
    if (!name)
        return NULL;
    if (strcmp(name, "cuda") == 0)
        return &kiln_backend_cuda;
    if (strcmp(name, "cpu") == 0)
        return &kiln_backend_cpu;
    return NULL;
}

int kiln_backend_open(const char *name, int device, kiln_backend **out, kiln_err *err) {
    return kiln_backend_open_with(name, device, NULL, out, err);
}

int kiln_backend_open_with(const char *name, int device, const kiln_backend_config *cfg,
                           kiln_backend **out, kiln_err *err) {
    KILN_ASSERT(out);
    kiln_backend_config defaults = {0};
    *out = NULL;
    const kiln_backend_ops *ops = kiln_backend_find(name);
    if (!ops)
        return kiln_errf(err, KILN_ERR_INVALID, "unknown backend '%s' (expected cuda or cpu)",
                         name ? name : "(null)");
    kiln_backend *be = xcalloc(1, sizeof *be);
    be->ops = ops;
    int rc = ops->init(be, device, cfg ? cfg : &defaults, err);
    if (rc) {
        free(be);
        return rc;
    }
    *out = be;
    return KILN_OK;
}

void kiln_backend_close(kiln_backend *be) {
    if (!be)
        return;
    be->ops->shutdown(be);
    free(be);
}
