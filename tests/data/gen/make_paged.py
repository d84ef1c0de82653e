"""Writes SOL-ExecBench problems in the form of its FlashInfer category's paged attention definitions (the
FlashInfer-Bench `gqa_paged` op type) under tests/data/solbench/: a causal prefill and a decode over a paged
KV cache with page size 16, 4 q heads over 2 kv heads, head dim 64, so that the cpu backend proves them in
seconds.

The layout is FlashInfer's: q `[total_q, num_qo_heads, head_dim]` (decode: `[batch_size, ...]`, one query a
sequence), k_cache and v_cache `[num_pages, page_size, num_kv_heads, head_dim]`, sequence b's queries at
`qo_indptr[b]:qo_indptr[b+1]`, its pages `kv_indices[kv_indptr[b]:kv_indptr[b+1]]` in order, the last of them
holding `kv_last_page_len[b]` tokens; `sm_scale` a scalar input. Outputs: `output` (bf16) and `lse`, the
base-2 log-sum-exp of the scaled logits. Prefill is causal with the last query aligned to the last key
(query i of a sequence of q_len queries over kv_len keys sees keys j <= i + kv_len - q_len; the tables keep
q_len <= kv_len, as FlashInfer's cache holds the new tokens too, so every query sees a key). The index tensors are safetensors files beside the definition, as the
published workloads give them; q and the caches are `random`, sm_scale a `scalar`. Page tables are
deliberately out of order and leave holes in the pool.

    python tests/data/gen/make_paged.py      (from the repository root)
"""

import json
import os
import uuid

import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "solbench")
NS = uuid.UUID("6b696c6e-7061-6765-6400-000000000001")

HQ, HKV, D, PS = 4, 2, 64, 16
SCALE = 1.0 / D**0.5


def axis(kind, description, value=None):
    a = {"type": kind}
    if value is not None:
        a["value"] = value
    a["description"] = description
    return a


CONST_AXES = {
    "num_qo_heads": axis("const", "Query and output heads.", HQ),
    "num_kv_heads": axis("const", "Key and value heads.", HKV),
    "head_dim": axis("const", "Elements of one head.", D),
    "page_size": axis("const", "Tokens a page of the KV cache holds.", PS),
}

CACHE = {"shape": ["num_pages", "page_size", "num_kv_heads", "head_dim"], "dtype": "bfloat16"}

# Our own statement of the semantics (sequence-by-sequence gather, then dense attention in float32), for
# (num_qo_heads, num_kv_heads, head_dim, page_size); bench/attention_rows.py writes its paged row with it too.
PREFILL_TEMPLATE = '''import math
import torch


@torch.no_grad()
def run(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, sm_scale):
    total_q, num_qo_heads, head_dim = q.shape
    _, page_size, num_kv_heads, _ = k_cache.shape
    assert (num_qo_heads, num_kv_heads, head_dim, page_size) == (%d, %d, %d, %d)
    assert total_q == int(qo_indptr[-1])
    assert kv_indices.shape[0] == int(kv_indptr[-1])
    group = num_qo_heads // num_kv_heads
    output = torch.zeros_like(q)
    lse = torch.full((total_q, num_qo_heads), -math.inf, dtype=torch.float32, device=q.device)
    for b in range(qo_indptr.shape[0] - 1):
        q0, q1 = int(qo_indptr[b]), int(qo_indptr[b + 1])
        p0, p1 = int(kv_indptr[b]), int(kv_indptr[b + 1])
        if q1 <= q0 or p1 <= p0:
            continue
        pages = kv_indices[p0:p1].long()
        n_kv = (p1 - p0 - 1) * page_size + int(kv_last_page_len[b])
        # tokens of the sequence in order: whole pages, then the used part of the last one
        k = k_cache[pages].reshape(-1, num_kv_heads, head_dim)[:n_kv].float()
        v = v_cache[pages].reshape(-1, num_kv_heads, head_dim)[:n_kv].float()
        k = k.repeat_interleave(group, dim=1).transpose(0, 1)  # [heads, n_kv, head_dim]
        v = v.repeat_interleave(group, dim=1).transpose(0, 1)
        qs = q[q0:q1].float().transpose(0, 1)  # [heads, n_q, head_dim]
        n_q = q1 - q0
        logits = torch.matmul(qs, k.transpose(1, 2)) * sm_scale  # [heads, n_q, n_kv]
        # the last query sits at the last key: query i sees keys j <= i + n_kv - n_q
        i = torch.arange(n_q, device=q.device).unsqueeze(1)
        j = torch.arange(n_kv, device=q.device).unsqueeze(0)
        logits = logits.masked_fill(j > i + (n_kv - n_q), -math.inf)
        seen = (j <= i + (n_kv - n_q)).any(dim=1)  # [n_q]
        lse_b = torch.logsumexp(logits, dim=-1) / math.log(2.0)
        probs = torch.softmax(logits, dim=-1).nan_to_num(0.0)
        out_b = torch.matmul(probs, v).transpose(0, 1)  # [n_q, heads, head_dim]
        output[q0:q1] = torch.where(seen[:, None, None], out_b, 0.0).to(q.dtype)
        lse[q0:q1] = torch.where(seen[:, None], lse_b.transpose(0, 1), -math.inf)
    return output, lse
'''
PREFILL_REFERENCE = PREFILL_TEMPLATE % (HQ, HKV, D, PS)

DECODE_REFERENCE = '''import math
import torch


@torch.no_grad()
def run(q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, sm_scale):
    batch_size, num_qo_heads, head_dim = q.shape
    _, page_size, num_kv_heads, _ = k_cache.shape
    assert (num_qo_heads, num_kv_heads, head_dim, page_size) == (%d, %d, %d, %d)
    assert kv_indptr.shape[0] == batch_size + 1
    assert kv_indices.shape[0] == int(kv_indptr[-1])
    group = num_qo_heads // num_kv_heads
    output = torch.zeros_like(q)
    lse = torch.full((batch_size, num_qo_heads), -math.inf, dtype=torch.float32, device=q.device)
    for b in range(batch_size):
        p0, p1 = int(kv_indptr[b]), int(kv_indptr[b + 1])
        if p1 <= p0:
            continue
        pages = kv_indices[p0:p1].long()
        n_kv = (p1 - p0 - 1) * page_size + int(kv_last_page_len[b])
        if n_kv <= 0:
            continue
        k = k_cache[pages].reshape(-1, num_kv_heads, head_dim)[:n_kv].float()
        v = v_cache[pages].reshape(-1, num_kv_heads, head_dim)[:n_kv].float()
        k = k.repeat_interleave(group, dim=1).transpose(0, 1)  # [heads, n_kv, head_dim]
        v = v.repeat_interleave(group, dim=1).transpose(0, 1)
        logits = torch.matmul(k, q[b].float().unsqueeze(-1)).squeeze(-1) * sm_scale  # [heads, n_kv]
        lse[b] = torch.logsumexp(logits, dim=-1) / math.log(2.0)
        output[b] = torch.matmul(torch.softmax(logits, dim=-1).unsqueeze(1), v).squeeze(1).to(q.dtype)
    return output, lse
''' % (HQ, HKV, D, PS)


def page_table(kv_lens, pool, seed):
    """Pages of each sequence drawn without replacement from a pool of `pool` pages in a scrambled order
    (never 0, 1, 2, ...): kv_indptr, kv_indices, kv_last_page_len."""
    g = torch.Generator().manual_seed(seed)
    free = torch.randperm(pool, generator=g).tolist()
    indptr, indices, last = [0], [], []
    for n in kv_lens:
        pages = (n + PS - 1) // PS
        indices += [free.pop() for _ in range(pages)]
        indptr.append(len(indices))
        last.append(n - (pages - 1) * PS)
    return indptr, indices, last


def write(name, description, axes, constraints, inputs, reference, workloads, tags):
    d = os.path.join(OUT, name)
    os.makedirs(os.path.join(d, "blob"), exist_ok=True)
    definition = {
        "name": name, "description": description, "op_type": "gqa_paged", "tags": tags,
        "axes": axes, "constraints": constraints, "inputs": inputs,
        "outputs": {
            "output": {"shape": [inputs["q"]["shape"][0], "num_qo_heads", "head_dim"], "dtype": "bfloat16",
                       "description": "Attention output."},
            "lse": {"shape": [inputs["q"]["shape"][0], "num_qo_heads"], "dtype": "float32",
                    "description": "Base-2 log-sum-exp of the scaled logits."},
        },
        "reference": reference,
    }
    with open(os.path.join(d, "definition.json"), "w") as f:
        json.dump(definition, f, indent=2)
        f.write("\n")
    with open(os.path.join(d, "workload.jsonl"), "w") as f:
        for i, (ax, tensors) in enumerate(workloads):
            blob = f"./blob/{name}_{i}.safetensors"
            save_file({k: torch.tensor(v, dtype=torch.int32) for k, v in tensors.items()},
                      os.path.join(d, blob))
            os.chmod(os.path.join(d, blob), 0o644)
            ins = {}
            for n, spec in inputs.items():
                if n in tensors:
                    ins[n] = {"type": "safetensors", "path": blob, "tensor_key": n}
                elif spec["shape"] is None:
                    ins[n] = {"type": "scalar", "value": SCALE}
                else:
                    ins[n] = {"type": "random"}
            w = {"uuid": str(uuid.uuid5(NS, f"{name}/{i}")), "axes": ax, "inputs": ins}
            f.write(json.dumps({"definition": name, "solution": None, "workload": w, "evaluation": None}) + "\n")


def paged_inputs(q_shape: list, extra: dict = None) -> dict:
    """The form's inputs in its order: q of q_shape, the two caches, `extra` (prefill's qo_indptr), the page
    table and the scale."""
    inputs = {"q": {"shape": q_shape, "dtype": "bfloat16"}, "k_cache": dict(CACHE), "v_cache": dict(CACHE)}
    inputs.update(extra or {})
    inputs.update({
        "kv_indptr": {"shape": ["len_indptr"], "dtype": "int32", "description": "Pages of sequence b: "
                      "kv_indices[kv_indptr[b]:kv_indptr[b+1]]."},
        "kv_indices": {"shape": ["num_kv_indices"], "dtype": "int32", "description": "Page ids, in order."},
        "kv_last_page_len": {"shape": ["batch_size"], "dtype": "int32",
                             "description": "Tokens in the last page of each sequence."},
        "sm_scale": {"shape": None, "dtype": "float32", "description": "Scale of the logits."},
    })
    return inputs


def prefill():
    name = f"gqa_paged_prefill_causal_h{HQ}_kv{HKV}_d{D}_ps{PS}"
    axes = dict(CONST_AXES)
    axes.update({
        "len_indptr": axis("var", "Entries of qo_indptr and kv_indptr: batch_size + 1."),
        "total_q": axis("var", "Query tokens of all sequences."),
        "num_kv_indices": axis("var", "Entries of the page table."),
        "num_pages": axis("var", "Pages in the KV cache's pool."),
        "batch_size": axis("var", "Sequences."),
    })
    inputs = paged_inputs(["total_q", "num_qo_heads", "head_dim"], {
        "qo_indptr": {"shape": ["len_indptr"], "dtype": "int32", "description": "Queries of sequence b: "
                      "qo_indptr[b] to qo_indptr[b+1]."}})
    workloads = []
    # (q_lens, kv_lens, pool): a short append, a whole prompt (q_len == kv_len), a long append; then one
    # query over many pages beside a prompt of one partial page; then a prompt of less than a page
    for seed, (q_lens, kv_lens, pool) in enumerate([([5, 40, 21], [21, 40, 70], 16),
                                                   ([1, 9, 64], [130, 9, 64], 24),
                                                   ([7, 3], [7, 33], 8)]):
        indptr, indices, last = page_table(kv_lens, pool, 100 + seed)
        qo = [0]
        for n in q_lens:
            qo.append(qo[-1] + n)
        ax = {"len_indptr": len(qo), "total_q": qo[-1], "num_kv_indices": len(indices), "num_pages": pool,
              "batch_size": len(q_lens)}
        workloads.append((ax, {"qo_indptr": qo, "kv_indptr": indptr, "kv_indices": indices,
                               "kv_last_page_len": last}))
    write(name, f"Batched grouped-query attention prefill over a paged KV cache (page size {PS}), causal, "
          "the last query aligned with the last key. A kiln test problem in FlashInfer-Bench's gqa_paged form.",
          axes, ["total_q == qo_indptr[-1].item()", "num_kv_indices == kv_indptr[-1].item()",
                 "len_indptr == batch_size + 1"],
          inputs, PREFILL_REFERENCE, workloads, ["stage:prefill"])


def decode():
    name = f"gqa_paged_decode_h{HQ}_kv{HKV}_d{D}_ps{PS}"
    axes = {"batch_size": axis("var", "Sequences, one query each.")}
    axes.update(CONST_AXES)
    axes.update({
        "num_pages": axis("var", "Pages in the KV cache's pool."),
        "len_indptr": axis("var", "Entries of kv_indptr: batch_size + 1."),
        "num_kv_indices": axis("var", "Entries of the page table."),
    })
    inputs = paged_inputs(["batch_size", "num_qo_heads", "head_dim"])
    workloads = []
    for seed, (kv_lens, pool) in enumerate([([1, 77, 16, 200], 24), ([45, 3], 6)]):
        indptr, indices, last = page_table(kv_lens, pool, 200 + seed)
        ax = {"batch_size": len(kv_lens), "num_pages": pool, "len_indptr": len(indptr),
              "num_kv_indices": len(indices)}
        workloads.append((ax, {"kv_indptr": indptr, "kv_indices": indices, "kv_last_page_len": last}))
    write(name, f"Batched grouped-query attention decode over a paged KV cache (page size {PS}): one query "
          "a sequence over all its cached tokens. A kiln test problem in FlashInfer-Bench's gqa_paged form.",
          axes, ["len_indptr == batch_size + 1", "num_kv_indices == kv_indptr[-1].item()"],
          inputs, DECODE_REFERENCE, workloads, ["stage:decode"])


if __name__ == "__main__":
    prefill()
    decode()
