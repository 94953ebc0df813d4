"""Checkpoints: safetensors weights and a hashed manifest, saved as one step.

A checkpoint is a folder::

    step_00001000/
        model.safetensors   the weights (Section 3.4's tied ones once, under the first name)
        tokenizer.json      optional: the BPE tokenizer the model was trained with
        optimizer.pt        optional: optimizer and schedule states, plain tensors and numbers
        rng.json            the torch / CUDA / python / numpy RNG states
        checkpoint.json     the manifest: step, config, ``extra`` (where the run stands),
                            ``tied`` ({dropped: kept}) and the sha256 of each file above
        checkpoint.sha256   the sha256 of checkpoint.json, written last: the folder is complete

**Saving** writes each file, flushed, into a hidden sibling and puts it in place as one step
(:func:`~transformer_book.util.folders.replacing`); a kill leaves the previous checkpoint or
the new one; a save tidies what a killed save of its folder left, a listing what any did.
**Loading** reads each file once and checks those bytes against the manifest before parsing
them.
"""

from __future__ import annotations

import glob
import hashlib
import io
import json
import pickle
import platform
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load, save
from torch import nn

from transformer_book.util.files import atomic_write_bytes
from transformer_book.util.folders import replacing, tidy
from transformer_book.util.rng import capture_rng_state
from transformer_book.util.validation import (
    bad_input,
    is_integer,
    require,
    require_int,
    require_positive_int,
)

__all__ = ["FORMAT_VERSION", "METADATA", "METADATA_HASH", "OPTIMIZER", "RNG", "TOKENIZER",
           "WEIGHTS", "checkpoint_name", "describe_mismatch", "list_checkpoints",
           "load_checkpoint", "load_weights", "off_grid_steps", "prune_checkpoints",
           "read_metadata", "read_step", "save_checkpoint"]

WEIGHTS, TOKENIZER, OPTIMIZER = "model.safetensors", "tokenizer.json", "optimizer.pt"
RNG, METADATA, METADATA_HASH = "rng.json", "checkpoint.json", "checkpoint.sha256"
FILES = (WEIGHTS, TOKENIZER, OPTIMIZER, RNG)  # those the manifest may list, in writing order
FORMAT_VERSION = 2  # 2: checkpoint.sha256 protects checkpoint.json (format 1 is refused)


def checkpoint_name(step: int) -> str:
    """The folder name of the checkpoint written after ``step`` updates: ``step_00001000``."""
    return f"step_{require_int(step, 'step', minimum=0):08d}"


def _stamp(manifest: bytes) -> str:
    """``checkpoint.sha256``'s text for the bytes of ``checkpoint.json``."""
    return f"{hashlib.sha256(manifest).hexdigest()}  {METADATA}\n"


# ------------------------------------------------------------------------------ saving


def save_checkpoint(
    directory: str | Path, model: nn.Module, *, config: dict[str, Any], step: int,
    tokenizer_path: str | Path | None = None, optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None, extra: dict[str, Any] | None = None,
    rng_state: dict[str, Any] | None = None,
) -> Path:
    """Write the checkpoint folder ``directory`` atomically (replacing one there); return it.

    ``config`` and ``extra`` must be JSON-serialisable; ``step`` counts the optimizer updates
    so far; ``tokenizer_path`` is the tokenizer file to copy; ``optimizer`` and ``scheduler``
    are saved for resuming; ``rng_state`` (:func:`capture_rng_state`) is captured when omitted.
    """
    require(isinstance(model, nn.Module), "model", "a torch.nn.Module", type(model).__name__)
    require_int(step, "step", minimum=0)
    config, extra = _json_ready(config, "config"), _json_ready(extra or {}, "extra")
    require(tokenizer_path is None or Path(tokenizer_path).is_file(), "tokenizer_path",
            "an existing file", str(tokenizer_path))
    tensors, tied = _split_tied(model.state_dict())
    # safetensors' own save_file makes the file 0600: serialise here, write as any other file
    files = {WEIGHTS: save(tensors, metadata={"format": "pt", "tied": json.dumps(tied)})}
    if tokenizer_path is not None:
        files[TOKENIZER] = Path(tokenizer_path).read_bytes()
    if optimizer is not None or scheduler is not None:
        buffer = io.BytesIO()
        torch.save({"optimizer": optimizer.state_dict() if optimizer else None,
                    "scheduler": scheduler.state_dict() if scheduler else None}, buffer)
        files[OPTIMIZER] = buffer.getvalue()
    files[RNG] = _json_bytes(rng_state if rng_state is not None else capture_rng_state())
    manifest = _json_bytes({
        "format_version": FORMAT_VERSION, "step": step, "config": config, "extra": extra,
        "tied": tied, "environment": {"torch": torch.__version__,
                                      "python": platform.python_version()},
        "sha256": {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}})
    files[METADATA], files[METADATA_HASH] = manifest, _stamp(manifest).encode()
    with replacing(Path(directory), METADATA_HASH) as temp:
        for name, data in files.items():  # each flushed; checkpoint.sha256 last
            atomic_write_bytes(temp / name, data)
    return Path(directory)


def _json_ready(value: Any, argument: str) -> Any:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as error:
        raise bad_input(argument, "JSON-serialisable values", f"{error}") from error


def _json_bytes(data: Any) -> bytes:
    # NaN stays allowed: a diverged validation loss in ``extra`` must not stop a save.
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


def _split_tied(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Contiguous CPU copies to store (safetensors refuses shared memory), each group of
    identical (tied) tensors once, under its first name; and ``{dropped: kept}``. Views
    that only overlap are stored apart; empty tensors have no memory to share."""
    kept: dict[tuple[Any, ...], str] = {}
    tensors: dict[str, torch.Tensor] = {}
    tied: dict[str, str] = {}
    for name, tensor in state.items():
        view = (tensor.device, tensor.data_ptr(), tensor.shape, tensor.stride(), tensor.dtype)
        if tensor.numel() and view in kept:
            tied[name] = kept[view]
        else:
            kept[view] = name
            tensors[name] = tensor.detach().to("cpu", memory_format=torch.contiguous_format,
                                               copy=True)
    return tensors, tied


# ----------------------------------------------------------------------------- loading

_HEX = re.compile(r"[0-9a-f]{64}")
#: The fields of ``checkpoint.json`` that loading reads: what is expected, and a test.
_FIELDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "format_version": (str(FORMAT_VERSION), lambda v: is_integer(v) and v == FORMAT_VERSION),
    "step": ("an integer >= 0", lambda v: is_integer(v) and v >= 0),
    "sha256": (f"an object {{file name: 64 lowercase hex digits}} listing {WEIGHTS} and only "
               f"the files of a checkpoint ({', '.join(FILES)})",
               lambda v: isinstance(v, dict) and WEIGHTS in v and set(v) <= set(FILES)
               and all(isinstance(d, str) and _HEX.fullmatch(d) for d in v.values())),
    "config": ("a JSON object", lambda v: isinstance(v, dict)),
    "extra": ("a JSON object", lambda v: isinstance(v, dict)),
    "tied": ("an object {dropped tensor name: kept tensor name}", lambda v: isinstance(v, dict)
             and all(isinstance(k, str) and isinstance(n, str) and k != n
                     for k, n in v.items())),
}
_REQUIRED = ("format_version", "step", "sha256")


def read_metadata(directory: str | Path) -> dict[str, Any]:
    """``checkpoint.json``, checked against ``checkpoint.sha256`` and field by field (the
    files it lists are verified by :func:`load_checkpoint`). Anything missing, edited or
    malformed is a :class:`BookError` naming the file and the field."""
    directory = Path(directory)
    if not directory.exists():
        tidy(directory.parent, METADATA_HASH, glob.escape(directory.name))  # a save killed?
    meta_path, hash_path = directory / METADATA, directory / METADATA_HASH
    require(_plain(meta_path), "directory", f"a checkpoint folder with {METADATA}",
            str(directory))
    require(_plain(hash_path), str(hash_path), f"the sha256 of {METADATA} (format "
            f"{FORMAT_VERSION} checkpoints have one)", "no such file")
    raw = meta_path.read_bytes()
    recorded, actual = hash_path.read_text(errors="replace"), _stamp(raw)
    require(recorded == actual, str(meta_path),
            f"sha256 {recorded.split(' ')[0][:64]!r} as recorded in {METADATA_HASH} "
            "(an edited or corrupted checkpoint.json: its config, step and hashes cannot "
            "be trusted)", f"sha256 {actual.split(' ')[0]}")
    metadata = _json_object(meta_path, raw, "checkpoint metadata")
    for name, (expected, ok) in _FIELDS.items():
        if name in metadata or name in _REQUIRED:
            require(name in metadata and ok(metadata[name]), f"{meta_path} [{name}]", expected,
                    repr(metadata[name])[:400] if name in metadata else "no such field")
    return metadata


def read_step(directory: str | Path) -> int:
    """The step a checkpoint was saved at (``checkpoint.json`` checked, its files not read)."""
    return int(read_metadata(directory)["step"])


def _plain(path: Path) -> bool:
    """A file of the folder itself: never a link (to somewhere outside) or a folder."""
    return path.is_file() and not path.is_symlink()


def _json_object(path: Path, data: bytes, what: str) -> dict[str, Any]:
    """The bytes read from ``path`` (a file of ``what``) parsed as a JSON object."""
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise bad_input(str(path), f"valid JSON ({what})", f"{error}") from error
    require(isinstance(value, dict), str(path), f"a JSON object ({what})", type(value).__name__)
    return value


def _open(directory: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The metadata and the bytes of each file it lists, read once and checked against its
    sha256. A checkpoint file present but not listed is refused: it would go unverified."""
    metadata, files = read_metadata(directory), {}
    for name in FILES:
        path, digest = directory / name, metadata["sha256"].get(name)
        if digest is None:
            require(not path.exists(), str(path), f"a file listed in {METADATA} (or none)",
                    "a file that is not listed, so it cannot be verified")
            continue
        require(path.exists(), str(path), f"a file listed in {METADATA}", "missing")
        require(_plain(path), str(path), "a plain file inside the checkpoint folder",
                "a link or a folder")
        files[name] = path.read_bytes()
        actual = hashlib.sha256(files[name]).hexdigest()
        require(actual == digest, str(path), f"sha256 {digest} (corrupted or modified file)",
                f"sha256 {actual}")
    return metadata, files


def _weights(directory: Path, metadata: dict[str, Any], files: dict[str, bytes],
             map_location: str | torch.device) -> dict[str, torch.Tensor]:
    """The verified weights as a state dict, every tied name present again."""
    try:
        state = {k: v.to(map_location) for k, v in load(files[WEIGHTS]).items()}
    except (SafetensorError, ValueError) as error:
        raise bad_input(str(directory / WEIGHTS), "a safetensors file", f"{error}") from error
    tied = metadata.get("tied", {})
    bad = sorted(f"{dropped} -> {kept}" for dropped, kept in tied.items()
                 if kept not in state or dropped in state)
    require(not bad, f"{directory / METADATA} [tied]",
            f"entries naming a tensor of {WEIGHTS} and one it does not hold", bad[:5])
    return {**state, **{dropped: state[kept] for dropped, kept in tied.items()}}


def load_weights(directory: str | Path, map_location: str | torch.device = "cpu"
                 ) -> dict[str, torch.Tensor]:
    """A checkpoint's verified weights as a state dict, tied names all present again: it
    loads with ``model.load_state_dict``."""
    directory = Path(directory)
    return _weights(directory, *_open(directory), map_location)


def describe_mismatch(
    expected: dict[str, torch.Tensor], got: dict[str, torch.Tensor], labels: str
) -> str:
    """How state dict ``got`` differs from ``expected``: missing and unexpected names, and
    shapes (``got`` vs ``expected``, as ``labels`` names them, e.g. ``"checkpoint vs
    model"``); ``""`` when they match."""
    missing, unexpected = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
    shapes = [f"{k}: {tuple(got[k].shape)} vs {tuple(expected[k].shape)}"
              for k in sorted(set(expected) & set(got)) if got[k].shape != expected[k].shape]
    return ", ".join(part for part, found in (
        (f"missing {missing}", missing), (f"unexpected {unexpected}", unexpected),
        (f"shape mismatches ({labels}) [{'; '.join(shapes)}]", shapes)) if found)


def load_checkpoint(
    directory: str | Path, model: nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None, scheduler: Any | None = None,
    map_location: str | torch.device = "cpu",
) -> dict[str, Any]:
    """Verify a checkpoint (each listed file read once), load it into the objects given and
    return ``checkpoint.json``'s contents with ``"rng_state"`` (for
    :func:`restore_rng_state`) and ``"directory"``. A corrupted file, or a ``model`` whose
    tensors differ (the names listed), is a :class:`BookError`."""
    directory = Path(directory)
    require(model is None or isinstance(model, nn.Module), "model", "a torch.nn.Module",
            type(model).__name__)
    metadata, files = _open(directory)
    if model is not None:
        state = _weights(directory, metadata, files, map_location)
        problem = describe_mismatch(model.state_dict(), state, "checkpoint vs model")
        require(not problem, "model", f"tensors matching the checkpoint in {directory}",
                problem)
        model.load_state_dict(state, strict=True)
    if optimizer is not None or scheduler is not None:
        require(OPTIMIZER in files, "optimizer", f"a checkpoint saved with optimizer state "
                f"({OPTIMIZER})", f"no {OPTIMIZER} in {directory}")
        _load_resumables(directory / OPTIMIZER, files[OPTIMIZER],
                         {"optimizer": optimizer, "scheduler": scheduler}, map_location)
    rng_state = _json_object(directory / RNG, files[RNG], "RNG states") if RNG in files else None
    return {**metadata, "rng_state": rng_state, "directory": str(directory)}


def _load_resumables(path: Path, data: bytes, objects: dict[str, Any],
                     map_location: str | torch.device) -> None:
    """Optimizer and schedule states from ``optimizer.pt``'s verified bytes into
    ``objects``; anything but plain tensors and numbers, or a state that does not fit, is a
    BookError."""
    try:
        saved = torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError) as error:
        raise bad_input(str(path), "optimizer and schedule states of plain tensors and numbers "
                        "(torch.load with weights_only=True)",
                        f"{type(error).__name__}: {str(error).strip()}"[:300]) from error
    for name, obj in objects.items():
        state = saved.get(name) if isinstance(saved, dict) else None
        if obj is not None:
            require(isinstance(state, dict), name, f"{name} state in {path}",
                    type(state).__name__)
            try:
                obj.load_state_dict(state)
            except (KeyError, ValueError, TypeError, IndexError) as error:
                raise bad_input(name, f"{name} state that fits it (from {path})",
                                f"{type(error).__name__}: {error}"[:300]) from error


# -------------------------------------------------------------------------------- runs


def list_checkpoints(run_dir: str | Path, pattern: str = "step_*") -> list[Path]:
    """Checkpoint folders in ``run_dir`` matching ``pattern``, sorted by their saved step,
    once what killed saves left is tidied. A folder whose ``checkpoint.json`` is not valid
    is a :class:`BookError` naming it, never skipped: a run is not silently resumed (or
    translated) from an older checkpoint than its newest."""
    return [path for _, path in _by_step(Path(run_dir), pattern)]


def _by_step(run_dir: Path, pattern: str) -> list[tuple[int, Path]]:
    """:func:`list_checkpoints` with each one's step (its ``checkpoint.json`` read once)."""
    if not run_dir.is_dir():
        return []
    tidy(run_dir, METADATA_HASH, pattern)
    found = [(read_step(path), path.name, path) for path in run_dir.glob(pattern)
             if not path.name.startswith(".") and path.is_dir() and (path / METADATA).is_file()]
    return [(step, path) for step, _, path in sorted(found)]


def off_grid_steps(evals: Any, every: int) -> set[int]:
    """The steps of ``evals`` (a run's evaluations) off its ``every``-step checkpoint grid:
    checkpoints training writes there only so that choosing by val can pick any evaluated
    step. They count neither among the ``keep_last`` latest nor among the checkpoints that
    averaging the last N takes (Section 6.1's were "written at 10-minute intervals")."""
    if not isinstance(evals, list):
        return set()
    return {e["step"] for e in evals
            if isinstance(e, dict) and is_integer(e.get("step")) and e["step"] % every != 0}


def prune_checkpoints(run_dir: str | Path, keep_last: int, pattern: str = "step_*",
                      keep_best: int = 0, val_loss: dict[int, float] | None = None,
                      off_grid: set[int] | None = None) -> list[Path]:
    """Delete every checkpoint but the newest, the ``keep_last`` latest of those whose step
    is not in ``off_grid`` (:func:`off_grid_steps`) and the ``keep_best`` with the lowest
    validation loss (``val_loss``: step -> loss; checkpoints of steps without one are ranked
    by age alone); return the deleted folders."""
    require_positive_int(keep_last, "keep_last")
    require_int(keep_best, "keep_best", minimum=0)
    found = _by_step(Path(run_dir), pattern)
    scored = sorted((val_loss[step], step, path) for step, path in found
                    if val_loss and step in val_loss)
    regular = [path for step, path in found if step not in (off_grid or set())]
    keep = ({path for _, path in found[-1:]} | set(regular[-keep_last:])
            | {path for *_, path in scored[:keep_best]})
    doomed = [path for _, path in found if path not in keep]
    for path in doomed:
        shutil.rmtree(path)
    return doomed
