"""The recorder of `kiln capture`: it watches a running PyTorch script through a dispatch mode and global
module hooks, and keeps what the later stages need — every aten call in order with its signature, tensor
identities (producer -> consumer), module path and grad mode; real tensors for the first call of each
signature; and, for leaf modules, a straight-line trace of their forward.

How it sees the script
----------------------
A `TorchDispatchMode` receives every aten call below autograd (in `inference_mode` the composite ops such
as `aten.linear` or `aten.softmax.int` arrive whole, in grad mode they arrive decomposed: kiln records what
the script's own mode produces). Each call runs inside `record_function("kiln#<index>")`, so that the
profiler's device time of exactly that call (its kernels, those of the ops it decomposes into) can be read
back afterwards, while kiln's own copies (outside those ranges) are never counted.

Metadata is not work: a call is a *metadata call* when it is one of the allocation/bookkeeping ops
(`empty`, `detach_`, ...) or when, without writing any argument, every tensor it returns aliases the storage
of an input (views, `reshape` of a contiguous tensor, a no-op `.to()`, `dropout` in eval). Metadata calls
carry tensor identity through (a view of X is X for the graph) but are neither ranked nor turned into
problems. Ops marked as possibly aliasing (`aten.to`, `reshape`, `contiguous`...) are only known to copy
after they ran; their inputs are cloned after the call, which is safe because they write nothing.

Scope: the model is what runs inside module forwards. Ops outside any module forward count only when the
script never calls a module (a purely functional script); until the first forward is seen they are
recorded provisionally and their held tensors are kept in a separate pool (at most --max-bytes) that is
dropped when the first forward starts (model construction and `.to()` of the weights are not the model).

Holding tensors: for the first in-scope call of every problem-eligible signature, the inputs are kept
before the call (so in-place and `out=` ops are captured as they were before they wrote), and the outputs
after it, in their memory order (capture_problem.layout_of). What is kept of a tensor (hold): a full copy,
streamed to a spool file on disk as it is recorded, when the call's tensors fit in --max-bytes and the
spool's cap allows; and, for every input that is not copied whole or is bigger than a slice, its summary
(kiln.capture_stats: statistics and structure, measured on the tensor's own device) with a leading slice.
So no call is lost for its size: a problem whose tensors are too big to keep is written with inputs drawn
from their summaries. When memory or disk runs out, full copies stop and the reason is kept for the
report. Nothing here ever raises into the user's script: an internal error is counted and reported, and
the user's op still runs.
"""

from __future__ import annotations

import contextlib
import functools
import keyword
import traceback
import weakref
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.profiler import record_function
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils.weak import WeakIdKeyDictionary

from kiln.capture_problem import DTYPE_NAMES, Spool, Stored, layout_of
from kiln.capture_stats import StatsError, leading_count, leading_slice, summarize

# Allocation and bookkeeping ops: no tensor work (their outputs are uninitialised or unchanged).
META_OP_NAMES = frozenset({
    "empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided", "empty_permuted",
    "detach_", "set_", "resize_", "resize_as_", "lift_fresh", "sym_size", "sym_stride", "sym_numel",
    "sym_storage_offset", "is_same_size", "record_stream", "_has_same_storage_numel",
    "_unsafe_set_version_counter", "_nested_tensor_size", "_propagate_xla_data",
})
# Fused fast paths whose own kernels are built of other aten calls (nn.MultiheadAttention and
# nn.TransformerEncoderLayer in inference): kiln looks inside them. The call is redispatched straight to
# its backend kernel with the capture mode pushed again, so its inner calls (the projections, the
# attention, the norms) are recorded one by one as calls of their own, where a family can match them and
# an installed entry is hit from inside the kernel (those calls go through the dispatcher too). The outer
# call is kept as one op for module traces and the graph, but is no problem and gets no time of its own.
CONTAINER_OP_NAMES = frozenset({"_native_multi_head_attention", "_transformer_encoder_layer_fwd"})
CONTAINER_REASON = "a fused fast path: its inner calls are captured one by one"
# Composite functions whose decomposition below autograd (under grad or no_grad: what a dispatch mode sees)
# is an op no family can take whole: F.scaled_dot_product_attention becomes
# _scaled_dot_product_flash_attention (_for_cpu, _efficient_, _cudnn_), which returns the attention's
# logsumexp and more beside its output, so the op install would replace must write them too. Capture
# records the composite call itself (one output), and none of the calls it decomposes into; install then replaces it at its autograd key, before the decomposition, as it does
# every composite op. Only where no gradient is needed (the decomposition is the autograd graph). The
# function is seen by replacing the module attribute for the run (not by a torch function mode: with one
# active, nn.MultiheadAttention and nn.TransformerEncoderLayer leave their fast paths, so the script
# would run other code than it does).
# torch.matmul (and `@`, Tensor.matmul) likewise: below autograd it is a bmm of 3-D views (the batch dims
# merged, the result viewed back), which hides an eager attention block's [b, h, s, d] form (HF GPT-2's eager
# attention under no_grad); in inference_mode it arrives whole anyway.
COMPOSITE_FUNCTIONS = {
    (torch.nn.functional, "scaled_dot_product_attention"): torch.ops.aten.scaled_dot_product_attention.default,
    (torch, "matmul"): torch.ops.aten.matmul.default,
    (torch.Tensor, "matmul"): torch.ops.aten.matmul.default,
    (torch.Tensor, "__matmul__"): torch.ops.aten.matmul.default,
}
# Composite ops whose output shape is data-dependent but that carry no such tag (they decompose into nonzero,
# which does; in inference_mode they arrive whole): torch.where(cond) (Mixtral's MoE dispatch), and
# repeat_interleave with a tensor of repeats.
DATA_DEPENDENT_UNTAGGED = frozenset({("where", "default"), ("nonzero_numpy", "default"),
                                     ("repeat_interleave", "Tensor"), ("repeat_interleave", "self_Tensor")})
# Ops that create or fill a tensor from constants only: real device work, but not an optimisation problem.
CREATION_OP_NAMES = frozenset({
    "zeros", "ones", "full", "arange", "linspace", "logspace", "scalar_tensor", "eye", "zeros_like",
    "ones_like", "full_like", "new_zeros", "new_ones", "new_full", "fill_", "zero_", "tril_indices",
    "triu_indices", "tensor",
})
# Reductions and normalisations allowed in a fused module-level problem (besides pointwise-tagged ops).
FUSIBLE_OP_NAMES = frozenset({
    "mean", "sum", "amax", "amin", "max", "min", "var", "var_mean", "std", "std_mean", "prod", "norm",
    "linalg_vector_norm", "_softmax", "softmax", "_log_softmax", "log_softmax", "layer_norm",
    "native_layer_norm", "group_norm", "native_group_norm", "batch_norm", "native_batch_norm",
    "_native_batch_norm_legit_no_training", "_native_batch_norm_legit", "rms_norm", "_fused_rms_norm",
    "instance_norm", "logsumexp", "cumsum",
    # casts, copies and plain data movement
    "_to_copy", "to", "type_as", "copy_", "clone", "contiguous", "copy", "lift_fresh_copy", "_unsafe_view",
    "alias", "view", "reshape", "expand", "permute", "transpose", "t", "unsqueeze", "squeeze", "slice",
    "select", "split", "split_with_sizes", "chunk", "unbind", "narrow", "as_strided", "detach", "view_as",
    "flatten", "unflatten", "movedim", "repeat", "cat", "stack", "where", "masked_fill", "masked_fill_",
    "zeros_like", "ones_like", "full_like", "zeros", "ones", "full", "scalar_tensor", "fill_", "zero_",
    "empty", "empty_like", "empty_strided", "new_empty", "lift_fresh",
})
# Ops inside a module that stop it from being a fused module-level problem, even if tagged otherwise.
NOT_FUSIBLE_OP_NAMES = frozenset({
    "mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "conv1d", "conv2d", "conv3d", "convolution",
    "_convolution", "cudnn_convolution", "conv_transpose2d", "_grouped_mm", "grouped_mm", "embedding",
    "scaled_dot_product_attention", "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
    "index", "index_put_", "index_add_", "scatter", "scatter_add_", "gather", "sort", "topk", "nonzero",
    "_local_scalar_dense", "item", "einsum", "upsample_nearest2d", "upsample_bilinear2d",
})
# Names that may appear as run() parameters: never shadow torch, run or the device name.
_RESERVED_NAMES = frozenset({"torch", "run", "DEVICE"})


def op_label(func) -> str:
    """'aten::_softmax.default' for an OpOverload."""
    return f"{func.namespace}::{func._opname}.{func._overloadname}"


def op_short(func) -> str:
    """'_softmax' for an OpOverload."""
    return func._opname


def safe_name(name: str) -> str:
    """A Python identifier for a schema argument name."""
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "x"
    if name[0].isdigit():
        name = "_" + name
    if keyword.iskeyword(name) or name in _RESERVED_NAMES:
        name += "_"
    return name


@dataclass(frozen=True)
class TensorMeta:
    """What a tensor looked like at a call: enough to group calls and to describe a problem's inputs."""
    shape: tuple
    dtype: torch.dtype
    stride: tuple
    offset: int
    device: str  # device type: "cuda" | "cpu" | ...

    @staticmethod
    def of(t: torch.Tensor) -> "TensorMeta":
        return TensorMeta(tuple(int(s) for s in t.shape), t.dtype, tuple(int(s) for s in t.stride()),
                          int(t.storage_offset()), t.device.type)

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


class Slot:
    """A tensor's place in a recorded argument structure: the index in the call's flat tensor list."""
    __slots__ = ("index", "is_out")

    def __init__(self, index: int, is_out: bool = False):
        self.index, self.is_out = index, is_out


@dataclass
class FlatArg:
    """One tensor argument of a call, in the order of the schema (list elements in order)."""
    name: str  # run() parameter name: the schema argument name, `_<i>` appended for list elements
    tensor: torch.Tensor
    mutated: bool  # the schema says the op writes this argument (in-place self, out=)
    is_out: bool   # a kwarg-only out= buffer: its old contents are not an input


def flatten_call(func, args: tuple, kwargs: dict):
    """The tensor arguments of a call and the call's argument structure with tensors replaced by Slots.

    Returns (flat, struct_args, struct_kwargs, unsupported) where unsupported is None or the reason a
    non-tensor argument cannot be written down as a constant."""
    schema = func._schema
    written = {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}
    kwarg_only = {a.name for a in schema.arguments if a.kwarg_only}
    flat: list[FlatArg] = []
    problems: list[str] = []

    def walk(value, name, top_name):
        if isinstance(value, torch.Tensor):
            is_out = top_name in written and top_name in kwarg_only
            flat.append(FlatArg(safe_name(name), value, top_name in written, is_out))
            return Slot(len(flat) - 1, is_out)
        if isinstance(value, (list, tuple)):
            items = [walk(v, f"{name}_{i}", top_name) for i, v in enumerate(value)]
            return items if isinstance(value, list) else tuple(items)
        if not _is_constant(value):
            problems.append(f"argument '{top_name}' of type {type(value).__name__}")
        return value

    names = [a.name for a in schema.arguments]
    struct_args = [walk(v, names[i] if i < len(names) else f"arg{i}", names[i] if i < len(names) else f"arg{i}")
                   for i, v in enumerate(args)]
    struct_kwargs = {k: walk(v, k, k) for k, v in kwargs.items()}
    return flat, struct_args, struct_kwargs, (problems[0] if problems else None)


def _is_constant(value) -> bool:
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype, torch.device, torch.layout,
                                            torch.memory_format)):
        return True
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    return False


def encode(value):
    """A hashable, device-index-free encoding of an argument structure for signatures."""
    if isinstance(value, torch.Tensor):
        m = TensorMeta.of(value)
        return ("T", m.shape, str(m.dtype), m.stride, m.device)
    if isinstance(value, Slot):
        return ("S", value.index)
    if isinstance(value, (list, tuple)):
        return ("L" if isinstance(value, list) else "U", tuple(encode(v) for v in value))
    if isinstance(value, dict):
        return ("D", tuple((k, encode(v)) for k, v in value.items()))
    if isinstance(value, torch.device):
        return ("dev", value.type)
    if isinstance(value, float):
        return ("f", repr(value))
    if isinstance(value, (torch.SymInt,)):
        return ("i", int(value))
    if value is None or isinstance(value, (bool, int, str)):
        return (type(value).__name__, value)
    return _opaque(value)


# Argument types whose str() is short and says all there is to them.
_TEXT_TYPES = (torch.dtype, torch.layout, torch.memory_format, torch.SymFloat, torch.SymBool)


def _opaque(value) -> tuple:
    """Any other argument as a short tuple. Never str() of an arbitrary object: str() of a storage (the
    argument of the set_ that torch.load and safetensors call for every tensor) renders every byte of
    it and, under the profiler, records an op per byte: a 1 MB checkpoint grew capture to 24 GB."""
    if isinstance(value, _TEXT_TYPES):
        return (type(value).__name__, str(value))
    if isinstance(value, (torch.UntypedStorage, torch.TypedStorage)):
        return ("storage", int(value.nbytes()))
    return (type(value).__name__,)


def grad_mode_now() -> str:
    if torch.is_inference_mode_enabled():
        return "inference"
    return "grad" if torch.is_grad_enabled() else "no_grad"


def dispatch_form(op, args: tuple, kwargs: dict) -> tuple:
    """(args, kwargs) of a Python call of op as the dispatcher hands them to a dispatch mode or a kernel:
    the positional parameters positionally, trailing ones left out where they equal their default, and
    the keyword-only ones as keywords where they differ from it. The gates compare calls in this form."""
    pos, kw = list(args), dict(kwargs)
    params = op._schema.arguments
    out, defaults = [], []
    for i, a in enumerate(params):
        if a.kwarg_only:
            break
        if i < len(pos):
            v = pos[i]
        elif a.name in kw:
            v = kw.pop(a.name)
        elif a.has_default_value():
            v = a.default_value
        else:
            raise TypeError(f"{op}: missing argument {a.name}")
        out.append(v)
        defaults.append((a.has_default_value(), a.default_value if a.has_default_value() else None))
    if len(pos) > len(out):
        raise TypeError(f"{op}: {len(pos)} positional arguments, it takes {len(out)}")
    while out and defaults[-1][0] and not isinstance(out[-1], torch.Tensor) and out[-1] == defaults[-1][1]:
        out.pop()
        defaults.pop()
    only = {}
    for a in params:
        if a.kwarg_only and a.name in kw:
            v = kw.pop(a.name)
            if isinstance(v, torch.Tensor) or not a.has_default_value() or v != a.default_value:
                only[a.name] = v
    if kw:
        raise TypeError(f"{op}: no parameters {sorted(kw)}")
    return tuple(out), only


def flat_tensors(value) -> list:
    """Every tensor in a (possibly nested) op output, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        out = []
        for v in value:
            out.extend(flat_tensors(v))
        return out
    return []


@dataclass
class TensorInfo:
    """One tensor value of the graph (a version of the data: an in-place write makes a new value)."""
    tid: int
    producer: int  # op index that produced it; -1 for graph inputs
    origin: str    # "op" | "parameter" | "buffer" | "input" | "alloc"
    name: Optional[str]
    meta: TensorMeta
    data_ptr: int = 0  # where the value lived: a tensor whose data was swapped (param.data = ...) is new


@dataclass
class OpRecord:
    """One non-metadata aten call."""
    index: int
    func: Any
    key: tuple                 # the signature the call is grouped by
    in_scope: bool
    frame_id: Optional[int]    # innermost module call, or None
    module_path: str
    module_class: str
    pass_index: int
    grad_mode: str
    inputs: list               # [(arg name, tid, TensorMeta)]
    outputs: list              # [(tid, TensorMeta)]
    args_json: Any
    no_problem: Optional[str]  # why this signature cannot be a problem (None: it can)


@dataclass
class Sample:
    """The held first call of a signature: its structure, its inputs before and its outputs after."""
    func: Any
    flat_names: list
    flat_is_out: list
    flat_mutated: list
    struct_args: list
    struct_kwargs: dict
    inputs: list          # Stored per flat arg (None for out= buffers)
    outputs: list         # Stored per tensor output (in flat order)
    output_struct: Any    # encode() of the return structure, for naming
    grad_mode: str
    nbytes: int
    out_buffers: dict = field(default_factory=dict)  # flat index -> TensorMeta of out= buffers
    call_index: int = -1  # the OpRecord index of the held call


@dataclass
class Frame:
    """One call of a module forward."""
    call_id: int
    module: Any
    path: str
    cls: str
    is_leaf: bool
    op_indices: list = field(default_factory=list)  # non-metadata ops run while this frame was on the stack
    trace: Any = None  # ModuleTrace for leaf modules being traced


class ModuleTrace:
    """A straight-line record of one leaf-module call: inputs (external tensors in first-use order, with
    copies when sampling), one line per aten call with variables for tensors, and the outputs."""

    def __init__(self, frame: Frame, sample: bool, local_params: dict):
        self.frame = frame
        self.sample = sample
        self.local_params = local_params  # id(tensor) -> attribute name of the module's own params/buffers
        self.vars = WeakIdKeyDictionary()
        self.inputs: list = []  # [(var, TensorMeta, Stored or None, origin)]
        # [(func, struct_args, struct_kwargs, out_names, out_dtypes)]: out_dtypes mirrors out_names
        # with kiln's dtype names (None where kiln has no such dtype)
        self.lines: list = []
        self.mutated_inputs: set = set()
        self.ok = True
        self.reason: Optional[str] = None
        self.n_real = 0
        self.n_vars = 0
        self.nbytes = 0
        self.outputs: list = []  # [(var, Stored or None, TensorMeta)]
        # id(tensor) -> its position among the forward's positional arguments (set by the recorder), and
        # the activations found there: what puts a module's tensors back in their slots at install
        self.arg_positions: dict = {}
        self.activation_args: dict = {}
        self.op_keys: list = []
        self.grad_mode = grad_mode_now()
        self.approx: tuple = ()

    def fail(self, reason: str) -> None:
        if self.ok:
            self.ok, self.reason = False, reason
            self.lines = []

    def var_for_input(self, t: torch.Tensor, recorder: "Recorder") -> str:
        name = self.vars.get(t)
        if name is not None:
            return name
        pname = self.local_params.get(id(t))
        used = {v for v, *_ in self.inputs}
        if pname is not None:
            name = safe_name(pname)
            origin = "parameter"
        else:
            name = f"input{sum(1 for *_, o in self.inputs if o == 'activation')}"
            origin = "activation"
        while name in used:
            name += "_"
        if origin == "activation" and id(t) in self.arg_positions:
            self.activation_args[name] = self.arg_positions[id(t)]
        stored = None
        if self.sample:
            stored = recorder.hold(t, full=self.nbytes + t.numel() * t.element_size() <= recorder.max_sample_bytes)
            if stored is None:
                self.fail(recorder.last_hold_failure or "tensors not held")
                return name
            self.nbytes += stored.nbytes
        self.inputs.append((name, TensorMeta.of(t), stored, origin))
        self.vars[t] = name
        return name

    def before(self, func, args, kwargs, recorder: "Recorder"):
        """Maps the call's tensors to variables (new inputs are copied now, before a possible write)."""
        if not self.ok:
            return None
        reason = _not_fusible(func)
        if reason:  # decided before any input is copied
            self.fail(reason)
            return None

        def walk(value):
            if isinstance(value, torch.Tensor):
                return _Var(self.var_for_input(value, recorder))
            if isinstance(value, (list, tuple)):
                items = [walk(v) for v in value]
                return items if isinstance(value, list) else tuple(items)
            return value

        struct = ([walk(a) for a in args], {k: walk(v) for k, v in kwargs.items()})
        if not self.ok:
            return None
        written = [a.name for a in func._schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        for i, a in enumerate(func._schema.arguments):
            if a.name in written:
                value = args[i] if i < len(args) else kwargs.get(a.name)
                for t in flat_tensors(value):
                    var = self.vars.get(t)
                    if var is not None and any(var == v for v, *_ in self.inputs):
                        self.mutated_inputs.add(var)
        return struct

    def after(self, func, struct, out, is_meta: bool, key) -> None:
        if not self.ok or struct is None:
            return
        if not is_meta:
            self.n_real += 1
            self.op_keys.append(key)
        if isinstance(out, torch.Tensor):
            names: Any = self._new_var(out)
            dtypes: Any = DTYPE_NAMES.get(out.dtype)
        elif isinstance(out, (list, tuple)) and all(isinstance(o, torch.Tensor) or o is None for o in out):
            names = [self._new_var(o) if isinstance(o, torch.Tensor) else None for o in out]
            dtypes = [DTYPE_NAMES.get(o.dtype) if isinstance(o, torch.Tensor) else None for o in out]
        elif out is None:
            names = dtypes = None
        else:
            return self.fail(f"{op_label(func)} returns {type(out).__name__}")
        self.lines.append((func, struct[0], struct[1], names, dtypes))

    def _new_var(self, t: torch.Tensor) -> str:
        name = f"v{self.n_vars}"
        self.n_vars += 1
        self.vars[t] = name
        return name


def _dropout_off(func, args, kwargs) -> bool:
    """A seeded op whose only randomness is its dropout, called with dropout_p 0 (the attention ops SDPA
    dispatches to, at inference): it computes the same every time, so it can be a problem."""
    names = [a.name for a in func._schema.arguments]
    if "dropout_p" not in names:
        return False
    i = names.index("dropout_p")
    p = kwargs.get("dropout_p", args[i] if i < len(args) else func._schema.arguments[i].default_value)
    return isinstance(p, (int, float)) and p == 0


def _not_fusible(func) -> Optional[str]:
    """Why a call cannot be part of a fused module-level problem (None: it can)."""
    if func.namespace != "aten":
        return f"calls {op_label(func)} (not an aten op)"
    tags = func.tags
    if torch.Tag.nondeterministic_seeded in tags and not func.is_view:
        return f"calls {op_label(func)} (random)"
    name = op_short(func)
    if name in NOT_FUSIBLE_OP_NAMES:
        return f"calls {op_label(func)} (not pointwise/reduction)"
    if torch.Tag.pointwise in tags or torch.Tag.reduction in tags or name in FUSIBLE_OP_NAMES \
            or name in META_OP_NAMES or func.is_view:
        return None
    return f"calls {op_label(func)} (not pointwise/reduction)"


class _Var:
    """A variable reference in a module trace's argument structure."""
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


class Recorder:
    """All state of one capture. `mode()` is the dispatch mode; `install_hooks()` the module hooks."""

    def __init__(self, device: str, spool: Spool, hold_cap_bytes: int, provisional_cap_bytes: int,
                 max_sample_bytes: int, slice_bytes: int):
        self.device = device
        self.spool = spool
        self.hold_cap = hold_cap_bytes  # bytes in the spool at most
        self.max_sample_bytes = max_sample_bytes  # a call whose tensors exceed this is not copied whole
        self.slice_bytes = slice_bytes  # an input bigger than this is summarised, with a slice this big
        self.provisional_cap = provisional_cap_bytes
        self.ops: list[OpRecord] = []
        self.n_calls = 0           # every dispatched call, metadata included
        self.container_depth = 0   # > 0 inside a CONTAINER_OP_NAMES call: its inner calls are recorded
        self.n_meta = 0
        self.tensors: list[TensorInfo] = []
        self.tid_of = WeakIdKeyDictionary()  # tensor object -> tid
        self.storage_writes: dict[int, tuple] = {}  # storage data_ptr -> (StorageWeakRef, op index, tid)
        self.samples: dict[tuple, Sample] = {}
        self.provisional: dict[tuple, Sample] = {}
        self.not_held: dict[tuple, str] = {}
        self.held_bytes = 0
        self.provisional_bytes = 0
        self.holding_disabled: Optional[str] = None
        self.last_hold_failure: Optional[str] = None
        self.no_problem: dict[tuple, Optional[str]] = {}
        # modules
        self.stack: list[Frame] = []
        self.n_frames = 0
        self.seen_forward = False
        self.n_passes = 0
        self.roots: list = []  # weakrefs of root modules, in order of first call
        self.module_names: dict[int, tuple] = {}  # id(module) -> (weakref, path)
        self.param_names: dict[int, tuple] = {}   # id(tensor) -> (weakref, name, kind)
        self.module_verdicts: dict[tuple, Optional[str]] = {}  # approx key -> None (fusible) | reason
        self.module_groups: dict[tuple, dict] = {}
        self.internal_errors: list[str] = []
        self.hooks: list = []
        self.tid_names: dict[int, tuple] = {}  # tid -> (name, "parameter"|"buffer") of a root's tensors

    # ---- bookkeeping helpers ------------------------------------------------------------------------

    def internal_error(self, where: str) -> None:
        if len(self.internal_errors) < 20:
            self.internal_errors.append(f"{where}: {traceback.format_exc(limit=3).strip().splitlines()[-1]}")

    def new_tid(self, producer: int, origin: str, meta: TensorMeta, name: Optional[str] = None,
                data_ptr: int = 0) -> int:
        tid = len(self.tensors)
        self.tensors.append(TensorInfo(tid, producer, origin, name, meta, data_ptr))
        return tid

    def bind(self, t: torch.Tensor, tid: int) -> None:
        self.tid_of[t] = tid
        self.tensors[tid].data_ptr = _storage_ptr(t)

    def tid_for_input(self, t: torch.Tensor) -> int:
        """The value id a call reads from t: the producer of t, or a later in-place write into t's storage
        (a write through another view), or a new graph input."""
        tid = self.tid_of.get(t)
        if tid is not None:
            info = self.tensors[tid]
            if info.data_ptr != _storage_ptr(t):
                tid = None  # the object now holds other data (param.data = ..., set_())
        if tid is None:
            origin, name = "input", None
            entry = self.param_names.get(id(t))
            if entry is not None and entry[0]() is t:
                name, origin = entry[1], entry[2]
            tid = self.new_tid(-1, origin, TensorMeta.of(t), name)
            self.bind(t, tid)
        ptr = _storage_ptr(t)
        write = self.storage_writes.get(ptr) if ptr else None
        if write is not None:
            ref, op_index, wtid = write
            if ref.expired() or ref.cdata != t.untyped_storage()._cdata:
                del self.storage_writes[ptr]
            elif op_index > self.tensors[tid].producer and wtid != tid:
                return wtid
        return tid

    def hold(self, t: torch.Tensor, full: bool = True, summary: bool = True) -> Optional[Stored]:
        """What capture keeps of t (see the module docstring): its layout; a full copy in the spool when
        full and the caps allow (its leading elements are then its slice, and its summary is made from the
        copy only if the problem is written with it drawn); else, with summary, its summary and a leading
        slice, measured now on t's device. None (and last_hold_failure) when t could be neither copied nor
        summarised."""
        self.last_hold_failure = None
        stored, view = layout_of(t)
        provisional = not self.seen_forward
        if full and not self.holding_disabled:
            if provisional and self.provisional_bytes + stored.nbytes > self.provisional_cap:
                self.last_hold_failure = "provisional pool full"
            elif self.held_bytes + stored.nbytes > self.hold_cap:
                self.last_hold_failure = (f"spool cap reached ({_fmt_bytes(self.hold_cap)} kept; "
                                          f"raise --max-bytes)")
            else:
                stored.path = self._spool_copy(view)
        elif self.holding_disabled:
            self.last_hold_failure = self.holding_disabled
        if stored.path is not None:
            stored.slice_path = stored.path
            stored.slice_elements = leading_count(stored.data_shape, stored.dtype.itemsize, self.slice_bytes)
        elif summary:
            try:
                self._summarize(stored, view)
            except (torch.OutOfMemoryError, MemoryError, RuntimeError, OSError, StatsError) as e:
                if isinstance(e, RuntimeError) and not isinstance(e, torch.OutOfMemoryError) \
                        and "out of memory" not in str(e).lower():
                    raise
                Spool.remove(stored.slice_path)
                stored.summary, stored.slice_path, stored.slice_elements = None, None, 0
                if stored.path is None:
                    self.last_hold_failure = f"cannot summarise it ({type(e).__name__}: {str(e)[:120]})"
                    return None
        if provisional:
            self.provisional_bytes += stored.spooled_bytes
        self.held_bytes += stored.spooled_bytes
        return stored

    def _spool_copy(self, view: torch.Tensor) -> Optional[str]:
        try:
            return self.spool.put(view)
        except (torch.OutOfMemoryError, MemoryError, RuntimeError, OSError) as e:
            if isinstance(e, RuntimeError) and not isinstance(e, torch.OutOfMemoryError) \
                    and "out of memory" not in str(e).lower():
                raise
            what = "disk full" if isinstance(e, OSError) else "memory exhausted"
            self.holding_disabled = (f"{what} while copying tensors ({type(e).__name__}); later tensors "
                                     f"are kept as statistics and a slice")
            self.last_hold_failure = self.holding_disabled
            return None

    def _summarize(self, stored: Stored, view: torch.Tensor) -> None:
        """stored.summary and slice, measured on view's device."""
        dense = view if view.is_contiguous() else view.contiguous()
        stored.summary = summarize(dense)
        piece = leading_slice(dense, self.slice_bytes)
        stored.slice_path = self.spool.put(piece, ".slice")
        stored.slice_elements = piece.numel()

    # ---- the dispatch mode --------------------------------------------------------------------------

    @contextlib.contextmanager
    def mode(self):
        """The dispatch mode, with COMPOSITE_FUNCTIONS replaced by wrappers that record them whole."""
        saved = []
        try:
            for (module, name), op in COMPOSITE_FUNCTIONS.items():
                original = getattr(module, name)
                # Tensor.matmul and __matmul__ are inherited from the C base: restored by deleting the wrapper
                saved.append((module, name, original, name in vars(module)))
                setattr(module, name, self._composite_wrapper(original, op))
            with _CaptureMode(self):
                yield
        finally:
            for module, name, original, own in saved:
                if own:
                    setattr(module, name, original)
                else:
                    delattr(module, name)

    def _composite_wrapper(self, func, op):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            return self.on_composite(func, op, args, kwargs)
        return wrapper

    def on_composite(self, func, op, args, kwargs):
        """A COMPOSITE_FUNCTIONS call (func, its aten op): recorded as one call of op where no gradient is
        needed; else func runs as it is and its decomposition is recorded call by call."""
        try:
            tensors = flat_tensors((args, kwargs))
            whole = not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))
        except Exception:
            self.internal_error(f"looking at {func}")
            whole = False
        if not whole:
            return func(*args, **kwargs)
        try:
            args, kwargs = dispatch_form(op, args, kwargs)
            if any(a.type.kind() == "TensorType" and not isinstance(v, torch.Tensor)
                   for a, v in zip(op._schema.arguments, args)):
                raise TypeError  # `tensor @ array`: func's answer (NotImplemented, then the array's __rmatmul__)
        except Exception:  # arguments the op does not take: the script's own error, from func
            return func(*args, **kwargs)
        # as in __torch_dispatch__: kiln's own work (and the calls the composite decomposes into) is not
        # the script's; the dispatch mode is off until the call is recorded
        with _disable_current_modes():
            return self.on_call(op, args, kwargs)

    def on_call(self, func, args, kwargs):
        index = self.n_calls
        self.n_calls += 1
        pre = None
        try:
            pre = self._before(index, func, args, kwargs)
        except Exception:
            self.internal_error(f"before {func}")
        out, ran = None, False
        try:
            keys = self._container_keys(func, args, kwargs)
        except Exception:
            self.internal_error(f"looking inside {func}")
            keys = None
        if keys is not None:
            try:
                out, ran = self._run_container(func, keys, args, kwargs), True
            except Exception:  # the op's own error comes again from the plain call below
                self.internal_error(f"looking inside {func}")
        if not ran:
            with record_function(f"kiln#{index}"):
                out = func(*args, **kwargs)
        try:
            self._after(index, func, args, kwargs, out, pre)
        except Exception:
            self.internal_error(f"after {func}")
        return out

    def _container_keys(self, func, args, kwargs):
        """The backend dispatch key set to run func's own kernel with, where func is a container op
        (CONTAINER_OP_NAMES) on cpu or cuda tensors that need no gradient; else None (an ordinary call)."""
        if op_short(func) not in CONTAINER_OP_NAMES:
            return None
        tensors = flat_tensors((args, kwargs))
        devices = {t.device.type for t in tensors}
        if len(devices) != 1 or not devices <= {"cpu", "cuda"}:
            return None
        if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
            return None  # the redispatch skips autograd: only where none is needed
        key = torch._C.DispatchKey.CUDA if devices == {"cuda"} else torch._C.DispatchKey.CPU
        return torch._C.DispatchKeySet(key)

    def _run_container(self, func, keys, args, kwargs):
        """func's backend kernel with this recorder's mode pushed again: its inner calls come back to
        on_call. The container itself gets no kiln# range (its time is its inner calls')."""
        self.container_depth += 1
        try:
            with _CaptureMode(self):
                return func.redispatch(keys, *args, **kwargs)
        finally:
            self.container_depth -= 1

    def _before(self, index, func, args, kwargs):
        frame = self.stack[-1] if self.stack else None
        in_scope = frame is not None or not self.seen_forward
        flat, sargs, skwargs, unsupported = flatten_call(func, args, kwargs)
        key = (op_label(func), encode(sargs), encode(skwargs),
               tuple(encode(f.tensor) for f in flat), grad_mode_now())
        # a module's trace records a container as one call, not the calls inside it
        traces = [] if self.container_depth else [
            f.trace for f in self.stack if f.trace is not None and f.trace.ok]
        trace_structs = [(tr, tr.before(func, args, kwargs, self)) for tr in traces]
        name = op_short(func)
        maybe_alias = func.is_view or torch.Tag.maybe_aliasing_or_mutating in func.tags
        sample = None
        want = (in_scope and name not in META_OP_NAMES and key not in self.samples
                and key not in self.not_held and not (not self.seen_forward and key in self.provisional))
        if want:
            reason = self._problem_reason(func, flat, unsupported, args, kwargs)
            self.no_problem.setdefault(key, reason)
            if reason is None and not maybe_alias:
                sample = self._hold_inputs(func, flat, sargs, skwargs, key)
        return (key, flat, sargs, skwargs, unsupported, sample, trace_structs, maybe_alias, in_scope, frame)

    def _problem_reason(self, func, flat, unsupported, args=(), kwargs=None) -> Optional[str]:
        name = op_short(func)
        if func.namespace != "aten":
            return f"not an aten op ({func.namespace})"
        if name in CONTAINER_OP_NAMES and self._container_keys(func, args, kwargs or {}) is not None:
            return CONTAINER_REASON
        if name in CREATION_OP_NAMES:
            return "creates or fills a tensor from constants"
        if torch.Tag.nondeterministic_seeded in func.tags and not _dropout_off(func, args, kwargs or {}):
            return "random op"
        if torch.Tag.dynamic_output_shape in func.tags or torch.Tag.data_dependent_output in func.tags or \
                (name, func._overloadname) in DATA_DEPENDENT_UNTAGGED:
            # integer indexing is a gather with a fixed output shape; boolean masks are not
            gather = name in ("index", "_unsafe_index") and all(
                not (f.tensor.dtype in (torch.bool, torch.uint8)) for f in flat)
            if not gather:
                return "output shape or value is data-dependent"
        if unsupported:
            return f"cannot write {unsupported} as a constant"
        ins = [f for f in flat if not f.is_out]
        if not ins:
            return "no tensor inputs"
        devices = {f.tensor.device.type for f in flat}
        if len(devices) > 1:
            return "moves data between devices"
        if devices != {self.device}:
            return f"runs on {next(iter(devices))}, not on the capture device {self.device}"
        from kiln.capture_problem import DTYPE_NAMES
        for f in flat:
            if f.tensor.layout != torch.strided:
                return f"a {f.tensor.layout} tensor (problems are dense)"
            if f.tensor.dtype not in DTYPE_NAMES:
                return f"dtype {f.tensor.dtype} is not in the problem schema"
        return None

    def _hold_inputs(self, func, flat, sargs, skwargs, key) -> Optional[Sample]:
        need = sum(TensorMeta.of(f.tensor).nbytes for f in flat if not f.is_out)
        full = need <= self.max_sample_bytes  # else: summaries and slices only
        stored, nbytes, out_buffers = [], 0, {}
        for i, f in enumerate(flat):
            if f.is_out:
                stored.append(None)
                out_buffers[i] = TensorMeta.of(f.tensor)
                continue
            s = self.hold(f.tensor, full=full)
            if s is None:
                self._release(stored)
                self.not_held[key] = self.last_hold_failure or "not held"
                return None
            stored.append(s)
            nbytes += s.nbytes
        return Sample(func, [f.name for f in flat], [f.is_out for f in flat], [f.mutated for f in flat],
                      sargs, skwargs, stored, [], None, grad_mode_now(), nbytes, out_buffers)

    def _release(self, stored) -> None:
        """Forgets what was kept of these tensors (their spool files go)."""
        for s in stored:
            if s is not None:
                self._drop_copies(s)

    def _drop_copies(self, s: Stored) -> None:
        n = s.spooled_bytes
        Spool.remove(s.path)
        Spool.remove(s.slice_path)
        s.path, s.slice_path, s.slice_elements, s.summary = None, None, 0, None
        self.held_bytes -= n
        if not self.seen_forward:
            self.provisional_bytes -= n

    def _after(self, index, func, args, kwargs, out, pre):
        if pre is None:
            return
        key, flat, sargs, skwargs, unsupported, sample, trace_structs, maybe_alias, in_scope, frame = pre
        outs = flat_tensors(out)
        name = op_short(func)
        mutating = any(f.mutated for f in flat)
        is_meta = name in META_OP_NAMES
        if not is_meta and not mutating and outs:
            in_ptrs = {_storage_ptr(f.tensor) for f in flat} - {0}
            is_meta = all(o.numel() == 0 or _storage_ptr(o) in in_ptrs for o in outs)
        for tr, struct in trace_structs:
            tr.after(func, struct, out, is_meta, key)
        if is_meta:
            self.n_meta += 1
            self._alias_outputs(func, flat, outs)
            if sample is not None:
                self._release(sample.inputs)
            return
        # a real op
        if sample is None and maybe_alias and in_scope and self.no_problem.get(key, "x") is None \
                and key not in self.samples and key not in self.not_held:
            sample = self._hold_inputs(func, flat, sargs, skwargs, key)  # nothing was written: safe after
        inputs = []
        for f in flat:
            if f.is_out:
                continue
            inputs.append((f.name, self.tid_for_input(f.tensor), TensorMeta.of(f.tensor)))
        outputs = []
        for o in outs:
            meta = TensorMeta.of(o)
            tid = self.new_tid(index, "op", meta)
            self.bind(o, tid)
            outputs.append((tid, meta))
        for f in flat:
            if f.mutated:
                tid = next((outputs[k][0] for k, o in enumerate(outs) if o is f.tensor), None)
                if tid is None:  # written but not returned (e.g. running statistics)
                    tid = self.new_tid(index, "op", TensorMeta.of(f.tensor))
                    self.bind(f.tensor, tid)
                try:
                    st = f.tensor.untyped_storage()
                    self.storage_writes[st.data_ptr()] = (StorageWeakRef(st), index, tid)
                except Exception:
                    pass
        if sample is not None:
            # outputs are copied whole only when every input was and everything fits in --max-bytes;
            # otherwise only their layout is kept (the reference computes them where the gate runs)
            need = sample.nbytes + sum(o.numel() * o.element_size() for o in outs)
            full = need <= self.max_sample_bytes and all(s is None or s.held for s in sample.inputs)
            outs_stored = [self.hold(o, full=full, summary=False) for o in outs]
            if any(s is None for s in outs_stored):
                self._release(sample.inputs)
                self._release(outs_stored)
                self.not_held[key] = self.last_hold_failure or "not held"
                sample = None
            if sample is not None:
                sample.outputs = outs_stored
                sample.output_struct = encode(_structure(out))
                sample.nbytes += sum(s.nbytes for s in outs_stored)
                sample.call_index = index
                (self.samples if self.seen_forward else self.provisional)[key] = sample
        path, cls = (frame.path, frame.cls) if frame is not None else ("", "")
        rec = OpRecord(index, func, key, in_scope, frame.call_id if frame else None, path, cls,
                       max(self.n_passes - 1, 0), key[-1], inputs, outputs, _args_json(sargs, skwargs),
                       self.no_problem.get(key))
        self.ops.append(rec)
        if self.container_depth:
            return  # inside a container: the traces have the container's call instead
        for fr in self.stack:
            if fr.trace is not None:
                fr.op_indices.append(len(self.ops) - 1)

    def _alias_outputs(self, func, flat, outs) -> None:
        """Metadata calls: an output that aliases an input is the same value for the graph."""
        by_ptr = {}
        for f in flat:
            p = _storage_ptr(f.tensor)
            if p is not None and p not in by_ptr:
                by_ptr[p] = f.tensor
        for o in outs:
            base = by_ptr.get(_storage_ptr(o))
            if base is not None:
                self.tid_of[o] = self.tid_for_input(base)  # a view: same value, other data_ptr is fine
            elif o not in self.tid_of:
                self.bind(o, self.new_tid(-1, "alloc", TensorMeta.of(o), op_label(func)))

    # ---- module hooks -------------------------------------------------------------------------------

    def install_hooks(self) -> None:
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
        self.hooks = [register_module_forward_pre_hook(self._pre_hook),
                      register_module_forward_hook(self._post_hook)]

    def remove_hooks(self) -> None:
        for h in self.hooks:
            h.remove()
        self.hooks = []

    def _pre_hook(self, module, args):
        try:
            with _disable_current_modes():  # kiln's own tensor work is not the script's
                self._enter(module, args)
        except Exception:
            self.internal_error(f"pre-hook {type(module).__name__}")

    def _post_hook(self, module, args, output):
        try:
            with _disable_current_modes():
                self._leave(module, output)
        except Exception:
            self.internal_error(f"post-hook {type(module).__name__}")

    def _register_root(self, module) -> None:
        if any(r() is module for r in self.roots):
            return
        prefix = "" if not self.roots else f"{type(module).__name__}#{len(self.roots)}:"
        self.roots.append(weakref.ref(module))
        for name, m in module.named_modules(remove_duplicate=False):
            if id(m) not in self.module_names:
                self.module_names[id(m)] = (weakref.ref(m), prefix + name)
        for kind, items in (("parameter", module.named_parameters(remove_duplicate=False)),
                            ("buffer", module.named_buffers(remove_duplicate=False))):
            for name, t in items:
                if id(t) not in self.param_names:
                    self.param_names[id(t)] = (weakref.ref(t), prefix + name, kind)
                    tid = self.tid_of.get(t)
                    if tid is not None and self.tensors[tid].data_ptr == _storage_ptr(t):
                        # made before the forward (initialisation, .to()): still the model's parameter
                        self.tid_names[tid] = (prefix + name, kind)

    def _path_of(self, module) -> str:
        entry = self.module_names.get(id(module))
        if entry is not None and entry[0]() is module:
            return entry[1]
        parent = self.stack[-1].path if self.stack else ""
        return f"{parent}.({type(module).__name__})" if parent else f"({type(module).__name__})"

    def _enter(self, module, args) -> None:
        if not self.stack:
            if not self.seen_forward:
                self.seen_forward = True
                for sample in self.provisional.values():  # pre-forward work (construction, .to())
                    for st in sample.inputs + sample.outputs:  # is not the model
                        if st is not None:
                            Spool.remove(st.path)
                            Spool.remove(st.slice_path)
                self.provisional.clear()
                self.held_bytes -= self.provisional_bytes
                self.provisional_bytes = 0
            self.n_passes += 1
            self._register_root(module)
        is_leaf = len(module._modules) == 0
        frame = Frame(self.n_frames, module, self._path_of(module), type(module).__name__, is_leaf)
        self.n_frames += 1
        if is_leaf and not any(f.trace is not None for f in self.stack):
            approx = _approx_module_key(module, args)
            verdict_known = approx in self.module_verdicts
            if not verdict_known or self.module_verdicts[approx] is None:
                local = {}
                for n, p in module.named_parameters(recurse=False):
                    local[id(p)] = n
                for n, b in module.named_buffers(recurse=False):
                    local[id(b)] = n
                frame.trace = ModuleTrace(frame, sample=not verdict_known, local_params=local)
                frame.trace.approx = approx
                frame.trace.arg_positions = {id(a): i for i, a in enumerate(args) if isinstance(a, torch.Tensor)}
        self.stack.append(frame)

    def _leave(self, module, output) -> None:
        if not self.stack:
            return
        # pop to the matching frame (a forward that raised leaves stale frames behind)
        while self.stack and self.stack[-1].module is not module:
            self.stack.pop()
        if not self.stack:
            return
        frame = self.stack.pop()
        tr = frame.trace
        if tr is None:
            return
        approx = tr.approx
        if tr.ok and tr.n_real < 2:
            tr.fail("fewer than 2 aten ops")
        if tr.ok:
            self._finish_trace(tr, output)
        if not tr.ok:
            self.module_verdicts.setdefault(approx, tr.reason)
            if tr.sample:
                self._release_trace(tr)
            frame.trace = None
            return
        self.module_verdicts.setdefault(approx, None)
        key = (frame.cls, tuple(tr.op_keys))
        group = self.module_groups.get(key)
        if group is None:
            group = self.module_groups[key] = {"cls": frame.cls, "frames": [], "trace": None}
        if tr.sample and group["trace"] is None:
            group["trace"] = tr
        elif tr.sample:
            self._release_trace(tr)
        group["frames"].append((frame.path, list(frame.op_indices)))
        if group["trace"] is not tr:
            frame.trace = None

    def _finish_trace(self, tr: ModuleTrace, output) -> None:
        from kiln.capture_problem import DTYPE_NAMES
        outs = flat_tensors(output) if not isinstance(output, dict) else flat_tensors(list(output.values()))
        if not outs:
            return tr.fail("returns no tensors")
        for meta in [m for _, m, _, _ in tr.inputs] + [TensorMeta.of(o) for o in outs]:
            if meta.device != self.device:
                return tr.fail(f"runs on {meta.device}, not on the capture device {self.device}")
            if meta.dtype not in DTYPE_NAMES:
                return tr.fail(f"dtype {meta.dtype} is not in the problem schema")
        if any(o.layout != torch.strided for o in outs):
            return tr.fail("returns a tensor that is not dense")
        for o in outs:
            var = tr.vars.get(o)
            if var is None:
                return tr.fail("returns a tensor it did not compute")
            stored = None
            if tr.sample:
                nbytes = o.numel() * o.element_size()
                full = tr.nbytes + nbytes <= self.max_sample_bytes and all(s.held for _, _, s, _ in tr.inputs)
                stored = self.hold(o, full=full, summary=False)
                if stored is None:
                    return tr.fail(self.last_hold_failure or "tensors not held")
                tr.nbytes += stored.nbytes
            tr.outputs.append((var, stored, TensorMeta.of(o)))

    def _release_trace(self, tr: ModuleTrace) -> None:
        self._release([s for _, _, s, _ in tr.inputs] + [s for _, s, _ in tr.outputs])


class _CaptureMode(TorchDispatchMode):
    def __init__(self, recorder: Recorder):
        super().__init__()
        self.recorder = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self.recorder.on_call(func, args, kwargs or {})


def _storage_ptr(t: torch.Tensor) -> int:
    """The address of t's storage (0 when it has none that can be read, e.g. a meta tensor)."""
    try:
        return int(t.untyped_storage().data_ptr())
    except Exception:
        return 0


def _structure(value):
    if isinstance(value, torch.Tensor):
        return "T"
    if isinstance(value, (list, tuple)):
        return [_structure(v) for v in value]
    return type(value).__name__


def _approx_module_key(module, args) -> tuple:
    metas = tuple(encode(a) for a in args if isinstance(a, torch.Tensor))
    params = tuple(encode(p) for p in module.parameters(recurse=False))
    return (type(module).__qualname__, metas, params, grad_mode_now())


def json_arg(v):
    """One argument of a recorded call as the JSON of kiln's op chains (src/formats/opchain.h): a
    tensor of a call is {"tensor": flat index}, a value of a module trace {"ref": name}; non-finite
    floats are the strings "inf", "-inf", "nan"; dtypes, devices and layouts their str()."""
    if isinstance(v, Slot):
        return {"tensor": v.index}
    if isinstance(v, _Var):
        return {"ref": v.name}
    if isinstance(v, (list, tuple)):
        return [json_arg(x) for x in v]
    if isinstance(v, float):
        return v if v == v and v not in (float("inf"), float("-inf")) else repr(v)
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, torch.SymInt):
        return int(v)
    if isinstance(v, (torch.device,) + _TEXT_TYPES):
        return str(v)
    return "<" + ":".join(str(x) for x in _opaque(v)) + ">"


def _args_json(sargs, skwargs):
    """The arguments of a captured call as JSON (tensors as {"tensor": flat index})."""
    return {"args": [json_arg(a) for a in sargs], "kwargs": {k: json_arg(v) for k, v in skwargs.items()}}


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
