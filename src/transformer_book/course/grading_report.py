"""``transformer-book grade``: grade a class's submitted notebooks, write the gradebook.

Layout of ``SUBMISSIONS`` (a folder, or one ``.ipynb`` file): the **student** is the first
folder below ``SUBMISSIONS`` holding the notebook (``SUBMISSIONS/alice/05_self_attention.ipynb``
and nbgrader's ``submitted/alice/ps1/05_self_attention.ipynb`` are alice's), or, for a
notebook directly in ``SUBMISSIONS``, the file's stem (``SUBMISSIONS/alice.ipynb``). A
notebook is matched to a master of ``--source`` by its file name, else by the exercise ids
in its cell metadata, else by its ``NN_`` chapter prefix.

Every submitted file is read into memory before the first notebook runs. Each submission
then runs in a fresh kernel (:func:`~transformer_book.course.grading.run_submission`: one
thread, a time limit per cell and per notebook, errors allowed) in a **scratch folder of
its own**, ``<tmp>/transformer-book-grade-*/notebooks/``, holding a copy of that notebook
alone; the environment names none of ``--source``, ``--out`` and ``SUBMISSIONS``
(:func:`~transformer_book.course.grading.kernel_environment`), and the folder is deleted
after. A submission that deletes, renames or overwrites files in its working folder or in
``..`` changes nothing of the instructor's. Each code exercise is graded by the installed
package's checker; points come from the masters' metadata. Written exercises are marked by
hand: ``--marks marks.csv`` (``student,exercise,points,comment``) merges the marks
(:mod:`~transformer_book.course.gradebook`).

Writes into ``--out`` (refused if it is a file, or equal to, inside or holding ``--source``
or ``SUBMISSIONS``, before anything runs):

* ``grades.csv``: one row per student: ``student``, one points column per exercise of the
  chapters submitted (a written answer not yet marked: empty), ``total`` (points earned),
  ``out_of`` (points of every exercise), ``to_mark`` (written answers waiting for a mark)
  and ``notes`` (one clear line per problem: not valid JSON, not a course notebook, a
  syntax error, a timeout, a dead kernel, a missing or borrowed function, ``; ``-separated);
* ``grades.json``: the same with every exercise's status and message;
* ``feedback/<student>.md``: each exercise's message, the written answers, the hand marks
  and comments, the problems (one file per student, see
  :func:`~transformer_book.course.gradebook.feedback_names`).

A submission that cannot be read or run costs its own points and never stops the run.
This is **not a sandbox**: students' code runs with your rights; for isolation run
``grade`` in a container.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat

from transformer_book.course.assignments import make_student_notebook, require_apart
from transformer_book.course.gradebook import (
    apply_marks,
    feedback_names,
    merge_row,
    read_marks,
    shown,
    write_gradebook,
)
from transformer_book.course.grading import (
    ExerciseSpec,
    course_exercises,
    kernel_environment,
    run_submission,
)
from transformer_book.util.validation import bad_input, require

_PREFIX = re.compile(r"^(?P<chapter>\d\d)_")


@dataclass(frozen=True)
class Submission:
    """One submitted file, the student it belongs to (a name as the file system gives it,
    undecodable bytes as surrogates), and its bytes, read before any notebook runs."""

    student: str
    path: Path
    data: bytes | None = None
    error: str | None = None


def find_submissions(root: Path) -> list[Submission]:
    """Every ``*.ipynb`` under ``root`` (checkpoints and hidden folders skipped), read."""
    root = Path(root)
    if root.is_file():
        paths = [(root.stem, root)]
    else:
        paths = []
        for path in sorted(root.rglob("*.ipynb")):
            parts = path.relative_to(root).parts
            if not any(p.startswith(".") for p in parts):
                paths.append((parts[0] if len(parts) > 1 else path.stem, path))
    found = []
    for student, path in paths:
        refused = _not_a_plain_file(root, path)
        if refused is not None:  # never followed or opened: it could be any file, or block
            found.append(Submission(student, path, None, refused))
            continue
        try:
            found.append(Submission(student, path, path.read_bytes()))
        except OSError as error:
            found.append(Submission(student, path, None, error.strerror or str(error)))
    return found


def _not_a_plain_file(root: Path, path: Path) -> str | None:
    """Why ``path`` (under ``root``) is not read: a symbolic link, in a linked folder, or
    not a regular file (a FIFO would block the grader); ``None`` for a plain file."""
    here = root
    for part in path.relative_to(root).parts if path != root else ():
        here = here / part
        if here.is_symlink():
            return ("a symbolic link, not followed (it may point to any file, the master "
                    "included)" if here == path else f"in a linked folder ({part})")
    try:
        mode = os.lstat(path).st_mode
    except OSError as error:
        return error.strerror or str(error)
    return None if stat.S_ISREG(mode) else "not a regular file (a pipe, a device ...)"


def _by_name(name: str, masters: dict[str, list[ExerciseSpec]]) -> str | None:
    """The master a file named ``name`` is a copy of, by its name or its chapter prefix."""
    if name in masters:
        return name
    prefix = _PREFIX.match(name)
    return next((m for m in masters if prefix and m.startswith(prefix.group(0))), None)


def identify(path: Path, notebook: Any, masters: dict[str, list[ExerciseSpec]]) -> str | None:
    """The master ``path`` is a copy of: same name, same exercise ids, or same chapter."""
    if path.name in masters:
        return path.name
    ids = {c.metadata.get("exercise", {}).get("id") for c in notebook.cells
           if isinstance(c.metadata.get("exercise"), dict)}
    for name, specs in masters.items():
        if specs and {s.id for s in specs} <= ids:
            return name
    return _by_name(path.name, masters)


def _answers(notebook: Any) -> dict[str, str]:
    found: dict[str, str] = {}
    for cell in notebook.cells:
        meta = cell.metadata.get("exercise")
        if isinstance(meta, dict) and meta.get("role") == "answer":
            found[str(meta.get("id"))] = cell.source.strip()
    return found


def _placeholders(master: Path) -> dict[str, str]:
    """The answer cells' text in the student copy of ``master`` (an untouched answer)."""
    try:
        copy = make_student_notebook(nbformat.read(master, as_version=4), master.name)
    except Exception:  # an older or broken master: every non-empty answer counts
        return {}
    return _answers(copy)


def _code_result(spec: ExerciseSpec, record: dict, run: Any) -> tuple[str, str]:
    """``(status, message)`` of one code exercise from its grading record."""
    status, name = record.get("status"), spec.function
    if status == "missing":
        return "missing", (f"✗ Exercise {spec.id}: the notebook defines no `{name}`: its cell "
                           "was deleted or renamed, or failed before defining it")
    if status == "no verdict":
        why = run.died or record.get("error") or "the grading cell printed no verdict"
        if "Timeout" in str(why):
            why = "its check ran past the time limit and was interrupted (an endless loop?)"
        return "not graded", f"✗ Exercise {spec.id} not graded: {why}"
    module = record.get("module")
    if record.get("origin") or module != "__main__":
        origin = record.get("origin") or f"{module}.{name}"
        return "borrowed", (f"✗ Exercise {spec.id} failed: `{name}` is {origin}, not a "
                            "function written in the notebook; 0 points")
    return str(status), str(record.get("message", ""))


def _unreadable(result: dict, reason: str, masters: dict[str, list[ExerciseSpec]]) -> dict:
    """One reason for a file that could not be read: its chapter's exercises (if its name
    says which) are 0 points for that reason, not also "not submitted"."""
    result["notes"].append(f"{result['name']}: {reason}; not graded")
    name = _by_name(Path(result["name"]).name, masters)
    if name is not None:
        result["notebook"] = name
        for spec in masters[name]:
            result["exercises"][spec.id] = {
                "status": "unreadable", "points": 0,
                "message": f"✗ Exercise {spec.id} not graded: {result['name']} is {reason}."}
    return result


def _written(spec: ExerciseSpec, answers: dict[str, str], blanks: dict[str, str]) -> dict:
    text = answers.get(spec.id, "")
    answered = bool(text) and text != blanks.get(spec.id)
    return {"status": "answered" if answered else "blank", "points": None if answered else 0,
            "message": (f"Exercise {spec.id} (written) is marked by hand." if answered else
                        f"Exercise {spec.id} (written): no answer written; 0 points."),
            "answer": text if answered else ""}


def _run_in_scratch(notebook: Any, data: bytes, name: str, specs: list[ExerciseSpec],
                    protected: list[Path], cell_timeout: float, notebook_timeout: float
                    ) -> Any:
    """Run one submission in a new scratch folder holding a copy of it alone, deleted after."""
    with tempfile.TemporaryDirectory(prefix="transformer-book-grade-",
                                     ignore_cleanup_errors=True) as scratch:
        workdir = Path(scratch) / "notebooks"
        workdir.mkdir()
        (workdir / name).write_bytes(data)
        return run_submission(notebook, specs, cell_timeout=cell_timeout,
                              notebook_timeout=notebook_timeout, workdir=workdir,
                              env=kernel_environment(protected, workdir))


def _kernel_did_not_start(error: Exception) -> bool:
    """Whether ``error`` is a kernel that never came up (nothing of the notebook ran), which
    a second start in a new scratch folder may cure: ``jupyter_client`` chooses free ports
    and the kernel binds them a moment later, so a kernel starting beside it can take one."""
    text = str(error)
    return "Kernel didn't respond" in text or "Address already in use" in text


def grade_notebook(submission: Submission, masters: dict[str, list[ExerciseSpec]],
                   source: Path, protected: list[Path], cell_timeout: float,
                   notebook_timeout: float) -> dict[str, Any]:
    """Grade one submitted file: ``{"file", "name", "notebook", "exercises": {id: ...},
    "notes", "errors", "seconds"}``; ``protected``: the folders its kernel must not be
    pointed to (:func:`_run_in_scratch`)."""
    path = submission.path
    name = shown(path.name)
    result: dict[str, Any] = {"file": shown(str(path)), "name": name, "notebook": None,
                              "exercises": {}, "notes": [], "errors": [], "seconds": 0.0}
    if submission.data is None:
        return _unreadable(result, f"a file that could not be read ({submission.error})",
                           masters)
    try:
        notebook = nbformat.reads(submission.data.decode("utf-8"), as_version=4)
    except Exception as error:  # not JSON, not a notebook, not UTF-8
        reason = " ".join(str(error).split())[:160]
        return _unreadable(result, f"not a readable notebook (not valid JSON or not "
                           f"nbformat 4: {reason})", masters)
    master = identify(path, notebook, masters)
    if master is None:
        result["notes"].append(f"{name}: not one of the course's notebooks "
                               f"({', '.join(masters)}); not graded")
        return result
    result["notebook"] = master
    specs = masters[master]
    answers, blanks = _answers(notebook), _placeholders(source / master)
    for attempt in (1, 2):
        try:
            run = _run_in_scratch(notebook, submission.data, master, specs, protected,
                                  cell_timeout, notebook_timeout)
            break
        except Exception as error:  # the kernel would not start, or nbclient failed
            if attempt == 1 and _kernel_did_not_start(error):
                continue  # e.g. its port was taken between being chosen and bound: again
            result["notes"].append(f"{name}: could not be run ({error!r}); not graded")
            return result
    result["seconds"], result["errors"] = round(run.seconds, 1), run.errors
    serious = [e for e in run.errors if re.search(r"SyntaxError|IndentationError|Timeout|ran "
                                                  r"past", e)]
    result["notes"] += [f"{master}: {e}" for e in serious] + ([f"{master}: {run.died}"]
                                                               if run.died else [])
    for spec in specs:
        if spec.kind != "code":
            result["exercises"][spec.id] = _written(spec, answers, blanks)
            continue
        status, message = _code_result(spec, run.records.get(spec.id, {}), run)
        if status in ("missing", "borrowed", "not graded"):
            result["notes"].append(f"{master}: {message.removeprefix('✗ ')}")
        result["exercises"][spec.id] = {"status": status, "message": message,
                                        "points": spec.points if status == "passed" else 0}
    return result


def _check_paths(submissions: Path, out: Path, source: Path) -> dict[str, list[ExerciseSpec]]:
    """Everything ``grade_class`` can refuse before a notebook runs; the masters."""
    if not submissions.exists():
        raise bad_input("SUBMISSIONS", "a folder of submitted notebooks or one .ipynb", submissions)
    require_apart(out, "--out", {"--source": source, "SUBMISSIONS": submissions})
    scratch = Path(tempfile.gettempdir()).resolve()
    for option, path in (("--source", source), ("--out", out), ("SUBMISSIONS", submissions)):
        inside = scratch == path.resolve() or path.resolve() in scratch.parents
        require(not inside, "TMPDIR", f"a temporary folder outside {option} (the "
                "submissions' scratch folders are made there)", f"{scratch}, inside {path}")
    masters = course_exercises(source)
    if not any(masters.values()):
        raise bad_input("--source", "master notebooks whose cells declare exercises "
                   "(metadata 'exercise')", source)
    return masters


def _sorted_specs(specs: Any) -> list[ExerciseSpec]:
    return sorted(specs, key=lambda s: [int(p) if p.isdigit() else p for p in s.id.split(".")])


def grade_class(submissions: Path | str, out: Path | str, *, source: Path | str = "notebooks",
                marks: Path | str | None = None, cell_timeout: float = 600,
                notebook_timeout: float = 1800, jobs: int = 1, progress: bool = True
                ) -> list[dict]:
    """Grade every notebook under ``submissions`` against the masters in ``source``, ``jobs``
    kernels at a time, merge the hand ``marks`` (a CSV file, checked before anything runs);
    write the gradebook into ``out`` and return its rows (one per student, by name)."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    from tqdm.auto import tqdm

    submissions, out, source = Path(submissions), Path(out), Path(source)
    masters = _check_paths(submissions, out, source)
    found = find_submissions(submissions)
    students = sorted({sub.student for sub in found}, key=shown)
    hand = read_marks(marks, [shown(s) for s in students],
                      _sorted_specs(s for v in masters.values() for s in v)) if marks else {}
    protected = [source, out, submissions, *([Path(marks)] if marks else [])]
    results: list[dict | None] = [None] * len(found)
    with ThreadPoolExecutor(max_workers=jobs) as pool, tqdm(
            total=len(found), desc="grading", unit="notebook", disable=not progress) as bar:
        futures = {pool.submit(grade_notebook, sub, masters, source, protected, cell_timeout,
                               notebook_timeout): index for index, sub in enumerate(found)}
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            bar.update()
    graded: dict[str, list[dict]] = {}
    for sub, result in zip(found, results, strict=True):
        graded.setdefault(sub.student, []).append(result)
    chapters = {r["notebook"] for r in results if r and r["notebook"]}
    chapters |= {n for n, v in masters.items() for s in v if any(k[1] == s.id for k in hand)}
    specs = _sorted_specs(s for name in chapters for s in masters[name])
    files = feedback_names([shown(s) for s in students])
    rows = []
    for student in students:
        row = merge_row(shown(student), graded[student], specs)
        row["feedback"] = files[row["student"]]
        if row["feedback"] != f"{row['student']}.md":
            row["notes"].append(f"feedback in feedback/{row['feedback']} (the name "
                                f"{row['student']!r} is not a safe file name as it is, or "
                                "another student's reads the same)")
        rows.append(row)
    apply_marks(rows, specs, hand)
    out.mkdir(parents=True, exist_ok=True)
    write_gradebook(rows, specs, out)
    return rows
