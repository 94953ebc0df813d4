"""A training run on disk: its TOML configuration and its checkpoints (Section 6.1).
"""

from transformer_book.run.checkpoint import (
    FORMAT_VERSION,
    METADATA,
    OPTIMIZER,
    RNG,
    TOKENIZER,
    WEIGHTS,
    checkpoint_name,
    describe_mismatch,
    list_checkpoints,
    load_checkpoint,
    load_weights,
    prune_checkpoints,
    save_checkpoint,
)
from transformer_book.run.config import (
    PRECISIONS,
    DataSection,
    DecodeSection,
    ModelSection,
    RunConfig,
    TrainSection,
    load_run_config,
)

__all__ = [
    "FORMAT_VERSION", "METADATA", "OPTIMIZER", "PRECISIONS", "RNG", "TOKENIZER", "WEIGHTS",
    "DataSection", "DecodeSection", "ModelSection", "RunConfig", "TrainSection",
    "checkpoint_name", "describe_mismatch", "list_checkpoints", "load_checkpoint",
    "load_run_config", "load_weights", "prune_checkpoints", "save_checkpoint"
]
