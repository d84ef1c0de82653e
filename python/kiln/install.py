"""kiln.install: puts a kiln library (RUN/library: manifest.json + kernels) back into an unmodified PyTorch
model, gated by shape, through libkiln_rt (C, over ctypes).

    import kiln
    inst = kiln.install("RUN/library")        # or kiln.install("RUN/library", model=model)
    model(x)                                   # kiln's kernels run where the gate admits the call
    print(inst.stats())                        # hits and misses per entry
    kiln.uninstall()                           # every override and every module replacement undone

`kiln run SCRIPT.py [args]` does the same for a script it does not change (python/kiln/run.py).
docs/install.md is the full story; in short:

- **aten entries** become kernels registered with `torch.library.Library("aten", "IMPL")` on the CUDA
  dispatch key for a cuda library, on the CPU key for a cpu library (the CPU key is what CI and CPU users
  get; it is not where a GPU model's time goes). The kernel checks the call against the entry's gate —
  the exact overload, every non-tensor argument, each tensor's dtype, shape, strides and device, a
  16-byte aligned start — and launches kiln's kernel on PyTorch's current stream on a hit. On a miss it
  calls the kernel PyTorch had registered before (`torch.library.get_kernel`, taken before kiln's
  registration), so a miss computes exactly what eager computes.
- **module entries** (a fused leaf module such as an RMSNorm or GroupNorm+SiLU) replace the `forward` of
  the module instances at the captured paths, under the same gate (the input and the module's own
  parameters); anything else goes to the original forward.
- **autograd** is left as it was: every kiln kernel is forward-only, so a call that needs a gradient
  (grad mode on and an input that requires grad) falls back. For composite ops (`aten::softmax.int`,
  `aten::linear`, ... which PyTorch decomposes), registering a backend kernel would also take the op's
  autograd formula away, so kiln registers the Autograd<Backend> key as well and sends calls that need a
  gradient to the original composite kernel.
- **outputs** are allocated with the dtype and strides that the original produced for the gated inputs
  (`torch.empty_strided`); in-place overloads write back into `self` and return it.

The jobs live in their own modules: install_runtime (libkiln_rt over ctypes: Library, Entry), install_gate
(an entry's gate and launch), install_aten (dispatcher kernels for aten entries), install_cpp (the opt-in
C++ dispatcher), install_module (module entries and their custom ops); this module installs and
uninstalls, and names what callers import.

Note: `kiln.install` is this module's `install` function (kiln/__init__.py re-exports it), so use
`from kiln.install import Library` (not `import kiln.install as m`) to reach the module itself.
"""


from __future__ import annotations

import json
import os
import sys
import warnings
from typing import Optional

from kiln.install_assumes import checks_of
from kiln.install_aten import _AtenEntry, _AtenOverride, _boxable, _number_positions, _resolve_overload
from kiln.install_cost import judge, measure_dispatch_us
from kiln.install_cpp import DISPATCH_MODES, _dispatch_mode, _install_cpp, cache_dir, dispatch_extension
from kiln.install_gate import _Gate, _Slot, _template, _torch_dtype, _Unsupported
from kiln.install_graph import graph_backend
from kiln.install_inductor import InductorPatterns, RootCompiler
from kiln.install_module import _is_activation, _ModuleBinder, _ModuleEntry
from kiln.install_runtime import (RUN_MODES, Entry, KilnError, Library, LibraryRefused, resolve_library_dir,
                                  runtime_path)

__all__ = [  # the API; the underscored names are the parts kiln.tune, the tests and bench/ reach for
    "install", "uninstall", "installed", "Installation", "read_decisions", "Library", "Entry", "KilnError",
    "LibraryRefused", "resolve_library_dir", "runtime_path", "dispatch_extension", "cache_dir",
    "DISPATCH_MODES", "COMPILE_MODES", "graph_backend", "INSTALL_DECISIONS", "_boxable", "_number_positions",
    "_resolve_overload", "_Slot",
    "_template", "_torch_dtype", "_is_activation",
]

INSTALL_DECISIONS = "install.json"  # written into a library by `kiln tune`: which entries win end to end


# ---------------------------------------------------------------------------------------------------
# Installing.

_ACTIVE: list = []


class Installation:
    """What kiln.install() did: `installed` entries, `skipped` {entry: reason}, `stats()`, `uninstall()`."""

    def __init__(self, lib: Library, owns_library: bool):
        self.library = lib
        self.owns_library = owns_library
        self.active = False
        self.installed: list = []   # entry names
        self.skipped: dict = {}     # entry name -> why it is not installed
        self.left_out: dict = {}    # entry name -> the kind of reason ("slower than eager", ...): run's line
        self.dispatch_cost_us: dict = {}  # dispatch path -> hit overhead measured for the decision (None: not)
        self.notes: list = []
        self._entry_counts: dict = {}   # entry name -> [hits]
        self._target_counts: dict = {}  # "aten::x.y" or "module Class" -> [hits, misses, grad fallbacks]
        self._op_counts: dict = {}  # the same targets -> [hits through a kiln:: op: inside a compiled graph]
        self._torch_lib = None
        self._binder: Optional[_ModuleBinder] = None
        self._entry_target: dict = {}
        self.custom_ops: dict = {}  # entry name -> "kiln::<op>" (compile_friendly)
        self._op_names: set = set()  # the op names taken in the kiln namespace
        self._inductor = None  # install_inductor.InductorPatterns (compile_friendly aten entries)
        self._roots: Optional[RootCompiler] = None  # install(compile=True) without a model
        self._compiled_model = None  # install(compile=..., model=model): compiled in place until uninstall
        self.dispatch_mode = "python"  # install(dispatch=...): "python", "cpp" or "auto"
        self.run_mode: dict = {"mode": "eager", "auto": False}  # install(compile=...): RUN_MODES key, "reason"
        self.dispatch: dict = {}  # "aten::x.y" -> "cpp" or "python" (set when dispatch_mode is not "python")
        self._swapped_classes: dict = {}  # module class -> kiln's subclass of it (install_cpp.swap_module_class)
        self._cpp_regs: list = []  # (_dispatch.cpp Registration or None, counters, spec) per C++ override or gate
        self._overridden: list = []  # the aten overloads whose kernels kiln registered (_forget_dispatch)

    def stats(self) -> dict:
        """Hits per entry; hits, misses (gate said no: the original ran) and grad fallbacks per target; per
        target, how many of its hits came through a kiln:: custom op (`op_hits`: calls from a compiled
        graph, or a traced module entry)."""
        return {
            "entries": {n: {"hits": c[0], "target": self._entry_target.get(n)}
                        for n, c in self._entry_counts.items()},
            "targets": {t: {"hits": c[0], "misses": c[1], "grad_fallbacks": c[2]}
                        for t, c in self._target_counts.items()},
            "hits": sum(c[0] for c in self._target_counts.values()),
            "op_hits": {t: c[0] for t, c in self._op_counts.items()},  # of those, through kiln:: ops
            "misses": sum(c[1] + c[2] for c in self._target_counts.values()),
            "modules_bound": [(b.path, b.module_ref().__class__.__name__ if b.module_ref() else None)
                              for b in (self._binder.bindings if self._binder else [])],
        }

    def reset_stats(self) -> None:
        for c in list(self._entry_counts.values()) + list(self._target_counts.values()) + \
                list(self._op_counts.values()):
            for i in range(len(c)):
                c[i] = 0

    def uninstall(self) -> None:
        """Restores every kernel registration and module forward; closes the library if install opened it."""
        if not self.active and self._torch_lib is None and self._binder is None and not self._cpp_regs \
                and self._inductor is None and self._roots is None and self._compiled_model is None:
            return
        self.active = False
        if self._compiled_model is not None:  # its graphs call kiln's ops, which go below
            self._compiled_model._compiled_call_impl = None
            self._compiled_model = None
        if self._roots is not None:
            self._roots.stop()
            self._roots = None
        if self._inductor is not None:
            self._inductor.remove()
            self._inductor = None
        if self._binder is not None:
            self._binder.restore()
            self._binder = None
        if self._torch_lib is not None:
            self._torch_lib._destroy()
            self._torch_lib = None
        for reg in self._cpp_regs:
            if reg[0] is not None:  # a module entry's C++ gate has no registration: its binding goes above
                reg[0].destroy()
        self._cpp_regs = []
        _forget_dispatch(self._overridden)
        self._overridden = []
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        self.library._installed_by = None
        if self.owns_library:
            self.library.close()

    def line(self) -> str:
        """One line: how many entries were installed and which ops they replace, how many were left out and
        why (by kind of reason), e.g. "installed 2 of 7 entries (aten::softmax.int, module RMSNorm); left
        out 5: 3 slower than eager, 2 not compared"."""
        targets = sorted({self._entry_target.get(n) or n for n in self.installed})
        text = f"installed {len(self.installed)} of {len(self.library.entries)} entries"
        if targets:
            text += f" ({', '.join(targets)})"
        if self.skipped:
            kinds: dict = {}
            for name in self.skipped:
                kind = self.left_out.get(name, "left out")
                kinds[kind] = kinds.get(kind, 0) + 1
            text += f"; left out {len(self.skipped)}: " + ", ".join(
                f"{n} {k}" for k, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))
        return text

    def summary(self) -> str:
        lines = [f"kiln: {len(self.installed)} of {len(self.library.entries)} entries installed from "
                 f"{self.library.path} ({self.library.backend})"]
        for name in self.installed:
            lines.append(f"  + {name} ({self._entry_target.get(name)})")
        for name, why in self.skipped.items():
            lines.append(f"  - {name}: {why}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.uninstall()
        return False

    def __repr__(self) -> str:
        return (f"<kiln Installation of {self.library.path}: {len(self.installed)} installed, "
                f"{len(self.skipped)} skipped, {'active' if self.active else 'uninstalled'}>")


def _install_json(lib: Library) -> Optional[dict]:
    """The install.json that `kiln tune` wrote beside the manifest, or None when there is none or it belongs to
    another manifest."""
    path = os.path.join(lib.path, INSTALL_DECISIONS)
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("manifest_sha256") != lib.manifest_digest():
        return None
    return data


def read_decisions(lib: Library) -> Optional[dict]:
    """install.json's decisions: {entry: {"install": bool, "reason", "compile": bool}}, or None."""
    entries = (_install_json(lib) or {}).get("entries")
    return entries if isinstance(entries, dict) else None


def read_run_mode(lib: Library) -> Optional[dict]:
    """install.json's "run_mode": {"mode": one of RUN_MODES, "reason"}, the way `kiln tune` timed fastest on
    this model; None when tune wrote none (or a mode this kiln does not know)."""
    m = (_install_json(lib) or {}).get("run_mode")
    return m if isinstance(m, dict) and m.get("mode") in RUN_MODES else None


COMPILE_MODES = (False, True, "inductor", "graph", "auto")  # install(compile=...); "auto": install.json's run_mode


def install(library, model=None, *, entries=None, device: Optional[int] = None, verbose: Optional[bool] = None,
            compile_friendly: bool = True, dispatch: Optional[str] = None, compile=False):
    """Installs a kiln library into this process (and `model`'s modules, when given).

    library: a library directory (RUN/library, or RUN), or a Library opened earlier (which stays open after
             uninstall; a path is opened here and closed by uninstall).
    model:   the root module whose submodules at the captured paths get module entries. Without it, the
             model's first forward is watched for them (as `kiln run` needs).
    entries: None: the entries worth installing: what `kiln tune` decided (install.json, when it matches
             the manifest), else those whose kernel beat eager in the gate (the library says) by more than
             the dispatch cost measured here (kiln.install_cost); "all": every usable entry; or a list of
             entry names.
    compile_friendly: module entries also become custom ops (kiln::<entry>) that torch.compile traces into
             its graph without a break; the eager path is the same either way (docs/install.md).
    compile: "auto": what `kiln tune` timed fastest on this model (install.json's "run_mode"; `kiln run`'s
             default), else False. True (or "inductor"): also torch.compile what runs, with kiln's entries inside the graphs
             (implies compile_friendly): `model` in place (Module.compile()), or without a model every root
             module at its first call (kiln.install_inductor.RootCompiler), until uninstall. "graph": the same
             with kiln's graph mode as the backend (kiln.install_graph: dynamo's graphs with kiln's chains
             replaced, PyTorch's own kernels for the rest, no Inductor); eager's entries (install.json's
             "install") are the ones installed, a module entry as a pattern of its calls there (after the
             chains, which may hold them), not as a replaced forward.
    dispatch: "python": aten entries are Python kernels; "cpp": C++ kernels (python/kiln/_dispatch.cpp, built
             on first use; where it cannot be built the Python path is used, with the reason in `notes` and
             a RuntimeWarning); "auto": the same without the warning. None: $KILN_DISPATCH, else "auto" for
             a cuda library and "python" for a cpu one. Module entries take the same path.
    Returns an Installation. Raises LibraryRefused (nothing installed, the model stays eager) when
    libkiln_rt refuses the library, KilnError when another library is installed already."""
    import torch
    _dispatch_mode(dispatch)  # a bad value is refused before anything is opened
    if not (compile is None or isinstance(compile, bool) or compile in COMPILE_MODES):
        raise ValueError(f"kiln.install: compile={compile!r}: one of False, True, 'inductor', 'graph', 'auto'")
    if _ACTIVE:
        raise KilnError(f"kiln: a library is installed already ({_ACTIVE[-1].library.path}); "
                        "kiln.uninstall() first")
    if verbose is None:
        verbose = os.environ.get("KILN_VERBOSE", "") not in ("", "0")
    owns = not isinstance(library, Library)
    lib = Library(library, device=device) if owns else library
    if lib.closed:
        raise KilnError("kiln: the library is closed")
    inst = Installation(lib, owns)
    inst.dispatch_mode = _dispatch_mode(dispatch, lib.is_cuda)
    if compile == "auto":
        chosen = read_run_mode(lib)
        inst.run_mode = dict(chosen or {"mode": "eager", "reason": "no mode timed by kiln tune for this library"},
                             auto=True)
        compile = RUN_MODES[inst.run_mode["mode"]]
    else:
        inst.run_mode = {"mode": "graph" if compile == "graph" else "compile" if compile else "eager", "auto": False}
    inductor = compile is True or compile == "inductor"
    try:
        _install_into(inst, lib, model, entries, compile_friendly or bool(compile), for_compile=inductor,
                      graph_mode=compile == "graph")
        backend = graph_backend(inst) if compile == "graph" else None
        if compile and model is not None:
            model.compile(**({"backend": backend} if backend else {}))
            inst._compiled_model = model
        elif compile:
            inst._roots = RootCompiler(backend)
            inst._roots.start()
    except BaseException:
        inst.uninstall()
        raise
    if verbose:
        print(inst.summary(), file=sys.stderr)
    return inst


def _forget_dispatch(ops: list) -> None:
    """Drops what PyTorch's Python dispatcher remembered of these overloads' kernels (OpOverload._dispatch_cache,
    per dispatch key; tracing for torch.compile and graph mode goes through it). Registering or removing a kernel
    does not: after an uninstall, a graph traced with gradients still sent aten::linear's autograd key to the
    removed kernel's slot and computed no gradient (PyTorch warned "an autograd kernel was not registered")."""
    for op in ops:
        cache = getattr(op, "_dispatch_cache", None)
        if isinstance(cache, dict):
            cache.clear()


def _skip(inst: Installation, name: str, category: str, reason: str) -> None:
    inst.skipped[name] = reason
    inst.left_out[name] = category


def _worth_it(inst: Installation, lib: Library, e: Entry, decisions: Optional[dict], for_compile: bool = False) -> bool:
    """entries=None: `kiln tune`'s decision where install.json has one (it timed the call on this model,
    dispatch included; for_compile: its decision for kiln inside torch.compile, where it timed the compiled
    model against torch.compile alone, when it made one), else the library's verdict on the kernel plus the
    dispatch cost measured here (kiln.install_cost). Records why an entry is left out."""
    if decisions is not None and e.name in decisions:
        d = decisions.get(e.name) or {}
        key, why = ("compile", "compile_reason") if for_compile and "compile" in d else ("install", "reason")
        if not d.get(key, False):
            _skip(inst, e.name, "left out by kiln tune", "kiln tune: " + str(d.get(why, "not chosen")))
            return False
        return True
    cost = None
    decision = e.data.get("install")
    if isinstance(decision, dict) and decision.get("beats_eager"):
        mode = inst.dispatch_mode  # a module entry's gate takes the same path (Python or C++) as an aten entry's
        cost, note = measure_dispatch_us(lib, mode)
        inst.dispatch_cost_us[mode] = cost
        if f"dispatch cost: {note}" not in inst.notes:
            inst.notes.append(f"dispatch cost: {note}")
    ok, category, why = judge(e, cost)
    if not ok:
        _skip(inst, e.name, category, why)
    return ok


def _install_into(inst: Installation, lib: Library, model, entries, compile_friendly: bool = False,
                  for_compile: bool = False, graph_mode: bool = False) -> None:
    """graph_mode (install(compile="graph")): a module entry that carries its calls ("ops") is a pattern of
    kiln's graph mode like a chain, not a replaced forward, so that a chain holding the same calls (an RMSNorm
    and the residual add after it) is matched first and the module's pattern takes the calls left."""
    import torch
    decisions = None
    if entries is None:
        decisions = read_decisions(lib)
        if decisions is None and os.path.exists(os.path.join(lib.path, INSTALL_DECISIONS)):
            inst.notes.append(f"{INSTALL_DECISIONS} belongs to another manifest (ignored)")
    wanted = None if entries in (None, "all") else set(entries)
    if wanted is not None:
        unknown = wanted - {e.name for e in lib.entries}
        if unknown:
            raise KilnError(f"kiln: no entries {sorted(unknown)} in {lib.path}")
    key = "CUDA" if lib.is_cuda else "CPU"
    by_op: dict = {}
    mentries: list = []
    centries: list = []  # chain entries' gates
    for e in lib.entries:
        inst._entry_target[e.name] = e.target
        if wanted is not None and e.name not in wanted:
            _skip(inst, e.name, "not selected", "not selected")
            continue
        if e.disabled:
            _skip(inst, e.name, "disabled", e.disabled)
            continue
        if entries is None and not _worth_it(inst, lib, e, decisions, for_compile):
            continue
        try:
            gate = _Gate(lib, e, inst)
            if e.assumes and e.kind != "chain":
                raise _Unsupported("its kernel assumes a structure of its inputs' contents, which kiln checks "
                                   "only for a chain entry (inside torch.compile)")
            checks_of(e)  # an assumption kiln cannot check: not installed
            if e.kind == "aten":
                op = _resolve_overload(e.aten)
                ae = _AtenEntry(gate, e)  # first: a refused entry must not leave an empty group behind
                by_op.setdefault(op, []).append(ae)
            elif e.kind == "chain":
                if not compile_friendly:  # docs/install.md "Limits": eager never sees a chain whole
                    raise _Unsupported("a chain of calls is replaced only in a graph: torch.compile's or kiln's "
                                       "graph mode")
                centries.append(gate)
            elif e.kind == "module" and graph_mode and e.ops:
                centries.append(gate)
            elif e.kind == "module":
                mentries.append(_ModuleEntry(gate, e))
            else:
                raise _Unsupported(f"kind {e.kind!r}")
        except (_Unsupported, KilnError) as why:
            _skip(inst, e.name, "cannot be installed", str(why))
            inst._entry_counts.pop(e.name, None)
            continue
    overrides = []
    for op, aes in by_op.items():
        try:
            overrides.append(_AtenOverride(op, key, aes, inst))
        except _Unsupported as why:
            for ae in aes:
                _skip(inst, ae.gate.entry.name, "cannot be installed", str(why))
                inst._entry_counts.pop(ae.gate.entry.name, None)
    inst.active = True
    _ACTIVE.append(inst)
    lib._installed_by = inst
    aten_entries = [(ov.op, ae) for ov in overrides for ae in ov.entries]
    inst._overridden = [ov.op for ov in overrides]
    overrides = _install_cpp(inst, overrides)  # dispatch="cpp"/"auto": C++ kernels where they can serve
    if overrides:
        inst._torch_lib = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():
            # "Overriding a previously registered kernel": that is the point; the original is kept.
            warnings.simplefilter("ignore", UserWarning)
            for ov in overrides:
                kernel = ov.make_kernel()
                inst._torch_lib.impl(ov.op, kernel, ov.key)
                if ov.composite:
                    inst._torch_lib.impl(ov.op, ov.make_autograd_kernel(kernel), ov.autograd_key)
                inst.installed += [ae.gate.entry.name for ae in ov.entries]
    _forget_dispatch(inst._overridden)  # what the Python dispatcher had resolved before kiln's kernels
    if compile_friendly and (aten_entries or centries):
        try:
            inst._inductor = InductorPatterns(inst, aten_entries, key, centries)
            inst.installed += [p.entry.name for p in inst._inductor.patterns if p.aten_op is None]
            inst.custom_ops.update(inst._inductor.ops)
        except (RuntimeError, TypeError, ValueError, AttributeError) as why:  # eager is installed either way
            inst.notes.append(f"aten entries are not put into torch.compile graphs: {why}")
    if graph_mode:
        mentries += _untraced_modules(inst, [g for g in centries if g.entry.kind == "module"])
    if mentries:
        inst._binder = _ModuleBinder(mentries, inst, key, compile_friendly)
        if inst._binder.op_lib is not None:
            inst.custom_ops.update({me.entry.name: me.op_name for me in mentries})
        if model is not None:
            inst._binder.bind_root(model)
            for me in mentries:
                if getattr(me, "bound", 0) == 0:
                    inst.notes.append(f"{me.entry.name}: no {me.entry.module_class} at "
                                      f"{', '.join(sorted(me.paths)[:3])} in the model given")
        else:
            inst._binder.watch()
        inst.installed += [me.entry.name for me in mentries if me.entry.name not in inst.installed]


def _untraced_modules(inst: Installation, gates: list) -> list:
    """Graph mode: the _ModuleEntry of each module entry (of `gates`) whose calls did not trace into a pattern of
    graph mode (traced here, as the first graph would): its forward is replaced as in eager instead, so that
    graph mode never loses a module entry that eager has."""
    traced = set()
    if inst._inductor is not None:
        try:
            traced = {id(p.ae.gate) for p in inst._inductor._trace("aten")}
        except Exception as e:  # noqa: BLE001 - graph mode then runs the graphs as traced (install_graph)
            inst.notes.append(f"graph mode's patterns do not trace: {type(e).__name__}: {e}")
    out = []
    for gate in gates:
        if id(gate) in traced:
            continue
        try:
            out.append(_ModuleEntry(gate, gate.entry))
            inst.notes.append(f"{gate.entry.name}: its module's forward is replaced in graph mode (its calls are "
                              "no pattern there)")
        except _Unsupported as why:
            if gate.entry.name in inst.installed:
                inst.installed.remove(gate.entry.name)
            _skip(inst, gate.entry.name, "cannot be installed", str(why))
    return out


def uninstall(installation: Optional[Installation] = None) -> None:
    """Undoes kiln.install: every dispatcher registration and module replacement (all installations when
    none is named). Safe to call when nothing is installed."""
    targets = [installation] if installation is not None else list(reversed(_ACTIVE))
    for inst in targets:
        inst.uninstall()


def installed() -> Optional[Installation]:
    """The active installation, if any."""
    return _ACTIVE[-1] if _ACTIVE else None
