"""The eager-attention softmax of an LLM whose causal mask is computed in the forward from position ids (as
transformers' sdpa/eager mask functions do for Gemma-4's full-attention layer): key position <= query position,
where -> 0 or the dtype's lowest, added to the scaled scores, softmax in fp32, cast back to bf16. kiln captures it
as one chain (the int64 positions are its inputs); bench/causal_softmax_device.sh sweeps it against eager and
torch.compile at Gemma-4's size [1, 8, 4096, 4096].

    python bench/causal_softmax.py [--small] [--device cpu|cuda]
"""

import argparse

import torch


def step(scores: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    n = scores.shape[-1]
    allowed = k_pos.view(1, 1, 1, n) <= q_pos.view(1, 1, n, 1)
    zero = torch.zeros((), dtype=scores.dtype, device=scores.device)
    mask = torch.where(allowed, zero, torch.finfo(scores.dtype).min)
    return torch.softmax(scores * 1.0 + mask, -1, dtype=torch.float32).to(scores.dtype)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true", help="[1, 2, 64, 64] instead of [1, 8, 4096, 4096]")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    heads, n = (2, 64) if a.small else (8, 4096)
    torch.manual_seed(0)
    q_pos, k_pos = torch.arange(n, device=a.device), torch.arange(n, device=a.device)  # two tensors, as in Gemma-4
    with torch.inference_mode():
        for _ in range(3):
            step(torch.randn(1, heads, n, n, dtype=torch.bfloat16, device=a.device), q_pos + 0, k_pos + 0)


if __name__ == "__main__":
    main()
