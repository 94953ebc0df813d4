"""Choose a trained run's checkpoint rule on val, freeze it, then score test once.

    python scripts/cpu_protocol.py --run runs/small --results results

After ``transformer-book train --config configs/small.toml`` (chapter 10's CPU run), the
run folder holds the last ``keep_last`` checkpoints and the ``keep_best`` of lowest val
loss. Which weights to translate with is a choice, so it is made on the validation split:

1. ``last-5``: the average of the last 5 checkpoints (Section 6.1);
2. ``best-val``: the single checkpoint of lowest validation loss;
3. ``best-val-5``: the average of the 5 kept checkpoints nearest it.

Each is scored on val with Section 6.1's decoding (beam 4, α = 0.6); the best val BLEU
wins (ties: the earlier in this list). The choice is written to ``results/`` *before* the
test split is read; then the winner alone is scored on test_2016_flickr, once, with a 95%
bootstrap interval, and the protocol record names every val score beside the test score.
Each evaluation also writes its own ``evaluate`` record, as ``transformer-book evaluate``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from transformer_book.cli import main as cli
from transformer_book.data.multi30k import load_multi30k
from transformer_book.inference.significance import bootstrap_interval, compare_systems
from transformer_book.util.records import read_records, write_record

VARIANTS = {  # name -> evaluate arguments; the first wins ties
    "last-5": ["--select", "last", "--average", "5"],
    "best-val": ["--select", "best-val"],
    "best-val-5": ["--select", "best-val", "--average", "5"],
}
TEST_SPLIT = "test_2016_flickr"


def evaluate(run: str, split: str, extra: list[str], results: str, hypotheses: Path) -> dict:
    """One ``transformer-book evaluate`` (beam 4, α 0.6); its record, newest of its kind."""
    code = cli(["evaluate", "--checkpoint", run, "--split", split, "--beam", "4",
                "--alpha", "0.6", "--results", results, "--hypotheses", str(hypotheses),
                *extra])
    if code != 0:
        raise SystemExit(f"evaluate {split} {' '.join(extra)} failed (exit {code})")
    return read_records(results, "evaluate")[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", default="runs/small", help="run folder (default runs/small)")
    parser.add_argument("--results", default="results", help="records folder")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="protocol-"))
    val_refs = [t for _, t in load_multi30k("val")]
    scored, texts = {}, {}
    for name, extra in VARIANTS.items():
        record = evaluate(args.run, "val", extra, args.results, work / f"{name}.val.txt")
        texts[name] = (work / f"{name}.val.txt").read_text().splitlines()
        scored[name] = {"bleu": record["bleu"], "chrf": record["chrf"],
                        "selection": record["selection"], "signature": record["signature"]}
        print(f"val {name}: BLEU {record['bleu']:.2f}, chrF++ {record['chrf']:.2f}")
    chosen = max(VARIANTS, key=lambda n: (scored[n]["bleu"], -list(VARIANTS).index(n)))
    runner_up = max((n for n in VARIANTS if n != chosen), key=lambda n: scored[n]["bleu"])
    versus = compare_systems(texts[runner_up], texts[chosen], val_refs,
                             names=(runner_up, chosen))
    frozen = {"kind": "protocol", "run": args.run, "split_for_choice": "val",
              "decoding": {"beam_size": 4, "alpha": 0.6}, "variants": scored,
              "chosen": chosen, "chosen_vs_runner_up_on_val": str(versus), "test": None}
    frozen_path = write_record(args.results, "protocol", "small-frozen", frozen)
    print(f"frozen on val: {chosen} ({frozen_path}); now test, once")
    test = evaluate(args.run, TEST_SPLIT, VARIANTS[chosen], args.results,
                    work / f"{chosen}.test.txt")
    hypotheses = (work / f"{chosen}.test.txt").read_text().splitlines()
    refs = [t for _, t in load_multi30k(TEST_SPLIT)]
    low, high = bootstrap_interval(hypotheses, refs)
    chrf_low, chrf_high = bootstrap_interval(hypotheses, refs, metric="chrf")
    frozen["test"] = {"split": TEST_SPLIT, "bleu": test["bleu"], "signature": test["signature"],
                      "bleu_95": [low, high], "chrf": test["chrf"],
                      "chrf_signature": test["chrf_signature"], "chrf_95": [chrf_low, chrf_high],
                      "ter": test["ter"], "ter_signature": test["ter_signature"],
                      "frozen_record": str(frozen_path)}
    path = write_record(args.results, "protocol", "small", frozen)
    print(f"test {chosen}: BLEU {test['bleu']:.2f} [95% {low:.2f}, {high:.2f}] "
          f"[{test['signature']}], chrF++ {test['chrf']:.2f}; record {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
