"""Checkpoints: safetensors weights, one hashed manifest, atomic saves, crash recovery.

A checkpoint is a folder::

    step_00001000/
        model.safetensors   the weights (tied tensors stored once, see below)
        tokenizer.json      optional: the BPE tokenizer the model was trained with
        optimizer.pt        optional: optimizer + schedule states, plain tensors and numbers
                            (``torch.load(weights_only=True)``)
        rng.json            torch / CUDA / python / numpy RNG states, as JSON
        checkpoint.json     the manifest: config, step, environment, ``extra`` run state and
                            the sha256 of every file above
        checkpoint.sha256   the sha256 of checkpoint.json, in ``sha256sum`` format: the last
                            file written, so an edited config is refused and a folder that
                            holds it is complete

**Saving** writes every file into a hidden sibling folder, fsyncs it and renames it into
place (an existing checkpoint is first moved aside, then deleted), so a save cut short at
any point leaves the previous checkpoint intact. **Loading** reads each listed file once,
checks its bytes against the manifest and parses those same bytes: nothing unverified is
ever parsed, and nothing is hashed twice. Format 1 (before ``checkpoint.sha256``) cannot
be told from an edited checkpoint, so it loads only with ``allow_unhashed=True``.

**Leftovers.** A save killed on the way (``kill -9``, a power cut) leaves its hidden
folders, ``.step_N.tmp-<host>-<pid>-*`` (the new copy) and ``.step_N.old-<host>-<pid>-*``
(the replaced one, in ``previous``), and, killed between the two renames, no ``step_N`` at
all. :func:`tidy` runs on every save, every listing and every load of a missing folder: for
the leftovers of processes no longer running on this machine it recovers a missing
``step_N`` from the newest copy that verifies (the new before the previous at one step),
else from the previous copy as it was, deletes the rest, and reports each on stderr.

Tied weights (Section 3.4 shares the embeddings and the pre-softmax projection) share one
storage, which safetensors refuses to save twice: each group of identical tensors is stored
under its first name, the others are recorded in ``checkpoint.json["tied"]``
(``{dropped_name: kept_name}``) and restored on load. Section 6.1 averages the last 5
checkpoints: :func:`load_weights` reads one checkpoint's verified weights, and
:mod:`transformer_book.inference.averaging` averages several.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import pickle
import platform
import re
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load, save
from torch import nn

from transformer_book.util.files import fsync_path, new_directory
from transformer_book.util.rng import capture_rng_state, restore_rng_state
from transformer_book.util.validation import (
    BookError,
    bad_input,
    is_integer,
    require,
    require_int,
    require_positive_int,
)

__all__ = ["FORMAT_VERSION", "METADATA", "METADATA_HASH", "OPTIMIZER", "RNG", "TOKENIZER",
           "WEIGHTS", "checkpoint_name", "describe_mismatch", "list_checkpoints",
           "load_checkpoint", "load_weights", "prune_checkpoints", "read_metadata", "read_step",
           "save_checkpoint", "tidy"]

WEIGHTS, TOKENIZER, OPTIMIZER = "model.safetensors", "tokenizer.json", "optimizer.pt"
RNG, METADATA, METADATA_HASH = "rng.json", "checkpoint.json", "checkpoint.sha256"
#: The files ``checkpoint.json["sha256"]`` may list, in the order they are written and read.
FILES = (WEIGHTS, TOKENIZER, OPTIMIZER, RNG)
#: 2: ``checkpoint.sha256`` protects ``checkpoint.json``; 1: without it (``allow_unhashed``).
FORMAT_VERSION = 2
_HEX = re.compile(r"[0-9a-f]{64}")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _metadata_hash_text(metadata: bytes) -> str:
    return f"{_sha256(metadata)}  {METADATA}\n"


def checkpoint_name(step: int) -> str:
    """The folder name of the checkpoint written after ``step`` updates: ``step_00001000``."""
    return f"step_{require_int(step, 'step', minimum=0):08d}"


# ------------------------------------------------------------------------------ saving


def save_checkpoint(
    directory: str | Path,
    model: nn.Module,
    *,
    config: dict[str, Any],
    step: int,
    tokenizer_path: str | Path | None = None,
    tokenizer_json: str | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    extra: dict[str, Any] | None = None,
    rng_state: dict[str, Any] | None = None,
) -> Path:
    """Write a checkpoint folder atomically and return its path.

    Args:
        directory: the checkpoint folder (e.g. ``runs/small/step_00001000``); replaced
            atomically if it exists.
        model: its ``state_dict()`` goes to ``model.safetensors``.
        config: JSON-serialisable model/run configuration (e.g. ``TransformerConfig.to_dict()``).
        step: number of optimizer updates so far.
        tokenizer_path / tokenizer_json: a tokenizer file to copy, or its JSON text.
        optimizer / scheduler: saved to ``optimizer.pt`` for resuming.
        extra: any JSON-serialisable run state (losses, where the run stands, ...).
        rng_state: from :func:`capture_rng_state`; captured now when omitted.
    """
    require(isinstance(model, nn.Module), "model", "a torch.nn.Module", type(model).__name__)
    require_int(step, "step", minimum=0)
    require(tokenizer_path is None or tokenizer_json is None, "tokenizer_path/tokenizer_json",
            "at most one of them", "both")
    config, extra = _json_ready(config, "config"), _json_ready(extra or {}, "extra")
    require(tokenizer_path is None or Path(tokenizer_path).is_file(), "tokenizer_path",
            "an existing file", str(tokenizer_path))
    tensors, tied = _split_tied(model.state_dict())
    # safetensors' own save_file makes the file 0600: serialise here, write as any other file
    files = {WEIGHTS: save({k: v.cpu() for k, v in tensors.items()},
                           metadata={"format": "pt", "tied": json.dumps(tied)})}
    if tokenizer_path is not None or tokenizer_json is not None:
        files[TOKENIZER] = (Path(tokenizer_path).read_bytes() if tokenizer_path is not None
                            else str(tokenizer_json).encode("utf-8"))
    if optimizer is not None or scheduler is not None:
        buffer = io.BytesIO()
        torch.save({"optimizer": optimizer.state_dict() if optimizer else None,
                    "scheduler": scheduler.state_dict() if scheduler else None}, buffer)
        files[OPTIMIZER] = buffer.getvalue()
    files[RNG] = _json_bytes(rng_state if rng_state is not None else capture_rng_state())
    metadata = {
        "format_version": FORMAT_VERSION, "step": step, "config": config,
        "tokenizer": TOKENIZER if TOKENIZER in files else None, "tied": tied,
        "num_tensors": len(tensors), "num_parameters": sum(p.numel() for p in model.parameters()),
        "environment": {"torch": torch.__version__, "numpy": np.__version__,
                        "python": platform.python_version(),
                        "cuda_rng_states": torch.cuda.device_count()
                        if torch.cuda.is_available() else 0},
        "sha256": {name: _sha256(data) for name, data in files.items()}, "extra": extra}
    manifest = _json_bytes(metadata)
    files[METADATA], files[METADATA_HASH] = manifest, _metadata_hash_text(manifest).encode()
    target = Path(directory)
    target.parent.mkdir(parents=True, exist_ok=True)
    tidy(target.parent)  # leftovers of an interrupted save: recovered or removed
    temp = _save_folder(target.parent, target.name, "tmp")
    try:
        for name, data in files.items():  # checkpoint.sha256 last: the folder is complete
            _write_file(temp, name, data)
        fsync_path(temp)
        _swap_in(temp, target)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    finally:
        _release(temp)
    return target


def _json_ready(value: Any, argument: str) -> Any:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as error:
        raise bad_input(argument, "JSON-serialisable values", f"{error}") from error


def _json_bytes(data: Any) -> bytes:
    # NaN stays allowed: a diverged validation loss in ``extra`` must not stop a save.
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


def _split_tied(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Store each group of identical (tied) tensors once; copy views that only overlap.

    Returns ``(tensors_to_save, tied)`` with ``tied = {dropped_name: kept_name}``.
    """
    kept: dict[tuple[Any, ...], str] = {}
    storages: set[tuple[Any, ...]] = set()
    tensors: dict[str, torch.Tensor] = {}
    tied: dict[str, str] = {}
    for name, tensor in state.items():
        tensor = tensor.detach()
        if tensor.numel() == 0:
            tensors[name] = tensor.contiguous().clone()
            continue
        storage = (tensor.device, tensor.untyped_storage().data_ptr())
        view = (*storage, tensor.storage_offset(), tuple(tensor.shape), tensor.stride(),
                tensor.dtype)
        if view in kept:
            tied[name] = kept[view]
            continue
        shared = storage in storages
        storages.add(storage)
        kept[view] = name
        # safetensors needs contiguous tensors that share no storage with any other.
        tensors[name] = tensor.contiguous().clone() if shared or not tensor.is_contiguous() \
            else tensor
    return tensors, tied


def _write_file(folder: Path, name: str, data: bytes) -> None:
    """One file of the temporary folder, flushed to disk (the folder's rename is atomic)."""
    with (folder / name).open("wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


def _swap_in(temp: Path, target: Path) -> None:
    """Rename ``temp`` to ``target``; an existing target is moved away first, then deleted
    (put back if the second rename fails; a crash in between is for :func:`tidy`)."""
    if not target.exists():
        os.replace(temp, target)
        fsync_path(target.parent)
        return
    old = _save_folder(target.parent, target.name, "old")
    try:
        os.replace(target, old / "previous")
        try:
            os.replace(temp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.replace(old / "previous", target)
            raise
        fsync_path(target.parent)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        _release(old)


# ----------------------------------------------------------------------------- loading


def read_metadata(directory: str | Path, *, allow_unhashed: bool = False) -> dict[str, Any]:
    """``checkpoint.json`` of a checkpoint folder, checked against ``checkpoint.sha256`` and
    field by field; the files it lists are not read (:func:`load_checkpoint` verifies them).

    Raises:
        BookError: naming the file (and the field): a ``checkpoint.json`` that is missing,
            not JSON, differs from its hash or has a field missing or of the wrong type, a
            file name that is not one of a checkpoint's; no ``checkpoint.sha256`` (format 1
            only with ``allow_unhashed=True``, for a checkpoint you trust).
    """
    directory = Path(directory)
    if not directory.exists():
        tidy(directory.parent)  # perhaps missing after a crash between a save's renames
    meta_path, hash_path = directory / METADATA, directory / METADATA_HASH
    require(meta_path.is_file() and not meta_path.is_symlink(), "directory",
            f"a checkpoint folder with {METADATA}", str(directory))
    raw = meta_path.read_bytes()
    hashed = hash_path.is_file() and not hash_path.is_symlink()
    if hashed:
        recorded, actual = hash_path.read_text(errors="replace"), _metadata_hash_text(raw)
        require(recorded == actual, str(meta_path),
                f"sha256 {recorded.split(' ')[0][:64]!r} as recorded in {METADATA_HASH} "
                "(an edited or corrupted checkpoint.json: its config, step and hashes cannot "
                "be trusted)", f"sha256 {actual.split(' ')[0]}")
    try:
        metadata = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise bad_input(str(meta_path), "valid JSON", f"{error}") from error
    _check_metadata(metadata, meta_path)
    if not hashed:
        version = metadata["format_version"]
        require(version == 1, str(hash_path), f"the sha256 of {METADATA} (format {version} "
                "checkpoints have one)", "no such file")
        require(allow_unhashed, str(hash_path), f"the sha256 of {METADATA} (a format 1 "
                "checkpoint has none, so an edited config cannot be told from the one it was "
                "trained with; load one you trust with allow_unhashed=True)", "no such file")
    return metadata


def _check_metadata(metadata: Any, meta_path: Path) -> None:
    """The structure of a parsed ``checkpoint.json`` (every field a save writes)."""
    def field(name: str) -> str:
        return f"{meta_path} [{name}]"

    def integer(name: str) -> None:
        value = metadata.get(name)
        require(is_integer(value) and value >= 0,
                field(name), "an integer >= 0",
                repr(value) if name in metadata else "no such field")

    require(isinstance(metadata, dict), str(meta_path), "a JSON object (checkpoint metadata)",
            type(metadata).__name__)
    version = metadata.get("format_version")
    require(is_integer(version) and version in (1, FORMAT_VERSION),
            field("format_version"), f"1 or {FORMAT_VERSION}", repr(version))
    for name in ("step", *(n for n in ("num_tensors", "num_parameters") if n in metadata)):
        integer(name)
    for name in ("config", "environment", "extra"):
        require(isinstance(metadata.get(name, {}), dict), field(name), "a JSON object",
                type(metadata.get(name)).__name__)
    tied = metadata.get("tied", {})
    require(isinstance(tied, dict) and all(isinstance(k, str) and isinstance(v, str) and k != v
                                           for k, v in tied.items()),
            field("tied"), "an object {dropped tensor name: kept tensor name}", repr(tied)[:200])
    hashes = metadata.get("sha256")
    require(isinstance(hashes, dict) and WEIGHTS in hashes, field("sha256"),
            f"an object {{file name: sha256}} listing at least {WEIGHTS}", repr(hashes)[:200])
    unknown = sorted(str(name) for name in hashes if name not in FILES)
    require(not unknown, field("sha256"), f"only the files of a checkpoint "
            f"({', '.join(FILES)})", unknown)
    bad = sorted(name for name, digest in hashes.items()
                 if not (isinstance(digest, str) and _HEX.fullmatch(digest)))
    require(not bad, field("sha256"), "64 lowercase hex digits per file",
            f"{bad[:3]} ({[hashes[name] for name in bad[:3]]!r})"[:200])
    tokenizer = metadata.get("tokenizer")
    require(tokenizer is None or (tokenizer == TOKENIZER and TOKENIZER in hashes),
            field("tokenizer"), f"null or {TOKENIZER!r} (listed in sha256)", repr(tokenizer))


def read_step(directory: str | Path) -> int:
    """The step a checkpoint was saved at (``checkpoint.json`` checked, its files not read)."""
    return int(read_metadata(directory, allow_unhashed=True)["step"])


def _verified_files(directory: Path, metadata: dict[str, Any]) -> dict[str, bytes]:
    """Every file ``checkpoint.json`` lists, read once and checked against its sha256; a
    checkpoint file present but not listed is refused (it would be read unverified)."""
    hashes, files = metadata["sha256"], {}
    for name in FILES:
        path = directory / name
        if name not in hashes:
            require(not path.exists(), str(path), f"a file listed in {METADATA} (or none)",
                    "a file that is not listed, so it cannot be verified")
            continue
        require(path.exists(), str(path), f"a file listed in {METADATA}", "missing")
        require(path.is_file() and not path.is_symlink(), str(path),
                "a plain file inside the checkpoint folder", "a link or a folder")
        data = path.read_bytes()
        actual = _sha256(data)
        require(actual == hashes[name], str(path),
                f"sha256 {hashes[name]} (corrupted or modified file)", f"sha256 {actual}")
        files[name] = data
    return files


def _state(directory: Path, metadata: dict[str, Any], data: bytes,
           map_location: str | torch.device) -> dict[str, torch.Tensor]:
    """The verified weights as a state dict, every tied name present again."""
    try:
        state = {k: v.to(map_location) for k, v in load(data).items()}
    except (SafetensorError, ValueError) as error:
        raise bad_input(str(directory / WEIGHTS), "a safetensors file", f"{error}") from error
    tied = metadata.get("tied", {})
    bad = sorted(f"{dropped} -> {kept}" for dropped, kept in tied.items()
                 if kept not in state or dropped in state)
    require(not bad, f"{directory / METADATA} [tied]",
            f"entries naming a tensor of {WEIGHTS} and one it does not hold", bad[:5])
    for dropped, kept in tied.items():
        state[dropped] = state[kept]
    return state


def load_weights(directory: str | Path, map_location: str | torch.device = "cpu", *,
                 allow_unhashed: bool = False) -> dict[str, torch.Tensor]:
    """A checkpoint's weights as a state dict, every file's sha256 verified first.

    Tied names (stored once, see the module docstring) are all present again, so the result
    loads with ``model.load_state_dict``.
    """
    directory = Path(directory)
    metadata = read_metadata(directory, allow_unhashed=allow_unhashed)
    return _state(directory, metadata, _verified_files(directory, metadata)[WEIGHTS],
                  map_location)


def describe_mismatch(
    expected: dict[str, torch.Tensor], got: dict[str, torch.Tensor], labels: str
) -> str:
    """How state dict ``got`` differs from ``expected``: its missing and unexpected names
    and its shape mismatches (each ``got`` vs ``expected``, which ``labels`` names, e.g.
    ``"checkpoint vs model"``); ``""`` when they match."""
    missing = sorted(set(expected) - set(got))
    unexpected = sorted(set(got) - set(expected))
    shapes = [f"{k}: {tuple(got[k].shape)} vs {tuple(expected[k].shape)}"
              for k in sorted(set(expected) & set(got)) if got[k].shape != expected[k].shape]
    parts = []
    if missing:
        parts.append(f"missing {missing}")
    if unexpected:
        parts.append(f"unexpected {unexpected}")
    if shapes:
        parts.append(f"shape mismatches ({labels}) [{'; '.join(shapes)}]")
    return ", ".join(parts)


def load_checkpoint(
    directory: str | Path,
    model: nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    map_location: str | torch.device = "cpu",
    restore_rng: bool = False,
    *,
    allow_unhashed: bool = False,
) -> dict[str, Any]:
    """Verify a checkpoint, load it into the given objects and return its metadata.

    Every file listed in ``checkpoint.json`` is read once and must match its sha256 (a
    corrupted file raises a :class:`BookError` naming it); what is loaded is parsed from
    those verified bytes. Loading into a ``model`` whose tensors differ raises a
    :class:`BookError` listing the missing and unexpected names and the shape mismatches;
    ``optimizer.pt`` holds plain tensors and numbers only (``weights_only``). A checkpoint
    without ``checkpoint.sha256`` (format 1) loads only with ``allow_unhashed=True``.

    Returns:
        ``checkpoint.json``'s contents (``step``, ``config``, ``extra``, ...) plus
        ``"rng_state"`` (for :func:`restore_rng_state`) and ``"directory"``; with
        ``restore_rng=True`` the RNG states are restored here.
    """
    directory = Path(directory)
    require(model is None or isinstance(model, nn.Module), "model", "a torch.nn.Module",
            type(model).__name__)
    metadata = read_metadata(directory, allow_unhashed=allow_unhashed)
    files = _verified_files(directory, metadata)
    if model is not None:
        state = _state(directory, metadata, files[WEIGHTS], map_location)
        problem = describe_mismatch(model.state_dict(), state, "checkpoint vs model")
        require(not problem, "model", f"tensors matching the checkpoint in {directory}",
                problem)
        model.load_state_dict(state, strict=True)
    if optimizer is not None or scheduler is not None:
        require(OPTIMIZER in files, "optimizer", f"a checkpoint saved with optimizer state "
                f"({OPTIMIZER})", f"no {OPTIMIZER} in {directory}")
        _load_resumables(directory / OPTIMIZER, files[OPTIMIZER], optimizer, scheduler,
                         map_location)
    rng_state = _rng_state(directory / RNG, files[RNG]) if RNG in files else None
    if restore_rng:
        require(rng_state is not None, "restore_rng", f"a checkpoint with {RNG}", "none")
        restore_rng_state(rng_state or {})
    return {**metadata, "rng_state": rng_state, "directory": str(directory)}


def _load_resumables(path: Path, data: bytes, optimizer: torch.optim.Optimizer | None,
                     scheduler: Any | None, map_location: str | torch.device) -> None:
    """Optimizer and schedule states from ``optimizer.pt``'s verified bytes; anything but
    plain tensors and numbers, or a state that does not fit, is a BookError."""
    try:
        saved = torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise bad_input(str(path), "optimizer and schedule states of plain tensors and numbers "
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
                raise bad_input(name, f"{name} state that fits it (from {path})",
                           f"{type(error).__name__}: {error}"[:300]) from error


def _rng_state(path: Path, data: bytes) -> dict[str, Any]:
    try:
        state = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise bad_input(str(path), "valid JSON (RNG states)", f"{error}") from error
    require(isinstance(state, dict), str(path), "a JSON object of RNG states",
            type(state).__name__)
    return state


# -------------------------------------------------------------------------------- runs


def list_checkpoints(run_dir: str | Path, pattern: str = "step_*") -> list[Path]:
    """Checkpoint folders in ``run_dir`` matching ``pattern``, sorted by their saved step.

    The leftovers of an interrupted save are dealt with first (:func:`tidy`). A folder with
    a ``checkpoint.json`` that is not valid checkpoint metadata is a :class:`BookError`
    naming it, not skipped: a run is never silently resumed (or translated) from an older
    checkpoint than its newest.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    tidy(run_dir)
    found = [(read_step(path), path.name, path) for path in run_dir.glob(pattern)
             if not path.name.startswith(".") and path.is_dir() and (path / METADATA).is_file()]
    return [path for *_, path in sorted(found)]


def prune_checkpoints(run_dir: str | Path, keep_last: int, pattern: str = "step_*",
                      keep_best: int = 0, val_loss: dict[int, float] | None = None) -> list[Path]:
    """Delete every checkpoint but the ``keep_last`` latest and the ``keep_best`` with the
    lowest validation loss (``val_loss``: step -> loss; checkpoints of steps without one
    are ranked by age alone); return the deleted folders."""
    require_positive_int(keep_last, "keep_last")
    require_int(keep_best, "keep_best", minimum=0)
    found = [(read_step(path), path) for path in list_checkpoints(run_dir, pattern)]
    scored = sorted((val_loss[step], step, path) for step, path in found
                    if val_loss and step in val_loss)
    keep = {path for _, path in found[-keep_last:]} | {path for *_, path in scored[:keep_best]}
    doomed = [path for _, path in found if path not in keep]
    for path in doomed:
        shutil.rmtree(path)
    return doomed


# ------------------------------------------------------- leftovers of interrupted saves

_STARTED = time.time()  # leftovers of the old naming (no process id) older than this are stale
_HOST = re.sub(r"[^A-Za-z0-9]", "_", socket.gethostname()) or "host"
_LEFTOVER = re.compile(r"\.(?P<target>.+)\.(?P<kind>tmp|old)-"
                       r"(?:(?P<host>[A-Za-z0-9_]+)-(?P<pid>\d+)-)?[a-z0-9_]+")
_ACTIVE: set[str] = set()  # this process's saves in progress: never leftovers


def _save_folder(parent: Path, name: str, kind: str) -> Path:
    """A new hidden folder for a save of checkpoint ``name``: ``kind`` ``"tmp"`` (the new
    copy is written into it) or ``"old"`` (the replaced one is moved into it); in progress
    until :func:`_release`."""
    path = new_directory(parent, f".{name}.{kind}-{_HOST}-{os.getpid()}-")
    _ACTIVE.add(os.path.abspath(path))
    return path


def _release(path: Path) -> None:
    """The save using ``path`` is over: what is left of it is a leftover."""
    _ACTIVE.discard(os.path.abspath(path))


def _stale(path: Path, host: str | None, pid: int | None) -> bool:
    """Whether the process that made ``path`` is gone (so nothing will finish or remove it);
    another machine's folders are never judged."""
    if pid is None:
        return path.stat().st_mtime < _STARTED
    if host != _HOST:
        return False
    if pid == os.getpid():
        return os.path.abspath(path) not in _ACTIVE
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's running process
        return False
    return False


def _say(message: str) -> None:
    print(f"transformer_book: {message}", file=sys.stderr)


def tidy(parent: str | Path) -> list[Path]:
    """Recover and clean the stale leftovers of saves in ``parent`` (see the module
    docstring); return the checkpoints recovered.

    Each recovery and removal is reported on stderr; a folder that cannot be renamed or
    removed (a read-only copy of a run) is reported and left as it is.
    """
    parent = Path(parent)
    groups: dict[str, list[tuple[Path, str, str]]] = {}  # target -> (folder, kind, pid)
    for path in sorted(parent.iterdir()) if parent.is_dir() else []:
        match = _LEFTOVER.fullmatch(path.name)
        if match and path.is_dir() and not path.is_symlink() and _stale(
                path, match["host"], int(match["pid"]) if match["pid"] else None):
            groups.setdefault(match["target"], []).append(
                (path, match["kind"], match["pid"] or "unknown"))
    recovered = []
    for target, group in sorted(groups.items()):
        destination = parent / target
        source = None if destination.exists() else _newest_complete(group)
        if source is not None:
            folder, kind = source
            try:
                os.replace(folder if kind == "tmp" else folder / "previous", destination)
            except OSError as error:
                if not destination.exists():  # else another process recovered it just now
                    _say(f"{destination}: could not recover it from {folder.name} ({error})")
            else:
                recovered.append(destination)
                what = "the new copy" if kind == "tmp" else "the previous copy"
                _say(f"{destination}: recovered from {folder.name} ({what}; a save was "
                     f"interrupted before renaming it into place)")
        for folder, _, pid in group:
            if folder.exists():
                shutil.rmtree(folder, ignore_errors=True)
                state = "could not remove" if folder.exists() else "removed"
                _say(f"{parent}: {state} {folder.name}, left by an interrupted checkpoint "
                     f"save (process {pid})")
    return recovered


def _newest_complete(group: list[tuple[Path, str, str]]) -> tuple[Path, str] | None:
    """The copy to recover a missing checkpoint from: the highest step whose files all
    verify (the new copy before the previous one at one step), else the previous one."""
    verified = []
    for folder, kind, _ in group:
        checkpoint = folder if kind == "tmp" else folder / "previous"
        try:
            metadata = read_metadata(checkpoint) if checkpoint.is_dir() else None
            if metadata is None:
                continue
            _verified_files(checkpoint, metadata)
        except (BookError, OSError):
            continue
        verified.append((metadata["step"], kind == "tmp", folder.name, (folder, kind)))
    if verified:
        return max(verified, key=lambda item: item[:3])[3]
    previous = [(folder, kind) for folder, kind, _ in group
                if kind == "old" and (folder / "previous").is_dir()]
    return previous[-1] if previous else None
