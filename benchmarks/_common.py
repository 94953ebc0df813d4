"""What every ``bench_*.py`` shares: the clocks, interleaved timing, one-thread runs, the
atomic JSON file and the command line.

A benchmark file defines ``run(quick=False, clock="wall") -> list[dict]`` and a function that
prints its rows, then ends with ``main = command_line(__doc__, run, print_rows)``.
``benchmarks/run_all.py`` imports the files directly and calls their ``run``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

# "wall": what a user waits; "cpu": this process's CPU seconds, which on one thread ignore the
# time other processes take from us (steadier on a busy machine).
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}


def measure(calls: dict[str, Callable[[], object]], repeats: int, warmup: int = 1,
            clock: str = "wall") -> dict[str, list[float]]:
    """Seconds of each call, ``repeats`` times after ``warmup`` untimed rounds.

    The calls are interleaved, in alternating order from one round to the next, so a change
    of machine load hits every call alike.
    """
    if clock not in CLOCKS:
        raise ValueError(f"clock: expected one of {sorted(CLOCKS)}, received {clock!r}")
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
    """The median of each call's times (what the tables report)."""
    return {name: statistics.median(ts) for name, ts in times.items()}


@contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one intra-op thread inside the block (the course machine's two cores are
    shared), and restore the previous setting after it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def write_json(data: object, path: Path) -> None:
    """Write ``data`` to ``path`` atomically (a temporary file in the same folder, then a
    rename): a reader sees the old file or the whole new one, never half of it. NaN and
    infinity are refused rather than written as invalid JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, allow_nan=False)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def command_line(doc: str, run: Callable[..., list[dict]],
                 print_rows: Callable[[list[dict]], None]) -> Callable[..., list[dict]]:
    """The ``main(argv=None)`` of a benchmark file: ``--quick``, ``--json PATH``, ``--clock``
    and ``--threads``; it runs, prints the rows, optionally saves them, and returns them."""

    def main(argv: list[str] | None = None) -> list[dict]:
        parser = argparse.ArgumentParser(description=doc.splitlines()[0])
        parser.add_argument("--quick", action="store_true", help="small sizes, fewer repeats")
        parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
        parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                            help="wall time, or this process's CPU time (busy machines)")
        parser.add_argument("--threads", type=int, default=None,
                            help="torch intra-op threads outside the timed one-thread parts")
        args = parser.parse_args(argv)
        if args.threads is not None:
            torch.set_num_threads(args.threads)
        rows = run(quick=args.quick, clock=args.clock)
        print_rows(rows)
        if args.json is not None:
            write_json(rows, args.json)
        return rows

    return main
