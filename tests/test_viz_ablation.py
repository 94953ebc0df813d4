"""Smoke tests of chapter 13's figure: it draws, labels and rejects bad input."""

from __future__ import annotations

import math

import pytest
from matplotlib.figure import Figure

from transformer_book.course.figures.ablation import ablation_chart


def test_ablation_chart_draws_two_labelled_panels():
    fig = ablation_chart(["h=1", "d_k=4", "no dropout"],
                         {"this run": [2.0, 1.0, -3.0], "paper": [7.5, math.nan, 17.3]},
                         {"this run": [-0.5, 0.1, 0.2], "paper": [-0.9, math.nan, -1.2]},
                         noise=(1.0, 0.4), title="Table 3")
    assert isinstance(fig, Figure)
    left, right = fig.axes
    assert "perplexity" in left.get_xlabel() and "BLEU" in right.get_xlabel()
    assert [t.get_text() for t in left.get_yticklabels()] == ["h=1", "d_k=4", "no dropout"]
    assert len(fig.legends) == 1 and len(fig.legends[0].get_texts()) == 3
    fig._repr_png_()


def test_ablation_chart_rejects_bad_input():
    with pytest.raises(ValueError, match="ppl_change"):
        ablation_chart(["a", "b"], {"x": [1.0]}, {"x": [1.0, 2.0]})
    with pytest.raises(ValueError, match="rows"):
        ablation_chart([], {"x": []}, {"x": []})
    with pytest.raises(ValueError, match="noise"):
        ablation_chart(["a"], {"x": [1.0]}, {"x": [1.0]}, noise=(-1.0, 0.0))
