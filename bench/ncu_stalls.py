"""Where a kernel's warps wait, from Nsight Compute's per-instruction source page.

    ncu --import R.ncu-rep --page source --csv --print-source sass > R.sass.csv
    python3 bench/ncu_stalls.py R.sass.csv [--top N]

Prints the share of all warp-stall samples each stall reason took, then the N instructions with the most
samples (their index in the SASS, share, text and top three reasons). A branch on the predicate an
mbarrier's try-wait (`SYNCS.PHASECHK.TRANS64.TRYWAIT`) set just above it is where a warp spins on that
barrier, so it is labelled with the barrier's shared-memory operand: kiln's kernels lay their full and
empty barriers out in a row (docs/families/attention.md), so the offset says which one. The file may be
gzipped (.gz).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import pathlib
import re
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"


def read_rows(path: pathlib.Path) -> tuple[list, list]:
    """The header and the instruction rows of a source-page CSV (the lines before the header, such as
    the kernel's name, are skipped)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="") as f:
        rows = list(csv.reader(f))
    for i, r in enumerate(rows):
        if "Source" in r and SAMPLES in r:
            return r, [x for x in rows[i + 1:] if len(x) == len(r)]
    raise SystemExit(f"ncu_stalls: {path}: no header with 'Source' and '{SAMPLES}' (is it --page source --csv?)")


def count(v: str) -> int:
    try:
        return int(float(v.replace(",", "") or 0))
    except ValueError:
        return 0


def summarise(header: list, rows: list, top: int) -> str:
    ix = {h: i for i, h in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "(Not Issued)" not in h]
    samples = [count(r[ix[SAMPLES]]) for r in rows]
    total = sum(samples)
    if total == 0:
        return f"{len(rows)} instructions, no stall samples\n"
    out = [f"{len(rows)} instructions, {total} samples"]
    share = sorted(((sum(count(r[ix[h]]) for r in rows), h[6:]) for h in reasons), reverse=True)
    out.append("  ".join(f"{name} {v * 100 / total:.1f}%" for v, name in share if v))
    source = [r[ix["Source"]].strip() for r in rows]
    for i in sorted(range(len(rows)), key=lambda i: -samples[i])[:top]:
        if not samples[i]:
            break
        why = sorted(((count(rows[i][ix[h]]), h[6:]) for h in reasons), reverse=True)[:3]
        note = ""
        branch = re.match(r"@!?(U?P\d)\s+BRA\b", source[i])
        if branch:  # the try-wait that set the branch's predicate, a few instructions up
            for j in range(i - 1, max(i - 17, -1), -1):
                m = re.search(r"TRYWAIT\s+" + branch.group(1) + r",\s*\[([^\]]+)\]", source[j])
                if m:
                    note = f"  <- mbarrier wait [{m.group(1)}]"
                    break
        out.append(f"{i:6d} {samples[i] * 100 / total:5.1f}%  {source[i][:64]:64s} "
                   + " ".join(f"{n}:{v}" for v, n in why if v) + note)
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", type=pathlib.Path, help="ncu --page source --csv --print-source sass output (or .gz)")
    ap.add_argument("--top", type=int, default=30, help="instructions to list (default 30)")
    a = ap.parse_args(argv)
    if not a.csv.exists():
        print(f"ncu_stalls: {a.csv}: no such file", file=sys.stderr)
        return 2
    header, rows = read_rows(a.csv)
    sys.stdout.write(summarise(header, rows, a.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
