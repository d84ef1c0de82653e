"""A BERT-base encoder (transformers' BertModel from a config, random weights) over a padded batch, fp16 on cuda,
timed the way a user would time it: 32 sequences of up to 512 tokens, the shorter ones padded and masked. Written
in the style of third-party code, not for kiln: bench/tune_device.sh runs `kiln tune` on it as an unseen script
(bert_base_fp16; --small for a machine without a GPU).
"""
import argparse
import time

import torch
from transformers import BertConfig, BertModel

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
p.add_argument("--batch", type=int, default=32)
p.add_argument("--seq", type=int, default=512)
p.add_argument("--small", action="store_true")
p.add_argument("--iters", type=int, default=5)
args = p.parse_args()

cfg = BertConfig()  # bert-base-uncased's shape: 12 layers, hidden 768, 12 heads, intermediate 3072
if args.small:
    cfg = BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=256, max_position_embeddings=128)
    args.batch, args.seq = min(args.batch, 4), min(args.seq, 64)
dtype = torch.float16 if args.device == "cuda" else torch.float32
torch.manual_seed(0)
model = BertModel(cfg).to(dtype).to(args.device).eval()

ids = torch.randint(1, cfg.vocab_size, (args.batch, args.seq), device=args.device)
lengths = torch.randint(args.seq // 2, args.seq + 1, (args.batch,), device=args.device)
mask = (torch.arange(args.seq, device=args.device)[None, :] < lengths[:, None]).long()
ids = ids.masked_fill(mask == 0, 0)
with torch.no_grad():
    for i in range(args.iters):
        t = time.perf_counter()
        out = model(input_ids=ids, attention_mask=mask)
        if args.device == "cuda":
            torch.cuda.synchronize()
        print(f"iter {i}: {1000 * (time.perf_counter() - t):.2f} ms, "
              f"pooled {tuple(out.pooler_output.shape)}, hidden norm {out.last_hidden_state.float().norm():.1f}")
