"""The wgmma family's gated pairs on the cpu backend: the front of a GeGLU or SwiGLU MLP, act(x @ wgᵀ) *
(x @ wuᵀ) (tests/data/families/wgmma: GELU-tanh in bfloat16 with the activation between the linears, SiLU in
float16 with both linears first and the product reading the up projection first), matched by the wgmma family
only — the cublaslt family declines it with its reason, cuBLASLt's epilogues reading one accumulator — and its
cpu candidate (both GEMMs, the activation and the product on the fp32 accumulators, one rounding) proved by the
gate against the PyTorch reference. On the GPU the same problems run kiln's sm_90a kernel (bench/wgmma_device.sh).
Reference data and sources go to a temporary directory."""

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
GATED = {"gated_gelu_bf16": "linear_gated_gelu", "gated_silu_f16": "linear_gated_silu"}

pytestmark = pytest.mark.skipif(not KILN.exists(), reason=f"{KILN} is not built (make all)")


def run_kiln(args: list, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["KILN_PYTHON"] = sys.executable
    env["PYTHONPATH"] = str(ROOT / "python") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.run([str(KILN), *map(str, args)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("problem", sorted(GATED))
def test_gated_pair_matched_and_proved(problem, tmp_path):
    listed = run_kiln(["sweep", DATA / problem, "--backend", "cpu", "--list"], timeout=30)
    out = listed.stdout + listed.stderr
    assert f"matches family wgmma ({GATED[problem]})" in out, out
    assert "matches family cublaslt" not in out, out
    declined = run_kiln(["sweep", DATA / problem, "--backend", "cpu", "--family", "cublaslt", "--list"], timeout=30)
    assert "cublaslt: a gated pair" in declined.stdout + declined.stderr, declined.stdout + declined.stderr
    r = run_kiln(["sweep", DATA / problem, "--backend", "cpu", "--family", "wgmma", "--limit", 2, "--json",
                  "--iters", "2", "--out", tmp_path / "src", "--ref-dir", tmp_path / "ref"])
    assert r.returncode == 0, r.stderr[-4000:]
    rows = json.loads(r.stdout)["rows"]
    assert rows, r.stderr[-2000:]
    for row in rows:
        result = row["result"]
        assert result["outcome"] == "ok", (row["params"], result.get("evidence"))
        assert result["summary"]["proved"] == result["summary"]["workloads"]
        src = Path(row["file"]).read_text()
        assert "acc2 +=" in src  # both projections in the one candidate
