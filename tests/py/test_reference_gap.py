"""The reference's own rounding in the gate's tolerance (python/kiln/reference_gap.py, refdata.h
"fp64_gap", eval.c output_tolerance).

A float32 sum over a long axis in PyTorch's order is itself off the exact sum; where the column cancels,
by more than the float32 tolerance. The problem here makes that certain: one column in two holds
256 entries of +-1000 that cancel exactly among standard normal ones, so float32 partial sums of
hundreds round the small values while the column's sum is tens (39 columns of 512 off, in any thread
count). A kernel that sums in double (exactly rounded) then fails against the bare tolerance and
passes with the gap the reference helper recorded; a kernel off by clearly more than the reference's
own error still fails. A gap that is a jump, not rounding (a comparison that goes the other way in
float64), is recorded but not applied.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

import pytest

from gate_util import KILN, ROOT, run_kiln

sys.path.insert(0, str(ROOT / "python"))

import safetensors.torch  # noqa: E402
import torch  # noqa: E402

from kiln import reference_gap  # noqa: E402

pytestmark = pytest.mark.skipif(not KILN.exists(),
                                reason=f"{KILN} does not exist: build kiln first (make)")

B, N, C = 4, 4096, 128

SUM_KERNEL = """/* sum over axis 1 of x[b, n, c] in double, rounded once: the float32 result nearest the exact sum
 * (plus OFFSET times the exact sum's magnitude + 1). */
void kiln_kernel(const float *x, float *y, int64_t b, int64_t n, int64_t c) {
    for (int64_t i = 0; i < b; i++)
        for (int64_t k = 0; k < c; k++) {
            double s = 0;
            for (int64_t j = 0; j < n; j++)
                s += (double)x[(i * n + j) * c + k];
            y[i * c + k] = (float)(s + OFFSET * (s < 0 ? 1 - s : 1 + s));
        }
}
"""


def cancelling_input() -> torch.Tensor:
    g = torch.Generator().manual_seed(7)
    x = torch.randn(B, N, C, generator=g, dtype=torch.float64)
    big = torch.zeros(B, N, C, dtype=torch.float64)
    pos = torch.randperm(N, generator=g)[:256]
    sign = torch.tensor([1.0, -1.0], dtype=torch.float64).repeat(128)
    big[:, pos, ::2] = (sign * 1000).reshape(1, -1, 1)  # sums to exactly 0 in every column it is in
    return (x + big).float()


def make_problem(d, name, reference, x, out_shape):
    """A problem with one float32 input x (stored, the workload's own) and one float32 output y, and its
    reference data: one set, the real one (a set redrawn from x's statistics would be another test)."""
    (d / "tensors").mkdir(parents=True)
    axes = {f"a{i}": {"type": "var"} for i in range(x.dim())}
    definition = {
        "name": name, "op_type": "reduction", "description": "kiln's gate test of fp64_gap",
        "axes": axes, "inputs": {"x": {"shape": list(axes), "dtype": "float32"}},
        "outputs": {"y": {"shape": [list(axes)[i] for i in out_shape], "dtype": "float32"}},
        "reference": f"import torch\n\n@torch.no_grad()\ndef run(x):\n    return {reference}\n",
    }
    (d / "definition.json").write_text(json.dumps(definition, indent=1))
    safetensors.torch.save_file({"x": x}, str(d / "tensors" / "x.safetensors"))
    workload = {"uuid": "9a90f000-0000-4000-8000-000000000001",
                "axes": {a: n for a, n in zip(axes, x.shape)},
                "inputs": {"x": {"type": "safetensors", "path": "tensors/x.safetensors",
                                 "tensor_key": "x"}}}
    (d / "workload.jsonl").write_text(json.dumps(workload) + "\n")
    return d, build_reference(d, d.parent / f"ref-{name}")


def build_reference(d, ref):
    """The problem's reference data, one set (the real one), into ref."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    r = subprocess.run([sys.executable, "-m", "kiln.reference", str(d), "--out", str(ref), "--sets", "1",
                        "--no-time", "--seed", "11"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return ref


def without_gap(ref, bare):
    """A copy of reference data ref at bare without its recorded gap: the bare tolerance."""
    shutil.copytree(ref, bare)
    manifest = json.loads((bare / "manifest.json").read_text())
    del manifest["workloads"][0]["fp64_gap"]
    (bare / "manifest.json").write_text(json.dumps(manifest))
    return bare


@pytest.fixture(scope="module")
def problem(tmp_path_factory):
    return make_problem(tmp_path_factory.mktemp("gap") / "sum_axis1_f32", "sum_axis1_f32", "x.sum(dim=1)",
                        cancelling_input(), [0, 2])


def kernel(tmp_path, offset: float) -> str:
    path = tmp_path / f"sum_{offset:g}.c"
    path.write_text(SUM_KERNEL.replace("OFFSET", repr(float(offset))))
    return str(path)


def evaluate(problem_dir, ref_dir, kernel_path) -> dict:
    p = run_kiln(["eval", str(problem_dir), kernel_path, "--backend", "cpu", "--json", "--ref-dir",
                  str(ref_dir), "--iters", 3, "--warmup", 1], timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_the_manifest_records_the_gap(problem):
    _, ref = problem
    manifest = json.loads((ref / "manifest.json").read_text())
    gap = manifest["workloads"][0]["fp64_gap"]["y"]
    points = gap["points"]
    assert points and 10 < gap["rms"] < 1000, gap
    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    assert xs == sorted(xs) and ys == sorted(ys) and len(set(ys)) == len(ys), points  # a frontier
    assert max(ys) > 1e-3, points  # the float32 sums are visibly off where the columns cancel
    assert gap["rel_l2"] > 0, gap


def test_an_exactly_rounded_sum_fails_the_bare_tolerance(problem, tmp_path):
    d, ref = problem
    r = evaluate(d, without_gap(ref, tmp_path / "bare"), kernel(tmp_path, 0))
    assert r["outcome"] == "mismatch", r
    tol = r["evidence"]["tolerance"]
    assert "atol_of_reference_rounding" not in tol and tol["atol"] == 1e-5, r["evidence"]


def test_the_gap_passes_it_and_says_how_much_it_added(problem, tmp_path):
    d, ref = problem
    r = evaluate(d, ref, kernel(tmp_path, 0))
    assert r["outcome"] == "ok", r
    extra = r["workloads"][0]["reference_rounding"]["y"]
    assert 1e-4 < extra["atol"] < 0.1 and 0 < extra["rel_l2"] < 1e-3, extra


def test_a_kernel_further_off_than_the_reference_still_fails(problem, tmp_path):
    d, ref = problem
    manifest = json.loads((ref / "manifest.json").read_text())
    worst = max(y for _, y in manifest["workloads"][0]["fp64_gap"]["y"]["points"])
    # off by twice the reference's largest doubled gap, relative to the sum's magnitude
    r = evaluate(d, ref, kernel(tmp_path, 2 * worst))
    assert r["outcome"] == "mismatch", r
    tol = r["evidence"]["tolerance"]
    assert tol["atol_of_reference_rounding"] > 0 and tol["atol"] > tol["atol_of_reference_rounding"], tol


THRESHOLD_KERNEL = """/* y = x where x > 0.1 (a float32 compare, as torch does), else 0; OFF added where kept */
void kiln_kernel(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] > 0.1f ? x[i] + OFF : 0.0f;
}
"""


def test_a_jump_is_recorded_but_not_applied(tmp_path):
    """x == float32(0.1) is not above 0.1 in float32 but is in float64: the float64 run keeps it, a gap
    of 0.1 where the output's RMS is about 0.5, no rounding. The gate does not widen the tolerance for
    it: a kernel 0.01 off everywhere fails, and the evidence says why nothing was added."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4096, generator=g)
    x[::64] = 0.1
    d, ref = make_problem(tmp_path / "threshold_f32", "threshold_f32",
                          "torch.where(x > 0.1, x, torch.zeros_like(x))", x, [0])
    gap = json.loads((ref / "manifest.json").read_text())["workloads"][0]["fp64_gap"]["y"]
    assert max(y for _, y in gap["points"]) > 0.1, gap
    for off, outcome in ((0.0, "ok"), (0.01, "mismatch")):
        path = tmp_path / f"threshold_{off}.c"
        path.write_text(THRESHOLD_KERNEL.replace("OFF", f"{off}f"))
        r = evaluate(d, ref, str(path))
        assert r["outcome"] == outcome, r
    tol = r["evidence"]["tolerance"]
    assert tol["atol"] == 1e-5 and "not widened" in tol["reference_rounding"], tol


def test_the_bins_bound_every_element_from_above():
    g = torch.Generator().manual_seed(3)
    ref64 = torch.randn(5000, generator=g, dtype=torch.float64) * torch.logspace(-6, 3, 5000,
                                                                                 dtype=torch.float64)
    ref = (ref64 + torch.randn(5000, generator=g, dtype=torch.float64) * 1e-4).float()
    ref[7] = float("inf")  # not finite: left to the gate's own non-finite rule
    bins = reference_gap.GapBins()
    bins.add("y", ref, ref64)
    points = bins.points()["y"]
    x = ref.double().abs()
    y = 2 * (ref.double() - ref64).abs()
    fin = torch.isfinite(x)
    for rtol in (2.0 ** -20, 1e-4, 1e-2, 1.0):  # gaps under 2^-20 |ref| are left out: rtol >= that
        exact = max(0.0, float((y[fin] - rtol * x[fin]).max()))
        bound = max([0.0] + [py - rtol * px for px, py in points])
        assert exact <= bound <= exact + rtol * float(x[fin].max()) * 0.0625 + 1e-12, (rtol, exact, bound)


def test_a_nan_row_leaves_the_summary_finite():
    """A fully masked softmax row is NaN in the reference and in its float64 run; the other elements
    still give a finite RMS and relative L2 (a NaN there made the manifest unreadable JSON)."""
    ref64 = torch.linspace(-1, 1, 64, dtype=torch.float64)
    ref64[8:16] = float("nan")
    ref = ref64.float()
    bins = reference_gap.GapBins()
    bins.add("y", ref, ref64)
    summary = bins.manifest()["y"]
    assert math.isfinite(summary["rel_l2"]) and math.isfinite(summary["rms"]), summary
    finite = ref64[torch.isfinite(ref64)]
    assert summary["rms"] == pytest.approx(float(finite.square().mean().sqrt()), rel=1e-6)
    json.dumps(bins.manifest(), allow_nan=False)


GELU_KERNEL = """#include "kiln_cpu.h"
/* GELU-tanh(g * h) * u with every intermediate in float, rounded once to bfloat16 (a fused kernel), times
 * (1 + OFF) */
void kiln_kernel(const kiln_bf16 *g, const kiln_bf16 *h, const kiln_bf16 *u, kiln_bf16 *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float v = kiln_bf16_to_float(g[i]) * kiln_bf16_to_float(h[i]);
        float a = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
        y[i] = kiln_float_to_bf16(a * kiln_bf16_to_float(u[i]) * (1.0f + OFF));
    }
}
"""


def test_a_bfloat16_chain_records_the_rounding_of_its_intermediates(tmp_path):
    """A chain in bfloat16 rounds g·h before GELU, whose relative error near -3 is about ten times its
    input's: a fused kernel that rounds once sits further from eager than bfloat16's rtol on some elements
    (as kiln's wgmma GEMM did on Gemma-4's gated MLP front on the H200). The reference helper's wider run
    (16-bit inputs in float32) records that gap for the chain's 16-bit output, with which the fused kernel
    passes (the gate widening rtol: the gap grows with |ref|); one 5 % off still fails; a single aten op in
    bfloat16 gets no wider run."""
    d = tmp_path / "gelu_mul_bf16"
    (d / "tensors").mkdir(parents=True)
    gen = torch.Generator().manual_seed(13)
    n = 8192
    tensors = {"g": (-2 - 2 * torch.rand(n, generator=gen)).bfloat16(),  # g·h in [-4, -2]: GELU's steep tail
               "h": (1 + 0.01 * torch.randn(n, generator=gen)).bfloat16(),
               "u": (100 * torch.randn(n, generator=gen)).bfloat16()}
    safetensors.torch.save_file(tensors, str(d / "tensors" / "t.safetensors"))
    ops = [{"aten": "aten::mul.Tensor", "args": [{"ref": "g"}, {"ref": "h"}], "out": "v0", "dtypes": ["bfloat16"]},
           {"aten": "aten::gelu.default", "args": [{"ref": "v0"}], "out": "v1", "dtypes": ["bfloat16"],
            "kwargs": {"approximate": "tanh"}},
           {"aten": "aten::mul.Tensor", "args": [{"ref": "v1"}, {"ref": "u"}], "out": "v2", "dtypes": ["bfloat16"]}]
    definition = {
        "name": "gelu_mul_bf16", "op_type": "elementwise", "description": "kiln's gate test of a chain's gap",
        "axes": {"n": {"type": "const", "value": n}},
        "inputs": {k: {"shape": ["n"], "dtype": "bfloat16"} for k in tensors},
        "outputs": {"y": {"shape": ["n"], "dtype": "bfloat16"}},
        "reference": "import torch\n\n@torch.no_grad()\ndef run(g, h, u):\n    return torch.ops.aten.mul.Tensor("
                     "torch.ops.aten.gelu.default(torch.ops.aten.mul.Tensor(g, h), approximate='tanh'), u)\n",
        "kiln": {"kind": "chain", "pattern": "eltwise", "members": [o["aten"] for o in ops], "calls": 1,
                 "ops": ops, "outputs": ["v2"]}}
    (d / "definition.json").write_text(json.dumps(definition, indent=1))
    workload = {"uuid": "9a90f000-0000-4000-8000-000000000002", "axes": {},
                "inputs": {k: {"type": "safetensors", "path": "tensors/t.safetensors", "tensor_key": k}
                           for k in tensors}}
    (d / "workload.jsonl").write_text(json.dumps(workload) + "\n")
    ref = build_reference(d, tmp_path / "ref")
    gap = json.loads((ref / "manifest.json").read_text())["workloads"][0]["fp64_gap"]["y"]
    assert max(y - 2e-2 * x for x, y in gap["points"]) > 1e-2, gap  # past bfloat16's bare tolerance
    bare = without_gap(ref, tmp_path / "bare")
    for ref_dir, off, outcome in ((bare, 0.0, "mismatch"), (ref, 0.0, "ok"), (ref, 0.05, "mismatch")):
        path = tmp_path / f"gelu_{off}.c"
        path.write_text(GELU_KERNEL.replace("OFF", f"{off}f"))
        got = evaluate(d, ref_dir, str(path))
        assert got["outcome"] == outcome, (ref_dir, off, got)
        if outcome == "ok":  # a gap that grows with |ref|: rtol widened, atol barely
            extra = got["workloads"][0]["reference_rounding"]["y"]
            assert extra["rtol"] > 0 and extra["atol"] < 0.05 * gap["rms"] * extra["rtol"] + 1e-2, extra
    # one aten op: no intermediates, no wider run
    problem = type("P", (), {"outputs": {"y": type("S", (), {"dtype": "bfloat16"})()}, "kiln": {"kind": "aten"}})()
    assert reference_gap.gap_outputs(problem) == []


def test_a_chain_that_casts_back_to_bfloat16_gets_its_wider_run():
    """An eager attention block casts softmax's float32 result to bfloat16 before its second matmul: in
    the wider run (16-bit inputs in float32) that cast made the matmul's operands differ and the run
    failed, so the block was gated without the reference's own rounding (bfloat16 scores before an
    exponential: 0.1 off on a 64-wide head). The wider run keeps such casts in float32 and records
    the gap."""
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 2, 64, 64, generator=gen).bfloat16() for _ in range(3))

    def run(args):
        q, k, v = args
        s = torch.ops.aten.matmul.default(q, k.transpose(-1, -2))
        p = torch.ops.aten.softmax.int(s, -1, torch.float32)
        return torch.ops.aten.matmul.default(torch.ops.aten.to.dtype(p, torch.bfloat16), v)

    out = run([q, k, v])
    problem = type("P", (), {"outputs": {"out0": type("S", (), {"dtype": "bfloat16"})()},
                             "kiln": {"kind": "chain", "members": ["aten::matmul.default"] * 3}})()
    assert reference_gap.gap_outputs(problem) == ["out0"]
    bins, notes = reference_gap.GapBins(), []
    assert reference_gap.add_set(bins, problem, {"q": q, "k": k, "v": v}, {"out0": out}, run,
                                 lambda r: [r], notes.append), notes
    exact = torch.matmul(torch.softmax(torch.matmul(q.float(), k.float().transpose(-1, -2)), -1), v.float())
    points = bins.points()["out0"]
    gap = 2 * (out.float() - exact).abs().max().item()
    assert gap > 0.05 and max(y for _, y in points) == pytest.approx(gap, rel=0.01), (points, gap)


def test_the_wider_runs_casts_leave_writes_into_an_argument_alone():
    """An op that writes into its argument keeps it (a cast copy would take the write and lose it): a bfloat16
    buffer that a chain adds float32 into in place is that buffer afterwards, in the wider run as without it."""
    buf = torch.zeros(4, dtype=torch.bfloat16)
    with reference_gap._WidenCasts():
        out = torch.ops.aten.add_.Tensor(buf, torch.ones(4, dtype=torch.float32))
    assert out.data_ptr() == buf.data_ptr() and buf.tolist() == [1.0] * 4
