"""How long a translation may grow: one rule, per sentence, for every decoder (Section 6.1).

Section 6.1: "We set the maximum output length during inference to input length + 50, but
terminate early when possible." Greedy search and beam search both ask
:func:`output_length_limits`, so a sentence gets the same budget whichever search decodes
it and whichever sentences share its batch.
"""

from __future__ import annotations

import torch

from transformer_book.util.validation import require_int, require_number, require_tensor

__all__ = ["output_length_limits"]


def output_length_limits(
    src_ids: torch.Tensor,
    pad_id: int,
    max_len_a: float,
    max_len_b: int,
    max_positions: int,
) -> torch.Tensor:
    """The most tokens each sentence may generate (``<eos>`` not counted): long ``(B,)``.

    ``a · |x| + b`` for every row of ``src_ids (B, S)``, ``|x|`` its real length (tokens
    other than ``pad_id``), rounded down, then capped to ``[1, max_positions - 1]``: the
    decoder reads ``<bos>`` plus the generated tokens, and has ``max_positions`` positions.
    Section 6.1 is ``a = 1, b = 50``; a fixed budget of N tokens is ``a = 0, b = N``.
    ``a`` and ``b`` may be as large as asked (``b = 10**30`` is "as long as the model
    allows"): both are capped to ``max_positions`` first, which changes no limit (a source
    has at least one token, so either one alone reaches the cap) and keeps the arithmetic
    finite. Computed on ``src_ids``'s device, without synchronising with it.
    """
    require_tensor(src_ids, "src_ids", ndim=2)
    require_int(pad_id, "pad_id")
    max_len_a = require_number(max_len_a, "max_len_a", minimum=0)
    require_int(max_len_b, "max_len_b", minimum=0)
    require_int(max_positions, "max_positions", minimum=2)
    # Capped first: 1e300 · |x| would be inf in float32, and inf (or nan, for |x| = 0) has no
    # integer value -- .long() would turn it into -2**63, silently clamped to one token.
    max_len_a, max_len_b = min(max_len_a, max_positions), min(max_len_b, max_positions)
    src_len = (src_ids != pad_id).sum(1)  # (B, S) -> (B,): the real source lengths
    return (max_len_a * src_len + max_len_b).long().clamp(1, max_positions - 1)  # (B,)
