"""A model with a chain of memory-bound calls in a forward that is not a leaf module's: a projection, then
softmax(y * 0.5 + bias) in the root's own forward (tests/py/test_chains.py captures it, optimizes the chain
on the cpu backend and installs it inside torch.compile)."""

import torch

ROWS, IN, OUT = 16, 32, 64


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(IN, OUT)
        self.register_buffer("bias", torch.randn(OUT))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.proj(x)
        return torch.softmax(y * 0.5 + self.bias, -1)


def build() -> Net:
    torch.manual_seed(0)
    return Net().eval()


if __name__ == "__main__":
    model = build()
    with torch.inference_mode():
        for _ in range(2):
            model(torch.randn(ROWS, IN))
