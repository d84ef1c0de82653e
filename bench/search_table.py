"""The table of bench/search_device.sh: per problem the best time that MCTS (kiln optimize), a uniform random
sample and the exhaustive sweep found, and the geomeans.

    python bench/search_table.py OUT PROBLEM_DIR...

OUT holds optimize.json (kiln optimize --json), random/NAME.jsonl and exhaustive/NAME.jsonl (kiln sweep --jsonl,
one row per line). A time is the geomean over the problem's workloads of the median (the gate's
summary.time_us_geomean). An exhaustive sweep that did not measure every distinct valid point is marked
"cut" (its best is the best of what it reached).
"""

from __future__ import annotations

import json
import math
import pathlib
import re
import sys


def best_of_jsonl(path: pathlib.Path):
    best, n, ok = None, 0, 0
    if not path.exists():
        return None, 0, 0
    for line in path.read_text().splitlines():
        if not line.startswith("{"):
            continue
        n += 1
        r = json.loads(line)["result"]
        if r.get("outcome") != "ok":
            continue
        ok += 1
        t = (r.get("summary") or {}).get("time_us_geomean")
        if isinstance(t, (int, float)) and (best is None or t < best):
            best = t
    return best, n, ok


def valid_points(log: pathlib.Path):
    if not log.exists():
        return None
    text = log.read_text()
    m = re.search(r"(\d+) of \d+ points satisfy the constraints", text)
    jobs = re.search(r"\[\d+/(\d+)\]", text)  # distinct sources, after duplicates are dropped
    if jobs:
        return int(jobs.group(1))
    return int(m.group(1)) if m else None


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def main() -> int:
    out = pathlib.Path(sys.argv[1])
    names = [pathlib.Path(p.rstrip("/")).name for p in sys.argv[2:]]
    opt = {}
    try:
        data = json.loads((out / "optimize.json").read_text() or "{}")
        for row in data.get("problems", []):
            opt[row["problem"]] = row
    except (OSError, json.JSONDecodeError):
        pass
    print("| problem | valid points | MCTS best µs (cands) | random best µs (ok/run) | exhaustive best µs (run/valid) "
          "| MCTS vs random | MCTS / exhaustive |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for name in names:
        d = json.loads((pathlib.Path("bench/problems") / name / "definition.json").read_text()) \
            if (pathlib.Path("bench/problems") / name).exists() else {"name": name}
        o = opt.get(d.get("name", name), {})
        m = o.get("best_us")
        r, rn, rok = best_of_jsonl(out / "random" / f"{name}.jsonl")
        e, en, eok = best_of_jsonl(out / "exhaustive" / f"{name}.jsonl")
        valid = valid_points(out / "exhaustive" / f"{name}.log")
        cut = "" if valid is not None and en >= valid else " (cut)"
        vs_r = f"{r / m:.3f}×" if m and r else "—"
        vs_e = f"{100 * e / m:.1f} %" if m and e else "—"
        fmt = lambda v: f"{v:.2f}" if v else "—"  # noqa: E731
        print(f"| {name} | {valid if valid is not None else '?'} | {fmt(m)} ({o.get('candidates', '?')}) | "
              f"{fmt(r)} ({rok}/{rn}) | {fmt(e)} ({en}/{valid if valid is not None else '?'}){cut} | {vs_r} | {vs_e} |")
        rows.append((m, r, e))
    both = [(m, r) for m, r, _ in rows if m and r]
    alle = [(m, e) for m, _, e in rows if m and e]
    if both:
        gm, gr = geomean([m for m, _ in both]), geomean([r for _, r in both])
        print(f"\ngeomean over {len(both)} problems: MCTS {gm:.2f} µs, random {gr:.2f} µs: MCTS "
              f"{100 * (gr / gm - 1):+.1f} % vs random (goal ≥ +10 %)")
    if alle:
        gm, ge = geomean([m for m, _ in alle]), geomean([e for _, e in alle])
        print(f"geomean over {len(alle)} problems: exhaustive {ge:.2f} µs: MCTS reaches {100 * ge / gm:.1f} % of "
              f"exhaustive (goal ≥ 95 %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
