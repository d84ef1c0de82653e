// emu_gen.h: the host version of gen.cuh's hardware section (src/gen/templates/gen.cuh: shared
// memory, cluster rank and barrier, DSMEM loads, loads of other blocks' partials) on the CUDA
// emulator of the softmax family's tests (tests/data/families/softmax/emu/emu_rt.h: threads as
// coroutines, barriers, shuffles, clusters run together), plus what generated kernels use that
// emu_rt.h does not have. tests/c/test_gen_ir_cuda.c includes it in the section's place.
#include <climits>

// The block's shared memory is the emulator's per-block static area, which starts as garbage.
#define KG_SHARED_ARRAY(name) unsigned char *name = emu.stat[emu.cur->rank]

static inline unsigned kg_cluster_rank() {
    return (unsigned)emu.cur->rank;
}
static inline void kg_cluster_sync() {
    emu_barrier(emu.ccount, emu.cgen, (int)(emu.block * emu.cluster));
}
template <class S> static inline S kg_dsmem(const S *local, unsigned rank) {
    size_t off = (size_t)((const unsigned char *)local - emu.stat[emu.cur->rank]);
    if (off + sizeof(S) > emu.static_bytes || rank >= emu.cluster)
        emu_fail("a DSMEM read outside the cluster's shared memory");
    S v;
    memcpy(&v, emu.stat[rank] + off, sizeof v);
    return v;
}
// Blocks of one launch run one after another here (clusters of one), so a partial written by an
// earlier block is simply there.
template <class S> static inline S kg_ld_partial(const S *p) {
    emu_aligned((const unsigned *)p);
    return *p;
}
static inline unsigned atomicAdd(unsigned *p, unsigned v) {
    unsigned old = *p;
    *p = old + v;
    return old;
}
static inline void __threadfence() {}
static inline float __bfloat162float(__nv_bfloat16 b) {
    return kiln_bf16_to_float(b.b);
}
static inline long long __shfl_xor_sync(unsigned mask, long long v, int o) {
    float half[2];
    memcpy(half, &v, sizeof v);
    half[0] = __shfl_xor_sync(mask, half[0], o);
    half[1] = __shfl_xor_sync(mask, half[1], o);
    memcpy(&v, half, sizeof v);
    return v;
}
