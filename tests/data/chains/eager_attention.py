"""Eager attention blocks as third-party inference code writes them, run under torch.no_grad
(tests/py/test_chains.py):
- Hugging Face's GPT-2 with its eager attention: torch.matmul on [b, h, s, d], a scale, the causal mask
  added, softmax, torch.matmul with v. Below autograd each matmul is a bmm of 3-D views; capture records
  torch.matmul whole.
- The same written with `@` and Tensor.matmul.
- torchvision Swin's window attention: q, k and v sliced from one fused projection (tensors with gaps),
  `q @ k.transpose(-2, -1)` plus a relative position bias; capture stores k's dense copy in its memory
  order, so its head dim stays innermost."""
import torch
from transformers import GPT2Config, GPT2LMHeadModel


class HandAttention(torch.nn.Module):
    def forward(self, q, k, v, mask):
        scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5 + mask
        return torch.softmax(scores, dim=-1).matmul(v)


class WindowAttention(torch.nn.Module):
    def __init__(self, dim=64, heads=2, window=49):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.bias = torch.nn.Parameter(torch.randn(1, heads, window, window))

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        q = q * (c // self.heads) ** -0.5
        attn = (q @ k.transpose(-2, -1)) + self.bias
        return (attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, n, c)


cfg = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=64, bos_token_id=0, eos_token_id=0)
cfg._attn_implementation = "eager"
torch.manual_seed(0)
model = GPT2LMHeadModel(cfg).eval()
hand, window = HandAttention(), WindowAttention().eval()
ids = torch.randint(0, 128, (2, 32))
q, k, v = (torch.randn(2, 4, 32, 16) for _ in range(3))
mask = torch.full((32, 32), float("-inf")).triu(1)
x = torch.randn(8, 49, 64)
with torch.no_grad():
    for _ in range(2):
        model(ids)
        hand(q, k, v, mask)
        window(x)
