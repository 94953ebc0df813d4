"""The attention figures: they draw the given weights, label them and reject bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from IPython.core.formatters import PNGFormatter
from matplotlib.figure import Figure

from transformer_book.course.figures import new_figure
from transformer_book.course.figures.attention import (
    attention_grid,
    attention_heatmap,
    draw_attention,
    regression_fits,
)
from transformer_book.util.validation import BookError

JUPYTER_PNG = PNGFormatter()  # what a notebook calls to show a cell's figure


def weights(rows: int, cols: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(rows, cols, generator=generator), dim=-1)


def tick_texts(ax, axis: str = "x") -> list[str]:
    labels = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    return [t.get_text() for t in labels]


def test_heatmap_shows_the_weights_with_labels_and_values():
    w = weights(3, 4).requires_grad_()  # a tensor with grad is detached for you
    fig = attention_heatmap(w, ["a", "b", "c", "d"], ["x", "y", "z"], "title")
    assert isinstance(fig, Figure)
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    ax, colorbar = fig.axes
    np.testing.assert_array_equal(ax.images[0].get_array(), w.detach().double().numpy())
    assert fig.get_suptitle() == "title" and ax.get_title() == ""
    assert tick_texts(ax) == ["a", "b", "c", "d"] and tick_texts(ax, "y") == ["x", "y", "z"]
    assert ax.get_xlabel() == "keys" and ax.get_ylabel() == "queries"
    assert colorbar.get_ylabel() == "attention weight"
    assert ax.images[0].get_clim() == (0.0, pytest.approx(float(w.detach().max())))
    written = [t.get_text() for t in ax.texts]
    assert written == [f"{v:.2f}" for v in w.detach().flatten().tolist()], "row by row"


def test_large_matrices_are_not_annotated_and_ticks_are_thinned():
    ax = attention_heatmap(np.full((30, 100), 0.01)).axes[0]
    assert list(ax.texts) == [], "no numbers in cells"
    assert tick_texts(ax)[:3] == ["0", "3", "6"] and len(tick_texts(ax)) <= 40
    assert list(attention_heatmap(weights(3, 3), annotate=False).axes[0].texts) == []
    few = attention_heatmap(np.full((10, 10), 0.1), x_labels=[f"k{i}" for i in range(10)],
                            max_ticks=5).axes[0]
    assert tick_texts(few) == ["k0", "k2", "k4", "k6", "k8"]


def test_heatmap_colour_scale_and_format_follow_the_arguments():
    scores = torch.tensor([[-2.0, 1.0], [0.5, 3.0]])
    ax = attention_heatmap(scores, vmin=None, fmt=".1f", xlabel="k", ylabel="q",
                           colorbar_label="score").axes[0]
    assert ax.images[0].get_clim() == (-2.0, 3.0)
    assert [t.get_text() for t in ax.texts] == ["-2.0", "1.0", "0.5", "3.0"]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("k", "q")
    assert attention_heatmap(scores, vmin=None).axes[1].get_ylabel() == "attention weight"


def test_grid_shares_one_colour_scale_and_accepts_a_3d_tensor():
    heads = torch.softmax(torch.randn(5, 4, 6, generator=torch.Generator().manual_seed(1)), -1)
    fig = attention_grid(heads, x_labels=list("abcdef"), y_labels=list("wxyz"),
                         titles=[f"head {h}" for h in range(5)], suptitle="heads", ncols=3)
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")
    assert fig.get_suptitle() == "heads"
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.images]
    assert [ax.get_title() for ax in panels] == [f"head {h}" for h in range(5)]
    for head, ax in enumerate(panels):
        np.testing.assert_array_equal(ax.images[0].get_array(), heads[head].double().numpy())
        assert tick_texts(ax) == list("abcdef") and tick_texts(ax, "y") == list("wxyz")
        assert ax.images[0].get_clim() == (0.0, pytest.approx(float(heads.max())))
    assert [ax.get_ylabel() for ax in panels] == ["queries", "", "", "queries", ""]
    assert [ax.get_xlabel() for ax in panels] == ["", "", "keys", "keys", "keys"], \
        "the lowest panel of each column"


def test_grid_takes_one_label_list_per_panel_of_different_sizes():
    first_weights, second_weights = weights(2, 3), weights(4, 5)
    fig = attention_grid([first_weights, second_weights],
                         x_labels=[["a", "b", "c"], list("vwxyz")],
                         y_labels=[["p", "q"], list("klmn")], vmin=None)
    first, second = fig.axes[:2]
    assert tick_texts(first) == ["a", "b", "c"] and tick_texts(second) == list("vwxyz")
    assert tick_texts(second, "y") == list("klmn")
    np.testing.assert_array_equal(first.images[0].get_array(), first_weights.double().numpy())
    low = float(min(first_weights.min(), second_weights.min()))
    assert first.images[0].get_clim()[0] == pytest.approx(low), "vmin=None: the smallest entry"


def test_draw_attention_composes_with_other_plots():
    fig, (left, right) = new_figure(1, 2)
    right.plot([0, 1], [1, 0])
    w = weights(2, 2)
    image = draw_attention(left, w, title="inset")
    assert left.get_title() == "inset" and image.get_clim() == (0.0, pytest.approx(float(w.max())))
    np.testing.assert_array_equal(image.get_array(), w.double().numpy())
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")


def test_regression_fits_draws_data_truth_and_each_fit():
    x = torch.linspace(0, 5, 20)
    fits = {"fit A": x.sin() * 0.9, "fit B": x.cos()}
    fig = regression_fits(x, x.sin(), x, fits, truth=x.sin(), title="fits")
    (ax,) = fig.axes
    assert ax.get_title() == "fits"
    assert ax.get_legend_handles_labels()[1] == ["training data", "truth", "fit A", "fit B"]
    curves = {line.get_label(): line.get_ydata() for line in ax.lines}
    np.testing.assert_allclose(curves["truth"], x.sin().numpy(), rtol=1e-6)
    for label, values in fits.items():
        np.testing.assert_allclose(curves[label], values.numpy(), rtol=1e-6)
    points = ax.collections[0].get_offsets()
    np.testing.assert_allclose(points, np.stack([x.numpy(), x.sin().numpy()], 1), rtol=1e-6)
    assert JUPYTER_PNG(fig).startswith(b"\x89PNG")


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
         "max_ticks: expected an integer >= 1"),
        (lambda: attention_grid([]), "weights_list: expected a non-empty sequence"),
        (lambda: attention_grid([torch.ones(2, 2)] * 2, titles=["one"]),
         "titles: expected 2 titles"),
        (lambda: attention_grid([torch.ones(2, 2)] * 2, x_labels=[["a", "b"]] * 3),
         "x_labels: expected 2 label lists"),
        (lambda: attention_grid([torch.ones(2, 2)] * 2, ncols=0), "ncols: expected an integer"),
        (lambda: attention_grid([torch.ones(2, 2), torch.ones(3)]),
         r"weights_list\[1\]: expected a non-empty 2-D"),
        (lambda: draw_attention(new_figure()[1], torch.ones(2, 2), max_ticks=1.5),
         "max_ticks: expected an integer"),
        (lambda: regression_fits([0.0, 1.0], [0.0], [0.0], {}), "y_train: expected 2 values"),
        (lambda: regression_fits([0.0], [0.0], [0.0, 1.0], {"f": [1.0]}),
         r"fits\['f'\]: expected 2 values"),
        (lambda: regression_fits([0.0], [0.0], [0.0, 1.0], {}, truth=[1.0]),
         "truth: expected 2 values"),
    ],
)
def test_bad_input_names_the_argument(call, message):
    with pytest.raises(BookError, match=message):
        call()
