"""The course cache trains a run once, reuses it, never uses a half-written one, and lets
only one of several processes train."""

from __future__ import annotations

import json
import multiprocessing
import re
from pathlib import Path

import pytest

from transformer_book.course import cache as course_cache
from transformer_book.course.cache import (
    MARKER,
    cached_run,
    chapter10_dir,
    chapter10_run_config,
    config_hash,
    course_cache_dir,
    load_completed,
)
from transformer_book.data.multi30k import DatasetUnavailableError
from transformer_book.inference.trained import load_trained
from transformer_book.run.checkpoint import list_checkpoints
from transformer_book.run.config import RunConfig
from transformer_book.train import corpus
from transformer_book.train import loop as loop_module
from transformer_book.train.loop import train
from transformer_book.train.step import NonFiniteLossError
from transformer_book.util.validation import BookError


def tiny_config(data_dir: Path, d_model: int = 32, steps: int = 3) -> RunConfig:
    return RunConfig.from_dict({
        "model": {"preset": "tiny", "d_model": d_model, "num_heads": 2, "d_ff": 32,
                  "num_encoder_layers": 1, "num_decoder_layers": 1, "max_len": 64},
        "data": {"vocab_size": 300, "max_tokens": 400, "train_subset": 48, "max_len": 60,
                 "data_dir": str(data_dir)},
        "train": {"max_steps": steps, "warmup_steps": 2, "eval_every": steps,
                  "checkpoint_every": steps, "keep_last": 2, "precision": "fp32"},
        "decode": {"beam_size": 1, "max_len_b": 3},
    })


def run(config: RunConfig, root: Path, name: str = "tiny-run"):
    return cached_run(config, name, device="cpu", root=root, bleu_sentences=2, val_sentences=4)


def test_cache_dir_prefers_the_variable_then_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv("TRANSFORMER_BOOK_CACHE", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert course_cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("TRANSFORMER_BOOK_CACHE")
    assert course_cache_dir() == tmp_path / "xdg" / "transformer_book" / "course"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert course_cache_dir() == tmp_path / "home" / ".cache" / "transformer_book" / "course"


def test_chapter10_config_is_sized_in_steps_by_device(tmp_path):
    cpu, cuda = chapter10_run_config("cpu"), chapter10_run_config("cuda")
    assert cpu.train.max_minutes is None and cuda.train.max_minutes is None
    assert cuda.train.max_steps > cpu.train.max_steps
    assert cpu.model.overrides == cuda.model.overrides and cpu.data == cuda.data
    assert cpu.train.warmup_steps < cpu.train.max_steps, "the warmup fits the budget"
    assert chapter10_dir("cpu", root=tmp_path).name.startswith("ch10-")
    assert chapter10_dir("cpu", root=tmp_path) != chapter10_dir("cuda", root=tmp_path)
    assert chapter10_dir("cpu", root=tmp_path).parent == tmp_path


def test_config_hash_follows_the_config_not_the_data_folder(tmp_path):
    a = tiny_config(tmp_path / "one")
    assert config_hash(a) == config_hash(tiny_config(tmp_path / "two"))
    assert config_hash(a) != config_hash(tiny_config(tmp_path, d_model=16))
    assert config_hash(a, bleu=2) != config_hash(a, bleu=3)
    with pytest.raises(ValueError, match="run_config"):
        config_hash({"model": {}})


@pytest.mark.slow
def test_trains_once_then_reuses(multi30k_dir, tmp_path):
    config = tiny_config(multi30k_dir)
    first = run(config, tmp_path)
    assert first.trained_now and first.steps == 3
    assert first.train_seconds >= first.wall_seconds * 0.5 > 0, "the whole run's time"
    assert (first.run_dir / MARKER).is_file()
    assert first.final_checkpoint == list_checkpoints(first.run_dir)[-1]
    second = run(config, tmp_path)
    assert not second.trained_now
    assert second.losses == first.losses and second.evals == first.evals
    assert second.run_config.to_dict() == config.to_dict()
    trained = load_trained(second.run_dir)
    assert trained.step == 3


@pytest.mark.slow
def test_a_run_without_its_marker_is_never_used(multi30k_dir, tmp_path):
    config = tiny_config(multi30k_dir)
    first = run(config, tmp_path)
    (first.run_dir / MARKER).unlink()
    assert load_completed(first.run_dir) is None
    again = run(config, tmp_path)
    assert again.trained_now, "no marker: the run is finished again (resumed), not trusted"
    (first.run_dir / MARKER).write_text("{ half a file", encoding="utf-8")
    assert load_completed(first.run_dir) is None
    marker = json.loads(json.dumps({"version": course_cache.CACHE_VERSION}))
    (first.run_dir / MARKER).write_text(json.dumps(marker), encoding="utf-8")
    assert load_completed(first.run_dir) is None


@pytest.mark.slow
def test_checkpoints_of_another_config_are_moved_aside(multi30k_dir, tmp_path, capsys):
    """A proven mismatch (the checkpoints were written by another configuration) starts
    afresh, but nothing is deleted: the old run goes to a sibling named with the UTC time."""
    old = run(tiny_config(multi30k_dir, d_model=16), tmp_path)
    (old.run_dir / MARKER).unlink()
    before = _snapshot(old.run_dir)
    new_config = tiny_config(multi30k_dir, d_model=32)
    new = run(new_config, tmp_path)
    assert new.trained_now and new.run_config.to_dict() == new_config.to_dict()
    assert load_trained(new.run_dir).model_config.d_model == 32
    [aside] = tmp_path.glob("tiny-run.aside-*")
    assert re.fullmatch(r"tiny-run\.aside-\d{8}T\d{6}Z", aside.name)
    assert _snapshot(aside) == before, "the old run, every file of it, moved aside"
    assert load_trained(aside).model_config.d_model == 16
    err = capsys.readouterr().err
    assert "do not fit this configuration" in err and f"moved to {aside}" in err
    assert "[model] d_model: 16 in the checkpoint, 32 now" in err


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def _interrupted(multi30k_dir: Path, root: Path, steps: int = 2) -> Path:
    """A run of tiny_config stopped after ``steps`` of its 4 steps (no completion marker)."""
    config = tiny_config(multi30k_dir, steps=4)
    config.train.max_steps, config.train.checkpoint_every = steps, 1
    train(config, root / "tiny-run", progress=False, results_dir=None, bleu_sentences=2,
          val_sentences=4)
    return root / "tiny-run"


@pytest.mark.slow
def test_offline_an_interrupted_run_is_left_alone(multi30k_dir, tmp_path, monkeypatch):
    """Offline, the data cannot be loaded: the error propagates and the interrupted run's
    checkpoints are all still there (they used to be deleted, and the run failed anyway)."""
    run_dir = _interrupted(multi30k_dir, tmp_path)
    before = _snapshot(run_dir)

    def offline(*args, **kwargs):
        raise DatasetUnavailableError("Multi30k: expected the files or a network, received "
                                      "neither")

    monkeypatch.setattr(corpus, "load_corpus", offline)
    with pytest.raises(DatasetUnavailableError, match="received neither"):
        run(tiny_config(multi30k_dir, steps=4), tmp_path)
    assert _snapshot(run_dir) == before
    assert not list(tmp_path.glob("tiny-run.aside-*"))
    monkeypatch.undo()  # online again: the run resumes from its step 2
    resumed = run(tiny_config(multi30k_dir, steps=4), tmp_path)
    assert resumed.steps == 4 and len(resumed.losses) == 4


@pytest.mark.slow
def test_a_corrupt_file_is_reported_and_nothing_is_retrained(multi30k_dir, tmp_path):
    """One corrupt rng.json in the newest checkpoint: a BookError naming the file; the good
    older checkpoints are kept (they used to be deleted with it, and the run retrained)."""
    run_dir = _interrupted(multi30k_dir, tmp_path, steps=3)
    newest = list_checkpoints(run_dir)[-1]
    (newest / "rng.json").write_text("{}", encoding="utf-8")
    before = _snapshot(run_dir)
    with pytest.raises(BookError, match=re.escape(str(newest / "rng.json")) + ": expected "
                       "sha256"):
        run(tiny_config(multi30k_dir, steps=4), tmp_path)
    assert _snapshot(run_dir) == before
    assert [p.name for p in list_checkpoints(run_dir)] == ["step_00000002", "step_00000003"]
    assert not list(tmp_path.glob("tiny-run.aside-*"))


@pytest.mark.slow
def test_a_diverged_run_is_left_alone(multi30k_dir, tmp_path, monkeypatch):
    """A run that broke keeps its checkpoints for a look; it is not retrained."""
    run_dir = _interrupted(multi30k_dir, tmp_path)
    before = _snapshot(run_dir)

    def nan_loss(*args, **kwargs):
        raise NonFiniteLossError("training loss became nan at step 3")

    monkeypatch.setattr(loop_module, "train_step", nan_loss)
    with pytest.raises(NonFiniteLossError):
        run(tiny_config(multi30k_dir, steps=4), tmp_path)
    assert not list(tmp_path.glob("tiny-run.aside-*"))
    # Every file is kept; the loop only renames the checkpoint whose weights broke.
    renamed = {k.replace("diverged-step_00000002", "step_00000002"): v
               for k, v in _snapshot(run_dir).items()}
    assert renamed == before


@pytest.mark.slow
def test_a_marker_of_another_config_is_not_reused(multi30k_dir, tmp_path):
    run(tiny_config(multi30k_dir, d_model=16), tmp_path)
    other = tiny_config(multi30k_dir, d_model=32)
    again = run(other, tmp_path)
    assert again.trained_now and load_trained(again.run_dir).model_config.d_model == 32


def _worker(args):
    data_dir, root = args
    return run(tiny_config(Path(data_dir)), Path(root)).trained_now


@pytest.mark.slow
def test_two_processes_at_once_train_only_once(multi30k_dir, tmp_path):
    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as pool:
        trained = pool.map(_worker, [(str(multi30k_dir), str(tmp_path))] * 2)
    assert sorted(trained) == [False, True], "one process trained, the other waited and reused"


def test_bad_names_are_refused(tmp_path):
    config = tiny_config(tmp_path)
    for name in ("", "a/b", ".hidden"):
        with pytest.raises(ValueError, match="name"):
            cached_run(config, name, root=tmp_path)


# What a notebook cell shows of the cache: the same output whether the run is trained by that
# cell, waited for while another kernel trains it, or found finished (a newcomer's first
# `make test` starts with an empty cache; every later one finds it full).
CELL = """\
import json, os
from pathlib import Path
from transformer_book.course.cache import cached_run
from transformer_book.run.config import RunConfig

root = Path(os.environ["TB_TEST_ROOT"])
(root.parent / ("started-" + os.environ["TB_TEST_LABEL"])).touch()
config = RunConfig.from_dict(json.loads(os.environ["TB_TEST_CONFIG"]))
run = cached_run(config, "tiny-run", device="cpu", root=root, bleu_sentences=2,
                 val_sentences=4)
(root.parent / ("trained-" + os.environ["TB_TEST_LABEL"])).write_text(str(run.trained_now))
print(f"tiny-run: step {run.steps}")
"""
SHOWN = "tiny-run: step 3\n"


def _cell_notebook(path: Path, executed: bool) -> Path:
    """A one-cell notebook of CELL; ``executed``: with the output a warm cache gives."""
    import nbformat

    cell = nbformat.v4.new_code_cell(CELL)
    if executed:
        cell.execution_count = 1
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=SHOWN)]
    notebook = nbformat.v4.new_notebook(cells=[cell])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                       "language": "python"}
    nbformat.write(notebook, path)
    return path


def _start(command: list[str], label: str, root: Path, config: RunConfig, cwd: Path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "TB_TEST_ROOT": str(root), "TB_TEST_LABEL": label,
           "TB_TEST_CONFIG": json.dumps(config.to_dict())}
    return subprocess.Popen([sys.executable, *command], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _nbval(path: Path) -> list[str]:
    return ["-m", "pytest", "--nbval", str(path), "-q", "-p", "no:cacheprovider",
            "-p", "no:randomly", "-p", "no:xdist"]


def _stored(path: Path) -> list[dict]:
    import nbformat

    return [dict(output) for output in nbformat.read(path, as_version=4).cells[0].outputs]


@pytest.mark.slow
def test_a_cell_shows_the_same_whether_it_trains_waits_or_finds_the_run(multi30k_dir,
                                                                       tmp_path):
    """Two kernels ask one empty cache at once: one trains, the other waits for it; one
    stores its outputs as `make execute` does, the other is checked by nbval against the
    warm cache's output. Then a warm kernel gives that output again, and nbval passes."""
    import fcntl
    import time

    execute = str(Path(__file__).resolve().parents[1] / "scripts" / "execute_notebooks.py")
    root, config = tmp_path / "cache", tiny_config(multi30k_dir)
    root.mkdir()
    stored = _cell_notebook(tmp_path / "stored.ipynb", executed=False)
    checked = _cell_notebook(tmp_path / "checked.ipynb", executed=True)
    with open(root / "tiny-run.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # both kernels start while the run is not there
        kernels = [_start([execute, str(stored)], "execute", root, config, tmp_path),
                   _start(_nbval(checked), "nbval", root, config, tmp_path)]
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"started-{n}").exists() for n in ("execute", "nbval")):
            assert time.monotonic() < deadline, "the kernels started"
            assert all(k.poll() is None for k in kernels), [k.communicate() for k in kernels]
            time.sleep(0.1)
        time.sleep(1.0)  # both are in cached_run: waiting for the lock
        fcntl.flock(lock, fcntl.LOCK_UN)
        logs = [k.communicate(timeout=300)[0] for k in kernels]
    assert [k.returncode for k in kernels] == [0, 0], "\n".join(logs)
    trained = {n: (tmp_path / f"trained-{n}").read_text() for n in ("execute", "nbval")}
    assert sorted(trained.values()) == ["False", "True"], "one trained, the other waited"
    assert _stored(stored) == [{"output_type": "stream", "name": "stdout", "text": SHOWN}], (
        "the stored output is the warm cache's: no status, no empty display left")
    for path in (stored, checked):  # warm now: nbval passes on either notebook
        warm = _start(_nbval(path), "warm", root, config, tmp_path)
        log = warm.communicate(timeout=300)[0]
        assert warm.returncode == 0, log
    assert (tmp_path / "trained-warm").read_text() == "False"


def test_the_status_goes_to_stderr_outside_a_kernel(capsys):
    status = course_cache._Status("run-x")
    with status.capturing():
        print("step 1 (eval): val loss 3.2")
        print("half a line", end="")
    status.done()
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "run-x: step 1 (eval): val loss 3.2\nrun-x: half a line\n"
