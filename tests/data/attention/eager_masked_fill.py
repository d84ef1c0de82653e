"""Causal self-attention as minGPT writes it: the scores filled with -inf where a registered lower-triangular
buffer is 0 (`att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))`), softmax, dropout (eval), then
`att @ v`; bfloat16, two layers, run under torch.no_grad, for kiln capture (tests/py/test_family_attention.py):
each call is an attention problem whose boolean mask is True where masked (SDPA's is True where kept)."""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

B, T, C, H, BLOCK = 2, 48, 64, 4, 64


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.attn_dropout = nn.Dropout(0.1)
        self.register_buffer("bias", torch.tril(torch.ones(BLOCK, BLOCK)).view(1, 1, BLOCK, BLOCK))

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(b, t, H, c // H).transpose(1, 2)
        q = q.view(b, t, H, c // H).transpose(1, 2)
        v = v.view(b, t, H, c // H).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    device = parser.parse_args().device
    torch.manual_seed(0)
    model = nn.Sequential(CausalSelfAttention(), CausalSelfAttention()).to(device, torch.bfloat16).eval()
    x = torch.randn(B, T, C, dtype=torch.bfloat16, device=device)
    with torch.no_grad():
        y = model(x)
    print(tuple(y.shape), float(y.float().sum()))


if __name__ == "__main__":
    main()
