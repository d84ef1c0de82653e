"""GEMMs followed by the pointwise epilogue cuBLASLt fuses: nn.Linear + GELU (tanh), nn.Linear + ReLU (in
place, as torchvision's), and x @ w + b then GELU (erf), whose fused form (cuBLASLt's tanh GELU) the gate
refuses in float32 (tests/py/test_chains.py captures it and proves each block with the cublaslt family on the
cpu backend)."""

import torch
import torch.nn.functional as F

ROWS, IN, HIDDEN, OUT = 16, 32, 48, 24


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(IN, HIDDEN)
        self.act1 = torch.nn.GELU(approximate="tanh")
        self.fc2 = torch.nn.Linear(HIDDEN, HIDDEN)
        self.act2 = torch.nn.ReLU(inplace=True)
        self.w3 = torch.nn.Parameter(torch.randn(HIDDEN, OUT) / HIDDEN ** 0.5)
        self.b3 = torch.nn.Parameter(torch.randn(OUT))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act2(self.fc2(self.act1(self.fc1(x))))
        return F.gelu(h @ self.w3 + self.b3)


def build() -> Net:
    torch.manual_seed(0)
    return Net().eval()


if __name__ == "__main__":
    model = build()
    with torch.inference_mode():
        for _ in range(2):
            model(torch.randn(ROWS, IN))
