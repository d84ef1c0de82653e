"""The pool and eltwise families end to end on the cpu backend: `kiln sweep` on every problem under
tests/data/families/{pool,eltwise}/ must emit candidates and every one must be proved "ok" by the gate
against the PyTorch reference (odd sizes, every dtype, channels-last layouts, broadcasting, casts,
adaptive windows, captured modules and hand-written chains).

The CPU emission of both families ignores the GPU parameters, so sweep's dedupe leaves one source per
problem whatever --limit is; the limit is only there to make sure that a sparse sample of the space
contains a point valid for every variant (an adaptive pool has only window points).
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
DATA = ROOT / "tests" / "data" / "families"
FAMILIES = ("pool", "eltwise")
LIMIT = 64
TIMEOUT_S = 120

pytestmark = pytest.mark.skipif(not KILN.exists(), reason=f"{KILN} is not built (make all)")


def problems(family: str) -> list:
    base = DATA / family
    return sorted(p.name for p in base.iterdir() if (p / "definition.json").exists())


def kiln_env() -> dict:
    env = dict(os.environ)
    env["KILN_PYTHON"] = sys.executable
    env["PYTHONPATH"] = str(ROOT / "python") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_kiln(args: list, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    return subprocess.run([str(KILN), *map(str, args)], cwd=ROOT, env=kiln_env(), capture_output=True,
                          text=True, timeout=timeout)


CASES = [(f, p) for f in FAMILIES for p in problems(f)]


def test_problem_sets_present():
    for f in FAMILIES:
        assert len(problems(f)) >= 5, f"tests/data/families/{f} lost its problems"


@pytest.mark.parametrize("family,problem", CASES, ids=[f"{f}/{p}" for f, p in CASES])
def test_sweep_cpu_all_ok(family, problem, tmp_path):
    r = run_kiln(["sweep", DATA / family / problem, "--backend", "cpu", "--family", family, "--limit", LIMIT,
                  "--json", "--iters", "2", "--out", tmp_path / "src", "--ref-dir", tmp_path / "ref"])
    assert r.returncode == 0, r.stderr[-4000:]
    rows = json.loads(r.stdout)["rows"]
    assert rows, f"no candidate emitted:\n{r.stderr[-2000:]}"
    for row in rows:
        result = row["result"]
        assert row["family"] == family
        assert result["outcome"] == "ok", (row["params"], result.get("evidence"))
        assert result["summary"]["proved"] == result["summary"]["workloads"]
        for w in result["workloads"]:
            assert w["proved_sets"] >= 2
            assert w["min_bytes"] > 0


@pytest.mark.parametrize("family,problem", CASES, ids=[f"{f}/{p}" for f, p in CASES])
def test_only_own_family_matches(family, problem):
    """A pooling problem is not a pointwise chain, and a chain is not a pooling."""
    other = "eltwise" if family == "pool" else "pool"
    r = run_kiln(["sweep", DATA / family / problem, "--backend", "cpu", "--list"], timeout=30)
    assert r.returncode == 0, r.stderr
    assert f"matches family {family} " in r.stdout
    assert f"matches family {other} " not in r.stdout
