"""What an interrupted checkpoint save leaves behind, and how it is put right.

A save writes the new checkpoint into a hidden sibling ``.step_N.tmp-<host>-<pid>-<random>``
and renames it into place; a checkpoint it replaces is first moved into
``.step_N.old-<host>-<pid>-<random>/previous``. A process killed on the way (``kill -9``,
a power cut) leaves those folders behind -- the temporary one about three times the model's
size -- and, killed between the two renames, no ``step_N`` at all.

:func:`tidy` (run on every save and every listing of a run folder, so before resuming,
translating and evaluating) finds the leftovers of processes that are no longer running on
this machine and, reporting each on stderr:

- recovers a missing ``step_N`` from the newest complete copy: the copy with the highest
  step whose files all verify (the new one before the previous one at the same step), else
  the previous checkpoint as it was;
- deletes the rest: half-written temporary folders and previous copies already replaced.

Leftovers of another running process, of this process's saves in progress, or of another
machine are left alone.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from transformer_book.run.manifest import read_metadata
from transformer_book.util.files import new_directory
from transformer_book.util.validation import BookError

__all__ = ["Leftover", "find_leftovers", "release", "save_folder", "tidy"]

_STARTED = time.time()  # leftovers of the old naming (no process id) older than this are stale
_HOST = re.sub(r"[^A-Za-z0-9]", "_", socket.gethostname()) or "host"
_NAME = re.compile(r"\.(?P<target>.+)\.(?P<kind>tmp|old)-"
                   r"(?:(?P<host>[A-Za-z0-9_]+)-(?P<pid>\d+)-)?[a-z0-9_]+")


_ACTIVE: set[str] = set()  # this process's saves in progress: never leftovers


def save_folder(parent: Path, name: str, kind: str) -> Path:
    """A new hidden folder for a save of checkpoint ``name`` in ``parent``: ``kind``
    ``"tmp"`` (the new copy is written into it) or ``"old"`` (the replaced checkpoint is
    moved into it); it counts as in progress until :func:`release`."""
    path = new_directory(parent, f".{name}.{kind}-{_HOST}-{os.getpid()}-")
    _ACTIVE.add(os.path.abspath(path))
    return path


def release(path: Path) -> None:
    """The save using ``path`` is over: what is left of it is a leftover."""
    _ACTIVE.discard(os.path.abspath(path))


@dataclass(frozen=True)
class Leftover:
    """A hidden folder of a save: ``kind`` ``"tmp"`` (the new copy) or ``"old"`` (holding
    the replaced one in ``previous``), for checkpoint ``target``, written by ``pid`` on
    ``host`` (``None`` for folders named before the process id was part of the name)."""

    path: Path
    target: str
    kind: str
    host: str | None
    pid: int | None

    @property
    def checkpoint(self) -> Path:
        """The checkpoint folder it holds."""
        return self.path if self.kind == "tmp" else self.path / "previous"

    def stale(self) -> bool:
        """Whether its process is gone (so nothing will finish or remove it)."""
        if self.pid is None:
            return self.path.stat().st_mtime < _STARTED
        if self.pid == os.getpid() and self.host == _HOST:
            return os.path.abspath(self.path) not in _ACTIVE
        if self.host != _HOST:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # another user's running process
            return False
        return False


def find_leftovers(parent: str | Path) -> list[Leftover]:
    """Every save leftover in ``parent``, running or not, sorted by name."""
    parent = Path(parent)
    found = []
    for path in sorted(parent.iterdir()) if parent.is_dir() else []:
        match = _NAME.fullmatch(path.name)
        if match and path.is_dir() and not path.is_symlink():
            pid = match["pid"]
            found.append(Leftover(path, match["target"], match["kind"], match["host"],
                                  int(pid) if pid is not None else None))
    return found


def _say(message: str) -> None:
    print(f"transformer_book: {message}", file=sys.stderr)


def _newest_complete(group: list[Leftover]) -> Leftover | None:
    """The copy to recover a missing checkpoint from (see the module docstring)."""
    verified = []
    for leftover in group:
        try:
            step = read_metadata(leftover.checkpoint)["step"]
        except (BookError, OSError):
            continue
        verified.append((step, leftover.kind == "tmp", leftover.path.name, leftover))
    if verified:
        return max(verified, key=lambda item: item[:3])[3]
    previous = [leftover for leftover in group
                if leftover.kind == "old" and leftover.checkpoint.is_dir()]
    return previous[-1] if previous else None


def tidy(parent: str | Path) -> list[Path]:
    """Recover and clean the stale leftovers in ``parent``; return the checkpoints recovered.

    Each recovery and removal is reported on stderr; a folder that cannot be renamed or
    removed (a read-only copy of a run) is reported and left as it is.
    """
    parent = Path(parent)
    groups: dict[str, list[Leftover]] = {}
    for leftover in find_leftovers(parent):
        if leftover.stale():
            groups.setdefault(leftover.target, []).append(leftover)
    recovered = []
    for target, group in sorted(groups.items()):
        destination = parent / target
        source = None if destination.exists() else _newest_complete(group)
        if source is not None:
            try:
                os.replace(source.checkpoint, destination)
            except OSError as error:
                if not destination.exists():  # else another process recovered it just now
                    _say(f"{destination}: could not recover it from {source.path.name} "
                         f"({error})")
            else:
                recovered.append(destination)
                what = "the new copy" if source.kind == "tmp" else "the previous copy"
                _say(f"{destination}: recovered from {source.path.name} ({what}; a save was "
                     f"interrupted before renaming it into place)")
        for leftover in group:
            if leftover.path.exists():
                shutil.rmtree(leftover.path, ignore_errors=True)
                state = "could not remove" if leftover.path.exists() else "removed"
                _say(f"{parent}: {state} {leftover.path.name}, left by an interrupted "
                     f"checkpoint save (process {leftover.pid or 'unknown'})")
    return recovered
