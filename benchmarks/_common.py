"""What every ``bench_*.py`` shares: the command line, and the course's timing helpers.

A benchmark file defines ``run(quick=False, clock="wall") -> list[dict]`` and a function that
prints its rows, then ends with ``main = command_line(__doc__, run, print_rows)``.
``benchmarks/run_all.py`` imports the files directly and calls their ``run``.

Timing is :mod:`transformer_book.util.timing`'s (``measure`` interleaves the calls, ``medians``
summarises them, ``CLOCKS`` are the wall and CPU clocks), and ``one_thread()`` is
``util.env.torch_threads(1)``: the course machine's cores are shared, so the timed parts run
on one intra-op thread. They are imported here so that a benchmark needs one import line.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from pathlib import Path

import torch

from transformer_book.util.env import torch_threads
from transformer_book.util.files import atomic_write_json
from transformer_book.util.timing import CLOCKS, measure, medians

__all__ = ["CLOCKS", "command_line", "measure", "medians", "one_thread", "write_json"]

one_thread = functools.partial(torch_threads, 1)


def write_json(data: object, path: Path) -> Path:
    """Write ``data`` to ``path`` (its folder made if needed) with
    :func:`~transformer_book.util.files.atomic_write_json`: a reader sees the old file or the
    whole new one, and NaN or infinity are refused rather than written as invalid JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_json(path, data)


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
