"""kiln's module entries inside torch.compile (python/kiln/install.py, _register_module_ops): each installed
module entry is also a custom op, kiln::<entry>, with a fake kernel of the gate's output shape, strides and
dtype and a real kernel that runs the gate and the launch. When dynamo traces a bound module it sees only
checks it can guard on and then the op, so the whole model stays one graph; `kiln tune --compile` times it
as the "kiln + torch.compile" column.

The library and the tiny model are test_install.py's (its session fixture builds the cpu library; imported,
not copied). One entry, the RMSNorm module, on the CPU with inductor and the machine's C++ compiler."""

import os
import sys
import types

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

torch = pytest.importorskip("torch")

# test_install puts python/ and tests/data/install on sys.path; its fixtures build and open the library
from test_install import HIDDEN, ROWS, _model, library, opened, _nothing_installed_after  # noqa: E402,F401

import kiln  # noqa: E402
from kiln import tune  # noqa: E402
from kiln.install import KilnError, installed  # noqa: E402


def _rms(lib):
    return next(e for e in lib.entries if e.name.startswith("module_RMSNorm"))


def _tolerance(entry) -> dict:
    tol = (entry.data.get("tolerance_met") or {}).get("tolerance") or {}
    return {"atol": tol.get("atol", 1e-5), "rtol": tol.get("rtol", 1e-4)}


class _Graphs:
    """A torch.compile backend that keeps every FX graph dynamo hands it and runs it as it is."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward

    def targets(self, k: int = 0) -> list:
        return [str(n.target) for n in self.graphs[k].graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("dispatch", ["python", "cpp"])
def test_module_entry_is_one_custom_op_in_the_graph(opened, dispatch):
    """The hit path: one graph, no break, the kiln op where RMSNorm was; results equal eager within the
    entry's tolerance; later calls run that graph (no recompilation: on the C++ path the module's class is
    kiln's subclass, install_cpp.swap_module_class, which dynamo sees as the module's own). Another shape,
    or a call that needs a gradient, traces the original forward."""
    e = _rms(opened)
    model, x = _model(), torch.randn(ROWS, HIDDEN)
    with torch.inference_mode():
        ref = model(x)
    if dispatch == "cpp":
        try:
            kiln.install_cpp.dispatch_extension(False)
        except KilnError as why:
            pytest.skip(f"kiln's C++ dispatch extension cannot be built here: {why}")
    inst = kiln.install(opened, model=model, entries=[e.name], dispatch=dispatch)
    assert (type(model.norm).__dict__.get("__kiln_swapped__") is not None) == (dispatch == "cpp")
    op_name = inst.custom_ops[e.name]
    assert op_name.startswith("kiln::") and op_name.split("::")[1].isidentifier()
    torch._dynamo.reset()
    with torch.inference_mode():
        explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    inst.reset_stats()
    graphs = _Graphs()
    compiled = torch.compile(model, backend=graphs)
    with torch.inference_mode():
        got = compiled(x)
    assert not torch._dynamo.utils.counters["graph_break"], dict(torch._dynamo.utils.counters["graph_break"])
    assert len(graphs.graphs) == 1
    targets = graphs.targets()
    assert sum(t.startswith(op_name.replace("::", ".")) for t in targets) == 1, targets
    assert any("linear" in t for t in targets) and any("softmax" in t for t in targets), targets
    torch.testing.assert_close(got, ref, **_tolerance(e))
    assert inst.stats()["entries"][e.name]["hits"] == 1
    with torch.inference_mode():
        for _ in range(2):
            torch.testing.assert_close(compiled(x), ref, **_tolerance(e))
    assert len(graphs.graphs) == 1 and not torch._dynamo.utils.counters["recompiles"]
    assert inst.stats()["op_hits"]["module RMSNorm"] == 3, inst.stats()
    # a miss dynamo can see (another shape): the original forward is traced, no kiln op
    small = torch.randn(ROWS // 2, HIDDEN)
    with torch.inference_mode():
        assert torch.equal(compiled(small), model.__class__.forward(model, small))
    assert not any(t.startswith("kiln.") for t in graphs.targets(-1)), graphs.targets(-1)
    # grad mode with a weight that requires grad: the original forward, and autograd works through it
    torch._dynamo.reset()
    graphs = _Graphs()
    xg = x.clone().requires_grad_()
    out = torch.compile(model, backend=graphs)(xg)
    out.sum().backward()
    assert xg.grad is not None and model.norm.weight.grad is not None
    assert not any(t.startswith("kiln.") for t in graphs.targets()), graphs.targets()
    kiln.uninstall()
    torch._dynamo.reset()


def test_modules_found_without_a_model_inside_torch_compile(opened):
    """kiln run's path (no model given) with a script that compiles its model: the watching hook runs
    eagerly, names the modules of the compiled model's original (not "_orig_mod."), and removes itself;
    the graph has the kiln op and no break."""
    e = _rms(opened)
    model, x = _model(), torch.randn(ROWS, HIDDEN)
    with torch.inference_mode():
        ref = model(x)
    inst = kiln.install(opened, entries=[e.name])
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    graphs = _Graphs()
    compiled = torch.compile(model, backend=graphs)
    with torch.inference_mode():
        got = compiled(x)
        compiled(x)
    assert ("norm", "RMSNorm") in inst.stats()["modules_bound"]
    assert not torch._dynamo.utils.counters["graph_break"], dict(torch._dynamo.utils.counters["graph_break"])
    assert len(graphs.graphs) == 1 and any(t.startswith("kiln.") for t in graphs.targets()), graphs.targets()
    assert inst.stats()["entries"][e.name]["hits"] == 2
    torch.testing.assert_close(got, ref, **_tolerance(e))
    kiln.uninstall()
    torch._dynamo.reset()


def test_custom_op_copes_with_what_a_trace_cannot_see(opened):
    """The op's real kernel on a misaligned start or other strides (the gate's shape and dtype): the kernel
    runs on gate-shaped copies and counts a hit; the fake kernel gives the gate's output layout."""
    e = _rms(opened)
    model = _model()
    inst = kiln.install(opened, model=model, entries=[e.name])
    ns, name = inst.custom_ops[e.name].split("::")
    op = getattr(getattr(torch.ops, ns), name).default
    w = model.norm.weight.detach()
    cases = {"aligned": torch.randn(ROWS, HIDDEN),
             "misaligned": torch.randn(ROWS * HIDDEN + 1)[1:].view(ROWS, HIDDEN),
             "other strides": torch.randn(HIDDEN, ROWS).t()}
    with torch.inference_mode():
        for what, t in cases.items():
            before = inst.stats()["entries"][e.name]["hits"]
            got = op(t, w)
            assert inst.stats()["entries"][e.name]["hits"] == before + 1, what
            torch.testing.assert_close(got, model.norm.__class__.forward(model.norm, t), **_tolerance(e))
            assert got.stride() == tuple(e.outputs[0]["strides"]), what
        with pytest.raises(KilnError, match="cannot admit"):  # another shape is never copied into the gate's
            op(torch.randn(ROWS // 2, HIDDEN), w)
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        fake = op(mode.from_tensor(cases["aligned"]), mode.from_tensor(w))
    assert tuple(fake.shape) == tuple(e.outputs[0]["shape"]) and fake.stride() == tuple(e.outputs[0]["strides"])


def test_inductor_runs_kiln_inside_the_compiled_model(opened):
    """torch.compile (inductor, the CPU's C++ compiler) of the model with kiln installed: kiln's hit counter
    moves with every compiled forward, the output is eager's within tolerance; uninstall removes the op and
    the forward, and the compiled model still runs (recompiled without kiln)."""
    e = _rms(opened)
    model, x = _model(), torch.randn(ROWS, HIDDEN)
    with torch.inference_mode():
        ref = model(x)
    torch._dynamo.reset()
    inst = kiln.install(opened, model=model, entries=[e.name])
    ns, name = inst.custom_ops[e.name].split("::")
    compiled = torch.compile(model)
    with torch.inference_mode():
        got = compiled(x)
        hits = inst.stats()["entries"][e.name]["hits"]
        compiled(x)
        compiled(x)
    assert hits >= 1 and inst.stats()["entries"][e.name]["hits"] == hits + 2
    assert inst.stats()["targets"]["module RMSNorm"]["hits"] == hits + 2
    torch.testing.assert_close(got, ref, **_tolerance(e))
    kiln.uninstall()
    assert installed() is None and "forward" not in model.norm.__dict__
    assert not hasattr(getattr(torch.ops, ns), name)
    with torch.inference_mode():
        again = compiled(x)
    torch.testing.assert_close(again, ref, **_tolerance(e))
    assert inst.stats()["entries"][e.name]["hits"] == hits + 2
    torch._dynamo.reset()


def test_eager_path_is_unchanged_without_compile(opened):
    """compile_friendly=False registers no op; either way eager calls take the same gate."""
    e = _rms(opened)
    model, x = _model(), torch.randn(ROWS, HIDDEN)
    outs = []
    for cf in (False, True):
        inst = kiln.install(opened, model=model, entries=[e.name], compile_friendly=cf)
        assert bool(inst.custom_ops) is cf
        with torch.inference_mode():
            outs.append(model(x))
        assert inst.stats()["entries"][e.name]["hits"] == 1
        kiln.uninstall()
    assert torch.equal(outs[0], outs[1])


def _tune_setup(opened, library, tmp_path):
    """tune's pieces for the tiny model with the RMSNorm entry chosen in install.json."""
    from test_install import _copy_library
    from kiln.install import Library
    e = _rms(opened)
    lib = Library(_copy_library(library, tmp_path))
    tune.write_decisions(lib, {x.name: {"install": x.name == e.name, "reason": "test"} for x in lib.entries})
    model = _model()
    root = tune.RootCall(model)
    root.args, root.grad_mode = (torch.randn(ROWS, HIDDEN),), "inference"
    return lib, root, types.SimpleNamespace(rounds=1)


def test_tune_measures_kiln_inside_torch_compile(opened, library, tmp_path):
    """tune's model timing with --compile: the "kiln + torch.compile" column in report.json's model and in
    the markdown, with kiln's kernel running inside the compiled forward."""
    lib, root, opts = _tune_setup(opened, library, tmp_path)
    torch._dynamo.reset()
    out = tune.time_model(root, lib, opts, tune.Timer(cuda=False), compile_too=True)
    assert "compile_error" not in out and "kiln_compile_error" not in out, out
    assert out["compile_ms"] > 0 and out["kiln_compile_ms"] > 0
    assert out["kiln_compile_speedup"] == pytest.approx(out["eager_ms"] / out["kiln_compile_ms"])
    assert out["kiln_compile_hits_per_forward"] == 1
    assert out["kiln_compile_max_abs_diff"] < 1e-4
    assert installed() is None
    md = tune.render_markdown({"script": "tiny_model.py", "script_args": [], "run_dir": "x", "model": out})
    header = next(line for line in md.splitlines() if line.startswith("| model"))
    row = next(line for line in md.splitlines() if line.startswith("| TinyModel"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    names = [c.strip() for c in header.strip("|").split("|")]
    assert cells[names.index("kiln + torch.compile ms")] == f"{out['kiln_compile_ms']:.3f}"
    assert "max diff kiln + compile" in names
    assert "kernel calls per compiled forward" in md
    lib.close()


def test_tune_kiln_compile_interrupted_or_failing(opened, library, tmp_path, monkeypatch):
    """SIGINT during the kiln + torch.compile column: "interrupted", the rest kept; an exception: its
    message; neither raises, and kiln is uninstalled."""
    lib, root, opts = _tune_setup(opened, library, tmp_path)
    calls = []

    def compile_(model, *a, **k):  # the plain compile "works" (eagerly); the one with kiln is interrupted
        calls.append(model)
        if len(calls) == 2:
            raise KeyboardInterrupt
        if len(calls) == 3:
            raise RuntimeError("inductor is unhappy")
        return model
    monkeypatch.setattr(torch, "compile", compile_)
    out = tune.time_model(root, lib, opts, tune.Timer(cuda=False), compile_too=True)
    assert out["compile_ms"] > 0 and out["kiln_compile_error"].startswith("interrupted")
    assert installed() is None
    md = tune.render_markdown({"script": "tiny_model.py", "script_args": [], "run_dir": "x", "model": out})
    row = next(line for line in md.splitlines() if line.startswith("| TinyModel"))
    assert "| interrupted |" in row
    tune.time_kiln_compile(root, lib, opts, tune.Timer(cuda=False), out)
    assert out["kiln_compile_error"] == "RuntimeError: inductor is unhappy" and "kiln_compile_ms" not in out
    assert installed() is None
    lib.close()


def _softmax_entry(lib):
    return next(e for e in lib.entries if e.name.startswith("softmax_int"))


def test_aten_entry_runs_inside_inductor(opened):
    """An aten entry inside torch.compile (python/kiln/install_inductor.py): Inductor decomposes softmax
    before choosing kernels, so kiln's post-grad pass replaces the decomposed pattern with kiln::<entry>
    where the tensors are exactly the gate's; a softmax over another axis of the same tensor, or another
    shape, stays Inductor's code. Uninstall removes the op and the pass."""
    import torch._inductor.config as inductor_config
    e = _softmax_entry(opened)
    (shape, stride, dtype), = [(tuple(g["shape"]), tuple(g["strides"]), g["dtype"]) for g in e.inputs]
    assert e.aten == "aten::softmax.int" and len(shape) == 2
    before = inductor_config.post_grad_custom_pre_pass
    x = torch.randn(*shape)

    # (not t * c: Inductor folds a scalar factor into the softmax it decomposes, another pattern)
    def f(t):
        return torch.softmax(t.sin(), dim=-1) + 1.0

    def other_axis(t):
        return torch.softmax(t.sin(), dim=0) + 1.0

    fewer = x[:shape[0] - 1].clone()  # another shape
    with torch.inference_mode():  # eager, before install: a kiln hit in eager would count too
        ref, ref_other, ref_fewer = f(x), other_axis(x), f(fewer)
    torch._dynamo.reset()
    inst = kiln.install(opened, entries=[e.name])
    op = inst.custom_ops[e.name]
    assert op.startswith("kiln::")
    with torch.inference_mode():
        got = torch.compile(f)(x)
        hits = inst.stats()["targets"]["aten::softmax.int"]["hits"]
        assert hits == 1 and inst.stats()["op_hits"]["aten::softmax.int"] == 1, inst.stats()
        torch.testing.assert_close(got, ref, **_tolerance(e))
        if shape[0] == shape[1]:
            pytest.skip("a square gate: the other axis has the same shape")
        # the same tensor reduced over dim 0 (the pattern matcher ignores the dims it traced), and
        # another shape: Inductor's code, not kiln's
        torch.testing.assert_close(torch.compile(other_axis)(x), ref_other)
        torch.testing.assert_close(torch.compile(f)(fewer), ref_fewer)
    assert inst.stats()["targets"]["aten::softmax.int"]["hits"] == hits
    assert inductor_config.post_grad_custom_pre_pass is not before
    kiln.uninstall()
    assert inductor_config.post_grad_custom_pre_pass is before
    assert not hasattr(torch.ops.kiln, op.split("::")[1])
    torch._dynamo.reset()
    with torch.inference_mode():
        torch.testing.assert_close(torch.compile(f)(x), ref, **_tolerance(e))
    assert inst.stats()["targets"]["aten::softmax.int"]["hits"] == hits
    torch._dynamo.reset()


def test_aten_patterns_cost_an_eager_process_nothing(library):
    """In a fresh process: kiln.install does not import dynamo or Inductor (about 1.8 s) for its aten
    patterns; the pass is set by a hook when torch.compile imports Inductor's config, and it works."""
    import subprocess
    code = f"""
import sys, torch
sys.path.insert(0, {os.path.dirname(os.path.dirname(kiln.__file__))!r})
import kiln
from kiln.install import Library
lib = Library({library["dir"]!r})
e = next(e for e in lib.entries if e.name.startswith("softmax_int"))
inst = kiln.install(lib, entries=[e.name])
assert "torch._inductor.config" not in sys.modules and "torch._dynamo" not in sys.modules, "imported at install"
x = torch.randn(*e.inputs[0]["shape"])
with torch.inference_mode():
    torch.compile(lambda t: torch.softmax(t.sin(), dim=-1))(x)
print("hits", inst.stats()["targets"]["aten::softmax.int"]["hits"])
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "hits 1" in p.stdout, p.stdout + p.stderr[-2000:]


def test_kiln_run_compile_puts_kiln_inside_the_compiled_model(library, tmp_path):
    """`kiln run --compile`: a script that never calls torch.compile gets its root module compiled at its
    first call, and kiln's entries (the RMSNorm module entry and the softmax aten entry) run inside the
    compiled forward, once per forward each; the script's output is unchanged."""
    import json
    import subprocess
    from test_install import KILN, SCRIPT, _env
    stats = str(tmp_path / "stats.json")
    args = ["run", "--library", library["dir"], "--entries", "all", "--stats-json", stats]
    plain = subprocess.run([KILN, *args[:-2], SCRIPT, "--iters", "3"], env=_env(), capture_output=True,
                           text=True, timeout=600)
    p = subprocess.run([KILN, *args, "--compile", SCRIPT, "--iters", "3"], env=_env(), capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0 and plain.returncode == 0, p.stderr[-3000:] + plain.stderr[-3000:]
    assert "kiln run: --compile: each root module is compiled" in p.stderr
    record = json.load(open(stats))
    assert record["compiled"] == ["TinyModel"], record["compiled"]
    targets = record["stats"]["targets"]
    assert targets["module RMSNorm"]["hits"] == targets["aten::softmax.int"]["hits"] >= 3, targets
    # every hit came through the kiln:: ops of the compiled graph, none through eager dispatch (the linear
    # layers' entries, since the cublaslt family, too)
    op_hits = {t: n for t, n in record["stats"]["op_hits"].items() if n}
    assert op_hits["module RMSNorm"] == targets["module RMSNorm"]["hits"], record["stats"]
    assert op_hits["aten::softmax.int"] == targets["aten::softmax.int"]["hits"], record["stats"]
    assert sum(op_hits.values()) == record["stats"]["hits"], record["stats"]
    checksum = [ln for ln in p.stdout.splitlines() if "checksum" in ln]
    assert checksum and checksum[0].split("checksum")[1] == \
        [ln for ln in plain.stdout.splitlines() if "checksum" in ln][0].split("checksum")[1]


def test_install_compile_true_with_a_model(opened):
    """kiln.install(model=..., compile=True) compiles the model in place (Module.compile()), kiln inside."""
    e = _softmax_entry(opened)
    model, x = _model(), torch.randn(ROWS, HIDDEN)
    with torch.inference_mode():
        ref = model(x)
    torch._dynamo.reset()
    inst = kiln.install(opened, model=model, entries=[e.name, _rms(opened).name], compile=True)
    with torch.inference_mode():
        got = model(x)
        model(x)
    t = inst.stats()["targets"]
    assert t["aten::softmax.int"]["hits"] == 2 and t["module RMSNorm"]["hits"] == 2, t
    op_hits = {t: n for t, n in inst.stats()["op_hits"].items() if n}
    assert op_hits == {"aten::softmax.int": 2, "module RMSNorm": 2}  # inside the graph
    torch.testing.assert_close(got, ref, **_tolerance(e))
    kiln.uninstall()
    torch._dynamo.reset()
