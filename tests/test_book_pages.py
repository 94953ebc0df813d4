"""The book's own pages agree with the notebooks: the landing page's map links every chapter
under its title, and the bibliography is labelled as the chapters cite it."""

from __future__ import annotations

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
    assert config["sphinx"]["local_extensions"] == {"author_year": "book/_ext"}


def test_author_year_labels_follow_the_citations_and_stay_unique():
    import importlib.util

    from pybtex.database import parse_string

    spec = importlib.util.spec_from_file_location("author_year", ROOT / "book/_ext/author_year.py")
    author_year = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(author_year)
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
