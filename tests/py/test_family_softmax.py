"""test_family_softmax: kiln's softmax family end to end on the cpu backend.

`kiln sweep PROBLEM --backend cpu --family softmax --json --iters 2` runs on every problem under
tests/data/families/softmax (captured aten calls, one stored in memory order, a leaf module, kiln
chains, hand-written problems without a "kiln" object; float32, bfloat16 and float16 in and out;
scales, additive masks with -inf entries and fully masked rows; rows of 1 to 24576 elements): the
family must recognise each problem as the expected variant, and the gate must prove its candidate
"ok" against PyTorch on every workload and input set.

The cpu emission ignores the GPU geometry, so every point of a problem gives the same source and
sweep runs it once, whatever --limit is: the test asserts exactly one candidate. The limit (40, not
3) only bounds how many points are checked and emitted; 3 evenly spread points can all be invalid for
a problem of long rows. Problems are small, so the file runs in about a minute on two cores.
Generated sources and reference data go to a temporary directory, never into tests/data.
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
DATA = ROOT / "tests" / "data" / "families" / "softmax"
LIMIT = 40

# problem -> the variant the matcher must report
EXPECTED = {
    "f32_odd": "softmax",
    "f32_many_rows": "softmax",
    "f32_long_rows": "softmax",
    "aten_memory_order": "softmax",
    "module_cast_softmax": "softmax",
    "bf16_chain": "softmax",
    "bf16_softmax_then_f32": "softmax_cast",
    "f16_to_f32": "softmax_cast",
    "f32_chain_const_scale": "softmax_scale_mask",
    "bf16_scale_mask_f32": "softmax_scale_mask_cast",
    "f16_scale_mask": "softmax_scale_mask",
    "f32_masked_rows": "softmax_mask",
}


def kiln_env() -> dict:
    env = dict(os.environ)
    env["KILN_PYTHON"] = sys.executable
    env["PYTHONPATH"] = str(ROOT / "python") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def need_kiln() -> None:
    if not KILN.exists():
        pytest.skip(f"{KILN} is missing (run `make all` first)")


def sweep(problem: str, tmp_path: Path) -> tuple:
    cmd = [str(KILN), "sweep", str(DATA / problem), "--backend", "cpu", "--family", "softmax",
           "--limit", str(LIMIT), "--json", "--iters", "2", "--out", str(tmp_path / "src"),
           "--ref-dir", str(tmp_path / "ref")]
    r = subprocess.run(cmd, cwd=ROOT, env=kiln_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"kiln sweep failed ({r.returncode}):\n{r.stderr[-4000:]}"
    return r, json.loads(r.stdout)["rows"]


def test_every_problem_is_listed():
    """A problem directory added without an expectation would go untested."""
    found = sorted(p.name for p in DATA.iterdir() if (p / "definition.json").exists())
    assert found == sorted(EXPECTED)


@pytest.mark.parametrize("problem", sorted(EXPECTED))
def test_sweep_cpu(problem: str, tmp_path: Path):
    need_kiln()
    r, rows = sweep(problem, tmp_path)
    m = re.search(r"matches family softmax \(([a-z_]+)\)", r.stderr)
    assert m, r.stderr[-2000:]
    assert m.group(1) == EXPECTED[problem]
    assert len(rows) == 1, f"{len(rows)} candidates; the cpu source should not depend on the point"
    result = rows[0]["result"]
    assert result["outcome"] == "ok", (rows[0]["params"], json.dumps(result.get("evidence"))[:2000])
    assert result["summary"]["proved"] == len(result["workloads"]) > 0
    assert all(w["proved_sets"] >= 2 for w in result["workloads"])
    # the source is the family's C template with the problem's facts
    src = Path(rows[0]["file"]).read_text()
    assert "family softmax" in src and "smx_softmax(" in src
    # the one row is the family's start point, run first (its rule holds rows on chip)
    assert "the family's start point first" in r.stderr, r.stderr[-2000:]
    params = dict(kv.split("=") for kv in rows[0]["params"].split() if "=" in kv)
    assert params["SMX_CACHE"] in ("1", "2") and params["SMX_UNROLL"] == "1", params


def test_masked_row_is_nan(tmp_path: Path):
    """A fully masked row is NaN in PyTorch; the gate accepts NaN only where the reference has it,
    so an "ok" here means the kernel reproduces the NaN row and nothing else."""
    need_kiln()
    r, rows = sweep("bf16_scale_mask_f32", tmp_path)
    assert rows and rows[0]["result"]["outcome"] == "ok"
    from safetensors.torch import load_file  # the reference data holds the expected outputs
    ref_files = sorted((tmp_path / "ref").rglob("*.safetensors"))
    assert ref_files, "no reference data was written"
    nan_rows = 0
    for f in ref_files:
        y = load_file(str(f))["output.y"]
        nan_rows += int(y.isnan().all(dim=-1).sum())
        assert int(y.isnan().any(dim=-1).sum()) == int(y.isnan().all(dim=-1).sum())  # NaN rows only
    assert nan_rows > 0, "the problem is meant to have fully masked rows"


def test_bench_rows_match():
    """The GPU rows of this family (bench/problems/softmax_*) must be recognised; they are too big to
    prove here, so only the matcher runs (`--list`)."""
    need_kiln()
    bench = sorted((ROOT / "bench" / "problems").glob("softmax_*"))
    assert len(bench) >= 5
    for d in bench:
        r = subprocess.run([str(KILN), "sweep", str(d), "--family", "softmax", "--list"], cwd=ROOT,
                           env=kiln_env(), capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"{d.name}: {r.stderr[-2000:]}"
        m = re.search(r"matches family softmax \(([a-z_]+)\), space (\d+) points", r.stdout)
        assert m, f"{d.name}: {r.stdout[-1000:]}"
        assert int(m.group(2)) > 0
        # --list names where a search starts: the start rule's point, never a warp per row of 64
        start = re.search(r"; starts at (.*) \(the family's start rule\)", r.stdout)
        assert start, f"{d.name}: {r.stdout[-1000:]}"
        params = dict(kv.split("=") for kv in start.group(1).split())
        assert int(params["SMX_THREADS"]) >= 128 and params["SMX_CACHE"] == "1", (d.name, params)


def test_sweep_random_sample_streamed_rows_and_resume(tmp_path: Path):
    """--sample random --seed: a reproducible uniform draw; --jsonl: each row as one line when measured;
    --resume: a second run keeps the rows the file has and evaluates nothing again."""
    need_kiln()
    problem = DATA / "f32_odd"

    def run(*extra):
        cmd = [str(KILN), "sweep", str(problem), "--backend", "cpu", "--iters", "2", "--json",
               "--out", str(tmp_path / "src"), "--ref-dir", str(tmp_path / "ref"), *map(str, extra)]
        r = subprocess.run(cmd, cwd=ROOT, env=kiln_env(), capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        return r, json.loads(r.stdout)["rows"]

    r1, a = run("--limit", 5, "--sample", "random", "--seed", 1)
    assert "running 5 drawn at random" in r1.stderr
    _, b = run("--limit", 5, "--sample", "random", "--seed", 1)
    _, c = run("--limit", 5, "--sample", "random", "--seed", 2)
    assert [x["params"] for x in a] == [x["params"] for x in b]  # the same seed, the same draw
    assert [x["params"] for x in a] != [x["params"] for x in c]

    rows = tmp_path / "rows.jsonl"
    _, first = run("--limit", 3, "--jsonl", rows)
    lines = [json.loads(x) for x in rows.read_text().splitlines()]
    assert [x["params"] for x in lines] == [x["params"] for x in first]
    assert all(x["result"]["outcome"] == "ok" for x in lines)
    r2, again = run("--limit", 3, "--jsonl", rows, "--resume")
    assert r2.stderr.count("(kept from") == len(first) > 0
    assert [x["result"] for x in again] == [x["result"] for x in first]
    assert len(rows.read_text().splitlines()) == len(lines)  # nothing appended
    r3 = subprocess.run([str(KILN), "sweep", str(problem), "--resume"], cwd=ROOT, env=kiln_env(),
                        capture_output=True, text=True, timeout=60)
    assert r3.returncode == 2 and "--jsonl" in r3.stderr
