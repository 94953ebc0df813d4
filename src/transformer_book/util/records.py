"""JSON records of real runs: what was run, on what, from which commit, with what result.

Every ``transformer-book train`` and ``transformer-book evaluate`` writes one record into
``results/`` (the book's results page reads them). A record is only ever produced by running
the code -- never written by hand -- so each carries the git commit, the hardware, the
command line and the wall time next to the numbers.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from transformer_book.util.env import device_name
from transformer_book.util.files import atomic_write_json
from transformer_book.util.validation import require

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
    back to the current folder. Without git or a repository (a copy of the working tree on
    another machine), the commit is ``$TRANSFORMER_BOOK_COMMIT`` if set, else "unknown".
    """
    for folder in ([directory] if directory is not None else [_REPO_ROOT, Path.cwd()]):
        try:
            commit = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"],
                                    capture_output=True, text=True, timeout=10, check=True)
            status = subprocess.run(["git", "-C", str(folder), "status", "--porcelain",
                                     "--untracked-files=no"],
                                    capture_output=True, text=True, timeout=10, check=True)
        except (OSError, subprocess.SubprocessError):
            continue
        return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}
    return {"commit": os.environ.get(COMMIT_ENV, "unknown"), "dirty": None}


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
        require(name is not None, "results_dir",
                f"record files named {kind}-<name>-<UTC time>.json", path.name)
        written = datetime.strptime(name.group(1), TIMESTAMP).replace(tzinfo=timezone.utc)
        found.append((written, int(name.group(2) or 0), path))
    return [{**json.loads(path.read_text(encoding="utf-8")), "written": written}
            for written, _, path in sorted(found)]
