"""families_table.py: the table of bench/families_device.sh from what it left in OUT (sweep/NAME.jsonl and
torch.jsonl): eager vs torch.compile vs kiln's best vs speed of light on each problem's largest workload, one
Markdown row a problem. A sweep cut by its timeout still counts the points it measured; a problem torch did not
time shows "—" there, one no sweep reached says so. Where OUT/optimize.json exists (`kiln optimize --json`, SEARCH=N
of families_device.sh), a problem's search best counts as one more point (its family column says "search (N
cands)"; the problem's only workload, as every issue row has). With --summary, a last line: the geomean of kiln over the
speed of light, and on how many rows kiln beats the better torch.compile mode (issue 15's goals).

    python3 bench/families_table.py OUT MODES [--summary]
"""
import json
import math
import pathlib
import sys


def fmt(v):
    return "—" if v is None else f"{v:.1f}"


def best_point(path, workload):
    """(us, 'family params', workload row) of the fastest ok point in a sweep's rows, or None."""
    best = None
    for line in path.read_text().splitlines():
        if not line.startswith("{"):
            continue
        row = json.loads(line)
        r = row["result"]
        if r.get("outcome") != "ok":
            continue
        ws = [w for w in r["workloads"] if w.get("uuid") == workload] or r["workloads"][-1:]
        if not ws or not ws[0].get("time_us"):
            continue
        us = ws[0]["time_us"]["median"]
        if best is None or us < best[0]:
            best = (us, row["family"] + " " + row["params"], ws[0])
    return best


def search_rows(path):
    """{problem: (us, 'search (N cands)', workload-like row)} from `kiln optimize --json`, its ok bests only."""
    try:
        data = json.loads(path.read_text() or "{}")
    except (OSError, json.JSONDecodeError):
        return {}
    rows = {}
    for r in data.get("problems", []):
        us, pct = r.get("best_us"), r.get("sol_pct")
        if us:
            w = {"axes": None, "sol_time_us": us * pct / 100 if pct else 0, "sol_pct": pct or 0,
                 "sol_score": r.get("score")}
            rows[r["problem"]] = (us, f"search ({r.get('candidates', '?')} cands)", w)
    return rows


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out, modes, summary = pathlib.Path(argv[1]), argv[2].split(","), "--summary" in argv[3:]
    torch_rows = {}
    tj = out / "torch.jsonl"
    for line in tj.read_text().splitlines() if tj.exists() else []:
        if line.startswith("{"):
            r = json.loads(line)
            torch_rows[r["problem"]] = r
    cols = ["problem", "workload"] + modes + ["kiln best", "family params", "SOL us", "SOL %", "S", "copy us",
                                               "vs eager", "vs best compile"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    swept = {f.stem: f for f in (out / "sweep").glob("*.jsonl")}
    searched = search_rows(out / "optimize.json")
    names = sorted(set(swept) | set(torch_rows) | set(searched))
    over_sol, wins = [], 0
    for name in names:
        t = torch_rows.get(name, {})
        mode_us = [t.get(m + "_us") for m in modes]
        comp = [v for m, v in zip(modes, mode_us) if m != "eager" and v]
        best = best_point(swept[name], t.get("workload")) if name in swept else None
        if name in searched and (best is None or searched[name][0] < best[0]):
            best = searched[name]
        if best:
            us, params, w = best
            eager = t.get("eager_us")
            axes = "(one)" if w.get("axes") is None else json.dumps(w["axes"])
            cells = [name, axes] + [fmt(v) for v in mode_us] + [
                f"{us:.1f}", params, f"{w.get('sol_time_us', 0):.1f}", f"{w.get('sol_pct', 0):.1f}",
                f"{w.get('sol_score') or 0:.3f}", fmt(t.get("copy_us")), f"{eager / us:.2f}x" if eager else "—",
                f"{min(comp) / us:.2f}x" if comp else "—"]
            if w.get("sol_time_us"):
                over_sol.append(us / w["sol_time_us"])
                wins += bool(comp) and min(comp) > us
        else:
            log = out / "sweep" / (name + ".log")
            lines = log.read_text().strip().splitlines() if log.exists() else []
            reason = lines[-1] if lines else ("no ok candidate" if name in swept else "not swept")
            cells = [name, "—"] + [fmt(v) for v in mode_us] + ["no ok candidate", reason[:80]] + [""] * 6
        print("| " + " | ".join(cells) + " |")
    if summary and over_sol:
        g = math.exp(sum(map(math.log, over_sol)) / len(over_sol))
        print(f"\nrows with a kiln time: {len(over_sol)}/{len(names)}; geomean kiln / speed "
              f"of light {g:.2f}x; faster than the better torch.compile mode on {wins}/{len(over_sol)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
