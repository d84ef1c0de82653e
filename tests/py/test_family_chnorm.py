"""test_family_chnorm: kiln's groupnorm and batchnorm families end to end on the cpu backend.

`kiln sweep PROBLEM --backend cpu --family F --limit 3` runs on every problem under
tests/data/families/chnorm (captured-style aten calls, kiln chains, a leaf module, hand-written
problems without a "kiln" object; fp32, bf16 and fp16; NCHW and channels-last; rows of 1 to 16388
elements): the family must recognise the problem as the expected variant, and every candidate it
emits must be proved "ok" by the gate against PyTorch. The problems are small so that the file runs
in well under a minute and a half on two cores. Generated sources and reference data go to a
temporary directory, never into tests/data.
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
DATA = ROOT / "tests" / "data" / "families" / "chnorm"

# problem -> (family, variant the matcher must report)
EXPECTED = {
    "gn_native_f32": ("groupnorm", "group_norm_stats"),
    "gn_mixed_bf16": ("groupnorm", "group_norm"),
    "gn_silu_f32": ("groupnorm", "group_norm_silu"),
    "gn_silu_bf16": ("groupnorm", "group_norm_silu"),
    "gn_module_cast_bf16": ("groupnorm", "group_norm"),
    "gn_handwritten_f16": ("groupnorm", "group_norm_silu"),
    "gn_add_silu_bf16": ("groupnorm", "add_group_norm_silu"),
    "bn_f32_nchw": ("batchnorm", "batch_norm"),
    "bn_relu_bf16_cl": ("batchnorm", "batch_norm_relu_channels_last"),
    "bn_add_relu_f32": ("batchnorm", "batch_norm_add_relu"),
    "bn_legit_f16_cl_stats": ("batchnorm", "batch_norm_channels_last_stats"),
    "bn_handwritten_1d": ("batchnorm", "batch_norm_relu"),
}


def kiln_env() -> dict:
    env = dict(os.environ)
    env["KILN_PYTHON"] = sys.executable
    env["PYTHONPATH"] = str(ROOT / "python") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def need_kiln() -> None:
    if not KILN.exists():
        pytest.skip(f"{KILN} is missing (run `make all` first)")


def test_every_problem_is_listed():
    """A problem directory added without an expectation would go untested."""
    found = sorted(p.name for p in DATA.iterdir() if (p / "definition.json").exists())
    assert found == sorted(EXPECTED)


@pytest.mark.parametrize("problem", sorted(EXPECTED))
def test_sweep_cpu(problem: str, tmp_path: Path):
    need_kiln()
    family, variant = EXPECTED[problem]
    cmd = [str(KILN), "sweep", str(DATA / problem), "--backend", "cpu", "--family", family,
           "--limit", "3", "--json", "--iters", "2", "--out", str(tmp_path / "src"),
           "--ref-dir", str(tmp_path / "ref")]
    r = subprocess.run(cmd, cwd=ROOT, env=kiln_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"kiln sweep failed ({r.returncode}):\n{r.stderr[-4000:]}"
    m = re.search(rf"matches family {family} \(([a-z_]+)\)", r.stderr)
    assert m, r.stderr[-2000:]
    assert m.group(1) == variant
    rows = json.loads(r.stdout)["rows"]
    assert rows, f"no candidate was emitted:\n{r.stderr[-2000:]}"
    for row in rows:
        result = row["result"]
        assert result["outcome"] == "ok", (row["params"], json.dumps(result.get("evidence"))[:2000])
        assert result["summary"]["proved"] == len(result["workloads"])
