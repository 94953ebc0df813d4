"""Decoding strategies by name, and sampling (Section 6.1).

A strategy is a step rule of :func:`~transformer_book.inference.generate.generate` (a
:class:`~transformer_book.inference.generate.StepRule`): greedy search
(:class:`~transformer_book.inference.greedy.Greedy`), beam search with a length penalty
(:class:`~transformer_book.inference.beam.Beam`, the paper's), and sampling with a
temperature and a nucleus (:class:`Sampling`, Holtzman et al., 2020, here). Each is a small
frozen dataclass holding its settings, checked when it is made; its ``check(config)``
refuses the settings that depend on the model (a beam no wider than the vocabulary) before
anything is decoded, and its ``step`` proposes each step's candidates.

:data:`~transformer_book.run.config.DECODING_STRATEGIES` maps a name to the class (a
registry open to outside packages); :func:`decoding_strategy` makes one by name, which is
how :func:`~transformer_book.inference.translate.translate`, the ``[decode]`` section and
the CLI choose.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, cast

import torch

from transformer_book.inference.generate import StepRule
from transformer_book.run.config import DECODING_STRATEGIES, make_strategy
from transformer_book.util.validation import (
    require,
    require_int,
    require_number,
    require_positive_number,
)

__all__ = ["Sampling", "check_temperature", "check_top_p", "decoding_strategy", "nucleus",
           "sample_tokens", "strategy_name", "strategy_settings"]


#: The largest seed a ``torch.Generator`` takes (a signed 64-bit integer).
MAX_SEED = 2**63 - 1


def check_temperature(temperature: float, argument: str = "temperature") -> float:
    """``temperature`` as a float if it is a finite number > 0 (0 would divide by zero:
    a tiny temperature is greedy search)."""
    return require_positive_number(temperature, argument)


def check_top_p(top_p: float, argument: str = "top_p") -> float:
    """``top_p`` as a float if it is a number in ``(0, 1]`` (1: the whole distribution)."""
    value = require_number(top_p, argument, minimum=0, maximum=1)  # finite, not a string
    require(value > 0, argument, "a finite number > 0 and <= 1", repr(top_p))
    return value


def nucleus(log_probs: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """The distribution sampling draws from: ``log_probs (N, V) -> probabilities (N, V)``.

    ``softmax(log p / T)`` (temperature ``T > 0``: below 1 sharper, above 1 flatter), then
    only the nucleus (Holtzman et al., 2020): the fewest most probable tokens whose
    probability reaches ``top_p`` (the most probable one always; among equal probabilities
    the lower id first), renormalised; every other token gets probability 0.
    """
    # Shifted so that the best is 0: a tiny T sends the rest to -inf, never to nan.
    shifted = log_probs - log_probs.amax(-1, keepdim=True)
    limits = torch.finfo(log_probs.dtype)
    if temperature < limits.tiny:  # T -> 0 (it would round to 0 here): greedy search
        best = shifted.argmax(-1, keepdim=True)  # the lowest id among equals
        return torch.zeros_like(shifted).scatter_(-1, best, 1.0)
    # a T beyond the dtype's range divides as its largest value: the same uniform limit
    probs = torch.softmax(shifted / min(temperature, limits.max), dim=-1)  # (N, V)
    if top_p < 1.0:
        ranked, order = probs.sort(dim=-1, descending=True, stable=True)  # (N, V) each
        above = ranked.cumsum(-1) - ranked  # the mass of the tokens ranked before each
        inside = above < top_p
        inside[..., 0] = True  # the most probable always (a top_p that rounds to 0 too)
        keep = torch.zeros_like(probs, dtype=torch.bool).scatter_(-1, order, inside)
        probs = probs.masked_fill(~keep, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample_tokens(log_probs: torch.Tensor, temperature: float, top_p: float,
                  generator: torch.Generator) -> torch.Tensor:
    """One token per row drawn from :func:`nucleus`: ``(N, V) -> (N,)``."""
    probs = nucleus(log_probs, temperature, top_p)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


@dataclass(frozen=True)
class Sampling(StepRule):
    """Each token drawn from the model's distribution at ``temperature``, restricted to
    its nucleus of mass ``top_p`` (:func:`nucleus`), with a ``torch.Generator`` seeded by
    ``seed`` at every :meth:`search`: the same sources in the same batches give the same
    translations. A tiny temperature or ``top_p`` is greedy search."""

    temperature: float = field(default=1.0, metadata={
        "help": "> 0; below 1 sharper, above 1 flatter"})
    top_p: float = field(default=1.0, metadata={
        "help": "draw from the fewest most probable tokens whose probability reaches it, in "
        "(0, 1] (1: every token)"})
    seed: int = field(default=0, metadata={"help": "the random seed"})

    def __post_init__(self) -> None:
        check_temperature(self.temperature)
        check_top_p(self.top_p)
        require_int(self.seed, "seed", minimum=0, maximum=MAX_SEED)

    def begin(self, device: torch.device) -> torch.Generator:
        return torch.Generator(device=device).manual_seed(self.seed)

    def step(self, t: int, logp: torch.Tensor, scores: torch.Tensor,
             state: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        log_probs = logp[:, 0]  # (B, 1, V) -> (B, V)
        token = sample_tokens(log_probs, self.temperature, self.top_p, state)  # (B,)
        picked = log_probs.gather(1, token[:, None])  # (B, 1)
        return scores + picked, token[:, None], torch.zeros_like(token)[:, None]


def decoding_strategy(name: str, **settings: Any) -> StepRule:
    """The strategy registered as ``name`` in
    :data:`~transformer_book.run.config.DECODING_STRATEGIES`, made with ``settings``; an
    unknown name or a setting it does not take is a ``BookError``."""
    strategy = make_strategy(name, settings)
    require(isinstance(strategy, StepRule), "strategy", "a registered step rule (a StepRule)",
            type(strategy).__name__)
    return cast(StepRule, strategy)


def strategy_name(strategy: StepRule) -> str:
    """The name ``strategy``'s class is registered under (records name the strategy by it);
    an unregistered class is named by its class name."""
    for name in DECODING_STRATEGIES:
        if DECODING_STRATEGIES.get(name) is type(strategy):
            return name
    return type(strategy).__name__


def strategy_settings(strategy: StepRule) -> dict[str, Any]:
    """A strategy's settings, by name (what a record keeps)."""
    return {f.name: getattr(strategy, f.name) for f in dataclasses.fields(strategy)} \
        if dataclasses.is_dataclass(strategy) else {}
