"""Writes the problem directories of kiln's groupnorm and batchnorm families: the small test problems
next to this file (tests/data/families/chnorm/<name>/) and the GPU rows under bench/problems/.

    python tests/data/families/chnorm/gen_problems.py [--tests] [--bench]   (both by default)

Every problem is in SOL-ExecBench's format with a "kiln" object the families' matchers read: "aten"
(one captured call, as kiln.capture writes it), "module" (a captured leaf module: its reference is
the straight-line forward and its "ops") or "chain" (a hand-written fused pattern in kiln's op-chain form,
docs/formats.md "Op chains"); one test problem has no "kiln" object and is recognised by op_type.
Activations are `random` inputs; batch norm's per-channel parameters come from a small safetensors
file (running_var must be positive, and the gate's random sets keep each tensor's range), so the
files stay small at any activation size. Output is deterministic (fixed seeds, sorted keys).
"""

from __future__ import annotations

import argparse
import json
import os
import uuid

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
NAMESPACE = uuid.UUID("6b696c6e-6368-6e6f-726d-000000000001")
DT = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
CL = [0, 2, 3, 1]  # channels-last: stored dim k is captured dim CL[k]


def axes_of(*shapes) -> dict:
    """Const axes named by value, as capture writes them."""
    return {f"n{s}": {"type": "const", "value": s} for shape in shapes for s in shape}


def names(shape) -> list:
    return [f"n{s}" for s in shape]


def stored(shape, perm):
    return [shape[d] for d in perm] if perm else list(shape)


def layout(shape, perm=None) -> dict:
    if not perm:
        return {"stored": "contiguous", "stored_shape": list(shape)}
    return {"stored": "memory_order", "stored_shape": stored(shape, perm), "permute": list(perm)}


def inverse(perm):
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


def restore(name, perm) -> str:
    return f"    {name} = {name}.permute({', '.join(map(str, inverse(perm)))})  # stored in memory order\n"


def write(base: str, name: str, definition: dict, inputs: dict, params: dict, workloads=None) -> None:
    """inputs: {name: "random" | "params"}; params: tensors for params.safetensors."""
    d = os.path.join(base, name)
    os.makedirs(d, exist_ok=True)
    definition = dict({"name": name}, **definition)
    with open(os.path.join(d, "definition.json"), "w") as f:
        json.dump(definition, f, indent=1, sort_keys=False)
        f.write("\n")
    if params:
        import safetensors.torch
        os.makedirs(os.path.join(d, "tensors"), exist_ok=True)
        safetensors.torch.save_file({k: v.contiguous() for k, v in params.items()},
                                    os.path.join(d, "tensors", "params.safetensors"))
    lines = []
    for k, axes in enumerate(workloads or [{}]):
        desc = {}
        for n, kind in inputs.items():
            if kind == "random":
                desc[n] = {"type": "random"}
            else:
                desc[n] = {"type": "safetensors", "path": "tensors/params.safetensors", "tensor_key": n}
        lines.append({"uuid": str(uuid.uuid5(NAMESPACE, f"{name}/{k}")), "axes": axes, "inputs": desc})
    with open(os.path.join(d, "workload.jsonl"), "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")


def bn_params(c: int, dtype: str, seed: int, affine: bool = True) -> dict:
    g = torch.Generator().manual_seed(seed)
    t = DT[dtype]
    p = {"running_mean": (0.5 * torch.randn(c, generator=g)).to(t),
         "running_var": (0.2 + torch.rand(c, generator=g)).to(t)}
    if affine:
        p["weight"] = (1 + 0.3 * torch.randn(c, generator=g)).to(t)
        p["bias"] = (0.2 * torch.randn(c, generator=g)).to(t)
    return p


def tensor_specs(specs: dict) -> dict:
    return {n: {"shape": names(s) if isinstance(s[0], int) else s, "dtype": dt} for n, (s, dt) in specs.items()}


# ---------------------------------------------------------------------------------------------
# group norm


def group_norm(base, name, shape, groups, dtype, eps=1e-6, silu=False, wdtype=None, affine=True,
               native=False, description=""):
    """aten::group_norm.default (or native_group_norm with mean/rstd), or a group_norm -> silu chain."""
    n, c = shape[0], shape[1]
    hw = 1
    for s in shape[2:]:
        hw *= s
    wdtype = wdtype or dtype
    ins = {"input": (shape, dtype)}
    if affine:
        ins["weight"] = ([c], wdtype)
        ins["bias"] = ([c], wdtype)
    outs = {"out0": (shape, dtype)}
    w = ({"tensor": 1}, {"tensor": 2}) if affine else (None, None)
    if native:
        outs["out1"] = ([n, groups], dtype if wdtype == dtype else "float32")
        outs["out2"] = ([n, groups], dtype if wdtype == dtype else "float32")
        aten = "aten::native_group_norm.default"
        args = [{"tensor": 0}, w[0], w[1], n, c, hw, groups, eps]
        call = f"torch.ops.aten.native_group_norm.default(input, {'weight' if affine else 'None'}, " \
               f"{'bias' if affine else 'None'}, {n}, {c}, {hw}, {groups}, {eps!r})"
    else:
        aten = "aten::group_norm.default"
        args = [{"tensor": 0}, groups, w[0], w[1], eps]
        call = f"torch.ops.aten.group_norm.default(input, {groups}, {'weight' if affine else 'None'}, " \
               f"{'bias' if affine else 'None'}, {eps!r})"
    params = ", ".join(ins)
    if silu:
        named = [{"ref": "input"} if a == {"tensor": 0} else {"ref": "weight"} if a == {"tensor": 1}
                 else {"ref": "bias"} if a == {"tensor": 2} else a for a in args]
        kiln = {"kind": "chain", "ops": [
            {"aten": aten, "args": named, "out": "v0"},
            {"aten": "aten::silu.default", "args": [{"ref": "v0"}], "out": "out0"}], "outputs": ["out0"]}
        body = f"    v0 = {call}\n    return torch.ops.aten.silu.default(v0)\n"
        op_type = "group_norm_silu"
    else:
        kiln = {"kind": "aten", "aten": aten, "args": {"args": args, "kwargs": {}}}
        body = f"    result = {call}\n"
        body += "    return (result[0], result[1], result[2])\n" if native else "    return result\n"
        op_type = "group_norm"
    kiln["layouts"] = {k: layout(s) for k, (s, _) in {**ins, **outs}.items()}
    kiln["shapes"] = {k: list(s) for k, (s, _) in {**ins, **outs}.items()}
    definition = {
        "op_type": op_type,
        "description": description,
        "axes": axes_of(*[s for s, _ in {**ins, **outs}.values()]),
        "inputs": tensor_specs(ins),
        "outputs": tensor_specs(outs),
        "reference": f"import torch\n\n\n@torch.no_grad()\ndef run({params}):\n{body}",
        "kiln": kiln,
    }
    write(base, name, definition, {k: "random" for k in ins}, {})


# ---------------------------------------------------------------------------------------------
# batch norm


def batch_norm(base, name, shape, dtype, variant="", channels_last=False, eps=1e-5, seed=0,
               aten="aten::batch_norm.default", save_stats=False, description=""):
    """variant "", "relu", "add_relu" (a chain); aten names the batch norm overload."""
    c = shape[1]
    perm = CL if channels_last else None
    ins = {"input": (stored(shape, perm), dtype), "weight": ([c], dtype), "bias": ([c], dtype),
           "running_mean": ([c], dtype), "running_var": ([c], dtype)}
    if "add" in variant:
        ins["residual"] = (stored(shape, perm), dtype)
    outs = {"out0": (stored(shape, perm), dtype)}
    op = aten.split("::")[1]
    tensors = [{"tensor": i} for i in range(5)]
    if op == "batch_norm.default":
        args = tensors + [False, 0.1, eps, True]
        call = f"torch.ops.aten.batch_norm.default(input, weight, bias, running_mean, running_var, False, 0.1, {eps!r}, True)"
    else:  # _native_batch_norm_legit_no_training
        args = tensors + [0.1, eps]
        call = f"torch.ops.aten.{op}(input, weight, bias, running_mean, running_var, 0.1, {eps!r})[0]"
    body = "".join(restore(n, perm) for n in ins if perm and n in ("input", "residual"))
    body += f"    v0 = {call}\n"
    named = [{"ref": n} for n in ("input", "weight", "bias", "running_mean", "running_var")] + args[5:]
    steps = [{"aten": aten, "args": named, "out": "v0"}]
    last = "v0"
    if "add" in variant:
        body += "    v1 = torch.ops.aten.add.Tensor(v0, residual)\n"
        steps.append({"aten": "aten::add.Tensor", "args": [{"ref": "v0"}, {"ref": "residual"}], "out": "v1"})
        last = "v1"
    if "relu" in variant:
        body += f"    v2 = torch.ops.aten.relu.default({last})\n"
        steps.append({"aten": "aten::relu.default", "args": [{"ref": last}], "out": "v2"})
        last = "v2"
    ret = f"{last}.permute({', '.join(map(str, perm))})" if perm else last
    if save_stats:
        # what the CUDA kernel returns in inference (the cpu one returns empty tensors)
        outs["out1"] = ([c], "float32")
        outs["out2"] = ([c], "float32")
        body += (f"    return ({ret}, running_mean.float(), "
                 f"1.0 / torch.sqrt(running_var.float() + {eps!r}))\n")
    else:
        body += f"    return {ret}\n"
    if len(steps) == 1:
        kiln = {"kind": "aten", "aten": aten, "args": {"args": args, "kwargs": {}}}
    else:
        kiln = {"kind": "chain", "ops": steps, "outputs": [last]}
    captured = {k: (shape if k in ("input", "residual", "out0") else s) for k, (s, _) in {**ins, **outs}.items()}
    kiln["layouts"] = {k: layout(captured[k], perm if k in ("input", "residual", "out0") else None)
                       for k in captured}
    kiln["shapes"] = {k: list(s) for k, s in captured.items()}
    definition = {
        "op_type": "batch_norm" + (f"_{variant}" if variant else ""),
        "description": description,
        "axes": axes_of(*[s for s, _ in {**ins, **outs}.values()]),
        "inputs": tensor_specs(ins),
        "outputs": tensor_specs(outs),
        "reference": f"import torch\n\n\n@torch.no_grad()\ndef run({', '.join(ins)}):\n{body}",
        "kiln": kiln,
    }
    kinds = {k: ("random" if k in ("input", "residual") else "params") for k in ins}
    write(base, name, definition, kinds, bn_params(c, dtype, seed))


# ---------------------------------------------------------------------------------------------


def tests(base: str) -> None:
    d = "kiln's groupnorm/batchnorm family tests: "
    group_norm(base, "gn_native_f32", [2, 8, 3, 3], 4, "float32", eps=1e-5, native=True,
               description=d + "native_group_norm with mean/rstd outputs, H*W = 9 (scalar access only)")
    group_norm(base, "gn_mixed_bf16", [1, 64, 5, 7], 32, "bfloat16", wdtype="float32",
               description=d + "bf16 activations, fp32 weight and bias, H*W = 35")
    group_norm(base, "gn_silu_f32", [1, 32, 16, 16], 8, "float32", silu=True,
               description=d + "group_norm -> silu chain, fp32, a row of 1024 elements")
    group_norm(base, "gn_silu_bf16", [1, 64, 32, 32], 32, "bfloat16", silu=True, affine=False,
               description=d + "group_norm -> silu chain, bf16, no affine")
    # a module that casts to float around the norm (Stable Diffusion's GroupNorm32)
    shape = [2, 16, 8, 8]
    definition = {
        "op_type": "module:GroupNorm32",
        "description": d + "leaf module: to(float32) -> group_norm -> to(bfloat16)",
        "axes": axes_of(shape, [16]),
        "inputs": {"input0": {"shape": names(shape), "dtype": "bfloat16"},
                   "weight": {"shape": ["n16"], "dtype": "float32"},
                   "bias": {"shape": ["n16"], "dtype": "float32"}},
        "outputs": {"out0": {"shape": names(shape), "dtype": "bfloat16"}},
        "reference": ("import torch\n\n\n@torch.no_grad()\ndef run(input0, weight, bias):\n"
                      "    v0 = torch.ops.aten.to.dtype(input0, torch.float32)\n"
                      "    v1 = torch.ops.aten.group_norm.default(v0, 4, weight, bias)\n"
                      "    v2 = torch.ops.aten.to.dtype(v1, torch.bfloat16)\n"
                      "    return v2\n"),
        "kiln": {"kind": "module", "module_class": "GroupNorm32",
                 "layouts": {"input0": layout(shape), "weight": layout([16]), "bias": layout([16]),
                             "out0": layout(shape)},
                 "ops": [{"aten": "aten::to.dtype", "args": [{"ref": "input0"}, "torch.float32"], "out": "v0"},
                         {"aten": "aten::group_norm.default",
                          "args": [{"ref": "v0"}, 4, {"ref": "weight"}, {"ref": "bias"}], "out": "v1"},
                         {"aten": "aten::to.dtype", "args": [{"ref": "v1"}, "torch.bfloat16"], "out": "v2"}],
                 "outputs": ["v2"]},
    }
    write(base, "gn_module_cast_bf16", definition, {"input0": "random", "weight": "random", "bias": "random"}, {})
    # a VAE block's residual add joined to the next GroupNorm + SiLU, the sum returned first
    shape = [2, 32, 12, 12]
    ins = {"input0": (shape, "bfloat16"), "input1": (shape, "bfloat16"), "weight": ([32], "bfloat16"),
           "bias": ([32], "bfloat16")}
    outs = {"out0": (shape, "bfloat16"), "out1": (shape, "bfloat16")}
    definition = {
        "op_type": "chain",
        "description": d + "add -> group_norm -> silu chain returning the sum and the result, bf16",
        "axes": axes_of(shape, [32]),
        "inputs": tensor_specs(ins),
        "outputs": tensor_specs(outs),
        "reference": ("import torch\n\n\n@torch.no_grad()\ndef run(input0, input1, weight, bias):\n"
                      "    v0 = torch.ops.aten.add.Tensor(input0, input1)\n"
                      "    v1 = torch.ops.aten.group_norm.default(v0, 8, weight, bias, 1e-06)\n"
                      "    v2 = torch.ops.aten.silu.default(v1)\n"
                      "    return v0, v2\n"),
        "kiln": {"kind": "chain",
                 "ops": [{"aten": "aten::add.Tensor", "args": [{"ref": "input0"}, {"ref": "input1"}], "out": "v0"},
                         {"aten": "aten::group_norm.default",
                          "args": [{"ref": "v0"}, 8, {"ref": "weight"}, {"ref": "bias"}, 1e-06], "out": "v1"},
                         {"aten": "aten::silu.default", "args": [{"ref": "v1"}], "out": "v2"}],
                 "outputs": ["v0", "v2"],
                 "layouts": {k: layout(s) for k, (s, _) in {**ins, **outs}.items()}},
    }
    write(base, "gn_add_silu_bf16", definition, {k: "random" for k in ins}, {})
    # hand-written: no "kiln" object, op_type, var axes, a row of 1 element and one of 12*4097
    definition = {
        "op_type": "group_norm_silu",
        "description": d + "hand-written (no kiln object): op_type, groups from a const axis, eps in the reference",
        "axes": {"batch": {"type": "var"}, "length": {"type": "var"},
                 "channels": {"type": "const", "value": 12}, "num_groups": {"type": "const", "value": 3}},
        "inputs": {"x": {"shape": ["batch", "channels", "length"], "dtype": "float16"},
                   "weight": {"shape": ["channels"], "dtype": "float16"},
                   "bias": {"shape": ["channels"], "dtype": "float16"}},
        "outputs": {"y": {"shape": ["batch", "channels", "length"], "dtype": "float16"}},
        "reference": ("import torch\n\nEPS = 1e-5\n\n\n@torch.no_grad()\ndef run(x, weight, bias):\n"
                      "    y = torch.nn.functional.group_norm(x, 3, weight, bias, EPS)\n"
                      "    return torch.nn.functional.silu(y)\n"),
    }
    write(base, "gn_handwritten_f16", definition, {"x": "random", "weight": "random", "bias": "random"}, {},
          workloads=[{"batch": 1, "length": 1}, {"batch": 3, "length": 7}, {"batch": 2, "length": 4097}])

    batch_norm(base, "bn_f32_nchw", [2, 16, 7, 7], "float32", seed=1,
               description=d + "batch_norm fp32 NCHW, 7x7 maps (vectors straddle channels)")
    batch_norm(base, "bn_relu_bf16_cl", [4, 32, 5, 5], "bfloat16", "relu", channels_last=True, seed=2,
               description=d + "batch_norm -> relu chain, bf16 channels-last")
    batch_norm(base, "bn_add_relu_f32", [2, 64, 8, 8], "float32", "add_relu", seed=3,
               description=d + "batch_norm -> add -> relu chain, fp32 NCHW")
    batch_norm(base, "bn_legit_f16_cl_stats", [3, 24, 4, 4], "float16", channels_last=True, seed=4,
               aten="aten::_native_batch_norm_legit_no_training.default", save_stats=True,
               description=d + "_native_batch_norm_legit_no_training with CUDA's saved mean/invstd outputs, fp16 channels-last")
    # hand-written BatchNorm1d + ReLU: [batch, 24], var batch
    definition = {
        "op_type": "batch_norm_relu",
        "description": d + "hand-written (no kiln object) BatchNorm1d + ReLU",
        "axes": {"batch": {"type": "var"}, "features": {"type": "const", "value": 24}},
        "inputs": {"x": {"shape": ["batch", "features"], "dtype": "float32"},
                   "weight": {"shape": ["features"], "dtype": "float32"},
                   "bias": {"shape": ["features"], "dtype": "float32"},
                   "running_mean": {"shape": ["features"], "dtype": "float32"},
                   "running_var": {"shape": ["features"], "dtype": "float32"}},
        "outputs": {"y": {"shape": ["batch", "features"], "dtype": "float32"}},
        "reference": ("import torch\n\n\n@torch.no_grad()\ndef run(x, weight, bias, running_mean, running_var):\n"
                      "    y = torch.nn.functional.batch_norm(x, running_mean, running_var, weight, bias, False, 0.1, 1e-5)\n"
                      "    return torch.relu(y)\n"),
    }
    write(base, "bn_handwritten_1d", definition,
          {"x": "random", "weight": "params", "bias": "params", "running_mean": "params", "running_var": "params"},
          bn_params(24, "float32", 5), workloads=[{"batch": 1}, {"batch": 5}, {"batch": 33}])


def bench(base: str) -> None:
    vae = "SD3.5-like VAE decoder group norm (32 groups, eps 1e-6): "
    for dtype, short in (("float32", "f32"), ("bfloat16", "bf16")):
        for shape in ([1, 512, 256, 256], [1, 128, 1024, 1024]):
            tag = "x".join(map(str, shape[1:]))
            group_norm(base, f"groupnorm_{short}_{tag}", shape, 32, dtype,
                       description=vae + f"{shape} {dtype}")
            group_norm(base, f"groupnorm_silu_{short}_{tag}", shape, 32, dtype, silu=True,
                       description=vae + f"{shape} {dtype}, followed by SiLU (fused)")
    rn = "ResNet-50 inference batch norm: "
    rows = [([32, 256, 56, 56], "float32", False), ([32, 64, 112, 112], "float32", False),
            ([32, 2048, 7, 7], "float32", False), ([128, 256, 56, 56], "bfloat16", True)]
    for k, (shape, dtype, cl) in enumerate(rows):
        tag = "x".join(map(str, shape)) + ("_cl" if cl else "")
        short = "f32" if dtype == "float32" else "bf16"
        for variant in ("", "relu", "add_relu"):
            name = "batchnorm" + (f"_{variant}" if variant else "") + f"_{short}_{tag}"
            batch_norm(base, name, shape, dtype, variant, channels_last=cl, seed=10 + k,
                       description=rn + f"{shape} {dtype} {'channels-last' if cl else 'NCHW'}"
                       + (f", {variant.replace('_', ' + ')} fused" if variant else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tests", action="store_true")
    ap.add_argument("--bench", action="store_true")
    a = ap.parse_args()
    both = not (a.tests or a.bench)
    if a.tests or both:
        tests(HERE)
    if a.bench or both:
        bench(os.path.join(ROOT, "bench", "problems"))


if __name__ == "__main__":
    main()
