/* rt_manifest.c: reads a library's manifest.json (written by src/search/library.c) into
 * libkiln_rt's entries, and decides whether this runtime may use the library at all.
 *
 * What is refused, and why. A library is a promise: "on this device, with these kernels, these
 * shapes run correctly and faster". Each part of the promise is checked before anything is
 * loaded, and a broken one refuses the whole library with the reason:
 *   - the format ("kiln_library": 1) and the backend;
 *   - the build: a library written by another kiln release may use another ABI (parameter order,
 *     launch directives), so it is refused; "unknown" (a store without a version) is accepted
 *     with a note;
 *   - the device: the kernels were proved and timed on one device. A cpu library names the cpu
 *     model (its uuid is a hash of it); a cuda library names the GPU's uuid and compute capability.
 *     Another GPU of the same model (same name and capability) is accepted only with
 *     KILN_RT_ANY_GPU=1, since a sibling GPU of one host is usually what the user wants but is not
 *     what was measured;
 *   - every entry: its fields, its kernel file (present, named without a path), its launch plan,
 *     and the parameter count of its signature against what its gate implies (a manifest from one
 *     build and kernels from another would disagree here).
 * An entry that is intact but cannot be used here (a scalar input, which the install gate does not
 * pass; no captured shape; a launch that did not fit) is kept, disabled, with its reason. */
#include "rt_impl.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#include "../backend/nvrtc.h"

static const char *json_str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) && v->valuestring ? v->valuestring : NULL;
}

/* An integer-valued JSON number in [lo, hi]. */
static int json_int(const cJSON *v, int64_t lo, int64_t hi, int64_t *out) {
    if (!cJSON_IsNumber(v))
        return -1;
    double d = v->valuedouble;
    if (!(d >= (double)lo && d <= (double)hi) || d != (double)(int64_t)d)
        return -1;
    *out = (int64_t)d;
    return 0;
}

static int read_manifest(const char *dir, cJSON **out, char **path_out, kiln_err *err) {
    *out = NULL;
    char *path = kiln_path_join(dir, "manifest.json");
    char *text = NULL;
    size_t len = 0;
    int rc = KILN_OK;
    if (access(dir, F_OK) != 0) {
        rc = kiln_errf(err, KILN_ERR_IO, "%s: no such library directory", dir);
        goto done;
    }
    if (access(path, F_OK) != 0) {
        rc = kiln_errf(err, KILN_ERR_FORMAT,
                       "%s: not a kiln library (manifest.json is missing; `kiln optimize RUN` "
                       "writes RUN/library)",
                       dir);
        goto done;
    }
    kiln_err rerr;
    if (kiln_read_file(path, &text, &len, &rerr) != KILN_OK) {
        rc = kiln_errf(err, KILN_ERR_IO, "%s", rerr.msg);
        goto done;
    }
    /* The whole file must be one JSON value: trailing bytes are damage, not padding. */
    const char *end = NULL;
    cJSON *root = strlen(text) == len ? cJSON_ParseWithOpts(text, &end, 1) : NULL;
    if (!root) {
        const char *at = strlen(text) == len ? cJSON_GetErrorPtr() : text + strlen(text);
        long off = at && at >= text && at <= text + len ? (long)(at - text) : -1;
        rc = kiln_errf(err, KILN_ERR_FORMAT, "%s: corrupt manifest: not valid JSON (at byte %ld)",
                       path, off);
        goto done;
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        rc = kiln_errf(err, KILN_ERR_FORMAT, "%s: corrupt manifest: not a JSON object", path);
        goto done;
    }
    *out = root;
done:
    free(text);
    if (rc == KILN_OK && path_out)
        *path_out = path;
    else
        free(path);
    return rc;
}

int rt_manifest_backend(const char *dir, char *backend, size_t cap, kiln_err *err) {
    cJSON *root = NULL;
    char *path = NULL;
    int rc = read_manifest(dir, &root, &path, err);
    if (rc)
        return rc;
    const char *b = json_str(root, "backend");
    if (!b || (strcmp(b, "cuda") != 0 && strcmp(b, "cpu") != 0))
        rc = kiln_errf(err, KILN_ERR_FORMAT,
                       "%s: corrupt manifest: \"backend\" must be \"cuda\" or \"cpu\"%s%s", path,
                       b ? ", not " : "", b ? b : "");
    else
        snprintf(backend, cap, "%s", b);
    cJSON_Delete(root);
    free(path);
    return rc;
}

/* A kernel file name: plain, inside the library directory. */
static int safe_file_name(const char *s) {
    return s && *s && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static char *entry_where(int index, const char *problem) {
    return problem ? xasprintf("entry %d (%s)", index, problem) : xasprintf("entry %d", index);
}

/* One gate tensor. *no_shape is set when the tensor has no captured shape. */
static int parse_gate_tensor(const cJSON *t, rt_gate_tensor *g, int *no_shape, char *why,
                             size_t cap) {
    memset(g, 0, sizeof *g);
    const char *name = json_str(t, "name");
    const char *dtype = json_str(t, "dtype");
    if (!cJSON_IsObject(t) || !name || !dtype) {
        snprintf(why, cap, "a gate tensor without \"name\" and \"dtype\"");
        return -1;
    }
    if (strlen(name) >= sizeof g->name) {
        snprintf(why, cap, "gate tensor name '%.40s...' is too long", name);
        return -1;
    }
    snprintf(g->name, sizeof g->name, "%s", name);
    if (kiln_dtype_parse(dtype, &g->dtype) != 0) {
        snprintf(why, cap, "gate tensor '%s': unknown dtype '%.40s'", name, dtype);
        return -1;
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "scalar"))) {
        g->is_scalar = 1;
        return 0;
    }
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
    const cJSON *strides = cJSON_GetObjectItemCaseSensitive(t, "strides");
    if (cJSON_IsNull(shape) || !shape) {
        *no_shape = 1;
        return 0;
    }
    if (!cJSON_IsArray(shape) || !cJSON_IsArray(strides)) {
        snprintf(why, cap, "gate tensor '%s': \"shape\" and \"strides\" must be arrays", name);
        return -1;
    }
    int n = cJSON_GetArraySize(shape);
    if (n > KILN_MAX_DIMS || cJSON_GetArraySize(strides) != n) {
        snprintf(why, cap, "gate tensor '%s': %d dimensions and %d strides (at most %d)", name, n,
                 cJSON_GetArraySize(strides), KILN_MAX_DIMS);
        return -1;
    }
    g->ndim = n;
    for (int d = 0; d < n; d++) {
        if (json_int(cJSON_GetArrayItem(shape, d), 0, INT64_MAX / 2, &g->shape[d]) ||
            json_int(cJSON_GetArrayItem(strides, d), 0, INT64_MAX / 2, &g->strides[d])) {
            snprintf(why, cap, "gate tensor '%s': dimension %d is not a non-negative integer", name,
                     d);
            return -1;
        }
    }
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(t, "storage_offset");
    if (off && json_int(off, 0, INT64_MAX / 2, &g->storage_offset)) {
        snprintf(why, cap, "gate tensor '%s': bad storage_offset", name);
        return -1;
    }
    return 0;
}

/* The number of parameters a C prototype declares: "void f(const float* x, int64_t n)" -> 2. */
static int prototype_params(const char *proto) {
    const char *open = strchr(proto, '(');
    const char *close = strrchr(proto, ')');
    if (!open || !close || close < open)
        return -1;
    const char *s = open + 1;
    while (s < close && (*s == ' ' || *s == '\t'))
        s++;
    if (s == close || (close - s == 4 && strncmp(s, "void", 4) == 0))
        return 0;
    int n = 1, depth = 0;
    for (const char *c = s; c < close; c++) {
        if (*c == '(' || *c == '<')
            depth++;
        else if ((*c == ')' || *c == '>') && depth > 0)
            depth--;
        else if (*c == ',' && depth == 0)
            n++;
    }
    return n;
}

static int parse_triple(const cJSON *a, unsigned out[3]) {
    out[0] = out[1] = out[2] = 1;
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) < 1 || cJSON_GetArraySize(a) > 3)
        return -1;
    for (int i = 0; i < cJSON_GetArraySize(a); i++) {
        int64_t v;
        if (json_int(cJSON_GetArrayItem(a, i), 1, 0x7fffffff, &v))
            return -1;
        out[i] = (unsigned)v;
    }
    return 0;
}

/* The launch element of the gated (captured, workload 0) shape: the one whose "workloads" holds 0,
 * else the first. */
static const cJSON *gated_launch(const cJSON *launches) {
    const cJSON *el;
    cJSON_ArrayForEach(el, launches) {
        const cJSON *id;
        cJSON_ArrayForEach(id, cJSON_GetObjectItemCaseSensitive(el, "workloads")) {
            if (cJSON_IsNumber(id) && id->valuedouble == 0)
                return el;
        }
    }
    return cJSON_GetArrayItem(launches, 0);
}

/* Fills e from the manifest entry j; a damaged entry is an error (the library is refused), an
 * unusable one is disabled with its reason. */
static int parse_entry(kiln_rt *rt, const cJSON *j, int index, rt_entry *e, kiln_err *err) {
    char why[512] = "";
    const char *problem = json_str(j, "problem");
    char *where = entry_where(index, problem);
    int rc = KILN_OK;
#define BAD(...)                                                                                   \
    do {                                                                                           \
        snprintf(why, sizeof why, __VA_ARGS__);                                                    \
        goto bad;                                                                                  \
    } while (0)
    if (!cJSON_IsObject(j))
        BAD("not a JSON object");
    if (!problem || !*problem)
        BAD("no \"problem\" name");
    e->problem = xstrdup(problem);
    const char *kind = json_str(j, "kind");
    if (!kind)
        BAD("no \"kind\"");
    e->kind = xstrdup(kind);
    if (strcmp(kind, "aten") == 0 && !json_str(j, "aten"))
        BAD("kind \"aten\" without an \"aten\" overload");
    if (strcmp(kind, "module") == 0 && !json_str(j, "module_class"))
        BAD("kind \"module\" without a \"module_class\"");
    if (strcmp(kind, "chain") == 0 && !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(j, "ops")))
        BAD("kind \"chain\" without its \"ops\"");

    const cJSON *gate = cJSON_GetObjectItemCaseSensitive(j, "gate");
    const cJSON *ins = cJSON_GetObjectItemCaseSensitive(gate, "inputs");
    const cJSON *outs = cJSON_GetObjectItemCaseSensitive(gate, "outputs");
    if (!cJSON_IsObject(gate) || !cJSON_IsArray(ins) || !cJSON_IsArray(outs))
        BAD("no \"gate\" with \"inputs\" and \"outputs\"");
    if (cJSON_GetArraySize(ins) > RT_MAX_TENSORS || cJSON_GetArraySize(outs) > RT_MAX_TENSORS)
        BAD("more than %d gate inputs or outputs", RT_MAX_TENSORS);
    if (cJSON_GetArraySize(outs) < 1)
        BAD("no gate outputs");
    int no_shape = 0, scalar = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, ins) {
        char twhy[300];
        if (parse_gate_tensor(t, &e->inputs[e->n_inputs], &no_shape, twhy, sizeof twhy))
            BAD("%s", twhy);
        scalar |= e->inputs[e->n_inputs].is_scalar;
        e->n_inputs++;
    }
    cJSON_ArrayForEach(t, outs) {
        char twhy[300];
        if (parse_gate_tensor(t, &e->outputs[e->n_outputs], &no_shape, twhy, sizeof twhy))
            BAD("%s", twhy);
        if (e->outputs[e->n_outputs].is_scalar)
            BAD("output '%s' is a scalar", e->outputs[e->n_outputs].name);
        e->n_outputs++;
    }
    const char *cap = json_str(gate, "device_capability");
    if (rt->cuda) {
        char here[16];
        snprintf(here, sizeof here, "%d.%d", rt->info.cc_major, rt->info.cc_minor);
        if (!cap)
            BAD("no gate \"device_capability\"");
        if (strcmp(cap, here) != 0) {
            free(where);
            return kiln_errf(err, KILN_ERR_UNSUPPORTED,
                             "%s/manifest.json: entry %d (%s) was proved on compute capability "
                             "%s; device %d is %s",
                             rt->dir, index, problem, cap, rt->device, here);
        }
    }

    const char *kernel = json_str(j, "kernel");
    if (!safe_file_name(kernel))
        BAD("\"kernel\" must name a file inside the library directory");
    e->kernel_file = kiln_path_join(rt->dir, kernel);
    if (access(e->kernel_file, R_OK) != 0)
        BAD("kernel file '%s' is missing", kernel);
    if (rt->cuda) {
        const cJSON *cubin = cJSON_GetObjectItemCaseSensitive(j, "cubin");
        if (cJSON_IsString(cubin)) {
            if (!safe_file_name(cubin->valuestring))
                BAD("\"cubin\" must name a file inside the library directory");
            e->cubin_file = kiln_path_join(rt->dir, cubin->valuestring);
            if (access(e->cubin_file, R_OK) != 0)
                BAD("cubin file '%s' is missing", cubin->valuestring);
        } else if (cubin && !cJSON_IsNull(cubin)) {
            BAD("\"cubin\" must be a file name or null");
        }
        const char *arch = json_str(j, "arch");
        e->arch = arch ? xstrdup(arch) : NULL;
        /* a cuBLASLt entry: its call (the configuration itself) instead of a kernel to launch */
        const cJSON *lib = cJSON_GetObjectItemCaseSensitive(j, "library");
        if (lib) {
            const char *name = json_str(lib, "name");
            const cJSON *call = cJSON_GetObjectItemCaseSensitive(lib, "call");
            if (!name || strcmp(name, "cublaslt") != 0 || !cJSON_IsObject(call))
                BAD("\"library\" must be {\"name\": \"cublaslt\", \"call\": {...}}");
            e->library_call = rt_json(cJSON_PrintUnformatted(call));
        }
    }

    /* The launch plan of the gated shape. */
    const cJSON *launches = cJSON_GetObjectItemCaseSensitive(j, "launches");
    if (!cJSON_IsArray(launches))
        BAD("no \"launches\"");
    const cJSON *el = gated_launch(launches);
    int has_scratch = cJSON_GetObjectItemCaseSensitive(j, "scratch_bytes") != NULL;
    const cJSON *axes = cJSON_GetObjectItemCaseSensitive(el, "axes");
    const char *launch_error = json_str(el, "error");
    if (el && !cJSON_IsObject(axes))
        BAD("a launch element without \"axes\"");
    if (el) {
        const cJSON *a;
        cJSON_ArrayForEach(a, axes) {
            if (e->n_axes == RT_MAX_AXES)
                BAD("more than %d axes", RT_MAX_AXES);
            if (!a->string || strlen(a->string) >= RT_NAME_LEN ||
                json_int(a, INT64_MIN / 2, INT64_MAX / 2, &e->axis_values[e->n_axes]))
                BAD("axis '%.40s' is not an integer", a->string ? a->string : "?");
            snprintf(e->axis_names[e->n_axes], RT_NAME_LEN, "%s", a->string);
            e->n_axes++;
        }
    }
    if (el && !launch_error) {
        const cJSON *ls = cJSON_GetObjectItemCaseSensitive(el, "launches");
        int least = e->library_call ? 0 : 1; /* a library call launches no kernel of its own */
        if (!cJSON_IsArray(ls) || cJSON_GetArraySize(ls) < least ||
            cJSON_GetArraySize(ls) > KILN_MAX_LAUNCHES)
            BAD("a launch element needs %d to %d launches", least, KILN_MAX_LAUNCHES);
        const cJSON *l;
        cJSON_ArrayForEach(l, ls) {
            kiln_launch *L = &e->plan.launch[e->plan.n_launches++];
            const char *entry = json_str(l, "entry");
            int64_t smem = 0;
            const cJSON *smem_j = cJSON_GetObjectItemCaseSensitive(l, "smem_bytes");
            if (!entry || strlen(entry) >= sizeof L->entry)
                BAD("a launch without an \"entry\" name");
            snprintf(L->entry, sizeof L->entry, "%s", entry);
            if (parse_triple(cJSON_GetObjectItemCaseSensitive(l, "grid"), L->grid) ||
                parse_triple(cJSON_GetObjectItemCaseSensitive(l, "block"), L->block) ||
                parse_triple(cJSON_GetObjectItemCaseSensitive(l, "cluster"), L->cluster))
                BAD("launch '%s': grid, block and cluster must be 1 to 3 positive integers", entry);
            if (smem_j && json_int(smem_j, 0, 0x7fffffff, &smem))
                BAD("launch '%s': bad smem_bytes", entry);
            L->smem_bytes = (size_t)smem;
        }
        int64_t scratch = 0;
        const cJSON *sb = cJSON_GetObjectItemCaseSensitive(el, "scratch_bytes");
        if (sb && json_int(sb, 0, INT64_MAX / 2, &scratch))
            BAD("bad scratch_bytes");
        e->plan.scratch_bytes = (size_t)scratch;
    }

    /* The parameter list the gate implies (docs/abi.md): inputs, outputs, axes, [scratch]. */
    if (e->n_inputs + e->n_outputs + e->n_axes + 1 > KILN_MAX_PARAMS)
        BAD("more than %d kernel parameters", KILN_MAX_PARAMS);
    for (int i = 0; i < e->n_inputs; i++)
        kiln_abi_add_tensor(&e->sig, e->inputs[i].name, e->inputs[i].dtype, 0, rt->cuda);
    for (int i = 0; i < e->n_outputs; i++)
        kiln_abi_add_tensor(&e->sig, e->outputs[i].name, e->outputs[i].dtype, 1, rt->cuda);
    for (int a = 0; a < e->n_axes; a++)
        kiln_abi_add_param(&e->sig, KILN_PARAM_I64, e->axis_names[a], "int64_t");
    if (has_scratch)
        kiln_abi_add_param(&e->sig, KILN_PARAM_PTR, "kiln_scratch", "void*");
    e->plan.n_params = e->sig.n;
    if (el && !launch_error) {
        kiln_dtype dtypes[KILN_MAX_PARAMS];
        for (int i = 0; i < e->n_inputs; i++)
            dtypes[i] = e->inputs[i].dtype;
        for (int i = 0; i < e->n_outputs; i++)
            dtypes[e->n_inputs + i] = e->outputs[i].dtype;
        kiln_err terr;
        if (kiln_tmaps_from_json(cJSON_GetObjectItemCaseSensitive(el, "tensormaps"), dtypes,
                                 e->n_inputs + e->n_outputs, &e->plan, &terr) != KILN_OK)
            BAD("%.400s", terr.msg);
    }
    const char *signature = json_str(j, "signature");
    if (!signature)
        BAD("no \"signature\"");
    if (el && !launch_error && !scalar) {
        int n = prototype_params(signature);
        if (n != e->sig.n)
            BAD("its signature '%.200s' takes %d parameters, but its gate and axes imply %d "
                "(a manifest and kernels from different builds?)",
                signature, n, e->sig.n);
    }

    if (scalar)
        e->disabled = xstrdup("a scalar input: the install gate passes tensors only");
    else if (no_shape)
        e->disabled = xstrdup("the gate has no captured shape");
    else if (strcmp(kind, "aten") != 0 && strcmp(kind, "module") != 0 && strcmp(kind, "chain") != 0)
        e->disabled = xasprintf("kind '%s' names no aten op, module or chain to replace", kind);
    else if (!el)
        e->disabled = xstrdup("no launch plan (the problem had no workload)");
    else if (launch_error)
        e->disabled = xasprintf("its launch does not fit the gated shape: %s", launch_error);
    else if (rt->cuda && !e->cubin_file && !e->library_call && !kiln_cuda_have_nvrtc())
        e->disabled = xstrdup("no cubin in the library and no NVRTC here to build one");
    free(where);
    return KILN_OK;
bad:
#undef BAD
    rc = kiln_errf(err, KILN_ERR_FORMAT, "%s/manifest.json: corrupt manifest: %s: %s", rt->dir,
                   where, why);
    free(where);
    return rc;
}

/* Adds "runtime" to a copy of the manifest entry and prints it. */
static char *entry_json(const cJSON *j, const rt_entry *e, int index) {
    cJSON *c = rt_json(cJSON_Duplicate(j, 1));
    cJSON *r = rt_json(cJSON_AddObjectToObject(c, "runtime"));
    rt_json(cJSON_AddNumberToObject(r, "index", index));
    rt_json(cJSON_AddBoolToObject(r, "usable", e->disabled == NULL));
    if (e->disabled)
        rt_json(cJSON_AddStringToObject(r, "disabled_reason", e->disabled));
    else
        rt_json(cJSON_AddNullToObject(r, "disabled_reason"));
    rt_json(cJSON_AddNumberToObject(r, "n_params", e->sig.n));
    cJSON *axes = rt_json(cJSON_AddObjectToObject(r, "axes"));
    for (int a = 0; a < e->n_axes; a++)
        rt_json(cJSON_AddNumberToObject(axes, e->axis_names[a], (double)e->axis_values[a]));
    rt_json(cJSON_AddNumberToObject(r, "scratch_bytes", (double)e->plan.scratch_bytes));
    rt_json(cJSON_AddBoolToObject(r, "has_scratch",
                                  e->sig.n > 0 &&
                                      strcmp(e->sig.p[e->sig.n - 1].name, "kiln_scratch") == 0));
    char *text = rt_json(cJSON_PrintUnformatted(c));
    cJSON_Delete(c);
    return text;
}

static void note(char **notes, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void note(char **notes, const char *fmt, ...) {
    char line[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    char *old = *notes;
    *notes = xasprintf("%s%s%s", old ? old : "", old ? "\n" : "", line);
    free(old);
}

/* Checks the library's device against the one found here. */
static int check_device(kiln_rt *rt, const cJSON *dev, const char *path, char **notes,
                        kiln_err *err) {
    const char *name = json_str(dev, "name");
    const char *uuid = json_str(dev, "uuid");
    const char *cc = json_str(dev, "compute_capability");
    if (!cJSON_IsObject(dev) || !name || !uuid)
        return kiln_errf(err, KILN_ERR_FORMAT,
                         "%s: corrupt manifest: no \"device\" with \"name\" and \"uuid\"", path);
    const kiln_device_info *here = &rt->info;
    int anonymous = !*uuid;
    if (anonymous)
        note(notes, "the manifest does not name the device it was built on; accepted for %s",
             here->name);
    if (!rt->cuda) {
        if (anonymous)
            return KILN_OK;
        if (strcmp(uuid, here->uuid) != 0)
            return kiln_errf(err, KILN_ERR_UNSUPPORTED,
                             "%s: the library was built on another device: '%s' (%s); this "
                             "machine is '%s' (%s). Run `kiln tune` here to build one for it",
                             path, name, uuid, here->name, here->uuid);
        return KILN_OK;
    }
    char here_cc[16];
    snprintf(here_cc, sizeof here_cc, "%d.%d", here->cc_major, here->cc_minor);
    if (!cc)
        return kiln_errf(err, KILN_ERR_FORMAT,
                         "%s: corrupt manifest: no \"device\".\"compute_capability\"", path);
    if (strcmp(cc, here_cc) != 0)
        return kiln_errf(err, KILN_ERR_UNSUPPORTED,
                         "%s: the library was built for %s (compute capability %s); CUDA device "
                         "%d is %s (compute capability %s)",
                         path, name, cc, rt->device, here->name, here_cc);
    if (!anonymous && strcmp(uuid, here->uuid) != 0) {
        const char *any = getenv("KILN_RT_ANY_GPU");
        int allow = any && *any && strcmp(any, "0") != 0;
        if (!allow || strcmp(name, here->name) != 0)
            return kiln_errf(err, KILN_ERR_UNSUPPORTED,
                             "%s: the library was built on another GPU: %s %s; CUDA device %d is "
                             "%s %s%s",
                             path, name, uuid, rt->device, here->name, here->uuid,
                             strcmp(name, here->name) == 0
                                 ? " (the same model: KILN_RT_ANY_GPU=1 accepts it)"
                                 : "");
        note(notes, "built on %s, used on %s (same model; KILN_RT_ANY_GPU=1)", uuid, here->uuid);
    }
    return KILN_OK;
}

int rt_manifest_load(kiln_rt *rt, const char *backend_expected, char **notes, kiln_err *err) {
    cJSON *root = NULL;
    char *path = NULL;
    *notes = NULL;
    int rc = read_manifest(rt->dir, &root, &path, err);
    if (rc)
        return rc;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "kiln_library");
    const cJSON *build = cJSON_GetObjectItemCaseSensitive(root, "build");
    const char *backend = json_str(root, "backend");
    const char *built_by = json_str(build, "kiln");
    const cJSON *entries = cJSON_GetObjectItemCaseSensitive(root, "entries");
    if (!cJSON_IsNumber(fmt)) {
        rc = kiln_errf(err, KILN_ERR_FORMAT,
                       "%s: corrupt manifest: no \"kiln_library\" format number", path);
    } else if (fmt->valuedouble != KILN_RT_LIBRARY_FORMAT) {
        rc = kiln_errf(err, KILN_ERR_UNSUPPORTED,
                       "%s: library format %g; this runtime reads format %d (kiln %s)", path,
                       fmt->valuedouble, KILN_RT_LIBRARY_FORMAT, KILN_VERSION);
    } else if (!backend || strcmp(backend, backend_expected) != 0) {
        rc = kiln_errf(err, KILN_ERR_FORMAT, "%s: corrupt manifest: \"backend\" changed to %s",
                       path, backend ? backend : "nothing");
    } else if (!cJSON_IsObject(build) || !built_by) {
        rc = kiln_errf(err, KILN_ERR_FORMAT, "%s: corrupt manifest: no \"build\".\"kiln\"", path);
    } else if (strcmp(built_by, "unknown") != 0 && strcmp(built_by, KILN_VERSION) != 0) {
        rc = kiln_errf(err, KILN_ERR_UNSUPPORTED,
                       "%s: the library was built by kiln %s; this runtime is kiln %s (rebuild it "
                       "with this kiln: `kiln optimize RUN`)",
                       path, built_by, KILN_VERSION);
    } else if (!cJSON_IsArray(entries)) {
        rc = kiln_errf(err, KILN_ERR_FORMAT, "%s: corrupt manifest: no \"entries\" array", path);
    }
    if (rc == KILN_OK && strcmp(built_by, "unknown") == 0)
        note(notes, "the manifest does not say which kiln built it (\"unknown\"); accepted");
    if (rc == KILN_OK)
        rc = check_device(rt, cJSON_GetObjectItemCaseSensitive(root, "device"), path, notes, err);
    if (rc == KILN_OK) {
        rt->library_device =
            rt_json(cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(root, "device"), 1));
        rt->library_build = rt_json(cJSON_Duplicate(build, 1));
        /* n_entries only once the array exists: kiln_rt_close may see rt after a jump. */
        int n = cJSON_GetArraySize(entries);
        rt->entries = xcalloc((size_t)(n ? n : 1), sizeof *rt->entries);
        rt->n_entries = n;
        int i = 0;
        const cJSON *j;
        cJSON_ArrayForEach(j, entries) {
            rc = parse_entry(rt, j, i, &rt->entries[i], err);
            if (rc)
                break;
            for (int k = 0; k < i; k++)
                if (strcmp(rt->entries[k].problem, rt->entries[i].problem) == 0) {
                    rc = kiln_errf(err, KILN_ERR_FORMAT,
                                   "%s: corrupt manifest: entries %d and %d are both '%s'", path, k,
                                   i, rt->entries[i].problem);
                    break;
                }
            if (rc)
                break;
            rt->entries[i].json = entry_json(j, &rt->entries[i], i);
            i++;
        }
    }
    cJSON_Delete(root);
    free(path);
    return rc;
}
