"""A Gemma-4-E2B-like decoder stack with random weights, for `kiln capture` (no downloads).

Real size (the default) is the model of ../shared/GPU.md "Whole models": transformers' Gemma4TextConfig()
defaults cut to 6 layers (the first 6 layer types: 5 sliding-window, 1 full), per-layer head-dim overrides
dropped and no KV-shared layers, eager attention, bfloat16, one prompt of 4096 tokens. `--small` keeps the
structure (same layer types, per-layer inputs, GQA, RMSNorms, gated GELU MLP) at toy sizes so that a CPU
runs it in seconds (CI).

    python examples/gemma4.py                 # real size, CUDA
    python examples/gemma4.py --small         # CPU-sized
    kiln capture examples/gemma4.py --out runs/gemma4
"""

import argparse
import statistics
import time

import torch


def build_config(small: bool, layers: int):
    from transformers import Gemma4TextConfig

    d = Gemma4TextConfig().to_dict()
    d["num_hidden_layers"] = layers
    if isinstance(d.get("layer_types"), list):
        d["layer_types"] = d["layer_types"][:layers]
    d.pop("per_layer_config", None)  # as the anchors did: every layer uses head_dim 256
    if d.get("num_kv_shared_layers"):
        d["num_kv_shared_layers"] = 0
    if small:
        d.update(hidden_size=128, intermediate_size=256, num_attention_heads=2, num_key_value_heads=1,
                 head_dim=64, vocab_size=1024, vocab_size_per_layer_input=1024,
                 hidden_size_per_layer_input=16, sliding_window=32)
    return Gemma4TextConfig(**d)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="toy sizes for a CPU (CI)")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--seq", type=int, default=None, help="prompt length (default 4096; 64 with --small)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--iters", type=int, default=3, help="forward passes (the first is a warm-up)")
    args = parser.parse_args()

    from transformers import AutoModelForCausalLM

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    seq = args.seq or (64 if args.small else 4096)
    torch.backends.cuda.matmul.allow_tf32 = True  # as the anchors (../shared/anchors/models.py) ran
    torch.manual_seed(0)
    config = build_config(args.small, args.layers)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").to(dtype)
    model = model.to(device).eval()
    ids = torch.randint(0, config.vocab_size, (args.batch, seq), device=device)

    times_ms = []
    with torch.inference_mode():
        for _ in range(max(args.iters, 1)):
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            model(ids)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            times_ms.append((time.perf_counter() - t0) * 1e3)
    timed = times_ms[1:] or times_ms
    print(f"gemma4-like {args.layers} layers {args.dtype} seq {seq} batch {args.batch} on {device}: "
          f"forward {statistics.median(timed):.2f} ms (median of {len(timed)}; first {times_ms[0]:.2f} ms)")


if __name__ == "__main__":
    main()
