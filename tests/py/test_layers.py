"""test_layers.py: two facts of kiln's layout (DESIGN.md, "Layout") checked on the source and the
build rather than trusted: no two files of src/ call into each other (scripts/check_cycles.sh, over
the objects `make` built), and the store is the only part that speaks SQL (no `sqlite3_` outside
src/store).
"""

from __future__ import annotations

import subprocess

import pytest

from gate_util import KILN, ROOT

pytestmark = pytest.mark.skipif(not KILN.exists(), reason="build/kiln is missing: run make first")


def test_no_two_source_files_call_each_other():
    r = subprocess.run(["bash", str(ROOT / "scripts/check_cycles.sh")], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no two files of src/ call into each other" in r.stdout


def test_the_cycle_check_finds_a_cycle(tmp_path):
    """The check itself: two objects that use each other's symbols are reported."""
    src = tmp_path / "src" / "x"
    src.mkdir(parents=True)
    (src / "a.c").write_text("int b_fn(void);\nint a_fn(void) { return b_fn(); }\n")
    (src / "b.c").write_text("int a_fn(void);\nint b_fn(void) { return 1; }\n"
                             "int b_other(void) { return a_fn(); }\n")
    (src / "c.c").write_text("int a_fn(void);\nint c_fn(void) { return a_fn(); }\n")
    obj = tmp_path / "build" / "obj" / "src" / "x"
    obj.mkdir(parents=True)
    for name in ("a", "b", "c"):
        subprocess.run(["cc", "-c", str(src / f"{name}.c"), "-o", str(obj / f"{name}.o")],
                       check=True)
    script = tmp_path / "scripts" / "check_cycles.sh"
    script.parent.mkdir()
    script.write_text((ROOT / "scripts/check_cycles.sh").read_text())
    r = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.strip().splitlines() == ["cycle: src/x/a.c <-> src/x/b.c"]


def test_only_the_store_speaks_sql():
    speakers = sorted({str(p.relative_to(ROOT)) for p in (ROOT / "src").rglob("*")
                       if p.is_file() and "sqlite3_" in p.read_text(errors="replace")})
    assert speakers, "no file of src/ speaks SQL: the store is gone?"
    assert [p for p in speakers if not p.startswith("src/store/")] == [], speakers
