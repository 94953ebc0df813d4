"""scripts/cpu_protocol.py: the checkpoint rule (and, with --against, the run) is chosen on
val, frozen, and only then is test read, once; a run that already had its test score is
never scored on test again. ``score`` (one in-process evaluation) is replaced by a stand-in
that returns hypotheses and scores (the real one is ``inference.evaluate``, tested in
test_evaluate.py), so every call, and every split it read, is seen; one test runs the
real ``score`` on a tiny run."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from plan_utils import write_plan

from tests.test_cli import run  # noqa: F401 (the fixture: a tiny trained run)
from transformer_book.inference import evaluate, load_trained

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def protocol(monkeypatch, tmp_path):
    spec = importlib.util.spec_from_file_location(
        "cpu_protocol", REPO_ROOT / "scripts" / "cpu_protocol.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    refs = {"val": ["a man runs .", "two dogs play .", "a red car ."],
            "test_2016_flickr": ["a girl sings .", "the sun sets ."]}
    monkeypatch.setattr(module, "load_multi30k",
                        lambda split: [("de", r) for r in refs[split]])
    calls = []

    def score(folder, split, rule, results):
        calls.append((folder, split, (rule["select"], rule["average"])))
        bleu = BLEU[(Path(folder).name, (rule["select"], rule["average"]), split)]
        lines = refs[split] if bleu > 50 else ["a man ."] * len(refs[split])
        steps = [100 * len(folder) + (rule["average"] or 0) + len(rule["select"])]  # one each
        path = Path(results) / f"evaluate-{Path(folder).name}-{split}-{len(calls)}.json"
        return {"path": path, "bleu": bleu, "chrf": bleu + 10, "ter": 50.0, "signature": "sig",
                "chrf_signature": "csig", "ter_signature": "tsig", "bleu_95": (bleu - 1, bleu + 1),
                "chrf_95": (bleu + 9, bleu + 11), "hypotheses": lines,
                "selection": {"averaged_steps": steps, "run": Path(folder).name}}

    monkeypatch.setattr(module, "score", score)
    # the runs are made up: each started after the plan (the real guard: one test below)
    monkeypatch.setattr(module, "plan_precedes", lambda plan, folder: None)
    return module, calls, tmp_path / "results"


PLAN = f"""\
name = "protocol-demo"
split = "test_2016_flickr"
systems = {[f"s{n}" for n in range(1, 100)]}
val_criterion = "val BLEU, beam 4, alpha 0.6"
checkpoint_rules = ["last-5", "best-val", "best-val-5"]
alpha = 0.6
beam = 4
stopping_rule = "max_minutes = 90"
seeds = [0]
"""


@pytest.fixture
def plan(tmp_path):
    """A plan committed in a repository of its own, where its ledger is kept."""
    return write_plan(tmp_path / "repo", "protocol-demo", PLAN)


LAST, BEST, BEST5 = ("last", 5), ("best-val", None), ("best-val", 5)
BLEU = {("new", LAST, "val"): 41.0, ("new", BEST, "val"): 40.0, ("new", BEST5, "val"): 41.0,
        ("new", LAST, "test_2016_flickr"): 60.0,
        ("old", LAST, "val"): 40.9, ("old", BEST, "val"): 39.6, ("old", BEST5, "val"): 40.9,
        ("old", LAST, "test_2016_flickr"): 60.0,
        ("better", LAST, "val"): 45.0, ("better", BEST, "val"): 30.0,
        ("better", BEST5, "val"): 30.0, ("better", LAST, "test_2016_flickr"): 60.0}


SYSTEMS = iter(f"s{n}" for n in range(1, 99))  # s99 is left for a refusal


def _run(module, monkeypatch, results, *args, plan=None):
    """Run the script (under ``plan``, each run as the next of its systems); returns the
    protocol records it wrote (the frozen one first)."""
    before = set(results.glob("protocol-*.json"))
    planned = [] if plan is None else ["--plan", str(plan), "--system", next(SYSTEMS)]
    monkeypatch.setattr(sys, "argv", ["cpu_protocol.py", "--results", str(results), *args,
                                      *planned])
    assert module.main() == 0
    new = sorted(set(results.glob("protocol-*.json")) - before,
                 key=lambda p: "frozen" not in p.name)
    return [json.loads(p.read_text()) for p in new]


def test_one_run_chooses_a_rule_on_val_then_reads_test_once(protocol, monkeypatch, plan):
    module, calls, results = protocol
    frozen, final = _run(module, monkeypatch, results, "--run", "runs/new", plan=plan)
    assert [c[1] for c in calls] == ["val"] * 3 + ["test_2016_flickr"]
    assert calls[-1] == ("runs/new", "test_2016_flickr", LAST)  # the tie goes to last-5
    assert frozen["test"] is None and frozen["chosen"] == "last-5"
    assert final["test"]["bleu"] == 60.0 and set(final["variants"]) == {
        "last-5", "best-val", "best-val-5"}


def test_against_other_runs_the_choice_spans_them_all(protocol, monkeypatch, plan):
    module, calls, results = protocol
    _run(module, monkeypatch, results, "--run", "runs/old", plan=plan)  # its own protocol
    calls.clear()
    _, record = _run(module, monkeypatch, results, "--run", "runs/new", "--against",
                     "runs/better", plan=plan)  # 'better' never had a protocol: test once
    assert [split for _, split, _ in calls] == ["val"] * 6 + ["test_2016_flickr"]
    assert record["chosen"] == "better: last-5" and calls[-1][0] == "runs/better"
    calls.clear()
    _, record = _run(module, monkeypatch, results, "--run", "runs/new", "--against",
                     "runs/old", plan=plan)
    assert record["chosen"] == "new: last-5" and calls[-1][1] == "test_2016_flickr"
    assert list(record["variants"])[:3] == ["new: last-5", "new: best-val", "new: best-val-5"]


def test_the_earlier_test_score_is_found_by_its_checkpoints(protocol, monkeypatch, plan):
    module, calls, results = protocol
    _run(module, monkeypatch, results, "--run", "runs/old", plan=plan)
    BLEU[("new", LAST, "val")] = BLEU[("new", BEST5, "val")] = 40.0
    try:
        calls.clear()
        (record,) = _run(module, monkeypatch, results, "--run", "runs/new", "--against",
                         "runs/old", plan=plan)
    finally:
        BLEU[("new", LAST, "val")] = BLEU[("new", BEST5, "val")] = 41.0
    assert all(split == "val" for _, split, _ in calls)
    assert record["chosen"] == "old: last-5" and record["test"] is None
    assert record["test_already_scored"]["bleu"] == 60.0
    assert json.loads(json.dumps(record["runs"])) == ["runs/new", "runs/old"]


def test_test_is_read_under_a_plan_once_per_system_and_kept(protocol, monkeypatch, plan,
                                                            capsys):
    module, calls, results = protocol
    monkeypatch.setattr(sys, "argv", ["cpu_protocol.py", "--run", "runs/new"])
    with pytest.raises(SystemExit):  # argparse: --plan and --system are required
        module.main()
    _run(module, monkeypatch, results, "--run", "runs/new", plan=plan)
    ledger = plan.parents[2] / "results" / "test_reads.jsonl"
    (entry,) = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert entry["plan"] == "protocol-demo" and entry["bleu"] == 60.0
    # the results folder sits beside the plan's repository here
    assert entry["record"].startswith("../results/evaluate-new-test_2016_flickr-")
    assert entry["protocol"].startswith("../results/protocol-small-")
    kept = plan.parents[2] / entry["translations"]
    assert kept.read_text().splitlines() == ["a girl sings .", "the sun sets ."]
    monkeypatch.setattr(sys, "argv", ["cpu_protocol.py", "--run", "runs/new", "--results",
                                      str(results), "--plan", str(plan), "--system",
                                      entry["system"]])
    calls.clear()
    capsys.readouterr()
    assert module.main() == 2, "a refusal: one line, exit 2"
    assert "once per system" in _one_line(capsys)
    assert calls == [], "refused before anything is scored"
    # a run whose start manifest (copied along with it, whatever its files' times) says it
    # began in 1970, long before the plan: refused by the real guard
    monkeypatch.setattr(module, "plan_precedes", real_plan_precedes)
    monkeypatch.chdir(plan.parents[2])
    Path("runs/new").mkdir(parents=True)
    Path("runs/new/run.json").write_text(json.dumps({"started": 1.0, "commit": "0" * 40,
                                                     "dirty": False}))
    monkeypatch.setattr(sys, "argv", ["cpu_protocol.py", "--run", "runs/new", "--results",
                                      str(results), "--plan", str(plan), "--system", "s99"])
    assert module.main() == 2
    assert "a plan committed before the run runs/new began" in _one_line(capsys)
    assert calls == []


def real_plan_precedes(plan, folder):
    spec = importlib.util.spec_from_file_location(
        "cpu_protocol_real", REPO_ROOT / "scripts" / "cpu_protocol.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.plan_precedes(plan, folder)


def _one_line(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.err.startswith("cpu_protocol: error: ") and captured.err.count("\n") == 1
    return captured.err


def test_a_read_that_cannot_be_entered_is_refused_and_its_records_go(protocol, monkeypatch,
                                                                      plan, capsys):
    """The ledger line comes before the score is printed; when it cannot be written the
    read is refused (exit 2, no score shown) and the test records are removed."""
    from transformer_book.run import plans

    module, calls, results = protocol

    def full_disk(ledger, line):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(plans, "_append", full_disk)
    for path in ("evaluate-new-test_2016_flickr-4.json",):
        (results / path).parent.mkdir(parents=True, exist_ok=True)
        (results / path).write_text("{}")  # what score() would have written
    monkeypatch.setattr(sys, "argv", ["cpu_protocol.py", "--run", "runs/new", "--results",
                                      str(results), "--plan", str(plan), "--system", "s98"])
    capsys.readouterr()
    assert module.main() == 2
    captured = capsys.readouterr()
    assert "the read is refused, not spent" in captured.err
    assert "test last-5" not in captured.out and "BLEU 60" not in captured.out
    assert not (results / "evaluate-new-test_2016_flickr-4.json").exists()
    assert not list(results.glob("protocol-small-2*.json")), "no protocol record with a score"
    assert [c[1] for c in calls].count("test_2016_flickr") == 1


def test_the_last_seed_read_prints_the_plan_s_mean_and_sd(protocol, monkeypatch, tmp_path,
                                                          capsys):
    module, _, results = protocol
    seeds = write_plan(tmp_path / "seeds", "three-seeds", PLAN.replace(
        "protocol-demo", "three-seeds").replace(str([f"s{n}" for n in range(1, 100)]),
                                                "['seed-0', 'seed-1', 'seed-2']").replace(
        "seeds = [0]", "seeds = [0, 1, 2]"))
    for system, bleu in zip(("seed-0", "seed-1", "seed-2"), (60.0, 62.0, 67.0), strict=True):
        BLEU[("new", LAST, "test_2016_flickr")] = bleu
        monkeypatch.setattr(sys, "argv", ["cpu_protocol.py", "--run", "runs/new", "--results",
                                          str(results), "--plan", str(seeds), "--system", system])
        try:
            assert module.main() == 0
        finally:
            BLEU[("new", LAST, "test_2016_flickr")] = 60.0
        report = [line for line in capsys.readouterr().out.splitlines() if "mean" in line]
        assert report == ([] if system != "seed-2" else [
            "plan three-seeds: all 3 seeds read; test BLEU mean 63.00 ± 3.61 (sd, n - 1)"])


@pytest.mark.slow
def test_score_evaluates_in_process_and_writes_the_evaluate_record(run, tmp_path):  # noqa: F811
    """The real ``score``: ``inference.evaluate`` in this process (no command line), its
    record the one ``transformer-book evaluate`` writes."""
    spec = importlib.util.spec_from_file_location(
        "cpu_protocol_real", REPO_ROOT / "scripts" / "cpu_protocol.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    results = tmp_path / "results"
    found = module.score(str(run / "run"), "val", {"select": "last", "average": 2},
                         str(results))
    trained = load_trained(run / "run", average=2)
    expected = evaluate(trained, split="val", beam_size=4, alpha=0.6)
    assert found["hypotheses"] == expected.hypotheses
    assert (found["bleu"], found["chrf"], found["ter"]) == (
        expected.scores.bleu, expected.scores.chrf, expected.scores.ter)
    assert found["bleu_95"] == expected.bleu_interval
    assert found["chrf_95"] == expected.chrf_interval
    assert found["selection"] == trained.selection
    (path,) = results.glob("evaluate-run-val-*.json")
    record = json.loads(path.read_text())
    assert record["kind"] == "evaluate" and record["bleu"] == found["bleu"]
    assert record["decoding"]["beam_size"] == 4 and record["averaged"] == 2
    assert record["num_hypotheses"] == len(expected.hypotheses)
