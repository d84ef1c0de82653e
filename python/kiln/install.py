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

Note: `kiln.install` is this module's `install` function (kiln/__init__.py re-exports it), so use
`from kiln.install import Library` (not `import kiln.install as m`) to reach the module itself.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import math
import os
import re
import sys
import threading
import warnings
import weakref
from typing import Optional

RT_ABI_VERSION = 2  # the libkiln_rt interface this module speaks (src/runtime/kiln_rt.h)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INSTALL_DECISIONS = "install.json"  # written into a library by `kiln tune`: which entries win end to end
ALIGN = 16  # bytes: docs/abi.md lets a kernel read 16-byte vectors at element 0

_DTYPES = {  # SOL-ExecBench names -> torch attribute names
    "float64": "float64", "float32": "float32", "float16": "float16", "bfloat16": "bfloat16",
    "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2", "int64": "int64", "int32": "int32",
    "int16": "int16", "int8": "int8", "uint8": "uint8", "bool": "bool",
}


class KilnError(RuntimeError):
    """A failure of kiln's install machinery (a launch that failed, a bad argument)."""


class LibraryRefused(KilnError):
    """libkiln_rt would not load the library: another device, another kiln build, or a damaged library.
    Nothing was installed; the model runs eagerly."""

    def __init__(self, message: str, status: int = 0, status_name: str = ""):
        super().__init__(message)
        self.status = status
        self.status_name = status_name


# ---------------------------------------------------------------------------------------------------
# libkiln_rt over ctypes.

class _RtTensor(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_char_p), ("ndim", ctypes.c_int32), ("device_type", ctypes.c_int32),
                ("device_index", ctypes.c_int32), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("data_ptr", ctypes.c_uint64)]


_rt_lib = None
_rt_lock = threading.Lock()


def runtime_path() -> str:
    """Where libkiln_rt.so is: $KILN_RT_LIB, else build/libkiln_rt.so of the kiln tree this package is in."""
    env = os.environ.get("KILN_RT_LIB")
    return env if env else os.path.join(ROOT, "build", "libkiln_rt.so")


def _rt():
    """libkiln_rt, loaded once, with every function's types declared."""
    global _rt_lib
    with _rt_lock:
        if _rt_lib is not None:
            return _rt_lib
        path = runtime_path()
        if not os.path.exists(path):
            raise KilnError(f"libkiln_rt not found at {path}: build it with `make` in {ROOT} "
                            "(or set KILN_RT_LIB)")
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise KilnError(f"cannot load {path}: {e}") from None
        c = ctypes
        sigs = {
            "kiln_rt_abi_version": (c.c_int, []),
            "kiln_rt_kiln_version": (c.c_char_p, []),
            "kiln_rt_default_backend": (c.c_char_p, []),
            "kiln_rt_strerror": (c.c_char_p, [c.c_int]),
            "kiln_rt_last_error": (c.c_char_p, []),
            "kiln_rt_open": (c.c_int, [c.c_char_p, c.c_int, c.POINTER(c.c_void_p), c.c_char_p, c.c_size_t]),
            "kiln_rt_close": (None, [c.c_void_p]),
            "kiln_rt_info_json": (c.c_char_p, [c.c_void_p]),
            "kiln_rt_entry_count": (c.c_int, [c.c_void_p]),
            "kiln_rt_entry_name": (c.c_char_p, [c.c_void_p, c.c_int]),
            "kiln_rt_entry_json": (c.c_char_p, [c.c_void_p, c.c_int]),
            "kiln_rt_entry_disabled": (c.c_char_p, [c.c_void_p, c.c_int]),
            "kiln_rt_entry_scratch_bytes": (c.c_int64, [c.c_void_p, c.c_int]),
            "kiln_rt_match": (c.c_int, [c.c_void_p, c.c_int, c.POINTER(_RtTensor), c.c_int,
                                        c.POINTER(_RtTensor), c.c_int, c.POINTER(c.c_int)]),
            "kiln_rt_launch": (c.c_int, [c.c_void_p, c.c_int, c.POINTER(c.c_void_p), c.c_int,
                                         c.POINTER(c.c_int64), c.c_void_p]),
        }
        for name, (restype, argtypes) in sigs.items():
            try:
                fn = getattr(lib, name)
            except AttributeError:
                raise KilnError(f"{path} lacks {name}: rebuild it with `make`") from None
            fn.restype, fn.argtypes = restype, argtypes
        version = lib.kiln_rt_abi_version()
        if version != RT_ABI_VERSION:
            raise KilnError(f"{path} speaks libkiln_rt interface {version}; this kiln package speaks "
                            f"{RT_ABI_VERSION}: rebuild with `make`")
        _rt_lib = lib
        return lib


def _launch_without_argtypes():
    """kiln_rt_launch as a second ctypes function object without argtypes: ctypes' argument checks cost
    more than the call (a few microseconds against 0.2), so the hot path passes values that need no
    conversion: the handle as c_void_p, the index and count as int, a c_void_p array, None or c_void_p."""
    _rt()
    fn = ctypes.CDLL(runtime_path()).kiln_rt_launch
    fn.restype = ctypes.c_int
    return fn


def _last_error() -> str:
    return (_rt().kiln_rt_last_error() or b"").decode(errors="replace")


# ---------------------------------------------------------------------------------------------------
# An opened library.

class Entry:
    """One manifest entry as libkiln_rt loaded it (the manifest's fields plus "runtime")."""

    def __init__(self, index: int, data: dict):
        self.index = index
        self.data = data
        self.name: str = data["problem"]
        self.kind: str = data.get("kind", "")
        self.aten: Optional[str] = data.get("aten")
        self.module_class: Optional[str] = data.get("module_class")
        self.module_paths: list = list(data.get("module_paths") or [])
        gate = data.get("gate") or {}
        self.inputs: list = gate.get("inputs") or []
        self.outputs: list = gate.get("outputs") or []
        self.args: Optional[dict] = gate.get("args")
        runtime = data.get("runtime") or {}
        self.disabled: Optional[str] = runtime.get("disabled_reason")
        self.has_scratch: bool = bool(runtime.get("has_scratch"))
        self.scratch_bytes: int = int(runtime.get("scratch_bytes") or 0)
        self.time_us: dict = data.get("time_us") or {}
        self.speedup: Optional[float] = data.get("speedup")

    @property
    def target(self) -> str:
        """What the entry replaces: the aten overload or the module class."""
        return self.aten if self.kind == "aten" else f"module {self.module_class}"

    def __repr__(self) -> str:
        return f"Entry({self.name!r}, {self.target})"


def resolve_library_dir(path: str) -> str:
    """A library directory from what a user may pass: RUN/library itself, or RUN."""
    path = os.fspath(path)
    if not os.path.exists(os.path.join(path, "manifest.json")) and \
            os.path.exists(os.path.join(path, "library", "manifest.json")):
        return os.path.join(path, "library")
    return path


class Library:
    """A library opened by libkiln_rt on one device: its kernels are loaded (cuda: cubins into PyTorch's
    primary context; cpu: C sources compiled once, now) and checked. Raises LibraryRefused with the
    reason when libkiln_rt will not use it. Open it once and install/uninstall it as often as needed."""

    def __init__(self, path, device: Optional[int] = None):
        self.path = os.path.abspath(resolve_library_dir(path))
        rt = _rt()
        self.backend, ordinal = self._pick_device(device)
        handle = ctypes.c_void_p()
        errbuf = ctypes.create_string_buffer(2048)
        status = rt.kiln_rt_open(self.path.encode(), ordinal, ctypes.byref(handle), errbuf, len(errbuf))
        if status != 0:
            name = (rt.kiln_rt_strerror(status) or b"").decode()
            raise LibraryRefused(f"kiln: library refused ({name}): {errbuf.value.decode(errors='replace')}",
                                 status, name)
        self._handle = handle
        self.device_index = ordinal
        self.info = json.loads(rt.kiln_rt_info_json(handle).decode())
        self.entries = [Entry(i, json.loads(rt.kiln_rt_entry_json(handle, i).decode()))
                        for i in range(rt.kiln_rt_entry_count(handle))]
        self._launch = rt.kiln_rt_launch
        self._launch_fast = _launch_without_argtypes()
        self._installed_by: Optional["Installation"] = None

    def _pick_device(self, device: Optional[int]):
        """(backend, ordinal): cuda libraries run on the GPU whose uuid the manifest names when PyTorch
        sees it, else on `device` or PyTorch's current device (libkiln_rt then says why it refuses)."""
        try:
            with open(os.path.join(self.path, "manifest.json")) as f:
                manifest = json.load(f)
            backend = manifest.get("backend") if isinstance(manifest, dict) else None
        except (OSError, ValueError):
            return "unknown", 0 if device is None else device  # libkiln_rt reports the damage
        if backend != "cuda":
            return backend or "unknown", 0 if device is None else device
        if device is not None:
            return backend, int(device)
        import torch
        if not torch.cuda.is_available():
            return backend, 0
        want = str((manifest.get("device") or {}).get("uuid") or "")
        for i in range(torch.cuda.device_count()):
            uuid = str(getattr(torch.cuda.get_device_properties(i), "uuid", ""))
            if want and (want == uuid or want == f"GPU-{uuid}"):
                return backend, i
        return backend, torch.cuda.current_device()

    @property
    def is_cuda(self) -> bool:
        return self.backend == "cuda"

    def entry(self, name: str) -> Entry:
        for e in self.entries:
            if e.name == name:
                return e
        raise KeyError(f"no entry {name!r} in {self.path}")

    def match(self, entry: Entry, inputs: list, outputs: Optional[list] = None) -> tuple:
        """libkiln_rt's own gate (kiln_rt_match) on these tensors: (hit, reason). The install path
        checks the same rule in Python, with precomputed tuples; this one explains a miss."""
        def describe(tensors):
            arr = (_RtTensor * max(len(tensors), 1))()
            keep = []
            for k, t in enumerate(tensors):
                shape = (ctypes.c_int64 * max(t.dim(), 1))(*t.shape)
                strides = (ctypes.c_int64 * max(t.dim(), 1))(*t.stride())
                dtype = str(t.dtype).replace("torch.", "").encode()
                keep += [shape, strides, dtype]
                arr[k] = _RtTensor(dtype, t.dim(), 1 if t.device.type == "cuda" else 0,
                                   t.device.index or 0, shape, strides, t.data_ptr())
            return arr, keep
        ins, _keep_in = describe(inputs)  # the _keep lists hold the buffers the structs point into
        outs, _keep_out = describe(outputs or [])
        hit = ctypes.c_int(0)
        status = _rt().kiln_rt_match(self._handle, entry.index, ins, len(inputs), outs, len(outputs or []),
                                     ctypes.byref(hit))
        if status != 0:
            raise KilnError(f"kiln_rt_match: {_last_error()}")
        return bool(hit.value), ("" if hit.value else _last_error())

    def launch(self, entry: Entry, tensors: list, stream: Optional[int] = None) -> None:
        """Launches an entry on raw pointers of tensors (inputs, outputs, [scratch]) without a gate check;
        for tests and benchmarks. `stream` defaults to PyTorch's current stream on cuda."""
        if stream is None and self.is_cuda:
            import torch
            stream = torch._C._cuda_getCurrentRawStream(self.device_index)
        ptrs = (ctypes.c_void_p * len(tensors))(*[t.data_ptr() for t in tensors])
        if self._launch(self._handle, entry.index, ptrs, len(tensors), None, stream) != 0:
            raise KilnError(f"kiln: {_last_error()}")

    def close(self) -> None:
        """Unloads the kernels (uninstall first; a closed library cannot be installed again)."""
        if self._installed_by is not None and self._installed_by.active:
            raise KilnError("kiln: uninstall the library before closing it")
        if getattr(self, "_handle", None):
            _rt().kiln_rt_close(self._handle)
            self._handle = None

    @property
    def closed(self) -> bool:
        return not getattr(self, "_handle", None)

    def manifest_digest(self) -> str:
        """sha256 of manifest.json, which install.json decisions are tied to."""
        with open(os.path.join(self.path, "manifest.json"), "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()


# ---------------------------------------------------------------------------------------------------
# The gate, precomputed.

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
        copies = [(g.get("layout") or {}).get("stored") == "contiguous_copy" for g in entry.inputs]
        self.counts = inst._entry_counts.setdefault(entry.name, [0])
        self.source, self.hit = self._generate(lib, entry, copies, torch)

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
            "streams": {}, "c_void_p": ctypes.c_void_p,
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
            if copy:
                src.append(f"    t{i} = t{i}.contiguous()")
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


class _Unsupported(Exception):
    """An entry this install path cannot use (the reason is listed, nothing fails)."""


# ---------------------------------------------------------------------------------------------------
# aten overrides.

def _resolve_overload(qualified: str):
    """'aten::softmax.int' -> torch.ops.aten.softmax.int (OpOverload)."""
    import torch
    ns, _, rest = qualified.partition("::")
    name, _, overload = rest.partition(".")
    if ns != "aten" or not name:
        raise _Unsupported(f"{qualified}: not an aten overload")
    try:
        packet = getattr(torch.ops.aten, name)
        return getattr(packet, overload or "default")
    except (AttributeError, RuntimeError):
        raise _Unsupported(f"{qualified}: no such overload in torch {torch.__version__}") from None


def _schema_mode(op, n_outputs: int) -> str:
    """'functional' or 'inplace' (writes self and returns it); _Unsupported otherwise."""
    import torch
    schema = op._schema
    rets = schema.returns
    if not rets or any(not isinstance(r.type, torch.TensorType) for r in rets):
        raise _Unsupported(f"{op.name()} returns {', '.join(str(r.type) for r in rets) or 'nothing'} "
                           "(kiln replaces ops that return tensors)")
    if len(rets) != n_outputs:
        raise _Unsupported(f"{op.name()} returns {len(rets)} tensors, the entry writes {n_outputs} "
                           "(empty outputs were dropped at capture)")
    written = [a for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    if not written:
        if any(r.alias_info is not None for r in rets):
            raise _Unsupported(f"{op.name()} returns a view")
        return "functional"
    if len(written) == 1 and written[0].name == "self" and not written[0].kwarg_only and len(rets) == 1 \
            and rets[0].alias_info is not None and rets[0].alias_info.is_write:
        return "inplace"
    raise _Unsupported(f"{op.name()} writes {', '.join(a.name for a in written)} (out= and ops that update "
                       "their arguments are not replaced)")


def _number_positions(op) -> tuple:
    """Positions (and kwarg names) of Tensor arguments that may arrive as Python numbers: PyTorch turns
    `x + 1e-6` into aten::add.Tensor with a wrapped-number tensor, which a Python kernel sees as a float."""
    import torch
    pos, names = [], []
    for i, a in enumerate(op._schema.arguments):
        t = a.type
        if isinstance(t, torch.OptionalType):
            t = t.getElementType()
        if isinstance(t, torch.TensorType):
            (names if a.kwarg_only else pos).append(i if not a.kwarg_only else a.name)
    return tuple(pos), tuple(names)


def _category(dtype) -> int:
    """PyTorch's type-promotion categories: bool 0 < integer 1 < floating 2 < complex 3."""
    return 3 if dtype.is_complex else 2 if dtype.is_floating_point else 0 if str(dtype) == "torch.bool" else 1


def _number_dtype(category: int, dims: list, zeros: list):
    """The dtype of a 0-dim tensor that stands for a Python number (a wrapped number) without changing the
    result. Promotion ranks dimensioned tensors above 0-dim tensors above wrapped numbers, and a higher rank
    decides unless a lower one has a higher category (c10's combine_categories). Moving the number up one
    rank is harmless when the dimensioned tensors decide anyway; the number is then made as precise as its
    category allows (float64, int64, complex128), so that it is rounded once into the computation type, as
    the wrapped double is. When 0-dim tensors decide, it takes their dtype; when the number itself decides,
    it takes what PyTorch gives it: the default dtype of its category, or for a complex number over
    floating tensors their complex counterpart."""
    import functools

    import torch
    dim_cat = max((_category(d) for d in dims), default=-1)
    zero = functools.reduce(torch.promote_types, zeros) if zeros else None
    if dim_cat >= category and (zero is None or _category(zero) <= dim_cat):
        return (torch.bool, torch.int64, torch.float64, torch.complex128)[category]
    if zero is not None and _category(zero) >= category:
        return zero
    if category == 3:
        floats = [d for d in dims + ([zero] if zero is not None else []) if _category(d) == 2]
        if floats:
            widest = functools.reduce(torch.promote_types, floats)
            return {torch.float16: torch.complex32, torch.float64: torch.complex128}.get(widest, torch.complex64)
        return torch.complex128 if torch.get_default_dtype() == torch.float64 else torch.complex64
    if category == 2:
        return torch.get_default_dtype()
    return (torch.bool, torch.int64)[category]


def _boxable(args: tuple, kwargs: dict, positions: tuple, names: tuple):
    """(args, kwargs, finish): the call with every Python number at a Tensor position made into a 0-dim CPU
    tensor that promotes and computes as PyTorch's wrapped number does (a kernel taken with get_kernel
    cannot be called with the numbers), and finish(result) to apply to what the original returns.

    When no tensor of the call has a dimension, the 0-dim tensors are viewed as 1-element tensors for the
    call (finish views the result back): that keeps them in the rank above the number, where the rule of
    _number_dtype is exact, down to the CPU kernels' opmath (float16 arithmetic in float32 with the
    number rounded once from double)."""
    import torch
    numbers = (bool, int, float, complex)
    tensors = [a for a in args if isinstance(a, torch.Tensor)] + \
        [v for v in kwargs.values() if isinstance(v, torch.Tensor)]
    lift = bool(tensors) and all(t.dim() == 0 for t in tensors)
    if lift:
        args = tuple(a.view(1) if isinstance(a, torch.Tensor) else a for a in args)
        kwargs = {k: (v.view(1) if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
        tensors = [t.view(1) for t in tensors]
    dims = [t.dtype for t in tensors if t.dim() > 0]
    zeros = [t.dtype for t in tensors if t.dim() == 0]

    def wrap(v):
        category = 0 if isinstance(v, bool) else 1 if isinstance(v, int) else 2 if isinstance(v, float) else 3
        return torch.tensor(v, dtype=_number_dtype(category, dims, zeros))

    new_args = list(args)
    for i in positions:
        if i < len(new_args) and isinstance(new_args[i], numbers):
            new_args[i] = wrap(new_args[i])
    if names and kwargs:
        kwargs = {k: (wrap(v) if k in names and isinstance(v, numbers) else v) for k, v in kwargs.items()}

    def finish(result):
        if lift and isinstance(result, torch.Tensor) and result.dim() == 1:
            return result.view(())
        return result
    return tuple(new_args), kwargs, finish


class _AtenEntry:
    """One aten entry's precomputed call template."""

    def __init__(self, gate: _Gate, entry: Entry):
        if entry.args is None:
            raise _Unsupported("the gate has no captured arguments")
        args = [_template(a) for a in entry.args.get("args", [])]
        kwargs = {k: _template(v) for k, v in (entry.args.get("kwargs") or {}).items()}
        self.gate = gate
        self.n_args = len(args)
        self.kw_keys = tuple(kwargs)
        # (position or key, kind, template): kind 0 a tensor, 1 a constant, 2 a structure with tensors
        self.plan = []
        n_slots = 0
        for where, t in list(enumerate(args)) + list(kwargs.items()):
            if isinstance(t, _Slot):
                self.plan.append((where, 0, t))
                n_slots += 1
            elif _has_slot(t):
                self.plan.append((where, 2, t))
                n_slots += 1
            else:
                self.plan.append((where, 1, t))
        # the fast path: tensors only at top level, in the order of their slots
        self.simple = all(kind != 2 for _, kind, _ in self.plan) and \
            [t.index for _, k, t in self.plan if k == 0] == list(range(n_slots))
        if len(gate.inputs) != sum(1 for _ in _flat_slots(args + list(kwargs.values()))):
            raise _Unsupported(f"the gate has {len(gate.inputs)} inputs, the captured call "
                               f"{sum(1 for _ in _flat_slots(args + list(kwargs.values())))} tensors")

    def bind(self, args: tuple, kwargs: dict):
        """The call's input tensors in gate order, or None when the arguments differ from the capture."""
        if len(args) != self.n_args or len(kwargs) != len(self.kw_keys):
            return None
        if self.simple:
            tensors = []
            for where, kind, t in self.plan:
                if type(where) is int:
                    v = args[where]
                else:
                    if where not in kwargs:
                        return None
                    v = kwargs[where]
                if kind == 0:
                    tensors.append(v)
                elif not _same_constant(v, t):
                    return None
            return tensors
        flat: list = []
        for where, kind, t in self.plan:
            if type(where) is not int and where not in kwargs:
                return None
            v = args[where] if type(where) is int else kwargs[where]
            if not _bind_template(t, v, flat):
                return None
        return flat


def _flat_slots(template):
    if isinstance(template, _Slot):
        yield template
    elif isinstance(template, list):
        for t in template:
            yield from _flat_slots(t)


class _AtenOverride:
    """The kernel kiln registers for one overload on one dispatch key: the gate of every entry for that
    overload, then kiln's kernel on a hit or PyTorch's original kernel on a miss."""

    def __init__(self, op, key: str, entries: list, inst: "Installation"):
        import torch
        self.op = op
        self.key = key
        self.entries = entries  # [_AtenEntry]
        self.mode = _schema_mode(op, len(entries[0].gate.outputs))
        self.original = torch.library.get_kernel(op, key)
        self.autograd_key = "Autograd" + key
        self.composite = torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")
        self.original_autograd = torch.library.get_kernel(op, self.autograd_key) if self.composite else None
        self.number_positions = _number_positions(op) if torch._C._should_allow_numbers_as_tensors(
            op._schema.name.split("::")[-1]) else ((), ())
        self.counts = inst._target_counts.setdefault(op.name(), [0, 0, 0])  # hits, misses, grad fallbacks
        self.inst = inst

    def make_kernel(self):
        """The Python kernel for the backend key. It is registered without the dispatch key set: kiln's own
        path needs none, and the original backend (or composite) kernel ignores the one it is called with,
        so a constant set saves building one per call (about half a microsecond)."""
        import torch
        counts, original, inplace = self.counts, self.original, self.mode == "inplace"
        gates = [(ae.bind, ae.gate.hit) for ae in self.entries]
        single = len(self.entries[0].gate.outputs) == 1
        inst, GRAD = self.inst, _GRAD
        keyset = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, self.key))
        numbers = self.number_positions if (self.number_positions[0] or self.number_positions[1]) else None

        def kiln_kernel(*args, **kwargs):
            if inst.active:
                for bind, hit in gates:
                    try:
                        tensors = bind(args, kwargs)
                        outs = hit(*tensors) if tensors is not None else None
                    except KilnError:
                        raise
                    except Exception:  # a gate that cannot even read the arguments: a miss
                        outs = None
                    if outs is None:
                        continue
                    if outs is GRAD:
                        counts[2] += 1
                        break
                    counts[0] += 1
                    if inplace:
                        tensors[0].copy_(outs[0])
                        return tensors[0]
                    return outs[0] if single else outs
            counts[1] += 1
            if numbers is not None and _has_number(args, kwargs):
                self_arg = args[0] if inplace else None
                args, kwargs, finish = _boxable(args, kwargs, *numbers)
                result = finish(original.call_boxed(keyset, *args, **kwargs))
                return self_arg if inplace else result
            return original.call_boxed(keyset, *args, **kwargs)

        return kiln_kernel

    def make_autograd_kernel(self, kiln_kernel):
        """Composite ops only: a call that needs a gradient runs the original composite (its decomposition
        records the graph); any other call goes to kiln's kernel."""
        import torch
        original_autograd = self.original_autograd
        is_grad_enabled = torch.is_grad_enabled
        counts = self.counts
        keyset = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, self.autograd_key))
        numbers = self.number_positions if (self.number_positions[0] or self.number_positions[1]) else None

        def kiln_autograd_kernel(*args, **kwargs):
            if is_grad_enabled() and _any_requires_grad(args, kwargs):
                counts[2] += 1
                if numbers is not None and _has_number(args, kwargs):
                    args, kwargs, finish = _boxable(args, kwargs, *numbers)
                    return finish(original_autograd.call_boxed(keyset, *args, **kwargs))
                return original_autograd.call_boxed(keyset, *args, **kwargs)
            return kiln_kernel(*args, **kwargs)

        return kiln_autograd_kernel


def _has_number(args, kwargs) -> bool:
    """A Python number among the top-level arguments (where a wrapped number would have been)."""
    for v in args:
        if type(v) in (int, float, bool, complex):
            return True
    return any(type(v) in (int, float, bool, complex) for v in kwargs.values())


def _any_requires_grad(args, kwargs) -> bool:
    import torch
    for v in list(args) + list(kwargs.values()):
        if isinstance(v, torch.Tensor):
            if v.requires_grad:
                return True
        elif isinstance(v, (list, tuple)):
            if any(isinstance(x, torch.Tensor) and x.requires_grad for x in v):
                return True
    return False


# ---------------------------------------------------------------------------------------------------
# Opt-in C++ dispatch for aten entries (issue 6): kiln.install(..., dispatch="cpp"|"auto") or KILN_DISPATCH.
# python/kiln/_dispatch.cpp, built on demand with torch.utils.cpp_extension.load into kiln's cache, registers
# one boxed C++ kernel per (overload, key) with the same gate as the generated Python one; an overload whose
# captured call it cannot express (or any overload, when the extension cannot be built) stays on the Python
# path, with the reason in Installation.notes. Module entries always stay Python.

DISPATCH_MODES = ("python", "cpp", "auto")
_DISPATCH_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_dispatch.cpp")
_DISPATCH_ABI = 1
_dispatch_ext: dict = {}  # "cpu" / "cuda" -> the built module, or the KilnError that says why there is none
_A_TENSOR, _A_NONE, _A_BOOL, _A_NUMBER, _A_INTLIST, _A_STR, _A_DTYPE, _A_DEFAULT = range(8)  # _dispatch.cpp


def _dispatch_mode(dispatch: Optional[str]) -> str:
    mode = dispatch if dispatch is not None else (os.environ.get("KILN_DISPATCH") or "python")
    if mode not in DISPATCH_MODES:
        raise KilnError(f"kiln: dispatch={mode!r}: one of {', '.join(DISPATCH_MODES)}")
    return mode


def cache_dir(sub: str) -> str:
    """kiln's cache folder joined with sub, as src/util/common.c has it: $KILN_CACHE_DIR/sub, else
    $XDG_CACHE_HOME/kiln/sub, else ~/.cache/kiln/sub."""
    base = os.environ.get("KILN_CACHE_DIR")
    if not base:
        base = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
                            "kiln")
    return os.path.join(base, sub)


def dispatch_extension(cuda: bool = False):
    """The C++ dispatch extension for a cpu (or cuda) library, built once per process (and cached on disk
    by torch.utils.cpp_extension). Raises KilnError with the reason when it cannot be had; the failure is
    remembered for the process."""
    variant = "cuda" if cuda else "cpu"
    got = _dispatch_ext.get(variant)
    if isinstance(got, KilnError):
        raise got
    if got is None:
        try:
            got = _build_dispatch_extension(variant)
        except KilnError as why:
            _dispatch_ext[variant] = why
            raise
        _dispatch_ext[variant] = got
    return got


def _build_dispatch_extension(variant: str):
    import shutil

    import torch
    import logging
    log = logging.getLogger("torch.utils.cpp_extension")  # "No CUDA runtime is found" on a machine without a GPU
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        from torch.utils import cpp_extension
    except ImportError as e:  # a torch without its extension tools
        raise KilnError(f"torch.utils.cpp_extension is not available: {e}") from None
    finally:
        log.setLevel(level)
    cxx = os.environ.get("CXX") or "c++"
    if not shutil.which(cxx.split()[0]):
        raise KilnError(f"no C++ compiler: {cxx!r} is not on PATH (install g++, or set CXX)")
    path = os.environ.get("PATH", "")
    if not shutil.which("ninja"):  # cpp_extension.load runs `ninja` from PATH; pip's ninja lives beside python
        dirs = [os.path.dirname(sys.executable)]
        try:
            import ninja
            dirs.insert(0, ninja.BIN_DIR)
        except (ImportError, AttributeError):
            pass
        found = next((d for d in dirs if os.access(os.path.join(d, "ninja"), os.X_OK)), None)
        if found is None:
            raise KilnError("no ninja, which torch.utils.cpp_extension.load needs: pip install ninja "
                            "(python/requirements.txt) or apt-get install ninja-build")
        path = found + os.pathsep + path
    build_dir = cache_dir(os.path.join("dispatch", f"torch-{torch.__version__}-py{sys.version_info[0]}"
                                                   f"{sys.version_info[1]}-{variant}"))
    flags = ["-O2"] + (["-DKILN_WITH_CUDA"] if variant == "cuda" else [])
    old_path, old_arch = os.environ.get("PATH"), os.environ.get("TORCH_CUDA_ARCH_LIST")
    try:
        os.makedirs(build_dir, exist_ok=True)
        os.environ["PATH"] = path
        if variant == "cuda" and not old_arch:  # no .cu file is compiled, but load() asks for an arch list,
            os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"  # which it cannot find without a visible GPU
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mod = cpp_extension.load(name=f"kiln_dispatch_{variant}", sources=[_DISPATCH_SOURCE], extra_cflags=flags,
                                     build_directory=build_dir, with_cuda=variant == "cuda", verbose=False)
    except Exception as e:  # noqa: BLE001 - a build that fails is a reason, not a crash
        raise KilnError(f"kiln's C++ dispatch extension did not build in {build_dir}: "
                        f"{_build_failure_reason(e)}") from None
    finally:
        for name, old in (("PATH", old_path), ("TORCH_CUDA_ARCH_LIST", old_arch)):
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old
    if getattr(mod, "ABI", None) != _DISPATCH_ABI:
        raise KilnError(f"kiln's C++ dispatch extension in {build_dir} speaks ABI {getattr(mod, 'ABI', None)}, "
                        f"this kiln {_DISPATCH_ABI}")
    return mod


def _build_failure_reason(e: Exception) -> str:
    """The compiler's own diagnostics ("file:line:col: error: ...") out of a failed cpp_extension build, each
    line cut on its own: the build's first line is the whole compiler command, whose length depends on where the
    venv lives, and must not crowd the diagnostic out of the reason."""
    text = str(e)
    lines = [ln.strip() for ln in text.splitlines()]
    picked = ([ln for ln in lines if "error:" in ln] or [ln for ln in lines if "error" in ln.lower()] or
              [ln for ln in lines if ln] or [type(e).__name__])
    return " | ".join(ln if len(ln) <= 240 else ln[:237] + "..." for ln in picked[:3])


def _cpp_equals_default(value, arg) -> bool:
    """Whether PyTorch's argument parsing would leave this captured value out (it equals the default, same
    type): a Python kernel never sees such a call with the argument, so the Python gate never admits it."""
    if not arg.has_default_value():
        return False
    d = arg.default_value
    if d is None or type(d) is bool:
        return value is d
    return type(value) is type(d) and value == d


def _cpp_arg(t, arg) -> tuple:
    """One schema argument's spec for _dispatch.cpp from the captured template (_Unsupported otherwise)."""
    import torch
    ty = arg.type
    if isinstance(ty, torch.OptionalType):
        ty = ty.getElementType()
    if isinstance(t, _Slot):
        if not isinstance(ty, torch.TensorType):
            raise _Unsupported(f"a tensor captured at '{arg.name}' ({arg.type})")
        return (_A_TENSOR, t.index)
    if t is None:
        return (_A_NONE,)
    if type(t) is bool:
        return (_A_BOOL, t)
    if type(t) in (int, float):
        return (_A_NUMBER, float(t), t if type(t) is int else None)
    if type(t) is str:
        if str(ty) == "ScalarType" and t.startswith("torch.") and t[6:] in _DTYPES:
            return (_A_DTYPE, t[6:])
        if isinstance(ty, torch.StringType):
            return (_A_STR, t)
    if type(t) is list and all(type(v) is int for v in t):
        return (_A_INTLIST, t)
    raise _Unsupported(f"'{arg.name}' captured as {t!r} ({arg.type})")


def _cpp_entry_spec(ae: "_AtenEntry", op) -> dict:
    """An aten entry as _dispatch.cpp's register_override takes it: one spec per schema argument, tensors."""
    import ctypes as c
    e = ae.gate.entry
    if not ae.simple:
        raise _Unsupported("tensors inside a structure (a tensor list)")
    args = [_template(a) for a in e.args.get("args", [])]
    kwargs = {k: _template(v) for k, v in (e.args.get("kwargs") or {}).items()}
    schema = op._schema.arguments
    names = {a.name for a in schema}
    if len(args) > len(schema) or any(k not in names for k in kwargs):
        raise _Unsupported("the captured call does not fit the schema")
    specs = []
    for i, a in enumerate(schema):
        if i < len(args):
            if a.kwarg_only:
                raise _Unsupported(f"'{a.name}' captured as positional")
            t = args[i]
            if i == len(args) - 1 and not isinstance(t, _Slot) and _cpp_equals_default(t, a):
                raise _Unsupported(f"'{a.name}' captured at its default (the Python gate never sees it)")
            specs.append(_cpp_arg(t, a))
        elif a.name in kwargs:
            if not a.kwarg_only or _cpp_equals_default(kwargs[a.name], a):
                raise _Unsupported(f"'{a.name}' captured as a keyword at its default or positional")
            specs.append(_cpp_arg(kwargs[a.name], a))
        elif a.has_default_value():
            specs.append((_A_DEFAULT,))
        else:
            raise _Unsupported(f"'{a.name}' was not captured")
    copies = [(g.get("layout") or {}).get("stored") == "contiguous_copy" for g in e.inputs]
    hits = (c.c_int64 * 1)()
    return {
        "name": e.name, "index": e.index, "args": specs,
        "inputs": [(list(g["shape"]), list(g["strides"]), g["dtype"], cp) for g, cp in zip(e.inputs, copies)],
        "outputs": [(list(g["shape"]), list(g["strides"]), g["dtype"]) for g in e.outputs],
        "scratch_bytes": max(e.scratch_bytes, 1) if e.has_scratch else 0,
        "hits_addr": c.addressof(hits), "_hits": hits,
    }


def _install_cpp(inst: "Installation", overrides: list) -> list:
    """Registers the C++ kernel for each override it can serve; returns the overrides left to Python."""
    import ctypes as c
    mode = inst.dispatch_mode
    if mode == "python" or not overrides:
        return overrides
    lib = inst.library
    try:
        ext = dispatch_extension(lib.is_cuda)
    except KilnError as why:
        inst.notes.append(f"dispatch={mode}: the C++ path is not available ({why}); aten entries use the "
                          "Python path")
        if mode == "cpp":
            warnings.warn(f"kiln: dispatch='cpp' fell back to the Python path: {why}", RuntimeWarning, stacklevel=4)
        inst.dispatch.update((ov.op.name(), "python") for ov in overrides)
        return overrides
    launch = c.cast(lib._launch_fast, c.c_void_p).value
    last_error = c.cast(_rt().kiln_rt_last_error, c.c_void_p).value
    rest = []
    for ov in overrides:
        try:
            specs = [_cpp_entry_spec(ae, ov.op) for ae in ov.entries]
        except _Unsupported as why:
            inst.notes.append(f"{ov.op.name()}: Python dispatch ({why})")
            rest.append(ov)
            continue
        counts = (c.c_int64 * 3)()
        schema = ov.op._schema
        try:
            reg = ext.register_override(schema.name, schema.overload_name, ov.key, ov.mode == "inplace",
                                        bool(ov.composite), lib.is_cuda, lib.device_index, lib._handle.value,
                                        launch, last_error, c.addressof(counts), specs)
        except (RuntimeError, ValueError, TypeError) as why:
            inst.notes.append(f"{ov.op.name()}: Python dispatch (the C++ kernel was refused: {why})")
            rest.append(ov)
            continue
        inst._cpp_regs.append((reg, counts, specs))  # the counters live as long as the registration
        inst._target_counts[ov.op.name()] = counts
        for ae, spec in zip(ov.entries, specs):
            inst._entry_counts[ae.gate.entry.name] = spec["_hits"]
        inst.dispatch[ov.op.name()] = "cpp"
        inst.installed += [ae.gate.entry.name for ae in ov.entries]
    for ov in rest:
        inst.dispatch[ov.op.name()] = "python"
    return rest


# ---------------------------------------------------------------------------------------------------
# Module replacement.

_ACTIVATION_PREFIX = "input"


def _is_activation(name: str) -> bool:
    """kiln.capture names a module's tensor inputs input0, input1, ... and its own tensors by attribute."""
    rest = name[len(_ACTIVATION_PREFIX):].rstrip("_") if name.startswith(_ACTIVATION_PREFIX) else ""
    return rest.isdigit()


class _ModuleEntry:
    """A module entry: its gate, the parameters it reads, the paths and class it replaces."""

    def __init__(self, gate: _Gate, entry: Entry):
        if not entry.module_class:
            raise _Unsupported("no module class")
        names = [g["name"] for g in entry.inputs]
        acts = [n for n in names if _is_activation(n)]
        if len(acts) != 1:
            raise _Unsupported(f"the module takes {len(acts)} activations ({', '.join(acts)}); kiln replaces "
                               "modules with one tensor argument")
        if len(gate.outputs) != 1:
            raise _Unsupported(f"the module returns {len(gate.outputs)} tensors (kiln replaces modules "
                               "that return one)")
        self.gate = gate
        self.entry = entry
        self.activation_pos = names.index(acts[0])
        self.attr_names = [n for n in names if n != acts[0]]
        self.paths = set(entry.module_paths)


# ---------------------------------------------------------------------------------------------------
# Module entries inside torch.compile: one custom op per entry.

_OP_NAMESPACE = "kiln"


def _op_name(entry_name: str, taken: set) -> str:
    """An operator name from an entry name: letters, digits and _ only, not starting with a digit, unique
    among `taken` (a suffix _2, _3, ... where two entry names sanitise alike)."""
    base = re.sub(r"[^0-9A-Za-z_]", "_", entry_name) or "entry"
    if base[0].isdigit():
        base = "e_" + base
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


def _gate_copy(t, shape: tuple, stride: tuple, dtype):
    """t copied into a new tensor with exactly the gate's shape, strides and dtype, at the allocator's
    (aligned) start. Dimensions the gate has broadcast (stride 0) are copied from index 0 only."""
    import torch
    out = torch.empty_strided(shape, stride, dtype=dtype, device=t.device)
    dst, src = out, t
    for d, st in enumerate(stride):
        if st == 0 and shape[d] > 1:
            dst, src = dst.narrow(d, 0, 1), src.narrow(d, 0, 1)
    dst.copy_(src)
    return out


def _register_module_ops(mentries: list, key: str, inst: "Installation"):
    """Defines kiln::<entry> for each module entry (mentry.op becomes its OpOverload) in one
    torch.library.Library that uninstall destroys. Returns the Library.

    - schema: (Tensor t0, ..., Tensor tn) -> Tensor, the gate's inputs in gate order, tagged
      needs_exact_strides so that inductor hands the op tensors with the strides it was traced with;
    - fake (meta) kernel: torch.empty_strided with the gate's output shape, strides and dtype on the
      input's device: all dynamo and inductor need to know;
    - real kernel (the library's dispatch key): the entry's generated gate (_Gate.hit) and launch. The
      module binding calls the op only after checking, on what dynamo guards (dtype, shape, strides,
      device, grad mode and requires_grad), that the gate admits the call, so what can still differ at
      run time is what a trace cannot see: the start address (16-byte alignment) and, should inductor
      choose another layout, the strides. Such inputs are copied into gate-shaped dense tensors
      (aligned by the allocator) and the kernel runs on the copies, so the op is correct on any input of
      the gate's shape and dtype. A call that would need a gradient never reaches the op."""
    import torch
    oplib = torch.library.Library(_OP_NAMESPACE, "FRAGMENT")
    taken: set = set()
    tags = (torch.Tag.needs_exact_strides,) if hasattr(torch.Tag, "needs_exact_strides") else ()
    try:
        for me in mentries:
            gate = me.gate
            name = _op_name(me.entry.name, taken)
            n = len(gate.inputs)
            oplib.define(f"{name}({', '.join(f'Tensor t{i}' for i in range(n))}) -> Tensor", tags=tags)
            oplib.impl(name, _module_op_kernel(gate, me.entry, inst), key)
            torch.library.register_fake(f"{_OP_NAMESPACE}::{name}", _module_op_fake(gate), lib=oplib)
            me.op = getattr(getattr(torch.ops, _OP_NAMESPACE), name).default
            me.op_name = f"{_OP_NAMESPACE}::{name}"
    except BaseException:
        oplib._destroy()
        for me in mentries:
            me.op = None
        raise
    return oplib


def _module_op_fake(gate: _Gate):
    import torch
    (shape, stride, dtype), = gate.outputs
    empty_strided = torch.empty_strided

    def kiln_module_op_fake(*ts):
        return empty_strided(shape, stride, dtype=dtype, device=ts[0].device)
    return kiln_module_op_fake


def _module_op_kernel(gate: _Gate, entry: Entry, inst: "Installation"):
    import torch
    hit, specs, GRAD, no_grad = gate.hit, gate.inputs, _GRAD, torch.no_grad
    counts = inst._target_counts.setdefault(f"module {entry.module_class}", [0, 0, 0])

    def kiln_module_op(*ts):
        outs = hit(*ts)
        if outs is None or outs is GRAD:  # misaligned, or a layout the trace did not see: gate-shaped copies
            with no_grad():  # kiln's kernels are forward-only; the binding never sends a call needing a gradient
                if outs is GRAD:
                    outs = hit(*ts)
                if outs is None and all(t.dtype is d and t.shape == s for t, (s, _, d) in zip(ts, specs)):
                    ts = [t if t.stride() == st and not t.data_ptr() % ALIGN else _gate_copy(t, s, st, d)
                          for t, (s, st, d) in zip(ts, specs)]
                    outs = hit(*ts)
            if outs is None or outs is GRAD:
                raise KilnError(f"kiln: {entry.name}: the op was called on tensors its gate cannot admit "
                                f"({', '.join(f'{t.dtype} {tuple(t.shape)} on {t.device}' for t in ts)})")
        counts[0] += 1
        return outs[0]
    return kiln_module_op


def _module_admits(gate: _Gate, lib: Library):
    """admits(tensors): the gate's rule without the data pointer, written for dynamo to trace (and guard
    on): each input a tensor of the gate's dtype, shape, strides and device, and no gradient needed."""
    import torch
    specs = gate.inputs
    dev = torch.device("cuda", lib.device_index) if lib.is_cuda else torch.device("cpu")
    Tensor, is_grad_enabled = torch.Tensor, torch.is_grad_enabled

    def admits(ts) -> bool:
        for t, (shape, stride, dtype) in zip(ts, specs):
            if not isinstance(t, Tensor) or t.dtype != dtype or tuple(t.shape) != shape or \
                    tuple(t.stride()) != stride or t.device != dev:
                return False
        if is_grad_enabled():
            for t in ts:
                if t.requires_grad:
                    return False
        return True
    return admits


class _ModuleBinding:
    """One module instance whose forward kiln replaced."""

    def __init__(self, module, mentry: _ModuleEntry, path: str, inst: "Installation"):
        self.module_ref = weakref.ref(module)
        self.path = path
        self.had_forward = "forward" in module.__dict__
        self.saved_forward = module.__dict__.get("forward")
        original = module.forward  # the bound method (or what was patched in before kiln)
        hit = mentry.gate.hit
        act = mentry.activation_pos
        GRAD = _GRAD
        names = mentry.attr_names
        counts = inst._target_counts.setdefault(f"module {mentry.entry.module_class}", [0, 0, 0])
        import torch
        Tensor = torch.Tensor
        module_ref = self.module_ref
        op = getattr(mentry, "op", None)  # kiln::<entry> when installed compile-friendly
        traced = op is not None
        if traced:
            admits = _module_admits(mentry.gate, inst.library)
            is_compiling = torch.compiler.is_dynamo_compiling  # False in eager, True while dynamo traces

            def traced_forward(args, kwargs):
                """What dynamo (torch.compile, export) traces instead of the eager path below: no data
                pointer, no ctypes, no counters, only checks it can guard on, then the op (its real kernel
                runs the gate and the launch; _register_module_ops) or the original forward, inlined."""
                module = module_ref()
                if inst.active and module is not None and len(args) == 1 and not kwargs \
                        and isinstance(args[0], Tensor):
                    ts = [getattr(module, n, None) for n in names]
                    ts.insert(act, args[0])
                    if admits(ts):
                        return op(*ts)
                return original(*args, **kwargs)

        def kiln_forward(*args, **kwargs):
            if traced and is_compiling():
                return traced_forward(args, kwargs)
            module = module_ref()
            if inst.active and module is not None and len(args) == 1 and not kwargs \
                    and isinstance(args[0], Tensor):
                try:
                    attrs = [getattr(module, n) for n in names]
                except AttributeError:
                    attrs = None
                if attrs is not None:
                    try:
                        outs = hit(*attrs[:act], args[0], *attrs[act:])
                    except KilnError:
                        raise
                    except Exception:  # an attribute that is not a tensor, for instance
                        outs = None
                    if outs is GRAD:
                        counts[2] += 1
                    elif outs is not None:
                        counts[0] += 1
                        return outs[0]
            counts[1] += 1
            return original(*args, **kwargs)

        kiln_forward.__kiln__ = mentry.entry.name
        module.forward = kiln_forward

    def restore(self) -> None:
        module = self.module_ref()
        if module is None:
            return
        if self.had_forward:
            module.forward = self.saved_forward
        else:
            module.__dict__.pop("forward", None)


class _ModuleBinder:
    """Finds the modules to replace. With a model: its named_modules(), now. Without one (`kiln run`): a
    global forward pre-hook sees the model's first forward and names its modules as kiln.capture did (the
    first root's names as they are; a later root's with "<Class>#<k>:" in front), then removes itself once
    every module entry is bound (or after MAX_ROOTS roots), so that it costs nothing afterwards.
    compile_friendly: each entry also becomes a custom op, kiln::<entry> (_register_module_ops), which the
    bound forwards call when torch.compile traces them; restore() removes the ops again."""

    MAX_ROOTS = 8

    def __init__(self, mentries: list, inst: "Installation", key: str = "CPU", compile_friendly: bool = False):
        self.mentries = mentries
        self.inst = inst
        self.op_lib = None
        if compile_friendly:
            try:
                self.op_lib = _register_module_ops(mentries, key, inst)
            except Exception as e:  # noqa: BLE001 - the eager path does not need the ops
                inst.notes.append(f"module entries not usable inside torch.compile: {type(e).__name__}: {e}")
        self.bindings: list = []
        self.bound_ids: set = set()
        self.n_roots = 0
        self.seen = weakref.WeakSet()
        self.hook = None

    def bind_root(self, root) -> None:
        orig = getattr(root, "_orig_mod", None)  # torch.compile(model): name the model's modules, as capture did
        if orig is not None and type(root).__name__ == "OptimizedModule":
            try:
                self.seen.add(root)
            except TypeError:
                pass
            root = orig
        prefix = "" if self.n_roots == 0 else f"{type(root).__name__}#{self.n_roots}:"
        self.n_roots += 1
        for name, m in root.named_modules(remove_duplicate=False):
            try:
                self.seen.add(m)
            except TypeError:
                pass
            if id(m) in self.bound_ids:
                continue
            cls = type(m).__name__
            for me in self.mentries:
                if cls == me.entry.module_class and (prefix + name) in me.paths:
                    self.bindings.append(_ModuleBinding(m, me, prefix + name, self.inst))
                    self.bound_ids.add(id(m))
                    me.bound = getattr(me, "bound", 0) + 1
                    break

    def all_bound(self) -> bool:
        return all(getattr(me, "bound", 0) > 0 for me in self.mentries)

    def watch(self) -> None:
        from torch.nn.modules.module import register_module_forward_pre_hook

        def pre_hook(module, args):
            if module in self.seen:
                return None
            self.bind_root(module)
            if self.all_bound() or self.n_roots >= self.MAX_ROOTS:
                self.unwatch()
            return None

        # a script that calls a torch.compile'd model: dynamo cannot trace the binding (it fails on the
        # WeakSet), so the hook runs eagerly; once it has removed itself, dynamo traces the bound forwards
        import torch
        pre_hook = torch.compiler.disable(pre_hook, recursive=True)
        self.hook = register_module_forward_pre_hook(pre_hook)

    def unwatch(self) -> None:
        if self.hook is not None:
            self.hook.remove()
            self.hook = None

    def restore(self) -> None:
        self.unwatch()
        for b in reversed(self.bindings):
            b.restore()
        self.bindings = []
        self.bound_ids = set()
        if self.op_lib is not None:
            self.op_lib._destroy()  # the kiln:: ops are gone from the dispatcher and torch.ops.kiln
            self.op_lib = None
        for me in self.mentries:
            me.op = None


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
        self.notes: list = []
        self._entry_counts: dict = {}   # entry name -> [hits]
        self._target_counts: dict = {}  # "aten::x.y" or "module Class" -> [hits, misses, grad fallbacks]
        self._torch_lib = None
        self._binder: Optional[_ModuleBinder] = None
        self._entry_target: dict = {}
        self.custom_ops: dict = {}  # module entry name -> "kiln::<op>" (compile_friendly)
        self.dispatch_mode = "python"  # install(dispatch=...): "python", "cpp" or "auto"
        self.dispatch: dict = {}  # "aten::x.y" -> "cpp" or "python" (set when dispatch_mode is not "python")
        self._cpp_regs: list = []  # (_dispatch.cpp Registration, its counters) per C++ override

    def stats(self) -> dict:
        """Hits per entry; hits, misses (gate said no: the original ran) and grad fallbacks per target."""
        return {
            "entries": {n: {"hits": c[0], "target": self._entry_target.get(n)}
                        for n, c in self._entry_counts.items()},
            "targets": {t: {"hits": c[0], "misses": c[1], "grad_fallbacks": c[2]}
                        for t, c in self._target_counts.items()},
            "hits": sum(c[0] for c in self._target_counts.values()),
            "misses": sum(c[1] + c[2] for c in self._target_counts.values()),
            "modules_bound": [(b.path, b.module_ref().__class__.__name__ if b.module_ref() else None)
                              for b in (self._binder.bindings if self._binder else [])],
        }

    def reset_stats(self) -> None:
        for c in list(self._entry_counts.values()) + list(self._target_counts.values()):
            for i in range(len(c)):
                c[i] = 0

    def uninstall(self) -> None:
        """Restores every kernel registration and module forward; closes the library if install opened it."""
        if not self.active and self._torch_lib is None and self._binder is None and not self._cpp_regs:
            return
        self.active = False
        if self._binder is not None:
            self._binder.restore()
            self._binder = None
        if self._torch_lib is not None:
            self._torch_lib._destroy()
            self._torch_lib = None
        for reg in self._cpp_regs:
            reg[0].destroy()
        self._cpp_regs = []
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        self.library._installed_by = None
        if self.owns_library:
            self.library.close()

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


def read_decisions(lib: Library) -> Optional[dict]:
    """The install.json that `kiln tune` wrote beside the manifest: {entry: {"install": bool, "reason"}},
    or None when there is none or it belongs to another manifest."""
    path = os.path.join(lib.path, INSTALL_DECISIONS)
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("manifest_sha256") != lib.manifest_digest():
        return None
    entries = data.get("entries")
    return entries if isinstance(entries, dict) else None


def install(library, model=None, *, entries=None, device: Optional[int] = None, verbose: Optional[bool] = None,
            compile_friendly: bool = True, dispatch: Optional[str] = None):
    """Installs a kiln library into this process (and `model`'s modules, when given).

    library: a library directory (RUN/library, or RUN), or a Library opened earlier (which stays open after
             uninstall; a path is opened here and closed by uninstall).
    model:   the root module whose submodules at the captured paths get module entries. Without it, the
             model's first forward is watched for them (as `kiln run` needs).
    entries: None: what `kiln tune` decided (install.json) when it matches the manifest, else every usable
             entry; "all": every usable entry; or a list of entry names.
    compile_friendly: module entries also become custom ops (kiln::<entry>) that torch.compile traces into
             its graph without a break; the eager path is the same either way (docs/install.md).
    dispatch: "python" (default; else $KILN_DISPATCH): aten entries are Python kernels; "cpp": C++ kernels
             (python/kiln/_dispatch.cpp, built on first use; where it cannot be built the Python path is used,
             with the reason in `notes` and a RuntimeWarning); "auto": the same without the warning.
    Returns an Installation. Raises LibraryRefused (nothing installed, the model stays eager) when
    libkiln_rt refuses the library, KilnError when another library is installed already."""
    import torch
    mode = _dispatch_mode(dispatch)
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
    inst.dispatch_mode = mode
    try:
        _install_into(inst, lib, model, entries, compile_friendly)
    except BaseException:
        inst.uninstall()
        raise
    if verbose:
        print(inst.summary(), file=sys.stderr)
    return inst


def _install_into(inst: Installation, lib: Library, model, entries, compile_friendly: bool = False) -> None:
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
    for e in lib.entries:
        inst._entry_target[e.name] = e.target
        if wanted is not None and e.name not in wanted:
            inst.skipped[e.name] = "not selected"
            continue
        if decisions is not None and not (decisions.get(e.name) or {}).get("install", False):
            inst.skipped[e.name] = "kiln tune: " + str((decisions.get(e.name) or {}).get("reason", "not chosen"))
            continue
        if e.disabled:
            inst.skipped[e.name] = e.disabled
            continue
        try:
            gate = _Gate(lib, e, inst)
            if e.kind == "aten":
                op = _resolve_overload(e.aten)
                by_op.setdefault(op, []).append(_AtenEntry(gate, e))
            elif e.kind == "module":
                mentries.append(_ModuleEntry(gate, e))
            else:
                raise _Unsupported(f"kind {e.kind!r}")
        except (_Unsupported, KilnError) as why:
            inst.skipped[e.name] = str(why)
            inst._entry_counts.pop(e.name, None)
            continue
    overrides = []
    for op, aes in by_op.items():
        try:
            overrides.append(_AtenOverride(op, key, aes, inst))
        except _Unsupported as why:
            for ae in aes:
                inst.skipped[ae.gate.entry.name] = str(why)
                inst._entry_counts.pop(ae.gate.entry.name, None)
    inst.active = True
    _ACTIVE.append(inst)
    lib._installed_by = inst
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
    if mentries:
        inst._binder = _ModuleBinder(mentries, inst, key, compile_friendly)
        if inst._binder.op_lib is not None:
            inst.custom_ops = {me.entry.name: me.op_name for me in mentries}
        if model is not None:
            inst._binder.bind_root(model)
            for me in mentries:
                if getattr(me, "bound", 0) == 0:
                    inst.notes.append(f"{me.entry.name}: no {me.entry.module_class} at "
                                      f"{', '.join(sorted(me.paths)[:3])} in the model given")
        else:
            inst._binder.watch()
        inst.installed += [me.entry.name for me in mentries]


def uninstall(installation: Optional[Installation] = None) -> None:
    """Undoes kiln.install: every dispatcher registration and module replacement (all installations when
    none is named). Safe to call when nothing is installed."""
    targets = [installation] if installation is not None else list(reversed(_ACTIVE))
    for inst in targets:
        inst.uninstall()


def installed() -> Optional[Installation]:
    """The active installation, if any."""
    return _ACTIVE[-1] if _ACTIVE else None
