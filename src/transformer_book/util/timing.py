"""Timing, one way for the whole course: the chapters, the benchmarks and the training loop.

Two clocks: ``"wall"`` (``time.perf_counter``, what a user waits) and ``"cpu"``
(``time.process_time``, this process's CPU seconds: on one thread it ignores time that
other processes take from us, so it is steadier on a busy machine). Several calls timed
against each other are interleaved (:func:`measure`), so a change of machine load hits
them alike; a ratio of two such times is what the course reports as a speed.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from types import TracebackType

from transformer_book.util.validation import require_int, require_one_of, require_positive_int

__all__ = ["CLOCKS", "Stopwatch", "best_time", "measure", "medians"]

CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}


class Stopwatch:
    """Wall and CPU seconds of a ``with`` block (or since :meth:`start`)::

        with Stopwatch() as watch:
            work()
        print(watch.seconds, watch.cpu_seconds)

    Read inside the block, the properties give the time so far.
    """

    _wall: float  # perf_counter() at start
    _cpu: float  # process_time() at start
    _stopped: tuple[float, float] | None  # both clocks when stopped, None while running

    def __init__(self) -> None:
        self.start()

    def start(self) -> Stopwatch:
        """Restart both clocks; returns ``self``."""
        self._wall, self._cpu, self._stopped = time.perf_counter(), time.process_time(), None
        return self

    def stop(self) -> Stopwatch:
        """Freeze the readings; returns ``self``."""
        self._stopped = (time.perf_counter(), time.process_time())
        return self

    @property
    def seconds(self) -> float:
        """Wall-clock seconds."""
        now = self._stopped[0] if self._stopped else time.perf_counter()
        return now - self._wall

    @property
    def cpu_seconds(self) -> float:
        """This process's CPU seconds (all threads)."""
        now = self._stopped[1] if self._stopped else time.process_time()
        return now - self._cpu

    def __enter__(self) -> Stopwatch:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()


def measure(calls: dict[str, Callable[[], object]], repeats: int, warmup: int = 1,
            clock: str = "wall") -> dict[str, list[float]]:
    """Seconds of each call, ``repeats`` times after ``warmup`` untimed rounds.

    The calls are interleaved, in alternating order from one round to the next, so a change
    of machine load hits every call alike.
    """
    require_one_of(clock, "clock", CLOCKS)
    require_positive_int(repeats, "repeats")
    require_int(warmup, "warmup", minimum=0)
    now = CLOCKS[clock]
    for _ in range(warmup):
        for call in calls.values():
            call()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for i in range(repeats):
        for name in (list(calls) if i % 2 == 0 else list(reversed(calls))):
            start = now()
            calls[name]()
            times[name].append(now() - start)
    return times


def medians(times: dict[str, list[float]]) -> dict[str, float]:
    """The median of each call's times (what the benchmark tables report)."""
    return {name: statistics.median(ts) for name, ts in times.items()}


def best_time(fn: Callable[[], object], repeats: int = 5, warmup: int = 1,
              clock: str = "wall") -> float:
    """The fastest of ``repeats`` timed calls of ``fn`` after ``warmup`` untimed ones: the
    least disturbed measurement of a short call."""
    return min(measure({"fn": fn}, repeats, warmup, clock)["fn"])
