"""scripts/course_tables.py: a chapter whose stored outputs reused a cached model gives the
first run's time (the recorded time plus that model's training) beside the later runs'."""

from __future__ import annotations

import importlib.util

import nbformat
from notebook_utils import NOTEBOOKS, ROOT

spec = importlib.util.spec_from_file_location("course_tables",
                                              ROOT / "scripts" / "course_tables.py")
course_tables = importlib.util.module_from_spec(spec)
spec.loader.exec_module(course_tables)


def _cell(source: str, start: str, end: str, printed: str = "") -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["execution"] = {"iopub.execute_input": f"2026-01-01T00:{start}Z",
                                  "shell.execute_reply": f"2026-01-01T00:{end}Z"}
    if printed:
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=printed)]
    return cell


def _chapter(tmp_path, training_cell: nbformat.NotebookNode):
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# 10 Training"),
        _cell("import torch", "00:00.0", "00:01.0"), training_cell,
        _cell("print(1)", "40:19.0", "40:20.0")])
    path = tmp_path / "10_training.ipynb"
    nbformat.write(notebook, path)
    return path


def test_a_cached_model_adds_its_training_to_the_first_run(tmp_path):
    printed = "chapter 10's model: 800 steps, 17.6 min of training on cpu (2 threads)\n"
    # The cell took a second, far less than the 17.6 minutes: the model was in the cache.
    cached = _cell("run = train_chapter10_model(device)", "00:01.0", "00:02.0", printed)
    path = _chapter(tmp_path, cached)
    notebook = nbformat.read(path, as_version=4)
    notebook.cells[3] = _cell("print(1)", "00:19.0", "00:20.0")
    nbformat.write(notebook, path)
    chapters, _ = course_tables.tables([path])
    row = next(line for line in chapters.splitlines() if "10 Training" in line)
    assert "| 17.9 min the first time, 20 s after |" in row
    assert "**17.9 min**" in chapters, "the total counts the first run"
    assert "17.6 min of training when the outputs were made, taken from its cached run" \
        in chapters


def test_a_run_that_trained_keeps_its_recorded_time(tmp_path):
    printed = "chapter 10's model: 800 steps, 17.6 min of training on cpu (2 threads)\n"
    trained = _cell("run = train_chapter10_model(device)", "00:01.0", "18:00.0", printed)
    chapters, _ = course_tables.tables([_chapter(tmp_path, trained)])
    row = next(line for line in chapters.splitlines() if "10 Training" in line)
    assert "| 40.3 min the first time, 22.7 min after |" in row
    assert "taken from its cached run" not in chapters


def test_chapters_without_a_cached_model_show_their_recorded_time():
    chapters, _ = course_tables.tables(NOTEBOOKS[:1])
    assert "the first time" not in chapters and "the first run trains" not in chapters
