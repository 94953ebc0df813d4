"""What the book shows from each notebook fits its column, describes its figures and does not
depend on the machine that ran it.

The book's code cells fit 88 characters at 1,400 px (notebooks/ruff.toml keeps the code to
it; scripts/book_browser.py fails if a cell scrolls), so every stored line of text output
keeps to 88 characters too; results wider than that are tables (transformer_book.course.tables),
shown as HTML. Every figure carries an alt text in its cell's ``mystnb.image.alt``.
"""

from __future__ import annotations

import re

import pytest
from notebook_utils import NOTEBOOKS, read, tags

WIDTH = 88
# Absolute paths, the user's cache and words that only make sense on the machine that ran it.
MACHINE_SPECIFIC = re.compile(
    r"(?<![\w.])/(?:root|home|Users|work|tmp|var|opt|content)/|~/\.cache|\.cache/transformer_book"
    r"|found in the cache|[A-Z]:\\\\"
)
FILE_NAME = re.compile(r"\.(png|jpe?g|svg|gif)$", re.IGNORECASE)


def shown_text(cell) -> list[str]:
    """The lines of text the book shows for ``cell``: streams, and plain results that have no
    HTML form (a result with HTML is shown as HTML)."""
    if "remove-output" in tags(cell) or "remove-cell" in tags(cell):
        return []
    lines = []
    for output in cell.get("outputs", []):
        if output.output_type == "stream":
            lines += output.text.splitlines()
        elif "data" in output and "text/html" not in output.data:
            lines += output.data.get("text/plain", "").splitlines()
    return lines


def code_cells(path):
    return [cell for cell in read(path).cells if cell.cell_type == "code"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_text_outputs_fit_the_column(path):
    wide = [(cell.get("id"), line) for cell in code_cells(path) for line in shown_text(cell)
            if len(line) > WIDTH]
    assert not wide, (
        f"{path.name}: {len(wide)} output lines wider than {WIDTH} characters, the first in "
        f"cell {wide[0][0] if wide else ''}: {wide[0][1] if wide else ''!r}"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_figure_has_an_alt_text(path):
    for cell in code_cells(path):
        if not any("image/png" in o.get("data", {}) or "image/svg+xml" in o.get("data", {})
                   for o in cell.get("outputs", [])):
            continue
        alt = cell.metadata.get("mystnb", {}).get("image", {}).get("alt", "")
        assert len(alt.split()) >= 5 and not FILE_NAME.search(alt), (
            f"{path.name}, cell {cell.get('id')}: a figure needs a real alt text in its "
            f"metadata mystnb.image.alt, got {alt!r}"
        )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_outputs_do_not_show_the_machine_that_ran_them(path):
    for cell in code_cells(path):
        for line in shown_text(cell):
            assert not MACHINE_SPECIFIC.search(line), (
                f"{path.name}, cell {cell.get('id')}: an output shows where the book was "
                f"built: {line!r}"
            )


def test_the_machine_pattern_catches_what_it_must():
    for line in ("run folder: /root/.cache/transformer_book/course/ch10-941491606f2b",
                 "--out /work/main/runs/small", "found in the cache: ch10-1", "~/.cache/x"):
        assert MACHINE_SPECIFIC.search(line), line
    for line in ("results/engines.json", "runs/small", "val loss 3.113", "1/√d_k"):
        assert not MACHINE_SPECIFIC.search(line), line
