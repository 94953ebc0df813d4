"""Is one system better than another, or did the test sentences happen to favour it?

A corpus score is measured on one sample of sentences; another sample from the same source
would give another score. Two tools answer how much that matters, both by resampling the
test sentences with replacement (the bootstrap, Efron 1979):

- :func:`bootstrap_interval`: draw ``resamples`` corpora of N sentences from the N scored
  ones (some sentences twice, some not at all), score each, and take the middle 95% of
  those scores. The interval says how far the score could move had other, similar
  sentences been translated; it is not where 95% of systems land, nor a range of the
  "true" score with a 95% guarantee (the percentile bootstrap is an approximation).
- :func:`compare_systems`: the *paired* bootstrap (Koehn, 2004, "Statistical significance
  tests for machine translation evaluation"). Each resample draws the same sentence indices
  for both systems, so a difference in sentence difficulty cancels and only the difference
  in translation quality varies. The resampled deltas (system - baseline) give a 95%
  interval of the delta; the p-value comes from sacreBLEU's own paired bootstrap test
  (``sacrebleu.significance.PairedTest`` with ``test_type="bs"``, after Moses'
  ``bootstrap-hypothesis-difference-significance.pl``): how often a resampled |delta|,
  centred at zero to play the null hypothesis "no difference", is larger than the observed
  |delta|. A difference is called significant when p < 0.05.

Scores are recomputed from per-sentence sufficient statistics (n-gram matches and lengths
for BLEU; character and word n-gram matches for chrF++), so a resample costs a sum of
counts, never a re-tokenisation: 1000 resamples of 1000 sentences take about a second.
They come through sacreBLEU's public API: BLEU's from ``BLEU.sentence_score`` (each
sentence's ``counts``, ``totals``, ``sys_len`` and ``ref_len``), scored with the public
``BLEU.compute_bleu``; chrF++'s from the public n-gram extractors of
``sacrebleu.metrics.helpers``, matched and scored as ``CHRF(word_order=2)`` does
(sacreBLEU offers no public per-sentence chrF statistics). Both give exactly sacreBLEU's
``corpus_score`` of every resampled corpus (``tests/test_significance.py`` checks it
against that plain, slow computation). With the same seed, the interval of
:func:`compare_systems` is computed on exactly the resamples sacreBLEU's test draws.
"""

from __future__ import annotations

import contextlib
import os
import string
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.metrics.base import Metric
from sacrebleu.metrics.helpers import extract_all_char_ngrams, extract_word_ngrams
from sacrebleu.significance import PairedTest, Result

from transformer_book.inference.scoring import check_texts
from transformer_book.util.validation import require, require_int, require_number, require_one_of

__all__ = ["SIGNIFICANCE_LEVEL", "SIGNIFICANCE_METRICS", "Comparison", "bootstrap_interval",
           "compare_systems"]

#: The metrics these tests know: sacreBLEU's BLEU and chrF++ (as in :func:`score_corpus`).
SIGNIFICANCE_METRICS = ("bleu", "chrf")
#: A difference is called significant when the paired test's p-value is below this.
SIGNIFICANCE_LEVEL = 0.05
_LABELS = {"bleu": "BLEU", "chrf": "chrF++"}
_MIN_RESAMPLES = 100


@dataclass(frozen=True)
class Comparison:
    """Two systems scored on the same sentences, with a paired bootstrap of the difference.

    Fields:
        metric: ``"bleu"`` or ``"chrf"`` (chrF++).
        baseline / system: the two systems' names.
        baseline_score / system_score: their corpus scores, 0-100.
        delta: ``system_score - baseline_score``.
        interval: the 95% paired bootstrap interval of ``delta`` (2.5th and 97.5th
            percentiles of the resampled deltas).
        p_value: sacreBLEU's paired bootstrap test of "no difference" (two-sided).
        significant: ``p_value < 0.05``.
        resamples: how many resampled corpora; seed: the seed that drew them.
    """

    metric: str
    baseline: str
    system: str
    baseline_score: float
    system_score: float
    delta: float
    interval: tuple[float, float]
    p_value: float
    significant: bool
    resamples: int
    seed: int

    def __str__(self) -> str:
        low, high = self.interval
        verdict = "significant" if self.significant else "not significant"
        return (f"{self.system} vs {self.baseline}: {_LABELS[self.metric]} {self.delta:+.2f} "
                f"[95% CI {low:+.2f}, {high:+.2f}], p = {self.p_value:.3f} ({verdict})")


def _metric(metric: str) -> Metric:
    """A fresh sacreBLEU metric object: BLEU (``13a``, cased) or chrF++."""
    return BLEU() if metric == "bleu" else CHRF(word_order=2)


def _check_common(metric: str, resamples: int, seed: int) -> None:
    require_one_of(metric, "metric", SIGNIFICANCE_METRICS)
    require_int(resamples, "resamples", minimum=_MIN_RESAMPLES)
    # sacreBLEU's test treats a seed of 0 as "no seed" (fresh entropy): not reproducible.
    require_int(seed, "seed", minimum=1)


def _check_aligned(hypotheses: Sequence[str], references: list[str], argument: str
                   ) -> list[str]:
    hypotheses = check_texts(hypotheses, argument)
    require(len(hypotheses) == len(references), argument,
            f"{len(references)} sentences (one per reference)", len(hypotheses))
    return hypotheses


def _bleu_statistics(hypotheses: list[str], references: list[str]) -> np.ndarray:
    """BLEU's per-sentence statistics ``[sys_len, ref_len, matches 1-4, totals 1-4]``,
    shape ``(N, 10)``, from sacreBLEU's own ``sentence_score`` (``13a``, cased: the
    default BLEU's tokenisation; ``effective_order`` only changes how a sentence's score
    is made from them, and spares the warning for sentence-level BLEU)."""
    scorer = BLEU(effective_order=True)
    rows = []
    for hypothesis, reference in zip(hypotheses, references, strict=True):
        found = scorer.sentence_score(hypothesis, [reference])
        rows.append([found.sys_len, found.ref_len, *found.counts, *found.totals])
    return np.asarray(rows, dtype=np.float64)


#: chrF++ as ``CHRF(word_order=2)`` computes it: character 1- to 6-grams (whitespace
#: removed), word 1- and 2-grams, recall weighted β = 2 times as much as precision.
_CHAR_ORDER, _WORD_ORDER, _BETA = CHRF.CHAR_ORDER, 2, CHRF.BETA
_PUNCTUATION = frozenset(string.punctuation)


def _chrf_words(sentence: str) -> list[str]:
    """chrF++'s words: split at whitespace, one punctuation mark split off a word's end,
    or else off its start (Popović's chrF++.py, as sacreBLEU does it)."""
    words: list[str] = []
    for word in sentence.split():
        if len(word) > 1 and word[-1] in _PUNCTUATION:
            words += [word[:-1], word[-1]]
        elif len(word) > 1 and word[0] in _PUNCTUATION:
            words += [word[0], word[1:]]
        else:
            words.append(word)
    return words


def _chrf_ngrams(sentence: str) -> list[Counter]:
    """The character 1- to 6-grams and the word 1- and 2-grams of ``sentence``."""
    words = _chrf_words(sentence)
    return [*extract_all_char_ngrams(sentence, _CHAR_ORDER),
            *(extract_word_ngrams(words, n) for n in range(1, _WORD_ORDER + 1))]


def _chrf_statistics(hypotheses: list[str], references: list[str]) -> np.ndarray:
    """chrF++'s per-sentence statistics, shape ``(N, 24)``: for each of the 8 n-gram
    orders, the hypothesis's n-grams (0 when the reference has none), the reference's,
    and the matches (each n-gram counted at most as often as in the reference)."""
    rows = []
    for hypothesis, reference in zip(hypotheses, references, strict=True):
        row: list[int] = []
        for hyp, ref in zip(_chrf_ngrams(hypothesis), _chrf_ngrams(reference), strict=True):
            matches = sum(min(count, ref[gram]) for gram, count in hyp.items() if gram in ref)
            row += [sum(hyp.values()) if ref else 0, sum(ref.values()), matches]
        rows.append(row)
    return np.asarray(rows, dtype=np.float64)


def _chrf_score(totals: np.ndarray) -> float:
    """chrF++ (0-100) from summed statistics: the F-β of the precision and recall averaged
    over the orders where both sides have n-grams (sacreBLEU's default, no ε smoothing)."""
    factor = _BETA ** 2
    precision = recall = 0.0
    orders = 0
    for n_hyp, n_ref, n_match in totals.reshape(-1, 3).tolist():
        if n_hyp > 0 and n_ref > 0:
            precision += n_match / n_hyp
            recall += n_match / n_ref
            orders += 1
    if orders > 0:
        precision /= orders
        recall /= orders
    if precision + recall == 0:
        return 0.0
    score = (1 + factor) * precision * recall
    score /= (factor * precision) + recall
    return 100 * score


def _statistics(metric: str, hypotheses: list[str], references: list[str]) -> np.ndarray:
    """Per-sentence sufficient statistics, ``(N, 10)`` for BLEU, ``(N, 24)`` for chrF++."""
    return (_bleu_statistics if metric == "bleu" else _chrf_statistics)(hypotheses, references)


def _score(metric: str, totals: np.ndarray) -> float:
    """The corpus score of summed statistics ``totals`` (one row of :func:`_statistics`'s
    columns): BLEU with sacreBLEU's defaults (exponential smoothing), or chrF++."""
    if metric == "chrf":
        return _chrf_score(totals)
    sys_len, ref_len, counts = int(totals[0]), int(totals[1]), totals[2:].tolist()
    return float(BLEU.compute_bleu(correct=counts[:4], total=counts[4:], sys_len=sys_len,
                                   ref_len=ref_len, smooth_method="exp").score)


def _draws(n: int, resamples: int, seed: int) -> np.ndarray:
    """How often each sentence is drawn in each resample, ``(resamples, n)``: the same
    indices as sacreBLEU's paired test draws with the same seed."""
    indices = np.random.default_rng(seed).choice(n, size=(resamples, n), replace=True)
    flat = (indices + n * np.arange(resamples)[:, None]).ravel()
    return np.bincount(flat, minlength=resamples * n).reshape(resamples, n).astype(np.float64)


def _resampled_scores(metric: str, stats: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The corpus score of each resample, ``(resamples,)``: the statistics summed with
    each sentence counted as often as it was drawn, then scored."""
    totals = counts @ stats  # (resamples, N) @ (N, K) -> (resamples, K)
    return np.array([_score(metric, row) for row in totals])


def _percentiles(values: np.ndarray, level: float) -> tuple[float, float]:
    low, high = np.quantile(values, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return float(low), float(high)


def bootstrap_interval(
    hypotheses: Sequence[str],
    references: Sequence[str],
    metric: str = "bleu",
    resamples: int = 1000,
    seed: int = 12345,
    level: float = 0.95,
) -> tuple[float, float]:
    """A bootstrap interval of one system's corpus score.

    Args:
        hypotheses: N detokenised system outputs; references: the N references.
        metric: ``"bleu"`` (sacreBLEU's default BLEU) or ``"chrf"`` (chrF++).
        resamples: how many corpora of N sentences to draw with replacement (>= 100).
        seed: seed of the numpy generator that draws them (>= 1).
        level: the interval's coverage, in (0, 1).

    Returns:
        ``(low, high)``: the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of the
        resampled corpus scores (the percentile bootstrap).
    """
    references = check_texts(references, "references")
    hypotheses = _check_aligned(hypotheses, references, "hypotheses")
    _check_common(metric, resamples, seed)
    level = require_number(level, "level")
    require(0.0 < level < 1.0, "level", "a number between 0 and 1 (exclusive)", repr(level))
    stats = _statistics(metric, hypotheses, references)
    return _percentiles(_resampled_scores(metric, stats, _draws(len(stats), resamples, seed)),
                        level)


@contextlib.contextmanager
def _sacrebleu_seed(seed: int) -> Iterator[None]:
    """sacreBLEU's paired test reads its seed from ``$SACREBLEU_SEED`` (its documented
    setting); set it for the test, then put back what was there."""
    before = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if before is None:
            del os.environ["SACREBLEU_SEED"]
        else:
            os.environ["SACREBLEU_SEED"] = before


def _paired_p_value(metric: str, baseline: list[str], system: list[str],
                    references: list[str], resamples: int, seed: int) -> float:
    """The p-value of sacreBLEU's paired bootstrap test of ``system`` against ``baseline``."""
    with _sacrebleu_seed(seed):
        test = PairedTest([("baseline", baseline), ("system", system)],
                          {metric: _metric(metric)}, [references], test_type="bs",
                          n_samples=resamples)
    _, scores = test()
    (column,) = (results for name, results in scores.items() if name != "System")
    result = column[1]  # the system's (the baseline's comes first)
    assert isinstance(result, Result) and result.p_value is not None, (
        f"sacreBLEU's paired test gave no p-value: {result!r}")
    return float(result.p_value)


def compare_systems(
    baseline_hyps: Sequence[str],
    system_hyps: Sequence[str],
    references: Sequence[str],
    metric: str = "bleu",
    names: tuple[str, str] = ("baseline", "system"),
    resamples: int = 1000,
    seed: int = 12345,
) -> Comparison:
    """Score two systems on the same sentences; a paired bootstrap interval and test of
    their difference (Koehn, 2004).

    Args:
        baseline_hyps / system_hyps: each N detokenised outputs, aligned with ``references``.
        references: the N reference translations.
        metric: ``"bleu"`` (sacreBLEU's default BLEU) or ``"chrf"`` (chrF++).
        names: how the baseline and the system are called in the result.
        resamples: resampled corpora for the interval and the test (>= 100).
        seed: seed of both (>= 1): the same seed gives the same result.

    Returns:
        A :class:`Comparison`. When the two systems' per-sentence statistics are identical,
        every resampled delta is 0 and the p-value is 1: sacreBLEU's count of resamples
        "more extreme" than the observed 0 would otherwise give ``1 / (resamples + 1)``.
    """
    references = check_texts(references, "references")
    baseline_hyps = _check_aligned(baseline_hyps, references, "baseline_hyps")
    system_hyps = _check_aligned(system_hyps, references, "system_hyps")
    _check_common(metric, resamples, seed)
    require(isinstance(names, (tuple, list)) and len(names) == 2
            and all(isinstance(n, str) and n.strip() for n in names), "names",
            "two non-empty strings (baseline, system)", repr(names))
    base_stats = _statistics(metric, baseline_hyps, references)
    sys_stats = _statistics(metric, system_hyps, references)
    base_score, sys_score = _score(metric, base_stats.sum(0)), _score(metric, sys_stats.sum(0))
    if np.array_equal(base_stats, sys_stats):
        interval, p_value = (0.0, 0.0), 1.0
    else:
        counts = _draws(len(references), resamples, seed)
        deltas = (_resampled_scores(metric, sys_stats, counts)
                  - _resampled_scores(metric, base_stats, counts))
        interval = _percentiles(deltas, 0.95)
        p_value = _paired_p_value(metric, baseline_hyps, system_hyps, references, resamples,
                                  seed)
    return Comparison(metric, names[0], names[1], base_score, sys_score, sys_score - base_score,
                      interval, p_value, p_value < SIGNIFICANCE_LEVEL, resamples, seed)
