"""Where the book's launch buttons lead: Binder's environment (binder/), the Colab setup cell
(scripts/sync_notebooks.py), the project's addresses, and the recorded results that every
wheel carries (setup.py, MANIFEST.in, transformer_book.util.results)."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import types
import zipfile
from contextlib import redirect_stdout
from pathlib import Path

import nbformat
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

import transformer_book
from transformer_book.course.cache import CACHE_ENV
from transformer_book.util import results
from transformer_book.util.validation import BookError

try:
    import tomllib  # Python >= 3.11
except ImportError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
BINDER = ROOT / "binder"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# Tools that build or test the book: Binder only runs the chapters.
BOOK_AND_TEST_TOOLS = {"jupyter-book", "jupyter-cache", "myst-nb", "myst-parser", "nbgrader",
                       "nbval", "pylint", "playwright", "coverage", "ruff", "hypothesis", "mypy"}

spec = importlib.util.spec_from_file_location(
    "sync_notebooks", ROOT / "scripts" / "sync_notebooks.py"
)
sync_notebooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sync_notebooks)


def pyproject() -> dict:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        return tomllib.load(handle)


def config_url() -> str:
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    return config["repository"]["url"].rstrip("/")


def read_pins(path: Path) -> tuple[dict[str, str], list[str]]:
    """``({canonical name: pinned version}, [option lines])`` of a requirements file."""
    pins, options = {}, []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("-"):
            options.append(line)
        elif line:
            name, sep, version = line.partition("==")
            assert sep and version, f"{path.name}: {raw!r} is not pinned with =="
            pins[canonicalize_name(name)] = version.strip()
    return pins, options


BINDER_PINS, BINDER_OPTIONS = read_pins(BINDER / "requirements.txt")
TESTED_PINS, _ = read_pins(ROOT / "requirements.txt")


# -- Binder ------------------------------------------------------------------------------


def test_binder_pins_equal_the_tested_set():
    for name, version in BINDER_PINS.items():
        assert name in TESTED_PINS, f"binder pins {name}, which requirements.txt does not"
        if name == "torch":  # the CPU build of the same release: 2.13.0+cpu for 2.13.0
            assert Version(version).public == TESTED_PINS[name], version
        else:
            tested = TESTED_PINS[name]
            assert version == tested, f"{name}: binder {version}, requirements.txt {tested}"


def test_binder_takes_torch_from_the_cpu_index():
    indexes = {f"--extra-index-url {CPU_INDEX}", f"--index-url {CPU_INDEX}"}
    assert indexes & set(BINDER_OPTIONS), BINDER_OPTIONS
    assert Version(BINDER_PINS["torch"]).local == "cpu"


def test_binder_has_every_runtime_dependency_and_the_notebook_server():
    for dependency in pyproject()["project"]["dependencies"]:
        requirement = Requirement(dependency)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue  # tomli on Python 3.10 only: binder's Python has tomllib
        name = canonicalize_name(requirement.name)
        assert name in BINDER_PINS, f"binder/requirements.txt lacks {name} (pyproject.toml)"
        assert requirement.specifier.contains(Version(BINDER_PINS[name]), prereleases=True)
    assert {"jupyterlab", "ipykernel"} <= BINDER_PINS.keys()


def test_binder_leaves_out_book_and_test_tools():
    # [dev] also names libraries the tests import that the notebook server needs as well
    # (pyyaml, ipython, traitlets): the tools are the ones binder must leave out.
    dev = {canonicalize_name(Requirement(r).name)
           for r in pyproject()["project"]["optional-dependencies"]["dev"]}
    assert BOOK_AND_TEST_TOOLS - {"coverage", "jupyter-cache", "myst-nb", "myst-parser"} <= dev
    for name in BINDER_PINS:
        assert name not in BOOK_AND_TEST_TOOLS, f"binder installs {name}, a book/test tool"
        assert not name.startswith(("sphinx", "pytest")), f"binder installs {name}"


def test_binder_pins_everything_its_packages_depend_on():
    """Closed under dependencies, as installed from requirements.txt: nothing unpinned."""
    missing, done, todo = set(), set(), [(name, frozenset()) for name in BINDER_PINS]
    while todo:
        name, extras = todo.pop()
        if (name, extras) in done:
            continue
        done.add((name, extras))
        try:
            requires = importlib.metadata.distribution(name).requires or []
        except importlib.metadata.PackageNotFoundError:
            pytest.skip(f"{name} is not installed here (install requirements.txt)")
        for text in requires:
            requirement = Requirement(text)
            envs = [{"extra": extra} for extra in (extras or {""})]
            if requirement.marker is None or any(requirement.marker.evaluate(e) for e in envs):
                needed = canonicalize_name(requirement.name)
                if needed not in BINDER_PINS and needed not in {"setuptools", "pip", "wheel"}:
                    missing.add(f"{needed} (for {name})")
                todo.append((needed, frozenset(requirement.extras)))
    assert not missing, f"binder/requirements.txt lacks: {sorted(missing)}"


class _Imports(ast.NodeVisitor):
    """Every module a source imports, except those tried inside ``except ImportError``."""

    def __init__(self, package: str) -> None:
        self.package, self.found, self.optional = package, set(), 0

    def visit_Try(self, node: ast.Try) -> None:
        names = {getattr(h.type, "id", None) for h in node.handlers}
        optional = bool(names & {"ImportError", "ModuleNotFoundError"})
        self.optional += optional
        self.generic_visit(node)
        self.optional -= optional

    def visit_If(self, node: ast.If) -> None:
        """``if sys.version_info >= (3, 11): import tomllib / else: import tomli``: only the
        branch this interpreter (Binder's runtime.txt version) takes counts."""
        test = ast.unparse(node.test)
        if test.startswith("sys.version_info"):
            runtime = (BINDER / "runtime.txt").read_text().strip().removeprefix("python-")
            binder = types.SimpleNamespace(version_info=tuple(map(int, runtime.split("."))))
            for child in node.body if eval(test, {"sys": binder}) else node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        if not self.optional:
            self.found.update(alias.name for alias in node.names)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if self.optional:
            return
        base = node.module or ""
        if node.level:
            parent = self.package.rsplit(".", node.level - 1)[0]
            base = f"{parent}.{base}" if base else parent
        self.found.add(base)
        self.found.update(f"{base}.{alias.name}" for alias in node.names)


def _imports(source: str, package: str = "") -> set[str]:
    lines = source.splitlines()
    code = "\n".join(line for line in lines if not line.lstrip().startswith(("%", "!")))
    visitor = _Imports(package)
    visitor.visit(ast.parse(code))
    return visitor.found


def _package_file(module: str) -> Path | None:
    path = SRC / module.replace(".", "/")
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def notebook_third_party_modules() -> dict[str, set[str]]:
    """``{top-level module: {who imports it}}`` for the notebooks and the package modules they
    import (followed through ``transformer_book``), standard library left out."""
    found: dict[str, set[str]] = {}
    todo = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code":
                todo.extend((name, path.name) for name in _imports(cell.source))
    seen = set()
    while todo:
        module, where = todo.pop()
        top = module.split(".")[0]
        if top == "transformer_book":
            parts = module.split(".")
            for depth in range(1, len(parts) + 1):
                name = ".".join(parts[:depth])
                file = _package_file(name)
                if file is not None and name not in seen:
                    seen.add(name)
                    package = name if file.name == "__init__.py" else name.rsplit(".", 1)[0]
                    todo.extend((m, name) for m in _imports(file.read_text("utf-8"), package))
        elif top and top not in sys.stdlib_module_names and top != "__future__":
            found.setdefault(top, set()).add(where)
    return found


def test_binder_provides_every_module_the_notebooks_import():
    distributions = importlib.metadata.packages_distributions()
    modules = notebook_third_party_modules()
    assert {"torch", "matplotlib", "transformers"} <= modules.keys()
    for module, importers in sorted(modules.items()):
        provided = {canonicalize_name(d) for d in distributions.get(module, [])}
        source = sorted(provided) or "no installed distribution"
        assert provided & BINDER_PINS.keys(), (
            f"{module} (imported by {sorted(importers)}) comes from {source}, which "
            "binder/requirements.txt does not install"
        )


def test_binder_post_build_installs_the_package_without_dependencies():
    post_build = BINDER / "postBuild"
    assert os.access(post_build, os.X_OK), "binder/postBuild must be executable"
    commands = [line for line in post_build.read_text().splitlines() if "pip install" in line]
    assert commands == ["python -m pip install --no-deps ."]
    runtime = (BINDER / "runtime.txt").read_text().strip()
    python = re.fullmatch(r"python-(\d+\.\d+)", runtime)
    assert python, runtime
    assert SpecifierSet(pyproject()["project"]["requires-python"]).contains(python[1] + ".0")


# -- Colab ---------------------------------------------------------------------------------


def setup_cell() -> str:
    url, branch = sync_notebooks.repository()
    return sync_notebooks.header_cells("01 A chapter", "01_a.ipynb", url, branch)[1]


def test_setup_cell_installs_the_release_tag_from_the_configured_repository():
    source = setup_cell()
    assert re.findall(r'url = "([^"]+)"', source) == [config_url()]
    version = pyproject()["project"]["version"]
    assert re.findall(r"@v([^\"\s]+)\"", source) == [version]
    assert f"v{version}" in source.splitlines()[1], "the comment names the version"
    assert sync_notebooks.CACHE_ENV == CACHE_ENV
    assert max(len(line) for line in source.splitlines()) <= 88


def run_setup_cell(monkeypatch, *, colab: bool, drive: bool) -> tuple[list, str]:
    """Run the setup cell with pip stubbed out: ``(pip commands, printed text)``."""
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda command, **kw: calls.append(command))
    if colab:
        monkeypatch.setitem(sys.modules, "google.colab", type(sys)("google.colab"))
    real_isdir = os.path.isdir
    monkeypatch.setattr(os.path, "isdir", lambda p: drive if "/content/drive" in str(p)
                        else real_isdir(p))
    monkeypatch.delenv(CACHE_ENV, raising=False)
    printed = io.StringIO()
    with redirect_stdout(printed):
        exec(setup_cell(), {})
    return calls, printed.getvalue()


def test_setup_cell_does_nothing_outside_colab(monkeypatch):
    assert run_setup_cell(monkeypatch, colab=False, drive=True) == ([], "")
    assert CACHE_ENV not in os.environ


def test_setup_cell_on_colab_keeps_its_torch_and_offers_drive(monkeypatch):
    calls, printed = run_setup_cell(monkeypatch, colab=True, drive=False)
    version = pyproject()["project"]["version"]
    assert len(calls) == 1 and calls[0][:5] == [sys.executable, "-m", "pip", "install", "-q"]
    assert calls[0][5] == f"transformer_book @ git+{config_url()}@v{version}"
    assert calls[0][6] == "torch==" + importlib.metadata.version("torch")
    assert "mount Google Drive" in printed and CACHE_ENV not in os.environ
    assert all(len(line) <= 88 for line in printed.splitlines())
    _, printed = run_setup_cell(monkeypatch, colab=True, drive=True)
    assert os.environ[CACHE_ENV] == "/content/drive/MyDrive/transformer_book"
    assert printed == f"Course cache: {os.environ[CACHE_ENV]}\n"


# -- The project's addresses and version ----------------------------------------------------


def test_project_urls_follow_the_config():
    url = config_url()
    owner, name = url.removeprefix("https://github.com/").split("/")
    assert pyproject()["project"]["urls"] == {
        "Homepage": url,
        "Repository": url,
        "Documentation": f"https://{owner}.github.io/{name}/",
        "Issues": f"{url}/issues",
    }


def test_package_version_is_pyproject_version():
    assert transformer_book.__version__ == pyproject()["project"]["version"]
    assert sync_notebooks.package_version() == pyproject()["project"]["version"]


# -- Recorded results -----------------------------------------------------------------------


def _records(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.json").write_text("{}")


def test_recorded_results_dir_order(tmp_path, monkeypatch):
    assert results._checkout_results() == ROOT / "results"  # run from this checkout's src/
    notebooks = tmp_path / "course" / "notebooks"
    notebooks.mkdir(parents=True)
    checkout, installed = tmp_path / "checkout" / "results", tmp_path / "installed"
    monkeypatch.setattr(results, "_checkout_results", lambda: checkout)
    monkeypatch.setattr(results, "_installed_results", lambda: installed)
    monkeypatch.delenv(results.RESULTS_ENV, raising=False)
    monkeypatch.chdir(notebooks)
    assert results.recorded_results_dir() is None
    _records(installed)
    assert results.recorded_results_dir() == installed
    _records(checkout)
    assert results.recorded_results_dir() == checkout
    (notebooks.parent / "results").mkdir()  # a folder without records does not count
    assert results.recorded_results_dir() == checkout
    _records(notebooks.parent / "results")
    assert results.recorded_results_dir() == Path("..") / "results"
    _records(notebooks / "results")
    assert results.recorded_results_dir() == Path("results")
    monkeypatch.setenv(results.RESULTS_ENV, str(tmp_path / "installed"))
    assert results.recorded_results_dir() == installed
    monkeypatch.setenv(results.RESULTS_ENV, str(tmp_path / "missing"))
    with pytest.raises(BookError, match="TRANSFORMER_BOOK_RESULTS"):
        results.recorded_results_dir()


def _source_tree(tmp_path: Path) -> Path:
    """What a build sees of the repository (a clone has the same files)."""
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(SRC, tree / "src", ignore=ignore)
    shutil.copytree(ROOT / "results", tree / "results")
    return tree


def _pip(*args: str | Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", *map(str, args), "-q", "--no-index",
                    "--no-deps", "--no-build-isolation"], check=True)


RECORDS = sorted(p.name for p in (ROOT / "results").glob("*.json"))


@pytest.mark.slow
def test_every_wheel_carries_the_recorded_results(tmp_path):
    pytest.importorskip("setuptools", minversion="77")
    assert RECORDS
    _pip("wheel", _source_tree(tmp_path), "-w", tmp_path / "dist")
    (wheel,) = (tmp_path / "dist").glob("transformer_book-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"transformer_book/_results/{name}" for name in RECORDS} <= names
    # Installed without a checkout (as on Colab), the chapters find that copy.
    _pip("install", "--target", tmp_path / "site", wheel)
    code = ("import transformer_book as t; from transformer_book.util.results import "
            "recorded_results_dir as r; print(t.__file__); print(r())")
    env = {k: v for k, v in os.environ.items() if k != results.RESULTS_ENV}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, check=True, env={**env, "PYTHONPATH": str(tmp_path / "site")})
    package, found = out.stdout.split()
    assert Path(package).parent == tmp_path / "site" / "transformer_book"
    assert Path(found) == tmp_path / "site" / "transformer_book" / "_results"


@pytest.mark.slow
def test_the_sdist_carries_the_results_and_so_does_its_wheel(tmp_path):
    pytest.importorskip("setuptools", minversion="77")
    tree = _source_tree(tmp_path)
    code = "from setuptools import build_meta as b; print(b.build_sdist('dist'))"
    out = subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True, text=True,
                         check=True)
    sdist = tree / "dist" / out.stdout.split()[-1]
    with tarfile.open(sdist) as archive:
        names = archive.getnames()
        archive.extractall(tmp_path / "unpacked", filter="data")
    top = names[0].split("/")[0]
    assert {f"{top}/results/{name}" for name in RECORDS} <= set(names)
    _pip("wheel", tmp_path / "unpacked" / top, "-w", tmp_path / "dist")
    (wheel,) = (tmp_path / "dist").glob("transformer_book-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"transformer_book/_results/{name}" for name in RECORDS} <= names


# -- One release for every launch target ----------------------------------------------------


def _workflow(name: str) -> dict:
    text = (ROOT / ".github" / "workflows" / name).read_text(encoding="utf-8")
    return yaml.safe_load(text)


def test_a_pushed_release_tag_builds_the_student_branch_and_the_book_from_it():
    release = _workflow("release.yml")
    assert release[True]["push"] == {"tags": ["v*"]}  # YAML 1.1 reads `on` as True
    jobs = release["jobs"]
    assert "scripts/release.py --check --tag" in str(jobs["check"]["steps"])
    assert jobs["student"]["uses"] == "./.github/workflows/student.yml"
    assert jobs["book"]["uses"] == "./.github/workflows/book.yml"
    for job in ("student", "book"):
        assert jobs[job]["with"]["ref"] == "${{ github.ref_name }}"
    student = _workflow("student.yml")
    assert set(student[True]) == {"workflow_call", "workflow_dispatch"}, "a release builds it"
    steps = str(student["jobs"]["publish"]["steps"])
    assert 'student_branch.py --commit --branch student --ref "$REF"' in steps
    assert set(_workflow("book.yml")[True]) == {"workflow_call", "workflow_dispatch"}
    # The branch the buttons open is the one the release builds.
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    assert config["repository"]["branch"] == "student"
    assert "\nrelease: " in (ROOT / "Makefile").read_text(encoding="utf-8")
