"""figures.seeds: every seed, the mean, the spread and the live seed are drawn."""

from __future__ import annotations

import numpy as np
import pytest
from IPython.core.formatters import PNGFormatter
from matplotlib.collections import PathCollection

from transformer_book.course.figures.seeds import seed_points
from transformer_book.util.validation import BookError


def test_seed_points_draws_means_ranges_seeds_and_the_live_seed():
    runs = {"1 hop": [0.36, 0.43, 0.45], "2 hops": [1.0, 0.99, 1.0]}
    fig = seed_points(runs, live={"2 hops": 0.995}, chance=1 / 6, ylabel="accuracy",
                      title="hops")
    assert PNGFormatter()(fig).startswith(b"\x89PNG")
    ax = fig.axes[0]
    heights = [bar.get_height() for bar in ax.patches]
    np.testing.assert_allclose(heights, [np.mean(v) for v in runs.values()])
    ranges = [segments[0] for segments in (c.get_segments() for c in ax.collections
                                           if hasattr(c, "get_segments") and c.get_segments())]
    assert [tuple(r[:, 1]) for r in ranges] == [(0.36, 0.45), (0.99, 1.0)]
    points = [c.get_offsets() for c in ax.collections if isinstance(c, PathCollection)]
    seeds = np.concatenate([p[:, 1] for p in points[:-1]])
    assert sorted(seeds) == sorted(runs["1 hop"] + runs["2 hops"])
    assert tuple(points[-1][0]) == pytest.approx((1.22, 0.995))
    assert [t.get_text() for t in ax.get_xticklabels()] == list(runs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"runs": {}}, "runs: expected at least one group"),
     ({"runs": {"a": [1.0]}, "live": {"b": 1.0}}, "live: expected labels among")],
)
def test_seed_points_rejects_bad_input(kwargs, match):
    with pytest.raises(BookError, match=match):
        seed_points(**kwargs)
