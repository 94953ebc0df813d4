"""Tests of transformer_book.nn.masks: the causal masks of (cached) decoding, the checks of
attention's inputs, and when the host may read a tensor's values."""

from __future__ import annotations

import pytest
import torch

from transformer_book.nn.attention import causal_mask
from transformer_book.nn.masks import (
    check_mask,
    check_qk,
    readable_without_sync,
    shifted_causal_mask,
    with_causal,
)
from transformer_book.util.validation import BookError


@pytest.mark.parametrize(("new", "total"), [(1, 1), (1, 5), (3, 5), (5, 5)])
def test_shifted_causal_mask_is_the_last_rows_of_the_full_one(new: int, total: int) -> None:
    """New tokens after ``total - new`` cached ones see what they would in the full prefix."""
    got = shifted_causal_mask(new, total, "cpu")
    assert got.shape == (new, total) and got.dtype == torch.bool
    assert torch.equal(got, causal_mask(total)[total - new:]), f"new={new}, total={total}"


def test_with_causal_is_top_left_aligned_and_keeps_the_mask() -> None:
    """As F.scaled_dot_product_attention(is_causal=True): query i sees keys 0 .. i."""
    assert torch.equal(with_causal(None, 2, 4, "cpu"),
                       torch.tensor([[True, False, False, False], [True, True, False, False]]))
    padding = torch.tensor([True, True, False, True])[None, None, None, :]  # (1, 1, 1, 4)
    combined = with_causal(padding, 4, 4, "cpu")
    assert combined.shape == (1, 1, 4, 4)
    assert torch.equal(combined[0, 0], causal_mask(4) & padding[0, 0]), "mask & causal"


def test_readable_without_sync_only_for_cpu_tensors() -> None:
    assert readable_without_sync(torch.ones(2))
    assert not readable_without_sync(torch.ones(2, device="meta")), "a device tensor"


def test_checks_name_the_argument() -> None:
    q = torch.zeros(2, 3, 4)
    with pytest.raises(BookError, match=r"mask: expected a boolean tensor"):
        check_mask(torch.ones(3, 3), (2, 3, 3))
    with pytest.raises(BookError, match=r"mask: expected a shape broadcastable to \(2, 3, 3\), "
                                        r"received shape \(4, 3\)"):
        check_mask(torch.ones(4, 3, dtype=torch.bool), (2, 3, 3))
    check_mask(torch.ones(1, 3, dtype=torch.bool), (2, 3, 3))  # broadcastable: nothing to say
    with pytest.raises(BookError, match=r"k: expected last dimension d_k=4 \(as q\)"):
        check_qk(q, torch.zeros(2, 3, 5))
    with pytest.raises(BookError, match=r"k: expected finite values"):
        check_qk(q, torch.full((2, 3, 4), float("nan")))
    check_qk(q, torch.full((2, 3, 4), float("nan")), values=False)  # metadata only
