"""Prefill of a Llama-3.2-1B-shaped model (transformers' LlamaForCausalLM from a config, random weights, bf16 on
cuda, [1, 2048] tokens) timed the way a user would time it. Written in the style of third-party code, not for kiln:
bench/tune_device.sh runs `kiln tune` on it as an unseen script (llama_1b_bf16; --small for a machine without a GPU).
"""
import argparse
import time

import torch
from transformers import AutoModelForCausalLM, LlamaConfig

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--seq", type=int, default=2048)
p.add_argument("--batch", type=int, default=1)
p.add_argument("--layers", type=int, default=16)
p.add_argument("--small", action="store_true")
p.add_argument("--iters", type=int, default=5)
args = p.parse_args()

cfg = LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=args.layers,
                  num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                  rope_theta=500000.0, tie_word_embeddings=True)
if args.small:
    cfg = LlamaConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    args.seq = min(args.seq, 64)
dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(cfg, dtype=dtype).to(args.device).eval()
ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), device=args.device)
with torch.inference_mode():
    for i in range(args.iters):
        t = time.perf_counter()
        logits = model(ids).logits
        if args.device == "cuda":
            torch.cuda.synchronize()
        print(f"iter {i}: {1000 * (time.perf_counter() - t):.2f} ms, logits {tuple(logits.shape)}")
