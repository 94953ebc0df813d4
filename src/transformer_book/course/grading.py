"""Grading submitted notebooks: the exercises a chapter declares, and one notebook's run.

The master notebooks (``notebooks/NN_*.ipynb``) declare their exercises in cell metadata
(``metadata["exercise"]``, written by ``scripts/sync_notebooks.py``):

* the statement cell: ``{"id": "NN.K", "kind": "code" | "written", "points": int}``
  (points default to 1; change them there to weight an exercise),
* the solution cell ``{"id", "role": "solution"}``, the cell calling ``check("NN.K", fn)``
  ``{"id", "role": "check"}`` and, in student copies, a written exercise's answer cell
  ``{"id", "role": "answer"}``.

:func:`read_exercises` reads that contract (with the function name from each check cell);
:func:`run_submission` executes one submitted notebook in a fresh kernel with
``nbclient`` and grades each code exercise with the checker of the *installed* package.
After the student's own cells it appends one cell per exercise that drops every
``transformer_book`` module from ``sys.modules``, imports the checkers afresh and calls
:func:`~transformer_book.course.exercises.core.run_check` on the student's function, found
by the name the master's check cell uses; the verdict comes back as a JSON line carrying a
marker drawn at random for this run. Whatever the student did to ``check``, to its module
or to the check cell is therefore ignored.

The kernel runs in a scratch folder of the caller's choosing (``workdir``) with the
environment :func:`kernel_environment` gives it: the grader's, less every value that names
a protected folder (the masters, the gradebook, the submissions), so that neither its
working folder, nor ``..``, nor a variable leads a submission to the instructor's files.

This is **not a sandbox**: the student's code runs with the grader's rights, and a
determined student can still reach any file the grader may (a path typed in full, the
grader's command line in ``/proc``) or cheat (patch ``torch`` itself, write to the
installed package, read the marker; patch ``json.dumps``, ``sys.stdout`` or the import
system, through which each verdict leaves the kernel, so that a wrong answer reads as
passed; start a process with ``setsid`` that outlives the kernel and rewrites the
gradebook afterwards). Run ``transformer-book grade`` in a container to isolate it.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

from transformer_book.course.exercise_cells import annotate
from transformer_book.util.validation import bad_input

KEY = "exercise"
_CHECK_CALL = r"""\bcheck\(\s*["']{id}["']\s*,\s*(?P<name>[A-Za-z_]\w*)"""
_TITLES = (re.compile(r"\{exercise\}[ \t]*(?P<title>.*)"),
           re.compile(r"^#+[ \t]*(?P<title>.+)$", re.M))
THREADS = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg"}


@dataclass(frozen=True)
class ExerciseSpec:
    """One exercise as its master notebook declares it.

    ``function`` is the name the check cell passes to ``check`` (``None`` for a written
    exercise); ``notebook`` is the master's file name, e.g. ``"05_self_attention.ipynb"``.
    """

    id: str
    notebook: str
    kind: str
    points: int
    function: str | None
    title: str


def _meta(cell: Any) -> dict:
    value = cell.get("metadata", {}).get(KEY)
    return value if isinstance(value, dict) else {}


def _title(source: str) -> str:
    """The exercise's title: the ``{exercise}`` directive's, else the cell's last heading."""
    for pattern in _TITLES:
        found = [m["title"].strip() for m in pattern.finditer(source)]
        if found:
            return found[-1]
    return ""


def read_exercises(path: Path | str) -> list[ExerciseSpec]:
    """The exercises of the master notebook ``path``, in order, from its cell metadata.

    A code exercise's function is read from its check cell, ``check("NN.K", name)``; an
    exercise without ``points`` is worth 1. Metadata the markup implies but the file lacks
    (a chapter not yet synced by ``scripts/sync_notebooks.py``) is filled in memory by
    :func:`~transformer_book.course.exercise_cells.annotate`, which keeps set points.
    """
    path = Path(path)
    notebook = nbformat.read(path, as_version=4)
    annotate(notebook, path.name)
    specs = []
    for cell in notebook.cells:
        meta = _meta(cell)
        if "kind" not in meta or "id" not in meta:
            continue
        exercise_id = str(meta["id"])
        function = None
        if meta["kind"] == "code":
            pattern = re.compile(_CHECK_CALL.format(id=re.escape(exercise_id)))
            for other in notebook.cells:
                found = pattern.search(other.source) if other.cell_type == "code" else None
                if found and _meta(other).get("role") == "check":
                    function = found["name"]
                    break
        title = re.sub(rf"^{re.escape(exercise_id)}\W*", "", _title(cell.source))
        specs.append(ExerciseSpec(exercise_id, path.name, str(meta["kind"]),
                                  int(meta.get("points", 1)), function, title))
    return specs


def course_exercises(source_dir: Path | str, argument: str = "--source"
                     ) -> dict[str, list[ExerciseSpec]]:
    """``{notebook name: its exercises}`` for every master ``source_dir/*.ipynb``; a master
    that is not a readable notebook is refused (``BookError``) naming it."""
    found = {}
    for path in sorted(Path(source_dir).glob("*.ipynb")):
        try:
            found[path.name] = read_exercises(path)
        except Exception as error:  # not JSON, not UTF-8, not a notebook
            reason = " ".join(str(error).split())[:120]
            raise bad_input(argument, "a folder of readable master notebooks (nbformat 4 JSON)",
                       f"{path}: {reason}") from error
    return found


_GRADE_CELL = '''\
def __grade_exercise():
    import builtins, importlib, json, sys
    for name in [m for m in list(sys.modules) if m.split(".")[0] == "transformer_book"]:
        del sys.modules[name]
    core = importlib.import_module("transformer_book.course.exercises.core")
    record = {{"marker": {marker!r}, "id": {exercise_id!r}}}
    candidate = builtins.globals().get({function!r})
    if candidate is None:
        record["status"] = "missing"
    else:
        record["module"] = str(getattr(candidate, "__module__", None))
        record["origin"] = core.foreign_origin(candidate)
        try:
            result = core.run_check({exercise_id!r}, candidate)
            record.update(status=result.status, message=result.message)
        except KeyboardInterrupt:
            raise
        except BaseException as error:
            record.update(status="failed", message=f"the check stopped: {{error!r}}")
    sys.stdout.write("\\n" + json.dumps(record) + "\\n")
    sys.stdout.flush()


__grade_exercise()
'''


@dataclass
class Run:
    """What executing one submission gave: grading records, cell errors, timeouts, a crash."""

    records: dict[str, dict] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    died: str | None = None
    seconds: float = 0.0
    first_grading: int = 0
    grading_errors: dict[int, str] = field(default_factory=dict)


def _error_line(index: int, reply: dict) -> str:
    content = reply.get("content", {})
    return f"cell {index}: {content.get('ename', 'error')}: {content.get('evalue', '')}".strip()


def _record_from(cell: Any, marker: str) -> dict | None:
    found = None
    for output in cell.get("outputs", []):
        for line in str(output.get("text", "")).splitlines():
            if line.startswith('{"marker": ') and marker in line:
                try:
                    found = json.loads(line)
                except json.JSONDecodeError:
                    continue
    return found if found and found.get("marker") == marker else None


def _client(notebook: Any, timeout: float, workdir: Path, run: Run) -> Any:
    from nbclient import NotebookClient

    def on_error(cell: Any, cell_index: int, execute_reply: dict) -> None:
        if cell_index < run.first_grading:
            run.errors.append(_error_line(cell_index, execute_reply))
        else:
            run.grading_errors[cell_index] = _error_line(cell_index, execute_reply)

    return NotebookClient(
        notebook, timeout=timeout, allow_errors=True, interrupt_on_timeout=True,
        error_on_timeout={"ename": "Timeout", "evalue": "the cell ran past its time limit and "
                          "was interrupted"},
        kernel_name="python3", resources={"metadata": {"path": str(workdir)}},
        record_timing=False, on_cell_error=on_error, shutdown_kernel="immediate",
        extra_arguments=["--IPKernelApp.log_level=ERROR"],
    )


def kernel_environment(protected: list[Path], workdir: Path) -> dict[str, str]:
    """The grader's environment for a kernel started in ``workdir``: each value (each
    ``os.pathsep``-separated part of one) naming a ``protected`` folder or a path inside
    it is dropped, ``PWD`` is ``workdir``, ``OLDPWD`` goes, ``TMPDIR`` is ``workdir/../tmp``,
    and the threads are one (:data:`THREADS`)."""
    roots = {str(p) for path in protected for p in (Path(path).absolute(), Path(path).resolve())}

    def names_one(part: str) -> bool:
        return any(root in part for root in roots)

    env = {}
    for key, value in os.environ.items():
        kept = [part for part in value.split(os.pathsep) if not names_one(part)]
        if kept and len(kept) == len(value.split(os.pathsep)):
            env[key] = value
        elif kept and any(kept):
            env[key] = os.pathsep.join(kept)
    env.pop("OLDPWD", None)
    scratch_tmp = workdir.parent / "tmp"
    scratch_tmp.mkdir(exist_ok=True)
    return {**env, "PWD": str(workdir), "TMPDIR": str(scratch_tmp), **THREADS}


def run_submission(notebook: Any, specs: list[ExerciseSpec], *, cell_timeout: float,
                   notebook_timeout: float, workdir: Path,
                   env: dict[str, str] | None = None) -> Run:
    """Execute ``notebook`` (its own cells, then one grading cell per code exercise of
    ``specs``) in a fresh kernel started in ``workdir`` with one thread and the
    environment ``env`` (default: the grader's).

    A cell may run ``cell_timeout`` seconds and the student's cells ``notebook_timeout``
    together; a cell that runs past its limit is interrupted and execution goes on. Errors
    are recorded, never raised; a kernel that dies ends the run (``Run.died``).
    """
    from nbclient.exceptions import DeadKernelError

    marker = "grade-" + secrets.token_hex(12)
    graded = [s for s in specs if s.kind == "code" and s.function]
    first_grading = len(notebook.cells)
    notebook.cells.extend(
        nbformat.v4.new_code_cell(_GRADE_CELL.format(marker=marker, exercise_id=s.id,
                                                     function=s.function))
        for s in graded
    )
    run = Run(first_grading=first_grading)
    client = _client(notebook, cell_timeout, workdir, run)
    start = time.monotonic()
    deadline = start + notebook_timeout
    client.reset_execution_trackers()
    index, out_of_time = -1, False
    try:
        with client.setup_kernel(env={**(os.environ if env is None else env),
                                      **THREADS}):
            for index, cell in enumerate(notebook.cells):
                grading = index >= first_grading
                left = deadline - time.monotonic()
                if cell.cell_type != "code" or (out_of_time and not grading):
                    continue
                if not grading and left <= 0:
                    out_of_time = True
                    run.errors.append(f"cell {index}: the notebook ran past its "
                                      f"{notebook_timeout:g} s; its remaining cells were skipped")
                    continue
                client.timeout = max(1, round(cell_timeout if grading
                                              else min(cell_timeout, left)))
                client.execute_cell(cell, index)
    except DeadKernelError:
        where = "while grading" if index >= first_grading else f"in cell {index}"
        run.died = f"the kernel died {where} (os._exit, a kill or a crash); nothing after it ran"
    run.seconds = time.monotonic() - start
    for offset, (spec, cell) in enumerate(zip(graded, notebook.cells[first_grading:],
                                              strict=True)):
        record = _record_from(cell, marker)
        error = run.grading_errors.get(first_grading + offset)
        run.records[spec.id] = record or {"status": "no verdict", "error": error}
    return run
