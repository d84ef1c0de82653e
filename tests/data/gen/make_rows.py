"""Writes the generator's GPU rows (docs/generator.md) under tests/data/gen/rows/: the problems issue 15
asks the device run to time that no hand-written family matches, each as `kiln capture` writes it (a
"kiln" object with the aten call or the module's ops; random inputs instead of stored tensors).
tests/c/test_gen_ir_cuda.c compiles every row's start point and a sample of its space with NVRTC for
sm_90; bench/generator_device.sh times them on the H200.

    python tests/data/gen/make_rows.py      (from the repository root)
"""

import json
import os
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
NS = uuid.UUID("6b696c6e-6765-6e32-0000-000000000001")


def axes_of(*shapes):
    axes = {}
    for shape in shapes:
        for s in shape:
            axes[f"n{s}"] = {"type": "const", "value": s}
    return axes


def names(shape):
    return [f"n{s}" for s in shape]


def contiguous(shape):
    return {"stored": "contiguous", "stored_shape": list(shape)}


def write(name, description, inputs, outputs, reference, kiln):
    d = os.path.join(HERE, "rows", name)
    os.makedirs(d, exist_ok=True)
    shapes = [s for s, _ in inputs.values()] + [s for s, _ in outputs.values()]
    kiln.setdefault("layouts", {n: contiguous(s) for n, (s, _) in {**inputs, **outputs}.items()})
    definition = {
        "name": name, "description": description, "axes": axes_of(*shapes),
        "custom_inputs_entrypoint": None,
        "inputs": {n: {"shape": names(s), "dtype": t} for n, (s, t) in inputs.items()},
        "outputs": {n: {"shape": names(s), "dtype": t} for n, (s, t) in outputs.items()},
        "reference": reference, "constraints": [], "kiln": kiln,
    }
    with open(os.path.join(d, "definition.json"), "w") as f:
        json.dump(definition, f, indent=2)
        f.write("\n")
    workload = {"uuid": str(uuid.uuid5(NS, name)), "axes": {}, "inputs": {n: {"type": "random"} for n in inputs}}
    with open(os.path.join(d, "workload.jsonl"), "w") as f:
        f.write(json.dumps(workload) + "\n")


def aten_reference(call, params="self"):
    return (f"import torch\n\n\n@torch.no_grad()\ndef run({params}):\n    result = {call}\n"
            f"    return result\n")


def aten(label, args):
    return {"kind": "aten", "aten": label, "args": {"args": args, "kwargs": {}}}


def main():
    x = (8192, 131072)
    write("gen_log_softmax_f32_8192x131072",
          "aten::_log_softmax.default over the last dim of float32 [8192, 131072]: rows of 512 KiB. Minimum "
          "traffic 4 GiB + 4 GiB, speed of light 2.02 ms at 4.25 TB/s.",
          {"self": (x, "float32")}, {"out0": (x, "float32")},
          aten_reference("torch.ops.aten._log_softmax.default(self, -1, False)"),
          aten("aten::_log_softmax.default", [{"tensor": 0}, -1, False]))
    x, y = (64, 8192, 2048), (64, 2048)
    write("gen_sum_dim1_f32_64x8192x2048",
          "aten::sum.dim_IntList over dim 1 of float32 [64, 8192, 2048]: a column reduction (the reduced dim is "
          "not the contiguous one). Minimum traffic 4 GiB + 0.5 MiB, speed of light 1.01 ms.",
          {"self": (x, "float32")}, {"out0": (y, "float32")},
          aten_reference("torch.ops.aten.sum.dim_IntList(self, [1])"),
          aten("aten::sum.dim_IntList", [{"tensor": 0}, [1]]))
    x = (64, 32, 56, 56)
    write("gen_softmax_dim1_f32_64x32x56x56",
          "aten::_softmax.default over dim 1 (the channels) of float32 NCHW [64, 32, 56, 56]. Minimum traffic "
          "25.7 MB + 25.7 MB, speed of light 12.1 us.",
          {"self": (x, "float32")}, {"out0": (x, "float32")},
          aten_reference("torch.ops.aten._softmax.default(self, 1, False)"),
          aten("aten::_softmax.default", [{"tensor": 0}, 1, False]))
    x, w = (32, 256, 128, 128), (256,)
    ops = [
        {"aten": "aten::_to_copy.default", "args": [{"ref": "input0"}], "kwargs": {"dtype": "torch.float32"},
         "out": "v0", "dtypes": ["float32"]},
        {"aten": "aten::pow.Tensor_Scalar", "args": [{"ref": "v0"}, 2], "out": "v1", "dtypes": ["float32"]},
        {"aten": "aten::mean.dim", "args": [{"ref": "v1"}, [1], True], "out": "v2", "dtypes": ["float32"]},
        {"aten": "aten::add.Tensor", "args": [{"ref": "v2"}, 1e-06], "out": "v3", "dtypes": ["float32"]},
        {"aten": "aten::rsqrt.default", "args": [{"ref": "v3"}], "out": "v4", "dtypes": ["float32"]},
        {"aten": "aten::mul.Tensor", "args": [{"ref": "v0"}, {"ref": "v4"}], "out": "v5", "dtypes": ["float32"]},
        {"aten": "aten::_to_copy.default", "args": [{"ref": "v5"}], "kwargs": {"dtype": "torch.bfloat16"},
         "out": "v6", "dtypes": ["bfloat16"]},
        {"aten": "aten::view.default", "args": [{"ref": "weight"}, [1, -1, 1, 1]], "out": "v7",
         "dtypes": ["bfloat16"]},
        {"aten": "aten::mul.Tensor", "args": [{"ref": "v6"}, {"ref": "v7"}], "out": "v8", "dtypes": ["bfloat16"]},
    ]
    ref = ("import torch\n\n\n@torch.no_grad()\ndef run(input0, weight):\n"
           + "".join(f"    {o['out']} = torch.ops.aten.{o['aten'][6:]}({', '.join(_arg(a) for a in o['args'])}"
                     + "".join(f", {k}={v}" for k, v in o.get("kwargs", {}).items()) + ")\n" for o in ops)
           + "    return v8\n")
    write("gen_rmsnorm_channels_bf16_32x256x128x128",
          "RMSNorm over the channels of bfloat16 NCHW [32, 256, 128, 128] (a leaf module: fp32 statistics, "
          "rounded to bf16, times the weight viewed [1, C, 1, 1]). Minimum traffic 268 MB + 268 MB, speed of "
          "light 63 us.",
          {"input0": (x, "bfloat16"), "weight": (w, "bfloat16")}, {"out0": (x, "bfloat16")}, ref,
          {"kind": "module", "module_class": "RMSNormChannels", "ops": ops, "outputs": ["v8"]})
    x, y = (32, 64, 112, 112), (32, 64, 56, 56)
    write("gen_max_pool2d_f32_32x64x112x112",
          "aten::max_pool2d.default, 3x3 windows, stride 2, padding 1, of float32 [32, 64, 112, 112] (ResNet's "
          "stem). Minimum traffic 103 MB + 25.7 MB, speed of light 30.2 us.",
          {"self": (x, "float32")}, {"out0": (y, "float32")},
          aten_reference("torch.ops.aten.max_pool2d.default(self, [3, 3], [2, 2], [1, 1])"),
          aten("aten::max_pool2d.default", [{"tensor": 0}, [3, 3], [2, 2], [1, 1]]))

    x, w = (1, 512, 256, 256), (512,)
    ops = [
        {"aten": "aten::add.Tensor", "args": [{"ref": "input0"}, {"ref": "input1"}], "out": "v0",
         "dtypes": ["bfloat16"]},
        {"aten": "aten::group_norm.default", "args": [{"ref": "v0"}, 32, {"ref": "weight"}, {"ref": "bias"}, 1e-06],
         "out": "v1", "dtypes": ["bfloat16"]},
        {"aten": "aten::silu.default", "args": [{"ref": "v1"}], "out": "v2", "dtypes": ["bfloat16"]},
    ]
    ref = ("import torch\n\n\n@torch.no_grad()\ndef run(input0, input1, weight, bias):\n"
           + "".join(f"    {o['out']} = torch.ops.aten.{o['aten'][6:]}({', '.join(_arg(a) for a in o['args'])})\n"
                     for o in ops)
           + "    return v0, v2\n")
    write("gen_vae_chain_bf16_1x512x256x256",
          "The VAE decoder's residual add joined to the next block's GroupNorm (32 groups) + SiLU, bfloat16 "
          "[1, 512, 256, 256], returning the sum too (the next residual add reads it). Minimum traffic 134 MB + "
          "134 MB, speed of light 63 us.",
          {"input0": (x, "bfloat16"), "input1": (x, "bfloat16"), "weight": (w, "bfloat16"),
           "bias": (w, "bfloat16")}, {"out0": (x, "bfloat16"), "out1": (x, "bfloat16")}, ref,
          {"kind": "chain", "ops": ops, "outputs": ["v0", "v2"]})

    # Gemma-4's eager attention: the scores scaled by 1.0, the causal mask added, softmax in float32, back to
    # bfloat16 (kiln capture's chain of four calls at the real size of bench/problems/softmax_bf16_chain_*)
    s, m = (1, 8, 4096, 4096), (1, 1, 4096, 4096)
    ops = [
        {"aten": "aten::mul.Tensor", "args": [{"ref": "input0"}, 1.0], "out": "v0", "dtypes": ["bfloat16"]},
        {"aten": "aten::add.Tensor", "args": [{"ref": "v0"}, {"ref": "input1"}], "out": "v1", "dtypes": ["bfloat16"]},
        {"aten": "aten::softmax.int", "args": [{"ref": "v1"}, -1, "torch.float32"], "out": "v2",
         "dtypes": ["float32"]},
        {"aten": "aten::to.dtype", "args": [{"ref": "v2"}, "torch.bfloat16"], "out": "v3", "dtypes": ["bfloat16"]},
    ]
    write("gen_gemma4_mask_softmax_bf16_1x8x4096x4096",
          "Gemma-4's attention probabilities as kiln capture writes the chain: bfloat16 scores [1, 8, 4096, 4096] "
          "times 1.0, plus the [1, 1, 4096, 4096] mask, softmax in float32, cast back to bfloat16. Minimum "
          "traffic 268 MB + 33.6 MB + 268 MB, speed of light 134 us.",
          {"input0": (s, "bfloat16"), "input1": (m, "bfloat16")}, {"out0": (s, "bfloat16")},
          _reference(["input0", "input1"], ops, "v3"),
          {"kind": "chain", "ops": ops, "outputs": ["v3"]})

    # Qwen-3.5's gated RMSNorm after its linear attention: 2048 tokens x 32 value heads, head dim 128
    x, w = (65536, 128), (128,)
    ops = [
        {"aten": "aten::to.dtype", "args": [{"ref": "input0"}, "torch.float32"], "out": "v0", "dtypes": ["float32"]},
        {"aten": "aten::pow.Tensor_Scalar", "args": [{"ref": "v0"}, 2], "out": "v1", "dtypes": ["float32"]},
        {"aten": "aten::mean.dim", "args": [{"ref": "v1"}, [-1], True], "out": "v2", "dtypes": ["float32"]},
        {"aten": "aten::add.Tensor", "args": [{"ref": "v2"}, 1e-06], "out": "v3", "dtypes": ["float32"]},
        {"aten": "aten::rsqrt.default", "args": [{"ref": "v3"}], "out": "v4", "dtypes": ["float32"]},
        {"aten": "aten::mul.Tensor", "args": [{"ref": "v0"}, {"ref": "v4"}], "out": "v5", "dtypes": ["float32"]},
        {"aten": "aten::to.dtype", "args": [{"ref": "v5"}, "torch.bfloat16"], "out": "v6", "dtypes": ["bfloat16"]},
        {"aten": "aten::mul.Tensor", "args": [{"ref": "weight"}, {"ref": "v6"}], "out": "v7", "dtypes": ["bfloat16"]},
        {"aten": "aten::to.dtype", "args": [{"ref": "input1"}, "torch.float32"], "out": "v8", "dtypes": ["float32"]},
        {"aten": "aten::silu.default", "args": [{"ref": "v8"}], "out": "v9", "dtypes": ["float32"]},
        {"aten": "aten::mul.Tensor", "args": [{"ref": "v7"}, {"ref": "v9"}], "out": "v10", "dtypes": ["float32"]},
        {"aten": "aten::to.dtype", "args": [{"ref": "v10"}, "torch.bfloat16"], "out": "v11", "dtypes": ["bfloat16"]},
    ]
    write("gen_rmsnorm_gated_qwen3_5_bf16_65536x128",
          "Qwen3_5MoeRMSNormGated at Qwen3_5MoeTextConfig() defaults as kiln capture writes the module: 2048 "
          "tokens x 32 value heads as rows of head dim 128, bfloat16, times the weight, times SiLU of the gate. "
          "Minimum traffic 16.8 MB + 16.8 MB + 16.8 MB, speed of light 12 us.",
          {"input0": (x, "bfloat16"), "weight": (w, "bfloat16"), "input1": (x, "bfloat16")},
          {"out0": (x, "bfloat16")}, _reference(["input0", "weight", "input1"], ops, "v11"),
          {"kind": "module", "module_class": "Qwen3_5MoeRMSNormGated", "ops": ops, "outputs": ["v11"]})


def _reference(params, ops, result):
    return ("import torch\n\n\n@torch.no_grad()\ndef run(" + ", ".join(params) + "):\n"
            + "".join(f"    {o['out']} = torch.ops.aten.{o['aten'][6:]}({', '.join(_arg(a) for a in o['args'])})\n"
                      for o in ops)
            + f"    return {result}\n")


def _arg(a):
    if isinstance(a, dict):
        return a["ref"]
    if isinstance(a, str) and a.startswith("torch."):
        return a  # a dtype, as capture writes it
    return repr(a)


if __name__ == "__main__":
    main()
