"""gemm_torch.py: times PyTorch's GEMM on one shape the way build/gemm_bench times cuBLASLt's configs (L2
flushed before each run, CUDA events, median; bench/torch_baseline.time_fn), so that bench/gemm_device.sh puts
both in one table. The layout is build/gemm_bench's default: F.linear(x [M, K], w [N, K]) (x @ wᵀ); fp8 is
torch._scaled_mm(x, w.t()) with per-tensor scales of 1 (--epilogue rowwise: scales [M, 1] and [1, N], PyTorch's
rowwise fp8), writing bfloat16; --epilogue bias_gelu is
F.gelu(F.linear(x, w, b), approximate="tanh"), bias is F.linear(x, w, b), gated_gelu is Gemma-4's MLP front
F.gelu(F.linear(x, wg), approximate="tanh") * F.linear(x, wu) (four ops in eager; TFLOP/s count both GEMMs).
Usage: python3 bench/gemm_torch.py [--modes eager,max-autotune-no-cudagraphs] [--epilogue E] M N K [dtype]
Prints one JSON line per mode: {"m", "n", "k", "dtype", "epilogue", "mode", "median_us", "tflops"} or with
"error" instead of the times."""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_baseline import time_fn  # noqa: E402


def make_fn(dtype, epilogue):
    if dtype in ("float8_e4m3fn", "float8_e5m2"):
        def fp8(x, w, b, sa, sb):
            return torch._scaled_mm(x, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
        return fp8
    if epilogue in ("none", "rowwise"):
        return lambda x, w, b, sa, sb: F.linear(x, w)
    if epilogue == "bias":
        return lambda x, w, b, sa, sb: F.linear(x, w, b)
    if epilogue == "bias_gelu":
        return lambda x, w, b, sa, sb: F.gelu(F.linear(x, w, b), approximate="tanh")
    if epilogue == "gated_gelu":  # b is the up projection's weight here
        return lambda x, w, b, sa, sb: F.gelu(F.linear(x, w), approximate="tanh") * F.linear(x, b)
    raise SystemExit(f"gemm_torch.py: epilogue {epilogue} not timed here")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--modes", default="eager,max-autotune-no-cudagraphs")
    ap.add_argument("--epilogue", default="none")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("m", type=int)
    ap.add_argument("n", type=int)
    ap.add_argument("k", type=int)
    ap.add_argument("dtype", nargs="?", default="bfloat16")
    a = ap.parse_args()
    torch.manual_seed(0)
    dt = getattr(torch, a.dtype)
    fp8 = a.dtype.startswith("float8")
    make = torch.bfloat16 if fp8 else dt
    x = (torch.rand(a.m, a.k, device="cuda", dtype=make) * 2 - 1).to(dt)
    w = (torch.rand(a.n, a.k, device="cuda", dtype=make) * 2 - 1).to(dt)
    b = (torch.rand(a.n, a.k, device="cuda", dtype=make) * 2 - 1 if a.epilogue == "gated_gelu"
         else torch.rand(a.n, device="cuda", dtype=make) - 0.5)
    one = torch.ones((), device="cuda", dtype=torch.float32)
    args = (x, w, b, one, one)
    if a.epilogue == "rowwise":  # fp8 scaled a row of x and a column of w
        args = (x, w, b, torch.ones(a.m, 1, device="cuda"), torch.ones(1, a.n, device="cuda"))
    flops = (4.0 if a.epilogue == "gated_gelu" else 2.0) * a.m * a.n * a.k
    base = {"m": a.m, "n": a.n, "k": a.k, "dtype": a.dtype, "epilogue": a.epilogue}
    fn = make_fn(a.dtype, a.epilogue)
    for mode in a.modes.split(","):
        row = dict(base, mode=mode)
        try:
            f = fn if mode == "eager" else torch.compile(fn, mode=mode, dynamic=False)
            us = time_fn(f, args, iters=a.iters)
            row.update(median_us=us, tflops=flops / us / 1e6)
        except Exception as e:  # one line per failure; the other modes still run
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
