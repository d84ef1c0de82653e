"""A decode loop as `generate` runs it: each forward pass computes a new key (a projection and a pointwise
tail) and joins it to the cache the previous pass returned, so the cats of successive passes read each other's
results. Within a pass the tail and its cat are a chain; across passes they are not (the passes never run as
one graph: tests/py/test_chains.py)."""

import torch

BATCH, WIDTH, STEPS = 2, 16, 4


class Step(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        k = self.proj(x)
        k = k * torch.sigmoid(k) + 1.0
        return torch.cat([cache, k], 1)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Step().eval()
    with torch.inference_mode():
        cache = torch.randn(BATCH, 3, WIDTH)
        for _ in range(STEPS):
            cache = model(torch.randn(BATCH, 1, WIDTH), cache)
