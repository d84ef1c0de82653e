"""Tests of `kiln capture` at any size and of a run's problems as their content (docs/capture.md, "Bytes"
and "A problem is its content"), on the CPU: a script whose tensors exceed --max-bytes keeps every op (its
big tensors become `random` inputs with their statistics, structure and a real slice, and the gate proves a
kernel on the reference data drawn from them); a script that loads a checkpoint captures in bounded
memory; capture refuses a run another kiln process holds; a re-capture whose problem changed under the same
name gets a new name, one whose content is the same keeps its name."""

import json
import os
import resource
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors.torch")

from kiln.capture import main as capture_main  # noqa: E402


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("KILN_PYTHON", sys.executable)
    return env


def _problems(run_dir) -> dict:
    """{name: definition} of RUN/problems."""
    root = os.path.join(run_dir, "problems")
    out = {}
    for name in sorted(os.listdir(root)):
        with open(os.path.join(root, name, "definition.json")) as f:
            out[name] = json.load(f)
    return out


# ---------------------------------------------------------------------------------------------------
# A script that loads its weights from files.

LOAD_SCRIPT = textwrap.dedent("""
    import sys, torch, safetensors.torch
    pt, st = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    made = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
    torch.save(made.state_dict(), pt)                       # 1.5 MB of weights
    safetensors.torch.save_file({"bias": torch.randn(256)}, st)
    m = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
    m.load_state_dict(torch.load(pt))
    extra = safetensors.torch.load_file(st)["bias"]
    with torch.inference_mode():
        for _ in range(2):
            y = m(torch.randn(32, 512)) + extra
    print("loaded and ran")
""")
LOAD_RSS_LIMIT = 1536 << 20  # about twice what the capture needs; the defect needed 5 GB for 1 MB
LOAD_AS_GUARD = 8 << 30      # the address-space limit that keeps a regression from taking the machine


def test_script_that_loads_checkpoints_captures_in_bounded_memory(tmp_path):
    """torch.load and safetensors call set_ with a storage for every tensor: capture keys such calls by
    the storage's size, never by its str() (which renders every byte and, under the profiler, records
    an op per byte). Peak memory stays bounded and every op of the model is captured."""
    script = tmp_path / "load.py"
    script.write_text(LOAD_SCRIPT)
    out = tmp_path / "run"
    log = open(tmp_path / "log", "w+")

    def guard():
        resource.setrlimit(resource.RLIMIT_AS, (LOAD_AS_GUARD, LOAD_AS_GUARD))

    proc = subprocess.Popen([sys.executable, "-m", "kiln.capture", str(script), "--out", str(out), "--device",
                             "cpu", "--no-reference", "--", str(tmp_path / "w.pt"), str(tmp_path / "w.st")],
                            cwd=ROOT, env=_env(), stdout=log, stderr=subprocess.STDOUT, preexec_fn=guard)
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        proc.returncode = proc.returncode if proc.returncode is not None else 0
    log.seek(0)
    text = log.read()
    assert os.waitstatus_to_exitcode(status) == 0, text[-3000:]
    assert "loaded and ran" in text
    peak = usage.ru_maxrss * 1024
    assert peak < LOAD_RSS_LIMIT, f"capture peaked at {peak >> 20} MiB"
    with open(out / "capture.json") as f:
        info = json.load(f)
    assert "profile_error" not in info and not info["internal_errors"]
    ops = {p["aten"] for p in info["problems"] if p["kind"] == "aten"}
    assert {"aten::linear.default", "aten::relu.default"} <= ops, ops
