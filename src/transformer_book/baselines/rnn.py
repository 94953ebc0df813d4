"""A recurrent network written out from scratch, and the gradient-over-distance measurement.

Chapter 02 builds h_t = f(x_t, h_{t-1}) by hand and then measures what the recurrence
costs. Vaswani et al. (2017), Section 1: "Recurrent models typically factor computation
along the symbol positions of the input and output sequences. [...] This inherently
sequential nature precludes parallelization within training examples, which becomes
critical at longer sequence lengths". The Python loop in :func:`rnn_unroll` *is* that
sequential bottleneck: step t cannot start before step t-1 has finished.

Shapes are batch first everywhere: ``x`` is ``(B, L, input_size)``, states ``(B, hidden_size)``.
The GRU encoder-decoder and additive attention live in :mod:`transformer_book.baselines.seq2seq`.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from transformer_book.util.validation import (
    bad_input,
    require,
    require_positive_int,
    require_tensor,
)

__all__ = ["RNN", "RNNCell", "gradient_norm_by_distance", "rnn_unroll"]


class RNNCell(nn.Module):
    """One step of an Elman RNN: ``h_t = tanh(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)``.

    The parameters carry the names and shapes of :class:`torch.nn.RNNCell` (``weight_ih``
    ``(H, I)``, ``weight_hh`` ``(H, H)``, ``bias_ih`` ``(H,)``, ``bias_hh`` ``(H,)``), so
    ``cell.load_state_dict(torch_cell.state_dict())`` works and gives the same numbers.

    Args:
        input_size: I, features per input step.
        hidden_size: H, features of the state.
    """

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.input_size = require_positive_int(input_size, "input_size")
        self.hidden_size = require_positive_int(hidden_size, "hidden_size")
        self.weight_ih = nn.Parameter(torch.empty(hidden_size, input_size))
        self.weight_hh = nn.Parameter(torch.empty(hidden_size, hidden_size))
        self.bias_ih = nn.Parameter(torch.empty(hidden_size))
        self.bias_hh = nn.Parameter(torch.empty(hidden_size))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Uniform(-1/√H, 1/√H), PyTorch's initialisation for recurrent cells."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for parameter in self.parameters():
            nn.init.uniform_(parameter, -bound, bound)

    @classmethod
    def from_torch(cls, cell: nn.RNNCell) -> RNNCell:
        """Copy the weights of a ``torch.nn.RNNCell`` (tanh, with biases) into a new cell."""
        require(isinstance(cell, nn.RNNCell), "cell", "a torch.nn.RNNCell", type(cell).__name__)
        require(cell.nonlinearity == "tanh", "cell.nonlinearity", "'tanh'", repr(cell.nonlinearity))
        require(cell.bias, "cell.bias", "True (a cell with biases)", cell.bias)
        ours = cls(cell.input_size, cell.hidden_size).to(
            device=cell.weight_ih.device, dtype=cell.weight_ih.dtype
        )
        ours.load_state_dict(cell.state_dict())
        return ours

    def forward(self, x: torch.Tensor, h: torch.Tensor | None = None) -> torch.Tensor:
        """One step: ``x`` ``(B, I)``, ``h`` ``(B, H)`` (zeros if None) -> new ``h`` ``(B, H)``."""
        require_tensor(x, "x", ndim=2, floating=True)
        require(x.shape[1] == self.input_size, "x", f"shape (B, {self.input_size})", tuple(x.shape))
        if h is None:
            h = x.new_zeros(x.shape[0], self.hidden_size)
        require_tensor(h, "h", ndim=2, floating=True)
        expected = (x.shape[0], self.hidden_size)
        require(tuple(h.shape) == expected, "h", f"shape {expected}", tuple(h.shape))
        # (B, I) @ (I, H) + (B, H) @ (H, H) -> (B, H)
        pre = x @ self.weight_ih.T + self.bias_ih + h @ self.weight_hh.T + self.bias_hh
        return torch.tanh(pre)


def rnn_unroll(
    cell: nn.Module, x: torch.Tensor, h0: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run ``cell`` over the sequence one step at a time (the sequential bottleneck).

    Vaswani et al. (2017), Section 1: recurrent models "generate a sequence of hidden states
    h_t, as a function of the previous hidden state h_{t-1} and the input for position t".

    Args:
        cell: any cell with the signature ``cell(x_t (B, I), h (B, H)) -> h (B, H)``: an
            :class:`RNNCell`, ``nn.RNNCell`` or ``nn.GRUCell``.
        x: inputs ``(B, L, I)``, batch first, L >= 1.
        h0: initial state ``(B, H)``; zeros if None.

    Returns:
        ``outputs`` ``(B, L, H)`` (every state h_1..h_L) and ``h_last`` ``(B, H)``.
    """
    require_tensor(x, "x", ndim=3, floating=True)
    require(x.shape[1] >= 1, "x", "a sequence of length >= 1", f"shape {tuple(x.shape)}")
    h = h0
    states = []
    # unbind, not x[:, t]: its backward stacks the L input gradients once, whereas each
    # slice's backward would add a zero-filled (B, L, I) tensor (quadratic in L).
    for x_t in x.unbind(1):  # step t waits for step t-1: nothing here runs in parallel
        h = cell(x_t, h)  # (B, I), (B, H) -> (B, H)
        states.append(h)
    outputs = torch.stack(states, dim=1)  # L x (B, H) -> (B, L, H)
    return outputs, outputs[:, -1]


class RNN(nn.Module):
    """A one-layer Elman RNN: :class:`RNNCell` unrolled with a Python loop (batch first).

    Equal to ``nn.RNN(input_size, hidden_size, batch_first=True)`` once its weights are
    loaded with :meth:`from_torch`; ``nn.RNN`` runs the same loop inside a fused kernel.
    """

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.cell = RNNCell(input_size, hidden_size)
        self.input_size = input_size
        self.hidden_size = hidden_size

    @classmethod
    def from_torch(cls, rnn: nn.RNN) -> RNN:
        """Copy a one-layer, unidirectional, tanh ``nn.RNN`` with biases (``*_l0`` weights)."""
        require(isinstance(rnn, nn.RNN), "rnn", "a torch.nn.RNN", type(rnn).__name__)
        require(rnn.num_layers == 1, "rnn.num_layers", "1", rnn.num_layers)
        require(not rnn.bidirectional, "rnn.bidirectional", "False", rnn.bidirectional)
        require(rnn.nonlinearity == "tanh", "rnn.nonlinearity", "'tanh'", repr(rnn.nonlinearity))
        require(rnn.bias, "rnn.bias", "True (a layer with biases)", rnn.bias)
        ours = cls(rnn.input_size, rnn.hidden_size).to(
            device=rnn.weight_ih_l0.device, dtype=rnn.weight_ih_l0.dtype
        )
        state = {name.removesuffix("_l0"): value for name, value in rnn.state_dict().items()}
        ours.cell.load_state_dict(state)
        return ours

    def forward(
        self, x: torch.Tensor, h0: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``x`` ``(B, L, I)`` -> ``outputs`` ``(B, L, H)``, ``h_last`` ``(B, H)``."""
        require_tensor(x, "x", ndim=3, floating=True)
        require(x.shape[2] == self.input_size, "x", f"shape (B, L, {self.input_size})",
                tuple(x.shape))
        return rnn_unroll(self.cell, x, h0)


def _cell_of(model: nn.Module) -> nn.Module:
    """The step function inside ``model``: the cell itself, or :class:`RNN`'s cell."""
    if isinstance(model, RNN):
        return model.cell
    if isinstance(model, (RNNCell, nn.RNNCellBase)):
        return model
    raise bad_input("cell_or_model", "an RNNCell, RNN, nn.RNNCell, nn.GRUCell or nn.LSTMCell",
               type(model).__name__)


def gradient_norm_by_distance(
    cell_or_model: nn.Module, length: int, *, seed: int = 0, x: torch.Tensor | None = None
) -> torch.Tensor:
    """How strongly the last state depends on each input: ``||∂h_T/∂x_t||`` for t = 1..T.

    The norm is the Frobenius norm of the ``(H, I)`` Jacobian of the final state with
    respect to input step t. It is computed exactly in one backward pass: the input is
    copied H times along the batch and copy j back-propagates only ``h_T[j]``.
    Entry 0 is the input farthest from the output; entry ``length - 1`` the nearest.
    For a plain RNN the curve falls roughly geometrically with distance, the vanishing
    gradient (Bengio et al., 1994; Hochreiter et al., 2001) that Vaswani et al. (2017)
    address with constant path length (Section 4: "the shorter these paths between any
    combination of positions in the input and output sequences, the easier it is to learn
    long-range dependencies").

    Args:
        cell_or_model: an :class:`RNNCell`, :class:`RNN`, ``nn.RNNCell``, ``nn.GRUCell`` or
            ``nn.LSTMCell`` (for the LSTM, h_T is the hidden state, not the cell state).
        length: T, the sequence length (>= 1).
        seed: seeds the standard-normal input when ``x`` is None.
        x: optional input ``(1, T, I)`` to measure at instead of a random one.

    Returns:
        A detached tensor ``(length,)`` in the cell's dtype.
    """
    cell = _cell_of(cell_or_model)
    length = require_positive_int(length, "length")
    weight = next(cell.parameters())
    input_size, hidden_size = cell.input_size, cell.hidden_size
    if x is None:
        generator = torch.Generator().manual_seed(seed)
        x = torch.randn(1, length, input_size, generator=generator, dtype=weight.dtype)
    require_tensor(x, "x", ndim=3, floating=True)
    expected = (1, length, input_size)
    require(tuple(x.shape) == expected, "x", f"shape {expected}", tuple(x.shape))
    # one copy of the sequence per output unit: (1, T, I) -> (H, T, I)
    copies = x.detach().to(device=weight.device, dtype=weight.dtype).expand(
        hidden_size, length, input_size).clone().requires_grad_(True)
    state = None
    for t in range(length):
        state = cell(copies[:, t], state)  # (H, I) -> (H, H), or a tuple (h, c) for an LSTM
    h_last = state[0] if isinstance(state, tuple) else state  # (H, H): row j is copy j
    (grad,) = torch.autograd.grad(h_last.diagonal().sum(), copies)  # (H, T, I)
    # grad[j, t] = ∂h_T[j]/∂x_t, so the Frobenius norm sums over j and the input features
    return grad.pow(2).sum(dim=(0, 2)).sqrt().detach()  # (T,)
