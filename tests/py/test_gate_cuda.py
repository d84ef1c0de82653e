"""End-to-end tests of the gate on the cuda backend.

`kiln eval PROBLEM KERNEL --backend cuda --json` runs on every kernel of tests/kernels/cuda (one
class of behaviour each; each kernel's header comment says which outcome it must get); the tests
assert the outcome and the evidence of docs/gate.md; that a good kernel still evaluates ok after
kernels that killed their CUDA context (illegal address, trap) or hung; and, on the large
softmax_bf16_big problem, that the fast kernel is proved, beats PyTorch and times reproducibly (two
evaluations within 2% of each other).

Skipped where there is no CUDA device. Needs build/kiln (`make`), or $KILN_BIN. On an H200 the whole
module takes a few minutes, most of it building and loading the 512 MiB reference data of
softmax_bf16_big (three input sets).
"""

from __future__ import annotations

import pytest

from gate_util import (DEFAULT_TOLERANCE, KILN, check_ok, check_untimed, evaluate, expect, gpu_present,
                       log_names_line, marker_line, problem_tolerance, summary_line, workloads)

_NO_GPU = gpu_present()
pytestmark = [
    pytest.mark.skipif(
        _NO_GPU is not None,
        reason=f"no CUDA device (nvidia-smi not found / torch.cuda unavailable): {_NO_GPU}"),
    pytest.mark.skipif(not KILN.exists(), reason=f"{KILN} does not exist: build kiln first (make)"),
]

K = "tests/kernels/cuda"
ITERS = 20
TIMEOUT_S = 5
FAST = ("--iters", ITERS, "--warmup", 2)


@pytest.fixture(scope="module")
def refs(tmp_path_factory):
    """Reference data for the module, built by the first evaluation of each problem and reused."""
    return tmp_path_factory.mktemp("kiln-ref")


def cuda_eval(problem, kernel, refs, *extra, timeout=600):
    return evaluate(problem, f"{K}/{kernel}", "cuda", refs, *extra, timeout=timeout)


def softmax_axes(i):
    a = workloads("softmax_f32")[i]["all_axes"]
    return a["rows"], a["cols"]


# ---- ok ----------------------------------------------------------------------------------------

def test_good_softmax_f32_is_proved_and_timed(refs):
    r = cuda_eval("softmax_f32", "good_softmax_f32.cu", refs, *FAST)
    check_ok(r, "softmax_f32", ITERS)
    print(summary_line(r))


# ---- compile_error, resource -------------------------------------------------------------------

def test_compile_error_reports_the_line(refs):
    line = marker_line(f"{K}/compile_error.cu")
    r = cuda_eval("softmax_f32", "compile_error.cu", refs, *FAST)
    ev = expect(r, "compile_error")
    assert "block_sum" in ev["log"], ev["log"]
    assert log_names_line(ev["log"], line), f"the log does not point at line {line}:\n{ev['log']}"
    assert ev.get("message"), ev
    assert r["workloads"] == []


def test_device_side_launch_is_refused(refs):
    """A fire-and-forget launch from the device (dynamic parallelism) cannot be built by kiln's
    NVRTC whole-program compile, so work cannot escape the timed region that way."""
    r = cuda_eval("softmax_f32", "side_stream.cu", refs, *FAST)
    expect(r, "compile_error")
    assert r["workloads"] == []


def test_block_of_2048_threads_is_a_resource_error(refs):
    r = cuda_eval("softmax_f32", "huge_block.cu", refs, *FAST)
    ev = expect(r, "resource")
    assert "2048" in ev["message"] and "1024" in ev["message"], ev
    check_untimed(r)


def test_300000_bytes_of_shared_memory_is_a_resource_error(refs):
    r = cuda_eval("softmax_f32", "huge_smem.cu", refs, *FAST)
    ev = expect(r, "resource")
    assert "shared" in ev["message"].lower() or "300000" in ev["message"], ev
    check_untimed(r)


# ---- wrong answers -----------------------------------------------------------------------------

def test_missing_cross_warp_reduction_is_a_mismatch(refs):
    r = cuda_eval("softmax_f32", "wrong.cu", refs, *FAST)
    ev = expect(r, "mismatch")
    # right while a row fits in one warp (1 x 1, 3 x 7): 5 x 4097 is the first wrong workload
    assert ev["workload_index"] == 2, ev
    rows, cols = softmax_axes(2)
    assert ev["output"] == "y" and ev["n_elements"] == rows * cols
    assert problem_tolerance(ev["tolerance"]) == pytest.approx(DEFAULT_TOLERANCE["float32"]), ev
    assert ev["max_abs_err"] > 0 and ev["rel_l2_err"] > 1.0, ev  # outputs several times too large
    assert 0 < ev["n_bad"] <= ev["n_elements"]
    assert 0 <= ev["first_bad_index"] < ev["n_elements"]
    assert ev["first_bad_value"] != pytest.approx(ev["first_bad_expected"]), ev
    check_untimed(r)


def test_racy_reduction_is_a_mismatch(refs):
    """No __syncthreads in a 32-warp shared-memory reduction. Measured on an H200 with a stand-alone
    harness: 396 of 400 launches wrong, every launch of the 3 x 7 workload, none of the first two
    workloads' failures a NaN — so the gate must see a mismatch, whatever the scheduling."""
    r = cuda_eval("softmax_f32", "racy.cu", refs, *FAST)
    ev = expect(r, "mismatch")
    assert ev.get("reason") is None and ev["max_abs_err"] > 0, ev
    assert ev["rel_l2_err"] > ev["tolerance"]["rel_l2"], ev
    check_untimed(r)


def test_skipped_row_is_unwritten(refs):
    r = cuda_eval("softmax_f32", "partial.cu", refs, *FAST)
    ev = expect(r, "unwritten")
    assert ev["workload_index"] == 0, ev
    rows, cols = softmax_axes(ev["workload_index"])
    assert ev["output"] == "y" and ev["n_elements"] == rows * cols
    assert ev["n_unwritten"] == cols, ev
    assert (rows - 1) * cols <= ev["first_index"] < rows * cols, ev
    check_untimed(r)


def test_nan_is_reported_with_its_index(refs):
    r = cuda_eval("softmax_f32", "nan.cu", refs, *FAST)
    ev = expect(r, "nan")
    assert ev["workload_index"] == 0, ev
    rows, cols = softmax_axes(0)
    assert ev["index"] == (rows * cols) // 2 and ev["value"] == "nan", ev
    check_untimed(r)


# ---- timeout, crashed, and the run goes on -----------------------------------------------------

def test_spinning_kernel_times_out_in_prove(refs):
    r = cuda_eval("softmax_f32", "loop.cu", refs, *FAST, "--timeout", TIMEOUT_S)
    ev = expect(r, "timeout")
    assert ev["phase"] == "prove", ev
    assert ev.get("workload_index") == 0, ev
    assert ev["limit_s"] == pytest.approx(TIMEOUT_S), ev
    assert r["_wall_s"] < TIMEOUT_S + 60, f"kiln eval took {r['_wall_s']:.1f} s"
    check_untimed(r)


@pytest.mark.parametrize("kernel,error_words", [
    ("illegal_address.cu", ("ILLEGAL_ADDRESS", "illegal memory access")),
    ("trap.cu", ("CUDA_ERROR",)),  # an H200 reports CUDA_ERROR_LAUNCH_FAILED for __trap()
])
def test_faulting_kernel_crashes_and_the_run_goes_on(kernel, error_words, refs):
    """The fault kills the gate's CUDA context; the verdict is `crashed` with the driver's text, and
    the next evaluation (a fresh gate) proves and times a good kernel as usual."""
    r = cuda_eval("softmax_f32", kernel, refs, *FAST)
    ev = expect(r, "crashed")
    assert ev["phase"] == "prove", ev
    assert ev["workload_index"] == 0, ev
    assert isinstance(ev.get("error"), str), ev
    assert any(w in ev["error"] for w in error_words), ev
    check_untimed(r)

    after = cuda_eval("softmax_f32", "good_softmax_f32.cu", refs, *FAST)
    check_ok(after, "softmax_f32", ITERS)


def test_good_kernel_after_a_timeout(refs):
    expect(cuda_eval("softmax_f32", "loop.cu", refs, *FAST, "--timeout", TIMEOUT_S), "timeout")
    check_ok(cuda_eval("softmax_f32", "good_softmax_f32.cu", refs, *FAST), "softmax_f32", ITERS)


def test_one_session_survives_sticky_faults_and_hangs(refs):
    """Several kernels through one gate session (`kiln eval PROBLEM K1 K2 ...`): the CUDA context is
    reused while verdicts are clean; an illegal address or a trap kills it, the fault is judged again
    by a fresh child (still crashed), and the next good kernel gets a fresh context."""
    import json
    from gate_util import PROBLEMS, run_kiln
    names = ["good_softmax_f32.cu", "wrong.cu", "good_softmax_f32.cu", "illegal_address.cu",
             "good_softmax_f32.cu", "good_softmax_f32.cu", "trap.cu", "loop.cu",
             "good_softmax_f32.cu"]
    p = run_kiln(["eval", f"{PROBLEMS}/softmax_f32", *[f"{K}/{n}" for n in names], "--backend",
                  "cuda", "--json", "--ref-dir", refs / "softmax_f32-cuda", *FAST, "--timeout",
                  TIMEOUT_S], timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    results = json.loads(p.stdout)
    got = [(r["outcome"], r["gate_child"], r.get("retried_fresh", False)) for r in results]
    assert got == [
        ("ok", "fresh", False),
        ("mismatch", "reused", False),
        ("ok", "reused", False),
        ("crashed", "fresh", True),
        ("ok", "fresh", False),
        ("ok", "reused", False),
        ("crashed", "fresh", True),
        ("timeout", "fresh", False),         # the child after a crash is fresh: no second look
        ("ok", "fresh", False),
    ], got
    for i in (0, 2, 4, 5, 8):
        check_ok(results[i], "softmax_f32", ITERS)


# ---- the fast kernel on the large problem ------------------------------------------------------

BIG_ITERS = 50


def test_fast_bf16_softmax_is_ok_fast_and_reproducible(refs):
    """good_softmax_bf16.cu on [1, 8, 4096, 4096]: proved, faster than PyTorch's own reference, at
    least half the speed of light, and two evaluations agree on the median to within 2%."""
    runs = []
    for attempt in range(2):
        r = cuda_eval("softmax_bf16_big", "good_softmax_bf16.cu", refs, "--iters", BIG_ITERS,
                      timeout=1200)
        check_ok(r, "softmax_bf16_big", BIG_ITERS)
        print(f"run {attempt + 1}: {summary_line(r)}")
        runs.append(r)

    big = [w["all_axes"] for w in workloads("softmax_bf16_big")].index(
        {"batch": 1, "heads": 8, "q": 4096, "k": 4096})
    w1, w2 = (r["workloads"][big] for r in runs)
    m1, m2 = w1["time_us"]["median"], w2["time_us"]["median"]
    apart_pct = 100 * abs(m1 - m2) / min(m1, m2)
    print(f"[1, 8, 4096, 4096]: median {m1:.1f} us then {m2:.1f} us ({apart_pct:.2f}% apart); "
          f"{w1['gbps']:.0f} and {w2['gbps']:.0f} GB/s; SOL {w1['sol_pct']:.0f}%; "
          f"PyTorch reference {w1['ref_time_us']} us")
    assert abs(m1 - m2) / min(m1, m2) < 0.02, (m1, m2)
    assert w1["min_bytes"] == 2 * 2 * 8 * 4096 * 4096  # bf16 in + bf16 out
    assert w1["sol_pct"] >= 50, w1
    if w1.get("ref_time_us"):
        assert m1 < w1["ref_time_us"], "slower than the PyTorch reference"
