/* precompile.c: the compile pool: NVRTC compiles a batch of cuda candidates in one process per
 * core, into the cubin cache, while the gate evaluates them one at a time and loads each from the
 * cache (or compiles it itself when it gets there first).
 *
 * Processes, not threads: 16 threads of one process compiled 60 sources in 3-6 s on the H200, where
 * one NVRTC process takes ~0.2 s per source; processes share none of NVRTC's state. And never in
 * the caller's process: once a process has used NVRTC, the CUDA driver no longer initialises in the
 * children it forks (cuInit answers CUDA_ERROR_NOT_INITIALIZED), and the gate process is forked
 * from the caller. */
#include "gate.h"

#include <errno.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../backend/nvrtc.h"

pid_t kiln_gate_precompile_start(const char *const *sources, int n, const char *label) {
    if (n < 2 || !kiln_cuda_have_nvrtc())
        return 0;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid != 0)
        return pid > 0 ? pid : 0; /* on failure the gate compiles each in turn */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int n_procs = cores > 1 ? (int)(cores < 64 ? cores : 64) : 1;
    if (n_procs > n)
        n_procs = n;
    double t0 = kiln_now_s();
    pid_t *kids = xcalloc((size_t)n_procs, sizeof *kids);
    for (int w = 0; w < n_procs; w++) {
        kids[w] = fork();
        if (kids[w] == 0) {
            /* in the order the gate takes them, so that the gate finds the next one ready */
            for (int k = w; k < n; k += n_procs) {
                if (!sources[k] || kiln_abi_is_library(sources[k]))
                    continue;
                char *cubin = NULL, *log = NULL;
                size_t len = 0;
                /* the result lands in the cubin cache; compile errors are the gate's to report */
                kiln_cuda_compile_only(sources[k], NULL, &cubin, &len, &log, NULL);
                free(cubin);
                free(log);
            }
            _exit(0);
        }
    }
    for (int w = 0; w < n_procs; w++) {
        int status;
        while (kids[w] > 0 && waitpid(kids[w], &status, 0) < 0 && errno == EINTR) {
        }
    }
    if (label)
        fprintf(stderr, "%s: compiled %d sources in %d processes in %.1f s\n", label, n, n_procs,
                kiln_now_s() - t0);
    _exit(0);
}

void kiln_gate_precompile_wait(pid_t pid) {
    int status;
    while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
}
