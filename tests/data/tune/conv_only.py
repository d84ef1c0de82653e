"""A model kiln has nothing to optimise in (tests/py/test_tune.py): two convolutions, whose aten ops no kernel
family matches (linear layers were this model until the cublaslt family took GEMMs). `kiln tune` must still
time it eager and with torch.compile and say why each op was left."""

import argparse

import torch


class TwoConv(torch.nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.a = torch.nn.Conv2d(channels, channels, 3, padding=1)
        self.b = torch.nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--channels", type=int, default=16)
    parser.add_argument("--size", type=int, default=32)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = TwoConv(args.channels).eval()
    x = torch.randn(args.batch, args.channels, args.size, args.size)
    with torch.inference_mode():
        for _ in range(3):
            y = model(x)
    print(f"two convolutions {args.batch}x{args.channels}x{args.size}x{args.size}: checksum {float(y.sum()):.6f}")


if __name__ == "__main__":
    main()
