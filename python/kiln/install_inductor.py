"""kiln.install_inductor: aten entries inside torch.compile.

A dispatcher override never sees a compiled call: Inductor lowers aten ops itself, most of them after
decomposing them (softmax becomes amax, sub, exp, sum and div before any kernel is chosen). So each
installed aten entry is also, when installed compile-friendly,

- a custom op kiln::<entry> (install_module's op: the gate's tensors in, the entry's kernel on a hit,
  gate-shaped copies for what a trace cannot see), and
- an Inductor pattern: the entry's overload called with its captured constants, traced through
  Inductor's own decompositions (pattern_matcher.register_replacement with fwd_only), replaced by the op.

A post-grad pass (torch._inductor.config.post_grad_custom_pre_pass, chained to whatever pass was there)
applies the patterns. The pattern matcher ignores some constants of what it traced (reduction dims among
them), so a match is taken only when (1) its input tensors have exactly the gate's dtype, shape, strides
and device, (2) its outputs are what the gate writes, and (3) its nodes are the traced ones: the same
targets with the same constant arguments. Anything else stays Inductor's code.

A chain entry (docs/capture.md "Chain problems") is the same with the chain's calls as the pattern: its
manifest entry's "ops" run over the gate's inputs, returning each of its outputs (the op returns them as a
tuple). It is never replaced in eager (docs/install.md).

Nothing of this costs an eager user anything: importing Inductor's config imports dynamo (about 1.8 s
here), so when it is not imported yet the pass is set by a hook that runs right after its import (which
torch.compile does), and the patterns are traced at the first compilation (a few hundred ms per entry).
Uninstall restores the pass that was there."""

from __future__ import annotations

import contextlib
import importlib.abc
import sys
import types
import uuid
from typing import TYPE_CHECKING, Optional

from kiln.install_aten import _schema_mode
from kiln.install_assumes import Policy, StructureCache, checks_of, guarded_kernel
from kiln.install_gate import _Slot, _template, _Unsupported, same_layout
from kiln.install_module import _OP_NAMESPACE, _op_name, entry_op_fake, entry_op_kernel, entry_op_schema

if TYPE_CHECKING:
    from kiln.install import Installation


class _NotMatchable(Exception):
    """The entry cannot be matched inside a compiled graph (said in the installation's notes)."""


def _constant(value):
    """A captured non-tensor argument as the Python value the op was called with (kiln.capture_record
    writes torch types and non-finite floats as strings, a string argument as itself: gelu's approximate,
    div's rounding_mode; an object it could not write as "<...>")."""
    import torch
    if isinstance(value, list):
        return [_constant(v) for v in value]
    if isinstance(value, str):
        if value in ("inf", "-inf", "nan"):
            return float(value)
        if value.startswith("torch."):
            attr = getattr(torch, value[len("torch."):], None)
            if isinstance(attr, (torch.dtype, torch.memory_format, torch.layout)):
                return attr
        elif not value.startswith("<"):
            return value
        raise _NotMatchable(f"argument {value!r} is not a constant kiln can put back into a pattern")
    return value


def _search_fn(op, entry, n_in: int):
    """def search(t0, ..., tn): return op(<captured arguments, tensors at their slots>); the parameter
    names become the pattern's keyword arguments."""
    args = [_template(a) for a in (entry.args or {}).get("args", [])]
    kwargs = {k: _template(v) for k, v in ((entry.args or {}).get("kwargs") or {}).items()}
    slots = [t.index for t in list(args) + list(kwargs.values()) if isinstance(t, _Slot)]
    if slots != list(range(n_in)):
        raise _NotMatchable("its tensors are not plain arguments in gate order")
    args = [a if isinstance(a, _Slot) else _constant(a) for a in args]
    kwargs = {k: (v if isinstance(v, _Slot) else _constant(v)) for k, v in kwargs.items()}
    names = [f"t{i}" for i in range(n_in)]
    ns = {"op": op, "A": [None if isinstance(a, _Slot) else a for a in args],
          "K": {k: None if isinstance(v, _Slot) else v for k, v in kwargs.items()}}
    call = [f"t{a.index}" if isinstance(a, _Slot) else f"A[{i}]" for i, a in enumerate(args)]
    call += [f"{k}=t{v.index}" if isinstance(v, _Slot) else f"{k}=K[{k!r}]" for k, v in kwargs.items()]
    src = f"def search({', '.join(names)}):\n    return op({', '.join(call)})\n"
    exec(compile(src, f"<kiln pattern {entry.name}>", "exec"), ns)
    return ns["search"]


class _Ref:
    """A value of a chain entry's op chain ({"ref": NAME}: an input of the gate or an earlier call's result)."""
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


def _chain_arg(value):
    if isinstance(value, dict) and set(value) == {"ref"}:
        return _Ref(value["ref"])
    if isinstance(value, list):
        return [_chain_arg(v) for v in value]
    return _constant(value)


def _chain_search_fn(entry, n_in: int):
    """def search(t0, ..., tn): a chain entry's calls (its "ops", the captured overloads with their constants)
    over the gate's inputs in gate order, returning the chain's output, or the tuple of its outputs (a chain
    whose intermediate is read outside it returns that too: the VAE's residual sum)."""
    from kiln.install_aten import _resolve_overload
    names = [g["name"] for g in entry.inputs]
    if len(names) != n_in:
        raise _NotMatchable("the chain's inputs are not the gate's")
    steps = [(_resolve_overload(op["aten"]), [_chain_arg(a) for a in op.get("args", [])],
              {k: _chain_arg(v) for k, v in (op.get("kwargs") or {}).items()}, op.get("out"))
             for op in entry.ops]
    results = list(entry.chain_outputs)

    def run(ts):
        env = dict(zip(names, ts))

        def val(a):
            return env[a.name] if isinstance(a, _Ref) else [val(x) for x in a] if isinstance(a, list) else a

        for overload, args, kwargs, out in steps:
            a, kw = [val(x) for x in args], {k: val(v) for k, v in kwargs.items()}
            if "device" in kw and a and hasattr(a[0], "device"):  # softmax(x, dtype=...)'s _to_copy names the
                kw["device"] = a[0].device  # capture's device: traced on meta, the copy stays where x is
            r = overload(*a, **kw)
            for name, v in ([(out, r)] if isinstance(out, str) else zip(out or [], r)):
                if name:
                    env[name] = v
        return env[results[0]] if len(results) == 1 else tuple(env[r] for r in results)

    ns = {"run": run}
    params = ", ".join(f"t{i}" for i in range(n_in))
    exec(compile(f"def search({params}):\n    return run([{params}])\n", f"<kiln pattern {entry.name}>", "exec"),
         ns)
    return ns["search"]


def _trace_pattern(fn, args):
    """Inductor's trace of a pattern (fwd_only), then what compile_fx does to the model's graph before any
    post-grad pass sees it: Inductor's joint-graph passes (pointless_convert among them: a bfloat16
    BatchNorm's rounding to bfloat16 and the ReLU6's upcast after it become one fp32 convert there, so a
    bfloat16 MobileNet-v2 chain traced without them matched nothing) and its views turned into reshapes (a
    GroupNorm's view(N, G, -1) among them)."""
    from torch._inductor import pattern_matcher as pm
    from torch._inductor.fx_passes.joint_graph import joint_graph_passes
    from torch._inductor.fx_passes.post_grad import view_to_reshape
    gm = pm.fwd_only(fn, args)
    devices = {a.device for a in args if hasattr(a, "device")}
    joint_graph_passes(gm, input_device=next(iter(devices)) if len(devices) == 1 else None)
    view_to_reshape(gm)
    gm.recompile()
    return gm


def _trace_aten_pattern(fn, args, device=None):
    """The trace of a pattern as kiln's graph mode sees the model (kiln.install_graph): aten ops as eager
    dispatches them, no decomposition beyond the composites' own, no-op copies removed (fwd_only does that).
    Traced on meta tensors, whose device the composites write into their calls (softmax with a dtype is a
    _to_copy(..., device=meta) here): those are put on `device`, the model's, or the pattern never matches
    (Gemma-4's attention block on the H200 had no hit in graph mode until this)."""
    import torch
    from torch._inductor import pattern_matcher as pm
    gm = pm.fwd_only(fn, args, get_decomp_fn=dict)
    if device is not None:
        meta = torch.device("meta")
        for node in gm.graph.nodes:
            if node.op == "call_function" and node.kwargs.get("device") == meta:
                node.kwargs = {**node.kwargs, "device": device}
        gm.recompile()
    return gm


# How a pattern is traced for each kind of graph it is matched in: "inductor", the post-grad graph of
# torch.compile's default backend; "aten", kiln's graph mode (kiln.install_graph).
_TRACERS = {"inductor": _trace_pattern, "aten": _trace_aten_pattern}

# Composites whose decomposition the device chooses: SDPA is one fused backend call in a graph of the model
# (_scaled_dot_product_flash_attention_for_cpu on the CPU; flash, efficient or cuDNN attention on a GPU, by
# the inputs), and its math form on meta tensors, which no graph holds. Their graph-mode patterns are traced
# on fake tensors of the model's device, as the model's graph is.
_DEVICE_CHOSEN = frozenset({"aten::scaled_dot_product_attention"})
_WHERE = {"inductor": "torch.compile", "aten": "kiln's graph mode"}


def _examples(specs, device, fake: bool = False) -> list:
    """Tensors of the gate's inputs to trace a pattern with, on the model's device: CPU ones for the CPU
    (allocated, not written), fake ones for a GPU (no memory: a gate's inputs at real size may not fit beside
    the model), or meta ones where device is meta (kiln's graph mode). Not meta for a GPU's Inductor
    pattern: Inductor's joint-graph passes, which the pattern goes through as the model's graph does, neither
    rewrite nodes on meta (pointless_convert skips an unsupported device) nor leave them (constant folding
    took a whole depthwise-conv chain on meta for one empty tensor): no chain matched inside torch.compile on
    the GPU. Some decompositions differ by device too (native_group_norm's CPU form folds the weight into a
    scale and a shift). fake: fake ones on any device (_DEVICE_CHOSEN)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    if device.type in ("cpu", "meta") and not fake:
        return [torch.empty_strided(s, st, dtype=d, device=device) for s, st, d in specs]
    with FakeTensorMode(allow_non_fake_inputs=True):
        return [torch.empty_strided(s, st, dtype=d, device=device) for s, st, d in specs]


@contextlib.contextmanager
def _stepped_aside(inst: "Installation"):
    """kiln's eager entries step aside while patterns are traced on CPU tensors: the trace's calls are not the
    model's, so none reaches a kernel and none counts as a hit or a miss."""
    counts = list(inst._entry_counts.values()) + list(inst._target_counts.values()) + \
        list(inst._op_counts.values())
    saved = [list(c) for c in counts]
    active, inst.active = inst.active, False
    try:
        yield
    finally:
        inst.active = active
        for c, before in zip(counts, saved):
            c[:] = before


def _replace_fn(op_overload, n_in: int):
    names = [f"t{i}" for i in range(n_in)]
    ns = {"kop": op_overload}
    exec(f"def replace({', '.join(names)}):\n    return kop({', '.join(names)})\n", ns)
    return ns["replace"]


def _key(value):
    """A node argument, comparable across graphs: nodes as "N", numbers as floats (JSON lost int/float)."""
    import torch.fx
    if isinstance(value, torch.fx.Node):
        return "N"
    if isinstance(value, (list, tuple)):
        return tuple(_key(v) for v in value)
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, (int, float)):
        return "nan" if value != value else float(value)
    return repr(value)


def _node_keys(nodes) -> list:
    """The graph's calls as comparable keys, in an order that does not depend on the graph's (by their text:
    one call's argument may be a node where another's is a number)."""
    return sorted(((str(n.target), _key(n.args), _key(sorted(n.kwargs.items())))
                   for n in nodes if n.op == "call_function"), key=repr)


def _tracing(examples):
    """Where a pattern on these examples is traced and registered: fake ones in their fake mode (a
    decomposition's new tensors, cudnn_batch_norm's empty saved statistics among them, are fake there too)."""
    from torch._subclasses.fake_tensor import FakeTensor
    # the examples' own mode, not the ambient one (Inductor's, whose compile this pass runs in, would take a CPU
    # pattern's real tensors for foreign ones)
    modes = [t.fake_mode for t in examples if isinstance(t, FakeTensor)]
    return modes[0] if modes else contextlib.nullcontext()


def _reads_inputs(graph) -> bool:
    """Whether the traced pattern's output depends on at least one of its placeholders (a pattern folded to a
    constant, as Inductor's constant folding did to a chain traced on meta tensors, would match nothing)."""
    out = next(n for n in graph.nodes if n.op == "output")
    seen, todo = set(), [out]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "placeholder":
            return True
        todo.extend(n.all_input_nodes)
    return False


def _unread_inputs(graph) -> list:
    """The traced pattern's placeholders nothing reads (an empty tensor that Inductor's cat decomposition drops:
    a KV cache's first cat, Llama's keys at prefill). Inductor's matcher wants every argument of a pattern in a
    match and fails the compile where one is missing."""
    return [n.target for n in graph.nodes if n.op == "placeholder" and not n.users]


def _same_tensor(val, shape, stride, dtype, device) -> bool:
    import torch
    if not isinstance(val, torch.Tensor) or val.dtype != dtype or val.device != device:
        return False
    try:
        return tuple(int(s) for s in val.shape) == shape and same_layout(shape, tuple(int(s) for s in val.stride()),
                                                                         stride)
    except (TypeError, ValueError, RuntimeError):  # a symbolic size: not the gate's shape
        return False


# What Inductor fuses into one pass over the same bytes as kiln's kernel (besides ops tagged pointwise): data
# movement, dtype conversion, the inference BatchNorm (a scale and a shift per channel), and pooling windows (each
# output reads its window once, in a pass Inductor generates too; a depthwise convolution is not among them:
# Inductor hands it to cuDNN).
_ONE_PASS = {"cat", "view", "reshape", "_unsafe_view", "permute", "expand", "slice", "select", "unsqueeze", "squeeze",
             "clone", "_to_copy", "convert_element_type", "_native_batch_norm_legit_no_training", "full",
             "scalar_tensor", "alias", "t", "transpose", "getitem",
             "_low_memory_max_pool_with_offsets", "_low_memory_max_pool_offsets_to_indices"} | {
    f"{p}{d}d{s}" for p in ("max_pool", "avg_pool", "adaptive_avg_pool", "_adaptive_avg_pool", "adaptive_max_pool")
    for d in (1, 2, 3) for s in ("", "_with_indices")}


def _one_pass(graph) -> bool:
    """Whether every call of the traced pattern is pointwise or in _ONE_PASS (pooling windows among them): no reduction,
    convolution or GEMM, so Inductor's own code for it is one pass too (a pooling entry on a relaid tensor costs a
    copy of its input and of its output, ~3x the pool's own bytes, which no kernel of the same pass wins back)."""
    import torch
    for n in graph.nodes:
        if n.op != "call_function":
            continue
        tags = getattr(n.target, "tags", ())
        name = getattr(n.target, "__name__", str(n.target)).split(".")[0]
        if torch.Tag.pointwise not in tags and name not in _ONE_PASS:
            return False
    return True


def _relaid_layout(graph) -> bool:
    """Whether Inductor will lay this graph's convolutions out channels-last (its layout optimisation, decided
    after the post-grad passes by GraphLowering.decide_layout_opt on the graph as they leave it; which way it
    goes depends on whether the graph is an inference one, which a post-grad pass is not told: either counts)."""
    try:
        from torch._inductor.graph import GraphLowering
        gm = graph.owning_module
        return gm is not None and any(GraphLowering.decide_layout_opt(gm, is_inference=i) for i in (True, False))
    except Exception:  # noqa: BLE001 - a heuristic of Inductor's that changed shape: assume the traced layout
        return False


LEFT_TO_INDUCTOR = ("left to Inductor in a graph whose convolutions it lays out channels-last: kiln's op (the "
                    "contiguous layout) would cost copies and cut the one pass Inductor fuses it into")


def compile_notes(inst: "Installation") -> list:
    """The installation's notes of entries that torch.compile's graphs did not get (left to Inductor, or not
    matched), in order."""
    return [n for n in inst.notes if LEFT_TO_INDUCTOR in n or f"not matched inside {_WHERE['inductor']}" in n]


class _AtenPattern:
    """One aten entry (or, aten_op None, one chain entry) as an op and, once traced, a pattern per flavor
    (_TRACERS)."""

    def __init__(self, aten_op, ae, op_overload, op_name: str, device):
        self.aten_op = aten_op
        self.ae = ae
        self.entry = ae.gate.entry
        self.op = op_overload
        self.op_name = op_name
        self.device = device
        self.traced_keys: dict = {}  # flavor -> the traced calls (_node_keys)
        self.matchers: dict = {}  # flavor -> its PatternMatcherPass
        self.one_pass: dict = {}  # flavor -> _one_pass of the trace
        self.relaid = False  # the graph being matched has Inductor's channels-last convolutions (_relaid_layout)
        self.left: Optional[list] = None  # where set, a match left to Inductor appends the entry's name

    def check(self, flavor: str, match) -> bool:
        gate = self.ae.gate
        for i, (shape, stride, dtype) in enumerate(gate.inputs):
            node = match.kwargs.get(f"t{i}")
            if node is None or not _same_tensor(getattr(node, "meta", {}).get("val"), shape, stride, dtype,
                                                self.device):
                return False
        outs = match.output_nodes()
        if len(outs) != len(gate.outputs):
            return False
        for out, (oshape, ostride, odtype) in zip(outs, gate.outputs):
            if out is None or not _same_tensor(out.meta.get("val"), oshape, ostride, odtype, self.device):
                return False
        if _node_keys(match.nodes) != self.traced_keys[flavor]:
            return False
        if flavor == "inductor" and self.relaid and self.one_pass.get(flavor) and self._relaid_match(match, outs):
            if self.left is not None:
                self.left.append(self.entry.name)
            return False
        return True

    @staticmethod
    def _relaid_match(match, outs) -> bool:
        """Whether the match reads or writes a 4-D or 5-D tensor: in a graph whose convolutions Inductor lays out
        channels-last, the layout reaches every such tensor of the one-pass work around them. kiln's op (tagged
        needs_exact_strides, the traced contiguous layout) then costs a copy of each tensor a convolution
        writes or reads, and cuts the fusion Inductor makes of the rest: DenseNet-121 bf16's cat -> BatchNorm ->
        ReLU chains on the H100, 10.222 ms a forward against torch.compile's 6.296; with the chains left to
        Inductor and four BatchNorm entries between a cat and a ReLU still replaced, 7.000 (2026-12-06)."""
        vals = [getattr(v, "meta", {}).get("val") for k, v in match.kwargs.items() if k.startswith("t")]
        vals += [o.meta.get("val") for o in outs]
        return any(getattr(v, "ndim", 0) in (4, 5) for v in vals)


_CONFIG = "torch._inductor.config"


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls callback(module) right after the module `name` is imported, then leaves sys.meta_path."""

    def __init__(self, name: str, callback):
        self.name = name
        self.callback = callback

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        spec = None
        for finder in sys.meta_path:
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        if spec is None or spec.loader is None:
            return None
        inner, hook = spec.loader, self

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return inner.create_module(spec)

            def exec_module(self, module):
                inner.exec_module(module)
                hook.remove()
                hook.callback(module)

        spec.loader = _Loader()
        return spec

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)


class InductorPatterns:
    """The installation's patterns and the post-grad pass that applies them."""

    def __init__(self, inst: "Installation", aten_entries: list, key: str, chain_gates: list = ()):
        """aten_entries: (overload, _AtenEntry) of every installed aten entry; chain_gates: the _Gate of
        every chain entry (replaced inside compiled graphs only: docs/install.md)."""
        import torch
        self.inst = inst
        self.config = None
        self.hook = None
        lib = inst.library
        self.device = torch.device("cuda", lib.device_index) if lib.is_cuda else torch.device("cpu")
        self.oplib = torch.library.Library(_OP_NAMESPACE, "FRAGMENT")
        self.patterns: list = []
        self.pass_ = None
        self.previous = None
        self.traced: dict = {}  # flavor -> the patterns that traced, the largest first
        self.structures = StructureCache()  # the band checks of the entries' masks
        self.guarded: dict = {}  # op overload -> (checks, Policy) of the entries whose kernels assume a structure
        tags = (torch.Tag.needs_exact_strides,) if hasattr(torch.Tag, "needs_exact_strides") else ()
        try:
            for aten_op, ae in aten_entries:
                gate, entry = ae.gate, ae.gate.entry
                try:
                    mode = _schema_mode(aten_op, len(gate.outputs))
                except _Unsupported:
                    mode = None
                if len(gate.outputs) != 1 or mode != "functional":
                    inst.notes.append(f"{entry.name}: not matched inside torch.compile (kiln puts functional "
                                      "ops with one output into compiled graphs)")
                    continue
                name = _op_name(entry.name, inst._op_names)
                self.oplib.define(entry_op_schema(name, gate), tags=tags)
                self.oplib.impl(name, entry_op_kernel(gate, entry, inst, aten_op.name()), key)
                torch.library.register_fake(f"{_OP_NAMESPACE}::{name}", entry_op_fake(gate), lib=self.oplib)
                overload = getattr(getattr(torch.ops, _OP_NAMESPACE), name).default
                self.patterns.append(_AtenPattern(aten_op, ae, overload, f"{_OP_NAMESPACE}::{name}", self.device))
            for gate in chain_gates:
                entry = gate.entry
                name = _op_name(entry.name, inst._op_names)
                self.oplib.define(entry_op_schema(name, gate), tags=tags)
                kernel = entry_op_kernel(gate, entry, inst, entry.target)
                checks, policy = checks_of(entry), Policy()
                if checks:  # what the kernel assumes of the contents, checked first (install_assumes)
                    kernel = guarded_kernel(kernel, gate, checks, _chain_search_fn(entry, len(gate.inputs)), inst,
                                            entry.target, self.structures, policy)
                self.oplib.impl(name, kernel, key)
                torch.library.register_fake(f"{_OP_NAMESPACE}::{name}", entry_op_fake(gate), lib=self.oplib)
                overload = getattr(getattr(torch.ops, _OP_NAMESPACE), name).default
                self.patterns.append(_AtenPattern(None, types.SimpleNamespace(gate=gate), overload,
                                                  f"{_OP_NAMESPACE}::{name}", self.device))
                if checks:
                    self.guarded[overload] = (checks, policy)
        except BaseException:
            self.oplib._destroy()
            raise
        if not self.patterns:
            self.oplib._destroy()
            self.oplib = None
            return
        if _CONFIG in sys.modules:
            self._set_pass(sys.modules[_CONFIG])
        else:
            self.hook = _AfterImport(_CONFIG, self._set_pass)
            sys.meta_path.insert(0, self.hook)

    def _set_pass(self, inductor_config) -> None:
        """Puts kiln's pass first in Inductor's post-grad custom pre-pass, ahead of what was there."""
        from torch._inductor.custom_graph_pass import CustomGraphPass
        self.hook = None
        if self.oplib is None:  # uninstalled before Inductor was imported
            return
        outer = self
        token = f"kiln-{uuid.uuid4()}"  # the compiled graphs call this installation's ops: never cached

        class _KilnPass(CustomGraphPass):
            def __call__(self, graph):
                outer.apply(graph)
                if outer.previous is not None:
                    outer.previous(graph)

            def uuid(self):
                return token

        self.config = inductor_config
        self.previous = inductor_config.post_grad_custom_pre_pass
        self.pass_ = _KilnPass()
        inductor_config.post_grad_custom_pre_pass = self.pass_

    @property
    def ops(self) -> dict:
        """entry name -> "kiln::<op>"."""
        return {p.entry.name: p.op_name for p in self.patterns}

    def _trace(self, flavor: str) -> list:
        """Traces every entry's pattern for one flavor (once, at the first graph of that flavor)."""
        import torch
        kept: list = []
        # not in inference mode, whatever mode the caller is in: AOTAutograd traces the model's graph outside it,
        # and a composite decomposes otherwise there (batch_norm reaches native_batch_norm, where the graph
        # holds _native_batch_norm_legit_no_training: kiln tune installs under the model's inference mode, and
        # no MobileNet-v2 chain matched in its graph mode)
        with _stepped_aside(self.inst), torch.inference_mode(False):
            self._trace_each(kept, flavor)
        # the larger pattern first: a chain's ops include a smaller entry's (the attention block holds the mask
        # chain, which holds the softmax), and a smaller one replaced first leaves nothing for the chain to match
        # (Gemma-4 on the H200: every softmax became kiln's and the attention and mask-chain entries had no hit)
        kept.sort(key=lambda p: -len(p.traced_keys[flavor]))
        self.traced[flavor] = kept
        return kept

    def _trace_each(self, kept: list, flavor: str) -> None:
        """Traces and registers each pattern; the ones that trace are appended to kept."""
        import functools

        import torch
        from torch._inductor import pattern_matcher as pm
        for p in self.patterns:
            gate = p.ae.gate
            tracer = _TRACERS[flavor]
            chosen = flavor == "aten" and p.aten_op is not None and p.aten_op.name() in _DEVICE_CHOSEN
            if flavor == "aten" and not chosen:
                # one path on every device: meta tensors, the calls put on the model's device
                tracer = functools.partial(tracer, device=self.device)
            try:
                search = _search_fn(p.aten_op, p.entry, len(gate.inputs)) if p.aten_op is not None \
                    else _chain_search_fn(p.entry, len(gate.inputs))
                examples = _examples(gate.inputs, self.device if flavor == "inductor" or chosen
                                     else torch.device("meta"), fake=chosen)
                with _tracing(examples):
                    traced = tracer(search, examples)
                    p.traced_keys[flavor] = _node_keys(traced.graph.nodes)
                    p.one_pass[flavor] = _one_pass(traced.graph)
                    if not p.traced_keys[flavor]:
                        raise _NotMatchable("its op traces to no computation")
                    if not _reads_inputs(traced.graph):
                        raise _NotMatchable("its pattern's trace reads none of its inputs")
                    unread = _unread_inputs(traced.graph)
                    if unread:
                        raise _NotMatchable(f"its pattern's trace reads no value of {', '.join(unread)} (an "
                                            "empty tensor a cat drops?), and a match must bind every input")
                    # a pass of its own: entries of one op and pattern (other shapes) are not duplicates there
                    p.matchers[flavor] = pm.PatternMatcherPass()
                    pm.register_replacement(search, _replace_fn(p.op, len(gate.inputs)), examples, tracer,
                                            [p.matchers[flavor]], extra_check=functools.partial(p.check, flavor))
                kept.append(p)
            except (_NotMatchable, RuntimeError, TypeError, ValueError, NotImplementedError) as why:
                self.inst.notes.append(f"{p.entry.name}: not matched inside {_WHERE[flavor]}: {why}")

    def apply(self, graph, flavor: str = "inductor") -> int:
        """Replaces every admitted match in graph by its entry's op: Inductor's post-grad pass ("inductor"), or
        kiln's graph mode ("aten"). Returns how many were replaced."""
        if not self.inst.active:
            return 0
        patterns = self.traced.get(flavor)
        if patterns is None:
            patterns = self._trace(flavor)
        relaid = flavor == "inductor" and _relaid_layout(graph)
        left: list = []
        n = 0
        for p in list(patterns):
            p.relaid, p.left = relaid, left
            try:
                n += p.matchers[flavor].apply(graph)
            except RuntimeError as why:  # Inductor's matcher refused a match of it: the graph compiles without it
                patterns.remove(p)
                self.inst.notes.append(f"{p.entry.name}: not matched inside {_WHERE[flavor]}: {why}")
            finally:
                p.relaid, p.left = False, None
        for name in dict.fromkeys(left):
            note = f"{name}: {LEFT_TO_INDUCTOR}"
            if note not in self.inst.notes:
                self.inst.notes.append(note)
        if n and self.guarded and flavor == "inductor":
            self._uncache_computed_masks(graph)
        return n

    def _uncache_computed_masks(self, graph) -> None:
        """Where the graph computes two or more of the tensors kiln's guarded ops check (two masks), those
        entries check every call: Inductor may put the second into the first one's buffer (install_assumes
        Policy). Graph inputs are not Inductor's buffers, and one computed mask has no other to share with.
        Graph mode runs the graph as traced, each mask a tensor of its own (PyTorch's allocator hands a freed
        block to a new tensor object, which the cache does not take for the old one): its checks stay cached
        (Gemma-4 on the H200: six checks a forward instead of two, 21.6 against 19.8 ms, with the full layer's
        entry)."""
        computed: dict = {}
        for node in graph.nodes:
            guarded = self.guarded.get(node.target) if node.op == "call_function" else None
            for i, *_ in (guarded[0] if guarded else ()):
                arg = node.args[i]
                if getattr(arg, "op", "placeholder") not in ("placeholder", "get_attr"):
                    computed.setdefault(arg, []).append(guarded[1])
        if len(computed) > 1:
            for policies in computed.values():
                for policy in policies:
                    policy.cached = False

    def remove(self) -> None:
        if self.hook is not None:
            self.hook.remove()
            self.hook = None
        if self.pass_ is not None and self.config.post_grad_custom_pre_pass is self.pass_:
            self.config.post_grad_custom_pre_pass = self.previous
        self.pass_ = None
        if self.oplib is not None:
            self.oplib._destroy()
            self.oplib = None


class RootCompiler:
    """torch.compile for a script that does not call it (`kiln run --compile`, kiln.install(compile=True)):
    every root module, one called outside any other module's forward, is compiled in place
    (Module.compile()) at its first call, so kiln's module and aten entries go inside its graphs as they
    would in a script that compiled its model itself. Module.__call__ is wrapped while this is active; the
    wrapper's first statement is torch.compiler.is_dynamo_compiling(), so what dynamo traces through it is
    the original call."""

    def __init__(self, backend=None):
        """backend: torch.compile's (None: its default, Inductor; kiln.install_graph's for graph mode)."""
        import weakref

        import torch
        self.torch = torch
        self.backend = backend
        self.original = None
        self.depth = 0
        self.seen = weakref.WeakSet()
        self.compiled: list = []  # class names of the modules compiled, in order

    def start(self) -> None:
        torch = self.torch
        original = self.original = torch.nn.Module.__call__
        is_compiling = torch.compiler.is_dynamo_compiling
        outer = self

        def kiln_root_call(module, *args, **kwargs):
            if is_compiling():
                return original(module, *args, **kwargs)
            if outer.depth == 0 and module not in outer.seen:
                outer.seen.add(module)
                module.compile(**({"backend": outer.backend} if outer.backend is not None else {}))
                outer.compiled.append(type(module).__name__)
            outer.depth += 1
            try:
                return original(module, *args, **kwargs)
            finally:
                outer.depth -= 1

        torch.nn.Module.__call__ = kiln_root_call

    def stop(self) -> None:
        if self.original is not None:
            self.torch.nn.Module.__call__ = self.original
            self.original = None

