"""Training: the objective and schedule (Sections 5.3-5.4) and checkpoints (Section 6.1).

The training loop itself lives in ``transformer_book.train.loop``.
"""

from transformer_book.train.checkpoint import (
    average_checkpoints,
    capture_rng_state,
    checkpoint_name,
    list_checkpoints,
    load_checkpoint,
    prune_checkpoints,
    restore_rng_state,
    save_checkpoint,
)
from transformer_book.train.objective import (
    count_tokens,
    label_smoothed_cross_entropy,
    make_optimizer,
    noam_lr,
    smoothed_target_distribution,
)

__all__ = [
    "average_checkpoints",
    "capture_rng_state",
    "checkpoint_name",
    "count_tokens",
    "label_smoothed_cross_entropy",
    "list_checkpoints",
    "load_checkpoint",
    "make_optimizer",
    "noam_lr",
    "prune_checkpoints",
    "restore_rng_state",
    "save_checkpoint",
    "smoothed_target_distribution",
]
