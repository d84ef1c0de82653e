/* nvrtc.h: compiling a CUDA candidate to a cubin with NVRTC, in-process, with the options and the
 * prelude every kiln compile uses; it needs the toolkit's NVRTC but no GPU and no driver. */
#ifndef KILN_NVRTC_H
#define KILN_NVRTC_H

#include "../util/common.h"

/* The architecture a source is compiled for: $KILN_CUDA_ARCH when it is set (the one place kiln
 * reads it); else sm_XY of compute capability cc_major.cc_minor, sm_90a on 9.0 for a source that
 * uses Hopper-only instructions (wgmma, setmaxnreg); with cc_major 0 (no device known), sm_90, or
 * sm_90a for such a source. source may be NULL. */
void kiln_cuda_arch(int cc_major, int cc_minor, const char *source, char *out, size_t cap);

/* Compiles a CUDA candidate with NVRTC for arch ("sm_90", "sm_90a", "90"; NULL means
 * kiln_cuda_arch(0, 0, source): $KILN_CUDA_ARCH, else sm_90) with the options and the prelude of
 * every kiln compile (see the top of nvrtc.c), through the cubin cache. On success *cubin (heap,
 * the caller frees) holds the ELF image and *cubin_len its size; *log (optional) gets NVRTC's
 * warnings or NULL. KILN_ERR_COMPILE with the log when the source does not compile;
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

/* The CUDA toolkit's folder: $CUDA_HOME, else /usr/local/cuda (NVRTC and cuBLASLt are looked for
 * under its lib64/ when the loader's path lacks them). */
const char *kiln_cuda_home(void);

#endif
