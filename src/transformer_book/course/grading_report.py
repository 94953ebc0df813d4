"""``transformer-book grade``: grade a class's submitted notebooks, write the gradebook.

Layout of ``SUBMISSIONS`` (a folder, or one ``.ipynb`` file): the **student** is the first
folder below ``SUBMISSIONS`` holding the notebook (``SUBMISSIONS/alice/05_self_attention.ipynb``
and nbgrader's ``submitted/alice/ps1/05_self_attention.ipynb`` are alice's), or, for a
notebook directly in ``SUBMISSIONS``, the file's stem (``SUBMISSIONS/alice.ipynb``). A
notebook is matched to a master of ``--source`` by its file name, else by the exercise ids
in its cell metadata, else by its ``NN_`` chapter prefix.

Each submission runs in a fresh kernel (:func:`~transformer_book.course.grading.run_submission`:
one thread, a time limit per cell and per notebook, errors allowed), started in the
``--source`` folder as the chapters are (their relative paths, such as ``../results``,
resolve), and each code exercise is graded by the installed package's checker; points come
from the masters' metadata.
Written exercises are not graded automatically: their CSV column is headed ``NN.K (manual)``
and holds ``manual`` (an answer was written; its text is in the feedback) or ``blank``.

Writes into ``--out``:

* ``grades.csv``: one row per student: ``student``, one column per exercise of the chapters
  submitted (code: points earned; written: ``manual``/``blank``), ``total`` (points earned),
  ``out_of`` (points of the code exercises) and ``notes`` (one clear line per problem: not
  valid JSON, not a course notebook, a syntax error, a timeout, a dead kernel, a missing or
  borrowed function, ``; ``-separated);
* ``grades.json``: the same with every exercise's status and message;
* ``feedback/<student>.md``: each exercise's message, the written answers, the problems.

A submission that cannot be read or run costs its own points and never stops the run.
This is **not a sandbox**: students' code runs with your rights; for isolation run
``grade`` in a container.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import nbformat

from transformer_book.course.assignments import make_student_notebook
from transformer_book.course.grading import ExerciseSpec, course_exercises, run_submission
from transformer_book.util.files import atomic_write_json, atomic_write_text, require_writable
from transformer_book.util.validation import fail

_PREFIX = re.compile(r"^(?P<chapter>\d\d)_")


@dataclass(frozen=True)
class Submission:
    """One submitted file and the student it belongs to."""

    student: str
    path: Path


def find_submissions(root: Path) -> list[Submission]:
    """Every ``*.ipynb`` under ``root`` (checkpoints and hidden folders skipped)."""
    root = Path(root)
    if root.is_file():
        return [Submission(root.stem, root)]
    found = []
    for path in sorted(root.rglob("*.ipynb")):
        parts = path.relative_to(root).parts
        if any(p.startswith(".") for p in parts):
            continue
        found.append(Submission(parts[0] if len(parts) > 1 else path.stem, path))
    return found


def identify(path: Path, notebook: Any, masters: dict[str, list[ExerciseSpec]]) -> str | None:
    """The master ``path`` is a copy of: same name, same exercise ids, or same chapter."""
    if path.name in masters:
        return path.name
    ids = {c.metadata.get("exercise", {}).get("id") for c in notebook.cells
           if isinstance(c.metadata.get("exercise"), dict)}
    for name, specs in masters.items():
        if specs and {s.id for s in specs} <= ids:
            return name
    prefix = _PREFIX.match(path.name)
    for name in masters:
        if prefix and name.startswith(prefix.group(0)):
            return name
    return None


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


def grade_notebook(path: Path, masters: dict[str, list[ExerciseSpec]], source: Path,
                   cell_timeout: float, notebook_timeout: float) -> dict[str, Any]:
    """Grade one submitted file: ``{"notebook", "exercises": {id: ...}, "notes", "errors"}``."""
    result: dict[str, Any] = {"file": str(path), "notebook": None, "exercises": {},
                              "notes": [], "errors": [], "seconds": 0.0}
    try:
        notebook = nbformat.reads(path.read_text(encoding="utf-8"), as_version=4)
    except Exception as error:  # not JSON, not a notebook, not UTF-8
        reason = " ".join(str(error).split())[:160]
        result["notes"].append(f"{path.name}: not a readable notebook (not valid JSON or "
                               f"not nbformat 4: {reason}); not graded")
        return result
    name = identify(path, notebook, masters)
    if name is None:
        result["notes"].append(f"{path.name}: not one of the course's notebooks "
                               f"({', '.join(masters)}); not graded")
        return result
    result["notebook"] = name
    specs = masters[name]
    answers, blanks = _answers(notebook), _placeholders(source / name)
    try:  # in the masters' folder, where the chapters' relative paths (../results) resolve
        run = run_submission(notebook, specs, cell_timeout=cell_timeout,
                             notebook_timeout=notebook_timeout, workdir=source.resolve())
    except Exception as error:  # the kernel would not start, or nbclient failed
        result["notes"].append(f"{path.name}: could not be run ({error!r}); not graded")
        return result
    result["seconds"], result["errors"] = round(run.seconds, 1), run.errors
    serious = [e for e in run.errors if re.search(r"SyntaxError|IndentationError|Timeout|ran "
                                                  r"past", e)]
    result["notes"] += [f"{name}: {e}" for e in serious] + ([f"{name}: {run.died}"]
                                                             if run.died else [])
    for spec in specs:
        if spec.kind != "code":
            text = answers.get(spec.id, "")
            answered = bool(text) and text != blanks.get(spec.id)
            result["exercises"][spec.id] = {
                "status": "manual" if answered else "blank", "points": None,
                "message": f"Exercise {spec.id} (written) is graded by hand.",
                "answer": text if answered else ""}
            continue
        status, message = _code_result(spec, run.records.get(spec.id, {}), run)
        if status in ("missing", "borrowed", "not graded"):
            result["notes"].append(f"{name}: {message.removeprefix('✗ ')}")
        result["exercises"][spec.id] = {"status": status, "message": message,
                                        "points": spec.points if status == "passed" else 0}
    return result


def _merge(student: str, results: list[dict], specs: list[ExerciseSpec]) -> dict[str, Any]:
    """One student's row from their graded files; exercises not submitted get 0."""
    row: dict[str, Any] = {"student": student, "exercises": {}, "notes": [], "files": results}
    for result in results:
        row["notes"] += result["notes"]
        for exercise_id, graded in result["exercises"].items():
            if exercise_id in row["exercises"]:
                row["notes"].append(f"{result['file']}: a second copy of exercise "
                                    f"{exercise_id}; the first one counts")
                continue
            row["exercises"][exercise_id] = graded
    for spec in specs:
        row["exercises"].setdefault(spec.id, {
            "status": "not submitted", "points": 0 if spec.kind == "code" else None,
            "message": f"Exercise {spec.id}: {spec.notebook} was not submitted."})
    row["total"] = sum(e["points"] or 0 for e in row["exercises"].values())
    row["out_of"] = sum(s.points for s in specs if s.kind == "code")
    return row


def csv_header(spec: ExerciseSpec) -> str:
    """``"05.1"`` for a code exercise, ``"05.4 (manual)"`` for a written one."""
    return spec.id if spec.kind == "code" else f"{spec.id} (manual)"


def write_gradebook(rows: list[dict], specs: list[ExerciseSpec], out: Path) -> None:
    """``grades.csv``, ``grades.json`` and ``feedback/<student>.md`` in ``out``."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["student", *(csv_header(s) for s in specs), "total", "out_of", "notes"])
    for row in rows:
        cells = []
        for spec in specs:
            graded = row["exercises"][spec.id]
            cells.append(graded["points"] if spec.kind == "code"
                         else ("manual" if graded["status"] == "manual" else "blank"))
        writer.writerow([row["student"], *cells, row["total"], row["out_of"],
                         "; ".join(row["notes"])])
    (out / "feedback").mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "grades.csv", buffer.getvalue())
    atomic_write_json(out / "grades.json", {
        "graded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "exercises": [vars(s) for s in specs], "students": rows})
    for row in rows:
        atomic_write_text(out / "feedback" / f"{_safe(row['student'])}.md", feedback(row, specs))


def _safe(name: str) -> str:
    return re.sub(r"[^\w.-]+", "_", name) or "student"


def feedback(row: dict, specs: list[ExerciseSpec]) -> str:
    """A student's feedback in Markdown: every exercise's verdict, answers and problems."""
    manual = sum(1 for s in specs if s.kind != "code")
    lines = [f"# Feedback for {row['student']}", "",
             f"Automatically graded: {row['total']} of {row['out_of']} points. "
             f"Written exercises graded by hand: {manual}.", ""]
    for spec in specs:
        graded = row["exercises"][spec.id]
        worth = (f"{graded['points']}/{spec.points}" if spec.kind == "code"
                 else "written, graded by hand")
        lines.append(f"- **{spec.id}** {spec.title} ({worth}): {graded['message']}")
        if graded.get("answer"):
            lines += ["", *("  > " + line for line in graded["answer"].splitlines()), ""]
        elif spec.kind != "code" and graded["status"] == "blank":
            lines.append("  (no answer written)")
    problems = row["notes"] + [f"{Path(r['file']).name}: {e}" for r in row["files"]
                               for e in r["errors"] if f": {e}" not in " ".join(row["notes"])]
    if problems:
        lines += ["", "## Problems", "", *(f"- {p}" for p in problems)]
    return "\n".join(lines) + "\n"


def grade_class(submissions: Path | str, out: Path | str, *, source: Path | str = "notebooks",
                cell_timeout: float = 600, notebook_timeout: float = 1800, jobs: int = 1,
                progress: bool = True) -> list[dict]:
    """Grade every notebook under ``submissions`` against the masters in ``source``, ``jobs``
    kernels at a time; write the gradebook into ``out`` and return its rows (one per
    student, sorted by name)."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    from tqdm.auto import tqdm

    submissions, out, source = Path(submissions), Path(out), Path(source)
    if not submissions.exists():
        raise fail("SUBMISSIONS", "a folder of submitted notebooks or one .ipynb", submissions)
    masters = course_exercises(source)
    if not any(masters.values()):
        raise fail("--source", "master notebooks whose cells declare exercises "
                   "(metadata 'exercise')", source)
    out.mkdir(parents=True, exist_ok=True)
    require_writable(out, "--out")
    found = find_submissions(submissions)
    results: list[dict | None] = [None] * len(found)
    with ThreadPoolExecutor(max_workers=jobs) as pool, tqdm(
            total=len(found), desc="grading", unit="notebook", disable=not progress) as bar:
        futures = {pool.submit(grade_notebook, sub.path, masters, source, cell_timeout,
                               notebook_timeout): index for index, sub in enumerate(found)}
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            bar.update()
    graded: dict[str, list[dict]] = {}
    for sub, result in zip(found, results, strict=True):
        graded.setdefault(sub.student, []).append(result)
    chapters = {r["notebook"] for r in results if r and r["notebook"]}
    specs = sorted((s for name in chapters for s in masters[name]),
                   key=lambda s: [int(p) if p.isdigit() else p for p in s.id.split(".")])
    rows = [_merge(student, graded[student], specs) for student in sorted(graded)]
    write_gradebook(rows, specs, out)
    return rows
