"""Student versions: solutions stripped, checks say "not attempted", valid nbformat."""

from __future__ import annotations

import contextlib
import io
import os
import shutil

import nbformat
import pytest
from notebook_utils import NOTEBOOKS, check_cells, read, tags, text_output

from transformer_book.cli import main as cli_main
from transformer_book.course.assignments import (
    BEGIN,
    END,
    MarkerError,
    make_assignments,
    make_student_notebook,
    strip_solution,
)
from transformer_book.util.validation import BookError


@pytest.fixture(scope="module")
def student_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("assignments")
    assert cli_main(["assignments", "--source", str(NOTEBOOKS[0].parent), "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_source_notebook_checks_pass(path):
    notebook = read(path)
    for index, exercise_id in check_cells(notebook):
        output = text_output(notebook.cells[index])
        assert f"✓ Exercise {exercise_id} passed" in output, f"{path.name} cell {index}: {output!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_student_notebook_is_valid_and_stripped(path, student_dir):
    student = nbformat.read(student_dir / path.name, as_version=4)
    nbformat.validate(student)
    for cell in student.cells:
        assert "solution" not in tags(cell)
        if cell.cell_type == "code":
            assert BEGIN not in cell.source and END not in cell.source
            assert cell.outputs == [] and cell.execution_count is None
    source_solutions = sum(BEGIN in c.source for c in read(path).cells if c.cell_type == "code")
    stubs = sum(
        "raise NotImplementedError" in c.source for c in student.cells if c.cell_type == "code"
    )
    assert stubs >= source_solutions


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_student_checks_report_not_attempted(path, student_dir):
    """Run the student version's imports cell, stubbed exercise cells and check cells."""
    student = nbformat.read(student_dir / path.name, as_version=4)
    checks = check_cells(student)
    stubbed = [
        c.source
        for c in student.cells
        if c.cell_type == "code" and 'NotImplementedError("Exercise' in c.source
    ]
    namespace: dict = {"__name__": "__main__"}  # as in a kernel: the notebook's functions
    exec(student.cells[2].source, namespace)  # imports, set_seed, device
    for source in stubbed:
        with contextlib.suppress(NotImplementedError):  # a stub cell may call its function
            exec(source, namespace)
    for index, exercise_id in checks:
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            exec(student.cells[index].source, namespace)
        assert f"○ Exercise {exercise_id} not attempted" in buffer.getvalue(), buffer.getvalue()


def test_strip_solution_keeps_indentation_and_names_the_exercise():
    source = "def f(x):\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION\n"
    assert strip_solution(source, "01.2", where="nb") == (
        'def f(x):\n    raise NotImplementedError("Exercise 01.2: write your solution here")'
    )


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("### BEGIN SOLUTION\nx = 1\n", "never closed"),
        ("x = 1\n### END SOLUTION\n", "without a"),
        ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n", "second"),
    ],
)
def test_unbalanced_markers_name_notebook_and_cell(source, message, tmp_path):
    notebook = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_markdown_cell("# t"), nbformat.v4.new_code_cell(source)]
    )
    (tmp_path / "src").mkdir()
    nbformat.write(notebook, tmp_path / "src" / "07_broken.ipynb")
    with pytest.raises(MarkerError, match=rf"07_broken\.ipynb, cell 1: .*{message}"):
        make_assignments(tmp_path / "src", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_solution_cells_removed_and_outputs_cleared():
    notebook = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell("answer", metadata={"tags": ["solution"]}),
            nbformat.v4.new_code_cell(
                "print(1)", outputs=[nbformat.v4.new_output("stream", text="1\n")]
            ),
            nbformat.v4.new_code_cell('check("00.1", f)'),
        ]
    )
    student = make_student_notebook(notebook, "x.ipynb")
    assert [c.cell_type for c in student.cells] == ["code", "code"]
    assert student.cells[0].outputs == []


def test_empty_source_folder_is_an_error(tmp_path):
    with pytest.raises(BookError, match=r"source_dir: expected a folder with \.ipynb files"):
        make_assignments(tmp_path / "src", tmp_path / "out")
    (tmp_path / "src").mkdir()
    with pytest.raises(BookError, match=r"source_dir: expected a folder with \.ipynb files"):
        make_assignments(tmp_path / "src", tmp_path / "out")


def test_student_notebooks_are_readable_as_the_umask_allows(tmp_path):
    previous = os.umask(0o022)
    try:
        written = make_assignments(NOTEBOOKS[0].parent, tmp_path / "student")
    finally:
        os.umask(previous)
    assert {path.stat().st_mode & 0o777 for path in written} == {0o644}
    assert issubclass(MarkerError, BookError)


def test_without_source_outside_a_checkout_the_command_says_where_the_notebooks_are(
        tmp_path, monkeypatch, capsys):
    """From an installed package, with no notebooks/ in the current folder, assignments and
    grade ask for --source with a hint instead of failing on a missing folder."""
    monkeypatch.chdir(tmp_path)
    for argv in (["assignments", "--out", "students"], ["grade", "subs", "--out", "grades"]):
        assert cli_main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--source: expected the folder of the course's master " \
            "notebooks: a checkout's notebooks/" in err, err
        assert not (tmp_path / argv[-1]).exists(), "nothing written"
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / NOTEBOOKS[0].name).write_bytes(NOTEBOOKS[0].read_bytes())
    assert cli_main(["assignments", "--out", "students"]) == 0, "a checkout's root: the default"
    assert (tmp_path / "students" / NOTEBOOKS[0].name).exists()


def test_assignments_never_replace_a_notebook_they_did_not_write(tmp_path, capsys):
    """A student's own 00_how_to_use.ipynb in --out (or one edited since it was handed out)
    is kept and the command refused before it writes anything; a copy it wrote itself, left
    as it was, is replaced."""
    from transformer_book.cli import main

    source, out = tmp_path / "masters", tmp_path / "out"
    source.mkdir()
    shutil.copy(NOTEBOOKS[0], source / NOTEBOOKS[0].name)
    argv = ["assignments", "--source", str(source), "--out", str(out)]
    assert main(argv) == 0 and main(argv) == 0, "its own, unchanged: replaced"
    mine = out / NOTEBOOKS[0].name
    mine.write_text(mine.read_text() + " ")  # the student's work since
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out" in err and NOTEBOOKS[0].name in err
    assert mine.read_text().endswith(" "), "the student's work is kept"
    mine.unlink()
    (out / ".transformer-book-written.json").unlink()
    shutil.copy(NOTEBOOKS[0], mine)  # a notebook of the name, written by someone else
    assert main(argv) == 2 and mine.read_bytes() == NOTEBOOKS[0].read_bytes()
