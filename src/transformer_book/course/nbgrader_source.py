"""nbgrader source notebooks: ``transformer-book assignments --nbgrader --out DIR``.

Each chapter becomes a notebook that nbgrader 0.9's ``generate_assignment`` and
``autograde`` accept (cell metadata ``nbgrader``, schema version 3). It starts from the
student copy (:func:`~transformer_book.course.assignments.make_student_notebook`: plain
Markdown, book-only text gone, an answer cell per written exercise) and, read from the
cells' ``metadata["exercise"]``:

* each code exercise's solution cell gets the master's solution back, between
  ``### BEGIN SOLUTION`` / ``### END SOLUTION``, as an *autograded answer* cell
  (``solution: true``);
* its ``check("NN.K", fn)`` cell becomes a locked *autograder test* cell
  (``grade: true``, the exercise's points) that calls the package's
  :func:`~transformer_book.course.exercises.core.run_check`, prints its message and
  ``assert``\\ s that it passed, so nbgrader awards the points only then;
* each written exercise's answer cell becomes a *manually graded answer* (markdown,
  ``solution: true, grade: true``, the exercise's points) holding the master's model
  answer, which ``generate_assignment`` replaces by its answer prompt;
* the exercise statements and the setup cells before the chapter's first markdown text
  are locked (read-only); the chapter's other cells stay editable, so that learners can
  change an experiment and measure.

Grade ids are ``ex-NN-K-solution``, ``ex-NN-K-test``, ``ex-NN-K-answer``,
``ex-NN-K-statement`` and ``setup-N``, unique within a notebook. nbgrader treats any line
containing ``BEGIN SOLUTION`` / ``END SOLUTION`` as a delimiter, even in prose, so outside
solution cells the space in those words becomes a no-break space (it looks the same).

Put the written files in ``source/<assignment>/`` of an nbgrader course and run
``nbgrader generate_assignment <assignment>``; nbgrader, not the course package, then
executes the submissions (``autograde``). Like ``transformer-book grade`` it is not a
sandbox.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import nbformat

from transformer_book.course.assignments import (
    make_student_notebook,
    read_notebooks,
    require_apart,
    write_own_notebooks,
)
from transformer_book.course.exercise_cells import annotate
from transformer_book.util.validation import BookError

KEY = "exercise"
_DELIMITER = re.compile(r"(BEGIN|END) (SOLUTION)")
_FENCE = re.compile(r"^(`{3,}|:{3,})")
TEST_CELL = '''\
# Autograder test for exercise {id} ({points} point{plural}): the package's checker.
from transformer_book.course.exercises.core import run_check

result = run_check("{id}", {function})
print(result.message)
assert result.passed, result.message
'''


def _nbgrader(grade_id: str, *, solution: bool = False, grade: bool = False,
              locked: bool = False, points: int | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"schema_version": 3, "grade_id": grade_id, "solution": solution,
                            "grade": grade, "locked": locked, "task": False}
    if grade:
        meta["points"] = points
    return meta


def _exercise(cell: Any) -> dict:
    value = cell.metadata.get(KEY)
    return value if isinstance(value, dict) else {}


def _model_answer(source: str) -> str:
    """The text of a ``{solution}`` directive cell: fences and ``:option:`` lines dropped."""
    lines = [line for line in source.splitlines()
             if not _FENCE.match(line.strip()) and not re.match(r"^:\w+:", line.strip())]
    return "\n".join(lines).strip()


def _master_cells(master: Any) -> tuple[dict[tuple[str, str], Any], dict[str, dict]]:
    """``({(id, cell type): solution cell}, {id: statement metadata})`` of the master: a code
    exercise may have both a solution code cell and a written ``{solution}``."""
    solutions, statements = {}, {}
    for cell in master.cells:
        meta = _exercise(cell)
        if meta.get("role") == "solution":
            solutions[str(meta["id"]), cell.cell_type] = cell
        elif "kind" in meta:
            statements[str(meta["id"])] = meta
    return solutions, statements


def _grade_id(exercise_id: str, part: str) -> str:
    return "ex-" + exercise_id.replace(".", "-") + "-" + part


def make_nbgrader_notebook(master: Any, name: str) -> Any:
    """The nbgrader source version of the master notebook ``master`` (a new notebook; the
    master's missing exercise metadata is filled in a copy, as ``read_exercises`` does)."""
    master = nbformat.from_dict(nbformat.reads(nbformat.writes(master), as_version=4))
    annotate(master, name)
    solutions, statements = _master_cells(master)
    source = make_student_notebook(master, name)
    setup = True
    for index, cell in enumerate(source.cells):
        meta = _exercise(cell)
        exercise_id, role = str(meta.get("id")), meta.get("role")
        points = int(statements.get(exercise_id, {}).get("points", 1))
        setup = (setup and cell.cell_type == "code") or index == 0
        if role == "solution" and cell.cell_type == "code":
            if (exercise_id, "code") not in solutions:
                raise BookError(f"{name}, cell {index}: exercise {exercise_id} has no "
                                "solution cell in the master notebook")
            cell.source = solutions[exercise_id, "code"].source
            cell.metadata["nbgrader"] = _nbgrader(_grade_id(exercise_id, "solution"),
                                                  solution=True)
            continue
        cell.source = _DELIMITER.sub("\\1\u00a0\\2", cell.source)
        if role == "check":
            found = re.search(r"""check\(\s*["'][^"']+["']\s*,\s*(?P<fn>[A-Za-z_]\w*)""",
                              cell.source)
            if not found:
                raise BookError(f"{name}, cell {index}: the check cell of {exercise_id} "
                                "names no function")
            cell.source = TEST_CELL.format(id=exercise_id, points=points, function=found["fn"],
                                           plural="" if points == 1 else "s")
            cell.metadata["nbgrader"] = _nbgrader(_grade_id(exercise_id, "test"), grade=True,
                                                  locked=True, points=points)
        elif role == "answer":
            model = solutions.get((exercise_id, "markdown"))
            cell.source = _model_answer(model.source) if model else cell.source
            cell.metadata["nbgrader"] = _nbgrader(_grade_id(exercise_id, "answer"),
                                                  solution=True, grade=True, points=points)
        elif "kind" in meta:
            cell.metadata["nbgrader"] = _nbgrader(_grade_id(exercise_id, "statement"),
                                                  locked=True)
        elif setup:
            cell.metadata["nbgrader"] = _nbgrader(f"setup-{index}", locked=True)
    return source


def make_nbgrader_sources(source_dir: Path | str, out_dir: Path | str,
                          argument: str = "out_dir") -> list[Path]:
    """Write the nbgrader source version of every ``source_dir/*.ipynb`` into ``out_dir``
    (same names); returns the written paths. As for
    :func:`~transformer_book.course.assignments.make_assignments`, ``out_dir`` apart from
    ``source_dir``, every notebook readable, every conversion done and no file it did not
    write in the way before the first file is written."""
    source_dir, out_dir = Path(source_dir), Path(out_dir)
    require_apart(out_dir, "out_dir", {"source_dir": source_dir})
    converted = [(path.name, make_nbgrader_notebook(notebook, path.name))
                 for path, notebook in read_notebooks(source_dir)]
    return write_own_notebooks(converted, out_dir, argument)
