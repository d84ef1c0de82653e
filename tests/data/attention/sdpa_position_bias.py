"""SDPA with an additive relative position bias as T5 builds it: an embedding of the bucketed distance j - i,
[q, k, heads], permuted to [1, heads, q, k] without a copy, so the mask's key dim is not innermost in memory
(its heads are). GQA-free, 4 heads of 64, bfloat16, for kiln capture (tests/py/test_family_attention.py)."""
import torch
import torch.nn.functional as F

B, S, H, D, BUCKETS = 2, 48, 4, 64, 16


class Attn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = torch.nn.Embedding(BUCKETS, H)

    def forward(self, q, k, v):
        i = torch.arange(S)
        rel = (i[None, :] - i[:, None]).clamp(-(BUCKETS // 2), BUCKETS // 2 - 1) + BUCKETS // 2
        bias = self.bias(rel).permute(2, 0, 1)[None]  # [1, H, S, S], heads innermost in memory
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype), scale=1.0)


def main():
    torch.manual_seed(0)
    m = Attn().to(torch.bfloat16).eval()
    q, k, v = (torch.randn(B, H, S, D, dtype=torch.bfloat16) / D ** 0.25 for _ in range(3))
    with torch.no_grad():
        print(tuple(m(q, k, v).shape))


if __name__ == "__main__":
    main()
