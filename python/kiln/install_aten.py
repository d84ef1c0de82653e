"""kiln.install_aten: aten entries as PyTorch dispatcher kernels. One Python kernel per (overload, dispatch
key) runs the gate of every entry for that overload and launches kiln's kernel on a hit, or calls the kernel
PyTorch had registered before on a miss (so a miss computes exactly what eager computes); composite ops also
get an Autograd kernel that leaves calls needing a gradient to PyTorch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kiln.install_gate import (_GRAD, _Gate, _Slot, _Unsupported, _bind_template, _has_slot, _same_constant,
                               _template)
from kiln.install_runtime import Entry, KilnError

if TYPE_CHECKING:
    from kiln.install import Installation


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
        self.dropped = _dropped_outputs(entries, len(entries[0].gate.outputs))
        self.mode = _schema_mode(op, len(entries[0].gate.outputs) + len(self.dropped or ()))
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
        single = len(self.entries[0].gate.outputs) == 1 and not self.dropped
        dropped = self.dropped
        inst, GRAD = self.inst, _GRAD
        keyset = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, self.key))
        numbers = self.number_positions if (self.number_positions[0] or self.number_positions[1]) else None

        traced = _traced_tensor_type()

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
                    if dropped is not None:
                        return _with_dropped(outs, dropped)
                    return outs[0] if single else outs
            if not (traced and args and isinstance(args[0], traced)):  # a trace's call is no miss
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


def _traced_tensor_type():
    """The tensor types graph and compile mode trace with (dynamo's FakeTensor, AOTAutograd's FunctionalTensor
    around it), or None where this torch has neither: their calls reach the backend kernel while a module is
    traced, once, and are not the model's calls, so they count as no miss."""
    types = []
    try:
        from torch._subclasses.fake_tensor import FakeTensor
        types.append(FakeTensor)
        from torch._subclasses.functional_tensor import FunctionalTensor
        types.append(FunctionalTensor)
    except ImportError:
        pass
    return tuple(types) or None


def _dropped_outputs(entries: list, n_written: int):
    """[(result index, shape, strides, dtype), ...] of the empty results capture dropped (the same for every
    entry of an overload, else _Unsupported), or None when the entries write every result."""
    from kiln.install_gate import _torch_dtype
    specs = set()
    for ae in entries:
        d = ae.gate.entry.dropped
        if not d:
            specs.add(None)
            continue
        idx, ts = list(d.get("indices") or []), d.get("tensors")
        if not isinstance(ts, list) or len(ts) != len(idx):
            raise _Unsupported("the op returns empty results capture dropped without recording them "
                               "(an older capture; capture again)")
        specs.add(tuple((int(i), tuple(t["shape"]), tuple(t["strides"]), t["dtype"]) for i, t in zip(idx, ts)))
    if len(specs) != 1:
        raise _Unsupported("the entries of this overload return different results (some dropped as empty)")
    spec = specs.pop()
    if spec is None:
        return None
    n = n_written + len(spec)
    if sorted(i for i, *_ in spec) != sorted(set(i for i, *_ in spec)) or any(not 0 <= i < n for i, *_ in spec):
        raise _Unsupported("the empty results capture dropped do not fit the op's results")
    return [(i, shape, strides, _torch_dtype(dt)) for i, shape, strides, dt in sorted(spec)]


def _with_dropped(outs, dropped) -> tuple:
    """The op's results: kiln's outputs in order, with the empty ones capture dropped at their places (made
    on the outputs' device)."""
    import torch
    device = outs[0].device
    result, it = [], iter(outs)
    for i, shape, strides, dt in dropped:
        while len(result) < i:
            result.append(next(it))
        result.append(torch.empty_strided(shape, strides, dtype=dt, device=device))
    result.extend(it)
    return tuple(result)


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
