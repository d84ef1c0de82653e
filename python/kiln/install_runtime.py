"""kiln.install_runtime: libkiln_rt (src/runtime/kiln_rt.h) over ctypes, and a library it opened: the
kernels of RUN/library loaded on one device, each manifest entry as libkiln_rt checked it (Entry), launch and
libkiln_rt's own gate (Library.match). kiln.install builds on it; tests and benchmarks use it directly."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import threading
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from kiln.install import Installation

RT_ABI_VERSION = 2  # the libkiln_rt interface this module speaks (src/runtime/kiln_rt.h)
# How a model runs with a library (install.json's "run_mode", `kiln run --mode`): install(compile=...) for each
RUN_MODES = {"eager": False, "graph": "graph", "compile": True}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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


def runtime_candidates() -> list:
    """Where libkiln_rt.so is looked for, in order: $KILN_RT_LIB; beside this package (an installed package,
    `pip install ./python`, carries it); build/ of the kiln checkout this package is in; $KILN_HOME/build."""
    env = os.environ.get("KILN_RT_LIB")
    if env:
        return [env]
    found = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "libkiln_rt.so"),
             os.path.join(ROOT, "build", "libkiln_rt.so")]
    if os.environ.get("KILN_HOME"):
        found.append(os.path.join(os.environ["KILN_HOME"], "build", "libkiln_rt.so"))
    return found


def runtime_path() -> str:
    """The first of runtime_candidates() that exists (the last one when none does, for the message)."""
    candidates = runtime_candidates()
    return next((p for p in candidates if os.path.exists(p)), candidates[-1])


def _rt():
    """libkiln_rt, loaded once, with every function's types declared."""
    global _rt_lib
    with _rt_lock:
        if _rt_lib is not None:
            return _rt_lib
        path = runtime_path()
        if not os.path.exists(path):
            raise KilnError(f"libkiln_rt not found (looked at {', '.join(runtime_candidates())}): build it "
                            f"with `make` in the kiln checkout, then `pip install ./python` again or set "
                            f"KILN_HOME to the checkout (or KILN_RT_LIB to the library)")
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
        # activation name -> its position among the module forward's positional arguments
        self.activation_args: dict = dict(data.get("activation_args") or {})
        gate = data.get("gate") or {}
        self.inputs: list = gate.get("inputs") or []
        self.outputs: list = gate.get("outputs") or []
        self.args: Optional[dict] = gate.get("args")
        # results the op returns that capture dropped as empty: {"indices": [...], "tensors": [{shape, strides,
        # dtype}, ...]} (docs/capture.md); an aten entry returns them as empty tensors of that kind
        self.dropped: Optional[dict] = gate.get("dropped_outputs")
        runtime = data.get("runtime") or {}
        self.disabled: Optional[str] = runtime.get("disabled_reason")
        self.has_scratch: bool = bool(runtime.get("has_scratch"))
        self.scratch_bytes: int = int(runtime.get("scratch_bytes") or 0)
        self.time_us: dict = data.get("time_us") or {}
        self.speedup: Optional[float] = data.get("speedup")
        self.ops: list = list(data.get("ops") or [])  # a chain's calls (docs/formats.md "Op chains")
        self.chain_outputs: list = list(data.get("outputs") or [])
        # what the kernel assumes of its inputs' contents beyond the gate: {input name: {"structure": ...}}
        self.assumes: dict = dict(data.get("assumes") or {})

    @property
    def target(self) -> str:
        """What the entry replaces: the aten overload, the module class, or the chain of calls."""
        if self.kind == "chain":
            return "chain " + " -> ".join(op.get("aten", "?").split("::")[-1] for op in self.ops)
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
