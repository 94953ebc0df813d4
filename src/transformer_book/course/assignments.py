"""Student versions of the chapters: solutions stripped, plain Markdown, outputs cleared.

Coding exercises mark their solution with nbgrader's delimiters::

    def softmax(x, dim=-1):
        ### BEGIN SOLUTION
        shifted = x - x.max(dim=dim, keepdim=True).values
        ...
        ### END SOLUTION

:func:`make_student_notebook` replaces everything between the markers by
``raise NotImplementedError("Exercise 00.1: ...")`` at the marker's indentation, removes
cells tagged ``solution`` (written answers) and ``book-only`` (text about the book itself),
rewrites the book's MyST markup as Markdown that JupyterLab, Colab and GitHub render, adds
an answer cell under each written exercise and clears every output and cell tag. The
exercise id is read from the first ``check("NN.K", ...)`` call at or after the solution
cell, so the notebook states it once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import nbformat

from transformer_book.course.exercise_cells import (
    BEGIN,
    END,
    KEY,
    expected_metadata,
    find_exercises,
    has_solution_markers,
    solution_label_of,
)
from transformer_book.course.plain_markdown import read_citations, to_plain_markdown
from transformer_book.util.files import (
    atomic_write_json,
    atomic_write_text,
    require_writable,
    sha256_file,
)
from transformer_book.util.validation import BookError, bad_input, require

__all__ = ["BEGIN", "END", "MarkerError", "make_assignments", "make_student_notebook",
           "read_notebooks", "require_apart", "strip_solution", "write_notebook_atomically",
           "write_own_notebooks"]
SOLUTION_TAG = "solution"
BOOK_ONLY_TAG = "book-only"
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


def _answer_cell(exercise_id: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_markdown_cell(
        f"**Your answer to exercise {exercise_id}:**\n\n*Write your answer here.*",
        metadata={KEY: {"id": exercise_id, "role": "answer"}},
    )
    cell["id"] = "answer-" + exercise_id.replace(".", "-")
    return cell


def _is_solution_cell(cell: nbformat.NotebookNode) -> bool:
    meta = cell.metadata.get(KEY)
    role = meta.get("role") if isinstance(meta, dict) else None
    return (
        SOLUTION_TAG in _tags(cell)
        or (cell.cell_type == "markdown" and (role == "solution" or solution_label_of(cell)))
    )


def _student_cell(cell, index, cells, name, citations, exercise) -> nbformat.NotebookNode:
    """One kept cell: markup made plain, solutions stubbed, outputs and metadata dropped;
    ``exercise``: its ``metadata["exercise"]`` (or None)."""
    metadata = {KEY: exercise} if exercise else {}
    if cell.cell_type == "markdown":
        student = nbformat.v4.new_markdown_cell(to_plain_markdown(cell.source, citations))
    elif cell.cell_type == "code":
        source = cell.source
        if has_solution_markers(cell):
            where = f"{name}, cell {index}"
            source = strip_solution(source, exercise_id_for(cells, index), where=where)
        student = nbformat.v4.new_code_cell(source)
    else:
        student = nbformat.v4.new_raw_cell(cell.source)
    student.metadata = nbformat.from_dict(metadata)
    student["id"] = cell.get("id", student["id"])
    return student


def make_student_notebook(
    notebook: nbformat.NotebookNode, name: str, citations: dict | None = None
) -> nbformat.NotebookNode:
    """Return the student version of ``notebook`` (a new notebook); ``name`` is used in errors.

    Solutions go (``solution`` cells and ``{solution}`` directives; code between the markers
    becomes ``raise NotImplementedError``), so do cells tagged ``book-only``; the book's MyST
    markup becomes plain Markdown (:mod:`~transformer_book.course.plain_markdown`, citations
    from ``citations``: key -> (authors, year)); every written exercise gets an
    answer cell; outputs, execution counts, tags and timing metadata are dropped; each cell's
    ``metadata["exercise"]`` is kept.
    """
    citations = citations or {}
    cells = notebook.cells
    exercises = find_exercises(notebook, name, strict=False)
    written = {e.statement: e.id for e in exercises if e.kind == "written"}
    metadata = expected_metadata(notebook, name, strict=False)
    kept = []
    for index, cell in enumerate(cells):
        if _is_solution_cell(cell) or BOOK_ONLY_TAG in _tags(cell):
            continue
        kept.append(_student_cell(cell, index, cells, name, citations, metadata.get(index)))
        if index in written:
            kept.append(_answer_cell(written[index]))
    kept_metadata = {k: v for k, v in notebook.metadata.items()
                     if k in ("kernelspec", "language_info")}
    student = nbformat.v4.new_notebook(cells=kept, metadata=kept_metadata)
    student.nbformat_minor = max(notebook.get("nbformat_minor", 5), 5)
    return student


def write_notebook_atomically(notebook: nbformat.NotebookNode, path: Path) -> None:
    """Validate ``notebook`` and write it to ``path`` atomically
    (:func:`~transformer_book.util.files.atomic_write_text`: 0644 under umask 022)."""
    nbformat.validate(notebook)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = nbformat.writes(notebook)
    atomic_write_text(path, text if text.endswith("\n") else text + "\n")  # as nbformat.write


def default_bibliography(source_dir: Path) -> Path | None:
    """``book/references.bib`` of the repository ``source_dir`` sits in, if there is one."""
    for folder in (source_dir.resolve(), *source_dir.resolve().parents):
        candidate = folder / "book" / "references.bib"
        if candidate.is_file():
            return candidate
    return None


def require_apart(out: Path | str, argument: str, inputs: dict[str, Path | str]) -> Path:
    """Refuse, before anything is written, an output folder ``out`` (the option
    ``argument``) that is an existing file, that this user cannot write, or that is equal to,
    inside or holding one of ``inputs`` (``{option: path}``): a command never writes over
    its own input. Returns ``out``."""
    out = Path(out)
    require_writable(out, argument)
    where = out.resolve()
    for option, path in inputs.items():
        there = Path(path).resolve()
        if where == there or there in where.parents or where in there.parents:
            relation = ("equal to" if where == there else
                        "inside" if there in where.parents else "holding")
            raise bad_input(argument, f"a folder apart from {option} (neither it, inside it, nor "
                       "holding it: the command would write over its own input)",
                       f"{out}, {relation} {option} {path}")
    return out


def read_notebooks(source_dir: Path | str, argument: str = "source_dir"
                   ) -> list[tuple[Path, nbformat.NotebookNode]]:
    """Every ``source_dir/*.ipynb`` read (nbformat 4), in name order, before anything is
    written: a folder without notebooks, or a file that is not a notebook (not JSON, not
    UTF-8, not nbformat), is refused naming it."""
    source_dir = Path(source_dir)
    paths = sorted(source_dir.glob("*.ipynb"))
    if not paths:
        raise bad_input(argument, "a folder with .ipynb files", source_dir)
    notebooks = []
    for path in paths:
        try:
            notebooks.append((path, nbformat.reads(path.read_text(encoding="utf-8"),
                                                   as_version=4)))
        except Exception as error:  # not JSON, not UTF-8, not a notebook, unreadable
            reason = " ".join(str(error).split())[:120]
            raise bad_input(argument, "folder of readable notebooks (nbformat 4 JSON)",
                       f"{path}: {reason}") from error
    return notebooks


def make_assignments(
    source_dir: Path | str, out_dir: Path | str, *, bibliography: Path | str | None = None,
    argument: str = "out_dir",
) -> list[Path]:
    """Write a student version of every ``source_dir/*.ipynb`` into ``out_dir``, same names.

    Citations are read from ``bibliography`` (default: the repository's
    ``book/references.bib``). Returns the written paths. Everything is checked before the
    first file is written: ``out_dir`` apart from ``source_dir`` (:func:`require_apart`),
    every notebook readable (:func:`read_notebooks`) and its markers balanced
    (:class:`MarkerError`, a ``BookError``, naming the notebook and cell), and no file in
    ``out_dir`` it would replace but did not write (:func:`write_own_notebooks`; refusals
    name ``argument``).
    """
    source_dir, out_dir = Path(source_dir), Path(out_dir)
    require_apart(out_dir, "out_dir", {"source_dir": source_dir})
    notebooks = read_notebooks(source_dir)
    bibliography = bibliography or default_bibliography(source_dir)
    citations = read_citations(bibliography) if bibliography else {}
    students = [(path.name, make_student_notebook(notebook, path.name, citations))
                for path, notebook in notebooks]
    return write_own_notebooks(students, out_dir, argument)


#: In a folder notebooks were written into: each one's name and SHA-256 as written.
WRITTEN = ".transformer-book-written.json"


def write_own_notebooks(notebooks: Sequence[tuple[str, nbformat.NotebookNode]],
                        out_dir: Path | str, argument: str = "out_dir") -> list[Path]:
    """Write each ``(name, notebook)`` into ``out_dir`` (atomically), never over a file this
    did not write: a notebook of the same name is replaced only if ``WRITTEN`` lists it
    with the hash it still has (a student's own notebook, or one edited since, is kept).
    Everything is checked before the first file is written; returns the written paths."""
    out_dir = Path(out_dir)
    try:
        listed = json.loads((out_dir / WRITTEN).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        listed = {}
    own = listed if isinstance(listed, dict) else {}

    def ours(path: Path) -> bool:
        if not path.exists() and not path.is_symlink():
            return True
        try:
            return (path.is_file() and not path.is_symlink()
                    and own.get(path.name) == sha256_file(path))
        except OSError:
            return False

    strangers = [name for name, _ in notebooks if not ours(out_dir / name)]
    require(not strangers, argument, "a folder where the notebooks of these names are absent "
            "or as this command wrote them", f"{out_dir}, holding {', '.join(strangers[:3])}"
            f"{' ...' if len(strangers) > 3 else ''}, which it did not write or which were "
            "changed since (move them, or choose another folder)")
    written = []
    for name, notebook in notebooks:
        write_notebook_atomically(notebook, out_dir / name)
        own[name] = sha256_file(out_dir / name)
        written.append(out_dir / name)
    atomic_write_json(out_dir / WRITTEN, own, sort_keys=True)
    return written
