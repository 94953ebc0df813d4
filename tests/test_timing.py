"""util.timing: the stopwatch's two clocks, interleaved measurements and their summaries."""

from __future__ import annotations

import time

import pytest

from transformer_book.util.timing import CLOCKS, Stopwatch, best_time, measure, medians
from transformer_book.util.validation import BookError


def _spin(seconds: float) -> None:
    """Busy work (CPU time, unlike sleep)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_stopwatch_counts_wall_and_cpu_time_and_freezes_when_stopped():
    with Stopwatch() as watch:
        time.sleep(0.02)  # wall time, hardly any CPU
        _spin(0.02)
        inside = watch.seconds
    assert inside > 0.0
    assert watch.seconds >= 0.04 and watch.seconds >= inside
    assert 0.0 < watch.cpu_seconds < watch.seconds, "sleeping costs wall time, not CPU"
    frozen = watch.seconds
    time.sleep(0.01)
    assert watch.seconds == frozen, "readings stop with the block"
    assert watch.start().seconds < frozen, "start() restarts both clocks"


def test_measure_interleaves_the_calls_in_alternating_order():
    order = []
    times = measure({"a": lambda: order.append("a"), "b": lambda: order.append("b")},
                    repeats=3, warmup=1)
    assert order == ["a", "b", "a", "b", "b", "a", "a", "b"]  # warm-up, then a b / b a / a b
    assert {name: len(ts) for name, ts in times.items()} == {"a": 3, "b": 3}
    assert all(t >= 0 for ts in times.values() for t in ts)


def test_medians_and_best_time():
    assert medians({"a": [3.0, 1.0, 2.0], "b": [4.0, 5.0]}) == {"a": 2.0, "b": 4.5}
    assert 0.005 <= best_time(lambda: _spin(0.005), repeats=2, warmup=0) < 1.0
    assert set(CLOCKS) == {"wall", "cpu"}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"clock": "gpu"}, r"clock: expected one of \['cpu', 'wall'\], received 'gpu'"),
        ({"repeats": 0}, r"repeats: expected an integer >= 1, received 0"),
        ({"warmup": -1}, r"warmup: expected an integer >= 0, received -1"),
    ],
)
def test_measure_refuses_bad_settings(kwargs, match):
    with pytest.raises(BookError, match=match):
        measure({"a": lambda: None}, **{"repeats": 1, **kwargs})
