"""Tests of kiln's Python package as a user installs it: `pip install ./python` into a fresh virtual
environment (offline: the build backend is python/kiln_build.py and needs nothing downloaded) gives an
`import kiln` that needs no hand-made sys.path, carries libkiln_rt.so beside the package, and installs a
small cpu library into a model. torch comes from this interpreter's site-packages through a .pth file, so
nothing is downloaded."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

torch = pytest.importorskip("torch")

from hand_library import softmax_library  # noqa: E402

USER_SCRIPT = textwrap.dedent("""
    import json, os, sys, torch
    import kiln
    from kiln.install_runtime import runtime_path
    library = sys.argv[1]
    x = torch.randn(64, 256)
    with torch.no_grad():
        eager = torch.softmax(x, dim=-1)
        inst = kiln.install(library, entries="all")  # the kernel is untimed: installed on request
        got = torch.softmax(x, dim=-1)
        stats = inst.stats()
        kiln.uninstall()
    print(json.dumps({"kiln": kiln.__file__, "runtime": runtime_path(), "hits": stats["hits"],
                      "max_err": float((got - eager).abs().max())}))
""")


def test_pip_install_into_a_fresh_venv_then_install_a_library(tmp_path):
    if not os.path.exists(os.path.join(ROOT, "build", "libkiln_rt.so")):
        pytest.fail("build/libkiln_rt.so is missing: run `make` first")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300)
    py = str(venv / "bin" / "python")
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(site, "torch-from-the-test.pth"), "w") as f:  # torch without a download
        f.write(os.path.dirname(os.path.dirname(torch.__file__)) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KILN_HOME", "KILN_RT_LIB")}
    env["PIP_NO_INDEX"] = "1"  # nothing may be fetched
    pip = subprocess.run([py, "-m", "pip", "install", "--no-deps", os.path.join(ROOT, "python")], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stdout[-2000:] + pip.stderr[-2000:]
    assert not os.path.exists(os.path.join(ROOT, "python", "build"))  # the checkout stays clean
    lib = softmax_library(tmp_path)
    user = tmp_path / "user.py"
    user.write_text(USER_SCRIPT)
    run = subprocess.run([py, str(user), lib], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["kiln"].startswith(site), out  # the installed package, not the checkout
    assert out["runtime"] == os.path.join(site, "kiln", "libkiln_rt.so")
    assert out["hits"] >= 1 and out["max_err"] < 1e-5, out


def test_make_install_puts_a_working_kiln_under_prefix(tmp_path):
    """`make install PREFIX=DIR`: DIR/bin/kiln runs, and its Python commands use the package installed beside
    it (kiln_home is DIR/lib/kiln), not the checkout's."""
    prefix = tmp_path / "prefix"
    make = subprocess.run(["make", "install", f"PREFIX={prefix}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert make.returncode == 0, make.stdout[-2000:] + make.stderr[-2000:]
    kiln_bin = str(prefix / "bin" / "kiln")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KILN_HOME", "KILN_BIN", "KILN_PYTHON")}
    help_ = subprocess.run([kiln_bin, "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert help_.returncode == 0 and help_.stdout.startswith("usage: kiln COMMAND"), help_.stderr
    script = tmp_path / "where.py"
    script.write_text("import kiln, torch\nprint('kiln from', kiln.__file__)\n"
                      "with torch.no_grad():\n    torch.softmax(torch.randn(8, 16), dim=-1)\n")
    cap = subprocess.run([kiln_bin, "capture", str(script), "--out", str(tmp_path / "run"), "--device", "cpu",
                          "--no-reference"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert cap.returncode == 0, cap.stdout[-2000:] + cap.stderr[-2000:]
    assert f"kiln from {prefix}/lib/kiln/python/kiln/__init__.py" in cap.stdout
    assert os.listdir(tmp_path / "run" / "problems")
