"""kiln looks inside PyTorch's fused inference fast paths (capture_record.CONTAINER_OP_NAMES), and keeps
F.scaled_dot_product_attention whole where PyTorch would decompose it (COMPOSITE_FUNCTIONS).

nn.TransformerEncoderLayer and nn.MultiheadAttention in eval under no_grad run one aten call each
(aten::_transformer_encoder_layer_fwd, aten::_native_multi_head_attention) whose kernels are built of other
aten calls. Capture records those inner calls one by one (the projections, the attention's matmuls, the
norms), so families can match them; the container itself is no problem and has no time of its own. An
entry for an inner call is hit from inside the fused kernel, since its calls go through the dispatcher.

Under no_grad (and grad) F.scaled_dot_product_attention reaches a dispatch mode decomposed, as
_scaled_dot_product_flash_attention_for_cpu (or the CUDA backends' ops), which also return the logsumexp:
no family writes that. Capture records the composite call instead; the attention family matches it (its
output stored [b, s, h, d], as SDPA returns it), and its entry is hit at the composite's autograd key.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap

import pytest

from gate_util import KILN, ROOT, run_kiln
from hand_library import hand_library

sys.path.insert(0, str(ROOT / "python"))

import torch  # noqa: E402

from kiln.capture_record import CONTAINER_REASON  # noqa: E402

SCRIPT = textwrap.dedent("""
    import torch, torch.nn as nn
    torch.manual_seed(0)
    model = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True).eval()
    x = torch.randn(4, 32, 64)
    with torch.no_grad():
        for _ in range(2):
            model(x)
""")

# layer_norm over the last axis (eps 1e-5, the layer's), in double
LAYER_NORM_C = """// kiln: launch layer_norm_rows
void layer_norm_rows(const float *x, const float *w, const float *b, float *y, int64_t n4, int64_t n32,
                     int64_t n64) {
    for (int64_t r = 0; r < n4 * n32; r++) {
        const float *xr = x + r * n64;
        double mean = 0, var = 0;
        for (int64_t c = 0; c < n64; c++) mean += xr[c];
        mean /= n64;
        for (int64_t c = 0; c < n64; c++) var += (xr[c] - mean) * (xr[c] - mean);
        double inv = 1.0 / sqrt(var / n64 + 1e-5);
        for (int64_t c = 0; c < n64; c++) y[r * n64 + c] = (float)((xr[c] - mean) * inv * w[c] + b[c]);
    }
}
"""


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    from kiln.capture import main as capture_main
    d = tmp_path_factory.mktemp("container")
    (d / "script.py").write_text(SCRIPT)
    assert capture_main([str(d / "script.py"), "--out", str(d / "run"), "--device", "cpu", "--no-reference"]) == 0
    return d / "run"


def test_the_inner_calls_are_captured_and_the_container_is_not_a_problem(captured):
    model = json.loads((captured / "model.json").read_text())
    groups = {g["aten"]: g for g in model["groups"]}
    for outer in ("aten::_transformer_encoder_layer_fwd.default", "aten::_native_multi_head_attention.default"):
        g = groups.get(outer)
        assert g is not None, f"{outer} not recorded: {sorted(groups)}"
        assert g["not_a_problem"] == CONTAINER_REASON and g["problem"] is None, g
        assert g["time_us"] == 0, "the container's time is its inner calls'"
    # the projections, the attention's matmul and both norms run inside it
    for inner in ("aten::mm.default", "aten::bmm.default", "aten::layer_norm.default", "aten::addmm.default"):
        assert inner in groups, f"{inner} not seen inside the fused call: {sorted(groups)}"
        assert groups[inner]["problem"] and groups[inner]["time_us"] > 0, groups[inner]
    total = sum(g["time_us"] for g in model["groups"])
    assert total == pytest.approx(model["total_time_us"], rel=1e-3), "no time counted twice"
    problems = os.listdir(captured / "problems")
    assert not any("transformer_encoder" in p or "multi_head" in p for p in problems), problems


def test_an_entry_for_an_inner_call_is_hit_inside_the_fused_kernel(tmp_path):
    import kiln
    from kiln.install_runtime import Library
    lib = Library(hand_library(tmp_path, SCRIPT, "layer_norm", LAYER_NORM_C, "layer_norm_rows"))
    torch.manual_seed(0)
    model = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True).eval()
    x = torch.randn(4, 32, 64)
    with torch.no_grad():
        want = model(x)
        inst = kiln.install(lib, model=model, dispatch="python", entries=[e.name for e in lib.entries])
        try:
            got = model(x)
            hits = inst.stats()["entries"][lib.entries[0].name]["hits"]
        finally:
            kiln.uninstall()
    assert hits == 2, "norm1 and norm2 inside aten::_transformer_encoder_layer_fwd"
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


SDPA_SCRIPT = textwrap.dedent("""
    import torch, torch.nn as nn, torch.nn.functional as F

    class Attention(nn.Module):
        def __init__(self, d=64, h=4, kv=2):
            super().__init__()
            self.h, self.kv, self.dh = h, kv, d // h
            self.q = nn.Linear(d, d, bias=False)
            self.k = nn.Linear(d, kv * self.dh, bias=False)
            self.v = nn.Linear(d, kv * self.dh, bias=False)

        def forward(self, x):
            b, t, _ = x.shape
            q = self.q(x).view(b, t, self.h, self.dh).transpose(1, 2)
            k = self.k(x).view(b, t, self.kv, self.dh).transpose(1, 2)
            v = self.v(x).view(b, t, self.kv, self.dh).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            return y.transpose(1, 2).reshape(b, t, -1)

    torch.manual_seed(0)
    model = nn.Sequential(Attention(), Attention()).eval()
    x = torch.randn(2, 16, 64)
    with torch.no_grad():
        for _ in range(2):
            model(x)
""")


def test_sdpa_under_no_grad_is_captured_whole(tmp_path):
    from kiln.capture import main as capture_main
    (tmp_path / "script.py").write_text(SDPA_SCRIPT)
    run = tmp_path / "run"
    assert capture_main([str(tmp_path / "script.py"), "--out", str(run), "--device", "cpu", "--no-reference"]) == 0
    groups = {g["aten"]: g for g in json.loads((run / "model.json").read_text())["groups"]}
    g = groups.get("aten::scaled_dot_product_attention.default")
    assert g is not None and g["problem"] and g["time_us"] > 0 and g["calls"] == 4, sorted(groups)
    assert not any("flash_attention" in a for a in groups), "the decomposition is not recorded too"
    assert not any(a.startswith("profiler::") for a in groups), "kiln's own ranges are not the script's"


@pytest.mark.skipif(not KILN.exists(), reason=f"{KILN} does not exist: build kiln first (make)")
@pytest.mark.parametrize("dispatch", ["python", "cpp"])
def test_an_sdpa_entry_is_hit_under_no_grad(tmp_path, dispatch):
    """The attention family's cpu kernel for the captured call, installed: both layers' calls are hits and
    the model's output is eager's."""
    import kiln
    from kiln.install_runtime import Library
    lib_dir = hand_library(tmp_path, SDPA_SCRIPT, "scaled_dot_product_attention", "", "attention_kernel")
    (name,) = [n for n in os.listdir(tmp_path / "run" / "problems") if n.startswith("scaled_dot_product")]
    r = run_kiln(["sweep", str(tmp_path / "run" / "problems" / name), "--backend", "cpu", "--family",
                  "attention", "--limit", 1, "--iters", 1, "--out", str(tmp_path / "src"), "--ref-dir",
                  str(tmp_path / "ref")], timeout=300)
    assert r.returncode == 0, r.stderr
    assert " ok " in r.stderr + r.stdout, r.stderr
    (src,) = [f for f in os.listdir(tmp_path / "src") if f.endswith(".c")]
    shutil.copy(tmp_path / "src" / src, os.path.join(lib_dir, f"{name}.c"))
    lib = Library(lib_dir)
    ns: dict = {}
    exec(SDPA_SCRIPT.replace("for _ in range(2):\n            model(x)", "pass"), ns)
    model, x = ns["model"], ns["x"]
    with torch.no_grad():
        want = model(x)
        inst = kiln.install(lib, model=model, dispatch=dispatch, entries=[e.name for e in lib.entries])
        try:
            got = model(x)
            hits = inst.stats()["entries"][name]["hits"]
            assert inst.dispatch.get("aten::scaled_dot_product_attention", "python") == dispatch, inst.dispatch
        finally:
            kiln.uninstall()
    assert hits == 2, "one hit per layer, at aten::scaled_dot_product_attention's autograd key"
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


CUDA_SDPA_SCRIPT = SDPA_SCRIPT.replace("Attention(), Attention()).eval()",
                                       "Attention(256), Attention(256)).eval().cuda().bfloat16()") \
    .replace("torch.randn(2, 16, 64)", "torch.randn(2, 128, 256, device='cuda', dtype=torch.bfloat16)")


@pytest.mark.skipif(not KILN.exists(), reason=f"{KILN} does not exist: build kiln first (make)")
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU: the CUDA path of SDPA is not run here")
def test_cuda_sdpa_is_captured_whole_searched_and_hit(tmp_path):
    """On the GPU, under no_grad, F.scaled_dot_product_attention reaches a dispatch mode as flash, efficient or
    cuDNN attention (each also returning the logsumexp); capture records the composite call, `kiln optimize`'s
    attention family proves a kernel for it on the cuda backend (its output [b, s, h, d], as SDPA returns it),
    and the installed entry is hit once per layer with outputs within bfloat16 tolerance of eager."""
    import kiln
    from kiln.capture import main as capture_main
    from kiln.install_runtime import Library
    (tmp_path / "script.py").write_text(CUDA_SDPA_SCRIPT)
    run = tmp_path / "run"
    assert capture_main([str(tmp_path / "script.py"), "--out", str(run), "--device", "cuda"]) == 0
    groups = {g["aten"]: g for g in json.loads((run / "model.json").read_text())["groups"]}
    g = groups.get("aten::scaled_dot_product_attention.default")
    assert g is not None and g["problem"] and g["calls"] == 4, sorted(groups)
    assert not any("_scaled_dot_product_" in a for a in groups), "the decomposition is not recorded too"
    name = g["problem"]
    r = run_kiln(["optimize", str(run), str(run / "problems" / name), "--backend", "cuda", "--budget", 2,
                  "--time", 240], timeout=400)
    assert r.returncode == 0, r.stderr[-2000:]
    lib = Library(str(run / "library"))
    assert name in [e.name for e in lib.entries], r.stdout[-2000:]
    ns: dict = {}
    exec(CUDA_SDPA_SCRIPT.replace("for _ in range(2):\n            model(x)", "pass"), ns)
    model, x = ns["model"], ns["x"]
    for dispatch in ("python", "cpp"):
        with torch.no_grad():
            want = model(x)
            inst = kiln.install(lib, model=model, dispatch=dispatch, entries=[name])
            try:
                got = model(x)
                hits = inst.stats()["entries"][name]["hits"]
            finally:
                kiln.uninstall()
        assert hits == 2, f"{dispatch}: one hit per layer"
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)


def test_composite_wrappers_are_removed_and_leave_other_operands_alone(tmp_path):
    """The recorder's mode wraps torch.matmul, Tensor.matmul and `@` (COMPOSITE_FUNCTIONS): a call of them
    is recorded as one aten::matmul where no gradient is needed; an operand that is not a tensor gets eager's
    own answer (`tensor @ list` a TypeError, not an aten error); and afterwards Tensor has no attribute of its
    own where it had none (the C base's methods are inherited again), torch.matmul is the builtin again."""
    from kiln.capture_problem import Spool
    from kiln.capture_record import Recorder
    before = (torch.matmul, torch.nn.functional.scaled_dot_product_attention)
    rec = Recorder("cpu", Spool(str(tmp_path / "spool")), 1 << 20, 1 << 20, 1 << 20, 1 << 16)
    x = torch.randn(4, 4)
    with rec.mode():
        assert "__matmul__" in vars(torch.Tensor) and torch.matmul is not before[0]
        with torch.no_grad():
            y = x @ x
        with pytest.raises(TypeError, match="unsupported operand"):
            x @ [1.0, 2.0, 3.0, 4.0]
    assert torch.equal(y, torch.mm(x, x))
    assert "__matmul__" not in vars(torch.Tensor) and "matmul" not in vars(torch.Tensor)
    assert (torch.matmul, torch.nn.functional.scaled_dot_product_attention) == before
