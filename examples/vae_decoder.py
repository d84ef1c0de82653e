"""A Stable-Diffusion-3.5-Medium-like VAE decoder (random weights) for `kiln capture`, in plain torch.nn.

The network is the one of ../shared/anchors/models.py ("Whole models" in GPU.md): a 16-channel latent goes
through conv_in (512), a mid block of two residual blocks, four up blocks of three residual blocks each at
512, 512, 256, 128 channels with nearest 2x upsampling + conv after the first three, then GroupNorm + SiLU +
conv_out to 3 channels. Every residual block is GroupNorm(32, eps 1e-6) -> SiLU -> 3x3 conv, twice, plus a
1x1 conv on the skip when the channel count changes. The default is the real size: a 16x128x128 latent to a
1024x1024 image, fp32 (`--dtype bf16` for the other measured configuration).

One structural choice is kiln's: the GroupNorm that is always followed by SiLU is written as one module,
`GroupNormSiLU` (an nn.GroupNorm whose forward applies SiLU), so that the pair is a leaf module and kiln
captures it as one fusable module-level problem. It computes exactly F.silu(F.group_norm(...)), with the
same parameters as the anchor's separate GroupNorm + F.silu.

`--small` keeps the structure at channels 64/64/32/32 and a 16x8x8 latent (64x64 image) for a CPU (CI).

    python examples/vae_decoder.py                 # fp32, CUDA, 1024x1024
    python examples/vae_decoder.py --dtype bf16
    python examples/vae_decoder.py --small         # CPU-sized
    kiln capture examples/vae_decoder.py --out runs/vae
"""

import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class GroupNormSiLU(nn.GroupNorm):
    """SiLU(GroupNorm(x)): the normalisation and activation every block of the decoder applies together."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps))


class ResnetBlock(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.norm1 = GroupNormSiLU(32, cin, eps=1e-6)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.norm2 = GroupNormSiLU(32, cout, eps=1e-6)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(self.norm1(x))
        h = self.conv2(self.norm2(h))
        return self.skip(x) + h


class Decoder(nn.Module):
    """16-channel latent -> RGB image at 8x the latent's side."""

    def __init__(self, channels=(512, 512, 256, 128), latent_channels: int = 16):
        super().__init__()
        top = channels[0]
        self.conv_in = nn.Conv2d(latent_channels, top, 3, padding=1)
        self.mid = nn.Sequential(ResnetBlock(top, top), ResnetBlock(top, top))
        blocks, cin = [], top
        for i, cout in enumerate(channels):
            blocks += [ResnetBlock(cin, cout), ResnetBlock(cout, cout), ResnetBlock(cout, cout)]
            cin = cout
            if i < len(channels) - 1:
                blocks += [nn.Upsample(scale_factor=2.0, mode="nearest"), nn.Conv2d(cout, cout, 3, padding=1)]
        self.up = nn.Sequential(*blocks)
        self.norm_out = GroupNormSiLU(32, channels[-1], eps=1e-6)
        self.conv_out = nn.Conv2d(channels[-1], 3, 3, padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.conv_out(self.norm_out(self.up(self.mid(self.conv_in(z)))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="channels 64/64/32/32, 16x8x8 latent (CI)")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--latent", type=int, default=None, help="latent side (default 128; 8 with --small)")
    parser.add_argument("--channels-last", action="store_true", help="NHWC memory format for model and input")
    parser.add_argument("--iters", type=int, default=3, help="forward passes (the first is a warm-up)")
    args = parser.parse_args()

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    side = args.latent or (8 if args.small else 128)
    torch.backends.cuda.matmul.allow_tf32 = True  # as the anchors (../shared/anchors/models.py) ran
    torch.manual_seed(0)
    model = Decoder((64, 64, 32, 32) if args.small else (512, 512, 256, 128)).to(dtype)
    z = torch.randn(args.batch, 16, side, side, dtype=dtype)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
        z = z.to(memory_format=torch.channels_last)
    model = model.to(device).eval()
    z = z.to(device)

    times_ms = []
    with torch.inference_mode():
        for _ in range(max(args.iters, 1)):
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            image = model(z)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            times_ms.append((time.perf_counter() - t0) * 1e3)
    timed = times_ms[1:] or times_ms
    print(f"sd35-like VAE decoder {args.dtype} latent 16x{side}x{side} -> {tuple(image.shape[1:])} on {device}: "
          f"forward {statistics.median(timed):.2f} ms (median of {len(timed)}; first {times_ms[0]:.2f} ms)")


if __name__ == "__main__":
    main()
