"""Every notebook follows the course's conventions (see CONTRIBUTING.md)."""

from __future__ import annotations

import importlib.util
import re

import pytest
import yaml
from notebook_utils import NOTEBOOKS, ROOT, check_cells, read, tags

from transformer_book.course.exercises.core import REGISTRY, load_all

spec = importlib.util.spec_from_file_location(
    "sync_notebooks", ROOT / "scripts" / "sync_notebooks.py"
)
sync_notebooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sync_notebooks)


def toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files.extend(chapter["file"] for chapter in part["chapters"])
    return files


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ holds the chapters"


def test_toc_lists_only_existing_pages_and_every_notebook():
    listed = toc_files()
    for entry in listed:
        assert any((ROOT / f"{entry}{suffix}").exists() for suffix in (".md", ".ipynb")), entry
    for path in NOTEBOOKS:
        assert f"notebooks/{path.stem}" in listed, f"{path.name} is missing from _toc.yml"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_badge_and_setup_cells_match_config(path):
    url, branch = sync_notebooks.repository()
    notebook = read(path)
    title = sync_notebooks.title_of(notebook, path.name)
    assert re.fullmatch(r"\d\d .+", title), f"{path.name}: title starts with the chapter number"
    assert title.startswith(path.name[:2])
    badge, setup = sync_notebooks.header_cells(title, path.name, url, branch)
    assert notebook.cells[0].source == badge, (
        "run `make sync`: the Colab badge disagrees with _config.yml"
    )
    assert notebook.cells[1].source == setup, (
        "run `make sync`: the setup cell disagrees with _config.yml"
    )
    assert "google.colab" in setup and url in setup


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_third_cell_imports_seeds_and_picks_device(path):
    cell = read(path).cells[2]
    assert cell.cell_type == "code"
    assert "transformer_book" in cell.source
    assert "set_seed(" in cell.source and "get_device(" in cell.source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_setup_cell_fits_in_twelve_lines(path):
    """The setup cell imports what the whole chapter needs and no more; a name is imported
    in the cell that first uses it."""
    lines = read(path).cells[2].source.strip().splitlines()
    assert len(lines) <= 12, f"{path.name}: the setup cell has {len(lines)} lines, at most 12"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_setup_cell_is_collapsed_in_the_book(path):
    """The book opens on the chapter's question, not its imports (`make sync` tags it)."""
    assert "hide-input" in read(path).cells[2].metadata.get("tags", []), (
        f"{path.name}: run `make sync`: the setup cell is not collapsed"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_outputs_are_stored_and_error_free(path):
    code = [c for c in read(path).cells if c.cell_type == "code"]
    assert any(c.outputs for c in code), f"{path.name}: run `make execute` to store outputs"
    for cell in code:
        assert all(o.output_type != "error" for o in cell.outputs), f"{path.name}: stored error"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_ignored_outputs_are_followed_by_an_assertion(path):
    cells = read(path).cells
    for index, cell in enumerate(cells):
        if "nbval-ignore-output" in tags(cell):
            following = next((c for c in cells[index + 1 :] if c.cell_type == "code"), None)
            assert following is not None and "assert" in following.source, (
                f"{path.name} cell {index}: an nbval-ignore-output cell is followed by an assertion"
            )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_exercises_are_registered_collapsed_and_enough(path):
    load_all()
    notebook = read(path)
    checks = check_cells(notebook)
    for _, exercise_id in checks:
        assert exercise_id in REGISTRY, f"{path.name}: no checker registered for {exercise_id}"
        assert exercise_id.startswith(path.name[:2]), (
            f"{path.name}: {exercise_id} is another chapter's"
        )
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code" and "### BEGIN SOLUTION" in cell.source:
            assert "hide-input" in tags(cell), f"{path.name} cell {index}: solutions are collapsed"
    directives = sum(
        c.source.count("```{exercise}") for c in notebook.cells if c.cell_type == "markdown"
    )
    minimum_exercises, minimum_checked = (1, 1) if path.name.startswith("00") else (3, 2)
    assert directives >= minimum_exercises, f"{path.name}: at least {minimum_exercises} exercises"
    assert len(checks) >= minimum_checked, (
        f"{path.name}: at least {minimum_checked} checked exercises"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_chapter_ends_with_a_summary(path):
    headings = [
        c.source for c in read(path).cells if c.cell_type == "markdown" and "## Summary" in c.source
    ]
    assert headings, f"{path.name}: a '## Summary' section"


# The test split is read once, for the protocol fixed beforehand: only cells tagged
# "final-protocol" in Part III's experiment chapters may name it.
TEST_SPLIT = re.compile(r"""test_20\d\d|["']test["']|--split\s+test|split\s*=\s*["']test""")
PROTOCOL_CHAPTERS = [p for p in NOTEBOOKS if p.name[:2] in ("10", "11", "12", "13")]


@pytest.mark.parametrize("path", PROTOCOL_CHAPTERS, ids=lambda p: p.stem)
def test_only_final_protocol_cells_load_the_test_split(path):
    for index, cell in enumerate(read(path).cells):
        if cell.cell_type == "code" and "final-protocol" not in tags(cell):
            found = TEST_SPLIT.search(cell.source)
            assert found is None, (
                f"{path.name} cell {index}: {found.group(0)!r} outside a 'final-protocol' cell; "
                "every exploratory comparison uses val"
            )


def test_the_final_protocol_is_scored_somewhere():
    tagged = [p.name for p in PROTOCOL_CHAPTERS
              if any("final-protocol" in tags(c) for c in read(p).cells)]
    assert tagged, "chapters 10-13 score the final protocol on test in a 'final-protocol' cell"


def test_the_convention_catches_a_test_split_load():
    assert TEST_SPLIT.search('pairs = load_multi30k("test_2016_flickr")')
    assert TEST_SPLIT.search("transformer-book evaluate --split test_2017_flickr")
    assert TEST_SPLIT.search("evaluate(model, split='test')")
    assert not TEST_SPLIT.search('pairs = load_multi30k("val")')


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_exercise_markup_and_metadata_are_in_sync(path):
    """Ids in the titles, :nonumber:, "Show solution", tags and metadata["exercise"]."""
    stale = sync_notebooks.sync(path, write=False)
    assert stale == [], f"{path.name}: run `make sync`:\n" + "\n".join(stale)


def test_instructor_tables_list_every_exercise_with_its_points():
    spec = importlib.util.spec_from_file_location(
        "course_tables", ROOT / "scripts" / "course_tables.py"
    )
    course_tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(course_tables)
    chapters, exercises = course_tables.tables(NOTEBOOKS)
    for path in NOTEBOOKS:
        notebook = read(path)
        assert f"(../notebooks/{path.stem}.ipynb)" in chapters
        for cell in notebook.cells:
            meta = cell.metadata.get("exercise", {})
            if "kind" in meta:
                row = f"| {meta['id']} | "
                line = next(line for line in exercises.splitlines() if line.startswith(row))
                assert line.endswith(f"| {meta['kind']} | {meta['points']} |"), line
