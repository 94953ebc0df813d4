"""Tables of results: the same rows as HTML for the book and as aligned text for nbval."""

from __future__ import annotations

import html.parser

import pytest

from transformer_book.course.tables import Table, format_cell


class _Cells(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.rows, self.classes, self._in_cell = [], [], False

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        if tag in ("td", "th"):
            self._in_cell = True
            self.rows[-1].append("")
            self.classes.append(dict(attrs).get("class"))

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._in_cell = False

    def handle_data(self, data):
        if self._in_cell:
            self.rows[-1][-1] += data


def test_html_and_text_hold_the_same_cells():
    table = Table(["system", "BLEU", "sentences"],
                  [["greedy", 35.123, 1014], ["beam 4 <α 0.6>", 36.4, 1014]],
                  caption="val", notes=["nrefs:1|case:mixed|eff:no|tok:13a"])
    parsed = _Cells()
    parsed.feed(table._repr_html_())
    assert parsed.rows == [["system", "BLEU", "sentences"], ["greedy", "35.12", "1,014"],
                           ["beam 4 <α 0.6>", "36.40", "1,014"]]
    assert "&lt;α 0.6&gt;" in table._repr_html_(), "cell text is escaped"
    text = str(table).splitlines()
    assert text[0] == "val" and text[-1] == "nrefs:1|case:mixed|eff:no|tok:13a"
    assert text[1].split() == ["system", "BLEU", "sentences"]
    assert text[3].split() == ["greedy", "35.12", "1,014"]
    assert repr(table) == str(table) and len(table) == 2


def test_numeric_columns_are_right_aligned_in_both_forms():
    table = Table(["name", "score"], [["a", 1.5], ["long name", 22.25]])
    lines = str(table).splitlines()
    assert lines[2].endswith(" 1.50") and lines[3].endswith("22.25")
    assert lines[2].index("1.50") > lines[3].index("22.25")
    parsed = _Cells()
    parsed.feed(table._repr_html_())
    assert parsed.classes == [None, "tb-num"] * 3
    assert '<div class="tb-table-wrap">' in table._repr_html_(), "wide tables scroll in a box"


def test_cells_are_formatted_once_and_consistently():
    assert [format_cell(v) for v in (None, True, 12345, 0.5, "x")] == [
        "–", "yes", "12,345", "0.50", "x"]
    assert format_cell(3.14159, digits=3) == "3.142"


def test_a_row_of_the_wrong_length_is_refused_with_its_index():
    expected = r"rows\[1\]: expected 2 cells, one per column, received 3 cells"
    with pytest.raises(ValueError, match=expected):
        Table(["a", "b"], [[1, 2], [1, 2, 3]])
    with pytest.raises(ValueError, match="columns"):
        Table([], [])
