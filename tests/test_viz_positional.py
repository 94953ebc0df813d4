"""Chapter 08's figures: they draw the given tables and curves and reject malformed data."""

from __future__ import annotations

import numpy as np
import pytest
from IPython.core.formatters import PNGFormatter
from matplotlib.figure import Figure

from transformer_book.course.figures.positional import (
    accuracy_vs_length,
    encoding_heatmap,
    offset_similarity,
)
from transformer_book.nn.positional import sinusoidal_encoding
from transformer_book.util.validation import BookError

JUPYTER_PNG = PNGFormatter()  # what a notebook calls to show a cell's figure


def test_encoding_heatmap_shows_the_table():
    pe = sinusoidal_encoding(20, 8)
    fig = encoding_heatmap(pe, title="PE")
    assert isinstance(fig, Figure)
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    heatmap, colorbar = fig.axes
    np.testing.assert_array_equal(heatmap.images[0].get_array(), pe.double().numpy())
    assert heatmap.images[0].get_clim() == (-1.0, 1.0)
    assert (heatmap.get_title(), heatmap.get_xlabel(), heatmap.get_ylabel()) == \
        ("PE", "dimension", "position")
    assert colorbar.get_ylabel() == "PE(pos, dim)"


def test_encoding_heatmap_draws_the_chosen_columns_as_curves():
    pe = sinusoidal_encoding(20, 8)
    fig = encoding_heatmap(pe, curves=[0, 3])
    curves = fig.axes[1]
    assert curves.get_title() == "Columns as curves: longer waves to the right"
    labels = [t.get_text() for t in curves.get_legend().get_texts()]
    assert labels == ["dim 0 (sin)", "dim 3 (cos)"]
    for line, column in zip(curves.lines, (0, 3), strict=True):
        np.testing.assert_allclose(line.get_ydata(), pe[:, column].numpy(), rtol=1e-6)
        np.testing.assert_array_equal(line.get_xdata(), np.arange(20))
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")


def test_offset_similarity_shows_the_gram_matrix_and_the_curves():
    pe = sinusoidal_encoding(30, 8).double()
    gram = pe @ pe.T
    fig = offset_similarity(gram, [-1, 0, 1], {"pos = 5": [1.0, 2.0, 1.0]})
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    left, right = fig.axes[:2]
    np.testing.assert_array_equal(left.images[0].get_array(), gram.numpy())
    assert left.get_title() == "PE(i) · PE(j)"
    (line,) = right.lines
    assert line.get_label() == "pos = 5"
    assert list(line.get_xdata()) == [-1, 0, 1] and list(line.get_ydata()) == [1.0, 2.0, 1.0]


def test_accuracy_vs_length_draws_lines_training_lengths_and_chance():
    fig = accuracy_vs_length([4, 8, 16], {"a": [1, 0.5, 0.2], "b": [1, 1, 1]}, train_max=8,
                             chance=0.25, title="t")
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    (ax,) = fig.axes
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert texts == ["lengths seen in training", "a", "b", "chance (0.25)"]
    curves = {line.get_label(): list(line.get_ydata()) for line in ax.lines}
    assert curves["a"] == [1, 0.5, 0.2] and curves["b"] == [1, 1, 1]
    assert curves["chance (0.25)"] == [0.25, 0.25]
    assert ax.get_title() == "t" and ax.get_xlabel() == "sequence length"


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: encoding_heatmap(np.zeros(5)), "pe: expected a non-empty 2-D array"),
        (lambda: encoding_heatmap(np.zeros((4, 4)), curves=[4]),
         "curves: expected an integer >= 0 and <= 3"),
        (lambda: encoding_heatmap(np.full((2, 2), np.nan)), "pe: expected finite values"),
        (lambda: offset_similarity(np.eye(3), [0, 1], {}), "curves: expected at least one"),
        (lambda: offset_similarity(np.eye(3), [0, 1], {"x": [1.0]}),
         r"curves\['x'\]: expected 2 values"),
        (lambda: accuracy_vs_length([4, 8], {"a": [1.0]}, train_max=4),
         r"series\['a'\]: expected 2 values"),
        (lambda: accuracy_vs_length([4], {"a": [1.0]}, train_max=None),
         "train_max: expected a finite number"),
        (lambda: accuracy_vs_length([4], {}, train_max=4), "series: expected at least one"),
    ],
)
def test_bad_data(call, match):
    with pytest.raises(BookError, match=match):
        call()


def test_accuracy_vs_position_draws_mean_band_and_live_seed():
    from transformer_book.course.figures.positional import accuracy_vs_position

    seeds = np.array([[np.nan, 0.5, 0.9, 0.2], [np.nan, 0.7, 0.8, 0.4]])
    fig = accuracy_vs_position({"learned": seeds}, train_max=2,
                               live={"learned": [np.nan, 0.5, 0.9, 0.2]}, chance=0.1)
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    ax = fig.axes[0]
    mean_line, live_line = ax.lines[0], ax.lines[1]
    np.testing.assert_allclose(mean_line.get_xdata(), [1, 2, 3])  # position 0 has no label
    np.testing.assert_allclose(mean_line.get_ydata(), [0.6, 0.85, 0.3])
    np.testing.assert_allclose(live_line.get_ydata(), [0.5, 0.9, 0.2])
    assert live_line.get_linestyle() == "--"
    assert "mean of 2 seeds" in mean_line.get_label()
    with pytest.raises(BookError, match="live: expected labels among"):
        accuracy_vs_position({"learned": seeds}, train_max=2, live={"none": seeds[0]})
