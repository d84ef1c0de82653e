"""Writes the two safetensors fixtures that Python's safetensors package made for the C tests. They were
generated once (safetensors 0.8.0, torch 2.11.0) and are committed; run this again only to remake them
(the bytes may differ: safetensors writes __metadata__ in hash order):

    .venv/bin/python tests/data/formats/gen_python_fixtures.py

python_written.safetensors   bf16, f32, i64 and 0-d tensors with __metadata__ (test_safetensors.c)
python_minifloats.safetensors  every float8 code, a sample of float16/bfloat16 codes, each with PyTorch's
                             float64 value; float32 inputs with PyTorch's rounding to each type; a
                             float4_e2m1fn_x2 tensor (written as "F4")  (test_dtype.c, test_safetensors.c)
"""
import os

import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))


def python_written():
    t = {
        "w_bf16": torch.tensor([[1.0, -2.5, 3.140625], [0.0, 65280.0, -0.0078125]], dtype=torch.bfloat16),
        "x_f32": torch.arange(6, dtype=torch.float32).reshape(3, 2) * 0.5 - 1.0,
        "idx_i64": torch.tensor([0, -1, 2**40, -(2**62)], dtype=torch.int64),
        "scalar_f32": torch.tensor(3.5, dtype=torch.float32),
    }
    save_file(t, os.path.join(HERE, "python_written.safetensors"),
              metadata={"format": "pt", "source": "kiln test"})


def python_minifloats():
    g = torch.Generator().manual_seed(1234)
    t = {}
    for name, dt in [("e4m3", torch.float8_e4m3fn), ("e5m2", torch.float8_e5m2)]:
        x = torch.arange(256, dtype=torch.uint8).view(dt)
        t[f"all_{name}"] = x
        t[f"all_{name}_f64"] = x.to(torch.float64)
    for name, dt in [("f16", torch.float16), ("bf16", torch.bfloat16)]:
        i = torch.arange(1024, dtype=torch.int32)
        x = (i * 64 + i % 61).to(torch.int16).view(dt)
        t[f"some_{name}"] = x
        t[f"some_{name}_f64"] = x.to(torch.float64)

    def inputs(lo, hi, n):  # log-uniform magnitudes over the type's range, random signs
        e = torch.empty(n, dtype=torch.float64).uniform_(lo, hi, generator=g)
        s = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).double()
        return (s * torch.exp2(e)).float()

    for name, dt, lo, hi in [("f16", torch.float16, -26, 16.2), ("bf16", torch.bfloat16, -135, 127.9),
                             ("e4m3", torch.float8_e4m3fn, -11, 8.8), ("e5m2", torch.float8_e5m2, -18, 15.9)]:
        x = inputs(lo, hi, 448)
        v = t[f"all_{name}_f64"] if name in ("e4m3", "e5m2") else t[f"some_{name}_f64"]
        v = v[torch.isfinite(v)].unique()  # sorted
        mids = ((v[1:] + v[:-1]) / 2)[::max(1, len(v) // 64)].float()  # ties, for the fp8 types
        x = torch.cat([x, mids])
        if name == "e4m3":
            x = x[x.abs() <= 464]  # PyTorch makes NaN of larger values; kiln saturates (documented)
        t[f"round_{name}_in"] = x
        t[f"round_{name}_out"] = x.to(dt)
    t["f4_x2"] = torch.tensor([[0x10, 0x32, 0x54], [0x76, 0x98, 0xfa]],
                              dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    save_file(t, os.path.join(HERE, "python_minifloats.safetensors"),
              metadata={"generated_by": "torch " + torch.__version__})


if __name__ == "__main__":
    python_written()
    python_minifloats()
