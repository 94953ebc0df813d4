"""Resuming a training run exactly (Section 6.1 writes checkpoints regularly; we also
continue from them).

A checkpoint written by :mod:`transformer_book.train.loop` holds the weights, Adam's
moments, the schedule, the step, the epoch and the steps taken in it, the loss curve, the
evaluations and every RNG state. :func:`restore_run` loads all of it after
:func:`check_resumable` has made sure the run may continue from it, so on a CPU an
interrupted and resumed run computes the same losses as an uninterrupted one. Only the
bookkeeping settings may change on the way (:data:`BOOKKEEPING`); anything that changes
how the weights are updated is refused with :class:`ConfigMismatchError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from transformer_book.nn.config import LEGACY_LAYOUT, TransformerConfig
from transformer_book.run.checkpoint import load_checkpoint, read_metadata
from transformer_book.run.config import RunConfig, with_data_defaults
from transformer_book.util.rng import restore_rng_state
from transformer_book.util.validation import BookError, is_integer, require

__all__ = ["BOOKKEEPING", "ConfigMismatchError", "RunState", "check_compatible",
           "check_resumable", "restore_run"]

# [train] settings a resumed run may change: they say how long to train and what to keep,
# not how the weights are updated.
BOOKKEEPING = ("max_steps", "max_minutes", "eval_every", "checkpoint_every", "keep_last",
               "keep_best")


class ConfigMismatchError(BookError):
    """A run folder's checkpoint was written with another configuration (or process count)
    than the run asked to continue from it: the one refusal after which starting afresh,
    in another folder, is the remedy."""


@dataclass
class RunState:
    """Where a run stands between two optimizer steps, as its checkpoints record it (in
    ``extra``): the ``epoch``, the optimizer steps already taken in it
    (``steps_into_epoch``: the next step takes the epoch's batch of that index), the
    ``losses`` and ``evals`` so far and the training seconds of the earlier sessions."""

    epoch: int = 0
    steps_into_epoch: int = 0
    losses: list[dict[str, Any]] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)
    train_seconds: float = 0.0

    @classmethod
    def from_extra(cls, extra: dict[str, Any], accumulation: int) -> RunState:
        """The state a checkpoint's ``extra`` records. Checkpoints written before
        ``steps_into_epoch`` counted the epoch's micro-batches (``position``): all of its
        steps but the last take ``accumulation`` of them."""
        steps = extra.get("steps_into_epoch")
        if steps is None:
            steps = -(-extra["position"] // accumulation)  # ceil: the last step may be short
        return cls(epoch=extra["epoch"], steps_into_epoch=steps,
                   losses=list(extra["losses"]), evals=list(extra["evals"]),
                   train_seconds=float(extra.get("train_seconds", 0.0)))


def check_compatible(meta: dict[str, Any], run_config: RunConfig, config: TransformerConfig,
                     world_size: int, precision: str | None = None) -> None:
    """A run folder may only be resumed with the same model, data, optimisation and process
    count: raises :class:`ConfigMismatchError` naming each changed setting with its saved
    and its new value.

    Every ``[train]`` setting counts except :data:`BOOKKEEPING` (``max_steps``,
    ``max_minutes``, the evaluation and checkpoint intervals, ``keep_last``, ``keep_best``):
    a changed ``lr_factor``, ``warmup_steps``, ``clip_norm``, ``precision``,
    ``accumulation`` or ``seed`` would change the run half-way while its record shows one
    value for all of it. ``precision``, when given, is the one this session trains in
    ("fp32", "bf16", "fp16"; "auto" resolved), compared with the one the checkpoint was
    trained in.
    """
    saved = _table(meta.get("config"))
    path = meta.get("directory")
    run, now = _table(saved.get("run")), run_config.to_dict()
    model = _table(saved.get("model"))
    if model and "final_norm" not in model and "generator_bias" not in model:
        model = {**model, **LEGACY_LAYOUT}  # saved before the layout fields: nn.Transformer's
    pairs = [("model", model, config.to_dict(), ()),
             ("data", with_data_defaults(_table(run.get("data"))), now["data"], ("data_dir",)),
             ("train", _table(run.get("train")), now["train"], BOOKKEEPING)]
    problems = [f"[{section}] {key}: {old.get(key)!r} in the checkpoint, {new.get(key)!r} now"
                for section, old, new, free in pairs
                for key in sorted(set(old) | set(new))
                if key not in free and old.get(key) != new.get(key)]
    extra = _table(meta.get("extra"))
    trained_in = extra.get("precision")
    if precision is not None and trained_in is not None and trained_in != precision:
        problems.append(f"precision (resolved for the device): {trained_in!r} in the "
                        f"checkpoint, {precision!r} now")
    if problems:
        raise ConfigMismatchError(
            f"resume: expected the config of the checkpoint {path}, received "
            + "; ".join(problems) + " (use another --out folder, or --no-resume after "
            "removing the checkpoints)")
    saved_world = extra.get("world_size", 1)
    if saved_world != world_size:
        raise ConfigMismatchError(
            f"resume: expected {saved_world} processes as when {path} was written (the batches "
            f"each process takes depend on it), received {world_size}")


def check_resumable(checkpoint: Path, run_config: RunConfig, world_size: int,
                    precision: str | None = None) -> dict[str, Any]:
    """Check that the run may continue from ``checkpoint`` before anything is prepared.

    Reads the checkpoint's ``checkpoint.json`` (checked against its own hash; the files it
    lists are verified once, when :func:`restore_run` loads them) and runs
    :func:`check_compatible` with the model config this run would build for the saved
    vocabulary size (the same vocabulary, since ``[data]`` must be unchanged), so a
    refused resume has not yet retrained the run folder's tokenizer. Returns the metadata.
    """
    meta = {**read_metadata(checkpoint), "directory": str(checkpoint)}
    vocab_size: Any = _table(_table(meta.get("config")).get("model")).get("vocab_size")
    require(is_integer(vocab_size) and vocab_size > 0,
            f"{checkpoint}/checkpoint.json config.model.vocab_size", "a positive integer",
            repr(vocab_size))
    check_compatible(meta, run_config, run_config.model_config(vocab_size), world_size,
                     precision)
    return meta


def _table(value: Any) -> dict[str, Any]:
    """``value`` if it is a dict, else an empty one (a malformed section differs from any)."""
    return value if isinstance(value, dict) else {}


def restore_run(checkpoint: Path, checked: dict[str, Any], model: nn.Module,
                optimizer: torch.optim.Optimizer, scheduler: Any,
                scaler: torch.amp.GradScaler | None, device: torch.device,
                accumulation: int) -> tuple[int, RunState]:
    """Load ``checkpoint`` into the model, optimizer, schedule, gradient scaler and RNGs and
    return its step and where the run stands. ``checked`` is its metadata as
    :func:`check_resumable` accepted it: a ``checkpoint.json`` changed since is refused
    (:class:`ConfigMismatchError`), and corrupted files are a :class:`BookError`. Every
    file is read and hashed once, here."""
    meta = load_checkpoint(checkpoint, model, optimizer, scheduler, map_location=device)
    if {**meta, "directory": None, "rng_state": None} != {**checked, "directory": None,
                                                           "rng_state": None}:
        raise ConfigMismatchError(f"resume: expected {checkpoint}/checkpoint.json as checked "
                                  "before the data were prepared, received another one (the "
                                  "checkpoint changed while the run started)")
    extra = meta["extra"]
    if scaler is not None and extra.get("scaler"):
        scaler.load_state_dict(extra["scaler"])
    restore_rng_state(meta["rng_state"])
    return meta["step"], RunState.from_extra(extra, accumulation)
