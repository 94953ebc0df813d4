"""Cost per layer of self-attention, recurrent and convolutional layers (Table 1, counted).

Vaswani et al. (2017), Table 1 gives the complexity per layer: self-attention O(n²·d),
recurrent O(n·d²), convolutional O(k·n·d²). Section 4: "self-attention layers are faster
than recurrent layers when the sequence length n is smaller than the representation
dimensionality d". These functions count exactly, for a sequence of n positions with d
features in and out, ignoring biases, nonlinearities and softmax:

============================  ===================================  =============
layer                         multiply-adds                        Table 1
============================  ===================================  =============
self-attention (core)         n·n·d (Q Kᵀ) + n·n·d (weights · V)   O(n²·d)
  + projections (optional)    4·n·d² (W^Q, W^K, W^V, W^O)
recurrent (Elman)             n·(d² + d²) (W_ih x_t and W_hh h)    O(n·d²)
convolution, kernel k         n·k·d² (k·d inputs per output unit)  O(k·n·d²)
============================  ===================================  =============

Each function returns FLOPs, counting a multiply-add as 2 floating-point operations
(the usual convention of hardware peak figures).
"""

from __future__ import annotations

from transformer_book.util.validation import require_positive_int

__all__ = ["conv_flops_per_layer", "recurrent_flops_per_layer", "self_attention_flops_per_layer"]


def self_attention_flops_per_layer(n: int, d: int, include_projections: bool = False) -> int:
    """FLOPs of one self-attention layer over n positions of width d: ``2·(2·n²·d)``.

    The scores Q Kᵀ are n·n dot products of length d (n²·d multiply-adds); the weighted
    sum of the values is another n²·d. ``include_projections`` adds the four d x d
    projections of multi-head attention (4·n·d² multiply-adds, Section 3.2.2), which
    Table 1's O(n²·d) leaves out.
    """
    n, d = require_positive_int(n, "n"), require_positive_int(d, "d")
    multiply_adds = 2 * n * n * d + (4 * n * d * d if include_projections else 0)
    return 2 * multiply_adds


def recurrent_flops_per_layer(n: int, d: int) -> int:
    """FLOPs of an Elman RNN layer over n steps, input and state width d: ``2·(2·n·d²)``.

    Each step computes W_ih x_t and W_hh h_{t-1}, two d x d matrix-vector products. A GRU
    does three times and an LSTM four times this; the O(n·d²) is the same.
    """
    n, d = require_positive_int(n, "n"), require_positive_int(d, "d")
    return 2 * (2 * n * d * d)


def conv_flops_per_layer(n: int, d: int, k: int) -> int:
    """FLOPs of a width-k convolution over n positions, d channels in and out: ``2·(n·k·d²)``.

    Each of the n·d output units sums k·d weighted inputs (zero padding keeps n outputs;
    the products with padding zeros are counted, as a dense kernel computes them).
    """
    n, d = require_positive_int(n, "n"), require_positive_int(d, "d")
    k = require_positive_int(k, "k")
    return 2 * (n * k * d * d)
