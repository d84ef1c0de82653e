"""GPT-2 (transformers' GPT2LMHeadModel from a config, random weights) as a user runs it for text: a prompt's
prefill and then greedy decoding with the KV cache, bf16 on cuda. gpt2-medium's shape (24 layers, 1024 wide, 16
heads), 8 prompts of 512 tokens and 32 new tokens each. Written in the style of third-party code, not for kiln:
bench/tune_device.sh runs `kiln tune` on it as an unseen script (gpt2_medium_bf16; --small for a machine without a
GPU). GPT-2 differs from the Llama-shaped scripts: Conv1D layers (addmm with a transposed weight), learned
positions, LayerNorm with bias, GELU's tanh form, and a fused QKV projection split in three.
"""
import argparse
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--batch", type=int, default=8)
p.add_argument("--prompt", type=int, default=512)
p.add_argument("--new", type=int, default=32)
p.add_argument("--small", action="store_true")
p.add_argument("--iters", type=int, default=3)
args = p.parse_args()

cfg = GPT2Config(n_embd=1024, n_layer=24, n_head=16)  # gpt2-medium
if args.small:
    cfg = GPT2Config(vocab_size=1000, n_positions=256, n_embd=128, n_layer=2, n_head=4)
    args.batch, args.prompt, args.new = min(args.batch, 2), min(args.prompt, 32), min(args.new, 4)
dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
torch.manual_seed(0)
model = GPT2LMHeadModel(cfg).to(dtype).to(args.device).eval()
ids = torch.randint(0, cfg.vocab_size, (args.batch, args.prompt), device=args.device)

with torch.no_grad():
    for i in range(args.iters):
        t = time.perf_counter()
        out = model.generate(ids, max_new_tokens=args.new, min_new_tokens=args.new, do_sample=False,
                             pad_token_id=0, attention_mask=torch.ones_like(ids))
        if args.device == "cuda":
            torch.cuda.synchronize()
        print(f"iter {i}: {1000 * (time.perf_counter() - t):.1f} ms, {tuple(out.shape)}")
