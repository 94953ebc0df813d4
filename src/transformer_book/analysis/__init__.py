"""Measurements about models rather than models: complexity per layer (Table 1), training
compute and MFU, and the ablations of Table 3.
"""

from transformer_book.analysis.ablation import (
    EXTRA_KEYS,
    PAPER_TABLE3,
    AblationResult,
    KeySizeMask,
    ablation_data,
    evaluate_variant,
    relative_change,
    restrict_key_size,
    results_by_name,
    run_ablation,
    train_variant,
)
from transformer_book.analysis.complexity import (
    conv_flops_per_layer,
    recurrent_flops_per_layer,
    self_attention_flops_per_layer,
)
from transformer_book.analysis.compute import (
    BACKWARD_FACTOR,
    HARDWARE,
    PAPER_GPU_TFLOPS,
    Accelerator,
    FlopBreakdown,
    autograd_depth,
    estimate_training_time,
    find_accelerator,
    mfu,
    paper_training_cost,
    peak_flops,
    saved_tensor_bytes,
    training_flops,
    training_flops_per_token,
    transformer_flops,
)

__all__ = [
    "BACKWARD_FACTOR", "EXTRA_KEYS", "HARDWARE", "PAPER_GPU_TFLOPS", "PAPER_TABLE3",
    "AblationResult", "Accelerator", "FlopBreakdown", "KeySizeMask", "ablation_data",
    "autograd_depth", "conv_flops_per_layer", "estimate_training_time", "evaluate_variant",
    "find_accelerator", "mfu", "paper_training_cost", "peak_flops", "recurrent_flops_per_layer",
    "relative_change", "restrict_key_size", "results_by_name", "run_ablation",
    "saved_tensor_bytes", "self_attention_flops_per_layer", "train_variant", "training_flops",
    "training_flops_per_token", "transformer_flops"
]
