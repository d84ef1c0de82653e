"""Tests of the opt-in C++ dispatch path for aten entries (kiln.install(..., dispatch="cpp");
python/kiln/install_cpp.py and _dispatch.cpp), on the cpu backend with the tiny model library that test_install.py builds (its
fixtures and helpers are reused). Each test runs the same calls with dispatch="python" and dispatch="cpp" and
holds the two to each other: the same hits and misses counted, kernel results equal on hits (the same kernel
runs), eager results bitwise on misses, uninstall restoring PyTorch's dispatch tables and eager results; and a
missing compiler or a failing build falls back to the Python path with the reason.

The extension is built once per machine into kiln's cache (torch.utils.cpp_extension.load, which needs a C++
compiler and ninja); where it cannot be built here the tests skip and say why."""

import json
import os
import warnings

import pytest

from test_install import (HIDDEN, ROWS, _copy_library, _dispatch_rows, _edit_manifest, _model,  # noqa: F401
                          _nothing_installed_after, _same_values, library, opened, torch)

import importlib  # noqa: E402

import kiln  # noqa: E402

INSTALL = importlib.import_module("kiln.install")  # the module (kiln.install is the function)
CPP = importlib.import_module("kiln.install_cpp")  # builds and registers the C++ kernels
KilnError = INSTALL.KilnError


@pytest.fixture(scope="module")
def ext():
    try:
        return INSTALL.dispatch_extension(False)
    except KilnError as why:
        pytest.skip(f"kiln's C++ dispatch extension cannot be built here: {why}")


def _both(opened, calls, entries="all", model=None, grad=False):
    """Runs calls() with each dispatch path installed: {mode: (results, stats, installation)}."""
    out = {}
    for mode in ("python", "cpp"):
        inst = kiln.install(opened, model=model, entries=entries, dispatch=mode)
        if mode == "cpp":
            assert set(inst.dispatch.values()) == {"cpp"}, (inst.dispatch, inst.notes)
        try:
            if grad:
                results = calls()
            else:
                with torch.inference_mode():
                    results = calls()
            stats = inst.stats()
        finally:
            kiln.uninstall()
        out[mode] = (results, stats, inst)
    return out


def _same_counts(a: dict, b: dict):
    assert a["entries"] == b["entries"]
    assert a["targets"] == b["targets"]
    assert a["hits"] == b["hits"] and a["misses"] == b["misses"]


def test_hits_match_the_python_path_and_eager(ext, opened):
    """Every aten entry's captured call hits on both paths: results equal bitwise between the paths (the same
    kernel runs), within tolerance of eager, with eager's dtype and strides; counts are the same."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(ROWS, HIDDEN, generator=g)
    col = torch.rand(ROWS, 1, generator=g) + 0.5
    w = torch.randn(HIDDEN, generator=g)

    def calls():
        return [torch.softmax(x, dim=-1), x.pow(2), x * col, x * w, col + 1e-6, torch.rsqrt(col),
                torch.softmax(x, -1)]
    with torch.inference_mode():
        ref = calls()
    runs = _both(opened, calls, entries=[e.name for e in opened.entries if e.kind == "aten"])
    (py, py_stats, _), (cpp, cpp_stats, _) = runs["python"], runs["cpp"]
    _same_counts(py_stats, cpp_stats)
    assert cpp_stats["hits"] == len(ref) and cpp_stats["misses"] == 0, cpp_stats
    for a, b, r in zip(py, cpp, ref):
        assert b.dtype == r.dtype and b.shape == r.shape and b.stride() == r.stride()
        assert torch.equal(a, b)
        torch.testing.assert_close(b, r, rtol=1e-4, atol=1e-5)


def test_model_hits_with_module_entries_on_cpp(ext, opened):
    """The whole tiny model with every entry: aten entries and the RMSNorm module entry on C++."""
    model, x = _model(), torch.randn(ROWS, HIDDEN)
    with torch.inference_mode():
        ref = model(x)
    runs = _both(opened, lambda: model(x), model=model)
    _same_counts(runs["python"][1], runs["cpp"][1])
    assert torch.equal(runs["python"][0], runs["cpp"][0])
    torch.testing.assert_close(runs["cpp"][0], ref, rtol=1e-4, atol=1e-5)
    assert runs["cpp"][1]["targets"]["module RMSNorm"]["hits"] == 1
    assert runs["cpp"][1]["targets"]["aten::softmax.int"]["hits"] == 1
    assert runs["cpp"][2].dispatch["module RMSNorm"] == "cpp"


def test_module_gate_misses_and_grad_like_the_python_path(ext, opened):
    """The module entry's C++ gate refuses what the Python gate refuses — another shape, a misaligned
    activation, another dtype, a weight replaced by a non-tensor — and sends a call that needs a gradient to
    the module's own forward; both paths count the same and give eager's values."""
    model = _model()
    rms = next(m for m in model.modules() if type(m).__name__ == "RMSNorm")
    g = torch.Generator().manual_seed(5)
    xs = [torch.randn(ROWS // 2, HIDDEN, generator=g),
          torch.randn(ROWS * HIDDEN + 1, generator=g)[1:].view(ROWS, HIDDEN),
          torch.randn(ROWS, HIDDEN, generator=g).double()]
    ok = torch.randn(ROWS, HIDDEN, generator=g)
    with torch.inference_mode():
        ref = [rms(x) for x in xs]
    rms_entry = [e.name for e in opened.entries if e.kind == "module"]

    def calls():
        out = [rms(x) for x in xs]
        with torch.enable_grad():
            w = rms.weight
            rms.weight = torch.nn.Parameter(w.detach().clone())  # requires grad: the module's own forward
            out.append(rms(ok).detach())
            rms.weight = w
        return out
    runs = _both(opened, calls, entries=rms_entry, model=model, grad=True)
    _same_counts(runs["python"][1], runs["cpp"][1])
    t = runs["cpp"][1]["targets"]["module RMSNorm"]
    assert t["hits"] == 0 and t["misses"] == len(xs) + 1 and t["grad_fallbacks"] == 1, t  # a fallback is a miss
    for got, r in zip(runs["cpp"][0], ref):
        assert _same_values(got, r)


@pytest.mark.parametrize("compile_friendly", [False, True])
def test_module_forward_is_cpp_and_keeps_no_module_alive(ext, opened, compile_friendly):
    """On the C++ path a module entry's eager forward is one C++ object (_dispatch.cpp's ModuleForward; behind
    one Python frame where torch.compile must be able to trace it): a hit gives the Python path's values, a
    call with a keyword or another number of arguments is a counted miss that runs the module's own forward,
    and a model dropped while kiln is installed is freed (the forward holds it weakly, so no cycle the
    collector cannot see into keeps it)."""
    import gc
    import weakref
    rms_entry = [e.name for e in opened.entries if e.kind == "module"]
    model, x = _model(), torch.randn(ROWS, HIDDEN)
    rms = next(m for m in model.modules() if type(m).__name__ == "RMSNorm")
    with torch.inference_mode():
        ref = rms(x)
    inst = kiln.install(opened, model=model, entries=rms_entry, dispatch="cpp", compile_friendly=compile_friendly)
    try:
        fwd = rms.forward
        cpp = fwd if not compile_friendly else next(
            c.cell_contents for c in fwd.__closure__ if type(c.cell_contents).__name__ == "ModuleForward")
        assert type(cpp).__name__ == "ModuleForward" and fwd.__kiln__ == rms_entry[0]
        with torch.inference_mode():
            hit = rms(x)
            t = inst.stats()["targets"]["module RMSNorm"]
            assert (t["hits"], t["misses"]) == (1, 0), t
            kw = rms(x=x)  # not how the entry was captured: the module's own code
            t = inst.stats()["targets"]["module RMSNorm"]
            assert (t["hits"], t["misses"]) == (1, 1), t
            with pytest.raises(TypeError):
                rms(x, x)  # the module's own forward says what is wrong
        assert _same_values(hit, ref) or torch.allclose(hit, ref, rtol=1e-4, atol=1e-5)
        assert _same_values(kw, ref)
        gone = weakref.ref(model)
        del model, rms, fwd, cpp
        gc.collect()
        assert gone() is None, "the installed forward keeps its module alive"
    finally:
        kiln.uninstall()


@pytest.mark.parametrize("compile_friendly", [False, True])
def test_module_call_skips_nn_module_call_only_where_that_is_the_same(ext, opened, compile_friendly):
    """On the C++ path a bound module's class becomes kiln's subclass (install_cpp.swap_module_class), whose
    __call__ goes to the C++ forward without nn.Module.__call__: the same name, isinstance and
    type(m).__call__ as before; hooks (the module's and global ones), a forward replaced after install and a
    deep copy of the module each go through nn.Module.__call__ as they would without kiln; uninstall gives
    the module its class back."""
    import copy
    import pickle
    from torch.nn.modules.module import register_module_forward_hook
    rms_entry = [e.name for e in opened.entries if e.kind == "module"]
    model, x = _model(), torch.randn(ROWS, HIDDEN)
    rms = next(m for m in model.modules() if type(m).__name__ == "RMSNorm")
    cls = type(rms)
    with torch.inference_mode():
        ref = rms(x)
    inst = kiln.install(opened, model=model, entries=rms_entry, dispatch="cpp", compile_friendly=compile_friendly)
    seen = []
    try:
        assert type(rms) is not cls and isinstance(rms, cls) and type(rms).__name__ == cls.__name__
        assert type(rms).__call__ is torch.nn.Module.__call__
        assert rms.__call__.__func__ is torch.nn.Module.__call__

        def counts():
            t = inst.stats()["targets"]["module RMSNorm"]
            return t["hits"], t["misses"]
        with torch.inference_mode():
            assert _same_values(rms(x), rms.forward(x)) and counts() == (2, 0)
            handle = rms.register_forward_hook(lambda m, a, out: seen.append("module") or out * 2)
            hooked = rms(x)
            handle.remove()
            assert seen == ["module"] and torch.equal(hooked, rms(x) * 2) and counts() == (4, 0)
            handle = register_module_forward_hook(lambda m, a, out: seen.append(type(m).__name__))
            rms(x)
            handle.remove()
            assert seen[1:] == ["RMSNorm"] and counts() == (5, 0)
            twin = copy.deepcopy(rms)  # the module without kiln: its own class and forward, its own weight
            assert type(twin) is cls and "forward" not in twin.__dict__ and "_kiln_fast" not in twin.__dict__
            twin.weight.mul_(2)
            assert _same_values(twin(x), cls.forward(twin, x)) and counts() == (5, 0)
            loaded = pickle.loads(pickle.dumps(rms))  # torch.save's way: loads where kiln is absent
            assert type(loaded) is cls and "forward" not in loaded.__dict__ and _same_values(loaded(x), ref)
            own = rms.forward
            rms.forward = lambda t: t + 1  # replaced after install: the replacement runs
            assert torch.equal(rms(x), x + 1) and counts() == (5, 0)
            rms.forward = own
            assert rms(x) is not None and counts() == (6, 0)
        del twin
    finally:
        kiln.uninstall()
    assert type(rms) is cls and "_kiln_fast" not in rms.__dict__
    with torch.inference_mode():
        assert _same_values(rms(x), ref)


def test_misses_fall_back_exactly(ext, opened):
    """Other shapes, strides, a misaligned start, another non-tensor argument, another dtype, wrapped Python
    numbers of every kind: the original kernel runs, bitwise eager, and both paths count the same misses."""
    g = torch.Generator().manual_seed(4)
    cases = {
        "other shape": torch.randn(ROWS // 2, HIDDEN, generator=g),
        "other strides": torch.randn(HIDDEN, ROWS, generator=g).t(),
        "misaligned": torch.randn(ROWS * HIDDEN + 1, generator=g)[1:].view(ROWS, HIDDEN),
        "other dtype": torch.randn(ROWS, HIDDEN, generator=g).double(),
    }
    z = torch.randn(ROWS, HIDDEN, generator=g)
    col = torch.randn(ROWS, 1, generator=g)
    numbers = [(torch.randn(shape, generator=g) * 4).to(dtype)
               for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.int32, torch.bool)
               for shape in ((7, 3), ())]

    def calls():
        out = []
        for t in cases.values():
            out += [torch.softmax(t, dim=-1), t.pow(2), t * t[:, :1], torch.rsqrt(t.abs() + 1)]
        out += [torch.softmax(z, dim=0), z.pow(3), col + 1e-5, col + 1, col + True, col.add(1e-6, alpha=2),
                torch.softmax(z, -1, dtype=torch.float64)]
        for x in numbers:
            out += [x + 1e-6, x * 0.1, 1.5 * x, x + 3]
        return out
    with torch.inference_mode():
        ref = calls()
    runs = _both(opened, calls, entries=[e.name for e in opened.entries if e.kind == "aten"])
    _same_counts(runs["python"][1], runs["cpp"][1])
    assert runs["cpp"][1]["hits"] == 0 and runs["cpp"][1]["misses"] > len(ref), runs["cpp"][1]
    for got, r in zip(runs["cpp"][0], ref):
        assert got.dtype == r.dtype and got.shape == r.shape and got.stride() == r.stride()
        assert _same_values(got, r)


def test_grad_falls_back_and_autograd_works(ext, opened):
    model = _model()
    x = torch.randn(ROWS, HIDDEN, requires_grad=True)
    ref = model(x)
    ref.sum().backward()
    ref_grad = x.grad.clone()

    def calls():
        x.grad = None
        model.zero_grad()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no "autograd kernel was not registered" warning
            y = model(x)
        y.sum().backward()
        return y, x.grad.clone()
    runs = _both(opened, calls, model=model, grad=True)
    (y, grad), stats = runs["cpp"][0], runs["cpp"][1]
    assert torch.equal(y, ref) and y.grad_fn is not None
    torch.testing.assert_close(grad, ref_grad, rtol=1e-4, atol=1e-6)
    _same_counts(runs["python"][1], stats)
    assert stats["targets"]["aten::softmax.int"]["grad_fallbacks"] == 1


def test_no_grad_mode_hits_through_the_autograd_key(ext, opened):
    """softmax.int is composite: under no_grad the call comes through kiln's AutogradCPU kernel."""
    x = torch.randn(ROWS, HIDDEN)
    with torch.no_grad():
        ref = torch.softmax(x, -1)
    inst = kiln.install(opened, entries=[e.name for e in opened.entries if e.aten == "aten::softmax.int"],
                        dispatch="cpp")
    with torch.no_grad():
        got = torch.softmax(x, -1)
    assert inst.dispatch == {"aten::softmax.int": "cpp"}
    assert inst.stats()["targets"]["aten::softmax.int"]["hits"] == 1
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)


def test_counts_reset(ext, opened):
    x = torch.randn(ROWS, HIDDEN)
    inst = kiln.install(opened, entries="all", dispatch="cpp")
    with torch.inference_mode():
        torch.softmax(x, -1)
        torch.softmax(x[:3], -1)
    assert inst.stats()["targets"]["aten::softmax.int"] == {"hits": 1, "misses": 1, "grad_fallbacks": 0}
    inst.reset_stats()
    assert inst.stats()["hits"] == 0 and inst.stats()["misses"] == 0
    json.dumps(inst.stats())  # plain ints


def test_uninstall_restores_eager_bitwise(ext, opened):
    model, x = _model(), torch.randn(ROWS, HIDDEN)
    ops = ("aten::softmax.int", "aten::mul.Tensor", "aten::add.Tensor", "aten::pow.Tensor_Scalar", "aten::rsqrt")
    tables = {op: _dispatch_rows(op) for op in ops}
    with torch.inference_mode():
        ref = model(x)
    for _ in range(2):  # install and uninstall twice: nothing accumulates
        inst = kiln.install(opened, model=model, entries="all", dispatch="cpp")
        assert _dispatch_rows("aten::softmax.int") != tables["aten::softmax.int"]  # kiln's kernels are in
        with torch.inference_mode():
            model(x)
        assert inst.stats()["hits"] > 0
        kiln.uninstall()
        assert INSTALL.installed() is None and not inst._cpp_regs
        for op, rows in tables.items():
            assert _dispatch_rows(op) == rows, op
        with torch.inference_mode():
            assert torch.equal(model(x), ref)


def test_inplace_overload_writes_self(ext, opened, tmp_path, library):
    """An in-place overload (the add entry re-targeted to aten::add_.Tensor): the kernel's result is copied
    into self and self is returned, as on the Python path."""
    lib_dir = _copy_library(library, tmp_path)

    def edit(m):
        for e in m["entries"]:
            if e.get("aten") == "aten::add.Tensor":
                e["aten"] = "aten::add_.Tensor"
    _edit_manifest(lib_dir, edit)
    lib = INSTALL.Library(lib_dir)
    try:
        names = [e.name for e in lib.entries if e.aten == "aten::add_.Tensor"]
        if not names:
            pytest.skip("the library has no aten::add.Tensor entry")
        col = torch.rand(ROWS, 1) + 1
        want = col + 1e-6
        for mode in ("python", "cpp"):
            inst = kiln.install(lib, entries=names, dispatch=mode)
            y = col.clone()
            with torch.inference_mode():
                r = y.add_(1e-6)
            assert r is y or r.data_ptr() == y.data_ptr()
            torch.testing.assert_close(y, want, rtol=1e-6, atol=1e-7)
            assert inst.stats()["hits"] == 1, (mode, inst.stats(), inst.notes)
            kiln.uninstall()
    finally:
        lib.close()


def test_unexpressible_template_stays_python(ext, opened, tmp_path, library):
    """A captured call the C++ gate does not express (here: a keyword for a positional argument) keeps its
    overload on the Python path, with the reason in the notes; the other overloads go to C++."""
    lib_dir = _copy_library(library, tmp_path)

    def edit(m):
        for e in m["entries"]:
            if e.get("aten") == "aten::softmax.int":
                e["gate"]["args"] = {"args": [{"tensor": 0}], "kwargs": {"dim": -1}}
    _edit_manifest(lib_dir, edit)
    lib = INSTALL.Library(lib_dir)
    try:
        inst = kiln.install(lib, entries="all", dispatch="cpp")
        assert inst.dispatch["aten::softmax.int"] == "python"
        assert inst.dispatch["aten::mul.Tensor"] == "cpp"
        assert any(n.startswith("aten::softmax.int: Python dispatch") for n in inst.notes), inst.notes
        kiln.uninstall()
    finally:
        lib.close()


def test_missing_compiler_falls_back_with_the_reason(opened, monkeypatch):
    monkeypatch.setattr(CPP, "_dispatch_ext", {})
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    x = torch.randn(ROWS, HIDDEN)
    with pytest.warns(RuntimeWarning, match="no C\\+\\+ compiler"):
        inst = kiln.install(opened, entries="all", dispatch="cpp")
    assert set(inst.dispatch.values()) == {"python"}
    assert any("no C++ compiler" in n for n in inst.notes), inst.notes
    with torch.inference_mode():
        torch.softmax(x, -1)
    assert inst.stats()["targets"]["aten::softmax.int"]["hits"] == 1
    kiln.uninstall()
    with pytest.raises(KilnError, match="no C\\+\\+ compiler"):  # remembered for the process
        INSTALL.dispatch_extension(False)


def test_failing_build_falls_back_with_the_reason(opened, monkeypatch, tmp_path):
    bad = tmp_path / "_dispatch.cpp"
    bad.write_text('#error "kiln test: this extension does not build"\n')
    monkeypatch.setattr(CPP, "_dispatch_ext", {})
    monkeypatch.setattr(CPP, "_DISPATCH_SOURCE", str(bad))
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # "auto" does not warn
        inst = kiln.install(opened, entries="all", dispatch="auto")
    assert set(inst.dispatch.values()) == {"python"}
    assert any("did not build" in n and "kiln test" in n for n in inst.notes), inst.notes
    assert os.path.isdir(tmp_path / "cache" / "dispatch")  # built under kiln's cache
    kiln.uninstall()


def test_mode_from_the_environment_and_bad_modes(ext, opened, monkeypatch):
    monkeypatch.setenv("KILN_DISPATCH", "cpp")
    inst = kiln.install(opened, entries="all")
    assert inst.dispatch_mode == "cpp" and set(inst.dispatch.values()) == {"cpp"}
    kiln.uninstall()
    monkeypatch.delenv("KILN_DISPATCH")
    inst = kiln.install(opened, entries="all")
    assert inst.dispatch_mode == "python" and inst.dispatch == {}
    kiln.uninstall()
    with pytest.raises(KilnError, match="dispatch='fast'"):
        kiln.install(opened, entries="all", dispatch="fast")
    assert INSTALL.installed() is None


def test_default_mode_is_auto_for_a_cuda_library(monkeypatch):
    # a cuda library's misses would cost 5-7 us of Python each; a cpu library keeps the Python path
    from kiln.install_cpp import _dispatch_mode
    monkeypatch.delenv("KILN_DISPATCH", raising=False)
    assert _dispatch_mode(None, cuda=True) == "auto"
    assert _dispatch_mode(None, cuda=False) == "python"
    monkeypatch.setenv("KILN_DISPATCH", "python")
    assert _dispatch_mode(None, cuda=True) == "python"
    assert _dispatch_mode("cpp", cuda=False) == "cpp"


def test_graph_mode_counts_each_entry_on_cpp(ext, opened):
    """In kiln's graph mode (and inside torch.compile) a module entry's hits come through its kiln:: op, whose
    count the C++ path's entry counter must be: on the H200 Gemma-4's graph mode reported 0 hits for every entry
    while it made 37. Per entry, per target and in all, the C++ path counts what the Python path counts."""
    model, x = _model(), torch.randn(ROWS, HIDDEN)
    out = {}
    for mode in ("python", "cpp"):
        torch._dynamo.reset()
        inst = kiln.install(opened, model=model, entries="all", dispatch=mode, compile="graph")
        try:
            with torch.inference_mode():
                model(x)
                inst.reset_stats()
                model(x)
            out[mode] = inst.stats()
        finally:
            kiln.uninstall()
            torch._dynamo.reset()
    _same_counts(out["python"], out["cpp"])
    stats = out["cpp"]
    assert stats["hits"] > 0 and sum(e["hits"] for e in stats["entries"].values()) == stats["hits"], stats


def test_graph_mode_sees_the_same_aten_graph_on_cpp(ext, opened, monkeypatch):
    """A composite entry (softmax.int decomposes to _softmax) must not change the graph kiln's graph mode
    patterns are matched in: the C++ path's autograd-key kernel once sent a trace below autograd, so the trace
    recorded the composite whole (MobileNet-v2 on the H200: aten.conv2d where its chain's pattern, traced from the
    decomposition, says aten.convolution; no chain hit while a conv2d entry was installed). The graph's calls,
    before kiln replaces anything, are the same with either path."""
    import collections

    patterns = importlib.import_module("kiln.install_inductor").InductorPatterns
    seen = {}
    apply = patterns.apply

    def recording(self, graph, flavor="inductor"):
        seen.setdefault(mode, collections.Counter()).update(
            str(n.target) for n in graph.nodes if n.op == "call_function")
        return apply(self, graph, flavor)

    monkeypatch.setattr(patterns, "apply", recording)
    model, x = _model(), torch.randn(ROWS, HIDDEN)
    for mode in ("python", "cpp"):
        torch._dynamo.reset()
        inst = kiln.install(opened, model=model, entries="all", dispatch=mode, compile="graph")
        try:
            assert mode == "python" or set(inst.dispatch.values()) == {"cpp"}, inst.notes
            with torch.inference_mode():
                model(x)
        finally:
            kiln.uninstall()
            torch._dynamo.reset()
    assert seen["python"] and seen["python"] == seen["cpp"], seen
