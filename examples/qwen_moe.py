"""A Qwen-3.5-35B-A3B-like mixture-of-experts decoder stack with random weights, for `kiln capture`.

Real size (the default) is the model of ../shared/GPU.md "Whole models": transformers' Qwen3_5MoeTextConfig()
defaults cut to 4 layers (the first 4 layer types: 3 gated-delta-net linear-attention layers, 1 full-attention
layer), every layer a sparse MoE block (router softmax, top-8 of 256 experts, shared expert), eager attention,
bfloat16, one prompt of 2048 tokens. `--small` keeps the structure at toy sizes (8 experts, top-2) so that a
CPU runs it in seconds (CI).

    python examples/qwen_moe.py               # real size, CUDA
    python examples/qwen_moe.py --small       # CPU-sized
    kiln capture examples/qwen_moe.py --out runs/qwen
"""

import argparse
import statistics
import time

import torch


def build_config(small: bool, layers: int):
    from transformers import Qwen3_5MoeTextConfig

    d = Qwen3_5MoeTextConfig().to_dict()
    d["num_hidden_layers"] = layers
    if isinstance(d.get("layer_types"), list):
        d["layer_types"] = d["layer_types"][:layers]
    d.pop("per_layer_config", None)
    if small:
        d.update(hidden_size=128, num_attention_heads=2, num_key_value_heads=1, head_dim=64,
                 linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=32,
                 linear_value_head_dim=32, moe_intermediate_size=64, shared_expert_intermediate_size=64,
                 num_experts=8, num_experts_per_tok=2, vocab_size=1024)
    return Qwen3_5MoeTextConfig(**d)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="toy sizes for a CPU (CI)")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--seq", type=int, default=None, help="prompt length (default 2048; 64 with --small)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--iters", type=int, default=3, help="forward passes (the first is a warm-up)")
    args = parser.parse_args()

    from transformers import AutoModelForCausalLM

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    seq = args.seq or (64 if args.small else 2048)
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
    print(f"qwen3.5-moe-like {args.layers} layers {args.dtype} seq {seq} batch {args.batch} on {device}: "
          f"forward {statistics.median(timed):.2f} ms (median of {len(timed)}; first {times_ms[0]:.2f} ms)")


if __name__ == "__main__":
    main()
