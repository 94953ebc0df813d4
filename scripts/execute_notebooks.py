"""Execute notebooks in place, refreshing their stored outputs, and report the time each took.

    python scripts/execute_notebooks.py notebooks/*.ipynb

Each notebook runs in a fresh kernel from its own folder; a notebook is written back only
if it ran without error, through a temporary file, so a failure never leaves half a notebook.
An empty display is dropped: it is what the course cache's live status leaves once its call
returns (transformer_book.course.cache), so a chapter stores the same outputs whether its
model was trained, waited for or found in the cache.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from transformer_book.course.assignments import write_notebook_atomically
from transformer_book.util.timing import Stopwatch


def empty_display(output: nbformat.NotebookNode) -> bool:
    """A display with nothing to show (no MIME data)."""
    return output.output_type == "display_data" and not output.get("data")


def execute(path: Path, timeout: int = 1800) -> float:
    """Run ``path`` in a fresh kernel, write it back with its new outputs; wall seconds."""
    notebook = nbformat.read(path, as_version=4)
    with Stopwatch() as watch:
        NotebookClient(
            notebook,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(path.parent)}},
        ).execute()
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = [output for output in cell.outputs if not empty_display(output)]
    write_notebook_atomically(notebook, path)
    return watch.seconds


def main(paths: list[str]) -> int:
    if not paths:
        print("usage: execute_notebooks.py NOTEBOOK...", file=sys.stderr)
        return 2
    total = 0.0
    for name in paths:
        seconds = execute(Path(name))
        total += seconds
        print(f"{Path(name).name:<45} {seconds:7.1f} s", flush=True)
    print(f"{'total':<45} {total:7.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
