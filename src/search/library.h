/* library.h: writes RUN/library/, the artifact of a run, from its store: per problem with an `ok`
 * winner, the kernel source, its cubin (cuda) and one manifest.json entry (docs/library.md). */
#ifndef KILN_LIBRARY_H
#define KILN_LIBRARY_H

#include "../backend/backend.h"
#include "../store/store.h"

#define KILN_LIBRARY_VERSION 1 /* "kiln_library" in manifest.json */

typedef struct {
    const char *backend; /* "cuda" or "cpu"; NULL: the store's meta "backend", else cpu */
    const kiln_device_info *device; /* NULL: the store's meta device_name/device_uuid/device_cc */
    const char *arch;         /* cubin architecture ("sm_90", "sm_90a"); NULL: kiln_cuda_arch of the
                                 device (src/backend/nvrtc.h) */
    const char *kiln_version; /* NULL: the store's meta "kiln_version", else "unknown" */
    int require_cubin; /* cuda: 1 makes a missing NVRTC an error; 0 writes "cubin": null and a
                          warning (the source is always there) */
} kiln_library_options;

typedef struct {
    int n_problems;      /* problems in the store */
    int n_entries;       /* entries written */
    int n_without_cubin; /* cuda entries whose cubin could not be built */
    char warnings[4096]; /* one line per problem skipped or entry degraded, and why */
} kiln_library_report;

/* Writes RUN/library/ from s (a read-only store will do): every file atomically (temp + rename),
 * the kernel files first and manifest.json last, then removes the .cu/.c/.cubin files that the new
 * manifest no longer names. The winner of a problem is its incumbent (kiln_store_incumbent_set)
 * when its latest result is ok, else its fastest candidate whose latest result is ok. A problem
 * whose directory no longer loads, or whose winner no longer parses or compiles, is skipped with a
 * warning in report (optional); only I/O and store failures are errors. The store is read in one
 * snapshot, so a run that keeps writing meanwhile is no harm. */
int kiln_library_write(kiln_store *s, const char *run_dir, const kiln_library_options *opt,
                       kiln_library_report *report, kiln_err *err);

#endif
