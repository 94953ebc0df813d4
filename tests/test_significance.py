"""Comparing two systems: the paired bootstrap interval of the difference and sacreBLEU's
paired bootstrap test (Koehn, 2004), and the bootstrap interval of one system's score."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

from transformer_book.inference import Comparison, bootstrap_interval, compare_systems
from transformer_book.inference.significance import (
    _draws,
    _resampled_scores,
    _sacrebleu_seed,
    _statistics,
)
from transformer_book.util.validation import BookError

SUBJECTS = ["A man", "Two dogs", "A woman", "A little girl", "Three children", "An old man"]
ACTIONS = ["is riding a red bike", "are playing in the snow", "sings a song on a stage",
           "is climbing a wooden fence", "are running along the beach", "reads a newspaper"]
PLACES = ["in the park.", "near the river.", "in front of a white house.", "at night.",
          "on a busy street.", "under a big tree."]


def _references(n: int = 120) -> list[str]:
    rng = random.Random(7)
    return [f"{rng.choice(SUBJECTS)} {rng.choice(ACTIONS)} {rng.choice(PLACES)}"
            for _ in range(n)]


def _damaged(references: list[str], drop: float, seed: int) -> list[str]:
    """Each word of each reference dropped with probability ``drop``."""
    rng = random.Random(seed)
    return [" ".join(w for w in ref.split() if rng.random() >= drop) or "a"
            for ref in references]


REFS = _references()
GOOD = _damaged(REFS, 0.1, seed=1)
BAD = _damaged(REFS, 0.5, seed=2)


#: Sentences where chrF++'s word splitting and BLEU's tokenisation have corner cases:
#: punctuation at either end of a word, alone, doubled; quotes; accents; blank runs.
EDGE_HYPS = ["(hi) there!", '"Quoted" words, here.', "a", "...", "Ein Mann, der 'läuft'.",
             "  spaces   everywhere  ", "-dash -start", "x!", "Two dogs play.", ""]
EDGE_REFS = ["(hi) there !", '"Quoted" words here.', "a", "..", "Ein Mann, der läuft.",
             "spaces everywhere", "-dash start", "x", "Two dogs are playing.", "empty"]


@pytest.mark.parametrize("metric", ["bleu", "chrf"])
def test_resampled_scores_are_sacrebleus_own_corpus_scores(metric):
    """Each resample's score from summed per-sentence statistics is, exactly, sacreBLEU's
    ``corpus_score`` of that resampled corpus built sentence by sentence (the plain, slow
    computation)."""
    hyps, refs = GOOD[:30] + EDGE_HYPS, REFS[:30] + EDGE_REFS
    counts = _draws(len(refs), 100, seed=4)[:12]  # (12, N): how often each sentence is drawn
    fast = _resampled_scores(metric, _statistics(metric, hyps, refs), counts)
    scorer = BLEU() if metric == "bleu" else CHRF(word_order=2)
    for row, score in zip(counts, fast, strict=True):
        drawn = [i for i, times in enumerate(row) for _ in range(int(times))]
        assert len(drawn) == len(refs), "a resample is a corpus of N sentences"
        slow = scorer.corpus_score([hyps[i] for i in drawn], [[refs[i] for i in drawn]])
        assert score == slow.score, (metric, score, slow.score)
    whole = _resampled_scores(metric, _statistics(metric, hyps, refs), np.ones((1, len(refs))))
    assert whole[0] == scorer.corpus_score(hyps, [refs]).score


def test_identical_systems_do_not_differ():
    for metric in ("bleu", "chrf"):
        result = compare_systems(GOOD, list(GOOD), REFS, metric=metric, resamples=200)
        assert result.delta == 0.0 and result.baseline_score == result.system_score
        low, high = result.interval
        assert low <= 0.0 <= high
        assert result.p_value == 1.0 and not result.significant


def test_the_references_beat_a_bad_system():
    result = compare_systems(BAD, REFS, REFS, names=("dropped words", "references"))
    assert isinstance(result, Comparison)
    assert result.system_score == pytest.approx(100.0)
    assert result.delta == pytest.approx(result.system_score - result.baseline_score)
    assert result.delta > 0
    assert 0 < result.interval[0] <= result.delta <= result.interval[1]
    assert result.p_value < 0.05 and result.significant
    assert result.baseline_score == pytest.approx(BLEU().corpus_score(BAD, [REFS]).score)
    text = str(result)
    assert "\n" not in text
    assert text.startswith(f"references vs dropped words: BLEU +{result.delta:.2f} [95% CI +")
    assert text.endswith("(significant)")
    worse = compare_systems(REFS, BAD, REFS, metric="chrf")
    assert worse.delta < 0 and worse.interval[1] < 0 and worse.significant
    assert worse.baseline_score == pytest.approx(100.0)
    assert "chrF++ -" in str(worse)


def test_the_same_seed_gives_the_same_result():
    first = compare_systems(GOOD, BAD, REFS, resamples=300, seed=5)
    assert compare_systems(GOOD, BAD, REFS, resamples=300, seed=5) == first
    assert (first.resamples, first.seed) == (300, 5)
    other = compare_systems(GOOD, BAD, REFS, resamples=300, seed=6)
    assert other.delta == first.delta, "the scores do not depend on the seed"
    assert other.interval != first.interval, "the resamples do"
    assert bootstrap_interval(GOOD, REFS, seed=3) == bootstrap_interval(GOOD, REFS, seed=3)


@pytest.mark.parametrize("metric", ["bleu", "chrf"])
def test_the_p_value_is_sacrebleus(metric):
    """The same p-value as sacreBLEU's paired bootstrap test run directly."""
    similar = _damaged(REFS, 0.1, seed=3)  # as damaged as GOOD: no real difference
    result = compare_systems(GOOD, similar, REFS, metric=metric, resamples=500, seed=11)
    assert 0.05 < result.p_value < 1 and not result.significant
    low, high = result.interval
    assert low < 0 < high
    scorer = BLEU() if metric == "bleu" else CHRF(word_order=2)
    with _sacrebleu_seed(11):
        test = PairedTest([("a", GOOD), ("b", similar)], {metric: scorer}, [REFS],
                          test_type="bs", n_samples=500)
    _, scores = test()
    (column,) = (v for k, v in scores.items() if k != "System")
    assert result.p_value == column[1].p_value
    assert result.system_score == pytest.approx(column[1].score)
    assert result.baseline_score == pytest.approx(column[0].score)
    assert result.significant == (result.p_value < 0.05)


def test_the_sacrebleu_seed_is_put_back(monkeypatch):
    monkeypatch.setenv("SACREBLEU_SEED", "99")
    compare_systems(GOOD, BAD, REFS, resamples=100)
    assert os.environ["SACREBLEU_SEED"] == "99"


@pytest.mark.parametrize("metric", ["bleu", "chrf"])
def test_interval_of_one_score_contains_it(metric):
    score = (BLEU() if metric == "bleu" else CHRF(word_order=2)).corpus_score(GOOD, [REFS]).score
    low, high = bootstrap_interval(GOOD, REFS, metric=metric)
    assert low < score < high
    narrow = bootstrap_interval(GOOD, REFS, metric=metric, level=0.5)
    assert low <= narrow[0] <= narrow[1] <= high, "a lower level, a narrower interval"
    assert bootstrap_interval(REFS, REFS, metric=metric) == (pytest.approx(100.0),
                                                             pytest.approx(100.0))


@pytest.mark.parametrize(("call", "match"), [
    (lambda: compare_systems(GOOD, BAD[:-1], REFS),
     r"system_hyps: expected 120 sentences \(one per reference\), received 119"),
    (lambda: compare_systems(GOOD[:3], BAD, REFS), r"baseline_hyps: expected 120 sentences"),
    (lambda: compare_systems([], [], []), r"references: expected at least one sentence"),
    (lambda: compare_systems(GOOD, [None] * 120, REFS),
     r"system_hyps: expected only strings, received non-strings at positions \[0, 1"),
    (lambda: compare_systems("a b", "a b", "a b"), r"references: expected a list of strings"),
    (lambda: compare_systems(GOOD, BAD, REFS, metric="ter"),
     r"metric: expected one of \['bleu', 'chrf'\], received 'ter'"),
    (lambda: compare_systems(GOOD, BAD, REFS, resamples=10),
     r"resamples: expected an integer >= 100, received 10"),
    (lambda: compare_systems(GOOD, BAD, REFS, resamples=1000.0),
     r"resamples: expected an integer >= 100"),
    (lambda: compare_systems(GOOD, BAD, REFS, seed=0), r"seed: expected an integer >= 1"),
    (lambda: compare_systems(GOOD, BAD, REFS, names=("a",)),
     r"names: expected two non-empty strings \(baseline, system\), received \('a',\)"),
    (lambda: bootstrap_interval(GOOD, REFS, level=1.0),
     r"level: expected a number between 0 and 1 \(exclusive\), received 1.0"),
    (lambda: bootstrap_interval(GOOD, REFS, level=0), r"level: expected a number between 0"),
    (lambda: bootstrap_interval(GOOD, REFS, level="0.9"), r"level: expected a finite number"),
    (lambda: bootstrap_interval(GOOD, REFS[:5]),
     r"hypotheses: expected 5 sentences \(one per reference\), received 120"),
    (lambda: bootstrap_interval(GOOD, REFS, metric="BLEU"), r"metric: expected one of"),
])
def test_bad_inputs(call, match):
    with pytest.raises(BookError, match=match):
        call()
