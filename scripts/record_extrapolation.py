"""Record chapter 08's extrapolation experiment: per-position accuracy, several seeds.

    OMP_NUM_THREADS=1 python scripts/record_extrapolation.py --seeds 0 1 2 3 4 --results results

For each positional scheme (none, learned, sinusoidal) and seed, one
:class:`transformer_book.toy.positions.PositionProbe` of the chapter's setting
(:data:`transformer_book.toy.positions.EXTRAPOLATION`) is trained on the same sequences of 3
to 16 tokens, and its accuracy is measured at every position of fresh 64-token sequences.
The seed sets the initial weights and the order of the batches; the data are fixed. The
record ``results/extrapolation-positions-<UTC time>.json`` holds every run's per-position
accuracy, its mean over the trained positions (2 to 15) and the unseen ones (16 to 63), the
spread of both per scheme, the setting, the command, the hardware and the commit.
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from transformer_book.toy.positions import (
    EXTRAPOLATION,
    accuracy_by_position,
    make_shift_task,
    train_extrapolation_probe,
)
from transformer_book.util.records import command_line, git_commit, hardware_info, write_record
from transformer_book.util.spread import seed_spread

KINDS = ("none", "learned", "sinusoidal")


def position_means(per_position: list[float], train_max: int) -> dict[str, float]:
    """Mean accuracy over the labelled positions below ``train_max`` and from it on."""
    seen = [a for t, a in enumerate(per_position) if t < train_max and not math.isnan(a)]
    unseen = [a for t, a in enumerate(per_position) if t >= train_max]
    return {"seen_mean": sum(seen) / len(seen), "unseen_mean": sum(unseen) / len(unseen)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--results", default="results")
    args = parser.parse_args()
    e = EXTRAPOLATION
    examples = make_shift_task(e["train_examples"], e["train_min_len"], e["train_max_len"],
                               shift=e["shift"], vocab_size=e["vocab_size"], seed=e["data_seed"])
    runs, started = [], time.perf_counter()
    for kind in KINDS:
        for seed in args.seeds:
            began = time.perf_counter()
            model, losses = train_extrapolation_probe(kind, seed, examples)
            accuracy = accuracy_by_position(model, e["eval_length"], e["eval_examples"],
                                            shift=e["shift"]).tolist()
            runs.append({"positions": kind, "seed": seed, "per_position": accuracy,
                         **position_means(accuracy, e["train_max_len"]),
                         "final_loss": sum(losses[-20:]) / 20,
                         "seconds": time.perf_counter() - began})
            print(f"{kind:>10} seed {seed}: seen {runs[-1]['seen_mean']:.3f}, unseen "
                  f"{runs[-1]['unseen_mean']:.3f}, {runs[-1]['seconds']:.1f} s", flush=True)
    summary = {kind: {name: seed_spread([r[name] for r in runs if r["positions"] == kind])
                      for name in ("seen_mean", "unseen_mean")} for kind in KINDS}
    record = {
        "experiment": "extrapolation-positions", "config": EXTRAPOLATION, "kinds": list(KINDS),
        "seeds": args.seeds, "runs": runs, "summary": summary, "command": command_line(),
        "hardware": hardware_info(torch.device("cpu")), "git": git_commit(),
        "seconds": time.perf_counter() - started,
    }
    print(write_record(args.results, "extrapolation", "positions", record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
