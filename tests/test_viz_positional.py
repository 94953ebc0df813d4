"""Chapter 08's figures: they draw what they are given and reject malformed data."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.figure import Figure

from transformer_book.course.figures.positional import (
    accuracy_vs_length,
    encoding_heatmap,
    offset_similarity,
)
from transformer_book.nn.positional import sinusoidal_encoding


def test_encoding_heatmap_with_and_without_curves():
    pe = sinusoidal_encoding(20, 8)
    fig = encoding_heatmap(pe)
    assert isinstance(fig, Figure) and len(fig.axes) == 2  # heatmap + colour bar
    fig = encoding_heatmap(pe, curves=[0, 3])
    assert len(fig.axes) == 3
    labels = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert labels == ["dim 0 (sin)", "dim 3 (cos)"]
    fig._repr_png_()  # renders


def test_offset_similarity_and_accuracy_vs_length():
    pe = sinusoidal_encoding(30, 8).double()
    fig = offset_similarity(pe @ pe.T, [-1, 0, 1], {"pos = 5": [1.0, 2.0, 1.0]})
    assert len(fig.axes) == 3
    fig = accuracy_vs_length([4, 8, 16], {"a": [1, 0.5, 0.2], "b": [1, 1, 1]}, train_max=8,
                             chance=0.25)
    texts = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert texts == ["lengths seen in training", "a", "b", "chance (0.25)"]
    fig._repr_png_()


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: encoding_heatmap(np.zeros(5)), "pe: expected a non-empty 2-D array"),
        (lambda: encoding_heatmap(np.zeros((4, 4)), curves=[4]), "curves: expected dimension"),
        (lambda: encoding_heatmap(np.full((2, 2), np.nan)), "pe: expected finite values"),
        (lambda: offset_similarity(np.eye(3), [0, 1], {}), "curves: expected at least one"),
        (lambda: offset_similarity(np.eye(3), [0, 1], {"x": [1.0]}), "expected 2 values"),
        (lambda: accuracy_vs_length([4, 8], {"a": [1.0]}, train_max=4), "expected 2 values"),
        (lambda: accuracy_vs_length([4], {"a": [1.0]}, train_max=None), "train_max: expected"),
    ],
)
def test_bad_data(call, match):
    with pytest.raises(ValueError, match=match):
        call()
