"""A training run killed (SIGKILL, its own process) in the middle of a checkpoint save.

The child process is ``tests/fault_wrapper.py``: it trains and dies at a chosen moment of
one save (while writing; before its only rename; between the two renames that replace an
existing checkpoint). After each kill, resume, translate and evaluate must use the newest
complete checkpoint, the leftovers must be cleaned (and reported), and the run resumed
after all three kills must match an uninterrupted one bit for bit: losses and weights.
Trains (4 short sessions and a reference): marked slow.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from transformer_book.cli import main
from transformer_book.inference.trained import load_trained
from transformer_book.inference.translate import translate
from transformer_book.run.checkpoint import checkpoint_name, list_checkpoints
from transformer_book.run.config import load_run_config
from transformer_book.train.loop import train

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
QUICK = dict(progress=False, results_dir=None, bleu_sentences=0, val_sentences=16)


def _config(multi30k_dir, max_steps):
    """configs/tiny.toml shrunk (64 pairs, 128-token batches): a checkpoint every 4 steps."""
    config = load_run_config(REPO / "configs" / "tiny.toml")
    config.data.data_dir = str(multi30k_dir)
    config.data.train_subset = 64
    config.data.max_tokens = 128
    config.data.max_len = 32
    config.decode.max_len_a, config.decode.max_len_b = 0.5, 4
    t = config.train
    t.max_steps, t.max_minutes, t.eval_every, t.checkpoint_every, t.keep_last = \
        max_steps, None, 1000, 4, 10
    t.warmup_steps = 8
    config.validate()
    return config


def _killed(tmp_path, multi30k_dir, mode, step, out_dir):
    """Run the training child until the wrapper kills it during the save of ``step``."""
    config_path = tmp_path / f"config-{mode}.json"
    config_path.write_text(json.dumps(_config(multi30k_dir, 12).to_dict()))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    child = subprocess.run(
        [sys.executable, str(REPO / "tests" / "fault_wrapper.py"), mode, str(step),
         str(config_path), str(out_dir)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]


def _hidden(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".step_"))


def _names(folder):
    return [p.name for p in list_checkpoints(folder)]


def _evaluate(run_dir, results, capsys):
    code = main(["evaluate", "--checkpoint", str(run_dir), "--limit", "2", "--beam", "1",
                 "--results", str(results)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    record = json.loads(sorted(results.glob("evaluate-*.json"))[-1].read_text())
    return record, captured.err


def _translate_line(run_dir, capsys):
    assert main(["translate", "--checkpoint", str(run_dir), "--beam", "1",
                 "ein Hund läuft"]) == 0
    return capsys.readouterr().out.strip()


def test_killed_saves_lose_nothing_and_resume_exactly(multi30k_dir, tmp_path, capsys):
    whole = train(_config(multi30k_dir, 16), tmp_path / "whole", **QUICK)
    run = tmp_path / "run"
    results = tmp_path / "results"
    results.mkdir()

    # 1. Killed while writing step 8: the half-written folder goes, step 4 is the newest.
    _killed(tmp_path, multi30k_dir, "write", 8, run)
    assert _hidden(run) and [p.name for p in run.glob("step_*")] == [checkpoint_name(4)]
    assert _names(run) == [checkpoint_name(4)]
    assert "removed .step_00000008.tmp-" in capsys.readouterr().err
    assert _hidden(run) == []
    assert load_trained(run).step == 4

    # 2. Resumed, then killed between the renames replacing step 8: neither copy in
    # place; evaluate and translate recover the new one rather than fall back to step 4.
    _killed(tmp_path, multi30k_dir, "between", 8, run)
    assert not (run / checkpoint_name(8)).exists() and len(_hidden(run)) == 2
    record, err = _evaluate(run, results, capsys)
    assert "step_00000008: recovered from .step_00000008.tmp-" in err
    assert record["step"] == 8 and record["checkpoints"] == [str(run / checkpoint_name(8))]
    assert _hidden(run) == []
    expected = translate(load_trained(run / checkpoint_name(8)), ["ein Hund läuft"],
                         beam_size=1)
    assert _translate_line(run, capsys) == expected[0]

    # 3. Resumed, then killed before the only rename of step 12 (the copy complete):
    # resuming recovers it and goes on from step 12, not from step 8.
    _killed(tmp_path, multi30k_dir, "rename", 12, run)
    assert not (run / checkpoint_name(12)).exists() and len(_hidden(run)) == 1
    resumed = train(_config(multi30k_dir, 16), run, **QUICK)
    assert "step_00000012: recovered from .step_00000012.tmp-" in capsys.readouterr().err
    assert resumed.resumed_from == run / checkpoint_name(12)
    assert _hidden(run) == []

    # Bit-exact against the uninterrupted run: every loss and every final weight.
    assert [e["loss"] for e in resumed.losses] == [e["loss"] for e in whole.losses]
    assert len(resumed.losses) == 16
    a = load_file(whole.final_checkpoint / "model.safetensors")
    b = load_file(resumed.final_checkpoint / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert _names(tmp_path / "whole") == _names(run)

    # An edited config in the newest checkpoint: one line, exit 2, nothing changed.
    meta = resumed.final_checkpoint / "checkpoint.json"
    before = meta.read_text()
    meta.write_text(before.replace('"norm_first": false', '"norm_first": true'))
    assert main(["translate", "--checkpoint", str(run), "ein Hund"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "step_00000016/checkpoint.json: expected sha256" in err


def test_a_second_training_of_one_folder_is_refused_while_the_first_runs(tmp_path,
                                                                        multi30k_dir):
    """Two trainings with one --out (two terminals with the default --out) used to both
    exit 0, the second's record naming the first's weights: the second is refused at once,
    naming the folder, and the first finishes untouched."""
    import fcntl
    import time

    from transformer_book.util.validation import BookError

    config = tmp_path / "config.toml"
    config.write_text((REPO / "configs" / "tiny.toml").read_text().replace(
        "[data]", f'[data]\ndata_dir = "{multi30k_dir}"', 1))
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    first = subprocess.Popen(
        [sys.executable, "-m", "transformer_book.cli", "train", "--config", str(config),
         "--out", str(out), "--max-steps", "400", "--results", str(tmp_path / "results"),
         "--quiet", "--bleu-sentences", "0", "--val-sentences", "16", "--seed", "0"],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:  # until the first training holds the folder's lock
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            if out.is_dir():
                descriptor = os.open(out, os.O_RDONLY)
                try:
                    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    fcntl.flock(descriptor, fcntl.LOCK_UN)
                except OSError:
                    break  # held
                finally:
                    os.close(descriptor)
            time.sleep(0.05)
        second = _config(multi30k_dir, 4)
        second.train.seed = 1
        with pytest.raises(BookError, match=r"out_dir: .*another training is writing now"):
            train(second, out, **QUICK)
        assert main(["train", "--config", str(config), "--out", str(out), "--seed", "1",
                     "--quiet", "--results", str(tmp_path / "results")]) == 2
    finally:
        first.kill()
        first.communicate()
