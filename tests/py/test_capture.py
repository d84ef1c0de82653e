"""Tests of `kiln capture` (python/kiln/capture.py) on the CPU: the four bundled examples at --small size,
the problems they produce (every reference, re-run on the saved real inputs, reproduces the outputs the model
computed), model.json's producer -> consumer edges, module-level problems, layouts, and the messages for
malformed invocations. The examples run in subprocesses, as `kiln capture` runs them."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

from kiln.capture import main as capture_main  # noqa: E402
from kiln.problem import load_problem  # noqa: E402

# name -> (script, extra capture options, module it needs); gemma also builds the gate's reference data.
EXAMPLES = {
    "resnet50": ("examples/resnet50.py", ["--no-reference", "--top", "8"], "torchvision"),
    "gemma4": ("examples/gemma4.py", ["--top", "6", "--random-sets", "1"], "transformers"),
    "vae_decoder": ("examples/vae_decoder.py", ["--no-reference", "--top", "8"], None),
    "qwen_moe": ("examples/qwen_moe.py", ["--no-reference", "--top", "10"], "transformers"),
}
TOLERANCE = {torch.float32: (1e-5, 1e-4), torch.bfloat16: (1e-2, 2e-2), torch.float16: (1e-3, 1e-2),
             torch.float64: (1e-8, 1e-7)}


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _capture_cli(args, timeout=240):
    return subprocess.run([sys.executable, "-m", "kiln.capture", *args], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """Runs each example's capture once: {name: (run dir, CompletedProcess)}."""
    import importlib.util
    runs = {}
    for name, (script, options, needs) in EXAMPLES.items():
        if needs and importlib.util.find_spec(needs) is None:
            runs[name] = f"{script} needs {needs} (pip install -r python/requirements-examples.txt)"
            continue
        out = tmp_path_factory.mktemp(name)
        proc = _capture_cli([script, "--out", str(out), "--device", "cpu", *options,
                             "--", "--small", "--device", "cpu", "--iters", "2"])
        runs[name] = (out, proc)
    return runs


def _run(captured, name):
    """The (run dir, process) of an example's capture; skips when the example's package is missing."""
    run = captured[name]
    if isinstance(run, str):
        pytest.skip(run)
    return run


def _problems(run_dir):
    root = os.path.join(run_dir, "problems")
    return [os.path.join(root, d) for d in sorted(os.listdir(root))]


def _captured(tmp_path, capsys, source: str) -> list:
    """(problem dir, definition) of each problem `kiln capture --device cpu` writes for the script source."""
    script = tmp_path / "script.py"
    script.write_text(source)
    out = tmp_path / "run"
    rc = capture_main([str(script), "--out", str(out), "--device", "cpu", "--no-reference"])
    text = capsys.readouterr()
    assert rc == 0, text.out + text.err
    got = []
    for problem_dir in _problems(out):
        with open(os.path.join(problem_dir, "definition.json")) as f:
            got.append((problem_dir, json.load(f)))
    return got


def _run_reference(source, args):
    namespace = {}
    exec(compile(source, "<reference>", "exec"), namespace)
    with torch.no_grad():
        result = namespace["run"](*args)
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _assert_close(got, want, what):
    assert got.shape == want.shape and got.dtype == want.dtype, \
        f"{what}: {got.shape} {got.dtype} vs {want.shape} {want.dtype}"
    if not want.dtype.is_floating_point:
        assert torch.equal(got, want), what
        return
    a, b = got.double(), want.double()
    assert torch.equal(torch.isnan(a), torch.isnan(b)), f"{what}: NaN positions differ"
    finite = torch.isfinite(b)
    assert torch.equal(a[~finite & ~torch.isnan(b)], b[~finite & ~torch.isnan(b)]), f"{what}: infinities differ"
    atol, rtol = TOLERANCE.get(want.dtype, (1e-3, 1e-2))
    err = (a[finite] - b[finite]).abs()
    bound = atol + rtol * b[finite].abs()
    assert bool((err <= bound).all()), f"{what}: max abs error {float(err.max()):.3g}"


def _check_problem_reproduces(problem_dir):
    """Re-runs the reference on the saved real inputs; it must give the saved real outputs (and the
    reference data, when built, must agree)."""
    problem = load_problem(problem_dir)  # the schema reader accepts it
    with open(os.path.join(problem_dir, "definition.json")) as f:
        definition = json.load(f)
    with open(os.path.join(problem_dir, "workload.jsonl")) as f:
        first = json.loads(f.readline())
    assert first["kiln"]["set"] == "real"
    inputs = safetensors_torch.load_file(os.path.join(problem_dir, "tensors", "real.safetensors"))
    outputs_file = os.path.join(problem_dir, "tensors", "real_outputs.safetensors")
    # a chain whose members' held calls are not one run of it has no outputs of the model: only its shapes
    outputs = safetensors_torch.load_file(outputs_file) if "inputs_from" not in definition["kiln"] else None
    args = [inputs[n] for n in definition["inputs"]]
    for name, spec in definition["inputs"].items():
        assert list(inputs[name].shape) == [problem.axes[a].value for a in spec["shape"]]
    got = _run_reference(definition["reference"], [a.clone() for a in args])
    assert len(got) == len(definition["outputs"])
    for out, (name, spec) in zip(got, definition["outputs"].items()):
        assert list(out.shape) == [problem.axes[a].value for a in spec["shape"]], name
        if outputs is not None:
            _assert_close(out.contiguous(), outputs[name], f"{definition['name']}: {name}")
    if outputs is None:
        assert not os.path.exists(outputs_file)
        return definition
    for a, name in zip(args, definition["inputs"]):  # the reference must not write its inputs
        assert torch.equal(a, inputs[name]) or (a.is_floating_point() and torch.isnan(a).any()), name
    manifest = os.path.join(problem_dir, "kiln", "ref-cpu", "manifest.json")
    if os.path.exists(manifest):
        ref = safetensors_torch.load_file(os.path.join(problem_dir, "kiln", "ref-cpu", "w0_s0.safetensors"))
        for name in definition["outputs"]:
            _assert_close(ref[f"output.{name}"], outputs[name], f"{definition['name']}: ref-cpu {name}")
    return definition


def _check_edges(model):
    produced = {}
    graph_inputs = {g["tensor"] for g in model["graph_inputs"]}
    for op in model["ops"]:
        for inp in op["inputs"]:
            t = inp["tensor"]
            assert t in produced or t in graph_inputs, f"op {op['id']} {op['aten']} reads tensor {t} no one made"
            if t in produced:
                assert produced[t] < op["id"]
        for out in op["outputs"]:
            assert out["tensor"] not in produced, f"tensor {out['tensor']} produced twice"
            assert out["tensor"] not in graph_inputs
            produced[out["tensor"]] = op["id"]
    ids = [op["id"] for op in model["ops"]]
    assert ids == list(range(len(ids)))
    for src, dst, t in model["edges"]:
        assert produced[t] == src and src < dst
    assert graph_inputs.isdisjoint(produced)


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_example_capture(captured, name):
    run_dir, proc = _run(captured, name)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "calls" in proc.stdout and "share" in proc.stdout and "wrote" in proc.stdout  # the ranked table
    problems = _problems(run_dir)
    assert problems, "no problem written"
    with open(os.path.join(run_dir, "capture.json")) as f:
        info = json.load(f)
    assert info["device"] == "cpu" and info["wall_s"]["total_s"] > 0 and info["passes"] == 2
    assert {p["name"] for p in info["problems"]} == {os.path.basename(p) for p in problems}
    # a chain whose members' held calls are not one run of it has no outputs of the model to check against
    unchecked = {p["name"] for p in info["problems"] if p["real_check"] is None}
    assert all(p["real_check"]["ok"] for p in info["problems"] if p["name"] not in unchecked), info["problems"]
    assert not info["internal_errors"], info["internal_errors"]
    shares = []
    for problem_dir in problems:
        definition = _check_problem_reproduces(problem_dir)
        kiln = definition["kiln"]
        assert (os.path.basename(problem_dir) in unchecked) == ("inputs_from" in kiln), kiln["kind"]
        assert kiln["calls"] >= 1 and 0 <= kiln["share"] <= 1 and kiln["module_paths"]
        shares.append(kiln["share"])
        if kiln["kind"] == "aten":
            assert f"torch.ops.aten.{kiln['aten'][6:]}(" in definition["reference"]
    assert max(shares) > 0.01


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_model_json(captured, name):
    run_dir, proc = _run(captured, name)
    assert proc.returncode == 0
    with open(os.path.join(run_dir, "model.json")) as f:
        model = json.load(f)
    assert model["ops"] and model["edges"] and model["graph_inputs"]
    _check_edges(model)
    total = sum(op["time_us"] for op in model["ops"])
    assert abs(total - model["total_time_us"]) <= 1e-3 * max(total, 1) + 1
    names = {os.path.basename(p) for p in _problems(run_dir)}
    assert {op["problem"] for op in model["ops"] if op["problem"]} <= names
    assert any(op["problem"] for op in model["ops"])
    assert all(op["module"] for op in model["ops"] if op["module_problem"])
    assert any(g["kind"] == "parameter" for g in model["graph_inputs"])


def test_module_paths_and_module_problems(captured):
    run_dir, _ = _run(captured, "gemma4")
    with open(os.path.join(run_dir, "model.json")) as f:
        model = json.load(f)
    paths = {op["module"] for op in model["ops"]}
    assert "model.layers.3.input_layernorm" in paths
    modules = {}
    for name in ("gemma4", "vae_decoder", "qwen_moe"):
        for problem_dir in _problems(_run(captured, name)[0]):
            with open(os.path.join(problem_dir, "definition.json")) as f:
                kiln = json.load(f)["kiln"]
            if kiln["kind"] == "module":
                modules.setdefault(name, set()).add(kiln["module_class"])
    assert "Gemma4RMSNorm" in modules.get("gemma4", set())
    assert "GroupNormSiLU" in modules.get("vae_decoder", set())
    assert "Qwen3_5MoeRMSNorm" in modules.get("qwen_moe", set())
    # a module problem's reference is the straight-line forward over the exact overloads
    for problem_dir in _problems(run_dir):
        with open(os.path.join(problem_dir, "definition.json")) as f:
            d = json.load(f)
        if d["kiln"]["kind"] == "module":
            assert "torch.ops.aten.mean.dim(" in d["reference"] and "weight" in d["inputs"]
            break
    # gemma's reference data was built by kiln.reference
    assert any(os.path.exists(os.path.join(p, "kiln", "ref-cpu", "manifest.json")) for p in _problems(run_dir))


def test_qwen_moe_ops(captured):
    run_dir, _ = _run(captured, "qwen_moe")
    with open(os.path.join(run_dir, "model.json")) as f:
        model = json.load(f)
    ops = {op["aten"] for op in model["ops"]}
    assert {"aten::softmax.int", "aten::topk.default"} <= ops  # router softmax and top-k
    assert ops & {"aten::_grouped_mm.default", "aten::index_add_.default"}  # experts


# ---------------------------------------------------------------------------------------------------
# A script of our own: layouts (channels-last, expanded, in-place, out=) and the byte cap.

LAYOUT_SCRIPT = textwrap.dedent("""
    import torch, torch.nn as nn, torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.gn = nn.GroupNorm(4, 16)
            self.scale = nn.Parameter(torch.randn(16, 1, 1))

        def forward(self, img, scores, mask):
            y = F.silu(self.gn(img)) * self.scale          # channels-last activations
            s = scores + mask.expand(2, 4, 8, 8)            # a broadcast (stride-0) mask
            p = torch.softmax(s.float(), dim=-1).to(scores.dtype)
            p.mul_(2.0)                                     # in place
            out = torch.empty(2, 4, 8, 8)
            torch.add(p.float(), 1.0, out=out)              # out=
            return y, out

    torch.manual_seed(0)
    m = Block().eval()
    img = torch.randn(2, 16, 8, 8).to(memory_format=torch.channels_last)
    scores = torch.randn(2, 4, 8, 8)
    mask = torch.zeros(1, 1, 8, 8).masked_fill(torch.ones(8, 8).triu(1).bool(), float("-inf"))
    with torch.no_grad():
        for _ in range(2):
            m(img, scores, mask)
    print("layout script done")
""")


def test_layouts_reproduce(tmp_path, capsys):
    out = tmp_path / "run"
    layouts = {}
    for problem_dir, _ in _captured(tmp_path, capsys, LAYOUT_SCRIPT):
        d = _check_problem_reproduces(problem_dir)
        for name, layout in d["kiln"]["layouts"].items():
            layouts.setdefault(layout["stored"], []).append((d["name"], name, layout))
    assert any("permute" in lay for _, _, lay in layouts.get("memory_order", [])), layouts  # channels-last
    assert any("expand" in lay for _, _, lay in layouts.get("memory_order", [])), layouts   # the mask
    names = {os.path.basename(p) for p in _problems(out)}
    assert any(n.startswith("mul__") for n in names), names
    assert any(n.startswith("add_out") for n in names), names
    with open(out / "model.json") as f:
        model = json.load(f)
    _check_edges(model)
    assert model["passes"] == 2


# Leaf modules whose forwards are chains of aten ops (one with an op returning two tensors and an
# in-place add_): their problems carry the forward as kiln's op chain ("ops", docs/formats.md).
CHAIN_SCRIPT = textwrap.dedent("""
    import torch, torch.nn as nn

    class Stats(nn.Module):
        def forward(self, x):
            var, mean = torch.var_mean(x, -1, keepdim=True)
            var.add_(1e-5)
            return var * mean

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(64))

        def forward(self, x):
            h = x.float()
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
            return (h * self.weight).to(x.dtype)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stats = Stats()
            self.norm = RMSNorm()

        def forward(self, x):
            return self.norm(x), self.stats(x.float())

    torch.manual_seed(0)
    m = Net().eval()
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        for _ in range(2):
            m(x)
""")


def _check_op_chain(d):
    """The "ops" of a module problem: the reference's calls in its order, every value an input or an
    earlier op's result, results with their dtypes, outputs among the values."""
    kiln = d["kiln"]
    assert "aten_ops" not in kiln
    ops, outputs = kiln["ops"], kiln["outputs"]
    calls = [line.split("torch.ops.aten.")[1].split("(")[0] for line in d["reference"].splitlines()
             if "torch.ops.aten." in line]
    assert [op["aten"] for op in ops] == ["aten::" + c for c in calls]
    known = set(d["inputs"])

    def refs(v):
        if isinstance(v, dict):
            assert set(v) == {"ref"}, v
            yield v["ref"]
        elif isinstance(v, list):
            for e in v:
                yield from refs(e)

    for op in ops:
        for name in refs(op["args"] + list(op.get("kwargs", {}).values())):
            assert name in known, (name, op)
        outs = op.get("out")
        names = outs if isinstance(outs, list) else [outs] if outs else []
        assert len(op.get("dtypes", [])) == len(names)
        assert all(dt in ("float32", "bfloat16", None) for dt in op.get("dtypes", []))
        known.update(n for n in names if n)
    assert len(outputs) == len(d["outputs"]) and all(o in known for o in outputs)
    return ops


def test_module_problem_op_chain(tmp_path, capsys):
    modules = {}
    for problem_dir, d in _captured(tmp_path, capsys, CHAIN_SCRIPT):
        if d["kiln"]["kind"] == "module":
            modules[d["kiln"]["module_class"]] = (problem_dir, d)
            _check_problem_reproduces(problem_dir)
    assert sorted(modules) == ["RMSNorm", "Stats"]
    ops = _check_op_chain(modules["Stats"][1])
    assert isinstance(ops[0]["out"], list) and ops[0]["aten"].startswith("aten::var_mean")
    assert any(op["aten"] == "aten::add_.Tensor" for op in ops)
    _check_op_chain(modules["RMSNorm"][1])
    # the C side matches the module from its "ops"
    kiln_bin = os.path.join(ROOT, "build", "kiln")
    if not os.path.exists(kiln_bin):
        pytest.skip("build/kiln is not built (make)")
    env = _env()
    env["KILN_PYTHON"] = sys.executable
    r = subprocess.run([kiln_bin, "sweep", modules["RMSNorm"][0], "--backend", "cpu", "--family",
                        "rmsnorm", "--list", "--out", str(tmp_path / "src"), "--ref-dir",
                        str(tmp_path / "ref")],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "matches family rmsnorm (rmsnorm_weight" in r.stdout + r.stderr, r.stdout + r.stderr


def test_tiny_max_bytes_keeps_every_op_as_statistics(tmp_path, capsys):
    """A --max-bytes too small for the tensors drops no op: every signature that can be a problem is one,
    its big inputs `random` with their statistics and structure, and the bytes written stay in the cap."""
    script = tmp_path / "layouts.py"
    script.write_text(LAYOUT_SCRIPT)
    out = tmp_path / "run"
    rc = capture_main([str(script), "--out", str(out), "--device", "cpu", "--no-reference", "--max-bytes", "3K"])
    text = capsys.readouterr().out
    assert rc == 0
    assert "statistics" in text and "--max-bytes" in text
    with open(out / "capture.json") as f:
        info = json.load(f)
    assert info["skipped"] == []
    with open(out / "model.json") as f:
        groups = json.load(f)["groups"]
    assert all(g["problem"] for g in groups if g["not_a_problem"] is None)
    assert info["bytes_written"] <= 3 * 1024
    total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(out / "problems") for f in fs
                if f.endswith(".safetensors"))
    assert total <= 3 * 1024
    drawn = [p for p in info["problems"] if p["drawn_inputs"]]
    assert drawn
    structures = []
    for p in drawn:
        problem = load_problem(os.path.join(out, "problems", p["name"]))
        assert set(problem.workloads[0].drawn) == set(p["drawn_inputs"])
        structures += [e.get("structure", {}).get("name") for e in problem.workloads[0].drawn.values()]
    assert "causal" in structures  # the expanded -inf mask


# ---------------------------------------------------------------------------------------------------
# Malformed invocations and failing scripts: one clear message, no kiln traceback.


def test_missing_script_cli(tmp_path):
    proc = _capture_cli([str(tmp_path / "nope.py"), "--out", str(tmp_path / "run")], timeout=60)
    assert proc.returncode == 2
    assert "no such script" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("argv, message", [
    (["--out", "x"], "required"),                                   # no script
    (["SCRIPT"], "--out"),                                          # no --out
    (["SCRIPT", "--out", "RUN", "--small"], "after `--`"),          # a script option without --
    (["SCRIPT", "--out", "RUN", "--max-bytes", "lots"], "--max-bytes"),
    (["SCRIPT", "--out", "RUN", "--top", "0"], "--top"),
    (["SCRIPT", "--out", "RUN", "--device", "tpu"], "--device"),
    (["SCRIPT", "--", "--small", "--out", "RUN"], "before `--`"),   # --out given to the script
])
def test_bad_arguments(tmp_path, capsys, argv, message):
    script = tmp_path / "ok.py"
    script.write_text("print('hi')\n")
    argv = [str(script) if a == "SCRIPT" else str(tmp_path / "run") if a == "RUN" else a for a in argv]
    rc = capture_main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and message in err and err.startswith("kiln capture: ")
    assert "Traceback" not in err


def test_script_that_raises(tmp_path, capsys):
    script = tmp_path / "boom.py"
    script.write_text(textwrap.dedent("""
        import torch
        x = torch.randn(4, 4)
        def broken(x):
            return x @ torch.randn(5, 5)   # shapes do not match
        broken(x)
    """))
    rc = capture_main([str(script), "--out", str(tmp_path / "run"), "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "the script failed: RuntimeError" in err
    assert "Traceback" in err and "boom.py" in err and "broken" in err  # the user's own traceback
    assert "capture_record.py" not in err and "capture.py" not in err  # without kiln's frames
    assert not os.path.exists(tmp_path / "run" / "model.json")


def test_script_that_exits_nonzero(tmp_path, capsys):
    script = tmp_path / "exit.py"
    script.write_text("import sys\nsys.exit(3)\n")
    rc = capture_main([str(script), "--out", str(tmp_path / "run"), "--device", "cpu"])
    assert rc == 1 and "exited with status 3" in capsys.readouterr().err


def test_script_without_tensor_work(tmp_path, capsys):
    script = tmp_path / "idle.py"
    script.write_text("import torch\nprint(sum(range(10)))\n")
    rc = capture_main([str(script), "--out", str(tmp_path / "run"), "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 1 and "no tensor work" in err and "Traceback" not in err


def test_script_args_and_argv(tmp_path, capsys):
    script = tmp_path / "args.py"
    script.write_text(textwrap.dedent("""
        import sys, torch
        assert sys.argv[1:] == ["--n", "3", "--flag"], sys.argv
        assert __name__ == "__main__"
        lin = torch.nn.Linear(3, 3)
        with torch.inference_mode():
            lin(torch.randn(2, 3)).relu()
    """))
    rc = capture_main([str(script), "--out", str(tmp_path / "run"), "--device", "cpu", "--no-reference",
                       "--", "--n", "3", "--flag"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert os.path.exists(tmp_path / "run" / "model.json")


def test_memory_exhausted_while_saving(tmp_path, capsys, monkeypatch):
    """Running out of host memory while copying tensors stops the copies, not the capture: the script
    finishes, what was copied is written, and the rest is kept as statistics."""
    import kiln.capture_record as record

    real_put = record.Spool.put
    calls = {"n": 0}

    def put_until_full(self, view, suffix=""):
        if not suffix:  # full copies, not slices
            calls["n"] += 1
            if calls["n"] > 20:  # the first signatures are copied whole
                raise torch.OutOfMemoryError("simulated: host out of memory")
        return real_put(self, view, suffix)

    monkeypatch.setattr(record.Spool, "put", put_until_full)
    script = tmp_path / "layouts.py"
    script.write_text(LAYOUT_SCRIPT)
    out = tmp_path / "run"
    rc = capture_main([str(script), "--out", str(out), "--device", "cpu", "--no-reference"])
    text = capsys.readouterr().out
    assert rc == 0
    assert "layout script done" in text and "memory exhausted" in text
    with open(out / "capture.json") as f:
        info = json.load(f)
    assert info["holding"]["disabled"] and not info["skipped"]
    assert any(p["real_outputs"] for p in info["problems"]) and not all(p["real_outputs"] for p in info["problems"])
    for p in info["problems"]:
        problem_dir = os.path.join(out, "problems", p["name"])
        if p["real_outputs"]:
            _check_problem_reproduces(problem_dir)
        else:
            load_problem(problem_dir)


def test_functional_script_without_modules(tmp_path, capsys):
    """A script that calls no nn.Module: every op it runs is the model."""
    script = tmp_path / "func.py"
    script.write_text(textwrap.dedent("""
        import torch
        x = torch.randn(64, 256)
        for _ in range(3):
            y = torch.softmax(x * 2.0, dim=-1)
    """))
    out = tmp_path / "run"
    rc = capture_main([str(script), "--out", str(out), "--device", "cpu", "--no-reference"])
    assert rc == 0, capsys.readouterr().err
    names = {os.path.basename(p) for p in _problems(out)}
    assert "softmax_default_64x256_f32" in names and "mul_Tensor_64x256_f32" in names
    for problem_dir in _problems(out):
        assert _check_problem_reproduces(problem_dir)["kiln"]["calls"] == 3
    with open(out / "model.json") as f:
        _check_edges(json.load(f))


def test_torch_where_of_a_condition_is_data_dependent(tmp_path, capsys):
    """torch.where(cond) (Mixtral's MoE dispatch: `idx, top_x = torch.where(expert_mask[i])`) arrives whole in
    inference_mode as aten::where.default, which has no dynamic-shape tag: it is no problem (its output shape
    is data-dependent), as nonzero is, rather than a problem no family can take ("operand 1 is None")."""
    script = tmp_path / "where.py"
    script.write_text(textwrap.dedent("""
        import torch
        m = torch.randn(8, 128) > 0
        r = torch.tensor([1, 2, 3])
        with torch.inference_mode():
            for _ in range(2):
                torch.where(m)
                torch.repeat_interleave(r)
    """))
    out = tmp_path / "run"
    rc = capture_main([str(script), "--out", str(out), "--device", "cpu", "--no-reference"])
    assert rc == 0, capsys.readouterr().err
    names = {os.path.basename(p) for p in _problems(out)}
    assert not any(n.startswith(("where", "repeat_interleave")) for n in names), names
    assert "data-dependent" in capsys.readouterr().out


def test_a_zero_dim_tensor_of_two_bytes_is_written(tmp_path):
    """A 0-dim bfloat16 tensor (a scalar argument kept as a tensor) is written with its two bytes: viewing it
    as bytes failed ("self.dim() cannot be 0 to view BFloat16 as Byte"), which ended a capture of Qwen-3.5-MoE
    at --top 500."""
    import struct

    from kiln.capture_problem import write_safetensors
    path = str(tmp_path / "t.safetensors")
    x = torch.tensor(1.5, dtype=torch.bfloat16)
    write_safetensors(path, {"s": x, "v": torch.arange(3, dtype=torch.float16)})
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    assert header["s"] == {"dtype": "BF16", "shape": [], "data_offsets": [0, 2]}
    data = raw[8 + n:]
    assert data[:2] == x.reshape(1).view(torch.int16).numpy().tobytes()
    assert data[2:8] == torch.arange(3, dtype=torch.float16).numpy().tobytes()


FLOPS_SCRIPT = textwrap.dedent("""
    import torch, torch.nn.functional as F
    x, w = torch.randn(64, 96), torch.randn(80, 96)
    a, b = torch.randn(4, 16, 24), torch.randn(4, 24, 8)
    img, k, kt = torch.randn(2, 6, 20, 20), torch.randn(12, 3, 3, 3), torch.randn(6, 4, 3, 3)
    with torch.no_grad():
        for _ in range(2):
            F.linear(x, w); torch.bmm(a, b); F.conv2d(img, k, groups=2, padding=1)
            F.conv_transpose2d(img, kt); torch.softmax(x, -1)
""")


def test_contraction_ops_carry_their_flops(tmp_path, capsys):
    """A GEMM's or a convolution's speed of light counts its flops (2 x outputs x contracted size), at the
    tensor-core rate for bf16; memory-bound ops and a transposed convolution (its weight's dims are swapped)
    declare none."""
    flops = {}
    for problem_dir, d in _captured(tmp_path, capsys, FLOPS_SCRIPT):
        flops[d["name"]] = d["kiln"].get("flops")
        assert load_problem(problem_dir) is not None
    by = {n.split("_default")[0]: v for n, v in flops.items()}
    assert by["mm"] == 2 * 64 * 80 * 96 and by["bmm"] == 2 * 4 * 16 * 8 * 24, flops
    convs = sorted((v for n, v in flops.items() if n.startswith("convolution")), key=lambda v: v or 0)
    assert convs == [None, 2 * 2 * 12 * 20 * 20 * 3 * 3 * 3], flops
    assert by["softmax"] is None, flops
