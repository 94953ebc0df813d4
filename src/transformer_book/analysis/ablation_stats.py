"""Verdicts for the ablations: is a change larger than the noise it is measured in?

An ablation's number moves for two reasons besides the change under test, and each has
its own test:

- **Training noise.** Another seed trains another model (other initial weights, other
  batch order). :func:`seed_change` compares the seeds of a variant with the seeds of the
  baseline: Δ = mean(variant) − mean(baseline), its standard error
  SE(Δ) = √(s_v²/n_v + s_b²/n_b) (s the standard deviation over seeds), and Welch's t-test
  (unequal variances, Welch-Satterthwaite degrees of freedom). A change is *measured* when
  the test gives p < 0.05, i.e. when the 95% interval Δ ± t·SE excludes zero. With three
  seeds a side that takes |Δ| larger than about 2.8 to 4.3 standard errors, not 2: the
  spread of three runs is itself uncertain, and Student's t pays for that.
- **Sentence noise.** Other validation sentences would give another BLEU. sacreBLEU's
  paired bootstrap test (:func:`transformer_book.inference.significance.compare_systems`)
  resamples the sentences of two trained systems' translations of the same sources.

:func:`row_verdict` combines them with the direction the paper measured (Table 3): a
perplexity change counts when the seeds' test says so, a BLEU change when the seeds' test
and the paired test (same sign) both do. :func:`verdict_rows` lays out one metric's tests and
verdicts, a row per variant; :func:`verdict_summary` writes the paragraph.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from transformer_book.analysis.ablation import PAPER_TABLE3, VariantRuns, relative_change
from transformer_book.util.validation import bad_input, require, require_number

__all__ = [
    "SEED_TEST_LEVEL",
    "VERDICT_METRICS",
    "RowVerdict",
    "SeedChange",
    "Verdict",
    "mean_sd",
    "paper_change",
    "row_verdict",
    "seed_change",
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


def _verdict(change: SeedChange, paper: float | None, precision: float, worse_is_positive: bool,
             comparison: Any = None) -> Verdict:
    if not change.tested:
        return Verdict("untested", "one seed: not tested")
    if not change.measured:
        return Verdict("noise", f"not measured (seeds: p = {change.p_value:.2f})")
    if comparison is not None and not (comparison.significant
                                       and comparison.delta * change.delta > 0):
        return Verdict("noise", f"not confirmed (paired test: p = {comparison.p_value:.2f})")
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
    """One row: the seeds' changes, the paired BLEU comparison and the two verdicts."""

    name: str
    ppl: SeedChange  # relative, %
    bleu: SeedChange  # points
    comparison: Any  # a significance.Comparison of BLEU (baseline vs variant), or None
    paper: tuple[float, float] | None  # Table 3's changes (ppl %, BLEU), or None
    ppl_verdict: Verdict
    bleu_verdict: Verdict


def row_verdict(base: VariantRuns, variant: VariantRuns, *, comparison: Any = None,
                paper_row: str | None = None, precision: tuple[float, float] = (0.2, 0.1)
                ) -> RowVerdict:
    """The verdicts of one row of the ablation.

    ``comparison``: the paired test of BLEU between the baseline's and the variant's
    translations of the same sentences (a
    :class:`~transformer_book.inference.significance.Comparison`, anything with
    ``significant``, ``delta`` and ``p_value``); without it BLEU rests on the seeds alone.
    ``paper_row``: the matching row of Table 3; ``precision``: the smallest change the paper
    can print (% perplexity, BLEU points), below which it saw "no change".
    """
    for value, argument in ((base, "base"), (variant, "variant")):
        require(isinstance(value, VariantRuns), argument, "a VariantRuns (run_ablation's)",
                type(value).__name__)
    paper = paper_change(paper_row) if paper_row is not None else None
    paper_ppl, paper_bleu = paper if paper is not None else (None, None)
    ppl = seed_change(base.val_ppl, variant.val_ppl, relative=True)
    bleu = seed_change(base.bleu, variant.bleu)
    return RowVerdict(
        variant.name, ppl, bleu, comparison, paper,
        _verdict(ppl, paper_ppl, precision[0], worse_is_positive=True),
        _verdict(bleu, paper_bleu, precision[1], worse_is_positive=False, comparison=comparison))


_GROUPS = (("agrees", "Measured, in the paper's direction"),
           ("disagrees", "Measured, against the paper's direction"),
           ("new", "Measured where the paper saw no change"),
           ("measured", "Measured (no matching row in the paper)"),
           ("noise", "Not measured: within the noise of the seeds, or not confirmed by the "
                     "paired test on the sentences"),
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
    agree = sum((v.ppl_verdict.kind == "agrees") + (v.bleu_verdict.kind == "agrees")
                for v in verdicts)
    lines.append(f"In all, {agree} of {2 * len(verdicts)} comparisons are measured changes "
                 "in the paper's direction.")
    return "\n\n".join(lines)


VERDICT_METRICS = ("perplexity", "BLEU")


def _interval(interval: Any, digits: int) -> str | None:
    """``"low to high"`` with signs, or None (no interval: one seed, or none given)."""
    if interval is None or any(math.isnan(bound) for bound in interval):
        return None
    low, high = interval
    return f"{low:+.{digits}f} to {high:+.{digits}f}"


def _p(change: SeedChange) -> str | None:
    return f"{change.p_value:.3f}" if change.tested else None


def verdict_rows(verdicts: Sequence[RowVerdict], metric: str
                 ) -> tuple[list[str], list[list[str | None]]]:
    """One metric's tests and verdicts as ``(columns, rows)``, ready for a table.

    A row per variant: the change of the mean over seeds (perplexity in % of the
    baseline's), its 95% interval and Welch's p; for ``metric="BLEU"`` also the paired
    test's BLEU difference, its 95% bootstrap interval and p (None where the verdict has no
    comparison); then the verdict in words. ``metric``: ``"perplexity"`` or ``"BLEU"``.
    Pass both to :class:`transformer_book.course.tables.Table` to show them.
    """
    require(isinstance(verdicts, Sequence) and len(verdicts) > 0, "verdicts",
            "a non-empty list of RowVerdict", repr(verdicts))
    require(metric in VERDICT_METRICS, "metric", f"one of {VERDICT_METRICS}", repr(metric))
    if metric == "perplexity":
        columns = ["variant", "Δppl (%)", "95% CI", "Welch p", "verdict"]
        return columns, [[v.name, f"{v.ppl.delta:+.1f}", _interval(v.ppl.interval, 1),
                          _p(v.ppl), str(v.ppl_verdict)] for v in verdicts]
    columns = ["variant", "ΔBLEU", "95% CI", "Welch p", "paired Δ", "paired 95% CI",
               "paired p", "verdict"]
    rows = []
    for v in verdicts:
        paired: list[str | None] = [None, None, None]
        if v.comparison is not None:
            paired = [f"{v.comparison.delta:+.2f}",
                      _interval(getattr(v.comparison, "interval", None), 2),
                      f"{v.comparison.p_value:.3f}"]
        rows.append([v.name, f"{v.bleu.delta:+.1f}", _interval(v.bleu.interval, 1),
                     _p(v.bleu), *paired, str(v.bleu_verdict)])
    return columns, rows
