"""kiln.install_graph: kiln's graph mode, the model's own PyTorch kernels with kiln's chains replaced.

A chain entry (docs/capture.md "Chain problems": Gemma-4's attention block, a VAE's group_norm + SiLU +
residual) replaces several calls at once, which a dispatcher override never sees together: in eager each
call arrives alone. torch.compile sees them together, but then Inductor generates the code for everything
else too. Graph mode takes only the first half of torch.compile:

- dynamo captures the model's forward as graphs (guarded, re-traced where a shape changes, as torch.compile
  does), and AOTAutograd turns each into aten calls, functionalised, with no decomposition beyond the one
  every eager call goes through (a composite such as softmax.int is its _softmax there, as in eager);
- kiln's patterns for that form (install_inductor's "aten" flavor: each entry's calls traced the same way)
  replace every admitted match by the entry's kiln:: op, under the same gate and checks as inside Inductor;
- the graph then runs as it is: every other call is the aten op eager would have dispatched, PyTorch's own
  kernel (or kiln's aten entry, when one is installed for it: the dispatcher still sees those calls).

No code is generated and no kernel of Inductor's runs, so what graph mode measures against eager is kiln's
kernels (and the Python the graph no longer runs). A graph that computes gradients runs unchanged: kiln's
kernels are forward-only.

    inst = kiln.install("RUN/library", model, compile="graph")   # or: kiln run --graph SCRIPT.py
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kiln.install import Installation


GRAPH_NOTE = "graph mode: a graph runs without kiln's replacements, which failed in it:"


def graph_notes(inst: "Installation") -> list:
    """The installation's notes of graphs that ran without kiln's replacements (GRAPH_NOTE), in order."""
    return [n for n in inst.notes if n.startswith(GRAPH_NOTE)]


def scalar_constants(graph) -> int:
    """Rewrites the 0-dim tensors a graph makes from constants (`full.default([], c)`, dynamo's form of
    `torch.full([], finfo.min)`) where an op reads them as capture writes them (kiln.capture_chain,
    _constant_of): `div.Tensor(x, full)` as `div.Scalar(x, c)`, and `where.self`'s fill as the
    `scalar_tensor` its Scalar overload traces to. The values are the same (c in the tensor's dtype, and a
    0-dim operand promotes as a scalar does), so the graph computes what it did; an entry captured from
    older GPT-2's `torch.where(mask, scores, full([], finfo.min))` then matches its pattern. The rewrites."""
    import torch
    aten = torch.ops.aten
    n = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        for k, arg in enumerate(node.args):
            if not (isinstance(arg, torch.fx.Node) and arg.op == "call_function" and arg.target is aten.full.default
                    and list(arg.args[0]) == [] and isinstance(arg.args[1], (int, float))):
                continue
            dtype = arg.kwargs.get("dtype")
            if dtype is None or not dtype.is_floating_point:
                continue
            others = [a.meta.get("val") for j, a in enumerate(node.args) if j != k and isinstance(a, torch.fx.Node)]
            if not all(isinstance(v, torch.Tensor) and (v.dtype.is_floating_point or v.dtype == torch.bool)
                       for v in others):
                continue  # a 0-dim float promotes an integer tensor to its dtype, a number to the default one
            value = float(torch.tensor(arg.args[1], dtype=dtype))
            if node.target is aten.where.self and k in (1, 2):
                with graph.inserting_before(node):
                    const = graph.call_function(aten.scalar_tensor.default, (value,), {
                        "dtype": dtype, "layout": torch.strided, "device": arg.kwargs.get("device")})
                const.meta = dict(arg.meta)
                node.replace_input_with(arg, const)
                n += 1
            elif k == 1 and node.target._overloadname == "Tensor" and \
                    node.target._opname in ("div", "mul") and len(node.args) == 2 and not node.kwargs:
                node.target = getattr(getattr(aten, node.target._opname), "Scalar")
                node.args = (node.args[0], value)
                n += 1
    return n


def transposes_as_permutes(graph) -> int:
    """Rewrites each `transpose.int(x, d0, d1)` of a graph as the `permute.default` of x that swaps d0 and d1:
    the same view, in the form capture writes a view between a chain's calls (kiln.capture_chain view_steps),
    so that an entry whose pattern holds one (GPT-J's `key.to(float32).transpose(-1, -2)` inside its attention
    block) matches a model that spelled it as a transpose. The rewrites."""
    import torch
    aten = torch.ops.aten
    n = 0
    for node in graph.nodes:
        if node.op != "call_function" or node.target is not aten.transpose.int or len(node.args) != 3:
            continue
        x, d0, d1 = node.args
        val = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor) or not isinstance(d0, int) or not isinstance(d1, int):
            continue
        perm = list(range(val.dim()))
        d0, d1 = d0 % max(val.dim(), 1), d1 % max(val.dim(), 1)
        perm[d0], perm[d1] = perm[d1], perm[d0]
        node.target, node.args = aten.permute.default, (x, perm)
        n += 1
    return n


def graph_backend(inst: "Installation"):
    """The torch.compile backend of graph mode for this installation (torch.compile(model, backend=...))."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from torch._inductor.fx_passes.post_grad import remove_noop_ops
    from torch._inductor.pattern_matcher import stable_topological_sort

    def training(gm, example_inputs):  # a graph that computes gradients runs as traced
        return make_boxed_func(gm.forward)

    def inference(gm, example_inputs):
        patterns = inst._inductor
        if patterns is None or not inst.active:
            return make_boxed_func(gm.forward)
        kept = copy.deepcopy(gm.graph)  # the nodes copied, their meta shared: cheap
        try:
            remove_noop_ops(gm.graph)  # what the patterns' traces had removed (a dropout of p=0's clone)
            scalar_constants(gm.graph)  # 0-dim constants as the entries' traces have them
            transposes_as_permutes(gm.graph)  # views as capture writes them
            if patterns.apply(gm.graph, "aten"):
                # a chain with two outputs goes in before the first, and its later calls may read a node
                # defined after that one (Qwen-3.5's add -> mul): ordered again, as Inductor's post-grad does
                stable_topological_sort(gm.graph)
                gm.graph.eliminate_dead_code()
                gm.graph.lint()
            gm.recompile()
        except Exception as e:  # noqa: BLE001 - a graph kiln cannot rewrite runs as traced, never fails the model
            gm.graph = kept
            gm.recompile()
            note = f"{GRAPH_NOTE} {type(e).__name__}: {' '.join(str(e).split())[:200]}"
            if note not in inst.notes:
                inst.notes.append(note)
        return make_boxed_func(gm.forward)

    return aot_autograd(fw_compiler=training, inference_compiler=inference)
