"""Every number the README quotes from a run is the one its record in results/ holds.

Each quote is rebuilt here from the record, formatted as the README prints it, and must
appear in the README (white space folded): a record or a sentence that drifts fails.
"""

from __future__ import annotations

import json
import re
import statistics
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


def speed_quotes() -> list[tuple[str, str]]:
    """The README's speed table, from the records it names."""
    peers = record("peers-20261206T074956Z.json")
    fp32 = peers["precisions"]["fp32"]
    engines = {row["name"].split(", ")[0] + ", " + row["name"].split(", ")[1]: row
               for row in record("engines-20261206T154755Z.json")["rows"]}
    beam_ct2 = engines["val beam 4, course vs CTranslate2 float32"]
    static = engines["val greedy, course fast vs transformers generate"]
    compiled = engines["val greedy, course compiled vs transformers generate"]
    compiled_eager = engines["val greedy, course vs course compiled"]
    compiled_ct2 = engines["val greedy, course compiled vs CTranslate2 float32"]
    beside = engines["val greedy, course fast after CTranslate2 ran in its process vs before"]
    int8 = engines["val beam 4, course int8 vs CTranslate2 int8"]
    int8_bleu = engines["val beam 4, course vs course int8"]
    (in_one_process,) = [row for row in record("engines-20261206T075116Z.json")["rows"]
                         if row["name"].startswith("val beam 4, course vs CTranslate2 float32")]
    (regional,) = [row for row in record("bench-20261206T091337Z.json")["table"]
                   if "regional torch.compile" in row["name"]]
    return [
        ("bf16 emulated", f"({peers['bf16']['product_speedup']:.2f}x fp32's speed"),
        ("vs Marian", f"| `MarianMTModel` | {fp32['marian']['ratio']:.2f} | 1.3 |"),
        ("--fast vs Marian", f"`train --fast` | `MarianMTModel` | {fp32['fast']['ratio']:.2f} |"),
        ("vs nn.Transformer", f"| `nn.Transformer` | {fp32['nn.Transformer']['ratio']:.2f} |"),
        ("MFU", f"matmul rate | {fp32['mfu']:.0%} |"),
        ("beam vs CTranslate2", f"| CTranslate2 float32 | {beam_ct2['ratio']:.2f} | 0.6 |"),
        ("static greedy vs generate", f"static cache | `generate` | {static['ratio']:.2f} | 1.0 |"),
        ("compiled vs generate",
         f"its step compiled | `generate` | {compiled['ratio']:.2f} | 1.0 |"),
        ("compiled vs eager", f"its first batch took {compiled['warmup_ours']:.0f} s) makes it "
                              f"{1 / compiled_eager['ratio']:.2f}x as fast"),
        ("compiled vs CTranslate2", f"{1 / compiled_ct2['ratio']:.1f}x as fast as that "
                                    f"({compiled_ct2['ratio']:.2f})"),
        ("CTranslate2 beside", f"took {1 / beside['ratio']:.2f}x as long once CTranslate2 had "
                               f"run beside it ({beside['ratio']:.2f}; two passes each, "
                               f"{beside['passes_before'][0]:.2f} and "
                               f"{beside['passes_before'][1]:.2f} s before, "
                               f"{beside['passes_after'][0]:.2f} and "
                               f"{beside['passes_after'][1]:.2f} s after)"),
        ("in one process", f"put beam 4 at {in_one_process['ratio']:.2f} of"),
        ("int8 vs CTranslate2 int8", f"| CTranslate2 int8 | {int8['ratio']:.2f} | 0.8 |"),
        ("int8 on one thread", f"(its int8 on {int8['threads_reference']})"),
        ("regional compile", f"| the same step, eager | {regional['ratio']:.2f} | 1.0 |"),
        ("int8 BLEU", f"({int8_bleu['bleu_reference']:.2f} against "
                      f"{int8_bleu['bleu_ours']:.2f}, beam 4)"),
    ]


PLAN = "small-steps-3seeds"


def ledger() -> list[dict]:
    return [json.loads(line) for line in
            (ROOT / "results" / "test_reads.jsonl").read_text().splitlines() if line]


def plan_reads() -> list[tuple[dict, dict, dict]]:
    """The plan's test reads, by seed: (ledger line, the protocol record it names, the train
    record of that protocol's run folder)."""
    trains = [record(path.name) for path in (ROOT / "results").glob("train-small-*.json")]
    reads = []
    for entry in sorted((e for e in ledger() if e.get("plan") == PLAN),
                        key=lambda e: e["system"]):
        protocol = record(Path(entry["protocol"]).name)
        (train,) = [t for t in trains if t["out_dir"].endswith("/" + protocol["run"])]
        reads.append((entry, protocol, train))
    return reads


def plan_quotes() -> list[tuple[str, str]]:
    """The README's table of the plan's seeds and their mean ± sd, from the ledger and the
    records its lines name."""
    rows, bleus = [], []
    for entry, protocol, run in plan_reads():
        test, chosen = protocol["test"], protocol["chosen"]
        low, high = test["bleu_95"]
        threads = run["hardware"]["torch_threads"]
        rows.append((f"{entry['system']}'s row", (
            f"| {run['config']['train']['seed']} | {threads} thread{'s' * (threads > 1)} of an "
            f"{run['hardware']['device_name']} | {run['wall_seconds'] / 60:.0f} | `{chosen}` "
            f"| {protocol['variants'][chosen]['bleu']:.2f} | **{test['bleu']:.2f}** "
            f"({low:.2f}–{high:.2f}) | {test['chrf']:.2f} |")))
        assert test["bleu"] == entry["bleu"], "the ledger's score is the protocol's"
        bleus.append(test["bleu"])
    if len(bleus) == 3:
        rows.append(("the plan's mean ± sd", f"sacreBLEU {statistics.mean(bleus):.2f} ± "
                                              f"{statistics.stdev(bleus):.2f} on test_2016_flickr"))
    return rows


ALL_QUOTES = quotes() + plan_quotes() + speed_quotes()


@pytest.mark.parametrize(("what", "text"), ALL_QUOTES, ids=[q[0] for q in ALL_QUOTES])
def test_the_readme_quotes_the_record(what, text):
    readme = re.sub(r"\s+", " ", (ROOT / "README.md").read_text(encoding="utf-8"))
    assert re.sub(r"\s+", " ", text) in readme, f"README: {what} should read {text!r}"


def test_each_seed_trained_the_plan_s_recipe_and_all_three_were_read():
    reads = plan_reads()
    assert [entry["system"] for entry, _, _ in reads] == ["seed-0", "seed-1", "seed-2"]
    for entry, protocol, run in reads:
        seed = int(entry["system"].removeprefix("seed-"))
        assert run["command"] == ("transformer-book train --config configs/small.toml --out "
                                  f"runs/small-seed-{seed} --seed {seed} --fast --quiet")
        assert (run["fast"], run["steps"], run["stop_reason"]) == (True, 2400, "max_steps")
        assert run["config"]["train"]["max_minutes"] is None, "counted in steps"
        assert (run["precision"], run["config"]["train"]["seed"]) == ("fp32", seed)
        assert protocol["run"] == f"runs/small-seed-{seed}"


def test_every_test_score_the_readme_quotes_is_in_the_ledger():
    """A test score the README quotes is a ledger line (one read before the ledger is
    marked as such, and the README says it was)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for entry in ledger():
        if f"{entry['bleu']:.2f}" in readme and entry["before_ledger"]:
            assert "before the ledger" in readme
    quoted = {f"{e['bleu']:.2f}" for e in ledger()}
    assert {"40.33", "36.46", "39.76", "39.08", "41.04", "41.07", "40.54"} <= quoted
