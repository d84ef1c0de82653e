"""One module called at two shapes, as a language model's activation is in a prefill and then in each decode
step (GPT-2's NewGELUActivation at [batch, prompt, 4 * hidden] and [batch, 1, 4 * hidden]): capture writes a
module problem for each shape, and an installation binds both entries to the same module instance."""

import math

import torch

BATCH, PROMPT, HIDDEN = 2, 16, 64


class NewGELUActivation(torch.nn.Module):
    """GELU's tanh form, written out as GPT-2 writes it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.act = NewGELUActivation()
        self.fc = torch.nn.Linear(HIDDEN, HIDDEN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.act(x))


def build() -> Net:
    torch.manual_seed(0)
    return Net().eval()


def inputs():
    torch.manual_seed(1)
    return torch.randn(BATCH, PROMPT, HIDDEN), torch.randn(BATCH, 1, HIDDEN)


if __name__ == "__main__":
    model = build()
    prefill, step = inputs()
    with torch.inference_mode():
        for _ in range(2):
            model(prefill)
            model(step)
