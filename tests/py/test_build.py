"""What the build promises about its products: libkiln_rt.so, the one piece of kiln loaded into a user's
PyTorch process, exports its interface and nothing else and pulls in neither SQLite nor libcurl; the kiln
binary, libkiln_rt and the Python package name one release."""
import ctypes
import os
import re
import shutil
import subprocess

import pytest

import kiln

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RT = os.path.join(ROOT, "build", "libkiln_rt.so")
KILN = os.path.join(ROOT, "build", "kiln")


def _tool(name: str) -> str:
    path = shutil.which(name)
    if not path:
        pytest.skip(f"{name} is not installed (binutils / libc-bin)")
    return path


def test_runtime_exports_only_its_interface():
    out = subprocess.run([_tool("nm"), "-D", "--defined-only", RT], capture_output=True, text=True,
                         check=True).stdout
    names = [line.split()[-1] for line in out.splitlines() if line.strip()]
    assert names, f"nm lists no symbols in {RT}"
    strays = [n for n in names if not n.startswith("kiln_rt_")]
    assert not strays, f"libkiln_rt.so exports more than kiln_rt_*: {strays[:20]}"
    # every function of kiln_rt.h, and the ones python/kiln/install.py declares, are there
    header = open(os.path.join(ROOT, "src", "runtime", "kiln_rt.h")).read()
    declared = set(re.findall(r"\b(kiln_rt_[a-z_]+)\s*\(", header))
    assert declared and declared <= set(names), f"missing: {sorted(declared - set(names))}"


def test_runtime_links_neither_sqlite_nor_curl():
    out = subprocess.run([_tool("ldd"), RT], capture_output=True, text=True, check=True).stdout
    assert "libcjson" in out  # the check reads real ldd output
    for lib in ("sqlite", "curl", "ssl", "microhttpd"):
        assert lib not in out, f"libkiln_rt.so depends on {lib}:\n{out}"



def test_python_and_c_pick_one_default_backend():
    """kiln.default_backend() is the C rule (kiln_backend_default): cuda exactly when a driver loads and a
    GPU is visible; where PyTorch sees a GPU that must be cuda, and without a driver it must be cpu."""
    chosen = kiln.default_backend()
    assert chosen in ("cuda", "cpu")
    try:
        ctypes.CDLL("libcuda.so.1")
        driver = True
    except OSError:
        driver = False
    if not driver:
        assert chosen == "cpu"
    import torch
    if torch.cuda.is_available():
        assert chosen == "cuda"


def test_one_version_everywhere():
    cli = subprocess.run([KILN, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    assert cli == f"kiln {kiln.__version__}", f"build/kiln says {cli!r}, python/kiln says {kiln.__version__!r}"
    rt = ctypes.CDLL(RT)
    rt.kiln_rt_kiln_version.restype = ctypes.c_char_p
    assert rt.kiln_rt_kiln_version().decode() == kiln.__version__
    header = open(os.path.join(ROOT, "src", "util", "version.h")).read()
    assert re.search(r'#define KILN_VERSION "' + re.escape(kiln.__version__) + '"', header), header
