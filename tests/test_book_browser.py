"""The browser check (scripts/book_browser.py) finds what a reader would see wrong.

Each tiny book in tests/fixtures/browser_books is built with jupyter-book and read in
headless Chromium: the clean one passes, and each broken one is caught for its defect. The
chapter checks (diagram first, the first visible code cell's length, the prose's length),
the caption contrast in both themes and the offline rules are shown failing and passing on
small hand-written pages laid out as the book's (MyST-NB's cells in the theme's article).
The real book is checked by `make browser` (part of `make test`), after `make book`.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "browser_books"
SCRIPT = REPO / "scripts" / "book_browser.py"

spec = importlib.util.spec_from_file_location("book_browser", SCRIPT)
book_browser = importlib.util.module_from_spec(spec)
sys.modules["book_browser"] = book_browser  # dataclasses look their module up
spec.loader.exec_module(book_browser)

# Tests that start Chromium are slow; the ones that only compute are not.
slow = pytest.mark.slow


@pytest.fixture(scope="module")
def chromium() -> str:
    try:
        return book_browser.chromium_path()
    except FileNotFoundError as error:
        if os.environ.get("CI"):
            raise  # CI installs Debian's chromium (.ci/run): missing it is a failure there
        pytest.skip(str(error))


def build(name: str, tmp_path: Path) -> Path:
    """Build the fixture book ``name`` in a copy under ``tmp_path``; its HTML folder."""
    source = tmp_path / name
    shutil.copytree(FIXTURES / name, source)
    # Built as the book is: jupyter-book 1.x writes sphinx-thebe's inline script twice on
    # every page (a console error) unless the book's script_once extension is loaded.
    config = yaml.safe_load((source / "_config.yml").read_text())
    config.setdefault("sphinx", {}).setdefault("local_extensions", {})["script_once"] = str(
        REPO / "book" / "_ext")
    (source / "_config.yml").write_text(yaml.safe_dump(config))
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    subprocess.run([str(jupyter_book), "build", str(source), "--quiet"], check=True,
                   capture_output=True, text=True)
    return source / "_build" / "html"


def kinds(problems, width: int | None = None) -> set[str]:
    return {p.kind for p in problems if width is None or p.width in (0, width)}


@slow
def test_a_clean_book_has_no_problem(chromium, tmp_path):
    problems = book_browser.check_book(build("clean", tmp_path))
    assert problems == []


@slow
def test_a_table_wider_than_the_column_is_caught_at_both_widths(chromium, tmp_path):
    problems = book_browser.check_book(build("wide_table", tmp_path))
    assert {"too-wide", "page-overflow"} <= kinds(problems, 1400)
    assert {"too-wide", "page-overflow"} <= kinds(problems, 390)
    wide = [p for p in problems if p.kind == "too-wide"]
    assert all("<table>" in p.detail and p.page == "intro.html" for p in wide)


@slow
def test_mathjax_from_a_cdn_is_caught_and_leaves_raw_tex_offline(chromium, tmp_path):
    problems = book_browser.check_book(build("cdn_mathjax", tmp_path), widths=(1400,))
    assert {"mathjax-remote", "mathjax-missing", "raw-tex"} <= kinds(problems)
    remote = next(p for p in problems if p.kind == "mathjax-remote")
    assert "cdn.jsdelivr.net" in remote.detail


@slow
def test_raw_markup_missing_alt_text_distorted_images_and_broken_links_are_caught(
        chromium, tmp_path):
    problems = book_browser.check_book(build("leftovers", tmp_path), widths=(1400,))
    assert {"raw-markup", "alt-text", "image-distorted", "broken-link"} <= kinds(problems)
    broken = [p.detail for p in problems if p.kind == "broken-link"]
    assert any("no-such-heading" in detail for detail in broken)


@slow
def test_the_command_line_exits_1_on_problems_and_2_on_a_missing_folder(chromium, tmp_path,
                                                                      capsys):
    html = build("leftovers", tmp_path)
    assert book_browser.main([str(html), "--width", "390"]) == 1
    assert "problems" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        book_browser.main([str(tmp_path / "missing")])
    assert exit_info.value.code == 2
    assert "root: expected the built book's HTML folder" in capsys.readouterr().err


# --- hand-written pages: the chapter checks, contrast in both themes, offline rules ---

PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>page</title>
<script>
  // as pydata-sphinx-theme does: the mode the reader chose, before the page is drawn
  document.documentElement.dataset.theme = localStorage.getItem("theme") || "light";
</script>
<style>
  body {{ margin: 0; background: #fff; color: #222; font: 16px sans-serif; }}
  html[data-theme=dark] body {{ background: #121212; color: #ced6dd; }}
  article.bd-article {{ width: 340px; margin: 0 auto; }}
  img {{ max-width: 100%; }}
  {style}
</style></head>
<body><main><article class="bd-article">{body}</article></main></body></html>
"""


def code_cell(lines: int, hidden: bool = False, output: str = "") -> str:
    """MyST-NB's HTML for a code cell of ``lines`` lines, its source collapsed if ``hidden``."""
    source = "\n".join(f"x{i} = {i}" for i in range(lines)) + "\n"
    cell_input = (f'<div class="cell_input docutils container"><div class="highlight">'
                  f"<pre>{source}</pre></div></div>")
    if hidden:
        cell_input = ('<details class="hide above-input"><summary>Show code cell source'
                      f"</summary>{cell_input}</details>")
    cell_output = f'<div class="cell_output docutils container">{output}</div>' if output else ""
    return f'<div class="cell docutils container">{cell_input}{cell_output}</div>'


def prose(words: int) -> str:
    return "<p>" + " ".join("word" for _ in range(words)) + "</p>"


DIAGRAM = '<img src="diagram.svg" alt="a diagram of the idea" width="300" height="150">'
DIAGRAM_SVG = ('<svg xmlns="http://www.w3.org/2000/svg" width="300" height="150">'
               '<rect width="300" height="150" fill="#1f5f8b"/></svg>')


def write_pages(root: Path, pages: dict[str, tuple[str, str]]) -> Path:
    """Hand-written pages under ``root``: {relative path: (body, extra CSS)}."""
    for rel, (body, style) in pages.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(PAGE.format(body=body, style=style), encoding="utf-8")
        (path.parent / "diagram.svg").write_text(DIAGRAM_SVG, encoding="utf-8")
        (path.parent / "badge.svg").write_text(
            DIAGRAM_SVG.replace('"300"', '"117"').replace('"150"', '"20"'), encoding="utf-8")
    return root


def read(root: Path, pages, widths=(1400,), themes=("light",)):
    chapters = {}
    problems = book_browser.check_pages(root, list(pages), widths, themes=themes,
                                        chapters=chapters)
    return problems, chapters


@slow
def test_a_chapter_that_opens_with_a_long_code_cell_and_runs_long_fails_all_three(
        chromium, tmp_path):
    body = (prose(1500) + code_cell(14) + DIAGRAM + prose(2600)
            + code_cell(3, output="<pre>printed words do not count</pre>"))
    root = write_pages(tmp_path, {"notebooks/01_long.html": (body, "")})
    problems, chapters = read(root, ["notebooks/01_long.html"], widths=(1400, 390))
    assert kinds(problems) == {"diagram-first", "first-code-lines", "prose-length"}
    assert chapters["notebooks/01_long.html"] == book_browser.Chapter(4100, 14, False)
    # found at both widths, so reported once, for any width
    assert all(p.width == 0 for p in problems)
    detail = {p.kind: p.detail for p in problems}
    assert detail["first-code-lines"] == ("the first visible code cell has 14 lines, "
                                          "more than 12")
    assert detail["prose-length"] == "4,100 words of prose, more than 4,000"


@slow
def test_a_chapter_that_opens_with_a_diagram_passes_and_hidden_text_is_not_prose(
        chromium, tmp_path):
    solution = ('<details class="toggle"><summary>Show solution</summary>'
                + prose(5000) + "</details>")
    body = (prose(300) + code_cell(20, hidden=True) + '<a href="#"><img src="badge.svg" '
            'alt="a badge, too small to be a diagram" width="117" height="20"></a>'
            + DIAGRAM + code_cell(12, output=prose(900)) + code_cell(40)
            + '<mjx-container class="MathJax">x squared: not prose</mjx-container>' + solution
            + '<p style="display: none">' + " ".join(["hidden"] * 900) + "</p>" + prose(3700))
    root = write_pages(tmp_path, {"notebooks/02_short.html": (body, ""),
                                  "book/notes.html": (prose(6000), "")})
    problems, chapters = read(root, ["notebooks/02_short.html", "book/notes.html"])
    assert problems == []
    # 4,000 words is within the limit; only chapter pages are measured
    assert chapters == {"notebooks/02_short.html": book_browser.Chapter(4000, 12, True)}


@slow
def test_a_chapter_with_no_visible_code_needs_a_diagram_somewhere(chromium, tmp_path):
    root = write_pages(tmp_path, {
        "notebooks/03_text.html": (prose(50) + code_cell(5, hidden=True), ""),
        "notebooks/04_text.html": (prose(50) + code_cell(5, hidden=True) + DIAGRAM, "")})
    problems, chapters = read(root, ["notebooks/03_text.html", "notebooks/04_text.html"])
    assert [(p.page, p.kind, p.detail) for p in problems] == [
        ("notebooks/03_text.html", "diagram-first", "no diagram anywhere")]
    assert chapters["notebooks/04_text.html"] == book_browser.Chapter(50, None, True)


CAPTIONED = ('<div class="box"><table><caption>val, 1,014 sentences</caption>'
             "<tr><td>1</td></tr></table><p class='tb-note'>signature</p></div>")
PALE_IN_DARK = ("html[data-theme=dark] .box { background: #ced6dd; }"
                "html[data-theme=dark] caption, html[data-theme=dark] .tb-note"
                " { color: #9ca4af; }")


@slow
def test_captions_and_notes_are_checked_for_contrast_in_each_theme(chromium, tmp_path):
    root = write_pages(tmp_path, {
        "pale.html": (CAPTIONED, PALE_IN_DARK),
        "fixed.html": (CAPTIONED, PALE_IN_DARK
                       + "html[data-theme=dark] .box { background: transparent; }")})
    problems, _ = read(root, ["pale.html", "fixed.html"], themes=("light", "dark"))
    assert {(p.page, p.kind, p.theme) for p in problems} == {("pale.html", "contrast", "dark")}
    details = sorted(p.detail for p in problems)
    assert details[0].startswith('<caption> "val, 1,014 sentences" is 1.71:1 (#9ca4af on #ced6dd)')
    assert "<p.tb-note>" in details[1]


@slow
def test_requests_to_other_hosts_and_console_errors_are_caught(chromium, tmp_path):
    remote = ('<img src="https://example.com/badge.svg" alt="a remote badge">'
              "<script>throw new Error('a broken script');</script>")
    root = write_pages(tmp_path, {"remote.html": (remote, ""), "local.html": (DIAGRAM, "")})
    problems, _ = read(root, ["remote.html", "local.html"])
    assert {(p.page, p.kind) for p in problems} == {("remote.html", "remote-request"),
                                                     ("remote.html", "console-error")}
    details = {p.kind: p.detail for p in problems}
    assert "https://example.com/badge.svg" in details["remote-request"]
    assert "a broken script" in details["console-error"]


@slow
def test_allow_reports_a_kind_without_failing(chromium, tmp_path, capsys):
    root = write_pages(tmp_path, {"index.html": (prose(10), ""),
                                  "notebooks/05_long.html": (code_cell(14) + prose(10), "")})
    args = [str(root), "--width", "1400", "--theme", "light"]
    assert book_browser.main(args) == 1
    out = capsys.readouterr().out
    assert ("notebooks/05_long.html" in out and "10 words, first visible code cell: 14 lines, "
            "diagram before it: no" in out)
    assert book_browser.main([*args, "--allow", "diagram-first"]) == 1
    capsys.readouterr()
    allowed = ["--allow", "diagram-first", "--allow", "first-code-lines"]
    assert book_browser.main([*args, *allowed]) == 0
    out = capsys.readouterr().out
    assert "first-code-lines: the first visible code cell has 14 lines" in out
    assert "(allowed)" in out and "0 problems (2 more of the allowed kinds)" in out


def test_allow_refuses_a_kind_that_does_not_exist(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        book_browser.main([str(tmp_path), "--allow", "prose-lenght"])
    assert exit_info.value.code == 2
    assert "expected one of the kinds of problem" in capsys.readouterr().err


def test_the_chapter_limits_are_the_designs():
    Chapter = book_browser.Chapter
    assert Chapter(4000, 12, True).problems("notebooks/01_a.html") == []
    assert Chapter(100, None, True).problems("notebooks/01_a.html") == []
    found = Chapter(4001, 13, False).problems("notebooks/01_a.html", 390, "dark")
    assert [(p.kind, p.width, p.theme) for p in found] == [
        ("diagram-first", 390, "dark"), ("first-code-lines", 390, "dark"),
        ("prose-length", 390, "dark")]
    assert {"diagram-first", "first-code-lines", "prose-length"} <= set(book_browser.KINDS)


def test_a_problem_found_everywhere_is_reported_once():
    Problem = book_browser.Problem
    everywhere = [Problem("a.html", w, "contrast", "pale", t)
                  for t in ("light", "dark") for w in (1400, 390)]
    one_theme = [Problem("b.html", w, "contrast", "pale", "dark") for w in (1400, 390)]
    one_width = [Problem("c.html", 390, "too-wide", "table", t) for t in ("light", "dark")]
    merged = book_browser.merge(everywhere + one_theme + one_width, (1400, 390),
                                ("light", "dark"))
    assert [(p.page, p.width, p.theme) for p in merged] == [
        ("a.html", 0, ""), ("b.html", 0, "dark"), ("c.html", 390, "dark"),
        ("c.html", 390, "light")]
    assert str(merged[1]) == "b.html (dark): contrast: pale"


def test_a_figure_whose_title_runs_off_its_edge_is_caught(tmp_path):
    from PIL import Image, ImageDraw

    figures = tmp_path / "_images"
    figures.mkdir()
    for name, title_x in (("clipped.png", 150), ("whole.png", 20)):
        image = Image.new("RGB", (200, 160), "white")
        draw = ImageDraw.Draw(image)
        draw.rectangle((title_x, 4, title_x + 120, 14), fill="black")  # the title's ink
        draw.rectangle((20, 40, 180, 150), fill="#1f5f8b")  # the plot
        image.save(figures / name)
    cells = "".join(f'<div class="cell_output"><img src="_images/{name}" alt="{name[:-4]} plot">'
                    "</div>" for name in ("clipped.png", "whole.png"))
    (tmp_path / "page.html").write_text(f"<html><body>{cells}</body></html>")
    problems = book_browser.check_figures(tmp_path, ["page.html"])
    assert [(p.kind, p.detail) for p in problems] == [
        ("figure-clipped", "_images/clipped.png ('clipped plot'): its title runs off its "
                           "right edge")]
