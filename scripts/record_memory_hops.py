"""Record memory networks of 1, 2 and 3 hops on two-supporting-fact stories, several seeds.

    OMP_NUM_THREADS=1 python scripts/record_memory_hops.py --seeds 0 1 2 3 4 --results results

Each seed trains one network per hop count with chapter 04's configuration
(:class:`transformer_book.toy.hops.HopsConfig`) on the same stories, and the record
``results/memory-hops-<UTC time>.json`` holds every run (answer accuracy, where the first and
the last hop look, seconds), the spread of each metric per hop count, the configuration, the
command, the hardware and the commit. Chapter 04 reads the newest record and runs one seed
live.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import torch

from transformer_book.toy.hops import HopsConfig, hops_data, run_hops
from transformer_book.util.records import command_line, git_commit, hardware_info, write_record
from transformer_book.util.spread import seed_spread

HOPS = (1, 2, 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--results", default="results")
    args = parser.parse_args()
    config = HopsConfig()
    data = hops_data(config)
    runs, started = [], time.perf_counter()
    for hops in HOPS:
        for seed in args.seeds:
            began = time.perf_counter()
            _, metrics = run_hops(hops, seed, config, data)
            runs.append({"hops": hops, "seed": seed, **metrics,
                         "seconds": time.perf_counter() - began})
            print(f"{hops} hop(s), seed {seed}: " + ", ".join(
                f"{name} {value:.3f}" for name, value in runs[-1].items()
                if name not in ("hops", "seed")), flush=True)
    summary = {
        str(hops): {name: seed_spread([r[name] for r in runs if r["hops"] == hops])
                    for name in ("answer_accuracy", "first_hop_on_pickup",
                                 "last_hop_on_answer")}
        for hops in HOPS
    }
    record = {
        "experiment": "memory-hops", "config": dataclasses.asdict(config), "hops": list(HOPS),
        "seeds": args.seeds, "data_seed": 0, "runs": runs, "summary": summary,
        "command": command_line(), "hardware": hardware_info(torch.device("cpu")),
        "git": git_commit(), "seconds": time.perf_counter() - started,
    }
    print(write_record(args.results, "memory", "hops", record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
