"""nn/dropout.py: the fast dropout path against nn.Dropout (p = 0, eval mode: bit-identical;
p > 0: the keep rate and the scale, the exact formula for the drawn mask, seeded repeats)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.dropout import (
    FastDropout,
    dropout_mask,
    fast_dropout,
    keep_probability,
    use_fast_dropout,
)
from transformer_book.nn.transformer import Transformer
from transformer_book.util.validation import BookError

DTYPES = [torch.float32, torch.bfloat16, torch.float64]


def _model(dropout: float) -> Transformer:
    torch.manual_seed(0)
    return Transformer(TransformerConfig.preset("tiny", 50, dropout=dropout, max_len=16))


def _ids(b: int, length: int) -> torch.Tensor:
    return torch.randint(4, 50, (b, length))


@pytest.mark.parametrize("dtype", DTYPES)
def test_p_zero_and_eval_mode_are_bit_identical_to_nn_dropout(dtype: torch.dtype) -> None:
    x = torch.randn(7, 5, 16, dtype=dtype)
    for p, training in [(0.0, True), (0.0, False), (0.3, False), (0.9, False)]:
        plain, fast = nn.Dropout(p).train(training), FastDropout(p).train(training)
        out = fast(x)
        assert out.dtype == dtype
        assert torch.equal(out, plain(x))


def test_a_model_in_eval_mode_or_without_dropout_is_unchanged() -> None:
    src, tgt = _ids(3, 9), _ids(3, 7)
    for dropout, training in [(0.3, False), (0.0, True)]:
        model = _model(dropout).train(training)
        before = model(src, tgt)
        assert use_fast_dropout(model) > 0
        assert torch.equal(model(src, tgt), before)


@pytest.mark.parametrize("p", [0.1, 0.2, 0.5, 0.9, 0.003])
def test_keep_rate_and_scale_match_statistically(p: float) -> None:
    torch.manual_seed(1)
    n = 1 << 20
    x = torch.rand(n) + 1.0  # never zero: a zero output is a dropped element
    out = fast_dropout(x, p)
    kept = out != 0
    q = 1 - p
    assert abs(keep_probability(p) - q) <= 2.0**-17
    sigma = math.sqrt(q * (1 - q) / n)
    assert abs(kept.double().mean().item() - q) < 5 * sigma
    scale = torch.ones(()).div_(q)  # F.dropout's scale: the mask divided by 1 - p
    assert torch.equal(out[kept], x[kept] * scale)
    # The expectation of dropout is the identity: E[out] = x (to sampling error).
    assert abs(out.double().mean().item() - x.double().mean().item()) < 0.01


def test_neighbouring_elements_are_independent() -> None:
    """Four 16-bit draws share one 64-bit word: pairs inside a word and across words are
    kept together with probability q², as independent draws are."""
    torch.manual_seed(2)
    n, p = 1 << 20, 0.5
    kept = dropout_mask((n,), p).double()
    q2 = (1 - p) ** 2
    for shift in (1, 2, 3, 4, 5):
        both = (kept[:-shift] * kept[shift:]).mean().item()
        assert abs(both - q2) < 5 * math.sqrt(q2 * (1 - q2) / n)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", [0.1, 0.2, 0.003])
def test_output_is_exactly_x_times_mask_over_keep(dtype: torch.dtype, p: float) -> None:
    x = torch.randn(4, 9, 33, dtype=dtype, requires_grad=True)
    torch.manual_seed(3)
    out = fast_dropout(x, p)
    torch.manual_seed(3)
    mask = dropout_mask(x.shape, p)
    assert mask.dtype == torch.bool and mask.shape == x.shape
    noise = mask.to(dtype) / (1 - p)
    assert torch.equal(out, x * noise)
    grad = torch.randn_like(out)
    out.backward(grad)
    assert x.grad is not None and torch.equal(x.grad, grad * noise)


def test_seeded_runs_repeat_and_a_generator_is_used() -> None:
    x = torch.randn(64, 257)
    torch.manual_seed(4)
    first = fast_dropout(x, 0.2)
    torch.manual_seed(4)
    assert torch.equal(fast_dropout(x, 0.2), first)
    assert not torch.equal(fast_dropout(x, 0.2), first)  # the next draw is another mask
    a, b = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    assert torch.equal(fast_dropout(x, 0.2, generator=a), fast_dropout(x, 0.2, generator=b))
    assert torch.equal(dropout_mask(x.shape, 0.2, generator=torch.Generator().manual_seed(5)),
                       fast_dropout(x, 0.2, generator=torch.Generator().manual_seed(5)) != 0)


def test_seeded_training_step_repeats_with_fast_dropout() -> None:
    src, tgt = _ids(4, 9), _ids(4, 8)

    def step() -> torch.Tensor:
        model = _model(0.2).train()
        assert use_fast_dropout(model) == sum(type(m) is FastDropout for m in model.modules())
        torch.manual_seed(6)
        logits = model(src, tgt[:, :-1])
        F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten()).backward()
        return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    assert torch.equal(step(), step())


def test_use_fast_dropout_swaps_every_dropout_and_back() -> None:
    model = _model(0.2)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    plain = sum(type(m) is nn.Dropout for m in model.modules())
    assert plain > 0
    model.eval()
    assert use_fast_dropout(model) == plain
    assert not any(type(m) is nn.Dropout for m in model.modules())
    assert all(not m.training for m in model.modules())  # each module's mode kept
    assert all(m.p == 0.2 for m in model.modules() if isinstance(m, FastDropout))
    assert model.state_dict().keys() == state.keys()
    assert use_fast_dropout(model, enabled=False) == plain
    assert sum(type(m) is nn.Dropout for m in model.modules()) == plain
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())


def test_bad_inputs_are_refused() -> None:
    x = torch.randn(3)
    with pytest.raises(BookError, match="p"):
        fast_dropout(x, 1.5)
    with pytest.raises(BookError, match="training"):
        fast_dropout(x, 0.1, training="yes")  # type: ignore[arg-type]
    with pytest.raises(BookError, match="strictly between 0 and 1"):
        dropout_mask((3,), 0.0)
    with pytest.raises(BookError, match=r"an nn\.Module"):
        use_fast_dropout("model")  # type: ignore[arg-type]
    with pytest.raises(BookError, match="enabled"):
        use_fast_dropout(nn.Linear(2, 2), enabled=1)  # type: ignore[arg-type]
    with pytest.raises(BookError, match="p"):
        FastDropout(-0.1)
