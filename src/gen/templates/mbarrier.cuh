// mbarrier.cuh: shared-memory mbarriers (sm_90) for kiln's warp-specialised templates (the wgmma GEMM,
// attention's wgmma path): init, arrive, the arrive that fires once this thread's cp.async copies so far
// have landed (.noinc: it counts among the barrier's expected arrivals), and a wait on a phase's parity.
// The emitters write it before those templates; bar is a shared-window address.
__device__ __forceinline__ void kiln_mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void kiln_mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void kiln_mbar_cp_arrive(unsigned bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void kiln_mbar_wait(unsigned bar, unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
}
