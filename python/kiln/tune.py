"""kiln tune: one command from an unmodified PyTorch script to a report of what kiln's kernels do for it, within a
time budget.

    kiln tune SCRIPT.py [options] [-- SCRIPT ARGS...]     (`kiln tune --help` lists them)

Four steps, each printed as it runs, all within --time (default 10 minutes on a GPU, 2 on a CPU):

1. capture    `python -m kiln.capture SCRIPT --out RUN --device BACKEND -- ARGS`: the script's hot ops and
              fused leaf modules become problems (docs/capture.md).
2. search     `kiln optimize RUN --backend BACKEND --time T --json`: kernels are searched, proved and timed
              for the problems a kernel family matches, where share x headroom to the speed of light is
              largest first, until T; the winners go to RUN/library (manifest.json + kernels). Ctrl-C or the
              end of T stops the search and the best found so far is what the next steps install.
3. install check, in this process: the script runs once more, eagerly, while kiln watches which module it
              calls at the top (the model) and with which arguments. Then, per library entry, the op (or the
              module) is timed through PyTorch's dispatcher on the gate's exact shapes — eager against kiln,
              dispatch cost included, alternating — and an entry is kept only where kiln wins by more than
              --margin and the spreads support it. The decisions go to RUN/library/install.json, which `kiln
              run` and kiln.install() read. Finally the model's forward is timed eager vs kiln (the kept
              entries) vs torch.compile vs torch.compile with kiln installed, alternating eager and kiln,
              and the outputs are compared.
4. report     RUN/report.md and RUN/report.json (tune_report.py): the four forward times, every hot op with
              its result or why kiln did not optimise it, per entry whether it was installed and why.

The budget. T is planned at the start: capture runs first; what remains, less a reserve for the install check
(estimated from the script's own run time, a tenth of the budget and, with torch.compile, two compilations
guessed from the aten calls of one forward),
goes to the search; the install check fits its rounds into what is left and stops at the deadline. A budget
that leaves the search nothing says which --time would have left it HINT_SEARCH_S (Budget.seconds_for). With
nothing to optimise (no family matches any hot op) the report still has the eager and torch.compile times and
each hot op's reason, and tune exits 0. A tune that fails writes RUN/report.failed.{md,json} and leaves the last
good report in place; reports are written atomically.

Signals. capture and optimize run in their own process group: a Ctrl-C reaches tune, which passes one SIGINT
on (a second one is passed on too: optimize then stops its workers at once). During the search that only
ends the search; during the install check it stops tune with exit status 130, and the report says what was
done.

How the model is found (nothing in the script changes): while the script runs, `torch.nn.Module.__call__`
is wrapped for the duration of that one run, and every call that is not inside another module's call (a
*root* call) is recorded with its arguments and grad mode. The root module whose calls took the most time
is the model; its last call's arguments are replayed for the timings. A script that calls no module has no
model to time; the report then has the entries but no model line.

--compile is on by default on cuda and off on cpu (torch.compile on a CPU needs a C++ toolchain and
minutes). --library DIR skips steps 1 and 2 and checks that library.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
import traceback
from typing import Optional

from kiln import default_backend, split_script_args
from kiln.cli import Parser, UsageError, stdout_to_stderr
from kiln.install_cost import (EntryBench, Timer, _gate_tensor, prefer_bindings,  # noqa: F401 - its API
                               speedup_judge, spread_pct)
from kiln.tune_report import recommend, render_markdown, write_report  # noqa: F401 - render_markdown: its API

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_TIME_S = {"cuda": 600.0, "cpu": 120.0}
STOP_GRACE_S = 10.0  # after a stop is asked of a child: then SIGINT again, then SIGKILL


class TuneError(Exception):
    """A step that failed, reported as one clear message; code is the exit status."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


class OutOfTime(BaseException):
    """The budget's deadline passed inside the install check (raised by the alarm; BaseException so that no
    step's `except Exception` takes it for its own failure)."""


def parser() -> Parser:
    """`kiln tune`'s command line (its --help)."""
    p = Parser(
        "tune", ["SCRIPT.py [options] [-- SCRIPT ARGS...]"],
        "One command from an unmodified PyTorch script to a report of what kiln's kernels do for it, within a "
        "time budget (--time), in four steps: capture (kiln capture), a search (kiln optimize, where share x "
        "headroom to the speed of light is largest, until the budget's search share is spent or Ctrl-C), an "
        "install check in this process (each library entry is timed through PyTorch's dispatcher, eager "
        "against kiln, and kept only where kiln wins by more than --margin; the decisions go to "
        "RUN/library/install.json, which kiln run and kiln.install read), and a report, RUN/report.md and "
        "RUN/report.json: the model's forward eager, with kiln, with torch.compile and with both, every hot op "
        "with its result or why it was not optimised, and per entry why it was installed or not. Every option "
        "is checked before anything runs. Everything after `--` goes to the script.",
        [(0, "the report was written (also when nothing could be optimised, or the search was stopped)"),
         (1, "a step failed (its output says why; RUN/report.failed.md says what was done, and the last good "
             "report stays)"),
         (2, "bad invocation (nothing was run)"),
         (130, "interrupted (SIGINT) after the search: the report says what was done")],
        "kiln tune examples/resnet50.py --backend cpu --time 60 -- --small",
        unknown_hint=" (the script's own arguments go after `--`)")
    p.add_argument("script")
    p.option("--out", metavar="RUN", default_text="runs/<script name>", help="the run directory")
    p.option("--backend", metavar="cuda|cpu", choices=["cuda", "cpu"], unknown="backend", default_text="cuda when PyTorch sees a GPU",
             help="where kernels are searched and the model runs")
    p.option("--time", metavar="S", kind="number", lo=1, default_text="600 on cuda, 120 on cpu",
             help="seconds for the whole tune: capture, search, install check and report")
    p.option("--budget", metavar="N", kind="int", default_text="kiln optimize's",
             help="candidates per problem kiln can optimise, at most, as kiln optimize --budget")
    p.option("--top", metavar="N", kind="int", default_text="all",
             help="search only the N hottest problems kiln can optimise (a kernel family matches), as kiln "
                  "optimize --top; capture writes at least as many")
    p.option("--max-bytes", metavar="B", default_text="kiln capture's",
             help="the most bytes of tensors capture saves, as kiln capture --max-bytes")
    p.option("--compile", dest="compile", action="store_true", default=None, default_text="on cuda",
             help="time torch.compile and kiln inside torch.compile too")
    p.option("--no-compile", dest="compile", action="store_false", help="do not time torch.compile")
    p.option("--rounds", metavar="R", kind="int", lo=1, default=5, help="alternating timing rounds")
    p.option("--margin", metavar="M", kind="number", default=0.02,
             help="an entry is kept when kiln is faster than eager by more than this fraction")
    p.option("--dispatch", metavar="python|cpp|auto", choices=["python", "cpp", "auto"],
             default_text="$KILN_DISPATCH, else auto on cuda and python on cpu",
             help="how aten and module entries are dispatched, as kiln.install's dispatch=")
    p.option("--library", metavar="DIR", help="check this library; skips capture and the search")
    p.option("--skip-capture", action="store_true", help="use RUN's existing capture")
    p.option("--skip-optimize", action="store_true", help="use RUN/library as it is (no search)")
    p.option("--serve", metavar="[=PORT]", nargs="?", const="", default_text="kiln optimize --serve's port",
             help="serve the dashboard while kiln optimize runs (kiln optimize --serve)")
    p.option("--json", action="store_true",
             help="print RUN/report.json on stdout when done; every step's output goes to stderr")
    return p


def parse_args(argv: list) -> argparse.Namespace:
    """tune's options, every one checked before anything runs: its own, the values capture and optimize will
    get (by their own rules), the backend and the kiln binary. TuneError(code 2) says what is wrong."""
    argv, script_args = split_script_args(argv)
    try:
        opts = parser().parse(argv)
    except UsageError as e:
        raise TuneError(str(e), 2) from None
    opts.script_args = script_args
    if not os.path.isfile(opts.script):
        raise TuneError(f"no such script: {opts.script}", 2)
    if opts.out is None:
        opts.out = os.path.join("runs", os.path.splitext(os.path.basename(opts.script))[0])
    if opts.library:
        opts.skip_capture = opts.skip_optimize = True
    if opts.max_bytes is not None:
        from kiln.capture import CaptureError, parse_bytes
        try:
            parse_bytes(opts.max_bytes)
        except CaptureError as e:
            raise TuneError(f"{e}; see kiln tune --help", 2) from None
    if opts.backend is None:
        opts.backend = default_backend()
    elif opts.backend == "cuda" and default_backend() != "cuda":
        raise TuneError("--backend cuda: no GPU is visible here (kiln's rule: a CUDA driver and a device)", 2)
    if opts.time is None:
        opts.time = DEFAULT_TIME_S[opts.backend]
    if not opts.skip_optimize:
        check_optimize_options(opts)
    if opts.dispatch:
        os.environ["KILN_DISPATCH"] = opts.dispatch  # every kiln.install of this process (and kiln run's)
    return opts


MAX_SEARCH_ROUNDS = 4  # kiln optimize runs per tune: the first, then rounds for the problems it left unprepared
MIN_SEARCH_ROUND_S = 20.0  # a round shorter than this would spend itself on reference data
HINT_SEARCH_S = 180.0  # the search a budget too small for one is told how to get


def _optimize_flags(opts) -> list:
    flags = ["--backend", opts.backend]
    if opts.budget is not None:
        flags += ["--budget", str(opts.budget)]
    if opts.top is not None:
        flags += ["--top", str(opts.top)]
    return flags


def check_optimize_options(opts) -> None:
    """The values tune passes to kiln optimize, checked by kiln optimize's own option table (the one place
    their bounds are written): `kiln optimize FLAGS --help` refuses a bad value before it prints the help."""
    kiln = _kiln_binary()
    if not os.path.exists(kiln):
        raise TuneError(f"{kiln} does not exist: build kiln with `make` in {ROOT}, or pass --library DIR", 2)
    try:
        p = subprocess.run([kiln, "optimize", *_optimize_flags(opts), "--help"], capture_output=True, text=True,
                           timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise TuneError(f"cannot run {kiln} optimize: {e}", 2) from None
    if p.returncode != 0:
        why = (p.stderr or p.stdout).strip().splitlines()
        why = why[0] if why else f"exit status {p.returncode}"
        why = why.replace("kiln optimize: ", "").replace("see kiln optimize --help", "see kiln tune --help")
        raise TuneError(why, 2)


def _env() -> dict:
    env = dict(os.environ)
    py = os.path.join(ROOT, "python")
    env["PYTHONPATH"] = py + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _kiln_binary() -> str:
    return os.environ.get("KILN_BIN") or os.path.join(ROOT, "build", "kiln")


def _log(line: str) -> None:
    print(line, flush=True)


# ---------------------------------------------------------------------------------------------------
# The budget, and the child processes it is spent in.


TAIL_MAX_S = 10.0  # the most Budget.tail stops the work before --time is up


class Budget:
    """--time as a deadline, and the reserve the install check is planned to need after the search."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.start = _process_start()
        # the work stops this much before --time is up: the alarm's slack, the report and the exit of a
        # process holding torch come after the deadline (a 120 s tune on the CPU: 3 s after its report)
        self.tail = min(TAIL_MAX_S, 0.05 * seconds)
        self.deadline = self.start + seconds - self.tail

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def check_reserve(self, script_s: float, compile_too: bool, ops_per_forward: float = 0.0) -> float:
        """Seconds kept for the install check and the report: a tenth of the budget plus one and a half runs
        of the script as capture timed it (capture's run, with its hooks and three forwards, is longer than
        the install check's one plain run: Gemma-4 on the H200 49 s at capture, 101 s for the whole install
        check with torch.compile timed, when 282 s had been kept) and a start-up, and torch.compile's two
        compilations (compile_seconds); at most six tenths of the budget."""
        share, fixed = _reserve_terms(script_s, compile_too, ops_per_forward)
        return min(share * self.seconds + fixed, 0.6 * self.seconds)

    def seconds_for(self, search_s: float, script_s: float, compile_too: bool, ops_per_forward: float = 0.0) -> float:
        """The --time that would leave search_s for the search after what has run so far, the reserve
        (check_reserve, uncapped) growing with the budget."""
        share, fixed = _reserve_terms(script_s, compile_too, ops_per_forward)
        return (self.elapsed() + TAIL_MAX_S + fixed + search_s) / (1 - share)


def _reserve_terms(script_s: float, compile_too: bool, ops_per_forward: float) -> tuple:
    """Budget.check_reserve's reserve as (share of the budget, seconds): see there."""
    share, fixed = 0.1, 1.5 * max(script_s, 0.0) + 5
    if compile_too:
        if ops_per_forward > 0:
            fixed += 2 * compile_seconds(ops_per_forward)
        else:
            share += 0.25
    return share, fixed


# torch.compile's first call grows with the graph: on the H200 (torch 2.11) 11-17 s for ResNet-50 (174 aten
# calls a forward), 21-23 s for the VAE decoder (110), 29 s for Gemma-4 (723), 106 s for Qwen-3.5-MoE (1420);
# kiln + torch.compile's compile took 12-21 s more. A high guess from the calls capture counted, for each of
# the two: the flat quarter of the budget it replaces kept 150 s of a 600 s tune where the VAE used 35.
COMPILE_S_BASE, COMPILE_S_PER_CALL = 20.0, 0.08


def compile_seconds(ops_per_forward: float) -> float:
    return COMPILE_S_BASE + COMPILE_S_PER_CALL * ops_per_forward


def _process_start() -> float:
    """When the `kiln` command started (time.monotonic()'s clock; set by the C side before it hands over to
    Python, so that the interpreter's and torch's start-up count against --time), else now."""
    now = time.monotonic()
    try:
        t0 = float(os.environ.get("KILN_START_MONOTONIC", ""))
    except ValueError:
        return now
    return t0 if now - 60.0 <= t0 <= now else now


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when tune dies (kiln optimize then stops as on Ctrl-C)."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux: the child outlives a killed tune, nothing worse
        pass


class _Sigints:
    """While a child runs, SIGINT is counted instead of raised: run_child passes each one on."""

    def __enter__(self):
        self.count = 0
        self.old = signal.signal(signal.SIGINT, self._on)
        return self

    def _on(self, signum, frame):
        self.count += 1

    def __exit__(self, *exc):
        signal.signal(signal.SIGINT, self.old)
        return False


def run_child(cmd: list, stop_at: Optional[float] = None, stdout=None) -> tuple:
    """Runs cmd in its own process group and waits: (exit status, how it was stopped: None, "interrupted"
    (tune got SIGINT and passed it on) or "out of time" (still running at stop_at, a time.monotonic(): asked
    to stop with SIGINT, again STOP_GRACE_S later, then killed)). A third SIGINT to tune kills the child."""
    p = subprocess.Popen(cmd, env=_env(), stdout=stdout, process_group=0, preexec_fn=_die_with_parent)
    how, passed, stops = None, 0, 0
    with _Sigints() as sig:
        while True:
            try:
                return p.wait(timeout=0.1), how
            except subprocess.TimeoutExpired:
                pass
            if sig.count > passed:
                passed = sig.count
                how = how or "interrupted"
                try:
                    os.killpg(p.pid, signal.SIGINT if passed < 3 else signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if stop_at is not None and time.monotonic() >= stop_at + stops * STOP_GRACE_S:
                how = how or "out of time"
                try:
                    os.killpg(p.pid, signal.SIGINT if stops < 2 else signal.SIGKILL)
                except ProcessLookupError:
                    pass
                stops += 1


# ---------------------------------------------------------------------------------------------------
# Steps 1 and 2: other processes.


def step_capture(opts, report: dict, budget: Budget) -> None:
    from kiln.capture import parser as capture_parser
    cmd = [sys.executable, "-m", "kiln.capture", opts.script, "--out", opts.out, "--device", opts.backend]
    if opts.top:  # capture writes at least as many problems as the search may take
        cmd += ["--top", str(max(opts.top, capture_parser().get_default("top")))]
    if opts.max_bytes is not None:
        cmd += ["--max-bytes", opts.max_bytes]
    cmd += ["--", *opts.script_args]
    _log(f"kiln tune [1/4] capture: {' '.join(cmd[1:])}")
    t0 = time.perf_counter()
    rc, how = run_child(cmd, stop_at=budget.deadline - budget.check_reserve(0, False))
    report["steps"]["capture"] = {"rc": rc, "seconds": round(time.perf_counter() - t0, 2)}
    if how == "interrupted":
        raise TuneError("capture interrupted (SIGINT)", 130)
    if how:
        raise TuneError(f"capture did not finish within the budget (--time {opts.time:g} s)")
    if rc != 0:
        raise TuneError(f"capture failed (exit status {rc}); its output above says why")


def _script_seconds(run_dir: str) -> float:
    """The script's own run time at capture (RUN/capture.json), 0 when unknown."""
    try:
        with open(os.path.join(run_dir, "capture.json")) as f:
            wall = json.load(f).get("wall_s") or {}
        return float(wall.get("script_s") or 0)
    except (OSError, ValueError, TypeError, AttributeError):
        return 0.0


def _ops_per_forward(run_dir: str) -> float:
    """The aten calls of one forward at capture (RUN/capture.json: n_ops over passes), 0 when unknown."""
    try:
        with open(os.path.join(run_dir, "capture.json")) as f:
            c = json.load(f)
        return float(c.get("n_ops") or 0) / max(int(c.get("passes") or 1), 1)
    except (OSError, ValueError, TypeError, AttributeError):
        return 0.0


def step_optimize(opts, report: dict, budget: Budget) -> None:
    """kiln optimize for what the budget leaves after the install check's reserve; its table (--json) goes to
    RUN/logs/optimize.json and report["problems"]. A search stopped by Ctrl-C or by the budget is not a
    failure: the library it wrote has the best found so far. Nothing to optimise is not one either. When the
    search ends with time left and problems it left unprepared (their reference data did not fit in
    preparing's share of its time), another round takes those, up to MAX_SEARCH_ROUNDS."""
    compile_too = opts.compile if opts.compile is not None else opts.backend == "cuda"
    script_s, ops = _script_seconds(opts.out), _ops_per_forward(opts.out)
    reserve = budget.check_reserve(script_s, compile_too, ops)
    search_s = budget.left() - reserve
    search = report["search"] = {"planned_s": round(max(search_s, 0), 1), "reserve_s": round(reserve, 1)}
    if search_s < 1:
        search["stopped"] = "no time left"
        # what --time would have left the search HINT_SEARCH_S, rounded up to a minute
        search["time_hint_s"] = 60 * math.ceil(budget.seconds_for(HINT_SEARCH_S, script_s, compile_too, ops) / 60)
        search["time_hint_search_s"] = HINT_SEARCH_S
        _log(f"kiln tune [2/4] search: no time left for it ({budget.left():.0f} s of --time {opts.time:g} s "
             f"left, {reserve:.0f} s kept for the install check); --time {search['time_hint_s']} would leave it "
             f"about {HINT_SEARCH_S:.0f} s")
        return
    logs = os.path.join(opts.out, "logs")
    os.makedirs(logs, exist_ok=True)
    table_path = os.path.join(logs, "optimize.json")
    problems: dict = {}  # name -> the latest row of it
    named: list = []  # the problem directories of a later round
    t0 = time.perf_counter()
    for round_no in range(1, MAX_SEARCH_ROUNDS + 1):
        cmd = [_kiln_binary(), "optimize", opts.out, *named, *_optimize_flags(opts), "--time", f"{search_s:.1f}",
               "--json"]
        if opts.serve is not None:
            cmd += [f"--serve={opts.serve}" if opts.serve else "--serve"]
        if round_no == 1:
            _log(f"kiln tune [2/4] search: {search_s:.0f} s of the {opts.time:g} s budget ({reserve:.0f} s kept for "
                 f"the install check and the report): {' '.join(cmd)}")
        path = table_path if round_no == 1 else os.path.join(logs, f"optimize.round{round_no}.json")
        with open(path, "w") as table:
            rc, how = run_child(cmd, stop_at=time.monotonic() + search_s + STOP_GRACE_S, stdout=table)
        try:
            with open(path) as f:
                table = json.load(f)
        except (OSError, ValueError):
            table = None
        for row in (table or {}).get("problems") or []:
            problems[row.get("problem")] = row
        search.update(rc=rc, rounds=round_no, stopped=how or (table or {}).get("stopped"))
        if how or rc != 0 or not table or table.get("stopped") != "done":
            break
        unprepared = [r["problem"] for r in table.get("problems") or []
                      if str(r.get("skipped") or "").startswith("not prepared")]
        search_s = budget.left() - reserve
        if not unprepared or search_s < MIN_SEARCH_ROUND_S:
            break
        named = [os.path.join(opts.out, "problems", n) for n in unprepared]
        _log(f"kiln tune: the search ended with {search_s:.0f} s left: another round for the {len(unprepared)} "
             f"problems it did not prepare")
    search["seconds"] = round(time.perf_counter() - t0, 2)
    report["steps"]["optimize"] = {"rc": rc, "seconds": search["seconds"]}
    if problems:
        report["problems"] = list(problems.values())
        if search.get("rounds", 1) > 1:  # the table of every round's latest rows
            with open(table_path) as f:
                merged = json.load(f)
            merged["problems"], merged["stopped"] = report["problems"], search["stopped"]
            with open(table_path, "w") as f:
                json.dump(merged, f, indent=1)
    if how == "interrupted":
        _log("kiln tune: search stopped (SIGINT): installing the best found so far")
    elif how == "out of time":
        _log("kiln tune: the search overran its time and was stopped")
    if table and table.get("stopped") == "nothing to do" and search.get("rounds") == 1:
        search["stopped"] = "nothing to optimise"
        _log("kiln tune: nothing to optimise: no kernel family matches any problem (the report says why per op)")
        return
    if rc != 0 and not how:
        raise TuneError(f"kiln optimize failed (exit status {rc}); its output above says why")
    if not os.path.exists(os.path.join(opts.out, "library", "manifest.json")):
        # stopped before any kernel was proved: no library, but the model is still timed and reported
        search["stopped"] = search.get("stopped") or "no kernel proved"
        _log("kiln tune: the search left no library (no kernel proved in its time): the model is timed without "
             "kiln")


# ---------------------------------------------------------------------------------------------------
# Step 3: finding the model.


class RootCall:
    """A module called outside any other module's call: a model, with its last call's arguments."""

    def __init__(self, module):
        self.module = module
        self.calls = 0
        self.seconds = 0.0
        self.args: tuple = ()
        self.kwargs: dict = {}
        self.grad_mode = "grad"


def _grad_mode() -> str:
    import torch
    if torch.is_inference_mode_enabled():
        return "inference"
    return "grad" if torch.is_grad_enabled() else "no_grad"


def watch_script(opts) -> list:
    """Runs the script once with torch.nn.Module.__call__ wrapped; returns its root calls, busiest first."""
    import torch

    from kiln.run import run_script
    roots: dict = {}
    depth = [0]
    original_call = torch.nn.Module.__call__

    def watching_call(self, *args, **kwargs):
        if depth[0]:
            return original_call(self, *args, **kwargs)
        r = roots.get(id(self))
        if r is None or r.module is not self:
            r = roots[id(self)] = RootCall(self)
        r.calls += 1
        r.args, r.kwargs, r.grad_mode = args, kwargs, _grad_mode()
        depth[0] += 1
        t0 = time.perf_counter()
        try:
            return original_call(self, *args, **kwargs)
        finally:
            r.seconds += time.perf_counter() - t0
            depth[0] -= 1

    torch.nn.Module.__call__ = watching_call
    try:
        status = run_script(opts.script, opts.script_args)
    finally:
        torch.nn.Module.__call__ = original_call
    if status != 0:
        raise TuneError(f"the script exited with status {status} during the install check")
    return sorted(roots.values(), key=lambda r: (-r.seconds, -r.calls))


def _grad_context(mode: str):
    import torch
    if mode == "inference":
        return torch.inference_mode()
    if mode == "no_grad":
        return torch.no_grad()
    return torch.enable_grad()


def _flat_tensors(value) -> list:
    import torch
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    elif hasattr(value, "to_tuple"):
        value = value.to_tuple()
    if isinstance(value, (list, tuple)):
        out = []
        for v in value:
            out += _flat_tensors(v)
        return out
    return []


def max_abs_diff(a, b) -> Optional[float]:
    """Largest |a - b| over the tensors of two outputs (NaN in both places counts as equal); None when their
    structures differ."""
    import torch
    ta, tb = _flat_tensors(a), _flat_tensors(b)
    if len(ta) != len(tb) or any(x.shape != y.shape for x, y in zip(ta, tb)):
        return None
    worst = 0.0
    for x, y in zip(ta, tb):
        if x.numel() == 0:
            continue
        x, y = x.detach().double(), y.detach().double()
        both_nan = torch.isnan(x) & torch.isnan(y)
        d = (x - y).abs().masked_fill(both_nan, 0)
        d = d.masked_fill(torch.isinf(x) & torch.isinf(y) & (x == y), 0)
        worst = max(worst, float(d.max()))
    return worst


# ---------------------------------------------------------------------------------------------------
# Step 3: timing.


def bench_entries(lib, entries: list, model, grad_mode: str, opts, timer: Timer) -> dict:
    """Per entry: eager and kiln per-call times through the dispatcher on the gate's shapes, a call that
    misses, and the bare launch. Alternates eager and kiln `rounds` times; medians."""
    import kiln
    modules = dict(model.named_modules()) if model is not None else {}
    benches, results = {}, {}
    for e in entries:
        if e.kind == "chain":  # no eager route (decide() judges it by the gate; kiln + torch.compile times it)
            continue
        try:
            benches[e.name] = EntryBench(e, lib, modules)
        except Exception as why:  # noqa: BLE001 - any reason is a reason not to install
            results[e.name] = {"error": f"cannot benchmark: {why}"}
    if not benches:
        return results
    samples = {n: {"eager": [], "kiln": [], "eager_miss": [], "kiln_miss": [], "raw": [], "hits": 0}
               for n in benches}
    targets = {e.name: e.target for e in entries}
    paths = {}  # entry -> "cpp" or "python": the path its calls took (Installation.dispatch)
    with _grad_context("no_grad" if grad_mode == "grad" else grad_mode):
        try:  # time aten entries as models call them (torch.softmax, not torch.ops.aten.softmax.int)
            prefer_bindings(lib, benches, model)
        except Exception:  # noqa: BLE001 - torch.ops then, as before
            pass
        if _gpu_failed(lib):  # its calls of kiln's kernels run on the gate's inputs, unchecked
            raise GpuFault("the check of which Python binding reaches each entry (kiln's kernels on the gate's "
                           "inputs)", RuntimeError("a synchronize after it failed"))

        def timed(doing: str, measure, fn, arg):
            """measure(fn, arg) (timer.iterations or timer.per_call_us); a failure that took the GPU's context
            with it stops the check as a GpuFault naming `doing`: no later call can run."""
            try:
                return measure(fn, arg)
            except Exception as why:  # noqa: BLE001
                if _gpu_failed(lib):
                    raise GpuFault(doing, why) from why
                raise
        counts = {}
        for n, b in list(benches.items()):  # one entry's failing call is its own verdict, not the check's
            try:
                counts[n] = (timed(f"{n}'s eager call on the gate's inputs", timer.iterations,
                                   lambda b=b: b.call(b.inputs), 0.01),
                             timed(f"{n}'s eager call on inputs the gate misses", timer.iterations,
                                   lambda b=b: b.call(b.miss_inputs), 0.01))
            except GpuFault:
                raise
            except Exception as why:  # noqa: BLE001
                results[n] = {"error": f"cannot benchmark: its eager call fails ({type(why).__name__}: "
                                       f"{' '.join(str(why).split())[:200]})"}
                del benches[n], samples[n]
        if not benches:
            return results
        kiln_counts = {}
        for r in range(opts.rounds):
            if r and _past_deadline(opts):
                break
            for n, b in benches.items():
                samples[n]["eager"].append(timed(f"{n}'s eager calls", timer.per_call_us,
                                                 lambda b=b: b.call(b.inputs), counts[n][0]))
                samples[n]["eager_miss"].append(timed(f"{n}'s eager calls on inputs the gate misses",
                                                      timer.per_call_us, lambda b=b: b.call(b.miss_inputs),
                                                      counts[n][1]))
            inst = kiln.install(lib, model=model, entries=list(benches))
            paths.update({n: inst.dispatch.get(targets[n], "python") for n in benches})
            try:
                for n, b in benches.items():
                    hit, miss, raw = (f"{n}'s calls with kiln installed", f"{n}'s calls on inputs the gate misses, "
                                      "kiln installed", f"{n}'s bare launches of its kernel")
                    if n not in kiln_counts:  # kiln's loops sized by kiln's own call, as eager's by eager's: a
                        # kernel 100x slower than eager ran eager's count of calls (seconds an entry a round)
                        kiln_counts[n] = (timed(hit, timer.iterations, lambda b=b: b.call(b.inputs), 0.01),
                                          timed(miss, timer.iterations, lambda b=b: b.call(b.miss_inputs), 0.01),
                                          timed(raw, timer.iterations, b.raw(lib), 0.01))
                    before = inst.stats()["entries"].get(n, {}).get("hits", 0)
                    samples[n]["kiln"].append(
                        timed(hit, timer.per_call_us, lambda b=b: b.call(b.inputs), kiln_counts[n][0]))
                    samples[n]["hits"] += inst.stats()["entries"].get(n, {}).get("hits", 0) - before
                    samples[n]["kiln_miss"].append(
                        timed(miss, timer.per_call_us, lambda b=b: b.call(b.miss_inputs), kiln_counts[n][1]))
                    samples[n]["raw"].append(timed(raw, timer.per_call_us, b.raw(lib), kiln_counts[n][2]))
                skipped = dict(inst.skipped)
            finally:
                kiln.uninstall()
            for n, why in skipped.items():
                if n in benches and n not in results:
                    results[n] = {"error": why}
    for n, s in samples.items():
        if n in results:
            continue
        med = {k: statistics.median(v) for k, v in s.items() if k != "hits"}
        results[n] = {"eager_us": med["eager"], "kiln_us": med["kiln"], "raw_launch_us": med["raw"],
                      "eager_spread_pct": spread_pct(s["eager"]), "kiln_spread_pct": spread_pct(s["kiln"]),
                      "hit_overhead_us": med["kiln"] - med["raw"],
                      "miss_overhead_us": med["kiln_miss"] - med["eager_miss"],
                      "hits": s["hits"], "rounds": len(s["eager"]), "dispatch": paths.get(n),
                      "call": benches[n].call_form}
    return results


class GpuFault(RuntimeError):
    """The GPU failed during a call of the install check (a kernel's fault is sticky: the process's CUDA context
    is lost, so the check stops); says which call reported it, which is the faulting call or the first one
    after it."""

    def __init__(self, doing: str, why: BaseException):
        super().__init__(f"the GPU failed in {doing}: {type(why).__name__}: {' '.join(str(why).split())[:240]} "
                         "(the faulting call or the first after it; run again with CUDA_LAUNCH_BLOCKING=1 to "
                         "stop at the faulting one)")


def _gpu_failed(lib) -> bool:
    """Whether lib's device is a GPU whose CUDA context has failed (a synchronize raises)."""
    import torch
    if not lib.is_cuda:
        return False
    try:
        torch.cuda.synchronize()
        return False
    except Exception:  # noqa: BLE001 - any failure of the context's own sync
        return True


def _past_deadline(opts, needed_s: float = 0.0) -> bool:
    """Whether the budget's deadline (opts.deadline, a time.monotonic(); None: no budget) is less than
    needed_s away."""
    deadline = getattr(opts, "deadline", None)
    return deadline is not None and time.monotonic() + needed_s >= deadline


def decide(entry, bench: Optional[dict], margin: float) -> tuple:
    """(install?, reason)."""
    if entry.disabled:
        return False, f"disabled: {entry.disabled}"
    if entry.kind == "chain":
        # eager never sees a chain whole (docs/install.md): the entry serves kiln + torch.compile and kiln's graph
        # mode, where the model's timings say whether it paid
        s = entry.speedup
        if not s:  # None: the gate's timings could not support a speedup either way (it was not 0.00x)
            return False, "the gate's timings show no speedup over the eager chain (too noisy to give one)"
        if s <= 1 + margin:
            return False, f"the gate's kernel is not faster than the eager chain ({s:.2f}x)"
        return True, (f"{s:.2f}x the eager chain in the gate; a chain is replaced in a graph only (the kiln + "
                      "torch.compile column and kiln graph mode)")
    if bench is None:
        return False, "not benchmarked"
    if "error" in bench:
        return False, bench["error"]
    if bench["hits"] == 0:
        return False, "the gate did not admit the entry's own captured call (a bug: please report it)"
    e, k = bench["eager_us"], bench["kiln_us"]
    if k >= e * (1 - margin):
        return False, (f"no end-to-end win: {e:.1f} us eager, {k:.1f} us with kiln per call, dispatch included "
                       f"(kernel and launch alone {bench['raw_launch_us']:.1f} us)")
    verdict, value, _ = speedup_judge(e, bench.get("eager_spread_pct"), k, bench.get("kiln_spread_pct"))
    if verdict == "noisy_baseline":
        return False, (f"eager's per-call time is too noisy to compare with (spread "
                       f"{bench['eager_spread_pct']:.0f}% over {bench.get('rounds')} rounds)")
    if value is None:
        return False, (f"no win the spreads support: {e:.1f} us eager, {k:.1f} us with kiln per call (spreads "
                       f"{bench.get('eager_spread_pct') or 0:.0f}% and {bench.get('kiln_spread_pct') or 0:.0f}%)")
    return True, f"{e / k:.2f}x per call with dispatch ({e:.1f} -> {k:.1f} us)"


def write_decisions(lib, decisions: dict, run_mode: Optional[dict] = None) -> str:
    """RUN/library/install.json: per entry whether to install it (and inside torch.compile), and with run_mode
    ({"mode", "reason"}) how a plain `kiln run` runs the model: the fastest way the forward's timings support."""
    path = os.path.join(lib.path, "install.json")
    data = {"kiln_install": 1, "written_by": "kiln tune", "manifest_sha256": lib.manifest_digest(),
            "written_unix_s": int(time.time()), "entries": decisions}
    if run_mode:
        data["run_mode"] = run_mode
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)
    return path


def run_mode_of(report: dict) -> Optional[dict]:
    """How a plain `kiln run` should run this model (install.json's "run_mode"): the mode of the way the report
    recommends (tune_report.recommend), with the figures that chose it. None when the forward was not timed."""
    rec = recommend(report)
    if rec is None:
        return None
    eager = report["model"]["eager_ms"]
    return {"mode": rec["mode"], "way": rec["way"],
            "reason": f"kiln tune timed {rec['way']} the fastest way the spreads support: {rec['ms']:.3f} ms a "
                      f"forward against eager's {eager:.3f} ms"}


def _out_of_time(what: str) -> str:
    return f"out of time (--time) before {what} finished"


OUT_OF_TIME = _out_of_time("torch.compile")


# One timed loop of the model's forward. On the H200 0.3 s gave Gemma-4 8 forwards a loop and torch.compile's
# rounds spread 4.8 %, too wide to support kiln + torch.compile's 1.03x (a win of 0.57 ms a forward), while
# the install check used 128 of the 288 s kept for it; a loop of a second averages three times as many.
FORWARD_LOOP_S = {"cuda": 1.0, "cpu": 0.3}


def _round_target_s(opts, target_s: float) -> float:
    """The length of one timed loop: target_s, or less when the budget's deadline is near (four loops a
    round, --rounds rounds in what is left)."""
    deadline = getattr(opts, "deadline", None)
    if deadline is None:
        return target_s
    return max(min(target_s, (deadline - time.monotonic()) / (4 * opts.rounds)), 0.001)


def _rounds(opts, measure) -> list:
    """measure() --rounds times, or fewer (at least once) when the deadline comes first."""
    out = []
    for r in range(opts.rounds):
        if r and _past_deadline(opts):
            break
        out.append(measure())
    return out


def time_model(root: RootCall, lib, opts, timer: Timer, compile_too: bool) -> dict:
    """Forward time of the model eager vs kiln (alternating) vs torch.compile; output differences."""
    import torch

    import kiln
    model, args, kwargs = root.module, root.args, root.kwargs
    out: dict = {"root": type(model).__name__, "grad_mode": root.grad_mode, "calls_in_script": root.calls,
                 "rounds": opts.rounds}
    forward = lambda: model(*args, **kwargs)  # noqa: E731
    with _grad_context(root.grad_mode):
        eager_out = forward()
        for _ in range(2):  # warm-up: allocator, thread pools, lazy initialisation
            forward()
        n = timer.iterations(forward, _round_target_s(opts, FORWARD_LOOP_S.get(getattr(opts, "backend", None), 0.3)))
        out["iterations"] = n
        eager, with_kiln = [], []
        kiln_out, stats = None, None
        for r in range(opts.rounds):
            if r and _past_deadline(opts):
                break
            eager.append(timer.per_call_us(forward, n))
            if lib is None:
                continue
            inst = kiln.install(lib, model=model)
            try:
                inst.reset_stats()
                result = forward()  # untimed: binds the modules, warms kiln's path
                if r == 0:
                    kiln_out, stats = result, inst.stats()
                    out["kiln_entries_installed"] = list(inst.installed)
                    # kiln's loop sized by kiln's own forward (eager's n of a forward several times slower
                    # ran the install check past --time)
                    n_kiln = timer.iterations(forward, _round_target_s(
                        opts, FORWARD_LOOP_S.get(getattr(opts, "backend", None), 0.3)))
                with_kiln.append(timer.per_call_us(forward, n_kiln))
            finally:
                kiln.uninstall()
        out["rounds"] = len(eager)
        out["eager_ms"] = statistics.median(eager) / 1e3
        out["eager_spread_pct"] = spread_pct(eager)
        if with_kiln:
            out["kiln_ms"] = statistics.median(with_kiln) / 1e3
            out["kiln_spread_pct"] = spread_pct(with_kiln)
            out["kiln_speedup"] = out["eager_ms"] / out["kiln_ms"]
            out["kiln_max_abs_diff"] = max_abs_diff(kiln_out, eager_out)
            out["kiln_hits_per_forward"] = stats["hits"] if stats else None
            out["kiln_misses_per_forward"] = stats["misses"] if stats else None
            out["entry_hits_per_forward"] = {n: e["hits"] for n, e in (stats or {}).get("entries", {}).items()}
        again = forward()
        out["eager_repeatable"] = max_abs_diff(again, eager_out) == 0
        if compile_too and _past_deadline(opts, 1.0):
            out["compile_error"] = OUT_OF_TIME
        elif compile_too:
            try:
                compiled = torch.compile(model)
                t0 = time.perf_counter()
                compiled_out = compiled(*args, **kwargs)
                compiled(*args, **kwargs)
                out["compile_warmup_s"] = round(time.perf_counter() - t0, 2)
                cf = lambda: compiled(*args, **kwargs)  # noqa: E731
                times = _rounds(opts, lambda: timer.per_call_us(cf, n))
                out["compile_ms"] = statistics.median(times) / 1e3
                out["compile_spread_pct"] = spread_pct(times)
                out["compile_speedup"] = out["eager_ms"] / out["compile_ms"]
                out["compile_max_abs_diff"] = max_abs_diff(compiled_out, eager_out)
            except Exception as e:  # noqa: BLE001 - torch.compile's failure is a result, not ours
                out["compile_error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
            except KeyboardInterrupt:  # Ctrl-C or a time limit (SIGINT) during a long compile: keep the rest
                out["compile_error"] = "interrupted (SIGINT) before torch.compile finished"
            except OutOfTime:
                out["compile_error"] = OUT_OF_TIME
        if compile_too and lib is not None and out.get("kiln_entries_installed"):
            time_kiln_compile(root, lib, opts, timer, out, eager_out)
        elif compile_too:
            out["kiln_compile_note"] = ("no library: kiln + torch.compile is not measured" if lib is None else
                                        "nothing installed: kiln + torch.compile is torch.compile")
    return out


def _kiln_way_keys(prefix: str) -> tuple:
    return tuple(prefix + k for k in ("ms", "spread_pct", "speedup", "vs_compile", "max_abs_diff", "entries", "error",
                                      "warmup_s", "hits_per_forward", "entry_hits_per_forward", "note",
                                      "notes"))


KILN_COMPILE_KEYS = _kiln_way_keys("kiln_compile_")  # kiln + torch.compile


def time_kiln_compile(root: RootCall, lib, opts, timer: Timer, out: dict, eager_out=None, entries=None,
                      graph: bool = False) -> None:
    """The "kiln + torch.compile" column, into `out` (time_model's dict: its eager_ms, iterations and rounds
    are used): torch.compile of the model with the library installed (the entries install.json keeps),
    so that module entries run as kiln:: custom ops inside the compiled graph. Same timer, same forward,
    max difference against eager. A failure is an error string; SIGINT leaves "interrupted".
    graph: the "kiln graph" column instead (kiln_graph_* keys): the model compiled with kiln's graph mode as the
    backend (no Inductor) and the entries kept for eager, chains included."""
    import torch

    import kiln
    from kiln.install_graph import graph_notes
    from kiln.install_inductor import compile_notes
    p = "kiln_graph_" if graph else "kiln_compile_"
    what = "kiln's graph mode" if graph else "torch.compile"
    for k in _kiln_way_keys(p):
        out.pop(k, None)
    if not graph and str(out.get("compile_error", "")).startswith("interrupted"):
        out[p + "error"] = "interrupted (SIGINT) before torch.compile finished"
        return
    out_of_time = _out_of_time(what)
    if (not graph and out.get("compile_error") == OUT_OF_TIME) or _past_deadline(opts, 1.0):
        out[p + "error"] = out_of_time
        return
    model, args, kwargs = root.module, root.args, root.kwargs
    n = out.get("iterations") or 1
    with _grad_context(root.grad_mode):
        try:
            if eager_out is None:
                eager_out = model(*args, **kwargs)
            torch._dynamo.reset()  # nothing traced without kiln may be reused
            # graph mode as `kiln run --graph` has it: the model compiled in place, module entries as patterns
            inst = kiln.install(lib, model=model, entries=entries, compile="graph" if graph else False)
            try:
                if not inst.installed:
                    out[p + "note"] = f"nothing installed: kiln + {what} is {what}"
                    return
                out[p + "entries"] = list(inst.installed)
                compiled = model if graph else torch.compile(model)
                t0 = time.perf_counter()
                kc_out = compiled(*args, **kwargs)
                compiled(*args, **kwargs)
                out[p + "warmup_s"] = round(time.perf_counter() - t0, 2)
                inst.reset_stats()
                compiled(*args, **kwargs)
                stats = inst.stats()
                out[p + "hits_per_forward"] = stats["hits"]
                out[p + "entry_hits_per_forward"] = {k: e["hits"] for k, e in stats["entries"].items()}
                notes = graph_notes(inst) if graph else compile_notes(inst)
                if notes:
                    out[p + "notes"] = notes
                kf = lambda: compiled(*args, **kwargs)  # noqa: E731
                times = _rounds(opts, lambda: timer.per_call_us(kf, n))
                out[p + "ms"] = statistics.median(times) / 1e3
                out[p + "spread_pct"] = spread_pct(times)
                out[p + "speedup"] = out["eager_ms"] / out[p + "ms"]
                if out.get("compile_ms"):
                    out[p + "vs_compile"] = out["compile_ms"] / out[p + "ms"]
                out[p + "max_abs_diff"] = max_abs_diff(kc_out, eager_out)
            finally:
                kiln.uninstall()
                torch._dynamo.reset()  # the kiln graphs call ops that uninstall removed
        except Exception as e:  # noqa: BLE001 - a failure inside torch.compile is a result, not ours
            out[p + "error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
        except KeyboardInterrupt:
            out[p + "error"] = f"interrupted (SIGINT) before {what} finished"
        except OutOfTime:
            out[p + "error"] = out_of_time


def _drop_until_faster(root, lib, opts, timer, report: dict, decisions: dict, entries_out: list) -> None:
    """Entries win per call, but the model is what must get faster: while the forward with kiln is not
    faster than eager, the installed entry that saves the least per forward (per-call saving times hits)
    is dropped and the model timed again. The compile column of the first timing is kept; the kiln +
    torch.compile column, measured with the entries of the first timing, is measured again by
    install_check once the set is final."""
    first = report["model"]
    while True:
        m = report["model"]
        # a chain entry does not change the eager forward: dropping it could not make kiln's column faster
        installed = [r for r in entries_out if r["installed"] and not r.get("compile_only")]
        if not installed or m.get("kiln_ms") is None or m["kiln_ms"] < m["eager_ms"]:
            return
        hits = m.get("entry_hits_per_forward") or {}

        def saving(r):
            per_call = (r.get("op_eager_us") or 0) - (r.get("op_kiln_us") or 0)
            return per_call * max(hits.get(r["name"], 0), 0)
        worst = min(installed, key=saving)
        why = (f"dropped: the model forward was not faster with the entries installed "
               f"({m['kiln_ms']:.3f} ms vs {m['eager_ms']:.3f} ms eager); this one saved the least per "
               f"forward ({saving(worst):.1f} us over {hits.get(worst['name'], 0)} hits)")
        _log(f"kiln tune: {worst['name']}: {why}")
        worst["installed"], worst["reason"] = False, why
        decisions[worst["name"]] = {"install": False, "reason": why}
        report["install_json"] = write_decisions(lib, decisions)
        report.setdefault("model_dropped", []).append(
            {"entry": worst["name"], "kiln_ms": m["kiln_ms"], "eager_ms": m["eager_ms"]})
        if not any(r["installed"] and not r.get("compile_only") for r in entries_out):
            # nothing left installed: the forward is eager's own, no need to time it again
            again = {k: v for k, v in m.items() if not k.startswith("kiln_") and k != "entry_hits_per_forward"}
            again.update(kiln_ms=m["eager_ms"], kiln_speedup=1.0, kiln_max_abs_diff=0.0,
                         kiln_note="nothing installed: the forward with kiln is eager's")
            report["model"] = again
            if any(r["installed"] for r in entries_out):  # chain entries: kiln + torch.compile is timed again
                report["model_kiln_compile_stale"] = True
                return
            if any(k in first for k in KILN_COMPILE_KEYS):
                again["kiln_compile_note"] = "nothing installed: kiln + torch.compile is torch.compile"
            report.pop("model_kiln_compile_stale", None)
            return
        again = time_model(root, lib, opts, timer, False)
        for k in ("compile_ms", "compile_spread_pct", "compile_speedup", "compile_max_abs_diff", "compile_error",
                  "compile_warmup_s"):
            if k in first:
                again[k] = first[k]
        report["model"] = again
        report["model_kiln_compile_stale"] = True


def choose_compile_set(root: RootCall, lib, opts, timer: Timer, report: dict, decisions: dict,
                       entries_out: list) -> None:
    """Which entries `kiln run --compile` puts inside torch.compile (install.json's "compile"): kiln's custom
    ops can cost Inductor the fusions around them (Gemma-4 on the H200: softmax and RMSNorm entries, each
    3.5-10x eager per call, made the compiled forward 3 % slower than torch.compile alone). The set timed in
    the kiln + torch.compile column, and the chain entries alone (a chain replaces a whole fused group) when
    that is another set and the time allows; the faster is kept if it beats torch.compile alone beyond the
    spreads, else none is (kiln + torch.compile is then torch.compile's own)."""
    m = report.get("model") or {}
    if m.get("compile_ms") is None or m.get("kiln_compile_ms") is None or not m.get("kiln_compile_entries"):
        return
    best = {k: m.get(k) for k in KILN_COMPILE_KEYS}
    chains = [r["name"] for r in entries_out if r["installed"] and r.get("compile_only")]
    if chains and set(chains) != set(m["kiln_compile_entries"]) and not _past_deadline(
            opts, 2 * (m.get("kiln_compile_warmup_s") or 30.0)):
        alt: dict = {"eager_ms": m["eager_ms"], "compile_ms": m["compile_ms"], "iterations": m.get("iterations")}
        time_kiln_compile(root, lib, opts, timer, alt, entries=chains)
        other = {k: alt[k] for k in KILN_COMPILE_KEYS if k in alt}
        if alt.get("kiln_compile_ms") is not None and alt["kiln_compile_ms"] < best["kiln_compile_ms"]:
            # the column shows the faster set; the other is kept beside it
            best, other = {k: alt.get(k) for k in KILN_COMPILE_KEYS}, {k: v for k, v in best.items() if v is not None}
            for k in KILN_COMPILE_KEYS:
                m.pop(k, None)
                if best.get(k) is not None:
                    m[k] = best[k]
        report["model_kiln_compile_alternative"] = other
    _, value, _ = speedup_judge(m["compile_ms"], m.get("compile_spread_pct"), best["kiln_compile_ms"],
                                      best.get("kiln_compile_spread_pct"))
    chosen = set(best["kiln_compile_entries"]) if value is not None and value > 1 else set()
    for name, d in decisions.items():
        d["compile"] = name in chosen
        d["compile_reason"] = (
            f"kiln + torch.compile {best['kiln_compile_ms']:.3f} ms vs torch.compile {m['compile_ms']:.3f} ms "
            + ("with this set" if name in chosen else
               "(not faster beyond the spreads): torch.compile alone" if not chosen else "without this entry"))
    report["compile_entries"] = sorted(chosen)
    report["install_json"] = write_decisions(lib, decisions)


def install_check(opts, library_dir: Optional[str], report: dict) -> None:
    """Step 3: finds the model, times every entry of the library at library_dir per call and decides
    (install.json), times the model's forward. Without a library (nothing to optimise) the forward is timed
    eager and with torch.compile all the same."""
    import torch

    from kiln.install_cpp import _dispatch_mode
    from kiln.install_runtime import KilnError, Library
    _log(f"kiln tune [3/4] install check: running {opts.script} once more to find the model")
    cuda = opts.backend == "cuda"
    timer = Timer(cuda)
    roots = watch_script(opts)
    root = roots[0] if roots else None
    report["model_search"] = [{"module": type(r.module).__name__, "calls": r.calls, "seconds": round(r.seconds, 4),
                               "grad_mode": r.grad_mode} for r in roots[:5]]
    lib = None
    try:
        if library_dir is None:
            raise FileNotFoundError
        lib = Library(library_dir)
        report["library"] = {"path": lib.path, "backend": lib.backend, "device": lib.info.get("device"),
                             "library_device": lib.info.get("library_device"), "build": lib.info.get("build"),
                             "notes": lib.info.get("notes", []), "n_entries": len(lib.entries),
                             "dispatch": _dispatch_mode(None, lib.is_cuda)}
    except FileNotFoundError:
        report["library"] = None
    except KilnError as e:
        report["library"] = {"path": library_dir, "refused": str(e)}
        _log(f"kiln tune: {e}")
    entries_out = []
    if lib is not None:
        usable = [e for e in lib.entries if not e.disabled]
        grad_mode = root.grad_mode if root else "inference"
        _log(f"kiln tune: timing {len(usable)} entries per call, eager vs kiln, {opts.rounds} rounds")
        benches = bench_entries(lib, usable, root.module if root else None, grad_mode, opts, timer)
        decisions = {}
        for e in lib.entries:
            ok, why = decide(e, benches.get(e.name), opts.margin)
            decisions[e.name] = {"install": ok, "reason": why}
            b = benches.get(e.name) or {}
            spreads = e.data.get("spread_pct") or {}
            entries_out.append({
                "name": e.name, "target": e.target, "kernel_speedup": e.speedup,
                "kernel_speedup_verdict": e.data.get("speedup_verdict"),
                "kernel_time_us": e.time_us.get("kiln"), "kernel_eager_us": e.time_us.get("eager"),
                "kernel_spread_pct": spreads.get("kiln"), "kernel_eager_spread_pct": spreads.get("eager"),
                "kernel_compile_us": e.time_us.get("compile"), "share": e.data.get("share"),
                "library_install": e.data.get("install"),
                "op_eager_us": b.get("eager_us"), "op_kiln_us": b.get("kiln_us"),
                "op_eager_spread_pct": b.get("eager_spread_pct"), "op_kiln_spread_pct": b.get("kiln_spread_pct"),
                "raw_launch_us": b.get("raw_launch_us"), "hit_overhead_us": b.get("hit_overhead_us"),
                "miss_overhead_us": b.get("miss_overhead_us"), "dispatch": b.get("dispatch"),
                "installed": ok, "reason": why,
                "compile_only": e.kind == "chain"})
        report["install_json"] = write_decisions(lib, decisions)
    report["entries"] = entries_out
    if root is None:
        report["model"] = None
        report["model_note"] = "the script called no torch.nn.Module: there is no model forward to time"
    else:
        compile_too = opts.compile if opts.compile is not None else cuda
        _log(f"kiln tune: timing {type(root.module).__name__} forward: eager vs kiln"
             + (" vs torch.compile vs kiln + torch.compile" if compile_too else ""))
        report["model"] = time_model(root, lib, opts, timer, compile_too)
        if lib is not None:
            _drop_until_faster(root, lib, opts, timer, report, decisions, entries_out)
            if report.pop("model_kiln_compile_stale", False) and compile_too:
                _log("kiln tune: timing kiln + torch.compile again with the entries kept")
                time_kiln_compile(root, lib, opts, timer, report["model"])
            if compile_too:
                choose_compile_set(root, lib, opts, timer, report, decisions, entries_out)
            if any(r["installed"] and r.get("compile_only") for r in entries_out):
                _log("kiln tune: timing kiln's graph mode (the chains replaced in dynamo's graphs, no Inductor)")
                time_kiln_compile(root, lib, opts, timer, report["model"], graph=True)
        hits = report["model"].get("entry_hits_per_forward") or {}
        for row in entries_out:
            row["hits_per_forward"] = hits.get(row["name"], 0) if row["installed"] else None
        if lib is not None:
            report["install_json"] = write_decisions(lib, decisions, run_mode_of(report))
    if lib is not None:
        lib.close()
    report["torch"] = torch.__version__
    if cuda and torch.cuda.is_available():
        report["device_name"] = torch.cuda.get_device_name()
    else:
        captured = _load_json(os.path.join(report["run_dir"], "capture.json")) or {}
        report["device_name"] = (((report.get("library") or {}).get("device") or {}).get("name")
                                 or captured.get("device_name"))


def main(argv: Optional[list] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        opts = parse_args(argv)
    except TuneError as e:
        print(f"kiln tune: {e}", file=sys.stderr)
        return e.code
    with stdout_to_stderr(opts.json):
        code, report = tune(opts)
    if opts.json:
        print(json.dumps(report, indent=1, default=str))
    return code


class _Alarm:
    """The budget's hard stop inside this process: OutOfTime at the deadline (plus a little, so that the
    install check's own deadline checks come first)."""

    def __init__(self, budget: Budget, slack_s: float = 2.0):
        self.at = budget.left() + slack_s

    def __enter__(self):
        def ring(signum, frame):
            raise OutOfTime()
        self.old = signal.signal(signal.SIGALRM, ring)
        signal.setitimer(signal.ITIMER_REAL, max(self.at, 0.01))
        return self

    def __exit__(self, *exc):
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.old)
        return False


def tune(opts) -> tuple:
    """The four steps within the budget; (exit status, the report written)."""
    if opts.backend is None:
        opts.backend = default_backend()
    if getattr(opts, "time", None) is None:
        opts.time = DEFAULT_TIME_S[opts.backend]
    budget = Budget(opts.time)
    opts.deadline = budget.deadline
    library_dir = opts.library or os.path.join(opts.out, "library")
    report: dict = {"kiln_report": 1, "script": opts.script, "script_args": opts.script_args,
                    "run_dir": opts.out if not opts.library else (opts.out or os.path.dirname(library_dir)),
                    "backend": opts.backend, "steps": {}, "started_unix_s": int(time.time()),
                    "time_budget_s": opts.time, "search": {}}
    _log(f"kiln tune: {opts.time:g} s in all (--time): capture first, then the search for what is left less the "
         f"install check's share (the plan follows the capture), then the install check and the report")
    code = 0
    try:
        if not opts.skip_capture:
            step_capture(opts, report, budget)
        if not opts.skip_optimize:
            step_optimize(opts, report, budget)
        stopped = report["search"].get("stopped")
        have_library = os.path.exists(os.path.join(library_dir, "manifest.json"))
        if stopped == "nothing to optimise":
            have_library = False
        elif not have_library and (opts.library or opts.skip_optimize):
            raise TuneError(f"no library at {library_dir} (run without --skip-optimize, or pass --library)")
        # a search that ran and proved no kernel (or ran out of time first) leaves no library: the model is
        # still timed and the report says, per hot op, what the search found
        t0 = time.perf_counter()
        try:
            with _Alarm(budget):
                install_check(opts, library_dir if have_library else None, report)
        finally:
            report["steps"]["install_check"] = {"seconds": round(time.perf_counter() - t0, 2)}
    except TuneError as e:
        report["error"] = str(e)
        print(f"kiln tune: {e}", file=sys.stderr)
        code = e.code
    except OutOfTime:  # the report says what was measured in time; running out of it is no failure
        report["out_of_time"] = f"the budget (--time {opts.time:g} s) ran out during the install check"
        print(f"kiln tune: {report['out_of_time']}", file=sys.stderr)
        import kiln
        kiln.uninstall()
        if "torch" not in report:  # install_check sets these last: the report's header said "cpu (?), torch ?"
            import torch
            report["torch"] = torch.__version__
            captured = _load_json(os.path.join(report["run_dir"], "capture.json")) or {}
            report["device_name"] = (((report.get("library") or {}).get("device") or {}).get("name")
                                     or captured.get("device_name"))
    except Exception as e:  # noqa: BLE001 - the report says what was done before the failure
        report["error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc()
        code = 1
    except KeyboardInterrupt:  # Ctrl-C after the search: the report still says how far it got
        report["error"] = "interrupted (SIGINT)"
        print("kiln tune: interrupted", file=sys.stderr)
        code = 130
    report["hot_ops"] = hot_ops(report["run_dir"], report)
    report["elapsed_s"] = round(budget.elapsed(), 2)
    write_report(report, good=code == 0)
    return code, report


# ---------------------------------------------------------------------------------------------------
# What became of every hot op.


def _load_json(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def hot_ops(run_dir: str, report: dict, limit: int = 20) -> list:
    """The model's hottest ops, fused modules and chains (RUN/model.json), hottest first, each with what became of it:
    status "installed", "not installed", "not judged" (in the library, the install check stopped first), "no
    kernel" (searched, nothing correct), "not optimised" (kiln optimize skipped it), "not searched" or "not
    captured", and why (the entry's, optimize's or capture's reason)."""
    model = _load_json(os.path.join(run_dir, "model.json")) or {}
    groups = [dict(g, op=g.get("aten")) for g in model.get("groups") or []]
    groups += [dict(g, op=f"module {g.get('module_class')}", not_a_problem=None)
               for g in model.get("module_groups") or []]
    # a chain and its members are rows of their own: each competes for the same time (docs/capture.md)
    groups += [dict(g, op=f"{g.get('pattern') or 'chain'} of {len(g.get('ops_of_first_call') or [])} calls",
                    not_a_problem=None)
               for g in model.get("chain_groups") or [] if not g.get("is_module")]
    groups.sort(key=lambda g: -(g.get("share") or 0))
    problems = {p.get("problem"): p for p in report.get("problems") or []}
    entries = {e.get("name"): e for e in report.get("entries") or []}
    search = report.get("search") or {}
    manifest = _load_json(os.path.join((report.get("library") or {}).get("path") or os.path.join(run_dir, "library"),
                                       "manifest.json")) or {}
    in_library = {e.get("problem") for e in manifest.get("entries") or []}
    rows = []
    for g in groups[:limit]:
        name = g.get("problem")
        row = {"op": g.get("op"), "share": g.get("share"), "calls": g.get("calls"), "problem": name}
        p, e = problems.get(name), entries.get(name)
        if not name:
            row["status"] = "not captured"
            row["why"] = g.get("not_a_problem") or g.get("skipped") or "not among the signatures capture wrote (--top)"
        elif e is not None:
            row["status"] = "installed" if e.get("installed") else "not installed"
            row["why"] = e.get("reason")
        elif p is not None and p.get("skipped"):
            row["status"], row["why"] = "not optimised", p["skipped"]
        elif p is not None and name in in_library:  # kiln optimize wrote it; the install check did not judge it
            row["status"] = "not judged"
            row["why"] = ("in the library; the install check stopped before judging it"
                          + (f" ({report['error'][:120]})" if report.get("error") else ""))
        elif p is not None:
            row["status"] = "no kernel"
            if p.get("best_us") is not None:
                row["why"] = "its winner did not make it into the library (kiln optimize's warnings say why)"
            elif not p.get("results"):  # made, never evaluated: the budget, not the kernels
                row["status"] = "not searched"
                row["why"] = (f"the search stopped ({search.get('stopped') or 'ended'}) before a candidate of it "
                              "was evaluated")
            else:
                row["why"] = f"no correct kernel in {p['results']} evaluated candidates"
        elif search.get("stopped") in ("no time left", "nothing to optimise"):
            row["status"], row["why"] = "not searched", f"the search: {search['stopped']}"
        else:
            row["status"], row["why"] = "not searched", "not among the problems searched (--top)"
        if p is not None:
            for k in ("eager_us", "eager_spread_pct", "best_us", "spread_pct", "speedup", "speedup_ratio",
                      "speedup_verdict", "candidates"):
                row[k] = p.get(k)
        rows.append(row)
    return rows


if __name__ == "__main__":
    sys.exit(main())
