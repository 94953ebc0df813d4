"""Grading a class end to end with ``transformer-book grade``, and checks that refuse borrowed
answers.

The class is generated here from the master notebooks of two light chapters, 00 and 05:
each student's notebook is the student copy (``make_student_notebook``) cut to its
exercises (a lean imports cell, then the exercise section, so that each kernel costs
seconds), changed the way that student changed it. The CSV is asserted cell by cell.
"""

from __future__ import annotations

import csv
import json
import os
import re
import tempfile
from pathlib import Path

import nbformat
import torch
from notebook_utils import NOTEBOOKS

from transformer_book.cli import main as cli_main
from transformer_book.course.assignments import make_student_notebook
from transformer_book.course.exercise_cells import annotate
from transformer_book.course.exercises.core import foreign_origin, run_check
from transformer_book.course.grading import read_exercises
from transformer_book.nn.attention import scaled_dot_product_attention
from transformer_book.util.files import sha256_file

CHAPTERS = {"00": "00_how_to_use.ipynb", "05": "05_self_attention.ipynb"}
IMPORTS = {
    "00": "import torch\n\nfrom transformer_book.course.exercises import check",
    "05": "import math\n\nimport torch\n\nfrom transformer_book.course.exercises import check\n"
          "from transformer_book.nn.attention import scaled_dot_product_attention",
}
WRONG = "def softmax(x, dim=-1):\n    return x.exp() / x.exp().sum(dim=dim, keepdim=True)\n"
LOOP = "def softmax(x, dim=-1):\n    while True:  # forever, asleep\n        time.sleep(0.05)\n"
TAMPER = '''\
import transformer_book.course.exercises.core as core

core.REGISTRY["00.1"] = core.Exercise("00.1", "softmax", lambda f: "anything")
core.run_check = lambda exercise_id, f: core.CheckResult(exercise_id, "passed", "sure")


def check(exercise_id, f):
    print(f"✓ Exercise {exercise_id} passed")
'''


def _master(tmp, chapter):
    source = next(p for p in NOTEBOOKS if p.name == CHAPTERS[chapter])
    notebook = nbformat.read(source, as_version=4)
    annotate(notebook, source.name)  # a no-op once the chapter carries the metadata
    nbformat.write(notebook, tmp / source.name)
    return notebook


def _student(master, chapter):
    """The student copy cut to a lean imports cell and the exercise section."""
    copy = make_student_notebook(master, CHAPTERS[chapter])
    first = next(i for i, c in enumerate(copy.cells) if c.metadata.get("exercise"))
    copy.cells = [nbformat.v4.new_code_cell(IMPORTS[chapter]), *copy.cells[first:]]
    return copy


def _cell(notebook, exercise_id, role):
    return next(c for c in notebook.cells if c.metadata.get("exercise") == {
        "id": exercise_id, "role": role})


def _solve(student, master, ids):
    for exercise_id in ids:
        _cell(student, exercise_id, "solution").source = _cell(master, exercise_id,
                                                              "solution").source
    return student


def _write(root, student, notebook, name):
    folder = root / student if student else root
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, folder / name)


def _make_class(root, masters, students):
    """Write every student's submission under ``root``; see each case's comment."""
    m00, m05 = masters["00"], masters["05"]
    alice = _solve(students("00"), m00, ["00.1"])  # correct, with written answers
    _cell(alice, "00.2", "answer").source = "Because e^{-c} cancels."
    _cell(alice, "00.3", "answer").source = "One-hot, then uniform."
    _write(root, "alice", alice, CHAPTERS["00"])
    specs05 = read_exercises(root.parent / "masters" / CHAPTERS["05"])
    alice05 = _solve(students("05"), m05, [s.id for s in specs05 if s.kind == "code"])
    for spec in specs05:
        if spec.kind == "written":
            _cell(alice05, spec.id, "answer").source = f"My answer to {spec.id}."
    _write(root, "alice", alice05, CHAPTERS["05"])
    bob = students("00")  # wrong: overflows on logits near 1000
    _cell(bob, "00.1", "solution").source = WRONG
    _write(root, "bob", bob, CHAPTERS["00"])
    _write(root, "carol", students("00"), CHAPTERS["00"])  # not attempted
    dave = students("00")  # syntax error
    _cell(dave, "00.1", "solution").source = "def softmax(x, dim=-1)\n    return x\n"
    _write(root, "dave", dave, CHAPTERS["00"])
    erin = students("00")  # an endless loop
    _cell(erin, "00.1", "solution").source = "import time\n\n\n" + LOOP
    _write(root, "erin", erin, CHAPTERS["00"])
    frank = _solve(students("00"), m00, ["00.1"])  # a correct answer, and a dead kernel
    frank.cells.insert(1, nbformat.v4.new_code_cell("import os\n\nos._exit(1)"))
    _write(root, "frank", frank, CHAPTERS["00"])
    grace = students("00")  # a wrong answer behind a tampered checker
    _cell(grace, "00.1", "solution").source = WRONG
    grace.cells.insert(1, nbformat.v4.new_code_cell(TAMPER))
    _write(root, "grace", grace, CHAPTERS["00"])
    heidi = students("05")  # the package's own function, and torch's
    name = {s.id: s.function for s in specs05}
    _cell(heidi, "05.1", "solution").source = f"{name['05.1']} = scaled_dot_product_attention"
    _cell(heidi, "05.2", "solution").source = f"{name['05.2']} = torch.softmax"
    _write(root, "heidi", heidi, CHAPTERS["05"])
    other = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('hello')")])
    _write(root, "ivan", other, "homework.ipynb")  # not a course notebook
    (root / "judy").mkdir()
    (root / "judy" / CHAPTERS["00"]).write_text('{"cells": [{"cell_type": "code", "sour')
    ken = students("00")  # the exercise's cell deleted
    ken.cells.remove(_cell(ken, "00.1", "solution"))
    _write(root, "ken", ken, CHAPTERS["00"])
    leo = students("00")  # flat layout (student = file stem), the function renamed
    _cell(leo, "00.1", "solution").source = _cell(m00, "00.1", "solution").source.replace(
        "def softmax", "def my_softmax")
    _write(root, None, leo, "leo.ipynb")


def grade_the_class(tmp):
    """Generate the class under ``tmp`` and grade it with the CLI; the CSV's rows by student."""
    (tmp / "masters").mkdir()
    masters = {chapter: _master(tmp / "masters", chapter) for chapter in CHAPTERS}
    _make_class(tmp / "class", masters, lambda chapter: _student(masters[chapter], chapter))
    code = cli_main(["grade", str(tmp / "class"), "--out", str(tmp / "out"), "--source",
                     str(tmp / "masters"), "--timeout", "30", "--jobs", "3", "--quiet"])
    assert code == 0
    with open(tmp / "out" / "grades.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return {row["student"]: row for row in rows}


STUDENTS = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan",
            "judy", "ken", "leo"]


def columns(tmp):
    """The CSV header and every student's expected cells, from the masters' exercises:
    alice answered everything (code: full points, written: waiting for a hand mark, an
    empty cell), nobody else scores (a blank or missing written answer is 0)."""
    specs = [s for name in CHAPTERS.values() for s in read_exercises(tmp / "masters" / name)]
    header = ["student", *(s.id for s in specs), "total", "out_of", "to_mark", "notes"]
    code = str(sum(s.points for s in specs if s.kind == "code"))
    out_of = str(sum(s.points for s in specs))
    written = " ".join(s.id for s in specs if s.kind != "code")
    expected = {}
    for student in STUDENTS:
        right = student == "alice"
        cells = [(str(s.points) if right else "0") if s.kind == "code" else
                 ("" if right else "0") for s in specs]
        expected[student] = [*cells, code if right else "0", out_of, written if right else ""]
    return header, expected


NOTES = {  # student: what the notes column must say ("" = nothing)
    "alice": [], "bob": [], "carol": [], "grace": [],
    "dave": [r"cell \d+: SyntaxError", r"defines no `softmax`"],
    "erin": [r"cell \d+: Timeout", r"00\.1 not graded: its check ran past the time limit"],
    "frank": [r"the kernel died in cell 1 ", r"00\.1 not graded: the kernel died"],
    "heidi": [r"05\.1 failed: `\w+` is "
              r"transformer_book\.nn\.attention\.scaled_dot_product_attention, not a function "
              r"written in the notebook", r"05\.2 failed: `\w+` is torch\.softmax, not a function"],
    "ivan": [r"homework\.ipynb: not one of the course's notebooks"],
    "judy": [r"00_how_to_use\.ipynb: not a readable notebook \(not valid JSON"],
    "ken": [r"defines no `softmax`: its cell was deleted or renamed"],
    "leo": [r"defines no `softmax`"],
}


class TestGradeAClass:
    """One test, so that pytest-xdist grades the class once, on one worker."""

    def test_the_class_is_graded_end_to_end(self, tmp_path):
        rows = grade_the_class(tmp_path)
        self._csv_cell_by_cell(tmp_path, rows)
        for student in sorted(NOTES):
            self._clear_lines(rows, student)
        self._statuses_and_feedback(tmp_path)

    def _csv_cell_by_cell(self, tmp, rows):
        header, expected = columns(tmp)
        assert header[:4] == ["student", "00.1", "00.2", "00.3"]
        with open(tmp / "out" / "grades.csv", encoding="utf-8") as handle:
            assert next(csv.reader(handle)) == header
        assert sorted(rows) == sorted(expected)
        for student, cells in expected.items():
            assert [rows[student][column] for column in header[1:-1]] == cells, (
                student, rows[student])

    def _clear_lines(self, rows, student):
        notes = rows[student]["notes"]
        if not NOTES[student]:
            assert notes == "", (student, notes)
        for pattern in NOTES[student]:
            assert re.search(pattern, notes), (student, pattern, notes)

    def _statuses_and_feedback(self, tmp):
        book = json.loads((tmp / "out" / "grades.json").read_text(encoding="utf-8"))
        status = {row["student"]: {k: v["status"] for k, v in row["exercises"].items()}
                  for row in book["students"]}
        assert status["alice"]["00.1"] == "passed" and status["bob"]["00.1"] == "failed"
        assert status["carol"]["00.1"] == "not attempted" and status["grace"]["00.1"] == "failed"
        assert status["heidi"]["05.1"] == "borrowed" and status["erin"]["00.1"] == "not graded"
        assert status["bob"]["05.1"] == "not submitted"
        assert status["judy"]["00.1"] == status["judy"]["00.2"] == "unreadable"
        judy = (tmp / "out" / "feedback" / "judy.md").read_text(encoding="utf-8")
        assert not [line for line in judy.splitlines()
                    if line.startswith("- **00.") and "not submitted" in line], judy
        assert "Written exercises (4, 4 points): 0 marked by hand, 4 to mark, 0 points" \
            in alice_summary(tmp)
        alice = (tmp / "out" / "feedback" / "alice.md").read_text(encoding="utf-8")
        assert "✓ Exercise 00.1 passed" in alice and "> Because e^{-c} cancels." in alice
        assert "✓ Exercise 05.1 passed" in alice and "> My answer to 05.4." in alice
        grace = (tmp / "out" / "feedback" / "grace.md").read_text(encoding="utf-8")
        assert "✗ Exercise 00.1 failed" in grace and "±1000" in grace
        assert (tmp / "out" / "feedback" / "carol.md").read_text().count("(no answer written)") == 2


def alice_summary(tmp):
    """The summary line of alice's feedback: what the totals count, said in words."""
    return (tmp / "out" / "feedback" / "alice.md").read_text(encoding="utf-8").splitlines()[2]


def test_the_contract_is_read_from_the_master(tmp_path):
    master = _master(tmp_path, "00")
    master.cells[next(i for i, c in enumerate(master.cells) if c.metadata.get(
        "exercise", {}).get("kind") == "code")].metadata["exercise"]["points"] = 3
    nbformat.write(master, tmp_path / CHAPTERS["00"])
    specs = read_exercises(tmp_path / CHAPTERS["00"])
    assert [(s.id, s.kind, s.points, s.function) for s in specs] == [
        ("00.1", "code", 3, "softmax"), ("00.2", "written", 1, None),
        ("00.3", "written", 1, None)]
    assert "softmax" in specs[0].title


def test_checks_refuse_functions_from_the_package_or_torch():
    borrowed = run_check("05.1", scaled_dot_product_attention)
    assert borrowed.status == "failed"
    assert ("this is transformer_book.nn.attention.scaled_dot_product_attention, not your own "
            "function") in borrowed.message
    for function in (torch.softmax, torch.nn.functional.softmax, torch.Tensor.softmax,
                     torch.nn.Softmax(dim=-1)):
        result = run_check("00.1", function)
        assert result.status == "failed" and "not your own function" in result.detail, result
    assert "this is torch.softmax," in run_check("00.1", torch.softmax).detail
    assert foreign_origin(len) == "builtins.len"


def test_own_functions_and_wrappers_are_still_checked():
    def softmax(x, dim=-1):
        shifted = x - x.max(dim=dim, keepdim=True).values
        return shifted.exp() / shifted.exp().sum(dim=dim, keepdim=True)

    assert foreign_origin(softmax) is None and run_check("00.1", softmax).passed
    namespace: dict = {"__name__": "__main__"}
    exec("def f(x, dim=-1):\n    return x", namespace)  # as a notebook defines it
    assert foreign_origin(namespace["f"]) is None
    assert run_check("00.1", namespace["f"]).status == "failed"


def test_bad_arguments_are_refused_in_one_line(tmp_path, capsys):
    assert cli_main(["grade", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    assert "SUBMISSIONS" in capsys.readouterr().err
    assert cli_main(["grade", str(tmp_path), "--out", str(tmp_path / "o"), "--timeout", "0"]) == 2
    assert "--timeout" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    (tmp_path / "subs").mkdir()
    assert cli_main(["grade", str(tmp_path / "subs"), "--out", str(tmp_path / "o"), "--source",
                     str(tmp_path / "empty")]) == 2
    assert "--source" in capsys.readouterr().err


# ----------------------------------------------------------------------------- a hostile class

SOFTMAX = ("import torch\n\n\ndef softmax(x, dim=-1):\n"
           "    shifted = x - x.max(dim=dim, keepdim=True).values\n"
           "    return shifted.exp() / shifted.exp().sum(dim=dim, keepdim=True)\n")
ATTACK = '''\
import glob, json, os
roots = [".", "..", *(os.environ.get(v) for v in ("ATTACK_SOURCE", "ATTACK_OUT",
                                                   "ATTACK_SUBS"))]
seen = {{}}
for root in [r for r in roots if r]:
    files = [f for f in glob.glob(os.path.join(root, "**", "*"), recursive=True)
             if os.path.isfile(f)]
    seen[root] = files
    for f in files:
        {action}
[os.remove(f) for f in glob.glob("*.ipynb")]
with open(os.path.join(os.environ["ATTACK_CANARY"], "{who}.json"), "w") as handle:
    json.dump({{"cwd": os.getcwd(), "seen": seen}}, handle)
'''
ACTIONS = {"wiper": "os.remove(f)", "renamer": "os.rename(f, f + '.moved')",
           "overwriter": "open(f, 'w').write('gone')"}


def _tree(root):
    """``{relative path: SHA-256}`` of every file under ``root`` (folders as such)."""
    return {str(p.relative_to(root)): sha256_file(p) if p.is_file() else "folder"
            for p in sorted(root.rglob("*"))}


def _one_cell(source):
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])


def test_a_hostile_class_changes_none_of_the_instructors_files(tmp_path, monkeypatch):
    """Submissions delete, rename and overwrite every file they can find in their working
    folder, in ``..`` and in --source, --out and SUBMISSIONS (their absolute paths in the
    grader's environment): nothing changes there, each is graded (a correct softmax: 1
    point), students named ``a b`` and ``a_b`` and one whose folder name is not UTF-8 each
    get a feedback file of their own, and the gradebook is written."""
    src, subs, out, canary = (tmp_path / n for n in ("src", "subs", "out", "canary"))
    for folder in (src, out, canary):
        folder.mkdir()
    _master(src, "00")
    (out / "keep.txt").write_text("the instructor's notes")
    (out / "marks.csv").write_text("student,exercise,points,comment\nwiper,00.2,1,fine\n")
    for who, action in ACTIONS.items():
        _write(subs, who, _one_cell(SOFTMAX + ATTACK.format(action=action, who=who)),
               CHAPTERS["00"])
    for who in ("a b", "a_b"):
        _write(subs, who, _one_cell(SOFTMAX), CHAPTERS["00"])
    odd = os.fsdecode(b"st\xffudent")
    _write(subs, odd, _one_cell(SOFTMAX), CHAPTERS["00"])
    for name, path in (("SOURCE", src), ("OUT", out), ("SUBS", subs), ("CANARY", canary)):
        monkeypatch.setenv(f"ATTACK_{name}", str(path))
    before = {root: _tree(root) for root in (src, subs)}
    kept = {name: (out / name).read_bytes() for name in ("keep.txt", "marks.csv")}
    assert cli_main(["grade", str(subs), "--out", str(out), "--source", str(src), "--marks",
                     str(out / "marks.csv"), "--timeout", "60", "--quiet"]) == 0
    assert {root: _tree(root) for root in (src, subs)} == before
    assert {name: (out / name).read_bytes() for name in kept} == kept
    for who in ACTIONS:  # the attack ran, in a scratch folder of its own
        report = json.loads((canary / f"{who}.json").read_text())
        assert report["cwd"].endswith("notebooks") and str(tmp_path) not in report["cwd"]
        assert any(f.endswith(CHAPTERS["00"]) for f in report["seen"]["."]), report
        assert set(report["seen"]) == {".", ".."}, report  # no variable named our folders
    with open(out / "grades.csv", newline="", encoding="utf-8") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    assert sorted(rows) == sorted(["a b", "a_b", "overwriter", "renamer", "st\\xffudent",
                                   "wiper"])
    assert {who: row["00.1"] for who, row in rows.items()} == dict.fromkeys(rows, "1"), rows
    assert rows["wiper"]["00.2"] == "1" and rows["wiper"]["total"] == "2"
    feedback = sorted(p.name for p in (out / "feedback").iterdir())
    assert len(feedback) == 6 and "wiper.md" in feedback, feedback
    assert len([f for f in feedback if f.startswith("a_b")]) == 2, feedback
    assert "feedback in feedback/a_b-" in rows["a b"]["notes"]
    assert "feedback in feedback/a_b-" in rows["a_b"]["notes"]


def test_hand_marks_complete_the_gradebook(tmp_path, capsys):
    """The instructor's round trip: grade, read what is left to mark, enter the marks,
    grade again; totals count every exercise's points, the comment reaches the feedback."""
    (tmp_path / "masters").mkdir()
    master = _master(tmp_path / "masters", "00")
    alice = _solve(_student(master, "00"), master, ["00.1"])
    _cell(alice, "00.2", "answer").source = "Because e^{-c} cancels."
    _cell(alice, "00.3", "answer").source = "One-hot, then uniform."
    _write(tmp_path / "class", "alice", alice, CHAPTERS["00"])
    command = ["grade", str(tmp_path / "class"), "--out", str(tmp_path / "out"), "--source",
               str(tmp_path / "masters"), "--quiet"]
    assert cli_main(command) == 0
    assert "(2 written answers to mark: --marks)" in capsys.readouterr().out

    def row():
        with open(tmp_path / "out" / "grades.csv", newline="", encoding="utf-8") as handle:
            return next(csv.DictReader(handle))

    first = row()
    assert (first["00.1"], first["00.2"], first["00.3"]) == ("1", "", "")
    assert (first["total"], first["out_of"], first["to_mark"]) == ("1", "3", "00.2 00.3")
    marks = tmp_path / "marks.csv"
    marks.write_text("student,exercise,points,comment\nalice,00.2,1,Right: it cancels.\n"
                     "alice,00.3,0.5,Half: why uniform?\n", encoding="utf-8")
    assert cli_main([*command, "--marks", str(marks)]) == 0
    second = row()
    assert (second["00.2"], second["00.3"], second["total"], second["to_mark"]) == (
        "1", "0.5", "2.5", "")
    text = (tmp_path / "out" / "feedback" / "alice.md").read_text(encoding="utf-8")
    assert "Total: 2.5 of 3 points." in text and "Marked by hand: 1/1. Right: it cancels." in text
    assert "Written exercises (2, 2 points): 2 marked by hand, 0 to mark, 1.5 points" in text


def test_a_temporary_folder_among_the_instructors_files_is_refused(tmp_path, monkeypatch,
                                                                   capsys):
    """The scratch folders are made in the temporary folder: inside --source, ``..`` of a
    submission would lead there, so it is refused before anything runs."""
    (tmp_path / "src" / "tmp").mkdir(parents=True)
    _master(tmp_path / "src", "00")
    _write(tmp_path / "subs", "alice", _one_cell(SOFTMAX), CHAPTERS["00"])
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "src" / "tmp"))
    assert cli_main(["grade", str(tmp_path / "subs"), "--out", str(tmp_path / "out"),
                     "--source", str(tmp_path / "src"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "TMPDIR: expected a temporary folder outside --source" in err
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ a shortcut the exercise forbids

SHORTCUTS = {  # exercise: a wrapper written in the notebook around what the exercise forbids
    "00.1": "import torch\n\n\ndef softmax(x, dim=-1):\n    return torch.softmax(x, dim=dim)\n",
    "05.2": "def {name}(scores):\n    flat = scores.reshape(-1, scores.shape[-1])\n"
            "    rows = torch.func.vmap(torch.func.jacrev(lambda r: r.softmax(-1)))(flat)\n"
            "    return rows.reshape(*scores.shape, scores.shape[-1])\n",
}


def test_a_forbidden_shortcut_gets_no_points_and_the_rules_message(tmp_path):
    """A notebook's own wrapper of torch.softmax (00.1) and of torch.func.jacrev (05.2) is
    run, caught by the exercise's rule while it runs, and graded 0 with the rule's message;
    the other answers of the same notebook keep their points."""
    (tmp_path / "masters").mkdir()
    masters = {chapter: _master(tmp_path / "masters", chapter) for chapter in CHAPTERS}
    specs05 = read_exercises(tmp_path / "masters" / CHAPTERS["05"])
    name = {s.id: s.function for s in specs05}
    mallory = _student(masters["00"], "00")
    _cell(mallory, "00.1", "solution").source = SHORTCUTS["00.1"]
    _write(tmp_path / "class", "mallory", mallory, CHAPTERS["00"])
    mallory05 = _solve(_student(masters["05"], "05"), masters["05"],
                       [s.id for s in specs05 if s.kind == "code"])
    _cell(mallory05, "05.2", "solution").source = SHORTCUTS["05.2"].format(name=name["05.2"])
    _write(tmp_path / "class", "mallory", mallory05, CHAPTERS["05"])
    assert cli_main(["grade", str(tmp_path / "class"), "--out", str(tmp_path / "out"),
                     "--source", str(tmp_path / "masters"), "--timeout", "60", "--quiet"]) == 0
    with open(tmp_path / "out" / "grades.csv", newline="", encoding="utf-8") as handle:
        row = next(csv.DictReader(handle))
    assert (row["00.1"], row["05.2"]) == ("0", "0"), row
    assert row["05.1"] == row["05.3"] == "1", row
    book = json.loads((tmp_path / "out" / "grades.json").read_text(encoding="utf-8"))
    graded = book["students"][0]["exercises"]
    assert graded["00.1"]["status"] == graded["05.2"]["status"] == "failed"
    assert graded["00.1"]["message"].startswith(
        "✗ Exercise 00.1 failed: softmax: your function calls torch.softmax, which this "
        "exercise asks you not to use: compute it from exp, max and sum")
    assert ("your function uses autograd (it runs under a torch.func grad transform"
            in graded["05.2"]["message"])
    feedback = (tmp_path / "out" / "feedback" / "mallory.md").read_text(encoding="utf-8")
    assert "calls torch.softmax, which this exercise asks you not to use" in feedback
    assert "which this exercise asks you not to use: build J = diag(p)" in feedback


def test_a_kernel_that_did_not_start_is_started_once_more(tmp_path, monkeypatch):
    """A kernel that never came up (a port taken by another kernel starting beside it) gets
    a second start; any other error, or a second failure, leaves the note and no grade."""
    from transformer_book.course import grading_report

    source = Path(__file__).resolve().parents[1] / "notebooks"
    name = "05_self_attention.ipynb"
    masters = {name: grading_report._sorted_specs(read_exercises(source / name))}
    path = tmp_path / name
    path.write_bytes((source / name).read_bytes())
    submission = grading_report.Submission("zoe", path, path.read_bytes())
    for errors, calls in [(["Kernel didn't respond in 60 seconds", "second"], 2),
                          (["Address already in use", "Kernel didn't respond"], 2),
                          (["nbclient failed", "never"], 1)]:
        raised = []

        def run(*args, errors=errors, raised=raised, **kwargs):
            raised.append(errors[len(raised)])
            raise RuntimeError(raised[-1])

        monkeypatch.setattr(grading_report, "_run_in_scratch", run)
        result = grading_report.grade_notebook(submission, masters, source, [], 10, 60)
        assert len(raised) == calls, (errors, raised)
        assert result["notes"] == [f"{name}: could not be run "
                                   f"(RuntimeError({raised[-1]!r})); not graded"]


def test_links_pipes_and_long_names_are_refused_before_anything_runs(tmp_path):
    """A submission that is a link (to the master: graded as the master; to /etc/passwd:
    its start in the feedback), one in a linked folder, a FIFO (read: a hang) and a student
    of a 250-byte name (its feedback file crashed the grader after every notebook had run)."""
    import threading

    (tmp_path / "masters").mkdir()
    master = _master(tmp_path / "masters", "00")
    name = CHAPTERS["00"]
    submissions = tmp_path / "class"
    for student in ("linked", "passwd", "pipe", "x" * 250):
        (submissions / student).mkdir(parents=True)
    (submissions / "linked" / name).symlink_to(tmp_path / "masters" / name)
    (submissions / "passwd" / name).symlink_to("/etc/passwd")
    os.mkfifo(submissions / "pipe" / name)
    (submissions / ("x" * 250) / name).write_text("not a notebook")
    (tmp_path / "elsewhere").mkdir()
    nbformat.write(master, tmp_path / "elsewhere" / name)
    (submissions / "folder-link").symlink_to(tmp_path / "elsewhere")
    done = []
    grader = threading.Thread(target=lambda: done.append(cli_main(
        ["grade", str(submissions), "--out", str(tmp_path / "out"), "--source",
         str(tmp_path / "masters"), "--quiet"])), daemon=True)
    grader.start()
    grader.join(120)
    assert done == [0], "it finished (a FIFO is never opened)"
    with open(tmp_path / "out" / "grades.csv", newline="", encoding="utf-8") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    assert sorted(rows) == sorted(["linked", "passwd", "pipe", "x" * 250]), (
        "a linked folder is not walked into")
    assert all(row["total"] == "0" for row in rows.values()), "nothing graded as an answer"
    feedback = {p.name: p.read_text(encoding="utf-8")
                for p in (tmp_path / "out" / "feedback").iterdir()}
    assert all(len(n.encode()) <= 110 for n in feedback), "every name fits a file system"
    assert "symbolic link, not followed" in feedback["linked.md"]
    assert "root:" not in feedback["passwd.md"] and "symbolic link" in feedback["passwd.md"]
    assert "not a regular file" in feedback["pipe.md"]
