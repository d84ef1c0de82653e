"""A tiny model for the install tests (tests/py/test_install.py): an RMSNorm module, a linear layer and a
softmax over the last axis, small enough to capture, optimize and install on a CPU in seconds.

    python tests/data/install/tiny_model.py [--rows N] [--hidden H] [--iters K] [--device cpu|cuda]

It prints its forward time like the examples do. kiln needs nothing from it but that it runs.
"""

import argparse
import time

import torch


class RMSNorm(torch.nn.Module):
    """x * rsqrt(mean(x^2) + eps) * weight, in float32 (the llama form)."""

    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(variance + self.eps) * self.weight


class TinyModel(torch.nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.norm = RMSNorm(hidden)
        self.proj = torch.nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(self.norm(x))
        return torch.softmax(h, dim=-1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = TinyModel(args.hidden).to(args.device).eval()
    with torch.no_grad():
        model.norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(args.rows, args.hidden, device=args.device)
    times = []
    with torch.inference_mode():
        for _ in range(max(args.iters, 1)):
            t0 = time.perf_counter()
            y = model(x)
            times.append((time.perf_counter() - t0) * 1e3)
    print(f"tiny model {args.rows}x{args.hidden} on {args.device}: forward {min(times):.3f} ms, "
          f"checksum {float(y.double().sum()):.6f}")


if __name__ == "__main__":
    main()
