"""Training (Section 5): the objective and schedule (Sections 5.3-5.4), the corpus as BPE
ids, mixed precision and DDP, the training step and validation, exact resume and the loop.
"""

from transformer_book.train.corpus import (
    PreparedData,
    StepBatch,
    check_ids,
    check_same_data,
    epoch_steps,
    make_batch,
    make_step_batch,
    prepare_data,
)
from transformer_book.train.loop import (
    TrainingResult,
    train,
)
from transformer_book.train.objective import (
    ADAM_BETAS,
    MAX_LR,
    REDUCTIONS,
    count_tokens,
    label_smoothed_cross_entropy,
    make_optimizer,
    noam_lr,
    smoothed_target_distribution,
)
from transformer_book.train.resume import (
    BOOKKEEPING,
    ConfigMismatchError,
    RunState,
    check_compatible,
    check_resumable,
    restore_run,
)
from transformer_book.train.runtime import (
    BF16_CAPABILITY,
    DistInfo,
    all_reduce,
    autocast,
    make_scaler,
    optimizer_step,
    resolve_precision,
    setup_distributed,
)
from transformer_book.train.session import (
    Session,
    TrainOptions,
    open_session,
)
from transformer_book.train.step import (
    NonFiniteLossError,
    StepResult,
    Trainer,
    train_step,
)
from transformer_book.train.validate import (
    EVAL_MIN_TOKENS,
    ValidationLoss,
    validate,
    validation_bleu,
    validation_loss,
)

__all__ = [
    "ADAM_BETAS",
    "BF16_CAPABILITY",
    "BOOKKEEPING",
    "EVAL_MIN_TOKENS",
    "MAX_LR",
    "REDUCTIONS",
    "ConfigMismatchError",
    "DistInfo",
    "NonFiniteLossError",
    "PreparedData",
    "RunState",
    "Session",
    "StepBatch",
    "StepResult",
    "TrainOptions",
    "Trainer",
    "TrainingResult",
    "ValidationLoss",
    "all_reduce",
    "autocast",
    "check_compatible",
    "check_ids",
    "check_resumable",
    "check_same_data",
    "count_tokens",
    "epoch_steps",
    "label_smoothed_cross_entropy",
    "make_batch",
    "make_optimizer",
    "make_scaler",
    "make_step_batch",
    "noam_lr",
    "open_session",
    "optimizer_step",
    "prepare_data",
    "resolve_precision",
    "restore_run",
    "setup_distributed",
    "smoothed_target_distribution",
    "train",
    "train_step",
    "validate",
    "validation_bleu",
    "validation_loss"
]
