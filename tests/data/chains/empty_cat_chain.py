"""Llama's keys at prefill, as transformers writes them: rotary embedding (k * cos + rotate_half(k) * sin) and
then the KV cache's first update, a cat onto the cache's empty tensor. Captured, that is one chain of six calls
whose last input is the empty tensor, which Inductor's cat decomposition drops from the chain's pattern
(tests/py/test_chains.py: torch.compile of a Llama with this chain installed failed on the GPU)."""

import torch

BATCH, HEADS, SEQ, DIM = 1, 2, 16, 8


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.k_proj = torch.nn.Linear(HEADS * DIM, HEADS * DIM)
        self.o_proj = torch.nn.Linear(DIM, DIM)

    @staticmethod
    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        k = self.k_proj(x).view(BATCH, SEQ, HEADS, DIM).transpose(1, 2)
        k = k * cos.unsqueeze(1) + self.rotate_half(k) * sin.unsqueeze(1)
        cache = torch.tensor([], dtype=k.dtype, device=k.device)
        k = torch.cat([cache, k], dim=-2)
        return self.o_proj(k)


def build() -> Net:
    torch.manual_seed(0)
    return Net().eval()


def inputs():
    torch.manual_seed(1)
    angle = torch.randn(BATCH, SEQ, DIM)
    return torch.randn(BATCH, SEQ, HEADS * DIM), angle.cos(), angle.sin()


if __name__ == "__main__":
    model = build()
    with torch.inference_mode():
        for _ in range(2):
            model(*inputs())
