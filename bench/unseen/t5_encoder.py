"""The encoder of a T5 v1.1-base-shaped model (transformers' T5EncoderModel from a config, random weights), bf16 on
cuda, 16 sequences of 512 tokens: RMS layer norms computed in fp32, a learned relative position bias added to every
layer's attention scores, gated-GELU feed-forward. Written in the style of third-party code, not for kiln:
bench/tune_device.sh runs `kiln tune` on it as an unseen script (t5_encoder_bf16; --small without a GPU).
"""
import argparse
import time

import torch
from transformers import T5Config, T5EncoderModel

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--batch", type=int, default=16)
p.add_argument("--seq", type=int, default=512)
p.add_argument("--small", action="store_true")
p.add_argument("--iters", type=int, default=5)
args = p.parse_args()

# google/t5-v1_1-base's shape
cfg = T5Config(vocab_size=32128, d_model=768, d_kv=64, d_ff=2048, num_layers=12, num_heads=12,
               feed_forward_proj="gated-gelu", dropout_rate=0.0)
if args.small:
    cfg = T5Config(vocab_size=1000, d_model=128, d_kv=32, d_ff=256, num_layers=2, num_heads=4,
                   feed_forward_proj="gated-gelu", dropout_rate=0.0)
    args.batch, args.seq = min(args.batch, 2), min(args.seq, 64)
dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
torch.manual_seed(0)
model = T5EncoderModel(cfg).to(dtype).to(args.device).eval()
ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), device=args.device)
with torch.inference_mode():
    for i in range(args.iters):
        t = time.perf_counter()
        h = model(input_ids=ids).last_hidden_state
        if args.device == "cuda":
            torch.cuda.synchronize()
        print(f"iter {i}: {1000 * (time.perf_counter() - t):.2f} ms, hidden {tuple(h.shape)}")
