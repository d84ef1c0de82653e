"""bench/ncu_stalls.py's reading of Nsight Compute's source page: the shares of the stall reasons over every
sample, the instructions with the most samples first, and a spin on an mbarrier labelled with the barrier
that the try-wait setting its branch's predicate names (not another try-wait's); a file that is not a
source page is refused."""

from __future__ import annotations

import csv
import gzip
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import ncu_stalls  # noqa: E402

HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
          "stall_long_sb", "stall_wait", "stall_barrier", "stall_long_sb (Not Issued)"]
ROWS = [
    ["0x0", "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR6+0x1e000], R3", "2", "2", "0", "2", "0", "0"],
    ["0x10", "SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR6+0x1e068], R3", "0", "0", "0", "0", "0", "0"],
    ["0x20", "MOV R5, RZ", "0", "0", "0", "0", "0", "0"],
    ["0x30", "@!P0  BRA 0x7f00", "60", "60", "58", "2", "0", "58"],
    ["0x40", "WARPGROUP.DEPBAR.LE gsb0, 0x1", "30", "30", "0", "0", "30", "0"],
    ["0x50", "@!P2  BRA 0x7f40", "8", "8", "8", "0", "0", "8"],
]


def write(path: Path, rows, gz: bool) -> Path:
    opener = gzip.open if gz else open
    with opener(path, "wt", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Kernel Name", "attention_kernel"])
        w.writerow(HEADER)
        w.writerows(rows)
    return path


@pytest.mark.parametrize("gz", [False, True])
def test_shares_order_and_barrier_labels(tmp_path, gz):
    f = write(tmp_path / ("s.csv.gz" if gz else "s.csv"), ROWS, gz)
    header, rows = ncu_stalls.read_rows(f)
    assert len(rows) == len(ROWS)
    text = ncu_stalls.summarise(header, rows, top=3).splitlines()
    assert text[0] == "6 instructions, 100 samples"
    # long_sb 66 of 100, barrier 30, wait 4; the not-issued column is not a reason of its own
    assert text[1] == "long_sb 66.0%  barrier 30.0%  wait 4.0%"
    assert text[2].split()[:2] == ["3", "60.0%"]
    # the branch on P0 spins on the barrier P0's try-wait reads, though P1's try-wait is nearer
    assert text[2].endswith("<- mbarrier wait [UR6+0x1e000]")
    assert text[3].split()[:2] == ["4", "30.0%"] and "mbarrier" not in text[3]
    # P2 has no try-wait above it: no label
    assert text[4].split()[:2] == ["5", "8.0%"] and "mbarrier" not in text[4]


def test_not_a_source_page(tmp_path):
    f = tmp_path / "details.csv"
    f.write_text('"Metric Name","Metric Value"\n"Duration","1"\n')
    with pytest.raises(SystemExit, match="no header"):
        ncu_stalls.read_rows(f)
    assert ncu_stalls.main([str(tmp_path / "missing.csv")]) == 2
