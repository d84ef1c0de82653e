"""kiln.install_cost: what installing an entry costs and whether it pays. An entry is worth installing only
when its kernel, plus what kiln's dispatch adds to every call, beats eager per call. The library says the
first half (`kiln optimize` writes manifest.json's "install": whether the kernel beat eager in the gate, on
times whose spreads support it); this module measures the second on this machine and in this process, and
judges each entry (docs/install.md, "Which entries are installed").

The dispatch cost is the hit overhead: a call of the op through PyTorch's dispatcher with kiln installed,
minus kiln's bare launch of the same kernel (what the gate, the output allocation and the dispatch add).
It is measured once per library and dispatch path on the library's smallest aten entry (the probe), on
tensors of its gate's exact dtype, shape and strides, in alternating rounds; it does not depend on the size
of the tensors, so the probe stands for every entry. The same machinery (Timer, EntryBench) is what `kiln
tune` times each entry with."""

from __future__ import annotations

import gc
import math
import statistics
import time
from typing import Optional

SPREAD_LIMIT_PCT = 5.0  # src/store/store.h KILN_SPREAD_LIMIT_PCT: the same limit on the C side
VERDICT_CATEGORY = {  # manifest "speedup_verdict" (kiln_store_speedup_name) of an entry that does not beat eager
    "supported": "slower than eager", "noisy": "slower than eager", "not_significant": "no significant win",
    "noisy_baseline": "noisy eager baseline", "unknown": "not compared"}
PROBE_MAX_BYTES = 256 << 20  # the probe's tensors, at most (a user's model needs its memory)
PROBE_ROUNDS = 5
PROBE_TARGET_S = 0.004  # per timed loop


class Timer:
    """Wall time per call of fn with the device synchronised around the loop: for a GPU that is the cost
    of a call in a stream of calls (host dispatch or kernel, whichever is longer), which is what a model
    pays. As timeit does, Python's garbage collector runs before a loop and not during it: a full collection
    of the heap torch.compile leaves behind can take tens of milliseconds and land in some loops and not in
    others (Gemma-4 on the H200: torch.compile's rounds spread 4.9-6.4 % before, 0.8 % in two runs after)."""

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
        # the young generations only: the loop runs with the collector off, so no collection can fall inside
        # it; a full collection walks every object of torch and the model (~0.1 s on a CPU with torch loaded,
        # 41 s of a 151 s install check of 25 entries) and gains the loop nothing
        gc.collect(1)
        was_on = gc.isenabled()
        gc.disable()
        try:
            self.sync()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            self.sync()
            return (time.perf_counter() - t0) / n * 1e6
        finally:
            if was_on:
                gc.enable()


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


def _relaid(spec: dict, device):
    """The gate's dtype and shape laid out densely in another order (the two innermost dims of size over 1, by
    the gate's strides, swapped), or None where fewer than two dims are over 1: a tensor the gate misses by its
    strides and any kernel of PyTorch's takes."""
    import torch
    from kiln.install_gate import _torch_dtype
    shape, strides = [int(s) for s in spec["shape"]], [int(s) for s in spec["strides"]]
    order = sorted((d for d in range(len(shape)) if shape[d] > 1), key=lambda d: (-strides[d], d))
    if len(order) < 2 or 0 in shape:
        return None
    order[-2], order[-1] = order[-1], order[-2]
    new, step = [0] * len(shape), 1
    for d in reversed(order):
        new[d], step = step, step * shape[d]
    for d in range(len(shape)):
        if shape[d] == 1:
            new[d] = step
    dtype = _torch_dtype(spec["dtype"])
    n = step
    base = torch.randn(n, device=device).to(dtype) if dtype.is_floating_point else \
        torch.zeros(n, dtype=dtype, device=device)
    return base.as_strided(shape, new)


def _miss_tensors(specs: list, device, movable=None) -> list:
    """Inputs the gate must miss, as a model could pass them: the gate's own except the largest of `movable`
    (default: every slot) that can be laid out in another dense order (_relaid); where none can, the first of
    `movable` one element off a 16-byte boundary. (Every input off a boundary, as before 2026-12-06, put
    PyTorch's kernels on tensors no model passes them; ConvNeXt-T's install check on the H100 ended in a
    "misaligned address" with such inputs in play, cause not established.)"""
    slots = list(range(len(specs)) if movable is None else movable)
    out = [_gate_tensor(g, device) for g in specs]
    sizes = {i: math.prod(int(s) for s in specs[i]["shape"]) for i in slots}
    for i in sorted(slots, key=lambda i: -sizes[i]):
        t = _relaid(specs[i], device)
        if t is not None:
            out[i] = t
            return out
    if slots:
        out[slots[0]] = _gate_tensor(specs[slots[0]], device, misaligned=True)
    return out


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
        self.miss_inputs = _miss_tensors(entry.inputs, self.device)
        self.movable = list(range(len(entry.inputs)))  # the slots a call passes (a module's: its activations)
        self.outputs = [_gate_tensor(g, self.device) for g in entry.outputs]
        self.scratch = [torch.zeros(max(entry.scratch_bytes, 1), dtype=torch.uint8, device=self.device)] \
            if entry.has_scratch else []
        if entry.kind == "aten":
            from kiln.install_aten import _schema_mode
            from kiln.install_gate import _Unsupported
            op = _resolve_overload(entry.aten)
            try:  # an op install never replaces (out=, a view) has no kiln call to time
                _schema_mode(op, len(entry.outputs) + len((entry.dropped or {}).get("indices") or ()))
            except _Unsupported as e:
                raise ValueError(str(e)) from None
            args = [_template(a) for a in entry.args["args"]]
            kwargs = {k: _template(v) for k, v in (entry.args.get("kwargs") or {}).items()}
            inplace = any(a.alias_info is not None and a.alias_info.is_write for a in op._schema.arguments)

            def via(fn):
                built = {}  # id(tensors) -> (tensors, args, kwargs): made once, not in the timed loop

                def call(tensors):
                    if inplace:  # an in-place op writes its input: give it a fresh one each time
                        tensors = [tensors[0].clone()] + tensors[1:]
                        return fn(*[_call_template(a, tensors) for a in args],
                                  **{k: _call_template(v, tensors) for k, v in kwargs.items()})
                    b = built.get(id(tensors))
                    if b is None or b[0] is not tensors:
                        b = built[id(tensors)] = (tensors, [_call_template(a, tensors) for a in args],
                                                  {k: _call_template(v, tensors) for k, v in kwargs.items()})
                    return fn(*b[1], **b[2])
                return call
            self.call = via(op)
            binding = _binding(op)
            self.binding_call = via(binding) if binding is not None else None
        else:
            self.binding_call = None
            names = [g["name"] for g in entry.inputs]
            from kiln.install_gate import _Unsupported
            from kiln.install_module import module_activation_slots
            module = next((model_modules[p] for p in entry.module_paths if p in model_modules), None)
            if module is None:
                raise ValueError("its module is not in the model that was timed")
            try:
                act = module_activation_slots(entry)
            except _Unsupported as e:
                raise ValueError(str(e)) from None
            self.module = module
            self.call = lambda tensors: module(*[tensors[i] for i in act])
            # the module's own parameters are the gate's other inputs: time with them, as the model does
            self.inputs = [t if i in act else getattr(module, names[i]) for i, t in enumerate(self.inputs)]
            self.miss_inputs = [t if i in act else getattr(module, names[i])
                                for i, t in enumerate(_miss_tensors(entry.inputs, self.device, act))]
            self.movable = list(act)

    call_form = "torch.ops"  # "binding" once prefer_bindings() has shown the binding reaches the entry

    def misaligned_inputs(self) -> list:
        """The call's inputs with the last one it passes one element off a 16-byte boundary: a miss that every
        other comparison of the gate passes first (bench/install_overhead.py's worst case)."""
        out = list(self.inputs)
        if self.movable:
            i = self.movable[-1]
            out[i] = _gate_tensor(self.entry.inputs[i], self.device, misaligned=True)
        return out

    def raw(self, lib):
        """The bare launch: what a gate hit ends with (libkiln_rt's launch without ctypes argument
        conversion, on PyTorch's current stream), with the pointer array and the stream made once, so that
        "hit overhead" is the gate, the output allocation and the dispatch, not the cost of lib.launch's
        argument checks. An entry's scratch memory is zeroed before every launch, as a hit zeroes it (the
        runtime's contract: a kernel may keep counters there that it does not reset; launched again on a used
        buffer, a group_norm kernel of the VAE decoder faulted on the H200). Checked once here; the timing
        loop does not look at the status."""
        import ctypes

        import torch
        tensors = self.inputs + self.outputs + self.scratch
        for t in self.scratch:  # the last round's launches left it used
            t.zero_()
        lib.launch(self.entry, tensors)
        ptrs = (ctypes.c_void_p * len(tensors))(*[t.data_ptr() for t in tensors])
        stream = ctypes.c_void_p(torch._C._cuda_getCurrentRawStream(lib.device_index)) if lib.is_cuda else None
        launch, handle, index, n = lib._launch_fast, lib._handle, self.entry.index, len(tensors)
        if not self.scratch:
            return lambda: launch(handle, index, ptrs, n, None, stream)
        scratch = self.scratch[0]

        def zeroed_launch():
            scratch.zero_()
            return launch(handle, index, ptrs, n, None, stream)
        return zeroed_launch


def _binding(op):
    """The generated Python binding a model calls for op's function (torch.softmax for aten::softmax.int,
    torch._C.TensorBase.add_ for aten::add_.Tensor), or None."""
    import torch
    name = op._schema.name.split("::", 1)[-1]
    fn = getattr(torch._C._VariableFunctions, name, None)
    if fn is None and op._schema.arguments and op._schema.arguments[0].name == "self":
        fn = getattr(torch._C.TensorBase, name, None)
    return fn


def prefer_bindings(lib, benches: dict, model=None, dispatch=None, inst=None) -> None:
    """Each aten bench whose op has a Python binding is timed through it (what a model's torch.softmax(x, -1)
    or x.add_(y) pays) instead of through torch.ops.aten.<op>.<overload>, whose Python-side schema matching
    costs microseconds per call that no model pays (on the cpu 4.1 us of the 4.7 us "hit overhead" that
    torch.ops gave a 4x16 softmax). Only where the binding is shown to reach the same entry: with kiln
    installed (inst, or installed here for these entries), one call of it is exactly one hit of the entry,
    as one torch.ops call is. The others keep torch.ops."""
    import kiln
    cands = {n: b for n, b in benches.items() if getattr(b, "binding_call", None) is not None}
    if not cands:
        return
    own = inst is None
    if own:
        inst = kiln.install(lib, model=model, entries=list(cands), dispatch=dispatch)
    try:
        def hits(name):
            return inst.stats()["entries"].get(name, {}).get("hits", 0)
        for n, b in cands.items():
            try:
                h0 = hits(n)
                b.binding_call(b.inputs)
                h1 = hits(n)
                b.call(b.inputs)
                if h1 - h0 == 1 and hits(n) - h1 == 1:
                    b.call, b.call_form = b.binding_call, "binding"
            except Exception:  # noqa: BLE001 - the binding takes other arguments: torch.ops stays
                pass
    finally:
        if own:
            kiln.uninstall(inst)


def _gate_bytes(entry) -> int:
    from kiln.install_gate import _torch_dtype
    total = 0
    for g in list(entry.inputs) + list(entry.outputs):
        if g.get("shape") is None or g.get("strides") is None:
            return -1
        shape, strides = [int(s) for s in g["shape"]], [int(s) for s in g["strides"]]
        n = 1 + sum((s - 1) * st for s, st in zip(shape, strides)) if all(shape) else 0
        total += n * _torch_dtype(g["dtype"]).itemsize
    return total


def _in_place(entry) -> bool:
    """aten::add_.Tensor: the call clones its input each time (EntryBench), which the bare launch does not."""
    return (entry.aten or "").split("::")[-1].split(".")[0].endswith("_")


def measure_dispatch_us(lib, dispatch: str) -> tuple:
    """(hit overhead in us, note), cached on lib per dispatch path: the median over alternating rounds of (op
    call with kiln installed - bare launch) on the library's smallest usable aten entry, installed alone with
    this dispatch path; (None, why) when no entry can be probed (none is aten, all are bigger than
    PROBE_MAX_BYTES, or the probe fails)."""
    cache = lib.__dict__.setdefault("_dispatch_cost", {})
    if dispatch not in cache:
        cache[dispatch] = _probe(lib, dispatch)
    return cache[dispatch]


def _probe(lib, dispatch: str) -> tuple:
    import torch

    from kiln.install import install, uninstall
    usable = [e for e in lib.entries if not e.disabled and e.kind == "aten" and not _in_place(e)
              and 0 <= _gate_bytes(e) <= PROBE_MAX_BYTES]
    if not usable:
        return None, (f"no aten entry of at most {PROBE_MAX_BYTES >> 20} MiB to measure it on")
    probe = min(usable, key=_gate_bytes)
    timer = Timer(lib.is_cuda)
    try:
        bench = EntryBench(probe, lib, {})
        raw = bench.raw(lib)
        hit = lambda: bench.call(bench.inputs)  # noqa: E731
        with torch.inference_mode():
            inst = install(lib, entries=[probe.name], dispatch=dispatch, compile_friendly=False)
            try:
                if probe.name not in inst.installed:
                    return None, f"the probe {probe.name} did not install: {inst.skipped.get(probe.name)}"
                prefer_bindings(lib, {probe.name: bench}, inst=inst)
                n = timer.iterations(hit, PROBE_TARGET_S)
                overheads = []
                for _ in range(PROBE_ROUNDS):
                    overheads.append(timer.per_call_us(hit, n) - timer.per_call_us(raw, n))
                if inst.stats()["entries"].get(probe.name, {}).get("hits", 0) == 0:
                    return None, f"the probe {probe.name}'s own call missed its gate"
            finally:
                uninstall(inst)
    except Exception as e:  # noqa: BLE001 - a probe that cannot run is a reason, not a failure
        return None, f"the probe {probe.name} failed: {type(e).__name__}: {e}"
    cost = max(statistics.median(overheads), 0.0)
    return cost, f"{cost:.1f} us per call ({dispatch} dispatch, measured on {probe.name})"


def _half(spread_pct) -> float:
    return spread_pct / 200 if isinstance(spread_pct, (int, float)) and spread_pct > 0 else 0.0


def judge(entry, dispatch_us: Optional[float]) -> tuple:
    """(install?, category, reason) for an entry without a `kiln tune` decision: the library's verdict on the
    kernel (manifest "install"), then the kernel's time plus the dispatch cost, both at the pessimistic end
    of their spreads, against eager's at its optimistic end. category is "beats eager", "slower with dispatch"
    or, for an entry whose kernel did not beat eager, one of VERDICT_CATEGORY's."""
    decision = entry.data.get("install")
    if not isinstance(decision, dict):
        return False, "not compared", "the library does not say whether it beats eager (written by an older kiln)"
    if not decision.get("beats_eager"):
        why = str(decision.get("reason") or "it does not beat eager in the gate")
        return False, VERDICT_CATEGORY.get(entry.data.get("speedup_verdict"), "not compared"), why
    kiln_us, eager_us = entry.time_us.get("kiln"), entry.time_us.get("eager")
    spreads = entry.data.get("spread_pct") or {}
    if not (isinstance(kiln_us, (int, float)) and isinstance(eager_us, (int, float))):
        return False, "not compared", "the library lacks its kernel or eager time"
    if dispatch_us is None:
        return True, "beats eager", f"{decision.get('reason')}; dispatch cost not measured"
    kiln_hi = kiln_us * (1 + _half(spreads.get("kiln"))) + dispatch_us
    eager_lo = eager_us * (1 - _half(spreads.get("eager")))
    if kiln_hi < eager_lo:
        return True, "beats eager", (f"{eager_us / (kiln_us + dispatch_us):.2f}x per call with dispatch "
                                     f"({eager_us:.2f} us eager, {kiln_us:.2f} + {dispatch_us:.1f} us)")
    return False, "slower with dispatch", (f"not faster with dispatch: {kiln_us:.2f} us kernel + {dispatch_us:.1f} us "
                                           f"dispatch against {eager_us:.2f} us eager")


# ---------------------------------------------------------------------------------------------------
# What a table may say about a speedup: src/store/summary.c's kiln_store_speedup_judge, the same rule for the
# times measured on the Python side (tune's per-call and forward timings). tests/py/test_tune.py holds the two
# to the same cases.


def spread_pct(samples: list) -> Optional[float]:
    """(max - min) / median of repeated timings, in percent; None for fewer than two."""
    if len(samples) < 2:
        return None
    med = statistics.median(samples)
    return 100 * (max(samples) - min(samples)) / med if med > 0 else None


def speedup_judge(eager, eager_spread, kiln, kiln_spread) -> tuple:
    """(verdict, value, ratio): verdict "unknown", "supported", "noisy", "not_significant" or
    "noisy_baseline"; value eager / kiln where the verdict shows a figure, else None; ratio eager / kiln
    whatever the verdict (None when a time is missing). Spreads in percent, None unknown (taken as 0)."""
    num = (int, float)
    if not (isinstance(eager, num) and isinstance(kiln, num)) or eager <= 0 or kiln <= 0:
        return "unknown", None, None
    ratio = eager / kiln
    e, k = _half(eager_spread), _half(kiln_spread)
    lo = eager * (1 - e) / (kiln * (1 + k))
    hi = eager * (1 + e) / (kiln * (1 - k)) if k < 1 else float("inf")
    over = [isinstance(s, num) and s > SPREAD_LIMIT_PCT for s in (eager_spread, kiln_spread)]
    if lo <= 1 <= hi:  # a stalled eager baseline (spread over the limit) is never divided by
        return ("noisy_baseline" if over[0] else "not_significant"), None, ratio
    return ("noisy" if any(over) else "supported"), ratio, ratio  # a win even at the noisy ends: flagged


def speedup_text(verdict: str, value) -> str:
    """The cell: "2.50x", "2.50x!" (a spread over the limit), "n.s.", "noisy" (eager's spread is over the
    limit: not divided by), "-"."""
    if verdict in ("supported", "noisy") and value is not None:
        return f"{value:.2f}x" + ("!" if verdict == "noisy" else "")
    return {"not_significant": "n.s.", "noisy_baseline": "noisy"}.get(verdict, "-")
