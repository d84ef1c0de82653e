"""Hugging Face's GPT-2 with its eager attention, run under torch.no_grad (as third-party inference scripts
do): torch.matmul on [b, h, s, d], a scale, the causal mask added, softmax, torch.matmul with v. Below
autograd each matmul is a bmm of 3-D views; capture records torch.matmul whole (tests/py/test_chains.py).
A second block writes the same attention with `@` and Tensor.matmul, as hand-written models do."""
import torch
from transformers import GPT2Config, GPT2LMHeadModel


class HandAttention(torch.nn.Module):
    def forward(self, q, k, v, mask):
        scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5 + mask
        return torch.softmax(scores, dim=-1).matmul(v)


cfg = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=64, bos_token_id=0, eos_token_id=0)
cfg._attn_implementation = "eager"
torch.manual_seed(0)
model = GPT2LMHeadModel(cfg).eval()
hand = HandAttention()
ids = torch.randint(0, 128, (2, 32))
q, k, v = (torch.randn(2, 4, 32, 16) for _ in range(3))
mask = torch.full((32, 32), float("-inf")).triu(1)
with torch.no_grad():
    for _ in range(2):
        model(ids)
        hand(q, k, v, mask)
