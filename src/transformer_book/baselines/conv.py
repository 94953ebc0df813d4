"""Convolutional sequence models: dilated causal convolutions, ConvS2S blocks, path lengths.

Vaswani et al. (2017), Section 1: in ByteNet and ConvS2S "the number of operations
required to relate signals from two arbitrary input or output positions grows in the
distance between positions, linearly for ConvS2S and logarithmically for ByteNet."
Section 4: "A single convolutional layer with kernel width k < n does not connect all pairs
of input and output positions. Doing so requires a stack of O(n/k) convolutional layers in
the case of contiguous kernels, or O(log_k(n)) in the case of dilated convolutions".
:func:`receptive_field` measures that from gradients and :func:`layers_to_connect` counts
the layers; the closed forms are :func:`path_length_convs2s` and :func:`path_length_dilated`.

Every module here takes and returns ``(B, L, C)`` (batch, length, channels), like the rest
of the course; they transpose to ``nn.Conv1d``'s ``(B, C, L)`` inside.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from transformer_book.util.validation import (
    bad_input,
    require,
    require_bool,
    require_int,
    require_positive_int,
    require_tensor,
)

__all__ = [
    "CausalConv1d",
    "ConvS2SBlock",
    "ConvS2SStack",
    "DilatedConvStack",
    "SequenceConv1d",
    "glu",
    "layers_to_connect",
    "path_length_convs2s",
    "path_length_dilated",
    "receptive_field",
]


def _check_sequence(x: torch.Tensor, channels: int, argument: str = "x") -> None:
    require_tensor(x, argument, ndim=3, floating=True)
    require(x.shape[2] == channels, argument, f"shape (B, L, {channels})", tuple(x.shape))
    require(x.shape[1] >= 1, argument, "a sequence of length >= 1", f"shape {tuple(x.shape)}")


class SequenceConv1d(nn.Module):
    """A 1-D convolution over ``(B, L, C_in)`` -> ``(B, L, C_out)`` that keeps the length.

    ``causal=True`` pads ``(k - 1) * dilation`` zeros on the left only, so output t sees
    inputs t - (k-1)·dilation, ..., t and nothing later (the masked convolutions of the
    ByteNet decoder, Kalchbrenner et al., 2016, Section 3.1). ``causal=False`` splits the
    padding (left gets the smaller half), centring the kernel as in the ConvS2S encoder.
    The weights live in ``self.conv``, a plain ``nn.Conv1d``.
    """

    def __init__(self, channels_in: int, channels_out: int, kernel_size: int,
                 dilation: int = 1, causal: bool = True) -> None:
        super().__init__()
        self.channels_in = require_positive_int(channels_in, "channels_in")
        self.channels_out = require_positive_int(channels_out, "channels_out")
        self.kernel_size = require_positive_int(kernel_size, "kernel_size")
        self.dilation = require_positive_int(dilation, "dilation")
        self.causal = require_bool(causal, "causal")
        self.conv = nn.Conv1d(channels_in, channels_out, kernel_size, dilation=dilation)
        total = (kernel_size - 1) * dilation
        self.padding = (total, 0) if self.causal else (total // 2, total - total // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``(B, L, C_in)`` -> ``(B, L, C_out)``."""
        _check_sequence(x, self.channels_in)
        x = F.pad(x.transpose(1, 2), self.padding)  # (B, L, C) -> (B, C, pad + L + pad)
        return self.conv(x).transpose(1, 2)  # (B, C_out, L) -> (B, L, C_out)


class CausalConv1d(SequenceConv1d):
    """Causal (left-padded) dilated convolution ``(B, L, C_in)`` -> ``(B, L, C_out)``.

    Output position t depends on inputs t - (k-1)·dilation, ..., t only (Kalchbrenner et
    al., 2016, Section 3.1: "the masking ensures that the target network does not access
    future information"). Same weights as ``nn.Conv1d(channels_in, channels_out,
    kernel_size, dilation=dilation)`` in ``self.conv``.
    """

    def __init__(self, channels_in: int, channels_out: int, kernel_size: int,
                 dilation: int = 1) -> None:
        super().__init__(channels_in, channels_out, kernel_size, dilation, causal=True)


class DilatedConvStack(nn.Module):
    """ByteNet-style stack of dilated convolutions with residual connections.

    Kalchbrenner et al. (2016), Section 3.2: "the dilation rates are doubled every layer up
    to a maximum rate r (for our experiments r = 16)", which makes "the receptive field
    grow exponentially with depth". Each layer is a pre-activation residual block
    ``x + conv_d(ReLU(LayerNorm(x)))`` (their Section 3.6 blocks, simplified to one conv).
    With kernel k and dilations d_1..d_m the receptive field is ``1 + (k-1)·Σ d_i``.

    Args:
        channels: C, features in and out, ``(B, L, C)`` -> ``(B, L, C)``.
        kernel_size: k.
        dilations: one dilation per layer, e.g. ``(1, 2, 4, 8)``.
        causal: left padding only (a decoder); centred padding otherwise.
    """

    def __init__(self, channels: int, kernel_size: int = 3,
                 dilations: Sequence[int] = (1, 2, 4, 8), causal: bool = True) -> None:
        super().__init__()
        self.channels = require_positive_int(channels, "channels")
        self.kernel_size = require_positive_int(kernel_size, "kernel_size")
        dilations = tuple(dilations)
        require(len(dilations) >= 1, "dilations", "at least one dilation", dilations)
        for dilation in dilations:
            require_positive_int(dilation, "dilations")
        self.dilations = dilations
        self.norms = nn.ModuleList(nn.LayerNorm(channels) for _ in dilations)
        self.convs = nn.ModuleList(
            SequenceConv1d(channels, channels, kernel_size, d, causal=causal) for d in dilations
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``(B, L, C)`` -> ``(B, L, C)``."""
        _check_sequence(x, self.channels)
        for norm, conv in zip(self.norms, self.convs, strict=True):
            x = x + conv(torch.relu(norm(x)))  # (B, L, C)
        return x


def glu(x: torch.Tensor) -> torch.Tensor:
    """Gated linear unit over the last dimension: ``(..., 2C)`` -> ``(..., C)``.

    Gehring et al. (2017), Section 3.2: "v([A B]) = A ⊗ σ(B) [...] where A, B ∈ R^d are the
    inputs to the non-linearity, ⊗ is the point-wise multiplication and the output
    v([A B]) ∈ R^d is half the size of Y". Equal to ``F.glu(x, dim=-1)``.
    """
    require_tensor(x, "x", floating=True)
    require(x.ndim >= 1 and x.shape[-1] % 2 == 0, "x", "an even last dimension (2C)",
            f"shape {tuple(x.shape)}")
    a, b = x.chunk(2, dim=-1)  # (..., 2C) -> 2 x (..., C)
    return a * torch.sigmoid(b)


class ConvS2SBlock(nn.Module):
    """One ConvS2S layer: conv to 2C channels, GLU back to C, scaled residual.

    Gehring et al. (2017), Section 3.2: "h_i^l = v(W^l [h_{i-k/2}^{l-1}, ...,
    h_{i+k/2}^{l-1}] + b_w^l) + h_i^{l-1}"; Section 3.4: "We scale the output of residual
    blocks [...] by √0.5 to halve the variance of the sum". So the output is
    ``(x + glu(conv(x))) · √0.5``, ``(B, L, C)`` -> ``(B, L, C)``.

    Args:
        channels: C.
        kernel_size: k (the paper uses odd k with centred padding in the encoder).
        causal: left padding only, as in the ConvS2S decoder ("we pad the input by k - 1
            elements on both the left and right side by zero vectors, and remove k elements
            from the end"); centred padding otherwise (the encoder).
    """

    def __init__(self, channels: int, kernel_size: int, causal: bool = False) -> None:
        super().__init__()
        self.channels = require_positive_int(channels, "channels")
        self.kernel_size = require_positive_int(kernel_size, "kernel_size")
        self.conv = SequenceConv1d(channels, 2 * channels, kernel_size, causal=causal)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``(B, L, C)`` -> ``(B, L, C)``."""
        _check_sequence(x, self.channels)
        return (x + glu(self.conv(x))) * math.sqrt(0.5)  # (B, L, 2C) -> (B, L, C)


class ConvS2SStack(nn.Module):
    """``num_layers`` :class:`ConvS2SBlock` in a row, ``(B, L, C)`` -> ``(B, L, C)``.

    Each layer widens the receptive field by k - 1 positions, so relating positions n
    apart takes O(n/k) layers (Vaswani et al., 2017, Section 4).
    """

    def __init__(self, channels: int, kernel_size: int, num_layers: int,
                 causal: bool = False) -> None:
        super().__init__()
        self.channels = require_positive_int(channels, "channels")
        self.kernel_size = require_positive_int(kernel_size, "kernel_size")
        require_positive_int(num_layers, "num_layers")
        self.blocks = nn.ModuleList(
            ConvS2SBlock(channels, kernel_size, causal=causal) for _ in range(num_layers)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``(B, L, C)`` -> ``(B, L, C)``."""
        _check_sequence(x, self.channels)
        for block in self.blocks:
            x = block(x)
        return x


def receptive_field(model: nn.Module | Callable[[torch.Tensor], torch.Tensor], length: int,
                    position: int | None = None, channels: int | None = None,
                    seed: int = 0) -> torch.Tensor:
    """Which input positions reach output ``position``, found from gradients.

    Feeds a standard-normal input ``(1, length, C)`` that requires grad, back-propagates
    ``output[0, position].sum()`` and marks the inputs whose gradient is nonzero. Works for
    any map ``(B, L, C)`` -> ``(B, L, C')`` (a tuple output uses its first element), e.g. a
    convolution stack or a self-attention layer. Dropout is switched off while measuring.

    Args:
        model: the module (or function) to probe.
        length: L >= 1.
        position: the output position, in ``[-L, L)``; the last one if None.
        channels: C of the input; read from ``model.channels`` if None.
        seed: seeds the random input.

    Returns:
        A ``torch.bool`` tensor ``(length,)``: True where the input reaches the output.
    """
    length = require_positive_int(length, "length")
    if channels is None:
        channels = getattr(model, "channels", None)
        require(channels is not None, "channels", "an integer (the model has no .channels)",
                None)
    channels = require_positive_int(channels, "channels")
    position = length - 1 if position is None else position
    require_int(position, "position", minimum=-length, maximum=length - 1)
    parameters = list(model.parameters()) if isinstance(model, nn.Module) else []
    dtype = parameters[0].dtype if parameters else torch.get_default_dtype()
    device = parameters[0].device if parameters else torch.device("cpu")
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(1, length, channels, generator=generator, dtype=dtype)
    x = x.to(device).requires_grad_(True)
    was_training = isinstance(model, nn.Module) and model.training
    if isinstance(model, nn.Module):
        model.eval()
    try:
        out = model(x)
    finally:
        if was_training:
            model.train()
    out = out[0] if isinstance(out, tuple) else out
    require(isinstance(out, torch.Tensor) and out.ndim == 3 and out.shape[:2] == (1, length),
            "model", f"a map to shape (1, {length}, C')",
            tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__)
    (grad,) = torch.autograd.grad(out[0, position].sum(), x, allow_unused=True)
    if grad is None:  # the output does not depend on the input at all
        return torch.zeros(length, dtype=torch.bool)
    return (grad[0].abs() > 0).any(dim=-1).cpu()  # (L, C) -> (L,)


def layers_to_connect(make_model: Callable[[int], nn.Module], length: int, channels: int,
                      max_layers: int | None = None) -> int:
    """The fewest layers for output position n - 1 to see input position 0 (n = length).

    Builds ``make_model(m)`` for m = 1, 2, ... and returns the first m whose
    :func:`receptive_field` at the last position contains position 0: the maximum path
    length of Vaswani et al. (2017), Table 1, measured. A length of 1 needs 0 layers.

    Raises:
        ValueError: if no model up to ``max_layers`` (default: ``length``) connects them.
    """
    length = require_positive_int(length, "length")
    channels = require_positive_int(channels, "channels")
    max_layers = length if max_layers is None else require_positive_int(max_layers, "max_layers")
    if length == 1:
        return 0
    for num_layers in range(1, max_layers + 1):
        if receptive_field(make_model(num_layers), length, channels=channels)[0]:
            return num_layers
    raise bad_input("make_model", f"a model that connects position {length - 1} to 0 within "
               f"{max_layers} layers", "no such model")


def path_length_convs2s(n: int, k: int, causal: bool = True) -> int:
    """Layers of contiguous width-k convolutions for position n - 1 to see position 0.

    Causal: each layer reaches k - 1 positions further back, so ``ceil((n-1)/(k-1))``
    layers (O(n/k), Vaswani et al., 2017, Section 4). Centred (non-causal, odd k): only
    ``(k-1)/2`` per layer to the left, so ``ceil((n-1)/((k-1)//2))``.
    """
    n = require_positive_int(n, "n")
    k = require_int(k, "k", minimum=2 if causal else 3)
    reach = k - 1 if causal else (k - 1) // 2
    return -(-(n - 1) // reach)  # ceil((n - 1) / reach) in integers


def path_length_dilated(n: int, k: int, dilation_base: int | None = None) -> int:
    """Layers of causal dilated convolutions (dilations 1, b, b², ...) to connect n - 1 to 0.

    m layers see ``1 + (k-1)(1 + b + ... + b^(m-1))`` positions. With b = k (the default)
    that is exactly ``k^m``, so the answer is ``ceil(log_k n)``: O(log_k(n)) (Vaswani et
    al., 2017, Section 4). ByteNet uses k = 3 with doubling dilations (b = 2).
    Computed in integers, so there is no floating-point rounding at powers of k.
    """
    n = require_positive_int(n, "n")
    k = require_int(k, "k", minimum=2)
    base = k if dilation_base is None else require_int(dilation_base, "dilation_base", minimum=2)
    layers, seen, dilation = 0, 1, 1
    while seen < n:
        seen += (k - 1) * dilation
        dilation *= base
        layers += 1
    return layers
