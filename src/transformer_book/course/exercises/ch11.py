"""Checkers for chapter 11 (decoding and evaluation)."""

from __future__ import annotations

import math

import torch

from transformer_book.course.exercises.core import (
    ExerciseFailure,
    attempt,
    exercise,
    expect_close,
    expect_equal,
    fresh_generator,
    random_int,
)
from transformer_book.inference.beam import length_penalty


@exercise("11.1", "length_penalty")
def check_length_penalty(candidate) -> str:
    """``length_penalty(length, alpha)`` must equal Wu et al.'s ((5 + |Y|) / 6)^α (the
    package's ``length_penalty``) for integer lengths and for a tensor of lengths."""
    generator = fresh_generator()
    cases = []
    for index in range(20):
        length = random_int(1, 200, generator)
        alpha = (0.0, 0.6, 1.0, 2.0 * float(torch.rand(1, generator=generator)))[index % 4]
        cases.append((length, alpha, f"length={length}, alpha={alpha:.3g}"))
    cases.append((1, 0.6, "length=1 (lp = 1: one token is not penalised)"))
    for length, alpha, what in cases:
        received = attempt(candidate, length, alpha, what=what)
        if isinstance(received, torch.Tensor) and received.numel() == 1:
            received = float(received)
        if not isinstance(received, (int, float)) or isinstance(received, bool):
            raise ExerciseFailure(f"for {what}, expected a number, received "
                                  f"{type(received).__name__}")
        expected = float(length_penalty(length, alpha))
        if not math.isclose(float(received), expected, rel_tol=1e-12):
            raise ExerciseFailure(f"for {what}, expected {expected:.8g}, received "
                                  f"{float(received):.8g}")
    lengths = torch.randint(1, 60, (7,), generator=generator)
    what = f"a tensor of lengths {lengths.tolist()} with alpha=0.6"
    received = attempt(candidate, lengths.clone(), 0.6, what=what)
    # Integer tensors divide in float32: compare at float32 precision.
    expect_close(received, length_penalty(lengths.double(), 0.6), what=what, atol=1e-6,
                 rtol=1e-6)
    return (f"matched ((5 + |Y|) / 6)^alpha on {len(cases)} fresh (length, alpha) pairs, "
            "alpha from 0 to 2, and on a tensor of lengths")


def reference_beam_step(log_probs: torch.Tensor, beam_scores: torch.Tensor, beam_size: int
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step of beam search for one sentence, as
    :func:`transformer_book.inference.beam.beam_search`
    computes it: every extension of every live beam, ``(K, 1) + (K, V) -> (K·V,)``, and the
    ``beam_size`` best as ``(scores, beam index, token)``, best first."""
    vocab = log_probs.shape[-1]
    candidates = (beam_scores[:, None] + log_probs).reshape(-1)  # (K, V) -> (K·V,)
    scores, index = candidates.topk(beam_size)  # (beam_size,)
    return scores, index // vocab, index % vocab


def _triple(received, what: str) -> tuple:
    if not (isinstance(received, tuple) and len(received) == 3):
        raise ExerciseFailure(f"for {what}, expected a tuple (scores, beams, tokens), received "
                              f"{type(received).__name__}")
    return received


@exercise("11.2", "beam_step")
def check_beam_step(candidate) -> str:
    """``beam_step(log_probs, beam_scores, beam_size)`` must return the ``beam_size`` best
    one-token extensions over all beams: scores, the beam each extends and its token."""
    generator = fresh_generator()
    cases = []
    for _ in range(16):
        beams, vocab = random_int(1, 6, generator), random_int(2, 30, generator)
        beam_size = random_int(1, min(beams * vocab, 8), generator)
        log_probs = torch.log_softmax(
            2 * torch.randn(beams, vocab, generator=generator, dtype=torch.float64), dim=-1)
        scores = -5 * torch.rand(beams, generator=generator, dtype=torch.float64)
        cases.append((log_probs, scores, beam_size,
                      f"{beams} beams, a vocabulary of {vocab}, beam_size={beam_size}"))
    log_probs = torch.log_softmax(torch.randn(4, 10, generator=generator,
                                              dtype=torch.float64), dim=-1)
    first = torch.tensor([0.0, -math.inf, -math.inf, -math.inf], dtype=torch.float64)
    cases.append((log_probs, first, 4, "the first step, where only beam 0 is alive (the others "
                                       "score -inf)"))
    strong = torch.full((3, 5), -10.0, dtype=torch.float64)
    strong[1] = torch.log_softmax(torch.tensor([5.0, 4.0, 3.0, 2.0, 1.0],
                                               dtype=torch.float64), dim=-1)
    cases.append((strong, torch.tensor([-1.0, -1.5, -1.2], dtype=torch.float64), 3,
                  "one beam whose extensions beat every other beam's"))
    for log_probs, scores, beam_size, what in cases:
        want_scores, want_beams, want_tokens = reference_beam_step(log_probs, scores, beam_size)
        got = _triple(attempt(candidate, log_probs.clone(), scores.clone(), beam_size,
                              what=what), what)
        finite = want_scores.isfinite()
        got_scores = got[0]
        if not isinstance(got_scores, torch.Tensor) or got_scores.shape != want_scores.shape:
            raise ExerciseFailure(f"for {what}, expected scores of shape "
                                  f"{tuple(want_scores.shape)}, received {got_scores!r:.80}")
        expect_close(got_scores[finite], want_scores[finite], what=f"the scores for {what}",
                     atol=1e-12, rtol=1e-12)
        if bool((got_scores[~finite] != -math.inf).any()):
            raise ExerciseFailure(f"for {what}, extensions of dead beams must score -inf")
        for name, received, expected in (("beam indices", got[1], want_beams),
                                         ("tokens", got[2], want_tokens)):
            if not isinstance(received, torch.Tensor):
                raise ExerciseFailure(f"for {what}, expected the {name} as a tensor, received "
                                      f"{type(received).__name__}")
            expect_equal(received.long()[finite], expected[finite],
                         what=f"the {name} for {what}")
    return (f"matched the top-k over beams x vocabulary on {len(cases)} fresh steps, "
            "including the first step with one live beam and a beam that wins every slot")
