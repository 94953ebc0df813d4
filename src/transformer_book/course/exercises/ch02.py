"""Checkers for chapter 02 (recurrent networks).

- 02.1 ``stacked_rnn_forward(x, h0, layers)``: a stack of tanh RNN layers, compared with
  the package's :class:`~transformer_book.baselines.rnn.RNNCell` unrolled layer by layer and with
  ``torch.nn.RNN(num_layers=k)``.
- 02.2 ``gru_cell(x, h, weight_ih, weight_hh, bias_ih, bias_hh)``: one GRU step (Cho et al.,
  2014), compared with ``torch.nn.GRUCell``.

Neither may run torch's own recurrent kernels (``nn.RNN``, ``nn.RNNCell``, ``nn.GRUCell``,
``nn.GRU``): the exercise is to write the step.
"""

from __future__ import annotations

import torch
from torch import nn

from transformer_book.baselines.rnn import RNNCell, rnn_unroll
from transformer_book.course.exercises.core import (
    Calls,
    ExerciseFailure,
    attempt,
    exercise,
    expect_close,
    fresh_generator,
    random_int,
)

DTYPE = torch.float64


def _randomise(module: nn.Module, generator: torch.Generator, scale: float) -> None:
    """Overwrite every parameter with ``scale`` x standard-normal draws from ``generator``."""
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=DTYPE) * scale)


def _torch_rnn(input_size: int, hidden: int, num_layers: int, generator: torch.Generator,
               scale: float) -> nn.RNN:
    # Build without touching the global RNG, so the notebook's later cells stay seeded.
    with torch.random.fork_rng(devices=[]):
        rnn = nn.RNN(input_size, hidden, num_layers=num_layers, batch_first=True, dtype=DTYPE)
    _randomise(rnn, generator, scale)
    return rnn


def _package_stack(rnn: nn.RNN, x: torch.Tensor,
                   h0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference: one package RNNCell per layer, each unrolled over the previous outputs."""
    outputs, finals = x, []
    with torch.random.fork_rng(devices=[]):
        for k in range(rnn.num_layers):
            cell = RNNCell(outputs.shape[2], rnn.hidden_size).to(DTYPE)
            cell.load_state_dict({name: getattr(rnn, f"{name}_l{k}")
                                  for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")})
            outputs, last = rnn_unroll(cell, outputs, h0[k])  # (B, L, H), (B, H)
            finals.append(last)
    return outputs, torch.stack(finals)  # num_layers x (B, H) -> (num_layers, B, H)


def _pair(received, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    if not (isinstance(received, (tuple, list)) and len(received) == 2):
        raise ExerciseFailure(f"for {what}, expected a pair (outputs, h_n), received "
                              f"{type(received).__name__}")
    return received[0], received[1]


@exercise("02.1", "stacked RNN forward", forbids=[Calls(
    {"rnn_tanh", "rnn_tanh_cell", "rnn_relu", "rnn_relu_cell"},
    advice="write the recurrence h = tanh(x W_ihᵀ + b_ih + h W_hhᵀ + b_hh) yourself, one "
    "step at a time, instead of running nn.RNN or nn.RNNCell")])
def check_stacked_rnn_forward(stacked_rnn_forward) -> str:
    """``stacked_rnn_forward(x, h0, layers) -> (outputs, h_n)`` equals the package's stack.

    The reference unrolls one :class:`RNNCell` per layer; ``tests/test_exercises_ch02.py``
    proves it equal to ``nn.RNN(num_layers=k)``.
    """
    generator = fresh_generator()
    shapes = []
    for _ in range(8):
        shapes.append(tuple(random_int(lo, hi, generator)
                            for lo, hi in ((1, 4), (1, 9), (1, 6), (1, 6), (1, 3))))
    shapes += [(1, 1, 1, 1, 1), (3, 1, 4, 5, 2), (2, 12, 3, 4, 3)]  # edge cases: L = 1, tiny
    for batch, length, input_size, hidden, num_layers in shapes:
        scale = float(torch.empty(1).uniform_(0.3, 1.5, generator=generator))
        rnn = _torch_rnn(input_size, hidden, num_layers, generator, scale)
        x = torch.randn(batch, length, input_size, generator=generator, dtype=DTYPE)
        h0 = torch.randn(num_layers, batch, hidden, generator=generator, dtype=DTYPE)
        layers = [tuple(getattr(rnn, f"{name}_l{k}").detach().clone()
                        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
                  for k in range(num_layers)]
        what = (f"B={batch}, L={length}, I={input_size}, H={hidden}, "
                f"{num_layers} layer{'s' if num_layers > 1 else ''}")
        with torch.no_grad():
            expected_out, expected_h = _package_stack(rnn, x, h0)
        received = attempt(stacked_rnn_forward, x.clone(), h0.clone(), layers, what=what)
        outputs, h_n = _pair(received, what)
        expect_close(outputs, expected_out, what=f"outputs for {what}", atol=1e-10, rtol=1e-8)
        expect_close(h_n, expected_h, what=f"h_n for {what}", atol=1e-10, rtol=1e-8)
    return (f"matched the package's RNNCell stack (equal to nn.RNN) on {len(shapes)} "
            "fresh random float64 cases (1 to 3 layers, including L = 1 and B = H = 1)")


@exercise("02.2", "GRU cell", forbids=[Calls(
    {"gru_cell", "gru"},
    advice="compute the gates r and z, the candidate n and h' yourself instead of running "
    "nn.GRUCell or nn.GRU")])
def check_gru_cell(gru_cell) -> str:
    """``gru_cell(x, h, weight_ih, weight_hh, bias_ih, bias_hh)`` equals nn.GRUCell."""
    generator = fresh_generator()
    cases = []
    for _ in range(10):
        batch, input_size, hidden = (random_int(1, 5, generator), random_int(1, 7, generator),
                                     random_int(1, 7, generator))
        cases.append((batch, input_size, hidden, "random weights"))
    cases += [(1, 1, 1, "B = I = H = 1"), (3, 4, 5, "update gate shut (z ≈ 1 keeps h)")]
    for batch, input_size, hidden, kind in cases:
        with torch.random.fork_rng(devices=[]):
            cell = nn.GRUCell(input_size, hidden, dtype=DTYPE)
        _randomise(cell, generator, float(torch.empty(1).uniform_(0.3, 1.5, generator=generator)))
        if kind.startswith("update gate"):
            with torch.no_grad():
                cell.bias_ih[hidden:2 * hidden] = 30.0  # rows [r; z; n]: z saturates at 1
        x = torch.randn(batch, input_size, generator=generator, dtype=DTYPE)
        h = torch.randn(batch, hidden, generator=generator, dtype=DTYPE)
        what = f"B={batch}, I={input_size}, H={hidden} ({kind})"
        with torch.no_grad():
            expected = cell(x, h)
        weights = [p.detach().clone() for p in (cell.weight_ih, cell.weight_hh, cell.bias_ih,
                                                 cell.bias_hh)]
        received = attempt(gru_cell, x.clone(), h.clone(), *weights, what=what)
        expect_close(received, expected, what=what, atol=1e-10, rtol=1e-8)
    return (f"matched torch.nn.GRUCell on {len(cases)} fresh random float64 cases, "
            "including B = I = H = 1 and a shut update gate that keeps the old state")
