// emu_att.h: the host version of attention.cu's hardware section (src/gen/templates/attention.cu:
// cp.async, ldmatrix, ldmatrix.trans, mma.sync m16n8k16, ex2, the dynamic shared memory) on the
// softmax family's CUDA emulator (tests/data/families/softmax/emu/emu_rt.h: threads as coroutines,
// barriers, shuffles), included in the section's place by tests/c/test_family_attention.c (after
// emu_att_rt.h, which the whole candidate gets).
//
// The warp-collective instructions are built from the emulator's shuffles exactly as the PTX ISA
// defines their fragments, independently of how the template uses them: ldmatrix gives lane l word
// l % 4 of row l / 4 of matrix i, whose row address lane 8 i + l / 4 supplied; .trans gives it
// elements (2 (l % 4), l / 4) and (2 (l % 4) + 1, l / 4); mma m16n8k16 reads A (16 x 16, row
// major) with a0 = (g, 2t..2t+1), a1 = (g + 8, 2t..), a2 = (g, 2t + 8..), a3 = (g + 8, 2t + 8..),
// B (16 x 8) with b0 = (2t..2t+1, g), b1 = (2t + 8.., g), and C with c0, c1 = (g, 2t..2t+1), c2,
// c3 = (g + 8, 2t..), g = l / 4, t = l % 4. A wrong fragment index in the template therefore
// gives wrong numbers here. cp.async copies at once (the waits are no-ops): a prefetch into a
// buffer another warp still reads would corrupt it here as on the GPU.

static inline unsigned att_smem_base() {
    return 0;
}
static inline unsigned char *att_emu_smem(unsigned addr, size_t n) {
    if ((size_t)addr + n > emu.smem)
        emu_fail("a shared-memory access past the dynamic shared memory");
    return emu.dyn[emu.cur->rank] + addr;
}
static inline float att_ex2(float x) {
    return exp2f(x);
}
static inline void att_cp16(unsigned dst, const void *src, int bytes) {
    if (dst % 16 || (uintptr_t)src % 16)
        emu_fail("misaligned cp.async");
    unsigned char *d = att_emu_smem(dst, 16);
    if (bytes == 16)
        memcpy(d, src, 16);
    else if (bytes == 0)
        memset(d, 0, 16);
    else
        emu_fail("cp.async of a partial chunk");
}
static inline void att_cp_commit() {}
template <int N> static inline void att_cp_wait() {}

static inline unsigned att_emu_shfl(unsigned v, int src) {
    float f;
    memcpy(&f, &v, 4);
    f = __shfl_sync(0xffffffffu, f, src);
    memcpy(&v, &f, 4);
    return v;
}
static inline int att_emu_lane() {
    return emu.cur->tid % 32;
}
static inline void att_ldm4(unsigned addr, unsigned *r) {
    if (addr % 16)
        emu_fail("misaligned ldmatrix row");
    unsigned w[4];
    memcpy(w, att_emu_smem(addr, 16), 16);
    const int l = att_emu_lane();
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            unsigned v = att_emu_shfl(w[j], 8 * i + l / 4);
            if (j == l % 4)
                r[i] = v;
        }
}
static inline void att_ldm4t(unsigned addr, unsigned *r) {
    if (addr % 16)
        emu_fail("misaligned ldmatrix row");
    unsigned w[4];
    memcpy(w, att_emu_smem(addr, 16), 16);
    const int l = att_emu_lane(), col = l / 4;
    for (int i = 0; i < 4; i++) {
        unsigned lo = 0, hi = 0;
        for (int j = 0; j < 4; j++) {
            unsigned v0 = att_emu_shfl(w[j], 8 * i + 2 * (l % 4));
            unsigned v1 = att_emu_shfl(w[j], 8 * i + 2 * (l % 4) + 1);
            if (j == col / 2) {
                lo = col % 2 ? v0 >> 16 : v0 & 0xffffu;
                hi = col % 2 ? v1 >> 16 : v1 & 0xffffu;
            }
        }
        r[i] = lo | hi << 16;
    }
}
static inline float att_emu_half(unsigned w, int upper) {
    uint16_t h = (uint16_t)(upper ? w >> 16 : w & 0xffffu);
#if defined(ATT_FP16)
    return kiln_f16_to_float(h);
#else
    return kiln_bf16_to_float(h);
#endif
}
static inline void att_mma(float *c, const unsigned *a, unsigned b0, unsigned b1) {
    const int l = att_emu_lane(), g = l / 4, t = l % 4;
    float A[2][16], B[16][2];
    for (int tp = 0; tp < 4; tp++) {
        unsigned x[4];
        for (int q = 0; q < 4; q++)
            x[q] = att_emu_shfl(a[q], 4 * g + tp);
        for (int h = 0; h < 2; h++) {
            A[0][2 * tp + h] = att_emu_half(x[0], h);
            A[1][2 * tp + h] = att_emu_half(x[1], h);
            A[0][2 * tp + 8 + h] = att_emu_half(x[2], h);
            A[1][2 * tp + 8 + h] = att_emu_half(x[3], h);
        }
    }
    for (int n = 0; n < 2; n++)
        for (int tp = 0; tp < 4; tp++) {
            unsigned y0 = att_emu_shfl(b0, 4 * (2 * t + n) + tp);
            unsigned y1 = att_emu_shfl(b1, 4 * (2 * t + n) + tp);
            for (int h = 0; h < 2; h++) {
                B[2 * tp + h][n] = att_emu_half(y0, h);
                B[2 * tp + 8 + h][n] = att_emu_half(y1, h);
            }
        }
    for (int r = 0; r < 2; r++)
        for (int n = 0; n < 2; n++) {
            float s = 0.f;
            for (int k = 0; k < 16; k++)
                s += A[r][k] * B[k][n];
            c[2 * r + n] += s;
        }
}
static inline unsigned att_pack(float lo, float hi) {
#if defined(ATT_FP16)
    return (unsigned)kiln_float_to_f16(lo) | (unsigned)kiln_float_to_f16(hi) << 16;
#else
    return (unsigned)kiln_float_to_bf16(lo) | (unsigned)kiln_float_to_bf16(hi) << 16;
#endif
}
