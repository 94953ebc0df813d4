"""Verdicts for the ablations: is a change larger than the noise it is measured in?

An ablation's number moves for two reasons besides the change under test, and each has
its own test:

- **Training noise.** Another seed trains another model (other initial weights, other
  batch order). :func:`seed_change` compares the seeds of a variant with the seeds of the
  baseline: Δ = mean(variant) − mean(baseline), its standard error
  SE(Δ) = √(s_v²/n_v + s_b²/n_b) (s the standard deviation over seeds), and Welch's t-test
  (unequal variances, Welch-Satterthwaite degrees of freedom). With three seeds a side the
  95% interval Δ ± t·SE takes t of about 2.8 to 4.3, not 2: the spread of three runs is
  itself uncertain, and Student's t pays for that.
- **Sentence noise.** Other validation sentences would give another BLEU.
  :func:`seed_paired_bleu` resamples the sentences once for every pair of runs trained with
  the same seed (variant seed s against baseline seed s) and averages the pairs' BLEU
  differences on each resample: a paired bootstrap (Koehn, 2004) of the very Δ the seeds'
  test is about, with one sentence's translations by all the runs kept together. With one
  pair it is sacreBLEU's paired bootstrap test
  (:func:`transformer_book.inference.significance.compare_systems`).

A BLEU change must pass both tests, so its p-value is the larger of the two (an
intersection-union test: it errs no more often than either test alone). The rows of an
ablation are many tests at once: :func:`holm_bonferroni` adjusts their p-values so that the
chance of *any* false "measured" in the whole family stays below the level (Holm, 1979).
:func:`ablation_verdicts` runs the tests of every row, adjusts over the family (both metrics
of every row) and gives each row its verdicts, with the direction the paper measured
(Table 3); :func:`verdict_rows` lays out one metric's tests and verdicts, a row per variant;
:func:`verdict_summary` writes the paragraph.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from transformer_book.analysis.ablation import PAPER_TABLE3, VariantRuns, relative_change
from transformer_book.inference.scoring import check_texts
from transformer_book.inference.significance import (
    _bleu_statistics,
    _draws,
    _percentiles,
    _resampled_scores,
    _score,
)
from transformer_book.util.validation import (
    bad_input,
    is_real,
    require,
    require_int,
    require_number,
)

__all__ = [
    "SEED_TEST_LEVEL",
    "VERDICT_METRICS",
    "RowVerdict",
    "SeedChange",
    "SeedPairedBleu",
    "Verdict",
    "ablation_verdicts",
    "holm_bonferroni",
    "mean_sd",
    "paper_change",
    "row_verdict",
    "seed_change",
    "seed_paired_bleu",
    "t_critical",
    "t_two_sided_p",
    "verdict_rows",
    "verdict_summary",
]

SEED_TEST_LEVEL = 0.05  # a test's significance level: p < SEED_TEST_LEVEL counts


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """``(mean, sd)`` of the numbers: sd is the sample standard deviation (divides by
    n − 1), NaN for a single value (one run has no spread)."""
    require(isinstance(values, Sequence) and len(values) > 0, "values",
            "a non-empty sequence of numbers", repr(values))
    numbers = [float(require_number(v, "values")) for v in values]
    mean = math.fsum(numbers) / len(numbers)
    if len(numbers) == 1:
        return mean, math.nan
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in numbers) / (len(numbers) - 1))


# ------------------------------------------------------------------ Student's t


def _beta_fraction(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        for coefficient in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + coefficient * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + coefficient / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b), 0 <= x <= 1."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` (> 0, not necessarily whole) degrees of
    freedom: I_{df/(df+t²)}(df/2, 1/2)."""
    require_number(t, "t")
    require(isinstance(df, (int, float)) and df > 0, "df", "a number > 0", repr(df))
    return _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


def t_critical(df: float, level: float = 0.95) -> float:
    """The t with P(|T| >= t) = 1 − ``level``: Δ ± t·SE is the ``level`` interval."""
    require(isinstance(level, float) and 0.0 < level < 1.0, "level", "a number in (0, 1)",
            repr(level))
    t_two_sided_p(0.0, df)  # checks df
    low, high = 0.0, 1.0
    while t_two_sided_p(high, df) > 1.0 - level:
        low, high = high, 2.0 * high
    for _ in range(100):  # bisection: the tail shrinks as t grows
        middle = (low + high) / 2.0
        low, high = (middle, high) if t_two_sided_p(middle, df) > 1.0 - level else (low, middle)
    return (low + high) / 2.0


# ----------------------------------------------------------------- seed changes


@dataclass(frozen=True)
class SeedChange:
    """Δ = mean(variant) − mean(baseline) over seeds, with Welch's t-test.

    ``relative``: Δ, SE and the interval are in percent of the baseline's mean. ``se``, ``df``,
    ``p_value`` and ``interval`` are NaN when a side has a single seed (no spread, no test).
    """

    delta: float
    se: float
    df: float
    p_value: float
    interval: tuple[float, float]  # 95%: delta ± t_critical(df) · se
    n_base: int
    n_variant: int
    relative: bool = False

    @property
    def tested(self) -> bool:
        return min(self.n_base, self.n_variant) >= 2

    @property
    def measured(self) -> bool:
        """The seeds' test says the change is not noise: p < SEED_TEST_LEVEL."""
        return self.tested and self.p_value < SEED_TEST_LEVEL

    def __str__(self) -> str:
        unit = "%" if self.relative else ""
        if not self.tested:
            return f"{self.delta:+.1f}{unit} (one seed: no spread, no test)"
        low, high = self.interval
        return (f"{self.delta:+.1f}{unit} ± {self.se:.1f} [95% CI {low:+.1f}, {high:+.1f}], "
                f"Welch p = {self.p_value:.3f}")


def seed_change(base: Sequence[float], variant: Sequence[float], *,
                relative: bool = False) -> SeedChange:
    """Compare a variant's per-seed scores with the baseline's (Welch's t-test).

    ``relative=True`` reports Δ and SE(Δ) in percent of the baseline's mean (the p-value
    does not depend on the scale).
    """
    (m_b, s_b), (m_v, s_v) = mean_sd(base), mean_sd(variant)
    n_b, n_v = len(base), len(variant)
    scale = 100.0 / abs(m_b) if relative else 1.0
    require(math.isfinite(scale), "base", "a non-zero mean for a relative change", m_b)
    delta = (m_v - m_b) * scale
    if min(n_b, n_v) < 2:
        return SeedChange(delta, math.nan, math.nan, math.nan, (math.nan, math.nan), n_b, n_v,
                          relative)
    a, b = s_v**2 / n_v, s_b**2 / n_b
    if a + b == 0.0:  # no spread at all: any difference is exact
        df, se, p = float(n_b + n_v - 2), 0.0, (1.0 if delta == 0.0 else 0.0)
    else:
        df = (a + b) ** 2 / (a**2 / (n_v - 1) + b**2 / (n_b - 1))
        se = math.sqrt(a + b) * scale
        p = t_two_sided_p(delta / se, df)
    half = t_critical(df) * se
    return SeedChange(delta, se, df, p, (delta - half, delta + half), n_b, n_v, relative)


# ------------------------------------------------------------- the family of tests


def holm_bonferroni(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm, 1979), in the order given.

    Sort the m p-values, p_(1) <= ... <= p_(m); the i-th is adjusted to
    max over j <= i of min(1, (m − j + 1) · p_(j)). Calling "measured" every test whose
    adjusted p is below α keeps the chance of one or more false "measured" in the family at
    most α, whatever the dependence between the tests, and never rejects less than
    Bonferroni's min(1, m · p) does. NaN (a test that could not run, e.g. one seed) stays
    NaN and does not count in m.
    """
    require(isinstance(p_values, Sequence) and not isinstance(p_values, str), "p_values",
            "a sequence of p-values in [0, 1] (or NaN)", repr(p_values))
    for p in p_values:
        require(is_real(p) and (math.isnan(p) or 0.0 <= p <= 1.0), "p_values",
                "p-values in [0, 1] (or NaN)", repr(p))
    order = sorted((i for i, p in enumerate(p_values) if not math.isnan(p)),
                   key=lambda i: p_values[i])
    adjusted = [math.nan] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * float(p_values[i])))
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True)
class SeedPairedBleu:
    """The paired bootstrap over sentences of the mean BLEU difference of seed pairs.

    ``delta``: the mean over pairs of BLEU(variant, seed s) − BLEU(baseline, seed s), each on
    all the sentences (with the same seeds on both sides, the seeds' Δ); ``pair_deltas``
    lists them. ``interval``: its 95% percentile bootstrap interval; ``p_value``: the
    bootstrap test of "no difference" (sacreBLEU's, with one pair).
    """

    delta: float
    pair_deltas: tuple[float, ...]
    interval: tuple[float, float]
    p_value: float
    resamples: int
    seed: int

    @property
    def significant(self) -> bool:
        return self.p_value < SEED_TEST_LEVEL

    def __str__(self) -> str:
        low, high = self.interval
        return (f"{self.delta:+.2f} BLEU over {len(self.pair_deltas)} seed pair(s) "
                f"[95% CI {low:+.2f}, {high:+.2f}], p = {self.p_value:.3f}")


def seed_paired_bleu(base_translations: Sequence[Sequence[str]],
                     variant_translations: Sequence[Sequence[str]],
                     references: Sequence[str], *, resamples: int = 1000,
                     seed: int = 12345) -> SeedPairedBleu:
    """Test the mean BLEU difference of seed pairs against the noise of the sentences.

    ``base_translations[k]`` and ``variant_translations[k]``: the two runs trained with the
    k-th seed, each a translation per reference. Each of ``resamples`` resamples draws N
    sentence indices with replacement (the same draws as
    :func:`~transformer_book.inference.significance.compare_systems` with this ``seed``),
    scores every run on them and averages the pairs' differences. A sentence's translations
    by all the runs move together, so the pairs are not counted as independent samples;
    the spread of the seeds is not in this test (it is :func:`seed_change`'s). The p-value
    is sacreBLEU's paired bootstrap statistic applied to the mean: how often a resampled
    |Δ*|, shifted by the mean of the |Δ*|, exceeds the observed |Δ|, (count + 1) /
    (resamples + 1). With one pair, the interval and p-value are ``compare_systems``'.
    """
    references = check_texts(references, "references")
    require(isinstance(base_translations, Sequence) and len(base_translations) > 0
            and len(base_translations) == len(variant_translations), "variant_translations",
            f"one list of translations per seed pair, as many as base_translations "
            f"({len(base_translations)})", len(variant_translations))
    require_int(resamples, "resamples", minimum=100)
    require_int(seed, "seed", minimum=1)
    draws = _draws(len(references), resamples, seed)
    deltas, resampled = [], np.zeros(resamples)
    for k, pair in enumerate(zip(base_translations, variant_translations, strict=True)):
        sides = []
        for hypotheses, side in zip(pair, ("base_translations", "variant_translations"),
                                    strict=True):
            texts = check_texts(hypotheses, f"{side}[{k}]")
            require(len(texts) == len(references), f"{side}[{k}]",
                    f"{len(references)} translations (one per reference)", len(texts))
            stats = _bleu_statistics(texts, references)
            sides.append((_score("bleu", stats.sum(0)), _resampled_scores("bleu", stats, draws)))
        (base_score, base_resampled), (variant_score, variant_resampled) = sides
        deltas.append(float(variant_score - base_score))
        resampled += variant_resampled - base_resampled
    resampled /= len(deltas)
    delta = math.fsum(deltas) / len(deltas)
    if not resampled.any() and delta == 0.0:  # identical translations: no difference at all
        return SeedPairedBleu(delta, tuple(deltas), (0.0, 0.0), 1.0, resamples, seed)
    shifted = np.abs(resampled) - np.abs(resampled).mean()
    p_value = (int(np.sum(shifted > abs(delta))) + 1) / (resamples + 1)
    return SeedPairedBleu(delta, tuple(deltas), _percentiles(resampled, 0.95), p_value,
                          resamples, seed)


# --------------------------------------------------------------------- verdicts


@dataclass(frozen=True)
class Verdict:
    """``kind``: "agrees", "disagrees" (measured, with or against the paper's direction),
    "new" (measured, the paper saw none), "measured" (no paper row), "noise" (not measured)
    or "untested" (one seed); ``text`` says it in words."""

    kind: str
    text: str

    def __str__(self) -> str:
        return self.text


def _verdict(change: SeedChange, p_value: float, paper: float | None, precision: float,
             worse_is_positive: bool) -> Verdict:
    """The verdict of a change whose test gave ``p_value`` (adjusted for its family)."""
    if not change.tested:
        return Verdict("untested", "one seed: not tested")
    if not p_value < SEED_TEST_LEVEL:
        return Verdict("noise", f"not measured (p = {p_value:.2f})")
    effect = "hurts" if (change.delta > 0) == worse_is_positive else "helps"
    if paper is None:
        return Verdict("measured", effect)
    if abs(paper) <= precision + 1e-9:
        return Verdict("new", f"{effect}; paper: none")
    kind = "agrees" if (change.delta > 0) == (paper > 0) else "disagrees"
    return Verdict(kind, f"{kind} ({effect})")


def paper_change(row: str) -> tuple[float, float]:
    """Table 3's change of ``row`` from its base row: (perplexity in %, BLEU points)."""
    if row not in PAPER_TABLE3:
        raise bad_input("row", f"a row of PAPER_TABLE3 ({', '.join(PAPER_TABLE3)})", repr(row))
    (base_ppl, base_bleu), (ppl, bleu) = PAPER_TABLE3["base"], PAPER_TABLE3[row]
    return 100.0 * relative_change(base_ppl, ppl), bleu - base_bleu


@dataclass(frozen=True)
class RowVerdict:
    """One row: the seeds' changes, the sentence test of BLEU, the p-values and verdicts.

    ``p_values``: (perplexity, BLEU) before the family's correction: Welch's p for
    perplexity; for BLEU the larger of Welch's and the sentence test's (1 when the sentence
    test's difference has the other sign). ``adjusted``: the p-values the verdicts rest on
    (Holm-adjusted over the family in :func:`ablation_verdicts`; equal to ``p_values`` for a
    row judged alone).
    """

    name: str
    ppl: SeedChange  # relative, %
    bleu: SeedChange  # points
    comparison: Any  # the sentence test of BLEU (SeedPairedBleu or Comparison), or None
    paper: tuple[float, float] | None  # Table 3's changes (ppl %, BLEU), or None
    p_values: tuple[float, float]
    adjusted: tuple[float, float]
    ppl_verdict: Verdict
    bleu_verdict: Verdict


def _bleu_p(change: SeedChange, comparison: Any) -> float:
    """Both tests must say so, in the same direction: the larger p, or 1."""
    if comparison is None or not change.tested:
        return change.p_value
    if comparison.delta * change.delta <= 0:
        return 1.0
    return max(change.p_value, float(comparison.p_value))


def row_verdict(base: VariantRuns, variant: VariantRuns, *, comparison: Any = None,
                paper_row: str | None = None, precision: tuple[float, float] = (0.2, 0.1),
                adjusted: tuple[float, float] | None = None) -> RowVerdict:
    """The tests and verdicts of one row of the ablation.

    ``comparison``: the sentence test of BLEU between the baseline's and the variant's
    translations of the same sentences (:func:`seed_paired_bleu`'s, or anything with
    ``delta`` and ``p_value``); without it BLEU rests on the seeds alone. ``paper_row``:
    the matching row of Table 3; ``precision``: the smallest change the paper can print
    (% perplexity, BLEU points), below which it saw "no change". ``adjusted``: the
    (perplexity, BLEU) p-values corrected for the family of tests this row belongs to
    (:func:`ablation_verdicts` passes them); without them the row is judged alone.
    """
    for value, argument in ((base, "base"), (variant, "variant")):
        require(isinstance(value, VariantRuns), argument, "a VariantRuns (run_ablation's)",
                type(value).__name__)
    paper = paper_change(paper_row) if paper_row is not None else None
    paper_ppl, paper_bleu = paper if paper is not None else (None, None)
    ppl = seed_change(base.val_ppl, variant.val_ppl, relative=True)
    bleu = seed_change(base.bleu, variant.bleu)
    p_values = (ppl.p_value, _bleu_p(bleu, comparison))
    if adjusted is None:
        adjusted = p_values
    require(isinstance(adjusted, tuple) and len(adjusted) == 2, "adjusted",
            "two p-values (perplexity, BLEU)", repr(adjusted))
    return RowVerdict(
        variant.name, ppl, bleu, comparison, paper, p_values, adjusted,
        _verdict(ppl, adjusted[0], paper_ppl, precision[0], worse_is_positive=True),
        _verdict(bleu, adjusted[1], paper_bleu, precision[1], worse_is_positive=False))


def ablation_verdicts(base: VariantRuns, variants: Sequence[VariantRuns], *,
                      comparisons: Sequence[Any] | None = None,
                      paper_rows: Sequence[str | None] | None = None,
                      precision: tuple[float, float] = (0.2, 0.1)) -> list[RowVerdict]:
    """Every row's tests, corrected together, and the verdicts that follow.

    The family is every test the rows report: perplexity and BLEU of each variant, 2 · n
    p-values (a row's BLEU already combines its two tests). :func:`holm_bonferroni`
    adjusts them over the family, and each verdict reads its adjusted p. ``comparisons``
    and ``paper_rows``: one per variant (None where there is none), as in
    :func:`row_verdict`.
    """
    require(isinstance(variants, Sequence) and len(variants) > 0, "variants",
            "a non-empty list of VariantRuns", repr(variants))
    comparisons = [None] * len(variants) if comparisons is None else list(comparisons)
    paper_rows = [None] * len(variants) if paper_rows is None else list(paper_rows)
    for given, argument in ((comparisons, "comparisons"), (paper_rows, "paper_rows")):
        require(len(given) == len(variants), argument,
                f"one per variant ({len(variants)})", len(given))
    alone = [row_verdict(base, v, comparison=c, paper_row=r, precision=precision)
             for v, c, r in zip(variants, comparisons, paper_rows, strict=True)]
    adjusted = holm_bonferroni([p for row in alone for p in row.p_values])
    return [row_verdict(base, v, comparison=c, paper_row=r, precision=precision,
                        adjusted=(adjusted[2 * k], adjusted[2 * k + 1]))
            for k, (v, c, r) in enumerate(zip(variants, comparisons, paper_rows,
                                              strict=True))]


_GROUPS = (("agrees", "Measured, in the paper's direction"),
           ("disagrees", "Measured, against the paper's direction"),
           ("new", "Measured where the paper saw no change"),
           ("measured", "Measured (no matching row in the paper)"),
           ("noise", "Not measured (the adjusted p is 0.05 or more: within the noise of the "
                     "seeds or of the sentences)"),
           ("untested", "Not tested (one seed)"))


def verdict_summary(verdicts: Sequence[RowVerdict]) -> str:
    """A paragraph per kind of verdict, naming the rows and metrics in it, and a tally."""
    require(isinstance(verdicts, Sequence) and len(verdicts) > 0, "verdicts",
            "a non-empty list of RowVerdict", repr(verdicts))
    lines = []
    for kind, heading in _GROUPS:
        rows = []
        for v in verdicts:
            metrics = [m for m, verdict in (("perplexity", v.ppl_verdict),
                                            ("BLEU", v.bleu_verdict)) if verdict.kind == kind]
            if metrics:
                rows.append(f"{v.name} ({', '.join(metrics)})")
        if rows:
            lines.append(f"{heading}: {'; '.join(rows)}.")
    kinds = [k for v in verdicts for k in (v.ppl_verdict.kind, v.bleu_verdict.kind)]
    measured = sum(k in ("agrees", "disagrees", "new", "measured") for k in kinds)
    lines.append(f"In all, {measured} of {len(kinds)} comparisons are measured changes, "
                 f"{kinds.count('agrees')} of them in the paper's direction.")
    return "\n\n".join(lines)


VERDICT_METRICS = ("perplexity", "BLEU")


def _interval(interval: Any, digits: int) -> str | None:
    """``"low to high"`` with signs, or None (no interval: one seed, or none given)."""
    if interval is None or any(math.isnan(bound) for bound in interval):
        return None
    low, high = interval
    return f"{low:+.{digits}f} to {high:+.{digits}f}"


def _p(p_value: float) -> str | None:
    return None if math.isnan(p_value) else f"{p_value:.3f}"


def verdict_rows(verdicts: Sequence[RowVerdict], metric: str
                 ) -> tuple[list[str], list[list[str | None]]]:
    """One metric's tests and verdicts as ``(columns, rows)``, ready for a table.

    A row per variant: the change of the mean over seeds (perplexity in % of the
    baseline's), its 95% interval and Welch's p; for ``metric="BLEU"`` also the sentence
    test's 95% bootstrap interval and p (None where the row has none); then the p-value
    the verdict rests on (``adjusted``) and the verdict in words. ``metric``:
    ``"perplexity"`` or ``"BLEU"``. Pass both to
    :class:`transformer_book.course.tables.Table` to show them.
    """
    require(isinstance(verdicts, Sequence) and len(verdicts) > 0, "verdicts",
            "a non-empty list of RowVerdict", repr(verdicts))
    require(metric in VERDICT_METRICS, "metric", f"one of {VERDICT_METRICS}", repr(metric))
    if metric == "perplexity":
        columns = ["variant", "Δppl (%)", "95% CI", "Welch p", "adjusted p", "verdict"]
        return columns, [[v.name, f"{v.ppl.delta:+.1f}", _interval(v.ppl.interval, 1),
                          _p(v.ppl.p_value), _p(v.adjusted[0]), str(v.ppl_verdict)]
                         for v in verdicts]
    columns = ["variant", "ΔBLEU", "95% CI", "Welch p", "sentences 95% CI", "sentences p",
               "adjusted p", "verdict"]
    rows = []
    for v in verdicts:
        sentences: list[str | None] = [None, None]
        if v.comparison is not None:
            sentences = [_interval(getattr(v.comparison, "interval", None), 2),
                         f"{v.comparison.p_value:.3f}"]
        rows.append([v.name, f"{v.bleu.delta:+.2f}", _interval(v.bleu.interval, 1),
                     _p(v.bleu.p_value), *sentences, _p(v.adjusted[1]), str(v.bleu_verdict)])
    return columns, rows
