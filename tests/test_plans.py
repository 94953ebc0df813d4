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


MANY = PLAN.replace('systems = ["seed-0", "seed-1"]',
                    "systems = [" + ", ".join(f'"seed-{n}"' for n in range(8)) + "]")


def _read_once(args):
    """One process entering one read (a spawned worker: the lock is between processes)."""
    plan_path, system, root = args
    try:
        record_test_read(load_plan(plan_path), system, "test_2016_flickr", {"bleu": 1.0},
                         ["a"], root=root)
    except BookError as error:
        return str(error)
    return "entered"


@pytest.mark.slow
def test_reads_at_once_are_all_entered_and_one_system_is_read_once(repo):
    """Eight processes entering eight systems at once leave eight lines; four reading one
    system at once: one is entered, the others refused (the check and the line are under
    one lock)."""
    import multiprocessing

    path = str(write_plan(repo, "demo", MANY))
    with multiprocessing.get_context("spawn").Pool(8) as pool:
        done = pool.map(_read_once, [(path, f"seed-{n}", str(repo)) for n in range(8)])
        assert done == ["entered"] * 8
        assert sorted(e["system"] for e in ledger_entries(repo / LEDGER)) == [
            f"seed-{n}" for n in range(8)]
        (repo / LEDGER).unlink()
        same = pool.map(_read_once, [(path, "seed-3", str(repo))] * 4)
    assert same.count("entered") == 1 and sum("once per system" in s for s in same) == 3
    assert len(ledger_entries(repo / LEDGER)) == 1


def test_a_read_that_cannot_be_entered_is_refused_and_not_spent(repo, monkeypatch):
    from transformer_book.run import plans

    plan = load_plan(commit_plan(repo))

    def full_disk(ledger, line):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(plans, "_append", full_disk)
    record = repo / "evaluate-record.json"
    record.write_text('{"bleu": 1.0}')
    with (pytest.raises(BookError, match=r"ledger: .*the read is refused, not spent"),
          plans.open_test_read(plan, "seed-0", "test_2016_flickr", repo) as read):
        read.record({"bleu": 1.0}, ["a"], scored=[record])
    assert not record.exists() and not list((repo / TRANSLATIONS).glob("*")), (
        "no score or translation of the read left without its line")
    monkeypatch.undo()
    record_test_read(plan, "seed-0", "test_2016_flickr", {"bleu": 1.0}, ["a"], root=repo)
    assert [e["system"] for e in ledger_entries(repo / LEDGER)] == ["seed-0"]
    (repo / "other").mkdir()
    (repo / "other" / "results").write_text("a file where the folder should be")
    with (pytest.raises(BookError, match=r"ledger: .*nothing was read"),
          plans.open_test_read(plan, "seed-1", "test_2016_flickr", repo / "other")):
        raise AssertionError("refused before the block runs")


def test_the_ledger_is_appended_to_never_rewritten(repo):
    plan = load_plan(commit_plan(repo))
    (repo / "results").mkdir(exist_ok=True)
    (repo / LEDGER).write_text('{"plan": "older", "system": "x", "split": "s"}')  # no "\n"
    before = (repo / LEDGER).stat().st_ino
    record_test_read(plan, "seed-0", "test_2016_flickr", {"bleu": 1.0}, ["a"], root=repo)
    assert (repo / LEDGER).stat().st_ino == before, "the same file, appended to"
    assert [e["plan"] for e in ledger_entries(repo / LEDGER)] == ["older", "demo"]


@pytest.mark.parametrize("content, match", [
    (b'["a list"]\n', r"line 1: expected a JSON object"),
    (b'{"plan": "a"}\n42\n', r"line 2: expected a JSON object"),
    (b'{"plan": "a"}\n{half\n', r"line 2: expected a JSON object"),
    (b'\xff\xfe{}\n', r"ledger: expected a readable UTF-8 file"),
])
def test_a_ledger_that_cannot_be_read_is_refused_by_line(tmp_path, content, match):
    ledger = tmp_path / "test_reads.jsonl"
    ledger.write_bytes(content)
    with pytest.raises(BookError, match=match):
        ledger_entries(ledger)


def test_a_ledger_path_that_is_a_folder_is_refused(tmp_path):
    with pytest.raises(BookError, match="ledger: expected a readable UTF-8 file"):
        ledger_entries(tmp_path)


def test_a_plan_dates_from_its_last_change(repo):
    """A plan amended after a run began is no plan for that run: its date is the amendment's."""
    from plan_utils import git

    first = load_plan(commit_plan(repo))
    path = repo / "results" / "plans" / "demo.toml"
    path.write_text(PLAN.replace("alpha = 0.6", "alpha = 1.0"), encoding="utf-8")
    git(repo, "commit", "-q", "-am", "amend the plan")
    amended = load_plan(path)
    assert amended.commit != first.commit and amended.fields["alpha"] == 1.0
    assert amended.committed_at >= first.committed_at


@pytest.mark.parametrize("old, new, field", [
    ('name = "demo"', 'name = "../../../escaped"', "'name'"),
    ('systems = ["seed-0", "seed-1"]', 'systems = ["seed-0", "a/b"]', "'systems'"),
    ('systems = ["seed-0", "seed-1"]', 'systems = ["seed-0", "seed-0"]', "'systems'"),
    ('systems = ["seed-0", "seed-1"]', "systems = []", "'systems'"),
    ("alpha = 0.6", "alpha = nan", "'alpha'"),
    ("alpha = 0.6", "alpha = -1.0", "'alpha'"),
    ("beam = 4", "beam = -3", "'beam'"),
    ("beam = 4", "beam = 0", "'beam'"),
    ("seeds = [0, 1]", "seeds = []", "'seeds'"),
    ("seeds = [0, 1]", "seeds = [0, 0]", "'seeds'"),
    ("seeds = [0, 1]", 'seeds = ["zero"]', "'seeds'"),
    ('checkpoint_rules = ["last", "best-val"]', 'checkpoint_rules = ["newest"]',
     "'checkpoint_rules'"),
    ('checkpoint_rules = ["last", "best-val"]', "checkpoint_rules = []", "'checkpoint_rules'"),
])
def test_a_plan_s_names_and_values_are_checked(repo, old, new, field):
    assert old in PLAN
    with pytest.raises(BookError, match=f"field {field}"):
        load_plan(commit_plan(repo, PLAN.replace(old, new)))
