"""Writes the attention rows of issue 16 as problems under bench/attention/ (or the directory given): the
Gemma-4 eager attention chain ([1, 8 q / 4 kv heads, 4096, 256], bf16, scale 1, a bf16 finfo.min mask) with
a sliding window of 512 and with a full causal mask, the full-attention layers' chain at their head dim of 512
(causal), the sliding window as one SDPA call with a boolean mask (what the SDPA baselines run), and SDPA calls: [4, 32 q / 8 kv, 4096, 128] causal,
[16, 16, 1024, 64] unmasked, decode of 64 sequences over 4096 cached tokens (32 q / 8 kv heads, head dim
128), and a causal prefill of 8 sequences of 2048 tokens over a paged KV cache (page size 16, FlashInfer's form). Each row says how the baselines of bench/attention_torch.py run it (`"kiln": {"bench"}`: the mask as SDPA takes
it). Inputs are drawn on the device by the problem's make_inputs; tests/c/test_family_attention.c compiles
every row's start point and a spread of points with NVRTC.

    python bench/attention_rows.py [DIR]      (from the repository root)
"""

import json
import os
import sys
import uuid

NS = uuid.UUID("6b696c6e-6174-746e-0000-000000000002")


def ref(x):
    return {"ref": x}


def dims(shape):
    return [str(x) for x in shape]


def write(root, name, description, inputs, outputs, reference, kiln, bench, op_type="attention"):
    """The row's definition and its one workload, every input made by make_inputs (a shape of None: a
    scalar)."""
    d = os.path.join(root, name)
    os.makedirs(d, exist_ok=True)
    definition = {
        "name": name, "op_type": op_type, "description": description, "axes": {},
        "custom_inputs_entrypoint": "make_inputs",
        "inputs": {n: {"shape": None if s is None else dims(s), "dtype": t} for n, (s, t) in inputs.items()},
        "outputs": {n: {"shape": dims(s), "dtype": t} for n, (s, t) in outputs.items()},
        "reference": reference, "kiln": {**kiln, "bench": bench},
    }
    with open(os.path.join(d, "definition.json"), "w") as f:
        json.dump(definition, f, indent=1)
        f.write("\n")
    w = {"uuid": str(uuid.uuid5(NS, name)), "axes": {}, "inputs": {n: {"type": "custom"} for n in inputs}}
    with open(os.path.join(d, "workload.jsonl"), "w") as f:
        f.write(json.dumps(w) + "\n")


def gemma_qkv(b, hq, hkv, s, d):
    """make_inputs' lines for Gemma-4's q, k and v (bf16) and the relative positions rel = j - i."""
    return f"""    bf = torch.bfloat16
    # q and k after Gemma's q/k norms: unit-scale rows, so scores of order sqrt(d)
    q = (torch.randn({b}, {hq}, {s}, {d}, device=device) / {d} ** 0.25).to(bf)
    k = (torch.randn({b}, {hkv}, {s}, {d}, device=device) / {d} ** 0.25).to(bf)
    v = torch.randn({b}, {hkv}, {s}, {d}, device=device).to(bf)
    i = torch.arange({s}, device=device)
    rel = i[None, :] - i[:, None]
"""


def gemma_chain(root, name, window, d=256):
    b, hq, hkv, s = 1, 8, 4, 4096
    rep = hq // hkv
    ops = []
    for x in ("k", "v"):
        ops += [
            {"aten": "aten::unsqueeze.default", "args": [ref(x), 2], "out": f"{x}u"},
            {"aten": "aten::expand.default", "args": [ref(f"{x}u"), [b, hkv, rep, s, d]], "out": f"{x}e"},
            {"aten": "aten::clone.default", "args": [ref(f"{x}e")],
             "kwargs": {"memory_format": "torch.contiguous_format"}, "out": f"{x}c"},
            {"aten": "aten::_unsafe_view.default", "args": [ref(f"{x}c"), [b, hq, s, d]], "out": f"{x}r"},
        ]
    ops += [
        {"aten": "aten::transpose.int", "args": [ref("kr"), 2, 3], "out": "kt"},
        {"aten": "aten::matmul.default", "args": [ref("q"), ref("kt")], "out": "s0", "dtypes": ["bfloat16"]},
        {"aten": "aten::mul.Tensor", "args": [ref("s0"), 1.0], "out": "s1", "dtypes": ["bfloat16"]},
        {"aten": "aten::add.Tensor", "args": [ref("s1"), ref("mask")], "out": "s2", "dtypes": ["bfloat16"]},
        {"aten": "aten::softmax.int", "args": [ref("s2"), -1, "torch.float32"], "out": "p0", "dtypes": ["float32"]},
        {"aten": "aten::to.dtype", "args": [ref("p0"), "torch.bfloat16"], "out": "p1", "dtypes": ["bfloat16"]},
        {"aten": "aten::matmul.default", "args": [ref("p1"), ref("vr")], "out": "o", "dtypes": ["bfloat16"]},
    ]
    lower = None if window is None else -(window - 1)
    keep = "rel <= 0" if window is None else f"(rel <= 0) & (rel > -{window})"
    reference = f"""import torch


def repeat_kv(x, rep):
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, rep, s, d).reshape(b, h * rep, s, d)


@torch.no_grad()
def run(q, k, v, mask):
    w = torch.matmul(q, repeat_kv(k, {rep}).transpose(2, 3)) * 1.0
    w = w + mask
    w = torch.nn.functional.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(w, repeat_kv(v, {rep}))


def make_inputs(axes, device):
{gemma_qkv(b, hq, hkv, s, d)}    mask = torch.full(({s}, {s}), torch.finfo(bf).min, device=device)
    mask[{keep}] = 0
    return {{'q': q, 'k': k, 'v': v, 'mask': mask.to(bf)[None, None]}}
"""
    write(root, name, f"Gemma-4 eager attention, {'sliding window ' + str(window) if window else 'full causal'}",
          {"q": ([b, hq, s, d], "bfloat16"), "k": ([b, hkv, s, d], "bfloat16"),
           "v": ([b, hkv, s, d], "bfloat16"), "mask": ([1, 1, s, s], "bfloat16")},
          {"o": ([b, hq, s, d], "bfloat16")}, reference,
          {"kind": "chain", "ops": ops, "outputs": ["o"],
           "mask_structure": {"kind": "band", "name": "sliding_window" if window else "causal",
                              "lower": lower, "upper": 0, "fill": "mask_value", "inside": 0}},
          {"mask": "window" if window else "causal", "window": window, "causal_half": True})


def sdpa(root, name, b, hq, hkv, sq, skv, d, causal, description):
    reference = f"""import torch


@torch.no_grad()
def run(q, k, v):
    return torch.ops.aten.scaled_dot_product_attention.default(q, k, v, None, 0.0, {causal}, enable_gqa={hq != hkv})


def make_inputs(axes, device):
    bf = torch.bfloat16
    return {{'q': torch.randn({b}, {hq}, {sq}, {d}, device=device).to(bf),
            'k': torch.randn({b}, {hkv}, {skv}, {d}, device=device).to(bf),
            'v': torch.randn({b}, {hkv}, {skv}, {d}, device=device).to(bf)}}
"""
    write(root, name, description,
          {"q": ([b, hq, sq, d], "bfloat16"), "k": ([b, hkv, skv, d], "bfloat16"),
           "v": ([b, hkv, skv, d], "bfloat16")},
          {"o": ([b, hq, sq, d], "bfloat16")}, reference,
          {"kind": "aten", "aten": "aten::scaled_dot_product_attention.default",
           "args": {"args": [{"tensor": 0}, {"tensor": 1}, {"tensor": 2}, None, 0.0, causal],
                    "kwargs": {"enable_gqa": hq != hkv}}},
          {"mask": "causal" if causal else "none", "causal_half": causal})


def sdpa_padding(root, name, b, h, s, d):
    """A BERT-style encoder's SDPA call (transformers 5, fp16): every sequence padded to s tokens, a boolean
    keep-mask [b, 1, s, s] that masks each sequence's padding keys (lengths drawn between s / 2 and s), the
    default scale. The mask is a tensor with no band: the kernel reads it."""
    reference = f"""import torch


@torch.no_grad()
def run(q, k, v, mask):
    return torch.ops.aten.scaled_dot_product_attention.default(q, k, v, mask)


def make_inputs(axes, device):
    f16 = torch.float16
    lengths = torch.randint({s // 2}, {s + 1}, ({b},), device=device)
    keep = torch.arange({s}, device=device)[None, :] < lengths[:, None]
    return {{'q': torch.randn({b}, {h}, {s}, {d}, device=device).to(f16),
            'k': torch.randn({b}, {h}, {s}, {d}, device=device).to(f16),
            'v': torch.randn({b}, {h}, {s}, {d}, device=device).to(f16),
            'mask': keep[:, None, None, :].expand({b}, 1, {s}, {s}).contiguous()}}
"""
    write(root, name, f"BERT-style padding mask: {b} sequences of up to {s} tokens, {h} heads (SDPA, fp16)",
          {"q": ([b, h, s, d], "float16"), "k": ([b, h, s, d], "float16"), "v": ([b, h, s, d], "float16"),
           "mask": ([b, 1, s, s], "bool")},
          {"o": ([b, h, s, d], "float16")}, reference,
          {"kind": "aten", "aten": "aten::scaled_dot_product_attention.default",
           "args": {"args": [{"tensor": 0}, {"tensor": 1}, {"tensor": 2}, {"tensor": 3}]}},
          {"mask": "tensor"})


def sdpa_window(root, name, window):
    """Gemma-4's sliding-window layer as one SDPA call with the boolean keep-mask the SDPA baselines take (True
    takes part), scale 1 as Gemma-4's (its q and k normed): the same attention as the eager chain's row, without
    its intermediate roundings."""
    b, hq, hkv, s, d = 1, 8, 4, 4096, 256
    reference = f"""import torch


@torch.no_grad()
def run(q, k, v, mask):
    return torch.ops.aten.scaled_dot_product_attention.default(q, k, v, mask, 0.0, False, scale=1.0,
                                                               enable_gqa=True)


def make_inputs(axes, device):
{gemma_qkv(b, hq, hkv, s, d)}    return {{'q': q, 'k': k, 'v': v, 'mask': ((rel <= 0) & (rel > -{window}))[None, None]}}
"""
    write(root, name, f"Gemma-4's sliding window {window} as one SDPA call with a boolean mask",
          {"q": ([b, hq, s, d], "bfloat16"), "k": ([b, hkv, s, d], "bfloat16"),
           "v": ([b, hkv, s, d], "bfloat16"), "mask": ([1, 1, s, s], "bool")},
          {"o": ([b, hq, s, d], "bfloat16")}, reference,
          {"kind": "aten", "aten": "aten::scaled_dot_product_attention.default",
           "args": {"args": [{"tensor": 0}, {"tensor": 1}, {"tensor": 2}, {"tensor": 3}, 0.0, False],
                    "kwargs": {"scale": 1.0, "enable_gqa": True}},
           "mask_structure": {"kind": "band", "name": "sliding_window", "lower": -(window - 1), "upper": 0,
                              "inside": 0}},
          {"mask": "window", "window": window, "causal_half": True})


def paged_prefill(root, name, seqs, tokens, hq, hkv, d, page_size):
    """A causal prefill over a paged KV cache in FlashInfer's form (SOL-ExecBench's FlashInfer category, the
    family's `gqa_paged`): every sequence `tokens` long with its queries over its own keys, its pages drawn
    from the pool in a scrambled order. The reference is tests/data/gen/make_paged.py's statement of the
    semantics; torch's baselines run SDPA on the same keys gathered contiguous (bench/attention_check.py)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "gen"))
    from make_paged import PREFILL_TEMPLATE

    pages = seqs * tokens // page_size
    reference = PREFILL_TEMPLATE % (hq, hkv, d, page_size) + f"""

def make_inputs(axes, device):
    bf = torch.bfloat16
    per = {tokens} // {page_size}
    return {{'q': torch.randn({seqs * tokens}, {hq}, {d}, device=device).to(bf),
            'k_cache': torch.randn({pages}, {page_size}, {hkv}, {d}, device=device).to(bf),
            'v_cache': torch.randn({pages}, {page_size}, {hkv}, {d}, device=device).to(bf),
            'qo_indptr': (torch.arange({seqs + 1}, device=device) * {tokens}).to(torch.int32),
            'kv_indptr': (torch.arange({seqs + 1}, device=device) * per).to(torch.int32),
            'kv_indices': torch.randperm({pages}, device=device).to(torch.int32),
            'kv_last_page_len': torch.full(({seqs},), {page_size}, dtype=torch.int32, device=device),
            'sm_scale': 1.0 / {d} ** 0.5}}
"""
    write(root, name, f"paged prefill, causal: {seqs} sequences of {tokens} tokens, page size {page_size}",
          {"q": ([seqs * tokens, hq, d], "bfloat16"), "k_cache": ([pages, page_size, hkv, d], "bfloat16"),
           "v_cache": ([pages, page_size, hkv, d], "bfloat16"), "qo_indptr": ([seqs + 1], "int32"),
           "kv_indptr": ([seqs + 1], "int32"), "kv_indices": ([pages], "int32"),
           "kv_last_page_len": ([seqs], "int32"), "sm_scale": (None, "float32")},
          {"output": ([seqs * tokens, hq, d], "bfloat16"), "lse": ([seqs * tokens, hq], "float32")}, reference,
          {"is_causal": 1}, {"mask": "causal", "causal_half": True, "paged": {"seqs": seqs, "tokens": tokens}},
          op_type="gqa_paged")


def main(root):
    gemma_chain(root, "attn_gemma4_sliding512_1x8x4x4096x256", 512)
    gemma_chain(root, "attn_gemma4_causal_1x8x4x4096x256", None)
    gemma_chain(root, "attn_gemma4_full512_1x8x4x4096x512", None, d=512)  # the full-attention layers' head dim
    sdpa_window(root, "attn_sdpa_sliding512_bool_1x8x4x4096x256", 512)
    sdpa(root, "attn_causal_4x32x8x4096x128", 4, 32, 8, 4096, 4096, 128, True, "GQA prefill, causal (SDPA)")
    sdpa(root, "attn_dense_16x16x1024x64", 16, 16, 16, 1024, 1024, 64, False, "unmasked (SDPA)")
    sdpa_padding(root, "attn_bert_padding_32x12x512x64", 32, 12, 512, 64)
    sdpa(root, "attn_decode_64x32x8x4096x128", 64, 32, 8, 1, 4096, 128, False,
         "decode: one query per sequence over 4096 cached tokens (SDPA)")
    paged_prefill(root, "attn_paged_prefill_causal_8x2048_h32_kv8_d128_ps16", 8, 2048, 32, 8, 128, 16)
    # head dims that are not multiples of 16 or 64: the kernels pad them with zero columns
    sdpa(root, "attn_sd15_self_2x8x4096x40", 2, 8, 8, 4096, 4096, 40, False,
         "Stable Diffusion 1.5's first self-attention (64 x 64 latents, two for guidance): head dim 40 (SDPA)")
    sdpa(root, "attn_sd15_cross_2x8x4096x77x40", 2, 8, 8, 4096, 77, 40, False,
         "Stable Diffusion 1.5's first cross-attention, over 77 text tokens: head dim 40 (SDPA)")
    sdpa(root, "attn_phi2_causal_4x32x2048x80", 4, 32, 32, 2048, 2048, 80, True,
         "Phi-2's prefill: head dim 80, causal (SDPA)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "attention"))
