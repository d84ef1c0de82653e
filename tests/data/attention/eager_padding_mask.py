"""Eager attention as BERT writes it (matmul q·kᵀ, / sqrt(d), + the extended padding mask
(1 - mask[:, None, None, :]) * finfo.min of shape [b, 1, 1, s], softmax, matmul v) under inference_mode, so that
capture sees aten::matmul whole. Batch 1 pads its last 10 keys; batch 0 pads none. float32, for kiln capture
(tests/py/test_family_attention.py)."""
import math

import torch

B, S, H, D = 2, 48, 4, 32


class Attn(torch.nn.Module):
    def forward(self, q, k, v, mask):
        ext = (1.0 - mask[:, None, None, :].to(q.dtype)) * torch.finfo(q.dtype).min
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D)
        w = w + ext
        w = torch.nn.functional.softmax(w, dim=-1)
        return torch.matmul(w, v)


def main():
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D) for _ in range(3))
    mask = torch.ones(B, S, dtype=torch.long)
    mask[1, -10:] = 0
    with torch.inference_mode():
        print(tuple(Attn()(q, k, v, mask).shape))


if __name__ == "__main__":
    main()
