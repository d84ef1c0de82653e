/* safetensors.h: a strict reader and a writer for the safetensors format
 * (8-byte little-endian header length, JSON header, raw little-endian tensor bytes). */
#ifndef KILN_SAFETENSORS_H
#define KILN_SAFETENSORS_H

#include "../util/common.h"
#include "dtype.h"

#define KILN_MAX_DIMS 8

typedef struct {
    const char *name;
    kiln_dtype dtype;
    int ndim;
    int64_t shape[KILN_MAX_DIMS];
    size_t n_bytes;   /* = numel * dtype size, checked against the data offsets */
    const void *data; /* points into the file's buffer */
} kiln_st_tensor;

typedef struct kiln_st kiln_st; /* one loaded file */

/* Loads and validates a whole file. Every malformed file is an error naming the file and the field:
 * short file, header length past the end, bad JSON, unknown dtype, shape/offset mismatch,
 * overlapping or out-of-range data offsets, duplicate names, non-object metadata. */
int kiln_st_load(const char *path, kiln_st **out, kiln_err *err);
/* The same from memory (the fuzz target calls this); buf is copied. label names it in errors. */
int kiln_st_parse(const void *buf, size_t len, const char *label, kiln_st **out, kiln_err *err);
/* kiln_st_parse of a heap buffer the result takes over (no copy; freed with it, also on error). */
int kiln_st_parse_owned(char *buf, size_t len, const char *label, kiln_st **out, kiln_err *err);
void kiln_st_free(kiln_st *st);

int kiln_st_count(const kiln_st *st);
const kiln_st_tensor *kiln_st_at(const kiln_st *st, int i);
/* NULL when there is no tensor of that name. */
const kiln_st_tensor *kiln_st_find(const kiln_st *st, const char *name);
/* The "__metadata__" string value for key, or NULL. */
const char *kiln_st_metadata(const kiln_st *st, const char *key);

/* Writes tensors (data copied from each .data) to path atomically, in the order given. */
int kiln_st_write(const char *path, const kiln_st_tensor *tensors, int n, kiln_err *err);

#endif
