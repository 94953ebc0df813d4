"""A training run on disk: its TOML configuration and its checkpoints (Section 6.1).
"""

from transformer_book.run.checkpoint import (
    checkpoint_name,
    describe_mismatch,
    list_checkpoints,
    load_checkpoint,
    load_weights,
    prune_checkpoints,
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
from transformer_book.run.leftovers import (
    Leftover,
    find_leftovers,
    release,
    save_folder,
    tidy,
)
from transformer_book.run.manifest import (
    FORMAT_VERSION,
    HASHED_FILES,
    METADATA,
    METADATA_HASH,
    OPTIMIZER,
    RNG,
    TOKENIZER,
    WEIGHTS,
    load_resumables,
    metadata_hash_text,
    read_metadata,
    read_rng_state,
    read_step,
    validate_metadata,
)

__all__ = [
    "ADAM_BETA1", "FLOAT32_MAX", "FORMAT_VERSION", "HASHED_FILES", "MAX_ALPHA", "METADATA",
    "METADATA_HASH", "OPTIMIZER", "PRECISIONS", "RNG", "TOKENIZER", "WEIGHTS", "DataSection",
    "DecodeSection", "Leftover", "ModelSection", "RunConfig", "TrainSection", "checkpoint_name",
    "describe_mismatch", "find_leftovers", "list_checkpoints", "load_checkpoint",
    "load_resumables", "load_run_config", "load_weights", "metadata_hash_text",
    "prune_checkpoints", "read_metadata", "read_rng_state", "read_step", "release",
    "save_checkpoint", "save_folder", "tidy", "validate_metadata"
]
