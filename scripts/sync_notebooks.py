"""Rewrite every notebook's first two cells from the repository URL in ``_config.yml``.

Cell 0 is the chapter title and its "Open in Colab" badge; cell 1 installs the package
when (and only when) the notebook runs on Google Colab. The URL lives only in
``_config.yml``; ``tests/test_notebook_conventions.py`` fails when a notebook disagrees.

    python scripts/sync_notebooks.py          # rewrite in place
    python scripts/sync_notebooks.py --check  # exit 1 and list notebooks that disagree
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat
import yaml

from transformer_book.course.assignments import write_notebook_atomically
from transformer_book.util.validation import fail, require

ROOT = Path(__file__).resolve().parents[1]
BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"
SETUP_TAGS = ["colab-setup", "hide-input"]


def repository() -> tuple[str, str]:
    """``(url, branch)`` of the repository, from ``_config.yml``."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    url = config["repository"]["url"].rstrip("/")
    require(re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", url) is not None,
            "_config.yml repository.url", "https://github.com/OWNER/REPO", url)
    return url, config["repository"].get("branch", "main")


def title_of(notebook: nbformat.NotebookNode, name: str) -> str:
    """The chapter title: the first ``# `` heading of cell 0."""
    if notebook.cells and notebook.cells[0].cell_type == "markdown":
        for line in notebook.cells[0].source.splitlines():
            if line.startswith("# "):
                return line[2:].strip()
    first = notebook.cells[0] if notebook.cells else None
    received = "no cells" if first is None else f"a {first.cell_type} cell without '# ' heading"
    raise fail(name, "cell 0 to be markdown starting with '# <title>'", received)


def header_cells(title: str, notebook_name: str, url: str, branch: str) -> tuple[str, str]:
    """The sources of cell 0 (title and badge) and cell 1 (Colab setup)."""
    slug = url.removeprefix("https://github.com/")
    colab = (
        f"https://colab.research.google.com/github/{slug}/blob/{branch}/notebooks/{notebook_name}"
    )
    badge = f"[![Open In Colab]({BADGE_IMAGE})]({colab})"
    setup = (
        "# On Google Colab, install the course package; anywhere else, do nothing.\n"
        "import subprocess\n"
        "import sys\n"
        "\n"
        'if "google.colab" in sys.modules:\n'
        f'    package = "transformer_book @ git+{url}@{branch}"\n'
        '    subprocess.run([sys.executable, "-m", "pip", "install", "-q", package], check=True)'
    )
    return f"# {title}\n\n{badge}", setup


def sync(path: Path, *, write: bool) -> bool:
    """Bring ``path``'s first two cells in line; return True if they already were."""
    url, branch = repository()
    notebook = nbformat.read(path, as_version=4)
    title_source, setup_source = header_cells(title_of(notebook, path.name), path.name, url, branch)
    cells = notebook.cells
    in_line = (
        len(cells) >= 2
        and cells[0].source == title_source
        and cells[1].cell_type == "code"
        and cells[1].source == setup_source
        and cells[1].metadata.get("tags") == SETUP_TAGS
    )
    if in_line or not write:
        return in_line
    cells[0] = nbformat.v4.new_markdown_cell(title_source, id=cells[0].get("id"))
    setup = nbformat.v4.new_code_cell(setup_source, metadata={"tags": list(SETUP_TAGS)})
    if len(cells) >= 2 and cells[1].cell_type == "code" and "google.colab" in cells[1].source:
        setup["id"] = cells[1].get("id", setup["id"])
        cells[1] = setup
    else:
        cells.insert(1, setup)
    write_notebook_atomically(notebook, path)
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report notebooks that disagree")
    parser.add_argument("notebooks", nargs="*", type=Path)
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    stale = [path for path in paths if not sync(path, write=not args.check)]
    for path in stale:
        print(f"{'out of date' if args.check else 'rewrote'}: {path}")
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
