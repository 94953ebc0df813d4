"""Train, and die by SIGKILL at a chosen moment of a checkpoint save (for tests/test_faults.py).

Run as its own process::

    python tests/fault_wrapper.py MODE STEP CONFIG_JSON OUT_DIR

``CONFIG_JSON`` is a file holding ``RunConfig.to_dict()``. The save of the checkpoint of
optimizer step ``STEP`` is cut short, as a ``kill -9`` or a power cut would, by patching the
internals of :mod:`transformer_book.run.checkpoint` and :mod:`transformer_book.util.folders`
in this process only:

- ``write``: while the checkpoint is being written (the weights, the optimizer state and
  the tokenizer in the temporary folder; the RNG states and ``checkpoint.json`` not yet);
- ``rename``: once the temporary folder is complete, before its rename into place;
- ``between``: between the two renames that replace an existing checkpoint where the
  system cannot exchange two folders in one step (the old copy moved away, the new one not
  yet in). The loop writes each step once, so the checkpoint is
  first put in place as an earlier save of the same step would have (a rerun of the step).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from pathlib import Path

import torch

from transformer_book.run import checkpoint
from transformer_book.run.config import RunConfig
from transformer_book.train.loop import train
from transformer_book.util import folders

MODES = ("write", "rename", "between")


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def arm(mode: str, step: int) -> None:
    """Patch the save of checkpoint ``step`` to end in SIGKILL at the ``mode`` moment."""
    name = checkpoint.checkpoint_name(step)
    if mode == "write":
        real_write = checkpoint.atomic_write_bytes

        def write_file(path: Path, data: bytes) -> Path:
            # the temporary folder of ``name``, its RNG states and manifest not yet written
            if path.name == checkpoint.RNG and path.parent.name.startswith(f".{name}.tmp-"):
                _die()
            return real_write(path, data)

        checkpoint.atomic_write_bytes = write_file
        return
    real_swap = folders._swap_in
    real_replace = os.replace

    def swap_in(temp: Path, target: Path) -> None:
        if target.name != name:
            return real_swap(temp, target)
        if mode == "rename":
            _die()
        shutil.copytree(temp, target)  # the same step, saved before

        def replace(src, dst):  # the second rename: the new copy into place
            if os.fspath(dst) == os.fspath(target):
                _die()
            real_replace(src, dst)

        os.replace = replace
        folders._exchange = lambda first, second: False  # as on a system without it
        try:
            real_swap(temp, target)
        finally:
            os.replace = real_replace
        return None

    folders._swap_in = swap_in


def main(argv: list[str]) -> None:
    mode, step, config_path, out_dir = argv
    if mode not in MODES:
        raise SystemExit(f"mode: expected one of {MODES}, received {mode!r}")
    torch.set_num_threads(1)  # as the tests' own process: the same floating-point sums
    config = RunConfig.from_dict(json.loads(Path(config_path).read_text(encoding="utf-8")))
    arm(mode, int(step))
    train(config, out_dir, progress=False, results_dir=None, bleu_sentences=0,
          val_sentences=16)
    raise SystemExit(f"the save of step {step} was never reached")


if __name__ == "__main__":
    main(sys.argv[1:])
