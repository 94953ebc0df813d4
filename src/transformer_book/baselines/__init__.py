"""The models that came before the Transformer (Part I and the start of Part II):
recurrent networks, a GRU encoder-decoder with additive attention, convolutional sequence
models, Nadaraya-Watson attention pooling and end-to-end memory networks.
"""

from transformer_book.baselines.conv import (
    CausalConv1d,
    ConvS2SBlock,
    ConvS2SStack,
    DilatedConvStack,
    SequenceConv1d,
    glu,
    layers_to_connect,
    path_length_convs2s,
    path_length_dilated,
    receptive_field,
)
from transformer_book.baselines.memory_network import (
    MemoryNetwork,
    position_encoding_weights,
)
from transformer_book.baselines.pooling import (
    NadarayaWatson,
    attention_pooling,
)
from transformer_book.baselines.rnn import (
    RNN,
    RNNCell,
    gradient_norm_by_distance,
    rnn_unroll,
)
from transformer_book.baselines.seq2seq import (
    Seq2SeqGRU,
    sequence_accuracy,
    token_accuracy,
)

__all__ = [
    "RNN", "CausalConv1d", "ConvS2SBlock", "ConvS2SStack", "DilatedConvStack", "MemoryNetwork",
    "NadarayaWatson", "RNNCell", "Seq2SeqGRU", "SequenceConv1d", "attention_pooling", "glu",
    "gradient_norm_by_distance", "layers_to_connect", "path_length_convs2s",
    "path_length_dilated", "position_encoding_weights", "receptive_field", "rnn_unroll",
    "sequence_accuracy", "token_accuracy"
]
