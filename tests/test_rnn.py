"""RNNCell / RNN against PyTorch in float64, the unrolled loop, gradients over distance."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from transformer_book.baselines.rnn import RNN, RNNCell, gradient_norm_by_distance, rnn_unroll


def test_cell_parameters_are_named_like_torch() -> None:
    ours, theirs = RNNCell(3, 5), nn.RNNCell(3, 5)
    assert {k: v.shape for k, v in ours.state_dict().items()} == {
        k: v.shape for k, v in theirs.state_dict().items()
    }, "same parameter names and shapes as nn.RNNCell"


@settings(max_examples=15, deadline=None)
@given(
    batch=st.integers(1, 4),
    input_size=st.integers(1, 6),
    hidden=st.integers(1, 6),
    seed=st.integers(0, 2**16),
)
def test_cell_equals_torch_rnn_cell_float64(batch: int, input_size: int, hidden: int,
                                            seed: int) -> None:
    torch.manual_seed(seed)
    theirs = nn.RNNCell(input_size, hidden).double()
    ours = RNNCell.from_torch(theirs)
    x, h = torch.randn(batch, input_size).double(), torch.randn(batch, hidden).double()
    torch.testing.assert_close(ours(x, h), theirs(x, h), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ours(x), theirs(x), rtol=1e-12, atol=1e-12)


def test_load_state_dict_from_torch_cell() -> None:
    theirs = nn.RNNCell(4, 3).double()
    ours = RNNCell(4, 3).double()
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 4, dtype=torch.float64)
    torch.testing.assert_close(ours(x), theirs(x), rtol=1e-12, atol=1e-12)


@settings(max_examples=10, deadline=None)
@given(batch=st.integers(1, 3), length=st.integers(1, 7), seed=st.integers(0, 2**16))
def test_unrolled_equals_torch_rnn_batch_first(batch: int, length: int, seed: int) -> None:
    torch.manual_seed(seed)
    theirs = nn.RNN(3, 4, batch_first=True).double()
    ours = RNN.from_torch(theirs)
    x = torch.randn(batch, length, 3, dtype=torch.float64)
    h0 = torch.randn(batch, 4, dtype=torch.float64)
    out, h_last = ours(x, h0)
    ref_out, ref_h = theirs(x, h0.unsqueeze(0))
    assert out.shape == (batch, length, 4), "outputs are (B, L, H)"
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(h_last, ref_h[0], rtol=1e-12, atol=1e-12)
    out_cell, _ = rnn_unroll(ours.cell, x, h0)
    torch.testing.assert_close(out_cell, out, rtol=0, atol=0)


def test_rnn_unroll_accepts_torch_gru_cell() -> None:
    gru = nn.GRU(3, 4, batch_first=True).double()
    cell = nn.GRUCell(3, 4).double()
    cell.load_state_dict({k.removesuffix("_l0"): v for k, v in gru.state_dict().items()})
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    out, h = rnn_unroll(cell, x)
    ref, ref_h = gru(x)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(h, ref_h[0], rtol=1e-12, atol=1e-12)


def test_outputs_do_not_depend_on_future_inputs() -> None:
    cell = RNNCell(2, 3).double()
    x = torch.randn(1, 6, 2, dtype=torch.float64)
    y = x.clone()
    y[:, 4:] += 1.0
    torch.testing.assert_close(rnn_unroll(cell, x)[0][:, :4], rnn_unroll(cell, y)[0][:, :4])


def test_unroll_backward_reads_the_input_once() -> None:
    """The input is split once (unbind): its backward is linear in L, not quadratic as L
    slices x[:, t] would be (each slice's backward builds a zero-filled (B, L, I) tensor)."""
    cell = RNNCell(3, 4).double()
    x = torch.randn(2, 40, 3, dtype=torch.float64, requires_grad=True)
    out, _ = rnn_unroll(cell, x)
    names, stack, seen = [], [out.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.append(type(node).__name__)
        stack.extend(child for child, _ in node.next_functions)
    assert "SelectBackward0" not in names and names.count("UnbindBackward0") == 1
    (grad,) = torch.autograd.grad(out.sum(), x)
    reference = torch.autograd.grad(
        torch.stack(list(_slice_unroll(cell, x)), dim=1).sum(), x)[0]
    torch.testing.assert_close(grad, reference, rtol=1e-12, atol=1e-12)


def _slice_unroll(cell, x):
    h = None
    for t in range(x.shape[1]):
        h = cell(x[:, t], h)
        yield h


def test_gradient_norm_by_distance_matches_autograd_jacobian() -> None:
    torch.manual_seed(0)
    cell = nn.GRUCell(3, 4).double()
    x = torch.randn(1, 5, 3, dtype=torch.float64)
    norms = gradient_norm_by_distance(cell, 5, x=x)

    def last_state(inp: torch.Tensor) -> torch.Tensor:
        return rnn_unroll(cell, inp)[1][0]  # (H,)

    jac = torch.autograd.functional.jacobian(last_state, x)  # (H, 1, T, I)
    expected = jac.pow(2).sum(dim=(0, 1, 3)).sqrt()
    assert norms.shape == (5,), "one norm per position"
    torch.testing.assert_close(norms, expected, rtol=1e-10, atol=1e-12)


def test_gradient_norm_vanishes_with_distance_for_small_weights() -> None:
    torch.manual_seed(0)
    model = RNN(4, 8).double()
    with torch.no_grad():
        model.cell.weight_hh.mul_(0.3)  # a contraction: gradients must shrink with distance
    norms = gradient_norm_by_distance(model, 20)
    assert norms[0] < 1e-3 * norms[-1], "the farthest input barely reaches h_T"
    assert torch.all(norms > 0), "but every input still reaches it"


def test_gradient_norm_by_distance_works_for_lstm_cell() -> None:
    norms = gradient_norm_by_distance(nn.LSTMCell(2, 3), 4)
    assert norms.shape == (4,) and torch.isfinite(norms).all(), "LSTM (h, c) state handled"


def test_bad_inputs_raise_value_errors() -> None:
    with pytest.raises(ValueError, match="input_size: expected an integer >= 1, received 0"):
        RNNCell(0, 3)
    with pytest.raises(ValueError, match="hidden_size: expected an integer >= 1"):
        RNNCell(2, -1)
    cell = RNNCell(2, 3)
    with pytest.raises(ValueError, match=r"x: expected shape \(B, 2\), received \(4, 5\)"):
        cell(torch.randn(4, 5))
    with pytest.raises(ValueError, match="x: expected a 2-D tensor"):
        cell(torch.randn(2))
    with pytest.raises(ValueError, match=r"h: expected shape \(4, 3\), received \(4, 2\)"):
        cell(torch.randn(4, 2), torch.randn(4, 2))
    with pytest.raises(ValueError, match="x: expected a sequence of length >= 1"):
        rnn_unroll(cell, torch.randn(2, 0, 2))
    with pytest.raises(ValueError, match=r"x: expected shape \(B, L, 2\)"):
        RNN(2, 3)(torch.randn(1, 4, 3))
    with pytest.raises(ValueError, match=r"cell\.nonlinearity: expected 'tanh', received 'relu'"):
        RNNCell.from_torch(nn.RNNCell(2, 3, nonlinearity="relu"))
    with pytest.raises(ValueError, match=r"rnn\.num_layers: expected 1, received 2"):
        RNN.from_torch(nn.RNN(2, 3, num_layers=2))
    with pytest.raises(ValueError, match="length: expected an integer >= 1, received 0"):
        gradient_norm_by_distance(cell, 0)
    with pytest.raises(ValueError, match="cell_or_model: expected an RNNCell"):
        gradient_norm_by_distance(nn.Linear(2, 3), 4)
    with pytest.raises(ValueError, match=r"x: expected shape \(1, 4, 2\)"):
        gradient_norm_by_distance(cell, 4, x=torch.randn(1, 3, 2))
