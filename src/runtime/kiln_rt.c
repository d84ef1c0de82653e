/* kiln_rt.c: the entry points of libkiln_rt.so (kiln_rt.h): open a library/ directory, answer the
 * shape gate, launch an entry on the caller's stream. It never aborts: every entry point returns a
 * status and leaves its message in kiln_rt_last_error().
 *
 * Running out of memory. The core allocates through xmalloc, which aborts in kiln's own processes.
 * kiln_rt_open is the one entry point that allocates (match, launch and the getters do not), so it
 * runs under a kiln_oom_scope (src/util/common.h): an allocation that fails anywhere below it, in
 * the manifest reader, the cpu backend or NVRTC's wrapper, jumps back to kiln_rt_open, which frees
 * the half-opened handle and returns KILN_ERR_NOMEM; Python raises LibraryRefused. Nothing below
 * allocates while it holds a lock or while a CUDA context of its own is pushed; what was allocated
 * and not yet attached to the handle (a message, a parsed manifest, a cpu compile's temporary
 * folder) leaks, once.
 *
 * The gate lives in two places on purpose. Python (python/kiln/install.py) checks every call
 * against tuples it precomputes from kiln_rt_entry_json(), because a ctypes call per check would
 * cost more than the check; kiln_rt_match() is the same rule in C, for C callers, for tests that
 * hold the two to each other, and to explain a miss. The rule: the same number of tensors, each
 * with the dtype, shape and strides the kernel was proved on, on this library's device, and
 * starting at a 16-byte boundary (docs/abi.md lets a kernel read 16-byte vectors at element 0;
 * PyTorch's allocator gives far more, but a slice with a storage offset may not). */
#include "rt_impl.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "../backend/nvrtc.h"

static _Thread_local char last_error[1024];

static int fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

int kiln_rt_abi_version(void) {
    return KILN_RT_ABI_VERSION;
}

const char *kiln_rt_kiln_version(void) {
    return KILN_VERSION;
}

const char *kiln_rt_default_backend(void) {
    return kiln_backend_default();
}

const char *kiln_rt_strerror(int status) {
    return kiln_strerror(status);
}

const char *kiln_rt_last_error(void) {
    return last_error;
}

/* ---- opening ---- */

static void entry_free(kiln_rt *rt, rt_entry *e) {
    if (e->cpu_module && rt->cpu)
        rt->cpu->ops->module_free(rt->cpu, e->cpu_module);
    if (e->cuda_module && rt->gpu)
        rt_gpu_module_free(rt->gpu, e->cuda_module);
    if (e->lt && rt->gpu)
        rt_gpu_lt_free(rt->gpu, e->lt);
    free(e->library_call);
    free(e->problem);
    free(e->kind);
    free(e->kernel_file);
    free(e->cubin_file);
    free(e->arch);
    free(e->disabled);
    free(e->json);
}

void kiln_rt_close(kiln_rt *rt) {
    if (!rt)
        return;
    for (int i = 0; i < rt->n_entries; i++)
        entry_free(rt, &rt->entries[i]);
    free(rt->entries);
    if (rt->cpu)
        kiln_backend_close(rt->cpu);
    rt_gpu_close(rt->gpu);
    cJSON_Delete(rt->library_device);
    cJSON_Delete(rt->library_build);
    free(rt->dir);
    free(rt->info_json);
    free(rt);
}

/* cpu: compiles the entry's C source with kiln's cpu backend (the same compiler and flags the
 * gate proved it with) and checks that every launch of its plan names an entry point it declares.
 */
static int load_cpu_entry(kiln_rt *rt, rt_entry *e, kiln_err *err) {
    char *source = NULL;
    kiln_abi abi;
    memset(&abi, 0, sizeof abi);
    int have_abi = 0;
    char *log = NULL;
    kiln_err lerr;
    int rc = kiln_read_file(e->kernel_file, &source, NULL, &lerr);
    if (rc) {
        rc = kiln_errf(err, KILN_ERR_IO, "%s", lerr.msg);
        goto done;
    }
    if (kiln_abi_parse(source, 0, &abi, &lerr) != KILN_OK) {
        rc = kiln_errf(err, KILN_ERR_FORMAT, "%s: %s", e->kernel_file, lerr.msg);
        goto done;
    }
    have_abi = 1;
    for (int i = 0; i < e->plan.n_launches; i++) {
        int found = 0;
        for (int k = 0; k < abi.n_launches; k++)
            found |= strcmp(abi.launch[k].entry, e->plan.launch[i].entry) == 0;
        if (!found) {
            rc = kiln_errf(err, KILN_ERR_FORMAT,
                           "%s: the manifest launches '%s', which the kernel does not declare",
                           e->kernel_file, e->plan.launch[i].entry);
            goto done;
        }
    }
    rc = rt->cpu->ops->compile(rt->cpu, source, &e->sig, &abi, &e->cpu_module, &log, &lerr);
    if (rc) {
        const char *nl = log ? strchr(log, '\n') : NULL;
        rc = kiln_errf(err, KILN_ERR_FORMAT, "%s does not build here: %s%s%.*s", e->kernel_file,
                       lerr.msg, log ? ": " : "", log ? (int)(nl ? nl - log : 300) : 0,
                       log ? log : "");
    }
done:
    if (have_abi)
        kiln_abi_free(&abi);
    free(source);
    free(log);
    return rc;
}

/* cuda: loads the entry's cubin, or builds one from its source with NVRTC when the library has
 * none. */
static int load_cuda_entry(kiln_rt *rt, rt_entry *e, kiln_err *err) {
    char *image = NULL, *source = NULL;
    size_t len = 0;
    kiln_err lerr;
    int rc;
    if (e->library_call) {
        rc = rt_gpu_lt_open(rt->gpu, e->library_call, &e->sig, &e->lt, &lerr);
        return rc ? kiln_errf(err, rc, "%s: cuBLASLt: %s", e->kernel_file, lerr.msg) : KILN_OK;
    }
    if (e->cubin_file) {
        rc = kiln_read_file(e->cubin_file, &image, &len, &lerr);
        if (rc)
            return kiln_errf(err, KILN_ERR_IO, "%s", lerr.msg);
    } else {
        char arch[32];
        snprintf(arch, sizeof arch, "%s", e->arch ? e->arch : "");
        if (!arch[0])
            snprintf(arch, sizeof arch, "sm_%d%d", rt->info.cc_major, rt->info.cc_minor);
        rc = kiln_read_file(e->kernel_file, &source, NULL, &lerr);
        if (rc == KILN_OK)
            rc = kiln_cuda_compile_only(source, arch, &image, &len, NULL, &lerr);
        free(source);
        if (rc)
            return kiln_errf(err, KILN_ERR_FORMAT, "%s does not build for %s: %s", e->kernel_file,
                             arch, lerr.msg);
    }
    rc = rt_gpu_module_load(rt->gpu, image, &e->plan, e->sig.n, &e->cuda_module, &lerr);
    free(image);
    if (rc)
        return kiln_errf(err, rc, "%s: %s", e->cubin_file ? e->cubin_file : e->kernel_file,
                         lerr.msg);
    return KILN_OK;
}

static char *info_json(const kiln_rt *rt, const char *backend, const char *notes) {
    cJSON *o = rt_json(cJSON_CreateObject());
    rt_json(cJSON_AddStringToObject(o, "backend", backend));
    rt_json(cJSON_AddStringToObject(o, "library_dir", rt->dir));
    rt_json(cJSON_AddStringToObject(o, "kiln_version", KILN_VERSION));
    cJSON *d = rt_json(cJSON_AddObjectToObject(o, "device"));
    rt_json(cJSON_AddStringToObject(d, "name", rt->info.name));
    rt_json(cJSON_AddStringToObject(d, "uuid", rt->info.uuid));
    char cc[16];
    snprintf(cc, sizeof cc, "%d.%d", rt->info.cc_major, rt->info.cc_minor);
    rt_json(cJSON_AddStringToObject(d, "compute_capability", cc));
    rt_json(cJSON_AddNumberToObject(d, "ordinal", rt->device));
    cJSON *n = rt_json(cJSON_AddArrayToObject(o, "notes"));
    for (const char *s = notes; s && *s;) {
        const char *nl = strchr(s, '\n');
        size_t len = nl ? (size_t)(nl - s) : strlen(s);
        char *line = xstrndup(s, len);
        if (!cJSON_AddItemToArray(n, cJSON_CreateString(line)))
            kiln_out_of_memory(len);
        free(line);
        s = nl ? nl + 1 : s + len;
    }
    /* The manifest's own device and build, for the report. */
    if (!cJSON_AddItemToObject(o, "library_device", cJSON_Duplicate(rt->library_device, 1)) ||
        !cJSON_AddItemToObject(o, "build", cJSON_Duplicate(rt->library_build, 1)))
        kiln_out_of_memory(0);
    char *s = rt_json(cJSON_PrintUnformatted(o));
    cJSON_Delete(o);
    return s;
}

/* kiln_rt_open's work, on a zeroed handle that the caller owns and frees on failure. */
static int open_library(kiln_rt *rt, const char *library_dir, int device_ordinal, kiln_err *err) {
    char backend[16] = "";
    char *notes = NULL;
    int rc = rt_manifest_backend(library_dir, backend, sizeof backend, err);
    if (rc)
        return rc;
    rt->dir = xstrdup(library_dir);
    rt->device = device_ordinal;
    rt->cuda = strcmp(backend, "cuda") == 0;
    if (rt->cuda) {
        rc = rt_gpu_open(device_ordinal, &rt->gpu, &rt->info, err);
    } else {
        rc = kiln_backend_open("cpu", device_ordinal, &rt->cpu, err);
        if (rc == KILN_OK)
            rt->cpu->ops->device_info(rt->cpu, &rt->info);
    }
    if (rc) {
        char why[sizeof err->msg];
        memcpy(why, err->msg, sizeof why);
        return kiln_errf(err, rc, "%s: a %s library, but %s", library_dir, backend, why);
    }
    rc = rt_manifest_load(rt, backend, &notes, err);
    for (int i = 0; i < rt->n_entries && rc == KILN_OK; i++) {
        rt_entry *e = &rt->entries[i];
        if (e->disabled)
            continue;
        kiln_err lerr;
        rc = rt->cuda ? load_cuda_entry(rt, e, &lerr) : load_cpu_entry(rt, e, &lerr);
        if (rc)
            rc = kiln_errf(err, rc, "%s: entry %d (%s): %s", library_dir, i, e->problem, lerr.msg);
    }
    if (rc == KILN_OK)
        rt->info_json = info_json(rt, backend, notes);
    free(notes);
    return rc;
}

/* A failed kiln_rt_open: the message goes to errbuf and kiln_rt_last_error(). */
static int refuse(int status, char *errbuf, size_t errbuf_len, const char *msg) {
    fail(status, "%s", msg);
    if (errbuf && errbuf_len)
        snprintf(errbuf, errbuf_len, "%s", msg);
    return status;
}

int kiln_rt_open(const char *library_dir, int device_ordinal, kiln_rt **out, char *errbuf,
                 size_t errbuf_len) {
    if (errbuf && errbuf_len)
        errbuf[0] = 0;
    if (!out || !library_dir)
        return refuse(KILN_ERR_INVALID, errbuf, errbuf_len,
                      "kiln_rt_open: library_dir and out are required");
    *out = NULL;
    /* Allocated before the scope opens, so that the handler finds it (a local assigned after
     * setjmp would be indeterminate after the jump). */
    kiln_rt *rt = calloc(1, sizeof *rt);
    if (!rt)
        return refuse(KILN_ERR_NOMEM, errbuf, errbuf_len, "out of memory opening a library");
    kiln_err err;
    err.msg[0] = 0;
    kiln_oom_scope scope;
    kiln_oom_enter(&scope);
    if (setjmp(scope.env)) {
        kiln_rt_close(rt);
        char msg[sizeof err.msg];
        snprintf(msg, sizeof msg, "%s: out of memory while opening the library (%zu bytes asked)",
                 library_dir, (size_t)scope.n_bytes);
        return refuse(KILN_ERR_NOMEM, errbuf, errbuf_len, msg);
    }
    int rc = open_library(rt, library_dir, device_ordinal, &err);
    kiln_oom_leave(&scope);
    if (rc) {
        kiln_rt_close(rt);
        return refuse(rc, errbuf, errbuf_len, err.msg);
    }
    *out = rt;
    return KILN_OK;
}
/* ---- entries ---- */

static const rt_entry *entry_at(const kiln_rt *rt, int entry) {
    if (!rt || entry < 0 || entry >= rt->n_entries) {
        fail(KILN_ERR_INVALID, "no entry %d (the library has %d)", entry, rt ? rt->n_entries : 0);
        return NULL;
    }
    return &rt->entries[entry];
}

const char *kiln_rt_info_json(const kiln_rt *rt) {
    return rt ? rt->info_json : NULL;
}

int kiln_rt_entry_count(const kiln_rt *rt) {
    return rt ? rt->n_entries : 0;
}

const char *kiln_rt_entry_name(const kiln_rt *rt, int entry) {
    const rt_entry *e = entry_at(rt, entry);
    return e ? e->problem : NULL;
}

const char *kiln_rt_entry_json(const kiln_rt *rt, int entry) {
    const rt_entry *e = entry_at(rt, entry);
    return e ? e->json : NULL;
}

const char *kiln_rt_entry_disabled(const kiln_rt *rt, int entry) {
    const rt_entry *e = entry_at(rt, entry);
    return e ? e->disabled : "no such entry";
}

int64_t kiln_rt_entry_scratch_bytes(const kiln_rt *rt, int entry) {
    const rt_entry *e = entry_at(rt, entry);
    return e ? (int64_t)e->plan.scratch_bytes : -1;
}

/* ---- the gate ---- */

/* Why t is not g, or NULL when it is. */
static const char *tensor_miss(const kiln_rt *rt, const rt_gate_tensor *g, const kiln_rt_tensor *t,
                               char *why, size_t cap) {
    kiln_dtype dt;
    if (!t->dtype || kiln_dtype_parse(t->dtype, &dt) != 0 || dt != g->dtype) {
        snprintf(why, cap, "'%s' is %s, the kernel takes %s", g->name, t->dtype ? t->dtype : "?",
                 kiln_dtype_name(g->dtype));
        return why;
    }
    if (t->ndim != g->ndim || (t->ndim > 0 && (!t->shape || !t->strides))) {
        snprintf(why, cap, "'%s' has %d dimensions, the kernel takes %d", g->name, t->ndim,
                 g->ndim);
        return why;
    }
    for (int d = 0; d < g->ndim; d++) {
        if (t->shape[d] != g->shape[d]) {
            snprintf(why, cap, "'%s' dimension %d is %lld, the kernel takes %lld", g->name, d,
                     (long long)t->shape[d], (long long)g->shape[d]);
            return why;
        }
    }
    for (int d = 0; d < g->ndim; d++) {
        if (t->strides[d] != g->strides[d]) {
            snprintf(why, cap, "'%s' stride %d is %lld, the kernel takes %lld", g->name, d,
                     (long long)t->strides[d], (long long)g->strides[d]);
            return why;
        }
    }
    int want_type = rt->cuda ? KILN_RT_DEVICE_CUDA : KILN_RT_DEVICE_CPU;
    if (t->device_type != want_type || (rt->cuda && t->device_index != rt->device)) {
        snprintf(why, cap, "'%s' is on %s:%d, the library runs on %s:%d", g->name,
                 t->device_type == KILN_RT_DEVICE_CUDA ? "cuda" : "cpu", t->device_index,
                 rt->cuda ? "cuda" : "cpu", rt->cuda ? rt->device : 0);
        return why;
    }
    if (t->data_ptr % 16 != 0) {
        snprintf(why, cap, "'%s' starts at 0x%llx, not at a 16-byte boundary", g->name,
                 (unsigned long long)t->data_ptr);
        return why;
    }
    return NULL;
}

int kiln_rt_match(const kiln_rt *rt, int entry, const kiln_rt_tensor *inputs, int n_inputs,
                  const kiln_rt_tensor *outputs, int n_outputs, int *hit) {
    if (hit)
        *hit = 0;
    const rt_entry *e = entry_at(rt, entry);
    if (!e)
        return KILN_ERR_INVALID;
    if (!hit || (n_inputs && !inputs) || (n_outputs && !outputs))
        return fail(KILN_ERR_INVALID, "kiln_rt_match: null arguments");
    char why[400];
    if (e->disabled) {
        fail(KILN_OK, "the entry is disabled: %s", e->disabled);
        return KILN_OK;
    }
    if (n_inputs != e->n_inputs) {
        fail(KILN_OK, "%d inputs, the kernel takes %d", n_inputs, e->n_inputs);
        return KILN_OK;
    }
    if (n_outputs && n_outputs != e->n_outputs) {
        fail(KILN_OK, "%d outputs, the kernel writes %d", n_outputs, e->n_outputs);
        return KILN_OK;
    }
    for (int i = 0; i < n_inputs; i++)
        if (tensor_miss(rt, &e->inputs[i], &inputs[i], why, sizeof why)) {
            fail(KILN_OK, "input %s", why);
            return KILN_OK;
        }
    for (int i = 0; i < n_outputs; i++)
        if (tensor_miss(rt, &e->outputs[i], &outputs[i], why, sizeof why)) {
            fail(KILN_OK, "output %s", why);
            return KILN_OK;
        }
    last_error[0] = 0;
    *hit = 1;
    return KILN_OK;
}

/* ---- launching ---- */

int kiln_rt_launch(kiln_rt *rt, int entry, void *const *ptrs, int n_ptrs, const int64_t *axes,
                   void *stream) {
    const rt_entry *e = entry_at(rt, entry);
    if (!e)
        return KILN_ERR_INVALID;
    if (e->disabled)
        return fail(KILN_ERR_UNSUPPORTED, "entry %d (%s) is disabled: %s", entry, e->problem,
                    e->disabled);
    int n_tensors = e->n_inputs + e->n_outputs;
    int has_scratch = e->sig.n > n_tensors + e->n_axes;
    if (!ptrs || n_ptrs != n_tensors + has_scratch)
        return fail(KILN_ERR_INVALID,
                    "entry %d (%s) takes %d pointers (%d inputs, %d outputs%s), not %d", entry,
                    e->problem, n_tensors + has_scratch, e->n_inputs, e->n_outputs,
                    has_scratch ? ", scratch" : "", n_ptrs);
    if (axes)
        for (int a = 0; a < e->n_axes; a++)
            if (axes[a] != e->axis_values[a])
                return fail(KILN_ERR_INVALID,
                            "entry %d (%s) is built for %s = %lld, not %lld (the gate admits only "
                            "the proved shape)",
                            entry, e->problem, e->axis_names[a], (long long)e->axis_values[a],
                            (long long)axes[a]);
    /* params[i] points at the value of parameter i, as cuLaunchKernel and the cpu trampolines
     * take them. */
    void *values[KILN_MAX_PARAMS];
    void *params[KILN_MAX_PARAMS];
    int p = 0;
    for (int i = 0; i < n_tensors; i++) {
        values[p] = ptrs[i];
        params[p] = &values[p];
        p++;
    }
    for (int a = 0; a < e->n_axes; a++)
        params[p++] = (void *)&e->axis_values[a];
    if (has_scratch) {
        values[p] = ptrs[n_tensors];
        params[p] = &values[p];
        p++;
    }
    kiln_err err;
    int rc = e->lt      ? rt_gpu_lt_run(rt->gpu, e->lt, params, stream, &err)
             : rt->cuda ? rt_gpu_launch(rt->gpu, e->cuda_module, &e->plan, params, stream, &err)
                        : rt->cpu->ops->launch(rt->cpu, e->cpu_module, &e->plan, params, &err);
    if (rc)
        return fail(rc, "entry %d (%s): %s", entry, e->problem, err.msg);
    return KILN_OK;
}
