// emu_att_rt.h: what an emulated attention candidate needs before the template, beside the softmax
// family's emulator (tests/data/families/softmax/emu/emu_rt.h): a three-dimensional grid (the
// emulator numbers blocks in one) and the bf16 widening the template's loads use. The float32
// kernel, which has no hardware section, runs on this alone; emu_att.h adds the mma path's
// instructions.

static unsigned att_emu_grid[3] = {1, 1, 1};
#undef blockIdx
#define blockIdx                                                                                   \
    (emu_idx{(unsigned)emu.cur->block % att_emu_grid[0],                                           \
             (unsigned)emu.cur->block / att_emu_grid[0] % att_emu_grid[1],                         \
             (unsigned)emu.cur->block / att_emu_grid[0] / att_emu_grid[1]})
#undef gridDim
#define gridDim (emu_idx{att_emu_grid[0], att_emu_grid[1], att_emu_grid[2]})

static inline float __bfloat162float(__nv_bfloat16 b) {
    return kiln_bf16_to_float(b.b);
}
