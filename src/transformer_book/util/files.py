"""Files written so that a reader sees the old version or the whole new one, never half.

Every file the package writes (run records, checkpoints' JSON, tokenizers, notebooks,
benchmark records, downloads) goes through :func:`atomic_writer`: a temporary file in the
same folder, flushed to disk, then ``os.replace``. The new file gets the permissions any new
file would get under the process's umask (0644 under umask 022), not ``mkstemp``'s 0600,
so a shared server's other users can read it. Folders made with :func:`new_directory`
likewise get 0755 under umask 022, not ``mkdtemp``'s 0700.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from transformer_book.util.validation import bad_input, require

__all__ = [
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "atomic_writer",
    "fsync_path",
    "new_directory",
    "require_writable",
    "sha256_file",
    "share",
]


def _umask() -> int:
    mask = os.umask(0o022)  # reading the umask means setting it; put it straight back
    os.umask(mask)
    return mask


def fsync_path(path: str | os.PathLike[str]) -> None:
    """Flush a file's (or folder's) contents to disk; folders may refuse on some systems."""
    path = Path(path)
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) if path.is_dir() else os.O_RDONLY
    try:
        fd = os.open(path, flags)
    except OSError:  # pragma: no cover - e.g. folders on Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_writer(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """A binary file handle whose contents replace ``path`` when the block ends without error.

    The bytes go to a temporary file in the same folder; on leaving the block it is flushed
    to disk, given the mode the umask allows (0644 under 022) and renamed over ``path``. An
    exception inside the block (a failed download, a checksum that does not match) deletes
    the temporary file and leaves ``path`` as it was::

        with atomic_writer("data/file.gz") as out:
            out.write(chunk)
    """
    target = Path(path)
    handle, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, 0o666 & ~_umask())
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (:func:`atomic_writer`); returns the path."""
    with atomic_writer(path) as out:
        out.write(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """:func:`atomic_write_bytes` for text, encoded as UTF-8."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], data: Any, *, sort_keys: bool = False
                      ) -> Path:
    """:func:`atomic_write_text` of ``data`` as indented JSON and a final newline. NaN and
    infinity are refused (:class:`BookError`) rather than written as invalid JSON."""
    try:
        text = json.dumps(data, indent=2, sort_keys=sort_keys, allow_nan=False)
    except ValueError as error:  # NaN or infinity somewhere in data
        raise bad_input("data", "JSON values (no NaN or infinity)", f"{error}") from error
    return atomic_write_text(path, text + "\n")


def new_directory(parent: str | os.PathLike[str], prefix: str) -> Path:
    """A new, empty, uniquely named folder inside ``parent`` (``mkdtemp``), with the mode a
    plain ``mkdir`` would give it under the umask (0755 under 022)."""
    directory = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    os.chmod(directory, 0o777 & ~_umask())
    return directory


def share(folder: str | os.PathLike[str]) -> None:
    """Give every file under ``folder`` the mode a new file gets under the umask (0644 under
    022): libraries that write their own files (safetensors' ``save_file``) make them 0600."""
    mode = 0o666 & ~_umask()
    for path in Path(folder).rglob("*"):
        if path.is_file() and not path.is_symlink():
            path.chmod(mode)


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The SHA-256 hex digest of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def require_writable(path: str | os.PathLike[str], argument: str, folder: bool = True) -> Path:
    """Refuse, before any work starts, a ``path`` the caller could not write: a folder it may
    write into or create (``folder``), or a file it may write atomically through its
    existing folder. Returns the path."""
    path = Path(path)

    def usable(p: Path) -> bool:
        return p.is_dir() and os.access(p, os.W_OK | os.X_OK)

    if folder and path.exists():
        require(usable(path), argument, "a folder this user may write to (or create)",
                f"{path}, {'read-only' if path.is_dir() else 'an existing file'}")
    elif folder:
        parent = next(p for p in path.absolute().parents if p.exists())  # / exists
        require(usable(parent), argument, "a path where a folder can be created",
                f"{path} ({parent} is no writable folder)")
    else:
        require(not path.is_dir() and usable(path.absolute().parent), argument,
                "a file in an existing folder this user may write to",
                f"{path}, {'a folder' if path.is_dir() else 'not in a writable folder'}")
    return path
