"""A trained run, ready to translate: the model rebuilt from its checkpoint, its weights
(one checkpoint's, or the average of the last few), its tokenizer and its run config.

Section 6.1: "For the base models, we used a single model obtained by averaging the last 5
checkpoints" -- :func:`load_trained` with ``average=5``. The CLI's ``translate`` and
``evaluate`` and chapter 11 start here; :mod:`transformer_book.inference.translate` then
decodes with the loaded model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from transformer_book.data.tokenizer import BPETokenizer
from transformer_book.inference.averaging import average_checkpoints
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer
from transformer_book.run.checkpoint import (
    METADATA,
    TOKENIZER,
    list_checkpoints,
    load_checkpoint,
)
from transformer_book.run.config import RunConfig
from transformer_book.run.leftovers import tidy
from transformer_book.run.manifest import read_step
from transformer_book.util.env import require_device
from transformer_book.util.validation import require, require_positive_int

__all__ = ["TrainedModel", "load_trained", "resolve_checkpoint"]


@dataclass
class TrainedModel:
    """A model ready to translate, with what it was trained with.

    Fields: ``model`` (eval mode, on its device), ``tokenizer``, ``model_config``,
    ``run_config``, ``step`` (of the newest checkpoint used) and ``checkpoints`` (every
    folder whose weights went in: one, or the averaged ones).
    """

    model: nn.Module
    tokenizer: BPETokenizer
    model_config: TransformerConfig
    run_config: RunConfig
    step: int
    checkpoints: list[Path] = field(default_factory=list)


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint folder, or the newest checkpoint of a run folder (``runs/small``).

    The leftovers of an interrupted save are dealt with first
    (:mod:`transformer_book.run.leftovers`): a checkpoint missing after a crash between the
    renames of its save is recovered, so a run folder gives its newest complete checkpoint.
    """
    path = Path(path)
    if not path.exists() and path.parent.is_dir():
        tidy(path.parent)  # a checkpoint named but missing: perhaps a save's crash
    require(path.exists(), "checkpoint", "an existing checkpoint or run folder", str(path))
    if (path / METADATA).is_file():
        return path
    found = list_checkpoints(path)
    require(bool(found), "checkpoint",
            f"a checkpoint folder (with {METADATA}) or a run folder holding step_* checkpoints",
            f"{path} (none found)")
    return found[-1]


def _configs(metadata: dict[str, Any], directory: Path) -> tuple[TransformerConfig, RunConfig]:
    config = metadata.get("config")
    require(isinstance(config, dict) and {"model", "run"} <= set(config), str(directory),
            "a checkpoint written by the training loop (config with 'model' and 'run')",
            f"config keys {sorted(config) if isinstance(config, dict) else config!r}")
    return (TransformerConfig.from_dict(config["model"]),
            RunConfig.from_dict(config["run"], source=f"{directory}/{METADATA} [run]"))


def _device(device: torch.device | str | None) -> torch.device:
    """Where to put the model (default the CPU), checked before anything is loaded."""
    return torch.device("cpu") if device is None else require_device(device)


def _to_average(directory: Path, step: int, average: int) -> list[Path]:
    """The ``average`` checkpoints of ``directory``'s run that end with it (by step)."""
    run_dir = directory.parent
    earlier = [p for p in list_checkpoints(run_dir)
               if p.resolve() != directory.resolve() and read_step(p) <= step]
    require(len(earlier) + 1 >= average, "average",
            f"at most the {len(earlier) + 1} checkpoints of {run_dir} up to and including "
            f"{directory.name}", average)
    return [*earlier[len(earlier) + 1 - average:], directory]


def load_trained(
    checkpoint: str | Path,
    device: torch.device | str | None = None,
    average: int | None = None,
) -> TrainedModel:
    """Build the model a checkpoint was trained as and load its weights.

    Args:
        checkpoint: a checkpoint folder, or a run folder (its newest checkpoint is used).
        device: where to put the model (default CPU): cpu, cuda, cuda:N or mps, one this
            machine has (checked first).
        average: if given, load the element-wise mean of ``average`` checkpoints of the run
            (Section 6.1): the last ``average`` up to and including the one ``checkpoint``
            names (the newest for a run folder); they must all come from the same config.

    Raises:
        BookError: corrupted files (sha256), a folder that is no checkpoint, checkpoints
            of different configs, or fewer than ``average`` checkpoints.
    """
    target = _device(device)
    directory = resolve_checkpoint(checkpoint)
    metadata = load_checkpoint(directory)  # verifies every file's sha256
    model_config, run_config = _configs(metadata, directory)
    require((directory / TOKENIZER).is_file(), "checkpoint",
            f"a checkpoint saved with its tokenizer ({TOKENIZER})", f"none in {directory}")
    tokenizer = BPETokenizer.load(directory / TOKENIZER)
    require(tokenizer.vocab_size == model_config.vocab_size, str(directory / TOKENIZER),
            f"a tokenizer of {model_config.vocab_size} tokens (the model's vocab_size)",
            tokenizer.vocab_size)
    model = Transformer(model_config)
    used = [directory]
    if average is None or require_positive_int(average, "average") == 1:
        load_checkpoint(directory, model)
    else:
        used = _to_average(directory, metadata["step"], average)
        for other in used:
            other_model, _ = _configs(load_checkpoint(other), other)
            require(other_model == model_config, "average",
                    f"checkpoints of one model config (as {directory})",
                    f"{other} has a different config")
        model.load_state_dict(average_checkpoints(used))
    model.to(target).eval()
    return TrainedModel(model, tokenizer, model_config, run_config, int(metadata["step"]), used)
