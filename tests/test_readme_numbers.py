"""Every number the README quotes from a run is the one its record in results/ holds.

Each quote is rebuilt here from the record, formatted as the README prints it, and must
appear in the README (white space folded): a record or a sentence that drifts fails.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def record(name: str) -> dict:
    return json.loads((ROOT / "results" / name).read_text(encoding="utf-8"))


def lowest(train: dict) -> dict:
    return min(train["evals"], key=lambda e: e["val_loss"])


def quotes() -> list[tuple[str, str]]:
    """``(what, the text the README must hold)``, from the records."""
    protocol = record("protocol-small-20261202T204230Z.json")
    test, rules = protocol["test"], protocol["variants"]
    low, high = test["bleu_95"]
    run = record("train-small-20261202T203924Z.json")  # dropout 0.2, the record's run
    bpe = record("train-small-20261203T001632Z.json")  # BPE-dropout 0.1 on top of it
    p03 = record("protocol-small-20261202T014709Z.json")
    d03 = record("train-small-20261202T013613Z.json")
    first = record("train-small-20261129T232615Z.json")
    longer = record("train-small-20261201T174727Z.json")
    first_test = record("evaluate-small-test_2016_flickr-20261129T232806Z.json")
    longer_test = record("evaluate-small-test_2016_flickr-20261201T175424Z.json")
    best = rules["best-val"]["selection"]
    return [
        ("test BLEU", f"sacreBLEU {test['bleu']:.2f} on test_2016_flickr"),
        ("its interval", f"{low:.2f}–{high:.2f}"),
        ("its signature", test["signature"]),
        ("chrF++ and TER", f"chrF++ {test['chrf']:.2f}, TER {test['ter']:.2f}"),
        ("the chosen rule's val BLEU", f"(val BLEU {rules[protocol['chosen']]['bleu']:.2f})"),
        ("best-val's checkpoint", f"step {best['chosen_step']:,} "
                                  f"({best['chosen_val_loss']:.3f}; val BLEU "
                                  f"{rules['best-val']['bleu']:.2f})"),
        ("the run's steps", f"bought {run['steps']:,} steps"),
        ("its lowest val loss", f"at step {lowest(run)['step']:,} "
                                f"({lowest(run)['val_loss']:.3f})"),
        ("the BPE-dropout run", f"({bpe['steps']:,} steps: val loss still falling at its end, "
                                f"lowest {lowest(bpe)['val_loss']:.3f}; last greedy val BLEU "
                                f"{bpe['evals'][-1]['bleu']:.2f} against "
                                f"{run['evals'][-1]['bleu']:.2f})"),
        ("the dropout-0.3 read", f"scored {p03['test']['bleu']:.2f} ({d03['steps']:,} steps"),
        ("the first dropout-0.1 read", f"{first_test['bleu']:.2f} ({first['steps']:,} steps)"),
        ("the longer run's read", f"{longer_test['bleu']:.2f} ({longer['steps']:,} steps, past "
                                  f"its lowest val loss at step {lowest(longer)['step']:,})"),
    ]


@pytest.mark.parametrize(("what", "text"), quotes(), ids=[q[0] for q in quotes()])
def test_the_readme_quotes_the_record(what, text):
    readme = re.sub(r"\s+", " ", (ROOT / "README.md").read_text(encoding="utf-8"))
    assert re.sub(r"\s+", " ", text) in readme, f"README: {what} should read {text!r}"


def test_every_test_score_the_readme_quotes_is_in_the_ledger():
    """A test score the README quotes is a ledger line (one read before the ledger is
    marked as such, and the README says it was)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ledger = [json.loads(line) for line in
              (ROOT / "results" / "test_reads.jsonl").read_text().splitlines() if line]
    for entry in ledger:
        if f"{entry['bleu']:.2f}" in readme and entry["before_ledger"]:
            assert "before the ledger" in readme
    quoted = {f"{e['bleu']:.2f}" for e in ledger}
    assert {"40.33", "36.46", "39.76", "39.08"} <= quoted
