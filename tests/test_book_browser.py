"""The browser check (scripts/book_browser.py) finds what a reader would see wrong.

Each tiny book in tests/fixtures/browser_books is built with jupyter-book and read in
headless Chromium: the clean one passes, and each broken one is caught for its defect. The
real book is checked by `make browser` (part of `make test`), after `make book`.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "browser_books"
SCRIPT = REPO / "scripts" / "book_browser.py"

spec = importlib.util.spec_from_file_location("book_browser", SCRIPT)
book_browser = importlib.util.module_from_spec(spec)
sys.modules["book_browser"] = book_browser  # dataclasses look their module up
spec.loader.exec_module(book_browser)

pytestmark = pytest.mark.slow


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
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    subprocess.run([str(jupyter_book), "build", str(source), "--quiet"], check=True,
                   capture_output=True, text=True)
    return source / "_build" / "html"


def kinds(problems, width: int | None = None) -> set[str]:
    return {p.kind for p in problems if width is None or p.width in (0, width)}


def test_a_clean_book_has_no_problem(chromium, tmp_path):
    problems = book_browser.check_book(build("clean", tmp_path))
    assert problems == []


def test_a_table_wider_than_the_column_is_caught_at_both_widths(chromium, tmp_path):
    problems = book_browser.check_book(build("wide_table", tmp_path))
    assert {"too-wide", "page-overflow"} <= kinds(problems, 1400)
    assert {"too-wide", "page-overflow"} <= kinds(problems, 390)
    wide = [p for p in problems if p.kind == "too-wide"]
    assert all("<table>" in p.detail and p.page == "intro.html" for p in wide)


def test_mathjax_from_a_cdn_is_caught_and_leaves_raw_tex_offline(chromium, tmp_path):
    problems = book_browser.check_book(build("cdn_mathjax", tmp_path), widths=(1400,))
    assert {"mathjax-remote", "mathjax-missing", "raw-tex"} <= kinds(problems)
    remote = next(p for p in problems if p.kind == "mathjax-remote")
    assert "cdn.jsdelivr.net" in remote.detail


def test_raw_markup_missing_alt_text_distorted_images_and_broken_links_are_caught(
        chromium, tmp_path):
    problems = book_browser.check_book(build("leftovers", tmp_path), widths=(1400,))
    assert {"raw-markup", "alt-text", "image-distorted", "broken-link"} <= kinds(problems)
    broken = [p.detail for p in problems if p.kind == "broken-link"]
    assert any("no-such-heading" in detail for detail in broken)


def test_the_command_line_exits_1_on_problems_and_2_on_a_missing_folder(chromium, tmp_path,
                                                                      capsys):
    html = build("leftovers", tmp_path)
    assert book_browser.main([str(html), "--width", "390"]) == 1
    assert "problems" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        book_browser.main([str(tmp_path / "missing")])
    assert exit_info.value.code == 2
    assert "root: expected the built book's HTML folder" in capsys.readouterr().err
