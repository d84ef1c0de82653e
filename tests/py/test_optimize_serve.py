"""test_optimize_serve.py: `kiln optimize --serve` starts the dashboard beside the run: the URL is printed,
the API answers with the run's store while the run goes, and the server is gone when the run ends."""
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
KILN = ROOT / "build" / "kiln"
pytestmark = pytest.mark.skipif(not KILN.exists(), reason="build/kiln is missing: run make first")


def test_optimize_serves_its_dashboard_while_it_runs(tmp_path):
    problem = tmp_path / "softmax_f32"
    shutil.copytree(ROOT / "tests/data/problems/softmax_f32", problem,
                    ignore=shutil.ignore_patterns("kiln"))
    run = tmp_path / "run"
    env = dict(os.environ, KILN_PYTHON=sys.executable, KILN_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.Popen(
        [str(KILN), "optimize", str(run), str(problem), "--backend", "cpu", "--budget", "2",
         "--iters", "1", "--serve=0"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = None
    seen_run = None
    deadline = time.time() + 120
    try:
        for line in proc.stderr:
            m = re.search(r"dashboard on (http://127\.0\.0\.1:\d+/)", line)
            if m:
                url = m.group(1)
                break
        assert url, "kiln optimize --serve printed no dashboard URL"
        while time.time() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(url + "api/run", timeout=5) as r:
                    seen_run = json.loads(r.read())
                    break
            except OSError:
                time.sleep(0.1)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert seen_run is not None, "the dashboard never answered while the run went"
    assert isinstance(seen_run, dict)
    with pytest.raises(OSError):  # the server stops with the run
        urllib.request.urlopen(url + "api/run", timeout=2)
