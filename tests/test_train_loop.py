"""The training loop (Section 5): exact resume, the non-finite guard, records, refusals.

Every test here trains (a few steps of configs/tiny.toml, shrunk): all are marked slow."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from typing import ClassVar

import pytest
import torch
from safetensors.torch import load_file

from transformer_book.inference.trained import load_trained
from transformer_book.run.checkpoint import list_checkpoints, load_checkpoint
from transformer_book.run.config import load_run_config
from transformer_book.train import step as step_module
from transformer_book.train.loop import train
from transformer_book.train.resume import ConfigMismatchError, check_compatible
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
    scheduled = [[e["step"] for e in r.evals if e["reason"] != "end of training"]
                 for r in (whole, second)]
    assert scheduled[0] == scheduled[1], "the same scheduled evaluations"
    # The first session's closing evaluation is part of the resumed run's history.
    assert [e["step"] for e in second.evals if e["reason"] == "end of training"] == [20, 30]
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


def _poison_loss_from(monkeypatch, call):
    """From the ``call``-th micro-batch on, the loss is NaN (a stand-in for a broken run)."""
    real = step_module.label_smoothed_cross_entropy
    calls = {"n": 0}

    def poisoned(*args, **kwargs):
        calls["n"] += 1
        loss = real(*args, **kwargs)
        return loss * float("nan") if calls["n"] >= call else loss

    monkeypatch.setattr(step_module, "label_smoothed_cross_entropy", poisoned)


def _records(folder):
    return [json.loads(p.read_text()) for p in sorted(folder.glob("train-*.json"))]


def test_nonfinite_loss_stops_with_a_diagnostic(multi30k_dir, tmp_path, monkeypatch):
    _poison_loss_from(monkeypatch, 3)
    assert not issubclass(NonFiniteLossError, BookError), "a divergence, not a bad input"
    with pytest.raises(NonFiniteLossError, match=r"became nan at step 3 \(lr .*batch shapes "
                       r"src \(\d+, \d+\) tgt \(\d+, \d+\)\); the last finite loss was "
                       r"[\d.]+ at step 2\. Try a lower learning rate"):
        train(_config(multi30k_dir, 10, checkpoint_every=2), tmp_path / "nan", **QUICK)
    assert not list_checkpoints(tmp_path / "nan"), \
        "step 2's weights gave the NaN: no step_* checkpoint of them is left to resume from"
    assert sorted(p.name for p in (tmp_path / "nan").glob("*step_*")) == \
        ["diverged-step_00000002"], "set aside, not deleted, and nothing after it"


def test_the_checkpoint_before_a_nan_is_set_aside_and_the_run_recorded(multi30k_dir, tmp_path,
                                                                       monkeypatch):
    """checkpoint_every = 1: the checkpoint just before the NaN holds the weights that broke;
    resume and translate must pick the one before it, and the record is written anyway."""
    _poison_loss_from(monkeypatch, 4)
    out, results = tmp_path / "out", tmp_path / "results"
    with pytest.raises(NonFiniteLossError, match="became nan at step 4"):
        train(_config(multi30k_dir, 10, checkpoint_every=1), out,
              **{**QUICK, "results_dir": results})
    assert [p.name for p in list_checkpoints(out)] == ["step_00000001", "step_00000002"]
    assert (out / "diverged-step_00000003" / "model.safetensors").is_file(), "kept for a look"
    assert load_trained(out).step == 2, "translate and evaluate use the newest sound one"
    [record] = _records(results)
    assert record["status"] == "diverged" and record["stop_reason"] == "diverged"
    assert record["diverged_at_step"] == 4 and record["steps"] == 3
    assert record["last_finite_loss"]["step"] == 3
    assert record["last_finite_loss"]["loss"] == record["loss_curve"][-1]["loss"]
    assert [p["step"] for p in record["loss_curve"]] == [1, 2, 3]
    assert record["final_checkpoint"].endswith("step_00000002")
    assert record["set_aside_checkpoint"].endswith("diverged-step_00000003")
    assert "became nan at step 4" in record["error"]


def test_exploded_weights_are_never_what_resume_picks(multi30k_dir, tmp_path):
    """A huge learning rate: step 1 is finite but its update explodes the weights, step 2's
    loss is NaN. The checkpoint of step 1 is set aside, and resuming does not pick it."""
    out, results = tmp_path / "out", tmp_path / "results"
    config = _config(multi30k_dir, 10, checkpoint_every=1, lr_factor=1e8)
    with pytest.raises(NonFiniteLossError, match=r"at step 2 .*last finite loss was [\d.]+ at "
                       r"step 1"):
        train(config, out, **{**QUICK, "results_dir": results})
    assert list_checkpoints(out) == []
    aside = load_file(out / "diverged-step_00000001" / "model.safetensors")
    assert max(float(t.abs().max()) for t in aside.values()) > 1e4, "the exploded weights"
    assert _records(results)[0]["status"] == "diverged"
    with pytest.raises(NonFiniteLossError, match="at step 2"):  # afresh, not from step 1
        train(config, out, **{**QUICK, "results_dir": results})
    assert sorted(p.name for p in out.glob("diverged-*")) == [
        "diverged-step_00000001", "diverged-step_00000001-2"], "each set aside, none replaced"


def test_nonfinite_weights_are_never_checkpointed(multi30k_dir, tmp_path, monkeypatch):
    real = step_module._update

    def breaking(trainer):
        real(trainer)
        if trainer.step == 1:  # the update of step 2 (trainer.step counts it afterwards)
            with torch.no_grad():
                next(trainer.model.parameters()).view(-1)[0] = float("inf")

    monkeypatch.setattr(step_module, "_update", breaking)
    out, results = tmp_path / "out", tmp_path / "results"
    with pytest.raises(NonFiniteLossError, match=r"^weights: expected finite values to "
                       r"checkpoint after step 2, received NaN or infinity in 1 of \d+ tensors "
                       r"\(\S+\); no checkpoint of step 2 was written"):
        train(_config(multi30k_dir, 10, checkpoint_every=2), out,
              **{**QUICK, "results_dir": results})
    assert sorted(p.name for p in out.iterdir()) == ["run.json", "tokenizer-info.json",
                                                     "tokenizer.json"], "no checkpoint"
    [record] = _records(results)
    assert record["status"] == "diverged" and record["diverged_at_step"] == 2
    assert record["final_checkpoint"] is None and record["set_aside_checkpoint"] is None


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
    with pytest.raises(ConfigMismatchError, match=r"\[model\] d_ff: 128 in the checkpoint, "
                       r"256 now"):
        train(config, root / "out", **QUICK)


def _snapshot(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


@pytest.mark.parametrize(("key", "value", "shown"), [
    ("lr_factor", 5.0, "lr_factor: 1.0 in the checkpoint, 5.0 now"),
    ("warmup_steps", 20, "warmup_steps: 10 in the checkpoint, 20 now"),
    ("clip_norm", 1.0, "clip_norm: None in the checkpoint, 1.0 now"),
    ("precision", "auto", "precision: 'fp32' in the checkpoint, 'auto' now"),
    ("accumulation", 2, "accumulation: 1 in the checkpoint, 2 now"),
    ("seed", 3, "seed: 0 in the checkpoint, 3 now"),
])
def test_resuming_with_another_schedule_is_refused(finished_run, multi30k_dir, key, value,
                                                   shown):
    """A changed optimisation setting would change the run half-way, while its record shows
    one value for the whole of it: refused, naming the setting, the saved and the new value,
    and the run folder is left as it was."""
    root, _ = finished_run
    before = _snapshot(root / "out")
    with pytest.raises(ConfigMismatchError, match=r"^resume: expected the config of the "
                       r"checkpoint .*step_00000012, received \[train\] " + re.escape(shown)):
        train(_config(multi30k_dir, 20, eval_every=6, **{key: value}), root / "out", **QUICK)
    assert _snapshot(root / "out") == before


def test_a_refused_data_change_leaves_the_tokenizer_alone(finished_run, multi30k_dir):
    root, _ = finished_run
    before = _snapshot(root / "out")
    config = _config(multi30k_dir, 20)
    config.data.vocab_size = 400
    with pytest.raises(ConfigMismatchError, match=r"\[data\] vocab_size: 500 in the "
                       r"checkpoint, 400 now"):
        train(config, root / "out", **QUICK)
    assert _snapshot(root / "out") == before, "tokenizer.json was not retrained"


def test_a_changed_precision_of_the_device_is_refused(finished_run, multi30k_dir):
    _, result = finished_run
    meta = load_checkpoint(result.final_checkpoint)
    config = _config(multi30k_dir, 12, eval_every=6)
    model_config = config.model_config(meta["config"]["model"]["vocab_size"])
    check_compatible(meta, config, model_config, 1, "fp32")
    with pytest.raises(ConfigMismatchError, match=r"precision \(resolved for the device\): "
                       r"'fp32' in the checkpoint, 'bf16' now"):
        check_compatible(meta, config, model_config, 1, "bf16")
    with pytest.raises(ConfigMismatchError, match=r"^resume: expected 1 processes .* received 2"):
        check_compatible(meta, config, model_config, 2, "fp32")


def test_bookkeeping_settings_may_change_on_resume(finished_run, multi30k_dir, tmp_path):
    root, first = finished_run
    shutil.copytree(root / "out", tmp_path / "out")
    config = _config(multi30k_dir, 14, eval_every=7, checkpoint_every=7, keep_last=3,
                     max_minutes=30.0)
    again = train(config, tmp_path / "out", **QUICK)
    assert again.resumed_from.name == "step_00000012" and again.step == 14
    assert again.losses[:12] == first.losses


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


def test_the_last_checkpoint_holds_the_last_evaluation(multi30k_dir, tmp_path):
    """Step 20 is a checkpoint step (every 10) but no evaluation step: its checkpoint is
    written again after the end-of-training evaluation, so choosing by val can see it."""
    result = train(_config(multi30k_dir, 20), tmp_path / "out", **{**QUICK, "bleu_sentences": 0})
    assert result.final_checkpoint.name == "step_00000020"
    evals = load_checkpoint(result.final_checkpoint)["extra"]["evals"]
    assert [e["step"] for e in evals][-1] == 20 and evals[-1]["reason"] == "end of training"


def test_bpe_dropout_resegments_every_epoch(multi30k_dir, tmp_path, monkeypatch):
    """``[data] bpe_dropout``: every epoch trains on a fresh segmentation of the same pairs
    (the decoded text unchanged, within the length limit), and the run resumes."""
    from transformer_book.train import loop as loop_module

    seen = []
    real = loop_module.resegment_train

    def spy(data, p):
        real(data, p)
        assert [data.tokenizer.decode(s) for s in data.train_src] == [
            s for s, _ in data.train_pairs]
        assert max(map(len, data.train_src)) <= data.stats["max_len"]
        seen.append((p, [list(s) for s in data.train_src]))

    monkeypatch.setattr(loop_module, "resegment_train", spy)
    config = _config(multi30k_dir, 25)
    config.data.bpe_dropout = 0.2
    result = train(config, tmp_path / "out", **QUICK)
    assert result.step == 25 and result.epoch >= 2
    assert len(seen) == result.epoch + 1 and {p for p, _ in seen} == {0.2}
    assert seen[0][1] != seen[1][1]  # a new segmentation per epoch
    assert all(torch.isfinite(_losses(result)))
    record = load_checkpoint(result.final_checkpoint)["config"]["run"]["data"]
    assert record["bpe_dropout"] == 0.2
    config.train.max_steps = 30
    again = train(config, tmp_path / "out", **QUICK)
    assert again.resumed_from.name == "step_00000025" and again.step == 30


def test_a_checkpoint_from_before_bpe_dropout_resumes(finished_run, multi30k_dir, tmp_path):
    """Checkpoints written before ``[data] bpe_dropout`` existed have no such key: it was 0
    then, so they resume with 0 and are refused with another value."""
    root, _ = finished_run
    shutil.copytree(root / "out", tmp_path / "out")
    newest = list_checkpoints(tmp_path / "out")[-1] / "checkpoint.json"
    meta = json.loads(newest.read_text())
    del meta["config"]["run"]["data"]["bpe_dropout"]
    newest.write_text(json.dumps(meta))
    digest = hashlib.sha256(newest.read_bytes()).hexdigest()
    (newest.parent / "checkpoint.sha256").write_text(f"{digest}  checkpoint.json\n")
    config = _config(multi30k_dir, 20, eval_every=6)
    config.data.bpe_dropout = 0.1
    with pytest.raises(ConfigMismatchError, match=r"\[data\] bpe_dropout: 0.0 in the "
                       r"checkpoint, 0.1 now"):
        train(config, tmp_path / "out", **QUICK)
    assert train(_config(multi30k_dir, 14, eval_every=7), tmp_path / "out", **QUICK).step == 14


def test_bpe_dropout_is_refused_with_several_processes(multi30k_dir, tmp_path):
    """Each process would draw its own segmentation (the draws cannot be seeded), so their
    epochs would have different batches: refused before anything is read or written."""
    from transformer_book.train.runtime import DistInfo
    from transformer_book.train.session import TrainOptions, open_session
    from transformer_book.util.timing import Stopwatch

    config = _config(multi30k_dir)
    config.data.bpe_dropout = 0.1
    with pytest.raises(BookError, match=r"^\[data\] bpe_dropout: expected 0 when training "
                       r"with several processes .* received 0.1 with 2 processes"):
        options = TrainOptions(resume=True, progress=False, on_eval=None, results_dir=None,
                               name="tiny", command=None, bleu_sentences=4, val_sentences=16)
        open_session(config, tmp_path / "out", options,
                     DistInfo(rank=0, world_size=2), torch.device("cpu"), Stopwatch())
    assert not (tmp_path / "out").exists()


class _CountingSha256:
    """``hashlib.sha256`` that records the bytes of every digest it gives (for counting)."""

    seen: ClassVar[list[bytes]] = []
    real = hashlib.sha256

    def __init__(self, data=b"", **kwargs):
        self._hash, self._data = self.real(**kwargs), bytearray()
        self.update(data)

    def update(self, data):
        self._data += data
        self._hash.update(data)

    def hexdigest(self):
        self.seen.append(bytes(self._data))
        return self._hash.hexdigest()

    def digest(self):
        self.seen.append(bytes(self._data))
        return self._hash.digest()


def test_a_resume_hashes_the_newest_checkpoint_once(finished_run, multi30k_dir, tmp_path,
                                                   monkeypatch):
    """Opening a session on a run folder verifies each file of the newest checkpoint once:
    every byte that is loaded was hashed, and none is hashed twice."""
    from transformer_book.train.runtime import DistInfo
    from transformer_book.train.session import TrainOptions, open_session
    from transformer_book.util.timing import Stopwatch

    root, _ = finished_run
    shutil.copytree(root / "out", tmp_path / "out")
    newest = list_checkpoints(tmp_path / "out")[-1]
    files = {name: (newest / name).read_bytes()
             for name in ("model.safetensors", "optimizer.pt", "rng.json")}
    monkeypatch.setattr(_CountingSha256, "seen", [])
    monkeypatch.setattr(hashlib, "sha256", _CountingSha256)
    options = TrainOptions(resume=True, progress=False, on_eval=None, results_dir=None,
                           name="tiny", command=None, bleu_sentences=0, val_sentences=16)
    session = open_session(_config(multi30k_dir, 20, eval_every=6), tmp_path / "out", options,
                           DistInfo(), torch.device("cpu"), Stopwatch())
    assert session.trainer.step == 12, "restored from the newest checkpoint"
    counts = {name: _CountingSha256.seen.count(data) for name, data in files.items()}
    assert counts == dict.fromkeys(files, 1), f"hashed {counts} times"


def test_the_fast_paths_resume_exactly_and_are_recorded(multi30k_dir, tmp_path):
    """``fast=True`` (cheaper dropout masks, the fused loss): a resumed run equals the
    uninterrupted one step for step; the record and checkpoints say so, and resuming it
    without ``fast`` is refused (its dropout draws would change)."""
    quick = {**QUICK, "bleu_sentences": 0, "fast": True}
    whole = train(_config(multi30k_dir, 14), tmp_path / "a",
                  **{**quick, "results_dir": tmp_path / "results"})
    train(_config(multi30k_dir, 10), tmp_path / "b", **quick)
    second = train(_config(multi30k_dir, 14), tmp_path / "b", **quick)
    assert torch.equal(_losses(whole), _losses(second)), "same losses, step for step"
    plain = train(_config(multi30k_dir, 14), tmp_path / "c", **{**quick, "fast": False})
    assert not torch.equal(_losses(whole), _losses(plain)), "other dropout draws"
    (record,) = _records(tmp_path / "results")
    assert record["fast"] is True
    meta = json.loads((whole.final_checkpoint / "checkpoint.json").read_text())
    assert meta["extra"]["fast"] is True
    with pytest.raises(BookError, match=r"^fast: expected True, as the run being resumed "
                       r"\(step_00000014\) was trained, received False"):
        train(_config(multi30k_dir, 20), tmp_path / "a", **{**quick, "fast": False})


def test_the_fast_paths_are_refused_with_several_processes(multi30k_dir, tmp_path):
    from transformer_book.train.runtime import DistInfo
    from transformer_book.train.session import TrainOptions, open_session
    from transformer_book.util.timing import Stopwatch

    options = TrainOptions(resume=True, progress=False, on_eval=None, results_dir=None,
                           name="tiny", command=None, bleu_sentences=4, val_sentences=16,
                           fast=True)
    with pytest.raises(BookError, match=r"^fast: expected False when training with several "
                       r"processes, received True"):
        open_session(_config(multi30k_dir), tmp_path / "out", options,
                     DistInfo(rank=0, world_size=2), torch.device("cpu"), Stopwatch())
    assert not (tmp_path / "out").exists()
