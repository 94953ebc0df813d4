"""Which cells of a chapter belong to which exercise, written into the cells' metadata.

A chapter's exercise is a markdown cell with a MyST ``{exercise}`` directive labelled
``ex-NN-K``; a code exercise has a solution cell (``### BEGIN SOLUTION`` ...
``### END SOLUTION``) and a cell calling ``check("NN.K", fn)``; a written exercise has a
markdown ``{solution} ex-NN-K`` cell. :func:`annotate` records that in each cell's
``metadata["exercise"]``, which graders and exporters read instead of parsing prose:

* statement: ``{"id": "NN.K", "kind": "code" | "written", "points": int}`` (points kept
  when already set, default 1),
* solution code cell or ``{solution}`` cell: ``{"id": "NN.K", "role": "solution"}``,
* check cell: ``{"id": "NN.K", "role": "check"}``.

Student copies add ``{"id": "NN.K", "role": "answer"}`` answer cells (see
:mod:`transformer_book.course.assignments`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import nbformat

from transformer_book.util.validation import BookError

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
KEY = "exercise"
EXERCISE_OPEN = re.compile(r"^(?P<fence>`{3,}|:{3,})\{exercise\}[ \t]*(?P<title>.*)$", re.M)
SOLUTION_OPEN = re.compile(r"^(?:`{3,}|:{3,})\{solution\}[ \t]*(?P<label>\S+)", re.M)
LABEL = re.compile(r"^:label:[ \t]*(?P<label>\S+)[ \t]*$", re.M)
EXERCISE_LABEL = re.compile(r"ex-(?P<chapter>\d\d)-(?P<number>\w+)")
CHECK_CALL = re.compile(r"""\bcheck\(\s*["'](?P<id>\d\d\.\w+)["']""")


class ExerciseMarkupError(BookError):
    """An exercise's cells are inconsistent; the message names the notebook and the cell."""


@dataclass
class Exercise:
    """One exercise of a notebook: its id, title, kind, points and its cells' indices."""

    id: str
    title: str
    statement: int
    kind: str = "written"
    points: int = 1
    solutions: list[int] = field(default_factory=list)
    checks: list[int] = field(default_factory=list)


def id_from_label(label: str) -> str | None:
    """``"ex-05-1"`` -> ``"05.1"``; anything else -> None."""
    match = EXERCISE_LABEL.fullmatch(label.strip())
    return f"{match['chapter']}.{match['number']}" if match else None


def label_from_id(exercise_id: str) -> str:
    """``"05.1"`` -> ``"ex-05-1"``."""
    return "ex-" + exercise_id.replace(".", "-")


def has_solution_markers(cell: nbformat.NotebookNode) -> bool:
    return cell.cell_type == "code" and (BEGIN in cell.source or END in cell.source)


def statement_of(cell: nbformat.NotebookNode, where: str) -> tuple[str, str] | None:
    """``(id, title)`` of the exercise directive in markdown ``cell``, or None."""
    if cell.cell_type != "markdown":
        return None
    opened = list(EXERCISE_OPEN.finditer(cell.source))
    if not opened:
        return None
    if len(opened) > 1:
        raise ExerciseMarkupError(f"{where}: {len(opened)} exercises in one cell; one per cell")
    label = LABEL.search(cell.source, opened[0].end())
    exercise_id = id_from_label(label["label"]) if label else None
    if exercise_id is None:
        raise ExerciseMarkupError(f"{where}: the exercise has no ':label: ex-NN-K' option")
    return exercise_id, opened[0]["title"].strip()


def solution_label_of(cell: nbformat.NotebookNode) -> str | None:
    """The exercise id a markdown ``{solution}`` cell answers, or None."""
    if cell.cell_type != "markdown":
        return None
    match = SOLUTION_OPEN.search(cell.source)
    return id_from_label(match["label"]) if match else None


def check_id_of(cell: nbformat.NotebookNode) -> str | None:
    if cell.cell_type != "code":
        return None
    match = CHECK_CALL.search(cell.source)
    return match["id"] if match else None


def find_exercises(
    notebook: nbformat.NotebookNode, name: str, *, strict: bool = True
) -> list[Exercise]:
    """Every exercise of ``notebook`` in order, from its markup (not from its metadata).

    ``strict``: a solution or check that belongs to no exercise above it is an
    :class:`ExerciseMarkupError`; otherwise such cells are left out.
    """
    found: dict[str, Exercise] = {}
    current: Exercise | None = None
    for index, cell in enumerate(notebook.cells):
        where = f"{name}, cell {index}"
        statement = statement_of(cell, where)
        if statement:
            if statement[0] in found:
                raise ExerciseMarkupError(f"{where}: exercise {statement[0]} appears twice")
            current = found[statement[0]] = Exercise(statement[0], statement[1], index)
            old = cell.metadata.get(KEY, {})
            current.points = old.get("points", 1) if isinstance(old, dict) else 1
            continue
        answered = solution_label_of(cell) or check_id_of(cell)
        owner = found.get(answered) if answered else current
        if owner is None:
            if strict and (answered or has_solution_markers(cell)):
                raise ExerciseMarkupError(
                    f"{where}: {answered or 'a solution'} belongs to no exercise above it"
                )
            continue
        if solution_label_of(cell) or has_solution_markers(cell):
            owner.solutions.append(index)
        elif check_id_of(cell):
            owner.checks.append(index)
            owner.kind = "code"
    for exercise in found.values():
        if any(has_solution_markers(notebook.cells[i]) for i in exercise.solutions):
            exercise.kind = "code"
    return list(found.values())


def expected_metadata(
    notebook: nbformat.NotebookNode, name: str, *, strict: bool = True
) -> dict[int, dict]:
    """Cell index -> the ``metadata["exercise"]`` it should carry (absent: none)."""
    wanted: dict[int, dict] = {}
    for exercise in find_exercises(notebook, name, strict=strict):
        wanted[exercise.statement] = {
            "id": exercise.id, "kind": exercise.kind, "points": exercise.points
        }
        for index in exercise.solutions:
            wanted[index] = {"id": exercise.id, "role": "solution"}
        for index in exercise.checks:
            wanted[index] = {"id": exercise.id, "role": "check"}
    return wanted


def annotate(notebook: nbformat.NotebookNode, name: str) -> list[str]:
    """Write every cell's ``metadata["exercise"]``; return what changed, one line per cell."""
    changes = []
    wanted = expected_metadata(notebook, name)
    for index, cell in enumerate(notebook.cells):
        have = cell.metadata.get(KEY)
        want = wanted.get(index)
        if have == want:
            continue
        changes.append(f"cell {index} ({cell.get('id')}): metadata.exercise {have} -> {want}")
        if want is None:
            del cell.metadata[KEY]
        else:
            cell.metadata[KEY] = want
    return changes
