"""Checkers for chapter 02 (recurrent networks).

- 02.1 ``stacked_rnn_forward(x, h0, layers)``: a stack of tanh RNN layers, compared with
  the package's :class:`~transformer_book.baselines.rnn.RNNCell` unrolled layer by layer and with
  ``torch.nn.RNN(num_layers=k)``.
- 02.2 ``gru_cell(x, h, weight_ih, weight_hh, bias_ih, bias_hh)``: one GRU step (Cho et al.,
  2014), compared with ``torch.nn.GRUCell``. The exercise hands the learner
  :func:`gru_first_attempt`, a step written from a textbook's equations that differs from
  ``nn.GRUCell`` in two lines, to predict, measure and fix.

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

__all__ = ["gru_first_attempt"]

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


def gru_first_attempt(x: torch.Tensor, h: torch.Tensor, weight_ih: torch.Tensor,
                      weight_hh: torch.Tensor, bias_ih: torch.Tensor,
                      bias_hh: torch.Tensor) -> torch.Tensor:
    """The GRU step of exercise 02.2, with its two departures from ``nn.GRUCell``.

    ``x (B, I)``, ``h (B, H)``, weights stacked by gate ``[r; z; n]`` as in ``nn.GRUCell``
    (``weight_ih (3H, I)``, ``weight_hh (3H, H)``, biases ``(3H,)``) -> ``h' (B, H)``. The
    reset gate multiplies ``h`` before the product with ``W_hn``, as Cho et al. (2014) write
    it, and the update gate mixes ``z n + (1 - z) h``, as some textbooks do.
    """
    r_x, z_x, n_x = (x @ weight_ih.T + bias_ih).chunk(3, dim=-1)  # (B, 3H) -> 3 x (B, H)
    w_hr, w_hz, w_hn = weight_hh.chunk(3)  # (3H, H) -> 3 x (H, H)
    b_hr, b_hz, b_hn = bias_hh.chunk(3)  # (3H,) -> 3 x (H,)
    r = torch.sigmoid(r_x + h @ w_hr.T + b_hr)
    z = torch.sigmoid(z_x + h @ w_hz.T + b_hz)
    n = torch.tanh(n_x + (r * h) @ w_hn.T + b_hn)
    return z * n + (1 - z) * h


def _hold_gates(cell: nn.GRUCell, kind: str) -> None:
    """Saturate or fix a gate of ``cell`` (rows ``[r; z; n]``) as ``kind`` names it."""
    hidden = cell.hidden_size
    rows = {"reset": slice(0, hidden), "update": slice(hidden, 2 * hidden)}
    with torch.no_grad():
        if "reset gate open" in kind:
            cell.bias_ih[rows["reset"]] = 30.0  # r = sigmoid(30 + ...) ≈ 1
        if "reset gate shut" in kind:
            cell.bias_ih[rows["reset"]] = -30.0  # r ≈ 0
        if "update gate at 1/2" in kind:  # z = sigmoid(0) = 1/2 exactly
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(cell, name)[rows["update"]] = 0.0
        if "update gate saturated" in kind:
            cell.bias_ih[rows["update"]] = 30.0  # z ≈ 1


@exercise("02.2", "GRU cell", forbids=[Calls(
    {"gru_cell", "gru"},
    advice="compute the gates r and z, the candidate n and h' yourself instead of running "
    "nn.GRUCell or nn.GRU")])
def check_gru_cell(gru_cell) -> str:
    """``gru_cell(x, h, weight_ih, weight_hh, bias_ih, bias_hh)`` equals nn.GRUCell.

    Ten random cells, then edge cases: ``B = I = H = 1``, each gate saturated or held. The
    random cells catch every departure from ``nn.GRUCell`` (gate order, the reset gate's
    place, the mix); the held gates make a departure that survives them name its line.
    """
    generator = fresh_generator()
    cases = []
    for _ in range(10):
        batch, input_size, hidden = (random_int(1, 5, generator), random_int(1, 7, generator),
                                     random_int(1, 7, generator))
        cases.append((batch, input_size, hidden, "random weights"))
    cases += [(1, 1, 1, "B = I = H = 1"), (3, 4, 5, "update gate saturated"),
              (3, 4, 5, "reset gate shut"), (2, 3, 4, "reset gate open")]
    for batch, input_size, hidden, kind in cases:
        with torch.random.fork_rng(devices=[]):
            cell = nn.GRUCell(input_size, hidden, dtype=DTYPE)
        _randomise(cell, generator, float(torch.empty(1).uniform_(0.3, 1.5, generator=generator)))
        _hold_gates(cell, kind)
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
            "B = I = H = 1 and saturated gates included")
