"""Dropout's fast path on the CPU: cheaper masks, the same dropout (Section 5.4).

Section 5.4: "We apply dropout to the output of each sub-layer ... In addition, we apply
dropout to the sums of the embeddings and the positional encodings". ``nn.Dropout`` is the
teaching path and the default everywhere. On the CPU it draws its mask with
``bernoulli_(1 - p)``, one 64-bit draw of torch's Mersenne Twister per element, then divides
the mask by ``1 - p`` and multiplies: in a training step of the small preset the masks are a
large share of the time (``benchmarks/bench_fast.py`` measures it).

:func:`fast_dropout` draws the same kind of mask from fewer random bits: one 64-bit draw of
the same generator gives four 16-bit integers ``u``, each uniform on ``[-2^15, 2^15)``, and an
element is kept where ``u >= t``, with ``t = -2^15 + round(p · 2^16)``; the comparison writes
the 0/1 mask straight into ``x``'s dtype (``torch.ge(..., out=)``), divided by ``1 - p`` as
``F.dropout`` divides its mask. So:

- the output is exactly ``x * (mask / (1 - p))`` for the drawn mask (:func:`dropout_mask`),
  the arithmetic of ``F.dropout``, and its gradient is ``grad * (mask / (1 - p))``;
- an element is kept with probability ``1 - round(p · 2^16) / 2^16``, within ``2^-17`` of
  ``1 - p`` (for ``p < 2^-8`` the draw takes 32 bits, two integers per 64-bit draw, and the
  probability is within ``2^-33``);
- a seeded run repeats itself: the bits come from torch's default generator (or the one
  given), so ``torch.manual_seed`` and the saved RNG states of :mod:`transformer_book.util.rng`
  cover it;
- the masks differ from ``nn.Dropout``'s for the same seed (another draw), so a seeded run
  with the fast path is not the run without it, only the same distribution.

With ``p = 0``, in eval mode, off the CPU and while ``torch.compile`` traces (the compiler
makes its own dropout), :func:`fast_dropout` is ``F.dropout`` itself. :class:`FastDropout` is
the module, and :func:`use_fast_dropout` swaps every ``nn.Dropout`` of a model for it (and
back): the one, opt-in, switch.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from transformer_book.util.validation import require, require_bool, require_probability

__all__ = ["FastDropout", "dropout_mask", "fast_dropout", "keep_probability",
           "use_fast_dropout"]

#: Below this p, 16 bits would round p by more than 0.2% of itself: the draw takes 32 bits.
SHORT_DRAW_FROM = 2.0**-8


def _bits(p: float) -> int:
    """Bits of randomness per element for dropout probability ``p``: 16, or 32 for tiny p."""
    return 16 if p >= SHORT_DRAW_FROM else 32


def _threshold(p: float, bits: int) -> int:
    """``t`` of ``keep = u >= t`` for ``u`` uniform on the signed ``bits``-bit integers."""
    return -(2 ** (bits - 1)) + round(p * 2**bits)


def keep_probability(p: float) -> float:
    """The probability that :func:`fast_dropout` keeps an element: ``1 - round(p · 2^b) /
    2^b`` with ``b`` = 16 bits (32 for ``p < 2^-8``), within ``2^-(b+1)`` of ``1 - p``."""
    require_probability(p, "p")
    bits = _bits(p)
    return 1.0 - round(p * 2**bits) / 2**bits


def _uniform_bits(numel: int, bits: int, device: torch.device,
                  generator: torch.Generator | None) -> torch.Tensor:
    """``numel`` integers uniform on the signed ``bits``-bit range, flat: 64 // bits of them
    from each 64-bit draw of the generator."""
    per_word = 64 // bits
    words = torch.empty(math.ceil(numel / per_word), dtype=torch.int64, device=device)
    words.random_(-(2**63), None, generator=generator)  # all 64 bits uniform
    # (words,) int64 -> (words · per_word,) int16 or int32 -> the first numel
    return words.view(torch.int16 if bits == 16 else torch.int32)[:numel]


def _noise(shape: torch.Size, p: float, dtype: torch.dtype, device: torch.device,
           generator: torch.Generator | None) -> torch.Tensor:
    """``mask / (1 - p)`` in ``dtype``, shaped ``shape``, the mask drawn as the module
    docstring says (the comparison writes 0/1 in ``dtype`` directly)."""
    bits = _bits(p)
    numel = math.prod(shape)
    noise = torch.empty(shape, dtype=dtype, device=device)
    draws = _uniform_bits(numel, bits, device, generator).view(shape)  # (numel,) -> shape
    torch.ge(draws, _threshold(p, bits), out=noise)
    return noise.div_(1 - p)  # as F.dropout divides its mask: the same scale, rounded alike


def dropout_mask(shape: tuple[int, ...] | torch.Size, p: float, *,
                 device: torch.device | str = "cpu",
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """The keep mask :func:`fast_dropout` draws for an ``x`` of ``shape`` and dropout
    probability ``0 < p < 1``: bool ``shape``, True = kept. From the same generator state
    :func:`fast_dropout` returns exactly ``x * (mask.to(x.dtype) / (1 - p))``."""
    p = require_probability(p, "p")
    require(0.0 < p < 1.0, "p", "a probability strictly between 0 and 1 (a mask is drawn)", p)
    device = torch.device(device)
    return _noise(torch.Size(shape), p, torch.float32, device, generator) > 0


def fast_dropout(x: torch.Tensor, p: float, training: bool = True,
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """Section 5.4's dropout, the fast path: ``x (any shape)`` -> the same shape, each
    element kept with probability ``1 - p`` (to ``2^-17``, see :func:`keep_probability`) and
    scaled by ``1 / (1 - p)``, else zero; ``F.dropout(x, p, training)`` itself where the
    module docstring says (p = 0, eval mode, off the CPU, while compiling). Only the plain
    arguments are checked (no tensor is read)."""
    if not torch.compiler.is_compiling():
        require_probability(p, "p")
        require_bool(training, "training")
    cheaper = x.device.type == "cpu" and not torch.compiler.is_compiling()
    if not training or p == 0.0 or not cheaper or x.numel() == 0:
        return F.dropout(x, p, training)
    return x * _noise(x.shape, p, x.dtype, x.device, generator)  # autograd keeps the noise


class FastDropout(nn.Dropout):
    """``nn.Dropout`` with :func:`fast_dropout`'s masks: ``forward(x) -> x`` dropped, the
    same shape. A subclass, so the model's code and ``isinstance`` checks see a dropout."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__(require_probability(p, "p"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fast_dropout(x, self.p, self.training)


def use_fast_dropout(model: nn.Module, enabled: bool = True) -> int:
    """Swap every ``nn.Dropout`` inside ``model`` for a :class:`FastDropout` of the same
    ``p`` (``enabled=False``: back to ``nn.Dropout``); returns how many were swapped. Dropout
    has no parameters or buffers, so the state dict is unchanged. In-place dropouts are left
    alone. Off by default: a model uses the fast masks only after this call."""
    require(isinstance(model, nn.Module), "model", "an nn.Module", type(model).__name__)
    require_bool(enabled, "enabled")
    swapped = 0
    for parent in list(model.modules()):  # listed first: the loop replaces children
        for name, child in list(parent.named_children()):
            if enabled and type(child) is nn.Dropout and not child.inplace:
                new: nn.Module = FastDropout(child.p)
            elif not enabled and type(child) is FastDropout:
                new = nn.Dropout(child.p)
            else:
                continue
            new.train(child.training)
            setattr(parent, name, new)
            swapped += 1
    return swapped
