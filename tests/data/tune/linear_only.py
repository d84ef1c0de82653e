"""A model kiln has nothing to optimise in (tests/py/test_tune.py): two linear layers, whose aten ops no kernel
family matches. `kiln tune` must still time it eager and with torch.compile and say why each op was left."""

import argparse

import torch


class TwoLinear(torch.nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.a = torch.nn.Linear(hidden, hidden)
        self.b = torch.nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=128)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = TwoLinear(args.hidden).eval()
    x = torch.randn(args.rows, args.hidden)
    with torch.inference_mode():
        for _ in range(3):
            y = model(x)
    print(f"two linear layers {args.rows}x{args.hidden}: checksum {float(y.sum()):.6f}")


if __name__ == "__main__":
    main()
