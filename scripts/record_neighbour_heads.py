"""Record chapter 06's 1-vs-2-vs-4-head experiment on the neighbour task over several seeds.

    OMP_NUM_THREADS=1 nice -n 10 python scripts/record_neighbour_heads.py --results results

Each (heads, seed) cell is :func:`transformer_book.toy.heads.neighbour_seed_run`: the same
model, training and test set as the chapter (``NEIGHBOUR_SETUP``), weights from
``torch.manual_seed(seed)`` and batches from ``seed + 1``; seed 0 is the run the chapter
trains live. On one thread a cell takes a few seconds. Chapter 06 reads the newest record
(``results/neighbour-heads-seeds-<UTC time>.json``), shows the mean and spread per head
count, and checks that its live seed lies within the recorded range.
"""

from __future__ import annotations

import argparse
import time

import torch

from transformer_book.toy.heads import NEIGHBOUR_SETUP, neighbour_seed_run
from transformer_book.util.records import command_line, git_commit, hardware_info, write_record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="results", help="records folder")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--heads", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    torch.set_num_threads(1)  # tiny matrices: one thread is the fastest (chapter 06)
    runs, start, cpu = [], time.perf_counter(), time.process_time()
    for seed in args.seeds:
        for heads in args.heads:
            begin = time.perf_counter()
            run = neighbour_seed_run(heads, seed, device="cpu")
            run["seconds"] = time.perf_counter() - begin
            runs.append(run)
            print(f"h={heads} seed={seed}: accuracy (previous, next) "
                  f"{run['accuracy'][0]:.3f} {run['accuracy'][1]:.3f}, "
                  f"{run['seconds']:.1f} s", flush=True)
    record = {
        "kind": "neighbour-heads", "name": "seeds", "command": command_line(),
        "git": git_commit(), "hardware": hardware_info("cpu"),
        "config": dict(NEIGHBOUR_SETUP), "seeds": args.seeds, "heads": args.heads,
        "wall_seconds": time.perf_counter() - start, "cpu_seconds": time.process_time() - cpu,
        "runs": runs,
    }
    path = write_record(args.results, "neighbour-heads", "seeds", record)
    print(f"wrote {path} ({len(runs)} runs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
