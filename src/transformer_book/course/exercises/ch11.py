"""Checkers for chapter 11 (decoding and evaluation)."""

from __future__ import annotations

import math

import torch

from transformer_book.course.exercises.core import (
    ExerciseFailure,
    attempt,
    exercise,
    fresh_generator,
    random_int,
)
from transformer_book.inference.beam import length_penalty, top_candidates
from transformer_book.run.config import MAX_ALPHA


def reference_alpha(short_logp: float, short_len: int, long_logp: float, long_len: int
                    ) -> float:
    """The smallest α >= 0 at which the longer hypothesis scores at least as high as the
    shorter one under ``log P / lp``, ``lp = ((5 + |Y|) / 6)^α``; ``inf`` if it never does.

    Both log-probabilities are <= 0 and ``long_len > short_len``. The longer one wins when
    ``|long_logp| / |short_logp| <= ((5 + long_len) / (5 + short_len))^α``."""
    if long_logp >= short_logp:  # it already wins without a penalty
        return 0.0
    if short_logp == 0.0:  # the short one scores 0 whatever α: nothing beats it
        return math.inf
    ratio = long_logp / short_logp  # > 1
    return math.log(ratio) / math.log((5 + long_len) / (5 + short_len))


def _alpha_cases(generator: torch.Generator) -> list[tuple]:
    cases = []
    for _ in range(24):
        short_len = random_int(1, 40, generator)
        long_len = short_len + random_int(1, 20, generator)
        short_logp = -float(torch.empty(1).uniform_(0.5, 30.0, generator=generator))
        long_logp = short_logp * float(torch.empty(1).uniform_(0.8, 1.6, generator=generator))
        cases.append((short_logp, short_len, long_logp, long_len))
    cases += [(-6.0, 8, -7.5, 12),  # a dropped clause costs 1.5 nats
              (-4.0, 5, -3.5, 9),  # the longer is more probable: it wins at α = 0
              (-5.0, 3, -5.0, 4),  # a tie at α = 0
              (0.0, 2, -0.5, 6)]  # the short one is certain: nothing beats it
    return cases


def _wins(short_logp, short_len, long_logp, long_len, alpha) -> bool:
    return (long_logp / length_penalty(long_len, alpha)
            >= short_logp / length_penalty(short_len, alpha))


@exercise("11.1", "alpha_to_prefer_longer")
def check_alpha_to_prefer_longer(candidate) -> str:
    """``alpha_to_prefer_longer(short_logp, short_len, long_logp, long_len)`` must return
    the α from which beam search's score ``log P / lp`` prefers the longer hypothesis."""
    cases = _alpha_cases(fresh_generator())
    for short_logp, short_len, long_logp, long_len in cases:
        what = (f"a short hypothesis (log P = {short_logp:.4g}, {short_len} tokens) against a "
                f"longer one (log P = {long_logp:.4g}, {long_len} tokens)")
        received = attempt(candidate, short_logp, short_len, long_logp, long_len, what=what)
        if isinstance(received, torch.Tensor) and received.numel() == 1:
            received = float(received)
        if not isinstance(received, (int, float)) or isinstance(received, bool):
            raise ExerciseFailure(f"for {what}, expected a number, received "
                                  f"{type(received).__name__}")
        expected = reference_alpha(short_logp, short_len, long_logp, long_len)
        if math.isinf(expected) or math.isinf(received):
            if received != expected:
                raise ExerciseFailure(f"for {what}, expected {expected}, received {received}")
            continue
        if not math.isclose(received, expected, rel_tol=1e-9, abs_tol=1e-12):
            hint = ""
            if expected + 1e-3 <= MAX_ALPHA and received >= 0:
                above = _wins(short_logp, short_len, long_logp, long_len, expected + 1e-3)
                below = expected == 0 or not _wins(short_logp, short_len, long_logp, long_len,
                                                   max(expected - 1e-3, 0.0))
                hint = (" (with alpha just above that, the longer one wins; just below, the "
                        "shorter one)" if above and below else "")
            raise ExerciseFailure(f"for {what}, expected alpha = {expected:.6g}{hint}, "
                                  f"received {received:.6g}")
    return (f"matched the crossing point of log P / lp on {len(cases)} fresh pairs of "
            "hypotheses, including a longer one that wins at alpha = 0, a tie and a certain "
            "short one that nothing beats")


# ----------------------------------------------------------------------------- 11.2


def reference_beam_step(scores: torch.Tensor, logp: torch.Tensor, k: int, eos_id: int,
                        t: int, alpha: float, max_len: int, finished_before: list[float],
                        stop: str = "exact"):
    """One step of :func:`transformer_book.inference.beam.beam_search` for one sentence.

    ``scores (W,)`` are the live hypotheses' log-probabilities, ``logp (W, V)`` their
    next-token log-probabilities (already ``-inf`` where a token may not follow); each live
    hypothesis holds ``t`` tokens. Of the ``2k`` best extensions ``scores[w] + logp[w, v]``:
    those among the top ``k`` that end in ``<eos>`` (finite) finish, scored
    ``log P / lp(t + 1)``; the ``k`` best that do not end in ``<eos>`` live on (an ``<eos>``
    ranked between ``k`` and ``2k`` is dropped). The search stops when the best finished
    score (earlier ones included) is at least the best live score divided by
    ``lp(max_len + 1)``, the largest penalty any hypothesis can still get; with
    ``stop="k_finished"`` also once ``k`` hypotheses have finished in all.

    Returns ``(finished, live, stop)``: ``[(score / lp, beam)]`` and
    ``[(log P, beam, token)]`` in rank order (finite scores only), and a bool.
    """
    vocab = logp.shape[1]
    totals = (scores[:, None] + logp).reshape(1, -1)  # (W, V) -> (1, W·V)
    values, index = top_candidates(totals, 2 * k)  # (1, 2k), best first
    finished: list[tuple[float, int]] = []
    live: list[tuple[float, int, int]] = []
    for rank, (value, i) in enumerate(zip(values[0].tolist(), index[0].tolist(), strict=True)):
        beam, token = divmod(i, vocab)
        if not math.isfinite(value):
            continue
        if token == eos_id:
            if rank < k:
                finished.append((value / length_penalty(t + 1, alpha), beam))
        elif len(live) < k:
            live.append((value, beam, token))
    best = max([*finished_before, *(s for s, _ in finished)], default=-math.inf)
    bound = max((s for s, _, _ in live), default=-math.inf) / length_penalty(max_len + 1, alpha)
    done = best >= bound
    if stop == "k_finished":
        done = done or len(finished_before) + len(finished) >= k
    return finished, live, done


def _log_probs(generator: torch.Generator, width: int, vocab: int) -> torch.Tensor:
    sharp = float(torch.empty(1).uniform_(0.5, 4.0, generator=generator))
    logits = sharp * torch.randn(width, vocab, generator=generator, dtype=torch.float64)
    logp = torch.log_softmax(logits, dim=-1)
    logp[:, :2] = -math.inf  # <pad> = 0 and <bos> = 1 are never generated
    return logp


def _place_eos(logp: torch.Tensor, scores: torch.Tensor, eos_id: int, rank: int) -> None:
    """In place: the best beam's ``<eos>`` extension lands at ``rank`` among all
    candidates (the other beams' ``<eos>`` are forbidden)."""
    logp[:, eos_id] = -math.inf
    totals = (scores[:, None] + logp).flatten()
    others = totals[totals.isfinite()].sort(descending=True).values
    beam = int(scores.argmax())
    high = float(scores[beam]) if rank == 0 else float(others[rank - 1])
    logp[beam, eos_id] = (high + float(others[rank])) / 2 - float(scores[beam])


def _beam_cases(generator: torch.Generator) -> list[tuple]:
    """Random steps, plus steps built to hit each rule: an ``<eos>`` in the top k, one
    ranked between k and 2k, a first step (one live hypothesis), the length limit (only
    ``<eos>`` allowed), stopping only thanks to this step's finished hypothesis, a bound
    that needs the final length penalty, and the k_finished rule."""
    cases = []
    for index in range(40):
        k = random_int(1, 5, generator)
        width = 1 if index % 4 == 0 else k
        vocab = random_int(4, 14, generator)
        eos = 2 + random_int(0, vocab - 3, generator)  # 2 .. vocab - 1
        t = 0 if width == 1 else random_int(1, 12, generator)
        max_len = t + random_int(0, 10, generator)
        scores = (torch.zeros(1, dtype=torch.float64) if width == 1 else
                  -3 * t * torch.rand(width, generator=generator, dtype=torch.float64))
        logp = _log_probs(generator, width, vocab)
        logp[:, eos] += float(torch.empty(1).uniform_(-2.0, 3.0, generator=generator))
        if index % 3 == 1:
            _place_eos(logp, scores, eos, random_int(0, min(2 * k, vocab - 3) - 1, generator))
        if t == max_len:
            logp[:, [v for v in range(vocab) if v != eos]] = -math.inf
        earlier = 0 if t == 0 else random_int(0, k, generator)  # finished at earlier steps
        before = (scores.max() / length_penalty(max_len + 1, 0.6)
                  + torch.randn(earlier, generator=generator, dtype=torch.float64)
                  ).clamp(max=0.0).tolist()
        alpha = (0.0, 0.6, 1.0, 2.0)[index % 4]
        stop = "k_finished" if index % 5 == 0 else "exact"
        cases.append((scores, logp, k, eos, t, alpha, max_len, before, stop))
    cases += _built_cases(generator)
    return cases


def _built_cases(generator: torch.Generator) -> list[tuple]:
    cases: list[tuple] = []
    k, vocab, eos = 3, 10, 2
    scores = -torch.tensor([4.0, 4.5, 5.0], dtype=torch.float64)
    for rank in (0, k, 2 * k - 1):  # finished; dropped; dropped at the edge
        logp = _log_probs(generator, k, vocab)
        _place_eos(logp, scores, eos, rank)
        cases.append((scores, logp, k, eos, 6, 0.6, 20, [], "exact"))
    # Beam 0's <eos> first (it finishes) and beam 1's at rank k (dropped): only k - 1 of the
    # top k live on, so the k-th live slot goes to the best candidate after rank k, never
    # to the dropped <eos> (the rule a search that extends an ended hypothesis breaks).
    level = torch.full((k,), -4.0, dtype=torch.float64)
    both = _log_probs(generator, k, vocab)
    both[:, eos] = -math.inf
    others = (level[:, None] + both).flatten().sort(descending=True).values
    both[0, eos] = (-4.0 + float(others[0])) / 2 + 4.0
    both[1, eos] = (float(others[k - 2]) + float(others[k - 1])) / 2 + 4.0
    cases.append((level, both, k, eos, 6, 0.6, 20, [], "exact"))
    first = _log_probs(generator, 1, 5)  # a first step: one hypothesis, 3 finite candidates
    cases.append((torch.zeros(1, dtype=torch.float64), first, 4, 3, 0, 0.6, 9, [], "exact"))
    limit = _log_probs(generator, k, vocab)  # the length limit: only <eos> may follow
    limit[:, [v for v in range(vocab) if v != eos]] = -math.inf
    cases.append((scores, limit, k, eos, 8, 0.6, 8, [-9.0], "exact"))
    # <eos> first with a score that beats every live bound: stops only if counted now.
    strong = -30 + _log_probs(generator, k, vocab)  # every other extension is far worse
    strong[:, eos] = -math.inf
    strong[0, eos] = -0.01
    cases.append((scores, strong, k, eos, 6, 0.6, 30, [], "exact"))
    # An earlier finished score between best live / lp(t + 1) and best live / lp(max_len + 1):
    # only the final penalty keeps the search going.
    late = _log_probs(generator, k, vocab)
    late[:, eos] = -math.inf
    best_live = float((scores[:, None] + late).max())
    between = (best_live / length_penalty(7, 1.0) + best_live / length_penalty(41, 1.0)) / 2
    cases.append((scores, late, k, eos, 6, 1.0, 40, [between], "exact"))
    # ... and one between best live / lp(max_len) and best live / lp(max_len + 1).
    edge = (best_live / length_penalty(40, 1.0) + best_live / length_penalty(41, 1.0)) / 2
    cases.append((scores, late, k, eos, 6, 1.0, 40, [edge], "exact"))
    # k_finished: k - 1 finished before, one more now.
    more = _log_probs(generator, k, vocab)
    _place_eos(more, scores, eos, 0)
    cases.append((scores, more, k, eos, 6, 0.6, 40, [-50.0] * (k - 1), "k_finished"))
    return cases


def _as_pairs(received, n: int, what: str, name: str) -> list[tuple]:
    if not isinstance(received, (list, tuple)):
        raise ExerciseFailure(f"for {what}, expected {name} as a list of tuples, received "
                              f"{type(received).__name__}")
    rows = []
    for row in received:
        if not (isinstance(row, (list, tuple)) and len(row) == n):
            raise ExerciseFailure(f"for {what}, each of {name} must be a tuple of {n}, "
                                  f"received {row!r:.80}")
        rows.append(tuple(float(x) if i == 0 else int(x) for i, x in enumerate(row)))
    return rows


def _compare(got: list[tuple], want: list[tuple], what: str, name: str) -> None:
    same = len(got) == len(want) and all(
        math.isclose(g[0], w[0], rel_tol=1e-9, abs_tol=1e-12) and g[1:] == w[1:]
        for g, w in zip(got, want, strict=False))
    if not same:
        shown = [tuple(round(x, 4) if isinstance(x, float) else x for x in row) for row in want]
        mine = [tuple(round(x, 4) if isinstance(x, float) else x for x in row) for row in got]
        raise ExerciseFailure(f"for {what}, expected {name} {shown}, received {mine}")


def _as_bool(value) -> bool | None:
    """``value`` as a bool if it is one (a Python, NumPy or one-element tensor bool)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.dtype == torch.bool:
        return bool(value)
    if type(value).__name__ == "bool_":  # numpy.bool_
        return bool(value)
    return None


def _describe(scores, logp, k, eos, t, alpha, max_len, before, stop) -> str:
    n = scores.numel()
    return (f"{n} live hypothes{'i' if n == 1 else 'e'}s of {t} tokens, vocabulary "
            f"{logp.shape[1]}, k={k}, "
            f"eos_id={eos}, alpha={alpha}, max_len={max_len}, {len(before)} finished before, "
            f"stop={stop!r}")


@exercise("11.2", "beam_step")
def check_beam_step(candidate) -> str:
    """``beam_step(scores, logp, k, eos_id, t, alpha, max_len, finished_before, stop)``
    must follow the package's beam-search rules: which candidates finish, which live on,
    and whether the search may stop."""
    cases = _beam_cases(fresh_generator())
    for case in cases:
        what = _describe(*case)
        scores, logp, *rest = case
        got = attempt(candidate, scores.clone(), logp.clone(), *rest[:-2], list(rest[-2]),
                      rest[-1], what=what)
        if not (isinstance(got, tuple) and len(got) == 3):
            raise ExerciseFailure(f"for {what}, expected a tuple (finished, live, stop), "
                                  f"received {type(got).__name__}")
        want = reference_beam_step(*case)
        _compare(_as_pairs(got[0], 2, what, "finished"), want[0], what,
                 "finished (score / lp, beam)")
        _compare(_as_pairs(got[1], 3, what, "live"), want[1], what, "live (log P, beam, token)")
        if _as_bool(got[2]) != want[2]:
            raise ExerciseFailure(f"for {what}, expected stop = {want[2]}, received {got[2]!r}")
    return (f"followed beam_search's rules on {len(cases)} fresh steps: <eos> in the top k "
            "finishes, <eos> between k and 2k is dropped, the k best others live on, and the "
            "search stops by the final length penalty's bound (or k finished)")
