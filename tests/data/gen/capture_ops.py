"""A PyTorch script whose forward calls, on small odd shapes, every memory-bound op the tensor-expression
generator (src/gen/ir) lowers: softmax, log_softmax and logsumexp over the last and other axes,
sum/mean/amax/amin/argmax/argmin with keepdim both ways, var/std, pooling windows, adaptive pooling,
depthwise convolutions, pointwise ops, casts, masks, integer and bitwise ops, data movement, and leaf modules that write RMSNorm,
LayerNorm and softmax as chains of ops (over the last axis and over the channels of NCHW, fp32 and bf16)
and SOL-ExecBench's forms (SwiGLU, RoPE, post-norm RMSNorm with a residual). tests/py/test_generator.py captures it
with `kiln capture --device cpu` and proves every problem the capture writes on the cpu backend.

    kiln capture tests/data/gen/capture_ops.py --out runs/gen_ops --device cpu
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNormChannels(nn.Module):
    """RMSNorm over dim 1 of NCHW, in fp32 whatever the input, rounded back like LlamaRMSNorm."""

    def __init__(self, c):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(c))

    def forward(self, x):
        v = x.float().pow(2).mean(1, keepdim=True)
        return (x.float() * torch.rsqrt(v + 1e-6)).to(x.dtype) * self.weight.view(1, -1, 1, 1).to(x.dtype)


class RMSNormLast(nn.Module):
    """Gemma-style RMSNorm over the last axis: n * (1 + w) in fp32, one rounding."""

    def __init__(self, h):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(h) * 0.1)

    def forward(self, x):
        xf = x.float()
        n = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
        return (n * (1.0 + self.weight.float())).type_as(x)


class LayerNormChannels(nn.Module):
    """LayerNorm over the channels of NCHW written as ops (ConvNeXt's channels-first LayerNorm)."""

    def __init__(self, c):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(c))
        self.bias = nn.Parameter(torch.randn(c))

    def forward(self, x):
        u = x.mean(1, keepdim=True)
        d = x - u
        s = d.pow(2).mean(1, keepdim=True)
        return d / torch.sqrt(s + 1e-6) * self.weight[:, None, None] + self.bias[:, None, None]


class LayerNormLast(nn.Module):
    """LayerNorm over the last axis with var_mean and rsqrt."""

    def forward(self, x):
        var, mean = torch.var_mean(x, -1, keepdim=True, correction=0)
        return (x - mean) * torch.rsqrt(var + 1e-5)


class SoftmaxAxis(nn.Module):
    """softmax over a non-last axis written by hand: exp(x - max) / sum."""

    def forward(self, x):
        e = torch.exp(x - x.amax(1, keepdim=True))
        return e / e.sum(1, keepdim=True)


class GatedChain(nn.Module):
    """A pointwise chain with broadcasting, a clamp, a where and casts."""

    def forward(self, a, b, bias):
        h = F.gelu(a, approximate="tanh") * torch.sigmoid(b) + bias
        h = torch.where(h > 0, h, 0.1 * h).clamp(-3, 3)
        return h.to(torch.bfloat16).float() * 2.0 - 1.0


class SwiGLU(nn.Module):
    """SwiGLU's gate: silu(gate) * up on the two halves of one projection."""

    def forward(self, x):
        gate, up = x.chunk(2, -1)
        return F.silu(gate) * up


class SplitRotate(nn.Module):
    """split_with_sizes and unbind: parts of one input as separate values."""

    def forward(self, x):
        a, b = x.split([20, 13], -1)
        u0, u1, u2 = x[:3].unbind(0)
        return torch.cat([b, a], -1), u0 * u1 - u2


class Rope(nn.Module):
    """Rotary embedding as transformers writes it: q * cos + rotate_half(q) * sin."""

    def forward(self, q, cos, sin):
        half = q.shape[-1] // 2
        rotated = torch.cat((-q[..., half:], q[..., :half]), -1)
        return q * cos + rotated * sin


class RopeWholeHead(nn.Module):
    """Phi-3's partial rotary embedding with a factor of 1: the rotated head joined to an empty pass-through."""

    def forward(self, q, cos, sin):
        rot, passed = q[..., : q.shape[-1]], q[..., q.shape[-1]:]
        half = rot.shape[-1] // 2
        rotated = torch.cat((-rot[..., half:], rot[..., :half]), -1)
        return torch.cat((rot * cos + rotated * sin, passed), -1)


class RopePartial(nn.Module):
    """GPT-NeoX's partial rotary embedding: half of the head rotated, joined to the half passed through."""

    def forward(self, q, cos, sin):
        r = q.shape[-1] // 2
        rot, passed = q[..., :r], q[..., r:]
        half = r // 2
        rotated = torch.cat((-rot[..., half:], rot[..., :half]), -1)
        return torch.cat((rot * cos + rotated * sin, passed), -1)


class RopeInterleaved(nn.Module):
    """GPT-J's rotary embedding: rotate_every_two stacks (-odd, even) pairs and flattens them."""

    def forward(self, q, cos, sin):
        rotated = torch.stack((-q[..., 1::2], q[..., ::2]), dim=-1).flatten(-2)
        return q * cos + rotated * sin


class ResidualRMSNorm(nn.Module):
    """Post-norm with a residual: h = x + residual, then RMSNorm of h; both h and the norm are outputs."""

    def __init__(self, h):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(h))

    def forward(self, x, residual):
        h = x + residual
        hf = h.float()
        n = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + 1e-6)
        return (n * self.weight).to(h.dtype), h


class Ops(nn.Module):
    def __init__(self):
        super().__init__()
        self.rms_c = RMSNormChannels(6)
        self.rms_c16 = RMSNormChannels(6)
        self.rms_last = RMSNormLast(33)
        self.ln_c = LayerNormChannels(6)
        self.ln_last = LayerNormLast()
        self.smx = SoftmaxAxis()
        self.gated = GatedChain()
        self.swiglu = SwiGLU()
        self.rope = Rope()
        self.rope_whole = RopeWholeHead()
        self.rope_part = RopePartial()
        self.rope_pairs = RopeInterleaved()
        self.split_rot = SplitRotate()
        self.res_rms = ResidualRMSNorm(33)
        # depthwise convolution weights (groups = channels): 7 x 7 with a bias, 3 x 3, and 1-d
        self.register_buffer("dw7", torch.randn(6, 1, 7, 7) * 0.2)
        self.register_buffer("dw7_bias", torch.randn(6))
        self.register_buffer("dw3", torch.randn(6, 1, 3, 3) * 0.3)
        self.register_buffer("dw1d", torch.randn(7, 1, 5) * 0.3)

    def forward(self, x, y, z):
        xb, yb, zb = x.to(torch.bfloat16), y.to(torch.bfloat16), z.to(torch.bfloat16)
        yi = (y * 10).to(torch.int32)
        xcl = x.contiguous(memory_format=torch.channels_last)
        out = [
            # softmax family over any axis, fp32 and bf16, a channels-last input
            F.log_softmax(y, -1), F.log_softmax(x, 1), F.softmax(x, 1), F.softmax(y, 0), F.softmax(xb, -1),
            F.softmax(xcl, 1), torch.logsumexp(y, 1), torch.logsumexp(x, (2, 3), keepdim=True),
            # reductions, keepdim both ways
            x.sum((2, 3)), y.sum(0, keepdim=True), x.mean(1), xb.mean((-1,), keepdim=True),
            x.amax(1, keepdim=True), y.amin(0), x.argmax(1), y.argmin(-1, keepdim=True), y.argmax(),
            torch.max(y, 1), y.var(1), y.std(-1, keepdim=True), x.var((2, 3), correction=0),
            # windows
            F.avg_pool2d(x, 3, 2, 1), F.avg_pool2d(x, 2, 2, 1, ceil_mode=True, count_include_pad=False),
            F.max_pool2d(x, 3, 2, 1), F.max_pool2d(x, 2, ceil_mode=True), F.max_pool2d(x, 3, 1, 1, dilation=2),
            F.adaptive_avg_pool2d(x, 1), F.adaptive_avg_pool2d(x, (4, 5)),
            # depthwise convolutions: NCHW with a bias, channels-last strided, dilated 1-d
            F.conv2d(x, self.dw7, self.dw7_bias, padding=3, groups=6),
            F.conv2d(xcl, self.dw3, None, stride=2, padding=1, groups=6),
            F.conv1d(y[None], self.dw1d, None, padding=4, dilation=2, groups=7),
            # pointwise ops and casts
            y + z, y * z, y - z, y / (z.abs() + 1), -y, torch.exp(y), torch.log(y.abs() + 1), torch.tanh(y),
            torch.sigmoid(y), F.silu(y), F.gelu(y), F.gelu(y, approximate="tanh"), F.relu(y), y.pow(3),
            torch.pow(y.abs(), z), torch.rsqrt(y.abs() + 1), torch.sqrt(y.abs()), torch.where(y > z, y, z),
            torch.clamp(y, -0.5, 0.5), y.to(torch.bfloat16), yb.float(),
            # data movement: concatenation, padding, a gather by indices
            torch.cat([y, z[:, :5]], 1), F.pad(x, (1, 2, 0, 1), value=0.5), y[torch.tensor([3, 0, -1, 2])],
            x.repeat(1, 2, 1, 3), (y + 1).repeat(2, 1, 2),
            # the chains of leaf modules
            self.rms_c(x), self.rms_c16(xb), self.rms_last(yb), self.ln_c(x), self.ln_last(y), self.smx(x),
            self.gated(y, z, z[0]),
            # masks and integer ops, min over an axis, an embedding lookup
            torch.triu(y, 1), torch.tril(y, -1), (yi & 6) | (yi ^ 3), torch.floor_divide(yi, -3), torch.min(y, 1),
            F.embedding(torch.tensor([[1, 0], [6, 2]]), y),
            # SOL-ExecBench's forms: SwiGLU, RoPE, post-norm with a residual
            self.swiglu(y[:, :32]), self.split_rot(y), self.rope(x, x[0, 0], x[1, 0]), self.res_rms(yb, zb),
            self.rope_whole(x, x[0, 0], x[1, 0]), self.rope_part(x, x[0, 0, :, :5], x[1, 0, :, :5]),
            self.rope_pairs(x[..., :10], x[0, 0, :, :10], x[1, 0, :, :10]),
        ]
        with torch.inference_mode():  # composite ops arrive whole here: softmax.int, log_softmax.int
            out += [F.softmax(x.clone(), 2), F.log_softmax(y.clone(), 0)]
        return out


def main():
    torch.manual_seed(0)
    model = Ops()
    x, y, z = torch.randn(2, 6, 9, 11), torch.randn(7, 33), torch.randn(7, 33)
    with torch.no_grad():
        for _ in range(2):
            model(x, y, z)


if __name__ == "__main__":
    main()
