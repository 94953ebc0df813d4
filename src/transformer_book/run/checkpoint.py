"""Checkpoints: safetensors weights, JSON metadata, atomic writes, resuming.

A checkpoint is a folder::

    step_00001000/
        model.safetensors   the weights (tied tensors stored once, see below)
        checkpoint.json     config, step, tokenizer, environment, sha256 of every file
        checkpoint.sha256   the sha256 of checkpoint.json (written last: an edited config
                            is refused, :mod:`transformer_book.run.manifest`)
        rng.json            torch / CUDA / python / numpy RNG states (JSON-friendly,
                            :mod:`transformer_book.util.rng`)
        tokenizer.json      optional: the BPE tokenizer the model was trained with
        optimizer.pt        optional: optimizer + scheduler state; plain tensors and numbers,
                            so it loads with ``torch.load(weights_only=True)``

The folder is written into a temporary sibling, fsynced, then renamed into place, so an
interrupted save leaves the previous checkpoint intact; what it leaves behind is recovered or
removed on the next save or listing (:mod:`transformer_book.run.leftovers`). Section 6.1:
"For the base models, we used a single model obtained by averaging the last 5 checkpoints,
which were written at 10-minute intervals": :func:`load_weights` reads one checkpoint's
verified weights, and :mod:`transformer_book.inference.averaging` averages several.

Tied weights (Section 3.4 shares the embeddings and the pre-softmax projection) share one
storage, which safetensors refuses to save twice: each group of identical tensors is stored
under its first name and the others are recorded in ``checkpoint.json["tied"]``
(``{dropped_name: kept_name}``) and restored on load.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save
from torch import nn

from transformer_book.run.leftovers import release, save_folder, tidy
from transformer_book.run.manifest import (
    FORMAT_VERSION,
    METADATA,
    METADATA_HASH,
    OPTIMIZER,
    RNG,
    TOKENIZER,
    WEIGHTS,
    load_resumables,
    metadata_hash_text,
    read_metadata,
    read_rng_state,
    read_step,
)
from transformer_book.util.files import (
    atomic_write_bytes,
    atomic_write_text,
    fsync_path,
    sha256_file,
)
from transformer_book.util.rng import capture_rng_state, restore_rng_state
from transformer_book.util.validation import fail, require, require_int, require_positive_int

__all__ = [
    "FORMAT_VERSION",
    "METADATA",
    "METADATA_HASH",
    "OPTIMIZER",
    "RNG",
    "TOKENIZER",
    "WEIGHTS",
    "checkpoint_name",
    "describe_mismatch",
    "list_checkpoints",
    "load_checkpoint",
    "load_weights",
    "prune_checkpoints",
    "save_checkpoint",
]


# --------------------------------------------------------------------------- file helpers


def _write_json(path: Path, data: Any) -> None:
    # Inside the temporary folder, so atomic twice over; NaN stays allowed here (a diverged
    # validation loss in ``extra`` must not stop a run from saving).
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def _json_ready(value: Any, argument: str) -> Any:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as error:
        raise fail(argument, "JSON-serialisable values", f"{error}") from error


def _split_tied(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Store each group of identical (tied) tensors once; copy views that only overlap.

    Returns ``(tensors_to_save, tied)`` with ``tied = {dropped_name: kept_name}``.
    """
    kept: dict[tuple, str] = {}
    storages: set[tuple] = set()
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


# ------------------------------------------------------------------------ save and load


def checkpoint_name(step: int) -> str:
    """The folder name of the checkpoint written after ``step`` updates: ``step_00001000``."""
    return f"step_{require_int(step, 'step', minimum=0):08d}"


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
        extra: any JSON-serialisable run state (losses, data position, ...).
        rng_state: from :func:`capture_rng_state`; captured now when omitted.
    """
    require(isinstance(model, nn.Module), "model", "a torch.nn.Module", type(model).__name__)
    require_int(step, "step", minimum=0)
    require(tokenizer_path is None or tokenizer_json is None, "tokenizer_path/tokenizer_json",
            "at most one of them", "both")
    config = _json_ready(config, "config")
    extra = _json_ready(extra or {}, "extra")
    require(tokenizer_path is None or Path(tokenizer_path).is_file(), "tokenizer_path",
            "an existing file", str(tokenizer_path))
    target = Path(directory)
    target.parent.mkdir(parents=True, exist_ok=True)
    tidy(target.parent)  # leftovers of an interrupted save: recovered or removed
    temp = save_folder(target.parent, target.name, "tmp")
    try:
        tied, num_tensors = _write_weights(temp, model)
        _write_resumables(temp, tokenizer_path, tokenizer_json, optimizer, scheduler)
        _write_json(temp / RNG, rng_state if rng_state is not None else capture_rng_state())
        _write_metadata(temp, {
            "format_version": FORMAT_VERSION, "step": step, "config": config,
            "tokenizer": TOKENIZER if (temp / TOKENIZER).exists() else None,
            "tied": tied, "num_tensors": num_tensors,
            "num_parameters": sum(p.numel() for p in model.parameters()),
            "environment": _environment(),
            "sha256": {p.name: sha256_file(p) for p in sorted(temp.iterdir())},
            "extra": extra,
        })
        for path in [*temp.iterdir(), temp]:
            fsync_path(path)
        _swap_in(temp, target)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    finally:
        release(temp)
    return target


def _write_metadata(folder: Path, metadata: dict[str, Any]) -> None:
    """``checkpoint.json``, then its own hash in ``checkpoint.sha256``: the last file
    written, so a folder holding it is complete."""
    text = json.dumps(metadata, indent=2, sort_keys=True) + "\n"
    atomic_write_text(folder / METADATA, text)
    atomic_write_text(folder / METADATA_HASH, metadata_hash_text(text.encode("utf-8")))


def _write_weights(folder: Path, model: nn.Module) -> tuple[dict[str, str], int]:
    """``model.safetensors`` in ``folder``; returns the tied names and the tensors stored."""
    tensors, tied = _split_tied(model.state_dict())
    # safetensors' own save_file makes the file 0600: serialise, then write it as any other
    atomic_write_bytes(folder / WEIGHTS, save({k: v.cpu() for k, v in tensors.items()},
                                              metadata={"format": "pt", "tied": json.dumps(tied)}))
    return tied, len(tensors)


def _write_resumables(folder: Path, tokenizer_path: str | Path | None,
                      tokenizer_json: str | None, optimizer: torch.optim.Optimizer | None,
                      scheduler: Any | None) -> None:
    """The optional files: the tokenizer (copied, or from its JSON) and ``optimizer.pt``."""
    if tokenizer_path is not None:
        shutil.copyfile(tokenizer_path, folder / TOKENIZER)
    elif tokenizer_json is not None:
        atomic_write_text(folder / TOKENIZER, tokenizer_json)
    if optimizer is not None or scheduler is not None:
        torch.save({"optimizer": optimizer.state_dict() if optimizer else None,
                    "scheduler": scheduler.state_dict() if scheduler else None},
                   folder / OPTIMIZER)


def _environment() -> dict[str, Any]:
    return {"torch": torch.__version__, "numpy": np.__version__,
            "python": platform.python_version(),
            "cuda_rng_states": torch.cuda.device_count() if torch.cuda.is_available() else 0}


def _swap_in(temp: Path, target: Path) -> None:
    """Rename ``temp`` to ``target``; an existing target is moved away first, then deleted
    (put back if the second rename fails; a crash in between is for :func:`tidy`)."""
    if not target.exists():
        os.replace(temp, target)
        fsync_path(target.parent)
        return
    old = save_folder(target.parent, target.name, "old")
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
        release(old)


def _read_metadata(directory: Path) -> dict[str, Any]:
    """Checked metadata, every file verified; a checkpoint missing after a crash between
    the renames of :func:`_swap_in` is recovered first (:func:`tidy`)."""
    if not directory.exists():
        tidy(directory.parent)
    return read_metadata(directory)


def load_weights(directory: str | Path, map_location: str | torch.device = "cpu"
                 ) -> dict[str, torch.Tensor]:
    """A checkpoint's weights as a state dict, every file's sha256 verified first.

    Tied names (stored once, see the module docstring) are all present again, so the result
    loads with ``model.load_state_dict``.
    """
    directory = Path(directory)
    return _load_state(directory, _read_metadata(directory), map_location)


def _load_state(directory: Path, metadata: dict[str, Any], map_location: str | torch.device
                ) -> dict[str, torch.Tensor]:
    path = directory / WEIGHTS
    try:
        state = load_file(str(path), device=str(map_location))
    except (SafetensorError, OSError) as error:
        raise fail(str(path), "a safetensors file", f"{error}") from error
    tied = metadata.get("tied", {})
    bad = sorted(f"{dropped} -> {kept}" for dropped, kept in tied.items()
                 if kept not in state or dropped in state)
    require(not bad, f"{directory / METADATA} [tied]",
            f"entries naming a tensor of {WEIGHTS} and one it does not hold", bad[:5])
    for dropped, kept in tied.items():
        state[dropped] = state[kept]
    return state


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
) -> dict[str, Any]:
    """Verify a checkpoint's hashes, load it into the given objects, return its metadata.

    Every file listed in ``checkpoint.json`` must match its sha256 (a corrupted file raises
    a :class:`BookError` naming it). Loading into a ``model`` whose tensors differ raises a
    :class:`BookError` listing the missing and unexpected names and the shape mismatches.

    Returns:
        ``checkpoint.json``'s contents (``step``, ``config``, ``extra``, ...) plus
        ``"rng_state"`` (for :func:`restore_rng_state`) and ``"directory"``; with
        ``restore_rng=True`` the RNG states are restored here.
    """
    directory = Path(directory)
    metadata = _read_metadata(directory)
    if model is not None:
        require(isinstance(model, nn.Module), "model", "a torch.nn.Module",
                type(model).__name__)
        state = _load_state(directory, metadata, map_location)
        expected = model.state_dict()
        problem = describe_mismatch(expected, state, "checkpoint vs model")
        require(not problem, "model", f"tensors matching the checkpoint in {directory}",
                problem)
        model.load_state_dict(state, strict=True)
    if optimizer is not None or scheduler is not None:
        load_resumables(directory, optimizer, scheduler, map_location)
    rng_state = read_rng_state(directory)
    if restore_rng:
        require(rng_state is not None, "restore_rng", f"a checkpoint with {RNG}", "none")
        restore_rng_state(rng_state)
    return {**metadata, "rng_state": rng_state, "directory": str(directory)}


# ------------------------------------------------------------------------------- runs


def list_checkpoints(run_dir: str | Path, pattern: str = "step_*") -> list[Path]:
    """Checkpoint folders in ``run_dir`` matching ``pattern``, sorted by their saved step.

    The leftovers of an interrupted save are dealt with first (a checkpoint missing after a
    crash between the renames is recovered, the rest removed; each reported on stderr,
    :mod:`transformer_book.run.leftovers`). A folder with a ``checkpoint.json`` that is not
    valid checkpoint metadata is a :class:`BookError` naming it, not skipped: a run is never
    silently resumed (or translated) from an older checkpoint than its newest.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    tidy(run_dir)
    found = []
    for path in run_dir.glob(pattern):
        if not path.name.startswith(".") and path.is_dir() and (path / METADATA).is_file():
            found.append((read_step(path), path.name, path))
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
