"""The cublaslt family end to end on the cpu backend: `kiln sweep --family cublaslt` on every problem
under tests/data/families/cublaslt/ (linear with and without bias, mm with either operand captured
transposed, bmm, batched matmul, addmm, and GEMM + epilogue chains: a bias add, ReLU, GELU, an erf GELU
cast to float32) emits the family's plain C GEMM with cuBLASLt's epilogue, which the gate must prove
"ok" against the PyTorch reference; the problems under declined/ match no family. The cpu candidate
ignores the configuration index, so sweep's dedupe leaves one source per problem. On cuda the same
problems become `// kiln: library cublaslt` candidates (docs/gemm.md), which need a GPU.
Reference data and generated sources go to a temporary directory, never into tests/data.
"""

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
DATA = ROOT / "tests" / "data" / "families" / "cublaslt"
TIMEOUT_S = 120

pytestmark = pytest.mark.skipif(not KILN.exists(), reason=f"{KILN} is not built (make all)")


def problems(base: Path) -> list:
    return sorted(p.name for p in base.iterdir() if (p / "definition.json").exists())


def run_kiln(args: list, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["KILN_PYTHON"] = sys.executable
    env["PYTHONPATH"] = str(ROOT / "python") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.run([str(KILN), *map(str, args)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_problem_set_present():
    assert len(problems(DATA)) >= 11, "tests/data/families/cublaslt lost its problems"
    assert len(problems(DATA / "declined")) >= 6


@pytest.mark.parametrize("problem", problems(DATA))
def test_sweep_cpu_proves(problem, tmp_path):
    r = run_kiln(["sweep", DATA / problem, "--backend", "cpu", "--family", "cublaslt", "--limit", 4, "--json",
                  "--iters", "2", "--out", tmp_path / "src", "--ref-dir", tmp_path / "ref"])
    assert r.returncode == 0, r.stderr[-4000:]
    rows = json.loads(r.stdout)["rows"]
    assert rows, f"no candidate emitted:\n{r.stderr[-2000:]}"
    for row in rows:
        result = row["result"]
        assert row["family"] == "cublaslt"
        assert result["outcome"] == "ok", (row["params"], result.get("evidence"))
        assert result["summary"]["proved"] == result["summary"]["workloads"]
        for w in result["workloads"]:
            assert w["proved_sets"] >= 2
            assert w["min_bytes"] > 0


@pytest.mark.parametrize("problem", problems(DATA / "declined"))
def test_declined(problem):
    r = run_kiln(["sweep", DATA / "declined" / problem, "--backend", "cpu", "--list"], timeout=30)
    assert "matches family cublaslt" not in r.stdout
    assert "cublaslt: " in r.stdout + r.stderr

