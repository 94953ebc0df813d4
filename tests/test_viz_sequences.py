"""Chapter 01 figures: each draws the given sequences and lengths; bad input is named."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from IPython.core.formatters import PNGFormatter
from matplotlib.figure import Figure

from transformer_book.course.figures.sequences import (
    length_overview,
    padded_batches,
    sequence_gallery,
)
from transformer_book.util.validation import BookError

JUPYTER_PNG = PNGFormatter()  # what a notebook calls to show a cell's figure


def gallery_inputs() -> dict:
    seconds = torch.arange(400, dtype=torch.float64) / 8000
    dna = "ACGTTGCA"
    ids = torch.tensor(["ACGT".index(b) for b in dna])
    return {
        "text_tokens": ["A", "dog", "runs", "."],
        "audio": torch.sin(2 * math.pi * 50 * seconds),
        "sample_rate": 8000,
        "frame_length": 100,
        "prices": torch.linspace(100, 110, 30),
        "temperatures": torch.linspace(10, 20, 48),
        "dna": dna,
        "dna_one_hot": torch.nn.functional.one_hot(ids, num_classes=4),
    }


def test_sequence_gallery_draws_each_sequence_in_its_panel() -> None:
    inputs = gallery_inputs()
    fig = sequence_gallery(**inputs)
    assert isinstance(fig, Figure)
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    text, audio, prices, temperatures, dna = fig.axes
    assert [t.get_text() for t in text.texts] == ["A", "1", "dog", "2", "runs", "3", ".", "4"]
    assert text.get_title().startswith("text: 4 tokens")
    assert audio.get_title().startswith("audio (generated chirp): 4 frames of 100 samples (12 ms")
    np.testing.assert_allclose(audio.lines[0].get_ydata(), inputs["audio"].numpy())
    np.testing.assert_allclose(audio.lines[0].get_xdata(), np.arange(400) / 8000)
    np.testing.assert_allclose(prices.lines[0].get_ydata(), inputs["prices"].numpy(), rtol=1e-6)
    np.testing.assert_array_equal(prices.lines[0].get_xdata(), np.arange(1, 31))
    assert prices.get_title() == "prices (generated random walk): 30 days"
    np.testing.assert_allclose(temperatures.lines[0].get_ydata(), inputs["temperatures"].numpy(),
                               rtol=1e-6)
    assert list(temperatures.get_xticks()) == [0, 24, 48]
    np.testing.assert_array_equal(dna.images[0].get_array(), inputs["dna_one_hot"].numpy().T)
    assert [t.get_text() for t in dna.get_xticklabels()] == list("ACGTTGCA")
    assert [t.get_text() for t in dna.get_yticklabels()] == ["A", "C", "G", "T"]


@pytest.mark.parametrize(("change", "message"), [
    ({"dna_one_hot": torch.zeros(5, 4)}, r"dna_one_hot: expected shape \(8, 4\)"),
    ({"frame_length": 1000}, "frame_length: expected an integer >= 1 and <= 400"),
    ({"sample_rate": 8000.0}, "sample_rate: expected an integer >= 1"),
    ({"text_tokens": []}, "text_tokens: expected at least one token"),
    ({"prices": []}, "prices: expected a non-empty 1-D sequence"),
])
def test_sequence_gallery_rejects_bad_input(change, message) -> None:
    with pytest.raises(BookError, match=message):
        sequence_gallery(**{**gallery_inputs(), **change})


def test_length_overview_draws_histograms_and_length_pairs() -> None:
    src, tgt = [3, 5, 5, 9], [4, 5, 5, 8]
    fig = length_overview(src, tgt, "German", "English")
    assert isinstance(fig, Figure)
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    hist, scatter, colorbar = fig.axes
    assert hist.get_title() == "sentence lengths"
    assert [t.get_text() for t in hist.get_legend().get_texts()] == ["German", "English"]
    assert scatter.get_title() == "English length against German length"
    points = scatter.collections[0]
    assert points.get_offsets().tolist() == [[3, 4], [5, 5], [9, 8]], "each pair once"
    assert points.get_array().tolist() == [1, 2, 1], "coloured by how many pairs"
    assert colorbar.get_ylabel() == "sentence pairs"


def test_length_overview_rejects_unequal_lengths() -> None:
    with pytest.raises(BookError, match="tgt_lengths: expected 3 lengths"):
        length_overview([1, 2, 3], [1, 2])
    with pytest.raises(BookError, match="src_lengths: expected a non-empty list"):
        length_overview([], [])


@pytest.mark.parametrize(("count", "ncols"), [(1, 2), (2, 2), (3, 2), (4, 2), (3, 1)])
def test_padded_batches_one_panel_per_batch(count: int, ncols: int) -> None:
    batches = {f"batch {k}": [k + 1, 2, 3] for k in range(count)}
    fig = padded_batches(batches, ncols=ncols)
    assert isinstance(fig, Figure)
    shown = [ax for ax in fig.axes if ax.axison]  # unused grid cells are switched off
    assert [ax.get_title().split("\n")[0] for ax in shown] == list(batches)


def test_padded_batches_draw_tokens_padding_and_waste() -> None:
    fig = padded_batches({"short": [1, 3], "long": [4, 4]})
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    short, long = fig.axes
    # 2 = real token, 1 = padding, 0 = outside the batch (the grids share the widest width)
    np.testing.assert_array_equal(short.images[0].get_array(), [[2, 1, 1, 0], [2, 2, 2, 0]])
    np.testing.assert_array_equal(long.images[0].get_array(), [[2, 2, 2, 2], [2, 2, 2, 2]])
    assert short.get_title() == "short\n2 x 3 slots, 33% padding"
    assert long.get_title() == "long\n2 x 4 slots, 0% padding"
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["real token", "<pad>"]


def test_padded_batches_rejects_bad_lengths() -> None:
    with pytest.raises(BookError, match=r"batches\['b'\]: expected a non-empty list of positive"):
        padded_batches({"b": [3, 0]})
    with pytest.raises(BookError, match="batches: expected a non-empty mapping"):
        padded_batches({})
    with pytest.raises(BookError, match="ncols: expected an integer >= 1"):
        padded_batches({"b": [3]}, ncols=0)
