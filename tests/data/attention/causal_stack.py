"""The model and the `main` that tests/data/attention's causal self-attention scripts share: two layers of the
script's attention module with residual adds, an additive causal mask (finfo.min above the diagonal) made once per
forward, bfloat16 under torch.no_grad, `--device` to run it on a GPU. A script calls main(Layer, doc, (B, T, C))
when run; kiln capture and kiln run put its directory first on sys.path, as `python SCRIPT` does."""
import argparse

import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.layers = nn.ModuleList([layer(), layer()])

    def forward(self, x):
        t = x.shape[1]
        mask = torch.full((t, t), torch.finfo(x.dtype).min, dtype=x.dtype, device=x.device).triu(1)[None, None]
        for layer in self.layers:
            x = x + layer(x, mask)
        return x


def main(layer, doc: str, shape: tuple) -> None:
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    device = parser.parse_args().device
    torch.manual_seed(0)
    model = Net(layer).to(device, torch.bfloat16).eval()
    x = torch.randn(*shape, dtype=torch.bfloat16, device=device)
    with torch.no_grad():
        y = model(x)
    print(tuple(y.shape), float(y.float().sum()))
