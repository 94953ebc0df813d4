"""Small attention models that Part II trains on toy tasks to show what attention learns.

Each is built from :mod:`transformer_book.nn`, never re-deriving it.
"""

from transformer_book.toy.aligner import (
    Aligner,
    AlignerConfig,
    alignment_accuracy,
    expected_alignment,
    greedy_decode,
    layer_config,
    require_widths,
    sequence_accuracy,
    train_aligner,
)
from transformer_book.toy.fit import (
    fit,
    fit_teacher_forced,
    sample_examples,
    token_cross_entropy,
    train_memory_network,
    train_seq2seq,
    warmup_then_decay,
)
from transformer_book.toy.heads import (
    IGNORE,
    RELATIONS,
    NeighbourModel,
    attention_by_offset,
    neighbour_accuracy,
    neighbour_task,
    train_neighbour_model,
)
from transformer_book.toy.positions import (
    NO_LABEL,
    PositionProbe,
    ProbeConfig,
    accuracy_by_length,
    make_shift_task,
    train_probe,
)

__all__ = [
    "IGNORE", "NO_LABEL", "RELATIONS", "Aligner", "AlignerConfig",
    "NeighbourModel", "PositionProbe", "ProbeConfig", "accuracy_by_length",
    "alignment_accuracy", "attention_by_offset", "expected_alignment", "fit",
    "fit_teacher_forced", "greedy_decode", "layer_config", "make_shift_task",
    "neighbour_accuracy", "neighbour_task", "require_widths", "sample_examples",
    "sequence_accuracy", "token_cross_entropy", "train_aligner", "train_memory_network",
    "train_neighbour_model", "train_probe", "train_seq2seq", "warmup_then_decay"
]
