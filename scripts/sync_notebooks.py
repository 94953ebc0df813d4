"""Bring every notebook's generated parts in line: setup cells and exercise markup.

- Cell 0 is the chapter title and its "Open in Colab" badge; cell 1 installs the package
  when (and only when) the notebook runs on Google Colab, tagged ``remove-cell`` so that the
  book's pages leave it out. It installs the release the book was written against, the tag
  ``v<version>`` of ``pyproject.toml``'s version, keeps Colab's own torch, and puts the
  course cache on Google Drive when Drive is mounted. The URL lives only in ``_config.yml``.
  Cell 2, the chapter's own setup (imports, ``set_seed``, the device), is collapsed in the
  book behind a toggle (tag ``hide-input``): its output, the device, stays in view.
- Exercises: each ``{exercise}`` title starts with its id (``05.1 · Title``) and the box
  has ``:nonumber:`` (the id, not a book-wide number); solution code cells are collapsed
  behind "Show solution"; ``{solution}`` cells are tagged ``solution``; every exercise cell
  carries ``metadata["exercise"]`` (:mod:`transformer_book.course.exercise_cells`).

It is idempotent: a second run changes nothing. Notebooks may be named on the command line.

    python scripts/sync_notebooks.py          # rewrite in place, list what changed
    python scripts/sync_notebooks.py --check  # exit 1 and list, cell by cell, what is stale
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

try:
    import tomllib  # Python >= 3.11
except ImportError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

import nbformat
import yaml

from transformer_book.course.assignments import write_notebook_atomically
from transformer_book.course.exercise_cells import (
    EXERCISE_OPEN,
    ExerciseMarkupError,
    annotate,
    find_exercises,
    has_solution_markers,
)
from transformer_book.course.plain_markdown import to_plain_markdown
from transformer_book.util.validation import BookError, bad_input, require

ROOT = Path(__file__).resolve().parents[1]
BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"
SETUP_TAGS = ["colab-setup", "remove-cell"]
#: The branch the notebooks open from when ``_config.yml`` names none.
DEFAULT_BRANCH = "main"
#: What the setup cell names its cache variable after (transformer_book.course.cache.CACHE_ENV).
CACHE_ENV = "TRANSFORMER_BOOK_CACHE"
SOLUTION_PROMPTS = {"code_prompt_show": "Show solution", "code_prompt_hide": "Hide solution"}


def repository() -> tuple[str, str]:
    """``(url, branch)`` from ``_config.yml``: the branch the launch buttons open (the
    generated ``student`` branch, scripts/student_branch.py)."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    url = config["repository"]["url"].rstrip("/")
    require(re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", url) is not None,
            "_config.yml repository.url", "https://github.com/OWNER/REPO", url)
    return url, config["repository"].get("branch", DEFAULT_BRANCH)


def package_version() -> str:
    """``[project].version`` of ``pyproject.toml``: Colab installs the tag ``v<version>``."""
    with (ROOT / "pyproject.toml").open("rb") as handle:
        version = tomllib.load(handle)["project"]["version"]
    require(re.fullmatch(r"\d+(\.\d+)*", version) is not None,
            "pyproject.toml [project].version", "a release number such as 0.1.0", version)
    return version


def title_of(notebook: nbformat.NotebookNode, name: str) -> str:
    """The chapter title: the first ``# `` heading of cell 0."""
    if notebook.cells and notebook.cells[0].cell_type == "markdown":
        for line in notebook.cells[0].source.splitlines():
            if line.startswith("# "):
                return line[2:].strip()
    first = notebook.cells[0] if notebook.cells else None
    received = "no cells" if first is None else f"a {first.cell_type} cell without '# ' heading"
    raise bad_input(name, "cell 0 to be markdown starting with '# <title>'", received)


def setup_source(url: str, version: str) -> str:
    """The Colab setup cell: on Colab only, install the tag ``v<version>`` of ``url`` with
    Colab's torch kept, and keep the course cache on Google Drive if Drive is mounted (each
    Colab notebook is a machine of its own: chapter 11 then reuses chapter 10's model)."""
    return (
        "# On Google Colab only (elsewhere this cell does nothing): install the course\n"
        f"# package at the book's version, v{version}. Colab's own torch is kept: pip is\n"
        "# held to the installed torch, so it never replaces it.\n"
        "import importlib.metadata\n"
        "import os\n"
        "import subprocess\n"
        "import sys\n"
        "\n"
        'if "google.colab" in sys.modules:\n'
        f'    url = "{url}"\n'
        f'    package = f"transformer_book @ git+{{url}}@v{version}"\n'
        '    keep_torch = "torch==" + importlib.metadata.version("torch")\n'
        '    pip = [sys.executable, "-m", "pip", "install", "-q", package, keep_torch]\n'
        "    subprocess.run(pip, check=True)\n"
        "    # Each notebook runs on a fresh machine: with Google Drive mounted, trained\n"
        "    # models stay there, so chapter 11 reuses the model chapter 10 trained.\n"
        '    drive = "/content/drive/MyDrive"\n'
        "    if os.path.isdir(drive):\n"
        f'        os.environ.setdefault("{CACHE_ENV}", drive + "/transformer_book")\n'
        f'        print("Course cache:", os.environ["{CACHE_ENV}"])\n'
        "    else:\n"
        '        print("To keep trained models between notebooks, mount Google Drive")\n'
        '        print("(Files panel: Mount Drive), then run this cell again.")'
    )


def header_cells(title: str, notebook_name: str, url: str, branch: str) -> tuple[str, str]:
    """The sources of cell 0 (title and badge) and cell 1 (Colab setup)."""
    slug = url.removeprefix("https://github.com/")
    colab = (
        f"https://colab.research.google.com/github/{slug}/blob/{branch}/notebooks/{notebook_name}"
    )
    badge = f"[![Open In Colab]({BADGE_IMAGE})]({colab})"
    return f"# {title}\n\n{badge}", setup_source(url, package_version())


def sync_header(notebook: nbformat.NotebookNode, name: str) -> list[str]:
    """Cells 0 and 1 from ``_config.yml``; return what changed."""
    url, branch = repository()
    title_source, setup_source = header_cells(title_of(notebook, name), name, url, branch)
    cells, changes = notebook.cells, []
    if cells[0].source != title_source:
        changes.append("cell 0: the title and Colab badge disagree with _config.yml")
        cells[0].source = title_source
    has_setup = (
        len(cells) >= 2 and cells[1].cell_type == "code" and "google.colab" in cells[1].source
    )
    if not has_setup:
        changes.append("cell 1: no Colab setup cell (inserted)")
        cells.insert(1, nbformat.v4.new_code_cell(setup_source))
    setup = cells[1]
    if setup.source != setup_source:
        changes.append("cell 1: the Colab setup cell disagrees with _config.yml or "
                       "pyproject.toml's version")
        setup.source = setup_source
    if setup.metadata.get("tags") != SETUP_TAGS:
        changes.append(f"cell 1: setup cell tags {setup.metadata.get('tags')} -> {SETUP_TAGS}")
        setup.metadata["tags"] = list(SETUP_TAGS)
    if len(cells) > 2 and cells[2].cell_type == "code" and _add_tag(cells[2], "hide-input"):
        changes.append("cell 2: the chapter's setup cell is not collapsed (tag hide-input)")
    return changes


def exercise_source(source: str, exercise_id: str) -> str:
    """The ``{exercise}`` directive of ``source`` titled ``NN.K · Title``, with ``:nonumber:``."""
    opened = EXERCISE_OPEN.search(source)
    title = opened["title"].strip()
    prefix = f"{exercise_id} · "
    if not title.startswith(prefix):
        title = prefix + title.removeprefix(exercise_id).lstrip(" ·:-")
    head = f"{opened['fence']}{{exercise}} {title}".rstrip()
    rest = source[opened.end():].split("\n")
    options = 1
    while options < len(rest) and rest[options].startswith(":"):
        options += 1
    if not any(line.strip() == ":nonumber:" for line in rest[1:options]):
        rest.insert(options, ":nonumber:")
    return source[: opened.start()] + head + "\n".join(rest)


def _add_tag(cell: nbformat.NotebookNode, tag: str) -> bool:
    tags = list(cell.metadata.get("tags", []))
    if tag in tags:
        return False
    cell.metadata["tags"] = [*tags, tag]
    return True


def sync_exercises(notebook: nbformat.NotebookNode, name: str) -> list[str]:
    """Exercise titles, solution toggles and tags, and ``metadata["exercise"]``."""
    changes = []
    for exercise in find_exercises(notebook, name):
        cell = notebook.cells[exercise.statement]
        wanted = exercise_source(cell.source, exercise.id)
        if cell.source != wanted:
            changes.append(f"cell {exercise.statement} ({cell.get('id')}): exercise "
                           f"{exercise.id}'s title lacks its id or the box lacks :nonumber:")
            cell.source = wanted
        for index in exercise.solutions:
            solution = notebook.cells[index]
            where = f"cell {index} ({solution.get('id')}): {exercise.id}'s solution"
            if has_solution_markers(solution):
                if _add_tag(solution, "hide-input"):
                    changes.append(f"{where} is not collapsed (tag hide-input)")
                if solution.metadata.get("mystnb") != SOLUTION_PROMPTS:
                    changes.append(f"{where} toggle does not read 'Show solution'")
                    solution.metadata["mystnb"] = dict(SOLUTION_PROMPTS)
            else:
                if _add_tag(solution, "solution"):
                    changes.append(f"{where} is not tagged 'solution'")
                if to_plain_markdown(solution.source, {}).strip():
                    raise ExerciseMarkupError(
                        f"{name}, {where} cell holds text outside its {{solution}} directive; "
                        "student copies drop the whole cell: move that text to a cell of its own"
                    )
    return changes + annotate(notebook, name)


def sync(path: Path, *, write: bool) -> list[str]:
    """Bring ``path`` in line (written only if ``write``); return what was out of date."""
    notebook = nbformat.read(path, as_version=4)
    if not notebook.cells:
        raise bad_input(path.name, "a notebook with cells", "no cells")
    changes = sync_header(notebook, path.name) + sync_exercises(notebook, path.name)
    if changes and write:
        write_notebook_atomically(notebook, path)
    return changes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report notebooks that disagree")
    parser.add_argument("notebooks", nargs="*", type=Path)
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    stale = 0
    for path in paths:
        try:
            changes = sync(path, write=not args.check)
        except BookError as error:
            print(f"{path}: {error}", file=sys.stderr)
            return 2
        stale += bool(changes)
        for change in changes:
            print(f"{path}: {'out of date' if args.check else 'rewrote'}: {change}")
    if args.check and stale:
        print(f"{stale} notebook(s) out of date: run `make sync` (scripts/sync_notebooks.py)")
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
