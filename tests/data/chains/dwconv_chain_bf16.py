"""dwconv_chain.py's MobileNet-v2 block in bfloat16, as torchvision's MobileNet-v2 runs in bf16. Inside
torch.compile Inductor's joint-graph passes fold the BatchNorm's rounding to bfloat16 and the ReLU6's upcast
after it into one convert (pointless_convert), so the chain's pattern has to be traced through those passes
too (tests/py/test_chains.py)."""

import torch
from dwconv_chain import BATCH, CHANNELS, SIDE
from dwconv_chain import build as build_f32


def build():
    return build_f32().to(torch.bfloat16)


if __name__ == "__main__":
    model = build()
    with torch.inference_mode():
        for _ in range(2):
            model(torch.randn(BATCH, CHANNELS, SIDE, SIDE, dtype=torch.bfloat16))
