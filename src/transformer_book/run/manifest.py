"""What a checkpoint folder holds, and the checks that its ``checkpoint.json`` passes.

``checkpoint.json`` lists the sha256 of every other file; ``checkpoint.sha256`` (written
last, in ``sha256sum`` format) holds the sha256 of ``checkpoint.json`` itself, so an edited
config (``norm_first`` flipped: the same shapes, other logits) is refused rather than loaded.
Format 1 checkpoints (written before that file existed) still load, without that protection.

:func:`read_metadata` checks the metadata's whole structure (a :class:`BookError` names the
file and the field), accepts only the known file names of a checkpoint (no paths, no links
out of the folder) and verifies every listed file's sha256; :func:`read_step` checks the
structure only (no hashing), for listing a run's checkpoints. :func:`read_rng_state` and
:func:`load_resumables` read ``rng.json`` and ``optimizer.pt`` (plain tensors and numbers
only: ``torch.load(weights_only=True)``), a malformed or malicious file a BookError too.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import re
from pathlib import Path
from typing import Any

import torch

from transformer_book.util.files import sha256_file
from transformer_book.util.validation import fail, require

__all__ = [
    "FORMAT_VERSION",
    "HASHED_FILES",
    "METADATA",
    "METADATA_HASH",
    "OPTIMIZER",
    "RNG",
    "TOKENIZER",
    "WEIGHTS",
    "load_resumables",
    "metadata_hash_text",
    "read_metadata",
    "read_rng_state",
    "read_step",
    "validate_metadata",
]

WEIGHTS = "model.safetensors"
METADATA = "checkpoint.json"
METADATA_HASH = "checkpoint.sha256"
RNG = "rng.json"
TOKENIZER = "tokenizer.json"
OPTIMIZER = "optimizer.pt"
#: 2: ``checkpoint.sha256`` protects ``checkpoint.json``; 1: without it (still loadable).
FORMAT_VERSION = 2
#: The files ``checkpoint.json["sha256"]`` may list: nothing else is ever read or hashed.
HASHED_FILES = (WEIGHTS, RNG, TOKENIZER, OPTIMIZER)
_HEX = re.compile(r"[0-9a-f]{64}")


def metadata_hash_text(metadata_bytes: bytes) -> str:
    """The contents of ``checkpoint.sha256``: ``"<sha256>  checkpoint.json\\n"``."""
    return f"{hashlib.sha256(metadata_bytes).hexdigest()}  {METADATA}\n"


def _load(directory: Path) -> tuple[dict[str, Any], Path]:
    """``checkpoint.json`` parsed, its own hash checked (format 2), its structure checked."""
    meta_path = directory / METADATA
    require(meta_path.is_file() and not meta_path.is_symlink(), "directory",
            f"a checkpoint folder with {METADATA}", str(directory))
    raw = meta_path.read_bytes()
    hash_path = directory / METADATA_HASH
    if hash_path.is_file() and not hash_path.is_symlink():
        recorded = hash_path.read_text(encoding="utf-8", errors="replace")
        actual = metadata_hash_text(raw)
        require(recorded == actual, str(meta_path),
                f"sha256 {recorded.split(' ')[0][:64]!r} as recorded in {METADATA_HASH} "
                "(an edited or corrupted checkpoint.json: its config, step and hashes cannot "
                "be trusted)", f"sha256 {actual.split(' ')[0]}")
    try:
        metadata = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise fail(str(meta_path), "valid JSON", f"{error}") from error
    validate_metadata(metadata, meta_path)
    require(hash_path.is_file() or metadata["format_version"] == 1, str(hash_path),
            f"the sha256 of {METADATA} (format {metadata['format_version']} checkpoints "
            "have one)", "no such file")
    return metadata, meta_path


def _field(meta_path: Path, name: str) -> str:
    return f"{meta_path} [{name}]"


def _require_int(metadata: dict[str, Any], meta_path: Path, name: str, minimum: int = 0
                 ) -> None:
    value = metadata.get(name)
    require(isinstance(value, int) and not isinstance(value, bool) and value >= minimum,
            _field(meta_path, name), f"an integer >= {minimum}",
            repr(value) if name in metadata else "no such field")


def validate_metadata(metadata: Any, meta_path: Path) -> None:
    """Check the structure of a parsed ``checkpoint.json`` (every field a save writes)."""
    require(isinstance(metadata, dict), str(meta_path), "a JSON object (checkpoint metadata)",
            type(metadata).__name__)
    version = metadata.get("format_version")
    require(version in (1, FORMAT_VERSION) and not isinstance(version, bool),
            _field(meta_path, "format_version"), f"1 or {FORMAT_VERSION}", repr(version))
    _require_int(metadata, meta_path, "step")
    for name in ("num_tensors", "num_parameters"):
        if name in metadata:
            _require_int(metadata, meta_path, name)
    for name in ("config", "environment", "extra"):
        require(isinstance(metadata.get(name, {}), dict), _field(meta_path, name),
                "a JSON object", type(metadata.get(name)).__name__)
    tied = metadata.get("tied", {})
    require(isinstance(tied, dict) and all(isinstance(k, str) and isinstance(v, str) and k != v
                                           for k, v in tied.items()),
            _field(meta_path, "tied"), "an object {dropped tensor name: kept tensor name}",
            repr(tied)[:200])
    hashes = metadata.get("sha256")
    require(isinstance(hashes, dict) and WEIGHTS in hashes, _field(meta_path, "sha256"),
            f"an object {{file name: sha256}} listing at least {WEIGHTS}", repr(hashes)[:200])
    unknown = sorted(str(name) for name in hashes if name not in HASHED_FILES)
    require(not unknown, _field(meta_path, "sha256"),
            f"only the files of a checkpoint ({', '.join(HASHED_FILES)})", unknown)
    bad = sorted(name for name, digest in hashes.items()
                 if not (isinstance(digest, str) and _HEX.fullmatch(digest)))
    require(not bad, _field(meta_path, "sha256"), "64 lowercase hex digits per file",
            f"{bad[:3]} ({[hashes[name] for name in bad[:3]]!r})"[:200])
    tokenizer = metadata.get("tokenizer")
    require(tokenizer is None or (tokenizer == TOKENIZER and TOKENIZER in hashes),
            _field(meta_path, "tokenizer"), f"null or {TOKENIZER!r} (listed in sha256)",
            repr(tokenizer))


def read_step(directory: str | Path) -> int:
    """The step of a checkpoint folder, its ``checkpoint.json`` checked (not the files)."""
    metadata, _ = _load(Path(directory))
    return metadata["step"]


def read_metadata(directory: str | Path) -> dict[str, Any]:
    """``checkpoint.json`` of a checkpoint folder, checked, with every listed file verified.

    Raises:
        BookError: naming the file (and the field): not JSON, a field missing or of the wrong
            type, a file name that is not one of a checkpoint's, a file that is missing, a
            link or whose sha256 differs, a ``checkpoint.json`` that differs from its hash,
            or a checkpoint file present but not listed (it would be read unverified).
    """
    directory = Path(directory)
    metadata, _ = _load(directory)
    hashes = metadata["sha256"]
    for name in HASHED_FILES:
        path = directory / name
        if name not in hashes:
            require(not path.exists(), str(path), f"a file listed in {METADATA} (or none)",
                    "a file that is not listed, so it cannot be verified")
            continue
        require(path.exists(), str(path), f"a file listed in {METADATA}", "missing")
        require(path.is_file() and not path.is_symlink(), str(path),
                "a plain file inside the checkpoint folder", "a link or a folder")
        actual = sha256_file(path)
        require(actual == hashes[name], str(path),
                f"sha256 {hashes[name]} (corrupted or modified file)", f"sha256 {actual}")
    return metadata


def load_resumables(directory: Path, optimizer: torch.optim.Optimizer | None,
                    scheduler: Any | None, map_location: str | torch.device) -> None:
    """Optimizer and schedule states from ``optimizer.pt``: plain tensors and numbers only
    (``weights_only``); anything else, or a state that does not fit, is a BookError."""
    path = directory / OPTIMIZER
    require(path.is_file(), "optimizer", f"a checkpoint saved with optimizer state "
            f"({OPTIMIZER})", f"no {OPTIMIZER} in {directory}")
    try:
        saved = torch.load(path, map_location=map_location, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise fail(str(path), "optimizer and schedule states of plain tensors and numbers "
                   "(torch.load with weights_only=True)",
                   f"{type(error).__name__}: {first_line}"[:300]) from error
    require(isinstance(saved, dict), str(path), "a dict with 'optimizer' and 'scheduler'",
            type(saved).__name__)
    for name, obj in (("optimizer", optimizer), ("scheduler", scheduler)):
        if obj is not None:
            require(isinstance(saved.get(name), dict), name, f"{name} state in {path}",
                    "none" if saved.get(name) is None else type(saved[name]).__name__)
            try:
                obj.load_state_dict(saved[name])
            except (KeyError, ValueError, TypeError, IndexError) as error:
                raise fail(name, f"{name} state that fits it (from {path})",
                           f"{type(error).__name__}: {error}"[:300]) from error


def read_rng_state(directory: Path) -> dict[str, Any] | None:
    """``rng.json``'s RNG states (for ``restore_rng_state``), or ``None`` without one."""
    path = directory / RNG
    if not path.is_file():
        return None
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise fail(str(path), "valid JSON (RNG states)", f"{error}") from error
    require(isinstance(state, dict), str(path), "a JSON object of RNG states",
            type(state).__name__)
    return state
