"""test_optimize_llm.py: `kiln optimize --llm-url` on the cpu backend, for real, against the scripted
loopback endpoint of llm_server.py.

The main run searches tests/data/problems/scale_bf16, a problem no kernel family matches, so that
the llm agent is the only one proposing for it and the order of its requests is fixed. The endpoint
answers a correct kernel (tests/kernels/cpu/good_scale.c), then prose, then HTTP 500; the token
budget is spent after the third exchange. The run must complete; the kernel is a candidate of agent
"llm" with a verdict, a child of the problem's root; the prose is a `no_kernel` exchange stored for
that candidate's node, and the 500 an `http_error`; the second prompt is about the first kernel
(its source, measured time and SOL %, the device's ceilings), the third carries the second's "no
kernel"; the agent stops on the budget (an event says so) and nothing more is asked; the API key is
sent as a Bearer token and kept nowhere.

Other runs: an endpoint that is down costs a problem with a family nothing (the built-in agents make
their candidates, the llm agent gives up after 8 fruitless exchanges, the run ends done); a stop
(--time) abandons a request in flight instead of waiting for its reply; --llm-* options without
--llm-url are refused, and without an endpoint a problem no family matches is skipped as before.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gate_util import KILN, ROOT, kiln_env  # noqa: E402
from llm_server import Server, user_prompt, without_proxies  # noqa: E402

pytestmark = pytest.mark.skipif(not KILN.exists(), reason=f"{KILN} is missing: run make first")

SCALE = "tests/data/problems/scale_bf16"  # no family matches it: the llm agent's alone
SOFTMAX = "tests/data/problems/softmax_f32"
GOOD_SCALE = (ROOT / "tests/kernels/cpu/good_scale.c").read_text()
SECRET = "sk-kiln-optimize-test-4b1e9d07c3"
RUN_TIMEOUT = 240


@pytest.fixture(scope="module")
def problems(tmp_path_factory):
    """Copies of the two problems with their cpu reference data built once (in this interpreter,
    which has torch), so that each run starts at once."""
    base = tmp_path_factory.mktemp("llm-problems")
    sys.path.insert(0, str(ROOT / "python"))
    from kiln.reference import build_reference
    out = {}
    for rel in (SCALE, SOFTMAX):
        dst = base / Path(rel).name
        shutil.copytree(ROOT / rel, dst, ignore=shutil.ignore_patterns("kiln"))
        build_reference(str(dst), device="cpu", quiet=True, log=lambda line: None)
        out[Path(rel).name] = dst
    return out


def new_run(problems, tmp_path, *names) -> Path:
    run = tmp_path / "run"
    (run / "problems").mkdir(parents=True)
    for name in names:
        shutil.copytree(problems[name], run / "problems" / name)
    return run


def optimize(run: Path, *args, key=True, timeout=RUN_TIMEOUT) -> subprocess.CompletedProcess:
    env = without_proxies(kiln_env())
    if key:
        env["KILN_LLM_API_KEY"] = SECRET
    return subprocess.run([str(KILN), "optimize", str(run), "--backend", "cpu", "--iters", "3",
                           *map(str, args)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def query(run: Path, sql: str, *args) -> list:
    con = sqlite3.connect(f"file:{run / 'kiln.db'}?mode=ro", uri=True, timeout=30)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def events(run: Path, kind: str) -> list:
    return [m for (m,) in query(run, "SELECT message FROM event WHERE kind = ?1 ORDER BY id", kind)]


def test_llm_agent_proposes_in_optimize(problems, tmp_path):
    run = new_run(problems, tmp_path, "scale_bf16")
    script = [("kernel", GOOD_SCALE), ("prose",), ("status", 500, "boom")]
    with Server(script, tokens=1000) as srv:
        # 1000 + 1000 tokens, then the 500's body counted at 4 bytes a token (a prompt of several
        # KiB): the budget is spent after the third exchange, and a fourth is never sent
        r = optimize(run, "--budget", 4, "--json", "--llm-url", srv.url, "--llm-retries", 0,
                     "--llm-token-budget", 2500)
        reqs = list(srv.requests)
    where = f"stdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"
    assert r.returncode == 0, where
    table = json.loads(r.stdout)
    assert table["stopped"] == "done", where
    (row,) = table["problems"]
    assert row["problem"] == "scale_bf16" and "skipped" not in row, row
    assert row["candidates"] == 1 and row["results"] == 1 and row["ok"] == 1, row
    assert "only the llm agents search it" in r.stderr

    # the candidate: agent llm, a child of the root, no family, proved and timed, in the library
    cands = query(run, "SELECT id, agent, family, params, parent_id, node_id, source FROM candidate")
    assert len(cands) == 1, cands
    cid, agent, family, params, parent, node_id, source = cands[0]
    assert (agent, family, params, parent) == ("llm", None, "", None)
    assert source.strip() == GOOD_SCALE.strip()
    assert (run / "candidates" / f"{cid}.c").read_text() == source
    ((outcome, time_us, sol_pct),) = query(
        run, "SELECT outcome, time_us, sol_pct FROM result WHERE candidate_id = ?1", cid)
    assert outcome == "ok" and time_us > 0 and sol_pct > 0
    ((node_family, node_parent),) = query(run, "SELECT family, parent_id FROM node WHERE id = ?1",
                                          node_id)
    root = query(run, "SELECT id FROM node WHERE parent_id IS NULL AND family IS NULL")[0][0]
    assert node_family is None and node_parent == root
    assert query(run, "SELECT incumbent_id FROM problem WHERE name = 'scale_bf16'")[0][0] == cid
    assert "scale_bf16" in (run / "library" / "manifest.json").read_text()

    # the exchanges: a kernel (linked to its candidate), then a no_kernel and an http_error, both
    # stored for the candidate's node; each request stored exactly as it was sent
    rows = query(run, "SELECT status, parent_id, candidate_id, reason, request_json, attempts "
                      "FROM llm_exchange ORDER BY id")
    assert [x[0] for x in rows] == ["kernel", "no_kernel", "http_error"], rows
    assert rows[0][1] is None and rows[0][2] == cid
    assert rows[1][1:3] == (cid, None) and rows[1][3] == "no fenced code block in the reply"
    assert rows[2][1:3] == (cid, None) and "HTTP 500" in rows[2][3] and "boom" in rows[2][3]
    assert rows[2][5] == 1  # --llm-retries 0
    assert [x[4] for x in rows] == [q["raw"] for q in reqs]

    # what the endpoint was asked: three requests, the fourth refused by the budget
    assert len(reqs) == 3, [user_prompt(q)[:200] for q in reqs]
    for q in reqs:
        assert q["path"] == "/v1/chat/completions"
        assert q["auth"] == f"Bearer {SECRET}" and SECRET not in q["raw"]
        assert q["body"]["model"] == "test-model"  # from GET /v1/models
    first, second, third = (user_prompt(q) for q in reqs)
    assert "# Problem `scale_bf16`" in first and "There is no kernel for this problem yet" in first
    # the second request is about the first kernel: its source, time and SOL %, the device
    assert f"# The current kernel (candidate {cid})" in second, second[:3000]
    assert f"takes {time_us:.3f} us" in second
    assert f"{sol_pct:.3g}% of the speed of light" in second
    assert "kiln_float_to_bf16(kiln_bf16_to_float(x[i]) * alpha)" in second
    assert "GB/s" in second and "(not measured yet)" not in second
    assert "Earlier attempts" not in second
    # the third carries the second's outcome as feedback, for the same node
    assert f"# The current kernel (candidate {cid})" in third
    assert "A reply: no_kernel" in third and "no fenced code block in the reply" in third

    # the feed: the outcomes without a kernel, and why the agent stopped
    llm = events(run, "llm")
    assert any(f"no_kernel for candidate {cid}" in m for m in llm), llm
    assert any(f"http_error for candidate {cid}" in m for m in llm), llm
    assert any("stops: token budget spent" in m and "of 2500 tokens" in m for m in llm), llm
    assert "(1 of them llm)" in events(run, "start")[0]

    # the dashboard's candidate page gets the three exchanges: the one that made it, the two since
    serve = subprocess.Popen([str(KILN), "serve", str(run), "--port", "0"], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        m = re.search(r"http://[^/\s]+:(\d+)/", serve.stdout.readline())
        assert m, serve.stderr.read()[-2000:]
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"http://127.0.0.1:{m.group(1)}/api/candidates/{cid}", timeout=30) as resp:
            page = json.loads(resp.read())
    finally:
        serve.terminate()
        serve.wait(timeout=20)
    got = [(x["role"], x["status"]) for x in page["llm"]]
    assert got == [("made", "kernel"), ("asked", "no_kernel"), ("asked", "http_error")], got
    assert "# Problem `scale_bf16`" in page["llm"][0]["request"]["messages"][-1]["content"]
    assert "```" in page["llm"][0]["reply"] and page["llm"][1]["reason"] == "no fenced code block in the reply"

    # the key is nowhere kiln keeps or prints anything
    assert SECRET not in r.stdout and SECRET not in r.stderr
    con = sqlite3.connect(run / "kiln.db")
    dump = "\n".join(con.iterdump())
    con.close()
    assert SECRET not in dump
    for f in run.rglob("*"):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f


def test_endpoint_down_the_others_go_on(problems, tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nobody listens there now
    run = new_run(problems, tmp_path, "softmax_f32")
    r = optimize(run, "--budget", 20, "--json", "--llm-url", f"http://127.0.0.1:{port}/v1",
                 "--llm-model", "m", "--llm-retries", 0)
    where = f"stdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"
    assert r.returncode == 0, where
    table = json.loads(r.stdout)
    assert table["stopped"] == "done", where
    # the built-in agents made the family's candidates, and each has its verdict
    agents = query(run, "SELECT c.agent, r.outcome FROM candidate c LEFT JOIN result r "
                        "ON r.candidate_id = c.id")
    assert agents and all(a != "llm" and o is not None for a, o in agents), agents
    # the llm agent asked 8 times, got no connection each time, and stopped
    statuses = [x for (x,) in query(run, "SELECT status FROM llm_exchange ORDER BY id")]
    assert statuses == ["unreachable"] * 8, statuses
    llm = events(run, "llm")
    assert any("stops: 8 exchanges in a row made no new candidate" in m for m in llm), llm
    assert "the other agents go on" in r.stderr


def test_stop_abandons_a_request_in_flight(problems, tmp_path):
    run = new_run(problems, tmp_path, "scale_bf16")
    with Server([("slow", 60)]) as srv:
        t0 = time.monotonic()
        r = optimize(run, "--budget", 4, "--time", 2, "--llm-url", srv.url, "--llm-model", "m")
        wall = time.monotonic() - t0
        n_requests = len(srv.requests)
    assert r.returncode == 0, r.stderr
    assert wall < 30, wall  # not the 60 s of the reply, nor the gate's grace
    assert n_requests == 1
    rows = query(run, "SELECT status, reason, tokens FROM llm_exchange")
    assert len(rows) == 1 and rows[0][0] == "cancelled" and rows[0][2] == 0, rows
    assert "stopped: time limit" in events(run, "done")[0]


def test_without_an_endpoint_nothing_changes(problems, tmp_path):
    run = new_run(problems, tmp_path, "scale_bf16")
    r = optimize(run, "--budget", 2, key=False)
    assert r.returncode == 1  # its only problem was skipped, as before
    assert "no kernel family matches" in r.stderr
    assert events(run, "skip") and not events(run, "llm")
    assert query(run, "SELECT count(*) FROM llm_exchange") == [(0,)]  # nothing was asked
    # --llm-* options want an endpoint; llm is not a built-in specialist
    r = optimize(run, "--llm-model", "m", key=False, timeout=60)
    assert r.returncode == 2 and "--llm-model needs --llm-url" in r.stderr
    r = optimize(run, "--llm-url", "http://127.0.0.1:1/v1", "--specialists", "geometry,llm",
                 key=False, timeout=60)
    assert r.returncode == 2 and "llm is not a built-in specialist" in r.stderr
    r = optimize(run, "--llm-url", "127.0.0.1:8000", key=False, timeout=60)
    assert r.returncode == 2 and "--llm-url wants" in r.stderr
    h = subprocess.run([str(KILN), "optimize", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert h.returncode == 0
    for opt in ("--llm-url", "--llm-model", "--llm-key-env", "--llm-agents", "--llm-token-budget",
                "KILN_LLM_API_KEY"):
        assert opt in h.stdout, opt
