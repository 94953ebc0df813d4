"""Tables of results for the book, in one style: HTML in the book, aligned text elsewhere.

A chapter that reports several runs or scores ends its cell with a :class:`Table`.
Jupyter (and the book) show its HTML: a real ``<table>`` that fits the text column, scrolls
inside its own box when it cannot, and keeps every BLEU value and signature readable on a
phone. ``print(table)`` and ``repr(table)`` give the same rows as aligned plain text, which
is what a terminal, a test or ``pytest --nbval`` sees.

    Table(["run", "BLEU"], [["greedy", "35.1"], ["beam 4", "36.5"]],
          caption="val, 1,014 sentences", notes=["signature: nrefs:1|case:mixed|..."])
"""

from __future__ import annotations

import html
import numbers
from collections.abc import Sequence
from typing import Any

from transformer_book.util.validation import bad_input, require

__all__ = ["Table", "format_cell"]


def format_cell(value: Any, digits: int = 2) -> str:
    """``value`` as the table shows it: floats with ``digits`` decimals, ints with commas."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, numbers.Integral):
        return f"{int(value):,}"
    if isinstance(value, numbers.Real):
        return f"{float(value):,.{digits}f}"
    return str(value)


def _is_number(text: str) -> bool:
    stripped = text.replace(",", "").replace("%", "").replace("×", "").strip("+−- ")
    try:
        float(stripped.split(" ")[0])
    except ValueError:
        return False
    return True


class Table:
    """Rows under named columns, shown as HTML in notebooks and as text by ``str``.

    Args:
        columns: the column headings.
        rows: one sequence per row, as long as ``columns``; numbers are formatted by
            :func:`format_cell` with ``digits``, anything else by ``str``.
        caption: one line above the table (what was measured, on which split).
        notes: lines under the table (signatures, footnotes), shown in full, wrapped.
        digits: decimals for float cells.
    """

    def __init__(self, columns: Sequence[str], rows: Sequence[Sequence[Any]], *,
                 caption: str | None = None, notes: Sequence[str] = (), digits: int = 2):
        require(len(columns) > 0, "columns", "at least one column heading", "none")
        self.columns = [str(c) for c in columns]
        self.rows: list[list[str]] = []
        for index, row in enumerate(rows):
            if len(row) != len(self.columns):
                raise bad_input(f"rows[{index}]", f"{len(self.columns)} cells, one per column",
                           f"{len(row)} cells")
            self.rows.append([format_cell(value, digits) for value in row])
        self.caption = caption
        self.notes = [str(note) for note in notes]
        self._numeric = [
            bool(self.rows) and all(_is_number(row[j]) or row[j] == "–" for row in self.rows)
            for j in range(len(self.columns))
        ]

    def __len__(self) -> int:
        return len(self.rows)

    def __str__(self) -> str:
        widths = [max([len(self.columns[j])] + [len(row[j]) for row in self.rows])
                  for j in range(len(self.columns))]

        def line(cells: Sequence[str]) -> str:
            return "  ".join(cell.rjust(w) if numeric else cell.ljust(w)
                             for cell, w, numeric in zip(cells, widths, self._numeric,
                                                         strict=True)).rstrip()

        lines = [self.caption] if self.caption else []
        lines += [line(self.columns), "  ".join("-" * w for w in widths)]
        lines += [line(row) for row in self.rows]
        lines += self.notes
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        def cell(tag: str, text: str, numeric: bool) -> str:
            klass = ' class="tb-num"' if numeric else ""
            return f"<{tag}{klass}>{html.escape(text)}</{tag}>"

        head = "".join(cell("th", c, n) for c, n in zip(self.columns, self._numeric,
                                                        strict=True))
        body = "".join(
            "<tr>" + "".join(cell("td", c, n) for c, n in zip(row, self._numeric,
                                                              strict=True)) + "</tr>"
            for row in self.rows
        )
        caption = f"<caption>{html.escape(self.caption)}</caption>" if self.caption else ""
        notes = "".join(f'<p class="tb-note">{html.escape(n)}</p>' for n in self.notes)
        return (f'<div class="tb-table-wrap"><table class="tb-table">{caption}'
                f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{notes}</div>")
