"""The arguments of ``transformer-book export`` (plain argparse: no torch, so that
``transformer-book --help`` stays fast); the command itself is
:func:`transformer_book.interop.hf_export.export_command`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["add_export_parser"]


def add_export_parser(commands: Any, run: Callable[[argparse.Namespace], int]) -> None:
    """Register ``export --checkpoint RUN --out DIR [--average N]`` on ``commands`` (the
    subparsers of the ``transformer-book`` parser), calling ``run(args)``."""
    export = commands.add_parser(
        "export", help="write a Hugging Face MarianMTModel folder (model, tokenizer, "
        "generation config) that computes exactly what the checkpoint computes")
    add = export.add_argument
    add("--checkpoint", required=True, type=Path,
        help="a checkpoint folder or a run folder (its newest checkpoint)")
    add("--out", required=True, type=Path,
        help="the folder to write: new, empty, or an earlier export holding only the files "
        "it wrote (replaced in one step; a kill leaves the old or the new export)")
    add("--average", type=int, default=None,
        help="export the average of the N checkpoints ending at --checkpoint (Section 6.1)")
    export.set_defaults(run=run)
