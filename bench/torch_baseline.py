"""torch_baseline.py: times PyTorch eager and torch.compile on one op pattern, on the GPU, the way kiln's gate
times kernels (L2 flushed before each run, CUDA events, median), so that the figures sit beside kiln's in one
run. Usage: python3 bench/torch_baseline.py softmax_bf16 [--rows R] [--modes eager,default,max-autotune-no-cudagraphs]
Prints one JSON line per mode: {"case": ..., "mode": ..., "median_us": ..., "gbps": ...}."""
import argparse
import json
import statistics
import sys

import torch


def softmax_bf16(x):
    return torch.softmax(x.float(), dim=-1).to(torch.bfloat16)


def rmsnorm_bf16(x, w):
    xf = x.to(torch.float32)
    inv = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + 1e-5)
    return ((xf * inv) * w.to(torch.float32)).to(x.dtype)


def time_fn(fn, args, iters=50, warmup=5):
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for _ in range(warmup):
        fn(*args)
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        flush.zero_()
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1000.0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case", choices=["softmax_bf16", "rmsnorm_bf16"])
    ap.add_argument("--rows", type=int, default=32768)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--modes", default="eager,default,max-autotune-no-cudagraphs")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_baseline: no CUDA device", file=sys.stderr)
        return 2
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(args.rows, args.cols, device="cuda", generator=g).to(torch.bfloat16)
    if args.case == "softmax_bf16":
        fn, fargs = softmax_bf16, (x,)
        n_bytes = 2 * x.numel() * 2
    else:
        w = torch.randn(args.cols, device="cuda", generator=g).to(torch.bfloat16)
        fn, fargs = rmsnorm_bf16, (x, w)
        n_bytes = 2 * x.numel() * 2 + w.numel() * 2
    for mode in args.modes.split(","):
        f = fn if mode == "eager" else torch.compile(fn, mode=None if mode == "default" else mode)
        with torch.inference_mode():
            us = time_fn(f, fargs)
        print(json.dumps({"case": args.case, "rows": args.rows, "cols": args.cols, "mode": mode,
                          "median_us": round(us, 2), "gbps": round(n_bytes / (us * 1e3), 1)}),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
