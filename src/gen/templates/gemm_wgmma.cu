// gemm_wgmma.cu: the wgmma family's CUDA template: D = epilogue(A · Bᵀ) for sm_90a, A [M, K] and
// B [N, K] both K-major (a linear's input and weight), 16-bit or fp8 inputs (fp8: torch._scaled_mm,
// D = sa · sb · A·Bᵀ with one scale each or one a row of A and a column of B), fp32 accumulation in
// the tensor cores' asynchronous warpgroup MMA (wgmma), a batch of such products along blockIdx.z.
//
// The work. Block (x, 0, z) owns a GW_BM x GW_BN tile of D (x in grouped raster order: GW_GROUP
// row tiles share each column tile in turn, so that the B tiles they read stay in L2; with
// GW_PERSIST, tiles x, x + gridDim.x, ... of the whole batch). Its GW_WGS
// warpgroups own GW_MI tiles of 64 rows each; every warpgroup multiplies its rows by the block's
// whole B tile. The k axis goes by GW_BK elements (64 16-bit, 128 fp8): one 128-byte row of A and
// of B a tile row, copied by cp.async from global memory into one of GW_STAGES shared-memory
// stages, 16 bytes a copy, in
// the 128-byte swizzle the wgmma descriptors name (the 16-byte chunk c of row r goes to chunk
// c ^ (r % 8) of its row, rows 128 bytes apart, eight-row groups 1024 bytes apart: the "SBO").
// Two pipelines. GW_WS 0: every thread copies, GW_STAGES - 2 tiles ahead of the one the tensor
// cores read: at step kt, after the barrier, every warpgroup has waited for its MMAs of step
// kt - 2, so the stage they read is free for tile kt + GW_STAGES - 2 while the MMAs of steps
// kt - 1 and kt may still run (wgmma.wait_group 1). GW_WS 1: one thread of warpgroup 0 copies
// whole tiles with the TMA unit (cp.async.bulk.tensor through the tensor maps the candidate's
// `// kiln: tensormap` lines ask for, which write the same 128-byte swizzle), through a full and an
// empty mbarrier a stage, and the other warpgroups only multiply (optionally GW_PERSIST: a grid
// of SMs looping over the tiles). Per stage a consumer warpgroup issues 4 x GW_MI
// wgmma.m64nNk16 (k32 for fp8; N = GW_NW: GW_BN, or its half where the warpgroups split the
// columns), the descriptor's start address advanced by 32 bytes a step inside the swizzle atom.
//
// The epilogue reads the accumulators where wgmma leaves them (thread t of a warpgroup: rows
// 16 (t / 32) + (t % 32) / 4 and 8 below it, columns 8 j + 2 (t % 4) and the next), multiplies
// by the scales, adds the bias, applies the activation in the form captured and rounds once to D's
// dtype; with GW_EPI_SMEM it goes to D through shared memory in whole rows (gw_store_tile_smem),
// with GW_EPI_TMA through shared memory and D's tensor map by the TMA unit (gw_store_tile_tma).
// Rows past M and columns past N are neither read (zero-filled copies) nor written.
//
// Two more ways to share a tile (the TMA pipeline only): GW_SPLITN 1, the two consumer warpgroups
// split its columns, each multiplying all its rows (tiles up to 320 x 128 or 192 x 192, an A box
// at most 256 rows); GW_CL 2, clusters of two blocks take two row tiles of one column tile, each
// copying half of B's tile into both blocks by TMA multicast and releasing a stage in both.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

// ---- the point and the problem (the emitter writes these; the template compiles alone) ----
#ifndef GW_BN
#define GW_BN 128 // columns of a block's tile (the wgmma's N)
#endif
#ifndef GW_MI
#define GW_MI 1 // 64-row MMA tiles per warpgroup
#endif
#ifndef GW_WGS
#define GW_WGS 2 // warpgroups per block
#endif
#ifndef GW_STAGES
#define GW_STAGES 4 // shared-memory stages of GW_BK k
#endif
#ifndef GW_GROUP
#define GW_GROUP 8 // row tiles per raster group
#endif
#ifndef GW_WS
#define GW_WS 1 // 1: a producer warpgroup copies, the others only multiply
#endif
#ifndef GW_PERSIST
#define GW_PERSIST 0 // 1: gridDim.x blocks loop over the tiles (warp-specialised only)
#endif
#ifndef GW_PP
#define GW_PP 0 // 1: each consumer warpgroup owns whole tiles, in turn ("ping-pong"; persistent only)
#endif
#ifndef GW_SPLITN
#define GW_SPLITN 0 // 1: the consumer warpgroups split a tile's columns (each all its rows)
#endif
#ifndef GW_EPI_SMEM
#define GW_EPI_SMEM 0 // 1: the epilogue goes through shared memory, stored in whole rows
#endif
#ifndef GW_EPI_TMA
#define GW_EPI_TMA 0 // 1: the epilogue's chunks go to D by the TMA unit, not waited for
#endif
#ifndef GW_GATED
#define GW_GATED 0 // 1: a gated pair: B's tile is the gate's rows, then the up projection's
#endif
#ifndef GW_CL
#define GW_CL 1 // blocks a cluster: 2 take two row tiles and share B's tile by TMA multicast
#endif
#ifndef GW_BATCH
#define GW_BATCH 1
#endif
#ifndef GW_PROMOTE
#define GW_PROMOTE 0 // fp8: each stage's products summed apart, then added in fp32 (gw_retire)
#endif
#ifndef GW_SCALE
#define GW_SCALE 0 // fp8 (_scaled_mm): 1 a float32 scale each for A and B, 2 a row's and a column's
#endif
#ifndef GW_T
#define GW_T __nv_bfloat16 // A's and B's element
#define GW_TD __nv_bfloat16 // D's element
#define GW_TB __nv_bfloat16 // the bias's element
#define GW_M 256
#define GW_N 256
#define GW_K 256
#define GW_LDA 256
#define GW_LDB 256
#define GW_LDD 256
#define GW_SA 0 // batch strides in elements (0: shared by the batch)
#define GW_SB 0
#define GW_SD 0
#define GW_BIAS 0
#define GW_ACT 0 // 0 none, 1 ReLU, 2 GELU (tanh), 3 GELU (erf)
#define GW_D_F32 0
#define GW_D_F16 0
#define GW_MMA_SUPPLIED 0
#endif

#define GW_BK (128 / (int)sizeof(GW_T)) // k a stage: one 128-byte row of A and of B a tile row
#define GW_VEC (16 / (int)sizeof(GW_T)) // elements a 16-byte copy
#define GW_BM (64 * GW_MI * (GW_PP || GW_SPLITN ? 1 : GW_WGS)) // rows of a tile
#define GW_NW (GW_BN / (GW_SPLITN ? GW_WGS : 1)) // a warpgroup's columns (the wgmma's N)
#define GW_A_BOX (GW_BM > 256 ? GW_BM / 2 : GW_BM) // rows of A a TMA box (at most 256)
#define GW_BNO (GW_GATED ? GW_BN / 2 : GW_BN) // columns of D a tile writes
#define GW_NWO (GW_GATED ? GW_NW / 2 : GW_NW) // columns of D a warpgroup writes
static_assert(!GW_PP || (GW_WS && GW_PERSIST), "ping-pong consumers take turns in a persistent grid");
static_assert(GW_CL == 1 || (GW_CL == 2 && GW_WS), "clusters share B through the TMA pipeline");
static_assert(!GW_SPLITN || (GW_WGS == 2 && !GW_PP), "two warpgroups split a tile's columns");
static_assert(!GW_EPI_SMEM || GW_WS, "the staged epilogue's buffers follow the TMA pipeline's");
static_assert(!GW_EPI_TMA || (GW_WS && !GW_EPI_SMEM && !GW_D_F32),
              "the TMA-stored epilogue: the TMA pipeline, 16-bit D, instead of GW_EPI_SMEM");
static_assert(!GW_GATED || (GW_WS && !GW_SPLITN && GW_CL == 1),
              "a gated pair: B's two parts by TMA, every column of a row in one thread");
#define GW_THREADS (128 * (GW_WGS + GW_WS))
#define GW_COPIERS GW_THREADS // threads that copy (GW_WS 0)
#define GW_A_BYTES (GW_BM * 128)
#define GW_B_BYTES (GW_BN * 128)
#define GW_STAGE_BYTES (GW_A_BYTES + GW_B_BYTES)
#define GW_ACC (GW_NW / 2)
#define GW_UM (GW_BM * GW_CL) // rows of a cluster's unit of work: its blocks' row tiles
#define GW_TILES_M ((GW_M + GW_UM - 1) / GW_UM) // units along M
#define GW_B_PART (GW_BN / GW_CL * 128) // bytes of B's tile a block copies (into every block)
#define GW_TILES_N ((GW_N + GW_BNO - 1) / GW_BNO)
#define GW_KT ((GW_K + GW_BK - 1) / GW_BK)
#define GW_A_COPIES (GW_BM * 8 / GW_COPIERS) // 16-byte copies a thread makes of a stage's A
#define GW_B_COPIES (GW_BN * 8 / GW_COPIERS)

static_assert(GW_STAGES >= 3, "copies run GW_STAGES - 2 tiles ahead");
static_assert(GW_WS || (GW_BM * 8 % GW_COPIERS == 0 && GW_BN * 8 % GW_COPIERS == 0),
              "every thread makes the same number of copies");

#if !GW_MMA_SUPPLIED
// D[64 x GW_NW] += A[64 x 16] · B[GW_NW x 16]ᵀ for a bf16 tile of GW_NW 128 (32 k for fp8; the
// emitter writes this function for the point's N and dtype; this one lets the template compile
// alone).
__device__ __forceinline__ void gw_mma(float *d, uint64_t da, uint64_t db, int scale_d);
#endif

__device__ __forceinline__ uint32_t gw_smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

// The descriptor of a K-major operand at shared address addr (1024-aligned stage plus k steps
// of 32 bytes): start address >> 4, leading offset unused by swizzled K-major layouts (1), stride
// offset 1024 bytes (eight 128-byte rows) >> 4, base offset 0, 128-byte swizzle (1 in bits 62-63).
__device__ __forceinline__ uint64_t gw_desc(uint32_t addr) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) |
           ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}

__device__ __forceinline__ void gw_copy16(uint32_t dst, const void *src, uint32_t bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void gw_fence_acc(float *d) {
#pragma unroll
    for (int i = 0; i < GW_ACC; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}

__device__ __forceinline__ float gw_act(float v) {
#if GW_ACT == 1
    return v < 0.0f ? 0.0f : v;
#elif GW_ACT == 2 && (GW_D_F32 || GW_D_F16)
    return 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
#elif GW_ACT == 2
    // a bfloat16 D: the hardware's tanh, one instruction where tanhf takes about twenty. Its
    // relative error (about 2^-11, PTX ISA) moves the result by at most about 2^-12 |v|, under
    // bfloat16's rounding for the values a GEMM gives (the gate proves every candidate; the H200's
    // proofs passed, bench/RESULTS.md); float16's and float32's tighter tolerances keep tanhf.
    float th;
    asm("tanh.approx.f32 %0, %1;" : "=f"(th) : "f"(0.7978845608f * (v + 0.044715f * v * v * v)));
    return 0.5f * v * (1.0f + th);
#elif GW_ACT == 3
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
#elif GW_ACT == 4
    return v / (1.0f + __expf(-v)); // SiLU (gated pairs only)
#else
    return v;
#endif
}

__device__ __forceinline__ void gw_store2(GW_TD *d, float v0, float v1) {
#if GW_D_F32
    *reinterpret_cast<float2 *>(d) = make_float2(v0, v1);
#elif GW_D_F16
    *reinterpret_cast<__half2 *>(d) = __floats2half2_rn(v0, v1);
#else
    *reinterpret_cast<__nv_bfloat162 *>(d) = __floats2bfloat162_rn(v0, v1);
#endif
}

// The scales of _scaled_mm (GW_SCALE) of a thread's rows row and row + 8 and of its columns col and
// col + 1: an element's scale is its row's times its column's. Per row (2): A's row's and B's
// column's values (0 past the ends); per tensor (1): the one product every element shares (s0, read
// once) for the rows, 1 for the columns; without scales 1 (the multiplications fold away).
__device__ __forceinline__ float2 gw_row_scales(const float *sa, int64_t row, float s0) {
#if GW_SCALE == 2
    (void)s0;
    return make_float2(row < GW_M ? __ldg(sa + row) : 0.0f,
                       row + 8 < GW_M ? __ldg(sa + row + 8) : 0.0f);
#else
    (void)sa;
    (void)row;
    return make_float2(s0, s0);
#endif
}

__device__ __forceinline__ float2 gw_col_scales(const float *sb, int64_t col) {
#if GW_SCALE == 2
    return make_float2(col < GW_N ? __ldg(sb + col) : 0.0f,
                       col + 1 < GW_N ? __ldg(sb + col + 1) : 0.0f);
#else
    (void)sb;
    (void)col;
    return make_float2(1.0f, 1.0f);
#endif
}

__device__ __forceinline__ float gw_bias_at(const GW_TB *bias, int64_t col) {
#if GW_BIAS
    return (float)bias[col];
#else
    (void)bias;
    (void)col;
    return 0.0f;
#endif
}

// The tensor maps of A and B (`// kiln: tensormap` lines: boxes of GW_BK k by the tile's rows,
// 128-byte swizzle; rank 3 where the batch has its own matrices) and the TMA copy of one box into
// shared memory, completing on an mbarrier's transaction count (rows past M or N and k past K read
// as 0).
#ifndef GW_TMAP_SUPPLIED
struct __align__(64) kiln_tensormap {
    unsigned long long bits[16];
};
#endif
#define GW_A3 (GW_BATCH > 1 && GW_SA != 0)
#define GW_B3 (GW_BATCH > 1 && GW_SB != 0)

__device__ __forceinline__ void gw_tma(uint32_t dst, const kiln_tensormap *map, int k, int row,
                                       int z, bool rank3, uint32_t bar) {
    if (rank3)
        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
                     "l"(map), "r"(k), "r"(row), "r"(z), "r"(bar)
                     : "memory");
    else
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
                     "l"(map), "r"(k), "r"(row), "r"(bar)
                     : "memory");
}

// B's part of a tile, with clusters (GW_CL 2): the block's GW_BN / 2 rows, written by the copy
// engine into the same place of both blocks' stage and counted on both blocks' full barriers.
__device__ __forceinline__ void gw_tma_b(uint32_t dst, const kiln_tensormap *map, int k, int row,
                                         int z, bool rank3, uint32_t bar) {
#if GW_CL > 1
    const unsigned short both = (unsigned short)((1u << GW_CL) - 1);
    if (rank3)
        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                     ".multicast::cluster [%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(dst),
                     "l"(map), "r"(k), "r"(row), "r"(z), "r"(bar), "h"(both)
                     : "memory");
    else
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                     ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
                     "l"(map), "r"(k), "r"(row), "r"(bar), "h"(both)
                     : "memory");
#else
    gw_tma(dst, map, k, row, z, rank3, bar);
#endif
}

// The block's rank in its cluster (0 without clusters).
__device__ __forceinline__ int gw_rank() {
#if GW_CL > 1
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return (int)r;
#else
    return 0;
#endif
}

// Every thread of the cluster that has not exited (nothing without clusters).
__device__ __forceinline__ void gw_cluster_sync() {
#if GW_CL > 1
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
#endif
}

// A consumer warp frees a stage: lane 0 arrives on its block's empty barrier and, with clusters,
// lane 1 on the other block's (whose producer writes half of B into this block's stage too). That
// remote arrive has the default semantics (release at CTA scope): with .release.cluster each one
// waited on a round trip and clusters ran 1.3-2.3x slower than single blocks on the H200
// (bench/RESULTS.md, fourteenth and twenty-second sessions); the wgmma reads it orders are this
// block's own, complete at wgmma.wait_group.
__device__ __forceinline__ void gw_release(uint32_t bar, int lane) {
    if (lane == 0)
        kiln_mbar_arrive(bar);
#if GW_CL > 1
    if (lane == 1) {
        uint32_t other;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
                     : "=r"(other)
                     : "r"(bar), "r"(gw_rank() ^ 1));
        asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(other) : "memory");
    }
#endif
}

// The 4 x GW_MI MMAs of the stage at shared address stage for the warpgroup with part `part` of
// the tile: its 64 x GW_MI rows (GW_SPLITN 0) or its GW_NW columns (GW_SPLITN 1).
// keep 0: the stage's first MMA overwrites the accumulators (scale-d 0) instead of adding to them.
__device__ __forceinline__ void gw_mma_stage(float (&acc)[GW_MI][GW_ACC], uint32_t stage, int part,
                                             int keep) {
    const uint64_t da = gw_desc(stage + (GW_SPLITN ? 0u : (uint32_t)part * GW_MI * 64 * 128));
    const uint32_t b_part = GW_SPLITN ? (uint32_t)part * GW_NW * 128 : 0u;
    const uint64_t db = gw_desc(stage + GW_A_BYTES + b_part);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < 4; kk++) { // 32 bytes of k a step: k16 (16-bit), k32 (fp8)
#pragma unroll
        for (int i = 0; i < GW_MI; i++)
            gw_mma(acc[i], da + (uint64_t)(i * 64 * 128 / 16 + kk * 2), db + (uint64_t)(kk * 2),
                   kk > 0 || keep);
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// A stage's MMAs are issued (gw_issue), then retired (gw_retire): the wait after which the stage
// before it may be refilled (wait_group 1: this stage's MMAs may still run). GW_PROMOTE (fp8
// without fast accumulation, torch._scaled_mm's default): the tensor cores add fp8 products to the
// accumulator in fewer bits than fp32 (about 14, DeepSeek-V3's measurement), an error that grows
// with K; so each stage's products (128 k) go into a second set of accumulators, started from
// zero, and are added to the first in fp32 once those MMAs are done (wait_group 0).
#define GW_ACC2 (GW_PROMOTE ? GW_ACC : 1)
__device__ __forceinline__ void gw_issue(float (&acc)[GW_MI][GW_ACC],
                                         float (&part_acc)[GW_MI][GW_ACC2], uint32_t stage,
                                         int part) {
#if GW_PROMOTE
    (void)acc;
    gw_mma_stage(part_acc, stage, part, 0);
#else
    (void)part_acc;
    gw_mma_stage(acc, stage, part, 1);
#endif
}

__device__ __forceinline__ void gw_retire(float (&acc)[GW_MI][GW_ACC],
                                          float (&part_acc)[GW_MI][GW_ACC2]) {
#if GW_PROMOTE
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
    for (int i = 0; i < GW_MI; i++) {
        gw_fence_acc(part_acc[i]);
#pragma unroll
        for (int j = 0; j < GW_ACC; j++)
            acc[i][j] += part_acc[i][j];
    }
#else
    (void)acc;
    (void)part_acc;
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
#endif
}

// Unit idx of the batch's units (grouped raster within one matrix of the batch; a unit is a
// cluster's GW_CL row tiles of one column tile, a tile where GW_CL is 1): the first row of block
// rank's tile in it, its first column and matrix.
__device__ __forceinline__ void gw_tile(int idx, int rank, int64_t &m0, int64_t &n0, int &z) {
    const int per = GW_TILES_M * GW_TILES_N, pid = idx % per;
    z = idx / per;
    const int in_group = GW_GROUP * GW_TILES_N;
    const int first_m = pid / in_group * GW_GROUP;
    const int group_m = GW_TILES_M - first_m < GW_GROUP ? GW_TILES_M - first_m : GW_GROUP;
    m0 = (int64_t)(first_m + (pid % in_group) % group_m) * GW_UM + (int64_t)rank * GW_BM;
    n0 = (int64_t)((pid % in_group) / group_m) * GW_BNO;
}

__device__ __forceinline__ void gw_zero(float (&acc)[GW_MI][GW_ACC]) {
#pragma unroll
    for (int i = 0; i < GW_MI; i++) {
#pragma unroll
        for (int j = 0; j < GW_ACC; j++)
            acc[i][j] = 0.0f;
        gw_fence_acc(acc[i]);
    }
}

// D's value at accumulator j's element e (thread t's columns 8 j + 2 (t % 4) and the next, rows
// 16 (t / 32) + (t % 32) / 4 and 8 below): the epilogue on the scaled accumulator plus the column's
// bias, or for a gated pair the activation of the gate's accumulator times the up projection's,
// which holds the same column GW_NW / 2 columns further (the second half of B's tile).
__device__ __forceinline__ float gw_val(const float *acc, int j, int e, float scale, float bias) {
#if GW_GATED
    (void)bias;
    (void)scale;
    return gw_act(acc[4 * j + e]) * acc[4 * (j + GW_NW / 16) + e];
#else
    return gw_act(acc[4 * j + e] * scale + bias);
#endif
}

// The first row and column of D of part `part` of the tile at (m0, n0): its 64 x GW_MI rows or its
// GW_NW columns (gw_mma_stage).
__device__ __forceinline__ void gw_part_origin(int part, int64_t &m0, int64_t &n0) {
    if (GW_SPLITN)
        n0 += (int64_t)part * GW_NW;
    else
        m0 += (int64_t)part * GW_MI * 64;
}

// The epilogue of the warpgroup with part `part` of the tile at (m0, n0) of D (gw_mma_stage).
__device__ __forceinline__ void gw_store_tile(float (&acc)[GW_MI][GW_ACC], const GW_TB *bias,
                                              const float *sa, const float *sb, float s0,
                                              GW_TD *d, int64_t m0, int64_t n0, int part, int t) {
    const int warp = t / 32, lane = t % 32;
    gw_part_origin(part, m0, n0);
#pragma unroll
    for (int j = 0; j < GW_NWO / 8; j++) {
        const int64_t col = n0 + j * 8 + (lane % 4) * 2;
        if (col >= GW_N)
            continue;
        const float b0 = gw_bias_at(bias, col), b1 = gw_bias_at(bias, col + 1);
        const float2 cs = gw_col_scales(sb, col);
#pragma unroll
        for (int i = 0; i < GW_MI; i++) {
            const int64_t row = m0 + i * 64 + warp * 16 + lane / 4;
            const float2 rs = gw_row_scales(sa, row, s0);
            if (row < GW_M)
                gw_store2(d + row * GW_LDD + col, gw_val(acc[i], j, 0, rs.x * cs.x, b0),
                          gw_val(acc[i], j, 1, rs.x * cs.y, b1));
            if (row + 8 < GW_M)
                gw_store2(d + (row + 8) * GW_LDD + col, gw_val(acc[i], j, 2, rs.y * cs.x, b0),
                          gw_val(acc[i], j, 3, rs.y * cs.y, b1));
        }
    }
}

// The staged epilogue (GW_EPI_SMEM): the warpgroup's part of the tile goes through its own
// shared-memory buffer in chunks of 64 rows by GW_CH columns (a 128- or 64-byte row each, rows
// GW_EPI_PITCH bytes apart so that the accumulators' pairs land on distinct banks), then to D in
// whole rows, 16 bytes a thread. Stored straight from the accumulators, each warp store touches
// eight rows of 16 bytes; staged, a row of a chunk is one coalesced request (the H200: the direct
// epilogue cost 50 of the gate/up projection's 264 us, bench/RESULTS.md). Named barrier `bar` (3 +
// the consumer warpgroup) orders the warpgroup's writes and reads of its buffer. D's rows and N are
// whole 16-byte stores (the emitter's condition), so a store is either inside D or past N whole.
#define GW_DB ((int)sizeof(GW_TD))
#define GW_CH ((GW_NWO * GW_DB) % 128 == 0 ? 128 / GW_DB : 64 / GW_DB) // columns a chunk
#define GW_EPI_PITCH (GW_CH * GW_DB + 16)
#define GW_EPI_BYTES (64 * GW_EPI_PITCH) // a warpgroup's buffer
__device__ __forceinline__ void gw_store_tile_smem(float (&acc)[GW_MI][GW_ACC], const GW_TB *bias,
                                                   const float *sa, const float *sb, float s0,
                                                   GW_TD *d, int64_t m0, int64_t n0, int part,
                                                   int t, uint8_t *buf, int bar) {
    const int warp = t / 32, lane = t % 32;
    gw_part_origin(part, m0, n0);
    constexpr int vec = 16 / GW_DB, per_row = GW_CH / vec, rows_a_pass = 128 / per_row;
#pragma unroll
    for (int i = 0; i < GW_MI; i++) {
        const float2 rs = gw_row_scales(sa, m0 + i * 64 + warp * 16 + lane / 4, s0);
#pragma unroll
        for (int c0 = 0; c0 < GW_NWO; c0 += GW_CH) {
            asm volatile("bar.sync %0, 128;\n" ::"r"(bar) : "memory"); // the buffer is free
#pragma unroll
            for (int j = c0 / 8; j < (c0 + GW_CH) / 8; j++) {
                const int cl = j * 8 - c0 + (lane % 4) * 2, r = warp * 16 + lane / 4;
                const int64_t col = n0 + j * 8 + (lane % 4) * 2;
                const float b0 = col < GW_N ? gw_bias_at(bias, col) : 0.0f;
                const float b1 = col < GW_N ? gw_bias_at(bias, col + 1) : 0.0f;
                const float2 cs = gw_col_scales(sb, col);
                gw_store2(reinterpret_cast<GW_TD *>(buf + r * GW_EPI_PITCH) + cl,
                          gw_val(acc[i], j, 0, rs.x * cs.x, b0),
                          gw_val(acc[i], j, 1, rs.x * cs.y, b1));
                gw_store2(reinterpret_cast<GW_TD *>(buf + (r + 8) * GW_EPI_PITCH) + cl,
                          gw_val(acc[i], j, 2, rs.y * cs.x, b0),
                          gw_val(acc[i], j, 3, rs.y * cs.y, b1));
            }
            asm volatile("bar.sync %0, 128;\n" ::"r"(bar) : "memory"); // the chunk is written
#pragma unroll
            for (int r = t / per_row; r < 64; r += rows_a_pass) {
                const int v = t % per_row;
                const int64_t row = m0 + i * 64 + r, col = n0 + c0 + v * vec;
                if (row < GW_M && col < GW_N)
                    *reinterpret_cast<uint4 *>(d + row * GW_LDD + col) =
                        *reinterpret_cast<const uint4 *>(buf + r * GW_EPI_PITCH + v * 16);
            }
        }
    }
}

// The TMA-stored epilogue (GW_EPI_TMA): as the staged one, 64 rows by 64 columns (128 bytes) at a
// time through shared memory, but each chunk is written in the 128-byte swizzle D's tensor map
// names (the 16-byte piece c of row r at piece c ^ (r % 8), rows 128 bytes apart: a warp's pairs
// fall on 32 distinct banks, no padding) and stored by one thread's cp.async.bulk.tensor, which the
// warpgroup does not wait for: it fills its other buffer meanwhile, and after the tile's last chunk
// goes on to its next tile's MMAs while the copy engine writes D (the staged epilogue's stores held
// the warpgroup: 13-16 us of the gate/up projection's 227 on the H200, bench/RESULTS.md). A buffer
// is refilled once the store from it has read it (wait_group.read 1: the other buffer's store may
// still run); *chunks counts the warpgroup's chunks (its buffer parity). The copy engine clips rows
// past M and columns past N.
#define GW_EPI_CHUNK 8192 // a buffer: 64 rows of 128 bytes
#if GW_EPI_TMA
__device__ __forceinline__ void gw_tma_store(const kiln_tensormap *map, uint32_t src, int col,
                                             int row, int z) {
    if (GW_BATCH > 1 && GW_SD != 0)
        asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], "
                     "[%4];\n" ::"l"(map),
                     "r"(col), "r"(row), "r"(z), "r"(src)
                     : "memory");
    else
        asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], "
                     "[%3];\n" ::"l"(map),
                     "r"(col), "r"(row), "r"(src)
                     : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

__device__ __forceinline__ void gw_store_tile_tma(float (&acc)[GW_MI][GW_ACC], const GW_TB *bias,
                                                  const float *sa, const float *sb, float s0,
                                                  const kiln_tensormap *map, int64_t m0,
                                                  int64_t n0, int z, int part, int t,
                                                  uint8_t *buf, int bar, int &chunks) {
    const int warp = t / 32, lane = t % 32, r = warp * 16 + lane / 4;
    static_assert((GW_NWO * GW_DB) % 128 == 0, "whole 128-byte chunks of D's columns");
    constexpr int cols = 128 / GW_DB; // a chunk's columns
    gw_part_origin(part, m0, n0);
#pragma unroll
    for (int i = 0; i < GW_MI; i++) {
        const float2 rs = gw_row_scales(sa, m0 + i * 64 + r, s0);
#pragma unroll
        for (int c0 = 0; c0 < GW_NWO; c0 += cols, chunks++) {
            uint8_t *cb = buf + (chunks & 1) * GW_EPI_CHUNK;
            if (t == 0) // the store that last read this buffer is done reading it
                asm volatile("cp.async.bulk.wait_group.read 1;\n" ::: "memory");
            asm volatile("bar.sync %0, 128;\n" ::"r"(bar) : "memory");
#pragma unroll
            for (int j = c0 / 8; j < (c0 + cols) / 8; j++) {
                const int64_t col = n0 + j * 8 + (lane % 4) * 2;
                const float b0 = col < GW_N ? gw_bias_at(bias, col) : 0.0f;
                const float b1 = col < GW_N ? gw_bias_at(bias, col + 1) : 0.0f;
                const float2 cs = gw_col_scales(sb, col);
                // 16-byte piece j - c0 / 8 of rows r and r + 8 (the same r % 8), its pair's 4 bytes
                const int off = (((j - c0 / 8) ^ (r % 8)) << 4) + (lane % 4) * 4;
                gw_store2(reinterpret_cast<GW_TD *>(cb + r * 128 + off),
                          gw_val(acc[i], j, 0, rs.x * cs.x, b0),
                          gw_val(acc[i], j, 1, rs.x * cs.y, b1));
                gw_store2(reinterpret_cast<GW_TD *>(cb + (r + 8) * 128 + off),
                          gw_val(acc[i], j, 2, rs.y * cs.x, b0),
                          gw_val(acc[i], j, 3, rs.y * cs.y, b1));
            }
            // the writes, made by the generic proxy, are seen by the copy engine's (async proxy)
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            asm volatile("bar.sync %0, 128;\n" ::"r"(bar) : "memory");
            if (t == 0)
                gw_tma_store(map, gw_smem_addr(cb), (int)(n0 + c0), (int)(m0 + i * 64), z);
        }
    }
}
#endif

__device__ __forceinline__ void gw_gemm(const GW_T *__restrict__ a, const GW_T *__restrict__ b,
                                        const GW_TB *__restrict__ bias, const float *sa,
                                        const float *sb, GW_TD *__restrict__ d,
                                        const kiln_tensormap *tma, const kiln_tensormap *tmb,
                                        const kiln_tensormap *tmb2, const kiln_tensormap *tmd) {
    extern __shared__ uint8_t gw_buf[];
    const uint32_t base = (gw_smem_addr(gw_buf) + 1023u) & ~1023u;
    const int tid = threadIdx.x, wg = tid / 128, t = tid % 128;
#if GW_SCALE == 1
    const float s0 = __ldg(sa) * __ldg(sb); // one scale for every element
#else
    const float s0 = 1.0f;
#endif
    float acc[GW_MI][GW_ACC], part_acc[GW_MI][GW_ACC2];
    int64_t m0, n0;
    int z;
#if GW_WS
    // Warpgroup 0 copies: one thread issues the TMA copies, GW_STAGES tiles ahead; the others
    // multiply. full[s] completes when both boxes of stage s have landed (the producer's arrive with
    // the stage's bytes as its transaction count), empty[s] when every consumer warp has seen its
    // MMAs of the stage complete. With GW_PERSIST the block loops over tiles and the step count it
    // runs on (and the stages' phases) goes on across them: the producer copies the next tile's
    // first stages while the consumers store this one. With clusters (GW_CL 2) the two blocks take
    // the two row tiles of a unit and each copies its A and half of B's tile, the latter into both
    // blocks: a stage's full barrier then counts the other block's copy too, and its empty barrier
    // the other block's consumer warps, which must be done with the stage before it is refilled.
    (void)a;
    (void)b;
    const uint32_t full = base + GW_STAGES * GW_STAGE_BYTES, empty = full + 8 * GW_STAGES;
    const uint32_t epi = empty + 8 * GW_STAGES; // the staged epilogue's buffers (16-byte aligned)
    const int rank = gw_rank();
    if (tid == 0) {
        for (int s = 0; s < GW_STAGES; s++) {
            kiln_mbar_init(full + 8 * s, 1);
            kiln_mbar_init(empty + 8 * s, (GW_PP ? 4 : 4 * GW_WGS) * GW_CL); // the consuming warps
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
#if GW_CL > 1
    gw_cluster_sync(); // the other block's barriers exist before anything arrives on them
#else
    __syncthreads();
#endif
#if GW_PERSIST
    const int first = blockIdx.x / GW_CL, step = gridDim.x / GW_CL,
              tiles = GW_TILES_M * GW_TILES_N * GW_BATCH;
#else
    const int first = blockIdx.x / GW_CL + blockIdx.z * GW_TILES_M * GW_TILES_N, step = 1 << 30,
              tiles = first + 1;
#endif
    if (wg == 0) {
#if GW_WGS > 1
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
#endif
        if (t != 0)
            return;
        asm volatile("prefetch.tensormap [%0];\n" ::"l"(tma) : "memory");
        asm volatile("prefetch.tensormap [%0];\n" ::"l"(tmb) : "memory");
        if (GW_GATED)
            asm volatile("prefetch.tensormap [%0];\n" ::"l"(tmb2) : "memory");
        int it = 0;
        for (int tile = first; tile < tiles; tile += step) {
            gw_tile(tile, rank, m0, n0, z);
            for (int kt = 0; kt < GW_KT; kt++, it++) {
                const int s = it % GW_STAGES;
                const uint32_t stage = base + (uint32_t)s * GW_STAGE_BYTES;
                kiln_mbar_wait(empty + 8 * s, ((it / GW_STAGES) & 1) ^ 1);
                asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                                 full + 8 * s),
                             "r"(GW_STAGE_BYTES)
                             : "memory");
#pragma unroll
                for (int r = 0; r < GW_BM; r += GW_A_BOX) // a box has at most 256 rows
                    gw_tma(stage + (uint32_t)r * 128, tma, kt * GW_BK, (int)m0 + r, z, GW_A3,
                           full + 8 * s);
#if GW_GATED // the gate's rows, then the up projection's, for the tile's columns of D
                gw_tma(stage + GW_A_BYTES, tmb, kt * GW_BK, (int)n0, z, GW_B3, full + 8 * s);
                gw_tma(stage + GW_A_BYTES + GW_BN / 2 * 128, tmb2, kt * GW_BK, (int)n0, z, GW_B3,
                       full + 8 * s);
#else
                gw_tma_b(stage + GW_A_BYTES + (uint32_t)rank * GW_B_PART, tmb, kt * GW_BK,
                         (int)n0 + rank * (GW_BN / GW_CL), z, GW_B3, full + 8 * s);
#endif
            }
        }
        return;
    }
#if GW_WGS > 1
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
#endif
    // The block's tiles are first, first + step, ...: tile i's k steps are steps i x GW_KT ... of the
    // stage ring. Cooperative consumers share every tile (each its 64 x GW_MI rows); ping-pong ones
    // take turns, warpgroup cw the tiles i = cw, cw + GW_WGS, ..., so that one's epilogue runs under
    // the other's MMAs.
    const int cw = wg - 1, di = GW_PP ? GW_WGS : 1, part = GW_PP ? 0 : cw;
#if GW_EPI_TMA
    // the TMA-stored epilogue's two buffers a consumer warpgroup, 1024-aligned (the swizzle's span)
    uint8_t *const epi_buf =
        gw_buf + (((epi + 1023u) & ~1023u) - gw_smem_addr(gw_buf)) + cw * 2 * GW_EPI_CHUNK;
    int chunks = 0;
#else
    (void)tmd;
#endif
    for (int i = GW_PP ? cw : 0, tile = first + i * step; tile < tiles; i += di, tile += di * step) {
        int it = i * GW_KT;
        gw_tile(tile, rank, m0, n0, z);
        gw_zero(acc);
#if GW_PP
        // A stage's full barrier tells phases apart by parity only: a warpgroup may wait on tile i's
        // stages only once the other has waited on all of tile i - 1's (named barrier 1 + cw).
        if (i > 0)
            asm volatile("bar.sync %0, 256;\n" ::"r"(1 + cw) : "memory");
#endif
        for (int kt = 0; kt < GW_KT; kt++, it++) {
            const int s = it % GW_STAGES;
            kiln_mbar_wait(full + 8 * s, (it / GW_STAGES) & 1);
            gw_issue(acc, part_acc, base + (uint32_t)s * GW_STAGE_BYTES, part);
            gw_retire(acc, part_acc);
            if (kt > 0)
                gw_release(empty + 8 * ((it - 1) % GW_STAGES), t % 32);
        }
#if GW_PP
        if (tile + step < tiles) // tile i + 1 is the other warpgroup's: it may start
            asm volatile("bar.arrive %0, 256;\n" ::"r"(2 - cw) : "memory");
#endif
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        gw_release(empty + 8 * ((it - 1) % GW_STAGES), t % 32);
#pragma unroll
        for (int r = 0; r < GW_MI; r++)
            gw_fence_acc(acc[r]);
#if GW_EPI_TMA
        (void)d;
        gw_store_tile_tma(acc, bias, sa, sb, s0, tmd, m0, n0, z, part, t, epi_buf, 3 + cw, chunks);
#elif GW_EPI_SMEM
        gw_store_tile_smem(acc, bias, sa, sb, s0, d + (int64_t)z * GW_SD, m0, n0, part, t,
                           gw_buf + (epi - gw_smem_addr(gw_buf)) + (uint32_t)cw * GW_EPI_BYTES,
                           3 + cw);
#else
        gw_store_tile(acc, bias, sa, sb, s0, d + (int64_t)z * GW_SD, m0, n0, part, t);
#endif
    }
#if GW_EPI_TMA
    if (t == 0) // the block's shared memory stays until the last store has read it
        asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
#endif
    gw_cluster_sync(); // the other block's last arrivals on this block's barriers are in
#else
    // Every thread copies, GW_STAGES - 2 tiles ahead (see the top of the file). The rows a thread
    // copies are fixed for every k tile: their addresses are computed once (gw_load's per-copy
    // address arithmetic cost 10-25 % here on the H200, bench/RESULTS.md).
    (void)tma;
    (void)tmb;
    (void)tmb2;
    (void)tmd;
    gw_tile(blockIdx.x + blockIdx.z * GW_TILES_M * GW_TILES_N, 0, m0, n0, z);
    a += (int64_t)z * GW_SA;
    b += (int64_t)z * GW_SB;
    const int ch = tid % 8;
    const GW_T *a_src[GW_A_COPIES];
    const GW_T *b_src[GW_B_COPIES];
    uint32_t a_dst[GW_A_COPIES], b_dst[GW_B_COPIES], a_ok = 0, b_ok = 0;
#pragma unroll
    for (int i = 0; i < GW_A_COPIES; i++) {
        const int row = tid / 8 + i * (GW_THREADS / 8);
        a_ok |= (uint32_t)(m0 + row < GW_M) << i;
        a_src[i] = a + (m0 + row < GW_M ? (m0 + row) * GW_LDA : 0) + ch * GW_VEC;
        a_dst[i] = row * 128 + ((ch ^ (row % 8)) << 4);
    }
#pragma unroll
    for (int i = 0; i < GW_B_COPIES; i++) {
        const int row = tid / 8 + i * (GW_THREADS / 8);
        b_ok |= (uint32_t)(n0 + row < GW_N) << i;
        b_src[i] = b + (n0 + row < GW_N ? (n0 + row) * GW_LDB : 0) + ch * GW_VEC;
        b_dst[i] = GW_A_BYTES + row * 128 + ((ch ^ (row % 8)) << 4);
    }
    auto load = [&](int kt) {
        const uint32_t stage = base + (uint32_t)(kt % GW_STAGES) * GW_STAGE_BYTES;
        const int k0 = kt * GW_BK;
        const bool k_ok = k0 + ch * GW_VEC < GW_K;
#pragma unroll
        for (int i = 0; i < GW_A_COPIES; i++) {
            const bool ok = k_ok && ((a_ok >> i) & 1);
            gw_copy16(stage + a_dst[i], ok ? (const void *)(a_src[i] + k0) : (const void *)a,
                      ok ? 16u : 0u);
        }
#pragma unroll
        for (int i = 0; i < GW_B_COPIES; i++) {
            const bool ok = k_ok && ((b_ok >> i) & 1);
            gw_copy16(stage + b_dst[i], ok ? (const void *)(b_src[i] + k0) : (const void *)b,
                      ok ? 16u : 0u);
        }
    };
    gw_zero(acc);
#pragma unroll
    for (int s = 0; s < GW_STAGES - 2; s++) {
        if (s < GW_KT)
            load(s);
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    }
    for (int kt = 0; kt < GW_KT; kt++) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(GW_STAGES - 3) : "memory");
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        gw_issue(acc, part_acc, base + (uint32_t)(kt % GW_STAGES) * GW_STAGE_BYTES, wg);
        if (kt + GW_STAGES - 2 < GW_KT)
            load(kt + GW_STAGES - 2);
        asm volatile("cp.async.commit_group;\n" ::: "memory");
        gw_retire(acc, part_acc);
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
    for (int i = 0; i < GW_MI; i++)
        gw_fence_acc(acc[i]);
    gw_store_tile(acc, bias, sa, sb, s0, d + (int64_t)z * GW_SD, m0, n0, wg, t);
#endif
}
