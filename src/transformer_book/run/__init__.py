"""A training run on disk: its TOML configuration and its checkpoints (Section 6.1).
"""

from transformer_book.run.checkpoint import (
    FORMAT_VERSION,
    METADATA,
    METADATA_HASH,
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
    read_metadata,
    read_step,
    save_checkpoint,
)
from transformer_book.run.config import (
    ADAM_BETA1,
    FLOAT32_MAX,
    MAX_ALPHA,
    PRECISIONS,
    DataSection,
    DecodeSection,
    ModelSection,
    RunConfig,
    TrainSection,
    load_run_config,
)

__all__ = [
    "ADAM_BETA1", "FLOAT32_MAX", "FORMAT_VERSION", "MAX_ALPHA", "METADATA", "METADATA_HASH",
    "OPTIMIZER", "PRECISIONS", "RNG", "TOKENIZER", "WEIGHTS", "DataSection", "DecodeSection",
    "ModelSection", "RunConfig", "TrainSection", "checkpoint_name", "describe_mismatch",
    "list_checkpoints", "load_checkpoint", "load_run_config",
    "load_weights", "prune_checkpoints", "read_metadata", "read_step", "save_checkpoint",
]
