"""Writes the cublaslt family's problem directories: the small test problems next to this file (the
cpu proof and the matcher's tests), the gated pairs and the per-row fp8 problem of ../wgmma (which only the
wgmma family takes), the fp8 (torch._scaled_mm) problems, and
the GPU row bench/problems/gemm_linear_bf16_4096x9216x2304 (Gemma-4's MLP gate/up projection). Each one is what `kiln capture` writes for the op (a "kiln"
object with the aten label, args, shapes and layouts; a transposed operand stored in memory order and
permuted back by the reference), with random inputs instead of stored tensors.

    python tests/data/families/cublaslt/make_problems.py      (from the repository root)
"""

import json
import os
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "..", ".."))
NS = uuid.UUID("6b696c6e-6765-6d6d-0000-000000000001")


def axis_name(v):
    return f"n{v}"


def inverse(perm):
    """The permute that takes a tensor stored in the order perm (stored dim k holds captured dim perm[k], what
    kiln.layouts' "permute" says) back to its captured dims."""
    return [perm.index(d) for d in range(len(perm))]


def write(dirname, name, description, aten, args, inputs, out_shape, dtype, kwargs=None, declines=None,
          prefix="cublaslt_", body=None, flops=None, out_perm=None):
    """inputs: {name: (stored shape, dtype, permute or None)}, in the op's argument order; body: the reference's
    last line, where calling the op itself is not it (an op PyTorch's cpu build lacks in that form); flops: kiln's
    "flops", as capture writes it for a contraction; out_perm: the output stored in that order (out_shape is
    then its stored shape)."""
    d = os.path.join(dirname, name)
    os.makedirs(d, exist_ok=True)
    sizes = sorted({v for s, _, _ in inputs.values() for v in s} | set(out_shape))
    axes = {axis_name(v): {"type": "const", "value": v} for v in sizes}
    layouts = {}
    for n, (shape, _, perm) in inputs.items():
        layouts[n] = {"stored": "memory_order", "stored_shape": shape, "permute": perm} if perm else \
            {"stored": "contiguous"}
    layouts["out0"] = {"stored": "memory_order", "stored_shape": out_shape, "permute": out_perm} if out_perm else \
        {"stored": "contiguous"}
    names = list(inputs)
    call_args = ", ".join(names[a["tensor"]] if isinstance(a, dict) else repr(a) for a in args)
    kw = "".join(f", {k}={v!r}" for k, v in (kwargs or {}).items())
    lines = ["import torch", "", "", "@torch.no_grad()", f"def run({', '.join(names)}):"]
    for n, (shape, _, perm) in inputs.items():
        if perm:
            what = "a transposed view" if inverse(perm) == perm else "a view in another order"
            lines.append(f"    {n} = {n}.permute({', '.join(map(str, inverse(perm)))})  # captured as {what}")
    call = body[len("return "):] if body else f"torch.ops.{aten.replace('aten::', 'aten.')}({call_args}{kw})"
    lines += [f"    return {call}.permute({', '.join(map(str, out_perm))})" if out_perm else f"    return {call}"]
    definition = {
        "name": f"{prefix}{name}", "op_type": aten.split("::")[1].split(".")[0].lstrip("_"),
        "description": description,
        "axes": axes,
        "inputs": {n: {"shape": [axis_name(v) for v in s], "dtype": t} for n, (s, t, _) in inputs.items()},
        "outputs": {"out0": {"shape": [axis_name(v) for v in out_shape], "dtype": dtype}},
        "reference": "\n".join(lines) + "\n",
        "kiln": {"kind": "aten", "aten": aten, "calls": 1, "args": {"args": args, "kwargs": kwargs or {}},
                 "layouts": layouts},
    }
    if flops:
        definition["kiln"]["flops"] = flops
    _write(d, name, definition, declines, names)


def _write(d, name, definition, declines, input_names):
    """definition.json (saying what the family declines, when it does) and one workload of random inputs."""
    if declines:
        definition["description"] += f" The family declines it: {declines}."
    with open(os.path.join(d, "definition.json"), "w") as f:
        json.dump(definition, f, indent=1)
        f.write("\n")
    with open(os.path.join(d, "workload.jsonl"), "w") as f:
        line = {"uuid": str(uuid.uuid5(NS, name)), "axes": {}, "inputs": {n: {"type": "random"} for n in input_names}}
        f.write(json.dumps(line) + "\n")


T = [{"tensor": 0}, {"tensor": 1}, {"tensor": 2}]


def write_chain(dirname, name, description, ops, reference, inputs, out_shape, out_dtype, declines=None,
                pattern="gemm_epilogue", prefix="cublaslt_"):
    """A GEMM and its epilogue as capture writes a "gemm_epilogue" chain (or another pattern): ops over
    {"ref": NAME}, the straight-line reference (body lines of run()), inputs {name: (stored shape, dtype, permute
    or None)}."""
    d = os.path.join(dirname, name)
    os.makedirs(d, exist_ok=True)
    sizes = sorted({v for s, _, _ in inputs.values() for v in s} | set(out_shape))
    layouts = {n: ({"stored": "memory_order", "stored_shape": shape, "permute": perm} if perm else
                   {"stored": "contiguous"}) for n, (shape, _, perm) in inputs.items()}
    layouts["out0"] = {"stored": "contiguous"}
    lines = ["import torch", "", "", "@torch.no_grad()", f"def run({', '.join(inputs)}):"]
    for n, (shape, _, perm) in inputs.items():
        if perm:
            lines.append(f"    {n} = {n}.permute({', '.join(map(str, perm))})  # captured as a transposed view")
    lines += [f"    {line}" for line in reference]
    definition = {
        "name": f"{prefix}{name}", "op_type": "chain", "description": description,
        "axes": {axis_name(v): {"type": "const", "value": v} for v in sizes},
        "inputs": {n: {"shape": [axis_name(v) for v in s], "dtype": t} for n, (s, t, _) in inputs.items()},
        "outputs": {"out0": {"shape": [axis_name(v) for v in out_shape], "dtype": out_dtype}},
        "reference": "\n".join(lines) + "\n",
        "kiln": {"kind": "chain", "pattern": pattern, "members": [op["aten"] for op in ops], "calls": 1,
                 "ops": ops, "outputs": [ops[-1]["out"]], "layouts": layouts},
    }
    _write(d, name, definition, declines, inputs)


def op(aten, args, out, dtype, **kwargs):
    o = {"aten": aten, "args": [{"ref": a} if isinstance(a, str) and a.isidentifier() else a for a in args],
         "out": out, "dtypes": [dtype]}
    if kwargs:
        o["kwargs"] = kwargs
    return o


def chains(t):
    """GEMM + epilogue chains: the bias (linear's, or an add after the GEMM), ReLU or GELU, a final cast."""
    bf, f16, f32 = "bfloat16", "float16", "float32"
    write_chain(t, "linear_bias_gelu_bf16", "F.linear(x, w, b) then GELU (tanh) in bfloat16: epilogue bias_gelu.",
                [op("aten::linear.default", ["x", "w", "b"], "v0", bf),
                 op("aten::gelu.default", ["v0"], "v1", bf, approximate="tanh")],
                ["return torch.ops.aten.gelu.default(torch.ops.aten.linear.default(x, w, b), approximate='tanh')"],
                {"x": ([16, 40], bf, None), "w": ([24, 40], bf, None), "b": ([24], bf, None)}, [16, 24], bf)
    write_chain(t, "mm_add_relu_f16", "mm(x, w.t()) + b, then ReLU, in float16: the bias add joins the epilogue.",
                [op("aten::mm.default", ["x", "w"], "v0", f16), op("aten::add.Tensor", ["v0", "b"], "v1", f16),
                 op("aten::relu.default", ["v1"], "v2", f16)],
                ["v0 = torch.ops.aten.mm.default(x, w)", "v1 = torch.ops.aten.add.Tensor(v0, b)",
                 "return torch.ops.aten.relu.default(v1)"],
                {"x": ([12, 48], f16, None), "w": ([20, 48], f16, [1, 0]), "b": ([20], f16, None)}, [12, 20], f16)
    write_chain(t, "matmul_badd_gelu_f32", "b + matmul(a, w) (the bias first), then GELU (tanh), in float32.",
                [op("aten::matmul.default", ["a", "w"], "v0", f32), op("aten::add.Tensor", ["b", "v0"], "v1", f32),
                 op("aten::gelu.default", ["v1"], "v2", f32, approximate="tanh")],
                ["v0 = torch.ops.aten.matmul.default(a, w)", "v1 = torch.ops.aten.add.Tensor(b, v0)",
                 "return torch.ops.aten.gelu.default(v1, approximate='tanh')"],
                {"a": ([8, 16], f32, None), "w": ([16, 12], f32, None), "b": ([12], f32, None)}, [8, 12], f32)
    write_chain(t, "linear_gelu_erf_to_f32",
                "F.linear(x, w) of a [2, 9, 40] bfloat16 input, GELU (erf), cast to float32: cuBLASLt's GELU "
                "is the tanh form, which the gate proves within bfloat16's tolerance here.",
                [op("aten::linear.default", ["x", "w"], "v0", bf), op("aten::gelu.default", ["v0"], "v1", bf),
                 op("aten::to.dtype", ["v1", "torch.float32"], "v2", f32)],
                ["v0 = torch.ops.aten.linear.default(x, w)", "v1 = torch.ops.aten.gelu.default(v0)",
                 "return torch.ops.aten.to.dtype(v1, torch.float32)"],
                {"x": ([2, 9, 40], bf, None), "w": ([24, 40], bf, None)}, [2, 9, 24], f32)
    decl = os.path.join(t, "declined")
    write_chain(decl, "linear_silu", "F.linear(x, w) then SiLU: not an epilogue cuBLASLt has.",
                [op("aten::linear.default", ["x", "w"], "v0", f32), op("aten::silu.default", ["v0"], "v1", f32)],
                ["return torch.ops.aten.silu.default(torch.ops.aten.linear.default(x, w))"],
                {"x": ([4, 8], f32, None), "w": ([6, 8], f32, None)}, [4, 6], f32,
                declines="aten::silu.default after the GEMM is not an epilogue cuBLASLt fuses")
    write_chain(decl, "linear_bias_add", "F.linear(x, w, b) + c: a second bias.",
                [op("aten::linear.default", ["x", "w", "b"], "v0", f32), op("aten::add.Tensor", ["v0", "c"], "v1", f32)],
                ["return torch.ops.aten.add.Tensor(torch.ops.aten.linear.default(x, w, b), c)"],
                {"x": ([4, 8], f32, None), "w": ([6, 8], f32, None), "b": ([6], f32, None), "c": ([6], f32, None)},
                [4, 6], f32, declines="cuBLASLt adds one bias")
    write_chain(decl, "linear_gelu_relu", "F.linear(x, w), GELU, then ReLU: two activations.",
                [op("aten::linear.default", ["x", "w"], "v0", f32), op("aten::gelu.default", ["v0"], "v1", f32),
                 op("aten::relu.default", ["v1"], "v2", f32)],
                ["v1 = torch.ops.aten.gelu.default(torch.ops.aten.linear.default(x, w))",
                 "return torch.ops.aten.relu.default(v1)"],
                {"x": ([4, 8], f32, None), "w": ([6, 8], f32, None)}, [4, 6], f32,
                declines="cuBLASLt applies one activation")


def tests():
    t = HERE
    write(t, "linear_bf16_3d", "F.linear(x, w) of a [2, 9, 40] bfloat16 input: leading dims fold into rows.",
          "aten::linear.default", T[:2], {"x": ([2, 9, 40], "bfloat16", None), "w": ([24, 40], "bfloat16", None)},
          [2, 9, 24], "bfloat16")
    write(t, "linear_bias_f32", "F.linear(x, w, b) in float32 (the bias epilogue).",
          "aten::linear.default", T[:3],
          {"x": ([17, 33], "float32", None), "w": ([20, 33], "float32", None), "b": ([20], "float32", None)},
          [17, 20], "float32")
    write(t, "mm_f16_wt", "mm(x, w.t()) in float16: the weight captured as a transposed view, stored [N, K].",
          "aten::mm.default", T[:2], {"x": ([12, 48], "float16", None), "w": ([20, 48], "float16", [1, 0])},
          [12, 20], "float16")
    write(t, "mm_f32_at", "mm(a.t(), b) in float32: A captured transposed, stored [K, M].",
          "aten::mm.default", T[:2], {"a": ([24, 10], "float32", [1, 0]), "b": ([24, 14], "float32", None)},
          [10, 14], "float32")
    write(t, "bmm_bf16", "bmm of [3, 16, 32] by [3, 32, 24] bfloat16 (a strided batch).",
          "aten::bmm.default", T[:2], {"a": ([3, 16, 32], "bfloat16", None), "b": ([3, 32, 24], "bfloat16", None)},
          [3, 16, 24], "bfloat16")
    write(t, "matmul_f32_batched", "matmul of [2, 8, 16] by [2, 16, 12] float32, the second stored transposed.",
          "aten::matmul.default", T[:2],
          {"a": ([2, 8, 16], "float32", None), "b": ([2, 12, 16], "float32", [0, 2, 1])}, [2, 8, 12], "float32")
    write(t, "matmul_bf16_4d", "matmul of [1, 2, 24, 32] by [1, 2, 32, 40] bfloat16, the second a transposed view "
          "(eager attention's q @ k.transpose(-2, -1)): the leading dims are one batch of 2.",
          "aten::matmul.default", T[:2],
          {"a": ([1, 2, 24, 32], "bfloat16", None), "b": ([1, 2, 40, 32], "bfloat16", [0, 1, 3, 2])},
          [1, 2, 24, 40], "bfloat16")
    write(t, "addmm_bf16", "addmm(b, x, w.t()) in bfloat16: nn.Linear's decomposition, bias in the epilogue.",
          "aten::addmm.default", T[:3],
          {"b": ([24], "bfloat16", None), "x": ([16, 64], "bfloat16", None), "w": ([24, 64], "bfloat16", [1, 0])},
          [16, 24], "bfloat16")
    write(t, "addmm_bf16_tails", "addmm(b, x, w.t()) in bfloat16 with tails on every axis: M = 328 (two 128-row "
          "tiles and 72 rows: a pair of row tiles whose second has no rows), N = 392 (a partial column tile), K = 200 "
          "(a partial k tile).", "aten::addmm.default", T[:3],
          {"b": ([392], "bfloat16", None), "x": ([328, 200], "bfloat16", None),
           "w": ([392, 200], "bfloat16", [1, 0])}, [328, 392], "bfloat16")
    decl = os.path.join(t, "declined")
    write(decl, "addmm_beta", "addmm with beta=0.5.", "aten::addmm.default", T[:3],
          {"b": ([8], "float32", None), "x": ([4, 8], "float32", None), "w": ([8, 8], "float32", None)},
          [4, 8], "float32", kwargs={"beta": 0.5}, declines="beta or alpha other than 1")
    write(decl, "mm_f64", "mm in float64.", "aten::mm.default", T[:2],
          {"a": ([4, 8], "float64", None), "b": ([8, 6], "float64", None)}, [4, 6], "float64",
          declines="float64 is not a cuBLASLt dtype of the family")
    write(decl, "matmul_broadcast_4d", "matmul of [1, 2, 8, 16] by [2, 1, 16, 12]: batch dims broadcast against "
          "each other (4 products from 2 matrices each).", "aten::matmul.default", T[:2],
          {"a": ([1, 2, 8, 16], "float32", None), "b": ([2, 1, 16, 12], "float32", None)}, [2, 2, 8, 12], "float32",
          declines="batch dims differ")
    write(decl, "bmm_broadcast_batch", "bmm whose B is permuted across its batch dims.", "aten::bmm.default",
          T[:2], {"a": ([2, 4, 8], "float32", None), "b": ([8, 2, 6], "float32", [1, 0, 2])}, [2, 4, 6], "float32",
          declines="permuted across its batch dims")


def gated(w):
    """Gated pairs, the front of a GeGLU/SwiGLU MLP (kiln_gemm_gated; only the wgmma family takes them): GELU-tanh
    between the two linears in bfloat16, and SiLU after both in float16 with the product reading the up
    projection first."""
    bf, f16 = "bfloat16", "float16"
    geglu = ([op("aten::linear.default", ["x", "wg"], "v0", bf),
              op("aten::gelu.default", ["v0"], "va", bf, approximate="tanh"),
              op("aten::linear.default", ["x", "wu"], "v1", bf),
              op("aten::mul.Tensor", ["va", "v1"], "v2", bf)],
             ["g = torch.ops.aten.linear.default(x, wg)", "u = torch.ops.aten.linear.default(x, wu)",
              "a = torch.ops.aten.gelu.default(g, approximate='tanh')", "return torch.ops.aten.mul.Tensor(a, u)"])
    write_chain(w, "gated_gelu_bf16", "The front of a GeGLU MLP (Gemma-4's): gelu_tanh(x @ wgᵀ) * (x @ wuᵀ), "
                "bfloat16, no bias. Not a cuBLASLt epilogue (the cublaslt family declines it); kiln's wgmma GEMM "
                "computes both projections in one tile and the product in its epilogue.", *geglu,
                {"x": ([200, 96], bf, None), "wg": ([72, 96], bf, None), "wu": ([72, 96], bf, None)}, [200, 72], bf,
                pattern="gemm_gated", prefix="gemm_")
    write_chain(w, "gated_gelu_deep_bf16", "gated_gelu_bf16 with K = 1024 (16 steps of 64 k: the stage ring wraps "
                "several times, which the small problems never do), M = 136, N = 96.", *geglu,
                {"x": ([136, 1024], bf, None), "wg": ([96, 1024], bf, None), "wu": ([96, 1024], bf, None)},
                [136, 96], bf, pattern="gemm_gated", prefix="gemm_")
    write_chain(w, "gated_silu_f16", "The front of a SwiGLU MLP: (x @ wuᵀ) * silu(x @ wgᵀ), float16, both "
                "linears before the activation and the product reading the up projection first.",
                [op("aten::linear.default", ["x", "wg"], "v0", f16),
                 op("aten::linear.default", ["x", "wu"], "v1", f16),
                 op("aten::silu.default", ["v0"], "va", f16),
                 op("aten::mul.Tensor", ["v1", "va"], "v2", f16)],
                ["g = torch.ops.aten.linear.default(x, wg)", "u = torch.ops.aten.linear.default(x, wu)",
                 "a = torch.ops.aten.silu.default(g)", "return torch.ops.aten.mul.Tensor(u, a)"],
                {"x": ([40, 64], f16, None), "wg": ([48, 64], f16, None), "wu": ([48, 64], f16, None)}, [40, 48], f16,
                pattern="gemm_gated", prefix="gemm_")


def scaled(c, w):
    """torch._scaled_mm (fp8 x [M, K] @ w [N, K]ᵀ, w captured as the transposed view w.t()): per-tensor scales
    writing bfloat16 (both GEMM families), e4m3 by e5m2 writing float32 (cuBLASLt only: kiln's wgmma GEMM takes
    one fp8 format for both), and into ../wgmma a scale a row of x and a column of w plus a bias (kiln's wgmma
    GEMM only: kiln drives cuBLASLt's per-tensor scales; PyTorch's cpu build scales per tensor only, so that
    reference is the arithmetic _scaled_mm does)."""
    e4, e5, f32, bf = "float8_e4m3fn", "float8_e5m2", "float32", "bfloat16"
    args = T + [{"tensor": 3}, None, None, "torch.bfloat16"]
    write(c, "scaled_mm_e4m3_bf16", "torch._scaled_mm(x, w.t(), scale_a, scale_b, out_dtype=torch.bfloat16), "
          "float8_e4m3fn with one float32 scale each, M = 72, N = 144, K = 160 (tails of every tile; torch's CUDA "
          "_scaled_mm takes N and K multiples of 16 only).",
          "aten::_scaled_mm.default", args,
          {"x": ([72, 160], e4, None), "w": ([144, 160], e4, [1, 0]), "sa": ([], f32, None), "sb": ([], f32, None)},
          [72, 144], bf, body="return torch.ops.aten._scaled_mm.default(x, w, sa, sb, None, None, torch.bfloat16)",
          flops=2 * 72 * 144 * 160)
    # K deep enough that the stage ring wraps several times (16 steps of 128 fp8 k): the small problems above
    # fit in one pass of the stages, which left the wrap untested on every point.
    write(w, "scaled_mm_e4m3_deep_bf16", "torch._scaled_mm(x, w.t(), scale_a, scale_b, out_dtype=torch.bfloat16), "
          "float8_e4m3fn, one float32 scale each, M = 136, N = 144, K = 2048 (the stage ring wraps).",
          "aten::_scaled_mm.default", args,
          {"x": ([136, 2048], e4, None), "w": ([144, 2048], e4, [1, 0]), "sa": ([], f32, None),
           "sb": ([], f32, None)},
          [136, 144], bf, prefix="gemm_",
          body="return torch.ops.aten._scaled_mm.default(x, w, sa, sb, None, None, torch.bfloat16)",
          flops=2 * 136 * 144 * 2048)
    write(c, "scaled_mm_e4m3_fast_bf16", "torch._scaled_mm(x, w.t(), scale_a, scale_b, out_dtype=torch.bfloat16, "
          "use_fast_accum=True): the products may be summed in the tensor cores' own precision.",
          "aten::_scaled_mm.default", args + [True],
          {"x": ([64, 256], e4, None), "w": ([128, 256], e4, [1, 0]), "sa": ([], f32, None), "sb": ([], f32, None)},
          [64, 128], bf,
          body="return torch.ops.aten._scaled_mm.default(x, w, sa, sb, None, None, torch.bfloat16, True)",
          flops=2 * 64 * 128 * 256)
    write(c, "scaled_mm_e4m3_e5m2_f32", "torch._scaled_mm of float8_e4m3fn by float8_e5m2 writing float32.",
          "aten::_scaled_mm.default", T + [{"tensor": 3}, None, None, "torch.float32"],
          {"x": ([32, 64], e4, None), "w": ([48, 64], e5, [1, 0]), "sa": ([], f32, None), "sb": ([], f32, None)},
          [32, 48], f32, body="return torch.ops.aten._scaled_mm.default(x, w, sa, sb, None, None, torch.float32)",
          flops=2 * 32 * 48 * 64)
    write(w, "scaled_mm_rowwise_bias_e4m3_bf16", "torch._scaled_mm(x, w.t(), scale_a [M, 1], scale_b [1, N], "
          "bias, out_dtype=torch.bfloat16): a scale a row of x and a column of w (PyTorch's rowwise fp8), "
          "M = 200, N = 72, K = 96.", "aten::_scaled_mm.default", T + [{"tensor": 3}, {"tensor": 4}, None,
                                                                      "torch.bfloat16"],
          {"x": ([200, 96], e4, None), "w": ([72, 96], e4, [1, 0]), "sa": ([200, 1], f32, None),
           "sb": ([1, 72], f32, None), "b": ([72], bf, None)},
          [200, 72], bf, prefix="gemm_",
          body="return ((x.float() @ w.float()) * sa * sb + b.float()).to(torch.bfloat16)", flops=2 * 200 * 72 * 96)


def convolutions(c):
    """1x1 convolutions as GEMMs over the channels: channels-last bfloat16 with a bias (a linear of [N·H·W, Cin]
    rows, D channels-last), NCHW float16 (per image, w [Cout, Cin] @ x [Cin, H·W], the weight shared by the batch;
    wgmma declines it: B is stored [K, N]); declined: a 3x3 kernel, stride 2, NCHW with a bias (a row's bias),
    float32 (PyTorch runs it on TF32)."""
    bf, f16, f32 = "bfloat16", "float16", "float32"
    cl = [0, 2, 3, 1]
    write(c, "conv1x1_cl_bias_bf16", "conv2d(x, w, b) with a 1x1 kernel, channels-last bfloat16 (ResNet-50's "
          "bottleneck 1x1 convolutions in the bf16 channels-last example): x [N·H·W, Cin] @ w [Cout, Cin]ᵀ + b.",
          "aten::conv2d.default", T[:3],
          {"x": ([2, 6, 5, 48], bf, cl), "w": ([40, 48, 1, 1], bf, None), "b": ([40], bf, None)},
          [2, 6, 5, 40], bf, out_perm=cl, flops=2 * 2 * 6 * 5 * 40 * 48)
    write(c, "conv1x1_nchw_f16", "conv2d(x, w) with a 1x1 kernel, NCHW float16: for each of the 3 images, "
          "w [Cout, Cin] @ x [Cin, H·W].", "aten::conv2d.default", T[:2],
          {"x": ([3, 32, 4, 7], f16, None), "w": ([24, 32, 1, 1], f16, None)}, [3, 24, 4, 7], f16,
          flops=2 * 3 * 24 * 28 * 32)
    d = os.path.join(c, "declined")
    write(d, "conv3x3_cl_bf16", "conv2d with a 3x3 kernel and padding 1: not one GEMM.", "aten::conv2d.default",
          T[:2] + [None, [1, 1], [1, 1]], {"x": ([1, 4, 4, 16], bf, cl), "w": ([8, 16, 3, 3], bf, None)},
          [1, 4, 4, 8], bf, out_perm=cl, declines="only a 2-D convolution with a 1x1 kernel")
    write(d, "conv1x1_stride2_cl_bf16", "conv2d with a 1x1 kernel and stride 2 (ResNet's downsampling shortcut): "
          "the rows it reads are not one strided matrix.", "aten::conv2d.default", T[:2] + [None, [2, 2]],
          {"x": ([1, 4, 4, 16], bf, cl), "w": ([8, 16, 1, 1], bf, None)}, [1, 2, 2, 8], bf, out_perm=cl,
          declines="only a 2-D convolution with a 1x1 kernel, stride 1")
    write(d, "conv1x1_nchw_bias_bf16", "conv2d(x, w, b) with a 1x1 kernel, NCHW (the VAE decoder's shortcut): the "
          "bias is a row's of the GEMM.", "aten::conv2d.default", T[:3],
          {"x": ([1, 16, 4, 4], bf, None), "w": ([8, 16, 1, 1], bf, None), "b": ([8], bf, None)}, [1, 8, 4, 4], bf,
          declines="the bias is a row's")
    write(d, "conv1x1_cl_f32", "conv2d with a 1x1 kernel in float32: PyTorch runs it on TF32.",
          "aten::conv2d.default", T[:2], {"x": ([1, 4, 4, 16], f32, cl), "w": ([8, 16, 1, 1], f32, None)},
          [1, 4, 4, 8], f32, out_perm=cl, declines="16-bit convolutions")


def bench():
    b = os.path.join(ROOT, "bench", "problems")
    write(b, "gemm_linear_bf16_4096x9216x2304",
          "Gemma-4's MLP gate/up projection: F.linear(x [4096, 2304], w [9216, 2304]) in bfloat16.",
          "aten::linear.default", T[:2],
          {"x": ([4096, 2304], "bfloat16", None), "w": ([9216, 2304], "bfloat16", None)}, [4096, 9216], "bfloat16", prefix="")


if __name__ == "__main__":
    tests()
    chains(HERE)
    gated(os.path.join(HERE, "..", "wgmma"))
    scaled(HERE, os.path.join(HERE, "..", "wgmma"))
    convolutions(HERE)
    bench()
