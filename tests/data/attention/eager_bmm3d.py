"""Attention over [b·h, s, d] as older diffusion code writes it, bfloat16, under torch.no_grad, for kiln capture
(tests/py/test_family_attention.py): latent-diffusion's CrossAttention (bmm of q and kᵀ, a scale, softmax, bmm with
v) on self-attention, and diffusers' AttnProcessor on cross-attention (baddbmm of q and kᵀ with alpha the scale:
beta 0 over an empty tensor without a mask, then a softmax alone, a chain of one call; beta 1 over a padding mask of
[b·h, 1, s_kv] with one, then softmax in fp32 cast back). Each block is one attention problem."""
import argparse
import torch
import torch.nn as nn

B, T, TC, C, H, D = 2, 40, 24, 64, 4, 16


class Attn(nn.Module):
    def __init__(self, baddbmm):
        super().__init__()
        self.baddbmm = baddbmm
        self.q = nn.Linear(C, H * D, bias=False)
        self.k = nn.Linear(C, H * D, bias=False)
        self.v = nn.Linear(C, H * D, bias=False)
        self.o = nn.Linear(H * D, C)
        self.scale = D ** -0.5

    def heads(self, x):
        b, t, _ = x.shape
        return x.reshape(b, t, H, D).permute(0, 2, 1, 3).reshape(b * H, t, D)

    def forward(self, x, ctx, mask=None):
        q, k, v = self.heads(self.q(x)), self.heads(self.k(ctx)), self.heads(self.v(ctx))
        if self.baddbmm:
            if mask is None:
                e = torch.empty(q.shape[0], q.shape[1], k.shape[1], dtype=q.dtype, device=q.device)
            s = torch.baddbmm(e if mask is None else mask, q, k.transpose(-1, -2), beta=0 if mask is None else 1,
                              alpha=self.scale)
            p = s.softmax(dim=-1) if mask is None else s.float().softmax(dim=-1).to(q.dtype)
        else:
            s = torch.bmm(q, k.transpose(1, 2)) * self.scale
            p = s.softmax(dim=-1)
        y = torch.bmm(p, v)
        b = x.shape[0]
        y = y.reshape(b, H, -1, D).permute(0, 2, 1, 3).reshape(b, -1, H * D)
        return self.o(y)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Attn(False)
        self.b = Attn(True)
        self.c = Attn(True)

    def forward(self, x, ctx, keep):
        x = x + self.a(x, x)
        x = x + self.b(x, ctx)
        mask = ((1 - keep.to(x.dtype)) * -10000.0).repeat_interleave(H, dim=0)[:, None]  # [b·h, 1, s_kv]
        return x + self.c(x, ctx, mask)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    device = parser.parse_args().device
    torch.manual_seed(0)
    model = Net().to(device, torch.bfloat16).eval()
    x = torch.randn(B, T, C, dtype=torch.bfloat16, device=device)
    ctx = torch.randn(B, TC, C, dtype=torch.bfloat16, device=device)
    keep = torch.arange(TC, device=device)[None] < torch.tensor([[TC], [TC - 5]], device=device)
    with torch.no_grad():
        y = model(x, ctx, keep)
    print(tuple(y.shape), float(y.float().sum()))


if __name__ == "__main__":
    main()
