"""test_family_attention: kiln's attention family end to end on the cpu backend.

`kiln sweep PROBLEM --backend cpu --family attention --json` on every problem under
tests/data/families/attention (written by tests/data/gen/make_attention.py: eager attention chains as chain
capture writes them — GQA through repeat_kv's views, bf16 with a causal finfo.min mask and the eager roundings,
float32 unmasked with a tail tile, a sliding window as a float32 -inf mask — and a captured SDPA call with
is_causal, and the Gemma-4 --small block in capture's stored layouts: q in memory order, kᵀ as repeat_kv's
broadcast view stored with its size-1 dims last): the family must recognise each problem as the expected variant, and the gate must prove its
candidate "ok" against PyTorch on every workload and input set. The cpu candidate is the GPU's algorithm (online
softmax over key tiles, tiles outside the mask's band skipped), so a band that skipped kept keys would fail:
test_wrong_band_fails makes sure it does. The issue's GPU rows (bench/attention) must match.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KILN = Path(os.environ.get("KILN_BIN", "build/kiln"))
if not KILN.is_absolute():
    KILN = ROOT / KILN
DATA = ROOT / "tests" / "data" / "families" / "attention"

EXPECTED = {
    "gqa_bf16_causal": "attention_causal_mask_gqa",
    "f32_unmasked": "attention",
    "sliding_bf16": "attention_sliding_gqa",
    "sdpa_bf16_causal": "attention_causal_gqa",
    "gemma_small_captured": "attention_mask_gqa",
    "sdpa_bf16_d40": "attention",  # a head dim the CUDA kernels pad
}


def kiln_env() -> dict:
    env = dict(os.environ)
    env["KILN_PYTHON"] = sys.executable
    env["PYTHONPATH"] = str(ROOT / "python") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def need_kiln() -> None:
    if not KILN.exists():
        pytest.skip(f"{KILN} is missing (run `make all` first)")


def sweep(problem: Path, tmp_path: Path) -> tuple:
    cmd = [str(KILN), "sweep", str(problem), "--backend", "cpu", "--family", "attention", "--limit", "8",
           "--json", "--iters", "2", "--out", str(tmp_path / "src"), "--ref-dir", str(tmp_path / "ref")]
    r = subprocess.run(cmd, cwd=ROOT, env=kiln_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"kiln sweep failed ({r.returncode}):\n{r.stderr[-4000:]}"
    return r, json.loads(r.stdout)["rows"]


def test_every_problem_is_listed():
    """A problem directory added without an expectation would go untested."""
    found = sorted(p.name for p in DATA.iterdir() if (p / "definition.json").exists())
    assert found == sorted(EXPECTED)


@pytest.mark.parametrize("problem", sorted(EXPECTED))
def test_sweep_cpu(problem: str, tmp_path: Path):
    need_kiln()
    r, rows = sweep(DATA / problem, tmp_path)
    m = re.search(r"matches family attention \(([a-z_]+)\)", r.stderr)
    assert m, r.stderr[-2000:]
    assert m.group(1) == EXPECTED[problem]
    assert len(rows) == 1, f"{len(rows)} candidates; the cpu source should not depend on the point"
    result = rows[0]["result"]
    assert result["outcome"] == "ok", (rows[0]["params"], json.dumps(result.get("evidence"))[:2000])
    assert result["summary"]["proved"] == len(result["workloads"]) > 0
    assert all(w["proved_sets"] >= 2 for w in result["workloads"])
    src = Path(rows[0]["file"]).read_text()
    assert "family attention" in src and "att_cpu(&a)" in src
    band = "causal" in EXPECTED[problem] or "sliding" in EXPECTED[problem]
    assert ("#define ATT_BAND 1" in src) == band


def test_wrong_band_fails(tmp_path: Path):
    """A mask said to keep only the 8 keys before each query (it keeps every earlier key) makes the kernel
    skip tiles with kept keys: the gate must refuse it, so an "ok" above means the band is used and right."""
    need_kiln()
    d = tmp_path / "lying_band"
    shutil.copytree(DATA / "gqa_bf16_causal", d)
    definition = json.loads((d / "definition.json").read_text())
    definition["kiln"]["mask_structure"]["lower"] = -8
    (d / "definition.json").write_text(json.dumps(definition))
    r, rows = sweep(d, tmp_path)
    assert "attention_sliding_gqa" in r.stderr
    assert len(rows) == 1 and rows[0]["result"]["outcome"] != "ok", rows[0]["result"]["outcome"]


def test_bench_rows_match():
    """The issue's GPU rows (bench/attention, bench/attention_rows.py) are recognised with a start point; they
    are too big to prove here, so only the matcher runs (`--list`)."""
    need_kiln()
    rows = sorted((ROOT / "bench" / "attention").glob("attn_*"))
    # issue 16's five, Gemma-4's full-attention layer at head dim 512, its sliding window as an SDPA call with
    # a boolean mask, BERT's padding mask, and three head dims the kernels pad (Stable Diffusion 1.5's 40 twice,
    # Phi-2's 80); the paged row is written by bench/attention_rows.py when a device script runs, and matched
    # too where a run left it here
    assert len([d for d in rows if not d.name.startswith("attn_paged_")]) == 11
    for d in rows:
        r = subprocess.run([str(KILN), "sweep", str(d), "--family", "attention", "--list"], cwd=ROOT,
                           env=kiln_env(), capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"{d.name}: {r.stderr[-2000:]}"
        assert re.search(r"matches family attention \(attention[a-z_]*\), space (\d+) points", r.stdout), \
            f"{d.name}: {r.stdout[-1000:]}"
        assert "(the family's start rule)" in r.stdout, r.stdout[-1000:]


def stored_problem(tmp_path: Path, name: str, mask) -> Path:
    """gqa_bf16_causal as capture writes a problem whose tensors it keeps: every input a safetensors tensor (so
    the matcher can read the mask itself), no stated mask structure."""
    import torch
    from safetensors.torch import save_file

    d = tmp_path / name
    shutil.copytree(DATA / "gqa_bf16_causal", d)
    definition = json.loads((d / "definition.json").read_text())
    del definition["kiln"]["mask_structure"]
    definition["custom_inputs_entrypoint"] = None
    (d / "definition.json").write_text(json.dumps(definition))
    (d / "tensors").mkdir()
    lines = []
    for w, s in enumerate((64, 100)):
        g = torch.Generator().manual_seed(w)
        t = {"q": torch.randn(1, 4, s, 64, generator=g).bfloat16(), "k": torch.randn(1, 2, s, 64, generator=g).bfloat16(),
             "v": torch.randn(1, 2, s, 64, generator=g).bfloat16(), "mask": mask(s)}
        save_file(t, str(d / "tensors" / f"w{w}.safetensors"))
        lines.append(json.dumps({"uuid": f"w{w}", "axes": {"s": s}, "inputs": {
            n: {"type": "safetensors", "path": f"tensors/w{w}.safetensors", "tensor_key": n} for n in t}}))
    (d / "workload.jsonl").write_text("\n".join(lines) + "\n")
    return d


def test_band_read_from_a_stored_mask(tmp_path: Path):
    """A mask capture keeps whole has no recorded structure: the matcher finds the band in the tensor itself
    (causal here: the tiles above the diagonal are skipped), proven on the cpu backend; a mask that is not a band
    stays an arbitrary additive tensor."""
    need_kiln()
    import torch

    lo = torch.finfo(torch.bfloat16).min
    causal = stored_problem(tmp_path, "causal", lambda s: torch.full((1, 1, s, s), lo).triu(1).bfloat16())
    r, rows = sweep(causal, tmp_path / "c")
    assert "attention_causal_mask_gqa" in r.stderr, r.stderr[-2000:]
    assert rows[0]["result"]["outcome"] == "ok", json.dumps(rows[0]["result"].get("evidence"))[:2000]
    assert "#define ATT_BAND 1" in Path(rows[0]["file"]).read_text()

    def holes(s):
        m = torch.full((1, 1, s, s), lo).triu(1)
        m[0, 0, s - 1, 3] = lo  # a masked key inside the last row's run: not a band
        return m.bfloat16()

    other = stored_problem(tmp_path, "holes", holes)
    r = subprocess.run([str(KILN), "sweep", str(other), "--family", "attention", "--list"], cwd=ROOT,
                       env=kiln_env(), capture_output=True, text=True, timeout=60)
    assert "matches family attention (attention_mask_gqa)" in r.stdout, r.stdout[-1000:] + r.stderr[-1000:]


def capture_sdpa(tmp_path: Path, *script_args) -> Path:
    run = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "kiln.capture", str(ROOT / "tests" / "data" / "attention" / "sdpa_model.py"),
                        "--out", str(run), "--device", "cpu", "--quiet", "--no-reference", "--", *script_args],
                       cwd=ROOT, env=kiln_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return run


def test_sdpa_without_dropout_is_captured(tmp_path: Path):
    """PyTorch tags SDPA and the attention ops it dispatches to as seeded (they can drop out); called with
    dropout_p 0 they are deterministic, and capture writes the call as a problem with its real q, k, v:
    the composite call itself under no_grad (capture_record.COMPOSITE_FUNCTIONS), not its decomposition."""
    run = capture_sdpa(tmp_path)
    groups = {g["aten"]: g for g in json.loads((run / "model.json").read_text())["groups"]}
    assert "aten::_scaled_dot_product_flash_attention_for_cpu.default" not in groups, sorted(groups)
    sdpa = groups["aten::scaled_dot_product_attention.default"]
    assert sdpa["not_a_problem"] is None and sdpa["problem"], sdpa
    d = json.loads((run / "problems" / sdpa["problem"] / "definition.json").read_text())
    assert d["kiln"]["args"]["args"][3:] == [None, 0.0, True]  # attn_mask, dropout_p, is_causal
    assert d["kiln"]["args"]["kwargs"] == {"enable_gqa": True}


def test_sdpa_entry_in_graph_mode(tmp_path: Path):
    """A captured SDPA call, proved and installed, is kiln's in eager (the dispatcher sees the composite call)
    and in graph mode too, where the model's graph holds the fused backend call the device chose
    (_scaled_dot_product_flash_attention_for_cpu here) rather than SDPA: the entry's pattern is traced on the
    model's device, not on meta tensors, whose math decomposition no graph holds (graph mode had no hit)."""
    need_kiln()
    run = captured("sdpa_model.py", tmp_path)
    (p,) = [p for p in (run / "problems").iterdir() if p.name.startswith("scaled_dot_product_attention")]
    optimize(run, p)
    for mode in ("--mode=eager", "--graph"):
        out = run_script(run, "sdpa_model.py", mode)
        assert re.search(r"scaled_dot_product_attention +hits +2 ", out), out[-2000:]


def test_sdpa_with_dropout_is_random(tmp_path: Path):
    run = capture_sdpa(tmp_path, "--dropout")
    groups = json.loads((run / "model.json").read_text())["groups"]
    assert not [g for g in groups if "attention" in g["aten"] and g["problem"]], groups
    assert any(g["not_a_problem"] == "random op" for g in groups), groups


# ---- FlashInfer's paged form, as SOL-ExecBench's FlashInfer category gives it ----

SOLBENCH = ROOT / "tests" / "data" / "solbench"
PAGED = {
    "gqa_paged_prefill_causal_h4_kv2_d64_ps16": "attention_paged_prefill_causal_gqa",
    "gqa_paged_decode_h4_kv2_d64_ps16": "attention_paged_decode_gqa",
}


@pytest.fixture(scope="module")
def paged_sweeps(tmp_path_factory):
    """One cpu sweep a paged problem (written by tests/data/gen/make_paged.py); its reference directory is
    reused by the tests that feed the gate wrong kernels."""
    need_kiln()
    out = {}
    for name in PAGED:
        tmp = tmp_path_factory.mktemp(name)
        r, rows = sweep(SOLBENCH / name, tmp)
        out[name] = (r, rows, tmp / "ref")
    return out


@pytest.mark.parametrize("problem", sorted(PAGED))
def test_paged_sweep_cpu(problem: str, paged_sweeps):
    """The SOL-ExecBench-format paged problem is read, matched as the paged variant and proven on every
    workload and input set (output and lse), its page tables scrambled and some last pages partial."""
    r, rows, _ = paged_sweeps[problem]
    m = re.search(r"matches family attention \(([a-z_]+)\)", r.stderr)
    assert m and m.group(1) == PAGED[problem], r.stderr[-2000:]
    assert len(rows) == 1
    result = rows[0]["result"]
    assert result["outcome"] == "ok", json.dumps(result.get("evidence"))[:2000]
    assert result["summary"]["proved"] == len(result["workloads"]) >= 2
    assert all(w["proved_sets"] == 3 for w in result["workloads"])
    assert result["summary"]["sol_pct_geomean"] > 0  # flops counted from the stored page tables
    assert "att_cpu_paged(&a)" in Path(rows[0]["file"]).read_text()


WRONG = {
    # the pages of a sequence taken in pool order instead of through kv_indices
    "pages_in_order": ("(int64_t)pages[j / a->page_size]", "(int64_t)(pages - a->kv_indices + j / a->page_size)"),
    # causal from the first key (SDPA's is_causal) instead of the last query at the last key
    "causal_top_left": ("j1 = i + kv_len - q_len + 1 < kv_len ? i + kv_len - q_len + 1 : kv_len;",
                        "j1 = i + 1 < kv_len ? i + 1 : kv_len;"),
    # lse in natural log
    "lse_base_e": ("(m + logf(l)) * 1.4426950408889634f", "(m + logf(l))"),
}


@pytest.mark.parametrize("mistake", sorted(WRONG))
def test_paged_wrong_kernel_fails(mistake: str, paged_sweeps, tmp_path: Path):
    """The gate tells the page lookup, the causal alignment and the lse's base apart: the emitted kernel with
    one of them wrong is a mismatch on the prefill problem."""
    name = "gqa_paged_prefill_causal_h4_kv2_d64_ps16"
    _, rows, ref = paged_sweeps[name]
    src = Path(rows[0]["file"]).read_text()
    old, new = WRONG[mistake]
    assert old in src
    wrong = tmp_path / f"{mistake}.c"
    wrong.write_text(src.replace(old, new))
    r = subprocess.run([str(KILN), "eval", str(SOLBENCH / name), str(wrong), "--backend", "cpu", "--json",
                        "--no-time", "--ref-dir", str(ref)], cwd=ROOT, env=kiln_env(), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["outcome"] == "mismatch"


def captured(script: str, tmp_path: Path) -> Path:
    """tests/data/attention/SCRIPT captured on the CPU: the run directory."""
    run = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "kiln.capture", str(ROOT / "tests" / "data" / "attention" / script),
                        "--out", str(run), "--device", "cpu", "--quiet"], cwd=ROOT, env=kiln_env(),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return run


def optimize(run: Path, problem: Path) -> None:
    """`kiln optimize` of one problem of run (a candidate) into run's library."""
    r = subprocess.run([str(KILN), "optimize", str(run), str(problem), "--backend", "cpu", "--budget", "1"],
                       cwd=ROOT, env=kiln_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]


def run_script(run: Path, script: str, mode: str = "--graph") -> str:
    """`kiln run MODE --entries all --stats` of tests/data/attention/SCRIPT with run's library: its stdout and
    stderr."""
    r = subprocess.run([str(KILN), "run", "--library", str(run), mode, "--entries", "all", "--stats",
                        str(ROOT / "tests" / "data" / "attention" / script)], cwd=ROOT, env=kiln_env(),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout + r.stderr


def optimize_and_run_graph(run: Path, problem: Path, script: str) -> str:
    """optimize one problem of run, then run_script in graph mode."""
    optimize(run, problem)
    return run_script(run, script)


def test_boolean_masks_captured_and_proved(tmp_path: Path):
    """SDPA with boolean masks (tests/data/attention/sdpa_bool_mask.py; True takes part, as Hugging Face models
    pass them): a padding mask is read as 0 / -inf and proved; a sliding window is found as its band in every
    input set (capture keeps a boolean band mask's band in its random sets) and is exactly it (True inside:
    "inside": 0), so the kernel skips the tiles outside it and a 16-bit CUDA kernel generates the band."""
    need_kiln()
    problems = sorted((captured("sdpa_bool_mask.py", tmp_path) / "problems").iterdir())
    assert len(problems) == 2, problems
    variants = []
    for p in problems:
        assert json.loads((p / "definition.json").read_text())["inputs"]["attn_mask"]["dtype"] == "bool"
        out, rows = sweep(p, tmp_path / p.name)
        variants.append(re.search(r"matches family attention \(([a-z_]+)\)", out.stderr).group(1))
        result = rows[0]["result"]
        assert result["outcome"] == "ok", json.dumps(result.get("evidence"))[:2000]
        assert all(w["proved_sets"] >= 3 for w in result["workloads"])
        src = Path(rows[0]["file"]).read_text()
        assert "#define ATT_LM(v) ((v) != 0 ? 0.0f : -INFINITY)" in src
    assert sorted(variants) == ["attention_mask_gqa", "attention_sliding_gqa"], variants


def test_masked_fill_with_minus_inf_is_an_inverted_boolean_mask(tmp_path: Path):
    """minGPT's `att.masked_fill(bias[:, :, :T, :T] == 0, -inf)` (tests/data/attention/eager_masked_fill.py): the
    eager block with a boolean mask that is True where masked, declined before ("op aten::masked_fill.Scalar is
    not part of an attention pattern"), is matched, read inverted (ATT_LM, ATT_MASK_INV on cuda) and proved; the
    same kernel reading the mask as SDPA's (True kept) is a mismatch."""
    need_kiln()
    run = captured("eager_masked_fill.py", tmp_path)
    (p,) = [p for p in (run / "problems").iterdir() if p.name.startswith("attention_")]
    d = json.loads((p / "definition.json").read_text())
    assert "aten::masked_fill.Scalar" in [op["aten"] for op in d["kiln"]["ops"]]
    assert [i["dtype"] for i in d["inputs"].values()].count("bool") == 1
    out, rows = sweep(p, tmp_path / "sweep")
    assert "matches family attention (attention_mask)" in out.stderr, out.stderr[-2000:]
    result = rows[0]["result"]
    assert result["outcome"] == "ok", json.dumps(result.get("evidence"))[:2000]
    src = Path(rows[0]["file"]).read_text()
    inverted = "#define ATT_LM(v) ((v) == 0 ? 0.0f : -INFINITY)"
    assert inverted in src
    wrong = tmp_path / "sdpa_sense.c"
    wrong.write_text(src.replace(inverted, "#define ATT_LM(v) ((v) != 0 ? 0.0f : -INFINITY)"))
    r = subprocess.run([str(KILN), "eval", str(p), str(wrong), "--backend", "cpu", "--json", "--no-time",
                        "--ref-dir", str(tmp_path / "sweep" / "ref")], cwd=ROOT, env=kiln_env(),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["outcome"] in ("mismatch", "nan"), r.stdout[:2000]


def test_where_with_a_0_dim_fill_is_a_boolean_mask(tmp_path: Path):
    """Older GPT-2's `torch.where(causal_mask, scores / torch.full([], d ** 0.5), torch.full([], finfo.min))`
    (tests/data/attention/eager_where.py): capture writes the two 0-dim tensors made from constants as their
    numbers (div.Scalar, where.ScalarOther; as inputs their random sets were draws and the family declined the
    block), the block is matched as a boolean mask in SDPA's sense and proved, and graph mode, which sees
    `full` nodes (kiln.install_graph.scalar_constants), replaces both layers' blocks."""
    need_kiln()
    run = captured("eager_where.py", tmp_path)
    (p,) = [p for p in (run / "problems").iterdir() if p.name.startswith("attention_")]
    d = json.loads((p / "definition.json").read_text())
    atens = [op["aten"] for op in d["kiln"]["ops"]]
    assert "aten::where.ScalarOther" in atens and "aten::div.Scalar" in atens, atens
    assert all(i["shape"] for i in d["inputs"].values()), "no 0-dim input is left"
    out, rows = sweep(p, tmp_path / "sweep")
    assert "matches family attention (attention_causal_mask)" in out.stderr, out.stderr[-2000:]  # the band
    result = rows[0]["result"]
    assert result["outcome"] == "ok", json.dumps(result.get("evidence"))[:2000]
    src = Path(rows[0]["file"]).read_text()
    assert "#define ATT_LM(v) ((v) != 0 ? 0.0f : -INFINITY)" in src and "a.scale = (float)0.25" in src, src[:3000]
    out = optimize_and_run_graph(run, p, "eager_where.py")
    assert re.search(r"where\.ScalarOther .* hits +2 +misses +0", out), out[-2000:]


def test_position_bias_with_heads_innermost(tmp_path: Path):
    """An additive mask whose key dim is not innermost in memory (tests/data/attention/sdpa_position_bias.py: T5's
    relative position bias, [q, k, heads] permuted to [1, heads, q, k] without a copy) is read a.mk elements
    apart (ATT_MASK_KS) and proved; it was declined before ("the key dim of mask ... is not innermost")."""
    need_kiln()
    run = captured("sdpa_position_bias.py", tmp_path)
    (p,) = [p for p in (run / "problems").iterdir() if p.name.startswith("scaled_dot_product_attention")]
    assert json.loads((p / "definition.json").read_text())["kiln"]["layouts"]["attn_mask"]["permute"][-1] != 3
    out, rows = sweep(p, tmp_path / "sweep")
    assert "matches family attention (attention_mask)" in out.stderr, out.stderr[-2000:]
    result = rows[0]["result"]
    assert result["outcome"] == "ok", json.dumps(result.get("evidence"))[:2000]
    src = Path(rows[0]["file"]).read_text()
    assert "#define ATT_MASK_KS 1" in src and "a.mk = " in src


def test_padding_mask_broadcast_over_queries(tmp_path: Path):
    """An additive padding mask of shape [b, 1, 1, skv] (tests/data/attention/eager_padding_mask.py: BERT's
    extended attention mask) broadcasts over the queries: the eager chain is matched and proved (it was declined:
    "the mask does not broadcast to [b, hq, sq, skv]"), and it is no band (one row for every query)."""
    need_kiln()
    run = captured("eager_padding_mask.py", tmp_path)
    (p,) = [p for p in (run / "problems").iterdir() if p.name.startswith("attention_")]
    assert json.loads((p / "definition.json").read_text())["kiln"]["shapes"]
    out, rows = sweep(p, tmp_path / "sweep")
    assert "matches family attention (attention_mask)" in out.stderr, out.stderr[-2000:]
    result = rows[0]["result"]
    assert result["outcome"] == "ok", json.dumps(result.get("evidence"))[:2000]


def test_gemma2_soft_cap(tmp_path: Path):
    """Gemma-2's logit soft cap between the scale and the mask (tests/data/attention/eager_softcap.py: scores
    · scale / cap, tanh, · cap, + mask; it was "op aten::tanh.default is not part of an attention pattern"):
    the block is matched with the tanh in the kernel (ATT_TANH, the cap as ATT_POST), proved against eager, and
    graph mode replaces both layers' blocks."""
    need_kiln()
    run = captured("eager_softcap.py", tmp_path)
    (p,) = [p for p in (run / "problems").iterdir() if p.name.startswith("attention_")]
    out, rows = sweep(p, tmp_path / "sweep")
    assert "matches family attention" in out.stderr, out.stderr[-2000:]
    result = rows[0]["result"]
    assert result["outcome"] == "ok", json.dumps(result.get("evidence"))[:2000]
    src = Path(rows[0]["file"]).read_text()
    assert "tanh soft cap" in src and "#define ATT_TANH 1\n#define ATT_PRE ((float)0.02)\n" in src, src[:3000]
    assert "#define ATT_POST ((float)50)" in src and "a.scale = (float)0.25" in src, src[:3000]
    out = optimize_and_run_graph(run, p, "eager_softcap.py")
    assert re.search(r"tanh\.default .* hits +2 +misses +0", out), out[-2000:]


def test_attention_over_batch_times_heads(tmp_path: Path):
    """Attention over [b·h, s, d] (tests/data/attention/eager_bmm3d.py: latent-diffusion's bmm of q and kᵀ, a
    scale, softmax, bmm with v; diffusers' baddbmm of q and kᵀ with alpha the scale, beta 0 over an empty tensor,
    and beta 1 over a [b·h, 1, s_kv] padding mask): each block is captured as one problem (baddbmm starts one
    now, and a softmax joined to no other call is a block's chain), matched with one head a batch entry,
    proved, and graph mode replaces all three. It was declined before: "input0 has 3 dims (attention wants
    [b, h, s, d])". baddbmm rounds once, after the scale (beta 0)
    or after the mask (beta 1), and never the bare product."""
    need_kiln()
    run = captured("eager_bmm3d.py", tmp_path)
    problems = sorted(p for p in (run / "problems").iterdir() if p.name.startswith("attention_"))
    assert len(problems) == 3, problems
    rounds = {}
    for p in problems:
        d = json.loads((p / "definition.json").read_text())
        assert all(len(i["shape"]) == 3 for i in d["inputs"].values()), d["inputs"]
        out, rows = sweep(p, tmp_path / p.name)
        assert "matches family attention" in out.stderr, out.stderr[-2000:]
        result = rows[0]["result"]
        assert result["outcome"] == "ok", json.dumps(result.get("evidence"))[:2000]
        src = Path(rows[0]["file"]).read_text()
        assert "a.hq = 1;" in src and "a.scale = (float)0.25" in src, src[:3000]
        atens = [op["aten"] for op in d["kiln"]["ops"]]
        flags = tuple(int(re.search(rf"#define ATT_ROUND_{f} (\d)", src).group(1))
                      for f in ("QK", "SCALED", "MASKED"))
        rounds[("aten::baddbmm.default" in atens, "#define ATT_HAS_MASK 1" in src)] = flags
        optimize(run, p)
    assert rounds == {(False, False): (1, 1, 0), (True, False): (0, 1, 0), (True, True): (0, 0, 1)}, rounds
    out = run_script(run, "eager_bmm3d.py")
    assert "3 kernel calls by kiln, 0 fell back to PyTorch" in out, out[-3000:]


def test_q_and_k_upcast_inside_the_block(tmp_path: Path):
    """GPT-J's and GPT-Neo's eager attention upcasts q and k to float32 before the scores
    (tests/data/attention/eager_upcast.py): the casts are members of the block, so its q, k and v are the
    bfloat16 tensors (the block was declined before: "q, k, v and the output must share one of float32,
    bfloat16, float16"), the scores are not rounded, and graph mode replaces both layers' blocks although the
    model spells kᵀ as a transpose where capture writes a permute (kiln.install_graph transposes_as_permutes)."""
    need_kiln()
    run = captured("eager_upcast.py", tmp_path)
    (p,) = [p for p in (run / "problems").iterdir() if p.name.startswith("attention_")]
    d = json.loads((p / "definition.json").read_text())
    assert {i["dtype"] for i in d["inputs"].values()} == {"bfloat16"}, d["inputs"]
    assert [op["aten"] for op in d["kiln"]["ops"]].count("aten::_to_copy.default") == 3, d["kiln"]["ops"]
    out, rows = sweep(p, tmp_path / "sweep")
    assert "matches family attention (attention_causal_mask)" in out.stderr, out.stderr[-2000:]
    assert rows[0]["result"]["outcome"] == "ok", json.dumps(rows[0]["result"].get("evidence"))[:2000]
    src = Path(rows[0]["file"]).read_text()
    assert "#define ATT_ROUND_QK 0" in src and "#define ATT_ROUND_SCALED 0" in src, src[:3000]
    out = optimize_and_run_graph(run, p, "eager_upcast.py")
    assert "2 kernel calls by kiln, 0 fell back to PyTorch" in out, out[-3000:]
