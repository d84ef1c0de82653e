"""test_optimize.py: `kiln optimize RUN` on the cpu backend, for real: a run over small problems finishes
within its budget with every candidate's outcome stored and the library written; kill -9 of the whole
process group mid-run loses nothing finished and a rerun resumes without evaluating a finished
candidate again; SIGINT stops cleanly; a locked or corrupt store is a clear error (exit 2).

The problems are copies of tests/data/problems/softmax_f32 and of the families' own test problems
(tests/data/families/<family>/...) — whichever of them a linked kernel family matches (asked with
`kiln sweep --list`). Their reference data is built once per module, in the copies, so that each run
starts at once. On the cpu backend a family emits one C source for every point of its space, so the
search dedupes every problem down to one candidate per matching family: the runs here exercise the
processes, the store, resume and the library, while the tree policy itself is tested in
tests/c/test_mcts.c.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gate_util import KILN, ROOT, kiln_env  # noqa: E402

pytestmark = pytest.mark.skipif(not KILN.exists(), reason=f"{KILN} is missing: run make first")

# Candidate problems, hottest first (the share written into each copy): softmax_f32 is the problem
# every kiln has; the others are the family engineers' small test problems, used when present.
CANDIDATES = [
    "tests/data/problems/softmax_f32",
    "tests/data/families/rownorm/rms_aten_rms_norm_f32",
    "tests/data/families/eltwise/add_relu_f32",
    "tests/data/families/pool/global_nchw_f32",
    "tests/data/families/chnorm/gn_native_f32",
    "tests/data/families/softmax/f32_odd",
    "tests/data/families/rownorm/ln_handwritten_f32",
    "tests/data/families/eltwise/module_gelu_f32",
    "tests/data/families/pool/adaptive_nchw_f32",
    "tests/data/families/chnorm/bn_f32_nchw",
]
# A problem no family matches: it must be reported as skipped, never break the run.
UNMATCHED = "tests/data/problems/scale_bf16"

RUN_TIMEOUT = 150


def _matches(problem: str) -> bool:
    if not (ROOT / problem / "definition.json").exists():
        return False
    r = subprocess.run([str(KILN), "sweep", problem, "--list", "--backend", "cpu"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    return r.returncode == 0 and "matches family" in r.stdout


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """RUN/problems with the matched problems (shares set, hottest first), reference data built."""
    matched = [p for p in CANDIDATES if _matches(p)]
    if len(matched) < 2:
        pytest.skip(f"only {len(matched)} of the test problems match a linked kernel family "
                    f"({', '.join(matched) or 'none'}): the family engineers' work is not linked yet")
    base = tmp_path_factory.mktemp("template")
    problems = base / "problems"
    problems.mkdir()
    names = []
    for i, rel in enumerate(matched + [UNMATCHED]):
        dst = problems / Path(rel).name
        shutil.copytree(ROOT / rel, dst, ignore=shutil.ignore_patterns("kiln"))
        definition = json.loads((dst / "definition.json").read_text())
        kiln = definition.setdefault("kiln", {})
        kiln["share"] = round(0.5 / (i + 1), 6)  # hottest first, in CANDIDATES order
        (dst / "definition.json").write_text(json.dumps(definition, indent=2))
        names.append(definition["name"])
    # the reference data, once, in this interpreter (it has torch)
    sys.path.insert(0, str(ROOT / "python"))
    from kiln.reference import build_reference
    for rel in matched:
        build_reference(str(problems / Path(rel).name), device="cpu", quiet=True, log=lambda line: None)
    return {"dir": base, "names": names[:len(matched)], "unmatched": names[-1]}


def new_run(template, tmp_path, name="run") -> Path:
    run = tmp_path / name
    run.mkdir()
    shutil.copytree(template["dir"] / "problems", run / "problems")
    return run


def optimize_cmd(run: Path, *args) -> list:
    return [str(KILN), "optimize", str(run), "--backend", "cpu", *map(str, args)]


def run_optimize(run: Path, *args, timeout=RUN_TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run(optimize_cmd(run, *args), cwd=ROOT, env=kiln_env(), capture_output=True,
                          text=True, timeout=timeout)


def db(run: Path) -> sqlite3.Connection:
    con = sqlite3.connect(f"file:{run / 'kiln.db'}?mode=ro", uri=True, timeout=30)
    con.execute("PRAGMA busy_timeout = 30000")
    return con


def query(run: Path, sql: str, *args) -> list:
    con = db(run)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def gate_evals(run: Path) -> dict:
    """candidate id -> how many times a gate started evaluating it (RUN/logs/gate.log)."""
    counts = {}
    log = run / "logs" / "gate.log"
    if log.exists():
        for line in log.read_text().splitlines():
            m = re.match(r"eval (\d+) ", line)
            if m:
                counts[int(m.group(1))] = counts.get(int(m.group(1)), 0) + 1
    return counts


def assert_every_candidate_has_a_result(run: Path):
    missing = query(run, "SELECT c.id FROM candidate c LEFT JOIN result r ON r.candidate_id = c.id "
                         "WHERE r.id IS NULL")
    assert missing == [], f"candidates without a result: {missing}"
    dups = query(run, "SELECT candidate_id, COUNT(*) FROM result GROUP BY candidate_id HAVING COUNT(*) > 1")
    assert dups == [], f"candidates evaluated more than once: {dups}"


def wait_group_gone(pgid: int, timeout: float = 30):
    """SIGKILL is asynchronous: the coordinator is reaped before its workers have all exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def no_segment_left(run: Path, pid: int) -> bool:
    return not any(f.endswith(f"-{pid}") and f.startswith("kiln-") for f in os.listdir("/dev/shm"))


def test_optimize_completes_within_budget(template, tmp_path):
    run = new_run(template, tmp_path)
    t0 = time.monotonic()
    r = run_optimize(run, "--budget", 6, "--agents", 2, "--json")
    elapsed = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    table = json.loads(r.stdout)
    assert table["stopped"] == "done"
    rows = {p["problem"]: p for p in table["problems"]}
    # hottest first, the unmatched problem reported as skipped with the reason
    assert [p["problem"] for p in table["problems"]][:len(template["names"])] == template["names"]
    assert "no kernel family matches" in rows[template["unmatched"]]["skipped"]
    for name in template["names"]:
        row = rows[name]
        assert "skipped" not in row, row
        assert 1 <= row["candidates"] <= 6
        assert row["results"] == row["candidates"]
    # the store: every candidate has exactly one result; the budget holds per problem
    assert_every_candidate_has_a_result(run)
    per_problem = query(run, "SELECT p.name, COUNT(c.id) FROM problem p LEFT JOIN candidate c "
                             "ON c.problem_id = p.id GROUP BY p.id")
    for name, n in per_problem:
        assert n <= 6, (name, n)
    outcomes = query(run, "SELECT outcome, COUNT(*) FROM result GROUP BY outcome")
    assert sum(n for _, n in outcomes) >= len(template["names"])
    # every candidate's file is where the gate read it, and its source is in the store
    for cid, source in query(run, "SELECT id, source FROM candidate"):
        assert (run / "candidates" / f"{cid}.c").read_text() == source
    # the tree: a root per problem, a node per candidate, statistics flushed
    roots = query(run, "SELECT COUNT(*) FROM node WHERE parent_id IS NULL AND draft = 0")[0][0]
    assert roots == len(template["names"])
    assert query(run, "SELECT COUNT(*) FROM candidate WHERE node_id IS NULL")[0][0] == 0
    visited = query(run, "SELECT SUM(visits) FROM node WHERE parent_id IS NULL AND draft = 0")[0][0]
    assert visited == query(run, "SELECT COUNT(*) FROM result")[0][0]
    # the library: an entry for every problem that has an ok candidate
    manifest = json.loads((run / "library" / "manifest.json").read_text())
    ok_problems = {n for (n,) in query(run, "SELECT DISTINCT p.name FROM problem p JOIN candidate c "
                                            "ON c.problem_id = p.id JOIN result r ON "
                                            "r.candidate_id = c.id WHERE r.outcome = 'ok'")}
    assert ok_problems, "no candidate proved ok: the families' cpu emitters should pass the gate"
    text = json.dumps(manifest)
    for name in ok_problems:
        assert name in text, f"{name} has an ok candidate but no library entry"
    # incumbents recorded as events, start and done too
    kinds = {k for (k,) in query(run, "SELECT DISTINCT kind FROM event")}
    assert {"start", "done", "incumbent", "skip"} <= kinds
    assert elapsed < RUN_TIMEOUT
    # a rerun of a finished run does nothing new and says so
    again = run_optimize(run, "--budget", 6, "--agents", 2, "--json")
    assert again.returncode == 0, again.stderr
    assert query(run, "SELECT COUNT(*) FROM result")[0][0] == sum(n for _, n in outcomes)
    kinds = [k for (k,) in query(run, "SELECT kind FROM event ORDER BY id")]
    assert kinds.count("start") == 2 and "resume" in kinds
    # the other backend cannot continue this run's candidates
    other = subprocess.run([str(KILN), "optimize", str(run), "--backend", "cuda", "--gates", "1"],
                           cwd=ROOT, env=kiln_env(), capture_output=True, text=True, timeout=60)
    assert other.returncode == 2
    assert "was optimised with --backend cpu" in other.stderr


def write_model_json(run: Path, problem: str):
    """A tiny model.json: a cast feeding the problem's op, whose output feeds a multiply."""
    model = {"kiln_model": 1, "ops": [
        {"id": 0, "aten": "aten::_to_copy.default", "module": "model.cast", "problem": None},
        {"id": 1, "aten": "aten::_softmax.default", "module": "model.attn", "problem": problem},
        {"id": 2, "aten": "aten::mul.Tensor", "module": "model.attn", "problem": None}],
        "edges": [[0, 1, 10], [1, 2, 11]]}
    (run / "model.json").write_text(json.dumps(model))


def test_kill_9_then_resume(template, tmp_path):
    if len(template["names"]) < 4:
        pytest.skip("fewer than 4 matched problems: a kill mid-run cannot be placed reliably")
    run = new_run(template, tmp_path)
    write_model_json(run, template["names"][0])
    args = ("--budget", 20, "--agents", 2, "--specialists", "fusion,geometry", "--quiet")
    proc = subprocess.Popen(optimize_cmd(run, *args), cwd=ROOT, env=kiln_env(), start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        n = 0
        while time.monotonic() < deadline and proc.poll() is None:
            if (run / "kiln.db").exists():
                try:
                    n = query(run, "SELECT COUNT(*) FROM result")[0][0]
                except sqlite3.OperationalError:
                    n = 0  # the schema is being created
                if n >= 2:
                    break
            time.sleep(0.05)
        assert proc.poll() is None, f"the run ended before it could be killed:\n{proc.stderr.read()}"
        assert n >= 2
        os.killpg(proc.pid, signal.SIGKILL)  # the coordinator, its agents, its gate, their children
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    wait_group_gone(proc.pid)
    before = query(run, "SELECT id, candidate_id, outcome, time_us, score, result_json FROM result ORDER BY id")
    finished = {row[1] for row in before}
    expected_total = len(template["names"])
    assert len(finished) < expected_total, "everything had finished before the kill"

    r = run_optimize(run, *args, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["stopped"] == "done"
    after = query(run, "SELECT id, candidate_id, outcome, time_us, score, result_json FROM result ORDER BY id")
    # nothing finished was lost or changed
    after_by_id = {row[0]: row for row in after}
    for row in before:
        assert after_by_id.get(row[0]) == row
    # nothing finished was evaluated again; everything else was finished by the rerun
    evals = gate_evals(run)
    for cid in finished:
        assert evals.get(cid) == 1, f"candidate {cid} was evaluated {evals.get(cid)} times"
    assert_every_candidate_has_a_result(run)
    done = query(run, "SELECT COUNT(DISTINCT c.problem_id) FROM candidate c JOIN result r "
                      "ON r.candidate_id = c.id")[0][0]
    assert done == expected_total
    # the rerun said what it resumed
    start = query(run, "SELECT message FROM event WHERE kind = 'start' ORDER BY id")
    assert len(start) == 2 and f"resumed {len(before)} results" in start[1][0]
    resume = query(run, "SELECT message FROM event WHERE kind = 'resume'")
    assert len(resume) == 1 and f"{len(before)} results kept" in resume[0][0]
    # the fusion agent read model.json: the cast before and the multiply after the problem's op
    fusion = [m for (m,) in query(run, "SELECT message FROM event WHERE kind = 'fusion'")]
    assert any("producer aten::_to_copy.default (op 0" in m and "input of" in m for m in fusion), fusion
    assert any("consumer aten::mul.Tensor (op 2" in m for m in fusion), fusion
    assert (run / "library" / "manifest.json").exists()


def children_of(pid: int) -> list:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def test_worker_deaths_are_data(template, tmp_path):
    """A gate killed mid-evaluation: its candidate is recorded as crashed and a new gate carries on;
    an agent killed: a new agent of its kind carries on; the run completes."""
    if len(template["names"]) < 4:
        pytest.skip("fewer than 4 matched problems: too short a run to kill workers in")
    run = new_run(template, tmp_path)
    proc = subprocess.Popen(optimize_cmd(run, "--budget", 20, "--agents", 2, "--quiet", "--json"),
                            cwd=ROOT, env=kiln_env(), start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    killed_gate = killed_agent = None
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        log = run / "logs" / "gate.log"
        while time.monotonic() < deadline and proc.poll() is None and killed_gate is None:
            if log.exists():
                lines = log.read_text().splitlines()
                if any(line.startswith("done ") for line in lines) and lines[-1].startswith("eval "):
                    m = re.match(r"eval (\d+) pid=(\d+)", lines[-1])
                    killed_gate = (int(m.group(1)), int(m.group(2)))
                    os.kill(killed_gate[1], signal.SIGKILL)
                    agents = [c for c in children_of(proc.pid) if c != killed_gate[1]]
                    if agents:
                        killed_agent = agents[0]
                        os.kill(killed_agent, signal.SIGKILL)
            time.sleep(0.01)
        out, err = proc.communicate(timeout=RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if killed_gate is None:
        pytest.skip("the run finished before a gate could be caught evaluating")
    assert proc.returncode == 0, err
    assert json.loads(out)["stopped"] == "done"
    events = query(run, "SELECT kind, message FROM event")
    restarts = [m for k, m in events if k == "gate_restart"]
    assert restarts and f"pid {killed_gate[1]}" in restarts[0]
    outcome = query(run, "SELECT outcome, result_json FROM result WHERE candidate_id = ?", killed_gate[0])
    if "holding a candidate" in restarts[0]:
        # caught mid-evaluation: recorded as crashed, with the gate's death as the evidence
        assert outcome[0][0] == "crashed"
        assert "gate process" in json.loads(outcome[0][1])["evidence"]["error"]
    if killed_agent is not None:
        assert any(k == "agent_restart" and f"pid {killed_agent}" in m for k, m in events)
    assert_every_candidate_has_a_result(run)


def test_a_noisy_baseline_is_flagged_not_divided_by(template, tmp_path):
    """The winner's gate result carries an eager baseline whose spread is 39756 % (a scheduler stall while
    eager was timed): the table says "noisy" and shows the spread instead of a speedup, --json has no
    figure, and the library says the entry does not beat eager (kiln.install leaves it out). The run also
    announced its plan and marked where its events begin."""
    run = new_run(template, tmp_path)
    r = run_optimize(run, "--budget", 2, "--agents", 2, "--json")
    assert r.returncode == 0, r.stderr
    assert "kiln optimize: plan: " in r.stderr
    kinds = [k for (k,) in query(run, "SELECT kind FROM event WHERE problem_id IS NULL ORDER BY id")]
    assert kinds[0] == "prepare" and kinds.index("start") < kinds.index("plan") < kinds.index("done")
    name = template["names"][0]
    con = sqlite3.connect(str(run / "kiln.db"))
    rows = con.execute("SELECT r.id, r.result_json, r.time_us FROM result r JOIN problem p ON p.id = r.problem_id "
                       "WHERE p.name = ? AND r.outcome = 'ok'", (name,)).fetchall()
    assert rows, f"{name} has no ok result"
    for rid, text, time_us in rows:
        res = json.loads(text)
        for w in res["workloads"]:
            w["ref_time_us"], w["ref_spread_pct"] = 581.0 * time_us, 39756.0
        con.execute("UPDATE result SET result_json = ? WHERE id = ?", (json.dumps(res), rid))
    con.commit()
    con.close()
    again = run_optimize(run, "--budget", 2, "--agents", 2, "--json")  # finished: the table and the library
    assert again.returncode == 0, again.stderr
    row = next(p for p in json.loads(again.stdout)["problems"] if p["problem"] == name)
    assert row["speedup"] is None and row["speedup_verdict"] == "noisy_baseline"
    assert row["eager_spread_pct"] == 39756.0 and row["speedup_ratio"] == pytest.approx(581.0, rel=0.05)
    table = run_optimize(run, "--budget", 2, "--agents", 2).stdout
    line = next(ln for ln in table.splitlines() if ln.startswith(name[:44]))
    # no speedup figure at all (the eager column, 581 x the kernel's time, may itself hold the digits "581")
    assert " noisy " in line and "39756.0!" in line and not any(t.endswith("x") for t in line.split()[1:]), line
    assert "not divided by" in table
    entry = next(e for e in json.loads((run / "library" / "manifest.json").read_text())["entries"]
                 if e["problem"] == name)
    assert entry["speedup"] is None and entry["spread_pct"]["eager"] == 39756.0
    assert entry["install"]["beats_eager"] is False and "too noisy" in entry["install"]["reason"]


def test_sigint_stops_cleanly(template, tmp_path):
    run = new_run(template, tmp_path)
    proc = subprocess.Popen(optimize_cmd(run, "--budget", 20, "--agents", 2, "--quiet"), cwd=ROOT,
                            env=kiln_env(), start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if query(run, "SELECT COUNT(*) FROM result")[0][0] >= 1:
                    break
            except sqlite3.OperationalError:
                pass
            time.sleep(0.05)
        # Ctrl-C reaches the whole foreground group: the coordinator and every worker
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if proc.returncode == 0:
        pytest.skip("the run finished before the signal arrived")
    assert proc.returncode == 1, err
    assert "interrupted" in err and "resume" in err
    # the evaluation in flight finished and was recorded as what it was, not as a crash
    crashed = query(run, "SELECT COUNT(*) FROM result WHERE outcome IN ('crashed', 'timeout')")[0][0]
    assert crashed == 0
    assert no_segment_left(run, proc.pid)
    kinds = [k for (k,) in query(run, "SELECT kind FROM event ORDER BY id")]
    assert kinds[-1] == "done"
    assert (run / "library" / "manifest.json").exists()


def test_sigint_while_preparing_prepares_nothing_more(template, tmp_path):
    """Ctrl-C (or kiln tune stopping a search that overran) while the first problem's reference data is being
    written: no further problem is prepared. It used to start the next one's, because the first searchable
    problem is always prepared and none had been searched yet: on the H200 that was a 2 GiB problem's sets
    begun after tune's signal."""
    run = new_run(template, tmp_path, "prep")
    for ref in run.glob("problems/*/kiln/ref-*"):
        shutil.rmtree(ref)
    assert len(list((run / "problems").iterdir())) >= 2
    proc = subprocess.Popen(optimize_cmd(run, "--budget", 2), cwd=ROOT, env=kiln_env(), start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        for line in proc.stderr:
            lines.append(line)
            if "writing reference data for" in line:
                os.killpg(proc.pid, signal.SIGINT)
                break
        lines += proc.stderr.readlines()
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    err = "".join(lines)
    assert err.count("writing reference data for") == 1, err
    assert "not prepared: interrupted" in err, err


def with_big_problem(run: Path, share_of_first: float = 1.0) -> Path:
    """RUN's reference data removed and softmax_big added: a copy of the hottest problem (its share times
    share_of_first) with an 8192 x 65536 float32 workload more (4 GiB in and out a set). Its directory."""
    for ref in run.glob("problems/*/kiln/ref-*"):
        shutil.rmtree(ref)
    first = run / "problems" / Path(CANDIDATES[0]).name
    big = run / "problems" / "softmax_big"
    shutil.copytree(first, big)
    d = json.loads((big / "definition.json").read_text())
    d["name"] = "softmax_big"
    d["kiln"]["share"] = json.loads((first / "definition.json").read_text())["kiln"]["share"] * share_of_first
    (big / "definition.json").write_text(json.dumps(d, indent=2))
    with open(big / "workload.jsonl", "a") as f:
        f.write(json.dumps({"uuid": "0b16b16b-0000-4000-8000-000000000001", "axes": {"rows": 8192, "cols": 65536},
                            "inputs": {"x": {"type": "random"}}}) + "\n")
    return big


def test_preparing_leaves_the_time_limit_to_candidates(template, tmp_path):
    """Reference data is built before a problem is searched, and at real size it takes tens of seconds: with
    --time 30, a problem whose sets would take longer than what is left of preparing's share (40 %) — a 2 GiB
    workload added to a copy of the hottest problem — is skipped with that reason, the small problems after it
    are still prepared, and the hottest gets its candidates."""
    run = new_run(template, tmp_path, "share")
    with_big_problem(run, share_of_first=1 / 1.5)
    # --time 30: preparing's 12 s hold the helper's start-up and the small problems even on a loaded CI
    # machine, not the big workload's sets (estimated 26 s: 4.3 GB in and out, three sets at 0.5 GB/s)
    r = run_optimize(run, "--budget", 2, "--time", 30, "--json")
    assert r.returncode == 0, r.stderr
    assert "softmax_big: skipped: not prepared: its reference data would not fit in preparing's share" in r.stderr
    assert "writing reference data for softmax_big" not in r.stderr, r.stderr
    assert r.stderr.count("writing reference data for") == len(template["names"]), r.stderr
    assert query(run, "SELECT COUNT(*) FROM result")[0][0] >= 1


def test_reference_data_that_would_fill_the_disk_is_not_written(template, tmp_path):
    """A problem whose reference sets would leave less than $KILN_DISK_RESERVE_GB free is skipped with both
    sizes, before the helper writes a byte: on the device a full disk (sets of every Gemma-4 problem) failed
    the store's every write, and the search with it. Here the reserve leaves 1 GiB to write: the small problems
    are prepared and searched, the 12 GiB of a big workload's three sets are refused."""
    run = new_run(template, tmp_path, "disk")
    big = with_big_problem(run)
    free_gib = shutil.disk_usage(run).free / 2**30
    if free_gib < 2:
        pytest.skip(f"{free_gib:.1f} GiB free here: too little to leave 1 GiB to the test")
    env = kiln_env()
    env["KILN_DISK_RESERVE_GB"] = f"{free_gib - 1:.3f}"
    r = subprocess.run(optimize_cmd(run, "--budget", 1), cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=RUN_TIMEOUT)
    assert r.returncode == 0, r.stderr
    assert re.search(r"softmax_big: skipped: no reference data: softmax_big: its reference data \(3 sets, "
                     r"about 12\.00 GiB\) would leave less than [0-9.]+ GiB free on the disk of ", r.stderr), r.stderr
    assert not list(big.glob("kiln/ref-*/*.safetensors")), "no set of the big problem is written"
    assert r.stderr.count("writing reference data for") == len(template["names"]), r.stderr
    assert query(run, "SELECT COUNT(*) FROM result")[0][0] >= len(template["names"])


def test_time_limit_and_named_problems(template, tmp_path):
    # problem directories named on the command line instead of RUN/problems
    run = tmp_path / "named"
    dirs = [template["dir"] / "problems" / d for d in sorted(os.listdir(template["dir"] / "problems"))]
    r = run_optimize(run, *map(str, dirs[:2]), "--budget", 3, "--json", "--top", 1)
    assert r.returncode == 0, r.stderr
    table = json.loads(r.stdout)
    assert len(table["problems"]) == 1  # --top 1 keeps the hotter of the two
    assert query(run, "SELECT COUNT(*) FROM problem")[0][0] == 1
    assert not (run / "problems").exists()
    # --time: no new work after the limit, an evaluation in flight gets 2 s more, exit 0
    run2 = new_run(template, tmp_path, "timed")
    t0 = time.monotonic()
    r = run_optimize(run2, "--budget", 50, "--time", 0.5, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["stopped"] in ("time limit", "done")
    assert time.monotonic() - t0 < 60
    assert (run2 / "library" / "manifest.json").exists()


def test_family_keeps_the_search_to_one_family(template, tmp_path):
    """--family NAME: every candidate is that family's, and a problem it does not match is skipped with its
    own reason (how bench/search_device.sh compares MCTS with sweeps of one family's space)."""
    run = new_run(template, tmp_path, "one-family")
    r = run_optimize(run, "--family", "softmax", "--budget", 2, "--json")
    assert r.returncode == 0, r.stderr
    rows = {row["problem"]: row for row in json.loads(r.stdout)["problems"]}
    assert "skipped" not in rows["softmax_f32"], rows["softmax_f32"]
    others = [row for name, row in rows.items() if name != "softmax_f32" and "skipped" in row]
    assert any("(--family) softmax: " in row["skipped"] for row in others), rows
    assert {f for (f,) in query(run, "SELECT DISTINCT family FROM candidate")} == {"softmax"}


def test_time_limit_cuts_a_long_evaluation_short(template, tmp_path):
    """The limit is the caller's budget (kiln tune plans its install check after it): an evaluation that
    would run on (here: up to 100000 timed runs) is stopped 2 s after it, and its candidate is queued again
    by a resumed run."""
    run = new_run(template, tmp_path, "long")
    t0 = time.monotonic()
    r = run_optimize(run, "--budget", 2, "--agents", 1, "--time", 4, "--iters", 100000, "--json")
    elapsed = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["stopped"] == "time limit"
    assert elapsed < 4 + 2 + 10, elapsed  # the limit, the grace, and writing the library
    unanswered = query(run, "SELECT COUNT(*) FROM candidate c LEFT JOIN result r ON r.candidate_id = c.id "
                            "WHERE r.id IS NULL")[0][0]
    assert unanswered >= 1
    again = run_optimize(run, "--budget", 2, "--agents", 1, "--iters", 3, "--json")
    assert again.returncode == 0, again.stderr
    assert re.search(r"(\d+) candidates queued again", again.stderr).group(1) != "0", again.stderr
    assert_every_candidate_has_a_result(run)


def test_two_gates_share_the_work(template, tmp_path):
    """--gates 2 on cpu: both gates take candidates (the cpu backend has one device: gates share it, on
    different cores), every candidate is evaluated once, and no gate reports an error."""
    run = new_run(template, tmp_path, "two-gates")
    r = run_optimize(run, "--gates", 2, "--budget", 3, "--json")
    assert r.returncode == 0, r.stderr
    assert "2 gates on cpu" in query(run, "SELECT message FROM event WHERE kind = 'start'")[0][0]
    assert query(run, "SELECT COUNT(*) FROM event WHERE kind = 'gate_error'")[0][0] == 0, \
        query(run, "SELECT message FROM event WHERE kind = 'gate_error'")
    assert_every_candidate_has_a_result(run)
    pids = {m.group(1) for m in re.finditer(r"eval \d+ pid=(\d+)", (run / "logs" / "gate.log").read_text())}
    assert len(pids) == 2, (run / "logs" / "gate.log").read_text()
    assert all(p["results"] >= 1 for p in json.loads(r.stdout)["problems"] if p.get("candidates"))


def fnv1a(data: bytes) -> int:
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def test_incumbent_challenge_on_resume(template, tmp_path):
    """A faster-looking candidate goes through the incumbent rule for real: the gate re-times it
    interleaved with the incumbent (3 rounds each) and records the verdict.

    On cpu every family emits one source per problem, so a run never makes a second candidate by
    itself; the test hands one in through the store (the way `kiln submit` will) and makes the
    incumbent's recorded time look slow, so that the resumed run has a challenger to judge."""
    softmax = next((d for d in (template["dir"] / "problems").iterdir()
                    if json.loads((d / "definition.json").read_text())["name"] == "softmax_f32"), None)
    if softmax is None:
        pytest.skip("softmax_f32 is not matched by a linked family")
    run = tmp_path / "challenge"
    r = run_optimize(run, softmax, "--budget", 4, "--quiet")
    assert r.returncode == 0, r.stderr
    con = sqlite3.connect(run / "kiln.db")
    (pid,), = con.execute("SELECT id FROM problem").fetchall()
    (root,), = con.execute("SELECT id FROM node WHERE parent_id IS NULL AND draft = 0").fetchall()
    (inc,), = con.execute("SELECT id FROM candidate").fetchall()
    con.execute("UPDATE result SET time_us = 1e9 WHERE candidate_id = ?", (inc,))
    # the race reads the incumbent's per-workload medians: slow there too, so that a busy machine's
    # timing cannot stop the challenger as `slower` before the interleaved re-timing judges it
    (rj,), = con.execute("SELECT result_json FROM result WHERE candidate_id = ?", (inc,)).fetchall()
    rj = json.loads(rj)
    for w in rj["workloads"]:
        w["time_us"]["median"] = 1e9
    con.execute("UPDATE result SET result_json = ? WHERE candidate_id = ?", (json.dumps(rj), inc))
    now = time.time()
    # as `kiln submit` records a hand-written kernel: no family, no params
    cur = con.execute("INSERT INTO node (problem_id, parent_id, draft, family, params, status, "
                      "created_unix_s, updated_unix_s) VALUES (?, ?, 0, NULL, '', 'pending', ?, ?)",
                      (pid, root, now, now))
    node = cur.lastrowid
    source = (ROOT / "tests/kernels/cpu/good_softmax.c").read_text()
    h = "%016x" % fnv1a(source.encode())
    cur = con.execute("INSERT INTO candidate (problem_id, node_id, agent, family, params, draft, source, "
                      "source_hash, binary_hash, created_unix_s) VALUES (?, ?, 'submitted', NULL, '', 0, "
                      "?, ?, ?, ?)", (pid, node, source, h, h, now))
    challenger = cur.lastrowid
    con.commit()
    con.close()

    r = run_optimize(run, softmax, "--budget", 4, "--quiet")
    assert r.returncode == 0, r.stderr
    assert query(run, "SELECT COUNT(*) FROM result WHERE candidate_id = ?", challenger)[0][0] == 1
    (outcome,), = query(run, "SELECT outcome FROM result WHERE candidate_id = ?", challenger)
    if outcome != "ok":
        pytest.skip(f"the handed-in kernel did not prove ok here ({outcome})")
    verdicts = [m for (m,) in query(run, "SELECT message FROM event WHERE kind = 'incumbent' "
                                         "AND message LIKE '%interleaved re-timing%'")]
    assert len(verdicts) == 1, verdicts
    v = verdicts[0]
    assert f"candidate {challenger} " in v and f"candidate {inc}:" in v and "3 rounds" in v
    assert re.search(r"challenger median [0-9.]+ us \(spread [0-9.]+%\), incumbent median [0-9.]+ us", v)
    retimes = [line for line in (run / "logs" / "gate.log").read_text().splitlines()
               if line.startswith("retime ")]
    assert sorted(int(line.split()[1]) for line in retimes) == sorted([inc] * 3 + [challenger] * 3)
    # interleaved: A B A B A B
    assert [int(line.split()[1]) for line in retimes] == [inc, challenger] * 3
    (incumbent,), = query(run, "SELECT incumbent_id FROM problem")
    assert incumbent == (challenger if "replaces" in v and "does not" not in v else inc)
    # re-timings are events and log lines, never result rows
    assert query(run, "SELECT COUNT(*) FROM result")[0][0] == 2
    # the handed-in kernel's node got its verdict and its statistics
    (status, visits), = query(run, "SELECT status, visits FROM node WHERE id = ?", node)
    assert status == "done" and visits == 1


def test_locked_store(template, tmp_path):
    run = new_run(template, tmp_path)
    with open(run / "kiln.lock", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        r = run_optimize(run, "--budget", 2, timeout=60)
    assert r.returncode == 2
    assert "is in use by kiln optimize" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (run / "candidates").exists() or not any((run / "candidates").iterdir())


def test_corrupt_store(template, tmp_path):
    run = new_run(template, tmp_path)
    (run / "kiln.db").write_bytes(os.urandom(4096))
    r = run_optimize(run, "--budget", 2, timeout=60)
    assert r.returncode == 2
    assert "kiln.db" in r.stderr and "not a kiln store" in r.stderr
    # a file that is SQLite but not kiln's
    (run / "kiln.db").unlink()
    con = sqlite3.connect(run / "kiln.db")
    con.execute("CREATE TABLE other (x)")
    con.commit()
    con.close()
    r = run_optimize(run, "--budget", 2, timeout=60)
    assert r.returncode == 2
    assert "kiln.db" in r.stderr


def test_bad_invocations(tmp_path):
    (tmp_path / "empty").mkdir()
    for args, message in [
        ([], "expected RUN"),
        ([str(tmp_path / "r"), "--budget", "0"], "--budget wants an integer"),
        ([str(tmp_path / "r"), "--backend", "tpu"], "unknown backend 'tpu'"),
        ([str(tmp_path / "r"), "--specialists", "geometry,poetry"], "unknown specialist 'poetry'"),
        ([str(tmp_path / "r"), "--family", "nonesuch"], "unknown family 'nonesuch'; families: "),
        ([str(tmp_path / "empty"), "--backend", "cpu"], "holds no problem directory"),
        ([str(tmp_path / "missing"), "--backend", "cpu"], "is not a directory: kiln capture"),
    ]:
        r = subprocess.run([str(KILN), "optimize", *args], cwd=ROOT, env=kiln_env(), capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 2, (args, r.stderr)
        assert message in r.stderr, (args, r.stderr)
    assert not (tmp_path / "missing").exists()  # a RUN to read is never created
    r = subprocess.run([str(KILN), "optimize", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("usage: kiln optimize")


def test_a_problem_is_its_content(template, tmp_path):
    """The store keeps each problem's content hash, computed from its files; a problem directory that
    holds another content under the same name is refused, and nothing of the old results is carried
    to it."""
    sys.path.insert(0, str(ROOT / "python"))
    from kiln.problem import content_hash_of_dir
    run = new_run(template, tmp_path)
    name = template["names"][0]
    pdir = next(d for d in (run / "problems").iterdir()
                if json.loads((d / "definition.json").read_text())["name"] == name)
    r = run_optimize(run, "--budget", 1, "--agents", 1, "--json")
    assert r.returncode == 0, r.stderr
    first = content_hash_of_dir(str(pdir))
    assert query(run, "SELECT content_hash FROM problem WHERE name = ?", name) == [(first,)]
    before = query(run, "SELECT COUNT(*) FROM result")[0][0]
    manifest = (run / "library" / "manifest.json").read_text()
    entry = next(e for e in json.loads(manifest)["entries"] if e["problem"] == name)
    assert entry["content_hash"] == first
    # a hand edit of the reference: the same name, another problem
    definition = json.loads((pdir / "definition.json").read_text())
    definition["reference"] += "\n# edited by hand\n"
    (pdir / "definition.json").write_text(json.dumps(definition, indent=2))
    second = content_hash_of_dir(str(pdir))
    assert second != first
    again = run_optimize(run, "--budget", 2, "--agents", 1, "--json")
    assert again.returncode == 2, again.stdout
    assert f"problem '{name}' is another problem now" in again.stderr
    assert first[:12] in again.stderr and second[:12] in again.stderr
    assert query(run, "SELECT content_hash FROM problem WHERE name = ?", name) == [(first,)]
    assert query(run, "SELECT COUNT(*) FROM result")[0][0] == before
    assert (run / "library" / "manifest.json").read_text() == manifest


def test_a_problem_only_vendor_families_match_is_prepared_last(tmp_path):
    """A GEMM that only the cublaslt family matches (a configuration of the library eager calls itself: a few
    per cent to win) is prepared after a cooler softmax, so its reference data (at real size, gigabytes) does
    not take preparing's share of --time from it; a chain only cublaslt matches is not deferred (eager runs its
    ops apart); all are still searched."""
    run = tmp_path / "vendor"
    for src, share in ((ROOT / "tests" / "data" / "families" / "cublaslt" / "linear_bias_f32", 0.6),
                       (ROOT / "tests" / "data" / "families" / "cublaslt" / "matmul_badd_gelu_f32", 0.5),
                       (ROOT / "tests" / "data" / "families" / "softmax" / "f32_many_rows", 0.3)):
        dst = run / "problems" / src.name
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("ref-*"))
        d = json.loads((dst / "definition.json").read_text())
        d.setdefault("kiln", {})["share"] = share
        (dst / "definition.json").write_text(json.dumps(d, indent=1))
    gemm, chain, softmax = (json.loads((run / "problems" / n / "definition.json").read_text())["name"]
                            for n in ("linear_bias_f32", "matmul_badd_gelu_f32", "f32_many_rows"))
    r = run_optimize(run, "--budget", 1, "--json")
    assert r.returncode == 0, r.stderr
    order = [line.split(": ")[1] for line in r.stderr.splitlines() if line.endswith("reference data on cpu")]
    # the chain (matmul + add + GELU: eager runs three ops, the fused epilogue one) is not deferred
    assert order == [chain, softmax, gemm], r.stderr
    table = json.loads(r.stdout)
    assert [p["problem"] for p in table["problems"]] == [gemm, chain, softmax]  # the table: hottest first
    assert all(p.get("candidates", 0) >= 1 for p in table["problems"]), table


def test_one_helper_prepares_every_problem_and_survives_failures(template, tmp_path):
    """Preparing runs one reference helper for every problem (`python -m kiln.reference --serve`: torch
    imported once, not per problem; Gemma-4's 48 problems took 96.5 s here with a helper each, 3.5 s with one).
    A reference that raises is that problem's error and the next request goes on in the same helper; a
    reference that kills its interpreter is that problem's error too, and the next problem gets a new one."""
    run = new_run(template, tmp_path, "serve")
    for ref in run.glob("problems/*/kiln/ref-*"):
        shutil.rmtree(ref)
    hottest = json.loads((run / "problems" / Path(CANDIDATES[0]).name / "definition.json").read_text())
    for name, body in (("raises", "raise RuntimeError('kiln test: this reference fails')"),
                       ("dies", "import os; os._exit(3)")):
        dst = run / "problems" / f"softmax_{name}"
        shutil.copytree(run / "problems" / Path(CANDIDATES[0]).name, dst)
        d = json.loads((dst / "definition.json").read_text())
        d["name"] = f"softmax_{name}"
        d["kiln"]["share"] = hottest["kiln"]["share"] * (2 if name == "raises" else 1.5)  # prepared first
        d["reference"] = f"import torch\n\n@torch.no_grad()\ndef run(x):\n    {body}\n"
        (dst / "definition.json").write_text(json.dumps(d, indent=2))
    r = run_optimize(run, "--budget", 1)
    assert r.returncode == 0, r.stderr
    assert "kiln test: this reference fails" in r.stderr, r.stderr
    assert re.search(r"softmax_raises: skipped: no reference data: .*--serve\) failed with status 1", r.stderr), r.stderr
    assert re.search(r"softmax_dies: skipped: no reference data: .*failed with exit status 3", r.stderr), r.stderr
    for name in template["names"]:  # prepared after both, the second by a new helper
        assert f"{name}: skipped" not in r.stderr, r.stderr
    assert query(run, "SELECT COUNT(*) FROM result")[0][0] >= len(template["names"])
