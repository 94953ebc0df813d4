"""Chapter 11's checkers accept correct answers and reject the classic mistakes."""

from __future__ import annotations

import math

import torch

from transformer_book.course.exercises import run_check
from transformer_book.course.exercises.ch11 import (
    _alpha_cases,
    _beam_cases,
    _wins,
    reference_alpha,
    reference_beam_step,
)
from transformer_book.inference.beam import _WidthOneBeam
from transformer_book.inference.generate import _advance, _Search, finished_scores

# ----------------------------------------------------------------------------- 11.1


def alpha_to_prefer_longer(short_logp, short_len, long_logp, long_len):
    if long_logp >= short_logp:
        return 0.0
    if short_logp == 0:
        return math.inf
    return math.log(long_logp / short_logp) / math.log((5 + long_len) / (5 + short_len))


def test_the_reference_alpha_is_where_the_scores_cross():
    for case in _alpha_cases(torch.Generator().manual_seed(1)):
        short_logp, short_len, long_logp, long_len = case
        alpha = reference_alpha(short_logp, short_len, long_logp, long_len)
        if math.isinf(alpha) or alpha + 1e-6 > 10:
            continue
        assert _wins(short_logp, short_len, long_logp, long_len, alpha + 1e-6)
        if alpha > 1e-6:
            assert not _wins(short_logp, short_len, long_logp, long_len, alpha - 1e-6)


def test_11_1_passes_the_crossing_point():
    assert run_check("11.1", alpha_to_prefer_longer).passed


def test_11_1_rejects_the_classic_mistakes():
    def no_five(s, ns, lg, nl):  # lp = |Y|^α: Wu et al.'s 5 and 6 forgotten
        if lg >= s:
            return 0.0
        return math.inf if s == 0 else math.log(lg / s) / math.log(nl / ns)

    assert run_check("11.1", no_five).status == "failed"

    def never_clamped(s, ns, lg, nl):  # a longer, more probable one gives a negative α
        return math.inf if s == 0 else math.log(lg / s) / math.log((5 + nl) / (5 + ns))

    assert run_check("11.1", never_clamped).status == "failed"

    def inverted(s, ns, lg, nl):  # the ratio the wrong way round
        if lg >= s:
            return 0.0
        return math.inf if s == 0 else math.log(s / lg) / math.log((5 + nl) / (5 + ns))

    assert run_check("11.1", inverted).status == "failed"

    def without_eos(s, ns, lg, nl):  # |Y| without <eos>: one token short on both sides
        return alpha_to_prefer_longer(s, ns - 1, lg, nl - 1)

    assert run_check("11.1", without_eos).status == "failed"


def test_11_1_not_attempted():
    def stub(short_logp, short_len, long_logp, long_len):
        raise NotImplementedError("Exercise 11.1: write your solution here")

    assert run_check("11.1", stub).status == "not attempted"


# ----------------------------------------------------------------------------- 11.2


def package_step(scores, logp, k, eos, t, alpha, max_len, before, stop):
    """The same step through the package's own loop (generate's _advance) and Beam's step
    rule, for one sentence: what finished (score, parent), what lives on, and done."""
    rule = _WidthOneBeam(k, alpha, stop)  # a beam of one too
    f64 = torch.float64
    search = _Search(live=torch.tensor([0]), scores=scores[None].clone(),
                     limits=torch.tensor([max_len]),
                     bound_lp=rule.length_penalty(torch.tensor([max_len + 1.0], dtype=f64)),
                     count=torch.tensor([len(before)]),
                     best=torch.tensor([max(before, default=-math.inf)], dtype=f64),
                     at=torch.tensor([-1]), token=torch.tensor([0]), parent=torch.tensor([0]))
    cand, ranked, origin = rule.step(t, logp[None].clone(), search.scores, None)
    ends = (ranked[:, :k] == eos) & cand[:, :k].isfinite()
    finished = [(s, p) for s, p, e in zip(finished_scores(rule, cand, ends, t)[0].tolist(),
                                          origin[0, :k].tolist(), ends[0].tolist(), strict=True)
                if e]
    forced = torch.tensor([t >= max_len])
    token, parent, _, done = _advance(search, rule, cand, ranked, origin, t, forced, eos)
    live = [(s, r, v) for s, r, v in zip(search.scores[0].tolist(), parent[0].tolist(),
                                         token[0].tolist(), strict=True) if math.isfinite(s)]
    return finished, live, bool(done[0])


def same(a, b):
    return len(a) == len(b) and all(math.isclose(x[0], y[0], rel_tol=1e-12) and x[1:] == y[1:]
                                    for x, y in zip(a, b, strict=True))


def test_the_reference_step_is_beam_searchs_own():
    for seed in range(3):
        for case in _beam_cases(torch.Generator().manual_seed(seed)):
            want, got = reference_beam_step(*case), package_step(*case)
            assert same(want[0], got[0]) and same(want[1], got[1]) and want[2] == got[2], case


def beam_step(scores, logp, k, eos_id, t, alpha, max_len, finished_before, stop="exact",
              *, finish_top=None, live_from=None, lp_of=None, bound_lp=None, count_now=True,
              count_before=True):
    """A correct answer; the keyword arguments introduce the classic mistakes."""
    vocab = logp.shape[1]
    totals = (scores[:, None] + logp).flatten()
    values, index = totals.topk(min(2 * k, totals.numel()))
    finished, live = [], []
    for rank, (value, i) in enumerate(zip(values.tolist(), index.tolist(), strict=True)):
        beam, token = divmod(i, vocab)
        if value == -math.inf or rank >= (live_from or 2 * k):
            continue
        if token == eos_id:
            if rank < (finish_top or k):
                length = t + 1 if lp_of is None else lp_of(t)
                finished.append((value / ((5 + length) / 6) ** alpha, beam))
            elif live_from is not None:  # the old bug: a dropped <eos> extended past its end
                live.append((value, beam, token))
        elif len(live) < k:
            live.append((value, beam, token))
    live = live[:k]
    now = [s for s, _ in finished] if count_now else []
    best = max([*finished_before, *now], default=-math.inf)
    final = max_len + 1 if bound_lp is None else bound_lp(t, max_len)
    bound = max((s for s, _, _ in live), default=-math.inf) / ((5 + final) / 6) ** alpha
    done = best >= bound
    if stop == "k_finished":
        done = done or (len(finished_before) if count_before else 0) + len(finished) >= k
    return finished, live, done


def test_11_2_passes_the_rules():
    assert run_check("11.2", beam_step).passed

    def with_tensors(*args):
        finished, live, done = beam_step(*args)
        return finished, live, torch.tensor(done)

    assert run_check("11.2", with_tensors).passed


def test_11_2_rejects_the_classic_mistakes():
    mistakes = {
        "every <eos> in the top 2k finishes": dict(finish_top=10**6),
        "an <eos> ranked between k and 2k lives on": dict(live_from=10**6),
        "lp of t tokens, <eos> not counted": dict(lp_of=lambda t: t),
        "the bound divides by the current lp": dict(bound_lp=lambda t, m: t + 1),
        "the bound divides by lp(max_len)": dict(bound_lp=lambda t, m: m),
        "this step's finished left out of the stop test": dict(count_now=False),
        "k_finished counts this step only": dict(count_before=False),
    }
    for name, mistake in mistakes.items():
        def wrong(*args, mistake=mistake):
            return beam_step(*args, **mistake)

        assert run_check("11.2", wrong).status == "failed", name

    def live_from_top_k(scores, logp, k, *rest):  # survivors taken from the top k only
        finished, live, done = beam_step(scores, logp, k, *rest)
        vocab = logp.shape[1]
        top = (scores[:, None] + logp).flatten().topk(min(k, logp.numel())).indices.tolist()
        return finished, [row for row in live if row[1] * vocab + row[2] in top], done

    assert run_check("11.2", live_from_top_k).status == "failed"
    result = run_check("11.2", lambda *args: beam_step(*args)[:2])
    assert result.status == "failed" and "tuple" in result.detail


def test_11_2_not_attempted():
    def stub(scores, logp, k, eos_id, t, alpha, max_len, finished_before, stop="exact"):
        raise NotImplementedError("Exercise 11.2: write your solution here")

    assert run_check("11.2", stub).status == "not attempted"
