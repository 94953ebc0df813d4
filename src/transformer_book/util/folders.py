"""A folder written as one step, and what a step cut short leaves (checkpoints, exports).

:func:`replacing` gives an empty hidden sibling of the folder, ``.<name>.tmp-<host>-<pid>``,
to write into, marker file last; then puts it in place. A folder already there is exchanged
with it in one step where Linux can (``renameat2(RENAME_EXCHANGE)``), so that the place
always holds the old folder or the new one; elsewhere it is renamed to
``.<name>.old-<host>-<pid>`` first. The old folder is deleted last.

A kill leaves hidden folders. :func:`tidy` takes those of processes no longer running on
this machine: a folder missing (killed between the two renames) comes back from its
complete new copy (marker present), else from its old one; the rest is deleted. Each step is
reported on stderr.
"""

from __future__ import annotations

import ctypes
import fnmatch
import glob
import os
import re
import shutil
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from transformer_book.util.files import fsync_path, share

__all__ = ["replacing", "tidy"]

_HOST = re.sub(r"[^A-Za-z0-9]", "_", socket.gethostname()) or "host"
_HIDDEN = re.compile(r"\.(?P<target>.+)\.(?P<kind>tmp|old)-(?P<host>\w+)-(?P<pid>\d+)")
_WRITING: set[str] = set()  # the folders this process is writing now (absolute paths)


@contextmanager
def replacing(target: Path, marker: str) -> Iterator[Path]:
    """An empty hidden sibling of ``target`` to fill, ``marker`` written last. When the
    block ends, its files get the umask's mode (:func:`~transformer_book.util.files.share`)
    and it is put at ``target``, replacing a folder there; on an error it is deleted."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tidy(target.parent, marker, glob.escape(target.name))
    temp, key = _hidden(target, "tmp"), os.path.abspath(target)
    _WRITING.add(key)  # its hidden folders are no leftovers while it is written
    try:
        temp.mkdir()
        yield temp
        if not (temp / marker).is_file():
            raise AssertionError(f"{temp}: the folder was written without its {marker}")
        share(temp)  # readable by others as any new file is, whoever wrote the files
        fsync_path(temp)
        _swap_in(temp, target)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    finally:
        _WRITING.discard(key)


def _hidden(target: Path, kind: str) -> Path:
    """Where this process writes ``target``'s new copy (``kind`` ``"tmp"``) or moves the
    copy it replaces (``"old"``)."""
    return target.parent / f".{target.name}.{kind}-{_HOST}-{os.getpid()}"


def _swap_in(temp: Path, target: Path) -> None:
    """Put the complete ``temp`` at ``target``; a folder there is deleted once out."""
    if not target.exists():
        os.replace(temp, target)
    elif _exchange(temp, target):
        _discard(temp)  # the old folder, now at the hidden name
    else:
        old = _hidden(target, "old")
        os.replace(target, old)
        os.replace(temp, target)
        _discard(old)
    fsync_path(target.parent)


def _exchange(first: Path, second: Path) -> bool:
    """Exchange two paths atomically; False where the system or file system cannot."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    at_cwd, exchange = -100, 2  # AT_FDCWD, RENAME_EXCHANGE (linux/fs.h)
    if renameat2(at_cwd, os.fsencode(first), at_cwd, os.fsencode(second), exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: not supported here
        return False
    raise OSError(code, os.strerror(code), str(first), None, str(second))


def _discard(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def _over(parent: Path, match: re.Match[str]) -> bool:
    """Whether the write that left a hidden folder is over: made on this machine by a
    process no longer running, or by this one outside a write of that folder. Another
    machine's folders are never judged."""
    pid = int(match["pid"])
    if match["host"] != _HOST:
        return False
    if pid == os.getpid():
        return os.path.abspath(parent / match["target"]) not in _WRITING
    try:
        os.kill(pid, 0)
    except OSError as error:  # PermissionError: another user's running process
        return isinstance(error, ProcessLookupError)
    return False


def tidy(parent: Path, marker: str, pattern: str) -> list[Path]:
    """Take the leftovers in ``parent`` of the writes of folders named by ``pattern`` (as
    :mod:`fnmatch` reads it) that are over, written with ``marker`` last (see the module
    docstring); return those taken. A folder that cannot be renamed or removed (a read-only
    copy) is reported and left."""
    found = [(match, path) for path in (parent.iterdir() if parent.is_dir() else [])
             if (match := _HIDDEN.fullmatch(path.name))
             and fnmatch.fnmatchcase(match["target"], pattern)
             and path.is_dir() and not path.is_symlink() and _over(parent, match)]
    for match, folder in sorted(found, key=lambda pair: (pair[0]["kind"] == "old", pair[1])):
        target, new = parent / match["target"], match["kind"] == "tmp"
        if not target.exists() and (not new or (folder / marker).is_file()):
            try:  # a missing folder: from its complete new copy, else from its old one
                os.replace(folder, target)
            except OSError as error:
                if not target.exists():  # else another process recovered it just now
                    _say(f"{target}: could not recover it from {folder.name} ({error})")
            else:
                _say(f"{target}: recovered from {folder.name} (the {'new' if new else 'previous'}"
                     " copy; a write was interrupted before renaming it into place)")
                continue
        _discard(folder)
        _say(f"{parent}: {'could not remove' if folder.exists() else 'removed'} "
             f"{folder.name}, left by an interrupted write")
    return [folder for _, folder in found]


def _say(message: str) -> None:
    print(f"transformer_book: {message}", file=sys.stderr)
