"""Causal self-attention with q and k upcast to float32 before the scores, as Hugging Face's GPT-J writes it: the
query and key (16-bit, after rotary embeddings) `.to(torch.float32)`, `query @ key.transpose(-1, -2)` in float32,
divided by sqrt(d), an additive causal mask, softmax, cast back to v's dtype, `weights @ v`; bfloat16, two layers,
under torch.no_grad, for kiln capture (tests/py/test_family_attention.py): the casts are part of the block, whose
q, k and v are then all bfloat16 (without them: "q, k, v and the output must share one dtype")."""
import causal_stack
import torch
import torch.nn as nn

B, T, C, H, D = 2, 48, 64, 4, 16


class UpcastAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(C, 3 * H * D, bias=False)
        self.out = nn.Linear(H * D, C, bias=False)
        self.scale_attn = D ** 0.5

    def forward(self, x, mask):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, H, D).unbind(2)
        q, k, v = q * 1.0625, k.transpose(1, 2).contiguous(), v.transpose(1, 2)  # a stand-in for rotary on q
        q = q.permute(0, 2, 1, 3)
        query, key = q.to(torch.float32), k.to(torch.float32)
        w = torch.matmul(query, key.transpose(-1, -2))
        w = w / self.scale_attn
        w = w + mask
        w = nn.functional.softmax(w, dim=-1).to(v.dtype)
        y = torch.matmul(w, v).transpose(1, 2).reshape(b, t, H * D)
        return self.out(y)


if __name__ == "__main__":
    causal_stack.main(UpcastAttention, __doc__, (B, T, C))
