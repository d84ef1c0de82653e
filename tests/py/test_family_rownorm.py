"""test_family_rownorm: kiln's rmsnorm and layernorm families end to end on the cpu backend.

`kiln sweep PROBLEM --backend cpu --family F --limit 3 --json --iters 2` runs on every problem under
tests/data/families/rownorm: leaf modules as `kiln capture` writes them (Gemma4RMSNorm with and
without a weight, LlamaRMSNorm's cast chain in fp16, Qwen3.5-MoE's 1 + w and its SiLU-gated norm,
PyTorch's own decomposition of _fused_rms_norm with an in-place add_), aten calls (rms_norm,
layer_norm, native_layer_norm with its mean and rstd), and hand-written problems (eps as a scalar
input or a literal of the source); fp32, bf16 and fp16; rows of 1, 7, 33, 4097 elements. The family
must recognise each as the expected variant, and every candidate it emits must be proved "ok" by the
gate against PyTorch. The bench rows and SOL-ExecBench's published rmsnorm_h4096 must match
(`--list`); the published problem is also proved end to end when KILN_TEST_SOLBENCH=1 (about two
minutes: 14 workloads up to 14509 x 4096). Sources and reference data go to a temporary directory,
never into the repository.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KILN = Path(os.environ.get("KILN_BIN", "build/kiln"))
if not KILN.is_absolute():
    KILN = ROOT / KILN
DATA = ROOT / "tests" / "data" / "families" / "rownorm"
SOLBENCH = ROOT.parent / "shared" / "solbench" / "rmsnorm_h4096"

# problem -> (family, the variant the matcher must report)
EXPECTED = {
    "rms_gemma4_module_bf16": ("rmsnorm", "rmsnorm_weight"),
    "rms_gemma4_noscale_bf16": ("rmsnorm", "rmsnorm_noweight"),
    "rms_llama_module_f16": ("rmsnorm", "rmsnorm_weight_cast_first"),
    "rms_qwen35moe_module_bf16": ("rmsnorm", "rmsnorm_1p_weight"),
    "rms_qwen35moe_gated_bf16": ("rmsnorm", "rmsnorm_weight_cast_first_gated"),
    "rms_fused_decomposed_bf16": ("rmsnorm", "rmsnorm_weight"),
    "rms_aten_rms_norm_f32": ("rmsnorm", "rmsnorm_weight"),
    "rms_handwritten_f16_eps_input": ("rmsnorm", "rmsnorm_weight"),
    "rms_handwritten_offset_f32": ("rmsnorm", "rmsnorm_1p_weight"),
    "ln_aten_layer_norm_bf16": ("layernorm", "layernorm_weight_bias"),
    "ln_aten_native_f32_odd": ("layernorm", "layernorm_weight_bias_stats"),
    "ln_aten_noaffine_f16_cols7": ("layernorm", "layernorm_noweight"),
    "ln_handwritten_f32": ("layernorm", "layernorm_weight_bias"),
}

# the GPU rows of the families (bench/problems): they must match, at their real sizes
BENCH = {
    "rmsnorm_bf16_h4096": ("rmsnorm", "rmsnorm_weight"),
    "rmsnorm_gemma4_bf16_s4096_h2304": ("rmsnorm", "rmsnorm_weight"),
    "rmsnorm_qwen3_5_moe_bf16_s2048_h2048": ("rmsnorm", "rmsnorm_1p_weight"),
    "layernorm_bf16_8192x1024": ("layernorm", "layernorm_weight_bias_stats"),
    "layernorm_f32_8192x1024": ("layernorm", "layernorm_weight_bias_stats"),
}


def kiln_env() -> dict:
    env = dict(os.environ)
    env["KILN_PYTHON"] = sys.executable
    env["PYTHONPATH"] = str(ROOT / "python") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def need_kiln() -> None:
    if not KILN.exists():
        pytest.skip(f"{KILN} is missing (run `make all` first)")


def sweep(problem: Path, family: str, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    # a generous --timeout: this is about correctness, and a loaded CI machine must not turn a slow
    # run into a "timeout" outcome
    cmd = [str(KILN), "sweep", str(problem), "--backend", "cpu", "--family", family,
           "--out", str(tmp_path / "src"), "--ref-dir", str(tmp_path / "ref"), "--timeout", "120",
           *extra]
    return subprocess.run(cmd, cwd=ROOT, env=kiln_env(), capture_output=True, text=True, timeout=600)


def matched_variant(stderr_or_stdout: str, family: str) -> str:
    m = re.search(rf"matches family {family} \(([a-z0-9_]+)\)", stderr_or_stdout)
    assert m, stderr_or_stdout[-2000:]
    return m.group(1)


def test_every_problem_is_listed():
    """A problem directory added without an expectation would go untested."""
    found = sorted(p.name for p in DATA.iterdir() if (p / "definition.json").exists())
    assert found == sorted(EXPECTED)


@pytest.mark.parametrize("problem", sorted(EXPECTED))
def test_sweep_cpu(problem: str, tmp_path: Path):
    need_kiln()
    family, variant = EXPECTED[problem]
    r = sweep(DATA / problem, family, tmp_path, "--limit", "3", "--json", "--iters", "2")
    assert r.returncode == 0, f"kiln sweep failed ({r.returncode}):\n{r.stderr[-4000:]}"
    assert matched_variant(r.stderr, family) == variant
    rows = json.loads(r.stdout)["rows"]
    # the first point of the space is valid for every problem here, so a sampled sweep always runs
    assert rows, f"no candidate was emitted:\n{r.stderr[-2000:]}"
    for row in rows:
        result = row["result"]
        assert result["outcome"] == "ok", (row["params"], json.dumps(result.get("evidence"))[:2000])
        assert result["summary"]["proved"] == len(result["workloads"])


@pytest.mark.parametrize("problem", sorted(BENCH))
def test_bench_rows_match(problem: str, tmp_path: Path):
    need_kiln()
    family, variant = BENCH[problem]
    r = sweep(ROOT / "bench" / "problems" / problem, family, tmp_path, "--list")
    assert r.returncode == 0, r.stderr[-2000:]
    assert matched_variant(r.stdout, family) == variant


@pytest.mark.skipif(not SOLBENCH.exists(), reason=f"{SOLBENCH} is not here (the shared folder)")
def test_solbench_published_problem(tmp_path: Path):
    """SOL-ExecBench's rmsnorm_h4096 exactly as published (read-only: sources go to --out)."""
    need_kiln()
    r = sweep(SOLBENCH, "rmsnorm", tmp_path, "--list")
    assert r.returncode == 0, r.stderr[-2000:]
    assert matched_variant(r.stdout, "rmsnorm") == "rmsnorm_weight"
    if os.environ.get("KILN_TEST_SOLBENCH") != "1":
        return
    r = sweep(SOLBENCH, "rmsnorm", tmp_path, "--limit", "1", "--json", "--iters", "2")
    assert r.returncode == 0, r.stderr[-4000:]
    rows = json.loads(r.stdout)["rows"]
    assert rows and all(row["result"]["outcome"] == "ok" for row in rows), r.stdout[-2000:]


def test_other_ops_are_declined_with_a_reason(tmp_path: Path):
    need_kiln()
    r = sweep(ROOT / "tests" / "data" / "problems" / "softmax_f32", "rmsnorm", tmp_path, "--list")
    assert r.returncode == 2
    assert "rmsnorm: op_type 'softmax' is not rmsnorm" in r.stderr
    r = sweep(DATA / "ln_aten_layer_norm_bf16", "rmsnorm", tmp_path, "--list")
    assert r.returncode == 2
    assert "rmsnorm: a LayerNorm, not an RMSNorm" in r.stderr
