"""The gradebook ``transformer-book grade`` writes: rows, hand marks, safe names, the files.

One row per student holds every exercise of the chapters graded, each with its ``status``,
``points`` and ``message``. A code exercise's points come from its check; a written one
has none until the instructor marks it (``points`` is ``None``: "to mark"), except a blank
answer, which is worth 0. Hand marks come from a CSV file (:func:`read_marks`, header
``student,exercise,points,comment``) and may mark any exercise, a code one included (the
mark then replaces the check's points); :func:`apply_marks` merges them, and the totals
count every exercise's points.

Student names are folder names, which may be any bytes the file system allows:
:func:`shown` makes them printable (bytes that are not UTF-8 become ``\\xNN``), and
:func:`feedback_names` gives every student a feedback file of their own, even when two
names read the same once made safe for a file name (``a b`` and ``a_b``).
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from transformer_book.course.grading import ExerciseSpec
from transformer_book.util.files import atomic_write_json, atomic_write_text
from transformer_book.util.validation import bad_input, require

MARKS_HEADER = ["student", "exercise", "points", "comment"]


#: The longest stem of a feedback file (far inside the 255 bytes file systems allow).
MAX_STEM = 100


def shown(name: str) -> str:
    """``name`` (a file or folder name, maybe holding undecodable bytes as surrogates)
    as printable UTF-8 text: each byte that is not UTF-8 becomes ``\\xNN``."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def _safe(name: str) -> str:
    """``name`` as a file name's stem: ASCII letters, digits, ``.``, ``_``, ``-``, at most
    ``MAX_STEM`` characters (a longer one is cut and gets its hash: every file system holds
    it, where a 250-byte name made the grader crash after every notebook had run)."""
    safe = re.sub(r"[^\w.-]+", "_", name, flags=re.ASCII).lstrip(".") or "student"
    if len(safe) <= MAX_STEM:
        return safe
    return f"{safe[:MAX_STEM - 7]}-{hashlib.sha256(os.fsencode(name)).hexdigest()[:6]}"


def feedback_names(students: list[str]) -> dict[str, str]:
    """``{student: feedback file name}``, one file per student: ``alice.md``; students whose
    names read the same once made safe (``a b``, ``a_b`` -> ``a_b``) each get a suffix from
    their own name's hash, ``a_b-1f3a9c.md``, so no feedback overwrites another's."""
    stems: dict[str, list[str]] = {}
    for student in students:
        stems.setdefault(_safe(student).lower(), []).append(student)
    names = {}
    for group in stems.values():
        for student in group:
            suffix = "" if len(group) == 1 else "-" + hashlib.sha256(
                os.fsencode(student)).hexdigest()[:6]
            names[student] = f"{_safe(student)}{suffix}.md"
    return names


def _number(text: str) -> float | int:
    value = float(text)
    return int(value) if value.is_integer() else value


def read_marks(path: Path | str, students: list[str], specs: list[ExerciseSpec],
               argument: str = "--marks") -> dict[tuple[str, str], dict[str, Any]]:
    """``{(student, exercise id): {"points", "comment"}}`` from the CSV file ``path``
    (header ``student,exercise,points,comment``). Refused, naming the line: a student not
    in ``students`` (names as :func:`shown` prints them), an exercise not in ``specs``,
    points that are not a number from 0 to the exercise's points, a mark given twice."""
    path = Path(path)
    require(path.is_file(), argument, "a CSV file of hand marks (student,exercise,points,"
            "comment)", f"{path}, {'a folder' if path.is_dir() else 'no such file'}")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise bad_input(argument, "a readable UTF-8 CSV file", f"{path}: {error}") from error
    rows = list(csv.reader(io.StringIO(text)))
    header = [h.strip().lower() for h in rows[0]] if rows else []
    require(header[:3] == MARKS_HEADER[:3], argument, f"a CSV file whose first line is "
            f"{','.join(MARKS_HEADER)}", f"{path}, first line {rows[0] if rows else 'empty'}")
    points_of = {s.id: s.points for s in specs}
    known = set(students)
    marks: dict[tuple[str, str], dict[str, Any]] = {}
    for number, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        where = f"{argument} {path} line {number}"
        cells = [*row, "", "", "", ""][:4]
        student, exercise, points, comment = (c.strip() for c in cells)
        require(student in known, where, f"a student of the class ({', '.join(sorted(known))})",
                repr(student))
        require(exercise in points_of, where, "an exercise of the course's notebooks",
                repr(exercise))
        try:
            value = _number(points)
        except ValueError:
            raise bad_input(where, f"points as a number for {exercise}", repr(points)) from None
        require(math.isfinite(value) and 0 <= value <= points_of[exercise], where,
                f"points from 0 to {points_of[exercise]} for exercise {exercise}", points)
        require((student, exercise) not in marks, where,
                f"one mark per student and exercise ({student}, {exercise} marked twice)",
                points)
        marks[student, exercise] = {"points": value, "comment": comment}
    return marks


def merge_row(student: str, results: list[dict], specs: list[ExerciseSpec]) -> dict[str, Any]:
    """One student's row from their graded files; exercises of chapters they did not
    submit are 0 ("not submitted")."""
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
            "status": "not submitted", "points": 0,
            "message": f"Exercise {spec.id}: {spec.notebook} was not submitted."})
    return row


def apply_marks(rows: list[dict], specs: list[ExerciseSpec],
                marks: dict[tuple[str, str], dict[str, Any]]) -> None:
    """Merge the hand ``marks`` into ``rows`` (in place) and count every row's ``total``
    (points earned), ``out_of`` (points of every exercise) and ``to_mark`` (exercises
    waiting for a hand mark)."""
    for row in rows:
        for spec in specs:
            mark = marks.get((row["student"], spec.id))
            graded = row["exercises"][spec.id]
            if mark is not None:
                graded.update(status="marked", points=mark["points"],
                              comment=mark["comment"], marked_by_hand=True)
        row["total"] = _number(str(sum(row["exercises"][s.id]["points"] or 0 for s in specs)))
        row["out_of"] = sum(s.points for s in specs)
        row["to_mark"] = [s.id for s in specs if row["exercises"][s.id]["points"] is None]


def _summary(row: dict, specs: list[ExerciseSpec]) -> str:
    """``Total: 5 of 8 points. Code exercises (graded automatically): 3 of 4 points.
    Written exercises (4, 4 points): 1 marked by hand, 2 to mark, 2 points so far.``"""
    written = [s for s in specs if s.kind != "code"]
    code = [s for s in specs if s.kind == "code"]
    graded = row["exercises"]
    auto = sum(graded[s.id]["points"] or 0 for s in code)
    line = (f"Total: {row['total']} of {row['out_of']} points. Code exercises (graded "
            f"automatically): {_number(str(auto))} of {sum(s.points for s in code)} points.")
    if written:
        marked = sum(1 for s in written if graded[s.id].get("marked_by_hand"))
        waiting = sum(1 for s in written if graded[s.id]["points"] is None)
        earned = _number(str(sum(graded[s.id]["points"] or 0 for s in written)))
        line += (f" Written exercises ({len(written)}, {sum(s.points for s in written)} "
                 f"points): {marked} marked by hand, {waiting} to mark, {earned} points "
                 "so far.")
    return line


def feedback(row: dict, specs: list[ExerciseSpec]) -> str:
    """A student's feedback in Markdown: every exercise's verdict, answers, hand marks and
    comments, and the problems met (one reason per file)."""
    lines = [f"# Feedback for {row['student']}", "", _summary(row, specs), ""]
    for spec in specs:
        graded = row["exercises"][spec.id]
        points = "to be marked" if graded["points"] is None else graded["points"]
        kind = "" if spec.kind == "code" else "written, "
        lines.append(f"- **{spec.id}** {spec.title} ({kind}{points}/{spec.points}): "
                     f"{graded['message']}")
        if graded.get("marked_by_hand"):
            lines.append(f"  Marked by hand: {graded['points']}/{spec.points}"
                         + (f". {graded['comment']}" if graded.get("comment") else ""))
        if graded.get("answer"):
            lines += ["", *("  > " + line for line in graded["answer"].splitlines()), ""]
        elif spec.kind != "code" and graded["status"] == "blank":
            lines.append("  (no answer written)")
    joined = " ".join(row["notes"])
    problems = row["notes"] + [f"{r['name']}: {e}" for r in row["files"]
                               for e in r["errors"] if f": {e}" not in joined]
    if problems:
        lines += ["", "## Problems", "", *(f"- {p}" for p in problems)]
    return "\n".join(lines) + "\n"


def write_gradebook(rows: list[dict], specs: list[ExerciseSpec], out: Path) -> None:
    """``grades.csv``, ``grades.json`` and ``feedback/<file>.md`` (``row["feedback"]``) in
    ``out``. ``grades.csv``: ``student``, one points column per exercise (empty: a written
    answer to mark), ``total``, ``out_of``, ``to_mark`` (ids, space-separated), ``notes``."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["student", *(s.id for s in specs), "total", "out_of", "to_mark", "notes"])
    for row in rows:
        cells = ["" if row["exercises"][s.id]["points"] is None
                 else row["exercises"][s.id]["points"] for s in specs]
        writer.writerow([row["student"], *cells, row["total"], row["out_of"],
                         " ".join(row["to_mark"]), "; ".join(row["notes"])])
    (out / "feedback").mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "grades.csv", buffer.getvalue())
    atomic_write_json(out / "grades.json", {
        "graded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "exercises": [vars(s) for s in specs], "students": rows})
    for row in rows:
        atomic_write_text(out / "feedback" / row["feedback"], feedback(row, specs))
