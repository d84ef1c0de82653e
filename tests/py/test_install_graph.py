"""kiln's graph mode (python/kiln/install_graph.py; `kiln run --graph`, kiln.install(..., compile="graph")): the
model's dynamo graphs run with PyTorch's own kernels and kiln's chains replaced in them, no Inductor.

The libraries are test_chains.py's (its fixtures capture the examples and optimize the chains on the cpu backend):
the softmax chain of tests/data/chains/softmax_chain.py and Gemma-4 --small's attention block; and
test_install.py's tiny model library (aten entries on composite ops)."""

from __future__ import annotations

import json
import types
import subprocess

import pytest

torch = pytest.importorskip("torch")

from test_chains import (ROOT, _chain_library, _chain_model, _script_module, chain_library,  # noqa: E402,F401
                         chains, example_model, gemma_attention, kiln_env, optimize_alone, runs)
from test_install import library, opened  # noqa: E402,F401  (the tiny model's cpu library)

pytestmark = pytest.mark.skipif(not (ROOT / "build" / "kiln").exists(), reason="build/kiln is not built (make all)")


def _graph_model(model, library, entries="all"):
    import kiln
    torch._dynamo.reset()
    return kiln.install(str(library), model, entries=entries, compile="graph")


def _softmax_chain_case():
    """softmax_chain.py's model, an input and eager's output: (model, x, want)."""
    sc = _chain_model()
    x = torch.randn(sc.ROWS, sc.IN)
    model = sc.build()
    with torch.no_grad():
        want = model(x)
    return model, x, want


def test_graph_mode_replaces_the_chain_and_runs_eager_kernels(chain_library):
    """The chain is one op of the graph (a hit of its entry each forward) and the output is eager's; with nothing
    installed the graph mode's output is eager's bit for bit (PyTorch's kernels, not generated code); uninstall
    leaves the model eager again."""
    import kiln
    model, x, want = _softmax_chain_case()
    inst = _graph_model(model, chain_library)
    try:
        assert inst.installed == ["chain_mul_add_softmax_16x64_f32"], inst.summary()
        with torch.no_grad():
            got = model(x)
            again = model(x)
        assert torch.allclose(got, want, atol=1e-6, rtol=1e-5) and torch.equal(got, again)
        assert inst.stats()["hits"] == 2 and inst.stats()["misses"] == 0, inst.stats()
    finally:
        kiln.uninstall(inst)
    assert model._compiled_call_impl is None  # eager again: the graphs called ops that are gone
    with torch.no_grad():
        assert torch.equal(model(x), want)

    inst = _graph_model(model, chain_library, entries=[])  # nothing installed: the graph is eager's calls
    try:
        assert inst.installed == []
        with torch.no_grad():
            assert torch.equal(model(x), want)
        assert inst.stats()["hits"] == 0
    finally:
        kiln.uninstall(inst)
        torch._dynamo.reset()


def test_graph_mode_runs_a_graph_it_cannot_rewrite_as_traced(chain_library, monkeypatch, capsys):
    """A rewrite that fails half way (the patterns replaced, then an error, as Qwen-3.5's misordered graph did)
    leaves that graph as dynamo traced it: the forward runs PyTorch's kernels with eager's output, no hit, and
    the installation says why in its notes instead of failing the model; `kiln run --graph` prints it."""
    import kiln
    from kiln.install_graph import GRAPH_NOTE, graph_notes
    from kiln.install_inductor import InductorPatterns
    real = InductorPatterns.apply

    def broken(self, graph, flavor="inductor"):
        real(self, graph, flavor)
        raise RuntimeError("a rewrite kiln got wrong")

    monkeypatch.setattr(InductorPatterns, "apply", broken)
    model, x, want = _softmax_chain_case()
    inst = _graph_model(model, chain_library)
    try:
        with torch.no_grad():
            got = model(x)
        assert torch.equal(got, want)
        assert inst.stats()["hits"] == 0, inst.stats()
        notes = graph_notes(inst)
        assert len(notes) == 1 and "a rewrite kiln got wrong" in notes[0], inst.notes
    finally:
        kiln.uninstall(inst)
        torch._dynamo.reset()

    from kiln import run  # `kiln run --graph` says so at the end, --stats or not
    script = ROOT / "tests" / "data" / "chains" / "softmax_chain.py"
    assert run.main(["--library", str(chain_library), "--entries", "all", "--graph", str(script)]) == 0
    torch._dynamo.reset()
    err = capsys.readouterr().err
    assert f"kiln run: {GRAPH_NOTE}" in err and "a rewrite kiln got wrong" in err, err[-2000:]


def test_graph_mode_leaves_gradients_alone(chain_library):
    """A forward that records a graph for backward runs as traced (kiln's kernels are forward-only): no hit, the
    gradient is eager's."""
    import kiln
    sc = _chain_model()
    model = sc.build()
    x = torch.randn(sc.ROWS, sc.IN, requires_grad=True)
    model(x).pow(2).sum().backward()
    want = x.grad.clone()
    x.grad = None
    inst = _graph_model(model, chain_library)
    try:
        model(x).pow(2).sum().backward()
        assert torch.allclose(x.grad, want, atol=1e-6, rtol=1e-5)
        assert inst.stats()["hits"] == 0, inst.stats()
    finally:
        kiln.uninstall(inst)
        torch._dynamo.reset()


def test_two_output_chain_reading_a_later_tensor(tmp_path_factory):
    """A chain with two outputs (a = x + y read again outside it) whose second call reads a tensor computed after
    its first (b = a * v(x)): its op goes where every input exists (Qwen-3.5-MoE's graph mode failed with "used
    before it has been defined"), one hit per forward, eager's outputs."""
    import kiln
    script = ROOT / "tests" / "data" / "chains" / "two_output_chain.py"
    library = _chain_library(tmp_path_factory, script, "chain_add_mul_16x64_f32")
    tc = _script_module(script)
    model = tc.build()
    x, y = torch.randn(tc.ROWS, tc.IN), torch.randn(tc.ROWS, tc.IN)
    with torch.no_grad():
        want = model(x, y)
    inst = _graph_model(model, library)
    try:
        assert inst.installed == ["chain_add_mul_16x64_f32"], inst.summary()
        with torch.no_grad():
            got = model(x, y)
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (got - want).abs().max()
        assert inst.stats()["hits"] == 1, inst.stats()
    finally:
        kiln.uninstall(inst)
        torch._dynamo.reset()


def _gemma_run(library, compile="graph", forwards: int = 1) -> tuple:
    """Gemma-4 --small (test_chains.example_model) with every entry of the library installed, in graph mode unless
    `compile` says otherwise: (the stats after `forwards` forwards, the notes, the logits' relative distance from
    eager, whether every forward gave the same logits)."""
    import kiln
    model, ids = example_model("gemma4")
    with torch.no_grad():
        want = model(ids).logits.float()
    torch._dynamo.reset()
    inst = kiln.install(str(library), model, entries="all", compile=compile)
    try:
        with torch.no_grad():
            got = [model(ids).logits.float() for _ in range(forwards)]
        return (inst.stats(), list(inst.notes), ((got[0] - want).norm() / want.norm()).item(),
                all(torch.equal(g, got[0]) for g in got))
    finally:
        kiln.uninstall(inst)
        torch._dynamo.reset()


def test_gemma_attention_in_graph_mode(gemma_attention):
    """Gemma-4 --small's attention block is replaced in every sliding layer's graph, no Inductor: a hit per sliding
    layer per forward; the logits move from eager only as far as the block's own tolerance moves them (this random
    bf16 model amplifies one-ulp differences, test_chains.py's inside-torch.compile test says how far)."""
    problem, d, library = gemma_attention
    stats, _, dist, same = _gemma_run(library, forwards=2)
    assert stats["hits"] == 2 * d["kiln"]["calls"] == 10 and stats["misses"] == 0, stats
    assert same and dist < 0.35


def test_graph_mode_takes_chains_before_modules(runs, tmp_path, monkeypatch):
    """Gemma-4 --small's RMSNorm (a module entry) and its chain with the residual add after it (norm + add, 3 of
    the 5 norms of each layer): in graph mode the module entry is a pattern of its calls, matched after the
    chain, so the chain replaces norm + add where it can and the module the norms left (18 + 13 of 31 a
    forward); installed for eager (which never sees a chain whole), the module is the replaced forward of all
    31. Where the module took its forward in graph mode too, the chain had no hit (Gemma-4 on the H200: 36
    module hits, 0 for the chains). A module entry whose calls do not trace into a pattern keeps its replaced
    forward in graph mode (all 31 again, said in the notes)."""
    import kiln.install_inductor as ii
    problems = runs["gemma4"] / "problems"
    chain = next(p for p in problems.iterdir() if p.name.startswith("chain_to_pow_mean_add_mul_type_as_1x64x128_"))
    module = problems / "module_Gemma4RMSNorm_1x64x128_bf16"
    library = optimize_alone([chain, module], tmp_path / "run")
    entry = next(e for e in json.loads((library / "manifest.json").read_text())["entries"] if e["kind"] == "module")
    assert [op["aten"] for op in entry["ops"]][:2] == ["aten::to.dtype", "aten::pow.Tensor_Scalar"], entry["ops"]
    targets = {"chain": "chain to.dtype -> pow.Tensor_Scalar -> mean.dim -> add.Tensor -> pow.Tensor_Scalar -> "
                        "mul.Tensor -> to.dtype -> mul.Tensor -> type_as.default -> add.Tensor",
               "module": "module Gemma4RMSNorm"}
    for mode, expect in (("graph", {"chain": 18, "module": 13}), (False, {"chain": 0, "module": 31})):
        stats, notes, dist, _ = _gemma_run(library, compile=mode)
        hits = {k: stats["targets"].get(t, {}).get("hits", 0) for k, t in targets.items()}
        assert hits == expect, (mode, stats["targets"], notes)
        assert dist < 0.35
    search_fn = ii._chain_search_fn

    def no_module_patterns(entry, n_in):
        if entry.kind == "module":
            raise ii._NotMatchable("a test says so")
        return search_fn(entry, n_in)
    monkeypatch.setattr(ii, "_chain_search_fn", no_module_patterns)
    stats, notes, dist, _ = _gemma_run(library)
    assert stats["targets"][targets["module"]]["hits"] == 31 and dist < 0.35, (stats["targets"], notes)
    assert any("forward is replaced in graph mode" in n for n in notes), notes


def test_graph_mode_replaces_a_chain_with_a_string_argument(runs, tmp_path):
    """Gemma-4 --small's gelu(approximate="tanh") -> mul of each MLP: a string argument is put back into the
    pattern as itself (it was refused as "not a constant kiln can put back", so the chain had no hit in graph
    mode on the H200), one hit per layer."""
    problem = runs["gemma4"] / "problems" / "chain_gelu_mul_1x64x256_bf16"
    d = json.loads((problem / "definition.json").read_text())
    assert "tanh" in json.dumps(d["kiln"]["ops"][0])
    stats, notes, dist, _ = _gemma_run(optimize_alone([problem], tmp_path / "run"))
    assert stats["hits"] == 6, (stats, notes)
    assert dist < 0.35


def test_graph_mode_replaces_a_gated_pair(runs, tmp_path):
    """Gemma-4 --small's MLP front, gelu_tanh(gate_proj(x)) * up_proj(x) (a "gemm_gated" block: the wgmma
    family's gated pair, its cpu candidate here), is one op of each layer's graph in graph mode: a hit per
    layer, the logits within the bf16 model's tolerance of eager. Installed with the two other entries over
    the same calls (the gate projection's GEMM epilogue block and the gelu -> mul chain), it is still the one
    replaced: graph mode applies the largest pattern first."""
    problems = runs["gemma4"] / "problems"
    gated = next(p for p in problems.iterdir() if p.name.startswith("gemm_gated_"))
    gelu_mul = problems / "chain_gelu_mul_1x64x256_bf16"
    epilogue = next(p for p, d in chains(runs["gemma4"]) if d["kiln"].get("pattern") == "gemm_epilogue"
                    and any(m.endswith("mlp.gate_proj") for m in d["kiln"]["module_paths"]))
    stats, notes, dist, _ = _gemma_run(optimize_alone([gated, gelu_mul, epilogue], tmp_path / "run"))
    hits = {t: v["hits"] for t, v in stats["targets"].items()}
    assert hits == {"chain linear.default -> gelu.default -> linear.default -> mul.Tensor": 6,
                    "chain gelu.default -> mul.Tensor": 0, "chain linear.default -> gelu.default": 0}, (hits, notes)
    assert dist < 0.35


def test_gated_pair_inside_torch_compile(runs, tmp_path):
    """The same gated pair inside torch.compile (Inductor's post-grad graph, kiln's pattern of the four calls
    with gelu's approximate='tanh' put back as the captured string): a hit per layer, the logits within the
    bf16 model's tolerance of eager."""
    problems = runs["gemma4"] / "problems"
    gated = next(p for p in problems.iterdir() if p.name.startswith("gemm_gated_"))
    stats, notes, dist, _ = _gemma_run(optimize_alone([gated], tmp_path / "run"), compile=True)
    hits = {t: v["hits"] for t, v in stats["targets"].items()}
    assert hits == {"chain linear.default -> gelu.default -> linear.default -> mul.Tensor": 6}, (hits, notes)
    assert dist < 0.35


def test_kiln_run_graph(chain_library, tmp_path):
    """`kiln run --graph` on the unmodified script: the chain is a hit of each forward; --graph with --compile is
    refused as bad usage."""
    script = ROOT / "tests" / "data" / "chains" / "softmax_chain.py"
    stats = tmp_path / "stats.json"
    kiln = str(ROOT / "build" / "kiln")
    r = subprocess.run([kiln, "run", "--library", str(chain_library), "--entries", "all", "--graph",
                        "--stats-json", str(stats), str(script)], cwd=ROOT, env=kiln_env(), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "--graph" in r.stderr
    record = json.loads(stats.read_text())
    assert record["stats"]["hits"] == 2 and record["compiled"] == ["Net"], record
    r = subprocess.run([kiln, "run", "--library", str(chain_library), "--graph", "--compile", str(script)],
                       cwd=ROOT, env=kiln_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "exclude each other" in r.stderr, r.stderr


def test_plain_kiln_run_follows_the_mode_tune_timed_fastest(chain_library, tmp_path):
    """install.json's "run_mode" (the way tune's report recommends) is what a plain `kiln run` does: here graph
    mode, where the chain is a hit of each forward; `--mode eager` runs without a graph (no chain can hit), a
    library tune never timed runs eagerly, and a bad --mode is bad usage."""
    import shutil

    from kiln import tune
    from kiln.install import Library
    shutil.copytree(chain_library, tmp_path / "library")
    lib = Library(str(tmp_path / "library"))
    model = {"root": "Net", "grad_mode": "inference", "rounds": 5, "eager_ms": 10.0, "eager_spread_pct": 1.0,
             "kiln_ms": 9.9, "kiln_spread_pct": 1.0, "kiln_graph_ms": 5.0, "kiln_graph_spread_pct": 1.0,
             "kiln_entries_installed": ["chain_mul_add_softmax_16x64_f32"]}
    mode = tune.run_mode_of({"script": "s.py", "script_args": [], "run_dir": str(tmp_path), "model": model})
    assert mode["mode"] == "graph" and mode["way"] == "kiln graph mode" and "5.000 ms" in mode["reason"], mode
    try:
        tune.write_decisions(lib, {e.name: {"install": True, "reason": "test"} for e in lib.entries}, mode)
    finally:
        lib.close()
    script = str(ROOT / "tests" / "data" / "chains" / "softmax_chain.py")

    def run(*flags, library=tmp_path / "library"):
        stats = tmp_path / "stats.json"
        r = subprocess.run([str(ROOT / "build" / "kiln"), "run", "--library", str(library), *flags,
                            "--stats-json", str(stats), script], cwd=ROOT, env=kiln_env(), capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        return r.stderr, json.loads(stats.read_text())
    err, record = run()
    assert "kiln run: --mode graph, as kiln tune timed kiln graph mode the fastest" in err, err[-2000:]
    assert record["mode"]["mode"] == "graph" and record["mode"]["auto"], record
    assert record["stats"]["hits"] == 2 and record["compiled"] == ["Net"], record
    err, record = run("--mode", "eager")
    assert record["mode"] == {"mode": "eager", "auto": False} and record["stats"]["hits"] == 0, record
    assert "--graph" not in err
    err, record = run("--entries", "all", library=chain_library)  # no install.json: eager, as before
    assert record["mode"]["mode"] == "eager" and record["mode"]["auto"] and record["compiled"] is None, record
    for bad, says in ((["--mode", "fast"], "--mode fast: one of auto, eager, graph, compile"),
                      (["--mode", "eager", "--graph"], "--graph and --mode eager exclude each other")):
        r = subprocess.run([str(ROOT / "build" / "kiln"), "run", "--library", str(chain_library), *bad, script],
                           cwd=ROOT, env=kiln_env(), capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and says in r.stderr, r.stderr


def test_tune_times_graph_mode(chain_library, tmp_path):
    """tune's "kiln graph mode" timing (the entries install.json keeps, chains included): the chain is a hit of
    each forward, the output eager's; the report says so and recommends `kiln run --graph` where it is the
    fastest beyond the spreads."""
    import shutil

    from kiln import tune
    from kiln.install import Library, installed
    shutil.copytree(chain_library, tmp_path / "library")
    lib = Library(str(tmp_path / "library"))
    tune.write_decisions(lib, {e.name: {"install": True, "reason": "test"} for e in lib.entries})
    sc = _chain_model()
    root = tune.RootCall(sc.build())
    root.args, root.grad_mode = (torch.randn(sc.ROWS, sc.IN),), "inference"
    out = {"eager_ms": 1.0, "iterations": 3}
    try:
        tune.time_kiln_compile(root, lib, types.SimpleNamespace(rounds=2), tune.Timer(cuda=False), out, graph=True)
    finally:
        lib.close()
    assert "kiln_graph_error" not in out, out
    assert out["kiln_graph_hits_per_forward"] == 1 and out["kiln_graph_max_abs_diff"] < 1e-5, out
    assert out["kiln_graph_ms"] > 0 and out["kiln_graph_entries"] == ["chain_mul_add_softmax_16x64_f32"]
    assert installed() is None and root.module._compiled_call_impl is None
    model = dict(out, root="Net", grad_mode="inference", rounds=2, eager_ms=100 * out["kiln_graph_ms"],
                 eager_spread_pct=1.0, kiln_ms=99 * out["kiln_graph_ms"], kiln_spread_pct=1.0,
                 kiln_graph_spread_pct=1.0, kiln_entries_installed=out["kiln_graph_entries"])
    md = tune.render_markdown({"script": "softmax_chain.py", "script_args": [], "run_dir": "x", "model": model})
    assert "kiln graph mode (`kiln run --graph`" in md and "1 kernel calls per forward" in md
    assert "**Fastest here: kiln graph mode**" in md and "`kiln run --graph --library" in md, md


def test_uninstall_leaves_later_graphs_their_gradients(opened):
    """An installation whose aten entries override composite ops (the tiny model's linear and softmax), traced in
    graph mode and uninstalled, leaves nothing behind in PyTorch's Python dispatcher: a graph traced afterwards
    with gradients computes eager's (it had kept sending linear's autograd key to the removed kernel, and the
    gradient was None)."""
    import kiln
    from test_install import HIDDEN, ROWS, _model
    x = torch.randn(ROWS, HIDDEN)
    model = _model()
    torch._dynamo.reset()
    kiln.install(opened, model=model, entries="all", compile="graph")
    try:
        with torch.inference_mode():
            model(x)
    finally:
        kiln.uninstall()
        torch._dynamo.reset()
    again, xg = _model(), x.clone().requires_grad_()
    again(xg).pow(2).sum().backward()
    want, xg.grad = xg.grad.clone(), None
    torch.compile(again, backend="aot_eager")(xg).pow(2).sum().backward()
    torch._dynamo.reset()
    assert xg.grad is not None and torch.allclose(xg.grad, want, atol=1e-6, rtol=1e-5)
