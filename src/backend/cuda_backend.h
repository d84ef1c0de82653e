/* cuda_backend.h: what the cuda backend offers besides its kiln_backend_ops: NVRTC compilation of a
 * candidate to a cubin, which needs the CUDA toolkit's NVRTC but no GPU and no driver. */
#ifndef KILN_CUDA_BACKEND_H
#define KILN_CUDA_BACKEND_H

#include "../util/common.h"

/* Compiles a CUDA candidate with NVRTC for arch ("sm_90", "sm_90a", "90"; NULL means "sm_90") with
 * the options and the prelude the cuda backend uses (see the top of cuda.c). On success *cubin
 * (heap, the caller frees) holds the ELF image and *cubin_len its size; *log (optional) gets
 * NVRTC's warnings or NULL. KILN_ERR_COMPILE with the log when the source does not compile;
 * KILN_ERR_BACKEND when NVRTC cannot be loaded (the message names the places tried);
 * KILN_ERR_INVALID for an arch NVRTC refuses. */
int kiln_cuda_compile_only(const char *source, const char *arch, char **cubin, size_t *cubin_len,
                           char **log, kiln_err *err);

/* kiln_cuda_compile_only in a forked child, for a process that will fork CUDA users later: once a
 * process has used NVRTC, cuInit fails in the children it forks (CUDA_ERROR_NOT_INITIALIZED, seen
 * on the H200 with NVRTC 13). Same results and statuses; KILN_ERR_BACKEND when the child dies. */
int kiln_cuda_compile_apart(const char *source, const char *arch, char **cubin, size_t *cubin_len,
                            char **log, kiln_err *err);

/* 1 when an NVRTC library can be loaded here (whether or not there is a GPU). */
int kiln_cuda_have_nvrtc(void);

#endif
