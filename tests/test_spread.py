"""util.spread: the summary of a metric over seeds and the live-seed check."""

from __future__ import annotations

import math
import statistics

import pytest

from transformer_book.util.spread import seed_spread, within_spread
from transformer_book.util.validation import BookError


def test_seed_spread_matches_statistics():
    values = [0.36, 0.43, 0.446, 0.436, 0.389]
    summary = seed_spread(values)
    assert summary["n"] == 5 and summary["min"] == 0.36 and summary["max"] == 0.446
    assert summary["mean"] == pytest.approx(statistics.mean(values))
    assert summary["sd"] == pytest.approx(statistics.stdev(values))
    assert seed_spread([0.5]) == {"n": 1, "mean": 0.5, "sd": 0.0, "min": 0.5, "max": 0.5}


def test_within_spread_uses_the_range_and_the_tolerance():
    summary = seed_spread([0.4, 0.5])
    assert within_spread(0.45, summary, 0.0) and within_spread(0.5, summary, 0.0)
    assert not within_spread(0.52, summary, 0.0) and within_spread(0.52, summary, 0.03)
    assert not within_spread(0.36, summary, 0.03) and within_spread(0.37, summary, 0.03)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: seed_spread([]), "values: expected a non-empty sequence"),
        (lambda: seed_spread(["a"]), "values: expected"),
        (lambda: within_spread(0.5, {"mean": 0.5}, 0.1), "spread: expected a seed_spread"),
        (lambda: within_spread(math.nan, seed_spread([0.5]), 0.1), "value: expected a finite"),
        (lambda: within_spread(0.5, seed_spread([0.5]), -0.1), "tolerance: expected a number >= 0"),
    ],
)
def test_bad_inputs(call, match):
    with pytest.raises(BookError, match=match):
        call()
