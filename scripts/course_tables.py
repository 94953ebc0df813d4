"""Write the instructor guide's two tables from the notebooks into book/figures/generated/.

- Chapters: how long each notebook took to execute (first cell started to last cell
  finished, from the execution metadata that ``make execute`` stores), and its exercises.
  Chapter 10 trains the course's model once and keeps it in the course cache
  (:mod:`transformer_book.course.cache`); a notebook executed with the model already there
  took seconds. Such a chapter prints the training time stored with the cached model
  (``... 800 steps, 17.6 min of training ...``, the run's ``train_seconds``): when its cell
  took much less than that, the model came from the cache, and the table gives the first
  run's time (the recorded time plus that training) beside the later runs' time.
- Exercises: id, title, kind (code / written) and points, from each statement cell's
  ``metadata["exercise"]`` (written by scripts/sync_notebooks.py, kept in student copies).

``make book`` runs it before building; book/instructors.md includes the file.

    python scripts/course_tables.py [--out FOLDER]   # course_chapters.md, course_exercises.md
"""

from __future__ import annotations

import argparse
import re
import sys
from datetime import datetime
from pathlib import Path

import nbformat

from transformer_book.course.exercise_cells import EXERCISE_OPEN

ROOT = Path(__file__).resolve().parents[1]
HEADING = re.compile(r"^#+[ \t]*Exercise[ \t]+(?P<title>.+)$", re.M)
OUT = ROOT / "book" / "figures" / "generated"
#: What chapter 10 prints of its cached model: ``800 steps, 17.6 min of training``.
TRAINED = re.compile(r"\b\d[\d,]* steps, (?P<minutes>\d+(?:\.\d+)?) min of training\b")


def execution_seconds(notebook: nbformat.NotebookNode) -> float | None:
    """Seconds from the first cell's start to the last cell's reply, or None if not stored."""
    stamps = []
    for cell in notebook.cells:
        execution = cell.get("metadata", {}).get("execution", {})
        if "iopub.execute_input" in execution and "shell.execute_reply" in execution:
            stamps.append((execution["iopub.execute_input"], execution["shell.execute_reply"]))
    if not stamps:
        return None
    start, end = (datetime.fromisoformat(s.replace("Z", "+00:00")) for s in
                  (stamps[0][0], stamps[-1][1]))
    return (end - start).total_seconds()


def cell_seconds(cell: nbformat.NotebookNode) -> float | None:
    """Seconds from ``cell``'s start to its reply, or None if not stored."""
    execution = cell.get("metadata", {}).get("execution", {})
    if "iopub.execute_input" not in execution or "shell.execute_reply" not in execution:
        return None
    start, end = (datetime.fromisoformat(execution[key].replace("Z", "+00:00"))
                  for key in ("iopub.execute_input", "shell.execute_reply"))
    return (end - start).total_seconds()


def cached_training(notebook: nbformat.NotebookNode) -> tuple[float, bool] | None:
    """``(training seconds, whether the recorded execution skipped them)`` of the model a
    chapter trains once and caches, read from the line its stored output prints
    (``TRAINED``); the training was skipped when the cell took under half that time (the
    model came from the cache). None when no cell prints such a line."""
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            text = output.get("text", "") if output.get("output_type") == "stream" else ""
            match = TRAINED.search(text if isinstance(text, str) else "".join(text))
            if match:
                trained = float(match["minutes"]) * 60
                took = cell_seconds(cell)
                return trained, took is not None and took < trained / 2
    return None


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "not recorded"
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def declared_exercises(notebook: nbformat.NotebookNode) -> list[tuple[str, str, str, int]]:
    """``(id, title, kind, points)`` of each statement cell's ``metadata["exercise"]`` (master
    notebooks and student copies alike), the title from its directive or heading."""
    found = []
    for cell in notebook.cells:
        meta = cell.metadata.get("exercise", {})
        if "kind" not in meta:
            continue
        match = EXERCISE_OPEN.search(cell.source) or HEADING.search(cell.source)
        title = match["title"].strip() if match else ""
        title = title.removeprefix(f"{meta['id']} · ")
        found.append((meta["id"], title, meta["kind"], int(meta.get("points", 1))))
    return found


def _title(notebook: nbformat.NotebookNode, path: Path) -> str:
    first = notebook.cells[0].source.splitlines() if notebook.cells else []
    heading = next((line[2:].strip() for line in first if line.startswith("# ")), path.stem)
    return f"[{heading}](../notebooks/{path.stem}.ipynb)"


def tables(paths: list[Path]) -> tuple[str, str]:
    """The two Markdown tables (module doc)."""
    chapters = ["| Chapter | Time to run | Code exercises | Written exercises | Points |",
                "| --- | --- | --- | --- | --- |"]
    rows = ["| Exercise | Title | Kind | Points |", "| --- | --- | --- | --- |"]
    total, notes = 0.0, []
    for path in paths:
        notebook = nbformat.read(path, as_version=4)
        exercises = declared_exercises(notebook)
        seconds = execution_seconds(notebook)
        time, first_run = _duration(seconds), seconds
        training = cached_training(notebook) if seconds is not None else None
        if training is not None:
            trained, skipped = training
            first_run = seconds + trained if skipped else seconds
            later = seconds if skipped else max(seconds - trained, 0.0)
            time = f"{_duration(first_run)} the first time, {_duration(later)} after"
            notes.append(f"{_title(notebook, path)}: the first run trains the course's model "
                         f"({_duration(trained)} of training when the outputs were made"
                         f"{', taken from its cached run' if skipped else ''}); later runs, "
                         "and the chapters that reuse the model, load it from the course "
                         "cache.")
        total += first_run or 0.0
        for exercise_id, title, kind, points in exercises:
            title = title.replace("|", "\\|")
            rows.append(f"| {exercise_id} | {title} | {kind} | {points} |")
        kinds = [kind for _, _, kind, _ in exercises]
        points = [points for *_, points in exercises]
        chapters.append(f"| {_title(notebook, path)} | {time} | "
                        f"{kinds.count('code')} | {kinds.count('written')} | {sum(points)} |")
    chapters.append(f"| **All chapters** | **{_duration(total)}** | | | |")
    table = "\n".join(chapters) + "\n"
    if notes:
        table += "\n" + "\n\n".join(notes) + "\n"
    return table, "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="folder to write into")
    args = parser.parse_args(argv)
    paths = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    args.out.mkdir(parents=True, exist_ok=True)
    names = ("course_chapters.md", "course_exercises.md")
    for name, text in zip(names, tables(paths), strict=True):
        (args.out / name).write_text(text, encoding="utf-8")
        print(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
