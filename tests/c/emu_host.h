/* emu_host.h: the host side of the tests that run emitted CUDA on the CUDA-thread emulator (as a
 * cpu candidate): a string appender for building the emulated source, compiling it on the cpu
 * backend, and running it once on a problem's workload 0 — float32 scalars by value, outputs
 * poisoned, scratch zeroed — returning the outputs. Included by test_family_attention.c,
 * test_family_softmax.c and test_gen_ir_cuda.c after <cmocka.h> and backend/backend.h; static
 * inline, so a test that uses part of it does not warn. */
#ifndef KILN_TESTS_EMU_HOST_H
#define KILN_TESTS_EMU_HOST_H

#include <stdlib.h>
#include <string.h>

#include "backend/abi.h"
#include "backend/backend.h"
#include "formats/problem.h"
#include "util/common.h"

/* Appends n bytes of piece to the heap string *s of *len bytes (kept NUL-terminated). */
static inline void cat(char **s, size_t *len, const char *piece, size_t n) {
    *s = xrealloc(*s, *len + n + 1);
    memcpy(*s + *len, piece, n);
    *len += n;
    (*s)[*len] = 0;
}

typedef struct {
    kiln_module *mod;
    kiln_abi abi;
    kiln_signature sig;
} module;

/* Compiles src (a cpu candidate) for p on be into md, with KILN_CC=cc when cc is not NULL (the
 * emulator is C++); fails the test with the compiler's log otherwise. */
static inline void compile_module(kiln_backend *be, const kiln_problem *p, const char *src,
                                  const char *cc, module *md, const char *what) {
    kiln_err err;
    assert_int_equal(kiln_abi_parse(src, 0, &md->abi, &err), KILN_OK);
    kiln_abi_signature(p, md->abi.scratch != NULL, 0, &md->sig);
    char *log = NULL;
    if (cc)
        setenv("KILN_CC", cc, 1);
    int rc = be->ops->compile(be, src, &md->sig, &md->abi, &md->mod, &log, &err);
    if (cc)
        unsetenv("KILN_CC");
    if (rc)
        fail_msg("%s: %s\n%.4000s", what, err.msg, log ? log : "");
    free(log);
}

/* Elements of t in workload 0. */
static inline size_t elements(const kiln_problem *p, const kiln_tensor_spec *t) {
    int64_t shape[KILN_MAX_DIMS];
    return (size_t)kiln_tensor_shape(p, t, &p->workloads[0], shape);
}

/* Runs md once on workload 0 of p with inputs in[i] (in[i] unused for a scalar input: the
 * workload's value is passed, as float32), outputs filled with 0xA5 first and scratch zeroed;
 * returns the outputs (heap, 16 bytes of slack each). */
static inline void **run_module(kiln_backend *be, const kiln_problem *p, const module *md,
                                void **in, const char *what) {
    enum { MAX = 40 };
    kiln_err err;
    const kiln_workload *w = &p->workloads[0];
    kiln_devptr ptr[MAX];
    int64_t i64[MAX];
    float scalars[MAX];
    void *params[MAX];
    assert_true(p->n_inputs + p->n_outputs + p->n_axes + 1 <= MAX);
    int k = 0;
    for (int i = 0; i < p->n_inputs; i++, k++) {
        if (p->inputs[i].is_scalar) { /* by value (docs/abi.md) */
            scalars[k] = (float)w->inputs[i].scalar;
            params[k] = &scalars[k];
            continue;
        }
        size_t bytes = elements(p, &p->inputs[i]) * kiln_dtype_size(p->inputs[i].dtype);
        assert_int_equal(be->ops->alloc(be, bytes, 0, &ptr[k], &err), KILN_OK);
        assert_int_equal(be->ops->upload(be, ptr[k], in[i], bytes, &err), KILN_OK);
        params[k] = &ptr[k];
    }
    for (int o = 0; o < p->n_outputs; o++, k++) {
        size_t bytes = elements(p, &p->outputs[o]) * kiln_dtype_size(p->outputs[o].dtype);
        assert_int_equal(be->ops->alloc(be, bytes, 0, &ptr[k], &err), KILN_OK);
        assert_int_equal(be->ops->memset8(be, ptr[k], 0xA5, bytes, &err), KILN_OK);
        params[k] = &ptr[k];
    }
    for (int a = 0; a < p->n_axes; a++, k++) {
        i64[k] = w->axis_values[a];
        params[k] = &i64[k];
    }
    kiln_launch_plan plan;
    assert_int_equal(kiln_abi_plan(&md->abi, p, w, &plan, &err), KILN_OK);
    int scratch = k;
    if (plan.scratch_bytes) {
        assert_int_equal(be->ops->alloc(be, plan.scratch_bytes, 0, &ptr[k], &err), KILN_OK);
        assert_int_equal(be->ops->memset8(be, ptr[k], 0, plan.scratch_bytes, &err), KILN_OK);
        params[k] = &ptr[k];
    }
    if (be->ops->launch(be, md->mod, &plan, params, &err) || be->ops->sync(be, &err))
        fail_msg("%s: %s", what, err.msg);
    void **out = xcalloc((size_t)p->n_outputs, sizeof *out);
    for (int o = 0; o < p->n_outputs; o++) {
        size_t bytes = elements(p, &p->outputs[o]) * kiln_dtype_size(p->outputs[o].dtype);
        out[o] = xmalloc(bytes + 16);
        k = p->n_inputs + o;
        assert_int_equal(be->ops->download(be, out[o], ptr[k], bytes, &err), KILN_OK);
        be->ops->free(be, ptr[k]);
    }
    for (int i = 0; i < p->n_inputs; i++)
        if (!p->inputs[i].is_scalar)
            be->ops->free(be, ptr[i]);
    if (plan.scratch_bytes)
        be->ops->free(be, ptr[scratch]);
    return out;
}

#endif
