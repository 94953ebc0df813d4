"""The one switch of the checks inside modules (util.validation.unchecked): off inside the
block only, restored after it (an exception included), and what decoding's loop runs in."""

from __future__ import annotations

import pytest
import torch

from transformer_book.inference.greedy import greedy_decode
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer
from transformer_book.util import validation
from transformer_book.util.validation import BookError, checking, unchecked


def _model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(TransformerConfig.preset("tiny", 20, max_len=16, dropout=0.0)).eval()


def test_a_module_check_runs_outside_the_block_only():
    model = _model()
    src = torch.tensor([[5, 6, 7]])
    with torch.no_grad():
        memory = model.encode(src)
    wrong = torch.tensor([[1.0]])  # float token ids
    with pytest.raises(BookError) as refused:
        model.decode(wrong, memory, src)
    assert str(refused.value).startswith("tgt_ids")
    with unchecked():
        assert not checking()
        with pytest.raises(Exception) as raised:  # torch's own error, from the embedding
            model.decode(wrong, memory, src)
        assert not isinstance(raised.value, BookError)
    assert checking()


def test_the_switch_is_restored_after_an_exception_and_nests():
    with pytest.raises(RuntimeError), unchecked():
        with unchecked():
            assert not checking()
        assert not checking()
        raise RuntimeError("inside")
    assert checking() and validation._CHECKING == [True]


def test_decoding_checks_its_inputs_at_the_entry_and_leaves_the_switch_on():
    model = _model()
    with pytest.raises(BookError) as refused:
        greedy_decode(model, torch.tensor([[5, 99]]), max_len_b=3)  # an id outside the vocabulary
    assert str(refused.value).startswith("src_ids")
    seen = []
    decode = model.decode

    def spy(*args, **kwargs):
        seen.append(checking())
        return decode(*args, **kwargs)

    model.decode = spy  # type: ignore[method-assign]
    greedy_decode(model, torch.tensor([[5, 6, 7]]), max_len_a=0.0, max_len_b=3, min_len=3)
    assert seen == [False, False, False] and checking(), "the loop's steps ran unchecked"
