"""Chains of memory-bound calls found from the captured op graph's producer->consumer edges, written as
problems of kind "chain" (docs/capture.md "Chain problems"), and the blocks that add matmuls to them: eager
attention around a softmax chain, and a GEMM with the epilogue cuBLASLt fuses after it."""

import copy
import functools
from dataclasses import dataclass, field
from typing import Optional

import torch

CHAIN_MAX_OPS = 32  # a chain stops growing here: the generator plans one kernel per chain
# A value read by more consumers than this, in more than one module call, is shared (a mask, rotary
# tables): the chains that read it take it as an input instead of one of them computing it.
SHARED_CONSUMERS = 2
SOFTMAX_NAMES = frozenset({"softmax", "_softmax"})
MATMUL_NAMES = frozenset({"matmul", "bmm"})
SCORE_NAMES = MATMUL_NAMES | {"baddbmm"}  # q.kT: baddbmm scales it and may add a mask (beta 1)
# GEMMs whose output cuBLASLt can put through an epilogue, and the activations it offers there
GEMM_NAMES = frozenset({"linear", "addmm", "mm", "matmul"})
EPILOGUE_ACTIVATIONS = frozenset({"relu", "gelu"})
# the activations of a gated pair's gate projection (GeGLU, SwiGLU): kiln_gemm_gated in src/gen/gemm_match.c
GATE_ACTIVATIONS = frozenset({"gelu", "silu"})


CONV_NAMES = frozenset({"convolution", "_convolution", "conv1d", "conv2d", "conv3d"})


def is_depthwise(op) -> bool:
    """A convolution with one input channel per group and as many groups as channels (weight [C, 1, k...]):
    memory-bound, a window in the generator's IR (src/gen/ir/rules.c conv), so it may join a chain with the
    norm and activation after it."""
    from kiln.capture_record import op_short
    metas = {name: meta for name, _, meta in op.inputs}
    args = op.args_json.get("args", []) if isinstance(op.args_json, dict) else []
    if op_short(op.func) not in CONV_NAMES or "input" not in metas or "weight" not in metas:
        return False
    x, w = metas["input"], metas["weight"]
    at = 8 if op_short(op.func).endswith("convolution") else 6
    groups = args[at] if len(args) > at else 1
    if at == 8 and (len(args) < 7 or args[6] is not False):
        return False  # transposed
    channels = x.shape[-len(w.shape) + 1] if len(x.shape) >= len(w.shape) - 1 else None
    return (len(w.shape) >= 3 and w.shape[1] == 1 and w.shape[0] == channels and groups == channels)


# In-place calls whose point is the storage they write (a cache slot, a buffer reset), not a value: never a
# chain's functional member.
WRITES_INTO = frozenset({"copy", "fill", "zero", "index_put", "index_add", "scatter", "scatter_add", "set"})


@functools.lru_cache(maxsize=None)  # asked for every member of every chain; the answer is the schema's
def functional_of(func):
    """The functional overload of an in-place aten call that writes its first argument alone and returns it
    (relu6_ -> relu6, hardtanh_ -> hardtanh, add_.Tensor -> add.Tensor), else None. Inside a chain such a
    call is its functional overload: the graph capture recorded gives the value it wrote a new id (readers
    after it read that id, readers before it the old one), so computing it apart is what the program did,
    and a torch.compile graph (functionalised) holds the functional call: torchvision's ReLU(inplace=True)
    after a BatchNorm joins the chain it ends."""
    args, rets = func._schema.arguments, func._schema.returns
    written = [a for a in args if a.alias_info is not None and a.alias_info.is_write]
    if not func._opname.endswith("_") or func._opname[:-1] in WRITES_INTO or len(written) != 1 \
            or written[0] is not args[0] or len(rets) != 1 or rets[0].alias_info is None \
            or not rets[0].alias_info.is_write:
        return None
    packet = getattr(torch.ops.aten, func._opname[:-1], None)
    other = getattr(packet, func._overloadname, None) if packet is not None else None
    if other is None or [(a.name, str(a.type)) for a in other._schema.arguments] != \
            [(a.name, str(a.type)) for a in args] or len(other._schema.returns) != 1 or \
            any(a.alias_info is not None for a in other._schema.arguments):
        return None
    return other


def member_func(op):
    """The overload a chain computes for call op: its functional one where op writes its input
    (functional_of), else its own."""
    return functional_of(op.func) or op.func


def is_member(op) -> bool:
    """Whether a call can be part of a chain: one that can be a problem (not a constant fill), memory-bound
    (the module-problem rule of capture_record, or a depthwise convolution), reading at least one tensor,
    writing none of its arguments but an in-place one that has a functional overload (functional_of)."""
    from kiln.capture_record import _not_fusible
    func = member_func(op)
    if op.no_problem is not None or not op.inputs or not op.outputs:
        return False
    if _not_fusible(func) is not None and not is_depthwise(op):
        return False
    if any(a.alias_info is not None and a.alias_info.is_write for a in func._schema.arguments):
        return False
    return all(r.type.kind() == "TensorType" for r in func._schema.returns)


def view_steps(src, dst) -> Optional[list]:
    """The aten views that turn a value with meta `src` (as its producer returned it) into the tensor a
    consumer read (`dst`): [] when it is the same, else [(op name, size or dims)]. Only views the
    generator follows on a computed value: dims of size 1 added or dropped, a permutation, an expansion.
    None for anything else (a slice, a reshape that merges or splits dims): the edge is not chained."""
    if dst.dtype != src.dtype or dst.offset != src.offset:
        return None
    if dst.shape == src.shape and dst.stride == src.stride:
        return []
    src_dims = [(s, st) for s, st in zip(src.shape, src.stride) if s != 1]
    target = [1 if (st == 0 and s != 1) else s for s, st in zip(dst.shape, dst.stride)]
    dst_dims = [(s, st) for s, st in zip(dst.shape, dst.stride) if s != 1 and st != 0]
    if sorted(src_dims) != sorted(dst_dims) or len(set(src_dims)) != len(src_dims):
        return None
    steps = []
    squeezed = [s for s, _ in src_dims]
    if list(src.shape) != squeezed:
        steps.append(("view", squeezed))
    perm = [src_dims.index(d) for d in dst_dims]
    if perm != sorted(perm):
        steps.append(("permute", perm))
    if [s for s, _ in dst_dims] != list(target):
        steps.append(("view", list(target)))
    if list(target) != list(dst.shape):
        steps.append(("expand", list(dst.shape)))
    return steps


class Graph:
    """The captured calls (capture's ops, model.json ids) with their producers and consumers."""

    def __init__(self, ops: list):
        self.ops = ops
        self.producer = {}   # tid -> (op id, output index)
        self.consumers = {}  # tid -> [op id]
        for i, op in enumerate(ops):
            for _, tid, _ in op.inputs:
                self.consumers.setdefault(tid, []).append(i)
            for k, (tid, _) in enumerate(op.outputs):
                self.producer[tid] = (i, k)
        self.member = [is_member(op) for op in ops]

    def producers_of(self, i: int) -> list:
        return [self.producer[tid][0] for _, tid, _ in self.ops[i].inputs if tid in self.producer]

    def edge_ok(self, c: int, k: int) -> Optional[int]:
        """The producer of input k of call c when the edge can be inside a chain, else None."""
        _, tid, meta = self.ops[c].inputs[k]
        if tid not in self.producer:
            return None
        p, j = self.producer[tid]
        if not (self.member[p] and self.member[c]):
            return None
        # a value carried from one forward pass to the next (a KV cache a decode step grows by cat) is state:
        # two passes never run as one graph, so a chain across them could never be replaced
        if self.ops[p].pass_index != self.ops[c].pass_index:
            return None
        readers = self.consumers.get(tid, [])
        if len(readers) > SHARED_CONSUMERS and len({self.ops[r].frame_id for r in readers}) > 1:
            return None
        if view_steps(self.ops[p].outputs[j][1], meta) is None:
            return None
        return p

    def views_ok(self, members: set) -> bool:
        """Every value read inside `members` from a member is read through views view_steps can write (an
        edge joins two chains, but the calls it brings along may read other members' values too)."""
        for c in members:
            for _, tid, meta in self.ops[c].inputs:
                p = self.producer.get(tid)
                if p is not None and p[0] in members and view_steps(self.ops[p[0]].outputs[p[1]][1], meta) is None:
                    return False
        return True

    def convex(self, members: set) -> bool:
        """No call outside `members` lies on a path from one member to another (the chain can run as one
        kernel where its first member runs)."""
        lo, hi = min(members), max(members)
        outside = set()
        for i in range(lo, hi + 1):
            feeds = self.producers_of(i)
            if i in members:
                if any(p in outside for p in feeds):
                    return False
            elif any(p in members or p in outside for p in feeds):
                outside.add(i)
        return True


def find_chains(ops: list) -> list:
    """Chains of memory-bound calls, each a sorted list of op ids (at least two): calls are joined along
    producer->consumer edges in call order while the joined set stays convex and within CHAIN_MAX_OPS.
    A value read outside its chain is one of the chain's outputs."""
    g = Graph(ops)
    chain_of = list(range(len(ops)))
    members = {i: {i} for i in range(len(ops))}
    for c in range(len(ops)):
        if not g.member[c]:
            continue
        for k in range(len(ops[c].inputs)):
            p = g.edge_ok(c, k)
            if p is None:
                continue
            a, b = chain_of[p], chain_of[c]
            if a == b or len(members[a]) + len(members[b]) > CHAIN_MAX_OPS:
                continue
            joined = members[a] | members[b]
            if not g.views_ok(joined) or not g.convex(joined):
                continue
            for i in members[b]:
                chain_of[i] = a
            members[a] = joined
            del members[b]
    return [sorted(m) for m in members.values() if len(m) >= 2]


def attention_block(g: Graph, chain: list) -> Optional[list]:
    """The eager attention block around a chain that holds a softmax: the matmul whose only reader is the
    chain (q.kT), and the matmul that reads the chain's one output as its first operand (with v). Calls of the
    chain that do not depend on q.kT (a mask computed from positions, joined because only this layer reads
    it: Gemma-4's full-attention layer) stay out: the block reads the mask they make, as it reads a mask made
    anywhere else. The block's op ids, or None."""
    names = [g.ops[i].func._opname for i in chain]
    if not any(n in SOFTMAX_NAMES for n in names):
        return None
    members = set(chain)
    heads = set()
    for i in chain:
        for _, tid, _ in g.ops[i].inputs:
            p = g.producer.get(tid, (None,))[0]
            if p is not None and p not in members and g.ops[p].func._opname in SCORE_NAMES \
                    and set(g.consumers[tid]) <= members:
                heads.add(p)
    if len(heads) != 1:
        return None
    spine = set(heads)  # the chain's calls downstream of q.kT, in call order
    for i in chain:
        if any(p in spine for p in g.producers_of(i)):
            spine.add(i)
    chain = [i for i in chain if i in spine]
    members = set(chain)
    if not any(g.ops[i].func._opname in SOFTMAX_NAMES for i in chain):
        return None
    outs = chain_outputs(g, chain)
    if len(outs) != 1:
        return None
    readers = g.consumers.get(outs[0], [])
    if len(readers) != 1 or g.ops[readers[0]].func._opname not in MATMUL_NAMES \
            or g.ops[readers[0]].inputs[0][1] != outs[0]:
        return None
    block = sorted(members | heads | {readers[0]} | set(_upcasts(g, next(iter(heads)))))
    return block if g.convex(set(block)) else None


def _upcasts(g: Graph, head: int) -> list:
    """The casts of 16-bit q or k to float32 that q.kT (call head) alone reads, through views view_steps
    writes (GPT-J's and GPT-Neo's `query.to(torch.float32)` before the scores): members of the block, so that
    its q and k are the 16-bit tensors, as its v is; a float32 matmul of 16-bit values is what the tensor
    cores compute with a float32 accumulator."""
    casts = []
    for _, tid, meta in g.ops[head].inputs:
        p = g.producer.get(tid)
        if p is None or g.consumers.get(tid) != [head] or not g.member[p[0]]:
            continue
        op = g.ops[p[0]]
        src = [m for _, _, m in op.inputs]
        if op.func._opname in ("_to_copy", "to") and len(src) == 1 and len(op.outputs) == 1 \
                and src[0].dtype in (torch.bfloat16, torch.float16) and meta.dtype == torch.float32 \
                and view_steps(op.outputs[0][1], meta) is not None:
            casts.append(p[0])
    return casts


def _arg(op, pos: int, name: str, default=None):
    """Argument `name` (positional index pos) of a captured call as model.json records it."""
    a = op.args_json or {}
    if name in a.get("kwargs", {}):
        return a["kwargs"][name]
    args = a.get("args", [])
    return args[pos] if pos < len(args) else default


def _epilogue_step(g: Graph, c: int, tid: int, meta, n: int, state: dict) -> bool:
    """Whether call c, reading value tid (as its producer returned it), is the next step of a GEMM's
    epilogue that cuBLASLt fuses: one bias add (an [n] tensor, alpha 1; only when the GEMM has no bias and
    before the activation), one ReLU or GELU, and a final cast. Updates state."""
    op = g.ops[c]
    func = member_func(op)  # nn.ReLU(inplace=True) too
    name, overload = func._opname, func._overloadname
    if not g.member[c] or len(op.outputs) != 1 or state["cast"]:
        return False
    reads = [m for _, t, m in op.inputs if t == tid]
    others = [(t, m) for _, t, m in op.inputs if t != tid]
    if len(reads) != 1 or view_steps(meta, reads[0]) != []:
        return False
    if name == "add" and overload == "Tensor":
        if state["bias"] or state["act"] or len(others) != 1 or _arg(op, 2, "alpha", 1) != 1:
            return False
        bm = others[0][1]
        if tuple(bm.shape) != (n,) or bm.dtype != meta.dtype:
            return False
        state["bias"] = True
        return True
    if name in EPILOGUE_ACTIVATIONS and overload == "default" and not others:
        if state["act"] or (name == "gelu" and _arg(op, 1, "approximate", "none") not in ("none", "tanh")):
            return False
        state["act"] = True
        return True
    if (name, overload) in (("to", "dtype"), ("_to_copy", "default")) and not others:
        kwargs = (op.args_json or {}).get("kwargs", {})
        if name == "_to_copy" and not set(kwargs) <= {"dtype"}:
            return False
        state["cast"] = True
        return True
    return False


def gemm_epilogue(g: Graph, i: int) -> Optional[list]:
    """The GEMM call i (linear, addmm, mm, matmul) with the pointwise calls after it that cuBLASLt can fuse
    into its epilogue: each reads the previous one's result, as it was returned, and is its only reader
    (a bias add when the GEMM has none, ReLU or GELU, a final cast; _epilogue_step). GELU's erf form is
    kept: whether cuBLASLt's tanh form is within tolerance is the gate's proof. The block's op ids (at
    least the GEMM and one call), or None."""
    op = g.ops[i]
    name = op.func._opname
    if name not in GEMM_NAMES or op.no_problem is not None or len(op.outputs) != 1:
        return None
    tid, meta = op.outputs[0]
    if len(meta.shape) < 1:
        return None
    has_bias = name == "addmm" or (name == "linear" and any(arg == "bias" for arg, _, _ in op.inputs))
    state = {"bias": has_bias, "act": False, "cast": False}
    block = [i]
    while True:
        readers = g.consumers.get(tid, [])
        if len(readers) != 1 or not _epilogue_step(g, readers[0], tid, meta, meta.shape[-1], state):
            break
        block.append(readers[0])
        tid, meta = g.ops[readers[0]].outputs[0]
    return block if len(block) >= 2 and g.convex(set(block)) else None


def _only_step(g: Graph, tid, reader: int):
    """The call that made value tid, where tid is one output of it read only by call `reader`, as it was
    returned; else None."""
    p = g.producer.get(tid)
    if p is None or g.consumers.get(tid, []) != [reader]:
        return None
    made = g.ops[p[0]]
    reads = [m for _, t, m in g.ops[reader].inputs if t == tid]
    if len(made.outputs) != 1 or len(reads) != 1 or view_steps(made.outputs[0][1], reads[0]) != []:
        return None
    return p[0]


def gated_pair(g: Graph, i: int) -> Optional[list]:
    """The front of a GeGLU or SwiGLU MLP ending at call i: mul(act(linear(x, wg)), linear(x, wu)) in
    either order, both linears without bias reading one x with weights of one shape and dtype, GELU (either
    form) or SiLU, each intermediate read only by the next call as it was returned (kiln_gemm_gated in
    src/gen/gemm_match.c; only the wgmma family takes it). The block's op ids in call order, or None."""
    op = g.ops[i]
    if (op.func._opname, op.func._overloadname) != ("mul", "Tensor") or op.no_problem is not None \
            or len(op.inputs) != 2 or len(op.outputs) != 1 or op.inputs[0][1] == op.inputs[1][1]:
        return None
    for a, u in ((0, 1), (1, 0)):
        act = _only_step(g, op.inputs[a][1], i)
        up = _only_step(g, op.inputs[u][1], i)
        if act is None or up is None:
            continue
        aop = g.ops[act]
        if aop.func._opname not in GATE_ACTIVATIONS or aop.func._overloadname != "default" \
                or aop.no_problem is not None or len(aop.inputs) != 1:
            continue
        if aop.func._opname == "gelu" and _arg(aop, 1, "approximate", "none") not in ("none", "tanh"):
            continue
        gate = _only_step(g, aop.inputs[0][1], act)
        if gate is None:
            continue
        lin = [g.ops[gate], g.ops[up]]
        if any(o.func._opname != "linear" or o.no_problem is not None or len(o.inputs) != 2 for o in lin):
            continue
        (_, xg, _), (_, wg, mg) = lin[0].inputs
        (_, xu, _), (_, wu, mu) = lin[1].inputs
        if xg != xu or wg == wu or tuple(mg.shape) != tuple(mu.shape) or mg.dtype != mu.dtype:
            continue
        block = sorted([gate, act, up, i])
        if g.convex(set(block)):
            return block
    return None


def chain_outputs(g: Graph, chain: list) -> list:
    """The values a chain returns: those read outside it, else the last call's first result."""
    members = set(chain)
    outs = [tid for i in chain for tid, _ in g.ops[i].outputs
            if any(r not in members for r in g.consumers.get(tid, []))]
    return outs or [g.ops[chain[-1]].outputs[0][0]]


def chain_key(g: Graph, chain: list) -> tuple:
    """What makes two chains the same problem: the members' signatures and how they are wired."""
    pos = {i: n for n, i in enumerate(chain)}
    wiring = []
    for i in chain:
        for _, tid, _ in g.ops[i].inputs:
            p = g.producer.get(tid)
            wiring.append((pos[p[0]], p[1]) if p and p[0] in pos else None)
    outs = chain_outputs(g, chain)
    where = [(pos[g.producer[t][0]], g.producer[t][1]) for t in outs]
    return (tuple(g.ops[i].key for i in chain), tuple(wiring), tuple(where))


@dataclass
class ChainTrace:
    """A chain as a module trace's straight-line record (the form capture_problem's module_reference and
    module_ops write): inputs, one line per call (views between calls included), outputs."""
    inputs: list = field(default_factory=list)   # [(name, TensorMeta, Stored, origin)]
    lines: list = field(default_factory=list)    # [(func, sargs, skwargs, out_names, out_dtypes)]
    outputs: list = field(default_factory=list)  # [(var, Stored, TensorMeta)]
    mutated_inputs: set = field(default_factory=set)
    grad_mode: str = "inference"
    origins: dict = field(default_factory=dict)  # input name -> parameter name or "activation"


def held_instance(g: Graph, calls: list, samples: dict) -> tuple:
    """(the op ids of the call of a chain group whose every member's call is its signature's held first
    call, True), or (the group's first call, False) when there is none: its inputs are then the tensors of
    calls of the same signatures elsewhere, and its outputs are the reference's, not the model's."""
    for ids in calls:
        held = [samples.get(g.ops[i].key) for i in ids]
        if all(s is not None and s.call_index == g.ops[i].index for s, i in zip(held, ids)):
            return ids, True
    return calls[0], False


def _held_value(g: Graph, samples: dict, tid, meta):
    """Value tid as a call reads it (meta), where the call that made it is its signature's held call and it
    is read as returned: that call's held output, whole (None otherwise). A chain whose member was not the
    held call of its signature still gets this call's own value of an input made outside it: Gemma-4's
    full-attention layer adds a mask only it reads, where the held add of that signature is a sliding layer's
    with a sliding window's mask."""
    p = g.producer.get(tid)
    if p is None:
        return None
    op = g.ops[p[0]]
    s = samples.get(op.key)
    if s is None or s.call_index != op.index or p[1] >= len(s.outputs) or \
            view_steps(op.outputs[p[1]][1], meta) != []:
        return None
    out = s.outputs[p[1]]
    return out if out is not None and out.held else None


CONSTANT_MAKERS = frozenset({"full", "scalar_tensor"})


def _constant_of(g: Graph, chain: list, calls: list, at: int, k: int, stored):
    """The number a chain member reads as its input k where that is a 0-dim tensor made from constants
    outside the chain (`torch.full([], finfo.min)`, `torch.full([], head_dim ** 0.5)`: older GPT-2's mask
    fill and scale, GPT-Neo's, Falcon's) by a call of the same signature — so of the same value — in every
    instance of the chain, else None. Such a tensor is the program's constant, not data: as an input, its
    random sets would be draws, and the attention family could not read it as a scale or a mask's fill."""
    _, tid, meta = g.ops[chain[at]].inputs[k]
    p = g.producer.get(tid)
    if list(meta.shape) != [] or p is None or not meta.dtype.is_floating_point or stored is None or \
            not stored.held or g.ops[p[0]].func._opname not in CONSTANT_MAKERS or g.ops[p[0]].inputs:
        return None
    # a 0-dim float promotes an integer tensor to its own dtype, a number to the default one: floats only
    if any(not m.dtype.is_floating_point for j, (_, _, m) in enumerate(g.ops[chain[at]].inputs)
           if j != k and m.dtype != torch.bool):
        return None
    for ids in calls or [chain]:
        if len(ids) != len(chain):
            return None
        q = g.producer.get(g.ops[ids[at]].inputs[k][1]) if k < len(g.ops[ids[at]].inputs) else None
        if q is None or g.ops[q[0]].key != g.ops[p[0]].key:
            return None
    return float(stored.load().item())


def _scalar_overload(func, positions: set):
    """The overload of func's op that takes a Scalar at the schema positions `positions` and the same
    types elsewhere (div.Tensor -> div.Scalar, where.self -> where.ScalarOther), or None."""
    packet = getattr(torch.ops.aten, func._opname, None)
    want = [("number" if i in positions else str(a.type)) for i, a in enumerate(func._schema.arguments)]
    for name in packet.overloads() if packet is not None else []:
        other = getattr(packet, name)
        if [str(a.type) for a in other._schema.arguments] == want and \
                [str(r.type) for r in other._schema.returns] == [str(r.type) for r in func._schema.returns]:
            return other
    return None


def build_trace(g: Graph, chain: list, samples: dict, tid_names: dict, calls: Optional[list] = None,
                constants: bool = True) -> tuple:
    """(ChainTrace, None) for a chain whose members' first calls were held, else (None, why). The inputs
    are the tensors the members' held first calls read (each signature's first call: the same shapes,
    dtypes and strides as this chain's calls; the same values when held_instance chose the chain), but a
    0-dim tensor every instance (calls: the chain group's op ids) makes from constants is written as its
    number, through the op's Scalar overload (_constant_of)."""
    from kiln.capture_problem import DTYPE_NAMES
    from kiln.capture_record import _Var, Slot, safe_name
    tr = ChainTrace()
    names = {}     # (tid, TensorMeta) of an input -> name
    values = {}    # (tid, TensorMeta) of a chain value as read -> var
    produced = {}  # tid -> (var, TensorMeta as returned)
    n_views = 0
    members = set(chain)
    for at, i in enumerate(chain):
        op = g.ops[i]
        sample = samples.get(op.key)
        if sample is None or len(sample.inputs) != len(op.inputs) or any(sample.flat_is_out):
            return None, f"the first call of {op.func._opname} ({op.module_path}) was not held"
        tr.grad_mode = sample.grad_mode
        slots, numbers = {}, {}
        call = member_func(op)  # the member's overload (its Scalar one where numbers replace tensors)
        for k, (_, tid, meta) in enumerate(op.inputs):
            number = _constant_of(g, chain, calls, at, k, sample.inputs[k]) if constants else None
            if number is not None:
                numbers[k] = number
                continue
            if (tid, meta) in values:
                slots[k] = values[(tid, meta)]
                continue
            p = g.producer.get(tid)
            if p is not None and p[0] in members:
                var, src, _ = produced[tid]
                steps = view_steps(src, meta)
                if steps is None:  # only in an attention block (its matmuls' operands): exact in eager
                    steps = [("as_strided", list(meta.shape), list(meta.stride), meta.offset)]
                for what, *arg in steps:
                    view = f"w{n_views}"
                    n_views += 1
                    func = getattr(torch.ops.aten, what).default
                    tr.lines.append((func, [_Var(var), *arg], {}, view, DTYPE_NAMES.get(meta.dtype)))
                    var = view
                values[(tid, meta)] = slots[k] = var
                continue
            if (tid, meta) not in names:
                pname = tid_names.get(tid, (None,))[0]
                base = safe_name(pname.split(".")[-1]) if pname else f"input{len(tr.inputs)}"
                name = base
                while name in {n for n, *_ in tr.inputs}:
                    name += "_"
                stored = sample.inputs[k]
                if sample.call_index != op.index:  # another call's tensor: this call's own where it was held
                    stored = _held_value(g, samples, tid, meta) or stored
                if stored is None:
                    return None, f"an input of {op.func._opname} was not held"
                names[(tid, meta)] = name
                tr.inputs.append((name, meta, copy.copy(stored), "parameter" if pname else "activation"))
                tr.origins[name] = pname or "activation"
            slots[k] = names[(tid, meta)]

        if numbers:  # the flat inputs are the schema's tensor arguments in order
            tensor_args = [j for j, a in enumerate(call._schema.arguments) if str(a.type) == "Tensor"]
            scalar = None
            if len(tensor_args) == len(op.inputs):
                scalar = _scalar_overload(call, {tensor_args[k] for k in numbers})
            if scalar is None:  # no Scalar overload: the tensors stay inputs
                return build_trace(g, chain, samples, tid_names, calls, constants=False)
            call = scalar

        def bind(v):
            if isinstance(v, Slot):
                if v.index in numbers:
                    return numbers[v.index]
                return _Var(slots[v.index])
            if isinstance(v, (list, tuple)):
                items = [bind(x) for x in v]
                return items if isinstance(v, list) else tuple(items)
            return v

        outs = [f"v{i}_{j}" for j in range(len(op.outputs))]
        dtypes = [DTYPE_NAMES.get(m.dtype) for _, m in op.outputs]
        single = len(op.func._schema.returns) == 1 and str(op.func._schema.returns[0].type) == "Tensor"
        tr.lines.append((call, bind(sample.struct_args), bind(sample.struct_kwargs),
                         outs[0] if single else outs, dtypes[0] if single else dtypes))
        if len(sample.outputs) != len(op.outputs):
            return None, f"the results of {op.func._opname} were not held"
        for j, (tid, meta) in enumerate(op.outputs):
            produced[tid] = (outs[j], meta, sample.outputs[j])
    for tid in chain_outputs(g, chain):
        var, meta, stored = produced[tid]
        tr.outputs.append((var, copy.copy(stored), meta))
    return tr, None

