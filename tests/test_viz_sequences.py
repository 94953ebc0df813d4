"""Chapter 01 figures: each returns a Figure with the expected axes; bad input is named."""

from __future__ import annotations

import math

import pytest
import torch
from matplotlib.figure import Figure

from transformer_book.course.figures.sequences import (
    length_overview,
    padded_batches,
    sequence_gallery,
)


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


def test_sequence_gallery_has_five_panels() -> None:
    fig = sequence_gallery(**gallery_inputs())
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 5
    assert fig._repr_png_().startswith(b"\x89PNG")


def test_sequence_gallery_rejects_mismatched_one_hot() -> None:
    inputs = gallery_inputs()
    inputs["dna_one_hot"] = inputs["dna_one_hot"][:5]
    with pytest.raises(ValueError, match=r"dna_one_hot: expected shape \(8, 4\)"):
        sequence_gallery(**inputs)


def test_sequence_gallery_rejects_long_frames() -> None:
    inputs = gallery_inputs()
    inputs["frame_length"] = 1000
    with pytest.raises(ValueError, match=r"frame_length: expected an integer in \[1, 400\]"):
        sequence_gallery(**inputs)


def test_length_overview_has_histogram_scatter_and_colorbar() -> None:
    fig = length_overview([3, 5, 5, 9], [4, 5, 6, 8], "German", "English")
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 3  # histograms, scatter, colour bar


def test_length_overview_rejects_unequal_lengths() -> None:
    with pytest.raises(ValueError, match="tgt_lengths: expected 3 lengths"):
        length_overview([1, 2, 3], [1, 2])


@pytest.mark.parametrize(("count", "ncols"), [(1, 2), (2, 2), (3, 2), (4, 2), (3, 1)])
def test_padded_batches_one_panel_per_batch(count: int, ncols: int) -> None:
    batches = {f"batch {k}": [k + 1, 2, 3] for k in range(count)}
    fig = padded_batches(batches, ncols=ncols)
    assert isinstance(fig, Figure)
    assert sum(ax.axison for ax in fig.axes) == count  # unused grid cells are switched off


def test_padded_batches_rejects_bad_lengths() -> None:
    with pytest.raises(ValueError, match=r"batches\['b'\]: expected a non-empty list of positive"):
        padded_batches({"b": [3, 0]})
    with pytest.raises(ValueError, match="batches: expected a non-empty mapping"):
        padded_batches({})
