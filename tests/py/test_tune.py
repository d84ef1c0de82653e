"""Tests of `kiln tune`'s own machinery (python/kiln/tune.py) that need no library: an interrupt (Ctrl-C, or
`timeout -s INT` as bench/install_device.sh sends) still leaves a report, and one during torch.compile costs
only the compile column. The full pipeline is tested in test_install.py."""

import json
import os
import sys
import types

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

torch = pytest.importorskip("torch")

from kiln import tune  # noqa: E402

SCRIPT = os.path.join(ROOT, "tests", "data", "install", "tiny_model.py")


def _root():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Softmax(dim=-1)).eval()
    root = tune.RootCall(model)
    root.args, root.grad_mode = (torch.randn(4, 16),), "inference"
    return root


def test_interrupted_compile_keeps_eager_and_reports_it(monkeypatch):
    """A SIGINT while torch.compile runs: the forward's eager time is kept, the compile column says
    'interrupted', and nothing is raised."""
    def interrupted_compile(model, *a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(torch, "compile", interrupted_compile)
    opts = types.SimpleNamespace(rounds=1)
    out = tune.time_model(_root(), None, opts, tune.Timer(cuda=False), compile_too=True)
    assert out["eager_ms"] > 0
    assert "compile_ms" not in out and out["compile_error"].startswith("interrupted")
    md = tune.render_markdown({"script": SCRIPT, "script_args": [], "run_dir": "x", "model": out})
    row = next(line for line in md.splitlines() if line.startswith("| Sequential"))
    assert "| interrupted |" in row


def test_interrupt_still_writes_the_report(tmp_path, monkeypatch):
    """A SIGINT during the install check: exit status 130 and report.json/report.md that say so."""
    lib = tmp_path / "library"
    lib.mkdir()
    (lib / "manifest.json").write_text("{}")

    def interrupted(opts, library_dir, report):
        report["entries"] = []
        raise KeyboardInterrupt
    monkeypatch.setattr(tune, "install_check", interrupted)
    out = tmp_path / "run"
    code = tune.main([SCRIPT, "--backend", "cpu", "--out", str(out), "--library", str(lib)])
    assert code == 130
    report = json.load(open(out / "report.json"))
    assert report["error"] == "interrupted (SIGINT)"
    assert "**Stopped**: interrupted (SIGINT)" in (out / "report.md").read_text()
