"""``transformer-book assignments --nbgrader``: nbgrader 0.9's generate_assignment and
autograde accept the sources, with graded cells and points.

Round trip with nbgrader's own API in a temporary course (gradebook in sqlite) on chapters
00 and 05, cut to a lean imports cell and their exercise sections so that each autograde
run costs seconds: a submission with the master's solutions scores every code point, an
unattempted one scores 0, and written answers wait for manual grading.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
import pytest
from notebook_utils import NOTEBOOKS

from transformer_book.cli import main as cli_main
from transformer_book.course.exercise_cells import annotate
from transformer_book.course.grading import read_exercises

CHAPTERS = ("00_how_to_use.ipynb", "05_self_attention.ipynb")
pytestmark = pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")  # nbgrader's own
IMPORTS = ("import math\n\nimport torch\n\nfrom transformer_book.course.exercises import check\n"
           "from transformer_book.nn.attention import scaled_dot_product_attention")


def _lean_master(path, out):
    notebook = nbformat.read(path, as_version=4)
    annotate(notebook, path.name)  # a no-op once the chapter carries the metadata
    first = next(i for i, c in enumerate(notebook.cells) if c.metadata.get("exercise"))
    notebook.cells = [notebook.cells[0], nbformat.v4.new_code_cell(IMPORTS),
                      *notebook.cells[first:]]
    nbformat.write(notebook, out / path.name)


def make_course(tmp):
    """nbgrader sources written by the CLI into a course under ``tmp``, then released."""
    from nbgrader.apps import NbGraderAPI
    from traitlets.config import Config

    (tmp / "masters").mkdir()
    for path in NOTEBOOKS:
        if path.name in CHAPTERS:
            _lean_master(path, tmp / "masters")
    root = tmp / "course"
    assert cli_main(["assignments", "--nbgrader", "--source", str(tmp / "masters"),
                     "--out", str(root / "source" / "ps1")]) == 0
    config = Config()
    config.CourseDirectory.root = str(root)
    config.CourseDirectory.db_url = f"sqlite:///{tmp / 'gradebook.db'}"
    config.ExecutePreprocessor.timeout = 120
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    bin_dir = str(Path(sys.executable).parent)  # nbgrader runs `alembic` from PATH
    if bin_dir not in os.environ["PATH"].split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ["PATH"]
    api = NbGraderAPI(config=config)
    generated = api.generate_assignment("ps1")
    assert generated["success"], generated.get("error") or generated.get("log")
    return tmp, root, api, config


def _submit(root, student, solved):
    for name in CHAPTERS:
        release = nbformat.read(root / "release" / "ps1" / name, as_version=4)
        source = nbformat.read(root / "source" / "ps1" / name, as_version=4)
        for cell, original in zip(release.cells, source.cells, strict=True):
            if solved and cell.metadata.get("nbgrader", {}).get("solution"):
                cell.source = original.source
        folder = root / "submitted" / student / "ps1"
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(release, folder / name)


def test_nbgrader_round_trip(tmp_path):
    """One test, so that pytest-xdist builds the course once: sources, release, autograde."""
    course = make_course(tmp_path)
    sources_have_graded_cells_and_points(*course[:2])
    autograde_scores_a_solved_and_an_unattempted_submission(*course)


def sources_have_graded_cells_and_points(tmp, root):
    for name in CHAPTERS:
        specs = read_exercises(tmp / "masters" / name)
        cells = nbformat.read(root / "source" / "ps1" / name, as_version=4).cells
        meta = [c.metadata["nbgrader"] for c in cells if "nbgrader" in c.metadata]
        ids = [m["grade_id"] for m in meta]
        assert len(ids) == len(set(ids)) and all(m["schema_version"] == 3 for m in meta)
        tests = {m["grade_id"]: m["points"] for m in meta if m["grade"] and not m["solution"]}
        manual = {m["grade_id"]: m["points"] for m in meta if m["grade"] and m["solution"]}
        assert tests == {f"ex-{s.id.replace('.', '-')}-test": s.points for s in specs
                         if s.kind == "code"}
        assert manual == {f"ex-{s.id.replace('.', '-')}-answer": s.points for s in specs
                          if s.kind == "written"}
        release = nbformat.read(root / "release" / "ps1" / name, as_version=4)
        text = "\n".join(c.source for c in release.cells)
        assert "BEGIN SOLUTION" not in text and "raise NotImplementedError" in text
        for cell in cells:  # the model answers are in the source, not in the release
            if cell.metadata.get("nbgrader", {}).get("grade_id", "").endswith("-answer"):
                assert cell.source and cell.source not in text


def autograde_scores_a_solved_and_an_unattempted_submission(tmp, root, api, config):
    from nbgrader.api import Gradebook

    _submit(root, "alice", solved=True)
    _submit(root, "bob", solved=False)
    for student in ("alice", "bob"):
        result = api.autograde("ps1", student)
        assert result["success"], result.get("error") or result.get("log")
    code = sum(s.points for name in CHAPTERS for s in read_exercises(tmp / "masters" / name)
               if s.kind == "code")
    with Gradebook(config.CourseDirectory.db_url) as gradebook:
        alice = gradebook.find_submission("ps1", "alice")
        bob = gradebook.find_submission("ps1", "bob")
        assert alice.code_score == code and bob.code_score == 0
        assert alice.max_code_score == code
        assert alice.needs_manual_grade  # the written answers
        grade = gradebook.find_grade("ex-00-1-test", "00_how_to_use", "ps1", "alice")
        assert grade.auto_score == grade.max_score == 1
