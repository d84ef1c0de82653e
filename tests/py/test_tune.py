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


def test_report_has_the_kiln_compile_column():
    """The "kiln + torch.compile" column: its time, speedup and max diff when measured; "off" without
    --compile; "failed" or "interrupted" with the reason below the table; "-" when nothing was installed."""
    base = {"root": "M", "grad_mode": "inference", "rounds": 1, "iterations": 10, "eager_ms": 2.0, "kiln_ms": 1.9}

    def cells(model):
        md = tune.render_markdown({"script": SCRIPT, "script_args": [], "run_dir": "x", "model": model})
        lines = md.splitlines()
        header = next(line for line in lines if line.startswith("| model"))
        row = next(line for line in lines if line.startswith("| M |"))
        names = [c.strip() for c in header.strip("|").split("|")]
        return dict(zip(names, [c.strip() for c in row.strip("|").split("|")])), md

    measured = dict(base, compile_ms=1.0, compile_speedup=2.0, kiln_compile_ms=0.8, kiln_compile_speedup=2.5,
                    kiln_compile_vs_compile=1.25, kiln_compile_max_abs_diff=1e-6, kiln_compile_hits_per_forward=3)
    row, md = cells(measured)
    assert row["kiln + torch.compile ms"] == "0.800" and row["kiln + compile speedup"] == "2.50x"
    assert row["max diff kiln + compile"] == "1e-06"
    assert "3 kernel calls per compiled forward, 1.25x against torch.compile alone" in md
    assert cells(base)[0]["kiln + torch.compile ms"] == "off"
    row, md = cells(dict(base, compile_ms=1.0, kiln_compile_error="RuntimeError: no"))
    assert row["kiln + torch.compile ms"] == "failed" and "kiln + torch.compile failed: RuntimeError: no" in md
    row, _ = cells(dict(base, compile_ms=1.0, kiln_compile_error="interrupted (SIGINT) before torch.compile finished"))
    assert row["kiln + torch.compile ms"] == "interrupted"
    row, md = cells(dict(base, compile_ms=1.0, kiln_compile_note="nothing installed: kiln + torch.compile is "
                         "torch.compile"))
    assert row["kiln + torch.compile ms"] == "-" and "nothing installed" in md


def test_dropping_marks_the_kiln_compile_column_for_a_new_timing(monkeypatch, tmp_path):
    """kiln + torch.compile was timed with the entries of the first timing: after a drop it is not carried
    over, and install_check is told to time it again with the entries kept."""
    lib = types.SimpleNamespace(path=str(tmp_path), manifest_digest=lambda: "d")
    monkeypatch.setattr(tune, "time_model", lambda *a: {"eager_ms": 5.0, "kiln_ms": 4.5,
                                                        "entry_hits_per_forward": {"b": 4}})
    report = {"model": {"eager_ms": 5.0, "kiln_ms": 5.1, "compile_ms": 3.0, "kiln_compile_ms": 2.5,
                        "entry_hits_per_forward": {"a": 1, "b": 4}}}
    entries = [{"name": "a", "installed": True, "op_eager_us": 50.0, "op_kiln_us": 40.0},
               {"name": "b", "installed": True, "op_eager_us": 80.0, "op_kiln_us": 60.0}]
    decisions = {"a": {"install": True, "reason": "won"}, "b": {"install": True, "reason": "won"}}
    tune._drop_until_faster(None, lib, None, None, report, decisions, entries)
    assert "kiln_compile_ms" not in report["model"] and report["model_kiln_compile_stale"] is True
    assert report["model"]["compile_ms"] == 3.0
