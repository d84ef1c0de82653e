"""A tiny causal self-attention block that calls F.scaled_dot_product_attention (GQA 4 q / 2 kv heads), for
kiln capture: at inference SDPA's dropout is 0, so the attention op it dispatches to is a problem although
PyTorch tags it as seeded (random). With --dropout the call keeps dropout on (training): that one is random."""
import argparse
import torch
import torch.nn.functional as F

B, S, HQ, HKV, D = 2, 64, 4, 2, 32


class Attn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q = torch.nn.Linear(HQ * D, HQ * D, bias=False)
        self.kv = torch.nn.Linear(HQ * D, 2 * HKV * D, bias=False)

    dropout = 0.0

    def forward(self, x):
        q = self.q(x).view(B, S, HQ, D).transpose(1, 2)
        k, v = self.kv(x).view(B, S, 2, HKV, D).unbind(2)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        return F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout, is_causal=True, enable_gqa=True)


def build():
    torch.manual_seed(0)
    return Attn().to(torch.bfloat16).eval()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--dropout", action="store_true")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    m = build().to(args.device)
    m.dropout = 0.5 if args.dropout else 0.0
    x = torch.randn(B, S, HQ * D, dtype=torch.bfloat16, device=args.device)
    with torch.no_grad():
        for _ in range(2):
            m(x)
