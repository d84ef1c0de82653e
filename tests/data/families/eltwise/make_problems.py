"""Writes the eltwise family's problem directories: the small test problems next to this file and the
GPU rows under bench/problems/eltwise_*. Captured forms ("kind": "aten" / "module") follow what
`kiln capture` writes (the reference's straight-line aten calls, layouts for channels-last tensors);
the "kind": "chain" form is kiln's op chain (docs/formats.md "Op chains"; positional arguments are written
here as names and become {"ref": NAME}). Inputs are random.

    python tests/data/families/eltwise/make_problems.py      (from the repository root)
"""

import json
import os
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "..", ".."))
NS = uuid.UUID("6b696c6e-656c-7477-6973-650000000001")
HEAD = "import torch\n\n\n@torch.no_grad()\n"


def shape(s):
    return [str(v) for v in s]  # literal sizes are digit strings in the schema


def write(dirname, name, description, axes, inputs, outputs, reference, kiln, workloads,
          op_type="elementwise", scalars=None):
    """inputs/outputs: {name: (shape, dtype)}; shape None for a by-value scalar; scalars: one
    {name: value} per workload."""
    d = os.path.join(dirname, name)
    os.makedirs(d, exist_ok=True)
    definition = {
        "name": name, "op_type": op_type, "description": description, "axes": axes,
        "inputs": {n: {"shape": None if s is None else shape(s), "dtype": t} for n, (s, t) in inputs.items()},
        "outputs": {n: {"shape": shape(s), "dtype": t} for n, (s, t) in outputs.items()},
        "reference": reference,
    }
    if kiln is not None:
        definition["kiln"] = kiln
    with open(os.path.join(d, "definition.json"), "w") as f:
        json.dump(definition, f, indent=1)
        f.write("\n")
    with open(os.path.join(d, "workload.jsonl"), "w") as f:
        for i, wl in enumerate(workloads):
            ins = {}
            for n, (s, _) in inputs.items():
                if s is None:
                    ins[n] = {"type": "scalar", "value": scalars[i][n]}
                else:
                    ins[n] = {"type": "random"}
            f.write(json.dumps({"uuid": str(uuid.uuid5(NS, f"{name}/{i}")), "axes": wl, "inputs": ins})
                    + "\n")


def var(*names):
    return {n: {"type": "var"} for n in names}


def const(**values):
    return {n: {"type": "const", "value": v} for n, v in values.items()}


def aten_ref(params, call, restore=(), ret="result"):
    body = [f"    {r}" for r in restore] + [f"    result = {call}", f"    return {ret}"]
    return HEAD + f"def run({', '.join(params)}):\n" + "\n".join(body) + "\n"


def refs(args):
    """Names (strings not starting with torch.) become {"ref": NAME}, the chain form's values."""
    return [{"ref": a} if isinstance(a, str) and not a.startswith("torch.") else a for a in args]


def chain(*ops, outputs=None):
    k = {"kind": "chain", "ops": [dict(o, args=refs(o["args"])) for o in ops]}
    if outputs:
        k["outputs"] = outputs
    return k


SILU_MUL = chain({"aten": "aten::silu.default", "args": ["gate"], "out": "act"},
                 {"aten": "aten::mul.Tensor", "args": ["act", "up"], "out": "out"})
SILU_MUL_REF = HEAD + "def run(gate, up):\n    return torch.nn.functional.silu(gate) * up\n"
GELU_MUL = chain({"aten": "aten::gelu.default", "args": ["gate"], "kwargs": {"approximate": "tanh"},
                  "out": "act"},
                 {"aten": "aten::mul.Tensor", "args": ["act", "up"], "out": "out"})
GELU_MUL_REF = (HEAD + "def run(gate, up):\n"
                "    return torch.nn.functional.gelu(gate, approximate='tanh') * up\n")
ADD_RELU = chain({"aten": "aten::add.Tensor", "args": ["x", "identity"], "out": "s"},
                 {"aten": "aten::relu.default", "args": ["s"], "out": "out"})
ADD_RELU_REF = HEAD + "def run(x, identity):\n    return torch.relu(x + identity)\n"
CL = "self = self.permute(0, 3, 1, 2)  # captured strides (stored in memory order)"


def tests():
    t = HERE
    rc = var("rows", "cols")
    write(t, "silu_mul_bf16", "silu(gate) * up in bfloat16 (the SiLU-gated MLP); odd sizes",
          rc, {"gate": (["rows", "cols"], "bfloat16"), "up": (["rows", "cols"], "bfloat16")},
          {"out": (["rows", "cols"], "bfloat16")}, SILU_MUL_REF, SILU_MUL,
          [{"rows": 3, "cols": 7}, {"rows": 4, "cols": 4097}, {"rows": 1, "cols": 1}])
    write(t, "gelu_tanh_mul_f16", "gelu(gate, 'tanh') * up in float16 (Gemma's gated MLP)",
          rc, {"gate": (["rows", "cols"], "float16"), "up": (["rows", "cols"], "float16")},
          {"out": (["rows", "cols"], "float16")}, GELU_MUL_REF, GELU_MUL,
          [{"rows": 5, "cols": 96}, {"rows": 2, "cols": 33}])
    nchw = var("N", "C", "H", "W")
    write(t, "add_relu_f32", "relu(x + identity) in float32 (ResNet's residual join)",
          nchw, {"x": (["N", "C", "H", "W"], "float32"), "identity": (["N", "C", "H", "W"], "float32")},
          {"out": (["N", "C", "H", "W"], "float32")}, ADD_RELU_REF, ADD_RELU,
          [{"N": 2, "C": 8, "H": 7, "W": 7}, {"N": 1, "C": 3, "H": 5, "W": 1}])
    write(t, "add_tensor_bf16", "captured aten::add.Tensor with alpha (residual add)",
          const(n1=1, n6=6, n40=40),
          {"self": (["n1", "n6", "n40"], "bfloat16"), "other": (["n1", "n6", "n40"], "bfloat16")},
          {"out0": (["n1", "n6", "n40"], "bfloat16")},
          aten_ref(["self", "other"], "torch.ops.aten.add.Tensor(self, other, alpha=2)"),
          {"kind": "aten", "aten": "aten::add.Tensor",
           "args": {"args": [{"tensor": 0}, {"tensor": 1}], "kwargs": {"alpha": 2}}}, [{}],
          op_type="add")
    write(t, "relu_cl_bf16", "captured in-place relu_ on a channels-last bfloat16 activation",
          const(n2=2, n5=5, n3=3, n16=16),
          {"self": (["n2", "n5", "n3", "n16"], "bfloat16")}, {"out0": (["n2", "n5", "n3", "n16"], "bfloat16")},
          aten_ref(["self"], "torch.ops.aten.relu_.default(self)",
                   [CL, "self = self.clone()  # the op writes into it"], "result.permute(0, 2, 3, 1)"),
          {"kind": "aten", "aten": "aten::relu_.default", "args": {"args": [{"tensor": 0}], "kwargs": {}},
           "layouts": {"self": {"stored": "memory_order", "stored_shape": [2, 5, 3, 16], "permute": [0, 2, 3, 1]},
                       "out0": {"stored": "memory_order", "stored_shape": [2, 5, 3, 16], "permute": [0, 2, 3, 1]}}},
          [{}], op_type="relu_")
    write(t, "bias_scale_f16", "(x + 0.5 * bias) * scale: a row-broadcast bias and a by-value scalar",
          rc, {"x": (["rows", "cols"], "float16"), "bias": (["cols"], "float16"), "scale": (None, "float32")},
          {"out": (["rows", "cols"], "float16")},
          HEAD + "def run(x, bias, scale):\n    return torch.add(x, bias, alpha=0.5) * scale\n",
          chain({"aten": "aten::add.Tensor", "args": ["x", "bias"], "kwargs": {"alpha": 0.5}, "out": "t"},
                {"aten": "aten::mul.Tensor", "args": ["t", "scale"], "out": "out"}),
          [{"rows": 3, "cols": 16}, {"rows": 2, "cols": 5}], scalars=[{"scale": 1.5}, {"scale": -0.25}])
    write(t, "to_bf16", "captured aten::to.dtype float32 -> bfloat16",
          var("n"), {"self": (["n"], "float32")}, {"out0": (["n"], "bfloat16")},
          aten_ref(["self"], "torch.ops.aten.to.dtype(self, torch.bfloat16)"),
          {"kind": "aten", "aten": "aten::to.dtype", "args": {"args": [{"tensor": 0}, "torch.bfloat16"],
                                                              "kwargs": {}}},
          [{"n": 1}, {"n": 1000}, {"n": 65539}], op_type="to")
    write(t, "module_gelu_f32", "a captured activation module (nn.GELU, erf form)",
          const(n4=4, n50=50), {"input0": (["n4", "n50"], "float32")}, {"out0": (["n4", "n50"], "float32")},
          HEAD + "def run(input0):\n    v0 = torch.ops.aten.gelu.default(input0)\n    return v0\n",
          {"kind": "module", "module_class": "GELU",
           "ops": [{"aten": "aten::gelu.default", "args": refs(["input0"]), "out": "v0"}], "outputs": ["v0"]},
          [{}],
          op_type="module:GELU")
    write(t, "module_gate_bf16", "a captured module: f32 math on bf16 inputs, cast back (type_as)",
          const(n3=3, n64=64),
          {"input0": (["n3", "n64"], "bfloat16"), "weight": (["n64"], "bfloat16")},
          {"out0": (["n3", "n64"], "bfloat16")},
          HEAD + "def run(input0, weight):\n"
          "    v0 = torch.ops.aten.to.dtype(input0, torch.float32)\n"
          "    v1 = torch.ops.aten.sigmoid.default(v0)\n"
          "    v2 = torch.ops.aten.to.dtype(weight, torch.float32)\n"
          "    v3 = torch.ops.aten.add.Tensor(v2, 1.0)\n"
          "    v4 = torch.ops.aten.mul.Tensor(v1, v3)\n"
          "    v5 = torch.ops.aten.type_as.default(v4, input0)\n"
          "    return v5\n",
          {"kind": "module", "module_class": "Gate",
           "ops": [{"aten": "aten::to.dtype", "args": refs(["input0", "torch.float32"]), "out": "v0"},
                   {"aten": "aten::sigmoid.default", "args": refs(["v0"]), "out": "v1"},
                   {"aten": "aten::to.dtype", "args": refs(["weight", "torch.float32"]), "out": "v2"},
                   {"aten": "aten::add.Tensor", "args": refs(["v2", 1.0]), "out": "v3"},
                   {"aten": "aten::mul.Tensor", "args": refs(["v1", "v3"]), "out": "v4"},
                   {"aten": "aten::type_as.default", "args": refs(["v4", "input0"]), "out": "v5"}],
           "outputs": ["v5"]}, [{}], op_type="module:Gate")
    write(t, "cl_bias_sigmoid_bf16", "sigmoid(x * w) with x channels-last and w [1, C, 1, 1]",
          const(n1=1, n2=2, n8=8, n4=4, n3=3),
          {"x": (["n2", "n4", "n3", "n8"], "bfloat16"), "w": (["n1", "n8", "n1", "n1"], "bfloat16")},
          {"out": (["n2", "n4", "n3", "n8"], "bfloat16")},
          HEAD + "def run(x, w):\n    x = x.permute(0, 3, 1, 2)\n"
          "    return torch.sigmoid(x * w).permute(0, 2, 3, 1)\n",
          dict(chain({"aten": "aten::mul.Tensor", "args": ["x", "w"], "out": "t"},
                     {"aten": "aten::sigmoid.default", "args": ["t"], "out": "out"}),
               layouts={"x": {"stored": "memory_order", "permute": [0, 2, 3, 1]},
                        "out": {"stored": "memory_order", "permute": [0, 2, 3, 1]}}),
          [{}])
    ops = [("aten::hardtanh.default", ["x", -0.7, 0.8], {}, "a"),
           ("aten::clamp_max.default", ["a", 0.5], {}, "b"),
           ("aten::clamp.default", ["b"], {"min": -0.6}, "c"),
           ("aten::leaky_relu.default", ["y", 0.2], {}, "d"),
           ("aten::rsub.Tensor", ["d", "c"], {"alpha": 2}, "e"),
           ("aten::maximum.default", ["e", "z"], {}, "f"),
           ("aten::pow.Tensor_Scalar", ["f", 2], {}, "g"),
           ("aten::div.Tensor", ["g", 3.0], {}, "h"),
           ("aten::relu6.default", ["x"], {}, "i"),
           ("aten::sub.Tensor", ["h", "i"], {}, "j"),
           ("aten::tanh.default", ["j"], {}, "out")]
    write(t, "misc_ops_f32", "clamps, leaky_relu, rsub with alpha, maximum, pow, div, relu6, tanh",
          var("n"), {"x": (["n"], "float32"), "y": (["n"], "float32"), "z": (["n"], "float32")},
          {"out": (["n"], "float32")},
          HEAD + "def run(x, y, z):\n"
          "    a = torch.nn.functional.hardtanh(x, -0.7, 0.8)\n"
          "    c = torch.clamp(torch.clamp_max(a, 0.5), min=-0.6)\n"
          "    e = torch.rsub(torch.nn.functional.leaky_relu(y, 0.2), c, alpha=2)\n"
          "    h = torch.pow(torch.maximum(e, z), 2) / 3.0\n"
          "    return torch.tanh(h - torch.nn.functional.relu6(x))\n",
          chain(*[{"aten": a, "args": g, "kwargs": k, "out": o} for a, g, k, o in ops]),
          [{"n": 1000}, {"n": 3}])
    write(t, "transpose_copy_f32", "contiguous copy of a transposed tensor (strided input, VEC 1)",
          const(n5=5, n7=7), {"self": (["n5", "n7"], "float32")}, {"out0": (["n7", "n5"], "float32")},
          aten_ref(["self"], "torch.ops.aten.clone.default(self, memory_format=torch.contiguous_format)",
                   ["self = self.permute(1, 0)  # captured strides [1, 7] (stored in memory order)"]),
          {"kind": "aten", "aten": "aten::clone.default",
           "args": {"args": [{"tensor": 0}], "kwargs": {"memory_format": "torch.contiguous_format"}},
           "layouts": {"self": {"stored": "memory_order", "stored_shape": [5, 7], "permute": [1, 0]}}},
          [{}], op_type="clone")


def bench():
    b = os.path.join(ROOT, "bench", "problems")
    # Qwen3.5-MoE (transformers Qwen3_5MoeTextConfig(): moe_intermediate_size = shared expert = 512,
    # top-8 of 256 experts) at seq 2048: the shared expert's [2048, 512] and all routed rows [16384, 512]
    write(b, "eltwise_silu_mul_qwen_moe_bf16", "silu(gate) * up, bf16, Qwen3.5-MoE expert MLP "
          "(intermediate 512): shared expert at 2048 tokens and the 2048*8 routed rows",
          dict(var("tokens"), **const(n512=512)),
          {"gate": (["tokens", "n512"], "bfloat16"), "up": (["tokens", "n512"], "bfloat16")},
          {"out": (["tokens", "n512"], "bfloat16")}, SILU_MUL_REF, SILU_MUL,
          [{"tokens": 2048}, {"tokens": 16384}])
    # Gemma4TextConfig(): intermediate_size 9216, hidden_size 2304, gelu_pytorch_tanh; seq 4096
    write(b, "eltwise_gelu_tanh_mul_gemma4_bf16", "gelu(gate, approximate='tanh') * up, bf16, "
          "Gemma-4-like MLP (intermediate 9216) at seq 4096",
          const(n4096=4096, n9216=9216),
          {"gate": (["n4096", "n9216"], "bfloat16"), "up": (["n4096", "n9216"], "bfloat16")},
          {"out": (["n4096", "n9216"], "bfloat16")}, GELU_MUL_REF, GELU_MUL, [{}])
    write(b, "eltwise_residual_add_gemma4_bf16", "residual add (aten::add.Tensor), bf16 "
          "[1, 4096, 2304] (Gemma-4-like hidden 2304, seq 4096)",
          const(n1=1, n4096=4096, n2304=2304),
          {"self": (["n1", "n4096", "n2304"], "bfloat16"), "other": (["n1", "n4096", "n2304"], "bfloat16")},
          {"out0": (["n1", "n4096", "n2304"], "bfloat16")},
          aten_ref(["self", "other"], "torch.ops.aten.add.Tensor(self, other)"),
          {"kind": "aten", "aten": "aten::add.Tensor",
           "args": {"args": [{"tensor": 0}, {"tensor": 1}], "kwargs": {}}}, [{}], op_type="add")
    write(b, "eltwise_relu_resnet50_f32", "in-place ReLU (aten::relu_), fp32 NCHW [32, 256, 56, 56] "
          "(ResNet-50 layer1, batch 32)",
          const(n32=32, n256=256, n56=56), {"self": (["n32", "n256", "n56", "n56"], "float32")},
          {"out0": (["n32", "n256", "n56", "n56"], "float32")},
          aten_ref(["self"], "torch.ops.aten.relu_.default(self)", ["self = self.clone()  # the op writes into it"]),
          {"kind": "aten", "aten": "aten::relu_.default", "args": {"args": [{"tensor": 0}], "kwargs": {}}},
          [{}], op_type="relu_")
    write(b, "eltwise_add_relu_resnet50_f32", "relu(x + identity) fused, fp32 NCHW [32, 256, 56, 56] "
          "(ResNet-50 bottleneck join: add_ then relu_)",
          const(n32=32, n256=256, n56=56),
          {"x": (["n32", "n256", "n56", "n56"], "float32"), "identity": (["n32", "n256", "n56", "n56"], "float32")},
          {"out": (["n32", "n256", "n56", "n56"], "float32")}, ADD_RELU_REF, ADD_RELU, [{}])


if __name__ == "__main__":
    tests()
    bench()
