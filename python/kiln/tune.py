"""kiln tune: one command from an unmodified PyTorch script to a report of what kiln's kernels do for it.

    kiln tune SCRIPT.py [options] [-- SCRIPT ARGS...]     (`kiln tune --help` lists them)

Four steps, each printed as it runs:

1. capture    `python -m kiln.capture SCRIPT --out RUN --device BACKEND -- ARGS`: the script's hot ops and
              fused leaf modules become problems (docs/capture.md).
2. optimize   `kiln optimize RUN --backend BACKEND [--budget N]`: kernels are searched, proved and timed;
              the winners are written to RUN/library (manifest.json + kernels).
3. install check, in this process: the script runs once more, eagerly, while kiln watches which module it
              calls at the top (the model) and with which arguments. Then, per library entry, the op (or the
              module) is timed through PyTorch's dispatcher on the gate's exact shapes — eager against kiln,
              dispatch cost included, alternating — and an entry is kept only where kiln wins by more than
              --margin. The decisions go to RUN/library/install.json, which `kiln run` and
              kiln.install() read. Finally the model's forward is timed eager vs kiln (the kept entries)
              vs torch.compile vs torch.compile with kiln installed (its module entries are custom ops
              inside the compiled graph) in the same process, alternating eager and kiln, and the outputs
              are compared.
4. report     RUN/report.md and RUN/report.json: per model the forward time eager / kiln / torch.compile /
              kiln + torch.compile and the max output difference against eager; per entry the kernel
              speedup (from the gate), the per-call times with dispatch, the gate's hit and miss overhead,
              and whether it was installed and why not.

How the model is found (nothing in the script changes): while the script runs, `torch.nn.Module.__call__`
is wrapped for the duration of that one run, and every call that is not inside another module's call (a
*root* call) is recorded with its arguments and grad mode. The root module whose calls took the most time
is the model; its last call's arguments are replayed for the timings. A script that calls no module has no
model to time; the report then has the entries but no model line.

--compile is on by default on cuda and off on cpu (torch.compile on a CPU needs a C++ toolchain and
minutes). --library DIR skips steps 1 and 2 and checks that library. Interrupted (SIGINT, e.g. `timeout -s
INT`), the report is still written with what was done, and an interrupted torch.compile only loses the
compile columns ("interrupted").
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
import traceback
from typing import Optional

from kiln import default_backend, split_script_args
from kiln.cli import Parser, UsageError, stdout_to_stderr

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class TuneError(Exception):
    """A step that failed, reported as one clear message; code is the exit status."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def parser() -> Parser:
    """`kiln tune`'s command line (its --help)."""
    p = Parser(
        "tune", ["SCRIPT.py [options] [-- SCRIPT ARGS...]"],
        "One command from an unmodified PyTorch script to a report of what kiln's kernels do for it, in four "
        "steps: capture (kiln capture), optimize (kiln optimize), an install check in this process (each "
        "library entry is timed through PyTorch's dispatcher, eager against kiln, and kept only where kiln "
        "wins by more than --margin; the decisions go to RUN/library/install.json, which kiln run and "
        "kiln.install read), and a report, RUN/report.md and RUN/report.json: the model's forward eager, with "
        "kiln, with torch.compile and with both, and per entry why it was installed or not. Everything after "
        "`--` goes to the script.",
        [(0, "the report was written"),
         (1, "a step failed (its output says why; the report says what was done)"),
         (2, "bad invocation"),
         (130, "interrupted (SIGINT): the report says what was done")],
        "kiln tune examples/resnet50.py --backend cpu --budget 8 -- --small",
        unknown_hint=" (the script's own arguments go after `--`)")
    p.add_argument("script")
    p.option("--out", metavar="RUN", default_text="runs/<script name>", help="the run directory")
    p.option("--backend", metavar="cuda|cpu", choices=["cuda", "cpu"], unknown="backend", default_text="cuda when PyTorch sees a GPU",
             help="where kernels are searched and the model runs")
    p.option("--budget", metavar="N", kind="int", default_text="kiln optimize's", help="candidates per problem, as kiln optimize "
             "--budget")
    p.option("--top", metavar="N", kind="int", default_text="kiln capture's",
             help="problems per kind captured, and optimized, as kiln capture --top")
    p.option("--compile", dest="compile", action="store_true", default=None, default_text="on cuda",
             help="time torch.compile and kiln inside torch.compile too")
    p.option("--no-compile", dest="compile", action="store_false", help="do not time torch.compile")
    p.option("--rounds", metavar="R", kind="int", lo=1, default=5, help="alternating timing rounds")
    p.option("--margin", metavar="M", kind="number", default=0.02,
             help="an entry is kept when kiln is faster than eager by more than this fraction")
    p.option("--dispatch", metavar="python|cpp|auto", choices=["python", "cpp", "auto"],
             default_text="$KILN_DISPATCH, else python",
             help="how aten entries are dispatched, as kiln.install's dispatch=")
    p.option("--library", metavar="DIR", help="check this library; skips capture and optimize")
    p.option("--skip-capture", action="store_true", help="use RUN's existing capture")
    p.option("--skip-optimize", action="store_true", help="use RUN/library as it is")
    p.option("--serve", metavar="[=PORT]", nargs="?", const="", default_text="kiln optimize --serve's port",
             help="serve the dashboard while kiln optimize runs (kiln optimize --serve)")
    p.option("--json", action="store_true",
             help="print RUN/report.json on stdout when done; every step's output goes to stderr")
    return p


def parse_args(argv: list) -> argparse.Namespace:
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
    if opts.dispatch:
        os.environ["KILN_DISPATCH"] = opts.dispatch  # every kiln.install of this process (and kiln run's)
    return opts


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
# Steps 1 and 2: other processes.


def step_capture(opts, report: dict) -> None:
    cmd = [sys.executable, "-m", "kiln.capture", opts.script, "--out", opts.out, "--device", opts.backend]
    if opts.top:
        cmd += ["--top", str(opts.top)]
    cmd += ["--", *opts.script_args]
    _log(f"kiln tune [1/4] capture: {' '.join(cmd[1:])}")
    t0 = time.perf_counter()
    rc = subprocess.call(cmd, env=_env())
    report["steps"]["capture"] = {"rc": rc, "seconds": round(time.perf_counter() - t0, 2)}
    if rc != 0:
        raise TuneError(f"capture failed (exit status {rc}); its output above says why")


def optimize_available(kiln: str) -> Optional[str]:
    """None when `kiln optimize` can run, else why not."""
    if not os.path.exists(kiln):
        return f"{kiln} does not exist: build kiln with `make` in {ROOT}"
    try:
        p = subprocess.run([kiln, "optimize", "--help"], capture_output=True, text=True, timeout=30)
    except OSError as e:
        return f"cannot run {kiln}: {e}"
    if p.returncode != 0:
        return (f"`{kiln} optimize --help` failed ({(p.stderr or p.stdout).strip()[:200]}); rebuild kiln, or "
                "pass --library DIR to check an existing library")
    return None


def step_optimize(opts, report: dict) -> None:
    kiln = _kiln_binary()
    why = optimize_available(kiln)
    if why:
        report["steps"]["optimize"] = {"rc": None, "error": why}
        raise TuneError(f"optimize: {why}")
    cmd = [kiln, "optimize", opts.out, "--backend", opts.backend]
    if opts.budget:
        cmd += ["--budget", str(opts.budget)]
    if opts.top:
        cmd += ["--top", str(opts.top)]
    if opts.serve is not None:
        cmd += [f"--serve={opts.serve}" if opts.serve else "--serve"]
    _log(f"kiln tune [2/4] optimize: {' '.join(cmd)}")
    t0 = time.perf_counter()
    rc = subprocess.call(cmd, env=_env())
    report["steps"]["optimize"] = {"rc": rc, "seconds": round(time.perf_counter() - t0, 2)}
    if rc != 0:
        raise TuneError(f"kiln optimize failed (exit status {rc}); its output above says why")
    if not os.path.exists(os.path.join(opts.out, "library", "manifest.json")):
        raise TuneError(f"kiln optimize wrote no {os.path.join(opts.out, 'library', 'manifest.json')}")


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


class Timer:
    """Wall time per call of fn with the device synchronised around the loop: for a GPU that is the cost
    of a call in a stream of calls (host dispatch or kernel, whichever is longer), which is what a model
    pays."""

    def __init__(self, cuda: bool):
        import torch
        self.sync = torch.cuda.synchronize if cuda else (lambda: None)

    def iterations(self, fn, target_s: float) -> int:
        fn()
        self.sync()
        t0 = time.perf_counter()
        fn()
        self.sync()
        one = max(time.perf_counter() - t0, 1e-7)
        return int(min(max(target_s / one, 1), 10000))

    def per_call_us(self, fn, n: int) -> float:
        self.sync()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        self.sync()
        return (time.perf_counter() - t0) / n * 1e6


def _gate_tensor(spec: dict, device, misaligned: bool = False):
    """A tensor with exactly the gate's dtype, shape and strides (and, misaligned, one element off a 16-byte
    boundary, so that the gate must miss): floats normal, integers and bools zero (a valid index)."""
    import torch
    from kiln.install_gate import _torch_dtype
    dtype = _torch_dtype(spec["dtype"])
    shape, strides = [int(s) for s in spec["shape"]], [int(s) for s in spec["strides"]]
    n = 1 + sum((s - 1) * st for s, st in zip(shape, strides)) if all(shape) else 0
    extra = 1 if misaligned else 0
    if dtype.is_floating_point:
        base = torch.randn(n + extra, device=device).to(dtype)
    else:
        base = torch.zeros(n + extra, dtype=dtype, device=device)
    return base.as_strided(shape, strides, extra)


def _call_template(template, tensors: list):
    from kiln.install_gate import _Slot
    if isinstance(template, _Slot):
        return tensors[template.index]
    if isinstance(template, list):
        return [_call_template(t, tensors) for t in template]
    if isinstance(template, str) and template.startswith("torch."):
        import torch
        return getattr(torch, template[len("torch."):], template)
    if isinstance(template, str) and template in ("inf", "-inf", "nan"):
        return float(template)
    return template


class EntryBench:
    """The per-call benchmark of one entry: the call the gate was built from, and one that must miss."""

    def __init__(self, entry, lib, model_modules: dict):
        import torch

        from kiln.install_aten import _resolve_overload
        from kiln.install_gate import _template
        self.entry = entry
        self.device = torch.device("cuda", lib.device_index) if lib.is_cuda else torch.device("cpu")
        self.inputs = [_gate_tensor(g, self.device) for g in entry.inputs]
        self.miss_inputs = [_gate_tensor(g, self.device, misaligned=True) for g in entry.inputs]
        self.outputs = [_gate_tensor(g, self.device) for g in entry.outputs]
        self.scratch = [torch.zeros(max(entry.scratch_bytes, 1), dtype=torch.uint8, device=self.device)] \
            if entry.has_scratch else []
        if entry.kind == "aten":
            op = _resolve_overload(entry.aten)
            args = [_template(a) for a in entry.args["args"]]
            kwargs = {k: _template(v) for k, v in (entry.args.get("kwargs") or {}).items()}
            inplace = any(a.alias_info is not None and a.alias_info.is_write for a in op._schema.arguments)

            def call(tensors):
                if inplace:  # an in-place op writes its input: give it a fresh one each time
                    tensors = [tensors[0].clone()] + tensors[1:]
                return op(*[_call_template(a, tensors) for a in args],
                          **{k: _call_template(v, tensors) for k, v in kwargs.items()})
            self.call = call
        else:
            names = [g["name"] for g in entry.inputs]
            from kiln.install_module import _is_activation
            act = [i for i, n in enumerate(names) if _is_activation(n)]
            module = next((model_modules[p] for p in entry.module_paths if p in model_modules), None)
            if module is None or len(act) != 1:
                raise ValueError("its module is not in the model that was timed" if module is None
                                 else "a module with more than one tensor argument")
            self.module = module
            self.call = lambda tensors: module(tensors[act[0]])
            # the module's own parameters are the gate's other inputs: time with them, as the model does
            self.inputs = [t if i == act[0] else getattr(module, names[i]) for i, t in enumerate(self.inputs)]
            self.miss_inputs = [t if i == act[0] else getattr(module, names[i])
                                for i, t in enumerate(self.miss_inputs)]

    def raw(self, lib):
        """The bare launch: what a gate hit ends with (libkiln_rt's launch without ctypes argument
        conversion, on PyTorch's current stream), with the pointer array and the stream made once, so that
        "hit overhead" is the gate, the output allocation and the dispatch, not the cost of lib.launch's
        argument checks. Checked once here; the timing loop does not look at the status."""
        import ctypes

        import torch
        tensors = self.inputs + self.outputs + self.scratch
        lib.launch(self.entry, tensors)
        ptrs = (ctypes.c_void_p * len(tensors))(*[t.data_ptr() for t in tensors])
        stream = ctypes.c_void_p(torch._C._cuda_getCurrentRawStream(lib.device_index)) if lib.is_cuda else None
        launch, handle, index, n = lib._launch_fast, lib._handle, self.entry.index, len(tensors)
        return lambda: launch(handle, index, ptrs, n, None, stream)


def bench_entries(lib, entries: list, model, grad_mode: str, opts, timer: Timer) -> dict:
    """Per entry: eager and kiln per-call times through the dispatcher on the gate's shapes, a call that
    misses, and the bare launch. Alternates eager and kiln `rounds` times; medians."""
    import kiln
    modules = dict(model.named_modules()) if model is not None else {}
    benches, results = {}, {}
    for e in entries:
        try:
            benches[e.name] = EntryBench(e, lib, modules)
        except Exception as why:  # noqa: BLE001 - any reason is a reason not to install
            results[e.name] = {"error": f"cannot benchmark: {why}"}
    if not benches:
        return results
    samples = {n: {"eager": [], "kiln": [], "eager_miss": [], "kiln_miss": [], "raw": [], "hits": 0}
               for n in benches}
    with _grad_context("no_grad" if grad_mode == "grad" else grad_mode):
        counts = {n: (timer.iterations(lambda b=b: b.call(b.inputs), 0.01),
                      timer.iterations(lambda b=b: b.call(b.miss_inputs), 0.01)) for n, b in benches.items()}
        for _ in range(opts.rounds):
            for n, b in benches.items():
                samples[n]["eager"].append(timer.per_call_us(lambda b=b: b.call(b.inputs), counts[n][0]))
                samples[n]["eager_miss"].append(
                    timer.per_call_us(lambda b=b: b.call(b.miss_inputs), counts[n][1]))
            inst = kiln.install(lib, model=model, entries=list(benches))
            try:
                for n, b in benches.items():
                    before = inst.stats()["entries"].get(n, {}).get("hits", 0)
                    samples[n]["kiln"].append(timer.per_call_us(lambda b=b: b.call(b.inputs), counts[n][0]))
                    samples[n]["hits"] += inst.stats()["entries"].get(n, {}).get("hits", 0) - before
                    samples[n]["kiln_miss"].append(
                        timer.per_call_us(lambda b=b: b.call(b.miss_inputs), counts[n][1]))
                    samples[n]["raw"].append(timer.per_call_us(b.raw(lib), counts[n][0]))
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
                      "hit_overhead_us": med["kiln"] - med["raw"],
                      "miss_overhead_us": med["kiln_miss"] - med["eager_miss"],
                      "hits": s["hits"]}
    return results


def decide(entry, bench: Optional[dict], margin: float) -> tuple:
    """(install?, reason)."""
    if entry.disabled:
        return False, f"disabled: {entry.disabled}"
    if bench is None:
        return False, "not benchmarked"
    if "error" in bench:
        return False, bench["error"]
    if bench["hits"] == 0:
        return False, "the gate did not admit the entry's own captured call (a bug: please report it)"
    e, k = bench["eager_us"], bench["kiln_us"]
    if k < e * (1 - margin):
        return True, f"{e / k:.2f}x per call with dispatch ({e:.1f} -> {k:.1f} us)"
    return False, (f"no end-to-end win: {e:.1f} us eager, {k:.1f} us with kiln per call, dispatch included "
                   f"(kernel and launch alone {bench['raw_launch_us']:.1f} us)")


def write_decisions(lib, decisions: dict) -> str:
    path = os.path.join(lib.path, "install.json")
    data = {"kiln_install": 1, "written_by": "kiln tune", "manifest_sha256": lib.manifest_digest(),
            "written_unix_s": int(time.time()), "entries": decisions}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)
    return path


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
        n = timer.iterations(forward, 0.3)
        out["iterations"] = n
        eager, with_kiln = [], []
        kiln_out, stats = None, None
        for r in range(opts.rounds):
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
                with_kiln.append(timer.per_call_us(forward, n))
            finally:
                kiln.uninstall()
        out["eager_ms"] = statistics.median(eager) / 1e3
        if with_kiln:
            out["kiln_ms"] = statistics.median(with_kiln) / 1e3
            out["kiln_speedup"] = out["eager_ms"] / out["kiln_ms"]
            out["kiln_max_abs_diff"] = max_abs_diff(kiln_out, eager_out)
            out["kiln_hits_per_forward"] = stats["hits"] if stats else None
            out["kiln_misses_per_forward"] = stats["misses"] if stats else None
            out["entry_hits_per_forward"] = {n: e["hits"] for n, e in (stats or {}).get("entries", {}).items()}
        again = forward()
        out["eager_repeatable"] = max_abs_diff(again, eager_out) == 0
        if compile_too:
            try:
                compiled = torch.compile(model)
                t0 = time.perf_counter()
                compiled_out = compiled(*args, **kwargs)
                compiled(*args, **kwargs)
                out["compile_warmup_s"] = round(time.perf_counter() - t0, 2)
                cf = lambda: compiled(*args, **kwargs)  # noqa: E731
                out["compile_ms"] = statistics.median(timer.per_call_us(cf, n) for _ in range(opts.rounds)) / 1e3
                out["compile_speedup"] = out["eager_ms"] / out["compile_ms"]
                out["compile_max_abs_diff"] = max_abs_diff(compiled_out, eager_out)
            except Exception as e:  # noqa: BLE001 - torch.compile's failure is a result, not ours
                out["compile_error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
            except KeyboardInterrupt:  # Ctrl-C or a time limit (SIGINT) during a long compile: keep the rest
                out["compile_error"] = "interrupted (SIGINT) before torch.compile finished"
        if compile_too and lib is not None and out.get("kiln_entries_installed"):
            time_kiln_compile(root, lib, opts, timer, out, eager_out)
        elif compile_too:
            out["kiln_compile_note"] = ("no library: kiln + torch.compile is not measured" if lib is None else
                                        "nothing installed: kiln + torch.compile is torch.compile")
    return out


KILN_COMPILE_KEYS = ("kiln_compile_ms", "kiln_compile_speedup", "kiln_compile_vs_compile", "kiln_compile_max_abs_diff",
                     "kiln_compile_error", "kiln_compile_warmup_s", "kiln_compile_hits_per_forward",
                     "kiln_compile_entry_hits_per_forward", "kiln_compile_note")


def time_kiln_compile(root: RootCall, lib, opts, timer: Timer, out: dict, eager_out=None) -> None:
    """The "kiln + torch.compile" column, into `out` (time_model's dict: its eager_ms, iterations and rounds
    are used): torch.compile of the model with the library installed (the entries install.json keeps),
    so that module entries run as kiln:: custom ops inside the compiled graph. Same timer, same forward,
    max difference against eager. A failure is an error string; SIGINT leaves "interrupted"."""
    import torch

    import kiln
    for k in KILN_COMPILE_KEYS:
        out.pop(k, None)
    if str(out.get("compile_error", "")).startswith("interrupted"):
        out["kiln_compile_error"] = "interrupted (SIGINT) before torch.compile finished"
        return
    model, args, kwargs = root.module, root.args, root.kwargs
    n = out.get("iterations") or 1
    with _grad_context(root.grad_mode):
        try:
            if eager_out is None:
                eager_out = model(*args, **kwargs)
            torch._dynamo.reset()  # nothing traced without kiln may be reused
            inst = kiln.install(lib, model=model)
            try:
                if not inst.installed:
                    out["kiln_compile_note"] = "nothing installed: kiln + torch.compile is torch.compile"
                    return
                compiled = torch.compile(model)
                t0 = time.perf_counter()
                kc_out = compiled(*args, **kwargs)
                compiled(*args, **kwargs)
                out["kiln_compile_warmup_s"] = round(time.perf_counter() - t0, 2)
                inst.reset_stats()
                compiled(*args, **kwargs)
                stats = inst.stats()
                out["kiln_compile_hits_per_forward"] = stats["hits"]
                out["kiln_compile_entry_hits_per_forward"] = {k: e["hits"] for k, e in stats["entries"].items()}
                kf = lambda: compiled(*args, **kwargs)  # noqa: E731
                out["kiln_compile_ms"] = statistics.median(timer.per_call_us(kf, n)
                                                           for _ in range(opts.rounds)) / 1e3
                out["kiln_compile_speedup"] = out["eager_ms"] / out["kiln_compile_ms"]
                if out.get("compile_ms"):
                    out["kiln_compile_vs_compile"] = out["compile_ms"] / out["kiln_compile_ms"]
                out["kiln_compile_max_abs_diff"] = max_abs_diff(kc_out, eager_out)
            finally:
                kiln.uninstall()
                torch._dynamo.reset()  # the kiln graphs call ops that uninstall removed
        except Exception as e:  # noqa: BLE001 - a failure inside torch.compile is a result, not ours
            out["kiln_compile_error"] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
        except KeyboardInterrupt:
            out["kiln_compile_error"] = "interrupted (SIGINT) before torch.compile finished"


def _drop_until_faster(root, lib, opts, timer, report: dict, decisions: dict, entries_out: list) -> None:
    """Entries win per call, but the model is what must get faster: while the forward with kiln is not
    faster than eager, the installed entry that saves the least per forward (per-call saving times hits)
    is dropped and the model timed again. The compile column of the first timing is kept; the kiln +
    torch.compile column, measured with the entries of the first timing, is measured again by
    install_check once the set is final."""
    first = report["model"]
    while True:
        m = report["model"]
        installed = [r for r in entries_out if r["installed"]]
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
        if not any(r["installed"] for r in entries_out):
            # nothing left installed: the forward is eager's own, no need to time it again
            again = {k: v for k, v in m.items() if not k.startswith("kiln_") and k != "entry_hits_per_forward"}
            again.update(kiln_ms=m["eager_ms"], kiln_speedup=1.0, kiln_max_abs_diff=0.0,
                         kiln_note="nothing installed: the forward with kiln is eager's")
            if any(k in first for k in KILN_COMPILE_KEYS):
                again["kiln_compile_note"] = "nothing installed: kiln + torch.compile is torch.compile"
            report.pop("model_kiln_compile_stale", None)
            report["model"] = again
            return
        again = time_model(root, lib, opts, timer, False)
        for k in ("compile_ms", "compile_speedup", "compile_max_abs_diff", "compile_error", "compile_warmup_s"):
            if k in first:
                again[k] = first[k]
        report["model"] = again
        report["model_kiln_compile_stale"] = True


def install_check(opts, library_dir: str, report: dict) -> None:
    import torch

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
        lib = Library(library_dir)
        report["library"] = {"path": lib.path, "backend": lib.backend, "device": lib.info.get("device"),
                             "library_device": lib.info.get("library_device"), "build": lib.info.get("build"),
                             "notes": lib.info.get("notes", []), "n_entries": len(lib.entries)}
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
            entries_out.append({
                "name": e.name, "target": e.target, "kernel_speedup": e.speedup,
                "kernel_time_us": e.time_us.get("kiln"), "kernel_eager_us": e.time_us.get("eager"),
                "kernel_compile_us": e.time_us.get("compile"), "share": e.data.get("share"),
                "op_eager_us": b.get("eager_us"), "op_kiln_us": b.get("kiln_us"),
                "raw_launch_us": b.get("raw_launch_us"), "hit_overhead_us": b.get("hit_overhead_us"),
                "miss_overhead_us": b.get("miss_overhead_us"), "installed": ok, "reason": why})
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
        hits = report["model"].get("entry_hits_per_forward") or {}
        for row in entries_out:
            row["hits_per_forward"] = hits.get(row["name"], 0) if row["installed"] else None
    if lib is not None:
        lib.close()
    report["torch"] = torch.__version__
    if cuda and torch.cuda.is_available():
        report["device_name"] = torch.cuda.get_device_name()
    else:
        report["device_name"] = ((report.get("library") or {}).get("device") or {}).get("name")


# ---------------------------------------------------------------------------------------------------
# Step 4: the report.


def _fmt(v, spec: str = ".3f", none: str = "-") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return none
    return format(v, spec)


def render_markdown(report: dict) -> str:
    lines = [f"# kiln tune: {os.path.basename(report['script'])}", ""]
    lines.append(f"`{' '.join([report['script'], *report['script_args']])}` on {report.get('backend')} "
                 f"({report.get('device_name') or '?'}), torch {report.get('torch', '?')}, run `{report['run_dir']}`.")
    lines.append("")
    lib = report.get("library") or {}
    if lib.get("refused"):
        lines += [f"**Library refused**: {lib['refused']}", ""]
    m = report.get("model")
    lines.append("## Model forward")
    lines.append("")
    if not m:
        lines += [report.get("model_note") or "not timed (an earlier step failed)", ""]
    else:
        lines.append("| model | grad mode | eager ms | kiln ms | torch.compile ms | kiln + torch.compile ms "
                     "| kiln speedup | compile speedup | kiln + compile speedup | max diff kiln | max diff compile "
                     "| max diff kiln + compile |")
        lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        compile_on = "compile_ms" in m or bool(m.get("compile_error"))
        comp = _fmt(m.get("compile_ms")) if "compile_ms" in m else \
            ("interrupted" if str(m.get("compile_error", "")).startswith("interrupted") else
             "failed" if m.get("compile_error") else "off")
        kcomp = _fmt(m.get("kiln_compile_ms")) if "kiln_compile_ms" in m else \
            ("interrupted" if str(m.get("kiln_compile_error", "")).startswith("interrupted") else
             "failed" if m.get("kiln_compile_error") else "-" if compile_on else "off")
        lines.append(f"| {m['root']} | {m['grad_mode']} | {_fmt(m.get('eager_ms'))} | {_fmt(m.get('kiln_ms'))} | "
                     f"{comp} | {kcomp} | {_fmt(m.get('kiln_speedup'), '.2f')}x | "
                     f"{_fmt(m.get('compile_speedup'), '.2f')}x | {_fmt(m.get('kiln_compile_speedup'), '.2f')}x | "
                     f"{_fmt(m.get('kiln_max_abs_diff'), '.3g')} | {_fmt(m.get('compile_max_abs_diff'), '.3g')} | "
                     f"{_fmt(m.get('kiln_compile_max_abs_diff'), '.3g')} |")
        lines.append("")
        lines.append(f"Medians of {m['rounds']} alternating rounds of {m.get('iterations')} forwards each. kiln ran "
                     f"{_fmt(m.get('kiln_hits_per_forward'), 'd')} kernel calls per forward and fell back "
                     f"{_fmt(m.get('kiln_misses_per_forward'), 'd')} times.")
        for d in report.get("model_dropped") or []:
            lines.append(f"Dropped `{d['entry']}`: with it the forward took {d['kiln_ms']:.3f} ms against "
                         f"{d['eager_ms']:.3f} ms eager.")
        if m.get("kiln_note"):
            lines.append(f"{m['kiln_note'][0].upper()}{m['kiln_note'][1:]}.")
        elif "kiln_ms" in m and not m.get("kiln_entries_installed"):
            lines.append("No entry won end to end, so nothing was installed: the kiln column is eager again, and "
                         "its difference from eager is the noise of this machine.")
        if m.get("compile_error"):
            lines.append(f"torch.compile failed: {m['compile_error']}")
        if "kiln_compile_ms" in m:
            vs = m.get("kiln_compile_vs_compile")
            lines.append(f"kiln + torch.compile: torch.compile of the model with kiln installed (module entries "
                         f"become kiln:: custom ops in the compiled graph); kiln ran "
                         f"{_fmt(m.get('kiln_compile_hits_per_forward'), 'd')} kernel calls per compiled forward"
                         + (f", {vs:.2f}x against torch.compile alone." if vs else "."))
        if m.get("kiln_compile_note"):
            lines.append(f"kiln + torch.compile: {m['kiln_compile_note']}.")
        if m.get("kiln_compile_error"):
            lines.append(f"kiln + torch.compile failed: {m['kiln_compile_error']}")
        if m.get("eager_repeatable") is False:
            lines.append("Note: two eager forwards differ; the model is not deterministic, so the differences "
                         "above include that.")
        lines.append("")
    rows = report.get("entries") or []
    lines.append("## Entries")
    lines.append("")
    if not rows:
        lines += ["none (no library, or an empty one)", ""]
    else:
        lines.append("| entry | replaces | share | kernel speedup | per call eager us | per call kiln us | "
                     "hit overhead us | miss overhead us | installed | hits per forward | why |")
        lines.append("|---|---|---:|---:|---:|---:|---:|---:|---|---:|---|")
        for r in rows:
            share = f"{100 * r['share']:.1f}%" if isinstance(r.get("share"), (int, float)) else "-"
            lines.append(f"| {r['name']} | {r['target']} | {share} | {_fmt(r.get('kernel_speedup'), '.2f')}x | "
                         f"{_fmt(r.get('op_eager_us'), '.1f')} | {_fmt(r.get('op_kiln_us'), '.1f')} | "
                         f"{_fmt(r.get('hit_overhead_us'), '.1f')} | {_fmt(r.get('miss_overhead_us'), '.1f')} | "
                         f"{'yes' if r['installed'] else 'no'} | {_fmt(r.get('hits_per_forward'), 'd')} | "
                         f"{r['reason']} |")
        lines.append("")
        lines.append("Kernel speedup: eager over kiln kernel time in the gate (isolated, L2 flushed). Per call: "
                     "wall time of the op through PyTorch's dispatcher in a loop, with kiln's gate (aten entries "
                     f"dispatched by {os.environ.get('KILN_DISPATCH') or 'python'}; module entries in Python). "
                     "Hit overhead: per call with kiln minus the bare launch; miss overhead: a call that misses "
                     "the gate minus the same call eagerly.")
        lines.append("")
    if report.get("install_json"):
        lines += [f"Decisions: `{report['install_json']}` (read by `kiln run` and `kiln.install`).", ""]
    if report.get("error"):
        lines += [f"**Stopped**: {report['error']}", ""]
    return "\n".join(lines)


def write_report(report: dict) -> None:
    os.makedirs(report["run_dir"], exist_ok=True)
    with open(os.path.join(report["run_dir"], "report.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
        f.write("\n")
    text = render_markdown(report)
    with open(os.path.join(report["run_dir"], "report.md"), "w") as f:
        f.write(text + "\n")
    _log("kiln tune [4/4] report: " + os.path.join(report["run_dir"], "report.md"))
    _log("")
    _log(text)


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


def tune(opts) -> tuple:
    """The four steps; (exit status, the report written)."""
    if opts.backend is None:
        opts.backend = default_backend()
    library_dir = opts.library or os.path.join(opts.out, "library")
    report: dict = {"kiln_report": 1, "script": opts.script, "script_args": opts.script_args,
                    "run_dir": opts.out if not opts.library else (opts.out or os.path.dirname(library_dir)),
                    "backend": opts.backend, "steps": {}, "started_unix_s": int(time.time())}
    code = 0
    try:
        if not opts.skip_capture:
            step_capture(opts, report)
        if not opts.skip_optimize:
            step_optimize(opts, report)
        if not os.path.exists(os.path.join(library_dir, "manifest.json")):
            raise TuneError(f"no library at {library_dir} (run without --skip-optimize, or pass --library)")
        t0 = time.perf_counter()
        install_check(opts, library_dir, report)
        report["steps"]["install_check"] = {"seconds": round(time.perf_counter() - t0, 2)}
    except TuneError as e:
        report["error"] = str(e)
        print(f"kiln tune: {e}", file=sys.stderr)
        code = e.code
    except Exception as e:  # noqa: BLE001 - the report says what was done before the failure
        report["error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc()
        code = 1
    except KeyboardInterrupt:  # Ctrl-C or a time limit (SIGINT): the report still says how far it got
        report["error"] = "interrupted (SIGINT)"
        print("kiln tune: interrupted", file=sys.stderr)
        code = 130
    write_report(report)
    return code, report


if __name__ == "__main__":
    sys.exit(main())
