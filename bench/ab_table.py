"""Two builds of kiln compared point by point: the table of bench/ab_device.sh.

    python3 bench/ab_table.py DIR

DIR holds `kiln sweep --jsonl` files named BUILD.ROUND.PROBLEM.jsonl (BUILD `old` or `new`, ROUND a
number). For each problem: how many points both builds proved `ok` in every round, the geometric mean of
new / old over those points in each round (below 1: the new build is faster; each round's sweeps ran the
builds one after the other, so a drift of the clock between rounds shows as a spread of the rounds, not as
a difference), each build's best point (its mean over the rounds) and its start point (the first row of a
sweep: `kiln sweep --where` runs the start point first). Comparing the same points cancels what a best-of
comparison cannot: which points a sweep happened to reach, and one lucky run.
"""

from __future__ import annotations

import collections
import json
import math
import pathlib
import sys


def read_sweep(path: pathlib.Path) -> tuple[dict, tuple | None]:
    """{params: median µs} of the points proved ok, and (params, µs) of the first row (None if it failed)."""
    times, first = {}, None
    for n, line in enumerate(l for l in path.read_text().splitlines() if l.startswith("{")):
        row = json.loads(line)
        res = row.get("result") or {}
        us = ((res.get("workloads") or [{}])[-1].get("time_us") or {}).get("median")
        ok = res.get("outcome") == "ok" and us
        if ok:
            times[row.get("params", "")] = us
        if n == 0 and ok:
            first = (row.get("params", ""), us)
    return times, first


def load(d: pathlib.Path) -> dict:
    """{problem: {(build, round): (times, first)}}"""
    runs: dict = collections.defaultdict(dict)
    for f in sorted(d.glob("*.jsonl")):
        parts = f.name[: -len(".jsonl")].split(".", 2)
        if len(parts) != 3 or parts[0] not in ("old", "new"):
            continue
        runs[parts[2]][(parts[0], parts[1])] = read_sweep(f)
    return runs


def geomean_ratio(old: dict, new: dict, points) -> float | None:
    logs = [math.log(new[p] / old[p]) for p in points if p in old and p in new]
    return math.exp(sum(logs) / len(logs)) if logs else None


def table(runs: dict) -> str:
    out = ["| problem | points | new / old (each round) | old best | new best | old start | new start |",
           "|---|---|---|---|---|---|---|"]
    for problem, sweeps in sorted(runs.items()):
        rounds = sorted({r for _, r in sweeps}, key=lambda r: (len(r), r))
        both = set.intersection(*(set(t) for t, _ in sweeps.values())) if sweeps else set()
        ratios = []
        for r in rounds:
            o, n = sweeps.get(("old", r)), sweeps.get(("new", r))
            g = geomean_ratio(o[0], n[0], both) if o and n else None
            ratios.append("—" if g is None else f"{g:.4f}")

        def best(build):
            per = collections.defaultdict(list)
            for (b, _), (times, _) in sweeps.items():
                if b == build:
                    for p, us in times.items():
                        per[p].append(us)
            if not per:
                return "—"
            p = min(per, key=lambda p: (-len(per[p]), sum(per[p]) / len(per[p])))
            return f"{sum(per[p]) / len(per[p]):.1f} ({p})"

        def start(build):
            v = [sweeps[(build, r)][1] for r in rounds if (build, r) in sweeps and sweeps[(build, r)][1]]
            return " / ".join(f"{us:.1f}" for _, us in v) or "—"

        out.append(f"| {problem} | {len(both)} | {' '.join(ratios)} | {best('old')} | {best('new')} | "
                   f"{start('old')} | {start('new')} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    d = pathlib.Path(argv[0])
    if not d.is_dir():
        print(f"ab_table: {d}: not a directory", file=sys.stderr)
        return 2
    sys.stdout.write(table(load(d)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
