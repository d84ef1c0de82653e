"""bench/search_table.py's arithmetic (the search benchmark's table, bench/search_device.sh): random's expected
best of K draws from a sample is exact — the mean over every K-point draw of its best ok time, failed points
drawn too — and a sample with no ok row, or fewer rows than K, gives none."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from search_table import expected_best  # noqa: E402


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_expected_best_is_the_mean_over_every_draw(k):
    times = {"a": 5.0, "b": None, "c": 3.0, "d": 7.5, "e": None, "f": 3.0, "g": 4.25}
    bests = [min(t for t in (times[p] for p in draw) if t)
             for draw in itertools.combinations(times, k) if any(times[p] for p in draw)]
    assert expected_best(times, k) == pytest.approx(sum(bests) / len(bests), rel=1e-12)


def test_expected_best_without_an_answer():
    assert expected_best({"a": None, "b": None}, 1) is None
    assert expected_best({"a": 1.0}, 2) is None
    assert expected_best({"a": 1.0}, 0) is None
    assert expected_best({"a": 2.0, "b": 1.0}, 2) == 1.0
