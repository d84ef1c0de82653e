"""Causal self-attention with Gemma-2's logit soft cap, as Hugging Face's Gemma-2 eager attention writes it: the
scores scaled, divided by the cap, tanh, times the cap, an additive causal mask, softmax in fp32 cast back, dropout
(eval), `weights @ v`, with grouped-query heads through repeat_kv; bfloat16, two layers, under torch.no_grad, for kiln
capture (tests/py/test_family_attention.py): the block is one attention problem with a soft cap."""
import causal_stack
import torch
import torch.nn as nn

B, T, C, HQ, HKV, D, CAP = 2, 48, 64, 4, 2, 16, 50.0


class SoftcapAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj = nn.Linear(C, HQ * D, bias=False)
        self.k_proj = nn.Linear(C, HKV * D, bias=False)
        self.v_proj = nn.Linear(C, HKV * D, bias=False)
        self.o_proj = nn.Linear(HQ * D, C, bias=False)
        self.scaling = D ** -0.5

    def forward(self, x, mask):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, HQ, D).transpose(1, 2)
        k = self.k_proj(x).view(b, t, HKV, D).transpose(1, 2)
        v = self.v_proj(x).view(b, t, HKV, D).transpose(1, 2)
        rep = HQ // HKV
        k = k[:, :, None].expand(b, HKV, rep, t, D).reshape(b, HQ, t, D)
        v = v[:, :, None].expand(b, HKV, rep, t, D).reshape(b, HQ, t, D)
        w = torch.matmul(q, k.transpose(2, 3)) * self.scaling
        w = w / CAP
        w = torch.tanh(w)
        w = w * CAP
        w = w + mask
        w = nn.functional.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
        w = nn.functional.dropout(w, p=0.0, training=self.training)
        y = torch.matmul(w, v).transpose(1, 2).contiguous().reshape(b, t, HQ * D)
        return self.o_proj(y)


if __name__ == "__main__":
    causal_stack.main(SoftcapAttention, __doc__, (B, T, C))
