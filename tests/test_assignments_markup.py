"""The MyST-to-Markdown rewrite, the exercise metadata and scripts/sync_notebooks.py on
small hand-made notebooks (the real chapters are covered in test_assignments_html.py)."""

from __future__ import annotations

import copy
import importlib.util

import nbformat
import pytest
from notebook_utils import ROOT

from transformer_book.course.exercise_cells import (
    ExerciseMarkupError,
    annotate,
    expected_metadata,
)
from transformer_book.course.plain_markdown import parse_citations, to_plain_markdown

SCRIPT = ROOT / "scripts" / "sync_notebooks.py"
spec = importlib.util.spec_from_file_location("sync_notebooks", SCRIPT)
sync_notebooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sync_notebooks)

BIB = r"""
@inproceedings{vaswani2017attention,
  title  = {Attention Is All You Need},
  author = {Vaswani, Ashish and Shazeer, Noam and Parmar, Niki},
  year   = {2017}
}
@article{kaiser2016can, author = {Kaiser, {\L}ukasz and Bengio, Samy}, year = "2016"}
@article{hochreiter1997long, author = {Hochreiter, Sepp and Schmidhuber, J{\"u}rgen},
  year = 1997}
"""
CITATIONS = parse_citations(BIB)


def test_citations_read_authors_and_years():
    assert CITATIONS == {
        "vaswani2017attention": ("Vaswani et al.", "2017"),
        "kaiser2016can": ("Kaiser and Bengio", "2016"),
        "hochreiter1997long": ("Hochreiter and Schmidhuber", "1997"),
    }
    assert parse_citations(r"@misc{x, author = {Kaiser, {\L}ukasz}, year={2016}}") == {
        "x": ("Kaiser", "2016")}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("as {cite:p}`vaswani2017attention` said", "as (Vaswani et al. 2017) said"),
        ("{cite:t}`kaiser2016can` show", "Kaiser and Bengio (2016) show"),
        ("{cite:p}`kaiser2016can,hochreiter1997long`",
         "(Kaiser and Bengio 2016; Hochreiter and Schmidhuber 1997)"),
        ("see {ref}`ex-05-1` and {numref}`the figure <fig-heads>`",
         "see exercise 05.1 and the figure"),
        ("code `{cite:p}` stays", "code `{cite:p}` stays"),
        ("(fig-target)=\n# Title", "# Title"),
        ("```python\n{cite:p}`x`\n```", "```python\n{cite:p}`x`\n```"),
    ],
)
def test_roles_become_plain_text(source, expected):
    assert to_plain_markdown(source, CITATIONS) == expected


def test_directives_become_markdown():
    source = (
        "Intro.\n\n```{exercise} 05.1 · Attention that survives\n:label: ex-05-1\n:nonumber:\n\n"
        "Complete $f$.\n```\n\n```{solution} ex-05-1\n:class: dropdown\n\nSecret.\n```\n\n"
        "````{note}\nA note with\n```python\nx = 1\n```\n````\n\n"
        ":::{figure} figures/a.png\n:alt: Two curves\n\nThe caption.\n:::\n\n"
        "```{admonition} Why it matters\nBecause.\n```"
    )
    assert to_plain_markdown(source, CITATIONS) == (
        "Intro.\n\n### Exercise 05.1 · Attention that survives\n\nComplete $f$.\n\n"
        "> **Note**\n>\n> A note with\n> ```python\n> x = 1\n> ```\n\n"
        "![Two curves](figures/a.png)\n\n*The caption.*\n\n"
        "> **Why it matters**\n>\n> Because."
    )


def chapter(*cells) -> nbformat.NotebookNode:
    header = [nbformat.v4.new_markdown_cell("# 07 A chapter"),
              nbformat.v4.new_code_cell('import sys\nif "google.colab" in sys.modules:\n    pass')]
    return nbformat.v4.new_notebook(cells=header + copy.deepcopy(list(cells)))


CODE = nbformat.v4.new_markdown_cell("```{exercise} Write f\n:label: ex-07-1\n\nDo it.\n```")
SOLUTION = nbformat.v4.new_code_cell(
    "def f(x):\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION"
)
CHECK = nbformat.v4.new_code_cell('check("07.1", f)')
WRITTEN = nbformat.v4.new_markdown_cell("```{exercise} Why?\n:label: ex-07-2\n\nSay.\n```")
ANSWER = nbformat.v4.new_markdown_cell("```{solution} ex-07-2\n:class: dropdown\n\nBecause.\n```")


def test_metadata_names_each_cell_and_keeps_points():
    notebook = chapter(CODE, SOLUTION, CHECK, WRITTEN, ANSWER)
    notebook.cells[5].metadata["exercise"] = {"id": "07.2", "kind": "written", "points": 3}
    assert expected_metadata(notebook, "07.ipynb") == {
        2: {"id": "07.1", "kind": "code", "points": 1},
        3: {"id": "07.1", "role": "solution"},
        4: {"id": "07.1", "role": "check"},
        5: {"id": "07.2", "kind": "written", "points": 3},
        6: {"id": "07.2", "role": "solution"},
    }
    assert len(annotate(notebook, "07.ipynb")) == 4 and annotate(notebook, "07.ipynb") == []


def test_a_check_without_its_exercise_is_named():
    with pytest.raises(ExerciseMarkupError, match=r"07\.ipynb, cell 2: 07\.1 belongs to no"):
        expected_metadata(chapter(CHECK), "07.ipynb")


def test_sync_is_idempotent_and_check_lists_each_stale_cell(tmp_path, capsys):
    path = tmp_path / "07_chapter.ipynb"
    nbformat.write(chapter(CODE, SOLUTION, CHECK, WRITTEN, ANSWER), path)
    assert sync_notebooks.main(["--check", str(path)]) == 1
    report = capsys.readouterr().out
    for expected in ("cell 1: setup cell tags", "cell 2 (", "07.1's title lacks its id",
                     "07.1's solution toggle does not read 'Show solution'",
                     "07.2's solution is not tagged 'solution'",
                     "metadata.exercise None -> {'id': '07.1', 'role': 'check'}"):
        assert expected in report, expected
    assert sync_notebooks.main([str(path)]) == 0
    first = path.read_bytes()
    assert sync_notebooks.main(["--check", str(path)]) == 0
    assert sync_notebooks.main([str(path)]) == 0 and path.read_bytes() == first
    synced = nbformat.read(path, as_version=4)
    assert synced.cells[2].source.startswith(
        "```{exercise} 07.1 · Write f\n:label: ex-07-1\n:nonumber:"
    )
    assert synced.cells[3].metadata["mystnb"] == {"code_prompt_show": "Show solution",
                                                 "code_prompt_hide": "Hide solution"}
    assert "hide-input" in synced.cells[3].metadata["tags"]
    assert synced.cells[6].metadata["tags"] == ["solution"]
    assert synced.cells[1].metadata["tags"] == ["colab-setup", "remove-cell"]


def test_sync_refuses_text_beside_a_solution_directive(tmp_path, capsys):
    mixed = nbformat.v4.new_markdown_cell(ANSWER.source + "\n\nThe next section shows it.")
    path = tmp_path / "07_chapter.ipynb"
    nbformat.write(chapter(WRITTEN, mixed), path)
    assert sync_notebooks.main(["--check", str(path)]) == 2
    assert "text outside its {solution} directive" in capsys.readouterr().err
