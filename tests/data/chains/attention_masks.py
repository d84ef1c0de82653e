"""Eager attention blocks whose masks have one shape and dtype but different bands, as Gemma-4's sliding and
full layers: softmax(q·kᵀ·scale + mask) in fp32, cast, ·v over 256 keys, the masks buffers made once.
Run as a script, only the sliding-window layer is called, so capture writes its block as a chain problem whose
mask is a band of WINDOW (tests/py/test_chains.py optimizes it on the cpu backend: its kernel skips the key
tiles outside the window); the test builds the model with a full-causal layer and a narrower window beside it
and installs the entry inside torch.compile."""

from typing import Optional

import torch

HEADS, SEQ, DIM, WINDOW = 2, 256, 64, 32


def band(window: Optional[int]) -> torch.Tensor:
    """[1, 1, SEQ, SEQ] bf16: key j of query i kept (0) iff i - window < j <= i (None: every j <= i), else
    finfo.min, as transformers builds its masks."""
    i, j = torch.arange(SEQ)[:, None], torch.arange(SEQ)[None, :]
    keep = (j <= i) & (j > i - window) if window else j <= i
    return torch.where(keep, 0.0, torch.finfo(torch.bfloat16).min).to(torch.bfloat16)[None, None].contiguous()


class Net(torch.nn.Module):
    """One attention layer per window; the masks are buffers, or (computed) made in forward, one per distinct
    window and shared by its layers, as transformers makes them."""

    def __init__(self, windows=(WINDOW,), computed: bool = False):
        super().__init__()
        self.windows, self.computed = tuple(windows), computed
        if not computed:
            for i, w in enumerate(windows):
                self.register_buffer(f"mask{i}", band(w))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple:
        made = {w: band(w) for w in dict.fromkeys(self.windows)} if self.computed else {}
        outs = []
        for i, w in enumerate(self.windows):
            mask = made[w] if self.computed else getattr(self, f"mask{i}")
            s = torch.matmul(q, k.transpose(2, 3)) * DIM ** -0.5 + mask
            outs.append(torch.matmul(torch.softmax(s, -1, dtype=torch.float32).to(q.dtype), v))
        return tuple(outs)


def inputs(seed: int = 0) -> tuple:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, HEADS, SEQ, DIM, generator=g).to(torch.bfloat16) for _ in range(3))


if __name__ == "__main__":
    model = Net().eval()
    with torch.inference_mode():
        for seed in range(2):
            model(*inputs(seed))
