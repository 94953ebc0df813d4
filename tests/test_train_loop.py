"""The training loop (Section 5): exact resume, the non-finite guard, records, refusals.

Every test here trains (a few steps of configs/tiny.toml, shrunk): all are marked slow."""

from __future__ import annotations

import json
import re

import pytest
import torch
from safetensors.torch import load_file

from transformer_book.run.config import load_run_config
from transformer_book.train import step as step_module
from transformer_book.train.loop import train
from transformer_book.train.step import NonFiniteLossError
from transformer_book.util.validation import BookError

pytestmark = pytest.mark.slow

QUICK = dict(progress=False, results_dir=None, bleu_sentences=4, val_sentences=16)


def _config(multi30k_dir, max_steps=40, **train_changes):
    """configs/tiny.toml shrunk further: 64 pairs, 128-token batches (~10 steps an epoch)."""
    config = load_run_config("configs/tiny.toml")
    config.data.data_dir = str(multi30k_dir)
    config.data.train_subset = 64
    config.data.max_tokens = 128
    config.data.max_len = 32
    t = config.train
    t.max_steps, t.max_minutes, t.eval_every, t.checkpoint_every, t.keep_last = \
        max_steps, None, 1000, 10, 5
    for key, value in train_changes.items():
        setattr(t, key, value)
    config.validate()
    return config


def _losses(result):
    return torch.tensor([entry["loss"] for entry in result.losses], dtype=torch.float64)


def test_interrupted_and_resumed_run_matches_uninterrupted(multi30k_dir, tmp_path):
    quick = {**QUICK, "bleu_sentences": 0}
    whole = train(_config(multi30k_dir, 30), tmp_path / "a", **quick)
    first = train(_config(multi30k_dir, 20), tmp_path / "b", **quick)
    assert first.step == 20 and first.final_checkpoint.name == "step_00000020"
    second = train(_config(multi30k_dir, 30), tmp_path / "b", **quick)
    assert second.resumed_from.name == "step_00000020", "resumes from the newest checkpoint"
    assert whole.step == second.step == 30 and whole.epoch == second.epoch >= 2, \
        "the run crosses epoch boundaries (per-epoch reshuffle)"
    assert len(second.losses) == 30, "the resumed run keeps the first session's losses"
    assert torch.equal(_losses(whole), _losses(second)), "same losses, step for step"
    assert [e["step"] for e in whole.evals] == [e["step"] for e in second.evals]
    a = load_file(whole.final_checkpoint / "model.safetensors")
    b = load_file(second.final_checkpoint / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a), "same final weights"
    # One name per time: train_seconds is the whole run's (both sessions), wall_seconds
    # this session's, step_seconds this session's time inside optimizer steps.
    assert 0 < second.step_seconds <= second.wall_seconds < second.train_seconds
    assert second.train_seconds <= first.train_seconds + second.wall_seconds
    assert whole.train_seconds == whole.wall_seconds, "a fresh run: one session"
    meta = json.loads((second.final_checkpoint / "checkpoint.json").read_text())
    assert second.wall_seconds < meta["extra"]["train_seconds"] <= second.train_seconds


def test_accumulation_normalises_per_target_token(multi30k_dir, tmp_path):
    result = train(_config(multi30k_dir, 3, accumulation=2, checkpoint_every=100),
                   tmp_path / "acc", **{**QUICK, "bleu_sentences": 0})
    assert result.step == 3
    assert all(entry["loss"] < 10 for entry in result.losses), \
        "a per-token mean (ln 500 ~ 6.2 at the start), not a sum over tokens"


def test_nonfinite_loss_stops_with_a_diagnostic(multi30k_dir, tmp_path, monkeypatch):
    real = step_module.label_smoothed_cross_entropy
    calls = {"n": 0}

    def poisoned(*args, **kwargs):
        calls["n"] += 1
        loss = real(*args, **kwargs)
        return loss * float("nan") if calls["n"] >= 3 else loss

    monkeypatch.setattr(step_module, "label_smoothed_cross_entropy", poisoned)
    assert issubclass(NonFiniteLossError, BookError), "the CLI reports it in one line"
    with pytest.raises(NonFiniteLossError, match=r"became nan at step 3 \(lr .*batch shapes "
                       r"src \(\d+, \d+\) tgt \(\d+, \d+\)\); the last finite loss was "
                       r"[\d.]+ at step 2\. Try a lower learning rate"):
        train(_config(multi30k_dir, 10, checkpoint_every=2), tmp_path / "nan", **QUICK)
    names = sorted(p.name for p in (tmp_path / "nan").glob("step_*"))
    assert names == ["step_00000002"], "nothing is checkpointed after the loss broke"


@pytest.fixture(scope="module")
def finished_run(multi30k_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("run")
    result = train(_config(multi30k_dir, 12, eval_every=6), root / "out",
                   **{**QUICK, "results_dir": root / "results"}, name="tiny",
                   command=["transformer-book", "train", "--config", "configs/tiny.toml"])
    return root, result


def test_record_has_config_commit_hardware_curves(finished_run):
    root, result = finished_run
    assert re.fullmatch(r"train-tiny-\d{8}T\d{6}Z\.json", result.record_path.name)
    assert result.record_path.parent == root / "results"
    record = json.loads(result.record_path.read_text())
    for key in ("config", "git", "hardware", "wall_seconds", "train_seconds", "step_seconds",
                "tokens_per_second",
                "seconds_per_step", "loss_curve", "evals", "final_checkpoint", "command",
                "precision", "world_size", "num_parameters", "data"):
        assert key in record, key
    assert re.fullmatch(r"[0-9a-f]{40}|unknown", record["git"]["commit"])
    assert {"device", "device_name", "cpu_count", "torch_threads", "torch"} <= set(
        record["hardware"])
    assert record["command"] == "transformer-book train --config configs/tiny.toml"
    assert [p["step"] for p in record["loss_curve"]] == list(range(1, 13))
    assert {"step", "loss", "lr", "tokens"} <= set(record["loss_curve"][0])
    steps = [e["step"] for e in record["evals"]]
    assert {6, 12} <= set(steps) and "end of epoch" in {e["reason"] for e in record["evals"]}
    assert record["evals"][-1]["bleu_signature"].startswith("nrefs:1|case:mixed")
    assert "val_loss" in record["evals"][-1] and "bleu" in record["evals"][-1]
    assert record["final_checkpoint"].endswith("step_00000012")
    assert record["tokens_per_second"] > 0 and record["config"]["data"]["train_subset"] == 64
    assert record["train_seconds"] == record["wall_seconds"] == result.wall_seconds
    assert record["step_seconds"] == result.step_seconds <= result.wall_seconds
    assert record["seconds_per_step"] == pytest.approx(record["step_seconds"] / 12)


def test_no_resume_refuses_a_folder_with_checkpoints(finished_run, multi30k_dir):
    root, _ = finished_run
    with pytest.raises(ValueError, match="resume: expected an out folder without checkpoints"):
        train(_config(multi30k_dir, 12), root / "out", resume=False, **QUICK)


def test_resuming_with_another_config_is_refused(finished_run, multi30k_dir):
    root, _ = finished_run
    config = _config(multi30k_dir, 20)
    config.model.overrides["d_ff"] = 256
    with pytest.raises(ValueError, match=r"\[model\] d_ff: 128 in the checkpoint, 256 now"):
        train(config, root / "out", **QUICK)


def test_run_already_at_max_steps_does_nothing(finished_run, multi30k_dir):
    root, first = finished_run
    again = train(_config(multi30k_dir, 12, eval_every=6), root / "out", **QUICK)
    assert again.step == 12 and again.losses == first.losses
    assert again.final_checkpoint == first.final_checkpoint


def test_bad_arguments_are_named(multi30k_dir, tmp_path):
    with pytest.raises(ValueError, match="run_config: expected a RunConfig"):
        train({"model": {}}, tmp_path)
    with pytest.raises(ValueError, match="bleu_sentences: expected an integer >= 0"):
        train(_config(multi30k_dir), tmp_path, bleu_sentences=-1)
