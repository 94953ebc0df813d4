"""The course's trained-model cache: chapter 10 trains a small model once, chapter 11 reuses it.

Chapter 10 trains a Transformer on Multi30k de -> en for a fixed number of optimizer steps
(Section 5 of the paper, scaled down to a laptop CPU). Chapter 11 decodes and evaluates that
very model. Both call :func:`train_chapter10_model`: the first call trains, later calls (in
any process) find the finished run and return it at once. The run's configuration is
written in one place, :func:`chapter10_run_config`.

Where the runs live: ``$TRANSFORMER_BOOK_CACHE`` if set, else
``$XDG_CACHE_HOME/transformer_book/course``, else ``~/.cache/transformer_book/course``. A
run folder is named after a hash of its configuration (``ch10-<hash>``), so a changed config
trains a new run instead of reusing an old one.

Safety: a run counts as finished only when its completion marker (``complete.json``,
written atomically after the last checkpoint) exists and matches the folder. Training holds
an exclusive lock (``fcntl.flock`` on ``ch10-<hash>.lock``), so when two processes ask at
the same time (e.g. chapters 10 and 11 executed in parallel by the tests) one trains and the
other waits and then reuses the result. An interrupted run is resumed exactly from its last
checkpoint by the training loop; one whose checkpoints were written by another
configuration is moved aside (never deleted) and trained afresh, and any other failure
leaves the folder as it was.

What a call prints does not depend on the cache: a chapter's cell shows the same output
whether the run was trained now, waited for while another process trained it, or found
finished. What the cache does meanwhile (training, with the loop's evaluation lines,
waiting, tidying an interrupted write, moving a run aside) is a status: in a Jupyter kernel
one live line (a display updated in place, emptied when the call returns, so neither the
stored notebook nor nbval sees it; ``scripts/execute_notebooks.py`` drops the empty display
it leaves), elsewhere lines on stderr. A call that fails leaves its last status in place.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import io
import json
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from transformer_book.run.config import RunConfig
from transformer_book.train.corpus import PreparedData, prepare_data
from transformer_book.train.loop import TrainingResult, train
from transformer_book.train.resume import ConfigMismatchError
from transformer_book.util.env import get_device
from transformer_book.util.files import atomic_write_json
from transformer_book.util.records import hardware_info
from transformer_book.util.validation import require, require_int

try:  # POSIX (Linux, macOS, Colab); without it the cache still works, unlocked
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "CACHE_ENV",
    "MARKER",
    "CourseRun",
    "cached_run",
    "chapter10_data",
    "chapter10_dir",
    "chapter10_model",
    "chapter10_run_config",
    "config_hash",
    "course_cache_dir",
    "load_completed",
    "train_chapter10_model",
]

CACHE_ENV = "TRANSFORMER_BOOK_CACHE"
MARKER = "complete.json"
# 2: the paper's layout (no final LayerNorm, no generator bias) and best-by-val checkpoints.
# 3: a checkpoint at every evaluation (best-val sees them all), kept only for its val loss.
CACHE_VERSION = 3

# Chapter 10's run, sized so that it takes about 4 minutes on 2 idle CPU cores
# (~0.25 s per step for this model and batch size, plus the evaluations).
CHAPTER10_STEPS = {"cpu": 800, "cuda": 4000}
CHAPTER10_BLEU_SENTENCES = 100  # greedy BLEU on the first 100 val sentences at each eval
CHAPTER10_VAL_SENTENCES = 300  # validation loss on the first 300 val pairs


def course_cache_dir() -> Path:
    """The folder holding the course's runs (see the module docstring for the order)."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "transformer_book" / "course"


def _device(device: torch.device | str | None) -> torch.device:
    return get_device() if device is None else torch.device(device)


def chapter10_run_config(device: torch.device | str | None = None) -> RunConfig:
    """Chapter 10's training run: Multi30k de -> en, a narrow Transformer, fixed steps.

    The model is the paper's architecture (post-LN, sinusoidal positions, tied embeddings,
    Section 3) at a laptop's size: d_model 128, h 4, 2 + 2 layers, d_ff 512, dropout 0.1,
    ε_ls 0.1 (Section 5.4). A joint BPE of 4,000 tokens (Section 5.1), batches of at most
    2,000 padded tokens per side, Adam with eq. 3's warmup (Section 5.3) over 200 steps --
    short enough to finish inside the budget -- and gradient clipping at 1.0. The budget is
    counted in optimizer steps, never in minutes, so the result does not depend on how busy
    the machine is: 800 steps on a CPU (or MPS), 4,000 on a CUDA GPU. A CPU trains in fp32
    (``precision`` "auto" measures the machine and could pick bf16 on one CPU and not on
    another, and the chapters' numbers would depend on the CPU); a GPU in its "auto"
    precision.
    """
    kind = _device(device).type
    steps = CHAPTER10_STEPS["cuda" if kind == "cuda" else "cpu"]
    return RunConfig.from_dict({
        "model": {"preset": "tiny", "d_model": 128, "num_heads": 4, "num_encoder_layers": 2,
                  "num_decoder_layers": 2, "d_ff": 512, "dropout": 0.1, "max_len": 128,
                  "label_smoothing": 0.1},
        "data": {"src": "de", "tgt": "en", "vocab_size": 4000, "max_tokens": 2000,
                 "max_len": 100},
        "train": {"max_steps": steps, "max_minutes": None, "warmup_steps": 200,
                  "lr_factor": 0.5, "accumulation": 1, "clip_norm": 1.0,
                  "eval_every": steps // 8, "checkpoint_every": steps // 20,
                  "keep_last": 5, "seed": 0,
                  "precision": "auto" if kind == "cuda" else "fp32"},
        "decode": {"beam_size": 4, "alpha": 0.6, "max_len_a": 1.0, "max_len_b": 50},
    }, source="chapter10_run_config")


def config_hash(run_config: RunConfig, **extra: Any) -> str:
    """12 hex digits of SHA-256 over the run's configuration (``data_dir`` left out: it
    says where the files are, not what they hold) and any ``extra`` settings."""
    require(isinstance(run_config, RunConfig), "run_config", "a RunConfig",
            type(run_config).__name__)
    settings = run_config.to_dict()
    settings["data"].pop("data_dir", None)
    payload = {"version": CACHE_VERSION, "run": settings, "extra": extra}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def _chapter10_key(device: torch.device) -> tuple[RunConfig, str]:
    run_config = chapter10_run_config(device)
    return run_config, "ch10-" + config_hash(run_config, bleu=CHAPTER10_BLEU_SENTENCES,
                                             val=CHAPTER10_VAL_SENTENCES)


def chapter10_dir(device: torch.device | str | None = None, root: str | Path | None = None
                  ) -> Path:
    """The run folder of chapter 10's model for this kind of device (it may not exist)."""
    _, name = _chapter10_key(_device(device))
    return (Path(root) if root is not None else course_cache_dir()) / name


@dataclass
class CourseRun:
    """A finished training run of the course, as recorded in its completion marker.

    ``losses`` has one ``{"step", "loss", "lr", "tokens"}`` per optimizer step and
    ``evals`` one dict per validation (``step``, ``val_loss``, ``val_ppl``, ``bleu``, ...),
    as :class:`transformer_book.train.loop.TrainingResult`, whose names the times keep:
    ``wall_seconds``, ``seconds_per_step`` and ``tokens_per_second`` describe the last
    training session; ``train_seconds`` is the whole run's time in training, every session
    of an interrupted and resumed run included. ``trained_now`` says whether this call
    trained it (``False``: found in the cache).
    """

    run_dir: Path
    run_config: RunConfig
    steps: int
    wall_seconds: float
    seconds_per_step: float
    tokens_per_second: float
    hardware: dict[str, Any]
    final_checkpoint: Path
    losses: list[dict[str, Any]] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)
    train_seconds: float = 0.0
    trained_now: bool = False


def load_completed(run_dir: str | Path, key: str | None = None) -> CourseRun | None:
    """The finished run in ``run_dir``, or ``None`` when it is missing, half-written, of
    another configuration (``key`` given and different) or its final checkpoint is gone."""
    run_dir = Path(run_dir)
    try:
        marker = json.loads((run_dir / MARKER).read_text(encoding="utf-8"))
        if marker.get("version") != CACHE_VERSION or (key is not None and marker["key"] != key):
            return None
        final = run_dir / marker["final_checkpoint"]
        if not (final / "checkpoint.json").is_file():
            return None
        return CourseRun(run_dir, RunConfig.from_dict(marker["run_config"]), marker["steps"],
                         marker["wall_seconds"], marker["seconds_per_step"],
                         marker["tokens_per_second"], marker["hardware"], final,
                         marker["losses"], marker["evals"],
                         train_seconds=marker.get("train_seconds", marker["wall_seconds"]),
                         trained_now=False)
    except (OSError, ValueError, KeyError, TypeError):
        return None


class _Status:
    """What one call of the cache is doing, said where it changes no output (module
    docstring): in a Jupyter kernel a display made empty at the first thing said, updated in
    place with each and emptied again by :meth:`done`; elsewhere a line on stderr for each."""

    def __init__(self, name: str) -> None:
        self.name, self.handle, self.heading = name, None, ""
        self.stderr = sys.stderr  # the caller's, not the one capturing() puts in its place
        self.started = time.monotonic()

    def title(self, text: str) -> None:
        """Say ``text`` and keep it above the lines said after it (in a kernel)."""
        self.heading = ""
        self.say(text)
        self.heading = text

    def say(self, line: str) -> None:
        """Show ``line`` (under the title, if any)."""
        if not _in_kernel():
            print(f"{self.name}: {line}", file=self.stderr, flush=True)
            return
        from IPython.display import display  # a kernel has IPython

        minutes = (time.monotonic() - self.started) / 60
        text = f"{self.name}: {self.heading}\n    {minutes:.1f} min: {line}" if self.heading \
            else f"{self.name}: {line}"
        if self.handle is None:  # made empty: what nbval sees of a display is its first form
            self.handle = display({}, raw=True, display_id=True)
        self.handle.update({"text/plain": text}, raw=True)

    @contextlib.contextmanager
    def capturing(self) -> Iterator[None]:
        """Everything printed meanwhile (the training loop's lines, a tidy's reports,
        warnings) becomes status lines instead of output."""
        lines = _Lines(self.say)
        try:
            with contextlib.redirect_stdout(lines), contextlib.redirect_stderr(lines):
                yield
        finally:
            lines.flush()

    def done(self) -> None:
        """Empty the live display: the call's output is as if nothing had been said."""
        if self.handle is not None:
            self.handle.update({}, raw=True)
            self.handle = None


class _Lines(io.TextIOBase):
    """A text stream that hands each complete, non-blank line to ``say``."""

    def __init__(self, say: Callable[[str], None]) -> None:
        super().__init__()
        self.say, self.pending = say, ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        *lines, self.pending = (self.pending + text).replace("\r", "\n").split("\n")
        for line in lines:
            if line.strip():
                self.say(line.rstrip())
        return len(text)

    def flush(self) -> None:
        if self.pending.strip():
            self.say(self.pending.rstrip())
        self.pending = ""


def _in_kernel() -> bool:
    """Whether this code runs in a Jupyter kernel (IPython with a kernel attached)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return getattr(shell, "kernel", None) is not None


@contextlib.contextmanager
def _locked(lock_path: Path, on_wait: Callable[[str], None]) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path``, waiting for another process holding it; a
    wait is said through ``on_wait`` first."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as handle:
        if fcntl is not None:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                on_wait("another process is preparing it; waiting for it to finish ...")
                fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(handle, fcntl.LOCK_UN)


def cached_run(run_config: RunConfig, name: str, *, device: torch.device | str | None = None,
               root: str | Path | None = None, bleu_sentences: int = 100,
               val_sentences: int | None = None) -> CourseRun:
    """Return the finished run ``root/name``; train it first (under a lock) if needed.

    ``name`` should contain :func:`config_hash` of the configuration, so that a different
    configuration never reuses this folder. Training calls
    :func:`transformer_book.train.loop.train` with no JSON record (``results/`` holds the
    CLI's runs only); a folder left by an interrupted run is resumed from its last
    checkpoint. If those checkpoints were written by another configuration, the folder is
    moved aside (``<name>.aside-<UTC time>``) and the run starts afresh; any other error
    propagates and leaves the folder as it was. Nothing is printed: training, waiting and
    the rest are a status (module docstring), so the caller's output is the same whether
    the run was trained, waited for or found.
    """
    require(isinstance(run_config, RunConfig), "run_config", "a RunConfig",
            type(run_config).__name__)
    require(isinstance(name, str) and name and "/" not in name and not name.startswith("."),
            "name", "a folder name", repr(name))
    require_int(bleu_sentences, "bleu_sentences", minimum=0)
    root = Path(root) if root is not None else course_cache_dir()
    run_dir = root / name
    key = f"{name}:{config_hash(run_config, bleu=bleu_sentences, val=val_sentences)}"
    found = load_completed(run_dir, key)
    if found is not None:
        return found
    device = _device(device)
    status = _Status(name)
    with _locked(root / f"{name}.lock", status.say):
        found = load_completed(run_dir, key)  # another process may have finished it
        if found is not None:
            status.done()
            return found
        (run_dir / MARKER).unlink(missing_ok=True)
        status.title(f"training {run_config.train.max_steps} steps into {run_dir} (later "
                     "calls find it there)")
        with status.capturing():
            result = _train_afresh_if_needed(
                run_config, run_dir, progress=False, device=device, results_dir=None,
                name=name, bleu_sentences=bleu_sentences, val_sentences=val_sentences)
        require(result.final_checkpoint is not None, "run_config", "at least one step",
                "a run that stopped before its first step")
        atomic_write_json(run_dir / MARKER, {
            "version": CACHE_VERSION, "key": key, "run_config": run_config.to_dict(),
            "steps": result.step, "wall_seconds": result.wall_seconds,
            "seconds_per_step": result.seconds_per_step,
            "tokens_per_second": result.tokens_per_second,
            "hardware": hardware_info(device), "train_seconds": result.train_seconds,
            "final_checkpoint": result.final_checkpoint.name,
            "resumed_from": result.resumed_from.name if result.resumed_from else None,
            "losses": result.losses, "evals": result.evals,
        })
    run = load_completed(run_dir, key)
    require(run is not None, str(run_dir), "a readable completion marker", "none")
    run.trained_now = True
    status.done()
    return run


def _train_afresh_if_needed(run_config: RunConfig, run_dir: Path, **kwargs: Any
                            ) -> TrainingResult:
    """:func:`train` into ``run_dir``, resuming its checkpoints.

    Only a proven configuration mismatch (:class:`ConfigMismatchError`: the checkpoints were
    written by another configuration) starts afresh, and even then nothing is deleted: the
    old run folder is moved aside to a sibling named with the UTC time, reported on stderr.
    Any other error (offline, a corrupted file, a diverged run) propagates with the run
    folder as it was.
    """
    with warnings.catch_warnings():  # tqdm.auto warns in notebooks without ipywidgets
        warnings.simplefilter("ignore")
        import tqdm.auto  # noqa: F401  (the loop imports it; no bar is shown here)
    try:
        return train(run_config, run_dir, resume=True, **kwargs)
    except ConfigMismatchError as error:
        aside = _move_aside(run_dir)
        print(f"{run_dir}: its checkpoints do not fit this configuration ({error}); the old "
              f"run is moved to {aside}; starting afresh", flush=True)  # a status line
    return train(run_config, run_dir, resume=True, **kwargs)


def _move_aside(run_dir: Path) -> Path:
    """Rename ``run_dir`` to ``<name>.aside-<UTC time>`` (``-2``, ``-3``... if taken) next to
    it and return the new path."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    target, n = run_dir.with_name(f"{run_dir.name}.aside-{stamp}"), 1
    while target.exists():
        n += 1
        target = run_dir.with_name(f"{run_dir.name}.aside-{stamp}-{n}")
    os.replace(run_dir, target)
    return target


def train_chapter10_model(device: torch.device | str | None = None, *,
                          root: str | Path | None = None) -> CourseRun:
    """Chapter 10's model: trained now, or found finished in the cache.

    Trains :func:`chapter10_run_config` for this device into
    ``course_cache_dir()/ch10-<hash>`` (validation loss on the first 300 val pairs and greedy
    BLEU on the first 100 at each evaluation) and returns the :class:`CourseRun`. Chapters 10
    and 11 both call it; whichever comes first trains, showing its progress as a live status
    that the cell's output never keeps (module docstring).
    """
    device = _device(device)
    run_config, name = _chapter10_key(device)
    return cached_run(run_config, name, device=device, root=root,
                      bleu_sentences=CHAPTER10_BLEU_SENTENCES,
                      val_sentences=CHAPTER10_VAL_SENTENCES)


def chapter10_model(device: torch.device | str | None = None, *,
                    root: str | Path | None = None) -> CourseRun:
    """The run chapter 11 evaluates: :func:`train_chapter10_model` (cached, else trained)."""
    return train_chapter10_model(device, root=root)


def chapter10_data(device: torch.device | str | None = None, *,
                   root: str | Path | None = None) -> PreparedData:
    """Chapter 10's encoded corpus (:class:`transformer_book.train.corpus.PreparedData`):
    Multi30k, the run's joint BPE (trained once, kept in the run folder) and the id lists,
    prepared under the run's lock so that it never races a training process (a wait is a
    status, as in :func:`cached_run`)."""
    device = _device(device)
    run_config, name = _chapter10_key(device)
    root = Path(root) if root is not None else course_cache_dir()
    status = _Status(name)
    with _locked(root / f"{name}.lock", status.say), status.capturing():
        data = prepare_data(run_config, root / name, val_sentences=CHAPTER10_VAL_SENTENCES)
    status.done()
    return data
