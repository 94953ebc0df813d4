"""Student notebooks as a learner sees them: converted to HTML by nbconvert, as JupyterLab,
Colab or GitHub's viewer would show them, they hold no MyST markup, no written solution and
no solution code, and each written exercise has an answer cell."""

from __future__ import annotations

import functools
import html
import re
from pathlib import Path

import nbformat
import pytest
from nbconvert import HTMLExporter
from notebook_utils import NOTEBOOKS, read

from transformer_book.course.assignments import make_assignments, make_student_notebook
from transformer_book.course.exercise_cells import (
    BEGIN,
    END,
    find_exercises,
    has_solution_markers,
    solution_label_of,
)

MARKUP = re.compile(
    r"\{(exercise|solution|note|admonition|figure|tip|warning|margin|math|dropdown)\}"
    r"|\{(cite|ref|numref|eq|doc|term)(:\w+)?\}`|^:(label|class|nonumber|name|alt):"
    r"|`{3}\{|:{3}\{",
    re.M,
)
WINDOW = 10  # words: a run this long from a solution must not appear in the student copy


@pytest.fixture(scope="module")
def student_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("student")
    make_assignments(NOTEBOOKS[0].parent, out)
    return out


@functools.cache
def rendered(folder: str, name: str) -> tuple[str, str]:
    """``(page text, text of the markdown cells alone)`` of a student notebook's HTML."""
    student = nbformat.read(Path(folder) / name, as_version=4)
    prose = nbformat.v4.new_notebook(
        cells=[c for c in student.cells if c.cell_type == "markdown"], metadata=student.metadata
    )
    return visible_text(student), visible_text(prose)


def visible_text(notebook: nbformat.NotebookNode) -> str:
    """The text of the HTML page nbconvert makes, tags stripped, entities decoded."""
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(notebook)
    body = re.sub(r"(?is)<(script|style)\b.*?</\1>", " ", body)
    return html.unescape(re.sub(r"<[^>]+>", "", body))


def words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z]{2,}", text)


def windows(text: str) -> set[tuple[str, ...]]:
    found = words(text)
    return {tuple(found[i:i + WINDOW]) for i in range(max(len(found) - WINDOW + 1, 0))}


def solution_code_lines(notebook: nbformat.NotebookNode) -> set[str]:
    """Lines between the markers that appear nowhere else in the master notebook."""
    inside, lines = False, set()
    for cell in notebook.cells:
        if not has_solution_markers(cell):
            continue
        for line in cell.source.splitlines():
            stripped = line.strip()
            if stripped.startswith((BEGIN, END)):
                inside = stripped.startswith(BEGIN)
            elif inside and len(stripped) >= 12:
                lines.add(stripped)
    elsewhere = "\n".join(c.source for c in notebook.cells if not has_solution_markers(c))
    return {line for line in lines if line not in elsewhere}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_html_shows_no_markup_no_solution_text_no_solution_code(path, student_dir):
    master = read(path)
    text, prose = rendered(str(student_dir), path.name)
    leftover = MARKUP.search(prose)
    assert leftover is None, f"{path.name}: MyST markup {leftover.group(0)!r} in the HTML"
    spaced = " ".join(text.split())
    for line in solution_code_lines(master):
        assert " ".join(line.split()) not in spaced, f"{path.name}: solution code {line!r}"
    not_solutions = "\n".join(c.source for c in master.cells if not solution_label_of(c))
    shown = windows(text) - windows(not_solutions)  # the statement may share a phrase
    for cell in master.cells:
        if cell.cell_type == "markdown" and solution_label_of(cell):
            body = re.sub(r"(?m)^(`{3,}|:{3,}).*$|^:\w+:.*$", "", cell.source)
            leaked = windows(body) & shown
            assert not leaked, f"{path.name}: solution text {' '.join(sorted(leaked)[0])!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_exercises_are_headings_with_answer_cells(path, student_dir):
    master = read(path)
    student = nbformat.read(student_dir / path.name, as_version=4)
    text, _ = rendered(str(student_dir), path.name)
    sources = [c.source for c in student.cells]
    for exercise in find_exercises(master, path.name):
        assert f"Exercise {exercise.id} · " in text, f"{path.name}: no heading for {exercise.id}"
        heading = next(i for i, s in enumerate(sources) if f"### Exercise {exercise.id} · " in s)
        assert student.cells[heading].metadata["exercise"]["id"] == exercise.id
        answers = [c for c in student.cells
                   if c.metadata.get("exercise") == {"id": exercise.id, "role": "answer"}]
        if exercise.kind == "written":
            assert [c.get("id") for c in answers] == [student.cells[heading + 1].get("id")]
        else:
            assert answers == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_tags_timing_outputs_or_book_only_text(path, student_dir):
    student = nbformat.read(student_dir / path.name, as_version=4)
    assert set(student.metadata) <= {"kernelspec", "language_info"}
    for cell in student.cells:
        assert set(cell.metadata) <= {"exercise"}, f"{path.name}: {dict(cell.metadata)}"
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
    book_only = [c.source for c in read(path).cells if "book-only" in c.metadata.get("tags", [])]
    assert not set(book_only) & {c.source for c in student.cells}
    assert (student_dir / path.name).stat().st_mode & 0o777 in (0o644, 0o664)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_generation_is_deterministic(path):
    master = read(path)
    first, second = (nbformat.writes(make_student_notebook(master, path.name)) for _ in range(2))
    assert first == second


def test_chapter_00_keeps_its_setup_cell_and_drops_the_marker_sentence(student_dir):
    student = nbformat.read(student_dir / "00_how_to_use.ipynb", as_version=4)
    assert "google.colab" in student.cells[1].source
    assert not any(BEGIN in c.source for c in student.cells if c.cell_type == "markdown")
