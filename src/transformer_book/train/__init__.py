"""Training: the objective and schedule (Sections 5.3-5.4) and checkpoints (Section 6.1).

The training loop (Section 5) is ``transformer_book.train.loop``; it uses ``corpus``
(Multi30k -> BPE ids), ``runtime`` (mixed precision, DDP), ``validate`` (validation loss
and greedy BLEU), ``resume`` (continuing a run exactly from its checkpoint, with the RNG
states of ``rng``) and ``records`` (JSON run records). ``translate`` loads a trained
checkpoint and translates with it.
"""

from transformer_book.train.checkpoint import (
    average_checkpoints,
    checkpoint_name,
    list_checkpoints,
    load_checkpoint,
    prune_checkpoints,
    save_checkpoint,
)
from transformer_book.train.corpus import PreparedData, prepare_data
from transformer_book.train.loop import NonFiniteLossError, TrainingResult, train
from transformer_book.train.objective import (
    count_tokens,
    label_smoothed_cross_entropy,
    make_optimizer,
    noam_lr,
    smoothed_target_distribution,
)
from transformer_book.train.records import git_commit, hardware_info, read_records, write_record
from transformer_book.train.rng import capture_rng_state, restore_rng_state
from transformer_book.train.translate import (
    TrainedModel,
    encode_sources,
    load_trained,
    resolve_checkpoint,
    translate,
    translate_ids,
)

__all__ = [
    "NonFiniteLossError",
    "PreparedData",
    "TrainedModel",
    "TrainingResult",
    "average_checkpoints",
    "capture_rng_state",
    "checkpoint_name",
    "count_tokens",
    "encode_sources",
    "git_commit",
    "hardware_info",
    "label_smoothed_cross_entropy",
    "list_checkpoints",
    "load_checkpoint",
    "load_trained",
    "make_optimizer",
    "noam_lr",
    "prepare_data",
    "prune_checkpoints",
    "read_records",
    "resolve_checkpoint",
    "restore_rng_state",
    "save_checkpoint",
    "smoothed_target_distribution",
    "train",
    "translate",
    "translate_ids",
    "write_record",
]
