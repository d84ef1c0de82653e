"""size_ops.py: single ops and small models whose inputs are 2-4 GiB, for bench/capture_size_device.sh —
scripts of kiln's own in the style of the unseen real-size scripts of issue 14 (softmax and log-softmax over
long fp32 rows, elementwise activations, group/RMS/batch/layer norms, sums and means over one axis,
windowed average pooling, conv + norm + activation models, a masked attention softmax).

    python bench/size_ops.py OP [--device cuda] [--iters 3] [--small]

Every case builds its tensors, then runs its forward --iters times inside a module (so capture sees the
model), and prints the input size and the median time. --small runs CPU-sized shapes of the same ops.
"""

import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Op(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


class RMSNorm(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(hidden) + 0.5)

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class ConvNormAct(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.norm = nn.GroupNorm(32, c)

    def forward(self, x):
        return F.silu(self.norm(self.conv(x)))


def cases() -> dict:
    """name -> (module, [input shapes at real size], [shapes with --small], dtype, input kind)."""
    return {
        "softmax": (Op(lambda x: torch.softmax(x, dim=-1)), [(32768, 32768)], [(256, 32768)], torch.float32,
                    "randn"),                                                                   # 4 GiB
        "log_softmax": (Op(lambda x: F.log_softmax(x, dim=-1)), [(16384, 65536)], [(128, 65536)], torch.float32,
                        "randn"),                                                               # 4 GiB
        "gelu": (Op(F.gelu), [(1 << 19, 4096)], [(4096, 4096)], torch.bfloat16, "randn"),       # 4 GiB
        "silu": (Op(F.silu), [(1 << 18, 4096)], [(2048, 4096)], torch.float32, "randn"),        # 4 GiB
        "rmsnorm": (RMSNorm(8192), [(1 << 18, 8192)], [(1024, 8192)], torch.bfloat16, "randn"),  # 4 GiB
        "layer_norm": (nn.LayerNorm(4096), [(1 << 18, 4096)], [(1024, 4096)], torch.float32, "randn"),  # 4 GiB
        "group_norm": (nn.GroupNorm(32, 256), [(64, 256, 256, 256)], [(1, 256, 64, 64)], torch.float32,
                       "randn"),                                                                # 4 GiB
        "batch_norm": (nn.BatchNorm2d(128).eval(), [(128, 128, 256, 256)], [(1, 128, 64, 64)], torch.bfloat16,
                       "randn"),                                                                # 2 GiB
        "sum_axis": (Op(lambda x: x.sum(dim=1)), [(16384, 65536)], [(64, 65536)], torch.float32, "randn"),  # 4 GiB
        "mean_axis": (Op(lambda x: x.mean(dim=0)), [(65536, 16384)], [(256, 16384)], torch.float32,
                      "randn"),                                                                 # 4 GiB
        "avg_pool": (Op(lambda x: F.avg_pool2d(x, 3, stride=1, padding=1)), [(32, 256, 256, 256)],
                     [(1, 64, 64, 64)], torch.float32, "randn"),                                # 2 GiB
        "conv_norm_act": (ConvNormAct(256), [(64, 256, 256, 256)], [(1, 256, 16, 16)], torch.bfloat16,
                          "randn"),                                                             # 2 GiB
        "masked_softmax": (Op(lambda x, m: torch.softmax(x + m, dim=-1)), [(16, 16, 2048, 2048), (2048, 2048)],
                           [(1, 4, 256, 256), (256, 256)], torch.float32, "causal"),             # 4 GiB
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("op")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--small", action="store_true")
    a = p.parse_args()
    table = cases()
    if a.op not in table:
        raise SystemExit(f"unknown op {a.op}; one of {' '.join(table)}")
    module, real_shapes, small_shapes, dtype, kind = table[a.op]
    shapes = small_shapes if a.small else real_shapes
    torch.manual_seed(0)
    module = module.to(a.device, dtype)
    xs = [torch.randn(shapes[0], device=a.device, dtype=dtype)]
    if kind == "causal":
        q, k = shapes[1]
        xs.append(torch.full((q, k), float("-inf"), device=a.device, dtype=dtype).triu(1))
    times = []
    with torch.inference_mode():
        for _ in range(a.iters):
            t0 = time.perf_counter()
            module(*xs)
            if a.device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    gib = sum(x.numel() * x.element_size() for x in xs) / 2**30
    print(f"{a.op}: inputs {gib:.2f} GiB {dtype} on {a.device}: forward {1e3 * statistics.median(times):.2f} ms")


if __name__ == "__main__":
    main()
