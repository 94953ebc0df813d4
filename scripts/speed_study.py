"""Record the course's speed study (chapter 05) into results/ as a JSON record.

    python scripts/speed_study.py --results results                 # the CPU grid, 2 and 1 threads
    python scripts/speed_study.py --results results --device cuda   # the same grid on a GPU

Times self-attention (with its projections), nn.RNN, nn.LSTM and a width-3 convolution,
forward + backward and forward only, float32, on every (batch, d, n) of the grid, with 2
torch threads (the study's convention) and 1 (what a busy machine can measure), under the
conventions of :data:`transformer_book.analysis.speed_study.CONVENTIONS`, and writes
``results/speed-study-<device>-<UTC time>.json`` with the grid, the conventions, the
hardware, the commit, the command and the seconds it took. Chapter 05 reads every CPU record
taken on a quiet machine (each run is one repeat: its table gives the median crossover and
the range over them) and plots the newest beside a small live run.
"""

from __future__ import annotations

import argparse
import os
import sys

from transformer_book.analysis.speed_study import CONVENTIONS, MODES, run_speed_study
from transformer_book.util.env import require_device
from transformer_book.util.records import command_line, git_commit, hardware_info, write_record
from transformer_book.util.timing import Stopwatch

GRID = {"batches": [1, 8], "ds": [128, 512], "ns": [16, 32, 64, 128, 256, 512, 1024, 2048, 4096],
        "max_tokens": 8192}
QUICK_GRID = {"batches": [1, 2], "ds": [16], "ns": [8, 16, 32], "max_tokens": None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="results", help="records folder (default results)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--threads", type=int, nargs="+",
                        default=[CONVENTIONS["threads"], 1],
                        help="torch thread counts on a CPU (default 2 1: the study's convention, "
                             "then one thread)")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per point (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of weights and inputs")
    parser.add_argument("--quick", action="store_true", help="a tiny grid (for tests)")
    args = parser.parse_args(argv)
    device = require_device(args.device, "--device")
    grid = QUICK_GRID if args.quick else GRID
    load_before = os.getloadavg()
    with Stopwatch() as watch:
        points = run_speed_study(grid["batches"], grid["ds"], grid["ns"], modes=MODES,
                                 threads=args.threads, repeats=args.repeats,
                                 max_tokens=grid["max_tokens"], device=device, seed=args.seed)
    record = {
        "experiment": "speed-study",
        "config": {**grid, "threads": args.threads, "repeats": args.repeats, "quick": args.quick},
        "seed": args.seed,
        "conventions": CONVENTIONS,
        "command": command_line(argv if argv is None else [sys.argv[0], *argv]),
        "git": git_commit(),
        "hardware": hardware_info(device),
        "load_average": {"before": list(load_before), "after": list(os.getloadavg()),
                         "note": "1-minute, 5-minute, 15-minute; above the core count, "
                                 "2-thread times include waiting for a core"},
        "seconds": watch.seconds,
        "points": points,
    }
    path = write_record(args.results, "speed", f"study-{device.type}", record)
    print(f"{len(points)} points in {watch.seconds:.0f} s -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
