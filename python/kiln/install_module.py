"""kiln.install_module: module entries. The forward of each module instance at a captured path (a fused
leaf module such as an RMSNorm) is replaced by kiln's kernel under the entry's gate, with the original
forward for every other call; compile-friendly installs also make each entry a custom op, kiln::<entry>,
that torch.compile traces into its graph."""

from __future__ import annotations

import re
import weakref
from typing import TYPE_CHECKING

from kiln.install_cpp import cpp_module_forward, cpp_module_gate, swap_module_class, unswap_module_class
from kiln.install_gate import _GRAD, ALIGN, _Gate, _Unsupported, same_layout
from kiln.install_runtime import Entry, KilnError, Library

if TYPE_CHECKING:
    from kiln.install import Installation


_ACTIVATION_PREFIX = "input"
_MISSING = object()  # _ModuleEntry.tensors_of: an attribute no longer in the dict that held it


def _is_activation(name: str) -> bool:
    """kiln.capture names a module's tensor inputs input0, input1, ... and its own tensors by attribute."""
    rest = name[len(_ACTIVATION_PREFIX):].rstrip("_") if name.startswith(_ACTIVATION_PREFIX) else ""
    return rest.isdigit()


def module_activation_slots(entry: Entry) -> list:
    """The gate slots of a module entry's activations in the order of the forward's positional arguments:
    forward(*args) is admitted with len(args) == len(slots), args[i] going to gate slot slots[i]. One
    activation is the first argument; several need capture's "activation_args" (which positional argument
    each was, since capture names them in the order the forward first used them), all of them, 0..n-1.
    Raises _Unsupported saying why a module cannot be called that way."""
    names = [g["name"] for g in entry.inputs]
    acts = [n for n in names if _is_activation(n)]
    if not acts:
        raise _Unsupported("the module takes no activation")
    if len(acts) == 1:
        return [names.index(acts[0])]
    pos = entry.activation_args
    if sorted(pos.get(n, -1) for n in acts) != list(range(len(acts))):
        raise _Unsupported(f"the module takes {len(acts)} activations ({', '.join(acts)}) and the capture "
                           "does not say which positional argument of forward each one is")
    return [names.index(n) for n in sorted(acts, key=lambda n: pos[n])]


class _ModuleEntry:
    """A module entry: its gate, the parameters it reads, the paths and class it replaces."""

    def __init__(self, gate: _Gate, entry: Entry):
        if not entry.module_class:
            raise _Unsupported("no module class")
        if len(gate.outputs) != 1:
            raise _Unsupported(f"the module returns {len(gate.outputs)} tensors (kiln replaces modules "
                               "that return one)")
        self.gate = gate
        self.entry = entry
        self.activation_slots = module_activation_slots(entry)
        names = [g["name"] for g in entry.inputs]
        self.attr_names = [n for i, n in enumerate(names) if i not in self.activation_slots]
        self.paths = set(entry.module_paths)
        self._inserts = sorted((slot, i) for i, slot in enumerate(self.activation_slots))

    def tensors(self, module, args) -> list:
        """The gate's inputs for forward(*args) of module (len(args) activations): its attributes (None
        where it has none), args at the activation slots."""
        ts = [getattr(module, n, None) for n in self.attr_names]
        for slot, i in self._inserts:  # ascending slots: each lands where the gate has it
            ts.insert(slot, args[i])
        return ts

    def _sources(self, module) -> list:
        """(name, holder) per attribute input of module: holder is the dict of module's parameters or
        buffers that has it (read with a lookup, where getattr walks nn.Module.__getattr__: about 0.4 us
        each), None where getattr must read it; a holder that no longer has the name sends it to getattr."""
        sources = []
        for n in self.attr_names:
            held = None
            for d in (module.__dict__.get("_parameters"), module.__dict__.get("_buffers")):
                if isinstance(d, dict) and n in d and n not in module.__dict__:
                    held = d
                    break
            sources.append((n, held))
        return sources

    def slots(self, module) -> list:
        """The gate's inputs for module as the C++ forward reads them (_dispatch.cpp, module_forward): per
        input, the activation's index in forward's arguments, or _sources' (name, holder)."""
        ts = list(self._sources(module))
        for slot, i in self._inserts:
            ts.insert(slot, i)
        return ts

    def tensors_of(self, module):
        """tensors(module, args) for one module instance, with the same result, made for a hit's host time
        (attributes read as _sources says)."""
        sources = self._sources(module)
        inserts, missing = self._inserts, _MISSING
        if len(inserts) == 1 and inserts[0] == (0, 0):  # the usual module: forward(x) with x first

            def tensors(module, args):
                ts = [args[0]]
                for n, d in sources:
                    t = missing if d is None else d.get(n, missing)
                    ts.append(getattr(module, n, None) if t is missing else t)
                return ts
            return tensors

        def tensors_any(module, args):
            ts = []
            for n, d in sources:
                t = missing if d is None else d.get(n, missing)
                ts.append(getattr(module, n, None) if t is missing else t)
            for slot, i in inserts:
                ts.insert(slot, args[i])
            return ts
        return tensors_any


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


def _gate_shaped(t, shape: tuple, stride: tuple, dtype):
    """t as the gate's layout: itself, a view of it with the gate's strides where they differ only in
    size-1 dims (no copy), else _gate_copy."""
    if not t.data_ptr() % ALIGN:
        if t.stride() == stride:
            return t
        if same_layout(shape, t.stride(), stride):
            return t.as_strided(shape, stride)
    return _gate_copy(t, shape, stride, dtype)


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
    taken = inst._op_names
    tags = (torch.Tag.needs_exact_strides,) if hasattr(torch.Tag, "needs_exact_strides") else ()
    try:
        for me in mentries:
            gate = me.gate
            name = _op_name(me.entry.name, taken)
            oplib.define(entry_op_schema(name, gate), tags=tags)
            oplib.impl(name, entry_op_kernel(gate, me.entry, inst, me.entry.target), key)
            torch.library.register_fake(f"{_OP_NAMESPACE}::{name}", entry_op_fake(gate), lib=oplib)
            me.op = getattr(getattr(torch.ops, _OP_NAMESPACE), name).default
            me.op_name = f"{_OP_NAMESPACE}::{name}"
    except BaseException:
        oplib._destroy()
        for me in mentries:
            me.op = None
        raise
    return oplib


def entry_op_schema(name: str, gate: _Gate) -> str:
    """The custom op's schema: the gate's inputs in, its output (a tuple of them, for a chain that returns
    several) out."""
    n, m = len(gate.inputs), len(gate.outputs)
    out = "Tensor" if m == 1 else f"({', '.join(['Tensor'] * m)})"
    return f"{name}({', '.join(f'Tensor t{i}' for i in range(n))}) -> {out}"


def entry_op_fake(gate: _Gate):
    """The fake (meta) kernel of an entry's custom op: the gate's outputs, empty, on the input's device (one
    tensor, or a tuple when the gate has several)."""
    import torch
    outs = list(gate.outputs)
    empty_strided = torch.empty_strided

    def kiln_entry_op_fake(*ts):
        made = tuple(empty_strided(shape, stride, dtype=dtype, device=ts[0].device) for shape, stride, dtype in outs)
        return made[0] if len(made) == 1 else made
    return kiln_entry_op_fake


def entry_op_kernel(gate: _Gate, entry: Entry, inst: "Installation", target: str):
    """The real kernel of an entry's custom op (module entries here, aten entries in install_inductor):
    the gate and the launch, with gate-shaped copies for what a trace cannot see; hits count on target."""
    import torch
    hit, specs, GRAD, no_grad = gate.hit, gate.inputs, _GRAD, torch.no_grad
    single = len(gate.outputs) == 1
    counts = inst._target_counts.setdefault(target, [0, 0, 0])
    op_counts = inst._op_counts.setdefault(target, [0])  # the hits that came through the op

    def kiln_entry_op(*ts):
        outs = hit(*ts)
        if outs is None or outs is GRAD:  # misaligned, or a layout the trace did not see: gate-shaped copies
            with no_grad():  # kiln's kernels are forward-only; the binding never sends a call needing a gradient
                if outs is GRAD:
                    outs = hit(*ts)
                if outs is None and all(t.dtype is d and t.shape == s for t, (s, _, d) in zip(ts, specs)):
                    ts = [_gate_shaped(t, s, st, d) for t, (s, st, d) in zip(ts, specs)]
                    outs = hit(*ts)
            if outs is None or outs is GRAD:
                raise KilnError(f"kiln: {entry.name}: the op was called on tensors its gate cannot admit "
                                f"({', '.join(f'{t.dtype} {tuple(t.shape)} on {t.device}' for t in ts)})")
        counts[0] += 1
        op_counts[0] += 1
        return outs[0] if single else tuple(outs)
    return kiln_entry_op


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
        n_act = len(mentry.activation_slots)
        gate_inputs = mentry.tensors  # what dynamo traces (getattr, which it knows)
        fast_inputs = mentry.tensors_of(module)  # the same tensors, read faster on the eager paths
        GRAD = _GRAD
        counts = inst._target_counts.setdefault(f"module {mentry.entry.module_class}", [0, 0, 0])
        import torch
        Tensor = torch.Tensor
        module_ref = self.module_ref
        cgate = getattr(mentry, "cpp", None)  # the C++ gate and launch (dispatch "cpp"/"auto"), or None
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
                if inst.active and module is not None and len(args) == n_act and not kwargs \
                        and all(isinstance(a, Tensor) for a in args):
                    ts = gate_inputs(module, args)
                    if admits(ts):
                        return op(*ts)
                return original(*args, **kwargs)

        def kiln_forward(*args, **kwargs):
            if traced and is_compiling():
                return traced_forward(args, kwargs)
            module = module_ref()
            if inst.active and module is not None and len(args) == n_act and not kwargs \
                    and all(isinstance(a, Tensor) for a in args):
                ts = fast_inputs(module, args)
                if all(t is not None for t in ts):
                    try:
                        outs = hit(*ts)
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

        forward = kiln_forward
        if cgate is not None:  # the eager path whole in C++: gate inputs, checks, launch, or the own forward
            cpp_forward = forward = cpp_module_forward(cgate, module, inst, mentry.slots(module), original)
        if cgate is not None and traced:  # dynamo cannot trace into C++: a Python frame chooses

            def kiln_forward_cpp(*args, **kwargs):
                if is_compiling():
                    return traced_forward(args, kwargs)
                return cpp_forward(*args, **kwargs)
            forward = kiln_forward_cpp
        forward.__kiln__ = mentry.entry.name
        module.forward = forward
        self.swapped_from = None  # the class swap_module_class replaced
        if cgate is not None:
            self.swapped_from = swap_module_class(module, inst.library.is_cuda, forward, cpp_forward,
                                                  self.had_forward, self.saved_forward, inst._swapped_classes)

    def restore(self) -> None:
        module = self.module_ref()
        if module is None:
            return
        unswap_module_class(module, self.swapped_from)
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
        for me in mentries:  # before the custom ops: the C++ gate makes the target's counters C words
            me.cpp = cpp_module_gate(inst, me.entry, f"module {me.entry.module_class}")
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
            cls = type(m).__name__
            # every entry of the module's class and path: one a shape (a prefill's and a decode step's), each
            # binding's forward trying its gate and then the forward bound before it
            for me in self.mentries:
                if cls == me.entry.module_class and (prefix + name) in me.paths and \
                        (id(m), id(me)) not in self.bound_ids:
                    self.bindings.append(_ModuleBinding(m, me, prefix + name, self.inst))
                    self.bound_ids.add((id(m), id(me)))
                    me.bound = getattr(me, "bound", 0) + 1

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
            me.cpp = None
