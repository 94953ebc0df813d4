"""scripts/student_branch.py in a throwaway clone: the student branch has main's paths, its
chapters are the student copies (no solutions), and building it twice gives one commit."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import shutil
import subprocess

import nbformat
import pytest
from notebook_utils import NOTEBOOKS, ROOT

from transformer_book.course.exercise_cells import BEGIN, solution_label_of

SCRIPT = ROOT / "scripts" / "student_branch.py"
CHAPTERS = [NOTEBOOKS[0]]  # chapter 00: code and written exercises, and quick to convert
FIXED = {"GIT_AUTHOR_NAME": "A", "GIT_AUTHOR_EMAIL": "a@example.org",
         "GIT_COMMITTER_NAME": "A", "GIT_COMMITTER_EMAIL": "a@example.org",
         "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}


def git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(repo), **FIXED}
                          ).stdout


def make_repo(path):
    (path / "notebooks").mkdir(parents=True)
    (path / "book").mkdir()
    for notebook in CHAPTERS:
        shutil.copy(notebook, path / "notebooks" / notebook.name)
    shutil.copy(ROOT / "book" / "references.bib", path / "book" / "references.bib")
    (path / "README.md").write_text("course\n")
    git(path, "init", "-q", "-b", "main")
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "course")
    return path


spec = importlib.util.spec_from_file_location("student_branch", SCRIPT)
student_branch = importlib.util.module_from_spec(spec)
spec.loader.exec_module(student_branch)


def build(repo, *args) -> str:
    """Run the script's main in this process (as the workflow runs the script); its stdout."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert student_branch.main(["--repo", str(repo), *args]) == 0
    return out.getvalue()


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return make_repo(tmp_path_factory.mktemp("clone"))


def test_student_branch_matches_main_and_holds_no_solutions(repo):
    build(repo, "--commit")
    assert git(repo, "ls-tree", "-r", "--name-only", "student") == git(
        repo, "ls-tree", "-r", "--name-only", "main")
    assert git(repo, "status", "--porcelain") == "", "the checkout is left untouched"
    for master in CHAPTERS:
        student = nbformat.reads(git(repo, "show", f"student:notebooks/{master.name}"), 4)
        nbformat.validate(student)
        assert not any(BEGIN in c.source for c in student.cells)
        assert not any(solution_label_of(c) for c in student.cells)
        assert all(c.outputs == [] for c in student.cells if c.cell_type == "code")
        roles = {(c.cell_type, c.metadata["exercise"].get("role"))
                 for c in student.cells if "exercise" in c.metadata}
        assert roles == {("markdown", None), ("markdown", "answer"), ("code", "solution"),
                         ("code", "check")}, "statements, answers, stubs and checks only"
    mode = git(repo, "ls-tree", "student", f"notebooks/{CHAPTERS[0].name}").split()[0]
    assert mode == "100644"


def test_rebuilding_is_deterministic_and_commits_only_changes(repo, tmp_path):
    first = git(repo, "rev-parse", "student").strip()
    assert "unchanged" in build(repo, "--commit")
    assert git(repo, "rev-parse", "student").strip() == first
    other = make_repo(tmp_path / "other")
    build(other, "--commit")
    assert git(other, "rev-parse", "student").strip() == first, "same input, same commit"
    (other / "README.md").write_text("course, changed\n")
    git(other, "commit", "-q", "-am", "change")
    build(other, "--commit")
    assert git(other, "rev-parse", "student^").strip() == first, "the old tip is the parent"


def test_out_writes_the_tree_and_refuses_a_foreign_folder(repo, tmp_path):
    out = tmp_path / "tree"
    build(repo, "--out", str(out))
    assert (out / "README.md").read_text() == "course\n"
    student = nbformat.read(out / "notebooks" / CHAPTERS[0].name, as_version=4)
    assert not any(BEGIN in c.source for c in student.cells)
    build(repo, "--out", str(out))  # its own earlier output may be replaced
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    with pytest.raises(SystemExit, match="--out: expected a new or empty folder"):
        student_branch.main(["--repo", str(repo), "--out", str(foreign)])
    assert (foreign / "keep.txt").read_text() == "mine"
