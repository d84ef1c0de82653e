"""bench/ab_table.py's arithmetic (bench/ab_device.sh's table): new / old is the geometric mean over the points
both builds proved in every round only (a point one build failed, or one that only one build has, stays
out), per round; a build's best point is the mean of its rounds; its start point is each sweep's first row
where that proved."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import ab_table  # noqa: E402


def sweep(path: Path, rows):
    lines = []
    for params, us in rows:
        res = {"outcome": "ok" if us else "wrong", "workloads": [{"time_us": {"median": us} if us else {}}]}
        lines.append(json.dumps({"params": params, "result": res}))
    path.write_text("\n".join(lines) + "\n")


def test_ratio_best_and_start(tmp_path):
    # round 1: new is 10 % faster on a and 20 % slower on b; c failed in old's round 2, d is new's only
    sweep(tmp_path / "old.1.p.jsonl", [("a", 100.0), ("b", 50.0), ("c", 80.0)])
    sweep(tmp_path / "new.1.p.jsonl", [("a", 90.0), ("b", 60.0), ("c", 40.0), ("d", 10.0)])
    sweep(tmp_path / "old.2.p.jsonl", [("a", 110.0), ("b", 50.0), ("c", None)])
    sweep(tmp_path / "new.2.p.jsonl", [("a", 99.0), ("b", 55.0), ("c", 40.0), ("d", 12.0)])
    sweep(tmp_path / "notes.txt.jsonl", [("x", 1.0)])  # not BUILD.ROUND.PROBLEM: ignored
    runs = ab_table.load(tmp_path)
    assert list(runs) == ["p"]
    line = ab_table.table(runs).splitlines()[2].split(" | ")
    assert line[1] == "2"  # a and b
    r1, r2 = (float(x) for x in line[2].split())
    assert math.isclose(r1, math.sqrt(0.9 * 1.2), rel_tol=1e-4)
    assert math.isclose(r2, math.sqrt(0.9 * 1.1), rel_tol=1e-4)
    assert line[3] == "50.0 (b)"  # old: b's mean of 50 and 50 (c proved once, ranked after)
    assert line[4] == "11.0 (d)"  # new: d's mean of 10 and 12
    assert line[5] == "100.0 / 110.0" and line[6].rstrip(" |") == "90.0 / 99.0"


def test_failed_start_and_no_common_points(tmp_path):
    sweep(tmp_path / "old.1.q.jsonl", [("a", None), ("b", 5.0)])
    sweep(tmp_path / "new.1.q.jsonl", [("c", 4.0)])
    line = ab_table.table(ab_table.load(tmp_path)).splitlines()[2].split(" | ")
    assert line[1] == "0" and line[2] == "—"
    assert line[5] == "—" and line[6].rstrip(" |") == "4.0"
    assert ab_table.main([str(tmp_path / "missing")]) == 2
