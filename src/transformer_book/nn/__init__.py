"""The Transformer's layers (Vaswani et al., 2017, Section 3): attention with its teaching
and fast paths, the decoder's key/value cache, the sub-layers and stacks, positional
encodings, and the encoder-decoder model with its configuration.
"""

from transformer_book.nn.attention import (
    AdditiveScore,
    MultiHeadAttention,
    causal_mask,
    dot_score,
    fast_attention,
    masked_softmax,
    padding_mask,
    scaled_dot_product_attention,
    scaled_dot_score,
)
from transformer_book.nn.config import (
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
    shifted_causal_mask,
    with_causal,
)
from transformer_book.nn.positional import (
    POSITIONAL_ENCODINGS,
    FourierPositionalEncoding,
    LearnedPositionalEmbedding,
    NoPositions,
    SinusoidalPositionalEncoding,
    positional_encoding,
    relative_offset_matrix,
    sinusoidal_encoding,
)
from transformer_book.nn.transformer import (
    Transformer,
    count_parameters,
    cross_attention_weights,
)

__all__ = [
    "KV", "POSITIONAL_ENCODINGS", "PRESETS", "AdditiveScore", "Decoder", "DecoderCache",
    "DecoderLayer", "Encoder", "EncoderLayer", "FeedForward", "FourierPositionalEncoding",
    "LearnedPositionalEmbedding", "MultiHeadAttention", "NoPositions",
    "SinusoidalPositionalEncoding", "Transformer", "TransformerConfig", "causal_mask",
    "check_like", "check_mask", "check_qk", "count_parameters", "cross_attention_weights",
    "dot_score", "fast_attention", "masked_softmax", "padding_mask", "positional_encoding",
    "relative_offset_matrix", "scaled_dot_product_attention", "scaled_dot_score",
    "shifted_causal_mask", "sinusoidal_encoding", "with_causal",
]
