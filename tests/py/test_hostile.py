"""The hostile corpus: kernels that try to pass the gate without doing the work.

Every kernel of tests/kernels/hostile/{cpu,cuda} (written for tests/data/problems/softmax_f32) says in its
header what it attempts and the outcome a sound gate must give ("Expected outcome: X"). All of a
backend's kernels go through ONE `kiln eval --json` session, followed by a correct kernel, and the test
asserts: stdout is exactly one JSON value (whatever the kernels print); not one of them is `ok` unless its
header says the gate neutralises the attack ("ok (neutralised)": state a kernel keeps from call to call,
which the gate resets before every run, so that it does the work on every run); each gets its stated
outcome; the correct kernel after them is `ok` (the gate survived every one); and the problem's files
and its reference data are byte for byte what they were (the kernels that rewrite them are refused).

The problem is a copy in a temporary folder, with its reference data there too: some kernels attack
the files of the problem they are judged on. cpu runs in CI; cuda skips without a GPU.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from gate_util import KILN, PROBLEMS, ROOT, gpu_present, run_kiln

pytestmark = pytest.mark.skipif(not KILN.exists(), reason=f"{KILN} does not exist: build kiln first (make)")

HOSTILE = ROOT / "tests" / "kernels" / "hostile"
GOOD = {"cpu": ROOT / "tests" / "kernels" / "cpu" / "good_softmax.c",
        "cuda": ROOT / "tests" / "kernels" / "cuda" / "good_softmax_f32.cu"}
TIMEOUT_S = 3
OUTCOMES = {"ok", "compile_error", "mismatch", "unwritten", "nan", "input_modified", "timeout",
            "crashed", "resource", "impossible", "slower"}


def expected_outcome(path: Path) -> set:
    """The outcomes the kernel's header allows: "Expected outcome: crashed." or "... unwritten or
    mismatch."."""
    m = re.search(r"Expected outcome:\s*([a-z_ ]+?)[.(\n]", path.read_text())
    assert m, f"{path} has no 'Expected outcome:' line"
    words = {w for w in re.split(r"\s+or\s+|\s*,\s*", m.group(1).strip()) if w}
    assert words <= OUTCOMES, f"{path}: unknown outcome in {words}"
    return words


def kernels(backend: str) -> list:
    ext = ".c" if backend == "cpu" else ".cu"
    return sorted(p for p in (HOSTILE / backend).iterdir() if p.suffix == ext)


def digest(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.blake2b(p.read_bytes(), digest_size=16).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def run_corpus(backend: str, tmp_path: Path) -> None:
    problem = tmp_path / "softmax_f32"
    shutil.copytree(ROOT / PROBLEMS / "softmax_f32", problem, ignore=shutil.ignore_patterns("kiln"))
    refs = tmp_path / "ref"
    # the reference data first, with a correct kernel: what the hostile ones must not change
    first = run_kiln(["eval", problem, GOOD[backend], "--backend", backend, "--json", "--ref-dir", refs,
                      "--iters", 3, "--no-time"], timeout=600)
    assert first.returncode == 0 and json.loads(first.stdout)["outcome"] == "ok", first.stderr[-3000:]
    before_problem, before_refs = digest(problem), digest(refs)
    corpus = kernels(backend)
    assert len(corpus) >= 20, f"the {backend} corpus has {len(corpus)} kernels"
    args = ["eval", problem, *corpus, GOOD[backend], "--backend", backend, "--json", "--ref-dir", refs,
            "--iters", 10, "--warmup", 1, "--timeout", TIMEOUT_S]
    p = run_kiln(args, timeout=1800)
    where = f"--- stderr ---\n{p.stderr[-4000:]}"
    assert p.returncode == 0, f"exit status {p.returncode}: kiln eval itself did not survive\n{where}"
    results = json.loads(p.stdout)  # exactly one JSON value on stdout, whatever the kernels print
    assert isinstance(results, list) and len(results) == len(corpus) + 1, where
    wrong = []
    for kernel, r in zip(corpus, results):
        want = expected_outcome(kernel)
        got = r.get("outcome")
        line = f"{kernel.name}: {got} ({json.dumps(r.get('evidence'))[:300]})"
        print(line)
        # ok only where the header says the gate neutralises the attack (state carried from call to call,
        # reset before every run: the kernel did the work on every run)
        assert got != "ok" or want == {"ok"}, f"a hostile kernel passed: {line}"
        if got not in want:
            wrong.append(f"{line}, expected {' or '.join(sorted(want))}")
    assert not wrong, "\n".join(wrong)
    # what a kernel printed is reported with its verdict, never on kiln's stdout
    printed = results[[k.stem for k in corpus].index("fake_stdout_json")]
    assert '"outcome": "ok"' in printed.get("candidate_output", ""), printed.get("candidate_output")
    assert results[-1]["outcome"] == "ok", f"the gate did not survive the corpus: {results[-1]}"
    assert digest(problem) == before_problem, "the problem's files changed"
    assert digest(refs) == before_refs, "the reference data changed"


def test_cpu_corpus(tmp_path):
    run_corpus("cpu", tmp_path)


@pytest.mark.skipif(gpu_present() is not None, reason="no CUDA device: the cuda corpus runs on the GPU machine")
def test_cuda_corpus(tmp_path):
    run_corpus("cuda", tmp_path)
