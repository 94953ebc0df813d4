"""Whether an export may replace ``out``: only an earlier export holding nothing but the
files it listed as its own in its marker file (``files``), each as it wrote it (format 3
lists their SHA-256). A folder holding anything else (``notes.txt`` put there by hand, or a
``README.md`` edited since) is refused, as any other non-empty folder is, so an export
never deletes or replaces what it did not write; the export checks again just before it
puts its new folder in place, so a file saved meanwhile is kept too. The folder itself is
written as one step by :func:`~transformer_book.util.folders.replacing`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from transformer_book.util.files import require_writable, sha256_file
from transformer_book.util.validation import bad_input, require

__all__ = ["check_replaceable", "exported_files", "file_hashes"]

#: What an export wrote before its marker listed its files (marker format 1).
_FORMAT_1_FILES = {"config.json", "model.safetensors", "generation_config.json",
                   "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "README.md"}


def exported_files(folder: Path) -> list[str]:
    """The files under ``folder``, as sorted relative POSIX paths."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def file_hashes(folder: Path, skip: str) -> dict[str, str]:
    """Each file under ``folder`` but ``skip`` (the marker): its SHA-256, by relative path."""
    return {name: sha256_file(folder / name) for name in exported_files(folder) if name != skip}


def check_replaceable(out: Path | str, argument: str, marker: str) -> Path:
    """``out`` may be written: new or empty, or an earlier export holding ``marker`` and
    only the files that marker lists; in a place this user may write; neither the current
    folder nor one holding it (it is renamed). Refused otherwise (``BookError``)."""
    out = Path(out)
    require(not out.is_symlink(), argument, "a folder path that is no symbolic link (the "
            "export renames the folder itself)", f"{out}, a link to {os.readlink(out)}"
            if out.is_symlink() else str(out))
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
        hashes = listed.get("hashes", {})  # format 3: each file as it was written
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as error:
        raise bad_input(argument, expected, f"{out}, whose {marker} cannot be read ({error})"
                   ) from error
    strangers = [name for name in exported_files(out) if name != marker and
                 (name not in own or (name in hashes and hashes[name] != sha256_file(out / name)))]
    strangers += [p.relative_to(out).as_posix() for p in out.rglob("*")
                  if p.is_dir() and not any(f.startswith(p.relative_to(out).as_posix() + "/")
                                            for f in own)]
    require(not strangers, argument, expected + ", holding only the files it wrote, as it "
            "wrote them", f"{out}, an earlier export holding files it did not write (or that "
            "were changed since): "
            f"{', '.join(strangers[:3])}{' ...' if len(strangers) > 3 else ''}")
    return out
