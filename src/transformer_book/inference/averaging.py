"""Checkpoint averaging (Section 6.1): one model from the mean of the last few checkpoints.

Section 6.1: "For the base models, we used a single model obtained by averaging the last 5
checkpoints, which were written at 10-minute intervals." The checkpoints of one run lie close
together on the loss surface, so their element-wise mean is a model too, usually a slightly
better one than any of them. :func:`~transformer_book.inference.trained.load_trained` calls
:func:`average_checkpoints` when asked for ``average=N``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from transformer_book.run.checkpoint import describe_mismatch, load_weights
from transformer_book.util.validation import require

__all__ = ["average_checkpoints"]


def average_checkpoints(directories: Sequence[str | Path]) -> dict[str, torch.Tensor]:
    """The element-wise mean of several checkpoints' weights (Section 6.1).

    All must hold the same tensor names and shapes (differences are named in the
    :class:`~transformer_book.util.validation.BookError`). Floating-point tensors are
    averaged in float64 and cast back; integer buffers are taken from the last checkpoint.
    Tied names are all present in the result, so it loads with ``model.load_state_dict``.
    """
    require(isinstance(directories, Sequence) and not isinstance(directories, (str, bytes))
            and len(directories) > 0, "directories", "a non-empty list of checkpoint folders",
            repr(directories))
    total: dict[str, torch.Tensor] = {}
    first = None
    last: dict[str, torch.Tensor] = {}
    for directory in map(Path, directories):
        state = load_weights(directory)  # every file's sha256 verified
        if first is None:
            first = directory
            total = {k: v.double() if v.is_floating_point() else v for k, v in state.items()}
        else:
            problem = describe_mismatch(total, state, "this vs first")
            require(not problem, "directories", f"checkpoints shaped like {first}",
                    f"{directory}: {problem}")
            for k, v in state.items():
                if v.is_floating_point():
                    total[k] = total[k] + v.double()
        last = state
    n = len(directories)
    return {k: (total[k] / n).to(v.dtype) if v.is_floating_point() else v.clone()
            for k, v in last.items()}
