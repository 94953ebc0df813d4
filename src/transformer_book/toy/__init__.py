"""Small attention models that Part II trains on toy tasks to show what attention learns.

Each is built from :mod:`transformer_book.nn`, never re-deriving it.
"""

from transformer_book.toy.aligner import (
    POSITION_KINDS,
    Aligner,
    AlignerConfig,
    DecoderBlock,
    EncoderBlock,
    NoPositions,
    alignment_accuracy,
    expected_alignment,
    greedy_decode,
    make_positions,
    sequence_accuracy,
    train_aligner,
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
    "IGNORE",
    "NO_LABEL",
    "POSITION_KINDS",
    "RELATIONS",
    "Aligner",
    "AlignerConfig",
    "DecoderBlock",
    "EncoderBlock",
    "NeighbourModel",
    "NoPositions",
    "PositionProbe",
    "ProbeConfig",
    "accuracy_by_length",
    "alignment_accuracy",
    "attention_by_offset",
    "expected_alignment",
    "greedy_decode",
    "make_positions",
    "make_shift_task",
    "neighbour_accuracy",
    "neighbour_task",
    "sequence_accuracy",
    "train_aligner",
    "train_neighbour_model",
    "train_probe",
]
