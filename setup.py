"""Ship the recorded results with the package (the rest of the build is in pyproject.toml).

Chapters 10-12 read the JSON records of long runs from ``results/``
(:func:`transformer_book.util.results.recorded_results_dir`). Where there is no checkout
(Colab, ``pip install``), they read the copy that this build puts into every wheel as
``transformer_book/_results/``. MANIFEST.in puts ``results/`` into the sdist, so a wheel
built from the sdist has them too.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results"
INSTALLED = Path("transformer_book") / "_results"


class BuildPyWithResults(build_py):
    """``build_py``, then ``results/*.json`` copied to ``transformer_book/_results/``."""

    def run(self) -> None:
        super().run()
        records = sorted(RESULTS.glob("*.json"))
        if not records:
            raise SystemExit(f"setup.py: no recorded results (*.json) in {RESULTS}")
        target = Path(self.build_lib) / INSTALLED
        target.mkdir(parents=True, exist_ok=True)
        for record in records:
            shutil.copyfile(record, target / record.name)


setup(cmdclass={"build_py": BuildPyWithResults})
