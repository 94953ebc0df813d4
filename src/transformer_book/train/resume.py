"""Resuming a training run exactly (Section 6.1 writes checkpoints regularly; we also
continue from them).

A checkpoint written by :mod:`transformer_book.train.loop` holds the weights, Adam's
moments, the schedule, the step, the epoch, the position inside the epoch's batch order,
the loss curve, the evaluations and every RNG state. :func:`restore_run` loads all of it
after :func:`check_compatible` has made sure the run may continue from it, so on a CPU an
interrupted and resumed run computes the same losses as an uninterrupted one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from transformer_book.nn.config import TransformerConfig
from transformer_book.run.checkpoint import load_checkpoint
from transformer_book.run.config import RunConfig
from transformer_book.util.rng import restore_rng_state
from transformer_book.util.validation import require

__all__ = ["RunState", "check_compatible", "restore_run"]


@dataclass
class RunState:
    """Where a run stands: optimizer ``step``, ``epoch``, ``position`` (micro-batches of the
    epoch already used), the ``losses`` and ``evals`` so far, the training seconds of the
    earlier sessions and the checkpoint it was restored from (``None``: a fresh run)."""

    step: int = 0
    epoch: int = 0
    position: int = 0
    losses: list[dict[str, Any]] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)
    train_seconds: float = 0.0
    resumed_from: Path | None = None


def check_compatible(meta: dict[str, Any], run_config: RunConfig, config: TransformerConfig,
                     world_size: int) -> None:
    """A run folder may only be resumed with the same model, data, seed and process count.

    ``max_steps``, ``max_minutes``, evaluation and checkpoint intervals may change.
    """
    saved = meta.get("config", {})
    path = meta.get("directory")
    pairs = [("model", saved.get("model", {}), config.to_dict(), None)]
    run, now = saved.get("run", {}), run_config.to_dict()
    pairs.append(("data", run.get("data", {}), now["data"], None))
    pairs.append(("train", run.get("train", {}), now["train"], ("seed", "accumulation")))
    problems = []
    for section, old, new, keys in pairs:
        for key in sorted(set(old) | set(new)):
            if (keys is None or key in keys) and key != "data_dir" and old.get(key) != new.get(key):
                problems.append(f"[{section}] {key}: {old.get(key)!r} in the checkpoint, "
                                f"{new.get(key)!r} now")
    require(not problems, "resume", f"the config of the checkpoint {path}",
            "; ".join(problems) + " (use another --out folder, or --no-resume after "
            "removing the checkpoints)")
    saved_world = meta.get("extra", {}).get("world_size", 1)
    require(saved_world == world_size, "resume", f"{saved_world} processes as when {path} "
            "was written (the data position depends on it)", world_size)


def restore_run(checkpoint: Path, model: nn.Module, optimizer: torch.optim.Optimizer,
                scheduler: Any, scaler: torch.amp.GradScaler | None, run_config: RunConfig,
                config: TransformerConfig, world_size: int, device: torch.device) -> RunState:
    """Load ``checkpoint`` into the model, optimizer, schedule, gradient scaler and RNGs and
    return where the run stands. Raises ``ValueError`` (via :func:`check_compatible`) for a
    checkpoint of another configuration or process count, and for corrupted files."""
    saved = load_checkpoint(checkpoint)  # metadata only, files verified
    check_compatible(saved, run_config, config, world_size)
    extra = saved.get("extra", {})
    meta = load_checkpoint(checkpoint, model, optimizer, scheduler, map_location=device)
    if scaler is not None and extra.get("scaler"):
        scaler.load_state_dict(extra["scaler"])
    restore_rng_state(meta["rng_state"])
    return RunState(meta["step"], extra["epoch"], extra["position"], list(extra["losses"]),
                    list(extra["evals"]), float(extra.get("train_seconds", 0.0)), checkpoint)
