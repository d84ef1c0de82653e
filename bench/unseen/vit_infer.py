"""ViT-B/16 batch inference (torchvision, random weights, fp16 on cuda, batch 64 at 224x224), the way a user would
run it. Written in the style of third-party code, not for kiln: bench/tune_device.sh runs `kiln tune` on it as an
unseen script (vit_b16_fp16; --small for a machine without a GPU).
"""
import argparse
import time

import torch
import torchvision

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=64)
p.add_argument("--small", action="store_true")
args = p.parse_args()
dev = "cuda" if torch.cuda.is_available() else "cpu"
if args.small:
    model = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                                 hidden_dim=32, mlp_dim=64, num_classes=10)
    x = torch.randn(2, 3, 32, 32)
else:
    model = torchvision.models.vit_b_16()
    x = torch.randn(args.batch, 3, 224, 224)
model = model.to(dev).eval()
x = x.to(dev)
if dev == "cuda":
    model, x = model.half(), x.half()
with torch.no_grad():
    for i in range(4):
        t = time.perf_counter()
        y = model(x)
        if dev == "cuda":
            torch.cuda.synchronize()
        print(f"{i}: {(time.perf_counter() - t) * 1000:.1f} ms top1 {y.argmax(1)[:4].tolist()}")
