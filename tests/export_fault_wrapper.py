"""Export, and die by SIGKILL at a chosen moment of it (for tests/test_export_hf.py).

Run as its own process::

    python tests/export_fault_wrapper.py MODE CHECKPOINT OUT

The export of ``CHECKPOINT`` to ``OUT`` (an earlier export already there) is cut short, as
a ``kill -9`` or a power cut would, by patching :mod:`transformer_book.interop` and
:mod:`transformer_book.util.folders` in this process only:

- ``write``: while the temporary folder is being written (the weights and tokenizer saved,
  the check, the model card and the marker not yet);
- ``swap``: once the temporary folder is complete, before it is exchanged with ``OUT``;
- ``cleanup``: after the exchange, before the old export (now at the temporary name) is
  deleted;
- ``between``: on a system without an atomic exchange, between the two renames (``OUT``
  moved aside, the new folder not yet in).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import torch

from transformer_book.interop import hf_export
from transformer_book.util import folders

MODES = ("write", "swap", "cleanup", "between")


def _die(*args: object) -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def arm(mode: str) -> None:
    """Patch the export to end in SIGKILL at the ``mode`` moment."""
    if mode == "write":
        real = hf_export._name_tokenizer_class

        def name_then_die(path: Path) -> None:
            real(path)
            _die()

        hf_export._name_tokenizer_class = name_then_die
    elif mode == "swap":
        folders._exchange = _die
    elif mode == "cleanup":
        folders._discard = _die
    else:
        real_replace = os.replace

        def replace_then_die(src: Path, dst: Path) -> None:
            real_replace(src, dst)
            if ".old-" in Path(dst).name:  # the first rename: the old export moved aside
                _die()

        folders._exchange = lambda first, second: False
        os.replace = replace_then_die


def main(argv: list[str]) -> None:
    mode, checkpoint, out = argv
    if mode not in MODES:
        raise SystemExit(f"mode: expected one of {MODES}, received {mode!r}")
    torch.set_num_threads(1)
    arm(mode)
    hf_export.export_checkpoint(checkpoint, out)
    raise SystemExit(f"the {mode} moment of the export was never reached")


if __name__ == "__main__":
    main(sys.argv[1:])
