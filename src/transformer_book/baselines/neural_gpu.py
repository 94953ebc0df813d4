"""The convolutional GRU (CGRU) and a small Neural GPU: active memory.

Kaiser & Sutskever (2016), "Neural GPUs Learn Algorithms", Section 2: the Neural GPU keeps a
*mental image* ``s`` of shape ``w x h x m`` (width = input length, height ``h``, ``m``
channels) and applies a convolutional gated recurrent unit to all of it at once, ``n`` times
for an input of length ``n``:

    CGRU(s) = u ⊙ s + (1 - u) ⊙ tanh(U * (r ⊙ s) + B),
    u = σ(U' * s + B'),    r = σ(U'' * s + B''),

where ``*`` is a 2-D convolution over (width, height) with a ``kw x kh`` kernel (3 x 3 in the
paper; ``m`` filters in, ``m`` out, "same" padding). The gates are those of a GRU (Cho et
al., 2014) with every matrix product replaced by a convolution. Kaiser & Bengio (2016), "Can
Active Memory Replace Attention?", Section 2 call this *active memory*: every memory
position is updated, in parallel and in the same way, at every step; the Extended Neural GPU
adds an active-memory decoder (their Section 3), which is not built here.

The reset gate sits *inside* the candidate's convolution (``U * (r ⊙ s)`` with ``r`` itself a
convolution of ``s``), so one CGRU composes two convolutions: a kernel ``kw`` wide moves
information ``2 · (kw // 2)`` positions per application, and the last of ``n`` positions
sees the first only after ``ceil((n - 1) / (2 · (kw // 2)))`` applications
(:func:`path_length_neural_gpu`): a path of O(n) *sequential* steps, each one parallel over
all positions.

Shapes: the memory is ``(B, W, H, C)`` (batch, width = positions, height, channels); the
:class:`NeuralGPU` reads and writes ``(B, L, C)`` like every sequence module of the course,
writing the input into height row 0 of ``s_0`` and reading row 0 of the final memory (the
paper embeds the input into the first column of ``s_0`` and reads the output from the first
column of ``s_n`` in the same way).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from transformer_book.util.validation import require, require_positive_int, require_tensor

__all__ = ["CGRU", "NeuralGPU", "path_length_neural_gpu"]


def _require_odd(value: int, argument: str) -> int:
    value = require_positive_int(value, argument)
    require(value % 2 == 1, argument, "an odd kernel size (centred 'same' padding)", value)
    return value


class CGRU(nn.Module):
    """One convolutional GRU step ``(B, W, H, C)`` -> ``(B, W, H, C)`` (Kaiser & Sutskever, 2016).

    ``u`` (update) and ``r`` (reset) come from one convolution with ``2C`` output channels;
    the candidate ``tanh(U * (r ⊙ s) + B)`` from a second one. Both are ``nn.Conv2d`` with
    centred padding over (width, height), kernel ``(kernel_width, kernel_height)``.

    Args:
        channels: C (the paper's m).
        kernel_width: kw, odd; information moves ``(kw - 1) // 2`` positions per step.
        kernel_height: kh, odd.
    """

    def __init__(self, channels: int, kernel_width: int = 3, kernel_height: int = 3) -> None:
        super().__init__()
        self.channels = require_positive_int(channels, "channels")
        self.kernel_width = _require_odd(kernel_width, "kernel_width")
        self.kernel_height = _require_odd(kernel_height, "kernel_height")
        kernel, padding = (kernel_width, kernel_height), (kernel_width // 2, kernel_height // 2)
        self.gates = nn.Conv2d(channels, 2 * channels, kernel, padding=padding)  # U', U''
        self.candidate = nn.Conv2d(channels, channels, kernel, padding=padding)  # U

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        """``s`` ``(B, W, H, C)`` -> the updated memory, same shape."""
        require_tensor(s, "s", ndim=4, floating=True)
        require(s.shape[-1] == self.channels, "s", f"shape (B, W, H, {self.channels})",
                tuple(s.shape))
        grid = s.permute(0, 3, 1, 2)  # (B, W, H, C) -> (B, C, W, H), Conv2d's layout
        u, r = torch.sigmoid(self.gates(grid)).chunk(2, dim=1)  # 2 x (B, C, W, H)
        c = torch.tanh(self.candidate(r * grid))  # (B, C, W, H)
        return (u * grid + (1 - u) * c).permute(0, 2, 3, 1)  # (B, W, H, C)


class NeuralGPU(nn.Module):
    """A Neural GPU: ``num_steps`` applications of shared CGRUs, ``(B, L, C)`` -> ``(B, L, C)``.

    Kaiser & Sutskever (2016), Section 2: ``s_{t+1} = CGRU_2(CGRU_1(s_t))`` with the same
    parameters at every step; here ``layers_per_step`` CGRUs (the paper uses 2) per step.
    The input ``x`` ``(B, L, C)`` is written into height row 0 of an otherwise zero memory
    ``(B, L, H, C)``, and row 0 of the last memory is returned.

    Args:
        channels: C, features in and out.
        num_steps: how many times the CGRU stack runs (the paper: the input length).
        height: H, rows of the memory (the paper uses 4).
        layers_per_step: CGRUs per step, each with its own parameters.
        kernel_width, kernel_height: the CGRU kernel (odd; the paper uses 3 x 3).
    """

    def __init__(self, channels: int, num_steps: int, height: int = 4, layers_per_step: int = 1,
                 kernel_width: int = 3, kernel_height: int = 3) -> None:
        super().__init__()
        self.channels = require_positive_int(channels, "channels")
        self.num_steps = require_positive_int(num_steps, "num_steps")
        self.height = require_positive_int(height, "height")
        require_positive_int(layers_per_step, "layers_per_step")
        self.cgrus = nn.ModuleList(CGRU(channels, kernel_width, kernel_height)
                                   for _ in range(layers_per_step))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``(B, L, C)`` -> row 0 of the memory after ``num_steps`` steps, ``(B, L, C)``."""
        require_tensor(x, "x", ndim=3, floating=True)
        require(x.shape[2] == self.channels and x.shape[1] >= 1, "x",
                f"shape (B, L, {self.channels}) with L >= 1", tuple(x.shape))
        s = F.pad(x.unsqueeze(2), (0, 0, 0, self.height - 1))  # (B, L, C) -> (B, L, H, C)
        for _ in range(self.num_steps):
            for cgru in self.cgrus:
                s = cgru(s)
        return s[:, :, 0]  # (B, L, H, C) -> (B, L, C)


def path_length_neural_gpu(n: int, kernel_width: int = 3, layers_per_step: int = 1) -> int:
    """Steps of a :class:`NeuralGPU` for output position n - 1 to see input position 0.

    Each CGRU composes two centred convolutions (the reset gate's and the candidate's), so
    it reaches ``2 · (kernel_width // 2)`` positions; a step applies ``layers_per_step`` of
    them. Hence ``ceil((n - 1) / (2 · (kernel_width // 2) · layers_per_step))`` steps: O(n).
    """
    n = require_positive_int(n, "n")
    reach = 2 * (_require_odd(kernel_width, "kernel_width") // 2)
    require(reach > 0, "kernel_width", "an odd kernel width >= 3", kernel_width)
    reach *= require_positive_int(layers_per_step, "layers_per_step")
    return -(-(n - 1) // reach)  # ceil((n - 1) / reach) in integers
