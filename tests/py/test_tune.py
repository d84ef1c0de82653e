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


def test_entries_are_dropped_until_the_model_is_faster(monkeypatch, tmp_path):
    """Two entries that each won per call, but the model forward was slower with both: the one that saves
    the least per forward is dropped first, install.json says why, the model is timed again, and the loop
    stops as soon as kiln is faster (the compile figures of the first timing are kept)."""
    lib = types.SimpleNamespace(path=str(tmp_path), manifest_digest=lambda: "d")
    timings = iter([{"eager_ms": 5.0, "kiln_ms": 5.2, "entry_hits_per_forward": {"b": 4}}])

    def time_model(root, lib_, opts, timer, compile_too):
        assert compile_too is False
        return next(timings)
    monkeypatch.setattr(tune, "time_model", time_model)
    report = {"model": {"eager_ms": 5.0, "kiln_ms": 5.6, "compile_ms": 3.0,
                        "entry_hits_per_forward": {"a": 1, "b": 4}}}
    entries = [{"name": "a", "installed": True, "op_eager_us": 50.0, "op_kiln_us": 40.0},
               {"name": "b", "installed": True, "op_eager_us": 80.0, "op_kiln_us": 60.0}]
    decisions = {"a": {"install": True, "reason": "won"}, "b": {"install": True, "reason": "won"}}
    tune._drop_until_faster(None, lib, None, None, report, decisions, entries)
    # a saved 10 us x 1 hit, b 20 us x 4: a goes; then 5.2 ms is still not below 5.0 ms: b goes too
    assert [e["installed"] for e in entries] == [False, False]
    assert entries[0]["reason"].startswith("dropped: the model forward was not faster")
    assert [d["entry"] for d in report["model_dropped"]] == ["a", "b"]
    saved = json.loads((tmp_path / "install.json").read_text())
    assert saved["entries"]["a"]["install"] is False and saved["entries"]["b"]["install"] is False
    # nothing left installed: the forward is eager's, not timed again
    assert report["model"]["kiln_ms"] == 5.0 and "nothing installed" in report["model"]["kiln_note"]


def test_dropping_stops_once_the_model_is_faster(monkeypatch, tmp_path):
    lib = types.SimpleNamespace(path=str(tmp_path), manifest_digest=lambda: "d")
    monkeypatch.setattr(tune, "time_model", lambda *a: {"eager_ms": 5.0, "kiln_ms": 4.5,
                                                        "entry_hits_per_forward": {"b": 4}})
    report = {"model": {"eager_ms": 5.0, "kiln_ms": 5.1, "compile_ms": 3.0,
                        "entry_hits_per_forward": {"a": 1, "b": 4}}}
    entries = [{"name": "a", "installed": True, "op_eager_us": 50.0, "op_kiln_us": 40.0},
               {"name": "b", "installed": True, "op_eager_us": 80.0, "op_kiln_us": 60.0}]
    decisions = {"a": {"install": True, "reason": "won"}, "b": {"install": True, "reason": "won"}}
    tune._drop_until_faster(None, lib, None, None, report, decisions, entries)
    assert [e["installed"] for e in entries] == [False, True]
    assert report["model"]["kiln_ms"] == 4.5 and report["model"]["compile_ms"] == 3.0
