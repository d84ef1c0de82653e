/* fuzz_safetensors.c: libFuzzer target for the safetensors reader; whatever the bytes,
 * kiln_st_parse must either refuse them with a message or return tensors that lie wholly inside the
 * file. */
#include <stdint.h>
#include <string.h>

#include "formats/safetensors.h"

static volatile unsigned sink; /* keeps the reads of tensor bytes */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kiln_st *st = NULL;
    kiln_err err = {{0}};
    int rc = kiln_st_parse(data, size, "fuzz.safetensors", &st, &err);
    if (rc != KILN_OK) {
        /* A refusal always explains itself and names the file. */
        if (!strstr(err.msg, "fuzz.safetensors"))
            __builtin_trap();
        if (st)
            __builtin_trap();
        return 0;
    }
    size_t total = 0;
    unsigned sum = 0;
    for (int i = 0; i < kiln_st_count(st); i++) {
        const kiln_st_tensor *t = kiln_st_at(st, i);
        uint64_t numel = 1;
        for (int d = 0; d < t->ndim; d++)
            numel *= (uint64_t)t->shape[d];
        if (t->ndim < 0 || t->ndim > KILN_MAX_DIMS ||
            numel * kiln_dtype_size(t->dtype) != t->n_bytes)
            __builtin_trap();
        if (kiln_st_find(st, t->name) != t)
            __builtin_trap(); /* names are unique */
        const unsigned char *p = t->data;
        for (size_t b = 0; b < t->n_bytes; b++) /* ASan checks that every byte is inside */
            sum += p[b];
        if (t->n_bytes)
            (void)kiln_dtype_load(t->dtype, t->data, 0);
        total += t->n_bytes;
    }
    if (total > size)
        __builtin_trap();
    (void)kiln_st_metadata(st, "format");
    kiln_st_free(st);
    sink = sum;
    return 0;
}
