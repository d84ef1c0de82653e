"""A residual block whose sum is read twice, as in the VAE decoder: s = conv(x) + x, then GroupNorm + SiLU of s
into the next convolution, and s again by the closing residual add. Capture joins add -> group_norm -> silu
into one chain that returns the sum too (tests/py/test_chains.py optimizes it on the cpu backend and installs
it inside torch.compile, where the entry's op returns both)."""

import torch
import torch.nn.functional as F

BATCH, CHANNELS, GROUPS, SIDE = 1, 16, 4, 8


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(CHANNELS, CHANNELS, 3, padding=1)
        self.norm = torch.nn.GroupNorm(GROUPS, CHANNELS, eps=1e-6)
        self.conv2 = torch.nn.Conv2d(CHANNELS, CHANNELS, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.conv1(x) + x
        return self.conv2(F.silu(self.norm(s))) + s


def build() -> Net:
    torch.manual_seed(0)
    return Net().eval()


if __name__ == "__main__":
    model = build()
    with torch.inference_mode():
        for _ in range(2):
            model(torch.randn(BATCH, CHANNELS, SIDE, SIDE))
