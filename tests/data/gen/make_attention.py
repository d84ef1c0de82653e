"""Writes the attention family's test problems under tests/data/families/attention/: eager attention chains
in the form chain capture writes them (the aten calls of a Hugging Face attention module: repeat_kv's
unsqueeze / expand / clone / _unsafe_view, transpose, matmul, scale, mask add, softmax in float32, the cast,
matmul with v) and a captured SDPA call, each with a reference that makes the same calls.

    python tests/data/gen/make_attention.py      (from the repository root)
"""

import json
import os
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "families", "attention")
NS = uuid.UUID("6b696c6e-6174-746e-0000-000000000001")


def ref(x):
    return {"ref": x}


def repeat_kv(name, b, hkv, rep, s, d, out):
    """repeat_kv(x, rep): x[:, :, None].expand(b, hkv, rep, s, d).reshape(b, hkv * rep, s, d)."""
    return [
        {"aten": "aten::unsqueeze.default", "args": [ref(name), 2], "out": f"{out}_u"},
        {"aten": "aten::expand.default", "args": [ref(f"{out}_u"), [b, hkv, rep, s, d]], "out": f"{out}_e"},
        {"aten": "aten::clone.default", "args": [ref(f"{out}_e")],
         "kwargs": {"memory_format": "torch.contiguous_format"}, "out": f"{out}_c"},
        {"aten": "aten::_unsafe_view.default", "args": [ref(f"{out}_c"), [b, hkv * rep, s, d]], "out": out},
    ]


def dims(shape):
    """Sizes as the schema writes them: an axis name, or a literal size as a string."""
    return [str(x) for x in shape]


def write(name, description, axes, inputs, outputs, reference, kiln, workloads, entry="make_inputs"):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    definition = {
        "name": f"attention_family_{name}", "op_type": "attention", "description": description,
        "axes": axes, "custom_inputs_entrypoint": entry,
        "inputs": {n: {"shape": dims(s), "dtype": t} for n, (s, t) in inputs.items()},
        "outputs": {n: {"shape": dims(s), "dtype": t} for n, (s, t) in outputs.items()},
        "reference": reference, "kiln": kiln,
    }
    with open(os.path.join(d, "definition.json"), "w") as f:
        json.dump(definition, f, indent=1)
        f.write("\n")
    with open(os.path.join(d, "workload.jsonl"), "w") as f:
        for i, a in enumerate(workloads):
            w = {"uuid": str(uuid.uuid5(NS, f"{name}/{i}")), "axes": a,
                 "inputs": {n: {"type": "custom"} for n in inputs}}
            f.write(json.dumps(w) + "\n")


HEADER = "import torch\n\n\n"


def gqa_bf16_causal():
    """Gemma-style: 4 q heads over 2 kv heads, bf16 scores scaled and masked in bf16 (finfo.min above the
    diagonal), softmax in float32, cast back before the second matmul."""
    b, hq, hkv, d = 1, 4, 2, 64
    rep = hq // hkv
    ops = repeat_kv("k", b, hkv, rep, "s", d, "kr") + repeat_kv("v", b, hkv, rep, "s", d, "vr")
    for op in ops:  # sizes are the workload's: the chain's lists hold the first workload's
        op["args"] = [[x if x != "s" else 64 for x in a] if isinstance(a, list) else a for a in op["args"]]
    ops += [
        {"aten": "aten::transpose.int", "args": [ref("kr"), 2, 3], "out": "kt"},
        {"aten": "aten::matmul.default", "args": [ref("q"), ref("kt")], "out": "s0", "dtypes": ["bfloat16"]},
        {"aten": "aten::mul.Tensor", "args": [ref("s0"), 0.125], "out": "s1", "dtypes": ["bfloat16"]},
        {"aten": "aten::add.Tensor", "args": [ref("s1"), ref("mask")], "out": "s2", "dtypes": ["bfloat16"]},
        {"aten": "aten::softmax.int", "args": [ref("s2"), -1, "torch.float32"], "out": "p0", "dtypes": ["float32"]},
        {"aten": "aten::to.dtype", "args": [ref("p0"), "torch.bfloat16"], "out": "p1", "dtypes": ["bfloat16"]},
        {"aten": "aten::matmul.default", "args": [ref("p1"), ref("vr")], "out": "o", "dtypes": ["bfloat16"]},
    ]
    reference = HEADER + f"""def repeat_kv(x, rep):
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, rep, s, d).reshape(b, h * rep, s, d)


@torch.no_grad()
def run(q, k, v, mask):
    w = torch.matmul(q, repeat_kv(k, {rep}).transpose(2, 3)) * 0.125
    w = w + mask
    w = torch.nn.functional.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(w, repeat_kv(v, {rep}))


def make_inputs(axes, device):
    s = axes['s']
    bf = torch.bfloat16
    q = torch.randn({b}, {hq}, s, {d}, device=device).to(bf)
    k = torch.randn({b}, {hkv}, s, {d}, device=device).to(bf)
    v = torch.randn({b}, {hkv}, s, {d}, device=device).to(bf)
    mask = torch.full((1, 1, s, s), torch.finfo(bf).min, device=device).triu(1).to(bf)
    return {{'q': q, 'k': k, 'v': v, 'mask': mask}}
"""
    axes = {"s": {"type": "var"}}
    write("gqa_bf16_causal", gqa_bf16_causal.__doc__.strip(), axes,
          {"q": ([b, hq, "s", d], "bfloat16"), "k": ([b, hkv, "s", d], "bfloat16"),
           "v": ([b, hkv, "s", d], "bfloat16"), "mask": ([1, 1, "s", "s"], "bfloat16")},
          {"o": ([b, hq, "s", d], "bfloat16")}, reference,
          {"kind": "chain", "ops": ops, "outputs": ["o"],
           "mask_structure": {"kind": "band", "name": "causal", "lower": None, "upper": 0, "fill": "mask_value"}},
          [{"s": 64}, {"s": 100}, {"s": 150}])


def f32_unmasked():
    """float32 without a mask: the scores divided by sqrt(d), _softmax, 40 queries over 72 keys (tiles
    with a tail)."""
    reference = HEADER + """@torch.no_grad()
def run(q, k, v):
    w = torch.matmul(q, k.transpose(-1, -2)) / 5.656854249492381
    return torch.matmul(torch.softmax(w, dim=-1), v)


def make_inputs(axes, device):
    b, h, sq, skv = axes['b'], 2, axes['sq'], axes['skv']
    return {'q': torch.randn(b, h, sq, 32, device=device), 'k': torch.randn(b, h, skv, 32, device=device),
            'v': torch.randn(b, h, skv, 32, device=device)}
"""
    ops = [
        {"aten": "aten::transpose.int", "args": [ref("k"), -1, -2], "out": "kt"},
        {"aten": "aten::matmul.default", "args": [ref("q"), ref("kt")], "out": "s0"},
        {"aten": "aten::div.Tensor", "args": [ref("s0"), 5.656854249492381], "out": "s1"},
        {"aten": "aten::_softmax.default", "args": [ref("s1"), -1, False], "out": "p"},
        {"aten": "aten::matmul.default", "args": [ref("p"), ref("v")], "out": "o"},
    ]
    write("f32_unmasked", f32_unmasked.__doc__.strip(),
          {"b": {"type": "var"}, "sq": {"type": "var"}, "skv": {"type": "var"}},
          {"q": (["b", 2, "sq", 32], "float32"), "k": (["b", 2, "skv", 32], "float32"),
           "v": (["b", 2, "skv", 32], "float32")},
          {"o": (["b", 2, "sq", 32], "float32")}, reference,
          {"kind": "chain", "ops": ops, "outputs": ["o"]},
          [{"b": 2, "sq": 40, "skv": 72}, {"b": 1, "sq": 1, "skv": 130}])


def sliding_bf16():
    """A sliding window of 48 keys (kept iff i - 48 < j <= i) as a float32 -inf mask on bf16 scores (the add
    gives float32, no rounding after it), 2 q heads over 1 kv head, sequences of 160 and 200."""
    ops = repeat_kv("k", 1, 1, 2, 160, 64, "kr") + repeat_kv("v", 1, 1, 2, 160, 64, "vr")
    ops += [
        {"aten": "aten::transpose.int", "args": [ref("kr"), 2, 3], "out": "kt"},
        {"aten": "aten::matmul.default", "args": [ref("q"), ref("kt")], "out": "s0", "dtypes": ["bfloat16"]},
        {"aten": "aten::mul.Tensor", "args": [ref("s0"), 0.125], "out": "s1", "dtypes": ["bfloat16"]},
        {"aten": "aten::add.Tensor", "args": [ref("s1"), ref("mask")], "out": "s2", "dtypes": ["float32"]},
        {"aten": "aten::_softmax.default", "args": [ref("s2"), -1, False], "out": "p0", "dtypes": ["float32"]},
        {"aten": "aten::_to_copy.default", "args": [ref("p0")], "kwargs": {"dtype": "torch.bfloat16"},
         "out": "p1", "dtypes": ["bfloat16"]},
        {"aten": "aten::matmul.default", "args": [ref("p1"), ref("vr")], "out": "o", "dtypes": ["bfloat16"]},
    ]
    reference = HEADER + """def repeat_kv(x, rep):
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, rep, s, d).reshape(b, h * rep, s, d)


@torch.no_grad()
def run(q, k, v, mask):
    w = torch.matmul(q, repeat_kv(k, 2).transpose(2, 3)) * 0.125
    w = torch.softmax(w + mask, dim=-1).to(torch.bfloat16)
    return torch.matmul(w, repeat_kv(v, 2))


def make_inputs(axes, device):
    s = axes['s']
    bf = torch.bfloat16
    i = torch.arange(s, device=device)
    rel = i[None, :] - i[:, None]
    mask = torch.zeros(1, 1, s, s, device=device)
    mask[0, 0][(rel > 0) | (rel <= -48)] = float('-inf')
    return {'q': torch.randn(1, 2, s, 64, device=device).to(bf), 'k': torch.randn(1, 1, s, 64, device=device).to(bf),
            'v': torch.randn(1, 1, s, 64, device=device).to(bf), 'mask': mask}
"""
    write("sliding_bf16", sliding_bf16.__doc__.strip(), {"s": {"type": "var"}},
          {"q": ([1, 2, "s", 64], "bfloat16"), "k": ([1, 1, "s", 64], "bfloat16"),
           "v": ([1, 1, "s", 64], "bfloat16"), "mask": ([1, 1, "s", "s"], "float32")},
          {"o": ([1, 2, "s", 64], "bfloat16")}, reference,
          {"kind": "chain", "ops": ops, "outputs": ["o"],
           "mask_structure": {"kind": "band", "name": "sliding_window", "lower": -47, "upper": 0, "fill": "-inf"}},
          [{"s": 160}, {"s": 200}])


def sdpa_bf16_causal():
    """The aten call F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True) makes on the
    cpu: _scaled_dot_product_flash_attention_for_cpu, 4 q heads over 2 kv heads, its logsumexp dropped."""
    label = "aten::_scaled_dot_product_flash_attention_for_cpu.default"
    reference = HEADER + """@torch.no_grad()
def run(q, k, v):
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v, 0.0, True)[0]


def make_inputs(axes, device):
    s, bf = axes['s'], torch.bfloat16
    return {'q': torch.randn(2, 4, s, 64, device=device).to(bf), 'k': torch.randn(2, 2, s, 64, device=device).to(bf),
            'v': torch.randn(2, 2, s, 64, device=device).to(bf)}
"""
    write("sdpa_bf16_causal", sdpa_bf16_causal.__doc__.strip(), {"s": {"type": "var"}},
          {"q": ([2, 4, "s", 64], "bfloat16"), "k": ([2, 2, "s", 64], "bfloat16"),
           "v": ([2, 2, "s", 64], "bfloat16")},
          {"output": ([2, 4, "s", 64], "bfloat16")}, reference,
          {"kind": "aten", "aten": label,
           "args": {"args": [{"tensor": 0}, {"tensor": 1}, {"tensor": 2}, 0.0, True], "kwargs": {}},
           "dropped_outputs": {"indices": [1]}},
          [{"s": 96}, {"s": 33}])


def gemma_small_captured():
    """The attention block of examples/gemma4.py --small exactly as capture sees it on the cpu (2 q heads, 1 kv
    head, 64 tokens, head dim 64, scale 1): q stored in memory order [b, s, h, d]; kᵀ the matmul reads is
    repeat_kv's broadcast view (strides [0, 0, 1, 64]), stored once in memory order with its size-1 dims last;
    v broadcast over the heads; a bf16 causal finfo.min mask written whole (no structure: an arbitrary additive
    tensor); matmul, mul 1.0, add, softmax.int to float32, to bfloat16, matmul."""
    ops = [
        {"aten": "aten::matmul.default", "args": [ref("q"), ref("k")], "out": "s0", "dtypes": ["bfloat16"]},
        {"aten": "aten::mul.Tensor", "args": [ref("s0"), 1.0], "out": "s1", "dtypes": ["bfloat16"]},
        {"aten": "aten::add.Tensor", "args": [ref("s1"), ref("mask")], "out": "s2", "dtypes": ["bfloat16"]},
        {"aten": "aten::softmax.int", "args": [ref("s2"), -1, "torch.float32"], "out": "p0", "dtypes": ["float32"]},
        {"aten": "aten::to.dtype", "args": [ref("p0"), "torch.bfloat16"], "out": "p1", "dtypes": ["bfloat16"]},
        {"aten": "aten::matmul.default", "args": [ref("p1"), ref("v")], "out": "o", "dtypes": ["bfloat16"]},
    ]
    layouts = {
        "q": {"stored": "memory_order", "stored_shape": [1, 64, 2, 64], "permute": [0, 2, 1, 3]},
        "k": {"stored": "memory_order", "stored_shape": [64, 64, 1, 1], "permute": [3, 2, 0, 1],
              "expand": [1, 2, 64, 64]},
        "v": {"stored": "memory_order", "stored_shape": [1, 1, 64, 64], "expand": [1, 2, 64, 64]},
        "mask": {"stored": "contiguous", "stored_shape": [1, 1, 64, 64]},
        "o": {"stored": "contiguous", "stored_shape": [1, 2, 64, 64]},
    }
    reference = HEADER + """@torch.no_grad()
def run(q, k, v, mask):
    q = q.permute(0, 2, 1, 3)  # captured strides [8192, 64, 128, 1] (stored in memory order)
    k = k.permute(2, 3, 1, 0).expand(1, 2, 64, 64)  # captured strides [0, 0, 1, 64]
    v = v.expand(1, 2, 64, 64)  # captured strides [0, 0, 64, 1] (broadcast dims stored once)
    v0 = torch.ops.aten.matmul.default(q, k)
    v1 = torch.ops.aten.mul.Tensor(v0, 1.0)
    v2 = torch.ops.aten.add.Tensor(v1, mask)
    v3 = torch.ops.aten.softmax.int(v2, -1, torch.float32)
    v4 = torch.ops.aten.to.dtype(v3, torch.bfloat16)
    return torch.ops.aten.matmul.default(v4, v)


def make_inputs(axes, device):
    bf = torch.bfloat16
    q = (torch.randn(1, 64, 2, 64, device=device) / 64 ** 0.25).to(bf)
    k = (torch.randn(64, 64, 1, 1, device=device) / 64 ** 0.25).to(bf)
    v = torch.randn(1, 1, 64, 64, device=device).to(bf)
    mask = torch.full((1, 1, 64, 64), torch.finfo(bf).min, device=device).triu(1).to(bf)
    return {'q': q, 'k': k, 'v': v, 'mask': mask}
"""
    write("gemma_small_captured", gemma_small_captured.__doc__.strip(), {},
          {"q": ([1, 64, 2, 64], "bfloat16"), "k": ([64, 64, 1, 1], "bfloat16"),
           "v": ([1, 1, 64, 64], "bfloat16"), "mask": ([1, 1, 64, 64], "bfloat16")},
          {"o": ([1, 2, 64, 64], "bfloat16")}, reference,
          {"kind": "chain", "ops": ops, "outputs": ["o"], "layouts": layouts}, [{}])


if __name__ == "__main__":
    gemma_small_captured()
    gqa_bf16_causal()
    f32_unmasked()
    sliding_bf16()
    sdpa_bf16_causal()
