"""Helpers the plan tests share: a git repository of their own, with a plan committed."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git(root: Path, *args: str) -> None:
    """Run ``git -C root ARGS`` as a throwaway identity (no user configuration needed)."""
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org",
           "PATH": "/usr/bin:/bin:/usr/local/bin", "HOME": str(root)}
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, env=env)


def write_plan(repo: Path, name: str, text: str, *, commit: bool = True) -> Path:
    """``repo/results/plans/<name>.toml`` holding ``text``, in a new git repository at
    ``repo`` (made if missing), committed unless ``commit`` is false."""
    path = repo / "results" / "plans" / f"{name}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not (repo / ".git").exists():
        git(repo, "init", "-q")
    path.write_text(text, encoding="utf-8")
    if commit:
        git(repo, "add", str(path))
        git(repo, "commit", "-q", "-m", f"plan {name}")
    return path
