"""The wgmma family's gated pairs on the cpu backend: the front of a GeGLU or SwiGLU MLP, act(x @ wgᵀ) *
(x @ wuᵀ) (tests/data/families/wgmma: GELU-tanh in bfloat16 with the activation between the linears, SiLU in
float16 with both linears first and the product reading the up projection first), matched by the wgmma family
only — the cublaslt family declines it with its reason, cuBLASLt's epilogues reading one accumulator — and its
cpu candidate (both GEMMs, the activation and the product on the fp32 accumulators, one rounding) proved by the
gate against the PyTorch reference. Then fp8 (torch._scaled_mm): one scale each, and a scale a row of x and a
column of w with a bias (which only this family takes: cublaslt declines it), their cpu candidates proved. On the
GPU the same problems run kiln's sm_90a kernel (bench/wgmma_device.sh). Reference data and sources go to a
temporary directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KILN = Path(os.environ.get("KILN_BIN", "build/kiln"))
if not KILN.is_absolute():
    KILN = ROOT / KILN
DATA = ROOT / "tests" / "data" / "families" / "wgmma"
GATED = {"gated_gelu_bf16": "linear_gated_gelu", "gated_silu_f16": "linear_gated_silu",
         "gated_gelu_deep_bf16": "linear_gated_gelu"}  # deep: K = 1024, the GPU kernel's stage ring wraps

pytestmark = pytest.mark.skipif(not KILN.exists(), reason=f"{KILN} is not built (make all)")


def run_kiln(args: list, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["KILN_PYTHON"] = sys.executable
    env["PYTHONPATH"] = str(ROOT / "python") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.run([str(KILN), *map(str, args)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def proved(problem, family: str, tmp_path, limit: int = 1) -> list:
    """`kiln sweep --backend cpu` of family on problem: its rows, every one "ok" on every workload."""
    r = run_kiln(["sweep", problem, "--backend", "cpu", "--family", family, "--limit", limit, "--json",
                  "--iters", "2", "--out", tmp_path / family / "src", "--ref-dir", tmp_path / "ref"])
    assert r.returncode == 0, r.stderr[-4000:]
    rows = json.loads(r.stdout)["rows"]
    assert rows, r.stderr[-2000:]
    for row in rows:
        result = row["result"]
        assert result["outcome"] == "ok", (family, row["params"], result.get("evidence"))
        assert result["summary"]["proved"] == result["summary"]["workloads"]
    return rows


@pytest.mark.parametrize("problem", sorted(GATED))
def test_gated_pair_matched_and_proved(problem, tmp_path):
    listed = run_kiln(["sweep", DATA / problem, "--backend", "cpu", "--list"], timeout=30)
    out = listed.stdout + listed.stderr
    assert f"matches family wgmma ({GATED[problem]})" in out, out
    assert "matches family cublaslt" not in out, out
    declined = run_kiln(["sweep", DATA / problem, "--backend", "cpu", "--family", "cublaslt", "--list"], timeout=30)
    assert "cublaslt: a gated pair" in declined.stdout + declined.stderr, declined.stdout + declined.stderr
    for row in proved(DATA / problem, "wgmma", tmp_path, limit=2):
        assert "acc2 +=" in Path(row["file"]).read_text()  # both projections in the one candidate


FP8 = {DATA / "scaled_mm_rowwise_bias_e4m3_bf16": "_scaled_mm_rowwise_bias_to_bfloat16",
       DATA / "scaled_mm_e4m3_deep_bf16": "_scaled_mm_to_bfloat16",
       DATA.parent / "cublaslt" / "scaled_mm_e4m3_bf16": "_scaled_mm_to_bfloat16",
       DATA.parent / "cublaslt" / "scaled_mm_e4m3_fast_bf16": "_scaled_mm_to_bfloat16"}


@pytest.mark.parametrize("problem", sorted(FP8), ids=lambda p: p.name)
def test_fp8_scaled_mm_matched_and_proved(problem, tmp_path):
    listed = run_kiln(["sweep", problem, "--backend", "cpu", "--list"], timeout=30)
    out = listed.stdout + listed.stderr
    assert f"matches family wgmma ({FP8[problem]})" in out, out
    assert ("matches family cublaslt" in out) == ("rowwise" not in problem.name), out
    for row in proved(problem, "wgmma", tmp_path):
        # fp32 sums of exact fp8 products: far inside the bfloat16 tolerance it is judged by (test_problem.c)
        assert row["result"]["workloads"][0]["rel_l2_err"] < 1e-3
        src = Path(row["file"]).read_text()
        assert "kiln_e4m3_to_float(kiln_a[" in src and "acc *= sa[" in src


def test_fp8_linear_captured_and_proved(tmp_path):
    """An fp8 linear from a script (dynamic per-tensor activation scale, fp8 weight): the captured _scaled_mm
    is one problem both GEMM families match and prove on the cpu backend."""
    run = tmp_path / "run"
    r = run_kiln(["capture", DATA / "fp8_linear.py", "--out", run, "--device", "cpu", "--quiet"], timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    found = [p for p in (run / "problems").iterdir() if p.name.startswith("scaled_mm_default")]
    assert len(found) == 1, sorted(p.name for p in (run / "problems").iterdir())
    # bench/gemm_problems.py (what bench/gemm_examples_device.sh sweeps) picks it, and nothing else of the run
    picked = subprocess.run([sys.executable, ROOT / "bench" / "gemm_problems.py", run], capture_output=True,
                            text=True, timeout=60)
    assert picked.returncode == 0 and picked.stdout.split() == [str(found[0])], picked.stdout + picked.stderr
    definition = json.loads((found[0] / "definition.json").read_text())
    assert definition["kiln"]["flops"] == 2 * 48 * 96 * 80  # a contraction: judged at bfloat16's tolerance
    for family in ("wgmma", "cublaslt"):
        proved(found[0], family, tmp_path)
