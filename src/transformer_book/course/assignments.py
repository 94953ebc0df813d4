"""Student versions of the chapters: solutions stripped, outputs cleared.

Coding exercises mark their solution with nbgrader's delimiters::

    def softmax(x, dim=-1):
        ### BEGIN SOLUTION
        shifted = x - x.max(dim=dim, keepdim=True).values
        ...
        ### END SOLUTION

:func:`make_student_notebook` replaces everything between the markers by
``raise NotImplementedError("Exercise 00.1: ...")`` at the marker's indentation, removes
cells tagged ``solution`` (written answers), and clears every output. The exercise id is
read from the first ``check("NN.K", ...)`` call at or after the solution cell, so the
notebook states it once.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from transformer_book.util.files import atomic_write_text
from transformer_book.util.validation import BookError, fail

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
SOLUTION_TAG = "solution"
_CHECK_CALL = re.compile(r"""\bcheck\(\s*["'](?P<id>\d\d\.\d+)["']""")


class MarkerError(BookError):
    """A solution marker is unbalanced; the message names the notebook and the cell."""


def _tags(cell: nbformat.NotebookNode) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def exercise_id_for(cells: list[nbformat.NotebookNode], index: int) -> str | None:
    """The id of the first ``check("NN.K", ...)`` call in cell ``index`` or after it."""
    for cell in cells[index:]:
        if cell.cell_type == "code":
            match = _CHECK_CALL.search(cell.source)
            if match:
                return match.group("id")
    return None


def strip_solution(source: str, exercise_id: str | None, *, where: str) -> str:
    """Replace each ``BEGIN``/``END SOLUTION`` block of ``source`` by a ``NotImplementedError``.

    ``where`` names the notebook and cell for error messages.
    """
    out: list[str] = []
    inside_since: int | None = None
    label = f"Exercise {exercise_id}" if exercise_id else "This exercise"
    for number, line in enumerate(source.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith(BEGIN):
            if inside_since is not None:
                raise MarkerError(
                    f"{where}: line {number} opens a second '{BEGIN}' before the one on "
                    f"line {inside_since} was closed with '{END}'"
                )
            inside_since = number
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f'{indent}raise NotImplementedError("{label}: write your solution here")')
        elif stripped.startswith(END):
            if inside_since is None:
                raise MarkerError(
                    f"{where}: line {number} has '{END}' without a '{BEGIN}' before it"
                )
            inside_since = None
        elif inside_since is None:
            out.append(line)
    if inside_since is not None:
        raise MarkerError(
            f"{where}: the '{BEGIN}' on line {inside_since} is never closed with '{END}'"
        )
    return "\n".join(out)


def make_student_notebook(notebook: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
    """Return the student version of ``notebook`` (a deep copy); ``name`` is used in errors."""
    student = nbformat.reads(nbformat.writes(notebook), as_version=4)
    kept = []
    for index, cell in enumerate(student.cells):
        if SOLUTION_TAG in _tags(cell):
            continue
        if cell.cell_type == "code":
            if BEGIN in cell.source or END in cell.source:
                where = f"{name}, cell {index}"
                cell.source = strip_solution(
                    cell.source, exercise_id_for(student.cells, index), where=where
                )
                cell.metadata["tags"] = [
                    t for t in _tags(cell) if t not in ("hide-input", "hide-cell")
                ]
                if not cell.metadata["tags"]:
                    del cell.metadata["tags"]
            cell.outputs = []
            cell.execution_count = None
        kept.append(cell)
    student.cells = kept
    return student


def write_notebook_atomically(notebook: nbformat.NotebookNode, path: Path) -> None:
    """Validate ``notebook`` and write it to ``path`` atomically
    (:func:`~transformer_book.util.files.atomic_write_text`: 0644 under umask 022)."""
    nbformat.validate(notebook)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = nbformat.writes(notebook)
    atomic_write_text(path, text if text.endswith("\n") else text + "\n")  # as nbformat.write


def make_assignments(source_dir: Path | str, out_dir: Path | str) -> list[Path]:
    """Write a student version of every ``source_dir/*.ipynb`` into ``out_dir``.

    Returns the written paths. Raises :class:`MarkerError` (a ``BookError``) naming the
    notebook and cell when a solution marker is unbalanced.
    """
    source_dir, out_dir = Path(source_dir), Path(out_dir)
    notebooks = sorted(source_dir.glob("*.ipynb"))
    if not notebooks:
        raise fail("source_dir", "a folder with .ipynb files", source_dir)
    written = []
    for path in notebooks:
        notebook = nbformat.read(path, as_version=4)
        student = make_student_notebook(notebook, path.name)
        target = out_dir / path.name
        write_notebook_atomically(student, target)
        written.append(target)
    return written
