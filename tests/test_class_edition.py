"""scripts/class_edition.py: the class copies keep the chapter's results and drop every
solution; the check finds a solution wherever a built edition shows it (a page, a download,
the search index); and a small class edition, built, holds none."""

from __future__ import annotations

import html
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from notebook_utils import NOTEBOOKS, ROOT, tags

from transformer_book.course.exercise_cells import BEGIN, KEY

spec = importlib.util.spec_from_file_location("class_edition",
                                              ROOT / "scripts" / "class_edition.py")
class_edition = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = class_edition  # its dataclass looks its module up
spec.loader.exec_module(class_edition)

CHAPTER = NOTEBOOKS[0]  # chapter 00: code and written exercises, quick to build


@pytest.fixture(scope="module")
def master() -> nbformat.NotebookNode:
    return nbformat.read(CHAPTER, as_version=4)


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A folder of master notebooks holding chapter 00 alone."""
    folder = tmp_path_factory.mktemp("masters")
    shutil.copy(CHAPTER, folder / CHAPTER.name)
    return folder


@pytest.fixture(scope="module")
def found(source):
    return class_edition.solutions(source)


def test_class_copy_keeps_the_results_and_drops_every_solution(master, found):
    copy = class_edition.class_notebook(master, CHAPTER.name)
    text = nbformat.writes(copy)
    assert BEGIN not in text and "{solution}" not in text
    lines, _ = found
    assert lines, "chapter 00 has distinctive solution lines"
    words = class_edition.words_of(text)
    assert not [s.line for s in lines if f" {s.words} " in f" {words} "]
    masters = {cell.get("id"): cell for cell in master.cells}
    kept_outputs = 0
    for cell in copy.cells:
        if KEY in cell.metadata:  # an exercise cell: as the student copy has it
            assert cell.get("outputs", []) == [] and "tags" not in cell.metadata
        elif cell.get("id") in masters and cell.cell_type == "code":
            original = masters[cell["id"]]
            assert cell.outputs == original.outputs
            assert tags(cell) == tags(original)
            kept_outputs += bool(cell.outputs)
    assert kept_outputs > 0
    setup = copy.cells[1]
    assert "google.colab" in setup.source and "remove-cell" in tags(setup)


def _page(code: str) -> str:
    """A built page showing ``code`` highlighted as Pygments does (one span per token)."""
    spans = " ".join(f'<span class="n">{html.escape(token)}</span>' for token in code.split())
    return f"<html><body><div class='highlight'><pre>{spans}</pre></div></body></html>"


def test_check_finds_a_solution_in_a_page_a_download_and_the_search_index(
        tmp_path, source, found):
    lines, only_words = found
    solution = lines[0]
    built = tmp_path / "html"
    (built / "_sources" / "notebooks").mkdir(parents=True)
    (built / "index.html").write_text(_page("print ( 'hello' )"))
    (built / "searchindex.js").write_text(
        'Search.setIndex({"terms": {"hello": 0}, "titleterms": {}})')
    assert class_edition.leaks(built, source) == []

    (built / "page.html").write_text(_page(solution.line))
    assert class_edition.leaks(built, source) == [f"page.html: {solution.where}: "
                                                  f"{solution.line}"]
    (built / "page.html").unlink()
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(solution.line)])
    (built / "_sources" / "notebooks" / "a.ipynb").write_text(nbformat.writes(notebook))
    assert [m.split(":")[0] for m in class_edition.leaks(built, source)] == [
        "_sources/notebooks/a.ipynb"]
    (built / "_sources" / "notebooks" / "a.ipynb").unlink()
    (built / "_sources" / "page.md").write_text(f"Some text.\n\n{solution.line}\n")
    assert len(class_edition.leaks(built, source)) == 1
    (built / "_sources" / "page.md").unlink()

    assert only_words, "chapter 00's solutions use words nothing else in the book does"
    word = sorted(only_words)[0]
    stem = class_edition._stemmer().stem(word)
    (built / "searchindex.js").write_text(
        "Search.setIndex(" + json.dumps({"terms": {"hello": 0, stem: 0}}) + ")")
    assert class_edition.leaks(built, source) == [
        f"searchindex.js: the solution-only word {word!r}"]


@pytest.mark.slow
def test_a_small_class_edition_holds_no_solution(tmp_path, source):
    tree = tmp_path / "class-src"
    assert class_edition.main(["tree", "--out", str(tree), "--chapters", CHAPTER.name[:2]]) == 0
    assert sorted(p.name for p in (tree / "notebooks").iterdir()) == [CHAPTER.name]
    assert "class edition" in (tree / "_config.yml").read_text()
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    subprocess.run([str(jupyter_book), "build", str(tree), "-q"], check=True,
                   capture_output=True)
    built = tree / "_build" / "html"
    page = (built / "notebooks" / f"{CHAPTER.stem}.html").read_text(encoding="utf-8")
    download = built / "_sources" / "notebooks" / CHAPTER.name
    assert f"_sources/notebooks/{CHAPTER.name}" in page, "the Download button's file"
    assert nbformat.read(download, as_version=4) == nbformat.read(
        tree / "notebooks" / CHAPTER.name, as_version=4), "it serves the class copy"
    assert class_edition.leaks(built, source) == []
    # A solution line planted in the built page is found.
    lines, _ = class_edition.solutions(source)
    (built / "notebooks" / f"{CHAPTER.stem}.html").write_text(
        page.replace("</body>", f"<p>{html.escape(lines[-1].line)}</p></body>"))
    assert class_edition.main(["check", str(built), "--source", str(source)]) == 1


def _refusal(capsys, argv: list[str]) -> str:
    """What main says when it refuses ``argv``: exit 2 and one line on stderr."""
    assert class_edition.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "error:" in captured.err, captured.err
    return captured.err


def test_build_refuses_an_html_folder_it_did_not_write_before_building(tmp_path, capsys):
    html_dir = tmp_path / "site"
    html_dir.mkdir()
    (html_dir / "report.txt").write_text("a user's own file")
    err = _refusal(capsys, ["build", "--html", str(html_dir), "--out", str(tmp_path / "tree"),
                            "--chapters", CHAPTER.name[:2]])
    assert "--html" in err and "report.txt" not in err and str(html_dir) in err
    assert (html_dir / "report.txt").read_text() == "a user's own file"
    assert not (tmp_path / "tree").exists(), "refused before anything was laid out or built"
    (tmp_path / "a-file").write_text("x")
    assert "--html" in _refusal(capsys, ["build", "--html", str(tmp_path / "a-file")])


def test_tree_refuses_an_out_folder_it_did_not_write(tmp_path, capsys):
    (tmp_path / "notes.md").write_text("mine")
    err = _refusal(capsys, ["tree", "--out", str(tmp_path), "--chapters", CHAPTER.name[:2]])
    assert "--out" in err and (tmp_path / "notes.md").read_text() == "mine"
    assert "--chapters" in _refusal(capsys, ["tree", "--out", str(tmp_path / "t"),
                                             "--chapters", "99"])


def test_check_refuses_to_say_no_solution_when_it_read_nothing(tmp_path, source, capsys):
    """A missing or empty edition, or masters without a solution, is no evidence."""
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "html_dir" in _refusal(capsys, ["check", str(tmp_path / "missing"),
                                           "--source", str(source)])
    assert "html_dir" in _refusal(capsys, ["check", str(empty), "--source", str(source)])
    built = tmp_path / "built"
    built.mkdir()
    (built / "page.html").write_text(_page("print('hello')"))
    assert "--source" in _refusal(capsys, ["check", str(built), "--source", str(empty)])
    assert "--source" in _refusal(capsys, ["check", str(built), "--source",
                                           str(tmp_path / "missing")])
    assert class_edition.main(["check", str(built), "--source", str(source)]) == 0
