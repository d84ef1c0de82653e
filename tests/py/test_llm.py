"""test_llm.py: the llm agent against a local OpenAI-compatible server that this test starts on
loopback (llm_server.py: http.server, port 0) with scripted replies.

One `kiln llm-try` run on the cpu backend meets, in order: (a) a correct kernel, (b) one that does
not compile, (c) prose without code, (d) a reply slower than --llm-timeout, (e) HTTP 500 on every
attempt, (f) a huge reply (streamed, and one with a Content-Length over the cap), a 401 whose body
quotes the API key, a body of random bytes, and finally a 500 followed by a correct kernel. Each gives
its outcome and the run goes on to the next round; the prompt of a later request carries the compile
log of (b) and the "no kernel" of (c) (asserted on the bodies the server received); the key arrives
as a Bearer token and appears nowhere in the store, the run directory, stdout or stderr. Separate
runs check the token budget, an unreachable endpoint, a missing --llm-url, and that without an
endpoint nothing about the other commands changes.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from gate_util import KILN, ROOT, kiln_env
from llm_server import Server, user_prompt, without_proxies

pytestmark = pytest.mark.skipif(not KILN.exists(), reason="build/kiln is missing: run make first")

PROBLEM = ROOT / "tests/data/problems/softmax_f32"
GOOD = (ROOT / "tests/kernels/cpu/good_softmax.c").read_text()
BROKEN = (ROOT / "tests/kernels/cpu/compile_error.c").read_text()
SECRET = "sk-kiln-test-7f3a9c2e51d84b06"
TIMEOUT_S = 1.0


def env_with_key() -> dict:
    env = without_proxies(kiln_env())
    env["KILN_LLM_API_KEY"] = SECRET
    return env


def make_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "problems").mkdir(parents=True)
    shutil.copytree(PROBLEM, run / "problems" / "softmax_f32",
                    ignore=shutil.ignore_patterns("kiln"))
    return run


def llm_try(run: Path, url: str, *extra, ref_dir: Path, timeout=600):
    import subprocess
    args = [str(KILN), "llm-try", str(run), "softmax_f32", "--backend", "cpu", "--json",
            "--llm-url", url, "--llm-timeout", str(TIMEOUT_S), "--llm-retries", "1",
            "--llm-backoff", "0.05", "--iters", "3", "--ref-dir", str(ref_dir), *map(str, extra)]
    return subprocess.run(args, cwd=ROOT, env=env_with_key(), capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def ref_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("llm-ref") / "softmax_f32-cpu"


def test_llm_try_every_kind_of_reply(tmp_path, ref_dir):
    run = make_run(tmp_path)
    good2 = GOOD + "\n/* the same kernel, a second time (not a duplicate binary) */\n"
    rng = __import__("random").Random(1234)
    garbage = bytes(rng.randrange(256) for _ in range(3000))
    script = [
        ("kernel", GOOD),                              # 1 (a) ok
        ("kernel", BROKEN),                            # 2 (b) compile_error
        ("prose",),                                    # 3 (c) no_kernel
        ("slow", 3 * TIMEOUT_S), ("slow", 3 * TIMEOUT_S),  # 4 (d) timeout, after the retry
        ("status", 500, "boom"), ("status", 500, "boom"),  # 5 (e) http_error, after the retry
        ("huge_stream",),                              # 6 (f) no_kernel: reply too large
        ("huge_declared",),                            # 7 (f) the same, refused by its header
        ("echo_key",),                                 # 8 401: final, no retry; key scrubbed
        ("garbage", garbage),                          # 9 random bytes: no_kernel
        ("status", 503, "busy"), ("kernel", good2),    # 10 a retry that succeeds: ok
    ]
    with Server(script) as srv:
        t0 = time.monotonic()
        p = llm_try(run, srv.url, "--n", 10, ref_dir=ref_dir)
        wall = time.monotonic() - t0
        reqs = srv.requests
    where = f"stdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}"
    assert p.returncode == 0, where
    out = json.loads(p.stdout)
    rounds = out["rounds"]
    assert len(rounds) == 10, where
    got = [(r["llm"]["status"], r["outcome"]) for r in rounds]
    assert got == [
        ("kernel", "ok"), ("kernel", "compile_error"), ("no_kernel", "no_kernel"),
        ("timeout", "timeout"), ("http_error", "http_error"), ("no_kernel", "no_kernel"),
        ("no_kernel", "no_kernel"), ("http_error", "http_error"), ("no_kernel", "no_kernel"),
        ("kernel", "ok"),
    ], where
    r = {i + 1: x for i, x in enumerate(rounds)}
    # (a): a candidate, the incumbent
    assert r[1]["candidate_id"] and r[1]["incumbent"] is True and r[1]["parent_id"] is None
    assert r[1]["result"]["outcome"] == "ok" and r[1]["llm"]["attempts"] == 1
    assert r[1]["llm"]["tokens"] == 1000
    # (b): a child of the incumbent, with the compiler's log
    assert r[2]["parent_id"] == r[1]["candidate_id"]
    assert "row_sum" in r[2]["result"]["evidence"]["log"]
    # (c)
    assert r[3]["llm"]["reason"] == "no fenced code block in the reply"
    assert r[3]["candidate_id"] is None
    # (d): both attempts ran into the timeout, and the run did not wait for the slow server
    assert r[4]["llm"]["attempts"] == 2 and "within 1 s" in r[4]["llm"]["reason"], r[4]
    # (e)
    assert r[5]["llm"]["attempts"] == 2 and r[5]["llm"]["http_status"] == 500
    assert "HTTP 500" in r[5]["llm"]["reason"] and "boom" in r[5]["llm"]["reason"]
    # (f)
    for k in (6, 7):
        assert r[k]["llm"]["reason"].startswith("reply too large"), r[k]
        assert r[k]["llm"]["attempts"] == 1
    # a 401 is not retried; its echo of the key is scrubbed
    assert r[8]["llm"]["http_status"] == 401 and r[8]["llm"]["attempts"] == 1
    assert "***" in r[8]["llm"]["reason"]
    assert "not JSON" in r[9]["llm"]["reason"] or "not a chat completion" in r[9]["llm"]["reason"]
    # the run went on: a last kernel after a 503, and it is proved
    assert r[10]["llm"]["attempts"] == 2 and r[10]["result"]["outcome"] == "ok"
    assert r[10]["candidate_id"] not in (r[1]["candidate_id"], r[2]["candidate_id"])
    assert wall < 120, wall

    # what the server received: one request per attempt, each with the key as a Bearer token
    assert len(reqs) == 13, [q["path"] for q in reqs]
    for q in reqs:
        assert q["path"] == "/v1/chat/completions"
        assert q["auth"] == f"Bearer {SECRET}"
        assert q["body"]["model"] == "test-model"  # from GET /v1/models: no --llm-model given
        assert set(q["body"]) >= {"model", "messages", "temperature", "max_tokens"}
        assert SECRET not in q["raw"]
    first = user_prompt(reqs[0])
    for piece in ("torch.softmax", "void NAME(const float* x, float* y, int64_t rows, int64_t cols)",
                  "The candidate ABI", "There is no kernel for this problem yet", "GB/s",
                  "rows=5 cols=4097"):
        assert piece in first, piece
    # (b)'s failure is in the prompt of (c): the compile log tail, and the source it refers to
    third = user_prompt(reqs[2])
    assert f"Candidate {r[2]['candidate_id']}: compile_error" in third, third[-4000:]
    assert "row_sum" in third and "undeclared" in third
    assert f"# The current kernel (candidate {r[1]['candidate_id']})" in third
    assert "of the speed of light" in third
    # and (c)'s "no kernel" is in the prompt of the last round, with (b)'s failure
    last = user_prompt(reqs[-1])
    assert "A reply: no_kernel" in last and "no fenced code block" in last
    assert "row_sum" in last

    # the store: every exchange, the kernels linked to their candidates, the requests verbatim
    db = sqlite3.connect(run / "kiln.db")
    rows = db.execute("SELECT id, status, candidate_id, parent_id, attempts, tokens, request_json, "
                      "reply_text, model, latency_ms FROM llm_exchange ORDER BY id").fetchall()
    assert [x[1] for x in rows] == [x["llm"]["status"] for x in rounds]
    assert rows[0][2] == r[1]["candidate_id"] and rows[1][2] == r[2]["candidate_id"]
    assert rows[9][2] == r[10]["candidate_id"]
    assert all(x[2] is None for x in rows[2:9])
    assert rows[1][3] == r[1]["candidate_id"]
    assert rows[2][6] == reqs[2]["raw"]  # what was stored is exactly what was sent
    assert "row_sum" in rows[1][7]  # the reply is kept
    assert rows[5][7].endswith("bytes]")  # a huge reply is kept only in part
    assert all(x[8] == "test-model" and x[9] >= 0 for x in rows)
    agents = db.execute("SELECT agent, count(*) FROM candidate GROUP BY agent").fetchall()
    assert agents == [("llm", 3)], agents
    inc = db.execute("SELECT incumbent_id FROM problem WHERE name = 'softmax_f32'").fetchone()[0]
    assert inc == out["incumbent"] and inc in (r[1]["candidate_id"], r[10]["candidate_id"])
    dump = "\n".join(db.iterdump())
    db.close()
    assert SECRET not in dump

    # the key is nowhere: not in any file of the run, not in what kiln printed
    assert SECRET not in p.stdout and SECRET not in p.stderr
    for f in run.rglob("*"):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f


def test_token_budget_stops_asking(tmp_path, ref_dir):
    run = make_run(tmp_path)
    with Server([("prose",)] * 10, tokens=600) as srv:
        p = llm_try(run, srv.url, "--n", 5, "--llm-model", "m", "--llm-token-budget", 1000,
                    ref_dir=ref_dir)
        n_requests = len(srv.requests)
    assert p.returncode == 0, p.stderr
    rounds = json.loads(p.stdout)["rounds"]
    # 600 tokens, then 1200 (over the budget), then nothing more is asked
    assert [x["llm"]["status"] for x in rounds] == ["no_kernel", "no_kernel", "budget"]
    assert n_requests == 2
    assert json.loads(p.stdout)["run_tokens"] == 1200
    assert "1200 of 1000" in rounds[2]["llm"]["reason"]
    # the budget is the run's: a second command on the same RUN asks nothing at all
    with Server([("prose",)]) as srv:
        p = llm_try(run, srv.url, "--n", 2, "--llm-model", "m", "--llm-token-budget", 1000,
                    ref_dir=ref_dir)
        assert len(srv.requests) == 0
    assert [x["llm"]["status"] for x in json.loads(p.stdout)["rounds"]] == ["budget"]


def test_unreachable_endpoint_is_an_outcome(tmp_path, ref_dir):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nobody listens there now
    run = make_run(tmp_path)
    p = llm_try(run, f"http://user:pw@127.0.0.1:{port}/v1?key=abc", "--n", 2, "--llm-model", "m",
                ref_dir=ref_dir)
    assert p.returncode == 0, p.stderr
    rounds = json.loads(p.stdout)["rounds"]
    assert [x["llm"]["status"] for x in rounds] == ["unreachable", "unreachable"]
    assert rounds[0]["llm"]["attempts"] == 2
    # the URL is shown without its credentials and query
    assert "pw@" not in p.stdout and "key=abc" not in p.stdout
    assert f"127.0.0.1:{port}" in rounds[0]["llm"]["reason"]


def test_no_endpoint_no_llm(tmp_path):
    import subprocess
    run = make_run(tmp_path)
    p = subprocess.run([str(KILN), "llm-try", str(run), "softmax_f32"], cwd=ROOT, env=kiln_env(),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert "no endpoint: give --llm-url" in p.stderr
    assert not (run / "kiln.db").exists()  # nothing was opened
    # bad llm options are refused with one line
    p = subprocess.run([str(KILN), "llm-try", str(run), "softmax_f32", "--llm-url", "x",
                        "--llm-key-env", "K=sk-1"], cwd=ROOT, env=kiln_env(), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "--llm-url wants" in p.stderr
    # the agent is optional: the other commands know no --llm options
    p = subprocess.run([str(KILN), "submit", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0 and "--llm" not in p.stdout
    p = subprocess.run([str(KILN), "llm-try", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.startswith("usage: kiln llm-try")
    assert "KILN_LLM_API_KEY" in p.stdout
