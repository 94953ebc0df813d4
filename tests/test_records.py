"""read_records reads back what write_record wrote, oldest first, with the time it was written."""

import json
import math
import os
import shutil
import subprocess
from datetime import datetime, timezone

import pytest

from transformer_book.util import records
from transformer_book.util.records import read_records, write_record
from transformer_book.util.validation import BookError


def test_read_records_returns_each_kind_oldest_first_with_its_time(tmp_path, monkeypatch):
    stamps = iter(["20261201T174727Z", "20261129T232615Z", "20261129T232615Z", "20261130T000000Z"])
    monkeypatch.setattr(records, "utc_timestamp", lambda: next(stamps))
    write_record(tmp_path, "train", "small", {"steps": 4878})
    write_record(tmp_path, "train", "small", {"steps": 2108})
    write_record(tmp_path, "train", "small", {"steps": 2109})  # same second: "-1" appended
    write_record(tmp_path, "evaluate", "small-test_2016_flickr", {"bleu": 39.08})

    train = read_records(tmp_path, "train")
    assert [r["steps"] for r in train] == [2108, 2109, 4878]
    assert train[0]["written"] == datetime(2026, 11, 29, 23, 26, 15, tzinfo=timezone.utc)
    assert [r["bleu"] for r in read_records(tmp_path, "evaluate")] == [39.08]
    assert read_records(tmp_path / "missing", "train") == []


def test_read_records_refuses_a_file_name_without_a_time(tmp_path):
    (tmp_path / "train-small.json").write_text("{}")
    with pytest.raises(BookError, match=r"results_dir: expected record files named "
                                         r"train-<name>-<UTC time>.json.*train-small.json"):
        read_records(tmp_path, "train")


def test_a_record_is_strict_json_readable_as_the_umask_allows(tmp_path):
    previous = os.umask(0o022)
    try:
        path = write_record(tmp_path, "train", "tiny", {"loss": math.nan, "steps": [1, math.inf]})
    finally:
        os.umask(previous)
    assert path.stat().st_mode & 0o777 == 0o644
    assert json.loads(path.read_text()) == {"loss": None, "steps": [1, None]}
    with pytest.raises(BookError, match=r"record: expected a dict, received list"):
        write_record(tmp_path, "train", "tiny", [1])  # type: ignore[arg-type]


# ---------------------------------------------------------------- git_commit runs nothing


def _git(repo, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_AUTHOR_NAME="a", GIT_AUTHOR_EMAIL="a@b", GIT_COMMITTER_NAME="a",
               GIT_COMMITTER_EMAIL="a@b", GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    quiet = ["-c", "core.fsmonitor=false", "-c", f"core.hooksPath={os.devnull}",
             "-c", "filter.spy.clean=cat"]  # the test's own commands run none of the spies
    done = subprocess.run(["git", *quiet, "-C", str(repo), *args], capture_output=True,
                          text=True, env=env, check=True)
    return done.stdout.strip()


@pytest.fixture
def hostile_repo(tmp_path):
    """A repository whose fsmonitor hook, clean filter and hooks would each leave a file."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo, marks = tmp_path / "repo", tmp_path / "marks"
    repo.mkdir()
    marks.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.txt").write_text("one\n")
    (repo / "link").symlink_to("a.txt")
    (repo / ".gitattributes").write_text("*.txt filter=spy\n")
    _git(repo, "add", "a.txt", "link", ".gitattributes")
    _git(repo, "commit", "-q", "-m", "first")
    for name, line in (("fsmonitor", "echo 2; printf ''"), ("clean", "cat")):
        script = tmp_path / f"{name}.sh"
        script.write_text(f"#!/bin/sh\ntouch {marks}/{name}\n{line}\n")
        script.chmod(0o755)
    _git(repo, "config", "core.fsmonitor", str(tmp_path / "fsmonitor.sh"))
    _git(repo, "config", "filter.spy.clean", str(tmp_path / "clean.sh"))
    hooks = repo / ".git" / "hooks"
    for hook in ("post-index-change", "reference-transaction"):
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {marks}/{hook}\n")
        (hooks / hook).chmod(0o755)
    return repo, marks


def test_git_commit_runs_none_of_the_repository_hooks(hostile_repo):
    repo, marks = hostile_repo
    head = _git(repo, "rev-parse", "HEAD")
    assert records.git_commit(repo) == {"commit": head, "dirty": False}
    assert sorted(p.name for p in marks.iterdir()) == []
    os.utime(repo / "a.txt", (1, 1))  # metadata changed, content not: hashed, still clean
    assert records.git_commit(repo) == {"commit": head, "dirty": False}
    (repo / "a.txt").write_text("two\n")
    assert records.git_commit(repo)["dirty"] is True
    assert sorted(p.name for p in marks.iterdir()) == []
    subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True,
                   check=False)  # the hooks are real: git status runs them
    assert "fsmonitor" in {p.name for p in marks.iterdir()}


def test_git_commit_ignores_the_callers_git_variables(hostile_repo, monkeypatch, tmp_path):
    repo, marks = hostile_repo
    head = _git(repo, "rev-parse", "HEAD")
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(tmp_path / "no-index"))
    assert records.git_commit(repo) == {"commit": head, "dirty": False}
    assert not any(marks.iterdir())


def test_git_commit_reads_packed_refs_detached_heads_and_gitdir_files(hostile_repo, tmp_path):
    repo, _ = hostile_repo
    head = _git(repo, "rev-parse", "HEAD")
    _git(repo, "pack-refs", "--all")
    assert not any((repo / ".git" / "refs" / "heads").iterdir())
    assert records.git_commit(repo)["commit"] == head
    _git(repo, "checkout", "-q", "--detach")
    assert records.git_commit(repo)["commit"] == head
    linked = tmp_path / "linked"
    _git(repo, "worktree", "add", "-q", "--detach", str(linked))
    assert (linked / ".git").is_file()
    assert records.git_commit(linked) == {"commit": head, "dirty": False}
    (linked / "a.txt").unlink()
    assert records.git_commit(linked)["dirty"] is True


def test_git_commit_outside_a_repository_uses_the_variable(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "_find_repository", lambda folder: None)
    monkeypatch.setenv(records.COMMIT_ENV, "abc123")
    assert records.git_commit(tmp_path) == {"commit": "abc123", "dirty": None}


@pytest.mark.parametrize("version", ["2", "3", "4"])
def test_git_commit_reads_every_index_version(hostile_repo, version):
    repo, marks = hostile_repo
    _git(repo, "update-index", "--index-version", version)
    _git(repo, "update-index", "--skip-worktree", "link")
    head = _git(repo, "rev-parse", "HEAD")
    assert records.git_commit(repo) == {"commit": head, "dirty": False}
    (repo / "link").unlink()  # skip-worktree: not compared, as git status does
    assert records.git_commit(repo)["dirty"] is False
    (repo / "b.txt").write_text("new\n")
    assert records.git_commit(repo)["dirty"] is False  # untracked files do not count
    _git(repo, "add", "b.txt")
    assert records.git_commit(repo)["dirty"] is True  # staged
    assert not any(marks.iterdir())


def test_git_commit_in_a_sha256_repository(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    _git(tmp_path, "init", "-q", "--object-format=sha256", str(repo))
    (repo / "a").write_text("x\n")
    _git(repo, "add", "a")
    _git(repo, "commit", "-q", "-m", "first")
    head = _git(repo, "rev-parse", "HEAD")
    assert len(head) == 64 and records.git_commit(repo) == {"commit": head, "dirty": False}
    os.utime(repo / "a", (1, 1))
    assert records.git_commit(repo)["dirty"] is False
    (repo / "a").write_text("y\n")
    assert records.git_commit(repo)["dirty"] is True
