"""Helpers the notebook tests share: listing notebooks and finding their cells."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
CHECK_CALL = re.compile(r"""\bcheck\(\s*["'](?P<id>\d\d\.\d+)["']""")


def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def tags(cell: nbformat.NotebookNode) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def check_cells(notebook: nbformat.NotebookNode) -> list[tuple[int, str]]:
    """``(cell index, exercise id)`` of every check call."""
    found = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            found.extend((index, m.group("id")) for m in CHECK_CALL.finditer(cell.source))
    return found


def text_output(cell: nbformat.NotebookNode) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if output.output_type == "stream":
            parts.append(output.text)
        elif "data" in output and "text/plain" in output.data:
            parts.append(output.data["text/plain"])
    return "".join(parts)
