"""The ``transformer-book`` command line.

Subcommands::

    transformer-book env                          # versions, device, threads
    transformer-book assignments --out DIR        # student notebooks (solutions stripped)

Each subcommand is a function ``_cmd_<name>(args) -> int`` registered in
:func:`build_parser`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def _cmd_env(args: argparse.Namespace) -> int:
    from transformer_book.env import format_report

    print(format_report())
    return 0


def _cmd_assignments(args: argparse.Namespace) -> int:
    from transformer_book.assignments import make_assignments

    written = make_assignments(args.source, args.out)
    for path in written:
        print(f"wrote {path}")
    print(f"{len(written)} student notebooks in {Path(args.out).resolve()}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="transformer-book",
        description="The Transformer, step by step: tools for the course.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    env = commands.add_parser("env", help="print versions, device and threads")
    env.set_defaults(run=_cmd_env)

    assignments = commands.add_parser(
        "assignments", help="write student notebooks with solutions stripped"
    )
    assignments.add_argument("--out", required=True, type=Path, help="folder to write into")
    assignments.add_argument(
        "--source", type=Path, default=Path("notebooks"), help="folder of source notebooks"
    )
    assignments.set_defaults(run=_cmd_assignments)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``transformer-book`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except ValueError as error:
        print(f"transformer-book {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
