"""make_gemm.py: writes the GEMM problems of issue 17's table under bench/problems/ (F.linear(x [M, K], w [N, K])
in bfloat16, inputs drawn at random; the linear + bias + GELU-tanh chain on Gemma-4's gate/up shape; its MLP
front as a gated pair, GELU-tanh of the gate projection times the up projection; fp8 e4m3 8192³ as
torch._scaled_mm with per-tensor and per-row scales), in the
form capture writes them, so that every GEMM family (cublaslt, wgmma) is swept on them with `kiln sweep`.

    python3 bench/problems/make_gemm.py        # (re)writes the directories; the sizes are in ROWS
"""
import json
import os
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
# (M, N, K, what): bf16 8192³ and the projections of the Gemma-4 example at real size
ROWS = [(8192, 8192, 8192, "bf16 8192³"),
        (4096, 262144, 2304, "Gemma-4's lm-head"),
        (4096, 9216, 2304, "Gemma-4's MLP gate/up projection"),
        (4096, 2304, 9216, "Gemma-4's MLP down projection"),
        (4096, 2048, 2304, "Gemma-4's q projection")]


def write(name, description, axes, inputs, reference, kiln, op_type="linear"):
    d = os.path.join(HERE, name)
    os.makedirs(d, exist_ok=True)
    definition = {"name": name, "op_type": op_type, "description": description,
                  "axes": {f"n{v}": {"type": "const", "value": v} for v in sorted(set(axes))},
                  "inputs": inputs, "outputs": {"out0": {"shape": ["n%d" % axes[0], "n%d" % axes[1]],
                                                         "dtype": "bfloat16"}},
                  "reference": reference, "kiln": kiln}
    with open(os.path.join(d, "definition.json"), "w") as f:
        json.dump(definition, f, indent=1)
        f.write("\n")
    if os.path.exists(os.path.join(d, "workload.jsonl")):  # a problem's identity stays what it was
        return
    wl = {"uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, "kiln/bench/" + name)), "axes": {},
          "inputs": {k: {"type": "random"} for k in inputs}}
    with open(os.path.join(d, "workload.jsonl"), "w") as f:
        f.write(json.dumps(wl) + "\n")


def main():
    layouts = {"x": {"stored": "contiguous"}, "w": {"stored": "contiguous"}, "out0": {"stored": "contiguous"}}
    for m, n, k, what in ROWS:
        write(f"gemm_linear_bf16_{m}x{n}x{k}", f"{what}: F.linear(x [{m}, {k}], w [{n}, {k}]) in bfloat16.",
              (m, n, k),
              {"x": {"shape": [f"n{m}", f"n{k}"], "dtype": "bfloat16"},
               "w": {"shape": [f"n{n}", f"n{k}"], "dtype": "bfloat16"}},
              "import torch\n\n\n@torch.no_grad()\ndef run(x, w):\n    return torch.ops.aten.linear.default(x, w)\n",
              {"kind": "aten", "aten": "aten::linear.default", "calls": 1,
               "args": {"args": [{"tensor": 0}, {"tensor": 1}], "kwargs": {}}, "layouts": layouts})
    m, n, k = 4096, 9216, 2304
    write(f"gemm_linear_bias_gelu_bf16_{m}x{n}x{k}",
          f"Gemma-4's gate/up shape as a GEMM + epilogue chain: F.gelu(F.linear(x [{m}, {k}], w [{n}, {k}], b), "
          "approximate='tanh') in bfloat16.", (m, n, k),
          {"x": {"shape": [f"n{m}", f"n{k}"], "dtype": "bfloat16"},
           "w": {"shape": [f"n{n}", f"n{k}"], "dtype": "bfloat16"},
           "b": {"shape": [f"n{n}"], "dtype": "bfloat16"}},
          "import torch\n\n\n@torch.no_grad()\ndef run(x, w, b):\n    return torch.ops.aten.gelu.default("
          "torch.ops.aten.linear.default(x, w, b), approximate='tanh')\n",
          {"kind": "chain", "pattern": "gemm_epilogue", "members": ["aten::linear.default", "aten::gelu.default"],
           "calls": 1, "flops": 2.0 * m * n * k,
           "ops": [{"aten": "aten::linear.default", "args": [{"ref": "x"}, {"ref": "w"}, {"ref": "b"}], "out": "v0",
                    "dtypes": ["bfloat16"]},
                   {"aten": "aten::gelu.default", "args": [{"ref": "v0"}], "out": "v1", "dtypes": ["bfloat16"],
                    "kwargs": {"approximate": "tanh"}}],
           "outputs": ["v1"], "layouts": dict(layouts, b={"stored": "contiguous"})})
    ops = [{"aten": "aten::linear.default", "args": [{"ref": "x"}, {"ref": "wg"}], "out": "v0",
            "dtypes": ["bfloat16"]},
           {"aten": "aten::gelu.default", "args": [{"ref": "v0"}], "out": "v1", "dtypes": ["bfloat16"],
            "kwargs": {"approximate": "tanh"}},
           {"aten": "aten::linear.default", "args": [{"ref": "x"}, {"ref": "wu"}], "out": "v2",
            "dtypes": ["bfloat16"]},
           {"aten": "aten::mul.Tensor", "args": [{"ref": "v1"}, {"ref": "v2"}], "out": "v3", "dtypes": ["bfloat16"]}]
    write(f"gemm_gated_gelu_bf16_{m}x{n}x{k}",
          f"Gemma-4's MLP front, a gated pair: F.gelu(F.linear(x [{m}, {k}], wg [{n}, {k}]), approximate='tanh') * "
          f"F.linear(x, wu [{n}, {k}]) in bfloat16 (kiln's wgmma GEMM computes both in one tile, the product in "
          "its epilogue; eager runs four ops).", (m, n, k),
          {"x": {"shape": [f"n{m}", f"n{k}"], "dtype": "bfloat16"},
           "wg": {"shape": [f"n{n}", f"n{k}"], "dtype": "bfloat16"},
           "wu": {"shape": [f"n{n}", f"n{k}"], "dtype": "bfloat16"}},
          "import torch\n\n\n@torch.no_grad()\ndef run(x, wg, wu):\n    g = torch.ops.aten.linear.default(x, wg)\n"
          "    return torch.ops.aten.mul.Tensor(torch.ops.aten.gelu.default(g, approximate='tanh'), "
          "torch.ops.aten.linear.default(x, wu))\n",
          {"kind": "chain", "pattern": "gemm_gated", "members": [o["aten"] for o in ops], "calls": 1,
           "flops": 4.0 * m * n * k, "ops": ops,
           "outputs": ["v3"], "layouts": {t: {"stored": "contiguous"} for t in ("x", "wg", "wu", "out0")}})

    m = n = k = 8192
    for rowwise in (False, True):
        sa, sb = ([f"n{m}", "n1"], ["n1", f"n{n}"]) if rowwise else ([], [])
        what = ("a float32 scale a row of x ([M, 1]) and a column of w ([1, N]): PyTorch's rowwise fp8" if rowwise
                else "one float32 scale each")
        write(f"gemm_scaled_mm{'_rowwise' if rowwise else ''}_e4m3_{m}x{n}x{k}",
              f"fp8 8192³: torch._scaled_mm(x [{m}, {k}], w [{n}, {k}].t(), scale_a, scale_b, "
              f"out_dtype=torch.bfloat16), float8_e4m3fn, {what}.", (m, n, k, 1),
              {"x": {"shape": [f"n{m}", f"n{k}"], "dtype": "float8_e4m3fn"},
               "w": {"shape": [f"n{n}", f"n{k}"], "dtype": "float8_e4m3fn"},
               "sa": {"shape": sa, "dtype": "float32"}, "sb": {"shape": sb, "dtype": "float32"}},
              "import torch\n\n\n@torch.no_grad()\ndef run(x, w, sa, sb):\n"
              "    w = w.permute(1, 0)  # captured as w.t(), stored [N, K]\n"
              "    return torch.ops.aten._scaled_mm.default(x, w, sa, sb, None, None, torch.bfloat16)\n",
              {"kind": "aten", "aten": "aten::_scaled_mm.default", "calls": 1, "flops": 2.0 * m * n * k,
               "args": {"args": [{"tensor": 0}, {"tensor": 1}, {"tensor": 2}, {"tensor": 3}, None, None,
                                 "torch.bfloat16"], "kwargs": {}},
               "layouts": {"x": {"stored": "contiguous"}, "sa": {"stored": "contiguous"},
                           "sb": {"stored": "contiguous"}, "out0": {"stored": "contiguous"},
                           "w": {"stored": "memory_order", "stored_shape": [n, k], "permute": [1, 0]}}},
              op_type="scaled_mm")


if __name__ == "__main__":
    main()
