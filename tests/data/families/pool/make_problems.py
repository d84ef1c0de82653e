"""Writes the pool family's problem directories: the small test problems next to this file and the
GPU rows under bench/problems/pool_*. Each one is what `kiln capture` writes for the op (a "kiln"
object with the aten label, args and layouts; channels-last tensors stored in memory order and
permuted back by the reference), but with random inputs instead of stored tensors.

    python tests/data/families/pool/make_problems.py      (from the repository root)
"""

import json
import os
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "..", ".."))
NS = uuid.UUID("6b696c6e-706f-6f6c-0000-000000000001")


def reference(call: str, restore: str = "", ret: str = "result") -> str:
    lines = ["import torch", "", "", "@torch.no_grad()", "def run(self):"]
    if restore:
        lines.append("    " + restore)
    lines += [f"    result = {call}", f"    return {ret}"]
    return "\n".join(lines) + "\n"


def layout(stored_shape, permute=None):
    out = {"stored": "memory_order" if permute else "contiguous"}
    if stored_shape is not None:  # var axes: the stored shape is the definition's
        out["stored_shape"] = stored_shape
    if permute:
        out["permute"] = permute
    return out


def write(dirname, name, description, axes, x_shape, y_shape, x_dtype, y_dtype, ref, kiln, workloads,
          op_type="adaptive_avg_pool2d"):
    d = os.path.join(dirname, name)
    os.makedirs(d, exist_ok=True)
    x_shape = [str(v) for v in x_shape]  # literal sizes are digit strings in the schema
    y_shape = [str(v) for v in y_shape]
    definition = {
        "name": name, "op_type": op_type, "description": description,
        "axes": axes,
        "inputs": {"self": {"shape": x_shape, "dtype": x_dtype}},
        "outputs": {"out0": {"shape": y_shape, "dtype": y_dtype}},
        "reference": ref,
    }
    if kiln is not None:
        definition["kiln"] = kiln
    with open(os.path.join(d, "definition.json"), "w") as f:
        json.dump(definition, f, indent=1)
        f.write("\n")
    with open(os.path.join(d, "workload.jsonl"), "w") as f:
        for i, wl in enumerate(workloads):
            line = {"uuid": str(uuid.uuid5(NS, f"{name}/{i}")), "axes": wl,
                    "inputs": {"self": {"type": "random"}}}
            f.write(json.dumps(line) + "\n")


def var_axes(*names):
    return {n: {"type": "var"} for n in names}


def const_axes(**values):
    return {n: {"type": "const", "value": v} for n, v in values.items()}


def aten_kiln(label, args, layouts, kind="aten"):
    return {"kind": kind, "aten": label, "args": {"args": args, "kwargs": {}}, "layouts": layouts}


def tests():
    t = HERE
    # NCHW, 1x1: rows of 1, 7, 49 and 4097 values (odd lengths exercise unaligned rows)
    write(t, "global_nchw_f32", "adaptive_avg_pool2d(x, 1) on NCHW float32; rows of odd lengths",
          var_axes("N", "C", "H", "W"), ["N", "C", "H", "W"], ["N", "C", 1, 1], "float32", "float32",
          reference("torch.ops.aten.adaptive_avg_pool2d.default(self, [1, 1])"),
          aten_kiln("aten::adaptive_avg_pool2d.default", [{"tensor": 0}, [1, 1]],
                    {"self": layout(None), "out0": layout(None)}),
          [{"N": 2, "C": 24, "H": 7, "W": 7}, {"N": 1, "C": 5, "H": 1, "W": 1},
           {"N": 3, "C": 7, "H": 1, "W": 7}, {"N": 1, "C": 3, "H": 17, "W": 241}])
    # channels-last bfloat16 via mean.dim (what adaptive_avg_pool2d(x, 1) becomes in ATen)
    write(t, "global_cl_bf16", "mean over H,W (keepdim) of a channels-last bfloat16 activation",
          var_axes("N", "H", "W", "C"), ["N", "H", "W", "C"], ["N", "C", 1, 1], "bfloat16", "bfloat16",
          reference("torch.ops.aten.mean.dim(self, [-1, -2], True)",
                    "self = self.permute(0, 3, 1, 2)  # captured strides (stored in memory order)"),
          aten_kiln("aten::mean.dim", [{"tensor": 0}, [-1, -2], True],
                    {"self": layout(None, [0, 2, 3, 1]), "out0": layout(None)}),
          [{"N": 2, "H": 7, "W": 7, "C": 64}, {"N": 3, "H": 1, "W": 1, "C": 8},
           {"N": 1, "H": 5, "W": 3, "C": 24}])
    # channels-last with an odd channel count: only VEC 1 is valid
    write(t, "global_cl_f32_odd", "adaptive_avg_pool2d(x, 1), channels-last float32, 7 channels",
          const_axes(n2=2, n9=9, n5=5, n7=7), ["n2", "n9", "n5", "n7"], ["n2", "n7", 1, 1],
          "float32", "float32",
          reference("torch.ops.aten.adaptive_avg_pool2d.default(self, [1, 1])",
                    "self = self.permute(0, 3, 1, 2)  # captured strides (stored in memory order)"),
          aten_kiln("aten::adaptive_avg_pool2d.default", [{"tensor": 0}, [1, 1]],
                    {"self": layout([2, 9, 5, 7], [0, 2, 3, 1]), "out0": layout([2, 7, 1, 1])}),
          [{}])
    # float16, mean.dim without keepdim: [N, C] out
    write(t, "global_nchw_f16_mean", "mean over dims (2, 3) of an NCHW float16 tensor, no keepdim",
          var_axes("N", "C", "H", "W"), ["N", "C", "H", "W"], ["N", "C"], "float16", "float16",
          reference("torch.ops.aten.mean.dim(self, [2, 3])"),
          aten_kiln("aten::mean.dim", [{"tensor": 0}, [2, 3]], {}),
          [{"N": 2, "C": 16, "H": 7, "W": 7}, {"N": 1, "C": 9, "H": 14, "W": 14}])
    # general adaptive sizes, NCHW and channels-last
    write(t, "adaptive_nchw_f32", "adaptive_avg_pool2d to 3x4 on NCHW float32 (overlapping windows)",
          var_axes("N", "C", "H", "W"), ["N", "C", "H", "W"], ["N", "C", 3, 4], "float32", "float32",
          reference("torch.ops.aten._adaptive_avg_pool2d.default(self, [3, 4])"),
          aten_kiln("aten::_adaptive_avg_pool2d.default", [{"tensor": 0}, [3, 4]], {}),
          [{"N": 2, "C": 6, "H": 9, "W": 11}, {"N": 1, "C": 3, "H": 3, "W": 4}])
    write(t, "adaptive_cl_bf16", "adaptive_avg_pool2d to 2x3 on a channels-last bfloat16 tensor",
          var_axes("N", "H", "W", "C"), ["N", "H", "W", "C"], ["N", 2, 3, "C"], "bfloat16", "bfloat16",
          reference("torch.ops.aten.adaptive_avg_pool2d.default(self, [2, 3])",
                    "self = self.permute(0, 3, 1, 2)  # captured strides (stored in memory order)",
                    "result.permute(0, 2, 3, 1)"),
          aten_kiln("aten::adaptive_avg_pool2d.default", [{"tensor": 0}, [2, 3]],
                    {"self": layout(None, [0, 2, 3, 1]), "out0": layout(None, [0, 2, 3, 1])}),
          [{"N": 2, "H": 7, "W": 9, "C": 16}])
    # a captured leaf module (nn.AdaptiveAvgPool2d) whose forward is the one call
    mod_ref = ("import torch\n\n\n@torch.no_grad()\ndef run(input0):\n"
               "    v0 = torch.ops.aten.adaptive_avg_pool2d.default(input0, [1, 1])\n    return v0\n")
    d = os.path.join(t, "module_pool_f32")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "definition.json"), "w") as f:
        json.dump({"name": "module_pool_f32", "op_type": "module:AdaptiveAvgPool2d",
                   "description": "a captured nn.AdaptiveAvgPool2d module",
                   "axes": const_axes(n2=2, n32=32, n6=6),
                   "inputs": {"input0": {"shape": ["n2", "n32", "n6", "n6"], "dtype": "float32"}},
                   "outputs": {"out0": {"shape": ["n2", "n32", "1", "1"], "dtype": "float32"}},
                   "reference": mod_ref,
                   "kiln": {"kind": "module", "module_class": "AdaptiveAvgPool2d",
                            "layouts": {"input0": layout([2, 32, 6, 6]), "out0": layout([2, 32, 1, 1])},
                            "ops": [{"aten": "aten::adaptive_avg_pool2d.default",
                                     "args": [{"ref": "input0"}, [1, 1]], "out": "v0"}],
                            "outputs": ["v0"]}},
                  f, indent=1)
        f.write("\n")
    with open(os.path.join(d, "workload.jsonl"), "w") as f:
        f.write(json.dumps({"uuid": str(uuid.uuid5(NS, "module_pool_f32/0")), "axes": {},
                            "inputs": {"input0": {"type": "random"}}}) + "\n")


def bench():
    b = os.path.join(ROOT, "bench", "problems")
    # ResNet-50's end, fp32 NCHW batch 64 (../shared/GPU.md baseline row)
    write(b, "pool_global_nchw_f32", "adaptive_avg_pool2d(x, 1) on fp32 NCHW [64, 2048, 7, 7] "
          "(ResNet-50 end); eager 36.6 us, torch.compile 29.6 us, speed of light 6.2 us on H200",
          const_axes(n64=64, n2048=2048, n7=7), ["n64", "n2048", "n7", "n7"], ["n64", "n2048", 1, 1],
          "float32", "float32",
          reference("torch.ops.aten.adaptive_avg_pool2d.default(self, [1, 1])"),
          aten_kiln("aten::adaptive_avg_pool2d.default", [{"tensor": 0}, [1, 1]],
                    {"self": layout([64, 2048, 7, 7]), "out0": layout([64, 2048, 1, 1])}),
          [{}])
    # ResNet-50 bf16 channels-last batch 128: stored [N, H, W, C]
    write(b, "pool_global_cl_bf16", "adaptive_avg_pool2d(x, 1) on a bf16 channels-last "
          "[128, 2048, 7, 7] activation (ResNet-50 end, channels_last batch 128), stored [N, H, W, C]",
          const_axes(n128=128, n7=7, n2048=2048), ["n128", "n7", "n7", "n2048"],
          ["n128", "n2048", 1, 1], "bfloat16", "bfloat16",
          reference("torch.ops.aten.adaptive_avg_pool2d.default(self, [1, 1])",
                    "self = self.permute(0, 3, 1, 2)  # captured strides [100352, 1, 14336, 2048] "
                    "(stored in memory order)"),
          aten_kiln("aten::adaptive_avg_pool2d.default", [{"tensor": 0}, [1, 1]],
                    {"self": layout([128, 7, 7, 2048], [0, 2, 3, 1]),
                     "out0": layout([128, 2048, 1, 1])}),
          [{}])


if __name__ == "__main__":
    tests()
    bench()
