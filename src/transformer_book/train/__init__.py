"""Training (Section 5): the objective and schedule (Sections 5.3-5.4), the corpus as BPE
ids, mixed precision and DDP, the training step and validation, exact resume and the loop.
"""

from transformer_book.train.corpus import (
    PreparedData,
    make_batch,
    prepare_data,
)
from transformer_book.train.loop import (
    NonFiniteLossError,
    TrainingResult,
    train,
)
from transformer_book.train.objective import (
    REDUCTIONS,
    count_tokens,
    label_smoothed_cross_entropy,
    make_optimizer,
    noam_lr,
    smoothed_target_distribution,
)
from transformer_book.train.resume import (
    RunState,
    check_compatible,
    restore_run,
)
from transformer_book.train.runtime import (
    DistInfo,
    all_reduce,
    autocast,
    resolve_precision,
    setup_distributed,
)
from transformer_book.train.validate import (
    EVAL_MIN_TOKENS,
    validate,
)

__all__ = [
    "EVAL_MIN_TOKENS",
    "REDUCTIONS",
    "DistInfo",
    "NonFiniteLossError",
    "PreparedData",
    "RunState",
    "TrainingResult",
    "all_reduce",
    "autocast",
    "check_compatible",
    "count_tokens",
    "label_smoothed_cross_entropy",
    "make_batch",
    "make_optimizer",
    "noam_lr",
    "prepare_data",
    "resolve_precision",
    "restore_run",
    "setup_distributed",
    "smoothed_target_distribution",
    "train",
    "validate",
]
