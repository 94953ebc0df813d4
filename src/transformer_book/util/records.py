"""JSON records of real runs: what was run, on what, from which commit, with what result.

Every ``transformer-book train`` and ``transformer-book evaluate`` writes one record into
``results/`` (the book's results page reads them). A record is only ever produced by running
the code -- never written by hand -- so each carries the git commit, the hardware, the
command line and the wall time next to the numbers.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import re
import shlex
import struct
import subprocess
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from transformer_book.util.env import device_name
from transformer_book.util.files import atomic_write_json
from transformer_book.util.validation import bad_input, require

__all__ = [
    "command_line",
    "git_commit",
    "hardware_info",
    "read_records",
    "utc_timestamp",
    "write_record",
]

_REPO_ROOT = Path(__file__).resolve().parents[3]
# The commit a copied working tree (no .git) was taken from, e.g. on the GPU machine.
COMMIT_ENV = "TRANSFORMER_BOOK_COMMIT"


TIMESTAMP = "%Y%m%dT%H%M%SZ"


def utc_timestamp(moment: datetime | None = None) -> str:
    """``20250101T120000Z``: a UTC time that sorts and fits in a file name."""
    moment = moment or datetime.now(timezone.utc)
    return moment.astimezone(timezone.utc).strftime(TIMESTAMP)


def git_commit(directory: str | Path | None = None) -> dict[str, Any]:
    """``{"commit": sha or "unknown", "dirty": bool or None}`` of the repository in ``directory``.

    Defaults to the checkout this package was installed from (editable installs) and falls
    back to the current folder. Without a repository (a copy of the working tree on another
    machine), the commit is ``$TRANSFORMER_BOOK_COMMIT`` if set, else "unknown".

    Nothing the repository configures is run (no fsmonitor, hook or filter): the commit
    is read from ``.git`` itself (``HEAD``, the refs, ``packed-refs``); ``dirty`` (a
    tracked file whose content differs from ``HEAD``) compares the index with the commit
    through ``git diff-index --cached`` (fsmonitor and hooks off, no system or global
    configuration, no ``GIT_*`` variable of the caller) and the working tree with the
    index here, hashing the files whose size or time changed.
    """
    for folder in ([directory] if directory is not None else [_REPO_ROOT, Path.cwd()]):
        found = _find_repository(Path(folder))
        if found is None:
            continue
        work_tree, git_dir = found
        commit = _read_head(git_dir)
        if commit is not None:
            return {"commit": commit, "dirty": _dirty(work_tree, git_dir, commit)}
    return {"commit": os.environ.get(COMMIT_ENV, "unknown"), "dirty": None}


_SHA = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")


def _find_repository(folder: Path) -> tuple[Path, Path] | None:
    """``(work tree, git dir)`` of the repository holding ``folder`` (``.git`` a folder, or
    a file ``gitdir: <path>`` as in worktrees and submodules)."""
    try:
        folder = folder.resolve()
    except OSError:
        return None
    for root in (folder, *folder.parents):
        dot_git = root / ".git"
        try:
            if dot_git.is_dir():
                return root, dot_git
            if dot_git.is_file():
                text = dot_git.read_text(encoding="utf-8").strip()
                if text.startswith("gitdir:"):
                    git_dir = Path(text.removeprefix("gitdir:").strip())
                    return root, (git_dir if git_dir.is_absolute() else root / git_dir)
        except OSError:
            return None
    return None


def _read_head(git_dir: Path) -> str | None:
    """The commit ``HEAD`` names, following symbolic refs through the refs folder and
    ``packed-refs`` (a worktree's refs live in its ``commondir``); ``None`` if unreadable."""
    try:
        common = git_dir
        if (git_dir / "commondir").is_file():
            common = git_dir / (git_dir / "commondir").read_text(encoding="utf-8").strip()
        value = (git_dir / "HEAD").read_text(encoding="utf-8").strip()
        for _ in range(5):  # HEAD -> refs/heads/main (a chain of symbolic refs is short)
            if _SHA.fullmatch(value):
                return value
            if not value.startswith("ref: refs/"):
                return None
            ref = value.removeprefix("ref: ")
            for base in (git_dir, common):
                if (base / ref).is_file():
                    value = (base / ref).read_text(encoding="utf-8").strip()
                    break
            else:
                value = _packed_ref(common / "packed-refs", ref)
    except OSError:
        return None
    return None


def _packed_ref(packed: Path, ref: str) -> str:
    if packed.is_file():
        for line in packed.read_text(encoding="utf-8").splitlines():
            sha, _, name = line.partition(" ")
            if name == ref:
                return sha
    return ""


def _git(work_tree: Path, git_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run git on this repository alone, with nothing of it or of the caller that executes
    code: no fsmonitor, no hooks, no system or global config, no inherited ``GIT_*``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_OPTIONAL_LOCKS="0",
               GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    return subprocess.run(
        ["git", "-c", "core.fsmonitor=false", "-c", f"core.hooksPath={os.devnull}",
         "-c", "core.untrackedCache=false", f"--git-dir={git_dir}", f"--work-tree={work_tree}",
         *args], capture_output=True, text=True, timeout=10, env=env, cwd=work_tree,
        check=False)


def _dirty(work_tree: Path, git_dir: Path, commit: str) -> bool | None:
    """Whether a tracked file differs from ``commit`` (``None``: it could not be told).

    The index against the commit is ``git diff-index --cached`` (no working-tree file is
    read, so no filter runs); the working tree against the index is checked here, from the
    index file: a file whose size and time match an entry written before the index is
    unchanged, any other is hashed as git would hash it (without filters)."""
    try:
        done = _git(work_tree, git_dir, "diff-index", "--cached", "--quiet",
                    "--ignore-submodules=all", commit, "--")
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode not in (0, 1):
        return None
    if done.returncode == 1:
        return True
    entries = _index_entries(git_dir / "index", len(commit) // 2)
    if entries is None:
        return None
    index_time = (git_dir / "index").stat().st_mtime_ns
    return any(_entry_changed(work_tree, index_time, *entry) for entry in entries)


def _entry_changed(work_tree: Path, index_time: int, path: str, mode: int, mtime: int,
                   size: int, sha: str, flags: int) -> bool:
    if flags & _SKIP or mode in (0o160000, 0o040000):  # skip-worktree, submodule, sparse dir
        return False
    if flags & _CONFLICT:
        return True
    file = work_tree / path
    try:
        stat = file.lstat()
    except OSError:
        return True  # deleted
    if mtime == stat.st_mtime_ns and size == stat.st_size & 0xFFFFFFFF and mtime < index_time:
        return False  # not touched since the index was written
    kind = "120000" if mode == 0o120000 else "100644"
    return _blob_id(file, kind, len(sha)) != sha


_SKIP, _CONFLICT = 1 << 30, 1 << 31  # flags of _index_entries: skip-worktree, merge conflict


def _index_entries(index: Path, sha_bytes: int) -> list[tuple] | None:
    """``(path, mode, mtime_ns, size, sha, flags)`` of each entry of git's index file
    (versions 2 to 4); ``None`` for an unreadable or split index."""
    try:
        data = index.read_bytes()
    except OSError:
        return None
    if data[:4] != b"DIRC" or len(data) < 12:
        return None
    version, count = struct.unpack(">II", data[4:12])
    if version not in (2, 3, 4):
        return None
    entries, offset, name = [], 12, b""
    for _ in range(count):
        fields = struct.unpack(">10I", data[offset:offset + 40])
        sha = data[offset + 40:offset + 40 + sha_bytes].hex()
        at = offset + 40 + sha_bytes
        (flags,) = struct.unpack(">H", data[at:at + 2])
        extra, at = 0, at + 2
        if flags & 0x4000:  # extended flags (version >= 3): skip-worktree is 0x4000
            (extra,) = struct.unpack(">H", data[at:at + 2])
            at += 2
        if version == 4:
            strip, at = _varint(data, at)
            end = data.index(b"\0", at)
            name = name[:len(name) - strip] + data[at:end]
            offset = end + 1
        else:
            end = data.index(b"\0", at)
            name = data[at:end]
            offset += (end - offset + 8) & ~7  # entries are NUL-padded to 8 bytes
        marks = (_SKIP if extra & 0x4000 else 0) | (_CONFLICT if flags & 0x3000 else 0)
        entries.append((os.fsdecode(name), fields[6], fields[2] * 10**9 + fields[3],
                        fields[9], sha, marks))
    while offset + 8 <= len(data) - sha_bytes:  # extensions: signature, size, content
        if data[offset:offset + 4] == b"link":
            return None  # a split index keeps entries in another file
        offset += 8 + struct.unpack(">I", data[offset + 4:offset + 8])[0]
    return entries


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """Git's offset varint (index version 4): the value and the position after it."""
    byte = data[at]
    value = byte & 0x7F
    while byte & 0x80:
        at += 1
        byte = data[at]
        value = ((value + 1) << 7) | (byte & 0x7F)
    return value, at + 1


def _blob_id(path: Path, mode: str, digits: int) -> str | None:
    """Git's object id of the file's bytes, or of a symbolic link's target (mode 120000):
    SHA-1, or SHA-256 in a SHA-256 repository."""
    try:
        data = os.fsencode(os.readlink(path)) if mode == "120000" else path.read_bytes()
    except OSError:
        return None
    digest = hashlib.sha1 if digits == 40 else hashlib.sha256
    return digest(b"blob %d\0" % len(data) + data).hexdigest()


def hardware_info(device: torch.device | str | None = None, world_size: int = 1) -> dict[str, Any]:
    """Device type and name, CPU count, torch threads, versions and process count."""
    device = torch.device(device or "cpu")
    return {
        "device": device.type,
        "device_name": device_name(device),
        "cuda_version": torch.version.cuda,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "world_size": world_size,
    }


def command_line(argv: Sequence[str] | None = None) -> str:
    """The command as a shell would read it back (``sys.argv`` by default)."""
    return shlex.join(list(sys.argv if argv is None else argv))


def _finite(value: Any) -> Any:
    """JSON has no NaN/inf: turn them into ``None`` (recursively)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def write_record(results_dir: str | Path, kind: str, name: str, record: dict[str, Any]) -> Path:
    """Write ``record`` as ``<results_dir>/<kind>-<name>-<UTC timestamp>.json``, atomically.

    The file is written through :func:`~transformer_book.util.files.atomic_write_json`
    (NaN and infinity become ``null``); if the name is taken (two runs in the same second),
    ``-1``, ``-2``, ... is appended.
    """
    require(isinstance(record, dict), "record", "a dict", type(record).__name__)
    folder = Path(results_dir)
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{kind}-{name}-{utc_timestamp()}"
    target = folder / f"{stem}.json"
    counter = 1
    while target.exists():
        target = folder / f"{stem}-{counter}.json"
        counter += 1
    atomic_write_json(target, _finite(record))
    return target


def read_records(results_dir: str | Path, kind: str) -> list[dict[str, Any]]:
    """The ``kind`` records (``"train"``, ``"evaluate"``, ...) that :func:`write_record` left
    in ``results_dir``, oldest first, each with ``"written"``: the UTC ``datetime`` of its
    file name (two runs of one config differ by it). No folder: no records."""
    folder = Path(results_dir)
    found = []
    for path in folder.glob(f"{kind}-*.json") if folder.is_dir() else []:
        # <kind>-<name>-<UTC time>[-<n>].json: write_record appends -1, -2, ... within a second
        name = re.search(r"(\d{8}T\d{6}Z)(?:-(\d+))?$", path.stem)
        if name is None:
            raise bad_input("results_dir", f"record files named {kind}-<name>-<UTC time>.json",
                       path.name)
        written = datetime.strptime(name.group(1), TIMESTAMP).replace(tzinfo=timezone.utc)
        found.append((written, int(name.group(2) or 0), path))
    return [{**json.loads(path.read_text(encoding="utf-8")), "written": written}
            for written, _, path in sorted(found)]
