"""The Transformer, step by step: the package behind the course.

Each idea of *Attention Is All You Need* (Vaswani et al., 2017) has one module here; the
chapters in ``notebooks/`` import them and check their own from-scratch versions against them.
The folders are floors, each built only on the ones below it (CONTRIBUTING.md has the map):

- ``util``: argument checks (``BookError``), atomic files, device and seeds, timing, run records;
- ``data``: Multi30k, BPE, token-budget batches, toy tasks;
- ``nn``: attention, the KV cache, layers, positional encodings, the Transformer;
- ``baselines``: RNNs, the GRU encoder-decoder, convolutional models, pooling, memory networks;
- ``toy``: small attention models on toy tasks, and the one loop that fits them;
- ``run``: a run's TOML configuration and its checkpoints;
- ``inference``: greedy and beam search, translation, checkpoint averaging, sacreBLEU and
  the paired bootstrap;
- ``train``: the objective, one training step, validation and the loop;
- ``analysis``: complexity, compute and MFU, ablations;
- ``course``: exercises and their checkers, figures, assignments, the chapter-model cache.

The public names of the floors up to ``toy`` are also importable from here
(``from transformer_book import Transformer``); each is loaded on first use, so importing the
package costs nothing. Two names are used by two floors: ``greedy_decode`` here is the
Transformer's (``inference``; ``toy.greedy_decode`` decodes the toy aligner) and
``sequence_accuracy`` the GRU baseline's (``baselines``; the toy one is ``toy.sequence_accuracy``).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS: dict[str, tuple[str, ...]] = {
    "util": (
        "BookError", "CLOCKS", "DEVICE_ORDER", "Stopwatch", "atomic_write_bytes",
        "atomic_write_json", "atomic_write_text", "atomic_writer", "best_time",
        "capture_rng_state", "command_line", "cpu_name", "device_name", "environment_report",
        "fail",
        "format_report", "fsync_path", "get_device", "git_commit", "hardware_info",
        "in_colab", "measure", "medians", "new_directory", "read_records", "require",
        "require_bool", "require_device", "require_finite_tensor", "require_int",
        "require_number", "require_one_of", "require_positive_int",
        "require_positive_number", "require_probability", "require_tensor",
        "require_writable", "restore_rng_state", "set_seed", "sha256_file",
        "torch_threads", "utc_timestamp", "write_record"
    ),
    "data": (
        "BOS_ID", "BPETokenizer", "DatasetUnavailableError", "EOS_ID",
        "MULTI30K_LANGUAGES", "MULTI30K_SHA256", "MULTI30K_SPLITS", "PAD_ID",
        "SPECIAL_TOKENS", "StoryQA", "StoryTensors", "TOY_TASKS", "TokenBudgetSampler",
        "UNK_ID", "WordVocabulary", "collate_pairs", "encode_stories", "encode_story",
        "load_multi30k", "make_story_qa", "make_toy_task", "multi30k_path",
        "pad_sequences", "padding_fraction", "split_words", "story_vocabulary",
        "token_mask", "toy_batches", "unknown_rate"
    ),
    "nn": (
        "AdditiveScore", "Decoder", "DecoderCache", "DecoderLayer", "Encoder",
        "EncoderLayer", "FeedForward", "KV", "LearnedPositionalEmbedding",
        "MultiHeadAttention", "POSITIONAL_KINDS", "PRESETS",
        "SinusoidalPositionalEncoding", "Transformer", "TransformerConfig", "causal_mask",
        "check_like", "check_mask", "check_qk", "count_parameters",
        "cross_attention_weights", "dot_score", "explicit_attention", "free_to_read",
        "fused_attention", "padding_mask", "relative_offset_matrix",
        "scaled_dot_product_attention", "scaled_dot_score", "shifted_causal_mask",
        "sinusoidal_encoding", "with_causal"
    ),
    "run": (
        "ADAM_BETA1", "DataSection", "DecodeSection", "FLOAT32_MAX", "FORMAT_VERSION",
        "HASHED_FILES", "Leftover", "MAX_ALPHA", "METADATA", "METADATA_HASH",
        "ModelSection", "OPTIMIZER", "PRECISIONS", "RNG", "RunConfig", "TOKENIZER",
        "TrainSection", "WEIGHTS", "checkpoint_name", "describe_mismatch",
        "find_leftovers", "list_checkpoints", "load_checkpoint", "load_resumables",
        "load_run_config", "load_weights", "metadata_hash_text", "prune_checkpoints",
        "read_metadata", "read_rng_state", "read_step", "release", "save_checkpoint",
        "save_folder", "tidy", "validate_metadata"
    ),
    "inference": (
        "BleuResult", "Comparison", "MAX_SENTENCES_PER_BATCH", "SIGNIFICANCE_LEVEL",
        "SIGNIFICANCE_METRICS", "STOPPING_RULES", "Stepper", "TOP_BLOCKS", "TrainedModel",
        "average_checkpoints", "beam_search", "bootstrap_interval", "check_alpha",
        "check_beam_size", "check_decoding", "compare_systems", "corpus_bleu",
        "encode_sources", "evaluation_mode", "greedy_decode", "length_penalty",
        "load_trained", "output_length_limits", "resolve_checkpoint", "score_hypothesis",
        "top_candidates", "translate", "translate_ids"
    ),
    "train": (
        "ADAM_BETAS", "BF16_CAPABILITY", "BOOKKEEPING", "ConfigMismatchError", "DistInfo",
        "EVAL_MIN_TOKENS", "MAX_LR", "NonFiniteLossError", "PreparedData", "REDUCTIONS",
        "RunState", "Session", "StepBatch", "StepResult", "TrainOptions", "Trainer",
        "TrainingResult", "ValidationLoss", "all_reduce", "autocast", "check_compatible",
        "check_ids", "check_resumable", "check_same_data", "count_tokens", "epoch_steps",
        "greedy_bleu", "label_smoothed_cross_entropy", "make_batch", "make_optimizer",
        "make_scaler", "make_step_batch", "noam_lr", "open_session", "optimizer_step",
        "prepare_data", "resolve_precision", "restore_run", "save_session",
        "setup_distributed", "smoothed_target_distribution", "train", "train_step",
        "validate", "validation_loss"
    ),
    "analysis": (
        "AblationResult", "Accelerator", "BACKWARD_FACTOR", "EXTRA_KEYS", "FlopBreakdown",
        "HARDWARE", "KeySizeMask", "PAPER_GPU_TFLOPS", "PAPER_TABLE3", "RowVerdict",
        "SEED_TEST_LEVEL", "SeedChange", "VariantRuns", "VariantScores", "Verdict",
        "ablation_data", "autograd_depth", "conv_flops_per_layer", "count_operations",
        "estimate_training_time", "evaluate_variant", "find_accelerator", "mean_sd", "mfu",
        "paper_change", "paper_training_cost", "peak_flops", "recurrent_flops_per_layer",
        "relative_change", "restrict_key_size", "results_by_name", "row_verdict",
        "run_ablation", "saved_tensor_bytes", "seed_change",
        "self_attention_flops_per_layer", "sequence_layer_output", "t_critical",
        "t_two_sided_p", "table_1_layers", "time_layers", "train_variant", "training_flops",
        "training_flops_per_token", "transformer_flops", "verdict_summary"
    ),
    "baselines": (
        "CausalConv1d", "ConvS2SBlock", "ConvS2SStack", "DilatedConvStack",
        "MemoryNetwork", "NadarayaWatson", "RNN", "RNNCell", "Seq2SeqGRU",
        "SequenceConv1d", "attention_pooling", "glu", "gradient_norm_by_distance",
        "layers_to_connect", "path_length_convs2s", "path_length_dilated",
        "position_encoding_weights", "receptive_field", "rnn_unroll", "sequence_accuracy",
        "token_accuracy"
    ),
    "toy": (
        "Aligner", "AlignerConfig", "IGNORE", "NO_LABEL", "NeighbourModel", "NoPositions",
        "POSITION_KINDS", "PositionProbe", "ProbeConfig", "RELATIONS",
        "accuracy_by_length", "alignment_accuracy", "attention_by_offset",
        "expected_alignment", "fit", "fit_teacher_forced", "layer_config",
        "make_positions", "make_shift_task", "neighbour_accuracy", "neighbour_task",
        "require_widths", "sample_examples", "token_cross_entropy", "train_aligner",
        "train_memory_network", "train_neighbour_model", "train_probe", "train_seq2seq",
        "warmup_then_decay"
    ),
}
_OWNER = {name: floor for floor, names in _EXPORTS.items() for name in names}

__all__ = sorted(_OWNER)


def __getattr__(name: str) -> Any:
    """Load ``transformer_book.<floor>`` the first time one of its names is asked for."""
    if name not in _OWNER:
        raise AttributeError(f"module 'transformer_book' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"transformer_book.{_OWNER[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
