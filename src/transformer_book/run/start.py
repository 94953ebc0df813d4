"""A run's start manifest: what started it, written before its first step, never rewritten.

``run.json`` in the run folder holds the commit the code was at, whether the working tree
had uncommitted changes, the UTC start, a hash of the configuration and the machine. It is
written when a run starts from step 0 (a resumed run keeps the one it has) and never
changed after: the checkpoints' file times change with every copy (``cp -r``, ``touch``)
and retention deletes the earliest, so the plan guard
(:func:`transformer_book.run.plans.require_plan_precedes`) and the records read the start
from here, and a copy of a run carries its start with it.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from transformer_book.util.files import atomic_write_json
from transformer_book.util.records import git_commit, utc_timestamp
from transformer_book.util.validation import bad_input

__all__ = ["START_MANIFEST", "read_start_manifest", "write_start_manifest"]

START_MANIFEST = "run.json"
FORMAT = 1


def write_start_manifest(out_dir: Path, config: dict[str, Any], machine: dict[str, Any],
                         command: str) -> dict[str, Any]:
    """Write ``out_dir/run.json`` for a run starting now from step 0; returns it.

    ``config`` is the run's configuration as a dict (its ``data_dir`` left out of the hash:
    it says where the files are, not what they hold), ``machine`` the hardware record."""
    settings = json.loads(json.dumps(config))
    settings.get("data", {}).pop("data_dir", None)
    code = git_commit()
    manifest = {
        "format": FORMAT, "started": time.time(), "started_utc": utc_timestamp(),
        "commit": code["commit"], "dirty": code["dirty"],
        "config_sha256": hashlib.sha256(json.dumps(settings, sort_keys=True).encode()
                                        ).hexdigest(),
        "machine": machine, "command": command,
    }
    atomic_write_json(Path(out_dir) / START_MANIFEST, manifest, sort_keys=True)
    return manifest


def read_start_manifest(run_dir: str | Path) -> dict[str, Any] | None:
    """The start manifest of ``run_dir``; ``None`` for a run that has none (one started
    before manifests were written); a manifest that cannot be read is refused."""
    path = Path(run_dir) / START_MANIFEST
    if not path.exists():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise bad_input(str(path), "a readable start manifest (JSON)", error) from None
    if not (isinstance(manifest, dict) and isinstance(manifest.get("started"), (int, float))
            and "commit" in manifest):
        raise bad_input(str(path), "a start manifest with 'started' and 'commit'",
                        repr(manifest)[:80])
    return manifest
