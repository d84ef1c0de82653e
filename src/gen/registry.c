/* registry.c: the list of built-in kernel families, in the order sweep and search try them. Each
 * family lives in its own file (src/gen/<name>.c) with its template in src/gen/templates/; the
 * tensor-expression generator (src/gen/ir/) comes last and competes wherever a hand-written
 * family matches too. A family is declared weak here so that the list holds exactly the families
 * linked in. */
#include "family.h"

#define FAMILY(sym) extern const kiln_family sym __attribute__((weak));
#define FAMILIES(X)                                                                                \
    X(kiln_family_softmax)                                                                         \
    X(kiln_family_rmsnorm)                                                                         \
    X(kiln_family_layernorm)                                                                       \
    X(kiln_family_groupnorm)                                                                       \
    X(kiln_family_batchnorm)                                                                       \
    X(kiln_family_pool)                                                                            \
    X(kiln_family_eltwise)                                                                         \
    X(kiln_family_attention)                                                                       \
    X(kiln_family_wgmma)                                                                           \
    X(kiln_family_cublaslt)                                                                        \
    X(kiln_family_gen)
FAMILIES(FAMILY)
#undef FAMILY

#define ADDRESS(sym) &sym,
static const kiln_family *const candidates[] = {FAMILIES(ADDRESS)};
#undef ADDRESS

int kiln_family_count(void) {
    int n = 0;
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++)
        n += candidates[i] != NULL;
    return n;
}

const kiln_family *kiln_family_at(int i) {
    for (size_t k = 0; k < sizeof candidates / sizeof candidates[0]; k++)
        if (candidates[k] && i-- == 0)
            return candidates[k];
    return NULL;
}
