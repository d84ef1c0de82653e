"""Eager attention as third-party inference code writes it, for bench/eager_attention_device.sh: one model per
run, built from a config (no weights), run under torch.no_grad as such scripts do.

  python bench/eager_attention.py gpt2|llama|swin [--small] [--device cuda|cpu]

gpt2: Hugging Face's GPT-2 with attn_implementation="eager" (12 heads of 64, 1024 tokens, batch 8, bf16 on a
GPU); llama: Llama with eager attention and grouped-query heads (32 q / 8 kv heads of 128, 2048 tokens, batch
2); swin: torchvision's swin_t at 224 x 224, batch 64 (window attention, q, k and v sliced from one projection).
--small: sizes a CPU runs in seconds."""
import argparse

import torch

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("model", choices=["gpt2", "llama", "swin"])
ap.add_argument("--small", action="store_true")
ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
ap.add_argument("--iters", type=int, default=3)
a = ap.parse_args()
dtype = torch.bfloat16 if a.device == "cuda" else torch.float32
torch.manual_seed(0)
if a.model == "swin":
    import torchvision
    model = torchvision.models.swin_t()
    batch, side = (2, 64) if a.small else (64, 224)
    inputs = (torch.randn(batch, 3, side, side, device=a.device, dtype=dtype),)
else:
    import transformers as T
    if a.model == "gpt2":
        cfg = T.GPT2Config(n_layer=2, n_embd=128 if a.small else 768, n_head=2 if a.small else 12,
                           vocab_size=1000, n_positions=1024, bos_token_id=0, eos_token_id=0)
        model, (batch, seq) = T.GPT2LMHeadModel(cfg), ((2, 64) if a.small else (8, 1024))
    else:
        cfg = T.LlamaConfig(hidden_size=256 if a.small else 4096, intermediate_size=512 if a.small else 8192,
                            num_hidden_layers=2, num_attention_heads=4 if a.small else 32,
                            num_key_value_heads=2 if a.small else 8, vocab_size=1000)
        model, (batch, seq) = T.LlamaForCausalLM(cfg), ((2, 64) if a.small else (2, 2048))
    cfg._attn_implementation = "eager"
    inputs = (torch.randint(0, 1000, (batch, seq), device=a.device),)
model = model.to(a.device, dtype).eval()
with torch.no_grad():
    for _ in range(a.iters):
        model(*inputs)
if a.device == "cuda":
    torch.cuda.synchronize()
