"""Causal self-attention as older Hugging Face GPT-2 (and GPT-Neo, GPT-J) writes it: the scores divided by a 0-dim
tensor (`torch.full([], head_dim ** 0.5)`), then `torch.where(causal_mask, scores, torch.full([], finfo.min))` with a
registered lower-triangular boolean buffer, softmax, dropout (eval), `att @ v`; bfloat16, two layers, under
torch.no_grad, for kiln capture (tests/py/test_family_attention.py): capture writes both 0-dim tensors as their
numbers (div.Scalar, where.ScalarOther), and the block is an attention problem whose boolean mask is True where kept."""
import argparse

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
        self.register_buffer("bias", torch.tril(torch.ones(BLOCK, BLOCK, dtype=torch.bool)).view(1, 1, BLOCK, BLOCK),
                             persistent=False)

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(b, t, H, c // H).transpose(1, 2)
        q = q.view(b, t, H, c // H).transpose(1, 2)
        v = v.view(b, t, H, c // H).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-1, -2))
        att = att / torch.full([], v.size(-1) ** 0.5, dtype=att.dtype, device=att.device)
        causal_mask = self.bias[:, :, :t, :t]
        mask_value = torch.full([], torch.finfo(att.dtype).min, dtype=att.dtype, device=att.device)
        att = torch.where(causal_mask, att.to(att.dtype), mask_value)
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
