"""Record chapter 02's RNN-bottleneck sweep: state size H x training steps x task, 3 seeds.

    OMP_NUM_THREADS=1 nice -n 10 python scripts/record_rnn_bottleneck.py --results results

Each cell trains :class:`~transformer_book.baselines.seq2seq.Seq2SeqGRU` without attention
on chapter 02's copy or reverse data (:func:`transformer_book.toy.bottleneck.bottleneck_data`)
and scores it teacher forced and greedy, per length and per output position
(:func:`~transformer_book.toy.bottleneck.train_and_score`). A run of 3,000 steps is also
scored after 300 and 1,000, which is what shorter runs of the same seed compute. The grid
is what one shared CPU thread trains in well under an hour: H = 32, 128 and 512 at 300 steps
on both tasks, and 3,000 steps for H = 32 and 128 on reverse (H = 512 for 3,000 steps would
take about 15 minutes per seed on one idle thread, and is left out). Chapter 02 reads the
newest record (``results/rnn-bottleneck-sweep-<UTC time>.json``) and reruns seed 0 of a
cell live.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from transformer_book.toy.bottleneck import BottleneckSetup, bottleneck_data, train_and_score
from transformer_book.util.records import command_line, git_commit, hardware_info, write_record

#: (task, hidden size, step counts scored in one run), in order of importance: the sweep
#: stops starting cells once ``--budget-seconds`` have passed and records which it skipped.
GRID = (
    ("reverse", 128, (300, 1000, 3000)),
    ("copy", 128, (300,)),
    ("reverse", 32, (300, 1000, 3000)),
    ("reverse", 512, (300,)),
    ("copy", 32, (300,)),
    ("copy", 512, (300,)),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="results", help="records folder")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget-seconds", type=float, default=3300.0,
                        help="start no cell after this many seconds (default 3300)")
    args = parser.parse_args()
    setup = BottleneckSetup()
    data = {task: bottleneck_data(task, setup) for task in ("copy", "reverse")}
    progress = Path(tempfile.mkdtemp(prefix="rnn-bottleneck-")) / "runs.json"
    commit = git_commit()  # the code that runs, before anything can change
    runs, skipped, start, cpu = [], [], time.perf_counter(), time.process_time()
    for task, hidden, steps in GRID:
        if time.perf_counter() - start > args.budget_seconds:
            skipped.append({"task": task, "hidden": hidden, "steps": list(steps)})
            continue
        for seed in args.seeds:
            begin = time.perf_counter()
            runs.extend(train_and_score(task, hidden, steps, seed, setup, data=data[task]))
            now = time.perf_counter()
            print(f"{task:<8} H={hidden:<4} steps={max(steps):<5} seed={seed}: "
                  f"{now - begin:6.1f} s (total {now - start:.0f} s)", flush=True)
            progress.write_text(json.dumps(runs))  # a crash keeps what was done
    record = {
        "kind": "rnn-bottleneck", "name": "sweep", "command": command_line(),
        "git": commit, "hardware": hardware_info("cpu"),
        "config": setup.as_dict(), "seeds": args.seeds,
        "grid": [{"task": t, "hidden": h, "steps": list(s)} for t, h, s in GRID],
        "skipped": skipped, "budget_seconds": args.budget_seconds,
        "wall_seconds": time.perf_counter() - start, "cpu_seconds": time.process_time() - cpu,
        "runs": runs,
    }
    path = write_record(args.results, "rnn-bottleneck", "sweep", record)
    print(f"wrote {path} ({len(runs)} scored runs, torch threads {torch.get_num_threads()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
