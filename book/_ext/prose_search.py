"""Search finds the book's prose, not its code cells.

Sphinx indexes every word of a page, so the source of a collapsed setup cell
(``from transformer_book.util.env import ...``) made a chapter a search hit, with an excerpt
of code. This extension gives the search indexer each page without its notebook code cells
(inputs and outputs; the page itself keeps them), and a script (``EXCERPTS``) takes the same
cells out of the text that the search page quotes as each hit's excerpt.
"""

from __future__ import annotations

from docutils import nodes

# MyST-NB's container of one code cell: its source and its outputs
CODE_CELL = "cell_code"

# Sphinx's searchtools.js quotes an excerpt of ``Search.htmlToText(page)``: the same text
# without the code cells (their HTML classes ``cell_input`` and ``cell_output``).
EXCERPTS = """
(() => {
  const amend = () => {
    if (typeof Search === "undefined" || Search.htmlToText.prose) return;
    const htmlToText = Search.htmlToText;
    Search.htmlToText = (htmlString, anchor) => {
      const page = new DOMParser().parseFromString(htmlString, "text/html");
      page.querySelectorAll("div.cell_input, div.cell_output").forEach((c) => c.remove());
      return htmlToText(page.documentElement.outerHTML, anchor);
    };
    Search.htmlToText.prose = true;
  };
  amend();
  document.addEventListener("DOMContentLoaded", amend);
})();
"""


def prose_only(doctree: nodes.document) -> nodes.document:
    """A copy of ``doctree`` without its notebook code cells."""
    copy = doctree.deepcopy()
    for cell in list(copy.findall(nodes.container)):
        if cell.get("nb_element") == CODE_CELL and cell.parent is not None:
            cell.parent.remove(cell)
    return copy


def _index_prose(app) -> None:
    builder = app.builder
    index_page = getattr(builder, "index_page", None)
    if index_page is None:  # not an HTML builder: nothing is indexed
        return

    def index_prose(pagename, doctree, title):
        index_page(pagename, prose_only(doctree), title)

    builder.index_page = index_prose


def setup(app):
    app.connect("builder-inited", _index_prose)
    # after searchtools.js (priority 500), which it amends
    app.add_js_file(None, body=EXCERPTS, priority=600)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
