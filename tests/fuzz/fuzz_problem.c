/* fuzz_problem.c: libFuzzer target for the problem parser. The input is definition.json text, a NUL
 * byte, then workload.jsonl text (no NUL: all of it is the definition and the workload file is
 * empty). */
#include <stdint.h>
#include <string.h>

#include "formats/problem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    const char *nul = memchr(text, 0, size);
    size_t def_len = nul ? (size_t)(nul - text) : size;
    const char *wl = nul ? nul + 1 : text + size;
    size_t wl_len = nul ? size - def_len - 1 : 0;
    kiln_problem *p = NULL;
    kiln_err err = {{0}};
    int rc = kiln_problem_parse(text, def_len, "fuzz/definition.json", wl, wl_len,
                                "fuzz/workload.jsonl", &p, &err);
    if (rc != KILN_OK) {
        if (p || !strstr(err.msg, "fuzz/"))
            __builtin_trap(); /* a refusal returns nothing and names its file */
        return 0;
    }
    /* Every index the problem holds must be usable as it is. */
    int64_t shape[KILN_MAX_DIMS];
    for (int w = 0; w < p->n_workloads; w++) {
        const kiln_workload *wk = &p->workloads[w];
        for (int i = 0; i < p->n_inputs; i++) {
            if (kiln_tensor_shape(p, &p->inputs[i], wk, shape) < 0)
                __builtin_trap();
            if (wk->inputs[i].kind == KILN_INPUT_SAFETENSORS &&
                (!wk->inputs[i].path || !wk->inputs[i].tensor_key))
                __builtin_trap();
        }
        for (int i = 0; i < p->n_outputs; i++)
            if (kiln_tensor_shape(p, &p->outputs[i], wk, shape) < 0)
                __builtin_trap();
        for (int a = 0; a < p->n_axes; a++)
            if (wk->axis_values[a] < 0)
                __builtin_trap();
        if (kiln_problem_min_bytes(p, wk) < 0)
            __builtin_trap();
    }
    for (int a = 0; a < p->n_axes; a++)
        if (kiln_problem_axis_index(p, p->axes[a].name) != a)
            __builtin_trap();
    kiln_problem_free(p);
    return 0;
}
