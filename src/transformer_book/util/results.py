"""Where the course's recorded results are: the checkout's ``results/`` or the installed copy.

Chapters that report long runs (training for hours, sweeps over seeds) read the JSON records
that :func:`transformer_book.util.records.write_record` wrote into ``results/``. In a clone
of the repository that folder is beside ``notebooks/``; on Colab or after
``pip install transformer_book`` there is no checkout, so the package ships the same files as
``transformer_book/_results`` (``setup.py`` copies them into every wheel).
:func:`recorded_results_dir` finds whichever is there, in this order:

1. ``$TRANSFORMER_BOOK_RESULTS``, if set (it must then be a folder);
2. ``results/`` in the current folder or its parent (a notebook runs from ``notebooks/``);
3. ``results/`` of the checkout this package was imported from (``pip install -e .``);
4. the copy installed with the package.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from transformer_book.util.validation import require

__all__ = ["RESULTS_ENV", "recorded_results_dir"]

RESULTS_ENV = "TRANSFORMER_BOOK_RESULTS"


def _has_records(folder: Path) -> bool:
    return folder.is_dir() and any(folder.glob("*.json"))


def _checkout_results() -> Path | None:
    """``results/`` of the source checkout this module was imported from, if it was: the
    module is then ``<checkout>/src/transformer_book/util/results.py``."""
    src = Path(__file__).resolve().parents[2]
    return src.parent / "results" if src.name == "src" else None


def _installed_results() -> Path:
    """``transformer_book/_results``, the copy of ``results/`` that the wheel carries."""
    return Path(str(resources.files("transformer_book") / "_results"))


def recorded_results_dir() -> Path | None:
    """The folder of recorded results (see the module's docstring), or ``None`` if none."""
    configured = os.environ.get(RESULTS_ENV)
    if configured:
        folder = Path(configured)
        require(folder.is_dir(), RESULTS_ENV, "a folder of JSON records", repr(configured))
        return folder
    checkout = _checkout_results()
    for candidate in (Path("results"), Path("..") / "results", checkout, _installed_results()):
        if candidate is not None and _has_records(candidate):
            return candidate
    return None
