"""Choose a trained run's checkpoint rule on val, freeze it, then score test once.

    python scripts/cpu_protocol.py --run runs/small --plan results/plans/NAME.toml --system seed-0
    python scripts/cpu_protocol.py --run runs/small --against runs/small-dropout0.2 --plan ...

The test split is read only under ``--plan``: a plan (:mod:`transformer_book.run.plans`)
committed before the run's training began, naming these checkpoint rules and ``--system``
among its systems, whose split the ledger shows unread for that system. The read joins
``results/test_reads.jsonl`` and its translations are kept in ``results/translations/``.

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
Each evaluation runs in this process (:func:`transformer_book.inference.evaluate`) and
writes its own ``evaluate`` record, the one ``transformer-book evaluate`` writes.

``--against RUN`` (repeatable) adds the three rules of other runs of the same data, a
configuration tried earlier, to the choice on val: the candidates are then named
``folder: rule``. If an earlier run wins with checkpoints whose test score an earlier
protocol took, test is not read again: the record says so and names that score.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

from transformer_book.data.multi30k import load_multi30k
from transformer_book.inference.evaluation import evaluate, write_evaluation
from transformer_book.inference.significance import compare_systems
from transformer_book.inference.trained import load_trained
from transformer_book.run.plans import (
    LEDGER,
    checkpoint_rule,
    ledger_entries,
    load_plan,
    open_test_read,
    repository_root,
    require_plan_precedes,
    require_readable,
)
from transformer_book.util.records import git_commit, read_records, write_record
from transformer_book.util.timing import Stopwatch
from transformer_book.util.validation import BookError, require

# name -> which checkpoints (load_trained's select and average); the first wins ties
VARIANTS = {name: checkpoint_rule(name) for name in ("last-5", "best-val", "best-val-5")}
TEST_SPLIT = "test_2016_flickr"


def score(run: str, split: str, rule: dict, results: str) -> dict:
    """One evaluation of ``run``'s checkpoints chosen by ``rule`` (beam 4, α 0.6), in this
    process: its ``evaluate`` record is written into ``results`` (its ``path`` comes back),
    and its scores (with their signatures and 95% bootstrap intervals), the checkpoints'
    ``selection`` and the ``hypotheses`` come back."""
    with Stopwatch() as wall:
        trained = load_trained(run, select=rule["select"], average=rule["average"])
        evaluation = evaluate(trained, split=split, beam_size=4, alpha=0.6)
    path = write_evaluation(results, evaluation, trained, sys.argv, wall.seconds)
    scores = evaluation.scores
    return {"path": path, "bleu": scores.bleu, "signature": scores.bleu_signature,
            "chrf": scores.chrf,
            "chrf_signature": scores.chrf_signature, "ter": scores.ter,
            "ter_signature": scores.ter_signature, "bleu_95": evaluation.bleu_interval,
            "chrf_95": evaluation.chrf_interval, "selection": trained.selection,
            "hypotheses": evaluation.hypotheses}


def candidates(run: str, against: list[str]) -> dict[str, tuple[str, dict]]:
    """name -> (run folder, checkpoint rule), in tie-breaking order: ``run``'s rules
    first, named by rule alone when there is no ``--against``."""
    runs = [run, *against]
    names = {r: Path(r).name for r in runs}
    if len(set(names.values())) < len(runs):  # two folders of one name: use the paths
        names = {r: r for r in runs}
    return {(f"{names[r]}: {name}" if against else name): (r, rule)
            for r in runs for name, rule in VARIANTS.items()}


def choose_on_val(options: dict[str, tuple[str, dict]], results: str
                  ) -> tuple[str, dict, str]:
    """Score every candidate on val; the best BLEU (ties: the earlier) and its comparison
    with the runner-up (paired bootstrap and sacreBLEU's paired test)."""
    val_refs = [t for _, t in load_multi30k("val")]
    scored, texts = {}, {}
    for name, (run, rule) in options.items():
        found = score(run, "val", rule, results)
        texts[name] = found["hypotheses"]
        scored[name] = {"run": run, "bleu": found["bleu"], "chrf": found["chrf"],
                        "selection": found["selection"], "signature": found["signature"]}
        print(f"val {name}: BLEU {found['bleu']:.2f}, chrF++ {found['chrf']:.2f}")
    order = list(options)
    chosen = max(order, key=lambda n: (scored[n]["bleu"], -order.index(n)))
    runner_up = max((n for n in order if n != chosen), key=lambda n: scored[n]["bleu"])
    versus = compare_systems(texts[runner_up], texts[chosen], val_refs,
                             names=(runner_up, chosen))
    return chosen, scored, str(versus)


def earlier_test(results: str, selection: dict) -> dict | None:
    """The newest protocol record whose test score is of the checkpoints ``selection``
    names (matched by the evaluate record's selection: the steps and their val loss, which
    do not depend on where the run folder is now)."""
    done = [r for r in read_records(results, "protocol")
            if r.get("test") and r["variants"][r["chosen"]]["selection"] == selection]
    return done[-1] if done else None


def plan_precedes(plan, run: str) -> None:
    """Refuse ``plan`` unless it came before ``run`` started, by the run's start manifest
    (:func:`transformer_book.run.plans.require_plan_precedes`)."""
    require_plan_precedes(plan, run, f"the run {run}")


def _relative(path: str | Path, root: Path) -> str:
    """``path`` from the repository's top folder, as the ledger names files."""
    return Path(os.path.relpath(Path(path).resolve(), root.resolve())).as_posix()


def main() -> int:
    try:
        return protocol()
    except BookError as error:  # a refusal: one line, exit 2
        print(f"cpu_protocol: error: {error}", file=sys.stderr)
        return 2


def protocol() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", default="runs/small", help="run folder (default runs/small)")
    parser.add_argument("--against", action="append", default=[], metavar="RUN",
                        help="an earlier run folder whose rules join the choice on val")
    parser.add_argument("--results", default="results", help="records folder")
    parser.add_argument("--plan", required=True, type=Path,
                        help="the plan (results/plans/NAME.toml) committed before training")
    parser.add_argument("--system", required=True, help="which of the plan's systems this is")
    args = parser.parse_args()
    plan = load_plan(args.plan)
    ledger = repository_root(args.plan) / LEDGER
    require_readable(plan, args.system, TEST_SPLIT, ledger)
    require(list(plan.fields["checkpoint_rules"]) == list(VARIANTS),
            f"--plan {args.plan} checkpoint_rules", f"this protocol's rules {list(VARIANTS)}",
            plan.fields["checkpoint_rules"])
    require((plan.fields["beam"], plan.fields["alpha"]) == (4, 0.6), f"--plan {args.plan}",
            "this protocol's decoding (beam 4, alpha 0.6)",
            f"beam {plan.fields['beam']}, alpha {plan.fields['alpha']}")
    for folder in (args.run, *args.against):
        plan_precedes(plan, folder)
    options = candidates(args.run, args.against)
    chosen, scored, versus = choose_on_val(options, args.results)
    run, rule = options[chosen]
    frozen = {"kind": "protocol", "run": run, "runs": [args.run, *args.against],
              "split_for_choice": "val", "decoding": {"beam_size": 4, "alpha": 0.6},
              "variants": scored, "chosen": chosen, "chosen_vs_runner_up_on_val": versus,
              "test": None}
    before = earlier_test(args.results, scored[chosen]["selection"]) if run != args.run else None
    if before is not None:  # a configuration tried before: its protocol read test already
        frozen["test_already_scored"] = {"protocol_written": before["written"].isoformat(),
                                         "bleu": before["test"]["bleu"]}
        path = write_record(args.results, "protocol", "small-frozen", frozen)
        print(f"frozen on val: {chosen}, a run tried before; test is not read again (its "
              f"test BLEU {before['test']['bleu']:.2f} stands); record {path}")
        return 0
    frozen_path = write_record(args.results, "protocol", "small-frozen", frozen)
    print(f"frozen on val: {chosen} ({frozen_path}); now test, once")
    root = repository_root(args.plan)
    with open_test_read(plan, args.system, TEST_SPLIT, root) as read:  # the one door
        test = score(run, TEST_SPLIT, rule, args.results)
        frozen["test"] = {"split": TEST_SPLIT, "bleu": test["bleu"],
                          "signature": test["signature"], "bleu_95": list(test["bleu_95"]),
                          "chrf": test["chrf"], "chrf_signature": test["chrf_signature"],
                          "chrf_95": list(test["chrf_95"]), "ter": test["ter"],
                          "ter_signature": test["ter_signature"],
                          "frozen_record": str(frozen_path)}
        path = write_record(args.results, "protocol", "small", frozen)
        # the ledger names the evaluate record (as `transformer-book evaluate` and
        # gpu_run.py do) and, beside it, this protocol's record; written before any score
        # is shown, or the read is refused and its records go
        scores = {key: frozen["test"][key]
                  for key in ("bleu", "signature", "bleu_95", "chrf", "ter")}
        kept = read.record({**scores, "protocol": _relative(path, root)}, test["hypotheses"],
                           commit=git_commit(root).get("commit"),
                           record=_relative(test["path"], root), scored=[test["path"], path],
                           rule=chosen, beam=4, alpha=0.6)
    print(f"ledger: {ledger}; translations: {kept}")
    low, high = test["bleu_95"]
    print(f"test {chosen}: BLEU {test['bleu']:.2f} [95% {low:.2f}, {high:.2f}] "
          f"[{test['signature']}], chrF++ {test['chrf']:.2f}; record {path}")
    reads = [e["bleu"] for e in ledger_entries(ledger)
             if e.get("plan") == plan.name and e.get("split") == TEST_SPLIT]
    if plan.fields.get("seeds") and len(reads) == len(plan.systems) > 1:  # the plan's report
        print(f"plan {plan.name}: all {len(reads)} seeds read; test BLEU mean "
              f"{statistics.mean(reads):.2f} ± {statistics.stdev(reads):.2f} (sd, n - 1)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
