"""Chapter 13's figure: it draws the given changes and their error bars, labels them and
rejects bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from IPython.core.formatters import PNGFormatter
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure

from transformer_book.course.figures.ablation import ablation_chart
from transformer_book.util.validation import BookError

JUPYTER_PNG = PNGFormatter()  # what a notebook calls to show a cell's figure


def bar_lengths(ax, label: str) -> list[float]:
    (bars,) = [c for c in ax.containers if c.get_label() == label]
    return [patch.get_width() for patch in bars]


def test_ablation_chart_draws_each_series_as_bars_per_row():
    fig = ablation_chart(["h=1", "d_k=4", "no dropout"],
                         {"this run": [2.0, 1.0, -3.0], "paper": [7.5, math.nan, 17.3]},
                         {"this run": [-0.5, 0.1, 0.2], "paper": [-0.9, math.nan, -1.2]},
                         noise=(1.0, 0.4), title="Table 3")
    assert isinstance(fig, Figure)
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    left, right = fig.axes
    assert fig.get_suptitle() == "Table 3"
    assert "perplexity" in left.get_xlabel() and "BLEU" in right.get_xlabel()
    assert [t.get_text() for t in left.get_yticklabels()] == ["h=1", "d_k=4", "no dropout"]
    assert bar_lengths(left, "this run") == [2.0, 1.0, -3.0]
    assert bar_lengths(left, "paper") == [7.5, 0.0, 17.3], "NaN (no such row) draws nothing"
    assert bar_lengths(right, "this run") == [-0.5, 0.1, 0.2]
    legend = {t.get_text() for t in fig.legends[0].get_texts()}
    assert legend == {"this run", "paper", "seed-to-seed spread of the baseline"}


def test_ablation_chart_draws_error_bars_for_the_series_given():
    fig = ablation_chart(["h=1", "no dropout"],
                         {"this run": [2.0, -3.0], "paper": [7.5, 17.3]},
                         {"this run": [-0.5, 0.2], "paper": [-0.9, -1.2]},
                         ppl_error={"this run": [1.5, math.nan]},
                         bleu_error={"this run": [0.25, 0.5]})
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    left, right = fig.axes
    (left_bars,) = [c for c in left.containers if isinstance(c, ErrorbarContainer)]
    (right_bars,) = [c for c in right.containers if isinstance(c, ErrorbarContainer)]
    _, _, (right_lines,) = right_bars.lines
    spans = [sorted(x for x, _ in segment) for segment in right_lines.get_segments()]
    # Each error bar is centred on its bar's end: -0.5 ± 0.25 and 0.2 ± 0.5.
    assert spans == [pytest.approx([-0.75, -0.25]), pytest.approx([-0.3, 0.7])]
    _, _, (left_lines,) = left_bars.lines
    finite = [s for s in left_lines.get_segments() if len(s) and np.isfinite(s).all()]
    assert [sorted(x for x, _ in s) for s in finite] == [pytest.approx([0.5, 3.5])], "NaN: none"
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["this run", "paper", "95% interval over seeds"]


def test_ablation_chart_first_row_on_top():
    fig = ablation_chart(["a", "b"], {"x": [1.0, 2.0]}, {"x": [0.0, 0.0]})
    left = fig.axes[0]
    (bars,) = left.containers
    assert bars[0].get_y() > bars[1].get_y()
    assert fig.get_suptitle() == ""
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["x"], "no noise band"


@pytest.mark.parametrize(("call", "message"), [
    (lambda: ablation_chart(["a", "b"], {"x": [1.0]}, {"x": [1.0, 2.0]}),
     r"ppl_change\['x'\]: expected 2 values"),
    (lambda: ablation_chart(["a"], {"x": [1.0]}, {"x": [math.inf]}),
     r"bleu_change\['x'\]: expected finite values or NaN"),
    (lambda: ablation_chart(["a"], {}, {"x": [1.0]}), "ppl_change: expected a non-empty mapping"),
    (lambda: ablation_chart([], {"x": []}, {"x": []}), "rows: expected at least one row name"),
    (lambda: ablation_chart(["a"], {"x": [1.0]}, {"x": [1.0]}, noise=(-1.0, 0.0)),
     "noise: expected a finite number >= 0"),
    (lambda: ablation_chart(["a"], {"x": [1.0]}, {"x": [1.0]}, noise=(1.0,)),
     r"noise: expected \(ppl_percent, bleu_points\)"),
    (lambda: ablation_chart(["a"], {"x": [1.0]}, {"x": [1.0]}, bleu_error={"y": [1.0]}),
     r"bleu_error: expected labels among the series \['x'\], received 'y'"),
    (lambda: ablation_chart(["a"], {"x": [1.0]}, {"x": [1.0]}, ppl_error={"x": [-1.0]}),
     r"ppl_error\['x'\]: expected half-widths >= 0 \(or NaN\)"),
    (lambda: ablation_chart(["a", "b"], {"x": [1.0, 2.0]}, {"x": [1.0, 2.0]},
                            ppl_error={"x": [1.0]}),
     r"ppl_error\['x'\]: expected 2 values"),
])
def test_ablation_chart_rejects_bad_input(call, message):
    with pytest.raises(BookError, match=message):
        call()
