"""A chain whose first call's result is read outside it and whose later call reads a tensor computed after
that first call: a = x + y; z = v(x); b = a * z; both a and b read afterwards (tests/py/test_install_graph.py:
kiln's graph mode puts the chain's op where all its inputs exist)."""

import torch

ROWS, IN = 16, 64


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.v = torch.nn.Linear(IN, IN)
        self.out_a = torch.nn.Linear(IN, IN)
        self.out_b = torch.nn.Linear(IN, IN)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        a = x + y
        z = self.v(x)
        b = a * z
        return self.out_b(b) - self.out_a(a)


def build() -> Net:
    torch.manual_seed(0)
    return Net().eval()


if __name__ == "__main__":
    model = build()
    with torch.inference_mode():
        for _ in range(2):
            model(torch.randn(ROWS, IN), torch.randn(ROWS, IN))
