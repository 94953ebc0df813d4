"""The class edition of the book: the pages, the search index and the downloads hold no
solution.

The book has two editions built from one source, ``notebooks/``:

- the *self-study* edition (``make book``): the master notebooks, every solution collapsed
  behind "Show solution";
- the *class* edition (``make class``, this script): each chapter is its student copy
  (:func:`transformer_book.course.assignments.make_student_notebook`: solution code
  replaced by ``raise NotImplementedError``, written answers and text about the book's
  solutions removed, plain Markdown). So that the pages still show the chapters' results,
  a class copy takes back, from its master, the stored outputs and the display metadata
  (tags such as ``remove-cell`` and ``hide-input``, alt texts) of every cell that belongs
  to no exercise; exercise cells stay as the student copy has them, without outputs. A
  page's Download button serves that class copy.

``tree`` lays out a book source in ``_build/class-src``: the book's ``_toc.yml``,
``_static/`` and ``book/`` pages, a copy of ``_config.yml`` whose title names the edition,
and the class copies in ``notebooks/``. Files that did not change keep their time stamps,
so a second build only rebuilds what changed. ``build`` also runs jupyter-book on it and
copies the HTML into ``_build/class/html``, then runs ``check``. ``check`` reads every
solution of the master notebooks (the lines between ``### BEGIN SOLUTION`` and ``### END
SOLUTION``, the written answers of ``solution`` cells) and looks for each line that the
rest of the book never shows in every HTML page, every ``_sources/`` download
(``.ipynb``, ``.md``) and the search index (``searchindex.js``: for the words that only
solutions use). It exits 1 and lists what it found; on the self-study edition it finds
the solutions. It exits 2, on one line, when it would read nothing: no master solution to
look for, or no built page to look in. ``build`` replaces only a ``--html`` folder it wrote
itself (``.class_edition``), and ``tree`` an ``--out`` tree it wrote (``.class_tree``).

    python scripts/class_edition.py tree [--out DIR] [--chapters 00 05]
    python scripts/class_edition.py build [--html DIR] [--chapters ...] [-- JUPYTER-BOOK ARGS]
    python scripts/class_edition.py check HTML_DIR [--source notebooks]
"""

from __future__ import annotations

import argparse
import copy
import functools
import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat
import yaml
from sphinx.search.en import SearchEnglish

from transformer_book.course.assignments import make_student_notebook
from transformer_book.course.exercise_cells import (
    BEGIN,
    END,
    KEY,
    has_solution_markers,
    solution_label_of,
)
from transformer_book.course.plain_markdown import read_citations

ROOT = Path(__file__).resolve().parents[1]
TREE = ROOT / "_build" / "class-src"
HTML = ROOT / "_build" / "class" / "html"
MARKER = ".class_tree"
#: Written into the HTML folder ``build`` fills: only a folder holding it is ever replaced.
HTML_MARKER = ".class_edition"
EDITION = "class edition"
#: What the book's source is besides the chapters (copied as they are).
BOOK_FILES = ("_toc.yml", "_static", "book")
#: Text the student copies add (scripts' own words, never a solution's).
SCAFFOLD = ("raise NotImplementedError write your solution here Your answer to exercise "
            "Write your answer here Exercise")
#: A solution line is looked for when it has at least this many words (shorter lines, such
#: as ``return x``, say nothing distinctive) ...
MIN_WORDS = 4
#: ... and a word of the search index when it has at least this many letters.
MIN_LETTERS = 5
WORD = re.compile(r"[A-Za-z0-9]+")
SKIPPED_FOLDERS = {"_static", "_images", ".doctrees"}
SCANNED_SUFFIXES = {".html", ".ipynb", ".md", ".txt", ".js", ".json", ".py", ".tex"}


class Refused(Exception):
    """Bad input: ``main`` prints the message on one line and exits 2."""


# -- The class copies and the build tree -----------------------------------------------------


def _is_exercise_cell(cell: nbformat.NotebookNode) -> bool:
    return (KEY in cell.get("metadata", {}) or has_solution_markers(cell)
            or "solution" in cell.get("metadata", {}).get("tags", [])
            or (cell.cell_type == "markdown" and solution_label_of(cell) is not None))


def class_notebook(master: nbformat.NotebookNode, name: str,
                   citations: dict | None = None) -> nbformat.NotebookNode:
    """The class copy of ``master``: its student copy, with the outputs and display
    metadata of every cell outside the exercises taken back from ``master`` (module doc)."""
    student = make_student_notebook(master, name, citations)
    masters = {cell.get("id"): cell for cell in master.cells if not _is_exercise_cell(cell)}
    for cell in student.cells:
        source = masters.get(cell.get("id"))
        if source is None or source.cell_type != cell.cell_type or _is_exercise_cell(cell):
            continue
        shown = {k: v for k, v in source.metadata.items() if k not in ("execution", KEY)}
        cell.metadata.update(copy.deepcopy(shown))
        if cell.cell_type == "code":
            cell.outputs = copy.deepcopy(source.get("outputs", []))
            cell.execution_count = source.get("execution_count")
    nbformat.validate(student)
    return student


def _chapters(chapters: list[str] | None, source: Path = ROOT / "notebooks") -> list[Path]:
    paths = sorted(source.glob("[0-9][0-9]_*.ipynb"))
    if chapters:
        paths = [p for p in paths if p.name[:2] in chapters]
        if {p.name[:2] for p in paths} != set(chapters):
            raise Refused(f"--chapters: expected chapter numbers of notebooks/, received "
                          f"{chapters}")
    return paths


def _toc(names: set[str]) -> str:
    """``_toc.yml`` without the chapters that are not built (a smaller edition)."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    for part in toc.get("parts", []):
        part["chapters"] = [entry for entry in part["chapters"]
                            if not entry["file"].startswith("notebooks/")
                            or entry["file"].removeprefix("notebooks/") in names]
    toc["parts"] = [part for part in toc.get("parts", []) if part["chapters"]]
    return yaml.safe_dump(toc, sort_keys=False, allow_unicode=True)


def _config() -> str:
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    config["title"] = f"{config['title']} ({EDITION})"
    header = ("# Generated by scripts/class_edition.py from the book's _config.yml: the class\n"
              "# edition (no solutions in its pages, search index or downloads).\n")
    return header + yaml.safe_dump(config, sort_keys=False, allow_unicode=True)


def tree_files(chapters: list[str] | None = None, source: Path = ROOT / "notebooks"
               ) -> dict[str, bytes]:
    """``{path in the build tree: content}`` of the class edition's source (module doc),
    its chapters made from the master notebooks in ``source``."""
    files: dict[str, bytes] = {"_config.yml": _config().encode("utf-8")}
    for name in BOOK_FILES:
        path = ROOT / name
        found = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in found:
            if "__pycache__" not in file.parts:
                files[file.relative_to(ROOT).as_posix()] = file.read_bytes()
    paths = _chapters(chapters, source)
    if chapters:
        files["_toc.yml"] = _toc({p.stem for p in paths}).encode("utf-8")
    citations = read_citations(ROOT / "book" / "references.bib")
    for path in paths:
        master = nbformat.read(path, as_version=4)
        text = nbformat.writes(class_notebook(master, path.name, citations))
        files[f"notebooks/{path.name}"] = (text.rstrip("\n") + "\n").encode("utf-8")
    return files


def require_own_folder(folder: Path, argument: str, marker: str, what: str) -> None:
    """``folder`` may be (re)written: new, empty, one this script wrote (``marker``), or its
    default under the repository's ``_build`` (which builds own; older ones had no marker)."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise Refused(f"{argument}: expected a folder, received {folder}, which is not one")
    default = folder.resolve() in (TREE.resolve(), HTML.resolve())
    if (folder.is_dir() and any(folder.iterdir()) and not (folder / marker).is_file()
            and not default):
        raise Refused(f"{argument}: expected a new or empty folder (or an earlier {what}, "
                      f"holding {marker}), received {folder}, holding other files")


def lay_out(out: Path, files: dict[str, bytes]) -> None:
    """Make ``out`` hold exactly ``files`` (its ``_build`` kept); unchanged files are not
    rewritten. ``out`` must be new, empty or a tree this wrote (``.class_tree``)."""
    require_own_folder(out, "--out", MARKER, "class tree")
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("class edition source (scripts/class_edition.py)\n")
    for old in sorted(out.rglob("*"), reverse=True):
        relative = old.relative_to(out)
        if relative.parts[0] in ("_build", MARKER):
            continue
        if old.is_file() and relative.as_posix() not in files:
            old.unlink()
        elif old.is_dir() and not any(old.iterdir()):
            old.rmdir()
    for name, content in files.items():
        target = out / name
        if not (target.is_file() and target.read_bytes() == content):
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)


def build(tree: Path, html_out: Path, extra: list[str]) -> None:
    """jupyter-book on ``tree`` (its own ``_build``), the HTML copied into ``html_out``,
    which must be new, empty or an earlier class edition (``.class_edition``): a folder of
    anyone else's files is refused, before anything is built."""
    require_own_folder(html_out, "--html", HTML_MARKER, "class edition")
    binary = Path(sys.executable).with_name("jupyter-book")
    command = [str(binary) if binary.exists() else "jupyter-book", "build", str(tree), *extra]
    print("$", " ".join(command), flush=True)
    if subprocess.run(command, check=False).returncode != 0:
        sys.exit("class_edition: the class edition's jupyter-book build failed")
    require_own_folder(html_out, "--html", HTML_MARKER, "class edition")  # it may have changed
    if html_out.exists():
        shutil.rmtree(html_out)
    shutil.copytree(tree / "_build" / "html", html_out)
    (html_out / HTML_MARKER).write_text("class edition (scripts/class_edition.py build)\n")
    print(f"Class edition: {html_out / 'index.html'}")


# -- The check: no solution anywhere in the built edition --------------------------------------


@dataclass(frozen=True)
class Solution:
    """One solution line, where it comes from and its words (lower case)."""

    where: str
    line: str
    words: str


def words_of(text: str) -> str:
    """``text`` as its words (letters and digits, lower case) joined by single spaces: what
    a line reads as in HTML, Markdown, JSON or highlighted code alike."""
    return " ".join(word.lower() for word in WORD.findall(html.unescape(text)))


def _split_solution(cell: nbformat.NotebookNode) -> tuple[list[str], str]:
    """``(the solution's lines, the rest of the cell)``: the lines between the markers of a
    code cell, or a written answer's lines (its directive's fences and options left out);
    a cell without a solution is all rest."""
    if has_solution_markers(cell):
        lines, rest, inside = [], [], False
        for line in cell.source.splitlines():
            if line.strip().startswith((BEGIN, END)):
                inside = line.strip().startswith(BEGIN)
            (lines if inside and not line.strip().startswith(BEGIN) else rest).append(line)
        return lines, "\n".join(rest)
    if cell.cell_type == "markdown" and (
            "solution" in cell.metadata.get("tags", []) or solution_label_of(cell)):
        return [line for line in cell.source.splitlines()
                if not re.match(r"\s*(`{3,}|:{3,}|:\w+:)", line)], ""
    return [], _shown_text(cell)


def _shown_text(cell: nbformat.NotebookNode) -> str:
    """A cell's source and text outputs (what the book may show of it)."""
    parts = [cell.source]
    for output in cell.get("outputs", []):
        parts.append(output.get("text", ""))
        for mime in ("text/plain", "text/html", "text/markdown", "text/latex"):
            value = output.get("data", {}).get(mime, "")
            parts.append(value if isinstance(value, str) else "".join(value))
    return "\n".join(parts)


def solutions(source: Path) -> tuple[list[Solution], set[str]]:
    """Every distinctive solution line of ``source/NN_*.ipynb`` (at least ``MIN_WORDS``
    words, read nowhere else in the book: the notebooks' other cells and outputs, the
    ``book/`` pages, the bibliography, the student copies' own words), and the words that
    only the solutions use (at least ``MIN_LETTERS`` letters; their stem, as the search
    index keeps them, is no other word's)."""
    found, elsewhere = [], [SCAFFOLD]
    elsewhere += [p.read_text(encoding="utf-8") for p in sorted((ROOT / "book").rglob("*"))
                  if p.suffix in (".md", ".bib", ".yml")]
    for path in sorted(Path(source).glob("[0-9][0-9]_*.ipynb")):
        for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
            lines, rest = _split_solution(cell)
            elsewhere.append(rest)
            exercise = cell.metadata.get(KEY, {}).get("id", f"cell {index}")
            found += [Solution(f"{path.name} {exercise}", line.strip(), words_of(line))
                      for line in lines]
    shown = " " + " ".join(words_of(text) for text in elsewhere) + " "
    shown_stems = {_stemmer().stem(word) for word in set(shown.split())}
    distinctive = [s for s in found if len(s.words.split()) >= MIN_WORDS
                   and f" {s.words} " not in shown]
    only_words = {word for s in found for word in s.words.split()
                  if len(word) >= MIN_LETTERS and word.isalpha()
                  and _stemmer().stem(word) not in shown_stems}
    return distinctive, only_words


def _document_text(path: Path) -> str:
    """The text of a built file: an HTML page without its tags, a notebook's sources and
    outputs, any other text file as it is."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".html":
        text = re.sub(r"<(script|style)\b.*?</\1>", " ", text, flags=re.S | re.I)
        text = re.sub(r"<[^>]+>", "", text)
    elif path.suffix == ".ipynb":
        notebook = nbformat.reads(text, as_version=4)
        text = "\n".join(_shown_text(cell) for cell in notebook.cells)
    return text


def _index_terms(path: Path) -> set[str]:
    """The terms of Sphinx's ``searchindex.js`` (stemmed words of the pages and titles) that
    lead to a page: an incremental build keeps a word no page holds any more, with no page."""
    text = path.read_text(encoding="utf-8")
    index = json.loads(text[text.index("(") + 1: text.rindex(")")])
    terms = {**index.get("terms", {}), **index.get("titleterms", {})}
    return {term for term, pages in terms.items() if pages or pages == 0}


@functools.cache
def _stemmer() -> SearchEnglish:
    """The stemmer of the book's search index (Sphinx, English)."""
    return SearchEnglish({})


def leaks(html_dir: Path, source: Path) -> list[str]:
    """Every solution line (and solution-only word of the search index) found in
    ``html_dir``: one message per file and solution line; empty when there is none.
    Refused (:class:`Refused`) when there is nothing to look for (``source`` holds no
    solution) or nowhere to look (``html_dir`` holds no page), so that "no solution" is
    never said of a check that read nothing."""
    if not Path(source).is_dir():
        raise Refused(f"--source: expected the folder of master notebooks, received {source}")
    lines, only_words = solutions(source)
    if not lines:
        raise Refused(f"--source: expected master notebooks holding solutions, received "
                      f"{source}, holding none: there is nothing to look for")
    if not Path(html_dir).is_dir():
        raise Refused(f"html_dir: expected a built edition's folder, received {html_dir}")
    found, pages = [], 0
    for path in sorted(Path(html_dir).rglob("*")):
        relative = path.relative_to(html_dir)
        if (not path.is_file() or path.suffix not in SCANNED_SUFFIXES
                or SKIPPED_FOLDERS & set(relative.parts[:-1])):
            continue
        pages += path.suffix == ".html"
        if path.name == "searchindex.js":
            stems = {_stemmer().stem(word): word for word in only_words}
            hits = sorted(stems[t] for t in _index_terms(path) & stems.keys())
            found += [f"{relative}: the solution-only word {word!r}" for word in hits]
            continue
        text = " " + words_of(_document_text(path)) + " "
        found += [f"{relative}: {s.where}: {s.line}" for s in lines if f" {s.words} " in text]
    if not pages:
        raise Refused(f"html_dir: expected a built edition, received {html_dir}, holding no "
                      "HTML page: there is nothing to look in")
    return found


# -- The command line --------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    tree = commands.add_parser("tree", help="lay out the class edition's source")
    make = commands.add_parser("build", help="tree, jupyter-book, then check")
    for command in (tree, make):
        command.add_argument("--out", type=Path, default=TREE, help="the source tree")
        command.add_argument("--chapters", nargs="+", help="only these chapters (e.g. 00 05)")
    make.add_argument("--html", type=Path, default=HTML, help="where the HTML goes")
    make.add_argument("jupyter_book_args", nargs="*", help="after --: jupyter-book's options")
    check = commands.add_parser("check", help="look for solutions in a built edition")
    check.add_argument("html_dir", type=Path)
    check.add_argument("--source", type=Path, default=ROOT / "notebooks",
                       help="the master notebooks (default: notebooks/)")
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except Refused as error:
        print(f"class_edition {args.command}: error: {error}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    if args.command == "build":  # refused now, not after the build
        require_own_folder(args.html, "--html", HTML_MARKER, "class edition")
    with tempfile.TemporaryDirectory() as snapshot:
        if args.command in ("tree", "build"):
            # The masters as they are now: the check reads the ones the edition was built from.
            for path in _chapters(args.chapters):
                shutil.copy2(path, snapshot)
            lay_out(args.out, tree_files(args.chapters, Path(snapshot)))
            print(f"class edition source in {args.out}")
        if args.command == "build":
            build(args.out, args.html, args.jupyter_book_args)
            args.html_dir, args.source = args.html, Path(snapshot)
        found = leaks(args.html_dir, args.source) if args.command != "tree" else []
    if args.command in ("build", "check"):
        for message in found:
            print(f"solution text in {message}")
        if found:
            print(f"class_edition: {len(found)} solution lines in {args.html_dir}")
            return 1
        print(f"no solution in {args.html_dir} (pages, search index, downloads)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
