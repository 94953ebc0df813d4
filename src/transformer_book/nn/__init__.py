"""The Transformer's layers (Vaswani et al., 2017, Section 3): attention with its teaching
and fast paths, the decoder's key/value cache, the sub-layers and stacks, positional
encodings, and the encoder-decoder model with its configuration.
"""

from transformer_book.nn.attention import (
    AdditiveScore,
    MultiHeadAttention,
    causal_mask,
    dot_score,
    explicit_attention,
    fused_attention,
    padding_mask,
    scaled_dot_product_attention,
    scaled_dot_score,
)
from transformer_book.nn.config import (
    POSITIONAL_KINDS,
    PRESETS,
    TransformerConfig,
)
from transformer_book.nn.kv_cache import (
    KV,
    DecoderCache,
)
from transformer_book.nn.layers import (
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    FeedForward,
)
from transformer_book.nn.masks import (
    check_like,
    check_mask,
    check_qk,
    free_to_read,
    shifted_causal_mask,
    with_causal,
)
from transformer_book.nn.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    relative_offset_matrix,
    sinusoidal_encoding,
)
from transformer_book.nn.transformer import (
    Transformer,
    count_parameters,
    cross_attention_weights,
)

__all__ = [
    "KV", "POSITIONAL_KINDS", "PRESETS", "AdditiveScore", "Decoder", "DecoderCache",
    "DecoderLayer", "Encoder", "EncoderLayer", "FeedForward", "LearnedPositionalEmbedding",
    "MultiHeadAttention", "SinusoidalPositionalEncoding", "Transformer", "TransformerConfig",
    "causal_mask", "check_like", "check_mask", "check_qk", "count_parameters",
    "cross_attention_weights", "dot_score", "explicit_attention", "free_to_read",
    "fused_attention", "padding_mask", "relative_offset_matrix", "scaled_dot_product_attention",
    "scaled_dot_score", "shifted_causal_mask", "sinusoidal_encoding", "with_causal"
]
