"""The book's own pages agree with the notebooks: the landing page's map links every chapter
under its title, "Next" on the landing page opens chapter 00, the bibliography is labelled
as the chapters cite it, and the book's Sphinx extensions (book/_ext) serve the Colab badge
locally, index prose for search and keep each inline script once."""

from __future__ import annotations

import importlib.util
import re

import yaml
from notebook_utils import NOTEBOOKS, ROOT, read

PREFACE = ROOT / "book" / "preface.md"


def test_the_map_links_every_chapter_under_its_title_in_toc_order():
    linked = re.findall(r"^- \[(.+?)\]\(\.\./notebooks/(\d\d_\w+)\.ipynb\)$",
                        PREFACE.read_text(), re.MULTILINE)
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    in_toc = [c["file"].removeprefix("notebooks/") for part in toc["parts"]
              for c in part["chapters"] if c["file"].startswith("notebooks/")]
    assert [stem for _, stem in linked] == in_toc == [p.stem for p in NOTEBOOKS]
    for title, stem in linked:
        heading = read(ROOT / "notebooks" / f"{stem}.ipynb").cells[0].source.splitlines()[0]
        assert heading == f"# {title}", f"the map calls {stem} {title!r}, the chapter {heading!r}"


def test_the_map_has_one_card_per_part_with_its_question():
    text = PREFACE.read_text()
    cards = re.findall(r"^:::\{grid-item-card\} (Part [IV]+ — .+)\n\*(.+\?)\*$", text, re.MULTILINE)
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    parts = [p["caption"] for p in toc["parts"] if p["caption"].startswith("Part")]
    assert [title for title, _ in cards] == parts


def test_the_bibliography_uses_the_author_year_style():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    sphinx = config["sphinx"]["config"]
    assert sphinx["bibtex_reference_style"] == "author_year"
    assert sphinx["bibtex_default_style"] == "plain_author_year"
    assert config["sphinx"]["local_extensions"]["author_year"] == "book/_ext"


def extension(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "book" / "_ext" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_author_year_labels_follow_the_citations_and_stay_unique():
    from pybtex.database import parse_string

    author_year = extension("author_year")
    bib = parse_string("""
        @article{a, author = {Ashish Vaswani and Noam Shazeer and Niki Parmar}, year = 2017}
        @article{b, author = {Rico Sennrich and Barry Haddow}, year = 2016}
        @article{c, author = {Matt Post}, year = 2018}
        @article{d, author = {Vaswani, Ashish and Others, Some and Third, A}, year = 2017}
        @misc{e, author = {{NVIDIA}}, year = 2024}
    """, "bibtex")
    labels = list(author_year.AuthorYearLabels().format_labels(bib.entries.values()))
    assert labels == ["Vaswani et al., 2017a", "Sennrich and Haddow, 2016", "Post, 2018",
                      "Vaswani et al., 2017b", "NVIDIA, 2024"]


def test_next_from_the_landing_page_is_chapter_00_under_getting_started():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    assert toc["root"] == "book/preface"
    first = toc["parts"][0]
    assert first["caption"] == "Getting started"
    assert first["chapters"][0]["file"] == "notebooks/00_how_to_use"
    files = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    assert files.index("book/instructors") > files.index("notebooks/13_ablations")


def test_the_book_asks_no_other_host_for_its_badge_or_widgets():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["sphinx"]["local_extensions"] == {
        name: "book/_ext" for name in ("author_year", "colab_badge", "prose_search",
                                       "script_once")}
    assert config["sphinx"]["config"]["nb_ipywidgets_js"] == {}
    colab_badge = extension("colab_badge")
    badge = ROOT / colab_badge.LOCAL_BADGE.lstrip("/")
    assert badge.is_file() and badge.read_text().lstrip().startswith("<svg")
    sync = (ROOT / "scripts" / "sync_notebooks.py").read_text()
    assert f'BADGE_IMAGE = "{colab_badge.REMOTE_BADGE}"' in sync


def test_the_colab_badge_image_is_pointed_at_the_books_copy():
    from docutils import nodes
    from docutils.frontend import get_default_settings
    from docutils.utils import new_document

    colab_badge = extension("colab_badge")
    document = new_document("page", get_default_settings())
    document += nodes.image(uri=colab_badge.REMOTE_BADGE, alt="Open In Colab")
    document += nodes.image(uri="figure.png", alt="a figure")
    transform = colab_badge.LocalColabBadge.__new__(colab_badge.LocalColabBadge)
    transform.document = document
    transform.apply()
    assert [image["uri"] for image in document.findall(nodes.image)] == [
        "/_static/colab-badge.svg", "figure.png"]


def test_search_indexes_a_page_without_its_code_cells():
    from docutils import nodes
    from docutils.frontend import get_default_settings
    from docutils.utils import new_document

    prose_search = extension("prose_search")
    document = new_document("page", get_default_settings())
    document += nodes.paragraph(text="Attention averages the values.")
    cell = nodes.container(nb_element="cell_code", classes=["cell"])
    cell += nodes.container("", nodes.literal_block(text="from transformer_book.util.env "
                                                         "import get_device"),
                            nb_element="cell_code_source")
    document += cell
    indexed = prose_search.prose_only(document)
    assert indexed.astext() == "Attention averages the values."
    assert "get_device" in document.astext()  # the page itself keeps its code


def test_an_inline_script_repeated_on_a_page_is_kept_once():
    from sphinx.builders.html._assets import _JavaScript

    script_once = extension("script_once")
    thebe = 'const THEBE_JS_URL = "..."'
    context = {"script_files": [_JavaScript(None, body=thebe), _JavaScript("doctools.js"),
                                _JavaScript("", body=thebe)]}
    script_once._once(None, "page", "page.html", context, None)
    assert [(js.filename, js.attributes.get("body")) for js in context["script_files"]] == [
        (None, thebe), ("doctools.js", None)]
