/* test_gen_ir_cuda.c: the generator's CUDA emission without a GPU. Every start point and an even
 * sample of each schedule space compiles with NVRTC for sm_90 without a stack frame (no spills),
 * on the GPU rows of tests/data/gen/rows and on small problems of every plan (registers and frames
 * read from the cubin, as test_cubin.c does). Then the kernels' logic runs on the host: the emitted
 * CUDA, with gen.cuh's hardware section replaced by tests/data/gen/emu/emu_gen.h, runs on the
 * softmax family's emulator of CUDA threads, barriers, shuffles and clusters (every thread a
 * coroutine, shared memory starting as garbage, deadlocks detected), compiled as C++ for the cpu
 * backend, and its outputs must equal the C emission's (which tests/py/test_generator.py proves
 * against PyTorch) on random inputs with infinities and NaN. The emulated points cover every code
 * path of emit_cuda.c: pointwise streams with and without vectors, windows and gathers; rows and
 * columns; teams within a warp, across warps and OPB apart; clusters and partials in scratch;
 * registers and streaming; one and two passes; persistent grids. */
#include <ctype.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "backend/cubin.h"
#include "backend/nvrtc.h"
#include "formats/problem.h"
#include "gen/family.h"

#include "compile_check.h"
#include "emu_host.h"

#define ROWS_DIR KILN_SOURCE_DIR "/tests/data/gen/rows"
#define GEN_EMU KILN_SOURCE_DIR "/tests/data/gen/emu"
#define SMX_EMU KILN_SOURCE_DIR "/tests/data/families/softmax/emu"

static const kiln_family *gen;

/* ---- small problems of every plan, defined in memory (' stands for ") ---- */

typedef struct {
    const char *name, *ins, *def; /* ins: the inputs, space-separated (all random) */
} small_case;

#define AXES2(a, b)                                                                                \
    "'axes': {'a': {'type': 'const', 'value': " #a "}, 'b': {'type': 'const', 'value': " #b "}}"
#define AXES4(a, b, c, d)                                                                          \
    "'axes': {'a': {'type': 'const', 'value': " #a "}, 'b': {'type': 'const', 'value': " #b        \
    "}, 'c': {'type': 'const', 'value': " #c "}, 'd': {'type': 'const', 'value': " #d "}}"
#define T(shape, dt) "{'shape': " shape ", 'dtype': '" dt "'}"
#define ATEN(label, args)                                                                          \
    "'kiln': {'kind': 'aten', 'aten': '" label "', 'args': {'args': " args ", 'kwargs': {}}}"
/* one float32 input `self`, one float32 output `out0`, an aten call */
#define UNARY_F32(axes, in_shape, out_shape, label, args)                                          \
    "{'name': 'x', " axes                                                                          \
    ", 'inputs': {'self': " T(in_shape, "float32") "}, 'outputs': {'out0': " T(                    \
        out_shape, "float32") "}, " ATEN(label, args) "}"

/* the VAE's residual add -> GroupNorm(4 groups) -> SiLU, the sum a second output */
#define GN_SILU_CHAIN(axes)                                                                                                                                                            \
    "{'name': 'x', " axes                                                                                                                                                              \
    ", 'inputs': {'x': " T("['a', 'b', 'c', 'd']", "float32") ", 'r': " T("['a', 'b', 'c', 'd']", "float32") ", 'weight': " T(                                                         \
        "['b']",                                                                                                                                                                       \
        "float32") ", 'bias': " T("['b']",                                                                                                                                             \
                                  "float32") "}, 'outputs': {'s': " T("['a', 'b', 'c', 'd']",                                                                                          \
                                                                      "float32") ", 'y': " T("['"                                                                                      \
                                                                                             "a',"                                                                                     \
                                                                                             " '"                                                                                      \
                                                                                             "b',"                                                                                     \
                                                                                             " '"                                                                                      \
                                                                                             "c',"                                                                                     \
                                                                                             " '"                                                                                      \
                                                                                             "d'"                                                                                      \
                                                                                             "]",                                                                                      \
                                                                                             "flo"                                                                                     \
                                                                                             "at3"                                                                                     \
                                                                                             "2") "}, 'kiln': {'kind': 'chain', 'ops': ["                                              \
                                                                                                  "{'aten': 'aten::add.Tensor', 'args': [{'ref': 'x'}, {'ref': 'r'}], 'out': 's'}, "   \
                                                                                                  "{'aten': 'aten::group_norm.default', 'args': [{'ref': 's'}, 4, {'ref': 'weight'}, " \
                                                                                                  "{'ref': 'bias'}, 1e-06, true], 'out': 'g'}, "                                       \
                                                                                                  "{'aten': 'aten::silu.default', 'args': [{'ref': 'g'}], 'out': 'y'}], 'outputs': ['s', 'y']}}"

/* clang-format off */
static const small_case CASES[] = {
    {"log_softmax_rows", "self",
     UNARY_F32(AXES2(5, 301), "['a', 'b']", "['a', 'b']",
               "aten::_log_softmax.default", "[{'tensor': 0}, -1, false]")},
    {"softmax_channels", "self",
     UNARY_F32(AXES4(3, 37, 4, 8), "['a', 'b', 'c', 'd']", "['a', 'b', 'c', 'd']",
               "aten::_softmax.default", "[{'tensor': 0}, 1, false]")},
    {"sum_columns", "self",
     UNARY_F32(AXES4(4, 300, 2, 8), "['a', 'b', 'c', 'd']", "['a', 'c', 'd']",
               "aten::sum.dim_IntList", "[{'tensor': 0}, [1]]")},
    {"max_dim_rows", "self",
     "{'name': 'x', " AXES2(6, 129) ", 'inputs': {'self': " T("['a', 'b']", "float32")
     "}, 'outputs': {'out0': " T("['a']", "float32") ", 'out1': " T("['a']", "int64") "}, "
     ATEN("aten::max.dim", "[{'tensor': 0}, 1]") "}"},
    {"argmin_columns", "self",
     "{'name': 'x', " AXES2(50, 24) ", 'inputs': {'self': " T("['a', 'b']", "float32")
     "}, 'outputs': {'out0': " T("['b']", "int64") "}, " ATEN("aten::argmin.default", "[{'tensor': 0}, 0]")
     "}"},
    {"var_mean_rows", "self",
     "{'name': 'x', " AXES2(7, 200) ", 'inputs': {'self': " T("['a', 'b']", "float32")
     "}, 'outputs': {'out0': " T("['a', '1']", "float32") ", 'out1': " T("['a', '1']", "float32")
     "}, 'kiln': {'kind': 'aten', 'aten': 'aten::var_mean.correction', "
     "'args': {'args': [{'tensor': 0}, [1]], 'kwargs': {'correction': 1, 'keepdim': true}}}}"},
    {"many_rows", "self",
     UNARY_F32(AXES2(2200, 12), "['a', 'b']", "['a']", "aten::logsumexp.default", "[{'tensor': 0}, [1]]")},
    {"logsumexp_rows", "self",
     UNARY_F32(AXES2(9, 77), "['a', 'b']", "['a']", "aten::logsumexp.default", "[{'tensor': 0}, [1]]")},
    {"rmsnorm_channels_bf16", "input0 weight",
     "{'name': 'x', " AXES4(2, 24, 8, 8) ", 'inputs': {'input0': " T("['a', 'b', 'c', 'd']", "bfloat16")
     ", 'weight': " T("['b']", "bfloat16") "}, 'outputs': {'out0': " T("['a', 'b', 'c', 'd']", "bfloat16")
     "}, 'kiln': {'kind': 'chain', 'ops': [{'aten': 'aten::_to_copy.default', "
     "'args': [{'ref': 'input0'}], 'kwargs': {'dtype': 'torch.float32'}, 'out': 'v0'}, "
     "{'aten': 'aten::pow.Tensor_Scalar', 'args': [{'ref': 'v0'}, 2], 'out': 'v1'}, "
     "{'aten': 'aten::mean.dim', 'args': [{'ref': 'v1'}, [1], true], 'out': 'v2'}, "
     "{'aten': 'aten::add.Tensor', 'args': [{'ref': 'v2'}, 1e-06], 'out': 'v3'}, "
     "{'aten': 'aten::rsqrt.default', 'args': [{'ref': 'v3'}], 'out': 'v4'}, "
     "{'aten': 'aten::mul.Tensor', 'args': [{'ref': 'v0'}, {'ref': 'v4'}], 'out': 'v5'}, "
     "{'aten': 'aten::_to_copy.default', 'args': [{'ref': 'v5'}], "
     "'kwargs': {'dtype': 'torch.bfloat16'}, 'out': 'v6'}, {'aten': 'aten::view.default', "
     "'args': [{'ref': 'weight'}, [1, -1, 1, 1]], 'out': 'v7'}, "
     "{'aten': 'aten::mul.Tensor', 'args': [{'ref': 'v6'}, {'ref': 'v7'}], 'out': 'v8'}], "
     "'outputs': ['v8']}}"},
    {"layer_norm_bf16", "input weight bias",
     "{'name': 'x', " AXES2(9, 96) ", 'inputs': {'input': " T("['a', 'b']", "bfloat16") ", 'weight': "
     T("['b']", "bfloat16") ", 'bias': " T("['b']", "bfloat16") "}, 'outputs': {'out0': "
     T("['a', 'b']", "bfloat16") ", 'out1': " T("['a', '1']", "float32") ", 'out2': "
     T("['a', '1']", "float32") "}, "
     ATEN("aten::native_layer_norm.default", "[{'tensor': 0}, [96], {'tensor': 1}, {'tensor': 2}, 1e-05]") "}"},
    {"group_norm_silu_chain", "x r weight bias", GN_SILU_CHAIN(AXES4(2, 12, 5, 7))},
    /* the same with H x W a multiple of 4: vectors */
    {"group_norm_silu_chain_v", "x r weight bias", GN_SILU_CHAIN(AXES4(2, 12, 4, 8))},
    {"native_group_norm_bf16", "input weight bias",
     "{'name': 'x', " AXES4(2, 8, 6, 6) ", 'inputs': {'input': " T("['a', 'b', 'c', 'd']", "bfloat16")
     ", 'weight': " T("['b']", "bfloat16") ", 'bias': " T("['b']", "bfloat16") "}, 'outputs': {'out0': "
     T("['a', 'b', 'c', 'd']", "bfloat16") ", 'out1': " T("['a', '4']", "bfloat16") ", 'out2': "
     T("['a', '4']", "bfloat16") "}, "
     ATEN("aten::native_group_norm.default", "[{'tensor': 0}, {'tensor': 1}, {'tensor': 2}, 2, 8, 36, 4, 1e-05]") "}"},
    {"causal_softmax_bf16", "input0 input1 input2 input3",
     "{'name': 'x', " AXES4(1, 2, 6, 64) ", 'inputs': {'input0': " T("['c']", "int64") ", 'input1': "
     T("['d']", "int64") ", 'input2': " T("[]", "bfloat16") ", 'input3': " T("['a', 'b', 'c', 'd']", "bfloat16")
     "}, 'outputs': {'out0': " T("['a', 'b', 'c', 'd']", "bfloat16") "}, 'kiln': {'kind': 'chain', 'ops': ["
     "{'aten': 'aten::view.default', 'args': [{'ref': 'input1'}, [1, 1, 1, 64]], 'out': 'w0'}, "
     "{'aten': 'aten::view.default', 'args': [{'ref': 'input0'}, [1, 1, 6, 1]], 'out': 'w1'}, "
     "{'aten': 'aten::le.Tensor', 'args': [{'ref': 'w0'}, {'ref': 'w1'}], 'out': 'v0'}, "
     "{'aten': 'aten::where.ScalarOther', 'args': [{'ref': 'v0'}, {'ref': 'input2'}, -3.3895313892515355e+38], "
     "'out': 'v1'}, {'aten': 'aten::add.Tensor', 'args': [{'ref': 'input3'}, {'ref': 'v1'}], 'out': 'v2'}, "
     "{'aten': 'aten::softmax.int', 'args': [{'ref': 'v2'}, -1, 'torch.float32'], 'out': 'v3'}, "
     "{'aten': 'aten::to.dtype', 'args': [{'ref': 'v3'}, 'torch.bfloat16'], 'out': 'v4'}], "
     "'outputs': ['v4']}}"},
    {"max_pool", "self",
     "{'name': 'x', " AXES4(2, 3, 9, 11) ", 'inputs': {'self': " T("['a', 'b', 'c', 'd']", "float32")
     "}, 'outputs': {'out0': " T("['a', 'b', '5', '6']", "float32") ", 'out1': "
     T("['a', 'b', '5', '6']", "int64") "}, "
     ATEN("aten::max_pool2d_with_indices.default", "[{'tensor': 0}, [3, 3], [2, 2], [1, 1]]") "}"},
    /* the last windows start at the last row and column (ceil_mode): clamped taps past the end;
     * values only, and dilated (its taps checked, not clamped) */
    {"max_pool_ceil", "self",
     UNARY_F32(AXES4(2, 3, 10, 12), "['a', 'b', 'c', 'd']", "['a', 'b', '6', '7']",
               "aten::max_pool2d.default", "[{'tensor': 0}, [3, 3], [2, 2], [1, 1], [1, 1], true]")},
    {"max_pool_dil", "self",
     UNARY_F32(AXES4(2, 3, 9, 11), "['a', 'b', 'c', 'd']", "['a', 'b', '7', '9']",
               "aten::max_pool2d.default", "[{'tensor': 0}, [3, 3], [1, 1], [1, 1], [2, 2]]")},
    /* depthwise convolutions: strided with a bias, and a 7 x 7 dilated one in bf16 (49 taps) */
    {"dwconv", "input weight bias",
     "{'name': 'x', " AXES4(2, 8, 9, 11) ", 'inputs': {'input': " T("['a', 'b', 'c', 'd']", "float32")
     ", 'weight': " T("['b', '1', '3', '3']", "float32") ", 'bias': " T("['b']", "float32")
     "}, 'outputs': {'out0': " T("['a', 'b', '5', '6']", "float32") "}, "
     ATEN("aten::convolution.default", "[{'tensor': 0}, {'tensor': 1}, {'tensor': 2}, [2, 2], [1, 1], "
          "[1, 1], false, [0, 0], 8]") "}"},
    {"dwconv7_bf16", "input weight",
     "{'name': 'x', " AXES4(2, 16, 9, 12) ", 'inputs': {'input': " T("['a', 'b', 'c', 'd']", "bfloat16")
     ", 'weight': " T("['b', '1', '7', '7']", "bfloat16") "}, 'outputs': {'out0': "
     T("['a', 'b', '3', '6']", "bfloat16") "}, "
     ATEN("aten::convolution.default", "[{'tensor': 0}, {'tensor': 1}, null, [1, 1], [3, 3], "
          "[2, 2], false, [0, 0], 16]") "}"},
    /* channels-last (stored [N, H, W, C]): the weight is read from a copy in shared memory */
    {"dwconv_cl_bf16", "input weight bias",
     "{'name': 'x', " AXES4(2, 24, 9, 10) ", 'inputs': {'input': " T("['a', 'c', 'd', 'b']", "bfloat16")
     ", 'weight': " T("['b', '1', '5', '5']", "bfloat16") ", 'bias': " T("['b']", "bfloat16")
     "}, 'outputs': {'out0': " T("['a', 'c', 'd', 'b']", "bfloat16") "}, 'kiln': {'kind': 'aten', "
     "'aten': 'aten::convolution.default', 'args': {'args': [{'tensor': 0}, {'tensor': 1}, {'tensor': 2}, "
     "[1, 1], [2, 2], [1, 1], false, [0, 0], 24], 'kwargs': {}}, 'layouts': {'input': {'stored': "
     "'memory_order', 'permute': [0, 2, 3, 1]}, 'out0': {'stored': 'memory_order', 'permute': [0, 2, 3, "
     "1]}}}}"},
    /* channels-last, strided, fp32, no bias: TILE positions 2 apart along W */
    {"dwconv_cl_s2_f32", "input weight",
     "{'name': 'x', " AXES4(2, 8, 15, 16) ", 'inputs': {'input': " T("['a', 'c', 'd', 'b']", "float32")
     ", 'weight': " T("['b', '1', '3', '3']", "float32") "}, 'outputs': {'out0': " T("['a', '8', '8', 'b']",
     "float32") "}, 'kiln': {'kind': 'aten', 'aten': 'aten::convolution.default', 'args': {'args': "
     "[{'tensor': 0}, {'tensor': 1}, null, [2, 2], [1, 1], [1, 1], false, [0, 0], 8], 'kwargs': {}}, "
     "'layouts': {'input': {'stored': 'memory_order', 'permute': [0, 2, 3, 1]}, 'out0': {'stored': "
     "'memory_order', 'permute': [0, 2, 3, 1]}}}}"},
    /* channels-last average pooling over a 3 x 3 window that clips at the edges */
    {"avg_pool_cl_bf16", "self",
     "{'name': 'x', " AXES4(2, 16, 7, 5) ", 'inputs': {'self': " T("['a', 'c', 'd', 'b']", "bfloat16")
     "}, 'outputs': {'out0': " T("['a', 'c', 'd', 'b']", "bfloat16") "}, 'kiln': {'kind': 'aten', "
     "'aten': 'aten::avg_pool2d.default', 'args': {'args': [{'tensor': 0}, [3, 3], [1, 1], [1, 1], false, "
     "false], 'kwargs': {}}, 'layouts': {'self': {'stored': 'memory_order', 'permute': [0, 2, 3, 1]}, "
     "'out0': {'stored': 'memory_order', 'permute': [0, 2, 3, 1]}}}}"},
    {"avg_pool_ceil", "self",
     UNARY_F32(AXES4(2, 3, 9, 11), "['a', 'b', 'c', 'd']", "['a', 'b', '5', '6']",
               "aten::avg_pool2d.default", "[{'tensor': 0}, [2, 2], [2, 2], [1, 1], true, false]")},
    {"pad", "self",
     UNARY_F32(AXES4(2, 3, 5, 8), "['a', 'b', 'c', 'd']", "['a', 'b', '8', '12']",
               "aten::constant_pad_nd.default", "[{'tensor': 0}, [1, 3, 2, 1], 0.5]")},
    {"upsample", "input",
     "{'name': 'x', " AXES4(2, 3, 5, 8) ", 'inputs': {'input': " T("['a', 'b', 'c', 'd']", "float32")
     "}, 'outputs': {'out0': " T("['a', 'b', '10', '16']", "float32") "}, "
     ATEN("aten::upsample_nearest2d.vec", "[{'tensor': 0}, null, [2.0, 2.0]]") "}"},
    {"gelu_gate_bf16", "x g bias",
     "{'name': 'x', " AXES2(17, 64) ", 'inputs': {'x': " T("['a', 'b']", "bfloat16") ", 'g': "
     T("['a', 'b']", "bfloat16") ", 'bias': " T("['b']", "bfloat16") "}, 'outputs': {'out': "
     T("['a', 'b']", "bfloat16") "}, 'kiln': {'kind': 'chain', 'ops': [{'aten': 'aten::gelu.default', "
     "'args': [{'ref': 'x'}], 'kwargs': {'approximate': 'tanh'}, 'out': 'v0'}, "
     "{'aten': 'aten::mul.Tensor', 'args': [{'ref': 'v0'}, {'ref': 'g'}], 'out': 'v1'}, "
     "{'aten': 'aten::add.Tensor', 'args': [{'ref': 'v1'}, {'ref': 'bias'}], "
     "'out': 'out'}], 'outputs': ['out']}}"},
    /* SiLU of an fp32 gate times x, rounded to bf16 at the end (Qwen-3.5's gated RMSNorm's tail),
     * and the same left in fp32 */
#define SILU_GATE(out_dtype)                                                                        \
    "{'name': 'x', " AXES2(17, 64) ", 'inputs': {'x': " T("['a', 'b']", "bfloat16") ", 'g': "       \
    T("['a', 'b']", "bfloat16") "}, 'outputs': {'out': " T("['a', 'b']", out_dtype) "}, 'kiln': "   \
    "{'kind': 'chain', 'ops': [{'aten': 'aten::_to_copy.default', 'args': [{'ref': 'g'}], "          \
    "'kwargs': {'dtype': 'torch.float32'}, 'out': 'v0'}, {'aten': 'aten::silu.default', "           \
    "'args': [{'ref': 'v0'}], 'out': 'v1'}, {'aten': 'aten::_to_copy.default', 'args': "             \
    "[{'ref': 'x'}], 'kwargs': {'dtype': 'torch.float32'}, 'out': 'v2'}, {'aten': "                  \
    "'aten::mul.Tensor', 'args': [{'ref': 'v2'}, {'ref': 'v1'}], 'out': 'v3'}, {'aten': "            \
    "'aten::_to_copy.default', 'args': [{'ref': 'v3'}], 'kwargs': {'dtype': 'torch." out_dtype       \
    "'}, 'out': 'out'}], 'outputs': ['out']}}"
    {"silu_gate_bf16", "x g", SILU_GATE("bfloat16")},
    {"silu_gate_f32", "x g", SILU_GATE("float32")},
    {"index_rows", "self idx",
     "{'name': 'x', " AXES2(40, 16) ", 'inputs': {'self': " T("['b', 'b']", "bfloat16") ", 'idx': "
     T("['a']", "int64") "}, 'outputs': {'out0': " T("['a', 'b']", "bfloat16") "}, "
     ATEN("aten::index.Tensor", "[{'tensor': 0}, [{'tensor': 1}]]") "}"},
    {"repeat_tile", "self",
     "{'name': 'x', " AXES2(3, 8) ", 'inputs': {'self': " T("['a', 'b']", "float32") "}, "
     "'outputs': {'out0': " T("['2', '6', '24']", "float32") "}, "
     ATEN("aten::repeat.default", "[{'tensor': 0}, [2, 2, 3]]") "}"},
    {"cat_dim1", "x y",
     "{'name': 'x', " AXES2(6, 8) ", 'inputs': {'x': " T("['a', 'b']", "float32") ", 'y': "
     T("['a', '5']", "float32") "}, 'outputs': {'out0': " T("['a', '13']", "float32") "}, "
     ATEN("aten::cat.default", "[[{'tensor': 0}, {'tensor': 1}], 1]") "}"},
    /* GPT-NeoX's partial rotary embedding: rotate_half's cat inside the cat with the pass-through */
    {"rope_partial", "q0 cs q2 q3 sn q5",
     "{'name': 'x', " AXES2(3, 5) ", 'inputs': {'q0': " T("['a', 'b', '4']", "float32") ", 'cs': "
     T("['b', '4']", "float32") ", 'q2': " T("['a', 'b', '2']", "float32") ", 'q3': "
     T("['a', 'b', '2']", "float32") ", 'sn': " T("['b', '4']", "float32") ", 'q5': "
     T("['a', 'b', '4']", "float32") "}, 'outputs': {'out': " T("['a', 'b', '8']", "float32") "}, "
     "'kiln': {'kind': 'chain', 'ops': ["
     "{'aten': 'aten::mul.Tensor', 'args': [{'ref': 'q0'}, {'ref': 'cs'}], 'out': 'v0'}, "
     "{'aten': 'aten::neg.default', 'args': [{'ref': 'q2'}], 'out': 'v1'}, "
     "{'aten': 'aten::cat.default', 'args': [[{'ref': 'v1'}, {'ref': 'q3'}], -1], 'out': 'v2'}, "
     "{'aten': 'aten::mul.Tensor', 'args': [{'ref': 'v2'}, {'ref': 'sn'}], 'out': 'v3'}, "
     "{'aten': 'aten::add.Tensor', 'args': [{'ref': 'v0'}, {'ref': 'v3'}], 'out': 'v4'}, "
     "{'aten': 'aten::cat.default', 'args': [[{'ref': 'v4'}, {'ref': 'q5'}], -1], 'out': 'out'}], "
     "'outputs': ['out']}}"},
    /* tests/data/gen/chains/gen_rope_kv_repeat_bf16_2x4x2x8 */
    {"rope_kv_repeat_bf16", "input0 input1 input2 input3 input4",
     "{'name': 'x', 'axes': {'n2': {'type': 'const', 'value': 2}, 'n4': {'type': 'const', 'val"
     "ue': 4}, 'n8': {'type': 'const', 'value': 8}, 'n1': {'type': 'const', 'value': 1}, 'n0':"
     " {'type': 'const', 'value': 0}}, 'inputs': {'input0': {'shape': ['n2', 'n4', 'n2', 'n4']"
     ", 'dtype': 'bfloat16'}, 'input1': {'shape': ['n2', 'n4', 'n2', 'n4'], 'dtype': 'bfloat16"
     "'}, 'input2': {'shape': ['n2', 'n4', 'n1', 'n8'], 'dtype': 'bfloat16'}, 'input3': {'shap"
     "e': ['n2', 'n4', 'n2', 'n8'], 'dtype': 'bfloat16'}, 'input4': {'shape': ['n0'], 'dtype':"
     " 'bfloat16'}}, 'outputs': {'out0': {'shape': ['n2', 'n4', 'n4', 'n8'], 'dtype': 'bfloat1"
     "6'}}, 'kiln': {'kind': 'chain', 'ops': [{'aten': 'aten::neg.default', 'args': [{'ref': '"
     "input0'}], 'out': 'v0'}, {'aten': 'aten::cat.default', 'args': [[{'ref': 'v0'}, {'ref': "
     "'input1'}], -1], 'out': 'v1'}, {'aten': 'aten::mul.Tensor', 'args': [{'ref': 'v1'}, {'re"
     "f': 'input2'}], 'out': 'v2'}, {'aten': 'aten::add.Tensor', 'args': [{'ref': 'input3'}, {"
     "'ref': 'v2'}], 'out': 'v3'}, {'aten': 'aten::permute.default', 'args': [{'ref': 'v3'}, ["
     "0, 2, 1, 3]], 'out': 'w0'}, {'aten': 'aten::cat.default', 'args': [[{'ref': 'input4'}, {"
     "'ref': 'w0'}], -2], 'out': 'v4'}, {'aten': 'aten::view.default', 'args': [{'ref': 'v4'},"
     " [2, 2, 1, 4, 8]], 'out': 'w1'}, {'aten': 'aten::expand.default', 'args': [{'ref': 'w1'}"
     ", [2, 2, 2, 4, 8]], 'out': 'w2'}, {'aten': 'aten::reshape.default', 'args': [{'ref': 'w2"
     "'}, [2, 4, 4, 8]], 'out': 'v5'}], 'outputs': ['v5']}}"},
    /* tests/data/gen/chains/gen_vnorm_kv_repeat_bf16_1x4x2x8 */
    {"vnorm_kv_repeat_bf16", "input0 input1",
     "{'name': 'x', 'axes': {'n1': {'type': 'const', 'value': 1}, 'n4': {'type': 'const', 'val"
     "ue': 4}, 'n2': {'type': 'const', 'value': 2}, 'n8': {'type': 'const', 'value': 8}, 'n0':"
     " {'type': 'const', 'value': 0}}, 'inputs': {'input0': {'shape': ['n1', 'n4', 'n2', 'n8']"
     ", 'dtype': 'bfloat16'}, 'input1': {'shape': ['n0'], 'dtype': 'bfloat16'}}, 'outputs': {'"
     "out0': {'shape': ['n1', 'n4', 'n4', 'n8'], 'dtype': 'bfloat16'}}, 'kiln': {'kind': 'chai"
     "n', 'ops': [{'aten': 'aten::to.dtype', 'args': [{'ref': 'input0'}, 'torch.float32'], 'ou"
     "t': 'v0'}, {'aten': 'aten::pow.Tensor_Scalar', 'args': [{'ref': 'v0'}, 2], 'out': 'v1'},"
     " {'aten': 'aten::mean.dim', 'args': [{'ref': 'v1'}, [-1], true], 'out': 'v2'}, {'aten': "
     "'aten::add.Tensor', 'args': [{'ref': 'v2'}, 1e-06], 'out': 'v3'}, {'aten': 'aten::pow.Te"
     "nsor_Scalar', 'args': [{'ref': 'v3'}, -0.5], 'out': 'v4'}, {'aten': 'aten::mul.Tensor', "
     "'args': [{'ref': 'v0'}, {'ref': 'v4'}], 'out': 'v5'}, {'aten': 'aten::type_as.default', "
     "'args': [{'ref': 'v5'}, {'ref': 'input0'}], 'out': 'v6'}, {'aten': 'aten::view.default',"
     " 'args': [{'ref': 'v6'}, [4, 2, 8]], 'out': 'w0'}, {'aten': 'aten::permute.default', 'ar"
     "gs': [{'ref': 'w0'}, [1, 0, 2]], 'out': 'w1'}, {'aten': 'aten::view.default', 'args': [{"
     "'ref': 'w1'}, [1, 2, 4, 8]], 'out': 'w2'}, {'aten': 'aten::cat.default', 'args': [[{'ref"
     "': 'input1'}, {'ref': 'w2'}], -2], 'out': 'v7'}, {'aten': 'aten::view.default', 'args': "
     "[{'ref': 'v7'}, [2, 4, 8]], 'out': 'w3'}, {'aten': 'aten::view.default', 'args': [{'ref'"
     ": 'w3'}, [1, 2, 1, 4, 8]], 'out': 'w4'}, {'aten': 'aten::expand.default', 'args': [{'ref"
     "': 'w4'}, [1, 2, 2, 4, 8]], 'out': 'w5'}, {'aten': 'aten::reshape.default', 'args': [{'r"
     "ef': 'w5'}, [1, 4, 4, 8]], 'out': 'v8'}], 'outputs': ['v8']}}"},
    {"sum_all", "self",
     "{'name': 'x', " AXES2(3, 100) ", 'inputs': {'self': " T("['a', 'b']", "float32")
     "}, 'outputs': {'out0': {'shape': [], 'dtype': 'float32'}}, "
     ATEN("aten::sum.default", "[{'tensor': 0}]") "}"},
};
/* clang-format on */

static char *dq(const char *s) {
    char *t = xstrdup(s);
    for (char *c = t; *c; c++)
        if (*c == '\'')
            *c = '"';
    return t;
}

/* The problem of a small case, its random workload, and gen's match. */
static kiln_problem *load_case(const small_case *c, kiln_match *m) {
    char *body = dq(c->def), wl[1024], ins[256];
    const char *rest = strstr(body, "\"name\": \"x\", ");
    assert_non_null(rest);
    char *def = xasprintf("{\"name\": \"%s\", \"reference\": \"def run(): pass\", %s", c->name,
                          rest + strlen("\"name\": \"x\", "));
    free(body);
    size_t off = (size_t)snprintf(wl, sizeof wl, "{\"uuid\": \"u\", \"axes\": {}, \"inputs\": {");
    snprintf(ins, sizeof ins, "%s", c->ins);
    char *save = NULL;
    for (char *n = strtok_r(ins, " ", &save); n; n = strtok_r(NULL, " ", &save))
        off += (size_t)snprintf(wl + off, sizeof wl - off, "%s\"%s\": {\"type\": \"random\"}",
                                wl[off - 1] == '{' ? "" : ", ", n);
    snprintf(wl + off, sizeof wl - off, "}}");
    kiln_problem *p = NULL;
    kiln_err err;
    if (kiln_problem_parse(def, strlen(def), c->name, wl, strlen(wl), "wl", &p, &err))
        fail_msg("%s: %s", c->name, err.msg);
    free(def);
    memset(m, 0, sizeof *m);
    char why[512];
    if (!gen->match(p, m, why, sizeof why))
        fail_msg("%s: gen declines: %s", c->name, why);
    return p;
}

/* ---- NVRTC ---- */

/* Compiles gen's source for point pt; fails on a compile error or a stack frame. */
static void compile_point(const kiln_problem *p, const kiln_match *m, const int64_t *pt,
                          int is_start) {
    compile_check(gen, p, m, pt, "sm_90", "kg_kernel", is_start, 0);
}

/* The start point and n points spread evenly over the valid ones. */
static void compile_sample(const kiln_problem *p, const kiln_match *m, int n) {
    const int64_t size = kiln_family_space_size(gen);
    int64_t pt[KILN_FAMILY_MAX_PARAMS], *valid = xmalloc((size_t)size * sizeof *valid), n_valid = 0;
    for (int64_t i = 0; i < size; i++) {
        kiln_family_point(gen, i, pt);
        if (kiln_family_point_ok(gen, p, m, pt))
            valid[n_valid++] = i;
    }
    assert_true(n_valid > 0);
    int from_rule = 0;
    int64_t start = kiln_family_start_index(gen, p, m, size, &from_rule);
    assert_true(start >= 0 && from_rule);
    kiln_family_point(gen, start, pt);
    compile_point(p, m, pt, 1);
    for (int k = 0; k < n && k < n_valid; k++) {
        kiln_family_point(gen, valid[(int64_t)k * n_valid / n], pt);
        compile_point(p, m, pt, 0);
    }
    free(valid);
}

static void test_compile(void **state) {
    (void)state;
    if (!kiln_cuda_have_nvrtc()) {
        printf("SKIP: no NVRTC here (the CUDA toolkit's libnvrtc): cannot compile for sm_90\n");
        skip();
    }
    double t0 = kiln_now_s();
    static const char *const rows[] = {
        "gen_log_softmax_f32_8192x131072",  "gen_sum_dim1_f32_64x8192x2048",
        "gen_softmax_dim1_f32_64x32x56x56", "gen_rmsnorm_channels_bf16_32x256x128x128",
        "gen_max_pool2d_f32_32x64x112x112", "gen_vae_chain_bf16_1x512x256x256"};
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/%s", ROWS_DIR, rows[r]);
        kiln_problem *p;
        kiln_err err;
        if (kiln_problem_load(dir, &p, &err))
            fail_msg("%s: %s", rows[r], err.msg);
        kiln_match m;
        memset(&m, 0, sizeof m);
        char why[512];
        if (!gen->match(p, &m, why, sizeof why))
            fail_msg("%s: gen declines: %s", rows[r], why);
        compile_sample(p, &m, 8);
        kiln_problem_free(p);
    }
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
        kiln_match m;
        kiln_problem *p = load_case(&CASES[c], &m);
        compile_sample(p, &m, 3);
        kiln_problem_free(p);
    }
    printf("    compiled in %.1f s\n", kiln_now_s() - t0);
}

/* ---- the kernels' logic on the host emulator ---- */

/* The value of `key=` on the launch line, or dflt. */
static char *launch_value(const char *line, const char *key, const char *dflt) {
    const char *eol = strchr(line, '\n'), *k = strstr(line, key);
    if (!k || (eol && k > eol))
        return xstrdup(dflt);
    k += strlen(key);
    return xstrndup(k, strcspn(k, " \n"));
}

/* The emitted CUDA source as a cpu candidate that runs it on the emulator: emu_rt.h first, the
 * hardware section replaced by emu_gen.h, the kernel a host function the entry point launches. */
static char *emu_candidate(const char *cuda) {
    const char *hb = strstr(cuda, "// ---- hardware: begin");
    const char *he = strstr(cuda, "// ---- hardware: end ----");
    const char *launch = strstr(cuda, "// kiln: launch kg_kernel ");
    const char *key =
        "extern \"C\" __global__ void __launch_bounds__(KG_THREADS, KG_MINB) kg_kernel(";
    const char *entry = strstr(cuda, key);
    assert_true(hb && he && launch && entry && hb < he && he < entry);
    const char *params = entry + strlen(key), *params_end = strstr(params, ") {");
    char *out = xstrdup("#include \"" SMX_EMU "/emu_rt.h\"\n");
    size_t len = strlen(out);
    cat(&out, &len, cuda, (size_t)(hb - cuda));
    const char *hw = "#include \"" GEN_EMU "/emu_gen.h\"\n";
    cat(&out, &len, hw, strlen(hw));
    cat(&out, &len, he, (size_t)(entry - he));
    const char *dev = "static void kg_kernel_device(";
    cat(&out, &len, dev, strlen(dev));
    cat(&out, &len, params, strlen(params));
    char *plist = xstrndup(params, (size_t)(params_end - params)), names[2048] = "", *save = NULL;
    for (char *p = strtok_r(plist, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        const char *nm = p + strlen(p);
        while (nm > p && (nm[-1] == '_' || isalnum((unsigned char)nm[-1])))
            nm--;
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", names[0] ? ", " : "",
                 nm);
    }
    free(plist);
    char *grid = launch_value(launch, "grid=", "1"), *block = launch_value(launch, "block=", "1"),
         *cluster = launch_value(launch, "cluster=", "1");
    char *wrapper =
        xasprintf("\nextern \"C\" void kg_kernel(%.*s) {\n    emu_launch(%s, %s, %s, 0, "
                  "KG_SHARED_BYTES, [&]() { kg_kernel_device(%s); });\n}\n",
                  (int)(params_end - params), params, grid, block, cluster, names);
    cat(&out, &len, wrapper, strlen(wrapper));
    free(wrapper);
    free(grid);
    free(block);
    free(cluster);
    return out;
}

/* Random inputs: normal floats, a row of -inf, a NaN and a +inf among them (specials). */
static void **make_inputs(const kiln_problem *p, int specials) {
    void **in = xcalloc((size_t)p->n_inputs, sizeof *in);
    uint64_t s = 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < p->n_inputs; i++) {
        const kiln_tensor_spec *t = &p->inputs[i];
        size_t n = elements(p, t);
        in[i] = xmalloc(n * kiln_dtype_size(t->dtype) + 16);
        for (size_t e = 0; e < n; e++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            double v = ((double)(s >> 11) / 9007199254740992.0 - 0.5) * 6;
            if (specials && i == 0 && n > 64) {
                if (e < 8)
                    v = -INFINITY; /* a short stretch of -inf at the start */
                if (e == n / 2)
                    v = NAN;
                if (e == n / 3)
                    v = INFINITY;
            }
            kiln_dtype_store(t->dtype, in[i], e, v);
        }
    }
    return in;
}

/* The point: the family's first values, then `settings` ("KG_TEAM=64 KG_SPLIT=2"); it must be
 * valid. */
static void point_of(const kiln_problem *p, const kiln_match *m, const char *settings,
                     int64_t *pt) {
    kiln_family_point(gen, 0, pt);
    char buf[256], *save = NULL;
    snprintf(buf, sizeof buf, "%s", settings);
    for (char *kv = strtok_r(buf, " ", &save); kv; kv = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(kv, '=');
        assert_non_null(eq);
        *eq = 0;
        int i = 0;
        while (i < gen->n_params && strcmp(gen->params[i].name, kv))
            i++;
        assert_true(i < gen->n_params);
        pt[i] = atoll(eq + 1);
    }
    const char *bad = gen->check(p, m, pt);
    if (bad)
        fail_msg("%s [%s] is not a valid point: %s", p->name, settings,
                 bad[0] == '!' ? bad + 1 : bad);
}

/* The emulated kernel of point `settings` against the C emission, output by output. */
static void emulate(kiln_backend *be, const small_case *c, const char *settings, int specials) {
    kiln_match m;
    kiln_problem *p = load_case(c, &m);
    int64_t pt[KILN_FAMILY_MAX_PARAMS];
    point_of(p, &m, settings, pt);
    char what[300];
    snprintf(what, sizeof what, "%s [%s]", c->name, settings);
    char *cuda = gen->emit(p, &m, pt, 1), *emu = emu_candidate(cuda),
         *csrc = gen->emit(p, &m, pt, 0);
    module me, mc;
    compile_module(be, p, emu, "sh " SMX_EMU "/emucc.sh", &me, what);
    compile_module(be, p, csrc, NULL, &mc, what);
    void **in = make_inputs(p, specials);
    void **oe = run_module(be, p, &me, in, what), **oc = run_module(be, p, &mc, in, what);
    for (int o = 0; o < p->n_outputs; o++) {
        const kiln_tensor_spec *t = &p->outputs[o];
        kiln_tolerance tol = kiln_tolerance_default(t->dtype);
        for (size_t e = 0; e < elements(p, t); e++) {
            double a = kiln_dtype_load(t->dtype, oe[o], e), b = kiln_dtype_load(t->dtype, oc[o], e);
            int same = isnan(b)   ? isnan(a)
                       : isinf(b) ? a == b
                                  : fabs(a - b) <= tol.atol + tol.rtol * fabs(b);
            if (!same)
                fail_msg("%s: %s[%zu] is %.9g, the C emission %.9g", what, t->name, e, a, b);
        }
        free(oe[o]);
        free(oc[o]);
    }
    for (int i = 0; i < p->n_inputs; i++)
        free(in[i]);
    free(in);
    free(oe);
    free(oc);
    be->ops->module_free(be, me.mod);
    be->ops->module_free(be, mc.mod);
    kiln_abi_free(&me.abi);
    kiln_abi_free(&mc.abi);
    free(cuda);
    free(emu);
    free(csrc);
    kiln_problem_free(p);
}

static const small_case *case_named(const char *name) {
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++)
        if (!strcmp(CASES[c].name, name))
            return &CASES[c];
    fail_msg("no case %s", name);
    return NULL;
}

static int count_of(const char *s, const char *what) {
    int n = 0;
    for (const char *at = strstr(s, what); at; at = strstr(at + 1, what))
        n++;
    return n;
}

/* What the H200 speed-ups of 2026-12-03 rest on, in the emitted text (docs/generator.md, "The
 * emitters"): a value fixed along the reduced axes computed once per outer point, not at every
 * element; the key positions of a causal mask loaded where they are used, not held in registers; no
 * rounding of values that already are bf16; a vector at a time into the online softmax pair; the
 * register cap that keeps two blocks on an SM. */
/* gen's CUDA for small case `name` at point `settings` (the caller frees it); *kernel: its entry
 * point's text (the templates' definitions come before it). */
static char *emitted(const char *name, const char *settings, const char **kernel) {
    kiln_match m;
    int64_t pt[KILN_FAMILY_MAX_PARAMS];
    kiln_problem *p = load_case(case_named(name), &m);
    point_of(p, &m, settings, pt);
    char *cuda = gen->emit(p, &m, pt, 1);
    kiln_problem_free(p);
    *kernel = strstr(cuda, "__launch_bounds__(KG_THREADS, KG_MINB) kg_kernel(");
    assert_non_null(*kernel);
    return cuda;
}

static void test_emitted_text(void **state) {
    (void)state;
    const char *kernel;
    /* an fp32 SiLU whose value is rounded to bf16 before any other use: the fast exp and division;
     * kept in fp32, the IEEE ones */
    char *cuda = emitted("silu_gate_bf16", "KG_THREADS=64 KG_VBYTES=16", &kernel);
    assert_non_null(strstr(kernel, "kg_silu_lp("));
    free(cuda);
    cuda = emitted("silu_gate_f32", "KG_THREADS=64 KG_VBYTES=16", &kernel);
    assert_null(strstr(kernel, "kg_silu_lp("));
    assert_non_null(strstr(kernel, "kg_silu("));
    free(cuda);

    cuda = emitted("rmsnorm_channels_bf16", "KG_THREADS=64 KG_VBYTES=16 KG_TEAM=8", &kernel);
    assert_int_equal(count_of(kernel, "kg_rsqrt("), 1); /* once, into kh<node>[] */
    assert_non_null(strstr(kernel, "kh10[kg_e] = "));
    assert_non_null(strstr(cuda, "#define KG_MINB 8 "));
    free(cuda);

    cuda = emitted("causal_softmax_bf16", "KG_THREADS=64 KG_VBYTES=16 KG_TEAM=4", &kernel);
    assert_non_null(strstr(kernel, "kg_q1 = kg_ld<64>(input1 + kg_kk)")); /* where it is used */
    assert_null(strstr(kernel, "kg_raw<64>::t kg_r1[")); /* not held across passes */
    assert_non_null(strstr(kernel, "kg_smx_addv("));
    assert_null(strstr(kernel, "kg_smx_add(")); /* no element-by-element update */
    /* the scores and the where between 0 and bf16's lowest are bf16 already: one rounding, at the
     * add, in the first pass and in the output pass */
    assert_int_equal(count_of(kernel, "kg_round_bf16("), 2 + 1 /* the output's cast */);
    free(cuda);

    /* a depthwise weight read across a channels-last vector axis comes from shared memory, copied
     * with the channels innermost ([24, 1, 5, 5] as [25, 24]); read along an NCHW row (the same
     * weight for the whole warp) it does not need to */
    cuda = emitted("dwconv_cl_bf16", "KG_THREADS=64 KG_VBYTES=4", &kernel);
    assert_non_null(
        strstr(kernel,
               "kg_sh1[kg_k] = weight[kg_k % (int)(b) * (int)((b*5*5) / (b)) + kg_k / (int)(b)];"));
    assert_null(strstr(kernel, "__bfloat162float(weight["));
    assert_non_null(strstr(cuda, "#define KG_SHARED_BYTES 1200\n"));
    /* its lanes' windows are summed at once: a tap is one vector load of the input and one of the
     * weight's copy (VEC 2 here) */
    assert_non_null(strstr(kernel, "float kg_sum6[2] = {};"));
    assert_non_null(strstr(kernel, "= kg_ld<4>(input + "));
    assert_non_null(strstr(kernel, "= kg_ld<4>(&kg_sh1["));
    assert_null(strstr(kernel, "__bfloat162float(input["));
    free(cuda);
    /* one lane at a time (VEC 1), the copy is read where each lane's channel puts it */
    cuda = emitted("dwconv_cl_bf16", "KG_THREADS=64 KG_VBYTES=2", &kernel);
    assert_non_null(strstr(kernel, "__bfloat162float(kg_sh1[("));
    assert_null(strstr(kernel, "kg_sum6[1]"));
    free(cuda);
    /* TILE 4 along W (stride 2): the rows a loop, the four positions' taps one unrolled nest, and
     * every store after the last load of the input (a store would stop the compiler merging them)
     */
    cuda = emitted("dwconv_cl_s2_f32", "KG_THREADS=64 KG_VBYTES=16 KG_TILE=4", &kernel);
    assert_non_null(strstr(kernel, "float kg_sum3[4][4] = {};"));
    assert_non_null(strstr(kernel, "#pragma unroll 1\n"));
    assert_non_null(strstr(kernel, " + (int)kg_t3 * 2 + (int)kg_j3_1 * 1;"));
    const char *last_load = strstr(kernel, "kg_ld<16>(input + "),
               *first_store = strstr(kernel, "kg_st<");
    assert_non_null(last_load);
    assert_non_null(first_store);
    for (const char *q = last_load; (q = strstr(q + 1, "kg_ld<16>(input + "));)
        last_load = q;
    assert_true(last_load < first_store);
    /* the window's alone: a window's input is never read at the domain's points */
    assert_int_equal(count_of(kernel, "kg_ld<16>(input + "), 1);
    free(cuda);
    cuda = emitted("avg_pool_cl_bf16", "KG_THREADS=64 KG_VBYTES=16", &kernel);
    assert_non_null(strstr(kernel, "= kg_ld<16>(self + "));
    assert_null(strstr(kernel, "__bfloat162float(self["));
    free(cuda);
    cuda = emitted("dwconv", "KG_THREADS=64 KG_VBYTES=4", &kernel);
    assert_null(strstr(cuda, "kg_sh1"));
    /* its taps are read at positions clamped into the input, counted by a flag, with no branch
     * around the loads (the compiler then merges the taps adjacent lanes share: 288 loads became
     * 78 in a 3x3 bf16 kernel's PTX) */
    assert_null(strstr(kernel, "continue;"));
    assert_non_null(strstr(kernel, "if (kg_in"));
    free(cuda);
    /* max pooling without its index, with dilation 1, reads clamped too, with no flag */
    cuda = emitted("max_pool_ceil", "KG_THREADS=64 KG_VBYTES=4", &kernel);
    assert_null(strstr(kernel, "continue;"));
    assert_null(strstr(kernel, "kg_in"));
    assert_null(strstr(kernel, "kg_arg"));
    free(cuda);
    /* with its index, or dilated (a clamped tap may fall between the window's own), each tap is
     * checked */
    cuda = emitted("max_pool", "KG_THREADS=64 KG_VBYTES=8", &kernel);
    assert_non_null(strstr(kernel, "continue;"));
    assert_non_null(strstr(kernel, "kg_arg"));
    free(cuda);
    cuda = emitted("max_pool_dil", "KG_THREADS=64 KG_VBYTES=4", &kernel);
    assert_non_null(strstr(kernel, "continue;"));
    assert_null(strstr(kernel, "kg_in"));
    free(cuda);
}

static void test_emulated(void **state) {
    (void)state;
    if (system("command -v ${CXX:-g++} >/dev/null 2>&1") != 0) {
        printf("SKIP: no C++ compiler (g++ or $CXX) to build the emulated kernels\n");
        skip();
    }
    kiln_backend *be = NULL;
    kiln_err err;
    assert_int_equal(kiln_backend_open("cpu", 0, &be, &err), KILN_OK);
    double t0 = kiln_now_s();
    static const struct {
        const char *name, *settings;
        int specials;
    } pts[] = {
        /* rows: a team in a warp, across warps, a cluster, registers or streaming, 1 or 2 passes */
        {"log_softmax_rows", "KG_THREADS=128 KG_VBYTES=4 KG_TEAM=32", 1},
        {"log_softmax_rows",
         "KG_THREADS=256 KG_VBYTES=4 KG_TEAM=128 KG_ONLINE=0 KG_CACHE=0 KG_UNROLL=4", 1},
        {"log_softmax_rows", "KG_THREADS=64 KG_VBYTES=4 KG_TEAM=64 KG_SPLIT=4", 1},
        {"log_softmax_rows",
         "KG_THREADS=64 KG_VBYTES=4 KG_TEAM=16 KG_SPLIT=2 KG_ONLINE=0 KG_CACHE=0", 0},
        {"many_rows", "KG_THREADS=64 KG_VBYTES=4 KG_TEAM=4 KG_PERSIST=1", 1},
        {"logsumexp_rows", "KG_THREADS=64 KG_VBYTES=4 KG_TEAM=8", 1},
        {"logsumexp_rows", "KG_THREADS=64 KG_VBYTES=4 KG_TEAM=32 KG_SPLIT=2 KG_SPLITMODE=1", 1},
        {"var_mean_rows", "KG_THREADS=256 KG_VBYTES=4 KG_TEAM=64", 0},
        {"var_mean_rows", "KG_THREADS=64 KG_VBYTES=8 KG_TEAM=16 KG_ONLINE=0 KG_CACHE=0", 0},
        {"var_mean_rows", "KG_THREADS=64 KG_VBYTES=4 KG_TEAM=16 KG_SPLIT=2 KG_SPLITMODE=1", 0},
        {"max_dim_rows", "KG_THREADS=64 KG_VBYTES=4 KG_TEAM=32 KG_SPLIT=2", 1},
        {"max_dim_rows", "KG_THREADS=64 KG_VBYTES=4 KG_TEAM=8 KG_CACHE=0 KG_UNROLL=4", 1},
        {"layer_norm_bf16", "KG_THREADS=64 KG_VBYTES=16 KG_TEAM=4", 0},
        {"layer_norm_bf16", "KG_THREADS=128 KG_VBYTES=4 KG_TEAM=32 KG_ONLINE=0", 0},
        {"sum_all", "KG_THREADS=64 KG_VBYTES=4 KG_TEAM=64 KG_SPLIT=2 KG_SPLITMODE=1", 0},
        /* GroupNorm: a row per (N, group) over the channels split off C, H and W */
        {"group_norm_silu_chain", "KG_THREADS=64 KG_VBYTES=4 KG_TEAM=32", 1},
        {"group_norm_silu_chain", "KG_THREADS=128 KG_VBYTES=4 KG_TEAM=128 KG_ONLINE=0 KG_CACHE=0",
         0},
        {"group_norm_silu_chain", "KG_THREADS=64 KG_VBYTES=4 KG_TEAM=16 KG_SPLIT=2", 0},
        /* streaming: the sum stored in the first pass and read back by the last (plan_early), in
         * vectors and one element at a time, across a cluster's blocks */
        {"group_norm_silu_chain_v", "KG_THREADS=64 KG_VBYTES=8 KG_TEAM=32 KG_CACHE=0 KG_UNROLL=4",
         1},
        {"group_norm_silu_chain_v", "KG_THREADS=64 KG_VBYTES=16 KG_TEAM=8 KG_SPLIT=2 KG_CACHE=0",
         0},
        {"group_norm_silu_chain", "KG_THREADS=64 KG_VBYTES=4 KG_TEAM=16 KG_SPLIT=2 KG_CACHE=0", 0},
        {"native_group_norm_bf16", "KG_THREADS=64 KG_VBYTES=8 KG_TEAM=8", 0},
        {"native_group_norm_bf16", "KG_THREADS=64 KG_VBYTES=4 KG_TEAM=32 KG_ONLINE=0", 1},
        /* a causal mask computed from int64 positions: the key positions (along the row alone) in
         * vectors of 64 and 32 bytes beside 16- and 8-byte vectors of the bf16 scores */
        {"causal_softmax_bf16", "KG_THREADS=64 KG_VBYTES=16 KG_TEAM=4", 0},
        {"causal_softmax_bf16", "KG_THREADS=64 KG_VBYTES=8 KG_TEAM=16 KG_CACHE=0 KG_ONLINE=0", 0},
        /* columns: threads OPB apart, VO outer points a thread, clusters, scratch */
        {"softmax_channels", "KG_THREADS=64 KG_VBYTES=16 KG_TEAM=4", 1},
        {"softmax_channels", "KG_THREADS=64 KG_VBYTES=4 KG_TEAM=1 KG_ONLINE=0 KG_CACHE=0", 1},
        /* VEC 1 with the slice kept in registers (columns and rows) */
        {"softmax_channels", "KG_THREADS=64 KG_VBYTES=4 KG_TEAM=4", 1},
        {"native_group_norm_bf16", "KG_THREADS=64 KG_VBYTES=2 KG_TEAM=32", 0},
        {"softmax_channels", "KG_THREADS=64 KG_VBYTES=8 KG_TEAM=8 KG_SPLIT=2", 1},
        {"sum_columns", "KG_THREADS=64 KG_VBYTES=16 KG_TEAM=16 KG_CACHE=0 KG_UNROLL=4", 0},
        /* a team across warps alone (OPB 32: no butterfly, four partials in shared memory) */
        {"sum_columns", "KG_THREADS=128 KG_VBYTES=8 KG_TEAM=4 KG_CACHE=0 KG_UNROLL=4", 0},
        /* 300 elements in sequence a thread: the compensated (Kahan) sum, with infinities and NaN
         */
        {"sum_columns", "KG_THREADS=64 KG_VBYTES=4 KG_TEAM=1 KG_CACHE=0 KG_UNROLL=4", 1},
        {"sum_columns", "KG_THREADS=64 KG_VBYTES=8 KG_TEAM=8 KG_SPLIT=4 KG_SPLITMODE=1 KG_CACHE=0",
         0},
        {"argmin_columns", "KG_THREADS=64 KG_VBYTES=8 KG_TEAM=8", 1},
        {"rmsnorm_channels_bf16", "KG_THREADS=64 KG_VBYTES=16 KG_TEAM=8", 0},
        {"rmsnorm_channels_bf16", "KG_THREADS=64 KG_VBYTES=2 KG_TEAM=2 KG_SPLIT=2 KG_CACHE=0", 0},
        /* pointwise: vectors, scalars, windows, gathers, a persistent grid */
        {"gelu_gate_bf16", "KG_THREADS=64 KG_VBYTES=16 KG_UNROLL=2", 0},
        {"gelu_gate_bf16", "KG_THREADS=64 KG_VBYTES=2 KG_UNROLL=1", 0},
        {"silu_gate_bf16", "KG_THREADS=64 KG_VBYTES=16", 1},
        {"silu_gate_f32", "KG_THREADS=64 KG_VBYTES=8", 1},
        {"max_pool", "KG_THREADS=64 KG_VBYTES=8", 1},
        {"max_pool", "KG_THREADS=64 KG_VBYTES=16 KG_UNROLL=2", 1},
        {"max_pool_ceil", "KG_THREADS=64 KG_VBYTES=4 KG_UNROLL=2", 1},
        {"max_pool_ceil", "KG_THREADS=64 KG_VBYTES=4 KG_UNROLL=1", 0},
        {"max_pool_dil", "KG_THREADS=64 KG_VBYTES=4", 1},
        {"dwconv", "KG_THREADS=64 KG_VBYTES=4", 1},
        {"dwconv", "KG_THREADS=64 KG_VBYTES=8 KG_UNROLL=2", 0},
        {"dwconv7_bf16", "KG_THREADS=64 KG_VBYTES=2", 1},
        {"dwconv_cl_bf16", "KG_THREADS=64 KG_VBYTES=2", 1},
        {"dwconv_cl_bf16", "KG_THREADS=64 KG_VBYTES=4 KG_UNROLL=2", 0},
        {"dwconv_cl_bf16", "KG_THREADS=64 KG_VBYTES=16 KG_UNROLL=2", 1},
        {"dwconv_cl_bf16", "KG_THREADS=64 KG_VBYTES=16 KG_TILE=2", 1},
        {"dwconv_cl_bf16", "KG_THREADS=64 KG_VBYTES=4 KG_UNROLL=2 KG_TILE=2", 0},
        {"dwconv_cl_s2_f32", "KG_THREADS=64 KG_VBYTES=16 KG_TILE=4", 1},
        {"dwconv_cl_s2_f32", "KG_THREADS=64 KG_VBYTES=8 KG_TILE=8", 0},
        /* a row's last unit ragged: W = 10 in units of 4 and 8 */
        {"dwconv_cl_bf16", "KG_THREADS=64 KG_VBYTES=16 KG_TILE=4 KG_UNROLL=1", 1},
        {"dwconv_cl_bf16", "KG_THREADS=64 KG_VBYTES=8 KG_TILE=8 KG_UNROLL=1", 0},
        {"dwconv_cl_s2_f32", "KG_THREADS=64 KG_VBYTES=8 KG_TILE=2 KG_UNROLL=4", 0},
        {"avg_pool_cl_bf16", "KG_THREADS=64 KG_VBYTES=16", 1},
        {"avg_pool_cl_bf16", "KG_THREADS=64 KG_VBYTES=4 KG_UNROLL=4", 0},
        {"dwconv7_bf16", "KG_THREADS=64 KG_VBYTES=4 KG_UNROLL=2", 0},
        {"avg_pool_ceil", "KG_THREADS=64 KG_VBYTES=4 KG_UNROLL=4", 0},
        {"avg_pool_ceil", "KG_THREADS=64 KG_VBYTES=8", 1},
        {"pad", "KG_THREADS=64 KG_VBYTES=16", 0},
        {"upsample", "KG_THREADS=64 KG_VBYTES=8 KG_UNROLL=1", 0},
        {"index_rows", "KG_THREADS=64 KG_VBYTES=8", 0},
        {"cat_dim1", "KG_THREADS=64 KG_VBYTES=4", 1},
        {"repeat_tile", "KG_THREADS=64 KG_VBYTES=4", 0},
        {"repeat_tile", "KG_THREADS=64 KG_VBYTES=16 KG_UNROLL=2", 1},
        {"rope_partial", "KG_THREADS=64 KG_VBYTES=4", 1},
        {"rope_partial", "KG_THREADS=64 KG_VBYTES=16 KG_UNROLL=2", 0},
        /* Gemma-4's k and v joined to an empty KV cache's cat and repeat_kv: the output's head axis
         * the composite of the kv head and the repeat */
        {"rope_kv_repeat_bf16", "KG_THREADS=64 KG_VBYTES=16 KG_UNROLL=2", 0},
        {"rope_kv_repeat_bf16", "KG_THREADS=64 KG_VBYTES=2 KG_UNROLL=1", 1},
        {"vnorm_kv_repeat_bf16", "KG_THREADS=64 KG_VBYTES=16 KG_TEAM=2", 0},
        {"vnorm_kv_repeat_bf16", "KG_THREADS=64 KG_VBYTES=4 KG_TEAM=4 KG_CACHE=0", 1},
    };
    for (size_t i = 0; i < sizeof pts / sizeof pts[0]; i++)
        emulate(be, case_named(pts[i].name), pts[i].settings, pts[i].specials);
    printf("    %zu points emulated in %.1f s\n", sizeof pts / sizeof pts[0], kiln_now_s() - t0);
    kiln_backend_close(be);
}

int main(void) {
    gen = kiln_family_find("gen");
    if (!gen) {
        fprintf(stderr, "the gen family is not linked in\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_emitted_text),
        cmocka_unit_test(test_emulated),
        cmocka_unit_test(test_compile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
