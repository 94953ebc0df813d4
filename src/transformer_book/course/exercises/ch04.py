"""Checkers for chapter 04 (attention as weighted averaging).

- 04.2 ``additive_score(q, k, W_q, W_k, v)``: the additive score of every query-key pair,
  compared with :class:`~transformer_book.nn.attention.AdditiveScore` holding the same
  weights. The exercise hands the learner :func:`additive_score_first_attempt`, which scores
  queries and keys apart to avoid the ``(..., L_q, L_k, h)`` tensor, to predict, measure and
  fix; while the learner's function runs, ``AdditiveScore`` refuses to run.
- 04.3 ``masked_softmax(scores, mask)``: compared with the package's ``masked_softmax``.
"""

from __future__ import annotations

import contextlib

import torch

from transformer_book.course.exercises.core import (
    ExerciseFailure,
    attempt,
    exercise,
    expect_close,
    fresh_generator,
    random_int,
)
from transformer_book.nn.attention import AdditiveScore, masked_softmax

__all__ = ["additive_score_first_attempt"]


def additive_score_first_attempt(q: torch.Tensor, k: torch.Tensor, W_q: torch.Tensor,
                                 W_k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The additive score of exercise 04.2, with its bug: the tanh applied to the query's and
    the key's projections apart, ``v·tanh(W_qᵀ q_i) + v·tanh(W_kᵀ k_j)``, which needs no
    ``(..., L_q, L_k, h)`` tensor.

    ``q (..., L_q, d_q)``, ``k (..., L_k, d_k)``, ``W_q (d_q, h)``, ``W_k (d_k, h)``,
    ``v (h,)`` -> ``(..., L_q, L_k)``.
    """
    query_part = torch.tanh(q @ W_q) @ v  # (..., L_q, h) @ (h,) -> (..., L_q)
    key_part = torch.tanh(k @ W_k) @ v  # (..., L_k, h) @ (h,) -> (..., L_k)
    # (..., L_q, 1) + (..., 1, L_k) -> (..., L_q, L_k)
    return query_part.unsqueeze(-1) + key_part.unsqueeze(-2)


@contextlib.contextmanager
def _package_score_refused():
    """While it is open, :class:`AdditiveScore` (and the modules built on it) raise: 04.2
    asks for the score written out, not for the package's module holding the weights."""
    original = AdditiveScore.forward

    def refuse(self, *args, **kwargs):
        raise RuntimeError("this exercise writes the additive score itself: compute it from "
                           "q, k, W_q, W_k and v rather than with transformer_book's "
                           "AdditiveScore")

    AdditiveScore.forward = refuse
    try:
        yield
    finally:
        AdditiveScore.forward = original


@exercise("04.2", "additive_score")
def check_additive_score(additive_score) -> str:
    """``additive_score(q, k, W_q, W_k, v)`` equals :class:`AdditiveScore` with those weights,
    on fresh inputs with 0 to 2 batch dimensions. The first case has ``L_q != L_k`` and
    ``d_q != d_k``, so that a score of the pairs ``(i, i)`` alone, a transposed score or a
    projection read the wrong way round fails on its shape there, whatever the draws."""
    generator = fresh_generator()
    cases = [((), 3, 5, 2, 4, 6)]  # L_q != L_k, d_q != d_k != h
    for batch in [(), (), (2,), (3,), (2, 3)]:
        l_q, l_k = random_int(1, 5, generator), random_int(1, 6, generator)
        d_q, d_k, hidden = (random_int(1, 7, generator) for _ in range(3))
        cases.append((batch, l_q, l_k, d_q, d_k, hidden))
    cases.append(((), 1, 1, 3, 5, 1))  # one query, one key, a hidden layer of one unit
    cases.append(((4,), 1, 7, 2, 2, 8))  # one query per batch row (a decoder step)
    for batch, l_q, l_k, d_q, d_k, hidden in cases:
        what = (f"q of shape {(*batch, l_q, d_q)}, k of shape {(*batch, l_k, d_k)} "
                f"and hidden size {hidden}")
        q = torch.randn(*batch, l_q, d_q, generator=generator, dtype=torch.float64)
        k = torch.randn(*batch, l_k, d_k, generator=generator, dtype=torch.float64)
        w_q = torch.randn(d_q, hidden, generator=generator, dtype=torch.float64)
        w_k = torch.randn(d_k, hidden, generator=generator, dtype=torch.float64)
        v = torch.randn(hidden, generator=generator, dtype=torch.float64)
        with torch.random.fork_rng(devices=[]):  # the notebook's global RNG stays as it was
            reference = AdditiveScore(d_q, d_k, hidden).double()
        with torch.no_grad():
            reference.w_q.weight.copy_(w_q.T)  # nn.Linear stores (out, in)
            reference.w_k.weight.copy_(w_k.T)
            reference.w_v.weight.copy_(v.unsqueeze(0))  # (hidden,) -> (1, hidden)
            expected = reference(q, k)  # (..., L_q, L_k)
        with _package_score_refused():
            received = attempt(additive_score, q.clone(), k.clone(), w_q.clone(), w_k.clone(),
                               v.clone(), what=what)
        expect_close(received, expected, what=what, atol=1e-9, rtol=1e-7)
    return (
        f"matched transformer_book.nn.attention.AdditiveScore (same weights) on {len(cases)} fresh "
        "random inputs with 0 to 2 batch dimensions, d_q ≠ d_k, single queries and keys"
    )


@exercise("04.3", "masked_softmax")
def check_masked_softmax(candidate) -> str:
    """``masked_softmax(scores, mask)``: zero weight where mask is False, all-zero masked rows."""
    generator = fresh_generator()
    cases = []
    for _ in range(8):
        l_q, l_k = random_int(1, 5, generator), random_int(1, 7, generator)
        scores = torch.randn(l_q, l_k, generator=generator, dtype=torch.float64) * 3
        mask = torch.rand(l_q, l_k, generator=generator) < 0.7
        what = f"scores of shape {(l_q, l_k)} with a random mask"
        if not bool(mask.any(-1).all()):
            what += " that masks every key of some row (that row must be all zeros)"
        cases.append((scores, mask, what))
    batch, l_q, l_k = random_int(2, 4, generator), random_int(2, 5, generator), 6
    scores = torch.randn(batch, l_q, l_k, generator=generator, dtype=torch.float64)
    lengths = torch.randint(1, l_k + 1, (batch,), generator=generator)
    padding = (torch.arange(l_k) < lengths[:, None]).unsqueeze(1)  # (B, 1, L_k)
    cases.append((scores, padding, f"scores {(batch, l_q, l_k)} with a padding mask (B, 1, L_k)"))
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    cases.append((torch.randn(5, 5, generator=generator, dtype=torch.float64), causal,
                  "a causal (lower-triangular) mask"))
    fully = torch.ones(3, 4, dtype=torch.bool)
    fully[1] = False
    cases.append((torch.randn(3, 4, generator=generator, dtype=torch.float64), fully,
                  "a row whose keys are all masked (its weights must be zeros, not NaN)"))
    cases.append((torch.tensor([[1000.0, 999.0, -1000.0]], dtype=torch.float64),
                  torch.tensor([[True, True, False]]), "scores near ±1000"))
    cases.append((torch.randn(2, 3, generator=generator, dtype=torch.float64),
                  torch.ones(2, 3, dtype=torch.bool), "a mask that is all True (plain softmax)"))
    for scores, mask, what in cases:
        expected = masked_softmax(scores, mask)
        received = attempt(candidate, scores.clone(), mask.clone(), what=what)
        expect_close(received, expected, what=what, atol=1e-9, rtol=1e-7)
        if bool((received.masked_select(~mask.expand_as(scores)) != 0).any()):
            raise ExerciseFailure(f"for {what}, a masked entry received a non-zero weight")
    return (
        f"matched transformer_book.nn.attention.masked_softmax on {len(cases)} fresh random "
        "inputs: random, padding and causal masks, a fully masked row (zeros, no NaN), "
        "scores near ±1000 and an all-True mask"
    )
