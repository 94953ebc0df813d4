"""The core (util, data, nn, run, inference, train) imports without the course's dependencies.

pyproject.toml's ``dependencies`` are the core's; matplotlib, nbformat, nbgrader, nbclient,
transformers, ctranslate2 and yaml belong to the extras of the layers on top. Each check runs
in a fresh interpreter where those modules cannot be imported, whether installed or not.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

CORE = ("util", "data", "nn", "run", "inference", "train")
BLOCKED = ("matplotlib", "nbformat", "nbgrader", "nbclient", "transformers", "ctranslate2",
           "yaml")

# Installed first in the child: any import of a blocked module (or a submodule) fails.
_BLOCKER = textwrap.dedent(f"""
    import importlib, pkgutil, sys

    BLOCKED = {BLOCKED!r}

    class Blocker:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"{{name}} is blocked: not a core dependency", name=name)
            return None

    sys.meta_path.insert(0, Blocker())
""")


def _run(body: str) -> subprocess.CompletedProcess[str]:
    code = _BLOCKER + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)


def test_every_core_module_imports_without_the_course_dependencies() -> None:
    out = _run(f"""
        import transformer_book
        names = []
        for floor in {CORE!r}:
            package = importlib.import_module(f"transformer_book.{{floor}}")
            names.append(package.__name__)
            for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
                importlib.import_module(info.name)
                names.append(info.name)
        for name in transformer_book.__all__:
            getattr(transformer_book, name)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
        assert not loaded, loaded
        print(len(names))
    """)
    assert out.returncode == 0, out.stderr
    # Every floor has its package and at least one module of its own.
    assert int(out.stdout.split()[-1]) >= 2 * len(CORE), out.stdout


def test_the_blocker_blocks_a_course_module() -> None:
    """The same interpreter refuses the course's figures: the check above can fail."""
    out = _run("""
        try:
            import transformer_book.course.figures
        except ImportError as error:
            print("refused:", error.name)
        else:
            raise SystemExit("transformer_book.course.figures imported with matplotlib blocked")
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "refused: matplotlib", out.stdout
