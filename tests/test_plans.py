"""Plans and the ledger of test reads (transformer_book.run.plans)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from plan_utils import write_plan

from transformer_book.run.plans import (
    LEDGER,
    TRANSLATIONS,
    ledger_entries,
    load_plan,
    record_test_read,
    require_readable,
)
from transformer_book.util.validation import BookError

ROOT = Path(__file__).resolve().parents[1]

PLAN = """\
name = "demo"
split = "test_2016_flickr"
systems = ["seed-0", "seed-1"]
val_criterion = "val BLEU, beam 4"
checkpoint_rules = ["last", "best-val"]
alpha = 0.6
beam = 4
stopping_rule = "max_steps = 100"
seeds = [0, 1]
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return tmp_path


def commit_plan(repo: Path, text: str = PLAN) -> Path:
    return write_plan(repo, "demo", text)


def test_an_uncommitted_plan_is_refused(repo):
    path = write_plan(repo, "demo", PLAN, commit=False)
    with pytest.raises(BookError, match="not committed"):
        load_plan(path)


def test_a_plan_edited_after_its_commit_is_refused(repo):
    path = commit_plan(repo)
    path.write_text(PLAN.replace("alpha = 0.6", "alpha = 1.0"), encoding="utf-8")
    with pytest.raises(BookError, match="uncommitted changes"):
        load_plan(path)


def test_a_plan_missing_a_field_is_refused(repo):
    path = commit_plan(repo, PLAN.replace('stopping_rule = "max_steps = 100"\n', ""))
    with pytest.raises(BookError, match="stopping_rule"):
        load_plan(path)


def test_a_committed_plan_loads_with_the_commit_that_added_it(repo):
    plan = load_plan(commit_plan(repo))
    assert plan.name == "demo" and plan.systems == ("seed-0", "seed-1")
    assert len(plan.commit) == 40, "the commit that added the plan"


def test_each_system_reads_its_split_once_and_the_read_is_kept(repo):
    plan = load_plan(commit_plan(repo))
    hypotheses = ["A dog runs.", "Two men sit."]
    kept = record_test_read(plan, "seed-0", "test_2016_flickr", {"bleu": 12.5}, hypotheses,
                            root=repo, commit="abc")
    assert kept == repo / TRANSLATIONS / "demo.seed-0.test_2016_flickr.txt"
    assert kept.read_text(encoding="utf-8").splitlines() == hypotheses
    (entry,) = ledger_entries(repo / LEDGER)
    assert entry["plan"] == "demo" and entry["system"] == "seed-0" and entry["bleu"] == 12.5
    assert entry["before_ledger"] is False and entry["plan_commit"] == plan.commit
    assert entry["plan_file"] == "results/plans/demo.toml"
    with pytest.raises(BookError, match="once per system"):
        record_test_read(plan, "seed-0", "test_2016_flickr", {"bleu": 13.0}, hypotheses,
                         root=repo)
    record_test_read(plan, "seed-1", "test_2016_flickr", {"bleu": 11.0}, hypotheses, root=repo)
    assert [e["system"] for e in ledger_entries(repo / LEDGER)] == ["seed-0", "seed-1"]


def test_a_read_outside_the_plan_is_refused(repo):
    plan = load_plan(commit_plan(repo))
    with pytest.raises(BookError, match="--split"):
        require_readable(plan, "seed-0", "val", repo / LEDGER)
    with pytest.raises(BookError, match="--system"):
        require_readable(plan, "seed-7", "test_2016_flickr", repo / LEDGER)


def test_the_ledger_holds_every_test_read_recorded_in_results():
    """Every evaluation of a test split in results/ has its ledger line; the reads from
    before the ledger are marked as such and name no plan."""
    entries = ledger_entries(ROOT / LEDGER)
    records = sorted(p.relative_to(ROOT).as_posix()
                     for p in (ROOT / "results").glob("evaluate-*-test_*.json"))
    assert sorted(e["record"] for e in entries if e.get("record")) == records
    for entry in entries:
        record = json.loads((ROOT / entry["record"]).read_text())
        assert entry["bleu"] == record["bleu"] and entry["split"] == record["split"]
        if entry["before_ledger"]:
            assert entry["plan"] is None, "an earlier read names no plan"
        else:
            assert (ROOT / entry["plan_file"]).is_file(), "its plan is in results/plans/"
            assert (ROOT / entry["translations"]).is_file(), "its translations are kept"
