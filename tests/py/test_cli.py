"""test_cli.py: every kiln command answers --help, and bad invocations get one clear line and status 2."""
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
KILN = ROOT / "build" / "kiln"
pytestmark = pytest.mark.skipif(not KILN.exists(), reason="build/kiln is missing: run make first")


def kiln(*args):
    return subprocess.run([str(KILN), *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("cmd", ["eval", "sweep", "optimize", "serve", "submit", "llm-try", "tune"])
def test_help(cmd):
    r = kiln(cmd, "--help")
    assert r.returncode == 0
    assert r.stdout.startswith(f"usage: kiln {cmd}")


def test_top_level_help_lists_commands():
    r = kiln("--help")
    assert r.returncode == 0
    for cmd in ("eval", "capture", "sweep", "optimize", "submit", "llm-try", "serve", "run", "tune"):
        assert f"  {cmd}" in r.stdout


def test_unknown_command():
    r = kiln("frobnicate")
    assert r.returncode == 2
    assert "unknown command 'frobnicate'" in r.stderr


@pytest.mark.parametrize("args,message", [
    (["eval"], "expected PROBLEM_DIR and KERNEL_FILE"),
    (["eval", "tests/data/problems/softmax_f32", "no/such/kernel.c"], "cannot read the kernel file"),
    (["eval", "no/such/problem", "tests/kernels/cpu/good_softmax.c"], "no/such/problem"),
    (["eval", "tests/data/problems/softmax_f32", "tests/kernels/cpu/good_softmax.c", "--backend", "tpu"],
     "unknown backend 'tpu'"),
    (["eval", "tests/data/problems/softmax_f32", "tests/kernels/cpu/good_softmax.c", "--iters", "0"],
     "--iters wants an integer"),
    (["sweep"], "expected one PROBLEM_DIR"),
    (["sweep", "tests/data/problems/softmax_f32", "--family", "nonesuch"], "unknown family 'nonesuch'"),
])
def test_bad_invocations(args, message):
    r = kiln(*args)
    assert r.returncode == 2
    assert message in r.stderr
    assert "Traceback" not in r.stderr
