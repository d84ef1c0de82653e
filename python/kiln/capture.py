"""kiln capture: runs an unmodified PyTorch script with kiln watching, ranks its aten ops by device time
and writes the ops that matter as SOL-ExecBench problems on the script's own tensors.

    kiln capture SCRIPT.py --out RUN [options] [-- SCRIPT ARGS...]     (`kiln capture --help` lists them)

Everything after `--` goes to the script, whose sys.argv is [SCRIPT, *args] and which runs as __main__ with
its own directory first on sys.path, as `python SCRIPT` would run it. What it writes (docs/capture.md has
the formats and the reasons):

  RUN/problems/<name>/definition.json   reference calling the captured aten overload (or a leaf module's
                                        forward, "kind": "module"), plus "kiln": {calls, share, ...}
  RUN/problems/<name>/workload.jsonl    workload 0: the real captured tensors (a tensor too big to keep:
                                        a `random` input with its statistics, structure and real slice in
                                        kiln.drawn); then random sets drawn with the real tensors' statistics
  RUN/problems/<name>/tensors/          real.safetensors, slices.safetensors, real_outputs.safetensors,
                                        random<j>.safetensors
  RUN/problems/<name>/kiln/ref-<dev>/   reference data for the gate (kiln.reference.build_reference)
  RUN/model.json                        every op in call order: module path, producer -> consumer edges,
                                        device time, the problem each call belongs to
  RUN/capture.json                      wall times, device, versions, script, what was skipped and why,
                                        the names this run gave and their content hashes

Capture holds RUN/kiln.lock while it runs and puts the new problems in place only when it succeeded.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Optional

from kiln import split_script_args
from kiln.cli import Parser, UsageError, stdout_to_stderr

DEFAULT_MAX_BYTES = 2 << 30
REFERENCE_SETS = 3  # input sets the gate proves on, real + random, per problem at least
HOLD_FLOOR_BYTES = 4 << 30  # spooled during the run: max(8 x --max-bytes, this), <= half of the free disk
SLICE_BYTES_MIN, SLICE_BYTES_MAX = 1 << 10, 16 << 20  # a real slice is --max-bytes / 256, within these
HEADER_BYTES_PER_TENSOR = 192  # safetensors header entry of one tensor, at most (names are short)
HEADER_BYTES_PER_FILE = 16
KILN_DIR = os.path.dirname(os.path.abspath(__file__))


class CaptureError(Exception):
    """A failure to report as one clear message (no kiln traceback); code is the exit status."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------------------------------------------
# Arguments.


def parse_bytes(text: str) -> int:
    """'2GiB', '512M', '1e9', '4096' -> bytes (K/M/G/T are powers of 1024 with or without 'iB')."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([kKmMgGtT]?)(i?[bB])?\s*", text)
    if not m:
        raise CaptureError(f"--max-bytes {text!r}: expected a size such as 2GiB, 512M or 1000000", 2)
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2).lower()]
    return int(float(m.group(1)) * scale)


def _size(text: str) -> int:
    try:
        return parse_bytes(text)
    except CaptureError:
        raise ValueError(text) from None


def add_size_options(p: Parser) -> None:
    """Declares the options of capture's byte plan on p: kiln capture's own parser and kiln tune's, which
    hands them to capture with capture_args (so that tune checks them before anything runs)."""
    p.option("--max-bytes", metavar="B", kind="custom", convert=_size, wants="a size such as 2GiB, 512M or 1000000",
             default=DEFAULT_MAX_BYTES, default_text=f"{DEFAULT_MAX_BYTES >> 30}GiB",
             help="the most bytes of tensors saved in all; bigger tensors are kept as statistics, structure and "
                  "a real slice")
    p.option("--random-sets", metavar="K", kind="int", lo=0, default=2, help="random workloads per problem")


def capture_args(opts) -> list:
    """The kiln capture arguments for the options add_size_options declared, as opts holds them."""
    return ["--max-bytes", str(opts.max_bytes), "--random-sets", str(opts.random_sets)]


def parser() -> Parser:
    """`kiln capture`'s command line (its --help)."""
    p = Parser(
        "capture", ["SCRIPT.py --out RUN [options] [-- SCRIPT ARGS...]"],
        "Runs an unmodified PyTorch script with kiln watching, ranks its aten ops and fused leaf modules by "
        "device time, and writes the ones that matter as SOL-ExecBench problems on the script's own tensors: "
        "RUN/problems/<name>/ (definition, workloads, tensors, the gate's reference data), RUN/model.json "
        "(every op in call order, producer -> consumer) and RUN/capture.json. No op is dropped for its size: "
        "a tensor too big to keep is written as its statistics, structure and a real slice. A problem is "
        "named by its content: a changed problem never takes an old name. Everything after `--` goes to "
        "the script, which runs as __main__ as `python SCRIPT` would run it; docs/capture.md has the formats.",
        [(0, "captured"),
         (1, "the script failed (its own exception is shown with its traceback), did no tensor work, or a "
             "problem could not be written"),
         (2, "bad invocation, or RUN is in use by another kiln process (kiln optimize or tune)")],
        "kiln capture examples/resnet50.py --out runs/resnet50 -- --small",
        unknown_hint=" (the script's own arguments go after `--`)")
    p.add_argument("script")
    p.option("--out", metavar="RUN", required=True, help="the run directory to write (problems/, model.json, ...)")
    p.option("--top", metavar="N", kind="int", lo=1, default=20, help="problems to write per kind")
    add_size_options(p)
    p.option("--device", metavar="auto|cuda|cpu", choices=["auto", "cuda", "cpu"], default="auto",
             help="whose time ranks the ops: CUDA kernel time or CPU time; auto: cuda when PyTorch sees a GPU")
    p.option("--no-reference", action="store_true",
             help="do not build the gate's reference data (kiln eval builds it when needed)")
    p.option("--quiet", action="store_true", help="print only the ranked table")
    p.option("--json", action="store_true",
             help="print RUN/capture.json on stdout when done; the script's output and the table go to stderr")
    return p


def parse_args(argv: list) -> argparse.Namespace:
    argv, script_args = split_script_args(argv)
    if "--out" not in argv and not any(a.startswith("--out=") for a in argv) and "--out" in script_args:
        raise CaptureError("--out must come before `--` (everything after `--` goes to the script)", 2)
    try:
        opts = parser().parse(argv)
    except UsageError as e:
        raise CaptureError(str(e), 2) from None
    opts.script_args = script_args
    if not os.path.exists(opts.script):
        raise CaptureError(f"no such script: {opts.script}", 2)
    if not os.path.isfile(opts.script):
        raise CaptureError(f"not a file: {opts.script}", 2)
    return opts


# ---------------------------------------------------------------------------------------------------
# Running the script.


def _disk_available(path: str) -> Optional[int]:
    try:
        st = os.statvfs(path)
        return st.f_bavail * st.f_frsize
    except OSError:
        return None


def slice_bytes_for(max_bytes: int) -> int:
    """The size of the real slice kept of a tensor too big to keep: --max-bytes / 256, in [1 KiB, 16 MiB]."""
    return min(max(max_bytes // 256, SLICE_BYTES_MIN), SLICE_BYTES_MAX)


def _user_traceback(exc: BaseException, script: str) -> str:
    """The script's exception with kiln's, runpy's and the dispatch machinery's frames left out."""
    skip = (KILN_DIR + os.sep, os.path.join("torch", "utils", "_python_dispatch.py"),
            os.path.join("torch", "autograd", "profiler.py"), "runpy.py", "<frozen runpy>")
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not any(s in f.filename for s in skip)]
    lines = ["Traceback (most recent call last):\n"] + traceback.format_list(frames)
    lines += traceback.format_exception_only(type(exc), exc)
    return "".join(lines)


def run_script(opts, recorder, log) -> float:
    """Runs the script under the recorder; returns its wall time. Raises CaptureError if it fails."""
    import runpy

    script = os.path.abspath(opts.script)
    saved_argv, saved_path0 = sys.argv, sys.path[0] if sys.path else None
    sys.argv = [opts.script] + list(opts.script_args)
    if sys.path:
        sys.path[0] = os.path.dirname(script)
    else:
        sys.path.insert(0, os.path.dirname(script))
    failure = None
    t0 = time.perf_counter()
    try:
        recorder.install_hooks()
        try:
            with recorder.mode():
                runpy.run_path(script, run_name="__main__")
        finally:
            recorder.remove_hooks()
    except SystemExit as e:
        if e.code not in (None, 0):
            failure = (f"the script exited with status {e.code}", None)
    except KeyboardInterrupt:
        raise CaptureError("interrupted", 130)
    except BaseException as e:  # the script's own error: show it as Python would
        failure = (f"the script failed: {type(e).__name__}: {' '.join(str(e).split())[:500]}", e)
    finally:
        sys.argv = saved_argv
        if saved_path0 is not None:
            sys.path[0] = saved_path0
    wall = time.perf_counter() - t0
    if failure is not None:
        message, exc = failure
        if exc is not None:
            sys.stderr.write(_user_traceback(exc, script))
            import torch
            if isinstance(exc, torch.OutOfMemoryError):
                message += (" (out of device memory; kiln keeps its copies on the host, so the script "
                            "needs this memory by itself)")
        raise CaptureError(message, 1)
    return wall


# ---------------------------------------------------------------------------------------------------
# Device time per call from the profiler.


def op_times_us(prof, use_cuda: bool) -> tuple:
    """({call index: time in µs}, total profiled device time in µs). On CUDA the time of a call is the
    duration of every kernel launched inside its kiln#<index> range; on CPU it is the range's CPU time."""
    from torch.autograd import DeviceType
    times: dict = {}
    total = 0.0
    events = prof.events() or []
    for e in events:
        if e.device_type != DeviceType.CPU:
            continue
        if use_cuda:
            total += sum(k.duration for k in e.kernels if not k.name.startswith("kiln#"))
        if not e.name.startswith("kiln#"):
            continue
        try:
            index = int(e.name[5:])
        except ValueError:
            continue
        if use_cuda:
            t, stack = 0.0, [e]
            while stack:
                ev = stack.pop()
                t += sum(k.duration for k in ev.kernels if not k.name.startswith("kiln#"))
                stack.extend(ev.cpu_children)
        else:
            t = e.cpu_time_total
        times[index] = times.get(index, 0.0) + float(t)
    if not use_cuda:
        total = sum(times.values())
    return times, total


# ---------------------------------------------------------------------------------------------------
# Grouping and ranking.


@dataclass
class Group:
    """Calls with one signature: one potential problem."""
    key: tuple
    func: Any
    op_ids: list = field(default_factory=list)  # ids in model.json
    time_us: float = 0.0
    paths: list = field(default_factory=list)
    no_problem: Optional[str] = None
    problem: Optional[str] = None
    skipped: Optional[str] = None
    shapes: str = ""

    @property
    def calls(self) -> int:
        return len(self.op_ids)


def _fmt_shapes(inputs) -> str:
    from kiln.capture_problem import DTYPE_SHORT, shape_sig
    parts = [f"{shape_sig(m.shape)} {DTYPE_SHORT.get(m.dtype, str(m.dtype))}" for _, _, m in inputs]
    text = ", ".join(parts)
    return text if len(text) <= 44 else text[:43] + "…"


def _add_unique(items: list, value: str, limit: int = 64) -> None:
    if value not in items and len(items) < limit:
        items.append(value)


# ---------------------------------------------------------------------------------------------------
# The capture.


class Capture:
    def __init__(self, opts, log):
        self.opts = opts
        self.log = log
        self.out = os.path.abspath(opts.out)
        self.wall: dict = {}
        self.written: list = []   # problem summaries for capture.json
        self.skipped: list = []
        self.bytes_written = 0
        self.names: set = set()
        self.write_error: Optional[str] = None
        self.ledger: dict = {}

    # ---- set-up and run ------------------------------------------------------------------------------

    def prepare_out(self) -> None:
        """Opens the run: its lock, its ledger of names (kiln.capture_run). A previous capture's problems,
        model.json and capture.json stay until this one has succeeded, then they are replaced."""
        from kiln.capture_run import RunDir, RunLocked
        if os.path.exists(self.out) and not os.path.isdir(self.out):
            raise CaptureError(f"--out {self.opts.out}: exists and is not a directory", 2)
        self.rundir = RunDir(self.out)
        try:
            self.rundir.open()
        except RunLocked as e:
            raise CaptureError(str(e), 2) from None
        except OSError as e:
            self.rundir.close()
            raise CaptureError(f"--out {self.opts.out}: {e.strerror or e}", 2)

    def run(self) -> int:
        self.prepare_out()
        try:
            return self._run()
        finally:
            self.rundir.close()

    def _run(self) -> int:
        t_start = time.perf_counter()
        import torch
        from torch.profiler import ProfilerActivity, profile

        from kiln.capture_problem import Spool
        from kiln.capture_record import Recorder

        device = self.opts.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cuda" and not torch.cuda.is_available():
            raise CaptureError("--device cuda: PyTorch sees no CUDA device (use --device cpu)", 2)
        self.device = device
        # Copies are spooled to disk before the ranking is known, so more is kept than will be written.
        avail = _disk_available(self.out)
        hold_cap = max(8 * self.opts.max_bytes, HOLD_FLOOR_BYTES)
        if avail is not None:
            hold_cap = min(hold_cap, avail // 2)
        # Before the first module forward, copies are provisional (model construction and .to() are not
        # the model; a script that never calls a module keeps them): they get at most --max-bytes.
        self.slice_bytes = slice_bytes_for(self.opts.max_bytes)
        self.recorder = rec = Recorder(device, Spool(self.rundir.spool_dir), hold_cap,
                                       min(self.opts.max_bytes, hold_cap), self.opts.max_bytes, self.slice_bytes)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
        if not self.opts.quiet:
            self.log(f"kiln capture: running {self.opts.script} {' '.join(self.opts.script_args)}".rstrip()
                     + f" (timing on {device})")
        try:
            prof = profile(activities=activities, acc_events=True)
            prof.__enter__()
        except Exception as e:
            raise CaptureError(f"cannot start the PyTorch profiler: {e}", 1)
        try:
            self.wall["script_s"] = run_script(self.opts, rec, self.log)
        finally:
            try:
                if device == "cuda":
                    torch.cuda.synchronize()
                prof.__exit__(None, None, None)
            except Exception as e:  # a script that ran its own profiler, for instance
                self.profile_error = str(e)
        # numerics switches the script may have set: a reference run elsewhere must set them the same way
        self.torch_flags = {"matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                            "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
                            "float32_matmul_precision": torch.get_float32_matmul_precision()}
        t0 = time.perf_counter()
        try:
            self.times, self.profiled_total_us = op_times_us(prof, device == "cuda")
        except Exception as e:  # no times: the ops are still captured, in call order
            self.profile_error = getattr(self, "profile_error", None) or f"{type(e).__name__}: {e}"
            self.times, self.profiled_total_us = {}, 0.0
        del prof
        self.wall["profile_parse_s"] = time.perf_counter() - t0
        self.select_ops()
        t0 = time.perf_counter()
        self.write_problems()
        self.wall["problems_s"] = time.perf_counter() - t0
        try:
            self.ledger = self.rundir.commit()
        except OSError as e:
            raise CaptureError(f"cannot put the new problems in place under {self.opts.out}: {e.strerror or e}", 1)
        self.write_model_json()
        self.wall["total_s"] = time.perf_counter() - t_start
        self.write_capture_json()
        self.print_table()
        return 1 if self.write_error else 0

    # ---- ops, groups, ranking ------------------------------------------------------------------------

    def select_ops(self) -> None:
        rec = self.recorder
        in_module = [op for op in rec.ops if op.frame_id is not None]
        ops = [op for op in rec.ops if op.in_scope and (op.frame_id is not None or not rec.seen_forward)]
        if rec.seen_forward:
            ops = in_module
        else:
            rec.samples.update(rec.provisional)  # a functional script: everything it did is the model
        if not ops:
            where = "inside its module forwards" if rec.seen_forward else ""
            raise CaptureError(f"the script ran but did no tensor work kiln could see {where}".rstrip()
                               + " (no CUDA/CPU aten op was dispatched); is the model called in this script?", 1)
        if self.device == "cuda" and not any(m.device == "cuda" for op in ops for _, _, m in op.inputs) \
                and not any(m.device == "cuda" for op in ops for _, m in op.outputs):
            raise CaptureError("the script did no CUDA tensor work (its ops ran on the CPU); "
                               "capture it with --device cpu, or move the model to CUDA", 1)
        self.ops = ops
        self.op_id = {op.index: i for i, op in enumerate(ops)}  # call index -> model.json id
        self.op_time = [self.times.get(op.index, 0.0) for op in ops]
        self.total_us = sum(self.op_time)
        groups: dict = {}
        for i, op in enumerate(ops):
            g = groups.get(op.key)
            if g is None:
                g = groups[op.key] = Group(op.key, op.func, no_problem=op.no_problem,
                                           shapes=_fmt_shapes(op.inputs))
            g.op_ids.append(i)
            g.time_us += self.op_time[i]
            _add_unique(g.paths, op.module_path)
        self.groups = sorted(groups.values(), key=lambda g: (-g.time_us, g.op_ids[0]))
        self.group_of = {}
        for gi, g in enumerate(self.groups):
            for i in g.op_ids:
                self.group_of[i] = gi
        # leaf-module groups: their calls' ops, by model.json id
        self.module_groups = []
        for key, mg in rec.module_groups.items():
            calls, t, paths = [], 0.0, []
            for path, positions in mg["frames"]:
                ids = [self.op_id[rec.ops[p].index] for p in positions if rec.ops[p].index in self.op_id]
                calls.append(ids)
                t += sum(self.op_time[i] for i in ids)
                _add_unique(paths, path)
            self.module_groups.append({"key": key, "cls": mg["cls"], "trace": mg["trace"], "calls": calls,
                                       "time_us": t, "paths": paths, "problem": None, "skipped": None})
        self.module_groups.sort(key=lambda m: -m["time_us"])
        self.module_problem_of: dict = {}
        self.select_chains()

    def select_chains(self) -> None:
        """Chains of memory-bound calls (kiln.capture_chain) grouped by signature, slowest first; a chain
        that is exactly one leaf module's forward ("is_module") is that module's problem, not another. An
        eager attention block around a softmax chain is a chain group of its own ("pattern": "attention"), and
        so is a GEMM with the pointwise epilogue cuBLASLt fuses after it ("pattern": "gemm_epilogue"), and the
        front of a GeGLU/SwiGLU MLP, act(x @ wgᵀ) * (x @ wuᵀ) ("pattern": "gemm_gated")."""
        from kiln.capture_chain import (SOFTMAX_NAMES, Graph, attention_block, chain_key, find_chains, gated_pair,
                                        gemm_epilogue)
        self.graph = g = Graph(self.ops)
        modules = {tuple(sorted(ids)) for m in self.module_groups for ids in m["calls"]}
        groups: dict = {}
        blocks = [(chain, None) for chain in find_chains(self.ops)]
        # a softmax joined to nothing (bmm or baddbmm, softmax, bmm: diffusers' attention processor) is an
        # attention block's whole chain
        chained = {i for chain, _ in blocks for i in chain}
        alone = (attention_block(g, [i]) for i, op in enumerate(self.ops)
                 if i not in chained and g.member[i] and op.func._opname in SOFTMAX_NAMES)
        blocks += [(b, "attention") for b in alone if b]
        blocks += [(b, "gemm_epilogue") for b in (gemm_epilogue(g, i) for i in range(len(self.ops))) if b]
        blocks += [(b, "gemm_gated") for b in (gated_pair(g, i) for i in range(len(self.ops))) if b]
        for chain, pattern in blocks:
            found = [(chain, pattern)]
            block = attention_block(g, chain) if pattern is None else None
            if block is not None:
                found.append((block, "attention"))
            for ids, pattern in found:
                key = (pattern, chain_key(g, ids))
                cg = groups.get(key)
                if cg is None:
                    cg = groups[key] = {"pattern": pattern, "calls": [], "time_us": 0.0, "paths": [],
                                        "problem": None, "skipped": None,
                                        "is_module": pattern is None and tuple(ids) in modules}
                cg["calls"].append(ids)
                cg["time_us"] += sum(self.op_time[i] for i in ids)
                _add_unique(cg["paths"], self.ops[ids[0]].module_path)
        self.chain_groups = sorted(groups.values(), key=lambda c: -c["time_us"])
        self.chain_problem_of: dict = {}

    def share(self, t: float) -> float:
        return t / self.total_us if self.total_us > 0 else 0.0

    # ---- problems --------------------------------------------------------------------------------------

    def unique_name(self, base: str) -> str:
        name, k = base, 2
        while name in self.names:
            name = f"{base}_{k}"
            k += 1
        self.names.add(name)
        return name

    def write_problems(self) -> None:
        """The top --top aten signatures and the top --top leaf-module signatures (by time) become problems;
        none is dropped for its size. Bytes are planned before anything is written, in rounds over the
        candidates in order of share: every problem starts with its inputs drawn from statistics (no
        bytes); then each gets its small inputs and the slices of its big ones while they fit in
        --max-bytes; then its real inputs in full; then its real outputs; then random sets."""
        top = self.opts.top
        eligible = [g for g in self.groups if g.no_problem is None][:top]
        modules = self.module_groups[:top]
        cands = [c for c in (self.aten_candidate(g) for g in eligible) if c is not None]
        cands += [c for c in (self.module_candidate(m) for m in modules) if c is not None]
        chains = [m for m in self.chain_groups if not m["is_module"]][:top]
        cands += [c for c in (self.chain_candidate(m) for m in chains) if c is not None]
        cands.sort(key=lambda c: -c.share)
        budget = self.opts.max_bytes
        for level in ("sliced", "real"):
            for c in cands:
                if c.can(level):
                    extra = c.bytes_at(level) - c.bytes_at(c.level)
                    if extra <= budget:
                        budget -= extra
                        c.level = level
        for c in cands:
            if c.level == "real" and c.outputs_held and c.output_bytes <= budget:
                budget -= c.output_bytes
                c.with_outputs = True
        for c in cands:
            if c.with_outputs:
                c.n_random = self.opts.random_sets if c.per_set == 0 else min(self.opts.random_sets,
                                                                              budget // c.per_set)
                budget -= c.n_random * c.per_set
        for c in cands:
            if self.write_error:
                c.skip(self.write_error)
            else:
                self.emit_problem(c)
        for g in eligible:
            if g.skipped:
                self.skipped.append({"op": op_label_of(g.func), "shapes": g.shapes, "calls": g.calls,
                                     "share": round(self.share(g.time_us), 6), "reason": g.skipped})
        for m in modules:
            if m["skipped"]:
                self.skipped.append({"module": m["cls"], "paths": m["paths"][:3], "calls": len(m["calls"]),
                                     "share": round(self.share(m["time_us"]), 6), "reason": m["skipped"]})
            elif m["problem"]:
                for ids in m["calls"]:
                    for i in ids:
                        self.module_problem_of[i] = m["problem"]
        for m in self.chain_groups:
            if m["is_module"]:  # written as its module's problem
                m["problem"] = self.module_problem_of.get(m["calls"][0][0])
        for m in chains:
            if m["skipped"]:
                self.skipped.append({"chain": m["pattern"] or "chain", "paths": m["paths"][:3],
                                     "calls": len(m["calls"]), "share": round(self.share(m["time_us"]), 6),
                                     "reason": m["skipped"]})
            elif m["problem"]:
                for ids in m["calls"]:
                    for i in ids:
                        self.chain_problem_of.setdefault(i, []).append(m["problem"])
        self.recorder.samples.clear()  # the kept tensors are no longer needed
        for m in self.module_groups:
            m["trace"] = None

    def aten_candidate(self, g: Group) -> Optional["Candidate"]:
        from kiln.capture_problem import aten_reference, contraction_flops, problem_name
        rec = self.recorder
        sample = rec.samples.get(g.key)
        if sample is None:
            g.skipped = "tensors not held: " + rec.not_held.get(g.key, "no call of this signature was held")
            return None
        inputs = [(n, s) for n, s, is_out in zip(sample.flat_names, sample.inputs, sample.flat_is_out)
                  if not is_out]
        kept = [k for k, s in enumerate(sample.outputs) if s.numel > 0]
        if not kept:
            g.skipped = "no non-empty tensor output"
            return None
        outputs = [(f"out{j}", sample.outputs[k]) for j, k in enumerate(kept)]
        try:
            source = aten_reference(sample, [n for n, _ in inputs], kept)
        except ValueError as e:
            g.skipped = f"cannot write the reference: {e}"
            return None
        func = sample.func
        label = op_label_of(func)
        share = self.share(g.time_us)
        op = self.ops[g.op_ids[0]]
        name = self.unique_name(problem_name(f"{func._opname}_{func._overloadname}",
                                             [s.shape for _, s in inputs[:2]], inputs[0][1].dtype))
        kiln = {
            "kind": "aten", "aten": label, "calls": g.calls,
            "device_time_us": round(g.time_us, 3), "share": round(share, 6), "time_source": self.time_source,
            "module_paths": g.paths, "grad_mode": sample.grad_mode, "capture_device": self.device,
            "args": op.args_json, "first_call": g.op_ids[0], "torch_flags": self.torch_flags,
        }
        kiln.update(_layout_fields(inputs, outputs))
        flops = contraction_flops(func._opname, inputs, outputs, op.args_json)
        if flops is not None:
            kiln["flops"] = flops
        dropped = [k for k in range(len(sample.outputs)) if k not in kept]
        if dropped:
            from kiln.capture_problem import DTYPE_NAMES
            # what each empty result looked like, so that an installed entry can return it as the op does
            kiln["dropped_outputs"] = {"indices": dropped, "why": "empty (0 elements)", "tensors": [
                {"shape": list(sample.outputs[k].shape), "strides": list(sample.outputs[k].stride),
                 "dtype": DTYPE_NAMES.get(sample.outputs[k].dtype, str(sample.outputs[k].dtype)[6:])}
                for k in dropped]}
        description = (f"{label} captured from {os.path.basename(self.opts.script)}: {g.calls} call(s), "
                       f"{100 * share:.1f}% of {self.time_source} time; first at {g.paths[0] or '<root>'}. "
                       f"Tensors are stored in memory order (kiln.layouts).")
        c = Candidate(name, func._opname, description, inputs, outputs, source, kiln, share,
                      {"kind": "aten", "aten": label, "group": self.groups.index(g)}, self.slice_bytes)
        c.on_skip = lambda why: setattr(g, "skipped", why)
        c.on_ok = lambda final: setattr(g, "problem", final)
        c.release = lambda: self.names.discard(name)
        return c

    def module_candidate(self, m: dict) -> Optional["Candidate"]:
        from kiln.capture_problem import module_ops, problem_name
        tr = m["trace"]
        if tr is None:
            m["skipped"] = "tensors not held (the first call of this module signature was not sampled)"
            return None
        inputs = [(name, stored) for name, _, stored, _ in tr.inputs]
        if any(s is None for _, s in inputs) or any(s is None for _, s, _ in tr.outputs):
            m["skipped"] = "tensors not held"
            return None
        got = _kept_outputs(tr, m)
        if got is None:
            return None
        kept, outputs, source = got
        acts = [s for (_, _, s, origin) in tr.inputs if origin == "activation"] or [inputs[0][1]]
        name = self.unique_name(problem_name(f"module_{m['cls']}", [acts[0].shape], acts[0].dtype))
        share = self.share(m["time_us"])
        first_path = m["paths"][0]
        kiln = {
            "kind": "module", "module_class": m["cls"], "calls": len(m["calls"]),
            "device_time_us": round(m["time_us"], 3), "share": round(share, 6), "time_source": self.time_source,
            "module_paths": m["paths"], "grad_mode": tr.grad_mode, "capture_device": self.device,
            "input_origins": {n: (f"{first_path}.{n}" if origin == "parameter" else origin)
                              for n, _, _, origin in tr.inputs},
            "first_call_ops": m["calls"][0] if m["calls"] else [], "torch_flags": self.torch_flags,
        }
        if tr.activation_args:  # which positional argument of forward each activation was
            kiln["activation_args"] = dict(tr.activation_args)
        kiln.update(module_ops(tr, kept))
        kiln.update(_layout_fields(inputs, outputs))
        description = (f"forward of the leaf module {m['cls']} (a chain of pointwise/reduction aten ops) "
                       f"captured from {os.path.basename(self.opts.script)}: {len(m['calls'])} call(s), "
                       f"{100 * share:.1f}% of {self.time_source} time; first at {first_path}.")
        c = Candidate(name, f"module:{m['cls']}", description, inputs, outputs, source, kiln, share,
                      {"kind": "module", "module_class": m["cls"]}, self.slice_bytes)
        c.on_skip = lambda why: m.__setitem__("skipped", why)
        c.on_ok = lambda final: m.__setitem__("problem", final)
        c.release = lambda: self.names.discard(name)
        return c

    GEMM_PATTERNS = ("gemm_epilogue", "gemm_gated")

    def gemm_chain_flops(self, pattern: Optional[str], calls: list) -> Optional[float]:
        """A GEMM chain's useful flops (kiln.flops: its GEMMs', every one needed), for the speed of light's
        compute side; None for other chains: an eager attention chain's matmuls count the masked scores a
        fused kernel skips, which would put a correct kernel under its speed of light."""
        from kiln.capture_problem import contraction_flops
        if pattern not in self.GEMM_PATTERNS:
            return None
        flops = [contraction_flops(self.ops[i].func._opname, [(n, meta) for n, _, meta in self.ops[i].inputs],
                                   [(None, meta) for _, meta in self.ops[i].outputs], self.ops[i].args_json)
                 for i in calls]
        known = [f for f in flops if f is not None]
        return sum(known) if known else None

    def chain_candidate(self, m: dict) -> Optional["Candidate"]:
        """A chain group's problem: the chain's calls as straight-line code over the exact overloads (the
        reference) and as kiln's op chain, its inputs the tensors its calls read from outside it."""
        from kiln.capture_chain import build_trace, held_instance, member_func
        from kiln.capture_problem import module_ops, problem_name
        first, the_models = held_instance(self.graph, m["calls"], self.recorder.samples)
        tr, why = build_trace(self.graph, first, self.recorder.samples, self.recorder.tid_names, m["calls"])
        if tr is None:
            m["skipped"] = f"tensors not held: {why}"
            return None
        inputs = [(name, stored) for name, _, stored, _ in tr.inputs]
        got = _kept_outputs(tr, m)
        if got is None:
            return None
        kept, outputs, source = got
        funcs = [member_func(self.ops[i]) for i in first]  # an in-place member as the chain computes it
        labels = [op_label_of(f) for f in funcs]
        stem = m["pattern"] or "chain_" + "_".join(dict.fromkeys(f._opname.strip("_") for f in funcs))
        acts = [s for (_, _, s, origin) in tr.inputs if origin == "activation"] or [inputs[0][1]]
        name = self.unique_name(problem_name(stem[:48], [acts[0].shape], acts[0].dtype))
        share = self.share(m["time_us"])
        kiln = {
            "kind": "chain", "members": labels, "calls": len(m["calls"]),
            "device_time_us": round(m["time_us"], 3), "share": round(share, 6), "time_source": self.time_source,
            "module_paths": m["paths"], "grad_mode": tr.grad_mode, "capture_device": self.device,
            "input_origins": tr.origins, "first_call_ops": first, "torch_flags": self.torch_flags,
        }
        if m["pattern"]:
            kiln["pattern"] = m["pattern"]
        flops = self.gemm_chain_flops(m["pattern"], first)
        if flops is not None:
            kiln["flops"] = flops
        if not the_models:
            kiln["inputs_from"] = "the first calls of the members' signatures, not one run of the chain"
        kiln.update(module_ops(tr, kept))
        kiln.update(_layout_fields(inputs, outputs))
        description = (f"chain of {len(first)} captured calls ({' -> '.join(l.split('::')[1] for l in labels)}) "
                       f"from {os.path.basename(self.opts.script)}: {len(m['calls'])} time(s), "
                       f"{100 * share:.1f}% of {self.time_source} time (its members' time); first at "
                       f"{m['paths'][0] or '<root>'}.")
        c = Candidate(name, f"chain:{m['pattern'] or 'memory'}", description, inputs, outputs, source, kiln,
                      share, {"kind": "chain", "members": labels}, self.slice_bytes,
                      derived_outputs=not the_models)
        c.on_skip = lambda why: m.__setitem__("skipped", why)
        c.on_ok = lambda final: m.__setitem__("problem", final)
        c.release = lambda: self.names.discard(name)
        return c

    def emit_problem(self, c: "Candidate") -> None:
        """Writes one problem at its planned level, names it by its content (kiln.capture_run), then checks
        it and (unless --no-reference) builds its reference data when its real outputs were written."""
        from kiln.capture_problem import (DTYPE_NAMES, REAL_OUTPUTS_FILE, Axes, workload_line,
                                          write_problem_files, write_random_sets, write_real_set)
        from kiln.problem import ProblemError, content_hash
        inputs, outputs, kiln = c.inputs, c.outputs, c.kiln
        axes = Axes()
        modes = c.modes()
        drawn_names = [n for n, _, mode in modes if mode == "drawn"]
        kiln["real_outputs"] = REAL_OUTPUTS_FILE if c.with_outputs else None
        if drawn_names:
            kiln["inputs_drawn"] = drawn_names
        definition = {
            "name": c.name,
            "op_type": c.op_type,
            "description": c.description,
            "axes": axes.axes,
            "custom_inputs_entrypoint": None,
            "inputs": {n: {"shape": axes.shape(s.data_shape), "dtype": DTYPE_NAMES[s.dtype]} for n, s in inputs},
            "outputs": {n: {"shape": axes.shape(s.data_shape), "dtype": DTYPE_NAMES[s.dtype]} for n, s in outputs},
            "reference": c.source,
            "constraints": [],
            "kiln": kiln,
        }
        staging = self.rundir.staging_dir(f".new-{c.name}")
        t0 = time.perf_counter()
        try:
            os.makedirs(staging)
            descriptors, drawn, n_bytes = write_real_set(staging, modes, outputs if c.with_outputs else None)
            w0 = workload_line("", 0, "real", descriptors, {"drawn": drawn} if drawn else {})
            h = content_hash(definition, [w0], staging)
            name = self.rundir.name_for(c.name, h)
            definition["name"] = name
            kiln["content_hash"] = h
            w0 = workload_line(h, 0, "real", descriptors, {"drawn": drawn} if drawn else {})
            seeds = [(int(h[:12], 16) + j) % (1 << 62) for j in range(1, c.n_random + 1)]
            randoms, more = write_random_sets(staging, h, modes, seeds)
            n_bytes += more
            write_problem_files(staging, definition, [w0] + randoms)
            problem_dir = self.rundir.staging_dir(name)
            os.replace(staging, problem_dir)
        except (OSError, ProblemError) as e:
            shutil.rmtree(staging, ignore_errors=True)
            self.write_error = f"cannot write under {self.opts.out}: {getattr(e, 'strerror', None) or e}"
            c.skip(self.write_error)
            return
        if c.with_outputs:
            check = self.check_problem(problem_dir, outputs, c.n_random)
        else:
            check = self.check_loads(problem_dir)
        if check.get("fatal"):
            shutil.rmtree(problem_dir, ignore_errors=True)
            self.rundir.given.pop(name, None)  # the name was not used after all
            c.skip(check["fatal"])
            return
        self.bytes_written += n_bytes
        self.written.append(dict(c.summary, name=name, calls=kiln["calls"], share=kiln["share"],
                                 device_time_us=kiln["device_time_us"], bytes=n_bytes, content_hash=h,
                                 inputs=c.level, drawn_inputs=drawn_names, real_outputs=c.with_outputs,
                                 random_workloads=check["random_workloads"], real_check=check["real"],
                                 reference=check.get("reference"), seconds=round(time.perf_counter() - t0, 3)))
        c.on_ok(name)

    def check_loads(self, problem_dir: str) -> dict:
        """A problem without real outputs (inputs drawn from statistics, or too big with its outputs):
        its files must load; the reference runs where the gate builds its reference data."""
        from kiln.reference import ProblemError, load_problem
        try:
            load_problem(problem_dir)
        except ProblemError as e:
            return {"fatal": f"kiln's own problem files do not load: {e}", "real": None, "random_workloads": 0}
        return {"real": None, "random_workloads": 0,
                "reference": "on demand: built where the gate runs (kiln optimize, kiln eval)"}

    def check_problem(self, problem_dir: str, outputs: list, n_random: int) -> dict:
        """Runs the reference on the real inputs (it must reproduce the model's outputs) and on every
        random workload (a random set the reference rejects is dropped), then builds the reference data."""
        from kiln.capture_problem import compare, rewrite_workloads
        from kiln.reference import (ProblemError, ReferenceFailure, build_reference, load_problem,
                                    load_reference, materialize_inputs, run_reference)
        result: dict = {"random_workloads": n_random}
        try:
            problem = load_problem(problem_dir)
            reference = load_reference(problem)
        except (ProblemError, ReferenceFailure) as e:
            return {"fatal": f"kiln's own problem files do not load: {e}", "real": None, "random_workloads": 0}
        try:
            w0 = problem.workloads[0]
            try:
                got = run_reference(reference, problem, w0, materialize_inputs(problem, w0, self.device))
            except (ProblemError, ReferenceFailure) as e:
                return {"fatal": f"the reference does not run on the captured tensors: {e}", "real": None,
                        "random_workloads": 0}
            checks = {}
            for name, stored in outputs:  # compared where the reference ran (big outputs on the GPU)
                out = got[name].detach()
                checks[name] = compare(out, stored.load().to(out.device))
            result["real"] = {"ok": all(c["ok"] for c in checks.values()), "outputs": checks}
            bad_random = None
            for w in problem.workloads[1:]:
                try:
                    run_reference(reference, problem, w, materialize_inputs(problem, w, self.device))
                except (ProblemError, ReferenceFailure) as e:
                    bad_random = str(e)
                    break
            if bad_random is not None:
                rewrite_workloads(problem_dir, 1)
                result["random_workloads"] = 0
                result["random_dropped"] = bad_random[:300]
        finally:
            reference.close()
            del reference
        if not self.opts.no_reference:
            t0 = time.perf_counter()
            out_dir = os.path.join(problem_dir, "kiln", f"ref-{self.device}")
            result["reference"] = "built"
            # The gate proves on >= 3 input sets, >= 2 of them random: the random workloads are sets
            # already, so each workload gets only as many extra sets as are missing (a random set
            # that the reference rejects there leaves the workloads' own sets).
            wanted = max(1, REFERENCE_SETS - result["random_workloads"])
            for n_sets in sorted({wanted, 1}, reverse=True):
                try:
                    build_reference(problem_dir, out_dir=out_dir, device=self.device, n_sets=n_sets, quiet=True)
                    result["reference"] = f"built ({n_sets} sets per workload)"
                    break
                except (ProblemError, ReferenceFailure) as e:
                    result["reference"] = f"failed: {' '.join(str(e).split())[:300]}"
            result["reference_s"] = round(time.perf_counter() - t0, 3)
        return result

    # ---- outputs ---------------------------------------------------------------------------------------

    @property
    def time_source(self) -> str:
        return "CUDA kernel" if self.device == "cuda" else "CPU"

    def write_model_json(self) -> None:
        from kiln.capture_problem import DTYPE_NAMES, dump_json
        rec = self.recorder

        def tmeta(m):
            return {"shape": list(m.shape), "dtype": DTYPE_NAMES.get(m.dtype, str(m.dtype).replace("torch.", "")),
                    "stride": list(m.stride), "device": m.device}

        produced_by: dict = {}
        ops_json = []
        edges = []
        consumed: list = []
        for i, op in enumerate(self.ops):
            g = self.groups[self.group_of[i]]
            ins = []
            for arg, tid, meta in op.inputs:
                ins.append(dict({"arg": arg, "tensor": tid}, **tmeta(meta)))
                if tid in produced_by:
                    edges.append([produced_by[tid], i, tid])
                else:
                    consumed.append(tid)
            outs = []
            for tid, meta in op.outputs:
                outs.append(dict({"tensor": tid}, **tmeta(meta)))
                produced_by[tid] = i
            ops_json.append({
                "id": i, "aten": op_label_of(op.func), "module": op.module_path, "module_class": op.module_class,
                "pass": op.pass_index, "grad_mode": op.grad_mode, "inputs": ins, "outputs": outs,
                "args": op.args_json, "time_us": round(self.op_time[i], 3), "group": self.group_of[i],
                "problem": g.problem, "module_problem": self.module_problem_of.get(i),
                "chain_problems": self.chain_problem_of.get(i, []),
            })
        graph_inputs = []
        seen = set()
        for tid in consumed:
            if tid in seen or tid in produced_by:
                continue
            seen.add(tid)
            info = rec.tensors[tid]
            kind, name = info.origin, info.name
            if tid in rec.tid_names:
                name, kind = rec.tid_names[tid]
            elif info.producer >= 0:
                kind = "outside"
                src = next((op for op in rec.ops if op.index == info.producer), None)
                name = f"made by {op_label_of(src.func)} outside the model" if src else "made outside the model"
            graph_inputs.append(dict({"tensor": tid, "kind": kind, "name": name}, **tmeta(info.meta)))
        groups_json = [{
            "group": gi, "aten": op_label_of(g.func), "shapes": g.shapes, "calls": g.calls,
            "time_us": round(g.time_us, 3), "share": round(self.share(g.time_us), 6), "problem": g.problem,
            "not_a_problem": g.no_problem, "skipped": g.skipped, "module_paths": g.paths[:8],
        } for gi, g in enumerate(self.groups)]
        modules_json = [{
            "module_class": m["cls"], "calls": len(m["calls"]), "time_us": round(m["time_us"], 3),
            "share": round(self.share(m["time_us"]), 6), "problem": m["problem"], "skipped": m["skipped"],
            "module_paths": m["paths"][:8], "ops_of_first_call": m["calls"][0] if m["calls"] else [],
        } for m in self.module_groups]
        chains_json = [{
            "pattern": m["pattern"], "calls": len(m["calls"]), "time_us": round(m["time_us"], 3),
            "share": round(self.share(m["time_us"]), 6), "problem": m["problem"], "skipped": m["skipped"],
            "module_paths": m["paths"][:8], "ops_of_first_call": m["calls"][0], "is_module": m["is_module"],
        } for m in self.chain_groups]
        model = {
            "kiln_model": 1,
            "script": self.opts.script, "args": self.opts.script_args, "device": self.device,
            "time_source": self.time_source, "time_unit": "us", "total_time_us": round(self.total_us, 3),
            "passes": rec.n_passes, "n_ops": len(self.ops),
            "notes": ("ops: every non-metadata aten call inside the model's module forwards, in call order "
                      "(views and other metadata calls are folded into tensor identity). A tensor id names one "
                      "value: an in-place write makes a new id. edges: [producer op id, consumer op id, tensor "
                      "id]. A consumed tensor no op produced is a graph input."),
            "ops": ops_json, "edges": edges, "graph_inputs": graph_inputs, "groups": groups_json,
            "module_groups": modules_json, "chain_groups": chains_json,
        }
        dump_json(os.path.join(self.out, "model.json"), model)

    def write_capture_json(self) -> None:
        import torch

        from kiln.capture_problem import dump_json
        rec = self.recorder
        versions = {"torch": torch.__version__, "python": platform.python_version()}
        for mod in ("transformers", "torchvision"):
            if mod in sys.modules:
                versions[mod] = getattr(sys.modules[mod], "__version__", None)
        info = {
            "kiln_capture": 1,
            "script": self.opts.script, "args": self.opts.script_args, "out": self.opts.out,
            "device": self.device,
            "device_name": torch.cuda.get_device_name() if self.device == "cuda" else platform.processor() or "cpu",
            "versions": versions,
            "wall_s": {k: round(v, 3) for k, v in self.wall.items()},
            "time_source": self.time_source, "total_time_us": round(self.total_us, 3),
            "profiled_device_total_us": round(self.profiled_total_us, 3),
            "passes": rec.n_passes, "n_ops": len(self.ops), "n_calls_dispatched": rec.n_calls,
            "n_metadata_calls": rec.n_meta, "n_signatures": len(self.groups),
            "max_bytes": self.opts.max_bytes, "bytes_written": self.bytes_written,
            "top": self.opts.top, "random_sets": self.opts.random_sets,
            "problems": self.written, "skipped": self.skipped,
            "holding": {"cap_bytes": rec.hold_cap, "disabled": rec.holding_disabled,
                        "slice_bytes": self.slice_bytes},
            "names": self.ledger,
            "torch_flags": self.torch_flags,
            "internal_errors": rec.internal_errors,
        }
        if getattr(self, "profile_error", None):
            info["profile_error"] = self.profile_error
        dump_json(os.path.join(self.out, "capture.json"), info)

    def print_table(self) -> None:
        rows = max(self.opts.top, 10)
        w = self.log
        w("")
        passes = (f"{self.recorder.n_passes} forward pass(es)" if self.recorder.seen_forward
                  else "a script without module forwards")
        w(f"kiln capture: {os.path.basename(self.opts.script)} on {self.device} — {len(self.ops)} ops in "
          f"{passes}, {len(self.groups)} signatures, {self.total_us / 1e3:.3f} ms of {self.time_source} time")
        w(f"{'#':>3}  {'op':34s} {'shapes':44s} {'calls':>5} {'time ms':>9} {'share':>6}  problem")
        for k, g in enumerate(self.groups[:rows]):
            status = g.problem or (f"- {g.no_problem}" if g.no_problem
                                   else f"skipped: {g.skipped}" if g.skipped else "-")
            w(f"{k + 1:>3}  {op_label_of(g.func)[6:][:34]:34s} {g.shapes:44s} {g.calls:>5} "
              f"{g.time_us / 1e3:>9.3f} {100 * self.share(g.time_us):>5.1f}%  {status}")
        rest = self.groups[rows:]
        if rest:
            t = sum(g.time_us for g in rest)
            more = f"({len(rest)} more signatures)"
            w(f"{'':>3}  {more:34s} {'':44s} {sum(g.calls for g in rest):>5} "
              f"{t / 1e3:>9.3f} {100 * self.share(t):>5.1f}%")
        if self.module_groups:
            w("")
            w(f"{'#':>3}  {'leaf module (fused forward)':34s} {'first path':44s} {'calls':>5} "
              f"{'time ms':>9} {'share':>6}  problem")
            for k, m in enumerate(self.module_groups[:rows]):
                status = m["problem"] or (f"skipped: {m['skipped']}" if m["skipped"] else "-")
                path = m["paths"][0] if m["paths"] else ""
                path = path if len(path) <= 44 else "…" + path[-43:]
                w(f"{k + 1:>3}  {m['cls'][:34]:34s} {path:44s} {len(m['calls']):>5} {m['time_us'] / 1e3:>9.3f} "
                  f"{100 * self.share(m['time_us']):>5.1f}%  {status}")
        if self.chain_groups:
            w("")
            w(f"{'#':>3}  {'chain of memory-bound calls':34s} {'first path':44s} {'calls':>5} "
              f"{'time ms':>9} {'share':>6}  problem")
            for k, m in enumerate(self.chain_groups[:rows]):
                status = m["problem"] or (f"skipped: {m['skipped']}" if m["skipped"] else "-")
                path = m["paths"][0] if m["paths"] else ""
                path = path if len(path) <= 44 else "…" + path[-43:]
                what = f"{m['pattern'] or 'chain'} of {len(m['calls'][0])} calls"
                what += " (a module)" if m["is_module"] else ""
                w(f"{k + 1:>3}  {what:34s} {path:44s} {len(m['calls']):>5} {m['time_us'] / 1e3:>9.3f} "
                  f"{100 * self.share(m['time_us']):>5.1f}%  {status}")
        w("")
        n_bytes = self.bytes_written
        w(f"wrote {len(self.written)} problem(s) ({_fmt_bytes(n_bytes)} of tensors) to "
          f"{os.path.join(self.opts.out, 'problems')}; model.json and capture.json in {self.opts.out}")
        bad = [p["name"] for p in self.written if p.get("real_check") and not p["real_check"]["ok"]]
        if bad:
            w(f"WARNING: the reference does not reproduce the model's outputs for: {', '.join(bad)}")
        drawn = [p["name"] for p in self.written if p["drawn_inputs"]]
        if drawn:
            w(f"{len(drawn)} problem(s) keep inputs as statistics, structure and a real slice (their tensors "
              f"exceed --max-bytes {_fmt_bytes(self.opts.max_bytes)}); their reference data is built where "
              f"the gate runs: {', '.join(drawn)}")
        failed = [p["name"] for p in self.written if str(p.get("reference", "")).startswith("failed")]
        if failed:
            w(f"WARNING: reference data could not be built for: {', '.join(failed)}")
        if self.skipped:
            w(f"skipped {len(self.skipped)} of the top signatures:")
            for s in self.skipped:
                what = s.get("op") or (f"module {s['module']}" if "module" in s else s.get("chain"))
                w(f"  {what} [{s.get('shapes') or ', '.join(s.get('paths') or [])}] "
                  f"({100 * s['share']:.1f}%): {s['reason']}")
        if self.recorder.holding_disabled:
            w(f"note: {self.recorder.holding_disabled}")
        if getattr(self, "profile_error", None):
            w(f"note: the profiler failed ({self.profile_error}); times are missing")
        if self.recorder.internal_errors:
            w(f"note: {len(self.recorder.internal_errors)} internal recorder error(s), see capture.json")
        w(f"capture wall time {self.wall.get('total_s', 0):.1f} s (script {self.wall.get('script_s', 0):.1f} s, "
          f"problems and references {self.wall.get('problems_s', 0):.1f} s)")
        if self.write_error:
            w(f"kiln capture: {self.write_error}")


@dataclass
class Candidate:
    """A problem about to be written: everything but what the byte plan decides, its level and its
    random sets. Levels: "drawn" (every input a `random` input drawn from its statistics), "sliced" (small
    inputs real, big ones drawn with their real slice), "real" (every input real); with_outputs adds
    the model's real outputs (and with them the check and the reference data at capture)."""
    name: str
    op_type: str
    description: str
    inputs: list   # [(name, Stored)]
    outputs: list  # [(name, Stored)]
    source: str
    kiln: dict
    share: float
    summary: dict
    slice_bytes: int
    level: str = "drawn"
    with_outputs: bool = False
    n_random: int = 0
    on_skip: Any = None
    on_ok: Any = None
    release: Any = None
    # its outputs can only be computed by the reference: a chain whose members' held first calls are not
    # one run of the chain (kiln.capture_chain.held_instance)
    derived_outputs: bool = False

    def can(self, level: str) -> bool:
        return level != "real" or all(s.held for _, s in self.inputs)

    def mode(self, s, level: str) -> str:
        """How one input is written at a level: "real", "whole_slice" or "drawn"."""
        if level == "real" or (level == "sliced" and s.held and s.nbytes <= self.slice_bytes):
            return "real"
        if level == "sliced" and s.slice_path and s.slice_elements == s.numel:
            return "whole_slice"
        return "drawn"

    def bytes_at(self, level: str) -> int:
        """Bytes of the real set at a level (real.safetensors and slices.safetensors), headers included."""
        n = 0
        for _, s in self.inputs:
            mode = self.mode(s, level)
            if mode != "drawn":
                n += s.nbytes + HEADER_BYTES_PER_TENSOR
            elif s.slice_path and level != "drawn":
                n += s.slice_elements * s.dtype.itemsize + HEADER_BYTES_PER_TENSOR
        return n + (2 * HEADER_BYTES_PER_FILE if n else 0)

    def modes(self) -> list:
        """[(name, Stored, mode)] at the planned level; a drawn input kept only whole gets its summary now
        (small: its summary was not needed while recording), and one drawn at level "drawn" loses its slice."""
        from kiln.capture_stats import summarize
        out = []
        for name, s in self.inputs:
            mode = self.mode(s, self.level)
            if mode == "drawn" and s.summary is None:
                s.summary = summarize(s.load())
            if mode == "drawn" and self.level == "drawn":
                s.slice_path, s.slice_elements = None, 0
            out.append((name, s, mode))
        return out

    @property
    def outputs_held(self) -> bool:
        return not self.derived_outputs and all(s.held for _, s in self.outputs)

    @property
    def output_bytes(self) -> int:
        return sum(s.nbytes + HEADER_BYTES_PER_TENSOR for _, s in self.outputs) + HEADER_BYTES_PER_FILE

    @property
    def per_set(self) -> int:
        """Bytes of one random<j>.safetensors."""
        return sum(s.nbytes + HEADER_BYTES_PER_TENSOR for _, s in self.inputs) + HEADER_BYTES_PER_FILE

    def skip(self, why: str) -> None:
        self.on_skip(why)
        self.release()


def _kept_outputs(tr, m: dict):
    """(kept output indices, [(out<j>, stored)], reference source) of a module or chain trace, or None with
    m["skipped"] saying why (no non-empty output; a reference that cannot be written)."""
    from kiln.capture_problem import module_reference
    kept = [k for k, (_, s, _) in enumerate(tr.outputs) if s.numel > 0]
    if not kept:
        m["skipped"] = "no non-empty tensor output"
        return None
    try:
        source = module_reference(tr, kept)
    except ValueError as e:
        m["skipped"] = f"cannot write the reference: {e}"
        return None
    return kept, [(f"out{j}", tr.outputs[k][1]) for j, k in enumerate(kept)], source


def _layout_fields(inputs: list, outputs: list) -> dict:
    both = inputs + outputs
    return {"shapes": {n: list(s.shape) for n, s in both}, "strides": {n: list(s.stride) for n, s in both},
            "storage_offsets": {n: s.offset for n, s in both}, "layouts": {n: s.layout_json() for n, s in both}}


def op_label_of(func) -> str:
    from kiln.capture_record import op_label
    return op_label(func)


def _fmt_bytes(n: float) -> str:
    from kiln.capture_record import _fmt_bytes as f
    return f(n)


def main(argv: Optional[list] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        opts = parse_args(argv)
        with stdout_to_stderr(opts.json):
            code = Capture(opts, lambda line: print(line, flush=True)).run()
        if opts.json:
            with open(os.path.join(opts.out, "capture.json")) as f:
                print(json.dumps(json.load(f), indent=1))
        return code
    except CaptureError as e:
        sys.stdout.flush()
        print(f"kiln capture: {e}", file=sys.stderr, flush=True)
        return e.code


if __name__ == "__main__":
    sys.exit(main())
