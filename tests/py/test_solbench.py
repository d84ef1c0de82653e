"""test_solbench.py: kiln accepts a problem directory of the public SOL-ExecBench repository exactly as
published (../shared/solbench/rmsnorm_h4096): kiln eval proves and times a CPU kernel on all 14 workloads."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
KILN = ROOT / "build" / "kiln"
PUBLISHED = ROOT.parent / "shared" / "solbench" / "rmsnorm_h4096"


# The problem's three reference sets take about 2.8 GiB; kiln eval refuses to write them where they would
# leave less than KILN_DISK_RESERVE_GB free, which these tests lower to a quarter GiB for their temporary folder.
REF_GIB = 2.8
RESERVE_GIB = 0.25


@pytest.fixture(scope="module")
def ref_dir(tmp_path_factory):
    """One reference directory for the module (building it is the slow part on CPU), removed after it."""
    d = tmp_path_factory.mktemp("solbench-ref")
    free = shutil.disk_usage(d).free / 2**30
    if free < REF_GIB + RESERVE_GIB:
        pytest.skip(f"{d} has {free:.2f} GiB free: the published problem's reference data needs about "
                    f"{REF_GIB + RESERVE_GIB:.2f} GiB")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _env(tmp_path):
    return dict(os.environ, KILN_PYTHON=sys.executable, KILN_CACHE_DIR=str(tmp_path / "cache"),
                KILN_DISK_RESERVE_GB=str(RESERVE_GIB))


@pytest.mark.skipif(not KILN.exists(), reason="build/kiln is missing: run make first")
@pytest.mark.skipif(not PUBLISHED.exists(), reason=f"{PUBLISHED} is not here")
def test_published_rmsnorm_problem_proves_and_times(tmp_path, ref_dir):
    env = _env(tmp_path)
    proc = subprocess.run(
        [str(KILN), "eval", str(PUBLISHED), "examples/rmsnorm/rmsnorm_h4096.c", "--backend", "cpu",
         "--json", "--iters", "2", "--warmup", "0", "--ref-dir", str(ref_dir)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["problem"] == "rmsnorm_h4096"
    assert result["outcome"] == "ok", result["evidence"]
    assert len(result["workloads"]) == 14
    batch = [w["axes"]["batch_size"] for w in result["workloads"]]
    assert batch[0] == 7 and max(batch) == 14509
    for w in result["workloads"]:
        assert w["proved_sets"] == 3
        assert w["time_us"]["median"] > 0
        assert w["gbps"] > 0


@pytest.mark.skipif(not KILN.exists(), reason="build/kiln is missing: run make first")
@pytest.mark.skipif(not PUBLISHED.exists(), reason=f"{PUBLISHED} is not here")
def test_published_problem_rejects_a_kernel_with_the_wrong_eps(tmp_path, ref_dir):
    """The gate must tell 1e-5 from 1e-2 in the same kernel: a wrong epsilon is a mismatch."""
    src = (ROOT / "examples/rmsnorm/rmsnorm_h4096.c").read_text().replace("1e-5f", "1e-1f")
    kernel = tmp_path / "wrong_eps.c"
    kernel.write_text(src)
    env = _env(tmp_path)
    proc = subprocess.run(
        [str(KILN), "eval", str(PUBLISHED), str(kernel), "--backend", "cpu", "--json", "--no-time",
         "--sets", "1", "--ref-dir", str(ref_dir)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["outcome"] == "mismatch"
    assert result["evidence"]["max_abs_err"] > 0
