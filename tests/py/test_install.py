"""Tests of putting kernels back into the model: libkiln_rt (src/runtime/), kiln.install / kiln.uninstall
(python/kiln/install.py), `kiln run` and `kiln tune`, on the cpu backend with torch from PyPI.

The library is built for real, once per session, from tests/data/install/tiny_model.py (an RMSNorm module, a
linear layer and a softmax): `kiln tune SCRIPT --backend cpu --budget 4` captures it, runs
`kiln optimize` and the install check. Where this kiln has no working `kiln optimize`, the fixture falls
back to `kiln capture`, one `kiln sweep --limit 1` per problem that a family matches, and manifest entries
written here from the problems' definitions (the `library` fixture says which path it took in
`library_source`). Every test then installs into the same unmodified model:

- gate hits give results equal to eager within the entry's tolerance, with the outputs' dtypes and strides;
- gate misses (other shapes, other strides, misaligned data, a different non-tensor argument) fall back
  to PyTorch's own kernel and are bitwise exact;
- a call that needs a gradient falls back and autograd works, including through composite ops;
- uninstall restores eager results bitwise and PyTorch's dispatch tables as they were;
- a library from another device or kiln build, or a damaged one (bad JSON, a missing kernel file, a
  signature that does not fit its gate, a cuda library on a machine without a driver) is refused with a
  clear message, and the model still runs eagerly;
- hits and misses are counted through Installation.stats().

Where PyTorch sees a GPU, test_cuda_* build a cuda library the same way and check hits, exact misses and a
replay inside a captured CUDA graph; elsewhere they skip and say so. KILN_TEST_CUDA_RUN=RUN makes them use a
run that `kiln tune --backend cuda` already made of tiny_model.py with --rows 256 --hidden 4096 (as
bench/install_device.sh does, to fit its time) instead of tuning one here."""

import glob
import importlib
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "data", "install"))

torch = pytest.importorskip("torch")

import kiln  # noqa: E402
from kiln.install import KilnError, Library, LibraryRefused, _boxable, _number_positions, installed  # noqa: E402
from tiny_model import TinyModel  # noqa: E402

SCRIPT = os.path.join(ROOT, "tests", "data", "install", "tiny_model.py")
KILN = os.path.join(ROOT, "build", "kiln")
HIDDEN, ROWS = 256, 64


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("KILN_PYTHON", sys.executable)
    return env


def _kiln(args, timeout=900):
    return subprocess.run([KILN, *args], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout)


# ---------------------------------------------------------------------------------------------------
# The library, built once.

def _hand_library(run_dir: str) -> str:
    """RUN/library from `kiln sweep --limit 1` kernels and manifest entries written from the problems'
    definitions: the path the fixture takes where `kiln optimize` does not work."""
    lib_dir = os.path.join(run_dir, "library")
    os.makedirs(lib_dir, exist_ok=True)
    entries, device = [], {"name": "", "uuid": "", "compute_capability": "0.0"}
    for pdir in sorted(glob.glob(os.path.join(run_dir, "problems", "*"))):
        name = os.path.basename(pdir)
        p = _kiln(["sweep", pdir, "--backend", "cpu", "--limit", "1", "--json",
                   "--out", os.path.join(run_dir, "sweep", name)])
        try:
            rows = [r for r in json.loads(p.stdout)["rows"] if (r.get("result") or {}).get("outcome") == "ok"]
        except (ValueError, KeyError):
            continue  # no family matches this problem
        if not rows:
            continue
        row = rows[0]
        d = row["result"]["device"]
        device = {"name": d["name"], "uuid": d["uuid"], "compute_capability": "0.0"}
        source = open(row["file"]).read()
        entry_point = next(line.split()[3] for line in source.splitlines() if line.startswith("// kiln: launch"))
        shutil.copy(row["file"], os.path.join(lib_dir, name + ".c"))
        definition = json.load(open(os.path.join(pdir, "definition.json")))
        k = definition["kiln"]

        def gate_tensor(n, spec):
            return {"name": n, "dtype": spec["dtype"], "shape": k["shapes"][n], "strides": k["strides"][n],
                    "storage_offset": k["storage_offsets"][n], "layout": k["layouts"][n]}
        ctype = {"float32": "float", "float64": "double", "bfloat16": "kiln_bf16", "float16": "kiln_f16"}
        params = [f"const {ctype[s['dtype']]}* {n}" for n, s in definition["inputs"].items()]
        params += [f"{ctype[s['dtype']]}* {n}" for n, s in definition["outputs"].items()]
        params += [f"int64_t {a}" for a in definition["axes"]]
        entry = {
            "problem": name, "kind": k["kind"],
            "gate": {"inputs": [gate_tensor(n, s) for n, s in definition["inputs"].items()],
                     "outputs": [gate_tensor(n, s) for n, s in definition["outputs"].items()],
                     "args": k.get("args"), "grad_mode": k.get("grad_mode"), "device_capability": "0.0"},
            "kernel": name + ".c", "signature": f"void {entry_point}({', '.join(params)})",
            "launches": [{"workloads": [0], "axes": {a: v["value"] for a, v in definition["axes"].items()},
                          "launches": [{"entry": entry_point, "grid": [1, 1, 1], "block": [1, 1, 1],
                                        "cluster": [1, 1, 1], "smem_bytes": 0}], "scratch_bytes": 0}],
            "time_us": {"kiln": row["result"].get("summary", {}).get("time_us_geomean"), "eager": None},
            "speedup": None,
        }
        if k["kind"] == "aten":
            entry["aten"] = k["aten"]
        else:
            entry["module_class"], entry["module_paths"] = k["module_class"], k["module_paths"]
        entries.append(entry)
    manifest = {"kiln_library": 1, "backend": "cpu", "device": device, "build": {"kiln": kiln.__version__, "nvrtc": None},
                "entries": entries}
    with open(os.path.join(lib_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return lib_dir


@pytest.fixture(scope="session")
def library(tmp_path_factory):
    """{"dir": RUN/library, "run": RUN, "source": how it was built, "tune": the kiln tune process}."""
    if not os.path.exists(KILN) or not os.path.exists(os.path.join(ROOT, "build", "libkiln_rt.so")):
        pytest.fail("build/kiln and build/libkiln_rt.so are missing: run `make` first")
    run = str(tmp_path_factory.mktemp("install_run"))
    # --time 300: the default 120 s ran out on a loaded 2-core machine before the three smallest problems
    # (rsqrt and the two muls, which the dispatch tests call) had a candidate, with or without this session's
    # change (the linear problem's cpu GEMM candidates take seconds each)
    tune = _kiln(["tune", SCRIPT, "--out", run, "--backend", "cpu", "--budget", "4", "--rounds", "1",
                  "--no-compile", "--time", "300", "--", "--iters", "2"])
    lib_dir = os.path.join(run, "library")
    source = "kiln tune (capture + kiln optimize + install check)"
    if tune.returncode != 0 or not os.path.exists(os.path.join(lib_dir, "manifest.json")):
        if not os.path.isdir(os.path.join(run, "problems")):
            pytest.fail(f"kiln tune failed before capture finished:\n{tune.stdout[-3000:]}\n{tune.stderr[-3000:]}")
        _hand_library(run)
        source = f"kiln capture + kiln sweep + a hand-written manifest (kiln tune: {tune.stderr.strip()[-300:]})"
    names = [e["problem"] for e in json.load(open(os.path.join(lib_dir, "manifest.json")))["entries"]]
    assert any(n.startswith("softmax_int") for n in names), names
    assert any(n.startswith("module_RMSNorm") for n in names), names
    return {"dir": lib_dir, "run": run, "source": source, "tune": tune}


@pytest.fixture(scope="session")
def opened(library):
    lib = Library(library["dir"])
    yield lib
    kiln.uninstall()
    lib.close()


@pytest.fixture(autouse=True)
def _nothing_installed_after():
    yield
    kiln.uninstall()


def _model():
    torch.manual_seed(0)
    m = TinyModel(HIDDEN).eval()
    with torch.no_grad():
        m.norm.weight.uniform_(0.5, 1.5)
    return m


def _copy_library(library, tmp_path) -> str:
    dst = str(tmp_path / "library")
    shutil.copytree(library["dir"], dst)
    return dst


def _edit_manifest(lib_dir: str, edit) -> None:
    path = os.path.join(lib_dir, "manifest.json")
    m = json.load(open(path))
    edit(m)
    with open(path, "w") as f:
        json.dump(m, f, indent=1)


def _dispatch_rows(op: str) -> list:
    return [row for row in torch._C._dispatch_dump_table(op).splitlines()
            if row.startswith(("CPU:", "AutogradCPU:", "CUDA:", "AutogradCUDA:"))]


# ---------------------------------------------------------------------------------------------------
# libkiln_rt.

def test_library_loads_with_its_entries(library, opened):
    assert opened.backend == "cpu"
    assert opened.info["kiln_version"] == kiln.__version__
    kinds = {e.kind for e in opened.entries}
    assert {"aten", "module"} <= kinds
    for e in opened.entries:
        assert e.disabled is None, (e.name, e.disabled)
        assert e.inputs and e.outputs


def test_c_gate_and_python_gate_agree(opened):
    """kiln_rt_match (C) admits exactly what the generated Python gate admits."""
    e = next(e for e in opened.entries if e.name.startswith("softmax_int"))
    inst = kiln.install(opened, entries=[e.name])
    x = torch.randn(ROWS, HIDDEN)
    cases = {
        "hit": x,
        "other shape": torch.randn(ROWS // 2, HIDDEN),
        "other dtype": x.double(),
        "other strides": torch.randn(HIDDEN, ROWS).t(),
        "misaligned": torch.randn(ROWS * HIDDEN + 1)[1:].view(ROWS, HIDDEN),
    }
    for what, t in cases.items():
        c_hit, reason = opened.match(e, [t])
        before = inst.stats()["entries"][e.name]["hits"]
        with torch.inference_mode():
            torch.softmax(t, dim=-1)
        py_hit = inst.stats()["entries"][e.name]["hits"] > before
        assert c_hit == py_hit == (what == "hit"), (what, c_hit, py_hit, reason)
        if not c_hit:
            assert reason, what
    assert "dimension 0 is 32" in opened.match(e, [cases["other shape"]])[1]
    assert "16-byte" in opened.match(e, [cases["misaligned"]])[1]


def test_launch_checks_its_arguments(opened):
    e = opened.entries[0]
    with pytest.raises(KilnError, match="pointers"):
        opened.launch(e, [torch.empty(4)])  # too few pointers: refused, nothing runs


# ---------------------------------------------------------------------------------------------------
# Installing into the model.

def test_gate_hits_match_eager(opened):
    model, x = _model(), torch.randn(ROWS, HIDDEN)
    with torch.inference_mode():
        ref = model(x)
        eager_norm = model.norm(x)
    inst = kiln.install(opened, model=model, entries="all")
    with torch.inference_mode():
        got = model(x)
        got_norm = model.norm(x)
    stats = inst.stats()
    softmax = next(n for n in stats["entries"] if n.startswith("softmax_int"))
    rms = next(n for n in stats["entries"] if n.startswith("module_RMSNorm"))
    assert stats["entries"][softmax]["hits"] == 1
    assert stats["entries"][rms]["hits"] == 2
    assert ("norm", "RMSNorm") in stats["modules_bound"]
    for a, b in ((got, ref), (got_norm, eager_norm)):
        assert a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_gate_misses_fall_back_exactly(opened):
    """Another shape, other strides, a misaligned start, another non-tensor argument: each misses the gate
    and PyTorch's own kernel (or the module's own forward) computes exactly what eager computes."""
    model = _model()
    softmax = next(e.name for e in opened.entries if e.name.startswith("softmax_int"))
    rms = next(e.name for e in opened.entries if e.name.startswith("module_RMSNorm"))
    cases = {
        "other shape": torch.randn(ROWS // 2, HIDDEN),
        "other strides": torch.randn(HIDDEN, ROWS).t(),
        "misaligned": torch.randn(ROWS * HIDDEN + 1)[1:].view(ROWS, HIDDEN),
    }
    z = torch.randn(ROWS, HIDDEN)
    with torch.inference_mode():
        ref_norm = {k: model.norm(t) for k, t in cases.items()}
        ref_softmax = {k: torch.softmax(t, dim=-1) for k, t in cases.items()}
        ref_dim0 = torch.softmax(z, dim=0)
        ref_model_small = model(cases["other shape"])
    inst = kiln.install(opened, model=model, entries=[softmax, rms])
    with torch.inference_mode():
        for k, t in cases.items():
            got = model.norm(t)
            assert torch.equal(got, ref_norm[k]) and got.stride() == ref_norm[k].stride(), k
            got = torch.softmax(t, dim=-1)
            assert torch.equal(got, ref_softmax[k]) and got.stride() == ref_softmax[k].stride(), k
        # the captured shape with another non-tensor argument (dim 0, not -1)
        assert torch.equal(torch.softmax(z, dim=0), ref_dim0)
    stats = inst.stats()
    assert stats["hits"] == 0, stats
    assert stats["targets"]["aten::softmax.int"]["misses"] == len(cases) + 1
    assert stats["targets"]["module RMSNorm"]["misses"] == len(cases)
    kiln.uninstall()
    # every entry installed, the model on a batch of another size: every gate misses
    inst = kiln.install(opened, model=model, entries="all")
    with torch.inference_mode():
        assert torch.equal(model(cases["other shape"]), ref_model_small)
    assert inst.stats()["hits"] == 0 and inst.stats()["misses"] > 0


def _same_values(a, b) -> bool:
    """Bitwise-equal values, NaN where the other has NaN (any dtype, complex half included)."""
    wide = torch.complex128 if a.is_complex() else torch.float64
    a, b = a.to(wide), b.to(wide)
    return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())


def test_wrapped_numbers_fall_back_exactly():
    """`x + 1e-6` reaches a Python kernel with a float where the schema has a Tensor; the fallback turns it
    back into a tensor that promotes and computes as PyTorch's wrapped number does."""
    fails = []
    for op in (torch.ops.aten.add.Tensor, torch.ops.aten.mul.Tensor, torch.ops.aten.div.Tensor,
               torch.ops.aten.sub.Tensor, torch.ops.aten.pow.Tensor_Tensor):
        original = torch.library.get_kernel(op, "CPU")
        numbers = _number_positions(op)
        keyset = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
        for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32, torch.int64,
                      torch.uint8, torch.bool, torch.complex64):
            for shape in ((5, 3), ()):  # a dimensioned tensor, and a 0-dim one
                for scalar in (1e-6, 1.5, 3, True, -2, 0.1, 1 + 2j):
                    x = (torch.randn(shape, generator=torch.Generator().manual_seed(1)) * 4).to(dtype)
                    try:
                        ref = op(x, scalar)
                    except RuntimeError:
                        continue
                    args, kwargs, finish = _boxable((x, scalar), {}, *numbers)
                    got = finish(original.call_boxed(keyset, *args, **kwargs))
                    if got.dtype != ref.dtype or got.shape != ref.shape or not _same_values(got, ref):
                        fails.append((op, dtype, shape, scalar, got.dtype, ref.dtype))
    assert not fails, fails


def test_a_tensor_where_a_constant_was_captured_misses_without_printing_it(monkeypatch):
    """An entry captured as `x + 1.0` (a constant at position 1) and a live `x + y` (a tensor there): the gate
    misses, and does not compare str(y) with the constant (torch's repr of the tensor: milliseconds a call on
    the CPU, a device sync and a copy on CUDA, on every residual add that misses)."""
    from kiln.install_gate import _bind_template, _same_constant
    y = torch.randn(64, 512)
    printed = []
    monkeypatch.setattr(torch.Tensor, "__repr__", lambda self, *a, **k: printed.append(1) or "tensor")
    monkeypatch.setattr(torch.Tensor, "__str__", lambda self, *a, **k: printed.append(1) or "tensor")
    assert not _same_constant(y, 1.0) and not _same_constant(y, "tensor") and not _same_constant(y, None)
    assert not _same_constant([y], [1.0]) and not _bind_template([1.0, 2.0], (y, 2.0), [])
    assert _same_constant(torch.float32, "torch.float32")  # torch types are still compared as captured
    assert not printed


def test_number_arguments_miss_exactly_through_the_installation(opened):
    """The same through kiln's registered kernel: aten::add.Tensor and aten::mul.Tensor are overridden by
    the library, and calls with Python numbers on other shapes and dtypes miss and stay bitwise eager."""
    names = [e.name for e in opened.entries if e.aten in ("aten::add.Tensor", "aten::mul.Tensor")]
    if not names:
        pytest.skip("the library has no aten::add.Tensor or aten::mul.Tensor entry")
    g = torch.Generator().manual_seed(2)
    cases = [(torch.randn(shape, generator=g) * 4).to(dtype)
             for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.int32, torch.bool)
             for shape in ((7, 3), ())]
    calls = [lambda x: x + 1e-6, lambda x: x * 0.1, lambda x: 1.5 * x, lambda x: x + 3]
    with torch.inference_mode():
        refs = [[f(x) for f in calls] for x in cases]
    inst = kiln.install(opened, entries=names)
    with torch.inference_mode():
        for x, ref in zip(cases, refs):
            for f, r in zip(calls, ref):
                got = f(x)
                assert got.dtype == r.dtype and got.shape == r.shape and _same_values(got, r), (x.dtype, x.shape)
    assert inst.stats()["hits"] == 0 and inst.stats()["misses"] > 0


def test_grad_falls_back_and_autograd_works(opened):
    model = _model()
    x = torch.randn(ROWS, HIDDEN, requires_grad=True)
    ref = model(x)
    ref.sum().backward()
    ref_grad, ref_wgrad = x.grad.clone(), model.norm.weight.grad.clone()
    x.grad = None
    model.zero_grad()
    inst = kiln.install(opened, model=model, entries="all")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "autograd kernel was not registered" warning
        got = model(x)
        stats = inst.stats()  # the forward: everything fell back
        got.sum().backward()  # the backward runs without grad: kiln's kernels may serve its ops
    assert torch.equal(got, ref) and got.grad_fn is not None
    assert stats["hits"] == 0
    assert stats["targets"]["aten::softmax.int"]["grad_fallbacks"] == 1
    assert stats["targets"]["module RMSNorm"]["grad_fallbacks"] == 1
    torch.testing.assert_close(x.grad, ref_grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(model.norm.weight.grad, ref_wgrad, rtol=1e-4, atol=1e-6)


def test_no_grad_mode_hits(opened):
    """Under no_grad the Autograd key is not skipped: composite ops come through kiln's autograd kernel."""
    model, x = _model(), torch.randn(ROWS, HIDDEN)
    with torch.no_grad():
        ref = model(x)
    inst = kiln.install(opened, model=model, entries="all")
    with torch.no_grad():
        got = model(x)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)
    assert inst.stats()["targets"]["aten::softmax.int"]["hits"] == 1


def test_uninstall_restores_eager_bitwise(opened):
    model, x = _model(), torch.randn(ROWS, HIDDEN)
    tables = {op: _dispatch_rows(op) for op in ("aten::softmax.int", "aten::mul.Tensor", "aten::add.Tensor")}
    with torch.inference_mode():
        ref = model(x)
    kiln.install(opened, model=model, entries="all")
    assert "forward" in model.norm.__dict__
    with torch.inference_mode():
        model(x)
    kiln.uninstall()
    assert installed() is None
    assert "forward" not in model.norm.__dict__
    for op, rows in tables.items():
        assert _dispatch_rows(op) == rows, op
    with torch.inference_mode():
        again = model(x)
    assert torch.equal(again, ref)


TWO_SHAPES = os.path.join(ROOT, "tests", "data", "install", "two_shapes.py")


@pytest.fixture(scope="module")
def two_shapes_library(tmp_path_factory):
    """tests/data/install/two_shapes.py captured and its two module problems (one module, a prefill's shape and
    a decode step's) optimized on the cpu backend: the library directory."""
    run = str(tmp_path_factory.mktemp("two_shapes"))
    cap = subprocess.run([sys.executable, "-m", "kiln.capture", TWO_SHAPES, "--out", run, "--device", "cpu",
                          "--quiet"], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert cap.returncode == 0, cap.stdout[-3000:] + cap.stderr[-3000:]
    for p in glob.glob(os.path.join(run, "problems", "*")):
        if not os.path.basename(p).startswith("module_NewGELUActivation"):
            shutil.rmtree(p)
    opt = _kiln(["optimize", run, "--backend", "cpu", "--budget", "1", "--time", "300"])
    assert opt.returncode == 0, opt.stdout[-3000:] + opt.stderr[-3000:]
    return os.path.join(run, "library")


@pytest.mark.parametrize("dispatch,compile", [("python", False), ("cpp", False), ("python", True)])
def test_one_module_with_an_entry_per_shape(two_shapes_library, dispatch, compile):
    """Both entries of a module called at two shapes are bound to it (a binding per entry, each falling back to
    the one bound before, the last to the module's own forward): a prefill-shaped call and a decode-step call
    each hit their own entry, a third shape misses, and all three give eager's output, in eager (both dispatch
    paths) and inside torch.compile. One binding a module left the decode step's entry unused (kiln tune on
    GPT-2's generate: 'the gate did not admit the entry's own captured call')."""
    sys.path.insert(0, os.path.dirname(TWO_SHAPES))
    try:
        import two_shapes as ts
    finally:
        sys.path.pop(0)
    names = sorted(e["problem"] for e in json.load(open(os.path.join(two_shapes_library, "manifest.json")))["entries"])
    assert names == ["module_NewGELUActivation_2x16x64_f32", "module_NewGELUActivation_2x1x64_f32"], names
    model = ts.build()
    prefill, step = ts.inputs()
    other = torch.randn(ts.BATCH, 3, ts.HIDDEN)
    with torch.inference_mode():
        want = [model(x) for x in (prefill, step, other)]
    torch._dynamo.reset()
    inst = kiln.install(two_shapes_library, model=model, entries="all", dispatch=dispatch, compile=compile)
    try:
        with torch.inference_mode():
            got = [model(x) for x in (prefill, step, other)]
        stats = inst.stats()
        assert [stats["entries"][n]["hits"] for n in names] == [1, 1], stats
        assert compile or stats["targets"]["module NewGELUActivation"]["misses"] >= 1, stats
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    finally:
        kiln.uninstall(inst)
        torch._dynamo.reset()
    with torch.inference_mode():
        assert torch.equal(model(step), want[1])
    assert "forward" not in model.act.__dict__ and type(model.act) is ts.NewGELUActivation


def test_modules_found_without_a_model(opened):
    """kiln run's path: no model given; the first forward binds the modules and the hook removes itself."""
    from torch.nn.modules import module as nn_module
    hooks_before = len(nn_module._global_forward_pre_hooks)
    model, x = _model(), torch.randn(ROWS, HIDDEN)
    with torch.inference_mode():
        ref = model(x)
    inst = kiln.install(opened, entries="all")
    assert len(nn_module._global_forward_pre_hooks) == hooks_before + 1
    with torch.inference_mode():
        got = model(x)
    assert len(nn_module._global_forward_pre_hooks) == hooks_before
    stats = inst.stats()
    assert ("norm", "RMSNorm") in stats["modules_bound"]
    assert stats["targets"]["module RMSNorm"]["hits"] == 1
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)


def test_module_tensors_read_fast_are_getattrs():
    """A hit reads the module's parameters and buffers from their dicts (tensors_of): the same objects that
    getattr gives (what dynamo traces), also after a parameter is replaced, becomes a plain attribute, or
    is gone, and for activations that are not the first gate input."""
    from kiln.install_module import _ModuleEntry
    m = torch.nn.BatchNorm1d(4)
    x, y = torch.randn(2, 4), torch.randn(2, 4)
    me = _ModuleEntry.__new__(_ModuleEntry)
    me.attr_names, me._inserts = ["weight", "running_mean", "nothing"], [(0, 0)]
    fast = me.tensors_of(m)

    def same(a, b):
        return len(a) == len(b) and all(p is q for p, q in zip(a, b))
    assert same(fast(m, (x,)), me.tensors(m, (x,)))
    assert fast(m, (x,))[1] is m.weight and fast(m, (x,))[3] is None
    m.weight = torch.nn.Parameter(torch.ones(4))  # replaced: the dict has the new one
    assert same(fast(m, (x,)), me.tensors(m, (x,)))
    del m.weight
    m.weight = torch.zeros(4)  # now a plain attribute, in __dict__: read by getattr
    assert same(fast(m, (x,)), me.tensors(m, (x,))) and fast(m, (x,))[1] is m.weight
    me._inserts = [(1, 0), (3, 1)]  # two activations between the attributes
    fast = me.tensors_of(m)
    assert same(fast(m, (x, y)), me.tensors(m, (x, y))) and fast(m, (x, y))[1] is x
    assert fast(m, (x, y))[3] is y


def test_second_install_is_refused_until_uninstall(opened):
    kiln.install(opened, entries="all")
    with pytest.raises(KilnError, match="installed already"):
        kiln.install(opened, entries="all")
    kiln.uninstall()
    kiln.install(opened, entries="all")


def test_default_entries_follow_install_json(library, tmp_path):
    lib_dir = _copy_library(library, tmp_path)
    lib = Library(lib_dir)
    decided = {e.name: {"install": e.name.startswith("softmax_int"), "reason": "test"} for e in lib.entries}
    with open(os.path.join(lib_dir, "install.json"), "w") as f:
        json.dump({"kiln_install": 1, "manifest_sha256": lib.manifest_digest(), "entries": decided}, f)
    inst = kiln.install(lib)
    assert [n for n in inst.installed] == [n for n in decided if decided[n]["install"]]
    assert all(why == "kiln tune: test" for why in inst.skipped.values())
    kiln.uninstall()
    _edit_manifest(lib_dir, lambda m: m.update(written_unix_s=1))  # another manifest: decisions ignored
    lib.close()
    lib = Library(lib_dir)
    inst = kiln.install(lib)
    # the library's own judgement instead (kiln.install_cost): every entry decided, none by the old file
    assert set(inst.installed) | set(inst.skipped) == {e.name for e in lib.entries}
    assert not any(why.startswith("kiln tune") for why in inst.skipped.values())
    assert any("another manifest" in n for n in inst.notes)
    kiln.uninstall()
    lib.close()


def test_compile_follows_install_json_s_compile_decision(library, tmp_path):
    """kiln tune decides apart which entries go inside torch.compile (its "compile": the compiled model was
    timed against torch.compile alone): install(compile=True) follows it, a plain install follows
    "install", and an entry without a "compile" decision follows "install" in both."""
    lib_dir = _copy_library(library, tmp_path)
    lib = Library(lib_dir)
    decided = {e.name: {"install": True, "reason": "won"} for e in lib.entries}
    first = lib.entries[0].name
    decided[first].update(compile=False, compile_reason="compile test")
    with open(os.path.join(lib_dir, "install.json"), "w") as f:
        json.dump({"kiln_install": 1, "manifest_sha256": lib.manifest_digest(), "entries": decided}, f)
    inst = kiln.install(lib, compile=True)
    assert first not in inst.installed and inst.skipped[first] == "kiln tune: compile test"
    assert set(inst.installed) | set(inst.skipped) == set(decided)
    kiln.uninstall()
    inst = kiln.install(lib)
    assert first in inst.installed
    kiln.uninstall()
    lib.close()


def _judged_library(library, tmp_path) -> tuple:
    """A copy of the library without install.json whose entries say, as `kiln optimize` writes it: softmax
    beats eager by far (eager 1 s), RMSNorm was slower than eager in the gate, every other entry beats
    eager by a hair that no dispatch cost leaves (0.1 us)."""
    lib_dir = _copy_library(library, tmp_path)
    if os.path.exists(os.path.join(lib_dir, "install.json")):
        os.remove(os.path.join(lib_dir, "install.json"))

    def judge(m):
        for e in m["entries"]:
            e["spread_pct"] = {"kiln": 1.0, "eager": 1.0}
            if e["problem"].startswith("softmax_int"):
                e["time_us"].update(kiln=10.0, eager=1e6)
                e["speedup_verdict"], e["speedup"] = "supported", 1e5
                e["install"] = {"beats_eager": True, "reason": "1e5x over eager in the gate"}
            elif e["problem"].startswith("module_RMSNorm"):
                e["time_us"].update(kiln=20.0, eager=10.0)
                e["speedup_verdict"], e["speedup"] = "supported", 0.5
                e["install"] = {"beats_eager": False, "reason": "slower than eager in the gate (20.00 us against "
                                                                 "10.00 us)"}
            else:
                e["time_us"].update(kiln=10.0, eager=10.1)
                e["speedup_verdict"], e["speedup"] = "supported", 1.01
                e["install"] = {"beats_eager": True, "reason": "1.01x over eager in the gate"}
    _edit_manifest(lib_dir, judge)
    names = [e["problem"] for e in json.load(open(os.path.join(lib_dir, "manifest.json")))["entries"]]
    return lib_dir, names


def test_default_entries_beat_eager_with_dispatch(library, tmp_path):
    """Without install.json, kiln.install installs an entry only where its kernel beat eager in the gate and
    still does with the dispatch cost it measures: the 1e5x softmax goes in, the RMSNorm that was slower in
    the gate and the entries that win by 0.1 us (less than any dispatch) stay out, each with its reason."""
    lib_dir, names = _judged_library(library, tmp_path)
    inst = kiln.install(lib_dir, model=_model())
    softmax = next(n for n in names if n.startswith("softmax_int"))
    rms = next(n for n in names if n.startswith("module_RMSNorm"))
    assert inst.installed == [softmax], inst.summary()
    assert inst.left_out[rms] == "slower than eager" and inst.skipped[rms].startswith("slower than eager")
    for n in names:
        if n not in (softmax, rms):
            assert inst.left_out[n] == "slower with dispatch", (n, inst.skipped.get(n))
            assert "dispatch" in inst.skipped[n]
    cost = inst.dispatch_cost_us.get("python")
    assert cost is not None and cost > 0.1, inst.notes
    assert any(n.startswith("dispatch cost: ") for n in inst.notes)
    kiln.uninstall()
    # "all" still means every usable entry, whatever the library says
    inst = kiln.install(lib_dir, model=_model(), entries="all")
    assert set(inst.installed) == set(names)


def test_kiln_run_installs_only_what_beats_eager(library, tmp_path):
    """`kiln optimize` -> `kiln run`: entries the library says are slower than eager are not installed, and
    run's one line says what went in and what was left out, and why."""
    lib_dir, names = _judged_library(library, tmp_path)
    stats_path = str(tmp_path / "stats.json")
    p = _kiln(["run", "--library", lib_dir, "--stats-json", stats_path, SCRIPT, "--iters", "1"], timeout=300)
    assert p.returncode == 0, p.stderr
    line = next(ln for ln in p.stderr.splitlines() if ln.startswith("kiln run: installed"))
    assert line.startswith(f"kiln run: installed 1 of {len(names)} entries (aten::softmax.int); "
                           f"left out {len(names) - 1}: "), line
    assert "1 slower than eager" in line and f"{len(names) - 2} slower with dispatch" in line, line
    record = json.load(open(stats_path))
    assert [n for n in record["installed"]] == [n for n in names if n.startswith("softmax_int")]
    assert record["stats"]["targets"]["aten::softmax.int"]["hits"] >= 1
    assert "module RMSNorm" not in record["stats"]["targets"] or \
        record["stats"]["targets"]["module RMSNorm"]["hits"] == 0


# ---------------------------------------------------------------------------------------------------
# Refusals: nothing installed, the model runs eagerly.

def _refused(lib_dir: str, match: str):
    model, x = _model(), torch.randn(ROWS, HIDDEN)
    tables = _dispatch_rows("aten::softmax.int")
    with torch.inference_mode():
        ref = model(x)
    with pytest.raises(LibraryRefused, match=match) as info:
        kiln.install(lib_dir, model=model)
    assert installed() is None
    assert _dispatch_rows("aten::softmax.int") == tables
    assert "forward" not in model.norm.__dict__
    with torch.inference_mode():
        assert torch.equal(model(x), ref)
    return str(info.value)


def test_refuses_another_device(library, tmp_path):
    lib_dir = _copy_library(library, tmp_path)
    _edit_manifest(lib_dir, lambda m: m.update(device={"name": "Some Other CPU", "uuid": "cpu-0123456789abcdef",
                                                       "compute_capability": "0.0"}))
    msg = _refused(lib_dir, "built on another device")
    assert "Some Other CPU" in msg and "cpu-0123456789abcdef" in msg


def test_refuses_another_kiln_build(library, tmp_path):
    lib_dir = _copy_library(library, tmp_path)
    _edit_manifest(lib_dir, lambda m: m["build"].update(kiln="9.9.9"))
    _refused(lib_dir, "built by kiln 9.9.9; this runtime is kiln " + re.escape(kiln.__version__))


def test_refuses_corrupt_json(library, tmp_path):
    lib_dir = _copy_library(library, tmp_path)
    with open(os.path.join(lib_dir, "manifest.json"), "a") as f:
        f.write("\n{ not json")
    _refused(lib_dir, "corrupt manifest: not valid JSON")


def test_refuses_missing_kernel_file(library, tmp_path):
    lib_dir = _copy_library(library, tmp_path)
    manifest = json.load(open(os.path.join(lib_dir, "manifest.json")))
    os.remove(os.path.join(lib_dir, manifest["entries"][0]["kernel"]))
    _refused(lib_dir, f"kernel file '{manifest['entries'][0]['kernel']}' is missing")


def test_refuses_a_signature_that_does_not_fit_its_gate(library, tmp_path):
    lib_dir = _copy_library(library, tmp_path)
    _edit_manifest(lib_dir, lambda m: m["entries"][0].update(signature="void kiln_kernel(const float* x)"))
    _refused(lib_dir, "takes 1 parameters, but its gate and axes imply")


def test_refuses_a_missing_field(library, tmp_path):
    lib_dir = _copy_library(library, tmp_path)
    _edit_manifest(lib_dir, lambda m: m["entries"][0].pop("gate"))
    _refused(lib_dir, "no \"gate\"")


def test_refuses_a_kernel_that_does_not_build(library, tmp_path):
    lib_dir = _copy_library(library, tmp_path)
    manifest = json.load(open(os.path.join(lib_dir, "manifest.json")))
    path = os.path.join(lib_dir, manifest["entries"][0]["kernel"])
    with open(path, "a") as f:
        f.write("\nthis is not C;\n")
    _refused(lib_dir, "does not build here")


def test_refuses_not_a_library(tmp_path):
    _refused(str(tmp_path), "not a kiln library")


def test_refuses_a_cuda_library_without_a_gpu(library, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the cuda refusal is for machines without one")
    lib_dir = _copy_library(library, tmp_path)
    _edit_manifest(lib_dir, lambda m: m.update(backend="cuda", device={"name": "NVIDIA H200", "uuid": "GPU-x",
                                                                        "compute_capability": "9.0"}))
    _refused(lib_dir, "a cuda library, but (no NVIDIA driver|no CUDA device|no usable CUDA device)")


# ---------------------------------------------------------------------------------------------------
# The commands.

def _checksum(text: str) -> float:
    return float(text.strip().split("checksum")[-1])


def test_kiln_run_installs_and_counts(library, tmp_path):
    stats_path = str(tmp_path / "stats.json")
    eager = subprocess.run([sys.executable, SCRIPT, "--iters", "2"], env=_env(), capture_output=True,
                           text=True, timeout=300)
    assert eager.returncode == 0, eager.stderr
    p = _kiln(["run", "--library", library["dir"], "--entries", "all", "--stats", "--stats-json", stats_path,
               SCRIPT, "--iters", "2"], timeout=300)
    assert p.returncode == 0, p.stderr
    assert abs(_checksum(p.stdout) - _checksum(eager.stdout)) < 1e-3
    stats = json.load(open(stats_path))["stats"]
    assert stats["targets"]["aten::softmax.int"]["hits"] == 2
    assert stats["targets"]["module RMSNorm"]["hits"] == 2
    assert "kernel calls by kiln" in p.stderr


def test_kiln_run_with_a_refused_library_runs_eagerly(library, tmp_path):
    lib_dir = _copy_library(library, tmp_path)
    _edit_manifest(lib_dir, lambda m: m["build"].update(kiln="9.9.9"))
    eager = subprocess.run([sys.executable, SCRIPT, "--iters", "1"], env=_env(), capture_output=True,
                           text=True, timeout=300)
    p = _kiln(["run", "--library", lib_dir, SCRIPT, "--iters", "1"], timeout=300)
    assert p.returncode == 0, p.stderr
    assert "library refused" in p.stderr and "running the script eagerly" in p.stderr
    assert _checksum(p.stdout) == _checksum(eager.stdout)
    strict = _kiln(["run", "--library", lib_dir, "--strict", SCRIPT, "--iters", "1"], timeout=300)
    assert strict.returncode == 1


def test_kiln_run_usage_errors():
    p = _kiln(["run", SCRIPT])
    assert p.returncode == 2 and "no library" in p.stderr
    p = _kiln(["run", "--library", "x", "no_such_script.py"])
    assert p.returncode == 2 and "no such script" in p.stderr


def test_kiln_tune_report(library):
    """The fixture's `kiln tune`: the report has the model line and one row per entry, with a reason for
    every entry that was not installed; install.json matches the manifest."""
    report = json.load(open(os.path.join(library["run"], "report.json")))
    md = open(os.path.join(library["run"], "report.md")).read()
    m = report["model"]
    assert m["root"] == "TinyModel" and m["grad_mode"] == "inference"
    assert m["eager_ms"] > 0 and m["kiln_ms"] > 0
    assert m["kiln_max_abs_diff"] is not None and m["kiln_max_abs_diff"] < 1e-4
    names = {e["problem"] for e in json.load(open(os.path.join(library["dir"], "manifest.json")))["entries"]}
    assert {r["name"] for r in report["entries"]} == names
    for r in report["entries"]:
        assert isinstance(r["installed"], bool) and r["reason"]
    # a cpu library keeps the Python path by default, and the report says which path the timed entries took
    assert report["library"]["dispatch"] == "python"
    timed = [r for r in report["entries"] if r.get("op_kiln_us") is not None]
    assert all(r["dispatch"] == "python" for r in timed), timed
    if timed:
        assert "the entries timed took Python" in md
    decisions = json.load(open(os.path.join(library["dir"], "install.json")))
    assert set(decisions["entries"]) == names
    assert "## Model forward" in md and "## Entries" in md and "TinyModel" in md
    if "kiln tune" not in library["source"]:
        pytest.skip(f"the library was built by hand: {library['source']}")


def test_tune_bare_launch_runs_the_kernel(opened):
    """tune's bare launch, the baseline of its "hit overhead" column, is the fast path a gate hit ends with
    (arguments made once, no ctypes conversion), and it really runs the entry's kernel."""
    from kiln.tune import EntryBench
    e = next(e for e in opened.entries if e.name.startswith("softmax_int"))
    b = EntryBench(e, opened, {})
    launch = b.raw(opened)
    b.outputs[0].zero_()
    assert launch() == 0
    torch.testing.assert_close(b.outputs[0], torch.softmax(b.inputs[0], -1), rtol=1e-4, atol=1e-5)


def test_tune_bare_launch_zeroes_scratch_each_time(tmp_path):
    """An entry with scratch memory gets it zeroed before every launch, the bare launch's loop included (a
    kernel may keep counters there that it does not reset: one faulted on the H200 when tune's timing loop
    launched it again on a used buffer). The kernel here writes NaN when it finds its mark of a launch before."""
    from hand_library import softmax_library

    from kiln.tune import EntryBench
    lib = Library(softmax_library(tmp_path, scratch=True))
    try:
        (e,) = lib.entries
        assert e.has_scratch
        b = EntryBench(e, lib, {})
        for _ in range(2):  # tune makes the bare launch again each round, on the scratch the last one used
            b.outputs[0].zero_()
            launch = b.raw(lib)
            torch.testing.assert_close(b.outputs[0], torch.softmax(b.inputs[0], -1), rtol=1e-4, atol=1e-5)
            for _ in range(3):
                b.outputs[0].zero_()
                assert launch() == 0
                torch.testing.assert_close(b.outputs[0], torch.softmax(b.inputs[0], -1), rtol=1e-4, atol=1e-5)
        with torch.no_grad():  # and a hit, through the dispatcher
            inst = kiln.install(lib, entries="all")
            try:
                want = torch.softmax(b.inputs[0].double(), -1).float()
                for _ in range(2):
                    torch.testing.assert_close(torch.softmax(b.inputs[0], -1), want, rtol=1e-4, atol=1e-5)
                assert inst.stats()["hits"] == 2
            finally:
                kiln.uninstall()
    finally:
        lib.close()


def _edited_softmax_library(tmp_path, **changes) -> Library:
    """softmax_library with its one entry's fields changed (None: removed from the gate)."""
    from hand_library import softmax_library
    path = softmax_library(tmp_path)
    manifest = json.loads(open(os.path.join(path, "manifest.json")).read())
    (e,) = manifest["entries"]
    for k, v in changes.items():
        if k == "args":
            e["gate"][k] = v
        else:
            e[k] = v
    open(os.path.join(path, "manifest.json"), "w").write(json.dumps(manifest))
    return Library(path)


def test_an_entry_install_refuses_is_skipped_not_a_crash(tmp_path):
    """An aten entry refused while its call template is built (here: no captured arguments) is skipped with
    its reason; it once left an empty group behind that made install() raise IndexError."""
    lib = _edited_softmax_library(tmp_path, args=None)
    try:
        inst = kiln.install(lib, entries="all")
        try:
            (e,) = lib.entries
            assert e.name not in inst.installed and "no captured arguments" in inst.skipped[e.name], inst.skipped
        finally:
            kiln.uninstall()
    finally:
        lib.close()


def test_tune_times_an_entry_through_the_binding_a_model_calls(tmp_path):
    """The per-call benchmark calls torch._softmax (the Python binding a model's call reaches) rather than
    torch.ops.aten._softmax.default, once one call of it is shown to be exactly one hit of the entry: the
    torch.ops path's own Python costs microseconds per call that no model pays. A binding that does not
    reach the entry (here: the gate refuses its every call) keeps torch.ops."""
    from hand_library import softmax_library

    from kiln.install_cost import EntryBench, prefer_bindings
    lib = Library(softmax_library(tmp_path))
    try:
        (e,) = lib.entries
        b = EntryBench(e, lib, {})
        assert b.call_form == "torch.ops" and b.binding_call is not None
        with torch.no_grad():
            prefer_bindings(lib, {e.name: b})
            assert b.call_form == "binding"
            torch.testing.assert_close(b.call(b.inputs), torch.softmax(b.inputs[0], -1))
            b2 = EntryBench(e, lib, {})
            # the miss: the gate's tensor laid out in another order, aligned (no PyTorch kernel is handed a
            # start off a 16-byte boundary unless install_overhead.py asks for that worst case)
            (miss,) = b2.miss_inputs
            assert miss.data_ptr() % 16 == 0 and miss.stride() != b2.inputs[0].stride(), miss.stride()
            torch.testing.assert_close(b2.call([miss.contiguous()]), b2.call([miss]))
            assert [t.data_ptr() % 16 for t in b2.misaligned_inputs()] == [4]
            b2.inputs = b2.miss_inputs  # another layout: never a hit, so never shown to reach the entry
            prefer_bindings(lib, {e.name: b2})
            assert b2.call_form == "torch.ops"
    finally:
        lib.close()


CLONE_OF_A_SLICE = """
import torch
qkv = torch.randn(2, 64, 3 * 128)
with torch.no_grad():
    for _ in range(2):
        qkv.split(128, dim=2)[1].view(2, 64, 4, 32).permute(0, 2, 1, 3).contiguous()
"""
# the input is stored as its dense copy in the captured memory order, [2, 64, 4, 32] (layout "permute" [0, 2, 1, 3]):
# the clone is a transpose of the middle dims
CLONE_C = ("// kiln: launch copy_rows\n"
           "void copy_rows(const float *self, float *out0, int64_t n2, int64_t n64, int64_t n4, int64_t n32) {\n"
           "    for (int64_t b = 0; b < n2; b++)\n"
           "        for (int64_t h = 0; h < n4; h++)\n"
           "            for (int64_t t = 0; t < n64; t++)\n"
           "                for (int64_t d = 0; d < n32; d++)\n"
           "                    out0[((b * n4 + h) * n64 + t) * n32 + d] = self[((b * n64 + t) * n4 + h) * n32 + d];\n"
           "}\n")


@pytest.mark.parametrize("dispatch", ["python", "cpp"])
def test_a_clone_entry_of_a_slice_launches_once_a_call(tmp_path, dispatch):
    """An aten::clone entry whose input was captured with gaps (GPT-2's split heads made contiguous: stored
    "contiguous_copy", dense in its memory order): its gate makes that dense copy (strides in the captured
    order, on both dispatch paths) with kiln stepped aside. Tensor.contiguous() is itself an aten::clone, which
    the entry's gate admitted again: every call recursed to Python's recursion limit (~330 launches,
    milliseconds a call) before it returned the right values."""
    from hand_library import hand_library
    from kiln.install_gate import copy_strides
    lib = Library(hand_library(tmp_path, CLONE_OF_A_SLICE, "clone", CLONE_C, "copy_rows"))
    try:
        (e,) = lib.entries
        assert e.inputs[0]["layout"]["stored"] == "contiguous_copy"
        assert e.inputs[0]["layout"]["permute"] == [0, 2, 1, 3]
        assert copy_strides(e.inputs[0]) == (8192, 32, 128, 1)
        qkv = torch.randn(2, 64, 3 * 128)
        x = qkv.split(128, dim=2)[1].view(2, 64, 4, 32).permute(0, 2, 1, 3)
        ref = x.contiguous()
        if dispatch == "cpp":
            try:
                importlib.import_module("kiln.install").dispatch_extension(False)
            except KilnError as why:
                pytest.skip(f"kiln's C++ dispatch extension cannot be built here: {why}")
        inst = kiln.install(lib, entries="all", dispatch=dispatch)
        try:
            with torch.no_grad():
                for _ in range(3):
                    got = x.contiguous()
                    assert torch.equal(got, ref) and got.is_contiguous()
            assert inst.stats()["entries"][e.name]["hits"] == 3, inst.stats()
        finally:
            kiln.uninstall()
    finally:
        lib.close()


def test_tune_does_not_time_an_entry_install_never_replaces(tmp_path):
    """An out= overload (captured inside nn.TransformerEncoderLayer's fused kernel on the cpu) is never
    replaced by install: tune's per-call benchmark says so instead of failing on its call."""
    from kiln.tune import EntryBench
    lib = _edited_softmax_library(tmp_path, aten="aten::_softmax.out")
    try:
        with pytest.raises(ValueError, match="out="):
            EntryBench(lib.entries[0], lib, {})
    finally:
        lib.close()


# ---------------------------------------------------------------------------------------------------
# cuda (skips without a GPU).

@pytest.fixture(scope="session")
def cuda_library(tmp_path_factory):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to PyTorch: the cuda install tests run on the GPU machine")
    rows, hidden = 256, 4096
    given = os.environ.get("KILN_TEST_CUDA_RUN")
    if given:  # a run that `kiln tune --backend cuda` made of tiny_model.py at these sizes (bench/install_device.sh)
        assert os.path.exists(os.path.join(given, "library", "manifest.json")), given
        return {"dir": os.path.join(given, "library"), "run": given, "rows": rows, "hidden": hidden, "tune": None}
    run = str(tmp_path_factory.mktemp("install_cuda"))
    tune = _kiln(["tune", SCRIPT, "--out", run, "--backend", "cuda", "--budget", "8", "--rounds", "3",
                  "--", "--device", "cuda", "--rows", str(rows), "--hidden", str(hidden), "--iters", "3"],
                 timeout=1800)
    assert tune.returncode == 0, tune.stdout[-4000:] + tune.stderr[-4000:]
    return {"dir": os.path.join(run, "library"), "run": run, "rows": rows, "hidden": hidden, "tune": tune}


def test_cuda_hits_misses_and_graph_replay(cuda_library):
    lib = Library(cuda_library["dir"])
    rows, hidden = cuda_library["rows"], cuda_library["hidden"]
    torch.manual_seed(0)
    model = TinyModel(hidden).cuda().eval()
    x = torch.randn(rows, hidden, device="cuda")
    small = torch.randn(rows // 2, hidden, device="cuda")
    with torch.inference_mode():
        ref, ref_small = model(x), model(small)
    inst = kiln.install(lib, model=model, entries="all")
    with torch.inference_mode():
        got, got_small = model(x), model(small)
    torch.cuda.synchronize()
    assert inst.stats()["hits"] > 0, inst.stats()
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)
    assert torch.equal(got_small, ref_small)
    # inside a captured CUDA graph: the launches are recorded on the capture stream and replay correctly
    static_x = x.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.inference_mode():
        model(static_x)  # warm-up on a side stream is what torch.cuda.graph expects; this is enough here
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            static_out = model(static_x)
        static_x.copy_(torch.randn(rows, hidden, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        kiln.uninstall()
        expect = model(static_x)
    torch.testing.assert_close(static_out, expect, rtol=1e-4, atol=1e-5)
    lib.close()


def test_cuda_aten_entry_inside_torch_compile(cuda_library):
    """The softmax entry inside a torch.compile'd function on the GPU (python/kiln/install_inductor.py): one
    kiln call per compiled call where the tensor is the gate's, Inductor's code elsewhere, eager's result."""
    lib = Library(cuda_library["dir"])
    entry = next((e for e in lib.entries if e.aten == "aten::softmax.int"), None)
    if entry is None:
        lib.close()
        pytest.skip("the cuda library has no softmax entry")
    shape = tuple(entry.inputs[0]["shape"])
    x = torch.randn(*shape, device="cuda")

    def f(t):
        return torch.softmax(t.sin(), dim=-1) + 1.0
    with torch.inference_mode():
        ref = f(x)
    torch._dynamo.reset()
    inst = kiln.install(lib, entries=[entry.name])
    with torch.inference_mode():
        compiled = torch.compile(f)
        got = compiled(x)
        compiled(x)
    torch.cuda.synchronize()
    assert inst.stats()["targets"]["aten::softmax.int"]["hits"] == 2, (inst.stats(), inst.notes)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)
    kiln.uninstall()
    torch._dynamo.reset()
    lib.close()


@pytest.mark.xfail(strict=False, reason="measured on the H200: the Python dispatch path costs 9-15 us per hit over "
                   "the bare launch (2026-11-30), the C++ one 8 us (2026-12-01; bench/RESULTS.md); the C++ path is "
                   "the default on cuda since 2026-12-02 and not measured by this test since: not strict until it is")
def test_cuda_overhead_is_reported(cuda_library):
    """The device numbers kiln aims at: the gate-hit path within 3 us of the bare launch, a miss within 3 us
    of eager (from the tune report's per-entry measurements; printed for the record)."""
    report = json.load(open(os.path.join(cuda_library["run"], "report.json")))
    rows = [r for r in report["entries"] if r.get("hit_overhead_us") is not None]
    assert rows, report["entries"]
    for r in rows:
        print(f"{r['name']}: hit overhead {r['hit_overhead_us']:.2f} us, miss overhead {r['miss_overhead_us']:.2f} us")
    assert min(r["hit_overhead_us"] for r in rows) <= 3.0
    assert min(r["miss_overhead_us"] for r in rows) <= 3.0
