"""SDPA with boolean masks, as Hugging Face models and nn.MultiheadAttention pass them (True takes part): a
padding mask [B, 1, S, S] (the second sequence's last keys are padding) and a sliding window of 16 keys
[1, 1, S, S], GQA 4 q / 2 kv heads in bfloat16, for kiln capture (tests/py/test_family_attention.py): each call
is an attention problem, the window an exact band."""
import torch
import torch.nn.functional as F

B, S, HQ, HKV, D, WINDOW, PAD = 2, 64, 4, 2, 32, 16, 24


class Attn(torch.nn.Module):
    def forward(self, q, k, v, keep, window):
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, enable_gqa=True)
        b = F.scaled_dot_product_attention(q, k, v, attn_mask=window, enable_gqa=True)
        return a, b


def main():
    torch.manual_seed(0)
    q = torch.randn(B, HQ, S, D, dtype=torch.bfloat16)
    k = torch.randn(B, HKV, S, D, dtype=torch.bfloat16)
    v = torch.randn(B, HKV, S, D, dtype=torch.bfloat16)
    keep = torch.ones(B, 1, S, S, dtype=torch.bool)
    keep[1, :, :, S - PAD:] = False
    i = torch.arange(S)
    window = ((i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - WINDOW))[None, None]
    with torch.no_grad():
        a, b = Attn()(q, k, v, keep, window)
    print(tuple(a.shape), tuple(b.shape))


if __name__ == "__main__":
    main()
