"""The table of bench/search_device.sh: per problem the best time that MCTS (kiln optimize), a uniform random
sample and the exhaustive sweep found, and the geomeans.

    python bench/search_table.py OUT PROBLEM_DIR...

OUT holds optimize.json (kiln optimize --json), random/NAME.jsonl and exhaustive/NAME.jsonl (kiln sweep --jsonl,
one row per line). A time is the geomean over the problem's workloads of the median (the gate's
summary.time_us_geomean). An exhaustive sweep that did not measure every distinct valid point is marked
"cut" (its best is the best of what it reached).

With OUT/kiln.db (the optimize run's store) a second table puts every method on one clock: the exhaustive
sweep's time of the point each method found best (MCTS's best candidate by its own timing; random's best row), as a
share of the exhaustive best. Times measured minutes apart differ by a few per cent on their own; this view
compares the points found, not the moments they were timed.

Where OUT/sample/NAME.jsonl exists (SAMPLE_N=N of search_device.sh: a uniform random sample of a space too large to
sweep), a third table puts MCTS against the best it is expected of random at the same count of draws, K (the random
run's rows, else $BUDGET, else 50): the mean over every K-point draw from the sample, exactly, not one draw's luck
and against the sample's best.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import re
import sqlite3
import sys


def rows_of_jsonl(path: pathlib.Path):
    """{point: time µs or None} of a sweep's rows, and how many rows ran. A point is its source's hash (the
    store's candidate.source_hash: points that emit the same source are one), else its params."""
    times, n = {}, 0
    if not path.exists():
        return times, 0
    for line in path.read_text().splitlines():
        if not line.startswith("{"):
            continue
        n += 1
        row = json.loads(line)
        r = row["result"]
        t = (r.get("summary") or {}).get("time_us_geomean") if r.get("outcome") == "ok" else None
        times[row.get("source_hash") or row.get("params", "")] = t if isinstance(t, (int, float)) else None
    return times, n


def best_of(times):
    ok = {p: t for p, t in times.items() if t}
    return (min(ok.items(), key=lambda kv: kv[1]) if ok else (None, None)), len(ok)


def mcts_best_point(db: pathlib.Path, problem: str):
    """The point (source hash) of the optimize run's fastest ok candidate of problem, or None."""
    if not db.exists():
        return None
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        row = con.execute(
            "SELECT c.source_hash FROM candidate c JOIN latest_result r ON r.candidate_id = c.id "
            "JOIN problem p ON p.id = c.problem_id WHERE p.name = ? AND r.outcome = 'ok' "
            "AND r.time_us IS NOT NULL ORDER BY r.time_us LIMIT 1", (problem,)).fetchone()
    except sqlite3.Error:
        row = None
    con.close()
    return row[0] if row else None


def valid_points(log: pathlib.Path, sample: bool = False):
    """The distinct valid points of a space, from its exhaustive sweep's log (its jobs), or from a sample's log
    (the points that satisfy the constraints, duplicates among them)."""
    if not log.exists():
        return None
    text = log.read_text()
    m = re.search(r"(\d+) of \d+ points satisfy the constraints", text)
    jobs = None if sample else re.search(r"\[\d+/(\d+)\]", text)  # distinct sources, after duplicates are dropped
    if jobs:
        return int(jobs.group(1))
    return int(m.group(1)) if m else None


def expected_best(times: dict, k: int):
    """The expected best time of k points drawn uniformly without replacement from a sample's rows (a failed
    point has no time), given one of the k is ok; None without an ok row or with fewer than k rows."""
    n, ok = len(times), sorted(t for t in times.values() if t)
    if not ok or not 0 < k <= n:
        return None
    num = den = 0.0
    for i, t in enumerate(ok):  # ok[i] is the draw's best: none of ok[:i] drawn, ok[i] drawn
        p = (math.comb(n - i, k) - math.comb(n - i - 1, k)) / math.comb(n, k)
        num, den = num + p * t, den + p
    return num / den


def fmt(v) -> str:
    return f"{v:.2f}" if v else "—"


def times(a, b) -> str:
    """a / b as a factor, or — without both."""
    return f"{a / b:.3f}×" if a and b else "—"


def share(a, b) -> str:
    """a / b as a percentage, or — without both."""
    return f"{100 * a / b:.1f} %" if a and b else "—"


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def definition(path: str):
    d = pathlib.Path(path.rstrip("/"))
    for cand in (d, pathlib.Path("bench/problems") / d.name):
        if (cand / "definition.json").exists():
            return d.name, json.loads((cand / "definition.json").read_text())
    return d.name, {"name": d.name}


def main() -> int:
    out = pathlib.Path(sys.argv[1])
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
    rows, clock = [], []
    for path in sys.argv[2:]:
        name, d = definition(path)
        o = opt.get(d.get("name", name), {})
        m = o.get("best_us")
        rand, rn = rows_of_jsonl(out / "random" / f"{name}.jsonl")
        exh, en = rows_of_jsonl(out / "exhaustive" / f"{name}.jsonl")
        (rp, r), rok = best_of(rand)
        (_, e), _ = best_of(exh)
        valid = valid_points(out / "exhaustive" / f"{name}.log") or valid_points(out / "sample" / f"{name}.log", True)
        cut = "" if en == 0 or (valid is not None and en >= valid) else " (cut)"
        print(f"| {name} | {valid if valid is not None else '?'} | {fmt(m)} ({o.get('candidates', '?')}) | "
              f"{fmt(r)} ({rok}/{rn}) | {fmt(e)} ({en}/{valid if valid is not None else '?'}){cut} | {times(r, m)} | "
              f"{share(e, m)} |")
        rows.append((m, r, e))
        mp = mcts_best_point(out / "kiln.db", d.get("name", name))
        clock.append((name, e, exh.get(mp) if mp else None, exh.get(rp) if rp else None, cut))
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
    if any(c[2] or c[3] for c in clock):
        print("\nOn the exhaustive sweep's clock (its time of each method's best point):\n")
        print("| problem | exhaustive best µs | MCTS's point µs | random's point µs | MCTS vs random "
              "| MCTS / exhaustive |")
        print("|---|---|---|---|---|---|")
        for name, e, mt, rt, cut in clock:
            print(f"| {name}{cut} | {fmt(e)} | {fmt(mt)} | {fmt(rt)} | {times(rt, mt)} | {share(e, mt)} |")
        full = [c for c in clock if c[1] and c[2] and c[3]]
        if full:
            ge, gm, gr = (geomean([c[k] for c in full]) for k in (1, 2, 3))
            print(f"\ngeomean over {len(full)} problems: MCTS {100 * (gr / gm - 1):+.1f} % vs random, "
                  f"{100 * ge / gm:.1f} % of exhaustive")
    sample_table(out, opt)
    return 0


def sample_table(out: pathlib.Path, opt: dict) -> None:
    """MCTS against random's expected best of K draws from each problem's sample, and against its best."""
    rows = []
    for path in sys.argv[2:]:
        name, d = definition(path)
        samp, sn = rows_of_jsonl(out / "sample" / f"{name}.jsonl")
        if not sn:
            continue
        _, rn = rows_of_jsonl(out / "random" / f"{name}.jsonl")
        k = rn or int(os.environ.get("BUDGET", "50"))
        (_, best), sok = best_of(samp)
        rows.append((name, sok, sn, best, k, expected_best(samp, k), opt.get(d.get("name", name), {}).get("best_us")))
    if not rows:
        return
    print("\nAgainst a uniform random sample of each space (its best; random's expected best of K draws from it):\n")
    print("| problem | sample ok/run | sample best µs | random, expected best of K µs | MCTS best µs | MCTS vs random "
          "| MCTS / sample best |")
    print("|---|---|---|---|---|---|---|")
    for name, sok, sn, best, k, exp, m in rows:
        print(f"| {name} | {sok}/{sn} | {fmt(best)} | {fmt(exp)} (K = {k}) | {fmt(m)} | {times(exp, m)} | "
              f"{share(best, m)} |")
    full = [r for r in rows if r[3] and r[5] and r[6]]
    if full:
        gb, ge, gm = (geomean([r[j] for r in full]) for j in (3, 5, 6))
        print(f"\ngeomean over {len(full)} problems: MCTS {gm:.2f} µs, random's expected best {ge:.2f}, sample best "
              f"{gb:.2f}: MCTS {100 * (ge / gm - 1):+.1f} % vs random (goal ≥ +10 %), {100 * gb / gm:.1f} % of the "
              f"sample's best")


if __name__ == "__main__":
    sys.exit(main())
