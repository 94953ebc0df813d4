"""scripts/release.py in a throwaway repository: it refuses a dirty tree, versions that disagree
and notebooks that pin another release; it tags ``v<version>`` and builds the student branch
from the tag; and the Colab cell's own pip command installs that tag's package."""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import io
import os
import re
import site
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path

import nbformat
import pytest
from notebook_utils import NOTEBOOKS, ROOT

try:
    import tomllib  # Python >= 3.11
except ImportError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

IDENTITY = {"GIT_AUTHOR_NAME": "A", "GIT_AUTHOR_EMAIL": "a@example.org",
            "GIT_COMMITTER_NAME": "A", "GIT_COMMITTER_EMAIL": "a@example.org",
            "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
            "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}
CHAPTER = NOTEBOOKS[0].name  # chapter 00: quick to sync and to convert

spec = importlib.util.spec_from_file_location("release", ROOT / "scripts" / "release.py")
release = importlib.util.module_from_spec(spec)
spec.loader.exec_module(release)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env={**os.environ, **IDENTITY}).stdout.strip()


def version_of(repo: Path) -> str:
    with (repo / "pyproject.toml").open("rb") as handle:
        return tomllib.load(handle)["project"]["version"]


def run_release(repo: Path, *args: str) -> tuple[int, str]:
    """release.main in this process on ``repo``: (exit status, stdout and stderr)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        status = release.main(["--repo", str(repo), *args])
    return status, out.getvalue()


@pytest.fixture()
def clone(tmp_path_factory) -> Path:
    """A repository holding this one's HEAD (one commit: quick for pip to clone) with
    chapter 00 alone, synced to the version."""
    repo = tmp_path_factory.mktemp("release") / "repo"
    repo.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", "HEAD"],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(repo, filter="data")
    for path in (repo / "notebooks").glob("*.ipynb"):
        if path.name != CHAPTER:
            path.unlink()
    sync = [sys.executable, str(repo / "scripts" / "sync_notebooks.py"),
            str(repo / "notebooks" / CHAPTER)]
    subprocess.run(sync, check=True, capture_output=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "the course at HEAD, chapter 00 alone, synced")
    return repo


@pytest.fixture()
def identity(monkeypatch):
    for name, value in IDENTITY.items():
        monkeypatch.setenv(name, value)


def test_release_refuses_a_dirty_tree_and_notebooks_of_another_release(clone, identity):
    notebook = clone / "notebooks" / CHAPTER
    original = notebook.read_bytes()
    (clone / "notes.txt").write_text("not committed\n")
    status, out = run_release(clone, "--check")
    assert status == 1 and "not clean" in out and "notes.txt" in out
    (clone / "notes.txt").unlink()
    text = original.decode().replace(f"@v{version_of(clone)}", "@v0.0.1")
    notebook.write_text(text, encoding="utf-8")
    git(clone, "commit", "-q", "-a", "-m", "a notebook pinned to another release")
    status, out = run_release(clone)
    assert status == 1 and f"do not install v{version_of(clone)}" in out
    assert "pins 0.0.1" in out and "make sync" in out
    assert git(clone, "tag", "--list") == ""
    git(clone, "revert", "--no-edit", "HEAD")
    status, out = run_release(clone, "--check", "--tag", "v0.0.1")
    assert status == 1 and "is not the version's" in out
    assert run_release(clone, "--check")[0] == 0


def colab_pip_command(notebook: Path, monkeypatch) -> list[str]:
    """The pip command the notebook's Colab cell runs, taken by running the cell as on
    Colab with ``subprocess.run`` caught."""
    cell = nbformat.read(notebook, as_version=4).cells[1]
    assert "google.colab" in cell.source
    calls = []
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "google.colab", type(sys)("google.colab"))
        patch.setattr(subprocess, "run", lambda command, **kw: calls.append(command))
        patch.delenv("TRANSFORMER_BOOK_CACHE", raising=False)
        with contextlib.redirect_stdout(io.StringIO()):
            exec(cell.source, {})
    (command,) = calls
    return command


@pytest.mark.slow
def test_release_tags_builds_the_student_branch_and_colab_installs_it(
        clone, identity, tmp_path, monkeypatch):
    version = version_of(clone)
    status, out = run_release(clone)
    assert status == 0, out
    tag = f"v{version}"
    assert git(clone, "cat-file", "-t", tag) == "tag", "an annotated tag"
    assert git(clone, "rev-parse", f"{tag}^{{commit}}") == git(clone, "rev-parse", "HEAD")
    student = git(clone, "show", f"student:notebooks/{CHAPTER}")
    assert "### BEGIN SOLUTION" not in student and "NotImplementedError" in student
    assert git(clone, "rev-parse", "student^{tree}") != git(clone, "rev-parse", "HEAD^{tree}")
    assert f"push origin HEAD {tag} student" in out
    # A second run keeps the tag and the branch; a new commit under the same tag is refused.
    student_tip = git(clone, "rev-parse", "student")
    assert run_release(clone)[0] == 0 and git(clone, "rev-parse", "student") == student_tip
    git(clone, "commit", "-q", "--allow-empty", "-m", "after the release")
    status, out = run_release(clone)
    assert status == 1 and "bump the version" in out
    git(clone, "reset", "-q", "--hard", "HEAD~1")

    # The Colab cell's command, with GitHub's address replaced by the clone's.
    command = colab_pip_command(clone / "notebooks" / CHAPTER, monkeypatch)
    cell = nbformat.read(clone / "notebooks" / CHAPTER, as_version=4).cells[1]
    url = re.search(r'url = "([^"]+)"', cell.source).group(1)
    assert command[5] == f"transformer_book @ git+{url}@{tag}"
    assert command[6] == "torch==" + importlib.metadata.version("torch")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True)
    python = venv / "bin" / "python"
    # The venv sees this interpreter's packages after its own site-packages: the tested
    # set (torch and every dependency, so nothing is downloaded) and pip itself.
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], check=True, capture_output=True, text=True)
    ours = [*site.getsitepackages(), sysconfig.get_paths()["purelib"]]
    Path(purelib.stdout.strip(), "tested_set.pth").write_text("\n".join(ours) + "\n")
    package = command[5].replace(url, f"file://{clone}")
    # Offline: no index, and the build uses the setuptools already installed.
    pip = [str(python), *command[1:5], package, *command[6:], "--no-index",
           "--no-build-isolation"]
    done = subprocess.run(pip, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    code = "import transformer_book as t; print(t.__version__); print(t.__file__)"
    shown = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True,
                           cwd=tmp_path, env=env).stdout.split()
    assert shown[0] == version
    assert Path(shown[1]).is_relative_to(venv), shown[1]
