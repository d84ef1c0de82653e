"""test_install_dropped: an aten entry for an op whose other results capture dropped as empty.

An inference BatchNorm2d under torch.no_grad() on the cpu reaches aten::native_batch_norm, which returns
(y, save_mean, save_invstd) with the last two empty; capture keeps y as the problem's only output and lists the
two in kiln.dropped_outputs with their shape, strides and dtype. The installed entry must return all three (the
empty ones made as the op makes them), hit, and give the model eager's output."""

from __future__ import annotations

import json
import os
import textwrap

import pytest

torch = pytest.importorskip("torch")

BN_SCRIPT = textwrap.dedent("""
    import torch
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8)).eval()
    with torch.no_grad():
        m[1].running_mean.uniform_(-1, 1)
        m[1].running_var.uniform_(0.5, 2)
        m[1].weight.uniform_(0.5, 2)
        m[1].bias.uniform_(-1, 1)
    x = torch.randn(2, 3, 5, 5)
    with torch.no_grad():
        for _ in range(2):
            m(x)
""")

BN_C = """// kiln: launch bn_rows
void bn_rows(const float *x, const float *w, const float *b, const float *rm, const float *rv, float *y,
             int64_t n, int64_t c, int64_t hw1) {
    const int64_t hw = hw1 * hw1;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < c; j++) {
            const float a = w[j] / sqrtf(rv[j] + 1e-5f), s = b[j] - rm[j] * a;
            for (int64_t k = 0; k < hw; k++)
                y[(i * c + j) * hw + k] = x[(i * c + j) * hw + k] * a + s;
        }
}
"""


def test_native_batch_norm_entry_returns_the_dropped_empty_results(tmp_path):
    import kiln
    from hand_library import hand_library
    lib_dir = hand_library(tmp_path, BN_SCRIPT, "native_batch_norm", BN_C, "bn_rows")
    (entry,) = json.loads(open(os.path.join(lib_dir, "manifest.json")).read())["entries"]
    definition = json.loads(open(os.path.join(os.path.dirname(lib_dir), "problems", entry["problem"],
                                              "definition.json")).read())
    assert list(definition["axes"]) == ["n2", "n8", "n5"]
    dropped = definition["kiln"]["dropped_outputs"]
    assert dropped["indices"] == [1, 2]
    assert [t["shape"] for t in dropped["tensors"]] == [[0], [0]]

    ns = {}
    exec(BN_SCRIPT, ns)  # the captured script's model and input, in this process
    m, x = ns["m"], ns["x"]
    with torch.no_grad():
        want = m(x)
        h = m[0](x)
        want_all = torch.ops.aten.native_batch_norm.default(h, m[1].weight, m[1].bias, m[1].running_mean,
                                                            m[1].running_var, False, 0.1, 1e-5)
    inst = kiln.install(lib_dir, entries="all", dispatch="python")
    try:
        assert entry["problem"] in inst.installed, inst.skipped
        with torch.no_grad():
            got = m(x)
            got_all = torch.ops.aten.native_batch_norm.default(h, m[1].weight, m[1].bias, m[1].running_mean,
                                                               m[1].running_var, False, 0.1, 1e-5)
        assert inst.stats()["entries"][entry["problem"]]["hits"] >= 2
    finally:
        kiln.uninstall()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert len(got_all) == len(want_all) == 3
    for g, w in zip(got_all[1:], want_all[1:]):
        assert g.shape == w.shape and g.stride() == w.stride() and g.dtype == w.dtype and g.device == w.device


def test_the_install_check_benchmarks_it(tmp_path):
    """kiln tune's per-call timing (install_cost.EntryBench) takes the entry too, not only kiln.install."""
    from hand_library import hand_library

    from kiln.install_cost import EntryBench
    from kiln.install_runtime import Library
    lib = Library(hand_library(tmp_path, BN_SCRIPT, "native_batch_norm", BN_C, "bn_rows"))
    try:
        (entry,) = lib.entries
        bench = EntryBench(entry, lib, {})
        with torch.no_grad():
            result = bench.call(bench.inputs)
        assert len(result) == 3
    finally:
        lib.close()
