/* test_refdata.c: reference data manifests checked against their problem, and input sets opened
 * with their tensors checked; the reference directories are written into /tmp by the test itself.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "formats/refdata.h"
#include "util/blake2b.h"

#define PROBLEM_DIR "tests/data/formats/problems/good_basic"

typedef struct {
    kiln_problem *p;
    char dir[64];
} fixture;

/* Writes one input set for workload w: every tensor input as "input.NAME", every output as
 * "output.NAME", with the shapes the workload implies. skip/bad_dtype/bad_shape name one tensor to
 * leave out, to store as float64, or to give one element more in its last dimension. */
static void write_set(const kiln_problem *p, int wi, const char *path, const char *skip,
                      const char *bad_dtype, const char *bad_shape) {
    const kiln_workload *w = &p->workloads[wi];
    kiln_st_tensor t[16];
    void *bufs[16];
    int n = 0;
    for (int g = 0; g < 2; g++) {
        const kiln_tensor_spec *specs = g ? p->outputs : p->inputs;
        int count = g ? p->n_outputs : p->n_inputs;
        for (int i = 0; i < count; i++) {
            if (specs[i].is_scalar)
                continue;
            char *name = xasprintf("%s%s", g ? "output." : "input.", specs[i].name);
            if (skip && strcmp(name, skip) == 0) {
                free(name);
                continue;
            }
            kiln_st_tensor *x = &t[n];
            memset(x, 0, sizeof *x);
            x->name = name;
            x->dtype = bad_dtype && strcmp(name, bad_dtype) == 0 ? KILN_F64 : specs[i].dtype;
            int64_t numel = kiln_tensor_shape(p, &specs[i], w, x->shape);
            x->ndim = specs[i].ndim;
            if (bad_shape && strcmp(name, bad_shape) == 0) {
                if (x->ndim == 0)
                    x->shape[x->ndim++] = 1;
                else
                    numel = numel / x->shape[x->ndim - 1] * (x->shape[x->ndim - 1] + 1),
                    x->shape[x->ndim - 1]++;
            }
            x->n_bytes = (size_t)numel * kiln_dtype_size(x->dtype);
            bufs[n] = xcalloc(1, x->n_bytes + 1);
            for (size_t b = 0; b < x->n_bytes; b++)
                ((unsigned char *)bufs[n])[b] = (unsigned char)(b * 7);
            x->data = bufs[n];
            n++;
        }
    }
    kiln_err err;
    int rc = kiln_st_write(path, t, n, &err);
    if (rc != KILN_OK)
        fail_msg("%s", err.msg);
    for (int i = 0; i < n; i++) {
        free((char *)t[i].name);
        free(bufs[i]);
    }
}

/* The content hash of a file, as the manifest records it. */
static void file_hash(const char *path, char hex[33]) {
    char *buf = NULL;
    size_t len = 0;
    assert_int_equal(kiln_read_file(path, &buf, &len, NULL), KILN_OK);
    kiln_blake2b_hex(buf, len, 16, hex);
    free(buf);
}

/* The manifest that matches p and the set files in dir: two sets per workload (one real, one
 * random). */
static cJSON *good_manifest(const kiln_problem *p, const char *dir) {
    char key[17];
    snprintf(key, sizeof key, "%016" PRIx64, p->source_key);
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "kiln_reference", 2);
    cJSON_AddStringToObject(m, "problem", p->name);
    cJSON_AddStringToObject(m, "key", key);
    cJSON_AddStringToObject(m, "device", "cpu");
    cJSON_AddStringToObject(m, "torch", "2.11.0");
    cJSON *ws = cJSON_AddArrayToObject(m, "workloads");
    for (int wi = 0; wi < p->n_workloads; wi++) {
        cJSON *w = cJSON_CreateObject();
        cJSON_AddStringToObject(w, "uuid", p->workloads[wi].uuid);
        cJSON *axes = cJSON_AddObjectToObject(w, "axes");
        for (int a = 0; a < p->n_axes; a++)
            cJSON_AddNumberToObject(axes, p->axes[a].name, (double)p->workloads[wi].axis_values[a]);
        if (wi == 0)
            cJSON_AddNumberToObject(w, "ref_time_us", 12.5);
        else if (wi == 1)
            cJSON_AddNullToObject(w, "ref_time_us");
        cJSON *sets = cJSON_AddArrayToObject(w, "sets");
        for (int si = 0; si < 2; si++) {
            cJSON *s = cJSON_CreateObject();
            char file[32];
            snprintf(file, sizeof file, "w%d_s%d.safetensors", wi, si);
            cJSON_AddStringToObject(s, "file", file);
            char *path = kiln_path_join(dir, file), hex[33];
            file_hash(path, hex);
            free(path);
            cJSON_AddStringToObject(s, "blake2b", hex);
            cJSON_AddStringToObject(s, "kind", si == 0 ? "real" : "random");
            cJSON_AddNumberToObject(s, "seed", 1000 + si);
            cJSON *sc = cJSON_AddObjectToObject(s, "scalars");
            if (wi == 1 && si == 0)
                cJSON_AddTrueToObject(sc, "eps");
            else
                cJSON_AddNumberToObject(sc, "eps", 1e-5 * (si + 1));
            cJSON_AddItemToArray(sets, s);
        }
        cJSON_AddItemToArray(ws, w);
    }
    return m;
}

static void write_manifest(const fixture *f, const cJSON *m) {
    char *path = kiln_path_join(f->dir, "manifest.json");
    char *text = cJSON_Print(m);
    assert_int_equal(kiln_write_file(path, text, strlen(text), NULL), KILN_OK);
    free(text);
    free(path);
}

static int setup(void **state) {
    fixture *f = xcalloc(1, sizeof *f);
    kiln_err err;
    if (kiln_problem_load(PROBLEM_DIR, &f->p, &err) != KILN_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    snprintf(f->dir, sizeof f->dir, "/tmp/kiln_test_ref_XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    for (int wi = 0; wi < f->p->n_workloads; wi++) {
        for (int si = 0; si < 2; si++) {
            char name[160];
            snprintf(name, sizeof name, "%s/w%d_s%d.safetensors", f->dir, wi, si);
            write_set(f->p, wi, name, NULL, NULL, NULL);
        }
    }
    cJSON *m = good_manifest(f->p, f->dir);
    write_manifest(f, m);
    cJSON_Delete(m);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    DIR *d = opendir(f->dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char *path = kiln_path_join(f->dir, e->d_name);
        unlink(path);
        free(path);
    }
    if (d)
        closedir(d);
    rmdir(f->dir);
    kiln_problem_free(f->p);
    free(f);
    return 0;
}

static void test_good(void **state) {
    fixture *f = *state;
    cJSON *m = good_manifest(f->p, f->dir);
    write_manifest(f, m);
    cJSON_Delete(m);
    kiln_refdata *r = NULL;
    kiln_err err = {{0}};
    int rc = kiln_refdata_load(f->dir, f->p, &r, &err);
    if (rc != KILN_OK)
        fail_msg("%s", err.msg);
    assert_string_equal(r->dir, f->dir);
    assert_string_equal(r->device, "cpu");
    assert_int_equal(r->n_workloads, 3);
    assert_true(r->workloads[0].ref_time_us == 12.5);
    assert_true(r->workloads[1].ref_time_us < 0);
    assert_true(r->workloads[2].ref_time_us < 0);
    int eps = kiln_problem_input_index(f->p, "eps");
    for (int wi = 0; wi < 3; wi++) {
        assert_int_equal(r->workloads[wi].n_sets, 2);
        for (int si = 0; si < 2; si++) {
            const kiln_refset *s = &r->workloads[wi].sets[si];
            char want[160];
            snprintf(want, sizeof want, "%s/w%d_s%d.safetensors", f->dir, wi, si);
            assert_string_equal(s->file, want);
            assert_int_equal(s->is_real, si == 0);
            assert_true(s->scalars[eps] == (wi == 1 && si == 0 ? 1.0 : 1e-5 * (si + 1)));
            kiln_st *st = NULL;
            rc = kiln_refset_open(f->p, wi, s, &st, &err);
            if (rc != KILN_OK)
                fail_msg("%s", err.msg);
            const kiln_st_tensor *z = kiln_st_find(st, "output.z");
            assert_non_null(z);
            assert_int_equal(z->shape[0], f->p->workloads[wi].axis_values[0]);
            assert_int_equal(z->shape[1], f->p->workloads[wi].axis_values[1]);
            assert_non_null(kiln_st_find(st, "input.count"));
            assert_null(kiln_st_find(st, "input.eps")); /* scalars live in the manifest */
            kiln_st_free(st);
        }
    }
    kiln_refdata_free(r);
}

typedef void (*mutation)(cJSON *m);

static cJSON *workload(cJSON *m, int i) {
    return cJSON_GetArrayItem(cJSON_GetObjectItem(m, "workloads"), i);
}

static cJSON *set(cJSON *m, int wi, int si) {
    return cJSON_GetArrayItem(cJSON_GetObjectItem(workload(m, wi), "sets"), si);
}

static void m_key(cJSON *m) {
    cJSON_ReplaceItemInObject(m, "key", cJSON_CreateString("0123456789abcdef"));
}
static void m_key_upper(cJSON *m) {
    char *k = xstrdup(cJSON_GetObjectItem(m, "key")->valuestring);
    for (char *c = k; *c; c++)
        if (*c >= 'a' && *c <= 'f')
            *c = (char)(*c - 'a' + 'A');
    cJSON_ReplaceItemInObject(m, "key", cJSON_CreateString(k));
    free(k);
}
static void m_name(cJSON *m) {
    cJSON_ReplaceItemInObject(m, "problem", cJSON_CreateString("another"));
}
static void m_version(cJSON *m) {
    cJSON_ReplaceItemInObject(m, "kiln_reference", cJSON_CreateNumber(3));
}
static void m_no_hash(cJSON *m) {
    cJSON_DeleteItemFromObject(set(m, 1, 0), "blake2b");
}
static void m_no_version(cJSON *m) {
    cJSON_DeleteItemFromObject(m, "kiln_reference");
}
static void m_device(cJSON *m) {
    cJSON_ReplaceItemInObject(m, "device", cJSON_CreateString("tpu"));
}
static void m_fewer(cJSON *m) {
    cJSON_DeleteItemFromArray(cJSON_GetObjectItem(m, "workloads"), 2);
}
static void m_uuid(cJSON *m) {
    cJSON_ReplaceItemInObject(workload(m, 0), "uuid", cJSON_CreateString("w2"));
}
static void m_axis_value(cJSON *m) {
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(workload(m, 1), "axes"), "M",
                              cJSON_CreateNumber(8));
}
static void m_axis_missing(cJSON *m) {
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(workload(m, 0), "axes"), "E");
}
static void m_no_sets(cJSON *m) {
    cJSON_ReplaceItemInObject(workload(m, 0), "sets", cJSON_CreateArray());
}
static void m_file_missing(cJSON *m) {
    cJSON_ReplaceItemInObject(set(m, 0, 1), "file", cJSON_CreateString("absent.safetensors"));
}
static void m_file_outside(cJSON *m) {
    cJSON_ReplaceItemInObject(set(m, 0, 0), "file", cJSON_CreateString("../w0_s0.safetensors"));
}
static void m_kind(cJSON *m) {
    cJSON_ReplaceItemInObject(set(m, 2, 1), "kind", cJSON_CreateString("fake"));
}
static void m_scalar_missing(cJSON *m) {
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(set(m, 0, 0), "scalars"), "eps");
}
static void m_scalar_tensor(cJSON *m) {
    cJSON_AddNumberToObject(cJSON_GetObjectItem(set(m, 0, 0), "scalars"), "x", 1);
}
static void m_scalar_string(cJSON *m) {
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(set(m, 0, 0), "scalars"), "eps",
                              cJSON_CreateString("1e-5"));
}
static void m_time(cJSON *m) {
    cJSON_ReplaceItemInObject(workload(m, 0), "ref_time_us", cJSON_CreateNumber(-3));
}
static void m_seed(cJSON *m) {
    cJSON_ReplaceItemInObject(set(m, 0, 0), "seed", cJSON_CreateNumber(0.5));
}

/* Workload 0's fp64_gap as text (a JSON object), for the gap tests. */
static void put_gap(cJSON *m, const char *json) {
    cJSON_AddItemToObject(workload(m, 0), "fp64_gap", cJSON_Parse(json));
}
static void m_gap_output(cJSON *m) {
    put_gap(m, "{\"nope\": {\"points\": [], \"rel_l2\": 0, \"rms\": 1}}");
}
static void m_gap_order(cJSON *m) {
    put_gap(m, "{\"z\": {\"points\": [[2, 1e-4], [1, 2e-4]], \"rel_l2\": 0, \"rms\": 1}}");
}
static void m_gap_negative(cJSON *m) {
    put_gap(m, "{\"z\": {\"points\": [[1, -1e-4]], \"rel_l2\": 0, \"rms\": 1}}");
}
static void m_gap_twice(cJSON *m) {
    put_gap(m, "{\"z\": {\"points\": [], \"rel_l2\": 0, \"rms\": 1}, "
               "\"z\": {\"points\": [], \"rel_l2\": 0, \"rms\": 1}}");
}
static void m_gap_no_rms(cJSON *m) {
    put_gap(m, "{\"z\": {\"points\": [], \"rel_l2\": 0}}");
}
static void m_gap_no_rel(cJSON *m) {
    put_gap(m, "{\"z\": {\"points\": []}}");
}

static void test_bad_manifests(void **state) {
    fixture *f = *state;
    static const struct {
        mutation fn;
        int rc;
        const char *want;
    } CASES[] = {
        {m_key, KILN_ERR_FORMAT, "key: '0123456789abcdef' is not the problem's key"},
        {m_key_upper, KILN_ERR_FORMAT, "(the reference data is stale)"},
        {m_name, KILN_ERR_FORMAT, "problem: not 'fixture_norm'"},
        {m_version, KILN_ERR_UNSUPPORTED, "kiln_reference: version 3"},
        {m_no_hash, KILN_ERR_FORMAT, "blake2b: not the 32-hex-digit content hash"},
        {m_no_version, KILN_ERR_FORMAT, "kiln_reference: missing"},
        {m_device, KILN_ERR_FORMAT, "device: not \"cpu\" or \"cuda\""},
        {m_fewer, KILN_ERR_FORMAT, "workloads: not an array of the problem's 3 workloads"},
        {m_uuid, KILN_ERR_FORMAT, "workloads[0].uuid: not 'w1'"},
        {m_axis_value, KILN_ERR_FORMAT, "workloads[1].axes.M: not 7"},
        {m_axis_missing, KILN_ERR_FORMAT, "workloads[0].axes: 4 axes, the problem has 5"},
        {m_no_sets, KILN_ERR_FORMAT, "workloads[0].sets: not a non-empty array"},
        {m_file_missing, KILN_ERR_FORMAT, "workloads[0].sets[1].file:"},
        {m_file_outside, KILN_ERR_FORMAT, "workloads[0].sets[0].file: not a relative path inside"},
        {m_kind, KILN_ERR_FORMAT, "workloads[2].sets[1].kind"},
        {m_scalar_missing, KILN_ERR_FORMAT, "workloads[0].sets[0].scalars.eps: missing"},
        {m_scalar_tensor, KILN_ERR_FORMAT, "workloads[0].sets[0].scalars.x: not a scalar input"},
        {m_scalar_string, KILN_ERR_FORMAT, "scalars.eps: not a number or a bool"},
        {m_time, KILN_ERR_FORMAT, "workloads[0].ref_time_us: not a non-negative number"},
        {m_seed, KILN_ERR_FORMAT, "workloads[0].sets[0].seed: not an integer"},
        {m_gap_output, KILN_ERR_FORMAT, "workloads[0].fp64_gap.nope: the problem has no such"},
        {m_gap_order, KILN_ERR_FORMAT, "workloads[0].fp64_gap.z.points[1]: not a pair"},
        {m_gap_negative, KILN_ERR_FORMAT, "workloads[0].fp64_gap.z.points[0]: not a pair"},
        {m_gap_no_rel, KILN_ERR_FORMAT, "workloads[0].fp64_gap.z: not {\"points\""},
        {m_gap_no_rms, KILN_ERR_FORMAT, "workloads[0].fp64_gap.z: not {\"points\""},
        {m_gap_twice, KILN_ERR_FORMAT, "workloads[0].fp64_gap.z: given twice"},
    };
    char *manifest = kiln_path_join(f->dir, "manifest.json");
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        cJSON *m = good_manifest(f->p, f->dir);
        CASES[i].fn(m);
        write_manifest(f, m);
        cJSON_Delete(m);
        kiln_refdata *r = (kiln_refdata *)0x1;
        kiln_err err = {{0}};
        int rc = kiln_refdata_load(f->dir, f->p, &r, &err);
        if (rc != CASES[i].rc)
            fail_msg("case %zu: expected %d, got %d: %s", i, CASES[i].rc, rc,
                     rc ? err.msg : "(ok)");
        assert_null(r);
        if (!strstr(err.msg, manifest) || !strstr(err.msg, CASES[i].want))
            fail_msg("case %zu: message \"%s\" lacks \"%s: ...%s\"", i, err.msg, manifest,
                     CASES[i].want);
    }
    /* Not JSON (cut short; Python's NaN, which cJSON refuses), a JSON array, then no manifest. */
    static const char *NOT_JSON[] = {"{\"kiln_reference\": ", "{\n \"rms\": NaN\n}"};
    static const char *WHERE[] = {"near line 1, column 19", "near line 2, column 9"};
    kiln_refdata *r;
    kiln_err err;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(kiln_write_file(manifest, NOT_JSON[i], strlen(NOT_JSON[i]), NULL),
                         KILN_OK);
        assert_int_equal(kiln_refdata_load(f->dir, f->p, &r, &err), KILN_ERR_FORMAT);
        if (!strstr(err.msg, "manifest.json: not valid JSON (error ") || !strstr(err.msg, WHERE[i]))
            fail_msg("not JSON %d: \"%s\"", i, err.msg);
    }
    assert_int_equal(kiln_write_file(manifest, "[1]", 3, NULL), KILN_OK);
    assert_int_equal(kiln_refdata_load(f->dir, f->p, &r, &err), KILN_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "manifest.json: not a JSON object"));
    unlink(manifest);
    assert_int_equal(kiln_refdata_load(f->dir, f->p, &r, &err), KILN_ERR_IO);
    assert_non_null(strstr(err.msg, manifest));
    free(manifest);
    cJSON *m = good_manifest(f->p, f->dir);
    write_manifest(f, m);
    cJSON_Delete(m);
}

/* The reference's own rounding widens the tolerance by what the gap needs beyond it, and only
 * where it was recorded; SOL-ExecBench's rules stay as published. */
static void test_fp64_gap_widens_the_tolerance(void **state) {
    fixture *f = *state;
    cJSON *m = good_manifest(f->p, f->dir);
    put_gap(m, "{\"z\": {\"points\": [[0, 1e-5], [2, 3e-4]], \"rel_l2\": 1e-6, "
               "\"rms\": 0.5}}");
    write_manifest(f, m);
    cJSON_Delete(m);
    kiln_refdata *r = NULL;
    kiln_err err = {{0}};
    if (kiln_refdata_load(f->dir, f->p, &r, &err) != KILN_OK)
        fail_msg("%s", err.msg);
    int z = kiln_problem_output_index(f->p, "z");
    const kiln_fp64_gap *g = &r->workloads[0].gap[z];
    assert_int_equal(g->n, 2);
    assert_true(g->x[1] == 2 && g->y[1] == 3e-4 && g->rel_l2 == 1e-6);
    kiln_tolerance t = {.atol = 1e-5, .rtol = 1e-4, .rel_l2 = 1e-5}, w;
    kiln_rounding how;
    w = kiln_refworkload_tolerance(&r->workloads[0], z, t, &how);
    /* the point at x = 2 is 3e-4 - 1e-4 * 2 - 1e-5 = 9e-5 outside: 9e-5 more atol, or 4.5e-5 more
     * rtol, which adds 4.5e-5 x rms = 2.25e-5 at a typical element: rtol (under 10 rtol rms) */
    assert_true(fabs(how.rtol - 4.5e-5) < 1e-9 && how.atol < 1e-9 && !how.refused);
    assert_true(fabs(w.rtol - 1.45e-4) < 1e-9 && fabs(w.atol - 1e-5) < 1e-9);
    assert_true(fabs(w.rel_l2 - 1.1e-5) < 1e-12 && how.rel_l2 == 1e-6);
    assert_true(3e-4 <= w.atol + w.rtol * 2 + 1e-12 && 1e-5 <= w.atol); /* both points inside */
    t.atol = 1e-3; /* already enough: atol and rtol unchanged, rel_l2 still widened */
    w = kiln_refworkload_tolerance(&r->workloads[0], z, t, &how);
    assert_true(how.atol == 0 && how.rtol == 0 && w.atol == 1e-3 && w.rtol == t.rtol);
    assert_true(fabs(w.rel_l2 - 1.1e-5) < 1e-12);
    t.atol = 1e-5;
    t.rtol = 1e-5; /* needs 2.7e-4 at x = 2: 1.35e-4 rtol, 6.75e-5 at rms 0.5, over 10 rtol rms =
                      5e-5: no rounding */
    w = kiln_refworkload_tolerance(&r->workloads[0], z, t, &how);
    assert_true(how.refused && how.atol == 0 && w.atol == t.atol && w.rel_l2 == t.rel_l2);
    assert_true(fabs(how.need - 6.75e-5) < 1e-9 && fabs(how.cap - 5e-5) < 1e-12);
    t.rtol = 1e-4;
    t.sol = 1;
    w = kiln_refworkload_tolerance(&r->workloads[0], z, t, &how);
    assert_true(how.atol == 0 && !how.refused && w.atol == t.atol && w.rel_l2 == t.rel_l2);
    t.sol = 0;
    w = kiln_refworkload_tolerance(&r->workloads[1], z, t, &how); /* none recorded */
    assert_true(how.atol == 0 && !how.refused && w.atol == t.atol && w.rel_l2 == t.rel_l2);
    kiln_refdata_free(r);
    m = good_manifest(f->p, f->dir);
    write_manifest(f, m);
    cJSON_Delete(m);
}

static void test_bad_sets(void **state) {
    fixture *f = *state;
    static const struct {
        const char *skip, *bad_dtype, *bad_shape;
        const char *want;
    } CASES[] = {
        {"output.z", NULL, NULL, "tensor 'output.z': missing"},
        {"input.count", NULL, NULL, "tensor 'input.count': missing"},
        {NULL, "input.x", NULL, "tensor 'input.x': dtype float64, the problem says float32"},
        {NULL, NULL, "input.x", "tensor 'input.x': shape [5, 17], the workload needs [5, 16]"},
        {NULL, NULL, "output.z", "tensor 'output.z': shape [5, 11], the workload needs [5, 10]"},
        {NULL, NULL, "input.count", "tensor 'input.count': shape [1], the workload needs []"},
    };
    char *path = kiln_path_join(f->dir, "bad_set.safetensors");
    kiln_refset set = {.file = path, .is_real = 1, .scalars = NULL};
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        write_set(f->p, 0, path, CASES[i].skip, CASES[i].bad_dtype, CASES[i].bad_shape);
        file_hash(path, set.blake2b);
        kiln_st *st = (kiln_st *)0x1;
        kiln_err err = {{0}};
        int rc = kiln_refset_open(f->p, 0, &set, &st, &err);
        if (rc != KILN_ERR_FORMAT)
            fail_msg("case %zu: expected a format error, got %d: %s", i, rc, rc ? err.msg : "(ok)");
        assert_null(st);
        if (!strstr(err.msg, path) || !strstr(err.msg, CASES[i].want))
            fail_msg("case %zu: message \"%s\" lacks \"%s\"", i, err.msg, CASES[i].want);
    }
    /* A set written for another workload (M=7) does not fit workload 0 (M=5). */
    write_set(f->p, 1, path, NULL, NULL, NULL);
    file_hash(path, set.blake2b);
    kiln_st *st;
    kiln_err err;
    assert_int_equal(kiln_refset_open(f->p, 0, &set, &st, &err), KILN_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "shape [7, 16], the workload needs [5, 16]"));
    assert_int_equal(kiln_refset_open(f->p, 1, &set, &st, &err), KILN_OK);
    kiln_st_free(st);
    /* A file that changed after its hash was taken is not used, however well-formed. */
    write_set(f->p, 0, path, NULL, NULL, NULL);
    assert_int_equal(kiln_refset_open(f->p, 0, &set, &st, &err), KILN_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "changed on disk since it was written"));
    /* A corrupt file: the safetensors reader's message comes through. */
    assert_int_equal(kiln_write_file(path, "\x02\0\0\0\0\0\0\0[]", 10, NULL), KILN_OK);
    file_hash(path, set.blake2b);
    assert_int_equal(kiln_refset_open(f->p, 0, &set, &st, &err), KILN_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "bad_set.safetensors: header: not a JSON object"));
    unlink(path);
    free(path);
}

static void test_scalar_output_unsupported(void **state) {
    (void)state;
    const char *def = "{\"name\":\"s\",\"axes\":{\"n\":{\"type\":\"var\"}},"
                      "\"inputs\":{\"a\":{\"shape\":[\"n\"],\"dtype\":\"float32\"}},"
                      "\"outputs\":{\"total\":{\"shape\":null,\"dtype\":\"float32\"}},"
                      "\"reference\":\"def run(a): return a.sum().item()\"}";
    const char *wl = "{\"uuid\":\"u\",\"axes\":{\"n\":3},\"inputs\":{\"a\":{\"type\":\"random\"}}}";
    kiln_problem *p;
    kiln_err err;
    assert_int_equal(kiln_problem_parse(def, strlen(def), "d", wl, strlen(wl), "w", &p, &err),
                     KILN_OK);
    kiln_refset set = {.file = "/nonexistent/set.safetensors"};
    kiln_st *st = (kiln_st *)0x1;
    assert_int_equal(kiln_refset_open(p, 0, &set, &st, &err), KILN_ERR_UNSUPPORTED);
    assert_null(st);
    assert_non_null(strstr(err.msg, "output 'total' is a scalar"));
    kiln_problem_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good),
        cmocka_unit_test(test_bad_manifests),
        cmocka_unit_test(test_fp64_gap_widens_the_tolerance),
        cmocka_unit_test(test_bad_sets),
        cmocka_unit_test(test_scalar_output_unsupported),
    };
    return cmocka_run_group_tests_name("refdata", tests, setup, teardown);
}
