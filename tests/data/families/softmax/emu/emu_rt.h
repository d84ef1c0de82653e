// emu_rt.h: a host emulator for CUDA kernels generated from src/gen/templates/softmax.cu, so that
// the kernels' logic (indexing, reductions, cluster exchanges, persistent loops, roundings) is
// proved on machines without a GPU. Every CUDA thread is a ucontext coroutine on one OS thread;
// __syncthreads, warp shuffles and cluster barriers are cooperative barriers; shared memory is per
// block and starts as garbage; dynamic shared memory ends against a PROT_NONE page; vector accesses
// must be aligned; a barrier that can never complete aborts with "deadlock". test_family_softmax.c
// includes this file (then emu_hw.h in place of the template's hardware section) into a candidate
// it compiles as C++ (emucc.sh) and runs on the cpu backend beside the family's own C emission.
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <functional>
#include <vector>

#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

struct uint2 {
    unsigned x, y;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct __nv_bfloat16 {
    uint16_t b;
};
struct __half {
    uint16_t b;
};
struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
struct __half2 {
    __half x, y;
};

// The conversions the template uses, with kiln_cpu.h's round-to-nearest-even.
static inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    return {kiln_float_to_bf16(f)};
}
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) {
    return b.b;
}
static inline __half __float2half_rn(float f) {
    return {kiln_float_to_f16(f)};
}
static inline unsigned short __half_as_ushort(__half h) {
    return h.b;
}
static inline __half __ushort_as_half(unsigned short u) {
    return {u};
}
static inline float __half2float(__half h) {
    return kiln_f16_to_float(h.b);
}
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
    return {__float2bfloat16_rn(a), __float2bfloat16_rn(b)};
}
static inline __half2 __floats2half2_rn(float a, float b) {
    return {__float2half_rn(a), __float2half_rn(b)};
}
static inline int64_t min(int64_t a, int64_t b) {
    return a < b ? a : b;
}
static inline int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

struct emu_thread {
    ucontext_t ctx;
    char *stack;
    int tid, block, rank; // thread in its block, block in the grid, block in its cluster
    bool done;
};

struct emu_state {
    unsigned grid, block, cluster;
    size_t smem, static_bytes;
    std::function<void()> kernel;
    std::vector<emu_thread> th;
    emu_thread *cur;
    ucontext_t main;
    std::vector<int> bcount, bgen, wcount, wgen; // barriers: per block, per warp of the cluster
    int ccount, cgen;                            // the cluster barrier
    std::vector<float> slots;                    // shuffle exchange, one per thread
    std::vector<unsigned char *> stat, dyn;      // shared memory per block of the cluster
    long events;                                 // barrier arrivals: progress, for deadlocks
};
static emu_state emu;

#define EMU_STACK (256 * 1024)

static inline void emu_fail(const char *what) {
    fprintf(stderr, "emu: %s (block %d thread %d)\n", what, emu.cur ? emu.cur->block : -1,
            emu.cur ? emu.cur->tid : -1);
    abort();
}

static inline void emu_yield() {
    swapcontext(&emu.cur->ctx, &emu.main);
}

static inline void emu_barrier(int &count, int &gen, int participants) {
    int g = gen;
    emu.events++;
    if (++count == participants) {
        count = 0;
        gen++;
        return;
    }
    while (gen == g)
        emu_yield();
}

struct emu_idx {
    unsigned x, y, z;
};
#define threadIdx (emu_idx{(unsigned)emu.cur->tid, 0, 0})
#define blockIdx (emu_idx{(unsigned)emu.cur->block, 0, 0})
#define gridDim (emu_idx{emu.grid, 1, 1})
#define blockDim (emu_idx{emu.block, 1, 1})

static inline void __syncthreads() {
    emu_barrier(emu.bcount[emu.cur->rank], emu.bgen[emu.cur->rank], (int)emu.block);
}

static inline float emu_shfl(float v, int src_lane) {
    int w = (emu.cur->rank * (int)emu.block + emu.cur->tid) / 32;
    emu.slots[(size_t)w * 32 + emu.cur->tid % 32] = v;
    emu_barrier(emu.wcount[w], emu.wgen[w], 32);
    float r = emu.slots[(size_t)w * 32 + src_lane];
    emu_barrier(emu.wcount[w], emu.wgen[w], 32);
    return r;
}
static inline float __shfl_xor_sync(unsigned mask, float v, int o) {
    if (mask != 0xffffffffu || o <= 0 || o >= 32)
        emu_fail("shuffle with a partial mask or a bad offset");
    return emu_shfl(v, (emu.cur->tid % 32) ^ o);
}
static inline float __shfl_sync(unsigned mask, float v, int src) {
    if (mask != 0xffffffffu || src < 0 || src >= 32)
        emu_fail("shuffle with a partial mask or a bad lane");
    return emu_shfl(v, src);
}

template <typename T> static inline void emu_aligned(const T *p) {
    if ((uintptr_t)p % sizeof(T) != 0)
        emu_fail("misaligned vector access");
}
template <typename T> static inline T __ldg(const T *p) {
    emu_aligned(p);
    return *p;
}
template <typename T> static inline T __ldcs(const T *p) {
    emu_aligned(p);
    return *p;
}
template <typename T> static inline void __stcs(T *p, T v) {
    emu_aligned(p);
    *p = v;
}

static void emu_entry() {
    emu.kernel();
    emu.cur->done = true;
    swapcontext(&emu.cur->ctx, &emu.main);
}

// Runs the grid one cluster at a time; the blocks of a cluster run together.
static void emu_launch(int64_t grid, int64_t block, int64_t cluster, int64_t smem,
                       size_t static_bytes, std::function<void()> k) {
    if (grid < 1 || block < 32 || block > 1024 || block % 32 || cluster < 1 || cluster > 16 ||
        grid % cluster)
        emu_fail("a launch geometry the hardware refuses");
    if (smem + (int64_t)static_bytes > 232448)
        emu_fail("more shared memory than a block gets");
    emu.grid = (unsigned)grid;
    emu.block = (unsigned)block;
    emu.cluster = (unsigned)cluster;
    emu.smem = (size_t)smem;
    emu.static_bytes = static_bytes;
    emu.kernel = k;
    size_t n = (size_t)(block * cluster);
    for (size_t i = emu.th.size(); i < n; i++) {
        emu.th.emplace_back();
        emu.th[i].stack = (char *)mmap(NULL, EMU_STACK, PROT_READ | PROT_WRITE,
                                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    }
    size_t up = ((size_t)smem + 4095) / 4096 * 4096;
    emu.stat.assign((size_t)cluster, nullptr);
    emu.dyn.assign((size_t)cluster, nullptr);
    for (int64_t c = 0; c < cluster; c++) {
        emu.stat[c] = (unsigned char *)aligned_alloc(64, (static_bytes + 63) / 64 * 64);
        unsigned char *base = (unsigned char *)mmap(NULL, up + 4096, PROT_READ | PROT_WRITE,
                                                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        mprotect(base + up, 4096, PROT_NONE); // reading past the dynamic shared memory faults
        emu.dyn[c] = base + up - (size_t)smem;
    }
    for (int64_t c0 = 0; c0 < grid; c0 += cluster) {
        for (int64_t c = 0; c < cluster; c++) {
            memset(emu.stat[c], 0xA7, static_bytes);
            memset(emu.dyn[c], 0xA7, (size_t)smem);
        }
        emu.bcount.assign((size_t)cluster, 0);
        emu.bgen.assign((size_t)cluster, 0);
        emu.wcount.assign(n / 32, 0);
        emu.wgen.assign(n / 32, 0);
        emu.ccount = emu.cgen = 0;
        emu.slots.assign(n, 0.0f);
        for (size_t i = 0; i < n; i++) {
            emu_thread &t = emu.th[i];
            t.tid = (int)(i % (size_t)block);
            t.rank = (int)(i / (size_t)block);
            t.block = (int)(c0 + t.rank);
            t.done = false;
            getcontext(&t.ctx);
            t.ctx.uc_stack.ss_sp = t.stack;
            t.ctx.uc_stack.ss_size = EMU_STACK;
            t.ctx.uc_link = NULL;
            makecontext(&t.ctx, emu_entry, 0);
        }
        size_t left = n;
        while (left) {
            long before = emu.events;
            size_t left_before = left;
            for (size_t i = 0; i < n; i++) {
                if (emu.th[i].done)
                    continue;
                emu.cur = &emu.th[i];
                swapcontext(&emu.main, &emu.th[i].ctx);
                if (emu.th[i].done)
                    left--;
            }
            if (left && emu.events == before && left == left_before)
                emu_fail("deadlock: threads wait at a barrier that can never complete");
        }
        emu.cur = nullptr;
    }
    for (int64_t c = 0; c < cluster; c++) {
        free(emu.stat[c]);
        munmap(emu.dyn[c] - (up - (size_t)smem), up + 4096);
    }
}
