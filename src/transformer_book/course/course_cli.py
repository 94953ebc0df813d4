"""The course's subcommands, ``assignments`` and ``grade``, for :mod:`transformer_book.cli`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from transformer_book.course.assignments import make_assignments, require_apart
from transformer_book.course.grading_report import grade_class
from transformer_book.course.nbgrader_source import make_nbgrader_sources
from transformer_book.util.validation import require

ASSIGNMENTS = """\
Write one student notebook per source notebook, same file names, mode 0644: the code
between ### BEGIN SOLUTION and ### END SOLUTION becomes raise NotImplementedError, written
answers ({solution} cells) are removed and an answer cell is added under each written
exercise, the book's markup becomes plain Markdown, outputs, tags and timing metadata are
cleared. Each cell's metadata "exercise" (id, kind, points) is kept for `grade`.
With --nbgrader, write nbgrader source notebooks instead, for an nbgrader course's
source/<assignment>/ (then `nbgrader generate_assignment` and `nbgrader autograde`): the
solutions kept as autograded answer cells, one locked test cell per code exercise worth its
points, a manually graded answer cell per written exercise holding the model answer, the
statements and setup cells locked."""

GRADE = """\
Execute each submitted notebook under SUBMISSIONS in a fresh kernel (one thread, a time
limit per cell and per notebook, errors allowed), each in a scratch folder of its own that
holds a copy of that notebook alone, with an environment that names none of --source,
--out and SUBMISSIONS; every submission is read before the first one runs. Every code
exercise is graded with the checker of the installed package, whatever the notebook did
to check(); points come from the master notebooks' metadata. The student is the first
folder below SUBMISSIONS, or the file's stem for a notebook directly in it. --marks
merges hand marks (CSV: student,exercise,points,comment), checked before anything runs.
Writes DIR/grades.csv (one row per student, a points column per exercise, empty for a
written answer still to mark; total and out_of over every exercise; to_mark; notes),
DIR/grades.json and DIR/feedback/<student>.md. DIR may not be a file, nor equal to, inside
or holding --source or SUBMISSIONS. This is not a sandbox: the notebooks run with your
rights; for isolation run it in a container."""


def _source(args: argparse.Namespace) -> Path:
    """``--source``, or ``notebooks/`` in the current folder when it holds the chapters (a
    checkout's root); elsewhere the master notebooks must be named."""
    if args.source is not None:
        return Path(args.source)
    here = Path("notebooks")
    require(any(here.glob("*.ipynb")), "--source",
            "the folder of the course's master notebooks: a checkout's notebooks/ "
            "(git clone https://github.com/transformer-step-by-step/transformer-book), or run "
            "from the checkout's root", f"no --source, and no notebooks/*.ipynb in {Path.cwd()}")
    return here


def _cmd_assignments(args: argparse.Namespace) -> int:
    args.source = _source(args)
    require_apart(args.out, "--out", {"--source": args.source})
    make = make_nbgrader_sources if args.nbgrader else make_assignments
    written = make(args.source, args.out, argument="--out")
    for path in written:
        print(f"wrote {path}")
    kind = "nbgrader source" if args.nbgrader else "student"
    print(f"{len(written)} {kind} notebooks in {Path(args.out).resolve()}")
    return 0


def _cmd_grade(args: argparse.Namespace) -> int:
    require(args.timeout > 0, "--timeout", "a positive number of seconds", args.timeout)
    require(args.jobs >= 1, "--jobs", "a whole number of kernels >= 1", args.jobs)
    require(args.notebook_timeout > 0, "--notebook-timeout", "a positive number of seconds",
            args.notebook_timeout)
    rows = grade_class(args.submissions, args.out, source=_source(args), marks=args.marks,
                       cell_timeout=args.timeout, notebook_timeout=args.notebook_timeout,
                       jobs=args.jobs, progress=not args.quiet)
    to_mark = sum(len(row["to_mark"]) for row in rows)
    print(f"graded {len(rows)} students: {Path(args.out).resolve() / 'grades.csv'}"
          + (f" ({to_mark} written answers to mark: --marks)" if to_mark else ""))
    for row in rows:
        if row["feedback"] != f"{row['student']}.md":
            print(f"feedback of {row['student']!r}: feedback/{row['feedback']}")
    return 0


def add_course_parsers(commands: Any) -> None:
    """Register ``assignments`` and ``grade`` on ``commands`` (an ``add_subparsers`` result)."""
    formatter = argparse.RawDescriptionHelpFormatter
    assignments = commands.add_parser(
        "assignments", help="write student notebooks (or nbgrader sources) from the chapters",
        description=ASSIGNMENTS, formatter_class=formatter)
    assignments.add_argument("--out", required=True, type=Path, metavar="DIR",
                             help="folder to write into")
    assignments.add_argument("--source", type=Path, default=None,
                             help="folder of the master notebooks (default notebooks/ in the "
                             "current folder, a checkout's root)")
    assignments.add_argument("--nbgrader", action="store_true",
                             help="write nbgrader source notebooks instead of student copies")
    assignments.set_defaults(run=_cmd_assignments)
    grade = commands.add_parser("grade", help="grade a folder of submitted notebooks",
                                description=GRADE, formatter_class=formatter)
    grade.add_argument("submissions", type=Path, metavar="SUBMISSIONS",
                       help="folder of submissions (or one .ipynb)")
    grade.add_argument("--out", required=True, type=Path, metavar="DIR",
                       help="folder for the gradebook")
    grade.add_argument("--source", type=Path, default=None,
                       help="folder of the master notebooks (default notebooks/ in the "
                       "current folder, a checkout's root)")
    grade.add_argument("--marks", type=Path, default=None, metavar="CSV",
                       help="hand marks to merge: a CSV file with the header "
                       "student,exercise,points,comment")
    grade.add_argument("--timeout", type=float, default=600, metavar="S",
                       help="seconds one cell may run before it is interrupted (default 600)")
    grade.add_argument("--notebook-timeout", type=float, default=1800, metavar="S",
                       help="seconds a notebook's own cells may run together (default 1800)")
    grade.add_argument("--jobs", type=int, default=1, metavar="N",
                       help="notebooks executed at the same time (default 1)")
    grade.add_argument("--quiet", action="store_true", help="no progress bar")
    grade.set_defaults(run=_cmd_grade)
