"""ResNet-50 (torchvision, random weights) for `kiln capture` (no downloads); --model runs any other
torchvision classifier by name the same way (mobilenet_v2, efficientnet_b0, convnext_tiny, ...).

Real size (the default) is the model of ../shared/GPU.md "Whole models": fp32, batch 32, 224x224. The other
measured configuration is `--dtype bf16 --channels-last --batch 128`. `--small` runs batch 2 at 64x64 so
that a CPU runs it in seconds (CI); the network is the same.

    python examples/resnet50.py                                    # fp32 batch 32, CUDA
    python examples/resnet50.py --dtype bf16 --channels-last --batch 128
    python examples/resnet50.py --small                            # CPU-sized
    python examples/resnet50.py --model mobilenet_v2 --dtype bf16  # another torchvision model
    kiln capture examples/resnet50.py --out runs/resnet50
"""

import argparse
import statistics
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="batch 2 at 64x64 (CI)")
    parser.add_argument("--model", default="resnet50", help="a torchvision.models classifier (default resnet50)")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--batch", type=int, default=None, help="default 32 (2 with --small)")
    parser.add_argument("--image", type=int, default=None, help="image side (default 224; 64 with --small)")
    parser.add_argument("--channels-last", action="store_true", help="NHWC memory format for model and input")
    parser.add_argument("--iters", type=int, default=3, help="forward passes (the first is a warm-up)")
    args = parser.parse_args()

    import torchvision

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    batch = args.batch or (2 if args.small else 32)
    side = args.image or (64 if args.small else 224)
    torch.backends.cuda.matmul.allow_tf32 = True  # as the anchors (../shared/anchors/models.py) ran
    torch.manual_seed(0)
    if not callable(getattr(torchvision.models, args.model, None)):
        parser.error(f"--model {args.model}: not a torchvision.models builder")
    model = getattr(torchvision.models, args.model)().to(dtype)  # weights=None: random initialisation
    x = torch.randn(batch, 3, side, side, dtype=dtype)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
    model = model.to(device).eval()
    x = x.to(device)

    times_ms = []
    with torch.inference_mode():
        for _ in range(max(args.iters, 1)):
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            model(x)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            times_ms.append((time.perf_counter() - t0) * 1e3)
    timed = times_ms[1:] or times_ms
    layout = " channels_last" if args.channels_last else ""
    print(f"{args.model} {args.dtype}{layout} batch {batch} {side}x{side} on {device}: "
          f"forward {statistics.median(timed):.2f} ms (median of {len(timed)}; first {times_ms[0]:.2f} ms)")


if __name__ == "__main__":
    main()
