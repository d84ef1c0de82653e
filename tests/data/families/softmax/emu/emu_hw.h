// emu_hw.h: the host versions of softmax.cu's hardware section (cp.async, ex2.approx, cluster rank
// and barrier, DSMEM loads, the shared-memory declarations), included in its place; see emu_rt.h.
template <int BYTES> inline void smx_stage(void *dst, const void *src) {
    const size_t a = BYTES > 16 ? 16 : BYTES;
    if ((uintptr_t)dst % a || (uintptr_t)src % a)
        emu_fail("misaligned cp.async");
    memcpy(dst, src, BYTES);
}
inline void smx_stage_wait() {}
inline float smx_exp2(float x) {
    return exp2f(x);
}
inline unsigned smx_cluster_rank() {
    return (unsigned)emu.cur->rank;
}
inline void smx_cluster_sync() {
    emu_barrier(emu.ccount, emu.cgen, (int)(emu.block * emu.cluster));
}
inline smx_pair smx_dsmem_pair(const smx_pair *local, unsigned rank) {
    size_t off = (size_t)((const unsigned char *)local - emu.stat[emu.cur->rank]);
    if (off + sizeof(smx_pair) > emu.static_bytes || rank >= emu.cluster)
        emu_fail("a DSMEM read outside the cluster's shared state");
    smx_pair v;
    memcpy(&v, emu.stat[rank] + off, sizeof v);
    return v;
}
inline smx_shared &smx_shared_state() {
    return *(smx_shared *)emu.stat[emu.cur->rank];
}
inline unsigned char *smx_dynamic_smem() {
    return emu.dyn[emu.cur->rank];
}
