"""Record chapter 02's RNN-bottleneck sweep: state size H x training steps x task, 3 seeds.

    OMP_NUM_THREADS=1 nice -n 10 python scripts/record_rnn_bottleneck.py --results results

Each run trains :class:`~transformer_book.baselines.seq2seq.Seq2SeqGRU` without attention
on chapter 02's copy or reverse data (:func:`transformer_book.toy.bottleneck.bottleneck_data`)
and scores it teacher forced and greedy, per length and per output position
(:func:`~transformer_book.toy.bottleneck.train_and_score`). A run of 3,000 steps is also
scored after 300 and 1,000, which is what shorter runs of the same seed compute. Runs go to
``--workers`` processes (one thread each) in :data:`GRID`'s order, most important first; no
run starts once ``--budget-seconds`` have passed. The record
(``results/rnn-bottleneck-sweep-<UTC time>.json``) is rewritten after every finished run, so
it holds all of them even if the sweep is stopped; its ``status`` says whether the grid was
finished. ``--only reverse:32`` runs some cells alone (in a second process, say); chapter 02
takes each run (task, H, steps, seed) from the newest record that holds it. H = 512 for
3,000 steps (about 15 minutes per seed on one idle thread) is left out.
Chapter 02 reads the newest record and reruns seed 0 of two cells live.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor, as_completed

from transformer_book.toy.bottleneck import BottleneckSetup, bottleneck_data, train_and_score
from transformer_book.util.files import atomic_write_json
from transformer_book.util.records import command_line, git_commit, hardware_info, write_record

#: (task, hidden size, step counts scored in one run), in order of importance: the sweep
#: stops starting cells once ``--budget-seconds`` have passed and records which it skipped.
GRID = (
    ("copy", 128, (300,)),
    ("reverse", 128, (300, 1000, 3000)),
    ("reverse", 32, (300, 1000, 3000)),
    ("reverse", 512, (300,)),
    ("copy", 32, (300,)),
    ("copy", 512, (300,)),
)


def _job(task: str, hidden: int, steps: tuple[int, ...], seed: int, setup: BottleneckSetup
         ) -> tuple[list[dict], float]:
    """One seed of one cell, in a worker process: its scored runs and its CPU seconds."""
    cpu = time.process_time()
    runs = train_and_score(task, hidden, steps, seed, setup, data=bottleneck_data(task, setup))
    return runs, time.process_time() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="results", help="records folder")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--workers", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--budget-seconds", type=float, default=2700.0,
                        help="start no run after this many seconds (default 2700)")
    parser.add_argument("--only", nargs="+", metavar="TASK:H", default=None,
                        help="run only these cells of the grid, e.g. reverse:32")
    parser.add_argument("--max-steps", type=int, default=None,
                        help="leave out the step counts above this one (e.g. 1000)")
    args = parser.parse_args()
    setup = BottleneckSetup()
    limit = args.max_steps or max(max(s) for _, _, s in GRID)
    grid = [(t, h, tuple(n for n in s if n <= limit)) for t, h, s in GRID
            if args.only is None or f"{t}:{h}" in args.only]
    grid = [(t, h, s) for t, h, s in grid if s]
    if not grid:
        parser.error(f"--only: expected cells of the grid such as reverse:32, got {args.only}")
    jobs = [(t, h, s, seed) for t, h, s in grid for seed in args.seeds]  # in GRID's order
    record = {
        "kind": "rnn-bottleneck", "name": "sweep", "command": command_line(),
        "git": git_commit(), "hardware": hardware_info("cpu"), "workers": args.workers,
        "config": setup.as_dict(), "seeds": args.seeds,
        "grid": [{"task": t, "hidden": h, "steps": list(s)} for t, h, s in grid],
        "budget_seconds": args.budget_seconds, "status": "running", "jobs": len(jobs),
        "jobs_done": 0, "wall_seconds": 0.0, "cpu_seconds": 0.0, "runs": [],
    }
    path = write_record(args.results, "rnn-bottleneck", "sweep", record)
    start = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        futures = {pool.submit(_job, *job, setup): job for job in jobs}
        for future in as_completed(futures):
            if future.cancelled():
                continue
            runs, cpu = future.result()
            task, hidden, steps, seed = futures[future]
            record["runs"].extend(runs)
            record["jobs_done"] += 1
            record["cpu_seconds"] += cpu
            record["wall_seconds"] = time.perf_counter() - start
            print(f"{task:<8} H={hidden:<4} steps={max(steps):<5} seed={seed}: {cpu:6.1f} CPU s "
                  f"(wall {record['wall_seconds']:.0f} s)", flush=True)
            if record["wall_seconds"] > args.budget_seconds:
                for pending in futures:
                    pending.cancel()  # runs not yet started; those running finish
            atomic_write_json(path, record)  # the record holds every finished run at all times
    record["status"] = "complete" if record["jobs_done"] == len(jobs) else "budget spent"
    atomic_write_json(path, record)
    print(f"wrote {path}: {record['jobs_done']} of {len(jobs)} runs, {record['status']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
