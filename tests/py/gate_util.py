"""gate_util: what test_gate_cpu.py and test_gate_cuda.py share: running `kiln eval --json` on the
test kernels and checking a result against the contract of docs/gate.md.

Paths are repository-relative and every command runs with the repository root as its working
directory. The binary is build/kiln, or $KILN_BIN (absolute, or relative to the repository root).
Reference data goes under a temporary folder given with --ref-dir, so the tests never write into
tests/data/problems.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[2]
KILN = Path(os.environ.get("KILN_BIN", "build/kiln"))
if not KILN.is_absolute():
    KILN = ROOT / KILN
PROBLEMS = "tests/data/problems"

OUTCOMES = {"ok", "compile_error", "mismatch", "unwritten", "nan", "input_modified", "timeout", "crashed",
            "resource", "impossible", "slower"}

DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4,
               "int16": 2, "int8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1}

# Default tolerance per output dtype (docs/gate.md, "Tolerance").
DEFAULT_TOLERANCE = {
    "float32": {"atol": 1e-5, "rtol": 1e-4, "rel_l2": 1e-5},
    "bfloat16": {"atol": 1e-2, "rtol": 2e-2, "rel_l2": 1e-2},
    "float16": {"atol": 1e-3, "rtol": 1e-2, "rel_l2": 2e-3},
    "float64": {"atol": 1e-8, "rtol": 1e-7, "rel_l2": 1e-7},
}


def problem_tolerance(evidence_tolerance: dict) -> dict:
    """A mismatch's tolerance less what the gate added for the reference's own rounding (the
    manifest's fp64_gap): the problem's tolerance, to compare with DEFAULT_TOLERANCE."""
    tol = dict(evidence_tolerance)
    tol["atol"] -= tol.pop("atol_of_reference_rounding", 0.0)
    tol["rtol"] -= tol.pop("rtol_of_reference_rounding", 0.0)
    tol["rel_l2"] -= tol.pop("rel_l2_of_reference_rounding", 0.0)
    return tol

# One evaluation must never take longer than this (a hung gate fails the test instead of the suite).
CALL_TIMEOUT_S = 300


def kiln_env() -> dict:
    """The environment for kiln: the gate's reference helper runs under this very interpreter (the
    one with torch), with the repository's python/ package importable."""
    env = dict(os.environ)
    env["KILN_PYTHON"] = sys.executable
    env["PYTHONPATH"] = str(ROOT / "python") + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_kiln(args: list, timeout: float = CALL_TIMEOUT_S) -> subprocess.CompletedProcess:
    return subprocess.run([str(KILN), *map(str, args)], cwd=ROOT, env=kiln_env(),
                          capture_output=True, text=True, timeout=timeout)


def definition(problem: str) -> dict:
    with open(ROOT / PROBLEMS / problem / "definition.json") as f:
        return json.load(f)


def workloads(problem: str) -> list:
    """The problem's workloads, each with "all_axes": every axis (const ones too) with its value."""
    d = definition(problem)
    out = []
    with open(ROOT / PROBLEMS / problem / "workload.jsonl") as f:
        for line in f:
            if not line.strip():
                continue
            w = json.loads(line)
            axes = {}
            for name, a in d["axes"].items():
                axes[name] = a["value"] if a["type"] == "const" else w["axes"][name]
            w["all_axes"] = axes
            out.append(w)
    return out


def numel(shape: list, axes: dict) -> int:
    return math.prod(axes[a] for a in shape)


def tensor_bytes(problem: str, axes: dict) -> tuple:
    """(bytes of every tensor input read once + every output written once, bytes of scalars)."""
    d = definition(problem)
    tensors = scalars = 0
    for spec in list(d["inputs"].values()) + list(d["outputs"].values()):
        if spec["shape"] is None:
            scalars += DTYPE_BYTES[spec["dtype"]]
        else:
            tensors += numel(spec["shape"], axes) * DTYPE_BYTES[spec["dtype"]]
    return tensors, scalars


def marker_line(kernel_path: str, marker: str = "ERROR-LINE:") -> int:
    """1-based number of the line of kernel_path that carries marker."""
    with open(ROOT / kernel_path) as f:
        for number, line in enumerate(f, 1):
            if marker in line:
                return number
    raise AssertionError(f"{kernel_path} has no {marker} marker")


def evaluate(problem: str, kernel: str, backend: str, ref_root: Path, *extra,
             timeout: float = CALL_TIMEOUT_S) -> dict:
    """Runs `kiln eval PROBLEM KERNEL --backend B --json --ref-dir REF ...` and returns the parsed
    result after the checks that hold for every verdict: exit status 0, exactly one JSON object on
    stdout, the documented top-level fields. The wall time is in result["_wall_s"]."""
    args = ["eval", f"{PROBLEMS}/{problem}", kernel, "--backend", backend, "--json",
            "--ref-dir", ref_root / f"{problem}-{backend}", *extra]
    t0 = time.monotonic()
    p = run_kiln(args, timeout=timeout)
    wall_s = time.monotonic() - t0
    where = f"kiln {' '.join(map(str, args))}\n--- stderr ---\n{p.stderr[-4000:]}"
    assert p.returncode == 0, f"exit status {p.returncode}, expected 0 (a verdict)\n{where}"
    try:
        result = json.loads(p.stdout)
    except json.JSONDecodeError as e:
        raise AssertionError(f"stdout is not one JSON object ({e}):\n{p.stdout[:2000]}\n{where}")
    assert isinstance(result, dict), where
    assert result.get("kiln_eval") == 1, result
    assert result["problem"] == definition(problem)["name"], result["problem"]
    assert result["backend"] == backend, result["backend"]
    assert Path(result["kernel"]).name == Path(kernel).name, result["kernel"]
    assert result["outcome"] in OUTCOMES, result["outcome"]
    assert isinstance(result["evidence"], dict), result["evidence"]
    assert isinstance(result["workloads"], list), result["workloads"]
    assert isinstance(result["device"], dict) and result["device"].get("name"), result["device"]
    result["_wall_s"] = wall_s
    result["_stderr"] = p.stderr
    return result


def expect(result: dict, outcome: str) -> dict:
    """Asserts the outcome (showing the evidence when it differs) and returns the evidence."""
    assert result["outcome"] == outcome, (
        f"{result['kernel']}: outcome {result['outcome']!r}, expected {outcome!r}; evidence "
        f"{json.dumps(result['evidence'])[:3000]}\nstderr: {result['_stderr'][-2000:]}")
    return result["evidence"]


def check_untimed(result: dict) -> None:
    """A candidate that failed is never timed: every workload reached has null timing fields."""
    for w in result["workloads"]:
        assert w.get("time_us") is None, w
        assert w.get("gbps") is None and w.get("sol_pct") is None, w


def check_ok(result: dict, problem: str, iters: int) -> None:
    """Everything docs/gate.md promises for `ok`: every workload, in order, proved on >= 3 input
    sets (the workload's own and >= 2 fresh ones) and timed with at most iters runs (timing stops
    once the median is known to 1 %, never before the backend's minimum), every one of them
    checked; consistent speed-of-light fields; a summary that adds up."""
    expect(result, "ok")
    assert result["evidence"] == {}, result["evidence"]
    assert isinstance(result.get("compile_s"), (int, float)) and result["compile_s"] >= 0
    wls = workloads(problem)
    got = result["workloads"]
    assert len(got) == len(wls), f"{len(got)} workloads reported, the problem has {len(wls)}"
    for i, (w, g) in enumerate(zip(wls, got)):
        label = f"workload {i} {w['all_axes']}"
        assert g["index"] == i, (label, g)
        assert g["uuid"] == w["uuid"], (label, g["uuid"])
        assert g["axes"] == w["all_axes"], (label, g["axes"])
        assert g["proved_sets"] >= 3, (label, g["proved_sets"])
        tensors, scalars = tensor_bytes(problem, w["all_axes"])
        assert g["min_bytes"] in (tensors, tensors + scalars), (label, g["min_bytes"], tensors)
        t = g["time_us"]
        assert t is not None, label
        assert t["median"] > 0, (label, t)
        assert 0 < t["min"] <= t["median"] <= t["max"], (label, t)
        assert min(iters, 5) <= t["n"] <= iters, (label, t)
        if "retimed" in t:  # a noisy first timing (docs/gate.md): both timings' runs were checked
            assert t["retimed"]["first_spread_pct"] > 5 and g["runs_checked"] > t["n"], (label, g)
        else:
            assert g["runs_checked"] == t["n"], (label, g)
        assert t["spread_pct"] >= 0, (label, t)
        assert g["gbps"] > 0, (label, g)
        # achieved GB/s = bytes / T
        achieved_gbps = g["min_bytes"] / (t["median"] * 1e3)
        assert math.isclose(g["gbps"], achieved_gbps, rel_tol=0.02), (label, g)
        assert g["sol_time_us"] > 0, (label, g)
        assert math.isclose(g["sol_pct"], 100.0 * g["sol_time_us"] / t["median"], rel_tol=0.02), (
            label, g)
        if g.get("sol_score") is not None:
            assert 0 < g["sol_score"] <= 1, (label, g)
    s = result["summary"]
    assert s["workloads"] == s["proved"] == s["timed"] == len(wls), s
    assert s["time_us_geomean"] > 0, s


def one_line_error(p: subprocess.CompletedProcess) -> str:
    """Asserts `kiln eval` could not give a verdict: exit status 2 and exactly one non-empty line on
    stderr, which it returns."""
    assert p.returncode == 2, (f"exit status {p.returncode}, expected 2\n"
                              f"stdout: {p.stdout[:1000]}\nstderr: {p.stderr[:2000]}")
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{p.stderr[:2000]}"
    return lines[0]


def log_names_line(log: str, line: int) -> bool:
    """Whether a compiler log points at line (gcc/clang: FILE:LINE:COL; NVRTC: FILE(LINE))."""
    return re.search(rf"(:{line}:|\({line}\))", log) is not None


def gpu_present() -> Optional[str]:
    """None when a CUDA GPU is usable here, else why not (for skip messages)."""
    import shutil
    if shutil.which("nvidia-smi") is None:
        return "nvidia-smi not found"
    try:
        ok = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"nvidia-smi failed: {e}"
    if ok.returncode != 0 or "GPU" not in ok.stdout:
        return "nvidia-smi lists no GPU"
    try:
        import torch
    except ImportError:
        return "torch is not importable"
    if not torch.cuda.is_available():
        return "torch.cuda unavailable"
    return None


def summary_line(result: dict) -> str:
    """One line per workload for the test log: axes, median time, GB/s, % of speed of light."""
    parts = []
    for w in result["workloads"]:
        t = w.get("time_us") or {}
        parts.append(f"{w['axes']}: median {t.get('median', float('nan')):.2f} us, "
                     f"{w.get('gbps') or 0:.1f} GB/s, SOL {w.get('sol_pct') or 0:.1f}%")
    return f"{Path(result['kernel']).name} on {result['problem']}: " + "; ".join(parts)
