"""A training session: what :func:`transformer_book.train.loop.train` sets up and carries.

:func:`open_session` builds the data (Section 5.1), the model (Section 3), Adam and eq. 3's
schedule (Section 5.3), and restores them from the newest checkpoint of the run folder if
there is one (exactly: weights, moments, RNG states and where the run stands; Section 6.1
writes checkpoints regularly). The :class:`Session`
holds all of it, and :meth:`Session.save` writes such a checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from transformer_book.data.batching import TokenBudgetSampler
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.dropout import use_fast_dropout
from transformer_book.nn.transformer import Transformer
from transformer_book.run.checkpoint import (
    checkpoint_name,
    list_checkpoints,
    off_grid_steps,
    prune_checkpoints,
    read_metadata,
    save_checkpoint,
)
from transformer_book.run.config import RunConfig
from transformer_book.train.corpus import PreparedData, prepare_data
from transformer_book.train.objective import make_optimizer
from transformer_book.train.resume import RunState, check_resumable, restore_run
from transformer_book.train.runtime import (
    DistInfo,
    PrecisionChoice,
    choose_precision,
    make_scaler,
)
from transformer_book.train.step import NonFiniteLossError, Trainer
from transformer_book.util.env import set_seed
from transformer_book.util.rng import capture_rng_state
from transformer_book.util.timing import Stopwatch
from transformer_book.util.validation import (
    bad_input,
    require,
    require_bool,
    require_int,
    require_positive_int,
)

__all__ = ["Session", "TrainOptions", "make_sampler", "open_session"]


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
    fast: bool = False

    def __post_init__(self) -> None:
        require_bool(self.resume, "resume")
        require_bool(self.progress, "progress")
        require_bool(self.fast, "fast")
        require_int(self.bleu_sentences, "bleu_sentences", minimum=0)
        if self.val_sentences is not None:
            require_positive_int(self.val_sentences, "val_sentences")


@dataclass(frozen=True)
class Session:
    """One training session, fixed once opened: the run, where it writes, the data, the
    model and its :class:`Trainer` (``trainer.step``: the optimizer step), the session's
    stopwatch, the step it started at and the checkpoint it resumed from (``None``: a fresh
    run). ``state`` is where the run stands (epoch, steps into it, losses, evaluations),
    changed by the loop step by step and saved by :meth:`save`."""

    run_config: RunConfig
    out_dir: Path
    options: TrainOptions
    info: DistInfo
    device: torch.device
    data: PreparedData
    raw_model: Transformer
    trainer: Trainer
    watch: Stopwatch  # this session's wall time
    state: RunState
    start_step: int
    resumed_from: Path | None
    precision_choice: PrecisionChoice  # what [train] precision asked, what ran, and why

    @property
    def config(self) -> TransformerConfig:
        return self.raw_model.config

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.raw_model.parameters())

    @property
    def train_seconds(self) -> float:
        """The run's training time: the earlier sessions' and this one's."""
        return self.state.train_seconds + self.watch.seconds

    def save(self) -> Path | None:
        """Everything an exact resume needs (rank 0 writes it); then only the ``keep_last``
        newest checkpoints and the ``keep_best`` of lowest validation loss are kept. Weights
        that are not all finite are never saved: every process raises
        :class:`NonFiniteLossError` instead (one read of the device per checkpoint)."""
        trainer, state = self.trainer, self.state
        _require_finite_weights(self.raw_model, trainer.step)
        if not self.info.is_main:
            return None
        path = save_checkpoint(
            self.out_dir / checkpoint_name(trainer.step), self.raw_model,
            config={"model": self.config.to_dict(), "run": self.run_config.to_dict()},
            step=trainer.step, tokenizer_path=self.data.tokenizer_path,
            optimizer=trainer.optimizer, scheduler=trainer.scheduler,
            rng_state=capture_rng_state(),
            extra={"epoch": state.epoch, "steps_into_epoch": state.steps_into_epoch,
                   "losses": state.losses, "evals": state.evals,
                   "train_seconds": self.train_seconds, "world_size": self.info.world_size,
                   "precision": trainer.precision, "skipped_steps": trainer.skipped_steps,
                   "fast": trainer.fused_loss,
                   "scaler": trainer.scaler.state_dict() if trainer.scaler else None})
        t = self.run_config.train
        prune_checkpoints(self.out_dir, t.keep_last, keep_best=t.keep_best,
                          val_loss={e["step"]: e["val_loss"] for e in state.evals},
                          off_grid=off_grid_steps(state.evals, t.checkpoint_every))
        return path


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
    """Data, model, optimizer and schedule, restored from the newest checkpoint of
    ``out_dir`` if there is one (exactly: weights, moments, RNGs, where the run stands)."""
    t, d = run_config.train, run_config.data
    existing = list_checkpoints(out_dir)
    if existing and not options.resume:
        raise bad_input("resume", f"an out folder without checkpoints when not resuming ({out_dir} "
                   "holds some; resume, delete them or choose another folder)",
                   [p.name for p in existing])
    if d.bpe_dropout > 0 and info.enabled:  # unseeded draws: the processes would disagree
        raise bad_input("[data] bpe_dropout", "0 when training with several processes (each "
                   "would segment the corpus differently, and their batches would not match)",
                   f"{d.bpe_dropout} with {info.world_size} processes")
    if options.fast and info.enabled:  # the fused loss bypasses DDP's forward
        raise bad_input("fast", "False when training with several processes", True)
    # A resume keeps the precision the run was trained in ("auto" is not measured again).
    resumed_in = (read_metadata(existing[-1]).get("extra", {}).get("precision")
                  if existing and t.precision == "auto" else None)
    choice = choose_precision(resumed_in or t.precision, device, info=info)
    precision = choice.precision
    resumed_from = existing[-1] if existing else None
    if resumed_from is not None:  # refused before the data (and the folder's tokenizer)
        checked = check_resumable(resumed_from, run_config, info.world_size, precision)
        was_fast = checked["extra"].get("fast", False)  # none before it was recorded
        require(was_fast == options.fast, "fast", f"{was_fast}, as the run being resumed "
                f"({resumed_from.name}) was trained", options.fast)
    data = prepare_data(run_config, out_dir, is_main=info.is_main, barrier=info.barrier,
                        val_sentences=options.val_sentences)
    set_seed(t.seed)
    raw_model = Transformer(run_config.model_config(data.tokenizer.vocab_size)).to(device)
    if options.fast:
        use_fast_dropout(raw_model)
    optimizer, scheduler = make_optimizer(raw_model, raw_model.config.d_model, t.warmup_steps,
                                          t.lr_factor)
    scaler = make_scaler(precision, device)
    step, state, skipped = 0, RunState(), 0
    if resumed_from is not None:
        step, state = restore_run(resumed_from, checked, raw_model, optimizer, scheduler,
                                  scaler, device, t.accumulation)
        skipped = checked["extra"].get("skipped_steps", 0)  # none before it was recorded
    if info.enabled:  # different dropout masks per process; same weights (DDP broadcasts)
        torch.manual_seed(t.seed * 1_000_003 + info.rank * 7_919 + step)
    model: nn.Module = raw_model
    if info.enabled:
        model = nn.parallel.DistributedDataParallel(
            raw_model, device_ids=[device.index] if device.type == "cuda" else None)
    model.train()
    last = state.losses[-1] if state.losses else None
    trainer = Trainer(model=model, optimizer=optimizer, scheduler=scheduler,
                      label_smoothing=raw_model.config.label_smoothing, precision=precision,
                      clip_norm=t.clip_norm, scaler=scaler, info=info, step=step,
                      last_finite=(last["step"], last["loss"]) if last else None,
                      skipped_steps=skipped, fused_loss=options.fast)
    return Session(run_config=run_config, out_dir=out_dir, options=options, info=info,
                   device=device, data=data, raw_model=raw_model, trainer=trainer,
                   watch=watch, state=state, start_step=step, resumed_from=resumed_from,
                   precision_choice=choice)


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
