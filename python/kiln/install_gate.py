"""kiln.install_gate: one manifest entry's gate, precomputed: the call's captured arguments as a template,
the shape/stride/dtype/device test of every tensor, and the generated hit() that checks, allocates the
outputs and launches through libkiln_rt. The aten and the module paths of kiln.install share it."""

from __future__ import annotations

import ctypes
import math
from typing import TYPE_CHECKING, Optional

from kiln.install_runtime import Entry, KilnError, Library, _last_error

if TYPE_CHECKING:
    from kiln.install import Installation

ALIGN = 16  # bytes: docs/abi.md lets a kernel read 16-byte vectors at element 0

_DTYPES = {  # SOL-ExecBench names -> torch attribute names
    "float64": "float64", "float32": "float32", "float16": "float16", "bfloat16": "bfloat16",
    "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2", "int64": "int64", "int32": "int32",
    "int16": "int16", "int8": "int8", "uint8": "uint8", "bool": "bool",
}


class _Unsupported(Exception):
    """An entry this install path cannot use (the reason is listed, nothing fails)."""


class _Slot:
    """The position of tensor i of a captured call in its argument structure."""
    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


def _template(value):
    """The gate's JSON args ({"tensor": i} for tensors) as a template: _Slot for tensors."""
    if isinstance(value, dict) and set(value) == {"tensor"}:
        return _Slot(int(value["tensor"]))
    if isinstance(value, list):
        return [_template(v) for v in value]
    return value


def _has_slot(t) -> bool:
    return isinstance(t, _Slot) or (isinstance(t, list) and any(_has_slot(v) for v in t))


def _same_constant(live, expected) -> bool:
    """A live non-tensor argument against the captured one (JSON: numbers lose int/float, non-finite floats
    and torch types are strings, as kiln.capture_record writes them)."""
    tl = type(live)
    if tl is bool or type(expected) is bool:
        return live is expected
    if tl is int or tl is float:
        if tl is float and (live != live or live in (math.inf, -math.inf)):
            return repr(live) == expected
        return type(expected) in (int, float) and live == expected
    if live is None or expected is None:
        return live is expected
    if tl is str:
        return live == expected
    if tl in (list, tuple):
        return type(expected) is list and len(live) == len(expected) and \
            all(_same_constant(a, b) for a, b in zip(live, expected))
    if hasattr(live, "__int__") and type(live).__name__ == "SymInt":
        return int(live) == expected
    if type(live).__name__ in ("Tensor", "Parameter"):
        # a tensor where a constant was captured (x + t where x + 1.0 was): a miss. str() would print it,
        # which costs as much as the op or more (a device sync and a copy on CUDA), on every such miss
        return False
    return str(live) == expected


def _bind_template(template, live, flat: list) -> bool:
    """Matches live against a template, appending the tensors at its slots to flat in order."""
    if isinstance(template, _Slot):
        flat.append(live)
        return len(flat) - 1 == template.index
    if isinstance(template, list):
        if type(live) not in (list, tuple) or len(live) != len(template):
            return False
        return all(_bind_template(t, v, flat) for t, v in zip(template, live))
    return _same_constant(live, template)


def _torch_dtype(name: str):
    import torch
    attr = _DTYPES.get(name)
    if attr is None or not hasattr(torch, attr):
        raise KilnError(f"unknown dtype {name!r}")
    return getattr(torch, attr)


def _tensor_gates(specs: list) -> tuple:
    """((shape, strides, dtype), ...) per gate tensor: what a live tensor is compared with."""
    return tuple((tuple(int(s) for s in g["shape"]), tuple(int(s) for s in g["strides"]),
                  _torch_dtype(g["dtype"])) for g in specs)


def copy_strides(g: dict) -> Optional[tuple]:
    """The strides of the dense copy a gate input captured with gaps (layout "contiguous_copy": a slice of a
    fused projection) is proved on and must be handed to its kernel as: dense in the captured memory order
    (the layout's "permute", capture_problem.layout_of), row-major without one. None for any other input."""
    layout = g.get("layout") or {}
    if layout.get("stored") != "contiguous_copy":
        return None
    shape = [int(s) for s in g["shape"]]
    perm = layout.get("permute") or list(range(len(shape)))
    strides, step = [0] * len(shape), 1
    for d in reversed(perm):
        strides[d] = step
        step *= max(shape[d], 1)
    return tuple(strides)


def same_layout(shape: tuple, a: tuple, b: tuple) -> bool:
    """Whether strides a and b address a tensor of shape alike: equal in every dim of size over 1 (a size-1
    dim's stride is never multiplied by anything but 0; traced graphs and captures disagree on it)."""
    return len(a) == len(b) == len(shape) and all(x == y or n == 1 for n, x, y in zip(shape, a, b))


_GRAD = object()  # what a gate's hit() returns when the call needs a gradient (kiln kernels are forward-only)


class _LaunchFailed(KilnError):
    """libkiln_rt could not launch a kernel the gate admitted (never turned into a silent fallback)."""


class _Gate:
    """One entry's gate and launcher, shared by the aten and module paths.

    The per-call work is one generated function, hit(t0, ..., tn): it compares each tensor with the gate's
    constants, allocates the outputs, launches and returns them (a tuple), or returns None on a miss and
    _GRAD when the call needs a gradient. It is generated (as namedtuple and dataclasses generate their
    methods) because the gate runs on every call of the op in the model, and straight-line code over
    constants bound as globals is several times faster than loops over tuples of tuples. `source` keeps
    the text for inspection."""

    def __init__(self, lib: Library, entry: Entry, inst: "Installation"):
        import torch
        self.entry = entry
        self.inputs = _tensor_gates(entry.inputs)
        self.outputs = _tensor_gates(entry.outputs)
        for g in entry.outputs:
            stored = (g.get("layout") or {}).get("stored")
            if stored not in (None, "contiguous", "memory_order") or (g.get("layout") or {}).get("expand"):
                raise _Unsupported(f"output '{g['name']}' is stored as {stored} (not dense)")
        # an input captured with gaps (a slice) was proved on its dense copy: copy it the same way
        copies = [copy_strides(g) for g in entry.inputs]
        # one hit word per entry, which the C++ paths count into too (install_cpp: a ctypes array, never replaced,
        # or a hit through the entry's kiln:: op, counted here, would be lost to stats())
        self.counts = inst._entry_counts.setdefault(entry.name, (ctypes.c_int64 * 1)())
        self.inst = inst
        self.source, self.hit = self._generate(lib, entry, copies, torch)

    def _dense(self, t, strides):
        """t's dense copy with these strides (copy_strides), made with kiln stepped aside: the copy dispatches
        aten ops an installed entry may override, and whose gate would admit this very tensor again (a clone
        entry of an input captured with gaps recursed ~330 deep, to Python's recursion limit, and launched at
        every level)."""
        import torch
        inst = self.inst
        active, inst.active = inst.active, False
        try:
            return torch.empty_strided(t.shape, strides, dtype=t.dtype, device=t.device).copy_(t)
        finally:
            inst.active = active

    def _generate(self, lib: Library, entry: Entry, copies: list, torch):
        n_in, n_out = len(self.inputs), len(self.outputs)
        cuda = lib.is_cuda
        ns: dict = {
            "DEV": torch.device("cuda", lib.device_index) if cuda else torch.device("cpu"),
            "IDX": lib.device_index, "HANDLE": lib._handle, "INDEX": entry.index, "launch": lib._launch_fast,
            "PTRS": ctypes.c_void_p * (n_in + n_out + (1 if entry.has_scratch else 0)),
            "empty_strided": torch.empty_strided, "zeros": torch.zeros, "uint8": torch.uint8,
            "is_grad_enabled": torch.is_grad_enabled, "GRAD": _GRAD, "counts": self.counts,
            "SCRATCH": max(entry.scratch_bytes, 1), "fail": self._fail,
            "current_stream": torch._C._cuda_getCurrentRawStream if cuda else None,
            "streams": {}, "c_void_p": ctypes.c_void_p, "dense": self._dense,
        }
        args = [f"t{i}" for i in range(n_in)]
        on_device = "t{i}.get_device() != IDX" if cuda else "not t{i}.is_cpu"
        src = [f"def hit({', '.join(args)}):",
               f"    # kiln entry {entry.name}: {entry.target}"]
        for i, (shape, stride, dtype) in enumerate(self.inputs):
            ns[f"S{i}"], ns[f"T{i}"], ns[f"D{i}"] = shape, stride, dtype
            src += [f"    if t{i}.dtype is not D{i} or t{i}.shape != S{i} or t{i}.stride() != T{i} or "
                    f"{on_device.format(i=i)} or t{i}.data_ptr() % {ALIGN}:",
                    "        return None"]
        if n_in:
            src += [f"    if is_grad_enabled() and ({' or '.join(f'{a}.requires_grad' for a in args)}):",
                    "        return GRAD"]
        for i, copy in enumerate(copies):
            if copy is not None:
                ns[f"C{i}"] = copy
                src.append(f"    t{i} = dense(t{i}, C{i})")
        ptrs = [f"{a}.data_ptr()" for a in args]
        for j, (shape, stride, dtype) in enumerate(self.outputs):
            ns[f"OS{j}"], ns[f"OT{j}"], ns[f"OD{j}"] = shape, stride, dtype
            src.append(f"    o{j} = empty_strided(OS{j}, OT{j}, dtype=OD{j}, device=DEV)")
            ptrs.append(f"o{j}.data_ptr()")
        if entry.has_scratch:
            src.append("    scratch = zeros(SCRATCH, dtype=uint8, device=DEV)")
            ptrs.append("scratch.data_ptr()")
        stream = "None"
        if cuda:  # PyTorch's current stream, as a c_void_p made once per stream
            src += ["    raw = current_stream(IDX)",
                    "    stream = streams.get(raw)",
                    "    if stream is None:",
                    "        stream = streams[raw] = c_void_p(raw)"]
            stream = "stream"
        src += [f"    if launch(HANDLE, INDEX, PTRS({', '.join(ptrs)}), {len(ptrs)}, None, {stream}):",
                "        fail()",
                "    counts[0] += 1",
                f"    return ({', '.join(f'o{j}' for j in range(n_out))},)"]
        text = "\n".join(src) + "\n"
        exec(compile(text, f"<kiln gate {entry.name}>", "exec"), ns)
        return text, ns["hit"]

    def _fail(self):
        raise _LaunchFailed(f"kiln: {self.entry.name}: {_last_error()}")

