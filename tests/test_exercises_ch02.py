"""Chapter 02 checkers: a right answer passes, wrong answers fail with details, stubs say so."""

from __future__ import annotations

import torch
from torch import nn

from transformer_book.course.exercises import run_check
from transformer_book.course.exercises.ch02 import _package_stack, gru_first_attempt


def stacked_rnn_forward(x, h0, layers):
    outputs, finals = x, []
    for k, (w_ih, w_hh, b_ih, b_hh) in enumerate(layers):
        h, states = h0[k], []
        for t in range(outputs.shape[1]):
            h = torch.tanh(outputs[:, t] @ w_ih.T + b_ih + h @ w_hh.T + b_hh)
            states.append(h)
        outputs = torch.stack(states, dim=1)
        finals.append(h)
    return outputs, torch.stack(finals)


def gru_cell(x, h, weight_ih, weight_hh, bias_ih, bias_hh):
    r_i, z_i, n_i = (x @ weight_ih.T + bias_ih).chunk(3, dim=-1)
    r_h, z_h, n_h = (h @ weight_hh.T + bias_hh).chunk(3, dim=-1)
    r, z = torch.sigmoid(r_i + r_h), torch.sigmoid(z_i + z_h)
    n = torch.tanh(n_i + r * n_h)
    return (1 - z) * n + z * h


def test_reference_stack_equals_torch_rnn() -> None:
    torch.manual_seed(0)
    rnn = nn.RNN(3, 5, num_layers=3, batch_first=True, dtype=torch.float64)
    x = torch.randn(2, 6, 3, dtype=torch.float64)
    h0 = torch.randn(3, 2, 5, dtype=torch.float64)
    with torch.no_grad():
        ours, ours_h = _package_stack(rnn, x, h0)
        theirs, theirs_h = rnn(x, h0)
    assert torch.allclose(ours, theirs, atol=1e-12) and torch.allclose(ours_h, theirs_h, atol=1e-12)


def test_correct_answers_pass() -> None:
    for exercise_id, answer in (("02.1", stacked_rnn_forward), ("02.2", gru_cell)):
        result = run_check(exercise_id, answer)
        assert result.passed, result.message


def test_checkers_leave_the_global_rng_alone() -> None:
    torch.manual_seed(123)
    before = torch.get_rng_state()
    run_check("02.1", stacked_rnn_forward)
    run_check("02.2", gru_cell)
    assert torch.equal(before, torch.get_rng_state()), "the notebook's seeded cells stay seeded"


def test_forgetting_the_last_layer_state_fails() -> None:
    def only_top_layer(x, h0, layers):
        outputs, h_n = stacked_rnn_forward(x, h0, layers)
        return outputs, h_n[-1:].expand_as(h_n)

    result = run_check("02.1", only_top_layer)
    assert result.status == "failed" and "h_n" in result.detail


def test_returning_one_tensor_fails_cleanly() -> None:
    result = run_check("02.1", lambda x, h0, layers: stacked_rnn_forward(x, h0, layers)[0])
    assert result.status == "failed" and "expected a pair" in result.detail


def test_swapped_gates_fail() -> None:
    def swapped(x, h, weight_ih, weight_hh, bias_ih, bias_hh):
        z_i, r_i, n_i = (x @ weight_ih.T + bias_ih).chunk(3, dim=-1)
        z_h, r_h, n_h = (h @ weight_hh.T + bias_hh).chunk(3, dim=-1)
        r, z = torch.sigmoid(r_i + r_h), torch.sigmoid(z_i + z_h)
        return (1 - z) * torch.tanh(n_i + r * n_h) + z * h

    result = run_check("02.2", swapped)
    assert result.status == "failed" and "expected" in result.detail


def test_reset_before_the_matmul_fails() -> None:
    """Cho et al. (2014) write W (r ⊙ h); PyTorch (and the exercise) use r ⊙ (W h + b)."""

    def reset_first(x, h, weight_ih, weight_hh, bias_ih, bias_hh):
        r_i, z_i, n_i = (x @ weight_ih.T + bias_ih).chunk(3, dim=-1)
        r_h, z_h, _ = (h @ weight_hh.T + bias_hh).chunk(3, dim=-1)
        r, z = torch.sigmoid(r_i + r_h), torch.sigmoid(z_i + z_h)
        w_hn, b_hn = weight_hh.chunk(3)[2], bias_hh.chunk(3)[2]
        n = torch.tanh(n_i + (r * h) @ w_hn.T + b_hn)
        return (1 - z) * n + z * h

    assert run_check("02.2", reset_first).status == "failed"


def test_stubs_are_not_attempted() -> None:
    def stub(*args):
        raise NotImplementedError("Exercise 02.1: write your solution here")

    assert run_check("02.1", stub).status == "not attempted"
    assert run_check("02.2", stub).status == "not attempted"


def _gru_with_gates(hold: str) -> nn.GRUCell:
    """A random nn.GRUCell(4, 3) in float64, its gates (rows [r; z; n]) held as named."""
    torch.manual_seed(3)
    cell = nn.GRUCell(4, 3, dtype=torch.float64)
    with torch.no_grad():
        if "r = 1" in hold:
            cell.bias_ih[0:3] = 40.0
        if "z = 1/2" in hold:
            for parameter in cell.parameters():
                parameter[3:6] = 0.0
        if hold == "z = 1":
            cell.bias_ih[3:6] = 40.0
    return cell


def test_the_first_attempt_agrees_only_where_the_exercise_says() -> None:
    """02.2 (a): with r = 1 and z = 1/2 both wrong lines are right; z = 1 keeps h in
    nn.GRUCell and returns the candidate in the attempt."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(5, 4, generator=generator, dtype=torch.float64)
    h = torch.randn(5, 3, generator=generator, dtype=torch.float64)

    def both(hold):
        cell = _gru_with_gates(hold)
        weights = (cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)
        with torch.no_grad():
            return gru_first_attempt(x, h, *weights), cell(x, h)

    attempt, cell = both("random")
    assert (attempt - cell).abs().max() > 0.05
    for one_gate in ("r = 1", "z = 1/2"):  # either line alone still differs
        attempt, cell = both(one_gate)
        assert (attempt - cell).abs().max() > 1e-3, one_gate
    attempt, cell = both("r = 1, z = 1/2")
    assert torch.allclose(attempt, cell, atol=1e-12, rtol=0)
    attempt, cell = both("z = 1")
    assert torch.allclose(cell, h, atol=1e-12) and (attempt - h).abs().max() > 0.05


def test_the_first_attempt_fails_the_check_and_cannot_be_handed_in() -> None:
    def copied(*args):
        return gru_first_attempt(*args)

    result = run_check("02.2", copied)
    assert result.status == "failed" and "random weights" in result.detail, result.detail
    assert "expected" in result.detail and "received" in result.detail
    imported = run_check("02.2", gru_first_attempt)
    assert imported.status == "failed" and "not your own function" in imported.detail


def test_the_verdict_does_not_answer_the_prediction() -> None:
    """The passing verdict is stored above the exercise's written answer in the book."""
    detail = run_check("02.2", gru_cell).detail
    assert "keeps" not in detail and "old state" not in detail, detail
