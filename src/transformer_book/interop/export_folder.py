"""An export folder replaced as one transaction: the old export stays until the new one is
complete, a kill at any moment leaves one of them at ``out``, and nothing else is deleted.

The new export is written into a temporary sibling, ``.<name>.tmp-XXXX``, and swapped with
``out`` in one step: Linux's ``renameat2(RENAME_EXCHANGE)`` exchanges the two paths
atomically, so ``out`` always holds the old export or the new one; the old one, now at the
temporary name, is deleted after. Where the exchange is not available (another system, a
file system without it), ``out`` is first renamed to ``.<name>.old-XXXX`` and the new
folder renamed into place: a kill between the two renames leaves no ``out``, and the next
export (:func:`recover_leftovers`) renames the old one back before it starts. Every export
starts by deleting the leftovers of interrupted ones, the siblings ``.<name>.tmp-*`` and
``.<name>.old-*``.

``out`` may be replaced only when every file in it is one the export listed as its own in
its marker file (``files``): a folder holding anything else (``notes.txt`` put there by
hand) is refused, as any other non-empty folder is.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import tempfile
from pathlib import Path

from transformer_book.util.files import require_writable
from transformer_book.util.validation import bad_input, require

__all__ = ["check_replaceable", "exported_files", "leftovers", "new_temporary",
           "recover_leftovers", "swap_into_place"]

_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100
#: What an export wrote before its marker listed its files (marker format 1).
_FORMAT_1_FILES = {"config.json", "model.safetensors", "generation_config.json",
                   "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "README.md"}


def leftovers(out: Path) -> list[Path]:
    """The temporary siblings an interrupted export of ``out`` left: ``.<name>.tmp-*``
    (a folder being written, or an old export swapped out) and ``.<name>.old-*``."""
    out = Path(out).absolute()
    found = [*out.parent.glob(f".{out.name}.tmp-*"), *out.parent.glob(f".{out.name}.old-*")]
    return sorted(p for p in found if p.is_dir() and not p.is_symlink())


def recover_leftovers(out: Path | str, marker: str) -> list[Path]:
    """Put back an earlier export that a kill between two renames left aside (``out``
    missing, a complete ``.<name>.old-*`` holding ``marker``), then delete every leftover
    of :func:`leftovers`. Returns what it deleted."""
    out = Path(out).absolute()
    found = leftovers(out)
    if not out.exists():
        for old in (p for p in found if ".old-" in p.name and (p / marker).is_file()):
            os.replace(old, out)
            found.remove(old)
            break
    for path in found:
        shutil.rmtree(path, ignore_errors=True)
    return found


def exported_files(folder: Path) -> list[str]:
    """The files under ``folder``, as sorted relative POSIX paths."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def check_replaceable(out: Path | str, argument: str, marker: str) -> Path:
    """``out`` may be written: new or empty, or an earlier export holding ``marker`` and
    only the files that marker lists; in a place this user may write; neither the current
    folder nor one holding it (it is renamed). Refused otherwise (``BookError``)."""
    out = Path(out)
    require_writable(out, argument)
    here, there = Path.cwd().resolve(), out.resolve()
    require(here != there and there not in here.parents, argument,
            "a folder other than the current one or one holding it (the export renames it; "
            "run it from outside)", f"{out}, which holds the current folder {here}")
    if not out.is_dir() or not any(out.iterdir()):
        return out
    expected = f"a new or empty folder, or an earlier export (holding {marker}) to replace"
    require((out / marker).is_file(), argument, expected, f"{out}, a folder of other files")
    try:
        listed = json.loads((out / marker).read_text(encoding="utf-8"))
        own = set(listed["files"]) if "files" in listed else _FORMAT_1_FILES
    except (OSError, ValueError, TypeError, KeyError) as error:
        raise bad_input(argument, expected, f"{out}, whose {marker} cannot be read ({error})"
                   ) from error
    strangers = [name for name in exported_files(out) if name != marker and name not in own]
    strangers += [p.relative_to(out).as_posix() for p in out.rglob("*")
                  if p.is_dir() and not any(f.startswith(p.relative_to(out).as_posix() + "/")
                                            for f in own)]
    require(not strangers, argument, expected + ", holding only the files it wrote",
            f"{out}, an earlier export holding files it did not write: "
            f"{', '.join(strangers[:3])}{' ...' if len(strangers) > 3 else ''}")
    return out


def new_temporary(out: Path) -> Path:
    """A new, empty folder beside ``out`` to write the export into, ``.<name>.tmp-XXXX``."""
    out = Path(out).absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))


def _exchange(first: Path, second: Path) -> bool:
    """Exchange two paths atomically (``renameat2(RENAME_EXCHANGE)``); False where the
    system or the file system cannot."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    done = renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second),
                     _RENAME_EXCHANGE)
    if done == 0:
        return True
    code = ctypes.get_errno()
    if code in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: not supported here
        return False
    raise OSError(code, os.strerror(code), str(first), None, str(second))


def _move_aside(out: Path) -> Path:
    """Rename ``out`` to a new ``.<name>.old-XXXX`` beside it; returns that path."""
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    os.replace(out, old)  # onto the empty folder mkdtemp made
    return old


def _discard(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def swap_into_place(temp: Path, out: Path) -> None:
    """Put the complete export ``temp`` at ``out``: exchanged with what is there (then
    deleted), or renamed where nothing is; see the module docstring."""
    temp, out = Path(temp).absolute(), Path(out).absolute()
    if not out.exists():
        os.replace(temp, out)
    elif _exchange(temp, out):
        _discard(temp)  # the old export, now at the temporary name
    else:
        old = _move_aside(out)
        os.replace(temp, out)
        _discard(old)
