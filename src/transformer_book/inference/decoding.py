"""Decoding strategies behind one protocol, and the registry that names them (Section 6.1).

A strategy turns a batch of source sentences into translations: greedy search
(:class:`Greedy`), beam search with a length penalty (:class:`Beam`, the paper's), and
sampling with a temperature and a nucleus (:class:`Sampling`, Holtzman et al., 2020).
Each is a small frozen dataclass holding its settings, checked when it is made, with two
methods, as fairseq's ``Search`` classes share one ``step``:

- ``check(config)``: the settings that depend on the model (a beam no wider than the
  vocabulary), called once before anything is decoded;
- ``search(model, src_ids, max_len_a=..., max_len_b=...)``: ``src_ids (B, S)`` -> B lists
  of token ids, each at most ``max_len_a · |x| + max_len_b`` long
  (:func:`~transformer_book.inference.lengths.output_length_limits`).

:data:`DECODING_STRATEGIES` maps a name to the class (any callable taking keyword
settings); :func:`decoding_strategy` makes one by name, which is how
:func:`~transformer_book.inference.translate.translate` and the CLI choose. A new strategy
is one entry there. Strategies that pick one token per step need only a rule from the
step's log-probabilities ``(N, V)`` to tokens ``(N,)``, handed to
:func:`~transformer_book.inference.greedy.token_by_token`, as :class:`Sampling` does.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch

from transformer_book.inference.beam import (
    STOPPING_RULES,
    beam_search,
    check_alpha,
    check_beam_size,
)
from transformer_book.inference.greedy import greedy_decode, token_by_token
from transformer_book.nn.config import TransformerConfig
from transformer_book.nn.transformer import Transformer
from transformer_book.util.validation import (
    bad_input,
    require,
    require_bool,
    require_int,
    require_number,
    require_one_of,
    require_positive_int,
    require_positive_number,
)

__all__ = ["DECODING_STRATEGIES", "Beam", "DecodingStrategy", "Greedy", "Sampling",
           "check_temperature", "check_top_p", "decoding_strategy", "nucleus", "sample_tokens"]


@runtime_checkable
class DecodingStrategy(Protocol):
    """What every decoding strategy offers (see the module docstring)."""

    def check(self, config: TransformerConfig) -> None:
        """Refuse settings this model cannot use (a ``BookError``), before any decoding."""

    def search(self, model: Transformer, src_ids: torch.Tensor, *, max_len_a: float,
               max_len_b: int) -> list[list[int]]:
        """``src_ids (B, S)`` -> B lists of token ids, without ``<bos>``/``<eos>``/pad."""
        ...


@dataclass(frozen=True)
class Greedy:
    """The most probable token at every step (:func:`~.greedy.greedy_decode`); ``fast``:
    its fast path, the static key/value cache (the same tokens); ``compiled`` (with
    ``fast``): that path's step compiled by ``torch.compile`` (the same tokens; tens of
    seconds to compile, once per process, so for long decodings)."""

    fast: bool = False
    compiled: bool = False

    def __post_init__(self) -> None:
        require_bool(self.fast, "fast")
        require_bool(self.compiled, "compiled")
        require(self.fast or not self.compiled, "compiled",
                "False without the fast path (fast=False)", self.compiled)

    def check(self, config: TransformerConfig) -> None:
        """Nothing depends on the model."""

    def search(self, model: Transformer, src_ids: torch.Tensor, *, max_len_a: float,
               max_len_b: int) -> list[list[int]]:
        return greedy_decode(model, src_ids, max_len_a=max_len_a, max_len_b=max_len_b,
                             fast=self.fast, compiled=self.compiled)


@dataclass(frozen=True)
class Beam:
    """Beam search of ``beam_size`` hypotheses with length penalty ``alpha`` and stopping
    rule ``stop`` (:func:`~.beam.beam_search`, on its fast path); a beam of one is greedy
    search, which is what a beam of the most probable token at every step is (the
    ``[decode]`` section's ``beam_size = 1``). ``alpha`` and ``stop`` are checked with a
    beam of one too: a value that is recorded must be one that could have been used."""

    beam_size: int = 4
    alpha: float = 0.6
    stop: str = "exact"

    def __post_init__(self) -> None:
        require_positive_int(self.beam_size, "beam_size")
        check_alpha(self.alpha)
        require_one_of(self.stop, "stop", STOPPING_RULES)

    def check(self, config: TransformerConfig) -> None:
        check_beam_size(self.beam_size, config.vocab_size)
        check_alpha(self.alpha, config.max_len)

    def search(self, model: Transformer, src_ids: torch.Tensor, *, max_len_a: float,
               max_len_b: int) -> list[list[int]]:
        if self.beam_size == 1:
            return greedy_decode(model, src_ids, max_len_a=max_len_a, max_len_b=max_len_b)
        return beam_search(model, src_ids, beam_size=self.beam_size, alpha=self.alpha,
                           max_len_a=max_len_a, max_len_b=max_len_b, stop=self.stop, fast=True)


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
class Sampling:
    """Each token drawn from the model's distribution at ``temperature``, restricted to
    its nucleus of mass ``top_p`` (:func:`nucleus`), with a ``torch.Generator`` seeded by
    ``seed`` at every :meth:`search`: the same sources in the same batches give the same
    translations. A tiny temperature or ``top_p`` is greedy search."""

    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        check_temperature(self.temperature)
        check_top_p(self.top_p)
        require_int(self.seed, "seed", minimum=0, maximum=MAX_SEED)

    def check(self, config: TransformerConfig) -> None:
        """Nothing depends on the model."""

    def search(self, model: Transformer, src_ids: torch.Tensor, *, max_len_a: float,
               max_len_b: int) -> list[list[int]]:
        generator = torch.Generator(device=src_ids.device).manual_seed(self.seed)
        return token_by_token(
            model, src_ids,
            lambda log_probs: sample_tokens(log_probs, self.temperature, self.top_p, generator),
            max_len_a=max_len_a, max_len_b=max_len_b)


# The strategies by name: translate(strategy=...), the CLI. A new one is one entry here.
DECODING_STRATEGIES: dict[str, Callable[..., DecodingStrategy]] = {
    "greedy": Greedy,
    "beam": Beam,
    "sample": Sampling,
}


def decoding_strategy(name: str, **settings: Any) -> DecodingStrategy:
    """The strategy registered as ``name`` in :data:`DECODING_STRATEGIES`, made with
    ``settings``; an unknown name or a setting it does not take is a ``BookError``."""
    require_one_of(name, "strategy", tuple(DECODING_STRATEGIES))
    make = DECODING_STRATEGIES[name]
    try:
        inspect.signature(make).bind(**settings)
    except TypeError:
        takes = ", ".join(inspect.signature(make).parameters) or "none"
        raise bad_input("settings", f"settings of the {name!r} strategy ({takes})",
                   ", ".join(sorted(settings))) from None
    strategy = make(**settings)
    require(isinstance(strategy, DecodingStrategy), "strategy",
            "a registered class with check and search methods", type(strategy).__name__)
    return strategy
