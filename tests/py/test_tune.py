"""Tests of `kiln tune` (python/kiln/tune.py, tune_report.py): its own machinery, and the whole command on the
cpu backend within a time budget.

- a tiny --time: tune ends within it, exit 0, with the report's four forward columns;
- SIGINT to the tune process mid-search: the search stops, the best found so far is installed (install.json)
  and the report is written, exit 0;
- nothing to optimise (no family matches any hot op): the report has the eager and torch.compile times and,
  per hot op, why it was not optimised, exit 0;
- bad options fail before capture starts (no run directory is made);
- a failed tune keeps the previous good report (its own goes to report.failed.*);
- an interrupt (Ctrl-C, or `timeout -s INT`) during the install check still leaves a report, and one during
  torch.compile costs only the compile column;
- the speedup rule of the Python side holds to the C one's cases; a noisy baseline is flagged, not divided by.

The library's own install machinery is tested in test_install.py."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import types

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

torch = pytest.importorskip("torch")

from kiln import tune, tune_report  # noqa: E402
from kiln.install_cost import speedup_judge, speedup_text  # noqa: E402

SCRIPT = os.path.join(ROOT, "tests", "data", "install", "tiny_model.py")
CONV_ONLY = os.path.join(ROOT, "tests", "data", "tune", "conv_only.py")
KILN = os.path.join(ROOT, "build", "kiln")
FOUR_COLUMNS = "| eager ms | kiln ms | torch.compile ms | kiln + torch.compile ms |"


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("KILN_PYTHON", sys.executable)
    return env


def _tune(args, timeout=600):
    return subprocess.run([KILN, "tune", *args], cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module", autouse=True)
def _built():
    if not os.path.exists(KILN):
        pytest.fail("build/kiln is missing: run `make` first")


# ---------------------------------------------------------------------------------------------------
# The whole command.


def test_tiny_time_ends_within_it_and_reports(tmp_path):
    """--time 60 on the tiny model: the whole tune (capture, search, install check, report) ends within it,
    exits 0, and the report has the four forward columns and says how the time went."""
    run = tmp_path / "run"
    t0 = time.monotonic()
    p = _tune([SCRIPT, "--out", str(run), "--backend", "cpu", "--time", "60", "--rounds", "2"], timeout=300)
    wall = time.monotonic() - t0
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert wall <= 60 + 0.5, wall  # the clock starts at the `kiln` command, Python's start-up included
    report = json.load(open(run / "report.json"))
    assert report["ok"] is True and report["elapsed_s"] <= 60
    assert report["search"]["planned_s"] > 0 and report["search"]["planned_s"] + report["search"]["reserve_s"] <= 60
    md = (run / "report.md").read_text()
    assert FOUR_COLUMNS in md and "## Time" in md and "Budget 60 s (--time)" in md
    assert report["model"]["eager_ms"] > 0
    assert "kiln optimize: plan: " in p.stdout + p.stderr  # announced before the search
    # every hot op says what became of it
    assert report["hot_ops"] and all(r["status"] and r["why"] for r in report["hot_ops"])


def test_sigint_mid_search_installs_the_best_so_far(tmp_path):
    """SIGINT to the tune process (not its group) once the search has a result: the search stops, tune
    installs the best found so far (install.json for the library optimize wrote) and reports, exit 0."""
    run = tmp_path / "run"
    proc = subprocess.Popen([KILN, "tune", SCRIPT, "--out", str(run), "--backend", "cpu", "--time", "300",
                             "--rounds", "1"], cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if sqlite3.connect(str(run / "kiln.db")).execute("SELECT COUNT(*) FROM result").fetchone()[0]:
                    break
            except sqlite3.Error:
                pass
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    report = json.load(open(run / "report.json"))
    if report["search"].get("stopped") == "done":
        pytest.skip("the search was over before the signal arrived")
    assert proc.returncode == 0, out[-3000:] + err[-3000:]
    assert report["search"]["stopped"] == "interrupted" and report["ok"] is True
    assert "installing the best found so far" in out + err
    decisions = json.load(open(run / "library" / "install.json"))
    manifest = json.load(open(run / "library" / "manifest.json"))
    assert set(decisions["entries"]) == {e["problem"] for e in manifest["entries"]}
    assert FOUR_COLUMNS in (run / "report.md").read_text()


def test_nothing_to_optimise_still_reports(tmp_path):
    """Two convolutions: no family matches. The report has the eager and torch.compile times and, per hot
    op, why kiln did not optimise it; exit 0."""
    run = tmp_path / "run"
    p = _tune([CONV_ONLY, "--out", str(run), "--backend", "cpu", "--time", "240", "--rounds", "2", "--compile"])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    report = json.load(open(run / "report.json"))
    assert report["search"]["stopped"] == "nothing to optimise"
    m = report["model"]
    assert m["root"] == "TwoConv" and m["eager_ms"] > 0
    assert m.get("compile_ms", 0) > 0 or m.get("compile_error"), m
    assert report["entries"] == []
    ops = report["hot_ops"]
    assert ops and ops[0]["op"] == "aten::conv2d.default"
    assert all(r["status"] == "not optimised" and "no kernel family matches" in r["why"] for r in ops
               if r["op"] == "aten::conv2d.default")
    md = (run / "report.md").read_text()
    assert FOUR_COLUMNS in md and "## Hot ops" in md and "not optimised" in md


@pytest.mark.parametrize("bad, says", [
    (["--budget", "0"], "--budget wants an integer"),
    (["--top", "0"], "--top wants an integer"),
    (["--time", "0"], "--time wants a number"),
    (["--max-bytes", "lots"], "--max-bytes 'lots'"),
    (["--rounds", "0"], "--rounds wants"),
    (["--backend", "tpu"], "unknown backend"),
])
def test_bad_options_fail_before_capture(tmp_path, bad, says):
    """A bad value of any option tune passes on is refused at once, by the rule of the command that takes it
    (kiln optimize's option table, capture's size parser), before anything runs: no run directory."""
    run = tmp_path / "run"
    t0 = time.monotonic()
    p = _tune([SCRIPT, "--out", str(run), *bad], timeout=120)
    assert p.returncode == 2, p.stderr
    assert says in p.stderr, p.stderr
    assert not run.exists()
    assert time.monotonic() - t0 < 60


def test_a_failed_tune_keeps_the_previous_report(tmp_path):
    """A tune whose script fails writes report.failed.{md,json}; the last good report.md stays as it was."""
    run = tmp_path / "run"
    run.mkdir()
    good = {"kiln_report": 1, "ok": True, "script": SCRIPT, "script_args": [], "run_dir": str(run)}
    (run / "report.json").write_text(json.dumps(good))
    (run / "report.md").write_text("# the last good report\n")
    failing = tmp_path / "failing.py"
    failing.write_text("raise SystemExit('this script fails')\n")
    p = _tune([str(failing), "--out", str(run), "--backend", "cpu", "--time", "60"])
    assert p.returncode == 1, p.stderr
    assert (run / "report.md").read_text() == "# the last good report\n"
    assert json.load(open(run / "report.json")) == good
    failed = json.load(open(run / "report.failed.json"))
    assert failed["ok"] is False and "capture failed" in failed["error"]
    assert "**Stopped**: capture failed" in (run / "report.failed.md").read_text()
    assert "the last good report stays" in p.stdout + p.stderr
    # with no good report there, a failed tune's report is the report
    (run / "report.json").unlink()
    p = _tune([str(failing), "--out", str(run), "--backend", "cpu", "--time", "60"])
    assert p.returncode == 1 and json.load(open(run / "report.json"))["ok"] is False


# ---------------------------------------------------------------------------------------------------
# Honest numbers.


def test_speedup_rule_matches_the_c_one():
    """The cases of tests/c/test_store.c's test_baseline_spread_and_the_speedup_rule, on the Python side."""
    cases = [((20.0, 2.0, 10.0, 3.0), "supported", "2.00x"),
             ((5810.0, 39756.0, 10.0, 1.0), "noisy_baseline", "noisy"),
             ((10.4, 4.0, 10.0, 6.0), "not_significant", "n.s."),
             ((30.0, 1.0, 10.0, 20.0), "noisy", "3.00x!"),
             ((10.0, 1.0, 20.0, 1.0), "supported", "0.50x"),
             ((20.0, None, 10.0, None), "supported", "2.00x"),
             ((None, 1.0, 10.0, 1.0), "unknown", "-"),
             ((4.316, 38.2, 1.712, 3.8), "noisy", "2.52x!"),
             ((1.05, 12.0, 1.0, 1.0), "noisy_baseline", "noisy")]
    for args, verdict, text in cases:
        v, value, ratio = speedup_judge(*args)
        assert (v, speedup_text(v, value)) == (verdict, text), args
    assert speedup_judge(5810.0, 39756.0, 10.0, 1.0)[2] == pytest.approx(581.0)


def test_a_noisy_baseline_is_flagged_not_divided_by():
    """The report's forward row: a 581x "speedup" over an eager time whose rounds spread 39756 % shows as
    noisy, and a win the spreads do not support as n.s.; the spreads are printed."""
    model = {"root": "M", "grad_mode": "inference", "rounds": 5, "iterations": 10, "eager_ms": 581.0,
             "eager_spread_pct": 39756.0, "kiln_ms": 1.0, "kiln_spread_pct": 1.0}
    md = tune.render_markdown({"script": SCRIPT, "script_args": [], "run_dir": "x", "model": model})
    header = next(line for line in md.splitlines() if line.startswith("| model"))
    row = next(line for line in md.splitlines() if line.startswith("| M |"))
    cells = dict(zip([c.strip() for c in header.strip("|").split("|")], [c.strip() for c in row.strip("|").split("|")]))
    assert cells["kiln speedup"] == "noisy" and "581" not in cells["kiln speedup"]
    assert "eager 39756.0%!" in md
    model.update(eager_ms=1.03, eager_spread_pct=4.0, kiln_spread_pct=4.0)
    md = tune.render_markdown({"script": SCRIPT, "script_args": [], "run_dir": "x", "model": model})
    assert "| n.s. |" in next(line for line in md.splitlines() if line.startswith("| M |"))


# ---------------------------------------------------------------------------------------------------
# Pieces.


def _root():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Softmax(dim=-1)).eval()
    root = tune.RootCall(model)
    root.args, root.grad_mode = (torch.randn(4, 16),), "inference"
    return root


def test_a_timed_loop_collects_only_the_young_generations(monkeypatch):
    """Timer.per_call_us runs its loop with the collector off, after a collection of the young generations
    only: a full collection walks all of torch and the model (~0.1 s on the CPU), 41 s of a 151 s install
    check of GPT-2's 25 entries, and gains the loop nothing."""
    import gc
    gens = []
    real = gc.collect
    monkeypatch.setattr(gc, "collect", lambda generation=2: gens.append(generation) or real(0))
    assert tune.Timer(cuda=False).per_call_us(lambda: None, 10) >= 0
    assert gens and max(gens) < 2 and gc.isenabled()


@pytest.mark.parametrize("fails", ["miss", "kiln"])
def test_a_gpu_fault_in_the_install_check_names_the_call(monkeypatch, tmp_path, fails):
    """A kernel's fault on the GPU is sticky: every later call of the process fails, so the per-call benchmark
    stops where it sees one and names the call that reported it (ConvNeXt-T bf16 on the H100 ended with a bare
    "misaligned address" from the first timed eager call, after an earlier call's failure had been taken for
    that entry's own verdict). Here the faulting call is the eager call on inputs the gate misses, or the
    first call with kiln installed; without a GPU the same failure stays that entry's verdict."""
    from hand_library import softmax_library

    from kiln.install import Library, installed, uninstall
    lib = Library(softmax_library(tmp_path))
    calls, failed = [], []

    def iterations(self, fn, target_s):
        calls.append(fn)
        if len(calls) == (2 if fails == "miss" else 3):
            failed.append(fn)
            raise RuntimeError("CUDA error: misaligned address")
        return 2
    monkeypatch.setattr(tune.Timer, "iterations", iterations)
    opts = types.SimpleNamespace(rounds=1, deadline=None)
    try:
        with pytest.MonkeyPatch.context() as gpu:
            gpu.setattr(tune, "_gpu_failed", lambda lib: bool(failed))
            with pytest.raises(tune.GpuFault) as err:
                tune.bench_entries(lib, lib.entries, None, "inference", opts, tune.Timer(cuda=False))
        want = "eager call on inputs the gate misses" if fails == "miss" else "with kiln installed"
        assert want in str(err.value) and "misaligned address" in str(err.value), err.value
        calls.clear()
        if fails == "miss":  # no GPU: the entry's own verdict, the check goes on
            (e,) = lib.entries
            got = tune.bench_entries(lib, lib.entries, None, "inference", opts, tune.Timer(cuda=False))
            assert "its eager call fails" in got[e.name]["error"], got
    finally:
        if installed():
            uninstall()
        lib.close()


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
    --compile; "failed" or "interrupted" with the reason below the table; torch.compile's own time ("= ...")
    when nothing was installed."""
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
    from kiln.install_inductor import LEFT_TO_INDUCTOR
    notes = [f"chain_a: {LEFT_TO_INDUCTOR}", "ln_b: not matched inside torch.compile: why",
             f"chain_c: {LEFT_TO_INDUCTOR}"]
    md = cells(dict(measured, kiln_compile_notes=notes))[1]
    assert f"kiln + torch.compile: 2 entries {LEFT_TO_INDUCTOR} (`chain_a`, `chain_c`)." in md
    assert "kiln + torch.compile: ln_b: not matched inside torch.compile: why." in md
    assert cells(base)[0]["kiln + torch.compile ms"] == "off"
    row, md = cells(dict(base, compile_ms=1.0, kiln_compile_error="RuntimeError: no"))
    assert row["kiln + torch.compile ms"] == "failed" and "kiln + torch.compile failed: RuntimeError: no" in md
    row, _ = cells(dict(base, compile_ms=1.0, kiln_compile_error="interrupted (SIGINT) before torch.compile finished"))
    assert row["kiln + torch.compile ms"] == "interrupted"
    row, md = cells(dict(base, compile_ms=1.0, kiln_compile_note="nothing installed: kiln + torch.compile is "
                         "torch.compile"))
    assert row["kiln + torch.compile ms"] == "= 1.000" and "nothing installed" in md  # torch.compile's own


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


def test_no_time_for_the_search_says_what_time_would_leave_some(monkeypatch):
    """A budget that capture and the install check's reserve use up (GPT-2's generate at --time 250: capture
    130 s, 150 s kept) says which --time would leave the search HINT_SEARCH_S: at that --time, after the same
    capture, the reserve the budget then keeps leaves at least that much."""
    from kiln import tune, tune_report
    b = tune.Budget(250)
    monkeypatch.setattr(b, "elapsed", lambda: 140.0)
    script_s, ops = 42.0, 600.0
    assert b.seconds - 140.0 - b.tail - b.check_reserve(script_s, True, ops) < 1
    hint = b.seconds_for(tune.HINT_SEARCH_S, script_s, True, ops)
    big = tune.Budget(hint)
    left = hint - 140.0 - big.tail - big.check_reserve(script_s, True, ops)
    assert tune.HINT_SEARCH_S <= left < tune.HINT_SEARCH_S + 1, (hint, left)
    md = "\n".join(tune_report._time_section({"time_budget_s": 250, "elapsed_s": 229, "steps": {}, "search": {
        "planned_s": 0, "reserve_s": 150, "stopped": "no time left", "time_hint_s": 660,
        "time_hint_search_s": tune.HINT_SEARCH_S}}))
    assert "ended: no time left. `--time 660` would have left it about 180 s." in md, md


def test_a_search_cut_by_the_budget_is_not_called_a_failure(tmp_path):
    """A problem whose candidate was made but never evaluated before --time ran out is "not searched" with
    that reason, never "no correct kernel"; one whose candidates were evaluated and all failed is "no
    kernel"; and the forward not timed for lack of time says so, not "an earlier step failed"."""
    groups = [{"aten": "aten::pow.Tensor_Scalar", "problem": "pow_p", "share": 0.6, "not_a_problem": None},
              {"aten": "aten::add.Tensor", "problem": "add_p", "share": 0.4, "not_a_problem": None}]
    (tmp_path / "model.json").write_text(json.dumps({"groups": groups}))
    report = {"search": {"stopped": "time limit"},
              "problems": [{"problem": "pow_p", "candidates": 1, "results": 0, "ok": 0, "best_us": None},
                           {"problem": "add_p", "candidates": 3, "results": 3, "ok": 0, "best_us": None}]}
    rows = {r["problem"]: r for r in tune.hot_ops(str(tmp_path), report)}
    assert rows["pow_p"]["status"] == "not searched"
    assert "time limit" in rows["pow_p"]["why"] and "before a candidate" in rows["pow_p"]["why"]
    assert rows["add_p"]["status"] == "no kernel" and rows["add_p"]["why"] == "no correct kernel in 3 evaluated candidates"
    # in the library, but the install check failed before judging it (the VAE decoder on the H200): not "no kernel"
    (tmp_path / "library").mkdir()
    (tmp_path / "library" / "manifest.json").write_text(json.dumps({"entries": [{"problem": "add_p"}]}))
    report["problems"][1].update(ok=1, best_us=2.0)
    report["error"] = "AcceleratorError: CUDA error: an illegal memory access was encountered"
    rows = {r["problem"]: r for r in tune.hot_ops(str(tmp_path), report)}
    assert rows["add_p"]["status"] == "not judged" and "illegal memory access" in rows["add_p"]["why"]
    md = tune.render_markdown({"script": SCRIPT, "script_args": [], "run_dir": "x", "model": None,
                               "out_of_time": "the budget (--time 45 s) ran out during the install check"})
    assert "not timed: the budget (--time 45 s) ran out during the install check" in md
    assert "an earlier step failed" not in md
    # the library it did not get to judge is not "none (no library, or an empty one)"
    md = tune.render_markdown({"script": SCRIPT, "script_args": [], "run_dir": "x", "model": None,
                               "library": {"n_entries": 25},
                               "out_of_time": "the budget (--time 45 s) ran out during the install check"})
    assert "no library, or an empty one" not in md and "library's 25 entries were decided" in md


def test_a_search_that_proves_nothing_still_times_the_model(tmp_path, monkeypatch, capsys):
    """The search ran (capture skipped, optimize stubbed to have proved no kernel: no library written): tune
    still times the model and exits 0, where it used to stop with "no library" (exit 1). Asked to use a
    library that is not there, it still fails."""
    seen = {}

    def searched_nothing(opts, report, budget):
        report["search"].update(stopped="budget", rc=0)

    def install_check(opts, library_dir, report):
        seen["library_dir"] = library_dir
        report["entries"] = []
    monkeypatch.setattr(tune, "step_optimize", searched_nothing)
    monkeypatch.setattr(tune, "install_check", install_check)
    out = tmp_path / "run"
    out.mkdir()
    code = tune.main([SCRIPT, "--backend", "cpu", "--out", str(out), "--skip-capture", "--no-compile"])
    assert code == 0 and seen == {"library_dir": None}
    assert "error" not in json.load(open(out / "report.json"))
    capsys.readouterr()
    code = tune.main([SCRIPT, "--backend", "cpu", "--out", str(out), "--skip-capture", "--skip-optimize"])
    assert code == 1 and "kiln tune: no library at" in capsys.readouterr().err


def test_a_chain_entry_is_judged_by_the_gate_and_kept_for_kiln_plus_compile(monkeypatch, tmp_path):
    """A chain has no eager route (Gemma-4's mask -> softmax chain, 7.4x in the gate on the H200, was "cannot
    benchmark: the module takes 2 activations" and so never reached kiln + torch.compile): decide() takes
    it by the gate's speedup, and dropping entries for the eager forward never drops it."""
    chain = types.SimpleNamespace(disabled=None, kind="chain", speedup=7.4)
    ok, why = tune.decide(chain, None, 0.02)
    assert ok and "replaced in a graph only" in why and "graph mode" in why
    ok, why = tune.decide(types.SimpleNamespace(disabled=None, kind="chain", speedup=1.01), None, 0.02)
    assert not ok and "not faster than the eager chain" in why
    ok, why = tune.decide(types.SimpleNamespace(disabled=None, kind="chain", speedup=None), None, 0.02)
    assert not ok and "too noisy" in why and "0.00x" not in why  # no speedup measured is not a speedup of 0
    lib = types.SimpleNamespace(path=str(tmp_path), manifest_digest=lambda: "d")
    report = {"model": {"eager_ms": 5.0, "kiln_ms": 5.1, "compile_ms": 3.0, "kiln_compile_ms": 2.5}}
    entries = [{"name": "a", "installed": True, "op_eager_us": 50.0, "op_kiln_us": 40.0},
               {"name": "c", "installed": True, "compile_only": True}]
    decisions = {"a": {"install": True, "reason": "won"}, "c": {"install": True, "reason": "chain"}}
    tune._drop_until_faster(None, lib, None, None, report, decisions, entries)
    assert not entries[0]["installed"] and entries[1]["installed"] and decisions["c"]["install"]
    assert report["model_kiln_compile_stale"] is True and "kiln_compile_note" not in report["model"]


def test_kiln_run_compile_gets_the_set_that_beat_torch_compile(monkeypatch, tmp_path):
    """install.json's "compile": the kiln + torch.compile set when it beat torch.compile alone beyond the
    spreads, the chain entries alone when they were faster still, and no entry when neither beat it (Gemma-4
    on the H200: softmax + RMSNorm inside the compiled graph, 19.79 ms against torch.compile's 19.19)."""
    lib = types.SimpleNamespace(path=str(tmp_path), manifest_digest=lambda: "d")
    opts = types.SimpleNamespace(deadline=None)
    entries = [{"name": "soft", "installed": True}, {"name": "norm", "installed": True},
               {"name": "chain", "installed": True, "compile_only": True}]

    def check(chains_ms):
        def timed(root, lib, opts, timer, out, eager_out=None, entries=None):
            out.update(kiln_compile_ms=chains_ms, kiln_compile_spread_pct=1.0, kiln_compile_entries=entries)
        monkeypatch.setattr(tune, "time_kiln_compile", timed)
        report = {"model": {"root": "M", "grad_mode": "inference", "rounds": 5, "iterations": 8,
                            "eager_ms": 33.9, "compile_ms": 19.19, "compile_spread_pct": 2.0,
                            "kiln_compile_ms": 19.79, "kiln_compile_spread_pct": 3.5,
                            "kiln_compile_entries": ["soft", "norm", "chain"], "kiln_compile_warmup_s": 30}}
        decisions = {n: {"install": True, "reason": "won"} for n in ("soft", "norm", "chain")}
        tune.choose_compile_set(None, lib, opts, None, report, decisions, entries)
        saved = json.load(open(tmp_path / "install.json"))["entries"]
        assert saved == decisions
        return report, {n for n, d in decisions.items() if d["compile"]}
    report, chosen = check(19.5)  # neither beats torch.compile alone; the column shows the faster set
    assert chosen == set() and report["compile_entries"] == [] and report["model"]["kiln_compile_ms"] == 19.5
    assert report["model_kiln_compile_alternative"]["kiln_compile_ms"] == 19.79
    md = "\n".join(tune_report._model_section(dict(report, script=SCRIPT, script_args=[], run_dir="R")))
    assert "`kiln run --compile` installs nothing" in md and "Also timed inside torch.compile, with `soft`" in md
    report, chosen = check(17.0)  # the chain alone does
    assert chosen == {"chain"} and report["model"]["kiln_compile_ms"] == 17.0
    assert report["model_kiln_compile_alternative"]["kiln_compile_entries"] == ["soft", "norm", "chain"]


def test_time_left_after_the_search_goes_to_the_problems_it_did_not_prepare(tmp_path, monkeypatch):
    """kiln optimize leaves problems unprepared when their reference data would not fit in preparing's share
    of its time; when it ends ("done") with time left, tune runs it again on those problems (named), merges
    the rows, and stops at a round that leaves none (on the H200 Gemma-4's search ended 159 s early with
    43 problems unprepared)."""
    out = tmp_path / "run"
    (out / "library").mkdir(parents=True)
    (out / "library" / "manifest.json").write_text("{}")
    opts = tune.parse_args([SCRIPT, "--backend", "cpu", "--out", str(out), "--skip-capture", "--no-compile"])
    tables = [{"stopped": "done", "problems": [{"problem": "a", "best_us": 1.0},
                                               {"problem": "b", "skipped": "not prepared: its reference data"}]},
              {"stopped": "done", "problems": [{"problem": "b", "best_us": 2.0}]}]
    cmds = []

    def child(cmd, stop_at, stdout=None):
        cmds.append(cmd)
        json.dump(tables[len(cmds) - 1], stdout)
        return 0, None
    monkeypatch.setattr(tune, "run_child", child)
    report = {"steps": {}}
    tune.step_optimize(opts, report, tune.Budget(600))
    assert len(cmds) == 2 and str(out / "problems" / "b") in cmds[1] and str(out / "problems" / "b") not in cmds[0]
    assert report["search"]["rounds"] == 2 and report["search"]["stopped"] == "done"
    assert {r["problem"]: r.get("best_us") for r in report["problems"]} == {"a": 1.0, "b": 2.0}
    assert len(json.load(open(out / "logs" / "optimize.json"))["problems"]) == 2


def test_a_search_stopped_before_its_first_kernel_is_no_failure(tmp_path, monkeypatch):
    """kiln optimize stopped by tune at the end of its time (a 4 GiB problem's reference data outlasting a
    short --time on the H200) writes no library: step_optimize says so and returns, it does not end tune
    with "wrote no manifest.json" (exit 1, the forward never timed). A failed optimize still fails."""
    out = tmp_path / "run"
    out.mkdir()
    opts = tune.parse_args([SCRIPT, "--backend", "cpu", "--out", str(out), "--skip-capture", "--no-compile"])
    monkeypatch.setattr(tune, "run_child", lambda cmd, stop_at, stdout=None: (-15, "out of time"))
    report = {"steps": {}}
    tune.step_optimize(opts, report, tune.Budget(60))
    assert report["search"]["stopped"] == "out of time"
    monkeypatch.setattr(tune, "run_child", lambda cmd, stop_at, stdout=None: (2, None))
    with pytest.raises(tune.TuneError, match="kiln optimize failed"):
        tune.step_optimize(opts, {"steps": {}}, tune.Budget(60))


def test_the_report_recommends_the_fastest_way_the_spreads_support():
    """Simplest first (eager, torch.compile, kiln, kiln + torch.compile): a way is recommended over a simpler
    one only when it is faster beyond both spreads; the command to run it is in the report."""
    def rec(**model):
        base = {"root": "M", "grad_mode": "inference", "rounds": 5, "iterations": 10, "eager_ms": 10.0,
                "eager_spread_pct": 1.0, "kiln_entries_installed": ["e"]}
        report = {"script": SCRIPT, "script_args": ["--small"], "run_dir": "R", "model": dict(base, **model)}
        return tune_report.recommend(report), tune.render_markdown(report)
    r, md = rec(compile_ms=6.0, compile_spread_pct=1.0, kiln_ms=8.0, kiln_spread_pct=1.0,
                kiln_compile_ms=5.0, kiln_compile_spread_pct=1.0)
    assert r["way"] == "kiln + torch.compile" and r["speedup"] == pytest.approx(2.0)
    assert f"`kiln run --compile --library {os.path.join('R', 'library')} {SCRIPT} --small`" in md
    assert "**Fastest here: kiln + torch.compile** (2.00x eager" in md
    # within the spreads of torch.compile alone: the simpler way stays
    r, _ = rec(compile_ms=6.0, compile_spread_pct=4.0, kiln_compile_ms=5.9, kiln_compile_spread_pct=4.0)
    assert r["way"] == "torch.compile"
    # nothing installed: the kiln columns are eager again, never recommended
    r, _ = rec(kiln_entries_installed=[], kiln_ms=5.0, kiln_spread_pct=1.0)
    assert r["way"] == "eager"
    r, md = rec(kiln_ms=9.0, kiln_spread_pct=1.0)
    assert r["way"] == "kiln" and "`kiln run --library" in md
    # slower beyond the spreads is not faster (Gemma-4 on the H200: kiln 30.8 ms replaced torch.compile's 18.7
    # as the best so far, and kiln + torch.compile, 19.5, was then recommended over torch.compile alone)
    r, md = rec(eager_ms=35.44, eager_spread_pct=4.0, compile_ms=18.70, compile_spread_pct=4.7, kiln_ms=30.83,
                kiln_spread_pct=4.0, kiln_compile_ms=19.51, kiln_compile_spread_pct=3.5)
    assert r["way"] == "torch.compile", r
    assert "**Fastest here: torch.compile**" in md
    assert tune_report.recommend({"model": None}) is None


def test_compile_is_decided_by_the_backend_unless_asked():
    """--compile / --no-compile share one dest whose default None means "on cuda, off on cpu": a parser that
    let store_true's own default (False) through made tune skip torch.compile on the GPU without a word."""
    parse = lambda *a: tune.parser().parse_args(["model.py", *a])  # noqa: E731
    assert parse().compile is None
    assert parse("--time", "240").compile is None
    assert parse("--compile").compile is True
    assert parse("--no-compile").compile is False


def test_the_compile_reserve_grows_with_the_graph(tmp_path):
    """The install check keeps time for torch.compile's two compilations by the calls capture counted in a
    forward, not a flat quarter of --time: on the H200 the VAE decoder (110 calls) compiled in 22 s while
    150 s were kept from its search, and Qwen-3.5-MoE (1420) took 106 s, more than its share."""
    b = tune.Budget(600)
    flat = b.check_reserve(17.0, True)
    assert flat == pytest.approx(60 + 1.5 * 17 + 5 + 150)
    vae = b.check_reserve(17.0, True, 110)
    assert vae == pytest.approx(60 + 1.5 * 17 + 5 + 2 * tune.compile_seconds(110)) and vae < flat - 80
    assert b.check_reserve(17.0, True, 1420) > flat  # Qwen: both compilations fit (2 x 106 s measured)
    assert 2 * tune.compile_seconds(1420) > 2 * 106
    assert b.check_reserve(17.0, False, 1420) == pytest.approx(60 + 1.5 * 17 + 5)  # no torch.compile
    assert b.check_reserve(300.0, True, 5000) == pytest.approx(0.6 * 600)  # never over six tenths
    (tmp_path / "capture.json").write_text(json.dumps({"n_ops": 330, "passes": 3, "wall_s": {"script_s": 17}}))
    assert tune._ops_per_forward(str(tmp_path)) == 110 and tune._ops_per_forward(str(tmp_path / "x")) == 0


def test_a_forward_loop_on_cuda_lasts_a_second():
    """The model's forward is timed in loops of a second on cuda (0.3 s on the cpu): Gemma-4's 8 forwards a
    loop left torch.compile's rounds spread 4.8 %, too wide to judge a 3 % win."""
    import torch

    targets = []

    class FakeTimer:
        def iterations(self, fn, target_s):
            targets.append(target_s)
            return 1

        def per_call_us(self, fn, n):
            fn()
            return 100.0

    root = tune.RootCall(torch.nn.Linear(4, 4))
    root.args, root.grad_mode = (torch.randn(2, 4),), "inference"
    for backend, want in (("cuda", 1.0), ("cpu", 0.3)):
        opts = tune.parse_args([SCRIPT, "--backend", "cpu", "--no-compile", "--rounds", "2"])
        opts.backend, opts.deadline = backend, None
        out = tune.time_model(root, None, opts, FakeTimer(), compile_too=False)
        assert targets[-1] == want and out["eager_ms"] == 0.1
