"""kiln.install_cpp: the C++ dispatch of aten and module entries (kiln.install(..., dispatch="cpp"|"auto"),
$KILN_DISPATCH, or by default for a cuda library). python/kiln/_dispatch.cpp, built on demand with
torch.utils.cpp_extension.load into kiln's cache, registers one boxed C++ kernel per (overload, key) with the
same gate as the generated Python one, and gives each module entry a C++ gate its bound forward calls; an
overload whose captured call it cannot express (or any entry, when the extension cannot be built) stays on
the Python path, with the reason in Installation.notes."""

from __future__ import annotations

import os
import sys
import warnings
from typing import TYPE_CHECKING, Optional

from kiln.install_gate import _DTYPES, _Slot, _Unsupported, _template, copy_strides
from kiln.install_runtime import KilnError, _rt

if TYPE_CHECKING:
    from kiln.install import Installation
    from kiln.install_aten import _AtenEntry

DISPATCH_MODES = ("python", "cpp", "auto")
_DISPATCH_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_dispatch.cpp")
_DISPATCH_ABI = 4
_dispatch_ext: dict = {}  # "cpu" / "cuda" -> the built module, or the KilnError that says why there is none
_module_calls: dict = {}  # "cpu" / "cuda" -> the extension's ModuleCall (swap_module_class)
_A_TENSOR, _A_NONE, _A_BOOL, _A_NUMBER, _A_INTLIST, _A_STR, _A_DTYPE, _A_DEFAULT = range(8)  # _dispatch.cpp


def _dispatch_mode(dispatch: Optional[str], cuda: bool = False) -> str:
    """dispatch=, else $KILN_DISPATCH, else the default: "auto" for a cuda library (a call that misses costs
    5-7 us of host time on the Python path, under 1 us on the C++ one; the extension builds once, in about
    10 s), "python" for a cpu one (whose calls take milliseconds)."""
    mode = dispatch if dispatch is not None else (os.environ.get("KILN_DISPATCH") or default_dispatch(cuda))
    if mode not in DISPATCH_MODES:
        raise KilnError(f"kiln: dispatch={mode!r}: one of {', '.join(DISPATCH_MODES)}")
    return mode


def default_dispatch(cuda: bool) -> str:
    return "auto" if cuda else "python"


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
    e = ae.gate.entry
    if not ae.simple:
        raise _Unsupported("tensors inside a structure (a tensor list)")
    if e.dropped:
        raise _Unsupported("the op returns empty results besides the entry's outputs (the Python path makes them)")
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
    return dict(_tensor_spec(e, ae.gate.counts), args=specs)


def _tensor_spec(e, hits) -> dict:
    """An entry's gate tensors, scratch and hit counter (its gate's ctypes word, install_gate._Gate.counts, which
    the Python paths count into too) as _dispatch.cpp's parse_entry takes them."""
    import ctypes as c
    copies = [copy_strides(g) for g in e.inputs]
    return {
        "name": e.name, "index": e.index,
        "inputs": [(list(g["shape"]), list(g["strides"]), g["dtype"], list(cp) if cp else None)
                   for g, cp in zip(e.inputs, copies)],
        "outputs": [(list(g["shape"]), list(g["strides"]), g["dtype"]) for g in e.outputs],
        "scratch_bytes": max(e.scratch_bytes, 1) if e.has_scratch else 0,
        "hits_addr": c.addressof(hits), "_hits": hits,
    }


def _cpp_launcher(inst: "Installation", what: str):
    """(extension, launch address, last-error address) for the C++ paths, or None where the extension cannot
    be had (the reason noted, and warned about under dispatch='cpp')."""
    import ctypes as c
    lib = inst.library
    try:
        ext = dispatch_extension(lib.is_cuda)
    except KilnError as why:
        note = f"dispatch={inst.dispatch_mode}: the C++ path is not available ({why}); {what} use the Python path"
        if note not in inst.notes:
            inst.notes.append(note)
            if inst.dispatch_mode == "cpp":
                warnings.warn(f"kiln: dispatch='cpp' fell back to the Python path: {why}", RuntimeWarning,
                              stacklevel=5)
        return None
    return ext, c.cast(lib._launch_fast, c.c_void_p).value, c.cast(_rt().kiln_rt_last_error, c.c_void_p).value


def cpp_module_gate(inst: "Installation", entry, target: str):
    """The C++ gate of a module entry (dispatch "cpp" or "auto"): called with the module's tensors in the
    entry's input order, it returns the output or None (a miss: the module's own forward runs). It counts
    into the target's [hits, misses, grad fallbacks] words and the entry's hit word, which become ctypes
    arrays here. None (the Python gate serves the entry) where the C++ path cannot."""
    import ctypes as c
    if inst.dispatch_mode == "python":
        return None
    got = _cpp_launcher(inst, "module entries")
    if got is None:
        inst.dispatch[target] = "python"
        return None
    ext, launch, last_error = got
    counts = inst._target_counts.get(target)
    if not isinstance(counts, c.Array):
        counts = (c.c_int64 * 3)(*(counts or (0, 0, 0)))
        inst._target_counts[target] = counts
    spec = _tensor_spec(entry, inst._entry_counts.setdefault(entry.name, (c.c_int64 * 1)()))
    lib = inst.library
    try:
        gate = ext.module_gate(spec, lib.is_cuda, lib.device_index, lib._handle.value, launch, last_error,
                               c.addressof(counts))
    except (RuntimeError, ValueError, TypeError) as why:
        inst.notes.append(f"{entry.name}: Python dispatch (the C++ gate was refused: {why})")
        inst.dispatch.setdefault(target, "python")
        return None
    inst._cpp_regs.append((None, counts, spec))  # the counters live as long as the gate
    inst.dispatch[target] = "cpp"
    return gate


def cpp_module_forward(cgate, module, inst: "Installation", slots: list, original):
    """A module entry's bound forward made whole in C++ (_dispatch.cpp's ModuleForward) around its C++ gate:
    module and installation held by weak references, the module's own forward as its function where it is
    module's bound method (so that nothing keeps module alive), else as it is."""
    import weakref
    unbound = getattr(original, "__self__", None) is module and hasattr(original, "__func__")
    own = original.__func__ if unbound else original
    return cgate.forward(weakref.ref(module), weakref.ref(inst), slots, own, unbound)


def swap_module_class(module, cuda: bool, forward, cpp_forward, had_forward: bool, saved_forward,
                      swapped: dict):
    """Makes module(x) reach kiln's C++ forward without nn.Module.__call__'s Python frames (about 1 us of a
    hit): module's class becomes a subclass (one per class and installation, kept in `swapped`) whose __call__
    is _dispatch.cpp's ModuleCall, and module's __dict__ gets what ModuleCall checks, "_kiln_fast": (the
    forward kiln bound, its C++ forward, and the instance forward kiln replaced, if it had one). ModuleCall
    calls nn.Module.__call__ itself wherever that would do more than call forward (hooks, module.compile(),
    the JIT tracer) or where forward was replaced since; read from the class or the module it is
    nn.Module.__call__, which is what torch.compile traces. A copy or a pickle of the module is of the module
    without kiln (_reduce_unswapped). Returns the class it replaced, or None where module keeps its class: a
    class with its own __call__, or one whose instances cannot change class."""
    import torch
    cls = type(module)
    fast = module.__dict__.get("_kiln_fast")
    if fast is not None and cls.__dict__.get("__kiln_swapped__") is not None:
        # another entry of this module (another shape), bound over the first: ModuleCall calls its forward,
        # which falls back to the one bound before; a copy is still of the module without kiln
        module.__dict__["_kiln_fast"] = (forward, cpp_forward, fast[2], fast[3])
        return None
    if getattr(cls, "__call__", None) is not torch.nn.Module.__call__:
        return None
    sub = swapped.get(cls)
    if sub is None:
        key = "cuda" if cuda else "cpu"
        call = _module_calls.get(key)
        if call is None:
            from torch.nn.modules import module as m
            hooks = [m._global_forward_hooks, m._global_forward_pre_hooks, m._global_backward_hooks,
                     m._global_backward_pre_hooks]
            call = _module_calls[key] = dispatch_extension(cuda).module_call(torch.nn.Module.__call__, hooks)
        sub = type(cls.__name__, (cls,), {"__call__": call, "__module__": cls.__module__,
                                          "__qualname__": cls.__qualname__, "__kiln_swapped__": cls,
                                          "__reduce_ex__": _reduce_unswapped})
        swapped[cls] = sub
    module.__dict__["_kiln_fast"] = (forward, cpp_forward, had_forward, saved_forward)
    try:
        module.__class__ = sub
    except TypeError:
        del module.__dict__["_kiln_fast"]
        return None
    return cls


def _reduce_unswapped(self, protocol):
    """__reduce_ex__ of kiln's subclasses: copy.deepcopy and pickle see the module as it is without kiln (its
    own class and forward), so that a copy reads its own tensors and a pickle loads where kiln is absent."""
    import copyreg
    state = self.__dict__.copy()
    fast = state.pop("_kiln_fast", None)
    if fast is not None and state.get("forward") is fast[0]:
        if fast[2]:
            state["forward"] = fast[3]
        else:
            del state["forward"]
    # what object.__reduce_ex__ gives at protocol 1 (pickle refuses __newobj__ of another class)
    return copyreg._reconstructor, (type(self).__kiln_swapped__, object, None), state


def unswap_module_class(module, original) -> None:
    """swap_module_class undone: module's class is `original` again (where it is still kiln's subclass)."""
    module.__dict__.pop("_kiln_fast", None)
    if original is not None and type(module).__dict__.get("__kiln_swapped__") is original:
        module.__class__ = original


def _install_cpp(inst: "Installation", overrides: list) -> list:
    """Registers the C++ kernel for each override it can serve; returns the overrides left to Python."""
    import ctypes as c
    mode = inst.dispatch_mode
    if mode == "python" or not overrides:
        return overrides
    lib = inst.library
    got = _cpp_launcher(inst, "aten entries")
    if got is None:
        inst.dispatch.update((ov.op.name(), "python") for ov in overrides)
        return overrides
    ext, launch, last_error = got
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
        inst.dispatch[ov.op.name()] = "cpp"
        inst.installed += [ae.gate.entry.name for ae in ov.entries]
    for ov in rest:
        inst.dispatch[ov.op.name()] = "python"
    return rest
