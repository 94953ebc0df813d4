"""Release the course: tag ``v<version>`` and build the ``student`` branch from that tag.

Every launch target of the book is pinned to one release: each notebook's Colab cell
installs ``transformer_book @ git+<url>@v<version>`` (scripts/sync_notebooks.py writes it
from ``pyproject.toml``'s version), and the Colab and Binder buttons open the ``student``
branch, which is built from the release's tag (its ``binder/`` installs that tree's
package). This script makes such a release from ``HEAD``:

1. the working tree is clean (nothing modified, staged or untracked): the tag names what
   is committed;
2. the version agrees everywhere: ``pyproject.toml``'s ``[project].version``,
   ``__version__`` in ``src/transformer_book/__init__.py``, and the first two cells of every
   ``notebooks/NN_*.ipynb`` (the Colab badge and the setup cell, exactly as
   ``scripts/sync_notebooks.py`` writes them: ``make sync`` and commit when they disagree);
3. the annotated tag ``v<version>`` is made on ``HEAD`` (a tag of that name already on
   ``HEAD`` is kept; one on another commit is refused: bump the version);
4. ``scripts/student_branch.py --commit --ref v<version>`` commits the student copies onto
   the branch ``student`` (deterministic: the workflow that rebuilds it from the pushed tag
   makes the same commit).

Nothing is pushed: the script ends with the push command. ``.github/workflows/release.yml``
then rebuilds the student branch from the tag and publishes the book.

    python scripts/release.py            # checks, tag, student branch (make release)
    python scripts/release.py --check    # the checks alone (--tag NAME: and that NAME is it)
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

try:
    import tomllib  # Python >= 3.11
except ImportError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

import nbformat

ROOT = Path(__file__).resolve().parents[1]
INIT = Path("src") / "transformer_book" / "__init__.py"
CHAPTER = "notebooks/[0-9][0-9]_*.ipynb"
BRANCH = "student"


class ReleaseError(Exception):
    """A release refused: the message says what is wrong and what to do."""


def git(repo: Path, *args: str) -> str:
    """``git -C repo args``'s stdout; a failure raises :class:`ReleaseError` with git's words."""
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise ReleaseError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.rstrip()


def require_clean(repo: Path) -> None:
    """Refuse a working tree with modified, staged or untracked (not ignored) files."""
    dirty = git(repo, "status", "--porcelain", "--untracked-files=normal")
    if dirty:
        listed = "\n  ".join(dirty.splitlines()[:20])
        raise ReleaseError(f"the working tree is not clean; commit or remove first:\n  {listed}")


def _load_sync(repo: Path) -> ModuleType:
    """The repository's own scripts/sync_notebooks.py (it reads that repository's files)."""
    spec = importlib.util.spec_from_file_location("sync_notebooks_of_release",
                                                  repo / "scripts" / "sync_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def versions(repo: Path) -> dict[str, str]:
    """``{where: version}`` of ``pyproject.toml`` and the package's ``__version__``."""
    with (repo / "pyproject.toml").open("rb") as handle:
        found = {"pyproject.toml": tomllib.load(handle)["project"]["version"]}
    init = re.search(r'^__version__ = "([^"]+)"', (repo / INIT).read_text("utf-8"), re.M)
    found[str(INIT)] = init[1] if init else "(no __version__)"
    return found


def stale_notebooks(repo: Path) -> list[str]:
    """One line per notebook whose Colab badge or setup cell is not what
    scripts/sync_notebooks.py writes for this version and ``_config.yml``."""
    sync = _load_sync(repo)
    stale = []
    for path in sorted(repo.glob(CHAPTER)):
        notebook = nbformat.read(path, as_version=4)
        pinned = re.findall(r"@v([^\"\s]+)\"", notebook.cells[1].source
                            if len(notebook.cells) > 1 else "")
        changes = sync.sync_header(notebook, path.name)
        if changes:
            stale.append(f"{path.name} (pins {', '.join(pinned) or 'nothing'}): "
                         + "; ".join(changes))
    return stale


def check(repo: Path, tag: str | None = None) -> str:
    """Every check of steps 1 and 2 (module doc); returns the version."""
    require_clean(repo)
    found = versions(repo)
    version = found["pyproject.toml"]
    if set(found.values()) != {version}:
        raise ReleaseError(f"the versions disagree: {found}; set the same one in both")
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise ReleaseError(f"pyproject.toml's version: expected MAJOR.MINOR.PATCH, received "
                           f"{version!r}")
    stale = stale_notebooks(repo)
    if stale:
        raise ReleaseError(f"{len(stale)} notebooks do not install v{version} as "
                           "scripts/sync_notebooks.py writes it; run `make sync`, commit, "
                           "then release:\n  " + "\n  ".join(stale))
    if tag is not None and tag != f"v{version}":
        raise ReleaseError(f"the tag {tag} is not the version's, v{version} (pyproject.toml)")
    return version


def make_tag(repo: Path, version: str) -> str:
    """The annotated tag ``v<version>`` on ``HEAD`` (kept if it is there already)."""
    tag, head = f"v{version}", git(repo, "rev-parse", "HEAD")
    exists = subprocess.run(["git", "-C", str(repo), "rev-parse", "-q", "--verify",
                             f"refs/tags/{tag}"], capture_output=True, text=True).stdout
    if exists:
        tagged = git(repo, "rev-parse", f"{tag}^{{commit}}")
        if tagged != head:
            raise ReleaseError(f"the tag {tag} already names {tagged[:12]}, not HEAD "
                               f"{head[:12]}: bump the version (pyproject.toml, "
                               f"{INIT}), make sync, commit, release")
        print(f"{tag} already tags HEAD {head[:12]}")
        return tag
    git(repo, "tag", "-a", tag, "-m", f"transformer_book {version}", "HEAD")
    print(f"tagged HEAD {head[:12]} as {tag}")
    return tag


def student_branch(repo: Path, tag: str, branch: str) -> None:
    """scripts/student_branch.py --commit from the tag (its output shown)."""
    command = [sys.executable, str(repo / "scripts" / "student_branch.py"), "--repo",
               str(repo), "--ref", tag, "--commit", "--branch", branch]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    print(done.stdout.strip())
    if done.returncode != 0:
        raise ReleaseError(f"the student branch failed: {done.stderr.strip()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=ROOT, help="the repository (default here)")
    parser.add_argument("--check", action="store_true", help="only check; tag nothing")
    parser.add_argument("--tag", help="with --check: the tag being released must be this one")
    parser.add_argument("--branch", default=BRANCH, help="the student branch (default student)")
    args = parser.parse_args(argv)
    try:
        version = check(args.repo, args.tag)
        if args.check:
            print(f"ready to release v{version}")
            return 0
        tag = make_tag(args.repo, version)
        student_branch(args.repo, tag, args.branch)
    except ReleaseError as error:
        print(f"release: {error}", file=sys.stderr)
        return 1
    print(f"released {tag}; publish it with:  git push origin HEAD {tag} {args.branch}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
