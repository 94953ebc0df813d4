"""A training session: what :func:`transformer_book.train.loop.train` sets up and carries.

:func:`open_session` builds the data (Section 5.1), the model (Section 3), Adam and eq. 3's
schedule (Section 5.3) and the token-budget sampler, and restores them from the newest
checkpoint of the run folder if there is one (exactly: weights, moments, RNG states, data
position; Section 6.1 writes checkpoints regularly). :func:`save_session` writes such a
checkpoint. The :class:`Session` holds all of it and where the session stands, so that the
loop's steps are plain functions of one object instead of closures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from transformer_book.data.batching import TokenBudgetSampler
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer
from transformer_book.run.checkpoint import (
    checkpoint_name,
    list_checkpoints,
    prune_checkpoints,
    save_checkpoint,
)
from transformer_book.run.config import RunConfig
from transformer_book.train.corpus import PreparedData, prepare_data
from transformer_book.train.objective import make_optimizer
from transformer_book.train.resume import RunState, check_resumable, restore_run
from transformer_book.train.runtime import DistInfo, make_scaler, resolve_precision
from transformer_book.train.step import NonFiniteLossError, Trainer
from transformer_book.util.env import set_seed
from transformer_book.util.rng import capture_rng_state
from transformer_book.util.timing import Stopwatch
from transformer_book.util.validation import fail, require_bool, require_int, require_positive_int

__all__ = ["Session", "TrainOptions", "make_sampler", "open_session", "save_session"]


@dataclass(frozen=True)
class TrainOptions:
    """The keyword arguments of :func:`transformer_book.train.loop.train` that the loop
    reads, checked when made."""

    resume: bool
    progress: bool
    on_eval: Callable[[dict[str, Any]], None] | None
    results_dir: str | Path | None
    name: str
    command: list[str] | None
    bleu_sentences: int
    val_sentences: int | None

    def __post_init__(self) -> None:
        require_bool(self.resume, "resume")
        require_bool(self.progress, "progress")
        require_int(self.bleu_sentences, "bleu_sentences", minimum=0)
        if self.val_sentences is not None:
            require_positive_int(self.val_sentences, "val_sentences")


@dataclass
class Session:
    """One training session: what is fixed for it, then where it stands (``trainer.step``
    is the optimizer step; ``position`` counts the epoch's micro-batches already used)."""

    run_config: RunConfig
    out_dir: Path
    options: TrainOptions
    info: DistInfo
    device: torch.device
    data: PreparedData
    config: TransformerConfig
    raw_model: nn.Module
    trainer: Trainer
    sampler: TokenBudgetSampler
    watch: Stopwatch  # this session's wall time
    epoch: int
    position: int
    losses: list[dict[str, Any]]
    evals: list[dict[str, Any]]
    previous_seconds: float  # train_seconds of the earlier sessions
    resumed_from: Path | None
    chunks: list[list[list[int]]] = field(default_factory=list)
    bar: Any = None
    session_start: int = 0
    session_steps: int = 0
    session_tokens: int = 0
    step_seconds: float = 0.0
    last_checkpoint: Path | None = None
    last_eval_step: int | None = None
    stop_reason: str = "max_steps"

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.raw_model.parameters())


def make_sampler(data: PreparedData, run_config: RunConfig, info: DistInfo
                 ) -> TokenBudgetSampler:
    """Section 5.1's token-budget batches over the current segmentation of the corpus,
    shuffled per epoch from ``[train] seed``, this process's share of them."""
    return TokenBudgetSampler([len(s) for s in data.train_src], run_config.data.max_tokens,
                              [len(y) + 1 for y in data.train_tgt], shuffle=True,
                              seed=run_config.train.seed, num_replicas=info.world_size,
                              rank=info.rank)


def open_session(run_config: RunConfig, out_dir: Path, options: TrainOptions, info: DistInfo,
                 device: torch.device, watch: Stopwatch) -> Session:
    """Data, model, optimizer, schedule and sampler, restored from the newest checkpoint
    of ``out_dir`` if there is one (exactly: weights, moments, RNGs, data position)."""
    t, d = run_config.train, run_config.data
    existing = list_checkpoints(out_dir)
    if existing and not options.resume:
        raise fail("resume", f"an out folder without checkpoints when not resuming ({out_dir} "
                   "holds some; resume, delete them or choose another folder)",
                   [p.name for p in existing])
    precision = resolve_precision(t.precision, device)
    if d.bpe_dropout > 0 and info.enabled:  # unseeded draws: the processes would disagree
        raise fail("[data] bpe_dropout", "0 when training with several processes (each "
                   "would segment the corpus differently, and their batches would not match)",
                   f"{d.bpe_dropout} with {info.world_size} processes")
    if existing:  # refused before the data (and the folder's tokenizer) are touched
        check_resumable(existing[-1], run_config, info.world_size, precision)
    data = prepare_data(run_config, out_dir, is_main=info.is_main, barrier=info.barrier,
                        val_sentences=options.val_sentences)
    config = run_config.model_config(data.tokenizer.vocab_size)
    set_seed(t.seed)
    raw_model = Transformer(config).to(device)
    optimizer, scheduler = make_optimizer(raw_model, config.d_model, t.warmup_steps, t.lr_factor)
    scaler = make_scaler(precision, device)
    sampler = make_sampler(data, run_config, info)
    state = (restore_run(existing[-1], raw_model, optimizer, scheduler, scaler, run_config,
                         config, info.world_size, device, precision) if existing
             else RunState())
    if info.enabled:  # different dropout masks per process; same weights (DDP broadcasts)
        torch.manual_seed(t.seed * 1_000_003 + info.rank * 7_919 + state.step)
    model: nn.Module = raw_model
    if info.enabled:
        model = nn.parallel.DistributedDataParallel(
            raw_model, device_ids=[device.index] if device.type == "cuda" else None)
    model.train()
    last = state.losses[-1] if state.losses else None
    trainer = Trainer(model, optimizer, scheduler, config.label_smoothing, precision,
                      t.clip_norm, scaler, info, step=state.step,
                      last_finite=(last["step"], last["loss"]) if last else None)
    return Session(run_config, out_dir, options, info, device, data, config, raw_model,
                   trainer, sampler, watch, state.epoch, state.position, state.losses,
                   state.evals, state.train_seconds, state.resumed_from,
                   session_start=state.step, last_checkpoint=state.resumed_from,
                   last_eval_step=state.evals[-1]["step"] if state.evals else None)


def save_session(run: Session) -> Path | None:
    """Everything an exact resume needs (rank 0 writes it); then only the ``keep_last``
    newest checkpoints and the ``keep_best`` of lowest validation loss are kept. Weights that
    are not all finite are never saved: every process raises
    :class:`NonFiniteLossError` instead (one read of the device per checkpoint)."""
    trainer = run.trainer
    _require_finite_weights(run.raw_model, trainer.step)
    if not run.info.is_main:
        return None
    path = save_checkpoint(
        run.out_dir / checkpoint_name(trainer.step), run.raw_model,
        config={"model": run.config.to_dict(), "run": run.run_config.to_dict()},
        step=trainer.step, tokenizer_path=run.data.tokenizer_path, optimizer=trainer.optimizer,
        scheduler=trainer.scheduler, rng_state=capture_rng_state(),
        extra={"epoch": run.epoch, "position": run.position, "losses": run.losses,
               "evals": run.evals, "train_seconds": run.previous_seconds + run.watch.seconds,
               "world_size": run.info.world_size, "precision": trainer.precision,
               "scaler": trainer.scaler.state_dict() if trainer.scaler is not None else None})
    t = run.run_config.train
    prune_checkpoints(run.out_dir, t.keep_last, keep_best=t.keep_best,
                      val_loss={e["step"]: e["val_loss"] for e in run.evals})
    return path


def _require_finite_weights(model: nn.Module, step: int) -> None:
    """Raise :class:`NonFiniteLossError` if a parameter of ``model`` holds NaN or infinity
    (one read of the device for all of them)."""
    named = [(name, p) for name, p in model.named_parameters()]
    finite = torch.stack([torch.isfinite(p.detach()).all() for _, p in named]).tolist()
    broken = [name for (name, _), ok in zip(named, finite, strict=True) if not ok]
    if broken:
        raise NonFiniteLossError(
            f"weights: expected finite values to checkpoint after step {step}, received NaN "
            f"or infinity in {len(broken)} of {len(named)} tensors ({', '.join(broken[:3])}"
            f"{', ...' if len(broken) > 3 else ''}); no checkpoint of step {step} was written."
            " Try a lower learning rate ([train] lr_factor or a longer warmup_steps), "
            "gradient clipping ([train] clip_norm) or precision = \"fp32\".", step=step)
