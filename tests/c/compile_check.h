/* compile_check.h: one point of a family, its CUDA candidate compiled by NVRTC and its cubin read
 * back: it compiles, the entry point has no stack frame (no spills) and ptxas did not serialise its
 * wgmma instructions (C7514). For the family tests;
 * include after <cmocka.h> and the kiln headers it names. */
#ifndef KILN_TEST_COMPILE_CHECK_H
#define KILN_TEST_COMPILE_CHECK_H

#include "backend/cubin.h"
#include "backend/nvrtc.h"
#include "gen/family.h"

/* arch: "sm_90", "sm_90a", or NULL for what kiln picks for the source on a 9.0 device
 * (kiln_cuda_arch). Prints the registers of entry for the start point, and for the others too when
 * every; fails the test on an error or a stack frame. */
static inline void compile_check(const kiln_family *f, const kiln_problem *p, const kiln_match *m,
                                 const int64_t *pt, const char *arch, const char *entry,
                                 int is_start, int every) {
    char *src = f->emit(p, m, pt, 1), *cubin = NULL, *log = NULL;
    size_t len;
    kiln_err err;
    char *ps = kiln_family_point_str(f, pt);
    char picked[32];
    if (!arch) {
        kiln_cuda_arch(9, 0, src, picked, sizeof picked);
        arch = picked;
    }
    if (kiln_cuda_compile_only(src, arch, &cubin, &len, &log, &err))
        fail_msg("%s %s does not compile: %s\n%.3000s", p->name, ps, err.msg, log ? log : "");
    kiln_cubin_usage u;
    assert_int_equal(kiln_cubin_usage_of(cubin, len, entry, &u, &err), 0);
    if (is_start || every)
        printf("    %s: %s%s: %d registers\n", p->name, is_start ? "start " : "", ps, u.regs);
    if (u.frame_bytes != 0)
        fail_msg("%s %s: %lld bytes of stack (spills)", p->name, ps, (long long)u.frame_bytes);
    /* ptxas serialises every wgmma of a kernel that touches an in-flight wgmma's accumulators (or
     * whose waits it cannot match to the groups they retire): correct, and slower than mma.sync */
    if (log && strstr(log, "C7514"))
        fail_msg("%s %s: ptxas serialised its wgmma instructions:\n%.2000s", p->name, ps, log);
    free(ps);
    free(src);
    free(cubin);
    free(log);
}

#endif
