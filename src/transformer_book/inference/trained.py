"""A trained run, ready to translate: the model rebuilt from its checkpoint, its weights
(one checkpoint's, or the average of the last few), its tokenizer and its run config.

Section 6.1: "For the base models, we used a single model obtained by averaging the last 5
checkpoints" -- :func:`load_trained` with ``average=5``. The CLI's ``translate`` and
``evaluate`` and chapter 11 start here; :mod:`transformer_book.inference.translate` then
decodes with the loaded model.

Which checkpoint (``select``): ``"last"`` is the one named, or a run folder's newest.
``"best-val"`` and ``"best-val-bleu"`` choose among the checkpoints a run folder has kept
(training keeps the newest few and those of lowest validation loss) by the evaluations the
training loop recorded (``extra["evals"]`` of the newest checkpoint: ``step``,
``val_loss``, greedy ``bleu`` on val): the lowest validation loss, or the highest greedy
BLEU, among kept checkpoints with an evaluation at their step. Both look at the validation
set only, so the test set stays untouched by the choice.
"""

from __future__ import annotations

import glob
import math
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
    METADATA_HASH,
    TOKENIZER,
    list_checkpoints,
    load_checkpoint,
    off_grid_steps,
    read_metadata,
    read_step,
)
from transformer_book.run.config import RunConfig
from transformer_book.util.env import require_device
from transformer_book.util.folders import tidy
from transformer_book.util.validation import is_real, require, require_one_of, require_positive_int

__all__ = ["SELECTIONS", "TrainedModel", "load_trained", "resolve_checkpoint"]

#: How :func:`load_trained` picks the checkpoint: the named/newest one, the kept one of
#: lowest validation loss, or the kept one of highest greedy validation BLEU.
SELECTIONS = ("last", "best-val", "best-val-bleu")
_CRITERION = {"best-val": "val_loss", "best-val-bleu": "bleu"}


@dataclass
class TrainedModel:
    """A model ready to translate, with what it was trained with.

    Fields: ``model`` (eval mode, on its device), ``tokenizer``, ``model_config``,
    ``run_config``, ``step`` (of the newest checkpoint used), ``checkpoints`` (every
    folder whose weights went in: one, or the averaged ones, oldest first) and
    ``selection``, why those: ``{"select": the rule (one of SELECTIONS), "chosen_step",
    "chosen_val_loss", "chosen_val_bleu"`` (the evaluation at the chosen step, ``None``
    where none was recorded) ``, "averaged_steps"}``. A model being trained, not loaded
    from a checkpoint (the validation BLEU of training), has step 0, no checkpoints and an
    empty selection.
    """

    model: nn.Module
    tokenizer: BPETokenizer
    model_config: TransformerConfig
    run_config: RunConfig
    step: int = 0
    checkpoints: list[Path] = field(default_factory=list)
    selection: dict[str, Any] = field(default_factory=dict)


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint folder, or the newest checkpoint of a run folder (``runs/small``).

    The leftovers of an interrupted save are dealt with first
    (:func:`transformer_book.util.folders.tidy`): a checkpoint missing after a crash between the
    renames of its save is recovered, so a run folder gives its newest complete checkpoint.
    """
    path = Path(path)
    if not path.exists() and path.parent.is_dir():
        tidy(path.parent, METADATA_HASH, glob.escape(path.name))  # named, missing: a kill?
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
    assert isinstance(config, dict), "checked just above"
    return (TransformerConfig.from_dict(config["model"]),
            RunConfig.from_dict(config["run"], source=f"{directory}/{METADATA} [run]"))


def _device(device: torch.device | str | None) -> torch.device:
    """Where to put the model (default the CPU), checked before anything is loaded."""
    return torch.device("cpu") if device is None else require_device(device)


def _to_average(directory: Path, step: int, average: int, every: int,
                evals: Any) -> list[Path]:
    """The ``average`` checkpoints of ``directory``'s run that end with it (by step): it and
    the latest before it on the run's ``every``-step grid. Section 6.1 averages checkpoints
    "written at 10-minute intervals"; those training also writes at evaluations off the
    grid, so that choosing by val can pick any evaluated step, are left out
    (:func:`~transformer_book.run.checkpoint.off_grid_steps` of the run's ``evals``)."""
    run_dir = directory.parent
    off_grid = off_grid_steps(evals, every)
    earlier = [p for p in list_checkpoints(run_dir)
               if p.resolve() != directory.resolve() and read_step(p) <= step
               and read_step(p) not in off_grid]
    require(len(earlier) + 1 >= average, "average",
            f"at most the {len(earlier) + 1} checkpoints of {run_dir} up to and including "
            f"{directory.name}", average)
    return [*earlier[len(earlier) + 1 - average:], directory]


def _eval_at(evals: Any, step: int) -> dict[str, Any] | None:
    """The (last) evaluation recorded at ``step``, or ``None``."""
    if not isinstance(evals, list):
        return None
    found = [e for e in evals if isinstance(e, dict) and e.get("step") == step]
    return found[-1] if found else None


def _finite(value: Any) -> bool:
    return is_real(value) and math.isfinite(value)


def _choose(run_dir: Path, select: str) -> tuple[Path, dict[str, Any], list[Path]]:
    """The kept checkpoint of ``run_dir`` that ``select`` picks, the evaluation at its step,
    and all the kept checkpoints (by step)."""
    newest = resolve_checkpoint(run_dir)
    require(newest != run_dir, "checkpoint",
            f"a run folder for select={select!r} (it chooses among the run's kept checkpoints)",
            f"{run_dir} (a checkpoint folder)")
    key, kept = _CRITERION[select], list_checkpoints(run_dir)
    evals = read_metadata(newest).get("extra", {}).get("evals")
    require(isinstance(evals, list) and bool(evals), "checkpoint",
            f"a run folder whose newest checkpoint records the training's evaluations "
            f"(extra.evals in {METADATA}) for select={select!r}",
            f"{run_dir} (no evaluations recorded in {newest.name})")
    steps = [read_step(path) for path in kept]
    scored = []
    for step, path in zip(steps, kept, strict=True):
        found = _eval_at(evals, step)
        if found is not None and _finite(found.get(key)):
            scored.append((found[key] if key == "val_loss" else -found[key], step, path, found))
    require(bool(scored), "checkpoint",
            f"a kept checkpoint of {run_dir} with a recorded {key} at its step "
            f"for select={select!r}", f"none among steps {steps}")
    _, _, chosen, found = min(scored, key=lambda item: item[:2])  # ties: the earlier step
    return chosen, found, kept


def _nearest(kept: list[Path], chosen: Path, average: int) -> list[Path]:
    """The ``average`` kept checkpoints nearest in step to ``chosen`` (it included; ties to
    the earlier step), oldest first."""
    require(average <= len(kept), "average",
            f"at most the {len(kept)} kept checkpoints of {chosen.parent}", average)
    target = read_step(chosen)
    ranked = sorted(kept, key=lambda p: (abs(read_step(p) - target), read_step(p)))
    return sorted(ranked[:average], key=read_step)


def _load_weights(model: nn.Module, directory: Path, used: list[Path],
                  model_config: TransformerConfig) -> None:
    """One checkpoint's weights, or the element-wise mean of ``used`` (one config)."""
    if used == [directory]:
        load_checkpoint(directory, model)
        return
    for other in used:
        other_model, _ = _configs(load_checkpoint(other), other)
        require(other_model == model_config, "average",
                f"checkpoints of one model config (as {directory})",
                f"{other} has a different config")
    model.load_state_dict(average_checkpoints(used))


def load_trained(
    checkpoint: str | Path,
    device: torch.device | str | None = None,
    average: int | None = None,
    select: str = "last",
) -> TrainedModel:
    """Build the model a checkpoint was trained as and load its weights.

    Args:
        checkpoint: a checkpoint folder, or a run folder (its newest checkpoint is used,
            or the one ``select`` picks).
        device: where to put the model (default CPU): cpu, cuda, cuda:N or mps, one this
            machine has (checked first).
        average: if given, load the element-wise mean of ``average`` checkpoints of the run
            (Section 6.1). With ``select="last"``: the last ``average`` up to and including
            the one ``checkpoint`` names (the newest for a run folder), leaving out the
            checkpoints written at evaluations off the run's ``checkpoint_every`` grid;
            otherwise the
            ``average`` kept checkpoints nearest in step to the chosen one (it included, ties
            to the earlier step). They must all come from the same config.
        select: ``"last"`` (default), ``"best-val"`` (lowest validation loss) or
            ``"best-val-bleu"`` (highest greedy validation BLEU) among the kept checkpoints
            of a run folder with an evaluation at their step (see the module docstring).

    Raises:
        BookError: corrupted files (sha256), a folder that is no checkpoint, checkpoints
            of different configs, fewer than ``average`` checkpoints, or a ``select`` other
            than ``"last"`` given a checkpoint folder or a run without evaluations.
    """
    target = _device(device)
    require_one_of(select, "select", SELECTIONS)
    if average is not None:
        require_positive_int(average, "average")
    found: dict[str, Any] | None
    kept: list[Path]
    if select == "last":
        directory, found, kept = resolve_checkpoint(checkpoint), None, []
    else:
        directory, found, kept = _choose(Path(checkpoint), select)
    metadata = load_checkpoint(directory)  # verifies every file's sha256
    model_config, run_config = _configs(metadata, directory)
    require((directory / TOKENIZER).is_file(), "checkpoint",
            f"a checkpoint saved with its tokenizer ({TOKENIZER})", f"none in {directory}")
    tokenizer = BPETokenizer.load(directory / TOKENIZER)
    require(tokenizer.vocab_size == model_config.vocab_size, str(directory / TOKENIZER),
            f"a tokenizer of {model_config.vocab_size} tokens (the model's vocab_size)",
            tokenizer.vocab_size)
    step = int(metadata["step"])
    if average is None or average == 1:
        used = [directory]
    else:
        used = (_to_average(directory, step, average, run_config.train.checkpoint_every,
                            metadata.get("extra", {}).get("evals")) if select == "last"
                else _nearest(kept, directory, average))
    model = Transformer(model_config)
    _load_weights(model, directory, used, model_config)
    model.to(target).eval()
    if select == "last":
        found = _eval_at(metadata.get("extra", {}).get("evals"), step)
    averaged_steps = [read_step(p) for p in used]
    selection = {"select": select, "chosen_step": step,
                 "chosen_val_loss": (found or {}).get("val_loss"),
                 "chosen_val_bleu": (found or {}).get("bleu"),
                 "averaged_steps": averaged_steps}
    return TrainedModel(model=model, tokenizer=tokenizer, model_config=model_config,
                        run_config=run_config, step=max(averaged_steps),
                        checkpoints=used, selection=selection)
