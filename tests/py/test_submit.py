"""test_submit.py: `kiln submit RUN PROBLEM KERNEL_FILE`: an outside kernel goes through the gate,
lands in the run's store as a child of the problem's root (agent "submitted"), and becomes the
incumbent only when it is right and faster; the --json result is the submitter's feedback. Bad
input (a missing file, an unknown problem, a run in use, another backend) is exit status 2 with one
clear line. All on the cpu backend.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from gate_util import KILN, ROOT, kiln_env
from hand_library import SOFTMAX_BODY

pytestmark = pytest.mark.skipif(not KILN.exists(), reason="build/kiln is missing: run make first")

PROBLEM = ROOT / "tests/data/problems/softmax_f32"
KERNELS = ROOT / "tests/kernels/cpu"

# A correct softmax that sleeps 30 ms per call: slower than any honest kernel, so the ranking
# between it and good_softmax.c does not depend on the timing noise of a shared CI machine.
SLOW = ("// kiln: launch softmax_rows\n#include <time.h>\n"
        "void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {\n"
        "    struct timespec ts = {0, 30 * 1000 * 1000};\n"
        "    nanosleep(&ts, 0);\n"
        "    const float bad = 0.0f;" + SOFTMAX_BODY)


@pytest.fixture(scope="module")
def ref_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("submit-ref") / "softmax_f32-cpu"


@pytest.fixture()
def run(tmp_path) -> Path:
    run = tmp_path / "run"
    (run / "problems").mkdir(parents=True)
    shutil.copytree(PROBLEM, run / "problems" / "softmax_f32",
                    ignore=shutil.ignore_patterns("kiln"))
    return run


def submit(run: Path, problem: str, kernel, *extra, ref_dir: Path, json_out=True):
    args = [str(KILN), "submit", str(run), problem, str(kernel), "--backend", "cpu", "--iters", "3",
            "--ref-dir", str(ref_dir), *map(str, extra)]
    if json_out:
        args.append("--json")
    return subprocess.run(args, cwd=ROOT, env=kiln_env(), capture_output=True, text=True,
                          timeout=600)


def verdict(p: subprocess.CompletedProcess) -> dict:
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    out = json.loads(p.stdout)
    assert out["kiln_eval"] == 1 and out["problem"] == "softmax_f32" and out["backend"] == "cpu"
    assert isinstance(out["candidate_id"], int) and out["candidate_id"] > 0
    assert isinstance(out["incumbent"], bool) and isinstance(out["duplicate"], bool)
    assert "previous_incumbent" in out
    return out


def one_line_error(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 2, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, p.stderr
    assert p.stdout == ""
    return lines[0]


def test_submit_good_slow_wrong_duplicate(run, ref_dir, tmp_path):
    slow = tmp_path / "slow.c"
    slow.write_text(SLOW)
    # a first correct kernel: ok, and the incumbent since there is none
    a = verdict(submit(run, "softmax_f32", slow, ref_dir=ref_dir))
    assert a["outcome"] == "ok" and a["evidence"] == {}
    assert a["incumbent"] is True and a["previous_incumbent"] is None and a["duplicate"] is False
    assert a["summary"]["time_us_geomean"] >= 30000 * 0.9
    assert Path(a["kernel"]) == run / "candidates" / f"{a['candidate_id']}.c"
    assert Path(a["kernel"]).read_text() == SLOW

    # a faster correct kernel replaces it
    b = verdict(submit(run, "softmax_f32", KERNELS / "good_softmax.c", ref_dir=ref_dir))
    assert b["outcome"] == "ok" and b["incumbent"] is True
    assert b["previous_incumbent"]["candidate_id"] == a["candidate_id"]
    assert b["summary"]["time_us_geomean"] < b["previous_incumbent"]["time_us"]

    # a wrong kernel: the gate's evidence, and the incumbent stays
    c = verdict(submit(run, "softmax_f32", KERNELS / "wrong_softmax.c", ref_dir=ref_dir))
    assert c["outcome"] == "mismatch" and c["incumbent"] is False
    ev = c["evidence"]
    assert ev["workload_index"] == 1 and ev["output"] == "y" and ev["n_bad"] > 0
    assert ev["rel_l2_err"] > ev["tolerance"]["rel_l2"]
    assert c["previous_incumbent"]["candidate_id"] == b["candidate_id"]
    assert all(w.get("time_us") is None for w in c["workloads"])

    # a kernel that does not compile: the compiler's log is the feedback
    d = verdict(submit(run, "softmax_f32", KERNELS / "compile_error.c", ref_dir=ref_dir))
    assert d["outcome"] == "compile_error" and d["incumbent"] is False
    assert "row_sum" in d["evidence"]["log"]

    # the same kernel again is not gated again
    e = verdict(submit(run, "softmax_f32", KERNELS / "good_softmax.c", ref_dir=ref_dir))
    assert e["duplicate"] is True and e["candidate_id"] == b["candidate_id"]
    assert e["outcome"] == "ok" and e["incumbent"] is True

    # the store: candidates of agent "submitted", children of the root, one verdict each
    db = sqlite3.connect(run / "kiln.db")
    rows = db.execute("SELECT c.id, c.agent, c.parent_id, c.family, c.compile_log, n.parent_id, "
                      "n.candidate_id, n.status, r.outcome FROM candidate c JOIN node n ON n.id = "
                      "c.node_id JOIN latest_result r ON r.candidate_id = c.id ORDER BY c.id"
                      ).fetchall()
    assert [x[0] for x in rows] == [a["candidate_id"], b["candidate_id"], c["candidate_id"],
                                    d["candidate_id"]]
    assert [x[8] for x in rows] == ["ok", "ok", "mismatch", "compile_error"]
    assert [x[7] for x in rows] == ["done", "done", "failed", "failed"]
    for x in rows:
        assert x[1] == "submitted" and x[2] is None and x[3] is None and x[6] == x[0]
    assert "row_sum" in rows[3][4]
    root = db.execute("SELECT id FROM node WHERE parent_id IS NULL AND family IS NULL").fetchall()
    assert len(root) == 1 and all(x[5] == root[0][0] for x in rows)
    assert db.execute("SELECT count(*) FROM result").fetchone()[0] == 4
    inc = db.execute("SELECT incumbent_id FROM problem WHERE name = 'softmax_f32'").fetchone()[0]
    assert inc == b["candidate_id"]
    kinds = [k for (k,) in db.execute("SELECT kind FROM event ORDER BY id")]
    assert kinds.count("incumbent") == 2 and kinds.count("submitted") == 4
    assert db.execute("SELECT value FROM meta WHERE key = 'backend'").fetchone()[0] == "cpu"
    db.close()


def test_submit_human_output_and_problem_path(tmp_path, ref_dir):
    run = tmp_path / "fresh"  # no RUN/problems: the problem is named by its directory
    p = submit(run, str(PROBLEM), KERNELS / "good_softmax.c", ref_dir=ref_dir, json_out=False)
    assert p.returncode == 0, p.stderr
    assert "softmax_f32: candidate 1: ok" in p.stdout
    assert "incumbent now" in p.stdout
    # afterwards the store knows the problem by name
    p = submit(run, "softmax_f32", KERNELS / "nan_softmax.c", ref_dir=ref_dir)
    out = verdict(p)
    assert out["candidate_id"] == 2 and out["outcome"] == "nan" and out["incumbent"] is False


def test_submit_bad_input(run, ref_dir, tmp_path):
    line = one_line_error(submit(run, "softmax_f32", tmp_path / "none.c", ref_dir=ref_dir))
    assert "cannot read the kernel file" in line and "none.c" in line
    line = one_line_error(submit(run, "no_such_problem", KERNELS / "good_softmax.c",
                                 ref_dir=ref_dir))
    assert "unknown problem 'no_such_problem'" in line
    line = one_line_error(submit(tmp_path / "nowhere", "softmax_f32", KERNELS / "good_softmax.c",
                                 ref_dir=ref_dir))
    assert "unknown problem 'softmax_f32'" in line
    assert not (tmp_path / "nowhere").exists()  # nothing was created for a bad call
    empty = tmp_path / "empty.c"
    empty.write_text("")
    assert "empty" in one_line_error(submit(run, "softmax_f32", empty, ref_dir=ref_dir))
    p = subprocess.run([str(KILN), "submit", str(run)], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 2 and "expected RUN PROBLEM KERNEL_FILE" in p.stderr


def test_submit_while_optimize_holds_the_run(run, ref_dir):
    with open(run / "kiln.lock", "w") as f:
        f.write("pid 4242\nstarted 2025-01-01 00:00:00 UTC\n")
        f.flush()
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        line = one_line_error(submit(run, "softmax_f32", KERNELS / "good_softmax.c",
                                     ref_dir=ref_dir))
    assert "in use by kiln optimize (pid 4242" in line and "submit when it has finished" in line
    # released: it works
    out = verdict(submit(run, "softmax_f32", KERNELS / "good_softmax.c", ref_dir=ref_dir))
    assert out["outcome"] == "ok"


def test_submit_other_backend_refused(run, ref_dir):
    verdict(submit(run, "softmax_f32", KERNELS / "good_softmax.c", ref_dir=ref_dir))
    p = subprocess.run([str(KILN), "submit", str(run), "softmax_f32",
                        str(ROOT / "tests/kernels/cpu/good_softmax.c"), "--backend", "cuda"],
                       cwd=ROOT, env=kiln_env(), capture_output=True, text=True, timeout=120)
    line = one_line_error(p)
    assert "--backend cpu" in line
