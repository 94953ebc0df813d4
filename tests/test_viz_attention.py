"""Smoke tests of the attention figures: they draw, label, annotate and reject bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from transformer_book.course.figures import new_figure
from transformer_book.course.figures.attention import (
    attention_grid,
    attention_heatmap,
    draw_attention,
    regression_fits,
)


def weights(rows: int, cols: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(rows, cols, generator=generator), dim=-1)


def cell_texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def test_heatmap_labels_ticks_colorbar_and_annotations():
    w = weights(3, 4).requires_grad_()  # a tensor with grad is detached for you
    fig = attention_heatmap(w, ["a", "b", "c", "d"], ["x", "y", "z"], "title")
    assert isinstance(fig, Figure)
    ax, colorbar = fig.axes
    assert fig.get_suptitle() == "title" and ax.get_title() == ""
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c", "d"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["x", "y", "z"]
    assert ax.get_xlabel() == "keys" and ax.get_ylabel() == "queries"
    assert colorbar.get_ylabel() == "attention weight"
    assert len(cell_texts(ax)) == 12, "a small matrix gets one number per cell"
    assert cell_texts(ax)[0] == f"{float(w[0, 0].detach()):.2f}"
    fig._repr_png_()  # renders


def test_large_matrices_are_not_annotated_and_ticks_are_thinned():
    fig = attention_heatmap(np.full((30, 100), 0.01))
    ax = fig.axes[0]
    assert cell_texts(ax) == []
    assert len(ax.get_xticks()) <= 40
    assert len(attention_heatmap(weights(3, 3), annotate=False).axes[0].texts) == 0
    few = attention_heatmap(np.full((10, 10), 0.1), x_labels=[f"k{i}" for i in range(10)],
                            max_ticks=5).axes[0]
    assert [t.get_text() for t in few.get_xticklabels()] == ["k0", "k2", "k4", "k6", "k8"]


def test_grid_shares_one_colour_scale_and_accepts_a_3d_tensor():
    heads = torch.softmax(torch.randn(5, 4, 6), dim=-1)
    fig = attention_grid(heads, x_labels=list("abcdef"), y_labels=list("wxyz"),
                         titles=[f"head {h}" for h in range(5)], suptitle="heads", ncols=3)
    visible = [ax for ax in fig.axes if ax.get_visible() and ax.get_title().startswith("head")]
    assert [ax.get_title() for ax in visible] == [f"head {h}" for h in range(5)]
    limits = {ax.images[0].get_clim() for ax in visible}
    assert len(limits) == 1 and limits.pop()[1] == pytest.approx(float(heads.max()))
    fig._repr_png_()


def test_grid_takes_one_label_list_per_panel_of_different_sizes():
    fig = attention_grid([weights(2, 3), weights(4, 5)], x_labels=[["a", "b", "c"], list("vwxyz")],
                         y_labels=[["p", "q"], list("klmn")])
    first, second = fig.axes[:2]
    assert [t.get_text() for t in second.get_xticklabels()] == list("vwxyz")
    assert first.images[0].get_array().shape == (2, 3)


def test_draw_attention_composes_with_other_plots():
    _, (left, right) = new_figure(1, 2)
    right.plot([0, 1], [1, 0])
    image = draw_attention(left, weights(2, 2), title="inset")
    assert left.get_title() == "inset" and image.get_clim()[0] == 0.0


def test_regression_fits_draws_data_truth_and_each_fit():
    x = torch.linspace(0, 5, 20)
    fig = regression_fits(x, x.sin(), x, {"fit A": x.sin() * 0.9, "fit B": x.cos()},
                          truth=x.sin(), title="fits")
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert labels == ["training data", "truth", "fit A", "fit B"]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: attention_heatmap(torch.ones(2, 3, 4)), "weights: expected a non-empty 2-D"),
        (lambda: attention_heatmap(torch.ones(2, 3), x_labels=["a"]),
         "x_labels: expected 3 labels"),
        (lambda: attention_heatmap(torch.ones(2, 3), y_labels=list("abc")),
         "y_labels: expected 2 labels"),
        (lambda: attention_heatmap(torch.tensor([[float("nan")]])), "weights: expected finite"),
        (lambda: attention_heatmap(torch.ones(2, 2), max_ticks=0),
         "max_ticks: expected an integer"),
        (lambda: attention_grid([]), "weights_list: expected a non-empty sequence"),
        (lambda: attention_grid([torch.ones(2, 2)] * 2, titles=["one"]),
         "titles: expected 2 titles"),
        (lambda: attention_grid([torch.ones(2, 2)] * 2, x_labels=[["a", "b"]] * 3),
         "x_labels: expected 2 label lists"),
        (lambda: regression_fits([0.0, 1.0], [0.0], [0.0], {}), "y_train: expected 2 values"),
        (lambda: regression_fits([0.0], [0.0], [0.0, 1.0], {"f": [1.0]}),
         r"fits\['f'\]: expected 2 values"),
    ],
)
def test_bad_input_names_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()
